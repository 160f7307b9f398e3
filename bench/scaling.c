/* bench/scaling — throughput of every t × d layout of one job (mpirun -np W, default layouts
   t = 1, 2, 4, … up to W with d = W/t; p joins after the pipeline branch is merged) training
   one model, beside each layout's per-iteration communication volume per rank from the
   paper's formulas and as counted by mg_comm:

     tensor group  8·b·s·h·(t−1)/t floats per layer per microbatch (Narayanan et al. 2021
                   §3.3; 10·… with --sequence-parallel: the two re-gathered layernorm outputs),
                   × layers × microbatches per replica, × 4 bytes (fp32). The vocabulary-
                   parallel embedding and cross-entropy add a little more (counted, not in the
                   formula).
     data group    ring all-reduce (or reduce-scatter + all-gather) of the rank's gradients:
                   2·(d−1)/d × 4 bytes × elements of its flat buffer (≈ P/t).

     mpirun -np 8 build/scaling [--layers N] [--hidden N] [--heads N] [--seq N] [--micro N]
                                [--global N] [--iters N] [--sp] [--distributed]

   Defaults: 4 layers, hidden 256, 8 heads, vocabulary 256, sequence 128, micro-batch 1,
   global batch 16, 3 timed iterations after 1 warm-up, per layout. Printed: a Markdown table,
   tokens per second of the whole job and ms per iteration, then the volumes; then a second
   table with mg_plan's predicted iteration time for the same layout beside the measured one.

   Closing the loop with mg_plan (the paper's performance model, --gpu cpu): before timing
   each layout, every rank runs mg_plan_calibrate_cpu at the same time with the OpenMP
   threads it trains with, so the sgemm rates and the memcpy bandwidth are those one rank
   really gets while its peers compete for the same cores (8 ranks with 1 thread on 2 cores:
   about 1/4 of a core each); the ranks' numbers are averaged. mg_plan then evaluates each
   layout with gpus = gpus_per_node = world (one machine, MPI shared memory as the "links"),
   fp32, no recomputation, p = 1, v = 1, gradient-accumulation fusion as megatron.h does it.  */
#include "overlap_util.h"
#include "mg_plan.h"
#include <omp.h>

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

