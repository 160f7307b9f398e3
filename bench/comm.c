/* bench/comm.c — all-reduce bus bandwidth through mg_comm.h and through plain MPI_Allreduce,
   side by side, as nccl-tests defines it:
       algbw = bytes / time          busbw = algbw · 2(n−1)/n
   (busbw is the per-link rate a ring all-reduce needs, comparable across rank counts).
   In-place fp32 sum over the world, sizes 1 KiB … 64 MiB (×4 steps). For each size the two
   contenders run in alternating rounds (so machine noise hits both alike); each round times
   enough iterations to last ~--round-ms, the time is the slowest rank's, and the best round
   counts (defaults: 15 rounds of ~50 ms each). "overhead" = our time / MPI's time − 1.

   usage: mpirun -np N build/comm [--min-bytes B] [--max-bytes B] [--rounds R] [--round-ms MS]
                                  [--dtype fp32|bf16]
   (bf16 compares our fp32-accumulating bf16 all-reduce with MPI's fp32 all-reduce of the same
   element count, i.e. what the conversion costs.)                                            */
#define OMPI_SKIP_MPICXX 1    /* MPI's C API only: nvcc compiles this file as C++, and the */
#define MPICH_SKIP_MPICXX 1   /* deprecated C++ bindings do not build clean                 */
#include "mg_comm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef MG_USE_MPI
#include <mpi.h>

static double wtime(void) { return MPI_Wtime(); }

/* Seconds per call of one contender (slowest rank), over `iters` back-to-back calls.        */
static double time_calls(mg_comm *comm, int ours, void *buf, int64_t count, mg_dtype dt,
                         int iters) {
    double t0, dt_s, worst;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = wtime();
    for (int i = 0; i < iters; i++) {
        if (ours) mg_all_reduce(comm, &comm->world, buf, buf, count, dt, MG_SUM);
        else MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    dt_s = (wtime() - t0) / iters;
    MPI_Allreduce(&dt_s, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

int main(int argc, char **argv) {
    mg_comm comm;
    int64_t min_bytes = 1024, max_bytes = (int64_t)64 << 20;
    int rounds = 15;       /* many short alternating rounds: on a shared machine some are clean */
    double round_ms = 50;
    mg_dtype dt = MG_F32;
    mg_comm_init(&comm, &argc, &argv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            if (comm.world_rank == 0) fprintf(stderr, "comm: %s needs a value\n", a);
            mg_comm_finalize(&comm);
            return 2;
        }
        if (!strcmp(a, "--min-bytes")) min_bytes = atoll(v);
        else if (!strcmp(a, "--max-bytes")) max_bytes = atoll(v);
        else if (!strcmp(a, "--rounds")) rounds = atoi(v);
        else if (!strcmp(a, "--round-ms")) round_ms = atof(v);
        else if (!strcmp(a, "--dtype") && !strcmp(v, "bf16")) dt = MG_BF16;
        else if (!strcmp(a, "--dtype") && !strcmp(v, "fp32")) dt = MG_F32;
        else {
            if (comm.world_rank == 0)
                fprintf(stderr, "comm: unknown option %s %s (see the top of bench/comm.c)\n", a, v);
            mg_comm_finalize(&comm);
            return 2;
        }
        i++;
    }
    if (min_bytes < 4 || max_bytes < min_bytes || rounds < 1 || round_ms <= 0) {
        if (comm.world_rank == 0) fprintf(stderr, "comm: bad sizes, rounds or round time\n");
        mg_comm_finalize(&comm);
        return 2;
    }
    int n = comm.world_size;
    float *buf = (float *)malloc((size_t)max_bytes * 2);   /* fp32 count of the largest size */
    for (int64_t i = 0; i < max_bytes / 2; i++) buf[i] = 0;
    if (comm.world_rank == 0) {
        printf("all-reduce, in place, sum, %d ranks, %s%s; busbw = algbw * 2(n-1)/n; best of %d "
               "rounds\n\n", n, dt == MG_F32 ? "fp32" : "bf16 (ours) vs fp32 (MPI)",
               "", rounds);
        printf("| size | mg_all_reduce time | busbw | MPI_Allreduce time | busbw | overhead |\n");
        printf("|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        int64_t count = bytes / (int64_t)mg_dtype_size(dt);
        double best[2] = {1e30, 1e30};
        int iters = 1;
        /* warm up both, and size the rounds from the warm-up */
        for (int who = 0; who < 2; who++) time_calls(&comm, who, buf, count, dt, 2);
        {
            double t = time_calls(&comm, 1, buf, count, dt, 3);
            iters = (int)(round_ms * 1e-3 / (t > 1e-7 ? t : 1e-7));
            if (iters < 2) iters = 2;
            if (iters > 20000) iters = 20000;
        }
        for (int r = 0; r < rounds; r++)
            for (int who = 0; who < 2; who++) {
                double t = time_calls(&comm, who == (r & 1), buf, count, dt, iters);
                int slot = who == (r & 1) ? 0 : 1;   /* 0: ours, 1: MPI */
                if (t < best[slot]) best[slot] = t;
            }
        if (comm.world_rank == 0) {
            double bus = 2.0 * (n - 1) / (n > 1 ? n : 1);
            char size[32];
            if (bytes >= (1 << 20))
                snprintf(size, sizeof size, "%lld MiB", (long long)(bytes >> 20));
            else snprintf(size, sizeof size, "%lld KiB", (long long)(bytes >> 10));
            printf("| %s | %.1f us | %.3f GB/s | %.1f us | %.3f GB/s | %+.1f%% |\n", size,
                   best[0] * 1e6, (double)bytes / best[0] * bus * 1e-9, best[1] * 1e6,
                   (double)count * 4 / best[1] * bus * 1e-9, (best[0] / best[1] - 1) * 100);
            fflush(stdout);
        }
    }
    free(buf);
    mg_comm_finalize(&comm);
    return 0;
}
#else
int main(void) {
    fprintf(stderr, "bench/comm: built without MPI; nothing to compare\n");
    return 0;
}
#endif
