/* mg_pipeline.h — pipeline schedules as lists of actions, their executor, simulator and picture.
   Part of megatron.h; needs only mg_comm.h (and through it mg_tensor.h), never the model.
   MIT license at the end of the file.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_pipeline.h"       (includes mg_comm.h and mg_tensor.h)

   TOUR
     1. Actions. A pipeline of p ranks with v model chunks per rank has S = p·v VIRTUAL STAGES;
        virtual stage s runs on pipeline rank s % p as its chunk s / p (Megatron's layout: rank
        i holds chunks i, i+p, i+2p, …). An action names a virtual stage, an operation and a
        microbatch: F forward; B full backward; I backward-input (activation gradient) and W
        backward-weight (parameter gradient), the two halves of B that zero-bubble schedules
        run apart; SEND_F / RECV_F / SEND_B / RECV_B move an activation forward or a gradient
        backward between ranks.
     2. Schedules, pure functions (kind, p, v, m, rank) -> actions of that rank: GPipe, 1F1B
        (PipeDream-Flush), interleaved 1F1B (Megatron's warm-up count and chunk order, with its
        microbatch-group rule) and ZB-H1 (Qi et al., ICLR 2024). Sends and receives are derived
        from the compute order (section 4) unless a schedule spells them out.
     3. Text form, printed and parsed: one line per pipeline rank, tokens "<stage><OP><mb>"
        with the VIRTUAL stage index (as PyTorch's torch.distributed.pipelining writes them):
            0F0 0F1 0B0 0F2 0B1 0B2        rank 0 of a 2-stage 1F1B, m = 3
            1F0 1B0 1F1 1B1 1F2 1B2        rank 1
        so a user can write a schedule into a file and run it (gpt_train
        --pipeline-schedule-file FILE). '#' starts a comment; blank lines are ignored.
     4. Validation and lowering. Every schedule, built in or read, is checked before it runs:
        stage/rank/microbatch ranges; every (stage, microbatch) runs F once and B once or I and
        W once each; B/I after its F, W after its I; the data dependencies across stages can
        all be met (no cycle: simulated symbolically over the whole pipeline); every send has
        its receive, in the same order on both ranks; and the executor's send/recv groups
        cannot deadlock (its protocol simulated too). Errors name the offending action.
        Lowering turns a compute-only schedule into the explicit one the executor runs: both
        halves of each message go into the groups each rank reaches first once the message is
        produced in the ideal timeline — deadlock-free by construction (proof at
        mg__pipe_lower_unchecked); in 1F1B each send_forward shares its group with the next
        recv_backward, as in Megatron's p2p_communication; receives follow the sender's order.
     5. Executor: runs one rank's lowered actions through the model's callbacks and
        mg_group_start / mg_send / mg_recv / mg_group_end_async on the pipeline group, one
        group in flight: it is completed (mg_wait) before the next group is posted, or before
        a compute that needs what it receives. It owns the message buffers (one pool allocated
        at init — from the context's arena — sized by a dry run; nothing allocates while
        running) and hands them to the callbacks. A transfer hook replaces the plain send/recv
        of one message; Megatron's scatter/gather over the tensor-parallel group is built in
        on top of it. Optional trace of every action and every wait.
     6. Simulator: the timeline of every rank from per-action costs (F, B, W, transfer), the
        bubble fraction, peak microbatches in flight; a measured trace (written by the
        executor) gives the same timeline from a real run; both draw as SVG like the paper's
        schedule figures (tools/pipeline_sim).

   USING IT FROM A MODEL (what megatron.h does)
       mg_schedule sched; char err[512];
       mg_schedule_desc sd = mg_schedule_desc_default(MG_SCHED_1F1B, p, v, m);
       if (mg_schedule_build(&sched, &sd, err, sizeof err)) { print err on rank 0; exit(1); }
         -- or mg_schedule_load(&sched, "my.sched", p, v, m, err, sizeof err)
       mg_pipe_exec_desc ed = mg_pipe_exec_desc_default();
       ed.schedule = &sched; ed.ctx = ctx;
       ed.msg_count = (int64_t)s_local * b * h; ed.msg_dtype = MG_BF16;   (one [s, b, h] tensor)
       ed.cb.forward = my_forward; ed.cb.backward = my_backward;          (io: section 5)
       ed.cb.backward_input = …; ed.cb.backward_weight = …;              (when I/W are used)
       ed.cb.user = model; ed.scatter_gather = 1;                         (when t > 1)
       mg_pipe_exec ex; if (mg_pipe_exec_init(&ex, comm, &ed, err, sizeof err)) { … }
       each iteration: mg_pipe_exec_run(&ex);     then reduce gradients, step the optimizer
       mg_pipe_exec_free(&ex); mg_schedule_free(&sched);
   init validates before any communication (same verdict on every rank) and takes
   ex.n_buffers × msg_count elements from ctx's arena once. mg_schedule_peak_in_flight tells
   how many (chunk, microbatch) activations each rank holds at once (the model's own store).
   Suggested trainer flags: --pipeline-schedule gpipe|1f1b|interleaved|zb-h1 (default 1f1b,
   interleaved when --num-layers-per-virtual-pipeline-stage gives v > 1),
   --pipeline-schedule-file FILE, --microbatch-group-size-per-virtual-pipeline-stage N
   (Megatron's name; mg_schedule_desc.microbatch_group), --pipeline-trace FILE (ed.trace = 1,
   then mg_pipe_exec_write_trace after a run; tools/pipeline_sim --trace FILE reads it).
   Callbacks get (chunk, microbatch) and the buffers: forward reads io->input (the activation
   from the previous virtual stage; NULL on stage 0, where the model reads its data) and
   writes io->output (NULL on the last stage, which computes the loss). backward /
   backward_input read io->grad_output (NULL on the last stage: the model seeds d loss) and
   write io->grad_input (NULL on stage 0). io->input and io->grad_output stay valid until the
   last backward action of that (chunk, microbatch) — B, or W when split — so W can use them.
   The model keeps its own saved activations, keyed by (chunk, microbatch).

   Errors: functions that can fail return 0 (or a count) on success and -1 on failure with one
   line in err[0..errlen) (err may be NULL). Nothing here prints or exits.
*/
#ifndef MG_PIPELINE_H
#define MG_PIPELINE_H

#include <stdio.h>
#include "mg_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
   1. Actions
   ------------------------------------------------------------------------------------------ */
typedef enum {
    MG_PIPE_F = 0,       /* forward of (stage, mb)                                            */
    MG_PIPE_B,           /* full backward: input and weight gradients                         */
    MG_PIPE_I,           /* backward-input: the activation gradient only (ZB's "B")           */
    MG_PIPE_W,           /* backward-weight: the parameter gradients of an earlier I           */
    MG_PIPE_SEND_F,      /* send the output of F(stage, mb) to stage + 1                       */
    MG_PIPE_RECV_F,      /* receive the input of F(stage, mb) from stage − 1                   */
    MG_PIPE_SEND_B,      /* send the input gradient of B/I(stage, mb) to stage − 1             */
    MG_PIPE_RECV_B,      /* receive the output gradient of B/I(stage, mb) from stage + 1       */
    MG_PIPE_COMM,        /* timelines only: a wait for a send/recv group to complete           */
    MG_PIPE_OPS
} mg_pipe_op;

typedef struct mg_pipe_action {
    int op;              /* mg_pipe_op                                                         */
    int stage;           /* VIRTUAL stage s in [0, p·v): rank s % p, chunk s / p               */
    int mb;              /* microbatch in [0, m)                                               */
} mg_pipe_action;

/* "F", "B", …, "RECV_B". */
MGDEF const char *mg_pipe_op_name(int op);
/* Writes the token "<stage><OP><mb>" (e.g. "2F3", "1SEND_B0"); returns buf. 24 bytes suffice. */
MGDEF char *mg_pipe_action_str(const mg_pipe_action *a, char *buf, size_t buflen);

/* ---------------------------------------------------------------------------------------------
   2. Schedules
   ------------------------------------------------------------------------------------------ */
typedef enum {
    MG_SCHED_GPIPE = 0,       /* all forwards, then all backwards (v ≥ 1, chunk by chunk)      */
    MG_SCHED_1F1B,            /* PipeDream-Flush: p−rank−1 warm-up forwards (v = 1)            */
    MG_SCHED_INTERLEAVED,     /* Megatron's interleaved 1F1B over v chunks                     */
    MG_SCHED_ZB_H1,           /* zero bubble H1: backward split into I and W (v = 1)           */
    MG_SCHED_CUSTOM,          /* read from text                                                 */
    MG_SCHED_KINDS
} mg_schedule_kind;

typedef struct mg_schedule_desc {
    int kind;                 /* mg_schedule_kind                                               */
    int p, v, m;              /* pipeline ranks, chunks per rank, microbatches per iteration    */
    int microbatch_group;     /* interleaved: Megatron's microbatch_group_size_per_vp_stage N;
                                 0 = p. Rule: p ≤ N ≤ m and (m mod N = 0 or m mod N ≥ p).     */
    int forward_only;         /* the kind's forwards only (evaluation)                          */
} mg_schedule_desc;

/* A schedule of the whole pipeline: rank r's actions are actions[start[r] .. start[r+1]). */
typedef struct mg_schedule {
    int kind;                 /* mg_schedule_kind                                               */
    int p, v, m;
    int forward_only;
    int explicit_comm;        /* 1: SEND/RECV actions are spelled out (lowered or read so)     */
    int *start;               /* p + 1 offsets                                                  */
    mg_pipe_action *actions;
} mg_schedule;

MGDEF mg_schedule_desc mg_schedule_desc_default(int kind, int p, int v, int m);
/* "gpipe", "1f1b", "interleaved", "zb-h1", "custom". */
MGDEF const char *mg_schedule_kind_name(int kind);
/* Accepts the names above (case-insensitive) and the aliases "interleaved-1f1b",
   "pipedream-flush", "zbh1", "zb1p". Returns the kind or -1.                                 */
MGDEF int mg_schedule_kind_parse(const char *name);

/* The pure function: actions of pipeline rank `rank` (compute only, sends/recvs derived).
   Writes up to cap actions to out (out may be NULL to ask for the count); returns the count,
   or -1 with err for an invalid description.                                                 */
MGDEF int mg_schedule_rank_actions(const mg_schedule_desc *d, int rank, mg_pipe_action *out,
                                   int cap, char *err, size_t errlen);
/* Builds every rank's list and validates it (section 4). */
MGDEF int mg_schedule_build(mg_schedule *s, const mg_schedule_desc *d, char *err, size_t errlen);
MGDEF void mg_schedule_free(mg_schedule *s);
/* Actions of one rank (0 <= rank < p; another rank fails through mg_fatal). */
MGDEF int mg_schedule_count(const mg_schedule *s, int rank);
MGDEF const mg_pipe_action *mg_schedule_rank(const mg_schedule *s, int rank);

/* ---------------------------------------------------------------------------------------------
   3. Text form
      One line per pipeline rank, in rank order; tokens separated by blanks (or commas or
      semicolons, for CSV-minded tools); "#" to the end of a line is a comment; blank lines
      are skipped. Token = <stage><OP><mb>, OP one of F B I W
      SEND_F RECV_F SEND_B RECV_B, stage = virtual stage (which must be on that line's rank:
      stage % p == rank). Either no SEND/RECV at all (they are derived, section 4) or all of
      them; consecutive SEND/RECV tokens form one group (posted together, completed together).
   ------------------------------------------------------------------------------------------ */
/* Parses and validates. p, v, m: the pipeline the schedule is for; 0 = take it from the text
   (p = number of lines, v = ⌈(largest stage + 1) / p⌉, m = largest microbatch + 1).         */
MGDEF int mg_schedule_parse(mg_schedule *s, const char *text, int p, int v, int m, char *err,
                            size_t errlen);
MGDEF int mg_schedule_load(mg_schedule *s, const char *path, int p, int v, int m, char *err,
                           size_t errlen);
/* Prints the text form (one line per rank, "\n"-terminated) into buf, snprintf-style: returns
   the length the whole text needs, writing at most buflen bytes including the final NUL.    */
MGDEF size_t mg_schedule_format(const mg_schedule *s, char *buf, size_t buflen);
MGDEF int mg_schedule_write(const mg_schedule *s, FILE *f);

/* ---------------------------------------------------------------------------------------------
   4. Validation and lowering
   ------------------------------------------------------------------------------------------ */
/* All the checks listed in the tour; 0 when the schedule is runnable. */
MGDEF int mg_schedule_validate(const mg_schedule *s, char *err, size_t errlen);
/* out = s with every send and receive explicit (a copy when s is explicit already). The
   schedule must be valid. out must be freed with mg_schedule_free.                           */
MGDEF int mg_schedule_lower(const mg_schedule *s, mg_schedule *out, char *err, size_t errlen);
/* Per rank, the largest number of (chunk, microbatch) pairs whose forward has run and whose
   last backward action (B, or W when split) has not: activations held. peak: p ints.       */
MGDEF void mg_schedule_peak_in_flight(const mg_schedule *s, int *peak);

/* ---------------------------------------------------------------------------------------------
   5. Executor
   ------------------------------------------------------------------------------------------ */
typedef struct mg_pipe_io {
    int stage, chunk, mb;     /* virtual stage = chunk·p + pipeline rank                        */
    int op;                   /* MG_PIPE_F, _B, _I or _W                                         */
    const void *input;        /* F, B, I, W: activation from stage−1 (NULL on stage 0)          */
    void *output;             /* F: activation for stage+1 (NULL on the last stage)              */
    const void *grad_output;  /* B, I, W: d loss / d output from stage+1 (NULL on last stage)   */
    void *grad_input;         /* B, I: d loss / d input for stage−1 (NULL on stage 0)            */
} mg_pipe_io;
/* Buffers hold msg_count elements of msg_dtype, on the context's device. */
typedef void (*mg_pipe_fn)(void *user, const mg_pipe_io *io);
typedef struct mg_pipe_callbacks {
    mg_pipe_fn forward;           /* F                                                           */
    mg_pipe_fn backward;          /* B (needed when the schedule has B)                           */
    mg_pipe_fn backward_input;    /* I (needed when the schedule has I)                           */
    mg_pipe_fn backward_weight;   /* W                                                            */
    void *user;
} mg_pipe_callbacks;

/* Transfer hook: how one message travels. The executor calls send/recv between
   mg_group_start and mg_group_end_async for each message of a group (so they may only post
   mg_send / mg_recv), then after_recv once per received message when the group has
   completed (collectives are allowed there). peer is a rank of comm->pipeline. Leave
   the hook zeroed for the default (the whole message to the peer); scatter_gather = 1 in the
   executor's description installs Megatron's scatter/gather: each of the t tensor-parallel
   ranks sends the 1/t slice [tp·n/t, (tp+1)·n/t) of the message (cross-node volume n/t) and
   after_recv all-gathers the slices over comm->tensor (msg_count must divide by t).        */
typedef struct mg_pipe_transfer {
    void (*send)(void *user, mg_comm *comm, const void *buf, int64_t count, mg_dtype dt,
                 int peer);
    void (*recv)(void *user, mg_comm *comm, void *buf, int64_t count, mg_dtype dt, int peer);
    void (*after_recv)(void *user, mg_comm *comm, void *buf, int64_t count, mg_dtype dt);
    void *user;
} mg_pipe_transfer;

