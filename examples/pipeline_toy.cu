/* pipeline_toy.cu — mg_pipeline.h without a transformer: a few toy stages pipelined over MPI
   ranks with a built-in schedule and with one read from a file, checked against the serial
   computation. A starting point for trying schedules of your own.

     make build/pipeline_toy
     mpirun -np 4 build/pipeline_toy                                  (1f1b, p=4, m=8)
     mpirun -np 4 build/pipeline_toy --schedule interleaved -v 2 -m 8
     mpirun -np 2 build/pipeline_toy --schedule zb-h1 -m 4 \
                                     --schedule-file examples/pipeline_toy.sched
     mpirun -np 4 build/pipeline_toy --schedule zb-h1 --work-ms 2 --trace toy.trace
     build/pipeline_sim --trace toy.trace --svg toy.svg       (the measured timeline)

   The model: p·v virtual stages, stage s holds one weight w_s and computes y = w_s·x on a
   vector of H numbers (a scalar matrix times x); the loss is Σ y of the last stage over all
   microbatches. Backward: dx = w_s·dy (the input gradient, I) and dw_s = Σ dy·x (the weight
   gradient, W), accumulated over microbatches. The weights are powers of two and the data
   small integers, so the pipelined results equal the serial ones exactly, whatever order the
   schedule runs the microbatches in.

   What the callbacks see (mg_pipe_io): the virtual stage, its chunk and the microbatch; the
   activation received from the previous stage (input, NULL on stage 0 which reads the data)
   and the buffer to fill for the next one (output, NULL on the last stage, which takes the
   loss); in the backward the gradient from the next stage (grad_output, NULL on the last
   stage: d loss / d y = 1) and the buffer for the previous one (grad_input, NULL on stage 0).
   input and grad_output stay valid until the stage's last backward action for that
   microbatch, so a W may use them. The executor owns every buffer and every send/recv.

   The stages are host loops, so the program runs on the CPU in either build (the CUDA build's
   buffers would live on the GPU). This file defines MG_IMPLEMENTATION, as a user program does. */
#define MG_IMPLEMENTATION
#include "mg_pipeline.h"
#include <stdlib.h>
#include <string.h>

#define H 16          /* numbers per activation                                              */
#define MAX_STAGES 64
#define MAX_MB 256

/* --work-ms: each F, I and W busy-waits this long (B twice), so that a trace shows a pipeline
   rather than message latency. */
static double work_ms;
static double now_ms(void) {
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}
static void work(void) {
    double until = now_ms() + work_ms;
    while (work_ms > 0 && now_ms() < until) continue;
}

typedef struct toy {
    int p, stages, m;
    float grad_w[MAX_STAGES];     /* this rank's stages: d loss / d w_s                         */
    float loss;                   /* last stage only                                          */
} toy;

static float weight(int s) { return (s % 2) ? 0.5f : 2.0f; }
static float data(int mb, int i) { return (float)((mb + 2 * i) % 5 - 2); }

/* The vector a stage works on: the received activation, or the data on stage 0. */
static const float *stage_input(const mg_pipe_io *io, float *scratch) {
    int i;
    if (io->input) return (const float *)io->input;
    for (i = 0; i < H; i++) scratch[i] = data(io->mb, i);
    return scratch;
}
/* d loss / d y: received from the next stage, or all ones on the last stage. */
static const float *stage_grad(const mg_pipe_io *io, float *scratch) {
    int i;
    if (io->grad_output) return (const float *)io->grad_output;
    for (i = 0; i < H; i++) scratch[i] = 1.0f;
    return scratch;
}

