// mg-test: ranks=1 timeout=180
/* test_ops_fd.c — every backward of mg_tensor.h against central finite differences of its
   own forward, in C. The scalar is L = Σ w·out with fixed random w (accumulated in double);
   the analytic gradient is the backward run with dout = w.
   Step and tolerance for fp32: h = 1e-2 on O(1) inputs gives a truncation error ~h²·f'''/6
   ≈ 2e-5 and a rounding error ~ε·|L|/h ≈ 1e-5 relative, so FD matches to ~1e-4; the check
   uses 3e-3 (relative to max(|g|, RMS(g)/10)) — a missing term or wrong factor in a backward
   gives errors of order 1e-1..1 and fails it.                                                */
#include "ops_util.h"

enum { T = 5, B = 2, C = 8, NH = 2, N = T * B };
#define FD_H 1e-2f
#define FD_TOL 3e-3

typedef struct fd_case {
    mg_ctx *ctx;
    float *in[3];     /* host inputs the forward reads (perturbed in place) */
    int64_t n_in[3];
    float *w;         /* weights of L = Σ w·out */
    int64_t n_out;
    double (*loss)(struct fd_case *);
    const int32_t *tokens;
    float p_drop;
} fd_case;

/* Σ w·out in double, out a device tensor. */
static double fd_dot(fd_case *c, const mg_tensor *out) {
    float *h = ops_host(c->ctx, out);
    double s = 0;
    int64_t i;
    for (i = 0; i < c->n_out; i++) s += (double)c->w[i] * h[i];
    free(h);
    return s;
}
/* Central differences of L over every element of input k, compared with grad. */
static void fd_check(fd_case *c, int k, const float *grad, const char *name) {
    int64_t i, n = c->n_in[k];
    float *fd = (float *)malloc((size_t)n * 4), *x = c->in[k];
    char label[96];
    for (i = 0; i < n; i++) {
        float x0 = x[i], xp = x0 + FD_H, xm = x0 - FD_H; /* the steps actually taken */
        double lp, lm;
        x[i] = xp;
        lp = c->loss(c);
        x[i] = xm;
        lm = c->loss(c);
        x[i] = x0;
        fd[i] = (float)((lp - lm) / ((double)xp - (double)xm));
    }
    snprintf(label, sizeof label, "finite differences: %s", name);
    ops_close_host(label, grad, fd, (long)n, FD_TOL, 1e-6);
    free(fd);
}

/* --- layernorm ------------------------------------------------------------------------------ */
static double loss_layernorm(fd_case *c) {
    size_t mark = mg_arena_mark(c->ctx);
    mg_tensor x = ops_dev(c->ctx, MG_F32, c->in[0], N, C), w = ops_dev(c->ctx, MG_F32, c->in[1], 1, C);
    mg_tensor b = ops_dev(c->ctx, MG_F32, c->in[2], 1, C), o = ops_dev(c->ctx, MG_F32, NULL, N, C);
    float *mean = ops_dev_f32(c->ctx, NULL, N), *rstd = ops_dev_f32(c->ctx, NULL, N);
    double l;
    mg_layernorm_forward(c->ctx, &o, mean, rstd, &x, &w, &b);
    l = fd_dot(c, &o);
    mg_arena_release(c->ctx, mark);
    return l;
}
static void test_layernorm(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    fd_case c = {ctx, {ops_randn_array(N * C, 1.5f), ops_randn_array(C, 1), ops_randn_array(C, 1)},
                 {N * C, C, C}, ops_randn_array(N * C, 1), N * C, loss_layernorm, NULL, 0};
    mg_tensor x = ops_dev(ctx, MG_F32, c.in[0], N, C), w = ops_dev(ctx, MG_F32, c.in[1], 1, C);
    mg_tensor b = ops_dev(ctx, MG_F32, c.in[2], 1, C), o = ops_dev(ctx, MG_F32, NULL, N, C);
    mg_tensor dout = ops_dev(ctx, MG_F32, c.w, N, C), dx = ops_dev(ctx, MG_F32, NULL, N, C);
    mg_tensor dw = ops_dev(ctx, MG_F32, NULL, 1, C), db = ops_dev(ctx, MG_F32, NULL, 1, C);
    float *mean = ops_dev_f32(ctx, NULL, N), *rstd = ops_dev_f32(ctx, NULL, N), *g;
    int k;
    mg_layernorm_forward(ctx, &o, mean, rstd, &x, &w, &b);
    mg_layernorm_backward(ctx, &dx, &dw, &db, &dout, &x, &w, mean, rstd, 0);
    g = ops_host(ctx, &dx); fd_check(&c, 0, g, "layernorm dinp"); free(g);
    g = ops_host(ctx, &dw); fd_check(&c, 1, g, "layernorm dweight"); free(g);
    g = ops_host(ctx, &db); fd_check(&c, 2, g, "layernorm dbias"); free(g);
    for (k = 0; k < 3; k++) free(c.in[k]);
    free(c.w);
    mg_arena_release(ctx, mark);
}