int main(int argc, char **argv) {
    static mg_comm comm;
    int layers, hidden, heads, seq, micro, global, iters, sp, dist, t, k, rows = 0;
    char line[2048], path[256];
    mg_plan_model plan_model;
    mg_plan_training plan_training;
    mg_plan_cluster plan_cluster;
    struct { int t, d; double measured_ms, gflops, gbps; mg_plan_result predicted; } row[16];
    mg_comm_init(&comm, &argc, &argv);
    layers = bench_arg_int(argc, argv, "--layers", 4);
    hidden = bench_arg_int(argc, argv, "--hidden", 256);
    heads = bench_arg_int(argc, argv, "--heads", 8);
    seq = bench_arg_int(argc, argv, "--seq", 128);
    micro = bench_arg_int(argc, argv, "--micro", 1);
    global = bench_arg_int(argc, argv, "--global", 16);
    iters = bench_arg_int(argc, argv, "--iters", 3);
    sp = bench_arg_flag(argc, argv, "--sp");
    dist = bench_arg_flag(argc, argv, "--distributed");
    snprintf(path, sizeof path, "/tmp/mg_bench_scaling_%d.bin", seq);
    if (bench_tokens(path, (int64_t)(iters + 2) * global * seq + 1)) return 1;
    plan_cluster.gpus = plan_cluster.gpus_per_node = comm.world_size;
    {   /* the trainer's model and settings as mg_plan sees them: l, h, a, s, V; B, fp32 with fp32
           gradients, no overlapped DP reduction, scatter/gather, gradient-accumulation fusion */
        mg_plan_model model = {layers, hidden, heads, seq, 256};
        mg_plan_training training = {global, MG_PLAN_FP32, 1, 0, 1, 1};
        plan_model = model;
        plan_training = training;
    }
    if (comm.world_rank == 0) {
        printf("scaling: %d ranks, %d layers, hidden %d, %d heads, sequence %d, global batch %d "
               "(micro %d), fp32%s%s, %d timed iterations per layout\n", comm.world_size, layers,
               hidden, heads, seq, global, micro, sp ? ", sequence parallel" : "",
               dist ? ", distributed optimizer" : "", iters);
        printf("| t | d | tokens/s | ms/iteration | TP bytes/rank/iter: formula | counted | "
               "DP bytes/rank/iter: formula | counted |\n|---|---|---|---|---|---|---|---|\n");
    }
    for (t = 1; t <= comm.world_size; t *= 2) {
        mg_trainer tr;
        double t0, ms, tp_formula, dp_formula, tp_counted, dp_counted;
        int d = comm.world_size / t, m_per;
        if (comm.world_size % t || hidden % t || heads % t || global % (micro * d) ||
            (sp && seq % t))
            continue;
        snprintf(line, sizeof line, "--data-path %s --data-order sequential --split 1,0,0 "
                 "--eval-iters 0 --vocab-size 256 --num-layers %d --hidden-size %d "
                 "--num-attention-heads %d --seq-length %d --micro-batch-size %d "
                 "--global-batch-size %d --train-iters %d --lr 1e-4 --clip-grad 1.0 "
                 "--device cpu --tensor-model-parallel-size %d%s%s", path, layers, hidden,
                 heads, seq, micro, global, iters + 1, t, sp ? " --sequence-parallel" : "",
                 dist ? " --use-distributed-optimizer" : "");
        if (bench_trainer(&tr, &comm, line)) break;
        mg_trainer_step(&tr);                           /* warm-up */
        /* the machine's rates just before this layout's timing (the CPU is shared) */
        if (scaling_calibrate(&comm, &plan_cluster.gpu, 1.0)) { mg_trainer_free(&tr); break; }
        mg_comm_reset_traffic(&comm);
        mg_barrier(&comm, &comm.world);
        t0 = bench_now_ms();
        for (k = 0; k < iters; k++) mg_trainer_step(&tr);
        ms = (bench_now_ms() - t0) / iters;
        m_per = global / (micro * d);
        tp_formula = (sp ? 10.0 : 8.0) * micro * seq * hidden * (t - 1) / t * layers * m_per * 4;
        dp_formula = 2.0 * (d - 1) / d * 4 * (double)tr.model.n_elems;
        tp_counted = (double)comm.bytes_sent[MG_GROUP_TENSOR] / iters;
        dp_counted = (double)comm.bytes_sent[MG_GROUP_DATA] / iters;
        if (comm.world_rank == 0)
            printf("| %d | %d | %.0f | %.1f | %.3g | %.3g | %.3g | %.3g |\n", t, d,
                   (double)global * seq / (ms / 1e3), ms, tp_formula, tp_counted, dp_formula,
                   dp_counted);
        fflush(stdout);
        mg_trainer_free(&tr);
        if (rows < 16) {                          /* the model's prediction for this layout */
            mg_plan_layout lay;
            char err[256];
            lay.t = t; lay.p = 1; lay.d = d; lay.v = 1;
            lay.micro_batch_size = micro;
            lay.recompute = MG_PLAN_RECOMPUTE_NONE;
            lay.sequence_parallel = sp;
            lay.distributed_optimizer = dist;
            if (mg_plan_evaluate(&plan_model, &plan_training, &plan_cluster, &lay,
                                 &row[rows].predicted, err, sizeof err)) {
                if (comm.world_rank == 0) fprintf(stderr, "scaling: mg_plan: %s\n", err);
                continue;
            }
            row[rows].t = t; row[rows].d = d; row[rows].measured_ms = ms;
            row[rows].gflops = plan_cluster.gpu.peak_tflops * 1e3;
            row[rows].gbps = plan_cluster.gpu.hbm_gbps;
            rows++;
        }
    }
    if (comm.world_rank == 0) {
        printf("\nmg_plan --gpu cpu, calibrated before each layout by all %d ranks at once (%d "
               "OpenMP thread%s each; sgemm peak and memcpy rate per rank):\n", comm.world_size,
               omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
        printf("| t | d | sgemm GFLOP/s | memcpy GB/s | measured ms | predicted ms | "
               "measured/predicted | predicted: GEMM | memory-bound | TP comm | DP comm | "
               "optimizer |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (k = 0; k < rows; k++) {
            const mg_plan_result *r = &row[k].predicted;
            printf("| %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.1f | "
                   "%.1f |\n", row[k].t, row[k].d, row[k].gflops, row[k].gbps,
                   row[k].measured_ms, r->iteration_time * 1e3,
                   row[k].measured_ms / (r->iteration_time * 1e3), r->time_gemm * 1e3,
                   r->time_memory_bound * 1e3, r->time_tp_comm * 1e3, r->time_dp_comm * 1e3,
                   r->time_optimizer * 1e3);
        }
    }
    mg_comm_finalize(&comm);
    return 0;
}
