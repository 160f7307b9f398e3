// mg-test: ranks=1 timeout=120
/* Pipeline schedules without any communication: every built-in kind over p ∈ {1,2,4},
   m ∈ {p, 2p, 3p} (interleaved and GPipe also with v = 2), and p = 8, m = 16, is accepted
   by the validator, runs
   each microbatch forward and backward exactly once per chunk, has the known warm-up and
   peak-in-flight counts, round-trips through its text form, and simulates (unit costs) to
   the paper's bubble fractions exactly. Malformed schedules are rejected with messages that
   name the problem. Random valid schedules never deadlock once lowered. Traces no run can
   write (an action on the wrong rank or twice, two events of one rank overlapping) are
   refused with the offending line; touching events are not. A timeline whose makespan is
   subnormal draws a small picture (its tick loop ends). build/pipeline_sim refuses an --svg
   that names its input and a subnormal cost, and leaves no temporary behind.             */
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "mg_pipeline.h"
#include "mg_test.h"
#include "ops_util.h"   /* OPS_EXPECT_FATAL */

static const int kinds[4] = {MG_SCHED_GPIPE, MG_SCHED_1F1B, MG_SCHED_INTERLEAVED, MG_SCHED_ZB_H1};

/* Counts each (stage, mb)'s F, B, I, W independently of the library: all exactly once (B, or
   I and W), W after I, everything on the rank stage % p.                                   */
static int exactly_once(const mg_schedule *s, char *why, size_t n) {
    int S = s->p * s->v, r, i, k, ok = 1;
    int *cnt = (int *)calloc((size_t)S * s->m * 4, sizeof(int));
    for (r = 0; r < s->p; r++)
        for (i = s->start[r]; i < s->start[r + 1]; i++) {
            const mg_pipe_action *a = &s->actions[i];
            if (a->stage % s->p != r) {
                snprintf(why, n, "stage %d on rank %d", a->stage, r);
                ok = 0;
            }
            if (a->op > MG_PIPE_W) continue;
            if (a->op == MG_PIPE_W && cnt[(a->stage * s->m + a->mb) * 4 + MG_PIPE_I] != 1) {
                snprintf(why, n, "W before I"); ok = 0;
            }
            cnt[(a->stage * s->m + a->mb) * 4 + a->op]++;
        }
    for (k = 0; k < S * s->m; k++) {
        int f = cnt[4 * k], b = cnt[4 * k + 1], in = cnt[4 * k + 2], w = cnt[4 * k + 3];
        if (f != 1 || !((b == 1 && in == 0 && w == 0) || (b == 0 && in == 1 && w == 1))) {
            snprintf(why, n, "stage %d mb %d: F%d B%d I%d W%d", k / s->m, k % s->m, f, b, in, w);
            ok = 0;
            break;
        }
    }
    free(cnt);
    return ok;
}

/* Forwards before the first backward (B or I) on rank r. */
static int forwards_before_backward(const mg_schedule *s, int r) {
    int i, n = 0;
    for (i = s->start[r]; i < s->start[r + 1]; i++) {
        if (s->actions[i].op == MG_PIPE_B || s->actions[i].op == MG_PIPE_I) break;
        n += s->actions[i].op == MG_PIPE_F;
    }
    return n;
}
static int imin(int a, int b) { return a < b ? a : b; }

static int same_actions(const mg_schedule *a, const mg_schedule *b) {
    int r;
    if (a->p != b->p || a->v != b->v || a->m != b->m) return 0;
    for (r = 0; r <= a->p; r++) if (a->start[r] != b->start[r]) return 0;
    return memcmp(a->actions, b->actions, sizeof(mg_pipe_action) * (size_t)a->start[a->p]) == 0;
}

/* Text -> parse -> text is the identity, for the schedule and its lowered form. */
static int round_trips(const mg_schedule *s) {
    size_t n = mg_schedule_format(s, NULL, 0);
    char *text = (char *)malloc(n + 1), *again, err[512];
    mg_schedule back;
    int ok;
    mg_schedule_format(s, text, n + 1);
    if (mg_schedule_parse(&back, text, 0, 0, 0, err, sizeof err)) {
        printf("# parse failed: %s\n", err);
        free(text);
        return 0;
    }
    again = (char *)malloc(n + 1);
    ok = mg_schedule_format(&back, again, n + 1) == n && strcmp(text, again) == 0 &&
         same_actions(s, &back) &&
         (back.explicit_comm == s->explicit_comm || s->p == 1); /* p = 1 sends nothing */
    mg_schedule_free(&back);
    free(text);
    free(again);
    return ok;
}

