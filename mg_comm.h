/* mg_comm.h — world bootstrap, process groups (Megatron's order), collectives and point-to-point.
   MPI on the CPU, NCCL on the GPU (unique id broadcast over MPI). Part of megatron.h.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_comm.h"          (includes mg_tensor.h)
   Build with MPI (mpicc, or -DMG_USE_MPI with MPI's include/lib flags) for several ranks; a
   build without MPI (MG_USE_MPI undefined) runs exactly one rank with the same API.

   EXAMPLE (every rank runs it; `mpirun -np 8 ./prog`)
       mg_comm comm;
       mg_comm_init(&comm, &argc, &argv);                 // MPI_Init, world and local ranks
       mg_ctx_desc desc = {MG_DEVICE_AUTO, mg_comm_cuda_device(&comm),
                           mg_comm_default_threads(&comm), 64 << 20};
       mg_ctx ctx; mg_ctx_init(&ctx, &desc);
       char err[256];
       if (mg_topology_validate(comm.world_size, 2, 2, 1, err, sizeof err)) { ...print err... }
       mg_comm_setup_groups(&comm, &ctx, 2, 2, 1);        // t=2, p=2, d=8/(2·2)=2, v=1
       mg_all_reduce(&comm, &comm.tensor, x, x, n, MG_F32, MG_SUM);   // in place
       mg_request r = mg_iall_reduce(&comm, &comm.data, g, g, n, MG_BF16, MG_AVG);
       ... compute ...
       mg_wait(&comm, &r);
       mg_comm_finalize(&comm);

   TOUR
     1. World: mg_comm_init / mg_comm_finalize, world rank/size, local rank (shared-memory split),
        threads per rank (cores of the node / ranks on the node), CUDA device per local rank.
     2. Topology: t, p, d, v (and c, context parallelism); rank = tp + t·(dp + d·pp), or
        tp + t·(cp + c·(dp + d·pp)) (tensor-parallel fastest); the tensor, data, pipeline,
        embedding, context and data-context groups as pure functions of the rank (testable without
        launching anything), the real groups (MPI communicators, NCCL communicators on CUDA),
        and a printable layout.
     3. Collectives with NCCL's semantics (counts are per rank; in place when send == recv, and
        for all-gather/reduce-scatter the in-place slot is this rank's chunk): all-reduce,
        reduce-scatter, all-gather, broadcast, barrier; sum / max / avg; fp32, bf16 and fp16
        (16-bit reductions on the CPU accumulate in fp32 and round once).
     4. Point-to-point: grouped send/recv (mg_group_start/end) so matched pairs never deadlock.
     5. Nonblocking variants returning an mg_request with wait/test (MPI request / CUDA event).
     6. Failure: every MPI/NCCL/CUDA error and every timeout (the watchdog, --comm-timeout) ends
        the whole job with rank, call, group, file and line.
     7. Traffic counters: bytes each rank sent per group kind (tests check the paper's volumes).
     8. The communication stream (mg_comm_stream), for timing communication with CUDA events.

   HOW IT RUNS
     CPU (ctx is a CPU context, or no context yet): blocking operations are MPI's blocking calls
     on the group's communicator (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather,
     MPI_Bcast; send/recv as MPI_Isend/Irecv + MPI_Waitall) — OpenMPI's blocking collectives
     use faster algorithms than its nonblocking ones, progress without being polled, and yield
     the core when ranks outnumber cores. Nonblocking operations are MPI_Iallreduce & co.; mg_wait
     is MPI_Waitall. (OpenMPI progresses them only inside mg_test/mg_wait: on the CPU, overlap
     is mostly the GPU path's benefit.) bf16/fp16 reductions widen to fp32 in a per-request
     scratch buffer (grown once, then reused: nothing allocates in steady state), reduce in
     fp32 and round once at the end. MG_AVG is the fp32 sum divided by the group size, before
     that one rounding.
     CUDA (ctx is a CUDA context, nvcc build): the same calls go to NCCL on a high-priority
     communication stream that first waits for the work already queued on ctx's stream; a CUDA
     event recorded after the NCCL call is the request. Waiting polls cudaEventQuery and
     ncclCommGetAsyncError, yielding the core, so blocking calls return with the data ready on
     both backends. NCCL's own bf16 sums round as they go.
     Groups of size 1 copy locally (no MPI, no NCCL) on both backends.

   WATCHDOG
     comm->timeout_s (default 600; gpt_train's --comm-timeout) bounds every operation from the
     moment it is posted. On the CPU a thread started by mg_comm_init watches the deadline armed
     around each blocking MPI call (and mg_comm_setup_groups); past it, it prints "watchdog:
     all_reduce on the tensor group (group rank 0 of 2; world ranks 0 1) did not complete within
     N s" and ends the process, and mpirun ends the job. On the GPU the polling loop checks the
     deadline, calls ncclCommAbort and MPI_Abort. mg_test aborts an overdue operation too. A
     rank that dies takes the job down through mpirun; a rank that hangs is caught by its peers'
     watchdogs. One mg_comm per process (the fatal handler and the watchdog refer to it), and
     it must stay at its address between mg_comm_init and mg_comm_finalize.
*/
#ifndef MG_COMM_H
#define MG_COMM_H

#include "mg_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MG_SUM = 0, MG_MAX = 1, MG_AVG = 2 } mg_redop;
typedef enum {
    MG_GROUP_WORLD = 0, MG_GROUP_TENSOR, MG_GROUP_DATA, MG_GROUP_PIPELINE, MG_GROUP_EMBEDDING,
    MG_GROUP_CONTEXT, MG_GROUP_DATA_CONTEXT,
    MG_GROUP_KINDS
} mg_group_kind;

typedef struct mg_group {
    mg_group_kind kind;
    int rank, size;        /* this process's rank in the group, the group's size; a rank that
                              belongs to no group of this kind (the embedding group of a middle
                              pipeline stage, or any group before mg_comm_setup_groups) has
                              rank -1, size 0, and every operation on it is an error           */
    int *world_ranks;      /* size entries: world rank of each member, in group order        */
    void *mpi_comm;        /* MPI_Comm* (CPU path; also used to bootstrap NCCL)              */
    void *nccl_comm;       /* ncclComm_t (GPU path)                                           */
    const char *name;      /* "tensor", "data", "pipeline", "embedding", "context",
                              "data-context", "world"                                         */
} mg_group;

typedef struct mg_topology {
    int t, p, d, v;        /* tensor, pipeline, data parallel sizes; virtual stages per rank  */
    int tp_rank, pp_rank, dp_rank;
    int c, cp_rank;        /* context-parallel size (1: none) and coordinate                  */
} mg_topology;

struct mg_comm_state;      /* private: request slots, scratch, CUDA stream and events         */

typedef struct mg_comm {
    int world_rank, world_size;
    int local_rank, local_size;       /* within the node (MPI shared-memory split)             */
    mg_ctx *ctx;                      /* device the buffers live on: CPU -> MPI, CUDA -> NCCL;
                                         NULL until mg_comm_setup_groups (then host buffers) */
    mg_topology topo;
    mg_group world, tensor, data, pipeline, embedding; /* embedding: first and last stage;
                                                          size 1 when p == 1               */
    mg_group context;                 /* the c ranks that split one sequence (ring attention)  */
    mg_group data_context;            /* data × context: the d·c replicas of the weights that
                                         reduce gradients together (Megatron-LM's data-parallel
                                         group with context parallelism)                      */
    double timeout_s;                 /* watchdog: --comm-timeout (default 600)               */
    uint64_t bytes_sent[MG_GROUP_KINDS]; /* traffic counters, see 7                            */
    struct mg_comm_state *state;
} mg_comm;

/* 1. World. mg_comm_init calls MPI_Init (when built with MPI and MPI is not initialised yet)
      and fills world/local ranks and the world group; argc/argv may be NULL. It installs an
      mg_fatal handler that prints the rank and aborts the whole job. mg_comm_finalize frees the
      groups, restores the default handler and calls MPI_Finalize if mg_comm_init called MPI_Init.
      mg_comm_default_threads: cores of the node / ranks on the node (at least 1).
      mg_comm_cuda_device: the CUDA device for this rank, local rank modulo the devices of the
      node (0 when not built by nvcc or no GPU) — pass it as mg_ctx_desc.cuda_device.          */
MGDEF void mg_comm_init(mg_comm *comm, int *argc, char ***argv);
MGDEF void mg_comm_finalize(mg_comm *comm);
MGDEF int mg_comm_default_threads(const mg_comm *comm);
MGDEF int mg_comm_cuda_device(const mg_comm *comm);
/* Abort every rank of the job (ncclCommAbort, then MPI_Abort) after printing
   "mg_comm: rank R of W: file:line: message" (plus the operation in progress, if any) on
   stderr. Never returns. comm may be NULL.                                                     */
MGDEF void mg_comm_abort(mg_comm *comm, const char *file, int line, const char *fmt, ...)
    MG_PRINTF(4, 5);

/* 2. Topology. Pure functions of (world size, t, p, v, rank) — nothing communicates:
      mg_topology_validate: t, p, v ≥ 1, t·p divides the world size, v > 1 only with p > 1.
          Returns 0, or -1 with a one-line reason (and the valid choices) in err.
      mg_topology_init: validate, then fill topo for world_rank (coordinates below).
      mg_topology_world_rank: tp + t·(dp + d·pp), Megatron's order (tensor-parallel fastest).
      mg_topology_group: writes the world ranks of world_rank's group of that kind, in group
          order, into members (room for the world size) and returns their number, 0 when the
          rank is in no such group. Megatron's groups: tensor = t consecutive ranks; data = the
          d ranks with equal (tp, pp); pipeline = the p ranks with equal (tp, dp), by stage;
          embedding = first and last stage of the pipeline group (one rank when p == 1),
          middle stages have none. E.g. 16 ranks, t=2, p=4: tensor [0,1] [2,3] …, data [0,2]
          [1,3] [4,6] …, pipeline [0,4,8,12] [1,5,9,13] …, embedding [0,12] [1,13] ….
      Context parallelism (the _cp variants; the plain ones are c = 1) adds a dimension between
      tp and dp, Megatron-LM's order tp, cp, dp, pp:
          rank = tp + t·(cp + c·(dp + d·pp)),  d = world / (t·c·p),
      so the c ranks of a context group (one sequence split c ways) sit next to its tensor
      group, within a node where t·c fits one. Groups: context = the c ranks with equal (tp, dp,
      pp), by cp; data = equal (tp, cp, pp); data-context = the d·c ranks with equal (tp, pp),
      in world-rank order (index cp + c·dp) — the replicas of the same weights, which reduce
      gradients and shard the distributed optimizer; pipeline = equal (tp, cp, dp). E.g. 8
      ranks, t=2, c=2, p=2: tensor [0,1] …, context [0,2] [1,3] [4,6] [5,7], data [0] …,
      data-context [0,2] …, pipeline [0,4] [1,5] [2,6] [3,7]. c = 1 gives the groups above
      (context of one rank, data-context = data). mg_topology_validate_cp also needs t·c·p to
      divide the world size.
      mg_topology_describe: the layout, one header line then one line per rank with its
          (tp, dp, pp) and group members; returns the characters it needed (snprintf rule).
   mg_comm_setup_groups (collective over the world) validates — a bad topology prints one line
   on rank 0 and every rank exits with status 1 before communicating — then builds the groups
   on ctx's device (MPI communicators; plus NCCL communicators on CUDA: ncclCommSplit from a
   world communicator whose id is broadcast over MPI, or ncclCommInitRank per group before NCCL
   2.18). It may be called again with another topology. Every rank must pass the same sizes:
   ranks that disagree (each topology valid on its own) fail the setup on every rank with
   one line naming both, instead of building groups that do not match and hanging.       */
