/* mg_tensor.h — memory, tensors and every math op of a GPT layer, forward and backward,
   on a CPU backend (OpenBLAS + OpenMP) and a CUDA backend (cuBLAS + kernels).
   Part of megatron.h. Public domain-style MIT license at the end of the file.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_tensor.h"
   Every other file includes it without the define. Define MG_STATIC as well to make every
   function static (private to that translation unit).

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
     4. The GEMM seam: BLAS column-major arguments, passed unchanged to cblas_sgemm (CPU) or
        cublasGemmEx / cublasGemmStridedBatchedEx (CUDA). All row-major reasoning lives above it.
     5. Ops, each forward beside its backward, shapes stated once per op:
        embedding · layernorm · linear (forward, backward-input, backward-weight) · GELU ·
        causal attention core · residual add / scale / axpy · dropout · casts ·
        vocabulary-slice softmax cross-entropy · AdamW · sum of squares.
     6. Implementation (under MG_IMPLEMENTATION): 6a errors, context, arena, copies · 6b dtypes
        and tensors · 6c the shared per-element/per-row math (MG_HD functions: exp, GELU,
        layernorm, softmax gradient, cross-entropy, dropout test, AdamW) · 6d the CPU backend
        (OpenMP over rows/chunks/column blocks, `omp simd` inner loops, OpenBLAS) · 6e the CUDA
        backend (kernels, then launchers; one pair of block-reduction helpers) · 6f the public
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

/* ---------------------------------------------------------------------------------------------
   2. Context
   ------------------------------------------------------------------------------------------ */
typedef enum { MG_DEVICE_AUTO = 0, MG_DEVICE_CPU = 1, MG_DEVICE_CUDA = 2 } mg_device;

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
                             that it is counted; blas_workspace_size bytes                   */
    size_t blas_workspace_size;
    size_t *blocks;       /* arena offsets of the live mg_alloc blocks, in order (a stack:
                             release pops those at or above the mark); n_blocks of cap_blocks */
    int64_t n_blocks, cap_blocks;
} mg_ctx;

MGDEF void mg_ctx_init(mg_ctx *ctx, const mg_ctx_desc *desc);
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
      CPU: cblas_sgemm(CblasColMajor, ...) (16-bit inputs are widened to fp32 in arena scratch
      first: the products are exact in fp32, as with cuBLAS's fp32 compute; a 16-bit C is
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
   non-NULL, into dwpe. The CPU adds rows in order (deterministic); CUDA uses atomic adds into
   dwte, so rows sharing a token add in arbitrary order (fp32-rounding nondeterminism).      */
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
   mg_layernorm_* are LayerNorm with eps 1e-5 (GPT-2's).                                       */
typedef struct mg_norm { int rms; float eps; } mg_norm;
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
   times and data-parallel reduction can start per layer.                                     */
MGDEF void mg_linear_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                             const mg_tensor *weight, const mg_tensor *bias);
MGDEF void mg_linear_backward_input(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *dout,
                                    const mg_tensor *weight, int accumulate);
MGDEF void mg_linear_backward_weight(mg_ctx *ctx, mg_tensor *dweight, mg_tensor *dbias,
                                     const mg_tensor *dout, const mg_tensor *inp);

/* GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). Same shapes.
   backward: dinp = dout · gelu'(inp) (OVERWRITE; dinp may alias dout).                         */
MGDEF void mg_gelu_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp);
MGDEF void mg_gelu_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *inp,
                            const mg_tensor *dout);

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
} mg_rope;
/* Host table for mg_rope_forward: cos_sin[(p·h + i)·2 + {0,1}] = cos, sin of θ = p·inv_freq_i
   (the angle rounded to fp32 as the reference's fp32 product, cos/sin then in double and
   rounded once), for positions p < n_pos.                                                    */
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
   Three steps, with the merge between them done by the caller (an all-reduce across slices):
     1. mg_xent_max:    rowmax[r]  = max over the slice's real ids          -> merge by MAX
     2. mg_xent_sumexp: sumexp[r]  = Σ exp(logit - rowmax[r]) (rowmax = merged global max)
                        tlogit[r]  = logit of targets[r] if it is in the slice, else 0
                                                                                -> merge by SUM
     3. mg_xent_loss:   losses[r]  = log(sumexp[r]) + rowmax[r] - tlogit[r]
        mg_xent_backward: dlogits = (softmax - onehot(target)) · dloss  (padding -> 0);
                          dlogits may alias logits.
   With one slice (no merge) this is the ordinary cross-entropy.
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
               (dtype dt16) of param; the piece's weight decay; begin = Σ n of the pieces
               before it (mg_adamw_table_begin fills it), total = Σ n of all.
     args      lr, the bias corrections step_size = lr/(1−β1^step) and bc2_sqrt = √(1−β2^step)
               (mg_adamw_args_set), grad_scale (clipping and the loss scale divided out), and
               skip: nonzero leaves everything unchanged (an fp16 overflow step).
   Each element is mg_adamw_step's, with the same numbers. CPU: the pieces in order, each as
   mg_adamw_step runs it. CUDA: each block takes tiles of 4·256 consecutive indices of the
   pieces laid end to end ([0, total)), finds the tile's first piece by binary search over
   begin and walks on into the next pieces; one launch of at most 65536 blocks.            */
typedef struct mg_adamw_piece {
    float *param; const float *grad; float *m, *v; void *param16;
    int64_t n, begin;
    float weight_decay;
} mg_adamw_piece;
typedef struct mg_adamw_args {
    float lr, step_size, bc2_sqrt, grad_scale;
    int skip;
} mg_adamw_args;
MG_HD static inline void mg_adamw_args_set(mg_adamw_args *a, float lr, int64_t step, float beta1,
                                           float beta2) {
    a->lr = lr;
    a->step_size = (float)(lr / (1.0 - pow((double)beta1, (double)step)));
    a->bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, (double)step));
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
   evaluation, so a loop over a row can use all four words (see the CPU dropout).              */
