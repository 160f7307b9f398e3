/* gpu_ops.c — every op of mg_tensor.h on the CUDA backend against the CPU backend, same inputs,
   fp32 and bf16 storage. Prints each op's max relative error (against max(|cpu|, RMS/10)) and
   exits non-zero when any is above tolerance; also checks that the counter-based RNG and the
   16-bit conversions give bit-identical results in device code. Where no GPU is present it
   prints "no GPU: skipped" and exits 0.
   Built by nvcc only (build/gpu_ops_cuda); not run by the suite (tests/run.sh), run it by hand
   on a GPU machine:  make build/gpu_ops_cuda && ./build/gpu_ops_cuda
   Shapes are larger than the CPU tests so the kernels see rows longer than a block (C = 384,
   V = 1000, T = 300), several blocks, odd sizes and padding.                                */
#include "../ops_util.h"

static mg_ctx *g_cpu, *g_gpu;

/* --- device-side checks of the MG_HD scalar functions ------------------------------------- */
static __global__ void k_scalars(uint32_t *u32, float *normal, uint16_t *bf, uint16_t *hf,
                                 const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u32[i] = mg_rand_u32(0x1234ABCDull, (uint64_t)i * 977);
    normal[i] = mg_rand_normal(0x1234ABCDull, (uint64_t)i);
    bf[i] = mg_f32_to_bf16(x[i]);
    hf[i] = mg_f32_to_f16(x[i]);
}
static void test_scalars(void) {
    enum { n = 1 << 20 };
    uint32_t *u32 = (uint32_t *)malloc(n * 4), *xb = (uint32_t *)malloc(n * 4);
    float *normal = (float *)malloc(n * 4);
    uint16_t *bf = (uint16_t *)malloc(n * 2), *hf = (uint16_t *)malloc(n * 2);
    size_t mark = mg_arena_mark(g_gpu);
    uint32_t *du = (uint32_t *)mg_alloc(g_gpu, n * 4);
    float *dn = (float *)mg_alloc(g_gpu, n * 4), *dx = (float *)mg_alloc(g_gpu, n * 4);
    uint16_t *db = (uint16_t *)mg_alloc(g_gpu, n * 2), *dh = (uint16_t *)mg_alloc(g_gpu, n * 2);
    int i, bad_u = 0, bad_n = 0, bad_c = 0;
    for (i = 0; i < n; i++) { /* random bit patterns: every exponent, NaNs and infs included */
        ops_lcg = ops_lcg * 6364136223846793005ull + 1442695040888963407ull;
        xb[i] = (uint32_t)(ops_lcg >> 32);
    }
    mg_copy_to_device(g_gpu, dx, xb, n * 4);
    k_scalars<<<(n + 255) / 256, 256, 0, (cudaStream_t)g_gpu->stream>>>(du, dn, db, dh, dx, n);
    mg_copy_to_host(g_gpu, u32, du, n * 4);
    mg_copy_to_host(g_gpu, normal, dn, n * 4);
    mg_copy_to_host(g_gpu, bf, db, n * 2);
    mg_copy_to_host(g_gpu, hf, dh, n * 2);
    for (i = 0; i < n; i++) {
        float f;
        memcpy(&f, &xb[i], 4);
        bad_u += u32[i] != mg_rand_u32(0x1234ABCDull, (uint64_t)i * 977);
        bad_n += normal[i] != mg_rand_normal(0x1234ABCDull, (uint64_t)i);
        bad_c += bf[i] != mg_f32_to_bf16(f) || hf[i] != mg_f32_to_f16(f);
    }
    mg_test_report(bad_u == 0, "device mg_rand_u32 = host (1M draws)", "%d differ", bad_u);
    mg_test_report(bad_n == 0, "device mg_rand_normal = host (1M draws)", "%d differ", bad_n);
    mg_test_report(bad_c == 0, "device bf16/fp16 rounding = host (1M patterns)", "%d differ", bad_c);
    free(u32); free(xb); free(normal); free(bf); free(hf);
    mg_arena_release(g_gpu, mark);
}

/* --- ops on both backends ------------------------------------------------------------------ */
enum { T = 48, B = 3, C = 384, NH = 6, N = T * B, V = 1000, VP = 1024, AT = 300 };
static float *X, *W, *D, *E;      /* shared random host inputs, large enough for every op */
static int32_t TOK[N];

/* Runs op on ctx with storage dtype dt and returns its outputs as host fp32 arrays. */
typedef int (*op_fn)(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n);