MGDEF int mg_topology_validate(int world_size, int t, int p, int v, char *err, size_t errlen);
MGDEF int mg_topology_init(mg_topology *topo, int world_size, int world_rank, int t, int p,
                           int v, char *err, size_t errlen);
MGDEF int mg_topology_world_rank(const mg_topology *topo, int tp, int dp, int pp);
MGDEF int mg_topology_group(const mg_topology *topo, int world_rank, mg_group_kind kind,
                            int *members);
MGDEF int mg_topology_describe(const mg_topology *topo, char *buf, size_t buflen);
MGDEF void mg_comm_setup_groups(mg_comm *comm, mg_ctx *ctx, int t, int p, int v);
MGDEF int mg_topology_validate_cp(int world_size, int t, int c, int p, int v, char *err,
                                  size_t errlen);
MGDEF int mg_topology_init_cp(mg_topology *topo, int world_size, int world_rank, int t, int c,
                              int p, int v, char *err, size_t errlen);
MGDEF int mg_topology_world_rank_cp(const mg_topology *topo, int tp, int cp, int dp, int pp);
MGDEF void mg_comm_setup_groups_cp(mg_comm *comm, mg_ctx *ctx, int t, int c, int p, int v);
MGDEF mg_group *mg_comm_group(mg_comm *comm, mg_group_kind kind);

/* 3. Collectives, blocking. count = elements per rank (NCCL's rule):
      all_reduce:     send/recv count elements each; in place when send == recv.
      reduce_scatter: send holds count·size, recv count (chunk `rank`); in place when
                      recv == send + rank·count.
      all_gather:     send count, recv count·size; in place when send == recv + rank·count.
      broadcast:      count elements from group rank root; in place when send == recv; send
                      is read on the root only.
      Any other overlap of send and recv is an error, and so is a NULL buffer with count > 0
      (broadcast's send only on the root). MG_AVG = MG_SUM / group size.
      mg_barrier: every member has reached it (a host-side MPI barrier; on CUDA it does not
      wait for queued GPU work).                                                              */
MGDEF void mg_all_reduce(mg_comm *comm, mg_group *g, const void *send, void *recv, int64_t count,
                         mg_dtype dt, mg_redop op);
MGDEF void mg_reduce_scatter(mg_comm *comm, mg_group *g, const void *send, void *recv,
                             int64_t count, mg_dtype dt, mg_redop op);
MGDEF void mg_all_gather(mg_comm *comm, mg_group *g, const void *send, void *recv, int64_t count,
                         mg_dtype dt);
MGDEF void mg_broadcast(mg_comm *comm, mg_group *g, const void *send, void *recv, int64_t count,
                        mg_dtype dt, int root);
MGDEF void mg_barrier(mg_comm *comm, mg_group *g);

/* 4. Point-to-point, grouped: between mg_group_start and mg_group_end, sends and receives are
      only posted; mg_group_end completes them all together (MPI_Isend/Irecv + wait all /
      ncclGroupStart … ncclGroupEnd), so any order of matched pairs is deadlock-free.
      mg_group_end_async returns a request instead of waiting (overlap p2p with compute).
      Groups nest (only the outermost end completes). Outside a group each call is blocking.
      Only mg_send / mg_recv may be called inside a group. peer is a rank of group g; messages
      between two ranks of one group arrive in the order they were posted.                   */
MGDEF void mg_group_start(mg_comm *comm);
MGDEF void mg_group_end(mg_comm *comm);
MGDEF void mg_send(mg_comm *comm, mg_group *g, const void *buf, int64_t count, mg_dtype dt,
                   int peer);
MGDEF void mg_recv(mg_comm *comm, mg_group *g, void *buf, int64_t count, mg_dtype dt, int peer);

/* 5. Nonblocking. Each returns a handle; mg_wait blocks (subject to the watchdog) and clears
      the handle, mg_test returns 1 (and clears the handle) when complete, 0 otherwise — it also
      aborts the job when the operation is overdue. The buffers belong to the operation until
      it completes. A cleared handle (id 0) is complete. At most MG_MAX_REQUESTS outstanding.
      On the GPU, isend/irecv outside a group are each their own NCCL group on one stream:
      two ranks exchanging messages must pair them with mg_group_start/mg_group_end_async.    */
#define MG_MAX_REQUESTS 256
typedef struct mg_request { int id; } mg_request;
MGDEF mg_request mg_iall_reduce(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                int64_t count, mg_dtype dt, mg_redop op);
MGDEF mg_request mg_ireduce_scatter(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                    int64_t count, mg_dtype dt, mg_redop op);
MGDEF mg_request mg_iall_gather(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                int64_t count, mg_dtype dt);
MGDEF mg_request mg_ibroadcast(mg_comm *comm, mg_group *g, const void *send, void *recv,
                               int64_t count, mg_dtype dt, int root);
MGDEF mg_request mg_isend(mg_comm *comm, mg_group *g, const void *buf, int64_t count,
                          mg_dtype dt, int peer);
MGDEF mg_request mg_irecv(mg_comm *comm, mg_group *g, void *buf, int64_t count, mg_dtype dt,
                          int peer);
MGDEF mg_request mg_group_end_async(mg_comm *comm);
MGDEF void mg_wait(mg_comm *comm, mg_request *req);
MGDEF int mg_test(mg_comm *comm, mg_request *req);

/* 7. Traffic counters: bytes this rank sent, per group kind, counted as the algorithm an
      implementation is assumed to use, with bytes = count·dtype size and n = group size:
        all-reduce (ring):           2·(n−1)/n · bytes
        reduce-scatter, all-gather:  (n−1)/n · the full buffer = (n−1) · bytes of one chunk
        broadcast (pipelined chain): (n−1)/n · bytes
        send:                        bytes            (barrier, recv: nothing)
      Each call adds its share rounded down to whole bytes; groups of size 1 add nothing.
      Counted when the operation is posted. Reset with mg_comm_reset_traffic.               */
MGDEF void mg_comm_reset_traffic(mg_comm *comm);

/* 8. The stream communication runs on, to time it with CUDA events (megatron.h's timers): on
      the GPU the communication stream (a cudaStream_t), first made to wait for the work queued
      so far on ctx's stream, so that an event recorded on it now is passed when the operations
      posted next may start, and one recorded after posting them when they have finished;
      NULL on the CPU (MPI has no stream: time the wait with the host clock).               */
MGDEF void *mg_comm_stream(mg_comm *comm);

#ifdef __cplusplus
}
#endif
#endif /* MG_COMM_H */

/* =============================================================================================
   IMPLEMENTATION
   ========================================================================================== */
#if defined(MG_IMPLEMENTATION) && !defined(MG_IMPLEMENTATION_ELSEWHERE)
#ifndef MG_COMM_IMPLEMENTED
#define MG_COMM_IMPLEMENTED

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef MG_USE_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1     /* C API only: the deprecated C++ bindings do not build clean */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <pthread.h>
#endif
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---------------------------------------------------------------------------------------------
   Private state
   ------------------------------------------------------------------------------------------ */

#ifndef MG_USE_MPI
/* Without MPI the only peer is this rank: grouped sends and receives to self are matched in
   posting order when the group ends.                                                        */
struct mg__self_msg { int is_send; void *buf; size_t bytes; };
#endif

/* One outstanding operation. Slots are taken lowest-free-first, so a program that keeps k
   operations in flight only ever uses (and grows the scratch of) the first k slots.          */
typedef struct mg__request_slot {
    int in_use;
    int generation;            /* bumped on every release: a stale handle is recognised       */
    const char *op;            /* "all_reduce", "send", …: named by the watchdog              */
    const mg_group *group;
    double t_post;             /* seconds; the watchdog's deadline is t_post + timeout_s      */
    /* Completion step, run once the transfer is done: for i < fin_n,
       fin_dst[i] = fin_src[i] / fin_divisor, stored as fin_dt (round to nearest even). It
       turns fp32 scratch back into bf16/fp16, divides sums into averages and copies an
       in-place reduce-scatter chunk into place. fin_src NULL: nothing to do.               */
    const float *fin_src;
    void *fin_dst;
    mg_dtype fin_dt;
    int64_t fin_n;
    int fin_divisor;
    int fin_threads;           /* the rank's CPU threads (ctx->n_threads; 1 without a ctx)     */
    void *scratch;             /* fp32 staging, grow-only                                     */
    size_t scratch_bytes;
#ifdef MG_USE_MPI
    MPI_Request *mpi;          /* one per collective; one per send/recv of a p2p group        */
    MPI_Status *mpi_status;    /* as many: MPI_Testall reports per-request errors in them     */
    int n_mpi, cap_mpi;
#else
    struct mg__self_msg *self_msgs;   /* grouped sends/receives to self (no MPI)          */
    int n_self, cap_self;
#endif
#ifdef __CUDACC__
    cudaEvent_t event;         /* recorded on the communication stream after the NCCL call   */
    int on_gpu;
#endif
} mg__request_slot;

struct mg_comm_state {
    mg__request_slot slots[MG_MAX_REQUESTS];
    int group_depth;           /* mg_group_start nesting                                      */
    int group_slot;            /* slot collecting the current group's send/recv, -1 if none  */
    int mpi_initialized_here;  /* mg_comm_init called MPI_Init: finalize calls MPI_Finalize   */
    const char *op;            /* operation in progress, for error messages                  */
    const mg_group *op_group;
#ifdef MG_USE_MPI
    /* The watchdog thread (see "Watchdog"): the main thread arms a deadline around every
       blocking MPI call; fields are read by the thread, written with __atomic builtins.   */
    pthread_t watch_thread;
    pthread_mutex_t watch_mu;
    pthread_cond_t watch_cv;
    int watch_running, watch_stop;
    int64_t armed_deadline_ns;  /* 0: nothing armed                                           */
    int64_t armed_post_ns;
    const char *armed_op;
    const mg_group *armed_group;
#endif
#ifdef __CUDACC__
    cudaStream_t stream;       /* communication stream (high priority, non-blocking)          */
    cudaEvent_t ready;         /* "compute queued so far is done": the comm stream waits on it */
    int group_on_gpu;
#endif
};

/* The job whose fatal handler is installed: mg_fatal's handler has no user pointer.          */
static mg_comm *mg__comm_active = NULL;

static const char *const mg__group_names[MG_GROUP_KINDS] = {
    "world", "tensor", "data", "pipeline", "embedding", "context", "data-context"
};

/* Appends to a bounded buffer with snprintf's rule: *used counts what was needed.            */
static void mg__comm_appendf(char *buf, size_t buflen, size_t *used, const char *fmt, ...)
    MG_PRINTF(4, 5);
static void mg__comm_appendf(char *buf, size_t buflen, size_t *used, const char *fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(*used < buflen ? buf + *used : NULL, *used < buflen ? buflen - *used : 0,
                  fmt, ap);
    va_end(ap);
    if (n > 0) *used += (size_t)n;
}

/* The operation named in error messages while it is posted or waited for.                    */
static void mg__op_begin(mg_comm *comm, const char *op, const mg_group *g) {
    comm->state->op = op;
    comm->state->op_group = g;
}
static void mg__op_end(mg_comm *comm) {
    comm->state->op = NULL;
    comm->state->op_group = NULL;
}

/* ---------------------------------------------------------------------------------------------
   Error checks: every failure goes through mg_fatal, whose handler (installed by mg_comm_init)
   names the rank and aborts the whole job.
   ------------------------------------------------------------------------------------------ */