static void test_builtin(int kind, int p, int v, int m) {
    mg_schedule s, low;
    mg_schedule_desc d = mg_schedule_desc_default(kind, p, v, m);
    mg_pipe_costs unit = {1, 1, 1, 0};
    mg_pipe_timeline ideal, groups;
    char name[160], err[512], why[256] = "";
    int r, ok, *peak = (int *)calloc((size_t)p, sizeof(int)), max_peak = 0;
    snprintf(name, sizeof name, "%s p=%d v=%d m=%d", mg_schedule_kind_name(kind), p, v, m);
    if (mg_schedule_build(&s, &d, err, sizeof err)) {
        mg_test_report(0, name, "build: %s", err);
        free(peak);
        return;
    }
    ok = exactly_once(&s, why, sizeof why);
    mg_test_report(ok, name, ok ? "validated; F and B (or I, W) once per chunk" : "%s", why);

    /* warm-up forwards: the F's before the first backward, less the one that opens 1F1B    */
    ok = 1;
    for (r = 0; r < p; r++) {
        int got = forwards_before_backward(&s, r), want = -1;
        if (kind == MG_SCHED_1F1B || kind == MG_SCHED_ZB_H1)
            want = imin(p - r - 1, m) + (p - r - 1 < m);
        if (kind == MG_SCHED_INTERLEAVED) {
            int warm = 2 * (p - r - 1) + (v - 1) * p;   /* Megatron's count, group N = p     */
            want = warm >= v * m ? v * m : warm + 1;
        }
        if (kind == MG_SCHED_GPIPE) want = v * m;
        if (got != want) {
            ok = 0;
            snprintf(why, sizeof why, "rank %d: %d forwards before the first backward, want %d",
                     r, got, want);
        }
    }
    mg_test_report(ok, name, ok ? "warm-up forwards as specified" : "%s", why);

    /* peak microbatches in flight, per rank                                                 */
    mg_schedule_peak_in_flight(&s, peak);
    ok = 1;
    for (r = 0; r < p; r++) {
        int want = kind == MG_SCHED_GPIPE ? v * m
                 : kind == MG_SCHED_1F1B ? imin(p - r, m)
                 : kind == MG_SCHED_ZB_H1 ? imin(p, m)
                 : imin(2 * (p - r - 1) + (v - 1) * p + 1, v * m);
        if (peak[r] != want) {
            ok = 0;
            snprintf(why, sizeof why, "rank %d peak %d, want %d", r, peak[r], want);
        }
        if (peak[r] > max_peak) max_peak = peak[r];
    }
    mg_test_report(ok, name, ok ? "peak in flight exact" : "%s", why);

    mg_test_report(round_trips(&s), name, "text form round-trips");
    if (mg_schedule_lower(&s, &low, err, sizeof err) == 0) {
        mg_test_report(round_trips(&low) && low.explicit_comm, name,
                       "lowered form (explicit send/recv) round-trips");
        mg_schedule_free(&low);
    } else {
        mg_test_report(0, name, "lower: %s", err);
    }

    /* simulator, unit costs: the paper's bubble fractions, exactly (equal rationals give
       equal correctly-rounded quotients); the executor's protocol adds nothing to them     */
    if (mg_pipe_simulate(&s, &unit, MG_SIM_IDEAL, &ideal, err, sizeof err) ||
        mg_pipe_simulate(&s, &unit, MG_SIM_GROUPS, &groups, err, sizeof err)) {
        mg_test_report(0, name, "simulate: %s", err);
    } else {
        double want = kind == MG_SCHED_ZB_H1 ? (double)(p - 1) / (3.0 * m)
                    : (double)(p - 1) / ((double)v * m);
        if (kind == MG_SCHED_GPIPE && v > 1) want = (double)(p - 1) / ((double)v * m);
        mg_test_report(ideal.bubble_fraction == want, name,
                       "bubble_fraction %.6f, want %.6f", ideal.bubble_fraction, want);
        mg_test_report(groups.bubble_fraction == ideal.bubble_fraction, name,
                       "executor protocol bubble %.6f = ideal", groups.bubble_fraction);
        ok = 1;
        for (r = 0; r < p; r++) ok &= ideal.peak_in_flight[r] == peak[r];
        mg_test_report(ok, name, "timeline peak in flight = schedule's");
        mg_pipe_timeline_free(&ideal);
        mg_pipe_timeline_free(&groups);
    }
    free(peak);
    mg_schedule_free(&s);
}

