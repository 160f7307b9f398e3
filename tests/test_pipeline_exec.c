// mg-test: ranks=1,2,4 timeout=180
/* The pipeline executor on real ranks with toy stages and exact arithmetic.

   Virtual stage s computes y = a_s·x + c_s elementwise on a vector of L numbers; the loss is
   Σ of the last stage's y over all microbatches. Backward: dx = a_s·dy; the "gradients" are
   dA_s = Σ dy·x and dC_s = Σ dy, accumulated over microbatches. All values are small dyadic
   numbers, so every fp32 sum is exact in any order and the results must equal the serial
   computation bit for bit. Every callback also checks the buffers it is handed (input and
   output gradient) against the serial values, so a misrouted, reordered or prematurely
   recycled message fails at once; released buffers are poisoned with NaN.

   Covered, in one program run: every schedule × v ∈ {1, 2} (where the kind allows) × m ∈
   {p, 2p, 3p} with p = world size (t = 1): one rank runs p = 1 (same-rank hand-over of
   chunks), 2 and 4 ranks the real sends; with 4 ranks also t = 2, p = 2 with Megatron's
   scatter/gather (each tensor rank sends half, the receivers all-gather); a schedule read
   from text with explicit sends; a custom transfer hook; buffers from the context's arena;
   the trace file, read back by the simulator's parser; the comm_timer hook.               */
#include <string.h>
#include <unistd.h>
#include "mg_pipeline.h"
#include "mg_test.h"
#ifdef MG_USE_MPI
#define OMPI_SKIP_MPICXX 1   /* C API only (nvcc compiles this file as C++)                  */
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#define L 8            /* elements per activation message (divisible by t = 2)              */
#define MAX_S 8        /* p·v                                                               */
#define MAX_M 12

static mg_comm comm;
static mg_ctx ctx;


/* ---- the toy model and its serial oracle ---------------------------------------------------- */
static float stage_a(int s) { return s % 3 == 0 ? 2.0f : s % 3 == 1 ? -0.5f : 1.5f; }
static float stage_c(int s) { return (float)(s % 4) - 1.0f; }
static float data_x(int mb, int i) { return (float)((mb * 3 + i * 5) % 7 - 3); }

typedef struct toy {
    int S, m, p;
    double act[MAX_S + 1][MAX_M][L];  /* act[s] = input of stage s; act[S] = final output     */
    double grad[MAX_S + 1][MAX_M][L]; /* grad[s] = d loss / d act[s]                            */
    double dA[MAX_S], dC[MAX_S], loss[MAX_M];
    /* what the pipeline produced on this rank                                                */
    float got_dA[MAX_S], got_dC[MAX_S], got_loss[MAX_M];
    int calls[MAX_S][MAX_M][4];
    int bad;
    char why[256];
} toy;