/* --- linear: inp [N, C] -> out [N, 3C] ------------------------------------------------------ */
static double loss_linear(fd_case *c) {
    size_t mark = mg_arena_mark(c->ctx);
    mg_tensor x = ops_dev(c->ctx, MG_F32, c->in[0], N, C), w = ops_dev(c->ctx, MG_F32, c->in[1], 3 * C, C);
    mg_tensor b = ops_dev(c->ctx, MG_F32, c->in[2], 1, 3 * C), o = ops_dev(c->ctx, MG_F32, NULL, N, 3 * C);
    double l;
    mg_linear_forward(c->ctx, &o, &x, &w, &b);
    l = fd_dot(c, &o);
    mg_arena_release(c->ctx, mark);
    return l;
}
static void test_linear(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    fd_case c = {ctx, {ops_randn_array(N * C, 1), ops_randn_array(3 * C * C, 0.5f), ops_randn_array(3 * C, 1)},
                 {N * C, 3 * C * C, 3 * C}, ops_randn_array(N * 3 * C, 1), N * 3 * C, loss_linear, NULL, 0};
    mg_tensor x = ops_dev(ctx, MG_F32, c.in[0], N, C), w = ops_dev(ctx, MG_F32, c.in[1], 3 * C, C);
    mg_tensor dout = ops_dev(ctx, MG_F32, c.w, N, 3 * C), dx = ops_dev(ctx, MG_F32, NULL, N, C);
    mg_tensor dw = ops_dev(ctx, MG_F32, NULL, 3 * C, C), db = ops_dev(ctx, MG_F32, NULL, 1, 3 * C);
    float *g;
    int k;
    mg_linear_backward_input(ctx, &dx, &dout, &w, 0);
    mg_linear_backward_weight(ctx, &dw, &db, &dout, &x);
    g = ops_host(ctx, &dx); fd_check(&c, 0, g, "linear dinp"); free(g);
    g = ops_host(ctx, &dw); fd_check(&c, 1, g, "linear dweight"); free(g);
    g = ops_host(ctx, &db); fd_check(&c, 2, g, "linear dbias"); free(g);
    for (k = 0; k < 3; k++) free(c.in[k]);
    free(c.w);
    mg_arena_release(ctx, mark);
}

