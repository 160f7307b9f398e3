// mg-test: ranks=1 timeout=120
/* test_ops.c — every op of mg_tensor.h, forward and backward, against PyTorch float64
   references (tests/data/ops_*.bin, written by tests/oracle/ops.py), in fp32 to <= 1e-5
   relative; plus the layouts the model relies on: vocabulary slices of the embedding and of the
   cross-entropy (1, 2, 3 slices merged by max/sum give the unsplit result), a sequence-parallel
   shard of the embedding, the accumulate/overwrite gradient conventions and aliasing; and
   the fused, chunked classifier against the unfused one (1, 2, 4 slices, ragged chunks).     */
#include "classifier_util.h"

enum { T = 7, B = 2, C = 12, NH = 3, V = 37, VP = 40, N = T * B };
#define TOL 1e-5
#define FLOOR 1e-6 /* relative error: against max(|want|, RMS(want)/10, FLOOR) */

static void test_embedding(mg_ctx *ctx) {
    ops_ref r;
    size_t mark = mg_arena_mark(ctx);
    const int32_t *tok_h;
    int32_t *tok;
    mg_tensor wte, wpe, dout, out, dwte, dwpe;
    float *want2;
    int i;
    if (!ops_ref_load(&r, "embedding")) return;
    tok_h = OPS_I32(&r, "tokens", B * T);
    tok = ops_dev_i32(ctx, tok_h, B * T);
    wte = ops_dev(ctx, MG_F32, OPS_F32(&r, "wte", VP * C), VP, C);
    wpe = ops_dev(ctx, MG_F32, OPS_F32(&r, "wpe", (T + 1) * C), T + 1, C);
    dout = ops_dev(ctx, MG_F32, OPS_F32(&r, "dout", N * C), N, C);
    out = ops_dev(ctx, MG_F32, NULL, N, C);
    dwte = ops_dev(ctx, MG_F32, NULL, VP, C);
    dwpe = ops_dev(ctx, MG_F32, NULL, T + 1, C);
    mg_embedding_forward(ctx, &out, tok, B, T, 0, &wte, 0, &wpe);
    ops_close(ctx, "embedding forward", &out, OPS_F32(&r, "out", N * C), TOL, FLOOR);
    mg_embedding_backward(ctx, &dwte, &dwpe, &dout, tok, B, T, 0, 0);
    ops_close(ctx, "embedding backward dwte", &dwte, OPS_F32(&r, "dwte", VP * C), TOL, FLOOR);
    ops_close(ctx, "embedding backward dwpe", &dwpe, OPS_F32(&r, "dwpe", (T + 1) * C), TOL, FLOOR);
    /* parameter gradients accumulate: a second backward doubles them */
    mg_embedding_backward(ctx, &dwte, &dwpe, &dout, tok, B, T, 0, 0);
    want2 = (float *)malloc(VP * C * 4);
    for (i = 0; i < VP * C; i++) want2[i] = 2 * OPS_F32(&r, "dwte", -1)[i];
    ops_close(ctx, "embedding backward accumulates", &dwte, want2, TOL, FLOOR);
    free(want2);

    /* vocabulary-parallel: two slices of wte (rows 0..19, 20..39); each slice embeds only its
       tokens (others 0), positions are added by one slice; the sum is the full embedding.  */
    {
        mg_tensor lo = mg_tensor_rows(&wte, 0, 20), hi = mg_tensor_rows(&wte, 20, 20);
        mg_tensor o1 = ops_dev(ctx, MG_F32, NULL, N, C), o2 = ops_dev(ctx, MG_F32, NULL, N, C);
        mg_tensor d1 = ops_dev(ctx, MG_F32, NULL, 20, C), d2 = ops_dev(ctx, MG_F32, NULL, 20, C);
        mg_embedding_forward(ctx, &o1, tok, B, T, 0, &lo, 0, &wpe);
        mg_embedding_forward(ctx, &o2, tok, B, T, 0, &hi, 20, NULL);
        mg_add(ctx, &o1, &o1, &o2);
        ops_close(ctx, "embedding vocab slices sum to the full output", &o1,
                  OPS_F32(&r, "out", N * C), TOL, FLOOR);
        mg_embedding_backward(ctx, &d1, NULL, &dout, tok, B, T, 0, 0);
        mg_embedding_backward(ctx, &d2, NULL, &dout, tok, B, T, 0, 20);
        ops_close(ctx, "embedding vocab slice 0 dwte", &d1, OPS_F32(&r, "dwte", -1), TOL, FLOOR);
        ops_close(ctx, "embedding vocab slice 1 dwte", &d2, OPS_F32(&r, "dwte", -1) + 20 * C, TOL,
                  FLOOR);
    }
    /* sequence-parallel shard: positions 3..6 only (rows 3B..7B of the full output) */
    {
        mg_tensor o = ops_dev(ctx, MG_F32, NULL, 4 * B, C), dp = ops_dev(ctx, MG_F32, NULL, T + 1, C);
        mg_tensor ds = mg_tensor_rows(&dout, 3 * B, 4 * B);
        float *want = (float *)calloc((T + 1) * C, 4);
        mg_embedding_forward(ctx, &o, tok, B, T, 3, &wte, 0, &wpe);
        ops_close(ctx, "embedding sequence shard t0=3", &o, OPS_F32(&r, "out", -1) + 3 * B * C,
                  TOL, FLOOR);
        mg_embedding_backward(ctx, NULL, &dp, &ds, tok, B, T, 3, 0);
        memcpy(want + 3 * C, OPS_F32(&r, "dwpe", -1) + 3 * C, 4 * C * 4);
        ops_close(ctx, "embedding sequence shard dwpe", &dp, want, TOL, FLOOR);
        free(want);
    }
    OPS_EXPECT_FATAL("embedding rejects a shard past T", "t0 + T_local <= T",
                     mg_embedding_forward(ctx, &out, tok, B, T, 1, &wte, 0, &wpe));
    free(r.blob);
    mg_arena_release(ctx, mark);
}

