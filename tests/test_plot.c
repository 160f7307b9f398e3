// mg-test: ranks=1 timeout=180 flavors=cpu
/* test_plot.c — the training curves as a picture (megatron.h's mg_plot_jsonl): the SVG is
   read back by an XML parser (tests/svg_points.py, /usr/bin/python3's xml.etree) and every
   plotted vertex, mapped from pixels back through its panel's axes, must be a logged point:
     a run     build/gpt_train, 1 rank, 40 iterations, validation every 10 (--valid-data-path),
               --log-jsonl: it says where it drew LOG.svg; the training loss, validation loss,
               learning rate, grad norm and tokens per second plotted are exactly the JSONL's
               points (same iterations, values within the picture's 0.01-pixel rounding);
     a joined  build/mg_plot on a log two runs wrote (the second resumed from iteration 10 and
               logged 11 and 12 again, one grad norm null): the curves hold the first run's
               points up to 10, the second's after, the null left out; the grad norm, which
               spans 2500x, is drawn on a log scale, the loss on a linear one;
     bad input a missing log, a log without iterations, a directory, an output that names the
               log (or a link to it): one "mg_plot: error:" line, status 1, the log intact;
     degenerate ranges  two losses or two iterations one ulp apart: a picture of a few ticks
               at once (no endless tick loop), both points in it, no temporary left.
   Runs in the cc flavour only (it drives build/gpt_train and build/mg_plot).                */
#include <sys/stat.h>
#include "gpt_test_util.h"

#define MAXP 256
typedef struct { int n; double it[MAXP], v[MAXP], tol[MAXP]; } series;
static const char *const keys[5] = {"lm_loss", "valid_lm_loss", "lr", "grad_norm",
                                    "tokens_per_sec"};

/* Runs a shell command; the end of its output (its last cap/2 bytes at least) in out, the
   exit status returned. All of the output is read (a command must not die of SIGPIPE).    */
static int sh(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    size_t n = 0;
    int st;
    if (!p) return -1;
    for (;;) {
        if (n + 1 >= cap) {                        /* full: keep the second half */
            memmove(out, out + cap / 2, n - cap / 2);
            n -= cap / 2;
        }
        if (!fgets(out + n, (int)(cap - n), p)) break;
        n += strlen(out + n);
    }
    out[n] = 0;
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The points of each key a JSONL log holds, in file order (later points of the same or an
   earlier iteration replace the curve from there on: the join of a resumed run).          */
static void jsonl_points(const char *path, series s[5]) {
    FILE *f = fopen(path, "r");
    char line[8192];
    int k;
    memset(s, 0, sizeof(series) * 5);
    while (f && fgets(line, sizeof line, f)) {
        long long it;
        if (sscanf(line, "{\"iteration\": %lld", &it) != 1) continue;
        for (k = 0; k < 5; k++) {
            char pat[64];
            const char *p;
            snprintf(pat, sizeof pat, "\"%s\": ", keys[k]);
            if (!(p = strstr(line, pat)) || !strncmp(p + strlen(pat), "null", 4)) continue;
            while (s[k].n > 0 && s[k].it[s[k].n - 1] >= (double)it) s[k].n--;
            if (s[k].n < MAXP) {
                s[k].it[s[k].n] = (double)it;
                s[k].v[s[k].n++] = strtod(p + strlen(pat), NULL);
            }
        }
    }
    if (f) fclose(f);
}

/* The points svg_points.py reads back from the picture; *log_panels: "lm_loss:linear …". */
static int svg_points(const char *svg, series s[5], char *panels, size_t cap) {
    static char out[1 << 20];
    char cmd[600], *line, *save = NULL;
    int k, st;
    memset(s, 0, sizeof(series) * 5);
    panels[0] = 0;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/svg_points.py %s 2>&1", svg);
    st = sh(cmd, out, sizeof out);
    for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char key[64], a[64];
        double it, v, tol;
        if (sscanf(line, "panel %63s %63s", key, a) == 2) {
            size_t n = strlen(panels);
            snprintf(panels + n, cap - n, "%s:%s ", key, a);
        } else if (sscanf(line, "%63s %lf %lf %lf", key, &it, &v, &tol) == 4) {
            for (k = 0; k < 5; k++)
                if (!strcmp(key, keys[k]) && s[k].n < MAXP) {
                    s[k].it[s[k].n] = it;
                    s[k].v[s[k].n] = v;
                    s[k].tol[s[k].n++] = tol;
                }
        } else if (st == 0) st = 99;          /* a line the script should not print */
    }
    if (st) fprintf(stderr, "svg_points.py %s: status %d\n%s\n", svg, st, out);
    return st;
}

