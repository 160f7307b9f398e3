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
   tokens per second of the whole job and ms per iteration, then the volumes.              */
#include "overlap_util.h"

int main(int argc, char **argv) {
    static mg_comm comm;
    int layers, hidden, heads, seq, micro, global, iters, sp, dist, t, k;
    char line[2048], path[256];
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
    }
    mg_comm_finalize(&comm);
    return 0;
}
