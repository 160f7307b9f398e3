// mg-test: ranks=1 timeout=300
/* test_llama.c — the Llama-family model of megatron.h (RMSNorm, rotary positions with Llama 3
   scaling, grouped-query attention with its own head dimension, SwiGLU, no biases, untied
   output layer) against PyTorch with Hugging Face's LlamaForCausalLM semantics
   (tests/oracle/llama.py writes tests/data/llama_*):
     - the logits of one sample, the loss of one global batch and the gradient of every
       parameter equal the reference (float64 from the same fp32 weights; ours fp32, <= 1e-5
       relative against max(|want|, RMS of the tensor)), for the batch as 2 microbatches of 2
       and through 2 model chunks;
     - 20 AdamW steps (warm-up + cosine, weight decay off on the norms, clipping) track
       torch.optim.AdamW: loss, gradient norm and learning rate of every step, and the final
       weights;
     - initialisation keeps the padding rows of the untied output layer at zero, and the
       parameter count equals the oracle's tensors.                                          */
#include "gpt_test_util.h"

/* One number from tests/data/llama_ref.json. */
static double ref_num(const char *key) { return gpt_json_num(LLAMA_REF, key); }

/* A named F32 tensor of llama_ref.safetensors (malloc'ed copy). */
static float *ref_tensor(const char *name, int64_t *n) {
    mg_st_file st;
    const mg_st_tensor *t;
    char err[MG_ERRLEN];
    float *out;
    int64_t k, count = 1;
    if (mg_st_open(GPT_DATA "llama_ref.safetensors", &st, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    t = mg_st_find(&st, name);
    if (!t) { fprintf(stderr, "llama_ref.safetensors: no %s\n", name); exit(1); }
    for (k = 0; k < t->ndim; k++) count *= t->shape[k];
    out = (float *)malloc((size_t)count * sizeof(float));
    memcpy(out, t->data, (size_t)count * sizeof(float));
    mg_st_close(&st);
    if (n) *n = count;
    return out;
}

/* Loss, logits and gradients of the oracle's first global batch. */
static void check_gradients(const char *label, int n_chunks, const int32_t *tokens) {
    mg_gpt_config cfg = gpt_llama_config();
    gpt_fixture f;
    char name[200];
    int B = (int)ref_num("micro_batch"), n_micro = (int)ref_num("global_batch") / B, t, worst = 0;
    double tokens_total = (double)B * n_micro * cfg.seq_len, loss, e;
    float got_loss, *want_loss = ref_tensor("loss", NULL), *grads, *want;
    gpt_fixture_make(&f, &cfg, B, n_micro, n_chunks);
    gpt_import(&f.m, GPT_DATA "llama_model.safetensors", 0);
    mg_gpt_zero_grad(&f.m);
    loss = mg_gpt_run_microbatches(&f.m, tokens, n_micro, (float)(1.0 / tokens_total), 1) /
           tokens_total;
    got_loss = (float)loss;
    snprintf(name, sizeof name, "llama: loss equals PyTorch's [%s]", label);
    mg_test_close(name, &got_loss, want_loss, 1, 1e-5, 0);
    grads = gpt_host(&f.m, f.m.grad_buf);
    gpt_import(&f.m, GPT_DATA "llama_grads.safetensors", 1);
    want = gpt_host(&f.m, f.m.grad_buf);
    e = gpt_all_err(&f.m, grads, want, &worst);
    snprintf(name, sizeof name, "llama: all %d gradients equal PyTorch's [%s]", f.m.n_params,
             label);
    mg_test_report(e <= 1e-5, name, "max rel err %.3g at %s", e, f.m.params[worst].name);
    if (n_chunks == 1) {   /* the logits of sample 0 (micro-batch 1's first sample is b = 0) */
        int64_t nl;
        float *want_logits = ref_tensor("logits0", &nl), *row, *got;
        mg_gpt_config c1 = cfg;
        gpt_fixture one;
        gpt_fixture_make(&one, &c1, 1, 1, 1);
        gpt_import(&one.m, GPT_DATA "llama_model.safetensors", 0);
        mg_gpt_run_microbatches(&one.m, tokens, 1, 0.0f, 0);
        got = (float *)malloc((size_t)nl * sizeof(float));
        row = got;
        for (t = 0; t < cfg.seq_len; t++, row += cfg.vocab_size)
            mg_gpt_logits_row(&one.m, 0, t, 0, row);
        /* each logit against max(|want|, RMS/10): 2 layers of fp32 (the sanitizer build's
           code generation measured 1.1e-5, the optimised one 2e-6) */
        mg_test_close("llama: logits of a sample equal PyTorch's", got, want_logits, nl, 3e-5,
                      ops_floor(want_logits, (long)nl));
        free(got);
        free(want_logits);
        gpt_fixture_free(&one);
    }
    free(grads);
    free(want);
    free(want_loss);
    gpt_fixture_free(&f);
}

/* 20 AdamW steps as the oracle ran them (the trainer's sequence: zero, microbatches, update
   at the schedule's learning rate after the successful updates so far). */
static void check_training(void) {
    mg_gpt_config cfg = gpt_llama_config();
    gpt_fixture f;
    mg_adamw opt;
    mg_lr_schedule sched;
    int B = (int)ref_num("micro_batch"), Bg = (int)ref_num("global_batch"), n_micro = Bg / B;
    int iters = (int)ref_num("train_iters"), T = cfg.seq_len, k, i, worst = 0;
    int64_t n;
    float *want_losses = ref_tensor("losses", &n), *want_norms = ref_tensor("grad_norms", NULL);
    float *want_lrs = ref_tensor("lrs", NULL), *got_losses, *got_norms, *got_lrs, *got, *want;
    int32_t *batch = (int32_t *)malloc(sizeof(int32_t) * (size_t)Bg * (size_t)(T + 1));
    long len = 0;
    uint16_t *stream = (uint16_t *)mg_test_read_file(GPT_DATA "llama_tokens.bin", &len);
    double e;
    memset(&sched, 0, sizeof sched);   /* fields a test does not set: 0 (init_lr, WSD, ...) */
    got_losses = (float *)malloc(sizeof(float) * (size_t)iters);
    got_norms = (float *)malloc(sizeof(float) * (size_t)iters);
    got_lrs = (float *)malloc(sizeof(float) * (size_t)iters);
    gpt_fixture_make(&f, &cfg, B, n_micro, 1);
    gpt_import(&f.m, GPT_DATA "llama_model.safetensors", 0);
    mg_adamw_create(&opt, &f.m, (float)ref_num("beta1"), (float)ref_num("beta2"),
                    (float)ref_num("eps"), (float)ref_num("weight_decay"));
    sched.max_lr = ref_num("lr");
    sched.min_lr = ref_num("min_lr");
    sched.warmup_iters = (int64_t)ref_num("warmup");
    sched.decay_iters = (int64_t)ref_num("decay_iters");
    sched.style = MG_LR_COSINE;
    for (k = 0; k < iters; k++) {
        double norm = 0;
        for (i = 0; i < Bg * (T + 1); i++) {   /* sample s of iteration k: tokens from (kBg+s)T */
            int s = i / (T + 1), j = i % (T + 1);
            batch[i] = stream[256 * 2 + (int64_t)(k * Bg + s) * T + j];
        }
        mg_gpt_zero_grad(&f.m);
        got_losses[k] = (float)(mg_gpt_run_microbatches(&f.m, batch, n_micro,
                                                        (float)(1.0 / ((double)Bg * T)), 1) /
                                ((double)Bg * T));
        got_lrs[k] = (float)mg_lr_at(&sched, opt.step);
        mg_adamw_update(&opt, &f.m, got_lrs[k], (float)ref_num("clip_grad"), &norm);
        got_norms[k] = (float)norm;
    }
    mg_test_close("llama: 20 AdamW steps, losses equal PyTorch's", got_losses, want_losses,
                  iters, 1e-5, 0);
    mg_test_close("llama: gradient norms equal PyTorch's", got_norms, want_norms, iters, 1e-5, 0);
    mg_test_close("llama: learning rates equal Megatron's schedule", got_lrs, want_lrs, iters,
                  1e-6, 0);
    got = gpt_host(&f.m, mg_gpt_fp32_params(&f.m));
    gpt_import(&f.m, GPT_DATA "llama_final.safetensors", 0);
    want = gpt_host(&f.m, mg_gpt_fp32_params(&f.m));
    e = gpt_all_err(&f.m, got, want, &worst);
    mg_test_report(e <= 1e-5, "llama: weights after 20 steps equal PyTorch's",
                   "max rel err %.3g at %s, tol 1e-5", e,
                   f.m.params[worst].name);
    free(got); free(want); free(batch); free(stream);
    free(got_losses); free(got_norms); free(got_lrs);
    free(want_losses); free(want_norms); free(want_lrs);
    gpt_fixture_free(&f);
}

/* Initialisation and size: the untied output layer's padding rows are zero, every tensor of
   the oracle is counted once. */
static void check_init(void) {
    mg_gpt_config cfg = gpt_llama_config();
    gpt_fixture f;
    float *w;
    int64_t r, c, C = cfg.hidden, zeros = 1, expect;
    int iout = -1, i;
    mg_layer_config lc = mg_gpt_layer_config(&cfg, 1, MG_F32);
    gpt_fixture_make(&f, &cfg, 1, 1, 1);
    mg_gpt_init_weights(&f.m, 7);
    w = gpt_host(&f.m, mg_gpt_fp32_params(&f.m));
    for (i = 0; i < f.m.n_params; i++)
        if (f.m.params[i].kind == MG_OUT_W) iout = i;
    CHECK(iout >= 0 && f.m.idx_global[MG_WPE - MG_LAYER_TENSORS] < 0,
          "llama: an output layer of its own, no position embedding");
    for (r = cfg.vocab_size; iout >= 0 && r < cfg.padded_vocab; r++)
        for (c = 0; c < C; c++) zeros &= w[f.m.params[iout].offset + r * C + c] == 0.0f;
    CHECK(zeros, "llama: the output layer's padding rows start at zero");
    /* embedding V·C (Vp rows), per layer two norms C + qkv (h+2g)·d·C + proj C·h·d + 3 MLP C·F,
       final norm, output layer */
    expect = (int64_t)cfg.padded_vocab * C * 2 + C +
             cfg.n_layer * (2 * C + (int64_t)(lc.n_head + 2 * lc.n_group) * lc.head_dim * C +
                            (int64_t)C * lc.n_head * lc.head_dim + 3 * (int64_t)C * lc.ffn_hidden);
    mg_test_report(mg_gpt_num_params(&cfg) == expect, "llama: mg_gpt_num_params counts every "
                   "tensor once", "%lld, expected %lld", (long long)mg_gpt_num_params(&cfg),
                   (long long)expect);
    free(w);
    gpt_fixture_free(&f);
}

int main(void) {
    int64_t n;
    float *tok_f;
    int32_t *tokens;
    mg_st_file st;
    char err[MG_ERRLEN];
    const mg_st_tensor *t;
    (void)tok_f;
    if (mg_st_open(GPT_DATA "llama_ref.safetensors", &st, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    t = mg_st_find(&st, "tokens");
    n = t->shape[0] * t->shape[1];
    tokens = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    memcpy(tokens, t->data, sizeof(int32_t) * (size_t)n);
    mg_st_close(&st);
    check_gradients("2 microbatches of 2", 1, tokens);
    check_gradients("2 model chunks", 2, tokens);
    check_training();
    check_init();
    free(tokens);
    return mg_test_summary();
}
