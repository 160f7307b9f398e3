/* bench/ops.c — CPU speed of the ops of mg_tensor.h: GEMM GFLOP/s (the machine's sgemm peak,
   the linear shapes of a small GPT, the attention batched GEMMs) and the median time of every
   op forward and backward at those shapes. Its PyTorch peer is bench/ops_torch.py, which runs
   the same shapes with the same thread count and prints both side by side:
       /usr/bin/python3 bench/ops_torch.py --c build/ops --threads 2
   Alone:  build/ops [--threads N] [--B 4] [--T 256] [--C 384] [--nh 6] [--V 8192] [--reps 10]
   Output: one line per measurement, "op NAME MEDIAN_MS [GFLOPS]" (read by ops_torch.py).
   All fp32 (the CPU training dtype). MG_DEVICE selects the device as everywhere (a CUDA build
   on a GPU machine times the CUDA backend; the times include a device synchronisation).    */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include "mg_tensor.h"

static int g_reps = 10;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* Prints the median of the run times, with GFLOP/s when flops > 0. */
static void report(const char *name, double *ts, double flops) {
    double med;
    qsort(ts, g_reps, sizeof(double), cmp_double);
    med = ts[g_reps / 2];
    if (flops > 0) printf("op %s %.4f %.1f\n", name, med, flops / med * 1e-6);
    else printf("op %s %.4f\n", name, med);
    fflush(stdout);
}
/* Median wall time of `reps` runs of the statement after 2 warm-up runs. */
#define TIME(ctx, name, flops, stmt) do { \
    double ts_[64]; int r_; \
    for (r_ = 0; r_ < 2; r_++) { stmt; } \
    mg_sync(ctx); \
    for (r_ = 0; r_ < g_reps; r_++) { \
        double t0_ = now_ms(); \
        stmt; \
        mg_sync(ctx); \
        ts_[r_] = now_ms() - t0_; \
    } \
    report(name, ts_, flops); \
} while (0)

static mg_tensor rand_tensor(mg_ctx *ctx, int64_t rows, int64_t cols, float scale) {
    mg_tensor t = mg_tensor_2d(ctx, MG_F32, rows, cols);
    float *h = (float *)malloc((size_t)(rows * cols) * 4);
    int64_t i;
    for (i = 0; i < rows * cols; i++) h[i] = scale * (mg_rand_uniform(7, (uint64_t)i) - 0.5f);
    mg_copy_to_device(ctx, t.data, h, (size_t)(rows * cols) * 4);
    free(h);
    return t;
}

