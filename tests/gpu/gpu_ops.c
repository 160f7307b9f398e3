/* gpu_ops.c — every op of mg_tensor.h on the CUDA backend against the CPU backend (itself
   checked against PyTorch by tests/test_ops*.c): same inputs, fp32, bf16 and fp16 storage,
   forward and backward. Prints each output's max relative error (against max(|cpu|, RMS/10))
   and exits non-zero when any is above its tolerance. Also checks on the device: the cuBLAS
   handle's configuration (stream, host pointer mode, fp32 split-K reductions), and that the
   counter-based RNG and the 16-bit conversions of device code are bit-identical to the host's.
   Built by nvcc (build/gpu_ops_cuda) and through the CUDA emulator (build/gpu_ops_emu: every
   kernel executed thread by thread on the CPU, race- and bounds-checked; tests/cuda_emu). On
   a GPU:
       make build/gpu_ops_cuda && ./build/gpu_ops_cuda
   gpu_ops_cuda without a GPU compares two CPU contexts instead: every difference must then be
   0, which checks this program (sizes, arena use, the exact cases below), not the CUDA
   backend; gpu_ops_emu always compares the emulated device with the CPU.
   Shapes are larger than the CPU tests so the kernels see rows longer than a block (C = 384,
   Vs = 512, T = 300), rows shorter than a block (C = 40, T = 48), several blocks, odd sizes,
   vocabulary padding, and many rows scattering into the same embedding rows.

   Tolerances (relative, see ops_floor): fp32 1e-4 — the two backends differ only in
   summation order, expf and FMA contraction (~1e-6). 16-bit outputs are computed in fp32 and
   rounded once, so an fp32 difference near a rounding boundary moves a result to the
   neighbouring value: an ulp is 2^-8..2^-7 relative for bf16 and 2^-11..2^-10 for fp16
   (fp16 subnormals, as in the cross-entropy gradients, are measured against the RMS floor).
   General: bf16 2e-2 (2.5 ulps at the coarse end); fp16 4e-3 (4 ulps: its subnormals near
   the RMS floor lose a little more). 16-bit attention twice that: a score that rounds the
   other way moves its probability by |score|·ulp, and the probabilities are rounded again
   before P·V. The same holds for the tiled attention's 16-bit path, which rounds P to the
   storage type for its P·V (tensor cores on the device, the CPU twin likewise). Its dqkv four
   times the dtype's: dS = P·(dP − Δ) is rounded to 16 bits from fp32 values the backends sum
   in different orders, so an entry near a rounding boundary lands an ulp apart, and each row
   of dS sums to zero, so dQ = scale·dS·K (and dK) cancel: one ulp of dS moves them by
   ulp·|K|, several ulps of a cancelled result. Measured (T = 48, hd 64): fp16 1.15e-2 with an
   emulated device against a Zen 3 CPU's OpenBLAS, 4.0e-3 on an H100; bf16 1.9e-2 on both.
   Exact cases (tolerance 0 on every device): the embedding, forward and backward (the CUDA
   dwte adds each token's rows in row order, rounding after each add, as the CPU does, and
   dwpe sums its B rows in order: the same IEEE operations), also with values whose every
   partial sum is representable, and the GEMM with k = 0 (C = β·C, and 0 with β = 0 even where
   C holds NaN).                                                                            */
#include <cublas_v2.h>
#include "../ops_util.h"

static mg_ctx *g_cpu, *g_dev; /* g_dev is a CUDA context, or a second CPU one without a GPU */

/* --- the context's cuBLAS handle: bound to its stream, host scalars, fp32 reductions -------- */
static void test_config(void) {
    cublasHandle_t h = (cublasHandle_t)g_dev->blas;
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    cublasPointerMode_t pm = CUBLAS_POINTER_MODE_DEVICE;
    cudaStream_t st = NULL;
    int ok = cublasGetMathMode(h, &mode) == CUBLAS_STATUS_SUCCESS &&
             cublasGetPointerMode(h, &pm) == CUBLAS_STATUS_SUCCESS &&
             cublasGetStream(h, &st) == CUBLAS_STATUS_SUCCESS;
    mg_test_report(ok && st == (cudaStream_t)g_dev->stream, "cuBLAS handle runs on the context's stream", "");
    mg_test_report(ok && pm == CUBLAS_POINTER_MODE_HOST, "cuBLAS alpha/beta are host pointers", "");
    mg_test_report(ok && (mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) &&
                       (mode & 0xF) == CUBLAS_DEFAULT_MATH,
                   "cuBLAS default math, reductions in fp32 (no TF32, no 16-bit split-K)",
                   "math mode %d", (int)mode);
    {   /* the workspace is the context's own allocation, so the memory report counts it */
        mg_memory_stats ms = mg_ctx_memory(g_dev);
        size_t ws = g_dev->blas_workspace_size, used = mg_device_memory_used(g_dev);
        mg_test_report(g_dev->blas_workspace && ws >= ((size_t)4 << 20) &&
                           ms.reserved == g_dev->arena_size + ws &&
                           ms.allocated == g_dev->arena_used + ws && used >= ms.reserved,
                       "cuBLAS's workspace is the context's allocation: mg_ctx_memory counts it "
                       "in reserved and allocated, the device's memory in use holds both",
                       "workspace %zu bytes, reserved %zu, device in use %zu", ws, ms.reserved,
                       used);
    }
}

/* --- device-side checks of the MG_HD scalar functions ------------------------------------- */
static __global__ void k_scalars(uint32_t *u32, float *normal, uint16_t *bf, uint16_t *hf,
                                 float *from16, const uint32_t *bits, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float x;
    if (i >= n) return;
    memcpy(&x, &bits[i], 4);
    u32[i] = mg_rand_u32(0x1234ABCDull, (uint64_t)i * 977);
    normal[i] = mg_rand_normal(0x1234ABCDull, (uint64_t)i);
    bf[i] = mg_f32_to_bf16(x);
    hf[i] = mg_f32_to_f16(x);
    from16[2 * i] = mg_bf16_to_f32((uint16_t)bits[i]);
    from16[2 * i + 1] = mg_f16_to_f32((uint16_t)(bits[i] >> 16));
}
static void test_scalars(void) {
    enum { n = 1 << 20 };
    uint32_t *u32 = (uint32_t *)malloc(n * 4), *xb = (uint32_t *)malloc(n * 4);
    float *normal = (float *)malloc(n * 4), *from16 = (float *)malloc(2 * n * 4);
    uint16_t *bf = (uint16_t *)malloc(n * 2), *hf = (uint16_t *)malloc(n * 2);
    size_t mark = mg_arena_mark(g_dev);
    uint32_t *du = (uint32_t *)mg_alloc(g_dev, n * 4), *dx = (uint32_t *)mg_alloc(g_dev, n * 4);
    float *dn = (float *)mg_alloc(g_dev, n * 4), *df = (float *)mg_alloc(g_dev, 2 * n * 4);
    uint16_t *db = (uint16_t *)mg_alloc(g_dev, n * 2), *dh = (uint16_t *)mg_alloc(g_dev, n * 2);
    cudaError_t err;
    int i, bad_u = 0, bad_n = 0, bad_c = 0, bad_w = 0;
    for (i = 0; i < n; i++) { /* random bit patterns: every exponent, NaNs and infs included */
        ops_lcg = ops_lcg * 6364136223846793005ull + 1442695040888963407ull;
        xb[i] = (uint32_t)(ops_lcg >> 32);
    }
    mg_copy_to_device(g_dev, dx, xb, n * 4);
    MG_LAUNCH(k_scalars, (n + 255) / 256, 256, 0, (cudaStream_t)g_dev->stream, du, dn, db, dh, df,
              dx, n);
    err = cudaGetLastError();
    if (err != cudaSuccess) {
        mg_test_report(0, "device scalar kernel", "launch failed: %s", cudaGetErrorString(err));
        mg_arena_release(g_dev, mark);
        return;
    }
    mg_copy_to_host(g_dev, u32, du, n * 4);
    mg_copy_to_host(g_dev, normal, dn, n * 4);
    mg_copy_to_host(g_dev, bf, db, n * 2);
    mg_copy_to_host(g_dev, hf, dh, n * 2);
    mg_copy_to_host(g_dev, from16, df, 2 * n * 4);
    for (i = 0; i < n; i++) {
        float f, w[2];
        memcpy(&f, &xb[i], 4);
        bad_u += u32[i] != mg_rand_u32(0x1234ABCDull, (uint64_t)i * 977);
        bad_n += normal[i] != mg_rand_normal(0x1234ABCDull, (uint64_t)i);
        bad_c += bf[i] != mg_f32_to_bf16(f) || hf[i] != mg_f32_to_f16(f);
        w[0] = mg_bf16_to_f32((uint16_t)xb[i]);
        w[1] = mg_f16_to_f32((uint16_t)(xb[i] >> 16));
        bad_w += memcmp(w, from16 + 2 * i, sizeof w) != 0; /* bits: NaN payloads included */
    }
    mg_test_report(bad_u == 0, "device mg_rand_u32 = host (1M draws)", "%d differ", bad_u);
    mg_test_report(bad_n == 0, "device mg_rand_normal = host (1M draws)", "%d differ", bad_n);
    mg_test_report(bad_c == 0, "device fp32 -> bf16/fp16 rounding = host (1M patterns)", "%d differ", bad_c);
    mg_test_report(bad_w == 0, "device bf16/fp16 -> fp32 = host (1M patterns)", "%d differ", bad_w);
    free(u32); free(xb); free(normal); free(from16); free(bf); free(hf);
    mg_arena_release(g_dev, mark);
}

