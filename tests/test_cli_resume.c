// mg-test: ranks=1 timeout=240 flavors=cpu
/* test_cli_resume.c — a checkpoint written by one job resumes in a job of another size
   (issue 7's resume matrix, the (4,1,1) entry that tests/test_dp.c cannot run inside one
   8-rank job): build/gpt_train itself under mpirun, three runs of one tiny model (4 layers,
   hidden 32, global batch 8 of micro-batch 1, AdamW with warm-up + cosine decay over 20
   iterations, weight decay, clipping, 2000-element buckets):
     save    8 ranks, t=2 × p=2 × d=2 with --use-distributed-optimizer, iterations 1–10,
             --save (each rank writes its pieces: ZeRO moment shards, both pipeline stages);
     resume  4 ranks, t=4 × p=1 × d=1, --load, iterations 11–20, --save;
     serial  1 rank, iterations 1–20 uninterrupted, --load and --save of one directory that
             holds no checkpoint yet (one line must say so: a start from the seed).
   The resumed job must say it resumed at iteration 10, its JSONL losses of iterations 11–20
   (--log-jsonl, every iteration) must equal the serial run's, and its final checkpoint — the
   weights and both AdamW moments, every tensor by name — must equal the serial run's
   (≤ 1e-5 relative, per tensor against its RMS; the key bias, whose gradient is exactly zero,
   left out; the second moments ≤ 2e-5: they average g², whose relative rounding error is
   twice g's — measured 7.2e-6 on one machine, 4.4e-6 on another). Runs in the cc flavour only (it drives build/gpt_train, the cc build).       */
#include "gpt_test_util.h"

#define TOL 1e-5

#define BASE "--data-path " GPT_DATA "gpt_tokens.bin --data-order sequential --split 1,0,0 " \
    "--eval-iters 0 --vocab-size 37 --num-layers 4 --hidden-size 32 --num-attention-heads 4 " \
    "--seq-length 16 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3 --min-lr 3e-4 "     \
    "--lr-warmup-iters 3 --lr-decay-iters 20 --lr-decay-style cosine --weight-decay 0.1 "      \
    "--adam-beta2 0.95 --clip-grad 1.0 --seed 99 --bucket-size 2000 --log-interval 1 "         \
    "--device cpu "

/* What a run printed: whether it said it resumed at iteration 10. */
static void saw_resume(const char *line, void *user) {
    if (strstr(line, "gpt_train: resumed from ") && strstr(line, " at iteration 10"))
        *(int *)user = 1;
}
/* ... or that its --load directory held no checkpoint yet, so it starts from the seed. */
static void saw_fresh(const char *line, void *user) {
    if (strstr(line, "gpt_train: --load ") && strstr(line, ": no checkpoint there yet (no "
        "latest_checkpointed_iteration.txt); starting from random weights (--seed 99)"))
        *(int *)user = 1;
}

/* Runs build/gpt_train under mpirun -np np; reports the run (no error line, status 0). */
static int run(int np, const char *what, const char *flags, void (*saw)(const char *, void *),
               int *said) {
    char first[2048], name[200];
    int status, n, ok;
    n = gpt_mpirun_train(np, flags, &status, first, sizeof first, saw, said);
    ok = n == 0 && status == 0;
    snprintf(name, sizeof name, "cli resume: %s (mpirun -np %d gpt_train)", what, np);
    mg_test_report(ok, name, "%d error lines, status %d%s%s", n, status, n ? ": " : "", first);
    return ok;
}

/* The lm_loss of each iteration [1, 20] in a --log-jsonl file (NAN where missing). */
static void jsonl_losses(const char *path, double loss[21]) {
    FILE *f = fopen(path, "r");
    char line[4096];
    int i;
    for (i = 0; i <= 20; i++) loss[i] = NAN;
    while (f && fgets(line, sizeof line, f)) {
        long long it;
        const char *l = strstr(line, "\"lm_loss\": ");
        if (sscanf(line, "{\"iteration\": %lld", &it) == 1 && l && it >= 1 && it <= 20)
            loss[it] = strtod(l + 11, NULL);
    }
    if (f) fclose(f);
}

/* Worst error of every tensor of got against want (same names and sizes), per tensor: max
   |got − want| over the RMS of want; the key rows of each QKV bias (layout (head, {q,k,v},
   hd)) left out. *worst names the tensor. Missing or differing tensors: infinity.          */
