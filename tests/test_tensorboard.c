// mg-test: ranks=1 timeout=300 flavors=cpu
/* test_tensorboard.c — monitoring a run (docs/monitoring.md): build/gpt_train under mpirun,
   its TensorBoard event file read back by the tensorboard package itself, its timers.
     tensorboard  4 ranks, p=2 x d=2 with the distributed optimizer, 10 iterations, every
                  monitoring flag (--tensorboard-dir, --log-timers-to-tensorboard,
                  --log-memory-to-tensorboard, --log-world-size-to-tensorboard,
                  --log-validation-ppl-to-tensorboard,
                  --log-params-norm, --log-num-zeros-in-grad, --log-throughput,
                  --timing-log-level 2, --timing-log-option all) and --log-jsonl, every
                  iteration logged; then tests/tb_events.py (.venv's tensorboard 2.17.1,
                  installed by make deps) reads the file: every tag and value equals the JSONL,
                  a file cut mid-record reads up to the cut, a flipped bit stops the reader.
                  Its params norm and num zeros equal a serial run's (1e-5; exactly).
                  The printed report of --timing-log-option all names every rank and has the
                  pipeline's send/recv timers (forward-recv, backward-send-forward-recv, …).
     killed       1 rank killed with SIGKILL 2 s into a long run: its event file reads, every
                  whole record of it.
     timers       1 rank, 20 iterations, --timing-log-level 2: forward-backward + optimizer
                  (the two top-level timers) add up to the iteration time, within the
                  measured overhead outside them (zeroing the gradients, the schedule; at
                  most 10%), and never exceed it; optimizer-clip-main-grad +
                  optimizer-inner-step make up optimizer (the loss scaler outside them: at
                  most 20%), forward-compute + backward-compute make up forward-backward
                  (at least 80%); the report's header and lines are
                  Megatron's for --timing-log-option max and minmax.
     errors       --timing-log-level 3 and a --tensorboard-dir under a missing directory: one
                  error line each, exit status 2.
   Runs in the cc flavour only (it drives build/gpt_train, the cc build).                    */
#include "gpt_test_util.h"

#define BASE "--vocab-size 37 --num-layers 4 --hidden-size 32 --num-attention-heads 4 "       \
    "--seq-length 16 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3 --log-interval 1 "  \
    "--data-order sequential --device cpu "
#define DATA GPT_DATA "gpt_tokens.bin"
#define OUT "build/test_tensorboard_out"

typedef struct { int header, lines, ranks[4], p2p; const char *want; } report_seen;
/* What a run printed: the timer report's header `want` and its lines. */
static void on_line(const char *line, void *user) {
    report_seen *s = (report_seen *)user;
    int r;
    if (strncmp(line, s->want, strlen(s->want)) == 0) s->header++;
    if (strstr(line, " ...: ") || (strncmp(line, "    ", 4) == 0 && strstr(line, ".: ")))
        s->lines++;
    if (sscanf(line, "     rank %d:", &r) == 1 && r >= 0 && r < 4) s->ranks[r]++;
    /* --timing-log-option all: "  forward-recv:", "  backward-send-forward-recv:", … */
    if (!strncmp(line, "  ", 2) && line[2] != ' ' && (strstr(line, "-send") ||
        strstr(line, "-recv")) && strstr(line, ":\n"))
        s->p2p++;
}

static int run(int np, const char *what, const char *flags, report_seen *seen) {
    char first[2048], name[256];
    int status, n, ok;
    n = gpt_mpirun_train(np, flags, &status, first, sizeof first, seen ? on_line : NULL, seen);
    ok = n == 0 && status == 0;
    snprintf(name, sizeof name, "tensorboard: %s (mpirun -np %d gpt_train)", what, np);
    mg_test_report(ok, name, "%d error lines, status %d%s%s", n, status, n ? ": " : "", first);
    return ok;
}

/* The oracle's lines become this test's; it must run and say ok throughout (want: its
   number of checks).                                                                       */