/* Every key: the picture's points = the log's (same count, iterations, values in tol). */
static void compare(const char *what, const series *want, const series *got) {
    char name[200];
    int k, i;
    for (k = 0; k < 5; k++) {
        int ok = got[k].n == want[k].n, bad = -1;
        double worst = 0;
        for (i = 0; ok && i < want[k].n; i++) {
            double e = fabs(got[k].v[i] - want[k].v[i]);
            if (fabs(got[k].it[i] - want[k].it[i]) > 0.05 || !(e <= got[k].tol[i])) {
                ok = 0;
                bad = i;
            }
            if (e > worst) worst = e;
        }
        snprintf(name, sizeof name, "plot: %s: the %s curve shows the log's %d points", what,
                 keys[k], want[k].n);
        mg_test_report(ok && want[k].n > 0, name, "picture %d points, max |diff| %.3g%s",
                       got[k].n, worst, bad >= 0 ? " (a point off its logged place)" : "");
    }
}

static void write_joined(const char *path) {
    FILE *f = fopen(path, "w");
    int i;
    /* the first run: iterations 1–12 (it "crashed" after logging 12; its checkpoint: 10) */
    for (i = 1; i <= 12; i++)
        fprintf(f, "{\"iteration\": %d, \"lm_loss\": %.9g, \"grad_norm\": %.9g, \"lr\": 0.001, "
                "\"tokens_per_sec\": %d}\n", i, 5 - 0.1 * i, 100.0 / (i * i), 1000 + i);
    fprintf(f, "{\"iteration\": 10, \"valid_lm_loss\": 4.5}\n");
    /* the resumed run: 11–20, other values for 11 and 12, a null grad norm at 15 */
    for (i = 11; i <= 20; i++) {
        fprintf(f, "{\"iteration\": %d, \"lm_loss\": %.9g, ", i, 4.2 - 0.05 * (i - 10));
        if (i == 15) fprintf(f, "\"grad_norm\": null, ");
        else fprintf(f, "\"grad_norm\": %.9g, ", 0.8 / i);
        fprintf(f, "\"lr\": 0.0005, \"tokens_per_sec\": %d}\n", 2000 + i);
    }
    fprintf(f, "{\"iteration\": 20, \"valid_lm_loss\": 3.9}\n");
    fclose(f);
}

/* Logs whose ranges are below the doubles' resolution, an output naming the input, and a
   directory for a log: each ends at once (a tick loop that summed its step never moved and
   wrote gigabytes), with a picture of a few ticks or one error line; nothing is left behind. */
static void check_degenerate(const char *tmp) {
    static const char *const logs[2][2] = {
        {"{\"iteration\": 1, \"lm_loss\": 3.0}\n",
         "{\"iteration\": 2, \"lm_loss\": 3.0000000000000004}\n"},
        {"{\"iteration\": 100000000000000000, \"lm_loss\": 3.0}\n",
         "{\"iteration\": 100000000000000016, \"lm_loss\": 3.5}\n"}};
    char path[400], svg[400], cmd[1200], out[4096], panels[400], before[256], after[256];
    series got[5];
    struct stat st_svg;
    int i, st;
    FILE *f;
    for (i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/ulp%d.jsonl", tmp, i);
        snprintf(svg, sizeof svg, "%s/ulp%d.svg", tmp, i);
        f = fopen(path, "w");
        fputs(logs[i][0], f);
        fputs(logs[i][1], f);
        fclose(f);
        snprintf(cmd, sizeof cmd, "timeout 20 build/mg_plot %s -o %s 2>&1", path, svg);
        st = sh(cmd, out, sizeof out);
        if (stat(svg, &st_svg)) st_svg.st_size = -1;
        mg_test_report(st == 0 && st_svg.st_size > 0 && st_svg.st_size < 20000,
                       i ? "plot: iterations 1e17 and 1e17+16 (one ulp apart): a small picture"
                         : "plot: losses 3.0 and 3.0000000000000004 (one ulp apart): a small "
                           "picture", "status %d, %lld bytes: %s", st,
                       (long long)st_svg.st_size, out);
        st = svg_points(svg, got, panels, sizeof panels);
        mg_test_report(st == 0 && got[0].n == 2, i ? "plot: the 1e17 picture holds both points"
                       : "plot: the one-ulp picture holds both points", "status %d, %d points",
                       st, got[0].n);
    }
    /* the output is the log itself, or a link to it: refused, the log unchanged */
    snprintf(path, sizeof path, "%s/ulp0.jsonl", tmp);
    snprintf(cmd, sizeof cmd, "cd %s && ln -sf ulp0.jsonl link.svg && md5sum < ulp0.jsonl", tmp);
    sh(cmd, before, sizeof before);
    for (i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "build/mg_plot %s -o %s/%s 2>&1", path, tmp,
                 i ? "link.svg" : "./ulp0.jsonl");
        st = sh(cmd, out, sizeof out);
        snprintf(cmd, sizeof cmd, "md5sum < %s", path);
        sh(cmd, after, sizeof after);
        mg_test_report(st == 1 && strstr(out, "would overwrite the log") &&
                       strchr(out, '\n') == out + strlen(out) - 1 && !strcmp(before, after),
                       i ? "plot: -o a link to the log: refused, the log intact"
                         : "plot: -o the log itself: refused, the log intact", "status %d: %s",
                       st, out);
    }
    snprintf(cmd, sizeof cmd, "build/mg_plot %s 2>&1", tmp);
    st = sh(cmd, out, sizeof out);
    mg_test_report(st == 1 && strstr(out, "Is a directory") &&
                   strchr(out, '\n') == out + strlen(out) - 1,
                   "plot: a directory for a log: one error line saying so", "status %d: %s", st,
                   out);
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '\\.tmp\\.'", tmp);
    sh(cmd, out, sizeof out);
    mg_test_report(atoi(out) == 0, "plot: no temporary file left behind", "%s", out);
}