/* --- ops on both backends ------------------------------------------------------------------ */
enum { T = 48, B = 3, C = 384, NH = 6, N = T * B, V = 1000, AT = 300, FT = 100 };
/* FT: the tiled attention's longer sequence (3 full tiles and a ragged one of 4; the emulated
   tensor-core products cost every lane a whole 16×16×16 product) */
static float *X, *W, *D, *E;      /* shared random host inputs, large enough for every op */
static float *Q;                  /* multiples of 1/4 in [-2, 2]: exact in every dtype   */
static int32_t TOK[N], TOKR[N];   /* TOK: distinct ids; TOKR: 13 ids, each ~11 times     */

/* Runs op on ctx with storage dtype dt; returns its outputs as host fp32 arrays. */
typedef int (*op_fn)(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n);

/* Outputs first_grad, … (an attention's dqkv) are held to grad_tol, the others to tol. */
static void compare_grads(const char *name, op_fn op, mg_dtype dt, double tol, int first_grad,
                          double grad_tol) {
    float *oc[16], *og[16];
    int64_t nc[16], ng[16];
    size_t mc = mg_arena_mark(g_cpu), mgk = mg_arena_mark(g_dev);
    int k, nout = op(g_cpu, dt, oc, nc), nout_dev = op(g_dev, dt, og, ng);
    mg_sync(g_dev);
    for (k = 0; k < nout; k++) {
        char label[160];
        snprintf(label, sizeof label, "%s [%s] output %d: %s vs cpu", name, mg_dtype_name(dt), k,
                 g_dev->device == MG_DEVICE_CUDA ? "cuda" : "cpu");
        if (k >= nout_dev || ng[k] != nc[k]) mg_test_report(0, label, "output shapes differ");
        else ops_close_host(label, og[k], oc[k], (long)nc[k], k >= first_grad ? grad_tol : tol, 1e-6);
    }
    for (k = 0; k < nout; k++) free(oc[k]);
    for (k = 0; k < nout_dev; k++) free(og[k]);
    mg_arena_release(g_cpu, mc);
    mg_arena_release(g_dev, mgk);
}
static void compare(const char *name, op_fn op, mg_dtype dt, double tol) {
    compare_grads(name, op, dt, tol, 16, tol);   /* 16: past every op's outputs */
}
#define OUT(t) (outs[nout] = ops_host(ctx, &(t)), n[nout] = mg_numel(&(t)), nout++)