#ifdef MG_USE_MPI
static void mg__mpi_failed(int err, const char *call, const char *file, int line) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "code %d", err);
    mg_fatal(file, line, "%s failed: %s", call, text);
}
#define MG__MPI_CHECK(call) do { int mg__rc = (call); \
    if (mg__rc != MPI_SUCCESS) mg__mpi_failed(mg__rc, #call, __FILE__, __LINE__); } while (0)
#endif
#ifdef __CUDACC__
/* Every communicator is created blocking (mg__nccl_config), so a call returns only once its
   work is on the stream: ncclInProgress would mean an event recorded after it could complete
   before the transfer, and is an error here.                                                */
#define MG__NCCL_CHECK(call) do { ncclResult_t mg__r = (call); \
    if (mg__r != ncclSuccess) \
        mg_fatal(__FILE__, __LINE__, "%s failed: %s (%s)", #call, ncclGetErrorString(mg__r), \
                 ncclGetLastError(NULL)); } while (0)
#endif

static void mg__comm_fatal_handler(const char *file, int line, const char *msg) {
    mg_comm_abort(mg__comm_active, file, line, "%s", msg);
}

#ifdef __CUDACC__
static int mg__comm_on_gpu(const mg_comm *comm) {
    return comm->ctx && comm->ctx->device == MG_DEVICE_CUDA;
}
/* Calls fn on every NCCL communicator of the job (sub-groups first, the world last).        */
static void mg__each_nccl(mg_comm *comm, ncclResult_t (*fn)(ncclComm_t)) {
    for (int k = MG_GROUP_KINDS - 1; k >= 0; k--) {
        mg_group *g = mg_comm_group(comm, (mg_group_kind)k);
        if (g->nccl_comm) { fn((ncclComm_t)g->nccl_comm); g->nccl_comm = NULL; }
    }
}
#endif

/* The one line every fatal error prints: "mg_comm: rank R of W: file:line: msg (during OP on
   the G group); aborting the job".                                                          */
static void mg__print_abort(const mg_comm *comm, const char *file, int line, const char *msg,
                            const char *op, const mg_group *g) {
    char during[128] = "";
    if (op && g) snprintf(during, sizeof during, " (during %s on the %s group)", op, g->name);
    fflush(stdout);
    if (comm)
        fprintf(stderr, "mg_comm: rank %d of %d: %s:%d: %s%s; aborting the job\n",
                comm->world_rank, comm->world_size, file, line, msg, during);
    else
        fprintf(stderr, "mg_comm: %s:%d: %s%s; aborting the job\n", file, line, msg, during);
    fflush(stderr);
}

MGDEF void mg_comm_abort(mg_comm *comm, const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mg__print_abort(comm, file, line, msg, comm && comm->state ? comm->state->op : NULL,
                    comm && comm->state ? comm->state->op_group : NULL);
#ifdef __CUDACC__
    if (comm) mg__each_nccl(comm, ncclCommAbort);   /* stop kernels waiting on dead peers */
#endif
#ifdef MG_USE_MPI
    {
        int inited = 0, finalized = 0;
        MPI_Initialized(&inited);
        MPI_Finalized(&finalized);
        if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
    }
#endif
    abort();
}

/* ---------------------------------------------------------------------------------------------
   Time and waiting
   ------------------------------------------------------------------------------------------ */
/* Seconds on a clock that only the watchdog reads: a coarse monotonic clock where there is
   one (a few ns per read, millisecond resolution is plenty), else C11's timespec_get.     */
static double mg__comm_now(void) {
    struct timespec ts;
#if defined(CLOCK_MONOTONIC_COARSE) && defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 199309L
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
    timespec_get(&ts, TIME_UTC);
#endif
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "watchdog: all_reduce on the tensor group (group rank 0 of 2; world ranks 0 1) did not
   complete within 600 s": the message of every timeout, whoever notices it.                 */
static void mg__timeout_message(char *buf, size_t len, const char *op, const mg_group *g,
                                double limit, double waited) {
    char members[256] = "";
    size_t used = 0;
    for (int i = 0; g && i < g->size && used < sizeof members; i++)
        mg__comm_appendf(members, sizeof members, &used, i ? " %d" : "%d", g->world_ranks[i]);
    snprintf(buf, len, "watchdog: %s on the %s group (group rank %d of %d; world ranks %s) did "
             "not complete within %g s (waited %.1f s; the comm timeout, --comm-timeout)",
             op ? op : "?", g ? g->name : "?", g ? g->rank : -1, g ? g->size : 0, members,
             limit, waited);
}

/* A timeout noticed by the main thread (mg_test, the GPU polling loop): abort the job.       */
static void mg__timeout_abort(mg_comm *comm, const char *op, const mg_group *g, double t_post) {
    char msg[768];
    mg__timeout_message(msg, sizeof msg, op, g, comm->timeout_s, mg__comm_now() - t_post);
    mg__op_end(comm);   /* the message names the operation itself */
    mg_comm_abort(comm, __FILE__, __LINE__, "%s", msg);
}

#ifdef MG_USE_MPI
/* ---------------------------------------------------------------------------------------------
   Watchdog. Blocking MPI calls (collectives, MPI_Waitall) run at MPI's full speed — its
   blocking collectives use better algorithms than the nonblocking ones and progress without
   being polled — so they are not turned into test loops. Instead the main thread arms a
   deadline (post time + comm->timeout_s) around each, and a thread started by mg_comm_init
   checks it every 20 ms. Past the deadline it prints the timeout line and ends this process
   with _Exit(1): it makes no MPI call (MPI_THREAD_FUNNELED), and mpirun tears the rest of the
   job down when a rank exits without finalising.
   ------------------------------------------------------------------------------------------ */
static int64_t mg__now_ns(double seconds) { return (int64_t)(seconds * 1e9); }

static void mg__watch_arm(mg_comm *comm, const char *op, const mg_group *g, double t_post) {
    struct mg_comm_state *st = comm->state;
    __atomic_store_n(&st->armed_op, op, __ATOMIC_RELAXED);
    __atomic_store_n(&st->armed_group, g, __ATOMIC_RELAXED);
    __atomic_store_n(&st->armed_post_ns, mg__now_ns(t_post), __ATOMIC_RELAXED);
    __atomic_store_n(&st->armed_deadline_ns, mg__now_ns(t_post + comm->timeout_s),
                     __ATOMIC_RELEASE);
}
static void mg__watch_disarm(mg_comm *comm) {
    __atomic_store_n(&comm->state->armed_deadline_ns, (int64_t)0, __ATOMIC_RELEASE);
}

static void *mg__watch_main(void *arg) {
    mg_comm *comm = (mg_comm *)arg;
    struct mg_comm_state *st = comm->state;
    pthread_mutex_lock(&st->watch_mu);
    while (!st->watch_stop) {
        struct timespec until;
        int64_t deadline, now;
        timespec_get(&until, TIME_UTC);
        until.tv_nsec += 20 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&st->watch_cv, &st->watch_mu, &until);
        deadline = __atomic_load_n(&st->armed_deadline_ns, __ATOMIC_ACQUIRE);
        now = mg__now_ns(mg__comm_now());
        if (st->watch_stop || !deadline || now <= deadline) continue;
        {
            const char *op = __atomic_load_n(&st->armed_op, __ATOMIC_RELAXED);
            const mg_group *g = __atomic_load_n(&st->armed_group, __ATOMIC_RELAXED);
            int64_t post = __atomic_load_n(&st->armed_post_ns, __ATOMIC_RELAXED);
            char msg[768];
            /* re-armed for a later operation meanwhile: that one is not late */
            if (__atomic_load_n(&st->armed_deadline_ns, __ATOMIC_ACQUIRE) != deadline) continue;
            mg__timeout_message(msg, sizeof msg, op, g, (double)(deadline - post) * 1e-9,
                                (double)(now - post) * 1e-9);
            mg__print_abort(comm, __FILE__, __LINE__, msg, NULL, NULL);
            _Exit(1);
        }
    }
    pthread_mutex_unlock(&st->watch_mu);
    return NULL;
}

static void mg__watch_start(mg_comm *comm) {
    struct mg_comm_state *st = comm->state;
    if (pthread_mutex_init(&st->watch_mu, NULL) || pthread_cond_init(&st->watch_cv, NULL) ||
        pthread_create(&st->watch_thread, NULL, mg__watch_main, comm))
        mg_fatal(__FILE__, __LINE__, "cannot start the watchdog thread");
    st->watch_running = 1;
}
static void mg__watch_stop(mg_comm *comm) {
    struct mg_comm_state *st = comm->state;
    if (!st->watch_running) return;
    pthread_mutex_lock(&st->watch_mu);
    st->watch_stop = 1;
    pthread_cond_signal(&st->watch_cv);
    pthread_mutex_unlock(&st->watch_mu);
    pthread_join(st->watch_thread, NULL);
    pthread_cond_destroy(&st->watch_cv);
    pthread_mutex_destroy(&st->watch_mu);
    st->watch_running = 0;
}
#endif

#ifdef __CUDACC__
/* Between two polls of an unfinished GPU operation: yield the core for the first millisecond,
   then sleep 1% of the time waited so far (≤ 1 ms). A waiting rank then costs little CPU
   when ranks outnumber cores, and a long wait loses at most ~1% to the sleeps.               */
static void mg__comm_backoff(double waited_s) {
    if (waited_s < 1e-3) { sched_yield(); return; }
#if defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 199309L
    {
        double s = waited_s * 0.01;
        struct timespec ts;
        if (s > 1e-3) s = 1e-3;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)(s * 1e9);
        nanosleep(&ts, NULL);
    }
#else
    sched_yield();   /* strict ISO C build: no nanosleep; yielding still lets peers run */
#endif
}
#endif

/* ---------------------------------------------------------------------------------------------
   1. World
   ------------------------------------------------------------------------------------------ */
static void mg__group_clear(mg_group *g, mg_group_kind kind) {
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->rank = -1;
    g->name = mg__group_names[kind];
}

/* Frees a group's communicators and member list; leaves it empty (size 0).                  */
static void mg__group_free(mg_group *g) {
#ifdef __CUDACC__
    if (g->nccl_comm) MG__NCCL_CHECK(ncclCommDestroy((ncclComm_t)g->nccl_comm));
#endif
#ifdef MG_USE_MPI
    if (g->mpi_comm) {
        MPI_Comm *c = (MPI_Comm *)g->mpi_comm;
        if (*c != MPI_COMM_NULL) MG__MPI_CHECK(MPI_Comm_free(c));
        MG_FREE(c);
    }
#endif
    MG_FREE(g->world_ranks);
    mg__group_clear(g, g->kind);
}

MGDEF void mg_comm_init(mg_comm *comm, int *argc, char ***argv) {
    struct mg_comm_state *st;
    memset(comm, 0, sizeof *comm);
    comm->timeout_s = 600;
    comm->local_size = 1;
    comm->world_size = 1;
    st = (struct mg_comm_state *)MG_MALLOC(sizeof *st);
    if (!st) mg_fatal(__FILE__, __LINE__, "mg_comm_init: out of memory");
    memset(st, 0, sizeof *st);
    st->group_slot = -1;
    comm->state = st;
    for (int k = 0; k < MG_GROUP_KINDS; k++)
        mg__group_clear(mg_comm_group(comm, (mg_group_kind)k), (mg_group_kind)k);
    mg__comm_active = comm;
    mg_set_fatal_handler(mg__comm_fatal_handler);
#ifdef MG_USE_MPI
    {
        int inited = 0, provided = 0;
        MPI_Comm *world = (MPI_Comm *)MG_MALLOC(sizeof(MPI_Comm));
        MPI_Comm local;
        MPI_Initialized(&inited);
        if (!inited) {
            /* OpenMP threads never call MPI: FUNNELED is enough. */
            if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
                mg_fatal(__FILE__, __LINE__, "MPI_Init_thread failed");
            st->mpi_initialized_here = 1;
        }
        /* Errors come back as codes, checked by MG__MPI_CHECK, instead of killing silently.
           Communicators made from these inherit the handler.                               */
        MG__MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MG__MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &comm->world_rank));
        MG__MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &comm->world_size));
        MG__MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm->world_rank,
                                          MPI_INFO_NULL, &local));
        MG__MPI_CHECK(MPI_Comm_rank(local, &comm->local_rank));
        MG__MPI_CHECK(MPI_Comm_size(local, &comm->local_size));
        MG__MPI_CHECK(MPI_Comm_free(&local));
        /* Our own copy of the world: library traffic never matches the user's messages. */
        MG__MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, world));
        comm->world.mpi_comm = world;
        mg__watch_start(comm);
    }