static void toy_serial(toy *t, int S, int m, int p) {
    int s, mb, i;
    memset(t, 0, sizeof *t);
    t->S = S;
    t->m = m;
    t->p = p;
    for (mb = 0; mb < m; mb++) {
        for (i = 0; i < L; i++) t->act[0][mb][i] = data_x(mb, i);
        for (s = 0; s < S; s++)
            for (i = 0; i < L; i++)
                t->act[s + 1][mb][i] = stage_a(s) * t->act[s][mb][i] + stage_c(s);
        for (i = 0; i < L; i++) { t->loss[mb] += t->act[S][mb][i]; t->grad[S][mb][i] = 1; }
        for (s = S - 1; s >= 0; s--)
            for (i = 0; i < L; i++) {
                t->grad[s][mb][i] = stage_a(s) * t->grad[s + 1][mb][i];
                t->dA[s] += t->grad[s + 1][mb][i] * t->act[s][mb][i];
                t->dC[s] += t->grad[s + 1][mb][i];
            }
    }
}
static void toy_fail(toy *t, const mg_pipe_io *io, const char *what) {
    if (!t->bad)
        snprintf(t->why, sizeof t->why, "%s at %d%s%d", what, io->stage, mg_pipe_op_name(io->op),
                 io->mb);
    t->bad = 1;
}
/* The vector a callback works on: the received buffer, or the data / the loss seed. */
static void toy_input(toy *t, const mg_pipe_io *io, float *x) {
    int i;
    for (i = 0; i < L; i++) {
        x[i] = io->stage == 0 ? data_x(io->mb, i) : ((const float *)io->input)[i];
        if ((double)x[i] != t->act[io->stage][io->mb][i]) toy_fail(t, io, "wrong input");
    }
}
static void toy_grad_output(toy *t, const mg_pipe_io *io, float *g) {
    int i;
    for (i = 0; i < L; i++) {
        g[i] = io->stage == t->S - 1 ? 1.0f : ((const float *)io->grad_output)[i];
        if ((double)g[i] != t->grad[io->stage + 1][io->mb][i]) toy_fail(t, io, "wrong grad_output");
    }
}
static void toy_count(toy *t, const mg_pipe_io *io) {
    if (io->chunk != io->stage / t->p) toy_fail(t, io, "wrong chunk");
    if ((io->stage > 0) != (io->input != NULL) ||
        (io->op == MG_PIPE_F && (io->stage < t->S - 1) != (io->output != NULL)))
        toy_fail(t, io, "input/output presence");
    t->calls[io->stage][io->mb][io->op]++;
}
static void toy_forward(void *user, const mg_pipe_io *io) {
    toy *t = (toy *)user;
    float x[L], y[L];
    int i;
    toy_count(t, io);
    toy_input(t, io, x);
    for (i = 0; i < L; i++) y[i] = stage_a(io->stage) * x[i] + stage_c(io->stage);
    if (io->output) memcpy(io->output, y, sizeof y);
    else for (i = 0; i < L; i++) t->got_loss[io->mb] += y[i];
}
static void toy_input_grad(toy *t, const mg_pipe_io *io) {
    float g[L];
    int i;
    toy_grad_output(t, io, g);
    if ((io->stage > 0) != (io->grad_input != NULL)) toy_fail(t, io, "grad_input presence");
    if (io->grad_input)
        for (i = 0; i < L; i++) ((float *)io->grad_input)[i] = stage_a(io->stage) * g[i];
}
static void toy_weight_grad(toy *t, const mg_pipe_io *io) {
    float x[L], g[L];
    int i;
    toy_input(t, io, x);          /* still valid: the executor keeps it until the last backward */
    toy_grad_output(t, io, g);
    for (i = 0; i < L; i++) {
        t->got_dA[io->stage] += g[i] * x[i];
        t->got_dC[io->stage] += g[i];
    }
}
static void toy_backward(void *user, const mg_pipe_io *io) {
    toy *t = (toy *)user;
    toy_count(t, io);
    toy_input_grad(t, io);
    toy_weight_grad(t, io);
}
static void toy_backward_input(void *user, const mg_pipe_io *io) {
    toy *t = (toy *)user;
    toy_count(t, io);
    toy_input_grad(t, io);
}
static void toy_backward_weight(void *user, const mg_pipe_io *io) {
    toy *t = (toy *)user;
    toy_count(t, io);
    toy_weight_grad(t, io);
}

/* Checks this rank's results: its stages' gradients, the loss on the last stage's rank, and
   each callback called once per (stage, microbatch).                                      */
static int toy_check(toy *t, const mg_schedule *s, int pp_rank) {
    int st, mb, split;
    if (t->bad) return 0;
    for (st = pp_rank; st < t->S; st += s->p) {
        for (mb = 0; mb < t->m; mb++) {
            int *c = t->calls[st][mb];
            split = c[MG_PIPE_I] > 0;
            if (c[MG_PIPE_F] != 1 || (split ? c[MG_PIPE_I] != 1 || c[MG_PIPE_W] != 1 || c[MG_PIPE_B]
                                            : c[MG_PIPE_B] != 1 || c[MG_PIPE_W])) {
                snprintf(t->why, sizeof t->why, "stage %d mb %d: calls F%d B%d I%d W%d", st, mb,
                         c[0], c[1], c[2], c[3]);
                return 0;
            }
        }
        if ((double)t->got_dA[st] != t->dA[st] || (double)t->got_dC[st] != t->dC[st]) {
            snprintf(t->why, sizeof t->why, "stage %d: dA %g (want %g), dC %g (want %g)", st,
                     t->got_dA[st], t->dA[st], t->got_dC[st], t->dC[st]);
            return 0;
        }
    }
    if ((t->S - 1) % s->p == pp_rank)
        for (mb = 0; mb < t->m; mb++)
            if ((double)t->got_loss[mb] != t->loss[mb]) {
                snprintf(t->why, sizeof t->why, "loss of mb %d: %g, want %g", mb,
                         t->got_loss[mb], t->loss[mb]);
                return 0;
            }
    return 1;
}