/* The peaks the task names: GPipe holds m, 1F1B p on its first stage, ZB-H1 no more than
   1F1B's largest.                                                                            */
static void test_peaks(void) {
    int p, mm, ok = 1;
    for (p = 2; p <= 4; p *= 2)
        for (mm = 1; mm <= 3; mm++) {
            int m = mm * p, peak_g[4], peak_1[4], peak_z[4], r, max1 = 0, maxz = 0;
            mg_schedule g, o, z;
            mg_schedule_desc dg = mg_schedule_desc_default(MG_SCHED_GPIPE, p, 1, m);
            mg_schedule_desc d1 = mg_schedule_desc_default(MG_SCHED_1F1B, p, 1, m);
            mg_schedule_desc dz = mg_schedule_desc_default(MG_SCHED_ZB_H1, p, 1, m);
            mg_schedule_build(&g, &dg, NULL, 0);
            mg_schedule_build(&o, &d1, NULL, 0);
            mg_schedule_build(&z, &dz, NULL, 0);
            mg_schedule_peak_in_flight(&g, peak_g);
            mg_schedule_peak_in_flight(&o, peak_1);
            mg_schedule_peak_in_flight(&z, peak_z);
            for (r = 0; r < p; r++) {
                ok &= peak_g[r] == m;
                if (peak_1[r] > max1) max1 = peak_1[r];
                if (peak_z[r] > maxz) maxz = peak_z[r];
            }
            ok &= peak_1[0] == p && maxz <= max1;
            mg_schedule_free(&g); mg_schedule_free(&o); mg_schedule_free(&z);
        }
    mg_test_report(ok, "peaks: GPipe m, 1F1B p on rank 0, ZB-H1 at most 1F1B's", "");
}

/* Expects parsing to fail with a message containing each of the fragments. */
static void expect_reject(const char *name, const char *text, int p, int v, int m,
                          const char *frag1, const char *frag2) {
    mg_schedule s;
    char err[512] = "";
    int rc = mg_schedule_parse(&s, text, p, v, m, err, sizeof err);
    int ok = rc != 0 && strstr(err, frag1) && (!frag2 || strstr(err, frag2)) && !strchr(err, '\n');
    if (rc == 0) mg_schedule_free(&s);
    mg_test_report(ok, name, "%s", rc ? err : "accepted");
}

static void test_malformed(void) {
    expect_reject("reject: missing backward", "0F0 0F1 0B0\n1F0 1B0 1F1 1B1\n", 2, 1, 2,
                  "no backward", "0B1");
    expect_reject("reject: missing W", "0F0 0I0\n", 1, 1, 1, "0I0", "no 0W0");
    expect_reject("reject: W before its I", "0F0 0W0 0I0\n", 1, 1, 1, "0W0", "before 0I0");
    expect_reject("reject: W after a full B", "0F0 0B0 0W0\n", 1, 1, 1, "0W0", "full backward");
    expect_reject("reject: B before F", "0B0 0F0\n", 1, 1, 1, "0B0", "before its forward");
    expect_reject("reject: duplicate forward", "0F0 0F0 0B0\n", 1, 1, 1, "0F0", "twice");
    expect_reject("reject: B and I for one microbatch", "0F0 0I0 0B0 0W0\n", 1, 1, 1, "0B0",
                  "either B or I");
    expect_reject("reject: unknown token", "0F0 0X0 0B0\n", 1, 1, 1, "unknown action 'X'",
                  "line 1");
    expect_reject("reject: malformed token", "0F0 F0 0B0\n", 1, 1, 1, "'F0'", "<stage>");
    expect_reject("reject: wrong stage count", "0F0 0B0\n1F0 1B0\n2F0 2B0\n", 2, 1, 1,
                  "3 rank lines", "p = 2");
    expect_reject("reject: stage on the wrong rank", "1F0 1B0\n0F0 0B0\n", 2, 1, 1,
                  "rank 0's line", "runs on rank 1");
    expect_reject("reject: stage beyond p*v", "0F0 0B0 2F0 2B0\n1F0 1B0\n", 2, 1, 1,
                  "2F0", "outside 0..1");
    expect_reject("reject: microbatch beyond m", "0F0 0B0 0F5 0B5\n", 1, 1, 2, "microbatch 5",
                  "m = 2");
    expect_reject("reject: empty schedule", "# nothing\n\n", 0, 0, 0, "empty", NULL);
    expect_reject("reject: data cycle (deadlock)", "0F0 0B0 0F1 0B1\n1F0 1F1 1B0 1B1\n", 2, 1,
                  2, "deadlocks", "rank 0 waits at 0B0 for 1B0");
    /* explicit sends and receives                                                           */
    expect_reject("reject: send without a receive",
                  "0F0 0SEND_F0 0RECV_B0 0B0\n1F0 1B0 1SEND_B0\n", 2, 1, 1, "1F0",
                  "put 1RECV_F0 before it");
    expect_reject("reject: receive without a send",
                  "0F0 0RECV_B0 0B0\n1RECV_F0 1F0 1B0 1SEND_B0\n", 2, 1, 1,
                  "output of 0F0 is never sent", "0SEND_F0");
    expect_reject("reject: receives out of the sender's order",
                  "0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
                  "1RECV_F1 1RECV_F0 1F0 1B0 1SEND_B0 1F1 1B1 1SEND_B1\n", 2, 1, 2,
                  "order of its sends", "1RECV_F1");
    expect_reject("reject: send/recv groups that deadlock",
                  "0F0 0RECV_B0 0B0 0SEND_F0\n1RECV_F0 1F0 1B0 1SEND_B0\n", 2, 1, 1,
                  "send/recv order deadlocks", "0RECV_B0");
    expect_reject("reject: send/recv with p = 1", "0F0 0SEND_F0 1F0 1B0 0B0\n", 1, 2, 1,
                  "p = 1", "0SEND_F0");
}

