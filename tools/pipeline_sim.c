/* pipeline_sim — simulate a pipeline schedule, or read the trace of a real run, and print its
   bubble fraction and peak microbatches in flight; optionally draw the timeline as SVG.

     build/pipeline_sim --schedule 1f1b -p 4 -m 8 --svg 1f1b.svg
     build/pipeline_sim --schedule zb-h1 -p 4 -m 8 --cost-f 1 --cost-b 1 --cost-w 1
     build/pipeline_sim --schedule-file examples/pipeline_toy.sched --print-lowered
     build/pipeline_sim --trace run.trace --svg run.svg          (gpt_train --pipeline-trace)

   Costs are per action of one model chunk: F forward, B backward-input (I), W
   backward-weight; a full backward B (GPipe, 1F1B, interleaved) costs b + w. Defaults f = b =
   w = 1, transfer 0. Two timelines are computed from the same action lists: "ideal" (the
   paper's model: an action starts when its inputs have arrived) and "executor" (the
   executor's send/recv groups, one in flight per rank). bubble_fraction is the bubble time
   over the ideal time, Σ_r (makespan − busy_r) / Σ_r busy_r. Exit status 2 on bad input. */
#include <float.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "mg_pipeline.h"
#include "mg_data.h"      /* mg_atomic_fopen, mg_same_file */

static void usage(FILE *f) {
    fprintf(f,
            "usage: pipeline_sim (--schedule gpipe|1f1b|interleaved|zb-h1 -p P [-v V] -m M\n"
            "                     | --schedule-file FILE [-p P] [-v V] [-m M]\n"
            "                     | --trace FILE)\n"
            "                    [--microbatch-group N] [--forward-only]\n"
            "                    [--cost-f X] [--cost-b X] [--cost-w X] [--cost-transfer X]\n"
            "                    [--model ideal|executor] [--svg FILE] [--title TEXT]\n"
            "                    [--print] [--print-lowered]\n");
}
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pipeline_sim: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}
static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 0 || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}
/* A cost: 0, or a normal number up to 1e12 (a subnormal one has lost its precision, and a
   makespan made of them cannot be drawn or divided by).                                   */
static int parse_cost(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= 0) || v > 1e12 || (v > 0 && v < DBL_MIN)) return -1;
    *out = v;
    return 0;
}

static void print_peaks(const int *peak, int p) {
    int r;
    printf("peak_in_flight=");
    for (r = 0; r < p; r++) printf("%d%s", peak[r], r + 1 < p ? "," : "\n");
}

/* The picture goes to a temporary twin renamed over path at the end: an interrupted run
   never leaves half an SVG over an old one. */
static int write_svg(const mg_pipe_timeline *tl, const char *path, const char *title) {
    char tmp[4200], err[4400];
    FILE *f = mg_atomic_fopen(path, tmp, sizeof tmp, err, sizeof err);
    int rc;
    if (!f) return fail("%s", err);
    rc = mg_pipe_timeline_svg(tl, title, f);
    if (mg_atomic_fclose(f, tmp, path, rc == 0, err, sizeof err) || rc)
        return fail(rc ? "%s: cannot write" : "%s", rc ? path : err);
    printf("svg=%s\n", path);
    return 0;
}

/* A measured trace: its timeline, idle fraction per rank, optional picture. */
static int run_trace(const char *path, const char *svg, const char *title) {
    mg_pipe_timeline tl;
    char err[512];
    int r, rc = 0;
    if (mg_pipe_trace_load(path, &tl, err, sizeof err)) return fail("%s", err);
    printf("trace=%s p=%d v=%d m=%d events=%d\n", path, tl.p, tl.v, tl.m, tl.n_events);
    printf("makespan=%.6f bubble_fraction=%.6f\n", tl.makespan, tl.bubble_fraction);
    for (r = 0; r < tl.p; r++)
        printf("rank=%d busy=%.6f idle_fraction=%.6f\n", r, tl.busy[r],
               mg_pipe_idle_fraction(&tl, r));
    print_peaks(tl.peak_in_flight, tl.p);
    if (svg) rc = write_svg(&tl, svg, title ? title : path);
    mg_pipe_timeline_free(&tl);
    return rc;
}