/* ---- a transfer hook that counts and delegates ---------------------------------------------- */
static int hook_sends, hook_recvs, hook_after;
static void hook_send(void *user, mg_comm *c, const void *buf, int64_t n, mg_dtype dt, int peer) {
    (void)user;
    hook_sends++;
    mg_send(c, &c->pipeline, buf, n, dt, peer);
}
static void hook_recv(void *user, mg_comm *c, void *buf, int64_t n, mg_dtype dt, int peer) {
    (void)user;
    hook_recvs++;
    mg_recv(c, &c->pipeline, buf, n, dt, peer);
}
static void hook_after_recv(void *user, mg_comm *c, void *buf, int64_t n, mg_dtype dt) {
    (void)user; (void)c; (void)buf; (void)n; (void)dt;
    hook_after++;
}

/* ---- one run -------------------------------------------------------------------------------- */
enum { RUN_PLAIN = 0, RUN_SCATTER_GATHER = 1, RUN_HOOK = 2, RUN_ARENA = 3 };
static toy model;   /* large: static */

/* Runs the schedule twice (the executor is reusable: the second iteration must give the same
   answer from fresh accumulators) and returns 1 when this rank's results are exact.        */
static int run(const mg_schedule *s, int mode, char *why, size_t whylen) {
    mg_pipe_exec ex;
    mg_pipe_exec_desc d = mg_pipe_exec_desc_default();
    int iter, ok = 1, messages = 0, r, i;
    d.schedule = s;
    d.msg_count = L;
    d.msg_dtype = MG_F32;
    d.cb.forward = toy_forward;
    d.cb.backward = toy_backward;
    d.cb.backward_input = toy_backward_input;
    d.cb.backward_weight = toy_backward_weight;
    d.cb.user = &model;
    d.poison = 1;
    d.scatter_gather = mode == RUN_SCATTER_GATHER;
    d.ctx = mode == RUN_ARENA ? &ctx : NULL;
    if (mode == RUN_HOOK) {
        d.transfer.send = hook_send;
        d.transfer.recv = hook_recv;
        d.transfer.after_recv = hook_after_recv;
        hook_sends = hook_recvs = hook_after = 0;
    }
    if (mg_pipe_exec_init(&ex, &comm, &d, why, whylen)) return 0;
    for (iter = 0; iter < 2 && ok; iter++) {
        toy_serial(&model, s->p * s->v, s->m, s->p);
        mg_pipe_exec_run(&ex);
        ok = toy_check(&model, s, comm.pipeline.rank);
        if (!ok)
            snprintf(why, whylen, "rank %d iteration %d: %s", comm.world_rank, iter, model.why);
    }
    if (ok && mode == RUN_HOOK) {   /* one send and one receive per message of this rank      */
        const mg_schedule *plan = &ex.plan;
        r = comm.pipeline.rank;
        for (i = plan->start[r]; i < plan->start[r + 1]; i++)
            messages += plan->actions[i].op == MG_PIPE_SEND_F ||
                        plan->actions[i].op == MG_PIPE_SEND_B;
        ok = hook_sends == 2 * messages && hook_recvs == hook_after && hook_recvs > 0;
        if (!ok) snprintf(why, whylen, "hook: %d sends for %d messages, %d recvs, %d after_recv",
                          hook_sends, 2 * messages, hook_recvs, hook_after);
    }
    mg_pipe_exec_free(&ex);
    return ok;
}

/* Every kind × v × m for the current (t, p), mode as given; one report line per (kind, v). */
static void run_all(int mode, const char *tag) {
    static const int kinds[4] = {MG_SCHED_GPIPE, MG_SCHED_1F1B, MG_SCHED_INTERLEAVED,
                                 MG_SCHED_ZB_H1};
    int p = comm.pipeline.size, ki, v, mm;
    for (ki = 0; ki < 4; ki++)
        for (v = 1; v <= 2; v++) {
            char name[160], why[512] = "";
            int ok = 1, runs = 0;
            if (v == 2 && (kinds[ki] == MG_SCHED_1F1B || kinds[ki] == MG_SCHED_ZB_H1)) continue;
            for (mm = 1; mm <= 3; mm++) {
                mg_schedule s;
                mg_schedule_desc d = mg_schedule_desc_default(kinds[ki], p, v, mm * p);
                if (mg_schedule_build(&s, &d, why, sizeof why)) {
                    ok = 0;
                    break;
                }
                ok = mg_test_agree(run(&s, mode, why, sizeof why));
                runs++;
                mg_schedule_free(&s);
                if (!ok) break;
            }
            snprintf(name, sizeof name, "exec %s t=%d p=%d v=%d m={%d,%d,%d}: %s",
                     mg_schedule_kind_name(kinds[ki]), comm.tensor.size, p, v, p, 2 * p, 3 * p,
                     tag);
            if (!ok && why[0]) fprintf(stderr, "%s: %s\n", name, why);
            mg_test_report(ok, name, ok ? "%d runs equal the serial computation exactly"
                                        : "failed on some rank (see stderr)", runs);
        }
}