/* --- gelu ------------------------------------------------------------------------------------ */
static double loss_gelu(fd_case *c) {
    size_t mark = mg_arena_mark(c->ctx);
    mg_tensor x = ops_dev(c->ctx, MG_F32, c->in[0], N, C), o = ops_dev(c->ctx, MG_F32, NULL, N, C);
    double l;
    mg_gelu_forward(c->ctx, &o, &x);
    l = fd_dot(c, &o);
    mg_arena_release(c->ctx, mark);
    return l;
}
static void test_gelu(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    fd_case c = {ctx, {ops_randn_array(N * C, 2), NULL, NULL}, {N * C, 0, 0},
                 ops_randn_array(N * C, 1), N * C, loss_gelu, NULL, 0};
    mg_tensor x = ops_dev(ctx, MG_F32, c.in[0], N, C), dout = ops_dev(ctx, MG_F32, c.w, N, C);
    float *g;
    mg_gelu_backward(ctx, &dout, &x, &dout);
    g = ops_host(ctx, &dout); fd_check(&c, 0, g, "gelu dinp"); free(g);
    free(c.in[0]);
    free(c.w);
    mg_arena_release(ctx, mark);
}

/* --- attention (without and with dropout: the mask is a fixed function of the key) --------- */
static double loss_attention(fd_case *c) {
    size_t mark = mg_arena_mark(c->ctx);
    mg_attn_dropout d = {c->p_drop, 77, 1, NH + 1}; /* local heads are global heads 1..NH */
    mg_tensor q = ops_dev(c->ctx, MG_F32, c->in[0], N, 3 * C), o = ops_dev(c->ctx, MG_F32, NULL, N, C);
    mg_tensor a = ops_dev(c->ctx, MG_F32, NULL, B * NH * T, T);
    double l;
    mg_attention_forward(c->ctx, &o, &a, &q, B, T, NH, &d);
    l = fd_dot(c, &o);
    mg_arena_release(c->ctx, mark);
    return l;
}
static void test_attention(mg_ctx *ctx, float p) {
    size_t mark = mg_arena_mark(ctx);
    fd_case c = {ctx, {ops_randn_array(N * 3 * C, 1), NULL, NULL}, {N * 3 * C, 0, 0},
                 ops_randn_array(N * C, 1), N * C, loss_attention, NULL, p};
    mg_attn_dropout d = {p, 77, 1, NH + 1};
    mg_tensor q = ops_dev(ctx, MG_F32, c.in[0], N, 3 * C), o = ops_dev(ctx, MG_F32, NULL, N, C);
    mg_tensor a = ops_dev(ctx, MG_F32, NULL, B * NH * T, T), da = ops_dev(ctx, MG_F32, NULL, B * NH * T, T);
    mg_tensor dout = ops_dev(ctx, MG_F32, c.w, N, C), dq = ops_dev(ctx, MG_F32, NULL, N, 3 * C);
    float *g;
    mg_attention_forward(ctx, &o, &a, &q, B, T, NH, &d);
    mg_attention_backward(ctx, &dq, &da, &dout, &q, &a, B, T, NH, &d);
    g = ops_host(ctx, &dq);
    fd_check(&c, 0, g, p > 0 ? "attention dqkv with dropout 0.2" : "attention dqkv");
    free(g);
    free(c.in[0]);
    free(c.w);
    mg_arena_release(ctx, mark);
}

