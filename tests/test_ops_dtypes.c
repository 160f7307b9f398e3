// mg-test: ranks=1 timeout=120
/* test_ops_dtypes.c — every op with 16-bit storage (bf16, fp16) against the same op in fp32 on
   the same (rounded) inputs. The math is fp32 in both; the 16-bit run differs only by the
   rounding of what it stores (outputs, and intermediates such as the attention probabilities),
   so the tolerance is a few half-ulps of the format: 1.2e-2 for bf16 (8 bits), 2e-3 for fp16
   (11 bits), relative to max(|x|, RMS/10). Parameter gradients stay fp32 here (the master
   gradients of mixed precision) except where a test says otherwise.                        */
#include "classifier_util.h"

enum { T = 6, B = 3, C = 16, NH = 2, N = T * B, V = 23, VP = 24 };

static double tol_of(mg_dtype dt) { return dt == MG_BF16 ? 1.2e-2 : 2e-3; }
/* host copy of x rounded to dt */
static float *rounded(const float *x, int64_t n, mg_dtype dt) {
    float *r = (float *)malloc((size_t)n * 4 + 4);
    int64_t i;
    for (i = 0; i < n; i++) { uint16_t tmp[2]; mg_store(tmp, dt, 0, x[i]); r[i] = mg_load(tmp, dt, 0); }
    return r;
}
/* compare a 16-bit device tensor with an fp32 one; errors relative to max(|x|, RMS/10), or to
   the RMS itself for results of sums over stored-rounded intermediates (attention), whose
   error is a few ulps of the terms, not of the (possibly cancelling) result.              */
static void same_floor(mg_ctx *ctx, const char *op, mg_dtype dt, const mg_tensor *got,
                       const mg_tensor *want, int rms_floor, double tol_factor) {
    float *g = ops_host(ctx, got), *w = ops_host(ctx, want);
    char label[128];
    long n = (long)mg_numel(want);
    snprintf(label, sizeof label, "%s in %s = fp32 on rounded inputs", op, mg_dtype_name(dt));
    ops_close_host(label, g, w, n, tol_factor * tol_of(dt), rms_floor ? 10 * ops_floor(w, n) : 1e-6);
    free(g);
    free(w);
}
static void same(mg_ctx *ctx, const char *op, mg_dtype dt, const mg_tensor *got, const mg_tensor *want) {
    same_floor(ctx, op, dt, got, want, 0, 1.0);
}
/* a pair of device tensors holding the same rounded values, one fp32, one dt */
typedef struct pair { mg_tensor f, h; } pair;
static pair mk(mg_ctx *ctx, mg_dtype dt, const float *src, int64_t rows, int64_t cols) {
    pair p;
    float *r = src ? rounded(src, rows * cols, dt) : NULL;
    p.f = ops_dev(ctx, MG_F32, r, rows, cols);
    p.h = ops_dev(ctx, dt, r, rows, cols);
    free(r);
    return p;
}

/* The fused classifier in 16 bits against the unfused one in the same dtype (the model's head
   before fusing: fp32 logits, 16-bit dlogits, 16-bit dx, fp32 dw), for 1, 2 and 4 vocabulary
   slices of VP and chunks of 5 rows (5, 5, 5, 3), x and w the rounded x [N, C] and e [VP, C],
   dw starting from dw0.
   Both compute the same fp32 values up to summation order (Σexp rescaled per slice, dw chunk
   by chunk); the losses stay fp32 (4e-6, as test_ops' fp32 check). The 16-bit results — the
   rounded dlogits behind dx and dw, and dx itself — may then round to the neighbouring 16-bit
   value: the format's tolerance above. dx is compared with one slice only: with several, each
   slice's partial dx is rounded to 16 bits before the sum (as the model's tensor-parallel
   all-reduce of it, fused or not), an error relative to the partials, which may cancel;
   test_ops checks the slices' dx in fp32. With targets < 0 (ignored rows) the ignored rows'
   losses and dx rows are exactly 0 and dw is the unfused one of the kept rows alone.       */
