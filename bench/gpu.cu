/* bench/gpu — megatron.h's CUDA kernels against the GPU's physical limits, and whole-step MFU.

     build/gpu_cuda [--tiny] [--reps N] [--steps N] [--seq T] [--dtype bf16|fp16|fp32]
                    [--model gpt2|llama|all|none] [--no-kernels]

   1. Per kernel, at one layer of GPT-2 124M (micro-batch 8, sequence 1024, hidden 768: N = 8192
      rows, C = 768; --seq changes T): the mean time of --reps calls (default 20, after one
      warm-up) between two CUDA events, the bytes and FLOPs of one call (the formulas of the
      notes beside the kernels in mg_tensor.h: DRAM traffic counting each tensor once), the
      roofline time max(bytes / bandwidth, FLOPs / peak) and the achieved fraction of it (in
      16 bits the tiled attention twice: its 64-row mma.sync kernels, then the 32-row WMMA ones
      through mg_ctx.attn_kernels, as MG_ATTN_KERNELS=wmma selects them). The
      peak is the tensor-core rate for 16-bit GEMMs and the CUDA-core fp32 rate for fp32 GEMMs
      and every other kernel. After the layer's kernels: the embedding forward and backward
      (vocabulary 50304; once per step), the Llama family's rope, SwiGLU and RMSNorm at the
      same N and C, then the fused classifier forward + backward in the trainer's chunks and
      the fused AdamW over 124.4 M parameters (once per step each).
   2. Whole steps (forward, backward, optimizer) of GPT-2 124M (12 layers, hidden 768, vocab
      50257, micro-batch 8, T = 1024) and a ~1.2 B Llama-shaped model (16 layers, hidden 2048,
      32 heads in 8 KV groups, SwiGLU 8192, RMSNorm, rope, untied, vocab 128256, micro-batch 1,
      T = 4096): the median of --steps steps (default 5, after 2 warm-up) and MFU = model
      FLOPs (mg_gpt_flops_per_iteration, Megatron-LM's count) / time / the 16-bit tensor peak.
   Peaks come from the device name (public specifications, dense):
        A100 SXM4 80GB 2.039 TB/s, A100 40GB / PCIe 1.555 TB/s; 312 TFLOP/s bf16/fp16,
        19.5 TFLOP/s fp32;  H100 SXM 3.35 TB/s, 989 TFLOP/s, 67 TFLOP/s fp32;
        H100 PCIe 2.0 TB/s, 756, 51;  H200 4.8 TB/s, 989, 67.
   Any other device: bandwidth measured by a device-to-device copy of 1 GiB, the peaks by an
   8192³ GEMM of mg_gemm in the dtype (16-bit) and in fp32 (said so in the header line).
   --tiny: tiny shapes, 1 rep, 1 step of tiny models — a smoke test (the CUDA emulator's
   check.sh runs build/gpu_emu --tiny); its numbers mean nothing.
   Without a GPU: one line "bench/gpu: skipped: …" and exit status 0 (nothing to measure is
   not a failure of the program); a CUDA error ends it with the library's one-line message. */
#define MG_IMPLEMENTATION   /* a program of its own, as examples/ are */
#include "megatron.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { double bw, tc16, fp32; const char *source; } bench_peaks;
static mg_ctx g_ctx;
static int g_reps = 20;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* Mean milliseconds of one call of f(arg) over g_reps calls after one warm-up. */
static double time_ms(void (*f)(void *), void *arg) {
    cudaEvent_t a, b;
    float ms = 0.0f;
    int i;
    f(arg);
    MG_CUDA_CHECK(cudaEventCreate(&a));
    MG_CUDA_CHECK(cudaEventCreate(&b));
    MG_CUDA_CHECK(cudaEventRecord(a, (cudaStream_t)g_ctx.stream));
    for (i = 0; i < g_reps; i++) f(arg);
    MG_CUDA_CHECK(cudaEventRecord(b, (cudaStream_t)g_ctx.stream));
    MG_CUDA_CHECK(cudaEventSynchronize(b));
    MG_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    MG_CUDA_CHECK(cudaEventDestroy(a));
    MG_CUDA_CHECK(cudaEventDestroy(b));
    return ms / g_reps;
}

