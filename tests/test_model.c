// mg-test: ranks=1 timeout=300
/* test_model.c — the GPT-2 model of megatron.h against PyTorch (tests/oracle/gpt.py writes the
   reference files in tests/data/gpt_*):
     - the same weights imported from the llm.c checkpoint and from the Hugging Face
       safetensors file are bit-identical and give identical per-token losses;
     - the loss of one global batch and the gradient of every parameter equal PyTorch's
       (the reference computed in float64 from the same fp32 weights; ours in fp32; <= 1e-5
       relative: |got - want| / max(|want|, RMS of the tensor)), for the batch run as
       2 microbatches of 2, as 1 microbatch of 4, and through 2 model chunks (the pipeline-
       stage interface on one rank); with the fused classifier in ragged chunks of rows, its
       backward run by the head's forward (the iteration's dloss announced) or re-run by the
       head's backward (forwards without it);
     - export to Hugging Face safetensors writes exactly the oracle's file contents, and
       export -> import is bit-exact;
     - initialisation: standard deviations, zero biases and padding rows, unit layernorms, and
       every tensor-parallel shard equal to the matching slice of the unsplit tensor.         */
#include "gpt_test_util.h"

/* Loss and gradients of the oracle's first global batch, the batch split n_micro ways; the
   classifier in chunks of chunk_rows rows (0: automatic). unannounced: the forwards run
   without m->head_dloss (mg_gpt_forward, then mg_gpt_backward: the backward re-runs the
   classifier) instead of mg_gpt_run_microbatches (the head's forward runs its backward).  */
static void check_gradients_of(const char *label, int B, int n_micro, int n_chunks,
                               int chunk_rows, int unannounced, const int32_t *tokens,
                               double want_loss, const float *want_grads) {
    mg_gpt_config cfg = gpt_ref_config();
    mg_gpt_layout L = mg_gpt_layout_single(&cfg, B, n_micro, n_chunks);
    gpt_fixture f;
    char name[200];
    double tokens_total = (double)B * n_micro * cfg.seq_len, loss, e;
    float got_loss, want_loss_f = (float)want_loss, dloss = (float)(1.0 / tokens_total);
    float *grads;
    int worst = 0, i, mb, ch;
    L.classifier_chunk_rows = chunk_rows;
    gpt_fixture_make_layout(&f, &cfg, &L);
    gpt_import(&f.m, GPT_DATA "gpt_model.bin", 0);
    mg_gpt_zero_grad(&f.m);
    if (!unannounced)
        loss = mg_gpt_run_microbatches(&f.m, tokens, n_micro, dloss, 1) / tokens_total;
    else {
        for (mb = 0, loss = 0; mb < n_micro; mb++) {
            for (ch = 0; ch < n_chunks; ch++) {
                mg_gpt_set_batch(&f.m, ch, 0, tokens + (size_t)mb * B * (cfg.seq_len + 1));
                if (ch > 0)
                    mg_copy(f.m.ctx, mg_gpt_chunk_input(&f.m, ch, 0)->data,
                            mg_gpt_chunk_output(&f.m, ch - 1, 0)->data,
                            mg_nbytes(mg_gpt_chunk_input(&f.m, ch, 0)));
                mg_gpt_forward(&f.m, ch, 0, mb);
            }
            for (ch = n_chunks - 1; ch >= 0; ch--) mg_gpt_backward(&f.m, ch, 0, dloss);
        }
        loss = mg_gpt_loss_sum(&f.m, 0, n_micro) / tokens_total;
    }
    got_loss = (float)loss;
    snprintf(name, sizeof name, "model: loss equals PyTorch's [%s]", label);
    mg_test_close(name, &got_loss, &want_loss_f, 1, 1e-5, 0);
    grads = gpt_host(&f.m, f.m.grad_buf);
    if (n_micro == 2 && n_chunks == 1 && !chunk_rows) {   /* the main case: a line per tensor */
        for (i = 0; i < f.m.n_params; i++) {
            snprintf(name, sizeof name, "model: gradient of %s equals PyTorch's [%s]",
                     f.m.params[i].name, label);
            e = gpt_param_err(&f.m.params[i], grads, want_grads);
            mg_test_report(e <= 1e-5, name, "max rel err %.3g, tol 1e-05", e);
        }
    } else {
        e = gpt_all_err(&f.m, grads, want_grads, &worst);
        snprintf(name, sizeof name, "model: every gradient equals PyTorch's [%s]", label);
        mg_test_report(e <= 1e-5, name, "max rel err %.3g at %s, tol 1e-05", e,
                       f.m.params[worst].name);
    }
    free(grads);
    gpt_fixture_free(&f);
}
static void check_gradients(const char *label, int B, int n_micro, int n_chunks,
                            const int32_t *tokens, double want_loss, const float *want_grads) {
    check_gradients_of(label, B, n_micro, n_chunks, 0, 0, tokens, want_loss, want_grads);
}