static void test_parse_forms(void) {
    mg_schedule s, want;
    mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_1F1B, 2, 1, 3);
    char err[512];
    const char *text = "# a 1F1B for two ranks\n"
                       "0F0 0F1 0B0 0F2 0B1 0B2   # rank 0: one warm-up forward\n"
                       "\n"
                       "1F0 1B0 1F1 1B1 1F2 1B2\n";
    int rc = mg_schedule_parse(&s, text, 0, 0, 0, err, sizeof err);
    mg_schedule_build(&want, &d, NULL, 0);
    mg_test_report(rc == 0 && s.p == 2 && s.v == 1 && s.m == 3 && same_actions(&s, &want),
                   "parse: comments, blank lines, p v m inferred = built-in 1f1b", "%s",
                   rc ? err : "");
    if (rc == 0) mg_schedule_free(&s);
    mg_schedule_free(&want);
}

static void test_descriptors(void) {
    mg_schedule s;
    mg_schedule_desc d;
    char err[512];
    int rc;
    d = mg_schedule_desc_default(MG_SCHED_INTERLEAVED, 2, 2, 3);
    rc = mg_schedule_build(&s, &d, err, sizeof err);
    mg_test_report(rc && strstr(err, "multiple"), "interleaved: m not a multiple of p rejected",
                   "%s", err);
    d = mg_schedule_desc_default(MG_SCHED_INTERLEAVED, 2, 2, 5);
    d.microbatch_group = 3;   /* Megatron's relaxed rule: 5 mod 3 = 2 ≥ p                  */
    rc = mg_schedule_build(&s, &d, err, sizeof err);
    mg_test_report(rc == 0, "interleaved: m=5 with microbatch group 3 (remainder ≥ p) runs",
                   "%s", rc ? err : "");
    if (rc == 0) {
        mg_pipe_costs unit = {1, 1, 1, 0};
        mg_pipe_timeline tl;
        rc = mg_pipe_simulate(&s, &unit, MG_SIM_GROUPS, &tl, err, sizeof err);
        mg_test_report(rc == 0, "interleaved: relaxed-rule schedule simulates", "%s",
                       rc ? err : "");
        if (rc == 0) mg_pipe_timeline_free(&tl);
        mg_schedule_free(&s);
    }
    d = mg_schedule_desc_default(MG_SCHED_INTERLEAVED, 2, 2, 4);
    d.microbatch_group = 3;   /* 4 mod 3 = 1 < p                                             */
    rc = mg_schedule_build(&s, &d, err, sizeof err);
    mg_test_report(rc && strstr(err, "remainder"), "interleaved: short last group rejected",
                   "%s", err);
    d = mg_schedule_desc_default(MG_SCHED_1F1B, 2, 2, 4);
    rc = mg_schedule_build(&s, &d, err, sizeof err);
    mg_test_report(rc && strstr(err, "interleaved"), "1f1b with v=2 rejected", "%s", err);
    d = mg_schedule_desc_default(MG_SCHED_ZB_H1, 0, 1, 4);
    rc = mg_schedule_build(&s, &d, err, sizeof err);
    mg_test_report(rc && strstr(err, "positive"), "p=0 rejected", "%s", err);
    mg_test_report(mg_schedule_kind_parse("ZB-H1") == MG_SCHED_ZB_H1 &&
                   mg_schedule_kind_parse("interleaved-1f1b") == MG_SCHED_INTERLEAVED &&
                   mg_schedule_kind_parse("pipedream") == -1, "schedule names parse", "");
    d = mg_schedule_desc_default(MG_SCHED_INTERLEAVED, 4, 2, 8);
    d.forward_only = 1;
    rc = mg_schedule_build(&s, &d, err, sizeof err);
    if (rc == 0) {
        int peak[4], r, ok = 1;
        mg_schedule_peak_in_flight(&s, peak);
        for (r = 0; r < 4; r++) ok &= peak[r] == 1 && mg_schedule_count(&s, r) == 2 * 8;
        mg_test_report(ok, "forward-only interleaved: forwards only, one in flight", "");
        mg_schedule_free(&s);
    } else {
        mg_test_report(0, "forward-only interleaved", "%s", err);
    }
}

