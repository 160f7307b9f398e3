/* mg_tensor.h — memory, tensors and every math op of a GPT layer, forward and backward,
   on a CPU backend (OpenBLAS + OpenMP) and a CUDA backend (cuBLAS + kernels).
   Part of megatron.h. Public domain-style MIT license at the end of the file.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_tensor.h"
   Every other file includes it without the define. Define MG_STATIC as well to make every
   function static (private to that translation unit).

   TOUR
     1. Configuration macros: MGDEF, MG_HD, MG_ASSERT, MG_MALLOC/MG_FREE.
     2. Context: the device (CPU or CUDA), the arena allocator with its high-water mark, the BLAS /
        cuBLAS handle and the stream. Nothing allocates inside a training step: buffers come from
        the arena, set up once.
     3. Tensors: a data pointer (device memory on CUDA), a storage dtype (fp32, bf16, fp16) and a
        row-major shape of up to 4 dims. Every op accumulates in fp32 whatever the storage.
     4. The GEMM seam: BLAS column-major arguments, passed unchanged to cblas_sgemm (CPU) or
        cublasGemmEx / cublasGemmStridedBatchedEx (CUDA). All row-major reasoning lives above it.
     5. Ops, each forward beside its backward, shapes stated once per op:
        embedding · layernorm · linear (forward, backward-input, backward-weight) · GELU ·
        causal attention core · residual add / scale / axpy · dropout · casts ·
        vocabulary-slice softmax cross-entropy · AdamW · sum of squares.
     6. Implementation: shared per-element/per-row math (MG_HD functions), the CPU backend, the
        CUDA backend (kernels, then launchers).

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

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------------
   1. Configuration
   ------------------------------------------------------------------------------------------ */
#ifndef MGDEF
#ifdef MG_STATIC
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
   goes through mg_fatal, which calls the settable handler (default: print "file:line: msg" to
   stderr and abort()). mg_comm.h installs a handler that aborts the whole job. */
typedef void (*mg_fatal_fn)(const char *file, int line, const char *msg);
MGDEF void mg_set_fatal_handler(mg_fatal_fn fn);
MGDEF void mg_fatal(const char *file, int line, const char *fmt, ...);
#define MG_ASSERT(cond, ...) do { if (!(cond)) mg_fatal(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* ---------------------------------------------------------------------------------------------
   2. Context
   ------------------------------------------------------------------------------------------ */
typedef enum { MG_DEVICE_AUTO = 0, MG_DEVICE_CPU = 1, MG_DEVICE_CUDA = 2 } mg_device;

typedef struct mg_ctx_desc {
    mg_device device;     /* AUTO: CUDA when compiled by nvcc and a GPU is present, else CPU   */
    int cuda_device;      /* CUDA device ordinal (mg_comm picks it from the local rank)          */
    int n_threads;        /* CPU threads for OpenMP/OpenBLAS; 0 = all cores                       */
    size_t arena_bytes;   /* size of the one arena; every mg_alloc comes from it                  */
} mg_ctx_desc;

typedef struct mg_ctx {
    mg_device device;     /* resolved: MG_DEVICE_CPU or MG_DEVICE_CUDA                           */
    int n_threads;
    char *arena;          /* base of the arena (device memory on CUDA)                          */
    size_t arena_size, arena_used, arena_peak;
    void *blas;           /* cublasHandle_t on CUDA; unused on CPU                              */
    void *stream;         /* cudaStream_t on CUDA; unused on CPU                                */
} mg_ctx;

MGDEF void mg_ctx_init(mg_ctx *ctx, const mg_ctx_desc *desc);
MGDEF void mg_ctx_free(mg_ctx *ctx);
MGDEF const char *mg_device_name(const mg_ctx *ctx);     /* "cpu" or "cuda:<name>"           */
MGDEF int mg_cuda_available(void);                        /* 0 when not built by nvcc          */

/* Arena: bump allocator, 256-byte aligned. mark/release give scoped scratch; arena_peak is the
   high-water mark (used by bench/memory). mg_alloc fails through mg_fatal when exhausted.     */
MGDEF void *mg_alloc(mg_ctx *ctx, size_t bytes);
MGDEF size_t mg_arena_mark(const mg_ctx *ctx);
MGDEF void mg_arena_release(mg_ctx *ctx, size_t mark);
MGDEF void mg_arena_reset_peak(mg_ctx *ctx);

