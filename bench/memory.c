/* bench/memory — activation memory per rank under tensor and sequence parallelism and
   activation recomputation, beside Korthikanti et al.'s per-layer formulas.

     mpirun -np T build/memory [--layers N] [--hidden N] [--heads N] [--seq N] [--batch N]
                               [--vocab N] [--bf16] [--attention-backend unfused|flash]
                               (T = 1, 2, 4, …; or build/memory alone)
     build/memory --seq-sweep 1024,2048,4096,8192 [--hidden N] [--heads N] [--bf16]

   Defaults: 4 layers, hidden 256, 8 heads, sequence 512, micro-batch 2, vocabulary 8192 —
   a model whose attention scores matter (a·s/h = 16), small enough for a CPU. --bf16 stores
   activations in 16 bits (e = 2 bytes per element), as the paper's formulas assume; without
   it e = 4 (fp32).

   For t = the number of ranks of the job, each recomputation setting (none, selective, full
   uniform with groups of 1) without and with --sequence-parallel:
   1. Per layer and microbatch: the bytes one transformer layer keeps for its backward,
      measured as the growth of the arena's activation block from a model of l−1 layers to one
      of l (the arena hands out every activation; mg_gpt.act_bytes is its size), beside
        paper   Korthikanti's formula at e bytes per element and 1-byte dropout masks
                (mg_plan_activation_bytes_per_layer): none s·b·h·(10 + 24/t + 5as/(ht)) — with
                e = 2 the paper's 34 + 5as/h at t = 1 — or s·b·h·(34 + 5as/h)/t with sequence
                parallelism; selective: the 5as/h term dropped; full: the layer input, s·b·h·e
                (/t with sequence parallelism);
        ours    paper less what megatron.h does not store: the dropout masks (recomputed from
                the counter-based generator in the backward: 2·s·b·h·r + a·s²·b/t bytes, r =
                1/t with sequence parallelism, else 1) and the dropped attention probabilities
                (e·a·s²·b/t: recomputed from the kept probabilities and the mask);
      and the ratio measured / ours (the layernorms' fp32 mean and 1/σ, 16·s·b·r bytes, and the
      arena's 256-byte alignment are the rest).
   2. Per rank for the whole model: the activation block (all layers, embedding output, final
      layernorm, logits [s·b, Vp/t] in fp32, loss statistics), the shared scratch (the residual
      gradient and the gathered/partial [s·b, h] buffers, one layer's backward temporaries, the
      recomputation scratch: one layer's activations for full, the probabilities for
      selective), and the arena's high-water mark above the model during a real forward +
      backward of one microbatch on these ranks (ops' temporary scratch, e.g. the CPU's fp32
      copies of 16-bit GEMM operands), all measured from the arena; their sum is the peak.
   3. The classifier (output layer + cross-entropy) per rank against the vocabulary and the
      tokens of a microbatch B·T, for h = --hidden and this job's t, with one microbatch in
      flight, before and after the fusion: unfused, the head kept the fp32 logits [B·T, Vp/t]
      and three fp32 statistics per row for each microbatch in flight, plus (16-bit) a shared
      [B·T, Vp/t] 16-bit gradient; fused (mg_classifier_fused), it keeps the gradient of its
      input, [B·T, h] (B·T/t rows with sequence parallelism) in the activation dtype, per
      microbatch, and shares one chunk of logits: mg_classifier_scratch_bytes of
      mg_classifier_chunk_rows rows within MG_CLASSIFIER_CHUNK_BYTES. These are the arena
      claims of the two designs (the unfused one by its formula), not a run: the grid reaches
      sizes (V = 128256, B·T = 32768: 16 GiB of logits) no CPU here holds.
   The tables use --attention-backend unfused (default here, the paper's attention, whose
   [b, a/t, s, s] probabilities its formulas count); with flash, "ours" also drops the
   probabilities (the tiled attention keeps a fp32 log-sum-exp per query, 4·a·s·b/t bytes).
   --seq-sweep: per sequence length, one layer's activation bytes and the peak per rank
   (activations + scratch + ops' scratch of a 2-layer model, micro-batch 1) for both
   backends, and each figure's growth from the previous length: the unfused attention's grows
   4× when s doubles (its T×T buffers), the flash attention's 2× (O(s)). An unfused model
   whose probabilities alone would pass --max-mib (default 2048) is not built; its size
   from the formula is printed instead.                                                   */
