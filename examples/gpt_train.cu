/* gpt_train — train a GPT-2 model with megatron.h (one rank, or t tensor-parallel ranks).

   Built by make as build/gpt_train (cc -x c: the CPU) and build/gpt_train_cuda (nvcc: the GPU
   when present, else the CPU). Megatron-LM's flag names; `gpt_train --help` lists them all.

       build/gpt_train --data-path data/tiny --vocab-size 256 --num-layers 4 --hidden-size 128 \
           --num-attention-heads 4 --seq-length 128 --micro-batch-size 8 --global-batch-size 16 \
           --train-iters 200 --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 20 \
           --log-interval 10 --eval-interval 50 --eval-iters 5 --save ckpt --sample-tokens 200

   Tensor (and sequence) parallel over 4 ranks — the same run, the same math:
       mpirun -np 4 build/gpt_train --tensor-model-parallel-size 4 --sequence-parallel …

   The program is the loop below; everything it calls is in megatron.h (section 5, "Trainer"):
   parse the flags, check the whole configuration and every file before any work (one line
   "gpt_train: error: …", exit status 2), build the model, then iterate: step, log, evaluate,
   save. At the end: final checkpoint, validation, optional Hugging Face export and a sample.
   Every rank runs this program (mpirun starts them); every rank checks the configuration
   the same way before any communication, so a bad one fails everywhere with one line printed
   by rank 0. Rank 0 prints the log; the others run silently.                               */
#define MG_IMPLEMENTATION
#include "megatron.h"

static mg_comm comm;

static int usage_error(const char *msg) {
    if (comm.world_rank == 0) fprintf(stderr, "gpt_train: error: %s\n", msg);
    mg_comm_finalize(&comm);
    return 2;
}

int main(int argc, char **argv) {
    mg_train_args args;
    mg_trainer tr;
    char err[MG_ERRLEN];
    int64_t iters;
    FILE *out;

    mg_comm_init(&comm, &argc, &argv);
    out = comm.world_rank == 0 ? stdout : NULL;        /* the log: rank 0 only */
    mg_train_args_default(&args);
    if (mg_train_parse(&args, argc, argv, err, sizeof err)) return usage_error(err);
    if (args.help) {
        if (out) mg_train_print_help(out, "gpt_train");
        mg_comm_finalize(&comm);
        return 0;
    }
    args.comm = &comm;
    if (mg_trainer_setup(&tr, &args, err, sizeof err)) return usage_error(err);

    iters = tr.args.train_iters;
    if (out) {
        fprintf(out, "gpt_train: %d layers, hidden %d, %d heads, sequence %d, vocabulary %d "
                "(padded %d): %.3f M parameters on %d x %s\n", tr.cfg.n_layer, tr.cfg.hidden,
                tr.cfg.n_head, tr.cfg.seq_len, tr.cfg.vocab_size, tr.cfg.padded_vocab,
                mg_gpt_num_params(&tr.cfg) / 1e6, comm.world_size, mg_device_name(&tr.ctx));
        if (tr.model.layout.tp_size > 1)
            fprintf(out, "gpt_train: tensor-parallel size %d%s\n", tr.model.layout.tp_size,
                    tr.model.tp.sequence_parallel ? ", sequence parallel" : "");
        if (tr.model.dtype != MG_F32 || tr.model.layout.recompute_granularity)
            fprintf(out, "gpt_train: %s activations and weight copy (fp32 master weights)%s; "
                    "recomputation %s\n", mg_dtype_name(tr.model.dtype),
                    tr.args.fp16 ? (tr.scaler.dynamic ? ", dynamic loss scale"
                                                      : ", constant loss scale") : "",
                    tr.model.layout.recompute_granularity == MG_RECOMPUTE_FULL ? "full"
                    : tr.model.layout.recompute_granularity ? "selective" : "none");
        if (iters > tr.iteration)
            fprintf(out, "gpt_train: global batch %lld = micro-batch %lld x %d microbatches; "
                    "iterations %lld … %lld\n", (long long)tr.args.global_batch_size,
                    (long long)tr.args.micro_batch_size, tr.n_micro, (long long)tr.iteration + 1,
                    (long long)iters);
        if (tr.loaded_iteration >= 0)
            fprintf(out, "gpt_train: resumed from %s at iteration %lld%s\n", tr.args.load,
                    (long long)tr.loaded_iteration, tr.args.init_from ? " (--init-from not used: "
                    "the checkpoint has the weights)" : "");
        fflush(out);
    }

    while (tr.iteration < iters) {
        mg_step_result r = mg_trainer_step(&tr);
        mg_trainer_log(&tr, &r, out);
        if (tr.args.eval_iters > 0 && tr.iteration % tr.args.eval_interval == 0)
            mg_trainer_evaluate(&tr, out);
        if (tr.args.save && tr.args.save_interval > 0 && tr.iteration % tr.args.save_interval == 0
            && mg_trainer_save(&tr, tr.args.save, err, sizeof err) && out)
            fprintf(stderr, "gpt_train: warning: checkpoint not saved: %s\n", err);
    }

    /* the end: checkpoint (unless just written), validation, export, sample */
    if (tr.args.save && tr.last_saved != tr.iteration) {
        if (mg_trainer_save(&tr, tr.args.save, err, sizeof err)) {
            if (out) fprintf(stderr, "gpt_train: error: checkpoint not saved: %s\n", err);
            mg_trainer_free(&tr);
            mg_comm_finalize(&comm);
            return 1;
        }
        if (out) printf("gpt_train: saved %s/iter_%07lld\n", tr.args.save, (long long)tr.iteration);
    }
    if (iters > 0 && tr.args.eval_iters > 0 && tr.iteration % tr.args.eval_interval != 0)
        mg_trainer_evaluate(&tr, out);
    if (tr.args.export_hf) {
        if (mg_gpt_export_hf(&tr.model, tr.args.export_hf, err, sizeof err)) {
            if (out) fprintf(stderr, "gpt_train: error: export failed: %s\n", err);
            mg_trainer_free(&tr);
            mg_comm_finalize(&comm);
            return 1;
        }
        if (out) printf("gpt_train: exported %s/model.safetensors and %s/config.json\n",
                        tr.args.export_hf, tr.args.export_hf);
    }
    if (tr.args.sample_tokens > 0) mg_trainer_generate(&tr, tr.args.sample_tokens, out);
    mg_trainer_free(&tr);
    mg_comm_finalize(&comm);
    return 0;
}
