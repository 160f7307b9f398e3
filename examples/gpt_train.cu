/* gpt_train — train a GPT-2 model with megatron.h: one rank, or t tensor-parallel × p pipeline
   × d data-parallel ranks under mpirun (d = ranks / (t·p)).

   Built by make as build/gpt_train (cc -x c: the CPU) and build/gpt_train_cuda (nvcc: the GPU
   when present, else the CPU). Megatron-LM's flag names; `gpt_train --help` lists them all in
   Megatron-LM's argument groups (network size, regularization, training, …).

       build/gpt_train --data-path data/tiny --vocab-size 256 --num-layers 4 --hidden-size 128 \
           --num-attention-heads 4 --seq-length 128 --micro-batch-size 8 --global-batch-size 16 \
           --train-iters 200 --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 20 \
           --log-interval 10 --eval-interval 50 --eval-iters 5 --save ckpt --sample-tokens 200

   Tensor (and sequence) parallel over 4 ranks — the same run, the same math:
       mpirun -np 4 build/gpt_train --tensor-model-parallel-size 4 --sequence-parallel …
  Pipeline parallel: launch p ranks, each holds layers/p of the model (or v interleaved chunks):
       mpirun -np 4 build/gpt_train … --num-layers 8 --pipeline-model-parallel-size 4 \
           --num-layers-per-virtual-pipeline-stage 1 --pipeline-trace run.trace
       build/pipeline_sim --trace run.trace --svg run.svg       (the measured timeline)
   Both: t·p ranks, each stage a tensor-parallel group of t (tensor-parallel ranks adjacent):
       mpirun -np 4 build/gpt_train … --tensor-model-parallel-size 2 \
           --pipeline-model-parallel-size 2
   Tensor × data parallel over 4 ranks (d = 4/t = 2 replicas, each reading half of every global
   batch; ZeRO-1 shards the AdamW moments over the replicas):
       mpirun -np 4 build/gpt_train --tensor-model-parallel-size 2 --use-distributed-optimizer …

   The program is the loop below; everything it calls is in megatron.h (section 5, "Trainer"):
   parse the flags, check the whole configuration and every file before any work (one line
   "gpt_train: error: …", exit status 2), build the model, then iterate: step, log, evaluate,
   save. At the end: final checkpoint, validation, optional Hugging Face export and a sample.
   After the first iteration rank 0 prints every rank's memory beside the planner's
   prediction; --exit-signal-handler, --exit-duration-in-mins and --exit-interval end the loop
   early with a checkpoint and status 0 on every rank; with --log-jsonl the run ends by
   drawing the log as an SVG picture (docs/operating.md).
   A data set whose validation part is empty (too few documents for --split) trains without
   validation, as Megatron-LM does: one line "gpt_train: validation skipped: …" says why.
   Every rank runs this program (mpirun starts them); every rank checks the configuration
   the same way before any communication, so a bad one fails everywhere with one line printed
   by rank 0. Rank 0 prints the log; the others run silently.                               */
#define MG_IMPLEMENTATION
#include "megatron.h"
#include "mg_plan.h"          /* the memory report's prediction */
#include <sys/resource.h>

static mg_comm comm;

/* Ends every rank with status `code`; rank 0 prints msg (when given) as the one error line. */
static int finish(int code, const char *msg) {
    if (msg && comm.world_rank == 0) fprintf(stderr, "gpt_train: error: %s\n", msg);
    mg_comm_finalize(&comm);
    return code;
}

/* Which layers each pipeline stage holds (Megatron's assignment: with v chunks per rank,
   rank pp holds virtual stages pp, pp + p, …), and where the embeddings and the head live. */