static void classifier_16(mg_ctx *ctx, mg_dtype dt, const float *x, const float *e,
                          const float *dw0, const int32_t *targets, float dloss_scale,
                          const char *what) {
    cls_case k, kept;
    cls_out ref, ref_kept, got;
    float *xr = rounded(x, N * C, dt);
    float *wr = rounded(e, VP * C, dt), xk[N * C];
    int32_t tk[N];
    char label[160];
    int t, masked;
    memset(&k, 0, sizeof k);
    k.dt = dt; k.N = N; k.C = C; k.Vp = VP; k.V = V;
    k.x = xr; k.w = wr; k.dw0 = dw0; k.targets = targets; k.dloss = 0.5f; k.backward = 1;
    k.dloss_scale = dloss_scale;
    masked = cls_kept(&k, &kept, xk, tk) < N;
    cls_out_alloc(&ref, &k);
    cls_unfused(ctx, &k, &ref);
    cls_out_alloc(&ref_kept, &kept);
    cls_unfused(ctx, &kept, &ref_kept);
    for (t = 1; t <= 4; t *= 2) {
        cls_out_alloc(&got, &k);
        cls_fused(&k, t, 5, &got);
        snprintf(label, sizeof label, "fused classifier in %s%s, %d slices, chunks of 5: losses",
                 mg_dtype_name(dt), what, t);
        ops_close_host(label, got.losses, ref.losses, N, 4e-6, 1e-6);
        snprintf(label, sizeof label, "fused classifier in %s%s, %d slices, chunks of 5: dx",
                 mg_dtype_name(dt), what, t);
        if (t == 1) ops_close_host(label, got.dx, ref.dx, N * C, tol_of(dt), 1e-6);
        snprintf(label, sizeof label, "fused classifier in %s%s, %d slices, chunks of 5: dw",
                 mg_dtype_name(dt), what, t);
        ops_close_host(label, got.dw, ref.dw, VP * C, tol_of(dt), 1e-6);
        if (masked) {
            snprintf(label, sizeof label, "fused classifier in %s%s, %d slices, chunks of 5: dw "
                     "= unfused of the kept rows alone", mg_dtype_name(dt), what, t);
            ops_close_host(label, got.dw, ref_kept.dw, VP * C, tol_of(dt), 1e-6);
            snprintf(label, sizeof label, "fused classifier in %s%s, %d slices, chunks of 5: "
                     "ignored rows' losses and dx rows exactly 0", mg_dtype_name(dt), what, t);
            CHECK(cls_ignored_zero(&k, &got), label);
        }
        cls_out_free(&got);
    }
    cls_out_free(&ref);
    cls_out_free(&ref_kept);
    free(xr);
    free(wr);
}