MG_HD static inline uint32_t mg_rand_u32(uint64_t key, uint64_t index) {
    uint64_t c = index >> 2;
    return mg__philox4x32(key, (uint32_t)c, (uint32_t)(c >> 32), 0, 0).x[index & 3];
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
#ifdef MG_IMPLEMENTATION
#ifndef MG_TENSOR_IMPLEMENTED
#define MG_TENSOR_IMPLEMENTED

#include <stdarg.h>
#include <stdio.h>
#include <float.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <cblas.h>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cublas_v2.h>
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
/* Every CUDA / cuBLAS call is checked; a failure names the call, file and line. */
#define MG_CUDA_CHECK(call) do { cudaError_t mg__e = (call); if (mg__e != cudaSuccess) \
    mg_fatal(__FILE__, __LINE__, "CUDA error %s (%s) in %s", cudaGetErrorName(mg__e), \
             cudaGetErrorString(mg__e), #call); } while (0)
#define MG_CUBLAS_CHECK(call) do { cublasStatus_t mg__s = (call); \
    if (mg__s != CUBLAS_STATUS_SUCCESS) mg_fatal(__FILE__, __LINE__, "cuBLAS error %s in %s", \
             cublasGetStatusString(mg__s), #call); } while (0)
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

/* AUTO -> MG_DEVICE environment variable (cpu|cuda|auto) -> CUDA if built by nvcc and a GPU
   answers, else CPU. An explicit CUDA request without CUDA is an error, not a silent CPU run. */
static mg_device mg__resolve_device(mg_device want) {
    if (want == MG_DEVICE_AUTO) {
        const char *env = getenv("MG_DEVICE");
        if (env && env[0]) {
            if (!strcmp(env, "cpu")) want = MG_DEVICE_CPU;
            else if (!strcmp(env, "cuda")) want = MG_DEVICE_CUDA;
            else if (strcmp(env, "auto"))
                mg_fatal(__FILE__, __LINE__, "MG_DEVICE=%s: expected cpu, cuda or auto", env);
        }
    }
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

#define MG__ARENA_ALIGN 256

MGDEF void mg_ctx_init(mg_ctx *ctx, const mg_ctx_desc *desc) {
    mg_ctx_desc d;
    memset(ctx, 0, sizeof *ctx);
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    ctx->device = mg__resolve_device(d.device);
    if (d.n_threads < 0) mg_fatal(__FILE__, __LINE__, "n_threads %d < 0", d.n_threads);
#ifdef _OPENMP
    ctx->n_threads = d.n_threads ? d.n_threads : omp_get_max_threads();
#else
    ctx->n_threads = 1;
#endif
    /* GEMMs are parallelised by the library (OpenMP over the batch or over blocks of C), each
       thread calling a single-threaded OpenBLAS: one thread pool, none oversubscribed.    */
    if (ctx->device == MG_DEVICE_CPU) openblas_set_num_threads(1);
    ctx->arena_size = d.arena_bytes;
    if (ctx->device == MG_DEVICE_CPU) {
        if (d.arena_bytes) {
            /* Over-allocate, align the base, and keep the raw pointer just below it. */
            char *raw = (char *)MG_MALLOC(d.arena_bytes + MG__ARENA_ALIGN + sizeof(void *));
            uintptr_t base;
            if (!raw) mg_fatal(__FILE__, __LINE__, "cannot allocate an arena of %zu bytes",
                               d.arena_bytes);
            base = ((uintptr_t)(raw + sizeof(void *)) + MG__ARENA_ALIGN - 1) &
                   ~(uintptr_t)(MG__ARENA_ALIGN - 1);
            ctx->arena = (char *)base;
            ((void **)ctx->arena)[-1] = raw;
        }
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
    }
#endif
}

MGDEF void mg_ctx_free(mg_ctx *ctx) {
    if (ctx->device == MG_DEVICE_CPU) {
        if (ctx->arena) MG_FREE(((void **)ctx->arena)[-1]);
    }
#ifdef __CUDACC__
    else {
        /* let queued work that uses the arena finish first (and report its errors here) */
        if (ctx->stream) MG_CUDA_CHECK(cudaStreamSynchronize(MG__STREAM(ctx)));
        if (ctx->arena) MG_CUDA_CHECK(cudaFree(ctx->arena));
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
MGDEF void mg_copy(mg_ctx *ctx, void *dst_dev, const void *src_dev, size_t bytes) {
    uintptr_t d = (uintptr_t)dst_dev, s = (uintptr_t)src_dev;
    if (d != s && d < s + bytes && s < d + bytes)
        mg_fatal(__FILE__, __LINE__, "mg_copy: %zu bytes from %p to %p: the ranges overlap "
                 "(they must be equal or disjoint)", bytes, src_dev, dst_dev);
    mg__copy(ctx, dst_dev, src_dev, bytes, 3);
}
MGDEF void mg_memset_zero(mg_ctx *ctx, void *dst_dev, size_t bytes) {
    if (!bytes) return;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        MG_CUDA_CHECK(cudaMemsetAsync(dst_dev, 0, bytes, MG__STREAM(ctx)));
        return;
    }
#endif
    (void)ctx;
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
    (void)mg_dtype_size(dt);
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            mg_fatal(__FILE__, __LINE__, "tensor dim %d is %lld (< 0)", i, (long long)shape[i]);
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
static uint32_t mg__dropout_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
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

/* AdamW element, torch.optim.AdamW's order: decay, moments, bias-corrected step.
   step_size = lr/(1−β1^t) and bc2_sqrt = √(1−β2^t) are computed once per step
   (mg_adamw_args_set), the decay factor 1 − lr·wd once per piece (mg__adamw_k_of).         */
typedef struct mg__adamw_k {
    float lr, beta1, beta2, eps, decay_factor /* 1 − lr·wd */, step_size, bc2_sqrt, grad_scale;
} mg__adamw_k;
MG_HD static inline mg__adamw_k mg__adamw_k_of(const mg_adamw_args *a, float beta1, float beta2,
                                               float eps, float weight_decay) {
    mg__adamw_k k;
    k.lr = a->lr; k.beta1 = beta1; k.beta2 = beta2; k.eps = eps;
    k.decay_factor = (float)(1.0 - (double)a->lr * weight_decay);
    k.step_size = a->step_size;
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
   6d. CPU backend: OpenMP over rows / chunks / columns, OpenBLAS (single-threaded) for GEMMs.
       fp32 tensors are used in place; 16-bit tensors are widened to fp32 rows or chunks, the
       same fp32 code runs, and results are rounded back (one code path for the math).
   ========================================================================================== */
#ifdef _OPENMP
#define MG__TID() omp_get_thread_num()
#else
#define MG__TID() 0
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
/* One sgemm of the batch, on OpenBLAS's calling thread (OpenBLAS is set single-threaded at
   context init; parallelism is ours, so only one thread pool ever spins).                    */
static void mg__cpu_sgemm1(int ta, int tb, int m, int n, int k, float alpha, const float *A,
                           int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
/* Batched fp32 GEMM. Many matrices (batch >= threads): OpenMP over the batch. Few large ones:
   each GEMM is split into per-thread blocks of C's columns (or rows when C is tall), which
   only repeats the packing of the shared operand.                                            */
static void mg__cpu_sgemm(mg_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                          const float *A, int lda, int64_t sA, const float *B, int ldb, int64_t sB,
                          float beta, float *C, int ldc, int64_t sC, int batch) {
    int nt = ctx->n_threads, i;
    double flops = 2.0 * m * n * k * batch;
    if (nt <= 1 || flops < 2.0 * 64 * 64 * 64) {
        for (i = 0; i < batch; i++)
            mg__cpu_sgemm1(ta, tb, m, n, k, alpha, A + i * sA, lda, B + i * sB, ldb, beta,
                           C + i * sC, ldc);
    } else if (batch >= nt) {
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (i = 0; i < batch; i++)
            mg__cpu_sgemm1(ta, tb, m, n, k, alpha, A + i * sA, lda, B + i * sB, ldb, beta,
                           C + i * sC, ldc);
    } else {
        int split_n = n >= m, len = split_n ? n : m, parts = nt, b;
        for (b = 0; b < batch; b++) {
            const float *Ab = A + b * sA, *Bb = B + b * sB;
            float *Cb = C + b * sC;
            #pragma omp parallel for num_threads(nt) schedule(static)
            for (i = 0; i < parts; i++) {
                int lo = (int)((int64_t)len * i / parts), hi = (int)((int64_t)len * (i + 1) / parts);
                if (hi <= lo) continue;
                if (split_n) /* columns lo..hi of C and of op(B) */
                    mg__cpu_sgemm1(ta, tb, m, hi - lo, k, alpha, Ab, lda,
                                   Bb + (tb ? (int64_t)lo : (int64_t)lo * ldb), ldb, beta,
                                   Cb + (int64_t)lo * ldc, ldc);
                else         /* rows lo..hi of C and of op(A) */
                    mg__cpu_sgemm1(ta, tb, hi - lo, n, k, alpha,
                                   Ab + (ta ? (int64_t)lo * lda : (int64_t)lo), lda, Bb, ldb,
                                   beta, Cb + lo, ldc);
            }
        }
    }
}
/* Elements a column-major operand spans: (cols−1)·ld + rows, over the whole batch. */
static int64_t mg__gemm_span(int rows, int cols, int ld, int64_t stride, int batch) {
    if (rows == 0 || cols == 0 || batch == 0) return 0;
    return (int64_t)(batch - 1) * stride + (int64_t)(cols - 1) * ld + rows;
}
/* 16-bit operands are widened into arena scratch (exact); a 16-bit C is widened (when β ≠ 0),
   computed in fp32 and rounded back element by element — only the m×n entries of each
   matrix, never the gaps between columns, which may belong to other data.                  */
static void mg__cpu_gemm(mg_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                         const void *A, mg_dtype ab_dt, int lda, int64_t sA, const void *B,
                         int ldb, int64_t sB, float beta, void *C, mg_dtype c_dt, int ldc,
                         int64_t sC, int batch) {
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
        if (beta != 0.0f)
            for (i = 0; i < batch; i++)
                for (j = 0; j < n; j++)
                    mg__cpu_widen(C32 + i * sC + (int64_t)j * ldc, C, c_dt,
                                  i * sC + (int64_t)j * ldc, m);
    }
    mg__cpu_sgemm(ctx, ta, tb, m, n, k, alpha, A32, lda, sA, B32, ldb, sB, beta, C32, ldc, sC,
                  batch);
    if (c_dt != MG_F32)
        for (i = 0; i < batch; i++)
            for (j = 0; j < n; j++)
                mg__cpu_narrow(C, c_dt, i * sC + (int64_t)j * ldc, C32 + i * sC + (int64_t)j * ldc, m);
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
               MG__EW_GELU_GRAD, MG__EW_DROPOUT, MG__EW_SWIGLU, MG__EW_COUNT } mg__ew_op;
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
    for (q = 0; q < groups; q++) {
        uint64_t c = c0 + (uint64_t)q;
        mg__philox4 w = mg__philox4x32(g->key, (uint32_t)c, (uint32_t)(c >> 32), 0, 0);
        int64_t e = j + 4 * q;
        o[e] = mg__dropout(a[e], w.x[0], g->threshold, g->scale);
        o[e + 1] = mg__dropout(a[e + 1], w.x[1], g->threshold, g->scale);
        o[e + 2] = mg__dropout(a[e + 2], w.x[2], g->threshold, g->scale);
        o[e + 3] = mg__dropout(a[e + 3], w.x[3], g->threshold, g->scale);
    }
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
    mg__map_gelu_grad, mg__map_dropout, mg__map_swiglu};

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
/* factor = 1, or the layernorm norm (inp[r,c] − mean[r])·rstd[r] when inp is given. Threads
   own blocks of columns and walk all rows in order: deterministic, no atomics.               */
static void mg__cpu_colsum(mg_ctx *ctx, const mg_tensor *dst, const mg_tensor *src,
                           const mg_tensor *inp, const float *mean, const float *rstd) {
    (void)ctx;   /* read only by the OpenMP pragma: a build without OpenMP ignores it */
    int64_t N = mg_rows(src), C = mg_cols(src), nblk = (C + MG__COLBLOCK - 1) / MG__COLBLOCK, blk;
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * MG__COLBLOCK, w = C - c0 < MG__COLBLOCK ? C - c0 : MG__COLBLOCK, r, j;
        float acc[MG__COLBLOCK], sbuf[MG__COLBLOCK], xbuf[MG__COLBLOCK], dbuf[MG__COLBLOCK];
        const float *d;
        float *o;
        for (j = 0; j < w; j++) acc[j] = 0.0f;
        for (r = 0; r < N; r++) {
            const float *s = mg__cpu_span(src, r * C + c0, w, sbuf);
            if (inp) {
                const float *x = mg__cpu_span(inp, r * C + c0, w, xbuf);
                float mu = mean[r], rs = rstd[r];
                #pragma omp simd
                for (j = 0; j < w; j++) acc[j] += s[j] * ((x[j] - mu) * rs);
            } else {
                #pragma omp simd
                for (j = 0; j < w; j++) acc[j] += s[j];
            }
        }
        d = mg__cpu_span(dst, c0, w, dbuf);
        o = mg__cpu_out_span(dst, c0, dbuf);
        for (j = 0; j < w; j++) o[j] = d[j] + acc[j];
        mg__cpu_commit(dst, c0, o, w);
    }
}

/* out[r, :] = row[:] for every row (the bias before a GEMM with β = 1). */
static void mg__cpu_broadcast_rows(mg_ctx *ctx, const mg_tensor *out, const mg_tensor *row) {
    int64_t N = mg_rows(out), C = mg_cols(out), r;
    size_t mark = mg_arena_mark(ctx);
    float *v = (float *)mg_alloc(ctx, (size_t)C * sizeof(float));
    mg__cpu_widen(v, row->data, row->dtype, 0, C);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (r = 0; r < N; r++) mg__cpu_narrow(out->data, out->dtype, r * C, v, C);
    mg_arena_release(ctx, mark);
}

/* --- embedding ----------------------------------------------------------------------------- */
static void mg__cpu_embedding_forward(mg_ctx *ctx, const mg_tensor *out, const int32_t *tokens,
                                      int B, int T, int t0, const mg_tensor *wte,
                                      int64_t vocab_start, const mg_tensor *wpe) {
    int64_t N = mg_rows(out), C = mg_cols(out), Vw = mg_rows(wte), r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(out) || !mg__f32(wte) || !mg__f32(wpe), 3 * C);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        float *sc = scratch ? scratch + (size_t)MG__TID() * 3 * C : NULL;
        int64_t t = r / B, b = r % B, tok = tokens[b * T + t0 + t] - vocab_start, j;
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
                int64_t tok = tokens[(r % B) * T + t0 + r / B] - vocab_start;
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
    /* dweight += Σ_r dout·norm, dbias += Σ_r dout — first, since dinp may alias dout */
    if (dweight) mg__cpu_colsum(ctx, dweight, dout, inp, mean, rstd);
    if (dbias) mg__cpu_colsum(ctx, dbias, dout, NULL, NULL, NULL);
    /* dinp, row by row */
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * C > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
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
        #pragma omp simd reduction(max : mx)
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

/* --- vocabulary-slice cross-entropy --------------------------------------------------------- */
static void mg__cpu_xent_max(mg_ctx *ctx, float *rowmax, const mg_tensor *logits, int64_t nreal) {
    int64_t N = mg_rows(logits), Vs = mg_cols(logits), r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(logits), Vs);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * Vs > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        const float *l = mg__cpu_span(logits, r * Vs, nreal, scratch ? scratch + (size_t)MG__TID() * Vs : NULL);
        float mx = -INFINITY;
        int64_t j;
        #pragma omp simd reduction(max : mx)
        for (j = 0; j < nreal; j++) mx = l[j] > mx ? l[j] : mx;
        rowmax[r] = mx;
    }
    mg_arena_release(ctx, mark);
}
static void mg__cpu_xent_sumexp(mg_ctx *ctx, float *sumexp, float *tlogit, const mg_tensor *logits,
                                const int32_t *targets, const float *rowmax, int64_t vocab_start,
                                int64_t nreal) {
    int64_t N = mg_rows(logits), Vs = mg_cols(logits), r;
    size_t mark = mg_arena_mark(ctx);
    float *scratch = mg__cpu_scratch(ctx, !mg__f32(logits), Vs);
    #pragma omp parallel for num_threads(ctx->n_threads) schedule(static) if (N * Vs > MG__PAR_MIN)
    for (r = 0; r < N; r++) {
        const float *l = mg__cpu_span(logits, r * Vs, nreal, scratch ? scratch + (size_t)MG__TID() * Vs : NULL);
        float mx = rowmax[r], s = 0.0f;
        int64_t j, tgt = (int64_t)targets[r] - vocab_start;
        #pragma omp simd reduction(+ : s)
        for (j = 0; j < nreal; j++) s += mg__exp(l[j] - mx);
        sumexp[r] = s;
        tlogit[r] = (tgt >= 0 && tgt < nreal) ? l[tgt] : 0.0f;
    }
    mg_arena_release(ctx, mark);
}
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
        int64_t j, tgt = (int64_t)targets[r] - vocab_start;
        #pragma omp simd
        for (j = 0; j < nreal; j++) d[j] = mg__xent_dlogit(l[j], mx, se, (float)(j == tgt), dloss);
        for (j = nreal; j < Vs; j++) d[j] = 0.0f;
        mg__cpu_commit(dlogits, r * Vs, d, Vs);
    }
    mg_arena_release(ctx, mark);
}

/* --- optimizer and norms -------------------------------------------------------------------- */
static void mg__cpu_adamw(mg_ctx *ctx, float *param, const float *grad, float *m, float *v,
                          int64_t n, const mg__adamw_k *k, void *param16, mg_dtype dt16) {
    int64_t i;
    #pragma omp parallel for simd num_threads(ctx->n_threads) schedule(static) if (n > MG__PAR_MIN)
    for (i = 0; i < n; i++) param[i] = mg__adamw(param[i], grad[i], &m[i], &v[i], k);
    if (param16) {
        mg_tensor p32 = mg_tensor_wrap(param, MG_F32, 1, &n), p16 = mg_tensor_wrap(param16, dt16, 1, &n);
        mg__cpu_map(ctx, MG__EW_COPY, &p16, &p32, NULL, NULL);
    }
}
/* The fused step's CPU twin: the table's pieces in order, each as mg_adamw_step runs it. */
static void mg__cpu_adamw_multi(mg_ctx *ctx, const mg_adamw_piece *table, int n_pieces,
                                float beta1, float beta2, float eps, mg_dtype dt16,
                                const mg_adamw_args *args) {
    int i;
    if (args->skip) return;
    for (i = 0; i < n_pieces; i++) {
        const mg_adamw_piece *p = &table[i];
        mg__adamw_k k = mg__adamw_k_of(args, beta1, beta2, eps, p->weight_decay);
        mg__cpu_adamw(ctx, p->param, p->grad, p->m, p->v, p->n, &k, p->param16, dt16);
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
       then the launchers. Rows map to blocks; reductions use the one pair of block helpers.
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

/* Atomic p[i] += v for any storage dtype: fp32 natively, 16-bit by compare-and-swap on the
   aligned 32-bit word holding the element (rounding with the library's own conversion).    */
__device__ static inline void mg__atomic_add(void *p, mg_dtype dt, int64_t i, float v) {
    if (dt == MG_F32) { atomicAdd((float *)p + i, v); return; }
    {
        uint16_t *h = (uint16_t *)p + i;
        unsigned int *word = (unsigned int *)((size_t)h & ~(size_t)3);
        unsigned int shift = ((size_t)h & 2) ? 16u : 0u, old = *word, assumed;
        do {
            float cur;
            unsigned int nv;
            assumed = old;
            cur = (dt == MG_BF16) ? mg_bf16_to_f32((uint16_t)(assumed >> shift))
                                  : mg_f16_to_f32((uint16_t)(assumed >> shift));
            nv = (dt == MG_BF16) ? mg_f32_to_bf16(cur + v) : mg_f32_to_f16(cur + v);
            old = atomicCAS(word, assumed, (assumed & ~(0xFFFFu << shift)) | (nv << shift));
        } while (assumed != old);
    }
}

/* --- elementwise: one functor, the op (mg__ew_op) chosen by a code uniform over the grid -- */
struct mg__ew {
    mg__ew_op op;
    void *out; const void *a, *b;
    mg_dtype od, ad, bd;
    mg__map_args g;
    __device__ void operator()(int64_t i) const {
        float r;
        switch (op) {
        case MG__EW_ADD: r = mg_load(a, ad, i) + mg_load(b, bd, i); break;
        case MG__EW_AXPY: r = mg_load(a, ad, i) + g.alpha * mg_load(b, bd, i); break;
        case MG__EW_SCALE: r = g.alpha * mg_load(a, ad, i); break;
        case MG__EW_FILL: r = g.alpha; break;
        case MG__EW_GELU: r = mg__gelu(mg_load(a, ad, i)); break;
        case MG__EW_GELU_GRAD: r = mg_load(b, bd, i) * mg__gelu_grad(mg_load(a, ad, i)); break;
        case MG__EW_SWIGLU: r = mg__silu(mg_load(a, ad, i)) * mg_load(b, bd, i); break;
        case MG__EW_DROPOUT: {
            int64_t row = i / g.local_cols, col = i % g.local_cols;
            uint64_t gi = (uint64_t)((g.row_offset + row) * g.global_cols + g.col_offset + col);
            r = mg__dropout(mg_load(a, ad, i), mg_rand_u32(g.key, gi), g.threshold, g.scale);
            break;
        }
        default: r = mg_load(a, ad, i); break; /* MG__EW_COPY: a cast */
        }
        mg_store(out, od, i, r);
    }
};
template <class F> static __global__ void mg__k_map(int64_t n, F f) {
    int64_t i;
    for (i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        f(i);
}
template <class F> static void mg__cuda_map(mg_ctx *ctx, int64_t n, F f) {
    int64_t blocks = (n + MG__CUDA_THREADS - 1) / MG__CUDA_THREADS;
    if (n <= 0) return;
    if (blocks > 65536) blocks = 65536;
    MG_LAUNCH(mg__k_map, (unsigned)blocks, MG__CUDA_THREADS, 0, MG__STREAM(ctx), n, f);
    MG_CUDA_LAUNCH_CHECK();
}
static void mg__cuda_ew(mg_ctx *ctx, mg__ew_op op, const mg_tensor *out, const mg_tensor *a,
                        const mg_tensor *b, const mg__map_args *g) {
    mg__ew f;
    memset(&f, 0, sizeof f);
    f.op = op;
    f.out = out->data; f.od = out->dtype;
    if (a) { f.a = a->data; f.ad = a->dtype; }
    if (b) { f.b = b->data; f.bd = b->dtype; }
    if (g) f.g = *g;
    mg__cuda_map(ctx, mg_numel(out), f);
}

/* --- row broadcast, column sums ------------------------------------------------------------ */
/* --- SwiGLU backward, rotary embedding: one thread per element / per rotated pair --------- */
struct mg__f_swiglu_backward {
    void *dgate, *dup; const void *dout, *gate, *up; mg_dtype dgd, dud, dd, gd, ud;
    __device__ void operator()(int64_t i) const {
        float dy = mg_load(dout, dd, i), x = mg_load(gate, gd, i), y = mg_load(up, ud, i);
        mg_store(dgate, dgd, i, dy * y * mg__silu_grad(x));
        mg_store(dup, dud, i, dy * mg__silu(x));
    }
};
struct mg__f_rope {
    void *qkv; mg_dtype dt; int64_t C3; int B, per, hd, h, t0; const float *cos_sin; float sign;
    __device__ void operator()(int64_t i) const {
        int64_t pair = i % h, rest = i / h, heads = (int64_t)(C3 / ((per + 2) * (int64_t)hd)) * (per + 1);
        int64_t head = rest % heads, r = rest / heads, g = head / (per + 1), j = head % (per + 1);
        int64_t x1 = r * C3 + (g * (per + 2) + j) * hd + pair;
        const float *cs = cos_sin + ((int64_t)(t0 + r / B) * h + pair) * 2;
        float a = mg_load(qkv, dt, x1), b = mg_load(qkv, dt, x1 + h);
        mg__rope_pair(&a, &b, cs[0], sign * cs[1]);
        mg_store(qkv, dt, x1, a);
        mg_store(qkv, dt, x1 + h, b);
    }
};

struct mg__f_broadcast_rows {
    void *out; mg_dtype od; const void *row; mg_dtype rd; int64_t C;
    __device__ void operator()(int64_t i) const { mg_store(out, od, i, mg_load(row, rd, i % C)); }
};
/* dst[c] += Σ_r src[r,c] (· layernorm norm when inp is set). Block = 32 columns × 32 row
   lanes; each lane walks rows with stride 32, then lane sums are added in a fixed order:
   deterministic. 1024 threads per block: __launch_bounds__ keeps the compiler to the 64
   registers per thread that allows, in every build (-G included).                          */
static __global__ void __launch_bounds__(1024) mg__k_colsum(void *dst, mg_dtype dd, const void *src,
                             mg_dtype sd, const void *inp, mg_dtype xd, const float *mean,
                             const float *rstd, int64_t N, int64_t C) {
    __shared__ float part[32][33];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, r;
    float acc = 0.0f;
    if (c < C)
        for (r = threadIdx.y; r < N; r += 32) {
            float v = mg_load(src, sd, r * C + c);
            if (inp) v *= (mg_load(inp, xd, r * C + c) - mean[r]) * rstd[r];
            acc += v;
        }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
        int k;
        for (k = 0; k < 32; k++) s += part[k][threadIdx.x];
        mg_store(dst, dd, c, mg_load(dst, dd, c) + s);
    }
}
static void mg__cuda_colsum(mg_ctx *ctx, const mg_tensor *dst, const mg_tensor *src,
                            const mg_tensor *inp, const float *mean, const float *rstd) {
    int64_t N = mg_rows(src), C = mg_cols(src);
    if (C == 0) return;
    MG_LAUNCH(mg__k_colsum, (unsigned)((C + 31) / 32), dim3(32, 32), 0, MG__STREAM(ctx),
        dst->data, dst->dtype, src->data, src->dtype, inp ? inp->data : NULL,
        inp ? inp->dtype : MG_F32, mean, rstd, N, C);
    MG_CUDA_LAUNCH_CHECK();
}

/* --- embedding ----------------------------------------------------------------------------- */
struct mg__f_embed {
    void *out; mg_dtype od; const int32_t *tokens; int B, T, t0; int64_t C, Vw, vocab_start;
    const void *wte; mg_dtype ed; const void *wpe; mg_dtype pd;
    __device__ void operator()(int64_t i) const {
        int64_t r = i / C, c = i % C, t = r / B, b = r % B;
        int64_t tok = tokens[b * T + t0 + t] - vocab_start;
        float v = (tok >= 0 && tok < Vw) ? mg_load(wte, ed, tok * C + c) : 0.0f;
        if (wpe) v += mg_load(wpe, pd, (t0 + t) * C + c);
        mg_store(out, od, i, v);
    }
};
/* dwte: atomic scatter-add (rows sharing a token add in arbitrary order). */
struct mg__f_embed_dwte {
    void *dwte; mg_dtype wd; const void *dout; mg_dtype dd; const int32_t *tokens;
    int B, T, t0; int64_t C, Vw, vocab_start;
    __device__ void operator()(int64_t i) const {
        int64_t r = i / C, c = i % C;
        int64_t tok = tokens[(r % B) * T + t0 + r / B] - vocab_start;
        if (tok >= 0 && tok < Vw) mg__atomic_add(dwte, wd, tok * C + c, mg_load(dout, dd, i));
    }
};
/* dwpe: element (t, c) sums its B rows in order (no atomics). */
struct mg__f_embed_dwpe {
    void *dwpe; mg_dtype pd; const void *dout; mg_dtype dd; int B, t0; int64_t C;
    __device__ void operator()(int64_t i) const {
        int64_t t = i / C, c = i % C, p = (t0 + t) * C + c;
        float s = mg_load(dwpe, pd, p);
        int b;
        for (b = 0; b < B; b++) s += mg_load(dout, dd, (t * B + b) * C + c);
        mg_store(dwpe, pd, p, s);
    }
};

/* --- layernorm: one block per row ----------------------------------------------------------- */
static __global__ void mg__k_layernorm_forward(void *out, mg_dtype od, float *mean, float *rstd,
                                        const void *inp, mg_dtype id, const void *w, mg_dtype wd,
                                        const void *b, mg_dtype bd, int64_t C, mg_norm k) {
    int64_t base = blockIdx.x * C, j;
    float s = 0.0f, mu = 0.0f, ss = 0.0f, rs;
    if (!k.rms) {
        for (j = threadIdx.x; j < C; j += blockDim.x) s += mg_load(inp, id, base + j);
        mu = mg__block_sum(s) / (float)C;
    }
    for (j = threadIdx.x; j < C; j += blockDim.x) {
        float d = mg_load(inp, id, base + j) - mu;
        ss += d * d;
    }
    rs = mg__ln_rstd(mg__block_sum(ss) / (float)C, k.eps);
    for (j = threadIdx.x; j < C; j += blockDim.x)
        mg_store(out, od, base + j, (mg_load(inp, id, base + j) - mu) * rs * mg_load(w, wd, j) +
                                        (b ? mg_load(b, bd, j) : 0.0f));
    if (threadIdx.x == 0) { mean[blockIdx.x] = mu; rstd[blockIdx.x] = rs; }
}
static __global__ void mg__k_layernorm_backward(void *dinp, mg_dtype did, const void *dout, mg_dtype dd,
                                         const void *inp, mg_dtype id, const void *w, mg_dtype wd,
                                         const float *mean, const float *rstd, int64_t C,
                                         int accumulate, int rms) {
    int64_t base = blockIdx.x * C, j;
    float mu = mean[blockIdx.x], rs = rstd[blockIdx.x], sg = 0.0f, sgn = 0.0f, mean_g, mean_gn;
    for (j = threadIdx.x; j < C; j += blockDim.x) {
        float g = mg_load(dout, dd, base + j) * mg_load(w, wd, j);
        sg += g;
        sgn += g * ((mg_load(inp, id, base + j) - mu) * rs); /* the CPU's association */
    }
    mean_g = rms ? 0.0f : mg__block_sum(sg) / (float)C;
    mean_gn = mg__block_sum(sgn) / (float)C;
    for (j = threadIdx.x; j < C; j += blockDim.x) {
        float d = mg__ln_dx(mg_load(dout, dd, base + j) * mg_load(w, wd, j),
                            (mg_load(inp, id, base + j) - mu) * rs, rs, mean_g, mean_gn);
        if (accumulate) d += mg_load(dinp, did, base + j);
        mg_store(dinp, did, base + j, d);
    }
}

/* --- causal softmax over rows of length T (row r is query t1 = r mod T) --------------------- */
static __global__ void mg__k_causal_softmax(void *att, mg_dtype dt, int64_t T) {
    int64_t base = blockIdx.x * T, n = blockIdx.x % T + 1, j;
    float mx = -INFINITY, s = 0.0f, inv;
    for (j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, mg_load(att, dt, base + j));
    mx = mg__block_max(mx);
    for (j = threadIdx.x; j < n; j += blockDim.x) s += mg__exp(mg_load(att, dt, base + j) - mx);
    inv = 1.0f / mg__block_sum(s);
    for (j = threadIdx.x; j < T; j += blockDim.x)
        mg_store(att, dt, base + j, j < n ? mg__exp(mg_load(att, dt, base + j) - mx) * inv : 0.0f);
}
static __global__ void mg__k_causal_softmax_backward(void *datt, mg_dtype dd, const void *att,
                                              mg_dtype ad, int64_t T) {
    int64_t base = blockIdx.x * T, n = blockIdx.x % T + 1, j;
    float dot = 0.0f;
    for (j = threadIdx.x; j < n; j += blockDim.x)
        dot += mg_load(att, ad, base + j) * mg_load(datt, dd, base + j);
    dot = mg__block_sum(dot);
    for (j = threadIdx.x; j < T; j += blockDim.x)
        mg_store(datt, dd, base + j,
                 j < n ? mg__softmax_grad(mg_load(att, ad, base + j), mg_load(datt, dd, base + j), dot)
                       : 0.0f);
}

/* --- cross-entropy: one block per row ------------------------------------------------------- */
static __global__ void mg__k_xent_max(float *rowmax, const void *logits, mg_dtype dt, int64_t Vs,
                               int64_t nreal) {
    int64_t base = blockIdx.x * Vs, j;
    float mx = -INFINITY;
    for (j = threadIdx.x; j < nreal; j += blockDim.x) mx = fmaxf(mx, mg_load(logits, dt, base + j));
    mx = mg__block_max(mx);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = mx;
}
static __global__ void mg__k_xent_sumexp(float *sumexp, float *tlogit, const void *logits, mg_dtype dt,
                                  const int32_t *targets, const float *rowmax, int64_t Vs,
                                  int64_t nreal, int64_t vocab_start) {
    int64_t base = blockIdx.x * Vs, j, tgt = (int64_t)targets[blockIdx.x] - vocab_start;
    float mx = rowmax[blockIdx.x], s = 0.0f;
    for (j = threadIdx.x; j < nreal; j += blockDim.x) s += mg__exp(mg_load(logits, dt, base + j) - mx);
    s = mg__block_sum(s);
    if (threadIdx.x == 0) {
        sumexp[blockIdx.x] = s;
        tlogit[blockIdx.x] = (tgt >= 0 && tgt < nreal) ? mg_load(logits, dt, base + tgt) : 0.0f;
    }
}
static __global__ void mg__k_xent_backward(void *dlogits, mg_dtype dd, const void *logits, mg_dtype ld,
                                    const int32_t *targets, const float *rowmax,
                                    const float *sumexp, float dloss, const float *dloss_at,
                                    int64_t Vs, int64_t nreal, int64_t vocab_start) {
    int64_t base = blockIdx.x * Vs, j, tgt = (int64_t)targets[blockIdx.x] - vocab_start;
    float mx = rowmax[blockIdx.x], se = sumexp[blockIdx.x];
    if (dloss_at) dloss = *dloss_at;
    for (j = threadIdx.x; j < Vs; j += blockDim.x)
        mg_store(dlogits, dd, base + j,
                 j < nreal ? mg__xent_dlogit(mg_load(logits, ld, base + j), mx, se, (float)(j == tgt), dloss)
                           : 0.0f);
}
struct mg__f_xent_loss {
    float *losses; const float *rowmax, *sumexp, *tlogit;
    __device__ void operator()(int64_t i) const {
        losses[i] = mg__xent_loss(rowmax[i], sumexp[i], tlogit[i]);
    }
};

/* --- optimizer and norms -------------------------------------------------------------------- */
struct mg__f_adamw {
    float *param; const float *grad; float *m, *v; mg__adamw_k k; void *param16; mg_dtype dt16;
    __device__ void operator()(int64_t i) const {
        float p = mg__adamw(param[i], grad[i], &m[i], &v[i], &k);
        param[i] = p;
        if (param16) mg_store(param16, dt16, i, p);
    }
};
/* Per-block Σ x² in double (inf/nan propagate into it); the host adds the block sums. */
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
   of MG__ADAMW_TILE indices; its threads find the tile's first piece by binary search over
   begin (the same answer in every thread: no shared memory, no barrier) and step from piece
   to piece as their indices pass a piece's end; a piece's constants (the decay factor) are
   made when a thread enters it. Per element: reads param, grad, m, v (16 bytes), writes
   param, m, v (+ the 16-bit copy): 12–14 bytes, ~20 flops — bandwidth-bound. skip: the
   whole grid returns before touching anything.                                              */
#define MG__ADAMW_TILE (4 * MG__CUDA_THREADS)
static __global__ void mg__k_adamw_multi(const mg_adamw_piece *table, int n_pieces,
                                         int64_t total, float beta1, float beta2, float eps,
                                         mg_dtype dt16, const mg_adamw_args *args) {
    mg_adamw_args a = *args;
    int64_t t0;
    if (a.skip) return;
    for (t0 = (int64_t)blockIdx.x * MG__ADAMW_TILE; t0 < total;
         t0 += (int64_t)gridDim.x * MG__ADAMW_TILE) {
        int64_t i = t0 + threadIdx.x, end = t0 + MG__ADAMW_TILE < total ? t0 + MG__ADAMW_TILE : total;
        int lo = 0, hi = n_pieces - 1, c;
        mg__adamw_k k;
        if (i >= end) continue;
        while (lo < hi) {   /* the last piece with begin <= i */
            int mid = (lo + hi + 1) / 2;
            if (table[mid].begin <= i) lo = mid; else hi = mid - 1;
        }
        c = lo;
        k = mg__adamw_k_of(&a, beta1, beta2, eps, table[c].weight_decay);
        for (; i < end; i += blockDim.x) {
            const mg_adamw_piece *p;
            int64_t j;
            float w;
            if (i >= table[c].begin + table[c].n) {
                while (i >= table[c].begin + table[c].n) c++;
                k = mg__adamw_k_of(&a, beta1, beta2, eps, table[c].weight_decay);
            }
            p = &table[c];
            j = i - p->begin;
            w = mg__adamw(p->param[j], p->grad[j], &p->m[j], &p->v[j], &k);
            p->param[j] = w;
            if (p->param16) mg_store(p->param16, dt16, j, w);
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
   OpenBLAS do; cuBLAS's documentation does not state its k = 0 result, so it is not asked. */
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
static void mg__check_2d(const char *op, const char *name, const mg_tensor *t, int64_t rows,
                         int64_t cols) {
    if (!t || (!t->data && rows * cols > 0))
        mg_fatal(__FILE__, __LINE__, "%s: %s is missing", op, name);
    if (mg_rows(t) != rows || mg_cols(t) != cols)
        mg_fatal(__FILE__, __LINE__, "%s: %s is [%lld, %lld] (as rows x last dim), expected "
                 "[%lld, %lld]", op, name, (long long)mg_rows(t), (long long)mg_cols(t),
                 (long long)rows, (long long)cols);
}
static void mg__check_numel(const char *op, const char *name, const mg_tensor *t, int64_t n) {
    if (!t || mg_numel(t) != n)
        mg_fatal(__FILE__, __LINE__, "%s: %s has %lld elements, expected %lld", op, name,
                 t ? (long long)mg_numel(t) : -1LL, (long long)n);
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
    if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
        mg_fatal(__FILE__, __LINE__, "mg_gemm: leading dimensions lda %d ldb %d ldc %d too small "
                 "(need >= %d, %d, %d)", lda, ldb, ldc, arows, brows, m);
}
MGDEF void mg_gemm(mg_ctx *ctx, int transa, int transb, int m, int n, int k, float alpha,
                   const void *A, mg_dtype a_dt, int lda, const void *B, mg_dtype b_dt, int ldb,
                   float beta, void *C, mg_dtype c_dt, int ldc) {
    mg_gemm_strided_batched(ctx, transa, transb, m, n, k, alpha, A, a_dt, lda, 0, B, b_dt, ldb,
                            0, beta, C, c_dt, ldc, 0, 1);
}
MGDEF void mg_gemm_strided_batched(mg_ctx *ctx, int transa, int transb, int m, int n, int k,
                   float alpha, const void *A, mg_dtype a_dt, int lda, int64_t strideA,
                   const void *B, mg_dtype b_dt, int ldb, int64_t strideB, float beta,
                   void *C, mg_dtype c_dt, int ldc, int64_t strideC, int batch) {
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
                 beta, C, c_dt, ldc, strideC, batch);
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
    if (mg__is_cuda(ctx)) { mg__cuda_colsum(ctx, dst, src, NULL, NULL, NULL); return; }
#endif
    mg__cpu_colsum(ctx, dst, src, NULL, NULL, NULL);
}
static void mg__broadcast_rows(mg_ctx *ctx, const mg_tensor *out, const mg_tensor *row) {
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg__f_broadcast_rows f = {out->data, out->dtype, row->data, row->dtype, mg_cols(out)};
        mg__cuda_map(ctx, mg_numel(out), f);
        return;
    }
#endif
    mg__cpu_broadcast_rows(ctx, out, row);
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
        mg__f_embed f = {out->data, out->dtype, tokens, B, T, t0, mg_cols(out), mg_rows(wte),
                         vocab_start, wte->data, wte->dtype, wpe ? wpe->data : NULL,
                         wpe ? wpe->dtype : MG_F32};
        mg__cuda_map(ctx, mg_numel(out), f);
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
        int64_t C = mg_cols(dout);
        if (dwte) {
            mg__f_embed_dwte f = {dwte->data, dwte->dtype, dout->data, dout->dtype, tokens, B, T,
                                  t0, C, mg_rows(dwte), vocab_start};
            mg__cuda_map(ctx, mg_numel(dout), f);
        }
        if (dwpe) {
            mg__f_embed_dwpe f = {dwpe->data, dwpe->dtype, dout->data, dout->dtype, B, t0, C};
            mg__cuda_map(ctx, mg_rows(dout) / B * C, f);
        }
        return;
    }
#endif
    mg__cpu_embedding_backward(ctx, dwte, dwpe, dout, tokens, B, T, t0, vocab_start);
}

/* --- layernorm ------------------------------------------------------------------------------ */
MGDEF void mg_norm_forward(mg_ctx *ctx, const mg_norm *kind, mg_tensor *out, float *mean,
                           float *rstd, const mg_tensor *inp, const mg_tensor *weight,
                           const mg_tensor *bias) {
    const char *op = kind->rms ? "mg_norm_forward (RMSNorm)" : "mg_norm_forward (LayerNorm)";
    int64_t N = mg_rows(inp), C = mg_cols(inp);
    mg__check_2d(op, "out", out, N, C);
    mg__check_numel(op, "weight", weight, C);
    if (bias) mg__check_numel(op, "bias", bias, C);
    if (C <= 0 || !mean || !rstd || (!kind->rms && !bias) || !(kind->eps > 0.0f))
        mg_fatal(__FILE__, __LINE__, "%s: need C > 0, mean and rstd, eps > 0 (%g), and a bias "
                 "for LayerNorm", op, (double)kind->eps);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (N == 0) return;
        MG_LAUNCH(mg__k_layernorm_forward, mg__cuda_row_grid(N), MG__CUDA_THREADS, 0,
                  MG__STREAM(ctx),
            out->data, out->dtype, mean, rstd, inp->data, inp->dtype, weight->data,
            weight->dtype, bias ? bias->data : NULL, bias ? bias->dtype : MG_F32, C, *kind);
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_layernorm_forward(ctx, kind, out, mean, rstd, inp, weight, bias);
}
MGDEF void mg_norm_backward(mg_ctx *ctx, const mg_norm *kind, mg_tensor *dinp, mg_tensor *dweight,
                            mg_tensor *dbias, const mg_tensor *dout, const mg_tensor *inp,
                            const mg_tensor *weight, const float *mean, const float *rstd,
                            int accumulate) {
    const char *op = kind->rms ? "mg_norm_backward (RMSNorm)" : "mg_norm_backward (LayerNorm)";
    int64_t N = mg_rows(inp), C = mg_cols(inp);
    mg__check_2d(op, "dinp", dinp, N, C);
    mg__check_2d(op, "dout", dout, N, C);
    mg__check_numel(op, "weight", weight, C);
    if (!mean || !rstd) mg_fatal(__FILE__, __LINE__, "%s: mean and rstd are required", op);
    if (dweight) mg__check_numel(op, "dweight", dweight, C);
    if (dbias) mg__check_numel(op, "dbias", dbias, C);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        /* parameter gradients first: dinp may alias dout */
        if (dweight) mg__cuda_colsum(ctx, dweight, dout, inp, mean, rstd);
        if (dbias) mg__cuda_colsum(ctx, dbias, dout, NULL, NULL, NULL);
        if (N == 0) return;
        MG_LAUNCH(mg__k_layernorm_backward, mg__cuda_row_grid(N), MG__CUDA_THREADS, 0,
                  MG__STREAM(ctx),
            dinp->data, dinp->dtype, dout->data, dout->dtype, inp->data, inp->dtype,
            weight->data, weight->dtype, mean, rstd, C, accumulate, kind->rms);
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_layernorm_backward(ctx, kind, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                               accumulate);
}
static const mg_norm mg__gpt2_layernorm = {0, MG__LN_EPS};
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
static void mg__check_linear(const char *op, const mg_tensor *x, const mg_tensor *w,
                             const mg_tensor *y) {
    int64_t N = mg_rows(x), In = mg_cols(x), Out = mg_rows(w);
    if (mg_cols(w) != In)
        mg_fatal(__FILE__, __LINE__, "%s: weight is [%lld, %lld] but the input has %lld features",
                 op, (long long)Out, (long long)mg_cols(w), (long long)In);
    mg__check_2d(op, "output", y, N, Out);
    mg__check_same_dtype(op, x, w);
    mg__check_int(op, "rows", N);
    mg__check_int(op, "in_features", In);
    mg__check_int(op, "out_features", Out);
}
MGDEF void mg_linear_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp,
                             const mg_tensor *weight, const mg_tensor *bias) {
    int N = (int)mg_rows(inp), In = (int)mg_cols(inp), Out = (int)mg_rows(weight);
    mg__check_linear("mg_linear_forward", inp, weight, out);
    if (bias) {
        mg__check_numel("mg_linear_forward", "bias", bias, Out);
        mg__broadcast_rows(ctx, out, bias); /* out = bias, then out += inp·Wᵀ */
    }
    mg_gemm(ctx, 1, 0, Out, N, In, 1.0f, weight->data, weight->dtype, In, inp->data, inp->dtype, In,
            bias ? 1.0f : 0.0f, out->data, out->dtype, Out);
}
MGDEF void mg_linear_backward_input(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *dout,
                                    const mg_tensor *weight, int accumulate) {
    int N = (int)mg_rows(dout), Out = (int)mg_cols(dout), In = (int)mg_cols(weight);
    mg__check_linear("mg_linear_backward_input", dinp, weight, dout);
    mg_gemm(ctx, 0, 0, In, N, Out, 1.0f, weight->data, weight->dtype, In, dout->data, dout->dtype, Out,
            accumulate ? 1.0f : 0.0f, dinp->data, dinp->dtype, In);
}
MGDEF void mg_linear_backward_weight(mg_ctx *ctx, mg_tensor *dweight, mg_tensor *dbias,
                                     const mg_tensor *dout, const mg_tensor *inp) {
    int N = (int)mg_rows(inp), In = (int)mg_cols(inp), Out = (int)mg_cols(dout);
    mg__check_2d("mg_linear_backward_weight", "dout", dout, N, Out);
    mg__check_2d("mg_linear_backward_weight", "dweight", dweight, Out, In);
    mg__check_int("mg_linear_backward_weight", "rows", N);
    mg_gemm(ctx, 0, 1, In, Out, N, 1.0f, inp->data, inp->dtype, In, dout->data, dout->dtype, Out, 1.0f,
            dweight->data, dweight->dtype, In);
    if (dbias) {
        mg__check_numel("mg_linear_backward_weight", "dbias", dbias, Out);
        mg__colsum(ctx, dbias, dout);
    }
}

/* --- GELU ----------------------------------------------------------------------------------- */
MGDEF void mg_gelu_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp) {
    mg__check_numel("mg_gelu_forward", "out", out, mg_numel(inp));
    mg__map(ctx, MG__EW_GELU, out, inp, NULL, NULL);
}
MGDEF void mg_gelu_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *inp,
                            const mg_tensor *dout) {
    mg__check_numel("mg_gelu_backward", "dinp", dinp, mg_numel(inp));
    mg__check_numel("mg_gelu_backward", "dout", dout, mg_numel(inp));
    mg__map(ctx, MG__EW_GELU_GRAD, dinp, inp, dout, NULL);
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
    mg__check_numel(op, "att", att, (int64_t)B * n_head * d.TT);
    mg__check_same_dtype(op, qkv, att);
    mg__check_same_dtype(op, qkv, out);
    mg__check_int(op, "B*C3", d.ld);
    if (drop && drop->p > 0.0f &&
        (drop->p >= 1.0f || drop->head_offset < 0 || drop->head_offset + n_head > drop->n_head_total))
        mg_fatal(__FILE__, __LINE__, "%s: dropout p %g, heads %d..%d of %d: need 0 <= p < 1 and the "
                 "local heads inside the layer's", op, (double)drop->p, drop->head_offset,
                 drop->head_offset + n_head - 1, drop->n_head_total);
    return d;
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
        MG_LAUNCH(mg__k_causal_softmax, mg__cuda_row_grid((int64_t)B * n_head * T),
                  MG__CUDA_THREADS, 0, MG__STREAM(ctx), att->data, dt, T);
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
    int dropping = drop && drop->p > 0.0f, j;
    mg__check_2d(op, "dqkv", dqkv, mg_rows(qkv), mg_cols(qkv));
    mg__check_numel(op, "datt", datt, mg_numel(att));
    mg__check_same_dtype(op, qkv, dqkv);
    mg__check_same_dtype(op, qkv, datt);
    dK = mg__at(dqkv->data, dt, koff); dV = mg__at(dqkv->data, dt, voff);
    /* dV = Σ_j D(P_j)ᵀ·dout_j over the group's query heads (datt holds D(P) meanwhile when
       dropping) */
    if (dropping) mg__attn_dropout(ctx, datt, att, &d, drop);
    for (j = 0; j < d.per; j++)
        mg_gemm_strided_batched(ctx, 0, 1, d.hd, T, T, 1.0f, mg__out_at(dout, &d, j), dt,
                                (int)d.ldo, d.per * d.hd,
                                mg__att_at(dropping ? datt : att, &d, j), dt, T, d.per * d.TT,
                                j ? 1.0f : 0.0f, dV, dt, (int)d.ld, d.W, d.batch);
    /* dP_j = D'(dout_j·Vᵀ), then dS = softmax backward, in place in datt */
    for (j = 0; j < d.per; j++)
        mg_gemm_strided_batched(ctx, 1, 0, T, T, d.hd, 1.0f, V, dt, (int)d.ld, d.W,
                                mg__out_at(dout, &d, j), dt, (int)d.ldo, d.per * d.hd, 0.0f,
                                mg__att_at(datt, &d, j), dt, T, d.per * d.TT, d.batch);
    if (dropping) mg__attn_dropout(ctx, datt, datt, &d, drop);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        MG_LAUNCH(mg__k_causal_softmax_backward, mg__cuda_row_grid((int64_t)B * n_head * T),
                  MG__CUDA_THREADS, 0, MG__STREAM(ctx), datt->data, dt, att->data, dt, T);
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
                                dK, dt, (int)d.ld, d.W, d.batch);
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
        mg__f_rope f = {qkv->data, qkv->dtype, C3, B, nh / ng, (int)hd, rot / 2, t0, cos_sin, sign};
        mg__cuda_map(ctx, mg_rows(qkv) * (nh + ng) * (int64_t)(rot / 2), f);
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
    mg__check_numel("mg_swiglu_forward", "gate", gate, mg_numel(out));
    mg__check_numel("mg_swiglu_forward", "up", up, mg_numel(out));
    mg__map(ctx, MG__EW_SWIGLU, out, gate, up, NULL);
}
MGDEF void mg_swiglu_backward(mg_ctx *ctx, mg_tensor *dgate, mg_tensor *dup,
                              const mg_tensor *dout, const mg_tensor *gate, const mg_tensor *up) {
    const char *op = "mg_swiglu_backward";
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
        mg__f_swiglu_backward f = {dgate->data, dup->data, dout->data, gate->data, up->data,
                                   dgate->dtype, dup->dtype, dout->dtype, gate->dtype, up->dtype};
        mg__cuda_map(ctx, n, f);
        return;
    }
