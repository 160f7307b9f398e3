// mg-test: ranks=1 timeout=120
/* tests/test_comm_fail.c — failures end the whole job, promptly, with a message that names the
   rank, the call and where. Each scenario is a mode of this same program, launched under
   `mpirun -np N` from the test itself (bounded by `timeout`), and judged by its exit status,
   its output and how long it took:
     hang      rank 1 stops (SIGSTOP); rank 0's all-reduce hits the watchdog (comm timeout 2 s)
               and the job aborts, naming the collective and the group.
     die       rank 1 calls abort(); rank 0, in an all-reduce with a 60 s timeout, is taken down
               by mpirun well before that.
     exit      rank 1 exits (status 3) without finalising; the same.
     fatal     rank 1 makes a bad call (negative count): the library's check prints "rank 1 of
               2", the call and file:line, and aborts every rank.
     mpierror  rank 1 calls a collective on an invalid communicator: MPI reports the error,
               the check names the MPI call, file and line.
     badtopo   t·p does not divide the world: one line on rank 0, status 1 from every rank,
               before any communication.
     stale     waiting twice on one request is caught (one rank).
     nullbuf   an all-reduce of 16 elements from a NULL send buffer: one line naming the
               collective and the buffer (it was a segfault in the copy or in MPI).
     topodiffer  rank 1 sets up t=2 while rank 0 sets up t=1 (each valid on its own): the setup
               fails on every rank naming both (it built mismatched groups, then hung).
   Needs mpirun on PATH; built without MPI, only the one-rank scenarios run.                 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* popen, readlink */
#endif
#include "mg_comm.h"
#include "mg_test.h"
#include <signal.h>
#include <string.h>

/* ---- the scenarios (run under mpirun) ------------------------------------------------------- */
static int scenario(const char *name, int *argc, char ***argv) {
    mg_comm comm;
    mg_ctx ctx;
    mg_ctx_desc desc = {MG_DEVICE_CPU, 0, 1, 1 << 20};
    float buf[16] = {0};
    mg_comm_init(&comm, argc, argv);
    if (!strcmp(name, "badtopo")) {
        mg_ctx_init(&ctx, &desc);
        mg_comm_setup_groups(&comm, &ctx, 3, 1, 1);   /* exits: 3 does not divide 2 */
        return 0;
    }
    mg_ctx_init(&ctx, &desc);
    mg_comm_setup_groups(&comm, &ctx, 1, 1, 1);
    comm.timeout_s = 60;
    if (!strcmp(name, "hang")) {
        comm.timeout_s = 2;
        if (comm.world_rank == 1) raise(SIGSTOP);
        mg_all_reduce(&comm, &comm.world, buf, buf, 16, MG_F32, MG_SUM);
    } else if (!strcmp(name, "die")) {
        if (comm.world_rank == 1) abort();
        mg_all_reduce(&comm, &comm.world, buf, buf, 16, MG_F32, MG_SUM);
    } else if (!strcmp(name, "exit")) {
        if (comm.world_rank == 1) exit(3);
        mg_all_reduce(&comm, &comm.world, buf, buf, 16, MG_F32, MG_SUM);
    } else if (!strcmp(name, "fatal")) {
        mg_all_reduce(&comm, &comm.world, buf, buf, comm.world_rank == 1 ? -5 : 16, MG_F32,
                      MG_SUM);
    } else if (!strcmp(name, "mpierror")) {
#ifdef MG_USE_MPI
        /* A group whose communicator is invalid: MPI itself returns the error. (A truncated
           receive would be the natural choice, but OpenMPI 4.1.4 sometimes never completes
           one on a duplicated communicator; the watchdog ends that too, only later.)        */
        MPI_Comm null_comm = MPI_COMM_NULL;
        mg_group broken = comm.world;
        broken.mpi_comm = &null_comm;
        if (comm.world_rank == 1) mg_barrier(&comm, &broken);
#endif
        mg_barrier(&comm, &comm.world);
    } else if (!strcmp(name, "nullbuf")) {
        mg_all_reduce(&comm, &comm.world, NULL, buf, 16, MG_F32, MG_SUM);
    } else if (!strcmp(name, "topodiffer")) {
        mg_comm_setup_groups(&comm, &ctx, comm.world_rank == 1 ? 2 : 1, 1, 1);
        mg_all_reduce(&comm, &comm.tensor, buf, buf, 16, MG_F32, MG_SUM);
    } else if (!strcmp(name, "stale")) {
        /* a message to self: a real request even on one rank (collectives of one copy) */
        mg_request r = mg_irecv(&comm, &comm.world, buf, 8, MG_F32, comm.world_rank);
        mg_request s = mg_isend(&comm, &comm.world, buf + 8, 8, MG_F32, comm.world_rank);
        mg_request copy = r;
        mg_wait(&comm, &s);
        mg_wait(&comm, &r);
        mg_wait(&comm, &copy);   /* the second completion of one operation */
    } else {
        fprintf(stderr, "unknown scenario %s\n", name);
        return 2;
    }
    printf("scenario %s: survived on rank %d\n", name, comm.world_rank);
    mg_ctx_free(&ctx);
    mg_comm_finalize(&comm);
    return 0;
}

/* ---- the test: launch every scenario at once, then judge each -------------------------------- */
/* Each runs in `sh -c` that times it and appends "@@ status seconds" to its output, so the
   scenarios can run side by side (most of their time is mpirun starting and tearing down) and
   still be timed one by one.                                                                */
typedef struct {
    const char *name, *what;
    int np;
    double min_s, max_s;
    const char *needles[6];
    FILE *pipe;
    int status;
    double seconds;
    char out[16384];
} scenario_run;

