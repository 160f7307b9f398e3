/* bench/scaling — throughput of the t·p·d layouts of one job (mpirun -np W) training one model
   with one global batch, beside each layout's pipeline bubble and its per-iteration
   communication volume per rank, from PAPER.md's formulas and as counted by mg_comm.

     mpirun -np 8 build/scaling [--layouts TxPxD,…] [--schedule 1f1b|gpipe|interleaved|zb-h1]
                                [--vp V] [--layers N] [--hidden N] [--heads N] [--seq N]
                                [--micro N] [--global N] [--iters N] [--sp] [--distributed]

   Layouts: every factorisation W = t·p·d (by default; t, p, d in divisor order, p slowest),
   or the --layouts list ("1x1x8,2x2x2,1x8x1": t×p×d). A layout the model cannot take (t not
   dividing the heads or the hidden size, p not dividing the layers, a global batch the d
   replicas cannot share in whole microbatches, a schedule invalid for its p and m) is
   skipped with the reason under the table. Pipeline schedule: --schedule (default 1F1B);
   interleaved runs v = --vp chunks per rank (default 2) where p·v divides the layers and the
   schedule is valid for m, else 1F1B (the table says which ran).

   Defaults: 8 layers, hidden 256, 8 heads, vocabulary 256, sequence 128, micro-batch 1,
   global batch 16, fp32, 5 timed iterations after 1 warm-up, per layout. Printed, as
   Markdown (rank 0):
   1. per layout: tokens per second of the whole job and ms per iteration; m = B/(b·d)
      microbatches per replica; the pipeline bubble fraction from PAPER.md — (p−1)/m for
      1F1B and GPipe, (p−1)/(v·m) interleaved, and for ZB-H1 (p−1)/(3m), a third of 1F1B's
      (Qi et al. 2023, with forward, backward-input and backward-weight of equal cost) —
      beside the measured one, Σ_r(makespan − busy_r)/Σ_r busy_r over the pipeline ranks of
      the last timed iteration (mg_pipeline's trace of replica 0: busy = time in F/B/I/W,
      the same normalisation as the formula, bubble over ideal time); then bytes sent per
      rank per iteration by the tensor, pipeline (point-to-point) and data groups, formula
      (bench/traffic.h, which spells them out) and mg_comm's counters, each the maximum over
      the ranks (the busiest rank);
   2. counted − formula per rank per iteration, min … max over the ranks, per group and for
      the embedding group (the tied word embedding's all-reduce between the first and last
      stage), the tensor group's with traffic.h's terms beyond the paper's layers (embedding,
      output layer and cross-entropy) added to its formula: the formulas' check (what remains
      are the per-iteration scalars, loss and gradient norm);
   3. mg_plan's predicted iteration time for the same layout beside the measured one, and its
      bubble fraction, which (unlike PAPER.md's formula) charges the first stage's embedding
      and the last stage's output layer and loss: the slowest stage sets the pace.

   Closing the loop with mg_plan (the paper's performance model, --gpu cpu): before timing
   each layout, every rank runs mg_plan_calibrate_cpu at the same time with the OpenMP
   threads it trains with, so the sgemm rates and the memcpy bandwidth are those one rank
   really gets while its peers compete for the same cores (8 ranks with 1 thread on 2 cores:
   about 1/4 of a core each); the ranks' numbers are averaged. mg_plan then evaluates each
   layout with gpus = gpus_per_node = world (one machine, MPI shared memory as the "links"),
   fp32, no recomputation, the layout's t, p, d and v, scatter/gather, gradient-accumulation
   fusion and the data-parallel reduction overlapped with the backward as megatron.h does it.
   mg_plan models 1F1B and interleaving only: GPipe takes 1F1B's time in it, ZB-H1 1F1B's
   bubble (an upper bound).                                                                  */
#include "overlap_util.h"
#include "traffic.h"
#include "mg_plan.h"
#include <omp.h>
#include <unistd.h>

#define MAX_LAYOUTS 64

