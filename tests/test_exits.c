// mg-test: ranks=1 timeout=300 flavors=cpu
/* test_exits.c — Megatron's clean exits of build/gpt_train, on 4 ranks = pipeline p=2 x data
   d=2 (distributed optimizer) under mpirun, a tiny model (2 layers, hidden 32), 30 iterations:
     reference       uninterrupted, iterations 1–30, every loss in a --log-jsonl file;
     --exit-interval 7             stops after iteration 7 with status 0, having saved iter 7;
     --exit-duration-in-mins 1e-6  (passed before the first iteration ends) stops after
                                   iteration 1, saved;
     --exit-signal-handler         SIGTERM sent, once the run is past iteration 3, (a) to ONE
                                   rank only (the others learn it through the all-reduced
                                   flag), (b) to every rank as Slurm does; the run saves
                                   every iteration (--save-interval 1), so the signal often
                                   lands in a save; (c) to every rank at a random moment up
                                   to 20 ms later. Each run must exit 0 (every rank), say
                                   "exiting after iteration K", leave latest = K and a
                                   complete iter_K (the resume below reads all of it);
                                   (d) raised inside the save of iteration 5, after its model
                                   file and before its optimizer files, by the test-only hook
                                   MG_TEST_SIGTERM_IN_SAVE, in every rank and in rank 3 only:
                                   the run must exit after iteration 5 with iter_5 complete;
   and every stopped run, resumed with --load to iteration 30, must log the reference's losses
   for iterations K+1 … 30 (the same layout: equal to the printed 9 digits).
   Runs in the cc flavour only (it drives build/gpt_train, the cc build).                    */
#include "gpt_test_util.h"
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define ITERS 30
#define BASE "--data-path " GPT_DATA "gpt_tokens.bin --data-order sequential --split 1,0,0 " \
    "--eval-iters 0 --vocab-size 37 --num-layers 2 --hidden-size 32 --num-attention-heads 4 "  \
    "--seq-length 16 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3 --min-lr 3e-4 "     \
    "--lr-warmup-iters 3 --lr-decay-style cosine --clip-grad 1.0 --seed 7 --log-interval 1 "   \
    "--pipeline-model-parallel-size 2 --use-distributed-optimizer --device cpu "              \
    "--train-iters 30 "

/* The memory report of a run's output: "[Rank r] (after 1 iterations) memory (MB) | allocated:
   A | max allocated: M | reserved: R (cpu arena) | CPU peak resident: P" per rank and the
   planner's "… per rank of pipeline stage s: X MB = …".                                    */
typedef struct { int ranks, sane; double max_alloc, plan; } mem_report;
static void saw_memory(const char *line, void *user) {
    mem_report *m = (mem_report *)user;
    int r;
    double a, mx, res, rss;
    const char *p;
    if (sscanf(line, "[Rank %d] (after 1 iterations) memory (MB) | allocated: %lf | max "
               "allocated: %lf | reserved: %lf (cpu arena) | CPU peak resident: %lf", &r, &a,
               &mx, &res, &rss) == 5) {
        m->sane &= r == m->ranks && a > 0 && a <= mx && mx <= res && rss > 0;
        m->ranks++;
        if (mx > m->max_alloc) m->max_alloc = mx;
    } else if ((p = strstr(line, "gpt_train: planner's prediction (mg_plan.h) per rank of "
                                 "pipeline stage ")) && (p = strchr(p + 60, ':')))
        m->plan = atof(p + 1);
}

/* The lm_loss of each iteration [1, ITERS] in a --log-jsonl file (NAN where missing); returns
   the last iteration logged (0: none).                                                       */
static int jsonl_losses(const char *path, double loss[ITERS + 1]) {
    FILE *f = fopen(path, "r");
    char line[4096];
    int i, last = 0;
    for (i = 0; i <= ITERS; i++) loss[i] = NAN;
    while (f && fgets(line, sizeof line, f)) {
        long long it;
        const char *l = strstr(line, "\"lm_loss\": ");
        if (sscanf(line, "{\"iteration\": %lld", &it) == 1 && l && it >= 1 && it <= ITERS) {
            loss[it] = strtod(l + 11, NULL);
            last = (int)it;
        }
    }
    if (f) fclose(f);
    return last;
}

/* What the stopped run printed: the iteration of "exiting after iteration K" (0: none). */
static int exit_line(const char *path, const char *reason) {
    FILE *f = fopen(path, "r");
    char line[8192];
    int k = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, ": exiting after iteration ");
        if (p && strstr(line, reason)) k = atoi(p + 26);
    }
    if (f) fclose(f);
    return k;
}