typedef struct mg_pipe_exec_desc {
    const mg_schedule *schedule;  /* p must equal comm->pipeline.size; kept by pointer          */
    mg_ctx *ctx;                  /* buffers from its arena (device memory on CUDA); NULL: host */
    int64_t msg_count;            /* elements of one activation message (= one gradient)       */
    mg_dtype msg_dtype;
    mg_pipe_callbacks cb;
    mg_pipe_transfer transfer;    /* zero: default (or scatter/gather)                          */
    int scatter_gather;           /* 1: Megatron's scatter/gather over comm->tensor              */
    int trace;                    /* 1: record start/end of every compute and group wait       */
    int poison;                   /* 1 (host buffers only): fill released buffers with NaN      */
    int time_comm;                /* 1: add the time of each send/recv group's completion to
                                     comm_ms (with ctx: between two mg_sync, device included) */
    void (*comm_timer)(void *user, int kind, int start); /* optional: called with start 1
                                     before each send/recv group is posted and 0 after, with
                                     the group's kind (below); a GPU caller records CUDA events
                                     on the communication stream there (mg_comm_stream)     */
    void *comm_timer_user;
} mg_pipe_exec_desc;

/* A send/recv group's kind: a bit per operation it holds — 1 << (op − MG_PIPE_SEND_F) for
   SEND_F, RECV_F, SEND_B, RECV_B — and its name in Megatron-LM's p2p timer vocabulary,
   "forward-send", "backward-recv", "forward-send-backward-recv", … (kind 1 … 15).           */
#define MG_PIPE_COMM_KINDS 16
MGDEF const char *mg_pipe_comm_kind_name(int kind);

typedef struct mg_pipe_trace_rec { int item; double start, end; } mg_pipe_trace_rec;

typedef struct mg_pipe_exec {
    mg_comm *comm;
    mg_pipe_exec_desc desc;
    mg_schedule plan;             /* the lowered schedule; this rank's items are run            */
    int rank, p, S, m;
    size_t msg_bytes;
    int n_buffers;                /* pool size found by the dry run                             */
    void **buffers;               /* n_buffers message buffers                                  */
    int *free_ids, n_free;
    int *in_buf, *gout_buf;       /* [S·m]: buffer of the input / output gradient of (s, mb)    */
    int *out_buf, *gin_buf;       /* [S·m]: output / input gradient waiting to be sent          */
    int *recv_item_f, *recv_item_b; /* [S·m]: plan item receiving (s, mb)'s input / grad, or −1 */
    int pending_first, pending_end; /* the send/recv group in flight: items [first, end)        */
    mg_request pending_req;
    mg_pipe_trace_rec *trace;     /* per compute and per group wait (when desc.trace)          */
    int n_trace;
    double t0;
    int iteration;
    double comm_ms[MG_PIPE_COMM_KINDS]; /* desc.time_comm: ms spent completing groups of each
                                     kind, summed over runs (the caller resets it)            */
} mg_pipe_exec;

MGDEF mg_pipe_exec_desc mg_pipe_exec_desc_default(void);
/* Validates everything (schedule, sizes, callbacks, hook) WITHOUT communicating, lowers the
   schedule and allocates the buffer pool. Same result on every rank for the same inputs.   */
MGDEF int mg_pipe_exec_init(mg_pipe_exec *ex, mg_comm *comm, const mg_pipe_exec_desc *desc,
                            char *err, size_t errlen);
/* Runs this rank's actions once: all m microbatches forward and backward. A traced run
   starts with a barrier over the pipeline group, so the ranks' times share an origin.   */
MGDEF void mg_pipe_exec_run(mg_pipe_exec *ex);
MGDEF void mg_pipe_exec_free(mg_pipe_exec *ex);
/* Writes the trace of the last run to path: pipeline rank 0 writes the header and its lines,
   then each rank appends its own in turn (collective over comm->pipeline: barriers).
   Format: first line "mg-pipeline-trace 1 p=P v=V m=M", then "<rank> <token> <start> <end>"
   per compute and per wait for a send/recv group, times in seconds from the start of the
   run (after mg_sync when ctx is set); token is the action's text form, or COMM for a wait. */
MGDEF int mg_pipe_exec_write_trace(mg_pipe_exec *ex, const char *path, char *err,
                                   size_t errlen);

/* ---------------------------------------------------------------------------------------------
   6. Simulator, traces and pictures
   ------------------------------------------------------------------------------------------ */
typedef struct mg_pipe_costs {
    double f;                 /* forward of one chunk                                           */
    double b;                 /* backward-input I; a full backward B costs b + w                 */
    double w;                 /* backward-weight W                                              */
    double transfer;          /* one message between ranks (same-rank hand-over: 0)             */
} mg_pipe_costs;

typedef enum {
    MG_SIM_IDEAL = 0,         /* each action starts when its rank is free and its inputs have
                                 arrived: the paper's model, sends never wait                   */
    MG_SIM_GROUPS = 1         /* as the executor runs: a rank posts a send/recv group without
                                 waiting, but first completes the one it posted before, and
                                 completes it early when a compute needs what it receives;
                                 a group completes once every matching group is posted      */
} mg_sim_model;

typedef struct mg_pipe_event {
    int rank;
    mg_pipe_action a;         /* op MG_PIPE_COMM for a send/recv group                          */
    double start, end;
} mg_pipe_event;

typedef struct mg_pipe_timeline {
    int p, v, m;
    int n_events;
    mg_pipe_event *events;
    double t0, makespan;      /* events span [t0, t0 + makespan]                                */
    double *busy;             /* [p]: compute time of each rank (F, B, I, W; not COMM)          */
    double bubble_fraction;   /* Σ_r (makespan − busy_r) / Σ_r busy_r: bubble over ideal time   */
    int *peak_in_flight;      /* [p]                                                            */
} mg_pipe_timeline;

/* Simulates the schedule (lowered first for MG_SIM_GROUPS). -1 with err on a deadlock. */
MGDEF int mg_pipe_simulate(const mg_schedule *s, const mg_pipe_costs *c, int model,
                           mg_pipe_timeline *tl, char *err, size_t errlen);
/* Reads a trace written by mg_pipe_exec_write_trace. */
MGDEF int mg_pipe_trace_parse(const char *text, mg_pipe_timeline *tl, char *err,
                              size_t errlen);
MGDEF int mg_pipe_trace_load(const char *path, mg_pipe_timeline *tl, char *err, size_t errlen);
/* Idle fraction of one rank (0 <= rank < p, else mg_fatal): (makespan − busy_r) / makespan. */
MGDEF double mg_pipe_idle_fraction(const mg_pipe_timeline *tl, int rank);
/* SVG picture: one row per pipeline rank, one box per action (F blue, B/I green, W orange,
   lighter for higher chunks, labelled with the microbatch), COMM groups as thin grey bars. */
MGDEF int mg_pipe_timeline_svg(const mg_pipe_timeline *tl, const char *title, FILE *f);
MGDEF void mg_pipe_timeline_free(mg_pipe_timeline *tl);

#ifdef __cplusplus
}
#endif
#endif /* MG_PIPELINE_H */

/* =============================================================================================
   IMPLEMENTATION
   ========================================================================================== */
#if defined(MG_IMPLEMENTATION) && !defined(MG_IMPLEMENTATION_ELSEWHERE)
#ifndef MG_PIPELINE_IMPLEMENTED
#define MG_PIPELINE_IMPLEMENTED

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Limits that keep every table (p·v·m entries) and token small. */
#define MG__PIPE_MAX_ITEMS (1 << 24)
#define MG__PIPE_TRACE_MAGIC "mg-pipeline-trace"

static int mg__pipe_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}
static void *mg__pipe_malloc(size_t bytes) {
    void *ptr = MG_MALLOC(bytes ? bytes : 1);
    if (!ptr) mg_fatal(__FILE__, __LINE__, "mg_pipeline: out of host memory (%zu bytes)", bytes);
    return ptr;
}
static int *mg__pipe_ints(size_t n, int fill) {
    int *a = (int *)mg__pipe_malloc(n * sizeof(int));
    size_t i;
    for (i = 0; i < n; i++) a[i] = fill;
    return a;
}
static double *mg__pipe_doubles(size_t n, double fill) {
    double *a = (double *)mg__pipe_malloc(n * sizeof(double));
    size_t i;
    for (i = 0; i < n; i++) a[i] = fill;
    return a;
}
static mg_pipe_action mg__pipe_act(int op, int stage, int mb) {
    mg_pipe_action a;
    a.op = op;
    a.stage = stage;
    a.mb = mb;
    return a;
}
static int mg__pipe_is_comm(int op) { return op >= MG_PIPE_SEND_F && op <= MG_PIPE_RECV_B; }
static int mg__pipe_is_bwd(int op) { return op == MG_PIPE_B || op == MG_PIPE_I; }
static int mg__pipe_tolower(int c) { return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c; }
static int mg__pipe_streqi(const char *a, const char *b) {
    while (*a && *b && mg__pipe_tolower((unsigned char)*a) == mg__pipe_tolower((unsigned char)*b)) {
        a++;
        b++;
    }
    return *a == 0 && *b == 0;
}

/* ---------------------------------------------------------------------------------------------
   1. Actions
   ------------------------------------------------------------------------------------------ */