/* The cpu preset calibrated by all ranks at once (see above), averaged over the world. */
static int scaling_calibrate(mg_comm *comm, mg_plan_gpu *gpu, double seconds) {
    float rates[3 + 8], mean[3 + 8];
    char err[256] = "it failed on another rank";
    int k, n, failed;
    mg_plan_gpu_preset("cpu", gpu);
    mg_barrier(comm, &comm->world);
    failed = mg_plan_calibrate_cpu(gpu, omp_get_max_threads(), comm->world_size, seconds, err,
                                   sizeof err) != 0;
    n = gpu->curve_points < 8 ? gpu->curve_points : 8;
    rates[0] = (float)failed;
    rates[1] = (float)gpu->peak_tflops;
    rates[2] = (float)gpu->hbm_gbps;
    for (k = 0; k < 8; k++) rates[3 + k] = k < n ? (float)gpu->curve_efficiency[k] : 0.0f;
    mg_all_reduce(comm, &comm->world, rates, mean, 3 + 8, MG_F32, MG_AVG);
    if (mean[0] > 0) {
        if (comm->world_rank == 0) fprintf(stderr, "scaling: error: calibration: %s\n", err);
        return -1;
    }
    gpu->peak_tflops = mean[1];
    gpu->hbm_gbps = mean[2];
    gpu->nvlink_gbps = gpu->ib_gbps_per_node = mean[2] / 2;   /* as mg_plan_calibrate_cpu */
    for (k = 0; k < n; k++) gpu->curve_efficiency[k] = mean[3 + k];
    return 0;
}