static int op_gemm(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0, ta, tb;
    for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++) {
            mg_tensor a = ops_dev(ctx, dt, X, 1, 70 * 130), b = ops_dev(ctx, dt, W, 1, 130 * 90);
            mg_tensor c = ops_dev(ctx, MG_F32, D, 1, 71 * 90 * 3);
            mg_tensor c16 = ops_dev(ctx, dt, D, 1, 71 * 90 * 3);
            /* fp32 C, a gap row (ldc 71 > m 70) that must stay untouched */
            mg_gemm(ctx, ta, tb, 70, 90, 130, 0.5f, a.data, dt, ta ? 130 : 70, b.data, dt,
                    tb ? 90 : 130, 0.25f, c.data, MG_F32, 71);
            /* batched: 3 matrices with padded strides, C in the input dtype and read (β ≠ 0) */
            mg_gemm_strided_batched(ctx, ta, tb, 20, 30, 40, 1.0f, a.data, dt, 40, 40 * 25,
                                    b.data, dt, 40, 40 * 31, 0.5f, c16.data, dt, 21, 21 * 30 + 3, 3);
            OUT(c); OUT(c16);
        }
    return nout;
}
/* k = 0: C = β·C; with β = 0, C = 0 without reading C (NaN inside the m×n matrices). */
static int op_gemm_k0(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0, i;
    float *h = (float *)malloc(21 * 30 * 2 * 4);
    mg_tensor a = ops_dev(ctx, dt, X, 1, 64), c = ops_dev(ctx, dt, D, 1, 21 * 30 * 2), z;
    for (i = 0; i < 21 * 30 * 2; i++) h[i] = i % 21 < 20 && i % 7 == 0 ? NAN : D[i];
    z = ops_dev(ctx, dt, h, 1, 21 * 30 * 2);
    mg_gemm_strided_batched(ctx, 0, 0, 20, 30, 0, 1.0f, a.data, dt, 20, 0, a.data, dt, 1, 0, 0.5f,
                            c.data, dt, 21, 21 * 30, 2);
    mg_gemm(ctx, 1, 1, 20, 30, 0, 1.0f, a.data, dt, 1, a.data, dt, 30, 0.0f, z.data, dt, 21);
    mg_gemm(ctx, 1, 1, 20, 30, 0, 1.0f, a.data, dt, 1, a.data, dt, 30, 0.0f,
            (char *)z.data + 21 * 30 * mg_dtype_size(dt), dt, 21);
    OUT(c); OUT(z);
    free(h);
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
/* Many rows (and both 16-bit halves of each 32-bit word) scatter into the same dwte rows of
   the storage dtype: the compare-and-swap path of the CUDA atomic add. Values are multiples of
   1/4 with partial sums below 32 in magnitude, so every addition is exact in bf16/fp16 and the
   result does not depend on the order of the atomics: tolerance 0.                          */
static int op_embedding_scatter(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor dout = ops_dev(ctx, dt, Q, N, C), dwte = ops_dev(ctx, dt, Q + N * C, 600, C);
    mg_tensor dwpe = ops_dev(ctx, dt, Q + (N + 600) * C, T, C);
    int32_t *tok = ops_dev_i32(ctx, TOKR, N);
    mg_embedding_backward(ctx, &dwte, &dwpe, &dout, tok, B, T, 0, 400);
    OUT(dwte); OUT(dwpe);
    return nout;
}
/* The CUDA dwte groups rows by token with a radix sort in blocks of 256 rows, 8 bits a pass:
   here 1200 rows (5 blocks, a ragged last one) into a 600-row slice at 400 (keys up to 600:
   two passes), ids below and above the slice among them; and 1500 rows into 70000 rows
   (three passes), a quarter of them on one id, some past the slice. Random values: exact
   only if every token's rows are added in the CPU's order.                                 */
static int op_embedding_sorted(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    enum { B1 = 4, T1 = 300, C1 = 40, B2 = 5, T2 = 300, C2 = 8, V2 = 70000 };
    static int32_t tok1[B1 * T1], tok2[B2 * T2];
    uint32_t h = 12345u;
    int nout = 0, i;
    mg_tensor dout1 = ops_dev(ctx, dt, X, B1 * T1, C1), dwte1 = ops_dev(ctx, dt, W, 600, C1);
    mg_tensor dout2 = ops_dev(ctx, dt, D, B2 * T2, C2), dwte2 = ops_dev(ctx, MG_F32, E, V2, C2);
    for (i = 0; i < B1 * T1; i++) { h = h * 1664525u + 1013904223u; tok1[i] = (int32_t)((h >> 8) % 1100); }
    for (i = 0; i < B2 * T2; i++) {
        h = h * 1664525u + 1013904223u;
        tok2[i] = i % 4 == 1 ? 69999 : (int32_t)((h >> 8) % (V2 + 100));
    }
    mg_embedding_backward(ctx, &dwte1, NULL, &dout1, ops_dev_i32(ctx, tok1, B1 * T1), B1, T1, 0, 400);
    mg_embedding_backward(ctx, &dwte2, NULL, &dout2, ops_dev_i32(ctx, tok2, B2 * T2), B2, T2, 0, 0);
    OUT(dwte1); OUT(dwte2);
    return nout;
}
static int layernorm_case(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, int c) {
    int nout = 0;
    mg_tensor in = ops_dev(ctx, dt, X, N, c), w = ops_dev(ctx, dt, W, 1, c), b = ops_dev(ctx, dt, E, 1, c);
    mg_tensor out = ops_dev(ctx, dt, NULL, N, c), dout = ops_dev(ctx, dt, D, N, c);
    mg_tensor dinp = ops_dev(ctx, dt, E, N, c), dinp0 = ops_dev(ctx, dt, NULL, N, c);
    mg_tensor dw = ops_dev(ctx, MG_F32, X, 1, c), db = ops_dev(ctx, MG_F32, W, 1, c);
    mg_tensor mean = mg_tensor_2d(ctx, MG_F32, 1, N), rstd = mg_tensor_2d(ctx, MG_F32, 1, N);
    mg_layernorm_forward(ctx, &out, (float *)mean.data, (float *)rstd.data, &in, &w, &b);
    mg_layernorm_backward(ctx, &dinp, &dw, &db, &dout, &in, &w, (float *)mean.data,
                          (float *)rstd.data, 1);
    mg_layernorm_backward(ctx, &dinp0, NULL, NULL, &dout, &in, &w, (float *)mean.data,
                          (float *)rstd.data, 0);
    OUT(out); OUT(mean); OUT(rstd); OUT(dinp); OUT(dinp0); OUT(dw); OUT(db);
    return nout;
}
/* The norm kernels' other paths: a block per row (C = 5000 > 4096), rows that are not a whole
   number of vectors (C = 37: element by element), activations starting one element past an
   aligned address (the vector path off although C = 384 divides), and fp32 weights with
   16-bit activations (the run-time-dtype accessor).                                          */
static int norm_paths_case(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, int c, int shift,
                           mg_dtype wt, int rms) {
    int nout = 0, rows = N / 3;
    int64_t shape[2] = {rows, c};
    mg_norm k = {rms, 1e-5f, 0};
    mg_tensor in_buf = ops_dev(ctx, dt, X, 1, (int64_t)rows * c + shift);
    mg_tensor dinp_buf = ops_dev(ctx, dt, E, 1, (int64_t)rows * c + shift);
    mg_tensor in = mg_tensor_wrap((char *)in_buf.data + shift * mg_dtype_size(dt), dt, 2, shape);
    mg_tensor dinp = mg_tensor_wrap((char *)dinp_buf.data + shift * mg_dtype_size(dt), dt, 2, shape);
    mg_tensor w = ops_dev(ctx, wt, W, 1, c), b = ops_dev(ctx, wt, E, 1, c);
    mg_tensor out = ops_dev(ctx, dt, NULL, rows, c), dout = ops_dev(ctx, dt, D, rows, c);
    mg_tensor mean = mg_tensor_2d(ctx, MG_F32, 1, rows), rstd = mg_tensor_2d(ctx, MG_F32, 1, rows);
    mg_norm_forward(ctx, &k, &out, (float *)mean.data, (float *)rstd.data, &in, &w, rms ? NULL : &b);
    mg_norm_backward(ctx, &k, &dinp, NULL, NULL, &dout, &in, &w, (float *)mean.data,
                     (float *)rstd.data, 1);
    OUT(out); OUT(mean); OUT(rstd); OUT(dinp);
    return nout;
}
static int op_norm_block(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return norm_paths_case(ctx, dt, outs, n, 5000, 0, dt, 0) +
           norm_paths_case(ctx, dt, outs + 4, n + 4, 4104, 0, dt, 1);
}
static int op_norm_unaligned(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return norm_paths_case(ctx, dt, outs, n, 37, 0, dt, 0) +
           norm_paths_case(ctx, dt, outs + 4, n + 4, C, 1, dt, 1);
}
static int op_norm_mixed(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return dt == MG_F32 ? 0 : norm_paths_case(ctx, dt, outs, n, C, 0, MG_F32, 0);
}
static int op_layernorm(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return layernorm_case(ctx, dt, outs, n, C);
}
static int op_layernorm_narrow(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return layernorm_case(ctx, dt, outs, n, 40); /* rows shorter than a block */
}
static int op_linear(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor in = ops_dev(ctx, dt, X, N, C), w = ops_dev(ctx, dt, W, 3 * C, C), b = ops_dev(ctx, dt, E, 1, 3 * C);
    mg_tensor out = ops_dev(ctx, dt, NULL, N, 3 * C), out_nb = ops_dev(ctx, dt, NULL, N, 3 * C);
    mg_tensor dout = ops_dev(ctx, dt, D, N, 3 * C);
    mg_tensor dinp = ops_dev(ctx, dt, NULL, N, C), dinp_acc = ops_dev(ctx, dt, E, N, C);
    mg_tensor dw = ops_dev(ctx, MG_F32, X, 3 * C, C), db = ops_dev(ctx, MG_F32, E, 1, 3 * C);
    /* an fp32 bias under 16-bit outputs: not cuBLASLt's epilogue (the bias in D's dtype) but
       the bias broadcast into out, then the GEMM with β = 1 */
    mg_tensor b32 = ops_dev(ctx, MG_F32, E, 1, 3 * C), out_b32 = ops_dev(ctx, dt, NULL, N, 3 * C);
    mg_linear_forward(ctx, &out, &in, &w, &b);
    mg_linear_forward(ctx, &out_nb, &in, &w, NULL);
    mg_linear_forward(ctx, &out_b32, &in, &w, &b32);
    mg_linear_backward_input(ctx, &dinp, &dout, &w, 0);
    mg_linear_backward_input(ctx, &dinp_acc, &dout, &w, 1);
    mg_linear_backward_weight(ctx, &dw, &db, &dout, &in);
    OUT(out); OUT(out_nb); OUT(dinp); OUT(dinp_acc); OUT(dw); OUT(db); OUT(out_b32);
    return nout;
}
/* The column sums (bias gradients, the norm's dγ and dβ) over many rows: 2600 rows of 97
   columns split into 41 row chunks of 64 (the last of 40) over 4 column blocks, the chunks'
   partials added by the second pass; the weight gradient of a linear without its dbias beside
   it, and the layernorm's dγ, dβ in one pass, into 16-bit and fp32 gradients that accumulate.
   8 rows of 97: one chunk (the blocks add into dst themselves). 2600 rows of 100: a width the
   CUDA kernel reads 4 columns at a time (one vector load per row), 41 chunks in one block.   */
static int colsum_case(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, int rows, int c) {
    int nout = 0;
    mg_tensor in = ops_dev(ctx, dt, X, rows, c), dout = ops_dev(ctx, dt, D, rows, c);
    mg_tensor w = ops_dev(ctx, dt, W, 1, c), b = ops_dev(ctx, dt, E, 1, c);
    mg_tensor out = ops_dev(ctx, dt, NULL, rows, c), dinp = ops_dev(ctx, dt, NULL, rows, c);
    mg_tensor dlw = ops_dev(ctx, MG_F32, X, c, c);
    mg_tensor db = ops_dev(ctx, dt, E, 1, c), dw = ops_dev(ctx, dt, X, 1, c);
    mg_tensor db32 = ops_dev(ctx, MG_F32, W, 1, c);
    mg_tensor mean = mg_tensor_2d(ctx, MG_F32, 1, rows), rstd = mg_tensor_2d(ctx, MG_F32, 1, rows);
    mg_linear_backward_weight(ctx, &dlw, &db32, &dout, &in);
    mg_layernorm_forward(ctx, &out, (float *)mean.data, (float *)rstd.data, &in, &w, &b);
    mg_layernorm_backward(ctx, &dinp, &dw, &db, &dout, &in, &w, (float *)mean.data,
                          (float *)rstd.data, 0);
    OUT(db32); OUT(dw); OUT(db);
    return nout;
}
static int op_colsum(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return colsum_case(ctx, dt, outs, n, 2600, 97) + colsum_case(ctx, dt, outs + 3, n + 3, 8, 97) +
           colsum_case(ctx, dt, outs + 6, n + 6, 2600, 100);
}
/* The fused linear + GELU pair, one path on both backends: a GEMM into fp32, then bias and
   the exact GELU in one pass (not cuBLASLt's GELU_AUX_BIAS, whose GELU is approximate), and
   backward a GEMM into fp32, then the exact dGELU and the column sums into a 16-bit or fp32
   bias gradient in one pass (not cuBLASLt's DGELU_BGRAD, whose gelu' was 5.5e-4 off in fp32
   and slower). Widths 128 with a bias, 30 and 64 without; an fp32 output of 16-bit inputs. The
   bias gradients accumulate onto nonzero values; the rows N = 144 are not a multiple of 8 or
   32. */
static int linear_gelu_case(mg_ctx *ctx, mg_dtype dt, mg_dtype ot, float **outs, int64_t *n,
                            int o, int with_bias, mg_act_kind kind) {
    int nout = 0;
    mg_tensor in = ops_dev(ctx, dt, X, N, C), w1 = ops_dev(ctx, dt, W, o, C);
    mg_tensor b1 = ops_dev(ctx, ot, E, 1, o), w2 = ops_dev(ctx, ot, W + o * C, 96, o);
    mg_tensor act = ops_dev(ctx, ot, NULL, N, o), pre = ops_dev(ctx, ot, NULL, N, o);
    mg_tensor dout = ops_dev(ctx, ot, D, N, 96), dpre = ops_dev(ctx, ot, NULL, N, o);
    mg_tensor db = ops_dev(ctx, MG_F32, E + o, 1, o), db16 = ops_dev(ctx, ot, E + 2 * o, 1, o);
    mg_linear_act_forward(ctx, &act, &pre, &in, &w1, with_bias ? &b1 : NULL, kind);
    mg_linear_backward_input_act(ctx, &dpre, with_bias ? &db : NULL, &dout, &w2, &pre, kind);
    OUT(act); OUT(pre); OUT(dpre);
    if (with_bias) {
        mg_linear_backward_input_act(ctx, &dpre, &db16, &dout, &w2, &pre, kind);
        OUT(db); OUT(db16);
    }
    return nout;
}
static int op_linear_gelu(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return linear_gelu_case(ctx, dt, dt, outs, n, 128, 1, MG_ACT_GELU);
}
static int op_linear_gelu_odd(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return linear_gelu_case(ctx, dt, dt, outs, n, 30, 0, MG_ACT_GELU) +
           linear_gelu_case(ctx, dt, dt, outs + 3, n + 3, 64, 0, MG_ACT_GELU);
}
static int op_linear_gelu_f32out(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return dt == MG_F32 ? 0 : linear_gelu_case(ctx, dt, MG_F32, outs, n, 64, 1, MG_ACT_GELU);
}
/* The exact (erf) GELU through the same kernels: with a bias (the column sums' dGELU), and
   without one at an odd width (the dGELU kernel's scalar tail). */
static int op_linear_gelu_erf(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return linear_gelu_case(ctx, dt, dt, outs, n, 128, 1, MG_ACT_GELU_ERF) +
           linear_gelu_case(ctx, dt, dt, outs + 5, n + 5, 30, 0, MG_ACT_GELU_ERF);
}
/* The squared ReLU (--squared-relu) likewise. */
static int op_linear_relu2(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return linear_gelu_case(ctx, dt, dt, outs, n, 128, 1, MG_ACT_RELU2) +
           linear_gelu_case(ctx, dt, dt, outs + 5, n + 5, 30, 0, MG_ACT_RELU2);
}
static int op_gelu(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor in = ops_dev(ctx, dt, X, N, C), out = ops_dev(ctx, dt, NULL, N, C), dout = ops_dev(ctx, dt, D, N, C);
    mg_tensor oe = ops_dev(ctx, dt, NULL, N, C), de = ops_dev(ctx, dt, D, N, C);
    mg_tensor orl = ops_dev(ctx, dt, NULL, N, C), drl = ops_dev(ctx, dt, D, N, C);
    mg_gelu_forward(ctx, &out, &in);
    mg_gelu_backward(ctx, &dout, &in, &dout); /* dinp aliasing dout */
    mg_act_forward(ctx, &oe, &in, MG_ACT_GELU_ERF);
    mg_act_backward(ctx, &de, &in, &de, MG_ACT_GELU_ERF);
    mg_act_forward(ctx, &orl, &in, MG_ACT_RELU2);
    mg_act_backward(ctx, &drl, &in, &drl, MG_ACT_RELU2);
    OUT(out); OUT(dout); OUT(oe); OUT(de); OUT(orl); OUT(drl);
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
    return attention_case(ctx, dt, outs, n, B, T, NH, 16, 0.0f); /* rows shorter than a block */
}
static int op_attention_long(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return attention_case(ctx, dt, outs, n, 1, AT, 2, 16, 0.1f); /* rows longer than a block */
}
/* The tiled attention: T = 48 (two query tiles, the second ragged) multi-head hd 64; T = 100
   grouped-query (3 query heads a group) with dropout at hd 128 (the kernels' shared memory
   opts in beyond 48 KiB); and the block API: queries 0..99 against keys 0..49 then 50..99
   merged by log-sum-exp, the backward accumulated over both key blocks. */
static int flash_case(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, int Bq, int Tq, int nh,
                      int ng, int hd, float p) {
    int nout = 0, c3 = (nh + 2 * ng) * hd;
    mg_attn_dropout drop = {p, 99, 1, nh + 2};
    mg_tensor qkv = ops_dev(ctx, dt, X, (int64_t)Tq * Bq, c3), out = ops_dev(ctx, dt, NULL, (int64_t)Tq * Bq, nh * hd);
    mg_tensor lse = ops_dev(ctx, MG_F32, NULL, (int64_t)Bq * nh, Tq);
    mg_tensor dout = ops_dev(ctx, dt, D, (int64_t)Tq * Bq, nh * hd), dqkv = ops_dev(ctx, dt, NULL, (int64_t)Tq * Bq, c3);
    mg_flash_attention_forward(ctx, &out, &lse, &qkv, Bq, Tq, nh, ng, &drop);
    mg_flash_attention_backward(ctx, &dqkv, &dout, &out, &lse, &qkv, Bq, Tq, nh, ng, &drop);
    OUT(out); OUT(lse); OUT(dqkv);
    return nout;
}
static int op_flash(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return flash_case(ctx, dt, outs, n, B, T, NH, NH, 64, 0.0f);
}
static int op_flash_gqa(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return flash_case(ctx, dt, outs, n, 1, FT, 6, 2, 128, 0.1f);
}
/* The block API: queries 0…99 against keys 0…49 and 50…99, merged by log-sum-exp, the backward
   accumulated over both, with dropout. Head dim 32 with fp32 outputs: the 32-row kernels; head
   dim 64 with outputs of the inputs' dtype: in 16 bits the 64-row ones, whose dropout words
   are shared by lanes where the key block starts at a multiple of 4 (the first block) and
   drawn per element where it does not (the second, from key 50).                             */
static int flash_blocks_case(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, int FD,
                             mg_dtype odt) {
    enum { FH = 4, FG = 2 };
    const int FW = (FH / FG + 2) * FD, FC3 = FG * FW;
    int nout = 0, k;
    mg_attn_dropout drop = {0.15f, 5, 0, FH};
    mg_tensor qkv = ops_dev(ctx, dt, X, FT, FC3), out = ops_dev(ctx, odt, NULL, FT, FH * FD);
    mg_tensor dout = ops_dev(ctx, odt, D, FT, FH * FD), dqkv = ops_dev(ctx, odt, NULL, FT, FC3);
    float *lse = ops_dev_f32(ctx, NULL, FH * FT), *delta = ops_dev_f32(ctx, NULL, FH * FT);
    mg_attn_block a;
    mg_attn_view o = {out.data, odt, FH * FD, FH * FD, (FH / FG) * FD, FD}, dO = o, dq, dk, dv;
    memset(&a, 0, sizeof a);
    a.B = 1; a.Tq = FT; a.n_head = FH; a.n_group = FG; a.hd = FD; a.T_global = FT; a.drop = &drop;
    a.q.data = qkv.data; a.q.dtype = dt; a.q.ld_t = a.q.ld_b = FC3; a.q.ld_g = FW; a.q.ld_h = FD;
    dO.data = dout.data;
    dq = a.q; dq.data = dqkv.data; dq.dtype = odt;
    mg_memset_zero(ctx, dqkv.data, mg_nbytes(&dqkv));
    for (k = 0; k < 2; k++) {               /* forward: keys 0..149, then 150..299 merged */
        a.Tk = FT / 2; a.k_pos0 = k * (FT / 2);
        a.k = a.q; a.k.data = mg_tensor_rows(&qkv, k * (FT / 2), 1).data;
        a.k.data = (char *)a.k.data + (size_t)(FH / FG) * FD * mg_dtype_size(dt);
        a.v = a.k; a.v.data = (char *)a.k.data + (size_t)FD * mg_dtype_size(dt);
        mg_attn_block_forward(ctx, &a, &o, lse, k);
    }
    mg_attn_delta(ctx, delta, &a, &dO, &o);
    for (k = 0; k < 2; k++) {               /* backward: accumulated over both key blocks */
        a.Tk = FT / 2; a.k_pos0 = k * (FT / 2);
        a.k = a.q; a.k.data = mg_tensor_rows(&qkv, k * (FT / 2), 1).data;
        a.k.data = (char *)a.k.data + (size_t)(FH / FG) * FD * mg_dtype_size(dt);
        a.v = a.k; a.v.data = (char *)a.k.data + (size_t)FD * mg_dtype_size(dt);
        dk = dq;
        dk.data = (char *)mg_tensor_rows(&dqkv, k * (FT / 2), 1).data + (size_t)(FH / FG) * FD * mg_dtype_size(odt);
        dv = dk; dv.data = (char *)dk.data + (size_t)FD * mg_dtype_size(odt);
        mg_attn_block_backward(ctx, &a, &dO, lse, delta, &dq, &dk, &dv, 1);
    }
    {
        int64_t len = FH * FT;
        mg_tensor l = mg_tensor_wrap(lse, MG_F32, 1, &len);
        OUT(out); OUT(l); OUT(dqkv);
    }
    return nout;
}
static int op_flash_blocks(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return flash_blocks_case(ctx, dt, outs, n, 32, MG_F32);
}
static int op_flash_blocks64(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return flash_blocks_case(ctx, dt, outs, n, 64, dt);
}
/* T = 99: the dropout's index groups do not align with the key tiles (T_g ≢ 0 mod 4). */
static int op_flash_odd(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return flash_case(ctx, dt, outs, n, 2, 99, 4, 2, 64, 0.2f);
}
/* A smaller such case (B=1, T=67) with the context's kernels capped (mg_ctx.attn_kernels,
   MG_ATTN_KERNELS): in 16 bits at hd 64 the WMMA tensor-core kernels, then the CUDA-core
   ones, instead of the 64-row kernels — each family against the CPU twin. (The CPU ignores
   the cap.)                                                                                */
static int flash_capped(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, mg_attn_kernels cap) {
    mg_attn_kernels was = ctx->attn_kernels;
    int nout;
    ctx->attn_kernels = cap;
    nout = flash_case(ctx, dt, outs, n, 1, 67, 4, 2, 64, 0.2f);
    ctx->attn_kernels = was;
    return nout;
}
static int op_flash_odd_wmma(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return flash_capped(ctx, dt, outs, n, MG_ATTN_KERNELS_WMMA);
}
static int op_flash_odd_simt(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return flash_capped(ctx, dt, outs, n, MG_ATTN_KERNELS_SIMT);
}
/* The Llama family's ops: RMSNorm (eps 1e-6, rows longer and shorter than a block), SwiGLU,
   rotary embedding (6 query heads in 2 groups, hd 32, 24 of its dims rotated, Llama 3 scaling,
   positions from 5) and grouped-query attention with dropout on the same qkv.               */
static int rmsnorm_case(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, int c) {
    int nout = 0;
    mg_norm rms = {1, 1e-6f, 0};
    mg_tensor in = ops_dev(ctx, dt, X, N, c), w = ops_dev(ctx, dt, W, 1, c);
    mg_tensor out = ops_dev(ctx, dt, NULL, N, c), dout = ops_dev(ctx, dt, D, N, c);
    mg_tensor dinp = ops_dev(ctx, dt, E, N, c), dw = ops_dev(ctx, MG_F32, X, 1, c);
    mg_tensor mean = mg_tensor_2d(ctx, MG_F32, 1, N), rstd = mg_tensor_2d(ctx, MG_F32, 1, N);
    mg_norm_forward(ctx, &rms, &out, (float *)mean.data, (float *)rstd.data, &in, &w, NULL);
    mg_norm_backward(ctx, &rms, &dinp, &dw, NULL, &dout, &in, &w, (float *)mean.data,
                     (float *)rstd.data, 1);
    OUT(out); OUT(rstd); OUT(dinp); OUT(dw);
    return nout;
}
static int op_rmsnorm(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return rmsnorm_case(ctx, dt, outs, n, C);
}
static int op_rmsnorm_narrow(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return rmsnorm_case(ctx, dt, outs, n, 40);
}
static int op_swiglu(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor gate = ops_dev(ctx, dt, X, N, C), up = ops_dev(ctx, dt, E, N, C);
    mg_tensor out = ops_dev(ctx, dt, NULL, N, C), dout = ops_dev(ctx, dt, D, N, C);
    mg_tensor dgate = ops_dev(ctx, dt, NULL, N, C);
    mg_swiglu_forward(ctx, &out, &gate, &up);
    mg_swiglu_backward(ctx, &dgate, &dout, &dout, &gate, &up);   /* dup over dout */
    OUT(out); OUT(dgate); OUT(dout);
    return nout;
}
enum { GQ = 6, GG = 2, GHD = 32, GROT = 24, GW = (GQ + 2 * GG) * GHD };
static int op_rope_gqa(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_rope rope = {500000.0f, 1, 8.0f, 1.0f, 4.0f, 16, 0.0f};
    mg_attn_dropout drop = {0.1f, 7, 0, GQ};
    float *table = (float *)malloc(sizeof(float) * (T + 5) * GROT), *cs;
    mg_tensor qkv = ops_dev(ctx, dt, X, N, GW), dqkv = ops_dev(ctx, dt, NULL, N, GW);
    mg_tensor out = ops_dev(ctx, dt, NULL, N, GQ * GHD), dout = ops_dev(ctx, dt, D, N, GQ * GHD);
    mg_tensor att = ops_dev(ctx, dt, NULL, (int64_t)B * GQ * T, T);
    mg_tensor datt = ops_dev(ctx, dt, NULL, (int64_t)B * GQ * T, T);
    mg_rope_table(table, T + 5, GROT, &rope);
    cs = ops_dev_f32(ctx, table, (T + 5) * GROT);
    mg_rope_forward(ctx, &qkv, B, GQ, GG, GROT, 5, cs);
    mg_attention_forward_gqa(ctx, &out, &att, &qkv, B, T, GQ, GG, &drop);
    mg_attention_backward_gqa(ctx, &dqkv, &datt, &dout, &qkv, &att, B, T, GQ, GG, &drop);
    mg_rope_backward(ctx, &dqkv, B, GQ, GG, GROT, 5, cs);
    OUT(qkv); OUT(out); OUT(att); OUT(dqkv);
    free(table);
    return nout;
}
/* Rope alone: hd 64 fully rotated, 4 query heads in 2 groups, positions from 3 (h = 32 pairs:
   vectors of 4 or 8 pairs); then a view one element past alignment, hd 16 with 8 dims rotated
   (pair by pair).                                                                             */
static int op_rope(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    enum { RQ = 4, RG = 2, RHD = 64, RW = (RQ + 2 * RG) * RHD, SHD = 16, SROT = 8,
           SW = (RQ + 2 * RG) * SHD };
    int nout = 0;
    int64_t shape[2] = {N, SW};
    mg_rope rope = {10000.0f, 0, 0.0f, 0.0f, 0.0f, 0, 0.0f};
    float *table = (float *)malloc(sizeof(float) * (T + 3) * RHD);
    float *small = (float *)malloc(sizeof(float) * (T + 3) * SROT), *cs, *cs_small;
    mg_tensor qkv = ops_dev(ctx, dt, X, N, RW), dqkv = ops_dev(ctx, dt, D, N, RW);
    mg_tensor buf = ops_dev(ctx, dt, E, 1, (int64_t)N * SW + 1);
    mg_tensor odd = mg_tensor_wrap((char *)buf.data + mg_dtype_size(dt), dt, 2, shape);
    mg_rope_table(table, T + 3, RHD, &rope);
    mg_rope_table(small, T + 3, SROT, &rope);
    cs = ops_dev_f32(ctx, table, (T + 3) * RHD);
    cs_small = ops_dev_f32(ctx, small, (T + 3) * SROT);
    mg_rope_forward(ctx, &qkv, B, RQ, RG, RHD, 3, cs);
    mg_rope_backward(ctx, &dqkv, B, RQ, RG, RHD, 3, cs);
    mg_rope_forward(ctx, &odd, B, RQ, RG, SROT, 3, cs_small);
    OUT(qkv); OUT(dqkv); OUT(buf);
    free(table);
    free(small);
    return nout;
}
/* The embedding with other layouts than op_embedding's: fp32 weights under 16-bit rows (C = 40:
   vectors of the fp32 width), C = 37 (column by column), wpe of another dtype than wte (the
   run-time accessors), dwte and dwpe in the rows' dtype. Exact, as op_embedding.             */
static int op_embedding_odd(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0, k;
    mg_dtype other = dt == MG_F32 ? MG_BF16 : MG_F32;
    int32_t *tok = ops_dev_i32(ctx, TOK, N);
    for (k = 0; k < 2; k++) {
        int64_t c = k ? 37 : 40;
        mg_tensor wte = ops_dev(ctx, MG_F32, E, 600, c), wpe = ops_dev(ctx, k ? other : MG_F32, W, T, c);
        mg_tensor out = ops_dev(ctx, dt, NULL, (T - 5) * B, c), dout = ops_dev(ctx, dt, D, (T - 5) * B, c);
        mg_tensor dwte = ops_dev(ctx, dt, X, 600, c), dwpe = ops_dev(ctx, dt, X, T, c);
        mg_embedding_forward(ctx, &out, tok, B, T, 5, &wte, 400, &wpe);
        mg_embedding_backward(ctx, &dwte, &dwpe, &dout, tok, B, T, 5, 400);
        OUT(out); OUT(dwte); OUT(dwpe);
    }
    return nout;
}
static int op_elementwise(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor a = ops_dev(ctx, dt, X, N, C), b = ops_dev(ctx, dt, D, N, C), o = ops_dev(ctx, dt, NULL, N, C);
    mg_tensor f = ops_dev(ctx, MG_F32, NULL, N, C), c = ops_dev(ctx, MG_F32, NULL, 3, 7);
    mg_tensor back = ops_dev(ctx, dt, NULL, N, C), d = ops_dev(ctx, dt, NULL, N, C);
    mg_add(ctx, &o, &a, &b);
    mg_axpy(ctx, &o, -0.7f, &a);
    mg_scale(ctx, &o, 1.5f);
    mg_cast(ctx, &f, &o);                   /* dt -> fp32 */
    mg_axpy(ctx, &f, 1e-3f, &b);
    mg_cast(ctx, &back, &f);                /* fp32 -> dt, rounded */
    mg_dropout_forward(ctx, &a, &a, 0.2f, mg_dropout_key(1, 2, 3), 17);
    mg_dropout_backward(ctx, &d, &b, 0.35f, mg_dropout_key(4, 5, 6), 3);
    mg_fill(ctx, &c, 0.125f);
    {   /* columns 5 … 20 of every row of o, packed (the strided copy of context parallelism) */
        size_t es = mg_dtype_size(dt);
        mg_tensor pk = ops_dev(ctx, dt, NULL, N, 16);
        mg_copy_2d(ctx, pk.data, 16 * es, (char *)o.data + 5 * es, (size_t)C * es, 16 * es, N);
        OUT(pk);
    }
    OUT(o); OUT(f); OUT(back); OUT(a); OUT(d); OUT(c);
    return nout;
}
/* Dropout's masks where a vector does not start a group of 4 global indices in one row: rows
   of 36 (a bf16 vector of 8 crosses every other row end; fp32 vectors of 4 do not), rows of
   30 (every other row starts at an index ≡ 2 mod 4, and vectors of both widths cross row
   ends), and a row offset that makes the first row's indices start at 3 mod 4.               */
static int op_dropout_rows(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0;
    mg_tensor a = ops_dev(ctx, dt, X, 7, 36), b = ops_dev(ctx, dt, D, 6, 30);
    mg_tensor c = ops_dev(ctx, dt, E, 5, 41), d = ops_dev(ctx, dt, NULL, 5, 41);
    mg_dropout_forward(ctx, &a, &a, 0.3f, mg_dropout_key(2, 4, 6), 5);
    mg_dropout_forward(ctx, &b, &b, 0.5f, mg_dropout_key(3, 5, 7), 1);
    mg_dropout_backward(ctx, &d, &c, 0.25f, mg_dropout_key(1, 1, 1), 3);  /* 3·41 ≡ 3 mod 4 */
    OUT(a); OUT(b); OUT(d);
    return nout;
}
/* The elementwise kernels' scalar paths and fallbacks: 1001 elements (not a whole number of
   vectors: a tail), views one element past an aligned address (no vectors at all), an add of
   mixed dtypes and a bf16 <-> fp16 cast (the run-time-dtype kernel), casts fp32 <-> 16-bit,
   SwiGLU's backward on a misaligned and on aligned inputs.                                   */
static int op_elementwise_odd(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    enum { L = 1001 };
    int nout = 0;
    int64_t len = L;
    mg_dtype other = dt == MG_F16 ? MG_BF16 : MG_F16;
    mg_tensor abuf = ops_dev(ctx, dt, X, 1, L + 1), bbuf = ops_dev(ctx, dt, D, 1, L + 1);
    mg_tensor a = mg_tensor_wrap((char *)abuf.data + mg_dtype_size(dt), dt, 1, &len);
    mg_tensor b = mg_tensor_wrap((char *)bbuf.data + mg_dtype_size(dt), dt, 1, &len);
    mg_tensor o = ops_dev(ctx, dt, NULL, 1, L), g = ops_dev(ctx, dt, NULL, 1, L);
    mg_tensor f = ops_dev(ctx, MG_F32, E, 1, L), m = ops_dev(ctx, dt, NULL, 1, L);
    mg_tensor c = ops_dev(ctx, other, NULL, 1, L), back = ops_dev(ctx, dt, NULL, 1, L);
    mg_add(ctx, &o, &a, &b);                     /* misaligned inputs: element by element */
    mg_gelu_forward(ctx, &g, &o);                /* aligned, 1001 = 125 vectors + a tail   */
    mg_dropout_forward(ctx, &g, &g, 0.3f, mg_dropout_key(7, 8, 9), 2);
    mg_add(ctx, &m, &o, &f);                     /* dt + fp32: the run-time-dtype kernel   */
    mg_axpy(ctx, &f, 0.5f, &o);                  /* fp32 += dt                            */
    mg_cast(ctx, &c, &m);                        /* 16-bit <-> 16-bit (or fp32 -> fp16)   */
    mg_cast(ctx, &back, &c);
    OUT(o); OUT(g); OUT(m); OUT(f); OUT(c); OUT(back);
    {   /* SwiGLU backward: a misaligned gate (no vectors), then aligned (vectors and a tail),
           then an fp32 gate among the others (the run-time accessors) */
        mg_tensor dg = ops_dev(ctx, dt, NULL, 1, L), du = ops_dev(ctx, dt, NULL, 1, L);
        mg_tensor dg2 = ops_dev(ctx, dt, NULL, 1, L), du2 = ops_dev(ctx, dt, NULL, 1, L);
        mg_tensor dg3 = ops_dev(ctx, dt, NULL, 1, L), du3 = ops_dev(ctx, dt, NULL, 1, L);
        mg_swiglu_backward(ctx, &dg, &du, &o, &a, &g);
        mg_swiglu_backward(ctx, &dg2, &du2, &o, &g, &back);
        mg_swiglu_backward(ctx, &dg3, &du3, &o, &f, &g);
        OUT(dg); OUT(du); OUT(dg2); OUT(du2); OUT(dg3); OUT(du3);
    }
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
    /* two vocabulary slices of 512 (ids 1000..1023 padding), merged on the host as the
       tensor-parallel all-reduces would (max, then sums)                                 */
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
        {   /* slice 1 reads its dloss from device memory (mg_xent_backward_at) */
            float dloss = 1.0f / N, *at = (float *)mg_alloc(ctx, sizeof dloss);
            mg_copy_to_device(ctx, at, &dloss, sizeof dloss);
            mg_xent_backward(ctx, &dl[0], &l[0], tg, (float *)mx.data, (float *)se.data, dloss,
                             0, V);
            mg_xent_backward_at(ctx, &dl[1], &l[1], tg, (float *)mx.data, (float *)se.data, at,
                                512, V);
        }
    }
    OUT(mx); OUT(se); OUT(tl); OUT(loss); OUT(dl[0]); OUT(dl[1]);
    return nout;
}
/* Cross-entropy rows the CUDA kernels cannot read 4 columns at a time: 511 columns (501 real)
   column by column, and 516 (515 real: the 4-column vectors end in a partial one); each
   slice's max, Σexp with the target logit, the one-pass statistics and the gradient.       */
