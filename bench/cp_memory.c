/* bench/cp_memory — activation memory per rank under context parallelism (issue 20), beside
   the planner's prediction.

     mpirun -np C build/cp_memory [--seq N] [--layers N] [--hidden N] [--heads N] [--vocab N]
                                  [--limit-mib N] [--count-only]

   Defaults: sequence 16384, 2 layers, hidden 64, 4 heads, vocabulary 256, micro-batch 1, fp32,
   the tiled attention. For c = 1, 2, 4, … up to 16 (every c that cuts the sequence into 2c
   chunks) one line per c:
     model     the bytes per rank of the model's activations (mg_gpt.act_bytes: every layer's
               kept tensors, the embedding output, the final layernorm and the gradient the
               fused classifier leaves for it, in place of the [N, V] logits) and of its
               shared scratch (mg_gpt.scratch_bytes: the residual gradient, one layer's
               backward temporaries, the classifier's chunk of logits, with c > 1 the ring's
               two K/V buffers, three fp32 dK/dV buffers and the fp32 dQ), and their sum, as
               the model claims them from its arena for a rank of a context group of c —
               counted, nothing runs;
     planner   mg_plan_evaluate's activation bytes for the same layout (t = p = d = 1, c GPUs,
               the tiled attention, the fused classifier): the model's activations plus the
               one chunk of fp32 logits, which the model claims as scratch;
     measured  for c = the job's size only: activations + scratch + the arena's high-water mark
               above the model during a real forward + backward of one microbatch on these
               ranks (the ops' temporary scratch), the peak per rank (--count-only: skipped);
   and whether model's figure fits --limit-mib (default 64): a sequence one rank cannot hold
   within the limit is held by c ranks once the figure per rank falls under it.           */
#include "megatron.h"
#include "mg_plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mg_comm comm;

typedef struct bench_args {
    int seq, layers, hidden, heads, vocab, limit_mib, count_only;
} bench_args;

static mg_gpt_config config_of(const bench_args *a) {
    mg_gpt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = a->layers;
    c.hidden = a->hidden;
    c.n_head = a->heads;
    c.seq_len = a->seq;
    c.max_pos = a->seq;
    c.vocab_size = a->vocab;
    c.padded_vocab = mg_gpt_pad_vocab(a->vocab, 128, 1);
    return c;
}

/* One rank's layout in a context group of c (cp_rank 0; comm NULL: built, not run). */
static mg_gpt_layout layout_of(const mg_gpt_config *c, int cp, mg_comm *cm) {
    mg_gpt_layout L = mg_gpt_layout_single(c, 1, 1, 1);
    L.cp_size = cp;
    L.cp_rank = 0;
    if (cm) mg_gpt_layout_cp(&L, cm);
    return L;
}

/* The planner's activation bytes per GPU for c GPUs as one context group. */
static double planned(const bench_args *a, int cp) {
    mg_plan_model m;
    mg_plan_training t;
    mg_plan_cluster cl;
    mg_plan_layout L;
    mg_plan_result r;
    char err[256];
    memset(&m, 0, sizeof m);
    memset(&t, 0, sizeof t);
    memset(&L, 0, sizeof L);
    m.num_layers = a->layers; m.hidden_size = a->hidden; m.num_attention_heads = a->heads;
    m.seq_length = a->seq; m.vocab_size = a->vocab;
    m.flash_attention = 1;   /* the tiled attention, as measured here */
    t.global_batch_size = 1;
    t.precision = MG_PLAN_FP32;
    t.grads_in_fp32 = 1;
    t.grad_accum_fusion = 1;
    t.fused_classifier = 1;  /* the model's classifier: fused, in chunks of rows */
    cl.gpus = cl.gpus_per_node = cp;
    mg_plan_gpu_preset("h100-sxm", &cl.gpu);
    L.t = L.p = L.d = L.v = 1;
    L.c = cp;
    L.micro_batch_size = 1;
    return mg_plan_evaluate(&m, &t, &cl, &L, &r, err, sizeof err) ? -1.0 : r.mem_activations;
}

/* Activations + scratch + the ops' high-water mark of a forward + backward on this job's
   context group (every rank of the world).                                                */