static const char *arg_str(int argc, char **argv, const char *name, const char *def) {
    int i;
    for (i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

typedef struct { int t, p, d; } layout;

/* Every t·p·d = world, p slowest then t: 1x1x8, 2x1x4, …, 1x2x4, …, 1x8x1. */
static int all_layouts(int world, layout *out) {
    int t, p, n = 0;
    for (p = 1; p <= world; p++)
        for (t = 1; t <= world; t++)
            if (world % (t * p) == 0 && n < MAX_LAYOUTS) {
                out[n].t = t; out[n].p = p; out[n].d = world / (t * p);
                n++;
            }
    return n;
}
/* "TxPxD,TxPxD,…" with every product equal to world; the count, or -1 with the reason. */
static int parse_layouts(const char *text, int world, layout *out, char *err, size_t errlen) {
    int n = 0, used;
    const char *c = text;
    while (*c) {
        layout l;
        if (n == MAX_LAYOUTS) {
            snprintf(err, errlen, "--layouts: more than %d layouts", MAX_LAYOUTS);
            return -1;
        }
        if (sscanf(c, "%dx%dx%d%n", &l.t, &l.p, &l.d, &used) != 3 || l.t < 1 || l.p < 1 ||
            l.d < 1 || (c[used] != ',' && c[used] != 0)) {
            snprintf(err, errlen, "--layouts %s: expected TxPxD[,TxPxD…] with positive sizes, "
                     "e.g. 1x1x%d,2x2x%d", text, world, world / 4 > 0 ? world / 4 : 1);
            return -1;
        }
        if (l.t * l.p * l.d != world) {
            snprintf(err, errlen, "--layouts: %dx%dx%d has %d ranks, the job has %d (t·p·d "
                     "must equal the world)", l.t, l.p, l.d, l.t * l.p * l.d, world);
            return -1;
        }
        out[n++] = l;
        c += used + (c[used] == ',');
    }
    if (n == 0) snprintf(err, errlen, "--layouts is empty");
    return n ? n : -1;
}

/* The bubble fraction PAPER.md gives for the schedule (ZB-H1: a third of 1F1B's, see above). */
static double bubble_formula(int kind, int p, int m, int v) {
    double f = mg_plan_bubble_fraction(p, m, kind == MG_SCHED_INTERLEAVED ? v : 1);
    return kind == MG_SCHED_ZB_H1 ? f / 3 : f;
}

/* Maximum over the world of n values (fp32: the tables print 3-4 digits; the differences
   checked are small integers, exact in fp32).                                              */
static void world_max(mg_comm *comm, float *x, int n) {
    mg_all_reduce(comm, &comm->world, x, x, n, MG_F32, MG_MAX);
}

/* The measured bubble of the last timed iteration: the pipeline group of each replica's
   tensor rank 0 writes its trace (mg_pipeline's format) to its own file; world rank 0
   (replica 0) reads its file back. Returns Σ_r(makespan − busy_r)/Σ_r busy_r on world rank
   0, −1 elsewhere or on failure.                                                           */
static double measured_bubble(mg_trainer *tr, mg_comm *comm, int tag) {
    char path[256], err[MG_ERRLEN];
    mg_pipe_timeline tl;
    double bubble = -1;
    int writer = tr->model.layout.tp_rank == 0 && tr->model.layout.pp_rank == 0;
    snprintf(path, sizeof path, "/tmp/mg_bench_scaling_%d_%d.trace", tag, tr->dp_rank);
    if (mg_trainer_write_pipeline_trace(tr, path, err, sizeof err)) {
        if (comm->world_rank == 0) fprintf(stderr, "scaling: %s\n", err);
    } else if (comm->world_rank == 0) {
        if (mg_pipe_trace_load(path, &tl, err, sizeof err) == 0) {
            bubble = tl.bubble_fraction;
            mg_pipe_timeline_free(&tl);
        } else {
            fprintf(stderr, "scaling: %s\n", err);
        }
    }
    if (writer) remove(path);   /* written in full: the write ends with a pipeline barrier */
    return bubble;
}

typedef struct {
    layout l;
    int v, m, kind;              /* kind −1: no pipeline (p = 1)                             */
    double ms, bubble_formula, bubble_measured;
    float vol[8];                /* max over ranks: formula, counted for T, P, D, E           */
    float diff_max[4], diff_min[4]; /* counted − formula per rank: max, min over ranks      */
    double gflops, gbps;
    int predicted_ok;
    mg_plan_result predicted;
} row_t;

int main(int argc, char **argv) {
    static mg_comm comm;
    static layout lay[MAX_LAYOUTS];
    static row_t row[MAX_LAYOUTS];
    static char notes[2 * MAX_LAYOUTS][400];   /* a fallback and a skip per layout at most */
    int layers, hidden, heads, seq, micro, global, iters, sp, dist, vp, kind, k, n_lay, rows = 0;
    int n_notes = 0, tag;
    const char *layouts_arg, *schedule_arg;
    char line[2048], path[256], err[512] = "";
    float pid;
    mg_plan_model plan_model;
    mg_plan_training plan_training;
    mg_plan_cluster plan_cluster;
    mg_comm_init(&comm, &argc, &argv);
    layers = bench_arg_int(argc, argv, "--layers", 8);
    hidden = bench_arg_int(argc, argv, "--hidden", 256);
    heads = bench_arg_int(argc, argv, "--heads", 8);
    seq = bench_arg_int(argc, argv, "--seq", 128);
    micro = bench_arg_int(argc, argv, "--micro", 1);
    global = bench_arg_int(argc, argv, "--global", 16);
    iters = bench_arg_int(argc, argv, "--iters", 5);
    vp = bench_arg_int(argc, argv, "--vp", 2);
    sp = bench_arg_flag(argc, argv, "--sp");
    dist = bench_arg_flag(argc, argv, "--distributed");
    layouts_arg = arg_str(argc, argv, "--layouts", NULL);
    schedule_arg = arg_str(argc, argv, "--schedule", "1f1b");

    /* every rank checks the same arguments: all fail, or none (no communication needed) */
    kind = mg_schedule_kind_parse(schedule_arg);
    n_lay = layouts_arg ? parse_layouts(layouts_arg, comm.world_size, lay, err, sizeof err)
                        : all_layouts(comm.world_size, lay);
    if (n_lay > 0 && (kind < 0 || kind == MG_SCHED_CUSTOM)) {
        snprintf(err, sizeof err, "--schedule %s: expected 1f1b, gpipe, interleaved or zb-h1",
                 schedule_arg);
        n_lay = -1;
    } else if (n_lay > 0 && bench_arg_flag(argc, argv, "--vp") && kind != MG_SCHED_INTERLEAVED) {
        snprintf(err, sizeof err, "--vp applies to --schedule interleaved only (not %s)",
                 schedule_arg);
        n_lay = -1;
    } else if (n_lay > 0 && (vp < 1 || vp > MG_MAX_CHUNKS)) {
        snprintf(err, sizeof err, "--vp %d: expected 1 … %d model chunks per rank", vp,
                 MG_MAX_CHUNKS);
        n_lay = -1;
    } else if (n_lay > 0 && (layers < 1 || hidden < 1 || heads < 1 || seq < 1 || micro < 1 ||
                             global < 1 || iters < 1)) {
        snprintf(err, sizeof err, "--layers, --hidden, --heads, --seq, --micro, --global and "
                 "--iters must be positive");
        n_lay = -1;
    }
    if (n_lay < 0) {
        if (comm.world_rank == 0) fprintf(stderr, "scaling: error: %s\n", err);
        mg_comm_finalize(&comm);
        return 2;
    }
    /* file names shared by the job: rank 0's process id */
    pid = (float)(getpid() % (1 << 24));
    mg_broadcast(&comm, &comm.world, &pid, &pid, 1, MG_F32, 0);
    tag = (int)pid;
    snprintf(path, sizeof path, "/tmp/mg_bench_scaling_%d.bin", seq);
    if (bench_tokens(path, (int64_t)(iters + 2) * global * seq + 1)) return 1;
    plan_cluster.gpus = plan_cluster.gpus_per_node = comm.world_size;
    {   /* the trainer's model and settings as mg_plan sees them: l, h, a, s, V; B, fp32 with fp32
           gradients, the DP reduction overlapped (the trainer's default; a one-bucket model
           exposes all of it either way), scatter/gather, gradient-accumulation fusion, the
           fused classifier and the tiled attention (the trainer's defaults) */
        mg_plan_training training = {global, MG_PLAN_FP32, 1, 1, 1, 1, 1};
        memset(&plan_model, 0, sizeof plan_model);   /* GPT-2: no Llama option */
        plan_model.flash_attention = 1;
        plan_model.num_layers = layers;
        plan_model.hidden_size = hidden;
        plan_model.num_attention_heads = heads;
        plan_model.seq_length = seq;
        plan_model.vocab_size = 256;
        plan_training = training;
    }
    if (comm.world_rank == 0) {
        printf("scaling: %d ranks, %d layers, hidden %d, %d heads, sequence %d, global batch %d "
               "(micro %d), fp32%s%s, schedule %s%s, %d timed iterations per layout\n",
               comm.world_size, layers, hidden, heads, seq, global, micro,
               sp ? ", sequence parallel" : "", dist ? ", distributed optimizer" : "",
               mg_schedule_kind_name(kind), kind == MG_SCHED_INTERLEAVED ? " (v = --vp)" : "",
               iters);
        printf("\nBytes sent per rank per iteration, the busiest rank: formula | counted\n"
               "| t | p | d | schedule | m | tokens/s | ms/iteration | bubble: formula | "
               "measured | TP: formula | counted | PP p2p: formula | counted | DP: formula | "
               "counted |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    for (k = 0; k < n_lay; k++) {
        mg_trainer tr;
        row_t *r = &row[rows];
        traffic f, c;
        double t0, diff[4];
        float vals[16];
        int t = lay[k].t, p = lay[k].p, d = lay[k].d, v = 1, i, run_kind = p > 1 ? kind : -1;
        char sched_flags[256] = "", why[MG_ERRLEN] = "";
        memset(r, 0, sizeof *r);
        /* what the model and the batch allow (the trainer would refuse the rest) */
        if (heads % t || hidden % t || (sp && seq % t))
            snprintf(why, sizeof why, "t = %d must divide the %d heads and the hidden size %d%s",
                     t, heads, hidden, sp ? " and the sequence (sequence parallel)" : "");
        else if (layers % p)
            snprintf(why, sizeof why, "p = %d does not divide the %d layers", p, layers);
        else if (global % (micro * d))
            snprintf(why, sizeof why, "global batch %d is not a multiple of micro-batch %d × "
                     "d = %d", global, micro, d);
        r->m = why[0] ? 0 : global / (micro * d);
        if (!why[0] && p > 1) {   /* the schedule: interleaved where it can, else 1F1B */
            mg_schedule s;
            mg_schedule_desc sd;
            if (kind == MG_SCHED_INTERLEAVED) {
                sd = mg_schedule_desc_default(kind, p, vp, r->m);
                if (layers % (p * vp) == 0 && mg_schedule_build(&s, &sd, NULL, 0) == 0) {
                    mg_schedule_free(&s);
                    v = vp;
                } else {
                    run_kind = MG_SCHED_1F1B;
                    snprintf(notes[n_notes++], sizeof notes[0], "%dx%dx%d: interleaved with "
                             "v = %d needs p·v | %d layers and a valid schedule for m = %d: ran "
                             "1F1B", t, p, d, vp, layers, r->m);
                }
            }
            sd = mg_schedule_desc_default(run_kind, p, v, r->m);
            if (mg_schedule_build(&s, &sd, why, sizeof why) == 0) mg_schedule_free(&s);
            snprintf(sched_flags, sizeof sched_flags, " --pipeline-model-parallel-size %d "
                     "--pipeline-schedule %s --pipeline-trace /tmp/mg_bench_scaling_%d.trace", p,
                     mg_schedule_kind_name(run_kind), tag);
            if (v > 1)
                snprintf(sched_flags + strlen(sched_flags), sizeof sched_flags -
                         strlen(sched_flags), " --num-layers-per-virtual-pipeline-stage %d",
                         layers / (p * v));
        }
        if (why[0]) {
            snprintf(notes[n_notes++], sizeof notes[0], "%dx%dx%d skipped: %s", t, p, d, why);
            continue;
        }
        snprintf(line, sizeof line, "--data-path %s --data-order sequential --split 1,0,0 "
                 "--eval-iters 0 --vocab-size 256 --num-layers %d --hidden-size %d "
                 "--num-attention-heads %d --seq-length %d --micro-batch-size %d "
                 "--global-batch-size %d --train-iters %d --lr 1e-4 --clip-grad 1.0 "
                 "--device cpu --tensor-model-parallel-size %d%s%s%s", path, layers, hidden,
                 heads, seq, micro, global, iters + 1, t, sched_flags,
                 sp ? " --sequence-parallel" : "",
                 dist && d > 1 ? " --use-distributed-optimizer" : "");
        if (bench_trainer(&tr, &comm, line)) {   /* every rank fails alike: go on */
            snprintf(notes[n_notes++], sizeof notes[0], "%dx%dx%d skipped: the trainer refused "
                     "it (stderr)", t, p, d);
            continue;
        }
        mg_trainer_step(&tr);                           /* warm-up */
        /* the machine's rates just before this layout's timing (the CPU is shared) */
        if (scaling_calibrate(&comm, &plan_cluster.gpu, 1.0)) { mg_trainer_free(&tr); break; }
        mg_comm_reset_traffic(&comm);
        mg_barrier(&comm, &comm.world);
        t0 = bench_now_ms();
        for (i = 0; i < iters; i++) mg_trainer_step(&tr);
        r->ms = (bench_now_ms() - t0) / iters;
        c = traffic_counted(&comm, iters);
        f = traffic_formula(&tr);
        r->l = lay[k];
        r->v = v;
        r->kind = run_kind;
        r->bubble_formula = bubble_formula(run_kind, p, r->m, v);
        r->bubble_measured = p > 1 ? measured_bubble(&tr, &comm, tag) : 0;
        /* volumes (max over ranks) and counted − formula (max and −min over ranks) */
        diff[0] = c.tensor - f.tensor - f.tensor_outside;
        diff[1] = c.pipeline - f.pipeline;
        diff[2] = c.data - f.data;
        diff[3] = c.embedding - f.embedding;
        vals[0] = (float)f.tensor;   vals[1] = (float)c.tensor;
        vals[2] = (float)f.pipeline; vals[3] = (float)c.pipeline;
        vals[4] = (float)f.data;     vals[5] = (float)c.data;
        vals[6] = (float)f.embedding; vals[7] = (float)c.embedding;
        for (i = 0; i < 4; i++) { vals[8 + i] = (float)diff[i]; vals[12 + i] = (float)-diff[i]; }
        world_max(&comm, vals, 16);
        for (i = 0; i < 8; i++) r->vol[i] = vals[i];
        for (i = 0; i < 4; i++) { r->diff_max[i] = vals[8 + i]; r->diff_min[i] = -vals[12 + i]; }
        if (comm.world_rank == 0) {
            char sched[32], measured[32];
            if (p == 1) snprintf(sched, sizeof sched, "—");
            else if (v > 1) snprintf(sched, sizeof sched, "interleaved v=%d", v);
            else snprintf(sched, sizeof sched, "%s", mg_schedule_kind_name(run_kind));
            if (p == 1) snprintf(measured, sizeof measured, "0");
            else if (r->bubble_measured < 0) snprintf(measured, sizeof measured, "?");
            else snprintf(measured, sizeof measured, "%.3f", r->bubble_measured);
            printf("| %d | %d | %d | %s | %d | %.0f | %.1f | %.3f | %s | %.3g | %.3g | %.3g | "
                   "%.3g | %.3g | %.3g |\n", t, p, d, sched, r->m,
                   (double)global * seq / (r->ms / 1e3), r->ms, r->bubble_formula, measured,
                   r->vol[0], r->vol[1], r->vol[2], r->vol[3], r->vol[4], r->vol[5]);
        }
        fflush(stdout);
        mg_trainer_free(&tr);
        {   /* the model's prediction for this layout */
            mg_plan_layout pl;
            pl.t = t; pl.p = p; pl.d = d; pl.v = v; pl.c = 1;
            pl.micro_batch_size = micro;
            pl.recompute = MG_PLAN_RECOMPUTE_NONE;
            pl.sequence_parallel = sp && t > 1;
            pl.distributed_optimizer = dist && d > 1;
            r->predicted_ok = mg_plan_evaluate(&plan_model, &plan_training, &plan_cluster, &pl,
                                               &r->predicted, err, sizeof err) == 0;
            if (!r->predicted_ok && comm.world_rank == 0)
                fprintf(stderr, "scaling: mg_plan %dx%dx%d: %s\n", t, p, d, err);
            r->gflops = plan_cluster.gpu.peak_tflops * 1e3;
            r->gbps = plan_cluster.gpu.hbm_gbps;
        }
        rows++;
    }
    if (comm.world_rank == 0) {
        for (k = 0; k < n_notes; k++) printf("%s%s\n", k ? "" : "\n", notes[k]);
        printf("\nCounted − formula, bytes per rank per iteration, min … max over the ranks "
               "(TP: beyond the per-layer formula and the embedding and head terms; embedding: the tied "
               "word embedding's all-reduce, first and last stage)\n"
               "| t | p | d | TP | PP p2p | DP | embedding |\n|---|---|---|---|---|---|---|\n");
        for (k = 0; k < rows; k++) {
            int i;
            printf("| %d | %d | %d |", row[k].l.t, row[k].l.p, row[k].l.d);
            for (i = 0; i < 4; i++) {
                if (row[k].diff_min[i] == row[k].diff_max[i]) printf(" %.0f |", row[k].diff_max[i]);
                else printf(" %.0f … %.0f |", row[k].diff_min[i], row[k].diff_max[i]);
            }
            printf("\n");
        }
        printf("\nmg_plan --gpu cpu, calibrated before each layout by all %d ranks at once (%d "
               "OpenMP thread%s each; sgemm peak and memcpy rate per rank):\n", comm.world_size,
               omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
        printf("| t | p | d | sgemm GFLOP/s | memcpy GB/s | measured ms | predicted ms | "
               "measured/predicted | predicted: GEMM | memory-bound | TP comm | PP comm | "
               "bubble | DP comm | optimizer | bubble fraction |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (k = 0; k < rows; k++) {
            const mg_plan_result *r = &row[k].predicted;
            if (!row[k].predicted_ok) continue;
            printf("| %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | "
                   "%.1f | %.1f | %.1f | %.1f | %.3f |\n", row[k].l.t, row[k].l.p, row[k].l.d,
                   row[k].gflops, row[k].gbps, row[k].ms, r->iteration_time * 1e3,
                   row[k].ms / (r->iteration_time * 1e3), r->time_gemm * 1e3,
                   r->time_memory_bound * 1e3, r->time_tp_comm * 1e3, r->time_pp_comm * 1e3,
                   r->time_bubble * 1e3, r->time_dp_comm * 1e3, r->time_optimizer * 1e3,
                   r->bubble_fraction);
        }
    }
    mg_comm_finalize(&comm);
    return 0;
}