static const char *const mg__pipe_op_names[MG_PIPE_OPS] = {
    "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "COMM"};

MGDEF const char *mg_pipe_op_name(int op) {
    return (op >= 0 && op < MG_PIPE_OPS) ? mg__pipe_op_names[op] : "?";
}
MGDEF char *mg_pipe_action_str(const mg_pipe_action *a, char *buf, size_t buflen) {
    if (a->op == MG_PIPE_COMM) snprintf(buf, buflen, "COMM");
    else snprintf(buf, buflen, "%d%s%d", a->stage, mg_pipe_op_name(a->op), a->mb);
    return buf;
}

/* Which rank a message travels between: the producer's stage s sends to s+1 (activation) or
   s−1 (gradient); the receiver's stage s receives from s−1 (RECV_F) or s+1 (RECV_B).        */
static int mg__pipe_peer_stage(const mg_pipe_action *a) {
    return (a->op == MG_PIPE_SEND_F || a->op == MG_PIPE_RECV_B) ? a->stage + 1 : a->stage - 1;
}
/* The receive that matches a send. */
static mg_pipe_action mg__pipe_matching_recv(const mg_pipe_action *send) {
    return send->op == MG_PIPE_SEND_F ? mg__pipe_act(MG_PIPE_RECV_F, send->stage + 1, send->mb)
                                      : mg__pipe_act(MG_PIPE_RECV_B, send->stage - 1, send->mb);
}

/* ---------------------------------------------------------------------------------------------
   2. Schedules
   ------------------------------------------------------------------------------------------ */
static const char *const mg__pipe_kind_names[MG_SCHED_KINDS] = {
    "gpipe", "1f1b", "interleaved", "zb-h1", "custom"};

MGDEF const char *mg_schedule_kind_name(int kind) {
    return (kind >= 0 && kind < MG_SCHED_KINDS) ? mg__pipe_kind_names[kind] : "?";
}
MGDEF int mg_schedule_kind_parse(const char *name) {
    int k;
    if (!name) return -1;
    for (k = 0; k < MG_SCHED_KINDS; k++)
        if (mg__pipe_streqi(name, mg__pipe_kind_names[k])) return k;
    if (mg__pipe_streqi(name, "interleaved-1f1b") || mg__pipe_streqi(name, "interleaved_1f1b"))
        return MG_SCHED_INTERLEAVED;
    if (mg__pipe_streqi(name, "pipedream-flush")) return MG_SCHED_1F1B;
    if (mg__pipe_streqi(name, "zbh1") || mg__pipe_streqi(name, "zb1p") ||
        mg__pipe_streqi(name, "zb_h1"))
        return MG_SCHED_ZB_H1;
    return -1;
}
MGDEF mg_schedule_desc mg_schedule_desc_default(int kind, int p, int v, int m) {
    mg_schedule_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind;
    d.p = p;
    d.v = v;
    d.m = m;
    return d;
}

/* Checks p, v, m against the limits every table relies on. */
static int mg__pipe_check_sizes(int p, int v, int m, char *err, size_t errlen) {
    if (p < 1 || v < 1 || m < 1)
        return mg__pipe_fail(err, errlen,
                             "pipeline sizes must be positive: p=%d ranks, v=%d chunks per rank, "
                             "m=%d microbatches", p, v, m);
    if ((double)p * v * m * 4.0 > (double)MG__PIPE_MAX_ITEMS)
        return mg__pipe_fail(err, errlen, "pipeline too large: p·v·m = %.0f (at most %d)",
                             (double)p * v * m, MG__PIPE_MAX_ITEMS / 4);
    return 0;
}

/* Appends actions to a caller's array (or only counts them), dropping backward actions for a
   forward-only schedule: one builder serves every kind.                                     */
typedef struct mg__pipe_emit {
    mg_pipe_action *out;
    int cap, n, forward_only;
} mg__pipe_emit;
static void mg__pipe_push(mg__pipe_emit *e, int op, int stage, int mb) {
    if (e->forward_only && op != MG_PIPE_F) return;
    if (e->out && e->n < e->cap) e->out[e->n] = mg__pipe_act(op, stage, mb);
    e->n++;
}

/* GPipe: every forward of chunk 0, then of chunk 1, …; then the backwards, last chunk first.
   Stage r of p holds all m microbatches' activations at once (peak in flight v·m).          */
static void mg__pipe_gpipe(mg__pipe_emit *e, int p, int v, int m, int r) {
    int c, mb;
    for (c = 0; c < v; c++)
        for (mb = 0; mb < m; mb++) mg__pipe_push(e, MG_PIPE_F, c * p + r, mb);
    for (c = v - 1; c >= 0; c--)
        for (mb = 0; mb < m; mb++) mg__pipe_push(e, MG_PIPE_B, c * p + r, mb);
}

/* 1F1B (PipeDream-Flush): rank r runs w = p−r−1 warm-up forwards, then alternates one forward
   with one backward, then drains the last w backwards. At most min(p−r, m) in flight.       */
static void mg__pipe_1f1b(mg__pipe_emit *e, int p, int m, int r) {
    int warm = p - r - 1 < m ? p - r - 1 : m, j;
    for (j = 0; j < warm; j++) mg__pipe_push(e, MG_PIPE_F, r, j);
    for (j = 0; j < m - warm; j++) {
        mg__pipe_push(e, MG_PIPE_F, r, warm + j);
        mg__pipe_push(e, MG_PIPE_B, r, j);
    }
    for (j = m - warm; j < m; j++) mg__pipe_push(e, MG_PIPE_B, r, j);
}

/* ZB-H1: 1F1B's order with each backward split into I (input gradient, on the critical path)
   and W (weight gradient, free to move). Rank r delays its W by r steps: W(j−r) follows
   I(j), and the r delayed W's fill the cool-down, where 1F1B's rank r would sit idle while
   the last gradients travel back. With F = B = W the bubble is (p−1)/(3m) of the ideal time
   (1F1B's (p−1)/m); every rank holds at most min(p, m) microbatches, 1F1B's largest peak
   (rank 0's).                                                                              */
static void mg__pipe_zbh1(mg__pipe_emit *e, int p, int m, int r) {
    int warm = p - r - 1 < m ? p - r - 1 : m, j, next_w = 0;
    for (j = 0; j < warm; j++) mg__pipe_push(e, MG_PIPE_F, r, j);
    for (j = 0; j < m; j++) {
        if (j < m - warm) mg__pipe_push(e, MG_PIPE_F, r, warm + j);
        mg__pipe_push(e, MG_PIPE_I, r, j);
        if (j >= r) mg__pipe_push(e, MG_PIPE_W, r, next_w++);
    }
    while (next_w < m) mg__pipe_push(e, MG_PIPE_W, r, next_w++);
}

/* Megatron's schedule table (get_schedule_table): virtual microbatch k -> (microbatch, chunk).
   Microbatches go in groups of N; a group runs through chunk 0, then chunk 1, …; the last
   group takes whatever is left (m − g0 ≤ N microbatches).                                  */
static void mg__pipe_table(int k, int m, int v, int N, int *mb, int *chunk) {
    int n_full = m > N ? (m - N + N - 1) / N : 0; /* groups g0 with g0 + N < m              */
    if (k < n_full * N * v) {
        int within = k % (N * v);
        *chunk = within / N;
        *mb = (k / (N * v)) * N + within % N;
    } else {
        int rest = m - n_full * N, kk = k - n_full * N * v;
        *chunk = kk / rest;
        *mb = n_full * N + kk % rest;
    }
}

/* Interleaved 1F1B (Megatron forward_backward_pipelining_with_interleaving): rank r runs
   warm = 2·(p−r−1) + (v−1)·N forwards (capped at v·m), then one forward and one backward per
   step, then the remaining backwards. Forward k runs chunk table(k).chunk; backward k runs
   chunk v−1−table(k).chunk on the same microbatch (get_model_chunk_id with forward=False).   */
static void mg__pipe_interleaved_step(mg__pipe_emit *e, int p, int v, int m, int N, int r,
                                      int k, int forward) {
    int mb, chunk;
    mg__pipe_table(k, m, v, N, &mb, &chunk);
    if (forward) mg__pipe_push(e, MG_PIPE_F, chunk * p + r, mb);
    else mg__pipe_push(e, MG_PIPE_B, (v - 1 - chunk) * p + r, mb);
}
static void mg__pipe_interleaved(mg__pipe_emit *e, int p, int v, int m, int N, int r) {
    int total = m * v, warm = 2 * (p - r - 1) + (v - 1) * N, k;
    if (warm > total) warm = total;
    for (k = 0; k < warm; k++) mg__pipe_interleaved_step(e, p, v, m, N, r, k, 1);
    for (k = 0; k < total - warm; k++) {
        mg__pipe_interleaved_step(e, p, v, m, N, r, warm + k, 1);
        mg__pipe_interleaved_step(e, p, v, m, N, r, k, 0);
    }
    for (k = total - warm; k < total; k++) mg__pipe_interleaved_step(e, p, v, m, N, r, k, 0);
}

MGDEF int mg_schedule_rank_actions(const mg_schedule_desc *d, int rank, mg_pipe_action *out,
                                   int cap, char *err, size_t errlen) {
    mg__pipe_emit e;
    int N;
    if (mg__pipe_check_sizes(d->p, d->v, d->m, err, errlen)) return -1;
    if (rank < 0 || rank >= d->p)
        return mg__pipe_fail(err, errlen, "rank %d is outside the pipeline (p = %d)", rank, d->p);
    if (d->kind == MG_SCHED_CUSTOM)
        return mg__pipe_fail(err, errlen,
                             "a custom schedule comes from text (mg_schedule_parse / "
                             "--pipeline-schedule-file), not from a kind");
    if (d->kind < 0 || d->kind >= MG_SCHED_KINDS)
        return mg__pipe_fail(err, errlen, "unknown schedule kind %d (gpipe, 1f1b, interleaved, "
                             "zb-h1)", d->kind);
    if ((d->kind == MG_SCHED_1F1B || d->kind == MG_SCHED_ZB_H1) && d->v != 1)
        return mg__pipe_fail(err, errlen,
                             "schedule %s runs one model chunk per rank, but v = %d: use "
                             "interleaved for v > 1", mg_schedule_kind_name(d->kind), d->v);
    N = d->microbatch_group ? d->microbatch_group : d->p;
    if (d->kind == MG_SCHED_INTERLEAVED) {
        /* Megatron's rule: p ≤ N ≤ m, and the last group is full or at least p long. */
        if (N < d->p || N > d->m)
            return mg__pipe_fail(err, errlen,
                                 "interleaved schedule: microbatch group N = %d must lie in "
                                 "[p, m] = [%d, %d]%s", N, d->p, d->m,
                                 d->m < d->p ? " (need at least p microbatches)" : "");
        if (d->m % N != 0 && d->m % N < d->p)
            return mg__pipe_fail(err, errlen,
                                 "interleaved schedule: m = %d microbatches must be a multiple "
                                 "of the microbatch group N = %d%s, or leave a remainder of at "
                                 "least p = %d (Megatron's rule)", d->m, N,
                                 d->microbatch_group ? "" : " (= p by default)", d->p);
    } else if (d->microbatch_group) {
        return mg__pipe_fail(err, errlen, "a microbatch group applies to the interleaved "
                             "schedule only, not %s", mg_schedule_kind_name(d->kind));
    }
    e.out = out;
    e.cap = out ? cap : 0;
    e.n = 0;
    e.forward_only = d->forward_only;
    switch (d->kind) {
    case MG_SCHED_GPIPE: mg__pipe_gpipe(&e, d->p, d->v, d->m, rank); break;
    case MG_SCHED_1F1B: mg__pipe_1f1b(&e, d->p, d->m, rank); break;
    case MG_SCHED_INTERLEAVED: mg__pipe_interleaved(&e, d->p, d->v, d->m, N, rank); break;
    default: mg__pipe_zbh1(&e, d->p, d->m, rank); break;
    }
    return e.n;
}

MGDEF void mg_schedule_free(mg_schedule *s) {
    if (!s) return;
    if (s->start) MG_FREE(s->start);
    if (s->actions) MG_FREE(s->actions);
    s->start = NULL;
    s->actions = NULL;
}
/* A pipeline rank of a schedule or timeline of p ranks (an index into its per-rank arrays). */
static void mg__pipe_check_rank(const char *fn, int rank, int p) {
    if (rank < 0 || rank >= p)
        mg_fatal(__FILE__, __LINE__, "%s: rank %d is outside the pipeline (p = %d)", fn, rank, p);
}
MGDEF int mg_schedule_count(const mg_schedule *s, int rank) {
    mg__pipe_check_rank("mg_schedule_count", rank, s->p);
    return s->start[rank + 1] - s->start[rank];
}
MGDEF const mg_pipe_action *mg_schedule_rank(const mg_schedule *s, int rank) {
    mg__pipe_check_rank("mg_schedule_rank", rank, s->p);
    return s->actions + s->start[rank];
}
/* An empty schedule shell with room for n actions in all. */
static void mg__pipe_alloc_schedule(mg_schedule *s, int kind, int p, int v, int m,
                                    int forward_only, int explicit_comm, int n) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->p = p;
    s->v = v;
    s->m = m;
    s->forward_only = forward_only;
    s->explicit_comm = explicit_comm;
    s->start = mg__pipe_ints((size_t)p + 1, 0);
    s->actions = (mg_pipe_action *)mg__pipe_malloc((size_t)(n > 0 ? n : 1) *
                                                    sizeof(mg_pipe_action));
}

