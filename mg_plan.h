/* mg_plan.h — the paper's performance and memory model as a library: predicts the time,
   throughput and memory per GPU of one GPT training iteration for any PTD-P layout on a GPU
   cluster, and searches for the best layout. Part of megatron.h; needs only the C library
   (and OpenBLAS for the CPU calibration, see 6). MIT license at the end of the file.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_plan.h"
   The command-line tool is tools/mg_plan.c (build/mg_plan): a main() around mg_plan_main.

   TOUR
     1. Inputs: the model (l, h, a, s, V, and the Llama family's options: RMSNorm, SwiGLU,
        MLP width, grouped-query attention, head dimension, rotary positions, untied output
        layer, no biases — gpt_train's flags), the training (global batch B, precision, gradient
        dtype, overlap), the cluster (GPU count, GPUs per node, one GPU description — presets
        with cited vendor numbers), the layout (t, p, d, v, microbatch b, recompute, sequence
        parallel, distributed optimizer).
     2. Counting (PAPER.md, Korthikanti et al. 2022, Megatron-Core docs): parameters (tensor
        by tensor, as megatron.h's mg_gpt_num_params), FLOPs per iteration as the paper counts
        them (Megatron-LM's num_floating_point_operations for the Llama options, equal to
        megatron.h's mg_gpt_flops_per_iteration), pipeline bubble fraction, activation bytes per
        layer, bytes per parameter of weights + gradients + optimizer state.
     3. Cost primitives: GEMM time (roofline + tile and wave quantization, capped by the
        measured best GEMM efficiency), memory-bound kernel time, ring collectives (α–β over
        NVLink or InfiniBand), pipeline point-to-point transfers.
     4. The iteration: per-microbatch time of each pipeline stage (GEMMs, memory-bound ops,
        tensor-parallel all-reduces, pipeline transfers), the pipeline schedule, the
        data-parallel gradient reduction and the optimizer step; memory of the worst stage.
     5. Search: every valid layout, keep those that fit, rank by predicted iteration time.
        Context parallelism (c): each GPU holds s/c tokens of every sequence; activations and
        all token-local work fall as 1/c, the attention core computes its s/c queries against
        all s keys, the ring moves K/V (c − 1 hops forward, again backward) and dK/dV (c hops,
        fp32) per layer, overlapped with the attention of the block in hand (but the last
        dK/dV hop); gradients reduce
        over d·c GPUs and the distributed optimizer shards over them.
     6. CPU calibration: cblas_sgemm rate and memcpy bandwidth, so the same model predicts
        gpt_train's iteration time on this machine (--gpu cpu).
     7. The command-line tool, as a function (mg_plan_main) so tests can drive it.

   UNITS: time in seconds, FLOP/s as FLOP/s (printed in TFLOP/s), bandwidth in GB/s = 1e9 B/s
   (vendors' convention), memory in GiB = 2^30 bytes (what nvidia-smi reports; vendors' "80GB"
   is 80 GiB on the device).

   WHAT THE MODEL LEAVES OUT (see docs: plan section of the README): kernel fusion beyond
   Megatron's three fused kernels, attention kernels of the FlashAttention kind (the model
   materialises the a·s·s score matrix as Megatron did in 2021), stragglers, network
   congestion, and data loading.
*/
#ifndef MG_PLAN_H
#define MG_PLAN_H

#include <stddef.h>
#include <stdio.h>

#ifndef MGDEF
#ifdef MG_STATIC
#define MGDEF static
#else
#define MGDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
   1. Inputs
   ------------------------------------------------------------------------------------------ */
enum { MG_PLAN_BF16 = 0, MG_PLAN_FP16 = 1, MG_PLAN_FP32 = 2 };                 /* precision */
enum { MG_PLAN_RECOMPUTE_NONE = 0, MG_PLAN_RECOMPUTE_SELECTIVE = 1, MG_PLAN_RECOMPUTE_FULL = 2 };
#define MG_PLAN_ANY (-1)   /* in a search constraint: this dimension is free                   */

typedef struct mg_plan_model {
    int num_layers;            /* l */
    int hidden_size;           /* h */
    int num_attention_heads;   /* a */
    int seq_length;            /* s */
    int vocab_size;            /* V (padded to a multiple of N·t for the compute, as Megatron) */
    int make_vocab_size_divisible_by; /* N, --make-vocab-size-divisible-by (0: 128)           */
    /* The Llama family, gpt_train's flags (Megatron-LM's names); zero everywhere is GPT-2, so
       a model that sets only the five sizes above is the paper's GPT.                        */
    int num_query_groups;      /* g, --num-query-groups: key/value heads (0: a, one per head)  */
    int kv_channels;           /* head dimension, --kv-channels (0: h/a)                       */
    int ffn_hidden_size;       /* F, --ffn-hidden-size (0: 4h, with SwiGLU int(4h·2/3/64)·64)  */
    int swiglu;                /* --swiglu: three h×F matrices (gate, up, down) instead of two */
    int rmsnorm;               /* --normalization RMSNorm: norms with a weight and no bias     */
    int position_embedding;    /* MG_PLAN_POS_LEARNED (0), MG_PLAN_POS_ROPE, MG_PLAN_POS_NONE  */
    int max_position_embeddings; /* rows of the learned position table (0: s)                 */
    int untie_embeddings;      /* --untie-embeddings-and-output-weights: an output V×h matrix
                                  of its own (no embedding all-reduce between first and last
                                  stage then)                                                 */
    int disable_bias_linear;   /* --disable-bias-linear: no biases on the linear layers        */
    int add_qkv_bias;          /* --add-qkv-bias: the Q/K/V bias even so                        */
    int flash_attention;       /* --attention-backend flash: the tiled attention (gpt_train's
                                  default), which stores no attention scores and moves none
                                  through memory, its backward recomputing QKᵀ; 0 (the default
                                  here): the paper's unfused attention                         */
} mg_plan_model;
enum { MG_PLAN_POS_LEARNED = 0, MG_PLAN_POS_ROPE = 1, MG_PLAN_POS_NONE = 2 };

typedef struct mg_plan_training {
    long global_batch_size;    /* B, sequences per iteration                                    */
    int precision;             /* MG_PLAN_BF16 / FP16 / FP32                                     */
    int grads_in_fp32;         /* --accumulate-allreduce-grads-in-fp32 (always on for bf16)     */
    int overlap_grad_reduce;   /* --overlap-grad-reduce: DP reduction overlaps the backward      */
    int scatter_gather;        /* pipeline scatter/gather (Megatron's default: on)              */
    int grad_accum_fusion;     /* weight-gradient GEMMs accumulate straight into the gradient
                                  buffer (Megatron's default, and megatron.h's); 0 =
                                  --no-gradient-accumulation-fusion: a separate add per
                                  microbatch, as Megatron did in 2021                           */
    int fused_classifier;      /* --fused-classifier: megatron.h's fused, chunked classifier —
                                  the last stage keeps the [s·b, h] gradient of the output
                                  layer's input per microbatch instead of the fp32 logits
                                  4·s·b·V/t, plus one chunk of logits shared by all microbatches
                                  (at most MG_PLAN_CLASSIFIER_CHUNK_BYTES, _CUDA on a GPU);
                                  0: Megatron's
                                  unfused cross-entropy (the paper's memory)                   */
} mg_plan_training;
/* megatron.h's MG_CLASSIFIER_CHUNK_BYTES and MG_CLASSIFIER_CHUNK_BYTES_CUDA: the fused
   classifier's logits scratch on a CPU (a preset without SMs) and on a GPU. */
#define MG_PLAN_CLASSIFIER_CHUNK_BYTES (64.0 * 1024.0 * 1024.0)
#define MG_PLAN_CLASSIFIER_CHUNK_BYTES_CUDA (1024.0 * 1024.0 * 1024.0)

/* One accelerator plus the links around it. The presets (mg_plan_gpu_preset) fill every field
   from vendor datasheets and published measurements; the model constants at the end are shared
   by all presets and documented where they are set. */
typedef struct mg_plan_gpu {
    char name[32];
    double peak_tflops;        /* dense 16-bit tensor-core peak, TFLOP/s                        */
    double fp32_ratio;         /* fp32 GEMM rate / 16-bit rate (TF32 tensor cores: 1/2)          */
    double memory_gb;          /* device memory, GiB                                             */
    double hbm_gbps;           /* device memory bandwidth, GB/s                                  */
    double nvlink_gbps;        /* NVLink bandwidth per GPU per direction, GB/s                   */
    double ib_gbps_per_node;   /* InfiniBand bandwidth per node per direction, GB/s              */
    int sms;                   /* streaming multiprocessors (0: no tile/wave model, e.g. CPU)    */
    double gemm_efficiency;    /* best sustained GEMM rate / peak (large, aligned GEMMs)         */
    /* model constants (defaults in mg_plan_gpu_preset) */
    double hbm_efficiency;     /* achieved fraction of hbm_gbps by memory-bound kernels          */
    double nvlink_efficiency;  /* NCCL bus bandwidth / link bandwidth, intra-node                */
    double ib_efficiency;      /* NCCL bus bandwidth / link bandwidth, inter-node                */
    double nvlink_alpha_us;    /* latency per ring step within a node                            */
    double ib_alpha_us;        /* latency per ring step (or p2p message) across nodes            */
    double kernel_us;          /* fixed cost of every kernel (launch, ramp-up, tail)              */
    double reserve_gb;         /* memory not available to the model (context, workspaces)       */
    /* CPU only (sms == 0): the GEMM rate measured at a few sizes (mg_plan_calibrate_cpu), as a
       fraction of peak_tflops at the cube root of M·N·K; log-linear in between, flat outside;
       curve_points = 0 means every GEMM runs at gemm_efficiency·peak. */
    int curve_points;
    double curve_size[8], curve_efficiency[8];
} mg_plan_gpu;

typedef struct mg_plan_cluster {
    int gpus;                  /* n = t·p·d                                                      */
    int gpus_per_node;         /* NVLink domain size                                             */
    mg_plan_gpu gpu;
} mg_plan_cluster;

/* A layout. In a search constraint, 0 (t, p, d, v, micro_batch_size) or MG_PLAN_ANY
   (recompute, sequence_parallel, distributed_optimizer) leaves a dimension free. */
typedef struct mg_plan_layout {
    int t, p, d, v;            /* tensor, pipeline, data parallel sizes; model chunks per GPU   */
    int micro_batch_size;      /* b                                                              */
    int recompute;             /* MG_PLAN_RECOMPUTE_*                                            */
    int sequence_parallel;     /* 0/1 (needs t > 1)                                               */
    int distributed_optimizer; /* 0/1 (ZeRO-1 over the data-parallel group)                     */
    int c;                     /* context-parallel size (0 or 1: none; in a search constraint
                                  0 leaves it free): every sequence split over c GPUs, ring
                                  attention; n = t·c·p·d                                      */
} mg_plan_layout;

/* Everything the model predicts for one layout. Times are per iteration; the pipeline terms
   belong to the slowest stage (the one that sets the pace). */
typedef struct mg_plan_result {
    mg_plan_layout layout;
    long num_microbatches;          /* m = B / (b·d)                                              */
    /* time, seconds per iteration */
    double time_gemm;               /* GEMMs of the slowest stage, m microbatches                */
    double time_memory_bound;       /* layernorm, softmax, GeLU, dropout, residual, loss         */
    double time_tp_comm;            /* tensor-parallel all-reduces (or all-gather+reduce-scatter) */
    double time_pp_comm;            /* pipeline sends/receives (+ all-gather for scatter/gather)  */
    double time_bubble;             /* pipeline fill and drain                                    */
    double time_dp_comm;            /* exposed data-parallel reduction + embedding all-reduce     */
    double time_cp_comm;            /* context parallelism: the ring's K/V and dK/dV transfers
                                       that outlast the attention they overlap                  */
    double time_optimizer;          /* Adam step, gradient norm, zeroing                          */
    double iteration_time;
    double bubble_fraction;         /* bubble / (m · stage time): (p−1)/(v·m) for equal stages    */
    /* throughput */
    double flops_per_iteration;     /* counted as the paper counts (recompute included;
                                       selective counts as none under the tiled attention) */
    double model_flops_per_iteration; /* 72-coefficient formula (no recompute): MFU              */
    double tflops_per_gpu;          /* flops_per_iteration / (iteration_time · n) / 1e12          */
    double percent_of_peak;         /* tflops_per_gpu / peak (16-bit, or fp32 rate for fp32)      */
    double model_tflops_per_gpu;
    double tokens_per_second;
    /* memory per GPU of the worst stage, bytes */
    double mem_weights, mem_gradients, mem_optimizer, mem_activations, mem_total;
    double mem_limit;               /* memory_gb·2^30 − reserve                                  */
    int worst_stage;                /* 0 or p−1                                                   */
    int fits;
} mg_plan_result;

/* ---------------------------------------------------------------------------------------------
   2. Counting
   ------------------------------------------------------------------------------------------ */
/* Fill gpu from a preset: "a100-80gb", "a100-40gb", "h100-sxm", "h200-sxm", "cpu" (rates from
   mg_plan_calibrate_cpu, or set by hand). Returns 0, or -1 for an unknown name. */
MGDEF int mg_plan_gpu_preset(const char *name, mg_plan_gpu *gpu);
MGDEF const char *mg_plan_gpu_preset_names(void);       /* "a100-80gb, a100-40gb, ..."      */

/* Every parameter of the model, tensor by tensor, as megatron.h's mg_gpt_num_params counts
   them (tests/test_plan.c checks the two agree): per layer the QKV weight h·(q + 2·kv) with
   q = a·d query and kv = g·d key/value width (d the head dimension), the projection q·h, the
   MLP's two (SwiGLU: three) h×F matrices, their biases unless disabled, two norms (weight,
   and bias with LayerNorm); the word embedding V·h (twice when untied), the learned position
   table, the final norm. With GPT-2's defaults this is the paper's (PAPER.md)
   P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)) plus the final layernorm's 2h.              */
MGDEF double mg_plan_parameters(const mg_plan_model *m);
/* The MLP width F: --ffn-hidden-size, else 4h, or with SwiGLU Megatron-LM's int(4h·2/3/64)·64
   (the gate is a third matrix, so 2/3 of the width keeps the parameter count).              */
MGDEF int mg_plan_ffn_hidden(const mg_plan_model *m);
/* FLOPs of one iteration of B sequences as the paper counts them (2 per multiply-add,
   backward = 2 × forward), with Megatron-LM's num_floating_point_operations for the Llama
   options. Per sequence, one layer's forward is
     2·s·h·(q + 2·kv) + 2·s·q·h     QKV and projection
   + 4·s²·q                         the attention core (QKᵀ and scores·V)
   + 2·s·h·F·(3 with SwiGLU, else 2) the MLP,
   the output layer 2·s·h·V. Without recomputation F = 3·B·(l·layer + head); full
   recomputation runs each layer's forward once more, 4·B·l·layer + 3·B·head; selective adds
   the attention core once more, B·l·4·s²·q. With GPT-2's defaults (q = kv = h, F = 4h) these
   are the paper's 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) and
   96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)); without recomputation, with V padded as the model
   pads it, megatron.h's mg_gpt_flops_per_iteration (tests/test_plan.c checks both).       */
MGDEF double mg_plan_flops(const mg_plan_model *m, double global_batch, int recompute);
/* (p−1)/(v·m): the bubble of 1F1B (v = 1) and of interleaved 1F1B with v chunks per GPU. */
MGDEF double mg_plan_bubble_fraction(int p, long m, int v);
/* Activation bytes one transformer layer stores for one microbatch of b sequences on one GPU
   (Korthikanti et al. 2022, Table 2), for element size elem_bytes (2 for 16-bit; dropout masks
   are one byte). With elem_bytes = 2:
     none, t = 1:                 s·b·h·(34 + 5·a·s/h)
     none, t:                     s·b·h·(10 + 24/t + 5·a·s/(h·t))
     none, t, sequence parallel:  s·b·h·(34 + 5·a·s/h)/t
     selective (attention core):  the 5·a·s/h term is not stored
     full:                        the layer input only, 2·s·b·h (/t with sequence parallel).
   With flash_attention the 5·a·s/h term is never stored (none = selective), and each query
   keeps a fp32 log-sum-exp instead: 4·a·s·b/t bytes.
   The Llama options change the split part: Q, K, V are q + 2·kv wide, the projection input q,
   the MLP keeps 2F (GeLU's input and output) or 3F (SwiGLU's gate and up, and its output). */