/* Parses a schedule text for the current pipeline and runs it; reports under name. */
static void run_text_schedule(const char *text, int m, const char *name) {
    mg_schedule s;
    char why[512] = "", err[512] = "";
    int ok = mg_schedule_parse(&s, text, comm.pipeline.size, 1, m, err, sizeof err) == 0;
    if (ok) {
        ok = mg_test_agree(run(&s, RUN_PLAIN, why, sizeof why));
        mg_schedule_free(&s);
    } else {
        snprintf(why, sizeof why, "%s", err);
        ok = mg_test_agree(0);
    }
    if (!ok) fprintf(stderr, "%s: %s\n", name, why);
    mg_test_report(ok, name, "p=%d", comm.pipeline.size);
}

/* A schedule from text with every send and receive written out (the lowered 1F1B printed,
   then parsed back) and a compute-only file of our own: both run exactly.              */
static void run_text(void) {
    int p = comm.pipeline.size, m = 2 * p;
    mg_schedule s, low;
    mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_1F1B, p, 1, m);
    char *text;
    size_t n;
    mg_schedule_build(&s, &d, NULL, 0);
    mg_schedule_lower(&s, &low, NULL, 0);
    n = mg_schedule_format(&low, NULL, 0);
    text = (char *)malloc(n + 1);
    mg_schedule_format(&low, text, n + 1);
    run_text_schedule(text, m, "exec: schedule text with explicit SEND/RECV runs exactly");
    free(text);
    mg_schedule_free(&low);
    mg_schedule_free(&s);

    /* compute-only, hand-made: GPipe forwards, then backwards split into I and W with every
       W deferred to the end (a valid zero-bubble-style variant)                            */
    {
        char buf[4096];
        size_t len = 0;
        int r, mb;
        for (r = 0; r < p; r++) {
            for (mb = 0; mb < m; mb++)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%dF%d ", r, mb);
            for (mb = 0; mb < m; mb++)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%dI%d ", r, mb);
            for (mb = m - 1; mb >= 0; mb--)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%dW%d%s", r, mb,
                                        mb ? " " : "\n");
        }
        run_text_schedule(buf, m, "exec: hand-written compute-only schedule runs exactly");
    }
}

/* The trace of a real run, written by all pipeline ranks, read back by the parser. */
static void run_trace(void) {
    int p = comm.pipeline.size, m = 2 * p, ok = 1, token = (int)getpid(), r;
    mg_schedule s;
    mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_ZB_H1, p, 1, m);
    mg_pipe_exec ex;
    mg_pipe_exec_desc ed = mg_pipe_exec_desc_default();
    char path[256], err[512] = "";
#ifdef MG_USE_MPI
    MPI_Bcast(&token, 1, MPI_INT, 0, MPI_COMM_WORLD);