static void compare(const char *name, op_fn op, mg_dtype dt, double tol) {
    float *oc[8], *og[8];
    int64_t nc[8], ng[8];
    size_t mc = mg_arena_mark(g_cpu), mgk = mg_arena_mark(g_gpu);
    int k, nout = op(g_cpu, dt, oc, nc);
    op(g_gpu, dt, og, ng);
    mg_sync(g_gpu);
    for (k = 0; k < nout; k++) {
        char label[128];
        snprintf(label, sizeof label, "%s [%s] output %d: cuda vs cpu", name, mg_dtype_name(dt), k);
        ops_close_host(label, og[k], oc[k], (long)nc[k], tol, 1e-6);
        free(oc[k]);
        free(og[k]);
    }
    mg_arena_release(g_cpu, mc);
    mg_arena_release(g_gpu, mgk);
}
#define OUT(t) (outs[nout] = ops_host(ctx, &(t)), n[nout] = mg_numel(&(t)), nout++)

static int op_gemm(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0, ta, tb;
    for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++) {
            mg_tensor a = ops_dev(ctx, dt, X, 1, 70 * 130), b = ops_dev(ctx, dt, W, 1, 130 * 90);
            mg_tensor c = ops_dev(ctx, MG_F32, D, 1, 71 * 90 * 3);
            mg_gemm(ctx, ta, tb, 70, 90, 130, 0.5f, a.data, dt, ta ? 130 : 70, b.data, dt,
                    tb ? 90 : 130, 0.25f, c.data, MG_F32, 71);
            /* batched: 3 matrices with padded strides, C in the input dtype */
            {
                mg_tensor c16 = ops_dev(ctx, dt, D, 1, 71 * 90 * 3);
                mg_gemm_strided_batched(ctx, ta, tb, 20, 30, 40, 1.0f, a.data, dt, 40, 40 * 25,
                                        b.data, dt, 40, 40 * 31, 0.0f, c16.data, dt, 21, 21 * 30 + 3, 3);
                OUT(c16);
            }
            OUT(c);
        }
    return nout;
}
static int op_embedding(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor wte = ops_dev(ctx, dt, E, 600, C), wpe = ops_dev(ctx, dt, W, T, C);
    mg_tensor out = ops_dev(ctx, dt, NULL, (T - 5) * B, C), dout = ops_dev(ctx, dt, D, (T - 5) * B, C);
    mg_tensor dwte = ops_dev(ctx, MG_F32, X, 600, C), dwpe = ops_dev(ctx, MG_F32, X, T, C);
    int32_t *tok = ops_dev_i32(ctx, TOK, N);
    /* vocabulary slice [400, 1000) of which rows 400..999 exist here as 600 rows; shard t0 = 5 */
    mg_embedding_forward(ctx, &out, tok, B, T, 5, &wte, 400, &wpe);
    mg_embedding_backward(ctx, &dwte, &dwpe, &dout, tok, B, T, 5, 400);
    OUT(out); OUT(dwte); OUT(dwpe);
    return nout;
}
static int op_layernorm(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor in = ops_dev(ctx, dt, X, N, C), w = ops_dev(ctx, dt, W, 1, C), b = ops_dev(ctx, dt, E, 1, C);
    mg_tensor out = ops_dev(ctx, dt, NULL, N, C), dout = ops_dev(ctx, dt, D, N, C), dinp = ops_dev(ctx, dt, E, N, C);
    mg_tensor dw = ops_dev(ctx, MG_F32, X, 1, C), db = ops_dev(ctx, MG_F32, W, 1, C);
    mg_tensor mean = mg_tensor_2d(ctx, MG_F32, 1, N), rstd = mg_tensor_2d(ctx, MG_F32, 1, N);
    mg_layernorm_forward(ctx, &out, (float *)mean.data, (float *)rstd.data, &in, &w, &b);
    mg_layernorm_backward(ctx, &dinp, &dw, &db, &dout, &in, &w, (float *)mean.data,
                          (float *)rstd.data, 1);
    OUT(out); OUT(mean); OUT(rstd); OUT(dinp); OUT(dw); OUT(db);
    return nout;
}
static int op_linear(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor in = ops_dev(ctx, dt, X, N, C), w = ops_dev(ctx, dt, W, 3 * C, C), b = ops_dev(ctx, dt, E, 1, 3 * C);
    mg_tensor out = ops_dev(ctx, dt, NULL, N, 3 * C), dout = ops_dev(ctx, dt, D, N, 3 * C);
    mg_tensor dinp = ops_dev(ctx, dt, NULL, N, C), dw = ops_dev(ctx, MG_F32, X, 3 * C, C);
    mg_tensor db = ops_dev(ctx, MG_F32, E, 1, 3 * C);
    mg_linear_forward(ctx, &out, &in, &w, &b);
    mg_linear_backward_input(ctx, &dinp, &dout, &w, 0);
    mg_linear_backward_weight(ctx, &dw, &db, &dout, &in);
    OUT(out); OUT(dinp); OUT(dw); OUT(db);
    return nout;
}
static int op_gelu(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor in = ops_dev(ctx, dt, X, N, C), out = ops_dev(ctx, dt, NULL, N, C), dout = ops_dev(ctx, dt, D, N, C);
    mg_gelu_forward(ctx, &out, &in);
    mg_gelu_backward(ctx, &dout, &in, &dout);
    OUT(out); OUT(dout);
    return nout;
}
static int attention_case(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, int Bq, int Tq,
                          int nh, int hd, float p) {
    int nout = 0, c = nh * hd;
    mg_attn_dropout drop = {p, 99, 1, nh + 2};
    mg_tensor qkv = ops_dev(ctx, dt, X, (int64_t)Tq * Bq, 3 * c), out = ops_dev(ctx, dt, NULL, (int64_t)Tq * Bq, c);
    mg_tensor att = ops_dev(ctx, dt, NULL, (int64_t)Bq * nh * Tq, Tq), datt = ops_dev(ctx, dt, NULL, (int64_t)Bq * nh * Tq, Tq);
    mg_tensor dout = ops_dev(ctx, dt, D, (int64_t)Tq * Bq, c), dqkv = ops_dev(ctx, dt, NULL, (int64_t)Tq * Bq, 3 * c);
    mg_attention_forward(ctx, &out, &att, &qkv, Bq, Tq, nh, &drop);
    mg_attention_backward(ctx, &dqkv, &datt, &dout, &qkv, &att, Bq, Tq, nh, &drop);
    OUT(out); OUT(att); OUT(dqkv);
    return nout;
}
static int op_attention(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return attention_case(ctx, dt, outs, n, B, T, NH, 16, 0.0f);
}
static int op_attention_long(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return attention_case(ctx, dt, outs, n, 1, AT, 2, 16, 0.1f); /* rows longer than a block */
}
static int op_elementwise(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor a = ops_dev(ctx, dt, X, N, C), b = ops_dev(ctx, dt, D, N, C), o = ops_dev(ctx, dt, NULL, N, C);
    mg_tensor f = ops_dev(ctx, MG_F32, NULL, N, C), c = ops_dev(ctx, MG_F32, NULL, 3, 7);
    mg_add(ctx, &o, &a, &b);
    mg_axpy(ctx, &o, -0.7f, &a);
    mg_scale(ctx, &o, 1.5f);
    mg_cast(ctx, &f, &o);
    mg_dropout_forward(ctx, &a, &a, 0.2f, mg_dropout_key(1, 2, 3), 17);
    mg_fill(ctx, &c, 0.125f);
    OUT(o); OUT(f); OUT(a); OUT(c);
    return nout;
}
static int op_xent(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0, s;
    int32_t tgt[N], *tg;
    mg_tensor loss = mg_tensor_2d(ctx, MG_F32, 1, N), mx = mg_tensor_2d(ctx, MG_F32, 1, N);
    mg_tensor se = mg_tensor_2d(ctx, MG_F32, 1, N), tl = mg_tensor_2d(ctx, MG_F32, 1, N);
    mg_tensor dl[2];
    for (s = 0; s < N; s++) tgt[s] = (s * 37) % V;
    tg = ops_dev_i32(ctx, tgt, N);
    /* two vocabulary slices of 512 (ids 1000..1023 padding), merged on the device with
       copies: max of the two slice maxima is taken on the host for simplicity            */
    {
        float m0[N], m1[N], s0[N], s1[N], t0[N], t1[N];
        mg_tensor l[2];
        for (s = 0; s < 2; s++) {
            l[s] = ops_dev(ctx, dt, X + s * 512 * N, N, 512);
            dl[s] = ops_dev(ctx, dt, NULL, N, 512);
        }
        mg_xent_max(ctx, (float *)mx.data, &l[0], 0, V);
        mg_copy_to_host(ctx, m0, mx.data, sizeof m0);
        mg_xent_max(ctx, (float *)mx.data, &l[1], 512, V);
        mg_copy_to_host(ctx, m1, mx.data, sizeof m1);
        for (s = 0; s < N; s++) m0[s] = m0[s] > m1[s] ? m0[s] : m1[s];
        mg_copy_to_device(ctx, mx.data, m0, sizeof m0);
        mg_xent_sumexp(ctx, (float *)se.data, (float *)tl.data, &l[0], tg, (float *)mx.data, 0, V);
        mg_copy_to_host(ctx, s0, se.data, sizeof s0);
        mg_copy_to_host(ctx, t0, tl.data, sizeof t0);
        mg_xent_sumexp(ctx, (float *)se.data, (float *)tl.data, &l[1], tg, (float *)mx.data, 512, V);
        mg_copy_to_host(ctx, s1, se.data, sizeof s1);
        mg_copy_to_host(ctx, t1, tl.data, sizeof t1);
        for (s = 0; s < N; s++) { s0[s] += s1[s]; t0[s] += t1[s]; }
        mg_copy_to_device(ctx, se.data, s0, sizeof s0);
        mg_copy_to_device(ctx, tl.data, t0, sizeof t0);
        mg_xent_loss(ctx, (float *)loss.data, (float *)mx.data, (float *)se.data, (float *)tl.data, N);
        for (s = 0; s < 2; s++)
            mg_xent_backward(ctx, &dl[s], &l[s], tg, (float *)mx.data, (float *)se.data, 1.0f / N,
                             512 * s, V);
    }
    OUT(loss); OUT(dl[0]); OUT(dl[1]);
    return nout;
}
static int op_adamw(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0, step;
    mg_adamw_hparams hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
    mg_tensor p = ops_dev(ctx, MG_F32, X, 1, 100003), g = ops_dev(ctx, MG_F32, D, 1, 100003);
    mg_tensor m = ops_dev(ctx, MG_F32, NULL, 1, 100003), v = ops_dev(ctx, MG_F32, NULL, 1, 100003);
    mg_tensor p16 = ops_dev(ctx, dt, NULL, 1, 100003), ss = mg_tensor_2d(ctx, MG_F32, 1, 2);
    float hs[2];
    int nonfinite;
    for (step = 1; step <= 3; step++) {
        hp.step = step;
        mg_adamw_step(ctx, (float *)p.data, (const float *)g.data, (float *)m.data, (float *)v.data,
                      100003, &hp, 0.7f, dt == MG_F32 ? NULL : p16.data, dt);
    }
    hs[0] = (float)mg_sumsq(ctx, (const float *)p.data, 100003, &nonfinite);
    hs[1] = (float)nonfinite;
    mg_copy_to_device(ctx, ss.data, hs, sizeof hs);
    OUT(p); OUT(m); OUT(v); OUT(ss);
    if (dt != MG_F32) OUT(p16);
    return nout;
}