static void oracle(const char *args, int want) {
    char cmd[1024], line[4096];
    int oks = 0, bad = 0, st;
    FILE *p;
    if (access(".venv/bin/python", X_OK) != 0) {
        mg_test_report(0, "tensorboard: .venv/bin/python with the tensorboard package",
                       "missing: run make deps (tools/install-venv.sh)");
        return;
    }
    snprintf(cmd, sizeof cmd, ".venv/bin/python tests/tb_events.py %s 2>&1", args);
    p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "ok - ", 5)) {
            mg_test_report(1, line + 5, "");
            oks++;
        } else if (!strncmp(line, "not ok - ", 9)) {
            mg_test_report(0, line + 9, "see above");
            bad++;
        } else {
            printf("# %s\n", line);
        }
    }
    st = p ? pclose(p) : -1;
    mg_test_report(st == 0 && oks == want && bad == 0, "tensorboard: tests/tb_events.py ran "
                   "all its checks", "status %d, %d ok of %d, %d not ok", st, oks, want, bad);
}

/* key's value on each training line (iteration 1 … 10) of a JSONL log; NAN where missing. */
static void jsonl_values(const char *path, const char *key, double v[11]) {
    FILE *f = fopen(path, "r");
    char line[8192], k[64];
    int i;
    for (i = 0; i <= 10; i++) v[i] = NAN;
    snprintf(k, sizeof k, "\"%s\": ", key);
    while (f && fgets(line, sizeof line, f)) {
        long long it;
        const char *at = strstr(line, k);
        if (sscanf(line, "{\"iteration\": %lld", &it) == 1 && at && it >= 1 && it <= 10 &&
            strstr(line, "\"lm_loss\""))
            v[it] = strtod(at + strlen(k), NULL);
    }
    if (f) fclose(f);
}

#define MONITOR_RUN BASE "--train-data-path " DATA " --valid-data-path " DATA " --eval-iters 1 " \
    "--eval-interval 5 --train-iters 10 --log-params-norm --log-num-zeros-in-grad "           \
    "--disable-bias-linear "

/* --log-params-norm and --log-num-zeros-in-grad count every parameter once: the p=2 x d=2
   ZeRO run's figures equal the serial run's (the norm to 1e-5: the weights agree to the
   runs' rounding; the zeros exactly: the 91 padded vocabulary rows x 32 whose gradient is 0).
   Without linear biases: the key bias's gradient is 0 in exact arithmetic (softmax ignores a
   shift of a row's scores) but rounding noise in fp32, exactly 0 in one summation order and
   not in another, so its zeros would not be comparable between layouts.                     */
static void check_params_norm(void) {
    double par[11], ser[11], zpar[11], zser[11], worst = 0;
    int i, zeros_equal = 1;
    if (!run(1, "the same run serially", MONITOR_RUN "--log-jsonl " OUT "/serial.jsonl", NULL))
        return;
    jsonl_values(OUT "/log.jsonl", "params_norm", par);
    jsonl_values(OUT "/serial.jsonl", "params_norm", ser);
    jsonl_values(OUT "/log.jsonl", "num_zeros", zpar);
    jsonl_values(OUT "/serial.jsonl", "num_zeros", zser);
    for (i = 1; i <= 10; i++) {
        double e = fabs(par[i] - ser[i]) / ser[i];
        if (!(e <= worst)) worst = e;
        zeros_equal &= zpar[i] == zser[i];
    }
    mg_test_report(worst <= 1e-5, "tensorboard: params norm of p=2 x d=2 with ZeRO equals the "
                   "serial run's", "worst relative difference %.2e over 10 iterations (serial "
                   "%.6f at iteration 10)", worst, ser[10]);
    mg_test_report(zeros_equal && zser[10] == 91 * 32, "tensorboard: num zeros of p=2 x d=2 "
                   "with ZeRO equals the serial run's (the padded vocabulary rows)",
                   "iteration 10: %.0f and %.0f", zpar[10], zser[10]);
}