static void test_layernorm(mg_ctx *ctx) {
    ops_ref r;
    size_t mark = mg_arena_mark(ctx);
    mg_tensor inp, w, b, dout, out, dinp, dw, db;
    float *mean, *rstd, *h, *init, *want;
    int i;
    if (!ops_ref_load(&r, "layernorm")) return;
    inp = ops_dev(ctx, MG_F32, OPS_F32(&r, "inp", N * C), N, C);
    w = ops_dev(ctx, MG_F32, OPS_F32(&r, "weight", C), 1, C);
    b = ops_dev(ctx, MG_F32, OPS_F32(&r, "bias", C), 1, C);
    dout = ops_dev(ctx, MG_F32, OPS_F32(&r, "dout", N * C), N, C);
    out = ops_dev(ctx, MG_F32, NULL, N, C);
    dinp = ops_dev(ctx, MG_F32, NULL, N, C);
    init = ops_randn_array(N * C, 1.0f); /* accumulate and parameter-gradient start values */
    dw = ops_dev(ctx, MG_F32, init, 1, C);
    db = ops_dev(ctx, MG_F32, init + C, 1, C);
    mean = ops_dev_f32(ctx, NULL, N);
    rstd = ops_dev_f32(ctx, NULL, N);
    mg_layernorm_forward(ctx, &out, mean, rstd, &inp, &w, &b);
    ops_close(ctx, "layernorm forward", &out, OPS_F32(&r, "out", N * C), TOL, FLOOR);
    h = ops_host_f32(ctx, mean, N);
    ops_close_host("layernorm mean", h, OPS_F32(&r, "mean", N), N, TOL, FLOOR);
    free(h);
    h = ops_host_f32(ctx, rstd, N);
    ops_close_host("layernorm rstd", h, OPS_F32(&r, "rstd", N), N, TOL, FLOOR);
    free(h);
    mg_layernorm_backward(ctx, &dinp, &dw, &db, &dout, &inp, &w, mean, rstd, 0);
    ops_close(ctx, "layernorm backward dinp", &dinp, OPS_F32(&r, "dinp", N * C), TOL, FLOOR);
    want = (float *)malloc(N * C * 4);
    for (i = 0; i < C; i++) want[i] = init[i] + OPS_F32(&r, "dweight", C)[i];
    ops_close(ctx, "layernorm backward dweight (accumulated)", &dw, want, TOL, FLOOR);
    for (i = 0; i < C; i++) want[i] = init[C + i] + OPS_F32(&r, "dbias", C)[i];
    ops_close(ctx, "layernorm backward dbias (accumulated)", &db, want, TOL, FLOOR);
    /* accumulate = 1 adds into dinp (the residual stream) */
    mg_copy_to_device(ctx, dinp.data, init, N * C * 4);
    mg_layernorm_backward(ctx, &dinp, NULL, NULL, &dout, &inp, &w, mean, rstd, 1);
    for (i = 0; i < N * C; i++) want[i] = init[i] + OPS_F32(&r, "dinp", -1)[i];
    ops_close(ctx, "layernorm backward dinp accumulate", &dinp, want, TOL, FLOOR);
    /* dinp may alias dout */
    mg_copy(ctx, dinp.data, dout.data, N * C * 4);
    mg_layernorm_backward(ctx, &dinp, NULL, NULL, &dinp, &inp, &w, mean, rstd, 0);
    ops_close(ctx, "layernorm backward dinp aliasing dout", &dinp, OPS_F32(&r, "dinp", -1), TOL,
              FLOOR);
    {   /* zero-centred (--apply-layernorm-1p): weight − 1 stored, the same function */
        mg_norm k1p = {0, 1e-5f, 1};
        float *wz = (float *)malloc(C * 4);
        mg_tensor w1p, dw1p = ops_dev(ctx, MG_F32, NULL, 1, C), db1p = ops_dev(ctx, MG_F32, NULL, 1, C);
        for (i = 0; i < C; i++) wz[i] = OPS_F32(&r, "weight", C)[i] - 1.0f;
        w1p = ops_dev(ctx, MG_F32, wz, 1, C);
        mg_norm_forward(ctx, &k1p, &out, mean, rstd, &inp, &w1p, &b);
        ops_close(ctx, "layernorm zero-centred (weight - 1 stored) forward", &out,
                  OPS_F32(&r, "out", N * C), TOL, FLOOR);
        mg_norm_backward(ctx, &k1p, &dinp, &dw1p, &db1p, &dout, &inp, &w1p, mean, rstd, 0);
        ops_close(ctx, "layernorm zero-centred backward dinp", &dinp, OPS_F32(&r, "dinp", N * C),
                  TOL, FLOOR);
        ops_close(ctx, "layernorm zero-centred backward dweight (the same as the scale's)", &dw1p,
                  OPS_F32(&r, "dweight", C), TOL, FLOOR);
        free(wz);
    }
    OPS_EXPECT_FATAL("layernorm rejects a wrong weight size", "weight has 11 elements",
                     { mg_tensor w11 = mg_tensor_rows(&dinp, 0, 1); w11.shape[1] = 11;
                       mg_layernorm_forward(ctx, &out, mean, rstd, &inp, &w11, &b); });
    free(want);
    free(init);
    free(r.blob);
    mg_arena_release(ctx, mark);
}

static void test_linear(mg_ctx *ctx) {
    ops_ref r;
    const char *tags[2] = {"up", "down"};
    int fin[2] = {C, 4 * C}, fout[2] = {3 * C, C}, k;
    if (!ops_ref_load(&r, "linear")) return;
    for (k = 0; k < 2; k++) {
        size_t mark = mg_arena_mark(ctx);
        char nm[64], lbl[96];
        int I = fin[k], O = fout[k], i;
        mg_tensor inp, w, b, dout, out, dinp, dw, db;
        float *want = (float *)malloc((size_t)(N * 4 * C) * 4), *init = ops_randn_array(N * 4 * C, 1);
#define REF(name, n) (snprintf(nm, sizeof nm, "%s_%s", tags[k], name), OPS_F32(&r, nm, n))
#define LBL(s) (snprintf(lbl, sizeof lbl, "linear %s %s", tags[k], s), lbl)
        inp = ops_dev(ctx, MG_F32, REF("inp", N * I), N, I);
        w = ops_dev(ctx, MG_F32, REF("weight", O * I), O, I);
        b = ops_dev(ctx, MG_F32, REF("bias", O), 1, O);
        dout = ops_dev(ctx, MG_F32, REF("dout", N * O), N, O);
        out = ops_dev(ctx, MG_F32, NULL, N, O);
        dinp = ops_dev(ctx, MG_F32, NULL, N, I);
        dw = ops_dev(ctx, MG_F32, init, O, I);
        db = ops_dev(ctx, MG_F32, init, 1, O);
        b.ndim = 1; b.shape[0] = O;
        mg_linear_forward(ctx, &out, &inp, &w, &b);
        ops_close(ctx, LBL("forward"), &out, REF("out", N * O), TOL, FLOOR);
        mg_linear_backward_input(ctx, &dinp, &dout, &w, 0);
        ops_close(ctx, LBL("backward input"), &dinp, REF("dinp", N * I), TOL, FLOOR);
        mg_linear_backward_weight(ctx, &dw, &db, &dout, &inp);
        for (i = 0; i < O * I; i++) want[i] = init[i] + REF("dweight", O * I)[i];
        ops_close(ctx, LBL("backward weight (accumulated)"), &dw, want, TOL, FLOOR);
        for (i = 0; i < O; i++) want[i] = init[i] + REF("dbias", O)[i];
        ops_close(ctx, LBL("backward bias (accumulated)"), &db, want, TOL, FLOOR);
        /* backward_input with accumulate adds */
        mg_copy_to_device(ctx, dinp.data, init, (size_t)N * I * 4);
        mg_linear_backward_input(ctx, &dinp, &dout, &w, 1);
        for (i = 0; i < N * I; i++) want[i] = init[i] + REF("dinp", -1)[i];
        ops_close(ctx, LBL("backward input accumulate"), &dinp, want, TOL, FLOOR);
        /* no bias: out = inp·Wᵀ = reference − bias */
        mg_linear_forward(ctx, &out, &inp, &w, NULL);
        {
            const float *ref_out = REF("out", -1), *ref_bias = REF("bias", -1);
            for (i = 0; i < N * O; i++) want[i] = ref_out[i] - ref_bias[i % O];
        }
        ops_close(ctx, LBL("forward without bias"), &out, want, TOL, FLOOR);
#undef REF
#undef LBL
        free(want);
        free(init);
        if (k == 0)
            OPS_EXPECT_FATAL("linear rejects mismatched features", "input has 12 features",
                             mg_linear_forward(ctx, &dinp, &inp, &dout, NULL));
        mg_arena_release(ctx, mark);
    }
    free(r.blob);
}

/* The MLP's activations against PyTorch on the same inputs: GELU's tanh approximation
   (ops_gelu.bin), the exact GELU (ops_gelu_erf.bin, F.gelu) and the squared ReLU
   (ops_relu2.bin, torch.pow(F.relu(x), 2)).                                                */
static void test_gelu(mg_ctx *ctx, mg_act_kind kind) {
    static const char *const file[3] = {"gelu", "gelu_erf", "relu2"};
    static const char *const what[3][3] = {
        {"gelu forward", "gelu backward", "gelu backward in place"},
        {"gelu (erf) forward", "gelu (erf) backward", "gelu (erf) backward in place"},
        {"squared relu forward", "squared relu backward", "squared relu backward in place"}};
    ops_ref r;
    size_t mark = mg_arena_mark(ctx);
    int n = N * 4 * C;
    mg_tensor inp, dout, out, dinp;
    if (!ops_ref_load(&r, file[kind])) return;
    inp = ops_dev(ctx, MG_F32, OPS_F32(&r, "inp", n), N, 4 * C);
    dout = ops_dev(ctx, MG_F32, OPS_F32(&r, "dout", n), N, 4 * C);
    out = ops_dev(ctx, MG_F32, NULL, N, 4 * C);
    dinp = ops_dev(ctx, MG_F32, NULL, N, 4 * C);
    mg_act_forward(ctx, &out, &inp, kind);
    ops_close(ctx, what[kind][0], &out, OPS_F32(&r, "out", n), TOL, FLOOR);
    mg_act_backward(ctx, &dinp, &inp, &dout, kind);
    ops_close(ctx, what[kind][1], &dinp, OPS_F32(&r, "dinp", n), TOL, FLOOR);
    mg_act_backward(ctx, &dout, &inp, &dout, kind); /* dinp may alias dout */
    ops_close(ctx, what[kind][2], &dout, OPS_F32(&r, "dinp", n), TOL, FLOOR);
    free(r.blob);
    mg_arena_release(ctx, mark);
}