int main(int argc, char **argv) {
    const char *kind_name = NULL, *file = NULL, *trace = NULL, *svg = NULL, *title = NULL;
    const char *model_name = "ideal";
    int p = 0, v = 0, m = 0, group = 0, forward_only = 0, print = 0, print_lowered = 0, i, rc;
    int model;
    mg_pipe_costs costs = {1, 1, 1, 0};
    mg_schedule s;
    mg_pipe_timeline ideal, exec;
    char err[512], title_buf[256];

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--forward-only")) { forward_only = 1; takes = 0; }
        else if (!strcmp(a, "--print")) { print = 1; takes = 0; }
        else if (!strcmp(a, "--print-lowered")) { print_lowered = 1; takes = 0; }
        else if (!val) {
            if (strncmp(a, "--", 2) && strcmp(a, "-p") && strcmp(a, "-v") && strcmp(a, "-m"))
                return fail("unexpected argument '%s' (see --help)", a);
            return fail("option '%s' needs a value, or is unknown (see --help)", a);
        } else if (!strcmp(a, "--schedule")) kind_name = val;
        else if (!strcmp(a, "--schedule-file")) file = val;
        else if (!strcmp(a, "--trace")) trace = val;
        else if (!strcmp(a, "--svg")) svg = val;
        else if (!strcmp(a, "--title")) title = val;
        else if (!strcmp(a, "--model")) model_name = val;
        else if (!strcmp(a, "-p")) bad = parse_int(val, &p);
        else if (!strcmp(a, "-v")) bad = parse_int(val, &v);
        else if (!strcmp(a, "-m")) bad = parse_int(val, &m);
        else if (!strcmp(a, "--microbatch-group")) bad = parse_int(val, &group);
        else if (!strcmp(a, "--cost-f")) bad = parse_cost(val, &costs.f);
        else if (!strcmp(a, "--cost-b")) bad = parse_cost(val, &costs.b);
        else if (!strcmp(a, "--cost-w")) bad = parse_cost(val, &costs.w);
        else if (!strcmp(a, "--cost-transfer")) bad = parse_cost(val, &costs.transfer);
        else {
            fail("unknown option '%s'", a);
            usage(stderr);
            return 2;
        }
        if (bad)
            return fail("bad value '%s' for %s (expected a non-negative number%s)", val, a,
                        strncmp(a, "--cost", 6) ? "" : ": 0, or from 2.2e-308 to 1e12");
        i += takes;
    }
    if (svg && ((file && mg_same_file(svg, file)) || (trace && mg_same_file(svg, trace))))
        return fail("--svg %s would overwrite its input %s (give another name)", svg,
                    file ? file : trace);
    if (trace) {
        if (kind_name || file) return fail("--trace reads a measured run: drop --schedule / "
                                           "--schedule-file");
        return run_trace(trace, svg, title);
    }
    if (!strcmp(model_name, "ideal")) model = MG_SIM_IDEAL;
    else if (!strcmp(model_name, "executor")) model = MG_SIM_GROUPS;
    else return fail("--model '%s' is unknown (ideal or executor)", model_name);
    if (!!kind_name + !!file != 1) {
        usage(stderr);
        return fail("give exactly one of --schedule, --schedule-file and --trace");
    }
    if (file) {
        if (group || forward_only)
            return fail("--microbatch-group and --forward-only apply to built-in schedules");
        if (mg_schedule_load(&s, file, p, v, m, err, sizeof err)) return fail("%s", err);
    } else {
        mg_schedule_desc d;
        int kind = mg_schedule_kind_parse(kind_name);
        if (kind < 0 || kind == MG_SCHED_CUSTOM)
            return fail("unknown schedule '%s' (gpipe, 1f1b, interleaved, zb-h1)", kind_name);
        if (p == 0 || m == 0) return fail("--schedule needs -p and -m");
        d = mg_schedule_desc_default(kind, p, v ? v : 1, m);
        d.microbatch_group = group;
        d.forward_only = forward_only;
        if (mg_schedule_build(&s, &d, err, sizeof err)) return fail("%s", err);
    }
    if (mg_pipe_simulate(&s, &costs, MG_SIM_IDEAL, &ideal, err, sizeof err) ||
        mg_pipe_simulate(&s, &costs, MG_SIM_GROUPS, &exec, err, sizeof err)) {
        mg_schedule_free(&s);
        return fail("%s", err);
    }
    printf("schedule=%s p=%d v=%d m=%d%s\n", file ? file : mg_schedule_kind_name(s.kind), s.p,
           s.v, s.m, s.forward_only ? " forward_only" : "");
    printf("cost_f=%g cost_b=%g cost_w=%g cost_transfer=%g\n", costs.f, costs.b, costs.w,
           costs.transfer);
    printf("makespan=%g executor_makespan=%g\n", ideal.makespan, exec.makespan);
    printf("bubble_fraction=%.6f\n", ideal.bubble_fraction);
    printf("executor_bubble_fraction=%.6f\n", exec.bubble_fraction);
    print_peaks(ideal.peak_in_flight, s.p);
    if (print) mg_schedule_write(&s, stdout);
    if (print_lowered) {
        mg_schedule low;
        mg_schedule_lower(&s, &low, NULL, 0);
        mg_schedule_write(&low, stdout);
        mg_schedule_free(&low);
    }
    rc = 0;
    if (svg) {
        if (!title) {
            snprintf(title_buf, sizeof title_buf, "%s, p=%d v=%d m=%d (%s timeline)",
                     file ? file : mg_schedule_kind_name(s.kind), s.p, s.v, s.m, model_name);
            title = title_buf;
        }
        rc = write_svg(model == MG_SIM_IDEAL ? &ideal : &exec, svg, title);
    }
    mg_pipe_timeline_free(&ideal);
    mg_pipe_timeline_free(&exec);
    mg_schedule_free(&s);
    return rc;
}