/* --- peaks ------------------------------------------------------------------------------- */
typedef struct { void *src, *dst; size_t bytes; } copy_arg;
static void do_copy(void *p) {
    copy_arg *c = (copy_arg *)p;
    mg_copy(&g_ctx, c->dst, c->src, c->bytes);
}
typedef struct { int n; mg_dtype dt; void *a, *b, *c; } gemm_arg;
static void do_gemm(void *p) {
    gemm_arg *g = (gemm_arg *)p;
    mg_gemm(&g_ctx, 0, 0, g->n, g->n, g->n, 1.0f, g->a, g->dt, g->n, g->b, g->dt, g->n, 0.0f,
            g->c, g->dt, g->n);
}
static bench_peaks peaks_of(const char *name, mg_dtype dt, int tiny) {
    bench_peaks p = {0, 0, 0, "public specifications"};
    if (strstr(name, "H200")) { p.bw = 4.8e12; p.tc16 = 989e12; p.fp32 = 67e12; }
    else if (strstr(name, "H100") && strstr(name, "PCIe")) { p.bw = 2.0e12; p.tc16 = 756e12; p.fp32 = 51e12; }
    else if (strstr(name, "H100")) { p.bw = 3.35e12; p.tc16 = 989e12; p.fp32 = 67e12; }
    else if (strstr(name, "A100") && strstr(name, "80GB") && !strstr(name, "PCIe")) { p.bw = 2.039e12; p.tc16 = 312e12; p.fp32 = 19.5e12; }
    else if (strstr(name, "A100")) { p.bw = 1.555e12; p.tc16 = 312e12; p.fp32 = 19.5e12; }
    else {   /* measured: a 1 GiB copy reads and writes 2 GiB; 8192³ GEMMs (64³ with --tiny) */
        size_t mark = mg_arena_mark(&g_ctx), bytes = tiny ? (1u << 20) : (1u << 30);
        int n = tiny ? 64 : 8192;
        copy_arg c = {mg_alloc(&g_ctx, bytes), mg_alloc(&g_ctx, bytes), bytes};
        gemm_arg g = {n, dt, NULL, NULL, NULL};
        mg_memset_zero(&g_ctx, c.src, bytes);
        p.bw = 2.0 * bytes / (time_ms(do_copy, &c) * 1e-3);
        mg_arena_release(&g_ctx, mark);
        g.a = mg_alloc(&g_ctx, (size_t)n * n * 4);
        g.b = mg_alloc(&g_ctx, (size_t)n * n * 4);
        g.c = mg_alloc(&g_ctx, (size_t)n * n * 4);
        mg_memset_zero(&g_ctx, g.a, (size_t)n * n * 4);
        mg_memset_zero(&g_ctx, g.b, (size_t)n * n * 4);
        p.tc16 = 2.0 * n * n * (double)n / (time_ms(do_gemm, &g) * 1e-3);
        g.dt = MG_F32;
        p.fp32 = 2.0 * n * n * (double)n / (time_ms(do_gemm, &g) * 1e-3);
        if (dt == MG_F32) p.tc16 = p.fp32;
        mg_arena_release(&g_ctx, mark);
        p.source = "measured (device not in the table)";
    }
    return p;
}

/* --- per-kernel table ---------------------------------------------------------------------- */
typedef struct {
    int64_t N, C;
    mg_dtype dt;
    mg_tensor x, y, x4, pre4, act4, dx4, w4, b4, w2, wq, bq, q3, w, b, g32, gb32, dwq, dbq;
    mg_tensor lse, dq3;   /* the attention's log-sum-exps (fp32) and dqkv */
    mg_tensor y4;         /* SwiGLU's second gradient */
    mg_tensor wte, wpe, dwte, dwpe;   /* [V, C] and [T, C]; gradients fp32 */
    int32_t *tokens;      /* [B, T] device ids, also the classifier's targets */
    float *rope_cs, *losses;
    void *head_scratch;
    int64_t V, head_rows;
    mg_adamw_piece *adamw_table;       /* device: one piece of adamw_n parameters */
    mg_adamw_args *adamw_args;         /* device */
    int64_t adamw_n;
    int B, T, n_head;
    float *mean, *rstd;
} layer_bufs;
static void k_layernorm_fwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_layernorm_forward(&g_ctx, &L->y, L->mean, L->rstd, &L->x, &L->w, &L->b);
}
static void k_layernorm_bwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_layernorm_backward(&g_ctx, &L->y, &L->g32, &L->gb32, &L->x, &L->x, &L->w, L->mean, L->rstd, 1);
}
static void k_linear_bias(void *p) {   /* QKV: cuBLASLt's BIAS epilogue */
    layer_bufs *L = (layer_bufs *)p;
    mg_linear_forward(&g_ctx, &L->q3, &L->x, &L->wq, &L->bq);
}
static void k_linear_gelu(void *p) {   /* FC1 + GELU: GEMM into fp32, bias + GELU in one pass */
    layer_bufs *L = (layer_bufs *)p;
    mg_linear_gelu_forward(&g_ctx, &L->act4, &L->pre4, &L->x, &L->w4, &L->b4);
}
static void k_linear_dgelu(void *p) {   /* FC2's input gradient through the GELU: GEMM into fp32,
                                          the exact dGELU pass, the bias's column sums */
    layer_bufs *L = (layer_bufs *)p;
    mg_linear_backward_input_gelu(&g_ctx, &L->dx4, &L->b4, &L->x, &L->w2, &L->pre4);
}
static void k_linear_dw(void *p) {   /* QKV's weight gradient (+ bias: the column sums) */
    layer_bufs *L = (layer_bufs *)p;
    mg_linear_backward_weight(&g_ctx, &L->dwq, &L->dbq, &L->q3, &L->x);
}
/* The unfused pieces of the two rows above, for comparison: the plain GEMMs and the GELU
   backward as its own kernel. */
