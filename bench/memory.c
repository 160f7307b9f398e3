/* bench/memory — activation memory per rank under tensor and sequence parallelism, beside
   Korthikanti et al.'s per-layer formulas.

     mpirun -np T build/memory [--layers N] [--hidden N] [--heads N] [--seq N] [--batch N]
                               [--vocab N]          (T = 1, 2, 4, …; or build/memory alone)

   Defaults: 4 layers, hidden 256, 8 heads, sequence 512, micro-batch 2, vocabulary 8192 —
   a model whose attention scores matter (a·s/h = 16), small enough for a CPU.

   Two tables, each for t = the number of ranks of the job, without and with
   --sequence-parallel:
   1. Per layer and microbatch: the bytes one transformer layer keeps for its backward, measured
      as the growth of the arena's activation block from a model of l−1 layers to one of l
      (the arena hands out every activation; mg_gpt.act_bytes is its size), beside
        paper16  Korthikanti's formula, 16-bit activations and 1-byte dropout masks
                 (mg_plan_activation_bytes_per_layer with 2-byte elements): s·b·h·(34 + 5as/h),
                 s·b·h·(10 + 24/t + 5as/(ht)) with t, s·b·h·(34 + 5as/h)/t with sequence par.;
        paper32  the same accounting with 4-byte elements (megatron.h keeps fp32 activations);
        ours     paper32 less what megatron.h does not store: the dropout masks (recomputed from
                 the counter-based generator in the backward: 2·s·b·h·r + a·s²·b/t bytes, r =
                 1/t with sequence parallelism, else 1) and the dropped attention probabilities
                 (4·a·s²·b/t: recomputed from the kept probabilities and the mask).
      and the ratio measured / ours (the layernorms' mean and 1/σ, 16·s·b·r bytes, are the
      rest).
   2. Per rank for the whole model: the activation block (all layers, embedding output, final
      layernorm, logits [s·b, Vp/t], loss statistics), the shared scratch (the residual
      gradient and the gathered/partial [s·b, h] buffers, one layer's backward temporaries),
      and the arena's high-water mark above the model during a real forward + backward of one
      microbatch on these ranks (ops' temporary scratch), all measured from the arena.      */
#include "megatron.h"
#include "mg_plan.h"       /* the paper's per-layer formula: mg_plan_activation_bytes_per_layer */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mg_comm comm;

typedef struct bench_args { int layers, hidden, heads, seq, batch, vocab; } bench_args;

static mg_gpt_config config_of(const bench_args *a, int layers, int t) {
    mg_gpt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = layers;
    c.hidden = a->hidden;
    c.n_head = a->heads;
    c.seq_len = a->seq;
    c.max_pos = a->seq;
    c.vocab_size = a->vocab;
    c.padded_vocab = mg_gpt_pad_vocab(a->vocab, t);
    return c;
}

/* A model of `layers` layers on this job's tensor group; returns the arena bytes it took. */
static size_t build(mg_gpt *m, mg_ctx *ctx, const bench_args *a, int layers, int sp) {
    char err[MG_ERRLEN];
    mg_gpt_config c = config_of(a, layers, comm.world_size);
    mg_gpt_layout L = mg_gpt_layout_single(&c, a->batch, 1, 1);
    size_t before = mg_arena_mark(ctx);
    mg_gpt_layout_tp(&L, &comm, sp);
    if (mg_gpt_create(m, ctx, &c, &L, err, sizeof err)) {
        if (comm.world_rank == 0) fprintf(stderr, "memory: %s\n", err);
        mg_comm_abort(&comm, __FILE__, __LINE__, "bad model");
    }
    return mg_arena_mark(ctx) - before;
}

