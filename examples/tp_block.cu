/* tp_block.cu — a tensor-parallel MLP block built from mg_transformer.h's layers, outside the
   GPT model, checked against the same block computed serially. A starting point for trying
   Megatron's split on layers of your own: it includes mg_transformer.h alone (which brings
   mg_comm.h and mg_tensor.h), not megatron.h.

     make build/tp_block
     mpirun -np 4 build/tp_block                        (t = 4, plain tensor parallelism)
     mpirun -np 2 build/tp_block --sequence-parallel    (t = 2, sequence parallel)
     build/tp_block                                     (t = 1: the serial block itself)

   The block (Megatron's ParallelMLP, Narayanan et al. 2021 §2.3): Z = GELU(X·Aᵀ + a)·Bᵀ + b
   for X [N, C], A [4C, C], B [C, 4C]. Split over t ranks:
     A, a  column-parallel: rank r holds output rows [r·4C/t, (r+1)·4C/t) — so GELU is local;
     B     row-parallel: rank r holds the same 4C/t input columns; each rank's product is a
           partial sum of Z, and b (replicated) is added by rank 0 only.
   The layers are mg_transformer.h's ColumnParallelLinear and RowParallelLinear, which wrap
   Megatron's communication operators (mg_tp_gather before the column-parallel layer,
   mg_tp_reduce after the row-parallel one; each is the other's backward):
     plain TP:        X whole on every rank   -> ... -> all-reduce of Z   (backward: all-reduce
                      of dX; dZ is whole on every rank)
     sequence par.:   X split by rows         -> all-gather X -> ... -> reduce-scatter of Z
                      (backward: all-gather dZ, reduce-scatter dX)
   The GELU between them is mg_tensor.h's mg_gelu_forward / mg_gelu_backward. The check: this rank's part of Z and dX
   (its rows with sequence parallelism), of dA, da, dB (its slices) and db equal the serial
   block's to 1e-5 relative, with the data and upstream gradient drawn from the counter-based
   generator, so every rank can make the whole serial problem. Exit status 0 iff all match. */
#define MG_IMPLEMENTATION
#include "mg_transformer.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64          /* rows: sequence × batch                                             */
#define C 32          /* hidden size; the MLP is 4C wide                                     */

/* Deterministic host array of n normals (key, scale). */
static float *randn(uint64_t key, int64_t n, float scale) {
    float *x = (float *)malloc(sizeof(float) * (size_t)n);
    int64_t i;
    for (i = 0; i < n; i++) x[i] = scale * mg_rand_normal(key, (uint64_t)i);
    return x;
}
/* A device tensor [rows, cols] holding rows r0 … r0+rows-1 and columns c0 … c0+cols-1 of the
   host matrix src (src_cols wide); src NULL: zeros. */
static mg_tensor upload(mg_ctx *ctx, const float *src, int64_t src_cols, int64_t r0,
                        int64_t rows, int64_t c0, int64_t cols) {
    mg_tensor t = mg_tensor_2d(ctx, MG_F32, rows, cols);
    float *h = (float *)calloc((size_t)(rows * cols), sizeof(float));
    int64_t r;
    if (src)
        for (r = 0; r < rows; r++)
            memcpy(h + r * cols, src + (r0 + r) * src_cols + c0, sizeof(float) * (size_t)cols);
    mg_copy_to_device(ctx, t.data, h, sizeof(float) * (size_t)(rows * cols));
    free(h);
    return t;
}

/* The block's tensors on one rank (the serial block: t = 1, everything whole). */
typedef struct block {
    mg_tensor A, a, B, b, dA, da, dB, db;      /* weights and their gradients (slices)      */
    mg_tensor x, h, g, z, dz, dg, dx;          /* x, z, dz, dx: this rank's rows         */
} block;

/* Forward and backward of the block on tf's tensor group; x, dz hold this rank's rows. The
   layers share tf's scratch: the gathered activations with sequence parallelism, the partial
   sums before each reduction.                                                               */