#else
    (void)argc; (void)argv;
#endif
    comm->world.rank = comm->world_rank;
    comm->world.size = comm->world_size;
    comm->world.world_ranks = (int *)MG_MALLOC(sizeof(int) * (size_t)comm->world_size);
    for (int r = 0; r < comm->world_size; r++) comm->world.world_ranks[r] = r;
}

MGDEF void mg_comm_finalize(mg_comm *comm) {
    struct mg_comm_state *st = comm->state;
    int outstanding = 0;
    if (!st) return;
    for (int i = 0; i < MG_MAX_REQUESTS; i++) outstanding += st->slots[i].in_use;
    if (outstanding || st->group_depth)
        mg_fatal(__FILE__, __LINE__, "mg_comm_finalize: %d request(s) still outstanding%s "
                 "(every mg_i* needs mg_wait or mg_test)", outstanding,
                 st->group_depth ? " and a group not ended" : "");
    for (int k = MG_GROUP_KINDS - 1; k >= 0; k--)
        mg__group_free(mg_comm_group(comm, (mg_group_kind)k));
    for (int i = 0; i < MG_MAX_REQUESTS; i++) {
        mg__request_slot *s = &st->slots[i];
        MG_FREE(s->scratch);
#ifdef MG_USE_MPI
        MG_FREE(s->mpi);
        MG_FREE(s->mpi_status);
#else
        MG_FREE(s->self_msgs);
#endif
#ifdef __CUDACC__
        if (s->event) MG_CUDA_CHECK(cudaEventDestroy(s->event));
#endif
    }
#ifdef __CUDACC__
    if (st->stream) MG_CUDA_CHECK(cudaStreamDestroy(st->stream));
    if (st->ready) MG_CUDA_CHECK(cudaEventDestroy(st->ready));
#endif
#ifdef MG_USE_MPI
    mg__watch_stop(comm);
    if (st->mpi_initialized_here) MG__MPI_CHECK(MPI_Finalize());
#endif
    MG_FREE(st);
    comm->state = NULL;
    if (mg__comm_active == comm) {
        mg__comm_active = NULL;
        mg_set_fatal_handler(NULL);
    }
}

MGDEF int mg_comm_default_threads(const mg_comm *comm) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long per_rank = cores / (comm->local_size > 0 ? comm->local_size : 1);
    return per_rank >= 1 ? (int)per_rank : 1;
}

MGDEF int mg_comm_cuda_device(const mg_comm *comm) {
#ifdef __CUDACC__
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) return 0;
    return comm->local_rank % n;
#else
    (void)comm;
    return 0;
#endif
}

/* ---------------------------------------------------------------------------------------------
   2. Topology (pure functions)
   ------------------------------------------------------------------------------------------ */
MGDEF int mg_topology_validate(int world_size, int t, int p, int v, char *err, size_t errlen) {
    return mg_topology_validate_cp(world_size, t, 1, p, v, err, errlen);
}
MGDEF int mg_topology_validate_cp(int world_size, int t, int c, int p, int v, char *err,
                                  size_t errlen) {
    char valid[256] = "";
    size_t used = 0;
    if (err && errlen) err[0] = 0;
    if (world_size < 1) {
        if (err) snprintf(err, errlen, "world size %d must be >= 1", world_size);
        return -1;
    }
    if (t < 1 || p < 1 || v < 1) {
        if (err) snprintf(err, errlen, "tensor-parallel size t=%d, pipeline-parallel size p=%d "
                          "and virtual stages v=%d must all be >= 1", t, p, v);
        return -1;
    }
    if (c < 1) {
        if (err) snprintf(err, errlen, "context-parallel size c=%d must be >= 1", c);
        return -1;
    }
    if (c > 1 && (world_size % ((int64_t)t * c) != 0 || world_size / t / c % p != 0)) {
        for (int k = 1; k <= world_size && used + 12 < sizeof valid; k++)
            if (world_size % k == 0)
                used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%d",
                                         used ? ", " : "", k);
        if (err) snprintf(err, errlen, "t*c*p = %lld (t=%d, c=%d, p=%d) does not divide the "
                          "world size %d; t*c*p must be one of %s", (long long)t * c * p, t, c,
                          p, world_size, valid);
        return -1;
    }
    if (world_size % t != 0 || world_size / t % p != 0) {
        for (int k = 1; k <= world_size && used + 12 < sizeof valid; k++)
            if (world_size % k == 0)
                used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%d",
                                         used ? ", " : "", k);
        if (err) snprintf(err, errlen, "t*p = %lld (t=%d, p=%d) does not divide the world size "
                          "%d; t*p must be one of %s", (long long)t * p, t, p, world_size,
                          valid);
        return -1;
    }
    if (v > 1 && p == 1) {
        if (err) snprintf(err, errlen, "virtual pipeline stages v=%d need pipeline-parallel "
                          "size p > 1 (got p=1; use v=1)", v);
        return -1;
    }
    return 0;
}

MGDEF int mg_topology_init(mg_topology *topo, int world_size, int world_rank, int t, int p,
                           int v, char *err, size_t errlen) {
    return mg_topology_init_cp(topo, world_size, world_rank, t, 1, p, v, err, errlen);
}
MGDEF int mg_topology_init_cp(mg_topology *topo, int world_size, int world_rank, int t, int c,
                              int p, int v, char *err, size_t errlen) {
    if (mg_topology_validate_cp(world_size, t, c, p, v, err, errlen) != 0) return -1;
    if (world_rank < 0 || world_rank >= world_size) {
        if (err) snprintf(err, errlen, "rank %d outside the world of %d", world_rank, world_size);
        return -1;
    }
    topo->t = t;
    topo->p = p;
    topo->v = v;
    topo->c = c;
    topo->d = world_size / (t * c * p);
    /* rank = tp + t·(cp + c·(dp + d·pp)), read backwards */
    topo->tp_rank = world_rank % t;
    topo->cp_rank = world_rank / t % c;
    topo->dp_rank = world_rank / (t * c) % topo->d;
    topo->pp_rank = world_rank / (t * c * topo->d);
    return 0;
}

MGDEF int mg_topology_world_rank(const mg_topology *topo, int tp, int dp, int pp) {
    return mg_topology_world_rank_cp(topo, tp, 0, dp, pp);
}
MGDEF int mg_topology_world_rank_cp(const mg_topology *topo, int tp, int cp, int dp, int pp) {
    int c = topo->c > 0 ? topo->c : 1;
    return tp + topo->t * (cp + c * (dp + topo->d * pp));
}

MGDEF int mg_topology_group(const mg_topology *topo, int world_rank, mg_group_kind kind,
                            int *members) {
    int t = topo->t, d = topo->d, p = topo->p, c = topo->c > 0 ? topo->c : 1, n = 0;
    int tp, cp, dp, pp;
    if (t < 1 || d < 1 || p < 1 || world_rank < 0 || world_rank >= t * c * d * p)
        mg_fatal(__FILE__, __LINE__, "mg_topology_group: rank %d of an uninitialised or smaller "
                 "topology (t %d, c %d, d %d, p %d)", world_rank, t, c, d, p);
    tp = world_rank % t;
    cp = world_rank / t % c;
    dp = world_rank / (t * c) % d;
    pp = world_rank / (t * c * d);
    switch (kind) {
    case MG_GROUP_WORLD:
        for (int r = 0; r < t * c * d * p; r++) members[n++] = r;
        break;
    case MG_GROUP_TENSOR:     /* vary tp */
        for (int i = 0; i < t; i++) members[n++] = mg_topology_world_rank_cp(topo, i, cp, dp, pp);
        break;
    case MG_GROUP_CONTEXT:    /* vary cp */
        for (int i = 0; i < c; i++) members[n++] = mg_topology_world_rank_cp(topo, tp, i, dp, pp);
        break;
    case MG_GROUP_DATA:       /* vary dp */
        for (int i = 0; i < d; i++) members[n++] = mg_topology_world_rank_cp(topo, tp, cp, i, pp);
        break;
    case MG_GROUP_DATA_CONTEXT:   /* vary cp and dp, cp fastest (world-rank order) */
        for (int i = 0; i < d * c; i++)
            members[n++] = mg_topology_world_rank_cp(topo, tp, i % c, i / c, pp);
        break;
    case MG_GROUP_PIPELINE:   /* vary pp */
        for (int i = 0; i < p; i++) members[n++] = mg_topology_world_rank_cp(topo, tp, cp, dp, i);
        break;
    case MG_GROUP_EMBEDDING:  /* first and last stage of this rank's pipeline group */
        if (pp != 0 && pp != p - 1) break;
        members[n++] = mg_topology_world_rank_cp(topo, tp, cp, dp, 0);
        if (p > 1) members[n++] = mg_topology_world_rank_cp(topo, tp, cp, dp, p - 1);
        break;
    default:
        mg_fatal(__FILE__, __LINE__, "mg_topology_group: unknown group kind %d", (int)kind);
    }
    return n;
}

MGDEF int mg_topology_describe(const mg_topology *topo, char *buf, size_t buflen) {
    int c = topo->c > 0 ? topo->c : 1, world = topo->t * c * topo->p * topo->d;
    int *members = (int *)MG_MALLOC(sizeof(int) * (size_t)world);
    int kinds = c > 1 ? MG_GROUP_KINDS : MG_GROUP_CONTEXT;   /* c = 1: no context groups */
    size_t used = 0;
    if (buf && buflen) buf[0] = 0;
    if (c > 1)
        mg__comm_appendf(buf, buflen, &used, "%d ranks = t %d x c %d x p %d x d %d, v %d; "
                         "rank = tp + t*(cp + c*(dp + d*pp))\n", world, topo->t, c, topo->p,
                         topo->d, topo->v);
    else
        mg__comm_appendf(buf, buflen, &used, "%d ranks = t %d x p %d x d %d, v %d; "
                         "rank = tp + t*(dp + d*pp)\n", world, topo->t, topo->p, topo->d,
                         topo->v);
    for (int r = 0; r < world; r++) {
        if (c > 1)
            mg__comm_appendf(buf, buflen, &used, "rank %3d: tp %d cp %d dp %d pp %d |", r,
                             r % topo->t, r / topo->t % c, r / (topo->t * c) % topo->d,
                             r / (topo->t * c * topo->d));
        else
            mg__comm_appendf(buf, buflen, &used, "rank %3d: tp %d dp %d pp %d |", r, r % topo->t,
                             r / topo->t % topo->d, r / (topo->t * topo->d));
        for (int k = MG_GROUP_TENSOR; k < kinds; k++) {
            int n = mg_topology_group(topo, r, (mg_group_kind)k, members);
            mg__comm_appendf(buf, buflen, &used, " %s [", mg__group_names[k]);
            for (int i = 0; i < n; i++)
                mg__comm_appendf(buf, buflen, &used, i ? ",%d" : "%d", members[i]);
            mg__comm_appendf(buf, buflen, &used, "]");
        }
        mg__comm_appendf(buf, buflen, &used, "\n");
    }
    MG_FREE(members);
    return (int)used;
}