static void k_linear_dinp(void *p) {   /* FC2's input gradient, no epilogue */
    layer_bufs *L = (layer_bufs *)p;
    mg_linear_backward_input(&g_ctx, &L->dx4, &L->x, &L->w2, 0);
}
static void k_gelu_bwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_gelu_backward(&g_ctx, &L->dx4, &L->pre4, &L->dx4);
}
static void k_linear_dw_nobias(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_linear_backward_weight(&g_ctx, &L->dwq, NULL, &L->q3, &L->x);
}
static void k_gelu(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_gelu_forward(&g_ctx, &L->act4, &L->pre4);
}
static void k_add(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_add(&g_ctx, &L->y, &L->y, &L->x);
}
static void k_dropout(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_dropout_forward(&g_ctx, &L->y, &L->x, 0.1f, 12345, 0);
}
static void k_cast(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_tensor f = mg_tensor_wrap(L->dx4.data, MG_F32, 2, L->x.shape);   /* 4·N·C bytes: room */
    mg_cast(&g_ctx, &f, &L->x);
}

static void k_attn_fwd(void *p) {   /* tiled attention, causal: out = x (as [N, C]) */
    layer_bufs *L = (layer_bufs *)p;
    mg_flash_attention_forward(&g_ctx, &L->y, &L->lse, &L->q3, L->B, L->T, L->n_head, L->n_head, NULL);
}
static void k_attn_bwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_flash_attention_backward(&g_ctx, &L->dq3, &L->x, &L->y, &L->lse, &L->q3, L->B, L->T,
                                L->n_head, L->n_head, NULL);
}
/* The same with the context's attention kernels capped (mg_ctx.attn_kernels): in 16 bits the
   32-row WMMA kernels instead of the 64-row mma.sync ones, timed in the same run.            */
static void capped(void (*f)(void *), void *p, mg_attn_kernels cap) {
    mg_attn_kernels was = g_ctx.attn_kernels;
    g_ctx.attn_kernels = cap;
    f(p);
    g_ctx.attn_kernels = was;
}
static void k_attn_fwd_wmma(void *p) { capped(k_attn_fwd, p, MG_ATTN_KERNELS_WMMA); }
static void k_attn_bwd_wmma(void *p) { capped(k_attn_bwd, p, MG_ATTN_KERNELS_WMMA); }

/* The embedding: token rows of wte plus the positions' rows of wpe; backward: the radix sort
   and the deterministic scatter-add into fp32 dwte, and dwpe (GPT-2's vocabulary, T positions). */
static void k_embed_fwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_embedding_forward(&g_ctx, &L->y, L->tokens, L->B, L->T, 0, &L->wte, 0, &L->wpe);
}
static void k_embed_bwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_embedding_backward(&g_ctx, &L->dwte, &L->dwpe, &L->x, L->tokens, L->B, L->T, 0, 0);
}
/* The Llama family's kernels at the same N and C: rope on the queries and keys of a [N, 3C]
   qkv (C/64 heads of 64, all rotated), SwiGLU on [N, 4C], RMSNorm on [N, C]. */
static void k_rope(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_rope_forward(&g_ctx, &L->q3, L->B, L->n_head, L->n_head, 64, 0, L->rope_cs);
}
static void k_swiglu_fwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_swiglu_forward(&g_ctx, &L->dx4, &L->pre4, &L->act4);
}
static void k_swiglu_bwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_swiglu_backward(&g_ctx, &L->x4, &L->y4, &L->dx4, &L->pre4, &L->act4);
}
static void k_rmsnorm_fwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_norm rms = {1, 1e-6f, 0};
    mg_norm_forward(&g_ctx, &rms, &L->y, L->mean, L->rstd, &L->x, &L->w, NULL);
}
static void k_rmsnorm_bwd(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_norm rms = {1, 1e-6f, 0};
    mg_norm_backward(&g_ctx, &rms, &L->y, &L->g32, NULL, &L->x, &L->x, &L->w, L->mean, L->rstd, 1);
}
/* The output layer and the loss, forward and backward in chunks of head_rows rows (the
   trainer's MG_CLASSIFIER_CHUNK_BYTES_CUDA budget), tied to wte: dx into y, dw into dwte. */