static int op_xent_odd(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    static const int width[2] = {511, 516}, real[2] = {501, 515};
    int nout = 0, s, i;
    int32_t tgt[N];
    for (s = 0; s < 2; s++) {
        mg_tensor l = ops_dev(ctx, dt, X, N, width[s]), dl = ops_dev(ctx, dt, NULL, N, width[s]);
        mg_tensor mx = mg_tensor_2d(ctx, MG_F32, 1, N), se = mg_tensor_2d(ctx, MG_F32, 1, N);
        mg_tensor tl = mg_tensor_2d(ctx, MG_F32, 1, N), pm = mg_tensor_2d(ctx, MG_F32, 1, N);
        mg_tensor ps = mg_tensor_2d(ctx, MG_F32, 1, N), pt = mg_tensor_2d(ctx, MG_F32, 1, N);
        int32_t *tg;
        for (i = 0; i < N; i++) tgt[i] = (i * 37) % real[s];
        tg = ops_dev_i32(ctx, tgt, N);
        mg_xent_max(ctx, (float *)mx.data, &l, 0, real[s]);
        mg_xent_sumexp(ctx, (float *)se.data, (float *)tl.data, &l, tg, (float *)mx.data, 0, real[s]);
        mg_xent_partial(ctx, (float *)pm.data, (float *)ps.data, (float *)pt.data, &l, tg, 0, real[s]);
        mg_xent_backward(ctx, &dl, &l, tg, (float *)mx.data, (float *)se.data, 1.0f / N, 0, real[s]);
        OUT(mx); OUT(se); OUT(tl); OUT(pm); OUT(ps); OUT(pt); OUT(dl);
    }
    return nout;
}
/* The one-pass slice statistics (mg_xent_partial) of the two slices of op_xent, merged on
   the host (max, then Σexp moved to it by mg_xent_rescale and summed) as the fused
   classifier's all-reduces do.                                                             */
