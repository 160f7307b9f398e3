/* mg_comm.h — world bootstrap, process groups (Megatron's order), collectives and point-to-point.
   MPI on the CPU, NCCL on the GPU (unique id broadcast over MPI). Part of megatron.h.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_comm.h"          (includes mg_tensor.h)
   Build with MPI (mpicc, or -DMG_USE_MPI with MPI's include/lib flags) for several ranks; a
   build without MPI (MG_USE_MPI undefined) runs exactly one rank with the same API.

   TOUR
     1. World: mg_comm_init / mg_comm_finalize, world rank/size, local rank (shared-memory split),
        threads per rank (cores of the node / ranks on the node).
     2. Topology: t, p, d, v; rank = tp + t·(dp + d·pp) (tensor-parallel fastest); the tensor,
        data, pipeline and embedding groups, with rank/size accessors and a printable layout.
     3. Collectives with NCCL's semantics (counts are per rank; in place when send == recv, and
        for all-gather/reduce-scatter the in-place slot is this rank's chunk): all-reduce,
        reduce-scatter, all-gather, broadcast; sum / max / avg; fp32 and bf16 (bf16 sums
        accumulate in fp32 on the CPU).
     4. Point-to-point: grouped send/recv (mg_group_start/end) so matched pairs never deadlock.
     5. Nonblocking variants returning an mg_request with wait/test (MPI request / CUDA event).
     6. Failure: every MPI/NCCL/CUDA error and every timeout (the watchdog, --comm-timeout) ends
        the whole job with rank, call, group, file and line.
     7. Traffic counters: bytes each rank sent per group kind (tests check the paper's volumes).
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
    MG_GROUP_KINDS
} mg_group_kind;

typedef struct mg_group {
    mg_group_kind kind;
    int rank, size;        /* this process's rank in the group, the group's size              */
    int *world_ranks;      /* size entries: world rank of each member, in group order        */
    void *mpi_comm;        /* MPI_Comm* (CPU path; also used to bootstrap NCCL)              */
    void *nccl_comm;       /* ncclComm_t (GPU path)                                           */
    const char *name;      /* "tensor", "data", "pipeline", "embedding", "world"              */
} mg_group;

typedef struct mg_topology {
    int t, p, d, v;        /* tensor, pipeline, data parallel sizes; virtual stages per rank  */
    int tp_rank, pp_rank, dp_rank;
} mg_topology;

typedef struct mg_comm {
    int world_rank, world_size;
    int local_rank, local_size;       /* within the node (MPI shared-memory split)             */
    mg_ctx *ctx;                      /* device the buffers live on: CPU -> MPI, CUDA -> NCCL   */
    mg_topology topo;
    mg_group world, tensor, data, pipeline, embedding; /* embedding: first and last stage;
                                                          size 1 when p == 1               */
    double timeout_s;                 /* watchdog: --comm-timeout (default 600)               */
    uint64_t bytes_sent[MG_GROUP_KINDS]; /* traffic counters, see 7                            */
} mg_comm;

/* 1. World. mg_comm_init calls MPI_Init (when built with MPI) and fills world/local ranks;
      argc/argv may be NULL. It installs an mg_fatal handler that aborts the whole job.
      mg_comm_default_threads: cores of the node / ranks on the node (at least 1).           */
MGDEF void mg_comm_init(mg_comm *comm, int *argc, char ***argv);
MGDEF void mg_comm_finalize(mg_comm *comm);
MGDEF int mg_comm_default_threads(const mg_comm *comm);
/* Abort every rank of the job (MPI_Abort / ncclCommAbort) after printing the message with
   this rank's number. Never returns.                                                         */
MGDEF void mg_comm_abort(mg_comm *comm, const char *file, int line, const char *fmt, ...);

/* 2. Topology. Validates t·p divides the world size (and v ≥ 1) WITHOUT communicating:
      returns 0 on success, or -1 with a one-line reason in err. Then mg_comm_setup_groups
      (collective over the world) builds the groups on ctx's device (NCCL on CUDA).          */
MGDEF int mg_topology_validate(int world_size, int t, int p, int v, char *err, size_t errlen);
MGDEF void mg_comm_setup_groups(mg_comm *comm, mg_ctx *ctx, int t, int p, int v);
MGDEF int mg_topology_world_rank(const mg_topology *topo, int tp, int dp, int pp);
/* Write a printable description of the layout: one line per rank with its (tp, dp, pp)
   coordinates and group members. Returns the number of characters written.                 */
MGDEF int mg_topology_describe(const mg_comm *comm, char *buf, size_t buflen);

/* 3. Collectives, blocking. count = elements per rank (NCCL's rule):
      all_reduce:     send/recv count elements each; in place when send == recv.
      reduce_scatter: send holds count·size, recv count (chunk `rank`); in place when
                      recv == send + rank·count.
      all_gather:     send count, recv count·size; in place when send == recv + rank·count.
      broadcast:      count elements from group rank root; in place when send == recv.     */
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
      only posted; mg_group_end completes them all together (MPI_Waitall / ncclGroupEnd), so
      any order of matched pairs is deadlock-free. Outside a group each call is blocking.
      peer is a rank of group g.                                                              */
MGDEF void mg_group_start(mg_comm *comm);
MGDEF void mg_group_end(mg_comm *comm);
MGDEF void mg_send(mg_comm *comm, mg_group *g, const void *buf, int64_t count, mg_dtype dt,
                   int peer);
MGDEF void mg_recv(mg_comm *comm, mg_group *g, void *buf, int64_t count, mg_dtype dt, int peer);

/* 5. Nonblocking. Each returns a handle; mg_wait blocks (subject to the watchdog), mg_test
      returns 1 when complete. At most MG_MAX_REQUESTS outstanding per rank.                 */
#define MG_MAX_REQUESTS 256
typedef struct mg_request { int id; } mg_request;
MGDEF mg_request mg_iall_reduce(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                int64_t count, mg_dtype dt, mg_redop op);
MGDEF mg_request mg_ireduce_scatter(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                    int64_t count, mg_dtype dt, mg_redop op);
MGDEF mg_request mg_iall_gather(mg_comm *comm, mg_group *g, const void *send, void *recv,
                                int64_t count, mg_dtype dt);
MGDEF mg_request mg_isend(mg_comm *comm, mg_group *g, const void *buf, int64_t count,
                          mg_dtype dt, int peer);
MGDEF mg_request mg_irecv(mg_comm *comm, mg_group *g, void *buf, int64_t count, mg_dtype dt,
                          int peer);
MGDEF void mg_wait(mg_comm *comm, mg_request *req);
MGDEF int mg_test(mg_comm *comm, mg_request *req);

/* 7. Traffic counters: bytes this rank sent, per group kind, counted as the algorithm an
      implementation is assumed to use (ring all-reduce: 2·(n-1)/n·bytes; reduce-scatter and
      all-gather: (n-1)/n·bytes of the full buffer; send: bytes). Reset with mg_comm_reset_traffic. */
MGDEF void mg_comm_reset_traffic(mg_comm *comm);

#ifdef __cplusplus
}
#endif
#endif /* MG_COMM_H */

#ifdef MG_IMPLEMENTATION
#ifndef MG_COMM_IMPLEMENTED
#define MG_COMM_IMPLEMENTED
/* (to be written) */
#endif
#endif