static double file_err(const char *got_path, const char *want_path, char *worst, size_t cap) {
    mg_st_file got, want;
    char err[MG_ERRLEN];
    double e = 0;
    int i, hd = 32 / 4;
    snprintf(worst, cap, "-");
    if (mg_st_open(want_path, &want, err, sizeof err)) { snprintf(worst, cap, "%s", err); return INFINITY; }
    if (mg_st_open(got_path, &got, err, sizeof err)) {
        snprintf(worst, cap, "%s", err);
        mg_st_close(&want);
        return INFINITY;
    }
    if (got.n_tensors != want.n_tensors) e = INFINITY;
    for (i = 0; i < want.n_tensors; i++) {
        const mg_st_tensor *w = &want.tensors[i], *g = mg_st_find(&got, w->name);
        int key_bias = strstr(w->name, "linear_qkv.bias") != NULL;
        float *a, *b;
        double ss = 0, diff = 0, ei;
        int64_t r;
        if (!g || g->numel != w->numel || g->dtype != MG_ST_F32 || w->dtype != MG_ST_F32) {
            snprintf(worst, cap, "%s (missing or different)", w->name);
            e = INFINITY;
            continue;
        }
        a = (float *)malloc(w->nbytes + 4);
        b = (float *)malloc(w->nbytes + 4);
        memcpy(a, g->data, g->nbytes);
        memcpy(b, w->data, w->nbytes);
        for (r = 0; r < w->numel; r++) {
            if (key_bias && (r / hd) % 3 == 1) continue;
            ss += (double)b[r] * b[r];
            if (fabs((double)a[r] - b[r]) > diff || a[r] != a[r]) diff = fabs((double)a[r] - b[r]);
        }
        ei = diff / (sqrt(ss / (double)w->numel) + 1e-30);
        if (!(ei <= e)) {
            e = ei;
            snprintf(worst, cap, "%s", w->name);
        }
        free(a);
        free(b);
    }
    mg_st_close(&got);
    mg_st_close(&want);
    return e;
}

static void check_program(void) {
    static const char *const files[3] = {"model", "optimizer", "optimizer_sq"};
    char tmp[256], flags[4096], got[600], want[600], worst[600], name[300];
    double serial[21], resumed[21], e_loss = 0;
    int resumed_flag = 0, fresh_flag = 0, unused = 0, ok, i;
    if (access("build/gpt_train", X_OK) != 0) {
        mg_test_report(0, "cli resume: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    gpt_tmpdir(tmp, sizeof tmp, "cli_resume");
    snprintf(flags, sizeof flags, BASE "--train-iters 10 --tensor-model-parallel-size 2 "
             "--pipeline-model-parallel-size 2 --use-distributed-optimizer --save %s/ck8", tmp);
    ok = run(8, "save after 10 iterations under t=2 p=2 d=2 + distributed optimizer", flags,
             saw_resume, &unused);
    snprintf(flags, sizeof flags, BASE "--train-iters 20 --tensor-model-parallel-size 4 "
             "--load %s/ck8 --save %s/ck4 --log-jsonl %s/resumed.jsonl", tmp, tmp, tmp);
    ok &= run(4, "resume it under t=4 p=1 d=1 for iterations 11-20", flags, saw_resume,
              &resumed_flag);
    /* --load and --save of one directory, as a job script that resumes when it can: empty */
    snprintf(flags, sizeof flags, BASE "--train-iters 20 --load %s/ck1 --save %s/ck1 "
             "--log-jsonl %s/serial.jsonl", tmp, tmp, tmp);
    ok &= run(1, "the uninterrupted serial run of 20 iterations", flags, saw_fresh, &fresh_flag);
    CHECK(resumed_flag, "cli resume: the 4-rank job says it resumed at iteration 10");
    CHECK(fresh_flag, "cli resume: a --load directory without a checkpoint: one line says so "
          "and that the run starts from --seed's weights");
    snprintf(got, sizeof got, "%s/resumed.jsonl", tmp);
    jsonl_losses(got, resumed);
    snprintf(want, sizeof want, "%s/serial.jsonl", tmp);
    jsonl_losses(want, serial);
    for (i = 11; i <= 20; i++) {
        double e = fabs(resumed[i] - serial[i]) / fabs(serial[i]);
        if (!(e <= e_loss)) e_loss = e;
    }
    mg_test_report(ok && e_loss <= TOL && resumed[10] != resumed[10], "cli resume: (t=2 p=2 "
                   "d=2 distopt, 8 ranks) -> (t=4 p=1 d=1, 4 ranks): losses of iterations 11-20 "
                   "(--log-jsonl) = uninterrupted", "max rel err %.3g (tol %.0e), iteration 20: "
                   "%.9g vs %.9g", e_loss, TOL, resumed[20], serial[20]);
    for (i = 0; i < 3; i++) {
        double e, tol = i == 2 ? 2 * TOL : TOL;   /* g² doubles g's relative rounding error */
        snprintf(got, sizeof got, "%s/ck4/iter_0000020/%s.safetensors", tmp, files[i]);
        snprintf(want, sizeof want, "%s/ck1/iter_0000020/%s.safetensors", tmp, files[i]);
        e = file_err(got, want, worst, sizeof worst);
        snprintf(name, sizeof name, "cli resume: -> (t=4 p=1 d=1): final checkpoint's %s = "
                 "uninterrupted (every tensor)", i == 0 ? "weights" : i == 1 ?
                 "first AdamW moments" : "second AdamW moments");
        mg_test_report(ok && e <= tol, name, "max rel err %.3g in %s (tol %.0e)", e, worst, tol);
    }
    gpt_rmtree(tmp);
}

static void check_library(void) {}

int main(int argc, char **argv) {
    mg_comm comm;
    int world;
    return gpt_cli_main(&argc, &argv, &comm, &world, check_program, check_library);
}