/* The iteration in DIR/latest_checkpointed_iteration.txt (-1: none). */
static int latest(const char *dir) {
    char path[600], *text;
    int k;
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    text = gpt_read_text(path);
    k = text ? atoi(text) : -1;
    free(text);
    return k;
}

/* Starts `mpirun -np 4 build/gpt_train ARGS` with its output to log; returns mpirun's pid. */
static pid_t start(const char *args, const char *log) {
    char cmd[8192];
    pid_t pid;
    snprintf(cmd, sizeof cmd, "exec env OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none"
             "%s -np 4 build/gpt_train %s >%s 2>&1", getuid() == 0 ? " --allow-run-as-root" : "",
             args, log);
    pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Exit status of a started run (-1: killed by a signal or still running after 120 s). */
static int finish_run(pid_t pid) {
    int st, waited;
    for (waited = 0; waited < 12000; waited++) {
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* The gpt_train processes mpirun started (its children), up to 8; returns how many. */
static int ranks_of(pid_t mpirun, pid_t *out) {
    char path[100], comm[64];
    FILE *f;
    int n = 0;
    long c;
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)mpirun, (int)mpirun);
    f = fopen(path, "r");
    while (f && n < 8 && fscanf(f, "%ld", &c) == 1) {
        FILE *g;
        snprintf(path, sizeof path, "/proc/%ld/comm", c);
        g = fopen(path, "r");
        if (g && fgets(comm, sizeof comm, g) && !strncmp(comm, "gpt_train", 9))
            out[n++] = (pid_t)c;
        if (g) fclose(g);
    }
    if (f) fclose(f);
    return n;
}

/* A stopped run: status 0, the exit line at iteration k = latest checkpoint; then the resume
   to ITERS logs the reference's losses after k.                                            */
static void check_stopped(const char *tmp, const char *what, const char *reason, int status,
                          int want_k, const double ref[ITERS + 1]) {
    char log[400], ck[400], jsonl[400], flags[4096], name[300];
    double got[ITERS + 1], worst = 0;
    int k, saved, st, i, n, last;
    snprintf(log, sizeof log, "%s/%s.log", tmp, what);
    snprintf(ck, sizeof ck, "%s/%s_ck", tmp, what);
    k = exit_line(log, reason);
    saved = latest(ck);
    snprintf(name, sizeof name, "exits: %s: status 0 on every rank, exits after iteration %d "
             "with the checkpoint of iteration %d", what, k, saved);
    mg_test_report(status == 0 && k >= 1 && k < ITERS && saved == k &&
                   (want_k == 0 || k == want_k), name, "status %d, exit line at %d, latest %d, "
                   "want %d (0: any)", status, k, saved, want_k);
    if (!(k >= 1 && k < ITERS && saved == k)) return;
    snprintf(jsonl, sizeof jsonl, "%s/%s_resume.jsonl", tmp, what);
    snprintf(flags, sizeof flags, BASE "--load %s --log-jsonl %s", ck, jsonl);
    n = gpt_mpirun_train(4, flags, &st, log, sizeof log, NULL, NULL);
    last = jsonl_losses(jsonl, got);
    for (i = k + 1; i <= ITERS; i++)
        if (!(fabs(got[i] - ref[i]) <= worst))
            worst = isnan(got[i]) ? INFINITY : fabs(got[i] - ref[i]);
    snprintf(name, sizeof name, "exits: %s: resumed from iteration %d, losses %d-%d equal the "
             "uninterrupted run's", what, k, k + 1, ITERS);
    mg_test_report(n == 0 && st == 0 && last == ITERS && worst == 0, name,
                   "status %d, %d error lines, last logged %d, max |diff| %.3g", st, n, last,
                   worst);
}

/* SIGTERM to one rank (all = 0) or to every rank, delay_us after the run has logged
   iteration 3.                                                                             */
static void signal_run(const char *tmp, const char *what, int all, int delay_us,
                       const double ref[ITERS + 1]) {
    char log[400], ck[400], jsonl[400], flags[4096], name[300];
    double seen[ITERS + 1];
    pid_t mpirun, ranks[8];
    int n = 0, i, waited, status, sent = 0;
    snprintf(log, sizeof log, "%s/%s.log", tmp, what);
    snprintf(ck, sizeof ck, "%s/%s_ck", tmp, what);
    snprintf(jsonl, sizeof jsonl, "%s/%s.jsonl", tmp, what);
    snprintf(flags, sizeof flags, BASE "--exit-signal-handler --save %s --save-interval 1 "
             "--log-jsonl %s", ck, jsonl);
    mpirun = start(flags, log);
    for (waited = 0; waited < 6000; waited++) {     /* up to 60 s for the first iterations */
        if (jsonl_losses(jsonl, seen) >= 3) break;
        usleep(10000);
    }
    usleep((useconds_t)delay_us);
    n = ranks_of(mpirun, ranks);
    if (n == 4) {
        for (i = all ? 0 : 1; i < (all ? n : 2); i++) kill(ranks[i], SIGTERM);
        sent = 1;
    }
    status = finish_run(mpirun);
    snprintf(name, sizeof name, "exits: %s: SIGTERM sent to %s of the 4 gpt_train processes "
             "%.1f ms after iteration 3 was logged", what, all ? "each" : "one", delay_us * 1e-3);
    mg_test_report(sent, name, "found %d processes", n);
    check_stopped(tmp, what, "SIGTERM received", status, 0, ref);
}

/* SIGTERM at a known point inside the save of iteration 5 (--save-interval 5): the test-only
   hook MG_TEST_SIGTERM_IN_SAVE raises it once the model file is written and the optimizer
   files not yet, in every rank ("5") or in one ("5:R"). The save must complete, and the run
   exit after iteration 5 with that checkpoint.                                             */
static void save_signal_run(const char *tmp, const char *what, const char *hook,
                            const double ref[ITERS + 1]) {
    char flags[4096], first[2048];
    int status;
    setenv("MG_TEST_SIGTERM_IN_SAVE", hook, 1);
    snprintf(flags, sizeof flags, BASE "--exit-signal-handler --save %s/%s_ck --save-interval 5 "
             "> %s/%s.log", tmp, what, tmp, what);
    gpt_mpirun_train(4, flags, &status, first, sizeof first, NULL, NULL);
    unsetenv("MG_TEST_SIGTERM_IN_SAVE");
    check_stopped(tmp, what, "SIGTERM received", status, 5, ref);
}

static void check_program(void) {
    char tmp[256], flags[4096], path[400], first[2048], name[200];
    double ref[ITERS + 1];
    int status, n, i, complete = 1;
    mem_report mem = {0, 1, 0, 0};
    if (access("build/gpt_train", X_OK) != 0) {
        mg_test_report(0, "exits: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    gpt_tmpdir(tmp, sizeof tmp, "exits");
    snprintf(path, sizeof path, "%s/ref.jsonl", tmp);
    snprintf(flags, sizeof flags, BASE "--log-jsonl %s", path);
    n = gpt_mpirun_train(4, flags, &status, first, sizeof first, saw_memory, &mem);
    for (i = 1; i <= ITERS && jsonl_losses(path, ref) == ITERS; i++) complete &= isfinite(ref[i]);
    snprintf(name, sizeof name, "exits: the uninterrupted reference run logs %d losses", ITERS);
    mg_test_report(n == 0 && status == 0 && jsonl_losses(path, ref) == ITERS && complete, name,
                   "status %d %s", status, first);

    /* the planner counts weights, gradients, Adam moments and activations; the arena also
       holds the 16-bit copies, buffers and scratch: the same size, within 2x               */
    mg_test_report(mem.ranks == 4 && mem.sane && mem.plan > 0 && mem.max_alloc < 2 * mem.plan &&
                   mem.plan < 2 * mem.max_alloc, "exits: the memory report after iteration 1: "
                   "4 ranks (allocated <= max allocated <= reserved), the planner's prediction "
                   "within 2x of the largest max allocated", "%d ranks%s, largest max allocated "
                   "%.2f MB, planned %.2f MB", mem.ranks, mem.sane ? "" : " (figures out of order)",
                   mem.max_alloc, mem.plan);

    snprintf(flags, sizeof flags, BASE "--exit-interval 7 --save %s/interval_ck > %s/interval.log",
             tmp, tmp);
    gpt_mpirun_train(4, flags, &status, first, sizeof first, NULL, NULL);
    check_stopped(tmp, "interval", "--exit-interval reached", status, 7, ref);

    snprintf(flags, sizeof flags, BASE "--exit-duration-in-mins 1e-6 --save %s/duration_ck "
             "> %s/duration.log", tmp, tmp);
    gpt_mpirun_train(4, flags, &status, first, sizeof first, NULL, NULL);
    check_stopped(tmp, "duration", "--exit-duration-in-mins reached", status, 1, ref);

    save_signal_run(tmp, "sigterm_in_save_all", "5", ref);
    save_signal_run(tmp, "sigterm_in_save_one", "5:3", ref);
    signal_run(tmp, "sigterm_one", 0, 0, ref);
    signal_run(tmp, "sigterm_all", 1, 0, ref);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());     /* any moment: a random one */
    signal_run(tmp, "sigterm_any", 1, rand() % 20000, ref);
    gpt_rmtree(tmp);
}

int main(void) {
    check_program();
    return mg_test_summary();
}
