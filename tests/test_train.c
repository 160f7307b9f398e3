// mg-test: ranks=1 timeout=300
/* test_train.c — the trainer of megatron.h (one rank):
     - 50 AdamW steps (gradient accumulation 2 x 2, warm-up + cosine decay, weight decay off on
       biases and layernorms, global-norm clipping) track PyTorch's torch.optim.AdamW run of
       tests/oracle/gpt.py: loss, gradient norm and learning rate of every step to <= 1e-5
       relative; the final weights too (all but the key bias, whose gradient is exactly zero:
       see gpt_mask_key_bias);
     - the loss mask (--eod-mask-loss): the same 50 steps track the oracle's masked runs, each
       microbatch's loss the mean over its kept positions, and with --calculate-per-token-loss
       the mean over the global batch's (the two differ: the test tells them apart);
     - Megatron's learning-rate schedule (constant / linear / cosine, warm-up) from its formulas;
     - save at iteration k, resume, continue: losses and weights bit-identical to the
       uninterrupted run; resuming with another micro-batch size gives the same run to fp32
       rounding (checkpoints are layout-independent);
     - a save that fails half-way (file size limit in a child process) leaves the previous
       checkpoint whole and latest_checkpointed_iteration.txt unchanged;
     - the log: Megatron's line and one JSON object per logged iteration with the documented
       keys; validation on the --split held-out part.                                       */
#include "gpt_test_util.h"
#include <signal.h>
#include <sys/resource.h>

/* The oracle's run, as flags. */
static void oracle_line(char *out, size_t cap, const char *extra) {
    snprintf(out, cap, "--init-from " GPT_DATA "gpt_model.bin --data-path " GPT_DATA
             "gpt_tokens.bin --data-order sequential --split 1,0,0 --seq-length %d "
             "--micro-batch-size %d --global-batch-size %d --train-iters %d --lr %.17g "
             "--min-lr %.17g --lr-warmup-iters %d --lr-decay-iters %d --lr-decay-style cosine "
             "--weight-decay %.17g --adam-beta1 %.17g --adam-beta2 %.17g --adam-eps %.17g "
             "--clip-grad %.17g --eval-iters 0 %s", (int)gpt_ref_num("seq_len"),
             (int)gpt_ref_num("micro_batch"), (int)gpt_ref_num("global_batch"),
             (int)gpt_ref_num("train_iters"), gpt_ref_num("lr"), gpt_ref_num("min_lr"),
             (int)gpt_ref_num("warmup"), (int)gpt_ref_num("decay_iters"),
             gpt_ref_num("weight_decay"), gpt_ref_num("beta1"), gpt_ref_num("beta2"),
             gpt_ref_num("eps"), gpt_ref_num("clip_grad"), extra);
}

static void check_against_pytorch(void) {
    char line[2048];
    mg_trainer tr;
    int64_t n = 0, k;
    float *want_loss = gpt_ref_tensor(GPT_DATA "gpt_ref.safetensors", "losses", &n);
    float *want_norm = gpt_ref_tensor(GPT_DATA "gpt_ref.safetensors", "grad_norms", NULL);
    float *want_lr = gpt_ref_tensor(GPT_DATA "gpt_ref.safetensors", "lrs", NULL);
    float *loss = (float *)calloc((size_t)n, sizeof(float));
    float *norm = (float *)calloc((size_t)n, sizeof(float));
    float *lr = (float *)calloc((size_t)n, sizeof(float));
    float *final_got, *final_want;
    gpt_fixture ref;
    int worst = 0;
    double e;
    oracle_line(line, sizeof line, "");
    gpt_trainer_from_line(&tr, line);
    for (k = 0; k < n && tr.iteration < tr.args.train_iters; k++) {
        mg_step_result r = mg_trainer_step(&tr);
        loss[k] = (float)r.loss;
        norm[k] = (float)r.grad_norm;
        lr[k] = (float)r.lr;
    }
    CHECK(k == n && n == 50, "train: the run has the oracle's 50 iterations");
    mg_test_close("train: 50 losses track PyTorch AdamW", loss, want_loss, n, 1e-5, 0);
    mg_test_close("train: 50 gradient norms (before clipping) track PyTorch", norm, want_norm, n,
                  1e-5, 0);
    mg_test_close("train: learning rate of each step = Megatron's schedule (oracle)", lr, want_lr,
                  n, 1e-6, 1e-12);
    CHECK(loss[n - 1] < loss[0] - 0.3, "train: the loss falls");
    /* final weights */
    gpt_fixture_make(&ref, &tr.cfg, 1, 1, 1);
    gpt_import(&ref.m, GPT_DATA "gpt_final.safetensors", 0);
    final_want = gpt_host(&ref.m, ref.m.param_buf);
    final_got = gpt_host(&tr.model, tr.model.param_buf);
    gpt_mask_key_bias(&tr.model, final_want);   /* zero gradient: Adam-amplified noise */
    gpt_mask_key_bias(&tr.model, final_got);
    e = gpt_all_err(&tr.model, final_got, final_want, &worst);
    mg_test_report(e <= 1e-5, "train: weights after 50 steps equal PyTorch's (but the key bias)",
                   "max rel err %.3g at %s, tol 1e-05", e, tr.model.params[worst].name);
    free(final_got);
    free(final_want);
    gpt_fixture_free(&ref);
    mg_trainer_free(&tr);
    free(want_loss); free(want_norm); free(want_lr); free(loss); free(norm); free(lr);
}