static void test_dtype(mg_ctx *ctx, mg_dtype dt) {
    size_t mark = mg_arena_mark(ctx);
    float *x = ops_randn_array(N * 4 * C, 1), *w = ops_randn_array(4 * C * 4 * C, 0.3f);
    float *d = ops_randn_array(N * 4 * C, 1), *e = ops_randn_array(VP * C, 1);
    float *mean = ops_dev_f32(ctx, NULL, N), *rstd = ops_dev_f32(ctx, NULL, N);
    float *mean2 = ops_dev_f32(ctx, NULL, N), *rstd2 = ops_dev_f32(ctx, NULL, N);
    int32_t tok[N], *tokd;
    int i;
    for (i = 0; i < N; i++) tok[i] = (i * 5 + 3) % 13; /* tokens repeat */
    tokd = ops_dev_i32(ctx, tok, N);
    { /* layernorm: 16-bit activations, 16-bit weights; fp32 parameter gradients */
        pair in = mk(ctx, dt, x, N, C), lw = mk(ctx, dt, w, 1, C), lb = mk(ctx, dt, w + C, 1, C);
        pair out = mk(ctx, dt, NULL, N, C), dout = mk(ctx, dt, d, N, C), dinp = mk(ctx, dt, NULL, N, C);
        mg_tensor dw1 = ops_dev(ctx, MG_F32, NULL, 1, C), dw2 = ops_dev(ctx, MG_F32, NULL, 1, C);
        mg_tensor db1 = ops_dev(ctx, MG_F32, NULL, 1, C), db2 = ops_dev(ctx, MG_F32, NULL, 1, C);
        mg_layernorm_forward(ctx, &out.f, mean, rstd, &in.f, &lw.f, &lb.f);
        mg_layernorm_forward(ctx, &out.h, mean2, rstd2, &in.h, &lw.h, &lb.h);
        same(ctx, "layernorm forward", dt, &out.h, &out.f);
        mg_layernorm_backward(ctx, &dinp.f, &dw1, &db1, &dout.f, &in.f, &lw.f, mean, rstd, 0);
        mg_layernorm_backward(ctx, &dinp.h, &dw2, &db2, &dout.h, &in.h, &lw.h, mean, rstd, 0);
        same(ctx, "layernorm backward dinp", dt, &dinp.h, &dinp.f);
        same(ctx, "layernorm backward dweight", dt, &dw2, &dw1);
    }
    { /* linear: 16-bit everything but dweight (fp32) and a 16-bit dbias */
        pair in = mk(ctx, dt, x, N, C), lw = mk(ctx, dt, w, 3 * C, C), lb = mk(ctx, dt, w, 1, 3 * C);
        pair out = mk(ctx, dt, NULL, N, 3 * C), dout = mk(ctx, dt, d, N, 3 * C), dinp = mk(ctx, dt, NULL, N, C);
        pair dbias = mk(ctx, dt, NULL, 1, 3 * C);
        mg_tensor dw1 = ops_dev(ctx, MG_F32, NULL, 3 * C, C), dw2 = ops_dev(ctx, MG_F32, NULL, 3 * C, C);
        mg_linear_forward(ctx, &out.f, &in.f, &lw.f, &lb.f);
        mg_linear_forward(ctx, &out.h, &in.h, &lw.h, &lb.h);
        same(ctx, "linear forward", dt, &out.h, &out.f);
        mg_linear_backward_input(ctx, &dinp.f, &dout.f, &lw.f, 0);
        mg_linear_backward_input(ctx, &dinp.h, &dout.h, &lw.h, 0);
        same(ctx, "linear backward input", dt, &dinp.h, &dinp.f);
        mg_linear_backward_weight(ctx, &dw1, &dbias.f, &dout.f, &in.f);
        mg_linear_backward_weight(ctx, &dw2, &dbias.h, &dout.h, &in.h);
        same(ctx, "linear backward weight (fp32 dweight)", dt, &dw2, &dw1);
        same(ctx, "linear backward bias", dt, &dbias.h, &dbias.f);
    }
    { /* gelu */
        pair in = mk(ctx, dt, x, N, 4 * C), out = mk(ctx, dt, NULL, N, 4 * C), dout = mk(ctx, dt, d, N, 4 * C);
        mg_gelu_forward(ctx, &out.f, &in.f);
        mg_gelu_forward(ctx, &out.h, &in.h);
        same(ctx, "gelu forward", dt, &out.h, &out.f);
        mg_gelu_backward(ctx, &dout.f, &in.f, &dout.f);
        mg_gelu_backward(ctx, &dout.h, &in.h, &dout.h);
        same(ctx, "gelu backward", dt, &dout.h, &dout.f);
    }
    { /* attention: qkv, scores/probabilities and output all 16-bit. The scores S are stored
         rounded before the softmax (as cuBLAS writes them), which perturbs P by |S|·ulp: small
         qkv values keep |S| < 1 so the comparison stays at a few ulps.                      */
        mg_attn_dropout drop = {0.1f, 5, 0, NH};
        float *xs = ops_randn_array(N * 3 * C, 0.4f);
        pair qkv = mk(ctx, dt, xs, N, 3 * C), out = mk(ctx, dt, NULL, N, C), att = mk(ctx, dt, NULL, B * NH * T, T);
        pair dout = mk(ctx, dt, d, N, C), dqkv = mk(ctx, dt, NULL, N, 3 * C), datt = mk(ctx, dt, NULL, B * NH * T, T);
        mg_attention_forward(ctx, &out.f, &att.f, &qkv.f, B, T, NH, &drop);
        mg_attention_forward(ctx, &out.h, &att.h, &qkv.h, B, T, NH, &drop);
        same_floor(ctx, "attention forward (dropout 0.1)", dt, &out.h, &out.f, 1, 1.0);
        same(ctx, "attention probabilities", dt, &att.h, &att.f);
        mg_attention_backward(ctx, &dqkv.f, &datt.f, &dout.f, &qkv.f, &att.f, B, T, NH, &drop);
        mg_attention_backward(ctx, &dqkv.h, &datt.h, &dout.h, &qkv.h, &att.h, B, T, NH, &drop);
        /* the backward stores four rounded intermediates in a row (dP, its dropout, dS, the GEMM
           result), hence twice the tolerance */
        same_floor(ctx, "attention backward", dt, &dqkv.h, &dqkv.f, 1, 2.0);
        free(xs);
    }
    { /* cross-entropy on 16-bit logits, 16-bit dlogits in place */
        pair lg = mk(ctx, dt, x, N, VP);
        float *mx = ops_dev_f32(ctx, NULL, N), *se = ops_dev_f32(ctx, NULL, N), *tl = ops_dev_f32(ctx, NULL, N);
        float *l1 = ops_dev_f32(ctx, NULL, N), *l2 = ops_dev_f32(ctx, NULL, N), *h1, *h2;
        char label[64];
        mg_xent_max(ctx, mx, &lg.f, 0, V);
        mg_xent_sumexp(ctx, se, tl, &lg.f, tokd, mx, 0, V);
        mg_xent_loss(ctx, l1, mx, se, tl, N);
        mg_xent_backward(ctx, &lg.f, &lg.f, tokd, mx, se, 0.5f, 0, V);
        mg_xent_max(ctx, mx, &lg.h, 0, V);
        mg_xent_sumexp(ctx, se, tl, &lg.h, tokd, mx, 0, V);
        mg_xent_loss(ctx, l2, mx, se, tl, N);
        mg_xent_backward(ctx, &lg.h, &lg.h, tokd, mx, se, 0.5f, 0, V);
        h1 = ops_host_f32(ctx, l1, N);
        h2 = ops_host_f32(ctx, l2, N);
        snprintf(label, sizeof label, "xent loss on %s logits = fp32 (exact inputs)", mg_dtype_name(dt));
        ops_close_host(label, h2, h1, N, 1e-6, 1e-6);
        same(ctx, "xent dlogits", dt, &lg.h, &lg.f);
        free(h1);
        free(h2);
    }
    { /* then rows ignored: the first, the last and the whole second chunk (5..9), the
         gradient scaled by the rows over the rows kept */
        float *dw0 = ops_randn_array(VP * C, 0.1f);
        int32_t masked[N];
        classifier_16(ctx, dt, x, e, dw0, tok, 0.0f, "");
        for (i = 0; i < N; i++) masked[i] = i == 0 || i == N - 1 || (i >= 5 && i < 10) ? -1 : tok[i];
        classifier_16(ctx, dt, x, e, dw0, masked, (float)N / 11.0f, ", rows ignored, dloss_scale 18/11");
        free(dw0);
    }
    { /* embedding: 16-bit tables and output; 16-bit dwte scatter (one token is repeated) */
        pair wte = mk(ctx, dt, e, VP, C), wpe = mk(ctx, dt, w, T, C), out = mk(ctx, dt, NULL, N, C);
        pair dout = mk(ctx, dt, d, N, C), dwte = mk(ctx, dt, NULL, VP, C), dwpe = mk(ctx, dt, NULL, T, C);
        mg_embedding_forward(ctx, &out.f, tokd, B, T, 0, &wte.f, 0, &wpe.f);
        mg_embedding_forward(ctx, &out.h, tokd, B, T, 0, &wte.h, 0, &wpe.h);
        same(ctx, "embedding forward", dt, &out.h, &out.f);
        mg_embedding_backward(ctx, &dwte.f, &dwpe.f, &dout.f, tokd, B, T, 0, 0);
        mg_embedding_backward(ctx, &dwte.h, &dwpe.h, &dout.h, tokd, B, T, 0, 0);
        same(ctx, "embedding backward dwte", dt, &dwte.h, &dwte.f);
        same(ctx, "embedding backward dwpe", dt, &dwpe.h, &dwpe.f);
    }
    { /* elementwise */
        pair a = mk(ctx, dt, x, 1, 999), b = mk(ctx, dt, d, 1, 999);
        mg_axpy(ctx, &a.f, 0.3f, &b.f);
        mg_axpy(ctx, &a.h, 0.3f, &b.h);
        same(ctx, "axpy", dt, &a.h, &a.f);
        mg_dropout_forward(ctx, &a.f, &a.f, 0.5f, 3, 0);
        mg_dropout_forward(ctx, &a.h, &a.h, 0.5f, 3, 0);
        same(ctx, "dropout", dt, &a.h, &a.f);
    }
    free(x); free(w); free(d); free(e);
    mg_arena_release(ctx, mark);
}

int main(void) {
    mg_ctx ctx = ops_ctx_make((size_t)16 << 20);
    test_dtype(&ctx, MG_BF16);
    test_dtype(&ctx, MG_F16);
    mg_ctx_free(&ctx);
    return mg_test_summary();
}