/* Random valid schedules: a random topological order of all computes, split per rank. The
   ideal check accepts them all, and their lowering never deadlocks under the executor's
   protocol (the induction of the lowering's comment, checked on 400 cases).              */
static unsigned long long rng_state = 0x9E3779B97F4A7C15ULL;
static unsigned rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(rng_state >> 33);
}
static void test_random_schedules(void) {
    int trial, bad = 0;
    char err[1024] = "";
    for (trial = 0; trial < 400; trial++) {
        int p = 1 + rnd() % 4, v = 1 + rnd() % 3, m = 1 + rnd() % 5, S = p * v, split = rnd() % 2;
        int n = S * m * (split ? 3 : 2), cnt = 0, r, w = 0, k;
        mg_pipe_action *order = (mg_pipe_action *)malloc(sizeof(mg_pipe_action) * (size_t)n);
        mg_pipe_action *cand = (mg_pipe_action *)malloc(sizeof(mg_pipe_action) * (size_t)n);
        int *state = (int *)calloc((size_t)S * m, sizeof(int)); /* 0 none, 1 F, 2 B/I, 3 W */
        mg_schedule s;
        mg_pipe_costs c;
        mg_pipe_timeline tl;
        while (cnt < n) {
            int nc = 0;
            for (k = 0; k < S * m; k++) {
                int st = k / m;
                if (state[k] == 0 && (st == 0 || state[k - m] >= 1)) {
                    cand[nc].op = MG_PIPE_F; cand[nc].stage = st; cand[nc].mb = k % m; nc++;
                } else if (state[k] == 1 && (st == S - 1 || state[k + m] >= 2)) {
                    cand[nc].op = split ? MG_PIPE_I : MG_PIPE_B;
                    cand[nc].stage = st; cand[nc].mb = k % m; nc++;
                } else if (state[k] == 2 && split) {
                    cand[nc].op = MG_PIPE_W; cand[nc].stage = st; cand[nc].mb = k % m; nc++;
                }
            }
            order[cnt] = cand[rnd() % (unsigned)nc];
            state[order[cnt].stage * m + order[cnt].mb]++;
            if (order[cnt].op == MG_PIPE_B) state[order[cnt].stage * m + order[cnt].mb] = 3;
            cnt++;
        }
        memset(&s, 0, sizeof s);
        s.kind = MG_SCHED_CUSTOM;
        s.p = p; s.v = v; s.m = m;
        s.start = (int *)calloc((size_t)p + 1, sizeof(int));
        s.actions = (mg_pipe_action *)malloc(sizeof(mg_pipe_action) * (size_t)n);
        for (r = 0; r < p; r++) {
            for (k = 0; k < n; k++) if (order[k].stage % p == r) s.actions[w++] = order[k];
            s.start[r + 1] = w;
        }
        c.f = 1 + rnd() % 3; c.b = 1 + rnd() % 3; c.w = rnd() % 2; c.transfer = (rnd() % 3) / 2.0;
        if (mg_schedule_validate(&s, err, sizeof err) ||
            mg_pipe_simulate(&s, &c, MG_SIM_GROUPS, &tl, err, sizeof err)) {
            if (!bad) printf("# p=%d v=%d m=%d: %s\n", p, v, m, err);
            bad++;
        } else {
            mg_pipe_timeline_free(&tl);
        }
        free(s.start); free(s.actions); free(order); free(cand); free(state);
    }
    mg_test_report(bad == 0, "400 random valid schedules: accepted, lowered, no deadlock",
                   "%d failed", bad);
}