static void check_tensorboard(void) {
    report_seen seen = {0, 0, {0}, 0, "times across ranks (ms):"};
    int r, all_ranks = 1;
    if (system("rm -rf " OUT " && mkdir -p " OUT) != 0) return;
    if (!run(4, "p=2 x d=2, every monitoring flag",
             MONITOR_RUN "--pipeline-model-parallel-size 2 "
             "--use-distributed-optimizer --tensorboard-dir " OUT "/tb --log-jsonl " OUT
             "/log.jsonl --log-throughput "
             "--log-timers-to-tensorboard --log-memory-to-tensorboard "
             "--log-world-size-to-tensorboard "
             "--log-validation-ppl-to-tensorboard --timing-log-level 2 "
             "--timing-log-option all", &seen))
        return;
    for (r = 0; r < 4; r++) all_ranks &= seen.ranks[r] > 0;
    mg_test_report(seen.header == 10 && all_ranks, "tensorboard: --timing-log-option all "
                   "prints a report per log line naming every rank's time",
                   "%d headers, rank lines %d %d %d %d", seen.header, seen.ranks[0],
                   seen.ranks[1], seen.ranks[2], seen.ranks[3]);
    mg_test_report(seen.p2p >= 10, "tensorboard: level 2 times the pipeline's send/recv groups "
                   "under Megatron's p2p names (forward-recv, backward-send, …)",
                   "%d p2p timer headings in 10 reports", seen.p2p);
    oracle(OUT "/tb " OUT "/log.jsonl", 8);
    check_params_norm();
}

/* A run killed (SIGKILL) in the middle of writing: its event file still reads. */
static void check_killed(void) {
    int rc = system("build/gpt_train " BASE "--data-path " DATA " --split 1,0,0 --eval-iters 0 "
                    "--train-iters 1000000 --log-interval 1000000 --tensorboard-dir " OUT
                    "/killed > /dev/null 2>&1 & pid=$!; sleep 2; kill -9 $pid; wait $pid; "
                    "exit 0");
    mg_test_report(rc == 0, "tensorboard: a run killed with SIGKILL after 2 s", "status %d", rc);
    oracle("--killed " OUT "/killed", 2);
}

/* Σ over the logged iterations of a JSONL key (elapsed_ms) or of a timer's max (NAN when a
   line lacks it); *rows: lines read.                                                        */
static double jsonl_sum(const char *path, const char *name, int timer, int *rows) {
    FILE *f = fopen(path, "r");
    char line[8192], key[128];
    double sum = 0;
    *rows = 0;
    snprintf(key, sizeof key, timer ? "\"%s\": [" : "\"%s\": ", name);
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, key);
        double lo, hi;
        if (!at) sum = NAN;
        else if (!timer) sum += strtod(at + strlen(key), NULL);
        else if (sscanf(at + strlen(key), "%lf, %lf", &lo, &hi) == 2) sum += hi;
        (*rows)++;
    }
    if (f) fclose(f);
    return sum;
}