/* The loss mask: --eod-mask-loss with the oracle's end-of-document id, without and with
   --calculate-per-token-loss, against tests/oracle/gpt.py's masked runs. */
static void check_eod_mask(void) {
    int per_token;
    for (per_token = 0; per_token < 2; per_token++) {
        char line[2048], extra[96], name[160];
        mg_trainer tr;
        int64_t n = 0, k;
        float *want_loss = gpt_ref_tensor(GPT_DATA "gpt_ref_eod.safetensors",
                                          per_token ? "pt_losses" : "losses", &n);
        float *want_norm = gpt_ref_tensor(GPT_DATA "gpt_ref_eod.safetensors",
                                          per_token ? "pt_grad_norms" : "grad_norms", NULL);
        float *loss = (float *)calloc((size_t)n, sizeof(float));
        float *norm = (float *)calloc((size_t)n, sizeof(float));
        const char *how = per_token ? " --calculate-per-token-loss" : "";
        snprintf(extra, sizeof extra, "--eod-mask-loss --eod-token-id %d%s",
                 (int)gpt_ref_num("eod_id"), how);
        oracle_line(line, sizeof line, extra);
        gpt_trainer_from_line(&tr, line);
        for (k = 0; k < n && tr.iteration < tr.args.train_iters; k++) {
            mg_step_result r = mg_trainer_step(&tr);
            loss[k] = (float)r.loss;
            norm[k] = (float)r.grad_norm;
        }
        snprintf(name, sizeof name, "train: --eod-mask-loss%s: 50 losses track PyTorch's "
                 "masked run", how);
        mg_test_close(name, loss, want_loss, n, 1e-5, 0);
        snprintf(name, sizeof name, "train: --eod-mask-loss%s: 50 gradient norms track "
                 "PyTorch's", how);
        mg_test_close(name, norm, want_norm, n, 1e-5, 0);
        mg_trainer_free(&tr);
        free(want_loss); free(want_norm); free(loss); free(norm);
    }
}