static void toy_forward(void *user, const mg_pipe_io *io) {
    toy *t = (toy *)user;
    float scratch[H], y[H];
    const float *x = stage_input(io, scratch);
    int i;
    work();
    for (i = 0; i < H; i++) y[i] = weight(io->stage) * x[i];
    if (io->output) memcpy(io->output, y, sizeof y);          /* to stage + 1               */
    else for (i = 0; i < H; i++) t->loss += y[i];              /* the last stage: the loss   */
}
static void toy_backward_input(void *user, const mg_pipe_io *io) {
    float scratch[H];
    const float *dy = stage_grad(io, scratch);
    int i;
    (void)user;
    work();
    if (io->grad_input)                                        /* to stage − 1               */
        for (i = 0; i < H; i++) ((float *)io->grad_input)[i] = weight(io->stage) * dy[i];
}
static void toy_backward_weight(void *user, const mg_pipe_io *io) {
    toy *t = (toy *)user;
    float sx[H], sg[H];
    const float *x = stage_input(io, sx), *dy = stage_grad(io, sg);
    int i;
    work();
    for (i = 0; i < H; i++) t->grad_w[io->stage] += dy[i] * x[i];
}
static void toy_backward(void *user, const mg_pipe_io *io) {   /* B = I and W together       */
    toy_backward_input(user, io);
    toy_backward_weight(user, io);
}

/* The serial model: loss and d loss / d w_s for every stage. */
static void serial(int stages, int m, double *loss, double *grad_w) {
    int s, mb, i;
    *loss = 0;
    for (s = 0; s < stages; s++) grad_w[s] = 0;
    for (mb = 0; mb < m; mb++)
        for (i = 0; i < H; i++) {
            double x = data(mb, i), prod_all = 1;
            for (s = 0; s < stages; s++) prod_all *= weight(s);
            *loss += prod_all * x;
            for (s = 0; s < stages; s++)     /* y = (Π w) x: d/dw_s = Π_{k≠s} w_k · x       */
                grad_w[s] += prod_all / weight(s) * x;
        }
}

/* Runs one schedule; returns 1 when this rank's results equal the serial ones. */
static int run(mg_comm *comm, const mg_schedule *sched, const char *what, const char *trace) {
    toy t;
    mg_pipe_exec ex;
    mg_pipe_exec_desc d = mg_pipe_exec_desc_default();
    char err[512];
    double loss, grad_w[MAX_STAGES];
    int rank = comm->pipeline.rank, s, ok = 1;
    memset(&t, 0, sizeof t);
    t.p = sched->p;
    t.stages = sched->p * sched->v;
    t.m = sched->m;
    d.schedule = sched;
    d.msg_count = H;                 /* one activation = one gradient = H floats            */
    d.msg_dtype = MG_F32;
    d.cb.forward = toy_forward;
    d.cb.backward = toy_backward;
    d.cb.backward_input = toy_backward_input;
    d.cb.backward_weight = toy_backward_weight;
    d.cb.user = &t;
    d.trace = trace != NULL;
    if (mg_pipe_exec_init(&ex, comm, &d, err, sizeof err)) {
        if (comm->world_rank == 0) fprintf(stderr, "pipeline_toy: %s\n", err);
        return 0;
    }
    mg_pipe_exec_run(&ex);
    serial(t.stages, t.m, &loss, grad_w);
    for (s = rank; s < t.stages; s += t.p) {
        ok &= (double)t.grad_w[s] == grad_w[s];
        printf("[%s] rank %d stage %d: dloss/dw = %g (serial %g)\n", what, rank, s,
               t.grad_w[s], grad_w[s]);
    }
    if ((t.stages - 1) % t.p == rank) {
        ok &= (double)t.loss == loss;
        printf("[%s] rank %d: loss = %g (serial %g)\n", what, rank, t.loss, loss);
    }
    if (trace && mg_pipe_exec_write_trace(&ex, trace, err, sizeof err)) {
        fprintf(stderr, "pipeline_toy: %s\n", err);
        ok = 0;
    }
    mg_pipe_exec_free(&ex);
    return ok;
}