static void block_run(mg_transformer *tf, block *k) {
    const mg_tensor *dx;
    /* forward: column-parallel A (gathers X), local GELU, row-parallel B (reduces Z) */
    mg_column_parallel_linear_forward(tf, &k->h, &k->x, &k->A, &k->a);
    mg_gelu_forward(tf->ctx, &k->g, &k->h);
    mg_row_parallel_linear_forward(tf, &k->z, &k->g, &k->B, &k->b);
    /* backward: the reduce's conjugate gathers dZ; the gather's conjugate reduces dX */
    mg_row_parallel_linear_backward(tf, &k->dg, &k->dz, &k->g, &k->B, &k->dB, &k->db, NULL);
    mg_gelu_backward(tf->ctx, &k->dg, &k->h, &k->dg);
    dx = mg_column_parallel_linear_backward(tf, &k->dg, &k->x, &k->A, &k->dA, &k->da);
    mg_copy(tf->ctx, k->dx.data, dx->data, mg_nbytes(dx));     /* out of the shared scratch */
}

/* The layers' shared state for group g: an MLP of width C on N rows (the attention fields of
   mg_layer_config are set but unused here: one head per rank, N positions of one sequence). */
static void block_layers(mg_transformer *tf, mg_ctx *ctx, mg_tp_group g) {
    mg_layer_config lc;
    mg_claim claim;
    memset(&lc, 0, sizeof lc);
    lc.hidden = C;
    lc.n_head = g.size;
    lc.seq_len = N;
    lc.micro_batch = 1;
    lc.dtype = MG_F32;
    mg_transformer_init(tf, ctx, &lc, g);
    claim.ctx = ctx;
    claim.bytes = 0;
    mg_transformer_claim_scratch(tf, &claim);
}

/* Rank r's block, cut from the serial problem: t ranks, n rows of activations each. */
static void block_make(mg_ctx *ctx, block *k, const float *const *host, int r, int t, int sp) {
    int64_t F = 4 * C / t, n = sp ? N / t : N, row0 = sp ? r * n : 0;
    k->A = upload(ctx, host[0], C, r * F, F, 0, C);
    k->a = upload(ctx, host[1], 1, r * F, F, 0, 1);
    k->B = upload(ctx, host[2], 4 * C, 0, C, r * F, F);
    k->b = upload(ctx, host[3], 1, 0, C, 0, 1);
    k->dA = upload(ctx, NULL, 0, 0, F, 0, C);
    k->da = upload(ctx, NULL, 0, 0, F, 0, 1);
    k->dB = upload(ctx, NULL, 0, 0, C, 0, F);
    k->db = upload(ctx, NULL, 0, 0, C, 0, 1);
    k->a.ndim = k->da.ndim = k->b.ndim = k->db.ndim = 1;         /* biases are vectors */
    k->a.shape[0] = k->da.shape[0] = F;
    k->b.shape[0] = k->db.shape[0] = C;
    k->x = upload(ctx, host[4], C, row0, n, 0, C);
    k->dz = upload(ctx, host[5], C, row0, n, 0, C);
    k->h = mg_tensor_2d(ctx, MG_F32, N, F);
    k->g = mg_tensor_2d(ctx, MG_F32, N, F);
    k->dg = mg_tensor_2d(ctx, MG_F32, N, F);
    k->z = mg_tensor_2d(ctx, MG_F32, n, C);
    k->dx = mg_tensor_2d(ctx, MG_F32, n, C);
}

/* Max relative error of rank-local `got` against the block `want` of the serial result
   (rows r0…, cols c0…, of a matrix want_cols wide), floor: the serial tensor's RMS / 10. */
static double compare(mg_ctx *ctx, const mg_tensor *got, const mg_tensor *want_whole,
                      int64_t r0, int64_t c0) {
    int64_t rows = mg_rows(got), cols = mg_cols(got), wc = mg_cols(want_whole), i, j;
    int64_t nw = mg_numel(want_whole);
    float *g = (float *)malloc(mg_nbytes(got)), *w = (float *)malloc(mg_nbytes(want_whole));
    double ss = 0, worst = 0, floor;
    mg_copy_to_host(ctx, g, got->data, mg_nbytes(got));
    mg_copy_to_host(ctx, w, want_whole->data, mg_nbytes(want_whole));
    for (i = 0; i < nw; i++) ss += (double)w[i] * w[i];
    floor = 0.1 * sqrt(ss / (double)nw) + 1e-30;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j++) {
            double want = w[(r0 + i) * wc + c0 + j], d = fabs(g[i * cols + j] - want);
            double e = d / (fabs(want) > floor ? fabs(want) : floor);
            if (!(e <= worst)) worst = e;
        }
    free(g);
    free(w);
    return worst;
}