#endif
    snprintf(path, sizeof path, "/tmp/mg_test_pipeline_trace_%d.txt", token);
    mg_schedule_build(&s, &d, NULL, 0);
    ed.schedule = &s;
    ed.msg_count = L;
    ed.cb.forward = toy_forward;
    ed.cb.backward_input = toy_backward_input;
    ed.cb.backward_weight = toy_backward_weight;
    ed.cb.user = &model;
    ed.trace = 1;
    if (mg_pipe_exec_init(&ex, &comm, &ed, err, sizeof err) == 0) {
        toy_serial(&model, p, m, p);
        mg_pipe_exec_run(&ex);
        ok = toy_check(&model, &s, comm.pipeline.rank);
        if (mg_pipe_exec_write_trace(&ex, path, err, sizeof err)) ok = 0;
        mg_pipe_exec_free(&ex);
    } else {
        ok = 0;
    }
    ok = mg_test_agree(ok);
    if (ok && comm.world_rank == 0) {
        mg_pipe_timeline tl;
        if (mg_pipe_trace_load(path, &tl, err, sizeof err) == 0) {
            int computes = 0, i, want = s.start[p];
            for (i = 0; i < tl.n_events; i++) computes += tl.events[i].a.op != MG_PIPE_COMM;
            double idle = 0;
            ok = tl.p == p && computes == want && tl.makespan > 0;
            for (r = 0; r < p && ok; r++) {
                idle = mg_pipe_idle_fraction(&tl, r);
                ok = idle >= 0 && idle <= 1 && tl.peak_in_flight[r] <= p;
            }
            if (!ok)
                snprintf(err, sizeof err, "%d compute events for %d actions, makespan %.9g s, "
                         "idle fraction %.17g (rank %d)", computes, want, tl.makespan, idle, r - 1);
            mg_pipe_timeline_free(&tl);
        } else {
            ok = 0;
        }
        remove(path);
    }
    mg_test_report(mg_test_agree(ok), "exec: trace written by every rank reads back", "%s", err);
    mg_schedule_free(&s);
}

/* The comm_timer hook (gpt_train's GPU timers record CUDA events in it): every posted
   send/recv group is bracketed by one start and one stop of its kind, never nested, and the
   kinds it names are the kinds time_comm's host clock times at the groups' completions.   */
typedef struct { int open, pairs, bad, kinds; } comm_timer_log;
static void count_comm_timer(void *user, int kind, int start) {
    comm_timer_log *c = (comm_timer_log *)user;
    if (kind < 1 || kind >= MG_PIPE_COMM_KINDS || (start ? c->open != 0 : c->open != kind))
        c->bad++;
    c->open = start ? kind : 0;
    if (!start) {
        c->pairs++;
        c->kinds |= 1 << kind;
    }
}
static void run_comm_timer(void) {
    int p = comm.pipeline.size, m = 2 * p, ok = 0, k, timed = 0;
    mg_schedule s;
    mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_1F1B, p, 1, m);
    mg_pipe_exec ex;
    mg_pipe_exec_desc ed = mg_pipe_exec_desc_default();
    comm_timer_log log = {0, 0, 0, 0};
    char err[512] = "";
    mg_schedule_build(&s, &d, NULL, 0);
    ed.schedule = &s;
    ed.msg_count = L;
    ed.cb.forward = toy_forward;
    ed.cb.backward = toy_backward;
    ed.cb.user = &model;
    ed.time_comm = 1;
    ed.comm_timer = count_comm_timer;
    ed.comm_timer_user = &log;
    if (mg_pipe_exec_init(&ex, &comm, &ed, err, sizeof err) == 0) {
        toy_serial(&model, p, m, p);
        mg_pipe_exec_run(&ex);
        for (k = 1; k < MG_PIPE_COMM_KINDS; k++)
            if (ex.comm_ms[k] > 0) timed |= 1 << k;
        ok = toy_check(&model, &s, comm.pipeline.rank) && log.bad == 0 && log.open == 0 &&
             (p == 1 ? log.pairs == 0 : log.pairs > 0) && log.kinds == timed;
        mg_pipe_exec_free(&ex);
    }
    mg_test_report(mg_test_agree(ok), "exec: comm_timer brackets each send/recv group once, "
                   "with the kinds time_comm times", "%s%d pairs, %d unmatched, kinds %#x vs "
                   "time_comm's %#x", err, log.pairs, log.bad, (unsigned)log.kinds,
                   (unsigned)timed);
    mg_schedule_free(&s);
}

/* Forward-only (evaluation): interleaved forwards, the loss exact, no backward called, every
   buffer back in the pool after each forward.                                             */