int main(int argc, char **argv) {
    mg_comm comm;
    mg_ctx ctx;
    mg_ctx_desc cd = {MG_DEVICE_CPU, 0, 1, (size_t)1 << 20};
    mg_schedule sched;
    mg_schedule_desc sd;
    const char *kind = "1f1b", *file = NULL, *trace = NULL;
    int v = 1, m = 0, i, ok = 1, all_ok = 1, p;
    char err[512];
    mg_comm_init(&comm, &argc, &argv);
    mg_ctx_init(&ctx, &cd);
    for (i = 1; i < argc; i++) {
        const char *val = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--schedule")) kind = val;
        else if (!strcmp(argv[i], "--schedule-file")) file = val;
        else if (!strcmp(argv[i], "--trace")) trace = val;
        else if (!strcmp(argv[i], "-v")) v = atoi(val);
        else if (!strcmp(argv[i], "-m")) m = atoi(val);
        else if (!strcmp(argv[i], "--work-ms")) work_ms = atof(val);
        else {
            if (comm.world_rank == 0)
                fprintf(stderr, "usage: pipeline_toy [--schedule gpipe|1f1b|interleaved|zb-h1] "
                                "[-v V] [-m M] [--schedule-file FILE] [--trace FILE] "
                                "[--work-ms X]\n");
            mg_comm_finalize(&comm);
            return 2;
        }
        i++;
    }
    p = comm.world_size;             /* every rank is one pipeline stage (t = d = 1)          */
    if (m <= 0) m = 2 * p;
    if (p * v > MAX_STAGES || m > MAX_MB) {
        if (comm.world_rank == 0) fprintf(stderr, "pipeline_toy: at most %d stages and %d "
                                          "microbatches\n", MAX_STAGES, MAX_MB);
        mg_comm_finalize(&comm);
        return 2;
    }
    mg_comm_setup_groups(&comm, &ctx, 1, p, v);

    /* 1. a built-in schedule                                                               */
    sd = mg_schedule_desc_default(mg_schedule_kind_parse(kind), p, v, m);
    if (mg_schedule_build(&sched, &sd, err, sizeof err)) {
        if (comm.world_rank == 0) fprintf(stderr, "pipeline_toy: %s\n", err);
        all_ok = 0;
    } else {
        if (comm.world_rank == 0) {
            printf("schedule %s, p=%d v=%d m=%d (one line per rank):\n", kind, p, v, m);
            mg_schedule_write(&sched, stdout);
        }
        fflush(stdout);
        all_ok &= run(&comm, &sched, kind, trace);
        mg_schedule_free(&sched);
    }
    /* 2. a schedule from a file: every rank reads it; it is validated before it runs      */
    if (file) {
        if (mg_schedule_load(&sched, file, p, 0, m, err, sizeof err)) {
            if (comm.world_rank == 0) fprintf(stderr, "pipeline_toy: %s\n", err);
            all_ok = 0;
        } else {
            if (sched.v * p > MAX_STAGES) {
                all_ok = 0;
            } else {
                mg_comm_setup_groups(&comm, &ctx, 1, p, sched.v);
                all_ok &= run(&comm, &sched, file, NULL);
            }
            mg_schedule_free(&sched);
        }
    }
    /* every rank agrees on the verdict (a one-int all-reduce over the world)                */
    {
        float mine = all_ok ? 0.0f : 1.0f, bad = 0;
        mg_all_reduce(&comm, &comm.world, &mine, &bad, 1, MG_F32, MG_MAX);
        ok = bad == 0;
    }
    if (comm.world_rank == 0) {
        printf("pipeline_toy: %s\n", ok ? "pipelined results equal the serial computation"
                                        : "MISMATCH or error (see above)");
        if (ok && trace) printf("trace written to %s: build/pipeline_sim --trace %s --svg "
                                "toy.svg\n", trace, trace);
    }
    mg_ctx_free(&ctx);
    mg_comm_finalize(&comm);
    return ok ? 0 : 1;
}