/* The fused GELU MLP pair against the ops it fuses (each checked against PyTorch above):
   fp32 — pre = linear, out = gelu(pre), dpre = gelu'(pre) ⊙ (dout·W), dbias += Σ dpre; bf16 —
   each output the fp32 result rounded ONCE (out = bf16(gelu(fp32 pre)), not gelu of the
   rounded pre; the bias gradient bf16-rounded before it is added). On the CPU (the twin: a
   GEMM into fp32, then the epilogue) these are exact; on a GPU cuBLASLt's GELU and GEMM may
   move a result by rounding, so the tolerances are then 1e-5 and one bf16 ulp.             */
static void test_linear_gelu(mg_ctx *ctx, mg_act_kind kind) {
    char nm[200];   /* the check's name, "erf " or "relu2 " in front for the other kinds */
#define LG(s) (snprintf(nm, sizeof nm, "%s%s", kind == MG_ACT_GELU_ERF ? "erf "        \
                        : kind == MG_ACT_RELU2 ? "relu2 " : "", s), nm)
    enum { FI = C, FO = 4 * C, FO2 = C };   /* in, out, next layer's out */
    size_t mark = mg_arena_mark(ctx);
    int exact = ctx->device == MG_DEVICE_CPU, i, k;
    double tol32 = exact ? 0.0 : 1e-5, tol16 = exact ? 0.0 : 1.0 / 128;
    float *x = ops_randn_array(N * FI, 1), *w = ops_randn_array(FO * FI, 0.3f);
    float *bb = ops_randn_array(FO, 0.5f), *w2 = ops_randn_array(FO2 * FO, 0.3f);
    float *dy = ops_randn_array(N * FO2, 1), *init = ops_randn_array(FO, 1);
    float *want = (float *)malloc(sizeof(float) * N * FO), *pre32;
    mg_tensor t[2][9];   /* per dtype: inp, w, b, w2, dout, act, pre, dpre, dbias (fp32) */
    for (k = 0; k < 2; k++) {
        mg_dtype dt = k ? MG_BF16 : MG_F32;
        t[k][0] = ops_dev(ctx, dt, x, N, FI); t[k][1] = ops_dev(ctx, dt, w, FO, FI);
        t[k][2] = ops_dev(ctx, dt, bb, 1, FO); t[k][3] = ops_dev(ctx, dt, w2, FO2, FO);
        t[k][4] = ops_dev(ctx, dt, dy, N, FO2); t[k][5] = ops_dev(ctx, dt, NULL, N, FO);
        t[k][6] = ops_dev(ctx, dt, NULL, N, FO); t[k][7] = ops_dev(ctx, dt, NULL, N, FO);
        t[k][8] = ops_dev(ctx, MG_F32, init, 1, FO);
        if (k == 1)   /* the fp32 run gets the bf16 inputs' values, so both compute alike */
            for (i = 0; i < 5; i++) {
                float *h = ops_host(ctx, &t[1][i]);
                mg_copy_to_device(ctx, t[0][i].data, h, mg_nbytes(&t[0][i]));
                free(h);
            }
    }
    for (k = 0; k < 2; k++) {
        mg_linear_act_forward(ctx, &t[k][5], &t[k][6], &t[k][0], &t[k][1], &t[k][2], kind);
        mg_linear_backward_input_act(ctx, &t[k][7], &t[k][8], &t[k][4], &t[k][3], &t[k][6], kind);
    }
    {   /* fp32 against the unfused ops */
        mg_tensor pre = ops_dev(ctx, MG_F32, NULL, N, FO), act = ops_dev(ctx, MG_F32, NULL, N, FO);
        mg_tensor da = ops_dev(ctx, MG_F32, NULL, N, FO), db = ops_dev(ctx, MG_F32, init, 1, FO);
        mg_tensor dw1 = ops_dev(ctx, MG_F32, NULL, FO, FI);
        float *h;
        mg_linear_forward(ctx, &pre, &t[0][0], &t[0][1], &t[0][2]);
        mg_act_forward(ctx, &act, &t[0][6], kind);
        mg_linear_backward_input(ctx, &da, &t[0][4], &t[0][3], 0);
        mg_act_backward(ctx, &da, &t[0][6], &da, kind);
        mg_linear_backward_weight(ctx, &dw1, &db, &da, &t[0][0]);   /* db += Σ_rows da */
        h = ops_host(ctx, &pre);
        ops_close(ctx, LG("linear+gelu fp32: pre = linear forward"), &t[0][6], h, exact ? 1e-6 : 1e-5, FLOOR);
        free(h);
        h = ops_host(ctx, &act);
        ops_close(ctx, LG("linear+gelu fp32: out = gelu(pre)"), &t[0][5], h, tol32, FLOOR);
        free(h);
        h = ops_host(ctx, &da);
        ops_close(ctx, LG("linear+gelu fp32: dpre = gelu'(pre) * (dout W)"), &t[0][7], h, tol32, FLOOR);
        free(h);
        h = ops_host(ctx, &db);
        ops_close(ctx, LG("linear+gelu fp32: dbias += column sums of dpre"), &t[0][8], h, tol32, FLOOR);
        free(h);
    }
    /* bf16: each output the fp32 run's value rounded once */
    pre32 = ops_host(ctx, &t[0][6]);
    for (i = 0; i < N * FO; i++) want[i] = mg_bf16_to_f32(mg_f32_to_bf16(pre32[i]));
    ops_close(ctx, LG("linear+gelu bf16: pre = bf16(fp32 pre)"), &t[1][6], want, tol16, FLOOR);
    {
        float *act32 = ops_host(ctx, &t[0][5]);
        for (i = 0; i < N * FO; i++) want[i] = mg_bf16_to_f32(mg_f32_to_bf16(act32[i]));
        ops_close(ctx, LG("linear+gelu bf16: out = bf16(gelu(fp32 pre)), one rounding"), &t[1][5], want, tol16, FLOOR);
        free(act32);
    }
    {   /* dpre in bf16 uses the bf16 pre: compare with the fp32 formula on it */
        float *preb = ops_host(ctx, &t[1][6]);
        mg_tensor p32 = ops_dev(ctx, MG_F32, preb, N, FO), d32 = ops_dev(ctx, MG_F32, NULL, N, FO);
        mg_tensor db = ops_dev(ctx, MG_F32, NULL, 1, FO);
        float *h, *dsum;
        mg_linear_backward_input_act(ctx, &d32, &db, &t[0][4], &t[0][3], &p32, kind);
        h = ops_host(ctx, &d32);
        dsum = ops_host(ctx, &db);
        for (i = 0; i < N * FO; i++) want[i] = mg_bf16_to_f32(mg_f32_to_bf16(h[i]));
        ops_close(ctx, LG("linear+gelu bf16: dpre = bf16(fp32 dpre)"), &t[1][7], want, tol16, FLOOR);
        for (i = 0; i < FO; i++) want[i] = init[i] + mg_bf16_to_f32(mg_f32_to_bf16(dsum[i]));
        ops_close(ctx, LG("linear+gelu bf16: dbias += bf16(fp32 column sums)"), &t[1][8], want, tol16, FLOOR);
        free(h); free(dsum); free(preb);
    }
    if (kind == MG_ACT_GELU) {
        OPS_EXPECT_FATAL("linear+gelu rejects pre aliasing out", "distinct buffers of one dtype",
                         mg_linear_gelu_forward(ctx, &t[0][5], &t[0][5], &t[0][0], &t[0][1], &t[0][2]));
    }
    free(x); free(w); free(bb); free(w2); free(dy); free(init); free(want);
    free(pre32);
    mg_arena_release(ctx, mark);
#undef LG
}