static void run_forward_only(void) {
    int p = comm.pipeline.size, v = 2, m = 2 * p, ok = 1, st, mb, r = comm.pipeline.rank;
    mg_schedule s;
    mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_INTERLEAVED, p, v, m);
    mg_pipe_exec ex;
    mg_pipe_exec_desc ed = mg_pipe_exec_desc_default();
    char err[512] = "";
    d.forward_only = 1;
    ed.schedule = &s;
    ed.msg_count = L;
    ed.cb.forward = toy_forward;   /* no backward callbacks: none are needed                 */
    ed.cb.user = &model;
    ed.poison = 1;
    if (mg_schedule_build(&s, &d, err, sizeof err) ||
        mg_pipe_exec_init(&ex, &comm, &ed, err, sizeof err)) {
        ok = 0;
    } else {
        toy_serial(&model, p * v, m, p);
        mg_pipe_exec_run(&ex);
        ok = !model.bad && ex.n_free == ex.n_buffers;
        for (st = r; st < p * v; st += p)
            for (mb = 0; mb < m; mb++)
                ok &= model.calls[st][mb][MG_PIPE_F] == 1 && model.calls[st][mb][MG_PIPE_B] == 0;
        if ((p * v - 1) % p == r)
            for (mb = 0; mb < m; mb++) ok &= (double)model.got_loss[mb] == model.loss[mb];
        mg_pipe_exec_free(&ex);
        mg_schedule_free(&s);
    }
    if (!ok) fprintf(stderr, "rank %d forward-only: %s %s\n", comm.world_rank, err, model.why);
    mg_test_report(mg_test_agree(ok), "exec: forward-only interleaved gives the exact loss", "p=%d", p);
}

/* Bad executor input: one clear error, before any communication. */
static void run_bad_input(void) {
    int p = comm.pipeline.size;
    mg_schedule s;
    mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_ZB_H1, p, 1, p);
    mg_pipe_exec ex;
    mg_pipe_exec_desc ed = mg_pipe_exec_desc_default();
    char err[512] = "";
    int rc;
    mg_schedule_build(&s, &d, NULL, 0);
    ed.schedule = &s;
    ed.msg_count = L;
    ed.cb.forward = toy_forward;
    ed.cb.backward = toy_backward;   /* ZB-H1 needs backward_input / backward_weight         */
    rc = mg_pipe_exec_init(&ex, &comm, &ed, err, sizeof err);
    mg_test_report(mg_test_agree(rc != 0 && strstr(err, "backward_input") != NULL),
                   "exec: missing callbacks rejected", "%s", err);
    mg_schedule_free(&s);
    d = mg_schedule_desc_default(MG_SCHED_1F1B, p + 1, 1, p + 1);
    mg_schedule_build(&s, &d, NULL, 0);
    ed.schedule = &s;
    ed.cb.backward = toy_backward;
    rc = mg_pipe_exec_init(&ex, &comm, &ed, err, sizeof err);
    mg_test_report(mg_test_agree(rc != 0 && strstr(err, "pipeline group has") != NULL),
                   "exec: schedule for another p rejected", "%s", err);
    mg_schedule_free(&s);
}

int main(int argc, char **argv) {
    int n;
    mg_comm_init(&comm, &argc, &argv);
    mg_test_quiet = comm.world_rank != 0;
    {
        mg_ctx_desc desc = {MG_DEVICE_CPU, 0, 1, (size_t)4 << 20};
        mg_ctx_init(&ctx, &desc);
    }
    comm.timeout_s = 60;
    n = comm.world_size;
    mg_comm_setup_groups(&comm, &ctx, 1, n, 1);
    run_all(RUN_PLAIN, "host buffers");
    run_text();
    run_trace();
    run_comm_timer();
    run_forward_only();
    run_bad_input();
    if (n > 1) {
        int mode, ok = 1;
        char why[512] = "";
        mg_schedule s;
        mg_schedule_desc d = mg_schedule_desc_default(MG_SCHED_INTERLEAVED, n, 2, 2 * n);
        mg_schedule_build(&s, &d, NULL, 0);
        for (mode = RUN_HOOK; mode <= RUN_ARENA && ok; mode++) {
            ok = mg_test_agree(run(&s, mode, why, sizeof why));
            if (!ok) fprintf(stderr, "mode %d: %s\n", mode, why);
        }
        mg_test_report(ok, "exec: custom transfer hook and arena buffers", "interleaved p=%d", n);
        mg_schedule_free(&s);
    }
    if (n == 4) {   /* t = 2, p = 2: Megatron's scatter/gather over the tensor group          */
        mg_comm_setup_groups(&comm, &ctx, 2, 2, 1);
        run_all(RUN_SCATTER_GATHER, "scatter/gather");
    }
    n = mg_test_summary();
    mg_ctx_free(&ctx);
    mg_comm_finalize(&comm);
    return n;
}