static void launch(const char *self, scenario_run *r) {
    char cmd[4096], inner[2048];
    if (r->np > 1)
        snprintf(inner, sizeof inner, "mpirun --oversubscribe --bind-to none -np %d '%s' "
                 "--scenario %s", r->np, self, r->name);
    else
        snprintf(inner, sizeof inner, "'%s' --scenario %s", self, r->name);
    snprintf(cmd, sizeof cmd, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "sh -c 't0=$(date +%%s%%N); timeout -k 3 %d %s 2>&1; rc=$?; t1=$(date +%%s%%N); "
             "echo \"@@ $rc $(( (t1 - t0) / 1000000 ))\"'", (int)r->max_s + 20, inner);
    r->pipe = popen(cmd, "r");
}

static void collect(scenario_run *r) {
    size_t used = 0, got;
    char *mark;
    int ms = 0;
    r->status = -1;
    r->out[0] = 0;
    if (!r->pipe) return;
    while ((got = fread(r->out + used, 1, sizeof r->out - 1 - used, r->pipe)) > 0) used += got;
    r->out[used] = 0;
    {   /* drain what did not fit */
        char sink[4096];
        while (fread(sink, 1, sizeof sink, r->pipe) > 0) {}
    }
    pclose(r->pipe);
    mark = strstr(r->out, "@@ ");
    if (mark && sscanf(mark, "@@ %d %d", &r->status, &ms) == 2) *mark = 0;
    r->seconds = ms * 1e-3;
}

static int count_occurrences(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* A scenario passes when it exited non-zero (124/137 = killed by `timeout` do not count),
   within max_s and after at least min_s, with every needle in its output, and rank 0 never
   got past it. (Other ranks may: mpirun's teardown sends SIGCONT before SIGTERM, so the
   stopped rank of "hang" can finish its half of the all-reduce before it is terminated.)   */
static void judge(scenario_run *r) {
    int ok = r->status > 0 && r->status != 124 && r->status != 137 && r->seconds <= r->max_s &&
             r->seconds >= r->min_s && !strstr(r->out, "survived on rank 0");
    char name[256];
    for (int i = 0; r->needles[i]; i++)
        if (!strstr(r->out, r->needles[i])) {
            ok = 0;
            printf("# %s: missing \"%s\"\n", r->name, r->needles[i]);
        }
    if (!strcmp(r->name, "badtopo") && count_occurrences(r->out, "bad topology") != 1) {
        ok = 0;
        printf("# badtopo: expected exactly one line, from rank 0\n");
    }
    if (!ok) {
        printf("# --- output of scenario %s ---\n", r->name);
        for (char *line = strtok(r->out, "\n"); line; line = strtok(NULL, "\n"))
            printf("#   %s\n", line);
    }
    snprintf(name, sizeof name, "%s: %s", r->name, r->what);
    mg_test_report(ok, name, "exit status %d after %.1f s", r->status, r->seconds);
}

int main(int argc, char **argv) {
    static scenario_run runs[] = {
        {"stale", "a second wait on one request is an error", 1, 0, 20,
         {"rank 0 of 1", "mg_wait", "already completed", NULL}, NULL, 0, 0, ""},
        {"nullbuf", "a NULL buffer with a count is refused by name", 1, 0, 20,
         {"rank 0 of 1", "all_reduce: send buffer is NULL with count 16", NULL}, NULL, 0, 0, ""},
#ifdef MG_USE_MPI
        {"topodiffer", "ranks passing different topologies fail the setup, naming both", 2, 0,
         20, {"ranks disagree on the topology", "this rank passed t=", "passed t=2 c=1 p=1 v=1",
         NULL}, NULL, 0, 0, ""},
        {"hang", "a stopped rank: the watchdog aborts the job", 2, 2, 20,
         {"rank 0 of 2", "watchdog: all_reduce on the world group",
          "did not complete within 2 s", NULL}, NULL, 0, 0, ""},
        {"die", "a rank that aborts takes the job down promptly", 2, 0, 20, {NULL}, NULL, 0, 0,
         ""},
        {"exit", "a rank that exits early takes the job down promptly", 2, 0, 20, {NULL}, NULL,
         0, 0, ""},
        {"fatal", "a failed check aborts every rank with rank, call, file and line", 2, 0, 20,
         {"rank 1 of 2", "mg_comm.h:", "negative count -5", "all_reduce", NULL}, NULL, 0, 0,
         ""},
        {"mpierror", "an MPI error names rank, call, file and line", 2, 0, 20,
         {"rank 1 of 2", "MPI_Barrier", "failed: MPI_ERR_COMM", "mg_comm.h:", NULL}, NULL, 0,
         0, ""},
        {"badtopo", "bad topology: one line from rank 0, non-zero exit, no communication", 2, 0,
         20, {"bad topology: t*p = 3 (t=3, p=1) does not divide the world size 2", NULL}, NULL,
         0, 0, ""},
#endif
    };
    const int n_runs = (int)(sizeof runs / sizeof runs[0]);
    char self[1024];
    ssize_t n;
    if (argc >= 3 && !strcmp(argv[1], "--scenario")) return scenario(argv[2], &argc, &argv);

    n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) snprintf(self, sizeof self, "%s", argv[0]);
    else self[n] = 0;
    fflush(stdout);   /* the children inherit nothing buffered */
    for (int i = 0; i < n_runs; i++) launch(self, &runs[i]);
    for (int i = 0; i < n_runs; i++) collect(&runs[i]);
    for (int i = 0; i < n_runs; i++) judge(&runs[i]);
    return mg_test_summary();
}