static void k_classifier(void *p) {
    layer_bufs *L = (layer_bufs *)p;
    mg_classifier c;
    memset(&c, 0, sizeof c);
    c.x = &L->x; c.w = &L->wte; c.targets = L->tokens;
    c.vocab_start = 0; c.vocab_size = L->V;
    c.losses = L->losses; c.dloss = 1.0f / (float)L->N;
    c.dx = &L->y; c.dw = &L->dwte;
    c.chunk_rows = L->head_rows; c.scratch = L->head_scratch;
    mg_classifier_fused(&g_ctx, &c);
}
static void k_adamw(void *p) {   /* one launch over adamw_n parameters with their 16-bit copy */
    layer_bufs *L = (layer_bufs *)p;
    mg_adamw_multi(&g_ctx, L->adamw_table, 1, L->adamw_n, 0.9f, 0.95f, 1e-8f, L->dt, L->adamw_args);
}

typedef struct { const char *name; void (*f)(void *); double bytes, flops; int gemm; } kernel_row;

static void kernel_table(const bench_peaks *pk, int B, int T, int64_t C, mg_dtype dt) {
    int64_t N = (int64_t)B * T;
    layer_bufs L;
    double s = (double)mg_dtype_size(dt), n = (double)N, c = (double)C;
    size_t mark = mg_arena_mark(&g_ctx);
    int i;
    memset(&L, 0, sizeof L);
    L.N = N; L.C = C; L.dt = dt;
    L.x = mg_tensor_2d(&g_ctx, dt, N, C);       L.y = mg_tensor_2d(&g_ctx, dt, N, C);
    L.x4 = mg_tensor_2d(&g_ctx, dt, N, 4 * C);  L.pre4 = mg_tensor_2d(&g_ctx, dt, N, 4 * C);
    L.act4 = mg_tensor_2d(&g_ctx, dt, N, 4 * C); L.dx4 = mg_tensor_2d(&g_ctx, dt, N, 4 * C);
    L.w4 = mg_tensor_2d(&g_ctx, dt, 4 * C, C);  L.b4 = mg_tensor_2d(&g_ctx, dt, 1, 4 * C);
    L.w2 = mg_tensor_2d(&g_ctx, dt, C, 4 * C);
    L.wq = mg_tensor_2d(&g_ctx, dt, 3 * C, C);  L.bq = mg_tensor_2d(&g_ctx, dt, 1, 3 * C);
    L.q3 = mg_tensor_2d(&g_ctx, dt, N, 3 * C);
    L.w = mg_tensor_2d(&g_ctx, dt, 1, C);       L.b = mg_tensor_2d(&g_ctx, dt, 1, C);
    L.g32 = mg_tensor_2d(&g_ctx, MG_F32, 1, C); L.gb32 = mg_tensor_2d(&g_ctx, MG_F32, 1, C);
    L.dwq = mg_tensor_2d(&g_ctx, MG_F32, 3 * C, C); L.dbq = mg_tensor_2d(&g_ctx, MG_F32, 1, 3 * C);
    L.B = B; L.T = T; L.n_head = (int)(C / 64);   /* GPT-2's head dim 64 */
    L.lse = mg_tensor_2d(&g_ctx, MG_F32, (int64_t)B * L.n_head, T);
    L.dq3 = mg_tensor_2d(&g_ctx, dt, N, 3 * C);
    L.mean = (float *)mg_alloc(&g_ctx, (size_t)N * 4);
    L.rstd = (float *)mg_alloc(&g_ctx, (size_t)N * 4);
    L.y4 = mg_tensor_2d(&g_ctx, dt, N, 4 * C);
    L.V = C >= 768 ? 50304 : 512;   /* GPT-2's vocabulary padded to 128 (tiny: 512) */
    L.wte = mg_tensor_2d(&g_ctx, dt, L.V, C);     L.wpe = mg_tensor_2d(&g_ctx, dt, T, C);
    L.dwte = mg_tensor_2d(&g_ctx, MG_F32, L.V, C); L.dwpe = mg_tensor_2d(&g_ctx, MG_F32, T, C);
    L.losses = (float *)mg_alloc(&g_ctx, (size_t)N * 4);
    L.head_rows = mg_classifier_chunk_rows(N, L.V, dt, MG_CLASSIFIER_CHUNK_BYTES_CUDA);
    L.head_scratch = mg_alloc(&g_ctx, mg_classifier_scratch_bytes(L.head_rows, L.V, dt));
    {   /* token ids spread over the vocabulary; rope's table for head dim 64 */
        int32_t *tok = (int32_t *)malloc(sizeof(int32_t) * (size_t)N);
        float *cs = (float *)malloc(sizeof(float) * (size_t)T * 64);
        mg_rope rope = {10000.0f, 0, 0.0f, 0.0f, 0.0f, 0, 0.0f};
        for (i = 0; i < N; i++) tok[i] = (int32_t)(mg_rand_u32(11, (uint64_t)i) % (uint32_t)L.V);
        mg_rope_table(cs, T, 64, &rope);
        L.tokens = (int32_t *)mg_alloc(&g_ctx, sizeof(int32_t) * (size_t)N);
        L.rope_cs = (float *)mg_alloc(&g_ctx, sizeof(float) * (size_t)T * 64);
        mg_copy_to_device(&g_ctx, L.tokens, tok, sizeof(int32_t) * (size_t)N);
        mg_copy_to_device(&g_ctx, L.rope_cs, cs, sizeof(float) * (size_t)T * 64);
        free(tok);
        free(cs);
    }
    {   /* AdamW over GPT-2 124M's parameters (12 layers of 12·C² weights, the embeddings) */
        mg_adamw_piece piece;
        mg_adamw_args args;
        mg_tensor f;
        L.adamw_n = 12 * 12 * C * C + (L.V + 1024) * C;
        f = mg_tensor_2d(&g_ctx, MG_F32, 4, L.adamw_n);   /* param, grad, m, v */
        mg_fill(&g_ctx, &f, 0.01f);
        memset(&piece, 0, sizeof piece);
        piece.param = (float *)f.data;
        piece.grad = piece.param + L.adamw_n;
        piece.m = piece.param + 2 * L.adamw_n;
        piece.v = piece.param + 3 * L.adamw_n;
        piece.param16 = dt == MG_F32 ? NULL : mg_alloc(&g_ctx, (size_t)L.adamw_n * 2);
        piece.n = L.adamw_n;
        piece.wd_mult = 1.0f;
        mg_adamw_table_begin(&piece, 1);
        memset(&args, 0, sizeof args);
        mg_adamw_args_set(&args, 1e-4f, 10, 0.9f, 0.95f);
        args.weight_decay = 0.1f;
        args.grad_scale = 1.0f;
        L.adamw_table = (mg_adamw_piece *)mg_alloc(&g_ctx, sizeof piece);
        L.adamw_args = (mg_adamw_args *)mg_alloc(&g_ctx, sizeof args);
        mg_copy_to_device(&g_ctx, L.adamw_table, &piece, sizeof piece);
        mg_copy_to_device(&g_ctx, L.adamw_args, &args, sizeof args);
    }
    {   /* small values everywhere (no inf/nan to slow anything down) */
        mg_tensor *all[] = {&L.x, &L.y, &L.x4, &L.pre4, &L.act4, &L.dx4, &L.w4, &L.b4, &L.w2,
                            &L.wq, &L.bq, &L.q3, &L.w, &L.b, &L.g32, &L.gb32, &L.dwq, &L.dbq,
                            &L.dq3, &L.y4, &L.wte, &L.wpe, &L.dwte, &L.dwpe};
        for (i = 0; i < (int)(sizeof all / sizeof all[0]); i++) mg_fill(&g_ctx, all[i], 0.01f);
    }
    {
        /* bytes: each tensor once (DRAM); FLOPs: 2 per multiply-add, ~20 per exp-based op */
        kernel_row rows[] = {
            {"layernorm forward", k_layernorm_fwd, 2 * n * c * s + 2 * c * s + 8 * n, 8 * n * c, 0},
            {"layernorm backward (+dw, db)", k_layernorm_bwd, 3 * n * c * s + c * s + 8 * n + 16 * c, 16 * n * c, 0},
            {"linear QKV + bias (cuBLASLt BIAS)", k_linear_bias, (n * c + 3 * c * c + 3 * c + 3 * n * c) * s, 2 * n * c * 3 * c, 1},
            {"linear FC1 + bias + GELU (GEMM fp32, GELU)", k_linear_gelu, (n * c + 4 * c * c + 4 * c + 8 * n * c) * s + (s == 4 ? 0 : 2 * 4 * 4 * n * c), 2 * n * c * 4 * c + 20 * 4 * n * c, 1},
            /* fp32 accumulator (16-bit runs): written by the GEMM, read and rewritten by the dGELU
               pass, read by the column sums; pre read, dpre written */
            {"FC2 dinp through GELU (GEMM fp32, dGELU + colsum)", k_linear_dgelu, (n * c + 4 * c * c + 8 * n * c + 4 * c) * s + (s == 4 ? 0 : 2 * 4 * 4 * n * c), 2 * n * c * 4 * c + 26 * 4 * n * c, 1},
            {"FC2 dinp, plain GEMM (no epilogue)", k_linear_dinp, (n * c + 4 * c * c + 4 * n * c) * s, 2 * n * c * 4 * c, 1},
            {"GELU backward (unfused)", k_gelu_bwd, 12 * n * c * s, 25 * 4 * n * c, 0},
            {"linear QKV weight gradient + bias", k_linear_dw, (n * c + 3 * n * c) * s + 2 * (3 * c * c + 3 * c) * 4, 2 * n * c * 3 * c + 3 * n * c, 1},
            {"linear QKV weight gradient, no bias", k_linear_dw_nobias, (n * c + 3 * n * c) * s + 2 * 3 * c * c * 4, 2 * n * c * 3 * c, 1},
            {"GELU (unfused)", k_gelu, 8 * n * c * s, 20 * 4 * n * c, 0},
            {"residual add", k_add, 3 * n * c * s, n * c, 0},
            {"dropout", k_dropout, 2 * n * c * s, 7 * n * c, 0},
            {"cast to fp32", k_cast, n * c * (s + 4), 0, 0},
            /* causal: half of the T² scores; forward 2 products, backward 5 (S and dP
               recomputed, dQ, dK, dV), 2·hd FLOPs per score each: on tensor cores when 16-bit */
            {"tiled attention forward (causal)", k_attn_fwd, 4 * n * c * s + 4 * n * (c / 64), 2.0 * n * T * c, 1},
            {"tiled attention backward (causal)", k_attn_bwd, 8 * n * c * s + 8 * n * (c / 64), 5.0 * n * T * c, 1},
            {"tiled attention forward (causal), MG_ATTN_KERNELS=wmma", k_attn_fwd_wmma, 4 * n * c * s + 4 * n * (c / 64), 2.0 * n * T * c, 1},
            {"tiled attention backward (causal), MG_ATTN_KERNELS=wmma", k_attn_bwd_wmma, 8 * n * c * s + 8 * n * (c / 64), 5.0 * n * T * c, 1},
            /* the rows gathered from wte, wpe's T rows, the ids */
            {"embedding forward (wte rows + wpe)", k_embed_fwd, (2 * n * c + T * c) * s + 4 * n, n * c, 0},
            /* sort: 2 passes over the ids; add: dout once, each touched dwte row read and
               written (at most n rows); dwpe: dout once more, its rows read and written */
            {"embedding backward (sort, dwte, dwpe; fp32)", k_embed_bwd, 2 * n * c * s + 8 * n * c + 8 * T * c + 32 * n, 2 * n * c, 0},
            /* the queries' and keys' 2·C values of each row read and written, the table */
            {"rope (queries and keys, hd 64)", k_rope, 4 * n * c * s + 4 * T * 64, 6 * n * c, 0},
            {"SwiGLU forward [N, 4C]", k_swiglu_fwd, 12 * n * c * s, 22 * 4 * n * c, 0},
            {"SwiGLU backward [N, 4C]", k_swiglu_bwd, 20 * n * c * s, 45 * 4 * n * c, 0},
            {"RMSNorm forward", k_rmsnorm_fwd, 2 * n * c * s + c * s + 4 * n, 5 * n * c, 0},
            {"RMSNorm backward (+dw)", k_rmsnorm_bwd, 3 * n * c * s + c * s + 4 * n + 8 * c, 12 * n * c, 0},
            /* logits, dx and dw GEMMs (6·N·C·V); per chunk w read twice and dw (fp32) read and
               written; the fp32 logits written by the GEMM, read by the one pass, read by the
               backward, which writes the gradient (16-bit: into a copy; fp32: in place) that the
               two GEMMs read: 18 (16-bit) or 24 (fp32) bytes per logit; x read twice, dx written */
            {"fused classifier, forward + backward", k_classifier,
             (double)((N + L.head_rows - 1) / L.head_rows) * ((double)L.V * c * (2 * s + 8)) +
                 (s == 4 ? 24.0 : 18.0) * n * L.V + 3 * n * c * s + 8 * n,
             6.0 * n * c * L.V, 1},
            /* param, grad, m, v read; param, m, v written; the 16-bit copy written */
            {"fused AdamW (GPT-2 124M's parameters)", k_adamw,
             (double)L.adamw_n * (28 + (s == 4 ? 0 : 2)), 20.0 * L.adamw_n, 0},
        };
        printf("| kernel | ms | GB/s | TFLOP/s | roofline ms | of roofline |\n|---|---|---|---|---|---|\n");
        for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
            kernel_row *r = &rows[i];
            if (dt == MG_F32 && (r->f == k_attn_fwd_wmma || r->f == k_attn_bwd_wmma))
                continue;   /* fp32 storage runs the CUDA-core kernels either way */
            double ms = time_ms(r->f, &L), peak = r->gemm && dt != MG_F32 ? pk->tc16 : pk->fp32;
            double roof = 1e3 * (r->bytes / pk->bw > r->flops / peak ? r->bytes / pk->bw : r->flops / peak);
            printf("| %s | %.4f | %.0f | %.1f | %.4f | %.0f%% |\n", r->name, ms,
                   r->bytes / (ms * 1e-3) / 1e9, r->flops / (ms * 1e-3) / 1e12, roof,
                   100.0 * roof / ms);
        }
    }
    mg_arena_release(&g_ctx, mark);
}