#include "megatron.h"
#include "mg_plan.h"       /* the paper's per-layer formula: mg_plan_activation_bytes_per_layer */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mg_comm comm;

typedef struct bench_args {
    int layers, hidden, heads, seq, batch, vocab, bf16, backend, max_mib;
    char sweep[256];
} bench_args;

static mg_gpt_config config_of(const bench_args *a, int layers, int t) {
    mg_gpt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = layers;
    c.hidden = a->hidden;
    c.n_head = a->heads;
    c.seq_len = a->seq;
    c.max_pos = a->seq;
    c.vocab_size = a->vocab;
    c.padded_vocab = mg_gpt_pad_vocab(a->vocab, 128, t);
    return c;
}

/* A model of `layers` layers on this job's tensor group; returns the arena bytes it took. */
static size_t build(mg_gpt *m, mg_ctx *ctx, const bench_args *a, int layers, int sp,
                    int recompute) {
    char err[MG_ERRLEN];
    mg_gpt_config c = config_of(a, layers, comm.world_size);
    mg_gpt_layout L = mg_gpt_layout_single(&c, a->batch, 1, 1);
    size_t before = mg_arena_mark(ctx);
    mg_gpt_layout_tp(&L, &comm, sp);
    L.recompute_granularity = recompute;        /* full: uniform, groups of 1 layer */
    L.attention_backend = a->backend;
    L.dtype = a->bf16 ? MG_BF16 : MG_F32;
    if (mg_gpt_create(m, ctx, &c, &L, err, sizeof err)) {
        if (comm.world_rank == 0) fprintf(stderr, "memory: %s\n", err);
        mg_comm_abort(&comm, __FILE__, __LINE__, "bad model");
    }
    return mg_arena_mark(ctx) - before;
}

/* Per-layer bytes and the peak per rank of a 2-layer model with a's sizes (micro-batch 1),
   after a forward + backward; *peak 0 when the unfused probabilities would pass max_mib. */