static void print_stage_layers(const mg_trainer *tr) {
    int s, c;
    for (s = 0; s < tr->pp; s++) {
        mg_gpt_layout L = mg_gpt_layout_pipeline(&tr->cfg, 1, 1, s, tr->pp, tr->vp, 1, 0);
        printf(tr->pp > 1 ? "pipeline stage %d holds" : "every rank holds", s);
        for (c = 0; c < L.n_chunks; c++) {
            const mg_gpt_chunk *k = &L.chunks[c];
            printf("%s%s layer%s %d", c ? "," : "", k->has_embedding ? " the embeddings," : "",
                   k->layer_end - k->layer_begin > 1 ? "s" : "", k->layer_begin);
            if (k->layer_end - k->layer_begin > 1) printf("-%d", k->layer_end - 1);
            if (k->has_head) printf(", the final layernorm, output layer and loss");
        }
        printf("%s\n", tr->pp > 1 && tr->vp > 1 ? " (one model chunk per range)" : "");
    }
}

/* The planner's prediction (mg_plan.h) of this run's memory per rank, MB: weights, gradients,
   optimizer state and activations of the worst pipeline stage (0: it cannot evaluate it). */
static double planned_mb(const mg_trainer *tr, mg_plan_result *res) {
    const mg_gpt_config *g = &tr->cfg;
    mg_plan_model m;
    mg_plan_training t;
    mg_plan_cluster c;
    mg_plan_layout L;
    memset(&m, 0, sizeof m);
    memset(&t, 0, sizeof t);
    memset(&c, 0, sizeof c);
    memset(&L, 0, sizeof L);
    m.num_layers = g->n_layer; m.hidden_size = g->hidden; m.num_attention_heads = g->n_head;
    m.seq_length = g->seq_len; m.vocab_size = g->vocab_size; m.max_position_embeddings = g->max_pos;
    m.num_query_groups = g->n_query_groups; m.kv_channels = g->kv_channels;
    m.ffn_hidden_size = g->ffn_hidden; m.swiglu = g->swiglu;
    m.rmsnorm = g->normalization == MG_NORM_RMSNORM;
    m.position_embedding = g->position_embedding;    /* MG_POS_* = MG_PLAN_POS_* */
    m.untie_embeddings = g->untie_embeddings; m.disable_bias_linear = g->disable_bias_linear;
    m.add_qkv_bias = g->add_qkv_bias;
    t.global_batch_size = (long)tr->args.global_batch_size;
    t.precision = tr->args.bf16 ? MG_PLAN_BF16 : tr->args.fp16 ? MG_PLAN_FP16 : MG_PLAN_FP32;
    t.grads_in_fp32 = 1;                /* megatron.h accumulates fp32 gradients */
    t.overlap_grad_reduce = 1;
    t.grad_accum_fusion = 1;
    c.gpus = c.gpus_per_node = comm.world_size;
    mg_plan_gpu_preset("h100-sxm", &c.gpu);   /* only its memory size is read here: "fits" */
    L.t = tr->model.layout.tp_size; L.p = tr->pp; L.d = tr->dp_size; L.v = tr->vp;
    L.c = tr->cp_size;
    L.micro_batch_size = (int)tr->args.micro_batch_size;
    L.recompute = tr->model.layout.recompute_granularity;   /* MG_RECOMPUTE_* = MG_PLAN_* */
    L.sequence_parallel = tr->model.tf.tp.sequence_parallel;
    L.distributed_optimizer = tr->opt.dp != NULL;
    if (mg_plan_evaluate(&m, &t, &c, &L, res, NULL, 0)) return 0;
    return res->mem_total / 1048576.0;
}

/* The memory report after the first iteration, per rank as Megatron prints it ("[Rank r]
   memory (MB) | allocated | max allocated | reserved"): megatron.h takes every tensor from one
   arena per rank (mg_tensor.h), and on the GPU gives cuBLAS a workspace of its own making;
   mg_ctx_memory counts both as the allocator's allocated / max allocated / reserved —
   device memory on the GPU (where the device's memory in use by every process, NCCL's and
   CUDA's own buffers included, follows: cudaMemGetInfo), host memory on the CPU (there also
   inside the peak resident set, getrusage's ru_maxrss, which adds the program, MPI and the
   data). Beside it the planner's prediction for the same run. Collective: the figures travel
   to rank 0 by an all-gather through host memory.                                         */