MGDEF double mg_plan_activation_bytes_per_layer(const mg_plan_model *m, int b, int t,
                                                int sequence_parallel, int recompute,
                                                int elem_bytes);
/* Bytes per parameter held by one GPU: 16-bit weights + gradients + optimizer state
   (Megatron-Core distributed-optimizer docs): fp16 params with fp16 grads 20 (4 + 16/d
   distributed), 16-bit params with fp32 grads 18 (6 + 12/d), fp32 16 (8 + 8/d). */
MGDEF double mg_plan_bytes_per_parameter(int precision, int grads_in_fp32,
                                         int distributed_optimizer, int d);

/* ---------------------------------------------------------------------------------------------
   3. Cost primitives
   ------------------------------------------------------------------------------------------ */
/* Time of batch GEMMs C(M×N) = A(M×K)·B(K×N) with elements of elem_bytes at peak_flops:
     math:   per candidate tile (256×128 … 64×64, NVIDIA's GEMM guide) the kernel runs
             ceil(tiles/SMs) waves, each as long as one tile's 2·Tm·Tn·K FLOPs at the SM's
             share of gemm_efficiency·peak, slowed for small tiles by their lower data reuse;
             the fastest tile wins (cuBLAS's heuristic picks well for these shapes);
     memory: elem_bytes·(M·K + K·N + M·N)·batch at hbm_efficiency·hbm_gbps;
   the larger of the two, plus kernel_us. */
MGDEF double mg_plan_gemm_time(const mg_plan_gpu *gpu, double M, double N, double K,
                               double batch, int elem_bytes, double peak_flops);
enum { MG_PLAN_ALL_REDUCE = 0, MG_PLAN_ALL_GATHER = 1, MG_PLAN_REDUCE_SCATTER = 2 };
/* Ring collective of `bytes` (the full buffer each rank holds after all-gather / before
   reduce-scatter) over n ranks of which per_node share a node: α–β model,
   steps·α + volume·bytes/bandwidth with all-reduce 2(n−1) steps and volume 2(n−1)/n,
   all-gather and reduce-scatter (n−1) and (n−1)/n. Within a node the bandwidth is NVLink's;
   across nodes a ring gets the node's InfiniBand bandwidth shared by the gpus_per_node/per_node
   groups that reduce at the same time (NCCL spreads a ring over all of a node's NICs). */
MGDEF double mg_plan_collective_time(const mg_plan_cluster *cl, int kind, int n, int per_node,
                                     double bytes);

/* ---------------------------------------------------------------------------------------------
   4. The iteration
   ------------------------------------------------------------------------------------------ */
/* Validate a layout (every field set) against model, training and cluster. Returns 0, or -1
   with one line in err saying what is wrong and what would be valid. */
MGDEF int mg_plan_check(const mg_plan_model *m, const mg_plan_training *tr,
                        const mg_plan_cluster *cl, const mg_plan_layout *lay, char *err,
                        size_t errlen);