static void check_lr_schedule(void) {
    mg_lr_schedule s;
    int ok = 1;
    double pi = 3.14159265358979323846;
    memset(&s, 0, sizeof s);   /* fields a test does not set: 0 (init_lr, WSD, ...) */
    s.max_lr = 1.0; s.min_lr = 0.1; s.warmup_iters = 10; s.decay_iters = 110;
    s.style = MG_LR_COSINE;
    ok &= mg_lr_at(&s, 0) == 0.0;                              /* warm-up starts at 0   */
    ok &= fabs(mg_lr_at(&s, 5) - 0.5) < 1e-15;                 /* linear warm-up         */
    ok &= fabs(mg_lr_at(&s, 10) - 1.0) < 1e-15;
    ok &= fabs(mg_lr_at(&s, 60) - 0.55) < 1e-12;               /* half-way: (max+min)/2 */
    ok &= fabs(mg_lr_at(&s, 35) - (0.1 + 0.9 * 0.5 * (cos(pi * 0.25) + 1))) < 1e-12;
    ok &= mg_lr_at(&s, 110) == 0.1 && mg_lr_at(&s, 500) == 0.1; /* then min_lr          */
    CHECK(ok, "train: cosine schedule with warm-up (Megatron's formula)");
    ok = 1;
    s.style = MG_LR_LINEAR;
    ok &= fabs(mg_lr_at(&s, 60) - 0.55) < 1e-12;
    ok &= fabs(mg_lr_at(&s, 35) - (0.1 + 0.9 * 0.75)) < 1e-12;
    ok &= mg_lr_at(&s, 111) == 0.1;
    CHECK(ok, "train: linear schedule");
    s.style = MG_LR_CONSTANT;
    CHECK(mg_lr_at(&s, 3) == 0.3 && mg_lr_at(&s, 1000) == 1.0, "train: constant schedule");
}

/* Runs the trainer from `line` for iterations up to `until`, recording losses by iteration. */
static void run_until(mg_trainer *tr, int64_t until, double *loss_by_iter) {
    while (tr->iteration < until) {
        mg_step_result r = mg_trainer_step(tr);
        loss_by_iter[tr->iteration] = r.loss;
    }
}

static void check_resume(void) {
    char dir[256], line[2048], extra[512], err[MG_ERRLEN];
    double full[13], resumed[13], other_mb[13];
    mg_trainer a, b, c;
    float *wa, *wb, *wc;
    int k, same = 1, ok;
    gpt_tmpdir(dir, sizeof dir, "resume");
    /* uninterrupted: 12 iterations, a checkpoint at 5 */
    snprintf(extra, sizeof extra, "--train-iters 12 --save %s", dir);
    oracle_line(line, sizeof line, extra);
    gpt_trainer_from_line(&a, line);
    run_until(&a, 5, full);
    ok = !mg_trainer_save(&a, dir, err, sizeof err);
    mg_test_report(ok, "train: checkpoint saved", "%s", ok ? "" : err);
    run_until(&a, 12, full);
    /* resumed from iteration 5 */
    snprintf(extra, sizeof extra, "--train-iters 12 --load %s", dir);
    oracle_line(line, sizeof line, extra);
    gpt_trainer_from_line(&b, line);
    CHECK(b.iteration == 5 && b.consumed_samples == 5 * b.args.global_batch_size &&
          b.opt.step == 5, "train: resume restores iteration, consumed samples, Adam step");
    run_until(&b, 12, resumed);
    for (k = 6; k <= 12; k++) same &= full[k] == resumed[k];
    CHECK(same, "train: resumed losses of iterations 6..12 bit-identical to the uninterrupted run");
    wa = gpt_host(&a.model, a.model.param_buf);
    wb = gpt_host(&b.model, b.model.param_buf);
    CHECK(!memcmp(wa, wb, sizeof(float) * (size_t)a.model.n_elems),
          "train: resumed weights bit-identical to the uninterrupted run");
    /* resumed with micro-batch 1 (4 microbatches): the same run, to fp32 rounding */
    snprintf(extra, sizeof extra, "--train-iters 12 --load %s --micro-batch-size 1", dir);
    oracle_line(line, sizeof line, extra);
    gpt_trainer_from_line(&c, line);
    run_until(&c, 12, other_mb);
    for (k = 6; k <= 12; k++) resumed[k] = fabs(other_mb[k] - full[k]) / full[k];
    same = 1;
    for (k = 6; k <= 12; k++) same &= resumed[k] <= 1e-5;
    wc = gpt_host(&c.model, c.model.param_buf);
    gpt_mask_key_bias(&c.model, wc);
    gpt_mask_key_bias(&a.model, wa);
    mg_test_report(same && gpt_all_err(&c.model, wc, wa, NULL) <= 1e-5,
                   "train: resume under micro-batch 1 instead of 2 gives the same run",
                   "losses and weights (but the key bias) max rel err %.3g",
                   gpt_all_err(&c.model, wc, wa, NULL));
    free(wa); free(wb); free(wc);
    mg_trainer_free(&a);
    mg_trainer_free(&b);
    mg_trainer_free(&c);
    gpt_rmtree(dir);
}