MGDEF mg_group *mg_comm_group(mg_comm *comm, mg_group_kind kind) {
    switch (kind) {
    case MG_GROUP_WORLD: return &comm->world;
    case MG_GROUP_TENSOR: return &comm->tensor;
    case MG_GROUP_DATA: return &comm->data;
    case MG_GROUP_PIPELINE: return &comm->pipeline;
    case MG_GROUP_EMBEDDING: return &comm->embedding;
    case MG_GROUP_CONTEXT: return &comm->context;
    case MG_GROUP_DATA_CONTEXT: return &comm->data_context;
    default: break;
    }
    mg_fatal(__FILE__, __LINE__, "mg_comm_group: unknown group kind %d", (int)kind);
}

/* ---------------------------------------------------------------------------------------------
   2b. Building the groups
   ------------------------------------------------------------------------------------------ */
#ifdef __CUDACC__
/* The world's NCCL communicator: rank 0 makes the unique id, MPI carries it to the others.   */
/* Communicators are blocking whatever NCCL_COMM_BLOCKING says: with a nonblocking one a
   collective may return ncclInProgress before its kernel is enqueued, and the request's event
   (recorded right after the call) would complete before the data moved.                    */
static ncclConfig_t mg__nccl_config(void) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    return cfg;
}

static void mg__nccl_world(mg_comm *comm) {
    ncclUniqueId id;
    ncclComm_t c;
    ncclConfig_t cfg = mg__nccl_config();
    if (comm->world.nccl_comm) return;
    if (comm->world_rank == 0) MG__NCCL_CHECK(ncclGetUniqueId(&id));
#ifdef MG_USE_MPI
    MG__MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, *(MPI_Comm *)comm->world.mpi_comm));
#endif
    MG__NCCL_CHECK(ncclCommInitRankConfig(&c, comm->world_size, id, comm->world_rank, &cfg));
    comm->world.nccl_comm = c;
}

/* A group's NCCL communicator. Every rank of the world calls this for every kind, in the same
   order (ncclCommSplit is collective over the world communicator; the per-group fallback only
   over the group, whose members all reach it at the same point).                            */
static void mg__nccl_group(mg_comm *comm, mg_group *g, int color) {
    ncclComm_t c = NULL;
    ncclConfig_t cfg = mg__nccl_config();
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0) && !defined(MG_COMM_NO_NCCL_SPLIT)
    MG__NCCL_CHECK(ncclCommSplit((ncclComm_t)comm->world.nccl_comm,
                                 g->size ? color : NCCL_SPLIT_NOCOLOR, g->rank, &c, &cfg));
#else
    ncclUniqueId id;
    (void)comm; (void)color;
    if (!g->size) return;
    if (g->rank == 0) MG__NCCL_CHECK(ncclGetUniqueId(&id));
#ifdef MG_USE_MPI
    MG__MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, *(MPI_Comm *)g->mpi_comm));
#endif
    MG__NCCL_CHECK(ncclCommInitRankConfig(&c, g->size, id, g->rank, &cfg));
#endif
    g->nccl_comm = c;
}

/* Communication stream (highest priority, so collectives are not queued behind compute
   kernels) and the event that orders it after the compute stream.                           */
static void mg__comm_gpu_streams(mg_comm *comm) {
    struct mg_comm_state *st = comm->state;
    int least = 0, greatest = 0;
    if (st->stream) return;
    MG_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    MG_CUDA_CHECK(cudaStreamCreateWithPriority(&st->stream, cudaStreamNonBlocking, greatest));
    MG_CUDA_CHECK(cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming));
}
#endif

#ifdef MG_USE_MPI
/* Every rank must pass the same sizes: ranks that disagree would build groups that do not
   match (each valid on its own) and hang in their first collective. One all-gather of the
   four sizes at setup tells them apart.                                                    */
static void mg__same_topology(mg_comm *comm, int t, int c, int p, int v) {
    int mine[4] = {t, c, p, v}, *all = (int *)MG_MALLOC(sizeof(int) * 4 * (size_t)comm->world_size);
    if (!all) mg_fatal(__FILE__, __LINE__, "mg_comm_setup_groups: out of host memory");
    MG__MPI_CHECK(MPI_Allgather(mine, 4, MPI_INT, all, 4, MPI_INT,
                                *(MPI_Comm *)comm->world.mpi_comm));
    for (int r = 0; r < comm->world_size; r++)
        if (memcmp(all + 4 * r, mine, sizeof mine))
            mg_fatal(__FILE__, __LINE__, "mg_comm_setup_groups: ranks disagree on the topology: "
                     "this rank passed t=%d c=%d p=%d v=%d, world rank %d passed t=%d c=%d p=%d "
                     "v=%d (every rank must pass the same)", t, c, p, v, r, all[4 * r],
                     all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]);
    MG_FREE(all);
}
#endif
MGDEF void mg_comm_setup_groups(mg_comm *comm, mg_ctx *ctx, int t, int p, int v) {
    mg_comm_setup_groups_cp(comm, ctx, t, 1, p, v);
}
MGDEF void mg_comm_setup_groups_cp(mg_comm *comm, mg_ctx *ctx, int t, int c, int p, int v) {
    char err[512];
    mg_topology topo;
    int *members;
    if (mg_topology_init_cp(&topo, comm->world_size, comm->world_rank, t, c, p, v, err,
                            sizeof err) != 0) {
        /* Every rank reaches the same verdict without communicating: rank 0 says why, all
           leave with status 1.                                                              */
        if (comm->world_rank == 0) fprintf(stderr, "mg_comm: bad topology: %s\n", err);
        fflush(stderr);
#ifdef MG_USE_MPI
        MPI_Finalize();
#endif
        exit(1);
    }
    if (comm->state->group_depth)
        mg_fatal(__FILE__, __LINE__, "mg_comm_setup_groups inside mg_group_start/end");
    for (int k = MG_GROUP_TENSOR; k < MG_GROUP_KINDS; k++)
        mg__group_free(mg_comm_group(comm, (mg_group_kind)k));
    comm->topo = topo;
    comm->ctx = ctx;
#ifdef MG_USE_MPI
    mg__watch_arm(comm, "setup_groups", &comm->world, mg__comm_now());   /* a peer that never
                                                                  arrives ends the job too */
    mg__same_topology(comm, t, c, p, v);
#endif
#ifdef __CUDACC__
    if (mg__comm_on_gpu(comm)) { mg__comm_gpu_streams(comm); mg__nccl_world(comm); }
#endif
    members = (int *)MG_MALLOC(sizeof(int) * (size_t)comm->world_size);
    for (int k = MG_GROUP_TENSOR; k < MG_GROUP_KINDS; k++) {
        mg_group *g = mg_comm_group(comm, (mg_group_kind)k);
        int n = mg_topology_group(&topo, comm->world_rank, (mg_group_kind)k, members);
        /* The group's smallest world rank names it (color); the position orders it (key). */
        int color = n ? members[0] : -1;
        g->size = n;
        g->rank = -1;   /* stays -1 when this rank is in no group of this kind */
        for (int i = 0; i < n; i++) if (members[i] == comm->world_rank) g->rank = i;
        if (n) {
            g->world_ranks = (int *)MG_MALLOC(sizeof(int) * (size_t)n);
            memcpy(g->world_ranks, members, sizeof(int) * (size_t)n);
        }
#ifdef MG_USE_MPI
        {
            MPI_Comm *c = (MPI_Comm *)MG_MALLOC(sizeof(MPI_Comm));
            int r = -1;
            MG__MPI_CHECK(MPI_Comm_split(*(MPI_Comm *)comm->world.mpi_comm,
                                         n ? color : MPI_UNDEFINED, g->rank, c));
            g->mpi_comm = c;
            if (n) {
                MG__MPI_CHECK(MPI_Comm_rank(*c, &r));
                if (r != g->rank)
                    mg_fatal(__FILE__, __LINE__, "%s group: MPI rank %d, expected %d", g->name,
                             r, g->rank);
            }
        }
#endif
#ifdef __CUDACC__
        if (mg__comm_on_gpu(comm)) mg__nccl_group(comm, g, color);
#else
        (void)color;
#endif
    }
    MG_FREE(members);
#ifdef MG_USE_MPI
    mg__watch_disarm(comm);
#endif
}

/* ---------------------------------------------------------------------------------------------
   Conversions around 16-bit reductions on the CPU
   ------------------------------------------------------------------------------------------ */
/* dst[i] = src[i] / divisor for i in [lo, hi), one side fp32, the other fp32/bf16/fp16
   (16-bit -> fp32 is exact; fp32 -> 16-bit rounds to nearest even; x / 1 is exact). One loop
   per pair, so each vectorises (omp simd through mg_tensor.h's MG__SIMD_HINT, none on clang).  */
static void mg__comm_convert_range(void *dst, mg_dtype dst_dt, const void *src, mg_dtype src_dt,
                                   int64_t lo, int64_t hi, float divisor) {
    if (src_dt == MG_F32) {
        const float *x = (const float *)src;
        if (dst_dt == MG_F32) {
            float *y = (float *)dst;
            MG__SIMD_HINT()
            for (int64_t i = lo; i < hi; i++) y[i] = x[i] / divisor;
        } else if (dst_dt == MG_BF16) {
            uint16_t *y = (uint16_t *)dst;
            MG__SIMD_HINT()
            for (int64_t i = lo; i < hi; i++) y[i] = mg_f32_to_bf16(x[i] / divisor);
        } else {
            uint16_t *y = (uint16_t *)dst;
            MG__SIMD_HINT()
            for (int64_t i = lo; i < hi; i++) y[i] = mg_f32_to_f16(x[i] / divisor);
        }
    } else {   /* widening: divisor is 1 */
        const uint16_t *x = (const uint16_t *)src;
        float *y = (float *)dst;
        if (src_dt == MG_BF16) {
            MG__SIMD_HINT()
            for (int64_t i = lo; i < hi; i++) y[i] = mg_bf16_to_f32(x[i]);
        } else {
            MG__SIMD_HINT()
            for (int64_t i = lo; i < hi; i++) y[i] = mg_f16_to_f32(x[i]);
        }
    }
}

/* The same over [0, n) with the rank's nt threads (its context's, not the node's cores: ranks
   share the node). Below 64 Ki elements, or with one thread, no parallel region is opened:
   even one that does not fork costs about a microsecond.                                     */
static void mg__comm_convert(void *dst, mg_dtype dst_dt, const void *src, mg_dtype src_dt,
                             int64_t n, float divisor, int nt) {
#ifdef _OPENMP
    if (nt > 1 && n > 65536) {
#pragma omp parallel num_threads(nt)
        {
            int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
            mg__comm_convert_range(dst, dst_dt, src, src_dt, n * t / T, n * (t + 1) / T,
                                   divisor);
        }
        return;
    }
#endif
    (void)nt;
    mg__comm_convert_range(dst, dst_dt, src, src_dt, 0, n, divisor);
}

#ifdef MG_USE_MPI
/* The CPU threads this rank may use (its context's; 1 before mg_comm_setup_groups).         */
static int mg__comm_threads(const mg_comm *comm) {
    return comm->ctx && comm->ctx->n_threads > 0 ? comm->ctx->n_threads : 1;
}
#endif

/* ---------------------------------------------------------------------------------------------
   Request slots
   ------------------------------------------------------------------------------------------ */
static mg__request_slot *mg__slot_new(mg_comm *comm, const char *op, const mg_group *g) {
    struct mg_comm_state *st = comm->state;
    for (int i = 0; i < MG_MAX_REQUESTS; i++) {
        mg__request_slot *s = &st->slots[i];
        if (s->in_use) continue;
        s->in_use = 1;
        s->op = op;
        s->group = g;
        s->t_post = mg__comm_now();
        s->fin_src = NULL;
#ifdef MG_USE_MPI
        s->n_mpi = 0;
#else
        s->n_self = 0;
#endif
#ifdef __CUDACC__
        s->on_gpu = 0;
#endif
        return s;
    }
    mg_fatal(__FILE__, __LINE__, "more than %d communication requests outstanding (every mg_i* "
             "needs an mg_wait or a successful mg_test)", MG_MAX_REQUESTS);
}