#endif
    mg__cpu_swiglu_backward(ctx, dgate, dup, dout, gate, up);
}

/* --- elementwise ---------------------------------------------------------------------------- */
MGDEF void mg_add(mg_ctx *ctx, mg_tensor *out, const mg_tensor *a, const mg_tensor *b) {
    mg__check_numel("mg_add", "a", a, mg_numel(out));
    mg__check_numel("mg_add", "b", b, mg_numel(out));
    mg__map(ctx, MG__EW_ADD, out, a, b, NULL);
}
MGDEF void mg_axpy(mg_ctx *ctx, mg_tensor *y, float alpha, const mg_tensor *x) {
    mg__map_args g;
    mg__check_numel("mg_axpy", "x", x, mg_numel(y));
    memset(&g, 0, sizeof g);
    g.alpha = alpha;
    mg__map(ctx, MG__EW_AXPY, y, y, x, &g);
}
MGDEF void mg_scale(mg_ctx *ctx, mg_tensor *x, float alpha) {
    mg__map_args g;
    memset(&g, 0, sizeof g);
    g.alpha = alpha;
    mg__map(ctx, MG__EW_SCALE, x, x, NULL, &g);
}
MGDEF void mg_fill(mg_ctx *ctx, mg_tensor *x, float value) {
    mg__map_args g;
    memset(&g, 0, sizeof g);
    g.alpha = value;
    mg__map(ctx, MG__EW_FILL, x, NULL, NULL, &g);
}
MGDEF void mg_cast(mg_ctx *ctx, mg_tensor *dst, const mg_tensor *src) {
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
    if (vocab_start < 0 || vocab_size <= 0)
        mg_fatal(__FILE__, __LINE__, "%s: vocab_start %lld, vocab_size %lld: need >= 0 and > 0", op,
                 (long long)vocab_start, (long long)vocab_size);
    return mg__xent_real_cols(vocab_start, vocab_size, mg_cols(logits));
}
MGDEF void mg_xent_max(mg_ctx *ctx, float *rowmax, const mg_tensor *logits,
                       int64_t vocab_start, int64_t vocab_size) {
    int64_t nreal = mg__check_xent("mg_xent_max", logits, vocab_start, vocab_size);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (mg_rows(logits) == 0) return;
        MG_LAUNCH(mg__k_xent_max, mg__cuda_row_grid(mg_rows(logits)), MG__CUDA_THREADS, 0,
                  MG__STREAM(ctx),
            rowmax, logits->data, logits->dtype, mg_cols(logits), nreal);
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_xent_max(ctx, rowmax, logits, nreal);
}
MGDEF void mg_xent_sumexp(mg_ctx *ctx, float *sumexp, float *tlogit, const mg_tensor *logits,
                          const int32_t *targets, const float *rowmax, int64_t vocab_start,
                          int64_t vocab_size) {
    int64_t nreal = mg__check_xent("mg_xent_sumexp", logits, vocab_start, vocab_size);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (mg_rows(logits) == 0) return;
        MG_LAUNCH(mg__k_xent_sumexp, mg__cuda_row_grid(mg_rows(logits)), MG__CUDA_THREADS, 0,
                  MG__STREAM(ctx),
            sumexp, tlogit, logits->data, logits->dtype, targets, rowmax, mg_cols(logits), nreal,
            vocab_start);
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_xent_sumexp(ctx, sumexp, tlogit, logits, targets, rowmax, vocab_start, nreal);
}
MGDEF void mg_xent_loss(mg_ctx *ctx, float *losses, const float *rowmax, const float *sumexp,
                        const float *tlogit, int64_t N) {
    int64_t r;
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg__f_xent_loss f = {losses, rowmax, sumexp, tlogit};
        mg__cuda_map(ctx, N, f);
        return;
    }