int main(int argc, char **argv) {
    int B = 4, T = 256, C = 384, NH = 6, V = 8192, threads = 0, i;
    mg_ctx ctx;
    mg_ctx_desc desc;
    for (i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--threads")) threads = v;
        else if (!strcmp(argv[i], "--B")) B = v;
        else if (!strcmp(argv[i], "--T")) T = v;
        else if (!strcmp(argv[i], "--C")) C = v;
        else if (!strcmp(argv[i], "--nh")) NH = v;
        else if (!strcmp(argv[i], "--V")) V = v;
        else if (!strcmp(argv[i], "--reps")) g_reps = v;
        else { fprintf(stderr, "ops: unknown flag %s\n", argv[i]); return 2; }
    }
    if (g_reps < 1 || g_reps > 64 || B < 1 || T < 1 || C < 1 || NH < 1 || C % NH || V < 1) {
        fprintf(stderr, "ops: need 1 <= reps <= 64, positive sizes and nh dividing C\n");
        return 2;
    }
    memset(&desc, 0, sizeof desc);
    desc.n_threads = threads;
    desc.arena_bytes = (size_t)3 << 30;
    mg_ctx_init(&ctx, &desc);
    printf("# device %s, threads %d, B %d T %d C %d nh %d V %d, median of %d\n",
           mg_device_name(&ctx), ctx.n_threads, B, T, C, NH, V, g_reps);
    {
        int64_t N = (int64_t)B * T;
        mg_tensor x = rand_tensor(&ctx, N, 4 * C, 2), y = rand_tensor(&ctx, N, 4 * C, 2);
        mg_tensor dy = rand_tensor(&ctx, N, 4 * C, 2), w = rand_tensor(&ctx, 4 * C, 4 * C, 0.1f);
        mg_tensor dw = rand_tensor(&ctx, 4 * C, 4 * C, 0), b = rand_tensor(&ctx, 1, 4 * C, 1);
        mg_tensor db = rand_tensor(&ctx, 1, 4 * C, 0);
        mg_tensor big = rand_tensor(&ctx, 2048, 2048, 1), big2 = rand_tensor(&ctx, 2048, 2048, 1);
        mg_tensor bigc = rand_tensor(&ctx, 2048, 2048, 1);
        float *mean = (float *)mg_alloc(&ctx, N * 4), *rstd = (float *)mg_alloc(&ctx, N * 4);
        char name[96];
        int k;
        /* sgemm peak: 2048^3 through mg_gemm, and OpenBLAS's own threading for reference */
        TIME(&ctx, "sgemm_2048_mg_gemm", 2.0 * 2048 * 2048 * 2048,
             mg_gemm(&ctx, 0, 0, 2048, 2048, 2048, 1, big.data, MG_F32, 2048, big2.data, MG_F32,
                     2048, 0, bigc.data, MG_F32, 2048));
        if (ctx.device == MG_DEVICE_CPU) {
            openblas_set_num_threads(ctx.n_threads);
            TIME(&ctx, "sgemm_2048_openblas_threads", 2.0 * 2048 * 2048 * 2048,
                 cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, 2048, 2048, 2048, 1,
                             (const float *)big.data, 2048, (const float *)big2.data, 2048, 0,
                             (float *)bigc.data, 2048));
            openblas_set_num_threads(1);
        }
        /* linear layers of a GPT block and the output layer (forward, both backward halves) */
        {
            const char *lname[5] = {"qkv", "attproj", "fc", "fcproj", "lmhead"};
            int fin[5] = {C, C, C, 4 * C, C}, fout[5] = {3 * C, C, 4 * C, C, V};
            for (k = 0; k < 5; k++) {
                mg_tensor in = mg_tensor_rows(&x, 0, N), out = mg_tensor_rows(&y, 0, N);
                mg_tensor d = mg_tensor_rows(&dy, 0, N), wt, dwt, bt, dbt;
                double fl = 2.0 * N * fin[k] * fout[k];
                size_t mark = mg_arena_mark(&ctx);
                in.shape[1] = fin[k]; out.shape[1] = fout[k]; d.shape[1] = fout[k];
                if (k == 4) { /* the output layer needs its own [N, V] buffers */
                    out = rand_tensor(&ctx, N, V, 1); d = rand_tensor(&ctx, N, V, 1);
                    wt = rand_tensor(&ctx, V, C, 0.1f); dwt = rand_tensor(&ctx, V, C, 0);
                } else {
                    wt = mg_tensor_rows(&w, 0, fout[k]); wt.shape[1] = fin[k];
                    dwt = mg_tensor_rows(&dw, 0, fout[k]); dwt.shape[1] = fin[k];
                }
                bt = b; bt.shape[1] = fout[k];
                dbt = db; dbt.shape[1] = fout[k];
                snprintf(name, sizeof name, "linear_%s_fwd", lname[k]);
                TIME(&ctx, name, fl, mg_linear_forward(&ctx, &out, &in, &wt, k == 4 ? NULL : &bt));
                snprintf(name, sizeof name, "linear_%s_bwd_input", lname[k]);
                TIME(&ctx, name, fl, mg_linear_backward_input(&ctx, &in, &d, &wt, 0));
                snprintf(name, sizeof name, "linear_%s_bwd_weight", lname[k]);
                TIME(&ctx, name, fl, mg_linear_backward_weight(&ctx, &dwt, k == 4 ? NULL : &dbt, &d, &in));
                mg_arena_release(&ctx, mark);
            }
        }
        /* row-wise and elementwise ops */
        {
            mg_tensor xc = mg_tensor_rows(&x, 0, N), yc = mg_tensor_rows(&y, 0, N);
            mg_tensor dc = mg_tensor_rows(&dy, 0, N), lw = b, lb = b, dlw = db, dlb = db;
            mg_tensor x4 = mg_tensor_rows(&x, 0, N), y4 = mg_tensor_rows(&y, 0, N), d4 = mg_tensor_rows(&dy, 0, N);
            xc.shape[1] = C; yc.shape[1] = C; dc.shape[1] = C;
            lw.shape[1] = C; lb.shape[1] = C; dlw.shape[1] = C; dlb.shape[1] = C;
            TIME(&ctx, "layernorm_fwd", 0, mg_layernorm_forward(&ctx, &yc, mean, rstd, &xc, &lw, &lb));
            TIME(&ctx, "layernorm_bwd", 0,
                 mg_layernorm_backward(&ctx, &yc, &dlw, &dlb, &dc, &xc, &lw, mean, rstd, 1));
            TIME(&ctx, "gelu_fwd", 0, mg_gelu_forward(&ctx, &y4, &x4));
            TIME(&ctx, "gelu_bwd", 0, mg_gelu_backward(&ctx, &y4, &x4, &d4));
            TIME(&ctx, "residual_add", 0, mg_add(&ctx, &yc, &xc, &dc));
            TIME(&ctx, "dropout_fwd_p0.1", 0, mg_dropout_forward(&ctx, &y4, &x4, 0.1f, 5, 0));
        }
        /* attention core */
        {
            size_t mark = mg_arena_mark(&ctx);
            mg_tensor qkv = rand_tensor(&ctx, N, 3 * C, 2), out = rand_tensor(&ctx, N, C, 1);
            mg_tensor att = rand_tensor(&ctx, (int64_t)B * NH * T, T, 0);
            mg_tensor datt = rand_tensor(&ctx, (int64_t)B * NH * T, T, 0);
            mg_tensor dqkv = rand_tensor(&ctx, N, 3 * C, 0), dout = rand_tensor(&ctx, N, C, 1);
            double fl = 4.0 * B * NH * (double)T * T * (C / NH);
            TIME(&ctx, "attention_fwd", fl, mg_attention_forward(&ctx, &out, &att, &qkv, B, T, NH, NULL));
            TIME(&ctx, "attention_bwd", 2 * fl,
                 mg_attention_backward(&ctx, &dqkv, &datt, &dout, &qkv, &att, B, T, NH, NULL));
            {   /* the tiled attention (the layer's default): fp32 lse [B, nh, T], no T x T */
                mg_tensor lse = rand_tensor(&ctx, (int64_t)B * NH, T, 0);
                TIME(&ctx, "flash_attention_fwd", fl,
                     mg_flash_attention_forward(&ctx, &out, &lse, &qkv, B, T, NH, NH, NULL));
                TIME(&ctx, "flash_attention_bwd", 2 * fl,
                     mg_flash_attention_backward(&ctx, &dqkv, &dout, &out, &lse, &qkv, B, T, NH,
                                                 NH, NULL));
            }
            mg_arena_release(&ctx, mark);
        }
        /* cross-entropy over V, one slice */
        {
            size_t mark = mg_arena_mark(&ctx);
            mg_tensor logits = rand_tensor(&ctx, N, V, 4), dl = rand_tensor(&ctx, N, V, 0);
            int32_t *tg_h = (int32_t *)malloc(N * 4), *tg = (int32_t *)mg_alloc(&ctx, N * 4);
            float *mx = (float *)mg_alloc(&ctx, N * 4), *se = (float *)mg_alloc(&ctx, N * 4);
            float *tl = (float *)mg_alloc(&ctx, N * 4), *ls = (float *)mg_alloc(&ctx, N * 4);
            int64_t r;
            for (r = 0; r < N; r++) tg_h[r] = (int32_t)((r * 7919) % V);
            mg_copy_to_device(&ctx, tg, tg_h, N * 4);
            TIME(&ctx, "xent_fwd", 0, {
                mg_xent_max(&ctx, mx, &logits, 0, V);
                mg_xent_sumexp(&ctx, se, tl, &logits, tg, mx, 0, V);
                mg_xent_loss(&ctx, ls, mx, se, tl, N); });
            TIME(&ctx, "xent_bwd", 0,
                 mg_xent_backward(&ctx, &dl, &logits, tg, mx, se, 1.0f / N, 0, V));
            free(tg_h);
            mg_arena_release(&ctx, mark);
        }
        /* the classifier: output layer + cross-entropy + their backward over N rows, unfused
           (the [N, V] logits, three steps, then dx and dW) and fused in chunks of 128 rows
           (mg_classifier_fused: the logits never whole); 3 GEMMs of 2·N·C·V FLOPs each    */
        {
            size_t mark = mg_arena_mark(&ctx);
            mg_tensor x = rand_tensor(&ctx, N, C, 1), w = rand_tensor(&ctx, V, C, 1);
            mg_tensor dx = rand_tensor(&ctx, N, C, 0), dw = rand_tensor(&ctx, V, C, 0);
            mg_tensor logits = rand_tensor(&ctx, N, V, 0);
            int32_t *tg_h = (int32_t *)malloc(N * 4), *tg = (int32_t *)mg_alloc(&ctx, N * 4);
            float *mx = (float *)mg_alloc(&ctx, N * 4), *se = (float *)mg_alloc(&ctx, N * 4);
            float *tl = (float *)mg_alloc(&ctx, N * 4), *ls = (float *)mg_alloc(&ctx, N * 4);
            double fl = 6.0 * N * C * V;
            mg_classifier c;
            int64_t r;
            for (r = 0; r < N; r++) tg_h[r] = (int32_t)((r * 7919) % V);
            mg_copy_to_device(&ctx, tg, tg_h, N * 4);
            TIME(&ctx, "classifier_unfused", fl, {
                mg_linear_forward(&ctx, &logits, &x, &w, NULL);
                mg_xent_max(&ctx, mx, &logits, 0, V);
                mg_xent_sumexp(&ctx, se, tl, &logits, tg, mx, 0, V);
                mg_xent_loss(&ctx, ls, mx, se, tl, N);
                mg_xent_backward(&ctx, &logits, &logits, tg, mx, se, 1.0f / N, 0, V);
                mg_linear_backward_input(&ctx, &dx, &logits, &w, 0);
                mg_linear_backward_weight(&ctx, &dw, NULL, &logits, &x); });
            memset(&c, 0, sizeof c);
            c.x = &x;
            c.w = &w;
            c.targets = tg;
            c.vocab_size = V;
            c.losses = ls;
            c.dloss = 1.0f / N;
            c.dx = &dx;
            c.dw = &dw;
            c.chunk_rows = 128;
            c.scratch = mg_alloc(&ctx, mg_classifier_scratch_bytes(128, V, MG_F32));
            TIME(&ctx, "classifier_fused_128", fl, mg_classifier_fused(&ctx, &c));
            free(tg_h);
            mg_arena_release(&ctx, mark);
        }
        /* embedding */
        {
            size_t mark = mg_arena_mark(&ctx);
            mg_tensor wte = rand_tensor(&ctx, V, C, 1), wpe = rand_tensor(&ctx, T, C, 1);
            mg_tensor dwte = rand_tensor(&ctx, V, C, 0), dwpe = rand_tensor(&ctx, T, C, 0);
            mg_tensor out = rand_tensor(&ctx, N, C, 0), dout = rand_tensor(&ctx, N, C, 1);
            int32_t *tk_h = (int32_t *)malloc(N * 4), *tk = (int32_t *)mg_alloc(&ctx, N * 4);
            int64_t r;
            for (r = 0; r < N; r++) tk_h[r] = (int32_t)((r * 7919) % V);
            mg_copy_to_device(&ctx, tk, tk_h, N * 4);
            TIME(&ctx, "embedding_fwd", 0, mg_embedding_forward(&ctx, &out, tk, B, T, 0, &wte, 0, &wpe));
            TIME(&ctx, "embedding_bwd", 0, mg_embedding_backward(&ctx, &dwte, &dwpe, &dout, tk, B, T, 0, 0));
            free(tk_h);
            mg_arena_release(&ctx, mark);
        }
        /* optimizer over a GPT-sized parameter vector: 12·C²·L + V·C with L = 4 */
        {
            size_t mark = mg_arena_mark(&ctx);
            int64_t n = (int64_t)12 * C * C * 4 + (int64_t)V * C;
            mg_tensor p = rand_tensor(&ctx, 1, n, 1), g = rand_tensor(&ctx, 1, n, 1);
            mg_tensor m = rand_tensor(&ctx, 1, n, 0), v = rand_tensor(&ctx, 1, n, 0);
            mg_adamw_hparams hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
            int nonfinite;
            TIME(&ctx, "adamw_step", 0,
                 mg_adamw_step(&ctx, (float *)p.data, (const float *)g.data, (float *)m.data,
                               (float *)v.data, n, &hp, 1.0f, NULL, MG_F32));
            TIME(&ctx, "grad_sumsq", 0, (void)mg_sumsq(&ctx, (const float *)g.data, n, &nonfinite));
            mg_arena_release(&ctx, mark);
        }
    }
    printf("# arena peak %.1f MiB\n", ctx.arena_peak / 1048576.0);
    mg_ctx_free(&ctx);
    return 0;
}