int main(void) {
    mg_ctx cpu, gpu;
    mg_ctx_desc d;
    int i, k;
    if (!mg_cuda_available()) {
        printf("no GPU: skipped\n");
        return 0;
    }
    memset(&d, 0, sizeof d);
    d.arena_bytes = (size_t)512 << 20;
    d.device = MG_DEVICE_CPU;
    mg_ctx_init(&cpu, &d);
    d.device = MG_DEVICE_CUDA;
    mg_ctx_init(&gpu, &d);
    g_cpu = &cpu;
    g_gpu = &gpu;
    printf("# %s vs %s (%d CPU threads)\n", mg_device_name(&gpu), mg_device_name(&cpu), cpu.n_threads);
    X = ops_randn_array(1 << 20, 1);
    W = ops_randn_array(1 << 20, 0.2f);
    D = ops_randn_array(1 << 20, 1);
    E = ops_randn_array(1 << 20, 1);
    for (i = 0; i < N; i++) TOK[i] = (i * 389) % V;
    test_scalars();
    for (k = 0; k < 2; k++) {
        mg_dtype dt = k ? MG_BF16 : MG_F32;
        /* fp32: different summation orders only; bf16: outputs may round to the other
           neighbour (an ulp is 2^-8), so a few ulps relative to the scale               */
        double tol = k ? 2e-2 : 1e-4;
        compare("gemm", op_gemm, dt, tol);
        compare("embedding", op_embedding, dt, tol);
        compare("layernorm", op_layernorm, dt, tol);
        compare("linear", op_linear, dt, tol);
        compare("gelu", op_gelu, dt, tol);
        compare("attention", op_attention, dt, k ? 4e-2 : tol);
        compare("attention T=300 dropout", op_attention_long, dt, k ? 4e-2 : tol);
        compare("elementwise+dropout", op_elementwise, dt, tol);
        compare("xent (2 vocab slices)", op_xent, dt, tol);
        compare("adamw+sumsq", op_adamw, dt, tol);
    }
    free(X); free(W); free(D); free(E);
    mg_ctx_free(&gpu);
    mg_ctx_free(&cpu);
    return mg_test_summary();
}