static void measure(mg_ctx *ctx, const bench_args *a, double *layer, double *peak) {
    mg_gpt big, small;
    size_t mark = mg_arena_mark(ctx), used;
    int32_t *samples = (int32_t *)malloc(sizeof(int32_t) * (size_t)a->batch * (a->seq + 1));
    int64_t k;
    build(&small, ctx, a, 1, 0, MG_RECOMPUTE_NONE);
    build(&big, ctx, a, 2, 0, MG_RECOMPUTE_NONE);
    *layer = (double)(big.act_bytes - small.act_bytes);
    used = mg_arena_mark(ctx);
    for (k = 0; k < (int64_t)a->batch * (a->seq + 1); k++)
        samples[k] = (int32_t)((k * 2654435761u) % (uint32_t)a->vocab);
    mg_arena_reset_peak(ctx);
    mg_gpt_run_microbatches(&big, samples, 1, 1.0f / (float)(a->batch * a->seq), 1);
    mg_sync(ctx);
    *peak = (double)big.act_bytes + (double)big.scratch_bytes + (double)(ctx->arena_peak - used);
    free(samples);
    mg_gpt_destroy(&big);
    mg_gpt_destroy(&small);
    mg_arena_release(ctx, mark);
}
static int sweep(const bench_args *a0) {
    double M = 1024.0 * 1024.0, prev[2][2] = {{0, 0}, {0, 0}};
    char list[256], *tok, *save = NULL;
    int t = comm.world_size;
    snprintf(list, sizeof list, "%s", a0->sweep);
    if (comm.world_rank == 0)
        printf("# memory --seq-sweep: h=%d a=%d b=1 V=%d, t=%d, %s activations; MiB per rank "
               "(growth from the previous length)\n| s | flash: per layer | flash: peak | "
               "unfused: per layer | unfused: peak |\n|---|---|---|---|---|\n", a0->hidden,
               a0->heads, a0->vocab, t, a0->bf16 ? "bf16" : "fp32");
    for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        bench_args a = *a0;
        double fig[2][2];
        int bk;
        mg_ctx ctx;
        mg_ctx_desc cd;
        a.seq = atoi(tok); a.batch = 1;
        if (a.seq <= 0) return 2;
        for (bk = 0; bk < 2; bk++) {
            double e = a.bf16 ? 2 : 4, probs = 2.0 * e * a.heads * (double)a.seq * a.seq / t;
            a.backend = bk ? MG_ATTN_UNFUSED : MG_ATTN_FLASH;
            fig[bk][0] = fig[bk][1] = 0;
            if (bk && probs > a.max_mib * M) { fig[bk][0] = -probs; continue; }
            memset(&cd, 0, sizeof cd);
            cd.device = MG_DEVICE_AUTO;
            cd.cuda_device = mg_comm_cuda_device(&comm);
            cd.n_threads = mg_comm_default_threads(&comm);
            {
                mg_gpt_config c = config_of(&a, 2, t);
                mg_gpt_layout L = mg_gpt_layout_single(&c, 1, 1, 1);
                L.tp_size = t;
                L.attention_backend = a.backend;
                cd.arena_bytes = 4 * mg_gpt_arena_bytes(&c, &L) + ((size_t)64 << 20);
            }
            mg_ctx_init(&ctx, &cd);
            mg_comm_setup_groups(&comm, &ctx, t, 1, 1);
            measure(&ctx, &a, &fig[bk][0], &fig[bk][1]);
            mg_ctx_free(&ctx);
        }
        if (comm.world_rank == 0) {
            printf("| %d |", a.seq);
            for (bk = 0; bk < 2; bk++) {
                int j;
                if (fig[bk][0] < 0) {
                    printf(" not built: the probabilities alone need %.0f | – |", -fig[bk][0] / M);
                    continue;
                }
                for (j = 0; j < 2; j++) {
                    if (prev[bk][j] > 0) printf(" %.3f (%.2f×) |", fig[bk][j] / M, fig[bk][j] / prev[bk][j]);
                    else printf(" %.3f |", fig[bk][j] / M);
                    prev[bk][j] = fig[bk][j];
                }
            }
            printf("\n");
            fflush(stdout);
        }
    }
    return 0;
}
/* Section 3: the classifier's bytes per rank, unfused vs fused, over a grid of V and B·T. */
static void classifier_table(const bench_args *a, int t) {
    static const int64_t vocabs[3] = {0, 50257, 128256}, tokens[3] = {0, 8192, 32768};
    mg_dtype dt = a->bf16 ? MG_BF16 : MG_F32;
    double M = 1024.0 * 1024.0, e = (double)mg_dtype_size(dt);
    int i, j;
    printf("\n| V | B·T | Vp/t | unfused: logits + stats (+ 16-bit dlogits) | fused: dlnf + one "
           "chunk | chunk rows | unfused/fused |\n|---|---|---|---|---|---|---|\n");
    for (i = 0; i < 3; i++)
        for (j = 0; j < 3; j++) {
            int64_t V = i ? vocabs[i] : a->vocab, N = j ? tokens[j] : (int64_t)a->batch * a->seq;
            int64_t Vs = mg_gpt_pad_vocab((int)V, 128, t) / t;
            int64_t R = mg_classifier_chunk_rows(N, Vs, dt, MG_CLASSIFIER_CHUNK_BYTES);
            double before = (double)N * Vs * 4 + 3.0 * N * 4 + (a->bf16 ? (double)N * Vs * e : 0);
            double after = (double)N * a->hidden * e +
                           (double)mg_classifier_scratch_bytes(R, Vs, dt);
            printf("| %lld | %lld | %lld | %.1f | %.1f | %lld | %.1f |\n", (long long)V,
                   (long long)N, (long long)Vs, before / M, after / M, (long long)R,
                   before / after);
        }
}