static void test_attention(mg_ctx *ctx) {
    ops_ref r;
    size_t mark = mg_arena_mark(ctx);
    mg_tensor qkv, dout, out, att, dqkv, datt;
    if (!ops_ref_load(&r, "attention")) return;
    qkv = ops_dev(ctx, MG_F32, OPS_F32(&r, "qkv", N * 3 * C), N, 3 * C);
    dout = ops_dev(ctx, MG_F32, OPS_F32(&r, "dout", N * C), N, C);
    out = ops_dev(ctx, MG_F32, NULL, N, C);
    att = ops_dev(ctx, MG_F32, NULL, B * NH * T, T);
    dqkv = ops_dev(ctx, MG_F32, NULL, N, 3 * C);
    datt = ops_dev(ctx, MG_F32, NULL, B * NH * T, T);
    mg_attention_forward(ctx, &out, &att, &qkv, B, T, NH, NULL);
    ops_close(ctx, "attention forward out", &out, OPS_F32(&r, "out", N * C), TOL, FLOOR);
    ops_close(ctx, "attention forward probabilities", &att, OPS_F32(&r, "att", B * NH * T * T),
              TOL, FLOOR);
    mg_attention_backward(ctx, &dqkv, &datt, &dout, &qkv, &att, B, T, NH, NULL);
    ops_close(ctx, "attention backward dqkv", &dqkv, OPS_F32(&r, "dqkv", N * 3 * C), TOL, FLOOR);
    /* p = 0 dropout is the same as none */
    {
        mg_attn_dropout d0 = {0.0f, 7, 0, NH};
        mg_attention_forward(ctx, &out, &att, &qkv, B, T, NH, &d0);
        ops_close(ctx, "attention with p=0 dropout", &out, OPS_F32(&r, "out", -1), TOL, FLOOR);
    }
    OPS_EXPECT_FATAL("attention rejects heads not dividing qkv", "n_head = 5",
                     mg_attention_forward(ctx, &out, &att, &qkv, B, T, 5, NULL));
    free(r.blob);
    mg_arena_release(ctx, mark);
}

/* Cross-entropy with the vocabulary cut into `slices` equal slices of Vs columns (the last
   ones padding), each run separately and merged on the host by max and sum — what the
   all-reduces of the tensor-parallel group do.                                             */
static void xent_sliced(mg_ctx *ctx, const float *logits_h, const int32_t *tgt, int Vp, int slices,
                        float dloss, float *losses, float *dlogits) {
    size_t mark = mg_arena_mark(ctx);
    int Vs = Vp / slices, s, i, j;
    float gmax[N], gsum[N], gt[N];
    float *rowmax = ops_dev_f32(ctx, NULL, N), *sumexp = ops_dev_f32(ctx, NULL, N);
    float *tlogit = ops_dev_f32(ctx, NULL, N), *lossd = ops_dev_f32(ctx, NULL, N);
    int32_t *tgt_d = ops_dev_i32(ctx, tgt, N);
    float *slice_h = (float *)malloc((size_t)N * Vs * 4);
    mg_tensor *sl = (mg_tensor *)malloc(sizeof(mg_tensor) * slices);
    for (i = 0; i < N; i++) { gmax[i] = -INFINITY; gsum[i] = 0; gt[i] = 0; }
    for (s = 0; s < slices; s++) {
        float *h;
        for (i = 0; i < N; i++)
            for (j = 0; j < Vs; j++) slice_h[i * Vs + j] = logits_h[i * Vp + s * Vs + j];
        sl[s] = ops_dev(ctx, MG_F32, slice_h, N, Vs);
        mg_xent_max(ctx, rowmax, &sl[s], (int64_t)s * Vs, V);
        h = ops_host_f32(ctx, rowmax, N);
        for (i = 0; i < N; i++) gmax[i] = h[i] > gmax[i] ? h[i] : gmax[i];
        free(h);
    }
    mg_copy_to_device(ctx, rowmax, gmax, sizeof gmax);
    for (s = 0; s < slices; s++) {
        float *h1, *h2;
        mg_xent_sumexp(ctx, sumexp, tlogit, &sl[s], tgt_d, rowmax, (int64_t)s * Vs, V);
        h1 = ops_host_f32(ctx, sumexp, N);
        h2 = ops_host_f32(ctx, tlogit, N);
        for (i = 0; i < N; i++) { gsum[i] += h1[i]; gt[i] += h2[i]; }
        free(h1);
        free(h2);
    }
    mg_copy_to_device(ctx, sumexp, gsum, sizeof gsum);
    mg_copy_to_device(ctx, tlogit, gt, sizeof gt);
    mg_xent_loss(ctx, lossd, rowmax, sumexp, tlogit, N);
    mg_copy_to_host(ctx, losses, lossd, sizeof(float) * N);
    for (s = 0; s < slices; s++) {
        float *h;
        mg_xent_backward(ctx, &sl[s], &sl[s], tgt_d, rowmax, sumexp, dloss, (int64_t)s * Vs, V);
        h = ops_host(ctx, &sl[s]);
        for (i = 0; i < N; i++)
            for (j = 0; j < Vs; j++) dlogits[i * Vp + s * Vs + j] = h[i * Vs + j];
        free(h);
    }
    free(slice_h);
    free(sl);
    mg_arena_release(ctx, mark);
}

static void test_xent(mg_ctx *ctx) {
    ops_ref r;
    enum { VP3 = 42 }; /* 3 slices of 14; columns 37..41 padding */
    const float *lref, *dref;
    const int32_t *tgt;
    float dloss, losses[N], *logits3, *dlog = (float *)malloc(N * VP3 * 4), *dref3;
    char name[128];
    int slices, i, j;
    if (!ops_ref_load(&r, "xent")) { free(dlog); return; }
    lref = OPS_F32(&r, "logits", N * VP);
    tgt = OPS_I32(&r, "targets", N);
    dref = OPS_F32(&r, "dlogits", N * VP);
    dloss = OPS_F32(&r, "dloss", 1)[0];
    logits3 = (float *)malloc(N * VP3 * 4);
    dref3 = (float *)calloc(N * VP3, 4);
    for (i = 0; i < N; i++)
        for (j = 0; j < VP3; j++) {
            logits3[i * VP3 + j] = j < VP ? lref[i * VP + j] : 1e4f; /* padding junk */
            if (j < VP) dref3[i * VP3 + j] = dref[i * VP + j];
        }
    for (slices = 1; slices <= 3; slices++) {
        int Vp = slices == 3 ? (int)VP3 : (int)VP;
        xent_sliced(ctx, slices == 3 ? logits3 : lref, tgt, Vp, slices, dloss, losses, dlog);
        snprintf(name, sizeof name, "xent loss, %d vocabulary slice%s", slices, slices > 1 ? "s" : "");
        ops_close_host(name, losses, OPS_F32(&r, "losses", N), N, TOL, FLOOR);
        snprintf(name, sizeof name, "xent dlogits, %d vocabulary slice%s (padding 0)", slices,
                 slices > 1 ? "s" : "");
        ops_close_host(name, dlog, slices == 3 ? dref3 : dref, N * Vp, TOL, FLOOR);
    }
    {   /* ignored rows (target -1) against PyTorch's ignore_index; mg_xent_loss has no
           targets, so the caller zeroes those rows' losses (as mg_classifier_fused does) */
        const int32_t *tgt_ign = OPS_I32(&r, "targets_ign", N);
        for (slices = 1; slices <= 2; slices++) {
            xent_sliced(ctx, lref, tgt_ign, VP, slices == 2 ? 4 : 1, dloss, losses, dlog);
            for (i = 0; i < N; i++) if (tgt_ign[i] < 0) losses[i] = 0.0f;
            snprintf(name, sizeof name, "xent, rows with target -1, %d slice%s: loss = "
                     "PyTorch's ignore_index", slices == 2 ? 4 : 1, slices == 2 ? "s" : "");
            ops_close_host(name, losses, OPS_F32(&r, "losses_ign", N), N, TOL, FLOOR);
            snprintf(name, sizeof name, "xent, rows with target -1, %d slice%s: dlogits = "
                     "PyTorch's (0 on those rows)", slices == 2 ? 4 : 1, slices == 2 ? "s" : "");
            ops_close_host(name, dlog, OPS_F32(&r, "dlogits_ign", N * VP), N * VP, TOL, FLOOR);
        }
    }
    free(logits3);
    free(dref3);
    free(dlog);
    free(r.blob);
}