static void check_timers(void) {
    report_seen mm = {0, 0, {0}, 0, "(min, max) time across ranks (ms):"};
    report_seen mx = {0, 0, {0}, 0, "max time across ranks (ms):"};
    double elapsed, fb, opt, clip, inner, fc, bc, ratio, parts, computes;
    int rows;
    if (!run(1, "20 iterations, --timing-log-level 2",
             BASE "--data-path " DATA " --split 1,0,0 --eval-iters 0 --num-layers 2 "
             "--hidden-size 64 --seq-length 32 --micro-batch-size 2 --train-iters 20 "
             "--timing-log-level 2 --log-jsonl " OUT "/timers.jsonl", &mm))
        return;
    elapsed = jsonl_sum(OUT "/timers.jsonl", "elapsed_ms", 0, &rows);
    fb = jsonl_sum(OUT "/timers.jsonl", "forward-backward", 1, &rows);
    opt = jsonl_sum(OUT "/timers.jsonl", "optimizer", 1, &rows);
    clip = jsonl_sum(OUT "/timers.jsonl", "optimizer-clip-main-grad", 1, &rows);
    inner = jsonl_sum(OUT "/timers.jsonl", "optimizer-inner-step", 1, &rows);
    fc = jsonl_sum(OUT "/timers.jsonl", "forward-compute", 1, &rows);
    bc = jsonl_sum(OUT "/timers.jsonl", "backward-compute", 1, &rows);
    ratio = (fb + opt) / elapsed;
    parts = (clip + inner) / opt;
    computes = (fc + bc) / fb;
    mg_test_report(rows == 20 && ratio <= 1 + 1e-9 && ratio >= 0.9,
                   "tensorboard: timers add up: forward-backward + optimizer = the iteration "
                   "time less the overhead outside them", "%d iterations: %.2f + %.2f ms of "
                   "%.2f ms (ratio %.5f, overhead %.4f ms per iteration)", rows, fb, opt,
                   elapsed, ratio, (elapsed - fb - opt) / (rows ? rows : 1));
    mg_test_report(parts <= 1 + 1e-9 && parts >= 0.8, "tensorboard: the optimizer's parts "
                   "(optimizer-clip-main-grad + optimizer-inner-step) add up to optimizer",
                   "%.2f + %.2f ms of %.2f ms (ratio %.5f)", clip, inner, opt, parts);
    mg_test_report(computes <= 1 + 1e-9 && computes >= 0.8, "tensorboard: forward-compute + "
                   "backward-compute make up forward-backward on one rank", "%.2f + %.2f ms of "
                   "%.2f ms (ratio %.5f)", fc, bc, fb, computes);
    printf("# timers: %d iterations, forward-backward %.2f ms + optimizer %.2f ms of %.2f ms "
           "(ratio %.5f)\n", rows, fb, opt, elapsed, ratio);
    /* level 2 on one rank without a pipeline or ZeRO: forward-backward, forward-compute,
       backward-compute, batch-generator, the layernorm and data-parallel reductions,
       optimizer-clip-main-grad, optimizer-inner-step, optimizer (9 lines per report)     */
    mg_test_report(mm.header == 20 && mm.lines == 180, "tensorboard: --timing-log-option "
                   "minmax (the default) prints '(min, max) time across ranks (ms):' and a "
                   "line per timer", "%d headers, %d lines", mm.header, mm.lines);
    if (!run(1, "--timing-log-option max", BASE "--data-path " DATA " --split 1,0,0 "
             "--eval-iters 0 --train-iters 2 --timing-log-level 1 --timing-log-option max", &mx))
        return;
    mg_test_report(mx.header == 2 && mx.lines == 12, "tensorboard: --timing-log-option max "
                   "prints 'max time across ranks (ms):' and the level-1 timers",
                   "%d headers, %d lines", mx.header, mx.lines);
}

static void check_errors(void) {
    static const char *const bad[2][2] = {
        {"--timing-log-level 3", "--timing-log-level"},
        {"--tensorboard-dir " OUT "/missing/tb", "--tensorboard-dir"}};
    int k;
    for (k = 0; k < 2; k++) {
        char flags[1024], first[2048], name[256];
        int status, n;
        snprintf(flags, sizeof flags, BASE "--data-path " DATA " --train-iters 2 %s", bad[k][0]);
        n = gpt_mpirun_train(1, flags, &status, first, sizeof first, NULL, NULL);
        snprintf(name, sizeof name, "tensorboard: %s is one error line naming the flag, status 2",
                 bad[k][0]);
        mg_test_report(n == 1 && status == 2 && strstr(first, bad[k][1]), name,
                       "%d error lines, status %d: %s", n, status, first);
        if (n >= 1) printf("# %s", first);
    }
}

int main(void) {
#if !defined(__CUDACC__) && !defined(__SANITIZE_ADDRESS__)
    const int cc_build = 1;
#else
    const int cc_build = 0;   /* the nvcc and sanitizer builds only compile it */
#endif
    if (cc_build) {
        check_tensorboard();
        check_killed();
        check_timers();
        check_errors();
    }
    return mg_test_summary();
}