#endif
    (void)ctx;
    for (r = 0; r < N; r++) losses[r] = mg__xent_loss(rowmax[r], sumexp[r], tlogit[r]);
}
/* dloss_at non-NULL: dloss is read there (by the kernel on CUDA).                          */
static void mg__xent_backward(mg_ctx *ctx, mg_tensor *dlogits, const mg_tensor *logits,
                              const int32_t *targets, const float *rowmax, const float *sumexp,
                              float dloss, const float *dloss_at, int64_t vocab_start,
                              int64_t vocab_size) {
    int64_t nreal = mg__check_xent("mg_xent_backward", logits, vocab_start, vocab_size);
    mg__check_2d("mg_xent_backward", "dlogits", dlogits, mg_rows(logits), mg_cols(logits));
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        if (mg_rows(logits) == 0) return;
        MG_LAUNCH(mg__k_xent_backward, mg__cuda_row_grid(mg_rows(logits)), MG__CUDA_THREADS, 0,
                  MG__STREAM(ctx),
            dlogits->data, dlogits->dtype, logits->data, logits->dtype, targets, rowmax, sumexp,
            dloss, dloss_at, mg_cols(logits), nreal, vocab_start);
        MG_CUDA_LAUNCH_CHECK();
        return;
    }
#endif
    mg__cpu_xent_backward(ctx, dlogits, logits, targets, rowmax, sumexp,
                          dloss_at ? *dloss_at : dloss, vocab_start, nreal);
}
MGDEF void mg_xent_backward(mg_ctx *ctx, mg_tensor *dlogits, const mg_tensor *logits,
                            const int32_t *targets, const float *rowmax, const float *sumexp,
                            float dloss, int64_t vocab_start, int64_t vocab_size) {
    mg__xent_backward(ctx, dlogits, logits, targets, rowmax, sumexp, dloss, NULL, vocab_start,
                      vocab_size);
}
MGDEF void mg_xent_backward_at(mg_ctx *ctx, mg_tensor *dlogits, const mg_tensor *logits,
                               const int32_t *targets, const float *rowmax, const float *sumexp,
                               const float *dloss, int64_t vocab_start, int64_t vocab_size) {
    mg__xent_backward(ctx, dlogits, logits, targets, rowmax, sumexp, 0.0f, dloss, vocab_start,
                      vocab_size);
}