/* Ignored rows (target < 0) in the three-step ops, on one slice of 8 columns (6 real): row 1
   is ignored and holds +inf logits, which make its statistics inf and NaN. Its tlogit is 0,
   its dlogits row is exactly 0 (padding too: a gradient computed and multiplied by 0 would
   be NaN), from mg_xent_backward and mg_xent_backward_at alike; rows 0 and 2 are the bits
   of the same rows with row 1's target 3 instead.                                          */
static void test_xent_ignored(mg_ctx *ctx) {
    enum { XN = 3, XV = 6, XVP = 8 };
    size_t mark = mg_arena_mark(ctx);
    float lg[XN * XVP], one = 0.5f, *tl_h, *d1, *d2, *d3;
    int32_t tg[XN] = {2, -1, 5}, tg_kept[XN] = {2, 3, 5};
    float *mx = ops_dev_f32(ctx, NULL, XN), *se = ops_dev_f32(ctx, NULL, XN);
    float *tl = ops_dev_f32(ctx, NULL, XN), *at = ops_dev_f32(ctx, &one, 1);
    int32_t *tgd = ops_dev_i32(ctx, tg, XN), *tgd_kept = ops_dev_i32(ctx, tg_kept, XN);
    mg_tensor logits, dl1, dl2, dl3;
    int i, ok = 1;
    for (i = 0; i < XN * XVP; i++) lg[i] = 0.25f * (float)((i * 7) % 11) - 1.0f;
    lg[1 * XVP + 2] = INFINITY;
    lg[1 * XVP + 7] = INFINITY;   /* a padding column */
    logits = ops_dev(ctx, MG_F32, lg, XN, XVP);
    for (i = 0; i < XN * XVP; i++) lg[i] = 7.0f;   /* dlogits start as junk */
    dl1 = ops_dev(ctx, MG_F32, lg, XN, XVP);
    dl2 = ops_dev(ctx, MG_F32, lg, XN, XVP);
    dl3 = ops_dev(ctx, MG_F32, lg, XN, XVP);
    mg_xent_max(ctx, mx, &logits, 0, XV);
    mg_xent_sumexp(ctx, se, tl, &logits, tgd, mx, 0, XV);
    tl_h = ops_host_f32(ctx, tl, XN);
    mg_xent_backward(ctx, &dl1, &logits, tgd, mx, se, 0.5f, 0, XV);
    mg_xent_backward_at(ctx, &dl2, &logits, tgd, mx, se, at, 0, XV);
    mg_xent_backward(ctx, &dl3, &logits, tgd_kept, mx, se, 0.5f, 0, XV);
    d1 = ops_host(ctx, &dl1);
    d2 = ops_host(ctx, &dl2);
    d3 = ops_host(ctx, &dl3);
    for (i = 0; i < XVP; i++) ok &= d1[XVP + i] == 0.0f && d2[XVP + i] == 0.0f;
    CHECK(tl_h[1] == 0.0f, "xent: an ignored row's target logit is 0");
    CHECK(ok, "xent backward (and _at): an ignored row's dlogits are exactly 0 (+inf logits)");
    CHECK(!memcmp(d1, d3, XVP * 4) && !memcmp(d1 + 2 * XVP, d3 + 2 * XVP, XVP * 4) &&
          !memcmp(d1, d2, XVP * 4) && !memcmp(d1 + 2 * XVP, d2 + 2 * XVP, XVP * 4),
          "xent backward: the rows beside an ignored one are unchanged");
    free(tl_h);
    free(d1);
    free(d2);
    free(d3);
    mg_arena_release(ctx, mark);
}

/* The fused classifier (mg_classifier_fused) equals the unfused one — full logits, three-step
   cross-entropy, dx = dlogits·w, dw += dlogitsᵀ·x — in fp32 for 1, 2 and 4 vocabulary slices
   (merged by the all-reduce of cls_fused's threads) and chunks of 13 (one), 5 (5, 5, 3: the
   last ragged) and 1 row. N = 13 rows, C = 12, V = 37 real ids of Vp = 48: the padding rows
   of w hold large values (any leak into the softmax moves the loss by ~e^20), the 4-slice
   split leaves slice 3 one real id (36, a target) and 11 padding rows. Tolerance 4e-6
   relative to max(|want|, RMS/10) — about 3 ulps of an RMS-sized term measured at the
   floor (1 ulp there reads 1.2e-6): the sums differ from the reference only in order — dw
   is summed chunk by chunk, Σexp of several slices after the rescaling, dx over slices.
   Then the same with rows ignored (targets −1: the first and last rows and all of rows 5..9,
   a whole chunk of 5) and dloss_scale 13/6 (the rows over the rows kept, as the loss mask's
   rescaling): the ignored rows' losses and dx rows are exactly 0, and dw equals the unfused
   one of the 6 kept rows alone (x and targets without the ignored rows).                   */