/* A trace written in the executor's format reads back into the same timeline; the SVG
   picture is produced.                                                                     */
static void test_trace_and_svg(void) {
    mg_schedule s;
    mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_ZB_H1, 4, 1, 8);
    mg_pipe_costs c = {1, 1, 1, 0};
    mg_pipe_timeline sim, back;
    char *text, tok[32], err[512];
    size_t cap = 1 << 16, len = 0;
    int i, rc, r, ok;
    FILE *f;
    long svg_len = 0;
    mg_schedule_build(&s, &d, NULL, 0);
    mg_pipe_simulate(&s, &c, MG_SIM_GROUPS, &sim, NULL, 0);
    text = (char *)malloc(cap);
    len += (size_t)snprintf(text + len, cap - len, "mg-pipeline-trace 1 p=4 v=1 m=8\n");
    for (i = 0; i < sim.n_events; i++)
        len += (size_t)snprintf(text + len, cap - len, "%d %s %.9f %.9f\n", sim.events[i].rank,
                                mg_pipe_action_str(&sim.events[i].a, tok, sizeof tok),
                                sim.events[i].start, sim.events[i].end);
    rc = mg_pipe_trace_parse(text, &back, err, sizeof err);
    ok = rc == 0 && back.n_events == sim.n_events && back.bubble_fraction == sim.bubble_fraction;
    for (r = 0; ok && r < 4; r++)
        ok &= back.peak_in_flight[r] == sim.peak_in_flight[r] &&
              mg_pipe_idle_fraction(&back, r) == mg_pipe_idle_fraction(&sim, r);
    mg_test_report(ok, "trace: parse gives the simulated timeline back", "%s", rc ? err : "");
    f = tmpfile();
    if (f && mg_pipe_timeline_svg(&back, "ZB-H1 p=4 m=8 <test>", f) == 0) {
        char *svg;
        svg_len = ftell(f);
        svg = (char *)calloc((size_t)svg_len + 1, 1);
        rewind(f);
        if (fread(svg, 1, (size_t)svg_len, f) != (size_t)svg_len) svg_len = 0;
        ok = svg_len > 0 && strstr(svg, "<svg") && strstr(svg, "</svg>") &&
             strstr(svg, "&lt;test&gt;") && strstr(svg, "bubble_fraction=0.1250");
        mg_test_report(ok, "svg: picture written, title escaped", "%ld bytes", svg_len);
        free(svg);
    } else {
        mg_test_report(0, "svg: picture written", "");
    }
    if (f) fclose(f);
    rc = mg_pipe_trace_parse("mg-pipeline-trace 1 p=2 v=1 m=2\n0 0F0 0.5 0.25\n", &back, err,
                             sizeof err);
    mg_test_report(rc && strstr(err, "line 2"), "trace: end before start rejected", "%s", err);
    rc = mg_pipe_trace_parse("0 0F0 0 1\n", &back, err, sizeof err);
    mg_test_report(rc && strstr(err, "header"), "trace: missing header rejected", "%s", err);
    mg_pipe_timeline_free(&sim);
    free(text);
    mg_schedule_free(&s);
}