/* Handle = 1 + slot index + MG_MAX_REQUESTS · (generation mod 2^20); 0 means "complete".      */
static mg_request mg__slot_handle(mg_comm *comm, mg__request_slot *s) {
    mg_request r;
    r.id = 1 + (int)(s - comm->state->slots) + MG_MAX_REQUESTS * (s->generation & 0xFFFFF);
    return r;
}

static mg__request_slot *mg__slot_of(mg_comm *comm, const mg_request *req, const char *who) {
    int idx = (req->id - 1) % MG_MAX_REQUESTS, gen = (req->id - 1) / MG_MAX_REQUESTS;
    mg__request_slot *s;
    if (req->id < 0) mg_fatal(__FILE__, __LINE__, "%s: invalid request handle %d", who, req->id);
    s = &comm->state->slots[idx];
    if (!s->in_use || (s->generation & 0xFFFFF) != gen)
        mg_fatal(__FILE__, __LINE__, "%s: request %d was already completed (waited or tested "
                 "true); a handle is good for one completion", who, req->id);
    return s;
}

static void mg__slot_release(mg__request_slot *s) {
    s->in_use = 0;
    s->generation++;
}

#ifdef MG_USE_MPI
static void *mg__slot_scratch(mg__request_slot *s, size_t bytes) {
    if (bytes > s->scratch_bytes) {
        MG_FREE(s->scratch);
        s->scratch = MG_MALLOC(bytes);
        if (!s->scratch) mg_fatal(__FILE__, __LINE__, "cannot allocate %zu bytes of "
                                  "communication scratch", bytes);
        s->scratch_bytes = bytes;
    }
    return s->scratch;
}

static MPI_Request *mg__slot_add_mpi(mg__request_slot *s) {
    if (s->n_mpi == s->cap_mpi) {
        int cap = s->cap_mpi ? 2 * s->cap_mpi : 4;
        MPI_Request *grown = (MPI_Request *)MG_MALLOC(sizeof(MPI_Request) * (size_t)cap);
        if (s->n_mpi) memcpy(grown, s->mpi, sizeof(MPI_Request) * (size_t)s->n_mpi);
        MG_FREE(s->mpi);
        MG_FREE(s->mpi_status);
        s->mpi = grown;
        s->mpi_status = (MPI_Status *)MG_MALLOC(sizeof(MPI_Status) * (size_t)cap);
        s->cap_mpi = cap;
    }
    s->mpi[s->n_mpi] = MPI_REQUEST_NULL;
    return &s->mpi[s->n_mpi++];
}

/* After MPI_Testall / MPI_Waitall: MPI_ERR_IN_STATUS means the statuses hold the errors; name
   the request's own error ("message truncated"), not the wrapper code.                      */
static void mg__mpi_check_statuses(int rc, const mg__request_slot *s, const char *call,
                                   const char *file, int line) {
    if (rc == MPI_ERR_IN_STATUS)
        for (int i = 0; i < s->n_mpi; i++)
            if (s->mpi_status[i].MPI_ERROR != MPI_SUCCESS &&
                s->mpi_status[i].MPI_ERROR != MPI_ERR_PENDING)
                mg__mpi_failed(s->mpi_status[i].MPI_ERROR, call, file, line);
    if (rc != MPI_SUCCESS) mg__mpi_failed(rc, call, file, line);
}
#endif

/* 1 when the transfer is done (the completion step not yet run).                             */
static int mg__slot_poll(mg_comm *comm, mg__request_slot *s) {
#ifdef __CUDACC__
    if (s->on_gpu) {
        cudaError_t e = cudaEventQuery(s->event);
        if (e == cudaSuccess) return 1;
        if (e != cudaErrorNotReady) MG_CUDA_CHECK(e);
        for (int k = 0; k < MG_GROUP_KINDS; k++) {   /* a peer's failure surfaces here */
            mg_group *g = mg_comm_group(comm, (mg_group_kind)k);
            ncclResult_t async = ncclSuccess;
            if (!g->nccl_comm) continue;
            MG__NCCL_CHECK(ncclCommGetAsyncError((ncclComm_t)g->nccl_comm, &async));
            if (async != ncclSuccess && async != ncclInProgress)
                mg_fatal(__FILE__, __LINE__, "NCCL asynchronous error on the %s group: %s",
                         g->name, ncclGetErrorString(async));
        }
        return 0;
    }
#endif
#ifdef MG_USE_MPI
    if (s->n_mpi) {
        int done = 0;
        mg__mpi_check_statuses(MPI_Testall(s->n_mpi, s->mpi, &done, s->mpi_status), s,
                               "MPI_Testall", __FILE__, __LINE__);
        return done;
    }
#endif
    (void)comm; (void)s;
    return 1;
}

/* Runs the completion step (see the slot): fp32 scratch -> storage dtype, sum -> average,
   in-place reduce-scatter chunk -> its place.                                               */
static void mg__slot_finish(mg__request_slot *s) {
    if (s->fin_src)
        mg__comm_convert(s->fin_dst, s->fin_dt, s->fin_src, MG_F32, s->fin_n,
                         (float)s->fin_divisor, s->fin_threads);
}

/* Completes slot s: the GPU is polled (cudaEventQuery, NCCL's asynchronous errors) against the
   deadline; MPI requests are finished by MPI_Waitall — MPI's own loop progresses them at full
   speed (and yields when ranks outnumber cores) — with the watchdog thread armed.           */
static void mg__slot_wait(mg_comm *comm, mg__request_slot *s) {
    mg__op_begin(comm, s->op, s->group);
#ifdef __CUDACC__
    if (s->on_gpu) {
        double t_wait = mg__comm_now();
        while (!mg__slot_poll(comm, s)) {
            double now = mg__comm_now();
            if (now - s->t_post > comm->timeout_s)
                mg__timeout_abort(comm, s->op, s->group, s->t_post);
            mg__comm_backoff(now - t_wait);
        }
    }
#endif
#ifdef MG_USE_MPI
    if (s->n_mpi) {
        int rc;
        mg__watch_arm(comm, s->op, s->group, s->t_post);
        rc = MPI_Waitall(s->n_mpi, s->mpi, s->mpi_status);
        mg__watch_disarm(comm);
        mg__mpi_check_statuses(rc, s, "MPI_Waitall", __FILE__, __LINE__);
    }
#endif
    mg__slot_finish(s);
    mg__slot_release(s);
    mg__op_end(comm);
}

MGDEF void mg_wait(mg_comm *comm, mg_request *req) {
    if (req->id == 0) return;
    mg__slot_wait(comm, mg__slot_of(comm, req, "mg_wait"));
    req->id = 0;
}

MGDEF int mg_test(mg_comm *comm, mg_request *req) {
    mg__request_slot *s;
    if (req->id == 0) return 1;
    s = mg__slot_of(comm, req, "mg_test");
    mg__op_begin(comm, s->op, s->group);
    if (!mg__slot_poll(comm, s)) {
        if (mg__comm_now() - s->t_post > comm->timeout_s)
            mg__timeout_abort(comm, s->op, s->group, s->t_post);
        mg__op_end(comm);
        return 0;
    }
    mg__slot_finish(s);
    mg__slot_release(s);
    mg__op_end(comm);
    req->id = 0;
    return 1;
}

/* Ends the posting of an operation. s NULL: it completed on the spot. Blocking: wait for it
   here. Otherwise: its handle.                                                               */
static mg_request mg__posted(mg_comm *comm, mg__request_slot *s, int blocking) {
    mg_request r;
    r.id = 0;
    if (s && blocking) {
        mg__slot_wait(comm, s);
    } else {
        mg__op_end(comm);
        if (s) r = mg__slot_handle(comm, s);
    }
    return r;
}

/* ---------------------------------------------------------------------------------------------
   3. Collectives
   Each is one internal function with a `blocking` flag: on the CPU a blocking call runs MPI's
   blocking collective (its tuned algorithms) under the watchdog, a nonblocking one the MPI_I*
   variant; on the GPU both enqueue NCCL and the blocking one waits on the event.
   ------------------------------------------------------------------------------------------ */

/* Checks shared by every operation; records the operation for error messages.                */
static void mg__comm_check_op(mg_comm *comm, const mg_group *g, const char *op, int64_t count,
                              mg_dtype dt) {
    if (!comm || !comm->state)
        mg_fatal(__FILE__, __LINE__, "%s: communicator not initialised (mg_comm_init)", op);
    mg__op_begin(comm, op, g);   /* failures below name the operation and group */
    if (!g || g->size <= 0)
        mg_fatal(__FILE__, __LINE__, "%s on the %s group: this rank is not a member%s", op,
                 g ? g->name : "(null)", comm->topo.t ? "" : " (call mg_comm_setup_groups)");
    if (count < 0) mg_fatal(__FILE__, __LINE__, "%s: negative count %lld", op, (long long)count);
    if ((int)dt < 0 || dt > MG_F16)
        mg_fatal(__FILE__, __LINE__, "%s: unknown dtype %d", op, (int)dt);
#ifdef MG_USE_MPI
    if (count > INT_MAX)
        mg_fatal(__FILE__, __LINE__, "%s: count %lld exceeds MPI's limit of %d elements per rank",
                 op, (long long)count, INT_MAX);
#endif
}

/* The checks of a collective: those of every operation, and not inside mg_group_start/end
   (only send/recv are grouped).                                                             */
static void mg__coll_begin(mg_comm *comm, const mg_group *g, const char *op, int64_t count,
                           mg_dtype dt) {
    if (comm && comm->state && comm->state->group_depth)
        mg_fatal(__FILE__, __LINE__, "%s inside mg_group_start/mg_group_end: only mg_send and "
                 "mg_recv may be grouped", op);
    mg__comm_check_op(comm, g, op, count, dt);
}

/* A buffer the operation reads or writes: NULL is refused unless count is 0.                 */
static void mg__check_buffer(const char *op, const char *name, const void *buf, int64_t count) {
    if (!buf && count > 0)
        mg_fatal(__FILE__, __LINE__, "%s: %s buffer is NULL with count %lld", op, name,
                 (long long)count);
}
/* send and recv of a collective. */
static void mg__check_buffers(const char *op, const void *send, const void *recv, int64_t count) {
    mg__check_buffer(op, "send", send, count);
    mg__check_buffer(op, "recv", recv, count);
}

static void mg__check_redop(const char *op, mg_redop r) {
    if ((int)r < 0 || r > MG_AVG)
        mg_fatal(__FILE__, __LINE__, "%s: unknown reduction %d", op, (int)r);
}

/* send [a, a+na) and recv [b, b+nb) may only overlap as the in-place layout allows.          */
static void mg__check_overlap(const char *op, const void *a, size_t na, const void *b, size_t nb,
                              int in_place) {
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    if (in_place || !na || !nb) return;
    if (a0 < b0 + nb && b0 < a0 + na)
        mg_fatal(__FILE__, __LINE__, "%s: send and recv buffers overlap but are not in place "
                 "(see the in-place rule of %s)", op, op);
}

/* Group of one: the result is a copy (sum, max or average of one value; one rounding of an
   exact value is the value).                                                                 */
static void mg__comm_copy_local(mg_comm *comm, void *dst, const void *src, size_t bytes) {
    if (dst == src || !bytes) return;
    if (comm->ctx) mg_copy(comm->ctx, dst, src, bytes);
    else memmove(dst, src, bytes);
}