enum { CN = 13, CC = 12, CV = 37, CVP = 48 };
/* the fused classifier over 1, 2, 4 slices and chunks of 13, 5, 1 against cls_unfused */
static void classifier_grid(mg_ctx *ctx, const cls_case *k, const char *what) {
    static const int slices[3] = {1, 2, 4};
    static const int64_t chunks[3] = {13, 5, 1};
    float xk[CN * CC];
    int32_t tk[CN];
    cls_case kept;
    cls_out ref, ref_kept, got;
    char name[200];
    int a, b, masked = cls_kept(k, &kept, xk, tk) < k->N;
    cls_out_alloc(&ref, k);
    cls_unfused(ctx, k, &ref);
    cls_out_alloc(&ref_kept, &kept);
    cls_unfused(ctx, &kept, &ref_kept);
    for (a = 0; a < 3; a++)
        for (b = 0; b < 3; b++) {
            int agree;
            cls_out_alloc(&got, k);
            agree = cls_fused(k, slices[a], chunks[b], &got);
            snprintf(name, sizeof name, "%s, %d slice%s, chunks of %lld rows: losses = unfused",
                     what, slices[a], slices[a] > 1 ? "s" : "", (long long)chunks[b]);
            ops_close_host(name, got.losses, ref.losses, CN, 4e-6, 1e-6);
            snprintf(name, sizeof name, "%s, %d slice%s, chunks of %lld rows: dx = unfused",
                     what, slices[a], slices[a] > 1 ? "s" : "", (long long)chunks[b]);
            ops_close_host(name, got.dx, ref.dx, CN * CC, 4e-6, 1e-6);
            snprintf(name, sizeof name, "%s, %d slice%s, chunks of %lld rows: dw += unfused "
                     "(padding rows unchanged)", what, slices[a], slices[a] > 1 ? "s" : "",
                     (long long)chunks[b]);
            ops_close_host(name, got.dw, ref.dw, CVP * CC, 4e-6, 1e-6);
            snprintf(name, sizeof name, "%s: every slice's losses bit-identical; padding rows "
                     "of dw untouched", what);
            CHECK(agree && !memcmp(got.dw + CV * CC, k->dw0 + CV * CC, (CVP - CV) * CC * 4), name);
            if (masked) {
                snprintf(name, sizeof name, "%s, %d slice%s, chunks of %lld rows: dw += unfused "
                         "of the kept rows alone", what, slices[a], slices[a] > 1 ? "s" : "",
                         (long long)chunks[b]);
                ops_close_host(name, got.dw, ref_kept.dw, CVP * CC, 4e-6, 1e-6);
                snprintf(name, sizeof name, "%s, %d slice%s, chunks of %lld rows: ignored rows' "
                         "losses and dx rows exactly 0", what, slices[a], slices[a] > 1 ? "s" : "",
                         (long long)chunks[b]);
                CHECK(cls_ignored_zero(k, &got), name);
            }
            cls_out_free(&got);
        }
    cls_out_free(&ref);
    cls_out_free(&ref_kept);
}
static void test_classifier_fused(mg_ctx *ctx) {
    float *x = ops_randn_array(CN * CC, 1.0f), *w = ops_randn_array(CVP * CC, 0.5f);
    float *dw0 = ops_randn_array(CVP * CC, 0.1f);
    int32_t tgt[CN], tgt_masked[CN];
    cls_case k, km;
    int i;
    for (i = CV * CC; i < CVP * CC; i++) w[i] = 5.0f;   /* padding: logits of ~±20 */
    for (i = 0; i < CN; i++) tgt[i] = (int32_t)((i * 11 + 3) % CV);
    tgt[4] = 36;                                         /* the last real id */
    memset(&k, 0, sizeof k);
    k.dt = MG_F32; k.N = CN; k.C = CC; k.Vp = CVP; k.V = CV;
    k.x = x; k.w = w; k.dw0 = dw0; k.targets = tgt; k.dloss = 0.37f; k.backward = 1;
    classifier_grid(ctx, &k, "fused classifier");
    for (i = 0; i < CN; i++) tgt_masked[i] = i == 0 || i == CN - 1 || (i >= 5 && i < 10) ? -1 : tgt[i];
    km = k;
    km.targets = tgt_masked;
    km.dloss_scale = 13.0f / 6.0f;
    classifier_grid(ctx, &km, "fused classifier, rows ignored, dloss_scale 13/6");
    /* evaluation: losses only, the same bits as training's, dx and dw untouched; and
       dloss_scale 1 is dloss_scale 0 (unset), bit for bit */
    {
        cls_case eval = k, one = k;
        cls_out o, o_eval, o_one;
        eval.backward = 0;
        one.dloss_scale = 1.0f;
        cls_out_alloc(&o, &k);
        cls_fused(&k, 2, 5, &o);
        cls_out_alloc(&o_eval, &eval);
        cls_fused(&eval, 2, 5, &o_eval);
        cls_out_alloc(&o_one, &one);
        cls_fused(&one, 2, 5, &o_one);
        CHECK(!memcmp(o_eval.losses, o.losses, sizeof(float) * CN) &&
              !memcmp(o_eval.dw, dw0, sizeof(float) * CVP * CC),
              "fused classifier without dx, dw (evaluation): the same losses, dw untouched");
        CHECK(!memcmp(o_one.losses, o.losses, sizeof(float) * CN) &&
              !memcmp(o_one.dx, o.dx, sizeof(float) * CN * CC) &&
              !memcmp(o_one.dw, o.dw, sizeof(float) * CVP * CC),
              "fused classifier: dloss_scale 1 = dloss_scale 0 (unset), bit for bit");
        cls_out_free(&o);
        cls_out_free(&o_eval);
        cls_out_free(&o_one);
    }
    /* the automatic chunk: the most rows whose scratch fits the budget */
    {
        size_t budget = mg_classifier_scratch_bytes(5, CVP, MG_BF16) + 100;
        int64_t r = mg_classifier_chunk_rows(CN, CVP, MG_BF16, budget);
        mg_test_report(r == 5 && mg_classifier_chunk_rows(CN, CVP, MG_F32, (size_t)1 << 30) == CN &&
                       mg_classifier_chunk_rows(CN, CVP, MG_F32, 10) == 1,
                       "fused classifier: chunk rows = the most that fit (5 in a 5-row bf16 "
                       "budget, all 13 in 1 GiB, 1 in 10 bytes)", "%lld", (long long)r);
    }
    {
        mg_classifier c;
        mg_tensor xt = ops_dev(ctx, MG_F32, x, CN, CC), wt = ops_dev(ctx, MG_F32, w, CVP, CC);
        memset(&c, 0, sizeof c);
        c.x = &xt;
        c.w = &wt;
        c.vocab_size = CV;
        c.scratch = &c;
        OPS_EXPECT_FATAL("fused classifier rejects 0 rows per chunk", "chunk_rows 0",
                         mg_classifier_fused(ctx, &c));
    }
    free(x);
    free(w);
    free(dw0);
}

/* The fused AdamW's two learning-rate groups (Megatron's decoupled learning rate): a table of
   a group-0 and a group-1 piece with lr and lr2 updates each exactly as mg_adamw_step with its
   own rate (weight decay 0.1 scaled by that rate too), over 3 steps.                        */
static void test_adamw_lr_groups(mg_ctx *ctx) {
    enum { n = 37 };
    size_t mark = mg_arena_mark(ctx);
    float *init = ops_randn_array(3 * n, 1.0f), *want[2], *got;
    float *dev = ops_dev_f32(ctx, NULL, 7 * n);   /* params 2n, grad n, m 2n, v 2n */
    float *ref = ops_dev_f32(ctx, NULL, 3 * n);   /* param, m, v of the plain step */
    float *host = (float *)calloc(7 * n, sizeof(float));
    mg_adamw_piece table[2];
    mg_adamw_args args;
    mg_adamw_hparams hp = {0, 0.9f, 0.95f, 1e-8f, 0.1f, 0};
    int k, step, same = 1;
    memcpy(host, init, sizeof(float) * 3 * n);          /* two params, then the grad */
    mg_copy_to_device(ctx, dev, host, sizeof(float) * 7 * n);
    memset(table, 0, sizeof table);
    for (k = 0; k < 2; k++) {
        table[k].param = dev + k * n;
        table[k].grad = dev + 2 * n;
        table[k].m = dev + 3 * n + k * n;
        table[k].v = dev + 5 * n + k * n;
        table[k].n = n;
        table[k].wd_mult = 1.0f;
        table[k].lr_group = k;
    }
    mg_adamw_table_begin(table, 2);
    for (step = 1; step <= 3; step++) {
        for (k = 0; k < 2; k++) {   /* the reference: mg_adamw_step from the same state */
            mg_copy(ctx, ref, table[k].param, sizeof(float) * n);
            mg_copy(ctx, ref + n, table[k].m, sizeof(float) * n);
            mg_copy(ctx, ref + 2 * n, table[k].v, sizeof(float) * n);
            hp.lr = k ? 7e-4f : 3e-3f;
            hp.step = step;
            mg_adamw_step(ctx, ref, table[k].grad, ref + n, ref + 2 * n, n, &hp, 1.0f, NULL,
                          MG_F32);
            want[k] = ops_host_f32(ctx, ref, n);
        }
        memset(&args, 0, sizeof args);
        mg_adamw_args_set(&args, 3e-3f, step, 0.9f, 0.95f);
        mg_adamw_args_set_lr2(&args, 7e-4f, step, 0.9f);
        args.weight_decay = 0.1f;
        args.grad_scale = 1.0f;
        mg_adamw_multi(ctx, table, 2, 2 * n, 0.9f, 0.95f, 1e-8f, MG_F32, &args);
        for (k = 0; k < 2; k++) {
            got = ops_host_f32(ctx, table[k].param, n);
            same &= memcmp(got, want[k], sizeof(float) * n) == 0;
            free(got);
            free(want[k]);
        }
    }
    mg_test_report(same, "adamw multi: lr_group 1 takes lr2 (the decoupled rate), group 0 lr: "
                   "each piece bit for bit as mg_adamw_step at its rate", "3 steps");
    free(init);
    free(host);
    mg_arena_release(ctx, mark);
}