static double measure(const bench_args *a) {
    mg_gpt_config c = config_of(a);
    mg_gpt_layout L;
    mg_gpt m;
    mg_ctx ctx;
    mg_ctx_desc cd;
    char err[MG_ERRLEN];
    size_t used;
    double peak;
    int64_t k, n = (int64_t)a->seq + 1;
    int32_t *samples = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    memset(&cd, 0, sizeof cd);
    cd.device = MG_DEVICE_AUTO;
    cd.cuda_device = mg_comm_cuda_device(&comm);
    cd.n_threads = mg_comm_default_threads(&comm);
    L = layout_of(&c, comm.world_size, NULL);
    cd.arena_bytes = 2 * mg_gpt_arena_bytes(&c, &L) + ((size_t)64 << 20);
    mg_ctx_init(&ctx, &cd);
    mg_comm_setup_groups_cp(&comm, &ctx, 1, comm.world_size, 1, 1);
    L = layout_of(&c, comm.world_size, &comm);
    if (mg_gpt_create(&m, &ctx, &c, &L, err, sizeof err))
        mg_comm_abort(&comm, __FILE__, __LINE__, "cp_memory: %s", err);
    mg_gpt_init_weights(&m, 1);
    for (k = 0; k < n; k++) samples[k] = (int32_t)((k * 2654435761u) % (uint32_t)a->vocab);
    used = mg_arena_mark(&ctx);
    mg_arena_reset_peak(&ctx);
    mg_gpt_run_microbatches(&m, samples, 1, 1.0f / (float)a->seq, 1);
    mg_sync(&ctx);
    peak = (double)m.act_bytes + (double)m.scratch_bytes + (double)(ctx.arena_peak - used);
    mg_gpt_destroy(&m);
    mg_ctx_free(&ctx);
    free(samples);
    return peak;
}

int main(int argc, char **argv) {
    bench_args a = {16384, 2, 64, 4, 256, 64, 0};
    double M = 1024.0 * 1024.0, one = 0, measured;
    int i, cp;
    mg_comm_init(&comm, &argc, &argv);
    for (i = 1; i < argc; i++) {
        int v = i + 1 < argc ? atoi(argv[i + 1]) : 0;
        if (!strcmp(argv[i], "--count-only")) { a.count_only = 1; continue; }
        if (!strcmp(argv[i], "--seq") && v > 1) a.seq = v;
        else if (!strcmp(argv[i], "--layers") && v > 0) a.layers = v;
        else if (!strcmp(argv[i], "--hidden") && v > 0) a.hidden = v;
        else if (!strcmp(argv[i], "--heads") && v > 0) a.heads = v;
        else if (!strcmp(argv[i], "--vocab") && v > 1) a.vocab = v;
        else if (!strcmp(argv[i], "--limit-mib") && v > 0) a.limit_mib = v;
        else {
            if (comm.world_rank == 0)
                fprintf(stderr, "cp_memory: unknown or bad argument '%s' (--seq N, --layers N, "
                        "--hidden N, --heads N, --vocab N, --limit-mib N, --count-only)\n",
                        argv[i]);
            mg_comm_finalize(&comm);
            return 2;
        }
        i++;
    }
    if (a.hidden % a.heads || a.seq % (2 * comm.world_size)) {
        if (comm.world_rank == 0)
            fprintf(stderr, "cp_memory: --hidden %d must divide by --heads %d and --seq %d by 2 x "
                    "the %d ranks\n", a.hidden, a.heads, a.seq, comm.world_size);
        mg_comm_finalize(&comm);
        return 2;
    }
    measured = a.count_only ? 0 : measure(&a);   /* collective: every rank first */
    if (comm.world_rank == 0) {
        printf("# cp_memory: s=%d l=%d h=%d a=%d V=%d, b=1, fp32, tiled attention; MiB per rank; "
               "limit %d MiB\n| c | activations | scratch | sum | sum / c=1's | planner: "
               "activations | measured peak | sum within %d MiB |\n"
               "|---|---|---|---|---|---|---|---|\n",
               a.seq, a.layers, a.hidden, a.heads, a.vocab, a.limit_mib, a.limit_mib);
        for (cp = 1; cp <= 16 && a.seq % (2 * cp) == 0; cp *= 2) {
            mg_gpt_config c = config_of(&a);
            mg_gpt_layout L = layout_of(&c, cp, NULL);
            mg_gpt m;
            mg_ctx ctx;
            mg_ctx_desc cd;
            char err[MG_ERRLEN], meas[32] = "–";
            double bytes;
            memset(&cd, 0, sizeof cd);
            cd.device = MG_DEVICE_CPU;
            cd.n_threads = 1;
            cd.arena_bytes = mg_gpt_arena_bytes(&c, &L) + ((size_t)1 << 20);
            mg_ctx_init(&ctx, &cd);
            if (mg_gpt_create(&m, &ctx, &c, &L, err, sizeof err)) {
                fprintf(stderr, "cp_memory: c=%d: %s\n", cp, err);
                return 1;
            }
            bytes = (double)m.act_bytes + (double)m.scratch_bytes;
            if (cp == 1) one = bytes;
            if (cp == comm.world_size && !a.count_only)
                snprintf(meas, sizeof meas, "%.2f", measured / M);
            printf("| %d | %.2f | %.2f | %.2f | %.3f | %.2f | %s | %s |\n", cp,
                   (double)m.act_bytes / M, (double)m.scratch_bytes / M, bytes / M, bytes / one,
                   planned(&a, cp) / M, meas, bytes <= a.limit_mib * M ? "yes" : "no");
            mg_gpt_destroy(&m);
            mg_ctx_free(&ctx);
        }
    }
    mg_comm_finalize(&comm);
    return 0;
}
