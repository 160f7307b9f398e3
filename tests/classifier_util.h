/* classifier_util.h — the fused, chunked classifier (mg_classifier_fused) against the unfused
   one, for tests/test_ops.c (fp32) and tests/test_ops_dtypes.c (16-bit).
     cls_unfused  the reference on one context: the full logits [N, Vp] in fp32 (one GEMM),
                  the three-step cross-entropy over the whole vocabulary, dlogits in x's dtype,
                  dx = dlogits·w, dw += dlogitsᵀ·x — what the model's head did before fusing.
     cls_fused    the fused op over t vocabulary slices of Vp/t rows of w, each slice on its own
                  OpenMP thread with its own context (as t tensor-parallel ranks), the merges an
                  all-reduce over the threads (a barrier, then every thread reduces the t
                  buffers in slice order); dx is the sum of the slices' partial dx in slice
                  order, dw the slices' rows stacked.
   x [N, C], w [Vp, C] (rows >= V are padding: any values), targets [N] < V, negative for an
   ignored row; host fp32 values, rounded to dt on upload. dw starts from dw0 (both
   accumulate). The gradient scales by dloss·dloss_scale (0: 1); cls_unfused multiplies the
   two itself and zeroes the ignored rows' losses itself (mg_xent_loss has no targets).
     cls_kept     the case of the kept rows alone (targets >= 0): the same dw wanted;
     cls_ignored_zero  whether every ignored row has loss 0 and a dx row of 0 exactly.       */
#ifndef CLASSIFIER_UTIL_H
#define CLASSIFIER_UTIL_H
#include <omp.h>
#include "ops_util.h"

typedef struct cls_case {
    mg_dtype dt;
    int64_t N, C, Vp, V;
    const float *x, *w, *dw0;
    const int32_t *targets;
    float dloss, dloss_scale;   /* dloss_scale 0: 1, as mg_classifier's                    */
    int backward;           /* 0: losses only (dx, dw untouched)                           */
} cls_case;
typedef struct cls_out { float losses[256], *dx, *dw; } cls_out;   /* dx [N, C], dw [Vp, C] */

static inline void cls_out_alloc(cls_out *o, const cls_case *k) {
    o->dx = (float *)calloc((size_t)(k->N * k->C), sizeof(float));
    o->dw = (float *)malloc((size_t)(k->Vp * k->C) * sizeof(float));
    memcpy(o->dw, k->dw0, (size_t)(k->Vp * k->C) * sizeof(float));
}
static inline void cls_out_free(cls_out *o) { free(o->dx); free(o->dw); }

static inline void cls_unfused(mg_ctx *ctx, const cls_case *k, cls_out *o) {
    size_t mark = mg_arena_mark(ctx);
    int64_t N = k->N;
    mg_tensor x = ops_dev(ctx, k->dt, k->x, N, k->C), w = ops_dev(ctx, k->dt, k->w, k->Vp, k->C);
    mg_tensor logits = ops_dev(ctx, MG_F32, NULL, N, k->Vp), dl = ops_dev(ctx, k->dt, NULL, N, k->Vp);
    mg_tensor dx = ops_dev(ctx, k->dt, NULL, N, k->C), dw = ops_dev(ctx, MG_F32, k->dw0, k->Vp, k->C);
    float *mx = ops_dev_f32(ctx, NULL, N), *se = ops_dev_f32(ctx, NULL, N);
    float *tl = ops_dev_f32(ctx, NULL, N), *loss = ops_dev_f32(ctx, NULL, N), *h;
    float scale = k->dloss_scale != 0.0f ? k->dloss_scale : 1.0f;
    int32_t *tg = ops_dev_i32(ctx, k->targets, N);
    int64_t i;
    mg_linear_forward(ctx, &logits, &x, &w, NULL);
    mg_xent_max(ctx, mx, &logits, 0, k->V);
    mg_xent_sumexp(ctx, se, tl, &logits, tg, mx, 0, k->V);
    mg_xent_loss(ctx, loss, mx, se, tl, N);
    mg_copy_to_host(ctx, o->losses, loss, (size_t)N * sizeof(float));
    for (i = 0; i < N; i++)
        if (k->targets[i] < 0) o->losses[i] = 0.0f;
    if (k->backward) {
        mg_xent_backward(ctx, &dl, &logits, tg, mx, se, k->dloss * scale, 0, k->V);
        mg_linear_backward_input(ctx, &dx, &dl, &w, 0);
        mg_linear_backward_weight(ctx, &dw, NULL, &dl, &x);
        h = ops_host(ctx, &dx);
        memcpy(o->dx, h, (size_t)(N * k->C) * sizeof(float));
        free(h);
        h = ops_host(ctx, &dw);
        memcpy(o->dw, h, (size_t)(k->Vp * k->C) * sizeof(float));
        free(h);
    }
    mg_arena_release(ctx, mark);
}

enum { CLS_MAX_SLICES = 4, CLS_MAX_MERGE = 256 };
typedef struct cls_merge_state {
    int t;
    mg_ctx *ctx[CLS_MAX_SLICES];
    float host[CLS_MAX_SLICES][CLS_MAX_MERGE];
} cls_merge_state;
/* The all-reduce of the t slice threads: each posts its buffer, all reduce the t posts in
   slice order (so every slice gets the same bits), then each writes the result back.      */