#define MEM_FIGURES 5
static void memory_report(mg_trainer *tr, FILE *out) {
    float mine[MEM_FIGURES], *all = (float *)malloc(sizeof mine * (size_t)comm.world_size);
    mg_memory_stats st = mg_ctx_memory(&tr->ctx);
    struct rusage ru;
    mg_plan_result res;
    double plan;
    int r;
    if (!all) return;
    getrusage(RUSAGE_SELF, &ru);
    mine[0] = (float)(st.allocated / 1048576.0);
    mine[1] = (float)(st.max_allocated / 1048576.0);
    mine[2] = (float)(st.reserved / 1048576.0);
    mine[3] = (float)(ru.ru_maxrss / 1024.0);           /* kilobytes on Linux */
    mine[4] = (float)(mg_device_memory_used(&tr->ctx) / 1048576.0);
    if (comm.world_size > 1) {
        mg_ctx *ctx = comm.ctx;
        comm.ctx = NULL;                                /* host buffers */
        mg_all_gather(&comm, &comm.world, mine, all, MEM_FIGURES, MG_F32);
        comm.ctx = ctx;
    } else memcpy(all, mine, sizeof mine);
    if (out) {
        const float *a;
        memset(&res, 0, sizeof res);
        plan = planned_mb(tr, &res);
        for (r = 0; r < comm.world_size; r++) {
            a = all + MEM_FIGURES * r;
            fprintf(out, "[Rank %d] (after %lld iterations) memory (MB) | allocated: %.2f | max "
                    "allocated: %.2f | reserved: %.2f (%s %s) | CPU peak resident: %.2f", r,
                    (long long)tr->iteration, a[0], a[1], a[2], mg_device_name(&tr->ctx),
                    tr->ctx.blas_workspace ? "arena + cuBLAS workspace" : "arena", a[3]);
            if (tr->ctx.device == MG_DEVICE_CUDA)
                fprintf(out, " | device in use (all processes): %.2f", a[4]);
            fprintf(out, "\n");
        }
        if (plan > 0)
            fprintf(out, "gpt_train: planner's prediction (mg_plan.h) per rank of pipeline stage "
                    "%d: %.2f MB = weights %.2f + gradients %.2f + optimizer %.2f + activations "
                    "%.2f\n", res.worst_stage, plan, res.mem_weights / 1048576.0,
                    res.mem_gradients / 1048576.0, res.mem_optimizer / 1048576.0,
                    res.mem_activations / 1048576.0);
        fflush(out);
    }
    free(all);
}

/* --log-jsonl: the log drawn as a picture beside it (LOG.svg), by the rank that wrote it. */
/* The line every successful save prints (interval, exit and final saves alike). */
static void print_saved(const mg_trainer *tr) {
    printf("gpt_train: saved %s/iter_%07lld\n", tr->args.save, (long long)tr->iteration);
    fflush(stdout);
}

static void draw_curves(const mg_trainer *tr) {
    char path[4096], err[MG_ERRLEN];
    if (!tr->jsonl) return;
    fflush(tr->jsonl);
    mg_plot_default_path(path, sizeof path, tr->args.log_jsonl);
    if (mg_plot_jsonl(tr->args.log_jsonl, path, err, sizeof err))
        fprintf(stderr, "gpt_train: warning: curves not drawn: %s\n", err);
    else
        printf("gpt_train: training curves drawn in %s (from %s)\n", path, tr->args.log_jsonl);
}