MGDEF void mg_copy_to_device(mg_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes);
MGDEF void mg_copy_to_host(mg_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes);
MGDEF void mg_copy(mg_ctx *ctx, void *dst_dev, const void *src_dev, size_t bytes); /* dev->dev */
MGDEF void mg_memset_zero(mg_ctx *ctx, void *dst_dev, size_t bytes);
MGDEF void mg_sync(mg_ctx *ctx);                          /* wait for the stream (no-op CPU)  */

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
      A, B may be fp32, bf16 or fp16 (both the same dtype); C has its own dtype; compute is fp32.
      CPU: cblas_sgemm(CblasColMajor, ...) (16-bit inputs are widened to fp32 in arena scratch
      first: the products are exact in fp32, as with cuBLAS's fp32 compute). CUDA: cublasGemmEx
      with CUBLAS_COMPUTE_32F, the very same arguments.
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
   backward: scatter-ADD dout into dwte (same range rule) and, if dwpe non-NULL, into dwpe.     */
MGDEF void mg_embedding_forward(mg_ctx *ctx, mg_tensor *out, const int32_t *tokens, int B, int T,
                                int t0, const mg_tensor *wte, int64_t vocab_start,
                                const mg_tensor *wpe);
MGDEF void mg_embedding_backward(mg_ctx *ctx, mg_tensor *dwte, mg_tensor *dwpe,
                                 const mg_tensor *dout, const int32_t *tokens, int B, int T,
                                 int t0, int64_t vocab_start);

/* LayerNorm over the last dim (eps 1e-5). inp, out: [N, C]; weight, bias: [C];
   mean, rstd: fp32 [N] saved for the backward.
   backward: dinp OVERWRITTEN unless accumulate != 0 (then +=, for the residual stream);
   dweight, dbias ACCUMULATE.                                                                   */
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
   Dropout on the probabilities (p_drop > 0) uses mg_dropout's hash with the global head index
   (head_offset + h, of n_head_total) so the mask does not depend on how heads are split.
   backward: datt is scratch [B, n_head, T, T]; dqkv OVERWRITTEN.                              */
typedef struct mg_attn_dropout {
    float p;              /* 0 disables                                                         */
    uint64_t seed;        /* mixes seed, layer, microbatch: see mg_dropout_key                  */
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

/* Elementwise. out may alias a or b.                                                          */
MGDEF void mg_add(mg_ctx *ctx, mg_tensor *out, const mg_tensor *a, const mg_tensor *b);
MGDEF void mg_axpy(mg_ctx *ctx, mg_tensor *y, float alpha, const mg_tensor *x); /* y += a·x */
MGDEF void mg_scale(mg_ctx *ctx, mg_tensor *x, float alpha);                     /* x *= a  */
MGDEF void mg_fill(mg_ctx *ctx, mg_tensor *x, float value);
MGDEF void mg_cast(mg_ctx *ctx, mg_tensor *dst, const mg_tensor *src);   /* any dtype -> any */

/* Dropout keyed by global coordinates: element (row, col) of the full unsplit [rows, cols]
   tensor is kept iff hash(key, row·cols + col) >= p·2^32, and scaled by 1/(1-p). The local
   tensor holds global rows [row_offset, row_offset + local rows) and all cols. Backward
   recomputes the same mask (nothing is stored). out may alias inp.                           */
MGDEF uint64_t mg_dropout_key(uint64_t seed, uint64_t site, uint64_t microbatch);
MGDEF void mg_dropout_forward(mg_ctx *ctx, mg_tensor *out, const mg_tensor *inp, float p,
                              uint64_t key, int64_t row_offset);
MGDEF void mg_dropout_backward(mg_ctx *ctx, mg_tensor *dinp, const mg_tensor *dout, float p,
                               uint64_t key, int64_t row_offset);

/* Counter-based random numbers (used for initialisation and dropout): a pure function of
   (key, index), identical on every backend, so each rank makes exactly its shard of a tensor.
   Philox-style mixing; normal via Box-Muller of two uniforms.                                */
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
   rowmax, sumexp, tlogit, losses: fp32 [N], device memory on CUDA.                           */
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

/* Σ x² over n fp32 values, accumulated in double on the CPU and in fp32 blocks + fp64 final on
   CUDA; returned to the host (synchronises). Also reports whether any value is inf/nan.     */
MGDEF double mg_sumsq(mg_ctx *ctx, const float *x, int64_t n, int *nonfinite);

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

/* (to be written: shared MG_HD math, CPU backend, CUDA backend) */

#endif /* MG_TENSOR_IMPLEMENTED */
#endif /* MG_IMPLEMENTATION */