/* Traces no executor can write: one error line naming the line that gives it away. */
static void test_trace_impossible(void) {
    static const struct { const char *what, *text, *want; } bad[] = {
        {"a stage on another rank", "mg-pipeline-trace 1 p=2 v=1 m=1\n0 1F0 0 1\n1 0F0 1 2\n",
         "line 2: '0 1F0 0 1': stage 1 runs on rank 1"},
        {"a chunk's stage on another rank (v=2: stage 3 on rank 1)",
         "mg-pipeline-trace 1 p=2 v=2 m=1\n0 0F0 0 1\n0 3F0 1 2\n", "line 3: '0 3F0 1 2': "
         "stage 3 runs on rank 1"},
        {"an action twice", "mg-pipeline-trace 1 p=2 v=1 m=1\n0 0F0 0 1\n# comment\n"
         "0 0F0 1 2\n", "line 4: 0F0 was already run on line 2"},
        {"two events of a rank overlapping", "mg-pipeline-trace 1 p=1 v=1 m=2\n0 0F1 0.5 1.5\n"
         "0 0F0 0 1\n", "line 3: 0F0 [0, 1] overlaps line 2's 0F1 [0.5, 1.5] on rank 0"},
        {"a wait inside a compute", "mg-pipeline-trace 1 p=1 v=1 m=1\n0 0F0 0 1\n"
         "0 COMM 0.25 0.5\n", "line 3: "},
    };
    mg_pipe_timeline tl;
    char err[512], name[200];
    int i, rc;
    for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        err[0] = 0;
        rc = mg_pipe_trace_parse(bad[i].text, &tl, err, sizeof err);
        snprintf(name, sizeof name, "trace: %s refused, the line named", bad[i].what);
        mg_test_report(rc && strstr(err, bad[i].want), name, "%s", err);
        if (!rc) mg_pipe_timeline_free(&tl);
    }
    /* back to back (end == next start, as rounded times of a real run may be), a wait of no
       length at that instant, two ranks at the same time: all possible                  */
    rc = mg_pipe_trace_parse("mg-pipeline-trace 1 p=2 v=1 m=2\n0 0F0 0 1\n0 COMM 1 1\n"
                             "0 0F1 1 2\n1 1F0 1 2\n1 1F1 2 3\n1 1B1 3 4\n1 1B0 4 5\n"
                             "0 0B1 4 5\n0 0B0 5 6\n", &tl, err, sizeof err);
    mg_test_report(rc == 0 && tl.n_events == 9 && tl.makespan == 6,
                   "trace: events that touch (end == next start) are accepted", "%s",
                   rc ? err : "");
    if (!rc) mg_pipe_timeline_free(&tl);
}

/* A makespan of 1e-323 s (subnormal: a tenth of it is 0, so the tick step was 0 and the tick
   loop wrote forever): the picture is small and has the tick at 0.                        */
static void test_svg_tiny(void) {
    mg_pipe_timeline tl;
    char err[512];
    long len = -1;
    FILE *f = tmpfile();
    int rc = mg_pipe_trace_parse("mg-pipeline-trace 1 p=1 v=1 m=1\n0 0F0 0 5e-324\n"
                                 "0 0B0 5e-324 1e-323\n", &tl, err, sizeof err);
    if (rc == 0 && f && mg_pipe_timeline_svg(&tl, "tiny", f) == 0) len = ftell(f);
    mg_test_report(len > 0 && len < 4000, "svg: a subnormal makespan draws a small picture",
                   "%ld bytes %s", len, rc ? err : "");
    if (f) fclose(f);
    if (!rc) mg_pipe_timeline_free(&tl);
}