static int op_xent_onepass(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0, s, i;
    int32_t tgt[N];
    float m[2][N], gm[N], sum[2][N];
    mg_tensor mx[2], se[2], tl[2], M = mg_tensor_2d(ctx, MG_F32, 1, N);
    for (i = 0; i < N; i++) tgt[i] = (i * 37) % V;
    for (s = 0; s < 2; s++) {
        mg_tensor l = ops_dev(ctx, dt, X + s * 512 * N, N, 512);
        mx[s] = mg_tensor_2d(ctx, MG_F32, 1, N);
        se[s] = mg_tensor_2d(ctx, MG_F32, 1, N);
        tl[s] = mg_tensor_2d(ctx, MG_F32, 1, N);
        mg_xent_partial(ctx, (float *)mx[s].data, (float *)se[s].data, (float *)tl[s].data, &l,
                        ops_dev_i32(ctx, tgt, N), 512 * s, V);
        mg_copy_to_host(ctx, m[s], mx[s].data, sizeof m[s]);
    }
    for (i = 0; i < N; i++) gm[i] = m[0][i] > m[1][i] ? m[0][i] : m[1][i];
    mg_copy_to_device(ctx, M.data, gm, sizeof gm);
    OUT(mx[0]); OUT(mx[1]);
    for (s = 0; s < 2; s++) {
        mg_xent_rescale(ctx, (float *)se[s].data, (float *)mx[s].data, (float *)M.data, N);
        mg_copy_to_host(ctx, sum[s], se[s].data, sizeof sum[s]);
    }
    for (i = 0; i < N; i++) sum[0][i] += sum[1][i];
    mg_copy_to_device(ctx, se[0].data, sum[0], sizeof sum[0]);
    OUT(se[0]); OUT(tl[0]); OUT(tl[1]);
    return nout;
}
/* A merge over one slice (the identity), so that the fused classifier runs its merge path —
   the copy of the max, the rescale (by exp(0)) — on the device.                          */