/* --- whole steps ------------------------------------------------------------------------------ */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* One model through the trainer on random tokens; prints its line. */
static int whole_step(const char *label, const char *model_flags, int T, int batch, int steps,
                      const char *dtype_flag, double peak, const char *dir) {
    char line[2048], path[600], err[MG_ERRLEN];
    char *words[96], *w;
    int n = 0, i, vocab = 256;
    int64_t k, n_tokens;
    int32_t *tokens;
    mg_train_args args;
    mg_trainer tr;
    double *t, flops;
    const char *v = strstr(model_flags, "--vocab-size ");
    if (v) vocab = atoi(v + 13);
    n_tokens = (int64_t)(steps + 2) * batch * T + 1;
    tokens = (int32_t *)malloc(sizeof(int32_t) * (size_t)n_tokens);
    for (k = 0; k < n_tokens; k++) tokens[k] = (int32_t)(mg_rand_u32(7, (uint64_t)k) % (uint32_t)vocab);
    {   /* one document of int32 ids in a Megatron indexed dataset (vocabularies past 65535) */
        mg_idx_writer wr;
        snprintf(path, sizeof path, "%s/tokens", dir);
        if (mg_idx_writer_begin(&wr, path, MG_IDX_I32, err, sizeof err) ||
            mg_idx_writer_add(&wr, tokens, n_tokens, err, sizeof err) ||
            (mg_idx_writer_end_document(&wr), mg_idx_writer_finish(&wr, err, sizeof err))) {
            fprintf(stderr, "bench/gpu: error: %s\n", err);
            free(tokens);
            return 1;
        }
    }
    free(tokens);
    snprintf(line, sizeof line, "%s --data-path %s --data-order sequential --split 1,0,0 "
             "--seq-length %d --max-position-embeddings %d --micro-batch-size %d "
             "--global-batch-size %d --train-iters %d --lr 1e-4 --lr-decay-style constant "
             "--eval-iters 0 --device cuda %s", model_flags, path, T, T, batch, batch,
             steps + 2, dtype_flag);
    words[n++] = (char *)"bench_gpu";
    for (w = strtok(line, " "); w && n < 95; w = strtok(NULL, " ")) words[n++] = w;
    mg_train_args_default(&args);
    if (mg_train_parse(&args, n, words, err, sizeof err) ||
        mg_trainer_setup(&tr, &args, err, sizeof err)) {
        fprintf(stderr, "bench/gpu: error: %s: %s\n", label, err);
        return 1;
    }
    t = (double *)malloc(sizeof(double) * (size_t)steps);
    for (i = 0; i < 2 + steps; i++) {
        double t0 = now_s();
        mg_trainer_step(&tr);   /* reads the loss back: the step has finished */
        if (i >= 2) t[i - 2] = now_s() - t0;
    }
    qsort(t, (size_t)steps, sizeof(double), cmp_double);
    flops = mg_gpt_flops_per_iteration(&tr.cfg, batch);
    printf("| %s | %.2f M | %d × %d | %.1f | %.1f | %.1f%% |\n", label,
           mg_gpt_num_params(&tr.cfg) / 1e6, batch, T, t[steps / 2] * 1e3,
           flops / t[steps / 2] / 1e12, 100.0 * flops / t[steps / 2] / peak);
    fflush(stdout);
    free(t);
    mg_trainer_free(&tr);
    return 0;
}