MGDEF int mg_schedule_build(mg_schedule *s, const mg_schedule_desc *d, char *err,
                            size_t errlen) {
    int r, total = 0, n;
    char why[512];
    memset(s, 0, sizeof *s);
    for (r = 0; r < (d->p > 0 ? d->p : 1); r++) {
        n = mg_schedule_rank_actions(d, r, NULL, 0, err, errlen);
        if (n < 0) return -1;
        total += n;
    }
    mg__pipe_alloc_schedule(s, d->kind, d->p, d->v, d->m, d->forward_only, 0, total);
    for (r = 0; r < d->p; r++) {
        s->start[r + 1] = s->start[r] + mg_schedule_rank_actions(d, r, s->actions + s->start[r],
                                                                 total - s->start[r], NULL, 0);
    }
    if (mg_schedule_validate(s, why, sizeof why)) {
        mg_schedule_free(s);
        return mg__pipe_fail(err, errlen, "internal error: built-in %s schedule (p=%d v=%d "
                             "m=%d) is invalid: %s", mg_schedule_kind_name(d->kind), d->p, d->v,
                             d->m, why);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
   3. Text form
   ------------------------------------------------------------------------------------------ */
MGDEF size_t mg_schedule_format(const mg_schedule *s, char *buf, size_t buflen) {
    size_t len = 0;
    int r, i;
    char tok[32];
    if (buf && buflen) buf[0] = 0;
    for (r = 0; r < s->p; r++) {
        for (i = s->start[r]; i < s->start[r + 1]; i++) {
            size_t n;
            mg_pipe_action_str(&s->actions[i], tok, sizeof tok);
            n = strlen(tok) + 1;   /* the token and a space or the newline                     */
            if (buf && len + n < buflen) {
                memcpy(buf + len, tok, n - 1);
                buf[len + n - 1] = i + 1 < s->start[r + 1] ? ' ' : '\n';
                buf[len + n] = 0;
            }
            len += n;
        }
        if (s->start[r] == s->start[r + 1]) {   /* an empty rank still owns a line           */
            if (buf && len + 1 < buflen) { buf[len] = '\n'; buf[len + 1] = 0; }
            len++;
        }
    }
    if (buf && len >= buflen && buflen) buf[buflen - 1] = 0;
    return len;
}
MGDEF int mg_schedule_write(const mg_schedule *s, FILE *f) {
    size_t n = mg_schedule_format(s, NULL, 0);
    char *text = (char *)mg__pipe_malloc(n + 1);
    int rc;
    mg_schedule_format(s, text, n + 1);
    rc = fwrite(text, 1, n, f) == n ? 0 : -1;
    MG_FREE(text);
    return rc;
}

/* Parses one token "<stage><OP><mb>" (len characters at tok). */
static int mg__pipe_parse_token(const char *tok, int len, mg_pipe_action *a, int line, char *err,
                                size_t errlen) {
    int i = 0, digits, op, best = -1, best_len = 0;
    long stage = 0, mb = 0;
    for (digits = 0; i < len && tok[i] >= '0' && tok[i] <= '9'; i++, digits++)
        stage = stage * 10 + (tok[i] - '0');
    if (digits == 0 || digits > 7)
        return mg__pipe_fail(err, errlen, "line %d, token '%.*s': expected <stage><action>"
                             "<microbatch> such as 0F3 or 1SEND_B2", line, len, tok);
    for (op = 0; op < MG_PIPE_COMM; op++) {
        int n = (int)strlen(mg__pipe_op_names[op]);
        if (n <= len - i && n > best_len &&
            strncmp(tok + i, mg__pipe_op_names[op], (size_t)n) == 0) {
            best = op;
            best_len = n;
        }
    }
    if (best < 0) {
        int j = i;
        while (j < len && !(tok[j] >= '0' && tok[j] <= '9')) j++;
        return mg__pipe_fail(err, errlen, "line %d, token '%.*s': unknown action '%.*s' "
                             "(expected F, B, I, W, SEND_F, RECV_F, SEND_B or RECV_B)", line, len,
                             tok, j - i, tok + i);
    }
    i += best_len;
    for (digits = 0; i < len && tok[i] >= '0' && tok[i] <= '9'; i++, digits++)
        mb = mb * 10 + (tok[i] - '0');
    if (digits == 0 || digits > 7 || i != len)
        return mg__pipe_fail(err, errlen, "line %d, token '%.*s': expected <stage><action>"
                             "<microbatch> such as 0F3 or 1SEND_B2", line, len, tok);
    *a = mg__pipe_act(best, (int)stage, (int)mb);
    return 0;
}

/* Walks the text line by line; calls back per token with its rank (the index of the line
   among non-empty lines). Used twice: to count, then to fill.                            */
static int mg__pipe_scan_text(const char *text, mg_schedule *s, int fill, int *n_lines,
                              int *n_tokens, int *max_stage, int *max_mb, int *any_comm,
                              char *err, size_t errlen) {
    const char *c = text;
    int line = 1, rank = 0, count = 0;
    *max_stage = *max_mb = -1;
    *any_comm = 0;
    while (*c) {
        int had = 0;
        while (*c && *c != '\n') {
            const char *t;
            if (*c == '#') { while (*c && *c != '\n') c++; break; }
            if (*c == ' ' || *c == '\t' || *c == '\r' || *c == ',' || *c == ';') { c++; continue; }
            t = c;
            while (*c && *c != '\n' && *c != ' ' && *c != '\t' && *c != '\r' && *c != '#' &&
                   *c != ',' && *c != ';')
                c++;
            {
                mg_pipe_action a;
                if (mg__pipe_parse_token(t, (int)(c - t), &a, line, err, errlen)) return -1;
                if (a.stage > *max_stage) *max_stage = a.stage;
                if (a.mb > *max_mb) *max_mb = a.mb;
                if (mg__pipe_is_comm(a.op)) *any_comm = 1;
                if (fill) s->actions[count] = a;
                count++;
                had = 1;
            }
        }
        if (had) {
            rank++;
            if (fill) s->start[rank] = count;
        }
        if (*c == '\n') { c++; line++; }
    }
    *n_lines = rank;
    *n_tokens = count;
    return 0;
}

MGDEF int mg_schedule_parse(mg_schedule *s, const char *text, int p, int v, int m, char *err,
                            size_t errlen) {
    int lines, tokens, max_stage, max_mb, any_comm, r, i;
    char why[512];
    memset(s, 0, sizeof *s);
    if (!text) return mg__pipe_fail(err, errlen, "schedule text is missing");
    if (mg__pipe_scan_text(text, s, 0, &lines, &tokens, &max_stage, &max_mb, &any_comm, err,
                           errlen))
        return -1;
    if (lines == 0) return mg__pipe_fail(err, errlen, "schedule is empty: expected one line of "
                                         "actions per pipeline rank");
    if (p > 0 && lines != p)
        return mg__pipe_fail(err, errlen, "schedule has %d rank line%s but the pipeline has "
                             "p = %d ranks: write one line per pipeline rank", lines,
                             lines == 1 ? "" : "s", p);
    if (p <= 0) p = lines;
    if (v <= 0) v = max_stage / p + 1;
    if (m <= 0) m = max_mb + 1;
    if (tokens > MG__PIPE_MAX_ITEMS)
        return mg__pipe_fail(err, errlen, "schedule has too many actions (%d)", tokens);
    mg__pipe_alloc_schedule(s, MG_SCHED_CUSTOM, p, v, m, 0, any_comm, tokens);
    mg__pipe_scan_text(text, s, 1, &lines, &tokens, &max_stage, &max_mb, &any_comm, NULL, 0);
    /* name the first action outside the pipeline with its line's rank                      */
    for (r = 0; r < p; r++)
        for (i = s->start[r]; i < s->start[r + 1]; i++)
            if (s->actions[i].stage >= p * v) {
                char tok[32];
                int stage = s->actions[i].stage;
                mg_pipe_action_str(&s->actions[i], tok, sizeof tok);
                mg_schedule_free(s);
                return mg__pipe_fail(err, errlen, "%s on rank %d: stage %d is outside 0..%d "
                                     "(p = %d ranks × v = %d chunks)", tok, r, stage, p * v - 1,
                                     p, v);
            }
    if (mg_schedule_validate(s, why, sizeof why)) {
        mg_schedule_free(s);
        return mg__pipe_fail(err, errlen, "%s", why);
    }
    return 0;
}

/* Reads a whole text file (at most max_bytes, no NUL bytes) into a malloc'd, NUL-terminated
   string; NULL with err on failure. `what` names the file in messages.                    */
static char *mg__pipe_read_text(const char *path, const char *what, long max_bytes, char *err,
                                size_t errlen) {
    /* O_NONBLOCK: a named pipe is refused below instead of waiting for a writer forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    FILE *f = NULL;
    char *text;
    long len = -1;
    if (fd < 0) {
        mg__pipe_fail(err, errlen, "cannot open %s '%s': %s", what, path, strerror(errno));
        return NULL;
    }
    memset(&st, 0, sizeof st);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !(f = fdopen(fd, "rb"))) {
        close(fd);
        mg__pipe_fail(err, errlen, "cannot read %s '%s': %s", what, path,
                      S_ISDIR(st.st_mode) ? "it is a directory"
                                          : "not a regular file (a pipe, device or socket)");
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        len > max_bytes) {
        fclose(f);
        mg__pipe_fail(err, errlen, "cannot read %s '%s'%s", what, path,
                      len > max_bytes ? ": too large" : "");
        return NULL;
    }
    text = (char *)mg__pipe_malloc((size_t)len + 1);
    if (fread(text, 1, (size_t)len, f) != (size_t)len || memchr(text, 0, (size_t)len)) {
        fclose(f);
        MG_FREE(text);
        mg__pipe_fail(err, errlen, "cannot read %s '%s' as text", what, path);
        return NULL;
    }
    fclose(f);
    text[len] = 0;
    return text;
}

MGDEF int mg_schedule_load(mg_schedule *s, const char *path, int p, int v, int m, char *err,
                           size_t errlen) {
    char why[512], *text;
    int rc;
    memset(s, 0, sizeof *s);
    text = mg__pipe_read_text(path, "schedule file", 1L << 28, err, errlen);
    if (!text) return -1;
    rc = mg_schedule_parse(s, text, p, v, m, why, sizeof why);
    MG_FREE(text);
    if (rc) return mg__pipe_fail(err, errlen, "schedule file '%s': %s", path, why);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
   4. Validation and lowering
   ------------------------------------------------------------------------------------------ */
/* Where each (stage, microbatch)'s actions sit: item indices into s->actions (−1 = absent),
   built by one scan that also rejects malformed actions.                                    */
typedef struct mg__pipe_index {
    int S, m;
    int *f, *bwd, *w;             /* F, B-or-I, W                                             */
    int *send_f, *recv_f, *send_b, *recv_b;
    unsigned char *split;         /* 1: I + W, 0: B                                           */
} mg__pipe_index;

static void mg__pipe_index_free(mg__pipe_index *ix) {
    MG_FREE(ix->f); MG_FREE(ix->bwd); MG_FREE(ix->w);
    MG_FREE(ix->send_f); MG_FREE(ix->recv_f); MG_FREE(ix->send_b); MG_FREE(ix->recv_b);
    MG_FREE(ix->split);
}
/* Rank of a virtual stage. */
static int mg__pipe_rank_of(const mg_schedule *s, int stage) { return stage % s->p; }
/* Does the message between two stages cross ranks (p > 1)? Otherwise it is handed over. */
static int mg__pipe_crosses(const mg_schedule *s) { return s->p > 1; }

/* Scans every action once: ranges, the rank each stage lives on, each compute exactly once
   and in order on its rank (B/I after F, W after I), each send after what it sends and each
   receive before what needs it. Fills ix. */
static int mg__pipe_scan(const mg_schedule *s, mg__pipe_index *ix, char *err, size_t errlen) {
    int S = s->p * s->v, m = s->m, r, i, st, mb;
    size_t n = (size_t)S * m;
    char tok[32], tok2[32];
    memset(ix, 0, sizeof *ix);
    if (mg__pipe_check_sizes(s->p, s->v, s->m, err, errlen)) return -1;
    ix->S = S;
    ix->m = m;
    ix->f = mg__pipe_ints(n, -1); ix->bwd = mg__pipe_ints(n, -1); ix->w = mg__pipe_ints(n, -1);
    ix->send_f = mg__pipe_ints(n, -1); ix->recv_f = mg__pipe_ints(n, -1);
    ix->send_b = mg__pipe_ints(n, -1); ix->recv_b = mg__pipe_ints(n, -1);
    ix->split = (unsigned char *)mg__pipe_malloc(n);
    memset(ix->split, 0, n);
    for (r = 0; r < s->p; r++) {
        for (i = s->start[r]; i < s->start[r + 1]; i++) {
            const mg_pipe_action *a = &s->actions[i];
            int *slot, k;
            if (a->op < 0 || a->op >= MG_PIPE_COMM)
                return mg__pipe_fail(err, errlen, "rank %d: action %d has an unknown operation "
                                     "%d", r, i - s->start[r], a->op);
            mg_pipe_action_str(a, tok, sizeof tok);
            if (a->stage < 0 || a->stage >= S)
                return mg__pipe_fail(err, errlen, "%s on rank %d: stage %d is outside 0..%d "
                                     "(p = %d ranks × v = %d chunks)", tok, r, a->stage, S - 1,
                                     s->p, s->v);
            if (a->mb < 0 || a->mb >= m)
                return mg__pipe_fail(err, errlen, "%s on rank %d: microbatch %d is outside "
                                     "0..%d (m = %d)", tok, r, a->mb, m - 1, m);
            if (mg__pipe_rank_of(s, a->stage) != r)
                return mg__pipe_fail(err, errlen, "%s is on rank %d's line, but stage %d runs "
                                     "on rank %d (stage mod p)", tok, r, a->stage,
                                     mg__pipe_rank_of(s, a->stage));
            if (s->forward_only && a->op != MG_PIPE_F && a->op != MG_PIPE_SEND_F &&
                a->op != MG_PIPE_RECV_F)
                return mg__pipe_fail(err, errlen, "%s on rank %d: a forward-only schedule has "
                                     "no backward", tok, r);
            if (mg__pipe_is_comm(a->op)) {
                int peer = mg__pipe_peer_stage(a);
                if (!s->explicit_comm)
                    return mg__pipe_fail(err, errlen, "%s on rank %d: send/recv in a schedule "
                                         "marked compute-only", tok, r);
                if (s->p == 1)
                    return mg__pipe_fail(err, errlen, "%s on rank 0: with p = 1 every stage is "
                                         "on rank 0 and nothing is sent; remove it", tok);
                if (peer < 0 || peer >= S)
                    return mg__pipe_fail(err, errlen, "%s on rank %d: stage %d has no stage %d "
                                         "to %s", tok, r, a->stage, peer,
                                         (a->op == MG_PIPE_SEND_F || a->op == MG_PIPE_SEND_B)
                                             ? "send to" : "receive from");
            }
            k = a->stage * m + a->mb;
            st = a->stage;
            mb = a->mb;
            slot = a->op == MG_PIPE_F ? &ix->f[k]
                 : mg__pipe_is_bwd(a->op) ? &ix->bwd[k]
                 : a->op == MG_PIPE_W ? &ix->w[k]
                 : a->op == MG_PIPE_SEND_F ? &ix->send_f[k]
                 : a->op == MG_PIPE_RECV_F ? &ix->recv_f[k]
                 : a->op == MG_PIPE_SEND_B ? &ix->send_b[k] : &ix->recv_b[k];
            if (*slot >= 0) {
                const mg_pipe_action *first = &s->actions[*slot];
                if (first->op != a->op)   /* B and I for the same (stage, mb) */
                    return mg__pipe_fail(err, errlen, "%s on rank %d: stage %d microbatch %d "
                                         "already has %s; use either B or I + W", tok, r, st,
                                         mb, mg_pipe_action_str(first, tok2, sizeof tok2));
                return mg__pipe_fail(err, errlen, "%s appears twice on rank %d", tok, r);
            }
            *slot = i;
            switch (a->op) {
            case MG_PIPE_F:
                if (s->explicit_comm && st > 0 && mg__pipe_crosses(s) && ix->recv_f[k] < 0)
                    return mg__pipe_fail(err, errlen, "%s on rank %d runs before its input "
                                         "arrives: put %dRECV_F%d before it", tok, r, st, mb);
                break;
            case MG_PIPE_B: case MG_PIPE_I:
                ix->split[k] = a->op == MG_PIPE_I;
                if (ix->f[k] < 0)
                    return mg__pipe_fail(err, errlen, "%s on rank %d comes before its forward "
                                         "%dF%d", tok, r, st, mb);
                if (s->explicit_comm && st < S - 1 && mg__pipe_crosses(s) && ix->recv_b[k] < 0)
                    return mg__pipe_fail(err, errlen, "%s on rank %d runs before its output "
                                         "gradient arrives: put %dRECV_B%d before it", tok, r,
                                         st, mb);
                break;
            case MG_PIPE_W:
                if (ix->bwd[k] >= 0 && !ix->split[k])
                    return mg__pipe_fail(err, errlen, "%s on rank %d follows the full backward "
                                         "%dB%d; W completes an I (%dI%d) only", tok, r, st, mb,
                                         st, mb);
                if (ix->bwd[k] < 0)
                    return mg__pipe_fail(err, errlen, "%s on rank %d comes before %dI%d: W "
                                         "needs the gradient its own I computes", tok, r, st,
                                         mb);
                break;
            case MG_PIPE_SEND_F:
                if (ix->f[k] < 0)
                    return mg__pipe_fail(err, errlen, "%s on rank %d comes before %dF%d, whose "
                                         "output it sends", tok, r, st, mb);
                break;
            case MG_PIPE_SEND_B:
                if (ix->bwd[k] < 0)
                    return mg__pipe_fail(err, errlen, "%s on rank %d comes before the backward "
                                         "of stage %d microbatch %d, whose gradient it sends",
                                         tok, r, st, mb);
                break;
            default: break;   /* receives: checked where their data is used                */
            }
        }
    }
    /* Completeness: every (stage, mb) forward once; backward once (B, or I and W); every
       message that crosses ranks sent once (receives were required above).                  */
    for (st = 0; st < S; st++) {
        for (mb = 0; mb < m; mb++) {
            int k = st * m + mb, rk = mg__pipe_rank_of(s, st);
            if (ix->f[k] < 0)
                return mg__pipe_fail(err, errlen, "stage %d microbatch %d never runs forward: "
                                     "add %dF%d to rank %d's line", st, mb, st, mb, rk);
            if (!s->forward_only) {
                if (ix->bwd[k] < 0)
                    return mg__pipe_fail(err, errlen, "stage %d microbatch %d has no backward: "
                                         "add %dB%d (or %dI%d and %dW%d) to rank %d's line", st,
                                         mb, st, mb, st, mb, st, mb, rk);
                if (ix->split[k] && ix->w[k] < 0)
                    return mg__pipe_fail(err, errlen, "%dI%d on rank %d has no %dW%d (its "
                                         "weight gradient)", st, mb, rk, st, mb);
            }
            if (s->explicit_comm && mg__pipe_crosses(s)) {
                if (st < S - 1 && ix->send_f[k] < 0)
                    return mg__pipe_fail(err, errlen, "the output of %dF%d is never sent: add "
                                         "%dSEND_F%d after it on rank %d", st, mb, st, mb, rk);
                if (!s->forward_only && st > 0 && ix->send_b[k] < 0)
                    return mg__pipe_fail(err, errlen, "the input gradient of stage %d "
                                         "microbatch %d is never sent: add %dSEND_B%d after its "
                                         "backward on rank %d", st, mb, st, mb, rk);
            }
        }
    }
    return 0;
}

/* Pairs every send with its receive: between two ranks, the k-th send from q to r matches
   the k-th receive on r from q (MPI's and NCCL's ordering for one peer), and they must name
   the same message. peer[i] = the matching item of comm item i (−1 for compute items).    */
static int mg__pipe_match(const mg_schedule *s, int *peer, char *err, size_t errlen) {
    int q, r, i, j;
    char ts[32], tr[32], tw[32];
    for (i = 0; i < s->start[s->p]; i++) peer[i] = -1;
    for (q = 0; q < s->p; q++) {
        for (r = 0; r < s->p; r++) {
            if (q == r) continue;
            i = s->start[q];
            j = s->start[r];
            for (;;) {
                const mg_pipe_action *snd = NULL, *rcv = NULL;
                mg_pipe_action want;
                for (; i < s->start[q + 1]; i++) {
                    const mg_pipe_action *a = &s->actions[i];
                    if ((a->op == MG_PIPE_SEND_F || a->op == MG_PIPE_SEND_B) &&
                        mg__pipe_rank_of(s, mg__pipe_peer_stage(a)) == r) { snd = a; break; }
                }
                for (; j < s->start[r + 1]; j++) {
                    const mg_pipe_action *a = &s->actions[j];
                    if ((a->op == MG_PIPE_RECV_F || a->op == MG_PIPE_RECV_B) &&
                        mg__pipe_rank_of(s, mg__pipe_peer_stage(a)) == q) { rcv = a; break; }
                }
                if (!snd && !rcv) break;
                if (snd && !rcv) {
                    want = mg__pipe_matching_recv(snd);
                    return mg__pipe_fail(err, errlen, "%s on rank %d has no matching %s on rank "
                                         "%d", mg_pipe_action_str(snd, ts, sizeof ts), q,
                                         mg_pipe_action_str(&want, tw, sizeof tw), r);
                }
                if (!snd) {
                    return mg__pipe_fail(err, errlen, "%s on rank %d has no matching send on "
                                         "rank %d", mg_pipe_action_str(rcv, tr, sizeof tr), r, q);
                }
                want = mg__pipe_matching_recv(snd);
                if (want.op != rcv->op || want.stage != rcv->stage || want.mb != rcv->mb)
                    return mg__pipe_fail(err, errlen, "rank %d's next receive from rank %d is %s "
                                         "but rank %d's next send to rank %d is %s (it needs "
                                         "%s): receives from a rank must follow the order of "
                                         "its sends", r, q, mg_pipe_action_str(rcv, tr, sizeof tr),
                                         q, r, mg_pipe_action_str(snd, ts, sizeof ts),
                                         mg_pipe_action_str(&want, tw, sizeof tw));
                peer[i] = j;
                peer[j] = i;
                i++;
                j++;
            }
        }
    }
    return 0;
}

/* Activations held: +1 when a forward runs, −1 when the last backward of that (stage, mb)
   does (B, or W after an I; a forward-only run frees right after F).                     */
static void mg__pipe_peak_step(int op, int forward_only, int *held, int *peak) {
    if (op == MG_PIPE_F) (*held)++;
    if (*held > *peak) *peak = *held;
    if (op == MG_PIPE_B || op == MG_PIPE_W || (op == MG_PIPE_F && forward_only)) (*held)--;
}
/* Fills a timeline's summary from its events: span, compute time per rank, bubble fraction
   Σ_r (makespan − busy_r) / Σ_r busy_r — the paper's bubble time over ideal time, averaged
   over ranks — and peak in flight (events of a rank in execution order).                  */
static void mg__pipe_timeline_finish(mg_pipe_timeline *tl, int forward_only) {
    int i, r, *held = mg__pipe_ints((size_t)tl->p, 0);
    double t_end = 0, sum_busy = 0;
    tl->busy = mg__pipe_doubles((size_t)tl->p, 0);
    tl->peak_in_flight = mg__pipe_ints((size_t)tl->p, 0);
    tl->t0 = tl->n_events ? tl->events[0].start : 0;
    for (i = 0; i < tl->n_events; i++) {
        const mg_pipe_event *e = &tl->events[i];
        if (e->start < tl->t0) tl->t0 = e->start;
        if (i == 0 || e->end > t_end) t_end = e->end;
        if (e->a.op != MG_PIPE_COMM) tl->busy[e->rank] += e->end - e->start;
        mg__pipe_peak_step(e->a.op, forward_only, &held[e->rank], &tl->peak_in_flight[e->rank]);
    }
    tl->makespan = t_end - tl->t0;
    for (r = 0; r < tl->p; r++) sum_busy += tl->busy[r];
    tl->bubble_fraction = sum_busy > 0 ? (tl->p * tl->makespan - sum_busy) / sum_busy : 0;
    MG_FREE(held);
}

/* The simulation engine, shared by validation (unit costs, deadlock detection), the
   simulator and the lowering. Every rank walks its actions in order; a compute starts when
   its rank is free and its inputs are there:
     F(s, mb)   needs F(s−1, mb)'s output        B/I(s, mb) needs F(s, mb) and B/I(s+1, mb)
     W(s, mb)   needs I(s, mb)
   MG_SIM_IDEAL: an input from another rank arrives `transfer` after it was produced; sends
   and receives cost nothing else (the paper's model).
   MG_SIM_GROUPS: the executor's protocol. A run of consecutive send/recv actions is one
   group. A rank posts a group without waiting for it, but first completes the group it
   posted before (one group in flight per rank, as on NCCL's single communication stream),
   and completes it early when a compute needs a buffer it receives. A group completes
   `transfer` after the last of its rank and the ranks of its matching operations posted
   theirs. A rank that can never go on is a deadlock: reported with what it waits for.     */
typedef struct mg__pipe_sim {
    const mg_schedule *s;
    const mg__pipe_index *ix;
    const int *peer;                  /* GROUPS: matching comm item                          */
    const mg_pipe_costs *c;
    int model;
    double *f_end, *b_end;            /* [S·m] end of F and of B/I; −1 = not yet             */
    double *posted;                   /* [items] GROUPS: when the group starting here was posted */
    int *group_of;                    /* [items] GROUPS: first item of the item's group      */
    int *pos;                         /* [p] next item of each rank                           */
    int *pending;                     /* [p] GROUPS: first item of the group in flight, or −1 */
    double *clock;                    /* [p] when each rank is free                          */
    mg_pipe_event *ev;                /* events, when wanted                                  */
    int n_ev;
} mg__pipe_sim;

static double mg__pipe_cost(const mg_pipe_costs *c, int op) {
    switch (op) {
    case MG_PIPE_F: return c->f;
    case MG_PIPE_B: return c->b + c->w;   /* a full backward is both halves                  */
    case MG_PIPE_I: return c->b;
    case MG_PIPE_W: return c->w;
    default: return 0;
    }
}
static void mg__pipe_event(mg__pipe_sim *sim, int r, mg_pipe_action a, double t0, double t1) {
    if (!sim->ev) return;
    sim->ev[sim->n_ev].rank = r;
    sim->ev[sim->n_ev].a = a;
    sim->ev[sim->n_ev].start = t0;
    sim->ev[sim->n_ev].end = t1;
    sim->n_ev++;
}

/* When group g (its first item) completes, or −1 while a matching group is not posted. */
static double mg__pipe_group_done(const mg__pipe_sim *sim, int g) {
    const mg_schedule *s = sim->s;
    int r = mg__pipe_rank_of(s, s->actions[g].stage), i;
    double t = sim->posted[g];
    if (t < 0) return -1;
    for (i = g; i < s->start[r + 1] && mg__pipe_is_comm(s->actions[i].op); i++) {
        double tp = sim->posted[sim->group_of[sim->peer[i]]];
        if (tp < 0) return -1;
        if (tp > t) t = tp;
    }
    return t + sim->c->transfer;
}
/* Rank r completes its group in flight: 0, or −1 when it cannot yet. The wait is a COMM event. */
static int mg__pipe_complete_pending(mg__pipe_sim *sim, int r) {
    double done;
    if (sim->pending[r] < 0) return 0;
    done = mg__pipe_group_done(sim, sim->pending[r]);
    if (done < 0) return -1;
    if (done > sim->clock[r]) {
        mg__pipe_event(sim, r, mg__pipe_act(MG_PIPE_COMM, 0, 0), sim->clock[r], done);
        sim->clock[r] = done;
    }
    sim->pending[r] = -1;
    return 0;
}

/* Earliest start of compute a, or −1 when an input is not there yet. In GROUPS mode the
   receive group carried the data (its completion was waited for), so no transfer is added. */
static double mg__pipe_ready(const mg__pipe_sim *sim, const mg_pipe_action *a) {
    const mg_schedule *s = sim->s;
    int m = s->m, S = sim->ix->S, k = a->stage * m + a->mb, r = mg__pipe_rank_of(s, a->stage);
    double t = sim->clock[r], xfer = sim->model == MG_SIM_IDEAL ? sim->c->transfer : 0, dep;
    if (a->op == MG_PIPE_F && a->stage > 0) {
        dep = sim->f_end[k - m];
        if (dep < 0) return -1;
        dep += mg__pipe_rank_of(s, a->stage - 1) != r ? xfer : 0;
        if (dep > t) t = dep;
    } else if (mg__pipe_is_bwd(a->op)) {
        if (sim->f_end[k] < 0) return -1;
        if (a->stage < S - 1) {
            dep = sim->b_end[k + m];
            if (dep < 0) return -1;
            dep += mg__pipe_rank_of(s, a->stage + 1) != r ? xfer : 0;
            if (dep > t) t = dep;
        }
    } else if (a->op == MG_PIPE_W) {
        if (sim->b_end[k] < 0) return -1;
        if (sim->b_end[k] > t) t = sim->b_end[k];
    }
    return t;
}
/* GROUPS: the group that receives compute a's input from another rank, or −1. */
static int mg__pipe_input_group(const mg__pipe_sim *sim, const mg_pipe_action *a) {
    int k = a->stage * sim->s->m + a->mb, item = -1;
    if (a->op == MG_PIPE_F) item = sim->ix->recv_f[k];
    else if (mg__pipe_is_bwd(a->op)) item = sim->ix->recv_b[k];
    return item >= 0 ? sim->group_of[item] : -1;
}

/* Advances rank r as far as it can; returns 1 when it moved. */
static int mg__pipe_advance(mg__pipe_sim *sim, int r, double *item_start, double *item_end) {
    const mg_schedule *s = sim->s;
    int moved = 0, end = s->start[r + 1];
    while (sim->pos[r] < end) {
        int at = sim->pos[r], next = at + 1, k, g;
        const mg_pipe_action *a = &s->actions[at];
        double t, cost;
        if (mg__pipe_is_comm(a->op)) {
            while (next < end && mg__pipe_is_comm(s->actions[next].op)) next++;
            if (sim->model == MG_SIM_GROUPS) {
                if (mg__pipe_complete_pending(sim, r)) break;
                sim->posted[at] = sim->clock[r];
                sim->pending[r] = at;
            }
            sim->pos[r] = next;
            moved = 1;
            continue;
        }
        g = sim->model == MG_SIM_GROUPS ? mg__pipe_input_group(sim, a) : -1;
        if (g >= 0 && g == sim->pending[r] && mg__pipe_complete_pending(sim, r)) break;
        t = mg__pipe_ready(sim, a);
        if (t < 0) break;
        cost = mg__pipe_cost(sim->c, a->op);
        mg__pipe_event(sim, r, *a, t, t + cost);
        sim->clock[r] = t + cost;
        if (item_start) item_start[at] = t;
        if (item_end) item_end[at] = t + cost;
        k = a->stage * s->m + a->mb;
        if (a->op == MG_PIPE_F) sim->f_end[k] = t + cost;
        else if (mg__pipe_is_bwd(a->op)) sim->b_end[k] = t + cost;
        sim->pos[r] = next;
        moved = 1;
    }
    if (sim->pos[r] == end && sim->pending[r] >= 0 && mg__pipe_complete_pending(sim, r) == 0)
        moved = 1;
    return moved;
}

/* Describes why rank r cannot go on (appends to buf). */
static void mg__pipe_explain_stuck(const mg__pipe_sim *sim, int r, char *buf, size_t buflen) {
    const mg_schedule *s = sim->s;
    size_t used = strlen(buf);
    char ta[32], tb[32], tc[32];
    const char *sep = used ? "; " : "";
    int g = sim->pending[r], i;
    const mg_pipe_action *a = sim->pos[r] < s->start[r + 1] ? &s->actions[sim->pos[r]] : NULL;
    if (used + 1 >= buflen) return;
    if (g >= 0 && mg__pipe_group_done(sim, g) < 0) {
        /* waiting for a group in flight: name the first operation whose peer is missing    */
        for (i = g; i < s->start[r + 1] && mg__pipe_is_comm(s->actions[i].op); i++) {
            int j = sim->peer[i];
            if (sim->posted[sim->group_of[j]] >= 0) continue;
            snprintf(buf + used, buflen - used, "%srank %d is stuck at %s: its send/recv "
                     "group with %s waits for rank %d to reach %s", sep, r,
                     a ? mg_pipe_action_str(a, tc, sizeof tc) : "the end",
                     mg_pipe_action_str(&s->actions[i], ta, sizeof ta),
                     mg__pipe_rank_of(s, s->actions[j].stage),
                     mg_pipe_action_str(&s->actions[j], tb, sizeof tb));
            return;
        }
    }
    if (a && !mg__pipe_is_comm(a->op)) {
        int m = s->m, k = a->stage * m + a->mb;
        mg_pipe_action need;
        if (a->op == MG_PIPE_F) need = mg__pipe_act(MG_PIPE_F, a->stage - 1, a->mb);
        else if (a->op == MG_PIPE_W) need = mg__pipe_act(MG_PIPE_I, a->stage, a->mb);
        else if (sim->f_end[k] < 0) need = mg__pipe_act(MG_PIPE_F, a->stage, a->mb);
        else need = mg__pipe_act(sim->ix->split[k + m] ? MG_PIPE_I : MG_PIPE_B, a->stage + 1,
                                 a->mb);
        snprintf(buf + used, buflen - used, "%srank %d waits at %s for %s (rank %d)", sep, r,
                 mg_pipe_action_str(a, ta, sizeof ta), mg_pipe_action_str(&need, tb, sizeof tb),
                 mg__pipe_rank_of(s, need.stage));
    }
}

/* Runs the engine; fills tl when non-NULL (events, busy, makespan, bubble) and the start and
   end of every compute item when item_start / item_end are non-NULL. */
static int mg__pipe_engine(const mg_schedule *s, const mg__pipe_index *ix, const int *peer,
                           const mg_pipe_costs *c, int model, mg_pipe_timeline *tl,
                           double *item_start, double *item_end, char *err, size_t errlen) {
    mg__pipe_sim sim;
    int p = s->p, n_items = s->start[p], r, i, progress, done = 1, rc = 0;
    size_t n = (size_t)ix->S * s->m;
    memset(&sim, 0, sizeof sim);
    sim.s = s;
    sim.ix = ix;
    sim.peer = peer;
    sim.c = c;
    sim.model = model;
    sim.f_end = mg__pipe_doubles(n, -1);
    sim.b_end = mg__pipe_doubles(n, -1);
    sim.posted = mg__pipe_doubles((size_t)n_items + 1, -1);
    sim.group_of = mg__pipe_ints((size_t)n_items + 1, -1);
    sim.pos = mg__pipe_ints((size_t)p, 0);
    sim.pending = mg__pipe_ints((size_t)p, -1);
    sim.clock = mg__pipe_doubles((size_t)p, 0);
    /* a compute and a group wait each at most once per item: 2 events per item suffice      */
    sim.ev = tl ? (mg_pipe_event *)mg__pipe_malloc((size_t)(2 * n_items + 1) *
                                                   sizeof(mg_pipe_event)) : NULL;
    for (r = 0; r < p; r++) {
        sim.pos[r] = s->start[r];
        for (i = s->start[r]; i < s->start[r + 1]; i++)
            if (mg__pipe_is_comm(s->actions[i].op))
                sim.group_of[i] = (i > s->start[r] && mg__pipe_is_comm(s->actions[i - 1].op))
                                      ? sim.group_of[i - 1] : i;
    }
    do {
        progress = 0;
        for (r = 0; r < p; r++) progress |= mg__pipe_advance(&sim, r, item_start, item_end);
    } while (progress);
    for (r = 0; r < p; r++) done &= sim.pos[r] == s->start[r + 1] && sim.pending[r] < 0;
    if (!done) {
        char why[1024];
        why[0] = 0;
        for (r = 0; r < p; r++)
            if (sim.pos[r] < s->start[r + 1] || sim.pending[r] >= 0)
                mg__pipe_explain_stuck(&sim, r, why, sizeof why);
        rc = mg__pipe_fail(err, errlen, "%s deadlocks: %s",
                           model == MG_SIM_IDEAL ? "schedule" : "send/recv order", why);
    } else if (tl) {
        memset(tl, 0, sizeof *tl);
        tl->p = p;
        tl->v = s->v;
        tl->m = s->m;
        tl->n_events = sim.n_ev;
        tl->events = sim.ev;
        sim.ev = NULL;
        mg__pipe_timeline_finish(tl, s->forward_only);
    }
    if (sim.ev) MG_FREE(sim.ev);
    MG_FREE(sim.f_end); MG_FREE(sim.b_end); MG_FREE(sim.posted); MG_FREE(sim.group_of);
    MG_FREE(sim.pos); MG_FREE(sim.pending); MG_FREE(sim.clock);
    return rc;
}

/* The message a compute sends, if any: F(s) sends its output to stage s+1 (s < S−1) and
   B/I(s) its input gradient to stage s−1 (s > 0), when that stage is on another rank
   (never when p = 1, where the buffer is handed over). */
static int mg__pipe_sends(const mg_pipe_action *a, int S, int p, int *send_op, int *dst) {
    if (p == 1) return 0;
    if (a->op == MG_PIPE_F && a->stage < S - 1) {
        *send_op = MG_PIPE_SEND_F;
        *dst = (a->stage + 1) % p;
        return 1;
    }
    if (mg__pipe_is_bwd(a->op) && a->stage > 0) {
        *send_op = MG_PIPE_SEND_B;
        *dst = (a->stage - 1) % p;
        return 1;
    }
    return 0;
}

/* Lowering a compute-only schedule into send/recv groups for the executor's protocol (see
   the engine: a rank posts a group without waiting, completes it before posting its next one
   or before a compute that needs its data; on NCCL a rank's groups run one after another).
   Each message gets one time key T: the moment its producer ends in the ideal timeline with
   unit costs. On both ranks the send / receive goes into the group placed before the first
   compute that starts at or after T — the sender posts as soon as it has produced, the
   receiver at its next pause, early and without waiting. Groups of a rank are ordered by
   their keys, and a key in the group before compute j is > start(j−1) and ≤ start(j).
   No deadlock: let G (rank r) be a group never posted with the smallest key K. r stops only
   to complete its group P before G. A receive in P matches a send keyed alike, below K, so
   posted. A send in P (after compute i, key ≤ start(i+1)) matches a receive with the same
   key, hence below the keys of r's next group G, so posted too. P completes; r posts G:
   contradiction. So every group is posted, every group completes, every compute gets its
   data. For the built-in schedules at equal costs this protocol loses nothing against the
   ideal timeline (tests/test_pipeline_schedule.c); in 1F1B a send_forward shares its group
   with the next recv_backward, as in Megatron. Within a group, and so on every channel,
   operations are ordered by (T, message) on both sides: receives follow the sends' order. */
typedef struct mg__pipe_commop {
    int rank, pos;                /* placed before compute item pos of rank (or at its end)   */
    double key;                   /* T: when the producer ends (ideal timeline, unit costs)    */
    int grad, producer, mb;       /* the message: activation or gradient, from which stage     */
    mg_pipe_action a;             /* the SEND or RECV action                                    */
} mg__pipe_commop;

static int mg__pipe_commop_cmp(const void *pa, const void *pb) {
    const mg__pipe_commop *x = (const mg__pipe_commop *)pa, *y = (const mg__pipe_commop *)pb;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->grad != y->grad) return x->grad < y->grad ? -1 : 1;
    if (x->producer != y->producer) return x->producer < y->producer ? -1 : 1;
    return x->mb < y->mb ? -1 : x->mb > y->mb;
}

/* First compute item of rank r starting at or after t (computes of a rank start in order);
   s->start[r+1] when none. Items of the compute-only schedule are all computes.          */
static int mg__pipe_first_at(const mg_schedule *s, const double *t_start, int r, double t) {
    int lo = s->start[r], hi = s->start[r + 1];
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (t_start[mid] < t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
static void mg__pipe_lower_unchecked(const mg_schedule *s, mg_schedule *out) {
    int p = s->p, S = s->p * s->v, m = s->m, n = s->start[p], r, i, w = 0, n_ops = 0, k;
    mg__pipe_index ix;
    mg_pipe_costs unit;
    double *t_start = mg__pipe_doubles((size_t)n + 1, 0);
    double *t_end = mg__pipe_doubles((size_t)n + 1, 0);
    mg__pipe_commop *ops = (mg__pipe_commop *)mg__pipe_malloc((size_t)(2 * n + 1) *
                                                                sizeof(mg__pipe_commop));
    unit.f = unit.b = unit.w = 1;
    unit.transfer = 0;
    mg__pipe_scan(s, &ix, NULL, 0);    /* the schedule passed the scan and the ideal run */
    mg__pipe_engine(s, &ix, NULL, &unit, MG_SIM_IDEAL, NULL, t_start, t_end, NULL, 0);
    for (r = 0; r < p; r++) {
        for (i = s->start[r]; i < s->start[r + 1]; i++) {
            const mg_pipe_action *a = &s->actions[i];
            int send_op, dst;
            double key = t_end[i];
            if (!mg__pipe_sends(a, S, p, &send_op, &dst)) continue;
            for (k = 0; k < 2; k++) {
                mg__pipe_commop *o = &ops[n_ops++];
                o->rank = k ? dst : r;
                o->pos = mg__pipe_first_at(s, t_start, o->rank, key);
                o->key = key;
                o->grad = send_op == MG_PIPE_SEND_B;
                o->producer = a->stage;
                o->mb = a->mb;
                o->a = mg__pipe_act(send_op, a->stage, a->mb);
                if (k) o->a = mg__pipe_matching_recv(&o->a);
            }
        }
    }
    qsort(ops, (size_t)n_ops, sizeof *ops, mg__pipe_commop_cmp);
    mg__pipe_alloc_schedule(out, s->kind, p, s->v, m, s->forward_only, 1, n + n_ops);
    k = 0;
    for (r = 0; r < p; r++) {
        for (i = s->start[r]; i <= s->start[r + 1]; i++) {
            while (k < n_ops && ops[k].rank == r && ops[k].pos == i) out->actions[w++] = ops[k++].a;
            if (i < s->start[r + 1]) out->actions[w++] = s->actions[i];
        }
        out->start[r + 1] = w;
    }
    mg__pipe_index_free(&ix);
    MG_FREE(t_start); MG_FREE(t_end); MG_FREE(ops);
}

/* Copies a schedule (explicit already) or lowers it. */
static void mg__pipe_explicit(const mg_schedule *s, mg_schedule *out) {
    if (s->explicit_comm) {
        int n = s->start[s->p];
        mg__pipe_alloc_schedule(out, s->kind, s->p, s->v, s->m, s->forward_only, 1, n);
        memcpy(out->start, s->start, ((size_t)s->p + 1) * sizeof(int));
        memcpy(out->actions, s->actions, (size_t)n * sizeof(mg_pipe_action));
    } else {
        mg__pipe_lower_unchecked(s, out);
    }
}

/* Validation: the scan, the data dependencies (ideal engine), then — on the explicit form —
   send/recv pairing and the blocking-group engine. Unit costs: only the order matters. */
MGDEF int mg_schedule_validate(const mg_schedule *s, char *err, size_t errlen) {
    mg__pipe_index ix, lix;
    mg_schedule low;
    mg_pipe_costs unit;
    int rc, *peer;
    if (!s || !s->start || !s->actions)
        return mg__pipe_fail(err, errlen, "schedule is empty");
    unit.f = unit.b = unit.w = 1;
    unit.transfer = 0;
    rc = mg__pipe_scan(s, &ix, err, errlen);
    if (rc == 0)
        rc = mg__pipe_engine(s, &ix, NULL, &unit, MG_SIM_IDEAL, NULL, NULL, NULL, err, errlen);
    mg__pipe_index_free(&ix);
    if (rc) return rc;
    mg__pipe_explicit(s, &low);
    peer = mg__pipe_ints((size_t)low.start[low.p] + 1, -1);
    rc = mg__pipe_scan(&low, &lix, err, errlen);
    if (rc == 0) rc = mg__pipe_match(&low, peer, err, errlen);
    if (rc == 0) rc = mg__pipe_engine(&low, &lix, peer, &unit, MG_SIM_GROUPS, NULL, NULL, NULL, err,
                                   errlen);
    mg__pipe_index_free(&lix);
    MG_FREE(peer);
    mg_schedule_free(&low);
    return rc;
}

MGDEF int mg_schedule_lower(const mg_schedule *s, mg_schedule *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (mg_schedule_validate(s, err, errlen)) return -1;
    mg__pipe_explicit(s, out);
    return 0;
}

MGDEF void mg_schedule_peak_in_flight(const mg_schedule *s, int *peak) {
    int r, i;
    for (r = 0; r < s->p; r++) {
        int held = 0;
        peak[r] = 0;
        for (i = s->start[r]; i < s->start[r + 1]; i++)
            mg__pipe_peak_step(s->actions[i].op, s->forward_only, &held, &peak[r]);
    }
}

/* ---------------------------------------------------------------------------------------------
   5. Executor
   ------------------------------------------------------------------------------------------ */
MGDEF mg_pipe_exec_desc mg_pipe_exec_desc_default(void) {
    mg_pipe_exec_desc d;
    memset(&d, 0, sizeof d);
    d.msg_dtype = MG_F32;
    return d;
}

/* The trace clock: POSIX's monotonic clock where there is one (wall-clock time can step
   under NTP and reorder a timeline), else C11's timespec_get.                             */
static double mg__pipe_now(void) {
    struct timespec ts;
#if defined(CLOCK_MONOTONIC) && defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 199309L
    clock_gettime(CLOCK_MONOTONIC, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The default transfer: the whole message to the peer over the pipeline group. */
static void mg__pipe_send_whole(void *user, mg_comm *comm, const void *buf, int64_t count,
                                mg_dtype dt, int peer) {
    (void)user;
    mg_send(comm, &comm->pipeline, buf, count, dt, peer);
}
static void mg__pipe_recv_whole(void *user, mg_comm *comm, void *buf, int64_t count,
                                mg_dtype dt, int peer) {
    (void)user;
    mg_recv(comm, &comm->pipeline, buf, count, dt, peer);
}
/* Megatron's scatter/gather: the t tensor-parallel ranks hold the same activation, so each
   sends only its slice [tp·n/t, (tp+1)·n/t) to the same tensor rank of the next stage, and
   the receiving group rebuilds the whole message with one in-place all-gather (NCCL's
   in-place rule: send = recv + rank·count).                                                 */
static size_t mg__pipe_slice_offset(const mg_comm *comm, int64_t count, mg_dtype dt) {
    return (size_t)(count / comm->tensor.size) * (size_t)comm->tensor.rank * mg_dtype_size(dt);
}
static void mg__pipe_send_slice(void *user, mg_comm *comm, const void *buf, int64_t count,
                                mg_dtype dt, int peer) {
    (void)user;
    mg_send(comm, &comm->pipeline, (const char *)buf + mg__pipe_slice_offset(comm, count, dt),
            count / comm->tensor.size, dt, peer);
}
static void mg__pipe_recv_slice(void *user, mg_comm *comm, void *buf, int64_t count,
                                mg_dtype dt, int peer) {
    (void)user;
    mg_recv(comm, &comm->pipeline, (char *)buf + mg__pipe_slice_offset(comm, count, dt),
            count / comm->tensor.size, dt, peer);
}
static void mg__pipe_gather_slices(void *user, mg_comm *comm, void *buf, int64_t count,
                                   mg_dtype dt) {
    (void)user;
    mg_all_gather(comm, &comm->tensor, (char *)buf + mg__pipe_slice_offset(comm, count, dt), buf,
                  count / comm->tensor.size, dt);
}

/* Buffer pool: ids into ex->buffers. In the dry run the pool grows on demand, which is how
   init learns its size; in a real run it never has to.                                      */
static int mg__pipe_buf_get(mg_pipe_exec *ex, int dry) {
    if (ex->n_free > 0) return ex->free_ids[--ex->n_free];
    if (dry) return ex->n_buffers++;
    mg_fatal(__FILE__, __LINE__, "mg_pipeline: message buffer pool exhausted (%d buffers)",
             ex->n_buffers);
    return -1;
}
static void mg__pipe_buf_put(mg_pipe_exec *ex, int *slot, int dry) {
    if (*slot < 0) return;
    if (!dry && ex->desc.poison && !ex->desc.ctx && ex->desc.msg_dtype == MG_F32) {
        float *x = (float *)ex->buffers[*slot], nan = (float)NAN;
        int64_t i;
        for (i = 0; i < ex->desc.msg_count; i++) x[i] = nan;
    }
    ex->free_ids[ex->n_free++] = *slot;
    *slot = -1;
}
static void *mg__pipe_buf(mg_pipe_exec *ex, int id, int dry) {
    return (dry || id < 0) ? NULL : ex->buffers[id];
}

/* The send/recv protocol (modelled by MG_SIM_GROUPS): a group — items [i, j) — is posted
   between mg_group_start and mg_group_end_async without waiting; it is completed (mg_wait,
   then after_recv for each received message, then the sent buffers go back to the pool)
   before the next group is posted, before a compute that needs a buffer it receives, and at
   the end of the run. One group is in flight at a time.                                    */
/* The kind of the group of items [i, j): a bit per operation it holds. */
static int mg__pipe_group_kind(const mg_pipe_exec *ex, int i, int j) {
    int k, kind = 0;
    for (k = i; k < j; k++) kind |= 1 << (ex->plan.actions[k].op - MG_PIPE_SEND_F);
    return kind;
}
static void mg__pipe_post_group(mg_pipe_exec *ex, int i, int j, int dry) {
    const mg_pipe_transfer *tr = &ex->desc.transfer;
    int k, p = ex->p, m = ex->m, timer = !dry && ex->desc.comm_timer;
    if (timer) ex->desc.comm_timer(ex->desc.comm_timer_user, mg__pipe_group_kind(ex, i, j), 1);
    if (!dry) mg_group_start(ex->comm);
    for (k = i; k < j; k++) {
        const mg_pipe_action *a = &ex->plan.actions[k];
        int key = a->stage * m + a->mb, peer = mg__pipe_peer_stage(a) % p, *slot;
        if (a->op == MG_PIPE_SEND_F || a->op == MG_PIPE_SEND_B) {
            slot = a->op == MG_PIPE_SEND_F ? &ex->out_buf[key] : &ex->gin_buf[key];
            if (!dry) tr->send(tr->user, ex->comm, ex->buffers[*slot], ex->desc.msg_count,
                               ex->desc.msg_dtype, peer);
        } else {
            slot = a->op == MG_PIPE_RECV_F ? &ex->in_buf[key] : &ex->gout_buf[key];
            *slot = mg__pipe_buf_get(ex, dry);
            if (!dry) tr->recv(tr->user, ex->comm, ex->buffers[*slot], ex->desc.msg_count,
                               ex->desc.msg_dtype, peer);
        }
    }
    if (!dry) ex->pending_req = mg_group_end_async(ex->comm);
    if (timer) ex->desc.comm_timer(ex->desc.comm_timer_user, mg__pipe_group_kind(ex, i, j), 0);
    ex->pending_first = i;
    ex->pending_end = j;
}
MGDEF const char *mg_pipe_comm_kind_name(int kind) {
    static const char *const names[MG_PIPE_COMM_KINDS] = {
        "", "forward-send", "forward-recv", "forward-send-forward-recv", "backward-send",
        "forward-backward-send", "backward-send-forward-recv",
        "forward-backward-send-forward-recv", "backward-recv", "forward-send-backward-recv",
        "forward-backward-recv", "forward-send-forward-backward-recv",
        "backward-send-backward-recv", "forward-backward-send-backward-recv",
        "backward-send-forward-backward-recv", "forward-backward-send-forward-backward-recv"};
    return kind > 0 && kind < MG_PIPE_COMM_KINDS ? names[kind] : "";
}

static void mg__pipe_complete_group(mg_pipe_exec *ex, int dry) {
    const mg_pipe_transfer *tr = &ex->desc.transfer;
    int k, m = ex->m, kind = 0, timed = !dry && ex->desc.time_comm;
    double t0 = 0;
    if (ex->pending_first < 0) return;
    if (timed) {   /* the group's kind; the clock after the queued work, as a timer does */
        kind = mg__pipe_group_kind(ex, ex->pending_first, ex->pending_end);
        if (ex->desc.ctx) mg_sync(ex->desc.ctx);
        t0 = mg__pipe_now();
    }
    if (!dry) mg_wait(ex->comm, &ex->pending_req);
    for (k = ex->pending_first; k < ex->pending_end; k++) {
        const mg_pipe_action *a = &ex->plan.actions[k];
        int key = a->stage * m + a->mb;
        if (a->op == MG_PIPE_SEND_F) mg__pipe_buf_put(ex, &ex->out_buf[key], dry);
        else if (a->op == MG_PIPE_SEND_B) mg__pipe_buf_put(ex, &ex->gin_buf[key], dry);
        else if (!dry && tr->after_recv) {
            int id = a->op == MG_PIPE_RECV_F ? ex->in_buf[key] : ex->gout_buf[key];
            tr->after_recv(tr->user, ex->comm, ex->buffers[id], ex->desc.msg_count,
                           ex->desc.msg_dtype);
        }
    }
    if (timed) {
        if (ex->desc.ctx) mg_sync(ex->desc.ctx);
        ex->comm_ms[kind] += 1e3 * (mg__pipe_now() - t0);
    }
    ex->pending_first = -1;
}
/* Completes the group in flight first when it receives compute a's input. */
static void mg__pipe_await_input(mg_pipe_exec *ex, const mg_pipe_action *a, int dry) {
    int key = a->stage * ex->m + a->mb, item = -1;
    if (a->op == MG_PIPE_F) item = ex->recv_item_f[key];
    else if (mg__pipe_is_bwd(a->op)) item = ex->recv_item_b[key];
    if (item >= 0 && item >= ex->pending_first && item < ex->pending_end)
        mg__pipe_complete_group(ex, dry);
}

/* One compute action: hand the callback its buffers, then free what this action was the
   last to need. The output of F and the input gradient of B/I go to the neighbour stage:
   into the send slot when it is on another rank, straight into that stage's input slot
   when it is on this rank (p = 1).                                                         */
static void mg__pipe_run_compute(mg_pipe_exec *ex, const mg_pipe_action *a, int dry) {
    const mg_pipe_callbacks *cb = &ex->desc.cb;
    int p = ex->p, m = ex->m, S = ex->S, key = a->stage * m + a->mb, id;
    mg_pipe_io io;
    mg__pipe_await_input(ex, a, dry);
    memset(&io, 0, sizeof io);
    io.stage = a->stage;
    io.chunk = a->stage / p;
    io.mb = a->mb;
    io.op = a->op;
    io.input = a->stage > 0 ? mg__pipe_buf(ex, ex->in_buf[key], dry) : NULL;
    if (a->op == MG_PIPE_F) {
        if (a->stage < S - 1) {
            id = mg__pipe_buf_get(ex, dry);
            if (p == 1) ex->in_buf[key + m] = id;
            else ex->out_buf[key] = id;
            io.output = mg__pipe_buf(ex, id, dry);
        }
        if (!dry) cb->forward(cb->user, &io);
        if (ex->plan.forward_only) mg__pipe_buf_put(ex, &ex->in_buf[key], dry);
        return;
    }
    io.grad_output = a->stage < S - 1 ? mg__pipe_buf(ex, ex->gout_buf[key], dry) : NULL;
    if (a->op == MG_PIPE_B || a->op == MG_PIPE_I) {
        if (a->stage > 0) {
            id = mg__pipe_buf_get(ex, dry);
            if (p == 1) ex->gout_buf[key - m] = id;
            else ex->gin_buf[key] = id;
            io.grad_input = mg__pipe_buf(ex, id, dry);
        }
        if (!dry) (a->op == MG_PIPE_B ? cb->backward : cb->backward_input)(cb->user, &io);
        if (a->op == MG_PIPE_I) return;   /* W still needs input and grad_output            */
    } else if (!dry) {
        cb->backward_weight(cb->user, &io);
    }
    mg__pipe_buf_put(ex, &ex->in_buf[key], dry);
    mg__pipe_buf_put(ex, &ex->gout_buf[key], dry);
}

/* Runs this rank's plan; the dry run does the buffer bookkeeping only. Trace records cover
   each compute and each wait for a group (COMM), as the simulator's events do.            */
static void mg__pipe_trace_rec_add(mg_pipe_exec *ex, int item, double t_start) {
    if (ex->desc.ctx) mg_sync(ex->desc.ctx);
    ex->trace[ex->n_trace].item = item;
    ex->trace[ex->n_trace].start = t_start - ex->t0;
    ex->trace[ex->n_trace].end = mg__pipe_now() - ex->t0;
    ex->n_trace++;
}
static void mg__pipe_run_items(mg_pipe_exec *ex, int dry) {
    int i, j, end = ex->plan.start[ex->rank + 1], tracing = !dry && ex->desc.trace;
    size_t n = (size_t)ex->S * ex->m;
    for (i = 0; i < (int)n; i++)
        ex->in_buf[i] = ex->gout_buf[i] = ex->out_buf[i] = ex->gin_buf[i] = -1;
    if (!dry) {
        ex->n_free = ex->n_buffers;
        for (i = 0; i < ex->n_buffers; i++) ex->free_ids[i] = ex->n_buffers - 1 - i;
    }
    ex->pending_first = -1;
    ex->n_trace = 0;
    for (i = ex->plan.start[ex->rank]; i < end; i = j) {
        const mg_pipe_action *a = &ex->plan.actions[i];
        double t_start = tracing ? mg__pipe_now() : 0;
        int g = ex->pending_first;
        j = i + 1;
        if (mg__pipe_is_comm(a->op)) {
            while (j < end && mg__pipe_is_comm(ex->plan.actions[j].op)) j++;
            mg__pipe_complete_group(ex, dry);
            if (tracing && g >= 0) mg__pipe_trace_rec_add(ex, g, t_start);
            mg__pipe_post_group(ex, i, j, dry);
        } else {
            mg__pipe_await_input(ex, a, dry);
            if (tracing && g >= 0 && ex->pending_first < 0) {
                mg__pipe_trace_rec_add(ex, g, t_start);
                t_start = mg__pipe_now();
            }
            mg__pipe_run_compute(ex, a, dry);
            if (tracing) mg__pipe_trace_rec_add(ex, i, t_start);
        }
    }
    if (ex->pending_first >= 0) {
        int g = ex->pending_first;
        double t_start = tracing ? mg__pipe_now() : 0;
        mg__pipe_complete_group(ex, dry);
        if (tracing) mg__pipe_trace_rec_add(ex, g, t_start);
    }
}

MGDEF int mg_pipe_exec_init(mg_pipe_exec *ex, mg_comm *comm, const mg_pipe_exec_desc *desc,
                            char *err, size_t errlen) {
    const mg_schedule *s = desc->schedule;
    mg__pipe_index ix;
    int i, uses_b = 0, uses_iw = 0, custom_hook;
    size_t n;
    char why[512];
    memset(ex, 0, sizeof *ex);
    if (!comm || !s) return mg__pipe_fail(err, errlen, "pipeline executor: comm and schedule "
                                          "are required");
    if (comm->pipeline.size != s->p)
        return mg__pipe_fail(err, errlen, "pipeline executor: the schedule is for p = %d ranks "
                             "but the pipeline group has %d", s->p, comm->pipeline.size);
    if (desc->msg_count <= 0)
        return mg__pipe_fail(err, errlen, "pipeline executor: msg_count must be positive (the "
                             "elements of one activation message), got %lld",
                             (long long)desc->msg_count);
    if (desc->msg_dtype != MG_F32 && desc->msg_dtype != MG_BF16 && desc->msg_dtype != MG_F16)
        return mg__pipe_fail(err, errlen, "pipeline executor: unknown message dtype %d",
                             (int)desc->msg_dtype);
    if (mg_schedule_validate(s, why, sizeof why))
        return mg__pipe_fail(err, errlen, "pipeline schedule: %s", why);
    for (i = 0; i < s->start[s->p]; i++) {
        uses_b |= s->actions[i].op == MG_PIPE_B;
        uses_iw |= s->actions[i].op == MG_PIPE_I || s->actions[i].op == MG_PIPE_W;
    }
    if (!desc->cb.forward || (uses_b && !desc->cb.backward) ||
        (uses_iw && (!desc->cb.backward_input || !desc->cb.backward_weight)))
        return mg__pipe_fail(err, errlen, "pipeline executor: the %s schedule needs the "
                             "callbacks forward%s%s", mg_schedule_kind_name(s->kind),
                             uses_b ? ", backward" : "",
                             uses_iw ? ", backward_input and backward_weight" : "");
    custom_hook = desc->transfer.send || desc->transfer.recv || desc->transfer.after_recv;
    if (custom_hook && (!desc->transfer.send || !desc->transfer.recv))
        return mg__pipe_fail(err, errlen, "pipeline executor: a transfer hook needs both send "
                             "and recv");
    if (custom_hook && desc->scatter_gather)
        return mg__pipe_fail(err, errlen, "pipeline executor: scatter_gather and a custom "
                             "transfer hook exclude each other");
    if (desc->scatter_gather && desc->msg_count % comm->tensor.size != 0)
        return mg__pipe_fail(err, errlen, "pipeline executor: scatter/gather splits each message "
                             "over t = %d tensor ranks, but msg_count = %lld is not a multiple "
                             "of t", comm->tensor.size, (long long)desc->msg_count);
    ex->comm = comm;
    ex->desc = *desc;
    if (!custom_hook) {
        int sg = desc->scatter_gather && comm->tensor.size > 1;
        ex->desc.transfer.send = sg ? mg__pipe_send_slice : mg__pipe_send_whole;
        ex->desc.transfer.recv = sg ? mg__pipe_recv_slice : mg__pipe_recv_whole;
        ex->desc.transfer.after_recv = sg ? mg__pipe_gather_slices : NULL;
        ex->desc.transfer.user = ex;
    }
    ex->rank = comm->pipeline.rank;
    ex->p = s->p;
    ex->S = s->p * s->v;
    ex->m = s->m;
    ex->msg_bytes = (size_t)desc->msg_count * mg_dtype_size(desc->msg_dtype);
    mg__pipe_explicit(s, &ex->plan);
    n = (size_t)ex->S * ex->m;
    ex->in_buf = mg__pipe_ints(n, -1);
    ex->gout_buf = mg__pipe_ints(n, -1);
    ex->out_buf = mg__pipe_ints(n, -1);
    ex->gin_buf = mg__pipe_ints(n, -1);
    mg__pipe_scan(&ex->plan, &ix, NULL, 0);   /* valid: the schedule passed validation      */
    ex->recv_item_f = ix.recv_f;
    ex->recv_item_b = ix.recv_b;
    ix.recv_f = ix.recv_b = NULL;
    mg__pipe_index_free(&ix);
    /* Dry run: every buffer this rank's plan ever holds at once. Each message is taken once,
       so twice the plan length bounds the free list.                                        */
    ex->free_ids = mg__pipe_ints(2 * (size_t)(ex->plan.start[ex->rank + 1] -
                                              ex->plan.start[ex->rank]) + 2, -1);
    mg__pipe_run_items(ex, 1);
    if (ex->n_free != ex->n_buffers) {
        int held = ex->n_buffers - ex->n_free;
        mg_pipe_exec_free(ex);
        return mg__pipe_fail(err, errlen, "internal error: pipeline plan leaves %d message "
                             "buffer(s) held", held);
    }
    ex->buffers = (void **)mg__pipe_malloc((size_t)(ex->n_buffers + 1) * sizeof(void *));
    for (i = 0; i < ex->n_buffers; i++)
        ex->buffers[i] = desc->ctx ? mg_alloc(desc->ctx, ex->msg_bytes)
                                   : mg__pipe_malloc(ex->msg_bytes);
    if (desc->trace)
        ex->trace = (mg_pipe_trace_rec *)mg__pipe_malloc(
            (size_t)(2 * (ex->plan.start[ex->rank + 1] - ex->plan.start[ex->rank]) + 1) *
            sizeof(mg_pipe_trace_rec));
    return 0;
}

MGDEF void mg_pipe_exec_run(mg_pipe_exec *ex) {
    ex->iteration++;
    /* a traced run starts together on every rank, so the ranks' clocks line up            */
    if (ex->desc.trace && ex->p > 1) mg_barrier(ex->comm, &ex->comm->pipeline);
    ex->t0 = mg__pipe_now();
    mg__pipe_run_items(ex, 0);
}

MGDEF void mg_pipe_exec_free(mg_pipe_exec *ex) {
    int i;
    if (!ex) return;
    if (ex->buffers && !ex->desc.ctx)   /* arena buffers go with the arena                   */
        for (i = 0; i < ex->n_buffers; i++) MG_FREE(ex->buffers[i]);
    if (ex->buffers) MG_FREE(ex->buffers);
    if (ex->free_ids) MG_FREE(ex->free_ids);
    if (ex->in_buf) MG_FREE(ex->in_buf);
    if (ex->gout_buf) MG_FREE(ex->gout_buf);
    if (ex->out_buf) MG_FREE(ex->out_buf);
    if (ex->gin_buf) MG_FREE(ex->gin_buf);
    if (ex->recv_item_f) MG_FREE(ex->recv_item_f);
    if (ex->recv_item_b) MG_FREE(ex->recv_item_b);
    if (ex->trace) MG_FREE(ex->trace);
    mg_schedule_free(&ex->plan);
    memset(ex, 0, sizeof *ex);
}

MGDEF int mg_pipe_exec_write_trace(mg_pipe_exec *ex, const char *path, char *err,
                                   size_t errlen) {
    int r, i, rc = 0;
    char tok[32];
    for (r = 0; r < ex->p; r++) {
        if (r == ex->rank) {
            FILE *f = fopen(path, r == 0 ? "w" : "a");
            if (!f) {
                rc = mg__pipe_fail(err, errlen, "cannot write pipeline trace '%s': %s", path,
                                   strerror(errno));
            } else {
                if (r == 0)
                    fprintf(f, MG__PIPE_TRACE_MAGIC " 1 p=%d v=%d m=%d\n", ex->p, ex->plan.v,
                            ex->m);
                for (i = 0; i < ex->n_trace; i++) {
                    const mg_pipe_action *a = &ex->plan.actions[ex->trace[i].item];
                    fprintf(f, "%d %s %.9f %.9f\n", ex->rank,
                            mg__pipe_is_comm(a->op) ? "COMM"
                                                    : mg_pipe_action_str(a, tok, sizeof tok),
                            ex->trace[i].start, ex->trace[i].end);
                }
                if (fclose(f) != 0)
                    rc = mg__pipe_fail(err, errlen, "cannot write pipeline trace '%s'", path);
            }
        }
        if (ex->p > 1) mg_barrier(ex->comm, &ex->comm->pipeline);
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------------
   6. Simulator, traces and pictures
   ------------------------------------------------------------------------------------------ */
MGDEF int mg_pipe_simulate(const mg_schedule *s, const mg_pipe_costs *c, int model,
                           mg_pipe_timeline *tl, char *err, size_t errlen) {
    mg__pipe_index ix;
    mg_schedule low;
    int rc, *peer = NULL;
    memset(tl, 0, sizeof *tl);
    if (!(c->f >= 0 && c->b >= 0 && c->w >= 0 && c->transfer >= 0))
        return mg__pipe_fail(err, errlen, "costs must be non-negative numbers (f=%g b=%g w=%g "
                             "transfer=%g)", c->f, c->b, c->w, c->transfer);
    if (model != MG_SIM_IDEAL && model != MG_SIM_GROUPS)
        return mg__pipe_fail(err, errlen, "unknown simulation model %d", model);
    if (mg_schedule_validate(s, err, errlen)) return -1;
    if (model == MG_SIM_IDEAL) {
        rc = mg__pipe_scan(s, &ix, err, errlen);
        if (rc == 0) rc = mg__pipe_engine(s, &ix, NULL, c, model, tl, NULL, NULL, err, errlen);
        mg__pipe_index_free(&ix);
        return rc;
    }
    mg__pipe_explicit(s, &low);
    peer = mg__pipe_ints((size_t)low.start[low.p] + 1, -1);
    rc = mg__pipe_scan(&low, &ix, err, errlen);
    if (rc == 0) rc = mg__pipe_match(&low, peer, err, errlen);
    if (rc == 0) rc = mg__pipe_engine(&low, &ix, peer, c, model, tl, NULL, NULL, err, errlen);
    mg__pipe_index_free(&ix);
    MG_FREE(peer);
    mg_schedule_free(&low);
    return rc;
}

MGDEF void mg_pipe_timeline_free(mg_pipe_timeline *tl) {
    if (!tl) return;
    if (tl->events) MG_FREE(tl->events);
    if (tl->busy) MG_FREE(tl->busy);
    if (tl->peak_in_flight) MG_FREE(tl->peak_in_flight);
    memset(tl, 0, sizeof *tl);
}
MGDEF double mg_pipe_idle_fraction(const mg_pipe_timeline *tl, int rank) {
    /* A rank cannot be busy longer than the makespan: busy is a sum of durations, so for
       back-to-back actions it can exceed the makespan by rounding alone — that is no idle time. */
    mg__pipe_check_rank("mg_pipe_idle_fraction", rank, tl->p);
    double idle = tl->makespan > 0 ? (tl->makespan - tl->busy[rank]) / tl->makespan : 0;
    return idle > 0 ? idle : 0;
}

/* A trace event with the line it came from, sorted to find what no run can produce.       */
typedef struct mg__pipe_trace_ev { mg_pipe_event e; int line; } mg__pipe_trace_ev;
static int mg__pipe_cmp_int(int a, int b) { return a < b ? -1 : a > b; }
static int mg__pipe_cmp_dbl(double a, double b) { return a < b ? -1 : a > b; }
/* by action, then line: one action twice is two neighbours                              */
static int mg__pipe_trace_by_action(const void *x, const void *y) {
    const mg__pipe_trace_ev *a = (const mg__pipe_trace_ev *)x, *b = (const mg__pipe_trace_ev *)y;
    int c = mg__pipe_cmp_int(a->e.a.op, b->e.a.op);
    if (!c) c = mg__pipe_cmp_int(a->e.a.stage, b->e.a.stage);
    if (!c) c = mg__pipe_cmp_int(a->e.a.mb, b->e.a.mb);
    return c ? c : mg__pipe_cmp_int(a->line, b->line);
}
/* by rank, start, end, line: on one rank each event must start at or after its predecessor
   ends (an instant event [t, t] sorts before one that starts at t)                       */
static int mg__pipe_trace_by_time(const void *x, const void *y) {
    const mg__pipe_trace_ev *a = (const mg__pipe_trace_ev *)x, *b = (const mg__pipe_trace_ev *)y;
    int c = mg__pipe_cmp_int(a->e.rank, b->e.rank);
    if (!c) c = mg__pipe_cmp_dbl(a->e.start, b->e.start);
    if (!c) c = mg__pipe_cmp_dbl(a->e.end, b->e.end);
    return c ? c : mg__pipe_cmp_int(a->line, b->line);
}
static const char *mg__pipe_trace_tok(const mg_pipe_event *e, char *buf, size_t cap) {
    return e->a.op == MG_PIPE_COMM ? "COMM" : mg_pipe_action_str(&e->a, buf, cap);
}
/* What a run cannot produce: an action twice, or two events of one rank that overlap (a
   rank runs one thing at a time: its computes and its waits for send/recv groups follow one
   another; a real trace's rounded times may touch, end == next start, but never overlap). */
static int mg__pipe_trace_check(const mg__pipe_trace_ev *ev, int n, char *err, size_t errlen) {
    mg__pipe_trace_ev *t = (mg__pipe_trace_ev *)mg__pipe_malloc(
        (size_t)(n ? n : 1) * sizeof(mg__pipe_trace_ev));
    char a[32], b[32];
    int i, rc = 0;
    memcpy(t, ev, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, mg__pipe_trace_by_action);
    for (i = 1; i < n && !rc; i++)
        if (t[i].e.a.op != MG_PIPE_COMM && t[i].e.a.op == t[i - 1].e.a.op &&
            t[i].e.a.stage == t[i - 1].e.a.stage && t[i].e.a.mb == t[i - 1].e.a.mb)
            rc = mg__pipe_fail(err, errlen, "trace line %d: %s was already run on line %d (an "
                               "action runs once per iteration)", t[i].line,
                               mg__pipe_trace_tok(&t[i].e, a, sizeof a), t[i - 1].line);
    qsort(t, (size_t)n, sizeof *t, mg__pipe_trace_by_time);
    for (i = 1; i < n && !rc; i++)
        if (t[i].e.rank == t[i - 1].e.rank && t[i].e.start < t[i - 1].e.end) {
            /* named from the later line: the earlier one was fine when it was read */
            const mg__pipe_trace_ev *x = t[i].line > t[i - 1].line ? &t[i] : &t[i - 1];
            const mg__pipe_trace_ev *y = x == &t[i] ? &t[i - 1] : &t[i];
            rc = mg__pipe_fail(err, errlen, "trace line %d: %s [%.9g, %.9g] overlaps line %d's "
                               "%s [%.9g, %.9g] on rank %d (a rank runs one action at a time)",
                               x->line, mg__pipe_trace_tok(&x->e, a, sizeof a), x->e.start,
                               x->e.end, y->line, mg__pipe_trace_tok(&y->e, b, sizeof b),
                               y->e.start, y->e.end, x->e.rank);
        }
    MG_FREE(t);
    return rc;
}

MGDEF int mg_pipe_trace_parse(const char *text, mg_pipe_timeline *tl, char *err,
                              size_t errlen) {
    const char *c = text;
    int line = 0, p = 0, v = 0, m = 0, version = 0, have_header = 0, n = 0, cap = 0, i;
    mg__pipe_trace_ev *ev = NULL;
    memset(tl, 0, sizeof *tl);
    if (!text) return mg__pipe_fail(err, errlen, "trace text is missing");
    for (; *c; line++) {
        const char *eol = strchr(c, '\n');
        int len = eol ? (int)(eol - c) : (int)strlen(c);
        char buf[256], tok[64];
        int rank, used = 0;
        double t_start, t_end;
        const char *next = eol ? eol + 1 : c + len;
        if (len >= (int)sizeof buf) {
            if (ev) MG_FREE(ev);
            return mg__pipe_fail(err, errlen, "trace line %d is too long", line + 1);
        }
        memcpy(buf, c, (size_t)len);
        buf[len] = 0;
        c = next;
        if (strspn(buf, " \t\r") == strlen(buf) || buf[0] == '#') continue;
        if (!have_header) {
            if (sscanf(buf, MG__PIPE_TRACE_MAGIC " %d p=%d v=%d m=%d", &version, &p, &v, &m) != 4 ||
                version != 1 || mg__pipe_check_sizes(p, v, m, NULL, 0)) {
                if (ev) MG_FREE(ev);
                return mg__pipe_fail(err, errlen, "trace line %d: expected the header '"
                                     MG__PIPE_TRACE_MAGIC " 1 p=P v=V m=M'", line + 1);
            }
            have_header = 1;
            continue;
        }
        if (sscanf(buf, "%d %63s %lf %lf %n", &rank, tok, &t_start, &t_end, &used) != 4 ||
            buf[used] != 0) {
            if (ev) MG_FREE(ev);
            return mg__pipe_fail(err, errlen, "trace line %d: expected '<rank> <action> <start> "
                                 "<end>', got '%s'", line + 1, buf);
        }
        if (n == cap) {
            mg__pipe_trace_ev *grown;
            cap = cap ? 2 * cap : 256;
            grown = (mg__pipe_trace_ev *)mg__pipe_malloc((size_t)cap * sizeof *grown);
            if (ev) { memcpy(grown, ev, (size_t)n * sizeof *grown); MG_FREE(ev); }
            ev = grown;
        }
        if (strcmp(tok, "COMM") == 0) {
            ev[n].e.a = mg__pipe_act(MG_PIPE_COMM, 0, 0);
        } else if (mg__pipe_parse_token(tok, (int)strlen(tok), &ev[n].e.a, line + 1, err,
                                        errlen)) {
            MG_FREE(ev);
            return -1;
        }
        if (rank < 0 || rank >= p || !(t_start <= t_end) || !isfinite(t_start) ||
            !isfinite(t_end) || (ev[n].e.a.op != MG_PIPE_COMM && (ev[n].e.a.stage >= p * v ||
                                                                   ev[n].e.a.mb >= m))) {
            MG_FREE(ev);
            return mg__pipe_fail(err, errlen, "trace line %d: '%s' is outside the pipeline "
                                 "(p=%d v=%d m=%d) or ends before it starts", line + 1, buf, p,
                                 v, m);
        }
        if (ev[n].e.a.op != MG_PIPE_COMM && ev[n].e.a.stage % p != rank) {
            int stage = ev[n].e.a.stage;
            MG_FREE(ev);
            return mg__pipe_fail(err, errlen, "trace line %d: '%s': stage %d runs on rank %d "
                                 "(stage %% p), not on rank %d", line + 1, buf, stage,
                                 stage % p, rank);
        }
        ev[n].e.rank = rank;
        ev[n].e.start = t_start;
        ev[n].e.end = t_end;
        ev[n].line = line + 1;
        n++;
    }
    if (!have_header) return mg__pipe_fail(err, errlen, "trace is empty");
    if (mg__pipe_trace_check(ev, n, err, errlen)) {
        if (ev) MG_FREE(ev);
        return -1;
    }
    tl->p = p;
    tl->v = v;
    tl->m = m;
    tl->n_events = n;
    tl->events = (mg_pipe_event *)mg__pipe_malloc((size_t)(n ? n : 1) * sizeof(mg_pipe_event));
    for (i = 0; i < n; i++) tl->events[i] = ev[i].e;
    if (ev) MG_FREE(ev);
    mg__pipe_timeline_finish(tl, 0);
    return 0;
}

MGDEF int mg_pipe_trace_load(const char *path, mg_pipe_timeline *tl, char *err,
                             size_t errlen) {
    char why[512], *text;
    int rc;
    memset(tl, 0, sizeof *tl);
    text = mg__pipe_read_text(path, "trace", 1L << 30, err, errlen);
    if (!text) return -1;
    rc = mg_pipe_trace_parse(text, tl, why, sizeof why);
    MG_FREE(text);
    if (rc) return mg__pipe_fail(err, errlen, "trace '%s': %s", path, why);
    return 0;
}

/* Colour of an action box: hue by operation (the paper's figures: forwards blue, backwards
   green; here I teal-green and W orange), lighter for later chunks.                        */
static void mg__pipe_svg_colour(int op, int chunk, int v, char *buf, size_t buflen) {
    int hue = op == MG_PIPE_F ? 212 : op == MG_PIPE_B ? 130 : op == MG_PIPE_I ? 160 : 32;
    int light = 42 + (v > 1 ? (30 * chunk) / (v - 1) : 0);
    snprintf(buf, buflen, "hsl(%d,65%%,%d%%)", hue, light);
}
static void mg__pipe_svg_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

MGDEF int mg_pipe_timeline_svg(const mg_pipe_timeline *tl, const char *title, FILE *f) {
    const double left = 70, top = 48, row = 30, gap = 6, plot_w = 1100;
    /* pixels = time / span · plot_w: divided first, so a tiny makespan cannot overflow a
       pixels-per-second scale to infinity                                                 */
    double span = tl->makespan > 0 ? tl->makespan : plot_w, step, t, n_ticks;
    double height = top + tl->p * (row + gap) + 60, width = left + plot_w + 30;
    int i, r, k;
    char colour[40];
    const int legend_ops[4] = {MG_PIPE_F, MG_PIPE_B, MG_PIPE_I, MG_PIPE_W};
    const char *legend_names[4] = {"forward F", "backward B", "backward-input I",
                                   "backward-weight W"};
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"18\" font-size=\"14\">", left);
    mg__pipe_svg_text(f, title ? title : "pipeline schedule");
    fprintf(f, "</text>\n<text x=\"%.0f\" y=\"34\">p=%d v=%d m=%d  makespan=%.6g  "
               "bubble_fraction=%.4f  (boxes: microbatch number%s)</text>\n", left, tl->p,
            tl->v, tl->m, tl->makespan, tl->bubble_fraction,
            tl->v > 1 ? "; lighter = later chunk" : "");
    for (r = 0; r < tl->p; r++)
        fprintf(f, "<text x=\"8\" y=\"%.1f\">rank %d</text>\n", top + r * (row + gap) + row * 0.65,
                r);
    for (i = 0; i < tl->n_events; i++) {
        const mg_pipe_event *e = &tl->events[i];
        double x = left + (e->start - tl->t0) / span * plot_w;
        double w = (e->end - e->start) / span * plot_w;
        double y = top + e->rank * (row + gap);
        if (w < 0.5) w = 0.5;
        if (e->a.op == MG_PIPE_COMM) {
            fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"4\" fill=\"#999\"/>\n",
                    x, y + row - 4, w);
            continue;
        }
        mg__pipe_svg_colour(e->a.op, e->a.stage / tl->p, tl->v, colour, sizeof colour);
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" "
                   "stroke=\"white\" stroke-width=\"0.8\"><title>%d%s%d [%.6g, %.6g]</title>"
                   "</rect>\n", x, y, w, row - 6, colour, e->a.stage, mg_pipe_op_name(e->a.op),
                e->a.mb, e->start - tl->t0, e->end - tl->t0);
        if (w >= 9)
            fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" fill=\"white\">%d"
                       "</text>\n", x + w / 2, y + (row - 6) * 0.7, e->a.mb);
    }
    /* time axis: ticks at 1, 2 or 5 × 10^k, about ten of them. The k-th tick is k·step,
       counted, not summed: a step below the resolution of the doubles never advanced the sum.
       A makespan so small (subnormal) that a tenth of it underflows gets the tick at 0 only. */
    step = pow(10, floor(log10(tl->makespan / 10)));
    n_ticks = 1;
    if (tl->makespan > 0 && step > 0 && isfinite(tl->makespan / step)) {
        if (tl->makespan / step > 50) step *= 5;
        else if (tl->makespan / step > 20) step *= 2;
        n_ticks = floor(tl->makespan / step * (1 + 1e-9)) + 1;
    }
    {
        double y_axis = top + tl->p * (row + gap) + 4;
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                left, y_axis, left + plot_w, y_axis);
        for (k = 0; k < n_ticks; k++) {
            double px;
            t = k * step;
            px = left + t / span * plot_w;
            fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"black\"/>"
                       "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%.6g</text>\n",
                    px, y_axis, px, y_axis + 4, px, y_axis + 16, t);
        }
        for (k = 0; k < 4; k++) {
            double x = left + k * 170;
            mg__pipe_svg_colour(legend_ops[k], 0, 1, colour, sizeof colour);
            fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\"/>"
                       "<text x=\"%.0f\" y=\"%.1f\">%s</text>\n", x, y_axis + 26, colour, x + 18,
                    y_axis + 36, legend_names[k]);
        }
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}

#endif /* MG_PIPELINE_IMPLEMENTED */
#endif /* MG_IMPLEMENTATION */

/*
MIT License. Copyright (c) megatron.h contributors.
Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions: The above copyright notice
and this permission notice shall be included in all copies or substantial portions of the
Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED,
INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE
AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/