static void merge_identity(void *user, float *buf, int64_t n, int is_max) {
    (void)user; (void)buf; (void)n; (void)is_max;
}
/* The fused classifier on vocabulary slice 1 of op_xent (ids 512..1023 of V = 1000: 24 padding
   rows) for N = 144 rows of C = 384 in ragged chunks of 50 (50, 50, 44), training, without
   and with the merge path; dw accumulates onto values already there. Passes 2 and 3 the same
   with rows ignored (targets −1: rows 0 and 143 and the whole second chunk, 50..99) and
   dloss_scale 144/92 (the rows over the rows kept), pass 3 with dloss read from device
   memory (dloss_at, then scaled); on the device the ignored rows' losses and dx rows must be
   exactly 0.                                                                               */
static int op_classifier(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    int nout = 0, i, j, pass, zero = 1;
    int32_t tgt[N], masked[N];
    float dloss = 1.0f / N, *at = (float *)mg_alloc(ctx, sizeof dloss);
    mg_tensor x = ops_dev(ctx, dt, X, N, C), w = ops_dev(ctx, dt, W, 512, C);
    mg_tensor dx[4], dw[4], loss[4];
    mg_classifier c;
    for (i = 0; i < N; i++) tgt[i] = i % 3 ? 512 + (i * 37) % 488 : (i * 37) % 512;
    for (i = 0; i < N; i++) masked[i] = i == 0 || i == N - 1 || (i >= 50 && i < 100) ? -1 : tgt[i];
    mg_copy_to_device(ctx, at, &dloss, sizeof dloss);
    memset(&c, 0, sizeof c);
    c.x = &x;
    c.w = &w;
    c.vocab_start = 512;
    c.vocab_size = V;
    c.dloss = dloss;
    c.chunk_rows = 50;
    c.scratch = mg_alloc(ctx, mg_classifier_scratch_bytes(50, 512, dt));
    for (pass = 0; pass < 4; pass++) {
        dx[pass] = ops_dev(ctx, dt, NULL, N, C);
        dw[pass] = ops_dev(ctx, MG_F32, D, 512, C);
        loss[pass] = mg_tensor_2d(ctx, MG_F32, 1, N);
        c.targets = ops_dev_i32(ctx, pass < 2 ? tgt : masked, N);
        c.losses = (float *)loss[pass].data;
        c.dx = &dx[pass];
        c.dw = &dw[pass];
        c.merge = pass % 2 ? merge_identity : NULL;
        c.dloss_scale = pass < 2 ? 0.0f : (float)N / 92.0f;
        c.dloss_at = pass == 3 ? at : NULL;
        mg_classifier_fused(ctx, &c);
        OUT(loss[pass]); OUT(dx[pass]); OUT(dw[pass]);
    }
    for (pass = 2; pass < 4 && ctx == g_dev; pass++) {   /* outputs: loss, dx, dw per pass */
        const float *lh = outs[3 * pass], *dxh = outs[3 * pass + 1];
        for (i = 0; i < N; i++) {
            if (masked[i] >= 0) continue;
            zero &= lh[i] == 0.0f;
            for (j = 0; j < C; j++) zero &= dxh[i * C + j] == 0.0f;
        }
    }
    if (ctx == g_dev) {
        char label[120];
        snprintf(label, sizeof label, "fused classifier [%s] on the device: ignored rows' losses "
                 "and dx rows exactly 0", mg_dtype_name(dt));
        CHECK(zero, label);
    }
    return nout;
}
static int op_adamw(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    enum { P = 100003 };
    int nout = 0, step;
    mg_adamw_hparams hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
    mg_tensor p = ops_dev(ctx, MG_F32, X, 1, P), g = ops_dev(ctx, MG_F32, D, 1, P);
    mg_tensor m = ops_dev(ctx, MG_F32, NULL, 1, P), v = ops_dev(ctx, MG_F32, NULL, 1, P);
    mg_tensor p16 = ops_dev(ctx, dt, NULL, 1, P), ss = mg_tensor_2d(ctx, MG_F32, 1, 7);
    float hs[7], inf = INFINITY;
    int nonfinite, k;
    mg_sumsq_batch batch;
    static const int64_t piece[4][2] = {{0, 7}, {7, 300}, {300, 99000}, {99000, P}};
    for (step = 1; step <= 3; step++) {
        hp.step = step;
        mg_adamw_step(ctx, (float *)p.data, (const float *)g.data, (float *)m.data, (float *)v.data,
                      P, &hp, 0.7f, dt == MG_F32 ? NULL : p16.data, dt);
    }
    hs[0] = (float)mg_sumsq(ctx, (const float *)p.data, P, &nonfinite);
    hs[1] = (float)nonfinite;
    /* the same over 4 pieces of 7 to 98700 values with one synchronisation */
    for (k = 0, step = 0; k < 4; k++) step += (int)mg_sumsq_slots(ctx, piece[k][1] - piece[k][0]);
    mg_sumsq_begin(ctx, &batch, step);
    for (k = 0; k < 4; k++)
        mg_sumsq_add(ctx, &batch, (const float *)p.data + piece[k][0], piece[k][1] - piece[k][0]);
    hs[4] = (float)mg_sumsq_end(ctx, &batch, &nonfinite);
    hs[5] = (float)nonfinite;
    hs[6] = (float)(hs[4] / hs[0]);   /* 1 to float rounding on both backends */
    mg_copy_to_device(ctx, (float *)g.data + P / 2, &inf, 4); /* one inf: flagged */
    hs[2] = isinf(mg_sumsq(ctx, (const float *)g.data, P, &nonfinite)) ? 1.0f : 0.0f;
    hs[3] = (float)nonfinite;
    mg_copy_to_device(ctx, ss.data, hs, sizeof hs);
    OUT(p); OUT(m); OUT(v); OUT(ss);
    if (dt != MG_F32) OUT(p16);
    return nout;
}
/* The fused multi-tensor AdamW: 5 pieces of 1 to 60000 values laid out with gaps in the
   buffers (a table entry points anywhere), weight decay on some, the 16-bit copy on all but
   one; 3 steps with a skipped one (args.skip: nothing may change) between steps 1 and 2; the
   table and the step's arguments in device memory. Then the device-side Σx² of the 5 pieces
   (mg_sumsq_end_device) and an accumulated Σx (mg_sum_f32_device) against the host's.
   graph: on a CUDA context the step is captured once as a CUDA graph (mg_graph_*; nothing may
   change during the capture) and launched at each step, its arguments rewritten in device
   memory between the launches; on the CPU the same calls run directly.                     */