/* Per-token losses of a forward over the oracle batch (host copy). */
static float *forward_losses(mg_gpt *m, const int32_t *tokens) {
    int64_t N = (int64_t)m->layout.micro_batch * m->cfg.seq_len;
    float *out = (float *)malloc(sizeof(float) * (size_t)N);
    mg_gpt_run_microbatches(m, tokens, 1, 0.0f, 0);
    mg_copy_to_host(m->ctx, out, m->losses, sizeof(float) * (size_t)N);
    return out;
}

static void check_import_export(const int32_t *tokens) {
    mg_gpt_config cfg = gpt_ref_config();
    gpt_fixture a, b, c;
    float *pa, *pb, *pc, *la, *lb;
    char dir[256], path[400], err[MG_ERRLEN];
    int64_t N = 4 * (int64_t)cfg.seq_len;
    mg_st_file got, want;
    int i, same = 1;
    gpt_fixture_make(&a, &cfg, 4, 1, 1);
    gpt_fixture_make(&b, &cfg, 4, 1, 1);
    gpt_import(&a.m, GPT_DATA "gpt_model.bin", 0);
    gpt_import(&b.m, GPT_DATA "gpt_model.safetensors", 0);
    pa = gpt_host(&a.m, a.m.param_buf);
    pb = gpt_host(&b.m, b.m.param_buf);
    CHECK(!memcmp(pa, pb, sizeof(float) * (size_t)a.m.n_elems),
          "model: llm.c checkpoint and safetensors import to bit-identical weights");
    la = forward_losses(&a.m, tokens);
    lb = forward_losses(&b.m, tokens);
    CHECK(!memcmp(la, lb, sizeof(float) * (size_t)N),
          "model: llm.c checkpoint and safetensors give identical per-token losses");

    /* export, then compare with the oracle's file tensor by tensor, and import back */
    gpt_tmpdir(dir, sizeof dir, "export");
    if (mg_gpt_export_hf(&a.m, dir, err, sizeof err)) fprintf(stderr, "export: %s\n", err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (mg_st_open(path, &got, err, sizeof err) ||
        mg_st_open(GPT_DATA "gpt_model.safetensors", &want, err, sizeof err)) {
        mg_test_report(0, "model: export equals the Hugging Face file", "%s", err);
    } else {
        same = got.n_tensors == want.n_tensors;
        for (i = 0; same && i < want.n_tensors; i++) {
            const mg_st_tensor *w = &want.tensors[i], *g = mg_st_find(&got, w->name);
            same = g && g->ndim == w->ndim && g->shape[0] == w->shape[0] &&
                   g->shape[1] == w->shape[1] && g->nbytes == w->nbytes &&
                   !memcmp(g->data, w->data, w->nbytes);
            if (!same) fprintf(stderr, "export differs at %s\n", w->name);
        }
        CHECK(same, "model: export writes the oracle's Hugging Face tensors bit for bit");
        mg_st_close(&got);
        mg_st_close(&want);
    }
    gpt_fixture_make(&c, &cfg, 4, 1, 1);
    gpt_import(&c.m, dir, 0);                     /* a directory: model.safetensors + config */
    pc = gpt_host(&c.m, c.m.param_buf);
    CHECK(!memcmp(pa, pc, sizeof(float) * (size_t)a.m.n_elems),
          "model: export -> import is bit-exact");
    gpt_rmtree(dir);
    free(pa); free(pb); free(pc); free(la); free(lb);
    gpt_fixture_free(&a);
    gpt_fixture_free(&b);
    gpt_fixture_free(&c);
}

/* Initialisation statistics, and tensor-parallel shards made independently equal slices of the
   unsplit tensors (the counter-based generator is keyed by global element index). */
static void check_init(void) {
    mg_gpt_config cfg = gpt_ref_config(), cfg2;
    gpt_fixture f;
    float *p;
    int i, ok_zero = 1, ok_one = 1, ok_std = 1, ok_pad = 1, ok_shard = 1, r;
    cfg.n_layer = 4;
    cfg.hidden = 64;
    gpt_fixture_make(&f, &cfg, 1, 1, 1);
    mg_gpt_init_weights(&f.m, 42);
    p = gpt_host(&f.m, f.m.param_buf);
    for (i = 0; i < f.m.n_params; i++) {
        const mg_param_desc *d = &f.m.params[i];
        const float *x = p + d->offset;
        int64_t j, n = d->kind == MG_WTE ? (int64_t)cfg.vocab_size * cfg.hidden : d->numel;
        double s = 0, ss = 0, sd;
        for (j = 0; j < n; j++) { s += x[j]; ss += (double)x[j] * x[j]; }
        sd = sqrt(ss / n - (s / n) * (s / n));
        if (d->init == MG_INIT_ZERO && ss != 0) ok_zero = 0;
        if (d->init == MG_INIT_ONE && (s != n || ss != n)) ok_one = 0;
        /* sample std within 6 standard errors (+1%) of init_std, mean within 6 of 0 */
        if (d->init == MG_INIT_NORMAL && (fabs(sd / d->init_std - 1) > 6 / sqrt((double)n) + 0.01
                                          || fabs(s / n) > 6 * d->init_std / sqrt((double)n))) {
            ok_std = 0;
            fprintf(stderr, "%s: std %g (want %g), mean %g\n", d->name, sd, d->init_std, s / n);
        }
        if (d->kind == MG_WTE)
            for (j = n; j < d->numel; j++) if (x[j] != 0) ok_pad = 0;
        if (d->kind == MG_FC2_W && fabs(d->init_std - 0.02 / sqrt(2.0 * cfg.n_layer)) > 1e-9)
            ok_std = 0;
    }
    CHECK(ok_std, "model: init normal(0, 0.02), attention-out and MLP-down 0.02/sqrt(2 layers)");
    CHECK(ok_zero, "model: init biases zero");
    CHECK(ok_one, "model: init layernorm weights one");
    CHECK(ok_pad, "model: init padding rows of the vocabulary zero");
    /* tensor-parallel shards (t = 2, each rank alone): the slice of the unsplit tensor */
    cfg2 = cfg;
    cfg2.padded_vocab = mg_gpt_pad_vocab(cfg.vocab_size, 128, 2);
    for (r = 0; r < 2; r++) {
        mg_gpt_layout L = mg_gpt_layout_single(&cfg2, 1, 1, 1);
        mg_gpt sh;
        mg_ctx ctx;
        char err[MG_ERRLEN];
        float *q;
        L.tp_rank = r;
        L.tp_size = 2;
        ctx = gpt_ctx(mg_gpt_arena_bytes(&cfg2, &L) + (1u << 20));
        if (mg_gpt_create(&sh, &ctx, &cfg2, &L, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
        mg_gpt_init_weights(&sh, 42);
        q = gpt_host(&sh, sh.param_buf);
        for (i = 0; i < sh.n_params; i++) {
            const mg_param_desc *d = &sh.params[i];
            const mg_param_desc *u = &f.m.params[mg_gpt_find_param(&f.m, d->name)];
            int64_t rr, cc, gcols = d->ndim == 2 ? d->shape[1] : 1;
            if (d->numel * 2 != u->numel && d->split != MG_TP_REPLICATED && d->kind != MG_WTE)
                ok_shard = 0;                                 /* a split tensor: half each */
            for (rr = 0; rr < d->local_shape[0]; rr++)
                for (cc = 0; cc < d->local_shape[1]; cc++) {
                    int64_t grow = d->row0 + rr, gcol = d->col0 + cc;
                    float want = grow < u->shape[0] ? p[u->offset + grow * gcols + gcol] : 0.0f;
                    if (q[d->offset + rr * d->local_shape[1] + cc] != want) ok_shard = 0;
                }
        }
        free(q);
        mg_gpt_destroy(&sh);
        mg_ctx_free(&ctx);
    }
    CHECK(ok_shard, "model: tensor-parallel shards (t=2) equal slices of the unsplit init");
    free(p);
    gpt_fixture_free(&f);
}

int main(void) {
    int64_t n_tok = 0, n_loss = 0;
    float *tokens_f = gpt_ref_tensor(GPT_DATA "gpt_ref.safetensors", "tokens", &n_tok);
    float *loss = gpt_ref_tensor(GPT_DATA "gpt_ref.safetensors", "loss", &n_loss);
    int32_t *tokens = (int32_t *)tokens_f;        /* stored as I32 [4, T+1] */
    mg_gpt_config cfg = gpt_ref_config();
    gpt_fixture g;
    float *want_grads;
    /* the oracle's gradients, imported like weights into a model's gradient buffer */
    gpt_fixture_make(&g, &cfg, 2, 2, 1);
    gpt_import(&g.m, GPT_DATA "gpt_grads.safetensors", 1);
    want_grads = gpt_host(&g.m, g.m.grad_buf);
    gpt_fixture_free(&g);
    if (n_tok != 4 * (int64_t)(cfg.seq_len + 1)) {
        fprintf(stderr, "bad reference tokens\n");
        return 1;
    }

    check_gradients("2 microbatches of 2", 2, 2, 1, tokens, loss[0], want_grads);
    check_gradients("1 microbatch of 4", 4, 1, 1, tokens, loss[0], want_grads);
    check_gradients("4 microbatches of 1, 2 chunks", 1, 4, 2, tokens, loss[0], want_grads);
    check_gradients_of("2 microbatches of 2, classifier in chunks of 7 rows", 2, 2, 1, 7, 0,
                       tokens, loss[0], want_grads);
    check_gradients_of("2 microbatches of 2, the backward re-runs the classifier (chunks of 5)",
                       2, 2, 1, 5, 1, tokens, loss[0], want_grads);
    check_import_export(tokens);
    check_init();
    free(tokens_f);
    free(loss);
    free(want_grads);
    return mg_test_summary();
}