static void mg__count_traffic(mg_comm *comm, const mg_group *g, uint64_t numerator_bytes) {
    comm->bytes_sent[g->kind] += numerator_bytes / (uint64_t)g->size;
}

/* After a collective's checks: count its traffic (numerator_bytes / group size, see 7); a
   group of one completes it on the spot as a copy of local_bytes (returns NULL); otherwise
   the operation gets a request slot.                                                        */
static mg__request_slot *mg__coll_slot(mg_comm *comm, mg_group *g, const char *op,
                                       uint64_t numerator_bytes, void *recv, const void *send,
                                       size_t local_bytes) {
    mg__count_traffic(comm, g, numerator_bytes);
    if (g->size > 1) return mg__slot_new(comm, op, g);
    mg__comm_copy_local(comm, recv, send, local_bytes);
    return NULL;
}

#ifdef MG_USE_MPI
static MPI_Comm mg__mpi(const mg_group *g) { return *(MPI_Comm *)g->mpi_comm; }
static MPI_Datatype mg__mpi_type(mg_dtype dt) { return dt == MG_F32 ? MPI_FLOAT : MPI_UINT16_T; }
static MPI_Op mg__mpi_op(mg_redop op) { return op == MG_MAX ? MPI_MAX : MPI_SUM; }
/* 16-bit values widened to fp32 (exact) for a reduction in fp32.                              */
static void mg__comm_widen(const mg_comm *comm, float *dst, const void *src, mg_dtype dt,
                           int64_t n) {
    mg__comm_convert(dst, MG_F32, src, dt, n, 1.0f, mg__comm_threads(comm));
}
static void mg__set_finish(const mg_comm *comm, mg__request_slot *s, const float *src, void *dst,
                           mg_dtype dt, int64_t n, int divisor) {
    s->fin_src = src; s->fin_dst = dst; s->fin_dt = dt; s->fin_n = n; s->fin_divisor = divisor;
    s->fin_threads = mg__comm_threads(comm);
}
/* One MPI collective for slot s: the blocking call under the watchdog, or the nonblocking one
   whose request joins s. The arguments are the same but for the trailing request.           */
#define MG__MPI_COLL(comm, s, blocking, blocking_fn, nonblocking_fn, ...) do {               \
    if (blocking) {                                                                             \
        mg__watch_arm(comm, (s)->op, (s)->group, (s)->t_post);                                  \
        MG__MPI_CHECK(blocking_fn(__VA_ARGS__));                                                \
        mg__watch_disarm(comm);                                                                 \
    } else {                                                                                    \
        MG__MPI_CHECK(nonblocking_fn(__VA_ARGS__, mg__slot_add_mpi(s)));                        \
    } } while (0)
#endif

#ifdef __CUDACC__
static ncclDataType_t mg__nccl_type(mg_dtype dt) {
    return dt == MG_F32 ? ncclFloat32 : dt == MG_BF16 ? ncclBfloat16 : ncclFloat16;
}
static ncclRedOp_t mg__nccl_op(mg_redop op) {
    return op == MG_MAX ? ncclMax : op == MG_AVG ? ncclAvg : ncclSum;
}
/* Order the communication stream after the work queued so far on the compute stream.        */
static void mg__comm_gpu_begin(mg_comm *comm) {
    struct mg_comm_state *st = comm->state;
    MG_CUDA_CHECK(cudaEventRecord(st->ready, (cudaStream_t)comm->ctx->stream));
    MG_CUDA_CHECK(cudaStreamWaitEvent(st->stream, st->ready, 0));
}
/* The slot completes when the communication stream passes this point.                       */
static void mg__comm_gpu_end(mg_comm *comm, mg__request_slot *s) {
    if (!s->event) MG_CUDA_CHECK(cudaEventCreateWithFlags(&s->event, cudaEventDisableTiming));
    MG_CUDA_CHECK(cudaEventRecord(s->event, comm->state->stream));
    s->on_gpu = 1;
}
/* One NCCL collective for slot s, on the communication stream, after the compute so far.    */
#define MG__NCCL_COLL(comm, s, call) do {                                                      \
    mg__comm_gpu_begin(comm);                                                                   \
    MG__NCCL_CHECK(call);                                                                       \
    mg__comm_gpu_end(comm, s);                                                                  \
    } while (0)
#endif

static mg_request mg__all_reduce(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                 int64_t count, mg_dtype dt, mg_redop op, int blocking) {
    const char *name = "all_reduce";
    size_t bytes;
    mg__request_slot *s;
    mg__coll_begin(comm, g, name, count, dt);
    mg__check_buffers(name, send, recv, count);
    mg__check_redop(name, op);
    bytes = (size_t)count * mg_dtype_size(dt);
    mg__check_overlap(name, send, bytes, recv, bytes, send == recv);
    s = mg__coll_slot(comm, g, name, 2 * (uint64_t)(g->size - 1) * bytes, recv, send, bytes);
    if (!s) return mg__posted(comm, NULL, 0);
#ifdef __CUDACC__
    if (mg__comm_on_gpu(comm)) {
        MG__NCCL_COLL(comm, s, ncclAllReduce(send, recv, (size_t)count, mg__nccl_type(dt),
                                             mg__nccl_op(op), (ncclComm_t)g->nccl_comm,
                                             comm->state->stream));
        return mg__posted(comm, s, blocking);
    }
#endif
#ifdef MG_USE_MPI
    {
        int divisor = op == MG_AVG ? g->size : 1;
        if (dt == MG_F32) {
            MG__MPI_COLL(comm, s, blocking, MPI_Allreduce, MPI_Iallreduce,
                         send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT,
                         mg__mpi_op(op), mg__mpi(g));
            if (divisor != 1)
                mg__set_finish(comm, s, (const float *)recv, recv, MG_F32, count, divisor);
        } else {   /* reduce in fp32 scratch, round once on completion */
            float *acc = (float *)mg__slot_scratch(s, (size_t)count * sizeof(float));
            mg__comm_widen(comm, acc, send, dt, count);
            MG__MPI_COLL(comm, s, blocking, MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE, acc,
                         (int)count, MPI_FLOAT, mg__mpi_op(op), mg__mpi(g));
            mg__set_finish(comm, s, acc, recv, dt, count, divisor);
        }
    }
#endif
    return mg__posted(comm, s, blocking);
}

static mg_request mg__reduce_scatter(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                     int64_t count, mg_dtype dt, mg_redop op, int blocking) {
    const char *name = "reduce_scatter";
    size_t esize, chunk;
    int in_place;
    mg__request_slot *s;
    mg__coll_begin(comm, g, name, count, dt);
    mg__check_buffers(name, send, recv, count);
    mg__check_redop(name, op);
    esize = mg_dtype_size(dt);
    chunk = (size_t)count * esize;
    in_place = (const char *)recv == (const char *)send + (size_t)g->rank * chunk;
    mg__check_overlap(name, send, chunk * (size_t)g->size, recv, chunk, in_place);
    s = mg__coll_slot(comm, g, name, (uint64_t)(g->size - 1) * chunk * (uint64_t)g->size, recv,
                      send, chunk);
    if (!s) return mg__posted(comm, NULL, 0);
#ifdef __CUDACC__
    if (mg__comm_on_gpu(comm)) {
        MG__NCCL_COLL(comm, s, ncclReduceScatter(send, recv, (size_t)count, mg__nccl_type(dt),
                                                 mg__nccl_op(op), (ncclComm_t)g->nccl_comm,
                                                 comm->state->stream));
        return mg__posted(comm, s, blocking);
    }
#endif
#ifdef MG_USE_MPI
    {
        int divisor = op == MG_AVG ? g->size : 1;
        if (dt == MG_F32 && !in_place) {
            MG__MPI_COLL(comm, s, blocking, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,
                         send, recv, (int)count, MPI_FLOAT, mg__mpi_op(op), mg__mpi(g));
            if (divisor != 1)
                mg__set_finish(comm, s, (const float *)recv, recv, MG_F32, count, divisor);
        } else {
            /* MPI's in-place reduce-scatter reads the receive buffer and writes chunk 0 — not
               NCCL's layout — so the chunk is reduced into scratch and copied on completion,
               leaving the other chunks of send untouched. 16-bit: widen all of send first. */
            float *acc = (float *)mg__slot_scratch(s, (size_t)count * sizeof(float) *
                                                      (dt == MG_F32 ? 1 : (size_t)g->size + 1));
            const float *src = (const float *)send;
            if (dt != MG_F32) {
                mg__comm_widen(comm, acc + count, send, dt, count * g->size);
                src = acc + count;
            }
            MG__MPI_COLL(comm, s, blocking, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,
                         src, acc, (int)count, MPI_FLOAT, mg__mpi_op(op), mg__mpi(g));
            mg__set_finish(comm, s, acc, recv, dt, count, divisor);
        }
    }
#endif
    return mg__posted(comm, s, blocking);
}

static mg_request mg__all_gather(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                 int64_t count, mg_dtype dt, int blocking) {
    const char *name = "all_gather";
    size_t chunk;
    int in_place;
    mg__request_slot *s;
    mg__coll_begin(comm, g, name, count, dt);
    mg__check_buffers(name, send, recv, count);
    chunk = (size_t)count * mg_dtype_size(dt);
    in_place = (const char *)send == (const char *)recv + (size_t)g->rank * chunk;
    mg__check_overlap(name, send, chunk, recv, chunk * (size_t)g->size, in_place);
    s = mg__coll_slot(comm, g, name, (uint64_t)(g->size - 1) * chunk * (uint64_t)g->size, recv,
                      send, chunk);
    if (!s) return mg__posted(comm, NULL, 0);
#ifdef __CUDACC__
    if (mg__comm_on_gpu(comm)) {
        MG__NCCL_COLL(comm, s, ncclAllGather(send, recv, (size_t)count, mg__nccl_type(dt),
                                             (ncclComm_t)g->nccl_comm, comm->state->stream));
        return mg__posted(comm, s, blocking);
    }
#endif
#ifdef MG_USE_MPI
    /* MPI_IN_PLACE takes this rank's chunk from where it would be received: NCCL's rule. */
    MG__MPI_COLL(comm, s, blocking, MPI_Allgather, MPI_Iallgather,
                 in_place ? MPI_IN_PLACE : send, (int)count, mg__mpi_type(dt), recv, (int)count,
                 mg__mpi_type(dt), mg__mpi(g));
#endif
    return mg__posted(comm, s, blocking);
}

static mg_request mg__broadcast(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                int64_t count, mg_dtype dt, int root, int blocking) {
    const char *name = "broadcast";
    size_t bytes;
    mg__request_slot *s;
    mg__coll_begin(comm, g, name, count, dt);
    if (root < 0 || root >= g->size)
        mg_fatal(__FILE__, __LINE__, "broadcast: root %d is not a rank of the %s group (size %d)",
                 root, g->name, g->size);
    mg__check_buffer(name, "recv", recv, count);
    if (g->rank == root) mg__check_buffer(name, "send (the root's)", send, count);
    bytes = (size_t)count * mg_dtype_size(dt);
    if (g->rank == root) mg__check_overlap(name, send, bytes, recv, bytes, send == recv);
    s = mg__coll_slot(comm, g, name, (uint64_t)(g->size - 1) * bytes, recv, send, bytes);
    if (!s) return mg__posted(comm, NULL, 0);
#ifdef __CUDACC__
    if (mg__comm_on_gpu(comm)) {
        MG__NCCL_COLL(comm, s, ncclBroadcast(send, recv, (size_t)count, mg__nccl_type(dt), root,
                                             (ncclComm_t)g->nccl_comm, comm->state->stream));
        return mg__posted(comm, s, blocking);
    }
#endif
#ifdef MG_USE_MPI
    if (g->rank == root) mg__comm_copy_local(comm, recv, send, bytes);   /* MPI's is in place */
    MG__MPI_COLL(comm, s, blocking, MPI_Bcast, MPI_Ibcast, recv, (int)count, mg__mpi_type(dt),
                 root, mg__mpi(g));
#endif
    return mg__posted(comm, s, blocking);
}