int main(int argc, char **argv) {
    bench_args a = {4, 256, 8, 512, 2, 8192};
    int i, sp, t;
    mg_ctx ctx;
    mg_ctx_desc cd;
    double M = 1024.0 * 1024.0;
    struct { double layer, paper16, paper32, ours, acts, scratch, transient, total; } row[2];
    mg_comm_init(&comm, &argc, &argv);
    t = comm.world_size;
    for (i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--layers")) a.layers = v;
        else if (!strcmp(argv[i], "--hidden")) a.hidden = v;
        else if (!strcmp(argv[i], "--heads")) a.heads = v;
        else if (!strcmp(argv[i], "--seq")) a.seq = v;
        else if (!strcmp(argv[i], "--batch")) a.batch = v;
        else if (!strcmp(argv[i], "--vocab")) a.vocab = v;
        else {
            if (comm.world_rank == 0) fprintf(stderr, "memory: unknown option %s\n", argv[i]);
            mg_comm_finalize(&comm);
            return 2;
        }
    }
    memset(&cd, 0, sizeof cd);
    cd.device = MG_DEVICE_AUTO;
    cd.cuda_device = mg_comm_cuda_device(&comm);
    cd.n_threads = mg_comm_default_threads(&comm);
    {
        mg_gpt_config c = config_of(&a, a.layers, t);
        mg_gpt_layout L = mg_gpt_layout_single(&c, a.batch, 1, 1);
        L.tp_size = t;
        cd.arena_bytes = 3 * mg_gpt_arena_bytes(&c, &L) + ((size_t)64 << 20);
    }
    mg_ctx_init(&ctx, &cd);
    mg_comm_setup_groups(&comm, &ctx, t, 1, 1);
    for (sp = 0; sp < 2; sp++) {
        mg_gpt big, small;
        mg_plan_model pm;
        double s = a.seq, b = a.batch, h = a.hidden, heads = a.heads, r = sp && t > 1 ? 1.0 / t : 1;
        size_t mark = mg_arena_mark(&ctx), used;
        int32_t *samples = (int32_t *)malloc(sizeof(int32_t) * (size_t)a.batch * (a.seq + 1));
        int64_t k;
        /* 1. per layer: the activation block of l layers minus that of l-1 */
        build(&small, &ctx, &a, a.layers - 1, sp);
        build(&big, &ctx, &a, a.layers, sp);
        row[sp].layer = (double)(big.act_bytes - small.act_bytes);
        memset(&pm, 0, sizeof pm);
        pm.num_layers = a.layers;
        pm.hidden_size = a.hidden;
        pm.num_attention_heads = a.heads;
        pm.seq_length = a.seq;
        pm.vocab_size = a.vocab;
        row[sp].paper16 = mg_plan_activation_bytes_per_layer(&pm, a.batch, t, sp, 0, 2);
        row[sp].paper32 = mg_plan_activation_bytes_per_layer(&pm, a.batch, t, sp, 0, 4);
        row[sp].ours = row[sp].paper32 - 2 * s * b * h * r - heads * s * s * b / t
                       - 4 * heads * s * s * b / t;
        /* 2. the whole model, and a real forward + backward on these ranks */
        row[sp].acts = (double)big.act_bytes;
        used = mg_arena_mark(&ctx);
        row[sp].scratch = (double)big.scratch_bytes;
        for (k = 0; k < (int64_t)a.batch * (a.seq + 1); k++)
            samples[k] = (int32_t)((k * 2654435761u) % (uint32_t)a.vocab);
        mg_arena_reset_peak(&ctx);
        mg_gpt_run_microbatches(&big, samples, 1, 1.0f / (float)(a.batch * a.seq), 1);
        mg_sync(&ctx);
        row[sp].transient = (double)(ctx.arena_peak - used);
        row[sp].total = row[sp].acts + row[sp].scratch + row[sp].transient;
        free(samples);
        mg_gpt_destroy(&big);
        mg_gpt_destroy(&small);
        mg_arena_release(&ctx, mark);
    }
    if (comm.world_rank == 0) {
        printf("# memory: l=%d h=%d a=%d s=%d b=%d V=%d, t=%d (%s); MiB per rank\n", a.layers,
               a.hidden, a.heads, a.seq, a.batch, a.vocab, t, mg_device_name(&ctx));
        printf("| t | sp | per layer measured | paper16 | paper32 | ours (paper32 - masks - "
               "dropout out) | measured/ours |\n|---|---|---|---|---|---|---|\n");
        for (sp = 0; sp < 2; sp++)
            printf("| %d | %s | %.3f | %.3f | %.3f | %.3f | %.4f |\n", t, sp ? "yes" : "no",
                   row[sp].layer / M, row[sp].paper16 / M, row[sp].paper32 / M, row[sp].ours / M,
                   row[sp].layer / row[sp].ours);
        printf("\n| t | sp | activations, %d layers + embedding + head | scratch | op scratch "
               "(peak during fwd+bwd) | activation peak per rank |\n|---|---|---|---|---|---|\n",
               a.layers);
        for (sp = 0; sp < 2; sp++)
            printf("| %d | %s | %.3f | %.3f | %.3f | %.3f |\n", t, sp ? "yes" : "no",
                   row[sp].acts / M, row[sp].scratch / M, row[sp].transient / M,
                   row[sp].total / M);
    }
    mg_ctx_free(&ctx);
    mg_comm_finalize(&comm);
    return 0;
}
