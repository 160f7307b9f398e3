/* mg_tensor.h — memory, tensors and every math op of a GPT layer, forward and backward,
   on a CPU backend (OpenBLAS + OpenMP) and a CUDA backend (cuBLAS + kernels).
   Part of megatron.h. Public domain-style MIT license at the end of the file.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_tensor.h"
   Every other file includes it without the define. Define MG_STATIC as well to make every
   function static (private to that translation unit). MG_IMPLEMENTATION_ELSEWHERE (every
   header; megatron.h says when) leaves the implementation out even where it is defined.

   TOUR
     1. Configuration macros: MGDEF, MG_HD, MG_ASSERT, MG_MALLOC/MG_FREE; MG_CUDA_DEBUG (wait
        for every CUDA kernel at its launch, so a fault names the kernel's launch site).
     2. Context: the device (CPU or CUDA), the arena allocator with its high-water mark, the BLAS /
        cuBLAS handle and the stream. Nothing allocates inside a training step: buffers come from
        the arena, set up once.
     3. Tensors: a data pointer (device memory on CUDA), a storage dtype (fp32, bf16, fp16) and a
        row-major shape of up to 4 dims. Every op accumulates in fp32 whatever the storage.
        Two-pass allocation (mg_claim): count the bytes a sequence of tensors needs, then take
        them from the arena with the same code.
     4. The GEMM seam: BLAS column-major arguments, passed unchanged to the CPU's sgemm (its own
        packed AVX-512 kernel where built for AVX-512, else cblas_sgemm) or cublasGemmEx /
        cublasGemmStridedBatchedEx (CUDA). All row-major reasoning lives above it.
     5. Ops, each forward beside its backward, shapes stated once per op:
        embedding · layernorm / RMSNorm (zero-centred or not) · linear (forward, backward-input,
        backward-weight; linear + activation fused, forward and backward) · the MLP activations
        (GELU's tanh approximation, the exact GELU, the squared ReLU) ·
        causal attention core · residual add / scale / axpy · dropout · casts ·
        vocabulary-slice softmax cross-entropy (three steps, or one pass) · the fused, chunked
        classifier (output layer + cross-entropy + their backward, never the full logits) ·
        AdamW · sum of squares.
     6. Implementation (under MG_IMPLEMENTATION): 6a errors, context, arena, copies · 6b dtypes
        and tensors · 6c the shared per-element/per-row math (MG_HD functions: exp, the
        activations, layernorm, softmax gradient, cross-entropy, dropout test, AdamW) · 6d the
        CPU backend (OpenMP over rows/chunks/column blocks, `omp simd` inner loops, the packed
        sgemm or OpenBLAS) · 6e the CUDA
        backend (kernels specialised by dtype, then launchers; one pair of block-reduction
        helpers; the tiled attention's 32-row and, for head dims 64 and 128 on tensor cores,
        64-row kernels; the two-pass column sums; the embedding backward's sort of the rows by
        token; cuBLASLt plans for the linear layers' bias epilogue) · 6f the public
        ops: shape/dtype validation and the row-major reasoning, shared, then the dispatch on
        ctx->device.
     The inline MG_HD functions of the API (16-bit conversions, mg_load/mg_store, the Philox
     generator) are defined right after the API, since every translation unit needs them.

   CONVENTIONS
     - Activations are laid out sequence-major, [T, B, C] (Megatron's [s, b, h]): row r = t*B + b.
       A sequence-parallel shard is then a contiguous block of rows. All row-wise ops see N = T*B
       rows and do not care.
     - Linear weights are (out_features, in_features), row-major, as in PyTorch and llm.c:
       y = x · Wᵀ + b.
     - Gradient convention (as llm.c): parameter gradients ACCUMULATE (+=) so microbatches add up;
       activation gradients OVERWRITE unless an op says otherwise.
     - Pointers inside tensors are device pointers when the context is CUDA. Host<->device copies
       go through mg_copy_to_device / mg_copy_to_host (plain memcpy on the CPU).
*/
#ifndef MG_TENSOR_H
#define MG_TENSOR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
   1. Configuration
   ------------------------------------------------------------------------------------------ */
#ifndef MGDEF
#if defined(MG_STATIC) && defined(__GNUC__)
#define MGDEF static __attribute__((unused)) /* a program may use only some of the API */
#elif defined(MG_STATIC)
#define MGDEF static
#else
#define MGDEF extern
#endif
#endif

#ifdef __CUDACC__
#define MG_HD __host__ __device__
#else
#define MG_HD
#endif

/* Every kernel launch goes through MG_LAUNCH(kernel, grid, block, shared_bytes, stream, args…):
   with nvcc it is kernel<<<grid, block, shared_bytes, stream>>>(args…). A CUDA emulator that
   runs kernels on the host (tests/cuda_emu) defines MG_LAUNCH in its cuda_runtime.h first.  */
#if defined(__CUDACC__) && !defined(MG_LAUNCH)
#define MG_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
    kernel<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__)
#endif

#if defined(MG_MALLOC) != defined(MG_FREE)
#error "define both MG_MALLOC and MG_FREE, or neither"
#endif
#ifndef MG_MALLOC
#include <stdlib.h>
#define MG_MALLOC(sz) malloc(sz)
#define MG_FREE(p) free(p)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Fatal-error hook: every failed check (bad shape, failed CUDA/cuBLAS call, arena exhausted)
   goes through mg_fatal, which calls the settable handler; if there is none, or it returns,
   mg_fatal prints one line "file:line: msg" to stderr and exits with status 1. mg_comm.h
   installs a handler that aborts the whole job; a test may longjmp out of its handler.     */
typedef void (*mg_fatal_fn)(const char *file, int line, const char *msg);
MGDEF void mg_set_fatal_handler(mg_fatal_fn fn);
#if defined(__GNUC__) || defined(__clang__)
#define MG_NORETURN __attribute__((noreturn))
#define MG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MG_NORETURN
#define MG_PRINTF(f, a)
#endif
MGDEF MG_NORETURN void mg_fatal(const char *file, int line, const char *fmt, ...) MG_PRINTF(3, 4);
#define MG_ASSERT(cond, ...) do { if (!(cond)) mg_fatal(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#ifdef __CUDACC__
/* Every CUDA / cuBLAS call is checked; a failure names the call, file and line (for programs
   too: bench/gpu.cu checks its events with it).                                            */
#define MG_CUDA_CHECK(call) do { cudaError_t mg__e = (call); if (mg__e != cudaSuccess) \
    mg_fatal(__FILE__, __LINE__, "CUDA error %s (%s) in %s", cudaGetErrorName(mg__e), \
             cudaGetErrorString(mg__e), #call); } while (0)
#define MG_CUBLAS_CHECK(call) do { cublasStatus_t mg__s = (call); \
    if (mg__s != CUBLAS_STATUS_SUCCESS) mg_fatal(__FILE__, __LINE__, "cuBLAS error %s in %s", \
             cublasGetStatusString(mg__s), #call); } while (0)
#endif

/* ---------------------------------------------------------------------------------------------
   2. Context
   ------------------------------------------------------------------------------------------ */
typedef enum { MG_DEVICE_AUTO = 0, MG_DEVICE_CPU = 1, MG_DEVICE_CUDA = 2 } mg_device;
/* CUDA: the newest family of tiled-attention kernels a context may run (each call takes the
   newest that applies to its dtypes and head dim, up to this one). MMA: the 64-row mma.sync
   kernels (16-bit q, k, v and output alike, head dim 64 or 128), else WMMA; WMMA: the 32-row
   tensor-core kernels (the same dtypes, head dim a multiple of 16), else SIMT; SIMT: the
   CUDA-core kernels (any dtypes and head dim); AUTO counts as MMA. Every family computes the
   CPU twin's function; the choice changes speed and the last bits. Ignored on the CPU.   */
typedef enum {
    MG_ATTN_KERNELS_AUTO = 0, MG_ATTN_KERNELS_MMA = 1, MG_ATTN_KERNELS_WMMA = 2,
    MG_ATTN_KERNELS_SIMT = 3
} mg_attn_kernels;

typedef struct mg_ctx_desc {
    mg_device device;     /* AUTO: the environment variable MG_DEVICE=cpu|cuda|auto if set, else
                             CUDA when compiled by nvcc and a GPU answers, else CPU            */
    int cuda_device;      /* CUDA device ordinal (mg_comm picks it from the local rank)          */
    int n_threads;        /* CPU threads (OpenMP; OpenBLAS runs single-threaded inside them);
                             0 = omp_get_max_threads()                                         */
    size_t arena_bytes;   /* size of the one arena; every mg_alloc comes from it                  */
} mg_ctx_desc;

typedef struct mg_ctx {
    mg_device device;     /* resolved: MG_DEVICE_CPU or MG_DEVICE_CUDA                           */
    int n_threads;
    char *arena;          /* base of the arena (device memory on CUDA)                          */
    size_t arena_size, arena_used, arena_peak;
    void *blas;           /* cublasHandle_t on CUDA; unused on CPU                              */
    void *stream;         /* cudaStream_t on CUDA; unused on CPU                                */
    void *blas_workspace; /* CUDA: cuBLAS's workspace, allocated here (cublasSetWorkspace) so
                             that it is counted; blas_workspace_size bytes. cuBLASLt's matmuls
                             use it too (same stream: never at the same time)              */
    size_t blas_workspace_size;
    float *cpu_gemm_pack; /* CPU built for AVX-512: the packed sgemm's per-thread packing areas
                             (n_threads × 372 KiB); NULL where OpenBLAS runs the CPU's GEMMs.
                             The BLAS's own working memory, as OpenBLAS's buffers are: not in
                             mg_ctx_memory, which counts the arena and cuBLAS's workspace      */
    void *blaslt;         /* CUDA: the cuBLASLt handle and the per-shape plans of the fused
                             linear layers (mg__lt_state); NULL on CPU                        */
    size_t *blocks;       /* arena offsets of the live mg_alloc blocks, in order (a stack:
                             release pops those at or above the mark); n_blocks of cap_blocks */
    int64_t n_blocks, cap_blocks;
    mg_attn_kernels attn_kernels;   /* MMA, WMMA or SIMT: from the environment variable
                                       MG_ATTN_KERNELS=mma|wmma|simt|auto at mg_ctx_init (unset
                                       or auto: MMA, the newest); a program may change it
                                       between calls (bench/gpu times each family)           */
} mg_ctx;

MGDEF void mg_ctx_init(mg_ctx *ctx, const mg_ctx_desc *desc);
/* The environment variables mg_ctx_init would read for desc (NULL: all of them): MG_DEVICE
   where desc->device is AUTO, and MG_ATTN_KERNELS. 0 when they are unset or valid; else -1
   and one line in err ("MG_DEVICE=gpu: expected cpu, cuda or auto"), which mg_ctx_init
   would stop with — for a program that checks its setup before any communication (gpt_train
   does).                                                                                   */
MGDEF int mg_ctx_env_check(const mg_ctx_desc *desc, char *err, size_t errlen);
/* Frees what the context holds and zeroes it: an mg_alloc from it afterwards fails with one
   line; tensors taken from it before are dangling (nothing records which context they came
   from, so ops on them cannot tell).                                                        */
MGDEF void mg_ctx_free(mg_ctx *ctx);
/* What the context holds, in the terms of torch.cuda.memory_stats() (device memory on CUDA,
   host memory on the CPU): reserved = every allocation the context made (the arena, and on
   CUDA the cuBLAS workspace); allocated = the arena's bytes in use + the workspace;
   max_allocated = the arena's high-water mark + the workspace; allocations = the live
   mg_alloc blocks + the workspace. Memory that CUDA, cuBLAS's handle or NCCL allocate for
   themselves is not the library's and is not counted (mg_device_memory_used sees it).      */
typedef struct mg_memory_stats {
    size_t reserved, allocated, max_allocated;
    int64_t allocations;
} mg_memory_stats;
MGDEF mg_memory_stats mg_ctx_memory(const mg_ctx *ctx);
/* CUDA: the device's memory in use by every process and the driver (cudaMemGetInfo's total −
   free), bytes; 0 on the CPU.                                                              */
MGDEF size_t mg_device_memory_used(const mg_ctx *ctx);
MGDEF const char *mg_device_name(const mg_ctx *ctx);     /* "cpu" or "cuda:<name>"           */
MGDEF int mg_cuda_available(void);                        /* 0 when not built by nvcc          */

/* Arena: bump allocator, 256-byte aligned. mark/release give scoped scratch; arena_peak is the
   high-water mark (used by bench/memory). mg_alloc fails through mg_fatal when exhausted.
   Ops take temporary scratch from the arena (released before they return) in three cases:
   16-bit tensors on the CPU (fp32 copies of operands / per-thread rows), attention dropout
   (the dropped probabilities, att-sized) and the partial sums of mg_sumsq on CUDA and of
   mg_sumsq_begin (8 bytes a slot, at most 8 KiB a piece). Leave room for it.               */
MGDEF void *mg_alloc(mg_ctx *ctx, size_t bytes);
MGDEF size_t mg_arena_mark(const mg_ctx *ctx);
MGDEF void mg_arena_release(mg_ctx *ctx, size_t mark);
MGDEF void mg_arena_reset_peak(mg_ctx *ctx);

MGDEF void mg_copy_to_device(mg_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes);
MGDEF void mg_copy_to_host(mg_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes);
/* dev->dev; the two ranges must be equal or disjoint (cudaMemcpy's rule, checked).          */
MGDEF void mg_copy(mg_ctx *ctx, void *dst_dev, const void *src_dev, size_t bytes);
MGDEF void mg_memset_zero(mg_ctx *ctx, void *dst_dev, size_t bytes);
/* dev->dev strided copy (cudaMemcpy2DAsync's arguments): `rows` rows of `width` bytes, row r
   from src + r·spitch to dst + r·dpitch (pitches >= width; the regions must not overlap).
   Context parallelism packs the key/value columns of qkv with it.                           */
MGDEF void mg_copy_2d(mg_ctx *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                      size_t width, size_t rows);
MGDEF void mg_sync(mg_ctx *ctx);                          /* wait for the stream (no-op CPU)  */
/* CUDA graphs (a CUDA context only; on the CPU each call fails with one line). Between
   mg_graph_capture_begin and mg_graph_capture_end the context's stream captures
   (cudaStreamBeginCapture, thread-local mode): the library calls made meanwhile are recorded,
   not run — their kernels with the arguments they have then (pointers, sizes, scalars);
   mg_graph_capture_end instantiates the graph (cudaStreamEndCapture, cudaGraphInstantiate),
   mg_graph_launch runs it on the stream (cudaGraphLaunch), as often as wanted. A capture may
   hold kernels, device-to-device copies and memsets: nothing that waits for the device, copies
   from or to the host, or calls cuBLAS/NCCL outside what the graph can hold. Values a graph
   must see change between launches have to live in device memory (the optimizer's
   mg_adamw_args do). Arena scratch that captured kernels use must stay reserved while the
   graph lives.                                                                            */
typedef struct mg_graph { void *graph, *exec; } mg_graph;
MGDEF void mg_graph_capture_begin(mg_ctx *ctx);
MGDEF void mg_graph_capture_end(mg_ctx *ctx, mg_graph *g);
MGDEF void mg_graph_launch(mg_ctx *ctx, const mg_graph *g);
MGDEF void mg_graph_free(mg_graph *g);

/* ---------------------------------------------------------------------------------------------
   3. Tensors
   ------------------------------------------------------------------------------------------ */
typedef enum { MG_F32 = 0, MG_BF16 = 1, MG_F16 = 2 } mg_dtype;

typedef struct mg_tensor {
    void *data;           /* device pointer on CUDA                                             */
    mg_dtype dtype;
    int ndim;
    int64_t shape[4];     /* row-major, contiguous                                              */
} mg_tensor;

MGDEF size_t mg_dtype_size(mg_dtype dt);
MGDEF const char *mg_dtype_name(mg_dtype dt);
MGDEF int64_t mg_numel(const mg_tensor *t);
MGDEF size_t mg_nbytes(const mg_tensor *t);
/* Allocate from the arena (contents undefined). */
MGDEF mg_tensor mg_tensor_new(mg_ctx *ctx, mg_dtype dt, int ndim, const int64_t *shape);
MGDEF mg_tensor mg_tensor_2d(mg_ctx *ctx, mg_dtype dt, int64_t rows, int64_t cols);
/* Wrap existing memory (no allocation). */
MGDEF mg_tensor mg_tensor_wrap(void *data, mg_dtype dt, int ndim, const int64_t *shape);
/* Rows [r0, r0+n) of a tensor viewed as (shape[0], rest): a view sharing memory. */
MGDEF mg_tensor mg_tensor_rows(const mg_tensor *t, int64_t r0, int64_t n);
/* Two-pass allocation: a sequence of claims on an mg_claim with ctx NULL only counts the bytes
   (each rounded to the arena's alignment) that the same sequence takes from ctx's arena when
   ctx is set, so a size computed by the first pass is exact by construction (mg_gpt_arena_bytes
   runs the model's allocation code once each way). Tensors are contiguous; a rank of 2, 3 or 4
   follows from the trailing zero dimensions (d2 = d3 = 0: [d0, d1]).                         */
typedef struct mg_claim { mg_ctx *ctx; size_t bytes; } mg_claim;
MGDEF void *mg_claim_bytes(mg_claim *c, size_t bytes);
MGDEF float *mg_claim_f32(mg_claim *c, int64_t n);
MGDEF mg_tensor mg_claim_tensor(mg_claim *c, mg_dtype dt, int64_t d0, int64_t d1, int64_t d2,
                                int64_t d3);
/* rows = product of all dims but the last; cols = last dim. */
MGDEF int64_t mg_rows(const mg_tensor *t);
MGDEF int64_t mg_cols(const mg_tensor *t);

/* fp32 <-> 16-bit conversion, round-to-nearest-even; shared by host and device code. */
MG_HD static inline uint16_t mg_f32_to_bf16(float f);
MG_HD static inline float mg_bf16_to_f32(uint16_t h);
MG_HD static inline uint16_t mg_f32_to_f16(float f);
MG_HD static inline float mg_f16_to_f32(uint16_t h);
/* Load/store element i of storage of any dtype as fp32 (round-to-nearest-even on store). */
MG_HD static inline float mg_load(const void *p, mg_dtype dt, int64_t i);
MG_HD static inline void mg_store(void *p, mg_dtype dt, int64_t i, float v);

/* ---------------------------------------------------------------------------------------------
   4. The GEMM seam (column-major BLAS arguments)
      C(m×n) = alpha · op(A)(m×k) · op(B)(k×n) + beta · C, with op(X) = X or Xᵀ.
      A, B may be fp32, bf16 or fp16 (both the same dtype); C is that dtype or fp32 (what
      cuBLAS accepts with CUBLAS_COMPUTE_32F; both backends reject other combinations); compute
      is fp32. transa/transb: 0 = N, nonzero = T. k = 0 gives C = β·C (C = 0 when β = 0, C
      not read), as in BLAS.
      CPU: the packed AVX-512 sgemm of 6d, or cblas_sgemm(CblasColMajor, ...) where the build
      has no AVX-512 or C is under 16 columns; 16-bit inputs are widened to fp32 in arena scratch
      first (the products are exact in fp32, as with cuBLAS's fp32 compute; a 16-bit C is
      computed in fp32 and rounded once). CUDA: cublasGemmEx / cublasGemmStridedBatchedEx with
      CUBLAS_COMPUTE_32F, the very same arguments (the handle's reductions kept in fp32, no
      TF32). Batched CPU GEMMs run OpenMP over the batch; a single large one is split over
      threads by blocks of C.
   ------------------------------------------------------------------------------------------ */
MGDEF void mg_gemm(mg_ctx *ctx, int transa, int transb, int m, int n, int k, float alpha,
                   const void *A, mg_dtype a_dt, int lda, const void *B, mg_dtype b_dt, int ldb,
                   float beta, void *C, mg_dtype c_dt, int ldc);
/* batch GEMMs, the i-th on A + i*strideA, B + i*strideB, C + i*strideC (strides in elements). */
MGDEF void mg_gemm_strided_batched(mg_ctx *ctx, int transa, int transb, int m, int n, int k,
                   float alpha, const void *A, mg_dtype a_dt, int lda, int64_t strideA,
                   const void *B, mg_dtype b_dt, int ldb, int64_t strideB, float beta,
                   void *C, mg_dtype c_dt, int ldc, int64_t strideC, int batch);

/* ---------------------------------------------------------------------------------------------
   5. Ops. N = rows (T*B), C = channels. "dX" is the gradient of the loss w.r.t. X.
   ------------------------------------------------------------------------------------------ */

/* Token + position embedding, vocabulary-parallel ready.
   tokens: int32 [B, T] (batch-major, as read from data; device memory on CUDA).
   out: [T, B, C] (sequence-major). Rows t in [t0, t0 + T_local) of the full sequence are produced
   (T_local = out rows / B), so a sequence-parallel shard can be embedded directly.
   out[t, b] = wte[tok - vocab_start] if vocab_start <= tok < vocab_start + wte rows, else 0;
             + wpe[t0 + t] when wpe is non-NULL.
   backward: scatter-ADD dout into dwte (same range rule; dwte may be NULL) and, if dwpe is
   non-NULL, into dwpe. Both backends add each token's rows in increasing row order
   (deterministic: CUDA sorts the rows by token first, no float atomics), so the gradients are
   the same bits every run and on either backend.                                            */
MGDEF void mg_embedding_forward(mg_ctx *ctx, mg_tensor *out, const int32_t *tokens, int B, int T,
                                int t0, const mg_tensor *wte, int64_t vocab_start,
                                const mg_tensor *wpe);
MGDEF void mg_embedding_backward(mg_ctx *ctx, mg_tensor *dwte, mg_tensor *dwpe,
                                 const mg_tensor *dout, const int32_t *tokens, int B, int T,
                                 int t0, int64_t vocab_start);

/* Normalisation over the last dim, statistics in fp32. inp, out: [N, C]; weight [C];
   mean, rstd: fp32 [N] saved for the backward.
     LayerNorm (rms 0):  out = (x − μ)·rstd·w + b,  rstd = 1/√(mean((x−μ)²) + eps)
     RMSNorm   (rms 1):  out = x·rstd·w,            rstd = 1/√(mean(x²) + eps), no bias
                         (mean is written as 0, so the backward is LayerNorm's with μ = 0)
   backward: dinp OVERWRITTEN unless accumulate != 0 (then +=, for the residual stream);
   dweight, dbias ACCUMULATE (dbias NULL for RMSNorm).
   zero_centered 1 (Megatron-LM's --apply-layernorm-1p, layernorm_zero_centered_gamma): the
   stored weight is w − 1 and the norm scales by 1 + weight (rounded to weight's dtype, as
   Megatron's `self.weight + 1`); dweight is the same either way (d(1 + w)/dw = 1).
   mg_layernorm_* are LayerNorm with eps 1e-5 (GPT-2's).                                       */
typedef struct mg_norm { int rms; float eps; int zero_centered; } mg_norm;
MGDEF void mg_norm_forward(mg_ctx *ctx, const mg_norm *kind, mg_tensor *out, float *mean,
                           float *rstd, const mg_tensor *inp, const mg_tensor *weight,
                           const mg_tensor *bias /* NULL for RMSNorm */);
MGDEF void mg_norm_backward(mg_ctx *ctx, const mg_norm *kind, mg_tensor *dinp, mg_tensor *dweight,
                            mg_tensor *dbias, const mg_tensor *dout, const mg_tensor *inp,
                            const mg_tensor *weight, const float *mean, const float *rstd,
                            int accumulate);
MGDEF void mg_layernorm_forward(mg_ctx *ctx, mg_tensor *out, float *mean, float *rstd,
                                const mg_tensor *inp, const mg_tensor *weight,
                                const mg_tensor *bias);
MGDEF void mg_layernorm_backward(mg_ctx *ctx, mg_tensor *dinp, mg_tensor *dweight,
                                 mg_tensor *dbias, const mg_tensor *dout, const mg_tensor *inp,
                                 const mg_tensor *weight, const float *mean, const float *rstd,
                                 int accumulate);

/* Linear: out[N, O] = inp[N, I] · weight[O, I]ᵀ + bias[O] (bias may be NULL).
   backward_input:  dinp[N, I] = dout[N, O] · weight   (OVERWRITE, or += when accumulate)
   backward_weight: dweight[O, I] += dout ᵀ · inp ; dbias[O] += Σ_rows dout (dbias may be NULL)
   The two backward halves are separate so a zero-bubble schedule can run them at different
   times and data-parallel reduction can start per layer. Each result (out, dinp, dweight; pre
   and dpre below) is written while the operands are read: one that shares memory with an
   operand is refused (in place is not possible), as are a NULL tensor and a weight of no
   input or no output feature (BLAS has no layout for it); N = 0 rows is an empty op.      */
MGDEF void mg_linear_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                             const mg_tensor *weight, const mg_tensor *bias);
/* The linear layer then the residual connection: out = inp·Wᵀ + bias + resid (resid [N, O],
   of out's dtype, a buffer of its own), the bits of mg_linear_forward followed by
   mg_add(out, out, resid). On the CPU with fp32 tensors it is one GEMM that adds resid to each
   tile as it stores it (no pass, no parallel region of its own); elsewhere the two ops run.  */
MGDEF void mg_linear_forward_residual(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                                      const mg_tensor *weight, const mg_tensor *bias,
                                      const mg_tensor *resid);
MGDEF void mg_linear_backward_input(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *dout,
                                    const mg_tensor *weight, int accumulate);
MGDEF void mg_linear_backward_weight(mg_ctx *ctx, mg_tensor *dweight, mg_tensor *dbias,
                                     const mg_tensor *dout, const mg_tensor *inp);
/* Linear + GELU, fused (the GPT-2 MLP's up-projection: one GEMM into an fp32 accumulator, then
   bias and GELU in one pass):
     pre[N, O] = inp[N, I] · weight[O, I]ᵀ + bias[O]   (bias may be NULL; the GELU's input,
                                                       kept for the backward)
     out[N, O] = gelu(pre)
   Both come from the fp32 accumulator and are rounded once each: out is GELU of the UNROUNDED
   pre-activation. out, pre and bias share a dtype, which is the input's or fp32.
   backward_input_gelu: the input gradient of the NEXT linear (weight [O2, O], whose input was
   gelu(pre)) taken through the exact GELU derivative (a GEMM into fp32, then one pass that
   applies gelu' and sums the columns):
     dpre[N, O] = (dout[N, O2] · weight) ⊙ gelu'(pre)                            (OVERWRITE)
     dbias[O]  += Σ_rows dpre   (when non-NULL: the bias gradient of the linear that made pre;
                  summed from the fp32 values, rounded once to dpre's dtype, then added)
   Both backends run this arithmetic. cuBLASLt's GELU_AUX_BIAS and DGELU_BGRAD epilogues are
   not used: on an H100 they computed an approximate GELU (and DGELU_BGRAD was slower than the
   GEMM and a separate pass), see the two functions.                                         */
MGDEF void mg_linear_gelu_forward(mg_ctx *ctx, mg_tensor *out, mg_tensor *pre,
                                  const mg_tensor *inp, const mg_tensor *weight,
                                  const mg_tensor *bias);
MGDEF void mg_linear_backward_input_gelu(mg_ctx *ctx, mg_tensor *dpre, mg_tensor *dbias,
                                         const mg_tensor *dout, const mg_tensor *weight,
                                         const mg_tensor *pre);

/* GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). Same shapes.
   backward: dinp = dout · gelu'(inp) (OVERWRITE; dinp may alias dout).                         */
MGDEF void mg_gelu_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp);
MGDEF void mg_gelu_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *inp,
                            const mg_tensor *dout);
/* The MLP's activation: GELU's tanh approximation above (GPT-2's, Megatron-LM's fused
   bias-GELU kernel, Hugging Face's "gelu_new"); the exact GELU, 0.5·x·(1 + erf(x/√2))
   (PyTorch's F.gelu, Megatron-LM's unfused MLP, Hugging Face's "gelu"); or the squared ReLU,
   max(x, 0)² with derivative 2·max(x, 0) (Megatron-LM's --squared-relu, Nemotron-4's,
   Hugging Face's "relu2"). The _act functions take it; the _gelu ones compute the tanh GELU. */
typedef enum { MG_ACT_GELU = 0, MG_ACT_GELU_ERF = 1, MG_ACT_RELU2 = 2 } mg_act_kind;
MGDEF void mg_linear_act_forward(mg_ctx *ctx, mg_tensor *out, mg_tensor *pre,
                                    const mg_tensor *inp, const mg_tensor *weight,
                                    const mg_tensor *bias, mg_act_kind kind);
MGDEF void mg_linear_backward_input_act(mg_ctx *ctx, mg_tensor *dpre, mg_tensor *dbias,
                                           const mg_tensor *dout, const mg_tensor *weight,
                                           const mg_tensor *pre, mg_act_kind kind);
MGDEF void mg_act_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                             mg_act_kind kind);
MGDEF void mg_act_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *inp,
                              const mg_tensor *dout, mg_act_kind kind);

/* Causal self-attention core for n_head heads of head_dim = C3/(3·n_head).
   qkv: [T, B, n_head, 3, head_dim] (per head [q k v], Megatron's interleaved layout), i.e.
        [N, 3·n_head·hd]. Then batch i = b·n_head + h has a uniform stride of 3·hd, so Q·Kᵀ and
        P·V are single strided-batched GEMMs with ld = B·3·n_head·hd.
   att: [B, n_head, T, T] probabilities after scale (1/√hd), causal mask and softmax (saved
        for backward; entries above the diagonal are 0).
   out: [T, B, n_head, hd] = [N, n_head·hd].
   Dropout on the probabilities (p_drop > 0) uses mg_dropout's keep test on element
   (b, head_offset + h, t1, t2) of the global [B, n_head_total, T, T] tensor, so the mask does
   not depend on how heads are split; att keeps the undropped P.
   qkv, att and out (and dqkv, datt, dout) share one dtype; with 16-bit storage the scores are
   rounded once before the softmax (as the GEMM writes them), like Megatron's unfused path.
   backward: datt is scratch [B, n_head, T, T]; dqkv OVERWRITTEN.                              */
typedef struct mg_attn_dropout {
    float p;              /* 0 disables                                                         */
    uint64_t seed;        /* the key: mg_dropout_key(seed, site, microbatch)                   */
    int head_offset;      /* global index of local head 0                                       */
    int n_head_total;     /* heads of the whole (unsplit) layer                                  */
} mg_attn_dropout;
MGDEF void mg_attention_forward(mg_ctx *ctx, mg_tensor *out, mg_tensor *att,
                                const mg_tensor *qkv, int B, int T, int n_head,
                                const mg_attn_dropout *drop /* may be NULL */);
MGDEF void mg_attention_backward(mg_ctx *ctx, mg_tensor *dqkv, mg_tensor *datt,
                                 const mg_tensor *dout, const mg_tensor *qkv,
                                 const mg_tensor *att, int B, int T, int n_head,
                                 const mg_attn_dropout *drop);
/* Grouped-query attention (Ainslie et al. 2023; n_group = 1: multi-query): n_head query heads
   share n_group key/value heads, query head h reading group h / (n_head/n_group). qkv is
   Megatron's grouped layout [T, B, n_group, (n_head/n_group + 2)·hd]: per group its query
   heads, then its key, then its value (n_group = n_head is the layout above), so
   hd = C3/(n_head + 2·n_group); att and out are as above (n_head heads). A tensor-parallel
   rank holding whole groups holds a contiguous block of the columns. backward: the key and
   value gradients sum over the group's query heads. The plain functions are n_group = n_head. */
MGDEF void mg_attention_forward_gqa(mg_ctx *ctx, mg_tensor *out, mg_tensor *att,
                                    const mg_tensor *qkv, int B, int T, int n_head, int n_group,
                                    const mg_attn_dropout *drop /* may be NULL */);
MGDEF void mg_attention_backward_gqa(mg_ctx *ctx, mg_tensor *dqkv, mg_tensor *datt,
                                     const mg_tensor *dout, const mg_tensor *qkv,
                                     const mg_tensor *att, int B, int T, int n_head,
                                     int n_group, const mg_attn_dropout *drop);

/* Tiled causal attention (FlashAttention's algorithm, Dao et al. 2022, 2023): the attention
   above — same scale 1/√hd, causal mask, grouping and dropout masks — computed over tiles of
   MG_ATTN_TILE queries × MG_ATTN_TILE keys with an online softmax: a query row keeps its running
   max m and sum l of exp(s − m) and its unnormalised output acc; a key tile with a larger max
   rescales both by exp(m_old − m_new). Tiles wholly above the diagonal are skipped. Nothing T×T
   is stored: the forward keeps the output and lse = m + log l per row (fp32 [B, n_head, T]);
   the backward recomputes each tile's P = exp(S − lse) — so recomputing attention costs nothing
   extra — in two passes without atomics (deterministic): dQ per query tile over its key tiles,
   then dK, dV per key tile over every query tile and query head of its group that sees it,
   summed in fp32. With Δ = rowsum(dO ∘ O):  dS = P ∘ (D'(dO·Vᵀ) − Δ),  dQ = scale·dS·K,
   dK = scale·dSᵀ·Q,  dV = D(P)ᵀ·dO  (D the dropout of the probabilities, D' its mask and scale).
   The CPU backend runs the same tiles in the same order. Memory is O(T) on both.
     out: [T, B, n_head, hd] = [B·T, n_head·hd], lse: fp32, numel B·n_head·T.
   backward: dqkv OVERWRITTEN; out and lse are the forward's.                                   */
#define MG_ATTN_TILE 32
#define MG_ATTN_MAX_HD 256   /* the CUDA kernels keep a head's row in registers, hd/32 a lane */
MGDEF void mg_flash_attention_forward(mg_ctx *ctx, mg_tensor *out, mg_tensor *lse,
                                      const mg_tensor *qkv, int B, int T, int n_head, int n_group,
                                      const mg_attn_dropout *drop /* may be NULL */);
MGDEF void mg_flash_attention_backward(mg_ctx *ctx, mg_tensor *dqkv, const mg_tensor *dout,
                                       const mg_tensor *out, const mg_tensor *lse,
                                       const mg_tensor *qkv, int B, int T, int n_head,
                                       int n_group, const mg_attn_dropout *drop);

/* The tiled attention of one block of queries against one block of keys/values, for context
   parallelism's ring (the sequence split across ranks) and for the functions above.
   A view addresses per-head rows of hd elements: head h = g·per + j (group g, j-th head of the
   group) of row (t, b) starts at element t·ld_t + b·ld_b + g·ld_g + j·ld_h of data. Query-head
   views (q, o, dout, dq) have per = n_head/n_group; key/value views (k, v, dk, dv) hold one head
   per group (j = 0).
   Positions decide visibility: key s is visible to query t iff k_pos0 + s <= q_pos0 + t, and
   the dropout mask of (b, head, t, s) is element (b, head_offset + head, q_pos0 + t, k_pos0 + s)
   of the global [B, n_head_total, T_global, T_global] tensor — the same mask whatever block of
   the sequence a rank computes.
   forward: merge = 0 writes this block's o and lse (lse = −inf and o = 0 for a row that sees no
   key); merge = 1 combines them with the (o, lse) of other keys already there:
   lse' = log(e^lse + e^lse_b), o' = e^(lse − lse')·o + e^(lse_b − lse')·o_b.
   backward: lse and delta = rowsum(dout ∘ o) (mg_attn_delta) belong to the final o of ALL the
   key blocks; dq, dk, dv are OVERWRITTEN (accumulate = 0) or added to (accumulate = 1).
   lse and delta are fp32 [B, n_head, Tq] (device memory on CUDA).                            */
typedef struct mg_attn_view {
    void *data;
    mg_dtype dtype;
    int64_t ld_t, ld_b, ld_g, ld_h;
} mg_attn_view;
typedef struct mg_attn_block {
    int B, Tq, Tk, n_head, n_group, hd;
    mg_attn_view q, k, v;
    int64_t q_pos0, k_pos0;   /* positions of query row 0 and key row 0                         */
    int64_t T_global;         /* the sequence length that indexes the dropout mask               */
    const mg_attn_dropout *drop;   /* may be NULL                                               */
} mg_attn_block;
MGDEF void mg_attn_block_forward(mg_ctx *ctx, const mg_attn_block *a, const mg_attn_view *o,
                                 float *lse, int merge);
MGDEF void mg_attn_delta(mg_ctx *ctx, float *delta, const mg_attn_block *a,
                         const mg_attn_view *dout, const mg_attn_view *o);
MGDEF void mg_attn_block_backward(mg_ctx *ctx, const mg_attn_block *a, const mg_attn_view *dout,
                                  const float *lse, const float *delta, const mg_attn_view *dq,
                                  const mg_attn_view *dk, const mg_attn_view *dv, int accumulate);
/* Key tiles of the block that the tiled forward computes (the causal skip), for balancing work. */
MGDEF int64_t mg_attn_block_tiles(const mg_attn_block *a);

/* Rotary position embedding (Su et al. 2021), in place on the queries and keys of a qkv tensor
   in the grouped layout above; values are untouched. Row r = t·B + b is at position t0 + t.
   The first rot_dim dims of every query and key head rotate in pairs (i, i + rot_dim/2) —
   rotate-half, the convention of Hugging Face transformers and Megatron-LM's default:
     y_i = x_i·cos θ_i − x_{i+h}·sin θ_i,  y_{i+h} = x_{i+h}·cos θ_i + x_i·sin θ_i,
     θ_i = pos·inv_freq_i, h = rot_dim/2;
   dims rot_dim … hd−1 pass through (--rotary-percent < 1). cos_sin: fp32 device table
   [positions, h, 2] of (cos θ_i, sin θ_i) made by mg_rope_table. backward: the inverse
   rotation (θ → −θ) in place on dqkv's queries and keys.                                      */
MGDEF void mg_rope_forward(mg_ctx *ctx, mg_tensor *qkv, int B, int n_head, int n_group,
                           int rot_dim, int t0, const float *cos_sin);
MGDEF void mg_rope_backward(mg_ctx *ctx, mg_tensor *dqkv, int B, int n_head, int n_group,
                            int rot_dim, int t0, const float *cos_sin);
/* Rotary frequencies as Hugging Face computes them: inv_freq_i = base^(−2i/rot_dim) (fp32),
   optionally with Llama 3's frequency scaling (rope_type "llama3": wavelengths longer than
   original_max_pos/low_freq_factor are divided by factor, shorter than
   original_max_pos/high_freq_factor kept, smoothly interpolated between). */
typedef struct mg_rope {
    float base;                 /* θ, --rotary-base (10000)                                     */
    int llama3;                 /* --use-rope-scaling                                            */
    float factor, low_freq_factor, high_freq_factor;  /* 8, 1, 4 for Llama 3.1               */
    int original_max_pos;       /* 8192 for Llama 3.1                                           */
    float linear_factor;        /* linear position interpolation (Megatron-LM's
                                   --rotary-seq-len-interpolation-factor, transformers'
                                   rope_type "linear"): inv_freq / F, i.e. positions p / F
                                   (0 and 1: none)                                             */
} mg_rope;
/* Host table for mg_rope_forward: cos_sin[(p·h + i)·2 + {0,1}] = cos, sin of θ = p·inv_freq_i
   (the angle rounded to fp32 as the reference's fp32 product, cos/sin then in double and
   rounded once), for positions p < n_pos. With linear_factor F, inv_freq_i / F in fp32 (after
   Llama 3's scaling, when both are set), as transformers 4.44 divides it.                   */
MGDEF void mg_rope_table(float *cos_sin, int n_pos, int rot_dim, const mg_rope *rope);

/* SwiGLU's gated activation (Shazeer 2020; the Llama MLP): out = silu(gate) ⊙ up with
   silu(x) = x·σ(x). gate, up, out: the same shape.
   backward: dgate = dout ⊙ up ⊙ silu'(gate), dup = dout ⊙ silu(gate) (OVERWRITE; either may
   alias dout, neither gate nor up).                                                           */
MGDEF void mg_swiglu_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *gate,
                             const mg_tensor *up);
MGDEF void mg_swiglu_backward(mg_ctx *ctx, mg_tensor *dgate, mg_tensor *dup,
                              const mg_tensor *dout, const mg_tensor *gate, const mg_tensor *up);

/* Elementwise. out may alias a or b.                                                          */
MGDEF void mg_add(mg_ctx *ctx, mg_tensor *out, const mg_tensor *a, const mg_tensor *b);
MGDEF void mg_axpy(mg_ctx *ctx, mg_tensor *y, float alpha, const mg_tensor *x); /* y += a·x */
MGDEF void mg_scale(mg_ctx *ctx, mg_tensor *x, float alpha);                     /* x *= a  */
MGDEF void mg_fill(mg_ctx *ctx, mg_tensor *x, float value);
MGDEF void mg_cast(mg_ctx *ctx, mg_tensor *dst, const mg_tensor *src);   /* any dtype -> any */

/* Dropout keyed by global coordinates: element (row, col) of the full unsplit [rows, cols]
   tensor is kept iff mg_rand_u32(key, row·cols + col) >= floor(p·2^32), and then scaled by
   1/(1-p) (0 <= p < 1; p = 0 copies). The local tensor holds global rows
   [row_offset, row_offset + local rows) and all cols. Backward recomputes the same mask
   (nothing is stored). out may alias inp. mg_dropout_key mixes (seed, site, microbatch) into
   a key through Philox, so sites (layer and place in it) and microbatches get unrelated
   masks.                                                                                     */
MGDEF uint64_t mg_dropout_key(uint64_t seed, uint64_t site, uint64_t microbatch);
MGDEF void mg_dropout_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp, float p,
                              uint64_t key, int64_t row_offset);
MGDEF void mg_dropout_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *dout, float p,
                               uint64_t key, int64_t row_offset);

/* Counter-based random numbers (used for initialisation and dropout): a pure function of
   (key, index), identical on every backend, so each rank makes exactly its shard of a tensor.
   mg_rand_u32(key, i) is word i mod 4 of Philox4x32-10 (Random123) at counter i / 4 under the
   64-bit key; uniform = its top 24 bits / 2^24; normal = Box-Muller of two words of Philox at
   a counter of its own (c3 = 1), computed in double and rounded once.                        */
MG_HD static inline uint32_t mg_rand_u32(uint64_t key, uint64_t index);
MG_HD static inline float mg_rand_uniform(uint64_t key, uint64_t index);  /* [0, 1)          */
MG_HD static inline float mg_rand_normal(uint64_t key, uint64_t index);   /* N(0, 1)         */

/* Softmax cross-entropy over a SLICE of the vocabulary (vocabulary-parallel ready).
   logits: [N, Vs] — this slice holds vocabulary ids [vocab_start, vocab_start + Vs); of them
   only ids < vocab_size are real (the rest is padding and never enters max, sum or gradient).
   targets: int32 [N] global ids (device memory on CUDA), in sequence-major row order.
   targets[r] < 0: the row is ignored (loss 0, gradient 0), as PyTorch's ignore_index — its
   tlogit is 0 and mg_xent_backward writes its dlogits row as exact zeros (padding too);
   mg_xent_loss takes no targets, so its caller sets those rows' losses to 0 itself.
   Three steps, with the merge between them done by the caller (an all-reduce across slices):
     1. mg_xent_max:    rowmax[r]  = max over the slice's real ids          -> merge by MAX
     2. mg_xent_sumexp: sumexp[r]  = Σ exp(logit - rowmax[r]) (rowmax = merged global max)
                        tlogit[r]  = logit of targets[r] if it is in the slice, else 0
                                                                                -> merge by SUM
     3. mg_xent_loss:   losses[r]  = log(sumexp[r]) + rowmax[r] - tlogit[r]
        mg_xent_backward: dlogits = (softmax - onehot(target)) · dloss  (padding -> 0);
                          dlogits may alias logits.
   With one slice (no merge) this is the ordinary cross-entropy. Every slice sees the same
   targets, so the slices agree on which rows are ignored.
   rowmax, sumexp, tlogit, losses: fp32 [N], device memory on CUDA. Targets are not range
   checked (the data loader validates token ids): an id >= vocab_size matches no column.    */
MGDEF void mg_xent_max(mg_ctx *ctx, float *rowmax, const mg_tensor *logits,
                       int64_t vocab_start, int64_t vocab_size);
MGDEF void mg_xent_sumexp(mg_ctx *ctx, float *sumexp, float *tlogit, const mg_tensor *logits,
                          const int32_t *targets, const float *rowmax, int64_t vocab_start,
                          int64_t vocab_size);
MGDEF void mg_xent_loss(mg_ctx *ctx, float *losses, const float *rowmax, const float *sumexp,
                        const float *tlogit, int64_t N);
MGDEF void mg_xent_backward(mg_ctx *ctx, mg_tensor *dlogits, const mg_tensor *logits,
                            const int32_t *targets, const float *rowmax, const float *sumexp,
                            float dloss, int64_t vocab_start, int64_t vocab_size);
/* The same with dloss read from memory by the op itself (device memory on CUDA: a value that
   device code wrote, such as the fp16 loss scale over the tokens, needs no host copy).     */
MGDEF void mg_xent_backward_at(mg_ctx *ctx, mg_tensor *dlogits, const mg_tensor *logits,
                               const int32_t *targets, const float *rowmax, const float *sumexp,
                               const float *dloss, int64_t vocab_start, int64_t vocab_size);
/* The same statistics of a slice in ONE pass over each row (online softmax, as flash-attention
   and llm.c's fused classifier): rowmax[r] = the slice's own max over its real ids,
   sumexp[r] = Σ exp(logit − rowmax[r]), tlogit[r] as above. Slices merge afterwards:
   M = max over slices of rowmax (all-reduce MAX of a copy), then mg_xent_rescale turns each
   slice's sumexp into Σ exp(logit − M) = sumexp·exp(rowmax − M) (0 stays 0), and a SUM
   all-reduce of sumexp and tlogit completes them; M, Σ, tlogit then feed mg_xent_loss and
   mg_xent_backward as the three-step statistics do. With one slice rowmax is already M.
   The CPU reads a row for its max and again for Σexp while the row sits in cache (a row of
   V = 50304 fp32 is 196 KiB); a CUDA block keeps a running (max, Σ) per thread and merges
   them through the block reduction — one read of the logits either way.                   */
MGDEF void mg_xent_partial(mg_ctx *ctx, float *rowmax, float *sumexp, float *tlogit,
                           const mg_tensor *logits, const int32_t *targets, int64_t vocab_start,
                           int64_t vocab_size);
MGDEF void mg_xent_rescale(mg_ctx *ctx, float *sumexp, const float *rowmax, const float *M,
                           int64_t N);

/* Fused, chunked classifier (vocabulary-parallel output layer + cross-entropy + its backward,
   llm.c's fused classifier done in chunks of rows): the full [N, Vs] logits never exist.
   x [N, C] (the final norm's output) and w [Vs, C] (this slice of the output layer) share a
   dtype; the slice holds vocabulary ids [vocab_start, vocab_start + Vs), real below
   vocab_size. For each chunk of R = chunk_rows rows (the last one ragged), in the scratch:
     logits  = x_c · wᵀ                                   [R, Vs] fp32 (one GEMM)
     one pass: slice max, Σexp, target logit (mg_xent_partial)
     merge:  merge(user, M, R, 1): max over slices; rescale; merge(user, S, 2R, 0): sum of
             Σexp and target logits (S and TL adjacent) — merge NULL: one slice, no merge
     losses[r] = log S + M − TL                           (losses may be NULL)
   and, when dx or dw is given (training), with the same chunk still in the scratch:
     dlogits = (softmax − onehot)·dloss·dloss_scale over the logits in place (16-bit x:
               rounded into the scratch's 16-bit copy, the GEMMs' operand dtype), then
     dx_c  = dlogits · w      [R, C], x's dtype, OVERWRITE (this slice's partial sum: the
                              caller reduces dx over the slices)
     dw   += dlogitsᵀ · x_c   [Vs, C] fp32, ACCUMULATE (may be NULL; dx may be NULL)
   targets[r] < 0: the row is ignored (loss 0, gradient 0), as PyTorch's ignore_index —
   losses[r] = 0 exactly and its dlogits row is 0, so its dx row is 0 and it adds nothing to
   dw (the row still takes part in the GEMMs and the merges, with every slice agreeing).
   Merges run on every slice in the same order (collective when merge is an all-reduce).
   Results equal the three-step ops on the full logits followed by the linear backward, to
   fp32 rounding (the dw sum is split at chunk boundaries; with several slices Σexp is summed
   after rescaling). scratch: device memory of mg_classifier_scratch_bytes(chunk_rows, Vs,
   dtype) bytes; mg_classifier_chunk_rows picks the most rows (at least 1, at most N) whose
   scratch fits max_bytes.                                                                   */
typedef struct mg_classifier {
    const mg_tensor *x, *w;
    const int32_t *targets;       /* [N] global ids (device memory on CUDA)                     */
    int64_t vocab_start, vocab_size;
    float *losses;                /* [N] per-token losses, or NULL                              */
    float dloss;                  /* d loss / d (per-token loss), used with dx or dw            */
    const float *dloss_at;        /* if not NULL, dloss read from here by the op (device memory
                                     on CUDA: a seed device code wrote, e.g. the fp16 scale)   */
    mg_tensor *dx, *dw;           /* NULL both: the loss only (evaluation)                      */
    int64_t chunk_rows;
    void *scratch;
    void (*merge)(void *user, float *buf, int64_t n, int is_max); /* NULL: one slice            */
    void *merge_user;
    float dloss_scale;            /* multiplies dloss (or *dloss_at) for every row of the call,
                                     e.g. tokens / tokens kept under a loss mask; 0 reads as 1 */
} mg_classifier;
MGDEF size_t mg_classifier_scratch_bytes(int64_t chunk_rows, int64_t Vs, mg_dtype dt);
MGDEF int64_t mg_classifier_chunk_rows(int64_t N, int64_t Vs, mg_dtype dt, size_t max_bytes);
MGDEF void mg_classifier_fused(mg_ctx *ctx, const mg_classifier *c);

/* AdamW on fp32 master weights, as torch.optim.AdamW (decoupled weight decay, bias correction):
     g = grad · grad_scale            (grad_scale folds clipping and loss-scale removal)
     m = β1·m + (1-β1)·g ; v = β2·v + (1-β2)·g²
     param -= lr·wd·param ; param -= lr · (m/(1-β1^step)) / (√v/√(1-β2^step) + eps)
   step counts from 1. If param16 is non-NULL it receives the updated weights rounded to its
   dtype (the 16-bit working copy).                                                           */
typedef struct mg_adamw_hparams {
    float lr, beta1, beta2, eps, weight_decay;
    int step;
} mg_adamw_hparams;
MGDEF void mg_adamw_step(mg_ctx *ctx, float *param, const float *grad, float *m, float *v,
                         int64_t n, const mg_adamw_hparams *hp, float grad_scale,
                         void *param16, mg_dtype dt16);

/* Fused multi-tensor AdamW: ONE launch over every piece of the parameters a rank's optimizer
   owns, the fp32 masters and their 16-bit copies written in the same pass. Both the table and
   the step's scalars live in device memory (host memory on the CPU), so a GPU step takes no
   value from the host: device code (the clip and loss-scale decisions) writes the scalars.
     table[i]  param (fp32 master), grad, m, v: n values each; param16 NULL or the 16-bit copy
               (dtype dt16) of param; wd_mult, the piece's share of the step's weight decay
               (Megatron's wd_mult: 1 for weights, 0 for biases and norms); lr_group 1 takes
               the second learning rate (Megatron's decoupled one: the word embedding and the
               output layer under --decoupled-lr); begin = Σ n of the pieces before it
               (mg_adamw_table_begin fills it), total = Σ n of all.
     args      lr, the bias corrections step_size = lr/(1−β1^step) and bc2_sqrt = √(1−β2^step)
               (mg_adamw_args_set), lr2 and step_size2 for lr_group 1 (the same values unless
               mg_adamw_args_set_lr2 sets them), the step's weight decay (a piece decays by
               its lr·weight_decay·wd_mult), grad_scale (clipping and the loss scale divided
               out), and skip: nonzero leaves everything unchanged (an fp16 overflow step).
   Each element is mg_adamw_step's, with the same numbers. CPU: the pieces in order, each as
   mg_adamw_step runs it. CUDA: each block takes tiles of 4·256 consecutive indices of the
   pieces laid end to end ([0, total)), finds the tile's first piece by binary search over
   begin and walks on into the next pieces; one launch of at most 65536 blocks.            */
typedef struct mg_adamw_piece {
    float *param; const float *grad; float *m, *v; void *param16;
    int64_t n, begin;
    float wd_mult;
    int lr_group;
} mg_adamw_piece;
typedef struct mg_adamw_args {
    float lr, step_size, bc2_sqrt, grad_scale, weight_decay;
    int skip;
    float lr2, step_size2;   /* lr_group 1's */
} mg_adamw_args;
MG_HD static inline void mg_adamw_args_set(mg_adamw_args *a, float lr, int64_t step, float beta1,
                                           float beta2) {
    a->lr = a->lr2 = lr;
    a->step_size = a->step_size2 = (float)(lr / (1.0 - pow((double)beta1, (double)step)));
    a->bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, (double)step));
}
/* lr_group 1's learning rate (after mg_adamw_args_set). */
MG_HD static inline void mg_adamw_args_set_lr2(mg_adamw_args *a, float lr2, int64_t step,
                                               float beta1) {
    a->lr2 = lr2;
    a->step_size2 = (float)(lr2 / (1.0 - pow((double)beta1, (double)step)));
}
/* begin of every piece, from the n's; returns the total.                                     */
MGDEF int64_t mg_adamw_table_begin(mg_adamw_piece *table, int n_pieces);
MGDEF void mg_adamw_multi(mg_ctx *ctx, const mg_adamw_piece *table, int n_pieces, int64_t total,
                          float beta1, float beta2, float eps, mg_dtype dt16,
                          const mg_adamw_args *args);

/* Σ x² over n fp32 values, accumulated in double on both backends (per-thread/per-block
   partial sums, then the total); returned to the host (synchronises). *nonfinite (may be
   NULL) is set to 1 iff some value is inf or nan — exactly when the double sum is not finite,
   since the square of a finite fp32 never overflows a double.                              */
MGDEF double mg_sumsq(mg_ctx *ctx, const float *x, int64_t n, int *nonfinite);
/* The same over many pieces with ONE synchronisation: mg_sumsq_begin takes room for `slots`
   partial sums from the arena (each piece takes 1 on the CPU, up to 1024 on CUDA — one per
   block, mg_sumsq_slots(n)); mg_sumsq_add queues a piece's Σ x² into the next slots without
   waiting; mg_sumsq_end copies the partials to the host once, adds them in order, releases
   the arena and returns the total (nonfinite as above). The CPU's total is bit-identical to
   adding mg_sumsq of each piece in order.                                                   */
typedef struct mg_sumsq_batch { double *partial; int64_t used, cap; size_t mark; } mg_sumsq_batch;
MGDEF int64_t mg_sumsq_slots(const mg_ctx *ctx, int64_t n);
MGDEF void mg_sumsq_begin(mg_ctx *ctx, mg_sumsq_batch *b, int64_t slots);
MGDEF void mg_sumsq_add(mg_ctx *ctx, mg_sumsq_batch *b, const float *x, int64_t n);
MGDEF double mg_sumsq_end(mg_ctx *ctx, mg_sumsq_batch *b, int *nonfinite);
/* Ends the batch without waiting: the partials are added on the device (one block: each
   thread a strided subset in order, then the block reduction) into *total (device memory;
   host memory on the CPU, which adds them in order as mg_sumsq_end). Inf/nan make the total
   non-finite. Releases the arena.                                                          */
MGDEF void mg_sumsq_end_device(mg_ctx *ctx, mg_sumsq_batch *b, double *total);
/* *acc += Σ x over n fp32 values, in double, without waiting: acc is device memory (host on
   the CPU). CUDA: one block (as mg_sumsq_end_device); CPU: the sum from 0 in order, then
   added to *acc — so a sequence of calls adds like a host loop over the pieces' sums.      */
MGDEF void mg_sum_f32_device(mg_ctx *ctx, const float *x, int64_t n, double *acc);

/* ---------------------------------------------------------------------------------------------
   Inline definitions of the MG_HD functions above. They live in the API part (not under
   MG_IMPLEMENTATION) because every translation unit, host or device, needs their bodies.
   ------------------------------------------------------------------------------------------ */
MG_HD static inline uint32_t mg__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
MG_HD static inline float mg__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* bf16 is the top half of an fp32. Round to nearest even by adding 0x7FFF plus the lowest kept
   bit; a carry out of the mantissa correctly bumps the exponent, up to inf on overflow. NaN is
   kept a (quiet) NaN with its sign, since rounding could turn its payload into inf.           */
MG_HD static inline uint16_t mg_f32_to_bf16(float f) {
    uint32_t u = mg__f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
MG_HD static inline float mg_bf16_to_f32(uint16_t h) { return mg__bits_f32((uint32_t)h << 16); }

/* fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Integer-only so that flush-to-zero or
   fast-math settings of the compiler cannot change the result.
     |x| >= 65520 (max half 65504 + half an ulp, a tie that rounds to the odd-free inf) -> inf
     2^-14 <= |x|   normal: rebias the exponent (127 -> 15), round 13 dropped bits to even
     2^-25 < |x|    subnormal: value = m·2^-24, m rounded to even from the 24-bit mantissa
     else           ±0 (2^-25 exactly is a tie and rounds to the even 0)                     */
MG_HD static inline uint16_t mg_f32_to_f16(float f) {
    uint32_t u = mg__f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u, ax = u & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);
    if (ax >= 0x38800000u) {
        uint32_t r = ax - 0x38000000u; /* exponent bias 127 -> 15: subtract 112 << 23 */
        return (uint16_t)(sign | ((r + 0x0FFFu + ((r >> 13) & 1u)) >> 13));
    }
    if (ax <= 0x33000000u) return (uint16_t)sign;
    {
        uint32_t mant = (ax & 0x007FFFFFu) | 0x00800000u, shift = 126u - (ax >> 23);
        uint32_t m = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
}
MG_HD static inline float mg_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return mg__bits_f32(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        int ee = 1;
        if (m == 0) return mg__bits_f32(sign);
        while (!(m & 0x400u)) { m <<= 1; ee--; } /* normalise the subnormal */
        return mg__bits_f32(sign | ((uint32_t)(ee + 112) << 23) | ((m & 0x3FFu) << 13));
    }
    return mg__bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

MG_HD static inline float mg_load(const void *p, mg_dtype dt, int64_t i) {
    switch (dt) {
    case MG_BF16: return mg_bf16_to_f32(((const uint16_t *)p)[i]);
    case MG_F16:  return mg_f16_to_f32(((const uint16_t *)p)[i]);
    default:      return ((const float *)p)[i];
    }
}
MG_HD static inline void mg_store(void *p, mg_dtype dt, int64_t i, float v) {
    switch (dt) {
    case MG_BF16: ((uint16_t *)p)[i] = mg_f32_to_bf16(v); break;
    case MG_F16:  ((uint16_t *)p)[i] = mg_f32_to_f16(v); break;
    default:      ((float *)p)[i] = v; break;
    }
}

/* Philox4x32-10 (Salmon et al., SC'11, "Parallel random numbers: as easy as 1, 2, 3"): ten
   rounds of two 32x32->64 multiplies mixing a 128-bit counter under a 64-bit key that is bumped
   by the Weyl constants between rounds. Output words x[0..3]. Checked against Random123's
   known-answer vectors in tests/test_ops.c.                                                   */
typedef struct mg__philox4 { uint32_t x[4]; } mg__philox4;
#if defined(__CUDACC__)
#define MG__FORCE_INLINE __forceinline__
#elif defined(__GNUC__)
#define MG__FORCE_INLINE inline __attribute__((always_inline))
#else
#define MG__FORCE_INLINE inline
#endif
MG_HD static MG__FORCE_INLINE mg__philox4 mg__philox4x32(uint64_t key, uint32_t c0, uint32_t c1,
                                               uint32_t c2, uint32_t c3) {
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    mg__philox4 r;
    /* one round, then the key bump; written out 10 times (no loop) so that a host loop over
       counters vectorises */
#define MG__PHILOX_ROUND do { \
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2; \
        c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0; c1 = (uint32_t)p1; \
        c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1; c3 = (uint32_t)p0; \
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; \
    } while (0)
    MG__PHILOX_ROUND; MG__PHILOX_ROUND; MG__PHILOX_ROUND; MG__PHILOX_ROUND; MG__PHILOX_ROUND;
    MG__PHILOX_ROUND; MG__PHILOX_ROUND; MG__PHILOX_ROUND; MG__PHILOX_ROUND; MG__PHILOX_ROUND;
#undef MG__PHILOX_ROUND
    r.x[0] = c0; r.x[1] = c1; r.x[2] = c2; r.x[3] = c3;
    return r;
}
/* Word (index mod 4) of Philox(key, counter = index / 4): consecutive indices share one Philox
   evaluation, so a loop over a row can use all four words (see the CPU dropout). The word is
   picked by two selects, not by indexing x[]: a run-time index into a register array puts it
   in local memory on a GPU (a 16-byte stack frame in every kernel that drew per element).   */
MG_HD static inline uint32_t mg_rand_u32(uint64_t key, uint64_t index) {
    uint64_t c = index >> 2;
    mg__philox4 r = mg__philox4x32(key, (uint32_t)c, (uint32_t)(c >> 32), 0, 0);
    uint32_t w01 = (index & 1) ? r.x[1] : r.x[0], w23 = (index & 1) ? r.x[3] : r.x[2];
    return (index & 2) ? w23 : w01;
}
MG_HD static inline float mg_rand_uniform(uint64_t key, uint64_t index) {
    return (float)(mg_rand_u32(key, index) >> 8) * (1.0f / 16777216.0f); /* 24 bits: exact */
}
/* Box-Muller on two words of a counter of its own (c3 = 1 separates it from mg_rand_u32's):
   u1 in (0, 1] so the log is finite. Computed in double and rounded once to float, so host
   and device agree although their libm differ in the last double bits.                       */
MG_HD static inline float mg_rand_normal(uint64_t key, uint64_t index) {
    mg__philox4 r = mg__philox4x32(key, (uint32_t)index, (uint32_t)(index >> 32), 0, 1);
    double u1 = ((double)r.x[0] + 1.0) * (1.0 / 4294967296.0);
    double u2 = (double)r.x[1] * (1.0 / 4294967296.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2));
}

#ifdef __cplusplus
}
#endif

#endif /* MG_TENSOR_H */

/* =============================================================================================
   IMPLEMENTATION
   ========================================================================================== */
#if defined(MG_IMPLEMENTATION) && !defined(MG_IMPLEMENTATION_ELSEWHERE)
#ifndef MG_TENSOR_IMPLEMENTED
#define MG_TENSOR_IMPLEMENTED
/* `#pragma omp simd` (clauses) on a loop that gcc vectorises but clang cannot: a float max
   reduction, the AdamW element update, mg_comm.h's fp16 conversions. clang reports such a loop
   as a -Wpass-failed warning (an error under -Werror); without the pragma its own vectoriser
   does what it can.                                                                          */
#define MG__PRAGMA(x) _Pragma(#x)
#ifdef __clang__
#define MG__SIMD_HINT(clauses)
#else
#define MG__SIMD_HINT(clauses) MG__PRAGMA(omp simd clauses)
#endif

#include <stdarg.h>
#include <stdio.h>
#include <float.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <cblas.h>
/* The CPU's own packed sgemm (6d) where the compiler targets AVX-512 (-march=native on such a
   machine) and this is not an nvcc build; MG_CPU_OPENBLAS_SGEMM keeps OpenBLAS's.           */
#if defined(__AVX512F__) && !defined(__CUDACC__) && !defined(MG_CPU_OPENBLAS_SGEMM)
#define MG__OWN_SGEMM 1
#include <immintrin.h>
#endif
/* The tiled attention's NN and TN tile products (6e's CPU twin) on an AVX2 kernel of its own
   where the compiler targets AVX2 with FMA but not AVX-512 (mg__cpu_tile_mm says why).       */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__) && !defined(__CUDACC__) && \
    !defined(MG_CPU_OPENBLAS_SGEMM)
#define MG__TILE_AVX2 1
#include <immintrin.h>
#endif
/* The packed sgemm's blocking (6d): MR×NR micro-tile, KC k-slice, MC rows of a packed block of
   op(A), NC columns of C per block. Defined in every build: the GEMM split over threads falls
   on MR/NR multiples. A thread's area: the packed block of op(A) and one packed NR-column
   panel of op(B) (its ragged last panel).                                                    */
#define MG__SG_MR 48
#define MG__SG_NR 8
#define MG__SG_KC 384
#define MG__SG_MC 240
#define MG__SG_NC 1536
#define MG__SG_THREAD_FLOATS ((size_t)MG__SG_MC * MG__SG_KC + (size_t)MG__SG_KC * MG__SG_NR)
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>   /* nvcuda::wmma: the 32-row tensor-core attention kernels (the emulator: also mma.sync) */
#endif

/* =============================================================================================
   6a. Errors, context, arena, copies
   ========================================================================================== */
static mg_fatal_fn mg__fatal_handler = NULL;

MGDEF void mg_set_fatal_handler(mg_fatal_fn fn) { mg__fatal_handler = fn; }

/* Formats the message, hands it to the handler; if there is none, or it returns, prints
   "file:line: msg" and ends the process with exit status 1.                                 */
MGDEF MG_NORETURN void mg_fatal(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (mg__fatal_handler) mg__fatal_handler(file, line, msg);
    fprintf(stderr, "%s:%d: %s\n", file, line, msg);
    fflush(stderr);
    exit(1);
}

#ifdef __CUDACC__
/* A launch reports configuration errors at once (cudaGetLastError); a fault while the kernel
   runs (bad address, ...) surfaces at the next synchronising call, so it may be reported
   there. Define MG_CUDA_DEBUG to wait for every kernel at its launch site instead (slow; for
   a first run on new hardware, or with compute-sanitizer).                                  */
#ifdef MG_CUDA_DEBUG
#define MG_CUDA_LAUNCH_CHECK() do { MG_CUDA_CHECK(cudaGetLastError()); \
    MG_CUDA_CHECK(cudaStreamSynchronize(MG__STREAM(ctx))); } while (0)
#else
#define MG_CUDA_LAUNCH_CHECK() MG_CUDA_CHECK(cudaGetLastError())
#endif
#define MG__STREAM(ctx) ((cudaStream_t)(ctx)->stream)
static void mg__lt_init(mg_ctx *ctx);   /* 6e: the cuBLASLt handle, workspace and plans */
static void mg__lt_free(mg_ctx *ctx);
#endif

MGDEF int mg_cuda_available(void) {
#ifdef __CUDACC__
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return n > 0;
#else
    return 0;
#endif
}

static inline int mg__is_cuda(const mg_ctx *ctx) { return ctx->device == MG_DEVICE_CUDA; }

/* The environment variables a context reads, their values in enum order (AUTO first). */
static const char *const mg__device_names[3] = {"auto", "cpu", "cuda"};
static const char *const mg__attn_kernel_names[4] = {"auto", "mma", "wmma", "simt"};

/* The index of environment variable var's value among names[0..n) (names[0] is "auto"); -1
   when it is unset or empty; -2, with "VAR=value: expected a, b or auto" in msg, when it is
   none of them.                                                                            */
static int mg__env_choice(const char *var, const char *const *names, int n, char *msg,
                          size_t msglen) {
    const char *v = getenv(var);
    size_t len;
    int k;
    if (!v || !v[0]) return -1;
    for (k = 0; k < n; k++)
        if (!strcmp(v, names[k])) return k;
    if (!msg || !msglen) return -2;
    snprintf(msg, msglen, "%s=%s: expected ", var, v);
    for (k = 1; k < n; k++) {
        len = strlen(msg);
        snprintf(msg + len, msglen - len, "%s%s", names[k], k + 1 < n ? ", " : " or auto");
    }
    return -2;
}

MGDEF int mg_ctx_env_check(const mg_ctx_desc *desc, char *err, size_t errlen) {
    if ((!desc || desc->device == MG_DEVICE_AUTO) &&
        mg__env_choice("MG_DEVICE", mg__device_names, 3, err, errlen) == -2) return -1;
    if (mg__env_choice("MG_ATTN_KERNELS", mg__attn_kernel_names, 4, err, errlen) == -2)
        return -1;
    return 0;
}

/* want, or where it is 0 (AUTO) the choice of environment variable var among names (0 when
   unset); a value outside them stops the program with mg__env_choice's line.              */
static int mg__env_or(int want, const char *var, const char *const *names, int n) {
    char msg[160];
    int k;
    if (want != 0) return want;
    k = mg__env_choice(var, names, n, msg, sizeof msg);
    if (k == -2) mg_fatal(__FILE__, __LINE__, "%s", msg);
    return k > 0 ? k : 0;
}

/* AUTO -> MG_DEVICE environment variable (cpu|cuda|auto) -> CUDA if built by nvcc and a GPU
   answers, else CPU. An explicit CUDA request without CUDA is an error, not a silent CPU run. */
static mg_device mg__resolve_device(mg_device want) {
    want = (mg_device)mg__env_or(want, "MG_DEVICE", mg__device_names, 3);
    if (want == MG_DEVICE_AUTO) return mg_cuda_available() ? MG_DEVICE_CUDA : MG_DEVICE_CPU;
    if (want == MG_DEVICE_CUDA && !mg_cuda_available()) {
#ifdef __CUDACC__
        mg_fatal(__FILE__, __LINE__, "device cuda requested but no CUDA GPU is available");
#else
        mg_fatal(__FILE__, __LINE__, "device cuda requested but this program was not built "
                 "by nvcc (build the _cuda flavour)");
#endif
    }
    if (want != MG_DEVICE_CPU && want != MG_DEVICE_CUDA)
        mg_fatal(__FILE__, __LINE__, "unknown device %d (expected auto, cpu or cuda)", (int)want);
    return want;
}

/* The context's attn_kernels: MG_ATTN_KERNELS=mma|wmma|simt|auto (unset or auto: MMA). */
static mg_attn_kernels mg__resolve_attn_kernels(void) {
    int k = mg__env_or(0, "MG_ATTN_KERNELS", mg__attn_kernel_names, 4);
    return k ? (mg_attn_kernels)k : MG_ATTN_KERNELS_MMA;
}

#define MG__ARENA_ALIGN 256

/* The threads a context initialised with n_threads = requested runs (0: OpenMP's default). */
static int mg__ctx_threads(int requested) {
#ifdef _OPENMP
    return requested ? requested : omp_get_max_threads();
#else
    (void)requested;
    return 1;
#endif
}

/* Host memory aligned to MG__ARENA_ALIGN: over-allocated, the raw pointer kept just below the
   aligned base (mg__host_aligned_free takes it back).                                        */
static void *mg__host_aligned(size_t bytes, const char *what) {
    char *raw = (char *)MG_MALLOC(bytes + MG__ARENA_ALIGN + sizeof(void *));
    uintptr_t base;
    if (!raw) mg_fatal(__FILE__, __LINE__, "cannot allocate %s of %zu bytes", what, bytes);
    base = ((uintptr_t)(raw + sizeof(void *)) + MG__ARENA_ALIGN - 1) & ~(uintptr_t)(MG__ARENA_ALIGN - 1);
    ((void **)base)[-1] = raw;
    return (void *)base;
}
static void mg__host_aligned_free(void *p) {
    if (p) MG_FREE(((void **)p)[-1]);
}

MGDEF void mg_ctx_init(mg_ctx *ctx, const mg_ctx_desc *desc) {
    mg_ctx_desc d;
    memset(ctx, 0, sizeof *ctx);
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    ctx->device = mg__resolve_device(d.device);
    ctx->attn_kernels = mg__resolve_attn_kernels();
    if (d.n_threads < 0) mg_fatal(__FILE__, __LINE__, "n_threads %d < 0", d.n_threads);
    ctx->n_threads = mg__ctx_threads(d.n_threads);
    /* GEMMs are parallelised by the library (OpenMP over the batch or over blocks of C), each
       thread calling a single-threaded OpenBLAS: one thread pool, none oversubscribed.    */
    if (ctx->device == MG_DEVICE_CPU) openblas_set_num_threads(1);
    ctx->arena_size = d.arena_bytes;
    if (ctx->device == MG_DEVICE_CPU) {
        if (d.arena_bytes) ctx->arena = (char *)mg__host_aligned(d.arena_bytes, "an arena");
#ifdef MG__OWN_SGEMM
        ctx->cpu_gemm_pack = (float *)mg__host_aligned((size_t)ctx->n_threads * MG__SG_THREAD_FLOATS *
                                                       sizeof(float), "the sgemm's packing areas");
#endif
        return;
    }
#ifdef __CUDACC__
    {
        cudaStream_t stream;
        cublasHandle_t handle;
        MG_CUDA_CHECK(cudaSetDevice(d.cuda_device));
        MG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        MG_CUBLAS_CHECK(cublasCreate(&handle));
        /* Every op, copy and GEMM runs on this one stream, in issue order. It is non-blocking:
           it does not wait for the legacy default stream (stream 0), so code outside the
           library that touches the context's memory uses ctx->stream or calls mg_sync first. */
        MG_CUBLAS_CHECK(cublasSetStream(handle, stream));
        /* alpha and beta of mg_gemm are host floats (the default mode, stated explicitly). */
        MG_CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
        /* cuBLAS may otherwise do the split-K reduction of a GEMM with 16-bit C in that 16-bit
           type (cublasMath_t: DISALLOW_REDUCED_PRECISION_REDUCTION "forces any reductions
           during matrix multiplications to use the accumulator type ... and not the output
           type"). The seam promises fp32 accumulation and one rounding, as on the CPU.       */
        MG_CUBLAS_CHECK(cublasSetMathMode(handle, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
        ctx->stream = (void *)stream;
        ctx->blas = (void *)handle;
        if (d.arena_bytes) MG_CUDA_CHECK(cudaMalloc((void **)&ctx->arena, d.arena_bytes));
        {   /* cuBLAS's workspace, of the size its documentation recommends (cublasSetWorkspace:
               32 MiB on Hopper, 4 MiB before), owned here so that the memory report counts it;
               set after cublasSetStream, which resets the handle to cuBLAS's own pool       */
            struct cudaDeviceProp prop;
            MG_CUDA_CHECK(cudaGetDeviceProperties(&prop, d.cuda_device));
            ctx->blas_workspace_size = (size_t)(prop.major >= 9 ? 32 : 4) << 20;
            MG_CUDA_CHECK(cudaMalloc(&ctx->blas_workspace, ctx->blas_workspace_size));
            MG_CUBLAS_CHECK(cublasSetWorkspace(handle, ctx->blas_workspace,
                                               ctx->blas_workspace_size));
        }
        mg__lt_init(ctx);   /* the cuBLASLt handle, for the fused linear layers */
    }
#endif
}

MGDEF void mg_ctx_free(mg_ctx *ctx) {
    if (ctx->device == MG_DEVICE_CPU) {
        mg__host_aligned_free(ctx->arena);
        mg__host_aligned_free(ctx->cpu_gemm_pack);
    }
#ifdef __CUDACC__
    else {
        /* let queued work that uses the arena finish first (and report its errors here) */
        if (ctx->stream) MG_CUDA_CHECK(cudaStreamSynchronize(MG__STREAM(ctx)));
        if (ctx->arena) MG_CUDA_CHECK(cudaFree(ctx->arena));
        mg__lt_free(ctx);
        if (ctx->blas) MG_CUBLAS_CHECK(cublasDestroy((cublasHandle_t)ctx->blas));
        if (ctx->blas_workspace) MG_CUDA_CHECK(cudaFree(ctx->blas_workspace));
        if (ctx->stream) MG_CUDA_CHECK(cudaStreamDestroy(MG__STREAM(ctx)));
    }
#endif
    MG_FREE(ctx->blocks);
    memset(ctx, 0, sizeof *ctx);
}

MGDEF mg_memory_stats mg_ctx_memory(const mg_ctx *ctx) {
    mg_memory_stats m;
    m.reserved = ctx->arena_size + ctx->blas_workspace_size;
    m.allocated = ctx->arena_used + ctx->blas_workspace_size;
    m.max_allocated = ctx->arena_peak + ctx->blas_workspace_size;
    m.allocations = ctx->n_blocks + (ctx->blas_workspace != NULL);
    return m;
}

MGDEF size_t mg_device_memory_used(const mg_ctx *ctx) {
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        size_t free_b = 0, total = 0;
        MG_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
        return total - free_b;
    }
#endif
    (void)ctx;
    return 0;
}

MGDEF const char *mg_device_name(const mg_ctx *ctx) {
#ifdef __CUDACC__
    static char names[16][300];
    if (mg__is_cuda(ctx)) {
        int dev = 0;
        struct cudaDeviceProp prop;
        MG_CUDA_CHECK(cudaGetDevice(&dev));
        MG_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        dev &= 15;
        snprintf(names[dev], sizeof names[dev], "cuda:%s", prop.name);
        return names[dev];
    }
#endif
    (void)ctx;
    return "cpu";
}

MGDEF void *mg_alloc(mg_ctx *ctx, size_t bytes) {
    size_t need = (bytes + MG__ARENA_ALIGN - 1) & ~(size_t)(MG__ARENA_ALIGN - 1);
    void *p;
    if (ctx->device != MG_DEVICE_CPU && ctx->device != MG_DEVICE_CUDA)   /* zeroed: freed */
        mg_fatal(__FILE__, __LINE__, "mg_alloc: the context is not initialised (mg_ctx_init) "
                 "or was freed (mg_ctx_free)");
    if (need < bytes || need > ctx->arena_size - ctx->arena_used)
        mg_fatal(__FILE__, __LINE__, "arena exhausted: %zu bytes requested, %zu of %zu in use "
                 "(raise arena_bytes)", bytes, ctx->arena_used, ctx->arena_size);
    if (ctx->n_blocks == ctx->cap_blocks) {   /* grows while the run sets up, then stays */
        int64_t cap = ctx->cap_blocks ? 2 * ctx->cap_blocks : 256;
        size_t *grown = (size_t *)MG_MALLOC(sizeof(size_t) * (size_t)cap);
        if (!grown) mg_fatal(__FILE__, __LINE__, "out of host memory");
        if (ctx->n_blocks) memcpy(grown, ctx->blocks, sizeof(size_t) * (size_t)ctx->n_blocks);
        MG_FREE(ctx->blocks);
        ctx->blocks = grown;
        ctx->cap_blocks = cap;
    }
    ctx->blocks[ctx->n_blocks++] = ctx->arena_used;
    p = ctx->arena + ctx->arena_used;
    ctx->arena_used += need;
    if (ctx->arena_used > ctx->arena_peak) ctx->arena_peak = ctx->arena_used;
    return p;
}
MGDEF size_t mg_arena_mark(const mg_ctx *ctx) { return ctx->arena_used; }
MGDEF void mg_arena_release(mg_ctx *ctx, size_t mark) {
    if (mark > ctx->arena_used)
        mg_fatal(__FILE__, __LINE__, "arena release to %zu beyond the %zu bytes in use", mark,
                 ctx->arena_used);
    ctx->arena_used = mark;
    while (ctx->n_blocks > 0 && ctx->blocks[ctx->n_blocks - 1] >= mark) ctx->n_blocks--;
}
MGDEF void mg_arena_reset_peak(mg_ctx *ctx) { ctx->arena_peak = ctx->arena_used; }

/* The three copies: cudaMemcpyAsync on the context's stream, memmove on the CPU. A copy to the
   host waits for it (the host reads the buffer next); a copy from pageable host memory (all the
   library's host buffers) returns once the driver has staged the bytes, so the host may reuse
   its buffer at once and nothing waits for the device (CUDA's "API synchronization behavior":
   no device synchronisation for pageable host-to-device cudaMemcpyAsync).                    */
static void mg__copy(mg_ctx *ctx, void *dst, const void *src, size_t bytes, int kind) {
    if (!bytes || dst == src) return;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, (cudaMemcpyKind)kind, MG__STREAM(ctx)));
        if (kind == cudaMemcpyDeviceToHost) MG_CUDA_CHECK(cudaStreamSynchronize(MG__STREAM(ctx)));
        return;
    }
#endif
    (void)ctx; (void)kind;
    memmove(dst, src, bytes);
}
/* cudaMemcpyKind values (host->device 1, device->host 2, device->device 3). */
MGDEF void mg_copy_to_device(mg_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes) {
    mg__copy(ctx, dst_dev, src_host, bytes, 1);
}
MGDEF void mg_copy_to_host(mg_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes) {
    mg__copy(ctx, dst_host, src_dev, bytes, 2);
}
/* 1 iff the byte ranges [a, a + na) and [b, b + nb) share a byte. */
static int mg__ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return na && nb && a0 < b0 + nb && b0 < a0 + na;
}
MGDEF void mg_copy(mg_ctx *ctx, void *dst_dev, const void *src_dev, size_t bytes) {
    if (dst_dev != src_dev && mg__ranges_overlap(dst_dev, bytes, src_dev, bytes))
        mg_fatal(__FILE__, __LINE__, "mg_copy: %zu bytes from %p to %p: the ranges overlap "
                 "(they must be equal or disjoint)", bytes, src_dev, dst_dev);
    mg__copy(ctx, dst_dev, src_dev, bytes, 3);
}
MGDEF void mg_copy_2d(mg_ctx *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                      size_t width, size_t rows) {
    if (!width || !rows) return;
    if (dpitch < width || spitch < width)
        mg_fatal(__FILE__, __LINE__, "mg_copy_2d: pitches %zu (dst), %zu (src) below the width "
                 "%zu", dpitch, spitch, width);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        MG_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows,
                                        cudaMemcpyDeviceToDevice, MG__STREAM(ctx)));
        return;
    }
#endif
    (void)ctx;
    for (size_t r = 0; r < rows; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}
MGDEF void mg_memset_zero(mg_ctx *ctx, void *dst_dev, size_t bytes) {
    if (!bytes) return;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        MG_CUDA_CHECK(cudaMemsetAsync(dst_dev, 0, bytes, MG__STREAM(ctx)));
        return;
    }
#endif
    if (ctx && ctx->n_threads > 1 && bytes >= ((size_t)1 << 20)) {
        /* a large buffer (the gradients, zeroed every iteration) by all the context's threads,
           a contiguous part each, cut at cache lines: alone, one core's stores run at a fraction
           of the memory's bandwidth while the other cores wait (parts ≥ 1 MiB / threads, so
           every cut lies inside the range)                                                   */
        const uintptr_t base = (uintptr_t)dst_dev;
        const size_t part = bytes / (size_t)ctx->n_threads;
        int64_t parts = ctx->n_threads, i;
        #pragma omp parallel for num_threads(ctx->n_threads) schedule(static)
        for (i = 0; i < parts; i++) {   /* [cut i, cut i+1): cuts on 64-byte addresses */
            size_t lo = i == 0 ? 0 : ((base + part * (size_t)i) & ~(uintptr_t)63) - base;
            size_t hi = i == parts - 1 ? bytes : ((base + part * (size_t)(i + 1)) & ~(uintptr_t)63) - base;
            memset((char *)dst_dev + lo, 0, hi - lo);
        }
        return;
    }
    memset(dst_dev, 0, bytes);
}
MGDEF void mg_sync(mg_ctx *ctx) {
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) MG_CUDA_CHECK(cudaStreamSynchronize(MG__STREAM(ctx)));
#endif
    (void)ctx;
}

static void mg__graph_needs_cuda(const mg_ctx *ctx, const char *what) {
    if (ctx->device != MG_DEVICE_CUDA)
        mg_fatal(__FILE__, __LINE__, "%s: CUDA graphs need a CUDA context (this one is the CPU)",
                 what);
}
MGDEF void mg_graph_capture_begin(mg_ctx *ctx) {
    mg__graph_needs_cuda(ctx, "mg_graph_capture_begin");
#ifdef __CUDACC__
    MG_CUDA_CHECK(cudaStreamBeginCapture(MG__STREAM(ctx), cudaStreamCaptureModeThreadLocal));
#endif
}
MGDEF void mg_graph_capture_end(mg_ctx *ctx, mg_graph *g) {
    mg__graph_needs_cuda(ctx, "mg_graph_capture_end");
#ifdef __CUDACC__
    {
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        MG_CUDA_CHECK(cudaStreamEndCapture(MG__STREAM(ctx), &graph));
        MG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        g->graph = (void *)graph;
        g->exec = (void *)exec;
    }
#else
    (void)g;
#endif
}
MGDEF void mg_graph_launch(mg_ctx *ctx, const mg_graph *g) {
    mg__graph_needs_cuda(ctx, "mg_graph_launch");
#ifdef __CUDACC__
    MG_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)g->exec, MG__STREAM(ctx)));
#else
    (void)g;
#endif
}
MGDEF void mg_graph_free(mg_graph *g) {
#ifdef __CUDACC__
    if (g->exec) MG_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)g->exec));
    if (g->graph) MG_CUDA_CHECK(cudaGraphDestroy((cudaGraph_t)g->graph));
#endif
    g->graph = g->exec = NULL;
}

/* =============================================================================================
   6b. Dtypes and tensors
   ========================================================================================== */
MGDEF size_t mg_dtype_size(mg_dtype dt) {
    switch (dt) {
    case MG_F32: return 4;
    case MG_BF16: case MG_F16: return 2;
    }
    mg_fatal(__FILE__, __LINE__, "unknown dtype %d", (int)dt);
}
MGDEF const char *mg_dtype_name(mg_dtype dt) {
    switch (dt) {
    case MG_F32: return "fp32";
    case MG_BF16: return "bf16";
    case MG_F16: return "fp16";
    }
    return "unknown";
}
MGDEF int64_t mg_numel(const mg_tensor *t) {
    int64_t n = 1;
    int i;
    for (i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
MGDEF size_t mg_nbytes(const mg_tensor *t) { return (size_t)mg_numel(t) * mg_dtype_size(t->dtype); }

MGDEF mg_tensor mg_tensor_wrap(void *data, mg_dtype dt, int ndim, const int64_t *shape) {
    mg_tensor t;
    int i;
    memset(&t, 0, sizeof t);
    if (ndim < 1 || ndim > 4) mg_fatal(__FILE__, __LINE__, "tensor ndim %d (expected 1..4)", ndim);
    int64_t max_numel = INT64_MAX / (int64_t)mg_dtype_size(dt), numel = 1;
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            mg_fatal(__FILE__, __LINE__, "tensor dim %d is %lld (< 0)", i, (long long)shape[i]);
        if (shape[i] > 0 && numel > max_numel / shape[i])   /* numel and bytes fit an int64 */
            mg_fatal(__FILE__, __LINE__, "tensor dim %d is %lld: %lld x %lld elements of %s "
                     "are more bytes than an int64 counts", i, (long long)shape[i],
                     (long long)numel, (long long)shape[i], mg_dtype_name(dt));
        numel *= shape[i];
        t.shape[i] = shape[i];
    }
    t.data = data;
    t.dtype = dt;
    t.ndim = ndim;
    return t;
}
MGDEF mg_tensor mg_tensor_new(mg_ctx *ctx, mg_dtype dt, int ndim, const int64_t *shape) {
    mg_tensor t = mg_tensor_wrap(NULL, dt, ndim, shape);
    t.data = mg_alloc(ctx, mg_nbytes(&t));
    return t;
}
MGDEF mg_tensor mg_tensor_2d(mg_ctx *ctx, mg_dtype dt, int64_t rows, int64_t cols) {
    int64_t shape[2];
    shape[0] = rows;
    shape[1] = cols;
    return mg_tensor_new(ctx, dt, 2, shape);
}
MGDEF void *mg_claim_bytes(mg_claim *c, size_t bytes) {
    c->bytes += (bytes + MG__ARENA_ALIGN - 1) / MG__ARENA_ALIGN * MG__ARENA_ALIGN;
    return c->ctx ? mg_alloc(c->ctx, bytes) : NULL;
}
MGDEF float *mg_claim_f32(mg_claim *c, int64_t n) {
    return (float *)mg_claim_bytes(c, (size_t)n * sizeof(float));
}
MGDEF mg_tensor mg_claim_tensor(mg_claim *c, mg_dtype dt, int64_t d0, int64_t d1, int64_t d2,
                                int64_t d3) {
    int64_t shape[4];
    mg_tensor t;
    shape[0] = d0; shape[1] = d1; shape[2] = d2; shape[3] = d3;
    t = mg_tensor_wrap(NULL, dt, d3 ? 4 : d2 ? 3 : 2, shape);
    t.data = mg_claim_bytes(c, mg_nbytes(&t));
    return t;
}

MGDEF mg_tensor mg_tensor_rows(const mg_tensor *t, int64_t r0, int64_t n) {
    mg_tensor v = *t;
    int64_t per_row = t->shape[0] ? mg_numel(t) / t->shape[0] : 0;
    if (r0 < 0 || n < 0 || r0 + n > t->shape[0])
        mg_fatal(__FILE__, __LINE__, "rows [%lld, %lld) outside a tensor of %lld rows",
                 (long long)r0, (long long)(r0 + n), (long long)t->shape[0]);
    v.data = (char *)t->data + (size_t)(r0 * per_row) * mg_dtype_size(t->dtype);
    v.shape[0] = n;
    return v;
}
MGDEF int64_t mg_rows(const mg_tensor *t) {
    int64_t r = 1;
    int i;
    for (i = 0; i + 1 < t->ndim; i++) r *= t->shape[i];
    return r;
}
MGDEF int64_t mg_cols(const mg_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 0; }

/* =============================================================================================
   6c. Shared kernel math (host and device). The CPU backend loops over rows/elements calling
       these; the CUDA kernels map rows to blocks and call the very same functions.
   ========================================================================================== */
#define MG__LN_EPS 1e-5f
#define MG__SQRT_2_OVER_PI 0.7978845608028654f
#define MG__GELU_C 0.044715f

/* exp(x) for the kernels. Device code uses CUDA's expf. Host code uses a branch-free
   Cody-Waite reduction + degree-6 polynomial (Cephes expf, ~1 ulp) that the compiler
   vectorises inside `omp simd` loops, which glibc's expf is not. |x| is first clamped to 87
   with integer operations on its bits (a float comparison would stop the vectoriser), so the
   result saturates at e^±87 (1.6e-38 .. 6.1e37, enough for softmax and sigmoid); NaN stays
   NaN. 2^n comes from the bits of x·log2(e) + 1.5·2^23, whose low mantissa bits hold round(n). */
MG_HD static inline float mg__exp(float x) {
#ifdef __CUDA_ARCH__
    return expf(x);
#else
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    uint32_t u = mg__f32_bits(x), ax = u & 0x7FFFFFFFu;
    uint32_t clamp = (ax > 0x42AE0000u) & (ax <= 0x7F800000u); /* 87 < |x| <= inf */
    float t, n, r, p;
    x = mg__bits_f32(clamp ? (u & 0x80000000u) | 0x42AE0000u : u);
    t = x * 1.44269504088896341f + magic;
    n = t - magic;
    r = x - n * 0.693359375f - n * -2.12194440e-4f;
    p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
          4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * mg__bits_f32((mg__f32_bits(t) - 0x4B400000u + 127u) << 23);
#endif
}

/* GELU, tanh approximation (Hendrycks & Gimpel; GPT-2):
     gelu(x) = ½·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³).
   With s = σ(2u) = 1/(1 + e^(−2u)) we have ½(1 + tanh u) = s and 1 − tanh²u = 4s(1 − s), so
     gelu(x)  = x·s
     gelu'(x) = s + ½·x·4s(1−s)·u' = s·(1 + 2x·(1−s)·u'),  u' = √(2/π)·(1 + 3·0.044715·x²)
   — one exp, no cancellation near tanh = −1.                                               */
MG_HD static inline float mg__gelu_sigmoid(float x) {
    float u = MG__SQRT_2_OVER_PI * (x + MG__GELU_C * x * x * x);
    return 1.0f / (1.0f + mg__exp(-2.0f * u));
}
MG_HD static inline float mg__gelu(float x) { return x * mg__gelu_sigmoid(x); }
MG_HD static inline float mg__gelu_grad(float x) {
    float s = mg__gelu_sigmoid(x);
    float du = MG__SQRT_2_OVER_PI * (1.0f + 3.0f * MG__GELU_C * x * x);
    return s * (1.0f + 2.0f * x * (1.0f - s) * du);
}
/* GELU, exact (erf): PyTorch's F.gelu, Megatron-LM's unfused MLP, Hugging Face's "gelu":
     gelu(x) = x·Φ(x),  Φ(x) = ½·erfc(−x/√2),  gelu'(x) = Φ(x) + x·φ(x),  φ(x) = e^(−x²/2)/√(2π).
   erfc(z), z = |x|/√2, by Numerical Recipes' Chebyshev fit ("erfcc"; fractional error below
   1.2e-7 for every z ≥ 0): erfc(z) = t·exp(P(t) − z²), t = 1/(1 + z/2), P of degree 9; then
   Φ(x) = ½·erfc(z) for x < 0, 1 − ½·erfc(z) otherwise, taken with copysign. One exp
   (mg__exp), no branch: the loops vectorise, where libm's erff runs one value at a time.
   Against float64 on x ∈ [−12, 12]: gelu within 4.5e-7 and gelu' within 2.1e-7 absolute
   (libm's erff: 4.5e-7 and 1.3e-7) — the same up to rounding near x = ±5, where an ulp of x
   is 4.8e-7.                                                                               */
MG_HD static inline float mg__phi(float x) {
    float z = fabsf(x) * 0.70710678118654752440f;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f +
              t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f +
              t * (-0.82215223f + t * 0.17087277f))))))));
    float half_erfc = 0.5f * t * mg__exp(p - z * z);   /* Φ(−|x|) */
    return 0.5f + copysignf(0.5f - half_erfc, x);
}
MG_HD static inline float mg__gelu_erf(float x) { return x * mg__phi(x); }
MG_HD static inline float mg__gelu_erf_grad(float x) {
    return mg__phi(x) + x * (0.39894228040143267794f * mg__exp(-0.5f * x * x));
}
/* Squared ReLU: relu2(x) = max(x, 0)², relu2'(x) = 2·max(x, 0) (0 at x = 0, as PyTorch's
   autograd of pow(relu(x), 2) gives).                                                      */
MG_HD static inline float mg__relu2(float x) {
    float r = x > 0.0f ? x : 0.0f;
    return r * r;
}
MG_HD static inline float mg__relu2_grad(float x) { return x > 0.0f ? 2.0f * x : 0.0f; }
/* The activation of kind k (mg_act_kind) and its derivative. */
MG_HD static inline float mg__act(int k, float x) {
    return k == MG_ACT_RELU2 ? mg__relu2(x) : k == MG_ACT_GELU_ERF ? mg__gelu_erf(x) : mg__gelu(x);
}
MG_HD static inline float mg__act_grad(int k, float x) {
    return k == MG_ACT_RELU2     ? mg__relu2_grad(x)
           : k == MG_ACT_GELU_ERF ? mg__gelu_erf_grad(x)
                                  : mg__gelu_grad(x);
}

/* LayerNorm of a row x[C]: mean μ, variance σ² = mean((x−μ)²) (biased, as PyTorch),
   rstd = 1/√(σ²+ε), norm = (x−μ)·rstd, out = norm·w + b. Backward with g = dout·w:
     dx = rstd · (g − mean(g) − norm · mean(g·norm)),  dw += dout·norm,  db += dout.
   RMSNorm is the same with μ = 0 and without the mean(g) term (no centring to undo):
     dx = rstd · (g − norm · mean(g·norm)): the callers pass mean_g = 0.                   */
MG_HD static inline float mg__ln_rstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }
MG_HD static inline float mg__ln_dx(float g, float norm, float rstd, float mean_g,
                                    float mean_g_norm) {
    return rstd * (g - mean_g - norm * mean_g_norm);
}

/* SiLU (swish), SwiGLU's gate: silu(x) = x·σ(x), silu'(x) = σ(x)·(1 + x·(1 − σ(x))). */
MG_HD static inline float mg__sigmoid(float x) { return 1.0f / (1.0f + mg__exp(-x)); }
MG_HD static inline float mg__silu(float x) { return x * mg__sigmoid(x); }
MG_HD static inline float mg__silu_grad(float x) {
    float s = mg__sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

/* One rotary pair (x1, x2) = (x_i, x_{i+h}) by the angle with cosine c and sine s (s negated
   for the backward, the inverse rotation).                                                 */
MG_HD static inline void mg__rope_pair(float *x1, float *x2, float c, float s) {
    float a = *x1, b = *x2;
    *x1 = a * c - b * s;
    *x2 = b * c + a * s;
}

/* Softmax backward for one row: ds = p · (dp − Σ_j p_j·dp_j). */
MG_HD static inline float mg__softmax_grad(float p, float dp, float dot_p_dp) {
    return p * (dp - dot_p_dp);
}

/* Dropout: element with global index g is kept iff its random word >= threshold = p·2^32;
   kept values are scaled by 1/(1−p) so the expectation is unchanged.                       */
MG_HD static inline float mg__dropout(float x, uint32_t bits, uint32_t threshold, float scale) {
    return bits >= threshold ? x * scale : 0.0f;
}
/* Dropout of a[0..4), the 4 elements of index group c (global indices 4c … 4c + 3): one
   Philox evaluation, its word i for element 4c + i (what mg_rand_u32 returns for each). */
MG_HD static MG__FORCE_INLINE void mg__dropout_group(float *o, const float *a, uint64_t key,
                                                    uint64_t c, uint32_t threshold, float scale) {
    mg__philox4 w = mg__philox4x32(key, (uint32_t)c, (uint32_t)(c >> 32), 0, 0);
    o[0] = mg__dropout(a[0], w.x[0], threshold, scale);
    o[1] = mg__dropout(a[1], w.x[1], threshold, scale);
    o[2] = mg__dropout(a[2], w.x[2], threshold, scale);
    o[3] = mg__dropout(a[3], w.x[3], threshold, scale);
}
static uint32_t mg__dropout_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

/* Tiled attention (mg_attn_block_*), the math shared by the CPU twin and the CUDA kernels.
   Element offset of head row (t, b, g, j) of a view; the number of keys of a tile starting at
   position kpos (nk keys) that a query at position qpos sees; the dropout counter of (query,
   key) in the global [B, n_head_total, T_g, T_g] mask (bh = b·n_head_total + global head).   */
MG_HD static inline int64_t mg__view_at(const mg_attn_view *v, int64_t t, int b, int g, int j) {
    return t * v->ld_t + (int64_t)b * v->ld_b + (int64_t)g * v->ld_g + (int64_t)j * v->ld_h;
}
MG_HD static inline int mg__attn_visible(int64_t qpos, int64_t kpos, int nk) {
    int64_t n = qpos - kpos + 1;
    return n <= 0 ? 0 : n < nk ? (int)n : nk;
}
/* Key tiles a query tile whose last row is at position q_last sees (tiles past it skipped),
   and the first query tile that sees a key tile whose first key is at position k_first. */
MG_HD static inline int mg__attn_key_tiles(const mg_attn_block *a, int64_t q_last) {
    int64_t n = q_last - a->k_pos0 + 1;
    if (n <= 0) return 0;
    if (n > a->Tk) n = a->Tk;
    return (int)((n + MG_ATTN_TILE - 1) / MG_ATTN_TILE);
}
MG_HD static inline int mg__attn_first_query_tile(const mg_attn_block *a, int64_t k_first) {
    int64_t t = k_first - a->q_pos0;
    return t <= 0 ? 0 : (int)(t / MG_ATTN_TILE);
}
MG_HD static inline uint64_t mg__attn_drop_index(int64_t bh, int64_t T_g, int64_t qpos,
                                                 int64_t kpos) {
    return ((uint64_t)bh * (uint64_t)T_g + (uint64_t)qpos) * (uint64_t)T_g + (uint64_t)kpos;
}
/* The dropout of the probabilities as the kernels see it (k.p = 0: off). */
typedef struct mg__attn_drop_k {
    uint64_t key;
    uint32_t threshold;
    float scale;
    int on;
    int64_t bh0, T_g;        /* b·n_head_total + head_offset: add the local head */
    int nh_total;
} mg__attn_drop_k;
/* Head h of sequence b as the generator's index counts heads: b·n_head_total + offset + h. */
MG_HD static inline int64_t mg__attn_drop_bh(const mg__attn_drop_k *k, int b, int h) {
    return (int64_t)b * k->nh_total + k->bh0 + h;
}
/* The random word of score (qpos, kpos) of that head. */
MG_HD static inline uint32_t mg__attn_drop_word(const mg__attn_drop_k *k, int b, int h,
                                                int64_t qpos, int64_t kpos) {
    return mg_rand_u32(k->key, mg__attn_drop_index(mg__attn_drop_bh(k, b, h), k->T_g, qpos, kpos));
}
/* x through the dropout whose word is bits (x itself when dropout is off). */
MG_HD static inline float mg__attn_drop_bits(const mg__attn_drop_k *k, uint32_t bits, float x) {
    return k->on ? mg__dropout(x, bits, k->threshold, k->scale) : x;
}
MG_HD static inline float mg__attn_drop(const mg__attn_drop_k *k, int b, int h, int64_t qpos,
                                        int64_t kpos, float x) {
    return k->on ? mg__attn_drop_bits(k, mg__attn_drop_word(k, b, h, qpos, kpos), x) : x;
}
/* x as the 16 bits of a 16-bit storage type dt (bf16 or fp16): the tensor-core kernels' P and
   dS tiles. */
MG_HD static inline uint16_t mg__attn_to16(float x, mg_dtype dt) {
    return dt == MG_BF16 ? mg_f32_to_bf16(x) : mg_f32_to_f16(x);
}
/* x rounded to the storage type dt (fp32: as is): a probability as the 16-bit products take it,
   a 16-bit accumulator after each add. */
MG_HD static inline float mg__attn_round(float p, mg_dtype dt) {
    return dt == MG_BF16 ? mg_bf16_to_f32(mg_f32_to_bf16(p)) :
           dt == MG_F16 ? mg_f16_to_f32(mg_f32_to_f16(p)) : p;
}
/* One recomputed entry of the backward (every backend's), from its probability p and the
   raw dp = dO·v: *pd = D(P) and the result dS = P·(D'(dp) − Δ), both rounded to dt, the type
   the products take them in (fp32: as they are). */
MG_HD static inline float mg__attn_ds_p(const mg__attn_drop_k *k, uint32_t bits, float p,
                                        float dp, float delta, mg_dtype dt, float *pd) {
    *pd = mg__attn_round(mg__attn_drop_bits(k, bits, p), dt);
    return mg__attn_round(p * (mg__attn_drop_bits(k, bits, dp) - delta), dt);
}
/* The same from the scaled score s: P = exp(s − lse). */
MG_HD static inline float mg__attn_ds_bits(const mg__attn_drop_k *k, uint32_t bits, float s,
                                           float dp, float lse, float delta, mg_dtype dt,
                                           float *pd) {
    return mg__attn_ds_p(k, bits, mg__exp(s - lse), dp, delta, dt, pd);
}
/* The same with the entry's random word drawn here (from its position). */
MG_HD static inline float mg__attn_ds(const mg__attn_drop_k *k, int b, int h, int64_t qpos,
                                      int64_t kpos, float s, float dp, float lse, float delta,
                                      mg_dtype dt, float *pd) {
    uint32_t bits = k->on ? mg__attn_drop_word(k, b, h, qpos, kpos) : 0u;
    return mg__attn_ds_bits(k, bits, s, dp, lse, delta, dt, pd);
}
/* End of a query row's online softmax: o = acc/l and lse = m + log l (−inf, o = 0, for a row
   that saw no key), merged with an earlier (o_old, lse_old) when merge: the weights
   e^(lse_x − lse') sum to 1 with lse' = log(e^lse_old + e^lse_new). Returns the row's lse and
   sets w_new, w_old, the factors of acc and of o_old in the row's output.                     */
MG_HD static inline float mg__attn_finish(float m, float l, int merge, float lse_old,
                                          float *w_new, float *w_old) {
    float lse_new = l > 0.0f ? m + logf(l) : -INFINITY, mx, lse;
    *w_old = 0.0f;
    *w_new = l > 0.0f ? 1.0f / l : 0.0f;
    if (!merge || lse_old == -INFINITY) return lse_new;
    if (lse_new == -INFINITY) { *w_old = 1.0f; return lse_old; }
    mx = lse_old > lse_new ? lse_old : lse_new;
    lse = mx + logf(mg__exp(lse_old - mx) + mg__exp(lse_new - mx));
    *w_old = mg__exp(lse_old - lse);
    *w_new *= mg__exp(lse_new - lse);
    return lse;
}

/* Cross-entropy over a vocabulary slice. Real (non-padding) columns of a slice that starts at
   vocab_start with Vs columns are the first mg__xent_real_cols of them.
   Per row: loss = log Σ_j exp(l_j − max) + max − l_target,
            dl_j = (exp(l_j − max)/Σ − [j = target]) · dloss.                                 */
MG_HD static inline int64_t mg__xent_real_cols(int64_t vocab_start, int64_t vocab_size,
                                               int64_t Vs) {
    int64_t real = vocab_size - vocab_start;
    return real < 0 ? 0 : (real > Vs ? Vs : real);
}
MG_HD static inline float mg__xent_loss(float rowmax, float sumexp, float tlogit) {
    return logf(sumexp) + rowmax - tlogit;
}
MG_HD static inline float mg__xent_dlogit(float logit, float rowmax, float sumexp,
                                          float onehot, float dloss) {
    return (mg__exp(logit - rowmax) / sumexp - onehot) * dloss;
}
/* Online softmax statistics: a running (max m, Σ s = Σ exp(l − m)) takes one more logit l;
   a partial Σ taken under max m moves to a larger max M by the factor exp(m − M) (an empty
   one, s = 0 with m = −inf, stays 0 instead of 0·exp(−inf + inf) = NaN).                    */
MG_HD static inline void mg__xent_online(float *m, float *s, float l) {
    if (l > *m) {
        *s = *s * mg__exp(*m - l) + 1.0f;
        *m = l;
    } else {
        *s += mg__exp(l - *m);
    }
}
MG_HD static inline float mg__xent_rescale(float s, float m, float M) {
    return s > 0.0f ? s * mg__exp(m - M) : 0.0f;
}

/* AdamW element, torch.optim.AdamW's order: decay, moments, bias-corrected step.
   step_size = lr/(1−β1^t) and bc2_sqrt = √(1−β2^t) are computed once per step
   (mg_adamw_args_set), the decay factor 1 − lr·wd once per piece (mg__adamw_k_of), wd the
   step's weight decay × the piece's wd_mult.                                               */
typedef struct mg__adamw_k {
    float lr, beta1, beta2, eps, decay_factor /* 1 − lr·wd */, step_size, bc2_sqrt, grad_scale;
} mg__adamw_k;
MG_HD static inline mg__adamw_k mg__adamw_k_of(const mg_adamw_args *a, float beta1, float beta2,
                                               float eps, float wd_mult, int lr_group) {
    mg__adamw_k k;
    k.lr = lr_group ? a->lr2 : a->lr; k.beta1 = beta1; k.beta2 = beta2; k.eps = eps;
    k.decay_factor = (float)(1.0 - (double)k.lr * (a->weight_decay * wd_mult));
    k.step_size = lr_group ? a->step_size2 : a->step_size;
    k.bc2_sqrt = a->bc2_sqrt;
    k.grad_scale = a->grad_scale;
    return k;
}
MG_HD static inline float mg__adamw(float param, float grad, float *m, float *v,
                                    const mg__adamw_k *k) {
    float g = grad * k->grad_scale;
    float mi = k->beta1 * *m + (1.0f - k->beta1) * g;
    float vi = k->beta2 * *v + (1.0f - k->beta2) * g * g;
    *m = mi;
    *v = vi;
    param *= k->decay_factor;
    /* vi >= 0; the fabsf tells the compiler so (sqrtf then needs no errno branch and the host
       loop vectorises) */
    return param - k->step_size * mi / (sqrtf(fabsf(vi)) / k->bc2_sqrt + k->eps);
}

/* =============================================================================================
   6d. CPU backend: OpenMP over rows / chunks / columns; GEMMs through the packed AVX-512 sgemm
       below, or OpenBLAS (single-threaded inside our threads).
       fp32 tensors are used in place; 16-bit tensors are widened to fp32 rows or chunks, the
       same fp32 code runs, and results are rounded back (one code path for the math).
   ========================================================================================== */
#ifdef _OPENMP
#define MG__TID() omp_get_thread_num()
#define MG__NTH() omp_get_num_threads()
#else
#define MG__TID() 0
#define MG__NTH() 1
#endif
#define MG__PAR_MIN 32768 /* loops over fewer elements than this run on one thread */
#define MG__CHUNK 2048    /* elements per chunk of the elementwise ops                */
#define MG__COLBLOCK 64   /* columns per thread task in column reductions           */

static void mg__cpu_widen(float *dst, const void *src, mg_dtype dt, int64_t off, int64_t n) {
    int64_t i;
    const uint16_t *h = (const uint16_t *)src + off;
    switch (dt) {
    case MG_F32: memcpy(dst, (const float *)src + off, (size_t)n * sizeof(float)); break;
    case MG_BF16: for (i = 0; i < n; i++) dst[i] = mg_bf16_to_f32(h[i]); break;
    case MG_F16: for (i = 0; i < n; i++) dst[i] = mg_f16_to_f32(h[i]); break;
    }
}
static void mg__cpu_narrow(void *dst, mg_dtype dt, int64_t off, const float *src, int64_t n) {
    int64_t i;
    uint16_t *h = (uint16_t *)dst + off;
    switch (dt) {
    case MG_F32:
        if ((float *)dst + off != src) memcpy((float *)dst + off, src, (size_t)n * sizeof(float));
        break;
    case MG_BF16: for (i = 0; i < n; i++) h[i] = mg_f32_to_bf16(src[i]); break;
    case MG_F16: for (i = 0; i < n; i++) h[i] = mg_f32_to_f16(src[i]); break;
    }
}
/* fp32 view of elements [off, off+n) of t: the storage itself when fp32, else a widened copy
   in buf. mg__cpu_out_span is the writable counterpart; mg__cpu_commit rounds buf back.     */
static const float *mg__cpu_span(const mg_tensor *t, int64_t off, int64_t n, float *buf) {
    if (t->dtype == MG_F32) return (const float *)t->data + off;
    mg__cpu_widen(buf, t->data, t->dtype, off, n);
    return buf;
}
static float *mg__cpu_out_span(const mg_tensor *t, int64_t off, float *buf) {
    return t->dtype == MG_F32 ? (float *)t->data + off : buf;
}
static void mg__cpu_commit(const mg_tensor *t, int64_t off, const float *v, int64_t n) {
    if (t->dtype != MG_F32) mg__cpu_narrow(t->data, t->dtype, off, v, n);
}
/* Per-thread fp32 scratch (floats_per_thread each) from the arena, only when some tensor is
   16-bit: fp32-only calls allocate nothing.                                                  */
static float *mg__cpu_scratch(mg_ctx *ctx, int needed, size_t floats_per_thread) {
    if (!needed) return NULL;
    return (float *)mg_alloc(ctx, (size_t)ctx->n_threads * floats_per_thread * sizeof(float));
}
static int mg__f32(const mg_tensor *t) { return !t || t->dtype == MG_F32; }

/* --- GEMM -------------------------------------------------------------------------------- */
/* What a CPU GEMM does besides C = α·op(A)·op(B) + β·C: the linear layers' fusions, the CPU
   twins of cuBLASLt's epilogues. NULL members are not wanted.
     bias  m floats added to every column of C in place of β·C: C = α·op(A)·op(B) + bias, β
           ignored (the linear layer's bias; cuBLASLt's BIAS). The packed kernel adds it to the
           accumulators of the first k-slice, giving the bits of C = bias followed by a β = 1
           GEMM, which is what the OpenBLAS path does.
     add   a matrix shaped like C (C's leading dimension) added to the final C: C = (α·op(A)·
           op(B) + bias or β·C) + add (the residual connection after a row-parallel linear;
           the bits of the GEMM followed by mg_add). The packed kernel adds it to each micro-
           tile of the last k-slice as the tile is stored. Batch 1 only.
     bsum  n floats: bsum[j] += Σ_p op(B)[p, j], in order over p (the bias gradient of a weight-
           gradient GEMM, whose op(B) is the output gradient; BGRADB). The packed sgemm sums
           each panel of op(B) just before its first micro-kernels read it, so the sum costs no
           extra pass; its bits are those of mg__cpu_colsum. Batch 1 only.                  */
typedef struct mg__cpu_epi { const float *bias, *add; float *bsum; } mg__cpu_epi;
/* bsum[j] += Σ_{p<kc} op(B)[p, j] for j < nc, in order over p, op(B)'s element (p, j) at
   b[p·sp + j·sj] (sp = 1 or sj = 1).                                                         */
static void mg__cpu_bsum(int kc, int nc, const float *b, size_t sp, size_t sj, float *bsum) {
    int p, j;
    if (sj == 1) {
        for (p = 0; p < kc; p++) {
            #pragma omp simd
            for (j = 0; j < nc; j++) bsum[j] += b[(size_t)p * sp + j];
        }
        return;
    }
    for (j = 0; j < nc; j++) {
        const float *col = b + (size_t)j * sj;
        float acc = bsum[j];
        for (p = 0; p < kc; p++) acc += col[p];
        bsum[j] = acc;
    }
}
#if defined(MG__OWN_SGEMM) || defined(MG__TILE_AVX2)
/* 8×8 transpose: 8 rows of 8 floats at s (row stride ls) into 8 rows at d (row stride ld).
   AVX (256-bit) only: the packed sgemm and the tiled attention's transposed loads use it. */
static inline void mg__sg_tr8(const float *s, size_t ls, float *d, size_t ld) {
    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls);
    __m256 r2 = _mm256_loadu_ps(s + 2 * ls), r3 = _mm256_loadu_ps(s + 3 * ls);
    __m256 r4 = _mm256_loadu_ps(s + 4 * ls), r5 = _mm256_loadu_ps(s + 5 * ls);
    __m256 r6 = _mm256_loadu_ps(s + 6 * ls), r7 = _mm256_loadu_ps(s + 7 * ls);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#define MG__HAVE_TR8 1
#endif
#ifdef MG__OWN_SGEMM
/* The CPU sgemm, column-major C(m×n) = α·op(A)·op(B) + β·C (cblas_sgemm's arguments), as a
   packed, blocked GEMM in the Goto/BLIS scheme with an AVX-512 micro-kernel. On the machine it
   was tuned on (AMD Zen 4: two 256-bit FMA pipes, 117 GFLOP/s a core) it runs the training
   step's layer shapes at 94 % of the FMA peak on two threads, OpenBLAS 0.3.21 threading itself
   at 91 % (bench/train's GEMM-only line prints both).
     Blocks: for each NC-column block of C (jc) and each k-slice (pc: ⌈k/KC⌉ equal slices),
       for each MC-row block (ic), op(A)'s mc×kc slice is packed into MR-row panels (kc×MR,
       k-major); then every (NR-column panel of op(B), MR panel) pair runs the micro-kernel.
       op(B) is read in place, its panel's 8 columns as 8 strided runs (or 8 contiguous floats
       per k-step when B is transposed): only its ragged last panel (nc mod 8 columns) is
       packed, zero-padded. Packing op(B) as well cost more than it saved — the shared operand
       of a GEMM split over threads would be packed by each — about 3 % of the layer GEMMs'
       time at the training step's shapes.
     Micro-kernel: an MR×NR = 48×8 block of C in 24 zmm accumulators (3 vectors of 16 rows
       × 8 columns); per k it loads the 48 floats of the A panel and broadcasts the 8 of the
       B panel: 24 FMAs to 11 loads. The B panel (kc×8 floats, 12 KiB at kc = 384) stays in
       L1 while the A panels of the block stream from L2 (240×384 floats, 360 KiB).
     Every C element is one sum over k in order, slice by slice: its value does not depend on
       m, n, the block sizes or how C is split over threads — only on k (the slice bounds).
       KC = 384 keeps each in-order chain as short as OpenBLAS's (a 512-deep slice was no
       faster and left the unfused attention's P·V over T = 1000 keys at the edge of
       test_flash's 1e-6 bound against float64).
     Edges: panels are zero-padded; C's ragged rows are masked, ragged columns skipped. β = 0
       never reads C; α = 0 or k = 0 reads neither A nor B (BLAS's rules).
   Packing buffers: one MC×KC + KC×NR area per thread (372 KiB), allocated with the context
   (ctx->cpu_gemm_pack).                                                                      */

/* op(X)'s block of `len` vectorised indices (C's rows for A, its columns for B) × kc into
   panels of `w` indices, panel q at dst + q·w·kc holding [p][0..w) (zero past len).
   trans = 0: index i of k-step p is X[i + p·ld] (runs of w contiguous floats per p);
   trans = 1: it is X[p + i·ld] (each index's k-run contiguous: 8×8 transposes).             */
static void mg__sg_pack(int trans, int w, int len, int kc, const float *X, size_t ld, float *dst) {
    int i0, p, q, ii;
    for (i0 = 0; i0 < len; i0 += w) {
        int n = len - i0 < w ? len - i0 : w, p8 = n == w ? kc & ~7 : 0;
        float *d = dst + (size_t)i0 * kc;
        if (!trans && n == w && w == MG__SG_MR) {   /* three zmm per k-row */
            for (p = 0; p < kc; p++)
                for (q = 0; q < 3; q++)
                    _mm512_store_ps(d + (size_t)p * w + 16 * q,
                                    _mm512_loadu_ps(X + i0 + (size_t)p * ld + 16 * q));
        } else if (!trans) {
            for (p = 0; p < kc; p++)
                for (ii = 0; ii < w; ii++) d[(size_t)p * w + ii] = ii < n ? X[i0 + ii + (size_t)p * ld] : 0.0f;
        } else {
            for (ii = 0; ii < w && p8; ii += 8)
                for (p = 0; p < p8; p += 8)
                    mg__sg_tr8(X + (size_t)(i0 + ii) * ld + p, ld, d + (size_t)p * w + ii, (size_t)w);
            for (ii = 0; ii < w; ii++) {
                const float *x = X + (size_t)(i0 + ii) * ld;
                if (ii < n) for (p = p8; p < kc; p++) d[(size_t)p * w + ii] = x[p];
                else        for (p = 0; p < kc; p++) d[(size_t)p * w + ii] = 0.0f;
            }
        }
    }
}
/* C[0..mr)×[0..nr) (column stride ldc) = α·(A panel · B panel) + β·C over kc k-steps, with
   the panel's first nv of its 3 vectors of rows (nv = ⌈mr/16⌉: a short last panel skips the
   FMAs of its zero rows). The B panel's element (p, j) is pb[p·sp + j·sj]: op(B) in place
   (sp = 1, sj = ldb; or sp = ldb, sj = 1) or packed (sp = NR, sj = 1); all 8 columns are
   read, so a panel of fewer is a packed one. bias (the panel's mr rows of it), when given,
   takes β·C's place: C = α·A·B + bias. add (the tile of mg__cpu_epi's add, at C's offsets),
   when given, is added to the stored result. Inlined with a constant nv and a constant 1 for sp or
   sj, one specialised copy each.                                                            */
static inline __attribute__((always_inline)) void
mg__sg_kernel_nv(const int nv, int kc, const float *pa, const float *pb, size_t sp, size_t sj,
                 float *C, size_t ldc, float alpha, float beta, const float *bias,
                 const float *add, int mr, int nr) {
    __m512 acc[MG__SG_NR][3], va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    __mmask16 mask[3];
    int j, v, p;
#pragma GCC unroll 8
    for (j = 0; j < MG__SG_NR; j++)
#pragma GCC unroll 3
        for (v = 0; v < nv; v++) acc[j][v] = _mm512_setzero_ps();
    for (j = 0; j < nr; j++)   /* C's lines, wanted at the end: start fetching them now */
        for (v = 0; v < nv; v++) {
            _mm_prefetch((const char *)(C + (size_t)j * ldc + 16 * v), _MM_HINT_T0);
            if (add) _mm_prefetch((const char *)(add + (size_t)j * ldc + 16 * v), _MM_HINT_T0);
        }
    for (p = 0; p < kc; p++) {
        __m512 a[3];
#pragma GCC unroll 3
        for (v = 0; v < nv; v++) a[v] = _mm512_load_ps(pa + (size_t)p * MG__SG_MR + 16 * v);
        /* the A panel 32 k-steps ahead (it streams from L2) */
        _mm_prefetch((const char *)(pa + (size_t)(p + 32) * MG__SG_MR), _MM_HINT_T0);
#pragma GCC unroll 8
        for (j = 0; j < MG__SG_NR; j++) {
            __m512 b = _mm512_set1_ps(pb[(size_t)p * sp + (size_t)j * sj]);
#pragma GCC unroll 3
            for (v = 0; v < nv; v++) acc[j][v] = _mm512_fmadd_ps(a[v], b, acc[j][v]);
        }
    }
    for (v = 0; v < nv; v++) {
        int r = mr - 16 * v;
        mask[v] = r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1);
    }
    for (j = 0; j < nr; j++) {
        float *c = C + (size_t)j * ldc;
        for (v = 0; v < nv; v++) {
            __m512 r = _mm512_mul_ps(va, acc[j][v]);
            if (bias) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask[v], bias + 16 * v));
            else if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[v], c + 16 * v), r);
            if (add) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask[v], add + (size_t)j * ldc + 16 * v));
            _mm512_mask_storeu_ps(c + 16 * v, mask[v], r);
        }
    }
}
static void mg__sg_kernel(int kc, const float *pa, const float *pb, size_t sp, size_t sj,
                          float *C, size_t ldc, float alpha, float beta, const float *bias,
                          const float *add, int mr, int nr) {
    if (sj == 1) {   /* 8 contiguous floats per k-step */
        if (mr > 32)      mg__sg_kernel_nv(3, kc, pa, pb, sp, 1, C, ldc, alpha, beta, bias, add, mr, nr);
        else if (mr > 16) mg__sg_kernel_nv(2, kc, pa, pb, sp, 1, C, ldc, alpha, beta, bias, add, mr, nr);
        else              mg__sg_kernel_nv(1, kc, pa, pb, sp, 1, C, ldc, alpha, beta, bias, add, mr, nr);
    } else {         /* 8 runs along k (sp = 1) */
        if (mr > 32)      mg__sg_kernel_nv(3, kc, pa, pb, 1, sj, C, ldc, alpha, beta, bias, add, mr, nr);
        else if (mr > 16) mg__sg_kernel_nv(2, kc, pa, pb, 1, sj, C, ldc, alpha, beta, bias, add, mr, nr);
        else              mg__sg_kernel_nv(1, kc, pa, pb, 1, sj, C, ldc, alpha, beta, bias, add, mr, nr);
    }
}
/* mg__cpu_bsum of one panel of op(B): 8 contiguous floats per k-step (sj = 1, a whole panel)
   in one ymm accumulator — the same in-order sums, in vector lanes.                         */
static void mg__sg_bsum(int kc, int nr, const float *b, size_t sp, size_t sj, float *bsum) {
    if (sj == 1 && nr == MG__SG_NR) {
        __m256 acc = _mm256_loadu_ps(bsum);
        int p;
        for (p = 0; p < kc; p++) acc = _mm256_add_ps(acc, _mm256_loadu_ps(b + (size_t)p * sp));
        _mm256_storeu_ps(bsum, acc);
        return;
    }
    mg__cpu_bsum(kc, nr, b, sp, sj, bsum);
}
/* One sgemm on the calling thread, op(A) packed into pa (MG__SG_MC × MG__SG_KC floats),
   op(B) read in place but for its ragged last panel, packed into pb (MG__SG_KC × MG__SG_NR).
   epi (NULL, or what mg__cpu_epi lists): see mg__cpu_sgemm.                                 */
static void mg__sg_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, const mg__cpu_epi *epi,
                        float *C, int ldc, float *pa, float *pb) {
    const float *bias = epi ? epi->bias : NULL;
    const float *add = epi ? epi->add : NULL;
    float *bsum = epi ? epi->bsum : NULL;
    int jc, pc, ic, jr, ir, slices, kstep;
    if (m <= 0 || n <= 0) return;
    if (alpha == 0.0f || k <= 0) {   /* C = β·C (or the bias); op(B) is read for bsum only */
        for (jc = 0; jc < n; jc++)
            for (ic = 0; ic < m; ic++) {
                float *c = C + ic + (size_t)jc * ldc;
                *c = bias ? bias[ic] : beta == 0.0f ? 0.0f : beta * *c;
                if (add) *c += add[ic + (size_t)jc * ldc];
            }
        if (bsum && k > 0) mg__cpu_bsum(k, n, B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, bsum);
        return;
    }
    slices = (k + MG__SG_KC - 1) / MG__SG_KC;
    kstep = (k + slices - 1) / slices;
    for (jc = 0; jc < n; jc += MG__SG_NC) {
        const int nc = n - jc < MG__SG_NC ? n - jc : MG__SG_NC;
        const int nfull = nc - nc % MG__SG_NR;   /* columns in whole panels, read in place */
        for (pc = 0; pc < k; pc += kstep) {
            const int kc = k - pc < kstep ? k - pc : kstep;
            const float be = pc == 0 ? beta : 1.0f;   /* later slices add to the first's result */
            const int last = pc + kc >= k;
            /* op(B)'s slice: element (p, j) at bs[p·bp + j·bj] */
            const float *bs = tb ? B + jc + (size_t)pc * ldb : B + pc + (size_t)jc * ldb;
            const size_t bp = tb ? (size_t)ldb : 1, bj = tb ? 1 : (size_t)ldb;
            if (nc > nfull)
                mg__sg_pack(!tb, MG__SG_NR, nc - nfull, kc, bs + nfull * bj, (size_t)ldb, pb);
            for (ic = 0; ic < m; ic += MG__SG_MC) {
                const int mc = m - ic < MG__SG_MC ? m - ic : MG__SG_MC;
                mg__sg_pack(ta, MG__SG_MR, mc, kc,
                            ta ? A + pc + (size_t)ic * lda : A + ic + (size_t)pc * lda, (size_t)lda, pa);
                for (jr = 0; jr < nc; jr += MG__SG_NR) {
                    const int in_place = jr < nfull, nr = nc - jr < MG__SG_NR ? nc - jr : MG__SG_NR;
                    const float *b = in_place ? bs + (size_t)jr * bj : pb;
                    const size_t sp = in_place ? bp : MG__SG_NR, sj = in_place ? bj : 1;
                    const size_t off = (size_t)(jc + jr) * ldc;
                    if (bsum && ic == 0)   /* the panel's sums, bringing it into L1 */
                        mg__sg_bsum(kc, nr, b, sp, sj, bsum + jc + jr);
                    for (ir = 0; ir < mc; ir += MG__SG_MR)
                        mg__sg_kernel(kc, pa + (size_t)ir * kc, b, sp, sj, C + ic + ir + off,
                                      (size_t)ldc, alpha, be, pc == 0 && bias ? bias + ic + ir : NULL,
                                      last && add ? add + ic + ir + off : NULL,
                                      mc - ir < MG__SG_MR ? mc - ir : MG__SG_MR, nr);
                }
            }
        }
    }
}
#endif
/* One sgemm of the batch on the calling thread (thread number `tid` of the context's team):
   the packed kernel above with that thread's area, or OpenBLAS where tid is −1 or the build
   has no packed kernel (OpenBLAS is set single-threaded at context init; parallelism is ours,
   so only one thread pool ever spins).                                                       */
static void mg__cpu_sgemm1(mg_ctx *ctx, int tid, int ta, int tb, int m, int n, int k, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta,
                           const mg__cpu_epi *epi, float *C, int ldc) {
    int j;
#ifdef MG__OWN_SGEMM
    if (ctx->cpu_gemm_pack && tid >= 0) {
        float *pa = ctx->cpu_gemm_pack + (size_t)tid * MG__SG_THREAD_FLOATS;
        mg__sg_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, epi, C, ldc, pa,
                    pa + (size_t)MG__SG_MC * MG__SG_KC);
        return;
    }
#endif
    (void)ctx;
    (void)tid;
    if (m <= 0 || n <= 0) return;
    if (epi && epi->bias) {   /* C = bias, then C += α·op(A)·op(B) */
        for (j = 0; j < n; j++) memcpy(C + (size_t)j * ldc, epi->bias, (size_t)m * sizeof(float));
        beta = 1.0f;
    }
    if (epi && epi->bsum && k > 0)
        mg__cpu_bsum(k, n, B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, epi->bsum);
    cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    if (epi && epi->add)
        for (j = 0; j < n; j++) {
            float *c = C + (size_t)j * ldc;
            const float *x = epi->add + (size_t)j * ldc;
            int i;
            #pragma omp simd
            for (i = 0; i < m; i++) c[i] = c[i] + x[i];
        }
}
/* Batched fp32 GEMM. Many matrices (batch >= threads): OpenMP over the batch. Few large ones:
   each GEMM is split into per-thread blocks of C's columns (or rows when C is tall), which
   only repeats the packing of op(A) when it is the shared one; the split falls on micro-tile
   boundaries (multiples of 48 rows or 8 columns) where the sizes allow. Each work item packs
   into its thread's own area. The packed kernel takes a GEMM whole or not at all (one
   summation order for all of C); OpenBLAS runs it instead (tid −1) when C is under two column
   panels wide — packing op(A) for so few columns can cost more than OpenBLAS's small-matrix
   kernels, which do not pack — and when called from inside a parallel region of the caller's
   (the library never does: the threads there would share one area), then serially on the
   calling thread.
   epi: NULL, or the fusions mg__cpu_epi lists, each split with C: a thread's block of C gets
   its rows of bias, its block of add and its columns of bsum — the thread that holds C's first
   row sums them for all its columns, so every sum stays one in-order run, whatever the
   threads.                                                                                  */
static void mg__cpu_sgemm(mg_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                          const float *A, int lda, int64_t sA, const float *B, int ldb, int64_t sB,
                          float beta, const mg__cpu_epi *epi, float *C, int ldc, int64_t sC,
                          int batch) {
    int nt = ctx->n_threads, i, nested = 0, own = 1;
    double flops = 2.0 * m * n * k * batch;
#ifdef _OPENMP
    nested = omp_in_parallel();
#endif
#ifdef MG__OWN_SGEMM
    own = !nested && n >= 2 * MG__SG_NR;
#endif
    if (epi && (epi->bsum || epi->add) && batch != 1)
        mg_fatal(__FILE__, __LINE__, "mg__cpu_sgemm: column sums and the added matrix need batch 1 "
                 "(%d)", batch);
    if (nt <= 1 || nested || flops < 2.0 * 64 * 64 * 64) {
        for (i = 0; i < batch; i++)
            mg__cpu_sgemm1(ctx, own ? 0 : -1, ta, tb, m, n, k, alpha, A + i * sA, lda,
                           B + i * sB, ldb, beta, epi, C + i * sC, ldc);
    } else if (batch >= nt) {
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (i = 0; i < batch; i++)
            mg__cpu_sgemm1(ctx, own ? MG__TID() : -1, ta, tb, m, n, k, alpha, A + i * sA, lda,
                           B + i * sB, ldb, beta, epi, C + i * sC, ldc);
    } else {
        int split_n = n >= m, len = split_n ? n : m, parts = nt, b;
        int unit = split_n ? MG__SG_NR : MG__SG_MR;
        if (len < unit * parts) unit = 1;
        for (b = 0; b < batch; b++) {
            const float *Ab = A + b * sA, *Bb = B + b * sB;
            float *Cb = C + b * sC;
            #pragma omp parallel for num_threads(nt) schedule(static)
            for (i = 0; i < parts; i++) {
                int units = (len + unit - 1) / unit, tid = own ? MG__TID() : -1;
                int lo = (int)((int64_t)units * i / parts) * unit;
                int hi = i == parts - 1 ? len : (int)((int64_t)units * (i + 1) / parts) * unit;
                mg__cpu_epi e = {NULL, NULL, NULL};
                if (hi > len) hi = len;
                if (hi <= lo) continue;
                if (split_n) { /* columns lo..hi of C and of op(B) */
                    if (epi) e = (mg__cpu_epi){epi->bias, epi->add ? epi->add + (int64_t)lo * ldc : NULL,
                                               epi->bsum ? epi->bsum + lo : NULL};
                    mg__cpu_sgemm1(ctx, tid, ta, tb, m, hi - lo, k, alpha, Ab, lda,
                                   Bb + (tb ? (int64_t)lo : (int64_t)lo * ldb), ldb, beta,
                                   epi ? &e : NULL, Cb + (int64_t)lo * ldc, ldc);
                } else {       /* rows lo..hi of C and of op(A) */
                    if (epi) e = (mg__cpu_epi){epi->bias ? epi->bias + lo : NULL,
                                               epi->add ? epi->add + lo : NULL,
                                               lo == 0 ? epi->bsum : NULL};
                    mg__cpu_sgemm1(ctx, tid, ta, tb, hi - lo, n, k, alpha,
                                   Ab + (ta ? (int64_t)lo * lda : (int64_t)lo), lda, Bb, ldb,
                                   beta, epi ? &e : NULL, Cb + lo, ldc);
                }
            }
        }
    }
}
/* Elements a column-major operand spans: (cols−1)·ld + rows, over the whole batch. */
static int64_t mg__gemm_span(int rows, int cols, int ld, int64_t stride, int batch) {
    if (rows == 0 || cols == 0 || batch == 0) return 0;
    return (int64_t)(batch - 1) * stride + (int64_t)(cols - 1) * ld + rows;
}
/* 16-bit operands are widened into arena scratch (exact); a 16-bit C is widened (when β ≠ 0
   and no bias takes β·C's place: mg__cpu_sgemm), computed in fp32 and rounded back element
   by element — only the m×n entries of each matrix, never the gaps between columns, which
   may belong to other data.                                                                  */
static void mg__cpu_gemm(mg_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                         const void *A, mg_dtype ab_dt, int lda, int64_t sA, const void *B,
                         int ldb, int64_t sB, float beta, const mg__cpu_epi *epi, void *C,
                         mg_dtype c_dt, int ldc, int64_t sC, int batch) {
    size_t mark = mg_arena_mark(ctx);
    const float *A32 = (const float *)A, *B32 = (const float *)B;
    float *C32 = (float *)C;
    int i, j;
    if (ab_dt != MG_F32) {
        int64_t na = mg__gemm_span(ta ? k : m, ta ? m : k, lda, sA, batch);
        int64_t nb = mg__gemm_span(tb ? n : k, tb ? k : n, ldb, sB, batch);
        float *a = (float *)mg_alloc(ctx, (size_t)na * sizeof(float));
        float *b = (float *)mg_alloc(ctx, (size_t)nb * sizeof(float));
        mg__cpu_widen(a, A, ab_dt, 0, na);
        mg__cpu_widen(b, B, ab_dt, 0, nb);
        A32 = a;
        B32 = b;
    }
    if (c_dt != MG_F32) {
        int64_t nc = mg__gemm_span(m, n, ldc, sC, batch);
        C32 = (float *)mg_alloc(ctx, (size_t)nc * sizeof(float));
        if (epi && epi->add)
            mg_fatal(__FILE__, __LINE__, "mg__cpu_gemm: the added matrix needs an fp32 C");
        if (beta != 0.0f && !(epi && epi->bias))
            for (i = 0; i < batch; i++)
                for (j = 0; j < n; j++)
                    mg__cpu_widen(C32 + i * sC + (int64_t)j * ldc, C, c_dt,
                                  i * sC + (int64_t)j * ldc, m);
    }
    mg__cpu_sgemm(ctx, ta, tb, m, n, k, alpha, A32, lda, sA, B32, ldb, sB, beta, epi, C32, ldc,
                  sC, batch);
    if (c_dt != MG_F32)
        for (i = 0; i < batch; i++)
            for (j = 0; j < n; j++)
                mg__cpu_narrow(C, c_dt, i * sC + (int64_t)j * ldc, C32 + i * sC + (int64_t)j * ldc, m);
    mg_arena_release(ctx, mark);
}

/* --- the fused linear layers' epilogues, on an fp32 GEMM accumulator acc [N, C] ------------
   bias + GELU row by row, dGELU by column blocks (OpenMP over them); each value is rounded once
   to its storage.
   bias + GELU:  v = acc + bias;  pre = v;  out = gelu(v)        (acc may be pre's own storage)
   dGELU:        v = acc · gelu'(pre);  acc = v;  dpre = v;  bsum (when given) += Σ_rows v —
                 the bias gradient's fp32 sums: a thread owns a column block and walks its
                 rows in order, so each column is summed in row order (mg__cpu_colsum's bits) */
static void mg__cpu_epi_bias_gelu(mg_ctx *ctx, const float *acc, int64_t N, int64_t C,
                                  const mg_tensor *bias, const mg_tensor *pre,
                                  const mg_tensor *out, int kind) {
    int64_t r;
    size_t mark = mg_arena_mark(ctx);
    float *b = (float *)mg_alloc(ctx, (size_t)C * sizeof(float));
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(out) || !mg__f32(pre), 2 * (size_t)C);
    if (bias) mg__cpu_widen(b, bias->data, bias->dtype, 0, C);
    else memset(b, 0, (size_t)C * sizeof(float));
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * 2 * C : NULL;
        const float *a = acc + r * C;
        float *p = mg__cpu_out_span(pre, r * C, sc);
        float *o = mg__cpu_out_span(out, r * C, sc ? sc + C : NULL);
        int64_t j;
        if (kind == MG_ACT_GELU_ERF) {   /* one loop per kind: each vectorises */
            #pragma omp simd
            for (j = 0; j < C; j++) {
                float v = a[j] + b[j];
                p[j] = v;
                o[j] = mg__gelu_erf(v);
            }
        } else if (kind == MG_ACT_RELU2) {
            #pragma omp simd
            for (j = 0; j < C; j++) {
                float v = a[j] + b[j];
                p[j] = v;
                o[j] = mg__relu2(v);
            }
        } else {
            #pragma omp simd
            for (j = 0; j < C; j++) {
                float v = a[j] + b[j];
                p[j] = v;
                o[j] = mg__gelu(v);
            }
        }
        mg__cpu_commit(pre, r * C, p, C);
        mg__cpu_commit(out, r * C, o, C);
    }
    mg_arena_release(ctx, mark);
}
static void mg__cpu_epi_dgelu(mg_ctx *ctx, float *acc, int64_t N, int64_t C, const mg_tensor *pre,
                              const mg_tensor *dpre, float *bsum, int kind) {
    enum { W = 4 * MG__COLBLOCK };   /* wide column blocks: long vector runs per row */
    int64_t nblk = (C + W - 1) / W, blk;
    const size_t esize = mg_dtype_size(pre->dtype);
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(pre), (size_t)W);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * W, w = C - c0 < (int64_t)W ? C - c0 : (int64_t)W, r, j;
        float sum[W], *sc = scratch ? scratch + (size_t)MG__TID() * W : NULL;
        for (j = 0; j < w; j++) sum[j] = 0.0f;
        for (r = 0; r < N; r++) {
            const float *x = mg__cpu_span(pre, r * C + c0, w, sc);
            float *a = acc + r * C + c0;
            if (r + 2 < N)   /* a block's rows lie C floats apart: fetch two rows ahead */
                for (j = 0; j < w; j += 16) {
                    __builtin_prefetch((const char *)pre->data + (size_t)((r + 2) * C + c0 + j) * esize, 0, 3);
                    __builtin_prefetch(a + 2 * C + j, 1, 3);
                }
            if (kind == MG_ACT_GELU_ERF) {
                #pragma omp simd
                for (j = 0; j < w; j++) {
                    a[j] *= mg__gelu_erf_grad(x[j]);
                    sum[j] += a[j];
                }
            } else if (kind == MG_ACT_RELU2) {
                #pragma omp simd
                for (j = 0; j < w; j++) {
                    a[j] *= mg__relu2_grad(x[j]);
                    sum[j] += a[j];
                }
            } else {
                #pragma omp simd
                for (j = 0; j < w; j++) {
                    a[j] *= mg__gelu_grad(x[j]);
                    sum[j] += a[j];
                }
            }
            /* rounded into dpre: a no-op when acc is dpre */
            mg__cpu_narrow(dpre->data, dpre->dtype, r * C + c0, a, w);
        }
        if (bsum)
            for (j = 0; j < w; j++) bsum[c0 + j] += sum[j];
    }
    mg_arena_release(ctx, mark);
}

/* --- elementwise: one fp32 kernel per op, run chunk by chunk ------------------------------ */
typedef struct mg__map_args {
    float alpha;                       /* axpy/scale/fill factor                              */
    uint64_t key;                      /* dropout: global index of local element (r, c) is     */
    uint32_t threshold;                /*   (row_offset + r)·global_cols + col_offset + c      */
    float scale;                       /*   with r, c in the local [·, local_cols] view        */
    int64_t local_cols, global_cols, row_offset, col_offset;
} mg__map_args;
/* The elementwise ops, by code: the CPU runs mg__map_fns[op] on fp32 chunks, the CUDA
   backend one functor that switches on the code.                                            */
typedef enum { MG__EW_ADD, MG__EW_AXPY, MG__EW_SCALE, MG__EW_FILL, MG__EW_COPY, MG__EW_GELU,
               MG__EW_GELU_GRAD, MG__EW_DROPOUT, MG__EW_SWIGLU, MG__EW_GELU_ERF,
               MG__EW_GELU_ERF_GRAD, MG__EW_RELU2, MG__EW_RELU2_GRAD, MG__EW_COUNT } mg__ew_op;
/* out[0..n) = f(a[0..n), b[0..n)) for the chunk whose first element has flat index i0. */
typedef void (*mg__map_fn)(float *out, const float *a, const float *b, int64_t n, int64_t i0,
                           const mg__map_args *args);

static void mg__map_add(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                        const mg__map_args *g) {
    int64_t i;
    (void)i0; (void)g;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = a[i] + b[i];
}
static void mg__map_axpy(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                         const mg__map_args *g) {
    int64_t i;
    float alpha = g->alpha;
    (void)i0;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = a[i] + alpha * b[i];
}
static void mg__map_scale(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                          const mg__map_args *g) {
    int64_t i;
    float alpha = g->alpha;
    (void)b; (void)i0;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = alpha * a[i];
}
static void mg__map_fill(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                         const mg__map_args *g) {
    int64_t i;
    float v = g->alpha;
    (void)a; (void)b; (void)i0;
    for (i = 0; i < n; i++) o[i] = v;
}
static void mg__map_copy(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                         const mg__map_args *g) {
    (void)b; (void)i0; (void)g;
    if (o != a) memmove(o, a, (size_t)n * sizeof(float));
}
static void mg__map_gelu(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                         const mg__map_args *g) {
    int64_t i;
    (void)b; (void)i0; (void)g;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = mg__gelu(a[i]);
}
/* a = gelu input, b = dout. */
static void mg__map_gelu_grad(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                              const mg__map_args *g) {
    int64_t i;
    (void)i0; (void)g;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = b[i] * mg__gelu_grad(a[i]);
}
static void mg__map_gelu_erf(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                             const mg__map_args *g) {
    int64_t i;
    (void)b; (void)i0; (void)g;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = mg__gelu_erf(a[i]);
}
static void mg__map_gelu_erf_grad(float *o, const float *a, const float *b, int64_t n,
                                  int64_t i0, const mg__map_args *g) {
    int64_t i;
    (void)i0; (void)g;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = b[i] * mg__gelu_erf_grad(a[i]);
}
static void mg__map_relu2(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                          const mg__map_args *g) {
    int64_t i;
    (void)b; (void)i0; (void)g;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = mg__relu2(a[i]);
}
static void mg__map_relu2_grad(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                               const mg__map_args *g) {
    int64_t i;
    (void)i0; (void)g;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = b[i] * mg__relu2_grad(a[i]);
}
/* Dropout of len consecutive elements whose global indices start at g0. The middle part runs
   over whole aligned groups of 4 indices, one Philox evaluation per group (exactly the words
   mg_rand_u32 returns), in a loop the compiler vectorises; head and tail go one by one.    */
static void mg__dropout_run(float *o, const float *a, int64_t len, uint64_t g0,
                            const mg__map_args *g) {
    int64_t j = 0, q, groups;
    uint64_t c0;
    for (; j < len && ((g0 + (uint64_t)j) & 3); j++)
        o[j] = mg__dropout(a[j], mg_rand_u32(g->key, g0 + (uint64_t)j), g->threshold, g->scale);
    groups = (len - j) / 4;
    c0 = (g0 + (uint64_t)j) >> 2;
    #pragma omp simd
    for (q = 0; q < groups; q++)
        mg__dropout_group(o + j + 4 * q, a + j + 4 * q, g->key, c0 + (uint64_t)q, g->threshold,
                          g->scale);
    for (j += 4 * groups; j < len; j++)
        o[j] = mg__dropout(a[j], mg_rand_u32(g->key, g0 + (uint64_t)j), g->threshold, g->scale);
}
/* Dropout of a chunk: split at local row ends, so each piece has contiguous global indices. */
static void mg__map_dropout(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                            const mg__map_args *g) {
    int64_t done = 0;
    (void)b;
    while (done < n) {
        int64_t li = i0 + done, r = li / g->local_cols, c = li % g->local_cols;
        int64_t len = g->local_cols - c < n - done ? g->local_cols - c : n - done;
        mg__dropout_run(o + done, a + done, len,
                        (uint64_t)((g->row_offset + r) * g->global_cols + g->col_offset + c), g);
        done += len;
    }
}

/* a = gate, b = up (or dout: dup = dout ⊙ silu(gate) is the same map). */
static void mg__map_swiglu(float *o, const float *a, const float *b, int64_t n, int64_t i0,
                           const mg__map_args *g) {
    int64_t i;
    (void)i0; (void)g;
    #pragma omp simd
    for (i = 0; i < n; i++) o[i] = mg__silu(a[i]) * b[i];
}

static const mg__map_fn mg__map_fns[MG__EW_COUNT] = {
    mg__map_add, mg__map_axpy, mg__map_scale, mg__map_fill, mg__map_copy, mg__map_gelu,
    mg__map_gelu_grad, mg__map_dropout, mg__map_swiglu, mg__map_gelu_erf, mg__map_gelu_erf_grad,
    mg__map_relu2, mg__map_relu2_grad};

static void mg__cpu_map(mg_ctx *ctx, mg__ew_op op, const mg_tensor *out, const mg_tensor *a,
                        const mg_tensor *b, const mg__map_args *args) {
    (void)ctx;   /* read only by the OpenMP pragma: a build without OpenMP ignores it */
    mg__map_fn fn = mg__map_fns[op];
    int64_t n = mg_numel(out), nchunks = (n + MG__CHUNK - 1) / MG__CHUNK, c;
    int direct = mg__f32(out) && mg__f32(a) && mg__f32(b);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (n > MG__PAR_MIN)
    for (c = 0; c < nchunks; c++) {
        int64_t i0 = c * MG__CHUNK, len = n - i0 < MG__CHUNK ? n - i0 : MG__CHUNK;
        if (direct) {
            fn((float *)out->data + i0, a ? (const float *)a->data + i0 : NULL,
               b ? (const float *)b->data + i0 : NULL, len, i0, args);
        } else {
            float ob[MG__CHUNK], ab[MG__CHUNK], bb[MG__CHUNK];
            if (a) mg__cpu_widen(ab, a->data, a->dtype, i0, len);
            if (b) mg__cpu_widen(bb, b->data, b->dtype, i0, len);
            fn(ob, a ? ab : NULL, b ? bb : NULL, len, i0, args);
            mg__cpu_narrow(out->data, out->dtype, i0, ob, len);
        }
    }
}

/* --- column sums: dst[c] += Σ_r src[r, c] · (factor) -------------------------------------- */
/* factor = 1, or the layernorm norm (inp[r,c] − mean[r])·rstd[r] when inp is given; with inp,
   plain (or NULL) also gets the factor-1 sums of the same pass (the norm's bias gradient
   beside its weight gradient: one read of src, one parallel region). Threads own blocks of
   columns and walk all rows in order: deterministic, no atomics.                           */
/* dst[c0 + j] += v[j] for j < w, through buf (w floats) when dst is 16-bit. */
static void mg__cpu_add_span(const mg_tensor *dst, int64_t c0, int64_t w, const float *v,
                             float *buf) {
    const float *d = mg__cpu_span(dst, c0, w, buf);
    float *o = mg__cpu_out_span(dst, c0, buf);
    int64_t j;
    for (j = 0; j < w; j++) o[j] = d[j] + v[j];
    mg__cpu_commit(dst, c0, o, w);
}
/* Column block blk (MG__COLBLOCK columns) of the sums, on the calling thread. */
static void mg__cpu_colsum_block(int64_t blk, const mg_tensor *dst, const mg_tensor *src,
                                 const mg_tensor *inp, const float *mean, const float *rstd,
                                 const mg_tensor *plain) {
    int64_t N = mg_rows(src), C = mg_cols(src);
    int64_t c0 = blk * MG__COLBLOCK, w = C - c0 < MG__COLBLOCK ? C - c0 : MG__COLBLOCK, r, j;
    float acc[MG__COLBLOCK], acc1[MG__COLBLOCK], sbuf[MG__COLBLOCK], xbuf[MG__COLBLOCK];
    float dbuf[MG__COLBLOCK];
    for (j = 0; j < w; j++) acc[j] = acc1[j] = 0.0f;
    for (r = 0; r < N; r++) {
        const float *s = mg__cpu_span(src, r * C + c0, w, sbuf);
        if (inp) {
            const float *x = mg__cpu_span(inp, r * C + c0, w, xbuf);
            float mu = mean[r], rs = rstd[r];
            #pragma omp simd
            for (j = 0; j < w; j++) acc[j] += s[j] * ((x[j] - mu) * rs);
            if (plain) {
                #pragma omp simd
                for (j = 0; j < w; j++) acc1[j] += s[j];
            }
        } else {
            #pragma omp simd
            for (j = 0; j < w; j++) acc[j] += s[j];
        }
    }
    mg__cpu_add_span(dst, c0, w, acc, dbuf);
    if (inp && plain) mg__cpu_add_span(plain, c0, w, acc1, dbuf);
}
static void mg__cpu_colsum(mg_ctx *ctx, const mg_tensor *dst, const mg_tensor *src,
                           const mg_tensor *inp, const float *mean, const float *rstd,
                           const mg_tensor *plain) {
    (void)ctx;   /* read only by the OpenMP pragma: a build without OpenMP ignores it */
    int64_t N = mg_rows(src), C = mg_cols(src), nblk = (C + MG__COLBLOCK - 1) / MG__COLBLOCK, blk;
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (blk = 0; blk < nblk; blk++) mg__cpu_colsum_block(blk, dst, src, inp, mean, rstd, plain);
}

/* --- embedding ----------------------------------------------------------------------------- */
/* The slice-relative token of activation row r = t·B + b (tokens are [B, T], the rows a shard
   starting at position t0): every backend's embedding reads it this way. */
MG_HD static inline int64_t mg__embed_row_token(const int32_t *tokens, int64_t r, int B, int T,
                                                int t0, int64_t vocab_start) {
    return tokens[(r % B) * T + t0 + r / B] - vocab_start;
}
static void mg__cpu_embedding_forward(mg_ctx *ctx, const mg_tensor *out, const int32_t *tokens,
                                      int B, int T, int t0, const mg_tensor *wte,
                                      int64_t vocab_start, const mg_tensor *wpe) {
    int64_t N = mg_rows(out), C = mg_cols(out), Vw = mg_rows(wte), r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(out) || !mg__f32(wte) || !mg__f32(wpe), 3 * C);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * 3 * C : NULL;
        int64_t t = r / B, tok = mg__embed_row_token(tokens, r, B, T, t0, vocab_start), j;
        float *o = mg__cpu_out_span(out, r * C, sc);
        const float *e = tok >= 0 && tok < Vw ? mg__cpu_span(wte, tok * C, C, sc ? sc + C : NULL) : NULL;
        const float *p = wpe ? mg__cpu_span(wpe, (t0 + t) * C, C, sc ? sc + 2 * C : NULL) : NULL;
        if (e && p) {
            #pragma omp simd
            for (j = 0; j < C; j++) o[j] = e[j] + p[j];
        } else if (e || p) {
            memcpy(o, e ? e : p, (size_t)C * sizeof(float));
        } else {
            memset(o, 0, (size_t)C * sizeof(float));
        }
        mg__cpu_commit(out, r * C, o, C);
    }
    mg_arena_release(ctx, mark);
}
/* dwte: threads own column blocks and scatter every row into them in row order (two rows
   with the same token never race). dwpe: position t collects its B rows.                    */
static void mg__cpu_embedding_backward(mg_ctx *ctx, const mg_tensor *dwte, const mg_tensor *dwpe,
                                       const mg_tensor *dout, const int32_t *tokens, int B,
                                       int T, int t0, int64_t vocab_start) {
    int64_t N = mg_rows(dout), C = mg_cols(dout), nblk = (C + MG__COLBLOCK - 1) / MG__COLBLOCK;
    int64_t blk, t;
    if (dwte) {
        int64_t Vw = mg_rows(dwte);
        #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
        for (blk = 0; blk < nblk; blk++) {
            int64_t c0 = blk * MG__COLBLOCK, w = C - c0 < MG__COLBLOCK ? C - c0 : MG__COLBLOCK, r, j;
            float dbuf[MG__COLBLOCK], wbuf[MG__COLBLOCK];
            for (r = 0; r < N; r++) {
                int64_t tok = mg__embed_row_token(tokens, r, B, T, t0, vocab_start);
                const float *d, *e;
                float *o;
                if (tok < 0 || tok >= Vw) continue;
                d = mg__cpu_span(dout, r * C + c0, w, dbuf);
                e = mg__cpu_span(dwte, tok * C + c0, w, wbuf);
                o = mg__cpu_out_span(dwte, tok * C + c0, wbuf);
                for (j = 0; j < w; j++) o[j] = e[j] + d[j];
                mg__cpu_commit(dwte, tok * C + c0, o, w);
            }
        }
    }
    if (dwpe) {
        int64_t Tl = N / B;
        size_t mark = mg_arena_mark(ctx);
        float *scratch = mg__cpu_scratch(ctx, !mg__f32(dwpe) || !mg__f32(dout), 2 * C);
        #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
        for (t = 0; t < Tl; t++) {
            float *sc = scratch ? scratch + (size_t)MG__TID() * 2 * C : NULL;
            int64_t pos = (t0 + t) * C, b, j;
            const float *p = mg__cpu_span(dwpe, pos, C, sc);
            float *o = mg__cpu_out_span(dwpe, pos, sc);
            if (o != p) memcpy(o, p, (size_t)C * sizeof(float));
            for (b = 0; b < B; b++) {
                const float *d = mg__cpu_span(dout, (t * B + b) * C, C, sc ? sc + C : NULL);
                for (j = 0; j < C; j++) o[j] += d[j];
            }
            mg__cpu_commit(dwpe, pos, o, C);
        }
        mg_arena_release(ctx, mark);
    }
}

/* --- layernorm ----------------------------------------------------------------------------- */
static void mg__cpu_layernorm_forward(mg_ctx *ctx, const mg_norm *k, const mg_tensor *out,
                                      float *mean, float *rstd, const mg_tensor *inp,
                                      const mg_tensor *weight, const mg_tensor *bias) {
    int64_t N = mg_rows(inp), C = mg_cols(inp), r;
    size_t mark = mg_arena_mark(ctx);
    float *wb = (float *)mg_alloc(ctx, 2 * (size_t)C * sizeof(float)); /* fp32 weight, bias */
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(inp) || !mg__f32(out), 2 * C);
    mg__cpu_widen(wb, weight->data, weight->dtype, 0, C);
    if (bias) mg__cpu_widen(wb + C, bias->data, bias->dtype, 0, C);
    else memset(wb + C, 0, (size_t)C * sizeof(float));
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * 2 * C : NULL;
        const float *x = mg__cpu_span(inp, r * C, C, sc), *w = wb, *b = wb + C;
        float *y = mg__cpu_out_span(out, r * C, sc ? sc + C : NULL);
        float sum = 0.0f, sumsq = 0.0f, mu, rs;
        int64_t j;
        if (!k->rms) {
            #pragma omp simd reduction(+ : sum)
            for (j = 0; j < C; j++) sum += x[j];
        }
        mu = sum / (float)C;
        #pragma omp simd reduction(+ : sumsq)
        for (j = 0; j < C; j++) sumsq += (x[j] - mu) * (x[j] - mu);
        rs = mg__ln_rstd(sumsq / (float)C, k->eps);
        #pragma omp simd
        for (j = 0; j < C; j++) y[j] = (x[j] - mu) * rs * w[j] + b[j];
        mg__cpu_commit(out, r * C, y, C);
        mean[r] = mu;
        rstd[r] = rs;
    }
    mg_arena_release(ctx, mark);
}
/* Row r of the norm's input gradient (dinp overwritten, or accumulated), on the calling
   thread; w is the fp32 weight, scratch NULL or 3·C floats per thread.                      */
static void mg__cpu_norm_dx_row(const mg_norm *k, int64_t r, const mg_tensor *dinp,
                                const mg_tensor *dout, const mg_tensor *inp, const float *w,
                                const float *mean, const float *rstd, int accumulate,
                                float *scratch) {
    int64_t C = mg_cols(inp);
    float *sc = scratch ? scratch + (size_t)MG__TID() * 3 * C : NULL;
    const float *x = mg__cpu_span(inp, r * C, C, sc);
    const float *dy = mg__cpu_span(dout, r * C, C, sc ? sc + C : NULL);
    float *dx = accumulate ? (float *)mg__cpu_span(dinp, r * C, C, sc ? sc + 2 * C : NULL)
                           : mg__cpu_out_span(dinp, r * C, sc ? sc + 2 * C : NULL);
    float mu = mean[r], rs = rstd[r], sum_g = 0.0f, sum_gn = 0.0f, mean_g, mean_gn;
    int64_t j;
    #pragma omp simd reduction(+ : sum_g, sum_gn)
    for (j = 0; j < C; j++) {
        float g = dy[j] * w[j];
        sum_g += g;
        sum_gn += g * ((x[j] - mu) * rs);
    }
    mean_g = k->rms ? 0.0f : sum_g / (float)C;
    mean_gn = sum_gn / (float)C;
    if (accumulate) {
        #pragma omp simd
        for (j = 0; j < C; j++)
            dx[j] += mg__ln_dx(dy[j] * w[j], (x[j] - mu) * rs, rs, mean_g, mean_gn);
    } else {
        #pragma omp simd
        for (j = 0; j < C; j++)
            dx[j] = mg__ln_dx(dy[j] * w[j], (x[j] - mu) * rs, rs, mean_g, mean_gn);
    }
    mg__cpu_commit(dinp, r * C, dx, C);
}
static void mg__cpu_layernorm_backward(mg_ctx *ctx, const mg_norm *k, const mg_tensor *dinp,
                                       const mg_tensor *dweight, const mg_tensor *dbias,
                                       const mg_tensor *dout, const mg_tensor *inp,
                                       const mg_tensor *weight, const float *mean,
                                       const float *rstd, int accumulate) {
    int64_t N = mg_rows(inp), C = mg_cols(inp), r;
    size_t mark = mg_arena_mark(ctx);
    float *w = (float *)mg_alloc(ctx, (size_t)C * sizeof(float));
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(inp) || !mg__f32(dout) || !mg__f32(dinp), 3 * C);
    mg__cpu_widen(w, weight->data, weight->dtype, 0, C);
    if (dinp->data != dout->data) {   /* both halves in one parallel region, independent */
        const mg_tensor *dst = dweight ? dweight : dbias;
        int64_t nblk = dst ? (C + MG__COLBLOCK - 1) / MG__COLBLOCK : 0, blk;
        #pragma omp parallel num_threads(ctx->n_threads) if (N * C > MG__PAR_MIN)
        {
            #pragma omp for schedule(static) nowait
            for (blk = 0; blk < nblk; blk++)
                mg__cpu_colsum_block(blk, dst, dout, dweight ? inp : NULL, mean, rstd,
                                     dweight ? dbias : NULL);
            #pragma omp for schedule(static) nowait
            for (r = 0; r < N; r++)
                mg__cpu_norm_dx_row(k, r, dinp, dout, inp, w, mean, rstd, accumulate, scratch);
        }
        mg_arena_release(ctx, mark);
        return;
    }
    /* dweight += Σ_r dout·norm, dbias += Σ_r dout — first, since dinp aliases dout */
    if (dweight) mg__cpu_colsum(ctx, dweight, dout, inp, mean, rstd, dbias);
    else if (dbias) mg__cpu_colsum(ctx, dbias, dout, NULL, NULL, NULL, NULL);
    /* dinp, row by row */
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (r = 0; r < N; r++)
        mg__cpu_norm_dx_row(k, r, dinp, dout, inp, w, mean, rstd, accumulate, scratch);
    mg_arena_release(ctx, mark);
}

/* --- SwiGLU backward ------------------------------------------------------------------------- */
static void mg__cpu_swiglu_backward(mg_ctx *ctx, const mg_tensor *dgate, const mg_tensor *dup,
                                    const mg_tensor *dout, const mg_tensor *gate,
                                    const mg_tensor *up) {
    (void)ctx;   /* read only by the OpenMP pragma: a build without OpenMP ignores it */
    int64_t n = mg_numel(dout), nchunks = (n + MG__CHUNK - 1) / MG__CHUNK, c;
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (n > MG__PAR_MIN)
    for (c = 0; c < nchunks; c++) {
        int64_t i0 = c * MG__CHUNK, len = n - i0 < MG__CHUNK ? n - i0 : MG__CHUNK, i;
        float gb[MG__CHUNK], ub[MG__CHUNK], db[MG__CHUNK], dgb[MG__CHUNK], dub[MG__CHUNK];
        const float *g = mg__cpu_span(gate, i0, len, gb), *u = mg__cpu_span(up, i0, len, ub);
        const float *d = mg__cpu_span(dout, i0, len, db);
        float *dg = mg__cpu_out_span(dgate, i0, dgb), *du = mg__cpu_out_span(dup, i0, dub);
        #pragma omp simd
        for (i = 0; i < len; i++) {   /* dout is read before either output is written */
            float dy = d[i], x = g[i], y = u[i];
            dg[i] = dy * y * mg__silu_grad(x);
            du[i] = dy * mg__silu(x);
        }
        mg__cpu_commit(dgate, i0, dg, len);
        mg__cpu_commit(dup, i0, du, len);
    }
}

/* --- rotary embedding: rows of the grouped qkv, each row's query and key heads rotated -------
   sign +1 forward, −1 backward (the inverse rotation).                                     */
static void mg__cpu_rope(mg_ctx *ctx, const mg_tensor *qkv, int B, int nh, int ng, int rot,
                         int t0, const float *cos_sin, float sign) {
    int64_t N = mg_rows(qkv), C3 = mg_cols(qkv), r;
    int per = nh / ng, hd = (int)(C3 / (nh + 2 * ng)), h = rot / 2;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(qkv), (size_t)C3);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C3 > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * (size_t)C3 : NULL;
        float *row = (float *)mg__cpu_span(qkv, r * C3, C3, sc);   /* fp32: the storage */
        const float *cs = cos_sin + (size_t)(t0 + r / B) * (size_t)h * 2;
        int g, j, i;
        for (g = 0; g < ng; g++)
            for (j = 0; j <= per; j++) {      /* the group's query heads, then its key */
                float *x = row + (size_t)(g * (per + 2) + j) * (size_t)hd;
                for (i = 0; i < h; i++) mg__rope_pair(&x[i], &x[i + h], cs[2 * i], sign * cs[2 * i + 1]);
            }
        mg__cpu_commit(qkv, r * C3, row, C3);
    }
    mg_arena_release(ctx, mark);
}

/* --- attention softmax ---------------------------------------------------------------------
   att viewed as rows of length T; row r is query position t1 = r mod T of batch r / T;
   only keys t2 <= t1 are visible (causal).                                                 */
static void mg__cpu_causal_softmax(mg_ctx *ctx, const mg_tensor *att, int T) {
    int64_t R = mg_numel(att) / T, r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(att), T);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (R * T > MG__PAR_MIN)
    for (r = 0; r < R; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * T : NULL;
        float *p = (float *)mg__cpu_span(att, r * T, T, sc);
        int64_t n = r % T + 1, j;
        float mx = -FLT_MAX, sum = 0.0f, inv;
        MG__SIMD_HINT(reduction(max : mx))
        for (j = 0; j < n; j++) mx = p[j] > mx ? p[j] : mx;
        #pragma omp simd reduction(+ : sum)
        for (j = 0; j < n; j++) { p[j] = mg__exp(p[j] - mx); sum += p[j]; }
        inv = 1.0f / sum;
        #pragma omp simd
        for (j = 0; j < n; j++) p[j] *= inv;
        for (j = n; j < T; j++) p[j] = 0.0f;
        mg__cpu_commit(att, r * T, p, T);
    }
    mg_arena_release(ctx, mark);
}
/* datt <- p · (datt − Σ p·datt) row by row (masked entries have p = 0 and become 0). */
static void mg__cpu_causal_softmax_backward(mg_ctx *ctx, const mg_tensor *datt,
                                            const mg_tensor *att, int T) {
    int64_t R = mg_numel(att) / T, r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(att) || !mg__f32(datt), 2 * (size_t)T);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (R * T > MG__PAR_MIN)
    for (r = 0; r < R; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * 2 * T : NULL;
        const float *p = mg__cpu_span(att, r * T, T, sc);
        float *dp = (float *)mg__cpu_span(datt, r * T, T, sc ? sc + T : NULL);
        int64_t n = r % T + 1, j;
        float dot = 0.0f;
        #pragma omp simd reduction(+ : dot)
        for (j = 0; j < n; j++) dot += p[j] * dp[j];
        #pragma omp simd
        for (j = 0; j < n; j++) dp[j] = mg__softmax_grad(p[j], dp[j], dot);
        for (j = n; j < T; j++) dp[j] = 0.0f;
        mg__cpu_commit(datt, r * T, dp, T);
    }
    mg_arena_release(ctx, mark);
}

/* --- tiled attention: the CPU twin of the CUDA kernels ---------------------------------------
   The same tiles in the same order as mg__k_attn_*: a task is one kernel block (a query tile of
   one head, or a key tile of one group); inside it, a score tile S (or P and dS) first, then the
   row updates, then the products with the value/key rows. The tile products are small
   row-major sgemms on the calling thread (mg__cpu_tile_mm: OpenBLAS, single-threaded under our
   OpenMP, or on AVX2 without AVX-512 a kernel of our own for NN and TN), each adding its
   tile's sum to the accumulator once, as the kernels add each tile's part once.
   Tiles of scores are held transposed (key c, query row i at [c][i]), so that the row updates
   run down their columns, a query row per vector lane, and the products are NN or TN sgemms:
   OpenBLAS's small-matrix NT kernel runs these 32×32×64 shapes at about 2/3 of the rate of its
   NN and TN kernels. Sᵀ = scale·K·Qᵀ takes Qᵀ, loaded transposed once per query tile (or once
   per (b, group) in the single-pass backward); the forward and the backward form it with the
   same product, so the recomputed scores are the forward's bit for bit and P = exp(S − lse)
   stays consistent with lse. dPᵀ = V·dOᵀ stays an NT product on purpose: its dot products over
   hd are summed in OpenBLAS's vector-lane order, while the NN kernel sums them in sequence,
   and dS = P·(dP − Δ) cancels — with an NN dP the backward's error against float64 rose by a
   quarter (tests/test_flash.c). OpenMP runs the tasks (dynamic: the causal tiles differ in
   work), each in per-thread fp32 scratch: fp32 rows are read in place, 16-bit rows widened on
   load (as the kernels widen them into shared memory).                                      */
typedef struct mg__attn_geo {
    int TL, hd, per, nqt, nkt;      /* tile, head dim, query heads per group, tiles of q and k */
    float scale;
    mg__attn_drop_k drop;
} mg__attn_geo;
/* Rows t0… (n of them) of head (b, g, j) of v, widened to fp32 into dst: element d of row r
   at dst[r·hd + d], or with transposed at dst[d·ld + r] (row t0 + r becomes column r of
   dst [hd][ld], ld >= n: the operand of an NN or TN tile product).                          */
static void mg__cpu_attn_load(float *dst, int transposed, int ld, const mg_attn_view *v, int64_t t0,
                              int n, int b, int g, int j, int hd) {
    size_t rs = transposed ? 1 : (size_t)hd, ds = transposed ? (size_t)ld : 1;
    int r = 0, d;
#ifdef MG__HAVE_TR8
    if (transposed && v->dtype == MG_F32)   /* fp32 rows ld_t apart: 8×8 blocks, then the rest */
        for (; r + 8 <= n; r += 8) {
            const float *src = (const float *)v->data + mg__view_at(v, t0 + r, b, g, j);
            int i;
            for (d = 0; d + 8 <= hd; d += 8)
                mg__sg_tr8(src + d, (size_t)v->ld_t, dst + (size_t)d * ld + r, (size_t)ld);
            for (; d < hd; d++)
                for (i = 0; i < 8; i++) dst[(size_t)d * ld + r + i] = src[(size_t)i * v->ld_t + d];
        }
#endif
    for (; r < n; r++) {
        int64_t off = mg__view_at(v, t0 + r, b, g, j);
        if (v->dtype != MG_F32)
            for (d = 0; d < hd; d++) dst[r * rs + d * ds] = mg_load(v->data, v->dtype, off + d);
        else if (!transposed)
            memcpy(dst + r * rs, (const float *)v->data + off, (size_t)hd * sizeof(float));
        else
            for (d = 0; d < hd; d++) dst[r * rs + d * ds] = ((const float *)v->data)[off + d];
    }
}
/* Rows t0… of head (b, g, j) of v = alpha·src (+ v, accumulating), row by row in fp32: fp32
   storage in place, 16-bit through row_buf (hd floats: widened, summed, rounded back).       */
static void mg__cpu_attn_store(const mg_attn_view *v, int64_t t0, int n, int b, int g, int j,
                               int hd, const float *src, float alpha, int accumulate,
                               float *row_buf) {
    int r, d;
    for (r = 0; r < n; r++) {
        int64_t off = mg__view_at(v, t0 + r, b, g, j);
        float *o = v->dtype == MG_F32 ? (float *)v->data + off : row_buf;
        const float *x = src + (size_t)r * hd;
        if (accumulate) {
            if (v->dtype != MG_F32) mg__cpu_widen(row_buf, v->data, v->dtype, off, hd);
            #pragma omp simd
            for (d = 0; d < hd; d++) o[d] = alpha * x[d] + o[d];
        } else {
            #pragma omp simd
            for (d = 0; d < hd; d++) o[d] = alpha * x[d];
        }
        if (v->dtype != MG_F32) mg__cpu_narrow(v->data, v->dtype, off, row_buf, hd);
    }
}
/* Rows t0… (n of them) of head (b, g, j) of v as a row-major fp32 operand of the tile products:
   fp32 storage in place (row stride ld_t, or hd for one row: no copy), 16-bit widened into buf
   (row stride hd).                                                                           */
static const float *mg__cpu_attn_rows(const mg_attn_view *v, int64_t t0, int n, int b, int g,
                                      int j, int hd, float *buf, int *ld) {
    if (v->dtype == MG_F32 && (n == 1 || (v->ld_t >= hd && v->ld_t <= INT32_MAX))) {
        *ld = n == 1 ? hd : (int)v->ld_t;
        return (const float *)v->data + mg__view_at(v, t0, b, g, j);
    }
    mg__cpu_attn_load(buf, 0, hd, v, t0, n, b, g, j, hd);
    *ld = hd;
    return buf;
}
#ifdef MG__TILE_AVX2
/* Rows i0 … i0+R of a tile product (R ≤ 6, constant where inlined) × columns j0 … j0+16 (or
   the w < 16 left, masked when !full): 12 ymm accumulators; per k two vectors of B's row k and
   R broadcasts of op(A)'s column k, each element one FMA chain over k in order. β = 0 never
   reads C.                                                                                   */
static inline __attribute__((always_inline)) void
mg__tile_block(const int R, const int ta, const int full, int K, float alpha, const float *A,
               int lda, const float *B, int ldb, float beta, float *C, int ldc, int i0, int j0,
               int w) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w), lane);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w - 8), lane);
    __m256 acc[6][2], va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    int r, k;
#pragma GCC unroll 6
    for (r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb + j0;
        __m256 b0 = full ? _mm256_loadu_ps(b) : _mm256_maskload_ps(b, m0);
        __m256 b1 = full ? _mm256_loadu_ps(b + 8) : _mm256_maskload_ps(b + 8, m1);
#pragma GCC unroll 6
        for (r = 0; r < R; r++) {
            __m256 a = _mm256_set1_ps(ta ? A[(size_t)k * lda + i0 + r] : A[(size_t)(i0 + r) * lda + k]);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (r = 0; r < R; r++) {
        float *c = C + (size_t)(i0 + r) * ldc + j0;
        __m256 c0 = _mm256_mul_ps(va, acc[r][0]), c1 = _mm256_mul_ps(va, acc[r][1]);
        if (beta != 0.0f) {
            c0 = _mm256_fmadd_ps(vb, full ? _mm256_loadu_ps(c) : _mm256_maskload_ps(c, m0), c0);
            c1 = _mm256_fmadd_ps(vb, full ? _mm256_loadu_ps(c + 8) : _mm256_maskload_ps(c + 8, m1), c1);
        }
        if (full) { _mm256_storeu_ps(c, c0); _mm256_storeu_ps(c + 8, c1); }
        else { _mm256_maskstore_ps(c, m0, c0); _mm256_maskstore_ps(c + 8, m1, c1); }
    }
}
/* One (R, ta, full) specialisation of mg__tile_block per call: R rows in the block. */
#define MG__TILE_BLOCK(R, ta, full) mg__tile_block(R, ta, full, K, alpha, A, lda, B, ldb, beta, C, \
                                                   ldc, i0, j0, N - j0)
#define MG__TILE_CASES(ta, full) switch (M - i0 < 6 ? M - i0 : 6) {                              \
    case 6: MG__TILE_BLOCK(6, ta, full); break; case 5: MG__TILE_BLOCK(5, ta, full); break;    \
    case 4: MG__TILE_BLOCK(4, ta, full); break; case 3: MG__TILE_BLOCK(3, ta, full); break;    \
    case 2: MG__TILE_BLOCK(2, ta, full); break; default: MG__TILE_BLOCK(1, ta, full); }
static void mg__tile_rows(int ta, int full, int M, int N, int K, float alpha, const float *A,
                          int lda, const float *B, int ldb, float beta, float *C, int ldc, int j0) {
    int i0;
    for (i0 = 0; i0 < M; i0 += 6) {
        if (ta && full) MG__TILE_CASES(1, 1)
        else if (ta)    MG__TILE_CASES(1, 0)
        else if (full)  MG__TILE_CASES(0, 1)
        else            MG__TILE_CASES(0, 0)
    }
}
#undef MG__TILE_CASES
#undef MG__TILE_BLOCK
#endif
/* Row-major C[M×N] = alpha·op(A)·op(B) + beta·C of one tile (ta/tb: A or B transposed).
   OpenBLAS in general. Built for AVX2 without AVX-512, the NN and TN products run the kernel
   above instead: OpenBLAS 0.3.21 has small-matrix kernels for AVX-512 CPUs only, and on Zen 3
   it runs a 32×32×64 product through its general path (both operands packed, a β pass) at
   about 3 µs, 40 GFLOP/s of the core's 99. The NT product (dPᵀ = V·dOᵀ) stays OpenBLAS's in
   every build, for its summation order (see the section's comment above).                   */
static void mg__cpu_tile_mm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                            int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0 || K <= 0) return;
#ifdef MG__TILE_AVX2
    if (!tb) {
        int j0;
        for (j0 = 0; j0 < N; j0 += 16)
            mg__tile_rows(ta, N - j0 >= 16, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, j0);
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
/* Forward task (b, h, query tile qt): online softmax over the visible key tiles. The score
   tile is held transposed, St[c][i] = scale·k_c·q_i (key c, query row i), so each step of the
   softmax — the running max, exp, the sum — runs across the tile's query rows in vector lanes,
   one key at a time in key order; a key a row does not see enters as −∞ (p = 0).           */
static void mg__cpu_attn_fwd_task(const mg_attn_block *a, const mg__attn_geo *ge, int b, int h,
                                  int qt, float *ws, const mg_attn_view *o, float *lse, int merge) {
    const int TL = ge->TL, hd = ge->hd, g = h / ge->per, j = h % ge->per;
    float *Qt = ws, *Kb = Qt + TL * hd, *Vb = Kb + TL * hd, *acc = Vb + TL * hd, *St = acc + TL * hd;
    float *m = St + TL * TL, *l = m + TL, *mx = l + TL, *sum = mx + TL;
    int *nv = (int *)(sum + TL);
    const float *K, *V;
    int64_t t0 = (int64_t)qt * TL, row0 = ((int64_t)b * a->n_head + h) * a->Tq + t0;
    int64_t qpos0 = a->q_pos0 + t0;
    int nq = (int)(a->Tq - t0 < TL ? a->Tq - t0 : TL), nkt, kt, i, c, ldk, ldv;
    mg__cpu_attn_load(Qt, 1, TL, &a->q, t0, nq, b, g, j, hd);
    memset(acc, 0, (size_t)TL * hd * sizeof(float));
    for (i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    nkt = mg__attn_key_tiles(a, qpos0 + nq - 1);
    for (kt = 0; kt < nkt; kt++) {
        int64_t s0 = (int64_t)kt * TL, kpos = a->k_pos0 + s0;
        int nk = (int)(a->Tk - s0 < TL ? a->Tk - s0 : TL);
        K = mg__cpu_attn_rows(&a->k, s0, nk, b, g, 0, hd, Kb, &ldk);
        V = mg__cpu_attn_rows(&a->v, s0, nk, b, g, 0, hd, Vb, &ldv);
        mg__cpu_tile_mm(0, 0, nk, nq, hd, ge->scale, K, ldk, Qt, TL, 0.0f, St, TL); /* Sᵀ = scale·K·Qᵀ */
        for (i = 0; i < nq; i++) {
            nv[i] = mg__attn_visible(qpos0 + i, kpos, nk);
            mx[i] = m[i];
            sum[i] = 0.0f;
        }
        if (nq == MG_ATTN_TILE && nk == MG_ATTN_TILE && nv[0] == nk && !ge->drop.on &&
            a->q.dtype == MG_F32) {   /* a whole tile every row sees: the loops below, unmasked */
            for (c = 0; c < MG_ATTN_TILE; c++) {
                const float *s = St + (size_t)c * TL;
                #pragma omp simd
                for (i = 0; i < MG_ATTN_TILE; i++) mx[i] = s[i] > mx[i] ? s[i] : mx[i];
            }
            for (c = 0; c < MG_ATTN_TILE; c++) {
                float *s = St + (size_t)c * TL;
                #pragma omp simd
                for (i = 0; i < MG_ATTN_TILE; i++) {
                    float p = mg__exp(s[i] - mx[i]);
                    s[i] = p;
                    sum[i] += p;
                }
            }
        } else {
            for (c = 0; c < nk; c++) {     /* each row's max over its visible keys */
                const float *s = St + (size_t)c * TL;
                #pragma omp simd
                for (i = 0; i < nq; i++) {
                    float v = c < nv[i] ? s[i] : -INFINITY;
                    mx[i] = v > mx[i] ? v : mx[i];
                }
            }
            for (c = 0; c < nk; c++) {     /* P = exp(S − max) over the visible keys, 0 elsewhere */
                float *s = St + (size_t)c * TL;
                #pragma omp simd
                for (i = 0; i < nq; i++) {
                    float p = c < nv[i] ? mg__exp(s[i] - mx[i]) : 0.0f;
                    s[i] = p;
                    sum[i] += p;
                }
                if (ge->drop.on)
                    for (i = 0; i < nq; i++)
                        if (c < nv[i])
                            s[i] = mg__attn_drop(&ge->drop, b, h, qpos0 + i, kpos + c, s[i]);
                if (a->q.dtype != MG_F32)   /* 16-bit: P·V takes P in the storage type */
                    for (i = 0; i < nq; i++) s[i] = mg__attn_round(s[i], a->q.dtype);
            }
        }
        #pragma omp simd
        for (i = 0; i < nq; i++) {     /* rescale the row's sum to the new max (vector lanes) */
            float al = m[i] == -INFINITY ? 0.0f : mg__exp(m[i] - mx[i]);
            if (nv[i]) {
                l[i] = l[i] * al + sum[i];
                m[i] = mx[i];
            }
            sum[i] = nv[i] ? al : 1.0f;   /* now the factor of the row's output */
        }
        for (i = 0; i < nq; i++) {     /* ... and its output */
            float *acc_i = acc + (size_t)i * hd, al = sum[i];
            if (al != 1.0f) {
                #pragma omp simd
                for (c = 0; c < hd; c++) acc_i[c] *= al;
            }
        }
        mg__cpu_tile_mm(1, 0, nq, hd, nk, 1.0f, St, TL, V, ldv, 1.0f, acc, hd);   /* acc += P·V */
    }
    for (i = 0; i < nq; i++) {         /* o = acc/l (merged), lse; 16-bit rows through Kb */
        float w_new, w_old, *acc_i = acc + (size_t)i * hd, *orow;
        int64_t off = mg__view_at(o, t0 + i, b, g, j);
        lse[row0 + i] = mg__attn_finish(m[i], l[i], merge, merge ? lse[row0 + i] : 0.0f, &w_new, &w_old);
        orow = o->dtype == MG_F32 ? (float *)o->data + off : Kb;
        if (w_old != 0.0f) {
            if (o->dtype != MG_F32) mg__cpu_widen(orow, o->data, o->dtype, off, hd);
            for (c = 0; c < hd; c++) orow[c] = acc_i[c] * w_new + w_old * orow[c];
        } else {
            #pragma omp simd
            for (c = 0; c < hd; c++) orow[c] = acc_i[c] * w_new;
        }
        if (o->dtype != MG_F32) mg__cpu_narrow(o->data, o->dtype, off, orow, hd);
    }
}
/* Δ = rowsum(dO ∘ O) per query row (16-bit rows widened into per-thread scratch). */
static void mg__cpu_attn_delta(mg_ctx *ctx, float *delta, const mg_attn_block *a,
                               const mg_attn_view *dout, const mg_attn_view *o) {
    int64_t R = (int64_t)a->B * a->n_head * a->Tq, r;
    int per = a->n_head / a->n_group, hd = a->hd;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, dout->dtype != MG_F32 || o->dtype != MG_F32, 2 * (size_t)hd);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (R * hd > MG__PAR_MIN)
    for (r = 0; r < R; r++) {
        int64_t t = r % a->Tq;
        int h = (int)(r / a->Tq % a->n_head), b = (int)(r / a->Tq / a->n_head), d, ld;
        float *sc = scratch ? scratch + (size_t)MG__TID() * 2 * hd : NULL;
        const float *x = mg__cpu_attn_rows(dout, t, 1, b, h / per, h % per, hd, sc, &ld);
        const float *y = mg__cpu_attn_rows(o, t, 1, b, h / per, h % per, hd, sc ? sc + hd : NULL, &ld);
        float s = 0.0f;
        #pragma omp simd reduction(+ : s)
        for (d = 0; d < hd; d++) s += x[d] * y[d];
        delta[r] = s;
    }
    mg_arena_release(ctx, mark);
}
/* The backward's recomputed tile, transposed (key c, query row i at [c][i]): from Sᵀ =
   scale·K·Qᵀ and dPᵀ = V·dOᵀ (in St and dSt), P = exp(S − lse_i) → D(P) (into Pt, if given)
   and dSᵀ = P·(D'(dP) − Δ_i); entries a row does not see are 0. */
static void mg__cpu_attn_ds_tile(const mg_attn_block *a, const mg__attn_geo *ge, int b, int h,
                                 int64_t t0, int nq, int64_t kpos, int nk, const float *lse,
                                 const float *delta, float *St, float *dSt, float *Pt) {
    int TL = ge->TL, i, c, nv[MG_ATTN_TILE];   /* keys of the tile each query row sees */
    int64_t qpos0 = a->q_pos0 + t0;
    for (i = 0; i < nq; i++) nv[i] = mg__attn_visible(qpos0 + i, kpos, nk);
    for (c = 0; c < nk; c++) {
        float *s = St + (size_t)c * TL, *ds = dSt + (size_t)c * TL, *p = Pt ? Pt + (size_t)c * TL : NULL;
        if (ge->drop.on || a->q.dtype != MG_F32) {   /* the kernels' entry, per element */
            for (i = 0; i < nq; i++) {
                float pd = 0.0f;
                ds[i] = c < nv[i] ? mg__attn_ds(&ge->drop, b, h, qpos0 + i, kpos + c, s[i], ds[i],
                                                lse[i], delta[i], a->q.dtype, &pd) : 0.0f;
                if (p) p[i] = pd;
            }
        } else if (nq == MG_ATTN_TILE && nv[0] == nk) {   /* every row sees the whole tile */
            #pragma omp simd
            for (i = 0; i < MG_ATTN_TILE; i++) s[i] = mg__exp(s[i] - lse[i]);
            #pragma omp simd
            for (i = 0; i < MG_ATTN_TILE; i++) ds[i] = s[i] * (ds[i] - delta[i]);
            if (p) memcpy(p, s, (size_t)MG_ATTN_TILE * sizeof(float));
        } else {                                     /* the same in vector loops */
            #pragma omp simd
            for (i = 0; i < nq; i++) s[i] = c < nv[i] ? mg__exp(s[i] - lse[i]) : 0.0f;
            #pragma omp simd
            for (i = 0; i < nq; i++) ds[i] = s[i] * (ds[i] - delta[i]);
            if (p) memcpy(p, s, (size_t)nq * sizeof(float));
        }
    }
}
/* Qᵀ of query rows t0… (nq) of head (b, h): inside grp_t, the (b, group)'s [per][hd][Tq]
   made by the single-pass backward, when given; else loaded into Qtb (row stride TL).
   Returns the row stride. */
static int mg__cpu_attn_q_t(const mg_attn_block *a, const mg__attn_geo *ge, const float *grp_t,
                            int b, int h, int64_t t0, int nq, float *Qtb, const float **Qt) {
    if (grp_t) {
        *Qt = grp_t + (size_t)(h % ge->per) * ge->hd * a->Tq + t0;
        return (int)a->Tq;
    }
    mg__cpu_attn_load(Qtb, 1, ge->TL, &a->q, t0, nq, b, h / ge->per, h % ge->per, ge->hd);
    *Qt = Qtb;
    return ge->TL;
}
/* dQ task (b, h, query tile qt): dQ_i = scale·Σ_s dS_is·K_s over the visible key tiles. */
static void mg__cpu_attn_dq_task(const mg_attn_block *a, const mg__attn_geo *ge, int b, int h,
                                 int qt, float *ws, const mg_attn_view *dout, const float *lse,
                                 const float *delta, const mg_attn_view *dq, int accumulate) {
    const int TL = ge->TL, hd = ge->hd, g = h / ge->per, j = h % ge->per;
    float *Qtb = ws, *dOb = Qtb + TL * hd, *Kb = dOb + TL * hd, *Vb = Kb + TL * hd, *acc = Vb + TL * hd;
    float *St = acc + TL * hd, *dSt = St + TL * TL;
    const float *Qt, *dO, *K, *V;
    int64_t t0 = (int64_t)qt * TL, row0 = ((int64_t)b * a->n_head + h) * a->Tq + t0;
    int nq = (int)(a->Tq - t0 < TL ? a->Tq - t0 : TL), nkt, kt, ldt, ldo, ldk, ldv;
    ldt = mg__cpu_attn_q_t(a, ge, NULL, b, h, t0, nq, Qtb, &Qt);
    dO = mg__cpu_attn_rows(dout, t0, nq, b, g, j, hd, dOb, &ldo);
    memset(acc, 0, (size_t)TL * hd * sizeof(float));
    nkt = mg__attn_key_tiles(a, a->q_pos0 + t0 + nq - 1);
    for (kt = 0; kt < nkt; kt++) {
        int64_t s0 = (int64_t)kt * TL, kpos = a->k_pos0 + s0;
        int nk = (int)(a->Tk - s0 < TL ? a->Tk - s0 : TL);
        K = mg__cpu_attn_rows(&a->k, s0, nk, b, g, 0, hd, Kb, &ldk);
        V = mg__cpu_attn_rows(&a->v, s0, nk, b, g, 0, hd, Vb, &ldv);
        mg__cpu_tile_mm(0, 0, nk, nq, hd, ge->scale, K, ldk, Qt, ldt, 0.0f, St, TL); /* Sᵀ = scale·K·Qᵀ */
        mg__cpu_tile_mm(0, 1, nk, nq, hd, 1.0f, V, ldv, dO, ldo, 0.0f, dSt, TL);     /* dPᵀ = V·dOᵀ */
        mg__cpu_attn_ds_tile(a, ge, b, h, t0, nq, kpos, nk, lse + row0, delta + row0, St, dSt, NULL);
        mg__cpu_tile_mm(1, 0, nq, hd, nk, 1.0f, dSt, TL, K, ldk, 1.0f, acc, hd);     /* += dS·K */
    }
    mg__cpu_attn_store(dq, t0, nq, b, g, j, hd, acc, ge->scale, accumulate, Kb);
}
/* dK/dV task (b, group g, key tile kt): over the group's query heads and the query tiles that
   see the keys, dV_s = Σ_t D(P)_ts·dO_t and dK_s = scale·Σ_t dS_ts·Q_t, in fp32. With dq_acc
   (the single-pass backward below), each dS tile is also added into its query rows' dQ
   accumulator, dq_acc[j·Tq + t][hd], as the dQ task adds it; grp_t: the group's Qᵀ
   (mg__cpu_attn_q_t), or NULL.                                                              */
static void mg__cpu_attn_dkv_task(const mg_attn_block *a, const mg__attn_geo *ge, int b, int g,
                                  int kt, float *ws, const mg_attn_view *dout, const float *lse,
                                  const float *delta, const mg_attn_view *dk, const mg_attn_view *dv,
                                  int accumulate, float *dq_acc, const float *grp_t) {
    const int TL = ge->TL, hd = ge->hd;
    float *Kb = ws, *Vb = Kb + TL * hd, *Qb = Vb + TL * hd, *dOb = Qb + TL * hd, *Qtb = dOb + TL * hd;
    float *dKa = Qtb + TL * hd, *dVa = dKa + TL * hd, *St = dVa + TL * hd, *dSt = St + TL * TL;
    float *Pt = dSt + TL * TL;
    const float *Q, *dO, *Qt, *K, *V;
    int64_t s0 = (int64_t)kt * TL, kpos = a->k_pos0 + s0;
    int nk = (int)(a->Tk - s0 < TL ? a->Tk - s0 : TL), j, qt, ldq, ldo, ldt, ldk, ldv;
    K = mg__cpu_attn_rows(&a->k, s0, nk, b, g, 0, hd, Kb, &ldk);
    V = mg__cpu_attn_rows(&a->v, s0, nk, b, g, 0, hd, Vb, &ldv);
    memset(dKa, 0, (size_t)2 * TL * hd * sizeof(float));
    for (j = 0; j < ge->per; j++) {
        int h = g * ge->per + j;
        for (qt = mg__attn_first_query_tile(a, kpos); qt < ge->nqt; qt++) {
            int64_t t0 = (int64_t)qt * TL, row0 = ((int64_t)b * a->n_head + h) * a->Tq + t0;
            int nq = (int)(a->Tq - t0 < TL ? a->Tq - t0 : TL);
            Q = mg__cpu_attn_rows(&a->q, t0, nq, b, g, j, hd, Qb, &ldq);
            dO = mg__cpu_attn_rows(dout, t0, nq, b, g, j, hd, dOb, &ldo);
            ldt = mg__cpu_attn_q_t(a, ge, grp_t, b, h, t0, nq, Qtb, &Qt);
            mg__cpu_tile_mm(0, 0, nk, nq, hd, ge->scale, K, ldk, Qt, ldt, 0.0f, St, TL);
            mg__cpu_tile_mm(0, 1, nk, nq, hd, 1.0f, V, ldv, dO, ldo, 0.0f, dSt, TL);
            mg__cpu_attn_ds_tile(a, ge, b, h, t0, nq, kpos, nk, lse + row0, delta + row0, St, dSt, Pt);
            mg__cpu_tile_mm(0, 0, nk, hd, nq, 1.0f, Pt, TL, dO, ldo, 1.0f, dVa, hd);  /* += D(P)ᵀ·dO */
            mg__cpu_tile_mm(0, 0, nk, hd, nq, 1.0f, dSt, TL, Q, ldq, 1.0f, dKa, hd);  /* += dSᵀ·Q */
            if (dq_acc)                                                              /* += dS·K */
                mg__cpu_tile_mm(1, 0, nq, hd, nk, 1.0f, dSt, TL, K, ldk, 1.0f,
                                dq_acc + ((size_t)j * a->Tq + t0) * hd, hd);
        }
    }
    mg__cpu_attn_store(dk, s0, nk, b, g, 0, hd, dKa, ge->scale, accumulate, Qb);
    mg__cpu_attn_store(dv, s0, nk, b, g, 0, hd, dVa, 1.0f, accumulate, Qb);
}
static void mg__cpu_attn_forward(mg_ctx *ctx, const mg_attn_block *a, const mg__attn_geo *ge,
                                 const mg_attn_view *o, float *lse, int merge) {
    int64_t n = (int64_t)a->B * a->n_head * ge->nqt, task;
    size_t ws_floats = (size_t)4 * ge->TL * ge->hd + (size_t)ge->TL * ge->TL + 5 * (size_t)ge->TL;
    size_t mark = mg_arena_mark(ctx);
    float *ws = mg__cpu_scratch(ctx, 1, ws_floats);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(dynamic)
    for (task = 0; task < n; task++)
        mg__cpu_attn_fwd_task(a, ge, (int)(task / ge->nqt / a->n_head), (int)(task / ge->nqt % a->n_head),
                              (int)(task % ge->nqt), ws + (size_t)MG__TID() * ws_floats, o, lse, merge);
    mg_arena_release(ctx, mark);
}
/* The backward. Two passes as the kernels run it (dQ by query tile, then dK/dV by key tile,
   each recomputing S, dP and dS), or — when there are enough (b, group) tasks for the threads
   and the arena has room for their dQ accumulators and the group's Qᵀ — one pass per
   (b, group) over its key tiles in order, the dK/dV task adding each dS tile into dQ as well.
   Each dQ row then gets the same tile products in the same order (key tiles ascending) as in
   the dQ pass, so the two schedules agree bit for bit; the single pass computes S, dP and dS
   once instead of twice (7 tile products per tile pair become 5) and transposes each query
   row once.                                                                                */
static void mg__cpu_attn_backward(mg_ctx *ctx, const mg_attn_block *a, const mg__attn_geo *ge,
                                  const mg_attn_view *dout, const float *lse, const float *delta,
                                  const mg_attn_view *dq, const mg_attn_view *dk,
                                  const mg_attn_view *dv, int accumulate) {
    int64_t nq = (int64_t)a->B * a->n_head * ge->nqt, nk = (int64_t)a->B * a->n_group * ge->nkt, task;
    int64_t groups = (int64_t)a->B * a->n_group, nt = ctx->n_threads;
    size_t ws_floats = (size_t)7 * ge->TL * ge->hd + (size_t)3 * ge->TL * ge->TL;
    size_t dq_floats = (size_t)ge->per * (size_t)a->Tq * (size_t)ge->hd;
    size_t mark = mg_arena_mark(ctx);
    float *ws = mg__cpu_scratch(ctx, 1, ws_floats);
    if (groups >= nt && (groups % nt == 0 || groups >= 4 * nt) &&
        ctx->arena_size - ctx->arena_used >= (size_t)nt * 2 * dq_floats * sizeof(float) + MG__ARENA_ALIGN) {
        float *dq_acc = mg__cpu_scratch(ctx, 1, 2 * dq_floats);   /* per thread: dQ, then Qᵀ */
        #pragma omp parallel for num_threads(ctx->n_threads) schedule(static)
        for (task = 0; task < groups; task++) {
            int b = (int)(task / a->n_group), g = (int)(task % a->n_group), kt, j;
            float *w = ws + (size_t)MG__TID() * ws_floats, *acc = dq_acc + (size_t)MG__TID() * 2 * dq_floats;
            float *grp_t = acc + dq_floats;
            memset(acc, 0, dq_floats * sizeof(float));
            for (j = 0; j < ge->per; j++)   /* the group's Qᵀ, [per][hd][Tq] */
                mg__cpu_attn_load(grp_t + (size_t)j * ge->hd * a->Tq, 1, (int)a->Tq, &a->q, 0,
                                  (int)a->Tq, b, g, j, ge->hd);
            for (kt = 0; kt < ge->nkt; kt++)
                mg__cpu_attn_dkv_task(a, ge, b, g, kt, w, dout, lse, delta, dk, dv, accumulate, acc,
                                      grp_t);
            for (j = 0; j < ge->per; j++)
                mg__cpu_attn_store(dq, 0, (int)a->Tq, b, g, j, ge->hd, acc + (size_t)j * a->Tq * ge->hd,
                                   ge->scale, accumulate, w);
        }
        mg_arena_release(ctx, mark);
        return;
    }
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(dynamic)
    for (task = 0; task < nq; task++)
        mg__cpu_attn_dq_task(a, ge, (int)(task / ge->nqt / a->n_head), (int)(task / ge->nqt % a->n_head),
                             (int)(task % ge->nqt), ws + (size_t)MG__TID() * ws_floats, dout, lse,
                             delta, dq, accumulate);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(dynamic)
    for (task = 0; task < nk; task++)
        mg__cpu_attn_dkv_task(a, ge, (int)(task / ge->nkt / a->n_group), (int)(task / ge->nkt % a->n_group),
                              (int)(task % ge->nkt), ws + (size_t)MG__TID() * ws_floats, dout, lse,
                              delta, dk, dv, accumulate, NULL, NULL);
    mg_arena_release(ctx, mark);
}

/* --- vocabulary-slice cross-entropy --------------------------------------------------------- */
/* One row's max and Σ exp(l − mx) over its n real logits (vectorised). */
static float mg__cpu_row_max(const float *l, int64_t n) {
    float mx = -INFINITY;
    int64_t j;
    MG__SIMD_HINT(reduction(max : mx))
    for (j = 0; j < n; j++) mx = l[j] > mx ? l[j] : mx;
    return mx;
}
static float mg__cpu_row_sumexp(const float *l, int64_t n, float mx) {
    float s = 0.0f;
    int64_t j;
    #pragma omp simd reduction(+ : s)
    for (j = 0; j < n; j++) s += mg__exp(l[j] - mx);
    return s;
}
static void mg__cpu_xent_max(mg_ctx *ctx, float *rowmax, const mg_tensor *logits, int64_t nreal) {
    int64_t N = mg_rows(logits), Vs = mg_cols(logits), r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(logits), Vs);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * Vs > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * Vs : NULL;
        rowmax[r] = mg__cpu_row_max(mg__cpu_span(logits, r * Vs, nreal, sc), nreal);
    }
    mg_arena_release(ctx, mark);
}
/* rowmax given (the merged max): Σexp and the target logit. local_max: the row's own max is
   taken first, from the same row while it is in cache, and written to rowmax (the one-pass
   statistics of mg_xent_partial).                                                          */
static void mg__cpu_xent_sumexp(mg_ctx *ctx, float *sumexp, float *tlogit, const mg_tensor *logits,
                                const int32_t *targets, float *rowmax, int64_t vocab_start,
                                int64_t nreal, int local_max) {
    int64_t N = mg_rows(logits), Vs = mg_cols(logits), r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(logits), Vs);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * Vs > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        const float *l = mg__cpu_span(logits, r * Vs, nreal, scratch ? scratch + (size_t)MG__TID() * Vs : NULL);
        int64_t tgt = (int64_t)targets[r] - vocab_start;
        if (local_max) rowmax[r] = mg__cpu_row_max(l, nreal);
        sumexp[r] = mg__cpu_row_sumexp(l, nreal, rowmax[r]);
        tlogit[r] = (tgt >= 0 && tgt < nreal) ? l[tgt] : 0.0f;
    }
    mg_arena_release(ctx, mark);
}
/* A row whose target is negative (ignored) has no real columns: all Vs of its dlogits are
   written as 0 (not computed and multiplied by 0, which an inf logit would turn into NaN). */
static void mg__cpu_xent_backward(mg_ctx *ctx, const mg_tensor *dlogits, const mg_tensor *logits,
                                  const int32_t *targets, const float *rowmax, const float *sumexp,
                                  float dloss, int64_t vocab_start, int64_t nreal) {
    int64_t N = mg_rows(logits), Vs = mg_cols(logits), r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(logits) || !mg__f32(dlogits), 2 * Vs);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * Vs > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * 2 * Vs : NULL;
        const float *l = mg__cpu_span(logits, r * Vs, Vs, sc);
        float *d = mg__cpu_out_span(dlogits, r * Vs, sc ? sc + Vs : NULL);
        float mx = rowmax[r], se = sumexp[r];
        int64_t j, tgt = (int64_t)targets[r] - vocab_start, real = targets[r] < 0 ? 0 : nreal;
        #pragma omp simd
        for (j = 0; j < real; j++) d[j] = mg__xent_dlogit(l[j], mx, se, (float)(j == tgt), dloss);
        for (j = real; j < Vs; j++) d[j] = 0.0f;
        mg__cpu_commit(dlogits, r * Vs, d, Vs);
    }
    mg_arena_release(ctx, mark);
}

/* --- optimizer and norms -------------------------------------------------------------------- */
/* Elements [lo, hi) of one AdamW piece on the calling thread: the update, then the 16-bit
   copy of the new values (each rounded once). */
static void mg__cpu_adamw_range(float *param, const float *grad, float *m, float *v, int64_t lo,
                                int64_t hi, const mg__adamw_k *k, void *param16, mg_dtype dt16) {
    int64_t i;
    MG__SIMD_HINT()
    for (i = lo; i < hi; i++) param[i] = mg__adamw(param[i], grad[i], &m[i], &v[i], k);
    if (param16) mg__cpu_narrow(param16, dt16, lo, param + lo, hi - lo);
}
/* The fused step's CPU twin, in one parallel region: the threads split the Σn values of the
   table evenly by their index in the concatenation, each walking the pieces its share
   overlaps. One wake-up of the worker threads per step instead of one per piece (a GPT has
   a dozen pieces per layer); every element gets the same arithmetic either way.          */
static void mg__cpu_adamw_multi(mg_ctx *ctx, const mg_adamw_piece *table, int n_pieces,
                                float beta1, float beta2, float eps, mg_dtype dt16,
                                const mg_adamw_args *args) {
    int64_t total = 0;
    int i;
    if (args->skip) return;
    for (i = 0; i < n_pieces; i++) total += table[i].n;
    #pragma omp parallel num_threads(ctx->n_threads) if (total > MG__PAR_MIN)
    {
        int64_t lo = total * MG__TID() / MG__NTH(), hi = total * (MG__TID() + 1) / MG__NTH();
        int64_t off = 0;
        int q;
        for (q = 0; q < n_pieces && off < hi; off += table[q].n, q++) {
            const mg_adamw_piece *p = &table[q];
            int64_t a = lo > off ? lo - off : 0, b = hi < off + p->n ? hi - off : p->n;
            mg__adamw_k k = mg__adamw_k_of(args, beta1, beta2, eps, p->wd_mult, p->lr_group);
            if (a < b) mg__cpu_adamw_range(p->param, p->grad, p->m, p->v, a, b, &k, p->param16, dt16);
        }
    }
}
/* Σ x² in double; inf/nan anywhere makes the double sum non-finite (x² of a finite fp32 never
   overflows a double), which is exactly the nonfinite flag.                                 */
static double mg__cpu_sumsq(mg_ctx *ctx, const float *x, int64_t n) {
    (void)ctx;   /* read only by the OpenMP pragma: a build without OpenMP ignores it */
    double s = 0.0;
    int64_t i;
    #pragma omp parallel for simd num_threads(ctx->n_threads) schedule(static) reduction(+ : s) if (n > MG__PAR_MIN)
    for (i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

#ifdef __CUDACC__
/* =============================================================================================
   6e. CUDA backend. Kernels first — only the thread mapping lives here, the math is 6c —
       then the launchers. Row kernels map a row to a block (the norms: a warp per row up to
       4096 columns); reductions use the one pair of block helpers. Elementwise and norm
       kernels are instantiated per storage dtype (accessor types, 128-bit vectors); the
       linear layers' epilogues run in cuBLASLt. Beside each kernel: its bytes and FLOPs per
       call, for its roofline time (bench/gpu.cu measures them).
   ========================================================================================== */
#define MG__CUDA_THREADS 256
/* Kernels that map one row to one block launch `rows` blocks; gridDim.x is at most 2^31 − 1. */
static unsigned mg__cuda_row_grid(int64_t rows) {
    if (rows > 2147483647)
        mg_fatal(__FILE__, __LINE__, "%lld rows exceed CUDA's limit of 2^31-1 blocks in a grid",
                 (long long)rows);
    return (unsigned)rows;
}

struct mg__op_sum {
    template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct mg__op_max {
    template <class T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
/* Block-wide reduction: butterfly shuffles inside each warp, one value per warp through shared
   memory, a second butterfly. Every thread of the block must call it (blockDim.x a multiple of
   32, at most 1024) and every thread receives the result. The leading __syncthreads makes
   back-to-back calls safe (the shared slots are reused).                                     */
template <class T, class Op> __device__ T mg__block_reduce(T v, Op op, T identity) {
    __shared__ T warp_vals[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5, off;
    for (off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
    __syncthreads();
    if (lane == 0) warp_vals[warp] = v;
    __syncthreads();
    v = lane < nwarps ? warp_vals[lane] : identity;
    for (off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
    return v;
}
__device__ static inline float mg__block_sum(float v) { return mg__block_reduce(v, mg__op_sum(), 0.0f); }
__device__ static inline float mg__block_max(float v) { return mg__block_reduce(v, mg__op_max(), -INFINITY); }

/* --- storage access specialised by dtype at compile time ------------------------------------
   An accessor (mg__io_f32/bf16/f16) wraps a pointer of a dtype known to the compiler: ld/st
   convert one element, ldv/stv move V consecutive elements as ONE aligned vector (V·bytes =
   16 or 8: a 128-bit or 64-bit load/store). mg__io_dyn is the same interface over a run-time
   dtype (mg_load/mg_store, element by element: BYTES = 16 keeps its V at 1), the fallback for
   dtype combinations that are not instantiated.                                             */
template <class T, int V> struct alignas(sizeof(T) * V) mg__pack { T v[V]; };
struct mg__cvt_f32 {
    typedef float T;
    __device__ static float to(float x) { return x; }
    __device__ static float from(float x) { return x; }
};
struct mg__cvt_bf16 {
    typedef uint16_t T;
    __device__ static float to(uint16_t h) { return mg_bf16_to_f32(h); }
    __device__ static uint16_t from(float x) { return mg_f32_to_bf16(x); }
};
struct mg__cvt_f16 {
    typedef uint16_t T;
    __device__ static float to(uint16_t h) { return mg_f16_to_f32(h); }
    __device__ static uint16_t from(float x) { return mg_f32_to_f16(x); }
};
template <class Cvt> struct mg__io {
    typedef typename Cvt::T T;
    enum { BYTES = sizeof(T) };
    T *p;
    __device__ float ld(int64_t i) const { return Cvt::to(p[i]); }
    __device__ void st(int64_t i, float v) const { p[i] = Cvt::from(v); }
    template <int V> __device__ void ldv(int64_t i, float *x) const {
        mg__pack<T, V> k = *reinterpret_cast<const mg__pack<T, V> *>(p + i);
        for (int j = 0; j < V; j++) x[j] = Cvt::to(k.v[j]);
    }
    template <int V> __device__ void stv(int64_t i, const float *x) const {
        mg__pack<T, V> k;
        for (int j = 0; j < V; j++) k.v[j] = Cvt::from(x[j]);
        *reinterpret_cast<mg__pack<T, V> *>(p + i) = k;
    }
};
typedef mg__io<mg__cvt_f32> mg__io_f32;
typedef mg__io<mg__cvt_bf16> mg__io_bf16;
typedef mg__io<mg__cvt_f16> mg__io_f16;
struct mg__io_dyn {
    enum { BYTES = 16 };
    void *p; mg_dtype dt;
    __device__ float ld(int64_t i) const { return mg_load(p, dt, i); }
    __device__ void st(int64_t i, float v) const { mg_store(p, dt, i, v); }
    template <int V> __device__ void ldv(int64_t i, float *x) const {
        for (int j = 0; j < V; j++) x[j] = ld(i + j);
    }
    template <int V> __device__ void stv(int64_t i, const float *x) const {
        for (int j = 0; j < V; j++) st(i + j, x[j]);
    }
};
/* Accessor of storage p of dtype dt (the typed accessors know theirs), and of a tensor (NULL:
   a null pointer), for a compile-time accessor type. */
template <class IO> __host__ __device__ static IO mg__io_ptr(const void *p, mg_dtype dt) {
    IO io;
    (void)dt;
    io.p = (typename IO::T *)p;
    return io;
}
template <> __host__ __device__ mg__io_dyn mg__io_ptr<mg__io_dyn>(const void *p, mg_dtype dt) {
    mg__io_dyn io = {(void *)p, dt};
    return io;
}
template <class IO> static IO mg__io_make(const mg_tensor *t) {
    return mg__io_ptr<IO>(t ? t->data : NULL, t ? t->dtype : MG_F32);
}
/* Elements per vector of a kernel reading/writing accessors A and B: 16 bytes of the wider. */
template <class A, class B> struct mg__vec_of {
    enum { V = 16 / ((int)A::BYTES > (int)B::BYTES ? (int)A::BYTES : (int)B::BYTES) };
};
/* LAUNCH(IO, IA) for storage written in dtype od and read in dtype ad: compiled accessors when
   the two are one dtype, or fp32 and a 16-bit type either way (the casts, fp32 gradients of
   16-bit activations); any other pair through the run-time accessor on both sides.          */
#define MG__IO_PAIR_DISPATCH(od, ad, LAUNCH) do { \
        mg_dtype od_ = (od), ad_ = (ad); \
        if (od_ == MG_F32 && ad_ == MG_F32) LAUNCH(mg__io_f32, mg__io_f32); \
        else if (od_ == MG_BF16 && ad_ == MG_BF16) LAUNCH(mg__io_bf16, mg__io_bf16); \
        else if (od_ == MG_F16 && ad_ == MG_F16) LAUNCH(mg__io_f16, mg__io_f16); \
        else if (od_ == MG_F32 && ad_ == MG_BF16) LAUNCH(mg__io_f32, mg__io_bf16); \
        else if (od_ == MG_F32 && ad_ == MG_F16) LAUNCH(mg__io_f32, mg__io_f16); \
        else if (od_ == MG_BF16 && ad_ == MG_F32) LAUNCH(mg__io_bf16, mg__io_f32); \
        else if (od_ == MG_F16 && ad_ == MG_F32) LAUNCH(mg__io_f16, mg__io_f32); \
        else LAUNCH(mg__io_dyn, mg__io_dyn); \
    } while (0)
/* LAUNCH(IO) with IO the compiled accessor of storage of dtype dt. */
#define MG__IO_DISPATCH(dt, LAUNCH) do { \
        mg_dtype dt_ = (dt); \
        if (dt_ == MG_F32) LAUNCH(mg__io_f32); \
        else if (dt_ == MG_BF16) LAUNCH(mg__io_bf16); \
        else LAUNCH(mg__io_f16); \
    } while (0)
/* p may be vector-accessed with V elements of `bytes` each (NULL: no constraint). */
MG_HD static inline int mg__vec_ok(const void *p, int V, int bytes) {
    return !p || (uintptr_t)p % (uintptr_t)(V * bytes) == 0;
}

/* Blocks of MG__CUDA_THREADS for a grid-stride kernel over `items` work items (> 0): one per
   MG__CUDA_THREADS items, at most 65536 (the threads then loop).                            */
static unsigned mg__grid(int64_t items) {
    int64_t blocks = (items + MG__CUDA_THREADS - 1) / MG__CUDA_THREADS;
    return (unsigned)(blocks > 65536 ? 65536 : blocks);
}

/* Loops over a thread's register arrays are unrolled so that their indices are constants and
   the arrays stay in registers (nvcc only; the emulator compiles the same loops as they are). */
#ifdef __NVCC__
#define MG__UNROLL _Pragma("unroll")
#else
#define MG__UNROLL
#endif
/* --- elementwise: kernels per (output dtype, input dtype, op), 128-bit vectors ----------------
   The value of element i (x = a[i], y = b[i]) of each op, the same expression as the CPU's
   mg__map_* (6d): shared by every instantiation.                                            */
__device__ static inline float mg__ew_value(mg__ew_op op, int64_t i, float x, float y,
                                            const mg__map_args &g) {
    switch (op) {
    case MG__EW_ADD: return x + y;
    case MG__EW_AXPY: return x + g.alpha * y;
    case MG__EW_SCALE: return g.alpha * x;
    case MG__EW_FILL: return g.alpha;
    case MG__EW_GELU: return mg__gelu(x);
    case MG__EW_GELU_GRAD: return y * mg__gelu_grad(x);
    case MG__EW_GELU_ERF: return mg__gelu_erf(x);
    case MG__EW_GELU_ERF_GRAD: return y * mg__gelu_erf_grad(x);
    case MG__EW_RELU2: return mg__relu2(x);
    case MG__EW_RELU2_GRAD: return y * mg__relu2_grad(x);
    case MG__EW_SWIGLU: return mg__silu(x) * y;
    case MG__EW_DROPOUT: {
        int64_t row = i / g.local_cols, col = i % g.local_cols;
        uint64_t gi = (uint64_t)((g.row_offset + row) * g.global_cols + g.col_offset + col);
        return mg__dropout(x, mg_rand_u32(g.key, gi), g.threshold, g.scale);
    }
    default: return x; /* MG__EW_COPY: a cast */
    }
}
/* The op as a type, so that kernels specialise on it (OP folds the switch above). */
template <int OP> struct mg__ew_fn {
    mg__map_args g;
    __device__ float operator()(int64_t i, float x, float y) const {
        return mg__ew_value((mg__ew_op)OP, i, x, y, g);
    }
    /* r[j] = f(i0 + j, x[j], y[j]) for the V elements of one vector. Dropout finds the
       vector's row once (one 64-bit division, not V) and, when the vector lies in one row, its
       global indices are consecutive: from a multiple of 4 it draws one Philox per 4 elements
       (the words mg_rand_u32 returns, as the CPU's mg__dropout_run uses them), else one per
       element. A vector across a row end goes element by element.                            */
    template <int V> __device__ void vec(int64_t i0, const float *x, const float *y,
                                         float *r) const {
        if constexpr (OP == MG__EW_DROPOUT && V % 4 == 0) {
            int64_t row = i0 / g.local_cols, col = i0 - row * g.local_cols;
            uint64_t gi = (uint64_t)((g.row_offset + row) * g.global_cols + g.col_offset + col);
            if (col + V <= g.local_cols) {
                if ((gi & 3) == 0) {
                    MG__UNROLL
                    for (int q = 0; q < V / 4; q++)
                        mg__dropout_group(r + 4 * q, x + 4 * q, g.key, (gi >> 2) + (uint64_t)q,
                                          g.threshold, g.scale);
                } else {
                    MG__UNROLL
                    for (int j = 0; j < V; j++)
                        r[j] = mg__dropout(x[j], mg_rand_u32(g.key, gi + (uint64_t)j),
                                           g.threshold, g.scale);
                }
                return;
            }
        }
        MG__UNROLL
        for (int j = 0; j < V; j++) r[j] = (*this)(i0 + j, x[j], y[j]);
    }
};
/* out[i] = f(i, a[i], b[i]) over n elements; a and b share an accessor type (either may be
   NULL). With vec, the first n − n mod V elements go as V-element vectors (all pointers then
   aligned to a vector), grid-stride; the tail, or everything without vec, element by element.
   Cost: reads (a? + b?)·s and writes s bytes per element (s = storage bytes); FLOPs per
   element: 1 (add, scale), 2 (axpy), ~20 (GELU, SiLU: one exp), ~25 (GELU'), ~7 (dropout:
   a quarter of Philox's 20 multiplies, the test and the scale).                               */
template <class IO, class IA, class F> static __global__ void mg__k_ew(int64_t n, IO out, IA a,
                                                                    IA b, F f, int vec) {
    enum { V = mg__vec_of<IO, IA>::V };
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t nv = vec ? n / V : 0, i;
    for (i = t; i < nv; i += stride) {
        float x[V], y[V], r[V];
        int j;
        for (j = 0; j < V; j++) x[j] = y[j] = 0.0f;
        if (a.p) a.template ldv<V>(i * V, x);
        if (b.p) b.template ldv<V>(i * V, y);
        f.template vec<V>(i * V, x, y, r);
        out.template stv<V>(i * V, r);
    }
    for (i = nv * V + t; i < n; i += stride)
        out.st(i, f(i, a.p ? a.ld(i) : 0.0f, b.p ? b.ld(i) : 0.0f));
}
template <class IO, class IA, int OP> static void mg__ew_launch(mg_ctx *ctx, const mg_tensor *out,
                                                                const mg_tensor *a,
                                                                const mg_tensor *b,
                                                                const mg__map_args *g) {
    enum { V = mg__vec_of<IO, IA>::V };
    int64_t n = mg_numel(out);
    int vec = mg__vec_ok(out->data, V, IO::BYTES) && mg__vec_ok(a ? a->data : NULL, V, IA::BYTES) &&
              mg__vec_ok(b ? b->data : NULL, V, IA::BYTES);
    mg__ew_fn<OP> f;
    memset(&f, 0, sizeof f);
    if (g) f.g = *g;
    if (n <= 0) return;
    MG_LAUNCH(mg__k_ew, mg__grid(vec ? n / V + n % V : n), MG__CUDA_THREADS, 0, MG__STREAM(ctx),
              n, mg__io_make<IO>(out), mg__io_make<IA>(a), mg__io_make<IA>(b), f, vec);
    MG_CUDA_LAUNCH_CHECK();
}
/* Instantiated: every op with out, a and b of one dtype; casts between fp32 and bf16/fp16.
   Any other combination runs through the run-time-dtype accessor.                         */
template <int OP> static void mg__cuda_ew_op(mg_ctx *ctx, const mg_tensor *out,
                                             const mg_tensor *a, const mg_tensor *b,
                                             const mg__map_args *g) {
    mg_dtype od = out->dtype, ad = a ? a->dtype : od;
#define MG__EW_LAUNCH(IO, IA) mg__ew_launch<IO, IA, OP>(ctx, out, a, b, g)
#define MG__EW_SAME(IO) MG__EW_LAUNCH(IO, IO)
    if (b && b->dtype != ad) MG__EW_LAUNCH(mg__io_dyn, mg__io_dyn);
    else if constexpr (OP == MG__EW_COPY) MG__IO_PAIR_DISPATCH(od, ad, MG__EW_LAUNCH);
    else if (ad != od) MG__EW_LAUNCH(mg__io_dyn, mg__io_dyn);
    else MG__IO_DISPATCH(od, MG__EW_SAME);
#undef MG__EW_LAUNCH
#undef MG__EW_SAME
}
static void mg__cuda_ew(mg_ctx *ctx, mg__ew_op op, const mg_tensor *out, const mg_tensor *a,
                        const mg_tensor *b, const mg__map_args *g) {
    switch (op) {
    case MG__EW_ADD: mg__cuda_ew_op<MG__EW_ADD>(ctx, out, a, b, g); break;
    case MG__EW_AXPY: mg__cuda_ew_op<MG__EW_AXPY>(ctx, out, a, b, g); break;
    case MG__EW_SCALE: mg__cuda_ew_op<MG__EW_SCALE>(ctx, out, a, b, g); break;
    case MG__EW_FILL: mg__cuda_ew_op<MG__EW_FILL>(ctx, out, a, b, g); break;
    case MG__EW_GELU: mg__cuda_ew_op<MG__EW_GELU>(ctx, out, a, b, g); break;
    case MG__EW_GELU_GRAD: mg__cuda_ew_op<MG__EW_GELU_GRAD>(ctx, out, a, b, g); break;
    case MG__EW_GELU_ERF: mg__cuda_ew_op<MG__EW_GELU_ERF>(ctx, out, a, b, g); break;
    case MG__EW_GELU_ERF_GRAD: mg__cuda_ew_op<MG__EW_GELU_ERF_GRAD>(ctx, out, a, b, g); break;
    case MG__EW_RELU2: mg__cuda_ew_op<MG__EW_RELU2>(ctx, out, a, b, g); break;
    case MG__EW_RELU2_GRAD: mg__cuda_ew_op<MG__EW_RELU2_GRAD>(ctx, out, a, b, g); break;
    case MG__EW_DROPOUT: mg__cuda_ew_op<MG__EW_DROPOUT>(ctx, out, a, b, g); break;
    case MG__EW_SWIGLU: mg__cuda_ew_op<MG__EW_SWIGLU>(ctx, out, a, b, g); break;
    default: mg__cuda_ew_op<MG__EW_COPY>(ctx, out, a, b, g); break;
    }
}

/* The generic one-thread-per-element kernel: f(i) for i < n, grid-stride. Its cost is the
   functor's (each functor below states its bytes and FLOPs per element).                     */
template <class F> static __global__ void mg__k_map(int64_t n, F f) {
    int64_t i;
    for (i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        f(i);
}
template <class F> static void mg__cuda_map(mg_ctx *ctx, int64_t n, F f) {
    if (n <= 0) return;
    MG_LAUNCH(mg__k_map, mg__grid(n), MG__CUDA_THREADS, 0, MG__STREAM(ctx), n, f);
    MG_CUDA_LAUNCH_CHECK();
}

/* --- SwiGLU backward, rotary embedding: V elements / V rotated pairs per thread --------------
   SwiGLU backward per element: reads 3s, writes 2s bytes, ~45 FLOPs (one exp). Rope per
   rotated pair: reads and writes 2s bytes of qkv, reads 8 bytes of the table, 6 FLOPs.
   SwiGLU backward: mg__k_swiglu_backward, specialised by the dtype of all five tensors and
   vectorised as mg__k_ew (V elements per step when every pointer is vector-aligned, then the
   tail); other dtype mixes through the run-time accessor, element by element.               */
template <class IO> static __global__ void mg__k_swiglu_backward(int64_t n, IO dgate, IO dup,
                                                                 IO dout, IO gate, IO up, int vec) {
    enum { V = 16 / IO::BYTES };
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t nv = vec ? n / V : 0, i;
    for (i = t; i < nv; i += stride) {
        float dy[V], x[V], y[V], dg[V], du[V];
        int j;
        dout.template ldv<V>(i * V, dy);   /* dout is read before either output is written */
        gate.template ldv<V>(i * V, x);
        up.template ldv<V>(i * V, y);
        for (j = 0; j < V; j++) {
            dg[j] = dy[j] * y[j] * mg__silu_grad(x[j]);
            du[j] = dy[j] * mg__silu(x[j]);
        }
        dgate.template stv<V>(i * V, dg);
        dup.template stv<V>(i * V, du);
    }
    for (i = nv * V + t; i < n; i += stride) {
        float dy = dout.ld(i), x = gate.ld(i), y = up.ld(i);
        dgate.st(i, dy * y * mg__silu_grad(x));
        dup.st(i, dy * mg__silu(x));
    }
}
template <class IO> static void mg__swiglu_backward_launch(mg_ctx *ctx, int64_t n,
        const mg_tensor *dgate, const mg_tensor *dup, const mg_tensor *dout,
        const mg_tensor *gate, const mg_tensor *up) {
    enum { V = 16 / IO::BYTES };
    int vec = mg__vec_ok(dgate->data, V, IO::BYTES) && mg__vec_ok(dup->data, V, IO::BYTES) &&
              mg__vec_ok(dout->data, V, IO::BYTES) && mg__vec_ok(gate->data, V, IO::BYTES) &&
              mg__vec_ok(up->data, V, IO::BYTES);
    if (n <= 0) return;
    MG_LAUNCH(mg__k_swiglu_backward, mg__grid(vec ? n / V + n % V : n), MG__CUDA_THREADS, 0,
              MG__STREAM(ctx), n,
              mg__io_make<IO>(dgate), mg__io_make<IO>(dup), mg__io_make<IO>(dout),
              mg__io_make<IO>(gate), mg__io_make<IO>(up), vec);
    MG_CUDA_LAUNCH_CHECK();
}
/* Rope, specialised by qkv's accessor: item k of row r (token r, position t0 + r / B) rotates
   V consecutive pairs (x[p … p+V), x[p+h … p+h+V)) of one of the row's ng·(per + 1) query and
   key heads with the table's V (cos, sin) pairs, V = 16/s when h and hd are multiples of it and
   qkv and the table are vector-aligned, else 1; the pairs' 2V floats of the table are read as
   16-byte vectors (a quarter of the loads, each lane's 64 bytes of table in 4 loads instead
   of 16 at V = 8). One 64-bit division per item (the row), the rest in 32 bits. */
struct mg__rope_geom {   /* heads: the rotated ones of a row, ng·(per + 1) = nh + ng */
    int64_t N, C3; int B, per, hd, h, heads, t0; const float *cos_sin; float sign;
};
template <int V, class IO> __device__ static inline void mg__rope_items(const IO &qkv,
                                                                      const mg__rope_geom &g) {
    int per_head = g.h / V;
    int64_t per_row = (int64_t)g.heads * per_head, n = g.N * per_row, i;
    for (i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / per_row;
        int k = (int)(i - r * per_row), head = k / per_head, p = (k - head * per_head) * V;
        int grp = head / (g.per + 1), j = head - grp * (g.per + 1), e;
        int64_t x1 = r * g.C3 + (int64_t)(grp * (g.per + 2) + j) * g.hd + p;
        const float *cs = g.cos_sin + ((int64_t)(g.t0 + r / g.B) * g.h + p) * 2;
        const mg__io_f32 table = mg__io_ptr<mg__io_f32>(cs, MG_F32);
        float a[V], b[V], c[2 * V];
        for (e = 0; e + 4 <= 2 * V; e += 4) table.template ldv<4>(e, c + e);   /* V ≥ 2 */
        for (; e < 2 * V; e++) c[e] = cs[e];
        qkv.template ldv<V>(x1, a);
        qkv.template ldv<V>(x1 + g.h, b);
        for (e = 0; e < V; e++) mg__rope_pair(&a[e], &b[e], c[2 * e], g.sign * c[2 * e + 1]);
        qkv.template stv<V>(x1, a);
        qkv.template stv<V>(x1 + g.h, b);
    }
}
template <class IO> static __global__ void mg__k_rope(IO qkv, mg__rope_geom g, int vec) {
    if (vec) mg__rope_items<16 / IO::BYTES>(qkv, g);
    else mg__rope_items<1>(qkv, g);
}
template <class IO> static void mg__rope_launch(mg_ctx *ctx, const mg_tensor *qkv,
                                                const mg__rope_geom *g) {
    enum { V = 16 / IO::BYTES };
    int vec = g->h % V == 0 && g->hd % V == 0 && mg__vec_ok(qkv->data, V, IO::BYTES) &&
              mg__vec_ok(g->cos_sin, 4, 4);   /* the table's 2V floats as 16-byte vectors */
    int64_t items = g->N * g->heads * (vec ? g->h / V : g->h);
    if (items <= 0) return;
    MG_LAUNCH(mg__k_rope, mg__grid(items), MG__CUDA_THREADS, 0, MG__STREAM(ctx),
              mg__io_make<IO>(qkv), *g, vec);
    MG_CUDA_LAUNCH_CHECK();
}

/* --- column sums ---------------------------------------------------------------------------
   dst[c] += Σ_r src[r,c] — or, with inp (the layernorm's weight gradient), Σ_r src[r,c]·x̂[r,c]
   where x̂ = (inp − mean[r])·rstd[r], and then plain[c] += Σ_r src[r,c] in the same pass (the
   norm's bias gradient, as mg__cpu_colsum's plain). Rows N are many (8192 tokens) and columns
   few (768): a grid of only ⌈C/32⌉ blocks each walking all rows used 24 of an H100's 132 SMs
   (173 µs at 8192 × 768 bf16). So the rows split into K chunks of R rows over a 2-D grid
   (⌈C/(32·V)⌉ column blocks × K), K chosen for about MG__COLSUM_PARTS column blocks' worth of
   partial sums, each chunk at least MG__COLSUM_MIN_ROWS rows:
     pass 1 (mg__k_colsum_part): block (x, k) = 32 column lanes × 16 row lanes; a thread owns V
       neighbouring columns (V = 4 where C and every pointer allow one vector load per row and
       operand: 8 bytes of 16-bit storage, 16 of fp32, so a warp reads 256–512 contiguous
       bytes of a row; else V = 1) and row lane y walks rows k·R + y, +16, … < (k+1)·R; the 16
       lanes' sums add in lane order into part[k][c] (fp32 scratch).
     pass 2 (mg__k_colsum_finish): a thread per column adds part[0..K−1][c] in chunk order
       and adds the sum into dst (dst's dtype, fp32 or 16-bit; rounded once).
   Fixed grid and orders for a given (N, C): deterministic, no atomics; V changes which thread
   owns a column, not the order of its sum. K = 1 (few rows or many columns) skips pass 2: the
   blocks add into dst themselves. The scratch is at most 2·MG__COLSUM_PARTS·32 floats
   (256 KiB: K·C ≤ 32·MG__COLSUM_PARTS), from the arena. The loads are compiled per dtype
   (src: fp32, bf16, fp16; inp or pre/dpre: src's dtype, or 16-bit beside an fp32 src), any
   other combination through the run-time-dtype accessor.
   Cost: pass 1 reads N·C·s (src) + N·C·x + 8·N (inp, mean, rstd: the norm's variant) and
   writes 4·K·C (×2 with plain); pass 2 reads those and reads and writes C·d. N·C FLOPs
   (plain) or 5·N·C (the norm's, with plain). Bandwidth bound: at 8192 × 768 bf16 the 12.6 MB
   read is ~5 µs of an H100's HBM; the partials (≤ 256 KiB) stay in L2.                      */
#define MG__COLSUM_PARTS 1024  /* partial sums per column block of 32: K·C ≤ 32·this (scratch) */
#define MG__COLSUM_MIN_ROWS 64   /* per chunk: below, partials and pass 2 cost more than they save */
#define MG__COLSUM_LANES 16      /* row lanes of a block (× 32 column lanes: 512 threads) */
#define MG__COLSUM_UNROLL 2      /* rows a thread loads before it adds them                */
/* gelu (the linear + activation backward, mg__cuda_colsum_gelu): src is the fp32 product
   dout·W and each element becomes v = src·act'(pre), stored to gelu->dpre and summed (one pass
   instead of a dGELU pass writing fp32 and a sum reading it back). */
typedef struct mg__colsum_gelu {
    const void *pre; mg_dtype prd; void *dpre; mg_dtype dd;
    int act;                    /* the activation (mg_act_kind) whose derivative applies        */
} mg__colsum_gelu;
/* Pass 1 with src read through accessor IS and inp, pre and dpre through IX: V columns a
   thread with the compiled accessors, 1 with the run-time-dtype one (launched only where C and
   the pointers allow V). */
template <class IO> struct mg__colsum_vec { enum { V = 4 }; };
template <> struct mg__colsum_vec<mg__io_dyn> { enum { V = 1 }; };
template <class IS, class IX>
static __global__ void __launch_bounds__(32 * MG__COLSUM_LANES, 2) mg__k_colsum_part(float *part,
        void *dst, mg_dtype dd, void *plain, mg_dtype pd, IS src, IX inp, const float *mean,
        const float *rstd, int64_t N, int64_t C, int64_t R, IX pre, IX dpre, int act) {
    enum { V = mg__colsum_vec<IS>::V };
    /* column j of a thread's V at [y][32·j + x]: a warp (one y) stores and reads 32 consecutive
       words at a time, free of bank conflicts */
    __shared__ float sw[MG__COLSUM_LANES][32 * V], sp[MG__COLSUM_LANES][32 * V];
    int64_t c = ((int64_t)blockIdx.x * 32 + threadIdx.x) * V, K = gridDim.y, k = blockIdx.y;
    int64_t r0 = k * R, r1 = r0 + R < N ? r0 + R : N, r;
    float acc[V], acc1[V];
    int j;
    for (j = 0; j < V; j++) acc[j] = acc1[j] = 0.0f;
    /* MG__COLSUM_UNROLL rows a step, every load of the step issued before the first add: the
       grid is ~250 blocks, two an SM, so with one load in flight a thread an H100 SM holds
       8 KiB of 16-bit rows in flight, under the ~15 KiB its share of the HBM bandwidth needs
       over the memory latency (the H100 run: 44 µs for a 37.7 MB column sum, 25% of the
       bandwidth). Two rows double it; four spill under the two-blocks bound (64 registers).
       The adds keep row order, so the sums are the same bits.                              */
    if (c < C)   /* with V > 1, C is a multiple of V: the thread's V columns all exist */
        for (r = r0 + threadIdx.y; r < r1; r += MG__COLSUM_UNROLL * MG__COLSUM_LANES) {
            enum { U = MG__COLSUM_UNROLL };
            float v[U][V], x[U][V], g[U][V];
            int u;
            MG__UNROLL
            for (u = 0; u < U; u++) {
                int64_t ru = r + (int64_t)u * MG__COLSUM_LANES;
                if (ru >= r1) break;
                src.template ldv<V>(ru * C + c, v[u]);
                if (pre.p) pre.template ldv<V>(ru * C + c, g[u]);
                if (inp.p) inp.template ldv<V>(ru * C + c, x[u]);
            }
            MG__UNROLL
            for (u = 0; u < U; u++) {
                int64_t ru = r + (int64_t)u * MG__COLSUM_LANES;
                if (ru >= r1) break;
                if (pre.p) {
                    for (j = 0; j < V; j++)
                        v[u][j] *= mg__act_grad(act, g[u][j]);
                    dpre.template stv<V>(ru * C + c, v[u]);
                }
                if (inp.p) {
                    float mu = mean[ru], rs = rstd[ru];
                    for (j = 0; j < V; j++) {
                        acc[j] += v[u][j] * ((x[u][j] - mu) * rs);
                        acc1[j] += v[u][j];
                    }
                } else {
                    for (j = 0; j < V; j++) acc[j] += v[u][j];
                }
            }
        }
    for (j = 0; j < V; j++) {
        sw[threadIdx.y][32 * j + threadIdx.x] = acc[j];
        sp[threadIdx.y][32 * j + threadIdx.x] = acc1[j];
    }
    __syncthreads();
    if (threadIdx.y == 0)
        for (j = 0; j < V && c + j < C; j++) {
            float s = 0.0f, s1 = 0.0f;
            int y;
            for (y = 0; y < MG__COLSUM_LANES; y++) {
                s += sw[y][32 * j + threadIdx.x];
                s1 += sp[y][32 * j + threadIdx.x];
            }
            if (part) {
                part[k * C + c + j] = s;
                if (inp.p && plain) part[(K + k) * C + c + j] = s1;
            } else {
                mg_store(dst, dd, c + j, mg_load(dst, dd, c + j) + s);
                if (inp.p && plain) mg_store(plain, pd, c + j, mg_load(plain, pd, c + j) + s1);
            }
        }
}
static __global__ void mg__k_colsum_finish(void *dst, mg_dtype dd, void *plain, mg_dtype pd,
                                           const float *part, int64_t K, int64_t C) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, k;
    float s = 0.0f, s1 = 0.0f;
    if (c >= C) return;
    for (k = 0; k < K; k++) s += part[k * C + c];
    mg_store(dst, dd, c, mg_load(dst, dd, c) + s);
    if (plain) {
        for (k = 0; k < K; k++) s1 += part[(K + k) * C + c];
        mg_store(plain, pd, c, mg_load(plain, pd, c) + s1);
    }
}
/* Pass 1's launch for accessors IS, IX. */
template <class IS, class IX>
static void mg__colsum_part_launch(mg_ctx *ctx, dim3 grid, float *part, const mg_tensor *dst,
                                   const mg_tensor *plain, const mg_tensor *src,
                                   const mg_tensor *inp, const float *mean, const float *rstd,
                                   int64_t N, int64_t C, int64_t R, mg__colsum_gelu gelu) {
    MG_LAUNCH(mg__k_colsum_part, grid, dim3(32, MG__COLSUM_LANES), 0, MG__STREAM(ctx),
              part, dst->data, dst->dtype, plain ? plain->data : NULL,
              plain ? plain->dtype : MG_F32, mg__io_make<IS>(src), mg__io_make<IX>(inp), mean,
              rstd, N, C, R, mg__io_ptr<IX>(gelu.pre, gelu.prd), mg__io_ptr<IX>(gelu.dpre, gelu.dd),
              gelu.act);
}
/* plain (dbias beside the norm's dweight) is read only with inp. */
static void mg__cuda_colsum_gelu(mg_ctx *ctx, const mg_tensor *dst, const mg_tensor *src,
                                 const mg_tensor *inp, const float *mean, const float *rstd,
                                 const mg_tensor *plain, mg__colsum_gelu gelu) {
    const mg_dtype sd = src->dtype;
    /* inp, pre and dpre share one dtype xd for the compiled loads (none: src's) */
    const mg_dtype xd = inp ? inp->dtype : gelu.pre ? gelu.prd : sd;
    const int xs = (int)mg_dtype_size(xd), ss = (int)mg_dtype_size(sd);
    const int VT = mg__colsum_vec<mg__io_f32>::V;   /* columns a thread of the typed kernels */
    int64_t N = mg_rows(src), C = mg_cols(src), cb, want, R, K;
    int typed = (sd == xd || (sd == MG_F32 && xd != MG_F32)) && (!gelu.pre || gelu.dd == xd) &&
                C % VT == 0 && mg__vec_ok(src->data, VT, ss) && mg__vec_ok(inp ? inp->data : NULL, VT, xs) &&
                mg__vec_ok(gelu.pre, VT, xs) && mg__vec_ok(gelu.dpre, VT, xs);
    const int V = typed ? VT : 1;
    size_t mark = mg_arena_mark(ctx);
    float *part = NULL;
    dim3 grid;
    if (C == 0 || N == 0) return;
    if (!inp) plain = NULL;
    cb = (C + 32 * V - 1) / (32 * V);
    want = 32 * MG__COLSUM_PARTS / C;   /* chunks */
    if (want < 1) want = 1;
    R = (N + want - 1) / want;
    if (R < MG__COLSUM_MIN_ROWS) R = MG__COLSUM_MIN_ROWS;
    K = (N + R - 1) / R;
    if (K > 1) part = (float *)mg_alloc(ctx, (size_t)(plain ? 2 : 1) * (size_t)(K * C) * sizeof(float));
    grid = dim3((unsigned)cb, (unsigned)K);
    if (!typed)
        mg__colsum_part_launch<mg__io_dyn, mg__io_dyn>(ctx, grid, part, dst, plain, src, inp, mean, rstd, N, C, R, gelu);
    else if (sd == MG_F32 && xd == MG_BF16)
        mg__colsum_part_launch<mg__io_f32, mg__io_bf16>(ctx, grid, part, dst, plain, src, inp, mean, rstd, N, C, R, gelu);
    else if (sd == MG_F32 && xd == MG_F16)
        mg__colsum_part_launch<mg__io_f32, mg__io_f16>(ctx, grid, part, dst, plain, src, inp, mean, rstd, N, C, R, gelu);
    else if (sd == MG_BF16)
        mg__colsum_part_launch<mg__io_bf16, mg__io_bf16>(ctx, grid, part, dst, plain, src, inp, mean, rstd, N, C, R, gelu);
    else if (sd == MG_F16)
        mg__colsum_part_launch<mg__io_f16, mg__io_f16>(ctx, grid, part, dst, plain, src, inp, mean, rstd, N, C, R, gelu);
    else
        mg__colsum_part_launch<mg__io_f32, mg__io_f32>(ctx, grid, part, dst, plain, src, inp, mean, rstd, N, C, R, gelu);
    MG_CUDA_LAUNCH_CHECK();
    if (part) {
        MG_LAUNCH(mg__k_colsum_finish, (unsigned)((C + MG__CUDA_THREADS - 1) / MG__CUDA_THREADS),
                  MG__CUDA_THREADS, 0, MG__STREAM(ctx), dst->data, dst->dtype,
                  plain ? plain->data : NULL, plain ? plain->dtype : MG_F32, part, K, C);
        MG_CUDA_LAUNCH_CHECK();
    }
    mg_arena_release(ctx, mark);
}
static void mg__cuda_colsum(mg_ctx *ctx, const mg_tensor *dst, const mg_tensor *src,
                            const mg_tensor *inp, const float *mean, const float *rstd,
                            const mg_tensor *plain) {
    mg__colsum_gelu none = {NULL, MG_F32, NULL, MG_F32, 0};
    mg__cuda_colsum_gelu(ctx, dst, src, inp, mean, rstd, plain, none);
}

/* --- embedding -----------------------------------------------------------------------------
   Forward per element of out: reads s (wte row, gathered) + s (wpe) + 4/C (token), writes s.
   dwte: reads s, reads and writes the touched rows of dwte once (d bytes); dwpe: reads B·s + d,
   writes d per position element. ≤ 1 FLOP per byte: bandwidth bound. The three kernels are
   specialised by their accessors (out or the gradient: IO; the weights or dout: IA) and move V
   consecutive columns per thread, V = 16 bytes of the wider dtype when C is a multiple of it
   and every pointer is vector-aligned (else 1).                                              */
struct mg__embed_geom {
    const int32_t *tokens; int64_t N, C, Vw, vocab_start; int B, T, t0;
};
template <int V, class IO, class IA> __device__ static inline void mg__embed_items(
        const IO &out, const IA &wte, const IA &wpe, const mg__embed_geom &g) {
    int64_t per_row = g.C / V, n = g.N * per_row, i;
    for (i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / per_row, c = (i - r * per_row) * V;
        int64_t tok = mg__embed_row_token(g.tokens, r, g.B, g.T, g.t0, g.vocab_start);
        float v[V], p[V];
        int e;
        for (e = 0; e < V; e++) v[e] = 0.0f;
        if (tok >= 0 && tok < g.Vw) wte.template ldv<V>(tok * g.C + c, v);
        if (wpe.p) {
            wpe.template ldv<V>((g.t0 + r / g.B) * g.C + c, p);
            for (e = 0; e < V; e++) v[e] += p[e];
        }
        out.template stv<V>(r * g.C + c, v);
    }
}
template <class IO, class IA> static __global__ void mg__k_embed(IO out, IA wte, IA wpe,
                                                                 mg__embed_geom g, int vec) {
    if (vec) mg__embed_items<mg__vec_of<IO, IA>::V>(out, wte, wpe, g);
    else mg__embed_items<1>(out, wte, wpe, g);
}
/* Whether rows of C columns of every tensor given (NULL: none) go V columns at a time. */
static int mg__embed_vec(int64_t C, int V, const mg_tensor *a, const mg_tensor *b,
                         const mg_tensor *c) {
    const mg_tensor *t[3] = {a, b, c};
    int k, ok = C % V == 0;
    for (k = 0; k < 3; k++)
        if (t[k]) ok = ok && mg__vec_ok(t[k]->data, V, (int)mg_dtype_size(t[k]->dtype));
    return ok;
}
template <class IO, class IA> static void mg__embed_launch(mg_ctx *ctx, const mg_tensor *out,
                                                           const mg_tensor *wte,
                                                           const mg_tensor *wpe,
                                                           const mg__embed_geom *g) {
    enum { V = mg__vec_of<IO, IA>::V };
    int vec = mg__embed_vec(g->C, V, out, wte, wpe);
    int64_t items = g->N * (vec ? g->C / V : g->C);
    if (items <= 0) return;
    MG_LAUNCH(mg__k_embed, mg__grid(items), MG__CUDA_THREADS, 0, MG__STREAM(ctx),
              mg__io_make<IO>(out), mg__io_make<IA>(wte), mg__io_make<IA>(wpe), *g, vec);
    MG_CUDA_LAUNCH_CHECK();
}
/* dwte, deterministic: the CPU twin's order — each token's rows in increasing row order, each
   add rounded to dwte's dtype — so the result is the same every run (no float atomics) and
   bit for bit the CPU's. The rows are grouped by token with a stable sort, then added:
     sort    the rows by key = their token (Vw for rows of other vocabulary shards, which sort
             last), least significant 8 bits first, each pass stable: a block of 256 rows
             counts its digits (radix_hist: hist[digit][block]), a one-block exclusive scan
             turns the counts into each (digit, block)'s first slot, and radix_scatter puts a
             row at its slot plus the number of rows before it in its block with its digit.
             ⌈log2(Vw + 1) / 8⌉ passes (2 for GPT-2's 50304 rows, 3 for Llama 3's 128256);
             each token's rows end in one run of `sorted`, in increasing row order;
     add     a block per sorted slot; the slot that starts a run of a token in the slice
             (the first, or its predecessor's token differs) walks it: thread c,
             w = round(w + dout[row][c]) from w = dwte[tok][c].
   Cost: per pass, N row indices read and written twice and 256·N/256 counts scanned; the
   in-block ranks are 256 shared-memory compares a row. The add reads dout once (N·C·s) and
   reads and writes the touched rows of dwte once.                                          */
/* out = the exclusive prefix sum of in[0 … n) (one block of MG__CUDA_THREADS). */
static __global__ void mg__k_exclusive_scan(int *out, const int *in, int64_t n) {
    __shared__ int part[MG__CUDA_THREADS];
    int64_t per = (n + blockDim.x - 1) / blockDim.x, v0 = threadIdx.x * per, v;
    int s = 0, k;
    for (v = v0; v < v0 + per && v < n; v++) s += in[v];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0)
        for (k = 0, s = 0; k < (int)blockDim.x; k++) { int c = part[k]; part[k] = s; s += c; }
    __syncthreads();
    s = part[threadIdx.x];
    for (v = v0; v < v0 + per && v < n; v++) { out[v] = s; s += in[v]; }
}
/* The sort's key digit of the row in slot i of src (src NULL: the identity, row i). */
static __device__ int mg__embed_digit(const int *src, int64_t i, const int32_t *tokens, int B,
                                      int T, int t0, int64_t vocab_start, int64_t Vw, int shift,
                                      int *row) {
    int64_t r = src ? src[i] : i, tok = mg__embed_row_token(tokens, r, B, T, t0, vocab_start);
    *row = (int)r;
    return (int)(((tok >= 0 && tok < Vw) ? tok : Vw) >> shift) & 255;
}
static __global__ void mg__k_embed_radix_hist(int *hist, const int *src, const int32_t *tokens,
                                              int64_t N, int B, int T, int t0,
                                              int64_t vocab_start, int64_t Vw, int shift) {
    __shared__ int h[256];
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int row, d;
    h[threadIdx.x] = 0;   /* blockDim.x = 256: one digit per thread */
    __syncthreads();
    if (i < N) {
        d = mg__embed_digit(src, i, tokens, B, T, t0, vocab_start, Vw, shift, &row);
        atomicAdd(&h[d], 1);
    }
    __syncthreads();
    hist[(int64_t)threadIdx.x * gridDim.x + blockIdx.x] = h[threadIdx.x];
}
static __global__ void mg__k_embed_radix_scatter(int *dst, const int *src, const int *first,
                                                 const int32_t *tokens, int64_t N, int B, int T,
                                                 int t0, int64_t vocab_start, int64_t Vw,
                                                 int shift) {
    __shared__ int digit[MG__CUDA_THREADS];
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int row = 0, d = -1, rank = 0, j;
    if (i < N) d = mg__embed_digit(src, i, tokens, B, T, t0, vocab_start, Vw, shift, &row);
    digit[threadIdx.x] = d;
    __syncthreads();
    if (i >= N) return;
    for (j = 0; j < (int)threadIdx.x; j++) rank += digit[j] == d;
    dst[first[(int64_t)d * gridDim.x + blockIdx.x] + rank] = row;
}
/* dwte += the rows of one token's run: a block per sorted slot, V columns per thread. */
template <int V, class IO, class IA> __device__ static inline void mg__embed_add_run(
        const IO &dwte, mg_dtype wd, const IA &dout, const int *sorted, int64_t i, int64_t end,
        int64_t tok, int64_t C) {
    int64_t c, k;
    int e;
    for (c = threadIdx.x * (int64_t)V; c < C; c += (int64_t)blockDim.x * V) {
        float w[V], d[V];
        dwte.template ldv<V>(tok * C + c, w);
        for (k = i; k < end; k++) {              /* the CPU's order: each add rounded to wd */
            dout.template ldv<V>((int64_t)sorted[k] * C + c, d);
            for (e = 0; e < V; e++) w[e] = mg__attn_round(w[e] + d[e], wd);
        }
        dwte.template stv<V>(tok * C + c, w);
    }
}
template <class IO, class IA> static __global__ void mg__k_embed_add(IO dwte, mg_dtype wd, IA dout,
                                                                     const int *sorted,
                                                                     mg__embed_geom g, int vec) {
    const int32_t *tokens = g.tokens;
    int64_t i = blockIdx.x, tok = mg__embed_row_token(tokens, sorted[i], g.B, g.T, g.t0, g.vocab_start);
    int64_t end;
    if (tok < 0 || tok >= g.Vw) return;          /* another shard's row: those sort last */
    if (i > 0 && mg__embed_row_token(tokens, sorted[i - 1], g.B, g.T, g.t0, g.vocab_start) == tok)
        return;                                  /* not the first row of its token's run */
    for (end = i + 1; end < g.N &&
                      mg__embed_row_token(tokens, sorted[end], g.B, g.T, g.t0, g.vocab_start) == tok;)
        end++;
    if (vec) mg__embed_add_run<mg__vec_of<IO, IA>::V>(dwte, wd, dout, sorted, i, end, tok, g.C);
    else mg__embed_add_run<1>(dwte, wd, dout, sorted, i, end, tok, g.C);
}
/* dwpe: element (t, c) sums its B rows in order (no atomics), V columns per thread. */
template <int V, class IO, class IA> __device__ static inline void mg__embed_dwpe_items(
        const IO &dwpe, const IA &dout, const mg__embed_geom &g) {
    int64_t per_pos = g.C / V, n = g.N / g.B * per_pos, i;
    for (i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / per_pos, c = (i - t * per_pos) * V, p = (g.t0 + t) * g.C + c;
        float s[V], d[V];
        int b, e;
        dwpe.template ldv<V>(p, s);
        for (b = 0; b < g.B; b++) {
            dout.template ldv<V>((t * g.B + b) * g.C + c, d);
            for (e = 0; e < V; e++) s[e] += d[e];
        }
        dwpe.template stv<V>(p, s);
    }
}
template <class IO, class IA> static __global__ void mg__k_embed_dwpe(IO dwpe, IA dout,
                                                                      mg__embed_geom g, int vec) {
    if (vec) mg__embed_dwpe_items<mg__vec_of<IO, IA>::V>(dwpe, dout, g);
    else mg__embed_dwpe_items<1>(dwpe, dout, g);
}
/* grad = dwte (sorted: the rows grouped by token) or, with sorted NULL, dwpe. */
template <class IO, class IA> static void mg__embed_backward_launch(mg_ctx *ctx,
        const mg_tensor *grad, const mg_tensor *dout, const int *sorted, const mg__embed_geom *g) {
    enum { V = mg__vec_of<IO, IA>::V };
    int vec = mg__embed_vec(g->C, V, grad, dout, NULL);
    if (sorted) {   /* a block per sorted row */
        MG_LAUNCH(mg__k_embed_add, (unsigned)g->N, MG__CUDA_THREADS, 0, MG__STREAM(ctx),
                  mg__io_make<IO>(grad), grad->dtype, mg__io_make<IA>(dout), sorted, *g, vec);
    } else {        /* an item per position and column vector */
        int64_t items = g->N / g->B * (vec ? g->C / V : g->C);
        if (items <= 0) return;
        MG_LAUNCH(mg__k_embed_dwpe, mg__grid(items), MG__CUDA_THREADS, 0, MG__STREAM(ctx),
                  mg__io_make<IO>(grad), mg__io_make<IA>(dout), *g, vec);
    }
    MG_CUDA_LAUNCH_CHECK();
}

/* --- layernorm / RMSNorm: a warp per row up to MG__NORM_WARP_MAX columns, else a block ------
   Specialised by the activations' accessor IX (inp, out / dout, dinp) and the weights' IW.
   The threads of a row (the 32 lanes of a warp, or the block) walk it in chunks of V
   consecutive elements, one 128-bit vector per chunk when vec (every row and pointer aligned
   to a vector: C a multiple of V), else element by element with bounds; sums go through warp
   shuffles (warp per row) or the block helpers. The per-element math is 6c's mg__ln_*, the
   two-pass statistics the CPU's (mean, then Σ (x − μ)²).
   Cost per row of C: forward reads 3·C·s (inp three times, from cache after the first) + C·w
   and writes C·s + 8 bytes, ~8·C FLOPs; backward reads 3·C·(2s) + C·w (+ C·s to accumulate),
   writes C·s, ~12·C FLOPs (s, w: activation and weight bytes). DRAM traffic: one read of inp
   (and dout) and one write; rows past L1 read again from L2.                               */
#define MG__NORM_WARP_MAX 4096
#define MG__NORM_ROWS_PER_BLOCK (MG__CUDA_THREADS / 32)
template <int K> struct mg__int_tag { static constexpr int value = K; };   /* a compile-time int as an argument */
template <int WARP> __device__ static inline float mg__row_sum(float v) {
    if constexpr (WARP) {
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
        return v;
    } else {
        return mg__block_sum(v);
    }
}
/* Chunk [j0, j0 + V) of the row at base: a vector when vec, else the elements < C (0 past). */
template <int V, class IO> __device__ static inline void mg__ld_chunk(const IO &io, int64_t base,
                                                                     int64_t j0, int64_t C,
                                                                     int vec, float *x) {
    if (vec) { io.template ldv<V>(base + j0, x); return; }
    for (int t = 0; t < V; t++) x[t] = j0 + t < C ? io.ld(base + j0 + t) : 0.0f;
}
template <int V, class IO> __device__ static inline void mg__st_chunk(const IO &io, int64_t base,
                                                                     int64_t j0, int64_t C,
                                                                     int vec, const float *x) {
    if (vec) { io.template stv<V>(base + j0, x); return; }
    for (int t = 0; t < V; t++) if (j0 + t < C) io.st(base + j0 + t, x[t]);
}
/* This thread's row (N: none) and its first chunk and chunk stride, for a warp or a block. */
#define MG__NORM_ROW_SETUP(WARP, V)                                                            \
    int64_t row = WARP ? blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5) : blockIdx.x; \
    int64_t j_first = (int64_t)(WARP ? threadIdx.x & 31 : threadIdx.x) * V;                  \
    int64_t j_step = (int64_t)(WARP ? 32 : blockDim.x) * V, base = row * C, j;                \
    if (row >= N) return; /* a whole warp (warp per row; no block barriers there) */
template <int WARP, class IX, class IW> static __global__ void mg__k_norm_forward(mg__int_tag<WARP>,
        IX out, float *mean, float *rstd, IX inp, IW w, IW b, int64_t N, int64_t C, mg_norm k,
        int vec) {
    enum { V = mg__vec_of<IX, IW>::V };
    float x[V], y[V], wv[V], bv[V], s = 0.0f, ss = 0.0f, mu = 0.0f, rs;
    int t;
    MG__NORM_ROW_SETUP(WARP, V)
    if (!k.rms) {
        for (j = j_first; j < C; j += j_step) {
            mg__ld_chunk<V>(inp, base, j, C, vec, x);
            for (t = 0; t < V; t++) s += x[t];
        }
        mu = mg__row_sum<WARP>(s) / (float)C;
    }
    for (j = j_first; j < C; j += j_step) {
        mg__ld_chunk<V>(inp, base, j, C, vec, x);
        for (t = 0; t < V && j + t < C; t++) ss += (x[t] - mu) * (x[t] - mu);
    }
    rs = mg__ln_rstd(mg__row_sum<WARP>(ss) / (float)C, k.eps);
    for (j = j_first; j < C; j += j_step) {
        mg__ld_chunk<V>(inp, base, j, C, vec, x);
        mg__ld_chunk<V>(w, 0, j, C, vec, wv);
        if (b.p) mg__ld_chunk<V>(b, 0, j, C, vec, bv);
        else for (t = 0; t < V; t++) bv[t] = 0.0f;
        for (t = 0; t < V; t++) y[t] = (x[t] - mu) * rs * wv[t] + bv[t];
        mg__st_chunk<V>(out, base, j, C, vec, y);
    }
    if (j_first == 0) { mean[row] = mu; rstd[row] = rs; }
}
template <int WARP, class IX, class IW> static __global__ void mg__k_norm_backward(mg__int_tag<WARP>,
        IX dinp, IX dout, IX inp, IW w, const float *mean, const float *rstd, int64_t N,
        int64_t C, int accumulate, int rms, int vec) {
    enum { V = mg__vec_of<IX, IW>::V };
    float x[V], dy[V], wv[V], d[V], sg = 0.0f, sgn = 0.0f, mu, rs, mean_g, mean_gn;
    int t;
    MG__NORM_ROW_SETUP(WARP, V)
    mu = mean[row];
    rs = rstd[row];
    for (j = j_first; j < C; j += j_step) {
        mg__ld_chunk<V>(dout, base, j, C, vec, dy);
        mg__ld_chunk<V>(inp, base, j, C, vec, x);
        mg__ld_chunk<V>(w, 0, j, C, vec, wv);
        for (t = 0; t < V; t++) {   /* past C: dy = w = 0, so g = 0 adds nothing */
            float g = dy[t] * wv[t];
            sg += g;
            sgn += g * ((x[t] - mu) * rs); /* the CPU's association */
        }
    }
    mean_g = rms ? 0.0f : mg__row_sum<WARP>(sg) / (float)C;
    mean_gn = mg__row_sum<WARP>(sgn) / (float)C;
    for (j = j_first; j < C; j += j_step) {
        mg__ld_chunk<V>(dout, base, j, C, vec, dy);
        mg__ld_chunk<V>(inp, base, j, C, vec, x);
        mg__ld_chunk<V>(w, 0, j, C, vec, wv);
        if (accumulate) mg__ld_chunk<V>(dinp, base, j, C, vec, d);
        for (t = 0; t < V; t++) {
            float v = mg__ln_dx(dy[t] * wv[t], (x[t] - mu) * rs, rs, mean_g, mean_gn);
            d[t] = accumulate ? d[t] + v : v;
        }
        mg__st_chunk<V>(dinp, base, j, C, vec, d);
    }
}
/* Grid: rows / (rows per block) blocks of 256 threads (warp per row) or one block per row. */
static unsigned mg__norm_grid(int64_t N, int64_t C) {
    return C <= MG__NORM_WARP_MAX
               ? mg__cuda_row_grid((N + MG__NORM_ROWS_PER_BLOCK - 1) / MG__NORM_ROWS_PER_BLOCK)
               : mg__cuda_row_grid(N);
}
template <class IX, class IW> static void mg__norm_forward_launch(mg_ctx *ctx, const mg_norm *k,
        const mg_tensor *out, float *mean, float *rstd, const mg_tensor *inp,
        const mg_tensor *weight, const mg_tensor *bias) {
    enum { V = mg__vec_of<IX, IW>::V };
    int64_t N = mg_rows(inp), C = mg_cols(inp);
    int vec = C % V == 0 && mg__vec_ok(out->data, V, IX::BYTES) &&
              mg__vec_ok(inp->data, V, IX::BYTES) && mg__vec_ok(weight->data, V, IW::BYTES) &&
              mg__vec_ok(bias ? bias->data : NULL, V, IW::BYTES);
    IX o = mg__io_make<IX>(out), x = mg__io_make<IX>(inp);
    IW w = mg__io_make<IW>(weight), b = mg__io_make<IW>(bias);
    if (C <= MG__NORM_WARP_MAX)
        MG_LAUNCH(mg__k_norm_forward, mg__norm_grid(N, C), MG__CUDA_THREADS, 0, MG__STREAM(ctx),
                  mg__int_tag<1>(), o, mean, rstd, x, w, b, N, C, *k, vec);
    else
        MG_LAUNCH(mg__k_norm_forward, mg__norm_grid(N, C), MG__CUDA_THREADS, 0, MG__STREAM(ctx),
                  mg__int_tag<0>(), o, mean, rstd, x, w, b, N, C, *k, vec);
    MG_CUDA_LAUNCH_CHECK();
}
template <class IX, class IW> static void mg__norm_backward_launch(mg_ctx *ctx, int rms,
        const mg_tensor *dinp, const mg_tensor *dout, const mg_tensor *inp,
        const mg_tensor *weight, const float *mean, const float *rstd, int accumulate) {
    enum { V = mg__vec_of<IX, IW>::V };
    int64_t N = mg_rows(inp), C = mg_cols(inp);
    int vec = C % V == 0 && mg__vec_ok(dinp->data, V, IX::BYTES) &&
              mg__vec_ok(dout->data, V, IX::BYTES) && mg__vec_ok(inp->data, V, IX::BYTES) &&
              mg__vec_ok(weight->data, V, IW::BYTES);
    IX di = mg__io_make<IX>(dinp), dy = mg__io_make<IX>(dout), x = mg__io_make<IX>(inp);
    IW w = mg__io_make<IW>(weight);
    if (C <= MG__NORM_WARP_MAX)
        MG_LAUNCH(mg__k_norm_backward, mg__norm_grid(N, C), MG__CUDA_THREADS, 0,
                  MG__STREAM(ctx), mg__int_tag<1>(), di, dy, x, w, mean, rstd, N, C, accumulate,
                  rms, vec);
    else
        MG_LAUNCH(mg__k_norm_backward, mg__norm_grid(N, C), MG__CUDA_THREADS, 0,
                  MG__STREAM(ctx), mg__int_tag<0>(), di, dy, x, w, mean, rstd, N, C, accumulate,
                  rms, vec);
    MG_CUDA_LAUNCH_CHECK();
}
/* Instantiated where activations and weights share a dtype; other combinations run through
   the run-time-dtype accessor. The weights' dtype counts only if every weight tensor has it. */
static int mg__norm_uniform(mg_dtype dt, const mg_tensor *a, const mg_tensor *b,
                            const mg_tensor *c, const mg_tensor *d) {
    return a->dtype == dt && b->dtype == dt && c->dtype == dt && (!d || d->dtype == dt);
}
static void mg__cuda_norm_forward(mg_ctx *ctx, const mg_norm *k, const mg_tensor *out,
                                  float *mean, float *rstd, const mg_tensor *inp,
                                  const mg_tensor *weight, const mg_tensor *bias) {
    mg_dtype dt = inp->dtype;
    if (!mg__norm_uniform(dt, out, inp, weight, bias))
        mg__norm_forward_launch<mg__io_dyn, mg__io_dyn>(ctx, k, out, mean, rstd, inp, weight, bias);
    else if (dt == MG_F32)
        mg__norm_forward_launch<mg__io_f32, mg__io_f32>(ctx, k, out, mean, rstd, inp, weight, bias);
    else if (dt == MG_BF16)
        mg__norm_forward_launch<mg__io_bf16, mg__io_bf16>(ctx, k, out, mean, rstd, inp, weight, bias);
    else
        mg__norm_forward_launch<mg__io_f16, mg__io_f16>(ctx, k, out, mean, rstd, inp, weight, bias);
}
static void mg__cuda_norm_backward(mg_ctx *ctx, int rms, const mg_tensor *dinp,
                                   const mg_tensor *dout, const mg_tensor *inp,
                                   const mg_tensor *weight, const float *mean, const float *rstd,
                                   int acc) {
    mg_dtype dt = inp->dtype;
    if (!mg__norm_uniform(dt, dinp, dout, weight, NULL))
        mg__norm_backward_launch<mg__io_dyn, mg__io_dyn>(ctx, rms, dinp, dout, inp, weight, mean, rstd, acc);
    else if (dt == MG_F32)
        mg__norm_backward_launch<mg__io_f32, mg__io_f32>(ctx, rms, dinp, dout, inp, weight, mean, rstd, acc);
    else if (dt == MG_BF16)
        mg__norm_backward_launch<mg__io_bf16, mg__io_bf16>(ctx, rms, dinp, dout, inp, weight, mean, rstd, acc);
    else
        mg__norm_backward_launch<mg__io_f16, mg__io_f16>(ctx, rms, dinp, dout, inp, weight, mean, rstd, acc);
}

/* --- causal softmax over rows of length T (row r is query t1 = r mod T) ---------------------
   The unfused attention's. Forward: reads the visible half of the B·nh·T² scores twice and
   writes all of them, ≈ 2·e·B·nh·T² bytes (e the storage bytes), ~3 FLOPs per visible
   score; backward: reads P and dP, writes dS, ≈ 3·e·B·nh·T² bytes, ~4 FLOPs per score. */
template <class IO> static __global__ void mg__k_causal_softmax(IO att, int64_t T) {
    int64_t base = blockIdx.x * T, n = blockIdx.x % T + 1, j;
    float mx = -INFINITY, s = 0.0f, inv;
    for (j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, att.ld(base + j));
    mx = mg__block_max(mx);
    for (j = threadIdx.x; j < n; j += blockDim.x) s += mg__exp(att.ld(base + j) - mx);
    inv = 1.0f / mg__block_sum(s);
    for (j = threadIdx.x; j < T; j += blockDim.x)
        att.st(base + j, j < n ? mg__exp(att.ld(base + j) - mx) * inv : 0.0f);
}
template <class IO> static __global__ void mg__k_causal_softmax_backward(IO datt, IO att,
                                                                         int64_t T) {
    int64_t base = blockIdx.x * T, n = blockIdx.x % T + 1, j;
    float dot = 0.0f;
    for (j = threadIdx.x; j < n; j += blockDim.x) dot += att.ld(base + j) * datt.ld(base + j);
    dot = mg__block_sum(dot);
    for (j = threadIdx.x; j < T; j += blockDim.x)
        datt.st(base + j, j < n ? mg__softmax_grad(att.ld(base + j), datt.ld(base + j), dot) : 0.0f);
}

/* --- tiled attention -------------------------------------------------------------------------
   A block of MG__ATTN_THREADS = 4 warps works on one tile of MG_ATTN_TILE = 32 rows. Shared
   memory holds the tile's rows in fp32 (rows padded to hd + 1 floats where lanes walk down a
   column, so the 32 lanes hit 32 banks) and the 32 × 32 score tile. Score entries are computed
   by all threads (entry e = thread + 128·k: warp w takes row e / 32, lane the column); row
   updates by the warp that owns the row (rows w, w + 4, …: 8 a warp, a lane per key); products
   with value/key rows by the owning warp, lane L holding dims L, L + 32, … in registers.
   Forward, per query tile and key tile: reads 2·32·hd (K, V) elements, 4·32·32·hd FLOPs; over a
   causal T×T head: T²·hd·2 FLOPs, K/V read T/64 times. Backward: dQ pass 6·32²·hd FLOPs a tile
   pair, dK/dV pass 8·32²·hd; storage read once per pair of tiles (no T×T traffic).          */
#define MG__ATTN_THREADS 128
#define MG__ATTN_RPW (MG_ATTN_TILE / (MG__ATTN_THREADS / 32))   /* rows (keys) per warp: 8 */
#define MG__ATTN_DPL (MG_ATTN_MAX_HD / 32)                    /* dims per lane at most: 8 */
#ifdef MG_CUDA_EMU
#define MG__DYN_SHARED(T, name) MG_EMU_EXTERN_SHARED(T, name)
#else
#define MG__DYN_SHARED(T, name) extern __shared__ __align__(128) T name[]
#endif
/* rows [t0, t0 + n) of a view into shared fp32 rows of stride ld (all threads of the block),
   read through IO: the view's dtype is switched on once per tile, not per element */
template <class IO> __device__ static void mg__attn_load_rows(float *dst, int ld, const IO src,
                                                              const mg_attn_view &v, int64_t t0,
                                                              int n, int b, int g, int j, int hd) {
    int e;
    for (e = threadIdx.x; e < n * hd; e += blockDim.x) {
        int r = e / hd, d = e - r * hd;
        dst[r * ld + d] = src.ld(mg__view_at(&v, t0 + r, b, g, j) + d);
    }
}
__device__ static void mg__attn_load_tile(float *dst, int ld, const mg_attn_view v, int64_t t0,
                                          int n, int b, int g, int j, int hd) {
#define MG__LOAD_ROWS(IO) \
        mg__attn_load_rows(dst, ld, mg__io_ptr<IO>(v.data, v.dtype), v, t0, n, b, g, j, hd)
    MG__IO_DISPATCH(v.dtype, MG__LOAD_ROWS);
#undef MG__LOAD_ROWS
}
__device__ static float mg__attn_dot(const float *a, const float *b, int hd) {
    float s = 0.0f;
    int d;
    for (d = 0; d < hd; d++) s += a[d] * b[d];
    return s;
}
__device__ static float mg__warp_max(float v) {
    int off;
    for (off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
    return v;
}
__device__ static float mg__warp_sum(float v) {
    int off;
    for (off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
    return v;
}
/* grid (query tiles, B·n_head). */
static __global__ void mg__k_attn_forward(mg_attn_block a, mg__attn_drop_k dk, float scale,
                                          mg_attn_view o, float *lse, int merge) {
    MG__DYN_SHARED(float, sm);
    const int TL = MG_ATTN_TILE, hd = a.hd, ldr = hd + 1, per = a.n_head / a.n_group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b = blockIdx.y / a.n_head, h = blockIdx.y % a.n_head, g = h / per, j = h % per;
    int64_t t0 = (int64_t)blockIdx.x * TL, row0 = ((int64_t)b * a.n_head + h) * a.Tq + t0;
    int nq = (int)(a.Tq - t0 < TL ? a.Tq - t0 : TL), nkt, kt, r, u, c, e;
    float *Qs = sm, *Ks = Qs + TL * ldr, *Vs = Ks + TL * ldr, *S = Vs + TL * ldr;
    float m[MG__ATTN_RPW], l[MG__ATTN_RPW], acc[MG__ATTN_RPW][MG__ATTN_DPL];
    MG__UNROLL
    for (r = 0; r < MG__ATTN_RPW; r++) {
        m[r] = -INFINITY; l[r] = 0.0f;
        MG__UNROLL
        for (u = 0; u < MG__ATTN_DPL; u++) acc[r][u] = 0.0f;
    }
    mg__attn_load_tile(Qs, ldr, a.q, t0, nq, b, g, j, hd);
    nkt = mg__attn_key_tiles(&a, a.q_pos0 + t0 + nq - 1);
    for (kt = 0; kt < nkt; kt++) {
        int64_t s0 = (int64_t)kt * TL, kpos = a.k_pos0 + s0;
        int nk = (int)(a.Tk - s0 < TL ? a.Tk - s0 : TL);
        __syncthreads();                         /* the previous tile's K, V, S are consumed */
        mg__attn_load_tile(Ks, ldr, a.k, s0, nk, b, g, 0, hd);
        mg__attn_load_tile(Vs, ldr, a.v, s0, nk, b, g, 0, hd);
        __syncthreads();
        for (e = threadIdx.x; e < TL * TL; e += blockDim.x) {      /* S = scale·Q·Kᵀ */
            int i = e / TL;
            c = e % TL;
            if (i < nq && c < mg__attn_visible(a.q_pos0 + t0 + i, kpos, nk))
                S[i * (TL + 1) + c] = scale * mg__attn_dot(Qs + i * ldr, Ks + c * ldr, hd);
        }
        __syncthreads();
        MG__UNROLL
        for (r = 0; r < MG__ATTN_RPW; r++) {     /* the warp's rows: online softmax, then P·V */
            int i = warp + r * (MG__ATTN_THREADS / 32);
            int64_t qpos = a.q_pos0 + t0 + i;
            int nv = i < nq ? mg__attn_visible(qpos, kpos, nk) : 0;
            float s = lane < nv ? S[i * (TL + 1) + lane] : -INFINITY, mx, p, alpha;
            if (!nv) continue;                   /* the same for the whole warp */
            mx = fmaxf(m[r], mg__warp_max(s));
            alpha = m[r] == -INFINITY ? 0.0f : mg__exp(m[r] - mx);
            p = lane < nv ? mg__exp(s - mx) : 0.0f;
            l[r] = l[r] * alpha + mg__warp_sum(p);
            m[r] = mx;
            if (lane < nv)
                S[i * (TL + 1) + lane] = mg__attn_round(mg__attn_drop(&dk, b, h, qpos, kpos + lane, p), a.q.dtype);
            __syncwarp();
            MG__UNROLL
            for (u = 0; u < MG__ATTN_DPL; u++) {   /* the tile's part, then one add */
                int d = lane + 32 * u;
                float x = 0.0f;
                if (d < hd)
                    for (c = 0; c < nv; c++) x += S[i * (TL + 1) + c] * Vs[c * ldr + d];
                acc[r][u] = acc[r][u] * alpha + x;
            }
        }
    }
    MG__UNROLL
    for (r = 0; r < MG__ATTN_RPW; r++) {         /* o = acc/l, merged; lse */
        int i = warp + r * (MG__ATTN_THREADS / 32);
        float w_new, w_old, lse_i;
        int64_t off;
        if (i >= nq) continue;
        off = mg__view_at(&o, t0 + i, b, g, j);
        lse_i = mg__attn_finish(m[r], l[r], merge, merge ? lse[row0 + i] : 0.0f, &w_new, &w_old);
        MG__UNROLL
        for (u = 0; u < MG__ATTN_DPL; u++) {
            int d = lane + 32 * u;
            if (d < hd)
                mg_store(o.data, o.dtype, off + d, acc[r][u] * w_new +
                         (w_old != 0.0f ? w_old * mg_load(o.data, o.dtype, off + d) : 0.0f));
        }
        __syncwarp();                            /* every lane has read the old lse */
        if (lane == 0) lse[row0 + i] = lse_i;
    }
}
/* The forward on tensor cores (bf16/fp16 storage, hd a multiple of 16; sm_80+): the same tiles,
   order and online softmax as mg__k_attn_forward, with the two products on WMMA 16×16×16
   fragments — S = Q·Kᵀ (each warp one 16×16 block of the 32×32 tile, hd/16 steps) and
   acc += P·V (each warp blocks of the 32×hd accumulator, read from and written back to shared
   memory so that the softmax's per-row rescaling can touch it) — inputs in the storage type,
   fp32 accumulation; P is rounded to the storage type for its product, as in every backend's
   16-bit path. Shared: Q, K, V rows of hd + 8 16-bit values (32-byte aligned 16-row blocks),
   P 32 × 40, S 32 × 36 fp32, the accumulator 32 × (hd + 4) fp32. Per tile pair: 4·32²·hd FLOPs
   on tensor cores, 2·32·hd·2 bytes of K/V loaded.                                            */
/* 16-bit rows [t0, t0 + n) of a view into shared rows of ldh, zero past n (all threads). */
__device__ static void mg__attn_tc_load(uint16_t *dst, int ldh, const mg_attn_view v, int64_t t0,
                                        int n, int b, int g, int j, int hd) {
    int e;
    for (e = threadIdx.x; e < MG_ATTN_TILE * hd; e += blockDim.x)
        dst[(e / hd) * ldh + e % hd] = e / hd < n ?
            ((const uint16_t *)v.data)[mg__view_at(&v, t0 + e / hd, b, g, j) + e % hd] : 0;
}
template <class T>
static __global__ void mg__k_attn_forward_tc(mg_attn_block a, mg__attn_drop_k dk, float scale,
                                             mg_attn_view o, float *lse, int merge) {
    MG__DYN_SHARED(float, sm);
    const int TL = MG_ATTN_TILE, hd = a.hd, ldh = hd + 8, ldp = TL + 8, lds = TL + 4, lda = hd + 4;
    const int per = a.n_head / a.n_group, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b = blockIdx.y / a.n_head, h = blockIdx.y % a.n_head, g = h / per, j = h % per;
    int64_t t0 = (int64_t)blockIdx.x * TL, row0 = ((int64_t)b * a.n_head + h) * a.Tq + t0;
    int nq = (int)(a.Tq - t0 < TL ? a.Tq - t0 : TL), nkt, kt, r, e, blk;
    uint16_t *Qs = (uint16_t *)sm, *Ks = Qs + TL * ldh, *Vs = Ks + TL * ldh, *Ps = Vs + TL * ldh;
    float *S = (float *)(Ps + TL * ldp), *acc = S + TL * lds;
    float m[MG__ATTN_RPW], l[MG__ATTN_RPW];
    MG__UNROLL
    for (r = 0; r < MG__ATTN_RPW; r++) { m[r] = -INFINITY; l[r] = 0.0f; }
    mg__attn_tc_load(Qs, ldh, a.q, t0, nq, b, g, j, hd);
    for (e = threadIdx.x; e < TL * lda; e += blockDim.x) acc[e] = 0.0f;
    nkt = mg__attn_key_tiles(&a, a.q_pos0 + t0 + nq - 1);
    for (kt = 0; kt < nkt; kt++) {
        int64_t s0 = (int64_t)kt * TL, kpos = a.k_pos0 + s0;
        int nk = (int)(a.Tk - s0 < TL ? a.Tk - s0 : TL);
        __syncthreads();
        mg__attn_tc_load(Ks, ldh, a.k, s0, nk, b, g, 0, hd);
        mg__attn_tc_load(Vs, ldh, a.v, s0, nk, b, g, 0, hd);
        __syncthreads();
        {   /* S = Q·Kᵀ: warp w the block (w / 2, w % 2); Kᵀ is K read column-major */
            nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::row_major> fa;
            nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, T, nvcuda::wmma::col_major> fb;
            nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fc;
            int rb = warp / 2, cb = warp % 2, k;
            nvcuda::wmma::fill_fragment(fc, 0.0f);
            for (k = 0; k < hd; k += 16) {
                nvcuda::wmma::load_matrix_sync(fa, (const T *)(Qs + rb * 16 * ldh + k), ldh);
                nvcuda::wmma::load_matrix_sync(fb, (const T *)(Ks + cb * 16 * ldh + k), ldh);
                nvcuda::wmma::mma_sync(fc, fa, fb, fc);
            }
            nvcuda::wmma::store_matrix_sync(S + rb * 16 * lds + cb * 16, fc, lds, nvcuda::wmma::mem_row_major);
        }
        __syncthreads();
        MG__UNROLL
        for (r = 0; r < MG__ATTN_RPW; r++) {     /* the warp's rows: online softmax, P, rescale */
            int i = warp + r * (MG__ATTN_THREADS / 32), d;
            int64_t qpos = a.q_pos0 + t0 + i;
            int nv = i < nq ? mg__attn_visible(qpos, kpos, nk) : 0;
            float s = lane < nv ? scale * S[i * lds + lane] : -INFINITY, mx, p, alpha;
            if (!nv) {                           /* the whole warp: the row adds nothing */
                Ps[i * ldp + lane] = 0;
                continue;
            }
            mx = fmaxf(m[r], mg__warp_max(s));
            alpha = m[r] == -INFINITY ? 0.0f : mg__exp(m[r] - mx);
            p = lane < nv ? mg__exp(s - mx) : 0.0f;
            l[r] = l[r] * alpha + mg__warp_sum(p);
            m[r] = mx;
            p = lane < nv ? mg__attn_drop(&dk, b, h, qpos, kpos + lane, p) : 0.0f;
            Ps[i * ldp + lane] = mg__attn_to16(p, a.q.dtype);
            for (d = lane; d < hd; d += 32) acc[i * lda + d] *= alpha;
        }
        __syncthreads();
        for (blk = warp; blk < 2 * (hd / 16); blk += MG__ATTN_THREADS / 32) {   /* acc += P·V */
            nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::row_major> fa;
            nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, T, nvcuda::wmma::row_major> fb;
            nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fc;
            int rb = blk % 2, cb = blk / 2, k;
            nvcuda::wmma::load_matrix_sync(fc, acc + rb * 16 * lda + cb * 16, lda, nvcuda::wmma::mem_row_major);
            for (k = 0; k < TL; k += 16) {
                nvcuda::wmma::load_matrix_sync(fa, (const T *)(Ps + rb * 16 * ldp + k), ldp);
                nvcuda::wmma::load_matrix_sync(fb, (const T *)(Vs + k * ldh + cb * 16), ldh);
                nvcuda::wmma::mma_sync(fc, fa, fb, fc);
            }
            nvcuda::wmma::store_matrix_sync(acc + rb * 16 * lda + cb * 16, fc, lda, nvcuda::wmma::mem_row_major);
        }
    }
    __syncthreads();
    MG__UNROLL
    for (r = 0; r < MG__ATTN_RPW; r++) {         /* o = acc/l, merged; lse */
        int i = warp + r * (MG__ATTN_THREADS / 32), d;
        float w_new, w_old, lse_i;
        int64_t off;
        if (i >= nq) continue;
        off = mg__view_at(&o, t0 + i, b, g, j);
        lse_i = mg__attn_finish(m[r], l[r], merge, merge ? lse[row0 + i] : 0.0f, &w_new, &w_old);
        for (d = lane; d < hd; d += 32)
            mg_store(o.data, o.dtype, off + d, acc[i * lda + d] * w_new +
                     (w_old != 0.0f ? w_old * mg_load(o.data, o.dtype, off + d) : 0.0f));
        __syncwarp();
        if (lane == 0) lse[row0 + i] = lse_i;
    }
}
/* The backward on tensor cores (the forward's conditions): the same two passes, tiles and order
   as mg__k_attn_backward_dq / _dkv, their four products on WMMA fragments — S = Q·Kᵀ and
   dP = dO·Vᵀ per 16×16 block of the score tile, then dQ += dS·K, or dV += D(P)ᵀ·dO and
   dK += dSᵀ·Q (Pᵀ and dSᵀ read column-major) into fp32 accumulators in shared memory — with
   P and dS rounded to the storage type for their products. Per tile pair 8·32²·hd (dQ pass)
   or 8·32²·hd (dK/dV pass) FLOPs on tensor cores. */
/* S = Q·Kᵀ and dP = dO·Vᵀ of one 32×32 tile: warp w the 16×16 block (w / 2, w % 2). */
template <class T>
__device__ static void mg__attn_tc_scores(const uint16_t *Qs, const uint16_t *dOs,
                                          const uint16_t *Ks, const uint16_t *Vs, int ldh, int hd,
                                          float *S, float *dP, int lds) {
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, T, nvcuda::wmma::col_major> fb;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fs, fp;
    int warp = threadIdx.x >> 5, rb = warp / 2, cb = warp % 2, k;
    nvcuda::wmma::fill_fragment(fs, 0.0f);
    nvcuda::wmma::fill_fragment(fp, 0.0f);
    for (k = 0; k < hd; k += 16) {
        nvcuda::wmma::load_matrix_sync(fa, (const T *)(Qs + rb * 16 * ldh + k), ldh);
        nvcuda::wmma::load_matrix_sync(fb, (const T *)(Ks + cb * 16 * ldh + k), ldh);
        nvcuda::wmma::mma_sync(fs, fa, fb, fs);
        nvcuda::wmma::load_matrix_sync(fa, (const T *)(dOs + rb * 16 * ldh + k), ldh);
        nvcuda::wmma::load_matrix_sync(fb, (const T *)(Vs + cb * 16 * ldh + k), ldh);
        nvcuda::wmma::mma_sync(fp, fa, fb, fp);
    }
    nvcuda::wmma::store_matrix_sync(S + rb * 16 * lds + cb * 16, fs, lds, nvcuda::wmma::mem_row_major);
    nvcuda::wmma::store_matrix_sync(dP + rb * 16 * lds + cb * 16, fp, lds, nvcuda::wmma::mem_row_major);
}
__device__ static inline int mg__is_col_major(const nvcuda::wmma::col_major *) { return 1; }
__device__ static inline int mg__is_col_major(const nvcuda::wmma::row_major *) { return 0; }
/* acc[32 × hd] (+)= op(A)·B for A the 32×32 16-bit tile (transposed: read column-major) and B
   32 rows of hd: warp w the output blocks w, w + 4, … (2 row blocks × hd/16 column blocks). */
template <class T, class LA>
__device__ static void mg__attn_tc_accumulate(const uint16_t *A, int ldp, const uint16_t *B,
                                              int ldh, int hd, float *acc, int lda) {
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, LA> fa;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, T, nvcuda::wmma::row_major> fb;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fc;
    int blk, k, transposed = mg__is_col_major((const LA *)0);
    for (blk = threadIdx.x >> 5; blk < 2 * (hd / 16); blk += MG__ATTN_THREADS / 32) {
        int rb = blk % 2, cb = blk / 2;
        nvcuda::wmma::load_matrix_sync(fc, acc + rb * 16 * lda + cb * 16, lda, nvcuda::wmma::mem_row_major);
        for (k = 0; k < MG_ATTN_TILE; k += 16) {
            /* A's block (rb, k): row-major at row rb·16, column k; transposed, element (r, c)
               of Aᵀ is A[c][r], so the block starts at A's row k, column rb·16 */
            nvcuda::wmma::load_matrix_sync(fa, (const T *)(transposed ? A + k * ldp + rb * 16
                                                                     : A + rb * 16 * ldp + k), ldp);
            nvcuda::wmma::load_matrix_sync(fb, (const T *)(B + k * ldh + cb * 16), ldh);
            nvcuda::wmma::mma_sync(fc, fa, fb, fc);
        }
        nvcuda::wmma::store_matrix_sync(acc + rb * 16 * lda + cb * 16, fc, lda, nvcuda::wmma::mem_row_major);
    }
}
/* The score tile's entries, a warp per query row and a lane per key: P = exp(scale·S − lse),
   dS = P·(D'(dP) − Δ), rounded to the storage type into dSs (and D(P) into Ps if given);
   0 where the row does not see the key or past the tiles' ends. */
__device__ static void mg__attn_tc_ds_rows(const mg_attn_block *a, const mg__attn_drop_k *dk,
                                           float scale, int b, int h, int64_t t0, int nq,
                                           int64_t kpos, int nk, const float *lse,
                                           const float *delta, const float *S, const float *dP,
                                           int lds, uint16_t *Ps, uint16_t *dSs, int ldp) {
    int lane = threadIdx.x & 31, r;
    for (r = threadIdx.x >> 5; r < MG_ATTN_TILE; r += MG__ATTN_THREADS / 32) {
        int64_t qpos = a->q_pos0 + t0 + r;
        int nv = r < nq ? mg__attn_visible(qpos, kpos, nk) : 0;
        float ds = 0.0f, pd = 0.0f;
        if (lane < nv)
            ds = mg__attn_ds(dk, b, h, qpos, kpos + lane, scale * S[r * lds + lane],
                             dP[r * lds + lane], lse[r], delta[r], a->q.dtype, &pd);
        dSs[r * ldp + lane] = mg__attn_to16(ds, a->q.dtype);
        if (Ps) Ps[r * ldp + lane] = mg__attn_to16(pd, a->q.dtype);
    }
}
/* dQ: grid (query tiles, B·n_head). */
template <class T>
static __global__ void mg__k_attn_backward_dq_tc(mg_attn_block a, mg__attn_drop_k dk, float scale,
                                                 mg_attn_view dout, const float *lse,
                                                 const float *delta, mg_attn_view dq,
                                                 int accumulate) {
    MG__DYN_SHARED(float, sm);
    const int TL = MG_ATTN_TILE, hd = a.hd, ldh = hd + 8, ldp = TL + 8, lds = TL + 4, lda = hd + 4;
    const int per = a.n_head / a.n_group, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b = blockIdx.y / a.n_head, h = blockIdx.y % a.n_head, g = h / per, j = h % per, e, r;
    int64_t t0 = (int64_t)blockIdx.x * TL, row0 = ((int64_t)b * a.n_head + h) * a.Tq + t0;
    int nq = (int)(a.Tq - t0 < TL ? a.Tq - t0 : TL), nkt, kt;
    uint16_t *Qs = (uint16_t *)sm, *dOs = Qs + TL * ldh, *Ks = dOs + TL * ldh, *Vs = Ks + TL * ldh;
    uint16_t *dSs = Vs + TL * ldh;
    float *S = (float *)(dSs + TL * ldp), *dP = S + TL * lds, *acc = dP + TL * lds;
    mg__attn_tc_load(Qs, ldh, a.q, t0, nq, b, g, j, hd);
    mg__attn_tc_load(dOs, ldh, dout, t0, nq, b, g, j, hd);
    for (e = threadIdx.x; e < TL * lda; e += blockDim.x) acc[e] = 0.0f;
    nkt = mg__attn_key_tiles(&a, a.q_pos0 + t0 + nq - 1);
    for (kt = 0; kt < nkt; kt++) {
        int64_t s0 = (int64_t)kt * TL, kpos = a.k_pos0 + s0;
        int nk = (int)(a.Tk - s0 < TL ? a.Tk - s0 : TL);
        __syncthreads();
        mg__attn_tc_load(Ks, ldh, a.k, s0, nk, b, g, 0, hd);
        mg__attn_tc_load(Vs, ldh, a.v, s0, nk, b, g, 0, hd);
        __syncthreads();
        mg__attn_tc_scores<T>(Qs, dOs, Ks, Vs, ldh, hd, S, dP, lds);
        __syncthreads();
        mg__attn_tc_ds_rows(&a, &dk, scale, b, h, t0, nq, kpos, nk, lse + row0, delta + row0, S,
                            dP, lds, NULL, dSs, ldp);
        __syncthreads();
        mg__attn_tc_accumulate<T, nvcuda::wmma::row_major>(dSs, ldp, Ks, ldh, hd, acc, lda);
    }
    __syncthreads();
    for (r = warp; r < nq; r += MG__ATTN_THREADS / 32) {
        int64_t off = mg__view_at(&dq, t0 + r, b, g, j);
        int d;
        for (d = lane; d < hd; d += 32)
            mg_store(dq.data, dq.dtype, off + d, scale * acc[r * lda + d] +
                     (accumulate ? mg_load(dq.data, dq.dtype, off + d) : 0.0f));
    }
}
/* dK, dV: grid (key tiles, B·n_group). */
template <class T>
static __global__ void mg__k_attn_backward_dkv_tc(mg_attn_block a, mg__attn_drop_k dk, float scale,
                                                  mg_attn_view dout, const float *lse,
                                                  const float *delta, mg_attn_view dkv_k,
                                                  mg_attn_view dkv_v, int accumulate) {
    MG__DYN_SHARED(float, sm);
    const int TL = MG_ATTN_TILE, hd = a.hd, ldh = hd + 8, ldp = TL + 8, lds = TL + 4, lda = hd + 4;
    const int per = a.n_head / a.n_group, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b = blockIdx.y / a.n_group, g = blockIdx.y % a.n_group, j, qt, nqt, e, r;
    int64_t s0 = (int64_t)blockIdx.x * TL, kpos = a.k_pos0 + s0;
    int nk = (int)(a.Tk - s0 < TL ? a.Tk - s0 : TL);
    uint16_t *Ks = (uint16_t *)sm, *Vs = Ks + TL * ldh, *Qs = Vs + TL * ldh, *dOs = Qs + TL * ldh;
    uint16_t *Ps = dOs + TL * ldh, *dSs = Ps + TL * ldp;
    float *S = (float *)(dSs + TL * ldp), *dP = S + TL * lds, *dKa = dP + TL * lds;
    float *dVa = dKa + TL * lda;
    mg__attn_tc_load(Ks, ldh, a.k, s0, nk, b, g, 0, hd);
    mg__attn_tc_load(Vs, ldh, a.v, s0, nk, b, g, 0, hd);
    for (e = threadIdx.x; e < 2 * TL * lda; e += blockDim.x) dKa[e] = 0.0f;
    nqt = (a.Tq + TL - 1) / TL;
    for (j = 0; j < per; j++) {
        int h = g * per + j;
        for (qt = mg__attn_first_query_tile(&a, kpos); qt < nqt; qt++) {
            int64_t t0 = (int64_t)qt * TL, row0 = ((int64_t)b * a.n_head + h) * a.Tq + t0;
            int nq = (int)(a.Tq - t0 < TL ? a.Tq - t0 : TL);
            __syncthreads();
            mg__attn_tc_load(Qs, ldh, a.q, t0, nq, b, g, j, hd);
            mg__attn_tc_load(dOs, ldh, dout, t0, nq, b, g, j, hd);
            __syncthreads();
            mg__attn_tc_scores<T>(Qs, dOs, Ks, Vs, ldh, hd, S, dP, lds);
            __syncthreads();
            mg__attn_tc_ds_rows(&a, &dk, scale, b, h, t0, nq, kpos, nk, lse + row0, delta + row0,
                                S, dP, lds, Ps, dSs, ldp);
            __syncthreads();
            mg__attn_tc_accumulate<T, nvcuda::wmma::col_major>(Ps, ldp, dOs, ldh, hd, dVa, lda);
            mg__attn_tc_accumulate<T, nvcuda::wmma::col_major>(dSs, ldp, Qs, ldh, hd, dKa, lda);
        }
    }
    __syncthreads();
    for (r = warp; r < nk; r += MG__ATTN_THREADS / 32) {
        int64_t ok = mg__view_at(&dkv_k, s0 + r, b, g, 0), ov = mg__view_at(&dkv_v, s0 + r, b, g, 0);
        int d;
        for (d = lane; d < hd; d += 32) {
            mg_store(dkv_k.data, dkv_k.dtype, ok + d, scale * dKa[r * lda + d] +
                     (accumulate ? mg_load(dkv_k.data, dkv_k.dtype, ok + d) : 0.0f));
            mg_store(dkv_v.data, dkv_v.dtype, ov + d, dVa[r * lda + d] +
                     (accumulate ? mg_load(dkv_v.data, dkv_v.dtype, ov + d) : 0.0f));
        }
    }
}
static size_t mg__attn_tc_bwd_smem(int hd, int kv) {
    return (size_t)4 * MG_ATTN_TILE * (hd + 8) * 2 + (size_t)(kv ? 2 : 1) * MG_ATTN_TILE * (MG_ATTN_TILE + 8) * 2 +
           (size_t)2 * MG_ATTN_TILE * (MG_ATTN_TILE + 4) * 4 + (size_t)(kv ? 2 : 1) * MG_ATTN_TILE * (hd + 4) * 4;
}
static size_t mg__attn_tc_smem(int hd) {
    return (size_t)3 * MG_ATTN_TILE * (hd + 8) * 2 + (size_t)MG_ATTN_TILE * (MG_ATTN_TILE + 8) * 2 +
           (size_t)MG_ATTN_TILE * (MG_ATTN_TILE + 4) * 4 + (size_t)MG_ATTN_TILE * (hd + 4) * 4;
}
/* --- tiled attention on tensor cores, 64 rows a block (hd 64 and 128) ------------------------
   The kernels above give a block one 32-row tile and keep every intermediate — scores,
   probabilities, the output accumulator — in block-shared memory between __syncthreads, which
   on an H100 ran at ~5 TFLOP/s (GPT-2 124M, T = 1024: 2.7 ms per layer forward, 4.4 backward).
   These give each of the 4 warps its own 16 rows (64 query rows, or 64 keys, a block) and keep
   everything a warp computes in its registers, as FlashAttention-2 does:
     - the block loads each 32-key tile (forward, dQ) or 32-query tile (dK/dV) once into
       shared memory for its 4 warps, double-buffered: while the warps compute on one tile the
       next one's rows arrive by cp.async (where the views are 16-byte aligned; else plain
       loads). The 16-bit rows are all the shared memory holds;
     - the products are mma.sync m16n8k16 on register fragments (mg__mma16816 below), the
       operands from shared memory read by ldmatrix, a 16 × 16 block an instruction: a
       warp's 16 × 32 scores S (and dP) come out as 4 accumulator fragments, the softmax (or
       dS) runs on them in place — a row's 32 values live in the 4 lanes of a quad, 8 each,
       so its max and sum are two shuffles — and the probabilities (dS) go back into the next
       product as A fragments without leaving the registers;
     - forward: the rows' fp32 output accumulator is HD/8 fragments, rescaled in registers
       before the tile's P·V adds to it; backward: dQ, or dK and dV, accumulate in fragments
       for the whole kernel.
   Per row, the math is the 32-row kernels' and the CPU twin's: key tiles of MG_ATTN_TILE from
   the block's first key, the online softmax's max, rescale and sum per tile, P and dS rounded
   to the storage type for their products, dK/dV summed over the group's heads and then the
   query tiles in order. Two orders differ from the CPU twin's: a row's sum of P adds each
   lane's 8 values and then the quad's 4 partial sums (not the 32 in key order), and the
   tensor cores sum each product's 16 terms in their own order. And the exponentials are
   base 2: the scores are scaled by scale·log2(e) and P = 2^(s − m) (backward: 2^(s − lse·
   log2 e)) by one ex2.approx (mg__ex2, within 2 ulp of the CPU's e^x), the running max and
   the rescale factor in the same units. Per value the softmax is a multiply, a max, a
   subtract, the ex2 and an add; P, D(P) and dS are rounded to 16 bits once, two at a time
   by one cvt (mg__pack16x2), and a warp whose 16 rows see every key of the tile
   (mg__fa_tile_full: every tile below the diagonal) skips the masks.
   Per tile pair (16 rows × 32 keys a warp): forward 4·16·32·hd FLOPs on tensor cores, the
   backward passes 8·16·32·hd each; K/V (or Q/dO) tiles read from L2 once per 64 rows.       */
#define MG__FA_ROWS 64     /* query rows (forward, dQ) or keys (dK/dV) of a block: 4 warps × 16 */
/* Rows [t0, t0 + n) of a view into shared 16-bit rows of stride ldh, zero for rows n … rows-1:
   16-byte loads when vec (every row 16-byte aligned), else one element at a time. */
template <int HD>
__device__ static __forceinline__ void mg__fa_load(uint16_t *dst, int ldh, const mg_attn_view v, int64_t t0, int n,
                                   int rows, int b, int g, int j, int vec) {
    const uint16_t *src = (const uint16_t *)v.data;
    int e;
    if (vec) {
        for (e = threadIdx.x; e < rows * (HD / 8); e += blockDim.x) {
            int r = e / (HD / 8), c = e % (HD / 8) * 8;
            uint4 x = make_uint4(0u, 0u, 0u, 0u);
            if (r < n) x = *(const uint4 *)(src + mg__view_at(&v, t0 + r, b, g, j) + c);
            *(uint4 *)(dst + r * ldh + c) = x;
        }
    } else {
        for (e = threadIdx.x; e < rows * HD; e += blockDim.x) {
            int r = e / HD, c = e % HD;
            dst[r * ldh + c] = r < n ? src[mg__view_at(&v, t0 + r, b, g, j) + c] : (uint16_t)0;
        }
    }
}
/* cp.async (sm_80+): 16 bytes from global to shared memory without passing through registers,
   in flight until a cp.async.wait_group completes their group: mg__cp_async16 issues one copy
   (both addresses 16-byte aligned), mg__cp_async_commit closes the thread's group of copies
   issued since the last one, mg__cp_async_wait<N> waits until at most the N newest groups
   are in flight. A wait covers the calling thread's copies only: a __syncthreads after it
   makes the block's copies visible to all. The emulator lands each copy at its wait. */
__device__ static __forceinline__ void mg__cp_async16(void *dst, const void *src) {
#ifdef MG_CUDA_EMU
    mg_emu_cp_async16(dst, src);
#else
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#endif
}
__device__ static __forceinline__ void mg__cp_async_commit(void) {
#ifdef MG_CUDA_EMU
    mg_emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ static __forceinline__ void mg__cp_async_wait(void) {
#ifdef MG_CUDA_EMU
    mg_emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
/* mg__fa_load for the next tile while this one is computed: with vec, rows < n as cp.async
   copies of 16 bytes (landing at a later mg__cp_async_wait) and rows n … rows−1 zeroed by
   plain stores; without vec, mg__fa_load's loads, done at once. */
template <int HD>
__device__ static __forceinline__ void mg__fa_load_async(uint16_t *dst, int ldh, const mg_attn_view v, int64_t t0,
                                         int n, int rows, int b, int g, int j, int vec) {
    const uint16_t *src = (const uint16_t *)v.data;
    int e;
    if (!vec) {
        mg__fa_load<HD>(dst, ldh, v, t0, n, rows, b, g, j, 0);
        return;
    }
    for (e = threadIdx.x; e < rows * (HD / 8); e += blockDim.x) {
        int r = e / (HD / 8), c = e % (HD / 8) * 8;
        if (r < n) mg__cp_async16(dst + r * ldh + c, src + mg__view_at(&v, t0 + r, b, g, j) + c);
        else *(uint4 *)(dst + r * ldh + c) = make_uint4(0u, 0u, 0u, 0u);
    }
}
/* Tile `tile` of two views (K and V, or Q and dO: rows tile·TL …, of n_rows in all; head
   (bi, g, j)) in flight into buffer buf of a and b (two tiles of TL rows each, buf 0 or 1), if
   issue, then the thread's group closed — an empty group without a tile, so that each loop
   iteration commits one and mg__cp_async_wait<1> means "all but the tile just issued". */
template <int HD>
__device__ static __forceinline__ void mg__fa_prefetch(uint16_t *a, uint16_t *b, int ldh, int buf,
                                       const mg_attn_view va, const mg_attn_view vb, int issue,
                                       int tile, int64_t n_rows, int bi, int g, int j, int vec) {
    if (issue) {
        int64_t t0 = (int64_t)tile * MG_ATTN_TILE;
        int n = (int)(n_rows - t0 < MG_ATTN_TILE ? n_rows - t0 : MG_ATTN_TILE);
        size_t off = (size_t)buf * MG_ATTN_TILE * ldh;
        mg__fa_load_async<HD>(a + off, ldh, va, t0, n, MG_ATTN_TILE, bi, g, j, vec);
        mg__fa_load_async<HD>(b + off, ldh, vb, t0, n, MG_ATTN_TILE, bi, g, j, vec);
    }
    mg__cp_async_commit();
}
/* One step of the three kernels' double-buffered tile loop, for tile (or pair) it: the barrier
   after which tile it − 1's buffer is free (every warp is done with it), issue_next() — the
   next tile in flight into that buffer, its group committed (mg__fa_prefetch) — then this
   thread's copies of tile it land (all but the newest group) and a barrier makes every
   thread's visible. */
template <class F> __device__ static __forceinline__ void mg__fa_next_tile(F issue_next) {
    __syncthreads();
    issue_next();
    mg__cp_async_wait<1>();
    __syncthreads();
}
/* Key tiles a warp's 16 query rows (from block row warp·16, of the block's nq from t0) see:
   0 for a warp with no rows. */
__device__ static __forceinline__ int mg__fa_warp_key_tiles(const mg_attn_block *a, int64_t t0,
                                                            int nq, int warp) {
    int last = warp * 16 + 15 < nq ? warp * 16 + 15 : nq - 1;
    return warp * 16 < nq ? mg__attn_key_tiles(a, a->q_pos0 + t0 + last) : 0;
}
/* D[16×8] += A[16×16]·B[16×8]: one mma.sync.aligned.m16n8k16.row.col.f32 with bf16 (F16 = 0)
   or fp16 inputs and fp32 accumulators, on the PTX ISA's register fragments ("Matrix
   Fragments for mma.m16n8k16 with floating point type"). With fr = lane/4 and fc = 2·(lane%4),
   and a 32-bit register holding two 16-bit elements, the lower column (or k) in its low half:
     A (row, k):  a[0] = (fr, fc…fc+1)  a[1] = (fr+8, fc…)  a[2] = (fr, fc+8…)  a[3] = (fr+8, fc+8…)
     B (k, n):    b[0] = (fc…fc+1, fr)  b[1] = (fc+8…fc+9, fr)
     D (row, n):  d[0], d[1] = (fr, fc), (fr, fc+1)   d[2], d[3] = (fr+8, fc), (fr+8, fc+1)
   So the D fragments of two adjacent n8 tiles, rounded to 16 bits in pairs, are the A fragment
   of a product over those 16 columns (mg__fa_pack). A warp-collective operation: every lane
   calls it. The CUDA emulator implements the instruction on these layouts
   (tests/cuda_emu/mma.h).                                                                  */
template <int F16>
__device__ static __forceinline__ void mg__mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef MG_CUDA_EMU
    mg_emu_mma16816(d, a, b, F16);
#else
    if (F16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
/* 2^x by the special-function unit, ex2.approx.ftz.f32 (a subnormal result flushes to 0):
   the 64-row kernels run their softmax in base 2, log2(e) folded into the score scale, so a
   probability costs an add (or an fma) and this one instruction instead of expf's range
   reduction (11 PTX instructions). Its error is the bound the CUDA Programming Guide gives
   exp2f, which compiles to it: 2 ulp. The emulator takes the host's exp2f, flushed alike. */
#define MG__LOG2E 1.4426950408889634f
#define MG__LN2 0.6931471805599453f
__device__ static __forceinline__ float mg__ex2(float x) {
#ifdef MG_CUDA_EMU
    float y = exp2f(x);
    return y < 1.17549435e-38f ? 0.0f : y;   /* FLT_MIN; NaN stays NaN */
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}
/* lo and hi rounded to nearest even into one register of two 16-bit values (fp16 when F16,
   else bf16), lo in the low half: one cvt.rn.{f16x2,bf16x2}.f32 (sm_80+; its first source
   goes to the high half), the bits of mg_f32_to_f16 / mg_f32_to_bf16 (a NaN becomes the
   canonical NaN) without their ~10 integer instructions a value. The emulator composes those. */
template <int F16> __device__ static __forceinline__ uint32_t mg__pack16x2(float lo, float hi) {
#ifdef MG_CUDA_EMU
    return F16 ? (uint32_t)mg_f32_to_f16(lo) | (uint32_t)mg_f32_to_f16(hi) << 16
               : (uint32_t)mg_f32_to_bf16(lo) | (uint32_t)mg_f32_to_bf16(hi) << 16;
#else
    uint32_t r;
    if (F16) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}
/* ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (sm_75+): four 8×8 matrices of 16-bit
   elements from shared memory, row i of matrix q at the address lane 8q + i gives (16-byte
   aligned: 8 elements). Lane l receives one 32-bit register per matrix, r[q]: without TRANS the
   elements (row l/4, columns 2·(l%4), +1), with TRANS (rows 2·(l%4), +1, column l/4) — the
   lower column (or row) in the low half. So a 16 × 16 block read as its four 8 × 8 quarters
   lands in exactly the mma.m16n8k16 fragment layout above (fr = l/4, fc = 2·(l%4)); with
   TRANS, a block stored k-major lands as B fragments. One instruction replaces 4 to 8 shared
   loads of 32 or 16 bits. The emulator implements it on the same layout
   (tests/cuda_emu/cuda_emu.cpp). A warp-collective operation: every lane calls it. */
template <int TRANS>
__device__ static __forceinline__ void mg__ldmatrix_x4(uint32_t r[4], const uint16_t *p) {
#ifdef MG_CUDA_EMU
    mg_emu_ldmatrix_x4(r, p, TRANS);
#else
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
#endif
}
/* Fragments from shared 16-bit rows of stride ld (a multiple of 8 elements, so that every
   row of an 8 × 8 quarter starts 16-byte aligned), each by one ldmatrix:
     mg__fa_frag_a:   A = the 16 × 16 block at s, row-major (rows of Q, dO, K or V): lane l
                      names row l%16, columns 8·(l/16) …: quarters (rows 0–7 | 8–15) × (k 0–7
                      | 8–15) in the order a[0..3];
     mg__fa_frag_bt2: B of two n8 tiles, b0 (n 0–7) and b1 (n 8–15), the transpose of the
                      16 × 16 block at s: B(k, n) = s[n·ld + k] (rows of K for S = Q·Kᵀ: a lane's
                      pair of k is one 32-bit word): lane l names row (l%8) + 8·(l/16), columns
                      8·((l/8)%2) …;
     mg__fa_frag_b2:  B of two n8 tiles, the 16 × 16 block at s: B(k, n) = s[k·ld + n] (rows
                      of V for P·V: a lane's pair of k lies in two rows), by the transposing
                      form: lane l names row l%16, columns 8·(l/16) ….
   With rows of hd + 8 elements ((hd + 8)·2 bytes, 4 banks on from the row before), each 8-row
   quarter reads 32 distinct banks.                                                          */
__device__ static __forceinline__ void mg__fa_frag_a(uint32_t a[4], const uint16_t *s, int ld) {
    const int lane = threadIdx.x & 31;
    mg__ldmatrix_x4<0>(a, s + (lane & 15) * ld + (lane >> 4) * 8);
}
__device__ static __forceinline__ void mg__fa_frag_bt2(uint32_t b0[2], uint32_t b1[2], const uint16_t *s,
                                                       int ld) {
    const int lane = threadIdx.x & 31;
    uint32_t r[4];
    mg__ldmatrix_x4<0>(r, s + ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8);
    b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
}
__device__ static __forceinline__ void mg__fa_frag_b2(uint32_t b0[2], uint32_t b1[2], const uint16_t *s,
                                                      int ld) {
    const int lane = threadIdx.x & 31;
    uint32_t r[4];
    mg__ldmatrix_x4<1>(r, s + (lane & 15) * ld + (lane >> 4) * 8);
    b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
}
/* The A fragment of columns 16kk … 16kk+15 of a warp's 16 × 32 tile held as 4 D fragments
   (p[nt] for columns 8nt …), each value rounded to the storage type (fp16 when F16, else
   bf16): the one rounding of P, D(P) and dS before their products, as the CPU twin rounds
   them (mg__attn_round). */
template <int F16>
__device__ static __forceinline__ void mg__fa_pack(uint32_t a[4], float (*p)[4], int kk) {
    int u;
    MG__UNROLL
    for (u = 0; u < 4; u++) {
        const float *x = p[2 * kk + (u >> 1)] + 2 * (u & 1);
        a[u] = mg__pack16x2<F16>(x[0], x[1]);
    }
}
/* acc[nt] += A·B[:, 8nt … 8nt+7] for nt < HD/8, A the packed 16 × 16 fragment, B 16 rows of hd
   at s (stride ld): the products of P (or dS) with 16 rows of V, dO, K or Q. */
template <int F16, int HD>
__device__ static __forceinline__ void mg__fa_accumulate(float (*acc)[4], const uint32_t a[4],
                                                const uint16_t *s, int ld) {
    uint32_t b0[2], b1[2];
    int nt;
    MG__UNROLL
    for (nt = 0; nt < HD / 8; nt += 2) {   /* two n8 tiles a load */
        mg__fa_frag_b2(b0, b1, s + nt * 8, ld);
        mg__mma16816<F16>(acc[nt], a, b0);
        mg__mma16816<F16>(acc[nt + 1], a, b1);
    }
}
/* A warp's 16 × 32 scores: s[nt] = A·Bᵀ for the 16 rows of hd at a and the 32 rows of hd at bm
   (both stride ld), the 4 n8 tiles of 8 rows of bm each. */
template <int F16, int HD>
__device__ static __forceinline__ void mg__fa_scores(float (*s)[4], const uint16_t *a, const uint16_t *bm,
                                            int ld) {
    uint32_t af[4], b0[2], b1[2];
    int kk, nt;
    MG__UNROLL
    for (nt = 0; nt < MG_ATTN_TILE / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    MG__UNROLL
    for (kk = 0; kk < HD / 16; kk++) {
        mg__fa_frag_a(af, a + kk * 16, ld);
        MG__UNROLL
        for (nt = 0; nt < MG_ATTN_TILE / 8; nt += 2) {   /* two n8 tiles (16 rows of bm) a load */
            mg__fa_frag_bt2(b0, b1, bm + nt * 8 * ld + kk * 16, ld);
            mg__mma16816<F16>(s[nt], af, b0);
            mg__mma16816<F16>(s[nt + 1], af, b1);
        }
    }
}
/* A warp's 16 rows of HD/8 accumulator fragments into a view, through the warp's fp32 scratch
   of MG__FA_SCRATCH(HD) floats (16 rows of HD + 8, then the 16 rows' weights w): this lane
   stages rows fr and fr + 8 and their weights w[0], w[1]; then HD/4 consecutive lanes write
   each row that exists (n of them from t0), four columns a lane: dst = scale·acc + w·dst, dst
   read only where w ≠ 0. A store instruction of the warp so covers whole rows (hd 64: two rows
   of 128 contiguous bytes in bf16), and a lane's four columns are one vector where the view's
   address allows. Free of bank conflicts: a staged row starts 8 banks on from the row before,
   so the 4 rows of a half-warp's 8-byte stores cover the 32 banks once, and a quarter-warp's
   16-byte loads read 128 contiguous bytes of one row. */
#define MG__FA_LDA(HD) ((HD) + 8)                  /* a staged row's floats */
#define MG__FA_SCRATCH(HD) (16 * MG__FA_LDA(HD) + 16)
template <int HD, class IO>
__device__ static __forceinline__ void mg__fa_store_rows(const IO out, const float *scratch,
                                                         const mg_attn_view &v, int64_t t0, int n,
                                                         int b, int g, int j, float scale) {
    enum { LDA = MG__FA_LDA(HD), LPR = HD / 4, RPS = 32 / LPR };   /* lanes a row, rows a step */
    const int lane = threadIdx.x & 31, col = 4 * (lane % LPR);
    const float *weight = scratch + 16 * LDA;
    int step, e;
    for (step = 0; step < 16 / RPS; step++) {   /* not unrolled: once a kernel */
        const int row = step * RPS + lane / LPR;
        if (row >= n) break;
        const int64_t off = mg__view_at(&v, t0 + row, b, g, j) + col;
        const int vec = (uintptr_t)(out.p + off) % (4 * sizeof(*out.p)) == 0;
        const float wr = weight[row];
        const float4 x4 = *(const float4 *)&scratch[row * LDA + col];
        float y[4] = {x4.x, x4.y, x4.z, x4.w}, old[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (wr != 0.0f) {
            if (vec) out.template ldv<4>(off, old);
            else for (e = 0; e < 4; e++) old[e] = out.ld(off + e);
        }
        for (e = 0; e < 4; e++) y[e] = scale * y[e] + (wr != 0.0f ? wr * old[e] : 0.0f);
        if (vec) out.template stv<4>(off, y);
        else for (e = 0; e < 4; e++) out.st(off + e, y[e]);
    }
}
template <int HD>
__device__ static __forceinline__ void mg__fa_write_rows(float (*acc)[4], const float w[2], float *scratch,
                                         const mg_attn_view v, int64_t t0, int n, int b, int g,
                                         int j, float scale) {
    enum { LDA = MG__FA_LDA(HD) };
    const int lane = threadIdx.x & 31, fr = lane >> 2, fc = 2 * (lane & 3);
    float *weight = scratch + 16 * LDA;
    int nt;
    MG__UNROLL
    for (nt = 0; nt < HD / 8; nt++) {
        *(float2 *)&scratch[fr * LDA + 8 * nt + fc] = make_float2(acc[nt][0], acc[nt][1]);
        *(float2 *)&scratch[(fr + 8) * LDA + 8 * nt + fc] = make_float2(acc[nt][2], acc[nt][3]);
    }
    if (fc == 0) { weight[fr] = w[0]; weight[fr + 8] = w[1]; }
    __syncwarp();
#define MG__FA_STORE(IO) \
    mg__fa_store_rows<HD>(mg__io_ptr<IO>(v.data, v.dtype), scratch, v, t0, n, b, g, j, scale)
    MG__IO_DISPATCH(v.dtype, MG__FA_STORE);
#undef MG__FA_STORE
    __syncwarp();                                /* read before the scratch is reused */
}
/* Shared memory of the three kernels: 16-bit rows of HD + 8 — the block's 64 rows (Q, or Q and
   dO, or K and V) and two buffers of a tile's two sets of 32 (the tile being computed and the
   next, in flight) — and for dK/dV two buffers of the tile's lse and Δ. At the end the 4
   warps' fp32 scratch of mg__fa_write_rows, 4·MG__FA_SCRATCH(HD)·4 = (64·(HD + 8) + 64)·4
   bytes, takes the place of the rows (≥ 192·(HD + 8)·2). */
static size_t mg__fa_smem(int hd, int kernel) {   /* 0 forward, 1 dQ, 2 dK/dV */
    size_t row = (size_t)(hd + 8) * 2;
    return kernel == 0 ? (MG__FA_ROWS + 4 * MG_ATTN_TILE) * row
         : kernel == 1 ? (2 * MG__FA_ROWS + 4 * MG_ATTN_TILE) * row
                       : (2 * MG__FA_ROWS + 4 * MG_ATTN_TILE) * row + 4 * MG_ATTN_TILE * 4;
}
/* Dropout's random words for the 4 values of a lane's m16n8 C fragment: elements [2r + e] at
   (row fr + 8r, column 2q + e), fr = lane/4, q = lane%4. Drawing per element costs a whole
   Philox evaluation (~70 instructions) per score, several times the score's share of the
   tensor-core products. Word i mod 4 of an evaluation belongs to index i, and the 4 indices of
   a group lie in 2 or 4 lanes of the fragment, so with `shared` (the groups aligned: T_g and
   the first key a multiple of 4; block-uniform) each lane evaluates one group and the lanes
   trade words by shuffles: one evaluation a lane for its 4 values. Warp-collective then: all
   32 lanes call it. Without `shared`, one draw per element.
   Keys along the columns (forward, dQ): (row, column) = (query qrow + 8r, key kcol + 2q + e).
   A group (query, keys 4p … 4p + 3 of the 8) sits in lanes q = 2p and 2p + 1 (two words each);
   the even lane evaluates row fr's group, the odd one row fr + 8's, and each sends the other
   the two words it lacks.                                                                    */
__device__ static inline void mg__fa_drop_words_keycols(const mg__attn_drop_k &dk, int64_t bh,
                                                        int64_t qrow, int64_t kcol, int shared,
                                                        uint32_t w[4]) {
    const int lane = threadIdx.x & 31, q = lane & 3, odd = q & 1;
    if (shared) {
        uint64_t c = mg__attn_drop_index(bh, dk.T_g, qrow + 8 * odd, kcol + 4 * (q >> 1)) >> 2;
        mg__philox4 x = mg__philox4x32(dk.key, (uint32_t)c, (uint32_t)(c >> 32), 0, 0);
        uint32_t got0 = __shfl_xor_sync(0xFFFFFFFFu, odd ? x.x[0] : x.x[2], 1);
        uint32_t got1 = __shfl_xor_sync(0xFFFFFFFFu, odd ? x.x[1] : x.x[3], 1);
        w[0] = odd ? got0 : x.x[0]; w[1] = odd ? got1 : x.x[1];
        w[2] = odd ? x.x[2] : got0; w[3] = odd ? x.x[3] : got1;
    } else {
        int k;
        MG__UNROLL
        for (k = 0; k < 4; k++)
            w[k] = mg_rand_u32(dk.key, mg__attn_drop_index(bh, dk.T_g, qrow + 8 * (k >> 1),
                                                           kcol + 2 * q + (k & 1)));
    }
}
/* v[i] for a run-time i < 4, by selects (a run-time index would put v in local memory). */
__device__ static __forceinline__ uint32_t mg__sel4(const uint32_t v[4], int i) {
    return (i & 2) ? ((i & 1) ? v[3] : v[2]) : ((i & 1) ? v[1] : v[0]);
}
/* Keys along the rows (dK/dV): (row, column) = (key krow + 8r, query qcol + 2q + e), krow the
   key of the lane's row fr. A group (query, keys 4p … 4p + 3 of the 16) sits in the 4 lanes
   fr = 4p + i, i = fr mod 4 (lane bits 2–3), word i in lane i; those lanes need the same 4
   groups, (query qcol + 2q + e, keys from krow − i + 8r) for 2r + e = 0 … 3. Lane i evaluates
   group i; three shuffle rounds d = 1, 2, 3 between lanes i and i ^ d transpose the words.  */
__device__ static inline void mg__fa_drop_words_keyrows(const mg__attn_drop_k &dk, int64_t bh,
                                                        int64_t krow, int64_t qcol, int shared,
                                                        uint32_t w[4]) {
    const int lane = threadIdx.x & 31, q = lane & 3, i = (lane >> 2) & 3;
    int k;
    if (shared) {
        uint64_t c = mg__attn_drop_index(bh, dk.T_g, qcol + 2 * q + (i & 1),
                                         krow - i + 8 * (i >> 1)) >> 2;
        mg__philox4 x = mg__philox4x32(dk.key, (uint32_t)c, (uint32_t)(c >> 32), 0, 0);
        uint32_t got[4];
        got[0] = mg__sel4(x.x, i);                     /* word i of lane i's own group */
        MG__UNROLL
        for (k = 1; k < 4; k++)                        /* word i of group i ^ k, from lane i ^ k */
            got[k] = __shfl_xor_sync(0xFFFFFFFFu, mg__sel4(x.x, i ^ k), k << 2);
        MG__UNROLL
        for (k = 0; k < 4; k++) w[k] = mg__sel4(got, k ^ i);
    } else {
        MG__UNROLL
        for (k = 0; k < 4; k++)
            w[k] = mg_rand_u32(dk.key, mg__attn_drop_index(bh, dk.T_g, qcol + 2 * q + (k & 1),
                                                           krow + 8 * (k >> 1)));
    }
}
/* Whether a warp's 16 rows (of which `rows` exist) and a tile's MG_ATTN_TILE columns (of
   which `cols` exist) are all real, and every key among them is visible to every query among
   them (the last key's position at most the first query's): the softmax and dS then need no
   mask per value. The same for the warp's lanes. */
__device__ static __forceinline__ bool mg__fa_tile_full(int rows, int cols, int64_t key_last,
                                                        int64_t query_first) {
    return rows >= 16 && cols >= MG_ATTN_TILE && key_last <= query_first;
}
/* The `shared` of the two above for a block: its index groups align with the fragments when
   the sequence length and the block's first key are multiples of 4 (its tiles start 32 apart). */
__device__ static inline int mg__fa_drop_shared(const mg__attn_drop_k &dk, const mg_attn_block &a) {
    return dk.T_g % 4 == 0 && a.k_pos0 % 4 == 0;
}
/* A kernel's head dim and storage type are one integer template argument CFG = hd | (fp16 ? 1
   : 0) (64, 65, 128, 129), so that a launch names one concrete kernel, mg__k_fa_forward<65>.
   Forward: grid (⌈Tq / 64⌉, B·n_head). A lane holds rows fr and fr + 8 of its warp's 16:
   their running max m and sum l, and columns 8nt + fc, + 1 of S, P and the accumulator. */
template <int CFG>
static __global__ void __launch_bounds__(128) mg__k_fa_forward(mg_attn_block a, mg__attn_drop_k dk,
        float scale, mg_attn_view o, float *lse, int merge, int vec) {
    enum { F16 = CFG & 1, HD = CFG & ~1, TL = MG_ATTN_TILE, LDH = HD + 8, NT = TL / 8 };
    MG__DYN_SHARED(float, sm);
    const int per = a.n_head / a.n_group, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int b = blockIdx.y / a.n_head, h = blockIdx.y % a.n_head, g = h / per, j = h % per;
    const int fr = lane >> 2, fc = 2 * (lane & 3), i0 = warp * 16 + fr;
    const int64_t t0 = (int64_t)blockIdx.x * MG__FA_ROWS;
    const int nq = (int)(a.Tq - t0 < MG__FA_ROWS ? a.Tq - t0 : MG__FA_ROWS);
    const int64_t qpos0 = a.q_pos0 + t0 + i0, row0 = ((int64_t)b * a.n_head + h) * a.Tq + t0;
    /* dropout's words: one Philox a lane for 4 scores when the groups align */
    const int64_t bh = mg__attn_drop_bh(&dk, b, h);
    const int drop_shared = mg__fa_drop_shared(dk, a);
    const float scale2 = scale * MG__LOG2E;      /* scores in base 2: P = 2^(S·scale2 − m) */
    uint16_t *Qs = (uint16_t *)sm, *Kb = Qs + MG__FA_ROWS * LDH, *Vb = Kb + 2 * TL * LDH;
    float acc[HD / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};   /* m: base 2 */
    int nkt, wkt, kt, nt, r, e;
    MG__UNROLL
    for (nt = 0; nt < HD / 8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    mg__fa_load<HD>(Qs, LDH, a.q, t0, nq, MG__FA_ROWS, b, g, j, vec);
    nkt = mg__attn_key_tiles(&a, a.q_pos0 + t0 + nq - 1);
    wkt = mg__fa_warp_key_tiles(&a, t0, nq, warp);
    mg__fa_prefetch<HD>(Kb, Vb, LDH, 0, a.k, a.v, nkt > 0, 0, a.Tk, b, g, 0, vec);   /* tile 0 */
    for (kt = 0; kt < nkt; kt++) {
        int64_t s0 = (int64_t)kt * TL, kpos = a.k_pos0 + s0;
        int nk = (int)(a.Tk - s0 < MG_ATTN_TILE ? a.Tk - s0 : MG_ATTN_TILE), nv[2];
        float s[NT][4], mx[2], sum[2] = {0.0f, 0.0f};
        uint32_t pf[4];
        const uint16_t *Ks = Kb + (kt & 1) * TL * LDH, *Vs = Vb + (kt & 1) * TL * LDH;
        mg__fa_next_tile([&] {                   /* tile kt + 1 in flight, tile kt landed */
            mg__fa_prefetch<HD>(Kb, Vb, LDH, (kt + 1) & 1, a.k, a.v, kt + 1 < nkt, kt + 1, a.Tk, b, g, 0, vec);
        });
        if (kt >= wkt) continue;                 /* the warp's rows see none of this tile */
        mg__fa_scores<F16, HD>(s, Qs + warp * 16 * LDH, Ks, LDH);
        MG__UNROLL
        for (r = 0; r < 2; r++)
            nv[r] = i0 + 8 * r < nq ? mg__attn_visible(qpos0 + 8 * r, kpos, nk) : 0;
        /* the row's max over its visible keys, then P = 2^(S − max) summed; S takes P. FULL
           (mg__int_tag<1>): every key visible to every row of the warp, no masks */
        auto softmax = [&](auto full_tag) {
            constexpr bool FULL = decltype(full_tag)::value;
            MG__UNROLL
            for (r = 0; r < 2; r++) {
                mx[r] = m[r];
                MG__UNROLL
                for (nt = 0; nt < NT; nt++)
                    MG__UNROLL
                    for (e = 0; e < 2; e++) {
                        float *x = &s[nt][2 * r + e];
                        *x = FULL || 8 * nt + fc + e < nv[r] ? scale2 * *x : -INFINITY;
                        mx[r] = fmaxf(mx[r], *x);
                    }
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xFFFFFFFFu, mx[r], 2));
                MG__UNROLL
                for (nt = 0; nt < NT; nt++)
                    MG__UNROLL
                    for (e = 0; e < 2; e++) {   /* masked: 2^−∞ = 0 (even where max is −∞) */
                        float *x = &s[nt][2 * r + e];
                        float p = mg__ex2(FULL || 8 * nt + fc + e < nv[r] ? *x - mx[r] : -INFINITY);
                        sum[r] += p;
                        *x = p;
                    }
            }
        };
        if (mg__fa_tile_full(nq - warp * 16, nk, kpos + TL - 1, a.q_pos0 + t0 + warp * 16))
            softmax(mg__int_tag<1>());
        else
            softmax(mg__int_tag<0>());
        MG__UNROLL
        for (r = 0; r < 2; r++) {                /* the quad's sum; rescale by 2^(m − max) */
            sum[r] += __shfl_xor_sync(0xFFFFFFFFu, sum[r], 1);
            sum[r] += __shfl_xor_sync(0xFFFFFFFFu, sum[r], 2);
            if (nv[r]) {
                float alpha = m[r] == -INFINITY ? 0.0f : mg__ex2(m[r] - mx[r]);
                l[r] = l[r] * alpha + sum[r];
                m[r] = mx[r];
                if (alpha != 1.0f) {
                    MG__UNROLL
                    for (nt = 0; nt < HD / 8; nt++) { acc[nt][2 * r] *= alpha; acc[nt][2 * r + 1] *= alpha; }
                }
            }
        }
        if (dk.on)                               /* P takes D(P) */
            MG__UNROLL
            for (nt = 0; nt < NT; nt++) {
                uint32_t w[4];
                mg__fa_drop_words_keycols(dk, bh, qpos0, kpos + 8 * nt, drop_shared, w);
                MG__UNROLL
                for (e = 0; e < 4; e++) s[nt][e] = mg__dropout(s[nt][e], w[e], dk.threshold, dk.scale);
            }
        MG__UNROLL
        for (e = 0; e < TL / 16; e++) {          /* acc += D(P)·V, 16 keys at a time */
            mg__fa_pack<F16>(pf, s, e);
            mg__fa_accumulate<F16, HD>(acc, pf, Vs + e * 16 * LDH, LDH);
        }
    }
    mg__cp_async_wait<0>();                      /* (only an empty group is left) */
    {   /* o = acc/l, merged with the old o by its weight; lse (the quad's first lane) */
        float lse_old[2], w_old[2];
        MG__UNROLL
        for (r = 0; r < 2; r++) lse_old[r] = merge && i0 + 8 * r < nq ? lse[row0 + i0 + 8 * r] : 0.0f;
        __syncthreads();   /* every warp is done with K, V: the rows take the accumulators */
        MG__UNROLL
        for (r = 0; r < 2; r++) {
            float w_new = 0.0f, lse_i = mg__attn_finish(m[r] * MG__LN2, l[r], merge, lse_old[r], &w_new,
                                                        &w_old[r]);
            MG__UNROLL
            for (nt = 0; nt < HD / 8; nt++) { acc[nt][2 * r] *= w_new; acc[nt][2 * r + 1] *= w_new; }
            if (fc == 0 && i0 + 8 * r < nq) lse[row0 + i0 + 8 * r] = lse_i;
        }
        mg__fa_write_rows<HD>(acc, w_old, sm + warp * MG__FA_SCRATCH(HD), o, t0 + warp * 16, nq - warp * 16,
                              b, g, j, 1.0f);
    }
}
/* dQ: grid (⌈Tq / 64⌉, B·n_head). A lane holds rows fr and fr + 8 of its warp's 16 queries. */
template <int CFG>
static __global__ void __launch_bounds__(128) mg__k_fa_backward_dq(mg_attn_block a,
        mg__attn_drop_k dk, float scale, mg_attn_view dout, const float *lse, const float *delta,
        mg_attn_view dq, int accumulate, int vec) {
    enum { F16 = CFG & 1, HD = CFG & ~1, TL = MG_ATTN_TILE, LDH = HD + 8, NT = TL / 8 };
    MG__DYN_SHARED(float, sm);
    const int per = a.n_head / a.n_group, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int b = blockIdx.y / a.n_head, h = blockIdx.y % a.n_head, g = h / per, j = h % per;
    const int fr = lane >> 2, fc = 2 * (lane & 3), i0 = warp * 16 + fr;
    const int64_t t0 = (int64_t)blockIdx.x * MG__FA_ROWS;
    const int nq = (int)(a.Tq - t0 < MG__FA_ROWS ? a.Tq - t0 : MG__FA_ROWS);
    const int64_t qpos0 = a.q_pos0 + t0 + i0, row0 = ((int64_t)b * a.n_head + h) * a.Tq + t0;
    const int64_t bh = mg__attn_drop_bh(&dk, b, h);   /* dropout: as the forward */
    const int drop_shared = mg__fa_drop_shared(dk, a);
    uint16_t *Qs = (uint16_t *)sm, *dOs = Qs + MG__FA_ROWS * LDH, *Kb = dOs + MG__FA_ROWS * LDH;
    uint16_t *Vb = Kb + 2 * TL * LDH;
    const float scale2 = scale * MG__LOG2E;      /* P = 2^(S·scale2 − lse·log2 e) */
    float acc[HD / 8][4], lse_r[2], delta_r[2];  /* lse_r in base 2 */
    int nkt, wkt, kt, nt, r, e;
    for (r = 0; r < 2; r++) {
        lse_r[r] = i0 + 8 * r < nq ? lse[row0 + i0 + 8 * r] * MG__LOG2E : 0.0f;
        delta_r[r] = i0 + 8 * r < nq ? delta[row0 + i0 + 8 * r] : 0.0f;
    }
    MG__UNROLL
    for (nt = 0; nt < HD / 8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    mg__fa_load<HD>(Qs, LDH, a.q, t0, nq, MG__FA_ROWS, b, g, j, vec);
    mg__fa_load<HD>(dOs, LDH, dout, t0, nq, MG__FA_ROWS, b, g, j, vec);
    nkt = mg__attn_key_tiles(&a, a.q_pos0 + t0 + nq - 1);
    wkt = mg__fa_warp_key_tiles(&a, t0, nq, warp);
    mg__fa_prefetch<HD>(Kb, Vb, LDH, 0, a.k, a.v, nkt > 0, 0, a.Tk, b, g, 0, vec);   /* tile 0 */
    for (kt = 0; kt < nkt; kt++) {
        int64_t s0 = (int64_t)kt * TL, kpos = a.k_pos0 + s0;
        int nk = (int)(a.Tk - s0 < MG_ATTN_TILE ? a.Tk - s0 : MG_ATTN_TILE);
        float s[NT][4], dp[NT][4];
        uint32_t pf[4];
        const uint16_t *Ks = Kb + (kt & 1) * TL * LDH, *Vs = Vb + (kt & 1) * TL * LDH;
        mg__fa_next_tile([&] {                   /* tile kt + 1 in flight, tile kt landed */
            mg__fa_prefetch<HD>(Kb, Vb, LDH, (kt + 1) & 1, a.k, a.v, kt + 1 < nkt, kt + 1, a.Tk, b, g, 0, vec);
        });
        if (kt >= wkt) continue;
        mg__fa_scores<F16, HD>(s, Qs + warp * 16 * LDH, Ks, LDH);    /* S = Q·Kᵀ */
        mg__fa_scores<F16, HD>(dp, dOs + warp * 16 * LDH, Vs, LDH);  /* dP = dO·Vᵀ */
        int nv[2];
        MG__UNROLL
        for (r = 0; r < 2; r++) nv[r] = i0 + 8 * r < nq ? mg__attn_visible(qpos0 + 8 * r, kpos, nk) : 0;
        /* S takes dS (rounded by the pack). Every value is computed and the masked ones set
           to 0 after: selects, not branches. FULL (mg__int_tag<1>): no masks */
        auto dS_tile = [&](auto full_tag) {
            constexpr bool FULL = decltype(full_tag)::value;
            MG__UNROLL
            for (nt = 0; nt < NT; nt++) {
                uint32_t w[4] = {0u, 0u, 0u, 0u};
                if (dk.on) mg__fa_drop_words_keycols(dk, bh, qpos0, kpos + 8 * nt, drop_shared, w);
                MG__UNROLL
                for (r = 0; r < 2; r++)
                    MG__UNROLL
                    for (e = 0; e < 2; e++) {
                        const bool vis = FULL || 8 * nt + fc + e < nv[r];
                        float pd, *x = &s[nt][2 * r + e];
                        float p = mg__ex2(vis ? fmaf(*x, scale2, -lse_r[r]) : -INFINITY);
                        float ds = mg__attn_ds_p(&dk, w[2 * r + e], p, dp[nt][2 * r + e], delta_r[r],
                                                 MG_F32, &pd);
                        *x = vis ? ds : 0.0f;
                    }
            }
        };
        if (mg__fa_tile_full(nq - warp * 16, nk, kpos + TL - 1, a.q_pos0 + t0 + warp * 16))
            dS_tile(mg__int_tag<1>());
        else
            dS_tile(mg__int_tag<0>());
        MG__UNROLL
        for (e = 0; e < TL / 16; e++) {          /* dQ += dS·K, 16 keys at a time */
            mg__fa_pack<F16>(pf, s, e);
            mg__fa_accumulate<F16, HD>(acc, pf, Ks + e * 16 * LDH, LDH);
        }
    }
    mg__cp_async_wait<0>();                      /* (only an empty group is left) */
    {
        const float w[2] = {accumulate ? 1.0f : 0.0f, accumulate ? 1.0f : 0.0f};
        __syncthreads();   /* Q and dO consumed: their rows take the warps' accumulators */
        mg__fa_write_rows<HD>(acc, w, sm + warp * MG__FA_SCRATCH(HD), dq, t0 + warp * 16, nq - warp * 16,
                              b, g, j, scale);
    }
}
/* dK, dV: grid (⌈Tk / 64⌉, B·n_group). A lane holds keys fr and fr + 8 of its warp's 16, and
   of Sᵀ, D(P)ᵀ and dSᵀ the columns (queries) 8nt + fc, + 1 of the tile. */
template <int CFG>
static __global__ void __launch_bounds__(128) mg__k_fa_backward_dkv(mg_attn_block a,
        mg__attn_drop_k dk, float scale, mg_attn_view dout, const float *lse, const float *delta,
        mg_attn_view dkv_k, mg_attn_view dkv_v, int accumulate, int vec) {
    enum { F16 = CFG & 1, HD = CFG & ~1, TL = MG_ATTN_TILE, LDH = HD + 8, NT = TL / 8 };
    MG__DYN_SHARED(float, sm);
    const int per = a.n_head / a.n_group, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int b = blockIdx.y / a.n_group, g = blockIdx.y % a.n_group;
    const int fr = lane >> 2, fc = 2 * (lane & 3), c0 = warp * 16 + fr;
    const int64_t s0 = (int64_t)blockIdx.x * MG__FA_ROWS;
    const int nk = (int)(a.Tk - s0 < MG__FA_ROWS ? a.Tk - s0 : MG__FA_ROWS);
    const int64_t kpos0 = a.k_pos0 + s0 + c0;
    const int drop_shared = mg__fa_drop_shared(dk, a);   /* dropout: as the forward */
    uint16_t *Ks = (uint16_t *)sm, *Vs = Ks + MG__FA_ROWS * LDH, *Qb = Vs + MG__FA_ROWS * LDH;
    uint16_t *dOb = Qb + 2 * TL * LDH;
    float *lse_b = (float *)(dOb + 2 * TL * LDH), *delta_b = lse_b + 2 * TL;   /* lse in base 2 */
    const float scale2 = scale * MG__LOG2E;      /* P = 2^(S·scale2 − lse·log2 e) */
    float dKa[HD / 8][4], dVa[HD / 8][4];
    int nqt = (a.Tq + TL - 1) / TL, qt0 = mg__attn_first_query_tile(&a, a.k_pos0 + s0);
    int wqt0 = mg__attn_first_query_tile(&a, a.k_pos0 + s0 + warp * 16), nt, r, e, it;
    /* the (head of the group, query tile) pairs in order, head by head: per · n_qt of them */
    const int n_qt = nqt > qt0 ? nqt - qt0 : 0, n_it = per * n_qt;
    /* Pair it's Q, dO rows in flight and its lse, Δ stored, into buffer it & 1 (none: an
       empty group) */
    auto stage = [&](int it1) {
        int jh1 = it1 < n_it ? it1 / n_qt : 0, qt1 = it1 < n_it ? qt0 + it1 % n_qt : 0;
        int64_t t1 = (int64_t)qt1 * TL, row1 = ((int64_t)b * a.n_head + g * per + jh1) * a.Tq + t1;
        int nq1 = (int)(a.Tq - t1 < MG_ATTN_TILE ? a.Tq - t1 : MG_ATTN_TILE), u;
        mg__fa_prefetch<HD>(Qb, dOb, LDH, it1 & 1, a.q, dout, it1 < n_it, qt1, a.Tq, b, g, jh1, vec);
        if (it1 < n_it)
            for (u = threadIdx.x; u < TL; u += blockDim.x) {
                lse_b[(it1 & 1) * TL + u] = u < nq1 ? lse[row1 + u] * MG__LOG2E : 0.0f;
                delta_b[(it1 & 1) * TL + u] = u < nq1 ? delta[row1 + u] : 0.0f;
            }
    };
    MG__UNROLL
    for (nt = 0; nt < HD / 8; nt++)
        for (e = 0; e < 4; e++) dKa[nt][e] = dVa[nt][e] = 0.0f;
    mg__fa_load<HD>(Ks, LDH, a.k, s0, nk, MG__FA_ROWS, b, g, 0, vec);
    mg__fa_load<HD>(Vs, LDH, a.v, s0, nk, MG__FA_ROWS, b, g, 0, vec);
    stage(0);
    for (it = 0; it < n_it; it++) {
        {
            const int jh = it / n_qt, qt = qt0 + it % n_qt, h = g * per + jh;
            int64_t t0 = (int64_t)qt * TL;
            int nq = (int)(a.Tq - t0 < MG_ATTN_TILE ? a.Tq - t0 : MG_ATTN_TILE);
            float st[NT][4], dpt[NT][4];
            uint32_t pf[4];
            const uint16_t *Qs = Qb + (it & 1) * TL * LDH, *dOs = dOb + (it & 1) * TL * LDH;
            const float *lse_s = lse_b + (it & 1) * TL, *delta_s = delta_b + (it & 1) * TL;
            mg__fa_next_tile([&] { stage(it + 1); });   /* pair it + 1 in flight, pair it landed */
            if (warp * 16 >= nk || qt < wqt0) continue;   /* no keys, or no query sees them */
            mg__fa_scores<F16, HD>(st, Ks + warp * 16 * LDH, Qs, LDH);    /* Sᵀ = K·Qᵀ */
            mg__fa_scores<F16, HD>(dpt, Vs + warp * 16 * LDH, dOs, LDH);  /* dPᵀ = V·dOᵀ */
            const int64_t bh = mg__attn_drop_bh(&dk, b, h);   /* dropout's head */
            /* Sᵀ takes D(P)ᵀ, dPᵀ takes dSᵀ (rounded by the pack). Every value is computed and
               the masked ones set to 0 after: selects, not branches. FULL: no masks */
            auto dS_tile = [&](auto full_tag) {
                constexpr bool FULL = decltype(full_tag)::value;
                MG__UNROLL
                for (nt = 0; nt < NT; nt++) {
                    uint32_t w[4] = {0u, 0u, 0u, 0u};
                    if (dk.on) mg__fa_drop_words_keyrows(dk, bh, kpos0, a.q_pos0 + t0 + 8 * nt, drop_shared, w);
                    MG__UNROLL
                    for (r = 0; r < 2; r++)
                        MG__UNROLL
                        for (e = 0; e < 2; e++) {
                            int q = 8 * nt + fc + e;
                            const bool vis = FULL || (c0 + 8 * r < nk && q < nq &&
                                                      kpos0 + 8 * r <= a.q_pos0 + t0 + q);
                            float pd, p = mg__ex2(vis ? fmaf(st[nt][2 * r + e], scale2, -lse_s[q]) : -INFINITY);
                            float ds = mg__attn_ds_p(&dk, w[2 * r + e], p, dpt[nt][2 * r + e], delta_s[q],
                                                     MG_F32, &pd);
                            st[nt][2 * r + e] = vis ? pd : 0.0f;
                            dpt[nt][2 * r + e] = vis ? ds : 0.0f;
                        }
                }
            };
            if (mg__fa_tile_full(nk - warp * 16, nq, a.k_pos0 + s0 + warp * 16 + 15, a.q_pos0 + t0))
                dS_tile(mg__int_tag<1>());
            else
                dS_tile(mg__int_tag<0>());
            MG__UNROLL
            for (e = 0; e < TL / 16; e++) {      /* 16 queries at a time */
                mg__fa_pack<F16>(pf, st, e);
                mg__fa_accumulate<F16, HD>(dVa, pf, dOs + e * 16 * LDH, LDH);   /* dV += D(P)ᵀ·dO */
                mg__fa_pack<F16>(pf, dpt, e);
                mg__fa_accumulate<F16, HD>(dKa, pf, Qs + e * 16 * LDH, LDH);    /* dK += dSᵀ·Q */
            }
        }
    }
    mg__cp_async_wait<0>();                      /* (only an empty group is left) */
    {
        const float w[2] = {accumulate ? 1.0f : 0.0f, accumulate ? 1.0f : 0.0f};
        float *scratch = sm + warp * MG__FA_SCRATCH(HD);
        __syncthreads();   /* K and V consumed: their rows take the warps' accumulators */
        mg__fa_write_rows<HD>(dKa, w, scratch, dkv_k, s0 + warp * 16, nk - warp * 16, b, g, 0, scale);
        mg__fa_write_rows<HD>(dVa, w, scratch, dkv_v, s0 + warp * 16, nk - warp * 16, b, g, 0, 1.0f);
    }
}
/* Δ = rowsum(dO ∘ O): a warp per row, lane L the elements L, L + 32, … of the head's row;
   dO and O through IO (compiled for their dtype when they share one). Reads 2·hd·s bytes and
   writes 4 per row, 2·hd FLOPs.                                                              */
template <class IO> static __global__ void mg__k_attn_delta(float *delta, mg_attn_block a,
                                                            mg_attn_view dout, mg_attn_view o) {
    int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5), t, od, oo;
    int lane = threadIdx.x & 31, per = a.n_head / a.n_group, h, b, d;
    IO dO = mg__io_ptr<IO>(dout.data, dout.dtype), O = mg__io_ptr<IO>(o.data, o.dtype);
    float s = 0.0f;
    if (r >= (int64_t)a.B * a.n_head * a.Tq) return;     /* whole warps leave together */
    t = r % a.Tq; h = (int)(r / a.Tq % a.n_head); b = (int)(r / a.Tq / a.n_head);
    od = mg__view_at(&dout, t, b, h / per, h % per);
    oo = mg__view_at(&o, t, b, h / per, h % per);
    for (d = lane; d < a.hd; d += 32) s += dO.ld(od + d) * O.ld(oo + d);
    s = mg__warp_sum(s);
    if (lane == 0) delta[r] = s;
}
/* The backward's recomputed entry (query row i of Qs/dOs, key c of Ks/Vs): P, D(P), dS. */
__device__ static float mg__attn_ds_entry(const mg__attn_drop_k *dk, float scale, int b, int h,
                                          int64_t qpos, int64_t kpos, const float *q,
                                          const float *dO, const float *k, const float *v,
                                          int hd, float lse, float delta, float *pd, mg_dtype dt) {
    return mg__attn_ds(dk, b, h, qpos, kpos, scale * mg__attn_dot(q, k, hd),
                       mg__attn_dot(dO, v, hd), lse, delta, dt, pd);
}
/* dQ: grid (query tiles, B·n_head). */
static __global__ void mg__k_attn_backward_dq(mg_attn_block a, mg__attn_drop_k dk, float scale,
                                              mg_attn_view dout, const float *lse,
                                              const float *delta, mg_attn_view dq, int accumulate) {
    MG__DYN_SHARED(float, sm);
    const int TL = MG_ATTN_TILE, hd = a.hd, ldr = hd + 1, per = a.n_head / a.n_group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b = blockIdx.y / a.n_head, h = blockIdx.y % a.n_head, g = h / per, j = h % per;
    int64_t t0 = (int64_t)blockIdx.x * TL, row0 = ((int64_t)b * a.n_head + h) * a.Tq + t0;
    int nq = (int)(a.Tq - t0 < TL ? a.Tq - t0 : TL), nkt, kt, r, u, c, e;
    float *Qs = sm, *dOs = Qs + TL * ldr, *Ks = dOs + TL * ldr, *Vs = Ks + TL * ldr;
    float *dS = Vs + TL * ldr, acc[MG__ATTN_RPW][MG__ATTN_DPL], pd;
    MG__UNROLL
    for (r = 0; r < MG__ATTN_RPW; r++)
        MG__UNROLL
        for (u = 0; u < MG__ATTN_DPL; u++) acc[r][u] = 0.0f;
    mg__attn_load_tile(Qs, ldr, a.q, t0, nq, b, g, j, hd);
    mg__attn_load_tile(dOs, ldr, dout, t0, nq, b, g, j, hd);
    nkt = mg__attn_key_tiles(&a, a.q_pos0 + t0 + nq - 1);
    for (kt = 0; kt < nkt; kt++) {
        int64_t s0 = (int64_t)kt * TL, kpos = a.k_pos0 + s0;
        int nk = (int)(a.Tk - s0 < TL ? a.Tk - s0 : TL);
        __syncthreads();
        mg__attn_load_tile(Ks, ldr, a.k, s0, nk, b, g, 0, hd);
        mg__attn_load_tile(Vs, ldr, a.v, s0, nk, b, g, 0, hd);
        __syncthreads();
        for (e = threadIdx.x; e < TL * TL; e += blockDim.x) {
            int i = e / TL;
            int64_t qpos = a.q_pos0 + t0 + i;
            c = e % TL;
            if (i < nq && c < mg__attn_visible(qpos, kpos, nk))
                dS[i * (TL + 1) + c] = mg__attn_ds_entry(&dk, scale, b, h, qpos, kpos + c,
                                                         Qs + i * ldr, dOs + i * ldr, Ks + c * ldr,
                                                         Vs + c * ldr, hd, lse[row0 + i],
                                                         delta[row0 + i], &pd, a.q.dtype);
        }
        __syncthreads();
        MG__UNROLL
        for (r = 0; r < MG__ATTN_RPW; r++) {
            int i = warp + r * (MG__ATTN_THREADS / 32);
            int nv = i < nq ? mg__attn_visible(a.q_pos0 + t0 + i, kpos, nk) : 0;
            MG__UNROLL
            for (u = 0; u < MG__ATTN_DPL; u++) {
                int d = lane + 32 * u;
                float x = 0.0f;
                if (d < hd)
                    for (c = 0; c < nv; c++) x += dS[i * (TL + 1) + c] * Ks[c * ldr + d];
                acc[r][u] += x;
            }
        }
    }
    MG__UNROLL
    for (r = 0; r < MG__ATTN_RPW; r++) {
        int i = warp + r * (MG__ATTN_THREADS / 32);
        int64_t off;
        if (i >= nq) continue;
        off = mg__view_at(&dq, t0 + i, b, g, j);
        MG__UNROLL
        for (u = 0; u < MG__ATTN_DPL; u++) {
            int d = lane + 32 * u;
            if (d < hd)
                mg_store(dq.data, dq.dtype, off + d, scale * acc[r][u] +
                         (accumulate ? mg_load(dq.data, dq.dtype, off + d) : 0.0f));
        }
    }
}
/* dK, dV: grid (key tiles, B·n_group); warp w owns keys w, w + 4, …. */
static __global__ void mg__k_attn_backward_dkv(mg_attn_block a, mg__attn_drop_k dk, float scale,
                                               mg_attn_view dout, const float *lse,
                                               const float *delta, mg_attn_view dkv_k,
                                               mg_attn_view dkv_v, int accumulate) {
    MG__DYN_SHARED(float, sm);
    const int TL = MG_ATTN_TILE, hd = a.hd, ldr = hd + 1, per = a.n_head / a.n_group;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int b = blockIdx.y / a.n_group, g = blockIdx.y % a.n_group, j, r, u, i, e, qt, nqt;
    int64_t s0 = (int64_t)blockIdx.x * TL, kpos = a.k_pos0 + s0;
    int nk = (int)(a.Tk - s0 < TL ? a.Tk - s0 : TL);
    float *Ks = sm, *Vs = Ks + TL * ldr, *Qs = Vs + TL * ldr, *dOs = Qs + TL * ldr;
    float *P = dOs + TL * ldr, *dS = P + TL * (TL + 1);
    float dKa[MG__ATTN_RPW][MG__ATTN_DPL], dVa[MG__ATTN_RPW][MG__ATTN_DPL];
    MG__UNROLL
    for (r = 0; r < MG__ATTN_RPW; r++)
        MG__UNROLL
        for (u = 0; u < MG__ATTN_DPL; u++) dKa[r][u] = dVa[r][u] = 0.0f;
    mg__attn_load_tile(Ks, ldr, a.k, s0, nk, b, g, 0, hd);
    mg__attn_load_tile(Vs, ldr, a.v, s0, nk, b, g, 0, hd);
    nqt = (a.Tq + TL - 1) / TL;
    for (j = 0; j < per; j++) {
        int h = g * per + j;
        for (qt = mg__attn_first_query_tile(&a, kpos); qt < nqt; qt++) {
            int64_t t0 = (int64_t)qt * TL, row0 = ((int64_t)b * a.n_head + h) * a.Tq + t0;
            int nq = (int)(a.Tq - t0 < TL ? a.Tq - t0 : TL);
            __syncthreads();
            mg__attn_load_tile(Qs, ldr, a.q, t0, nq, b, g, j, hd);
            mg__attn_load_tile(dOs, ldr, dout, t0, nq, b, g, j, hd);
            __syncthreads();
            for (e = threadIdx.x; e < TL * TL; e += blockDim.x) {
                int64_t qpos;
                int c = e % TL;
                i = e / TL;
                qpos = a.q_pos0 + t0 + i;
                P[i * (TL + 1) + c] = dS[i * (TL + 1) + c] = 0.0f;
                if (i < nq && c < mg__attn_visible(qpos, kpos, nk))
                    dS[i * (TL + 1) + c] = mg__attn_ds_entry(&dk, scale, b, h, qpos, kpos + c,
                                                             Qs + i * ldr, dOs + i * ldr,
                                                             Ks + c * ldr, Vs + c * ldr, hd,
                                                             lse[row0 + i], delta[row0 + i],
                                                             &P[i * (TL + 1) + c], a.q.dtype);
            }
            __syncthreads();
            MG__UNROLL
            for (r = 0; r < MG__ATTN_RPW; r++) {
                int c = warp + r * (MG__ATTN_THREADS / 32);
                if (c >= nk) continue;
                MG__UNROLL
                for (u = 0; u < MG__ATTN_DPL; u++) {
                    int d = lane + 32 * u;
                    float xv = 0.0f, xk = 0.0f;
                    if (d < hd)
                        for (i = 0; i < nq; i++) {
                            xv += P[i * (TL + 1) + c] * dOs[i * ldr + d];
                            xk += dS[i * (TL + 1) + c] * Qs[i * ldr + d];
                        }
                    dVa[r][u] += xv;
                    dKa[r][u] += xk;
                }
            }
        }
    }
    MG__UNROLL
    for (r = 0; r < MG__ATTN_RPW; r++) {
        int c = warp + r * (MG__ATTN_THREADS / 32);
        int64_t ok, ov;
        if (c >= nk) continue;
        ok = mg__view_at(&dkv_k, s0 + c, b, g, 0);
        ov = mg__view_at(&dkv_v, s0 + c, b, g, 0);
        MG__UNROLL
        for (u = 0; u < MG__ATTN_DPL; u++) {
            int d = lane + 32 * u;
            if (d >= hd) continue;
            mg_store(dkv_k.data, dkv_k.dtype, ok + d, scale * dKa[r][u] +
                     (accumulate ? mg_load(dkv_k.data, dkv_k.dtype, ok + d) : 0.0f));
            mg_store(dkv_v.data, dkv_v.dtype, ov + d, dVa[r][u] +
                     (accumulate ? mg_load(dkv_v.data, dkv_v.dtype, ov + d) : 0.0f));
        }
    }
}
/* Shared bytes of the three kernels (fp32 rows of hd + 1, score tiles of 33). */
static size_t mg__attn_smem(int hd, int rows, int score_tiles) {
    return ((size_t)rows * MG_ATTN_TILE * (hd + 1) + (size_t)score_tiles * MG_ATTN_TILE * (MG_ATTN_TILE + 1)) * sizeof(float);
}

/* --- cross-entropy: one block per row -------------------------------------------------------
   Over N rows of Vs logits of e bytes: max reads e·N·Vs bytes (1 compare each); Σexp and the
   target logit read them once more, ~3 FLOPs each (one pass with local_max: the same read);
   backward reads e_l·N·Vs and writes e_d·N·Vs bytes, ~5 FLOPs each. Bandwidth-bound.
   The loads are compiled per dtype (IL: the logits' accessor; ID: dlogits'), and where Vs and
   the pointers allow, a thread takes 4 neighbouring columns as one vector (16 bytes of fp32
   logits): thread t the columns 4t … 4t+3, then 4(t + blockDim) …; else a column at a time,
   j ≡ t (mod blockDim). mg__xent_cols walks a thread's columns below n in that order.     */
template <class IO, class F>
__device__ static void mg__xent_cols(IO x, int64_t base, int64_t n, int vec, F f) {
    int64_t j = vec ? 4 * (int64_t)threadIdx.x : threadIdx.x, step = vec ? 4 * (int64_t)blockDim.x : blockDim.x;
    for (; j < n; j += step) {
        if (vec && j + 4 <= n) {
            float v[4];
            int e;
            x.template ldv<4>(base + j, v);
            for (e = 0; e < 4; e++) f(j + e, v[e]);
        } else {
            int e;
            for (e = 0; e < (vec ? 4 : 1) && j + e < n; e++) f(j + e, x.ld(base + j + e));
        }
    }
}
template <class IL>
static __global__ void mg__k_xent_max(float *rowmax, IL logits, int64_t Vs, int64_t nreal, int vec) {
    float mx = -INFINITY;
    mg__xent_cols(logits, blockIdx.x * Vs, nreal, vec, [&](int64_t, float x) { mx = fmaxf(mx, x); });
    mx = mg__block_max(mx);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = mx;
}
/* rowmax given (the merged max): Σexp and the target logit. local_max: one pass — each thread
   a running (max, Σ) over its columns, then the block's max M (written to rowmax) and Σ of
   the threads' sums moved to M (mg_xent_partial).                                          */
template <class IL>
static __global__ void mg__k_xent_sumexp(float *sumexp, float *tlogit, IL logits,
                                         const int32_t *targets, float *rowmax, int64_t Vs,
                                         int64_t nreal, int64_t vocab_start, int local_max,
                                         int vec) {
    int64_t base = blockIdx.x * Vs, tgt = (int64_t)targets[blockIdx.x] - vocab_start;
    float mx = local_max ? -INFINITY : rowmax[blockIdx.x], s = 0.0f;
    if (local_max) {
        float M;
        mg__xent_cols(logits, base, nreal, vec, [&](int64_t, float x) { mg__xent_online(&mx, &s, x); });
        M = mg__block_max(mx);
        s = mg__xent_rescale(s, mx, M);
        mx = M;
    } else {
        mg__xent_cols(logits, base, nreal, vec, [&](int64_t, float x) { s += mg__exp(x - mx); });
    }
    s = mg__block_sum(s);
    if (threadIdx.x == 0) {
        if (local_max) rowmax[blockIdx.x] = mx;
        sumexp[blockIdx.x] = s;
        tlogit[blockIdx.x] = (tgt >= 0 && tgt < nreal) ? logits.ld(base + tgt) : 0.0f;
    }
}
/* dloss (or *dloss_at) times scale; a row whose target is negative (ignored) has no real
   columns, so its whole row is written as 0.                                               */
template <class ID, class IL>
static __global__ void mg__k_xent_backward(ID dlogits, IL logits, const int32_t *targets,
                                           const float *rowmax, const float *sumexp, float dloss,
                                           const float *dloss_at, float scale, int64_t Vs,
                                           int64_t nreal, int64_t vocab_start, int vec) {
    int64_t base = blockIdx.x * Vs, tgt = (int64_t)targets[blockIdx.x] - vocab_start, j;
    float mx = rowmax[blockIdx.x], se = sumexp[blockIdx.x];
    if (targets[blockIdx.x] < 0) nreal = 0;
    if (dloss_at) dloss = *dloss_at;
    dloss *= scale;
    for (j = vec ? 4 * (int64_t)threadIdx.x : threadIdx.x; j < Vs; j += vec ? 4 * (int64_t)blockDim.x : blockDim.x) {
        float v[4];
        int e, w = vec ? 4 : 1;
        if (vec) logits.template ldv<4>(base + j, v);   /* Vs is a multiple of 4 */
        else v[0] = logits.ld(base + j);
        for (e = 0; e < w; e++)
            v[e] = j + e < nreal ? mg__xent_dlogit(v[e], mx, se, (float)(j + e == tgt), dloss) : 0.0f;
        if (vec) dlogits.template stv<4>(base + j, v);
        else dlogits.st(base + j, v[0]);
    }
}
/* LAUNCH(IL, vec) with IL the logits' compiled accessor (or the run-time one) and vec whether
   the rows go 4 columns at a time (Vs a multiple of 4, the pointers aligned to 4 values). */
static int mg__xent_vec(const mg_tensor *t) {   /* rows of t read 4 columns at a time */
    return mg_cols(t) % 4 == 0 && mg__vec_ok(t->data, 4, (int)mg_dtype_size(t->dtype));
}
#define MG__XENT_DISPATCH(logits, LAUNCH) do { \
        mg_dtype ldt_ = (logits)->dtype; \
        int vec_ = mg__xent_vec(logits); \
        if (ldt_ == MG_F32) LAUNCH(mg__io_f32, vec_); \
        else if (ldt_ == MG_BF16) LAUNCH(mg__io_bf16, vec_); \
        else if (ldt_ == MG_F16) LAUNCH(mg__io_f16, vec_); \
        else LAUNCH(mg__io_dyn, 0); \
    } while (0)
struct mg__f_xent_loss {   /* targets NULL: every row counts; else a negative one gives 0 */
    float *losses; const float *rowmax, *sumexp, *tlogit; const int32_t *targets;
    __device__ void operator()(int64_t i) const {
        losses[i] = targets && targets[i] < 0 ? 0.0f : mg__xent_loss(rowmax[i], sumexp[i], tlogit[i]);
    }
};
struct mg__f_xent_rescale {
    float *sumexp; const float *rowmax, *M;
    __device__ void operator()(int64_t i) const {
        sumexp[i] = mg__xent_rescale(sumexp[i], rowmax[i], M[i]);
    }
};

/* --- optimizer and norms -------------------------------------------------------------------- */
/* Per-block Σ x² in double (inf/nan propagate into it); the host adds the block sums.
   Reads 4·n bytes, 2·n double FLOPs. */
static __global__ void mg__k_sumsq(double *partial, const float *x, int64_t n) {
    int64_t i;
    double s = 0.0;
    for (i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * (double)x[i];
    s = mg__block_reduce(s, mg__op_sum(), 0.0);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
/* One block adds n values (doubles: partial sums; floats: per-token losses) in double:
   thread t those at t, t + blockDim, … in order, then the block reduction; *total = the sum,
   or *total += it when accumulate (reads n values, writes one double).                    */
template <class T>
static __global__ void mg__k_sum_into(double *total, const T *x, int64_t n, int accumulate) {
    int64_t i;
    double s = 0.0;
    for (i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
    s = mg__block_reduce(s, mg__op_sum(), 0.0);
    if (threadIdx.x == 0) *total = accumulate ? *total + s : s;
}
/* Fused AdamW over the table's pieces laid end to end. Block b takes the tiles b, b + grid, …
   of MG__ADAMW_TILE indices, a thread 4 neighbouring indices of a tile; its threads find their
   first piece by binary search over begin (no shared memory, no barrier), and a piece's
   constants (the decay factor) are made when a thread enters it. Where the 4 indices lie in
   one piece and its arrays are aligned to them, param, grad, m and v move as 128-bit vectors
   and the 16-bit copy as one 64-bit store (through IO16, the copy's accessor compiled for its
   dtype: bf16, fp16, or the run-time-dtype one for any other); else element by element,
   stepping from piece to piece. Every element's update is the same mg__adamw either way.
   Per element: reads param, grad, m, v (16 bytes), writes param, m, v (+ the 16-bit copy):
   12–14 bytes, ~20 flops — bandwidth-bound. skip: the whole grid returns before touching
   anything.                                                                                 */
#define MG__ADAMW_TILE (4 * MG__CUDA_THREADS)
template <class IO16>
static __global__ void mg__k_adamw_multi(const mg_adamw_piece *table, int n_pieces,
                                         int64_t total, float beta1, float beta2, float eps,
                                         IO16 io16, const mg_adamw_args *args) {
    mg_adamw_args a = *args;
    int64_t t0;
    if (a.skip) return;
    for (t0 = (int64_t)blockIdx.x * MG__ADAMW_TILE; t0 < total;
         t0 += (int64_t)gridDim.x * MG__ADAMW_TILE) {
        int64_t i = t0 + 4 * threadIdx.x, end = t0 + MG__ADAMW_TILE < total ? t0 + MG__ADAMW_TILE : total;
        int lo = 0, hi = n_pieces - 1, c, e;
        const mg_adamw_piece *p;
        mg__adamw_k k;
        int64_t j;
        IO16 o = io16;
        if (i >= end) continue;
        while (lo < hi) {   /* the last piece with begin <= i */
            int mid = (lo + hi + 1) / 2;
            if (table[mid].begin <= i) lo = mid; else hi = mid - 1;
        }
        c = lo;
        p = &table[c];
        j = i - p->begin;
        k = mg__adamw_k_of(&a, beta1, beta2, eps, p->wd_mult, p->lr_group);
        o.p = (decltype(o.p))p->param16;
        if (i + 4 <= end && j + 4 <= p->n && mg__vec_ok(p->param + j, 4, 4) &&
            mg__vec_ok(p->grad + j, 4, 4) && mg__vec_ok(p->m + j, 4, 4) &&
            mg__vec_ok(p->v + j, 4, 4) &&
            /* (the run-time accessor, BYTES 16, stores value by value: any address) */
            (IO16::BYTES == 16 || mg__vec_ok((const char *)p->param16 + j * IO16::BYTES, 4, IO16::BYTES))) {
            float4 w = *(const float4 *)(p->param + j), g = *(const float4 *)(p->grad + j);
            float4 m = *(const float4 *)(p->m + j), v = *(const float4 *)(p->v + j);
            float wv[4];
            w.x = mg__adamw(w.x, g.x, &m.x, &v.x, &k);
            w.y = mg__adamw(w.y, g.y, &m.y, &v.y, &k);
            w.z = mg__adamw(w.z, g.z, &m.z, &v.z, &k);
            w.w = mg__adamw(w.w, g.w, &m.w, &v.w, &k);
            *(float4 *)(p->param + j) = w;
            *(float4 *)(p->m + j) = m;
            *(float4 *)(p->v + j) = v;
            wv[0] = w.x; wv[1] = w.y; wv[2] = w.z; wv[3] = w.w;
            if (o.p) o.template stv<4>(j, wv);
            continue;
        }
        for (e = 0; e < 4 && i + e < end; e++) {
            float w;
            if (i + e >= table[c].begin + table[c].n) {
                while (i + e >= table[c].begin + table[c].n) c++;
                p = &table[c];
                k = mg__adamw_k_of(&a, beta1, beta2, eps, p->wd_mult, p->lr_group);
                o.p = (decltype(o.p))p->param16;
            }
            j = i + e - p->begin;
            w = mg__adamw(p->param[j], p->grad[j], &p->m[j], &p->v[j], &k);
            p->param[j] = w;
            if (o.p) o.st(j, w);
        }
    }
}
#define MG__SUMSQ_BLOCKS 1024
/* Blocks (= partial sums) for n values: enough to fill the GPU, none idle on small pieces. */
static int64_t mg__sumsq_blocks(int64_t n) {
    int64_t b = (n + MG__CUDA_THREADS - 1) / MG__CUDA_THREADS;
    return b < 1 ? 1 : b > MG__SUMSQ_BLOCKS ? MG__SUMSQ_BLOCKS : b;
}

/* --- GEMM: the same column-major arguments, handed to cuBLAS --------------------------------
   cublasGemmEx(handle, transa, transb, m, n, k, &alpha, A, Atype, lda, B, Btype, ldb, &beta,
   C, Ctype, ldc, computeType, algo) takes cblas_sgemm's arguments in cblas_sgemm's order (the
   strided-batched form adds a long long stride after each ld, and the batch count). With
   CUBLAS_COMPUTE_32F, alpha and beta are host floats and (A, B, C) may be (32F, 32F, 32F),
   (16F, 16F, 16F|32F) or (16BF, 16BF, 16BF|32F): the combinations mg__check_gemm allows.    */
static cudaDataType mg__cuda_dtype(mg_dtype dt) {
    return dt == MG_BF16 ? CUDA_R_16BF : dt == MG_F16 ? CUDA_R_16F : CUDA_R_32F;
}
/* k = 0: C = β·C for each m×n matrix of the batch, 0 where β = 0 (C not read), as BLAS and
   OpenBLAS do; cuBLAS's documentation does not state its k = 0 result, so it is not asked.
   Cost: reads (β ≠ 0) and writes m·n·batch·s bytes, 1 FLOP per element.
   The GEMMs themselves (cuBLAS / cuBLASLt): 2·m·n·k·batch FLOPs; bytes (m·k + k·n)·s_ab +
   m·n·s_c (+ m·n·s_c read when β ≠ 0; + m·n·s_c for an aux output or input, + m·s_c for a
   bias): compute bound on tensor cores once m, n, k ≳ 2·peak/bandwidth (~200 on A100,
   ~300 on H100 for 16-bit).                                                                 */
struct mg__f_gemm_beta_only {
    void *C; mg_dtype dt; float beta; int m, n, ldc; int64_t sC;
    __device__ void operator()(int64_t i) const {
        int64_t mn = (int64_t)m * n, b = i / mn, col = i % mn / m, row = i % m;
        int64_t at = b * sC + col * ldc + row;
        mg_store(C, dt, at, beta == 0.0f ? 0.0f : beta * mg_load(C, dt, at));
    }
};
static void mg__cuda_gemm(mg_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                          const void *A, mg_dtype ab_dt, int lda, int64_t sA, const void *B,
                          int ldb, int64_t sB, float beta, void *C, mg_dtype c_dt, int ldc,
                          int64_t sC, int batch) {
    cublasHandle_t h = (cublasHandle_t)ctx->blas;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (k == 0) {
        mg__f_gemm_beta_only f = {C, c_dt, beta, m, n, ldc, sC};
        mg__cuda_map(ctx, (int64_t)m * n * batch, f);
        return;
    }
    if (batch == 1)
        MG_CUBLAS_CHECK(cublasGemmEx(h, opa, opb, m, n, k, &alpha, A, mg__cuda_dtype(ab_dt), lda,
                                     B, mg__cuda_dtype(ab_dt), ldb, &beta, C,
                                     mg__cuda_dtype(c_dt), ldc, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
    else
        MG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
            h, opa, opb, m, n, k, &alpha, A, mg__cuda_dtype(ab_dt), lda, (long long)sA, B,
            mg__cuda_dtype(ab_dt), ldb, (long long)sB, &beta, C, mg__cuda_dtype(c_dt), ldc,
            (long long)sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* --- the fused linear layers: cuBLASLt epilogues, the epilogue kernels -------------------
   The GPT MLP's linear + GELU pair, and a biased linear whose bias epilogue cuBLASLt declines:
   the GEMM writes an fp32 accumulator and these kernels apply the epilogue of 6d's CPU twins
   (the bias added in fp32, each output rounded once), specialised by the storage's accessor IO
   (pre and out, or pre and dpre) and the bias's IB, 4 values per thread (16 bytes of the fp32
   accumulator) where the width and the pointers allow, else one; other dtype mixes through the
   run-time accessor. (The backward with a bias gradient is mg__cuda_colsum_gelu: dGELU and the
   column sums.) Bytes: bias+GELU reads 4 (acc) + s (bias, cached) and writes 2s per element
   (s = storage bytes), ~20 FLOPs; the bias alone writes s, 1 FLOP; dGELU reads 4 + s, writes s
   (4 in place when fp32), ~25 FLOPs.                                                        */
/* A 2-D grid, x over a row's vectors and y over rows (both grid-stride), so no thread divides
   to find its row: a 64-bit division per 4 values was about 17 instructions a value beside
   GELU's ~30, in a pass the H100 ran at half its memory roofline.                          */
template <int V, int GELU, class IO, class IB> __device__ static inline void mg__epi_bias_items(
        const mg__io_f32 &acc, const IB &bias, const IO &pre, const IO &out, int64_t N, int64_t C) {
    const int64_t per_row = C / V;
    int64_t r, j;
    for (r = blockIdx.y; r < N; r += gridDim.y) {
        for (j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < per_row;
             j += (int64_t)gridDim.x * blockDim.x) {
            const int64_t c = j * V, at = r * C + c;
            float v[V], b[V], g[V];
            int e;
            acc.template ldv<V>(at, v);
            if (bias.p) {
                bias.template ldv<V>(c, b);
                for (e = 0; e < V; e++) v[e] += b[e];
            }
            if (GELU) {   /* pre = acc + bias, out = act(pre), act of kind GELU − 1 */
                for (e = 0; e < V; e++) g[e] = mg__act(GELU - 1, v[e]);
                pre.template stv<V>(at, v);
                out.template stv<V>(at, g);
            } else {      /* out = acc + bias */
                out.template stv<V>(at, v);
            }
        }
    }
}
template <int GELU, class IO, class IB> static __global__ void mg__k_epi_bias(
        mg__io_f32 acc, IB bias, IO pre, IO out, int64_t N, int64_t C, int vec) {
    if (vec) mg__epi_bias_items<4, GELU>(acc, bias, pre, out, N, C);
    else mg__epi_bias_items<1, GELU>(acc, bias, pre, out, N, C);
}
template <int ACT, class IO> static __global__ void mg__k_epi_dgelu(mg__io_f32 acc, IO pre,
                                                                    IO dpre, int64_t n, int vec) {
    int64_t nv = vec ? n / 4 : 0, stride = (int64_t)gridDim.x * blockDim.x, i;
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (i = t; i < nv; i += stride) {
        float a[4], x[4];
        int e;
        acc.template ldv<4>(i * 4, a);
        pre.template ldv<4>(i * 4, x);
        for (e = 0; e < 4; e++) a[e] *= mg__act_grad(ACT, x[e]);
        dpre.template stv<4>(i * 4, a);
    }
    for (i = nv * 4 + t; i < n; i += stride) {
        float x = pre.ld(i);
        dpre.st(i, acc.ld(i) * mg__act_grad(ACT, x));
    }
}
/* The launches (N, C > 0): acc [N, C] fp32; pre (NULL without GELU), out (dpre) of one dtype. */
template <int GELU, class IO, class IB> static void mg__epi_bias_launch(mg_ctx *ctx,
        const float *acc, const mg_tensor *bias, const mg_tensor *pre, const mg_tensor *out,
        int64_t N, int64_t C) {
    int vec = C % 4 == 0 && mg__vec_ok(acc, 4, 4) && mg__vec_ok(pre ? pre->data : NULL, 4, IO::BYTES) &&
              mg__vec_ok(out->data, 4, IO::BYTES) &&
              mg__vec_ok(bias ? bias->data : NULL, 4, IB::BYTES);
    int64_t per_row = vec ? C / 4 : C;
    dim3 grid(mg__grid(per_row), (unsigned)(N < 65535 ? N : 65535));   /* y: CUDA's limit */
    MG_LAUNCH(mg__k_epi_bias<GELU>, grid, MG__CUDA_THREADS, 0,
              MG__STREAM(ctx), mg__io_ptr<mg__io_f32>(acc, MG_F32), mg__io_make<IB>(bias),
              mg__io_make<IO>(pre), mg__io_make<IO>(out), N, C, vec);
    MG_CUDA_LAUNCH_CHECK();
}
template <int ACT, class IO> static void mg__epi_dgelu_launch(mg_ctx *ctx, const float *acc,
                                                              const mg_tensor *pre,
                                                              const mg_tensor *dpre) {
    int64_t n = mg_numel(dpre);
    int vec = mg__vec_ok(acc, 4, 4) && mg__vec_ok(pre->data, 4, IO::BYTES) &&
              mg__vec_ok(dpre->data, 4, IO::BYTES);
    MG_LAUNCH(mg__k_epi_dgelu<ACT>, mg__grid(vec ? n / 4 + n % 4 : n), MG__CUDA_THREADS, 0,
              MG__STREAM(ctx), mg__io_ptr<mg__io_f32>(acc, MG_F32), mg__io_make<IO>(pre),
              mg__io_make<IO>(dpre), n, vec);
    MG_CUDA_LAUNCH_CHECK();
}

/* cuBLASLt: one handle per context (created with it; its matmuls use the context's cuBLAS
   workspace, ctx->blas_workspace: one stream, so never both at once), and a table of plans —
   the matmul descriptor, the three matrix layouts and the heuristic's algorithm — keyed by
   everything the heuristic looks at (shape, transposes, leading dimensions, dtypes, epilogue
   and the alignment of each pointer), found once per shape. A shape
   the heuristic rejects is remembered as such (ok = 0) and takes the fallback.                */
#define MG__LT_PLANS 64
typedef struct mg__lt_plan {
    int64_t key[15];
    int ok;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} mg__lt_plan;
typedef struct mg__lt_state {
    cublasLtHandle_t handle;
    int n;
    mg__lt_plan plans[MG__LT_PLANS];
} mg__lt_state;
static void mg__lt_init(mg_ctx *ctx) {
    mg__lt_state *st = (mg__lt_state *)MG_MALLOC(sizeof(mg__lt_state));
    MG_ASSERT(st, "out of host memory");
    memset(st, 0, sizeof *st);
    MG_CUBLAS_CHECK(cublasLtCreate(&st->handle));
    ctx->blaslt = st;
}
static void mg__lt_free(mg_ctx *ctx) {
    mg__lt_state *st = (mg__lt_state *)ctx->blaslt;
    int i;
    if (!st) return;
    for (i = 0; i < st->n; i++) {
        mg__lt_plan *p = &st->plans[i];
        MG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
        MG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
        MG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
        MG_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    }
    MG_CUBLAS_CHECK(cublasLtDestroy(st->handle));
    MG_FREE(st);
    ctx->blaslt = NULL;
}
/* The largest power of two up to 256 that divides the address (what the heuristic assumes). */
static int64_t mg__lt_align(const void *p) {
    int64_t a = 256;
    while (a > 1 && (uintptr_t)p % (uintptr_t)a) a >>= 1;
    return a;
}
static void mg__lt_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                       const void *v, size_t bytes) {
    MG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, v, bytes));
}
/* D(m×n) = op(A)·op(B) + β·D with the epilogue (DEFAULT or BIAS): the GEMM seam's
   column-major arguments (C = D, ldc = ldd). bias: the bias, m values of D's dtype. Returns 0,
   having done nothing, when no plan exists. (The GELU epilogues are not used: see
   mg_linear_gelu_forward and mg_linear_backward_input_gelu.) */
static int mg__lt_matmul(mg_ctx *ctx, int ta, int tb, int m, int n, int k, const void *A,
                         mg_dtype ab_dt, int lda, const void *B, int ldb, float beta, void *D,
                         mg_dtype d_dt, int ldd, cublasLtEpilogue_t epi, const void *bias) {
    mg__lt_state *st = (mg__lt_state *)ctx->blaslt;
    int64_t key[15] = {ta, tb, m, n, k, lda, ldb, ldd, ab_dt, d_dt, (int64_t)epi,
                       mg__lt_align(A), mg__lt_align(B), mg__lt_align(D),
                       bias ? mg__lt_align(bias) : 0};
    mg__lt_plan *p = NULL;
    float alpha = 1.0f;
    int i;
    if (!st) return 0;
    for (i = 0; i < st->n && !p; i++)
        if (!memcmp(st->plans[i].key, key, sizeof key)) p = &st->plans[i];
    if (!p) {
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulHeuristicResult_t res;
        int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        uint32_t e = (uint32_t)epi, al;
        /* split-K partial sums only in fp32: in place when D is fp32, else in the workspace */
        uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                             (d_dt == MG_F32 ? CUBLASLT_REDUCTION_SCHEME_INPLACE : 0);
        uint64_t ws = ctx->blas_workspace_size;
        int found = 0;
        if (st->n == MG__LT_PLANS) return 0;   /* table full: the fallback, uncached */
        p = &st->plans[st->n++];
        memcpy(p->key, key, sizeof key);
        MG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        mg__lt_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
        mg__lt_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
        mg__lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
        if (bias) mg__lt_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, mg__cuda_dtype(ab_dt),
                        (uint64_t)(ta ? k : m), (uint64_t)(ta ? m : k), lda));
        MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, mg__cuda_dtype(ab_dt),
                        (uint64_t)(tb ? n : k), (uint64_t)(tb ? k : n), ldb));
        MG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, mg__cuda_dtype(d_dt), (uint64_t)m,
                                                   (uint64_t)n, ldd));
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                        CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                        CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof reduction));
        al = (uint32_t)key[11];
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
        al = (uint32_t)key[12];
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
        al = (uint32_t)key[13];
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
        /* a refusal (NOT_SUPPORTED, INVALID_VALUE for an epilogue the dtypes do not allow) is
           an answer, not an error: the plan is kept as "no" and the caller falls back */
        p->ok = cublasLtMatmulAlgoGetHeuristic(st->handle, p->desc, p->la, p->lb, p->ld, p->ld,
                                               pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS &&
                found > 0 && res.state == CUBLAS_STATUS_SUCCESS;
        if (p->ok) p->algo = res.algo;
        MG_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    }
    if (!p->ok) return 0;
    if (bias) mg__lt_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    MG_CUBLAS_CHECK(cublasLtMatmul(st->handle, p->desc, &alpha, A, p->la, B, p->lb, &beta, D,
                                   p->ld, D, p->ld, &p->algo, ctx->blas_workspace,
                                   ctx->blas_workspace_size, MG__STREAM(ctx)));
    return 1;
}
#endif /* __CUDACC__ */

/* =============================================================================================
   6f. Public ops: validate shapes and dtypes (shared), then dispatch on ctx->device.
       Row-major / transpose reasoning for linear and attention lives here, above the seam.
   ========================================================================================== */
/* Element `off` of storage p of dtype dt. */
static void *mg__at(const void *p, mg_dtype dt, int64_t off) {
    return (char *)p + off * (int64_t)mg_dtype_size(dt);
}
static void mg__check_int(const char *op, const char *what, int64_t v) {
    if (v < 0 || v > 2147483647)
        mg_fatal(__FILE__, __LINE__, "%s: %s = %lld does not fit a BLAS int", op, what, (long long)v);
}
/* A required tensor (or other argument): NULL is refused before anything reads it.          */
static void mg__need(const char *op, const char *name, const void *arg) {
    if (!arg) mg_fatal(__FILE__, __LINE__, "%s: %s is NULL (required)", op, name);
}
/* A required per-row array of n entries (rowmax, targets, losses …): NULL only when n = 0. */
static void mg__need_rows(const char *op, const char *name, const void *arg, int64_t n) {
    if (!arg && n > 0)
        mg_fatal(__FILE__, __LINE__, "%s: %s is NULL (required: %lld rows)", op, name,
                 (long long)n);
}
static void mg__check_2d(const char *op, const char *name, const mg_tensor *t, int64_t rows,
                         int64_t cols) {
    mg__need(op, name, t);
    if (!t->data && rows * cols > 0)
        mg_fatal(__FILE__, __LINE__, "%s: %s is missing", op, name);
    if (mg_rows(t) != rows || mg_cols(t) != cols)
        mg_fatal(__FILE__, __LINE__, "%s: %s is [%lld, %lld] (as rows x last dim), expected "
                 "[%lld, %lld]", op, name, (long long)mg_rows(t), (long long)mg_cols(t),
                 (long long)rows, (long long)cols);
}
static void mg__check_numel(const char *op, const char *name, const mg_tensor *t, int64_t n) {
    mg__need(op, name, t);
    if (mg_numel(t) != n)
        mg_fatal(__FILE__, __LINE__, "%s: %s has %lld elements, expected %lld", op, name,
                 (long long)mg_numel(t), (long long)n);
}
/* An output that a GEMM writes while it reads `in`: the two must not share memory.          */
static void mg__check_apart(const char *op, const char *out_name, const mg_tensor *out,
                            const char *in_name, const mg_tensor *in) {
    if (mg__ranges_overlap(out->data, mg_nbytes(out), in->data, mg_nbytes(in)))
        mg_fatal(__FILE__, __LINE__, "%s: %s overlaps %s (it is written while %s is read): "
                 "give %s a buffer of its own", op, out_name, in_name, in_name, out_name);
}
static void mg__check_same_dtype(const char *op, const mg_tensor *a, const mg_tensor *b) {
    if (a->dtype != b->dtype)
        mg_fatal(__FILE__, __LINE__, "%s: dtypes %s and %s must match", op,
                 mg_dtype_name(a->dtype), mg_dtype_name(b->dtype));
}

/* --- GEMM seam ------------------------------------------------------------------------------ */
/* The dtype combinations cuBLAS accepts with CUBLAS_COMPUTE_32F: A and B alike; C like them or
   fp32. The CPU backend enforces the same rule so both backends accept the same calls.       */
static void mg__check_gemm(int ta, int tb, int m, int n, int k, mg_dtype a_dt, int lda,
                           mg_dtype b_dt, int ldb, mg_dtype c_dt, int ldc, int batch) {
    int arows = ta ? k : m, brows = tb ? n : k;
    int need_a = arows > 1 ? arows : 1, need_b = brows > 1 ? brows : 1, need_c = m > 1 ? m : 1;
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        mg_fatal(__FILE__, __LINE__, "mg_gemm: negative size (m %d, n %d, k %d, batch %d)", m, n,
                 k, batch);
    (void)mg_dtype_size(a_dt); (void)mg_dtype_size(b_dt); (void)mg_dtype_size(c_dt);
    if (a_dt != b_dt)
        mg_fatal(__FILE__, __LINE__, "mg_gemm: A is %s but B is %s (they must match)",
                 mg_dtype_name(a_dt), mg_dtype_name(b_dt));
    if (c_dt != a_dt && c_dt != MG_F32)
        mg_fatal(__FILE__, __LINE__, "mg_gemm: C is %s but the inputs are %s (C must be the "
                 "inputs' dtype or fp32)", mg_dtype_name(c_dt), mg_dtype_name(a_dt));
    if (lda < need_a || ldb < need_b || ldc < need_c)   /* BLAS: ld >= max(1, rows) */
        mg_fatal(__FILE__, __LINE__, "mg_gemm: leading dimensions lda %d ldb %d ldc %d too small "
                 "(need >= %d, %d, %d)", lda, ldb, ldc, need_a, need_b, need_c);
}
MGDEF void mg_gemm(mg_ctx *ctx, int transa, int transb, int m, int n, int k, float alpha,
                   const void *A, mg_dtype a_dt, int lda, const void *B, mg_dtype b_dt, int ldb,
                   float beta, void *C, mg_dtype c_dt, int ldc) {
    mg_gemm_strided_batched(ctx, transa, transb, m, n, k, alpha, A, a_dt, lda, 0, B, b_dt, ldb,
                            0, beta, C, c_dt, ldc, 0, 1);
}
/* mg_gemm_strided_batched, with CPU-only fusions cpu_epi: NULL, or what mg__cpu_epi lists
   (fp32 values; the added matrix needs an fp32 C); CUDA contexts never get them.            */
static void mg__gemm(mg_ctx *ctx, int transa, int transb, int m, int n, int k, float alpha,
                     const void *A, mg_dtype a_dt, int lda, int64_t strideA, const void *B,
                     mg_dtype b_dt, int ldb, int64_t strideB, float beta,
                     const mg__cpu_epi *cpu_epi, void *C, mg_dtype c_dt, int ldc,
                     int64_t strideC, int batch) {
    mg__check_gemm(transa, transb, m, n, k, a_dt, lda, b_dt, ldb, c_dt, ldc, batch);
    if (m == 0 || n == 0 || batch == 0) return;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg__cuda_gemm(ctx, transa, transb, m, n, k, alpha, A, a_dt, lda, strideA, B, ldb, strideB,
                      beta, C, c_dt, ldc, strideC, batch);
        return;
    }
#endif
    mg__cpu_gemm(ctx, transa, transb, m, n, k, alpha, A, a_dt, lda, strideA, B, ldb, strideB,
                 beta, cpu_epi, C, c_dt, ldc, strideC, batch);
}
MGDEF void mg_gemm_strided_batched(mg_ctx *ctx, int transa, int transb, int m, int n, int k,
                   float alpha, const void *A, mg_dtype a_dt, int lda, int64_t strideA,
                   const void *B, mg_dtype b_dt, int ldb, int64_t strideB, float beta,
                   void *C, mg_dtype c_dt, int ldc, int64_t strideC, int batch) {
    mg__gemm(ctx, transa, transb, m, n, k, alpha, A, a_dt, lda, strideA, B, b_dt, ldb, strideB,
             beta, NULL, C, c_dt, ldc, strideC, batch);
}

/* --- internal dispatchers used by the shared op code --------------------------------------- */
static void mg__map(mg_ctx *ctx, mg__ew_op op, const mg_tensor *out, const mg_tensor *a,
                    const mg_tensor *b, const mg__map_args *args) {
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) { mg__cuda_ew(ctx, op, out, a, b, args); return; }
#endif
    mg__cpu_map(ctx, op, out, a, b, args);
}
static void mg__colsum(mg_ctx *ctx, const mg_tensor *dst, const mg_tensor *src) {
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) { mg__cuda_colsum(ctx, dst, src, NULL, NULL, NULL, NULL); return; }
#endif
    mg__cpu_colsum(ctx, dst, src, NULL, NULL, NULL, NULL);
}
/* Dropout of a local [rows, local_cols] block that sits at (row_offset, col_offset) of a
   global [·, global_cols] tensor: the keep test of element (r, c) uses global index
   (row_offset + r)·global_cols + col_offset + c.                                           */
static void mg__dropout_block(mg_ctx *ctx, const mg_tensor *out, const mg_tensor *inp, float p,
                              uint64_t key, int64_t local_cols, int64_t global_cols,
                              int64_t row_offset, int64_t col_offset) {
    mg__map_args g;
    memset(&g, 0, sizeof g);
    g.key = key;
    g.threshold = mg__dropout_threshold(p);
    g.scale = 1.0f / (1.0f - p);
    g.local_cols = local_cols;
    g.global_cols = global_cols;
    g.row_offset = row_offset;
    g.col_offset = col_offset;
    mg__map(ctx, MG__EW_DROPOUT, out, inp, NULL, &g);
}

/* --- embedding ------------------------------------------------------------------------------ */
static void mg__check_embedding(const char *op, const mg_tensor *x, const int32_t *tokens, int B,
                                int T, int t0, const mg_tensor *wte, const mg_tensor *wpe) {
    int64_t N = mg_rows(x), C = mg_cols(x);
    if (B <= 0 || T <= 0 || t0 < 0 || N % B || t0 + N / B > T || !tokens)
        mg_fatal(__FILE__, __LINE__, "%s: %lld rows with B %d, T %d, t0 %d: need rows = B*T_local "
                 "with t0 + T_local <= T and tokens [B, T]", op, (long long)N, B, T, t0);
    if (wte && mg_cols(wte) != C)
        mg_fatal(__FILE__, __LINE__, "%s: word embedding has %lld columns, activations %lld", op,
                 (long long)mg_cols(wte), (long long)C);
    if (wpe && (mg_cols(wpe) != C || mg_rows(wpe) < t0 + N / B))
        mg_fatal(__FILE__, __LINE__, "%s: position embedding [%lld, %lld] does not cover positions "
                 "%d..%lld of width %lld", op, (long long)mg_rows(wpe), (long long)mg_cols(wpe),
                 t0, (long long)(t0 + N / B - 1), (long long)C);
}
MGDEF void mg_embedding_forward(mg_ctx *ctx, mg_tensor *out, const int32_t *tokens, int B, int T,
                                int t0, const mg_tensor *wte, int64_t vocab_start,
                                const mg_tensor *wpe) {
    if (!wte) mg_fatal(__FILE__, __LINE__, "mg_embedding_forward: wte is NULL");
    mg__check_embedding("mg_embedding_forward", out, tokens, B, T, t0, wte, wpe);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg__embed_geom g = {tokens, mg_rows(out), mg_cols(out), mg_rows(wte), vocab_start, B, T, t0};
#define MG__EMBED_LAUNCH(IO, IA) mg__embed_launch<IO, IA>(ctx, out, wte, wpe, &g)
        if (wpe && wpe->dtype != wte->dtype) MG__EMBED_LAUNCH(mg__io_dyn, mg__io_dyn);
        else MG__IO_PAIR_DISPATCH(out->dtype, wte->dtype, MG__EMBED_LAUNCH);
#undef MG__EMBED_LAUNCH
        return;
    }
#endif
    mg__cpu_embedding_forward(ctx, out, tokens, B, T, t0, wte, vocab_start, wpe);
}
MGDEF void mg_embedding_backward(mg_ctx *ctx, mg_tensor *dwte, mg_tensor *dwpe,
                                 const mg_tensor *dout, const int32_t *tokens, int B, int T,
                                 int t0, int64_t vocab_start) {
    mg__check_embedding("mg_embedding_backward", dout, tokens, B, T, t0, dwte, dwpe);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        int64_t N = mg_rows(dout), Vw = dwte ? mg_rows(dwte) : 0;
        mg__embed_geom g = {tokens, N, mg_cols(dout), Vw, vocab_start, B, T, t0};
        int *sorted = NULL;
#define MG__EMBED_DWTE(IO, IA) mg__embed_backward_launch<IO, IA>(ctx, dwte, dout, sorted, &g)
#define MG__EMBED_DWPE(IO, IA) mg__embed_backward_launch<IO, IA>(ctx, dwpe, dout, NULL, &g)
        if (Vw > 0 && N > 0) {   /* the deterministic scatter-add (see mg__k_embed_add) */
            size_t mark;
            unsigned rows = (unsigned)((N + MG__CUDA_THREADS - 1) / MG__CUDA_THREADS);
            int *other, *hist, *first, passes = 0, pass;
            if (N > INT32_MAX) mg_fatal(__FILE__, __LINE__, "mg_embedding_backward: %lld rows", (long long)N);
            mark = mg_arena_mark(ctx);
            sorted = (int *)mg_alloc(ctx, (size_t)N * sizeof(int));
            other = (int *)mg_alloc(ctx, (size_t)N * sizeof(int));
            hist = (int *)mg_alloc(ctx, (size_t)256 * rows * sizeof(int));
            first = (int *)mg_alloc(ctx, (size_t)256 * rows * sizeof(int));
            while (passes < 8 && (Vw >> (8 * passes)) > 0) passes++;   /* digits of keys ≤ Vw */
            for (pass = 0; pass < passes; pass++) {   /* the last pass writes `sorted` */
                int *dst = (passes - pass) % 2 ? sorted : other;
                const int *src = pass == 0 ? NULL : dst == sorted ? other : sorted;
                MG_LAUNCH(mg__k_embed_radix_hist, rows, MG__CUDA_THREADS, 0, MG__STREAM(ctx), hist,
                          src, tokens, N, B, T, t0, vocab_start, Vw, 8 * pass);
                MG_CUDA_LAUNCH_CHECK();
                MG_LAUNCH(mg__k_exclusive_scan, 1, MG__CUDA_THREADS, 0, MG__STREAM(ctx), first,
                          hist, (int64_t)256 * rows);
                MG_CUDA_LAUNCH_CHECK();
                MG_LAUNCH(mg__k_embed_radix_scatter, rows, MG__CUDA_THREADS, 0, MG__STREAM(ctx), dst,
                          src, first, tokens, N, B, T, t0, vocab_start, Vw, 8 * pass);
                MG_CUDA_LAUNCH_CHECK();
            }
            MG__IO_PAIR_DISPATCH(dwte->dtype, dout->dtype, MG__EMBED_DWTE);
            mg_arena_release(ctx, mark);
        }
        if (dwpe) MG__IO_PAIR_DISPATCH(dwpe->dtype, dout->dtype, MG__EMBED_DWPE);
#undef MG__EMBED_DWTE
#undef MG__EMBED_DWPE
        return;
    }
#endif
    mg__cpu_embedding_backward(ctx, dwte, dwpe, dout, tokens, B, T, t0, vocab_start);
}

/* --- layernorm ------------------------------------------------------------------------------ */
/* The weight a zero-centred norm scales by: 1 + weight, in weight's dtype, from the arena
   (the caller releases it); the weight itself otherwise.                                   */
static const mg_tensor *mg__norm_weight(mg_ctx *ctx, const mg_norm *kind, const mg_tensor *weight,
                                        mg_tensor *scratch) {
    if (!kind->zero_centered) return weight;
    *scratch = mg_tensor_wrap(mg_alloc(ctx, mg_nbytes(weight)), weight->dtype, weight->ndim,
                              weight->shape);
    mg_fill(ctx, scratch, 1.0f);
    mg_add(ctx, scratch, scratch, weight);
    return scratch;
}
MGDEF void mg_norm_forward(mg_ctx *ctx, const mg_norm *kind, mg_tensor *out, float *mean,
                           float *rstd, const mg_tensor *inp, const mg_tensor *weight,
                           const mg_tensor *bias) {
    mg__need("mg_norm_forward", "kind", kind);
    mg__need("mg_norm_forward", "inp", inp);
    const char *op = kind->rms ? "mg_norm_forward (RMSNorm)" : "mg_norm_forward (LayerNorm)";
    int64_t N = mg_rows(inp), C = mg_cols(inp);
    mg__check_2d(op, "out", out, N, C);
    mg__check_numel(op, "weight", weight, C);
    if (bias) mg__check_numel(op, "bias", bias, C);
    if (C <= 0 || !mean || !rstd || (!kind->rms && !bias) || !(kind->eps > 0.0f))
        mg_fatal(__FILE__, __LINE__, "%s: need C > 0, mean and rstd, eps > 0 (%g), and a bias "
                 "for LayerNorm", op, (double)kind->eps);
    size_t mark = mg_arena_mark(ctx);
    mg_tensor one_plus;
    weight = mg__norm_weight(ctx, kind, weight, &one_plus);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (N > 0) mg__cuda_norm_forward(ctx, kind, out, mean, rstd, inp, weight, bias);
        mg_arena_release(ctx, mark);
        return;
    }
#endif
    mg__cpu_layernorm_forward(ctx, kind, out, mean, rstd, inp, weight, bias);
    mg_arena_release(ctx, mark);
}
MGDEF void mg_norm_backward(mg_ctx *ctx, const mg_norm *kind, mg_tensor *dinp, mg_tensor *dweight,
                            mg_tensor *dbias, const mg_tensor *dout, const mg_tensor *inp,
                            const mg_tensor *weight, const float *mean, const float *rstd,
                            int accumulate) {
    mg__need("mg_norm_backward", "kind", kind);
    mg__need("mg_norm_backward", "inp", inp);
    const char *op = kind->rms ? "mg_norm_backward (RMSNorm)" : "mg_norm_backward (LayerNorm)";
    int64_t N = mg_rows(inp), C = mg_cols(inp);
    mg__check_2d(op, "dinp", dinp, N, C);
    mg__check_2d(op, "dout", dout, N, C);
    mg__check_numel(op, "weight", weight, C);
    if (!mean || !rstd) mg_fatal(__FILE__, __LINE__, "%s: mean and rstd are required", op);
    if (dweight) mg__check_numel(op, "dweight", dweight, C);
    if (dbias) mg__check_numel(op, "dbias", dbias, C);
    size_t mark = mg_arena_mark(ctx);
    mg_tensor one_plus;
    weight = mg__norm_weight(ctx, kind, weight, &one_plus);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        /* parameter gradients first: dinp may alias dout */
        if (dweight) mg__cuda_colsum(ctx, dweight, dout, inp, mean, rstd, dbias);   /* one pass */
        else if (dbias) mg__cuda_colsum(ctx, dbias, dout, NULL, NULL, NULL, NULL);
        if (N > 0)
            mg__cuda_norm_backward(ctx, kind->rms, dinp, dout, inp, weight, mean, rstd, accumulate);
        mg_arena_release(ctx, mark);
        return;
    }
#endif
    mg__cpu_layernorm_backward(ctx, kind, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                               accumulate);
    mg_arena_release(ctx, mark);
}
static const mg_norm mg__gpt2_layernorm = {0, MG__LN_EPS, 0};
MGDEF void mg_layernorm_forward(mg_ctx *ctx, mg_tensor *out, float *mean, float *rstd,
                                const mg_tensor *inp, const mg_tensor *weight,
                                const mg_tensor *bias) {
    if (!bias) mg_fatal(__FILE__, __LINE__, "mg_layernorm_forward: bias is required");
    mg_norm_forward(ctx, &mg__gpt2_layernorm, out, mean, rstd, inp, weight, bias);
}
MGDEF void mg_layernorm_backward(mg_ctx *ctx, mg_tensor *dinp, mg_tensor *dweight,
                                 mg_tensor *dbias, const mg_tensor *dout, const mg_tensor *inp,
                                 const mg_tensor *weight, const float *mean, const float *rstd,
                                 int accumulate) {
    mg_norm_backward(ctx, &mg__gpt2_layernorm, dinp, dweight, dbias, dout, inp, weight, mean,
                     rstd, accumulate);
}

/* --- linear ----------------------------------------------------------------------------------
   Row-major X[r, c] is the column-major matrix Xᵀ with leading dimension = its row length.
   So with inp [N, In], weight [Out, In], out [N, Out] (all stored row-major):
     forward  outᵀ (Out×N)  = W (Out×In) · inpᵀ (In×N)      A = weight, op T; B = inp, op N
     dinp     dinpᵀ (In×N)  = Wᵀ (In×Out) · doutᵀ (Out×N)   A = weight, op N; B = dout, op N
     dweight  dWᵀ (In×Out) += inpᵀ (In×N) · dout (N×Out)    A = inp, op N;    B = dout, op T
   (In, Out rather than I, O: <complex.h>, pulled in by cblas.h, defines I.)                  */
/* A weight [Out, In] of at least one feature each way: In and Out are GEMM dimensions whose
   leading dimension BLAS wants >= 1, so an empty weight has no layout (rows N = 0 are fine). */
static void mg__check_features(const char *op, int64_t Out, int64_t In) {
    if (In == 0 || Out == 0)
        mg_fatal(__FILE__, __LINE__, "%s: weight is [%lld, %lld]: a linear layer needs at least "
                 "one input and one output feature", op, (long long)Out, (long long)In);
}
static void mg__check_linear(const char *op, const mg_tensor *x, const mg_tensor *w,
                             const mg_tensor *y) {
    int64_t N = mg_rows(x), In = mg_cols(x), Out = mg_rows(w);
    if (mg_cols(w) != In)
        mg_fatal(__FILE__, __LINE__, "%s: weight is [%lld, %lld] but the input has %lld features",
                 op, (long long)Out, (long long)mg_cols(w), (long long)In);
    mg__check_features(op, Out, In);
    mg__check_2d(op, "output", y, N, Out);
    mg__check_same_dtype(op, x, w);
    mg__check_int(op, "rows", N);
    mg__check_int(op, "in_features", In);
    mg__check_int(op, "out_features", Out);
}
/* The fp32 accumulator of a GEMM whose result goes to t: t itself when fp32, else arena
   scratch of its size.                                                                       */
static float *mg__f32_accumulator(mg_ctx *ctx, const mg_tensor *t) {
    return t->dtype == MG_F32 ? (float *)t->data
                              : (float *)mg_alloc(ctx, (size_t)mg_numel(t) * sizeof(float));
}
/* mg_linear_forward; add (CPU only, fp32 [N, Out] like an fp32 out, or NULL): added to the
   result inside the GEMM (mg__cpu_epi).                                                      */
static void mg__linear_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                               const mg_tensor *weight, const mg_tensor *bias, const float *add) {
    mg__need("mg_linear_forward", "out", out);
    mg__need("mg_linear_forward", "inp", inp);
    mg__need("mg_linear_forward", "weight", weight);
    int N = (int)mg_rows(inp), In = (int)mg_cols(inp), Out = (int)mg_rows(weight);
    size_t mark = mg_arena_mark(ctx);
    mg__cpu_epi epi = {NULL, add, NULL};
    mg__check_linear("mg_linear_forward", inp, weight, out);
    mg__check_apart("mg_linear_forward", "out", out, "inp", inp);
    mg__check_apart("mg_linear_forward", "out", out, "weight", weight);
    if (bias) {
        mg__check_numel("mg_linear_forward", "bias", bias, Out);
#ifdef __CUDACC__
        /* cuBLASLt's BIAS epilogue adds the bias to the fp32 accumulator (bias in D's dtype) */
        if (mg__is_cuda(ctx) && bias->dtype == out->dtype && N > 0 && In > 0 &&
            (out->dtype == inp->dtype || out->dtype == MG_F32) &&
            mg__lt_matmul(ctx, 1, 0, Out, N, In, weight->data, weight->dtype, In, inp->data, In,
                          0.0f, out->data, out->dtype, Out, CUBLASLT_EPILOGUE_BIAS, bias->data))
            return;
        if (mg__is_cuda(ctx)) {   /* the GEMM into fp32, then out = acc + bias rounded once */
            float *acc = mg__f32_accumulator(ctx, out);
            if (N > 0 && Out > 0) {
                mg_gemm(ctx, 1, 0, Out, N, In, 1.0f, weight->data, weight->dtype, In, inp->data,
                        inp->dtype, In, 0.0f, acc, MG_F32, Out);
#define MG__EPI_LAUNCH(IO, IB) mg__epi_bias_launch<0, IO, IB>(ctx, acc, bias, NULL, out, N, Out)
                MG__IO_PAIR_DISPATCH(out->dtype, bias->dtype, MG__EPI_LAUNCH);
#undef MG__EPI_LAUNCH
            }
            mg_arena_release(ctx, mark);
            return;
        }
#endif
        {   /* CPU: the sgemm adds the bias, in fp32, in place of β·C */
            float *b32 = (float *)mg_alloc(ctx, (size_t)Out * sizeof(float));
            mg__cpu_widen(b32, bias->data, bias->dtype, 0, Out);
            epi.bias = b32;
        }
    }
    mg__gemm(ctx, 1, 0, Out, N, In, 1.0f, weight->data, weight->dtype, In, 0, inp->data,
             inp->dtype, In, 0, 0.0f, epi.bias || epi.add ? &epi : NULL, out->data, out->dtype,
             Out, 0, 1);
    mg_arena_release(ctx, mark);
}
MGDEF void mg_linear_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                             const mg_tensor *weight, const mg_tensor *bias) {
    mg__linear_forward(ctx, out, inp, weight, bias, NULL);
}
MGDEF void mg_linear_forward_residual(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                                      const mg_tensor *weight, const mg_tensor *bias,
                                      const mg_tensor *resid) {
    const char *op = "mg_linear_forward_residual";
    mg__check_2d(op, "resid", resid, mg_rows(out), mg_cols(out));
    if (resid->dtype != out->dtype)
        mg_fatal(__FILE__, __LINE__, "%s: resid is %s but out is %s: resid must be a buffer of "
                 "its own of the output's dtype", op, mg_dtype_name(resid->dtype),
                 mg_dtype_name(out->dtype));
    mg__check_apart(op, "out", out, "resid", resid);
    if (!mg__is_cuda(ctx) && out->dtype == MG_F32) {   /* one GEMM: the sum added per tile */
        mg__linear_forward(ctx, out, inp, weight, bias, (const float *)resid->data);
        return;
    }
    mg_linear_forward(ctx, out, inp, weight, bias);
    mg_add(ctx, out, out, resid);
}
MGDEF void mg_linear_backward_input(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *dout,
                                    const mg_tensor *weight, int accumulate) {
    mg__need("mg_linear_backward_input", "dinp", dinp);
    mg__need("mg_linear_backward_input", "dout", dout);
    mg__need("mg_linear_backward_input", "weight", weight);
    int N = (int)mg_rows(dout), Out = (int)mg_cols(dout), In = (int)mg_cols(weight);
    mg__check_linear("mg_linear_backward_input", dinp, weight, dout);
    mg__check_apart("mg_linear_backward_input", "dinp", dinp, "dout", dout);
    mg__check_apart("mg_linear_backward_input", "dinp", dinp, "weight", weight);
    mg_gemm(ctx, 0, 0, In, N, Out, 1.0f, weight->data, weight->dtype, In, dout->data, dout->dtype, Out,
            accumulate ? 1.0f : 0.0f, dinp->data, dinp->dtype, In);
}
MGDEF void mg_linear_backward_weight(mg_ctx *ctx, mg_tensor *dweight, mg_tensor *dbias,
                                     const mg_tensor *dout, const mg_tensor *inp) {
    mg__need("mg_linear_backward_weight", "dweight", dweight);
    mg__need("mg_linear_backward_weight", "dout", dout);
    mg__need("mg_linear_backward_weight", "inp", inp);
    int N = (int)mg_rows(inp), In = (int)mg_cols(inp), Out = (int)mg_cols(dout);
    mg__check_2d("mg_linear_backward_weight", "dout", dout, N, Out);
    mg__check_2d("mg_linear_backward_weight", "dweight", dweight, Out, In);
    mg__check_features("mg_linear_backward_weight", Out, In);
    mg__check_int("mg_linear_backward_weight", "rows", N);
    mg__check_apart("mg_linear_backward_weight", "dweight", dweight, "inp", inp);
    mg__check_apart("mg_linear_backward_weight", "dweight", dweight, "dout", dout);
    size_t mark = mg_arena_mark(ctx);
    mg__cpu_epi epi = {NULL, NULL, NULL};
    if (dbias) mg__check_numel("mg_linear_backward_weight", "dbias", dbias, Out);
    if (dbias && !mg__is_cuda(ctx) && In > 0 && Out > 0) {
        /* CPU: the GEMM sums dout's columns as it reads them (op(B) = dout), then dbias += */
        /* the sums, then Out floats of scratch for a 16-bit dbias in mg__cpu_add_span */
        epi.bsum = (float *)mg_alloc(ctx, 2 * (size_t)Out * sizeof(float));
        memset(epi.bsum, 0, (size_t)Out * sizeof(float));
    }
    mg__gemm(ctx, 0, 1, In, Out, N, 1.0f, inp->data, inp->dtype, In, 0, dout->data, dout->dtype,
             Out, 0, 1.0f, epi.bsum ? &epi : NULL, dweight->data, dweight->dtype, In, 0, 1);
    if (epi.bsum) mg__cpu_add_span(dbias, 0, Out, epi.bsum, epi.bsum + Out);
    else if (dbias) mg__colsum(ctx, dbias, dout);
    mg_arena_release(ctx, mark);
}

/* Linear + GELU and its backward through the GELU (see the API). The GEMMs are the linear
   layer's (forward: A = weight op T, B = inp; backward: A = weight op N, B = dout); cuBLASLt
   runs them with the epilogue where it can, otherwise the GEMM writes an fp32 accumulator — the
   fp32 output itself, or arena scratch — and the epilogue follows as its own pass.            */
static void mg__check_linear_gelu(const char *op, const mg_tensor *a, const mg_tensor *b,
                                  const mg_tensor *bias, int64_t O) {
    mg__check_2d(op, "pre", b, mg_rows(a), mg_cols(a));
    if (a->dtype != b->dtype || (bias && bias->dtype != a->dtype) || a->data == b->data)
        mg_fatal(__FILE__, __LINE__, "%s: the output, the GELU input and the bias must be "
                 "distinct buffers of one dtype", op);
    if (bias) mg__check_numel(op, "bias", bias, O);
}
MGDEF void mg_linear_gelu_forward(mg_ctx *ctx, mg_tensor *out, mg_tensor *pre,
                                  const mg_tensor *inp, const mg_tensor *weight,
                                  const mg_tensor *bias) {
    mg_linear_act_forward(ctx, out, pre, inp, weight, bias, MG_ACT_GELU);
}
MGDEF void mg_linear_act_forward(mg_ctx *ctx, mg_tensor *out, mg_tensor *pre,
                                    const mg_tensor *inp, const mg_tensor *weight,
                                    const mg_tensor *bias, mg_act_kind kind) {
    const char *op = "mg_linear_gelu_forward";
    mg__need(op, "out", out);
    mg__need(op, "pre", pre);
    mg__need(op, "inp", inp);
    mg__need(op, "weight", weight);
    int N = (int)mg_rows(inp), In = (int)mg_cols(inp), Out = (int)mg_rows(weight);
    size_t mark = mg_arena_mark(ctx);
    float *acc;
    mg__check_linear(op, inp, weight, out);
    mg__check_linear_gelu(op, out, pre, bias, Out);
    mg__check_apart(op, "out", out, "inp", inp);
    mg__check_apart(op, "pre", pre, "inp", inp);
    mg__check_apart(op, "out", out, "weight", weight);
    mg__check_apart(op, "pre", pre, "weight", weight);
    if (N == 0 || Out == 0) return;
    /* Both backends: GEMM into fp32, then bias and the exact GELU as one pass (rounding pre and
       out once each). Not cuBLASLt's GELU_AUX(_BIAS) epilogue: on an H100 it was faster (81 µs
       against ~105 µs at N = 8192, 768 → 3072, bf16) but not the same function — its GELU's
       tanh is approximate (6.5e-5 relative from the exact GELU in fp32, against PyTorch) and
       its 16-bit pre-activation was up to 2.1e-2 (relative to the tests' floor) away from the
       fp32 value rounded once, where the CPU twin and PyTorch round once.                      */
    acc = mg__f32_accumulator(ctx, pre);
    mg_gemm(ctx, 1, 0, Out, N, In, 1.0f, weight->data, weight->dtype, In, inp->data, inp->dtype,
            In, 0.0f, acc, MG_F32, Out);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        /* the kernel's GELU template value: 1 + the activation's kind (0: no activation) */
#define MG__EPI_LAUNCH(IO, IB) mg__epi_bias_launch<1, IO, IB>(ctx, acc, bias, pre, out, N, Out)
#define MG__EPI_LAUNCH_ERF(IO, IB) mg__epi_bias_launch<2, IO, IB>(ctx, acc, bias, pre, out, N, Out)
#define MG__EPI_LAUNCH_RELU2(IO, IB) mg__epi_bias_launch<3, IO, IB>(ctx, acc, bias, pre, out, N, Out)
#define MG__EPI_KIND(L)                                                                    \
        if (pre->dtype != out->dtype) L(mg__io_dyn, mg__io_dyn);                           \
        else MG__IO_PAIR_DISPATCH(out->dtype, bias ? bias->dtype : out->dtype, L)
        if (kind == MG_ACT_GELU_ERF) { MG__EPI_KIND(MG__EPI_LAUNCH_ERF); }
        else if (kind == MG_ACT_RELU2) { MG__EPI_KIND(MG__EPI_LAUNCH_RELU2); }
        else { MG__EPI_KIND(MG__EPI_LAUNCH); }
#undef MG__EPI_KIND
#undef MG__EPI_LAUNCH_RELU2
#undef MG__EPI_LAUNCH_ERF
#undef MG__EPI_LAUNCH
    } else
#endif
    mg__cpu_epi_bias_gelu(ctx, acc, N, Out, bias, pre, out, kind);
    mg_arena_release(ctx, mark);
}
MGDEF void mg_linear_backward_input_gelu(mg_ctx *ctx, mg_tensor *dpre, mg_tensor *dbias,
                                         const mg_tensor *dout, const mg_tensor *weight,
                                         const mg_tensor *pre) {
    mg_linear_backward_input_act(ctx, dpre, dbias, dout, weight, pre, MG_ACT_GELU);
}
MGDEF void mg_linear_backward_input_act(mg_ctx *ctx, mg_tensor *dpre, mg_tensor *dbias,
                                           const mg_tensor *dout, const mg_tensor *weight,
                                           const mg_tensor *pre, mg_act_kind kind) {
    const char *op = "mg_linear_backward_input_gelu";
    mg__need(op, "dpre", dpre);
    mg__need(op, "dout", dout);
    mg__need(op, "weight", weight);
    mg__need(op, "pre", pre);
    int N = (int)mg_rows(dout), Out = (int)mg_cols(dout), In = (int)mg_cols(weight);
    size_t mark = mg_arena_mark(ctx);
    int64_t shape[2] = {N, In};
    mg_tensor bg, b32;
    float *acc;
    mg__check_linear(op, dpre, weight, dout);
    mg__check_linear_gelu(op, dpre, pre, NULL, In);
    mg__check_apart(op, "dpre", dpre, "dout", dout);
    mg__check_apart(op, "dpre", dpre, "weight", weight);
    if (dbias) mg__check_numel(op, "dbias", dbias, In);
    if (N == 0 || In == 0) return;
    bg = mg_tensor_wrap(NULL, dpre->dtype, 1, &shape[1]);
    /* Both backends take this path: GEMM into fp32, then the exact dGELU and (with dbias) the
       column sums in one pass (mg__cuda_colsum_gelu; the CPU's epilogue likewise). Not
       cuBLASLt's DGELU / DGELU_BGRAD epilogues: measured on an H100 (N = 8192, 768 → 3072,
       bf16) the fused matmul took 247 µs against 58 µs for the GEMM plus 55 µs for a separate
       dGELU kernel, and its gelu' (an approximate tanh) differs from the exact derivative by up
       to 5.5e-4 relative in fp32 — above the fp32 tolerances of the tests against PyTorch.    */
    acc = mg__f32_accumulator(ctx, dpre);
    mg_gemm(ctx, 0, 0, In, N, Out, 1.0f, weight->data, weight->dtype, In, dout->data, dout->dtype,
            Out, 0.0f, acc, MG_F32, In);
    /* the bias gradient's fp32 sums: Σ_rows of the fp32 dpre */
    b32 = mg_tensor_wrap(dbias ? mg_alloc(ctx, (size_t)In * sizeof(float)) : NULL, MG_F32, 1,
                         &shape[1]);
    if (dbias) mg_memset_zero(ctx, b32.data, (size_t)In * sizeof(float));
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (dbias) {   /* dGELU and the column sums in one pass over the fp32 product */
            mg__colsum_gelu gl = {pre->data, pre->dtype, dpre->data, dpre->dtype, (int)kind};
            mg_tensor acc_t = mg_tensor_wrap(acc, MG_F32, 2, shape);
            mg__cuda_colsum_gelu(ctx, &b32, &acc_t, NULL, NULL, NULL, NULL, gl);
        } else {
#define MG__EPI_DGELU(IO) mg__epi_dgelu_launch<MG_ACT_GELU, IO>(ctx, acc, pre, dpre)
#define MG__EPI_DGELU_ERF(IO) mg__epi_dgelu_launch<MG_ACT_GELU_ERF, IO>(ctx, acc, pre, dpre)
#define MG__EPI_DRELU2(IO) mg__epi_dgelu_launch<MG_ACT_RELU2, IO>(ctx, acc, pre, dpre)
#define MG__EPI_DKIND(L)                                                                   \
            if (pre->dtype != dpre->dtype) L(mg__io_dyn);                                  \
            else MG__IO_DISPATCH(dpre->dtype, L)
            if (kind == MG_ACT_GELU_ERF) { MG__EPI_DKIND(MG__EPI_DGELU_ERF); }
            else if (kind == MG_ACT_RELU2) { MG__EPI_DKIND(MG__EPI_DRELU2); }
            else { MG__EPI_DKIND(MG__EPI_DGELU); }
#undef MG__EPI_DKIND
#undef MG__EPI_DRELU2
#undef MG__EPI_DGELU_ERF
#undef MG__EPI_DGELU
        }
    } else
#endif
    mg__cpu_epi_dgelu(ctx, acc, N, In, pre, dpre, (float *)b32.data,   /* sums in the same pass */
                      (int)kind);
    if (dbias) {   /* Σ_rows of the fp32 dpre, rounded once to dpre's dtype, added to dbias */
        if (bg.dtype != MG_F32) {
            bg.data = mg_alloc(ctx, (size_t)In * mg_dtype_size(bg.dtype));
            mg_cast(ctx, &bg, &b32);
        } else {
            bg = b32;
        }
        mg_axpy(ctx, dbias, 1.0f, &bg);
    }
    mg_arena_release(ctx, mark);
}

/* --- GELU and the other MLP activations --------------------------------------------------- */
MGDEF void mg_gelu_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp) {
    mg_act_forward(ctx, out, inp, MG_ACT_GELU);
}
MGDEF void mg_act_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                          mg_act_kind kind) {
    mg__need("mg_gelu_forward", "inp", inp);
    mg__check_numel("mg_gelu_forward", "out", out, mg_numel(inp));
    mg__map(ctx, kind == MG_ACT_GELU_ERF ? MG__EW_GELU_ERF : kind == MG_ACT_RELU2 ? MG__EW_RELU2
                                                                              : MG__EW_GELU,
            out, inp, NULL, NULL);
}
MGDEF void mg_gelu_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *inp,
                            const mg_tensor *dout) {
    mg_act_backward(ctx, dinp, inp, dout, MG_ACT_GELU);
}
MGDEF void mg_act_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *inp,
                           const mg_tensor *dout, mg_act_kind kind) {
    mg__need("mg_gelu_backward", "inp", inp);
    mg__check_numel("mg_gelu_backward", "dinp", dinp, mg_numel(inp));
    mg__check_numel("mg_gelu_backward", "dout", dout, mg_numel(inp));
    mg__map(ctx, kind == MG_ACT_GELU_ERF ? MG__EW_GELU_ERF_GRAD
                 : kind == MG_ACT_RELU2  ? MG__EW_RELU2_GRAD
                                         : MG__EW_GELU_GRAD,
            dinp, inp, dout, NULL);
}

/* --- causal self-attention core --------------------------------------------------------------
   Batch i = b·nh + h. In qkv [T, B, nh, 3, hd] the matrices Q_i, K_i, V_i (T×hd, row-major)
   start at i·3hd (+0, +hd, +2hd) with row stride ld = B·nh·3hd; out_i starts at i·hd with row
   stride ldo = B·nh·hd; att_i is T×T at i·T². As column-major (Xᶜ = Xᵀ):
     S    = scale·Q·Kᵀ:  Sᵀ = K·Qᵀ          A = K (op T), B = Q (op N), m = n = T, k = hd
     out  = P·V:         outᵀ = Vᵀ·Pᵀ       A = V (N),    B = P (N),    m = hd, n = k = T
     dV   = Pᵀ·dout:     dVᵀ = doutᵀ·P      A = dout (N), B = P (T)
     dP   = dout·Vᵀ:     dPᵀ = V·doutᵀ      A = V (T),    B = dout (N), m = n = T, k = hd
     dQ   = scale·dS·K:  dQᵀ = Kᵀ·dSᵀ       A = K (N),    B = dS (N)
     dK   = scale·dSᵀ·Q: dKᵀ = Qᵀ·dS        A = Q (N),    B = dS (T)
   with dS = softmax_backward(P, dP). Dropout acts on P: out = D(P)·V, dV = D(P)ᵀ·dout,
   dP = D'(dout·Vᵀ), where D masks by the global head index.                                 */
/* Shapes of the attention core over the grouped qkv [T, B, ng, (per + 2)·hd], per = nh/ng.
   A strided-batched GEMM walks batch i = b·ng + g (uniform stride W = (per + 2)·hd in the
   row, ld = B·ng·W between positions); query head j of the group is one such GEMM at column
   offset j·hd, its probabilities at head g·per + j of att [B, nh, T, T] (batch stride per·T²,
   offset j·T²) and its output at out[t, b, g·per + j] (batch stride per·hd, offset j·hd).
   With ng = nh (per = 1) that is one GEMM per product, as plain multi-head attention.      */
typedef struct mg__attn_dims {
    int B, T, nh, ng, per, hd, batch;
    int64_t W, ld, ldo, TT;
    float scale;
} mg__attn_dims;
static mg__attn_dims mg__check_attention(const char *op, const mg_tensor *out, const mg_tensor *att,
                                         const mg_tensor *qkv, int B, int T, int n_head,
                                         int n_group, const mg_attn_dropout *drop) {
    mg__attn_dims d;
    int64_t C3 = mg_cols(qkv);
    if (B <= 0 || T <= 0 || n_head <= 0 || n_group <= 0 || n_head % n_group ||
        C3 % (n_head + 2 * n_group) || mg_rows(qkv) != (int64_t)B * T)
        mg_fatal(__FILE__, __LINE__, "%s: qkv is [%lld, %lld]: expected [B*T = %lld, "
                 "(n_head + 2*n_group)*hd] with n_head = %d, n_group = %d dividing it", op,
                 (long long)mg_rows(qkv), (long long)C3, (long long)B * T, n_head, n_group);
    d.B = B; d.T = T; d.nh = n_head; d.ng = n_group; d.per = n_head / n_group;
    d.hd = (int)(C3 / (n_head + 2 * n_group)); d.batch = B * n_group;
    d.W = (int64_t)(d.per + 2) * d.hd;
    d.ld = (int64_t)B * C3; d.ldo = (int64_t)B * n_head * d.hd; d.TT = (int64_t)T * T;
    d.scale = 1.0f / sqrtf((float)d.hd);
    mg__check_2d(op, "out", out, (int64_t)B * T, (int64_t)n_head * d.hd);
    if (att) {   /* the unfused functions' probabilities */
        mg__check_numel(op, "att", att, (int64_t)B * n_head * d.TT);
        mg__check_same_dtype(op, qkv, att);
    }
    mg__check_same_dtype(op, qkv, out);
    mg__check_int(op, "B*C3", d.ld);
    if (drop && drop->p > 0.0f &&
        (drop->p >= 1.0f || drop->head_offset < 0 || drop->head_offset + n_head > drop->n_head_total))
        mg_fatal(__FILE__, __LINE__, "%s: dropout p %g, heads %d..%d of %d: need 0 <= p < 1 and the "
                 "local heads inside the layer's", op, (double)drop->p, drop->head_offset,
                 drop->head_offset + n_head - 1, drop->n_head_total);
    return d;
}
/* The tiled functions' log-sum-exps: fp32, B·nh·T of them. */
static void mg__check_lse(const char *op, const mg_tensor *lse, const mg__attn_dims *d) {
    mg__check_numel(op, "lse", lse, (int64_t)d->B * d->nh * d->T);
    if (lse->dtype != MG_F32)
        mg_fatal(__FILE__, __LINE__, "%s: lse is %s: the log-sum-exps are fp32", op, mg_dtype_name(lse->dtype));
}
/* D(src) -> dst over att-shaped [B, nh·T²] blocks of the global [B, nh_total·T²]. */
static void mg__attn_dropout(mg_ctx *ctx, const mg_tensor *dst, const mg_tensor *src,
                             const mg__attn_dims *d, const mg_attn_dropout *drop) {
    mg__dropout_block(ctx, dst, src, drop->p, drop->seed, d->nh * d->TT,
                      (int64_t)drop->n_head_total * d->TT, 0, (int64_t)drop->head_offset * d->TT);
}
/* Element offset of query head j's block of att (or datt) and of out (or dout). */
static void *mg__att_at(const mg_tensor *t, const mg__attn_dims *d, int j) {
    return mg__at(t->data, t->dtype, (int64_t)j * d->TT);
}
static void *mg__out_at(const mg_tensor *t, const mg__attn_dims *d, int j) {
    return mg__at(t->data, t->dtype, (int64_t)j * d->hd);
}
MGDEF void mg_attention_forward_gqa(mg_ctx *ctx, mg_tensor *out, mg_tensor *att,
                                    const mg_tensor *qkv, int B, int T, int n_head, int n_group,
                                    const mg_attn_dropout *drop) {
    mg__attn_dims d = mg__check_attention("mg_attention_forward", out, att, qkv, B, T, n_head,
                                          n_group, drop);
    mg_dtype dt = qkv->dtype;
    const void *K = mg__at(qkv->data, dt, (int64_t)d.per * d.hd);
    const void *V = mg__at(qkv->data, dt, (int64_t)(d.per + 1) * d.hd);
    size_t mark = mg_arena_mark(ctx);
    mg_tensor probs = *att;
    int j;
    for (j = 0; j < d.per; j++)   /* S_j = scale·Q_j·Kᵀ for query head j of every group */
        mg_gemm_strided_batched(ctx, 1, 0, T, T, d.hd, d.scale, K, dt, (int)d.ld, d.W,
                                mg__at(qkv->data, dt, (int64_t)j * d.hd), dt, (int)d.ld, d.W,
                                0.0f, mg__att_at(att, &d, j), dt, T, d.per * d.TT, d.batch);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
#define MG__SOFTMAX(IO) MG_LAUNCH(mg__k_causal_softmax<IO>, mg__cuda_row_grid((int64_t)B * n_head * T), \
                                  MG__CUDA_THREADS, 0, MG__STREAM(ctx), mg__io_make<IO>(att), T)
        MG__IO_DISPATCH(dt, MG__SOFTMAX);
#undef MG__SOFTMAX
        MG_CUDA_LAUNCH_CHECK();
    } else
#endif
        mg__cpu_causal_softmax(ctx, att, T);
    if (drop && drop->p > 0.0f) { /* att keeps P for the backward; D(P) goes to scratch */
        probs.data = mg_alloc(ctx, mg_nbytes(att));
        mg__attn_dropout(ctx, &probs, att, &d, drop);
    }
    for (j = 0; j < d.per; j++)   /* O_j = P_j·V */
        mg_gemm_strided_batched(ctx, 0, 0, d.hd, T, T, 1.0f, V, dt, (int)d.ld, d.W,
                                mg__att_at(&probs, &d, j), dt, T, d.per * d.TT, 0.0f,
                                mg__out_at(out, &d, j), out->dtype, (int)d.ldo, d.per * d.hd,
                                d.batch);
    mg_arena_release(ctx, mark);
}
MGDEF void mg_attention_backward_gqa(mg_ctx *ctx, mg_tensor *dqkv, mg_tensor *datt,
                                     const mg_tensor *dout, const mg_tensor *qkv,
                                     const mg_tensor *att, int B, int T, int n_head,
                                     int n_group, const mg_attn_dropout *drop) {
    const char *op = "mg_attention_backward";
    mg__attn_dims d = mg__check_attention(op, dout, att, qkv, B, T, n_head, n_group, drop);
    mg_dtype dt = qkv->dtype;
    int64_t koff = (int64_t)d.per * d.hd, voff = (int64_t)(d.per + 1) * d.hd;
    const void *K = mg__at(qkv->data, dt, koff), *V = mg__at(qkv->data, dt, voff);
    void *dK, *dV;
    float *acc32 = NULL;                               /* dK, dV's fp32 sums (16-bit GQA)  */
    mg_dtype kv_dt = dt;                               /* where dK, dV accumulate: dqkv ... */
    int64_t kv_ld = d.ld, kv_W = d.W;
    size_t mark = mg_arena_mark(ctx);
    int dropping = drop && drop->p > 0.0f, j;
    mg__check_2d(op, "dqkv", dqkv, mg_rows(qkv), mg_cols(qkv));
    mg__check_numel(op, "datt", datt, mg_numel(att));
    mg__check_same_dtype(op, qkv, dqkv);
    mg__check_same_dtype(op, qkv, datt);
    dK = mg__at(dqkv->data, dt, koff); dV = mg__at(dqkv->data, dt, voff);
    /* dK and dV sum over the group's per query heads. In 16-bit storage with per > 1 the sums
       run in an fp32 scratch [T, B, ng, 2·hd] (dK then dV of each (t, b, g): the layout of
       their columns in dqkv, so the same strided GEMMs write it) and are rounded once at the
       end: accumulating β = 1 GEMMs in dqkv itself rounds after every head, and where the
       heads' contributions cancel the result keeps an ulp of the partial sum (a 50-ulp
       difference between the CPU and an H100 was measured). Scratch: 6·T·B·ng·2·hd bytes. */
    if (dt != MG_F32 && d.per > 1) {
        size_t n32 = (size_t)T * (size_t)d.batch * 2 * (size_t)d.hd;
        acc32 = (float *)mg_alloc(ctx, n32 * sizeof(float));
        dK = acc32; dV = acc32 + d.hd; kv_dt = MG_F32; kv_ld = (int64_t)d.batch * 2 * d.hd;
        kv_W = 2 * d.hd;
    }
    /* dV = Σ_j D(P_j)ᵀ·dout_j over the group's query heads (datt holds D(P) meanwhile when
       dropping) */
    if (dropping) mg__attn_dropout(ctx, datt, att, &d, drop);
    for (j = 0; j < d.per; j++)
        mg_gemm_strided_batched(ctx, 0, 1, d.hd, T, T, 1.0f, mg__out_at(dout, &d, j), dt,
                                (int)d.ldo, d.per * d.hd,
                                mg__att_at(dropping ? datt : att, &d, j), dt, T, d.per * d.TT,
                                j ? 1.0f : 0.0f, dV, kv_dt, (int)kv_ld, kv_W, d.batch);
    /* dP_j = D'(dout_j·Vᵀ), then dS = softmax backward, in place in datt */
    for (j = 0; j < d.per; j++)
        mg_gemm_strided_batched(ctx, 1, 0, T, T, d.hd, 1.0f, V, dt, (int)d.ld, d.W,
                                mg__out_at(dout, &d, j), dt, (int)d.ldo, d.per * d.hd, 0.0f,
                                mg__att_at(datt, &d, j), dt, T, d.per * d.TT, d.batch);
    if (dropping) mg__attn_dropout(ctx, datt, datt, &d, drop);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
#define MG__SOFTMAX_BWD(IO) MG_LAUNCH(mg__k_causal_softmax_backward<IO>, \
                                      mg__cuda_row_grid((int64_t)B * n_head * T), MG__CUDA_THREADS, \
                                      0, MG__STREAM(ctx), mg__io_make<IO>(datt), mg__io_make<IO>(att), T)
        MG__IO_DISPATCH(dt, MG__SOFTMAX_BWD);
#undef MG__SOFTMAX_BWD
        MG_CUDA_LAUNCH_CHECK();
    } else
#endif
        mg__cpu_causal_softmax_backward(ctx, datt, att, T);
    /* dQ_j = scale·dS_j·K, dK = Σ_j scale·dS_jᵀ·Q_j */
    for (j = 0; j < d.per; j++)
        mg_gemm_strided_batched(ctx, 0, 0, d.hd, T, T, d.scale, K, dt, (int)d.ld, d.W,
                                mg__att_at(datt, &d, j), dt, T, d.per * d.TT, 0.0f,
                                mg__at(dqkv->data, dt, (int64_t)j * d.hd), dt, (int)d.ld, d.W,
                                d.batch);
    for (j = 0; j < d.per; j++)
        mg_gemm_strided_batched(ctx, 0, 1, d.hd, T, T, d.scale,
                                mg__at(qkv->data, dt, (int64_t)j * d.hd), dt, (int)d.ld, d.W,
                                mg__att_at(datt, &d, j), dt, T, d.per * d.TT, j ? 1.0f : 0.0f,
                                dK, kv_dt, (int)kv_ld, kv_W, d.batch);
    if (acc32) {   /* round once: cast to a contiguous 16-bit copy, then into dqkv's columns */
        int64_t rows = (int64_t)T * d.batch, shape[2] = {rows, 2 * (int64_t)d.hd};
        size_t sz = mg_dtype_size(dt);
        mg_tensor a32 = mg_tensor_wrap(acc32, MG_F32, 2, shape);
        mg_tensor a16 = mg_tensor_wrap(mg_alloc(ctx, (size_t)(rows * shape[1]) * sz), dt, 2, shape);
        mg_cast(ctx, &a16, &a32);
        mg_copy_2d(ctx, mg__at(dqkv->data, dt, koff), (size_t)d.W * sz, a16.data,
                   (size_t)shape[1] * sz, (size_t)shape[1] * sz, (size_t)rows);
    }
    mg_arena_release(ctx, mark);
}
MGDEF void mg_attention_forward(mg_ctx *ctx, mg_tensor *out, mg_tensor *att,
                                const mg_tensor *qkv, int B, int T, int n_head,
                                const mg_attn_dropout *drop) {
    mg_attention_forward_gqa(ctx, out, att, qkv, B, T, n_head, n_head, drop);
}
MGDEF void mg_attention_backward(mg_ctx *ctx, mg_tensor *dqkv, mg_tensor *datt,
                                 const mg_tensor *dout, const mg_tensor *qkv,
                                 const mg_tensor *att, int B, int T, int n_head,
                                 const mg_attn_dropout *drop) {
    mg_attention_backward_gqa(ctx, dqkv, datt, dout, qkv, att, B, T, n_head, n_head, drop);
}

/* --- tiled attention -------------------------------------------------------------------------- */
static mg__attn_geo mg__attn_check_block(mg_ctx *ctx, const char *op, const mg_attn_block *a) {
    mg__attn_geo ge;
    const mg_attn_dropout *drop = a->drop;
    memset(&ge, 0, sizeof ge);
    if (a->B <= 0 || a->Tq < 0 || a->Tk < 0 || a->n_head <= 0 || a->n_group <= 0 ||
        a->n_head % a->n_group || a->hd <= 0 || a->q_pos0 < 0 || a->k_pos0 < 0 ||
        a->q_pos0 + a->Tq > a->T_global || a->k_pos0 + a->Tk > a->T_global)
        mg_fatal(__FILE__, __LINE__, "%s: B %d, Tq %d, Tk %d, n_head %d, n_group %d, hd %d, positions "
                 "%lld and %lld of %lld: need positive sizes, n_group dividing n_head and both blocks "
                 "inside the sequence", op, a->B, a->Tq, a->Tk, a->n_head, a->n_group, a->hd,
                 (long long)a->q_pos0, (long long)a->k_pos0, (long long)a->T_global);
    if (mg__is_cuda(ctx) && a->hd > MG_ATTN_MAX_HD)
        mg_fatal(__FILE__, __LINE__, "%s: head dim %d: the CUDA tiled kernels take at most %d (use "
                 "--attention-backend unfused)", op, a->hd, MG_ATTN_MAX_HD);
    if (drop && drop->p > 0.0f && (drop->p >= 1.0f || drop->head_offset < 0 ||
                                   drop->head_offset + a->n_head > drop->n_head_total))
        mg_fatal(__FILE__, __LINE__, "%s: dropout p %g, heads %d..%d of %d: need 0 <= p < 1 and the "
                 "local heads inside the layer's", op, (double)drop->p, drop->head_offset,
                 drop->head_offset + a->n_head - 1, drop->n_head_total);
    ge.TL = MG_ATTN_TILE; ge.hd = a->hd; ge.per = a->n_head / a->n_group;
    ge.nqt = (a->Tq + MG_ATTN_TILE - 1) / MG_ATTN_TILE;
    ge.nkt = (a->Tk + MG_ATTN_TILE - 1) / MG_ATTN_TILE;
    ge.scale = 1.0f / sqrtf((float)a->hd);
    if (drop && drop->p > 0.0f) {
        ge.drop.on = 1; ge.drop.key = drop->seed;
        ge.drop.threshold = mg__dropout_threshold(drop->p);
        ge.drop.scale = 1.0f / (1.0f - drop->p);
        ge.drop.bh0 = drop->head_offset; ge.drop.nh_total = drop->n_head_total;
        ge.drop.T_g = a->T_global;
    }
    return ge;
}
MGDEF int64_t mg_attn_block_tiles(const mg_attn_block *a) {
    int64_t n = 0;
    int qt;
    for (qt = 0; qt * MG_ATTN_TILE < a->Tq; qt++) {
        int64_t last = (int64_t)qt * MG_ATTN_TILE + MG_ATTN_TILE - 1;
        n += mg__attn_key_tiles(a, a->q_pos0 + (last < a->Tq ? last : a->Tq - 1));
    }
    return n;
}
#ifdef __CUDACC__
/* Opts a kernel into more than the default 48 KiB of dynamic shared memory (once per size). */
#define MG__ATTN_SMEM_OPT_IN(kernel, bytes) do { \
        static size_t granted_ = 48 * 1024; \
        if ((bytes) > granted_) { \
            MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes))); \
            granted_ = (bytes); \
        } \
    } while (0)
#endif
#ifdef __CUDACC__
/* The 64-row kernels' launches: 16-byte loads when every row of a view starts 16-byte aligned. */
static int mg__fa_vec(const mg_attn_view *v) {
    return (uintptr_t)v->data % 16 == 0 && v->ld_t % 8 == 0 && v->ld_b % 8 == 0 &&
           v->ld_g % 8 == 0 && v->ld_h % 8 == 0;
}
/* The family of kernels that runs a tiled-attention call on the GPU, io being the dtype of its
   output (forward) or of dout (backward): 2 the 64-row mma.sync kernels, 1 the 32-row WMMA
   tensor-core kernels, 0 the CUDA-core kernels — the newest that applies, up to the context's
   attn_kernels. The tensor-core families need q, k, v and io of one 16-bit dtype.            */
static int mg__attn_family(const mg_ctx *ctx, const mg_attn_block *a, mg_dtype io) {
    mg_dtype dt = a->q.dtype;
    int tc = (dt == MG_BF16 || dt == MG_F16) && a->k.dtype == dt && a->v.dtype == dt && io == dt;
    if (tc && (a->hd == 64 || a->hd == 128) && ctx->attn_kernels <= MG_ATTN_KERNELS_MMA) return 2;
    if (tc && a->hd % 16 == 0 && ctx->attn_kernels <= MG_ATTN_KERNELS_WMMA) return 1;
    return 0;
}
/* LAUNCH(CFG) for the block's head dim and dtype, CFG a literal (see mg__k_fa_forward). */
#define MG__FA_DISPATCH(LAUNCH) do { \
        switch (a->hd | (a->q.dtype == MG_F16)) { \
        case 64: LAUNCH(64); break; \
        case 65: LAUNCH(65); break; \
        case 128: LAUNCH(128); break; \
        default: LAUNCH(129); break; \
        } \
    } while (0)
/* One launch of the forward (the dQ and dK/dV kernels) for CFG. */
#define MG__FA_FORWARD(CFG) do { \
        size_t smem_ = mg__fa_smem((CFG) & ~1, 0); \
        dim3 grid_((unsigned)((a->Tq + MG__FA_ROWS - 1) / MG__FA_ROWS), (unsigned)(a->B * a->n_head)); \
        MG__ATTN_SMEM_OPT_IN(mg__k_fa_forward<CFG>, smem_); \
        MG_LAUNCH(mg__k_fa_forward<CFG>, grid_, MG__ATTN_THREADS, smem_, MG__STREAM(ctx), *a, \
                  ge.drop, ge.scale, *o, lse, merge, vec); \
    } while (0)
#define MG__FA_BACKWARD(CFG) do { \
        size_t smem_q_ = mg__fa_smem((CFG) & ~1, 1), smem_kv_ = mg__fa_smem((CFG) & ~1, 2); \
        dim3 grid_q_((unsigned)((a->Tq + MG__FA_ROWS - 1) / MG__FA_ROWS), (unsigned)(a->B * a->n_head)); \
        dim3 grid_kv_((unsigned)((a->Tk + MG__FA_ROWS - 1) / MG__FA_ROWS), (unsigned)(a->B * a->n_group)); \
        MG__ATTN_SMEM_OPT_IN(mg__k_fa_backward_dq<CFG>, smem_q_); \
        MG__ATTN_SMEM_OPT_IN(mg__k_fa_backward_dkv<CFG>, smem_kv_); \
        MG_LAUNCH(mg__k_fa_backward_dq<CFG>, grid_q_, MG__ATTN_THREADS, smem_q_, MG__STREAM(ctx), \
                  *a, ge.drop, ge.scale, *dout, lse, delta, *dq, accumulate, vec); \
        MG_CUDA_LAUNCH_CHECK(); \
        MG_LAUNCH(mg__k_fa_backward_dkv<CFG>, grid_kv_, MG__ATTN_THREADS, smem_kv_, MG__STREAM(ctx), \
                  *a, ge.drop, ge.scale, *dout, lse, delta, *dk, *dv, accumulate, vec); \
    } while (0)
#endif
MGDEF void mg_attn_block_forward(mg_ctx *ctx, const mg_attn_block *a, const mg_attn_view *o,
                                 float *lse, int merge) {
    mg__attn_geo ge = mg__attn_check_block(ctx, "mg_attn_block_forward", a);
    if (!a->Tq) return;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        size_t smem = mg__attn_smem(a->hd, 3, 1);
        dim3 grid((unsigned)ge.nqt, (unsigned)(a->B * a->n_head));
        int family = mg__attn_family(ctx, a, o->dtype);
        if (family == 2) {   /* 64-row blocks */
            int vec = mg__fa_vec(&a->q) && mg__fa_vec(&a->k) && mg__fa_vec(&a->v) && mg__fa_vec(o);
            MG__FA_DISPATCH(MG__FA_FORWARD);
            MG_CUDA_LAUNCH_CHECK();
            return;
        }
        if (family == 1) {   /* tensor cores */
            smem = mg__attn_tc_smem(a->hd);
            if (a->q.dtype == MG_BF16) {
                MG__ATTN_SMEM_OPT_IN(mg__k_attn_forward_tc<__nv_bfloat16>, smem);
                MG_LAUNCH(mg__k_attn_forward_tc<__nv_bfloat16>, grid, MG__ATTN_THREADS, smem,
                          MG__STREAM(ctx), *a, ge.drop, ge.scale, *o, lse, merge);
            } else {
                MG__ATTN_SMEM_OPT_IN(mg__k_attn_forward_tc<__half>, smem);
                MG_LAUNCH(mg__k_attn_forward_tc<__half>, grid, MG__ATTN_THREADS, smem,
                          MG__STREAM(ctx), *a, ge.drop, ge.scale, *o, lse, merge);
            }
            MG_CUDA_LAUNCH_CHECK();
            return;
        }
        MG__ATTN_SMEM_OPT_IN(mg__k_attn_forward, smem);
        MG_LAUNCH(mg__k_attn_forward, grid, MG__ATTN_THREADS, smem, MG__STREAM(ctx), *a, ge.drop,
                  ge.scale, *o, lse, merge);
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_attn_forward(ctx, a, &ge, o, lse, merge);
}
MGDEF void mg_attn_delta(mg_ctx *ctx, float *delta, const mg_attn_block *a,
                         const mg_attn_view *dout, const mg_attn_view *o) {
    int64_t rows = (int64_t)a->B * a->n_head * a->Tq;
    (void)mg__attn_check_block(ctx, "mg_attn_delta", a);
    if (!rows) return;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
#define MG__DELTA(IO) MG_LAUNCH(mg__k_attn_delta<IO>, mg__cuda_row_grid((rows + 7) / 8), 256, 0, \
                                MG__STREAM(ctx), delta, *a, *dout, *o)
        if (dout->dtype != o->dtype) MG__DELTA(mg__io_dyn);
        else MG__IO_DISPATCH(o->dtype, MG__DELTA);
#undef MG__DELTA
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_attn_delta(ctx, delta, a, dout, o);
}
MGDEF void mg_attn_block_backward(mg_ctx *ctx, const mg_attn_block *a, const mg_attn_view *dout,
                                  const float *lse, const float *delta, const mg_attn_view *dq,
                                  const mg_attn_view *dk, const mg_attn_view *dv, int accumulate) {
    mg__attn_geo ge = mg__attn_check_block(ctx, "mg_attn_block_backward", a);
    if (!a->Tq || !a->Tk) return;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        size_t smem_q = mg__attn_smem(a->hd, 4, 1), smem_kv = mg__attn_smem(a->hd, 4, 2);
        dim3 grid_q((unsigned)ge.nqt, (unsigned)(a->B * a->n_head));
        dim3 grid_kv((unsigned)ge.nkt, (unsigned)(a->B * a->n_group));
        int family = mg__attn_family(ctx, a, dout->dtype);
        if (family == 2) {   /* 64-row blocks */
            int vec = mg__fa_vec(&a->q) && mg__fa_vec(&a->k) && mg__fa_vec(&a->v) &&
                      mg__fa_vec(dout) && mg__fa_vec(dq) && mg__fa_vec(dk) && mg__fa_vec(dv);
            MG__FA_DISPATCH(MG__FA_BACKWARD);
            MG_CUDA_LAUNCH_CHECK();
            return;
        }
        if (family == 1) {   /* tensor cores */
            smem_q = mg__attn_tc_bwd_smem(a->hd, 0);
            smem_kv = mg__attn_tc_bwd_smem(a->hd, 1);
            if (a->q.dtype == MG_BF16) {
                MG__ATTN_SMEM_OPT_IN(mg__k_attn_backward_dq_tc<__nv_bfloat16>, smem_q);
                MG__ATTN_SMEM_OPT_IN(mg__k_attn_backward_dkv_tc<__nv_bfloat16>, smem_kv);
                MG_LAUNCH(mg__k_attn_backward_dq_tc<__nv_bfloat16>, grid_q, MG__ATTN_THREADS,
                          smem_q, MG__STREAM(ctx), *a, ge.drop, ge.scale, *dout, lse, delta,
                          *dq, accumulate);
                MG_CUDA_LAUNCH_CHECK();
                MG_LAUNCH(mg__k_attn_backward_dkv_tc<__nv_bfloat16>, grid_kv, MG__ATTN_THREADS,
                          smem_kv, MG__STREAM(ctx), *a, ge.drop, ge.scale, *dout, lse, delta,
                          *dk, *dv, accumulate);
            } else {
                MG__ATTN_SMEM_OPT_IN(mg__k_attn_backward_dq_tc<__half>, smem_q);
                MG__ATTN_SMEM_OPT_IN(mg__k_attn_backward_dkv_tc<__half>, smem_kv);
                MG_LAUNCH(mg__k_attn_backward_dq_tc<__half>, grid_q, MG__ATTN_THREADS, smem_q,
                          MG__STREAM(ctx), *a, ge.drop, ge.scale, *dout, lse, delta, *dq,
                          accumulate);
                MG_CUDA_LAUNCH_CHECK();
                MG_LAUNCH(mg__k_attn_backward_dkv_tc<__half>, grid_kv, MG__ATTN_THREADS, smem_kv,
                          MG__STREAM(ctx), *a, ge.drop, ge.scale, *dout, lse, delta, *dk, *dv,
                          accumulate);
            }
            MG_CUDA_LAUNCH_CHECK();
            return;
        }
        MG__ATTN_SMEM_OPT_IN(mg__k_attn_backward_dq, smem_q);
        MG__ATTN_SMEM_OPT_IN(mg__k_attn_backward_dkv, smem_kv);
        MG_LAUNCH(mg__k_attn_backward_dq, grid_q, MG__ATTN_THREADS, smem_q, MG__STREAM(ctx), *a, ge.drop, ge.scale, *dout, lse,
                  delta, *dq, accumulate);
        MG_CUDA_LAUNCH_CHECK();
        MG_LAUNCH(mg__k_attn_backward_dkv, grid_kv, MG__ATTN_THREADS, smem_kv, MG__STREAM(ctx), *a, ge.drop, ge.scale, *dout, lse,
                  delta, *dk, *dv, accumulate);
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_attn_backward(ctx, a, &ge, dout, lse, delta, dq, dk, dv, accumulate);
}
/* The local attention as one block: the grouped qkv's views (query head j of group g at column
   g·W + j·hd, the key at g·W + per·hd, the value after it) and out's (head h at h·hd). */
static mg_attn_view mg__qkv_view(const mg_tensor *t, const mg__attn_dims *d, int64_t col) {
    mg_attn_view v;
    v.data = mg__at(t->data, t->dtype, col); v.dtype = t->dtype;
    v.ld_t = d->ld; v.ld_b = d->ld / d->B; v.ld_g = d->W; v.ld_h = d->hd;
    return v;
}
static mg_attn_view mg__heads_view(const mg_tensor *t, const mg__attn_dims *d) {
    mg_attn_view v;
    v.data = t->data; v.dtype = t->dtype;
    v.ld_t = d->ldo; v.ld_b = d->ldo / d->B; v.ld_g = (int64_t)d->per * d->hd; v.ld_h = d->hd;
    return v;
}
static mg_attn_block mg__local_block(const mg_tensor *qkv, const mg__attn_dims *d,
                                     const mg_attn_dropout *drop) {
    mg_attn_block a;
    memset(&a, 0, sizeof a);
    a.B = d->B; a.Tq = a.Tk = d->T; a.n_head = d->nh; a.n_group = d->ng; a.hd = d->hd;
    a.q = mg__qkv_view(qkv, d, 0);
    a.k = mg__qkv_view(qkv, d, (int64_t)d->per * d->hd);
    a.v = mg__qkv_view(qkv, d, (int64_t)(d->per + 1) * d->hd);
    a.T_global = d->T;
    a.drop = drop;
    return a;
}
MGDEF void mg_flash_attention_forward(mg_ctx *ctx, mg_tensor *out, mg_tensor *lse,
                                      const mg_tensor *qkv, int B, int T, int n_head, int n_group,
                                      const mg_attn_dropout *drop) {
    const char *op = "mg_flash_attention_forward";
    mg__attn_dims d = mg__check_attention(op, out, NULL, qkv, B, T, n_head, n_group, drop);
    mg_attn_block a = mg__local_block(qkv, &d, drop);
    mg_attn_view o = mg__heads_view(out, &d);
    mg__check_lse(op, lse, &d);
    mg_attn_block_forward(ctx, &a, &o, (float *)lse->data, 0);
}
MGDEF void mg_flash_attention_backward(mg_ctx *ctx, mg_tensor *dqkv, const mg_tensor *dout,
                                       const mg_tensor *out, const mg_tensor *lse,
                                       const mg_tensor *qkv, int B, int T, int n_head,
                                       int n_group, const mg_attn_dropout *drop) {
    const char *op = "mg_flash_attention_backward";
    mg__attn_dims d = mg__check_attention(op, out, NULL, qkv, B, T, n_head, n_group, drop);
    mg_attn_block a = mg__local_block(qkv, &d, drop);
    mg_attn_view o = mg__heads_view(out, &d), dO, dq, dk, dv;
    size_t mark = mg_arena_mark(ctx);
    float *delta = (float *)mg_alloc(ctx, (size_t)B * n_head * T * sizeof(float));
    mg__check_lse(op, lse, &d);
    mg__check_2d(op, "dout", dout, mg_rows(out), mg_cols(out));
    mg__check_same_dtype(op, out, dout);
    mg__check_2d(op, "dqkv", dqkv, mg_rows(qkv), mg_cols(qkv));
    mg__check_same_dtype(op, qkv, dqkv);
    dO = mg__heads_view(dout, &d);
    dq = mg__qkv_view(dqkv, &d, 0);
    dk = mg__qkv_view(dqkv, &d, (int64_t)d.per * d.hd);
    dv = mg__qkv_view(dqkv, &d, (int64_t)(d.per + 1) * d.hd);
    mg_attn_delta(ctx, delta, &a, &dO, &o);
    mg_attn_block_backward(ctx, &a, &dO, (const float *)lse->data, delta, &dq, &dk, &dv, 0);
    mg_arena_release(ctx, mark);
}

/* --- rotary embedding, SwiGLU --------------------------------------------------------------- */
MGDEF void mg_rope_table(float *cos_sin, int n_pos, int rot_dim, const mg_rope *rope) {
    int h = rot_dim / 2, i, p;
    for (i = 0; i < h; i++) {
        /* fp32 as transformers: base^(2i/d) with the exponent in fp32, then its inverse */
        float inv = 1.0f / powf(rope->base, (float)(2 * i) / (float)rot_dim);
        if (rope->llama3) {   /* transformers' _compute_llama3_parameters, in fp32 */
            float low_wl = (float)rope->original_max_pos / rope->low_freq_factor;
            float high_wl = (float)rope->original_max_pos / rope->high_freq_factor;
            float wl = 2.0f * 3.14159265358979323846f / inv;
            if (wl > low_wl) {
                inv = inv / rope->factor;
            } else if (!(wl < high_wl)) {   /* medium: interpolate */
                float smooth = ((float)rope->original_max_pos / wl - rope->low_freq_factor) /
                               (rope->high_freq_factor - rope->low_freq_factor);
                inv = (1.0f - smooth) * inv / rope->factor + smooth * inv;
            }
        }
        if (rope->linear_factor > 0) inv = inv / rope->linear_factor;   /* positions / F */
        for (p = 0; p < n_pos; p++) {
            float angle = (float)p * inv;
            cos_sin[((size_t)p * h + i) * 2] = (float)cos((double)angle);
            cos_sin[((size_t)p * h + i) * 2 + 1] = (float)sin((double)angle);
        }
    }
}
static void mg__rope(mg_ctx *ctx, const char *op, mg_tensor *qkv, int B, int nh, int ng,
                     int rot, int t0, const float *cos_sin, float sign) {
    int64_t C3 = mg_cols(qkv), hd;
    if (B <= 0 || nh <= 0 || ng <= 0 || nh % ng || C3 % (nh + 2 * ng) || mg_rows(qkv) % B ||
        t0 < 0 || !cos_sin)
        mg_fatal(__FILE__, __LINE__, "%s: qkv [%lld, %lld] with B = %d, %d heads in %d groups, "
                 "t0 = %d: need B | rows, groups | heads, (heads + 2·groups) | cols, t0 >= 0 and "
                 "a table", op, (long long)mg_rows(qkv), (long long)C3, B, nh, ng, t0);
    hd = C3 / (nh + 2 * ng);
    if (rot <= 0 || rot % 2 || rot > hd)
        mg_fatal(__FILE__, __LINE__, "%s: %d rotary dims of a %lld-wide head: need an even "
                 "number in 2 … %lld", op, rot, (long long)hd, (long long)hd);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg__rope_geom g = {mg_rows(qkv), C3, B, nh / ng, (int)hd, rot / 2, nh + ng, t0, cos_sin, sign};
#define MG__ROPE_LAUNCH(IO) mg__rope_launch<IO>(ctx, qkv, &g)
        MG__IO_DISPATCH(qkv->dtype, MG__ROPE_LAUNCH);
#undef MG__ROPE_LAUNCH
        return;
    }
#endif
    mg__cpu_rope(ctx, qkv, B, nh, ng, rot, t0, cos_sin, sign);
}
MGDEF void mg_rope_forward(mg_ctx *ctx, mg_tensor *qkv, int B, int n_head, int n_group,
                           int rot_dim, int t0, const float *cos_sin) {
    mg__rope(ctx, "mg_rope_forward", qkv, B, n_head, n_group, rot_dim, t0, cos_sin, 1.0f);
}
MGDEF void mg_rope_backward(mg_ctx *ctx, mg_tensor *dqkv, int B, int n_head, int n_group,
                            int rot_dim, int t0, const float *cos_sin) {
    mg__rope(ctx, "mg_rope_backward", dqkv, B, n_head, n_group, rot_dim, t0, cos_sin, -1.0f);
}
MGDEF void mg_swiglu_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *gate,
                             const mg_tensor *up) {
    mg__need("mg_swiglu_forward", "out", out);
    mg__check_numel("mg_swiglu_forward", "gate", gate, mg_numel(out));
    mg__check_numel("mg_swiglu_forward", "up", up, mg_numel(out));
    mg__map(ctx, MG__EW_SWIGLU, out, gate, up, NULL);
}
MGDEF void mg_swiglu_backward(mg_ctx *ctx, mg_tensor *dgate, mg_tensor *dup,
                              const mg_tensor *dout, const mg_tensor *gate, const mg_tensor *up) {
    const char *op = "mg_swiglu_backward";
    mg__need(op, "dout", dout);
    int64_t n = mg_numel(dout);
    mg__check_numel(op, "dgate", dgate, n);
    mg__check_numel(op, "dup", dup, n);
    mg__check_numel(op, "gate", gate, n);
    mg__check_numel(op, "up", up, n);
    if (dgate->data == dup->data || dgate->data == gate->data || dgate->data == up->data ||
        dup->data == gate->data || dup->data == up->data)
        mg_fatal(__FILE__, __LINE__, "%s: dgate and dup must be two buffers apart from gate "
                 "and up", op);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg_dtype dt = dout->dtype;
#define MG__SWIGLU_LAUNCH(IO) mg__swiglu_backward_launch<IO>(ctx, n, dgate, dup, dout, gate, up)
        if (dgate->dtype != dt || dup->dtype != dt || gate->dtype != dt || up->dtype != dt)
            MG__SWIGLU_LAUNCH(mg__io_dyn);
        else
            MG__IO_DISPATCH(dt, MG__SWIGLU_LAUNCH);
#undef MG__SWIGLU_LAUNCH
        return;
    }
#endif
    mg__cpu_swiglu_backward(ctx, dgate, dup, dout, gate, up);
}

/* --- elementwise ---------------------------------------------------------------------------- */
MGDEF void mg_add(mg_ctx *ctx, mg_tensor *out, const mg_tensor *a, const mg_tensor *b) {
    mg__need("mg_add", "out", out);
    mg__check_numel("mg_add", "a", a, mg_numel(out));
    mg__check_numel("mg_add", "b", b, mg_numel(out));
    mg__map(ctx, MG__EW_ADD, out, a, b, NULL);
}
MGDEF void mg_axpy(mg_ctx *ctx, mg_tensor *y, float alpha, const mg_tensor *x) {
    mg__map_args g;
    mg__need("mg_axpy", "y", y);
    mg__check_numel("mg_axpy", "x", x, mg_numel(y));
    memset(&g, 0, sizeof g);
    g.alpha = alpha;
    mg__map(ctx, MG__EW_AXPY, y, y, x, &g);
}
MGDEF void mg_scale(mg_ctx *ctx, mg_tensor *x, float alpha) {
    mg__map_args g;
    mg__need("mg_scale", "x", x);
    memset(&g, 0, sizeof g);
    g.alpha = alpha;
    mg__map(ctx, MG__EW_SCALE, x, x, NULL, &g);
}
MGDEF void mg_fill(mg_ctx *ctx, mg_tensor *x, float value) {
    mg__map_args g;
    mg__need("mg_fill", "x", x);
    memset(&g, 0, sizeof g);
    g.alpha = value;
    mg__map(ctx, MG__EW_FILL, x, NULL, NULL, &g);
}
MGDEF void mg_cast(mg_ctx *ctx, mg_tensor *dst, const mg_tensor *src) {
    mg__need("mg_cast", "dst", dst);
    mg__check_numel("mg_cast", "src", src, mg_numel(dst));
    if (dst->dtype == src->dtype) mg_copy(ctx, dst->data, src->data, mg_nbytes(dst));
    else mg__map(ctx, MG__EW_COPY, dst, src, NULL, NULL);
}

/* --- dropout -------------------------------------------------------------------------------- */
MGDEF uint64_t mg_dropout_key(uint64_t seed, uint64_t site, uint64_t microbatch) {
    mg__philox4 w = mg__philox4x32(seed, (uint32_t)site, (uint32_t)(site >> 32),
                                   (uint32_t)microbatch, (uint32_t)(microbatch >> 32));
    return (uint64_t)w.x[0] | ((uint64_t)w.x[1] << 32);
}
static void mg__dropout_op(mg_ctx *ctx, const char *op, mg_tensor *out, const mg_tensor *inp,
                        float p, uint64_t key, int64_t row_offset) {
    mg__need(op, "input", inp);
    int64_t cols = mg_cols(inp);
    mg__check_numel(op, "output", out, mg_numel(inp));
    if (!(p >= 0.0f && p < 1.0f) || row_offset < 0)
        mg_fatal(__FILE__, __LINE__, "%s: p = %g, row_offset %lld: need 0 <= p < 1 and "
                 "row_offset >= 0", op, (double)p, (long long)row_offset);
    if (p == 0.0f) { mg_cast(ctx, out, inp); return; }
    if (cols > 0) mg__dropout_block(ctx, out, inp, p, key, cols, cols, row_offset, 0);
}
MGDEF void mg_dropout_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp, float p,
                              uint64_t key, int64_t row_offset) {
    mg__dropout_op(ctx, "mg_dropout_forward", out, inp, p, key, row_offset);
}
MGDEF void mg_dropout_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *dout, float p,
                               uint64_t key, int64_t row_offset) {
    mg__dropout_op(ctx, "mg_dropout_backward", dinp, dout, p, key, row_offset);
}

/* --- vocabulary-slice cross-entropy --------------------------------------------------------- */
static int64_t mg__check_xent(const char *op, const mg_tensor *logits, int64_t vocab_start,
                              int64_t vocab_size) {
    mg__need(op, "logits", logits);
    if (vocab_start < 0 || vocab_size <= 0)
        mg_fatal(__FILE__, __LINE__, "%s: vocab_start %lld, vocab_size %lld: need >= 0 and > 0", op,
                 (long long)vocab_start, (long long)vocab_size);
    return mg__xent_real_cols(vocab_start, vocab_size, mg_cols(logits));
}
MGDEF void mg_xent_max(mg_ctx *ctx, float *rowmax, const mg_tensor *logits,
                       int64_t vocab_start, int64_t vocab_size) {
    int64_t nreal = mg__check_xent("mg_xent_max", logits, vocab_start, vocab_size);
    mg__need_rows("mg_xent_max", "rowmax", rowmax, mg_rows(logits));
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (mg_rows(logits) == 0) return;
#define MG__XENT_MAX(IL, vec) MG_LAUNCH(mg__k_xent_max, mg__cuda_row_grid(mg_rows(logits)), \
                                       MG__CUDA_THREADS, 0, MG__STREAM(ctx), rowmax, \
                                       mg__io_make<IL>(logits), mg_cols(logits), nreal, vec)
        MG__XENT_DISPATCH(logits, MG__XENT_MAX);
#undef MG__XENT_MAX
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_xent_max(ctx, rowmax, logits, nreal);
}
static void mg__xent_stats(mg_ctx *ctx, const char *op, float *sumexp, float *tlogit,
                           const mg_tensor *logits, const int32_t *targets, float *rowmax,
                           int64_t vocab_start, int64_t vocab_size, int local_max) {
    int64_t nreal = mg__check_xent(op, logits, vocab_start, vocab_size);
    mg__need_rows(op, "sumexp", sumexp, mg_rows(logits));
    mg__need_rows(op, "tlogit", tlogit, mg_rows(logits));
    mg__need_rows(op, "targets", targets, mg_rows(logits));
    mg__need_rows(op, "rowmax", rowmax, mg_rows(logits));
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (mg_rows(logits) == 0) return;
#define MG__XENT_SUMEXP(IL, vec) MG_LAUNCH(mg__k_xent_sumexp, mg__cuda_row_grid(mg_rows(logits)), \
                                          MG__CUDA_THREADS, 0, MG__STREAM(ctx), sumexp, tlogit, \
                                          mg__io_make<IL>(logits), targets, rowmax, \
                                          mg_cols(logits), nreal, vocab_start, local_max, vec)
        MG__XENT_DISPATCH(logits, MG__XENT_SUMEXP);
#undef MG__XENT_SUMEXP
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_xent_sumexp(ctx, sumexp, tlogit, logits, targets, rowmax, vocab_start, nreal,
                        local_max);
}
MGDEF void mg_xent_sumexp(mg_ctx *ctx, float *sumexp, float *tlogit, const mg_tensor *logits,
                          const int32_t *targets, const float *rowmax, int64_t vocab_start,
                          int64_t vocab_size) {   /* rowmax is only read (local_max 0) */
    mg__xent_stats(ctx, "mg_xent_sumexp", sumexp, tlogit, logits, targets, (float *)rowmax,
                   vocab_start, vocab_size, 0);
}
MGDEF void mg_xent_partial(mg_ctx *ctx, float *rowmax, float *sumexp, float *tlogit,
                           const mg_tensor *logits, const int32_t *targets, int64_t vocab_start,
                           int64_t vocab_size) {
    mg__xent_stats(ctx, "mg_xent_partial", sumexp, tlogit, logits, targets, rowmax, vocab_start,
                   vocab_size, 1);
}
MGDEF void mg_xent_rescale(mg_ctx *ctx, float *sumexp, const float *rowmax, const float *M,
                           int64_t N) {
    int64_t r;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg__f_xent_rescale f = {sumexp, rowmax, M};
        mg__cuda_map(ctx, N, f);
        return;
    }
#endif
    (void)ctx;
    for (r = 0; r < N; r++) sumexp[r] = mg__xent_rescale(sumexp[r], rowmax[r], M[r]);
}
/* The loss step; targets NULL: every row counts (mg_xent_loss), else a row whose target is
   negative (ignored) gets loss 0 exactly (the fused classifier).                             */
static void mg__xent_loss_rows(mg_ctx *ctx, float *losses, const float *rowmax,
                               const float *sumexp, const float *tlogit, const int32_t *targets,
                               int64_t N) {
    int64_t r;
    mg__need_rows("mg_xent_loss", "losses", losses, N);
    mg__need_rows("mg_xent_loss", "rowmax", rowmax, N);
    mg__need_rows("mg_xent_loss", "sumexp", sumexp, N);
    mg__need_rows("mg_xent_loss", "tlogit", tlogit, N);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg__f_xent_loss f = {losses, rowmax, sumexp, tlogit, targets};
        mg__cuda_map(ctx, N, f);
        return;
    }
#endif
    (void)ctx;
    for (r = 0; r < N; r++)
        losses[r] = targets && targets[r] < 0 ? 0.0f : mg__xent_loss(rowmax[r], sumexp[r], tlogit[r]);
}
MGDEF void mg_xent_loss(mg_ctx *ctx, float *losses, const float *rowmax, const float *sumexp,
                        const float *tlogit, int64_t N) {
    mg__xent_loss_rows(ctx, losses, rowmax, sumexp, tlogit, NULL, N);
}
/* dloss_at non-NULL: dloss is read there (by the kernel on CUDA); either way it is then
   multiplied by scale (1 for the public ops: the same bits).                               */
static void mg__xent_backward(mg_ctx *ctx, mg_tensor *dlogits, const mg_tensor *logits,
                              const int32_t *targets, const float *rowmax, const float *sumexp,
                              float dloss, const float *dloss_at, float scale,
                              int64_t vocab_start, int64_t vocab_size) {
    int64_t nreal = mg__check_xent("mg_xent_backward", logits, vocab_start, vocab_size);
    mg__check_2d("mg_xent_backward", "dlogits", dlogits, mg_rows(logits), mg_cols(logits));
    mg__need_rows("mg_xent_backward", "targets", targets, mg_rows(logits));
    mg__need_rows("mg_xent_backward", "rowmax", rowmax, mg_rows(logits));
    mg__need_rows("mg_xent_backward", "sumexp", sumexp, mg_rows(logits));
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (mg_rows(logits) == 0) return;
        /* dlogits compiled for the logits' dtype, or 16-bit beside fp32 logits; else both
           through the run-time accessor */
#define MG__XENT_BWD(ID, IL, vec) MG_LAUNCH(mg__k_xent_backward, mg__cuda_row_grid(mg_rows(logits)), \
                                            MG__CUDA_THREADS, 0, MG__STREAM(ctx), \
                                            mg__io_make<ID>(dlogits), mg__io_make<IL>(logits), targets, \
                                            rowmax, sumexp, dloss, dloss_at, scale, mg_cols(logits), nreal, \
                                            vocab_start, vec)
        mg_dtype ld = logits->dtype, dd = dlogits->dtype;
        int vec = mg__xent_vec(logits) && mg__xent_vec(dlogits);
        if (ld == MG_F32 && dd == MG_F32) MG__XENT_BWD(mg__io_f32, mg__io_f32, vec);
        else if (ld == MG_F32 && dd == MG_BF16) MG__XENT_BWD(mg__io_bf16, mg__io_f32, vec);
        else if (ld == MG_F32 && dd == MG_F16) MG__XENT_BWD(mg__io_f16, mg__io_f32, vec);
        else if (ld == MG_BF16 && dd == MG_BF16) MG__XENT_BWD(mg__io_bf16, mg__io_bf16, vec);
        else if (ld == MG_F16 && dd == MG_F16) MG__XENT_BWD(mg__io_f16, mg__io_f16, vec);
        else MG__XENT_BWD(mg__io_dyn, mg__io_dyn, 0);
#undef MG__XENT_BWD
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_xent_backward(ctx, dlogits, logits, targets, rowmax, sumexp,
                          (dloss_at ? *dloss_at : dloss) * scale, vocab_start, nreal);
}
MGDEF void mg_xent_backward(mg_ctx *ctx, mg_tensor *dlogits, const mg_tensor *logits,
                            const int32_t *targets, const float *rowmax, const float *sumexp,
                            float dloss, int64_t vocab_start, int64_t vocab_size) {
    mg__xent_backward(ctx, dlogits, logits, targets, rowmax, sumexp, dloss, NULL, 1.0f,
                      vocab_start, vocab_size);
}
MGDEF void mg_xent_backward_at(mg_ctx *ctx, mg_tensor *dlogits, const mg_tensor *logits,
                               const int32_t *targets, const float *rowmax, const float *sumexp,
                               const float *dloss, int64_t vocab_start, int64_t vocab_size) {
    mg__xent_backward(ctx, dlogits, logits, targets, rowmax, sumexp, 0.0f, dloss, 1.0f,
                      vocab_start, vocab_size);
}

/* --- fused, chunked classifier ---------------------------------------------------------------
   Scratch: the chunk's fp32 logits [R, Vs]; with 16-bit x their 16-bit gradient [R, Vs]; the
   row statistics [4, R] (slice max, merged max M, Σexp, target logit), each 256-aligned.
   Per chunk: 1 GEMM (2·R·C·Vs FLOPs) and one read of the logits for the loss; training adds
   one read + one write of them (dlogits) and 2 GEMMs (dx, dw: 4·R·C·Vs FLOPs).             */
static size_t mg__classifier_align(size_t b) { return (b + 255) & ~(size_t)255; }
static size_t mg__classifier_grad_bytes(int64_t R, int64_t Vs, mg_dtype dt) {
    return dt == MG_F32 ? 0 : mg__classifier_align((size_t)(R * Vs) * mg_dtype_size(dt));
}
MGDEF size_t mg_classifier_scratch_bytes(int64_t chunk_rows, int64_t Vs, mg_dtype dt) {
    return mg__classifier_align((size_t)(chunk_rows * Vs) * sizeof(float)) +
           mg__classifier_grad_bytes(chunk_rows, Vs, dt) +
           mg__classifier_align((size_t)(4 * chunk_rows) * sizeof(float));
}
MGDEF int64_t mg_classifier_chunk_rows(int64_t N, int64_t Vs, mg_dtype dt, size_t max_bytes) {
    /* the bytes per row, less the alignment (under 256 bytes for each of the three parts),
       give a first guess within a row or two of the answer */
    int64_t per_row = Vs * (int64_t)(sizeof(float) + (dt == MG_F32 ? 0 : mg_dtype_size(dt))) +
                      4 * (int64_t)sizeof(float);
    int64_t R = max_bytes > 3 * 256 ? (int64_t)((max_bytes - 3 * 256) / (size_t)per_row) : 1;
    if (N < 1) N = 1;
    R = R < 1 ? 1 : R > N ? N : R;
    while (R < N && mg_classifier_scratch_bytes(R + 1, Vs, dt) <= max_bytes) R++;
    while (R > 1 && mg_classifier_scratch_bytes(R, Vs, dt) > max_bytes) R--;
    return R;
}
MGDEF void mg_classifier_fused(mg_ctx *ctx, const mg_classifier *c) {
    const char *op = "mg_classifier_fused";
    int64_t N, Vs, R = c->chunk_rows, r0;
    mg_dtype dt;
    char *base = (char *)c->scratch;
    float *logits32, *stats;
    void *grad16;
    if (!c->x || !c->w || c->x->ndim != 2)
        mg_fatal(__FILE__, __LINE__, "%s: x must be a 2-D [N, C] tensor and w given", op);
    N = mg_rows(c->x);
    Vs = mg_rows(c->w);
    dt = c->x->dtype;
    if (R < 1 || !c->scratch)
        mg_fatal(__FILE__, __LINE__, "%s: chunk_rows %lld, scratch %s: need >= 1 row and "
                 "mg_classifier_scratch_bytes of scratch", op, (long long)R,
                 c->scratch ? "given" : "NULL");
    if (c->dx) mg__check_2d(op, "dx", c->dx, N, mg_cols(c->x));
    logits32 = (float *)base;
    grad16 = base + mg__classifier_align((size_t)(R * Vs) * sizeof(float));
    stats = (float *)((char *)grad16 + mg__classifier_grad_bytes(R, Vs, dt));
    for (r0 = 0; r0 < N; r0 += R) {
        int64_t n = N - r0 < R ? N - r0 : R, shape[2];
        const int32_t *tg = c->targets + r0;
        float *mloc = stats, *M = stats + R, *S = stats + 2 * R, *TL = S + n;
        mg_tensor xc = mg_tensor_rows(c->x, r0, n), logits, dlogits;
        shape[0] = n;
        shape[1] = Vs;
        logits = mg_tensor_wrap(logits32, MG_F32, 2, shape);
        mg_linear_forward(ctx, &logits, &xc, c->w, NULL);
        mg_xent_partial(ctx, c->merge ? mloc : M, S, TL, &logits, tg, c->vocab_start,
                        c->vocab_size);
        if (c->merge) {    /* slices: the max first, then the sums moved to it */
            mg_copy(ctx, M, mloc, (size_t)n * sizeof(float));
            c->merge(c->merge_user, M, n, 1);
            mg_xent_rescale(ctx, S, mloc, M, n);
            c->merge(c->merge_user, S, 2 * n, 0);
        }
        if (c->losses) mg__xent_loss_rows(ctx, c->losses + r0, M, S, TL, tg, n);
        if (!c->dx && !c->dw) continue;
        dlogits = dt == MG_F32 ? logits : mg_tensor_wrap(grad16, dt, 2, shape);
        mg__xent_backward(ctx, &dlogits, &logits, tg, M, S, c->dloss, c->dloss_at,
                          c->dloss_scale != 0.0f ? c->dloss_scale : 1.0f, c->vocab_start,
                          c->vocab_size);
        if (c->dx) {
            mg_tensor dxc = mg_tensor_rows(c->dx, r0, n);
            mg_linear_backward_input(ctx, &dxc, &dlogits, c->w, 0);
        }
        if (c->dw) mg_linear_backward_weight(ctx, c->dw, NULL, &dlogits, &xc);
    }
}

/* --- optimizer and norms -------------------------------------------------------------------- */
MGDEF void mg_adamw_step(mg_ctx *ctx, float *param, const float *grad, float *m, float *v,
                         int64_t n, const mg_adamw_hparams *hp, float grad_scale,
                         void *param16, mg_dtype dt16) {
    /* the fused AdamW with one piece: {param, grad, m, v, param16, n, begin, wd_mult} */
    mg_adamw_piece piece = {param, grad, m, v, param16, n, 0, 1.0f, 0};
    mg_adamw_args a;
    if (hp->step < 1 || n < 0)
        mg_fatal(__FILE__, __LINE__, "mg_adamw_step: step %d (counts from 1), n %lld", hp->step,
                 (long long)n);
    if (param16) (void)mg_dtype_size(dt16);
    mg_adamw_args_set(&a, hp->lr, hp->step, hp->beta1, hp->beta2);
    a.weight_decay = hp->weight_decay;
    a.grad_scale = grad_scale;
    a.skip = 0;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {   /* the kernel reads its table and arguments from device memory */
        size_t mark = mg_arena_mark(ctx);
        mg_adamw_piece *table = (mg_adamw_piece *)mg_alloc(ctx, sizeof piece);
        mg_adamw_args *args = (mg_adamw_args *)mg_alloc(ctx, sizeof a);
        mg_copy_to_device(ctx, table, &piece, sizeof piece);
        mg_copy_to_device(ctx, args, &a, sizeof a);
        mg_adamw_multi(ctx, table, 1, n, hp->beta1, hp->beta2, hp->eps, dt16, args);
        mg_arena_release(ctx, mark);   /* later users of the bytes queue behind the kernel */
        return;
    }
#endif
    mg_adamw_multi(ctx, &piece, 1, n, hp->beta1, hp->beta2, hp->eps, dt16, &a);
}
MGDEF int64_t mg_adamw_table_begin(mg_adamw_piece *table, int n_pieces) {
    int64_t total = 0;
    int i;
    for (i = 0; i < n_pieces; i++) {
        table[i].begin = total;
        total += table[i].n;
    }
    return total;
}
MGDEF void mg_adamw_multi(mg_ctx *ctx, const mg_adamw_piece *table, int n_pieces, int64_t total,
                          float beta1, float beta2, float eps, mg_dtype dt16,
                          const mg_adamw_args *args) {
    (void)mg_dtype_size(dt16);
    if (n_pieces < 0 || total < 0)
        mg_fatal(__FILE__, __LINE__, "mg_adamw_multi: %d pieces, %lld values", n_pieces,
                 (long long)total);
    if (!n_pieces || !total) return;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        int64_t blocks = (total + MG__ADAMW_TILE - 1) / MG__ADAMW_TILE;
        if (blocks > 65536) blocks = 65536;
#define MG__ADAMW_LAUNCH(IO16) MG_LAUNCH(mg__k_adamw_multi, (unsigned)blocks, MG__CUDA_THREADS, 0, \
                                         MG__STREAM(ctx), table, n_pieces, total, beta1, beta2, \
                                         eps, mg__io_ptr<IO16>(NULL, dt16), args)
        if (dt16 == MG_BF16) MG__ADAMW_LAUNCH(mg__io_bf16);
        else if (dt16 == MG_F16) MG__ADAMW_LAUNCH(mg__io_f16);
        else MG__ADAMW_LAUNCH(mg__io_dyn);
#undef MG__ADAMW_LAUNCH
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_adamw_multi(ctx, table, n_pieces, beta1, beta2, eps, dt16, args);
}
MGDEF int64_t mg_sumsq_slots(const mg_ctx *ctx, int64_t n) {
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) return mg__sumsq_blocks(n);
#endif
    (void)ctx;
    (void)n;
    return 1;
}
MGDEF void mg_sumsq_begin(mg_ctx *ctx, mg_sumsq_batch *b, int64_t slots) {
    b->mark = mg_arena_mark(ctx);
    b->cap = slots;
    b->used = 0;
    b->partial = (double *)mg_alloc(ctx, (size_t)(slots > 0 ? slots : 1) * sizeof(double));
}
MGDEF void mg_sumsq_add(mg_ctx *ctx, mg_sumsq_batch *b, const float *x, int64_t n) {
    int64_t k = mg_sumsq_slots(ctx, n);
    if (b->used + k > b->cap)
        mg_fatal(__FILE__, __LINE__, "mg_sumsq_add: %lld partial sums past the %lld reserved "
                 "(mg_sumsq_begin with the pieces' mg_sumsq_slots)", (long long)(b->used + k),
                 (long long)b->cap);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {   /* queued: the partials stay on the device until mg_sumsq_end */
        MG_LAUNCH(mg__k_sumsq, (unsigned)k, MG__CUDA_THREADS, 0, MG__STREAM(ctx),
                  b->partial + b->used, x, n);
        MG_CUDA_LAUNCH_CHECK();
        b->used += k;
        return;
    }
#endif
    b->partial[b->used++] = mg__cpu_sumsq(ctx, x, n);
}
MGDEF double mg_sumsq_end(mg_ctx *ctx, mg_sumsq_batch *b, int *nonfinite) {
    double s = 0.0, *host = b->partial;
    int64_t i;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx) && b->used) {
        host = (double *)MG_MALLOC((size_t)b->used * sizeof(double));
        MG_ASSERT(host, "out of host memory");
        mg_copy_to_host(ctx, host, b->partial, (size_t)b->used * sizeof(double));
    }
#endif
    for (i = 0; i < b->used; i++) s += host[i];
    if (host != b->partial) MG_FREE(host);
    mg_arena_release(ctx, b->mark);
    if (nonfinite) *nonfinite = !isfinite(s);
    return s;
}
MGDEF void mg_sumsq_end_device(mg_ctx *ctx, mg_sumsq_batch *b, double *total) {
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        MG_LAUNCH(mg__k_sum_into, 1, MG__CUDA_THREADS, 0, MG__STREAM(ctx), total,
                  (const double *)b->partial, b->used, 0);
        MG_CUDA_LAUNCH_CHECK();
        mg_arena_release(ctx, b->mark);
        return;
    }
#endif
    *total = mg_sumsq_end(ctx, b, NULL);
}
MGDEF void mg_sum_f32_device(mg_ctx *ctx, const float *x, int64_t n, double *acc) {
    double s = 0.0;
    int64_t i;
    if (n < 0) mg_fatal(__FILE__, __LINE__, "mg_sum_f32_device: n %lld", (long long)n);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        MG_LAUNCH(mg__k_sum_into, 1, MG__CUDA_THREADS, 0, MG__STREAM(ctx), acc, x, n, 1);
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    (void)ctx;
    for (i = 0; i < n; i++) s += x[i];
    *acc += s;
}
MGDEF double mg_sumsq(mg_ctx *ctx, const float *x, int64_t n, int *nonfinite) {
    double s;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {   /* a batch of one piece: the kernel, one copy back */
        mg_sumsq_batch b;
        mg_sumsq_begin(ctx, &b, mg_sumsq_slots(ctx, n));
        mg_sumsq_add(ctx, &b, x, n);
        return mg_sumsq_end(ctx, &b, nonfinite);
    }
#endif
    s = mg__cpu_sumsq(ctx, x, n);
    if (nonfinite) *nonfinite = !isfinite(s);
    return s;
}

#endif /* MG_TENSOR_IMPLEMENTED */
#endif /* MG_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 The megatron.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
*/