static void test_adamw(mg_ctx *ctx) {
    ops_ref r;
    size_t mark = mg_arena_mark(ctx);
    enum { n = 50 };
    const float *hp_ref;
    mg_adamw_hparams hp;
    float *param, *grad, *m, *v, *h;
    uint16_t *p16 = NULL, p16h[n], want16[n];
    int step, i;
    char nm[32], lbl[64];
    if (!ops_ref_load(&r, "adamw")) return;
    hp_ref = OPS_F32(&r, "hparams", 6);
    hp.lr = hp_ref[0]; hp.beta1 = hp_ref[1]; hp.beta2 = hp_ref[2]; hp.eps = hp_ref[3];
    hp.weight_decay = hp_ref[4];
    param = ops_dev_f32(ctx, OPS_F32(&r, "param0", n), n);
    grad = ops_dev_f32(ctx, NULL, n);
    m = ops_dev_f32(ctx, NULL, n);
    v = ops_dev_f32(ctx, NULL, n);
    p16 = (uint16_t *)mg_alloc(ctx, n * 2);
    for (step = 1; step <= 3; step++) {
        hp.step = step;
        snprintf(nm, sizeof nm, "grad%d", step);
        mg_copy_to_device(ctx, grad, OPS_F32(&r, nm, n), n * 4);
        mg_adamw_step(ctx, param, grad, m, v, n, &hp, hp_ref[5], p16, MG_BF16);
        snprintf(nm, sizeof nm, "param%d", step);
        snprintf(lbl, sizeof lbl, "adamw step %d param", step);
        h = ops_host_f32(ctx, param, n);
        ops_close_host(lbl, h, OPS_F32(&r, nm, n), n, TOL, FLOOR);
        for (i = 0; i < n; i++) want16[i] = mg_f32_to_bf16(h[i]);
        free(h);
        snprintf(nm, sizeof nm, "m%d", step);
        snprintf(lbl, sizeof lbl, "adamw step %d exp_avg", step);
        h = ops_host_f32(ctx, m, n);
        ops_close_host(lbl, h, OPS_F32(&r, nm, n), n, TOL, FLOOR);
        free(h);
        snprintf(nm, sizeof nm, "v%d", step);
        snprintf(lbl, sizeof lbl, "adamw step %d exp_avg_sq", step);
        h = ops_host_f32(ctx, v, n);
        ops_close_host(lbl, h, OPS_F32(&r, nm, n), n, TOL, FLOOR);
        free(h);
    }
    mg_copy_to_host(ctx, p16h, p16, sizeof p16h);
    CHECK(!memcmp(p16h, want16, sizeof p16h), "adamw bf16 working copy = rounded master weights");
    free(r.blob);
    mg_arena_release(ctx, mark);
}

/* The Llama family's ops (tests/data/ops_llama.bin): RMSNorm (eps 1e-6), SwiGLU, the rotary
   tables (default and Llama 3 scaling, as transformers computes them) and the rotation of
   a grouped qkv (6 of 8 dims, positions from t0 = 2), grouped-query attention (4 query heads
   in 2 groups).                                                                              */
enum { NQ = 4, G = 2, D = 8, ROT = 6, QKV_G = (NQ + 2 * G) * D };
static void test_llama_ops(mg_ctx *ctx) {
    ops_ref r;
    size_t mark = mg_arena_mark(ctx);
    mg_norm rms = {1, 1e-6f, 0}, ln = {0, 1e-5f, 0};
    mg_rope rope = {500000.0f, 0, 8.0f, 1.0f, 4.0f, 8, 0.0f};
    mg_tensor x, w, dout, out, dx, dw, gate, up, dgate, qkv, att, datt, dqkv;
    float *mean, *rstd, table[(T + 3) * (ROT / 2) * 2], *table_dev;
    if (!ops_ref_load(&r, "llama")) return;
    /* RMSNorm */
    x = ops_dev(ctx, MG_F32, OPS_F32(&r, "rms_inp", N * C), N, C);
    w = ops_dev(ctx, MG_F32, OPS_F32(&r, "rms_weight", C), 1, C);
    dout = ops_dev(ctx, MG_F32, OPS_F32(&r, "rms_dout", N * C), N, C);
    out = ops_dev(ctx, MG_F32, NULL, N, C);
    dx = ops_dev(ctx, MG_F32, NULL, N, C);
    dw = ops_dev(ctx, MG_F32, NULL, 1, C);
    w.ndim = dw.ndim = 1;
    w.shape[0] = dw.shape[0] = C;
    mean = ops_dev_f32(ctx, NULL, N);
    rstd = ops_dev_f32(ctx, NULL, N);
    mg_norm_forward(ctx, &rms, &out, mean, rstd, &x, &w, NULL);
    ops_close(ctx, "rmsnorm forward out", &out, OPS_F32(&r, "rms_out", N * C), TOL, FLOOR);
    ops_close_host("rmsnorm forward rstd", ops_host_f32(ctx, rstd, N),
                   OPS_F32(&r, "rms_rstd", N), N, TOL, FLOOR);
    mg_norm_backward(ctx, &rms, &dx, &dw, NULL, &dout, &x, &w, mean, rstd, 0);
    ops_close(ctx, "rmsnorm backward dinp", &dx, OPS_F32(&r, "rms_dinp", N * C), TOL, FLOOR);
    ops_close(ctx, "rmsnorm backward dweight", &dw, OPS_F32(&r, "rms_dweight", C), TOL, FLOOR);
    OPS_EXPECT_FATAL("layernorm needs its bias", "bias",
                     mg_norm_forward(ctx, &ln, &out, mean, rstd, &x, &w, NULL));
    {   /* zero-centred RMSNorm (--apply-layernorm-1p with --normalization RMSNorm) */
        mg_norm rms1p = {1, 1e-6f, 1};
        float wz[C];
        mg_tensor w1p, dw1p = ops_dev(ctx, MG_F32, NULL, 1, C);
        int i;
        for (i = 0; i < C; i++) wz[i] = OPS_F32(&r, "rms_weight", C)[i] - 1.0f;
        w1p = ops_dev(ctx, MG_F32, wz, 1, C);
        w1p.ndim = dw1p.ndim = 1;
        w1p.shape[0] = dw1p.shape[0] = C;
        mg_norm_forward(ctx, &rms1p, &out, mean, rstd, &x, &w1p, NULL);
        ops_close(ctx, "rmsnorm zero-centred (weight - 1 stored) forward", &out,
                  OPS_F32(&r, "rms_out", N * C), TOL, FLOOR);
        mg_norm_backward(ctx, &rms1p, &dx, &dw1p, NULL, &dout, &x, &w1p, mean, rstd, 0);
        ops_close(ctx, "rmsnorm zero-centred backward dinp", &dx, OPS_F32(&r, "rms_dinp", N * C),
                  TOL, FLOOR);
        ops_close(ctx, "rmsnorm zero-centred backward dweight", &dw1p,
                  OPS_F32(&r, "rms_dweight", C), TOL, FLOOR);
    }
    /* SwiGLU */
    gate = ops_dev(ctx, MG_F32, OPS_F32(&r, "sw_gate", N * 2 * C), N, 2 * C);
    up = ops_dev(ctx, MG_F32, OPS_F32(&r, "sw_up", N * 2 * C), N, 2 * C);
    dout = ops_dev(ctx, MG_F32, OPS_F32(&r, "sw_dout", N * 2 * C), N, 2 * C);
    out = ops_dev(ctx, MG_F32, NULL, N, 2 * C);
    dgate = ops_dev(ctx, MG_F32, NULL, N, 2 * C);
    mg_swiglu_forward(ctx, &out, &gate, &up);
    ops_close(ctx, "swiglu forward", &out, OPS_F32(&r, "sw_out", N * 2 * C), TOL, FLOOR);
    mg_swiglu_backward(ctx, &dgate, &dout, &dout, &gate, &up);   /* dup over dout: allowed */
    ops_close(ctx, "swiglu backward dgate", &dgate, OPS_F32(&r, "sw_dgate", N * 2 * C), TOL,
              FLOOR);
    ops_close(ctx, "swiglu backward dup (in place over dout)", &dout,
              OPS_F32(&r, "sw_dup", N * 2 * C), TOL, FLOOR);
    /* rotary tables: ours against transformers' fp32 values */
    mg_rope_table(table, T + 3, ROT, &rope);
    ops_close_host("rope table (theta 5e5)", table, OPS_F32(&r, "rope_table", -1),
                   (T + 3) * ROT, 1e-6, FLOOR);
    rope.llama3 = 1;
    mg_rope_table(table, T + 3, ROT, &rope);
    ops_close_host("rope table, llama3 scaling", table, OPS_F32(&r, "rope3_table", -1),
                   (T + 3) * ROT, 1e-6, FLOOR);
    table_dev = ops_dev_f32(ctx, OPS_F32(&r, "rope3_table", -1), (T + 3) * ROT);
    qkv = ops_dev(ctx, MG_F32, OPS_F32(&r, "rp_qkv", N * QKV_G), N, QKV_G);
    mg_rope_forward(ctx, &qkv, B, NQ, G, ROT, 2, table_dev);
    ops_close(ctx, "rope forward (partial, t0 = 2)", &qkv, OPS_F32(&r, "rp_out", N * QKV_G), TOL,
              FLOOR);
    dqkv = ops_dev(ctx, MG_F32, OPS_F32(&r, "rp_dout", N * QKV_G), N, QKV_G);
    mg_rope_backward(ctx, &dqkv, B, NQ, G, ROT, 2, table_dev);
    ops_close(ctx, "rope backward", &dqkv, OPS_F32(&r, "rp_dqkv", N * QKV_G), TOL, FLOOR);
    OPS_EXPECT_FATAL("rope rejects an odd rotary width", "rotary dims",
                     mg_rope_forward(ctx, &qkv, B, NQ, G, 5, 0, table_dev));
    /* grouped-query attention */
    qkv = ops_dev(ctx, MG_F32, OPS_F32(&r, "gq_qkv", N * QKV_G), N, QKV_G);
    dout = ops_dev(ctx, MG_F32, OPS_F32(&r, "gq_dout", N * NQ * D), N, NQ * D);
    out = ops_dev(ctx, MG_F32, NULL, N, NQ * D);
    att = ops_dev(ctx, MG_F32, NULL, B * NQ * T, T);
    datt = ops_dev(ctx, MG_F32, NULL, B * NQ * T, T);
    dqkv = ops_dev(ctx, MG_F32, NULL, N, QKV_G);
    mg_attention_forward_gqa(ctx, &out, &att, &qkv, B, T, NQ, G, NULL);
    ops_close(ctx, "gqa attention forward out", &out, OPS_F32(&r, "gq_out", N * NQ * D), TOL,
              FLOOR);
    ops_close(ctx, "gqa attention probabilities", &att, OPS_F32(&r, "gq_att", B * NQ * T * T),
              TOL, FLOOR);
    mg_attention_backward_gqa(ctx, &dqkv, &datt, &dout, &qkv, &att, B, T, NQ, G, NULL);
    ops_close(ctx, "gqa attention backward dqkv", &dqkv, OPS_F32(&r, "gq_dqkv", N * QKV_G), TOL,
              FLOOR);
    OPS_EXPECT_FATAL("gqa rejects groups not dividing the heads", "n_group = 3",
                     mg_attention_forward_gqa(ctx, &out, &att, &qkv, B, T, NQ, 3, NULL));
    free(r.blob);
    mg_arena_release(ctx, mark);
}