static int adamw_multi(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n, int graph) {
    enum { P = 100003, NP = 5 };
    static const int64_t at[NP] = {0, 5, 400, 1500, 40000}, len[NP] = {1, 300, 1023, 29000, 60000};
    int nout = 0, step, k;
    mg_tensor p = ops_dev(ctx, MG_F32, X, 1, P), g = ops_dev(ctx, MG_F32, D, 1, P);
    mg_tensor m = ops_dev(ctx, MG_F32, NULL, 1, P), v = ops_dev(ctx, MG_F32, NULL, 1, P);
    mg_tensor p16 = ops_dev(ctx, dt, NULL, 1, P), ss = mg_tensor_2d(ctx, MG_F32, 1, 4);
    mg_adamw_piece host[NP], *table = (mg_adamw_piece *)mg_alloc(ctx, sizeof host);
    mg_adamw_args args, *dargs = (mg_adamw_args *)mg_alloc(ctx, sizeof args);
    double *dsum = (double *)mg_alloc(ctx, 2 * sizeof(double)), sum[2] = {0.5, 0.0};
    float hs[4], *before = (float *)malloc(sizeof(float) * P), *after = (float *)malloc(sizeof(float) * P);
    int64_t total;
    mg_sumsq_batch batch;
    mg_graph gr = {NULL, NULL};
    for (k = 0; k < NP; k++) {
        memset(&host[k], 0, sizeof host[k]);
        host[k].param = (float *)p.data + at[k];
        host[k].grad = (const float *)g.data + at[k];
        host[k].m = (float *)m.data + at[k];
        host[k].v = (float *)v.data + at[k];
        host[k].param16 = dt == MG_F32 || k == 2 ? NULL : (char *)p16.data + at[k] * mg_dtype_size(dt);
        host[k].n = len[k];
        host[k].wd_mult = k % 2 ? 1.0f : 0.0f;   /* weight decay 0.1 on odd pieces */
        host[k].lr_group = k == 3;               /* piece 3 takes the second learning rate */
    }
    total = mg_adamw_table_begin(host, NP);
    mg_copy_to_device(ctx, table, host, sizeof host);
    graph = graph && ctx->device == MG_DEVICE_CUDA;
    hs[3] = 1;
    if (graph) {   /* captured, not run: the parameters must not move */
        mg_copy_to_host(ctx, before, p.data, sizeof(float) * P);
        mg_graph_capture_begin(ctx);
        mg_adamw_multi(ctx, table, NP, total, 0.9f, 0.95f, 1e-8f, dt, dargs);
        mg_graph_capture_end(ctx, &gr);
        mg_copy_to_host(ctx, after, p.data, sizeof(float) * P);
        hs[3] = (float)(memcmp(before, after, sizeof(float) * P) == 0);
    }
    for (step = 1; step <= 4; step++) {
        mg_adamw_args_set(&args, 3e-3f, step > 2 ? step - 1 : step, 0.9f, 0.95f);
        mg_adamw_args_set_lr2(&args, 1e-3f, step > 2 ? step - 1 : step, 0.9f);
        args.weight_decay = 0.1f;
        args.grad_scale = 0.7f;
        args.skip = step == 2;   /* the skipped step: its arguments must not matter */
        if (args.skip) args.lr = args.step_size = args.lr2 = args.step_size2 = NAN;
        mg_copy_to_device(ctx, dargs, &args, sizeof args);
        if (graph) mg_graph_launch(ctx, &gr);
        else mg_adamw_multi(ctx, table, NP, total, 0.9f, 0.95f, 1e-8f, dt, dargs);
    }
    if (graph) mg_graph_free(&gr);
    free(before);
    free(after);
    for (k = 0, total = 0; k < NP; k++) total += mg_sumsq_slots(ctx, len[k]);
    mg_sumsq_begin(ctx, &batch, total);
    for (k = 0; k < NP; k++) mg_sumsq_add(ctx, &batch, host[k].param, len[k]);
    mg_sumsq_end_device(ctx, &batch, dsum);
    /* Σ of the gradients' first 70000 values added twice to 0.5 (mg_sum_f32_device) */
    mg_copy_to_device(ctx, dsum + 1, &sum[0], sizeof(double));
    mg_sum_f32_device(ctx, (const float *)g.data, 70000, dsum + 1);
    mg_sum_f32_device(ctx, (const float *)g.data, 70000, dsum + 1);
    mg_copy_to_host(ctx, sum, dsum, sizeof sum);
    hs[0] = (float)sum[0];
    hs[1] = (float)mg_adamw_table_begin(host, NP);
    hs[2] = (float)sum[1];
    mg_copy_to_device(ctx, ss.data, hs, sizeof hs);
    OUT(p); OUT(m); OUT(v); OUT(ss);
    if (dt != MG_F32) OUT(p16);
    return nout;
}
static int op_adamw_multi(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return adamw_multi(ctx, dt, outs, n, 0);
}
static int op_adamw_graph(mg_ctx *ctx, mg_dtype dt, float **outs, int64_t *n) {
    return adamw_multi(ctx, dt, outs, n, 1);
}