int main(int argc, char **argv) {
    static mg_comm comm;
    mg_ctx ctx;
    mg_ctx_desc cd;
    mg_tp_group group;
    mg_transformer ser_layers, par_layers;
    block par, ser;
    float *host[6];
    int sp = argc > 1 && !strcmp(argv[1], "--sequence-parallel"), t, r, i;
    double err[6], worst = 0;
    const char *names[6] = {"Z", "dX", "dA", "da", "dB", "db"};
    float fworst;
    mg_comm_init(&comm, &argc, &argv);
    t = comm.world_size;
    if ((4 * C) % t || (sp && N % t)) {
        if (comm.world_rank == 0)
            fprintf(stderr, "tp_block: %d ranks do not divide 4C = %d%s\n", t, 4 * C,
                    sp ? " and the N = 64 rows" : "");
        mg_comm_finalize(&comm);
        return 2;
    }
    memset(&cd, 0, sizeof cd);
    cd.device = MG_DEVICE_AUTO;
    cd.cuda_device = mg_comm_cuda_device(&comm);
    cd.n_threads = mg_comm_default_threads(&comm);
    cd.arena_bytes = (size_t)16 << 20;
    mg_ctx_init(&ctx, &cd);
    mg_comm_setup_groups(&comm, &ctx, t, 1, 1);        /* every rank in one tensor group */
    group = mg_tp_group_make(&comm, sp);
    block_layers(&ser_layers, &ctx, mg_tp_group_make(NULL, 0));
    block_layers(&par_layers, &ctx, group);
    r = group.rank;
    /* the serial problem, the same on every rank: A, a, B, b, X, dZ */
    host[0] = randn(1, 4 * C * C, 0.2f);
    host[1] = randn(2, 4 * C, 0.1f);
    host[2] = randn(3, 4 * C * C, 0.1f);
    host[3] = randn(4, C, 0.1f);
    host[4] = randn(5, N * C, 1.0f);
    host[5] = randn(6, N * C, 1.0f);
    block_make(&ctx, &ser, (const float *const *)host, 0, 1, 0);
    block_make(&ctx, &par, (const float *const *)host, r, t, sp);
    block_run(&ser_layers, &ser);
    block_run(&par_layers, &par);
    {
        int64_t F = 4 * C / t, row0 = sp ? r * (N / t) : 0;
        err[0] = compare(&ctx, &par.z, &ser.z, row0, 0);
        err[1] = compare(&ctx, &par.dx, &ser.dx, row0, 0);
        err[2] = compare(&ctx, &par.dA, &ser.dA, r * F, 0);
        {   /* the bias gradients as [n, 1] views, so compare() can slice them */
            mg_tensor da = par.da, dsa = ser.da, db = par.db, dsb = ser.db;
            da.ndim = dsa.ndim = db.ndim = dsb.ndim = 2;
            da.shape[1] = dsa.shape[1] = db.shape[1] = dsb.shape[1] = 1;
            err[3] = compare(&ctx, &da, &dsa, r * F, 0);
            err[5] = compare(&ctx, &db, &dsb, 0, 0);
        }
        err[4] = compare(&ctx, &par.dB, &ser.dB, 0, r * F);
    }
    for (i = 0; i < 6; i++) if (!(err[i] <= worst)) worst = err[i];
    /* the worst error over the ranks, through the library's own all-reduce */
    fworst = (float)worst;
    {
        float *dev = (float *)mg_alloc(&ctx, sizeof(float));
        mg_copy_to_device(&ctx, dev, &fworst, sizeof fworst);
        mg_all_reduce(&comm, &comm.world, dev, dev, 1, MG_F32, MG_MAX);
        mg_copy_to_host(&ctx, &fworst, dev, sizeof fworst);
    }
    if (comm.world_rank == 0) {
        printf("tp_block: MLP %d x %d -> %d -> %d on %d rank%s%s (%s)\n", N, C, 4 * C, C, t,
               t > 1 ? "s" : "", group.sequence_parallel ? ", sequence parallel" : "",
               mg_device_name(&ctx));
        printf("  rank 0 against the serial block, max relative error:");
        for (i = 0; i < 6; i++) printf(" %s %.2g", names[i], err[i]);
        printf("\n  worst over all ranks %.2g: %s\n", (double)fworst,
               fworst <= 1e-5f ? "the tensor-parallel block equals the serial one"
                               : "MISMATCH");
    }
    for (i = 0; i < 6; i++) free(host[i]);
    mg_ctx_free(&ctx);
    mg_comm_finalize(&comm);
    return fworst <= 1e-5f ? 0 : 1;
}
