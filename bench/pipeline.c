/* pipeline — a real pipeline-parallel run beside the simulator's prediction.

     mpirun -np 4 build/gpt_train … --pipeline-model-parallel-size 4 --pipeline-trace run.trace
     build/pipeline run.trace [--cost-transfer X] [--svg-sim sim.svg]
     sh bench/pipeline.sh          (runs every schedule on 2 and 4 ranks and prints the tables)

   The trace (mg_pipeline.h's format, written by gpt_train --pipeline-trace) holds the measured
   start and end of every action of one training iteration on every pipeline rank. From it
   this program takes
     1. the schedule each rank ran: its compute actions in order, which is exactly the text
        form of a compute-only schedule (mg_schedule_parse validates it; sends and receives
        are derived as the executor derives them);
     2. the cost of one action of each kind: the mean measured duration of F, of B (or of I
        and W for a split backward), over all ranks; the transfer cost is --cost-transfer
        (default 0: on one machine a message is a memory copy);
   simulates that schedule with those costs (the paper's ideal model, and the executor's
   send/recv-group model) and prints, per pipeline rank, the measured busy time and idle
   fraction ((makespan − busy) / makespan) beside the two predicted idle fractions, as a
   Markdown table. Differences come from what the simulator does not model: stages whose
   costs differ (the first stage embeds, the last computes the logits and the loss), the
   time between actions (copies into message buffers, MPI progress), and, when ranks
   outnumber cores, the operating system's time slicing. Exit status 2 on bad input.      */
#include <stdlib.h>
#include <string.h>
#include "mg_pipeline.h"

static int fail(const char *msg, const char *arg) {
    fprintf(stderr, "pipeline: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 2;
}

/* The compute-only schedule text of a measured timeline: per rank, its F/B/I/W tokens in
   start order (the trace lists each rank's actions as they ran). */
static char *schedule_text(const mg_pipe_timeline *tl) {
    size_t cap = (size_t)tl->n_events * 24 + (size_t)tl->p * 2 + 1, n = 0;
    char *text = (char *)malloc(cap), tok[32];
    int r, i;
    if (!text) return NULL;
    for (r = 0; r < tl->p; r++) {
        for (i = 0; i < tl->n_events; i++) {
            const mg_pipe_event *e = &tl->events[i];
            if (e->rank != r || e->a.op == MG_PIPE_COMM) continue;
            n += (size_t)snprintf(text + n, cap - n, "%s ", mg_pipe_action_str(&e->a, tok,
                                                                             sizeof tok));
        }
        n += (size_t)snprintf(text + n, cap - n, "\n");
    }
    return text;
}

/* Mean measured duration of the compute actions with operation op (0 when there are none). */
static double mean_cost(const mg_pipe_timeline *tl, int op) {
    double sum = 0;
    int i, n = 0;
    for (i = 0; i < tl->n_events; i++)
        if (tl->events[i].a.op == op) {
            sum += tl->events[i].end - tl->events[i].start;
            n++;
        }
    return n ? sum / n : 0;
}

int main(int argc, char **argv) {
    const char *trace = NULL, *svg = NULL;
    mg_pipe_timeline meas, ideal, exec;
    mg_pipe_costs c;
    mg_schedule s;
    char err[512], wpart[64] = "", *text, *end;
    int i, r, split;
    c.transfer = 0;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cost-transfer") && i + 1 < argc) {
            c.transfer = strtod(argv[++i], &end);
            if (*end || !(c.transfer >= 0)) return fail("bad --cost-transfer", argv[i]);
        } else if (!strcmp(argv[i], "--svg-sim") && i + 1 < argc) {
            svg = argv[++i];
        } else if (argv[i][0] != '-' && !trace) {
            trace = argv[i];
        } else {
            fprintf(stderr, "usage: pipeline TRACE [--cost-transfer SECONDS] [--svg-sim FILE]\n");
            return 2;
        }
    }
    if (!trace) return fail("give the trace file of a run (gpt_train --pipeline-trace FILE)", NULL);
    if (mg_pipe_trace_load(trace, &meas, err, sizeof err)) return fail(err, NULL);
    text = schedule_text(&meas);
    if (!text || mg_schedule_parse(&s, text, meas.p, meas.v, meas.m, err, sizeof err)) {
        free(text);
        mg_pipe_timeline_free(&meas);
        return fail("the trace's actions are not a runnable schedule", err);
    }
    free(text);
    split = mean_cost(&meas, MG_PIPE_I) > 0;
    c.f = mean_cost(&meas, MG_PIPE_F);
    c.b = split ? mean_cost(&meas, MG_PIPE_I) : mean_cost(&meas, MG_PIPE_B);
    c.w = split ? mean_cost(&meas, MG_PIPE_W) : 0;     /* a full B costs b + w: all in b */
    if (mg_pipe_simulate(&s, &c, MG_SIM_IDEAL, &ideal, err, sizeof err) ||
        mg_pipe_simulate(&s, &c, MG_SIM_GROUPS, &exec, err, sizeof err)) {
        mg_schedule_free(&s);
        mg_pipe_timeline_free(&meas);
        return fail(err, NULL);
    }
    if (split) snprintf(wpart, sizeof wpart, ", W %.3f", c.w * 1e3);
    printf("trace %s: p=%d v=%d m=%d; measured mean costs (ms): F %.3f, %s %.3f%s, transfer "
           "%.3f\n", trace, meas.p, meas.v, meas.m, c.f * 1e3, split ? "I" : "B", c.b * 1e3,
           wpart, c.transfer * 1e3);
    printf("makespan (ms): measured %.2f, simulated %.2f (ideal) / %.2f (executor)\n\n",
           meas.makespan * 1e3, ideal.makespan * 1e3, exec.makespan * 1e3);
    printf("| rank | busy (ms) | idle, measured | idle, simulated (ideal) | idle, simulated "
           "(executor) |\n|---:|---:|---:|---:|---:|\n");
    for (r = 0; r < meas.p; r++)
        printf("| %d | %.2f | %.3f | %.3f | %.3f |\n", r, meas.busy[r] * 1e3,
               mg_pipe_idle_fraction(&meas, r), mg_pipe_idle_fraction(&ideal, r),
               mg_pipe_idle_fraction(&exec, r));
    if (svg) {
        FILE *f = fopen(svg, "w");
        char title[256];
        snprintf(title, sizeof title, "simulated from %s's measured costs (executor model)",
                 trace);
        if (!f || mg_pipe_timeline_svg(&exec, title, f)) {
            if (f) fclose(f);
            return fail("cannot write", svg);
        }
        fclose(f);
    }
    mg_schedule_free(&s);
    mg_pipe_timeline_free(&meas);
    mg_pipe_timeline_free(&ideal);
    mg_pipe_timeline_free(&exec);
    return 0;
}