/* Predict one iteration. Returns 0, or -1 (with err) when mg_plan_check fails. */
MGDEF int mg_plan_evaluate(const mg_plan_model *m, const mg_plan_training *tr,
                           const mg_plan_cluster *cl, const mg_plan_layout *lay,
                           mg_plan_result *out, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
   5. Search
   ------------------------------------------------------------------------------------------ */
typedef struct mg_plan_search_stats {
    long evaluated;            /* valid layouts evaluated                                      */
    long fitting;              /* of which fit in memory                                       */
} mg_plan_search_stats;
/* A constraint with every dimension free. */
MGDEF mg_plan_layout mg_plan_layout_any(void);
/* Enumerate every valid layout that matches `fixed`, keep those that fit, and write the best
   `max_best` to best[] sorted by iteration time (ties: less memory). Returns how many were
   written (0 when nothing fits), or -1 with err when the constraint itself is invalid. */
MGDEF int mg_plan_search(const mg_plan_model *m, const mg_plan_training *tr,
                         const mg_plan_cluster *cl, const mg_plan_layout *fixed,
                         mg_plan_result *best, int max_best, mg_plan_search_stats *stats,
                         char *err, size_t errlen);
/* One line saying why `a` beats `b`: the time components where they differ most. */
MGDEF void mg_plan_explain(const mg_plan_result *a, const mg_plan_result *b, char *buf,
                           size_t len);
/* "t=8 p=64 d=6 v=1 b=1 full" style label. */
MGDEF void mg_plan_layout_label(const mg_plan_layout *lay, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------------
   6. CPU calibration (closing the loop with gpt_train)
   ------------------------------------------------------------------------------------------ */
/* Fill gpu (already the "cpu" preset) with this machine's measured rates for one rank running
   `threads` BLAS threads: the sgemm rate of square GEMMs n = 32 ... 512 (cblas_sgemm, about
   `seconds`/2), the fastest as peak_tflops and the others as the efficiency curve; memcpy
   bandwidth (about `seconds`/2); physical memory / ranks_per_node. Needs OpenBLAS
   unless MG_PLAN_NO_CBLAS is defined (then it returns -1). Returns 0 or -1 with err. */
MGDEF int mg_plan_calibrate_cpu(mg_plan_gpu *gpu, int threads, int ranks_per_node,
                                double seconds, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
   7. The tool
   ------------------------------------------------------------------------------------------ */
/* Runs build/mg_plan with these arguments, printing to out (report) and errf (errors).
   Returns the exit status: 0 ok, 1 nothing fits (search), 2 bad flags (one line
   "mg_plan: error: …" on errf). */
MGDEF int mg_plan_main(int argc, char **argv, FILE *out, FILE *errf);
/* The trainer's check of the command line's model (its flags as typed, argv[0] a name, plus
   --vocab-size), run by mg_plan_main after the planner's own checks: 0, or -1 with the reason
   in err. mg_plan.h includes nothing of the library, so the check comes from the program:
   tools/mg_plan.c sets megatron.h's mg_train_model_check (gpt_train's flag ranges and
   mg_gpt_config_check), so the tool never plans a model gpt_train refuses. NULL (the
   default): the planner's checks only.                                                     */
typedef int (*mg_plan_model_check_fn)(int argc, char **argv, char *err, size_t errlen);
MGDEF void mg_plan_set_model_check(mg_plan_model_check_fn check);

#ifdef __cplusplus
}
#endif
#endif /* MG_PLAN_H */

/* =============================================================================================
   IMPLEMENTATION
   ========================================================================================== */
#if defined(MG_IMPLEMENTATION) && !defined(MG_IMPLEMENTATION_ELSEWHERE)
#ifndef MG_PLAN_IMPLEMENTED
#define MG_PLAN_IMPLEMENTED

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif
#ifndef MG_PLAN_NO_CBLAS
#include <cblas.h>
#endif

#define MG__PLAN_GIB 1073741824.0

/* ---------------------------------------------------------------------------------------------
   Presets. Vendor numbers, dense (no sparsity):
   - A100 SXM: 312 TFLOP/s BF16/FP16 tensor, 156 TF32; 80 GB HBM2e at 2,039 GB/s, 40 GB HBM2 at
     1,555 GB/s; NVLink 600 GB/s total = 300 GB/s per direction; 108 SMs. (NVIDIA A100 Tensor
     Core GPU datasheet; NVIDIA A100 Tensor Core GPU Architecture whitepaper.)
   - DGX A100 node: 8 GPUs, 8 × 200 Gb/s HDR InfiniBand for compute = 200 GB/s per direction
     (DGX A100 datasheet) — the paper's Selene nodes.
   - H100 SXM5: 989 TFLOP/s BF16/FP16 dense (1,979 with sparsity), 494 TF32; 80 GB HBM3 at
     3.35 TB/s; NVLink 900 GB/s total = 450 per direction; 132 SMs (H100 datasheet,
     Hopper architecture whitepaper). DGX H100: 8 × 400 Gb/s NDR = 400 GB/s per node.
   - H200 SXM: same GH100 compute (989 dense), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s
     (H200 datasheet); DGX H200: 8 × 400 Gb/s = 400 GB/s per node.
   gemm_efficiency is the best GEMM rate a GPU SUSTAINS under training's continuous load, as a
   fraction of the peak (Bekman, ml-engineering: compute/accelerator README "Maximum Achievable
   Matmul FLOPS comparison table" and compute/accelerator/benchmarks README, mamf-finder):
   - H100/H200 SXM: the measured sustainable rate (MSMF, power-saturated) 702.9 TFLOP/s of 989
     = 71.1% (H200, bf16); the short-burst rate (MAMF) is 828.0, so sustaining costs 15%;
   - A100 SXM: MAMF 267.9 of 312 = 85.9%, derated to the clock an A100 sustains at its power
     limit, 1305 of 1410 MHz (the clock NVIDIA uses for HPL's Rpeak; G. Lockwood, "peak
     FLOPS" notes): 85.9% × 0.926 = 79.5%.
   Model constants shared by the GPU presets:
   - nvlink_efficiency 0.70: nccl-tests all_reduce_perf on 8 × A100 SXM over NVSwitch reports
     ~200–210 GB/s bus bandwidth of the 300 GB/s link (NVIDIA/nccl-tests issues #149, #178).
   - ib_efficiency 0.85: nccl-tests across 3 nodes of 8 × A100 with 4 HDR NICs averages
     84.8 GB/s of the 100 GB/s per-GPU line rate (NVIDIA/nccl-tests issue #119).
   - hbm_efficiency, kernel_us, α latencies, reserve: mg__plan_gpu_constants below.
   ------------------------------------------------------------------------------------------ */
typedef struct mg__plan_preset {
    const char *name;
    double peak_tflops, fp32_ratio, memory_gb, hbm_gbps, nvlink_gbps, ib_gbps_per_node;
    int sms;
    double gemm_efficiency;
} mg__plan_preset;

static const mg__plan_preset mg__plan_presets[] = {
    /* name        peak   fp32  mem  hbm    nvlink ib/node sms  gemm eff */
    {"a100-80gb", 312.0, 0.5, 80.0, 2039.0, 300.0, 200.0, 108, 267.9 / 312.0 * 1305.0 / 1410.0},
    {"a100-40gb", 312.0, 0.5, 40.0, 1555.0, 300.0, 200.0, 108, 267.9 / 312.0 * 1305.0 / 1410.0},
    {"h100-sxm", 989.0, 0.5, 80.0, 3350.0, 450.0, 400.0, 132, 702.9 / 989.0},
    {"h200-sxm", 989.0, 0.5, 141.0, 4800.0, 450.0, 400.0, 132, 702.9 / 989.0},
    /* cpu: placeholders until mg_plan_calibrate_cpu (or the flags) give this machine's rates */
    {"cpu", 0.1, 1.0, 8.0, 10.0, 5.0, 5.0, 0, 1.0},
};
#define MG__PLAN_NPRESETS ((int)(sizeof(mg__plan_presets) / sizeof(mg__plan_presets[0])))

/* The model constants (documented above and in the README), one set for GPUs and one for CPU
   ranks. GPUs: hbm_efficiency 0.70 — Megatron's memory-bound kernels (layernorm, fused
   softmax, fused bias-GeLU, dropout, bias-dropout-add) move data at about 70% of the HBM peak
   (a STREAM copy reaches ~90%; these kernels also reduce along rows and write masks);
   kernel_us 4 — launch plus ramp-up and tail of a kernel; α: 2 µs per NVLink ring step, 6 µs
   per InfiniBand step (NCCL's small-message latencies are of that order); reserve 2 GiB for
   the CUDA context, cuBLAS workspaces and NCCL buffers. CPU ranks: a "kernel" is an OpenMP
   region (fork/join ~1 µs), ranks talk through MPI shared memory (~1 µs a message), loops
   reach the calibrated memcpy rate, nothing is reserved. */
typedef struct mg__plan_constants {
    double hbm_efficiency, nvlink_efficiency, ib_efficiency, nvlink_alpha_us, ib_alpha_us,
        kernel_us, reserve_gb;
} mg__plan_constants;
static const mg__plan_constants mg__plan_gpu_constants = {0.70, 0.70, 0.85, 2.0, 6.0, 4.0, 2.0};
static const mg__plan_constants mg__plan_cpu_constants = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0};

MGDEF int mg_plan_gpu_preset(const char *name, mg_plan_gpu *gpu) {
    int i;
    for (i = 0; i < MG__PLAN_NPRESETS; i++) {
        const mg__plan_preset *p = &mg__plan_presets[i];
        const mg__plan_constants *k = p->sms ? &mg__plan_gpu_constants : &mg__plan_cpu_constants;
        if (strcmp(name, p->name) != 0) continue;
        memset(gpu, 0, sizeof(*gpu));
        snprintf(gpu->name, sizeof(gpu->name), "%s", p->name);
        gpu->peak_tflops = p->peak_tflops;
        gpu->fp32_ratio = p->fp32_ratio;
        gpu->memory_gb = p->memory_gb;
        gpu->hbm_gbps = p->hbm_gbps;
        gpu->nvlink_gbps = p->nvlink_gbps;
        gpu->ib_gbps_per_node = p->ib_gbps_per_node;
        gpu->sms = p->sms;
        gpu->gemm_efficiency = p->gemm_efficiency;
        gpu->hbm_efficiency = k->hbm_efficiency;
        gpu->nvlink_efficiency = k->nvlink_efficiency;
        gpu->ib_efficiency = k->ib_efficiency;
        gpu->nvlink_alpha_us = k->nvlink_alpha_us;
        gpu->ib_alpha_us = k->ib_alpha_us;
        gpu->kernel_us = k->kernel_us;
        gpu->reserve_gb = k->reserve_gb;
        return 0;
    }
    return -1;
}

MGDEF const char *mg_plan_gpu_preset_names(void) {
    return "a100-80gb, a100-40gb, h100-sxm, h200-sxm, cpu, custom";
}

/* ---------------------------------------------------------------------------------------------
   Counting
   ------------------------------------------------------------------------------------------ */
/* The model's sizes with the Llama options resolved (zero fields take GPT-2's choice). */
typedef struct mg__plan_dims {
    double h, a, s, V;
    double d;                   /* head dimension                                             */
    double q, kv;               /* query width a·d, key/value width g·d                       */
    double F, mats;             /* MLP width and its h×F matrices (2, SwiGLU 3)               */
    double split;               /* one layer's parameters split over t (at t = 1)             */
    double replicated;          /* one layer's parameters every tensor-parallel rank holds    */
    double norm;                /* one norm's parameters: 2h (LayerNorm) or h (RMSNorm)       */
} mg__plan_dims;

/* 1 when none of the Llama options is set (megatron.h's mg_gpt_is_gpt2). */
static int mg__plan_is_gpt2(const mg_plan_model *m) {
    return !m->num_query_groups && !m->kv_channels && !m->ffn_hidden_size && !m->swiglu &&
           !m->rmsnorm && !m->position_embedding && !m->untie_embeddings &&
           !m->disable_bias_linear && !m->add_qkv_bias;
}

MGDEF int mg_plan_ffn_hidden(const mg_plan_model *m) {
    if (m->ffn_hidden_size > 0) return m->ffn_hidden_size;
    return m->swiglu ? (int)((4.0 * m->hidden_size * 2.0 / 3.0) / 64.0) * 64 : 4 * m->hidden_size;
}

static mg__plan_dims mg__plan_dims_of(const mg_plan_model *m) {
    mg__plan_dims x;
    double g = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    int bias = !m->disable_bias_linear;
    x.h = m->hidden_size; x.a = m->num_attention_heads; x.s = m->seq_length; x.V = m->vocab_size;
    x.d = m->kv_channels > 0 ? m->kv_channels
          : m->num_attention_heads > 0 ? (double)(m->hidden_size / m->num_attention_heads) : 0;
    x.q = x.a * x.d;
    x.kv = g * x.d;
    x.F = mg_plan_ffn_hidden(m);
    x.mats = m->swiglu ? 3 : 2;
    x.norm = m->rmsnorm ? x.h : 2 * x.h;
    /* column-parallel QKV (weight, bias), row-parallel projection weight, the MLP's matrices
       and its column-parallel biases (up, and gate with SwiGLU) */
    x.split = x.h * (x.q + 2 * x.kv) + (bias || m->add_qkv_bias ? x.q + 2 * x.kv : 0) +
              x.q * x.h + x.mats * x.h * x.F + (bias ? (x.mats - 1) * x.F : 0);
    /* two norms, the row-parallel biases of the projection and of the MLP's down matrix */
    x.replicated = 2 * x.norm + (bias ? 2 * x.h : 0);
    return x;
}

MGDEF double mg_plan_parameters(const mg_plan_model *m) {
    mg__plan_dims x = mg__plan_dims_of(m);
    double pos = m->position_embedding != MG_PLAN_POS_LEARNED ? 0
                 : m->max_position_embeddings > 0 ? m->max_position_embeddings : x.s;
    return m->num_layers * (x.split + x.replicated) + x.V * x.h * (m->untie_embeddings ? 2 : 1) +
           pos * x.h + x.norm;
}

MGDEF double mg_plan_flops(const mg_plan_model *m, double B, int recompute) {
    mg__plan_dims x = mg__plan_dims_of(m);
    double l = m->num_layers, s = x.s, h = x.h;
    double core = 4.0 * s * s * x.q;
    double layer = 2.0 * s * h * (x.q + 2 * x.kv) + 2.0 * s * x.q * h + core +
                   2.0 * s * h * x.F * x.mats;
    double head = 2.0 * s * h * x.V;
    if (recompute == MG_PLAN_RECOMPUTE_FULL) return B * (4.0 * l * layer + 3.0 * head);
    /* selective: QKᵀ and scores·V forward again in the backward */
    return B * (3.0 * (l * layer + head) + (recompute == MG_PLAN_RECOMPUTE_SELECTIVE ? l * core : 0));
}

MGDEF double mg_plan_bubble_fraction(int p, long m, int v) {
    if (p <= 1 || m <= 0) return 0.0;
    return (double)(p - 1) / ((double)(v > 0 ? v : 1) * (double)m);
}

/* Activation bytes per layer per microbatch, from the tensors Korthikanti's Table 1 lists
   (e = element bytes, masks 1 byte, r = 1/t for the layernorm/dropout regions under sequence
   parallelism, else 1 — they are replicated on every tensor-parallel rank):
     replicated region: the two layernorm inputs, the QKV and FC1 inputs (4 elements per token
                        of width h) and two dropout masks           -> s·b·h·r·(4e + 2)
     split by t:        Q, K, V, attention-projection input (4h), GeLU input and output (8h)
                                                                   -> s·b·h·12e/t
                        (in general Q, K, V q + 2·kv, projection input q, the MLP's 2F, or
                        3F with SwiGLU: -> s·b·(2q + 2kv + mats·F)·e/t; the rotary positions
                        keep nothing more, their backward rotates back by the same angles)
     attention scores:  softmax output, dropout output (e each) and the dropout mask
                                                                   -> a·s²·b·(2e + 1)/t
   With e = 2 these are Korthikanti's 10, 24/t and 5·a·s/h. */
MGDEF double mg_plan_activation_bytes_per_layer(const mg_plan_model *m, int b, int t,
                                                int sequence_parallel, int recompute,
                                                int elem_bytes) {
    mg__plan_dims x = mg__plan_dims_of(m);
    double s = x.s, h = x.h, a = x.a;
    double e = elem_bytes, tt = t > 0 ? t : 1, bb = b;
    double r = sequence_parallel ? 1.0 / tt : 1.0;
    double sbh = s * bb * h, split = 2 * x.q + 2 * x.kv + x.mats * x.F;
    if (recompute == MG_PLAN_RECOMPUTE_FULL) return sbh * e * r; /* the layer input */
    {
        double act = sbh * r * (4.0 * e + 2.0) + s * bb * split * e / tt;
        if (m->flash_attention) act += 4.0 * a * s * bb / tt;
        else if (recompute == MG_PLAN_RECOMPUTE_NONE) act += a * s * s * bb * (2.0 * e + 1.0) / tt;
        return act;
    }
}

/* Megatron-Core's bytes per parameter; weights e + gradients g + optimizer state o (fp32
   master copy, fp32 main gradients where the model gradients are fp16, two Adam moments). */
static void mg__plan_param_bytes(int precision, int grads_in_fp32, double *e, double *g,
                                 double *o) {
    if (precision == MG_PLAN_FP32) {          /* 4 + 4 + 8 (no master copy)                  */
        *e = 4; *g = 4; *o = 8;
    } else if (grads_in_fp32 || precision == MG_PLAN_BF16) {
        *e = 2; *g = 4; *o = 12;              /* master 4 + moments 8                          */
    } else {
        *e = 2; *g = 2; *o = 16;              /* master 4 + fp32 main grads 4 + moments 8     */
    }
}

MGDEF double mg_plan_bytes_per_parameter(int precision, int grads_in_fp32,
                                         int distributed_optimizer, int d) {
    double e, g, o;
    mg__plan_param_bytes(precision, grads_in_fp32, &e, &g, &o);
    return e + g + (distributed_optimizer && d > 1 ? o / d : o);
}

/* ---------------------------------------------------------------------------------------------
   Cost primitives
   ------------------------------------------------------------------------------------------ */
/* The tiles cuBLAS chooses among on Ampere/Hopper (NVIDIA, "Matrix Multiplication Background
   User's Guide", DU-09799-001, section "Typical Tile Dimensions in cuBLAS and Performance":
   256×128 and 128×256 are the most efficient, 64×64 the least). A Tm×Tn tile does Tm·Tn MACs
   per element it loads, Tm·Tn/(Tm+Tn); we take tiles from 128×128 up (reuse 64) as running
   at the full rate and smaller ones as slowed in proportion to their reuse
   (MG__PLAN_TILE_FULL_REUSE: the one shape constant of the curve). */
#define MG__PLAN_TILE_FULL_REUSE 64.0
static const int mg__plan_tiles[][2] = {
    {256, 128}, {128, 256}, {128, 128}, {256, 64}, {64, 256}, {128, 64}, {64, 128}, {64, 64}};

/* The calibrated CPU efficiency at the GEMM's cube-root size (1 without a curve). */
static double mg__plan_curve(const mg_plan_gpu *g, double M, double N, double K) {
    double size = cbrt(M * N * K), x;
    int i, n = g->curve_points;
    if (n <= 0) return 1.0;
    if (size <= g->curve_size[0]) return g->curve_efficiency[0];
    if (size >= g->curve_size[n - 1]) return g->curve_efficiency[n - 1];
    for (i = 1; i < n - 1 && size > g->curve_size[i]; i++) {}
    x = log(size / g->curve_size[i - 1]) / log(g->curve_size[i] / g->curve_size[i - 1]);
    return g->curve_efficiency[i - 1] + x * (g->curve_efficiency[i] - g->curve_efficiency[i - 1]);
}

MGDEF double mg_plan_gemm_time(const mg_plan_gpu *gpu, double M, double N, double K,
                               double batch, int elem_bytes, double peak_flops) {
    double rate = peak_flops * gpu->gemm_efficiency;
    double math, mem;
    if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return 0.0;
    if (gpu->sms > 0) {
        /* Tile + wave quantization: every wave costs one whole tile per SM. */
        double per_sm = rate / gpu->sms;
        int i;
        math = 1e300;
        for (i = 0; i < (int)(sizeof(mg__plan_tiles) / sizeof(mg__plan_tiles[0])); i++) {
            double tm = mg__plan_tiles[i][0], tn = mg__plan_tiles[i][1];
            double reuse = tm * tn / (tm + tn);
            double eff = reuse >= MG__PLAN_TILE_FULL_REUSE ? 1.0 : reuse / MG__PLAN_TILE_FULL_REUSE;
            double tiles = ceil(M / tm) * ceil(N / tn) * batch;
            double waves = ceil(tiles / gpu->sms);
            double t = waves * 2.0 * tm * tn * K / (per_sm * eff);
            if (t < math) math = t;
        }
    } else {
        math = 2.0 * M * N * K * batch / (rate * mg__plan_curve(gpu, M, N, K));
    }
    mem = elem_bytes * (M * K + K * N + M * N) * batch / (gpu->hbm_gbps * 1e9 * gpu->hbm_efficiency);
    return (math > mem ? math : mem) + gpu->kernel_us * 1e-6;
}

/* Memory-bound kernels moving `bytes` in `kernels` launches. */
static double mg__plan_membound_time(const mg_plan_gpu *gpu, double bytes, double kernels) {
    return bytes / (gpu->hbm_gbps * 1e9 * gpu->hbm_efficiency) + kernels * gpu->kernel_us * 1e-6;
}

MGDEF double mg_plan_collective_time(const mg_plan_cluster *cl, int kind, int n, int per_node,
                                     double bytes) {
    const mg_plan_gpu *g = &cl->gpu;
    double steps, volume, bw, alpha;
    double nvlink = g->nvlink_gbps * 1e9 * g->nvlink_efficiency;
    if (n <= 1 || bytes <= 0) return 0.0;
    if (per_node < 1) per_node = 1;
    steps = kind == MG_PLAN_ALL_REDUCE ? 2.0 * (n - 1) : (double)(n - 1);
    volume = (kind == MG_PLAN_ALL_REDUCE ? 2.0 : 1.0) * (n - 1) / (double)n;
    if (per_node >= n) {
        bw = nvlink;
        alpha = g->nvlink_alpha_us;
    } else {
        double groups = (double)cl->gpus_per_node / per_node;  /* rings sharing the NICs     */
        double ib = g->ib_gbps_per_node * 1e9 * g->ib_efficiency / (groups > 1 ? groups : 1);
        bw = ib < nvlink ? ib : nvlink;
        alpha = g->ib_alpha_us;
    }
    return steps * alpha * 1e-6 + volume * bytes / bw;
}

/* ---------------------------------------------------------------------------------------------
   The iteration
   ------------------------------------------------------------------------------------------ */
static void mg__plan_err(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    if (!err || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* "1 2 4 8": the divisors of n that also divide also_divides (when > 0), for error messages. */
static void mg__plan_divisors(long n, long also_divides, char *buf, size_t len) {
    long k;
    size_t used = 0;
    buf[0] = 0;
    for (k = 1; k <= n && used + 16 < len; k++) {
        if (n % k || (also_divides > 0 && also_divides % k)) continue;
        used += (size_t)snprintf(buf + used, len - used, used ? " %ld" : "%ld", k);
    }
}

static long mg__plan_gcd(long a, long b) {
    while (b) { long r = a % b; a = b; b = r; }
    return a;
}

/* What tensor parallelism splits: query heads, key/value groups (a rank holds whole groups,
   as in Megatron-LM) and the MLP's columns. t must divide their greatest common divisor. */
static long mg__plan_tp_split(const mg_plan_model *m) {
    long g = m->num_query_groups > 0 ? m->num_query_groups : m->num_attention_heads;
    return mg__plan_gcd(mg__plan_gcd(m->num_attention_heads, g), mg_plan_ffn_hidden(m));
}

/* The layout's context-parallel size (0 counts as 1). */
static int mg__plan_c(const mg_plan_layout *L) { return L->c > 1 ? L->c : 1; }

MGDEF int mg_plan_check(const mg_plan_model *m, const mg_plan_training *tr,
                        const mg_plan_cluster *cl, const mg_plan_layout *L, char *err,
                        size_t errlen) {
    char valid[256];
    long B = tr->global_batch_size, md;
    if (m->num_layers <= 0 || m->hidden_size <= 0 || m->num_attention_heads <= 0 ||
        m->seq_length <= 0 || m->vocab_size <= 0) {
        mg__plan_err(err, errlen, "model sizes must be positive (layers %d, hidden %d, heads %d, "
                     "seq %d, vocab %d)", m->num_layers, m->hidden_size, m->num_attention_heads,
                     m->seq_length, m->vocab_size);
        return -1;
    }
    if (m->hidden_size % m->num_attention_heads && m->kv_channels <= 0) {
        mg__plan_err(err, errlen, "--hidden-size %d must be a multiple of --num-attention-heads %d "
                     "(or give the head dimension with --kv-channels)",
                     m->hidden_size, m->num_attention_heads);
        return -1;
    }
    if (m->num_query_groups < 0 || m->kv_channels < 0 || m->ffn_hidden_size < 0 ||
        m->max_position_embeddings < 0 || m->position_embedding < MG_PLAN_POS_LEARNED ||
        m->position_embedding > MG_PLAN_POS_NONE) {
        mg__plan_err(err, errlen, "--num-query-groups %d, --kv-channels %d, --ffn-hidden-size %d, "
                     "--max-position-embeddings %d must be positive (0: the default) and the "
                     "position embedding learned_absolute, rope or none", m->num_query_groups,
                     m->kv_channels, m->ffn_hidden_size, m->max_position_embeddings);
        return -1;
    }
    if (m->max_position_embeddings > 0 && m->max_position_embeddings < m->seq_length) {
        mg__plan_err(err, errlen, "--max-position-embeddings %d is smaller than --seq-length %d "
                     "(it must be >= the sequence length)", m->max_position_embeddings,
                     m->seq_length);
        return -1;
    }
    if (m->num_query_groups > 0 && m->num_attention_heads % m->num_query_groups) {
        mg__plan_err(err, errlen, "--num-query-groups %d must divide --num-attention-heads %d (each "
                     "key/value group serves the same number of query heads)",
                     m->num_query_groups, m->num_attention_heads);
        return -1;
    }
    if (mg_plan_ffn_hidden(m) < 1) {
        mg__plan_err(err, errlen, "the MLP width %d (SwiGLU's default int(4h·2/3/64)·64 for "
                     "--hidden-size %d) must be positive: give --ffn-hidden-size",
                     mg_plan_ffn_hidden(m), m->hidden_size);
        return -1;
    }
    if (B <= 0) { mg__plan_err(err, errlen, "--global-batch-size must be positive"); return -1; }
    if (cl->gpus <= 0 || cl->gpus_per_node <= 0) {
        mg__plan_err(err, errlen, "--gpus and --gpus-per-node must be positive");
        return -1;
    }
    if (cl->gpus > cl->gpus_per_node && cl->gpus % cl->gpus_per_node) {
        mg__plan_err(err, errlen, "--gpus %d must be a multiple of --gpus-per-node %d (whole nodes)",
                     cl->gpus, cl->gpus_per_node);
        return -1;
    }
    if (L->c < 0 || (L->c > 1 && (m->seq_length % (2 * L->c) || cl->gpus % L->c))) {
        mg__plan_err(err, errlen, "--context-parallel-size %d must divide --gpus %d and cut "
                     "--seq-length %d into 2c equal chunks", L->c, cl->gpus, m->seq_length);
        return -1;
    }
    if (L->t <= 0 || cl->gpus % L->t || mg__plan_tp_split(m) % L->t) {
        char groups[64] = "", width[64] = "";
        if (m->num_query_groups > 0)
            snprintf(groups, sizeof(groups), ", the key/value groups %d", m->num_query_groups);
        if (mg_plan_ffn_hidden(m) != 4 * m->hidden_size)
            snprintf(width, sizeof(width), ", the MLP width %d", mg_plan_ffn_hidden(m));
        mg__plan_divisors(mg__plan_tp_split(m), cl->gpus, valid, sizeof(valid));
        mg__plan_err(err, errlen, "--tensor-model-parallel-size %d must divide --num-attention-heads "
                     "%d%s%s and --gpus %d (valid: %s)", L->t, m->num_attention_heads, groups, width,
                     cl->gpus, valid);
        return -1;
    }
    if ((cl->gpus / L->t) % mg__plan_c(L)) {
        mg__plan_err(err, errlen, "--context-parallel-size %d must divide gpus/t = %d", L->c,
                     cl->gpus / L->t);
        return -1;
    }
    if (L->p <= 0 || m->num_layers % L->p || (cl->gpus / L->t / mg__plan_c(L)) % L->p) {
        int rest = cl->gpus / L->t / mg__plan_c(L);
        mg__plan_divisors(m->num_layers, rest, valid, sizeof(valid));
        mg__plan_err(err, errlen, "--pipeline-model-parallel-size %d must divide --num-layers %d and "
                     "gpus/(t·c) = %d (valid: %s)", L->p, m->num_layers, rest, valid);
        return -1;
    }
    if (L->d != cl->gpus / (L->t * mg__plan_c(L) * L->p)) {
        mg__plan_err(err, errlen, "data-parallel size %d must be gpus/(t·c·p) = %d", L->d,
                     cl->gpus / (L->t * mg__plan_c(L) * L->p));
        return -1;
    }
    if (B % L->d) {
        mg__plan_err(err, errlen, "--global-batch-size %ld must be a multiple of the data-parallel "
                     "size %d", B, L->d);
        return -1;
    }
    if (L->micro_batch_size <= 0 || (B / L->d) % L->micro_batch_size) {
        mg__plan_divisors(B / L->d, 0, valid, sizeof(valid));
        mg__plan_err(err, errlen, "--micro-batch-size %d must divide global batch / d = %ld (valid: %s)",
                     L->micro_batch_size, B / L->d, valid);
        return -1;
    }
    md = B / ((long)L->micro_batch_size * L->d);
    if (L->v <= 0 || m->num_layers % (L->p * L->v)) {
        mg__plan_err(err, errlen, "%d model chunks per GPU do not divide %d layers over %d stages",
                     L->v, m->num_layers, L->p);
        return -1;
    }
    if (L->v > 1 && L->p < 2) {
        mg__plan_err(err, errlen, "--num-layers-per-virtual-pipeline-stage needs "
                     "--pipeline-model-parallel-size >= 2");
        return -1;
    }
    if (L->v > 1 && md % L->p) {
        mg__plan_err(err, errlen, "the interleaved schedule needs the number of microbatches (%ld) "
                     "to be a multiple of --pipeline-model-parallel-size %d", md, L->p);
        return -1;
    }
    if (L->recompute < MG_PLAN_RECOMPUTE_NONE || L->recompute > MG_PLAN_RECOMPUTE_FULL) {
        mg__plan_err(err, errlen, "recompute must be none, selective or full");
        return -1;
    }
    if (L->sequence_parallel && L->t < 2) {
        mg__plan_err(err, errlen, "--sequence-parallel needs --tensor-model-parallel-size > 1");
        return -1;
    }
    if (tr->precision < MG_PLAN_BF16 || tr->precision > MG_PLAN_FP32) {
        mg__plan_err(err, errlen, "precision must be bf16, fp16 or fp32");
        return -1;
    }
    if (cl->gpu.peak_tflops <= 0 || cl->gpu.memory_gb <= 0 || cl->gpu.hbm_gbps <= 0 ||
        cl->gpu.nvlink_gbps <= 0 || cl->gpu.ib_gbps_per_node <= 0 ||
        cl->gpu.gemm_efficiency <= 0 || cl->gpu.gemm_efficiency > 1 ||
        cl->gpu.hbm_efficiency <= 0 || cl->gpu.nvlink_efficiency <= 0 ||
        cl->gpu.ib_efficiency <= 0 || cl->gpu.fp32_ratio <= 0) {
        mg__plan_err(err, errlen, "GPU '%s' needs positive peak, memory, HBM, NVLink and InfiniBand "
                     "rates and efficiencies in (0, 1]", cl->gpu.name);
        return -1;
    }
    return 0;
}

/* Costs of one microbatch through one unit of the model on one GPU. */
typedef struct mg__plan_cost {
    double gemm, membound, tp;  /* forward + backward (+ recompute)                           */
    double cp;                  /* context parallelism: the ring's exposed transfers          */
    double backward;            /* the backward part of the sum (DP overlap window)           */
} mg__plan_cost;

static void mg__plan_cost_add(mg__plan_cost *c, const mg__plan_cost *x, double k) {
    c->gemm += k * x->gemm;
    c->membound += k * x->membound;
    c->tp += k * x->tp;
    c->cp += k * x->cp;
    c->backward += k * x->backward;
}

/* A linear Y(M×N) = X(M×K)·W(K×N): forward, and backward as two GEMMs — input gradient
   dX = dY·Wᵀ (M×K, inner N) and weight gradient dW = Xᵀ·dY (K×N, inner M). */
static void mg__plan_linear(const mg_plan_gpu *g, double M, double N, double K, double batch,
                            int e, double peak, double *fwd, double *bwd) {
    *fwd += mg_plan_gemm_time(g, M, N, K, batch, e, peak);
    *bwd += mg_plan_gemm_time(g, M, K, N, batch, e, peak) + mg_plan_gemm_time(g, K, N, M, batch, e, peak);
}

typedef struct mg__plan_env {
    const mg_plan_model *m;
    const mg_plan_training *tr;
    const mg_plan_cluster *cl;
    const mg_plan_layout *L;
    int e;                      /* bytes per activation/weight element                      */
    double peak;                /* GEMM FLOP/s at this precision                            */
    double vocab_padded;        /* V rounded up to a multiple of N·t                         */
    double tokens;              /* b·s/c, rows of every activation of a microbatch           */
    double c;                   /* context-parallel size                                      */
    double r;                   /* 1/t under sequence parallelism, else 1                    */
} mg__plan_env;

/* Members of a group of n ranks `stride` apart that share a node, in the worst node
   (Megatron's order puts tensor-parallel ranks next to each other, data-parallel ranks t apart):
   a group of consecutive ranks stays inside a node only when it tiles the node exactly. */
static int mg__plan_per_node(int n, int stride, int gpn) {
    int span = n * stride, k;
    if (stride >= gpn) return 1;
    if (span <= gpn && gpn % span == 0) return n;              /* whole group in one node       */
    if (stride == 1 && n > gpn && n % gpn == 0) return gpn;    /* whole nodes                   */
    for (k = n < gpn / stride ? n : gpn / stride; k > 1; k--)  /* straddles: largest even share  */
        if ((gpn / stride) % k == 0 && n % k == 0) return k;
    return 1;
}

/* Tensor-parallel collective of a b·s·h activation: all-reduce, or under sequence parallelism
   the all-gather + reduce-scatter pair that replaces it (same volume, Korthikanti §4.2.2). */
static double mg__plan_tp_allreduce(const mg__plan_env *v, double bytes) {
    int t = v->L->t;
    return mg_plan_collective_time(v->cl, MG_PLAN_ALL_REDUCE, t,
                                   mg__plan_per_node(t, 1, v->cl->gpus_per_node), bytes);
}

/* One hop of the context-parallel ring: `bytes` to the next rank of the context group, whose
   c ranks sit t apart — within a node when t·c fits one (NVLink), else over InfiniBand shared
   by the node's GPUs, which all send at once. */
static double mg__plan_cp_hop(const mg__plan_env *v, double bytes) {
    const mg_plan_gpu *g = &v->cl->gpu;
    int gpn = v->cl->gpus_per_node;
    if (mg__plan_per_node((int)v->c, v->L->t, gpn) == (int)v->c)
        return g->nvlink_alpha_us * 1e-6 + bytes / (g->nvlink_gbps * 1e9 * g->nvlink_efficiency);
    return g->ib_alpha_us * 1e-6 + bytes / (g->ib_gbps_per_node * 1e9 * g->ib_efficiency / gpn);
}

/* One transformer layer (Megatron's GPT layer, PAPER.md "Tensor parallelism"): GEMMs, the
   memory-bound kernels, and the tensor-parallel all-reduces, for one microbatch. */
static mg__plan_cost mg__plan_layer_cost(const mg__plan_env *v) {
    const mg_plan_gpu *g = &v->cl->gpu;
    mg__plan_dims x = mg__plan_dims_of(v->m);
    double h = x.h, a = x.a, s = x.s, d = x.d;
    double t = v->L->t, b = v->L->micro_batch_size, n = v->tokens, e = v->e;
    int rc = v->L->recompute;
    double f = 0, bw = 0, attn_f = 0, attn_b = 0;
    double score_elems, fwd_bytes, attn_bytes, act_bytes, fwd_mem, bwd_mem, ar;
    double kernels = v->m->position_embedding == MG_PLAN_POS_ROPE ? 8 : 7;
    mg__plan_cost c;
    /* GEMMs, per tensor-parallel rank: QKV column-parallel (N = (q + 2·kv)/t: the rank's query
       heads and their key/value groups), attention per head (b·a/t batched QKᵀ: s×s×d, and
       scores·V: s×d×s), projection row-parallel (K = q/t), MLP up column-parallel (N = F/t;
       with SwiGLU gate and up as one N = 2F/t GEMM, Megatron-LM's fused linear_fc1), down
       row-parallel (K = F/t). GPT-2: q = kv = h, F = 4h. */
    mg__plan_linear(g, n, (x.q + 2 * x.kv) / t, h, 1, v->e, v->peak, &f, &bw);
    mg__plan_linear(g, s / v->c, s, d, b * a / t, v->e, v->peak, &attn_f, &attn_b);
    mg__plan_linear(g, s / v->c, d, s, b * a / t, v->e, v->peak, &attn_f, &attn_b);
    mg__plan_linear(g, n, h, x.q / t, 1, v->e, v->peak, &f, &bw);
    mg__plan_linear(g, n, (x.mats - 1) * x.F / t, h, 1, v->e, v->peak, &f, &bw);
    mg__plan_linear(g, n, h, x.F / t, 1, v->e, v->peak, &f, &bw);
    f += attn_f;
    bw += attn_b;
    /* Memory-bound kernels, bytes per forward (Megatron's fused kernels; r·h-wide tensors
       live in the replicated region unless sequence parallel):
         layernorm ×2 (read x, write y)                      2 × 2e·r·h
         bias + dropout + residual add ×2 (read 2, write 1, mask)  2 × (3e + 1)·r·h
         bias + GeLU (read, write the F/t intermediate)      2e·F/t  (8e·h/t for F = 4h)
           SwiGLU instead: read gate and up, write F/t      3e·F/t
         rotary positions on Q and K (read, write)          2e·(q + kv)/t
         scale + mask + softmax (read, write scores)         2e·a·s/t
         attention dropout (read, write, mask)               (2e + 1)·a·s/t
       The backward of each reads its saved input and the output gradient and writes the
       input gradient: twice the forward's traffic. RMSNorm moves what layernorm moves. */
    score_elems = a * s / t;
    attn_bytes = v->m->flash_attention || v->c > 1 ? 0.0   /* flash (and the ring): fused */
                 : n * (4 * e + 1) * score_elems;
    act_bytes = (v->m->swiglu ? 3 : 2) * e * x.F / t;
    if (v->m->position_embedding == MG_PLAN_POS_ROPE) act_bytes += 2 * e * (x.q + x.kv) / t;
    fwd_bytes = n * (v->r * (10 * e + 2) * h + act_bytes) + attn_bytes;
    fwd_mem = mg__plan_membound_time(g, fwd_bytes, kernels);
    bwd_mem = mg__plan_membound_time(g, 2 * fwd_bytes, 2 * kernels);
    /* Tensor parallelism: 2 all-reduces of the b·s·h output in forward (operator g after the
       attention projection and after the MLP), 2 in backward (operator f before QKV and FC1). */
    ar = v->L->t > 1 ? mg__plan_tp_allreduce(v, n * h * e) : 0.0;
    c.gemm = f + bw;
    c.membound = fwd_mem + bwd_mem;
    c.tp = 4 * ar;
    c.backward = bw + bwd_mem + 2 * ar;
    /* Context parallelism: c steps of the ring per pass. Forward: c − 1 hops of the local K/V
       (2·kv/t wide, e bytes) each overlapping one step's attention (1/c of it); backward: in
       c − 1 steps a K/V hop and an fp32 dK/dV hop share the link while the step's backward
       attention runs, and the last dK/dV hop (back to its owner) is exposed. Full
       recomputation repeats the forward's. */
    c.cp = 0;
    if (v->c > 1) {
        double kv = mg__plan_cp_hop(v, 2 * x.kv / t * n * e), dkv = mg__plan_cp_hop(v, 2 * x.kv / t * n * 4);
        double fwd = (v->c - 1) * fmax(0.0, kv - attn_f / v->c);
        double bwd = (v->c - 1) * fmax(0.0, kv + dkv - attn_b / v->c) + dkv;
        c.cp = fwd + bwd + (rc == MG_PLAN_RECOMPUTE_FULL ? fwd : 0.0);
        c.backward += bwd + (rc == MG_PLAN_RECOMPUTE_FULL ? fwd : 0.0);
    }
    if (v->m->flash_attention || v->c > 1) {   /* the tiled backward (the ring's too) recomputes
                                                 QKᵀ: half the core's GEMMs */
        c.gemm += attn_f / 2;
        c.backward += attn_f / 2;
    }
    /* Recomputation, inside the backward: full reruns the whole forward (its 2 all-reduces
       too); selective reruns only the attention core (QKᵀ, softmax, dropout, ·V) — nothing
       more under flash_attention, whose backward recomputes its scores anyway. */
    if (rc == MG_PLAN_RECOMPUTE_FULL) {
        c.gemm += f;
        c.membound += fwd_mem;
        c.tp += 2 * ar;
        c.backward += f + fwd_mem + 2 * ar;
    } else if (rc == MG_PLAN_RECOMPUTE_SELECTIVE && !v->m->flash_attention && v->c == 1) {
        double attn_mem = mg__plan_membound_time(g, attn_bytes, 2);
        c.gemm += attn_f;
        c.membound += attn_mem;
        c.backward += attn_f + attn_mem;
    }
    return c;
}

/* Stage 0's extra work: the vocabulary-parallel embedding lookup (+ positions, dropout), whose
   output is all-reduced over the tensor-parallel group; its backward scatters into the
   embedding gradient. */
static mg__plan_cost mg__plan_embedding_cost(const mg__plan_env *v) {
    double h = v->m->hidden_size, n = v->tokens, e = v->e;
    double fwd_bytes = n * h * (v->r * (3 * e + 1) + e);
    mg__plan_cost c;
    c.gemm = c.cp = 0;
    c.membound = mg__plan_membound_time(&v->cl->gpu, fwd_bytes, 3) +
                 mg__plan_membound_time(&v->cl->gpu, 2 * fwd_bytes, 4);
    c.backward = mg__plan_membound_time(&v->cl->gpu, 2 * fwd_bytes, 4);
    c.tp = v->L->t > 1 ? mg__plan_tp_allreduce(v, n * h * e) : 0.0;
    return c;
}

/* The last stage's extra work: final layernorm, the output layer (tied to the embedding or
   untied, the same GEMMs either way; vocabulary-parallel: N = V/t), and the parallel cross-entropy in fp32 (read the logits,
   write and reread fp32 exponentials; backward reads them and writes the logit gradient);
   all-reduces: the input gradient of the output layer (operator f) and three b·s floats
   (row max, sum of exponentials, target logit). */
static mg__plan_cost mg__plan_head_cost(const mg__plan_env *v) {
    const mg_plan_gpu *g = &v->cl->gpu;
    double h = v->m->hidden_size, n = v->tokens, e = v->e, vt = v->vocab_padded / v->L->t;
    double f = 0, bw = 0, ln_bytes = n * v->r * 2 * e * h, ce_bytes = n * vt * (2 * e + 12);
    mg__plan_cost c;
    mg__plan_linear(g, n, vt, h, 1, v->e, v->peak, &f, &bw);
    c.gemm = f + bw;
    c.cp = 0;
    c.membound = mg__plan_membound_time(g, 3 * ln_bytes, 3) + mg__plan_membound_time(g, ce_bytes, 6);
    c.tp = v->L->t > 1 ? mg__plan_tp_allreduce(v, n * h * e) + 3 * mg__plan_tp_allreduce(v, n * 4) : 0.0;
    c.backward = bw + mg__plan_membound_time(g, 2 * ln_bytes, 2);
    return c;
}

/* One pipeline transfer of a microbatch's activation (or its gradient) between stages:
   b·s·h elements, each tensor-parallel rank sending 1/t of it under scatter/gather (then an
   all-gather over NVLink rebuilds it) or under sequence parallelism (already split). All GPUs
   of a node send at once, so each gets its node's InfiniBand bandwidth / gpus_per_node. */
static double mg__plan_p2p_time(const mg__plan_env *v) {
    const mg_plan_cluster *cl = v->cl;
    const mg_plan_gpu *g = &cl->gpu;
    int t = v->L->t, split = t > 1 && (v->L->sequence_parallel || v->tr->scatter_gather);
    double bytes = v->tokens * v->m->hidden_size * v->e;
    double sent = split ? bytes / t : bytes, time;
    int gpn = cl->gpus_per_node;
    if (cl->gpus > gpn) {
        time = g->ib_alpha_us * 1e-6 + sent / (g->ib_gbps_per_node * 1e9 * g->ib_efficiency / gpn);
    } else {
        time = g->nvlink_alpha_us * 1e-6 + sent / (g->nvlink_gbps * 1e9 * g->nvlink_efficiency);
    }
    if (split && !v->L->sequence_parallel)
        time += mg_plan_collective_time(cl, MG_PLAN_ALL_GATHER, t, mg__plan_per_node(t, 1, gpn), bytes);
    return time;
}

/* Parameters one GPU holds on a middle, the first and the last stage: its share of the
   layers (GPT-2: 12h²/t + 7h/t split, 6h replicated: two biases and two layernorms; in
   general mg__plan_dims_of's split and replicated counts) plus the embeddings on the first
   stage (word V·h/t, the learned position table) and on the last the final norm and the
   output layer: an untied one of its own (V·h/t), or — tied, with p > 1 — the last stage's
   copy of the word embedding. */
static void mg__plan_stage_params(const mg__plan_env *v, double *mid, double *first, double *last) {
    mg__plan_dims x = mg__plan_dims_of(v->m);
    double h = x.h, t = v->L->t, p = v->L->p;
    double layers = v->m->num_layers / p * (x.split / t + x.replicated);
    double word = v->vocab_padded * h / t;
    double pos = v->m->position_embedding != MG_PLAN_POS_LEARNED ? 0
                 : (v->m->max_position_embeddings > 0 ? v->m->max_position_embeddings : x.s) * h;
    double out_layer = v->m->untie_embeddings || p > 1 ? word : 0;
    *mid = layers;
    if (v->L->p == 1) {
        *first = *last = layers + word + pos + out_layer + x.norm;
    } else {
        *first = layers + word + pos;
        *last = layers + out_layer + x.norm;
    }
}

MGDEF int mg_plan_evaluate(const mg_plan_model *m, const mg_plan_training *tr,
                           const mg_plan_cluster *cl, const mg_plan_layout *L,
                           mg_plan_result *out, char *err, size_t errlen) {
    const mg_plan_gpu *g = &cl->gpu;
    mg__plan_env env;
    mg__plan_cost layer, emb, head, first, last, mid, *slow;
    double e, gb, ob, lp, pp_one, t_first, t_last, t_mid, t_max, t_sum, t_pipe;
    double p_mid, p_first, p_last, p_max, dp, opt_params;
    double act_layer, inflight_first, inflight_last, act_first, act_last, work, mem_first, mem_last;
    double head_bytes;          /* the classifier's bytes on the last stage */
    long mb;
    int p = L->p, v = L->v, gpn = cl->gpus_per_node, dc;
    mg_plan_model mc;           /* the model as one GPU of a context group sees it: s/c tokens */
    if (mg_plan_check(m, tr, cl, L, err, errlen)) return -1;
    mc = *m;
    mc.seq_length = m->seq_length / mg__plan_c(L);
    if (mg__plan_c(L) > 1) mc.flash_attention = 1;
    memset(out, 0, sizeof(*out));
    out->layout = *L;
    mb = tr->global_batch_size / ((long)L->micro_batch_size * L->d);
    out->num_microbatches = mb;

    mg__plan_param_bytes(tr->precision, tr->grads_in_fp32, &e, &gb, &ob);
    env.m = m; env.tr = tr; env.cl = cl; env.L = L;
    env.e = (int)e;
    env.peak = g->peak_tflops * 1e12 * (tr->precision == MG_PLAN_FP32 ? g->fp32_ratio : 1.0);
    {   /* Megatron's padding: a multiple of N·t */
        double mult = (m->make_vocab_size_divisible_by > 0 ? m->make_vocab_size_divisible_by
                                                           : 128) * (double)L->t;
        env.vocab_padded = ceil((double)m->vocab_size / mult) * mult;
    }
    env.c = mg__plan_c(L);
    env.tokens = (double)L->micro_batch_size * m->seq_length / env.c;
    env.r = L->sequence_parallel ? 1.0 / L->t : 1.0;

    /* Per-microbatch time of each stage: its l/p layers, the embedding on the first, the
       output layer and loss on the last, and 2 transfers per model chunk (send forward /
       receive backward, send backward / receive forward, batched as Megatron does). */
    layer = mg__plan_layer_cost(&env);
    emb = mg__plan_embedding_cost(&env);
    head = mg__plan_head_cost(&env);
    lp = (double)m->num_layers / p;
    memset(&mid, 0, sizeof(mid));
    mg__plan_cost_add(&mid, &layer, lp);
    first = mid;
    last = mid;
    mg__plan_cost_add(&first, &emb, 1);
    mg__plan_cost_add(&last, &head, 1);
    if (p == 1) mg__plan_cost_add(&first, &head, 1);
    mg__plan_stage_params(&env, &p_mid, &p_first, &p_last);
    if (!tr->grad_accum_fusion) {
        /* Without gradient-accumulation fusion every microbatch's weight gradients land in a
           fresh buffer (e bytes) that is then added into the accumulated gradient (read and
           write g bytes): a memory-bound pass over the stage's parameters per microbatch. */
        mg__plan_cost acc;
        memset(&acc, 0, sizeof(acc));
        acc.membound = acc.backward = mg__plan_membound_time(g, p_mid * (e + 2 * gb), 0);
        mg__plan_cost_add(&mid, &acc, 1);
        acc.membound = acc.backward = mg__plan_membound_time(g, p_first * (e + 2 * gb), 0);
        mg__plan_cost_add(&first, &acc, 1);
        acc.membound = acc.backward = mg__plan_membound_time(g, p_last * (e + 2 * gb), 0);
        mg__plan_cost_add(&last, &acc, 1);
    }
    pp_one = p > 1 ? 2.0 * v * mg__plan_p2p_time(&env) : 0.0;
    t_mid = mid.gemm + mid.membound + mid.tp + mid.cp + pp_one;
    t_first = first.gemm + first.membound + first.tp + first.cp + pp_one;
    t_last = last.gemm + last.membound + last.tp + last.cp + pp_one;
    if (p == 1) {
        t_max = t_sum = t_first;
        slow = &first;
    } else {
        slow = t_first >= t_last ? &first : &last;
        t_max = t_first >= t_last ? t_first : t_last;
        t_sum = (p - 2) * t_mid + t_first + t_last;
    }
    /* Pipeline schedule (PAPER.md): 1F1B takes (m + p − 1) stage-times for equal stages; with
       unequal ones the slowest stage runs m microbatches and the others' first microbatches
       fill and drain the pipe: m·t_max + (Σ t_i − t_max). Interleaving with v chunks divides
       the fill and drain by v (bubble (p−1)/(v·m)) at v× the pipeline transfers. */
    t_pipe = mb * t_max + (t_sum - t_max) / v;
    out->time_gemm = mb * slow->gemm;
    out->time_memory_bound = mb * slow->membound;
    out->time_tp_comm = mb * slow->tp;
    out->time_cp_comm = mb * slow->cp;
    out->time_pp_comm = mb * pp_one;
    out->time_bubble = t_pipe - mb * t_max;
    out->bubble_fraction = out->time_bubble / (mb * t_max);

    /* Data parallelism after the pipeline flush: ring all-reduce of the stage's gradients
       over d ranks that sit t apart (one per node when t fills a node); with the distributed
       optimizer a reduce-scatter of gradients and an all-gather of the updated 16-bit
       weights (same volume). With --overlap-grad-reduce the reduction runs in buckets
       (Megatron: 40M parameters) during the last microbatch's backward: only what outlasts
       that backward, and at least the last bucket, is exposed. Tied embeddings: one more
       all-reduce of the word-embedding gradient between the first and the last stage (an
       untied output layer has no such copy). */
    p_max = p_first > p_last ? p_first : p_last;
    dp = 0;
    dc = L->d * (int)env.c;   /* with context parallelism the d·c replicas reduce together */
    if (dc > 1) {
        int per_node = mg__plan_per_node(dc, L->t, gpn);
        double grads = mg_plan_collective_time(cl, L->distributed_optimizer ? MG_PLAN_REDUCE_SCATTER
                                               : MG_PLAN_ALL_REDUCE, dc, per_node, p_max * gb);
        double params = L->distributed_optimizer
            ? mg_plan_collective_time(cl, MG_PLAN_ALL_GATHER, dc, per_node, p_max * e) : 0.0;
        if (tr->overlap_grad_reduce) {
            double buckets = ceil(p_max / 40e6), window = (slow == &first ? first : last).backward;
            double exposed = grads - window, last_bucket = grads / (buckets > 1 ? buckets : 1);
            grads = exposed > last_bucket ? exposed : last_bucket;
        }
        dp = grads + params;
    }
    if (p > 1 && !m->untie_embeddings)
        dp += mg_plan_collective_time(cl, MG_PLAN_ALL_REDUCE, 2, cl->gpus > gpn ? 1 : 2,
                                      env.vocab_padded * m->hidden_size / L->t * gb);
    out->time_dp_comm = dp;
    /* Optimizer step, memory-bound over the parameters this GPU updates: Adam reads and
       writes the fp32 master weight and both moments (24 bytes), reads the main gradient (4),
       writes the 16-bit weight (e); the gradient norm reads the gradient again (4); the
       gradient buffer is zeroed (g). */
    opt_params = L->distributed_optimizer && dc > 1 ? p_max / dc : p_max;
    out->time_optimizer = mg__plan_membound_time(g, opt_params * (32 + e) + p_max * gb, 8);
    out->iteration_time = t_pipe + out->time_dp_comm + out->time_optimizer;   /* the ring's
                                                      time is inside the stage times */

    /* Throughput, counted as the paper counts (recomputed forward included). Selective
       recomputation recomputes nothing where the attention is tiled (flash_attention, or the
       ring at c > 1: the backward recomputes the scores either way, as the time above
       assumes), so there it counts as none. */
    out->flops_per_iteration = mg_plan_flops(m, (double)tr->global_batch_size,
                                             L->recompute == MG_PLAN_RECOMPUTE_SELECTIVE &&
                                             mc.flash_attention ? MG_PLAN_RECOMPUTE_NONE
                                                                : L->recompute);
    out->model_flops_per_iteration = mg_plan_flops(m, (double)tr->global_batch_size,
                                                   MG_PLAN_RECOMPUTE_NONE);
    out->tflops_per_gpu = out->flops_per_iteration / (out->iteration_time * cl->gpus) / 1e12;
    out->model_tflops_per_gpu = out->model_flops_per_iteration / (out->iteration_time * cl->gpus) / 1e12;
    out->percent_of_peak = 100.0 * out->tflops_per_gpu * 1e12 / env.peak;
    out->tokens_per_second = (double)tr->global_batch_size * m->seq_length / out->iteration_time;

    /* Memory of the first and the last stage (the others hold less of both):
       - weights, gradients, optimizer state per parameter (mg_plan_bytes_per_parameter);
       - activations: with 1F1B stage i keeps p − i microbatches in flight (stage 0: p, so
         l/p layers × p = l layers' worth); interleaving with v chunks keeps
         l·(1 + (p−1)/(p·v)) layers' worth on stage 0 (Korthikanti §4.2.3) and
         ((v−1)·p + 1) chunks of l/(p·v) layers on the last;
       - the working set of recomputation: one layer's full activations (full) or one
         layer's attention scores (selective) while its backward runs;
       - stage 0: the embedding dropout mask per microbatch in flight (s·b·h·r bytes);
         last stage: the fp32 logits of the loss, 4·s·b·V/t (Korthikanti §4.3), and the final
         layernorm input; with the fused classifier instead of the logits the gradient of
         the output layer's input, s·b·h·e·r, and one chunk of logits (fp32, plus their
         16-bit gradient in 16-bit runs), at most MG_PLAN_CLASSIFIER_CHUNK_BYTES (the
         _CUDA budget on a GPU, a preset with SMs: the trainer's rule). */
    /* with context parallelism: the layer of s/c tokens, whose ring (tiled) keeps each query
       row's fp32 log-sum-exp and no scores */
    act_layer = mg_plan_activation_bytes_per_layer(&mc, L->micro_batch_size, L->t,
                                                   L->sequence_parallel, L->recompute, env.e);
    if (v == 1) {
        inflight_first = (mb < p ? (double)mb : (double)p) * lp;
        inflight_last = lp;
    } else {
        inflight_first = m->num_layers * (1.0 + (p - 1.0) / ((double)p * v));
        inflight_last = ((v - 1.0) * p + 1.0) * m->num_layers / ((double)p * v);
    }
    work = 0;
    if (L->recompute == MG_PLAN_RECOMPUTE_FULL)
        work = mg_plan_activation_bytes_per_layer(&mc, L->micro_batch_size, L->t,
                                                  L->sequence_parallel, MG_PLAN_RECOMPUTE_NONE,
                                                  env.e);
    else if (L->recompute == MG_PLAN_RECOMPUTE_SELECTIVE && env.c == 1 && !m->flash_attention)
        work = (double)m->num_attention_heads * m->seq_length * m->seq_length * L->micro_batch_size *
               (2.0 * e + 1.0) / L->t;
    act_first = act_layer * inflight_first + work +
                env.tokens * m->hidden_size * env.r * (v == 1 ? (mb < p ? mb : p) : p);
    if (tr->fused_classifier) {
        double chunk = env.tokens * env.vocab_padded / L->t * (4.0 + (e < 4 ? e : 0));
        double cap = g->sms > 0 ? MG_PLAN_CLASSIFIER_CHUNK_BYTES_CUDA
                                : MG_PLAN_CLASSIFIER_CHUNK_BYTES;
        head_bytes = env.tokens * m->hidden_size * env.r * e + (chunk < cap ? chunk : cap);
    } else {
        head_bytes = 4.0 * env.tokens * env.vocab_padded / L->t;
    }
    act_last = act_layer * inflight_last + work + head_bytes + env.tokens * m->hidden_size * env.r * e;
    if (p == 1) act_first = act_first + head_bytes + env.tokens * m->hidden_size * env.r * e;
    {
        double per_param_opt = L->distributed_optimizer && dc > 1 ? ob / dc : ob;
        mem_first = p_first * (e + gb + per_param_opt) + act_first;
        mem_last = p_last * (e + gb + per_param_opt) + act_last;
        out->worst_stage = (p > 1 && mem_last > mem_first) ? p - 1 : 0;
        {
            double params = out->worst_stage ? p_last : p_first;
            out->mem_weights = params * e;
            out->mem_gradients = params * gb;
            out->mem_optimizer = params * per_param_opt;
            out->mem_activations = out->worst_stage ? act_last : act_first;
        }
        out->mem_total = out->mem_weights + out->mem_gradients + out->mem_optimizer + out->mem_activations;
    }
    out->mem_limit = (g->memory_gb - g->reserve_gb) * MG__PLAN_GIB;
    out->fits = out->mem_total <= out->mem_limit;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
   Search
   ------------------------------------------------------------------------------------------ */
MGDEF mg_plan_layout mg_plan_layout_any(void) {
    mg_plan_layout L;
    L.t = L.p = L.d = L.v = L.micro_batch_size = L.c = 0;
    L.recompute = L.sequence_parallel = L.distributed_optimizer = MG_PLAN_ANY;
    return L;
}

static int mg__plan_better(const mg_plan_result *a, const mg_plan_result *b) {
    if (a->iteration_time != b->iteration_time) return a->iteration_time < b->iteration_time;
    return a->mem_total < b->mem_total;
}

MGDEF int mg_plan_search(const mg_plan_model *m, const mg_plan_training *tr,
                         const mg_plan_cluster *cl, const mg_plan_layout *fx,
                         mg_plan_result *best, int max_best, mg_plan_search_stats *stats,
                         char *err, size_t errlen) {
    int n = cl->gpus, kept = 0, t, cp, p, v, rc, sp, dopt;
    long B = tr->global_batch_size, b;
    mg_plan_search_stats st;
    st.evaluated = st.fitting = 0;
    if (max_best < 1) { mg__plan_err(err, errlen, "search needs room for at least one result"); return -1; }
    {   /* the constraint alone must be satisfiable in its own terms */
        mg_plan_layout probe;
        probe.t = fx->t > 0 ? fx->t : 1;
        probe.p = fx->p > 0 ? fx->p : 1;
        probe.c = fx->c > 0 ? fx->c : 1;
        probe.v = 1;
        probe.d = n / (probe.t * probe.c * probe.p) > 0 ? n / (probe.t * probe.c * probe.p) : 1;
        probe.micro_batch_size = 1;
        probe.recompute = MG_PLAN_RECOMPUTE_NONE;
        probe.sequence_parallel = 0;
        probe.distributed_optimizer = 0;
        if (fx->t > 0 || fx->p > 0 || fx->c > 0) {
            mg_plan_training tr1 = *tr;
            tr1.global_batch_size = (long)probe.d; /* batch and b checked per layout below */
            if (mg_plan_check(m, &tr1, cl, &probe, err, errlen)) return -1;
        } else {
            mg_plan_training tr1 = *tr;
            probe.d = n;
            tr1.global_batch_size = n;
            if (mg_plan_check(m, &tr1, cl, &probe, err, errlen)) return -1;
        }
    }
    for (t = 1; t <= n; t++) {
        if (n % t || mg__plan_tp_split(m) % t || (fx->t > 0 && t != fx->t)) continue;
        for (cp = 1; cp <= n / t; cp++) {   /* c = 1 unless constrained or the sequence splits */
            if ((n / t) % cp || (cp > 1 && m->seq_length % (2 * cp)) || (fx->c > 0 && cp != fx->c) ||
                (fx->c <= 0 && cp > 1 && cp & (cp - 1)))   /* free c: powers of two */
                continue;
            for (p = 1; p <= m->num_layers; p++) {
                int d;
                if (m->num_layers % p || (n / t / cp) % p || (fx->p > 0 && p != fx->p)) continue;
                d = n / (t * cp * p);
                if (B % d || (fx->d > 0 && d != fx->d)) continue;
                for (b = 1; b <= B / d; b++) {
                    long mb;
                    if ((B / d) % b || (fx->micro_batch_size > 0 && b != fx->micro_batch_size)) continue;
                    mb = B / (b * d);
                    for (v = 1; v <= m->num_layers / p; v++) {
                        if ((m->num_layers / p) % v || (fx->v > 0 && v != fx->v)) continue;
                        if (v > 1 && (p < 2 || mb % p)) continue;
                        for (rc = 0; rc <= 2; rc++) {
                            if (fx->recompute != MG_PLAN_ANY && rc != fx->recompute) continue;
                            for (sp = 0; sp <= 1; sp++) {
                                if (fx->sequence_parallel != MG_PLAN_ANY && sp != fx->sequence_parallel) continue;
                                if (sp && t < 2) continue;
                                for (dopt = 0; dopt <= 1; dopt++) {
                                    mg_plan_layout L;
                                    mg_plan_result r;
                                    int i;
                                    if (fx->distributed_optimizer != MG_PLAN_ANY && dopt != fx->distributed_optimizer) continue;
                                    if (dopt && d * cp < 2 && fx->distributed_optimizer != 1) continue;
                                    L.t = t; L.p = p; L.d = d; L.v = v; L.micro_batch_size = (int)b;
                                    L.c = cp;
                                    L.recompute = rc; L.sequence_parallel = sp; L.distributed_optimizer = dopt;
                                    if (mg_plan_evaluate(m, tr, cl, &L, &r, NULL, 0)) continue;
                                    st.evaluated++;
                                    if (!r.fits) continue;
                                    st.fitting++;
                                    /* insert into the sorted top list */
                                    if (kept == max_best && !mg__plan_better(&r, &best[kept - 1])) continue;
                                    i = kept < max_best ? kept++ : kept - 1;
                                    while (i > 0 && mg__plan_better(&r, &best[i - 1])) {
                                        best[i] = best[i - 1];
                                        i--;
                                    }
                                    best[i] = r;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if (stats) *stats = st;
    if (st.evaluated == 0) {
        mg__plan_err(err, errlen, "no valid layout: the fixed dimensions leave none (check that the "
                     "global batch divides by d·b and the layers by p·v)");
        return -1;
    }
    return kept;
}

static const char *mg__plan_recompute_name(int rc) {
    return rc == MG_PLAN_RECOMPUTE_FULL ? "full" : rc == MG_PLAN_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

MGDEF void mg_plan_layout_label(const mg_plan_layout *L, char *buf, size_t len) {
    char cp[24] = "";
    if (L->c > 1) snprintf(cp, sizeof cp, " c=%d", L->c);
    snprintf(buf, len, "t=%d%s p=%d d=%d v=%d b=%d recompute=%s%s%s", L->t, cp, L->p, L->d, L->v,
             L->micro_batch_size, mg__plan_recompute_name(L->recompute),
             L->sequence_parallel ? " sp" : "", L->distributed_optimizer ? " distopt" : "");
}

MGDEF void mg_plan_explain(const mg_plan_result *a, const mg_plan_result *b, char *buf, size_t len) {
    static const char *names[8] = {"GEMM time", "memory-bound kernels", "tensor-parallel comm",
                                   "pipeline transfers", "pipeline bubble", "data-parallel comm",
                                   "optimizer step", "context-parallel ring"};
    double da[8], db[8], delta[8];
    int order[8], i, j, said = 0;
    size_t used;
    char label[128];
    da[0] = a->time_gemm; da[1] = a->time_memory_bound; da[2] = a->time_tp_comm;
    da[3] = a->time_pp_comm; da[4] = a->time_bubble; da[5] = a->time_dp_comm; da[6] = a->time_optimizer;
    db[0] = b->time_gemm; db[1] = b->time_memory_bound; db[2] = b->time_tp_comm;
    db[3] = b->time_pp_comm; db[4] = b->time_bubble; db[5] = b->time_dp_comm; db[6] = b->time_optimizer;
    da[7] = a->time_cp_comm; db[7] = b->time_cp_comm;
    for (i = 0; i < 8; i++) { delta[i] = db[i] - da[i]; order[i] = i; }
    for (i = 1; i < 8; i++)   /* by saving, largest first */
        for (j = i; j > 0 && delta[order[j]] > delta[order[j - 1]]; j--) {
            int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x;
        }
    mg_plan_layout_label(&b->layout, label, sizeof(label));
    used = (size_t)snprintf(buf, len, "%.1f%% faster than %s:",
                            100.0 * (b->iteration_time / a->iteration_time - 1.0), label);
    for (i = 0; i < 8 && used < len; i++) {   /* savings worth more than 0.5% of the iteration */
        int k = order[i];
        if (delta[k] <= 0.005 * a->iteration_time || said == 3) break;
        used += (size_t)snprintf(buf + used, len - used, "%s %.3g s less %s", said ? "," : "",
                                 delta[k], names[k]);
        said++;
    }
    if (used < len && delta[order[7]] < -0.005 * a->iteration_time)
        used += (size_t)snprintf(buf + used, len - used, "%s pays %.3g s more %s", said ? ";" : "",
                                 -delta[order[7]], names[order[7]]);
    else if (!said && used < len)
        snprintf(buf + used, len - used, " differences under 0.5%% of the iteration each");
}

/* ---------------------------------------------------------------------------------------------
   CPU calibration
   ------------------------------------------------------------------------------------------ */
#ifndef MG_PLAN_NO_CBLAS
static double mg__plan_now(void) {
#if defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}
#endif

MGDEF int mg_plan_calibrate_cpu(mg_plan_gpu *gpu, int threads, int ranks_per_node, double seconds,
                                char *err, size_t errlen) {
#ifdef MG_PLAN_NO_CBLAS
    (void)gpu; (void)threads; (void)ranks_per_node; (void)seconds;
    mg__plan_err(err, errlen, "built with MG_PLAN_NO_CBLAS: no sgemm to calibrate; give "
                 "--peak-tflops and --hbm-gbps instead");
    return -1;
#else
    /* Square sgemm at these sizes gives the efficiency curve; the fastest is the peak. */
    static const int sizes[5] = {32, 64, 128, 256, 512};
    const int nmax = 512, npts = 5;
    size_t elems = (size_t)nmax * nmax, copy_bytes = (size_t)32 << 20;
    float *A, *Bm, *C;
    char *src, *dst;
    double t0, t1, moved = 0, budget = seconds > 0.02 ? seconds : 0.02, rate[5], best = 0;
    int reps, old_threads = -1, k;
    size_t i;
    A = (float *)malloc(elems * sizeof(float));
    Bm = (float *)malloc(elems * sizeof(float));
    C = (float *)malloc(elems * sizeof(float));
    src = (char *)malloc(copy_bytes);
    dst = (char *)malloc(copy_bytes);
    if (!A || !Bm || !C || !src || !dst) {
        free(A); free(Bm); free(C); free(src); free(dst);
        mg__plan_err(err, errlen, "calibration: out of memory");
        return -1;
    }
    for (i = 0; i < elems; i++) { A[i] = (float)(i % 7) * 0.1f; Bm[i] = (float)(i % 5) * 0.1f; C[i] = 0; }
    memset(src, 1, copy_bytes);
    memset(dst, 0, copy_bytes);
#ifdef OPENBLAS_VERSION
    if (threads > 0) { old_threads = openblas_get_num_threads(); openblas_set_num_threads(threads); }
#else
    (void)threads;
#endif
    for (k = 0; k < npts; k++) {   /* half the budget over the sizes: a warm-up, then repeats */
        int n = sizes[k];
        double flops = 0;
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, Bm, n, 0.0f, C, n);
        reps = 0;
        t0 = mg__plan_now();
        do {
            cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, Bm, n, 0.0f, C, n);
            flops += 2.0 * n * n * n;
            reps++;
            t1 = mg__plan_now();
        } while (t1 - t0 < budget / 2 / npts || reps < 3);
        rate[k] = flops / (t1 - t0);
        if (rate[k] > best) best = rate[k];
    }
    gpu->peak_tflops = best / 1e12;
    gpu->gemm_efficiency = 1.0;
    gpu->curve_points = npts;
    for (k = 0; k < npts; k++) {
        gpu->curve_size[k] = sizes[k];
        gpu->curve_efficiency[k] = rate[k] / best;
    }
    /* Memory bandwidth: memcpy reads and writes every byte. */
    memcpy(dst, src, copy_bytes);
    t0 = mg__plan_now();
    reps = 0;
    do {
        memcpy(dst, src, copy_bytes);
        src[(size_t)reps % copy_bytes] ^= dst[((size_t)reps * 4099) % copy_bytes]; /* keep copies live */
        moved += 2.0 * (double)copy_bytes;
        reps++;
        t1 = mg__plan_now();
    } while (t1 - t0 < budget / 2 || reps < 3);
    gpu->hbm_gbps = moved / (t1 - t0) / 1e9;
#ifdef OPENBLAS_VERSION
    if (old_threads > 0) openblas_set_num_threads(old_threads);
#else
    (void)old_threads;
#endif
    free(A); free(Bm); free(C); free(src); free(dst);
    /* Ranks on one machine exchange through MPI shared memory: a copy in and a copy out. */
    gpu->nvlink_gbps = gpu->hbm_gbps / 2;
    gpu->ib_gbps_per_node = gpu->hbm_gbps / 2;
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    {
        double bytes = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        if (bytes > 0) gpu->memory_gb = bytes / MG__PLAN_GIB / (ranks_per_node > 0 ? ranks_per_node : 1);
    }
#else
    (void)ranks_per_node;
#endif
    return 0;
#endif
}

/* ---------------------------------------------------------------------------------------------
   The tool
   ------------------------------------------------------------------------------------------ */
typedef struct mg__plan_cli {
    mg_plan_model model;
    mg_plan_training train;
    mg_plan_cluster cluster;
    mg_plan_layout fixed;           /* 0 / MG_PLAN_ANY where not given                        */
    int layers_per_virtual;         /* --num-layers-per-virtual-pipeline-stage               */
    int precision_given, search, json, top, calibrate, gpus_per_node_given;
    int group_query_attention;      /* --group-query-attention given                          */
    double rope_unused;             /* --rotary-base etc.: checked (gpt_train's rules), no
                                       effect on the costs                                    */
    double train_tokens;
    /* GPU overrides (negative: not given) */
    double peak, mem, hbm, nvlink, ib, gemm_eff, reserve, hbm_eff, kernel_us;
    int sms;
    char gpu_name[32];
} mg__plan_cli;

static int mg__plan_parse_long(const char *flag, const char *s, long lo, long *out, char *err,
                               size_t errlen) {
    char *end;
    long v;
    if (!s) { mg__plan_err(err, errlen, "%s needs a value", flag); return -1; }
    v = strtol(s, &end, 10);
    if (end == s || *end || v < lo) {
        mg__plan_err(err, errlen, "%s needs an integer >= %ld (got '%s')", flag, lo, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int mg__plan_parse_int(const char *flag, const char *s, int lo, int *out, char *err,
                              size_t errlen) {
    long v;
    if (mg__plan_parse_long(flag, s, lo, &v, err, errlen)) return -1;
    if (v > 1000000000L) { mg__plan_err(err, errlen, "%s %ld is too large", flag, v); return -1; }
    *out = (int)v;
    return 0;
}

static int mg__plan_parse_double(const char *flag, const char *s, double *out, char *err,
                                 size_t errlen) {
    char *end;
    double v;
    if (!s) { mg__plan_err(err, errlen, "%s needs a value", flag); return -1; }
    v = strtod(s, &end);
    if (end == s || *end || !(v > 0) || v > 1e15) {
        mg__plan_err(err, errlen, "%s needs a positive number (got '%s')", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* val as the index of one of the '|'-separated names (the enums count in the same order). */
static int mg__plan_parse_choice(const char *flag, const char *val, const char *names, int *out,
                                 char *err, size_t errlen) {
    const char *p = names;
    size_t n = val ? strlen(val) : 0;
    int i = 0;
    while (val && *p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, val, n) == 0) { *out = i; return 0; }
        p += len + (bar != NULL);
        i++;
    }
    mg__plan_err(err, errlen, "%s must be one of %s (got '%s')", flag, names, val ? val : "");
    return -1;
}

static const char *mg__plan_usage =
    "usage: mg_plan --num-layers L --hidden-size H --num-attention-heads A --seq-length S\n"
    "               [--vocab-size V (51200)] [--make-vocab-size-divisible-by N (128)]\n"
    "               --global-batch-size B --gpus N [options]\n"
    "training:  --micro-batch-size b  --bf16 | --fp16 | --fp32  --recompute-granularity\n"
    "           {none,selective,full}  --sequence-parallel | --no-sequence-parallel\n"
    "           --use-distributed-optimizer | --no-distributed-optimizer\n"
    "           --accumulate-allreduce-grads-in-fp32  --overlap-grad-reduce\n"
    "           --no-scatter-gather-tensors-in-pipeline  --no-gradient-accumulation-fusion\n"
    "           --attention-backend {unfused,flash,auto,fused,local} (unfused or local: the\n"
    "           paper's; flash, auto or fused: gpt_train's default, which stores no attention\n"
    "           scores and recomputes QKᵀ in the backward)\n"
    "           --fused-classifier (megatron.h's chunked classifier: no s*b*V/t logits)\n"
    "cluster:   --gpu {a100-80gb,a100-40gb,h100-sxm,h200-sxm,cpu,custom} (a100-80gb)\n"
    "           --gpus-per-node G (8)  --peak-tflops --gpu-memory-gb --hbm-gbps --nvlink-gbps\n"
    "           --ib-gbps-per-node --sms --gemm-efficiency --memory-reserve-gb  --calibrate\n"
    "model:     --hbm-efficiency (0.70)  --kernel-us (4)\n"
    "layout:    --tensor-model-parallel-size t  --pipeline-model-parallel-size p\n"
    "           --num-layers-per-virtual-pipeline-stage k  --context-parallel-size c\n"
    "output:    --search [--top K (10)]  --json  --train-tokens T\n"
    "Llama family (gpt_train's flags; they change parameters, FLOPs, GEMM shapes, memory):\n"
    "           --normalization {LayerNorm,RMSNorm}  --swiglu  --ffn-hidden-size F\n"
    "           --group-query-attention --num-query-groups G  --kv-channels D\n"
    "           --untie-embeddings-and-output-weights  --disable-bias-linear  --add-qkv-bias\n"
    "           --position-embedding-type {learned_absolute,rope,none}\n"
    "           --max-position-embeddings N (s)\n"
    "           accepted for the same command line, no effect on the costs: --norm-epsilon\n"
    "           --rotary-base --rotary-percent --use-rope-scaling --rope-scaling-factor\n"
    "           --rotary-seq-len-interpolation-factor\n";

static mg_plan_model_check_fn mg__plan_model_check;   /* see mg_plan_set_model_check */
MGDEF void mg_plan_set_model_check(mg_plan_model_check_fn check) { mg__plan_model_check = check; }

/* gpt_train's flags that describe the model: the planner hands them to the model check
   (mg_plan_set_model_check), so that with the trainer's own the two never disagree on which
   models exist.                                                                           */
static const char *const mg__plan_model_flags[] = {
    "--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
    "--max-position-embeddings", "--make-vocab-size-divisible-by", "--ffn-hidden-size",
    "--num-query-groups", "--kv-channels",
    "--swiglu", "--group-query-attention", "--untie-embeddings-and-output-weights",
    "--disable-bias-linear", "--add-qkv-bias", "--use-rope-scaling", "--norm-epsilon",
    "--rotary-base", "--rotary-percent", "--rope-scaling-factor", "--normalization",
    "--position-embedding-type", "--rotary-seq-len-interpolation-factor"};
#define MG__PLAN_NMODEL ((int)(sizeof mg__plan_model_flags / sizeof mg__plan_model_flags[0]))

/* Parses argv into c. Returns 0, 1 for --help, -1 with err. */
static int mg__plan_parse(int argc, char **argv, mg__plan_cli *c, char *err, size_t errlen) {
    int i, k, model_argc = 1;
    char vocab[48];
    char *model_argv[2 * MG__PLAN_NMODEL + 4];   /* each flag once (a repeat is refused) */
    memset(c, 0, sizeof(*c));
    model_argv[0] = (char *)"mg_plan";
    c->model.vocab_size = 51200;
    c->train.precision = MG_PLAN_BF16;
    c->train.scatter_gather = 1;
    c->train.grad_accum_fusion = 1;
    c->fixed = mg_plan_layout_any();
    c->top = 10;
    c->peak = c->mem = c->hbm = c->nvlink = c->ib = c->gemm_eff = c->reserve = c->hbm_eff = -1;
    c->kernel_us = -1;
    c->sms = -1;
    snprintf(c->gpu_name, sizeof(c->gpu_name), "a100-80gb");
    c->cluster.gpus_per_node = 8;
    for (i = 1; i < argc; i++) {
        char flag[64];
        const char *arg = argv[i], *val = NULL, *eq;
        int took = 0, rc = 0;
        if (strncmp(arg, "--", 2) != 0) {
            mg__plan_err(err, errlen, "unexpected argument '%s' (flags start with --; see --help)", arg);
            return -1;
        }
        eq = strchr(arg, '=');
        if (eq) {
            size_t k = (size_t)(eq - arg);
            if (k >= sizeof(flag)) k = sizeof(flag) - 1;
            memcpy(flag, arg, k);
            flag[k] = 0;
            val = eq + 1;
        } else {
            snprintf(flag, sizeof(flag), "%s", arg);
            if (i + 1 < argc) val = argv[i + 1];
        }
#define MG__FLAG(name) (strcmp(flag, name) == 0)
#define MG__INT(dst, lo) (took = 1, rc = mg__plan_parse_int(flag, val, lo, &(dst), err, errlen))
#define MG__DBL(dst) (took = 1, rc = mg__plan_parse_double(flag, val, &(dst), err, errlen))
#define MG__CHOICE(dst, names) (took = 1, rc = mg__plan_parse_choice(flag, val, names, &(dst), err, errlen))
#define MG__SWITCH(stmt) do { if (eq) { mg__plan_err(err, errlen, "%s takes no value", flag); return -1; } stmt; } while (0)
        if (MG__FLAG("--help") || MG__FLAG("-h")) return 1;
        else if (MG__FLAG("--num-layers")) MG__INT(c->model.num_layers, 1);
        else if (MG__FLAG("--hidden-size")) MG__INT(c->model.hidden_size, 1);
        else if (MG__FLAG("--num-attention-heads")) MG__INT(c->model.num_attention_heads, 1);
        else if (MG__FLAG("--seq-length")) MG__INT(c->model.seq_length, 1);
        else if (MG__FLAG("--vocab-size")) MG__INT(c->model.vocab_size, 1);
        else if (MG__FLAG("--make-vocab-size-divisible-by"))
            MG__INT(c->model.make_vocab_size_divisible_by, 1);
        else if (MG__FLAG("--max-position-embeddings")) MG__INT(c->model.max_position_embeddings, 1);
        else if (MG__FLAG("--ffn-hidden-size")) MG__INT(c->model.ffn_hidden_size, 1);
        else if (MG__FLAG("--num-query-groups")) MG__INT(c->model.num_query_groups, 1);
        else if (MG__FLAG("--kv-channels")) MG__INT(c->model.kv_channels, 1);
        else if (MG__FLAG("--swiglu")) MG__SWITCH(c->model.swiglu = 1);
        else if (MG__FLAG("--group-query-attention")) MG__SWITCH(c->group_query_attention = 1);
        else if (MG__FLAG("--untie-embeddings-and-output-weights")) MG__SWITCH(c->model.untie_embeddings = 1);
        else if (MG__FLAG("--disable-bias-linear")) MG__SWITCH(c->model.disable_bias_linear = 1);
        else if (MG__FLAG("--add-qkv-bias")) MG__SWITCH(c->model.add_qkv_bias = 1);
        else if (MG__FLAG("--attention-backend")) {   /* gpt_train's names: unfused and local
                                                         plan the unfused core, the rest flash */
            int b = 0;
            MG__CHOICE(b, "unfused|flash|auto|fused|local");
            c->model.flash_attention = b != 0 && b != 4;
        }
        else if (MG__FLAG("--use-rope-scaling")) MG__SWITCH((void)0);
        else if (MG__FLAG("--norm-epsilon") || MG__FLAG("--rotary-base") ||
                 MG__FLAG("--rotary-percent") || MG__FLAG("--rope-scaling-factor") ||
                 MG__FLAG("--rotary-seq-len-interpolation-factor")) MG__DBL(c->rope_unused);
        else if (MG__FLAG("--normalization")) MG__CHOICE(c->model.rmsnorm, "LayerNorm|RMSNorm");
        else if (MG__FLAG("--position-embedding-type"))
            MG__CHOICE(c->model.position_embedding, "learned_absolute|rope|none");
        else if (MG__FLAG("--global-batch-size")) { took = 1; rc = mg__plan_parse_long(flag, val, 1, &c->train.global_batch_size, err, errlen); }
        else if (MG__FLAG("--micro-batch-size")) MG__INT(c->fixed.micro_batch_size, 1);
        else if (MG__FLAG("--tensor-model-parallel-size")) MG__INT(c->fixed.t, 1);
        else if (MG__FLAG("--pipeline-model-parallel-size")) MG__INT(c->fixed.p, 1);
        else if (MG__FLAG("--context-parallel-size")) MG__INT(c->fixed.c, 1);
        else if (MG__FLAG("--num-layers-per-virtual-pipeline-stage")) MG__INT(c->layers_per_virtual, 1);
        else if (MG__FLAG("--gpus")) MG__INT(c->cluster.gpus, 1);
        else if (MG__FLAG("--gpus-per-node")) { MG__INT(c->cluster.gpus_per_node, 1); c->gpus_per_node_given = 1; }
        else if (MG__FLAG("--top")) MG__INT(c->top, 1);
        else if (MG__FLAG("--peak-tflops")) MG__DBL(c->peak);
        else if (MG__FLAG("--gpu-memory-gb")) MG__DBL(c->mem);
        else if (MG__FLAG("--hbm-gbps")) MG__DBL(c->hbm);
        else if (MG__FLAG("--nvlink-gbps")) MG__DBL(c->nvlink);
        else if (MG__FLAG("--ib-gbps-per-node")) MG__DBL(c->ib);
        else if (MG__FLAG("--gemm-efficiency")) MG__DBL(c->gemm_eff);
        else if (MG__FLAG("--hbm-efficiency")) MG__DBL(c->hbm_eff);
        else if (MG__FLAG("--kernel-us")) { took = 1; if (val && strcmp(val, "0") == 0) c->kernel_us = 0; else rc = mg__plan_parse_double(flag, val, &c->kernel_us, err, errlen); }
        else if (MG__FLAG("--memory-reserve-gb")) { took = 1; if (val && strcmp(val, "0") == 0) c->reserve = 0; else rc = mg__plan_parse_double(flag, val, &c->reserve, err, errlen); }
        else if (MG__FLAG("--sms")) MG__INT(c->sms, 0);
        else if (MG__FLAG("--train-tokens")) MG__DBL(c->train_tokens);
        else if (MG__FLAG("--gpu")) {
            took = 1;
            if (!val) { mg__plan_err(err, errlen, "--gpu needs a value (%s)", mg_plan_gpu_preset_names()); return -1; }
            snprintf(c->gpu_name, sizeof(c->gpu_name), "%s", val);
        } else if (MG__FLAG("--recompute-granularity"))
            MG__CHOICE(c->fixed.recompute, "none|selective|full");   /* MG_PLAN_RECOMPUTE_* */
        else if (MG__FLAG("--recompute-activations")) MG__SWITCH(c->fixed.recompute = MG_PLAN_RECOMPUTE_SELECTIVE);
        else if (MG__FLAG("--bf16")) MG__SWITCH((c->train.precision = MG_PLAN_BF16, c->precision_given++));
        else if (MG__FLAG("--fp16")) MG__SWITCH((c->train.precision = MG_PLAN_FP16, c->precision_given++));
        else if (MG__FLAG("--fp32")) MG__SWITCH((c->train.precision = MG_PLAN_FP32, c->precision_given++));
        else if (MG__FLAG("--sequence-parallel")) MG__SWITCH(c->fixed.sequence_parallel = 1);
        else if (MG__FLAG("--no-sequence-parallel")) MG__SWITCH(c->fixed.sequence_parallel = 0);
        else if (MG__FLAG("--use-distributed-optimizer")) MG__SWITCH(c->fixed.distributed_optimizer = 1);
        else if (MG__FLAG("--no-distributed-optimizer")) MG__SWITCH(c->fixed.distributed_optimizer = 0);
        else if (MG__FLAG("--accumulate-allreduce-grads-in-fp32")) MG__SWITCH(c->train.grads_in_fp32 = 1);
        else if (MG__FLAG("--overlap-grad-reduce")) MG__SWITCH(c->train.overlap_grad_reduce = 1);
        else if (MG__FLAG("--no-scatter-gather-tensors-in-pipeline")) MG__SWITCH(c->train.scatter_gather = 0);
        else if (MG__FLAG("--no-gradient-accumulation-fusion")) MG__SWITCH(c->train.grad_accum_fusion = 0);
        else if (MG__FLAG("--fused-classifier")) MG__SWITCH(c->train.fused_classifier = 1);
        else if (MG__FLAG("--search")) MG__SWITCH(c->search = 1);
        else if (MG__FLAG("--json")) MG__SWITCH(c->json = 1);
        else if (MG__FLAG("--calibrate")) MG__SWITCH(c->calibrate = 1);
        else { mg__plan_err(err, errlen, "unknown flag '%s' (see --help)", flag); return -1; }
#undef MG__FLAG
#undef MG__INT
#undef MG__DBL
#undef MG__CHOICE
#undef MG__SWITCH
        if (rc) return -1;
        for (k = 0; k < MG__PLAN_NMODEL && strcmp(flag, mg__plan_model_flags[k]); k++) {}
        if (k < MG__PLAN_NMODEL) {       /* the words as given, for gpt_train's check */
            if (model_argc + 2 >= (int)(sizeof model_argv / sizeof model_argv[0])) {
                mg__plan_err(err, errlen, "%s: a model flag given twice", flag);
                return -1;
            }
            model_argv[model_argc++] = argv[i];
            if (took && !eq) model_argv[model_argc++] = argv[i + 1];
        }
        if (took && !eq) i++;
    }
    if (c->model.num_query_groups && !c->group_query_attention) {
        mg__plan_err(err, errlen, "--num-query-groups %d needs --group-query-attention (as in "
                     "Megatron-LM and gpt_train)", c->model.num_query_groups);
        return -1;
    }
    /* Megatron-LM: --group-query-attention alone means one group (multi-query attention) */
    if (c->group_query_attention && !c->model.num_query_groups) c->model.num_query_groups = 1;
    if (c->precision_given > 1) {
        mg__plan_err(err, errlen, "give at most one of --bf16, --fp16, --fp32");
        return -1;
    }
    if (!c->model.num_layers || !c->model.hidden_size || !c->model.num_attention_heads ||
        !c->model.seq_length) {
        mg__plan_err(err, errlen, "the model needs --num-layers, --hidden-size, --num-attention-heads "
                     "and --seq-length");
        return -1;
    }
    snprintf(vocab, sizeof vocab, "--vocab-size=%d", c->model.vocab_size);
    model_argv[model_argc++] = vocab;
    if (mg__plan_model_check && mg__plan_model_check(model_argc, model_argv, err, errlen))
        return -1;
    if (!c->train.global_batch_size) { mg__plan_err(err, errlen, "--global-batch-size is required"); return -1; }
    if (!c->cluster.gpus) { mg__plan_err(err, errlen, "--gpus is required"); return -1; }
    return 0;
}

/* Builds the GPU from --gpu and the overrides; calibrates the cpu preset when asked (or when
   no rate was given for it). */
static int mg__plan_setup_gpu(mg__plan_cli *c, char *err, size_t errlen) {
    mg_plan_gpu *g = &c->cluster.gpu;
    int custom = strcmp(c->gpu_name, "custom") == 0, cpu = strcmp(c->gpu_name, "cpu") == 0;
    if (custom) {
        /* the GPU model constants; the rates must be given; GEMMs at 80% of the peak (the
           presets' range) unless --gemm-efficiency, no tile/wave model unless --sms */
        mg_plan_gpu_preset("a100-80gb", g);
        snprintf(g->name, sizeof(g->name), "custom");
        g->sms = 0;
        g->gemm_efficiency = 0.8;
        if (c->peak < 0 || c->mem < 0 || c->hbm < 0 || c->nvlink < 0 || c->ib < 0) {
            mg__plan_err(err, errlen, "--gpu custom needs --peak-tflops, --gpu-memory-gb, --hbm-gbps, "
                         "--nvlink-gbps and --ib-gbps-per-node");
            return -1;
        }
    } else if (mg_plan_gpu_preset(c->gpu_name, g)) {
        mg__plan_err(err, errlen, "unknown --gpu '%s' (valid: %s)", c->gpu_name, mg_plan_gpu_preset_names());
        return -1;
    }
    if (cpu) {
        if (!c->gpus_per_node_given) c->cluster.gpus_per_node = c->cluster.gpus;
        if (!c->precision_given) c->train.precision = MG_PLAN_FP32;
        if (c->calibrate || c->peak < 0) {
            long cores = 1;
#if defined(_SC_NPROCESSORS_ONLN)
            cores = sysconf(_SC_NPROCESSORS_ONLN);
#endif
            {
                int per_node = c->cluster.gpus_per_node;
                int threads = (int)(cores / per_node > 0 ? cores / per_node : 1);
                if (mg_plan_calibrate_cpu(g, threads, per_node, 0.6, err, errlen)) return -1;
            }
        }
    } else if (c->calibrate) {
        mg__plan_err(err, errlen, "--calibrate measures this machine: use it with --gpu cpu");
        return -1;
    }
    if (c->peak > 0) g->peak_tflops = c->peak;
    if (c->mem > 0) g->memory_gb = c->mem;
    if (c->hbm > 0) g->hbm_gbps = c->hbm;
    if (c->nvlink > 0) g->nvlink_gbps = c->nvlink;
    if (c->ib > 0) g->ib_gbps_per_node = c->ib;
    if (c->gemm_eff > 0) {
        if (c->gemm_eff > 1) { mg__plan_err(err, errlen, "--gemm-efficiency must be in (0, 1]"); return -1; }
        g->gemm_efficiency = c->gemm_eff;
    }
    if (c->hbm_eff > 0) {
        if (c->hbm_eff > 1) { mg__plan_err(err, errlen, "--hbm-efficiency must be in (0, 1]"); return -1; }
        g->hbm_efficiency = c->hbm_eff;
    }
    if (c->kernel_us >= 0) g->kernel_us = c->kernel_us;
    if (c->reserve >= 0) g->reserve_gb = c->reserve;
    if (c->sms >= 0) g->sms = c->sms;
    if (g->reserve_gb >= g->memory_gb) {
        mg__plan_err(err, errlen, "--memory-reserve-gb %.3g leaves no memory of %.3g GB", g->reserve_gb, g->memory_gb);
        return -1;
    }
    if (c->train.precision == MG_PLAN_BF16) c->train.grads_in_fp32 = 1;
    return 0;
}

/* --num-layers-per-virtual-pipeline-stage k (Megatron's flag) -> v = l / (p·k) chunks per GPU. */
static int mg__plan_resolve_virtual(mg__plan_cli *c, mg_plan_layout *L, char *err, size_t errlen) {
    int p = L->p;
    if (!c->layers_per_virtual) return 0;
    if (p <= 0) {
        mg__plan_err(err, errlen, "--num-layers-per-virtual-pipeline-stage needs "
                     "--pipeline-model-parallel-size");
        return -1;
    }
    if (c->model.num_layers % p) return 0;   /* mg_plan_check names the pipeline size */
    if ((c->model.num_layers / p) % c->layers_per_virtual) {
        mg__plan_err(err, errlen, "--num-layers-per-virtual-pipeline-stage %d must divide the %d layers "
                     "of each of the %d pipeline stages", c->layers_per_virtual,
                     c->model.num_layers / p, p);
        return -1;
    }
    L->v = c->model.num_layers / p / c->layers_per_virtual;
    return 0;
}

static void mg__plan_json_result(FILE *o, const mg_plan_result *r, const mg__plan_cli *c) {
    const mg_plan_layout *L = &r->layout;
    fprintf(o, "\"tflops_per_gpu\": %.4f, \"percent_of_peak\": %.4f, \"model_tflops_per_gpu\": %.4f, "
            "\"iteration_time_s\": %.6g, \"tokens_per_second\": %.6g, \"memory_per_gpu_gb\": %.4f, "
            "\"memory_limit_gb\": %.4f, \"fits\": %s, \"parameters\": %.0f, ",
            r->tflops_per_gpu, r->percent_of_peak, r->model_tflops_per_gpu, r->iteration_time,
            r->tokens_per_second, r->mem_total / MG__PLAN_GIB, r->mem_limit / MG__PLAN_GIB,
            r->fits ? "true" : "false", mg_plan_parameters(&c->model));
    fprintf(o, "\"layout\": {\"t\": %d, \"p\": %d, \"d\": %d, \"v\": %d, \"micro_batch_size\": %d, "
            "\"num_microbatches\": %ld, \"recompute\": \"%s\", \"sequence_parallel\": %s, "
            "\"distributed_optimizer\": %s, \"c\": %d}, ",
            L->t, L->p, L->d, L->v, L->micro_batch_size, r->num_microbatches,
            mg__plan_recompute_name(L->recompute), L->sequence_parallel ? "true" : "false",
            L->distributed_optimizer ? "true" : "false", L->c > 1 ? L->c : 1);
    fprintf(o, "\"time_s\": {\"gemm\": %.6g, \"memory_bound\": %.6g, \"tensor_parallel_comm\": %.6g, "
            "\"pipeline_comm\": %.6g, \"bubble\": %.6g, \"data_parallel_comm\": %.6g, "
            "\"optimizer\": %.6g, \"context_parallel_comm\": %.6g}, \"bubble_fraction\": %.6g, ",
            r->time_gemm, r->time_memory_bound, r->time_tp_comm, r->time_pp_comm, r->time_bubble,
            r->time_dp_comm, r->time_optimizer, r->time_cp_comm, r->bubble_fraction);
    fprintf(o, "\"memory_gb\": {\"weights\": %.4f, \"gradients\": %.4f, \"optimizer\": %.4f, "
            "\"activations\": %.4f}, \"worst_stage\": %d, \"gpu\": \"%s\", \"gpus\": %d",
            r->mem_weights / MG__PLAN_GIB, r->mem_gradients / MG__PLAN_GIB,
            r->mem_optimizer / MG__PLAN_GIB, r->mem_activations / MG__PLAN_GIB, r->worst_stage,
            c->cluster.gpu.name, c->cluster.gpus);
    if (c->train_tokens > 0)
        fprintf(o, ", \"train_days\": %.4g",
                c->train_tokens / r->tokens_per_second / 86400.0);
}

static void mg__plan_print_result(FILE *o, const mg_plan_result *r, const mg__plan_cli *c) {
    const mg_plan_layout *L = &r->layout;
    const mg_plan_gpu *g = &c->cluster.gpu;
    double T = r->iteration_time, params = mg_plan_parameters(&c->model);
    static const char *prec[3] = {"bf16", "fp16", "fp32"};
    char label[160];
    double parts[7];
    static const char *names[7] = {"compute: GEMMs", "compute: memory-bound kernels",
                                   "tensor-parallel communication", "pipeline communication",
                                   "pipeline bubble", "data-parallel communication (exposed)",
                                   "optimizer step"};
    int i;
    mg_plan_layout_label(L, label, sizeof(label));
    fprintf(o, "model:    %s %.1f%s parameters (l=%d h=%d a=%d s=%d V=%d), global batch %ld, %s\n",
            mg__plan_is_gpt2(&c->model) ? "GPT" : "Llama-family", params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M",
            c->model.num_layers, c->model.hidden_size,
            c->model.num_attention_heads, c->model.seq_length, c->model.vocab_size,
            c->train.global_batch_size, prec[c->train.precision]);
    if (!mg__plan_is_gpt2(&c->model)) {
        const mg_plan_model *m = &c->model;
        static const char *pos[3] = {"learned positions", "rope", "no positions"};
        fprintf(o, "          %.0f parameters: %s, %s F=%d, %d key/value group%s of head dim %d, "
                "%s%s%s%s\n", params, m->rmsnorm ? "RMSNorm" : "LayerNorm", m->swiglu ? "SwiGLU" : "GeLU",
                mg_plan_ffn_hidden(m), m->num_query_groups ? m->num_query_groups : m->num_attention_heads,
                (m->num_query_groups ? m->num_query_groups : m->num_attention_heads) == 1 ? "" : "s",
                m->kv_channels ? m->kv_channels : m->hidden_size / m->num_attention_heads,
                pos[m->position_embedding], m->untie_embeddings ? ", untied output layer" : "",
                m->disable_bias_linear ? ", no linear biases" : "", m->add_qkv_bias ? " but Q/K/V's" : "");
    }
    fprintf(o, "cluster:  %d x %s (%.4g TFLOP/s, %.4g GB, HBM %.4g GB/s, NVLink %.4g GB/s), "
            "%d per node, InfiniBand %.4g GB/s per node\n",
            c->cluster.gpus, g->name, g->peak_tflops, g->memory_gb, g->hbm_gbps, g->nvlink_gbps,
            c->cluster.gpus_per_node, g->ib_gbps_per_node);
    fprintf(o, "layout:   %s, %ld microbatches per pipeline\n", label, r->num_microbatches);
    parts[0] = r->time_gemm; parts[1] = r->time_memory_bound; parts[2] = r->time_tp_comm;
    parts[3] = r->time_pp_comm; parts[4] = r->time_bubble; parts[5] = r->time_dp_comm;
    parts[6] = r->time_optimizer;
    fprintf(o, "time per iteration                          seconds   share\n");
    for (i = 0; i < 7; i++)
        fprintf(o, "  %-40s %9.4g  %5.1f%%\n", names[i], parts[i], 100.0 * parts[i] / T);
    if (L->c > 1)   /* part of the stage times above it extends */
        fprintf(o, "  %-40s %9.4g  %5.1f%%\n", "context-parallel ring (exposed)",
                r->time_cp_comm, 100.0 * r->time_cp_comm / T);
    fprintf(o, "  %-40s %9.4g\n", "total", T);
    fprintf(o, "throughput: %.1f TFLOP/s per GPU = %.1f%% of peak (paper's count, recompute "
            "included); model FLOPs %.1f TFLOP/s; %.4g tokens/s\n",
            r->tflops_per_gpu, r->percent_of_peak, r->model_tflops_per_gpu, r->tokens_per_second);
    if (c->train_tokens > 0)
        fprintf(o, "training %.4g tokens: %.3g days\n", c->train_tokens,
                c->train_tokens / r->tokens_per_second / 86400.0);
    fprintf(o, "memory per GPU (stage %d)                      GB\n", r->worst_stage);
    fprintf(o, "  %-40s %9.2f\n", "weights", r->mem_weights / MG__PLAN_GIB);
    fprintf(o, "  %-40s %9.2f\n", "gradients", r->mem_gradients / MG__PLAN_GIB);
    fprintf(o, "  %-40s %9.2f\n", "optimizer state", r->mem_optimizer / MG__PLAN_GIB);
    fprintf(o, "  %-40s %9.2f\n", "activations", r->mem_activations / MG__PLAN_GIB);
    fprintf(o, "  %-40s %9.2f of %.2f usable: %s\n", "total", r->mem_total / MG__PLAN_GIB,
            r->mem_limit / MG__PLAN_GIB, r->fits ? "fits" : "DOES NOT FIT");
}

/* Neighbours of the best layout, one dimension changed at a time: why not them. */
static void mg__plan_print_neighbours(FILE *o, const mg__plan_cli *c, const mg_plan_result *best) {
    mg_plan_layout cand[12];
    const char *what[12];
    int k = 0, i;
    const mg_plan_layout *L = &best->layout;
#define MG__NB(field, value, text) do { cand[k] = *L; cand[k].field = (value); what[k] = (text); k++; } while (0)
    if (c->fixed.t <= 0) {
        MG__NB(t, L->t * 2, "twice the tensor parallelism");
        if (L->t > 1) MG__NB(t, L->t / 2, "half the tensor parallelism");
    }
    if (c->fixed.p <= 0) {
        MG__NB(p, L->p * 2, "twice the pipeline depth");
        if (L->p > 1) MG__NB(p, L->p / 2, "half the pipeline depth");
    }
    if (c->fixed.micro_batch_size <= 0) {
        MG__NB(micro_batch_size, L->micro_batch_size * 2, "twice the microbatch");
        if (L->micro_batch_size > 1) MG__NB(micro_batch_size, L->micro_batch_size / 2, "half the microbatch");
    }
    if (c->fixed.v <= 0 && L->v > 1) MG__NB(v, 1, "no interleaving");
    if (c->fixed.recompute == MG_PLAN_ANY) {
        if (L->recompute != MG_PLAN_RECOMPUTE_FULL) MG__NB(recompute, MG_PLAN_RECOMPUTE_FULL, "full recomputation");
        if (L->recompute != MG_PLAN_RECOMPUTE_NONE) MG__NB(recompute, MG_PLAN_RECOMPUTE_NONE, "no recomputation");
    }
#undef MG__NB
    for (i = 0; i < k; i++) {
        mg_plan_result r;
        char label[160], why[400];
        mg_plan_layout *x = &cand[i];
        x->d = x->t * x->p > 0 ? c->cluster.gpus / (x->t * mg__plan_c(x) * x->p) : 0;
        if (x->v > 1 && (c->model.num_layers % (x->p * x->v))) x->v = 1;
        if (x->t < 2) x->sequence_parallel = 0;
        if (x->d * mg__plan_c(x) < 2) x->distributed_optimizer = 0;
        if (x->d < 1 || mg_plan_evaluate(&c->model, &c->train, &c->cluster, x, &r, NULL, 0)) continue;
        mg_plan_layout_label(x, label, sizeof(label));
        if (!r.fits) {
            fprintf(o, "  vs %s (%s): does not fit, %.1f GB > %.1f GB\n", what[i], label,
                    r.mem_total / MG__PLAN_GIB, r.mem_limit / MG__PLAN_GIB);
        } else {
            mg_plan_explain(best, &r, why, sizeof(why));
            fprintf(o, "  vs %s: %s\n", what[i], why);
        }
    }
}

/* Without --search the layout is the flags given plus Megatron's defaults for the rest
   (t = p = 1, micro batch 1, no recomputation, no sequence parallelism, no distributed
   optimizer). */
MGDEF int mg_plan_main(int argc, char **argv, FILE *out, FILE *errf) {
    mg__plan_cli c;
    char err[512];
    int rc = mg__plan_parse(argc, argv, &c, err, sizeof(err));
    if (rc == 1) { fputs(mg__plan_usage, out); return 0; }
    if (rc == 0) rc = mg__plan_setup_gpu(&c, err, sizeof(err));
    if (rc == 0) rc = mg__plan_resolve_virtual(&c, &c.fixed, err, sizeof(err));
    if (rc) { fprintf(errf, "mg_plan: error: %s\n", err); return 2; }

    if (!c.search) {
        mg_plan_layout L = c.fixed;
        mg_plan_result r;
        if (L.t <= 0) L.t = 1;
        if (L.p <= 0) L.p = 1;
        if (L.v <= 0) L.v = 1;
        if (L.micro_batch_size <= 0) L.micro_batch_size = 1;
        if (L.recompute == MG_PLAN_ANY) L.recompute = MG_PLAN_RECOMPUTE_NONE;
        if (L.sequence_parallel == MG_PLAN_ANY) L.sequence_parallel = 0;
        if (L.distributed_optimizer == MG_PLAN_ANY) L.distributed_optimizer = 0;
        if (L.c <= 0) L.c = 1;
        L.d = c.cluster.gpus / (L.t * L.c * L.p) > 0 ? c.cluster.gpus / (L.t * L.c * L.p) : 0;
        if (mg_plan_evaluate(&c.model, &c.train, &c.cluster, &L, &r, err, sizeof(err))) {
            fprintf(errf, "mg_plan: error: %s\n", err);
            return 2;
        }
        if (c.json) { fputc('{', out); mg__plan_json_result(out, &r, &c); fputs("}\n", out); }
        else {
            mg__plan_print_result(out, &r, &c);
            if (!r.fits) fprintf(out, "hint: --search finds layouts that fit\n");
        }
        return 0;
    } else {
        mg_plan_search_stats st;
        mg_plan_result *top = (mg_plan_result *)malloc(sizeof(mg_plan_result) * (size_t)c.top);
        int k, i;
        if (!top) { fprintf(errf, "mg_plan: error: out of memory\n"); return 2; }
        k = mg_plan_search(&c.model, &c.train, &c.cluster, &c.fixed, top, c.top, &st, err, sizeof(err));
        if (k < 0) { free(top); fprintf(errf, "mg_plan: error: %s\n", err); return 2; }
        if (k == 0) {
            if (c.json) fprintf(out, "{\"fits\": false, \"evaluated\": %ld}\n", st.evaluated);
            else fprintf(out, "mg_plan: none of the %ld valid layouts fits in %.1f GB per GPU; "
                         "add GPUs, recomputation or the distributed optimizer\n",
                         st.evaluated, c.cluster.gpu.memory_gb);
            free(top);
            return 1;
        }
        if (c.json) {
            char why[400];
            fputc('{', out);
            mg__plan_json_result(out, &top[0], &c);
            fprintf(out, ", \"search\": {\"evaluated\": %ld, \"fitting\": %ld", st.evaluated, st.fitting);
            if (k > 1) {
                mg_plan_explain(&top[0], &top[1], why, sizeof(why));
                fprintf(out, ", \"reason\": \"%s\"", why);
            }
            fprintf(out, ", \"top\": [");
            for (i = 0; i < k; i++) {
                const mg_plan_layout *L = &top[i].layout;
                fprintf(out, "%s{\"t\": %d, \"p\": %d, \"d\": %d, \"v\": %d, \"micro_batch_size\": %d, "
                        "\"c\": %d, "
                        "\"recompute\": \"%s\", \"sequence_parallel\": %s, \"distributed_optimizer\": %s, "
                        "\"tflops_per_gpu\": %.4f, \"iteration_time_s\": %.6g, \"memory_per_gpu_gb\": %.4f}",
                        i ? ", " : "", L->t, L->p, L->d, L->v, L->micro_batch_size, L->c > 1 ? L->c : 1,
                        mg__plan_recompute_name(L->recompute), L->sequence_parallel ? "true" : "false",
                        L->distributed_optimizer ? "true" : "false", top[i].tflops_per_gpu,
                        top[i].iteration_time, top[i].mem_total / MG__PLAN_GIB);
            }
            fprintf(out, "]}}\n");
        } else {
            fprintf(out, "searched %ld valid layouts, %ld fit in memory; best %d by predicted "
                     "iteration time:\n", st.evaluated, st.fitting, k);
            fprintf(out, "  #  layout                                              TFLOP/s/GPU  %%peak  "
                     "iter s   mem GB\n");
            for (i = 0; i < k; i++) {
                char label[160];
                mg_plan_layout_label(&top[i].layout, label, sizeof(label));
                fprintf(out, "%3d  %-50s %10.1f  %5.1f  %7.4g  %7.1f\n", i + 1, label,
                        top[i].tflops_per_gpu, top[i].percent_of_peak, top[i].iteration_time,
                        top[i].mem_total / MG__PLAN_GIB);
            }
            fprintf(out, "\nbest:\n");
            mg__plan_print_result(out, &top[0], &c);
            fprintf(out, "why it wins:\n");
            if (k > 1) {
                char why[400];
                mg_plan_explain(&top[0], &top[1], why, sizeof(why));
                fprintf(out, "  vs #2: %s\n", why);
            }
            mg__plan_print_neighbours(out, &c, &top[0]);
        }
        free(top);
        return 0;
    }
}

#endif /* MG_PLAN_IMPLEMENTED */
#endif /* MG_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 The megatron.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/