/* A save that fails in the middle (the file size limit hits inside the second checkpoint's
   model file) must leave the first checkpoint whole and the pointer to it unchanged. */
static void check_failed_save(void) {
    char dir[256], line[2048], extra[512], err[MG_ERRLEN], path[512], cmd[600];
    mg_trainer a, b;
    double losses[8];
    char *latest;
    FILE *ls;
    char listing[512] = {0};
    gpt_tmpdir(dir, sizeof dir, "crash");
    snprintf(extra, sizeof extra, "--train-iters 6 --save %s", dir);
    oracle_line(line, sizeof line, extra);
    gpt_trainer_from_line(&a, line);
    run_until(&a, 3, losses);
    if (mg_trainer_save(&a, dir, err, sizeof err)) fprintf(stderr, "save: %s\n", err);
    run_until(&a, 4, losses);
    {   /* the limit is set in this process for the save only, not in a forked child: a child
           cannot use the parent's CUDA context (cudaErrorInitializationError). Only the soft
           limit is lowered, so the old one comes back; stdout is flushed first so that
           nothing but the save writes a file meanwhile. */
        struct rlimit old, rl;
        void (*prev)(int);
        int failed;
        getrlimit(RLIMIT_FSIZE, &old);
        rl = old;
        rl.rlim_cur = 40000;               /* bytes: inside model.safetensors (~120 kB) */
        fflush(stdout);
        fflush(stderr);
        prev = signal(SIGXFSZ, SIG_IGN);   /* writes past the limit fail with EFBIG */
        setrlimit(RLIMIT_FSIZE, &rl);
        failed = mg_trainer_save(&a, dir, err, sizeof err) != 0;
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, prev);
        CHECK(failed, "train: a save cut off by a full disk reports failure");
    }
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    latest = gpt_read_text(path);
    CHECK(latest && atoi(latest) == 3, "train: after the failed save, latest still "
          "names the previous checkpoint");
    free(latest);
    snprintf(cmd, sizeof cmd, "ls %s", dir);
    ls = popen(cmd, "r");
    if (!ls || fread(listing, 1, sizeof listing - 1, ls) == 0) listing[0] = 0;
    if (ls) pclose(ls);
    CHECK(strstr(listing, "iter_0000003") && !strstr(listing, "iter_0000004"),
          "train: no checkpoint of the failed save appears under its final name");
    snprintf(extra, sizeof extra, "--train-iters 6 --load %s", dir);
    oracle_line(line, sizeof line, extra);
    gpt_trainer_from_line(&b, line);
    CHECK(b.iteration == 3, "train: the previous checkpoint still loads");
    mg_trainer_free(&a);
    mg_trainer_free(&b);
    gpt_rmtree(dir);
}