/* Runs a shell command; its output in out, the exit status returned. */
static int sh(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    size_t n = 0, got;
    int st;
    if (!p) return -1;
    while (n + 1 < cap && (got = fread(out + n, 1, cap - 1 - n, p)) > 0) n += got;
    out[n] = 0;
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* build/pipeline_sim: an --svg that would overwrite the schedule file or trace it reads is
   refused (the input intact), so is a subnormal cost; a tiny trace draws at once.         */
/* A check on a command's output: the output only when it fails (it spans lines). */
static void report_sh(int ok, const char *name, int rc, const char *out) {
    mg_test_report(ok, name, ok ? NULL : "status %d: %s", rc, out);
}

static void test_tool(void) {
    char dir[] = "/tmp/mg_test_pipesim_XXXXXX", cmd[1024], out[4096];
    const char *sim = "build/pipeline_sim";
    struct stat st;
    int rc;
    FILE *f;
    if (access(sim, X_OK) || !mkdtemp(dir)) {
        mg_test_report(0, "pipeline_sim: build/pipeline_sim exists", "make build/pipeline_sim");
        return;
    }
    snprintf(cmd, sizeof cmd, "%s/s.sched", dir);
    f = fopen(cmd, "w");
    fputs("0F0 0B0\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/t.trace", dir);
    f = fopen(cmd, "w");
    fputs("mg-pipeline-trace 1 p=1 v=1 m=1\n0 0F0 0 5e-324\n0 0B0 5e-324 1e-323\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd %s && %s/%s --schedule-file s.sched --svg ./s.sched 2>&1; "
             "echo status $?; cat s.sched", dir, getcwd(out, 512), sim);
    rc = sh(cmd, out, sizeof out);
    report_sh(strstr(out, "pipeline_sim: --svg ./s.sched would overwrite its input s.sched")
                   && strstr(out, "status 2\n0F0 0B0\n"),
                   "pipeline_sim: --svg naming the --schedule-file refused, the file intact",
                   rc, out);
    snprintf(cmd, sizeof cmd, "%s --trace %s/t.trace --svg %s/t.trace 2>&1", sim, dir, dir);
    rc = sh(cmd, out, sizeof out);
    report_sh(rc == 2 && strstr(out, "would overwrite its input"),
                   "pipeline_sim: --svg naming the --trace refused", rc, out);
    snprintf(cmd, sizeof cmd, "timeout 20 %s --trace %s/t.trace --svg %s/t.svg 2>&1", sim, dir,
             dir);
    rc = sh(cmd, out, sizeof out);
    snprintf(cmd, sizeof cmd, "%s/t.svg", dir);
    report_sh(rc == 0 && stat(cmd, &st) == 0 && st.st_size < 4000,
                   "pipeline_sim: a trace 1e-323 s long draws a small SVG at once", rc, out);
    snprintf(cmd, sizeof cmd, "%s --schedule 1f1b -p 1 -m 1 --cost-f 5e-324 --svg %s/u.svg 2>&1",
             sim, dir);
    rc = sh(cmd, out, sizeof out);
    report_sh(rc == 2 && strstr(out, "bad value '5e-324' for --cost-f") &&
                   strchr(out, '\n') == out + strlen(out) - 1,
                   "pipeline_sim: a subnormal cost refused in one line", rc, out);
    snprintf(cmd, sizeof cmd, "ls -a %s | grep -c tmp; rm -rf %s", dir, dir);
    sh(cmd, out, sizeof out);
    report_sh(atoi(out) == 0, "pipeline_sim: no temporary file left behind", 0, out);
}

/* The per-rank accessors index arrays of p entries: a rank outside [0, p) read past them. */
static void test_rank_range(void) {
    mg_schedule s;
    mg_pipe_timeline tl;
    mg_pipe_costs costs = {1, 1, 1, 0};
    char err[512];
    mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_1F1B, 2, 1, 2);
    memset(&tl, 0, sizeof tl);
    if (mg_schedule_build(&s, &d, err, sizeof err) ||
        mg_pipe_simulate(&s, &costs, MG_SIM_IDEAL, &tl, err, sizeof err)) {
        mg_test_report(0, "rank range: a 1F1B schedule of p = 2", "%s", err);
        return;
    }
    OPS_EXPECT_FATAL("mg_schedule_count rejects rank p",
                     "mg_schedule_count: rank 2 is outside the pipeline (p = 2)",
                     mg_schedule_count(&s, 2));
    OPS_EXPECT_FATAL("mg_schedule_rank rejects rank -1",
                     "mg_schedule_rank: rank -1 is outside the pipeline (p = 2)",
                     mg_schedule_rank(&s, -1));
    OPS_EXPECT_FATAL("mg_pipe_idle_fraction rejects rank 5",
                     "mg_pipe_idle_fraction: rank 5 is outside the pipeline (p = 2)",
                     mg_pipe_idle_fraction(&tl, 5));
    mg_pipe_timeline_free(&tl);
    mg_schedule_free(&s);
}

int main(void) {
    int ki, p, mm;
    for (ki = 0; ki < 4; ki++)
        for (p = 1; p <= 4; p *= 2)
            for (mm = 1; mm <= 3; mm++) {
                int kind = kinds[ki];
                if (kind == MG_SCHED_INTERLEAVED) test_builtin(kind, p, 2, mm * p);
                else test_builtin(kind, p, 1, mm * p);
                if (kind == MG_SCHED_GPIPE) test_builtin(kind, p, 2, mm * p);
            }
    /* a deeper pipeline, as in the paper's figures: p = 8, m = 16                          */
    for (ki = 0; ki < 4; ki++)
        test_builtin(kinds[ki], 8, kinds[ki] == MG_SCHED_INTERLEAVED ? 2 : 1, 16);
    test_builtin(MG_SCHED_INTERLEAVED, 8, 4, 16);
    test_peaks();
    test_malformed();
    test_parse_forms();
    test_descriptors();
    test_random_schedules();
    test_trace_and_svg();
    test_trace_impossible();
    test_svg_tiny();
    test_tool();
    test_rank_range();
    return mg_test_summary();
}