int main(int argc, char **argv) {
    static const char *const rc_name[3] = {"none", "selective", "full"};
    bench_args a = {4, 256, 8, 512, 2, 8192, 0, MG_ATTN_UNFUSED, 2048, ""};
    int i, sp, t, rc;
    mg_ctx ctx;
    mg_ctx_desc cd;
    double M = 1024.0 * 1024.0;
    struct { double layer, paper, ours, acts, scratch, transient, total; } row[3][2];
    mg_comm_init(&comm, &argc, &argv);
    t = comm.world_size;
    for (i = 1; i < argc; i++) {
        int v = i + 1 < argc ? atoi(argv[i + 1]) : 0;
        if (!strcmp(argv[i], "--bf16")) { a.bf16 = 1; continue; }
        if (i + 1 >= argc) v = -1;
        if (!strcmp(argv[i], "--attention-backend") && v != -1 &&
            (!strcmp(argv[i + 1], "flash") || !strcmp(argv[i + 1], "unfused"))) {
            a.backend = strcmp(argv[i + 1], "flash") ? MG_ATTN_UNFUSED : MG_ATTN_FLASH;
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--seq-sweep") && v != -1) {
            snprintf(a.sweep, sizeof a.sweep, "%s", argv[i + 1]);
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--layers") && v > 1) a.layers = v;
        else if (!strcmp(argv[i], "--hidden") && v > 0) a.hidden = v;
        else if (!strcmp(argv[i], "--heads") && v > 0) a.heads = v;
        else if (!strcmp(argv[i], "--seq") && v > 0) a.seq = v;
        else if (!strcmp(argv[i], "--batch") && v > 0) a.batch = v;
        else if (!strcmp(argv[i], "--vocab") && v > 1) a.vocab = v;
        else if (!strcmp(argv[i], "--max-mib") && v > 0) a.max_mib = v;
        else {
            if (comm.world_rank == 0)
                fprintf(stderr, "memory: bad option %s (expected --layers N>1, --hidden N, "
                        "--heads N, --seq N, --batch N, --vocab N, --bf16, --attention-backend "
                        "unfused|flash, --seq-sweep N,N,…, --max-mib N)\n", argv[i]);
            mg_comm_finalize(&comm);
            return 2;
        }
        i++;
    }
    if (a.sweep[0]) {
        int rc2 = sweep(&a);
        mg_comm_finalize(&comm);
        return rc2;
    }
    memset(&cd, 0, sizeof cd);
    cd.device = MG_DEVICE_AUTO;
    cd.cuda_device = mg_comm_cuda_device(&comm);
    cd.n_threads = mg_comm_default_threads(&comm);
    {
        mg_gpt_config c = config_of(&a, a.layers, t);
        mg_gpt_layout L = mg_gpt_layout_single(&c, a.batch, 1, 1);
        L.tp_size = t;
        L.attention_backend = a.backend;
        cd.arena_bytes = 4 * mg_gpt_arena_bytes(&c, &L) + ((size_t)64 << 20);
    }
    mg_ctx_init(&ctx, &cd);
    mg_comm_setup_groups(&comm, &ctx, t, 1, 1);
    for (rc = 0; rc < 3; rc++)
        for (sp = 0; sp < 2; sp++) {
            mg_gpt big, small;
            mg_plan_model pm;
            double s = a.seq, b = a.batch, h = a.hidden, heads = a.heads, e = a.bf16 ? 2 : 4;
            double r = sp && t > 1 ? 1.0 / t : 1;
            size_t mark = mg_arena_mark(&ctx), used;
            int32_t *samples = (int32_t *)malloc(sizeof(int32_t) * (size_t)a.batch * (a.seq + 1));
            int64_t k;
            /* 1. per layer: the activation block of l layers minus that of l-1 */
            build(&small, &ctx, &a, a.layers - 1, sp, rc);
            build(&big, &ctx, &a, a.layers, sp, rc);
            row[rc][sp].layer = (double)(big.act_bytes - small.act_bytes);
            memset(&pm, 0, sizeof pm);
            pm.num_layers = a.layers;
            pm.hidden_size = a.hidden;
            pm.num_attention_heads = a.heads;
            pm.seq_length = a.seq;
            pm.vocab_size = a.vocab;
            /* MG_PLAN_RECOMPUTE_* and mg_recompute share their numbering */
            row[rc][sp].paper = mg_plan_activation_bytes_per_layer(&pm, a.batch, t, sp, rc,
                                                                   (int)e);
            row[rc][sp].ours = row[rc][sp].paper;
            if (rc != MG_RECOMPUTE_FULL)        /* hidden dropout masks are never stored */
                row[rc][sp].ours -= 2 * s * b * h * r;
            if (rc == MG_RECOMPUTE_NONE)        /* nor the attention mask and dropped probs */
                row[rc][sp].ours -= (1 + e) * heads * s * s * b / t;
            if (a.backend == MG_ATTN_FLASH && rc != MG_RECOMPUTE_FULL)   /* nor probabilities: */
                row[rc][sp].ours += (rc == MG_RECOMPUTE_NONE ? -e : 0.0) * heads * s * s * b / t +
                                    4.0 * heads * s * b / t;        /* a log-sum-exp a query */
            /* 2. the whole model, and a real forward + backward on these ranks */
            row[rc][sp].acts = (double)big.act_bytes;
            used = mg_arena_mark(&ctx);
            row[rc][sp].scratch = (double)big.scratch_bytes;
            for (k = 0; k < (int64_t)a.batch * (a.seq + 1); k++)
                samples[k] = (int32_t)((k * 2654435761u) % (uint32_t)a.vocab);
            mg_arena_reset_peak(&ctx);
            mg_gpt_run_microbatches(&big, samples, 1, 1.0f / (float)(a.batch * a.seq), 1);
            mg_sync(&ctx);
            row[rc][sp].transient = (double)(ctx.arena_peak - used);
            row[rc][sp].total = row[rc][sp].acts + row[rc][sp].scratch + row[rc][sp].transient;
            free(samples);
            mg_gpt_destroy(&big);
            mg_gpt_destroy(&small);
            mg_arena_release(&ctx, mark);
        }
    if (comm.world_rank == 0) {
        printf("# memory: l=%d h=%d a=%d s=%d b=%d V=%d, t=%d, %s activations, %s attention "
               "(%s); MiB per rank\n", a.layers, a.hidden, a.heads, a.seq, a.batch, a.vocab, t,
               a.bf16 ? "bf16" : "fp32", a.backend == MG_ATTN_FLASH ? "flash" : "unfused",
               mg_device_name(&ctx));
        printf("| t | sp | recompute | per layer measured | paper (e=%d) | ours (paper - masks - "
               "dropout out) | measured/ours | measured/paper |\n"
               "|---|---|---|---|---|---|---|---|\n", a.bf16 ? 2 : 4);
        for (rc = 0; rc < 3; rc++)
            for (sp = 0; sp < 2; sp++)
                printf("| %d | %s | %s | %.3f | %.3f | %.3f | %.4f | %.4f |\n", t,
                       sp ? "yes" : "no", rc_name[rc], row[rc][sp].layer / M,
                       row[rc][sp].paper / M, row[rc][sp].ours / M,
                       row[rc][sp].layer / row[rc][sp].ours, row[rc][sp].layer / row[rc][sp].paper);
        printf("\n| t | sp | recompute | activations, %d layers + embedding + head | scratch | "
               "op scratch (peak during fwd+bwd) | activation peak per rank |\n"
               "|---|---|---|---|---|---|---|\n", a.layers);
        for (rc = 0; rc < 3; rc++)
            for (sp = 0; sp < 2; sp++)
                printf("| %d | %s | %s | %.3f | %.3f | %.3f | %.3f |\n", t, sp ? "yes" : "no",
                       rc_name[rc], row[rc][sp].acts / M, row[rc][sp].scratch / M,
                       row[rc][sp].transient / M, row[rc][sp].total / M);
        classifier_table(&a, t);
    }
    mg_ctx_free(&ctx);
    mg_comm_finalize(&comm);
    return 0;
}