/* --- optimizer and norms -------------------------------------------------------------------- */
MGDEF void mg_adamw_step(mg_ctx *ctx, float *param, const float *grad, float *m, float *v,
                         int64_t n, const mg_adamw_hparams *hp, float grad_scale,
                         void *param16, mg_dtype dt16) {
    mg__adamw_k k;
    mg_adamw_args a;
    if (hp->step < 1 || n < 0)
        mg_fatal(__FILE__, __LINE__, "mg_adamw_step: step %d (counts from 1), n %lld", hp->step,
                 (long long)n);
    if (param16) (void)mg_dtype_size(dt16);
    mg_adamw_args_set(&a, hp->lr, hp->step, hp->beta1, hp->beta2);
    a.grad_scale = grad_scale;
    k = mg__adamw_k_of(&a, hp->beta1, hp->beta2, hp->eps, hp->weight_decay);
#ifdef __CUDACC__
    if (mg__is_cuda(ctx)) {
        mg__f_adamw f = {param, grad, m, v, k, param16, dt16};
        mg__cuda_map(ctx, n, f);
        return;
    }
#endif
    mg__cpu_adamw(ctx, param, grad, m, v, n, &k, param16, dt16);
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
        MG_LAUNCH(mg__k_adamw_multi, (unsigned)blocks, MG__CUDA_THREADS, 0, MG__STREAM(ctx),
                  table, n_pieces, total, beta1, beta2, eps, dt16, args);
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
