/* bench/overlap — how much of the data-parallel gradient reduction the backward pass hides,
   on CPU ranks.

     mpirun -np D build/overlap [--tp T] [--layers N] [--hidden N] [--heads N] [--seq N]
                                [--micro N] [--micro-per-replica N] [--bucket N] [--iters N]
                                [--rounds N] [--distributed]

   The same training run twice, alternating rounds (so that a busy machine slows both alike):
   overlap on — each bucket's nonblocking all-reduce (or reduce-scatter with --distributed)
   starts from the gradient hook during the last microbatch's backward, and the hook polls the
   ones in flight — and overlap off — every bucket starts after the backward. In both, the
   time the trainer then spends waiting in mg_dp_finish is measured; with overlap off that is
   the whole communication time C. Hidden share = 1 − wait(on) / C. Printed per layout: ms per
   iteration (best round) for both, C, wait(on), the hidden share, and the bytes each rank sent
   in the data group per iteration (mg_comm's counters) against the ring formula
   2·(d−1)/d · 4 · elements. Defaults: 4 layers, hidden 256, 4 heads, sequence 128,
   micro-batch 2, 2 microbatches per replica, buckets of 250 000 elements (about 8 per
   iteration), 5 iterations × 4 rounds.                                                       */
#include "overlap_util.h"

int main(int argc, char **argv) {
    static mg_comm comm;
    int tp, layers, hidden, heads, seq, micro, per, bucket, iters, rounds, dist, r, mode, k, d;
    double best_ms[2] = {1e30, 1e30}, wait_ms[2] = {0, 0}, bytes_it = 0;
    char line[2048], path[256];
    mg_trainer tr;
    mg_comm_init(&comm, &argc, &argv);
    tp = bench_arg_int(argc, argv, "--tp", 1);
    layers = bench_arg_int(argc, argv, "--layers", 4);
    hidden = bench_arg_int(argc, argv, "--hidden", 256);
    heads = bench_arg_int(argc, argv, "--heads", 4);
    seq = bench_arg_int(argc, argv, "--seq", 128);
    micro = bench_arg_int(argc, argv, "--micro", 2);
    per = bench_arg_int(argc, argv, "--micro-per-replica", 2);
    bucket = bench_arg_int(argc, argv, "--bucket", 250000);
    iters = bench_arg_int(argc, argv, "--iters", 5);
    rounds = bench_arg_int(argc, argv, "--rounds", 4);
    dist = bench_arg_flag(argc, argv, "--distributed");
    d = comm.world_size / tp;
    /* random byte tokens, the same file on every rank (identical contents, atomic rename) */
    snprintf(path, sizeof path, "/tmp/mg_bench_overlap_%d_%d.bin", comm.world_size, seq);
    if (bench_tokens(path, (int64_t)(rounds * 2 * (iters + 1) + 2) * micro * per * d * seq + 1))
        return 1;
    snprintf(line, sizeof line, "--data-path %s --data-order sequential --split 1,0,0 "
             "--eval-iters 0 --vocab-size 256 --num-layers %d --hidden-size %d "
             "--num-attention-heads %d --seq-length %d --micro-batch-size %d "
             "--global-batch-size %d --train-iters %d --lr 1e-4 --clip-grad 1.0 --device cpu "
             "--tensor-model-parallel-size %d --bucket-size %d%s", path, layers, hidden, heads,
             seq, micro, micro * per * d, rounds * 2 * (iters + 1) + 2, tp, bucket,
             dist ? " --use-distributed-optimizer" : "");
    if (bench_trainer(&tr, &comm, line)) {
        mg_comm_finalize(&comm);
        return 1;
    }
    mg_trainer_step(&tr);                               /* warm-up */
    for (r = 0; r < rounds; r++)
        for (mode = 1; mode >= 0; mode--) {             /* overlap on, then off */
            double t0, ms;
            tr.dp.overlap = mode;
            mg_trainer_step(&tr);                       /* settle */
            tr.dp.wait_ms = 0;
            mg_comm_reset_traffic(&comm);
            mg_barrier(&comm, &comm.world);
            t0 = bench_now_ms();
            for (k = 0; k < iters; k++) mg_trainer_step(&tr);
            ms = (bench_now_ms() - t0) / iters;
            if (ms < best_ms[mode]) best_ms[mode] = ms;
            wait_ms[mode] += tr.dp.wait_ms / iters / rounds;
            bytes_it = (double)comm.bytes_sent[MG_GROUP_DATA] / iters;
        }
    if (comm.world_rank == 0) {
        /* all-reduce, or reduce-scatter + all-gather: the same 2(d-1)/d of the buffer */
        double ring = 2.0 * (d - 1) / d * 4 * (double)tr.model.n_elems;
        printf("overlap: %d ranks = t %d x d %d, %d layers, hidden %d, seq %d, %d x %d samples "
               "per replica; %lld gradient elements per rank in %d buckets%s\n",
               comm.world_size, tp, d, layers, hidden, seq, per, micro,
               (long long)tr.model.n_elems, tr.dp.n_buckets,
               dist ? ", distributed optimizer" : "");
        printf("| overlap | ms/iteration (best round) | waiting for the reduction, ms/iteration |\n"
               "|---|---|---|\n| off | %.1f | %.1f (= communication time C) |\n"
               "| on | %.1f | %.1f |\n", best_ms[0], wait_ms[0], best_ms[1], wait_ms[1]);
        printf("hidden share of the data-parallel communication: %.0f%%  (1 - wait(on)/C)\n",
               wait_ms[0] > 0 ? 100.0 * (1.0 - wait_ms[1] / wait_ms[0]) : 0.0);
        printf("data-group bytes sent per rank per iteration: %.0f (ring formula %s: %.0f)\n",
               bytes_it, dist ? "reduce-scatter + all-gather 2(d-1)/d x 4 x elements"
                              : "all-reduce 2(d-1)/d x 4 x elements", ring);
    }
    mg_trainer_free(&tr);
    mg_comm_finalize(&comm);
    return 0;
}