static void check_plot(void) {
    char tmp[256], cmd[2048], out[1 << 14], path[400], svg[400], panels[400], name[300];
    series want[5], got[5];
    int st;
    if (access("build/gpt_train", X_OK) || access("build/mg_plot", X_OK)) {
        mg_test_report(0, "plot: build/gpt_train and build/mg_plot exist",
                       "build them with make build/gpt_train build/mg_plot");
        return;
    }
    gpt_tmpdir(tmp, sizeof tmp, "plot");

    /* a run draws its own log */
    snprintf(path, sizeof path, "%s/run.jsonl", tmp);
    snprintf(svg, sizeof svg, "%s/run.svg", tmp);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 build/gpt_train --train-data-path "
             GPT_DATA "gpt_tokens.bin --valid-data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 "
             "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
             "--micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --lr-warmup-iters 5 "
             "--lr-decay-style cosine --train-iters 40 --eval-interval 10 --eval-iters 1 "
             "--log-interval 1 --device cpu --log-jsonl %s 2>&1", path);
    st = sh(cmd, out, sizeof out);
    snprintf(name, sizeof name, "plot: gpt_train --log-jsonl LOG.jsonl says it drew LOG.svg");
    snprintf(cmd, sizeof cmd, "gpt_train: training curves drawn in %s (from %s)", svg, path);
    mg_test_report(st == 0 && strstr(out, cmd) && access(svg, R_OK) == 0, name, "status %d", st);
    jsonl_points(path, want);
    st = svg_points(svg, got, panels, sizeof panels);
    mg_test_report(st == 0, "plot: the run's SVG parses as XML (xml.etree)", "status %d", st);
    compare("run", want, got);

    /* a log two runs wrote, drawn on demand */
    snprintf(path, sizeof path, "%s/joined.jsonl", tmp);
    snprintf(svg, sizeof svg, "%s/joined_curves.svg", tmp);
    write_joined(path);
    snprintf(cmd, sizeof cmd, "build/mg_plot %s -o %s 2>&1", path, svg);
    st = sh(cmd, out, sizeof out);
    snprintf(cmd, sizeof cmd, "mg_plot: %s drawn in %s\n", path, svg);
    mg_test_report(st == 0 && !strcmp(out, cmd), "plot: mg_plot LOG -o OUT.svg draws it",
                   "status %d: %s", st, out);
    jsonl_points(path, want);
    mg_test_report(want[0].n == 20 && fabs(want[0].v[10] - 4.15) < 1e-9 && want[3].n == 19 &&
                   want[1].n == 2, "plot: joined log: 20 losses (11-20 from the resumed run), 19 "
                   "grad norms, 2 validation losses", "%d, %d, %d", want[0].n, want[3].n,
                   want[1].n);
    st = svg_points(svg, got, panels, sizeof panels);
    mg_test_report(st == 0, "plot: the joined SVG parses as XML (xml.etree)", "status %d", st);
    compare("joined", want, got);
    mg_test_report(strstr(panels, "grad_norm:log") && strstr(panels, "lm_loss:linear"),
                   "plot: grad norm (2500x range) on a log scale, loss on a linear one", "%s",
                   panels);

    /* bad input */
    snprintf(cmd, sizeof cmd, "build/mg_plot %s/missing.jsonl 2>&1", tmp);
    st = sh(cmd, out, sizeof out);
    mg_test_report(st == 1 && !strncmp(out, "mg_plot: error: ", 16) && strstr(out, "cannot open")
                   && strchr(out, '\n') == out + strlen(out) - 1,
                   "plot: a missing log: one error line, status 1", "status %d: %s", st, out);
    snprintf(path, sizeof path, "%s/empty.jsonl", tmp);
    fclose(fopen(path, "w"));
    snprintf(cmd, sizeof cmd, "build/mg_plot %s 2>&1", path);
    st = sh(cmd, out, sizeof out);
    mg_test_report(st == 1 && !strncmp(out, "mg_plot: error: ", 16) &&
                   strstr(out, "no logged iteration"),
                   "plot: a log without iterations: one error line, status 1", "status %d: %s",
                   st, out);
    snprintf(path, sizeof path, "%s/other.jsonl", tmp);   /* JSON lines, none of them gpt_train's */
    {
        FILE *f = fopen(path, "w");
        fputs("{\"text\": \"hello\"}\n{\"loss\": 1.5}\nnot json\n", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "build/mg_plot %s 2>&1", path);
    st = sh(cmd, out, sizeof out);
    mg_test_report(st == 1 && strstr(out, "no logged iteration in 3 lines"),
                   "plot: a file of other lines: the error counts the lines it read", "status %d: %s",
                   st, out);
    check_degenerate(tmp);
    gpt_rmtree(tmp);
}

int main(void) {
    check_plot();
    return mg_test_summary();
}