MGDEF void mg_all_reduce(mg_comm *comm, mg_group *g, const void *send, void *recv, int64_t count,
                         mg_dtype dt, mg_redop op) {
    mg__all_reduce(comm, g, send, recv, count, dt, op, 1);
}
MGDEF mg_request mg_iall_reduce(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                int64_t count, mg_dtype dt, mg_redop op) {
    return mg__all_reduce(comm, g, send, recv, count, dt, op, 0);
}
MGDEF void mg_reduce_scatter(mg_comm *comm, mg_group *g, const void *send, void *recv,
                             int64_t count, mg_dtype dt, mg_redop op) {
    mg__reduce_scatter(comm, g, send, recv, count, dt, op, 1);
}
MGDEF mg_request mg_ireduce_scatter(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                    int64_t count, mg_dtype dt, mg_redop op) {
    return mg__reduce_scatter(comm, g, send, recv, count, dt, op, 0);
}
MGDEF void mg_all_gather(mg_comm *comm, mg_group *g, const void *send, void *recv, int64_t count,
                         mg_dtype dt) {
    mg__all_gather(comm, g, send, recv, count, dt, 1);
}
MGDEF mg_request mg_iall_gather(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                int64_t count, mg_dtype dt) {
    return mg__all_gather(comm, g, send, recv, count, dt, 0);
}
MGDEF void mg_broadcast(mg_comm *comm, mg_group *g, const void *send, void *recv, int64_t count,
                        mg_dtype dt, int root) {
    mg__broadcast(comm, g, send, recv, count, dt, root, 1);
}
MGDEF mg_request mg_ibroadcast(mg_comm *comm, mg_group *g, const void *send, void *recv,
                               int64_t count, mg_dtype dt, int root) {
    return mg__broadcast(comm, g, send, recv, count, dt, root, 0);
}

MGDEF void mg_barrier(mg_comm *comm, mg_group *g) {
    mg__request_slot *s;
    mg__coll_begin(comm, g, "barrier", 0, MG_F32);
    if (g->size == 1) { mg__posted(comm, NULL, 0); return; }
    s = mg__slot_new(comm, "barrier", g);
#ifdef MG_USE_MPI
    MG__MPI_COLL(comm, s, 1, MPI_Barrier, MPI_Ibarrier, mg__mpi(g));
#endif
    mg__posted(comm, s, 1);
}

/* ---------------------------------------------------------------------------------------------
   4. Point-to-point
   ------------------------------------------------------------------------------------------ */
MGDEF void mg_group_start(mg_comm *comm) {
    struct mg_comm_state *st = comm->state;
    if (st->group_depth++ > 0) return;
    st->group_slot = -1;   /* taken by the first send/recv */
#ifdef __CUDACC__
    st->group_on_gpu = mg__comm_on_gpu(comm);
    if (st->group_on_gpu) MG__NCCL_CHECK(ncclGroupStart());
#endif
}

/* Posts one send or receive into slot s (a group's slot, or its own).                        */
static void mg__post_p2p(mg_comm *comm, mg__request_slot *s, mg_group *g, int is_send,
                         void *buf, int64_t count, mg_dtype dt, int peer) {
    (void)comm;
#ifdef __CUDACC__
    if (mg__comm_on_gpu(comm)) {
        if (is_send)
            MG__NCCL_CHECK(ncclSend(buf, (size_t)count, mg__nccl_type(dt), peer,
                                    (ncclComm_t)g->nccl_comm, comm->state->stream));
        else
            MG__NCCL_CHECK(ncclRecv(buf, (size_t)count, mg__nccl_type(dt), peer,
                                    (ncclComm_t)g->nccl_comm, comm->state->stream));
        return;
    }
#endif
#ifdef MG_USE_MPI
    if (is_send)
        MG__MPI_CHECK(MPI_Isend(buf, (int)count, mg__mpi_type(dt), peer, 0, mg__mpi(g),
                                mg__slot_add_mpi(s)));
    else
        MG__MPI_CHECK(MPI_Irecv(buf, (int)count, mg__mpi_type(dt), peer, 0, mg__mpi(g),
                                mg__slot_add_mpi(s)));
#else
    if (s->n_self == s->cap_self) {
        int cap = s->cap_self ? 2 * s->cap_self : 4;
        struct mg__self_msg *grown =
            (struct mg__self_msg *)MG_MALLOC(sizeof(struct mg__self_msg) * (size_t)cap);
        if (s->n_self) memcpy(grown, s->self_msgs, sizeof(struct mg__self_msg) * (size_t)s->n_self);
        MG_FREE(s->self_msgs);
        s->self_msgs = grown;
        s->cap_self = cap;
    }
    s->self_msgs[s->n_self].is_send = is_send;
    s->self_msgs[s->n_self].buf = buf;
    s->self_msgs[s->n_self].bytes = (size_t)count * mg_dtype_size(dt);
    s->n_self++;
    (void)g; (void)peer;
#endif
}

#ifndef MG_USE_MPI
/* Without MPI: the k-th send to self feeds the k-th receive from self.                       */
static void mg__match_self(mg_comm *comm, mg__request_slot *s) {
    int next_send = 0;
    for (int i = 0; i < s->n_self; i++) {
        struct mg__self_msg *r = &s->self_msgs[i];
        if (r->is_send) continue;
        while (next_send < s->n_self && !s->self_msgs[next_send].is_send) next_send++;
        if (next_send == s->n_self)
            mg_fatal(__FILE__, __LINE__, "a receive from self has no matching send in the group");
        if (s->self_msgs[next_send].bytes != r->bytes)
            mg_fatal(__FILE__, __LINE__, "send/recv to self: %zu bytes sent, %zu expected",
                     s->self_msgs[next_send].bytes, r->bytes);
        mg__comm_copy_local(comm, r->buf, s->self_msgs[next_send].buf, r->bytes);
        next_send++;
    }
    for (; next_send < s->n_self; next_send++)
        if (s->self_msgs[next_send].is_send)
            mg_fatal(__FILE__, __LINE__, "a send to self has no matching receive in the group");
}
#endif

static mg_request mg__p2p(mg_comm *comm, mg_group *g, int is_send, void *buf, int64_t count,
                          mg_dtype dt, int peer, int blocking) {
    const char *name = is_send ? "send" : "recv";
    struct mg_comm_state *st = comm->state;
    mg__request_slot *s;
    mg__comm_check_op(comm, g, name, count, dt);
    mg__check_buffer(name, is_send ? "send" : "recv", buf, count);
    if (peer < 0 || peer >= g->size)
        mg_fatal(__FILE__, __LINE__, "%s: peer %d is not a rank of the %s group (size %d)", name,
                 peer, g->name, g->size);
    if (is_send) comm->bytes_sent[g->kind] += (uint64_t)count * mg_dtype_size(dt);
    if (st->group_depth) {
        if (!blocking)
            mg_fatal(__FILE__, __LINE__, "mg_i%s inside mg_group_start/end: use mg_%s there and "
                     "mg_group_end_async for a request", name, name);
        if (st->group_slot < 0) st->group_slot = (int)(mg__slot_new(comm, "grouped send/recv", g)
                                                       - st->slots);
        s = &st->slots[st->group_slot];
        s->group = g;   /* the watchdog names the last group used */
        mg__post_p2p(comm, s, g, is_send, buf, count, dt, peer);
        return mg__posted(comm, NULL, 0);
    }
#ifndef MG_USE_MPI
#ifdef __CUDACC__
    if (!mg__comm_on_gpu(comm))
#endif
        mg_fatal(__FILE__, __LINE__, "%s outside mg_group_start/end without MPI: the only peer "
                 "is this rank, and a lone %s to itself never completes", name, name);
#endif
    s = mg__slot_new(comm, name, g);
#ifdef __CUDACC__
    if (mg__comm_on_gpu(comm)) { mg__comm_gpu_begin(comm); MG__NCCL_CHECK(ncclGroupStart()); }
#endif
    mg__post_p2p(comm, s, g, is_send, buf, count, dt, peer);   /* its own NCCL group on GPU */
#ifdef __CUDACC__
    if (mg__comm_on_gpu(comm)) { MG__NCCL_CHECK(ncclGroupEnd()); mg__comm_gpu_end(comm, s); }
#endif
    return mg__posted(comm, s, blocking);
}

MGDEF void mg_send(mg_comm *comm, mg_group *g, const void *buf, int64_t count, mg_dtype dt,
                   int peer) {
    mg__p2p(comm, g, 1, (void *)buf, count, dt, peer, 1);
}
MGDEF void mg_recv(mg_comm *comm, mg_group *g, void *buf, int64_t count, mg_dtype dt, int peer) {
    mg__p2p(comm, g, 0, buf, count, dt, peer, 1);
}
MGDEF mg_request mg_isend(mg_comm *comm, mg_group *g, const void *buf, int64_t count,
                          mg_dtype dt, int peer) {
    return mg__p2p(comm, g, 1, (void *)buf, count, dt, peer, 0);
}
MGDEF mg_request mg_irecv(mg_comm *comm, mg_group *g, void *buf, int64_t count, mg_dtype dt,
                          int peer) {
    return mg__p2p(comm, g, 0, buf, count, dt, peer, 0);
}

static mg_request mg__group_end(mg_comm *comm, int blocking) {
    struct mg_comm_state *st = comm->state;
    mg__request_slot *s;
    if (st->group_depth <= 0)
        mg_fatal(__FILE__, __LINE__, "mg_group_end without mg_group_start");
    if (--st->group_depth > 0) return mg__posted(comm, NULL, 0);
#ifdef __CUDACC__
    /* NCCL enqueues the group's kernels at ncclGroupEnd: order them after all the compute
       queued until now (the sends may read what was computed after mg_group_start).        */
    if (st->group_on_gpu) { mg__comm_gpu_begin(comm); MG__NCCL_CHECK(ncclGroupEnd()); }
#endif
    if (st->group_slot < 0) return mg__posted(comm, NULL, 0);   /* an empty group */
    s = &st->slots[st->group_slot];
    st->group_slot = -1;
    s->t_post = mg__comm_now();
#ifdef __CUDACC__
    if (st->group_on_gpu) mg__comm_gpu_end(comm, s);
#endif
#ifndef MG_USE_MPI
#ifdef __CUDACC__
    if (!st->group_on_gpu)
#endif
        mg__match_self(comm, s);
#endif
    mg__op_begin(comm, s->op, s->group);
    return mg__posted(comm, s, blocking);
}
MGDEF mg_request mg_group_end_async(mg_comm *comm) { return mg__group_end(comm, 0); }
MGDEF void mg_group_end(mg_comm *comm) { mg__group_end(comm, 1); }

MGDEF void mg_comm_reset_traffic(mg_comm *comm) {
    for (int k = 0; k < MG_GROUP_KINDS; k++) comm->bytes_sent[k] = 0;
}

MGDEF void *mg_comm_stream(mg_comm *comm) {
#ifdef __CUDACC__
    if (comm && comm->state && comm->state->stream && mg__comm_on_gpu(comm)) {
        mg__comm_gpu_begin(comm);
        return (void *)comm->state->stream;
    }
#endif
    (void)comm;
    return NULL;
}

#endif /* MG_COMM_IMPLEMENTED */
#endif /* MG_IMPLEMENTATION */

/*
MIT License — Copyright (c) 2025 the megatron.h authors. See LICENSE for the full text.
*/