int main(int argc, char **argv) {
    mg_train_args args;
    mg_trainer tr;
    char err[MG_ERRLEN];
    int64_t iters;
    FILE *out;

    mg_comm_init(&comm, &argc, &argv);
    out = comm.world_rank == 0 ? stdout : NULL;      /* what every rank knows, printed once */
    mg_train_args_default(&args);
    args.comm = &comm;
    args.progress = out;                         /* long saves and loads report progress */
    if (mg_train_parse(&args, argc, argv, err, sizeof err)) return finish(2, err);
    if (args.help) {
        if (out) mg_train_print_help(stdout, "gpt_train");
        return finish(0, NULL);
    }
    comm.timeout_s = args.comm_timeout;          /* --comm-timeout bounds every wait */
    if (mg_trainer_setup(&tr, &args, err, sizeof err)) return finish(2, err);
    iters = tr.args.train_iters;
    tr.defer_results = 1;   /* a GPU step reads nothing back unless its iteration logs */
    if (out) {
        printf("gpt_train: %d layers, hidden %d, %d heads, sequence %d, vocabulary %d (padded %d): "
               "%.3f M parameters on %d x %s\n", tr.cfg.n_layer, tr.cfg.hidden, tr.cfg.n_head,
               tr.cfg.seq_len, tr.cfg.vocab_size, tr.cfg.padded_vocab,
               mg_gpt_num_params(&tr.cfg) / 1e6, comm.world_size, mg_device_name(&tr.ctx));
        {   /* the layer's switches: GPT-2's, or the Llama family's */
            mg_layer_config k = tr.model.tf.cfg;
            printf("gpt_train: %s, %s MLP of width %d, %s positions, %d query group%s of head "
                   "dim %d, %s output layer, %s\n",
                   k.norm.zero_centered ? (k.norm.rms ? "RMSNorm (scale 1 + weight)"
                                                      : "LayerNorm (scale 1 + weight)")
                   : k.norm.rms ? "RMSNorm" : "LayerNorm",
                   k.swiglu ? "SwiGLU" : k.act == MG_ACT_GELU_ERF ? "exact-GELU"
                                              : k.act == MG_ACT_RELU2 ? "squared-ReLU" : "GELU",
                   k.ffn_hidden,
                   k.rope ? "rotary" : tr.cfg.position_embedding == MG_POS_NONE ? "no"
                                                                              : "learned",
                   k.n_group, k.n_group > 1 ? "s" : "", k.head_dim,
                   tr.cfg.untie_embeddings ? "untied" : "tied",
                   k.bias ? "biases" : k.qkv_bias ? "Q/K/V biases only" : "no biases");
        }
        if (tr.args.sequence_parallel && tr.model.layout.tp_size == 1)   /* Megatron warns too */
            fprintf(stderr, "gpt_train: warning: --sequence-parallel is off: it needs "
                    "--tensor-model-parallel-size > 1 (Megatron-LM: \"Disabling sequence "
                    "parallelism because tensor model parallelism is disabled\")\n");
        mg_train_print_compat_notes(&tr.args, stderr, "gpt_train");   /* Megatron's flags */
        if (tr.model.layout.tp_size > 1)
            printf("gpt_train: tensor-parallel size %d%s\n", tr.model.layout.tp_size,
                   tr.model.tf.tp.sequence_parallel ? ", sequence parallel" : "");
        if (tr.cp_size > 1) {
            int Tl = mg_gpt_local_seq(&tr.cfg, &tr.model.layout);
            printf("gpt_train: context-parallel size %d: %d positions per rank (chunks of %d: "
                   "rank i holds chunks i and %d-i), ring attention\n", tr.cp_size, Tl, Tl / 2,
                   2 * tr.cp_size - 1);
        }
        if (tr.pp > 1)
            printf("gpt_train: pipeline of %d ranks x %d model chunk%s of %d layer%s, schedule "
                   "%s\n", tr.pp, tr.vp, tr.vp > 1 ? "s" : "", tr.cfg.n_layer / (tr.pp * tr.vp),
                   tr.cfg.n_layer / (tr.pp * tr.vp) > 1 ? "s" : "",
                   tr.args.pipeline_schedule_file ? tr.args.pipeline_schedule_file
                                                  : mg_schedule_kind_name(tr.pipe_sched.kind));
        if (comm.world_size > 1) {   /* rank 0's buckets (with p > 1 the tied embedding's own first) */
            int64_t largest = 0;
            int k;
            for (k = 0; k < tr.dp.n_buckets; k++)
                if (tr.dp.bucket_begin[k + 1] - tr.dp.bucket_begin[k] > largest)
                    largest = tr.dp.bucket_begin[k + 1] - tr.dp.bucket_begin[k];
            char cp[32] = "";
            if (tr.cp_size > 1) snprintf(cp, sizeof cp, " x c=%d", tr.cp_size);
            printf("gpt_train: layout t=%d%s x p=%d x d=%d (data-parallel: %lld samples per "
                   "replica per iteration%s, %d gradient bucket%s of up to %lld elements)\n",
                   tr.model.layout.tp_size, cp, tr.pp, tr.dp_size,
                   (long long)(tr.args.global_batch_size / tr.dp_size),
                   tr.opt.dp ? ", distributed optimizer" : "", tr.dp.n_buckets,
                   tr.dp.n_buckets == 1 ? "" : "s", (long long)largest);
        }
        if (comm.world_size > 1) {   /* the layout: every rank's (tensor, pipeline, data) */
            int need = mg_topology_describe(&comm.topo, NULL, 0);
            char *text = (char *)malloc((size_t)need + 1);
            if (text) {
                mg_topology_describe(&comm.topo, text, (size_t)need + 1);
                fputs(text, stdout);
                free(text);
            }
            print_stage_layers(&tr);
        }
        if (tr.model.dtype != MG_F32 || tr.model.layout.recompute_granularity)
            printf("gpt_train: %s activations and weight copy (fp32 master weights)%s; "
                   "recomputation %s\n", mg_dtype_name(tr.model.dtype),
                   tr.args.fp16 ? (tr.scaler.dynamic ? ", dynamic loss scale"
                                                     : ", constant loss scale") : "",
                   tr.model.layout.recompute_granularity == MG_RECOMPUTE_FULL ? "full"
                   : tr.model.layout.recompute_granularity ? "selective" : "none");
        if (iters > tr.iteration)
            printf("gpt_train: global batch %lld = micro-batch %lld x %d microbatches; iterations "
                   "%lld … %lld\n", (long long)tr.args.global_batch_size,
                   (long long)tr.args.micro_batch_size, tr.n_micro, (long long)tr.iteration + 1,
                   (long long)iters);
        if (tr.valid_note[0] && iters > tr.iteration)   /* no validation set: trains anyway */
            printf("gpt_train: %s\n", tr.valid_note);
        if (tr.loaded_iteration >= 0)
            printf("gpt_train: resumed from %s at iteration %lld%s%s\n", tr.args.load,
                   (long long)tr.loaded_iteration, tr.args.no_load_optim ? " (--no-load-optim: "
                   "a fresh optimizer; the learning-rate schedule starts again)" : "",
                   tr.args.init_from ? " (--init-from not used: the checkpoint has the weights)"
                   : "");
        else if (tr.load_found == 2)
            printf("gpt_train: weights from %s/release (a released checkpoint: iteration 0, fresh "
                   "optimizer%s)\n", tr.args.load, tr.args.init_from ? "; --init-from not used"
                   : "");
        else if (tr.load_found == 3)
            printf("gpt_train: --finetune: the weights of the latest checkpoint in %s, from "
                   "iteration 0 (fresh optimizer and schedule%s)\n", tr.args.load,
                   tr.args.init_from ? "; --init-from not used" : "");
        else if (tr.args.load && tr.args.init_from)   /* Megatron-LM warns and starts afresh */
            printf("gpt_train: --load %s: no checkpoint there yet (no latest_checkpointed_"
                   "iteration.txt); starting from --init-from %s\n", tr.args.load,
                   tr.args.init_from);
        else if (tr.args.load)
            printf("gpt_train: --load %s: no checkpoint there yet (no latest_checkpointed_"
                   "iteration.txt); starting from random weights (--seed %lld)\n", tr.args.load,
                   (long long)tr.args.seed);
        fflush(stdout);
    }

    while (tr.iteration < iters) {
        mg_step_result r;
        int why;
        r = mg_trainer_step(&tr);
        mg_trainer_log(&tr, &r, out);
        if (tr.iteration == tr.first_iteration + 1) memory_report(&tr, out);
        if (tr.has_valid && tr.iteration % tr.args.eval_interval == 0)
            mg_trainer_evaluate(&tr, out);
        if (tr.args.save && tr.args.save_interval > 0 &&
            tr.iteration % tr.args.save_interval == 0) {
            if (mg_trainer_save(&tr, tr.args.save, err, sizeof err)) {
                if (out) fprintf(stderr, "gpt_train: warning: checkpoint not saved: %s\n", err);
            } else if (out) print_saved(&tr);
        }
        /* --exit-signal-handler, --exit-duration-in-mins, --exit-interval: every rank agrees to
           stop after this iteration; save (unless just saved) and exit 0, as Megatron does */
        if ((why = mg_trainer_exit_check(&tr)) != MG_EXIT_NONE) {
            if (tr.args.save && tr.last_saved != tr.iteration &&
                mg_trainer_save(&tr, tr.args.save, err, sizeof err)) {
                if (out) fprintf(stderr, "gpt_train: error: checkpoint not saved: %s\n", err);
                mg_trainer_free(&tr);
                return finish(1, NULL);
            }
            if (out) {
                printf("gpt_train: %s: exiting after iteration %lld", mg_exit_reason(why),
                       (long long)tr.iteration);
                if (tr.args.save) printf(", saved %s/iter_%07lld", tr.args.save,
                                         (long long)tr.iteration);
                printf("\n");
            }
            draw_curves(&tr);
            mg_trainer_free(&tr);
            return finish(0, NULL);
        }
    }
    if (tr.args.pipeline_trace) {     /* every rank writes its part, in turn */
        if (mg_trainer_write_pipeline_trace(&tr, tr.args.pipeline_trace, err, sizeof err))
            fprintf(stderr, "gpt_train: error: %s\n", err);
        else if (out)
            printf("gpt_train: pipeline trace of the last iteration written to %s (draw it: "
                   "build/pipeline_sim --trace %s --svg run.svg)\n", tr.args.pipeline_trace,
                   tr.args.pipeline_trace);
    }

    /* the end: checkpoint (unless just written), validation, export, sample */
    if (tr.args.save && tr.last_saved != tr.iteration) {
        if (mg_trainer_save(&tr, tr.args.save, err, sizeof err)) {
            if (out) fprintf(stderr, "gpt_train: error: checkpoint not saved: %s\n", err);
            mg_trainer_free(&tr);
            return finish(1, NULL);
        }
        if (out) print_saved(&tr);
    }
    if (iters > 0) mg_trainer_evaluate_final(&tr, out);   /* "… on validation set" */
    if (iters > 0) mg_trainer_test(&tr, out);    /* --test-data-path, or --split's third share */
    if (tr.args.export_hf) {
        if (mg_trainer_export_hf(&tr, tr.args.export_hf, err, sizeof err)) {
            if (out) fprintf(stderr, "gpt_train: error: export failed: %s\n", err);
            mg_trainer_free(&tr);
            return finish(1, NULL);
        }
        if (out) printf("gpt_train: exported %s/model.safetensors and %s/config.json\n",
                        tr.args.export_hf, tr.args.export_hf);
    }
    if (tr.args.sample_tokens > 0) mg_trainer_generate(&tr, tr.args.sample_tokens, out);
    if (iters > 0) draw_curves(&tr);
    mg_trainer_free(&tr);
    return finish(0, NULL);
}