/* The log line and the JSONL file of a short run with --log-interval 2. */
static void check_logging(void) {
    char dir[256], line[2048], extra[512], path[400], logtext[4096] = {0};
    mg_trainer tr;
    double loss[5];
    FILE *out = tmpfile();
    char *text, *p;
    int n_lines = 0, keys_ok = 1, iters_ok = 1, loss_ok = 1;
    gpt_tmpdir(dir, sizeof dir, "log");
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    snprintf(extra, sizeof extra, "--train-iters 4 --log-interval 2 --log-jsonl %s", path);
    oracle_line(line, sizeof line, extra);
    gpt_trainer_from_line(&tr, line);
    while (tr.iteration < 4) {
        mg_step_result r = mg_trainer_step(&tr);
        loss[tr.iteration] = r.loss;
        mg_trainer_log(&tr, &r, out);
    }
    mg_trainer_free(&tr);                   /* closes the JSONL file */
    rewind(out);
    if (fread(logtext, 1, sizeof logtext - 1, out) == 0) logtext[0] = 0;
    fclose(out);
    CHECK(strstr(logtext, "iteration        2/       4 | consumed samples:            8 |") &&
          strstr(logtext, "elapsed time per iteration (ms):") &&
          strstr(logtext, "throughput per GPU (TFLOP/s/GPU):") &&
          strstr(logtext, "tokens per second:") && strstr(logtext, "learning rate:") &&
          strstr(logtext, "global batch size:     4 |") && strstr(logtext, "lm loss:") &&
          strstr(logtext, "grad norm:") && strstr(logtext, "number of skipped iterations:   0 |")
          && strstr(logtext, "number of nan iterations:   0 |"),
          "train: the log line has Megatron's fields");
    text = gpt_read_text(path);
    for (p = text; p && *p; n_lines++) {
        char *nl = strchr(p, '\n'), err[MG_ERRLEN];
        const char *keys[7] = {"iteration", "lm_loss", "grad_norm", "lr", "elapsed_ms",
                               "tokens_per_sec", "tflops_per_gpu"};
        mg_json js;
        int64_t it = 0, t;
        int k;
        if (!nl) break;
        if (mg_json_parse(&js, p, (size_t)(nl - p), err, sizeof err)) { keys_ok = 0; break; }
        for (k = 0; k < 7; k++) keys_ok &= mg_json_get(&js, 0, keys[k]) >= 0;
        t = mg_json_get(&js, 0, "iteration");
        if (t < 0 || mg_json_int(&js, t, &it) || it != 2 * (n_lines + 1)) iters_ok = 0;
        t = mg_json_get(&js, 0, "lm_loss");
        if (t >= 0 && it >= 2 && it <= 4) {  /* the mean over the interval's 2 iterations */
            double v = strtod(p + js.toks[t].start, NULL), want = (loss[it - 1] + loss[it]) / 2;
            loss_ok &= fabs(v - want) <= 1e-7 * want;
        }
        mg_json_free(&js);
        p = nl + 1;
    }
    CHECK(text && n_lines == 2 && keys_ok, "train: --log-jsonl writes one JSON object per logged "
          "iteration with the documented keys");
    CHECK(iters_ok && loss_ok, "train: JSONL iterations are 1-based, lm_loss the interval mean");
    free(text);
    gpt_rmtree(dir);
}

/* Validation on the held-out part of an indexed dataset with several documents: the loss is
   the forward loss of the validation samples, and evaluating changes nothing. */
static void check_validation(void) {
    char dir[256], prefix[400], line[2048], err[MG_ERRLEN];
    mg_trainer tr;
    int i;
    float *before, *after;
    double loss, direct = 0;
    int64_t G;
    gpt_tmpdir(dir, sizeof dir, "valid");
    snprintf(prefix, sizeof prefix, "%s/ds", dir);
    gpt_make_docs(prefix);
    snprintf(line, sizeof line, "--init-from " GPT_DATA "gpt_model.bin --data-path %s --split "
             "8,2,0 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 2 "
             "--lr 1e-3 --eval-iters 2 --eval-interval 1", prefix);
    gpt_trainer_from_line(&tr, line);
    CHECK(tr.has_valid, "train: --split 8,2,0 has a validation part");
    before = gpt_host(&tr.model, tr.model.param_buf);
    loss = mg_trainer_evaluate(&tr, NULL);
    after = gpt_host(&tr.model, tr.model.param_buf);
    G = tr.args.global_batch_size;
    for (i = 0; i < 2; i++) {  /* the same samples, forward only, straight through the model */
        int64_t s;
        for (s = 0; s < G; s++)
            mg_blend_get(&tr.valid_data, i * G + s, tr.batch + s * 17, err, sizeof err);
        direct += mg_gpt_run_microbatches(&tr.model, tr.batch, tr.n_micro, 0, 0) / (G * 16.0);
    }
    direct /= 2;
    CHECK(fabs(loss - direct) <= 1e-6 * direct && isfinite(loss),
          "train: validation loss = mean forward loss over --eval-iters validation batches");
    CHECK(!memcmp(before, after, sizeof(float) * (size_t)tr.model.n_elems),
          "train: evaluation leaves the weights unchanged");
    CHECK(tr.consumed_valid_samples == 2 * G, "train: validation consumes eval-iters batches");
    free(before);
    free(after);
    mg_trainer_free(&tr);
    gpt_rmtree(dir);
}

int main(void) {
    check_lr_schedule();
    check_against_pytorch();
    check_eod_mask();
    check_resume();
    check_failed_save();
    check_logging();
    check_validation();
    return mg_test_summary();
}
