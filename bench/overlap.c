/* bench/overlap — how much of the data-parallel gradient reduction the backward pass hides,
   on CPU ranks.

     mpirun -np D build/overlap [--tp T] [--pp P] [--layers N] [--hidden N] [--heads N]
                                [--seq N] [--micro N] [--micro-per-replica N] [--bucket N]
                                [--iters N] [--rounds N] [--distributed]

   The same training run twice, alternating rounds (so that a busy machine slows both alike):
   overlap on — each bucket's nonblocking all-reduce (or reduce-scatter with --distributed)
   starts from the gradient hook during the last microbatch's backward (with --pp > 1: each
   chunk's last backward under the 1F1B schedule; the buckets touching the tied word embedding
   wait for its embedding-group all-reduce at the flush), and the hook polls the ones in
   flight — and overlap off — every bucket starts after the backward. In both, the time the
   trainer then spends waiting in mg_dp_finish is measured; with overlap off that is the whole
   communication time C. Hidden share = 1 − wait(on) / C. Printed per layout, medians over the
   rounds: ms per iteration for both, C, wait(on) and the hidden share — per pipeline stage
   with --pp > 1 (the mean over the stage's ranks) — the buckets started during the backward,
   and the bytes each rank sent in the data group per iteration (mg_comm's counters) against
   the ring formula 2·(d−1)/d · 4 · elements. d = ranks / (T·P). Defaults: 4 layers, hidden
   256, 4 heads, sequence 128, micro-batch 2, 2 microbatches per replica, buckets of 250 000
   elements (about 8 per iteration), 5 iterations × 4 rounds.                               */
#include "overlap_util.h"

#define MAX_ROUNDS 64

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int main(int argc, char **argv) {
    static mg_comm comm;
    int tp, pp, layers, hidden, heads, seq, micro, per, bucket, iters, rounds, dist, r, mode, k;
    int d, s;
    double ms_round[2][MAX_ROUNDS], wait_round[2][MAX_ROUNDS], ms[2], wait[2], bytes_it = 0;
    float *wait_all[2];
    char line[2048], path[256];
    mg_trainer tr;
    mg_comm_init(&comm, &argc, &argv);
    tp = bench_arg_int(argc, argv, "--tp", 1);
    pp = bench_arg_int(argc, argv, "--pp", 1);
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
    if (rounds < 1 || rounds > MAX_ROUNDS || tp < 1 || pp < 1 || comm.world_size % (tp * pp)) {
        if (comm.world_rank == 0)
            fprintf(stderr, "overlap: --rounds 1 … %d, and --tp × --pp dividing the %d ranks\n",
                    MAX_ROUNDS, comm.world_size);
        mg_comm_finalize(&comm);
        return 2;
    }
    d = comm.world_size / (tp * pp);
    /* random byte tokens, the same file on every rank (identical contents, atomic rename) */
    snprintf(path, sizeof path, "/tmp/mg_bench_overlap_%d_%d.bin", comm.world_size, seq);
    if (bench_tokens(path, (int64_t)(rounds * 2 * (iters + 1) + 2) * micro * per * d * seq + 1))
        return 1;
    snprintf(line, sizeof line, "--data-path %s --data-order sequential --split 1,0,0 "
             "--eval-iters 0 --vocab-size 256 --num-layers %d --hidden-size %d "
             "--num-attention-heads %d --seq-length %d --micro-batch-size %d "
             "--global-batch-size %d --train-iters %d --lr 1e-4 --clip-grad 1.0 --device cpu "
             "--tensor-model-parallel-size %d --pipeline-model-parallel-size %d "
             "--bucket-size %d%s", path, layers, hidden, heads, seq, micro, micro * per * d,
             rounds * 2 * (iters + 1) + 2, tp, pp, bucket,
             dist ? " --use-distributed-optimizer" : "");
    if (bench_trainer(&tr, &comm, line)) {
        mg_comm_finalize(&comm);
        return 1;
    }
    mg_trainer_step(&tr);                               /* warm-up */
    for (r = 0; r < rounds; r++)
        for (mode = 1; mode >= 0; mode--) {             /* overlap on, then off */
            double t0;
            tr.dp.overlap = mode;
            mg_trainer_step(&tr);                       /* settle */
            tr.dp.wait_ms = 0;
            mg_comm_reset_traffic(&comm);
            mg_barrier(&comm, &comm.world);
            t0 = bench_now_ms();
            for (k = 0; k < iters; k++) mg_trainer_step(&tr);
            ms_round[mode][r] = (bench_now_ms() - t0) / iters;
            wait_round[mode][r] = tr.dp.wait_ms / iters;
            bytes_it = (double)comm.bytes_sent[MG_GROUP_DATA] / iters;
        }
    /* the last iteration ran with overlap off: count the early buckets of one more with it on */
    tr.dp.overlap = 1;
    mg_trainer_step(&tr);
    for (mode = 0; mode < 2; mode++) {   /* every rank's median wait, gathered on every rank */
        float mine;
        wait[mode] = median(wait_round[mode], rounds);
        mine = (float)wait[mode];
        wait_all[mode] = (float *)malloc(sizeof(float) * (size_t)comm.world_size);
        mg_all_gather(&comm, &comm.world, &mine, wait_all[mode], 1, MG_F32);
        ms[mode] = median(ms_round[mode], rounds);
    }
    if (comm.world_rank == 0) {
        /* all-reduce, or reduce-scatter + all-gather: the same 2(d-1)/d of the buffer */
        double ring = 2.0 * (d - 1) / d * 4 * (double)tr.model.n_elems;
        printf("overlap: %d ranks = t %d x p %d x d %d, %d layers, hidden %d, seq %d, %d x %d "
               "samples per replica; rank 0: %lld gradient elements in %d buckets, %d started "
               "during the backward%s\n", comm.world_size, tp, pp, d, layers, hidden, seq, per,
               micro, (long long)tr.model.n_elems, tr.dp.n_buckets, tr.dp.n_early,
               dist ? ", distributed optimizer" : "");
        printf("| overlap | ms/iteration (median of %d rounds) | waiting for the reduction, "
               "ms/iteration (rank 0) |\n|---|---|---|\n| off | %.1f | %.1f (= communication "
               "time C) |\n| on | %.1f | %.1f |\n", rounds, ms[0], wait[0], ms[1], wait[1]);
        for (s = 0; s < pp; s++) {   /* per stage: the mean of its ranks' medians */
            double c = 0, on = 0;
            int n = 0, q;
            for (q = 0; q < comm.world_size; q++)
                if (q / (tp * d) == s) {             /* rank = tp + t·(dp + d·pp) */
                    c += wait_all[0][q];
                    on += wait_all[1][q];
                    n++;
                }
            char stage[32] = "";
            if (pp > 1) snprintf(stage, sizeof stage, ", stage %d", s);
            printf("hidden share of the data-parallel communication%s: %.0f%%  (1 - wait(on)/C "
                   "= 1 - %.1f/%.1f ms)\n", stage, c > 0 ? 100.0 * (1.0 - on / c) : 0.0, on / n,
                   c / n);
        }
        printf("data-group bytes sent per rank per iteration: %.0f (ring formula %s: %.0f)\n",
               bytes_it, dist ? "reduce-scatter + all-gather 2(d-1)/d x 4 x elements"
                              : "all-reduce 2(d-1)/d x 4 x elements", ring);
    }
    free(wait_all[0]);
    free(wait_all[1]);
    mg_trainer_free(&tr);
    mg_comm_finalize(&comm);
    return 0;
}