/* Calls a hurried program makes: each is refused with one line naming the op and argument. */
static void test_misuse(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    mg_tensor sq = ops_dev(ctx, MG_F32, NULL, 4, 4), w = ops_dev(ctx, MG_F32, NULL, 4, 4);
    mg_tensor out = ops_dev(ctx, MG_F32, NULL, 4, 4), big = ops_dev(ctx, MG_F32, NULL, 8, 4);
    mg_tensor half = mg_tensor_rows(&big, 2, 4), low = mg_tensor_rows(&big, 0, 4);
    /* a GEMM writing its own operand computed garbage (zeros) without a word */
    OPS_EXPECT_FATAL("linear rejects out aliasing inp", "mg_linear_forward: out overlaps inp",
                     mg_linear_forward(ctx, &sq, &sq, &w, NULL));
    OPS_EXPECT_FATAL("linear rejects out overlapping weight", "out overlaps weight",
                     mg_linear_forward(ctx, &w, &sq, &w, NULL));
    OPS_EXPECT_FATAL("linear backward input rejects dinp aliasing dout",
                     "mg_linear_backward_input: dinp overlaps dout",
                     mg_linear_backward_input(ctx, &sq, &sq, &w, 0));
    OPS_EXPECT_FATAL("linear backward weight rejects dweight aliasing inp",
                     "mg_linear_backward_weight: dweight overlaps inp",
                     mg_linear_backward_weight(ctx, &sq, NULL, &out, &sq));
    OPS_EXPECT_FATAL("linear+residual rejects resid overlapping out",
                     "mg_linear_forward_residual: out overlaps resid",
                     mg_linear_forward_residual(ctx, &half, &sq, &w, NULL, &low));
    /* a NULL tensor was read before any check (segfault) */
    OPS_EXPECT_FATAL("linear rejects a NULL weight", "mg_linear_forward: weight is NULL",
                     mg_linear_forward(ctx, &out, &sq, NULL, NULL));
    OPS_EXPECT_FATAL("linear backward weight rejects a NULL input",
                     "mg_linear_backward_weight: inp is NULL",
                     mg_linear_backward_weight(ctx, &w, NULL, &out, NULL));
    {   /* the same for the norms, the element-wise ops and cross-entropy's row arrays */
        float *rows = ops_dev_f32(ctx, NULL, 8);
        mg_tensor wv = mg_tensor_rows(&w, 0, 1);
        mg_norm rms = {1, 1e-6f, 0};
        OPS_EXPECT_FATAL("norm rejects a NULL input", "mg_norm_forward: inp is NULL",
                         mg_norm_forward(ctx, &rms, &out, rows, rows + 4, NULL, &wv, NULL));
        OPS_EXPECT_FATAL("norm rejects a NULL kind", "mg_norm_forward: kind is NULL",
                         mg_norm_forward(ctx, NULL, &out, rows, rows + 4, &sq, &wv, NULL));
        OPS_EXPECT_FATAL("add rejects a NULL output", "mg_add: out is NULL",
                         mg_add(ctx, NULL, &sq, &w));
        OPS_EXPECT_FATAL("add names a NULL operand", "mg_add: b is NULL (required)",
                         mg_add(ctx, &out, &sq, NULL));
        OPS_EXPECT_FATAL("xent max rejects a NULL rowmax",
                         "mg_xent_max: rowmax is NULL (required: 4 rows)",
                         mg_xent_max(ctx, NULL, &sq, 0, 4));
    }
    {   /* zero input features: mg_gemm's 'lda 0 too small (need >= 0)' contradicted itself */
        mg_tensor x0 = mg_tensor_2d(ctx, MG_F32, 4, 0), w0 = mg_tensor_2d(ctx, MG_F32, 4, 0);
        OPS_EXPECT_FATAL("linear rejects a weight of zero input features",
                         "mg_linear_forward: weight is [4, 0]: a linear layer needs at least one",
                         mg_linear_forward(ctx, &out, &x0, &w0, NULL));
        OPS_EXPECT_FATAL("gemm names the leading dimension BLAS needs", "need >= 1, 1, 4",
                         mg_gemm(ctx, 1, 0, 4, 4, 0, 1.0f, w0.data, MG_F32, 0, x0.data, MG_F32, 0,
                                 0.0f, out.data, MG_F32, 4));
    }
    /* a shape whose byte count overflows int64 was signed-overflow UB, then a bogus size */
    OPS_EXPECT_FATAL("tensor rejects a byte count beyond int64", "more bytes than an int64",
                     mg_tensor_wrap(NULL, MG_F32, 2, (const int64_t[]){(int64_t)1 << 40,
                                                                      (int64_t)1 << 40}));
    mg_arena_release(ctx, mark);
    {   /* a freed context said 'arena exhausted: 64 bytes requested, 0 of 0 in use' */
        mg_ctx gone = ops_ctx_make(1 << 20);
        mg_ctx_free(&gone);
        OPS_EXPECT_FATAL("alloc from a freed context names it",
                         "mg_alloc: the context is not initialised (mg_ctx_init) or was freed",
                         mg_alloc(&gone, 64));
    }
}

int main(void) {
    mg_ctx ctx = ops_ctx_make((size_t)64 << 20);
    printf("# device %s, %d threads\n", mg_device_name(&ctx), ctx.n_threads);
    test_embedding(&ctx);
    test_layernorm(&ctx);
    test_linear(&ctx);
    test_gelu(&ctx, MG_ACT_GELU);
    test_gelu(&ctx, MG_ACT_GELU_ERF);
    test_gelu(&ctx, MG_ACT_RELU2);
    test_linear_gelu(&ctx, MG_ACT_GELU);
    test_attention(&ctx);
    test_xent(&ctx);
    test_xent_ignored(&ctx);
    test_classifier_fused(&ctx);
    test_adamw(&ctx);
    test_adamw_lr_groups(&ctx);
    test_llama_ops(&ctx);
    test_misuse(&ctx);
    test_linear_gelu(&ctx, MG_ACT_GELU_ERF);   /* last: their random inputs leave the others' alone */
    test_linear_gelu(&ctx, MG_ACT_RELU2);
    mg_ctx_free(&ctx);
    return mg_test_summary();
}