int main(int argc, char **argv) {
    int tiny = 0, steps = 5, seq = 0, i, rc = 0, kernels = 1, gpt2 = 1, llama = 1;
    mg_dtype dt = MG_BF16;
    const char *dtype_flag = "--bf16";
    mg_ctx_desc d;
    bench_peaks pk;
    char dir[] = "/tmp/mg_bench_gpu_XXXXXX", cmd[600];
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tiny")) { tiny = 1; g_reps = 1; steps = 1; continue; }
        if (i + 1 < argc && !strcmp(argv[i], "--reps") && (g_reps = atoi(argv[i + 1])) > 0) { i++; continue; }
        if (i + 1 < argc && !strcmp(argv[i], "--steps") && (steps = atoi(argv[i + 1])) > 0) { i++; continue; }
        if (i + 1 < argc && !strcmp(argv[i], "--seq") && (seq = atoi(argv[i + 1])) > 0) { i++; continue; }
        if (i + 1 < argc && !strcmp(argv[i], "--model")) {   /* whole steps of which models */
            const char *v = argv[++i];
            if (!strcmp(v, "gpt2")) { llama = 0; continue; }
            if (!strcmp(v, "llama")) { gpt2 = 0; continue; }
            if (!strcmp(v, "all")) continue;
            if (!strcmp(v, "none")) { gpt2 = llama = 0; continue; }
        }
        if (!strcmp(argv[i], "--no-kernels")) { kernels = 0; continue; }
        if (i + 1 < argc && !strcmp(argv[i], "--dtype")) {
            const char *v = argv[++i];
            if (!strcmp(v, "bf16")) { dt = MG_BF16; dtype_flag = "--bf16"; continue; }
            if (!strcmp(v, "fp16")) { dt = MG_F16; dtype_flag = "--fp16"; continue; }
            if (!strcmp(v, "fp32")) { dt = MG_F32; dtype_flag = ""; continue; }
        }
        fprintf(stderr, "bench/gpu: error: bad argument %s (usage: build/gpu_cuda [--tiny] "
                "[--reps N] [--steps N] [--seq T] [--dtype bf16|fp16|fp32] [--model gpt2|llama|all|none] "
                "[--no-kernels])\n", argv[i]);
        return 2;
    }
    if (!mg_cuda_available()) {
        printf("bench/gpu: skipped: no CUDA GPU answers cudaGetDeviceCount (nothing to measure)\n");
        return 0;
    }
    memset(&d, 0, sizeof d);
    d.device = MG_DEVICE_CUDA;
    d.arena_bytes = (size_t)(tiny ? 256 : 8192) << 20;
    mg_ctx_init(&g_ctx, &d);
    pk = peaks_of(mg_device_name(&g_ctx), dt, tiny);
    printf("bench/gpu: %s, %s; peaks (%s): %.0f GB/s, %.0f TFLOP/s %s tensor, %.1f TFLOP/s "
           "fp32; %d reps per kernel\n", mg_device_name(&g_ctx), mg_dtype_name(dt), pk.source,
           pk.bw / 1e9, pk.tc16 / 1e12, mg_dtype_name(dt), pk.fp32 / 1e12, g_reps);
    if (kernels) {
        int T = seq ? seq : tiny ? 16 : 1024, B = tiny ? 4 : 8, C = tiny ? 64 : 768;
        printf("\nkernels at one layer of GPT-2 124M: N = %d rows (micro-batch %d x sequence %d), "
               "C = %d\n\n", B * T, B, T, C);
        kernel_table(&pk, B, T, C, dt);
    }
    mg_ctx_free(&g_ctx);
    if (!mkdtemp(dir)) { perror("bench/gpu: mkdtemp"); return 1; }
    printf("\nwhole training steps (forward, backward, AdamW), median of %d after 2 warm-up; "
           "MFU against %.0f TFLOP/s\n\n| model | parameters | batch × T | ms/step | TFLOP/s | "
           "MFU |\n|---|---|---|---|---|---|\n", steps, pk.tc16 / 1e12);
    if (tiny) {
        rc |= whole_step("tiny GPT", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                         "--vocab-size 256", 32, 2, steps, dtype_flag, pk.tc16, dir);
        rc |= whole_step("tiny Llama", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                         "--group-query-attention --num-query-groups 2 --normalization RMSNorm "
                         "--swiglu --position-embedding-type rope --untie-embeddings-and-output-weights "
                         "--disable-bias-linear --vocab-size 256", 32, 2, steps, dtype_flag, pk.tc16, dir);
    } else {
        if (gpt2) rc |= whole_step("GPT-2 124M", "--num-layers 12 --hidden-size 768 --num-attention-heads 12 "
                         "--vocab-size 50257", seq ? seq : 1024, 8, steps, dtype_flag, pk.tc16, dir);
        if (llama) rc |= whole_step("Llama-shaped 1.2B", "--num-layers 16 --hidden-size 2048 "
                         "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
                         "--ffn-hidden-size 8192 --normalization RMSNorm --swiglu "
                         "--position-embedding-type rope --untie-embeddings-and-output-weights "
                         "--disable-bias-linear --vocab-size 128256", seq ? seq : 4096, 1, steps,
                         dtype_flag, pk.tc16, dir);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench/gpu: could not remove %s\n", dir);
    return rc;
}