static inline void cls_merge(void *user, float *buf, int64_t n, int is_max) {
    cls_merge_state *g = (cls_merge_state *)user;
    int s = omp_get_thread_num(), k;
    int64_t i;
    float r[CLS_MAX_MERGE];
    if (n > CLS_MAX_MERGE) { printf("not ok - cls_merge: %lld floats\n", (long long)n); exit(1); }
    mg_copy_to_host(g->ctx[s], g->host[s], buf, (size_t)n * sizeof(float));
    #pragma omp barrier
    for (i = 0; i < n; i++) {
        r[i] = g->host[0][i];
        for (k = 1; k < g->t; k++)
            r[i] = is_max ? (g->host[k][i] > r[i] ? g->host[k][i] : r[i]) : r[i] + g->host[k][i];
    }
    #pragma omp barrier
    mg_copy_to_device(g->ctx[s], buf, r, (size_t)n * sizeof(float));
}

/* Returns 1 iff every slice computed bit-identical losses (o->losses holds slice 0's). */
static inline int cls_fused(const cls_case *k, int t, int64_t chunk_rows, cls_out *o) {
    cls_merge_state g;
    int64_t N = k->N, C = k->C, Vs = k->Vp / t, i;
    float *dx_slices = (float *)calloc((size_t)(t * N * C), sizeof(float));
    float *loss_slices = (float *)calloc((size_t)(t * N), sizeof(float));
    int agree = 1, s;
    memset(&g, 0, sizeof g);
    g.t = t;
    #pragma omp parallel num_threads(t)
    {
        int me = omp_get_thread_num();
        mg_ctx ctx;
        mg_classifier c;
        mg_tensor x, w, dx, dw;
        float *losses, *h;
        #pragma omp critical
        ctx = ops_ctx_make((size_t)8 << 20);
        ctx.n_threads = 1;
        g.ctx[me] = &ctx;
        x = ops_dev(&ctx, k->dt, k->x, N, C);
        w = ops_dev(&ctx, k->dt, k->w + me * Vs * C, Vs, C);
        dx = ops_dev(&ctx, k->dt, NULL, N, C);
        dw = ops_dev(&ctx, MG_F32, k->dw0 + me * Vs * C, Vs, C);
        losses = ops_dev_f32(&ctx, NULL, N);
        memset(&c, 0, sizeof c);
        c.x = &x;
        c.w = &w;
        c.targets = ops_dev_i32(&ctx, k->targets, N);
        c.vocab_start = me * Vs;
        c.vocab_size = k->V;
        c.losses = losses;
        c.dloss = k->dloss;
        c.dloss_scale = k->dloss_scale;
        c.dx = k->backward ? &dx : NULL;
        c.dw = k->backward ? &dw : NULL;
        c.chunk_rows = chunk_rows;
        c.scratch = mg_alloc(&ctx, mg_classifier_scratch_bytes(chunk_rows, Vs, k->dt));
        c.merge = t > 1 ? cls_merge : NULL;
        c.merge_user = &g;
        #pragma omp barrier
        mg_classifier_fused(&ctx, &c);
        mg_copy_to_host(&ctx, loss_slices + me * N, losses, (size_t)N * sizeof(float));
        h = ops_host(&ctx, &dx);
        memcpy(dx_slices + me * N * C, h, (size_t)(N * C) * sizeof(float));
        free(h);
        h = ops_host(&ctx, &dw);
        memcpy(o->dw + me * Vs * C, h, (size_t)(Vs * C) * sizeof(float));
        free(h);
        #pragma omp barrier
        #pragma omp critical
        mg_ctx_free(&ctx);
    }
    memcpy(o->losses, loss_slices, (size_t)N * sizeof(float));
    for (s = 1; s < t; s++)
        agree &= !memcmp(loss_slices, loss_slices + s * N, (size_t)N * sizeof(float));
    if (k->backward)
        for (i = 0; i < N * C; i++) {
            float sum = 0.0f;
            for (s = 0; s < t; s++) sum += dx_slices[s * N * C + i];
            o->dx[i] = sum;
        }
    free(dx_slices);
    free(loss_slices);
    return agree;
}

/* kept = k with only the rows whose target is >= 0, their x rows copied into xk [N, C] and
   their targets into tk [N]. Returns the number of rows kept.                              */
static inline int64_t cls_kept(const cls_case *k, cls_case *kept, float *xk, int32_t *tk) {
    int64_t i, n = 0;
    for (i = 0; i < k->N; i++)
        if (k->targets[i] >= 0) {
            memcpy(xk + n * k->C, k->x + i * k->C, (size_t)k->C * sizeof(float));
            tk[n++] = k->targets[i];
        }
    *kept = *k;
    kept->N = n;
    kept->x = xk;
    kept->targets = tk;
    return n;
}
/* 1 iff every ignored row (target < 0) has loss 0 and (training) a dx row of 0, exactly. */
static inline int cls_ignored_zero(const cls_case *k, const cls_out *o) {
    int64_t i, j;
    for (i = 0; i < k->N; i++) {
        if (k->targets[i] >= 0) continue;
        if (o->losses[i] != 0.0f) return 0;
        for (j = 0; k->backward && j < k->C; j++)
            if (o->dx[i * k->C + j] != 0.0f) return 0;
    }
    return 1;
}
#endif