int main(void) {
    mg_ctx cpu, dev;
    mg_ctx_desc d;
    int i, k, have_gpu = mg_cuda_available();
    memset(&d, 0, sizeof d);
    d.arena_bytes = (size_t)512 << 20;
    d.device = MG_DEVICE_CPU;
    mg_ctx_init(&cpu, &d);
    d.device = have_gpu ? MG_DEVICE_CUDA : MG_DEVICE_CPU;
    mg_ctx_init(&dev, &d);
    g_cpu = &cpu;
    g_dev = &dev;
    if (have_gpu)
        printf("# %s vs %s (%d CPU threads)\n", mg_device_name(&dev), mg_device_name(&cpu), cpu.n_threads);
    else
        printf("# no GPU: comparing two CPU contexts (checks this program, not the CUDA backend)\n");
    X = ops_randn_array(1 << 20, 1);
    W = ops_randn_array(1 << 20, 0.2f);
    D = ops_randn_array(1 << 20, 1);
    E = ops_randn_array(1 << 20, 1);
    Q = (float *)malloc((N + 600 + T) * C * sizeof(float)); /* dout, dwte, dwpe */
    for (i = 0; i < (N + 600 + T) * C; i++) Q[i] = 0.25f * (float)((int)(ops_randn() * 3.0f) % 9);
    for (i = 0; i < N; i++) {
        TOK[i] = (i * 389) % V;
        TOKR[i] = i % 17 == 5 ? 3 : 400 + (i % 13) * 41; /* id 3 lies outside the slice */
    }
    if (have_gpu) {
        test_config();
        test_scalars();
    }
    for (k = 0; k < 3; k++) {
        mg_dtype dt = k == 0 ? MG_F32 : k == 1 ? MG_BF16 : MG_F16;
        double tol = k == 0 ? 1e-4 : k == 1 ? 2e-2 : 4e-3; /* see the top of the file */
        compare("gemm", op_gemm, dt, tol);
        compare("gemm k=0", op_gemm_k0, dt, 0.0);
        compare("embedding, exact", op_embedding, dt, 0.0);
        compare("embedding scatter-add, exact", op_embedding_scatter, dt, 0.0);
        compare("embedding backward, sorted in blocks, exact", op_embedding_sorted, dt, 0.0);
        compare("embedding C=40 fp32 weights, C=37, wpe of another dtype, exact", op_embedding_odd, dt, 0.0);
        compare("layernorm C=384", op_layernorm, dt, tol);
        compare("layernorm C=40", op_layernorm_narrow, dt, tol);
        compare("norms C=5000, 4104 (a block per row)", op_norm_block, dt, tol);
        compare("norms C=37, C=384 unaligned (no vectors)", op_norm_unaligned, dt, tol);
        if (k) compare("layernorm fp32 weights (run-time dtypes)", op_norm_mixed, dt, tol);
        compare("linear", op_linear, dt, tol);
        compare("column sums: 2600 rows in 41 chunks, 8 rows in one, 4-column vectors (dbias, layernorm dγ dβ)",
                op_colsum, dt, tol);
        compare("gelu", op_gelu, dt, tol);
        compare("linear+gelu fused", op_linear_gelu, dt, tol);
        compare("linear+gelu fused without bias, o=30, o=64", op_linear_gelu_odd, dt, tol);
        compare("linear+gelu fused, the exact (erf) GELU, o=128 with a bias, o=30 without",
                op_linear_gelu_erf, dt, tol);
        compare("linear+squared relu fused, o=128 with a bias, o=30 without", op_linear_relu2, dt,
                tol);
        if (k) compare("linear+gelu fused, fp32 output of 16-bit inputs", op_linear_gelu_f32out, dt, tol);
        compare("attention T=48", op_attention, dt, k ? 2 * tol : tol);
        compare("attention T=300 dropout", op_attention_long, dt, k ? 2 * tol : tol);
        compare_grads("tiled attention T=48 hd 64", op_flash, dt, k ? 2 * tol : tol, 2, k ? 4 * tol : tol);
        compare_grads("tiled attention T=100 gqa hd 128 dropout", op_flash_gqa, dt, k ? 2 * tol : tol, 2,
                      k ? 4 * tol : tol);
        compare_grads("tiled attention blocks merged and accumulated", op_flash_blocks, dt,
                      k ? 2 * tol : tol, 2, k ? 4 * tol : tol);
        compare_grads("tiled attention blocks merged and accumulated, hd 64 (keys from 0 and 50)",
                      op_flash_blocks64, dt, k ? 2 * tol : tol, 2, k ? 4 * tol : tol);
        compare_grads("tiled attention T=99 hd 64 gqa dropout", op_flash_odd, dt, k ? 2 * tol : tol, 2,
                      k ? 4 * tol : tol);
        if (k) {
            compare_grads("tiled attention T=67 hd 64 gqa dropout, MG_ATTN_KERNELS=wmma",
                          op_flash_odd_wmma, dt, 2 * tol, 2, 4 * tol);
            compare_grads("tiled attention T=67 hd 64 gqa dropout, MG_ATTN_KERNELS=simt",
                          op_flash_odd_simt, dt, 2 * tol, 2, 4 * tol);
        }
        compare("rmsnorm C=384", op_rmsnorm, dt, tol);
        compare("rmsnorm C=40", op_rmsnorm_narrow, dt, tol);
        compare("swiglu", op_swiglu, dt, tol);
        compare("rope hd 64 (vectors), hd 16 unaligned (pairs)", op_rope, dt, tol);
        compare("rope + gqa attention (dropout)", op_rope_gqa, dt, k ? 2 * tol : tol);
        compare("elementwise+dropout", op_elementwise, dt, tol);
        compare("elementwise: tail, unaligned, mixed dtypes", op_elementwise_odd, dt, tol);
        compare("dropout rows of 36, 30, 41 (vectors across row ends, indices not from 0 mod 4)",
                op_dropout_rows, dt, tol);
        compare("xent (2 vocab slices)", op_xent, dt, tol);
        compare("xent one pass (2 vocab slices)", op_xent_onepass, dt, tol);
        compare("xent rows of 511 and 516 columns (no vectors; a partial last vector)", op_xent_odd, dt, tol);
        compare("fused classifier (chunks of 50, padding)", op_classifier, dt, tol);
        compare("adamw+sumsq", op_adamw, dt, tol);
        compare("fused adamw (5 pieces, a skipped step) + device sumsq", op_adamw_multi, dt, tol);
        if (have_gpu)
            compare("fused adamw as a CUDA graph, launched 4 times", op_adamw_graph, dt, tol);
    }
    free(X); free(W); free(D); free(E); free(Q);
    mg_ctx_free(&dev);
    mg_ctx_free(&cpu);
    return mg_test_summary();
}