/* --- cross-entropy over a padded slice: L = dloss·Σ losses ---------------------------------- */
enum { XV = 11, XVP = 13 };
static double loss_xent(fd_case *c) {
    size_t mark = mg_arena_mark(c->ctx);
    mg_tensor l = ops_dev(c->ctx, MG_F32, c->in[0], N, XVP);
    float *mx = ops_dev_f32(c->ctx, NULL, N), *se = ops_dev_f32(c->ctx, NULL, N);
    float *tl = ops_dev_f32(c->ctx, NULL, N), *loss = ops_dev_f32(c->ctx, NULL, N), *h;
    int32_t *tg = ops_dev_i32(c->ctx, c->tokens, N);
    double s = 0;
    int i;
    mg_xent_max(c->ctx, mx, &l, 0, XV);
    mg_xent_sumexp(c->ctx, se, tl, &l, tg, mx, 0, XV);
    mg_xent_loss(c->ctx, loss, mx, se, tl, N);
    h = ops_host_f32(c->ctx, loss, N);
    for (i = 0; i < N; i++) s += 0.37 * h[i];
    free(h);
    mg_arena_release(c->ctx, mark);
    return s;
}
static void test_xent(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    int32_t tg[N];
    int i;
    fd_case c = {ctx, {ops_randn_array(N * XVP, 2), NULL, NULL}, {N * XVP, 0, 0}, NULL, 0,
                 loss_xent, tg, 0};
    mg_tensor l, dl;
    float *mx = ops_dev_f32(ctx, NULL, N), *se = ops_dev_f32(ctx, NULL, N), *tl = ops_dev_f32(ctx, NULL, N), *g;
    int32_t *tgd;
    for (i = 0; i < N; i++) tg[i] = (i * 7) % XV;
    tgd = ops_dev_i32(ctx, tg, N);
    l = ops_dev(ctx, MG_F32, c.in[0], N, XVP);
    dl = ops_dev(ctx, MG_F32, NULL, N, XVP);
    mg_xent_max(ctx, mx, &l, 0, XV);
    mg_xent_sumexp(ctx, se, tl, &l, tgd, mx, 0, XV);
    mg_xent_backward(ctx, &dl, &l, tgd, mx, se, 0.37f, 0, XV);
    g = ops_host(ctx, &dl);
    fd_check(&c, 0, g, "cross-entropy dlogits (padding gradient 0)");
    free(g);
    free(c.in[0]);
    mg_arena_release(ctx, mark);
}

/* --- embedding (linear in its parameters) ---------------------------------------------------- */
enum { EV = 9 };
static double loss_embedding(fd_case *c) {
    size_t mark = mg_arena_mark(c->ctx);
    mg_tensor wte = ops_dev(c->ctx, MG_F32, c->in[0], EV, C), wpe = ops_dev(c->ctx, MG_F32, c->in[1], T, C);
    mg_tensor o = ops_dev(c->ctx, MG_F32, NULL, N, C);
    int32_t *tok = ops_dev_i32(c->ctx, c->tokens, N);
    double l;
    mg_embedding_forward(c->ctx, &o, tok, B, T, 0, &wte, 0, &wpe);
    l = fd_dot(c, &o);
    mg_arena_release(c->ctx, mark);
    return l;
}
static void test_embedding(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    int32_t tok[N] = {1, 4, 4, 0, 8, 2, 2, 2, 7, 1};
    fd_case c = {ctx, {ops_randn_array(EV * C, 1), ops_randn_array(T * C, 1), NULL}, {EV * C, T * C, 0},
                 ops_randn_array(N * C, 1), N * C, loss_embedding, tok, 0};
    mg_tensor dwte = ops_dev(ctx, MG_F32, NULL, EV, C), dwpe = ops_dev(ctx, MG_F32, NULL, T, C);
    mg_tensor dout = ops_dev(ctx, MG_F32, c.w, N, C);
    int32_t *tokd = ops_dev_i32(ctx, tok, N);
    float *g;
    mg_embedding_backward(ctx, &dwte, &dwpe, &dout, tokd, B, T, 0, 0);
    g = ops_host(ctx, &dwte); fd_check(&c, 0, g, "embedding dwte (repeated tokens)"); free(g);
    g = ops_host(ctx, &dwpe); fd_check(&c, 1, g, "embedding dwpe"); free(g);
    free(c.in[0]); free(c.in[1]); free(c.w);
    mg_arena_release(ctx, mark);
}

int main(void) {
    mg_ctx ctx = ops_ctx_make((size_t)16 << 20);
    test_layernorm(&ctx);
    test_linear(&ctx);
    test_gelu(&ctx);
    test_attention(&ctx, 0.0f);
    test_attention(&ctx, 0.2f);
    test_xent(&ctx);
    test_embedding(&ctx);
    mg_ctx_free(&ctx);
    return mg_test_summary();
}
