/* megatron.h — GPT training with Megatron-LM's PTD-P parallelism, header-only (MIT license at
   the end of the file).
   The GPT-2 model built from Megatron-style (tensor-parallel ready) layers, the AdamW optimizer
   with its learning-rate schedule and gradient clipping, checkpoints, import/export of llm.c and
   Hugging Face weights, the command line and the training loop. Includes mg_tensor.h (ops),
   mg_comm.h (communication), mg_transformer.h (the tensor-parallel layer), mg_pipeline.h
   (schedules) and mg_data.h (file formats).

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "megatron.h"
   examples/gpt_train.cu is the trainer program built on it; read it next. Compiled with
   -DMG_IMPLEMENTATION_ELSEWHERE, a file that defines MG_IMPLEMENTATION gets only the
   declarations of every header: for builds that compile the implementation once, into an
   object of its own, and link it into several such programs (the Makefile's nvcc builds of
   examples/ and bench/gpu.cu).

   TOUR
     1. Model configuration (mg_gpt_config) and this rank's layout (mg_gpt_layout): the tensor-,
        context- and pipeline-parallel coordinates, the micro-batch, the activation slots, the
        model chunks (Megatron's interleaved assignment: rank i of p holds virtual stages i,
        i+p, …). With context parallelism a rank holds T/c positions of every sequence
        (mg_transformer.h, 1b): tokens, positions and targets are picked at set_batch.
     2. Parameters: one descriptor per tensor (name, global shape, split kind, init, decay),
        ONE flat fp32 buffer of parameters and ONE of gradients in a documented order;
        counter-based initialisation; global <-> shard copies; the naming table that maps the
        tensors to our checkpoints, llm.c checkpoints, Hugging Face GPT-2 and Llama-family
        files.
     3. Model: chunks of mg_transformer.h's tensor-parallel layers between the vocabulary-
        parallel embedding and the head (final layernorm, tied output layer, parallel cross-
        entropy); per (chunk, slot) activation storage, forward and backward of a model chunk
        for one microbatch, dropout keyed by global coordinates, activation recomputation
        (selective: the attention core; full: whole layers or groups of them re-run). A chunk's
        input/output activations and the gradient buffer are exposed so a pipeline executor
        can send and receive them.
     3b. Weight files: import llm.c checkpoints, Hugging Face GPT-2 safetensors and Llama /
        Mistral / Qwen2 directories (told apart by content and config.json; shards, F32/BF16/
        F16), export Hugging Face safetensors + config.json (GPT-2 or the Llama family).
     4. Optimizer: AdamW state, Megatron's learning-rate schedule (and its decoupled rate for
        the word embedding and the output layer), global-norm clipping.
     4b. Data parallelism (mg_dp): the gradient reduction over the d replicas (d·c with context
        parallelism: the data-context group) in buckets started
        during the last microbatch's backward; the distributed optimizer (ZeRO-1: sharded
        moments, reduce-scatter / all-gather).
     4c. Tokenizer flags: Megatron-LM's --tokenizer-type & co. to a loaded mg_tokenizer.h
        tokenizer (gpt_train and tools/mg_prepare).
     5. Trainer (one rank, or t·p·d ranks under mpirun): arguments (Megatron-LM's flag names),
        validation, the iteration (gradient accumulation over microbatches), evaluation,
        logging, checkpoints (save/load/resume), import/export, text generation. Pipeline
        parallelism (--pipeline-model-parallel-size): the iteration runs mg_pipeline.h's
        executor with the chosen schedule through the model's chunk callbacks (forward,
        backward, or backward-input and backward-weight for ZB-H1), then all-reduces the tied
        word embedding's gradient between the first and the last stage (per tensor-parallel
        shard), and clips by the norm summed over the tensor group (replicated parameters
        counted once) and the stages (the tied weight counted once); the loss comes from the
        last stage, broadcast to all. Tensor × pipeline × data compose: each stage is t ranks,
        each (tensor, pipeline) position is replicated d = world/(t·p) times; with p > 1 the
        data-parallel buckets start during each chunk's last backward too, those holding the
        tied word embedding after its embedding-group all-reduce at the flush.

   CONVENTIONS (see mg_tensor.h for the op-level ones)
     - T = sequence length, B = micro-batch size, N = T·B activation rows (sequence-major: row
       r = t·B + b), C = hidden size, nh = heads, hd = C/nh, V = vocabulary, Vp = V padded to a
       multiple of N·t (N: --make-vocab-size-divisible-by, default 128; the padding rows never
       enter the softmax or the loss; they are initialised to zero, stay zero, and checkpoints
       store only the V real rows, so files and initialisation depend on neither N nor t).
     - Linear weights are (out, in). The QKV weight's output rows are ordered (head, {q,k,v},
       hd) — Megatron's interleaved layout — so a tensor-parallel rank owns a contiguous block
       of rows (its heads); with grouped-query attention, per key/value group: its query
       heads, its key head, its value head. llm.c and Hugging Face store [q | k | v] (the
       Llama family as q_proj, k_proj, v_proj): rows are permuted on import and export
       (mg__qkv_ext_row, section 3b).
     - Loss = mean over all target tokens of the global batch: each microbatch's backward is
       seeded with dloss = 1 / (global batch · T), on every data-parallel replica too, so the
       replicas' gradients are SUMMED (not averaged) over the data group. Under the loss mask
       (--eod-mask-loss: positions whose input is the end-of-document id leave the loss) each
       microbatch's seed is multiplied by B·T / its kept positions, so the loss is the mean of
       the microbatches' kept-position means, as Megatron-LM's (mg_gpt.eod_mask).
     - Parameter gradients accumulate over microbatches; the trainer zeroes them per iteration.
*/
#ifndef MEGATRON_H
#define MEGATRON_H
#include "mg_tensor.h"
#include "mg_comm.h"
#include "mg_transformer.h"
#include "mg_pipeline.h"
#include "mg_data.h"
#include "mg_tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
   1. Model configuration and layout
   ------------------------------------------------------------------------------------------ */
typedef struct mg_gpt_config {
    int n_layer;          /* --num-layers                                                       */
    int hidden;           /* --hidden-size, C                                                   */
    int n_head;           /* --num-attention-heads                                              */
    int seq_len;          /* --seq-length, T (tokens a sample is trained on)                    */
    int max_pos;          /* --max-position-embeddings (rows of the position embedding, >= T)   */
    int vocab_size;       /* --vocab-size, V: the real token ids 0 … V-1                        */
    int padded_vocab;     /* Vp: V rounded up to a multiple of N·t (mg_gpt_pad_vocab; N:
                             --make-vocab-size-divisible-by, default 128); any Vp >= V that t
                             divides works: the padding rows never enter the softmax          */
    /* dropout (training only; 0 = off): Megatron's --hidden-dropout after the embedding and
       after attention-out and MLP-down (before the residual add), --attention-dropout on the
       attention probabilities. Masks come from the counter-based generator keyed by
       (dropout_seed, site, global microbatch index) at GLOBAL coordinates: see section 3.   */
    float hidden_dropout, attention_dropout;
    uint64_t dropout_seed;
    /* The Llama family's switches, Megatron-LM's flags. Zero is GPT-2 everywhere, so a config
       that sets none of them is the GPT-2 model (mg_gpt_layer_config resolves the defaults). */
    int normalization;    /* --normalization: MG_NORM_LAYERNORM (0) or MG_NORM_RMSNORM          */
    float norm_epsilon;   /* --norm-epsilon (0: 1e-5)                                           */
    int swiglu;           /* --swiglu: MLP = down(silu(gate(x)) ⊙ up(x))                         */
    int ffn_hidden;       /* --ffn-hidden-size (0: 4C, or with SwiGLU Megatron-LM's
                             int(4C·2/3 / 64)·64)                                              */
    int position_embedding; /* --position-embedding-type: MG_POS_LEARNED (0), MG_POS_ROPE,
                               MG_POS_NONE                                                      */
    float rotary_base;    /* --rotary-base, θ (0: 10000)                                        */
    float rotary_percent; /* --rotary-percent: share of each head's dims rotated (0: 1.0)        */
    int use_rope_scaling; /* --use-rope-scaling: Llama 3's frequency scaling, with            */
    float rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor; /* (0: 8, 1, 4)   */
    int rope_original_max_pos;  /* (0: 8192)                                                   */
    float rotary_interpolation; /* --rotary-seq-len-interpolation-factor F: rotary positions
                                   p / F (transformers' rope_type "linear") (0: 1, none)      */
    int gelu_erf;         /* the GELU MLP's GELU is the exact (erf) one, as Megatron-LM's MLP
                             computes it without its fused bias-GELU kernel (--no-bias-gelu-
                             fusion, or no biases: --disable-bias-linear), Hugging Face "gelu";
                             0: the tanh approximation                                        */
    int squared_relu;     /* the MLP's activation is max(x, 0)² instead of GELU
                             (--squared-relu; Hugging Face "relu2")                           */
    int layernorm_1p;     /* zero-centred norm weights: the norms scale by 1 + weight, which
                             starts at 0 (--apply-layernorm-1p); files of other programs hold
                             the scale itself: 1 is subtracted on import, added on export    */
    int n_query_groups;   /* --num-query-groups with --group-query-attention (0: n_head)        */
    int kv_channels;      /* --kv-channels, the head dimension (0: C / n_head)                  */
    int untie_embeddings; /* --untie-embeddings-and-output-weights: an output layer of its own  */
    int disable_bias_linear; /* --disable-bias-linear: no biases on the linear layers           */
    int add_qkv_bias;     /* --add-qkv-bias: the Q/K/V bias even so (Qwen2)                     */
    float init_method_std; /* --init-method-std, σ of the weights' normal initialisation (0:
                              0.02); attention-out and MLP-down take σ/√(2·layers), Megatron's
                              scaled_init_method_normal                                     */
    int init_xavier;      /* --init-method-xavier-uniform: every weight U(−a, a),
                             a = √(6/(fan_in + fan_out)) (init_method_std unused)            */
} mg_gpt_config;
enum { MG_NORM_LAYERNORM = 0, MG_NORM_RMSNORM = 1 };
enum { MG_POS_LEARNED = 0, MG_POS_ROPE = 1, MG_POS_NONE = 2 };
/* 1 when none of the switches below is set: the GPT-2 architecture. */
MGDEF int mg_gpt_is_gpt2(const mg_gpt_config *cfg);
/* The transformer layer of this model (mg_transformer.h), its defaults resolved: head
   dimension, query groups, MLP width, norm epsilon, rotary dims and frequencies.          */
MGDEF mg_layer_config mg_gpt_layer_config(const mg_gpt_config *cfg, int micro_batch,
                                          mg_dtype dtype);

/* V rounded up to a multiple of divisor·tp_size, as Megatron-LM pads the vocabulary to
   --make-vocab-size-divisible-by (its default 128) times the tensor-parallel size.        */
MGDEF int mg_gpt_pad_vocab(int vocab_size, int divisor, int tp_size);
/* Checks sizes and divisibility (heads divide C, T <= max positions, …) for tp_size ranks.
   Returns 0, or -1 with a one-line reason (what is wrong, what would be valid) in err.        */
MGDEF int mg_gpt_config_check(const mg_gpt_config *cfg, int tp_size, char *err, size_t errlen);
/* Parameter count of the whole model (Vp rows of the word embedding). */
MGDEF int64_t mg_gpt_num_params(const mg_gpt_config *cfg);
/* Model FLOPs of one iteration over `samples` sequences, forward + backward, no recomputation:
   F = 72·samples·T·l·C²·(1 + T/(6C) + Vp/(12·l·C))  (Narayanan et al. 2021, eq. 3 without
   the recomputed forward), i.e. 2 FLOPs per multiply-add of every GEMM, backward = 2 ×
   forward.                                                                                  */
MGDEF double mg_gpt_flops_per_iteration(const mg_gpt_config *cfg, int64_t samples);

/* A model chunk: a contiguous range of layers; the first chunk of the model also embeds the
   tokens, the last one holds the final layernorm, the (tied) output layer and the loss. One rank
   holds one chunk, or v chunks with the interleaved pipeline schedule, or all of them.        */
typedef struct mg_gpt_chunk {
    int layer_begin, layer_end;  /* global layer indices [begin, end)                           */
    int has_embedding;           /* token + position embedding in front of the layers           */
    int has_head;                /* final layernorm + output layer + loss behind them           */
} mg_gpt_chunk;

/* Activation recomputation (Korthikanti et al. 2022, Megatron's --recompute-granularity):
     selective  the attention core (scores, softmax, dropout, ·V) of every layer is recomputed
                in the backward from the stored qkv: its [B, nh/t, T, T] probabilities — the
                5·a·s/h term of the activation memory — are never kept per microbatch;
     full       a recomputed layer keeps only its input; the backward re-runs its forward.
   Which layers are full-recomputed (Megatron's --recompute-method, per model chunk):
     uniform    every layer, in groups of recompute_num_layers consecutive layers: only each
                group's input is kept, the whole group is re-run before its backward;
     block      the first recompute_num_layers layers of the chunk, each on its own; the rest
                keep everything.
   The recomputed forward regenerates identical bits (same inputs, same weights, dropout masks
   keyed by global coordinates), so recomputation never changes losses or weights.        */
typedef enum { MG_RECOMPUTE_NONE = 0, MG_RECOMPUTE_SELECTIVE, MG_RECOMPUTE_FULL } mg_recompute;
typedef enum { MG_RECOMPUTE_UNIFORM = 0, MG_RECOMPUTE_BLOCK } mg_recompute_method;

#define MG_MAX_CHUNKS 32
/* The fused classifier's logits scratch when layout.classifier_chunk_rows is 0: the most rows
   of fp32 logits (and their 16-bit gradient) that fit in 64 MiB — 222 rows of GPT-2's
   Vp = 50304 in bf16, 333 in fp32 — shared by all microbatches in flight.
   The trainer on a CUDA device (--classifier-chunk-rows 0) uses MG_CLASSIFIER_CHUNK_BYTES_CUDA
   instead, resolving the rows itself (mg_gpt_classifier_auto_rows) so that its arena estimate
   and the model agree: 222 rows made each chunk's logits GEMM skinny (~117 TFLOP/s on an
   H100) and its per-row kernels 222 blocks, 37 chunks and ~17 ms of a 113 ms GPT-2 step at
   B·T = 8192. With 1 GiB: 3557 rows in bf16 (3 chunks: 3557, 3557, 1078), 5335 in fp32
   (2 chunks), for the same 8192 rows of Vp = 50304.                                        */
#ifndef MG_CLASSIFIER_CHUNK_BYTES
#define MG_CLASSIFIER_CHUNK_BYTES ((size_t)64 << 20)
#endif
#ifndef MG_CLASSIFIER_CHUNK_BYTES_CUDA
#define MG_CLASSIFIER_CHUNK_BYTES_CUDA ((size_t)1 << 30)
#endif
typedef struct mg_gpt_layout {
    int tp_rank, tp_size;        /* tensor-parallel coordinate (a single rank: 0, 1)            */
    int sequence_parallel;       /* --sequence-parallel: layernorm/dropout/residual regions hold
                                    T/t of the sequence (no effect with tp_size 1)            */
    mg_comm *comm;               /* the job's groups (comm->tensor has tp_size ranks); may be
                                    NULL with tp_size 1. mg_gpt_layout_tp fills these fields. */
    int pp_rank, pp_size;        /* pipeline coordinate (a single stage: 0, 1)                  */
    int cp_rank, cp_size;        /* context-parallel coordinate (0 or 1: none; mg_gpt_layout_cp):
                                    this rank holds T/c positions of every sequence, chunks
                                    cp_rank and 2c−1−cp_rank of 2c (mg_transformer.h, 1b)     */
    int micro_batch;             /* B: sequences per microbatch                                 */
    int dp_size;                 /* replicas of the weights that reduce gradients together: d,
                                    times c with context parallelism (0 or 1: none). The flat
                                    buffers are
                                    padded to a multiple of 64·d elements so that every bucket
                                    of the gradient reduction splits into d equal pieces       */
    int n_slots;                 /* microbatches whose activations can be in flight per chunk   */
    int max_microbatches;        /* per-token loss storage: microbatches per iteration          */
    int split_backward;          /* 1: each slot also keeps the output gradients of its linears
                                    so the weight half of the backward can run later (ZB-H1's
                                    W action: mg_gpt_backward_input, then _weight)             */
    int n_chunks;
    mg_gpt_chunk chunks[MG_MAX_CHUNKS];
    int recompute_granularity;   /* mg_recompute (0: none)                                      */
    int recompute_method;        /* mg_recompute_method (full only)                             */
    int recompute_num_layers;    /* N of the method (full only; 0 counts as 1)                  */
    int attention_backend;       /* MG_ATTN_FLASH (0, the tiled attention) or MG_ATTN_UNFUSED  */
    int dtype;                   /* mg_dtype of the weights' working copy, the activations and
                                    their gradients: MG_F32, or MG_BF16 / MG_F16 for mixed
                                    precision (--bf16 / --fp16; master weights, gradients,
                                    Adam moments, norms' statistics and the logits stay fp32) */
    int classifier_chunk_rows;   /* --classifier-chunk-rows: rows of [N, Vp/t] logits the fused
                                    classifier computes at a time (mg__head_classifier); 0:
                                    automatic, the most whose scratch fits
                                    MG_CLASSIFIER_CHUNK_BYTES (the trainer on a GPU sets the
                                    rows of MG_CLASSIFIER_CHUNK_BYTES_CUDA here instead)     */
    int shard_master;            /* mixed precision with the distributed optimizer (dp_size > 1,
                                    a 16-bit dtype): the model keeps NO whole fp32 copy of its
                                    parameters — the optimizer owns this rank's 1/d of the fp32
                                    master weights (mg_adamw.master), the model the 16-bit
                                    working copy. See mg_gpt_fp32_params.                     */
} mg_gpt_layout;

/* The whole model as n_chunks chunks of (nearly) equal layer counts on this one rank, tensor
   parallel size 1, one activation slot. n_chunks = 1 is the plain single-rank model.         */
MGDEF mg_gpt_layout mg_gpt_layout_single(const mg_gpt_config *cfg, int micro_batch,
                                         int max_microbatches, int n_chunks);
/* Makes a layout tensor-parallel over comm's tensor group (set up by mg_comm_setup_groups):
   tp_rank/tp_size from the group, sequence parallelism on or off. cfg->padded_vocab must be
   a multiple of tp_size (mg_gpt_pad_vocab).                                               */
MGDEF void mg_gpt_layout_tp(mg_gpt_layout *layout, mg_comm *comm, int sequence_parallel);
/* Makes a layout context-parallel over comm's context group (mg_comm_setup_groups_cp):
   cp_rank/cp_size from the group. --seq-length must divide into 2·cp_size chunks.          */
MGDEF void mg_gpt_layout_cp(mg_gpt_layout *layout, mg_comm *comm);
/* Positions of a sequence this rank holds: T, or T/c with context parallelism.             */
MGDEF int mg_gpt_local_seq(const mg_gpt_config *cfg, const mg_gpt_layout *layout);
/* Pipeline rank pp_rank of pp_size, with v model chunks per rank (Megatron's interleaved
   assignment): the model's layers form S = pp_size·v virtual stages of n_layer/S consecutive
   layers; virtual stage s lives on rank s % pp_size as its chunk s / pp_size, so rank i holds
   stages i, i+p, i+2p, …. Stage 0 has the embeddings, stage S−1 the final layernorm, output
   layer and loss. n_layer must divide by S (mg_gpt_config_check does not know S: the caller
   checks). n_slots activation slots per chunk, split_backward as above.                      */
MGDEF mg_gpt_layout mg_gpt_layout_pipeline(const mg_gpt_config *cfg, int micro_batch,
                                           int max_microbatches, int pp_rank, int pp_size, int v,
                                           int n_slots, int split_backward);
/* The forward FLOPs activation recomputation repeats in one iteration over `samples`
   sequences, whole model: selective — the attention core of every layer, 4·samples·T²·C each
   (q·kᵀ and P·v); full — the whole forward of each recomputed layer, 24·samples·T·C² +
   4·samples·T²·C. Layers recomputed under `layout` (given per chunk on this rank) are counted
   as if every pipeline stage held chunks like this rank's. Full recomputation of every layer
   turns the 72 form above into the paper's 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)). With a split
   backward (layout.split_backward, ZB-H1) a full-recomputed layer's forward runs twice more —
   before the input half and again before the weight half (mg_gpt_backward_weight) — and is
   counted twice; selective recomputation once (the weight half needs no probabilities), and
   only with the unfused attention (layout.attention_backend): the tiled attention's backward
   recomputes its scores whether or not selective recomputation is asked for.               */
MGDEF double mg_gpt_flops_recomputed(const mg_gpt_config *cfg, const mg_gpt_layout *layout,
                                     int64_t samples);

/* ---------------------------------------------------------------------------------------------
   2. Parameters
      Flat-buffer order (each tensor starts at a multiple of 64 elements; the gaps are zero):
        word embedding [Vp, C]          if a chunk has the embedding, or the head with a tied
                                        output layer
        position embedding [max_pos, C] if a chunk has the embedding (learned positions)
        for each held layer, in order, the tensors of mg_layer_tensor its configuration has
                                        (mg_layer_has_tensor: 12 for GPT-2)
        final norm weight (and bias)    if a chunk has the head (LayerNorm has a bias)
        output layer [Vp, C]            if a chunk has the head and it is untied
      Shapes are GLOBAL in the descriptor; local_shape is this rank's shard:
        column-parallel (QKV, MLP-up and gate weight and bias): output rows split, QKV by
                                        query groups
        row-parallel (attention-out, MLP-down weight): input columns split
        vocabulary-parallel (word embedding, output layer): rows split
        replicated: norms, biases of row-parallel layers, position embedding
   ------------------------------------------------------------------------------------------ */
typedef enum { MG_TP_REPLICATED = 0, MG_TP_COLUMN, MG_TP_ROW, MG_TP_VOCAB } mg_tp_split;
typedef enum { MG_INIT_NORMAL = 0, MG_INIT_ZERO, MG_INIT_ONE, MG_INIT_UNIFORM } mg_init_kind;

/* The tensors outside the layers (a layer's are mg_transformer.h's mg_layer_tensor): the word
   embedding, the position embedding (learned positions), the final norm, and the output
   layer when it is not tied to the word embedding.                                         */
typedef enum {
    MG_WTE = MG_LAYER_TENSORS, MG_WPE, MG_LNF_W, MG_LNF_B, MG_OUT_W, MG_TENSOR_KINDS
} mg_gpt_global_tensor;
#define MG_GLOBAL_TENSORS (MG_TENSOR_KINDS - MG_LAYER_TENSORS)

typedef struct mg_param_desc {
    char name[80];          /* Megatron-Core name, e.g. decoder.layers.0.mlp.linear_fc1.weight */
    int kind;               /* mg_layer_tensor or mg_gpt_global_tensor                     */
    int layer;              /* global layer index, -1 outside the layers                       */
    int ndim;               /* 1 or 2                                                          */
    int64_t shape[2];       /* global shape                                                    */
    int64_t local_shape[2]; /* this rank's shard                                               */
    int64_t row0, col0;     /* the shard's first global row / column                           */
    mg_tp_split split;
    mg_init_kind init;
    float init_std;         /* MG_INIT_NORMAL: σ (cfg's init_method_std, 0.02), or σ/√(2·layers)
                               for the output projections of attention and MLP; MG_INIT_UNIFORM
                               (cfg's init_xavier): the bound a of U(−a, a)                    */
    int weight_decay;       /* 1 for weights; 0 for biases and layernorm parameters            */
    int64_t offset;         /* first element in the flat buffers                               */
    int64_t numel;          /* local elements                                                  */
} mg_param_desc;

/* ---------------------------------------------------------------------------------------------
   3. Model
      The transformer layers and their tensor-parallel split (column/row-parallel linears,
      Megatron's f/g operators, sequence parallelism) are mg_transformer.h's; the model adds
      what surrounds them, split the same way:
        vocab-parallel   word embedding rows [r·Vp/t, (r+1)·Vp/t) and the tied output layer;
                         the embedding's partial sum is reduced like a row-parallel output
        replicated       position embedding (added by tensor-parallel rank 0 before the
                         reduction, so it enters the sum once) and the final layernorm
      The cross-entropy never gathers the logits, nor holds them whole: the fused classifier
      (mg_classifier_fused, see mg__head_forward) computes them in chunks of rows, and per
      chunk an all-reduce of the row max, then one of the sums of exponentials (moved to that
      max) and the target logits merge the slices. The layernorm
      gradients under sequence parallelism are partial (each rank saw its rows) and are summed
      over the tensor group by mg_gpt_reduce_grads. Dropout masks are a pure function of
      (seed, site, global microbatch, global element index), so they do not depend on t, on
      sequence parallelism or on the pipeline split.
   ------------------------------------------------------------------------------------------ */
/* Everything one microbatch keeps while in flight through one chunk. */
typedef struct mg_gpt_acts {
    int32_t *tokens;          /* [B, T] int32 (first chunk), device memory                      */
    int32_t *targets;         /* [N] int32, row order t·B + b (last chunk), device memory       */
    uint64_t dropout_mb;      /* global microbatch index of the forward (keys its dropout)      */
    int dropout_on;           /* the forward ran in training mode (the backward must match)     */
    mg_tensor input;          /* [n, C] residual stream entering the chunk: the embedding's
                                 output (first chunk) or what the previous stage sent          */
    mg_layer_acts *layers;    /* one per layer of the chunk                                     */
    mg_tensor lnf;            /* [n, C] final layernorm output (last chunk)                     */
    float *lnf_mean, *lnf_rstd;
    mg_tensor dlnf;           /* [n, C] gradient of lnf (reduced over the tensor group): what
                                 the fused classifier leaves for the backward — the logits
                                 themselves are never kept                                    */
    int head_fused;           /* the forward already ran the classifier's backward with
                                 head_dloss (m->head_dloss was set): dlnf and dWout are done  */
    float head_dloss;
    float dloss_scale;        /* the microbatch's factor on dloss (the loss mask: B·T / the
                                 positions it keeps, or m->dloss_scale_all; 1 without mask)  */
} mg_gpt_acts;

typedef struct mg_gpt {
    mg_ctx *ctx;
    mg_comm *comm;            /* the process groups (layout.comm; the trainer sets it too);
                                 NULL: one rank, nothing to reduce across ranks                */
    mg_gpt_config cfg;
    mg_gpt_layout layout;
    int n_params;
    mg_param_desc *params;    /* n_params descriptors, flat-buffer order                        */
    int64_t n_elems;          /* length of each flat buffer (with alignment gaps)              */
    float *param_buf;         /* ONE flat fp32 buffer of this rank's parameters (device): the
                                 weights (fp32) or their master copy (mixed precision); NULL
                                 with layout.shard_master (see mg_gpt_fp32_params)            */
    void *param16;            /* mixed precision: the 16-bit working copy of the master weights
                                 that the forward and backward read (m->w views it); NULL with
                                 fp32. mg_gpt_sync_weights refreshes it from param_buf; the
                                 optimizer's fused step writes it (mg_adamw_update).          */
    int param16_current;      /* 1: param16 was just written from the fp32 weights (the
                                 trainer's fused AdamW step writes both): the next
                                 mg_gpt_sync_weights has nothing to do, and clears it        */
    int fp32_staging;         /* layout.shard_master: what grad_buf holds besides gradients —
                                 MG_STAGING_WRITTEN: parameters just written (init, import,
                                 load), not yet taken by the optimizer; MG_STAGING_GATHERED:
                                 the master weights gathered for reading (export); 0: none */
    mg_dtype dtype;           /* layout.dtype: activations, their gradients, param16            */
    float *grad_buf;          /* ONE flat fp32 buffer of their gradients (device)              */
    mg_tensor *w, *g;         /* n_params tensor views into param_buf / grad_buf               */
    int idx_global[MG_GLOBAL_TENSORS]; /* descriptor index of WTE, WPE, LNF_W, LNF_B, OUT_W
                                 (-1: not held)                                               */
    int *idx_layer;           /* [n_layer]: index of the layer's first tensor, -1: not held    */
    int layer_tensors;        /* tensors per layer (the configuration's, mg_layer_has_tensor)   */
    mg_tensor (*lw)[MG_LAYER_TENSORS], (*lg)[MG_LAYER_TENSORS]; /* [n_layer]: each held layer's
                                 weights / gradients by kind (absent kinds: data NULL), the
                                 arrays mg_transformer.h's layer calls take                    */
    mg_gpt_acts *acts;        /* [n_chunks · n_slots], chunk-major                              */
    mg_transformer tf;        /* the layers' shared state (mg_transformer.h): the tensor group
                                 tf.tp, this rank's residual-stream rows tf.n_rows from
                                 tf.row0, and the scratch every forward/backward shares —
                                 tf.dresid is the gradient of the residual stream            */
    size_t act_bytes;         /* arena bytes of the per-microbatch activations (all chunks and
                                 slots; bench/memory reports them)                             */
    size_t scratch_bytes;     /* arena bytes of the shared scratch below (one microbatch)      */
    /* activation recomputation's scratch, shared by every chunk and slot (one microbatch is
       recomputed at a time): full — the activations of one group of layers (the layer structs
       of recomputed layers point here, except a group's last output, kept per microbatch);
       selective — the attention probabilities of one layer                                   */
    mg_layer_acts *recompute_layers;
    int n_recompute_layers;
    mg_tensor recompute_att;  /* [B, nh/t, T, T]                                                */
    /* training mode: dropout on, and the global index of this iteration's first microbatch   */
    int training;
    uint64_t microbatch_base;
    /* gradient-ready hook (data parallelism): while final_backward is set — the caller sets it
       for a chunk's last backward of the iteration (mg_gpt_backward, or with a split backward
       mg_gpt_backward_weight: the weight half of the chunk's last microbatch) — the model calls
       grads_final(grads_final_user, first, end) when the gradients of flat offsets [first,
       end) have become final: after the head (the final layernorm up to n_elems), after each
       layer (its tensors), after the embedding (the position embedding, and the word
       embedding when this rank holds the whole model). Each range runs from a tensor's offset
       to the next held tensor's (alignment gaps and the end padding included), so over an
       iteration the reports cover the flat buffer once — except the word embedding with
       pp_size > 1: the first and the last stage each hold a part of its gradient, final only
       after the embedding group's all-reduce at the flush, so it is never reported (mg_dp
       reduces the buckets it touches after that). Executors run the chunks' last backwards in
       any order; with pp_size 1 the chunk with the embedding must run after the one with the
       head (the word embedding's two parts; mg_gpt_run_microbatches does).               */
    int final_backward;
    void (*grads_final)(void *user, int64_t first, int64_t end);
    void *grads_final_user;
    /* timing hook (the trainer's --timing-log-level): mg_gpt_run_microbatches calls
       compute_timer(user, 0 forward / 1 backward, 1 start / 0 stop) around each microbatch's
       forward and backward over the chunks; NULL: not called                               */
    void (*compute_timer)(void *user, int backward, int start);
    void *compute_timer_user;
    /* the fused classifier (mg__head_classifier): head_dloss, set by the caller before the
       forwards of a training iteration (mg_gpt_run_microbatches and the trainer do), makes
       the head's forward run the classifier's backward too, seeded with it; 0: forwards
       compute the loss only (evaluation) and a backward re-runs the classifier            */
    float head_dloss;
    int64_t head_chunk_rows;  /* rows per chunk (layout.classifier_chunk_rows or automatic)   */
    void *head_scratch;       /* mg_classifier_scratch_bytes(head_chunk_rows, Vp/t, dtype)     */
    /* device-resident iteration (the trainer's GPU step reads nothing back): dloss_at, when
       set, is where the backward reads its seed (a device float the optimizer's device code
       wrote: the fp16 loss scale over the tokens) instead of the dloss argument — the fused
       classifier reads it there too; loss_at, when set, is the device double the per-token
       losses of mg_gpt_run_microbatches are added to (mg_sum_f32_device) instead of being
       read back (the run then returns 0)                                                    */
    const float *dloss_at;
    double *loss_at;
    /* the loss mask (the trainer's --eod-mask-loss): with eod_mask set, mg_gpt_set_batch
       leaves out of the loss every position whose INPUT token is eod_id (Megatron-LM's
       loss_mask[tokens == eod] = 0: the prediction across a document boundary) — its target
       becomes -1, a row the classifier ignores — and gives the microbatch the factor
       dloss_scale = B·T / (the positions of the microbatch it keeps), so each microbatch's
       loss is the mean over its kept positions, as Megatron-LM's loss_func divides by
       loss_mask.sum(); 0 kept: 0. dloss_scale_all > 0 replaces that factor for every
       microbatch (the trainer's --calculate-per-token-loss). loss_tokens counts the targets
       set_batch kept for this rank's head chunk (the caller zeroes it).                    */
    int eod_mask;
    int32_t eod_id;
    float dloss_scale_all;
    int64_t loss_tokens;
    float *tp_scalars;        /* [3 + 3t] device floats: the tensor group's scalar exchanges   */
    float *vocab_row;         /* [Vp] one row of logits gathered over the vocabulary slices
                                 (mg_gpt_logits_row recomputes the row into head_scratch)     */
    float *losses;            /* [max_microbatches · N] per-token losses (device)               */
    int32_t *host_tokens, *host_targets; /* host staging for mg_gpt_set_batch                  */
    float *host_losses;       /* host staging for mg_gpt_loss_sum ([max_microbatches · N])    */
    double *scalars;          /* [2·max(t, p)] device: doubles exchanged over the tensor or the
                                 pipeline group (mg__group_sum_f64)                           */
    double *host_scalars;     /* [2·max(t, p)] their host staging                               */
} mg_gpt;

/* How the layout recomputes layer i (0-based within its chunk of nl layers): mg_recompute;
   for MG_RECOMPUTE_FULL also the chunk-relative group [*first, *last] re-run together.     */
MGDEF int mg_gpt_recompute_kind(const mg_gpt_layout *layout, int nl, int i, int *first,
                                int *last);
/* The fused classifier's automatic rows per chunk (layout.classifier_chunk_rows 0): the most
   rows of the [B·T_local, Vp/t] logits whose scratch fits MG_CLASSIFIER_CHUNK_BYTES, or
   MG_CLASSIFIER_CHUNK_BYTES_CUDA when cuda (the trainer's choice on a GPU).                 */
MGDEF int64_t mg_gpt_classifier_auto_rows(const mg_gpt_config *cfg, const mg_gpt_layout *L,
                                          int cuda);
/* Bytes of the context's arena the model needs (parameters, gradients, activations, scratch). */
MGDEF size_t mg_gpt_arena_bytes(const mg_gpt_config *cfg, const mg_gpt_layout *layout);
/* Builds descriptors, buffers and views; values are undefined until mg_gpt_init_weights or a
   load. Returns 0, or -1 with the reason in err (bad config/layout).                         */
MGDEF int mg_gpt_create(mg_gpt *m, mg_ctx *ctx, const mg_gpt_config *cfg,
                        const mg_gpt_layout *layout, char *err, size_t errlen);
MGDEF void mg_gpt_destroy(mg_gpt *m);  /* frees host allocations (the arena belongs to ctx) */
/* Initialisation keyed by (seed, parameter name, global element index): normal(0, init_std)
   weights, zero biases and padding rows, layernorm weight 1 and bias 0. Every rank makes
   exactly its shard of the tensor the serial model would have.                               */
MGDEF void mg_gpt_init_weights(mg_gpt *m, uint64_t seed);
MGDEF int mg_gpt_find_param(const mg_gpt *m, const char *name);   /* -1 if not held */
/* Copy one parameter (from the params or grads buffer) between the device shard and a host
   array holding the GLOBAL tensor in our layout; on a single rank shard = global. With
   tensor parallelism mg_gpt_shard_to_global is collective over the tensor group (every rank
   calls it; each receives the whole tensor); mg_gpt_global_to_shard is local.               */
MGDEF void mg_gpt_shard_to_global(const mg_gpt *m, int idx, const float *flat, float *global);
MGDEF void mg_gpt_global_to_shard(mg_gpt *m, int idx, float *flat, const float *global);

/* Upload microbatch data into (chunk, slot): samples is host int32 [B, T+1] (a sample is T+1
   consecutive tokens); tokens become [B, T] and targets [N] in row order t·B + b.
   Every id must be < V (checked). With m->eod_mask, positions whose input is m->eod_id get
   target -1 (no loss) and the slot the microbatch's dloss factor (see mg_gpt.eod_mask).    */
MGDEF void mg_gpt_set_batch(mg_gpt *m, int chunk, int slot, const int32_t *samples);
/* Forward of one chunk for the microbatch in `slot`. The first chunk embeds the tokens; any
   other reads mg_gpt_chunk_input (filled by the caller). The last chunk writes the per-token
   losses of this microbatch to losses[microbatch · N …]. With m->training set, dropout is on
   and its masks are keyed by the global microbatch index m->microbatch_base + microbatch (the
   backward reuses the forward's). Chunk inputs/outputs and m->tf.dresid hold this rank's n rows
   (N/t with sequence parallelism). With tensor parallelism every rank of the tensor group
   makes the same calls in the same order (they communicate). With m->head_dloss set (to the
   dloss the backward will be given) the last chunk's forward also runs the classifier's
   backward — the output layer's weight gradient accumulates then (mg__head_forward).     */
MGDEF void mg_gpt_forward(mg_gpt *m, int chunk, int slot, int microbatch);
/* Backward of one chunk for the microbatch in `slot` (its forward must have run). The last
   chunk seeds the gradient with dloss per token; any other reads the gradient of its output
   from m->tf.dresid (filled by the caller). Parameter gradients ACCUMULATE into grad_buf. On
   return m->tf.dresid holds the gradient of the chunk's input (none for the first chunk).       */
MGDEF void mg_gpt_backward(mg_gpt *m, int chunk, int slot, float dloss);
/* mg_gpt_backward in two halves (layout.split_backward): the input half computes every
   activation gradient (and the cheap layernorm and embedding parameter gradients) and keeps
   each linear's output gradient in the slot; the weight half, any time later (other
   microbatches' halves may run between), accumulates the linears' weight and bias gradients
   from them — re-running the forward of full-recomputed layers, whose inputs lived in the
   shared scratch. Together they equal mg_gpt_backward bit for bit, in every precision and
   with every recomputation setting.                                                         */
MGDEF void mg_gpt_backward_input(mg_gpt *m, int chunk, int slot, float dloss);
MGDEF void mg_gpt_backward_weight(mg_gpt *m, int chunk, int slot);
MGDEF mg_tensor *mg_gpt_chunk_input(mg_gpt *m, int chunk, int slot);
MGDEF mg_tensor *mg_gpt_chunk_output(mg_gpt *m, int chunk, int slot);
MGDEF void mg_gpt_zero_grad(mg_gpt *m);
/* Mixed precision: rounds the fp32 master weights (param_buf) into the 16-bit working copy
   that every forward and backward reads. Call it after anything writes param_buf (the
   optimizer, initialisation, an import or load); mg_gpt_run_microbatches and the trainer call
   it before their forwards. A no-op with fp32, and with a sharded master unless parameters
   were just written (mg_gpt_fp32_params).                                                  */
MGDEF void mg_gpt_sync_weights(mg_gpt *m);
/* The whole flat fp32 parameters (n_elems floats, flat-buffer order) that initialisation,
   import and checkpoint loads write and export reads: param_buf. With layout.shard_master the
   model has no such buffer and grad_buf stands in for it (Megatron-LM's distributed optimizer
   also keeps only the 16-bit parameters whole): a write stages the fp32 values there
   (MG_STAGING_WRITTEN) until mg_adamw_take_master keeps this rank's pieces as its master
   weights and rounds the 16-bit copy; mg_adamw_gather_master puts every rank's pieces there
   for reading (MG_STAGING_GATHERED). The next backward overwrites them; mg_gpt_zero_grad
   refuses to drop written values the optimizer has not taken.                              */
enum { MG_STAGING_WRITTEN = 1, MG_STAGING_GATHERED = 2 };
MGDEF float *mg_gpt_fp32_params(mg_gpt *m);
/* After the last backward of an iteration: completes the gradients that are partial on this
   rank — with sequence parallelism the layernorm gradients (each rank saw its rows) are
   summed over the tensor group. A no-op on one rank.                                      */
MGDEF void mg_gpt_reduce_grads(mg_gpt *m);
/* Σ of the per-token losses of microbatches [first, first + count) (copies them to the host;
   with m->loss_at set, adds them to that device double instead and returns 0).             */
MGDEF double mg_gpt_loss_sum(mg_gpt *m, int first, int count);
/* One rank, all chunks in order: forward + backward of n_micro microbatches taken from
   samples (host int32 [n_micro·B, T+1]) with dloss per token; returns the summed token loss.
   Does not zero the gradients. backward = 0 runs forwards only (evaluation).                */
MGDEF double mg_gpt_run_microbatches(mg_gpt *m, const int32_t *samples, int n_micro,
                                     float dloss, int backward);
/* Logits of one position after a forward of the last chunk: row t·B + b, the V real entries,
   copied to the host (with tensor parallelism gathered over the group: collective). */
MGDEF void mg_gpt_logits_row(mg_gpt *m, int slot, int t, int b, float *out_V);

/* ---------------------------------------------------------------------------------------------
   3b. Weight files: import (llm.c checkpoint, Hugging Face GPT-2 safetensors, a Hugging Face
       Llama-family directory, or the model file of one of our checkpoints — recognised by
       content and config.json) and export (Hugging Face GPT-2 or Llama family).
   ------------------------------------------------------------------------------------------ */
typedef enum { MG_WEIGHTS_LLMC = 1, MG_WEIGHTS_HF, MG_WEIGHTS_MEGATRON, MG_WEIGHTS_HF_LLAMA }
    mg_weights_kind;
typedef struct mg_weights_file {
    mg_weights_kind kind;
    char path[MG_PATH_MAX];
    mg_llmc_checkpoint llmc;   /* MG_WEIGHTS_LLMC                                              */
    mg_st_file st;             /* MG_WEIGHTS_HF (one file) / MG_WEIGHTS_MEGATRON               */
    mg_st_file *shards;        /* MG_WEIGHTS_HF_LLAMA: model.safetensors, or every file that
                                  model.safetensors.index.json's weight_map names; a sharded
                                  MG_WEIGHTS_HF directory: those files                      */
    int n_shards;
    char prefix[16];           /* Hugging Face names: "" or "transformer."                     */
    mg_gpt_config cfg;         /* the architecture the file describes (padded_vocab left 0);
                                  n_head 0 when unknown (safetensors without config.json)   */
    /* MG_WEIGHTS_HF_LLAMA: config.json's architectures[0], and its real numbers exactly
       (cfg holds them as floats): rms_norm_eps, rope_theta, rope_scaling.factor           */
    char arch[40];
    double norm_eps, rope_theta, rope_factor;
} mg_weights_file;
/* Opens and checks a weights file; a directory means DIR/model.safetensors, or
   DIR/model.safetensors.index.json with its shards (save_pretrained's max_shard_size). The kind: an llm.c checkpoint by
   its magic; our model file by its tensor names; a Llama family directory by config.json's
   architectures (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM; or model_type llama,
   mistral, qwen2), whose keys give the whole architecture (FORMATS.md) — a key megatron.h
   cannot compute (another rope_scaling type, hidden_act other than silu, attention_bias
   without mlp_bias, a sliding window shorter than max_position_embeddings) is refused with
   one line naming it; else Hugging Face GPT-2, the number of heads from config.json beside
   it or the file's metadata. An architectures entry of none of these is refused.          */
MGDEF int mg_weights_open(mg_weights_file *f, const char *path, char *err, size_t errlen);
MGDEF void mg_weights_close(mg_weights_file *f);
/* Copies every parameter the model holds from the file (global tensor -> this rank's shard),
   permuting QKV rows from [q | k | v] and transposing Hugging Face's Conv1D weights. The
   file's architecture must equal the model's (checked, with the mismatch named).           */
MGDEF int mg_gpt_import(mg_gpt *m, const mg_weights_file *f, char *err, size_t errlen);
/* Writes DIR/model.safetensors (Hugging Face names and layout, fp32, V rows of the word
   embedding) and DIR/config.json, each atomically; creates DIR if missing. A GPT-2 model
   (mg_gpt_is_gpt2) is written as GPT2LMHeadModel; a Llama-family one (RMSNorm, SwiGLU, full
   rotary positions, biases everywhere or on Q/K/V only or nowhere) as LlamaForCausalLM, or
   Qwen2ForCausalLM when only Q/K/V have biases; other combinations are refused. Collective
   over every rank of the job (comm NULL: one rank): each tensor is gathered over the tensor
   group of the pipeline stage that holds it and sent from that stage to the first; world
   rank 0 writes. The files do not depend on the layout (t, p, v, d).                    */
MGDEF int mg_gpt_export_hf(mg_gpt *m, const char *dir, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
   4. Optimizer
   ------------------------------------------------------------------------------------------ */
/* --lr-decay-style, --lr-wsd-decay-style and --weight-decay-incr-style, in the order of their
   choices (Megatron-LM's names).                                                            */
typedef enum { MG_LR_CONSTANT = 0, MG_LR_LINEAR, MG_LR_COSINE, MG_LR_INVERSE_SQRT,
               MG_LR_WSD } mg_lr_style;
typedef enum { MG_WSD_EXPONENTIAL = 0, MG_WSD_LINEAR, MG_WSD_COSINE,
               MG_WSD_MINUS_SQRT } mg_wsd_style;
typedef enum { MG_WD_CONSTANT = 0, MG_WD_LINEAR, MG_WD_COSINE } mg_wd_style;
#define MG__LR_STYLES "constant|linear|cosine|inverse-square-root|WSD"
#define MG__WSD_STYLES "exponential|linear|cosine|minus_sqrt"
#define MG__WD_STYLES "constant|linear|cosine"
/* Megatron-LM's OptimizerParamScheduler: the learning rate and the weight decay of every
   optimizer step.                                                                           */
typedef struct mg_lr_schedule {
    double max_lr, min_lr;       /* --lr, --min-lr                                              */
    double init_lr;              /* --lr-warmup-init: the rate the warm-up starts from          */
    int decoupled;               /* --decoupled-lr given: the word embedding and the output
                                    layer follow the same schedule between these two rates   */
    double decoupled_max_lr, decoupled_min_lr;   /* --decoupled-lr, --decoupled-min-lr (its
                                    default: --min-lr), Megatron-LM's decoupled param group  */
    /* The lengths are in iterations; sample-based training (--train-samples) gives them in
       samples, which here read as samples / samples_per_iter: a fraction of an iteration
       counts, as Megatron counts every length in samples.                                    */
    double warmup_iters;         /* --lr-warmup-iters, or --lr-warmup-fraction × decay_iters    */
    double decay_iters;          /* --lr-decay-iters (Megatron's default: --train-iters)        */
    mg_lr_style style;           /* --lr-decay-style                                            */
    double wsd_decay_iters;      /* --lr-wsd-decay-iters: WSD's annealing, the last iterations
                                    of decay_iters                                             */
    mg_wsd_style wsd_style;      /* --lr-wsd-decay-style                                        */
    int64_t samples_per_iter;    /* the global batch size (0 counts as 1): Megatron counts the
                                    steps in samples, which only inverse-square-root's
                                    max(·, 1) tells apart from iterations                      */
    double start_wd, end_wd;     /* --start-weight-decay, --end-weight-decay (the constant
                                    style: --weight-decay both)                               */
    double wd_incr_iters;        /* the increment's length (Megatron's wd_incr_steps):
                                    --train-iters                                              */
    mg_wd_style wd_style;        /* --weight-decay-incr-style                                   */
} mg_lr_schedule;
/* Megatron-LM's OptimizerParamScheduler.get_lr after num_steps successful optimizer updates
   (iteration k, 1-based, trains with num_steps = k − 1 − the iterations skipped before it;
   Megatron advances the scheduler only when an update succeeded):
     warm-up (num_steps <= warmup, warmup > 0): init_lr + (max_lr - init_lr)·num_steps/warmup
          (warmup is --lr-warmup-fraction × decay_iters when that is given: a fraction of an
          iteration is kept, as Megatron counts the warm-up in samples)
     constant: max_lr;  past decay_iters: min_lr
     inverse-square-root: max(min_lr, max_lr·√max(warmup·S, 1) / √max(num_steps·S, 1)),
          S = samples_per_iter (Megatron's steps are samples)
     WSD: coeff = 1 up to anneal = decay − wsd_decay_iters, then r = (num_steps − anneal) /
          wsd_decay_iters and coeff = 2·0.5^r − 1 (exponential), 1 − r (linear),
          ½(cos(π·r) + 1) (cosine) or 1 − √r (minus_sqrt)
     else ratio = (num_steps - warmup)/(decay - warmup), coeff = 1 - ratio (linear) or
          ½(cos(π·ratio) + 1) (cosine);  lr = min_lr + coeff·(max_lr - min_lr).            */
MGDEF double mg_lr_at(const mg_lr_schedule *s, int64_t num_steps);
/* Its get_wd, the weight decay of the same step (each weight's; biases and norms take none):
     past wd_incr_iters, or the constant style: end_wd
     else r = num_steps / wd_incr_iters, coeff = r (linear) or ½(cos(π·(1 − r)) + 1) (cosine),
          wd = start_wd + coeff·(end_wd − start_wd).                                        */
MGDEF double mg_wd_at(const mg_lr_schedule *s, int64_t num_steps);

/* 4b. Data parallelism (d replicas of the model; Megatron's DistributedDataParallel and
       DistributedOptimizer). Each data-parallel rank runs its own microbatches of the global
       batch; every backward is seeded with dloss = 1 / (global batch · T), so the gradient a
       rank holds is its share of the gradient of the mean loss and the SUM over the data group
       is the whole gradient (no averaging). The flat gradient buffer is cut into buckets of
       about --bucket-size elements (boundaries at multiples of 64·d, the buffer padded to
       one); during the last microbatch's backward, a bucket's reduction is started (nonblocking)
       as soon as the hook of mg_gpt has reported every element of it final — also under a
       pipeline schedule, where each chunk's last backward (or weight half) reports its
       pieces — and mg_dp_finish starts the rest (with p > 1 the word embedding's, a bucket
       of its own as in Megatron-LM, after the trainer's embedding-group all-reduce) and
       waits for all before the optimizer.
         plain:        all-reduce of each bucket: every rank holds the whole summed gradient
                       and runs the whole AdamW (moments of every parameter on every rank).
         distributed   (--use-distributed-optimizer, ZeRO-1): reduce-scatter of each bucket:
                       rank r of the data group owns piece r (1/d of it, contiguous) of every
                       bucket and keeps the AdamW moments of its pieces only; it updates those
                       parameters and an all-gather of each bucket sends the updated pieces to
                       every rank. With mixed precision (layout.shard_master) the rank also
                       keeps only its pieces of the fp32 master weights: it updates them, rounds
                       them into the 16-bit working copy and the all-gather moves 16-bit
                       parameters (half the bytes); optimizer state per rank is then 12 bytes
                       (master + 2 moments) × padded elements / d, as in Megatron-LM. With fp32
                       training the fp32 parameters ARE the weights every rank's forward needs:
                       only the moments are sharded, 8 bytes × elements / d.                 */
typedef struct mg_dp {
    mg_gpt *model;
    mg_comm *comm;               /* NULL: one replica                                          */
    mg_group *group;             /* the replicas: comm's data group, or its data-context group
                                    with context parallelism (d·c ranks, Megatron-LM's data-
                                    parallel group with context parallelism)                  */
    int rank, size;              /* coordinate in the group and its size (d, or d·c)           */
    int distributed;             /* ZeRO-1: reduce-scatter, sharded moments, all-gather         */
    int overlap;                 /* 1 (default): start buckets from the backward hook; 0: all
                                    from mg_dp_finish (bench/overlap compares them)            */
    int n_buckets;
    int64_t *bucket_begin;       /* [n_buckets + 1] flat offsets, multiples of 64·d            */
    mg_request *req;             /* [n_buckets] in-flight reductions                            */
    int64_t *pending;            /* [n_buckets] elements of the bucket not reported final yet
                                    this iteration (0: started)                               */
    int n_early;                 /* buckets the last iteration started from the hook, before
                                    mg_dp_finish (tests check that overlap happens)           */
    int64_t shard_elems;         /* elements this rank owns (distributed): n_elems / d          */
    float *dev_scalars;          /* [3 + 3·world] device staging of exact scalar sums           */
    float *host_scalars;         /* [3·world]                                                   */
    double wait_ms;              /* time mg_dp_finish spent waiting (accumulates; bench)        */
    void (*comm_timer)(void *user, int start);   /* optional: called with 1 before each
                                    bucket's collective is posted, 0 after (the trainer's GPU
                                    all-grads-sync timer records CUDA events there)           */
    void *comm_timer_user;
} mg_dp;
/* Megatron's default bucket: max(40 M, 1 M · d) elements. */
MGDEF int64_t mg_dp_default_bucket(int dp_size);
/* Sets up the reduction of m's gradients over comm's data group — the data-context group when
   the context group has c > 1 ranks: each context rank holds the gradient of its tokens —
   (comm NULL or d·c = 1: none); m's layout must have dp_size = d·c. Device scratch comes from m's context arena
   (mg_dp_arena_bytes). bucket_elems <= 0: the default.                                      */
MGDEF void mg_dp_init(mg_dp *dp, mg_gpt *m, mg_comm *comm, int distributed, int64_t bucket_elems);
MGDEF size_t mg_dp_arena_bytes(int world_size);
MGDEF void mg_dp_free(mg_dp *dp);
/* Arms the hook for one iteration (call before the microbatches; the caller sets
   m->final_backward for each chunk's last backward — mg_gpt_run_microbatches and the
   trainer's pipeline callbacks do).                                                         */
MGDEF void mg_dp_start(mg_dp *dp);
/* Starts the buckets not yet started and waits for every reduction. */
MGDEF void mg_dp_finish(mg_dp *dp);
/* Σ over the data group of a double, as exact as a serial sum and identical on every rank
   (partial sums exchanged bit for bit as doubles and added in rank order). */
MGDEF double mg_dp_sum(mg_dp *dp, double local);
/* Copies a moment between its sharded form (shard_elems, this rank's pieces in bucket order)
   and the whole flat layout (n_elems): to_flat gathers the pieces of every rank (collective
   over the data group); !to_flat copies this rank's pieces out of flat (local).             */
MGDEF void mg_dp_moment_flat(const mg_dp *dp, float *shard, float *flat, int to_flat);

typedef struct mg_adamw {
    float *m, *v;                /* first and second moments (device): flat like the gradients,
                                    or, with a distributed dp, this rank's shard_elems          */
    float *master;               /* the model's layout.shard_master: this rank's pieces of the
                                    fp32 master weights, indexed like the moments; NULL: the
                                    model's param_buf is the master                           */
    int64_t n;                   /* elements of each moment                                     */
    const mg_dp *dp;             /* distributed optimizer: the owner of the shards (else NULL) */
    int64_t step;                /* optimizer steps taken (skipped iterations do not count)    */
    float beta1, beta2, eps, weight_decay;
    double loss_scale;           /* the gradients hold loss_scale × the true ones (fp16 loss
                                    scaling; 1 otherwise): divided out before the norm, the
                                    clipping and the update (mg_adamw_update)                 */
    /* the fused step (mg_adamw_multi): the pieces mg__for_owned visits, as one device table,
       and the step's scalars in device memory (mg_optim_state), so that a GPU step runs from
       the gradient norm to the updated weights without the host                            */
    mg_adamw_piece *table;       /* device [n_pieces]                                           */
    int n_pieces;
    int64_t table_total;         /* Σ n of the pieces                                           */
    struct mg_optim_state *state;/* device                                                      */
    double *gather;              /* device [world size]: one double per rank of a group sum    */
    int keep_scratch;            /* 1: the Σ g² partial sums stay allocated in the arena (a
                                    CUDA graph captured over them replays into them)          */
} mg_adamw;
/* Moments from the arena, zeroed. dp NULL or not distributed: moments of the whole flat buffer;
   distributed: of this rank's shard, and mg_adamw_update becomes ZeRO-1 (collective over the
   data and tensor groups).                                                                  */
MGDEF void mg_adamw_create(mg_adamw *opt, mg_gpt *m, float beta1, float beta2, float eps,
                           float weight_decay);  /* moments from the arena, zeroed */
MGDEF void mg_adamw_create_dp(mg_adamw *opt, mg_gpt *m, const mg_dp *dp, float beta1,
                              float beta2, float eps, float weight_decay);
/* Global gradient norm (Σ over every parameter, counted once across the tensor, pipeline and
   data groups), clipping to clip_grad (0: off), then AdamW with learning rate lr (distributed
   optimizer: this rank's pieces, then an all-gather of the parameters). Returns 1 if applied;
   0 if some gradient is inf/nan on any rank (the update is skipped, nothing changes).
   *grad_norm receives the norm of the unscaled gradients before clipping (nan when skipped). */
MGDEF int mg_adamw_update(mg_adamw *opt, mg_gpt *m, float lr, float clip_grad, double *grad_norm);
/* Sharded master (opt->master): after anything wrote the model's fp32 parameters (init,
   import, a checkpoint load — staged in grad_buf, mg_gpt_fp32_params), keep this rank's
   pieces as the master weights and round the 16-bit working copy from the written values.
   Otherwise: mg_gpt_sync_weights. Local.                                                    */
MGDEF void mg_adamw_take_master(mg_adamw *opt, mg_gpt *m);
/* Sharded master: every rank's pieces of the master weights into the model's grad_buf, which
   then holds the whole fp32 parameters for reading (export) until the next mg_gpt_zero_grad.
   Collective over the data group. A no-op without a sharded master (param_buf holds them). */
MGDEF void mg_adamw_gather_master(mg_adamw *opt, mg_gpt *m);
/* Optimizer-state bytes this rank holds: the two moments, plus the fp32 master weights with
   mixed precision (the model's param_buf, or opt->master when sharded) — with fp32 training
   the weights are the model's own and not counted: 12 bytes (fp32: 8) × elements / d with
   the distributed optimizer (and, with 16 bits, its sharded master), 12 / 8 × elements
   without it.                                                                             */
MGDEF size_t mg_adamw_state_bytes(const mg_adamw *opt, const mg_gpt *m);
/* Arena bytes mg_adamw_create_dp takes besides the moments and the master: the step's scalars,
   the table of at most n_params + 202 pieces (a parameter cut by at most ~201 bucket
   boundaries), one double per rank.                                                        */
MGDEF size_t mg_adamw_arena_bytes(int n_params, int world_size);

/* Loss scaling for fp16 (Megatron-LM's DynamicGradScaler / ConstantGradScaler). The backward
   is seeded with dloss · scale so small gradients survive fp16; the optimizer divides the
   scale out (mg_adamw.loss_scale). After each iteration, update(found_inf), where found_inf
   says some gradient on some rank was inf or nan (that iteration's update is skipped):
     found_inf:  growth_tracker = 0; hysteresis_tracker -= 1;
                 if hysteresis_tracker <= 0: scale = max(scale · backoff, min_scale)
     clean:      growth_tracker += 1; if growth_tracker == growth_interval:
                 growth_tracker = 0, hysteresis_tracker = hysteresis, scale ·= growth
   Megatron's defaults: initial 2^32, min 1, growth 2, backoff 0.5, interval 1000,
   hysteresis 2. A constant scaler (--loss-scale X) never changes; found_inf still skips.   */
typedef struct mg_loss_scaler {
    double scale;
    int dynamic;                 /* 0: constant                                                */
    double min_scale, growth_factor, backoff_factor;
    int64_t growth_interval, growth_tracker;
    int64_t hysteresis, hysteresis_tracker;
} mg_loss_scaler;
/* dynamic: initial scale, min_scale, growth interval (--loss-scale-window), hysteresis;
   growth 2 and backoff 0.5. Constant (dynamic 0): scale = initial for good.                */
MGDEF void mg_loss_scaler_init(mg_loss_scaler *s, int dynamic, double initial, double min_scale,
                               int64_t growth_interval, int64_t hysteresis);
MGDEF void mg_loss_scaler_update(mg_loss_scaler *s, int found_inf);

/* The optimizer's scalars of one step, in device memory (host memory on the CPU): computed and
   read by device code within the step — Σ g², the norm, the clip coefficient, the non-finite
   decision, the loss scaler's update, the step count and the learning rate — so that the GPU
   never waits for the host; the host reads the whole struct back when it wants the values
   (mg_trainer_step: once per logged iteration). The CPU runs the same functions on the same
   struct in host memory, so both make the same decisions with the same numbers.            */
typedef struct mg_optim_state {
    mg_adamw_args args;          /* what mg_adamw_multi reads (args.skip: the step skipped)    */
    double sumsq;                /* Σ g² of the (scaled) gradients, every parameter once        */
    double grad_norm;            /* of the unscaled gradients before clipping; nan: skipped     */
    double lr;                   /* the learning rate this iteration used (also when skipped)   */
    double lr2;                  /* the decoupled one (the embedding and output layer's); lr
                                    without --decoupled-lr                                     */
    double loss_scale;           /* the scale this iteration's gradients carried                */
    mg_loss_scaler scaler;       /* updated by the iteration's found_inf                        */
    int64_t step;                /* optimizer updates taken (skipped iterations excluded)       */
    int64_t skipped_iters;       /* iterations skipped                                          */
    double aux;                  /* scratch: the params norm's Σ w²                             */
    /* the trainer's iteration (mg_trainer_step; mg_adamw_update leaves them): */
    double loss_sum;             /* Σ of the global batch's per-token losses (summed over the
                                    data group, the last pipeline stage's on every stage)      */
    double loss_tokens;          /* the loss mask (model eod_mask): the positions of the global
                                    batch the loss keeps, summed as loss_sum is               */
    double loss;                 /* loss_sum / tokens (/ loss_tokens under the loss mask)       */
    int64_t nan_iters;           /* iterations whose loss was not finite                        */
    struct {                     /* the log interval's (reset by mg_trainer_log when it prints) */
        double loss_sum;         /* Σ loss over the iterations not skipped                      */
        int64_t skipped, nan;
    } interval;
    float dloss;                 /* the next backward's seed: scaler.scale / tokens (trainer)  */
} mg_optim_state;

/* ---------------------------------------------------------------------------------------------
   4c. Tokenizer flags
      Megatron-LM's flags to an mg_tokenizer.h tokenizer: --tokenizer-type NAME (GPT2BPETokenizer,
      TikTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, Llama2Tokenizer,
      NullTokenizer, ByteTokenizer); GPT2BPETokenizer takes --vocab-file vocab.json and
      --merge-file merges.txt; NullTokenizer and ByteTokenizer no file; the others one file,
      --tokenizer-model (or --vocab-file, as tools/mg_tokenize takes it): TikTokenizer the
      .tiktoken rank file (pattern --tiktoken-pattern gpt2|r50k_base|cl100k_base|o200k_base,
      else guessed from its size), HuggingFaceTokenizer a tokenizer.json or the directory
      holding one, SentencePiece and Llama2 the tokenizer.model. NullTokenizer takes
      null_vocab_size = --vocab-size V (V + 1 ids, V the end of document; < 1: not given, an
      error), which the other types ignore. type NULL: ByteTokenizer. A flag the type does
      not use is an error. NULL with one line in err.
   ------------------------------------------------------------------------------------------ */
MGDEF mg_tokenizer *mg_tokenizer_from_flags(const char *type, const char *vocab_file,
                                            const char *merge_file, const char *tokenizer_model,
                                            const char *tiktoken_pattern,
                                            int64_t null_vocab_size, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
   5. Trainer
      mg_train_parse reads Megatron-LM's flags into mg_train_args (syntax and ranges only);
      mg_trainer_setup checks everything else — combinations, files, sizes, memory — BEFORE any
      work, then builds the model; each problem is one line in err. Then, per iteration,
      mg_trainer_step; mg_trainer_evaluate every --eval-interval; mg_trainer_save every
      --save-interval and at the end. examples/gpt_train.cu is that loop.
   ------------------------------------------------------------------------------------------ */
/* A flag that takes several words (--data-path 0.7 A 0.3 B): the words up to the next
   --option, pointers into argv.                                                             */
#define MG_DATA_WORDS 4096
typedef struct mg_str_list { int n; const char *v[MG_DATA_WORDS]; } mg_str_list;
typedef struct mg_train_args {
    /* model (optional when --init-from / --load supply them; they must agree if given)       */
    int64_t num_layers, hidden_size, num_attention_heads, seq_length, max_position_embeddings,
            vocab_size;
    /* the Llama family's switches (mg_gpt_config); defaults: GPT-2                          */
    int normalization, position_embedding_type;        /* choices: MG_NORM_*, MG_POS_*       */
    int swiglu, use_rope_scaling, group_query_attention, untie_embeddings_and_output_weights,
        disable_bias_linear, add_qkv_bias;             /* switches                            */
    double norm_epsilon, rotary_base, rotary_percent, rope_scaling_factor;
    double rotary_seq_len_interpolation_factor;   /* 1: none                                 */
    int no_bias_gelu_fusion;             /* --no-bias-gelu-fusion: the exact (erf) GELU        */
    int openai_gelu;                     /* --openai-gelu: the tanh GELU even so               */
    int squared_relu;                    /* --squared-relu: max(x, 0)² instead of GELU         */
    int apply_layernorm_1p;              /* --apply-layernorm-1p: zero-centred norm weights    */
    int64_t ffn_hidden_size, num_query_groups, kv_channels;
    /* batch and length of the run                                                           */
    int64_t micro_batch_size, global_batch_size, train_iters;
    /* sample-based training (Megatron's): --train-samples N trains N / global batch
       iterations, and the schedule's lengths are given in samples (0: not given)          */
    int64_t train_samples, lr_decay_samples, lr_warmup_samples, lr_wsd_decay_samples;
    /* clean exits (mg_trainer_exit_check): on SIGTERM (a switch), after a wall-clock budget,
       at a multiple of an iteration count (0: never)                                        */
    int exit_signal_handler;
    double exit_duration_in_mins;
    int64_t exit_interval;
    /* optimizer and schedule                                                                */
    double lr, min_lr, weight_decay, clip_grad, adam_beta1, adam_beta2, adam_eps;
    double decoupled_lr, decoupled_min_lr;   /* --decoupled-lr, --decoupled-min-lr          */
    int lr_decay_style;                  /* mg_lr_style                                        */
    int64_t lr_warmup_iters, lr_decay_iters;
    double lr_warmup_fraction;           /* given: warm-up = fraction × the decay iterations   */
    double lr_warmup_init;               /* the rate the warm-up starts from (default 0)       */
    int lr_wsd_decay_style;              /* mg_wsd_style: WSD's annealing                       */
    int64_t lr_wsd_decay_iters;          /* WSD's annealing iterations (required with WSD)     */
    int weight_decay_incr_style;         /* mg_wd_style                                        */
    double start_weight_decay, end_weight_decay; /* the increment's ends (not constant)       */
    double wd_incr_iters;                /* (no flag) the increment's length: 0 is
                                            --train-iters; the checkpoint's under
                                            --use-checkpoint-opt_param-scheduler              */
    /* on --load, a schedule that differs from the checkpoint's: the command line's
       (override) or the checkpoint's (use_checkpoint); neither: an error (Megatron-LM)      */
    int override_opt_param_scheduler, use_checkpoint_opt_param_scheduler;
    int finetune;                        /* --finetune: --load's weights only, from iteration 0 */
    int no_load_optim;                   /* --no-load-optim: --load's weights and progress, a
                                            fresh optimizer (and so a restarted schedule)    */
    int no_save_optim;                   /* --no-save-optim: checkpoints without the Adam
                                            moments (model.safetensors and state.json)     */
    int load_main_params_from_ckpt;      /* with it: the checkpoint's fp32 master weights, not
                                            the 16-bit ones widened (Megatron-LM's flag)     */
    /* logging, evaluation, checkpoints, data                                                */
    int64_t seed, log_interval, eval_interval, eval_iters, save_interval, sample_tokens;
    const char *save, *load, *split, *init_from, *log_jsonl, *export_hf;
    /* monitoring (docs/monitoring.md): TensorBoard, timers, extra statistics                */
    const char *tensorboard_dir;
    int64_t tensorboard_log_interval, timing_log_level;
    int timing_log_option;               /* mg_timing_option                                    */
    int log_timers_to_tensorboard, log_memory_to_tensorboard,
        log_validation_ppl_to_tensorboard, log_world_size_to_tensorboard, log_params_norm,
        log_num_zeros_in_grad, log_throughput;   /* switches                                   */
    /* text: the tokenizer (4c; NULL type: ids only) and a generation prompt                  */
    const char *tokenizer_type, *vocab_file, *merge_file, *tokenizer_model, *tiktoken_pattern,
               *prompt;
    /* the loss mask: --eod-mask-loss (a switch) leaves positions whose input is the
       end-of-document id (the tokenizer's, or --eod-token-id's; -1: none) out of the loss;
       --calculate-per-token-loss (a switch) then takes the mean over the global batch's kept
       positions instead of the mean of the microbatches' means                           */
    int eod_mask_loss, calculate_per_token_loss;
    int64_t eod_token_id;
    /* data: one blend split by --split, or one blend per part (mg_blend_parse's words)     */
    mg_str_list data_path, train_data_path, valid_data_path, test_data_path;
    int mock_data;                       /* --mock-data: Megatron's mock dataset, split by
                                            --split, instead of --data-path (mg_data.h)      */
    const char *data_args_path;          /* --data-args-path: --data-path's words in a file   */
    const char *per_split_data_args_path;/* --per-split-data-args-path: a JSON file of the
                                            train, valid and test blends                     */
    /* parallelism and regularisation                                                        */
    int64_t tensor_model_parallel_size;
    int64_t make_vocab_size_divisible_by; /* N: the vocabulary is padded to a multiple of N·t */
    int64_t context_parallel_size;       /* c: ranks that split every sequence (default 1)     */
    int sequence_parallel;               /* a switch: given = 1                                */
    int use_distributed_optimizer;       /* a switch: ZeRO-1 over the data-parallel group     */
    int64_t bucket_size;                 /* gradient-reduction bucket, elements (0: default)   */
    double hidden_dropout, attention_dropout;
    double init_method_std;              /* --init-method-std (default 0.02)                   */
    int init_method_xavier_uniform;      /* --init-method-xavier-uniform                       */
    /* memory: activation recomputation (mg_recompute, mg_recompute_method)                  */
    int recompute_granularity, recompute_method;
    int attention_backend;        /* --attention-backend: 0 auto, 1 flash, 2 unfused, 3 fused
                                     (= flash), 4 local (= unfused): Megatron-LM's names     */
    int64_t recompute_num_layers;
    int64_t classifier_chunk_rows;       /* the fused classifier's rows per chunk (0: auto)    */
    /* mixed precision (switches) and fp16 loss scaling                                      */
    int bf16, fp16;
    double loss_scale, initial_loss_scale, min_loss_scale;  /* loss_scale 0: dynamic        */
    int64_t loss_scale_window, hysteresis;
    mg_comm *comm;                       /* not a flag: the job's communicator (mg_comm_init),
                                            NULL for a single rank without MPI               */
    FILE *progress;                      /* not a flag: where a save or load longer than 3 s
                                            reports its progress (world rank 0; NULL: silent) */
    int data_order;                      /* mg_data_order                                      */
    int device;                          /* mg_device                                          */
    int enable_cuda_graph;               /* a switch: the optimizer step as one CUDA graph    */
    /* pipeline parallelism                                                                  */
    int64_t pipeline_model_parallel_size, num_layers_per_virtual_pipeline_stage,
            num_virtual_stages_per_pipeline_rank, microbatch_group_size_per_vp_stage;
    int pipeline_schedule;               /* mg_schedule_kind (default 1f1b; interleaved with K)  */
    const char *pipeline_schedule_file, *pipeline_trace;
    double comm_timeout;                 /* --comm-timeout: the program sets comm->timeout_s  */
    double distributed_timeout_minutes;  /* given: comm_timeout = 60 x it (Megatron-LM's)    */
    int help;
    unsigned char given[256];            /* given[i]: flag i of the table was on the line     */
    unsigned char compat_given[128];      /* row i of Megatron-LM's compatibility flags (a
                                            switch, or the value of a valued one) was given   */
} mg_train_args;

/* Defaults (Megatron-LM's where it has them). */
MGDEF void mg_train_args_default(mg_train_args *a);
/* Returns 0, or -1 with "what is wrong, what would be valid" in err. --help sets a->help.   */
MGDEF int mg_train_parse(mg_train_args *a, int argc, char **argv, char *err, size_t errlen);
MGDEF int mg_train_flag_given(const mg_train_args *a, const char *flag); /* "--lr" -> 0/1 */
/* The model that gpt_train's model flags describe (argv[1..argc): --num-layers,
   --hidden-size, the Llama family's …), checked as gpt_train checks it: each flag's range,
   then mg_gpt_config_check at t = 1. 0, or -1 with gpt_train's own message in err. The
   planner tool hands it to mg_plan_set_model_check, so it never plans a model gpt_train
   refuses.                                                                                 */
MGDEF int mg_train_model_check(int argc, char **argv, char *err, size_t errlen);
MGDEF void mg_train_print_help(FILE *out, const char *prog);
/* One line "PROG: warning: FLAG VALUE: why" on out for each Megatron-LM flag given that is
   accepted but does not apply literally (--transformer-impl transformer_engine, …), and for
   a GELU model without biases (Megatron computes the erf GELU there). Call it after
   mg_trainer_setup, on its args: the model's switches may come from a loaded config.      */
MGDEF void mg_train_print_compat_notes(const mg_train_args *a, FILE *out, const char *prog);
/* Flag i of the table ("--lr"; NULL past the last one) and the --help group it is listed
   under (*group: "learning rate"), for tools and tests that walk the command line.        */
MGDEF const char *mg_train_flag_name(int i, const char **group);

typedef struct mg_step_result {
    double loss;              /* mean over the global batch's target tokens (the ones the loss
                                 mask keeps, with --eod-mask-loss)                              */
    double grad_norm;         /* before clipping; nan when not finite                           */
    double params_norm;       /* --log-params-norm: ‖fp32 weights‖₂ after the update (else nan) */
    double num_zeros;         /* --log-num-zeros-in-grad: zero gradient entries (else nan)      */
    double lr;                /* the learning rate this iteration used                          */
    double lr2;               /* --decoupled-lr: the embedding and output layer's (else lr)     */
    double elapsed_ms;        /* wall time of the iteration                                     */
    int skipped;              /* 1: gradient not finite, update skipped                        */
    double loss_scale;        /* the loss scale this iteration used (1 without fp16)           */
    int has_values;           /* 1: the fields above were read back from the device; 0 (only
                                 with mg_trainer.defer_results, on an iteration that neither
                                 logs nor writes TensorBoard): they are nan, skipped 0       */
} mg_step_result;

/* A timer on the GPU: CUDA event pairs recorded on the stream of the work it times, around
   each timed region, kept until the log iteration adds up their cudaEventElapsedTime (the
   first wait for the device they cause). MG_TIMER_POOL pairs per timer; a timer that needs
   more in one log interval first resolves its older half.                                 */
#define MG_TIMER_POOL 32
typedef struct mg_timer_events {
    void *start[MG_TIMER_POOL], *stop[MG_TIMER_POOL];   /* cudaEvent_t, created at first use  */
    void *stream;                  /* cudaStream_t the open pair records on                    */
    int n;                         /* pairs recorded since the last resolution                */
} mg_timer_events;

/* --timing-log-option: how a timer's times on the ranks are printed (Megatron's choices). */
typedef enum { MG_TIMING_MAX = 0, MG_TIMING_MINMAX = 1, MG_TIMING_ALL = 2 } mg_timing_option;
/* Megatron-LM's timers that the trainer measures, in the order it prints them (names and
   levels in mg__timer_names): a timer runs when its level <= --timing-log-level.            */
enum { MG_TIMER_FORWARD_BACKWARD, MG_TIMER_FORWARD_COMPUTE, MG_TIMER_BACKWARD_COMPUTE,
       MG_TIMER_BATCH_GENERATOR,
       MG_TIMER_PIPE_COMM,   /* + kind − 1, kind 1 … 15: the pipeline's send/recv groups by kind
                                (mg_pipe_comm_kind_name: forward-send, backward-recv, …)    */
       MG_TIMER_LAYERNORM_GRADS = MG_TIMER_PIPE_COMM + MG_PIPE_COMM_KINDS - 1, MG_TIMER_EMBEDDING_GRADS,
       MG_TIMER_ALL_GRADS_SYNC, MG_TIMER_PARAMS_ALL_GATHER, MG_TIMER_CLIP_MAIN_GRAD,
       MG_TIMER_COUNT_ZEROS, MG_TIMER_INNER_STEP, MG_TIMER_OPTIMIZER, MG_N_TIMERS };

typedef struct mg_trainer {
    mg_train_args args;
    mg_gpt_config cfg;
    mg_ctx ctx;
    mg_gpt model;
    mg_adamw opt;
    mg_lr_schedule sched;
    mg_loss_scaler scaler;              /* fp16: the loss scale; else a constant 1 (the host's
                                           copy of the device's, mg_optim_state: read back with
                                           the step's results)                               */
    int defer_results;                  /* 1: mg_trainer_step reads its results back from the
                                           device only on iterations that log (--log-interval,
                                           the last one, --tensorboard-log-interval with
                                           --tensorboard-dir): no host synchronisation in the
                                           other steps. 0 (the default after setup): every
                                           step. gpt_train sets 1.                             */
    int n_micro;                        /* microbatches per iteration on this rank =
                                           global / (micro · d)                                */
    int dp_rank, dp_size;               /* data-parallel coordinate: this rank reads samples
                                           [dp_rank·G/d, (dp_rank+1)·G/d) of each global batch */
    int cp_rank, cp_size;               /* context-parallel coordinate: the c ranks of a context
                                           group read the same samples, each its T/c positions */
    mg_dp dp;                           /* the gradient reduction over the data group          */
    int writer;                         /* this rank writes files and logs (world rank 0)      */
    int has_valid, has_test;            /* has_valid: a validation set exists (else the
                                           evaluations are skipped; valid_note says why)       */
    char valid_note[MG_ERRLEN];         /* "validation skipped: …" or empty                    */
    mg_dataset *datasets;               /* every dataset the data flags name, opened          */
    int n_datasets;
    char **data_words;                  /* the words --data-args-path and
                                           --per-split-data-args-path read (args point here) */
    int n_data_words, cap_data_words;
    mg_blend train_data, valid_data, test_data;  /* samples of each part (mg_data.h, 2b)     */
    mg_tokenizer *tok;                  /* --tokenizer-type: vocabulary, EOD, text I/O (NULL) */
    int64_t eod_id;                     /* --eod-mask-loss: the end-of-document id it masks   */
    int32_t *batch;                     /* host [global_batch / d, T+1]: this rank's samples    */
    int64_t iteration;                  /* completed iterations                                 */
    int64_t consumed_samples, consumed_valid_samples;
    int64_t skipped_iters, nan_iters;
    int64_t loaded_iteration;           /* iteration of the checkpoint loaded (-1: none)       */
    int load_found;                     /* what --load found: 0 nothing (or no --load: a start
                                           from --init-from or the seed), 1 a checkpoint,
                                           2 Megatron's 'release' weights (iteration 0), 3 a
                                           checkpoint whose weights alone --finetune takes  */
    int64_t last_saved;                 /* iteration of the last checkpoint written (-1)       */
    int64_t last_validated;             /* iteration of the last validation (-1)              */
    int64_t first_iteration;            /* iteration the run started at (0, or the loaded one) */
    double start_ms;                    /* mg__now_ms() at setup: the run's elapsed time,
                                           --exit-duration-in-mins and the log line's ETA      */
    FILE *jsonl;
    /* pipeline parallelism (pp > 1): the schedules, their executors, the iteration's data     */
    mg_comm *comm;                      /* args.comm                                             */
    int pp, vp;                         /* pipeline ranks p, model chunks per rank v            */
    mg_schedule pipe_sched, pipe_eval_sched; /* training; forward-only for evaluation           */
    mg_pipe_exec pipe_exec, pipe_eval_exec;
    int has_pipe_exec, has_pipe_eval_exec;
    int *slot_mb;                       /* [v · n_slots]: microbatch held by each activation
                                           slot of each chunk, -1 = free                        */
    const int32_t *pipe_samples;        /* the microbatches the executor is running             */
    float pipe_dloss;                   /* d loss per token (0 when evaluating)                 */
    int pipe_forward_only;
    int pipe_backwards_left[MG_MAX_CHUNKS]; /* per chunk: backward actions (B, or W when the
                                           backward is split) still to run this iteration; the
                                           one that brings it to 0 is the chunk's last
                                           (final_backward: the gradient hook fires)          */
    /* the log interval being accumulated                                                       */
    double log_loss_sum, log_ms_sum;
    int64_t log_count, log_skipped, log_nan;
    /* timers: milliseconds accumulated over the log interval, and each one's start (host
       clock, CPU), or its CUDA event pairs not yet added to timer_ms (GPU)                  */
    double timer_ms[MG_N_TIMERS], timer_t0[MG_N_TIMERS];
    mg_timer_events timer_ev[MG_N_TIMERS];
    float *timer_dev;                   /* device scratch for gathering them [(1+world)·2·N]  */
    mg_tb_writer tb;                    /* --tensorboard-dir: the last rank's event file      */
    int has_tb;
    mg_graph opt_graph;                 /* --enable-cuda-graph: the optimizer step, captured at
                                           the first iteration (has_opt_graph)               */
    int has_opt_graph;
} mg_trainer;

/* Validates and builds. Order: architecture (flags, --load checkpoint, --init-from file,
   agreeing), sizes and combinations, data (opened, token ids < vocab, split, samplers),
   output paths, memory; then the device, model, optimizer; weights from --load, else
   --init-from, else the seed (a --load release: its weights, as --init-from would, from
   iteration 0). Returns 0, or -1 with one line in err (nothing written).               */
MGDEF int mg_trainer_setup(mg_trainer *tr, const mg_train_args *args, char *err, size_t errlen);
MGDEF void mg_trainer_free(mg_trainer *tr);
/* One iteration: the next global batch, forward/backward over its microbatches, clipping,
   AdamW at the scheduled learning rate.                                                    */
MGDEF mg_step_result mg_trainer_step(mg_trainer *tr);
/* Accumulates a step into the log interval; every --log-interval iterations prints
   Megatron's line to out (and a JSON object to --log-jsonl), then the timers of
   --timing-log-level; writes the TensorBoard scalars (--tensorboard-dir, the last rank).
   Every rank calls it: with timers, or with --tensorboard-dir on several ranks, the log
   iterations gather the timers / the last rank's figures over the world.                  */
MGDEF void mg_trainer_log(mg_trainer *tr, const mg_step_result *r, FILE *out);
/* Mean loss over --eval-iters global batches of the validation part (the next ones);
   prints Megatron's validation line to out when out is non-NULL (and a JSON object to
   --log-jsonl). Without a validation set (tr->has_valid 0: see tr->valid_note) it returns
   NAN and prints and writes nothing.                                                       */
MGDEF double mg_trainer_evaluate(mg_trainer *tr, FILE *out);
/* The validation once more after training, as Megatron-LM's pretrain runs it when the loop
   ends (even right after an interval's validation): the next --eval-iters batches, printed
   as " validation loss at iteration N on validation set | …", and to TensorBoard and
   --log-jsonl as mg_trainer_evaluate's unless that one just wrote this iteration's (one
   value a step). NAN without a validation set.                                             */
MGDEF double mg_trainer_evaluate_final(mg_trainer *tr, FILE *out);
/* Mean loss over the first --eval-iters global batches of the test part — --test-data-path,
   or --split's third share (NAN without one); Megatron's line " validation loss at iteration
   N on test set | …" to out.                                                              */
MGDEF double mg_trainer_test(mg_trainer *tr, FILE *out);
/* Megatron's clean exits, checked after every iteration by every rank: returns MG_EXIT_NONE
   (go on) or why to save and stop now — --exit-signal-handler's SIGTERM arrived (on any
   rank), --exit-duration-in-mins of wall time have passed since setup (on any rank), or the
   iteration is a multiple of --exit-interval. The first two are agreed on by an all-reduce
   (max) of each rank's code over the world, so every rank stops after the same iteration. */
enum { MG_EXIT_NONE = 0, MG_EXIT_INTERVAL = 1, MG_EXIT_DURATION = 2, MG_EXIT_SIGNAL = 3 };
MGDEF int mg_trainer_exit_check(mg_trainer *tr);
MGDEF const char *mg_exit_reason(int why);   /* "SIGTERM received", …                       */
/* Checkpoint DIR/iter_%07d/{model, optimizer, optimizer_sq}.safetensors + state.json built
   under a temporary name and renamed; then DIR/latest_checkpointed_iteration.txt, atomically.
   Tensors are stored GLOBAL, by name, so any later layout can load them. Collective: every
   rank writes the pieces it owns into the preallocated files (no gathering).              */
MGDEF int mg_trainer_save(mg_trainer *tr, const char *dir, char *err, size_t errlen);
/* Restores weights, optimizer state, iteration, consumed samples and counters from the
   latest checkpoint in dir. Returns 1 if one was loaded, 0 if dir holds none, -1 on error.
   A latest_checkpointed_iteration.txt holding "release" (Megatron-LM's released
   checkpoints) loads the weights of DIR/release (any file mg_weights_open reads) and
   nothing else, as Megatron starts a release at iteration 0 without optimizer state.     */
MGDEF int mg_trainer_load(mg_trainer *tr, const char *dir, char *err, size_t errlen);
/* --export-hf DIR: mg_gpt_export_hf of the trained fp32 weights (a sharded master is gathered
   over the data group first). Collective; world rank 0 writes.                            */
MGDEF int mg_trainer_export_hf(mg_trainer *tr, const char *dir, char *err, size_t errlen);
/* Generates n tokens after a prompt (--prompt encoded by the tokenizer; else the first tokens
   of the data, or token 0), sampling from the softmax with a generator keyed by --seed; with
   a tokenizer it stops early at its end-of-document token and prints the decoded text, else
   prints the tokens as text when V <= 256 (byte-level), or as token ids (out NULL: nothing
   printed). Every rank calls it. With a
   pipeline each token's forward runs stage by stage, the activations sent between the
   pipeline ranks; the last stage draws the token and broadcasts it over the pipeline group.
   With tensor parallelism the logits are gathered. Same weights: every layout draws the
   serial run's tokens (up to tensor parallelism's fp32 rounding of the logits).           */
MGDEF void mg_trainer_generate(mg_trainer *tr, int64_t n_tokens, FILE *out);
/* --pipeline-trace: writes the measured timeline of the last training iteration (mg_pipeline's
   trace format). Every rank calls it; the pipeline group of tensor rank 0 writes (the t ranks
   of a stage run the same actions), and the tensor group agrees on its verdict. 0, or -1
   with err.                                                                                 */
MGDEF int mg_trainer_write_pipeline_trace(mg_trainer *tr, const char *path, char *err,
                                          size_t errlen);
/* Draws a --log-jsonl file as an SVG picture: the training and validation loss, the learning
   rate, the grad norm and the throughput against the iteration, one panel each (the loss and
   the grad norm on a log scale when their values span 30x or more). A log a resumed run
   appended to is joined: points a later run logs again replace the earlier run's. 0, or -1
   with one line in err. gpt_train draws one at the end of a run (and on a clean exit);
   build/mg_plot on demand. Each panel's <g> carries its axes in data-* attributes (pixel box
   x0 x1 y0 y1, value ranges xmin xmax ymin ymax — of log10 v when data-log is 1), so a
   program can read the points back (tests/svg_points.py).                                 */
MGDEF int mg_plot_jsonl(const char *jsonl, const char *svg, char *err, size_t errlen);
/* The picture's default name: LOG.jsonl -> LOG.svg (any other name: LOG.svg appended).   */
MGDEF void mg_plot_default_path(char *out, size_t cap, const char *jsonl);

#ifdef __cplusplus
}
#endif
#endif /* MEGATRON_H */

/* =============================================================================================
   IMPLEMENTATION
   ========================================================================================== */
#if defined(MG_IMPLEMENTATION) && !defined(MG_IMPLEMENTATION_ELSEWHERE)
#ifndef MEGATRON_IMPLEMENTED
#define MEGATRON_IMPLEMENTED

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Line breaks in a message become blanks: one line, whatever a quoted file or path held. */
static void mg__one_line(char *text) {
    for (; *text; text++)
        if (*text == '\n' || *text == '\r') *text = ' ';
}

/* One error line into err (what is wrong, what would be valid; a long one keeps its two
   ends: mg__vline); returns -1.                                                             */
static int mg__err(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mg__vline(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A path built by snprintf into out[cap]: 0, or -1 when it does not fit (out then holds no
   path: a cut one would name another file).                                               */
static int mg__path(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < cap) return 0;
    if (cap) out[0] = 0;
    return -1;
}

/* =============================================================================================
   1. Configuration
   ========================================================================================== */
MGDEF int mg_gpt_pad_vocab(int vocab_size, int divisor, int tp_size) {
    int64_t mult = (int64_t)(divisor > 0 ? divisor : 1) * (tp_size > 0 ? tp_size : 1);
    return (int)((vocab_size + mult - 1) / mult * mult);
}

MGDEF int mg_gpt_config_check(const mg_gpt_config *c, int tp_size, char *err, size_t errlen) {
    if (c->n_layer < 1)
        return mg__err(err, errlen, "--num-layers %d: must be at least 1", c->n_layer);
    if (c->hidden < 1)
        return mg__err(err, errlen, "--hidden-size %d: must be at least 1", c->hidden);
    if (c->n_head < 1)
        return mg__err(err, errlen, "--num-attention-heads %d: must be at least 1", c->n_head);
    if (c->hidden % c->n_head && c->kv_channels <= 0)
        return mg__err(err, errlen, "--hidden-size %d is not divisible by "
                       "--num-attention-heads %d (pick heads that divide the hidden size, or "
                       "give the head dimension with --kv-channels)", c->hidden, c->n_head);
    if (c->hidden % tp_size)
        return mg__err(err, errlen, "--hidden-size %d is not divisible by "
                       "--tensor-model-parallel-size %d (each rank holds C/t columns)",
                       c->hidden, tp_size);
    if (c->n_head % tp_size)
        return mg__err(err, errlen, "--num-attention-heads %d is not divisible by "
                       "--tensor-model-parallel-size %d (heads are divided across the ranks)",
                       c->n_head, tp_size);
    if (c->n_query_groups < 0 || (c->n_query_groups > 0 && c->n_head % c->n_query_groups))
        return mg__err(err, errlen, "--num-query-groups %d does not divide "
                       "--num-attention-heads %d (each key/value group serves the same number "
                       "of query heads; 1 is multi-query attention)", c->n_query_groups,
                       c->n_head);
    if (c->n_query_groups > 0 && c->n_query_groups % tp_size)
        return mg__err(err, errlen, "--num-query-groups %d is not divisible by "
                       "--tensor-model-parallel-size %d (a rank holds whole key/value groups, "
                       "as in Megatron-LM)", c->n_query_groups, tp_size);
    if (c->kv_channels < 0 || c->ffn_hidden < 0)
        return mg__err(err, errlen, "--kv-channels %d / --ffn-hidden-size %d: must be positive",
                       c->kv_channels, c->ffn_hidden);
    if (c->squared_relu && c->swiglu)   /* also when one comes from a checkpoint */
        return mg__err(err, errlen, "--squared-relu and --swiglu exclude each other (each is "
                       "the MLP's activation: pick one)");
    {
        mg_layer_config k = mg_gpt_layer_config(c, 1, MG_F32);
        if (k.ffn_hidden < 1 || k.ffn_hidden % tp_size)
            return mg__err(err, errlen, "the MLP width %d (--ffn-hidden-size%s) is not a "
                           "positive multiple of --tensor-model-parallel-size %d", k.ffn_hidden,
                           c->ffn_hidden > 0 ? "" : ", SwiGLU's default 2/3·4h rounded to 64",
                           tp_size);
        if (c->position_embedding == MG_POS_ROPE && k.rot_dim < 2)
            return mg__err(err, errlen, "rotary positions rotate pairs of dims: head "
                           "dimension %d × --rotary-percent %g leaves %d (need at least 2)",
                           k.head_dim, c->rotary_percent > 0 ? c->rotary_percent : 1.0,
                           k.rot_dim);
        if (c->position_embedding == MG_POS_ROPE && k.head_dim % 2)
            return mg__err(err, errlen, "rotary positions need an even head dimension (%d: "
                           "--hidden-size / --num-attention-heads or --kv-channels)",
                           k.head_dim);
        if (!(k.norm.eps > 0 && k.norm.eps < 1))
            return mg__err(err, errlen, "--norm-epsilon %g: must be in (0, 1)", k.norm.eps);
        if (!(k.rope_freq.base > 1) || (c->rotary_percent != 0 && !(c->rotary_percent > 0 &&
                                                                   c->rotary_percent <= 1)))
            return mg__err(err, errlen, "--rotary-base %g must be > 1 and --rotary-percent %g "
                           "in (0, 1]", k.rope_freq.base, c->rotary_percent);
        if (c->use_rope_scaling && !(k.rope_freq.high_freq_factor > k.rope_freq.low_freq_factor))
            return mg__err(err, errlen, "Llama 3 rope scaling needs high_freq_factor %g > "
                           "low_freq_factor %g", k.rope_freq.high_freq_factor,
                           k.rope_freq.low_freq_factor);
        if (c->rotary_interpolation != 0 && !(c->rotary_interpolation >= 1))
            return mg__err(err, errlen, "--rotary-seq-len-interpolation-factor %g: must be at "
                           "least 1 (rotary positions are divided by it)",
                           c->rotary_interpolation);
        if (c->rotary_interpolation > 1 && c->position_embedding != MG_POS_ROPE)
            return mg__err(err, errlen, "--rotary-seq-len-interpolation-factor %g applies to "
                           "rotary positions (--position-embedding-type rope)",
                           c->rotary_interpolation);
    }
    if (c->seq_len < 1)
        return mg__err(err, errlen, "--seq-length %d: must be at least 1", c->seq_len);
    if (c->max_pos < c->seq_len)
        return mg__err(err, errlen, "--max-position-embeddings %d is smaller than --seq-length "
                       "%d (it must be >= the sequence length)", c->max_pos, c->seq_len);
    if (c->vocab_size < 2 || c->vocab_size > 1 << 30)
        return mg__err(err, errlen, "--vocab-size %d: must be in 2 … %d", c->vocab_size, 1 << 30);
    if (c->padded_vocab < c->vocab_size || c->padded_vocab % tp_size)
        return mg__err(err, errlen, "padded vocabulary %d: must be >= %d and a multiple of %d",
                       c->padded_vocab, c->vocab_size, tp_size);
    /* Sizes are ints in the GEMM seam: every dimension product that becomes one must fit. */
    if ((int64_t)c->hidden * 4 > INT32_MAX / 4)
        return mg__err(err, errlen, "--hidden-size %d: at most %d (sizes in the GEMM seam are "
                       "32-bit: 16 x hidden must fit)", c->hidden, INT32_MAX / 16);
    if ((int64_t)c->seq_len * c->seq_len > INT32_MAX)
        return mg__err(err, errlen, "--seq-length %d: at most 46340 (sizes in the GEMM seam are "
                       "32-bit: T x T must fit)", c->seq_len);
    if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1))
        return mg__err(err, errlen, "--hidden-dropout %g: must be in [0, 1)", c->hidden_dropout);
    if (!(c->attention_dropout >= 0 && c->attention_dropout < 1))
        return mg__err(err, errlen, "--attention-dropout %g: must be in [0, 1)",
                       c->attention_dropout);
    return 0;
}

MGDEF int mg_gpt_is_gpt2(const mg_gpt_config *c) {
    return !c->normalization && !c->swiglu && !c->ffn_hidden && !c->position_embedding &&
           !c->n_query_groups && !c->kv_channels && !c->untie_embeddings &&
           !c->disable_bias_linear && !c->add_qkv_bias;
}

MGDEF mg_layer_config mg_gpt_layer_config(const mg_gpt_config *c, int micro_batch,
                                          mg_dtype dtype) {
    mg_layer_config k;
    memset(&k, 0, sizeof k);
    k.hidden = c->hidden;
    k.n_head = c->n_head;
    k.n_group = c->n_query_groups > 0 ? c->n_query_groups : c->n_head;
    k.head_dim = c->kv_channels > 0 ? c->kv_channels : c->n_head > 0 ? c->hidden / c->n_head : 0;
    /* Megatron-LM: 4h, or with SwiGLU 2/3 of it (the gate is a third matrix) rounded down to a
       multiple of 64 */
    k.ffn_hidden = c->ffn_hidden > 0 ? c->ffn_hidden
                   : c->swiglu       ? (int)((4.0 * c->hidden * 2.0 / 3.0) / 64.0) * 64
                                     : 4 * c->hidden;
    k.seq_len = c->seq_len;
    k.micro_batch = micro_batch;
    k.dtype = dtype;
    k.norm.rms = c->normalization == MG_NORM_RMSNORM;
    k.norm.eps = c->norm_epsilon > 0 ? c->norm_epsilon : 1e-5f;
    k.norm.zero_centered = c->layernorm_1p;
    k.swiglu = c->swiglu;
    k.bias = !c->disable_bias_linear;
    k.qkv_bias = c->add_qkv_bias;
    k.rope = c->position_embedding == MG_POS_ROPE;
    /* Megatron-LM: int(kv_channels · rotary_percent); an odd count rotates one dim fewer */
    k.rot_dim = (int)(k.head_dim * (c->rotary_percent > 0 ? c->rotary_percent : 1.0f)) / 2 * 2;
    k.rope_freq.base = c->rotary_base > 0 ? c->rotary_base : 10000.0f;
    k.rope_freq.llama3 = c->use_rope_scaling;
    k.rope_freq.linear_factor = c->rotary_interpolation > 0 ? c->rotary_interpolation : 1.0f;
    k.act = c->swiglu ? MG_ACT_GELU   /* unused: SwiGLU has its own activation */
            : c->squared_relu ? MG_ACT_RELU2 : c->gelu_erf ? MG_ACT_GELU_ERF : MG_ACT_GELU;
    k.rope_freq.factor = c->rope_scaling_factor > 0 ? c->rope_scaling_factor : 8.0f;
    k.rope_freq.low_freq_factor = c->rope_low_freq_factor > 0 ? c->rope_low_freq_factor : 1.0f;
    k.rope_freq.high_freq_factor = c->rope_high_freq_factor > 0 ? c->rope_high_freq_factor : 4.0f;
    k.rope_freq.original_max_pos = c->rope_original_max_pos > 0 ? c->rope_original_max_pos : 8192;
    k.hidden_dropout = c->hidden_dropout;
    k.attention_dropout = c->attention_dropout;
    k.dropout_seed = c->dropout_seed;
    return k;
}

static int mg__build_params(const mg_gpt_config *c, const mg_gpt_layout *L, mg_param_desc *out,
                            int64_t *n_elems);   /* section 2 */

/* Every tensor of the whole model counted once, from the descriptors themselves. */
MGDEF int64_t mg_gpt_num_params(const mg_gpt_config *c) {
    mg_gpt_layout whole = mg_gpt_layout_single(c, 1, 1, 1);
    int n = mg__build_params(c, &whole, NULL, NULL), i;
    int64_t total = 0;
    mg_param_desc *d = (mg_param_desc *)MG_MALLOC(sizeof(mg_param_desc) * (size_t)n);
    MG_ASSERT(d, "out of host memory");
    mg__build_params(c, &whole, d, NULL);
    for (i = 0; i < n; i++) total += d[i].numel;
    MG_FREE(d);
    return total;
}

/* Megatron-LM's num_floating_point_operations: per layer, 12·s·h²·[(1 + g/a + s/h)·(q/h) +
   (F/h)·(3/2 with SwiGLU)] — the QKV, attention and projection GEMMs (q = a·hd query width,
   g key/value groups), the MLP's — plus the logits' 12·s·h²·Vp/(2·l·h) per layer, all times
   3 (forward, backward input and weight) and 2 FLOPs per multiply-add. With GPT-2's defaults
   this is 72·B·s·l·h²·(1 + s/(6h) + Vp/(12·l·h)), eq. 3 of Narayanan et al. 2021 without the
   recomputed forward.                                                                       */
MGDEF double mg_gpt_flops_per_iteration(const mg_gpt_config *c, int64_t samples) {
    mg_layer_config k = mg_gpt_layer_config(c, 1, MG_F32);
    double s = c->seq_len, l = c->n_layer, h = c->hidden, V = c->padded_vocab;
    double q = (double)k.n_head * k.head_dim, g = k.n_group, a = k.n_head;
    double attn = (1.0 + g / a + s / h) * (q / h), mlp = k.ffn_hidden / h * (k.swiglu ? 1.5 : 1.0);
    return 12.0 * (double)samples * s * l * h * h * (attn + mlp + V / (2.0 * l * h));
}

MGDEF double mg_gpt_flops_recomputed(const mg_gpt_config *c, const mg_gpt_layout *L,
                                     int64_t samples) {
    mg_layer_config k = mg_gpt_layer_config(c, 1, MG_F32);
    double s = c->seq_len, h = c->hidden, B = (double)samples;
    double q = (double)k.n_head * k.head_dim, kv = (double)k.n_group * k.head_dim;
    double F = k.ffn_hidden * (k.swiglu ? 3.0 : 2.0);   /* the MLP's matrices, h×F each */
    /* one layer's forward: QKV, scores and P·V (the core), projection, MLP */
    double core = 4.0 * B * s * s * q, layer = 2.0 * B * s * h * (q + 2 * kv + q + F) + core;
    int ch, i, first = 0, last = -1, held = 0, full = 0;
    /* selective reruns the core of the unfused attention only: the tiled backward
       recomputes its scores with or without it (none and selective do the same work) */
    if (L->recompute_granularity == MG_RECOMPUTE_SELECTIVE)
        return L->attention_backend == MG_ATTN_UNFUSED ? core * c->n_layer : 0;
    if (L->recompute_granularity != MG_RECOMPUTE_FULL) return 0;
    for (ch = 0; ch < L->n_chunks; ch++) {
        int nl = L->chunks[ch].layer_end - L->chunks[ch].layer_begin;
        held += nl;
        for (i = 0; i < nl; i++)
            full += mg_gpt_recompute_kind(L, nl, i, &first, &last) == MG_RECOMPUTE_FULL;
    }
    return held ? layer * c->n_layer * (double)full / held * (L->split_backward ? 2 : 1) : 0;
}

MGDEF mg_gpt_layout mg_gpt_layout_single(const mg_gpt_config *cfg, int micro_batch,
                                         int max_microbatches, int n_chunks) {
    mg_gpt_layout L;
    int i;
    memset(&L, 0, sizeof L);
    L.tp_rank = 0;
    L.tp_size = 1;
    L.pp_rank = 0;
    L.pp_size = 1;
    L.micro_batch = micro_batch;
    L.dp_size = 1;
    L.n_slots = 1;
    L.max_microbatches = max_microbatches;
    if (n_chunks < 1) n_chunks = 1;
    if (n_chunks > MG_MAX_CHUNKS) n_chunks = MG_MAX_CHUNKS;
    L.n_chunks = n_chunks;
    for (i = 0; i < n_chunks; i++) {
        L.chunks[i].layer_begin = (int)((int64_t)cfg->n_layer * i / n_chunks);
        L.chunks[i].layer_end = (int)((int64_t)cfg->n_layer * (i + 1) / n_chunks);
        L.chunks[i].has_embedding = i == 0;
        L.chunks[i].has_head = i == n_chunks - 1;
    }
    return L;
}

MGDEF void mg_gpt_layout_tp(mg_gpt_layout *L, mg_comm *comm, int sequence_parallel) {
    L->comm = comm;
    L->tp_rank = comm->tensor.rank;
    L->tp_size = comm->tensor.size;
    L->sequence_parallel = sequence_parallel;
}
MGDEF void mg_gpt_layout_cp(mg_gpt_layout *L, mg_comm *comm) {
    L->comm = comm;
    L->cp_rank = comm->context.size > 0 ? comm->context.rank : 0;
    L->cp_size = comm->context.size > 0 ? comm->context.size : 1;
}
MGDEF int mg_gpt_local_seq(const mg_gpt_config *cfg, const mg_gpt_layout *L) {
    return L->cp_size > 1 ? cfg->seq_len / L->cp_size : cfg->seq_len;
}

MGDEF mg_gpt_layout mg_gpt_layout_pipeline(const mg_gpt_config *cfg, int micro_batch,
                                           int max_microbatches, int pp_rank, int pp_size, int v,
                                           int n_slots, int split_backward) {
    mg_gpt_layout L = mg_gpt_layout_single(cfg, micro_batch, max_microbatches, 1);
    int c, S = pp_size * v, per = S > 0 ? cfg->n_layer / S : 0;
    L.pp_rank = pp_rank;
    L.pp_size = pp_size;
    L.n_slots = n_slots;
    L.split_backward = split_backward;
    L.n_chunks = v < 1 ? 1 : v > MG_MAX_CHUNKS ? MG_MAX_CHUNKS : v;
    for (c = 0; c < L.n_chunks; c++) {
        int stage = c * pp_size + pp_rank;       /* virtual stage of this rank's chunk c */
        L.chunks[c].layer_begin = stage * per;
        L.chunks[c].layer_end = (stage + 1) * per;
        L.chunks[c].has_embedding = stage == 0;
        L.chunks[c].has_head = stage == S - 1;
    }
    return L;
}

static int mg__layout_check(const mg_gpt_config *cfg, const mg_gpt_layout *L, char *err,
                            size_t errlen) {
    int i;
    if (L->tp_size < 1 || L->tp_rank < 0 || L->tp_rank >= L->tp_size)
        return mg__err(err, errlen, "tensor-parallel rank %d of %d", L->tp_rank, L->tp_size);
    if (L->comm && (L->comm->tensor.size != L->tp_size || L->comm->tensor.rank != L->tp_rank))
        return mg__err(err, errlen, "layout: tensor-parallel rank %d of %d, but the tensor "
                       "group has rank %d of %d", L->tp_rank, L->tp_size, L->comm->tensor.rank,
                       L->comm->tensor.size);
    if (L->cp_size > 1 && L->attention_backend == MG_ATTN_UNFUSED)
        return mg__err(err, errlen, "--attention-backend unfused with --context-parallel-size "
                       "%d: the ring merges tiled attention blocks (use flash or auto)",
                       L->cp_size);
    if (L->cp_size > 1 && cfg->seq_len % (2 * L->cp_size))
        return mg__err(err, errlen, "--seq-length %d is not divisible by 2 x "
                       "--context-parallel-size %d (the sequence is cut into 2c equal chunks; "
                       "use a multiple of %d)", cfg->seq_len, L->cp_size, 2 * L->cp_size);
    if (L->cp_size > 1 && L->comm && (L->comm->context.size != L->cp_size ||
                                      L->comm->context.rank != L->cp_rank))
        return mg__err(err, errlen, "layout: context-parallel rank %d of %d, but the context "
                       "group has rank %d of %d", L->cp_rank, L->cp_size, L->comm->context.rank,
                       L->comm->context.size);
    if (L->sequence_parallel && L->tp_size > 1 && mg_gpt_local_seq(cfg, L) % L->tp_size)
        return mg__err(err, errlen, "--seq-length %d%s is not divisible by "
                       "--tensor-model-parallel-size %d (--sequence-parallel gives each rank "
                       "T/t positions)", cfg->seq_len, L->cp_size > 1 ? " / c" : "",
                       L->tp_size);
    if (L->pp_size < 1 || L->pp_rank < 0 || L->pp_rank >= L->pp_size)
        return mg__err(err, errlen, "pipeline rank %d of %d", L->pp_rank, L->pp_size);
    if (L->micro_batch < 1)
        return mg__err(err, errlen, "--micro-batch-size %d: must be at least 1", L->micro_batch);
    if (L->n_slots < 1 || L->max_microbatches < 1 || L->n_chunks < 1 ||
        L->n_chunks > MG_MAX_CHUNKS)
        return mg__err(err, errlen, "layout: %d slots, %d microbatches, %d chunks", L->n_slots,
                       L->max_microbatches, L->n_chunks);
    if ((int64_t)L->micro_batch * cfg->seq_len * 4 * cfg->hidden > INT32_MAX)
        return mg__err(err, errlen, "--micro-batch-size %d × --seq-length %d × 4 × "
                       "--hidden-size %d = %lld elements of the MLP's activations, more than "
                       "the %d a 32-bit GEMM size holds (a smaller --micro-batch-size, "
                       "--seq-length or --hidden-size fits)", L->micro_batch, cfg->seq_len,
                       cfg->hidden, (long long)L->micro_batch * cfg->seq_len * 4 * cfg->hidden,
                       INT32_MAX);
    if ((int64_t)L->micro_batch * cfg->seq_len * (cfg->padded_vocab / L->tp_size) > INT32_MAX)
        return mg__err(err, errlen, "--micro-batch-size %d × --seq-length %d × %d vocabulary "
                       "rows per rank (--vocab-size %d padded to %d, / "
                       "--tensor-model-parallel-size %d) = %lld logits, more than the %d a "
                       "32-bit GEMM size holds (a smaller --micro-batch-size or --seq-length, "
                       "or a larger --tensor-model-parallel-size, which divides the vocabulary, "
                       "fits)", L->micro_batch, cfg->seq_len, cfg->padded_vocab / L->tp_size,
                       cfg->vocab_size, cfg->padded_vocab, L->tp_size,
                       (long long)L->micro_batch * cfg->seq_len *
                           (cfg->padded_vocab / L->tp_size), INT32_MAX);
    if (L->recompute_granularity < MG_RECOMPUTE_NONE ||
        L->recompute_granularity > MG_RECOMPUTE_FULL ||
        L->recompute_method < MG_RECOMPUTE_UNIFORM || L->recompute_method > MG_RECOMPUTE_BLOCK)
        return mg__err(err, errlen, "layout: recompute granularity %d / method %d (expected "
                       "none, selective or full / uniform or block)", L->recompute_granularity,
                       L->recompute_method);
    if (L->dtype != MG_F32 && L->dtype != MG_BF16 && L->dtype != MG_F16)
        return mg__err(err, errlen, "layout: dtype %d (expected fp32, bf16 or fp16)", L->dtype);
    if (L->shard_master && (L->dtype == MG_F32 || L->dp_size < 2))
        return mg__err(err, errlen, "layout: a sharded master needs 16-bit weights and at least "
                       "2 data-parallel replicas (dtype %d, dp_size %d)", L->dtype, L->dp_size);
    if (L->recompute_num_layers < 0 || L->recompute_num_layers > cfg->n_layer)
        return mg__err(err, errlen, "--recompute-num-layers %d: must be 1 … --num-layers %d",
                       L->recompute_num_layers, cfg->n_layer);
    if (L->classifier_chunk_rows < 0)
        return mg__err(err, errlen, "--classifier-chunk-rows %d: must be >= 0 (0: automatic)",
                       L->classifier_chunk_rows);
    for (i = 0; i < L->n_chunks; i++) {
        const mg_gpt_chunk *c = &L->chunks[i];
        if (c->layer_begin < 0 || c->layer_end < c->layer_begin || c->layer_end > cfg->n_layer)
            return mg__err(err, errlen, "chunk %d: layers [%d, %d) outside 0 … %d", i,
                           c->layer_begin, c->layer_end, cfg->n_layer);
        if (i > 0 && c->layer_begin < L->chunks[i - 1].layer_end)
            return mg__err(err, errlen, "chunk %d overlaps chunk %d", i, i - 1);
    }
    return mg_gpt_config_check(cfg, L->tp_size, err, errlen);
}

/* =============================================================================================
   2. Parameters
   ========================================================================================== */

/* The naming tables: one row per tensor kind, the single source of truth for names in our
   checkpoints (Megatron-Core's), in Hugging Face GPT-2 files, and the llm.c checkpoint order
   (its parameter arrays are the kinds' llm.c index order: wte, wpe, then the layer tensors
   stacked over layers, then lnf). hf_conv1d: Hugging Face stores the weight (in, out).
   llama: the name in a Hugging Face Llama-family file (LlamaForCausalLM, MistralForCausalLM,
   Qwen2ForCausalLM), after "model.layers.{i}." for layer tensors; the fused QKV is three
   tensors there, "%s" standing for q, k and v (mg__qkv_ext_row orders their rows).        */
typedef struct mg__tensor_name {
    const char *mg;        /* after "decoder.layers.{i}." for layer tensors                    */
    const char *hf;        /* after "h.{i}." for layer tensors                                  */
    int llmc_index;        /* position among llm.c's 16 parameter arrays                        */
    int hf_conv1d;
    const char *llama;     /* "" where the Llama family has no such tensor                      */
} mg__tensor_name;
static const mg__tensor_name mg__names[MG_TENSOR_KINDS] = {
    {"input_layernorm.weight", "ln_1.weight", 2, 0, "input_layernorm.weight"},
    {"input_layernorm.bias", "ln_1.bias", 3, 0, ""},
    {"self_attention.linear_qkv.weight", "attn.c_attn.weight", 4, 1, "self_attn.%s_proj.weight"},
    {"self_attention.linear_qkv.bias", "attn.c_attn.bias", 5, 0, "self_attn.%s_proj.bias"},
    {"self_attention.linear_proj.weight", "attn.c_proj.weight", 6, 1, "self_attn.o_proj.weight"},
    {"self_attention.linear_proj.bias", "attn.c_proj.bias", 7, 0, "self_attn.o_proj.bias"},
    {"pre_mlp_layernorm.weight", "ln_2.weight", 8, 0, "post_attention_layernorm.weight"},
    {"pre_mlp_layernorm.bias", "ln_2.bias", 9, 0, ""},
    {"mlp.linear_fc1.weight", "mlp.c_fc.weight", 10, 1, "mlp.up_proj.weight"},
    {"mlp.linear_fc1.bias", "mlp.c_fc.bias", 11, 0, "mlp.up_proj.bias"},
    {"mlp.linear_fc2.weight", "mlp.c_proj.weight", 12, 1, "mlp.down_proj.weight"},
    {"mlp.linear_fc2.bias", "mlp.c_proj.bias", 13, 0, "mlp.down_proj.bias"},
    /* SwiGLU's gate: no GPT-2 counterpart */
    {"mlp.linear_fc1_gate.weight", "", -1, 0, "mlp.gate_proj.weight"},
    {"mlp.linear_fc1_gate.bias", "", -1, 0, "mlp.gate_proj.bias"},
    {"embedding.word_embeddings.weight", "wte.weight", 0, 0, "model.embed_tokens.weight"},
    {"embedding.position_embeddings.weight", "wpe.weight", 1, 0, ""},
    {"decoder.final_layernorm.weight", "ln_f.weight", 14, 0, "model.norm.weight"},
    {"decoder.final_layernorm.bias", "ln_f.bias", 15, 0, ""},
    {"output_layer.weight", "", -1, 0, "lm_head.weight"},   /* untied output layer */
};

/* Global shape, split kind and initialisation of a tensor kind. A layer's shapes and splits
   are mg_transformer.h's (mg_layer_tensor_shape); the vocabulary-sized tensors split by rows. */
static void mg__describe(mg_param_desc *d, const mg_gpt_config *c, int kind, int layer) {
    int64_t C = c->hidden;
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->layer = kind < MG_LAYER_TENSORS ? layer : -1;
    if (kind < MG_LAYER_TENSORS)
        snprintf(d->name, sizeof d->name, "decoder.layers.%d.%s", layer, mg__names[kind].mg);
    else
        snprintf(d->name, sizeof d->name, "%s", mg__names[kind].mg);
    d->split = MG_TP_REPLICATED;
    if (kind < MG_LAYER_TENSORS) {
        mg_layer_config lc = mg_gpt_layer_config(c, 1, MG_F32);
        int split = mg_layer_tensor_shape(&lc, kind, d->shape);
        d->split = split == 1 ? MG_TP_COLUMN : split == 2 ? MG_TP_ROW : MG_TP_REPLICATED;
    } else if (kind == MG_WTE || kind == MG_OUT_W) {
        d->shape[0] = c->padded_vocab; d->shape[1] = C; d->split = MG_TP_VOCAB;
    } else if (kind == MG_WPE) {
        d->shape[0] = c->max_pos; d->shape[1] = C;
    } else {
        d->shape[0] = C;   /* final norm */
    }
    d->ndim = d->shape[1] ? 2 : 1;
    if (d->ndim == 2) {
        double sigma = c->init_method_std > 0 ? c->init_method_std : 0.02;
        d->init = MG_INIT_NORMAL;
        d->init_std = (float)sigma;
        d->weight_decay = 1;
        if (kind == MG_PROJ_W || kind == MG_FC2_W)  /* the scaled residual projections */
            d->init_std = (float)(sigma / sqrt(2.0 * c->n_layer));
        if (c->init_xavier) {   /* Glorot: U(−a, a), a = √(6 / (fan_in + fan_out)), every weight
                                   (Megatron's scaled init is xavier too); the vocabulary's
                                   fan_out is V, not the padded rows (which depend on t) */
            double fan_out = kind == MG_WTE || kind == MG_OUT_W ? (double)c->vocab_size
                                                                : (double)d->shape[0];
            d->init = MG_INIT_UNIFORM;
            d->init_std = (float)sqrt(6.0 / ((double)d->shape[1] + fan_out));
        }
    } else {
        /* norm weights start at 1 (zero-centred ones at 0: the scale 1 + 0), the rest at 0 */
        d->init = (kind == MG_LN1_W || kind == MG_LN2_W || kind == MG_LNF_W) && !c->layernorm_1p
                  ? MG_INIT_ONE : MG_INIT_ZERO;
    }
}

/* The vocabulary-sized tensors (word embedding, untied output layer): Vp rows, of which the
   V real ones are stored in files and initialised; the padding rows stay zero.            */
static int mg__vocab_rows(int kind) { return kind == MG_WTE || kind == MG_OUT_W; }

/* This rank's shard of a described tensor: split dimension divided by tp_size. */
static void mg__shard(mg_param_desc *d, int tp_rank, int tp_size) {
    d->local_shape[0] = d->shape[0];
    d->local_shape[1] = d->ndim == 2 ? d->shape[1] : 1;
    d->row0 = d->col0 = 0;
    if (d->split == MG_TP_COLUMN || d->split == MG_TP_VOCAB) {
        d->local_shape[0] = d->shape[0] / tp_size;
        d->row0 = d->local_shape[0] * tp_rank;
    } else if (d->split == MG_TP_ROW) {
        d->local_shape[1] = d->shape[1] / tp_size;
        d->col0 = d->local_shape[1] * tp_rank;
    }
    d->numel = d->local_shape[0] * d->local_shape[1];
}

/* Appends the descriptor of (kind, layer) at flat offset *off (each tensor 64-aligned). */
static void mg__add_param(const mg_gpt_config *c, const mg_gpt_layout *L, mg_param_desc *out,
                          int *n, int64_t *off, int kind, int layer) {
    mg_param_desc d;
    mg__describe(&d, c, kind, layer);
    mg__shard(&d, L->tp_rank, L->tp_size);
    d.offset = *off;
    *off += (d.numel + 63) / 64 * 64;
    if (out) out[*n] = d;
    (*n)++;
}

/* The descriptor list of this rank in flat-buffer order (out NULL: just count). */
static int mg__build_params(const mg_gpt_config *c, const mg_gpt_layout *L, mg_param_desc *out,
                            int64_t *n_elems) {
    int has_emb = 0, has_head = 0, n = 0, ch, l, k;
    int64_t off = 0;
    mg_layer_config lc = mg_gpt_layer_config(c, 1, MG_F32);
    for (ch = 0; ch < L->n_chunks; ch++) {
        has_emb |= L->chunks[ch].has_embedding;
        has_head |= L->chunks[ch].has_head;
    }
    /* the word embedding, also the output layer's weight when tied */
    if (has_emb || (has_head && !c->untie_embeddings))
        mg__add_param(c, L, out, &n, &off, MG_WTE, -1);
    if (has_emb && c->position_embedding == MG_POS_LEARNED)
        mg__add_param(c, L, out, &n, &off, MG_WPE, -1);
    for (ch = 0; ch < L->n_chunks; ch++)
        for (l = L->chunks[ch].layer_begin; l < L->chunks[ch].layer_end; l++)
            for (k = 0; k < MG_LAYER_TENSORS; k++)
                if (mg_layer_has_tensor(&lc, k)) mg__add_param(c, L, out, &n, &off, k, l);
    if (has_head) {
        mg__add_param(c, L, out, &n, &off, MG_LNF_W, -1);
        if (c->normalization != MG_NORM_RMSNORM) mg__add_param(c, L, out, &n, &off, MG_LNF_B, -1);
        if (c->untie_embeddings) mg__add_param(c, L, out, &n, &off, MG_OUT_W, -1);
    }
    if (n_elems) {   /* padded for the data-parallel buckets: a multiple of 64·d */
        int64_t unit = 64 * (int64_t)(L->dp_size > 1 ? L->dp_size : 1);
        *n_elems = (off + unit - 1) / unit * unit;
    }
    return n;
}

/* The init key of a tensor: seed mixed with a hash of its name, so the stream of each tensor
   does not depend on which other tensors a rank holds (FNV-1a, then splitmix64's finaliser). */
static uint64_t mg__param_key(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull, z;
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 1099511628211ull;
    z = h ^ (seed + 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

MGDEF void mg_gpt_init_weights(mg_gpt *m, uint64_t seed) {
    int i;
    float *host = (float *)MG_MALLOC((size_t)m->n_elems * sizeof(float));
    MG_ASSERT(host, "out of host memory (%lld floats)", (long long)m->n_elems);
    memset(host, 0, (size_t)m->n_elems * sizeof(float));
    for (i = 0; i < m->n_params; i++) {
        const mg_param_desc *d = &m->params[i];
        float *dst = host + d->offset;
        uint64_t key = mg__param_key(seed, d->name);
        int64_t r, rows = d->local_shape[0], cols = d->local_shape[1], gcols;
        gcols = d->ndim == 2 ? d->shape[1] : 1;
        if (d->init == MG_INIT_ONE) {
            for (r = 0; r < d->numel; r++) dst[r] = 1.0f;
            continue;
        }
        if (d->init == MG_INIT_ZERO) continue;
        #pragma omp parallel for schedule(static)
        for (r = 0; r < rows; r++) {
            int64_t grow = d->row0 + r, j;
            /* padding rows of the vocabulary stay zero: they are never used */
            if (mg__vocab_rows(d->kind) && grow >= m->cfg.vocab_size) continue;
            for (j = 0; j < cols; j++) {
                uint64_t gidx = (uint64_t)(grow * gcols + d->col0 + j); /* global element */
                dst[r * cols + j] = d->init == MG_INIT_UNIFORM
                    ? d->init_std * (2.0f * mg_rand_uniform(key, gidx) - 1.0f)
                    : d->init_std * mg_rand_normal(key, gidx);
            }
        }
    }
    mg_copy_to_device(m->ctx, mg_gpt_fp32_params(m), host, (size_t)m->n_elems * sizeof(float));
    if (m->layout.shard_master) m->fp32_staging = MG_STAGING_WRITTEN;
    MG_FREE(host);
}

MGDEF int mg_gpt_find_param(const mg_gpt *m, const char *name) {
    int i;
    for (i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

/* Elements of the largest global tensor of a model: the word embedding, the position
   embedding or a 4C×C MLP weight.                                                          */
static int64_t mg__max_global_elems(const mg_gpt_config *c) {
    mg_layer_config lc = mg_gpt_layer_config(c, 1, MG_F32);
    int64_t C = c->hidden, best = (int64_t)c->padded_vocab * C, shape[2];
    int k;
    if ((int64_t)c->max_pos * C > best) best = (int64_t)c->max_pos * C;
    for (k = 0; k < MG_LAYER_TENSORS; k++) {
        mg_layer_tensor_shape(&lc, k, shape);
        if (shape[0] * (shape[1] ? shape[1] : 1) > best) best = shape[0] * (shape[1] ? shape[1] : 1);
    }
    return best;
}

/* Copies between a host GLOBAL tensor (row-major, shape) and the local shard, in either
   direction: the shard is rows [row0, row0 + local rows) × cols [col0, col0 + local cols). */
static void mg__shard_copy(const mg_param_desc *d, float *shard, float *global, int to_global) {
    int64_t r, rows = d->local_shape[0], cols = d->local_shape[1];
    int64_t gcols = d->ndim == 2 ? d->shape[1] : 1;
    for (r = 0; r < rows; r++) {
        float *g = global + (d->row0 + r) * gcols + d->col0, *s = shard + r * cols;
        if (to_global) memcpy(g, s, (size_t)cols * sizeof(float));
        else memcpy(s, g, (size_t)cols * sizeof(float));
    }
}
/* With t ranks: all-gather the t equal shards into arena scratch (rank order), copy them to
   the host and place each at its rank's rows / columns.                                    */
MGDEF void mg_gpt_shard_to_global(const mg_gpt *m, int idx, const float *flat, float *global) {
    const mg_param_desc *d = &m->params[idx];
    int t = m->layout.tp_size, r;
    int gathered = t > 1 && d->split != MG_TP_REPLICATED;
    size_t bytes = (size_t)d->numel * sizeof(float), mark = 0;
    const float *src = flat + d->offset;
    float *tmp = (float *)MG_MALLOC(bytes * (size_t)(gathered ? t : 1) + 1);
    MG_ASSERT(tmp, "out of host memory");
    if (gathered) {
        mg_comm *comm = m->layout.comm;
        float *all;
        MG_ASSERT(comm, "tensor-parallel size %d needs the layout's comm", t);
        mark = mg_arena_mark(m->ctx);
        all = (float *)mg_alloc(m->ctx, bytes * (size_t)t);
        mg_all_gather(comm, &comm->tensor, src, all, d->numel, MG_F32);
        mg_copy_to_host(m->ctx, tmp, all, bytes * (size_t)t);
        mg_arena_release(m->ctx, mark);
        for (r = 0; r < t; r++) {
            mg_param_desc dr = *d;                 /* rank r's shard of the same tensor */
            mg__shard(&dr, r, t);
            mg__shard_copy(&dr, tmp + (size_t)r * (size_t)d->numel, global, 1);
        }
    } else {
        mg_copy_to_host(m->ctx, tmp, src, bytes);
        mg__shard_copy(d, tmp, global, 1);
    }
    MG_FREE(tmp);
}
MGDEF void mg_gpt_global_to_shard(mg_gpt *m, int idx, float *flat, const float *global) {
    const mg_param_desc *d = &m->params[idx];
    float *tmp = (float *)MG_MALLOC((size_t)d->numel * sizeof(float) + 1);
    MG_ASSERT(tmp, "out of host memory");
    mg__shard_copy(d, tmp, (float *)global, 0);
    mg_copy_to_device(m->ctx, flat + d->offset, tmp, (size_t)d->numel * sizeof(float));
    MG_FREE(tmp);
}

/* =============================================================================================
   3. Model: allocation
   ========================================================================================== */

/* Allocation runs twice through the same code (mg_claim): once counting bytes (ctx NULL),
   once taking them from the arena, so mg_gpt_arena_bytes is exact by construction. */

/* Doubles of the scalar exchange over the tensor or the pipeline group (one per rank, and
   room for the all-gather's two-float halves).                                             */
static int mg__scalar_slots(const mg_gpt_layout *L) {
    return 2 * (L->tp_size > L->pp_size ? L->tp_size : L->pp_size);
}

MGDEF int mg_gpt_recompute_kind(const mg_gpt_layout *L, int nl, int i, int *first, int *last) {
    int n = L->recompute_num_layers > 0 ? L->recompute_num_layers : 1;
    if (L->recompute_granularity != MG_RECOMPUTE_FULL) return L->recompute_granularity;
    if (L->recompute_method == MG_RECOMPUTE_BLOCK) {
        if (i >= n) return MG_RECOMPUTE_NONE;
        *first = *last = i;
    } else {
        *first = i / n * n;
        *last = *first + n < nl ? *first + n - 1 : nl - 1;
    }
    return MG_RECOMPUTE_FULL;
}
/* Layers of the largest full-recomputation group of the layout (0: none). */
static int mg__recompute_group_max(const mg_gpt_layout *L) {
    int ch, i, first = 0, last = -1, most = 0;
    for (ch = 0; ch < L->n_chunks; ch++) {
        int nl = L->chunks[ch].layer_end - L->chunks[ch].layer_begin;
        for (i = 0; i < nl; i++)
            if (mg_gpt_recompute_kind(L, nl, i, &first, &last) == MG_RECOMPUTE_FULL &&
                last - first + 1 > most)
                most = last - first + 1;
    }
    return most;
}

MGDEF int64_t mg_gpt_classifier_auto_rows(const mg_gpt_config *cfg, const mg_gpt_layout *L,
                                          int cuda) {
    int64_t N = (int64_t)L->micro_batch * mg_gpt_local_seq(cfg, L);
    return mg_classifier_chunk_rows(N, cfg->padded_vocab / (L->tp_size > 1 ? L->tp_size : 1),
                                    (mg_dtype)L->dtype, cuda ? MG_CLASSIFIER_CHUNK_BYTES_CUDA
                                                             : MG_CLASSIFIER_CHUNK_BYTES);
}
/* Everything the model puts in the arena. With m->ctx NULL nothing is stored. Residual-
   stream activations have n rows (N/t with sequence parallelism), the tensor-parallel ones
   (qkv, attention, MLP hidden, logits) N rows and 1/t of the columns. With recomputation,
   a full-recomputed layer keeps only its group's output and borrows the rest from the shared
   group scratch; a selective one borrows the attention probabilities.                     */
static void mg__plan_model(mg_gpt *m, mg_claim *p) {
    const mg_gpt_config *c = &m->cfg;
    const mg_gpt_layout *L = &m->layout;
    int64_t B = L->micro_batch, T = mg_gpt_local_seq(c, L), N = B * T, C = c->hidden;
    int64_t t = L->tp_size, nh = c->n_head / t, Vl = c->padded_vocab / t, n;
    mg_dtype dt = (mg_dtype)L->dtype;
    size_t acts_begin;
    int ch, s, l, k;
    mg_layer_config lc;
    mg_tp_group tp;
    m->dtype = dt;
    lc = mg_gpt_layer_config(c, L->micro_batch, dt);
    lc.seq_len = (int)T;
    lc.attention_backend = L->attention_backend;
    tp.comm = L->comm;
    tp.rank = L->tp_rank;
    tp.size = L->tp_size;
    tp.sequence_parallel = L->sequence_parallel;
    mg_transformer_init(&m->tf, m->ctx, &lc, tp);
    if (L->cp_size > 1) {
        mg_cp_group cp;
        cp.comm = L->comm;
        cp.rank = L->cp_rank;
        cp.size = L->cp_size;
        mg_transformer_set_cp(&m->tf, cp);
    }
    n = m->tf.n_rows;
    if (!L->shard_master) m->param_buf = mg_claim_f32(p, m->n_elems);  /* else the optimizer's */
    m->grad_buf = mg_claim_f32(p, m->n_elems);
    if (dt != MG_F32) m->param16 = mg_claim_bytes(p, (size_t)m->n_elems * mg_dtype_size(dt));
    acts_begin = p->bytes;
    for (ch = 0; ch < L->n_chunks; ch++) {
        const mg_gpt_chunk *chunk = &L->chunks[ch];
        int nl = chunk->layer_end - chunk->layer_begin;
        for (s = 0; s < L->n_slots; s++) {
            mg_gpt_acts *a = &m->acts[ch * L->n_slots + s];
            a->tokens = (int32_t *)mg_claim_bytes(p, (size_t)(B * c->seq_len) * sizeof(int32_t));
            a->targets = (int32_t *)mg_claim_bytes(p, (size_t)N * sizeof(int32_t));
            a->input = mg_claim_tensor(p, dt, n, C, 0, 0);
            for (l = 0; l < nl; l++) {
                mg_layer_acts *la = &a->layers[l];
                int first = 0, last = -1;
                int kind = mg_gpt_recompute_kind(L, nl, l, &first, &last);
                /* ZB-H1 (split backward): also the output gradients the W half needs */
                mg_layer_acts_claim(&m->tf, p, la, kind != MG_RECOMPUTE_FULL,
                                    kind == MG_RECOMPUTE_NONE,
                                    kind != MG_RECOMPUTE_FULL || l == last, L->split_backward);
            }
            if (chunk->has_head) {
                a->lnf = mg_claim_tensor(p, dt, n, C, 0, 0);
                a->lnf_mean = mg_claim_f32(p, n);
                a->lnf_rstd = mg_claim_f32(p, n);
                a->dlnf = mg_claim_tensor(p, dt, n, C, 0, 0);   /* not the [N, Vl] logits */
            }
        }
    }
    m->act_bytes = p->bytes - acts_begin;
    acts_begin = p->bytes;
    mg_transformer_claim_scratch(&m->tf, p);
    if (L->chunks[L->n_chunks - 1].has_head) {  /* one chunk of logits, shared by all slots */
        m->head_chunk_rows = L->classifier_chunk_rows > 0
            ? (L->classifier_chunk_rows < N ? L->classifier_chunk_rows : N)
            : mg_gpt_classifier_auto_rows(c, L, 0);
        m->head_scratch = mg_claim_bytes(p, mg_classifier_scratch_bytes(m->head_chunk_rows, Vl, dt));
    }
    /* recomputation scratch, then the recomputed layers point into it */
    for (k = 0; k < m->n_recompute_layers; k++)
        mg_layer_acts_claim(&m->tf, p, &m->recompute_layers[k], 1, 1, 1, 0);
    if (L->recompute_granularity == MG_RECOMPUTE_SELECTIVE &&
        m->tf.cfg.attention_backend == MG_ATTN_UNFUSED)
        m->recompute_att = mg_claim_tensor(p, dt, B, nh, T, T);
    for (ch = 0; ch < L->n_chunks; ch++) {
        int nl = L->chunks[ch].layer_end - L->chunks[ch].layer_begin;
        for (s = 0; s < L->n_slots; s++)
            for (l = 0; l < nl; l++) {
                mg_layer_acts *la = &m->acts[ch * L->n_slots + s].layers[l];
                int first = 0, last = -1;
                int kind = mg_gpt_recompute_kind(L, nl, l, &first, &last);
                if (kind == MG_RECOMPUTE_SELECTIVE) la->att = m->recompute_att;
                if (kind == MG_RECOMPUTE_FULL) {
                    /* the group's last output and (split backward) the output gradients stay
                       the slot's own: the weight half reads them after other microbatches
                       have reused the scratch                                             */
                    mg_layer_acts own = *la;
                    *la = m->recompute_layers[l - first];
                    if (l == last) la->out = own.out;
                    la->dout_fc2 = own.dout_fc2;
                    la->dout_fc1 = own.dout_fc1;
                    la->dout_proj = own.dout_proj;
                    la->dout_qkv = own.dout_qkv;
                }
            }
    }
    m->scratch_bytes = p->bytes - acts_begin;
    m->losses = mg_claim_f32(p, (int64_t)L->max_microbatches * N);
    m->tp_scalars = mg_claim_f32(p, 3 + 3 * t);
    m->vocab_row = mg_claim_f32(p, c->padded_vocab);
    m->scalars = (double *)mg_claim_bytes(p, sizeof(double) * (size_t)mg__scalar_slots(L));
}

/* Host-side arrays of the model (descriptors, views, activation records). */
static void mg__alloc_host(mg_gpt *m) {
    const mg_gpt_layout *L = &m->layout;
    int ch, s, n_acts = L->n_chunks * L->n_slots;
    m->n_params = mg__build_params(&m->cfg, L, NULL, &m->n_elems);
    m->params = (mg_param_desc *)MG_MALLOC(sizeof(mg_param_desc) * (size_t)m->n_params);
    m->w = (mg_tensor *)MG_MALLOC(sizeof(mg_tensor) * (size_t)m->n_params);
    m->g = (mg_tensor *)MG_MALLOC(sizeof(mg_tensor) * (size_t)m->n_params);
    m->idx_layer = (int *)MG_MALLOC(sizeof(int) * (size_t)m->cfg.n_layer);
    m->acts = (mg_gpt_acts *)MG_MALLOC(sizeof(mg_gpt_acts) * (size_t)n_acts);
    m->n_recompute_layers = mg__recompute_group_max(L);
    m->recompute_layers = (mg_layer_acts *)MG_MALLOC(sizeof(mg_layer_acts) *
                                                         (size_t)(m->n_recompute_layers + 1));
    MG_ASSERT(m->params && m->w && m->g && m->idx_layer && m->acts && m->recompute_layers,
              "out of host memory");
    memset(m->recompute_layers, 0,
           sizeof(mg_layer_acts) * (size_t)(m->n_recompute_layers + 1));
    mg__build_params(&m->cfg, L, m->params, NULL);
    memset(m->acts, 0, sizeof(mg_gpt_acts) * (size_t)n_acts);
    for (ch = 0; ch < L->n_chunks; ch++)
        for (s = 0; s < L->n_slots; s++) {
            int nl = L->chunks[ch].layer_end - L->chunks[ch].layer_begin;
            mg_gpt_acts *a = &m->acts[ch * L->n_slots + s];
            a->layers = (mg_layer_acts *)MG_MALLOC(sizeof(mg_layer_acts) *
                                                       (size_t)(nl > 0 ? nl : 1));
            MG_ASSERT(a->layers, "out of host memory");
            memset(a->layers, 0, sizeof(mg_layer_acts) * (size_t)(nl > 0 ? nl : 1));
        }
}

MGDEF size_t mg_gpt_arena_bytes(const mg_gpt_config *cfg, const mg_gpt_layout *layout) {
    mg_gpt m;
    mg_claim p;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.layout = *layout;
    if (mg__layout_check(cfg, layout, NULL, 0)) return 0;
    mg__alloc_host(&m);
    p.ctx = NULL;
    p.bytes = 0;
    mg__plan_model(&m, &p);
    mg_gpt_destroy(&m);
    return p.bytes;
}

MGDEF int mg_gpt_create(mg_gpt *m, mg_ctx *ctx, const mg_gpt_config *cfg,
                        const mg_gpt_layout *layout, char *err, size_t errlen) {
    mg_claim p;
    int i, l;
    memset(m, 0, sizeof *m);
    if (mg__layout_check(cfg, layout, err, errlen)) return -1;
    m->ctx = ctx;
    m->cfg = *cfg;
    m->layout = *layout;
    m->comm = layout->comm;
    mg__alloc_host(m);
    p.ctx = ctx;
    p.bytes = 0;
    mg__plan_model(m, &p);
    if (m->param_buf) mg_memset_zero(ctx, m->param_buf, (size_t)m->n_elems * sizeof(float));
    mg_memset_zero(ctx, m->grad_buf, (size_t)m->n_elems * sizeof(float));
    for (i = 0; i < MG_GLOBAL_TENSORS; i++) m->idx_global[i] = -1;
    for (l = 0; l < cfg->n_layer; l++) m->idx_layer[l] = -1;
    m->lw = (mg_tensor (*)[MG_LAYER_TENSORS])MG_MALLOC(sizeof *m->lw * (size_t)cfg->n_layer);
    m->lg = (mg_tensor (*)[MG_LAYER_TENSORS])MG_MALLOC(sizeof *m->lg * (size_t)cfg->n_layer);
    MG_ASSERT(m->lw && m->lg, "out of host memory");
    memset(m->lw, 0, sizeof *m->lw * (size_t)cfg->n_layer);
    memset(m->lg, 0, sizeof *m->lg * (size_t)cfg->n_layer);
    {
        mg_layer_config lc = mg_gpt_layer_config(cfg, 1, MG_F32);
        for (i = 0; i < MG_LAYER_TENSORS; i++) m->layer_tensors += mg_layer_has_tensor(&lc, i);
    }
    for (i = 0; i < m->n_params; i++) {
        const mg_param_desc *d = &m->params[i];
        int64_t shape[2];
        shape[0] = d->local_shape[0];
        shape[1] = d->local_shape[1];
        m->w[i] = m->param16 ? mg_tensor_wrap((char *)m->param16 + (size_t)d->offset *
                                              mg_dtype_size(m->dtype), m->dtype, d->ndim, shape)
                             : mg_tensor_wrap(m->param_buf + d->offset, MG_F32, d->ndim, shape);
        m->g[i] = mg_tensor_wrap(m->grad_buf + d->offset, MG_F32, d->ndim, shape);
        if (d->kind >= MG_LAYER_TENSORS) {
            m->idx_global[d->kind - MG_LAYER_TENSORS] = i;
        } else {
            if (d->kind == 0) m->idx_layer[d->layer] = i;
            m->lw[d->layer][d->kind] = m->w[i];
            m->lg[d->layer][d->kind] = m->g[i];
        }
    }
    m->host_tokens = (int32_t *)MG_MALLOC(sizeof(int32_t) * 2 * (size_t)layout->micro_batch *
                                          (size_t)cfg->seq_len);
    MG_ASSERT(m->host_tokens, "out of host memory");
    m->host_targets = m->host_tokens + (size_t)layout->micro_batch * cfg->seq_len;
    m->host_losses = (float *)MG_MALLOC(sizeof(float) * (size_t)layout->max_microbatches *
                                        (size_t)layout->micro_batch * (size_t)cfg->seq_len);
    MG_ASSERT(m->host_losses, "out of host memory");
    m->host_scalars = (double *)MG_MALLOC(sizeof(double) * (size_t)mg__scalar_slots(layout));
    MG_ASSERT(m->host_scalars, "out of host memory");
    return 0;
}

MGDEF void mg_gpt_destroy(mg_gpt *m) {
    int i;
    if (m->acts)
        for (i = 0; i < m->layout.n_chunks * m->layout.n_slots; i++) MG_FREE(m->acts[i].layers);
    MG_FREE(m->acts);
    MG_FREE(m->recompute_layers);
    MG_FREE(m->params);
    MG_FREE(m->w);
    MG_FREE(m->g);
    MG_FREE(m->idx_layer);
    MG_FREE(m->lw);
    MG_FREE(m->lg);
    MG_FREE(m->host_tokens);
    MG_FREE(m->host_losses);
    MG_FREE(m->host_scalars);
    memset(m, 0, sizeof *m);
}

/* =============================================================================================
   3. Model: forward and backward
   ========================================================================================== */
static mg_gpt_acts *mg__acts(mg_gpt *m, int chunk, int slot) {
    MG_ASSERT(chunk >= 0 && chunk < m->layout.n_chunks && slot >= 0 && slot < m->layout.n_slots,
              "chunk %d / slot %d outside %d chunks × %d slots", chunk, slot,
              m->layout.n_chunks, m->layout.n_slots);
    return &m->acts[chunk * m->layout.n_slots + slot];
}

MGDEF mg_tensor *mg_gpt_chunk_input(mg_gpt *m, int chunk, int slot) {
    return &mg__acts(m, chunk, slot)->input;
}
MGDEF mg_tensor *mg_gpt_chunk_output(mg_gpt *m, int chunk, int slot) {
    mg_gpt_acts *a = mg__acts(m, chunk, slot);
    int nl = m->layout.chunks[chunk].layer_end - m->layout.chunks[chunk].layer_begin;
    return nl ? &a->layers[nl - 1].out : &a->input;
}

/* The positions the loss mask keeps in n samples (host int32 [n, T+1]): those whose input
   token (positions 0 … T-1 of a sample) is not eod_id. mg_gpt_set_batch counts a microbatch
   with it, the trainer's --calculate-per-token-loss a rank's share of the global batch.      */
static int64_t mg__kept_positions(const int32_t *samples, int64_t n, int T, int64_t eod_id) {
    int64_t kept = 0, i;
    int t;
    for (i = 0; i < n; i++)
        for (t = 0; t < T; t++) kept += samples[i * (T + 1) + t] != eod_id;
    return kept;
}

MGDEF void mg_gpt_set_batch(mg_gpt *m, int chunk, int slot, const int32_t *samples) {
    mg_gpt_acts *a = mg__acts(m, chunk, slot);
    const mg_gpt_chunk *c = &m->layout.chunks[chunk];
    int B = m->layout.micro_batch, T = mg_gpt_local_seq(&m->cfg, &m->layout), b, t;
    int Tg = m->cfg.seq_len;
    if (!c->has_embedding && !c->has_head) return;
    int64_t kept_here = 0;   /* loss mask: the targets this rank keeps */
    for (b = 0; b < B; b++) {
        const int32_t *row = samples + (int64_t)b * (Tg + 1);
        for (t = 0; t <= Tg; t++)
            MG_ASSERT(row[t] >= 0 && row[t] < m->cfg.vocab_size, "token id %d outside the "
                      "vocabulary 0 … %d", row[t], m->cfg.vocab_size - 1);
        /* the embedding reads the whole [B, T] sequence, batch-major, at its positions */
        memcpy(m->host_tokens + (size_t)b * Tg, row, sizeof(int32_t) * (size_t)Tg);
        for (t = 0; t < T; t++) {   /* [T, B] row order of the activations: this rank's
                                       positions (context parallelism: mg_cp_global_pos)  */
            int64_t pos = mg_cp_global_pos(m->tf.cp.rank, m->tf.cp.size, T, t);
            int keep = !m->eod_mask || row[pos] != m->eod_id;
            m->host_targets[t * B + b] = keep ? row[pos + 1] : -1;
            kept_here += keep;
        }
    }
    if (!m->eod_mask) a->dloss_scale = 1.0f;
    else if (m->dloss_scale_all > 0) a->dloss_scale = m->dloss_scale_all;
    else {   /* the whole microbatch's kept positions, whatever part of it this rank holds */
        int64_t kept_mb = mg__kept_positions(samples, B, Tg, m->eod_id);
        a->dloss_scale = kept_mb ? (float)((double)B * Tg / (double)kept_mb) : 0.0f;
    }
    if (c->has_head) m->loss_tokens += kept_here;
    mg_copy_to_device(m->ctx, a->tokens, m->host_tokens, sizeof(int32_t) * (size_t)B * Tg);
    mg_copy_to_device(m->ctx, a->targets, m->host_targets, sizeof(int32_t) * (size_t)B * T);
}

/* The verdict of rank 0 of comm's group of that kind (the rank that writes files) on every
   rank of the group: nonzero rc there makes all return -1. Collective; no-op without comm
   or with a group of one.                                                                  */
static int mg__group_agree(mg_gpt *m, mg_comm *comm, mg_group_kind kind, int rc) {
    float flag = rc ? 1.0f : 0.0f;
    mg_group *g = comm ? mg_comm_group(comm, kind) : NULL;
    if (!g || g->size <= 1) return rc ? -1 : 0;
    mg_copy_to_device(m->ctx, m->tp_scalars, &flag, sizeof flag);
    mg_broadcast(comm, g, m->tp_scalars, m->tp_scalars, 1, MG_F32, 0);
    mg_copy_to_host(m->ctx, &flag, m->tp_scalars, sizeof flag);
    return flag != 0 ? -1 : 0;
}
/* The verdict of tensor-parallel rank 0 on every rank of the tensor group. */
static int mg__tp_agree(mg_gpt *m, int rc) {
    if (m->layout.tp_size == 1) return rc ? -1 : 0;
    return mg__group_agree(m, mg_tp_comm(&m->tf.tp), MG_GROUP_TENSOR, rc);
}

/* ---- The layers (mg_transformer.h) of a chunk ----------------------------------------------
   Dropout masks are keyed by (seed, site, global microbatch) at global coordinates (sites:
   MG_SITE_EMBEDDING, and three per layer: mg_transformer.h), so they depend neither on t, nor
   on sequence parallelism, nor on the pipeline split.                                       */
static mg_layer_id mg__layer_id(const mg_gpt_acts *a, int layer) {
    mg_layer_id id;
    id.layer = layer;
    id.dropout_on = a->dropout_on;
    id.microbatch = a->dropout_mb;
    return id;
}
static void mg__layer_forward(mg_gpt *m, int layer, const mg_gpt_acts *a, mg_layer_acts *la,
                              const mg_tensor *x) {
    mg_layer_id id = mg__layer_id(a, layer);
    mg_transformer_layer_forward(&m->tf, &id, m->lw[layer], la, x);
}

/* Descriptor indices of the head's tensors: the output layer's weight (the word embedding
   when tied), the final norm's weight and bias (-1: RMSNorm has none).                      */
static int mg__iout(const mg_gpt *m) {
    return m->idx_global[(m->cfg.untie_embeddings ? MG_OUT_W : MG_WTE) - MG_LAYER_TENSORS];
}
static int mg__ilnf(const mg_gpt *m) { return m->idx_global[MG_LNF_W - MG_LAYER_TENSORS]; }
static const mg_tensor *mg__lnf_bias(const mg_gpt *m, const mg_tensor *t) {
    int i = m->idx_global[MG_LNF_B - MG_LAYER_TENSORS];
    return i >= 0 ? &t[i] : NULL;
}

/* The classifier of the head, fused and chunked (mg_classifier_fused): per chunk of rows of
   lnf (all-gathered with sequence parallelism), logits = lnf_c·Woutᵀ over this rank's
   vocabulary slice (Wout: the word embedding, tied, or the output layer), one pass for the
   slice's row max, Σexp and target logit, the merges across the slices (all-reduce MAX, then
   SUM of the rescaled Σexp and target logits: the logits are never gathered), the loss; with
   backward, dlogits in place of the chunk's logits, partial dlnf_c = dlogits·Wout and
   dWout += dlogitsᵀ·lnf_c. dlnf's partial sums then reduce over the tensor group [g /
   reduce-scatter] into a->dlnf. The [N, Vp/t] logits never exist: one chunk of them lives in
   the scratch shared by every slot.                                                          */
static void mg__tp_merge(void *user, float *buf, int64_t n, int is_max) {
    mg_tp_all_reduce((const mg_tp_group *)user, buf, n, is_max ? MG_MAX : MG_SUM);
}
static void mg__head_classifier(mg_gpt *m, mg_gpt_acts *a, float *losses, int backward,
                                float dloss) {
    int iout = mg__iout(m);
    mg_classifier c;
    memset(&c, 0, sizeof c);
    c.x = mg_tp_gather(&m->tf.tp, &a->lnf, &m->tf.full_a);
    c.w = &m->w[iout];
    c.targets = a->targets;
    c.vocab_start = m->params[iout].row0;
    c.vocab_size = m->cfg.vocab_size;
    c.losses = losses;
    c.dloss_scale = a->dloss_scale;
    c.chunk_rows = m->head_chunk_rows;
    c.scratch = m->head_scratch;
    c.merge = m->tf.tp.size > 1 ? mg__tp_merge : NULL;
    c.merge_user = &m->tf.tp;
    if (backward) {
        MG_ASSERT(!m->fp32_staging, "the classifier's gradient into the gradient buffer while "
                  "it holds fp32 parameters (sharded master): mg_adamw_take_master / "
                  "mg_gpt_zero_grad first");
        c.dloss = dloss;
        c.dloss_at = m->dloss_at;   /* the trainer's on-device loss scale, if set */
        c.dx = m->tf.tp.sequence_parallel ? &m->tf.full_b : &a->dlnf;  /* [N, C] partial */
        c.dw = &m->g[iout];
    }
    mg_classifier_fused(m->ctx, &c);
    if (backward) mg_tp_reduce(&m->tf.tp, c.dx, &a->dlnf);
}

/* Head forward: lnf = norm(x), then the classifier. Where its backward runs: the gradient of
   the logits needs only the loss's scale dloss, known before the iteration's first forward
   (llm.c fuses the classifier backward into its forward for the same reason), so with
   m->head_dloss set the forward runs it at once — the logits chunk is still in the scratch —
   and leaves dlnf (n·C elements) for the backward instead of the [N, Vp/t] fp32 logits; the
   output layer's weight gradient is complete when the forward returns. Every schedule stays
   correct: the head's backward (B, or ZB-H1's I) continues from dlnf, and ZB-H1's W has no
   head part left (the layers' weight gradients stay deferred). m->head_dloss 0: the loss
   only (evaluation; generation); a backward then re-runs the classifier.                  */
static void mg__head_forward(mg_gpt *m, mg_gpt_acts *a, const mg_tensor *x, int microbatch) {
    const mg_tensor *w = m->w;
    int ilnf = mg__ilnf(m);
    int64_t N = (int64_t)m->layout.micro_batch * m->tf.cfg.seq_len;   /* this rank's rows */
    MG_ASSERT(microbatch >= 0 && microbatch < m->layout.max_microbatches,
              "microbatch %d outside 0 … %d", microbatch, m->layout.max_microbatches - 1);
    mg_norm_forward(m->ctx, &m->tf.cfg.norm, &a->lnf, a->lnf_mean, a->lnf_rstd, x, &w[ilnf],
                    mg__lnf_bias(m, w));
    a->head_fused = m->head_dloss != 0.0f;
    a->head_dloss = m->head_dloss;
    mg__head_classifier(m, a, m->losses + (int64_t)microbatch * N, a->head_fused,
                        m->head_dloss);
}

/* Head backward: dlnf from the forward (or the classifier now, if the forward ran without
   m->head_dloss: the logits are recomputed chunk by chunk, the loss not rewritten), then
   dresid = norm'(dlnf) — overwrites: the chunk's backward starts here.                      */
static void mg__head_backward(mg_gpt *m, mg_gpt_acts *a, const mg_tensor *x, float dloss) {
    int ilnf = mg__ilnf(m);
    if (!a->head_fused) mg__head_classifier(m, a, NULL, 1, dloss);
    else
        MG_ASSERT(a->head_dloss == dloss, "the head's forward ran its backward with dloss %g "
                  "(m->head_dloss) but the backward was given %g", (double)a->head_dloss,
                  (double)dloss);
    a->head_fused = 0;
    mg_norm_backward(m->ctx, &m->tf.cfg.norm, &m->tf.dresid, &m->g[ilnf],
                     (mg_tensor *)mg__lnf_bias(m, m->g), &a->dlnf, x, &m->w[ilnf], a->lnf_mean,
                     a->lnf_rstd, 0);
}

/* Embedding forward: vocabulary-parallel word embedding (ids outside this rank's rows give 0)
   plus the position embedding (on rank 0 only), summed over the tensor group [g / reduce-
   scatter], then dropout. Backward: the gradient [identity / all-gathered] scatter-added
   into this rank's rows of dwte and into dwpe (the whole gradient on every rank: equal).    */
/* The runs of the embedding over the [B, T] tokens: all positions from 0, or with context
   parallelism this rank's two chunks of T/(2c) positions, rows [h·B·T/(2c), …), from their
   global positions t0[h]. Returns the number of runs, *Th the positions of each.           */
static int mg__embedding_runs(const mg_gpt *m, int *Th, int t0[2]) {
    int T = m->tf.cfg.seq_len, halves = m->tf.cp.size > 1 ? 2 : 1;
    *Th = T / halves;
    for (int h = 0; h < halves; h++)
        t0[h] = halves > 1 ? (int)mg_cp_chunk_pos(m->tf.cp.rank, m->tf.cp.size, T, h) : 0;
    return halves;
}
static void mg__embedding_forward(mg_gpt *m, mg_gpt_acts *a) {
    int iwte = m->idx_global[MG_WTE - MG_LAYER_TENSORS], B = m->layout.micro_batch, Th, t0[2];
    mg_layer_id id = mg__layer_id(a, -1);
    mg_tensor *partial = mg_transformer_partial(&m->tf, &a->input);
    int iwpe = m->idx_global[MG_WPE - MG_LAYER_TENSORS];   /* -1: no learned positions */
    for (int h = 0, n = mg__embedding_runs(m, &Th, t0); h < n; h++) {
        mg_tensor rows = mg_tensor_rows(partial, (int64_t)h * Th * B, (int64_t)Th * B);
        mg_embedding_forward(m->ctx, &rows, a->tokens, B, m->cfg.seq_len, t0[h],
                             &m->w[iwte], m->params[iwte].row0,
                             m->layout.tp_rank == 0 && iwpe >= 0 ? &m->w[iwpe] : NULL);
    }
    mg_tp_reduce(&m->tf.tp, partial, &a->input);
    mg_transformer_dropout(&m->tf, &id, &a->input, MG_SITE_EMBEDDING);
}
static void mg__embedding_backward(mg_gpt *m, mg_gpt_acts *a) {
    int iwte = m->idx_global[MG_WTE - MG_LAYER_TENSORS];
    mg_layer_id id = mg__layer_id(a, -1);
    const mg_tensor *g_out = mg_transformer_dropout_grad(&m->tf, &id, &m->tf.dresid,
                                                         MG_SITE_EMBEDDING);
    g_out = mg_tp_gather(&m->tf.tp, g_out, &m->tf.full_b);
    int iwpe = m->idx_global[MG_WPE - MG_LAYER_TENSORS], B = m->layout.micro_batch, Th, t0[2];
    for (int h = 0, n = mg__embedding_runs(m, &Th, t0); h < n; h++) {
        mg_tensor rows = mg_tensor_rows(g_out, (int64_t)h * Th * B, (int64_t)Th * B);
        mg_embedding_backward(m->ctx, &m->g[iwte], iwpe >= 0 ? &m->g[iwpe] : NULL, &rows,
                              a->tokens, B, m->cfg.seq_len, t0[h],
                              m->params[iwte].row0);
    }
}

/* Forward of one chunk; dropout_mb is the global microbatch index that keys the masks. */
static void mg__gpt_forward(mg_gpt *m, int chunk, int slot, int microbatch, uint64_t dropout_mb) {
    mg_gpt_acts *a = mg__acts(m, chunk, slot);
    const mg_gpt_chunk *c = &m->layout.chunks[chunk];
    const mg_tensor *x = &a->input;
    int l;
    a->dropout_mb = dropout_mb;
    a->dropout_on = m->training;
    if (c->has_embedding) mg__embedding_forward(m, a);
    for (l = c->layer_begin; l < c->layer_end; l++) {
        mg_layer_acts *la = &a->layers[l - c->layer_begin];
        mg__layer_forward(m, l, a, la, x);
        x = &la->out;
    }
    if (c->has_head) mg__head_forward(m, a, x, microbatch);
}

MGDEF void mg_gpt_forward(mg_gpt *m, int chunk, int slot, int microbatch) {
    mg__gpt_forward(m, chunk, slot, microbatch, m->microbatch_base + (uint64_t)microbatch);
}

/* Full recomputation: re-runs the forward of the chunk-relative layer group [first, last] from
   its kept input (the previous layer's kept output, or the chunk's input) into the shared
   scratch the group's layer structs point at (its last output into the slot's own, with the
   same bits). Deterministic — the same inputs, weights and dropout keys — so it regenerates
   exactly what the original forward computed.                                              */
static void mg__recompute_group(mg_gpt *m, const mg_gpt_chunk *c, mg_gpt_acts *a, int first,
                                int last) {
    int k;
    for (k = first; k <= last; k++)
        mg__layer_forward(m, c->layer_begin + k, a, &a->layers[k],
                          k ? &a->layers[k - 1].out : &a->input);
}

/* The word embedding's gradient is split over two pipeline stages (the embedding's part on
   the first, the output layer's on the last) until the embedding group's all-reduce.      */
static int mg__wte_split_over_stages(const mg_gpt *m) {
    return m->comm && m->layout.pp_size > 1 && m->idx_global[MG_WTE - MG_LAYER_TENSORS] >= 0 &&
           !m->cfg.untie_embeddings;
}

/* The gradient hook (see mg_gpt): the gradients of descriptors [i0, i1) are final, reported as
   the flat range from the first one's offset to the next held descriptor's (n_elems after the
   last), so that the reports of an iteration tile the flat buffer.                        */
static void mg__grads_final_params(mg_gpt *m, int i0, int i1) {
    m->grads_final(m->grads_final_user, m->params[i0].offset,
                   i1 < m->n_params ? m->params[i1].offset : m->n_elems);
}
/* The pieces of a chunk's backward: the head (its final norm and an untied output layer, the
   last descriptors of the flat order; a tied output layer's part of the word embedding is
   the embedding piece's to report), layer l, the embedding (the position embedding if any
   and — unless split over stages — the word embedding just before it).                    */
static void mg__grads_final_head(mg_gpt *m) {
    mg__grads_final_params(m, mg__ilnf(m), m->n_params);
}
static void mg__grads_final_layer(mg_gpt *m, int l) {
    mg__grads_final_params(m, m->idx_layer[l], m->idx_layer[l] + m->layer_tensors);
}
static void mg__grads_final_embedding(mg_gpt *m) {
    int iwte = m->idx_global[MG_WTE - MG_LAYER_TENSORS];
    int iwpe = m->idx_global[MG_WPE - MG_LAYER_TENSORS];
    int first = mg__wte_split_over_stages(m) ? iwpe : iwte;   /* -1: nothing final here */
    if (first >= 0) mg__grads_final_params(m, first, (iwpe >= 0 ? iwpe : iwte) + 1);
}

/* A chunk's backward; defer_w: the input half only (see mg_gpt_backward_input). */
static void mg__chunk_backward(mg_gpt *m, int chunk, int slot, float dloss, int defer_w) {
    mg_gpt_acts *a = mg__acts(m, chunk, slot);
    const mg_gpt_chunk *c = &m->layout.chunks[chunk];
    /* the data-parallel overlap hook: after each piece of a final backward its parameters'
       gradients are complete (not after a split backward's input half: the weights wait for
       the weight half, mg_gpt_backward_weight, which reports them)                          */
    int l, hook = m->final_backward && m->grads_final && !defer_w;
    int nl = c->layer_end - c->layer_begin;
    MG_ASSERT(!defer_w || m->layout.split_backward, "a split backward needs a layout with "
              "split_backward (the slots keep the output gradients)");
    MG_ASSERT(!m->fp32_staging, "a backward into the gradient buffer while it holds fp32 "
              "parameters (sharded master): mg_adamw_take_master / mg_gpt_zero_grad first");
    if (c->has_head) {
        mg__head_backward(m, a, mg_gpt_chunk_output(m, chunk, slot), dloss);
        if (hook) mg__grads_final_head(m);
    }
    for (l = c->layer_end - 1; l >= c->layer_begin; l--) {
        int i = l - c->layer_begin, first = 0, last = -1;
        int kind = mg_gpt_recompute_kind(&m->layout, nl, i, &first, &last);
        if (kind == MG_RECOMPUTE_FULL && i == last)   /* re-run the group from its kept input */
            mg__recompute_group(m, c, a, first, last);
        mg_layer_id id = mg__layer_id(a, l);
        mg_transformer_layer_backward(&m->tf, &id, m->lw[l], m->lg[l], &a->layers[i],
                                      i ? &a->layers[i - 1].out : &a->input,
                                      kind == MG_RECOMPUTE_SELECTIVE, defer_w);
        if (hook) mg__grads_final_layer(m, l);
    }
    if (c->has_embedding) {
        mg__embedding_backward(m, a);
        if (hook) mg__grads_final_embedding(m);
    }
}
MGDEF void mg_gpt_backward(mg_gpt *m, int chunk, int slot, float dloss) {
    mg__chunk_backward(m, chunk, slot, dloss, 0);
}
MGDEF void mg_gpt_backward_input(mg_gpt *m, int chunk, int slot, float dloss) {
    mg__chunk_backward(m, chunk, slot, dloss, 1);
}
/* The weight half reads each linear's input and the output gradient the input half kept in
   the slot (dout_*; the output layer's weight gradient came with the head's forward, or its
   input half, see mg__head_forward). A full-recomputed layer's inputs lived in
   the shared recomputation scratch, which the microbatches run since the input half have
   overwritten: the weight half re-runs the group's forward once more (mg__recompute_group,
   the same bits) rather than keeping the four linears' inputs per slot — full recomputation
   is chosen to save memory, and those inputs (ln1, atty, ln2, fc_gelu: 2·n·C + 5·N·C/t
   elements per layer and slot) would add 70% to what such a layer keeps per slot under
   ZB-H1 (at t = 1: 7·N·C over the input N·C and the output gradients 9·N·C). The price is
   one more forward of the recomputed layers per microbatch, counted by
   mg_gpt_flops_recomputed. Selective recomputation needs nothing again: W reads no
   attention probabilities.                                                                 */
MGDEF void mg_gpt_backward_weight(mg_gpt *m, int chunk, int slot) {
    mg_gpt_acts *a = mg__acts(m, chunk, slot);
    const mg_gpt_chunk *c = &m->layout.chunks[chunk];
    /* the hook of a split backward: the chunk's last weight half completes each piece (its
       layernorm and embedding gradients came with the input halves, all run before)     */
    int l, nl = c->layer_end - c->layer_begin, hook = m->final_backward && m->grads_final;
    if (c->has_head && hook) mg__grads_final_head(m);  /* its gradients came before */
    for (l = c->layer_end - 1; l >= c->layer_begin; l--) {
        int i = l - c->layer_begin, first = 0, last = -1;
        if (mg_gpt_recompute_kind(&m->layout, nl, i, &first, &last) == MG_RECOMPUTE_FULL &&
            i == last)
            mg__recompute_group(m, c, a, first, last);
        mg_transformer_layer_backward_weight(&m->tf, m->lg[l], &a->layers[i]);
        if (hook) mg__grads_final_layer(m, l);
    }
    if (hook && c->has_embedding) mg__grads_final_embedding(m);
}

MGDEF void mg_gpt_zero_grad(mg_gpt *m) {
    MG_ASSERT(m->fp32_staging != MG_STAGING_WRITTEN, "the fp32 parameters written into the "
              "gradient buffer (sharded master) were not taken by the optimizer: call "
              "mg_adamw_take_master first");
    m->fp32_staging = 0;
    mg_memset_zero(m->ctx, m->grad_buf, (size_t)m->n_elems * sizeof(float));
}

MGDEF float *mg_gpt_fp32_params(mg_gpt *m) {
    return m->layout.shard_master ? m->grad_buf : m->param_buf;
}

/* Megatron's _copy_main_params_to_model_params: the whole flat buffer in one cast (its
   alignment gaps are zero and stay zero). With a sharded master only freshly written values
   are cast here; afterwards the optimizer keeps the 16-bit copy current.                   */
MGDEF void mg_gpt_sync_weights(mg_gpt *m) {
    mg_tensor master, copy;
    if (!m->param16) return;
    if (m->param16_current) {
        m->param16_current = 0;
        return;
    }
    if (m->layout.shard_master && m->fp32_staging != MG_STAGING_WRITTEN) return;
    master = mg_tensor_wrap(mg_gpt_fp32_params(m), MG_F32, 1, &m->n_elems);
    copy = mg_tensor_wrap(m->param16, m->dtype, 1, &m->n_elems);
    mg_cast(m->ctx, &copy, &master);
}

/* Parameter gradients accumulate linearly over microbatches, so the sum over the tensor group
   can wait for the end of the iteration (as Megatron's finalize_model_grads does).           */
MGDEF void mg_gpt_reduce_grads(mg_gpt *m) {
    int i;
    if (!m->tf.tp.sequence_parallel) return;
    for (i = 0; i < m->n_params; i++) {
        int k = m->params[i].kind;
        if (k == MG_LN1_W || k == MG_LN1_B || k == MG_LN2_W || k == MG_LN2_B || k == MG_LNF_W ||
            k == MG_LNF_B)
            mg_tp_all_reduce(&m->tf.tp, m->grad_buf + m->params[i].offset, m->params[i].numel, MG_SUM);
    }
}

MGDEF double mg_gpt_loss_sum(mg_gpt *m, int first, int count) {
    int64_t N = (int64_t)m->layout.micro_batch * m->tf.cfg.seq_len, i, n = N * count;
    double sum = 0;
    MG_ASSERT(first >= 0 && count >= 0 && first + count <= m->layout.max_microbatches,
              "loss of microbatches [%d, %d) outside 0 … %d", first, first + count,
              m->layout.max_microbatches);
    if (m->loss_at) {   /* added on the device, nothing read back */
        mg_sum_f32_device(m->ctx, m->losses + first * N, n, m->loss_at);
        return 0;
    }
    mg_copy_to_host(m->ctx, m->host_losses, m->losses + first * N, (size_t)n * sizeof(float));
    for (i = 0; i < n; i++) sum += m->host_losses[i];
    return sum;
}

MGDEF double mg_gpt_run_microbatches(mg_gpt *m, const int32_t *samples, int n_micro,
                                     float dloss, int backward) {
    const mg_gpt_layout *L = &m->layout;
    int64_t per_mb = (int64_t)L->micro_batch * (m->cfg.seq_len + 1);
    int mb, ch, done = 0;
    double sum = 0;
    MG_ASSERT(L->chunks[0].has_embedding && L->chunks[L->n_chunks - 1].has_head,
              "mg_gpt_run_microbatches needs the whole model on this rank");
    mg_gpt_sync_weights(m);
    m->head_dloss = backward ? dloss : 0.0f;   /* the head's forward runs its backward */
    for (mb = 0; mb < n_micro; mb++) {
        /* per-token losses live in [max_microbatches · N]: sum and restart when full */
        int slot_mb = mb - done;
        if (slot_mb == L->max_microbatches) {
            sum += mg_gpt_loss_sum(m, 0, slot_mb);
            done = mb;
            slot_mb = 0;
        }
        for (ch = 0; ch < L->n_chunks; ch++) mg_gpt_set_batch(m, ch, 0, samples + mb * per_mb);
        if (m->compute_timer) m->compute_timer(m->compute_timer_user, 0, 1);
        for (ch = 0; ch < L->n_chunks; ch++) {
            if (ch > 0) /* the pipeline "send/recv" between consecutive chunks on one rank */
                mg_copy(m->ctx, mg_gpt_chunk_input(m, ch, 0)->data,
                        mg_gpt_chunk_output(m, ch - 1, 0)->data,
                        mg_nbytes(mg_gpt_chunk_input(m, ch, 0)));
            mg__gpt_forward(m, ch, 0, slot_mb, m->microbatch_base + (uint64_t)mb);
        }
        if (m->compute_timer) m->compute_timer(m->compute_timer_user, 0, 0);
        m->final_backward = backward && mb == n_micro - 1;   /* fires the gradient hook */
        if (backward && m->compute_timer) m->compute_timer(m->compute_timer_user, 1, 1);
        if (backward)
            for (ch = L->n_chunks - 1; ch >= 0; ch--) mg_gpt_backward(m, ch, 0, dloss);
        if (backward && m->compute_timer) m->compute_timer(m->compute_timer_user, 1, 0);
        m->final_backward = 0;
    }
    m->head_dloss = 0.0f;
    return sum + mg_gpt_loss_sum(m, 0, n_micro - done);
}

/* The row's logits again (the classifier keeps none): lnf's row (all-gathered with sequence
   parallelism) times this slice's Woutᵀ into the classifier's scratch.                     */
MGDEF void mg_gpt_logits_row(mg_gpt *m, int slot, int t, int b, float *out_V) {
    int last = m->layout.n_chunks - 1;
    mg_gpt_acts *a = mg__acts(m, last, slot);
    int64_t row = (int64_t)t * m->layout.micro_batch + b, shape[2];
    int64_t Vl = m->cfg.padded_vocab / m->layout.tp_size;
    float *src = (float *)m->head_scratch;
    mg_tensor xr, out;
    MG_ASSERT(m->layout.chunks[last].has_head, "logits need the head on this rank");
    MG_ASSERT(m->tf.cp.size == 1, "logits of one position with context parallelism (size %d)",
              m->tf.cp.size);
    xr = mg_tensor_rows(mg_tp_gather(&m->tf.tp, &a->lnf, &m->tf.full_a), row, 1);
    shape[0] = 1;
    shape[1] = Vl;
    out = mg_tensor_wrap(src, MG_F32, 2, shape);
    mg_linear_forward(m->ctx, &out, &xr, &m->w[mg__iout(m)], NULL);
    if (m->layout.tp_size > 1) {  /* the row's vocabulary slices, in rank order = id order */
        mg_comm *comm = mg_tp_comm(&m->tf.tp);
        mg_all_gather(comm, &comm->tensor, src, m->vocab_row, Vl, MG_F32);
        src = m->vocab_row;
    }
    mg_copy_to_host(m->ctx, out_V, src, sizeof(float) * (size_t)m->cfg.vocab_size);
}

/* =============================================================================================
   3b. Weight files
   ========================================================================================== */

/* The one map between Megatron's fused QKV rows and the files' separate queries, keys and
   values. Megatron groups the rows by key/value group g < G: the group's heads/G query heads,
   then its key head, then its value head, each hd rows (GPT-2: G = heads, so (head, {q,k,v},
   hd)). The files hold [q | k | v]: heads·hd query rows (head j = group j / (heads/G)),
   then G·hd key rows, then G·hd value rows (llm.c's and GPT-2's c_attn concatenated; the
   Llama family's q_proj, k_proj, v_proj stacked). Row r of ours is row mg__qkv_ext_row(r)
   of theirs.                                                                               */
static int64_t mg__qkv_ext_row(int64_t r, int64_t n_head, int64_t G, int64_t hd) {
    int64_t per = n_head / G, g = r / ((per + 2) * hd), in = r % ((per + 2) * hd);
    if (in < per * hd) return g * per * hd + in;                        /* query heads */
    if (in < (per + 1) * hd) return n_head * hd + g * hd + in - per * hd;  /* key */
    return (n_head + G) * hd + g * hd + in - (per + 1) * hd;             /* value */
}

/* Converts n file elements of dtype dt (possibly unaligned) to fp32. */
static int mg__to_f32(float *dst, const void *src, int64_t n, mg_st_dtype dt) {
    const unsigned char *p = (const unsigned char *)src;
    int64_t i;
    if (dt == MG_ST_F32) { memcpy(dst, src, (size_t)n * 4); return 0; }
    if (dt != MG_ST_BF16 && dt != MG_ST_F16) return -1;
    for (i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = dt == MG_ST_BF16 ? mg_bf16_to_f32(h) : mg_f16_to_f32(h);
    }
    return 0;
}

static int mg__is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A whole decimal number in [lo, hi] (ASCII blanks around it allowed, as Python's int()
   strips them), from a file or a file's metadata: 0 with *out, or -1.                       */
static int mg__parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    long long v;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (!(*s == '-' || (*s >= '0' && *s <= '9'))) return -1;   /* no "+", no "0x" */
    errno = 0;
    v = strtoll(s, &end, 10);
    if (end == s || errno) return -1;
    while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r') end++;
    if (*end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* A dimension read from a file, which must fit an int (and be positive): 0, or -1 with err. */
static int mg__file_dim(const char *path, const char *what, int64_t v, int *out, char *err,
                        size_t errlen) {
    if (v <= 0 || v > INT32_MAX)
        return mg__err(err, errlen, "%s: %s is %lld (must be 1 ... 2147483647)", path, what,
                       (long long)v);
    *out = (int)v;
    return 0;
}

/* The tensor NAME of a weights file (in any of its shards when sharded), or NULL. */
static const mg_st_tensor *mg__wf_find(const mg_weights_file *f, const char *name) {
    int i;
    const mg_st_tensor *t;
    for (i = 0; i < f->n_shards; i++)
        if ((t = mg_st_find(&f->shards[i], name)) != NULL) return t;
    return f->n_shards ? NULL : mg_st_find(&f->st, name);
}

/* Hugging Face architecture: shapes give layers, C, V and positions; heads come from
   config.json in the file's directory (which must then describe the same model, in every
   key that changes the math: mg_hf_config_read), else from the file's metadata, else stay 0. */
static int mg__hf_architecture(mg_weights_file *f, const char *dir, char *err, size_t errlen) {
    char name[160], cfgpath[MG_PATH_MAX];
    const mg_st_tensor *wte, *wpe, *head;
    mg_hf_config hc;
    struct stat sb;
    int l = 0;
    int64_t meta_heads;
    const char *meta;
    snprintf(name, sizeof name, "%swte.weight", f->prefix);
    wte = mg__wf_find(f, name);
    snprintf(name, sizeof name, "%swpe.weight", f->prefix);
    wpe = mg__wf_find(f, name);
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1])
        return mg__err(err, errlen, "%s: wte.weight / wpe.weight missing or not [V, C] and "
                       "[positions, C]", f->path);
    /* the output layer is tied to wte here: an lm_head.weight of its own would be dropped */
    head = mg__wf_find(f, "lm_head.weight");
    if (head && (head->dtype != wte->dtype || head->nbytes != wte->nbytes ||
                 memcmp(head->data, wte->data, wte->nbytes)))
        return mg__err(err, errlen, "%s: lm_head.weight differs from wte.weight (an untied "
                       "output layer); megatron.h ties the output layer to the word embedding, "
                       "so only tied GPT-2 models can be imported", f->path);
    for (;; l++) {
        snprintf(name, sizeof name, "%sh.%d.ln_1.weight", f->prefix, l);
        if (!mg__wf_find(f, name)) break;
    }
    f->cfg.n_layer = l;
    /* safetensors shapes are int64: the model's sizes are ints */
    if (mg__file_dim(f->path, "the rows of wte.weight (vocab_size)", wte->shape[0],
                     &f->cfg.vocab_size, err, errlen) ||
        mg__file_dim(f->path, "the rows of wpe.weight (n_positions)", wpe->shape[0],
                     &f->cfg.max_pos, err, errlen) ||
        mg__file_dim(f->path, "the width of wte.weight (n_embd)", wte->shape[1], &f->cfg.hidden,
                     err, errlen))
        return -1;
    if (snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir) >= (int)sizeof cfgpath)
        return mg__err(err, errlen, "%s: directory name too long", dir);
    /* config.json present (whatever it is: a directory or a pipe is refused by the reader) */
    if (stat(cfgpath, &sb) == 0 || errno != ENOENT) {
        char why[MG_ERRLEN];
        if (mg_hf_config_read(cfgpath, &hc, why, sizeof why))
            return mg__err(err, errlen, "%s", why);
        if (hc.n_layer != l || hc.n_embd != f->cfg.hidden ||
            hc.vocab_size != f->cfg.vocab_size || hc.n_positions != f->cfg.max_pos)
            return mg__err(err, errlen, "%s (n_layer %d, n_embd %d, vocab_size %d, "
                           "n_positions %d) does not match the tensors of %s (%d, %d, %d, %d)",
                           cfgpath, hc.n_layer, hc.n_embd, hc.vocab_size, hc.n_positions,
                           f->path, l, f->cfg.hidden, f->cfg.vocab_size, f->cfg.max_pos);
        f->cfg.n_head = hc.n_head;
        f->cfg.gelu_erf = hc.gelu_exact;
        f->cfg.squared_relu = hc.relu2;
        return 0;
    }
    meta = mg_st_meta(&f->st, "n_head");
    if (meta && mg__parse_int(meta, 1, INT32_MAX, &meta_heads))
        return mg__err(err, errlen, "%s: metadata n_head is '%.40s', not a positive integer",
                       f->path, meta);
    if (meta) f->cfg.n_head = (int)meta_heads;
    return 0;
}

/* Reads and parses a JSON file of at most max bytes: 0 with *text and *js (free both), or -1
   with err naming the file. */
static int mg__json_file(const char *path, size_t max, char **text, mg_json *js, char *err,
                         size_t errlen) {
    char why[MG_ERRLEN];
    size_t len = 0;
    *text = NULL;
    if (mg_read_file(path, max, text, &len, why, sizeof why))
        return mg__err(err, errlen, "%s", why);
    if (mg_json_parse(js, *text, len, why, sizeof why)) {
        MG_FREE(*text);
        return mg__err(err, errlen, "%s: %s", path, why);
    }
    return 0;
}

#define MG__INDEX_MAX_BYTES (64u << 20)   /* a sharded model's index json */

/* ---- Hugging Face Llama family (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM) ---- */
static const char *const mg__llama_archs[3][2] = {
    {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"}};

/* The family member a config.json names (architectures[0], else model_type): 0 … 2, -1 for
   GPT-2 or a config.json that names neither, -2 for an architecture megatron.h does not
   read (err names it). */
static int mg__hf_family(const mg_json *js, const char *path, char *err, size_t errlen) {
    int64_t archs = mg_json_get(js, 0, "architectures"), mt = mg_json_get(js, 0, "model_type");
    char *name = NULL;
    int k, found = -1;
    if (archs >= 0 && js->toks[archs].type == MG_JSON_ARRAY && js->toks[archs].size > 0)
        name = mg_json_strdup(js, archs + 1);
    else if (mt >= 0) {
        char *type = mg_json_strdup(js, mt);
        for (k = 0; k < 3 && type; k++)
            if (!strcmp(type, mg__llama_archs[k][1])) found = k;
        MG_FREE(type);
        return found;
    }
    if (!name) return -1;
    for (k = 0; k < 3; k++)
        if (!strcmp(name, mg__llama_archs[k][0])) found = k;
    if (found < 0 && strcmp(name, "GPT2LMHeadModel") && strcmp(name, "GPT2Model")) {
        mg__err(err, errlen, "%s: architectures [\"%.60s\"] is not a model megatron.h reads "
                "(GPT2LMHeadModel, GPT2Model, LlamaForCausalLM, MistralForCausalLM, "
                "Qwen2ForCausalLM)", path, name);
        found = -2;
    }
    MG_FREE(name);
    return found;
}

/* A JSON file's key of object obj as a number in [lo, hi]; absent or null: def, or an
   error when def is NaN (a required key). */
static int mg__cfg_num(const mg_json *js, int64_t obj, const char *path, const char *key,
                       double def, double lo, double hi, double *out, char *err, size_t errlen) {
    int64_t t = mg_json_get(js, obj, key);
    char shown[64], *end;
    *out = def;
    if (t < 0 || js->toks[t].type == MG_JSON_NULL) {
        if (!isnan(def)) return 0;
        return mg__err(err, errlen, "%s: \"%s\" missing (a number is required)", path, key);
    }
    mg__json_shown(js, t, shown, sizeof shown);
    if (js->toks[t].type == MG_JSON_NUMBER) *out = strtod(js->text + js->toks[t].start, &end);
    if (js->toks[t].type != MG_JSON_NUMBER || !(*out >= lo && *out <= hi))
        return mg__err(err, errlen, "%s: \"%s\" is %s (expected a number in [%g, %g])", path,
                       key, shown, lo, hi);
    return 0;
}

/* config.json's key as a boolean (absent or null: def). */
static int mg__cfg_bool(const mg_json *js, const char *path, const char *key, int def,
                        int *out, char *err, size_t errlen) {
    int64_t t = mg_json_get(js, 0, key);
    char shown[64];
    *out = def;
    if (t < 0 || js->toks[t].type == MG_JSON_NULL) return 0;
    if (js->toks[t].type == MG_JSON_TRUE || js->toks[t].type == MG_JSON_FALSE) {
        *out = js->toks[t].type == MG_JSON_TRUE;
        return 0;
    }
    mg__json_shown(js, t, shown, sizeof shown);
    return mg__err(err, errlen, "%s: \"%s\" is %s (expected true or false)", path, key, shown);
}

/* rope_scaling {"rope_type": "default", …} (or "type"): transformers' plain rotary positions,
   inv_freq = θ^(−2i/d) with no factor applied — the same as rope_scaling null. */
static int mg__rope_is_default(const mg_json *js, int64_t rope_scaling) {
    int64_t type;
    char *name;
    int is_default;
    if (js->toks[rope_scaling].type != MG_JSON_OBJECT) return 0;
    type = mg_json_get(js, rope_scaling, "rope_type");
    if (type < 0) type = mg_json_get(js, rope_scaling, "type");
    name = type >= 0 ? mg_json_strdup(js, type) : NULL;
    is_default = name && !strcmp(name, "default");
    MG_FREE(name);
    return is_default;
}

/* The architecture of a Llama-family config.json (FORMATS.md) as mg_gpt_config switches:
   RMSNorm with rms_norm_eps, SwiGLU of intermediate_size, rotary positions (rope_theta, Llama
   3 scaling), num_key_value_heads query groups, head_dim, an output layer of its own unless
   tie_word_embeddings; biases: Llama's attention_bias (Q/K/V and O) with mlp_bias (gate, up,
   down) — both or neither, megatron.h's --disable-bias-linear covers all linear layers —,
   Qwen2's Q/K/V biases (always), none in Mistral. Absent keys take transformers 4.44's
   defaults for that class; the sizes are required.                                         */
static int mg__hf_llama_config(mg_weights_file *f, const mg_json *js, int family,
                               const char *path, char *err, size_t errlen) {
    static const char *const sizes[6] = {"num_hidden_layers", "hidden_size",
        "num_attention_heads", "max_position_embeddings", "vocab_size", "intermediate_size"};
    const double NaN = NAN;   /* required */
    mg_gpt_config *c = &f->cfg;
    double v[6], groups, head_dim, window;
    int64_t rs = mg_json_get(js, 0, "rope_scaling"), t;
    int k, tie, attn_bias = 0, mlp_bias = 0, sliding = family == 1;
    for (k = 0; k < 6; k++)
        if (mg__cfg_num(js, 0, path, sizes[k], NaN, 1, INT32_MAX, &v[k], err, errlen)) return -1;
    c->n_layer = (int)v[0]; c->hidden = (int)v[1]; c->n_head = (int)v[2];
    c->max_pos = (int)v[3]; c->vocab_size = (int)v[4]; c->ffn_hidden = (int)v[5];
    if (mg__cfg_num(js, 0, path, "num_key_value_heads", v[2], 1, INT32_MAX, &groups, err,
                    errlen) ||
        mg__cfg_num(js, 0, path, "head_dim", (double)(c->hidden / c->n_head), 1, INT32_MAX,
                    &head_dim, err, errlen) ||
        mg__cfg_num(js, 0, path, "rms_norm_eps", 1e-6, 1e-30, 0.5, &f->norm_eps, err, errlen) ||
        mg__cfg_num(js, 0, path, "rope_theta", 10000, 1, 1e30, &f->rope_theta, err, errlen) ||
        mg__cfg_bool(js, path, "tie_word_embeddings", 0, &tie, err, errlen))
        return -1;
    if (family == 0 && (mg__cfg_bool(js, path, "attention_bias", 0, &attn_bias, err, errlen) ||
                        mg__cfg_bool(js, path, "mlp_bias", 0, &mlp_bias, err, errlen)))
        return -1;
    if (family == 0 && attn_bias != mlp_bias)
        return mg__err(err, errlen, "%s: attention_bias %s with mlp_bias %s: megatron.h has "
                       "biases on every linear layer or on none (--disable-bias-linear), or on "
                       "Q/K/V only (Qwen2)", path, attn_bias ? "true" : "false",
                       mlp_bias ? "true" : "false");
    t = mg_json_get(js, 0, "hidden_act");
    if (t >= 0) {
        char *act = mg_json_strdup(js, t), shown[64];
        int silu = act && !strcmp(act, "silu");
        MG_FREE(act);
        mg__json_shown(js, t, shown, sizeof shown);
        if (!silu)
            return mg__err(err, errlen, "%s: hidden_act is %s; megatron.h's SwiGLU computes "
                           "\"silu\"", path, shown);
    }
    /* Mistral's window (Qwen2's with use_sliding_window; null: none) changes nothing while
       it covers every position */
    if (family == 2 && mg__cfg_bool(js, path, "use_sliding_window", 0, &sliding, err, errlen))
        return -1;
    t = mg_json_get(js, 0, "sliding_window");
    if (sliding && !(t >= 0 && js->toks[t].type == MG_JSON_NULL)) {
        if (mg__cfg_num(js, 0, path, "sliding_window", 4096, 1, 1e30, &window, err, errlen))
            return -1;
        if (window < v[3])
            return mg__err(err, errlen, "%s: sliding_window %g is shorter than "
                           "max_position_embeddings %g; megatron.h attends to every earlier "
                           "position (null, or a window >= max_position_embeddings)", path,
                           window, v[3]);
    }
    f->rope_factor = 8;
    if (rs >= 0 && js->toks[rs].type != MG_JSON_NULL && !mg__rope_is_default(js, rs)) {
        int64_t type = mg_json_get(js, rs, "rope_type");
        char *name, shown[64];
        double low = 0, high = 0, orig = 0;
        if (js->toks[rs].type != MG_JSON_OBJECT)
            return mg__err(err, errlen, "%s: rope_scaling is not an object or null", path);
        if (type < 0) type = mg_json_get(js, rs, "type");
        name = type >= 0 ? mg_json_strdup(js, type) : NULL;
        k = name && !strcmp(name, "llama3") ? 1 : name && !strcmp(name, "linear") ? 2 : 0;
        MG_FREE(name);
        if (type >= 0) mg__json_shown(js, type, shown, sizeof shown);
        if (!k)
            return mg__err(err, errlen, "%s: rope_scaling of rope_type %s; megatron.h computes "
                           "\"llama3\" scaling (--use-rope-scaling), \"linear\" "
                           "(--rotary-seq-len-interpolation-factor) or none (null or "
                           "\"default\")", path,
                           type >= 0 ? shown : "(missing)");
        if (k == 2) {   /* positions / factor */
            double lin;
            if (mg__cfg_num(js, rs, path, "factor", NaN, 1, 1e6, &lin, err, errlen)) return -1;
            c->rotary_interpolation = (float)lin;
        }
        if (k == 1 &&
            (mg__cfg_num(js, rs, path, "factor", NaN, 1, 1e6, &f->rope_factor, err, errlen) ||
            mg__cfg_num(js, rs, path, "low_freq_factor", NaN, 1e-6, 1e6, &low, err, errlen) ||
            mg__cfg_num(js, rs, path, "high_freq_factor", NaN, 1e-6, 1e6, &high, err, errlen) ||
            mg__cfg_num(js, rs, path, "original_max_position_embeddings", NaN, 1, INT32_MAX,
                        &orig, err, errlen)))
            return -1;
        if (k == 1) {
            c->use_rope_scaling = 1;
            c->rope_scaling_factor = (float)f->rope_factor;
            c->rope_low_freq_factor = (float)low;
            c->rope_high_freq_factor = (float)high;
            c->rope_original_max_pos = (int)orig;
        }
    }
    c->normalization = MG_NORM_RMSNORM;
    c->norm_epsilon = (float)f->norm_eps;
    c->swiglu = 1;
    c->position_embedding = MG_POS_ROPE;
    c->rotary_base = (float)f->rope_theta;
    c->n_query_groups = (int)groups;
    c->kv_channels = (int)head_dim;
    c->untie_embeddings = !tie;
    c->disable_bias_linear = !attn_bias;
    c->add_qkv_bias = family == 2;
    snprintf(f->arch, sizeof f->arch, "%s", mg__llama_archs[family][0]);
    return 0;
}

/* Opens the safetensors of a Hugging Face directory: DIR/model.safetensors, or every file
   model.safetensors.index.json's weight_map names (each opened once, in the order met). */
static int mg__hf_shards(mg_weights_file *f, const char *dir, char *err, size_t errlen) {
    char path[MG_PATH_MAX], file[MG_PATH_MAX], why[MG_ERRLEN], *text = NULL, **seen;
    mg_json js;
    int64_t map, t;
    int n_seen = 0, i, rc = 0;
    if (mg__path(path, sizeof path, "%s/model.safetensors.index.json", dir))
        return mg__err(err, errlen, "%s: directory name too long", dir);
    f->shards = NULL;
    if (access(path, F_OK) != 0) {
        if (mg__path(f->path, sizeof f->path, "%s/model.safetensors", dir))
            return mg__err(err, errlen, "%s: directory name too long", dir);
        f->shards = (mg_st_file *)MG_MALLOC(sizeof(mg_st_file));
        MG_ASSERT(f->shards, "out of host memory");
        if (mg_st_open(f->path, &f->shards[0], why, sizeof why))
            return mg__err(err, errlen, "%s", why);
        f->n_shards = 1;
        return 0;
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    if (mg__json_file(path, MG__INDEX_MAX_BYTES, &text, &js, err, errlen)) return -1;
    map = mg_json_get(&js, 0, "weight_map");
    if (map < 0 || js.toks[map].type != MG_JSON_OBJECT || js.toks[map].size < 1) {
        mg_json_free(&js);
        MG_FREE(text);
        return mg__err(err, errlen, "%s: no \"weight_map\" object (tensor name -> file name)",
                       path);
    }
    f->shards = (mg_st_file *)MG_MALLOC(sizeof(mg_st_file) * (size_t)js.toks[map].size);
    seen = (char **)MG_MALLOC(sizeof(char *) * (size_t)js.toks[map].size);
    MG_ASSERT(f->shards && seen, "out of host memory");
    /* the object's children: key, value, key, value …; a value is a file name in DIR */
    for (t = map + 1; t < js.toks[map].next && !rc; t = js.toks[t + 1].next) {
        char *name = mg_json_strdup(&js, t + 1);
        int dup = 0;
        if (!name || !name[0] || strchr(name, '/')) {
            rc = mg__err(err, errlen, "%s: weight_map holds a value that is not a file name "
                         "in %s", path, dir);
            MG_FREE(name);
            break;
        }
        for (i = 0; i < n_seen && !dup; i++) dup = !strcmp(seen[i], name);
        if (dup) { MG_FREE(name); continue; }
        seen[n_seen++] = name;
        if (mg__path(file, sizeof file, "%s/%s", dir, name))
            rc = mg__err(err, errlen, "%s/%s: path too long (named in %s)", dir, name, path);
        else if (mg_st_open(file, &f->shards[f->n_shards], why, sizeof why))
            rc = mg__err(err, errlen, "%s (named in %s)", why, path);
        else f->n_shards++;
    }
    for (i = 0; i < n_seen; i++) MG_FREE(seen[i]);
    MG_FREE(seen);
    mg_json_free(&js);
    MG_FREE(text);
    return rc;
}

/* A Llama-family config.json in dir: 1 with f opened (shards, architecture), 0 when dir
   holds no config.json or a GPT-2 one, -1 with err. file: the path given when it named a
   file (then that file alone holds the tensors), else NULL.                                */
static int mg__hf_llama_open(mg_weights_file *f, const char *dir, const char *file, char *err,
                             size_t errlen) {
    char path[MG_PATH_MAX], why[MG_ERRLEN], *text = NULL;
    mg_json js;
    int family, rc;
    struct stat sb;
    if (mg__path(path, sizeof path, "%s/config.json", dir))
        return mg__err(err, errlen, "%s: directory name too long", dir);
    if (stat(path, &sb) != 0 && errno == ENOENT) return 0;
    if (mg__json_file(path, MG__CONFIG_MAX_BYTES, &text, &js, err, errlen)) return -1;
    rc = js.toks[0].type != MG_JSON_OBJECT ? -1 : 0;
    if (rc) mg__err(err, errlen, "%s: not a JSON object", path);
    family = rc ? -1 : mg__hf_family(&js, path, err, errlen);
    if (family == -2) rc = -1;
    if (family >= 0) {
        f->kind = MG_WEIGHTS_HF_LLAMA;
        rc = mg__hf_llama_config(f, &js, family, path, err, errlen);
        if (!rc && file) {
            snprintf(f->path, sizeof f->path, "%s", file);
            f->shards = (mg_st_file *)MG_MALLOC(sizeof(mg_st_file));
            MG_ASSERT(f->shards, "out of host memory");
            if (mg_st_open(file, &f->shards[0], why, sizeof why))
                rc = mg__err(err, errlen, "%s", why);
            else f->n_shards = 1;
        } else if (!rc) {
            rc = mg__hf_shards(f, dir, err, errlen);
        }
        if (!rc) rc = 1;
    }
    mg_json_free(&js);
    MG_FREE(text);
    return rc;
}

MGDEF int mg_weights_open(mg_weights_file *f, const char *path, char *err, size_t errlen) {
    char file[MG_PATH_MAX], dir[MG_PATH_MAX], index[MG_PATH_MAX], why[MG_ERRLEN];
    unsigned char head[4] = {0, 0, 0, 0};
    char *slash;
    int rc;
    memset(f, 0, sizeof *f);
    if (mg__path(file, sizeof file, mg__is_dir(path) ? "%s/model.safetensors" : "%s", path) ||
        mg__path(dir, sizeof dir, "%s", path))
        return mg__err(err, errlen, "%s: path too long (at most %d characters)", path,
                       MG_PATH_MAX - 1);
    if (!mg__is_dir(path)) {
        slash = strrchr(dir, '/');
        if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
    }
    snprintf(f->path, sizeof f->path, "%s", file);
    /* a Llama family's config.json tells it (its weights may be sharded) */
    rc = mg__hf_llama_open(f, dir, mg__is_dir(path) ? NULL : file, err, errlen);
    if (rc) {
        if (rc < 0) mg_weights_close(f);
        return rc < 0 ? -1 : 0;
    }
    /* GPT-2 saved with save_pretrained's max_shard_size: no DIR/model.safetensors, an index */
    if (mg__is_dir(path) && access(file, F_OK) != 0 &&
        !mg__path(index, sizeof index, "%s/model.safetensors.index.json", dir) &&
        access(index, F_OK) == 0) {
        f->kind = MG_WEIGHTS_HF;
        if (mg__hf_shards(f, dir, err, errlen)) { mg_weights_close(f); return -1; }
    } else if (mg_read_head(file, head, 4, why, sizeof why) < 0) {
        /* the first 4 bytes tell the format (a pipe or a directory is refused, not waited on) */
        return mg__err(err, errlen, "%s", why);
    } else if (((uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 |
         (uint32_t)head[3] << 24) == 20240326u) {          /* an llm.c checkpoint's magic */
        const mg_llmc_config *c = &f->llmc.cfg;
        if (mg_llmc_open(file, &f->llmc, why, sizeof why)) return mg__err(err, errlen, "%s", why);
        f->kind = MG_WEIGHTS_LLMC;
        f->cfg.n_layer = c->num_layers;
        f->cfg.hidden = c->channels;
        f->cfg.n_head = c->num_heads;
        f->cfg.max_pos = c->max_seq_len;
        f->cfg.vocab_size = c->vocab_size;
        return 0;
    } else if (mg_st_open(file, &f->st, why, sizeof why)) {
        return mg__err(err, errlen, "%s: neither an llm.c checkpoint (magic 20240326) nor a "
                       "readable safetensors file: %s", file, why);
    }
    if (!f->n_shards && mg_st_find(&f->st, mg__names[MG_WTE].mg)) {
        const char *keys[5] = {"num_layers", "hidden_size", "num_attention_heads",
                               "max_position_embeddings", "vocab_size"};
        int *vals[5], k;
        f->kind = MG_WEIGHTS_MEGATRON;
        vals[0] = &f->cfg.n_layer; vals[1] = &f->cfg.hidden; vals[2] = &f->cfg.n_head;
        vals[3] = &f->cfg.max_pos; vals[4] = &f->cfg.vocab_size;
        for (k = 0; k < 5; k++) {
            const char *v = mg_st_meta(&f->st, keys[k]);
            int64_t x;
            if (!v || mg__parse_int(v, 1, INT32_MAX, &x)) {
                if (v) mg__err(err, errlen, "%s: metadata %s is '%.40s', not a positive integer",
                               file, keys[k], v);
                else mg__err(err, errlen, "%s: metadata key %s missing (not a megatron.h model "
                             "file)", file, keys[k]);
                mg_weights_close(f);
                return -1;
            }
            *vals[k] = (int)x;
        }
        return 0;
    }
    if (mg__wf_find(f, "transformer.wte.weight")) snprintf(f->prefix, sizeof f->prefix,
                                                           "transformer.");
    f->kind = MG_WEIGHTS_HF;
    if (mg__hf_architecture(f, dir, err, errlen)) { mg_weights_close(f); return -1; }
    return 0;
}

MGDEF void mg_weights_close(mg_weights_file *f) {
    int i;
    if (f->kind == MG_WEIGHTS_LLMC) mg_llmc_close(&f->llmc);
    else if (f->kind == MG_WEIGHTS_HF_LLAMA || f->shards) {
        for (i = 0; i < f->n_shards; i++) mg_st_close(&f->shards[i]);
        MG_FREE(f->shards);
    } else if (f->kind) mg_st_close(&f->st);
    memset(f, 0, sizeof *f);
}

/* The file name of a tensor under a naming scheme; layer tensors get the layer index. */
static void mg__ext_name(char *out, size_t n, mg_weights_kind kind, const char *prefix,
                         int tkind, int layer) {
    if (kind == MG_WEIGHTS_MEGATRON) {        /* our names; prefix is a suffix here */
        if (tkind < MG_LAYER_TENSORS)
            snprintf(out, n, "decoder.layers.%d.%s%s", layer, mg__names[tkind].mg, prefix);
        else
            snprintf(out, n, "%s%s", mg__names[tkind].mg, prefix);
    } else if (tkind < MG_LAYER_TENSORS) {
        snprintf(out, n, "%sh.%d.%s", prefix, layer, mg__names[tkind].hf);
    } else {
        snprintf(out, n, "%s%s", prefix, mg__names[tkind].hf);
    }
}

/* The Llama-family name of tensor kind d->kind of layer d->layer; part 0, 1, 2 picks q, k, v
   of the fused QKV.                                                                        */
static void mg__llama_name(char *out, size_t n, int kind, int layer, int part) {
    char leaf[64];
    static const char *const qkv[3] = {"q", "k", "v"};
    snprintf(leaf, sizeof leaf, mg__names[kind].llama, part >= 0 ? qkv[part] : "");
    if (kind < MG_LAYER_TENSORS) snprintf(out, n, "model.layers.%d.%s", layer, leaf);
    else snprintf(out, n, "%s", leaf);
}

/* Reads rows x cols fp32 of a Llama-family tensor (part: q/k/v of the QKV, or -1) into out;
   the word embedding and output layer may have more rows than the vocabulary (the first). */
static int mg__llama_tensor(const mg_weights_file *f, const mg_param_desc *d, int part,
                            int64_t rows, int64_t cols, float *out, char *err, size_t errlen) {
    char name[200];
    const mg_st_tensor *t;
    int vocab = mg__vocab_rows(d->kind);
    mg__llama_name(name, sizeof name, d->kind, d->layer, part);
    t = mg__wf_find(f, name);
    if (!t && d->kind == MG_OUT_W)
        return mg__err(err, errlen, "%s: tensor lm_head.weight missing (config.json says "
                       "tie_word_embeddings false)", f->path);
    if (!t) return mg__err(err, errlen, "%s: tensor %s missing", f->path, name);
    if (t->ndim != d->ndim || t->shape[0] < rows || (!vocab && t->shape[0] != rows) ||
        (d->ndim == 2 && t->shape[1] != cols))
        return mg__err(err, errlen, "%s: tensor %s has shape [%lld%s%lld], expected "
                       "[%lld%s%lld] (from config.json)", f->path, name,
                       (long long)t->shape[0], t->ndim == 2 ? ", " : "",
                       t->ndim == 2 ? (long long)t->shape[1] : 0LL, (long long)rows,
                       d->ndim == 2 ? ", " : "", d->ndim == 2 ? (long long)cols : 0LL);
    if (mg__to_f32(out, t->data, rows * cols, t->dtype))
        return mg__err(err, errlen, "%s: tensor %s has dtype %s (F32, BF16 or F16 expected)",
                       f->path, name, mg_st_dtype_name(t->dtype));
    return 0;
}

/* Reads one GLOBAL tensor of the model (our layout, d->shape) from the file into out. The
   word embedding takes the file's first V rows, the padding rows are zero. finite: a NaN or
   an infinity in it is an error (starting weights; a checkpoint of a diverged run loads as
   it was saved).                                                                           */
static int mg__weights_get(const mg_weights_file *f, const mg_gpt_config *cfg,
                           const mg_param_desc *d, float *out, int finite, char *err,
                           size_t errlen) {
    int64_t rows = d->shape[0], cols = d->ndim == 2 ? d->shape[1] : 1;
    int64_t copy_rows = mg__vocab_rows(d->kind) ? cfg->vocab_size : rows, numel = copy_rows * cols;
    mg_layer_config lc = mg_gpt_layer_config(cfg, 1, MG_F32);
    int64_t r;
    int transposed = f->kind == MG_WEIGHTS_HF && mg__names[d->kind].hf_conv1d;
    float *tmp = (float *)MG_MALLOC((size_t)(rows * cols) * sizeof(float));
    MG_ASSERT(tmp, "out of host memory");
    memset(out, 0, (size_t)(rows * cols) * sizeof(float));
    if (f->kind == MG_WEIGHTS_LLMC) {
        const mg_llmc_param *p = &f->llmc.params[mg__names[d->kind].llmc_index];
        int64_t per = d->layer >= 0 ? p->numel / f->llmc.cfg.num_layers : p->numel;
        size_t esz = mg_st_dtype_size(f->llmc.dtype);
        const char *src = (const char *)f->llmc.data +
                          (size_t)(p->offset + (d->layer >= 0 ? d->layer : 0) * per) * esz;
        mg__to_f32(tmp, src, numel, f->llmc.dtype);  /* the first V rows: row-major prefix */
    } else if (f->kind == MG_WEIGHTS_HF_LLAMA && (d->kind == MG_QKV_W || d->kind == MG_QKV_B)) {
        /* q_proj, k_proj, v_proj stacked into [q | k | v] */
        int64_t q_rows = (int64_t)lc.n_head * lc.head_dim, kv_rows = (int64_t)lc.n_group *
                         lc.head_dim, part_rows[3], at = 0;
        int part;
        part_rows[0] = q_rows; part_rows[1] = part_rows[2] = kv_rows;
        for (part = 0; part < 3; part++) {
            if (mg__llama_tensor(f, d, part, part_rows[part], cols, tmp + at * cols, err, errlen)) {
                MG_FREE(tmp);
                return -1;
            }
            at += part_rows[part];
        }
    } else if (f->kind == MG_WEIGHTS_HF_LLAMA) {
        if (mg__llama_tensor(f, d, -1, copy_rows, cols, tmp, err, errlen)) {
            MG_FREE(tmp);
            return -1;
        }
    } else {
        char name[200];
        const mg_st_tensor *t;
        int64_t want0 = transposed ? cols : copy_rows, want1 = transposed ? rows : cols;
        mg__ext_name(name, sizeof name, f->kind, f->prefix, d->kind, d->layer);
        t = mg__wf_find(f, name);
        if (!t) {
            MG_FREE(tmp);
            return mg__err(err, errlen, "%s: tensor %s missing", f->path, name);
        }
        /* the word embedding may carry padding rows (our files: Vp rows): take the first V */
        if (t->ndim != d->ndim || t->shape[0] < want0 ||
            (!mg__vocab_rows(d->kind) && t->shape[0] != want0) ||
            (d->ndim == 2 && t->shape[1] != want1)) {
            MG_FREE(tmp);
            return mg__err(err, errlen, "%s: tensor %s has shape [%lld%s%lld], expected "
                           "[%lld%s%lld]",
                           f->path, name, (long long)t->shape[0], t->ndim == 2 ? ", " : "",
                           t->ndim == 2 ? (long long)t->shape[1] : 0LL, (long long)want0,
                           d->ndim == 2 ? ", " : "", d->ndim == 2 ? (long long)want1 : 0LL);
        }
        if (mg__to_f32(tmp, t->data, numel, t->dtype)) {
            MG_FREE(tmp);
            return mg__err(err, errlen, "%s: tensor %s has dtype %s (F32, BF16 or F16 expected)",
                           f->path, name, mg_st_dtype_name(t->dtype));
        }
    }
    for (r = 0; finite && r < numel && isfinite(tmp[r]); r++) {}
    if (finite && r < numel) {   /* a NaN or an infinity: every loss of the run would be nan */
        char name[200];
        float bad = tmp[r];
        if (f->kind == MG_WEIGHTS_HF || f->kind == MG_WEIGHTS_MEGATRON)
            mg__ext_name(name, sizeof name, f->kind, f->prefix, d->kind, d->layer);
        else snprintf(name, sizeof name, "%s", d->name);
        MG_FREE(tmp);
        return mg__err(err, errlen, "%s: tensor %s holds %s at element %lld (in the file's "
                       "order); weights must be finite (every loss would be nan)", f->path,
                       name, isnan(bad) ? "nan" : bad > 0 ? "inf" : "-inf", (long long)r);
    }
    if (cfg->layernorm_1p && f->kind != MG_WEIGHTS_MEGATRON &&
        (d->kind == MG_LN1_W || d->kind == MG_LN2_W || d->kind == MG_LNF_W))
        for (r = 0; r < numel; r++) tmp[r] -= 1.0f;   /* the scale → its zero-centred weight */
    if (transposed) {                 /* Conv1D (in, out) -> Linear (out, in) */
        int64_t c;
        for (r = 0; r < rows; r++)
            for (c = 0; c < cols; c++) out[r * cols + c] = tmp[c * rows + r];
    } else {
        memcpy(out, tmp, (size_t)numel * sizeof(float));
    }
    if (f->kind != MG_WEIGHTS_MEGATRON && (d->kind == MG_QKV_W || d->kind == MG_QKV_B)) {
        memcpy(tmp, out, (size_t)(rows * cols) * sizeof(float));
        for (r = 0; r < rows; r++)
            memcpy(out + r * cols, tmp + mg__qkv_ext_row(r, lc.n_head, lc.n_group,
                                                         lc.head_dim) * cols,
                   (size_t)cols * sizeof(float));
    }
    MG_FREE(tmp);
    return 0;
}

/* Names the first architecture field where a and b differ (writes nothing if equal). */
static int mg__config_mismatch(const mg_gpt_config *a, const mg_gpt_config *b, const char *what,
                               char *err, size_t errlen) {
    const char *flags[6] = {"--num-layers", "--hidden-size", "--num-attention-heads",
                            "--max-position-embeddings", "--vocab-size", NULL};
    int va[5], vb[5], k;
    va[0] = a->n_layer; va[1] = a->hidden; va[2] = a->n_head; va[3] = a->max_pos;
    va[4] = a->vocab_size;
    vb[0] = b->n_layer; vb[1] = b->hidden; vb[2] = b->n_head; vb[3] = b->max_pos;
    vb[4] = b->vocab_size;
    for (k = 0; k < 5; k++)
        if (va[k] != vb[k])
            return mg__err(err, errlen, "%s %d does not match %s, which has %d", flags[k],
                           va[k], what, vb[k]);
    return 0;
}

/* Names the first switch of the Llama family's layer (resolved: defaults filled in) where
   the model a and the file's config.json b differ (writes nothing if equal).              */
static int mg__layer_mismatch(const mg_gpt_config *a, const mg_gpt_config *b, const char *what,
                              char *err, size_t errlen) {
    static const char *const flags[14] = {"--normalization", "--swiglu", "--ffn-hidden-size",
        "--position-embedding-type", "--num-query-groups", "--kv-channels",
        "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
        "--use-rope-scaling", "--norm-epsilon", "--rotary-base", "--rope-scaling-factor",
        "--rotary-percent"};
    static const char *const acts[3] = {"the tanh GELU", "the exact (erf) GELU",
                                        "the squared ReLU"};   /* by mg_act_kind */
    mg_layer_config x = mg_gpt_layer_config(a, 1, MG_F32), y = mg_gpt_layer_config(b, 1, MG_F32);
    double va[14], vb[14];
    int k;
    va[0] = x.norm.rms; va[1] = x.swiglu; va[2] = x.ffn_hidden; va[3] = x.rope;
    va[4] = x.n_group; va[5] = x.head_dim; va[6] = a->untie_embeddings; va[7] = !x.bias;
    va[8] = x.qkv_bias; va[9] = x.rope_freq.llama3; va[10] = x.norm.eps;
    va[11] = x.rope_freq.base; va[12] = x.rope_freq.llama3 ? x.rope_freq.factor : 0;
    va[13] = x.rot_dim;
    vb[0] = y.norm.rms; vb[1] = y.swiglu; vb[2] = y.ffn_hidden; vb[3] = y.rope;
    vb[4] = y.n_group; vb[5] = y.head_dim; vb[6] = b->untie_embeddings; vb[7] = !y.bias;
    vb[8] = y.qkv_bias; vb[9] = y.rope_freq.llama3; vb[10] = y.norm.eps;
    vb[11] = y.rope_freq.base; vb[12] = y.rope_freq.llama3 ? y.rope_freq.factor : 0;
    vb[13] = y.rot_dim;
    for (k = 0; k < 14; k++)
        if (va[k] != vb[k])
            return mg__err(err, errlen, "the model's %s (%g) does not match %s, which has %g",
                           flags[k], va[k], what, vb[k]);
    if (!x.swiglu && x.act != y.act)   /* the GELU MLP's activation */
        return mg__err(err, errlen, "the model's MLP computes %s, %s computes %s (the flags: "
                       "--squared-relu, --no-bias-gelu-fusion, --openai-gelu)",
                       acts[x.act], what, acts[y.act]);
    return 0;
}

/* The architecture of f against the model's cfg. */
static int mg__weights_match(const mg_gpt_config *cfg, const mg_weights_file *f, char *err,
                             size_t errlen) {
    mg_gpt_config fc = f->cfg;
    if (!fc.n_head) fc.n_head = cfg->n_head;   /* a safetensors file without config.json */
    if (mg__config_mismatch(cfg, &fc, f->path, err, errlen)) return -1;
    /* the file's architecture switches: config.json's for the Llama family; GPT-2's (all
       zero in fc) for llm.c checkpoints and Hugging Face GPT-2 files, whose tensors hold no
       gate, no untied output layer, … (our own files carry no switches: a difference shows
       as a missing tensor)                                                                 */
    return f->kind != MG_WEIGHTS_MEGATRON && mg__layer_mismatch(cfg, &fc, f->path, err, errlen)
           ? -1 : 0;
}

/* Every tensor of f that a model of cfg takes, read as mg_gpt_import reads it (present, of
   its shape and dtype, finite), without a model: a weights file checked before any work.  */
static int mg__weights_verify(const mg_gpt_config *cfg, const mg_weights_file *f, char *err,
                              size_t errlen) {
    mg_gpt_layout whole = mg_gpt_layout_single(cfg, 1, 1, 1);
    int n = mg__build_params(cfg, &whole, NULL, NULL), i, rc = 0;
    mg_param_desc *all;
    float *global;
    if (mg__weights_match(cfg, f, err, errlen)) return -1;
    all = (mg_param_desc *)MG_MALLOC(sizeof(mg_param_desc) * (size_t)n);
    global = (float *)MG_MALLOC((size_t)mg__max_global_elems(cfg) * sizeof(float));
    MG_ASSERT(all && global, "out of host memory");
    mg__build_params(cfg, &whole, all, NULL);
    for (i = 0; i < n && !rc; i++) rc = mg__weights_get(f, cfg, &all[i], global, 1, err, errlen);
    MG_FREE(all);
    MG_FREE(global);
    return rc;
}

MGDEF int mg_gpt_import(mg_gpt *m, const mg_weights_file *f, char *err, size_t errlen) {
    int i;
    int64_t biggest = 1;
    float *global;
    if (mg__weights_match(&m->cfg, f, err, errlen)) return -1;
    for (i = 0; i < m->n_params; i++)
        if (m->params[i].shape[0] * (m->params[i].ndim == 2 ? m->params[i].shape[1] : 1) > biggest)
            biggest = m->params[i].shape[0] * (m->params[i].ndim == 2 ? m->params[i].shape[1] : 1);
    global = (float *)MG_MALLOC((size_t)biggest * sizeof(float));
    MG_ASSERT(global, "out of host memory");
    for (i = 0; i < m->n_params; i++) {
        if (mg__weights_get(f, &m->cfg, &m->params[i], global, 0, err, errlen)) {
            MG_FREE(global);
            return -1;
        }
        mg_gpt_global_to_shard(m, i, mg_gpt_fp32_params(m), global);
    }
    if (m->layout.shard_master) m->fp32_staging = MG_STAGING_WRITTEN;
    MG_FREE(global);
    return 0;
}

/* Largest global tensor of the model, in elements. */
static int64_t mg__max_global(const mg_gpt *m) {
    return mg__max_global_elems(&m->cfg);
}

/* The pipeline rank that exports tensor d of the whole model: the lowest one whose stages
   hold it — rank 0 for the tied word embedding, which the last stage holds too (its copy is
   equal: the two gradients are all-reduced). A layer lives on the rank of its virtual stage
   (mg_gpt_layout_pipeline). One stage: rank 0.                                              */
static int mg__export_source(const mg_gpt *m, const mg_param_desc *d) {
    int p = m->layout.pp_size, r, c;
    for (r = 0; r < p && p > 1; r++) {
        mg_gpt_layout L = mg_gpt_layout_pipeline(&m->cfg, 1, 1, r, p, m->layout.n_chunks, 1, 0);
        for (c = 0; c < L.n_chunks; c++) {
            const mg_gpt_chunk *ch = &L.chunks[c];
            int lnf = d->kind == MG_LNF_W || d->kind == MG_LNF_B;
            if (d->layer >= 0 ? d->layer >= ch->layer_begin && d->layer < ch->layer_end
                              : lnf ? ch->has_head : ch->has_embedding)
                return r;
        }
    }
    return 0;
}

/* Moves a host tensor of n floats from pipeline rank src to pipeline rank 0, through device
   scratch (the group may be NCCL's). Only the pipeline group of the writer, world rank 0 —
   tensor rank 0, data-parallel rank 0 — moves it: the other groups hold equal copies.     */
static void mg__export_move(mg_gpt *m, float *host, int64_t n, int src) {
    mg_comm *comm = m->layout.comm;
    int me = m->layout.pp_rank;
    size_t mark, bytes = (size_t)n * sizeof(float);
    float *dev;
    MG_ASSERT(comm, "pipeline size %d needs the layout's comm", m->layout.pp_size);
    if (comm->tensor.rank != 0 || comm->data.rank != 0 || (me != src && me != 0)) return;
    mark = mg_arena_mark(m->ctx);
    dev = (float *)mg_alloc(m->ctx, bytes);
    if (me == src) {
        mg_copy_to_device(m->ctx, dev, host, bytes);
        mg_send(comm, &comm->pipeline, dev, n, MG_F32, 0);
    } else {
        mg_recv(comm, &comm->pipeline, dev, n, MG_F32, src);
        mg_copy_to_host(m->ctx, host, dev, bytes);
    }
    mg_arena_release(m->ctx, mark);
}

/* The shortest decimal text of v that reads back as the same number (as a float when
   as_float: the model keeps eps and θ in fp32, and so does transformers' arithmetic). */
static void mg__num_text(char *out, size_t n, double v, int as_float) {
    int p;
    if (v == floor(v) && fabs(v) < 1e15) {   /* whole: "4.0", a float to Python too */
        snprintf(out, n, "%.1f", v);
        return;
    }
    for (p = 1; p <= 17; p++) {
        double back;
        snprintf(out, n, "%.*g", p, v);
        back = strtod(out, NULL);
        if (as_float ? (float)back == (float)v : back == v) return;
    }
}

/* Which Llama-family class holds this model in transformers 4.44 (0 Llama, 1 Mistral,
   2 Qwen2; mg__llama_archs), or -1 with err naming what none of them computes. Qwen2: Q/K/V
   biases only; Mistral: a head dimension other than hidden/heads (4.44's Llama and Qwen2
   derive it) without biases or rope scaling; else Llama (biases everywhere or nowhere).     */
static int mg__llama_export_class(const mg_gpt_config *c, const char *dir, char *err,
                                  size_t errlen) {
    mg_layer_config k = mg_gpt_layer_config(c, 1, MG_F32);
    int own_hd = (int64_t)k.head_dim * c->n_head != c->hidden;
    const char *bad = !k.norm.rms ? "--normalization LayerNorm"
                      : !k.swiglu ? "an MLP without --swiglu"
                      : !k.rope ? "positions other than --position-embedding-type rope"
                      : k.rot_dim != k.head_dim ? "--rotary-percent below 1"
                      : k.bias && own_hd ? "biases with --kv-channels other than hidden/heads"
                      : !k.bias && k.qkv_bias && (own_hd || k.rope_freq.llama3)
                          ? "--add-qkv-bias with --kv-channels or --use-rope-scaling"
                      : own_hd && k.rope_freq.llama3
                          ? "--kv-channels other than hidden/heads with --use-rope-scaling"
                          : NULL;
    if (bad)
        return mg__err(err, errlen, "--export-hf %s: this model has %s, which no Hugging Face "
                       "class megatron.h writes computes (GPT2LMHeadModel, LlamaForCausalLM, "
                       "MistralForCausalLM, Qwen2ForCausalLM)", dir, bad);
    return !k.bias && k.qkv_bias ? 2 : own_hd ? 1 : 0;
}

/* config.json of a Llama-family class (transformers 4.44's keys, every one that decides the
   math stated; torch_dtype float32: the file's tensors are fp32).                          */
static int mg__llama_config_write(const mg_gpt_config *c, int cls, const char *path, char *err,
                                  size_t errlen) {
    mg_layer_config k = mg_gpt_layer_config(c, 1, MG_F32);
    char s[2048], eps[32], theta[32], fac[32], lo[32], hi[32], rope[300];
    int n;
    mg__num_text(eps, sizeof eps, k.norm.eps, 1);
    mg__num_text(theta, sizeof theta, k.rope_freq.base, 1);
    mg__num_text(fac, sizeof fac, k.rope_freq.factor, 1);
    mg__num_text(lo, sizeof lo, k.rope_freq.low_freq_factor, 1);
    mg__num_text(hi, sizeof hi, k.rope_freq.high_freq_factor, 1);
    if (k.rope_freq.llama3 && k.rope_freq.linear_factor != 1.0f)
        return mg__err(err, errlen, "%s: Llama 3's rope scaling and a linear position "
                       "interpolation together have no config.json form (its rope_scaling is "
                       "one type)", path);
    if (k.rope_freq.llama3)
        snprintf(rope, sizeof rope, "{\"rope_type\": \"llama3\", \"factor\": %s, "
                 "\"low_freq_factor\": %s, \"high_freq_factor\": %s, "
                 "\"original_max_position_embeddings\": %d}", fac, lo, hi,
                 k.rope_freq.original_max_pos);
    else if (k.rope_freq.linear_factor != 1.0f) {
        mg__num_text(fac, sizeof fac, k.rope_freq.linear_factor, 1);
        snprintf(rope, sizeof rope, "{\"rope_type\": \"linear\", \"factor\": %s}", fac);
    } else snprintf(rope, sizeof rope, "null");
    n = snprintf(s, sizeof s, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
        "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
        "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
        "  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n"
        "  \"rope_scaling\": %s,\n  \"max_position_embeddings\": %d,\n  \"vocab_size\": %d,\n"
        "  \"tie_word_embeddings\": %s,\n%s  \"torch_dtype\": \"float32\"\n}\n",
        mg__llama_archs[cls][0], mg__llama_archs[cls][1], c->hidden, k.ffn_hidden, c->n_layer,
        c->n_head, k.n_group, k.head_dim, eps, theta, rope, c->max_pos, c->vocab_size,
        c->untie_embeddings ? "false" : "true",
        cls == 0 ? (k.bias ? "  \"attention_bias\": true,\n  \"mlp_bias\": true,\n"
                           : "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n")
        : cls == 1 ? "  \"sliding_window\": null,\n"
                   : "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n");
    return mg_atomic_write(path, s, (size_t)n, err, errlen);
}

/* Every tensor of the WHOLE model, in the serial model's flat order (so the file does not
   depend on the layout): the stage that holds it gathers it over its tensor group
   (mg_gpt_shard_to_global, every rank of that stage), then, with a pipeline, it travels
   from that stage's pipeline rank to rank 0, where world rank 0 writes it. The fused QKV
   goes back to [q | k | v] (mg__qkv_ext_row): GPT-2's c_attn, or the Llama family's
   q_proj, k_proj, v_proj (three tensors of the file: n_out = n_all + 2 per QKV tensor).  */
MGDEF int mg_gpt_export_hf(mg_gpt *m, const char *dir, char *err, size_t errlen) {
    char path[MG_PATH_MAX], why[MG_ERRLEN];
    mg_gpt_layout whole = mg_gpt_layout_single(&m->cfg, 1, 1, 1);   /* global shapes */
    int n_all = mg__build_params(&m->cfg, &whole, NULL, NULL), n_out = n_all;
    mg_param_desc *all = (mg_param_desc *)MG_MALLOC(sizeof(mg_param_desc) * (size_t)n_all);
    mg_st_spec *spec = (mg_st_spec *)MG_MALLOC(sizeof(mg_st_spec) * (size_t)n_all * 3);
    char (*names)[160] = (char (*)[160])MG_MALLOC(160 * (size_t)n_all * 3);
    int *first = (int *)MG_MALLOC(sizeof(int) * (size_t)n_all);   /* param -> its first spec */
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    float *global = (float *)MG_MALLOC((size_t)mg__max_global(m) * sizeof(float));
    float *ext = (float *)MG_MALLOC((size_t)mg__max_global(m) * sizeof(float));
    mg_st_writer w;
    mg_hf_config hc;
    mg_layer_config lc = mg_gpt_layer_config(&m->cfg, 1, MG_F32);
    int i, part, rc = 0, llama = !mg_gpt_is_gpt2(&m->cfg), cls = 0;
    int writer = !m->layout.comm || m->layout.comm->world_rank == 0;   /* writes the files */
    MG_ASSERT(all && spec && names && first && global && ext, "out of host memory");
    if (llama && (cls = mg__llama_export_class(&m->cfg, dir, err, errlen)) < 0) {
        MG_FREE(all); MG_FREE(spec); MG_FREE(names); MG_FREE(first); MG_FREE(global);
        MG_FREE(ext);
        return -1;
    }
    MG_ASSERT(!m->layout.shard_master || m->fp32_staging, "export of a model whose master "
              "weights are sharded: gather them first (mg_adamw_gather_master)");
    mg__build_params(&m->cfg, &whole, all, NULL);     /* n_all tensors */
    memset(spec, 0, sizeof(mg_st_spec) * (size_t)n_all * 3);
    if (writer && !mg__is_dir(dir) && mkdir(dir, 0755) != 0)
        rc = mg__err(err, errlen, "%s: cannot create directory (%s)", dir, strerror(errno));
    for (i = 0, n_out = 0; i < n_all; i++) {
        const mg_param_desc *d = &all[i];
        int conv = !llama && mg__names[d->kind].hf_conv1d;
        int qkv = llama && (d->kind == MG_QKV_W || d->kind == MG_QKV_B);
        first[i] = n_out;
        for (part = qkv ? 0 : -1; part < (qkv ? 3 : 0); part++, n_out++) {
            mg_st_spec *o = &spec[n_out];
            if (llama) mg__llama_name(names[n_out], 160, d->kind, d->layer, part);
            else mg__ext_name(names[n_out], 160, MG_WEIGHTS_HF, "", d->kind, d->layer);
            o->name = names[n_out];
            o->dtype = MG_ST_F32;
            o->ndim = d->ndim;
            o->shape[0] = conv ? d->shape[1] : mg__vocab_rows(d->kind) ? m->cfg.vocab_size
                          : part == 0 ? (int64_t)lc.n_head * lc.head_dim
                          : part > 0  ? (int64_t)lc.n_group * lc.head_dim : d->shape[0];
            o->shape[1] = conv ? d->shape[0] : d->shape[1];
        }
    }
    if (writer && !rc && mg__path(path, sizeof path, "%s/model.safetensors", dir))
        rc = mg__err(err, errlen, "%s: directory name too long", dir);
    if (writer && !rc &&
        mg_st_writer_begin(&w, path, NULL, 1, spec, n_out, mk, mv, 1, why, sizeof why))
        rc = mg__err(err, errlen, "%s", why);
    for (i = 0; i < n_all; i++) {
        const mg_param_desc *d = &all[i];
        int64_t rows = d->shape[0], cols = d->ndim == 2 ? d->shape[1] : 1, r, c, at = 0;
        int src = mg__export_source(m, d), mine = mg_gpt_find_param(m, d->name);
        int last = i + 1 < n_all ? first[i + 1] : n_out;
        if (mine >= 0 && m->layout.pp_rank == src)   /* collective: the stage's every rank */
            mg_gpt_shard_to_global(m, mine, mg_gpt_fp32_params(m), global);
        if (src != 0) mg__export_move(m, global, rows * cols, src);
        if (!writer || rc) continue;
        if (d->kind == MG_QKV_W || d->kind == MG_QKV_B) {   /* back to [q | k | v] */
            for (r = 0; r < rows; r++)
                memcpy(ext + mg__qkv_ext_row(r, lc.n_head, lc.n_group, lc.head_dim) * cols,
                       global + r * cols, (size_t)cols * sizeof(float));
            memcpy(global, ext, (size_t)(rows * cols) * sizeof(float));
        }
        if (m->cfg.layernorm_1p &&   /* zero-centred weight → the scale the norm applies */
            (d->kind == MG_LN1_W || d->kind == MG_LN2_W || d->kind == MG_LNF_W))
            for (r = 0; r < rows * cols; r++) global[r] += 1.0f;
        if (!llama && mg__names[d->kind].hf_conv1d) {          /* Linear -> Conv1D (in, out) */
            for (r = 0; r < rows; r++)
                for (c = 0; c < cols; c++) ext[c * rows + r] = global[r * cols + c];
            memcpy(global, ext, (size_t)(rows * cols) * sizeof(float));
        }
        for (part = first[i]; part < last && !rc; part++) {   /* q, k, v: consecutive rows */
            int64_t n = spec[part].shape[0] * (d->ndim == 2 ? spec[part].shape[1] : 1);
            if (mg_st_writer_write(&w, part, 0, global + at, n, why, sizeof why)) {
                mg_st_writer_abort(&w);
                rc = mg__err(err, errlen, "%s", why);
            }
            at += n;
        }
    }
    if (writer && !rc && mg_st_writer_commit(&w, why, sizeof why))
        rc = mg__err(err, errlen, "%s", why);
    hc.n_layer = m->cfg.n_layer;
    hc.n_head = m->cfg.n_head;
    hc.n_embd = m->cfg.hidden;
    hc.n_positions = m->cfg.max_pos;
    hc.vocab_size = m->cfg.vocab_size;
    hc.gelu_exact = m->cfg.gelu_erf;
    hc.relu2 = m->cfg.squared_relu;
    if (writer && !rc && mg__path(path, sizeof path, "%s/config.json", dir))
        rc = mg__err(err, errlen, "%s: directory name too long", dir);
    if (writer && !rc && (llama ? mg__llama_config_write(&m->cfg, cls, path, why, sizeof why)
                                : mg_hf_config_write(path, &hc, why, sizeof why)))
        rc = mg__err(err, errlen, "%s", why);
    MG_FREE(all);
    MG_FREE(spec);
    MG_FREE(names);
    MG_FREE(first);
    MG_FREE(global);
    MG_FREE(ext);
    if (mg__group_agree(m, m->layout.comm, MG_GROUP_WORLD, rc) && !rc)
        return mg__err(err, errlen, "rank 0 could not export");
    return rc ? -1 : 0;
}

/* =============================================================================================
   4. Optimizer
   ========================================================================================== */
/* mg_lr_at's and mg_wd_at's math, host and device (the fused step's learning rate and weight
   decay are made on the device).                                                           */
#define MG__PI 3.14159265358979323846
/* Between max_lr and min_lr: the schedule's own pair, or its decoupled one (Megatron's
   get_lr(param_group) reads the group's max_lr and min_lr; the warm-up's init_lr is shared).  */
MG_HD static inline double mg__lr_between(const mg_lr_schedule *s, int64_t num_steps,
                                          double max_lr, double min_lr) {
    double ratio, coeff;
    if (s->warmup_iters > 0 && (double)num_steps <= s->warmup_iters)
        return s->init_lr + (max_lr - s->init_lr) * (double)num_steps / s->warmup_iters;
    if (s->style == MG_LR_CONSTANT) return max_lr;
    if ((double)num_steps > s->decay_iters) return min_lr;
    if (s->style == MG_LR_INVERSE_SQRT) {
        double samples = s->samples_per_iter > 0 ? (double)s->samples_per_iter : 1.0;
        double warmup = fmax(s->warmup_iters * samples, 1.0);
        double now = fmax((double)num_steps * samples, 1.0);
        double lr = max_lr * sqrt(warmup) / sqrt(now);
        return lr > min_lr ? lr : min_lr;
    }
    if (s->style == MG_LR_WSD) {
        double anneal = s->decay_iters - s->wsd_decay_iters;
        ratio = (double)num_steps <= anneal ? 0.0
                                            : ((double)num_steps - anneal) / s->wsd_decay_iters;
        coeff = (double)num_steps <= anneal        ? 1.0
              : s->wsd_style == MG_WSD_EXPONENTIAL ? 2.0 * pow(0.5, ratio) - 1.0
              : s->wsd_style == MG_WSD_LINEAR      ? 1.0 - ratio
              : s->wsd_style == MG_WSD_COSINE      ? 0.5 * (cos(MG__PI * ratio) + 1.0)
                                                   : 1.0 - sqrt(ratio);
    } else {
        ratio = ((double)num_steps - s->warmup_iters) / (s->decay_iters - s->warmup_iters);
        coeff = s->style == MG_LR_LINEAR ? 1.0 - ratio : 0.5 * (cos(MG__PI * ratio) + 1.0);
    }
    return min_lr + coeff * (max_lr - min_lr);
}
MG_HD static inline double mg__lr_at(const mg_lr_schedule *s, int64_t num_steps) {
    return mg__lr_between(s, num_steps, s->max_lr, s->min_lr);
}
MG_HD static inline double mg__wd_at(const mg_lr_schedule *s, int64_t num_steps) {
    double ratio, coeff;
    if ((double)num_steps > s->wd_incr_iters || s->wd_style == MG_WD_CONSTANT) return s->end_wd;
    ratio = (double)num_steps / s->wd_incr_iters;
    coeff = s->wd_style == MG_WD_LINEAR ? ratio : 0.5 * (cos(MG__PI * (1.0 - ratio)) + 1.0);
    return s->start_wd + coeff * (s->end_wd - s->start_wd);
}
MGDEF double mg_lr_at(const mg_lr_schedule *s, int64_t num_steps) {
    return mg__lr_at(s, num_steps);
}
MGDEF double mg_wd_at(const mg_lr_schedule *s, int64_t num_steps) {
    return mg__wd_at(s, num_steps);
}

/* ---- Exact sums of doubles over a group ---------------------------------------------------
   Each rank's partial sum x travels bit for bit (its 8 bytes in the first two of three float
   slots; collectives only copy them) with a flag (e.g. "not finite") in the third, by an
   all-gather; every rank adds them in rank order, so all get the same sum, as precise as a
   serial one — also a finite x beyond the float range (a Σg² of a diverging run), which a
   float could not carry. dev has room for 3 + 3·size floats, host 3·size.                  */
static double mg__group_sum(mg_ctx *ctx, mg_comm *comm, mg_group *g, float *dev, float *host,
                            double local, int *flag) {
    float mine[3];
    double total = 0;
    int r, any = 0, bad_here = !isfinite(local);
    if (bad_here) local = 0;                                        /* flagged instead */
    memcpy(mine, &local, sizeof local);
    mine[2] = (float)(bad_here || (flag && *flag));
    mg_copy_to_device(ctx, dev, mine, sizeof mine);
    mg_all_gather(comm, g, dev, dev + 3, 3, MG_F32);
    mg_copy_to_host(ctx, host, dev + 3, sizeof(float) * 3 * (size_t)g->size);
    for (r = 0; r < g->size; r++) {
        double x;
        memcpy(&x, host + 3 * r, sizeof x);
        total += x;
        if (host[3 * r + 2] != 0) any = 1;
    }
    if (flag) *flag = any;
    else if (any) total = NAN;          /* no flag to carry it: the sum itself says so */
    return total;
}

/* ---- 4b. Data parallelism ------------------------------------------------------------------ */
static double mg__now_ms(void);
MGDEF int64_t mg_dp_default_bucket(int dp_size) {
    return dp_size > 40 ? (int64_t)1000000 * dp_size : 40000000;
}

MGDEF size_t mg_dp_arena_bytes(int world_size) {
    return (size_t)(3 + 3 * world_size) * sizeof(float) + 256;
}

MGDEF void mg_dp_init(mg_dp *dp, mg_gpt *m, mg_comm *comm, int distributed, int64_t bucket_elems) {
    int64_t unit, n = m->n_elems, per, k, first_cut = 0;
    mg_group *g = comm ? (comm->context.size > 1 ? &comm->data_context : &comm->data) : NULL;
    int d = g ? g->size : 1, world = comm ? comm->world_size : 1;
    memset(dp, 0, sizeof *dp);
    dp->model = m;
    dp->comm = d > 1 ? comm : NULL;
    dp->group = d > 1 ? g : NULL;
    dp->size = d > 1 ? d : 1;
    dp->rank = d > 1 ? g->rank : 0;
    dp->distributed = distributed && d > 1;
    dp->overlap = 1;
    MG_ASSERT((m->layout.dp_size > 1 ? m->layout.dp_size : 1) == dp->size,
              "the model's layout has dp_size %d, the data group %d ranks", m->layout.dp_size,
              dp->size);
    unit = 64 * (int64_t)dp->size;                 /* n is a multiple of it (mg__build_params) */
    if (bucket_elems <= 0) bucket_elems = mg_dp_default_bucket(dp->size);
    /* With a pipeline the tied word embedding (flat offset 0) is reduced over the data group
       only after its embedding-group all-reduce at the flush: as Megatron-LM does, it gets a
       bucket of its own — [0, its end rounded up to a unit) — so that it holds back nothing
       else; the buckets of the rest start during the backward.                            */
    if (mg__wte_split_over_stages(m)) {
        const mg_param_desc *wte = &m->params[m->idx_global[MG_WTE - MG_LAYER_TENSORS]];
        first_cut = (wte->offset + wte->numel + unit - 1) / unit * unit;
        if (first_cut >= n) first_cut = 0;
    }
    per = (bucket_elems + unit - 1) / unit;        /* units per bucket, at most ~200 buckets */
    if (per < (n / unit + 199) / 200) per = (n / unit + 199) / 200;
    if (per < 1) per = 1;
    dp->n_buckets = (first_cut > 0) + (int)(((n - first_cut) / unit + per - 1) / per);
    if (dp->n_buckets < 1) dp->n_buckets = 1;
    dp->bucket_begin = (int64_t *)MG_MALLOC(sizeof(int64_t) * (size_t)(dp->n_buckets + 1));
    dp->req = (mg_request *)MG_MALLOC(sizeof(mg_request) * (size_t)dp->n_buckets);
    dp->pending = (int64_t *)MG_MALLOC(sizeof(int64_t) * (size_t)dp->n_buckets);
    dp->host_scalars = (float *)MG_MALLOC(sizeof(float) * 3 * (size_t)world);
    MG_ASSERT(dp->bucket_begin && dp->req && dp->pending && dp->host_scalars,
              "out of host memory");
    for (k = 0; k < dp->n_buckets; k++) {
        dp->bucket_begin[k] = first_cut > 0 ? (k ? first_cut + (k - 1) * per * unit : 0)
                                            : k * per * unit;
        dp->req[k].id = 0;
        dp->pending[k] = 0;
    }
    dp->bucket_begin[dp->n_buckets] = n;
    dp->shard_elems = n / dp->size;
    dp->dev_scalars = (float *)mg_alloc(m->ctx, (size_t)(3 + 3 * world) * sizeof(float));
}

MGDEF void mg_dp_free(mg_dp *dp) {
    if (dp->model && dp->model->grads_final_user == dp) {
        dp->model->grads_final = NULL;
        dp->model->grads_final_user = NULL;
    }
    MG_FREE(dp->bucket_begin);
    MG_FREE(dp->req);
    MG_FREE(dp->pending);
    MG_FREE(dp->host_scalars);
    memset(dp, 0, sizeof *dp);
}

/* Bucket k: all-reduce (plain) or reduce-scatter into piece `rank` (distributed), in place. */
static void mg__dp_start_bucket(mg_dp *dp, int k) {
    float *g = dp->model->grad_buf + dp->bucket_begin[k];
    int64_t len = dp->bucket_begin[k + 1] - dp->bucket_begin[k], piece = len / dp->size;
    if (dp->comm_timer) dp->comm_timer(dp->comm_timer_user, 1);
    if (dp->distributed)
        dp->req[k] = mg_ireduce_scatter(dp->comm, dp->group, g, g + dp->rank * piece, piece,
                                        MG_F32, MG_SUM);
    else
        dp->req[k] = mg_iall_reduce(dp->comm, dp->group, g, g, len, MG_F32, MG_SUM);
    if (dp->comm_timer) dp->comm_timer(dp->comm_timer_user, 0);
}

/* The hook: the gradients of [first, end) are final. Each bucket counts the elements still
   pending; those it brings to zero start, highest first (on the GPU the communication stream
   first waits for the gradients queued on the compute stream: mg_comm.h). The ranks of the
   data group hold the same pieces and run the same schedule, so they start the buckets in
   the same order. Then poll the buckets in flight: OpenMPI advances nonblocking collectives
   only inside MPI calls, so each layer's hook gives them a push on the CPU.               */
static void mg__dp_grads_final(void *user, int64_t first, int64_t end) {
    mg_dp *dp = (mg_dp *)user;
    int k;
    for (k = dp->n_buckets - 1; k >= 0; k--) {
        int64_t lo = first > dp->bucket_begin[k] ? first : dp->bucket_begin[k];
        int64_t hi = end < dp->bucket_begin[k + 1] ? end : dp->bucket_begin[k + 1];
        if (lo >= hi) continue;
        MG_ASSERT(dp->pending[k] >= hi - lo, "data parallelism: gradients [%lld, %lld) "
                  "reported final twice in one iteration", (long long)first, (long long)end);
        dp->pending[k] -= hi - lo;
        if (dp->pending[k] == 0) {
            mg__dp_start_bucket(dp, k);
            dp->n_early++;
        }
    }
    for (k = 0; k < dp->n_buckets; k++)
        if (dp->req[k].id) mg_test(dp->comm, &dp->req[k]);
}

MGDEF void mg_dp_start(mg_dp *dp) {
    int k;
    if (!dp->comm) return;
    for (k = 0; k < dp->n_buckets; k++)
        dp->pending[k] = dp->bucket_begin[k + 1] - dp->bucket_begin[k];
    dp->n_early = 0;
    dp->model->grads_final = dp->overlap ? mg__dp_grads_final : NULL;
    dp->model->grads_final_user = dp->overlap ? dp : NULL;
}

MGDEF void mg_dp_finish(mg_dp *dp) {
    int k;
    double t0;
    if (!dp->comm) return;
    for (k = dp->n_buckets - 1; k >= 0; k--)      /* whatever the hook has not started */
        if (dp->pending[k] > 0) {
            dp->pending[k] = 0;
            mg__dp_start_bucket(dp, k);
        }
    t0 = mg__now_ms();
    for (k = 0; k < dp->n_buckets; k++) mg_wait(dp->comm, &dp->req[k]);
    dp->wait_ms += mg__now_ms() - t0;
    dp->model->grads_final = NULL;
    dp->model->grads_final_user = NULL;
}

MGDEF double mg_dp_sum(mg_dp *dp, double local) {
    if (!dp->comm) return local;
    return mg__group_sum(dp->model->ctx, dp->comm, dp->group, dp->dev_scalars,
                         dp->host_scalars, local, NULL);
}

/* This rank's piece of bucket k: flat offsets [*lo, *lo + piece), shard offset begin/d. */
static int64_t mg__dp_piece(const mg_dp *dp, int k, int64_t *lo) {
    int64_t len = dp->bucket_begin[k + 1] - dp->bucket_begin[k], piece = len / dp->size;
    *lo = dp->bucket_begin[k] + dp->rank * piece;
    return piece;
}

MGDEF void mg_dp_moment_flat(const mg_dp *dp, float *shard, float *flat, int to_flat) {
    int k;
    for (k = 0; k < dp->n_buckets; k++) {
        int64_t lo, piece = mg__dp_piece(dp, k, &lo);
        float *mine = shard + dp->bucket_begin[k] / dp->size;
        if (to_flat)
            mg_all_gather(dp->comm, dp->group, mine, flat + dp->bucket_begin[k], piece,
                          MG_F32);
        else
            mg_copy(dp->model->ctx, mine, flat + lo, (size_t)piece * sizeof(float));
    }
}

/* ---- 4. Optimizer --------------------------------------------------------------------------- */
/* Device code of the optimizer's scalars: each is a struct of arguments with a run function
   (MG_HD) that one thread executes — on the GPU one single-thread launch of mg__k_map (the
   struct's operator() calls the run function), on the CPU a plain call. The launch keeps the
   host out of the step; the work is a few dozen flops.                                     */
#ifdef __CUDACC__
#define MG__ON_DEVICE(ctx, f, run) do { \
    if (mg__is_cuda(ctx)) mg__cuda_map((ctx), 1, (f)); else run(&(f)); } while (0)
#define MG__DEVICE_CALL(T, run) MG_HD void operator()(int64_t) const { run(this); }
#else
#define MG__ON_DEVICE(ctx, f, run) do { (void)(ctx); run(&(f)); } while (0)
#define MG__DEVICE_CALL(T, run)
#endif

/* Megatron's DynamicGradScaler.update (mg_loss_scaler_update's math, host and device). */
MG_HD static inline void mg__loss_scaler_step(mg_loss_scaler *s, int found_inf) {
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0) {
            double backed_off = s->scale * s->backoff_factor;
            s->scale = backed_off > s->min_scale ? backed_off : s->min_scale;
        }
    } else if (++s->growth_tracker == s->growth_interval) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= s->growth_factor;
    }
}

/* *x = Σ v[r] over r = 0 … n−1 in that order (the device half of a group sum). */
typedef struct mg__sum_f64 mg__sum_f64;
MG_HD static inline void mg__sum_f64_run(const mg__sum_f64 *f);
struct mg__sum_f64 {
    double *x; const double *v; int n;
    MG__DEVICE_CALL(mg__sum_f64, mg__sum_f64_run)
};
MG_HD static inline void mg__sum_f64_run(const mg__sum_f64 *f) {
    double s = 0;
    int r;
    for (r = 0; r < f->n; r++) s += f->v[r];
    *f->x = s;
}

/* The parts of the flat buffer the optimizer of this rank owns, as (parameter, flat range,
   moment offset) pieces: every parameter whole (plain), or the intersection of each parameter
   with this rank's piece of each bucket (distributed). visit returns nothing; it is handed
   [x0, x1) in the flat buffers and the moment index of x0.                                   */
typedef void (*mg__owned_fn)(void *user, const mg_param_desc *d, int64_t x0, int64_t x1,
                             int64_t moment0);
static void mg__for_owned(const mg_adamw *opt, const mg_gpt *m, mg__owned_fn visit, void *user) {
    int i, k;
    if (!opt->dp) {
        for (i = 0; i < m->n_params; i++)
            visit(user, &m->params[i], m->params[i].offset, m->params[i].offset +
                  m->params[i].numel, m->params[i].offset);
        return;
    }
    for (k = 0; k < opt->dp->n_buckets; k++) {
        int64_t lo, piece = mg__dp_piece(opt->dp, k, &lo), hi = lo + piece;
        int64_t shard0 = opt->dp->bucket_begin[k] / opt->dp->size;
        for (i = 0; i < m->n_params; i++) {
            const mg_param_desc *d = &m->params[i];
            int64_t x0 = d->offset > lo ? d->offset : lo;
            int64_t x1 = d->offset + d->numel < hi ? d->offset + d->numel : hi;
            if (x0 < x1) visit(user, d, x0, x1, shard0 + (x0 - lo));
        }
    }
}

/* The fused step's table: one mg_adamw_piece per owned piece, in mg__for_owned's order (the
   order the per-piece steps ran in): the sharded master when the master is sharded, else the
   model's fp32 parameters; with mixed precision the 16-bit working copy of the same values
   (written by the same kernel); wd_mult 1 for weights, 0 for biases and norms (the step's
   weight decay, mg_optim_state's args, comes from the schedule).
   pieces NULL: count only.                                                                  */
typedef struct { mg_adamw *opt; mg_gpt *m; mg_adamw_piece *pieces; int n; } mg__table_acc;
static void mg__table_visit(void *user, const mg_param_desc *d, int64_t x0, int64_t x1,
                            int64_t moment0) {
    mg__table_acc *acc = (mg__table_acc *)user;
    mg_adamw_piece *p = acc->pieces ? &acc->pieces[acc->n] : NULL;
    acc->n++;
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->param = acc->opt->master ? acc->opt->master + moment0 : acc->m->param_buf + x0;
    p->param16 = acc->m->param16 ? (char *)acc->m->param16 +
                                   (size_t)x0 * mg_dtype_size(acc->m->dtype) : NULL;
    p->grad = acc->m->grad_buf + x0;
    p->m = acc->opt->m + moment0;
    p->v = acc->opt->v + moment0;
    p->n = x1 - x0;
    p->wd_mult = d->weight_decay ? 1.0f : 0.0f;
    /* Megatron's is_embedding_or_output_parameter: the word embedding (tied: the output layer
       too) and an untied output layer take the decoupled rate (lr2 = lr without it) */
    p->lr_group = d->kind == MG_WTE || d->kind == MG_OUT_W;
}

MGDEF size_t mg_adamw_arena_bytes(int n_params, int world_size) {
    return (sizeof(mg_optim_state) + 255) / 256 * 256 +
           ((size_t)(n_params + 202) * sizeof(mg_adamw_piece) + 255) / 256 * 256 +
           ((size_t)(world_size > 1 ? world_size : 1) * sizeof(double) + 255) / 256 * 256;
}

/* ---- 4. Optimizer --------------------------------------------------------------------------- */
MGDEF void mg_adamw_create_dp(mg_adamw *opt, mg_gpt *m, const mg_dp *dp, float beta1,
                              float beta2, float eps, float weight_decay) {
    mg__table_acc acc;
    mg_optim_state s0;
    int world = m->comm ? m->comm->world_size : 1;
    memset(opt, 0, sizeof *opt);
    opt->dp = dp && dp->distributed ? dp : NULL;
    MG_ASSERT(!m->layout.shard_master || opt->dp, "a model with a sharded master needs the "
              "distributed optimizer over its %d data-parallel replicas", m->layout.dp_size);
    opt->n = opt->dp ? dp->shard_elems : m->n_elems;
    opt->m = (float *)mg_alloc(m->ctx, (size_t)opt->n * sizeof(float));
    opt->v = (float *)mg_alloc(m->ctx, (size_t)opt->n * sizeof(float));
    mg_memset_zero(m->ctx, opt->m, (size_t)opt->n * sizeof(float));
    mg_memset_zero(m->ctx, opt->v, (size_t)opt->n * sizeof(float));
    if (m->layout.shard_master) {   /* filled by mg_adamw_take_master */
        opt->master = (float *)mg_alloc(m->ctx, (size_t)opt->n * sizeof(float));
        mg_memset_zero(m->ctx, opt->master, (size_t)opt->n * sizeof(float));
    }
    opt->beta1 = beta1;
    opt->beta2 = beta2;
    opt->eps = eps;
    opt->weight_decay = weight_decay;
    opt->loss_scale = 1.0;
    /* the table: counted, built on the host, copied to the device once */
    acc.opt = opt;
    acc.m = m;
    acc.pieces = NULL;
    acc.n = 0;
    mg__for_owned(opt, m, mg__table_visit, &acc);
    MG_ASSERT(acc.n <= m->n_params + 202, "%d optimizer pieces", acc.n);
    acc.pieces = (mg_adamw_piece *)MG_MALLOC(sizeof(mg_adamw_piece) * (size_t)(acc.n + 1));
    MG_ASSERT(acc.pieces, "out of host memory");
    opt->n_pieces = acc.n;
    acc.n = 0;
    mg__for_owned(opt, m, mg__table_visit, &acc);
    opt->table_total = mg_adamw_table_begin(acc.pieces, acc.n);
    opt->table = (mg_adamw_piece *)mg_alloc(m->ctx, sizeof(mg_adamw_piece) * (size_t)(acc.n + 1));
    mg_copy_to_device(m->ctx, opt->table, acc.pieces, sizeof(mg_adamw_piece) * (size_t)acc.n);
    MG_FREE(acc.pieces);
    /* the step's scalars: no step yet, a constant scale of 1 */
    memset(&s0, 0, sizeof s0);
    s0.loss_scale = 1.0;
    mg_loss_scaler_init(&s0.scaler, 0, 1.0, 1.0, 1, 1);
    opt->state = (mg_optim_state *)mg_alloc(m->ctx, sizeof s0);
    mg_copy_to_device(m->ctx, opt->state, &s0, sizeof s0);
    opt->gather = (double *)mg_alloc(m->ctx, sizeof(double) * (size_t)world);
}

/* Doubles across a group, exactly and identically on every rank: their bits travel as two
   fp32 words each (moved, never added — all-gather and broadcast do no arithmetic), through
   the model's device scratch; the sum is taken in group-rank order on every rank.         */
static double mg__group_sum_f64(mg_gpt *m, mg_group *g, double x) {
    double sum = 0;
    int r;
    MG_ASSERT(g->size <= mg__scalar_slots(&m->layout), "group of %d ranks", g->size);
    mg_copy_to_device(m->ctx, m->scalars + g->rank, &x, sizeof x);
    mg_all_gather(m->comm, g, m->scalars + g->rank, m->scalars, 2, MG_F32);
    mg_copy_to_host(m->ctx, m->host_scalars, m->scalars, sizeof(double) * (size_t)g->size);
    for (r = 0; r < g->size; r++) sum += m->host_scalars[r];
    return sum;
}
/* The same on the device: *x (device) becomes the group's sum, added in rank order by one
   device thread after an all-gather of the 8 bytes of every rank's x; nothing reaches the
   host, and the sum is the host version's bit for bit (inf/nan carried in the doubles).   */
static void mg__group_sum_dev(mg_adamw *opt, mg_gpt *m, mg_comm *comm, mg_group *g, double *x) {
    mg__sum_f64 f;
    if (g->size <= 1) return;
    mg_all_gather(comm, g, x, opt->gather, 2, MG_F32);
    f.x = x;
    f.v = opt->gather;
    f.n = g->size;
    MG__ON_DEVICE(m->ctx, f, mg__sum_f64_run);
}
static double mg__group_bcast_f64(mg_gpt *m, mg_group *g, double x, int root) {
    mg_copy_to_device(m->ctx, m->scalars, &x, sizeof x);
    mg_broadcast(m->comm, g, m->scalars, m->scalars, 2, MG_F32, root);
    mg_copy_to_host(m->ctx, &x, m->scalars, sizeof x);
    return x;
}

MGDEF void mg_adamw_create(mg_adamw *opt, mg_gpt *m, float beta1, float beta2, float eps,
                           float weight_decay) {
    mg_adamw_create_dp(opt, m, NULL, beta1, beta2, eps, weight_decay);
}

/* What mg__model_sum adds over the parameters: Σ g² (the grad norm), Σ w² of the fp32
   weights (--log-params-norm), or the count of zero gradient entries (--log-num-zeros-in-grad,
   Megatron's count_zeros_fp32). The squares of the owned pieces are queued into one
   mg_sumsq_batch whose total stays on the device: a first pass counts the partial-sum slots
   (batch NULL), the second queues the pieces in the same order; the zeros are counted on the
   host in one pass.                                                                        */
enum { MG__SUM_GRAD_SQ, MG__SUM_PARAM_SQ, MG__SUM_GRAD_ZEROS };
typedef struct { mg_gpt *m; const mg_adamw *opt; int what; mg_sumsq_batch *batch;
                 int64_t slots; double zeros; int has_embedding; float *host; } mg__sumsq_acc;
/* Zero entries among n device values, counted on the host in pieces of 64 Ki (host: 64 Ki
   floats of scratch).                                                                       */
static double mg__count_zeros(mg_ctx *ctx, const float *x, int64_t n, float *host) {
    double zeros = 0;
    int64_t i, k;
    for (i = 0; i < n; i += 65536) {
        int64_t len = n - i < 65536 ? n - i : 65536;
        mg_copy_to_host(ctx, host, x + i, sizeof(float) * (size_t)len);
        for (k = 0; k < len; k++) zeros += host[k] == 0.0f;
    }
    return zeros;
}
static void mg__sumsq_visit(void *user, const mg_param_desc *d, int64_t x0, int64_t x1,
                            int64_t moment0) {
    mg__sumsq_acc *acc = (mg__sumsq_acc *)user;
    mg_gpt *m = acc->m;
    const float *x;
    /* replicated tensors are equal on every tensor-parallel rank: count them on rank 0 only */
    if (d->split == MG_TP_REPLICATED && m->layout.tp_rank != 0) return;
    if (d->kind == MG_WTE && !acc->has_embedding) return;   /* the last stage's tied copy */
    if (acc->what == MG__SUM_GRAD_ZEROS) {
        acc->zeros += mg__count_zeros(m->ctx, m->grad_buf + x0, x1 - x0, acc->host);
        return;
    }
    x = acc->what == MG__SUM_GRAD_SQ ? m->grad_buf + x0
        : acc->opt->master ? acc->opt->master + moment0      /* the sharded master */
                           : mg_gpt_fp32_params(m) + x0;     /* or the whole fp32 copy */
    if (acc->batch) mg_sumsq_add(m->ctx, acc->batch, x, x1 - x0);
    else acc->slots += mg_sumsq_slots(m->ctx, x1 - x0);
}

/* Σ over every parameter of the model counted once, into *dst (device). On one rank that is
   the whole flat buffer (its alignment gaps are zero), one piece. With tensor parallelism each
   rank sums its shards of the split tensors and tensor rank 0 adds the replicated ones (equal
   on every rank); over a pipeline each stage adds its own parameters, and the tied word
   embedding, held by the first and the last stage with equal (all-reduced) gradients, counts
   on the first only; with the distributed optimizer each data-parallel rank sums only the
   pieces it owns (the others' are not reduced there) and the partial sums are added over the
   data group (plain data parallelism leaves equal gradients on every replica: nothing to
   add). The partial sums are then summed exactly over the tensor group, then over the
   pipeline group (mg__group_sum_dev: every rank adds the same values in the same order), so
   all get the same sum, as precise as the serial one, without the host.                   */
static void mg__model_sumsq_dev(mg_adamw *opt, mg_gpt *m, int what, double *dst) {
    const mg_gpt_layout *L = &m->layout;
    mg__sumsq_acc acc;
    mg_sumsq_batch batch;
    int c;
    if (what == MG__SUM_GRAD_SQ && !opt->dp && (!m->comm || (L->tp_size == 1 &&
                                                             L->pp_size == 1))) {
        mg_sumsq_begin(m->ctx, &batch, mg_sumsq_slots(m->ctx, m->n_elems));
        mg_sumsq_add(m->ctx, &batch, m->grad_buf, m->n_elems);
        if (opt->keep_scratch) batch.mark = mg_arena_mark(m->ctx);   /* not released */
        mg_sumsq_end_device(m->ctx, &batch, dst);
        return;
    }
    memset(&acc, 0, sizeof acc);
    acc.m = m;
    acc.opt = opt;
    acc.what = what;
    for (c = 0; c < L->n_chunks; c++) acc.has_embedding |= L->chunks[c].has_embedding;
    mg__for_owned(opt, m, mg__sumsq_visit, &acc);      /* count the slots */
    mg_sumsq_begin(m->ctx, &batch, acc.slots);
    acc.batch = &batch;
    mg__for_owned(opt, m, mg__sumsq_visit, &acc);      /* queue the pieces */
    if (opt->keep_scratch) batch.mark = mg_arena_mark(m->ctx);   /* not released */
    mg_sumsq_end_device(m->ctx, &batch, dst);
    if (opt->dp) mg__group_sum_dev(opt, m, opt->dp->comm, opt->dp->group, dst);  /* dp (x cp) */
    if (L->tp_size > 1) mg__group_sum_dev(opt, m, m->comm, &m->comm->tensor, dst);
    if (L->pp_size > 1) mg__group_sum_dev(opt, m, m->comm, &m->comm->pipeline, dst);
}
/* The same sums read back (the params norm), or the zero count over the same pieces (host,
   summed over the groups as mg__model_sumsq_dev's).                                       */
static double mg__model_sum(mg_adamw *opt, mg_gpt *m, int what, int *nonfinite) {
    const mg_gpt_layout *L = &m->layout;
    mg__sumsq_acc acc;
    double local;
    int c;
    if (what != MG__SUM_GRAD_ZEROS) {
        mg__model_sumsq_dev(opt, m, what, &opt->state->aux);
        mg_copy_to_host(m->ctx, &local, &opt->state->aux, sizeof local);
        *nonfinite = !isfinite(local);
        return local;
    }
    memset(&acc, 0, sizeof acc);
    acc.m = m;
    acc.opt = opt;
    acc.what = what;
    for (c = 0; c < L->n_chunks; c++) acc.has_embedding |= L->chunks[c].has_embedding;
    acc.host = (float *)MG_MALLOC(sizeof(float) * 65536);
    MG_ASSERT(acc.host, "out of host memory");
    mg__for_owned(opt, m, mg__sumsq_visit, &acc);
    MG_FREE(acc.host);
    local = acc.zeros;
    if (opt->dp)
        local = mg__group_sum(m->ctx, opt->dp->comm, opt->dp->group, opt->dp->dev_scalars,
                              opt->dp->host_scalars, local, NULL);
    if (L->tp_size > 1) local = mg__group_sum_f64(m, &m->comm->tensor, local);
    if (L->pp_size > 1) local = mg__group_sum_f64(m, &m->comm->pipeline, local);
    *nonfinite = !isfinite(local);
    return local;
}

/* The tied word embedding's gradient: the first stage's (embedding) part plus the last
   stage's (output layer) part, all-reduced over the embedding group so that both copies of
   the weight take the same step and stay equal.                                           */
static void mg__embedding_grad_all_reduce(mg_gpt *m) {
    mg_group *g;
    int iwte = m->idx_global[MG_WTE - MG_LAYER_TENSORS];
    if (!mg__wte_split_over_stages(m)) return;
    g = &m->comm->embedding;
    if (g->size > 1)
        mg_all_reduce(m->comm, g, m->g[iwte].data, m->g[iwte].data, m->params[iwte].numel,
                      MG_F32, MG_SUM);
}

/* The step's decisions, on the device from the Σ g² there (mg_optim_state):
     norm = √Σg² / scale (the gradients carry the loss scale); not finite: skip (grad_norm nan)
     else step += 1, lr and weight decay = the schedule's at the updates taken before, bias
          corrections of step,
          grad_scale = 1/scale · min(1, clip / (norm + 1e-6)) (clip_grad_norm_; clip 0: off)
     the loss scaler's update with found_inf = skip; with tokens > 0 (the trainer) also the
     iteration's loss = loss_sum / tokens (/ loss_tokens under the loss mask), the next seed
     dloss = scale / tokens and the counts of the log interval (the loss of iterations not
     skipped, skipped and nan iterations).                                                  */
typedef struct mg__optim_decide mg__optim_decide;
MG_HD static inline void mg__optim_decide_run(const mg__optim_decide *d);
struct mg__optim_decide {
    mg_optim_state *s;
    mg_lr_schedule sched;
    double clip_grad, tokens;
    int masked;                  /* the loss mask: the loss is loss_sum / s->loss_tokens        */
    float beta1, beta2;
    MG__DEVICE_CALL(mg__optim_decide, mg__optim_decide_run)
};
MG_HD static inline void mg__optim_decide_run(const mg__optim_decide *d) {
    mg_optim_state *s = d->s;
    double unscale = s->scaler.scale > 0 ? 1.0 / s->scaler.scale : 1.0;
    double norm = sqrt(s->sumsq) * unscale;
    int bad = !isfinite(s->sumsq);
    s->loss_scale = s->scaler.scale;
    s->lr = mg__lr_at(&d->sched, s->step);
    s->lr2 = d->sched.decoupled ? mg__lr_between(&d->sched, s->step, d->sched.decoupled_max_lr,
                                                 d->sched.decoupled_min_lr) : s->lr;
    s->args.weight_decay = (float)mg__wd_at(&d->sched, s->step);
    s->grad_norm = bad ? NAN : norm;
    s->args.skip = bad || !isfinite(norm);
    if (!s->args.skip) {
        double coef = d->clip_grad > 0 ? d->clip_grad / (norm + 1e-6) : 1.0;
        s->step++;
        mg_adamw_args_set(&s->args, (float)s->lr, s->step, d->beta1, d->beta2);
        mg_adamw_args_set_lr2(&s->args, (float)s->lr2, s->step, d->beta1);
        s->args.grad_scale = (float)(coef < 1.0 ? coef * unscale : unscale);
    } else {
        s->skipped_iters++;
    }
    mg__loss_scaler_step(&s->scaler, s->args.skip);
    if (d->tokens > 0) {   /* the trainer's bookkeeping of the iteration */
        int nan;
        s->loss = s->loss_sum / (d->masked ? s->loss_tokens : d->tokens);
        nan = !isfinite(s->loss);   /* also 0/0: a masked batch that kept no position */
        s->dloss = (float)(s->scaler.scale / d->tokens);
        if (!s->args.skip) s->interval.loss_sum += s->loss;
        s->interval.skipped += s->args.skip;
        s->interval.nan += nan;
        s->nan_iters += nan;
    }
}

/* mg_adamw_update in its three parts (the trainer times each, as Megatron's
   optimizer-clip-main-grad, optimizer-inner-step and params-all-gather timers do), all queued
   on the device without waiting.
   1. The gradient norm and the decisions (mg__optim_decide_run) into opt->state.           */
static void mg__adamw_clip(mg_adamw *opt, mg_gpt *m, const mg_lr_schedule *sched,
                           double clip_grad, double tokens) {
    mg__optim_decide d;
    mg__model_sumsq_dev(opt, m, MG__SUM_GRAD_SQ, &opt->state->sumsq);
    d.s = opt->state;
    d.sched = *sched;
    d.clip_grad = clip_grad;
    d.tokens = tokens;
    d.masked = m->eod_mask;
    d.beta1 = opt->beta1;
    d.beta2 = opt->beta2;
    MG__ON_DEVICE(m->ctx, d, mg__optim_decide_run);
}
/* 2. AdamW on the pieces this rank owns: one fused launch reading opt->state's arguments
      (it does nothing when the step is skipped).                                          */
static void mg__adamw_inner_step(mg_adamw *opt, mg_gpt *m) {
    mg_adamw_multi(m->ctx, opt->table, opt->n_pieces, opt->table_total, opt->beta1, opt->beta2,
                   opt->eps, m->dtype, &opt->state->args);
}
/* 3. With the distributed optimizer, the updated pieces all-gathered over the data group
      (also after a skipped step: the pieces then are the unchanged ones every rank holds).  */
static void mg__adamw_gather_params(mg_adamw *opt, mg_gpt *m) {
    int k;
    if (opt->dp) {   /* ZeRO-1: every rank gets the pieces the others updated */
        const mg_dp *dp = opt->dp;
        /* the weights the forward reads: fp32, or the 16-bit copy of a sharded master */
        mg_dtype dt = opt->master ? m->dtype : MG_F32;
        char *base = opt->master ? (char *)m->param16 : (char *)m->param_buf;
        size_t es = mg_dtype_size(dt);
        for (k = 0; k < dp->n_buckets; k++) {
            int64_t lo, piece = mg__dp_piece(dp, k, &lo);
            dp->req[k] = mg_iall_gather(dp->comm, dp->group, base + (size_t)lo * es,
                                        base + (size_t)dp->bucket_begin[k] * es, piece, dt);
        }
        for (k = 0; k < dp->n_buckets; k++) mg_wait(dp->comm, &dp->req[k]);
    }
}
/* The public update: the loss scale opt->loss_scale (constant), a constant learning rate and
   weight decay (opt->weight_decay); the state read back once at the end (the return value
   and *grad_norm need it).                                                                  */
MGDEF int mg_adamw_update(mg_adamw *opt, mg_gpt *m, float lr, float clip_grad, double *grad_norm) {
    mg_optim_state s;
    mg_loss_scaler constant;
    mg_lr_schedule sched;
    mg_loss_scaler_init(&constant, 0, opt->loss_scale, opt->loss_scale, 1, 1);
    mg_copy_to_device(m->ctx, &opt->state->scaler, &constant, sizeof constant);
    mg_copy_to_device(m->ctx, &opt->state->step, &opt->step, sizeof opt->step);
    memset(&sched, 0, sizeof sched);
    sched.max_lr = sched.min_lr = lr;
    sched.style = MG_LR_CONSTANT;
    sched.start_wd = sched.end_wd = opt->weight_decay;   /* style MG_WD_CONSTANT */
    mg__adamw_clip(opt, m, &sched, clip_grad, 0);
    mg__adamw_inner_step(opt, m);
    mg__adamw_gather_params(opt, m);
    mg_copy_to_host(m->ctx, &s, opt->state, sizeof s);
    opt->step = s.step;
    if (grad_norm) *grad_norm = s.grad_norm;
    return !s.args.skip;
}

MGDEF void mg_adamw_take_master(mg_adamw *opt, mg_gpt *m) {
    if (!opt->master) {
        mg_gpt_sync_weights(m);
        return;
    }
    if (m->fp32_staging != MG_STAGING_WRITTEN) return;   /* nothing new was written */
    mg_gpt_sync_weights(m);                                /* the 16-bit copy, whole */
    mg_dp_moment_flat(opt->dp, opt->master, m->grad_buf, 0);
    m->fp32_staging = 0;
}

MGDEF void mg_adamw_gather_master(mg_adamw *opt, mg_gpt *m) {
    if (!opt->master) return;
    MG_ASSERT(m->fp32_staging != MG_STAGING_WRITTEN, "gathering the master over parameters "
              "written but not taken (mg_adamw_take_master)");
    mg_dp_moment_flat(opt->dp, opt->master, m->grad_buf, 1);
    m->fp32_staging = MG_STAGING_GATHERED;
}

MGDEF size_t mg_adamw_state_bytes(const mg_adamw *opt, const mg_gpt *m) {
    int64_t master = opt->master ? opt->n : m->param16 ? m->n_elems : 0;
    return (size_t)(2 * opt->n + master) * sizeof(float);
}

MGDEF void mg_loss_scaler_init(mg_loss_scaler *s, int dynamic, double initial, double min_scale,
                               int64_t growth_interval, int64_t hysteresis) {
    memset(s, 0, sizeof *s);
    s->scale = initial;
    s->dynamic = dynamic;
    s->min_scale = min_scale;
    s->growth_factor = 2.0;
    s->backoff_factor = 0.5;
    s->growth_interval = growth_interval;
    s->hysteresis = s->hysteresis_tracker = hysteresis;
}

MGDEF void mg_loss_scaler_update(mg_loss_scaler *s, int found_inf) {
    mg__loss_scaler_step(s, found_inf);
}

/* =============================================================================================
   5. Trainer: flags
   ========================================================================================== */
typedef enum { MG__F_INT, MG__F_FLOAT, MG__F_STR, MG__F_CHOICE, MG__F_HELP, MG__F_SWITCH,
               MG__F_LIST }
    mg__flag_type;  /* MG__F_SWITCH: takes no value; sets its int field to 1; MG__F_LIST: the
                       words up to the next --option into an mg_str_list                      */
typedef struct mg__flag {
    const char *name;        /* as typed, with the leading "--"                               */
    mg__flag_type type;
    size_t offset;           /* field of mg_train_args                                         */
    const char *metavar;     /* MG__F_CHOICE: the choices, "a|b|c" (stored as their index)    */
    double lo, hi;           /* valid range of numbers                                         */
    const char *help;
} mg__flag;
#define MG__OFF(field) offsetof(mg_train_args, field)
#define MG__BIG 1e15
/* The table is the one description of the command line: parsing, ranges, --help and the
   configuration stored in checkpoints all read it. The flags come in Megatron-LM's argument
   groups (arguments.py: network size, regularization, training, initialization, learning
   rate, checkpointing, mixed precision, distributed, validation, data and dataloader,
   logging; then ours: inference, device): a group heading has type MG__F_HELP, offset 0,
   its title as name and a description (or "") as help. Every flag lies under one heading. */
static const mg__flag mg__flags[] = {
    {"options", MG__F_HELP, 0, NULL, 0, 0, ""},
    {"--help", MG__F_HELP, MG__OFF(help), NULL, 0, 0, "print this help and exit"},
    {"network size", MG__F_HELP, 0, NULL, 0, 0, "the model; optional with --init-from or --load, "
     "which supply it (flags given must agree)"},
    {"--num-layers", MG__F_INT, MG__OFF(num_layers), "N", 1, 1e6, "transformer layers"},
    {"--hidden-size", MG__F_INT, MG__OFF(hidden_size), "C", 1, 1e6, "hidden size"},
    {"--num-attention-heads", MG__F_INT, MG__OFF(num_attention_heads), "N", 1, 1e6,
     "attention heads (must divide --hidden-size)"},
    {"--max-position-embeddings", MG__F_INT, MG__OFF(max_position_embeddings), "N", 1, 1e7,
     "rows of the position embedding, >= --seq-length (default: --seq-length)"},
    {"--vocab-size", MG__F_INT, MG__OFF(vocab_size), "V", 2, 1 << 30,
     "vocabulary size; every token id of the data must be below it; padded to a multiple of "
     "N·t inside the model (N: --make-vocab-size-divisible-by, t: "
     "--tensor-model-parallel-size); with --tokenizer-type NullTokenizer the ids before its "
     "end-of-document id V (V + 1 ids)"},
    {"--make-vocab-size-divisible-by", MG__F_INT, MG__OFF(make_vocab_size_divisible_by), "N",
     1, 1 << 20, "pad the vocabulary to a multiple of N·t (default 128); the padding rows never "
     "enter the softmax or the loss, and checkpoints hold the V real rows"},
    {"--normalization", MG__F_CHOICE, MG__OFF(normalization), "LayerNorm|RMSNorm", 0, 0,
     "the norms of the layers and the final norm (default LayerNorm; RMSNorm has no bias)"},
    {"--norm-epsilon", MG__F_FLOAT, MG__OFF(norm_epsilon), "EPS", 1e-30, 0.5,
     "epsilon of the norms (default 1e-5)"},
    {"--swiglu", MG__F_SWITCH, MG__OFF(swiglu), NULL, 0, 0,
     "SwiGLU MLP: down(silu(gate(x)) * up(x)); the default width becomes int(4h·2/3 / 64)·64"},
    {"--ffn-hidden-size", MG__F_INT, MG__OFF(ffn_hidden_size), "F", 1, 1e7,
     "the MLP's width (default 4 x --hidden-size, or SwiGLU's)"},
    {"--position-embedding-type", MG__F_CHOICE, MG__OFF(position_embedding_type),
     "learned_absolute|rope|none", 0, 0, "learned position embedding (default), rotary "
     "positions on queries and keys (rotate-half pairs i, i + d/2, as Hugging Face and "
     "Megatron-LM), or none"},
    {"--rotary-base", MG__F_FLOAT, MG__OFF(rotary_base), "THETA", 1.000001, 1e12,
     "rotary base (default 10000; Llama 3: 500000)"},
    {"--rotary-percent", MG__F_FLOAT, MG__OFF(rotary_percent), "P", 1e-6, 1,
     "share of each head's dims rotated (default 1.0)"},
    {"--rotary-seq-len-interpolation-factor", MG__F_FLOAT,
     MG__OFF(rotary_seq_len_interpolation_factor), "F", 1, 1e6,
     "linear position interpolation: rotary positions p / F (Hugging Face rope_type "
     "\"linear\"; default 1: none)"},
    {"--use-rope-scaling", MG__F_SWITCH, MG__OFF(use_rope_scaling), NULL, 0, 0,
     "Llama 3.1's rotary frequency scaling (low/high frequency factors 1 and 4, original "
     "context 8192, as Megatron-LM)"},
    {"--rope-scaling-factor", MG__F_FLOAT, MG__OFF(rope_scaling_factor), "F", 1, 1e6,
     "the scaling's factor (default 8)"},
    {"--group-query-attention", MG__F_SWITCH, MG__OFF(group_query_attention), NULL, 0, 0,
     "grouped-query attention: --num-query-groups key/value heads"},
    {"--num-query-groups", MG__F_INT, MG__OFF(num_query_groups), "G", 1, 1e6,
     "key/value heads with --group-query-attention; must divide --num-attention-heads and "
     "be a multiple of --tensor-model-parallel-size (1: multi-query)"},
    {"--kv-channels", MG__F_INT, MG__OFF(kv_channels), "D", 1, 1e5,
     "head dimension (default --hidden-size / --num-attention-heads)"},
    {"--untie-embeddings-and-output-weights", MG__F_SWITCH,
     MG__OFF(untie_embeddings_and_output_weights), NULL, 0, 0,
     "an output layer of its own instead of the word embedding"},
    {"--disable-bias-linear", MG__F_SWITCH, MG__OFF(disable_bias_linear), NULL, 0, 0,
     "no biases on the linear layers (a GELU MLP then computes the exact (erf) GELU, as "
     "Megatron-LM's without its fused bias-GELU kernel)"},
    {"--no-bias-gelu-fusion", MG__F_SWITCH, MG__OFF(no_bias_gelu_fusion), NULL, 0, 0,
     "the GELU MLP computes the exact (erf) GELU, as Megatron-LM's MLP does without its fused "
     "bias-GELU kernel (default: that kernel's tanh approximation, GPT-2's)"},
    {"--openai-gelu", MG__F_SWITCH, MG__OFF(openai_gelu), NULL, 0, 0,
     "the tanh approximation of GELU (OpenAI's, GPT-2's) even under --no-bias-gelu-fusion "
     "or --disable-bias-linear"},
    {"--apply-layernorm-1p", MG__F_SWITCH, MG__OFF(apply_layernorm_1p), NULL, 0, 0,
     "zero-centred norm weights: the norms scale by 1 + weight, which starts at 0 (Megatron-"
     "LM's layernorm_zero_centered_gamma; LayerNorm or RMSNorm)"},
    {"--squared-relu", MG__F_SWITCH, MG__OFF(squared_relu), NULL, 0, 0,
     "the MLP's activation is the squared ReLU, max(x, 0)², instead of GELU (Nemotron-4's; "
     "not with --swiglu)"},
    {"--add-qkv-bias", MG__F_SWITCH, MG__OFF(add_qkv_bias), NULL, 0, 0,
     "a bias on Q, K and V even with --disable-bias-linear (Qwen2)"},
    {"regularization", MG__F_HELP, 0, NULL, 0, 0, "AdamW with decoupled weight decay (none on "
     "biases and layernorms), global-norm gradient clipping, dropout"},
    {"--weight-decay", MG__F_FLOAT, MG__OFF(weight_decay), "WD", 0, 1e3,
     "decoupled weight decay of the weights (default 0.01)"},
    {"--weight-decay-incr-style", MG__F_CHOICE, MG__OFF(weight_decay_incr_style),
     MG__WD_STYLES, 0, 0, "linear or cosine: the weight decay rises from "
     "--start-weight-decay to --end-weight-decay over --train-iters (default constant: "
     "--weight-decay throughout)"},
    {"--start-weight-decay", MG__F_FLOAT, MG__OFF(start_weight_decay), "WD", 0, 1e3,
     "the first iteration's weight decay (a linear or cosine --weight-decay-incr-style only)"},
    {"--end-weight-decay", MG__F_FLOAT, MG__OFF(end_weight_decay), "WD", 0, 1e3,
     "the weight decay at --train-iters, >= --start-weight-decay (a linear or cosine "
     "--weight-decay-incr-style only)"},
    {"--clip-grad", MG__F_FLOAT, MG__OFF(clip_grad), "NORM", 0, 1e9,
     "clip the global gradient norm to NORM; 0 disables (default 1.0)"},
    {"--adam-beta1", MG__F_FLOAT, MG__OFF(adam_beta1), "B1", 0, 0.999999, "default 0.9"},
    {"--adam-beta2", MG__F_FLOAT, MG__OFF(adam_beta2), "B2", 0, 0.999999, "default 0.999"},
    {"--adam-eps", MG__F_FLOAT, MG__OFF(adam_eps), "EPS", 1e-30, 1, "default 1e-8"},
    {"--init-method-std", MG__F_FLOAT, MG__OFF(init_method_std), "STD", 1e-30, 1e3,
     "standard deviation of the weights' normal initialisation; attention-out and MLP-down "
     "take STD/sqrt(2 x layers) (default 0.02)"},
    {"--init-method-xavier-uniform", MG__F_SWITCH, MG__OFF(init_method_xavier_uniform), NULL,
     0, 0, "every weight drawn from U(-a, a), a = sqrt(6/(fan_in + fan_out)) (Glorot; the "
     "attention-out and MLP-down weights too), instead of --init-method-std's normal"},
    {"--hidden-dropout", MG__F_FLOAT, MG__OFF(hidden_dropout), "P", 0, 0.999999,
     "dropout after the embedding and after attention-out and MLP-down, before the residual "
     "add (default 0)"},
    {"--attention-dropout", MG__F_FLOAT, MG__OFF(attention_dropout), "P", 0, 0.999999,
     "dropout on the attention probabilities (default 0)"},
    {"training", MG__F_HELP, 0, NULL, 0, 0, "the batch, the length of the run, activation "
     "recomputation (losses and weights are bit-identical with and without it)"},
    {"--micro-batch-size", MG__F_INT, MG__OFF(micro_batch_size), "B", 1, 1e6,
     "sequences per microbatch (default 1)"},
    {"--global-batch-size", MG__F_INT, MG__OFF(global_batch_size), "N", 1, 1e9,
     "sequences per iteration, a multiple of --micro-batch-size x the data-parallel size d: "
     "gradients accumulate over global/(micro x d) microbatches per replica (default: "
     "--micro-batch-size x d, as Megatron-LM)"},
    {"--train-iters", MG__F_INT, MG__OFF(train_iters), "N", 0, MG__BIG,
     "iterations to train (required, or --train-samples; 0: no training, e.g. to convert or "
     "sample)"},
    {"--train-samples", MG__F_INT, MG__OFF(train_samples), "N", 1, MG__BIG,
     "instead of --train-iters: train N / --global-batch-size iterations (rounded down) and "
     "count the schedule in samples: --lr-decay-samples, --lr-warmup-samples, "
     "--lr-wsd-decay-samples (Megatron-LM's sample-based training)"},
    {"--exit-signal-handler", MG__F_SWITCH, MG__OFF(exit_signal_handler), NULL, 0, 0,
     "on SIGTERM (to any rank): finish the iteration, save (with --save), exit 0 everywhere"},
    {"--exit-duration-in-mins", MG__F_FLOAT, MG__OFF(exit_duration_in_mins), "M", 1e-6, 1e9,
     "after the iteration that ends past M minutes of wall time: save (with --save), exit 0"},
    {"--exit-interval", MG__F_INT, MG__OFF(exit_interval), "N", 1, MG__BIG,
     "after an iteration that is a multiple of N: save (with --save), exit 0"},
    {"--attention-backend", MG__F_CHOICE, MG__OFF(attention_backend),
     "auto|flash|unfused|fused|local", 0, 0, "the attention core: flash — tiled over 32×32 "
     "blocks with an online softmax, keeping one log-sum-exp per query instead of the T×T "
     "probabilities (memory O(T)); unfused — scores, softmax and ·V as separate steps through "
     "[B, heads, T, T] buffers; auto and fused are flash, local is unfused (Megatron-LM's "
     "names for its fused and local attention) (default auto)"},
    {"--recompute-granularity", MG__F_CHOICE, MG__OFF(recompute_granularity),
     "none|selective|full", 0, 0, "selective: recompute the attention core (scores, softmax, "
     "dropout, ·V) in the backward instead of storing the attention probabilities; full: "
     "recomputed layers keep only their input and re-run their forward (default none)"},
    {"--recompute-method", MG__F_CHOICE, MG__OFF(recompute_method), "uniform|block", 0, 0,
     "with full: uniform — every layer, in groups of --recompute-num-layers whose input alone is "
     "kept; block — only the first --recompute-num-layers layers of each model chunk "
     "(default uniform)"},
    {"--recompute-num-layers", MG__F_INT, MG__OFF(recompute_num_layers), "N", 1, 1e6,
     "with full: layers per group (uniform) or recomputed layers per chunk (block) (default 1)"},
    {"--classifier-chunk-rows", MG__F_INT, MG__OFF(classifier_chunk_rows), "N", 0, MG__BIG,
     "rows of logits the fused classifier (output layer + cross-entropy) computes at a time; "
     "0: the most that fit in 64 MiB of scratch, 1 GiB on a GPU (default 0)"},
    {"initialization", MG__F_HELP, 0, NULL, 0, 0, ""},
    {"--seed", MG__F_INT, MG__OFF(seed), "N", 0, 4294967295.0,
     "initialisation, data order, dropout masks and sampling (default 1234)"},
    {"--init-from", MG__F_STR, MG__OFF(init_from), "FILE", 0, 0,
     "initial weights: an llm.c checkpoint, a Hugging Face GPT-2 model.safetensors (or its "
     "directory), a Llama/Mistral/Qwen2 save_pretrained directory (config.json gives the "
     "architecture; sharded or not), or a model.safetensors of our checkpoints; told apart by "
     "content"},
    {"learning rate", MG__F_HELP, 0, NULL, 0, 0, "warm-up, then decay"},
    {"--lr", MG__F_FLOAT, MG__OFF(lr), "LR", 0, 1e3, "peak learning rate (required to train)"},
    {"--min-lr", MG__F_FLOAT, MG__OFF(min_lr), "LR", 0, 1e3, "learning rate at the end of the "
     "decay (default 0)"},
    {"--decoupled-lr", MG__F_FLOAT, MG__OFF(decoupled_lr), "LR", 0, 1e3, "the peak learning "
     "rate of the word embedding and the output layer (Megatron-LM's decoupled param group: "
     "the same schedule as --lr's, between this and --decoupled-min-lr)"},
    {"--decoupled-min-lr", MG__F_FLOAT, MG__OFF(decoupled_min_lr), "LR", 0, 1e3, "with "
     "--decoupled-lr: their learning rate at the end of the decay (default --min-lr)"},
    {"--lr-decay-style", MG__F_CHOICE, MG__OFF(lr_decay_style),
     MG__LR_STYLES, 0, 0, "decay after the warm-up; "
     "inverse-square-root: --lr x sqrt(warm-up / iteration), in samples, not below --min-lr; "
     "WSD: --lr until the last --lr-wsd-decay-iters of the decay, then down to --min-lr "
     "(default linear)"},
    {"--lr-warmup-iters", MG__F_INT, MG__OFF(lr_warmup_iters), "N", 0, MG__BIG,
     "linear warm-up from --lr-warmup-init over N iterations (default 0)"},
    {"--lr-warmup-fraction", MG__F_FLOAT, MG__OFF(lr_warmup_fraction), "F", 0, 1,
     "instead of --lr-warmup-iters: warm up over F x the decay iterations (--lr-decay-iters, "
     "else --train-iters; a fraction of an iteration counts, as in Megatron-LM)"},
    {"--lr-warmup-init", MG__F_FLOAT, MG__OFF(lr_warmup_init), "LR", 0, 1e3,
     "the learning rate the warm-up starts from, <= --lr (default 0)"},
    {"--lr-decay-iters", MG__F_INT, MG__OFF(lr_decay_iters), "N", 1, MG__BIG,
     "iterations until --min-lr is reached (default: --train-iters)"},
    {"--lr-warmup-samples", MG__F_INT, MG__OFF(lr_warmup_samples), "N", 0, MG__BIG,
     "with --train-samples: the warm-up in samples (default 0)"},
    {"--lr-decay-samples", MG__F_INT, MG__OFF(lr_decay_samples), "N", 1, MG__BIG,
     "with --train-samples: samples until --min-lr is reached (default: --train-samples)"},
    {"--lr-wsd-decay-style", MG__F_CHOICE, MG__OFF(lr_wsd_decay_style),
     MG__WSD_STYLES, 0, 0, "WSD's annealing, of its progress r: "
     "2 x 0.5^r - 1, 1 - r, (cos(pi r) + 1) / 2 or 1 - sqrt(r) (default exponential)"},
    {"--lr-wsd-decay-iters", MG__F_INT, MG__OFF(lr_wsd_decay_iters), "N", 0, MG__BIG,
     "WSD's annealing: the last N iterations of the decay (required with --lr-decay-style "
     "WSD)"},
    {"--lr-wsd-decay-samples", MG__F_INT, MG__OFF(lr_wsd_decay_samples), "N", 0, MG__BIG,
     "with --train-samples: WSD's annealing, the last N samples of the decay"},
    {"--override-opt_param-scheduler", MG__F_SWITCH, MG__OFF(override_opt_param_scheduler),
     NULL, 0, 0, "on --load, take --lr, --min-lr, --lr-warmup-iters, --lr-decay-iters (or "
     "--train-iters), --lr-decay-style and the weight decay (--weight-decay, or "
     "--weight-decay-incr-style's) from the command line even where the checkpoint's differ "
     "(without either switch a difference is an error)"},
    {"--use-checkpoint-opt_param-scheduler", MG__F_SWITCH,
     MG__OFF(use_checkpoint_opt_param_scheduler), NULL, 0, 0, "on --load, take those values "
     "from the checkpoint (--lr may then be left out)"},
    {"checkpointing", MG__F_HELP, 0, NULL, 0, 0, ""},
    {"--save", MG__F_STR, MG__OFF(save), "DIR", 0, 0,
     "save DIR/iter_NNNNNNN every --save-interval iterations and at the end"},
    {"--save-interval", MG__F_INT, MG__OFF(save_interval), "N", 1, MG__BIG,
     "iterations between checkpoints (needs --save)"},
    {"--load", MG__F_STR, MG__OFF(load), "DIR",  0, 0,
     "resume from the latest checkpoint in DIR (none there: start from scratch)"},
    {"--finetune", MG__F_SWITCH, MG__OFF(finetune), NULL, 0, 0,
     "take only the weights of --load's checkpoint: iteration 0, no samples consumed, a fresh "
     "optimizer and schedule, this command line's seed (Megatron-LM's --finetune)"},
    {"--no-save-optim", MG__F_SWITCH, MG__OFF(no_save_optim), NULL, 0, 0,
     "checkpoints hold the weights and the progress but not the optimizer's moments (a third "
     "of the size); such a checkpoint resumes with --no-load-optim or --finetune"},
    {"--no-load-optim", MG__F_SWITCH, MG__OFF(no_load_optim), NULL, 0, 0,
     "take --load's weights, iteration and consumed samples but not its optimizer: fresh Adam "
     "moments, step count and loss scaler, so the learning-rate schedule starts again from "
     "its warm-up; with --bf16 or --fp16 the fp32 master weights are the checkpoint's 16-bit "
     "weights widened, as Megatron-LM's --no-load-optim"},
    {"--load-main-params-from-ckpt", MG__F_SWITCH, MG__OFF(load_main_params_from_ckpt), NULL, 0,
     0, "with --no-load-optim: the checkpoint's fp32 master weights instead"},
    {"--export-hf", MG__F_STR, MG__OFF(export_hf), "DIR", 0, 0,
     "at the end, write DIR/model.safetensors + DIR/config.json for Hugging Face transformers "
     "(GPT2LMHeadModel, or LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM)"},
    {"mixed precision", MG__F_HELP, 0, NULL, 0, 0, "16-bit weights (a copy of the fp32 master "
     "weights), activations and activation gradients; fp32 GEMM accumulation, gradients, Adam "
     "moments, layernorm/softmax statistics and loss"},
    {"--bf16", MG__F_SWITCH, MG__OFF(bf16), NULL, 0, 0, "bfloat16 storage"},
    {"--fp16", MG__F_SWITCH, MG__OFF(fp16), NULL, 0, 0, "float16 storage with loss scaling "
     "(dynamic unless --loss-scale)"},
    {"--loss-scale", MG__F_FLOAT, MG__OFF(loss_scale), "X", 1e-30, 1e30,
     "with --fp16: a constant loss scale instead of the dynamic one"},
    {"--initial-loss-scale", MG__F_FLOAT, MG__OFF(initial_loss_scale), "X", 1e-30, 1e30,
     "with --fp16: the dynamic scale's start (default 2^32)"},
    {"--min-loss-scale", MG__F_FLOAT, MG__OFF(min_loss_scale), "X", 1e-30, 1e30,
     "with --fp16: the dynamic scale's floor (default 1)"},
    {"--loss-scale-window", MG__F_INT, MG__OFF(loss_scale_window), "N", 1, MG__BIG,
     "with --fp16: double the scale after N iterations without inf/nan (default 1000)"},
    {"--hysteresis", MG__F_INT, MG__OFF(hysteresis), "N", 1, 1e9,
     "with --fp16: halve the scale from the N-th inf/nan iteration since the last growth on "
     "(default 2)"},
    {"distributed", MG__F_HELP, 0, NULL, 0, 0, "launch with mpirun -np N; N = T x P x D: D = "
     "N/(T*P) data-parallel replicas, each reading 1/D of every global batch"},
    {"--tensor-model-parallel-size", MG__F_INT, MG__OFF(tensor_model_parallel_size), "T", 1,
     1024, "split every layer over T ranks: attention heads, MLP columns and vocabulary "
     "divided, Megatron's column/row-parallel layers (default 1)"},
    {"--context-parallel-size", MG__F_INT, MG__OFF(context_parallel_size), "C", 1, 1024,
     "split every sequence over C ranks (ring attention; rank i holds chunks i and 2C-1-i of "
     "2C; --seq-length divisible by 2C; ranks = T x C x D x P, default 1)"},
    {"--sequence-parallel", MG__F_SWITCH, MG__OFF(sequence_parallel), NULL, 0, 0,
     "with T > 1, also split the layernorm, dropout and residual regions along the sequence "
     "(--seq-length divisible by T)"},
    {"--pipeline-model-parallel-size", MG__F_INT, MG__OFF(pipeline_model_parallel_size), "P", 1,
     1e6, "pipeline stages p: the layers are divided over p groups of t ranks (t·p must divide "
     "the world size, p --num-layers; default 1)"},
    {"--num-layers-per-virtual-pipeline-stage", MG__F_INT,
     MG__OFF(num_layers_per_virtual_pipeline_stage), "K", 1, 1e6, "interleaved schedule: each "
     "rank holds v = layers/(p*K) model chunks of K layers (rank i: chunks i, i+p, …)"},
    {"--num-virtual-stages-per-pipeline-rank", MG__F_INT,
     MG__OFF(num_virtual_stages_per_pipeline_rank), "V", 1, 1e6, "interleaved schedule: "
     "each rank holds v = V model chunks of layers/(p*V) layers (instead of K; p*V divides "
     "the layers)"},
    {"--pipeline-schedule", MG__F_CHOICE, MG__OFF(pipeline_schedule),
     "gpipe|1f1b|interleaved|zb-h1", 0, 0, "the order of forward and backward passes (default "
     "1f1b; interleaved when --num-layers-per-virtual-pipeline-stage gives v > 1)"},
    {"--microbatch-group-size-per-virtual-pipeline-stage", MG__F_INT,
     MG__OFF(microbatch_group_size_per_vp_stage), "N", 1, 1e6, "interleaved schedule: "
     "microbatches each chunk runs before the next chunk takes over, p <= N <= m (default p)"},
    {"--pipeline-schedule-file", MG__F_STR, MG__OFF(pipeline_schedule_file), "FILE", 0, 0,
     "run the schedule written in FILE (mg_pipeline.h's text form: one line per rank, tokens "
     "like 0F0 1B0 0I2 0W2), validated before it runs"},
    {"--pipeline-trace", MG__F_STR, MG__OFF(pipeline_trace), "FILE", 0, 0,
     "write the measured time of every action of the last iteration to FILE (draw it: "
     "pipeline_sim --trace FILE --svg out.svg)"},
    {"--use-distributed-optimizer", MG__F_SWITCH, MG__OFF(use_distributed_optimizer), NULL, 0,
     0, "ZeRO-1: shard the AdamW moments over the D data-parallel replicas (reduce-scatter of "
     "the gradients, all-gather of the updated parameters)"},
    {"--bucket-size", MG__F_INT, MG__OFF(bucket_size), "N", 0, MG__BIG,
     "elements per data-parallel gradient-reduction bucket, each reduced while the backward "
     "goes on (default 0: Megatron's max(40M, 1M x D))"},
    {"--comm-timeout", MG__F_FLOAT, MG__OFF(comm_timeout), "SECONDS", 1e-3, 1e9,
     "a collective or pipeline transfer that waits longer than this stops the job with a "
     "message naming the operation and group (default 600)"},
    {"--distributed-timeout-minutes", MG__F_FLOAT, MG__OFF(distributed_timeout_minutes),
     "MINUTES", 1e-3 / 60, 1e9 / 60, "Megatron-LM's spelling of the same bound: --comm-timeout "
     "60 x MINUTES (Megatron's default 10 is --comm-timeout's 600)"},
    {"validation", MG__F_HELP, 0, NULL, 0, 0, "the loss on the validation part of --split (or "
     "on --valid-data-path; --test-data-path: once after training); a "
     "data set too small to give that part a document (or one sample) trains without "
     "validation, as Megatron-LM does, and one line says so"},
    {"--eval-interval", MG__F_INT, MG__OFF(eval_interval), "N", 1, MG__BIG,
     "validation loss every N iterations and at the end (default 1000)"},
    {"--eval-iters", MG__F_INT, MG__OFF(eval_iters), "N", 0, MG__BIG,
     "global batches per validation (and test); 0 disables them (default 100)"},
    {"data and dataloader", MG__F_HELP, 0, NULL, 0, 0, ""},
    {"--data-path", MG__F_LIST, MG__OFF(data_path), "[W1] PATH1 [W2 PATH2 ...]", 0, 0,
     "a Megatron indexed dataset prefix (PATH.bin + PATH.idx) or an llm.c token file; or a "
     "blend: weight, prefix pairs (weights normalised; Megatron's BlendedDataset), each "
     "dataset split by --split"},
    {"--data-args-path", MG__F_STR, MG__OFF(data_args_path), "FILE", 0, 0,
     "instead of --data-path: a file holding its words (PATH, or W1 PATH1 W2 PATH2 …, "
     "separated by any whitespace), for blends too long for a command line"},
    {"--per-split-data-args-path", MG__F_STR, MG__OFF(per_split_data_args_path), "FILE", 0, 0,
     "instead of --train-data-path, --valid-data-path and --test-data-path: a JSON file "
     "{\"train\": …, \"valid\": …, \"test\": …}, each a list of words or one string of them "
     "(null: none)"},
    {"--mock-data", MG__F_SWITCH, MG__OFF(mock_data), NULL, 0, 0,
     "instead of --data-path: Megatron-LM's mock dataset (100000 documents of 1 to 4095 "
     "tokens, lengths from numpy's default_rng(0), tokens 1, 2, … then the tokenizer's "
     "end-of-document id), split by --split and sampled in Megatron's order; needs "
     "--tokenizer-type (e.g. NullTokenizer --vocab-size V)"},
    {"--split", MG__F_STR, MG__OFF(split), "A,B,C", 0, 0,
     "train,validation,test weights of the data's documents (default 969,30,1)"},
    {"--train-data-path", MG__F_LIST, MG__OFF(train_data_path), "[W1] PATH1 ...", 0, 0,
     "instead of --data-path and --split: the training data (all of it), one path or a blend"},
    {"--valid-data-path", MG__F_LIST, MG__OFF(valid_data_path), "[W1] PATH1 ...", 0, 0,
     "with --train-data-path: the validation data (all of it); none: no validation"},
    {"--test-data-path", MG__F_LIST, MG__OFF(test_data_path), "[W1] PATH1 ...", 0, 0,
     "with --train-data-path: test data, evaluated (--eval-iters batches) after training"},
    {"--seq-length", MG__F_INT, MG__OFF(seq_length), "T", 1, 1e7,
     "tokens per training sample (default: --max-position-embeddings of a loaded model)"},
    {"--data-order", MG__F_CHOICE, MG__OFF(data_order), "shuffled|sequential", 0, 0,
     "shuffled: Megatron's GPTDataset order; sequential: sample i of iteration k is tokens "
     "[(k*B+i)*T, (k*B+i)*T+T+1) of the split (default shuffled)"},
    {"--tokenizer-type", MG__F_STR, MG__OFF(tokenizer_type), "NAME", 0, 0,
     "GPT2BPETokenizer, TikTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, "
     "Llama2Tokenizer, NullTokenizer (no file: ids 0 … V-1 and V its end of document, with "
     "--vocab-size V) or ByteTokenizer: sets --vocab-size, checks the data's ids, decodes the "
     "generated sample and encodes --prompt"},
    {"--vocab-file", MG__F_STR, MG__OFF(vocab_file), "FILE", 0, 0,
     "GPT2BPETokenizer: vocab.json (the other types: their one file, as --tokenizer-model)"},
    {"--merge-file", MG__F_STR, MG__OFF(merge_file), "FILE", 0, 0,
     "GPT2BPETokenizer: merges.txt"},
    {"--tokenizer-model", MG__F_STR, MG__OFF(tokenizer_model), "FILE", 0, 0,
     "TikTokenizer: the .tiktoken rank file; HuggingFaceTokenizer: tokenizer.json (or its "
     "directory); SentencePieceTokenizer, Llama2Tokenizer: tokenizer.model"},
    {"--tiktoken-pattern", MG__F_STR, MG__OFF(tiktoken_pattern), "NAME", 0, 0,
     "TikTokenizer: gpt2, r50k_base, cl100k_base or o200k_base (default: from the rank count)"},
    {"--eod-mask-loss", MG__F_SWITCH, MG__OFF(eod_mask_loss), NULL, 0, 0,
     "leave out of the loss every position whose input token is the end-of-document id (the "
     "prediction of a document's first token from the previous document): each microbatch's "
     "loss is the mean over the positions it keeps (Megatron-LM's loss mask)"},
    {"--eod-token-id", MG__F_INT, MG__OFF(eod_token_id), "ID", 0, 2147483647.0,
     "with --eod-mask-loss: the end-of-document id (default: --tokenizer-type's; give it for "
     "ids-only data)"},
    {"--calculate-per-token-loss", MG__F_SWITCH, MG__OFF(calculate_per_token_loss), NULL, 0, 0,
     "with --eod-mask-loss: the loss and its gradient are the mean over all kept positions of "
     "the global batch, not the mean of the microbatches' means (without a mask they agree)"},
    {"logging", MG__F_HELP, 0, NULL, 0, 0, ""},
    {"--log-interval", MG__F_INT, MG__OFF(log_interval), "N", 1, MG__BIG,
     "print the training line every N iterations (default 100)"},
    {"--log-jsonl", MG__F_STR, MG__OFF(log_jsonl), "FILE",  0, 0,
     "also append one JSON object per logged iteration to FILE"},
    {"--log-params-norm", MG__F_SWITCH, MG__OFF(log_params_norm), NULL, 0, 0,
     "compute the L2 norm of the fp32 weights after each update; shown as params norm"},
    {"--log-num-zeros-in-grad", MG__F_SWITCH, MG__OFF(log_num_zeros_in_grad), NULL, 0, 0,
     "count the zero entries of the reduced gradient each iteration; shown as num zeros"},
    {"--log-throughput", MG__F_SWITCH, MG__OFF(log_throughput), NULL, 0, 0,
     "with --log-timers-to-tensorboard: also write the TFLOP/s/GPU as the scalar throughput "
     "(the log line always shows it)"},
    {"--timing-log-level", MG__F_INT, MG__OFF(timing_log_level), "0|1|2", 0, 2,
     "timers printed after each log line: 0 none; 1 forward-backward, gradient reductions, "
     "optimizer and its parts; 2 also forward-compute, backward-compute, batch-generator, "
     "the pipeline's send/recv (default 0)"},
    {"--timing-log-option", MG__F_CHOICE, MG__OFF(timing_log_option), "max|minmax|all", 0, 0,
     "each timer's time across ranks: the maximum, the (min, max) pair, or every rank's "
     "(default minmax)"},
    {"--tensorboard-dir", MG__F_STR, MG__OFF(tensorboard_dir), "DIR", 0, 0,
     "write TensorBoard event files into DIR (the last rank writes; tensorboard --logdir DIR)"},
    {"--tensorboard-log-interval", MG__F_INT, MG__OFF(tensorboard_log_interval), "N", 1,
     MG__BIG, "iterations between the per-iteration TensorBoard scalars (default 1)"},
    {"--log-timers-to-tensorboard", MG__F_SWITCH, MG__OFF(log_timers_to_tensorboard), NULL, 0,
     0, "also write iteration-time and each timer (NAME-time, ms, max across ranks)"},
    {"--log-memory-to-tensorboard", MG__F_SWITCH, MG__OFF(log_memory_to_tensorboard), NULL, 0,
     0, "also write mem-reserved-bytes, mem-allocated-bytes, mem-max-allocated-bytes, "
     "mem-allocated-count"},
    {"--log-world-size-to-tensorboard", MG__F_SWITCH, MG__OFF(log_world_size_to_tensorboard),
     NULL, 0, 0, "also write world-size (the number of ranks)"},
    {"--log-validation-ppl-to-tensorboard", MG__F_SWITCH,
     MG__OFF(log_validation_ppl_to_tensorboard), NULL, 0, 0,
     "also write the validation perplexity (lm loss validation ppl)"},
    {"inference", MG__F_HELP, 0, NULL, 0, 0, ""},
    {"--sample-tokens", MG__F_INT, MG__OFF(sample_tokens), "N", 0, 1e7,
     "generate N tokens at the end and print them (default 0)"},
    {"--prompt", MG__F_STR, MG__OFF(prompt), "TEXT", 0, 0,
     "with --tokenizer-type and --sample-tokens: the text the sample continues"},
    {"device", MG__F_HELP, 0, NULL, 0, 0, ""},
    {"--device", MG__F_CHOICE, MG__OFF(device), "auto|cpu|cuda", 0, 0,
     "auto: the GPU when built by nvcc and one is present, else the CPU (default auto; "
     "OMP_NUM_THREADS sets the CPU threads)"},
    {"--enable-cuda-graph", MG__F_SWITCH, MG__OFF(enable_cuda_graph), NULL, 0, 0,
     "capture the optimizer step (gradient norm, clip and loss-scale decisions, fused AdamW) "
     "as one CUDA graph at the first iteration and replay it (one rank on the GPU)"},
};
#define MG__NFLAGS ((int)(sizeof mg__flags / sizeof mg__flags[0]))
typedef char mg__flags_fit_given[MG__NFLAGS <= 256 ? 1 : -1]; /* mg_train_args.given[256] */

/* Megatron-LM flags taken for compatibility (docs/training-cli.md, "Megatron-LM flags
   accepted for compatibility"): launch scripts written for Megatron-LM carry switches that
   pick its kernels, fusions and implementations, and flags of features megatron.h lacks. One
   row per flag (or per flag and group of values): what happens here, and why —
   - MG__COMPAT_SAME: accepted; the run is what megatron.h always does (text: why);
   - MG__COMPAT_NOTE: accepted, but it does not apply literally: the text is printed once as a
     warning (mg_train_print_compat_notes) and the run goes on;
   - MG__COMPAT_ALIAS: Megatron's older spelling of one of our flags (text: "--flag value"),
     applied after the command line is read, as Megatron's validate_args overrides; with
     values (a metavariable such as "EPS"), an older name of a valued flag (text: "--flag"),
     set where it stands on the line with the value given;
   - MG__COMPAT_REFUSED: it would change the numbers and megatron.h does not implement it: an
     error naming it (text: what is missing).
   values: NULL for a switch; "N" a whole number >= 0; "DIR" any text; else the words "a|b"
   this row takes (a flag's rows together give its choices). A refused flag is refused by its
   name, before its value is read, unless its row lists words.                                */
typedef enum { MG__COMPAT_SAME, MG__COMPAT_NOTE, MG__COMPAT_ALIAS, MG__COMPAT_REFUSED }
    mg__compat_kind;
typedef struct mg__compat_flag {
    const char *name, *values;
    mg__compat_kind kind;
    const char *text;
} mg__compat_flag;
#define MG__FUSION "a kernel fusion: megatron.h's kernels are its own, the math is the same"
#define MG__SCHEDULING "a scheduling choice of Megatron's collectives and transfers: the same " \
    "sums arrive"
#define MG__DIST_CKPT "an option of Megatron-LM's distributed checkpoint format; megatron.h " \
    "writes its own layout-free checkpoints (docs/checkpoints.md)"
#define MG__NO_RNG "no random state is saved: dropout masks and the data order are functions " \
    "of --seed, the iteration and the sample"
#define MG__NO_WANDB "no Weights & Biases logging here: the figures go to --tensorboard-dir " \
    "and --log-jsonl"
static const mg__compat_flag mg__compat_flags[] = {
    {"--use-mcore-models", NULL, MG__COMPAT_SAME, "Megatron-LM's default model classes "
     "(the flag is deprecated there): megatron.h has one implementation"},
    {"--transformer-impl", "local", MG__COMPAT_SAME, "megatron.h's own layers are local ones"},
    {"--transformer-impl", "transformer_engine", MG__COMPAT_NOTE, "no Transformer Engine "
     "here: megatron.h's own layers run (the same math)"},
    {"--use-flash-attn", NULL, MG__COMPAT_SAME, "the default attention is flash attention "
     "(tiled, online softmax: --attention-backend flash); refused with --attention-backend "
     "unfused or local"},
    {"--attention-softmax-in-fp32", NULL, MG__COMPAT_SAME, "the softmax statistics are fp32 "
     "in every precision"},
    {"--apply-query-key-layer-scaling", NULL, MG__COMPAT_SAME, "Megatron divides the scores "
     "by the layer number and multiplies them back inside its fp32 softmax: the same "
     "probabilities as without it (megatron.h's softmax is fp32)"},
    {"--masked-softmax-fusion", NULL, MG__COMPAT_SAME, MG__FUSION},
    {"--no-masked-softmax-fusion", NULL, MG__COMPAT_SAME, MG__FUSION},
    {"--bias-gelu-fusion", NULL, MG__COMPAT_SAME, MG__FUSION},
    {"--no-bias-dropout-fusion", NULL, MG__COMPAT_SAME, MG__FUSION},
    {"--no-bias-swiglu-fusion", NULL, MG__COMPAT_SAME, MG__FUSION},
    {"--use-legacy-models", NULL, MG__COMPAT_SAME, "Megatron-LM's older model classes compute "
     "the same GPT; megatron.h has one implementation"},
    {"--no-rope-fusion", NULL, MG__COMPAT_SAME, MG__FUSION},
    {"--no-gradient-accumulation-fusion", NULL, MG__COMPAT_SAME, "weight gradients "
     "accumulate in fp32 either way (Megatron's fusion only writes them in place)"},
    {"--cross-entropy-loss-fusion", NULL, MG__COMPAT_SAME, "the output layer and the "
     "cross-entropy are always fused (--classifier-chunk-rows)"},
    {"--accumulate-allreduce-grads-in-fp32", NULL, MG__COMPAT_SAME, "gradients are "
     "accumulated and reduced in fp32 in every precision"},
    {"--overlap-grad-reduce", NULL, MG__COMPAT_SAME, "each gradient bucket's reduction "
     "already starts while the backward goes on (docs/parallelism.md)"},
    {"--overlap-param-gather", NULL, MG__COMPAT_SAME, "a scheduling choice: the updated "
     "parameters are all-gathered after the step, the same weights; needs "
     "--use-distributed-optimizer and --overlap-grad-reduce, as in Megatron-LM"},
    {"--ddp-average-in-collective", NULL, MG__COMPAT_SAME, "the data-parallel reduction sums "
     "gradients seeded with 1/(global tokens): the same mean"},
    {"--no-async-tensor-model-parallel-allreduce", NULL, MG__COMPAT_SAME, "a scheduling "
     "choice of Megatron's: the all-reduce and its result are the same"},
    {"--async-tensor-model-parallel-allreduce", NULL, MG__COMPAT_SAME, "a scheduling "
     "choice of Megatron's: the all-reduce and its result are the same"},
    {"--no-scatter-gather-tensors-in-pipeline", NULL, MG__COMPAT_SAME, "how Megatron splits a "
     "pipeline transfer over the tensor group: the same activations arrive"},
    {"--DDP-impl", "local|torch", MG__COMPAT_SAME, "gradients are reduced by megatron.h's own "
     "bucketed data parallelism: the same mean"},
    {"--use-contiguous-buffers-in-local-ddp", NULL, MG__COMPAT_SAME, "gradients live in one "
     "flat buffer either way"},
    {"--no-contiguous-buffers-in-local-ddp", NULL, MG__COMPAT_SAME, "gradients live in one "
     "flat buffer either way"},
    {"--no-query-key-layer-scaling", NULL, MG__COMPAT_SAME, "the softmax is fp32 here, where "
     "dividing the scores by the layer number and multiplying them back changes nothing"},
    {"--overlap-p2p-communication", NULL, MG__COMPAT_SAME, MG__SCHEDULING},
    {"--no-overlap-p2p-communication", NULL, MG__COMPAT_SAME, MG__SCHEDULING},
    {"--defer-embedding-wgrad-compute", NULL, MG__COMPAT_SAME, MG__SCHEDULING},
    {"--delay-param-gather", NULL, MG__COMPAT_SAME, MG__SCHEDULING},
    {"--align-grad-reduce", NULL, MG__COMPAT_SAME, MG__SCHEDULING},
    {"--no-align-grad-reduce", NULL, MG__COMPAT_SAME, MG__SCHEDULING},
    {"--align-param-gather", NULL, MG__COMPAT_SAME, MG__SCHEDULING},
    {"--no-align-param-gather", NULL, MG__COMPAT_SAME, MG__SCHEDULING},
    {"--use-tp-pp-dp-mapping", NULL, MG__COMPAT_SAME, "the order of the ranks in the groups "
     "decides which ranks talk, not the numbers"},
    {"--optimizer", "adam", MG__COMPAT_SAME, "Megatron-LM's adam is AdamW (decoupled weight "
     "decay), the optimizer here"},
    {"--optimizer", "sgd", MG__COMPAT_REFUSED, "the optimizer is AdamW (Megatron-LM's adam)"},
    {"--use-precision-aware-optimizer", NULL, MG__COMPAT_SAME, "with the optimizer dtypes at "
     "their fp32 defaults it is the same AdamW; lower-precision states are refused"},
    {"--main-grads-dtype", "fp32", MG__COMPAT_SAME, "main gradients are fp32 here"},
    {"--main-grads-dtype", "bf16", MG__COMPAT_REFUSED, "main gradients are fp32"},
    {"--main-params-dtype", "fp32", MG__COMPAT_SAME, "master weights are fp32 here"},
    {"--main-params-dtype", "fp16", MG__COMPAT_REFUSED, "master weights are fp32"},
    {"--exp-avg-dtype", "fp32", MG__COMPAT_SAME, "Adam's moments are fp32 here"},
    {"--exp-avg-dtype", "fp16|bf16|fp8", MG__COMPAT_REFUSED, "Adam's moments are fp32"},
    {"--exp-avg-sq-dtype", "fp32", MG__COMPAT_SAME, "Adam's moments are fp32 here"},
    {"--exp-avg-sq-dtype", "fp16|bf16|fp8", MG__COMPAT_REFUSED, "Adam's moments are fp32"},
    {"--grad-reduce-in-bf16", NULL, MG__COMPAT_NOTE, "gradients are reduced in fp32 here, as "
     "without the flag"},
    {"--cross-entropy-fusion-impl", "native|te", MG__COMPAT_SAME, "the output layer and the "
     "cross-entropy are always fused (--classifier-chunk-rows)"},
    {"--ckpt-fully-parallel-save", NULL, MG__COMPAT_SAME, MG__DIST_CKPT},
    {"--no-ckpt-fully-parallel-save", NULL, MG__COMPAT_SAME, MG__DIST_CKPT},
    {"--ckpt-fully-parallel-load", NULL, MG__COMPAT_SAME, MG__DIST_CKPT},
    {"--ckpt-assume-constant-structure", NULL, MG__COMPAT_SAME, MG__DIST_CKPT},
    {"--use-persistent-ckpt-worker", NULL, MG__COMPAT_SAME, MG__DIST_CKPT},
    {"--auto-detect-ckpt-format", NULL, MG__COMPAT_SAME, "checkpoints and weight files are "
     "recognised by their content"},
    {"--mmap-bin-files", NULL, MG__COMPAT_SAME, "the .bin files are read through a memory map"},
    {"--no-mmap-bin-files", NULL, MG__COMPAT_SAME, "the .bin files are read through a memory "
     "map: the same tokens"},
    {"--log-straggler", NULL, MG__COMPAT_NOTE, "no straggler detector here: --timing-log-option "
     "minmax or all shows every rank's times"},
    {"--fp16-lm-cross-entropy", NULL, MG__COMPAT_NOTE, "the cross-entropy is computed in fp32 "
     "from fp32 logits (Megatron-LM computes it in fp16 with this flag)"},
    {"--distributed-backend", "nccl", MG__COMPAT_SAME, "ranks talk through MPI, and NCCL on "
     "GPUs"},
    {"--distributed-backend", "gloo", MG__COMPAT_NOTE, "ranks talk through MPI (NCCL on "
     "GPUs), not gloo: the same sums"},
    {"--use-cpu-initialization", NULL, MG__COMPAT_SAME, "the initial weights are drawn "
     "from --seed by global position: the same on every device and layout"},
    {"--empty-unused-memory-level", "0|1|2", MG__COMPAT_SAME, "memory is preallocated arenas; "
     "there is no allocator cache to empty"},
    {"--distribute-saved-activations", NULL, MG__COMPAT_NOTE, "it changes where recomputation's "
     "checkpointed inputs are kept, not the math; each tensor rank keeps them whole here"},
    {"--log-progress", NULL, MG__COMPAT_NOTE, "no progress.txt of tokens and FLOPs is written "
     "in the checkpoint directory (the log line and --log-jsonl hold both)"},
    {"--num-workers", "N", MG__COMPAT_SAME, "samples are read by the training thread from the "
     "mapped data files"},
    {"--dataloader-type", "single", MG__COMPAT_SAME, "Megatron's default: each sample once, "
     "in the dataset's shuffled order"},
    {"--dataloader-type", "cyclic|external", MG__COMPAT_REFUSED, "megatron.h reads the samples "
     "in the order of --dataloader-type single (Megatron's default)"},
    {"--no-create-attention-mask-in-dataloader", NULL, MG__COMPAT_SAME, "the causal mask is "
     "never materialised"},
    {"--no-persist-layer-norm", NULL, MG__COMPAT_SAME, MG__FUSION},
    {"--manual-gc", NULL, MG__COMPAT_SAME, "there is no Python garbage collector to schedule"},
    {"--manual-gc-interval", "N", MG__COMPAT_SAME, "there is no Python garbage collector to "
     "schedule"},
    {"--tensorboard-queue-size", "N", MG__COMPAT_SAME, "TensorBoard events are written and "
     "flushed as they come"},
    {"--wandb-project", "DIR", MG__COMPAT_NOTE, MG__NO_WANDB},
    {"--wandb-exp-name", "DIR", MG__COMPAT_NOTE, MG__NO_WANDB},
    {"--wandb-save-dir", "DIR", MG__COMPAT_NOTE, MG__NO_WANDB},
    {"--async-save", NULL, MG__COMPAT_NOTE, "checkpoints are saved while training waits "
     "(written to temporary names, fsynced, renamed): the same files"},
    {"--tp-comm-overlap", NULL, MG__COMPAT_NOTE, "Transformer Engine's overlap of the "
     "tensor-parallel communication with the GEMMs is not here: the collectives run between "
     "the GEMMs (the same sums)"},
    {"--exit-on-missing-checkpoint", NULL, MG__COMPAT_SAME, "with --load and no checkpoint "
     "there, the run stops with one line instead of starting from random weights, as "
     "Megatron-LM's exits"},
    {"--data-cache-path", "DIR", MG__COMPAT_SAME, "the sample index is built in memory at "
     "startup; nothing is cached"},
    {"--data-impl", "mmap|infer", MG__COMPAT_SAME, "Megatron's indexed datasets are read "
     "memory-mapped (the flag left Megatron-LM in 2023)"},
    {"--data-impl", "lazy|cached", MG__COMPAT_REFUSED, "only the mmap format of Megatron's "
     "indexed datasets is read"},
    {"--use-checkpoint-args", NULL, MG__COMPAT_SAME, "the model flags always come from "
     "--load's checkpoint (flags given as well must agree)"},
    {"--no-initialization", NULL, MG__COMPAT_SAME, "initial weights are drawn at setup "
     "either way; a checkpoint's or --init-from's replace them"},
    {"--use-dist-ckpt", NULL, MG__COMPAT_NOTE, "checkpoints are megatron.h's layout-free "
     "safetensors (docs/checkpoints.md), which load under any layout"},
    {"--no-check-for-nan-in-loss-and-grad", NULL, MG__COMPAT_SAME, "a non-finite gradient "
     "norm never stops a run here (Megatron-LM's check raises): in every precision the update "
     "is skipped and counted in the log's 'number of skipped iterations'"},
    {"--no-position-embedding", NULL, MG__COMPAT_SAME, "rotary positions keep no position "
     "table; with any other --position-embedding-type it is refused, as Megatron-LM refuses "
     "it"},
    {"--no-load-rng", NULL, MG__COMPAT_SAME, MG__NO_RNG},
    {"--no-save-rng", NULL, MG__COMPAT_SAME, MG__NO_RNG},
    {"--ckpt-format", "torch|torch_dist|torch_dcp|zarr|fsdp_dtensor", MG__COMPAT_NOTE,
     "checkpoints are megatron.h's layout-free safetensors (docs/checkpoints.md), not "
     "Megatron-LM's files: they load here under any layout, not in Megatron-LM"},
    {"--recompute-activations", NULL, MG__COMPAT_ALIAS, "--recompute-granularity selective"},
    {"--layernorm-epsilon", "EPS", MG__COMPAT_ALIAS, "--norm-epsilon"},
    {"--ddp-bucket-size", "N", MG__COMPAT_ALIAS, "--bucket-size"},
    {"--deterministic-mode", NULL, MG__COMPAT_SAME, "megatron.h has no nondeterministic "
     "kernels to turn off: its sums run in a fixed order"},
    {"--profile", NULL, MG__COMPAT_NOTE, "no profiler hooks: run nsys or ncu on the program "
     "(docs/performance.md)"},
    {"--use-pytorch-profiler", NULL, MG__COMPAT_NOTE, "no PyTorch profiler: run nsys or ncu on "
     "the program (docs/performance.md)"},
    {"--profile-step-start", "N", MG__COMPAT_NOTE, "no profiler hooks: run nsys or ncu on the "
     "program"},
    {"--profile-step-end", "N", MG__COMPAT_NOTE, "no profiler hooks: run nsys or ncu on the "
     "program"},
    {"--record-memory-history", NULL, MG__COMPAT_NOTE, "no PyTorch allocator history: the "
     "memory report after the first iteration gives the arena's use"},
    {"--check-weight-hash-across-dp-replicas-interval", "N", MG__COMPAT_NOTE, "no periodic "
     "hash check: the replicas' weights are bit-identical by construction (tests/test_dp.c)"},
    {"--non-persistent-save-interval", "N", MG__COMPAT_REFUSED, "no non-persistent (local) "
     "checkpoints: --save-interval writes every checkpoint"},
    {"--window-size", NULL, MG__COMPAT_REFUSED, "attention sees every earlier position (no "
     "sliding window)"},
    {"--use-rotary-position-embeddings", NULL, MG__COMPAT_ALIAS,
     "--position-embedding-type rope"},
    {"--reset-position-ids", NULL, MG__COMPAT_NOTE, "rotary positions run over the whole "
     "sequence, as in Megatron-LM, whose rotary embedding reads no position ids (it resets "
     "learned absolute positions only, which megatron.h refuses)"},
    {"--reset-attention-mask", NULL, MG__COMPAT_REFUSED, "attention is causal over the whole "
     "sequence, across document boundaries"},
    {"--qk-layernorm", NULL, MG__COMPAT_REFUSED, "no norm on queries and keys"},
    {"--rotary-interleaved", NULL, MG__COMPAT_REFUSED, "rotary dimensions pair as rotate-half "
     "(i, i + d/2), Megatron-LM's default, not interleaved"},
    {"--checkpoint-activations", NULL, MG__COMPAT_REFUSED, "Megatron-LM's removed spelling "
     "(it refuses it too): give --recompute-activations, or --recompute-granularity full "
     "--recompute-method uniform --recompute-num-layers N"},
    {"--checkpoint-num-layers", "N", MG__COMPAT_REFUSED, "Megatron-LM's removed spelling: give "
     "--recompute-num-layers N with --recompute-granularity full"},
    {"--apply-residual-connection-post-layernorm", NULL, MG__COMPAT_REFUSED, "the residual "
     "adds the layer's input, before its norm (pre-norm, GPT's ordering)"},
    {"--num-experts", "N", MG__COMPAT_REFUSED, "no mixture of experts: every layer has one "
     "MLP"},
    {"--fp8-format", NULL, MG__COMPAT_REFUSED, "no fp8 training: --bf16 or --fp16"},
    {"--rampup-batch-size", "N", MG__COMPAT_REFUSED, "the global batch is constant "
     "(--global-batch-size); Megatron-LM ramps it up only with --train-samples, and refuses it "
     "with --train-iters too"},
};
#define MG__NCOMPAT ((int)(sizeof mg__compat_flags / sizeof mg__compat_flags[0]))
typedef char mg__compat_fit_given[MG__NCOMPAT <= 128 ? 1 : -1]; /* mg_train_args.compat_given */

/* The first row of the compatibility flag name, or -1. */
static int mg__compat_index(const char *name) {
    int i;
    for (i = 0; i < MG__NCOMPAT; i++)
        if (!strcmp(mg__compat_flags[i].name, name)) return i;
    return -1;
}

static int mg__compat_given(const mg_train_args *a, const char *name) {
    int i;
    for (i = 0; i < MG__NCOMPAT; i++)
        if (a->compat_given[i] && !strcmp(mg__compat_flags[i].name, name)) return 1;
    return 0;
}

MGDEF void mg_train_args_default(mg_train_args *a) {
    memset(a, 0, sizeof *a);
    a->micro_batch_size = 1;
    a->lr = -1;                          /* required                                           */
    a->train_iters = -1;                 /* required                                           */
    a->lr_decay_style = MG_LR_LINEAR;
    a->weight_decay = 0.01;
    a->init_method_std = 0.02;
    a->clip_grad = 1.0;
    a->adam_beta1 = 0.9;
    a->adam_beta2 = 0.999;
    a->adam_eps = 1e-8;
    a->seed = 1234;
    a->tensor_model_parallel_size = 1;
    a->make_vocab_size_divisible_by = 128;
    a->context_parallel_size = 1;
    a->log_interval = 100;
    a->tensorboard_log_interval = 1;
    a->timing_log_option = MG_TIMING_MINMAX;
    a->eval_interval = 1000;
    a->eval_iters = 100;
    a->split = "969,30,1";
    a->eod_token_id = -1;
    a->data_order = MG_ORDER_SHUFFLED;
    a->device = MG_DEVICE_AUTO;
    a->pipeline_model_parallel_size = 1;
    a->comm_timeout = 600;
    a->pipeline_schedule = MG_SCHED_1F1B;
    a->initial_loss_scale = 4294967296.0;  /* 2^32 */
    a->min_loss_scale = 1.0;
    a->loss_scale_window = 1000;
    a->hysteresis = 2;
    a->norm_epsilon = 1e-5;
    a->rotary_base = 10000;
    a->rotary_percent = 1.0;
    a->rope_scaling_factor = 8.0;
    a->rotary_seq_len_interpolation_factor = 1.0;
}

static int mg__flag_index(const char *name) {
    int i;
    for (i = 0; i < MG__NFLAGS; i++)
        if (mg__flags[i].type != MG__F_HELP && !strcmp(mg__flags[i].name, name)) return i;
    return -1;
}
MGDEF int mg_train_flag_given(const mg_train_args *a, const char *flag) {
    int i = mg__flag_index(flag);
    return i >= 0 && a->given[i];
}

/* Index of value among the "a|b|c" choices (nocase: ignoring upper/lower case), or -1. */
static int mg__choice(const char *choices, const char *value, int nocase) {
    int idx = 0;
    size_t n = strlen(value);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !(nocase ? strncasecmp(p, value, n) : strncmp(p, value, n))) return idx;
        idx++;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

/* The k-th of the "a|b|c" choices into out. */
static void mg__choice_name(const char *choices, int k, char *out, size_t cap) {
    const char *p = choices;
    while (k-- > 0 && strchr(p, '|')) p = strchr(p, '|') + 1;
    snprintf(out, cap, "%.*s", (int)(strchr(p, '|') ? strchr(p, '|') - p : (long)strlen(p)), p);
}

/* The command line's word argv[*i] names compatibility row `row`'s flag (name, and the value
   after '=' at eq or NULL): takes its value (argv[*i + 1] when not after '='), marks the row
   it matches given, or refuses. 0, or -1 with the line in err.                              */
static int mg__set_flag(mg_train_args *a, const mg__flag *f, const char *v, char *err,
                        size_t errlen);
static int mg__compat_parse(mg_train_args *a, int row, const char *name, const char *eq,
                            int argc, char **argv, int *i, char *err, size_t errlen) {
    const mg__compat_flag *f = &mg__compat_flags[row];
    const char *value;
    char choices[160] = "";
    int k;
    size_t n = 0;
    if (f->kind == MG__COMPAT_REFUSED && (!f->values || !strcmp(f->values, "N")))
        return mg__err(err, errlen, "%s is not supported by megatron.h: %s", name, f->text);
    if (!f->values) {
        if (eq) return mg__err(err, errlen, "%s takes no value (give the flag alone to turn it "
                               "on)", name);
        a->compat_given[row] = 1;
        return 0;
    }
    if (eq) value = eq + 1;
    else if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2)) value = argv[++*i];
    else value = "";
    if (f->kind == MG__COMPAT_ALIAS) {   /* an older name of a valued flag: set that flag */
        mg__flag as_typed;
        k = mg__flag_index(f->text);
        as_typed = mg__flags[k];
        as_typed.name = name;            /* its errors name the flag as the line spells it */
        if (!value[0]) return mg__err(err, errlen, "%s needs a value (expected %s, as %s)", name,
                                      f->values, f->text);
        if (mg__set_flag(a, &as_typed, value, err, errlen)) return -1;
        a->given[k] = 1;
        a->compat_given[row] = 1;
        return 0;
    }
    for (k = row; k < MG__NCOMPAT; k++) {   /* the rows of this flag: the one value fits */
        const mg__compat_flag *g = &mg__compat_flags[k];
        char *end = NULL;
        if (strcmp(g->name, name)) continue;
        n += (size_t)snprintf(choices + n, n < sizeof choices ? sizeof choices - n : 0, "%s%s",
                              n ? "|" : "", g->values);
        if (!value[0]) continue;
        if (!strcmp(g->values, "DIR") || mg__choice(g->values, value, 0) >= 0 ||
            (!strcmp(g->values, "N") && strtoll(value, &end, 10) >= 0 && !*end)) {
            if (g->kind == MG__COMPAT_REFUSED)
                return mg__err(err, errlen, "%s %s is not supported by megatron.h: %s", name,
                               value, g->text);
            a->compat_given[k] = 1;
            return 0;
        }
    }
    if (!value[0]) return mg__err(err, errlen, "%s needs a value (expected %s)", name, choices);
    return mg__err(err, errlen, "%s %s: invalid %s (expected %s)", name, value,
                   strcmp(choices, "N") ? "choice" : "value", strcmp(choices, "N") ? choices :
                   "a whole number >= 0");
}

/* What a flag's value must be, for messages: "B, a whole number in 1 … 1000000",
   "LR, a number >= 0", "one of constant|linear|cosine", "DIR". A bound of 1e15 or more is
   left out ("N, a whole number >= 0") unless full: a value above it is told both.          */
static void mg__expects(const mg__flag *f, int full, char *out, size_t cap) {
    const char *kind = f->type == MG__F_INT ? "a whole number" : "a number";
    if (f->type == MG__F_CHOICE) snprintf(out, cap, "one of %s", f->metavar);
    else if (f->type != MG__F_INT && f->type != MG__F_FLOAT) snprintf(out, cap, "%s", f->metavar);
    else if (f->hi >= MG__BIG && !full) snprintf(out, cap, "%s, %s >= %g", f->metavar, kind, f->lo);
    else if (f->type == MG__F_INT) snprintf(out, cap, "%s, %s in %.0f … %.0f", f->metavar, kind,
                                            f->lo, f->hi);
    else if (f->hi == 0.999999)   /* the table's bound for [lo, 1): probabilities, betas */
        snprintf(out, cap, "%s, %s >= %g and below 1", f->metavar, kind, f->lo);
    else snprintf(out, cap, "%s, %s in %g … %g", f->metavar, kind, f->lo, f->hi);
}

/* Edit distance (insertions, deletions, substitutions) of two short strings. */
static int mg__edit_distance(const char *x, const char *y) {
    int row[64], i, j, nx = (int)strlen(x), ny = (int)strlen(y);
    if (nx > 63 || ny > 63) return 99;
    for (j = 0; j <= ny; j++) row[j] = j;
    for (i = 1; i <= nx; i++) {
        int diag = row[0];                     /* distance of x[0..i-1) and y[0..j-1) */
        row[0] = i;
        for (j = 1; j <= ny; j++) {
            int up = row[j], best = diag + (x[i - 1] != y[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[ny];
}

/* Words of a flag name ("--lr-decay-style": lr, decay, style) that the other name holds too. */
static int mg__shared_words(const char *typed, const char *name, int *n_typed) {
    char words[64], *w, *save = NULL;
    int shared = 0;
    snprintf(words, sizeof words, "%s", typed);
    *n_typed = 0;
    for (w = strtok_r(words, "-_", &save); w; w = strtok_r(NULL, "-_", &save)) {
        const char *at = name, *hit;
        size_t n = strlen(w);
        (*n_typed)++;
        while ((hit = strstr(at, w)) && !((hit[-1] == '-') && (hit[n] == '-' || !hit[n])))
            at = hit + 1;
        shared += hit != NULL;
    }
    return shared;
}

/* " did you mean --a or --b?" for an unknown flag, or "": the flags within a small edit
   distance (a typo, '_' for '-'), else those it begins (--lr-decay: --lr-decay-style,
   --lr-decay-iters), else those holding all its words (--tensor-parallel:
   --tensor-model-parallel-size). At most three, in the table's order. */
static void mg__suggest_flag(const char *name, char *out, size_t cap) {
    int score[MG__NFLAGS], i, best = 99, n = 0, rule;
    char typed[64];
    size_t len, used;
    for (len = 0; name[len] && len + 1 < sizeof typed; len++)   /* --Num_Layers: --num-layers */
        typed[len] = name[len] == '_' ? '-' : (char)tolower((unsigned char)name[len]);
    typed[len] = 0;
    for (rule = 0; rule < 3 && best == 99; rule++)
        for (i = 0; i < MG__NFLAGS; i++) {
            const mg__flag *f = &mg__flags[i];
            int words = 0, d;
            score[i] = 99;
            if (f->type == MG__F_HELP && f->offset == 0) continue;
            if (!strcmp(name, f->name)) continue;
            if (rule == 0 && (d = mg__edit_distance(typed, f->name)) <=
                             (len > 16 ? 3 : len > 10 ? 2 : 1))
                score[i] = d;
            if (rule == 1 && len > 3 && !strncmp(typed, f->name, len)) score[i] = 0;
            if (rule == 2 && mg__shared_words(typed, f->name, &words) == words && words > 1)
                score[i] = 0;
            if (score[i] < best) best = score[i];
        }
    out[0] = 0;
    for (i = 0, used = 0; i < MG__NFLAGS && n < 3 && best < 99; i++)
        if (score[i] == best) {
            used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, "%s%s", n == 0 ?
                                     "; did you mean " : " or ", mg__flags[i].name);
            n++;
        }
    if (n && used + 1 < cap) snprintf(out + used, cap - used, "?");
}

static int mg__set_flag(mg_train_args *a, const mg__flag *f, const char *v, char *err,
                        size_t errlen) {
    char *end = NULL, want[160];
    char *field = (char *)a + f->offset;
    mg__expects(f, 0, want, sizeof want);
    if (!v[0])
        return mg__err(err, errlen, "%s: empty value (expected %s)", f->name, want);
    if (f->type == MG__F_STR) {
        *(const char **)field = v;
        return 0;
    }
    if (f->type == MG__F_CHOICE) {
        int c = mg__choice(f->metavar, v, 0);
        char spelled[64];
        if (c >= 0) {
            *(int *)field = c;
            return 0;
        }
        c = mg__choice(f->metavar, v, 1);   /* the same word in other capitals: name it */
        if (c >= 0) {
            mg__choice_name(f->metavar, c, spelled, sizeof spelled);
            return mg__err(err, errlen, "%s %s: invalid choice (expected %s; did you mean %s?)",
                           f->name, v, want, spelled);
        }
        return mg__err(err, errlen, "%s %s: invalid choice (expected %s)", f->name, v, want);
    }
    errno = 0;
    if (f->type == MG__F_INT) {
        long long x = strtoll(v, &end, 10);
        if (*end || errno)
            return mg__err(err, errlen, "%s %s: not an integer (expected %s)", f->name, v, want);
        if ((double)x < f->lo || (double)x > f->hi) {
            mg__expects(f, (double)x > f->hi, want, sizeof want);   /* the bound it broke */
            return mg__err(err, errlen, "%s %s: out of range (expected %s)", f->name, v, want);
        }
        *(int64_t *)field = x;
    } else {
        double x = strtod(v, &end);
        if (*end || errno || !isfinite(x))
            return mg__err(err, errlen, "%s %s: not a number (expected %s, e.g. %s)", f->name, v,
                           want, f->lo > 0 ? "1e-8" : "3e-4");
        if (x < f->lo || x > f->hi) {
            mg__expects(f, x > f->hi, want, sizeof want);           /* the bound it broke */
            return mg__err(err, errlen, "%s %s: out of range (expected %s)", f->name, v, want);
        }
        *(double *)field = x;
    }
    return 0;
}

static void mg__json_str(char *out, size_t cap, const char *s);   /* section 6 */

/* A flag's value in args as text: numbers exactly (%.17g), switches true/false, a choice
   by name; json = 1 quotes strings and choices as JSON (null for an unset string).         */
static void mg__flag_text(const mg_train_args *a, const mg__flag *f, char *val, size_t cap,
                          int json) {
    const char *field = (const char *)a + f->offset;
    if (f->type == MG__F_INT)
        snprintf(val, cap, "%lld", (long long)*(const int64_t *)field);
    else if (f->type == MG__F_FLOAT) mg__num_text(val, cap, *(const double *)field, 0);
    else if (f->type == MG__F_SWITCH)
        snprintf(val, cap, "%s", *(const int *)field ? "true" : "false");
    else if (f->type == MG__F_CHOICE) {
        char choice[64];
        mg__choice_name(f->metavar, *(const int *)field, choice, sizeof choice);
        if (json) mg__json_str(val, cap, choice);
        else snprintf(val, cap, "%s", choice);
    } else if (f->type == MG__F_LIST) {   /* the words: a JSON array, or space-separated */
        const mg_str_list *l = (const mg_str_list *)field;
        size_t m = 0;
        int w;
        if (json) val[m++] = '[';
        for (w = 0; w < l->n && m + 8 < cap; w++) {
            if (w) val[m++] = json ? ',' : ' ';
            if (json) mg__json_str(val + m, cap - m - 2, l->v[w]);
            else snprintf(val + m, cap - m - 2, "%s", l->v[w]);
            m += strlen(val + m);
        }
        snprintf(val + m, cap - m, json ? "]" : "");
        if (!l->n) snprintf(val, cap, json ? "null" : "");
    } else if (*(const char *const *)field) {
        if (json) mg__json_str(val, cap, *(const char *const *)field);
        else snprintf(val, cap, "%s", *(const char *const *)field);
    } else snprintf(val, cap, json ? "null" : "");
}

/* Room mg__flag_text needs for a flag's value, the NUL included (JSON escapes each byte in
   at most 6).                                                                               */
static size_t mg__flag_text_cap(const mg_train_args *a, const mg__flag *f) {
    const char *field = (const char *)a + f->offset;
    size_t need = 128;
    int w;
    if (f->type == MG__F_LIST)
        for (w = 0; w < ((const mg_str_list *)field)->n; w++)
            need += 6 * strlen(((const mg_str_list *)field)->v[w]) + 4;
    else if (f->type == MG__F_STR && *(const char *const *)field)
        need += 6 * strlen(*(const char *const *)field);
    return need;
}

/* The flag named by arg ("--name" or "--name=value"), or -1; *eq at the '=' or NULL. */
static int mg__arg_flag(const char *arg, const char **eq) {
    char name[64];
    *eq = strchr(arg, '=');
    snprintf(name, sizeof name, "%.*s", *eq ? (int)(*eq - arg) : (int)strlen(arg), arg);
    return strncmp(arg, "--", 2) || !strcmp(name, "--help") ? -1 : mg__flag_index(name);
}

/* After the command line: Megatron's old spellings take effect (validate_args sets
   recompute_granularity = 'selective' for --recompute-activations and position_embedding_type
   = 'rope' for --use-rotary-position-embeddings, whatever else was given), then its checks of
   the compatibility flags; --distributed-timeout-minutes becomes --comm-timeout. 0, or -1
   with one line in err.                                                                      */
static int mg__compat_apply(mg_train_args *a, char *err, size_t errlen) {
    int i;
    for (i = 0; i < MG__NCOMPAT; i++) {
        const mg__compat_flag *f = &mg__compat_flags[i];
        char flag[64];
        const char *value;
        int k;
        if (!a->compat_given[i] || f->kind != MG__COMPAT_ALIAS || f->values) continue;
        value = strchr(f->text, ' ') + 1;
        snprintf(flag, sizeof flag, "%.*s", (int)(value - 1 - f->text), f->text);
        k = mg__flag_index(flag);
        if (mg__set_flag(a, &mg__flags[k], value, err, errlen)) return -1;
        a->given[k] = 1;
    }
    if (mg_train_flag_given(a, "--distributed-timeout-minutes")) {
        if (mg_train_flag_given(a, "--comm-timeout"))
            return mg__err(err, errlen, "--distributed-timeout-minutes and --comm-timeout set "
                           "the same bound: give one of them");
        a->comm_timeout = 60.0 * a->distributed_timeout_minutes;
    }
    if (mg__compat_given(a, "--overlap-param-gather") && !a->use_distributed_optimizer)
        return mg__err(err, errlen, "--overlap-param-gather needs --use-distributed-optimizer "
                       "(Megatron-LM: '--overlap-param-gather only supported with distributed "
                       "optimizer')");
    if (mg__compat_given(a, "--overlap-param-gather") &&
        !mg__compat_given(a, "--overlap-grad-reduce"))
        return mg__err(err, errlen, "--overlap-param-gather needs --overlap-grad-reduce "
                       "(Megatron-LM: 'Must use --overlap-param-gather with "
                       "--overlap-grad-reduce')");
    if (mg__compat_given(a, "--no-position-embedding") &&
        a->position_embedding_type != MG_POS_ROPE)
        return mg__err(err, errlen, "--no-position-embedding with --position-embedding-type %s: "
                       "give --position-embedding-type none for a model without positions "
                       "(Megatron-LM: '--no-position-embedding is deprecated, use "
                       "--position-embedding-type'; it takes it with rope only, which keeps no "
                       "position table)", a->position_embedding_type == MG_POS_NONE ? "none"
                       : "learned_absolute");
    if (mg__compat_given(a, "--use-flash-attn") &&
        (a->attention_backend == 2 || a->attention_backend == 4))
        return mg__err(err, errlen, "--use-flash-attn contradicts --attention-backend %s (the "
                       "T x T attention, not flash): give one of them",
                       a->attention_backend == 2 ? "unfused" : "local");
    return 0;
}

MGDEF void mg_train_print_compat_notes(const mg_train_args *a, FILE *out, const char *prog) {
    int i;
    for (i = 0; i < MG__NCOMPAT; i++) {
        const mg__compat_flag *f = &mg__compat_flags[i];
        /* the row's value when it is one word (a switch, a number or a path: none) */
        int word = f->values && !strchr(f->values, '|') && strcmp(f->values, "N") &&
                   strcmp(f->values, "DIR");
        if (a->compat_given[i] && f->kind == MG__COMPAT_NOTE)
            fprintf(out, "%s: warning: %s%s%s: %s\n", prog, f->name, word ? " " : "",
                    word ? f->values : "", f->text);
    }
    if (mg_train_flag_given(a, "--decoupled-min-lr") && !mg_train_flag_given(a, "--decoupled-lr"))
        fprintf(out, "%s: warning: --decoupled-min-lr without --decoupled-lr changes nothing "
                "(as in Megatron-LM: there is no decoupled param group without it)\n", prog);
}

MGDEF int mg_train_parse(mg_train_args *a, int argc, char **argv, char *err, size_t errlen) {
    int i;
    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *value, *eq;
        char name[64], hint[200], want[160];
        int k;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) { a->help = 1; continue; }
        if (strncmp(arg, "--", 2)) {   /* a word where a flag belongs */
            const char *eq2;
            snprintf(name, sizeof name, "-%s", arg);           /* -lr: --lr */
            if (arg[0] == '-' && mg__arg_flag(name, &eq2) >= 0)
                return mg__err(err, errlen, "unexpected argument '%s' (flags start with two "
                               "dashes: did you mean -%s?)", arg, arg);
            snprintf(name, sizeof name, "--%s", arg);          /* lr: --lr */
            if (mg__arg_flag(name, &eq2) >= 0)
                return mg__err(err, errlen, "unexpected argument '%s' (did you mean --%s?)", arg,
                               arg);
            if (i > 1 && (((k = mg__arg_flag(argv[i - 1], &eq2)) >= 0 &&
                           mg__flags[k].type == MG__F_SWITCH) ||
                          ((k = mg__compat_index(argv[i - 1])) >= 0 &&
                           !mg__compat_flags[k].values)))
                return mg__err(err, errlen, "unexpected argument '%s' after %s, which takes no "
                               "value (give the flag alone to turn it on)", arg, argv[i - 1]);
            return mg__err(err, errlen, "unexpected argument '%s' (flags are --name VALUE or "
                           "--name=VALUE; see --help)", arg);
        }
        k = mg__arg_flag(arg, &eq);
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        if (!strcmp(name, "--help"))
            return mg__err(err, errlen, "--help takes no value (give it alone)");
        if (k < 0 && (k = mg__compat_index(name)) >= 0) {   /* one of Megatron's, taken */
            if (mg__compat_parse(a, k, name, eq, argc, argv, &i, err, errlen)) return -1;
            continue;
        }
        if (k < 0) {
            mg__suggest_flag(name, hint, sizeof hint);
            return mg__err(err, errlen, "unknown flag %s%s (see --help for every flag)", name, hint);
        }
        if (mg__flags[k].type == MG__F_SWITCH) {
            if (eq) return mg__err(err, errlen, "%s takes no value (give the flag alone to turn "
                                   "it on)", name);
            *(int *)((char *)a + mg__flags[k].offset) = 1;
            a->given[k] = 1;
            continue;
        }
        if (mg__flags[k].type == MG__F_LIST) {   /* NAME=W1 or NAME W1, then W2 … up to --x */
            mg_str_list *l = (mg_str_list *)((char *)a + mg__flags[k].offset);
            l->n = 0;
            if (eq) l->v[l->n++] = eq + 1;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                if (l->n == MG_DATA_WORDS)
                    return mg__err(err, errlen, "%s: more than %d words", name, MG_DATA_WORDS);
                l->v[l->n++] = argv[++i];
            }
            if (l->n == 0 || !l->v[0][0])
                return mg__err(err, errlen, "%s needs a value (expected %s)", name,
                               mg__flags[k].metavar);
            a->given[k] = 1;
            continue;
        }
        mg__expects(&mg__flags[k], 0, want, sizeof want);
        if (eq) value = eq + 1;
        else if (i + 1 < argc && !(argv[i + 1][0] == '-' && argv[i + 1][1] == '-'))
            value = argv[++i];
        else if (i + 1 < argc)     /* the next word is a flag: this one lost its value */
            return mg__err(err, errlen, "%s needs a value before %s (expected %s)", name,
                           argv[i + 1], want);
        else return mg__err(err, errlen, "%s needs a value (expected %s)", name, want);
        if (mg__set_flag(a, &mg__flags[k], value, err, errlen)) return -1;
        a->given[k] = 1;
    }
    return mg__compat_apply(a, err, errlen);
}

/* text from column `indent` on (the cursor is there), wrapped at 96 columns under it. */
static void mg__print_wrapped_text(FILE *out, int indent, const char *text) {
    const int width = 96;
    int col = indent, first = 1;
    while (*text) {
        const char *sp = strchr(text, ' ');
        int n = sp ? (int)(sp - text) : (int)strlen(text);
        if (!first && col + 1 + n > width) { fprintf(out, "\n%*s", indent, ""); col = indent; }
        else if (!first) { fputc(' ', out); col++; }
        fprintf(out, "%.*s", n, text);
        col += n;
        first = 0;
        text += n;
        while (*text == ' ') text++;
    }
    fputc('\n', out);
}
/* "  LEFT   help text" with the help wrapped at 96 columns under its own indent. */
static void mg__print_wrapped(FILE *out, const char *left, const char *text) {
    const int indent = 36;
    fprintf(out, "  %-33s", left);
    if (strlen(left) > 33) fprintf(out, "\n%*s", indent, "");   /* too long: help below */
    else fprintf(out, " ");
    mg__print_wrapped_text(out, indent, text);
}

MGDEF const char *mg_train_flag_name(int i, const char **group) {
    int k, n = 0;
    const char *heading = NULL;
    for (k = 0; k < MG__NFLAGS; k++) {
        if (mg__flags[k].type == MG__F_HELP && mg__flags[k].offset == 0) {
            heading = mg__flags[k].name;
            continue;
        }
        if (n++ == i) {
            if (group) *group = heading;
            return mg__flags[k].name;
        }
    }
    return NULL;
}

MGDEF void mg_train_print_help(FILE *out, const char *prog) {
    int i;
    fprintf(out,
        "usage: %s --data-path PATH --train-iters N --lr LR [model flags] [options]\n"
        "Trains a GPT-2 model (pre-LayerNorm, GELU, learned positions, tied output layer)\n"
        "with megatron.h. Flags carry Megatron-LM's names.\n", prog);
    for (i = 0; i < MG__NFLAGS; i++) {
        const mg__flag *f = &mg__flags[i];
        char left[96];
        if (f->type == MG__F_HELP && f->offset == 0) {   /* a group, argparse's way */
            fprintf(out, "\n%s:\n", f->name);
            if (f->help[0]) {
                fprintf(out, "  ");
                mg__print_wrapped_text(out, 2, f->help);
            }
            continue;
        }
        if (f->metavar) snprintf(left, sizeof left, "%s %s", f->name, f->metavar);
        else snprintf(left, sizeof left, "%s", f->name);
        mg__print_wrapped(out, left, f->help);
    }
    fprintf(out, "\nMegatron-LM flags accepted for compatibility:\n  ");
    mg__print_wrapped_text(out, 2, "Megatron-LM's switches of its kernels and implementations, "
                           "which megatron.h's run already matches (they change nothing), "
                           "and its older spellings of flags above (docs/training-cli.md)");
    for (i = 0; i < MG__NCOMPAT; i++) {
        const mg__compat_flag *f = &mg__compat_flags[i];
        char left[96], text[400];
        if (f->kind == MG__COMPAT_REFUSED) continue;
        snprintf(left, sizeof left, "%s%s%s", f->name, f->values ? " " : "",
                 f->values ? f->values : "");
        snprintf(text, sizeof text, "%s%s", f->kind == MG__COMPAT_ALIAS ? "the same as " :
                 f->kind == MG__COMPAT_NOTE ? "accepted with a warning: " : "", f->text);
        mg__print_wrapped(out, left, text);
    }
    {   /* the refused ones, by name (their reasons: in their error lines) */
        char names[1024];
        size_t n = 0;
        for (i = 0; i < MG__NCOMPAT; i++)
            if (mg__compat_flags[i].kind == MG__COMPAT_REFUSED)
                n += (size_t)snprintf(names + n, n < sizeof names ? sizeof names - n : 0,
                                      "%s%s%s%s", n ? " " : "", mg__compat_flags[i].name,
                                      mg__compat_flags[i].values && strcmp(mg__compat_flags[i]
                                      .values, "N") ? " " : "", mg__compat_flags[i].values &&
                                      strcmp(mg__compat_flags[i].values, "N") ?
                                      mg__compat_flags[i].values : "");
        fprintf(out, "\nMegatron-LM flags refused, each with the reason (features megatron.h "
                "does not have):\n  ");
        mg__print_wrapped_text(out, 2, names);
    }
    fprintf(out,
        "\nThe log line (every --log-interval iterations) shows iteration, consumed samples,\n"
        "elapsed time per iteration (ms), throughput per GPU (TFLOP/s/GPU), tokens per second,\n"
        "learning rate, global batch size, lm loss (mean over the interval), loss scale, grad\n"
        "norm (num zeros, params norm with their flags), skipped and nan iterations; then the\n"
        "timers of --timing-log-level (docs/monitoring.md). FLOPs are counted as Megatron-LM does without\n"
        "activation recomputation: per iteration 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for\n"
        "global batch B, sequence s, layers l, hidden h, padded vocabulary V (2 FLOPs per\n"
        "multiply-add of every GEMM, backward = 2 x forward), divided by the iteration time and\n"
        "the number of GPUs (ranks). Errors: one line 'gpt_train: error: ...', exit status 2.\n");
}

/* =============================================================================================
   5. Trainer: setup
   ========================================================================================== */
static double mg__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Megatron-LM's timers (megatron/core/timers.py): name and --timing-log-level, in the order
   of training.py's timers_to_log. The timed regions nest as in Megatron: forward-backward
   holds the batch generator, the computes and the gradient reductions; optimizer holds its
   parts. How a region is measured depends on the device:
   - GPU: a pair of CUDA events recorded on the stream the region's work runs on — the
     compute stream for computation, the communication stream (mg_comm_stream) for NCCL
     calls, there after the wait for the compute queued so far — so a timer measures the
     device's time between the two points, never the host's time to queue the work, and
     adds no synchronisation to the step: the pairs are resolved at the log iteration.
   - CPU: the host clock at start and stop (the work is done when the call returns).      */
static const struct { const char *name; int level; } mg__timer_names[] = {
    {"forward-backward", 1}, {"forward-compute", 2}, {"backward-compute", 2},
    {"batch-generator", 2}, {NULL, 2} /* the pipeline's send/recv kinds, all level 2 */,
    {"layernorm-grads-all-reduce", 1}, {"embedding-grads-all-reduce", 1},
    {"all-grads-sync", 1}, {"params-all-gather", 1}, {"optimizer-clip-main-grad", 1},
    {"optimizer-count-zeros", 1}, {"optimizer-inner-step", 1}, {"optimizer", 1}};
typedef char mg__timer_names_fit[sizeof mg__timer_names / sizeof mg__timer_names[0] ==
                                 MG_N_TIMERS - MG_PIPE_COMM_KINDS + 2 ? 1 : -1];
/* Timer k's row of the table (the pipeline's kinds share one). */
static int mg__timer_row(int k) {
    return k < MG_TIMER_PIPE_COMM ? k : k < MG_TIMER_LAYERNORM_GRADS ? MG_TIMER_PIPE_COMM
                                                                     : k - MG_PIPE_COMM_KINDS + 2;
}
static const char *mg__timer_name(int k) {
    return mg__timer_names[mg__timer_row(k)].name ? mg__timer_names[mg__timer_row(k)].name
                                                  : mg_pipe_comm_kind_name(k - MG_TIMER_PIPE_COMM + 1);
}
static int mg__timer_on(const mg_trainer *tr, int k) {
    return mg__timer_names[mg__timer_row(k)].level <= tr->args.timing_log_level;
}
#ifdef __CUDACC__
/* Adds the elapsed times of timer k's first `count` event pairs to timer_ms (waiting for each
   stop event the device has not passed yet) and moves the later pairs to the front; the
   resolved events go after them, to be recorded again.                                     */
static void mg__timer_resolve(mg_trainer *tr, int k, int count) {
    mg_timer_events *e = &tr->timer_ev[k];
    void *done[MG_TIMER_POOL];
    int i, j, rest = e->n - count;
    for (i = 0; i < count; i++) {
        float ms = 0;
        MG_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e->stop[i]));
        MG_CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)e->start[i], (cudaEvent_t)e->stop[i]));
        tr->timer_ms[k] += ms;
    }
    for (j = 0; j < 2; j++) {   /* rotate start[], then stop[] */
        void **ev = j ? e->stop : e->start;
        memcpy(done, ev, sizeof(void *) * (size_t)count);
        memmove(ev, ev + count, sizeof(void *) * (size_t)rest);
        memcpy(ev + rest, done, sizeof(void *) * (size_t)count);
    }
    e->n = rest;
}
#endif
/* Starts timer k: on the GPU, a start event on the compute stream, or with on_comm on the
   communication stream after the compute queued so far; on the CPU, the host clock.       */
static void mg__timer_start_on(mg_trainer *tr, int k, int on_comm) {
    if (!mg__timer_on(tr, k)) return;
#ifdef __CUDACC__
    if (tr->ctx.device == MG_DEVICE_CUDA) {
        mg_timer_events *e = &tr->timer_ev[k];
        void *stream = on_comm && tr->comm ? mg_comm_stream(tr->comm) : NULL;
        if (!stream) stream = tr->ctx.stream;
        if (e->n == MG_TIMER_POOL) mg__timer_resolve(tr, k, MG_TIMER_POOL / 2);
        if (!e->start[e->n]) {
            MG_CUDA_CHECK(cudaEventCreate((cudaEvent_t *)&e->start[e->n]));
            MG_CUDA_CHECK(cudaEventCreate((cudaEvent_t *)&e->stop[e->n]));
        }
        MG_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e->start[e->n], (cudaStream_t)stream));
        e->stream = stream;
        return;
    }
#else
    (void)on_comm;
#endif
    tr->timer_t0[k] = mg__now_ms();
}
static void mg__timer_start(mg_trainer *tr, int k) { mg__timer_start_on(tr, k, 0); }
/* Stops timer k: a stop event on the stream its start was recorded on, or the host clock. */
static void mg__timer_stop(mg_trainer *tr, int k) {
    if (!mg__timer_on(tr, k)) return;
#ifdef __CUDACC__
    if (tr->ctx.device == MG_DEVICE_CUDA) {
        mg_timer_events *e = &tr->timer_ev[k];
        MG_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e->stop[e->n], (cudaStream_t)e->stream));
        e->n++;
        return;
    }
#endif
    tr->timer_ms[k] += mg__now_ms() - tr->timer_t0[k];
}
/* The communication timers' hooks. The pipeline executor brackets each send/recv group it
   posts (GPU; on the CPU the executor's time_comm times each group's completion instead),
   the data-parallel reduction each bucket it posts (GPU; on the CPU mg_dp_finish's wait is
   timed): the NCCL calls on the communication stream.                                     */
static void mg__pipe_comm_timer(void *user, int kind, int start) {
    mg_trainer *tr = (mg_trainer *)user;
    if (start) mg__timer_start_on(tr, MG_TIMER_PIPE_COMM + kind - 1, 1);
    else mg__timer_stop(tr, MG_TIMER_PIPE_COMM + kind - 1);
}
static void mg__dp_comm_timer(void *user, int start) {
    mg_trainer *tr = (mg_trainer *)user;
    if (start) mg__timer_start_on(tr, MG_TIMER_ALL_GRADS_SYNC, 1);
    else mg__timer_stop(tr, MG_TIMER_ALL_GRADS_SYNC);
}
/* forward-/backward-compute of training (an evaluation's forwards are not counted): the
   model's compute_timer hook without a pipeline, called by the pipeline callbacks with one. */
static void mg__compute_timer(void *user, int backward, int start) {
    mg_trainer *tr = (mg_trainer *)user;
    int k = backward ? MG_TIMER_BACKWARD_COMPUTE : MG_TIMER_FORWARD_COMPUTE;
    if (!tr->model.training) return;
    if (start) mg__timer_start(tr, k);
    else mg__timer_stop(tr, k);
}

/* Parent directory of path exists (the path itself may not). */
/* The most characters a run adds to a path it is given: under a directory flag the longest
   name is DIR/iter_<up to 20 digits>.tmp.save<20>/optimizer_sq.safetensors.tmp.save<20>
   (109 characters; TensorBoard's events.out.tfevents.<time>.<host>.<pid>: at most 117);
   beside a file (--log-jsonl's picture LOG.svg and its temporary twin) far less.           */
#define MG__DIR_ROOM 128
#define MG__FILE_ROOM 32

/* A path flag whose value leaves room for what is written under (or beside) it within
   MG_PATH_MAX; the message shows the path's two ends and its length.                       */
static int mg__check_path_room(const char *flag, const char *path, size_t room, char *err,
                               size_t errlen) {
    size_t n = strlen(path);
    if (n + room < MG_PATH_MAX) return 0;
    return mg__err(err, errlen, "%s %.40s…%s: a path of %zu characters; with the %zu more that "
                   "the names %s it take it would pass the %d characters a path may have (give "
                   "a path of at most %zu characters, e.g. a relative one or a symbolic link)",
                   flag, path, path + (n > 20 ? n - 20 : 0), n, room,
                   room == MG__DIR_ROOM ? "under" : "beside", MG_PATH_MAX - 1,
                   MG_PATH_MAX - 1 - room);
}

static int mg__parent_is_dir(const char *path) {
    char dir[MG_PATH_MAX];
    char *slash;
    if (mg__path(dir, sizeof dir, "%s", path)) return 0;   /* too long: no such directory */
    while ((slash = strrchr(dir, '/')) && slash[1] == 0 && slash != dir) *slash = 0; /* "a/" */
    slash = strrchr(dir, '/');
    if (!slash) return 1;                       /* relative name: the working directory */
    if (slash == dir) return 1;                 /* "/name" */
    *slash = 0;
    return mg__is_dir(dir);
}

/* An output path: a directory (want_dir) or a regular file, checked before any work. A
   named pipe, a device or a socket is refused (opening one would wait for a reader, and the
   log is read back to draw it). When probe is set (the rank that will write it), the path is
   also tried for real: a new directory is created and removed, a new file created and
   removed, an existing directory gets a probe file created and removed in it, an existing
   file is opened for appending — so that a read-only place fails here, not after training. */
static int mg__check_output(const char *flag, const char *path, int want_dir, int probe,
                            char *err, size_t errlen) {
    struct stat st;
    char probe_path[MG_PATH_MAX];
    int fd, e;
    if (stat(path, &st) == 0) {
        if (want_dir && !S_ISDIR(st.st_mode))
            return mg__err(err, errlen, "%s %s: exists and is not a directory (give a directory, "
                           "or a new name to create one)", flag, path);
        if (!want_dir && S_ISDIR(st.st_mode))
            return mg__err(err, errlen, "%s %s: is a directory (expected a file name)", flag, path);
        if (!want_dir && !S_ISREG(st.st_mode))
            return mg__err(err, errlen, "%s %s: not a regular file (a named pipe, device or "
                           "socket; give the name of a file to write)", flag, path);
        if (!probe) return 0;
        if (want_dir) {
            if (mg__path(probe_path, sizeof probe_path, "%s/.mg_write_probe.%ld", path,
                         (long)getpid()) == 0 &&
                (fd = open(probe_path, O_WRONLY | O_CREAT | O_EXCL, 0600)) >= 0) {
                close(fd);
                unlink(probe_path);
                return 0;
            }
            return mg__err(err, errlen, "%s %s: cannot create files in this directory (%s)",
                           flag, path, strerror(errno));
        }
        if ((fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK)) < 0)
            return mg__err(err, errlen, "%s %s: cannot write to this file (%s)", flag, path,
                           strerror(errno));
        close(fd);
        return 0;
    }
    e = errno;
    if (e != ENOENT)   /* a component that is a file, a name too long, no permission */
        return mg__err(err, errlen, "%s %s: %s", flag, path, strerror(e));
    if (!mg__parent_is_dir(path))
        return mg__err(err, errlen, "%s %s: the directory it would be created in does not exist "
                       "(create that first, or give a path in an existing directory)", flag, path);
    if (!probe) return 0;
    if (want_dir ? mkdir(path, 0755) != 0
                 : (fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644)) < 0)
        return mg__err(err, errlen, "%s %s: cannot create this %s (%s)", flag, path,
                       want_dir ? "directory" : "file", strerror(errno));
    if (want_dir) rmdir(path);
    else {
        close(fd);
        unlink(path);
    }
    return 0;
}

/* Reads DIR/latest_checkpointed_iteration.txt as Megatron-LM's read_metadata does: a whole
   number (the iteration), or "release" (a released checkpoint: weights in DIR/release, which
   Megatron loads as iteration 0 without optimizer state — a fine-tuning start). Returns 1
   with *iter set, 2 for "release" (*iter = 0; DIR/release/model.safetensors must exist), 0
   if there is no such file (no checkpoint yet), -1 with err if it is not a small regular file
   holding one of those.                                                                    */
#define MG__LATEST_MAX_BYTES 4096   /* Megatron writes "300" or "release" */
static int mg__latest_iteration(const char *dir, int64_t *iter, char *err, size_t errlen) {
    char path[MG_PATH_MAX], release[MG_PATH_MAX], why[MG_ERRLEN], *text = NULL, *b, *e, *c;
    size_t len = 0;
    struct stat sb;
    int rc = 1;
    if (mg__path(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir))
        return mg__err(err, errlen, "%.60s…: a directory name of %zu characters, too long to "
                       "look for its latest_checkpointed_iteration.txt (at most %d)", dir,
                       strlen(dir), MG_PATH_MAX - 1 - MG__DIR_ROOM);
    if (stat(path, &sb) != 0 && errno == ENOENT) return 0;
    if (mg_read_file(path, MG__LATEST_MAX_BYTES, &text, &len, why, sizeof why))
        return mg__err(err, errlen, "%s", why);
    *iter = 0;
    for (b = text; *b == ' ' || *b == '\n' || *b == '\r' || *b == '\t'; b++) {}
    for (e = text + len; e > b && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\r' ||
                                   e[-1] == '\t'); e--) {}
    *e = 0;                                                  /* [b, e): Python's strip() */
    if (!strcmp(b, "release")) {
        rc = mg__path(release, sizeof release, "%s/release/model.safetensors", dir) == 0 &&
             stat(release, &sb) == 0 ? 2 :
             mg__err(err, errlen, "%s says 'release', but %s does not exist (megatron.h reads a "
                     "release directory holding model.safetensors; Megatron-LM's torch files "
                     "release/mp_rank_*/model_optim_rng.pt must be converted, e.g. to Hugging "
                     "Face safetensors for --init-from)", path, release);
    } else if ((size_t)(e - b) != strlen(b) || mg__parse_int(b, 0, INT64_MAX, iter)) {
        for (c = b; c < e; c++)
            if ((unsigned char)*c < 32 || (unsigned char)*c > 126) *c = '?';   /* one line */
        rc = mg__err(err, errlen, "%s holds '%.40s%s', not an iteration number (Megatron-LM "
                     "writes a whole number >= 0, or 'release')", path, b, e - b > 40 ? "..." : "");
    }
    MG_FREE(text);
    return rc;
}

/* The first of names[0 … n) that exists in dir, or NULL. */
static const char *mg__first_present(const char *dir, const char *const *names, size_t n) {
    char probe[MG_PATH_MAX];
    size_t i;
    for (i = 0; i < n; i++)
        if (!mg__path(probe, sizeof probe, "%s/%s", dir, names[i]) && access(probe, F_OK) == 0)
            return names[i];
    return NULL;
}

/* Whether dir is one iteration of a checkpoint (it holds state.json or model.safetensors);
   then parent gets the directory above it, the one --load takes ("." for a bare name).      */
static int mg__is_checkpoint_dir(const char *dir, char *parent, size_t cap) {
    static const char *const ours[] = {"state.json", "model.safetensors"};
    char *slash;
    if (!mg__first_present(dir, ours, 2)) return 0;
    if (mg__path(parent, cap, "%s", dir)) return 0;
    while ((slash = strrchr(parent, '/')) && slash[1] == 0 && slash != parent) *slash = 0;
    slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, cap, ".");
    else slash[slash == parent] = 0;              /* "/iter_1": "/" */
    return 1;
}

/* Megatron-LM's own checkpoint files in an iteration directory — the torch format's
   mp_rank_TT[_PPP]/model_optim_rng.pt, torch_dist's .metadata, common.pt and metadata.json:
   the first name found, or NULL.                                                           */
static const char *mg__megatron_ckpt_file(const char *iter_dir) {
    static const char *const theirs[] = {"mp_rank_00", "mp_rank_00_000", ".metadata",
                                         "common.pt", "metadata.json"};
    return mg__first_present(iter_dir, theirs, sizeof theirs / sizeof theirs[0]);
}

/* The checkpoint's state.json, parsed. */
typedef struct mg__ckpt_state {
    int64_t iteration, consumed, consumed_valid, adam_step, skipped, nan_iters, seed;
    int64_t arch[6];          /* num_layers, hidden, heads, seq, max_pos, vocab               */
    int data_order;
    int has_scaler;           /* the loss scaler's state is present (not in older files)      */
    double loss_scale;
    int64_t growth_tracker, hysteresis_tracker;
    /* optional "rope_scaling": Llama 3's numbers that have no flag (0: the defaults)        */
    double rope_low, rope_high, rope_orig;
    /* optional "opt_param_scheduler" (not in older files): the schedule the run used       */
    int has_sched;
    mg_lr_schedule sched;
} mg__ckpt_state;
static const char *const mg__state_arch_keys[6] = {"num_layers", "hidden_size",
    "num_attention_heads", "seq_length", "max_position_embeddings", "vocab_size"};

/* One of a state.json object's style names (key) as its index among choices, or -1. */
static int mg__json_choice(const mg_json *js, int64_t obj, const char *key,
                           const char *choices) {
    int64_t t = mg_json_get(js, obj, key);
    char name[32];
    if (t < 0 || js->toks[t].type != MG_JSON_STRING) return -1;
    snprintf(name, sizeof name, "%.*s", (int)(js->toks[t].end - js->toks[t].start),
             js->text + js->toks[t].start);
    return mg__choice(choices, name, 0);
}

/* state.json's "opt_param_scheduler" object (token k): Megatron-LM's OptimizerParamScheduler
   state — peak and minimum learning rate, warm-up and decay iterations, decay style, and the
   weight decay's start, end, increment length and style (a file from before the increment
   holds one "weight_decay": the constant style) — each in its flag's range.               */
static int mg__read_sched(const mg_json *js, int64_t k, const char *path, mg__ckpt_state *s,
                          char *err, size_t errlen) {
    double v[7];
    const char *const keys[7] = {"max_lr", "min_lr", "lr_warmup_iters", "lr_decay_iters",
                                 "start_wd", "end_wd", "wd_incr_iters"};
    const double hi[7] = {1e3, 1e3, MG__BIG, MG__BIG, 1e3, 1e3, MG__BIG};
    int has_incr = mg_json_get(js, k, "start_wd") >= 0, lr_style, wd_style = MG_WD_CONSTANT;
    int i, n = has_incr ? 7 : 4;
    for (i = 0; i < n; i++)
        if (mg__cfg_num(js, k, path, keys[i], NAN, 0, hi[i], &v[i], err, errlen)) return -1;
    if (!has_incr) {   /* older files: one constant weight decay */
        if (mg__cfg_num(js, k, path, "weight_decay", NAN, 0, 1e3, &v[4], err, errlen))
            return -1;
        v[5] = v[4];
        v[6] = 0;
    } else if ((wd_style = mg__json_choice(js, k, "wd_incr_style", MG__WD_STYLES)) < 0) {
        return mg__err(err, errlen, "%s: opt_param_scheduler's wd_incr_style is not one of "
                       MG__WD_STYLES, path);
    }
    lr_style = mg__json_choice(js, k, "lr_decay_style", MG__LR_STYLES);
    if (lr_style < 0)   /* the lengths may be fractions: sample-based runs count samples */
        return mg__err(err, errlen, "%s: opt_param_scheduler holds a decay style that is not "
                       "one of " MG__LR_STYLES, path);
    s->sched.max_lr = v[0];
    s->sched.min_lr = v[1];
    s->sched.warmup_iters = v[2];
    s->sched.decay_iters = v[3];
    s->sched.style = (mg_lr_style)lr_style;
    s->sched.start_wd = v[4];
    s->sched.end_wd = v[5];
    s->sched.wd_incr_iters = v[6];
    s->sched.wd_style = (mg_wd_style)wd_style;
    s->sched.decoupled = mg_json_get(js, k, "decoupled_lr") >= 0;   /* optional */
    if (s->sched.decoupled &&
        (mg__cfg_num(js, k, path, "decoupled_lr", NAN, 0, 1e3, &s->sched.decoupled_max_lr, err,
                     errlen) ||
         mg__cfg_num(js, k, path, "decoupled_min_lr", NAN, 0, 1e3, &s->sched.decoupled_min_lr,
                     err, errlen)))
        return -1;
    s->has_sched = 1;
    return 0;
}

/* Reads a checkpoint's state.json (at most 1 MiB: ours hold ~3 KB) written for iteration
   `iteration`; every value must be in range for what it counts (so nothing read here can wrap
   an int later), else one line names the file and the key.                                */
#define MG__STATE_MAX_BYTES (1u << 20)
static int mg__read_state(const char *path, int64_t iteration, mg__ckpt_state *s, char *err,
                          size_t errlen) {
    size_t len = 0;
    char *text = NULL, why[MG_ERRLEN];
    mg_json js;
    int k, rc = 0;
    /* the counters (each >= 0, up to hi), then the architecture (each 1 ... 2^31 - 1) */
    const char *ikeys[8] = {"iteration", "consumed_train_samples", "consumed_valid_samples",
                            "adam_step", "skipped_iterations", "nan_iterations", "seed",
                            "data_order_index"};
    const int64_t hi[8] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX,
                           4294967295LL /* --seed */, MG_ORDER_SEQUENTIAL};
    int64_t *ivals[8], order = 0;
    if (mg_read_file(path, MG__STATE_MAX_BYTES, &text, &len, why, sizeof why))
        return mg__err(err, errlen, "%s", why);
    if (mg_json_parse(&js, text, len, why, sizeof why)) {
        MG_FREE(text);
        return mg__err(err, errlen, "%s: %s", path, why);
    }
    ivals[0] = &s->iteration; ivals[1] = &s->consumed; ivals[2] = &s->consumed_valid;
    ivals[3] = &s->adam_step; ivals[4] = &s->skipped; ivals[5] = &s->nan_iters;
    ivals[6] = &s->seed; ivals[7] = &order;
    if (js.toks[0].type != MG_JSON_OBJECT)
        rc = mg__err(err, errlen, "%s: not a JSON object", path);
    for (k = 0; k < 8 + 6 && !rc; k++) {
        const char *key = k < 8 ? ikeys[k] : mg__state_arch_keys[k - 8];
        int64_t t = mg_json_get(&js, 0, key), *dst = k < 8 ? ivals[k] : &s->arch[k - 8];
        int64_t min = k < 8 ? 0 : 1, max = k < 8 ? hi[k] : INT32_MAX, q, n;
        if (t < 0) {
            rc = mg__err(err, errlen, "%s: key %s missing", path, key);
        } else if (mg_json_int(&js, t, dst) || *dst < min || *dst > max) {
            q = js.toks[t].type == MG_JSON_STRING;             /* shown with its quotes */
            n = js.toks[t].end - js.toks[t].start + 2 * q;
            rc = mg__err(err, errlen, "%s: %s is %.*s, not an integer in [%lld, %lld]", path, key,
                         (int)(n > 40 ? 40 : n), text + js.toks[t].start - q, (long long)min,
                         (long long)max);
        }
    }
    if (!rc && s->iteration != iteration)
        rc = mg__err(err, errlen, "%s: iteration is %lld, but the file lies in the directory of "
                     "iteration %lld (a copied or damaged checkpoint)", path,
                     (long long)s->iteration, (long long)iteration);
    s->data_order = (int)order;
    if (!rc) {                /* optional: the loss scaler (fp16) */
        int64_t t = mg_json_get(&js, 0, "loss_scale");
        int64_t g = mg_json_get(&js, 0, "loss_scale_growth_tracker");
        int64_t h = mg_json_get(&js, 0, "loss_scale_hysteresis_tracker");
        /* the hysteresis tracker may be negative: each inf decrements it and only a growth
           re-arms it (Megatron's DynamicGradScaler), so after k infs since the last growth
           (or the start) it holds hysteresis − k — below 0 once k > hysteresis               */
        s->has_scaler = t >= 0 && g >= 0 && h >= 0;
        if (s->has_scaler && (mg_json_int(&js, g, &s->growth_tracker) || s->growth_tracker < 0))
            rc = mg__err(err, errlen, "%s: loss_scale_growth_tracker must be an integer >= 0",
                         path);
        if (!rc && s->has_scaler && (mg_json_int(&js, h, &s->hysteresis_tracker) ||
                                     s->hysteresis_tracker < -(int64_t)MG__BIG))
            rc = mg__err(err, errlen, "%s: loss_scale_hysteresis_tracker must be an integer "
                         ">= -1e15 (one decrement per skipped iteration)", path);
        if (!rc && s->has_scaler) {
            s->loss_scale = js.toks[t].type == MG_JSON_NUMBER ?
                            strtod(text + js.toks[t].start, NULL) : 0;
            if (!(s->loss_scale > 0 && isfinite(s->loss_scale)))
                rc = mg__err(err, errlen, "%s: loss_scale is not a positive number", path);
        }
    }
    s->has_sched = 0;
    if (!rc && (k = (int)mg_json_get(&js, 0, "opt_param_scheduler")) >= 0)
        rc = mg__read_sched(&js, k, path, s, err, errlen);
    s->rope_low = s->rope_high = s->rope_orig = 0;
    if (!rc && (k = (int)mg_json_get(&js, 0, "rope_scaling")) >= 0 &&
        (mg__cfg_num(&js, k, path, "low_freq_factor", NAN, 1e-6, 1e6, &s->rope_low, err,
                     errlen) ||
         mg__cfg_num(&js, k, path, "high_freq_factor", NAN, 1e-6, 1e6, &s->rope_high, err,
                     errlen) ||
         mg__cfg_num(&js, k, path, "original_max_position_embeddings", NAN, 1, INT32_MAX,
                     &s->rope_orig, err, errlen)))
        rc = -1;
    mg_json_free(&js);
    MG_FREE(text);
    return rc;
}

/* Sample-based training: --train-samples given (Megatron-LM's train_samples).            */
static int mg__sample_based(const mg_train_args *a) {
    return mg_train_flag_given(a, "--train-samples");
}
/* A length in samples as iterations of the global batch (a fraction kept).                  */
static double mg__in_iters(const mg_train_args *a, int64_t samples) {
    return (double)samples / (double)a->global_batch_size;
}
/* The schedule's decay and warm-up lengths in iterations, as Megatron's
   get_optimizer_param_scheduler makes them: --lr-decay-iters, else --train-iters; the warm-up
   --lr-warmup-fraction × that when given (not rounded), else --lr-warmup-iters. Sample-based:
   --lr-decay-samples, else --train-samples, and --lr-warmup-samples, in iterations.       */
static double mg__decay_iters(const mg_train_args *a) {
    if (mg__sample_based(a))
        return mg__in_iters(a, a->lr_decay_samples ? a->lr_decay_samples : a->train_samples);
    return (double)(a->lr_decay_iters ? a->lr_decay_iters : a->train_iters);
}
static double mg__warmup_iters(const mg_train_args *a) {
    return mg_train_flag_given(a, "--lr-warmup-fraction")
               ? a->lr_warmup_fraction * mg__decay_iters(a)
               : mg__sample_based(a) ? mg__in_iters(a, a->lr_warmup_samples)
                                     : (double)a->lr_warmup_iters;
}
/* The command line's schedule, as Megatron's validate_args and get_optimizer_param_scheduler
   make it: the constant weight-decay style decays by --weight-decay from start to end; the
   increment lasts --train-iters (Megatron's wd_incr_steps = train_iters × global batch;
   sample-based: --train-samples).                                                          */
static void mg__sched_of(const mg_train_args *a, mg_lr_schedule *s) {
    int constant_wd = a->weight_decay_incr_style == MG_WD_CONSTANT;
    memset(s, 0, sizeof *s);
    s->max_lr = a->lr;
    s->min_lr = a->min_lr;
    s->init_lr = a->lr_warmup_init;
    s->decoupled = mg_train_flag_given(a, "--decoupled-lr");   /* Megatron: decoupled_lr set */
    s->decoupled_max_lr = s->decoupled ? a->decoupled_lr : 0.0;
    s->decoupled_min_lr = !s->decoupled ? 0.0 : mg_train_flag_given(a, "--decoupled-min-lr")
                                                    ? a->decoupled_min_lr : a->min_lr;
    s->warmup_iters = mg__warmup_iters(a);
    s->decay_iters = mg__decay_iters(a);
    s->style = (mg_lr_style)a->lr_decay_style;
    s->wsd_decay_iters = mg__sample_based(a) ? mg__in_iters(a, a->lr_wsd_decay_samples)
                                             : (double)a->lr_wsd_decay_iters;
    s->wsd_style = (mg_wsd_style)a->lr_wsd_decay_style;
    s->samples_per_iter = a->global_batch_size;
    s->start_wd = constant_wd ? a->weight_decay : a->start_weight_decay;
    s->end_wd = constant_wd ? a->weight_decay : a->end_weight_decay;
    s->wd_incr_iters = a->wd_incr_iters ? a->wd_incr_iters
                     : mg__sample_based(a) ? mg__in_iters(a, a->train_samples)
                                           : (double)a->train_iters;
    s->wd_style = (mg_wd_style)a->weight_decay_incr_style;
}

/* Megatron-LM's OptimizerParamScheduler.load_state_dict on --load: the schedule of the
   command line against the checkpoint's, field by field in its order — peak and minimum
   learning rate, warm-up, decay length (--lr-decay-iters, else --train-iters), decay style,
   then the weight decay's start, end, increment length (--train-iters; compared only where
   both styles increment: it changes nothing for the constant one) and style. WSD's
   --lr-wsd-decay-iters and --lr-wsd-decay-style are not in Megatron's state: the command
   line's hold. With --override-opt_param-scheduler the command line's schedule stands, with
   --use-checkpoint-opt_param-scheduler the checkpoint's is taken into a, otherwise a
   difference is an error. A checkpoint without the schedule (older files), or a run that
   trains no further, is not checked.                                                       */
static int mg__sched_merge(mg_train_args *a, const mg__ckpt_state *st, char *err,
                           size_t errlen) {
    const mg_lr_schedule *c = &st->sched;
    mg_lr_schedule cmd;
    int constant_wd = a->weight_decay_incr_style == MG_WD_CONSTANT;
    int samples = mg__sample_based(a);   /* lengths named and shown in samples */
    const char *const flags[9] = {"--lr", "--min-lr",
                                  samples ? "--lr-warmup-samples" : "--lr-warmup-iters",
                                  samples ? "--lr-decay-samples" : "--lr-decay-iters",
                                  "--lr-decay-style",
                                  constant_wd ? "--weight-decay" : "--start-weight-decay",
                                  constant_wd ? "--weight-decay" : "--end-weight-decay",
                                  samples ? "--train-samples" : "--train-iters",
                                  "--weight-decay-incr-style"};
    int decay_given = samples ? a->lr_decay_samples != 0 : a->lr_decay_iters != 0;
    double unit = samples ? (double)a->global_batch_size : 1.0;
    double mine[9], theirs[9];
    char mv[64], cv[64];
    int k;
    if (!st->has_sched || a->train_iters <= st->iteration || a->override_opt_param_scheduler ||
        a->no_load_optim)   /* Megatron loads no scheduler state then: nothing to compare */
        return 0;
    if (a->use_checkpoint_opt_param_scheduler) {
        double warm = c->warmup_iters * unit;   /* in the run's unit */
        a->lr = c->max_lr;
        a->min_lr = c->min_lr;
        if (samples) a->lr_decay_samples = (int64_t)floor(c->decay_iters * unit + 0.5);
        else a->lr_decay_iters = (int64_t)c->decay_iters;
        if (samples ? fabs(warm - floor(warm + 0.5)) < 1e-6 : warm == floor(warm)) {
            if (samples) a->lr_warmup_samples = (int64_t)floor(warm + 0.5);
            else a->lr_warmup_iters = (int64_t)floor(warm + 0.5);
            a->given[mg__flag_index("--lr-warmup-fraction")] = 0;
        } else {   /* a fraction's warm-up */
            a->lr_warmup_iters = a->lr_warmup_samples = 0;
            a->lr_warmup_fraction = c->warmup_iters / c->decay_iters;
            a->given[mg__flag_index("--lr-warmup-fraction")] = 1;
        }
        a->lr_decay_style = c->style;
        if (c->style == MG_LR_WSD &&
            !mg_train_flag_given(a, samples ? "--lr-wsd-decay-samples" : "--lr-wsd-decay-iters"))
            return mg__err(err, errlen, "--use-checkpoint-opt_param-scheduler: the checkpoint's "
                           "--lr-decay-style WSD needs %s N on the command line (Megatron-LM's "
                           "scheduler state does not hold it)", samples ?
                           "--lr-wsd-decay-samples" : "--lr-wsd-decay-iters");
        a->weight_decay_incr_style = c->wd_style;
        a->weight_decay = c->end_wd;   /* the constant style's */
        a->start_weight_decay = c->start_wd;
        a->end_weight_decay = c->end_wd;
        a->wd_incr_iters = c->wd_incr_iters;
        a->decoupled_lr = c->decoupled_max_lr;   /* the decoupled pair, or none */
        a->decoupled_min_lr = c->decoupled_min_lr;
        a->given[mg__flag_index("--decoupled-lr")] = c->decoupled;
        a->given[mg__flag_index("--decoupled-min-lr")] = c->decoupled;
        return 0;
    }
    mg__sched_of(a, &cmd);
    mine[0] = cmd.max_lr; mine[1] = cmd.min_lr; mine[2] = cmd.warmup_iters;
    mine[3] = (double)cmd.decay_iters; mine[4] = cmd.style; mine[5] = cmd.start_wd;
    mine[6] = cmd.end_wd; mine[7] = (double)cmd.wd_incr_iters; mine[8] = cmd.wd_style;
    theirs[0] = c->max_lr; theirs[1] = c->min_lr; theirs[2] = c->warmup_iters;
    theirs[3] = (double)c->decay_iters; theirs[4] = c->style; theirs[5] = c->start_wd;
    theirs[6] = c->end_wd; theirs[7] = (double)c->wd_incr_iters; theirs[8] = c->wd_style;
    for (k = 0; k < 9; k++) {
        if (mine[k] == theirs[k]) continue;
        if (k == 7 && (cmd.wd_style == MG_WD_CONSTANT || c->wd_style == MG_WD_CONSTANT))
            continue;
        if (k == 4 || k == 8) {
            mg__choice_name(k == 4 ? MG__LR_STYLES : MG__WD_STYLES, (int)mine[k], mv, sizeof mv);
            mg__choice_name(k == 4 ? MG__LR_STYLES : MG__WD_STYLES, (int)theirs[k], cv,
                            sizeof cv);
        } else {   /* as typed: 2, 0.001 (not 2.0); lengths in the run's unit */
            if (k == 2 || k == 3 || k == 7) { mine[k] *= unit; theirs[k] *= unit; }
            mg__num_text(mv, sizeof mv, mine[k], 0);
            mg__num_text(cv, sizeof cv, theirs[k], 0);
            if (mine[k] == floor(mine[k])) snprintf(mv, sizeof mv, "%.0f", mine[k]);
            if (theirs[k] == floor(theirs[k])) snprintf(cv, sizeof cv, "%.0f", theirs[k]);
        }
        return mg__err(err, errlen, "%s %s%s differs from the checkpoint's %s (on resume "
                       "Megatron-LM's OptimizerParamScheduler refuses a changed schedule: give "
                       "--use-checkpoint-opt_param-scheduler to keep the checkpoint's, or "
                       "--override-opt_param-scheduler to take the command line's)",
                       k == 3 && !decay_given ? flags[7] : flags[k], mv,
                       k == 3 && !decay_given ? (samples ? " (the decay length without "
                       "--lr-decay-samples)" : " (the decay length without --lr-decay-iters)")
                       : k == 7 ? " (the weight-decay increment's length)" : "", cv);
    }
    /* the decoupled param group's pair, where either run has one */
    if (cmd.decoupled != c->decoupled || (cmd.decoupled && (cmd.decoupled_max_lr !=
        c->decoupled_max_lr || cmd.decoupled_min_lr != c->decoupled_min_lr))) {
        int max_differs = cmd.decoupled != c->decoupled ||
                          cmd.decoupled_max_lr != c->decoupled_max_lr;
        if (cmd.decoupled) mg__num_text(mv, sizeof mv, max_differs ? cmd.decoupled_max_lr
                                                                   : cmd.decoupled_min_lr, 0);
        else snprintf(mv, sizeof mv, "(not given)");
        if (c->decoupled) mg__num_text(cv, sizeof cv, max_differs ? c->decoupled_max_lr
                                                                  : c->decoupled_min_lr, 0);
        else snprintf(cv, sizeof cv, "none");
        if (!strcmp(mv, "0.0")) snprintf(mv, sizeof mv, "0");   /* as typed */
        if (!strcmp(cv, "0.0")) snprintf(cv, sizeof cv, "0");
        return mg__err(err, errlen, "%s %s differs from the checkpoint's %s (on resume "
                       "Megatron-LM's OptimizerParamScheduler refuses a changed schedule: give "
                       "--use-checkpoint-opt_param-scheduler to keep the checkpoint's, or "
                       "--override-opt_param-scheduler to take the command line's)",
                       max_differs ? "--decoupled-lr" : "--decoupled-min-lr", mv, cv);
    }
    return 0;
}

/* The architecture switches beyond the six sizes (the Llama family's), as flags. */
static const char *const mg__switch_flags[] = {
    "--normalization", "--norm-epsilon", "--swiglu", "--ffn-hidden-size",
    "--position-embedding-type", "--rotary-base", "--rotary-percent", "--use-rope-scaling",
    "--rope-scaling-factor", "--group-query-attention", "--num-query-groups", "--kv-channels",
    "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
    "--rotary-seq-len-interpolation-factor", "--no-bias-gelu-fusion", "--openai-gelu",
    "--squared-relu", "--apply-layernorm-1p"};
#define MG__NSWITCH_FLAGS ((int)(sizeof mg__switch_flags / sizeof mg__switch_flags[0]))

/* One switch of a source — a checkpoint's state.json args, a Hugging Face config.json —
   as its flag's text (choices by name, switches "true"/"false", an integer 0 meaning the
   default): taken when the flag was not given, else it must agree (the model's tensors
   depend on it); what names the source in the message.                                   */
static int mg__switch_merge(mg_train_args *a, const char *flag, const char *val,
                            const char *what, char *err, size_t errlen) {
    int k = mg__flag_index(flag);
    const mg__flag *f = &mg__flags[k];
    mg_train_args stored = *a;
    size_t off = f->offset, size;
    char why[MG_ERRLEN], given[64];
    if (f->type == MG__F_SWITCH) *(int *)((char *)&stored + off) = !strcmp(val, "true");
    else if (f->type == MG__F_INT && !strcmp(val, "0")) *(int64_t *)((char *)&stored + off) = 0;
    else if (mg__set_flag(&stored, f, val, why, sizeof why))   /* (0: the default) */
        return mg__err(err, errlen, "%s: %s", what, why);
    size = f->type == MG__F_INT ? sizeof(int64_t) : f->type == MG__F_FLOAT ? sizeof(double)
                                                                           : sizeof(int);
    if (!a->given[k]) {
        memcpy((char *)a + off, (char *)&stored + off, size);
        return 0;
    }
    if (!memcmp((char *)a + off, (char *)&stored + off, size)) return 0;
    mg__flag_text(a, f, given, sizeof given, 0);
    return mg__err(err, errlen, "%s%s%s on the command line differs from %s, which has %s "
                   "(leave the flag out to take it from there)", f->name,
                   f->type == MG__F_SWITCH ? "" : " ", f->type == MG__F_SWITCH ? "" : given,
                   what, f->type == MG__F_SWITCH ? (strcmp(val, "true") ? "it off" : "it on")
                                                 : val);
}

/* The switches of a checkpoint's state.json "args": each one not given on the command line is
   taken from there; one given must agree.                                                  */
static int mg__switches_from_state(mg_train_args *a, const char *path, char *err,
                                   size_t errlen) {
    char *text = NULL, val[256], what[MG_PATH_MAX + 32];
    mg_json js;
    int64_t args;
    int i, rc = 0;
    if (mg__json_file(path, MG__STATE_MAX_BYTES, &text, &js, err, errlen)) return -1;
    args = mg_json_get(&js, 0, "args");
    snprintf(what, sizeof what, "the checkpoint %s", path);
    for (i = 0; i < MG__NSWITCH_FLAGS && args >= 0 && !rc; i++) {
        int64_t t = mg_json_get(&js, args, mg__switch_flags[i] + 2);
        /* a checkpoint from before a flag: its default, except that one from before the
           exact GELU computed the tanh GELU whatever its flags                             */
        if (t < 0 && strcmp(mg__switch_flags[i], "--openai-gelu")) continue;
        /* the value's text: strings (choices) inside their quotes, numbers and booleans raw */
        if (t < 0) snprintf(val, sizeof val, "true");
        else snprintf(val, sizeof val, "%.*s", (int)(js.toks[t].end - js.toks[t].start),
                      text + js.toks[t].start);
        rc = mg__switch_merge(a, mg__switch_flags[i], val, what, err, errlen);
    }
    mg_json_free(&js);
    MG_FREE(text);
    return rc;
}

/* The switches of a Hugging Face Llama-family config.json (mg_weights_open read it into
   f->cfg): each flag not given is taken from there, one given must agree.                 */
static int mg__switches_from_hf(mg_train_args *a, const mg_weights_file *f, char *err,
                                size_t errlen) {
    const mg_gpt_config *c = &f->cfg;
    char v[MG__NSWITCH_FLAGS][40], what[MG_PATH_MAX + 32], *slash;
    int i, rc = 0;
    snprintf(what, sizeof what, "%s", f->path);
    slash = strrchr(what, '/');
    snprintf(slash ? slash + 1 : what, sizeof what - (size_t)(slash ? slash + 1 - what : 0),
             "config.json");
    /* in mg__switch_flags' order */
    snprintf(v[0], 40, "RMSNorm");
    mg__num_text(v[1], 40, f->norm_eps, 0);
    snprintf(v[2], 40, "true");
    snprintf(v[3], 40, "%d", c->ffn_hidden);
    snprintf(v[4], 40, "rope");
    mg__num_text(v[5], 40, f->rope_theta, 0);
    snprintf(v[6], 40, "1");
    snprintf(v[7], 40, "%s", c->use_rope_scaling ? "true" : "false");
    mg__num_text(v[8], 40, f->rope_factor, 0);
    snprintf(v[9], 40, "true");
    snprintf(v[10], 40, "%d", c->n_query_groups);
    snprintf(v[11], 40, "%d", c->kv_channels);
    snprintf(v[12], 40, "%s", c->untie_embeddings ? "true" : "false");
    snprintf(v[13], 40, "%s", c->disable_bias_linear ? "true" : "false");
    snprintf(v[14], 40, "%s", c->add_qkv_bias ? "true" : "false");
    mg__num_text(v[15], 40, c->rotary_interpolation > 0 ? c->rotary_interpolation : 1.0, 0);
    snprintf(v[16], 40, "false");   /* SwiGLU: no GELU */
    snprintf(v[17], 40, "false");
    snprintf(v[18], 40, "false");
    /* the file holds the norms' scales whichever parametrisation trains them: the flag's */
    snprintf(v[19], 40, "%s", a->apply_layernorm_1p ? "true" : "false");
    for (i = 0; i < MG__NSWITCH_FLAGS && !rc; i++)
        rc = mg__switch_merge(a, mg__switch_flags[i], v[i], what, err, errlen);
    return rc;
}

static void mg__llama_config(const mg_train_args *a, mg_gpt_config *c);
MGDEF int mg_train_model_check(int argc, char **argv, char *err, size_t errlen) {
    mg_train_args a;
    mg_gpt_config c;
    mg_train_args_default(&a);
    if (mg_train_parse(&a, argc, argv, err, errlen)) return -1;
    memset(&c, 0, sizeof c);
    c.n_layer = (int)a.num_layers;
    c.hidden = (int)a.hidden_size;
    c.n_head = (int)a.num_attention_heads;
    c.seq_len = (int)a.seq_length;
    c.max_pos = (int)(a.max_position_embeddings ? a.max_position_embeddings : a.seq_length);
    c.vocab_size = (int)a.vocab_size;
    c.padded_vocab = mg_gpt_pad_vocab(c.vocab_size, (int)a.make_vocab_size_divisible_by, 1);
    mg__llama_config(&a, &c);
    return mg_gpt_config_check(&c, 1, err, errlen);
}

/* The model configuration's fields beyond its sizes from the flags: the Llama family's
   switches and the initialisation's σ. */
static void mg__llama_config(const mg_train_args *a, mg_gpt_config *c) {
    c->normalization = a->normalization;
    c->norm_epsilon = (float)a->norm_epsilon;
    c->swiglu = a->swiglu;
    c->ffn_hidden = (int)a->ffn_hidden_size;
    c->position_embedding = a->position_embedding_type;
    c->rotary_base = (float)a->rotary_base;
    c->rotary_percent = (float)a->rotary_percent;
    c->use_rope_scaling = a->use_rope_scaling;
    c->rope_scaling_factor = (float)a->rope_scaling_factor;
    c->rotary_interpolation = (float)a->rotary_seq_len_interpolation_factor;
    /* Megatron-LM's MLP: its fused bias-GELU kernel (tanh) unless --no-bias-gelu-fusion, or
       no biases (validate_args turns the fusion off), then F.gelu (erf); --openai-gelu keeps
       the tanh GELU either way                                                             */
    c->squared_relu = a->squared_relu;
    c->layernorm_1p = a->apply_layernorm_1p;
    c->gelu_erf = !a->swiglu && !a->squared_relu && !a->openai_gelu &&
                  (a->no_bias_gelu_fusion || a->disable_bias_linear);
    /* Megatron-LM: --num-query-groups counts only with --group-query-attention (default 1) */
    c->n_query_groups = !a->group_query_attention ? 0
                        : a->num_query_groups > 0 ? (int)a->num_query_groups : 1;
    c->kv_channels = (int)a->kv_channels;
    c->untie_embeddings = a->untie_embeddings_and_output_weights;
    c->disable_bias_linear = a->disable_bias_linear;
    c->add_qkv_bias = a->add_qkv_bias;
    c->init_method_std = (float)a->init_method_std;
    c->init_xavier = a->init_method_xavier_uniform;
}

/* Fills the architecture in *cfg from the flags and from a loaded source (checkpoint state
   or weights file): a flag given must agree with the source; a missing one is taken from it. */
static int mg__merge_arch(const mg_train_args *a, const int64_t src[6], const char *what,
                          int64_t out[6], char *err, size_t errlen) {
    const char *flags[6] = {"--num-layers", "--hidden-size", "--num-attention-heads",
                            "--seq-length", "--max-position-embeddings", "--vocab-size"};
    int64_t given[6];
    int k;
    given[0] = a->num_layers; given[1] = a->hidden_size; given[2] = a->num_attention_heads;
    given[3] = a->seq_length; given[4] = a->max_position_embeddings; given[5] = a->vocab_size;
    for (k = 0; k < 6; k++) {
        out[k] = mg_train_flag_given(a, flags[k]) ? given[k] : 0;
        if (!src || !src[k]) continue;
        if (out[k] && out[k] != src[k])
            return mg__err(err, errlen, "%s %lld does not match %s, which has %lld (leave the "
                           "flag out to take it from there)", flags[k], (long long)out[k], what,
                           (long long)src[k]);
        out[k] = src[k];
    }
    if (!out[4]) out[4] = out[3];        /* max positions default: the sequence length */
    if (!out[3]) out[3] = out[4];        /* sequence length default: the max positions */
    for (k = 0; k < 6; k++)
        if (!out[k])
            return mg__err(err, errlen, "%s is required (or give a model with --init-from or "
                           "--load)", flags[k]);
    return 0;
}

/* Checks of numbers and their combinations, no files. */
/* Megatron-LM's --data-args-path and --per-split-data-args-path (get_blend_and_blend_per_split):
   the data flags' words read from files, for blends of many datasets. The first file is
   --data-path's words, separated by any whitespace (Python's str.split()); the second a JSON
   object whose "train", "valid" and "test" each hold a list of words (strings, or numbers
   for the weights) or one string of them, or null. The words are kept in tr->data_words and
   the lists of tr->args point at them, as if they had been typed.                          */
static int mg__keep_word(mg_trainer *tr, mg_str_list *l, const char *flag, const char *w,
                         size_t n, char *err, size_t errlen) {
    char *copy;
    if (l->n == MG_DATA_WORDS)
        return mg__err(err, errlen, "%s: more than %d words (%d datasets)", flag, MG_DATA_WORDS,
                       MG_DATA_WORDS / 2);
    if (tr->n_data_words == tr->cap_data_words) {
        int cap = tr->cap_data_words ? 2 * tr->cap_data_words : 64;
        char **grown = (char **)MG_MALLOC(sizeof(char *) * (size_t)cap);
        MG_ASSERT(grown, "out of host memory");
        if (tr->n_data_words)
            memcpy(grown, tr->data_words, sizeof(char *) * (size_t)tr->n_data_words);
        MG_FREE(tr->data_words);
        tr->data_words = grown;
        tr->cap_data_words = cap;
    }
    copy = (char *)MG_MALLOC(n + 1);
    MG_ASSERT(copy, "out of host memory");
    memcpy(copy, w, n);
    copy[n] = 0;
    tr->data_words[tr->n_data_words++] = copy;
    l->v[l->n++] = copy;
    return 0;
}
/* The whitespace-separated words of text[0, n) appended to l.                               */
static int mg__keep_words(mg_trainer *tr, mg_str_list *l, const char *flag, const char *text,
                          size_t n, char *err, size_t errlen) {
    size_t i = 0, j;
    while (i < n) {
        while (i < n && isspace((unsigned char)text[i])) i++;
        for (j = i; j < n && !isspace((unsigned char)text[j]); j++) {}
        if (j > i && mg__keep_word(tr, l, flag, text + i, j - i, err, errlen)) return -1;
        i = j;
    }
    return 0;
}
static int mg__data_args_files(mg_trainer *tr, char *err, size_t errlen) {
    mg_train_args *a = &tr->args;
    static const char *const parts[3] = {"train", "valid", "test"};
    mg_str_list *lists[3];
    char *text = NULL, why[MG_ERRLEN];
    size_t len = 0;
    mg_json js;
    int p, rc = -1;
    lists[0] = &a->train_data_path;
    lists[1] = &a->valid_data_path;
    lists[2] = &a->test_data_path;
    if (a->data_args_path && a->per_split_data_args_path)
        return mg__err(err, errlen, "--data-args-path and --per-split-data-args-path exclude each "
                       "other (one blend split by --split, or one per part: give one)");
    if (a->data_args_path && a->data_path.n)
        return mg__err(err, errlen, "--data-args-path with --data-path: give the words in one "
                       "place");
    if (a->per_split_data_args_path &&
        (a->train_data_path.n || a->valid_data_path.n || a->test_data_path.n))
        return mg__err(err, errlen, "--per-split-data-args-path with --%s-data-path: give the "
                       "parts in one place", a->train_data_path.n ? "train" :
                       a->valid_data_path.n ? "valid" : "test");
    if (a->data_args_path) {
        if (mg_read_file(a->data_args_path, (size_t)64 << 20, &text, &len, why, sizeof why))
            return mg__err(err, errlen, "--data-args-path %s", why);
        rc = mg__keep_words(tr, &a->data_path, "--data-args-path", text, len, err, errlen);
        MG_FREE(text);
        if (rc == 0 && !a->data_path.n)
            rc = mg__err(err, errlen, "--data-args-path %s: no words (expected PATH, or W1 "
                         "PATH1 W2 PATH2 …)", a->data_args_path);
        return rc;
    }
    if (!a->per_split_data_args_path) return 0;
    if (mg_read_file(a->per_split_data_args_path, (size_t)64 << 20, &text, &len, why,
                     sizeof why))
        return mg__err(err, errlen, "--per-split-data-args-path %s", why);
    if (mg_json_parse(&js, text, len, why, sizeof why)) {
        mg__err(err, errlen, "--per-split-data-args-path %s: %s", a->per_split_data_args_path,
                why);
        MG_FREE(text);
        return -1;
    }
    if (js.toks[0].type != MG_JSON_OBJECT) {
        mg__err(err, errlen, "--per-split-data-args-path %s: not a JSON object (expected "
                "{\"train\": [...], \"valid\": [...], \"test\": [...]})",
                a->per_split_data_args_path);
        goto done;
    }
    for (p = 0; p < 3; p++) {
        int64_t v = mg_json_get(&js, 0, parts[p]), t, k;
        const mg_json_tok *tok;
        if (v < 0) {
            mg__err(err, errlen, "--per-split-data-args-path %s: no \"%s\" (Megatron-LM reads "
                    "\"train\", \"valid\" and \"test\"; null for a part without data)",
                    a->per_split_data_args_path, parts[p]);
            goto done;
        }
        tok = &js.toks[v];
        if (tok->type == MG_JSON_NULL) continue;
        if (tok->type == MG_JSON_STRING) {   /* one string of words (no escapes to undo) */
            char *words = mg_json_strdup(&js, v);
            int bad = !words || mg__keep_words(tr, lists[p], "--per-split-data-args-path",
                                               words, strlen(words), err, errlen);
            MG_FREE(words);
            if (bad) {
                if (!words) mg__err(err, errlen, "--per-split-data-args-path %s: \"%s\" holds "
                                    "\\u0000", a->per_split_data_args_path, parts[p]);
                goto done;
            }
            continue;
        }
        if (tok->type != MG_JSON_ARRAY) {
            mg__err(err, errlen, "--per-split-data-args-path %s: \"%s\" is not a list of words, "
                    "a string or null", a->per_split_data_args_path, parts[p]);
            goto done;
        }
        for (k = 0, t = v + 1; k < tok->size; k++, t = js.toks[t].next) {
            const mg_json_tok *e = &js.toks[t];
            char *w = e->type == MG_JSON_STRING ? mg_json_strdup(&js, t) : NULL;
            int bad;
            if (e->type != MG_JSON_STRING && e->type != MG_JSON_NUMBER) {
                mg__err(err, errlen, "--per-split-data-args-path %s: \"%s\" element %lld is "
                        "neither a path nor a weight", a->per_split_data_args_path, parts[p],
                        (long long)k);
                goto done;
            }
            bad = e->type == MG_JSON_STRING
                  ? !w || !*w || mg__keep_word(tr, lists[p], "--per-split-data-args-path", w,
                                               strlen(w), err, errlen)
                  : mg__keep_word(tr, lists[p], "--per-split-data-args-path", js.text + e->start,
                                  (size_t)(e->end - e->start), err, errlen);
            if (bad && e->type == MG_JSON_STRING && (!w || !*w))
                mg__err(err, errlen, "--per-split-data-args-path %s: \"%s\" element %lld is an "
                        "empty path", a->per_split_data_args_path, parts[p], (long long)k);
            MG_FREE(w);
            if (bad) goto done;
        }
    }
    rc = 0;
done:
    mg_json_free(&js);
    MG_FREE(text);
    return rc;
}

/* Sample-based training, as Megatron-LM's validate_args and update_train_iters: the sample
   flags only with --train-samples and the iteration ones only without it; then --train-iters
   = --train-samples / --global-batch-size, rounded down (the schedule keeps the samples).   */
static int mg__setup_samples(mg_train_args *a, char *err, size_t errlen) {
    static const char *const per_sample[3] = {"--lr-decay-samples", "--lr-warmup-samples",
                                              "--lr-wsd-decay-samples"};
    static const char *const per_iter[3] = {"--lr-decay-iters", "--lr-warmup-iters",
                                            "--lr-wsd-decay-iters"};
    int k;
    if (!mg__sample_based(a)) {
        for (k = 0; k < 3; k++)
            if (mg_train_flag_given(a, per_sample[k]))
                return mg__err(err, errlen, "%s applies to sample-based training "
                               "(--train-samples); with --train-iters give %s", per_sample[k],
                               per_iter[k]);
        return 0;
    }
    if (mg_train_flag_given(a, "--train-iters"))
        return mg__err(err, errlen, "--train-samples and --train-iters exclude each other "
                       "(Megatron-LM counts a run in samples or in iterations: give one)");
    for (k = 0; k < 3; k++)
        if (mg_train_flag_given(a, per_iter[k]) && (k != 1 || a->lr_warmup_iters))
            return mg__err(err, errlen, "%s with --train-samples: the schedule is counted in "
                           "samples (give %s)", per_iter[k], per_sample[k]);
    if (mg_train_flag_given(a, "--lr-warmup-fraction") && a->lr_warmup_samples)
        return mg__err(err, errlen, "--lr-warmup-fraction and --lr-warmup-samples %lld exclude "
                       "each other (Megatron-LM takes one of them: give one)",
                       (long long)a->lr_warmup_samples);
    if (a->train_samples < a->global_batch_size)
        return mg__err(err, errlen, "--train-samples %lld is less than one global batch "
                       "(--global-batch-size %lld): no iteration to train",
                       (long long)a->train_samples, (long long)a->global_batch_size);
    a->train_iters = a->train_samples / a->global_batch_size;
    return 0;
}

static int mg__check_run(const mg_train_args *a, char *err, size_t errlen) {
    int rank0 = !a->comm || a->comm->world_rank == 0;
    int last_rank = !a->comm || a->comm->world_rank == a->comm->world_size - 1;
    if (mg_train_flag_given(a, "--num-query-groups") && !a->group_query_attention)
        return mg__err(err, errlen, "--num-query-groups %lld needs --group-query-attention (as "
                       "in Megatron-LM; without it every head has its own keys and values)",
                       (long long)a->num_query_groups);
    if (a->train_iters < 0)
        return mg__err(err, errlen, "--train-iters is required (the number of iterations, e.g. "
                       "--train-iters 1000; or --train-samples N)");
    if (a->no_load_optim && !a->load)
        return mg__err(err, errlen, "--no-load-optim applies to the checkpoint of --load (no "
                       "--load given)");
    if (a->load_main_params_from_ckpt && !a->no_load_optim)   /* Megatron-LM asserts it too */
        return mg__err(err, errlen, "--load-main-params-from-ckpt must be used with "
                       "--no-load-optim (a resume takes the checkpoint's master weights anyway)");
    if (a->override_opt_param_scheduler && a->use_checkpoint_opt_param_scheduler)
        return mg__err(err, errlen, "--override-opt_param-scheduler and "
                       "--use-checkpoint-opt_param-scheduler exclude each other (the command "
                       "line's schedule or the checkpoint's: pick one)");
    if (a->lr < 0 && a->train_iters > 0 && !(a->use_checkpoint_opt_param_scheduler && a->load))
        return mg__err(err, errlen, "--lr is required (the peak learning rate, e.g. --lr 3e-4)");
    if (a->lr >= 0 && a->min_lr > a->lr)
        return mg__err(err, errlen, "--min-lr %g is larger than --lr %g (it must be <= --lr)",
                       a->min_lr, a->lr);
    if (a->global_batch_size % a->micro_batch_size)
        return mg__err(err, errlen, "--global-batch-size %lld is not a multiple of "
                       "--micro-batch-size %lld (gradients accumulate over whole microbatches: "
                       "use a multiple of %lld, e.g. %lld)", (long long)a->global_batch_size,
                       (long long)a->micro_batch_size, (long long)a->micro_batch_size,
                       (long long)((a->global_batch_size / a->micro_batch_size + 1) *
                                   a->micro_batch_size));
    if (mg_train_flag_given(a, "--lr-warmup-fraction") && a->lr_warmup_iters)
        return mg__err(err, errlen, "--lr-warmup-fraction and --lr-warmup-iters %lld exclude "
                       "each other (Megatron-LM takes one of them: give one)",
                       (long long)a->lr_warmup_iters);
    if (a->lr >= 0 && a->lr_warmup_init > a->lr)
        return mg__err(err, errlen, "--lr-warmup-init %g is larger than --lr %g (the warm-up "
                       "rises to --lr: it must be <= --lr)", a->lr_warmup_init, a->lr);
    /* Megatron's OptimizerParamScheduler asserts warm-up < decay for every style */
    if (a->train_iters > 0 && mg__warmup_iters(a) >= mg__decay_iters(a)) {
        char warm[64];
        int samples = mg__sample_based(a);
        if (mg_train_flag_given(a, "--lr-warmup-fraction"))
            snprintf(warm, sizeof warm, "--lr-warmup-fraction %g", a->lr_warmup_fraction);
        else snprintf(warm, sizeof warm, "--lr-warmup-%s %lld", samples ? "samples" : "iters",
                      (long long)(samples ? a->lr_warmup_samples : a->lr_warmup_iters));
        return mg__err(err, errlen, "%s: the warm-up must be shorter than the decay, "
                       "--lr-decay-%s %lld (default: --train-%s)", warm,
                       samples ? "samples" : "iters", (long long)(samples ? (a->lr_decay_samples
                       ? a->lr_decay_samples : a->train_samples) : (int64_t)mg__decay_iters(a)),
                       samples ? "samples" : "iters");
    }
    /* Megatron's OptimizerParamScheduler asserts wsd_decay_steps is not None for WSD */
    if (a->lr_decay_style == MG_LR_WSD &&
        !mg_train_flag_given(a, mg__sample_based(a) ? "--lr-wsd-decay-samples"
                                                    : "--lr-wsd-decay-iters"))
        return mg__err(err, errlen, "--lr-decay-style WSD needs --lr-wsd-decay-%s N (the "
                       "%s of its annealing, at the end of the decay)",
                       mg__sample_based(a) ? "samples" : "iters",
                       mg__sample_based(a) ? "samples" : "iterations");
    /* Megatron's validate_args: the constant style takes --weight-decay and neither end;
       linear and cosine take both ends; its scheduler asserts end >= start */
    if (a->weight_decay_incr_style == MG_WD_CONSTANT) {
        const char *end = mg_train_flag_given(a, "--start-weight-decay") ? "--start-weight-decay"
                        : mg_train_flag_given(a, "--end-weight-decay") ? "--end-weight-decay"
                        : NULL;
        if (end)
            return mg__err(err, errlen, "%s needs --weight-decay-incr-style linear or cosine "
                           "(the constant style decays by --weight-decay throughout)", end);
    } else {
        char style[32];
        mg__choice_name(MG__WD_STYLES, a->weight_decay_incr_style, style, sizeof style);
        if (!mg_train_flag_given(a, "--start-weight-decay") ||
            !mg_train_flag_given(a, "--end-weight-decay"))
            return mg__err(err, errlen, "--weight-decay-incr-style %s needs --start-weight-decay "
                           "and --end-weight-decay (the weight decay it rises between)", style);
        if (a->end_weight_decay < a->start_weight_decay)
            return mg__err(err, errlen, "--end-weight-decay %g is smaller than "
                           "--start-weight-decay %g (the weight decay only rises: it must be >=)",
                           a->end_weight_decay, a->start_weight_decay);
    }
    if (mg_train_flag_given(a, "--save-interval") && !a->save)
        return mg__err(err, errlen, "--save-interval needs --save DIR (where to write)");
    /* Megatron-LM: validate_args asserts no method with selective, TransformerConfig's
       __post_init__ no layer count with selective; without a granularity neither is
       looked at (accepted, and nothing is recomputed) */
    if (a->recompute_granularity == MG_RECOMPUTE_SELECTIVE &&
        (mg_train_flag_given(a, "--recompute-method") ||
         mg_train_flag_given(a, "--recompute-num-layers")))
        return mg__err(err, errlen, "%s applies to --recompute-granularity full only, not to "
                       "selective (use --recompute-granularity full, or leave it out)",
                       mg_train_flag_given(a, "--recompute-method") ? "--recompute-method" :
                       "--recompute-num-layers");
    if (a->recompute_granularity == MG_RECOMPUTE_FULL && a->num_layers > 0 &&
        a->recompute_num_layers > a->num_layers)
        return mg__err(err, errlen, "--recompute-num-layers %lld: must be 1 … --num-layers %lld",
                       (long long)a->recompute_num_layers, (long long)a->num_layers);
    if (a->bf16 && a->fp16)
        return mg__err(err, errlen, "--bf16 and --fp16 exclude each other (pick one)");
    if (a->squared_relu && a->swiglu)   /* Megatron-LM: assert not args.swiglu */
        return mg__err(err, errlen, "--squared-relu and --swiglu exclude each other (each is "
                       "the MLP's activation: pick one)");
    if (!a->fp16) {
        static const char *const fp16_only[5] = {"--loss-scale", "--initial-loss-scale",
            "--min-loss-scale", "--loss-scale-window", "--hysteresis"};
        int k;
        for (k = 0; k < 5; k++)
            if (mg_train_flag_given(a, fp16_only[k]))
                return mg__err(err, errlen, "%s applies to --fp16 only (bf16 and fp32 need no "
                               "loss scaling)", fp16_only[k]);
    }
    if (a->fp16 && !a->loss_scale && a->min_loss_scale > a->initial_loss_scale)
        return mg__err(err, errlen, "--min-loss-scale %g is larger than --initial-loss-scale %g",
                       a->min_loss_scale, a->initial_loss_scale);
    if (a->enable_cuda_graph && a->comm && a->comm->world_size > 1)
        return mg__err(err, errlen, "--enable-cuda-graph captures the optimizer step of one "
                       "rank; with %d ranks its gradient-norm sums are NCCL collectives, which "
                       "are not captured (run without --enable-cuda-graph)",
                       a->comm->world_size);
    if (a->enable_cuda_graph && (a->device == MG_DEVICE_CPU || !mg_cuda_available()))
        return mg__err(err, errlen, "--enable-cuda-graph needs the GPU (%s)",
                       a->device == MG_DEVICE_CPU ? "--device cpu was given" :
                       "this program runs on the CPU: no GPU, or built without CUDA");
    if (a->mock_data && (a->data_path.n || a->train_data_path.n || a->valid_data_path.n ||
                         a->test_data_path.n))
        return mg__err(err, errlen, "--mock-data with --%sdata-%s: give either the mock "
                       "dataset or a dataset", a->data_args_path ? "" : a->per_split_data_args_path
                       ? "per-split-" : a->data_path.n ? "" : a->train_data_path.n ? "train-" :
                       a->valid_data_path.n ? "valid-" : "test-", a->data_args_path ||
                       a->per_split_data_args_path ? "args-path" : "path");
    if (a->mock_data && !a->tokenizer_type)
        return mg__err(err, errlen, "--mock-data needs --tokenizer-type: its documents end with "
                       "the tokenizer's end-of-document id and its ids wrap at its vocabulary "
                       "(--tokenizer-type NullTokenizer --vocab-size V needs no file)");
    if (a->data_path.n && (a->train_data_path.n || a->valid_data_path.n || a->test_data_path.n))
        return mg__err(err, errlen, "--data-path with --%s-data-path: give either --data-path "
                       "(split by --split) or --train-data-path [--valid-data-path] "
                       "[--test-data-path]", a->train_data_path.n ? "train" :
                       a->valid_data_path.n ? "valid" : "test");
    if (!a->data_path.n && (a->valid_data_path.n || a->test_data_path.n) &&
        !a->train_data_path.n && a->train_iters > 0)
        return mg__err(err, errlen, "--%s-data-path needs --train-data-path to train",
                       a->valid_data_path.n ? "valid" : "test");
    if (a->train_data_path.n && mg_train_flag_given(a, "--split"))
        return mg__err(err, errlen, "--split applies to --data-path; --train-data-path, "
                       "--valid-data-path and --test-data-path are used whole");
    if (a->context_parallel_size > 1 && a->sample_tokens > 0)
        return mg__err(err, errlen, "--sample-tokens with --context-parallel-size %lld: "
                       "sampling needs every position on one rank (use "
                       "--context-parallel-size 1)", (long long)a->context_parallel_size);
    if (a->prompt && (!a->tokenizer_type || a->sample_tokens <= 0))
        return mg__err(err, errlen, "--prompt needs %s (it is encoded, then the sample "
                       "continues it)", !a->tokenizer_type ? "--tokenizer-type (ByteTokenizer "
                       "for mg_prepare's default byte data)" : "--sample-tokens N");
    if (a->eod_token_id >= 0 && !a->eod_mask_loss)
        return mg__err(err, errlen, "--eod-token-id %lld applies to --eod-mask-loss (give both, "
                       "or neither)", (long long)a->eod_token_id);
    if (a->eod_mask_loss && a->eod_token_id < 0 && !a->tokenizer_type)
        return mg__err(err, errlen, "--eod-mask-loss needs the end-of-document id: "
                       "--tokenizer-type (its end-of-document token) or --eod-token-id ID");
    if (a->train_iters > 0 && !a->data_path.n && !a->train_data_path.n && !a->mock_data)
        return mg__err(err, errlen, "--data-path is required to train (an indexed dataset "
                       "prefix or an llm.c token file, or a blend W1 PATH1 W2 PATH2 …; "
                       "--mock-data for Megatron-LM's mock dataset; --train-iters 0 needs "
                       "none)");
    {   /* the environment the context will read: MG_DEVICE (with --device auto) and
           MG_ATTN_KERNELS, refused here by every rank rather than inside mg_ctx_init       */
        mg_ctx_desc env;
        memset(&env, 0, sizeof env);
        env.device = (mg_device)a->device;
        if (mg_ctx_env_check(&env, err, errlen)) return -1;
    }
    if (a->device == MG_DEVICE_CUDA && !mg_cuda_available())
#ifdef __CUDACC__
        return mg__err(err, errlen, "--device cuda: no CUDA GPU is available (use --device "
                       "cpu or auto)");
#else
        return mg__err(err, errlen, "--device cuda: this program was built without CUDA (use "
                       "the _cuda build, or --device cpu)");
#endif
    {   /* every path leaves room for the names a run makes under or beside it */
        const char *const dirs[4] = {"--save", "--load", "--export-hf", "--tensorboard-dir"};
        const char *const dir_val[4] = {a->save, a->load, a->export_hf, a->tensorboard_dir};
        int k;
        for (k = 0; k < 4; k++)
            if (dir_val[k] && mg__check_path_room(dirs[k], dir_val[k], MG__DIR_ROOM, err, errlen))
                return -1;
        if (a->log_jsonl && mg__check_path_room("--log-jsonl", a->log_jsonl, MG__FILE_ROOM, err,
                                                errlen)) return -1;
        if (a->pipeline_trace && mg__check_path_room("--pipeline-trace", a->pipeline_trace,
                                                     MG__FILE_ROOM, err, errlen)) return -1;
    }
    /* the outputs, each tried by the rank that writes it: world rank 0, TensorBoard's the
       last rank (every stage writes its part of the pipeline trace: rank 0 tries it)        */
    if (a->save && mg__check_output("--save", a->save, 1, rank0, err, errlen)) return -1;
    if (a->log_jsonl && mg__check_output("--log-jsonl", a->log_jsonl, 0, rank0, err, errlen))
        return -1;
    if (a->tensorboard_dir && mg__check_output("--tensorboard-dir", a->tensorboard_dir, 1,
                                               last_rank, err, errlen)) return -1;
    if (a->pipeline_trace &&
        mg__check_output("--pipeline-trace", a->pipeline_trace, 0, rank0, err, errlen))
        return -1;
    if (a->export_hf && mg__check_output("--export-hf", a->export_hf, 1, rank0, err, errlen))
        return -1;
    if (a->load && !mg__is_dir(a->load) && !mg__parent_is_dir(a->load))
        return mg__err(err, errlen, "--load %s: no such directory, nor the directory it would "
                       "be in (give a checkpoint directory, or a new one to start from scratch)",
                       a->load);
    return 0;
}

/* ---- 4c. Tokenizer flags ------------------------------------------------------------------ */
MGDEF mg_tokenizer *mg_tokenizer_from_flags(const char *type, const char *vocab_file,
                                            const char *merge_file, const char *tokenizer_model,
                                            const char *tiktoken_pattern,
                                            int64_t null_vocab_size, char *err, size_t errlen) {
    mg_tokenizer_desc d;
    char json[MG_PATH_MAX], why[MG_ERRLEN];
    int t = type ? mg_tok_type_from_name(type) : MG_TOK_BYTES;
    memset(&d, 0, sizeof d);
    if (t < 0) {
        mg__err(err, errlen, "--tokenizer-type %s: unknown (expected GPT2BPETokenizer, "
                "TikTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, Llama2Tokenizer, "
                "NullTokenizer or ByteTokenizer)", type);
        return NULL;
    }
    if (t == MG_TOK_NULL && null_vocab_size < 1) {
        mg__err(err, errlen, "--tokenizer-type NullTokenizer needs --vocab-size V (ids 0 … V-1, "
                "and V the end of document: V + 1 ids)");
        return NULL;
    }
    /* GPT-2: both files; the others: one file, as --tokenizer-model (Megatron-LM's flag for
       them) or --vocab-file (tools/mg_tokenize's)                                          */
    {   /* the message names what is wrong with the files given, not a list of rules */
        const char *why = NULL;
        if (t == MG_TOK_GPT2_BPE)
            why = tokenizer_model ? "not --tokenizer-model" : !vocab_file && !merge_file ?
                  "both are missing" : !vocab_file ? "--vocab-file is missing" : !merge_file ?
                  "--merge-file is missing" : NULL;
        else if (t != MG_TOK_BYTES && t != MG_TOK_NULL)
            why = merge_file ? "--merge-file is not one of its files" : tokenizer_model &&
                  vocab_file ? "both were given" : !tokenizer_model && !vocab_file ?
                  "none was given" : NULL;
        if (why) {
            mg__err(err, errlen, "--tokenizer-type %s takes %s: %s", type,
                    t == MG_TOK_GPT2_BPE ? "--vocab-file vocab.json and --merge-file merges.txt"
                    : "one file, --tokenizer-model FILE or --vocab-file FILE", why);
            return NULL;
        }
    }
    if (((t == MG_TOK_BYTES || t == MG_TOK_NULL) &&
         (vocab_file || merge_file || tokenizer_model)) ||
        (tiktoken_pattern && t != MG_TOK_TIKTOKEN)) {
        mg__err(err, errlen, "--tokenizer-type %s takes no %s", type ? type : "ByteTokenizer",
                tiktoken_pattern && t != MG_TOK_TIKTOKEN ? "--tiktoken-pattern" :
                "tokenizer files");
        return NULL;
    }
    d.type = (mg_tok_type)t;
    d.vocab_file = tokenizer_model ? tokenizer_model : vocab_file;
    d.merge_file = merge_file;
    d.pattern = tiktoken_pattern;
    if (t == MG_TOK_NULL) return mg_tokenizer_null(null_vocab_size, err, errlen);
    if (t == MG_TOK_HF && mg__is_dir(d.vocab_file)) {   /* a model directory */
        if (mg__path(json, sizeof json, "%s/tokenizer.json", d.vocab_file)) {
            mg__err(err, errlen, "%s: directory name too long", d.vocab_file);
            return NULL;
        }
        d.vocab_file = json;
    }
    {   /* the file's error, named by its flag ("--vocab-file vocab.json: invalid JSON …") */
        mg_tokenizer *tok = mg_tokenizer_load(&d, why, sizeof why);
        size_t mn = merge_file ? strlen(merge_file) : 0;
        size_t vn = d.vocab_file ? strlen(d.vocab_file) : 0;
        int in_merges = mn && !strncmp(why, merge_file, mn);
        const char *flag = in_merges ? "--merge-file" : tokenizer_model ? "--tokenizer-model"
                                                                         : "--vocab-file";
        if (tok) return tok;
        if (in_merges || (vn && !strncmp(why, d.vocab_file, vn)))   /* "FILE: what is wrong" */
            mg__err(err, errlen, "%s %s", flag, why);
        else if (vn) mg__err(err, errlen, "%s %s: %s", flag, d.vocab_file, why);
        else mg__err(err, errlen, "--tokenizer-type %s: %s", type, why);
        return NULL;
    }
}

/* The datasets one data flag names (mg_blend_parse's words), opened into tr->datasets from
   index *next on; every token id checked against the vocabulary.                           */
typedef struct mg__data_group {
    const char *flag;                   /* "--data-path", "--train-data-path", …             */
    int n, weighted;
    const char *prefix[MG_DATA_WORDS / 2];
    double weight[MG_DATA_WORDS / 2];
    const mg_dataset *ds[MG_DATA_WORDS / 2];
} mg__data_group;

static int mg__open_data_group(mg_trainer *tr, mg__data_group *g, const char *flag,
                               const mg_str_list *words, char *err, size_t errlen) {
    char why[MG_ERRLEN];
    int k;
    g->flag = flag;
    if (!words) {   /* --mock-data: the mock dataset, with the tokenizer's ids */
        if (mg_tokenizer_eod(tr->tok) < 0)
            return mg__err(err, errlen, "--mock-data: --tokenizer-type %s has no end-of-document "
                           "token to end its documents with", tr->args.tokenizer_type);
        g->n = 1;
        g->prefix[0] = "(Megatron-LM's mock dataset)";
    } else if (mg_blend_parse(flag, words->v, words->n, g->prefix, g->weight,
                              MG_DATA_WORDS / 2, &g->n, &g->weighted, why, sizeof why))
        return mg__err(err, errlen, "%s", why);
    for (k = 0; k < g->n; k++) {
        mg_dataset *ds = &tr->datasets[tr->n_datasets];
        int64_t lo, hi;
        if (words ? mg_dataset_open(g->prefix[k], ds, why, sizeof why) :
            mg_dataset_open_mock(ds, mg_tokenizer_vocab_size(tr->tok), mg_tokenizer_eod(tr->tok),
                                 why, sizeof why))
            return mg__err(err, errlen, "%s: %s", flag, why);
        tr->n_datasets++;
        g->ds[k] = ds;
        mg_dataset_token_range(ds, &lo, &hi);
        if (lo < 0 || hi >= tr->cfg.vocab_size) {
            char vocab[160];   /* where the vocabulary came from */
            if (tr->tok) snprintf(vocab, sizeof vocab, "--tokenizer-type %s",
                                  tr->args.tokenizer_type);
            else snprintf(vocab, sizeof vocab, "--vocab-size %d", tr->cfg.vocab_size);
            return mg__err(err, errlen, "%s %s: token id %lld is outside the vocabulary (%s: "
                           "ids 0 … %d)", flag, g->prefix[k], (long long)(lo < 0 ? lo : hi),
                           vocab, tr->cfg.vocab_size - 1);
        }
    }
    return 0;
}

/* "1 document", "20 documents" (or sequences, where a document holds several: the split
   counts sequences, which Megatron's GPTDataset calls documents).                           */
/* One part's blend: n_samples samples of part `part` of each dataset of g under split. */
static int mg__part_blend(mg_trainer *tr, mg_blend *b, const mg__data_group *g,
                          const char *split, mg_split_part part, int64_t n_samples, char *err,
                          size_t errlen) {
    static const char *const names[3] = {"training", "validation", "test"};
    static const char *const asked[3] = {"--train-iters x --global-batch-size",
                                         "--eval-iters x --global-batch-size per validation",
                                         "--eval-iters x --global-batch-size"};
    const mg_train_args *a = &tr->args;
    char why[MG_ERRLEN];
    mg_sampler_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.split = split;
    sd.part = part;
    sd.seq_len = tr->cfg.seq_len;
    sd.n_samples = n_samples;
    sd.seed = (uint32_t)a->seed;
    sd.order = (mg_data_order)a->data_order;
    if (mg_blend_init(b, g->ds, g->weight, g->n, g->weighted, &sd, why, sizeof why))
        return mg__err(err, errlen, "%s%s%s, %s part (%lld samples: %s): %s", g->flag,
                       g->n == 1 ? " " : "", g->n == 1 ? g->prefix[0] : "", names[part],
                       (long long)n_samples, asked[part], why);
    if (part == MG_SPLIT_TRAIN && b->n_samples < n_samples) {   /* blended by size: one epoch */
        mg__err(err, errlen, "%s: the %d datasets without weights are blended by their sizes, "
                "one epoch of each: %lld training samples, fewer than the %lld the run trains "
                "on (%s; Megatron-LM's unweighted blend has no more: give weights to draw more)",
                g->flag, g->n, (long long)b->n_samples, (long long)n_samples, asked[part]);
        mg_blend_free(b);
        return -1;
    }
    return 0;
}

/* The first dataset of a blend whose part holds fewer tokens than one sample (-1: none). */
static int mg__short_part(const mg_trainer *tr, const mg_blend *b) {
    int k;
    for (k = 0; k < b->n; k++)
        if (b->smp[k].part_tokens < (int64_t)tr->cfg.seq_len + 1) return k;
    return -1;
}

/* The validation blend of --data-path, Megatron-LM's way: where a dataset's validation part
   gets no sequence (a small dataset under the default --split 969,30,1) or fewer tokens than
   one sample, no validation set is built; the run trains and skips every evaluation (each
   --eval-interval and the final one), and tr->valid_note says why in one line, naming that
   dataset. A --split that gives validation no weight skips it too, with a note only when
   --eval-interval or --eval-iters asked for it.                                            */
static int mg__setup_valid(mg_trainer *tr, const mg__data_group *g, double weight,
                           int64_t n_samples, char *err, size_t errlen) {
    const mg_train_args *a = &tr->args;
    char hold_out[160] = "";
    int k;
    if (weight <= 0) {
        if (mg_train_flag_given(a, "--eval-interval") || mg_train_flag_given(a, "--eval-iters"))
            snprintf(tr->valid_note, sizeof tr->valid_note, "validation skipped: --split %s "
                     "gives the validation part no weight, so --eval-interval and --eval-iters "
                     "do nothing (give it a share, e.g. --split 98,2,0)", a->split);
        return 0;
    }
    for (k = 0; k < g->n; k++) {   /* every dataset of the blend gives validation a sequence */
        const mg_dataset *ds = g->ds[k];
        int64_t S = ds->n_sequences;
        if (mg_split_count(a->split, MG_SPLIT_VALID, S) > 0) continue;
        if (S >= 2)   /* weights S-1, 1, 0: the last sequence alone is the validation part */
            snprintf(hold_out, sizeof hold_out, ", or a larger validation share (--split "
                     "%lld,1,0 holds out 1 of these %lld)", (long long)(S - 1), (long long)S);
        snprintf(tr->valid_note, sizeof tr->valid_note, "validation skipped: --split %s gives "
                 "the validation part none of the %lld %s of %s; a validation set needs %lld or "
                 "more %s with this split%s", a->split, (long long)S, mg__units(ds, S),
                 g->prefix[k], (long long)mg_split_min_sequences(a->split, MG_SPLIT_VALID),
                 mg__units(ds, 2), S >= 2 ? hold_out : " (one cannot be split)");
        mg__one_line(tr->valid_note);
        return 0;
    }
    if (mg__part_blend(tr, &tr->valid_data, g, a->split, MG_SPLIT_VALID, n_samples, err,
                       errlen))
        return -1;
    k = mg__short_part(tr, &tr->valid_data);
    if (k >= 0) {
        const mg_dataset *ds = g->ds[k];
        int64_t S = ds->n_sequences;
        snprintf(tr->valid_note, sizeof tr->valid_note, "validation skipped: the validation "
                 "part of --split %s (%lld of the %lld %s of %s) holds %lld tokens, fewer than "
                 "one sample needs (--seq-length + 1 = %d); more data or a larger validation "
                 "share give one", a->split,
                 (long long)mg_split_count(a->split, MG_SPLIT_VALID, S), (long long)S,
                 mg__units(ds, S), g->prefix[k], (long long)tr->valid_data.smp[k].part_tokens,
                 tr->cfg.seq_len + 1);
        mg__one_line(tr->valid_note);
        mg_blend_free(&tr->valid_data);
        return 0;
    }
    tr->has_valid = 1;
    return 0;
}

/* --split's test part, which Megatron-LM evaluates once after training ("validation loss at
   iteration N on test set"): set up when every dataset of the blend gives it a sequence and
   each holds a sample; else there is no test evaluation, as Megatron builds no test dataset
   for an empty part.                                                                        */
static int mg__setup_split_test(mg_trainer *tr, const mg__data_group *g, double weight,
                                int64_t n_samples, char *err, size_t errlen) {
    const mg_train_args *a = &tr->args;
    int k;
    if (weight <= 0) return 0;
    for (k = 0; k < g->n; k++)
        if (mg_split_count(a->split, MG_SPLIT_TEST, g->ds[k]->n_sequences) <= 0) return 0;
    if (mg__part_blend(tr, &tr->test_data, g, a->split, MG_SPLIT_TEST, n_samples, err, errlen))
        return -1;
    if (mg__short_part(tr, &tr->test_data) >= 0) {
        mg_blend_free(&tr->test_data);
        return 0;
    }
    tr->has_test = 1;
    return 0;
}

/* Opens the data and the blends of the training, validation and test parts: --data-path
   (one blend, each dataset split by --split) or --train/valid/test-data-path (one blend
   per part, each dataset used whole: Megatron's blend_per_split).                         */
static int mg__setup_data(mg_trainer *tr, char *err, size_t errlen) {
    const mg_train_args *a = &tr->args;
    char why[MG_ERRLEN];
    int64_t counts[3];
    double weights[3];
    mg__data_group *g = NULL;
    int n_words = a->data_path.n + a->train_data_path.n + a->valid_data_path.n +
                  a->test_data_path.n + a->mock_data, rc = -1, k;
    if (!n_words) return 0;
    g = (mg__data_group *)MG_MALLOC(3 * sizeof *g);
    tr->datasets = (mg_dataset *)MG_MALLOC(sizeof(mg_dataset) * (size_t)n_words);
    MG_ASSERT(g && tr->datasets, "out of host memory");
    memset(g, 0, 3 * sizeof *g);
    mg_data_num_samples(a->train_iters, a->global_batch_size, a->eval_interval, a->eval_iters,
                        counts);
    if (mg__sample_based(a)) counts[0] = a->train_samples;   /* Megatron asks for them all */
    if (a->data_path.n || a->mock_data) {
        if (mg_split_parse(a->split, weights, why, sizeof why)) {   /* its message names --split */
            mg__err(err, errlen, "%s", why);
            goto done;
        }
        if (mg__open_data_group(tr, &g[0], a->mock_data ? "--mock-data" : a->data_args_path ?
                                "--data-args-path" : "--data-path",
                                a->mock_data ? NULL : &a->data_path, err, errlen))
            goto done;
        if (a->train_iters > 0) {
            if (weights[0] <= 0) {
                mg__err(err, errlen, "--split %s gives the training part no weight (the first "
                        "number is the training share, e.g. --split 98,2,0)", a->split);
                goto done;
            }
            if (mg__part_blend(tr, &tr->train_data, &g[0], a->split, MG_SPLIT_TRAIN, counts[0],
                               err, errlen))
                goto done;
            if ((k = mg__short_part(tr, &tr->train_data)) >= 0) {
                int64_t held = tr->train_data.smp[k].part_tokens;
                mg__err(err, errlen, "%s %s: the training part holds %lld tokens, "
                        "fewer than one sample needs (--seq-length + 1 = %d); --seq-length "
                        "%lld or less, or more data, fits", g[0].flag, g[0].prefix[k],
                        (long long)held, tr->cfg.seq_len + 1, (long long)held - 1);
                goto done;
            }
        }
        if (a->eval_iters > 0 &&
            (mg__setup_valid(tr, &g[0], weights[1], counts[1], err, errlen) ||
             (a->train_iters > 0 &&
              mg__setup_split_test(tr, &g[0], weights[2], counts[2], err, errlen))))
            goto done;
    } else {   /* Megatron's blend_per_split: each part's datasets used whole */
        static const char *const typed[3] = {"--train-data-path", "--valid-data-path",
                                             "--test-data-path"};
        static const char *const from_file[3] = {"--per-split-data-args-path \"train\"",
                                                 "--per-split-data-args-path \"valid\"",
                                                 "--per-split-data-args-path \"test\""};
        const char *const *flags = a->per_split_data_args_path ? from_file : typed;
        static const char *const names[3] = {"training", "validation", "test"};
        static const char *const whole[3] = {"1,0,0", "0,1,0", "0,0,1"};
        const mg_str_list *words[3] = {&a->train_data_path, &a->valid_data_path,
                                       &a->test_data_path};
        mg_blend *blends[3] = {&tr->train_data, &tr->valid_data, &tr->test_data};
        int p;
        for (p = 0; p < 3; p++) {
            int wanted = p ? a->eval_iters > 0 : a->train_iters > 0;
            if (!words[p]->n || (p && !wanted)) continue;   /* no evaluation: not opened */
            tr->has_valid |= p == 1;
            tr->has_test |= p == 2;
            if (mg__open_data_group(tr, &g[p], flags[p], words[p], err, errlen)) goto done;
            if (!wanted) continue;
            if (mg__part_blend(tr, blends[p], &g[p], whole[p], (mg_split_part)p, counts[p],
                               err, errlen))
                goto done;
            if ((k = mg__short_part(tr, blends[p])) >= 0) {   /* data given for this part */
                int64_t held = blends[p]->smp[k].part_tokens;
                mg__err(err, errlen, "%s %s: the %s data holds %lld tokens, fewer than one "
                        "sample needs (--seq-length + 1 = %d); %s", flags[p], g[p].prefix[k],
                        names[p], (long long)held, tr->cfg.seq_len + 1, p ? "use --eval-iters "
                        "0 or give it more" : "a shorter --seq-length or more data fits");
                goto done;
            }
        }
    }
    rc = 0;
done:
    MG_FREE(g);
    return rc;
}

/* The job's shape against the parallel flags: world size = t·p·d, d data-parallel replicas
   that each run global batch / (micro-batch · d) microbatches. Pure: nothing is communicated,
   so every rank reaches the same verdict before the first collective.                      */
static int mg__check_world(const mg_train_args *a, char *err, size_t errlen) {
    int world = a->comm ? a->comm->world_size : 1;
    int64_t t = a->tensor_model_parallel_size, p = a->pipeline_model_parallel_size, d;
    int64_t B = a->micro_batch_size, c = a->context_parallel_size;
    char split[160];
    if (c > 1)
        snprintf(split, sizeof split, "--tensor-model-parallel-size %lld x "
                 "--context-parallel-size %lld x --pipeline-model-parallel-size %lld = %lld",
                 (long long)t, (long long)c, (long long)p, (long long)(t * c * p));
    else if (t > 1 && p > 1)
        snprintf(split, sizeof split, "--tensor-model-parallel-size %lld x "
                 "--pipeline-model-parallel-size %lld = %lld", (long long)t, (long long)p,
                 (long long)(t * p));
    else
        snprintf(split, sizeof split, "--%s-model-parallel-size %lld", p > 1 ? "pipeline" :
                 "tensor", (long long)(t * p));
    if (world % (t * c * p))
        return mg__err(err, errlen, "%s does not divide the %d launched ranks (mpirun -np N "
                       "with N a multiple of %lld)", split, world, (long long)(t * c * p));
    d = world / (t * c * p);
    if (a->global_batch_size % (B * d))
        return mg__err(err, errlen, "--global-batch-size %lld is not a multiple of "
                       "--micro-batch-size %lld x %lld data-parallel replicas (%d ranks / "
                       "%s); use a multiple of %lld", (long long)a->global_batch_size,
                       (long long)B, (long long)d, world, split, (long long)(B * d));
    if (a->use_distributed_optimizer && d * c == 1 && world > 1 && a->comm &&
        a->comm->world_rank == 0)
        fprintf(stderr, "gpt_train: note: --use-distributed-optimizer with one data-parallel "
                "replica shards nothing\n");
    return 0;
}

/* ---- Pipeline parallelism: configuration ---------------------------------------------------- */

/* Activation slots a chunk needs: the most microbatches of one chunk whose forward has run and
   whose last backward action (B, or W when the backward is split) has not, on this rank. */
static int mg__pipe_slots(const mg_schedule *s, int rank) {
    const mg_pipe_action *a = mg_schedule_rank(s, rank);
    int n = mg_schedule_count(s, rank), held[MG_MAX_CHUNKS], i, most = 1;
    memset(held, 0, sizeof held);
    for (i = 0; i < n; i++) {
        int c = a[i].stage / s->p;
        if (c >= MG_MAX_CHUNKS) continue;
        if (a[i].op == MG_PIPE_F && ++held[c] > most) most = held[c];
        if (a[i].op == MG_PIPE_B || a[i].op == MG_PIPE_W) held[c]--;
    }
    return most;
}
static int mg__pipe_split(const mg_schedule *s) {
    int i;
    for (i = 0; i < s->start[s->p]; i++)
        if (s->actions[i].op == MG_PIPE_I) return 1;
    return 0;
}

/* Bytes of message buffers the executor will take from the arena for this rank's part of s:
   its pool size comes from a dry run of mg_pipe_exec_init (nothing communicates) on a
   stand-in for the pipeline group, with one-element messages.                               */
static void mg__pipe_nothing(void *user, const mg_pipe_io *io) { (void)user; (void)io; }
static size_t mg__pipe_arena_bytes(const mg_schedule *s, int rank, size_t msg_bytes) {
    mg_comm stand_in;
    mg_pipe_exec ex;
    mg_pipe_exec_desc d = mg_pipe_exec_desc_default();
    size_t n;
    memset(&stand_in, 0, sizeof stand_in);
    stand_in.pipeline.size = s->p;
    stand_in.pipeline.rank = rank;
    stand_in.tensor.size = 1;
    d.schedule = s;
    d.msg_count = 1;
    d.msg_dtype = MG_F32;
    d.cb.forward = d.cb.backward = d.cb.backward_input = d.cb.backward_weight = mg__pipe_nothing;
    if (mg_pipe_exec_init(&ex, &stand_in, &d, NULL, 0)) return 0;
    n = (size_t)ex.n_buffers;
    mg_pipe_exec_free(&ex);
    return n * ((msg_bytes + 255) / 256 * 256);
}

/* The pipeline flags, checked against the model and the batch (no communication; the world
   size against t·p is mg__check_world's): v = layers/(p·K),
   p·v divides the layers, the schedule (built in or from a file) valid for p, v and m = the
   microbatches per iteration. Builds tr->pipe_sched (and tr->pipe_eval_sched to evaluate). */
static int mg__pipe_configure(mg_trainer *tr, char *err, size_t errlen) {
    const mg_train_args *a = &tr->args;
    int L = tr->cfg.n_layer, p, v = 1, kind;
    int K_given = mg_train_flag_given(a, "--num-layers-per-virtual-pipeline-stage");
    int V_given = mg_train_flag_given(a, "--num-virtual-stages-per-pipeline-rank");
    int file = a->pipeline_schedule_file != NULL, m = tr->n_micro;
    char why[MG_ERRLEN];
    mg_schedule_desc sd;
    p = tr->pp = (int)a->pipeline_model_parallel_size;
    tr->vp = 1;
    if (p == 1) {
        const char *needs_p = K_given ? "--num-layers-per-virtual-pipeline-stage" :
            V_given ? "--num-virtual-stages-per-pipeline-rank" :
            mg_train_flag_given(a, "--microbatch-group-size-per-virtual-pipeline-stage") ?
            "--microbatch-group-size-per-virtual-pipeline-stage" :
            mg_train_flag_given(a, "--pipeline-schedule") ? "--pipeline-schedule" :
            file ? "--pipeline-schedule-file" : a->pipeline_trace ? "--pipeline-trace" : NULL;
        if (needs_p)
            return mg__err(err, errlen, "%s needs --pipeline-model-parallel-size > 1 (there is "
                           "no pipeline with one stage)", needs_p);
        return 0;
    }
    if (L % p)
        return mg__err(err, errlen, "--num-layers %d is not divisible by "
                       "--pipeline-model-parallel-size %d (each stage holds layers/p layers: "
                       "use a multiple of %d, e.g. --num-layers %d)", L, p, p, (L / p + 1) * p);
    if (K_given) {
        int64_t K = a->num_layers_per_virtual_pipeline_stage;
        if ((L / p) % K)
            return mg__err(err, errlen, "--num-layers-per-virtual-pipeline-stage %lld does not "
                           "divide the %d layers of a pipeline rank (--num-layers %d / "
                           "--pipeline-model-parallel-size %d)", (long long)K, L / p, L, p);
        v = (int)((L / p) / K);
        if (v > MG_MAX_CHUNKS)
            return mg__err(err, errlen, "--num-layers-per-virtual-pipeline-stage %lld gives %d "
                           "model chunks per rank, more than %d", (long long)K, v, MG_MAX_CHUNKS);
    }
    /* Megatron-LM's validate_args: at most one of the two ways to give v */
    if (K_given && V_given)
        return mg__err(err, errlen, "--num-layers-per-virtual-pipeline-stage and "
                       "--num-virtual-stages-per-pipeline-rank exclude each other (both give "
                       "the model chunks per rank: give one)");
    if (V_given) {
        int64_t V = a->num_virtual_stages_per_pipeline_rank;
        if (V > MG_MAX_CHUNKS)
            return mg__err(err, errlen, "--num-virtual-stages-per-pipeline-rank %lld: more than "
                           "%d model chunks per rank", (long long)V, MG_MAX_CHUNKS);
        if ((L / p) % V)
            return mg__err(err, errlen, "--num-virtual-stages-per-pipeline-rank %lld does not "
                           "divide the %d layers of a pipeline rank (--num-layers %d / "
                           "--pipeline-model-parallel-size %d)", (long long)V, L / p, L, p);
        v = (int)V;
    }
    if (file && mg_train_flag_given(a, "--pipeline-schedule"))
        return mg__err(err, errlen, "--pipeline-schedule and --pipeline-schedule-file exclude "
                       "each other (give one)");
    if (file && mg_train_flag_given(a, "--microbatch-group-size-per-virtual-pipeline-stage"))
        return mg__err(err, errlen, "--microbatch-group-size-per-virtual-pipeline-stage applies "
                       "to the built-in interleaved schedule, not to --pipeline-schedule-file");
    if (file) {
        if (mg_schedule_load(&tr->pipe_sched, a->pipeline_schedule_file, p,
                             K_given || V_given ? v : 0, m, why,
                             sizeof why))
            return mg__err(err, errlen, "--pipeline-schedule-file %s: %s",
                           a->pipeline_schedule_file, why);
        v = tr->pipe_sched.v;
        if (L % (p * v)) {
            mg_schedule_free(&tr->pipe_sched);
            return mg__err(err, errlen, "--pipeline-schedule-file %s has %d model chunks per "
                           "rank: --num-layers %d is not divisible by p·v = %d",
                           a->pipeline_schedule_file, v, L, p * v);
        }
    } else {
        /* Megatron-LM's validate_args: one virtual stage per rank is no virtual pipeline
           (virtual_pipeline_model_parallel_size = None), so 1F1B runs, not the interleaved
           schedule with its rule on the microbatches */
        kind = mg_train_flag_given(a, "--pipeline-schedule") ? a->pipeline_schedule
               : v > 1 ? MG_SCHED_INTERLEAVED : MG_SCHED_1F1B;
        sd = mg_schedule_desc_default(kind, p, v, m);
        sd.microbatch_group = (int)a->microbatch_group_size_per_vp_stage;   /* 0: p */
        if (mg_train_flag_given(a, "--microbatch-group-size-per-virtual-pipeline-stage") &&
            kind != MG_SCHED_INTERLEAVED)
            return mg__err(err, errlen, "--microbatch-group-size-per-virtual-pipeline-stage "
                           "applies to the interleaved schedule only (not %s)",
                           mg_schedule_kind_name(kind));
        if (mg_schedule_build(&tr->pipe_sched, &sd, why, sizeof why))
            return mg__err(err, errlen, "--pipeline-schedule %s with p = %d, v = %d and m = %d "
                           "microbatches (--global-batch-size / --micro-batch-size): %s",
                           mg_schedule_kind_name(kind), p, v, m, why);
    }
    tr->vp = v;
    if (a->eval_iters > 0) {         /* evaluation: the forwards only, chunk by chunk */
        sd = mg_schedule_desc_default(MG_SCHED_GPIPE, p, v, m);
        sd.forward_only = 1;
        if (mg_schedule_build(&tr->pipe_eval_sched, &sd, why, sizeof why)) {
            mg_schedule_free(&tr->pipe_sched);
            return mg__err(err, errlen, "evaluation schedule: %s", why);
        }
    }
    return 0;
}

/* Every rank checks the same configuration; the ranks agree on the outcome (one all-reduce
   and, on failure, one broadcast over the world, with host buffers), so that all stop with
   the lowest failing rank's message, or all go on.                                         */
static int mg__agree(mg_comm *comm, int failed, char *err, size_t errlen) {
    float mine, first;
    float msg[MG_ERRLEN / 4];
    int root;
    if (!comm || comm->world_size == 1) return failed ? -1 : 0;
    comm->ctx = NULL;                /* host buffers, whatever an earlier trainer left       */
    mine = failed ? (float)(comm->world_size - comm->world_rank) : 0.0f;
    mg_all_reduce(comm, &comm->world, &mine, &first, 1, MG_F32, MG_MAX);
    if (first == 0) return 0;
    root = comm->world_size - (int)first;
    memset(msg, 0, sizeof msg);
    if (root == comm->world_rank) snprintf((char *)msg, sizeof msg, "%s", err ? err : "");
    mg_broadcast(comm, &comm->world, msg, msg, MG_ERRLEN / 4, MG_F32, root);
    ((char *)msg)[sizeof msg - 1] = 0;
    if (!failed) mg__err(err, errlen, "rank %d: %s", root, (const char *)msg);
    return -1;
}

/* ---- Pipeline parallelism: the model's callbacks for mg_pipeline's executor -------------- */

/* The activation slot of (chunk, microbatch): taken by its forward, released after its last
   backward action (B, or W) or, when evaluating, right after the forward.                 */
static int mg__act_slot(mg_trainer *tr, int chunk, int mb, int take) {
    int n = tr->model.layout.n_slots, s, want = take ? -1 : mb;
    for (s = 0; s < n; s++)
        if (tr->slot_mb[chunk * n + s] == want) {
            if (take) tr->slot_mb[chunk * n + s] = mb;
            return s;
        }
    mg_fatal(__FILE__, __LINE__, "pipeline: chunk %d %s microbatch %d (%d slots)", chunk,
             take ? "has no free activation slot for" : "holds no", mb, n);
    return -1;
}
static void mg__act_slot_release(mg_trainer *tr, int chunk, int slot) {
    tr->slot_mb[chunk * tr->model.layout.n_slots + slot] = -1;
}

/* F: the first virtual stage embeds its microbatch's tokens, the last one keeps its targets;
   any other stage starts from the activation received (io->input), and every stage but the
   last hands its output to the executor to send (io->output).                             */
static void mg__pipe_forward(void *user, const mg_pipe_io *io) {
    mg_trainer *tr = (mg_trainer *)user;
    mg_gpt *m = &tr->model;
    const mg_gpt_chunk *c = &m->layout.chunks[io->chunk];
    int slot = mg__act_slot(tr, io->chunk, io->mb, 1);
    int64_t per_mb = (int64_t)m->layout.micro_batch * (m->cfg.seq_len + 1);
    if (c->has_embedding || c->has_head)
        mg_gpt_set_batch(m, io->chunk, slot, tr->pipe_samples + io->mb * per_mb);
    if (io->input)
        mg_copy(m->ctx, mg_gpt_chunk_input(m, io->chunk, slot)->data, io->input,
                mg_nbytes(mg_gpt_chunk_input(m, io->chunk, slot)));
    mg__compute_timer(tr, 0, 1);
    mg_gpt_forward(m, io->chunk, slot, io->mb);
    mg__compute_timer(tr, 0, 0);
    if (io->output)
        mg_copy(m->ctx, io->output, mg_gpt_chunk_output(m, io->chunk, slot)->data,
                mg_nbytes(mg_gpt_chunk_output(m, io->chunk, slot)));
    if (tr->pipe_forward_only) mg__act_slot_release(tr, io->chunk, slot);
}
/* Whether this B (or W) is the chunk's last of the iteration: the schedule runs one per
   microbatch in whatever order, so the n_micro-th is the last. The model's gradient hook
   (data-parallel overlap) fires during it: each chunk's parameters are final after it.     */
static int mg__pipe_last_backward(mg_trainer *tr, int chunk) {
    return --tr->pipe_backwards_left[chunk] == 0;
}
/* B and I: the gradient of the chunk's output arrives in io->grad_output (the last stage
   seeds it from the loss); the gradient of its input leaves through io->grad_input.       */
static void mg__pipe_backward_io(mg_trainer *tr, const mg_pipe_io *io, int split) {
    mg_gpt *m = &tr->model;
    int slot = mg__act_slot(tr, io->chunk, io->mb, 0);
    if (io->grad_output)
        mg_copy(m->ctx, m->tf.dresid.data, io->grad_output, mg_nbytes(&m->tf.dresid));
    mg__compute_timer(tr, 1, 1);
    if (split) mg_gpt_backward_input(m, io->chunk, slot, tr->pipe_dloss);
    else {
        m->final_backward = mg__pipe_last_backward(tr, io->chunk);
        mg_gpt_backward(m, io->chunk, slot, tr->pipe_dloss);
        m->final_backward = 0;
    }
    mg__compute_timer(tr, 1, 0);
    if (io->grad_input) mg_copy(m->ctx, io->grad_input, m->tf.dresid.data, mg_nbytes(&m->tf.dresid));
    if (!split) mg__act_slot_release(tr, io->chunk, slot);
}
static void mg__pipe_backward(void *user, const mg_pipe_io *io) {
    mg__pipe_backward_io((mg_trainer *)user, io, 0);
}
static void mg__pipe_backward_input(void *user, const mg_pipe_io *io) {
    mg__pipe_backward_io((mg_trainer *)user, io, 1);
}
static void mg__pipe_backward_weight(void *user, const mg_pipe_io *io) {
    mg_trainer *tr = (mg_trainer *)user;
    int slot = mg__act_slot(tr, io->chunk, io->mb, 0);
    tr->model.final_backward = mg__pipe_last_backward(tr, io->chunk);
    mg__compute_timer(tr, 1, 1);
    mg_gpt_backward_weight(&tr->model, io->chunk, slot);
    mg__compute_timer(tr, 1, 0);
    tr->model.final_backward = 0;
    mg__act_slot_release(tr, io->chunk, slot);
}

/* Executor over schedule s running this trainer's model: messages (the model's activation
   dtype: fp32, or bf16/fp16 with mixed precision) of the residual
   stream's n rows on this rank, [n, C] (n = B·T, or B·T/t with sequence parallelism, where
   each tensor rank already sends its own slice). With tensor parallelism and no sequence
   parallelism the [B·T, C] message is the same on the t ranks of a stage, so Megatron's
   scatter/gather is on: each sends 1/t of it and the receivers all-gather the slices.      */
static int mg__pipe_exec_make(mg_trainer *tr, mg_pipe_exec *ex, const mg_schedule *s, int trace,
                              char *err, size_t errlen) {
    mg_pipe_exec_desc d = mg_pipe_exec_desc_default();
    d.schedule = s;
    d.ctx = &tr->ctx;
    d.msg_count = mg_numel(&tr->model.tf.dresid);
    d.scatter_gather = tr->model.layout.tp_size > 1 && !tr->model.tf.tp.sequence_parallel;
    d.msg_dtype = tr->model.tf.dresid.dtype;     /* 16-bit activations travel as 16 bits */
    d.cb.forward = mg__pipe_forward;
    d.cb.backward = mg__pipe_backward;
    d.cb.backward_input = mg__pipe_backward_input;
    d.cb.backward_weight = mg__pipe_backward_weight;
    d.cb.user = tr;
    d.trace = trace;
    /* the training executor times its send/recv groups for --timing-log-level 2: on the
       GPU with events around each group's NCCL calls, on the CPU its completion            */
    if (ex == &tr->pipe_exec && tr->args.timing_log_level >= 2) {
        if (tr->ctx.device == MG_DEVICE_CUDA) {
            d.comm_timer = mg__pipe_comm_timer;
            d.comm_timer_user = tr;
        } else {
            d.time_comm = 1;
        }
    }
    return mg_pipe_exec_init(ex, tr->comm, &d, err, errlen);
}

/* Runs the executor over the microbatches in samples; returns the summed token loss, the same
   on every rank (the last stage's, broadcast over the pipeline group).                     */
static double mg__pipe_run(mg_trainer *tr, mg_pipe_exec *ex, const int32_t *samples, float dloss,
                           int forward_only) {
    mg_gpt *m = &tr->model;
    int n = m->layout.n_chunks * m->layout.n_slots, i, p = tr->pp;
    double sum = 0;
    for (i = 0; i < n; i++) tr->slot_mb[i] = -1;
    for (i = 0; i < m->layout.n_chunks; i++) tr->pipe_backwards_left[i] = tr->n_micro;
    tr->pipe_samples = samples;
    tr->pipe_dloss = dloss;
    tr->pipe_forward_only = forward_only;
    m->head_dloss = forward_only ? 0.0f : dloss;   /* the head's forward runs its backward */
    mg_gpt_sync_weights(m);        /* 16-bit: the working copy of the master weights */
    mg_pipe_exec_run(ex);
    m->head_dloss = 0.0f;
    if (m->layout.chunks[m->layout.n_chunks - 1].has_head) sum = mg_gpt_loss_sum(m, 0, tr->n_micro);
    if (m->loss_at) {   /* the last stage's device sum to every stage, on the device */
        mg_broadcast(tr->comm, &tr->comm->pipeline, m->loss_at, m->loss_at, 2, MG_F32, p - 1);
        return 0;
    }
    return mg__group_bcast_f64(m, &tr->comm->pipeline, sum, p - 1);
}

MGDEF int mg_trainer_write_pipeline_trace(mg_trainer *tr, const char *path, char *err,
                                          size_t errlen) {
    int rc = 0;
    if (!tr->has_pipe_exec || !tr->pipe_exec.desc.trace)
        return mg__err(err, errlen, "no pipeline trace was recorded (--pipeline-trace with "
                       "--pipeline-model-parallel-size > 1)");
    if (tr->model.layout.tp_rank == 0)
        rc = mg_pipe_exec_write_trace(&tr->pipe_exec, path, err, errlen);
    if (mg__tp_agree(&tr->model, rc) && !rc)
        return mg__err(err, errlen, "tensor rank 0 of this stage could not write the pipeline "
                       "trace %s", path);
    return rc ? -1 : 0;
}

static void mg__exit_signal_install(void);
static void mg__trainer_push(mg_trainer *tr);   /* section 5: iteration */
MGDEF int mg_trainer_setup(mg_trainer *tr, const mg_train_args *args, char *err, size_t errlen) {
    mg_train_args *a = &tr->args;
    mg_weights_file wf;
    mg__ckpt_state st;
    int64_t src[6], arch[6], load_iter = 0;
    const int64_t *srcp = NULL;
    const char *src_name = NULL, *weights_from = args->init_from;
    char path[MG_PATH_MAX], srcdesc[MG_PATH_MAX + 32], why[MG_ERRLEN];
    char load_dir[MG_PATH_MAX];   /* --load's DIR/release or DIR/iter_NNNNNNN */
    int has_ckpt = 0, has_weights = 0, agreed = 0, rc, tp, tp_rank = 0, pp_rank = 0, n_slots = 1;
    int split = 0;
    mg_gpt_layout layout;
    mg_ctx_desc cd;
    size_t bytes;
    memset(tr, 0, sizeof *tr);
    memset(&wf, 0, sizeof wf);
    tr->args = *args;
    tr->comm = args->comm;
    tr->loaded_iteration = tr->last_saved = tr->last_validated = -1;
    tr->start_ms = mg__now_ms();
    tr->writer = !a->comm || a->comm->world_rank == 0;
    /* every check first (each failure: goto fail, where the ranks agree on it), then build   */
    if (!mg_train_flag_given(a, "--global-batch-size")) {   /* Megatron-LM: B x d */
        int64_t mp = a->tensor_model_parallel_size * a->context_parallel_size *
                     a->pipeline_model_parallel_size, world = a->comm ? a->comm->world_size : 1;
        a->global_batch_size = a->micro_batch_size * (world % mp ? 1 : world / mp);
    }
    /* Megatron-LM's pretrain_gpt.py defaults --tokenizer-type to GPT2BPETokenizer: a launch
       script that gives GPT-2's vocab.json and merges.txt alone means that tokenizer        */
    if (!a->tokenizer_type && a->vocab_file && a->merge_file && !a->tokenizer_model)
        a->tokenizer_type = "GPT2BPETokenizer";
    if (mg__data_args_files(tr, err, errlen) || mg__setup_samples(a, err, errlen) ||
        mg__check_run(a, err, errlen))
        goto fail;
    /* architecture: the checkpoint to resume, else the weights to start from, else flags */
    if (a->load) {
        rc = mg__latest_iteration(a->load, &load_iter, why, sizeof why);
        if (rc < 0) { mg__err(err, errlen, "--load %s: %s", a->load, why); goto fail; }
        tr->load_found = rc;
        if (rc == 0 && mg__is_checkpoint_dir(a->load, path, sizeof path)) {
            mg__err(err, errlen, "--load %s: holds a checkpoint's files (state.json, "
                    "model.safetensors) but no latest_checkpointed_iteration.txt: --load takes "
                    "the directory that holds the iter_NNNNNNN directories (--load %s), as in "
                    "Megatron-LM", a->load, path);
            goto fail;
        }
        if (rc == 0 && mg__compat_given(a, "--exit-on-missing-checkpoint")) {
            mg__err(err, errlen, "--load %s: no checkpoint there (no latest_checkpointed_"
                    "iteration.txt), and --exit-on-missing-checkpoint stops the run rather than "
                    "start from %s", a->load, a->init_from ? "--init-from" : "random weights");
            goto fail;
        }
        if (rc == 2) {   /* Megatron's 'release': its weights, from iteration 0 (as --init-from) */
            mg__path(load_dir, sizeof load_dir, "%s/release", a->load);   /* fits: checked */
            weights_from = load_dir;
        }
        if (rc == 1) {
            mg__path(load_dir, sizeof load_dir, "%s/iter_%07lld", a->load,
                     (long long)load_iter);                            /* fits: checked */
            mg__path(path, sizeof path, "%s/state.json", load_dir);
            if (access(path, F_OK) != 0) {
                const char *theirs = mg__megatron_ckpt_file(load_dir);
                if (theirs)
                    mg__err(err, errlen, "--load %s: %s holds Megatron-LM's own checkpoint files "
                            "(%s), not megatron.h's (state.json, model.safetensors); megatron.h "
                            "does not read Megatron-LM's torch or torch_dist checkpoints: convert "
                            "the weights to Hugging Face safetensors and start from them with "
                            "--init-from", a->load, load_dir, theirs);
                else
                    mg__err(err, errlen, "--load %s: latest_checkpointed_iteration.txt names "
                            "iteration %lld, but %s does not exist (a checkpoint moved or cut "
                            "short: write an iteration that is there into that file)", a->load,
                            (long long)load_iter, path);
                goto fail;
            }
            if (mg__read_state(path, load_iter, &st, why, sizeof why) ||
                mg__switches_from_state(a, path, why, sizeof why)) {
                mg__err(err, errlen, "--load %s: %s", a->load, why);
                goto fail;
            }
        }
        if (rc == 1 && a->finetune) {   /* the checkpoint's weights, as --init-from reads them */
            weights_from = load_dir;
            tr->load_found = 3;
        } else if (rc == 1) {
            char opt_path[MG_PATH_MAX];
            has_ckpt = 1;
            srcp = st.arch;
            src_name = path;
            mg__path(opt_path, sizeof opt_path, "%s/optimizer.safetensors", load_dir);  /* fits */
            if (!a->no_load_optim && access(opt_path, F_OK) != 0) {   /* Megatron exits too */
                mg__err(err, errlen, "--load %s: %s holds no optimizer state (saved with "
                        "--no-save-optim): give --no-load-optim to resume its weights, "
                        "iteration and samples with a fresh optimizer, or --finetune to start "
                        "from its weights", a->load, load_dir);
                goto fail;
            }
            if (mg_train_flag_given(a, "--seed") && st.seed != a->seed) {
                mg__err(err, errlen, "--seed %lld differs from the checkpoint's %lld (the data "
                        "order would change; leave --seed out to resume)", (long long)a->seed,
                        (long long)st.seed);
                goto fail;
            }
            if (mg_train_flag_given(a, "--data-order") && st.data_order != a->data_order) {
                mg__err(err, errlen, "--data-order %s differs from the checkpoint's %s (the "
                        "samples would change; leave --data-order out to resume)",
                        a->data_order == MG_ORDER_SEQUENTIAL ? "sequential" : "shuffled",
                        st.data_order == MG_ORDER_SEQUENTIAL ? "sequential" : "shuffled");
                goto fail;
            }
            a->seed = st.seed;
            a->data_order = st.data_order;
            if (mg__sched_merge(a, &st, err, errlen)) goto fail;
        }
    }
    if (a->lr < 0 && a->train_iters > 0) {   /* --use-checkpoint-opt_param-scheduler, no
                                                schedule in --load: the flag is needed   */
        mg__err(err, errlen, "--lr is required (the peak learning rate, e.g. --lr 3e-4; "
                "--use-checkpoint-opt_param-scheduler found no schedule in --load %s)", a->load);
        goto fail;
    }
    if (a->lr < 0) a->lr = 0;                       /* no training: no learning rate needed */
    if (!has_ckpt && weights_from) {
        if (mg_weights_open(&wf, weights_from, why, sizeof why)) {
            mg__err(err, errlen, "%s %s: %s%s", weights_from == a->init_from ? "--init-from" :
                    "--load", weights_from == a->init_from ? a->init_from : a->load, why,
                    strstr(why, "cannot open") ? " (expected an llm.c checkpoint, a "
                    "model.safetensors, or a directory holding one)" : "");
            goto fail;
        }
        has_weights = 1;
        if (wf.kind == MG_WEIGHTS_HF_LLAMA && mg__switches_from_hf(a, &wf, err, errlen)) goto fail;
        /* a GPT-2 config.json names the MLP's activation: taken, a flag against it refused */
        if (wf.kind == MG_WEIGHTS_HF && wf.cfg.squared_relu) {
            a->squared_relu = 1;          /* "relu2" (the GELU flags then change nothing) */
        } else if (wf.kind == MG_WEIGHTS_HF && a->squared_relu) {
            mg__err(err, errlen, "--squared-relu differs from %s, whose MLP computes GELU "
                    "(config.json's activation_function; leave the flag out)", wf.path);
            goto fail;
        } else if (wf.kind == MG_WEIGHTS_HF && wf.cfg.gelu_erf && a->openai_gelu) {
            mg__err(err, errlen, "--openai-gelu (the tanh GELU) differs from %s, whose GELU is "
                    "the exact one (config.json's activation_function; leave the flag out)",
                    wf.path);
            goto fail;
        } else if (wf.kind == MG_WEIGHTS_HF && wf.cfg.gelu_erf) {
            a->no_bias_gelu_fusion = 1;   /* config.json's "gelu": the exact GELU */
        } else if (wf.kind == MG_WEIGHTS_HF && a->no_bias_gelu_fusion) {
            mg__err(err, errlen, "--no-bias-gelu-fusion (the exact GELU) differs from %s, whose "
                    "GELU is the tanh approximation (config.json's activation_function; leave "
                    "the flag out)", wf.path);
            goto fail;
        }
        src[0] = wf.cfg.n_layer; src[1] = wf.cfg.hidden; src[2] = wf.cfg.n_head;
        src[3] = 0; src[4] = wf.cfg.max_pos; src[5] = wf.cfg.vocab_size;
        srcp = src;
        src_name = wf.path;
    }
    snprintf(srcdesc, sizeof srcdesc, "%s", src_name ? src_name : "");
    if (a->tokenizer_type) {   /* the vocabulary is the tokenizer's */
        int64_t V;
        int null_tok = mg_tok_type_from_name(a->tokenizer_type) == MG_TOK_NULL;
        tr->tok = mg_tokenizer_from_flags(a->tokenizer_type, a->vocab_file, a->merge_file,
                                          a->tokenizer_model, a->tiktoken_pattern,
                                          mg_train_flag_given(a, "--vocab-size") ?
                                          a->vocab_size : -1, err, errlen);
        if (!tr->tok) goto fail;
        V = mg_tokenizer_vocab_size(tr->tok);   /* NullTokenizer: --vocab-size + 1 */
        if (!null_tok && mg_train_flag_given(a, "--vocab-size") && a->vocab_size != V) {
            mg__err(err, errlen, "--vocab-size %lld disagrees with --tokenizer-type %s, which has "
                    "%lld ids (leave --vocab-size out)", (long long)a->vocab_size,
                    a->tokenizer_type, (long long)V);
            goto fail;
        }
        if (srcp && srcp[5] && srcp[5] != V) {
            mg__err(err, errlen, "--tokenizer-type %s has %lld ids; %s has a vocabulary of %lld",
                    a->tokenizer_type, (long long)V, srcdesc, (long long)srcp[5]);
            goto fail;
        }
        a->vocab_size = V;
        a->given[mg__flag_index("--vocab-size")] = 1;
    } else if (a->vocab_file || a->merge_file || a->tokenizer_model || a->tiktoken_pattern) {
        mg__err(err, errlen, "%s needs --tokenizer-type (the tokenizer it belongs to; "
                "--vocab-file and --merge-file together mean GPT2BPETokenizer, as in "
                "Megatron-LM's pretrain_gpt.py)",
                a->vocab_file ? "--vocab-file" : a->merge_file ? "--merge-file" :
                a->tokenizer_model ? "--tokenizer-model" : "--tiktoken-pattern");
        goto fail;
    }
    if (mg__merge_arch(a, srcp, srcdesc, arch, err, errlen)) goto fail;
    tr->cfg.n_layer = (int)arch[0];
    tr->cfg.hidden = (int)arch[1];
    tr->cfg.n_head = (int)arch[2];
    tr->cfg.seq_len = (int)arch[3];
    tr->cfg.max_pos = (int)arch[4];
    tr->cfg.vocab_size = (int)arch[5];
    tr->cfg.hidden_dropout = (float)a->hidden_dropout;
    tr->cfg.attention_dropout = (float)a->attention_dropout;
    tr->cfg.dropout_seed = (uint64_t)a->seed;
    mg__llama_config(a, &tr->cfg);
    /* Megatron-LM's --reset-position-ids restarts the position ids at each document; its
       models read them only for learned absolute positions (the rotary embedding is built
       from the sequence length), so it changes nothing with rope or no positions          */
    if (mg__compat_given(a, "--reset-position-ids") &&
        tr->cfg.position_embedding == MG_POS_LEARNED) {
        mg__err(err, errlen, "--reset-position-ids is not supported by megatron.h with learned "
                "absolute positions: they run over the whole sequence, across document "
                "boundaries (with --position-embedding-type rope it changes nothing, as in "
                "Megatron-LM)");
        goto fail;
    }
    /* Llama 3's other rope_scaling numbers have no flag (Megatron-LM fixes them): from
       config.json, or from the checkpoint's state.json */
    if (has_weights && wf.kind == MG_WEIGHTS_HF_LLAMA && wf.cfg.use_rope_scaling) {
        tr->cfg.rope_low_freq_factor = wf.cfg.rope_low_freq_factor;
        tr->cfg.rope_high_freq_factor = wf.cfg.rope_high_freq_factor;
        tr->cfg.rope_original_max_pos = wf.cfg.rope_original_max_pos;
    } else if (has_ckpt && tr->cfg.use_rope_scaling) {
        tr->cfg.rope_low_freq_factor = (float)st.rope_low;
        tr->cfg.rope_high_freq_factor = (float)st.rope_high;
        tr->cfg.rope_original_max_pos = (int)st.rope_orig;
    }
    tp = (int)a->tensor_model_parallel_size;
    tr->cfg.padded_vocab = mg_gpt_pad_vocab(tr->cfg.vocab_size,
                                            (int)a->make_vocab_size_divisible_by, tp);
    if (mg__check_world(a, err, errlen)) goto fail;
    if (srcp && srcp[4] && !mg_train_flag_given(a, "--max-position-embeddings") &&
        tr->cfg.seq_len > tr->cfg.max_pos) {   /* the positions came from the file */
        mg__err(err, errlen, "--seq-length %d is longer than the %d positions of the model in "
                "%s (%s there; give --seq-length %d or less)", tr->cfg.seq_len,
                tr->cfg.max_pos, srcdesc, has_ckpt ? "max_position_embeddings" :
                wf.kind == MG_WEIGHTS_HF ? "config.json's n_positions" :
                wf.kind == MG_WEIGHTS_HF_LLAMA ? "config.json's max_position_embeddings" :
                wf.kind == MG_WEIGHTS_LLMC ? "the llm.c header's maxT" :
                "the file's max_position_embeddings", tr->cfg.max_pos);
        goto fail;
    }
    if (mg_gpt_config_check(&tr->cfg, tp, err, errlen)) goto fail;
    if (a->eod_mask_loss) {   /* the loss mask's end-of-document id */
        int64_t tok_eod = tr->tok ? mg_tokenizer_eod(tr->tok) : -1;
        if (tr->tok && tok_eod < 0 && a->eod_token_id < 0) {
            mg__err(err, errlen, "--eod-mask-loss: --tokenizer-type %s has no end-of-document "
                    "token (give --eod-token-id ID)", a->tokenizer_type);
            goto fail;
        }
        if (tok_eod >= 0 && a->eod_token_id >= 0 && a->eod_token_id != tok_eod) {
            mg__err(err, errlen, "--eod-token-id %lld disagrees with --tokenizer-type %s, whose "
                    "end-of-document id is %lld (leave --eod-token-id out)",
                    (long long)a->eod_token_id, a->tokenizer_type, (long long)tok_eod);
            goto fail;
        }
        tr->eod_id = a->eod_token_id >= 0 ? a->eod_token_id : tok_eod;
        if (tr->eod_id >= tr->cfg.vocab_size) {
            mg__err(err, errlen, "--eod-token-id %lld is outside the vocabulary 0 … %d",
                    (long long)tr->eod_id, tr->cfg.vocab_size - 1);
            goto fail;
        }
    }
    /* the weights to start from, read whole once (world rank 0) before any work */
    if (has_weights && tr->writer && mg__weights_verify(&tr->cfg, &wf, why, sizeof why)) {
        mg__err(err, errlen, "%s %s: %s", weights_from == a->init_from ? "--init-from" :
                "--load", weights_from == a->init_from ? a->init_from : a->load, why);
        goto fail;
    }
    /* d = world/(t·c·p) replicas, each running 1/d of the global batch's microbatches */
    tr->cp_size = (int)a->context_parallel_size;
    tr->dp_size = (a->comm ? a->comm->world_size : 1) /
                  (tp * tr->cp_size * (int)a->pipeline_model_parallel_size);
    tr->dp_rank = tr->cp_rank = 0;
    tr->n_micro = (int)(a->global_batch_size / (a->micro_batch_size * tr->dp_size));
    if (mg__pipe_configure(tr, err, errlen)) goto fail;
    if (a->comm) {   /* this rank's coordinates, as mg_comm_setup_groups will place it (pure) */
        mg_topology topo;
        if (mg_topology_init_cp(&topo, a->comm->world_size, a->comm->world_rank, tp, tr->cp_size,
                                tr->pp, tr->vp, err, errlen)) goto fail;
        tp_rank = topo.tp_rank;
        pp_rank = topo.pp_rank;
        tr->dp_rank = topo.dp_rank;
        tr->cp_rank = topo.cp_rank;
    }
    if (tr->pp > 1) {                 /* this rank's chunks, slots for what is in flight      */
        n_slots = mg__pipe_slots(&tr->pipe_sched, pp_rank);
        split = mg__pipe_split(&tr->pipe_sched);
        layout = mg_gpt_layout_pipeline(&tr->cfg, (int)a->micro_batch_size, tr->n_micro,
                                        pp_rank, tr->pp, tr->vp, n_slots, split);
    } else {
        layout = mg_gpt_layout_single(&tr->cfg, (int)a->micro_batch_size, tr->n_micro, 1);
    }
    layout.tp_size = tp;                 /* the comm comes with the groups, below */
    layout.tp_rank = tp_rank;
    layout.cp_size = tr->cp_size;
    layout.cp_rank = tr->cp_rank;
    layout.dp_size = tr->dp_size * tr->cp_size;   /* the replicas that reduce gradients */
    layout.sequence_parallel = a->sequence_parallel;
    layout.recompute_granularity = a->recompute_granularity;
    layout.recompute_method = a->recompute_method;
    layout.recompute_num_layers = a->recompute_granularity == MG_RECOMPUTE_FULL
                                      ? (int)a->recompute_num_layers : 0;   /* full only */
    layout.attention_backend = a->attention_backend == 2 || a->attention_backend == 4
                                   ? MG_ATTN_UNFUSED : MG_ATTN_FLASH;   /* unfused, local */
    layout.classifier_chunk_rows = a->classifier_chunk_rows > INT32_MAX
        ? INT32_MAX : (int)a->classifier_chunk_rows;  /* more rows than B·T mean B·T */
    layout.dtype = a->bf16 ? MG_BF16 : a->fp16 ? MG_F16 : MG_F32;
    if (layout.classifier_chunk_rows == 0)   /* automatic: the device's budget, set here so
                                                 that the arena estimate below sees it   */
        layout.classifier_chunk_rows = (int)mg_gpt_classifier_auto_rows(
            &tr->cfg, &layout, mg__resolve_device((mg_device)a->device) == MG_DEVICE_CUDA);
    /* ZeRO-1 with mixed precision: each replica keeps 1/d of the fp32 master weights */
    layout.shard_master = layout.dtype != MG_F32 && a->use_distributed_optimizer &&
                          layout.dp_size > 1;
    bytes = mg_gpt_arena_bytes(&tr->cfg, &layout);
    if (!bytes && mg__layout_check(&tr->cfg, &layout, err, errlen)) goto fail;
    if (tr->pp > 1) {                 /* the executors' message buffers                        */
        size_t msg = (size_t)a->micro_batch_size * (size_t)tr->cfg.seq_len *
                     (size_t)tr->cfg.hidden * mg_dtype_size((mg_dtype)layout.dtype);
        bytes += mg__pipe_arena_bytes(&tr->pipe_sched, pp_rank, msg);
        if (a->eval_iters > 0) bytes += mg__pipe_arena_bytes(&tr->pipe_eval_sched, pp_rank, msg);
    }
    /* AdamW moments (2 more copies of the parameters) and the ops' scratch */
    {   /* AdamW's two moments (and a sharded master), like the flat buffer (or its 1/d
           shard), and the ops' scratch */
        int64_t n_elems;
        int n_params = mg__build_params(&tr->cfg, &layout, NULL, &n_elems);
        if (a->use_distributed_optimizer) n_elems /= layout.dp_size;
        bytes += (size_t)(layout.shard_master ? 3 : 2) *
                     (((size_t)n_elems * sizeof(float) + 255) / 256 * 256) + ((size_t)8 << 20) +
                 (size_t)64 * tr->cfg.hidden * sizeof(float) +
                 mg_dp_arena_bytes(a->comm ? a->comm->world_size : 1) +
                 mg_adamw_arena_bytes(n_params, a->comm ? a->comm->world_size : 1);
        if (tp > 1 || tr->pp > 1)  /* the largest tensor gathered for a checkpoint or export,
                                      or sent to the first stage for an export            */
            bytes += (size_t)mg__max_global_elems(&tr->cfg) * sizeof(float) + 256;
        if (tr->cfg.attention_dropout > 0 && layout.attention_backend == MG_ATTN_UNFUSED)
            /* the unfused attention's dropped probabilities (op scratch) */
            bytes += (size_t)a->micro_batch_size * (size_t)(tr->cfg.n_head / tp) *
                     (size_t)tr->cfg.seq_len * (size_t)tr->cfg.seq_len * sizeof(float) + 256;
        if (layout.attention_backend == MG_ATTN_UNFUSED && layout.dtype != MG_F32) {
            /* the unfused grouped-query backward's fp32 dK, dV sums and their 16-bit copy,
               [T, B, groups/t, 2·head_dim] (mg_attention_backward_gqa; more than one query
               head per group only)                                                        */
            mg_layer_config k = mg_gpt_layer_config(&tr->cfg, (int)a->micro_batch_size,
                                                    (mg_dtype)layout.dtype);
            if (k.n_head > k.n_group)
                bytes += (size_t)a->micro_batch_size * (size_t)tr->cfg.seq_len *
                             (size_t)(k.n_group / tp) * 2 * (size_t)k.head_dim *
                             (sizeof(float) + mg_dtype_size((mg_dtype)layout.dtype)) + 512;
        }
        if (layout.attention_backend == MG_ATTN_FLASH &&
            (a->device == MG_DEVICE_CPU || !mg_cuda_available())) {
            /* the CPU's single-pass tiled-attention backward: per thread, a fp32 dQ accumulator
               of one (b, group) and the group's Qᵀ, 2 × [query heads per group, T, head_dim]
               (without the room it takes the two-pass schedule, same result)                */
            mg_layer_config k = mg_gpt_layer_config(&tr->cfg, (int)a->micro_batch_size,
                                                    (mg_dtype)layout.dtype);
            int threads = mg__ctx_threads(tr->comm ? mg_comm_default_threads(tr->comm) : 0);
            bytes += (size_t)threads * 2 * (size_t)(k.n_head / k.n_group) * (size_t)tr->cfg.seq_len *
                         (size_t)k.head_dim * sizeof(float) + 256;
        }
        if (layout.dtype != MG_F32 && (a->device == MG_DEVICE_CPU || !mg_cuda_available())) {
            /* the CPU widens a 16-bit GEMM's A, B (and C) to fp32 scratch: 3 × the largest */
            int64_t N = a->micro_batch_size * tr->cfg.seq_len, C = tr->cfg.hidden, big;
            big = (int64_t)tr->cfg.padded_vocab / tp * C;
            if (N * 4 * C / tp > big) big = N * 4 * C / tp;
            if (N * tr->cfg.padded_vocab / tp > big) big = N * tr->cfg.padded_vocab / tp;
            if (layout.attention_backend == MG_ATTN_UNFUSED &&   /* its T×T GEMM operands */
                a->micro_batch_size * tr->cfg.n_head / tp * tr->cfg.seq_len * tr->cfg.seq_len > big)
                big = a->micro_batch_size * tr->cfg.n_head / tp * tr->cfg.seq_len * tr->cfg.seq_len;
            bytes += 3 * ((size_t)big * sizeof(float) + 256);
        } else if (layout.dtype != MG_F32 && !tr->cfg.swiglu) {
            /* CUDA: the linear + GELU's fp32 accumulator (mg_linear_gelu_forward and
               mg_linear_backward_input_gelu, one at a time) and the bias gradient's fp32 sums
               and 16-bit copy (the column sums' partials, at most 256 KiB, come from the
               8 MiB of ops' scratch above)                                                 */
            mg_layer_config k = mg_gpt_layer_config(&tr->cfg, (int)a->micro_batch_size,
                                                    (mg_dtype)layout.dtype);
            bytes += (size_t)a->micro_batch_size * (size_t)tr->cfg.seq_len *
                         (size_t)(k.ffn_hidden / tp) * sizeof(float) +
                     (size_t)(k.ffn_hidden / tp) * 2 * sizeof(float) + 512;
        }
    }
    {
        double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
        if (a->device != MG_DEVICE_CUDA && !mg_cuda_available() && phys > 0 && (double)bytes > phys)
            { mg__err(err, errlen, "the model needs %.2f GiB of memory (parameters, optimizer "
                      "state, activations of --micro-batch-size %lld, buffers of the %d "
                      "microbatches of --global-batch-size %lld), more than the %.2f GiB of "
                      "this machine (a smaller --hidden-size, --num-layers, --micro-batch-size or "
                      "--global-batch-size, or more ranks with --tensor-model-parallel-size, "
                      "--context-parallel-size or --pipeline-model-parallel-size, needs less)", bytes / 1073741824.0,
                      (long long)a->micro_batch_size, tr->n_micro,
                      (long long)a->global_batch_size, phys / 1073741824.0); goto fail; }
    }
    if (mg__setup_data(tr, err, errlen)) goto fail;
    if (mg__agree(tr->comm, 0, err, errlen)) { agreed = 1; goto fail; }   /* another rank's */
    agreed = 1;
    /* everything checked: build */
    memset(&cd, 0, sizeof cd);
    cd.device = (mg_device)a->device;
    cd.arena_bytes = bytes;
    if (tr->comm) {
        cd.cuda_device = mg_comm_cuda_device(tr->comm);
        cd.n_threads = mg_comm_default_threads(tr->comm);
    }
    mg_ctx_init(&tr->ctx, &cd);
    if (a->enable_cuda_graph && tr->ctx.device != MG_DEVICE_CUDA) {   /* MG_DEVICE=cpu */
        mg__err(err, errlen, "--enable-cuda-graph needs the GPU (the environment's MG_DEVICE "
                "picked the CPU)");
        goto fail;
    }
    if (a->comm) {                       /* the first communication of the run */
        mg_comm_setup_groups_cp(a->comm, &tr->ctx, tp, tr->cp_size, tr->pp, tr->vp);
        mg_gpt_layout_tp(&layout, a->comm, a->sequence_parallel);
        mg_gpt_layout_cp(&layout, a->comm);
    }
    if (mg_gpt_create(&tr->model, &tr->ctx, &tr->cfg, &layout, err, errlen)) goto fail;
    tr->model.comm = tr->comm;
    tr->model.eod_mask = a->eod_mask_loss;
    tr->model.eod_id = (int32_t)tr->eod_id;
    if (a->timing_log_level >= 2) {   /* forward-/backward-compute without a pipeline */
        tr->model.compute_timer = mg__compute_timer;
        tr->model.compute_timer_user = tr;
    }
    if (tr->pp > 1) {
        tr->slot_mb = (int *)MG_MALLOC(sizeof(int) * (size_t)(layout.n_chunks * n_slots));
        MG_ASSERT(tr->slot_mb, "out of host memory");
        if (mg__pipe_exec_make(tr, &tr->pipe_exec, &tr->pipe_sched, a->pipeline_trace != NULL,
                               err, errlen)) goto fail;
        tr->has_pipe_exec = 1;
        if (a->eval_iters > 0) {
            if (mg__pipe_exec_make(tr, &tr->pipe_eval_exec, &tr->pipe_eval_sched, 0, err, errlen))
                goto fail;
            tr->has_pipe_eval_exec = 1;
        }
    }
    mg_dp_init(&tr->dp, &tr->model, a->comm, a->use_distributed_optimizer, a->bucket_size);
    if (tr->ctx.device == MG_DEVICE_CUDA && a->timing_log_level >= 1) {   /* all-grads-sync */
        tr->dp.comm_timer = mg__dp_comm_timer;
        tr->dp.comm_timer_user = tr;
    }
    mg_adamw_create_dp(&tr->opt, &tr->model, &tr->dp, (float)a->adam_beta1, (float)a->adam_beta2,
                       (float)a->adam_eps, (float)a->weight_decay);
    if (a->fp16)
        mg_loss_scaler_init(&tr->scaler, a->loss_scale == 0,
                            a->loss_scale ? a->loss_scale : a->initial_loss_scale,
                            a->min_loss_scale, a->loss_scale_window, a->hysteresis);
    else
        mg_loss_scaler_init(&tr->scaler, 0, 1.0, 1.0, 1, 1);
    mg__sched_of(a, &tr->sched);
    mg_gpt_init_weights(&tr->model, (uint64_t)a->seed);
    if (has_ckpt) {
        if (mg_trainer_load(tr, a->load, why, sizeof why) < 0) {
            mg__err(err, errlen, "--load %s: %s", a->load, why);
            goto fail;
        }
    } else if (has_weights) {
        if (mg_gpt_import(&tr->model, &wf, err, errlen)) goto fail;
        mg_weights_close(&wf);
        has_weights = 0;
    }
    mg_adamw_take_master(&tr->opt, &tr->model);   /* the 16-bit copy (and sharded master) */
    mg__trainer_push(tr);                          /* the loss scaler, a loaded step count */
    tr->batch = (int32_t *)MG_MALLOC(sizeof(int32_t) * (size_t)(a->global_batch_size /
                                     tr->dp_size) * (size_t)(tr->cfg.seq_len + 1));
    MG_ASSERT(tr->batch, "out of host memory");
    /* scratch for gathering the timers / broadcasting the memory figures: doubles as F32 pairs */
    if (a->comm && a->comm->world_size > 1 && (a->timing_log_level > 0 || a->tensorboard_dir ||
                                               a->log_memory_to_tensorboard))
        tr->timer_dev = (float *)mg_alloc(&tr->ctx, sizeof(double) * MG_N_TIMERS *
                                                    (size_t)a->comm->world_size);
    /* TensorBoard: the last rank writes, as Megatron's get_tensorboard_writer */
    if (a->tensorboard_dir && (!a->comm || a->comm->world_rank == a->comm->world_size - 1)) {
        if (mg_tb_open(&tr->tb, a->tensorboard_dir, why, sizeof why)) {
            mg__err(err, errlen, "--tensorboard-dir %s: %s", a->tensorboard_dir, why);
            goto fail;
        }
        tr->has_tb = 1;
    }
    if (a->log_jsonl && tr->writer) {
        tr->jsonl = fopen(a->log_jsonl, "ab");
        if (!tr->jsonl) {
            mg__err(err, errlen, "--log-jsonl %s: cannot open (%s)", a->log_jsonl, strerror(errno));
            goto fail;
        }
    }
    tr->first_iteration = tr->iteration;
    if (a->exit_signal_handler) mg__exit_signal_install();
    return 0;
fail:
    if (!agreed) mg__agree(tr->comm, 1, err, errlen);
    if (has_weights) mg_weights_close(&wf);
    mg_trainer_free(tr);
    return -1;
}

MGDEF void mg_trainer_free(mg_trainer *tr) {
#ifdef __CUDACC__
    int k, i;
    for (k = 0; k < MG_N_TIMERS; k++)
        for (i = 0; i < MG_TIMER_POOL; i++) {
            if (tr->timer_ev[k].start[i]) cudaEventDestroy((cudaEvent_t)tr->timer_ev[k].start[i]);
            if (tr->timer_ev[k].stop[i]) cudaEventDestroy((cudaEvent_t)tr->timer_ev[k].stop[i]);
        }
#endif
    if (tr->jsonl) fclose(tr->jsonl);
    if (tr->has_tb) mg_tb_close(&tr->tb);
    if (tr->tok) mg_tokenizer_free(tr->tok);
    mg_blend_free(&tr->train_data);
    mg_blend_free(&tr->valid_data);
    mg_blend_free(&tr->test_data);
    while (tr->n_datasets > 0) mg_dataset_close(&tr->datasets[--tr->n_datasets]);
    MG_FREE(tr->datasets);
    while (tr->n_data_words > 0) MG_FREE(tr->data_words[--tr->n_data_words]);
    MG_FREE(tr->data_words);
    if (tr->has_pipe_exec) mg_pipe_exec_free(&tr->pipe_exec);
    if (tr->has_pipe_eval_exec) mg_pipe_exec_free(&tr->pipe_eval_exec);
    mg_schedule_free(&tr->pipe_sched);
    mg_schedule_free(&tr->pipe_eval_sched);
    MG_FREE(tr->slot_mb);
    if (tr->has_opt_graph) mg_graph_free(&tr->opt_graph);
    if (tr->dp.model) mg_dp_free(&tr->dp);
    if (tr->model.ctx) mg_gpt_destroy(&tr->model);
    if (tr->comm && tr->comm->ctx == &tr->ctx) tr->comm->ctx = NULL;  /* host buffers again */
    if (tr->ctx.arena || tr->ctx.device) mg_ctx_free(&tr->ctx);
    MG_FREE(tr->batch);
    memset(tr, 0, sizeof *tr);
}

/* =============================================================================================
   5. Trainer: iteration, logging, evaluation
   ========================================================================================== */
/* Samples [first, first + count) of a part's blend into tr->batch ([count, T+1]); cyclic:
   sample k is k mod the samples b holds (the evaluations: see mg__evaluate_blend).        */
static void mg__fetch(mg_trainer *tr, const mg_blend *b, int64_t first, int64_t count,
                      int cyclic) {
    int64_t i, k;
    char why[MG_ERRLEN];
    for (i = 0; i < count; i++) {
        k = cyclic && b->n_samples > 0 ? (first + i) % b->n_samples : first + i;
        if (mg_blend_get(b, k, tr->batch + i * (tr->cfg.seq_len + 1), why, sizeof why))
            mg_fatal(__FILE__, __LINE__, "sample %lld: %s", (long long)k, why);
    }
}

/* Data parallelism: replica r of d takes samples [r·G/d, (r+1)·G/d) of the global batch
   (microbatches r·n_micro … of the serial run's order: the dropout keys match too), seeds
   each backward with 1/(G·T) like the serial run, and the gradients and the loss are SUMMED
   over the data group — so the step equals the serial one up to the order of additions.   */
/* The optimizer's device scalars (mg_optim_state) and the trainer's host copies of them:
   pull reads the struct back (one copy: the host waits for the device) into the loss scaler,
   the step count, the skipped iterations and, when r is non-NULL, r's learning rate, loss
   scale, grad norm and skip flag; push writes the host copies there (after setup or a load:
   a copy to the device, no wait).                                                          */
static void mg__trainer_pull(mg_trainer *tr, mg_step_result *r) {
    mg_optim_state s;
    mg_copy_to_host(&tr->ctx, &s, tr->opt.state, sizeof s);
    tr->scaler = s.scaler;
    tr->opt.step = s.step;
    tr->skipped_iters = s.skipped_iters;
    tr->nan_iters = s.nan_iters;
    tr->opt.loss_scale = s.loss_scale;
    if (r) {
        r->has_values = 1;
        r->loss = s.loss;
        r->lr = s.lr;
        r->lr2 = s.lr2;
        r->loss_scale = s.loss_scale;
        r->grad_norm = s.grad_norm;
        r->skipped = s.args.skip;
    }
}
static void mg__trainer_push(mg_trainer *tr) {
    mg_optim_state s;
    double tokens = (double)tr->args.global_batch_size * tr->cfg.seq_len;
    mg_copy_to_host(&tr->ctx, &s, tr->opt.state, sizeof s);
    s.scaler = tr->scaler;
    s.loss_scale = tr->scaler.scale;
    s.step = tr->opt.step;
    s.skipped_iters = tr->skipped_iters;
    s.nan_iters = tr->nan_iters;
    memset(&s.interval, 0, sizeof s.interval);
    s.dloss = (float)(tr->scaler.scale / tokens);
    mg_copy_to_device(&tr->ctx, tr->opt.state, &s, sizeof s);
}

/* Whether iteration it (1-based) shows its results: it logs (--log-interval, the last
   iteration) or writes TensorBoard scalars. The same answer on every rank (the flags only).  */
static int mg__trainer_shows(const mg_trainer *tr, int64_t it) {
    return it % tr->args.log_interval == 0 || it == tr->args.train_iters ||
           (tr->args.tensorboard_dir && it % tr->args.tensorboard_log_interval == 0);
}

/* The loss mask (--eod-mask-loss), in two parts of a step.
   mg__per_token_scale: --calculate-per-token-loss's factor for every microbatch, G·T / (the
   positions the global batch keeps), counted before the first forward — each rank counts
   its data-parallel share of tr->batch (n samples); the data group's sum counts each share
   once per context-parallel rank of its replica (0 kept: 0, the step then learns nothing).
   mg__loss_tokens_dev: the iteration's kept positions into *dst (device): the targets this
   rank's head kept (0 on the other stages), the last stage's to every stage, summed over the
   data group (× context), as the losses are.                                              */
static float mg__per_token_scale(mg_trainer *tr, int64_t n) {
    int T = tr->cfg.seq_len;
    int64_t kept = mg__kept_positions(tr->batch, n, T, tr->eod_id);
    double all = mg_dp_sum(&tr->dp, (double)kept) / (tr->cp_size > 1 ? tr->cp_size : 1);
    return all > 0 ? (float)((double)tr->args.global_batch_size * (double)T / all) : 0.0f;
}
static double mg__loss_tokens_local(const mg_trainer *tr) {
    const mg_gpt *m = &tr->model;
    return m->layout.chunks[m->layout.n_chunks - 1].has_head ? (double)m->loss_tokens : 0.0;
}
static void mg__loss_tokens_dev(mg_trainer *tr, double *dst) {
    double kept = mg__loss_tokens_local(tr);
    mg_copy_to_device(&tr->ctx, dst, &kept, sizeof kept);
    if (tr->pp > 1) mg_broadcast(tr->comm, &tr->comm->pipeline, dst, dst, 2, MG_F32, tr->pp - 1);
    if (tr->dp.comm) mg__group_sum_dev(&tr->opt, &tr->model, tr->dp.comm, tr->dp.group, dst);
}

MGDEF mg_step_result mg_trainer_step(mg_trainer *tr) {
    mg_step_result r;
    mg_optim_state *dev = tr->opt.state;
    int64_t G = tr->args.global_batch_size, Gl = G / tr->dp_size;
    double t0 = mg__now_ms(), tokens = (double)G * tr->cfg.seq_len;
    int pull = !tr->defer_results || mg__trainer_shows(tr, tr->iteration + 1);
    float dloss;
    memset(&r, 0, sizeof r);
    r.params_norm = r.num_zeros = r.loss = r.grad_norm = r.lr = r.lr2 = r.loss_scale = NAN;
    mg__timer_start(tr, MG_TIMER_FORWARD_BACKWARD);
    mg__timer_start(tr, MG_TIMER_BATCH_GENERATOR);
    mg__fetch(tr, &tr->train_data, tr->consumed_samples + tr->dp_rank * Gl, Gl, 0);
    mg__timer_stop(tr, MG_TIMER_BATCH_GENERATOR);
    tr->model.loss_tokens = 0;
    if (tr->model.eod_mask && tr->args.calculate_per_token_loss)
        tr->model.dloss_scale_all = mg__per_token_scale(tr, Gl);
    mg_gpt_zero_grad(&tr->model);
    /* dropout on, keyed by the global microbatch index: iteration · microbatches + i */
    tr->model.training = 1;
    /* fp16: the backward is seeded with the loss scale; AdamW divides it out. The seed is the
       one the device's loss scaler left (dev->dloss; dloss, the host's copy, is not read),
       and the per-token losses are added up on the device (dev->loss_sum)                 */
    dloss = (float)(tr->scaler.scale / tokens);
    mg_memset_zero(&tr->ctx, &dev->loss_sum, sizeof dev->loss_sum);
    tr->model.dloss_at = &dev->dloss;
    tr->model.loss_at = &dev->loss_sum;
    tr->model.microbatch_base = (uint64_t)tr->iteration * (uint64_t)tr->n_micro * tr->dp_size +
                                (uint64_t)tr->dp_rank * (uint64_t)tr->n_micro;
    mg_dp_start(&tr->dp);   /* buckets reduced during each chunk's last backward (B, or W) */
    if (tr->pp > 1) {       /* the schedule's forwards and backwards over the pipeline ranks */
        int kind;
        mg__pipe_run(tr, &tr->pipe_exec, tr->batch, dloss, 0);
        for (kind = 1; kind < MG_PIPE_COMM_KINDS; kind++) {   /* its send/recv groups' time */
            tr->timer_ms[MG_TIMER_PIPE_COMM + kind - 1] += tr->pipe_exec.comm_ms[kind];
            tr->pipe_exec.comm_ms[kind] = 0;
        }
        /* the buckets touching the tied word embedding wait for this: its two stage parts
           summed over the embedding group first (the stages' flat buffers differ, so their
           data-parallel pieces do too), then mg_dp_finish starts them */
        mg__timer_start_on(tr, MG_TIMER_EMBEDDING_GRADS, 1);
        mg__embedding_grad_all_reduce(&tr->model);
        mg__timer_stop(tr, MG_TIMER_EMBEDDING_GRADS);
    } else {
        mg_gpt_run_microbatches(&tr->model, tr->batch, tr->n_micro, dloss, 1);
    }
    tr->model.dloss_at = NULL;
    tr->model.loss_at = NULL;
    /* all-grads-sync: on the GPU each bucket's collective on the communication stream (the
       dp hook); on the CPU the wait for what is left of them after the backward            */
    if (!tr->dp.comm_timer) mg__timer_start(tr, MG_TIMER_ALL_GRADS_SYNC);
    mg_dp_finish(&tr->dp);
    if (!tr->dp.comm_timer) mg__timer_stop(tr, MG_TIMER_ALL_GRADS_SYNC);
    if (tr->dp.comm)   /* the loss summed over the replicas, as mg_dp_sum but on the device */
        mg__group_sum_dev(&tr->opt, &tr->model, tr->dp.comm, tr->dp.group, &dev->loss_sum);
    if (tr->model.eod_mask) mg__loss_tokens_dev(tr, &dev->loss_tokens);
    tr->model.training = 0;
    mg__timer_start_on(tr, MG_TIMER_LAYERNORM_GRADS, 1);
    mg_gpt_reduce_grads(&tr->model);
    mg__timer_stop(tr, MG_TIMER_LAYERNORM_GRADS);
    mg__timer_stop(tr, MG_TIMER_FORWARD_BACKWARD);
    mg__timer_start(tr, MG_TIMER_OPTIMIZER);
    if (tr->args.log_num_zeros_in_grad) {
        int bad = 0;
        mg__timer_start(tr, MG_TIMER_COUNT_ZEROS);
        r.num_zeros = mg__model_sum(&tr->opt, &tr->model, MG__SUM_GRAD_ZEROS, &bad);
        mg__timer_stop(tr, MG_TIMER_COUNT_ZEROS);
    }
    /* the schedule counts optimizer updates, not iterations: Megatron-LM steps its
       OptimizerParamScheduler only after a successful update, so skipped (fp16 overflow)
       iterations neither warm up nor decay the learning rate                               */
    /* mg_adamw_update, its parts timed, queued on the device: the norm, the decisions (skip,
       clip, the loss scaler's update, the step count and the learning rate at it), the fused
       step; nothing here waits for the device                                              */
    if (tr->args.enable_cuda_graph) {
        /* --enable-cuda-graph: the same two parts as one graph, captured at the first
           iteration (recorded, not run; its Σ g² scratch kept reserved) and launched at every
           iteration; timed as the inner step. Everything it reads that changes from step to
           step (gradients, the scaler, the step count) is in device memory.                */
        mg__timer_start(tr, MG_TIMER_INNER_STEP);
        if (!tr->has_opt_graph) {
            tr->opt.keep_scratch = 1;
            mg_graph_capture_begin(&tr->ctx);
            mg__adamw_clip(&tr->opt, &tr->model, &tr->sched, tr->args.clip_grad, tokens);
            mg__adamw_inner_step(&tr->opt, &tr->model);
            mg_graph_capture_end(&tr->ctx, &tr->opt_graph);
            tr->opt.keep_scratch = 0;
            tr->has_opt_graph = 1;
        }
        mg_graph_launch(&tr->ctx, &tr->opt_graph);
        mg__timer_stop(tr, MG_TIMER_INNER_STEP);
    } else {
        mg__timer_start(tr, MG_TIMER_CLIP_MAIN_GRAD);
        mg__adamw_clip(&tr->opt, &tr->model, &tr->sched, tr->args.clip_grad, tokens);
        mg__timer_stop(tr, MG_TIMER_CLIP_MAIN_GRAD);
        mg__timer_start(tr, MG_TIMER_INNER_STEP);
        mg__adamw_inner_step(&tr->opt, &tr->model);
        mg__timer_stop(tr, MG_TIMER_INNER_STEP);
    }
    /* mixed precision: the fused step wrote the 16-bit working copy with the fp32 master (a
       skipped step leaves both as they were), so the next forward has nothing to cast      */
    if (tr->model.param16 && !tr->model.layout.shard_master) tr->model.param16_current = 1;
    if (tr->opt.dp) mg__timer_start_on(tr, MG_TIMER_PARAMS_ALL_GATHER, 1);   /* ZeRO only */
    mg__adamw_gather_params(&tr->opt, &tr->model);
    if (tr->opt.dp) mg__timer_stop(tr, MG_TIMER_PARAMS_ALL_GATHER);
    mg__timer_stop(tr, MG_TIMER_OPTIMIZER);
    if (tr->args.log_params_norm && pull) {   /* Megatron's calc_params_l2_norm, after the update */
        int bad = 0;
        r.params_norm = sqrt(mg__model_sum(&tr->opt, &tr->model, MG__SUM_PARAM_SQ, &bad));
    }
    tr->consumed_samples += G;
    tr->iteration++;
    /* the one read-back of the step (it waits for the device); none when deferred */
    if (pull) mg__trainer_pull(tr, &r);
    r.elapsed_ms = mg__now_ms() - t0;
    return r;
}

/* --log-jsonl records: mg__jsonl_begin before one (the file's size: whole records up to
   there), mg__jsonl_end after it (flushed). A failed write — a full disk, a file-size limit
   — cuts the file back to its last whole record, warns once and writes no more: training goes
   on, as Megatron-LM's goes on when a log cannot be written.                               */
static int64_t mg__jsonl_begin(mg_trainer *tr) {
    return fflush(tr->jsonl) == 0 ? (int64_t)lseek(fileno(tr->jsonl), 0, SEEK_END) : -1;
}
static void mg__jsonl_end(mg_trainer *tr, int64_t mark) {
    int e;
    if (mark >= 0 && fflush(tr->jsonl) == 0 && !ferror(tr->jsonl)) return;
    e = errno;
    if (mark >= 0 && ftruncate(fileno(tr->jsonl), (off_t)mark) != 0) mark = -1;
    fprintf(stderr, "gpt_train: warning: --log-jsonl %s: cannot write the record of iteration "
            "%lld (%s); %s, and no more are written (training goes on)\n", tr->args.log_jsonl,
            (long long)tr->iteration, strerror(e), mark >= 0 ? "the file keeps the whole "
            "records before it" : "the file may end in a cut record");
    fclose(tr->jsonl);
    tr->jsonl = NULL;
}

/* A double for JSON: non-finite values become null. */
static void mg__json_num(FILE *f, const char *key, double v, int last) {
    if (isfinite(v)) fprintf(f, "\"%s\": %.9g%s", key, v, last ? "" : ", ");
    else fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

/* One TensorBoard scalar (the last rank; elsewhere nothing). A failed write is one warning,
   then the run goes on without TensorBoard.                                                 */
static void mg__tb(mg_trainer *tr, const char *tag, double v, int64_t step) {
    char err[MG_ERRLEN];
    if (!tr->has_tb) return;
    if (mg_tb_scalar(&tr->tb, tag, v, step, err, sizeof err)) {
        fprintf(stderr, "gpt_train: warning: --tensorboard-dir: %s (no more events written)\n",
                err);
        mg_tb_close(&tr->tb);
        tr->has_tb = 0;
    }
}
/* Megatron's pair: TAG at the iteration and "TAG vs samples" at the consumed samples.      */
static void mg__tb_pair(mg_trainer *tr, const char *tag, double v) {
    char vs[128];
    mg__tb(tr, tag, v, tr->iteration);
    snprintf(vs, sizeof vs, "%s vs samples", tag);
    mg__tb(tr, vs, v, tr->consumed_samples);
}

/* The memory of this rank's context, as Megatron reads torch.cuda.memory_stats()
   (mg_ctx_memory): reserved = every allocation the context made (the arena; on the GPU also
   cuBLAS's workspace), allocated = the part in use now, max allocated = its high-water mark,
   and the number of live allocations (arena blocks, the workspace).                         */
#define MG__N_MEM 4
static void mg__memory(const mg_trainer *tr, double mem[MG__N_MEM]) {
    mg_memory_stats st = mg_ctx_memory(&tr->ctx);
    mem[0] = (double)st.reserved;
    mem[1] = (double)st.allocated;
    mem[2] = (double)st.max_allocated;
    mem[3] = (double)st.allocations;
}
static const char *const mg__memory_tags[MG__N_MEM] = {"mem-reserved-bytes",
    "mem-allocated-bytes", "mem-max-allocated-bytes", "mem-allocated-count"};

/* Every rank's timers over the log interval, ms per iteration, into all[rank·N + k]
   (collective over the world: an all-gather). On the GPU the interval's event pairs are
   resolved first: the one wait for the device the timers cause.                           */
static void mg__timers_gather(mg_trainer *tr, double per_iter_div, double *all) {
    int k, world = tr->comm ? tr->comm->world_size : 1, me = tr->comm ? tr->comm->world_rank : 0;
    double mine[MG_N_TIMERS];
#ifdef __CUDACC__
    for (k = 0; k < MG_N_TIMERS; k++)
        if (tr->timer_ev[k].n) mg__timer_resolve(tr, k, tr->timer_ev[k].n);
#endif
    for (k = 0; k < MG_N_TIMERS; k++) mine[k] = tr->timer_ms[k] / per_iter_div;
    if (world == 1) {
        memcpy(all, mine, sizeof mine);
        return;
    }
    /* doubles travel as pairs of F32 words (the collectives only move bytes here) */
    mg_copy_to_device(&tr->ctx, tr->timer_dev + (size_t)me * 2 * MG_N_TIMERS, mine, sizeof mine);
    mg_all_gather(tr->comm, &tr->comm->world, tr->timer_dev + (size_t)me * 2 * MG_N_TIMERS,
                  tr->timer_dev, 2 * MG_N_TIMERS, MG_F32);
    mg_copy_to_host(&tr->ctx, all, tr->timer_dev, sizeof mine * (size_t)world);
}

/* Timer k's min and max over the ranks that ran it (time > 0, as Megatron's
   _get_global_min_max_time); 0 when it is off or ran nowhere.                              */
static int mg__timer_minmax(const mg_trainer *tr, const double *all, int k, double *lo,
                            double *hi) {
    int r, world = tr->comm ? tr->comm->world_size : 1;
    *lo = INFINITY;
    *hi = 0;
    if (!mg__timer_on(tr, k)) return 0;
    for (r = 0; r < world; r++) {
        double t = all[r * MG_N_TIMERS + k];
        if (t > 0 && t < *lo) *lo = t;
        if (t > *hi) *hi = t;
    }
    return *hi > 0;
}

/* Megatron's timer report (megatron/core/timers.py); --timing-log-option max|minmax|all. */
static void mg__timers_print(const mg_trainer *tr, const double *all, FILE *out) {
    int k, r, world = tr->comm ? tr->comm->world_size : 1, opt = tr->args.timing_log_option;
    char dots[64];
    fprintf(out, "%s", opt == MG_TIMING_MAX ? "max time across ranks (ms):"
                       : opt == MG_TIMING_MINMAX ? "(min, max) time across ranks (ms):"
                                                 : "times across ranks (ms):");
    for (k = 0; k < MG_N_TIMERS; k++) {
        double lo, hi;
        if (!mg__timer_minmax(tr, all, k, &lo, &hi)) continue;
        /* the name, a space, dots to 48 columns: (name + ' ').ljust(48, '.') */
        snprintf(dots, sizeof dots, "%s ", mg__timer_name(k));
        while (strlen(dots) < 48) strcat(dots, ".");
        if (opt == MG_TIMING_MAX) fprintf(out, "\n    %s: %.2f", dots, hi);
        else if (opt == MG_TIMING_MINMAX) fprintf(out, "\n    %s: (%.2f, %.2f)", dots, lo, hi);
        else {
            fprintf(out, "\n  %s:", mg__timer_name(k));
            for (r = 0; r < world; r++)
                if (all[r * MG_N_TIMERS + k] > 0)
                    fprintf(out, "\n     rank %2d: %.2f", r, all[r * MG_N_TIMERS + k]);
        }
    }
    fprintf(out, "\n");
}

/* h:mm:ss of a duration in seconds. */
static void mg__hms(char *out, size_t cap, double s) {
    long long t = s > 0 && s < 1e12 ? (long long)(s + 0.5) : 0;
    snprintf(out, cap, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
}

/* The end of the log line: wall time since setup and the time left at this run's pace
   (wall time, evaluations and saves included, per iteration done since it started). */
static void mg__print_progress(const mg_trainer *tr, FILE *out) {
    double elapsed = (mg__now_ms() - tr->start_ms) * 1e-3;
    int64_t done = tr->iteration - tr->first_iteration;
    char e[32], eta[32];
    mg__hms(e, sizeof e, elapsed);
    mg__hms(eta, sizeof eta, done > 0 ? elapsed / (double)done *
                                        (double)(tr->args.train_iters - tr->iteration) : 0);
    fprintf(out, " elapsed: %s | ETA: %s |\n", e, eta);
}

MGDEF void mg_trainer_log(mg_trainer *tr, const mg_step_result *r, FILE *out) {
    double ms, loss, tokens_per_s, tflops, tflops_rc, mem[MG__N_MEM], *timers = NULL;
    int64_t G = tr->args.global_batch_size;
    int k, world = tr->comm ? tr->comm->world_size : 1;
    time_t now;
    char stamp[32];
    tr->log_count++;
    tr->log_ms_sum += r->elapsed_ms;
    /* TensorBoard, every --tensorboard-log-interval: this iteration's values (Megatron's
       training_log; the log line below shows the interval's mean loss)                     */
    if (tr->has_tb && tr->iteration % tr->args.tensorboard_log_interval == 0) {
        mg__tb_pair(tr, "learning-rate", r->lr);
        if (tr->sched.decoupled) mg__tb(tr, "decoupled-learning-rate", r->lr2, tr->iteration);
        mg__tb_pair(tr, "batch-size", (double)G);
        mg__tb_pair(tr, "lm loss", r->loss);
        mg__tb_pair(tr, "loss-scale", r->loss_scale);
        mg__tb_pair(tr, "grad-norm", r->grad_norm);
        if (tr->args.log_num_zeros_in_grad) mg__tb_pair(tr, "num-zeros", r->num_zeros);
        if (tr->args.log_params_norm) mg__tb_pair(tr, "params-norm", r->params_norm);
        if (tr->args.log_world_size_to_tensorboard) mg__tb_pair(tr, "world-size", world);
        if (tr->args.log_memory_to_tensorboard) {
            mg__memory(tr, mem);
            for (k = 0; k < MG__N_MEM; k++) mg__tb(tr, mg__memory_tags[k], mem[k], tr->iteration);
        }
    }
    if (tr->iteration % tr->args.log_interval && tr->iteration != tr->args.train_iters) return;
    {   /* the interval's loss and counts, accumulated on the device: read, then restarted */
        mg_optim_state s;
        mg_copy_to_host(&tr->ctx, &s, tr->opt.state, sizeof s);
        tr->log_loss_sum = s.interval.loss_sum;
        tr->log_skipped = s.interval.skipped;
        tr->log_nan = s.interval.nan;
        mg_memset_zero(&tr->ctx, &tr->opt.state->interval, sizeof s.interval);
    }
    ms = tr->log_ms_sum / (double)tr->log_count;
    loss = tr->log_count > tr->log_skipped ?
           tr->log_loss_sum / (double)(tr->log_count - tr->log_skipped) : NAN;
    /* TensorBoard is written by the last rank: with it, the line and the JSON object (rank 0)
       show the last rank's iteration time and memory too, as Megatron's print_rank_last    */
    mg__memory(tr, mem);
    if (world > 1 && (tr->args.tensorboard_dir || tr->args.log_memory_to_tensorboard)) {
        double last[MG__N_MEM + 1];
        memcpy(last, mem, sizeof mem);
        last[MG__N_MEM] = ms;
        mg_copy_to_device(&tr->ctx, tr->timer_dev, last, sizeof last);
        mg_broadcast(tr->comm, &tr->comm->world, tr->timer_dev, tr->timer_dev,
                     2 * (MG__N_MEM + 1), MG_F32, world - 1);
        mg_copy_to_host(&tr->ctx, last, tr->timer_dev, sizeof last);
        memcpy(mem, last, sizeof mem);
        ms = last[MG__N_MEM];
    }
    tokens_per_s = (double)G * tr->cfg.seq_len / (ms * 1e-3);
    /* Megatron-LM's figure counts model FLOPs only; the second one adds the forward work
       recomputation repeats (the paper's 96·B·s·l·h² form with full recomputation)          */
    tflops = mg_gpt_flops_per_iteration(&tr->cfg, G) / (ms * 1e-3) / 1e12 /
             (tr->comm ? tr->comm->world_size : 1);                          /* per rank */
    tflops_rc = tflops * (1 + mg_gpt_flops_recomputed(&tr->cfg, &tr->model.layout, G) /
                          mg_gpt_flops_per_iteration(&tr->cfg, G));
    now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime(&now));
    if (tr->args.timing_log_level > 0) {
        timers = (double *)MG_MALLOC(sizeof(double) * MG_N_TIMERS * (size_t)world);
        MG_ASSERT(timers, "out of host memory");
        mg__timers_gather(tr, (double)tr->log_count, timers);
    }
    if (out) {
        fprintf(out, " [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per "
                "iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.3f | with recomputed "
                "FLOPs (TFLOP/s/GPU): %.3f | tokens per second: %.0f | learning rate: %.6E |",
                stamp, (long long)tr->iteration, (long long)tr->args.train_iters,
                (long long)tr->consumed_samples, ms, tflops, tflops_rc, tokens_per_s, r->lr);
        if (tr->sched.decoupled)   /* Megatron prints it on the first and last stages */
            fprintf(out, " decoupled learning rate: %.6E |", r->lr2);
        fprintf(out, " global batch size: %5lld | lm loss: %.6E | loss scale: %.1f | grad norm: "
                "%.3f |", (long long)G, loss, r->loss_scale, r->grad_norm);
        if (tr->args.log_num_zeros_in_grad) fprintf(out, " num zeros: %.1f |", r->num_zeros);
        if (tr->args.log_params_norm) fprintf(out, " params norm: %.3f |", r->params_norm);
        fprintf(out, " number of skipped iterations: %3lld | number of nan iterations: %3lld |",
                (long long)tr->log_skipped, (long long)tr->log_nan);
        mg__print_progress(tr, out);
        if (timers) mg__timers_print(tr, timers, out);
        fflush(out);
    }
    /* TensorBoard at the log interval: the iteration time (s), the throughput, the timers
       (ms per iteration, the maximum over the ranks: Megatron's Timers.write)              */
    if (tr->has_tb && tr->args.log_timers_to_tensorboard) {
        mg__tb(tr, "iteration-time", ms * 1e-3, tr->iteration);
        if (tr->args.log_throughput) mg__tb(tr, "throughput", tflops, tr->iteration);
        for (k = 0; timers && k < MG_N_TIMERS; k++) {
            char tag[64];
            double lo, hi;
            if (!mg__timer_minmax(tr, timers, k, &lo, &hi)) continue;
            snprintf(tag, sizeof tag, "%s-time", mg__timer_name(k));
            mg__tb(tr, tag, hi, tr->iteration);
        }
    }
    if (tr->jsonl) {
        int64_t mark = mg__jsonl_begin(tr);
        fprintf(tr->jsonl, "{\"iteration\": %lld, \"consumed_samples\": %lld, ",
                (long long)tr->iteration, (long long)tr->consumed_samples);
        mg__json_num(tr->jsonl, "lm_loss", loss, 0);
        mg__json_num(tr->jsonl, "grad_norm", r->grad_norm, 0);
        mg__json_num(tr->jsonl, "lr", r->lr, 0);
        if (tr->sched.decoupled) mg__json_num(tr->jsonl, "decoupled_lr", r->lr2, 0);
        mg__json_num(tr->jsonl, "loss_scale", r->loss_scale, 0);
        mg__json_num(tr->jsonl, "elapsed_ms", ms, 0);
        mg__json_num(tr->jsonl, "tokens_per_sec", tokens_per_s, 0);
        mg__json_num(tr->jsonl, "tflops_per_gpu", tflops, 0);
        mg__json_num(tr->jsonl, "tflops_per_gpu_with_recompute", tflops_rc, 0);
        if (tr->args.log_num_zeros_in_grad) mg__json_num(tr->jsonl, "num_zeros", r->num_zeros, 0);
        if (tr->args.log_params_norm) mg__json_num(tr->jsonl, "params_norm", r->params_norm, 0);
        if (tr->args.log_memory_to_tensorboard) {   /* the last rank's, as TensorBoard's */
            mg__json_num(tr->jsonl, "mem_reserved_bytes", mem[0], 0);
            mg__json_num(tr->jsonl, "mem_allocated_bytes", mem[1], 0);
            mg__json_num(tr->jsonl, "mem_max_allocated_bytes", mem[2], 0);
            mg__json_num(tr->jsonl, "mem_allocated_count", mem[3], 0);
        }
        if (tr->args.log_world_size_to_tensorboard) mg__json_num(tr->jsonl, "world_size", world, 0);
        if (timers) {   /* "name": [min, max] ms per iteration over the ranks that ran it */
            int first = 1;
            fprintf(tr->jsonl, "\"timers_ms\": {");
            for (k = 0; k < MG_N_TIMERS; k++) {
                double lo, hi;
                if (!mg__timer_minmax(tr, timers, k, &lo, &hi)) continue;
                fprintf(tr->jsonl, "%s\"%s\": [%.9g, %.9g]", first ? "" : ", ",
                        mg__timer_name(k), lo, hi);
                first = 0;
            }
            fprintf(tr->jsonl, "}, ");
        }
        fprintf(tr->jsonl, "\"global_batch_size\": %lld, \"skipped_iterations\": %lld, "
                "\"nan_iterations\": %lld}\n", (long long)G, (long long)tr->log_skipped,
                (long long)tr->log_nan);
        mg__jsonl_end(tr, mark);
    }
    MG_FREE(timers);
    tr->log_count = tr->log_skipped = tr->log_nan = 0;
    tr->log_loss_sum = tr->log_ms_sum = 0;
    for (k = 0; k < MG_N_TIMERS; k++) tr->timer_ms[k] = 0;
}

/* Mean loss over --eval-iters global batches of a part's blend from sample *consumed on. */
static double mg__evaluate_blend(mg_trainer *tr, const mg_blend *b, int64_t *consumed) {
    int64_t G = tr->args.global_batch_size, Gl = G / tr->dp_size, k;
    double tokens = (double)G * tr->cfg.seq_len, sum = 0, kept = 0;
    mg_gpt *m = &tr->model;
    /* The validation part holds (train_iters / eval_interval + 1)·eval_iters·G samples
       (Megatron's count: each interval's validation and the one after training); a run
       resumed with another --eval-interval or --eval-iters than the checkpoint's can ask
       for more, so the samples are read cyclically, as Megatron reads its validation
       iterator (which restarts at the run's first sample, not at 0).                     */
    for (k = 0; k < tr->args.eval_iters; k++) {   /* each replica its share, summed */
        mg__fetch(tr, b, *consumed + tr->dp_rank * Gl, Gl, 1);
        *consumed += G;
        m->loss_tokens = 0;
        sum += mg_dp_sum(&tr->dp, tr->pp > 1 ? mg__pipe_run(tr, &tr->pipe_eval_exec, tr->batch,
                                                            0.0f, 1)
                                             : mg_gpt_run_microbatches(m, tr->batch,
                                                                       tr->n_micro, 0.0f, 0))
               / (m->eod_mask ? 1.0 : tokens);
        if (m->eod_mask)   /* the kept positions, counted as the losses are summed */
            kept += mg_dp_sum(&tr->dp, tr->pp > 1 ? mg__group_bcast_f64(m, &tr->comm->pipeline,
                                                                        mg__loss_tokens_local(tr),
                                                                        tr->pp - 1)
                                                  : mg__loss_tokens_local(tr));
    }
    /* the mean over the positions evaluated: under the loss mask the losses and the kept
       positions summed over the iterations, then divided (as Megatron-LM's evaluate does);
       unmasked every batch holds G·T of them, so the mean of the batches' means          */
    return m->eod_mask ? sum / kept : sum / (double)tr->args.eval_iters;
}

/* Megatron's validation line (where: "", " on validation set" or " on test set"), and, when
   log, the JSON object (and TensorBoard's scalars for the validation).                    */
static void mg__print_eval(mg_trainer *tr, FILE *out, const char *where, const char *key,
                           double loss, int log) {
    if (out) {
        fprintf(out, "-----------------------------------------------------------------------"
                "-----------------------\n validation loss at iteration %lld%s | lm loss value: "
                "%.6E | lm loss PPL: %.6E | \n----------------------------------------------"
                "------------------------------------------------\n", (long long)tr->iteration,
                where, isnan(loss) ? NAN : loss, isnan(loss) ? NAN : exp(loss < 700 ? loss : 700));
        fflush(out);
    }
    if (!log) return;
    /* TensorBoard: the validation's (Megatron's evaluate_and_print_results writes the test
       set's under these "validation" tags too, which would mix the two; the test loss goes to
       the JSONL log only) */
    if (!strcmp(key, "valid_lm_loss")) {
        mg__tb_pair(tr, "lm loss validation", loss);
        if (tr->args.log_validation_ppl_to_tensorboard)   /* its ppl: exp(min(20, loss)) */
            mg__tb_pair(tr, "lm loss validation ppl", exp(loss < 20 ? loss : 20));
    }
    if (tr->jsonl) {
        int64_t mark = mg__jsonl_begin(tr);
        fprintf(tr->jsonl, "{\"iteration\": %lld, ", (long long)tr->iteration);
        mg__json_num(tr->jsonl, key, loss, 1);
        fprintf(tr->jsonl, "}\n");
        mg__jsonl_end(tr, mark);
    }
}

/* The validation, printed with where ("" in the loop, " on validation set" after it). An
   iteration's log and TensorBoard hold one validation loss: the one after training is
   written there only when the loop did not just validate that iteration (Megatron-LM's
   writes TensorBoard a second value at the same step).                                   */
static double mg__trainer_validate(mg_trainer *tr, FILE *out, int final) {
    double loss;
    int log = !final || tr->last_validated != tr->iteration;
    if (!tr->has_valid || tr->args.eval_iters <= 0) return NAN;
    loss = mg__evaluate_blend(tr, &tr->valid_data, &tr->consumed_valid_samples);
    mg__print_eval(tr, out, final ? " on validation set" : "", "valid_lm_loss", loss, log);
    tr->last_validated = tr->iteration;
    return loss;
}
MGDEF double mg_trainer_evaluate(mg_trainer *tr, FILE *out) {
    return mg__trainer_validate(tr, out, 0);
}
MGDEF double mg_trainer_evaluate_final(mg_trainer *tr, FILE *out) {
    return mg__trainer_validate(tr, out, 1);
}

MGDEF double mg_trainer_test(mg_trainer *tr, FILE *out) {
    int64_t consumed = 0;
    double loss;
    if (!tr->has_test || tr->args.eval_iters <= 0) return NAN;
    loss = mg__evaluate_blend(tr, &tr->test_data, &consumed);
    mg__print_eval(tr, out, " on test set", "test_lm_loss", loss, 1);
    return loss;
}

/* ---- Clean exits --------------------------------------------------------------------------
   --exit-signal-handler: SIGTERM (what Slurm sends before the time limit, and `scancel`) only
   sets a flag; the iteration under way finishes, and mg_trainer_exit_check after it reports
   the flag. A signal that lands during a checkpoint save changes nothing in the save (the
   handler returns; SA_RESTART resumes the interrupted write), the check after it stops.   */
static volatile sig_atomic_t mg__exit_signal_seen;
static void mg__exit_signal_handler(int sig) { (void)sig; mg__exit_signal_seen = 1; }
static void mg__exit_signal_install(void) {
#ifdef SA_RESTART
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mg__exit_signal_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
#else
    signal(SIGTERM, mg__exit_signal_handler);   /* plain C: no restart of interrupted calls */
#endif
}

MGDEF const char *mg_exit_reason(int why) {
    return why == MG_EXIT_SIGNAL ? "SIGTERM received (--exit-signal-handler)"
         : why == MG_EXIT_DURATION ? "--exit-duration-in-mins reached"
         : why == MG_EXIT_INTERVAL ? "--exit-interval reached" : "no exit";
}

MGDEF int mg_trainer_exit_check(mg_trainer *tr) {
    const mg_train_args *a = &tr->args;
    int why = MG_EXIT_NONE;
    if (a->exit_signal_handler && mg__exit_signal_seen) why = MG_EXIT_SIGNAL;
    else if (a->exit_duration_in_mins > 0 &&
             (mg__now_ms() - tr->start_ms) / 60e3 > a->exit_duration_in_mins)
        why = MG_EXIT_DURATION;
    /* a signal reaches one rank, and clocks differ: the largest code wins everywhere. The
       flag travels through host memory (MPI), as mg__agree's does, whatever the backend. */
    if ((a->exit_signal_handler || a->exit_duration_in_mins > 0) && tr->comm &&
        tr->comm->world_size > 1) {
        mg_ctx *ctx = tr->comm->ctx;
        float mine = (float)why, all;
        tr->comm->ctx = NULL;
        mg_all_reduce(tr->comm, &tr->comm->world, &mine, &all, 1, MG_F32, MG_MAX);
        tr->comm->ctx = ctx;
        why = (int)all;
    }
    if (why == MG_EXIT_NONE && a->exit_interval > 0 && tr->iteration % a->exit_interval == 0)
        why = MG_EXIT_INTERVAL;
    return why;
}

/* =============================================================================================
   5. Trainer: checkpoints
   ========================================================================================== */
/* JSON string literal of s (quotes, backslashes and control characters escaped). */
static void mg__json_str(char *out, size_t cap, const char *s) {
    size_t n = 0;
    if (cap < 3) { if (cap) out[0] = 0; return; }
    out[n++] = '"';
    for (; s && *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[n++] = '\\'; out[n++] = (char)c; }
        else if (c < 0x20) n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        else out[n++] = (char)c;
    }
    out[n++] = '"';
    out[n] = 0;
}

/* state.json: the counters a resume needs, the architecture, and every flag of the run. */
static char *mg__state_json(const mg_trainer *tr) {
    size_t cap = 16384, n = 0;
    char *s = (char *)MG_MALLOC(cap), *val, lr_style[32], wd_style[32];
    const mg_train_args *a = &tr->args;
    int64_t arch[6];
    int i;
    MG_ASSERT(s, "out of host memory");
    arch[0] = tr->cfg.n_layer; arch[1] = tr->cfg.hidden; arch[2] = tr->cfg.n_head;
    arch[3] = tr->cfg.seq_len; arch[4] = tr->cfg.max_pos; arch[5] = tr->cfg.vocab_size;
    n += (size_t)snprintf(s + n, cap - n, "{\n  \"format\": \"megatron.h checkpoint\", "
        "\"version\": 1,\n  \"iteration\": %lld, \"consumed_train_samples\": %lld, "
        "\"consumed_valid_samples\": %lld,\n  \"adam_step\": %lld, \"skipped_iterations\": %lld,"
        " \"nan_iterations\": %lld,\n  \"seed\": %lld, \"data_order_index\": %d,\n"
        "  \"loss_scale\": %.17g, \"loss_scale_growth_tracker\": %lld, "
        "\"loss_scale_hysteresis_tracker\": %lld,\n",
        (long long)tr->iteration, (long long)tr->consumed_samples,
        (long long)tr->consumed_valid_samples, (long long)tr->opt.step,
        (long long)tr->skipped_iters, (long long)tr->nan_iters, (long long)a->seed, a->data_order,
        tr->scaler.scale, (long long)tr->scaler.growth_tracker,
        (long long)tr->scaler.hysteresis_tracker);
    for (i = 0; i < 6; i++)
        n += (size_t)snprintf(s + n, cap - n, "  \"%s\": %lld,\n", mg__state_arch_keys[i],
                              (long long)arch[i]);
    if (tr->cfg.use_rope_scaling) {   /* what Llama 3 scaling needs beyond its flags */
        mg_layer_config lc = mg_gpt_layer_config(&tr->cfg, 1, MG_F32);
        n += (size_t)snprintf(s + n, cap - n, "  \"rope_scaling\": {\"low_freq_factor\": "
                              "%.9g, \"high_freq_factor\": %.9g, "
                              "\"original_max_position_embeddings\": %d},\n",
                              lc.rope_freq.low_freq_factor, lc.rope_freq.high_freq_factor,
                              lc.rope_freq.original_max_pos);
    }
    mg__choice_name(MG__LR_STYLES, tr->sched.style, lr_style, sizeof lr_style);
    mg__choice_name(MG__WD_STYLES, tr->sched.wd_style, wd_style, sizeof wd_style);
    n += (size_t)snprintf(s + n, cap - n, "  \"opt_param_scheduler\": {\"max_lr\": %.17g, "
                          "\"min_lr\": %.17g, \"lr_warmup_iters\": %.17g, \"lr_decay_iters\": "
                          "%.17g, \"lr_decay_style\": \"%s\", \"start_wd\": %.17g, \"end_wd\": "
                          "%.17g, \"wd_incr_iters\": %.17g, \"wd_incr_style\": \"%s\"",
                          tr->sched.max_lr, tr->sched.min_lr, tr->sched.warmup_iters,
                          tr->sched.decay_iters, lr_style, tr->sched.start_wd,
                          tr->sched.end_wd, tr->sched.wd_incr_iters, wd_style);
    if (tr->sched.decoupled)   /* the decoupled param group's pair (--decoupled-lr) */
        n += (size_t)snprintf(s + n, cap - n, ", \"decoupled_lr\": %.17g, "
                              "\"decoupled_min_lr\": %.17g", tr->sched.decoupled_max_lr,
                              tr->sched.decoupled_min_lr);
    n += (size_t)snprintf(s + n, cap - n, "},\n");
    n += (size_t)snprintf(s + n, cap - n, "  \"padded_vocab_size\": %d,\n  \"args\": {",
                          tr->cfg.padded_vocab);
    for (i = 0; i < MG__NFLAGS; i++) {   /* every flag whole, however long its paths */
        const mg__flag *f = &mg__flags[i];
        size_t need = mg__flag_text_cap(a, f);
        if (f->type == MG__F_HELP) continue;
        val = (char *)MG_MALLOC(need);
        if (n + need + 128 > cap) {      /* grow (MG_MALLOC/MG_FREE: no realloc to override) */
            char *grown;
            while (n + need + 128 > cap) cap *= 2;
            grown = (char *)MG_MALLOC(cap);
            MG_ASSERT(grown, "out of host memory");
            memcpy(grown, s, n + 1);
            MG_FREE(s);
            s = grown;
        }
        MG_ASSERT(val, "out of host memory");
        mg__flag_text(a, f, val, need, 1);
        n += (size_t)snprintf(s + n, cap - n, "%s\n    \"%s\": %s", n && s[n - 1] == '{' ? "" : ",",
                              f->name + 2, val);
        MG_FREE(val);
    }
    snprintf(s + n, cap - n, "\n  }\n}\n");
    return s;
}

/* ---- Checkpoint files, written by all ranks in parallel ----------------------------------
   Three safetensors files of GLOBAL tensors (names: the parameter's, + ".exp_avg", +
   ".exp_avg_sq"); the word embedding keeps its V real rows, so no file depends on t or on the
   padding. World rank 0 creates each file at its final size with the header (mg_st_writer,
   preallocated), then every rank opens it and pwrites the pieces it owns:
     parameters, and moments without the distributed optimizer: data-parallel rank 0 of each
       tensor group writes its tensor-parallel shards (replicated tensors: tensor-parallel
       rank 0 only), so each element is written exactly once;
     moments with the distributed optimizer, and parameters with a sharded master (mixed
       precision): each data-parallel rank writes its own pieces of the buckets
       (mg__for_owned), mapped from the flat buffer to global coordinates.
   Joiners fsync and close, the ranks agree, rank 0 commits (fsync, rename) — all inside the
   temporary checkpoint directory, which is renamed into place before
   latest_checkpointed_iteration.txt is updated.                                            */
#define MG__CKPT_FILES 3
static const char *const mg__ckpt_file[MG__CKPT_FILES] = {"model", "optimizer", "optimizer_sq"};
static const char *const mg__ckpt_suffix[MG__CKPT_FILES] = {"", ".exp_avg", ".exp_avg_sq"};

/* The tensor list of a checkpoint file: every parameter of the WHOLE model (whatever this
   rank's pipeline stage holds, so that all ranks name the same header), global shape (V word-
   embedding rows). A rank finds its tensors in it by name (mg__ckpt_visit).               */
static int mg__ckpt_begin(mg_gpt *m, mg_st_writer *w, const char *path, const char *tag,
                          int file, int create, char *err, size_t errlen) {
    int cap = MG_LAYER_TENSORS * m->cfg.n_layer + MG_GLOBAL_TENSORS, n_all;
    mg_gpt_layout whole = mg_gpt_layout_single(&m->cfg, 1, 1, 1);
    mg_param_desc *all = (mg_param_desc *)MG_MALLOC(sizeof(mg_param_desc) * (size_t)cap);
    mg_st_spec *spec = (mg_st_spec *)MG_MALLOC(sizeof(mg_st_spec) * (size_t)cap);
    char (*names)[120] = (char (*)[120])MG_MALLOC(120 * (size_t)cap);
    const char *keys[6] = {"num_layers", "hidden_size", "num_attention_heads",
                           "max_position_embeddings", "vocab_size", "format"};
    char vals[5][24], why[MG_ERRLEN];
    const char *vp[6];
    int i, rc = 0, with_meta = file == 0;
    MG_ASSERT(all && spec && names, "out of host memory");
    n_all = mg__build_params(&m->cfg, &whole, all, NULL);
    snprintf(vals[0], 24, "%d", m->cfg.n_layer);
    snprintf(vals[1], 24, "%d", m->cfg.hidden);
    snprintf(vals[2], 24, "%d", m->cfg.n_head);
    snprintf(vals[3], 24, "%d", m->cfg.max_pos);
    snprintf(vals[4], 24, "%d", m->cfg.vocab_size);
    for (i = 0; i < 5; i++) vp[i] = vals[i];
    vp[5] = "pt";
    for (i = 0; i < n_all; i++) {
        const mg_param_desc *d = &all[i];
        memset(&spec[i], 0, sizeof spec[i]);
        snprintf(names[i], 120, "%s%s", d->name, mg__ckpt_suffix[file]);
        spec[i].name = names[i];
        spec[i].dtype = MG_ST_F32;
        spec[i].ndim = d->ndim;
        spec[i].shape[0] = mg__vocab_rows(d->kind) ? m->cfg.vocab_size : d->shape[0];
        spec[i].shape[1] = d->shape[1];
    }
    if (mg_st_writer_begin(w, path, tag, create, spec, n_all, with_meta ? keys : keys + 5,
                           with_meta ? vp : vp + 5, with_meta ? 6 : 1, why, sizeof why))
        rc = mg__err(err, errlen, "%s", why);
    MG_FREE(all);
    MG_FREE(spec);
    MG_FREE(names);
    return rc;
}

/* One owned piece: local-shard elements [e0, e1) of tensor d (values in host `vals`) into the
   file tensor `ti` at their global positions. Row-split shards are contiguous in the global
   tensor; column-split ones are a segment per row. Word-embedding rows >= V are not stored. */
static int mg__ckpt_write_piece(mg_gpt *m, mg_st_writer *w, int ti, const mg_param_desc *d,
                                const float *vals, int64_t e0, int64_t e1, char *err,
                                size_t errlen) {
    int64_t lcols = d->ndim == 2 ? d->local_shape[1] : 1, gcols = d->ndim == 2 ? d->shape[1] : 1;
    int64_t rows_stored = mg__vocab_rows(d->kind) ? m->cfg.vocab_size : d->shape[0], e = e0;
    char why[MG_ERRLEN];
    while (e < e1) {
        int64_t r = e / lcols, c = e % lcols, grow = d->row0 + r, n;
        /* a run of whole rows when the columns are not split, else up to the row's end */
        n = lcols == gcols ? e1 - e : (lcols - c < e1 - e ? lcols - c : e1 - e);
        if (grow * gcols + d->col0 + c + n > rows_stored * gcols)   /* padding rows: dropped */
            n = rows_stored * gcols - (grow * gcols + d->col0 + c);
        if (n <= 0) break;
        if (mg_st_writer_write(w, ti, grow * gcols + d->col0 + c, vals + (e - e0), n, why,
                               sizeof why))
            return mg__err(err, errlen, "%s", why);
        e += n;
    }
    return 0;
}

/* A long save's progress on args.progress: after MG_PROGRESS_AFTER_MS (3 s), every 2 s, the
   share of this rank's elements written (the writer rank's share stands for all: every rank
   writes its pieces at the same time).                                                      */
#ifndef MG_PROGRESS_AFTER_MS
#define MG_PROGRESS_AFTER_MS 3000
#endif
typedef struct {
    FILE *out; const char *what;
    double t0, last;
    int64_t done, total;
} mg__progress;
static void mg__progress_add(mg__progress *p, int64_t n) {
    double now;
    p->done += n;
    if (!p->out || (now = mg__now_ms()) - p->t0 < MG_PROGRESS_AFTER_MS ||
        now - p->last < (MG_PROGRESS_AFTER_MS < 2000 ? MG_PROGRESS_AFTER_MS : 2000)) return;
    p->last = now;
    fprintf(p->out, "saving %s: %.0f%% of this rank's %.1f MB written, %.0f s\n", p->what,
            100.0 * (double)p->done / (double)(p->total > 0 ? p->total : 1),
            (double)p->total * 4 / 1048576.0, (now - p->t0) * 1e-3);
    fflush(p->out);
}

typedef struct {
    mg_gpt *m; mg_st_writer *w; const char *suffix; const float *src; float *host;
    int use_moment_index, has_embedding; int rc; char *err; size_t errlen;
    int count_only;                      /* a first pass: only the elements, into prog->total */
    mg__progress *prog;
} mg__ckpt_acc;
static void mg__ckpt_visit(void *user, const mg_param_desc *d, int64_t x0, int64_t x1,
                           int64_t moment0) {
    mg__ckpt_acc *acc = (mg__ckpt_acc *)user;
    int64_t src0 = acc->use_moment_index ? moment0 : x0;
    char name[120];
    int ti;
    if (acc->rc || (d->split == MG_TP_REPLICATED && acc->m->layout.tp_rank != 0)) return;
    if (d->kind == MG_WTE && !acc->has_embedding) return;  /* the last stage's tied copy */
    if (acc->count_only) { acc->prog->total += x1 - x0; return; }
    snprintf(name, sizeof name, "%s%s", d->name, acc->suffix);
    ti = mg_st_writer_find(acc->w, name);
    MG_ASSERT(ti >= 0, "checkpoint header without %s", name);
    mg_copy_to_host(acc->m->ctx, acc->host, acc->src + src0, (size_t)(x1 - x0) * sizeof(float));
    acc->rc = mg__ckpt_write_piece(acc->m, acc->w, ti, d, acc->host, x0 - d->offset,
                                   x1 - d->offset, acc->err, acc->errlen);
    mg__progress_add(acc->prog, x1 - x0);
}

/* Max over the world of a flag (0/1): a failure anywhere fails everywhere. Collective. */
static int mg__world_any(mg_trainer *tr, int bad) {
    mg_comm *comm = tr->args.comm;
    float flag = bad ? 1.0f : 0.0f;
    if (!comm || comm->world_size == 1) return bad != 0;
    mg_copy_to_device(&tr->ctx, tr->dp.dev_scalars, &flag, sizeof flag);
    mg_all_reduce(comm, &comm->world, tr->dp.dev_scalars, tr->dp.dev_scalars, 1, MG_F32, MG_MAX);
    mg_copy_to_host(&tr->ctx, &flag, tr->dp.dev_scalars, sizeof flag);
    return flag != 0;
}

/* The verdict of world rank 0 (the writer) on every rank of the job: nonzero rc there makes
   all return -1. Collective over the world; no-op with one rank.                           */
static int mg__world_agree(mg_trainer *tr, int rc) {
    return mg__group_agree(&tr->model, tr->args.comm, MG_GROUP_WORLD, rc);
}

/* A test-only hook (tests/test_exits.c, docs/operating.md): with the environment variable
   MG_TEST_SIGTERM_IN_SAVE=K (every rank) or K:R (world rank R only), the save of iteration K
   raises SIGTERM in this process once its model file is written and its optimizer files not
   yet — a signal at a known point inside a save. Unset, nothing happens.                   */
static void mg__test_sigterm_in_save(const mg_trainer *tr) {
    const char *v = getenv("MG_TEST_SIGTERM_IN_SAVE");
    long long k = -1;
    int r = -1, n = v ? sscanf(v, "%lld:%d", &k, &r) : 0;
    if (n < 1 || k != (long long)tr->iteration) return;
    if (n == 2 && (tr->comm ? tr->comm->world_rank : 0) != r) return;
    raise(SIGTERM);
}

MGDEF int mg_trainer_save(mg_trainer *tr, const char *dir, char *err, size_t errlen) {
    char iterdir[MG_PATH_MAX], tmp[MG_PATH_MAX], path[MG_PATH_MAX], why[MG_ERRLEN], latest[32], tag[32];
    char *state;
    int rc = 0, w = tr->writer, f, i, open_files = 0;
    int n_files = tr->args.no_save_optim ? 1 : MG__CKPT_FILES;   /* --no-save-optim: model */
    mg_gpt *m = &tr->model;
    mg_st_writer files[MG__CKPT_FILES];
    float *host;
    int64_t max_numel = 1;
    mg__progress prog;
    int pass;
    mg__trainer_pull(tr, NULL);   /* the step count and the loss scaler from the device */
    if (mg__path(iterdir, sizeof iterdir, "%s/iter_%07lld", dir, (long long)tr->iteration) ||
        mg__path(tmp, sizeof tmp, "%s.tmp.save%lld/optimizer_sq.safetensors.tmp.save%lld",
                 iterdir, (long long)tr->iteration, (long long)tr->iteration) ||
        mg__path(path, sizeof path, "%s/latest_checkpointed_iteration.txt.tmp.%ld", dir,
                 (long)getpid()))   /* the longest names a save makes (all ranks agree) */
        return mg__err(err, errlen, "%.60s…: a directory name of %zu characters, too long for "
                       "the files a save writes (at most %d)", dir, strlen(dir),
                       MG_PATH_MAX - 1 - MG__DIR_ROOM);
    memset(&prog, 0, sizeof prog);
    prog.out = w ? tr->args.progress : NULL;
    prog.what = iterdir;
    prog.t0 = mg__now_ms();
    snprintf(tag, sizeof tag, "save%lld", (long long)tr->iteration);  /* common to all ranks */
    mg__path(tmp, sizeof tmp, "%s.tmp.%s", iterdir, tag);      /* mg_atomic_dir_begin's; fits */
    if (w && !mg__is_dir(dir) && mkdir(dir, 0755) != 0)
        rc = mg__err(err, errlen, "--save %s: cannot create directory (%s)", dir,
                     strerror(errno));
    if (w && !rc && mg_atomic_dir_begin(iterdir, tag, tmp, sizeof tmp, why, sizeof why))
        rc = mg__err(err, errlen, "%s", why);
    /* rank 0 creates the files at their final size; then every other rank joins */
    for (f = 0; f < n_files && w && !rc; f++) {
        mg__path(path, sizeof path, "%s/%s.safetensors", tmp, mg__ckpt_file[f]);   /* fits */
        if (mg__ckpt_begin(m, &files[f], path, tag, f, 1, err, errlen)) rc = -1;
        else open_files = f + 1;
    }
    if (mg__world_agree(tr, rc)) {
        for (f = 0; f < open_files; f++) mg_st_writer_abort(&files[f]);
        if (w && !mg__is_dir(iterdir)) mg_atomic_dir_abort(tmp);
        return w ? -1 : mg__err(err, errlen, "rank 0 could not save");
    }
    for (f = 0; f < n_files && !w && !rc; f++) {
        mg__path(path, sizeof path, "%s/%s.safetensors", tmp, mg__ckpt_file[f]);   /* fits */
        if (mg__ckpt_begin(m, &files[f], path, tag, f, 0, err, errlen)) rc = -1;
        else open_files = f + 1;
    }
    for (i = 0; i < m->n_params; i++)
        if (m->params[i].numel > max_numel) max_numel = m->params[i].numel;
    host = (float *)MG_MALLOC((size_t)max_numel * sizeof(float));
    MG_ASSERT(host, "out of host memory");
    for (pass = 0; pass < 2; pass++)    /* pass 0 counts the elements, pass 1 writes them */
    for (f = 0; f < open_files && !rc; f++) {
        mg__ckpt_acc acc;
        if (pass == 1 && f == 1) mg__test_sigterm_in_save(tr);
        acc.count_only = pass == 0;
        acc.prog = &prog;
        acc.m = m;
        acc.w = &files[f];
        /* the fp32 parameters: the model's, or this rank's pieces of a sharded master */
        acc.src = f == 1 ? tr->opt.m : f == 2 ? tr->opt.v : tr->opt.master ? tr->opt.master
                                                                          : m->param_buf;
        acc.host = host;
        acc.use_moment_index = f > 0 || tr->opt.master;
        acc.suffix = mg__ckpt_suffix[f];
        acc.has_embedding = 0;
        for (i = 0; i < m->layout.n_chunks; i++)
            acc.has_embedding |= m->layout.chunks[i].has_embedding;
        acc.rc = 0;
        acc.err = err;
        acc.errlen = errlen;
        if (acc.use_moment_index && tr->opt.dp)           /* shards: each owner its pieces */
            mg__for_owned(&tr->opt, m, mg__ckpt_visit, &acc);
        else if (tr->dp_rank == 0 && tr->cp_rank == 0)   /* one replica writes what every
                                                            replica holds */
            for (i = 0; i < m->n_params && !acc.rc; i++)
                mg__ckpt_visit(&acc, &m->params[i], m->params[i].offset,
                               m->params[i].offset + m->params[i].numel, m->params[i].offset);
        rc = acc.rc;
    }
    MG_FREE(host);
    for (f = 0; f < open_files && !w; f++)   /* joiners: fsync and close */
        if (mg_st_writer_close(&files[f], why, sizeof why) && !rc)
            rc = mg__err(err, errlen, "%s", why);
    if (mg__world_any(tr, rc)) {          /* some rank failed: nothing is committed */
        for (f = 0; f < open_files && w; f++) mg_st_writer_abort(&files[f]);
        if (w) mg_atomic_dir_abort(tmp);
        return rc ? -1 : mg__err(err, errlen, "another rank could not write its part");
    }
    if (w) {   /* rank 0: commit the files, state.json, the directory, then "latest" */
        for (f = 0; f < n_files; f++)
            if (mg_st_writer_commit(&files[f], why, sizeof why) && !rc)
                rc = mg__err(err, errlen, "%s", why);
        state = mg__state_json(tr);
        mg__path(path, sizeof path, "%s/state.json", tmp);                          /* fits */
        if (!rc && mg_atomic_write(path, state, strlen(state), why, sizeof why))
            rc = mg__err(err, errlen, "%s", why);
        MG_FREE(state);
        if (!rc && mg_atomic_dir_commit(tmp, iterdir, why, sizeof why))
            rc = mg__err(err, errlen, "%s", why);
        if (rc) mg_atomic_dir_abort(tmp);
        snprintf(latest, sizeof latest, "%lld\n", (long long)tr->iteration);
        mg__path(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);   /* fits */
        if (!rc && mg_atomic_write(path, latest, strlen(latest), why, sizeof why))
            rc = mg__err(err, errlen, "%s", why);
    }
    if (mg__world_agree(tr, rc)) return w ? -1 : mg__err(err, errlen, "rank 0 could not save");
    tr->last_saved = tr->iteration;
    return 0;
}

MGDEF int mg_trainer_export_hf(mg_trainer *tr, const char *dir, char *err, size_t errlen) {
    mg_adamw_gather_master(&tr->opt, &tr->model);
    return mg_gpt_export_hf(&tr->model, dir, err, errlen);
}

/* Loads one moment buffer from a checkpoint's optimizer file (names name + suffix). */
static int mg__load_moment(mg_gpt *m, float *flat, const char *path, const char *suffix,
                           char *err, size_t errlen) {
    mg_weights_file f;
    char why[MG_ERRLEN];
    float *global = (float *)MG_MALLOC((size_t)mg__max_global(m) * sizeof(float));
    int i, rc = 0;
    MG_ASSERT(global, "out of host memory");
    memset(&f, 0, sizeof f);
    f.kind = MG_WEIGHTS_MEGATRON;
    f.cfg = m->cfg;
    snprintf(f.path, sizeof f.path, "%s", path);
    snprintf(f.prefix, sizeof f.prefix, "%s", suffix);   /* a MEGATRON file's name suffix */
    if (mg_st_open(path, &f.st, why, sizeof why)) {
        MG_FREE(global);
        return mg__err(err, errlen, "%s", why);
    }
    for (i = 0; i < m->n_params && !rc; i++) {
        rc = mg__weights_get(&f, &m->cfg, &m->params[i], global, 0, err, errlen);
        if (!rc) mg_gpt_global_to_shard(m, i, flat, global);
    }
    mg_st_close(&f.st);
    MG_FREE(global);
    return rc;
}

/* A long load's progress on args.progress (world rank 0): after MG_PROGRESS_AFTER_MS, each
   of the three files as it is read.                                                        */
static void mg__load_progress(const mg_trainer *tr, const char *path, int k, double t0) {
    double now = mg__now_ms();
    if (!tr->writer || !tr->args.progress || now - t0 < MG_PROGRESS_AFTER_MS) return;
    fprintf(tr->args.progress, "loading %s: read (file %d of 3), %.0f s\n", path, k,
            (now - t0) * 1e-3);
    fflush(tr->args.progress);
}

MGDEF int mg_trainer_load(mg_trainer *tr, const char *dir, char *err, size_t errlen) {
    char path[MG_PATH_MAX];
    int64_t iter = 0;
    mg__ckpt_state st;
    mg_weights_file wf;
    double t0 = mg__now_ms();
    int rc = mg__latest_iteration(dir, &iter, err, errlen);
    if (rc <= 0) return rc;
    if (mg__path(path, sizeof path, "%s/iter_%07lld/optimizer_sq.safetensors", dir,
                 (long long)iter))   /* the longest name read: every other one fits too */
        return mg__err(err, errlen, "%.60s…: a directory name of %zu characters, too long for "
                       "the files of its checkpoint", dir, strlen(dir));
    if (rc == 2) {       /* 'release': the weights only (Megatron: no optimizer, iteration 0) */
        mg__path(path, sizeof path, "%s/release", dir);                             /* fits */
        if (mg_weights_open(&wf, path, err, errlen)) return -1;
        rc = mg_gpt_import(&tr->model, &wf, err, errlen);
        mg_weights_close(&wf);
        if (rc) return -1;
        mg_adamw_take_master(&tr->opt, &tr->model);
        return 1;
    }
    mg__path(path, sizeof path, "%s/iter_%07lld/state.json", dir, (long long)iter);
    if (mg__read_state(path, iter, &st, err, errlen)) return -1;
    mg__path(path, sizeof path, "%s/iter_%07lld/model.safetensors", dir, (long long)iter);
    if (mg_weights_open(&wf, path, err, errlen)) return -1;
    if (wf.kind != MG_WEIGHTS_MEGATRON) {
        mg_weights_close(&wf);
        return mg__err(err, errlen, "%s: not a megatron.h checkpoint model file", path);
    }
    rc = mg_gpt_import(&tr->model, &wf, err, errlen);
    mg_weights_close(&wf);
    if (rc) return -1;
    mg__load_progress(tr, path, 1, t0);
    if (tr->args.no_load_optim && !tr->args.load_main_params_from_ckpt && tr->model.param16) {
        /* Megatron's reload_model_params: with no optimizer state loaded, the fp32 master
           weights are the 16-bit model weights widened — the checkpoint's rounded once */
        mg_gpt *m = &tr->model;
        mg_tensor f32 = mg_tensor_wrap(mg_gpt_fp32_params(m), MG_F32, 1, &m->n_elems);
        mg_tensor w16 = mg_tensor_wrap(m->param16, m->dtype, 1, &m->n_elems);
        mg_cast(m->ctx, &w16, &f32);
        mg_cast(m->ctx, &f32, &w16);
    }
    mg_adamw_take_master(&tr->opt, &tr->model);   /* before the moments use the staging */
    /* moments: straight into the flat buffers, or (distributed optimizer) into the free
       gradient buffer, then this rank's pieces out of it. --no-load-optim (Megatron's
       load_checkpoint with args.no_load_optim) keeps the fresh optimizer's zeros, its step 0
       and its loss scaler.                                                                */
    if (!tr->args.no_load_optim) {
        static const char *const file[2] = {"optimizer", "optimizer_sq"};
        static const char *const suffix[2] = {".exp_avg", ".exp_avg_sq"};
        float *moment[2] = {tr->opt.m, tr->opt.v};
        int k;
        for (k = 0; k < 2; k++) {
            mg__path(path, sizeof path, "%s/iter_%07lld/%s.safetensors", dir, (long long)iter,
                     file[k]);
            if (mg__load_moment(&tr->model, tr->opt.dp ? tr->model.grad_buf : moment[k], path,
                                suffix[k], err, errlen)) return -1;
            mg__load_progress(tr, path, 2 + k, t0);
            if (tr->opt.dp) mg_dp_moment_flat(&tr->dp, moment[k], tr->model.grad_buf, 0);
        }
        tr->opt.step = st.adam_step;
    }
    mg_gpt_zero_grad(&tr->model);
    tr->iteration = st.iteration;
    tr->consumed_samples = st.consumed;
    tr->consumed_valid_samples = st.consumed_valid;
    tr->skipped_iters = st.skipped;
    tr->nan_iters = st.nan_iters;
    if (st.has_scaler && tr->scaler.dynamic && !tr->args.no_load_optim) {   /* Megatron
                                                   restores the grad scaler with the rest */
        tr->scaler.scale = st.loss_scale;
        tr->scaler.growth_tracker = st.growth_tracker;
        tr->scaler.hysteresis_tracker = st.hysteresis_tracker;
    }
    mg__trainer_push(tr);                         /* the device's optimizer scalars too */
    tr->loaded_iteration = tr->last_saved = st.iteration;
    return 1;
}

/* =============================================================================================
   5. Trainer: generation
   ========================================================================================== */
static void mg__print_token(FILE *out, int64_t tok, int bytes) {
    if (!out) return;
    if (!bytes) { fprintf(out, "%lld ", (long long)tok); return; }
    if (tok == '\n' || tok == '\t' || (tok >= 32 && tok < 127)) fputc((int)tok, out);
    else fprintf(out, "\\x%02x", (unsigned)tok);
}

/* One forward of the microbatch `rows` (host [B, T+1]) through the whole model, slot 0 of
   every chunk: virtual stage s = 0 … p·v−1 runs on pipeline rank s % p as its chunk s / p;
   its input comes from stage s−1 — received from that stage's rank (p > 1; the ranks of a
   stage's tensor group each exchange their own [n, C] rows with their counterpart), or copied
   from the previous chunk on this rank (p = 1) — and with a pipeline its output is sent on
   to stage s+1. Afterwards the last stage (pipeline rank p−1) holds the logits. No dropout
   (m->training is 0), so every layout computes the serial run's activations.              */
static void mg__generate_forward(mg_gpt *m, const int32_t *rows) {
    int p = m->layout.pp_size, S = p * m->layout.n_chunks, me = m->layout.pp_rank, s;
    mg_comm *comm = m->layout.comm;
    for (s = 0; s < S; s++) {
        int c = s / p;
        mg_tensor *in = mg_gpt_chunk_input(m, c, 0), *out = mg_gpt_chunk_output(m, c, 0);
        if (s % p != me) continue;
        mg_gpt_set_batch(m, c, 0, rows);          /* tokens (first stage), targets (last) */
        if (s > 0 && p > 1)
            mg_recv(comm, &comm->pipeline, in->data, mg_numel(in), in->dtype, (s - 1) % p);
        else if (s > 0)
            mg_copy(m->ctx, in->data, mg_gpt_chunk_output(m, c - 1, 0)->data, mg_nbytes(in));
        mg_gpt_forward(m, c, 0, 0);
        if (s < S - 1 && p > 1)
            mg_send(comm, &comm->pipeline, out->data, mg_numel(out), out->dtype, (s + 1) % p);
    }
}

MGDEF void mg_trainer_generate(mg_trainer *tr, int64_t n_tokens, FILE *out) {
    int T = tr->cfg.seq_len, V = tr->cfg.vocab_size, B = (int)tr->args.micro_batch_size, b;
    int p = tr->model.layout.pp_size, last = tr->model.layout.pp_rank == p - 1;
    int64_t n_prompt = T / 4 < 16 ? (T / 4 > 0 ? T / 4 : 1) : 16, len = 0, i, n_text = 0;
    const char *text = tr->tok ? tr->args.prompt : NULL;
    int32_t eod = tr->tok ? mg_tokenizer_eod(tr->tok) : -1;
    int64_t cap;
    int32_t *seq, *rows = (int32_t *)MG_MALLOC(sizeof(int32_t) * (size_t)B * (size_t)(T + 1));
    float *logits = (float *)MG_MALLOC(sizeof(float) * (size_t)V);
    uint64_t key = mg__param_key((uint64_t)tr->args.seed, "sample");
    int bytes = V <= 256 && !tr->tok;
    /* --prompt: its ids (the model sees the last T of them) */
    if (text) n_prompt = mg_tokenizer_encode(tr->tok, text, strlen(text), 0, NULL, 0);
    cap = n_prompt + n_tokens + 1;
    seq = (int32_t *)MG_MALLOC(sizeof(int32_t) * (size_t)cap);
    MG_ASSERT(seq && rows && logits, "out of host memory");
    if (text) len = mg_tokenizer_encode(tr->tok, text, strlen(text), 0, seq, cap);
    /* else: the start of the first validation (else training) sample */
    if (!text) {
        const mg_blend *smp = tr->has_valid ? &tr->valid_data : &tr->train_data;
        int32_t *first = (int32_t *)MG_MALLOC(sizeof(int32_t) * (size_t)(T + 1));
        char why[MG_ERRLEN];
        MG_ASSERT(first, "out of host memory");
        if (smp->n && !mg_blend_get(smp, 0, first, why, sizeof why))
            for (len = 0; len < n_prompt; len++) seq[len] = first[len];
        MG_FREE(first);
    }
    if (!len) seq[len++] = 0;
    if (out) fprintf(out, "----- sample (%lld tokens after a %lld-token prompt, temperature 1) -----\n",
            (long long)n_tokens, (long long)len);
    n_text = len;
    if (!tr->tok) {   /* with a tokenizer the text is decoded at the end */
        for (i = 0; i < len; i++) mg__print_token(out, seq[i], bytes);
        if (out) fprintf(out, bytes ? "" : "| ");
    }
    mg_gpt_sync_weights(&tr->model);     /* 16-bit: the working copy of the master weights */
    for (i = 0; i < n_tokens; i++) {
        /* the last T tokens as row 0 of a microbatch (other rows repeat it); next-token
           distribution at its last position, drawn on the last stage and broadcast over the
           pipeline group (every tensor rank of the last stage draws the same token) */
        int64_t w = len < T ? len : T, start = len - w, t;
        double maxl = -1e30, sum = 0, u, acc = 0;
        int next = V - 1, v;
        for (b = 0; b < B; b++)
            for (t = 0; t <= T; t++)
                rows[b * (T + 1) + t] = t < w ? seq[start + t] : 0;
        mg__generate_forward(&tr->model, rows);
        if (last) {
            mg_gpt_logits_row(&tr->model, 0, (int)(w - 1), 0, logits);
            for (v = 0; v < V; v++) if (logits[v] > maxl) maxl = logits[v];
            for (v = 0; v < V; v++) sum += exp(logits[v] - maxl);
            u = mg_rand_uniform(key, (uint64_t)i) * sum;
            for (v = 0; v < V; v++) {
                acc += exp(logits[v] - maxl);
                if (u < acc) { next = v; break; }
            }
        }
        if (p > 1)
            next = (int)mg__group_bcast_f64(&tr->model, &tr->comm->pipeline, next, p - 1);
        if (next == eod) break;          /* the tokenizer's end of document ends the sample */
        seq[len++] = next;
        if (!tr->tok) mg__print_token(out, next, bytes);
    }
    for (i = 0; out && tr->tok && i < 2; i++) {   /* prompt | generated tokens, as text */
        const int32_t *ids = i ? seq + n_text : seq;
        int64_t n = i ? len - n_text : n_text, nb = mg_tokenizer_decode(tr->tok, ids, n, NULL, 0);
        char *txt = (char *)MG_MALLOC((size_t)(nb > 0 ? nb : 1));
        MG_ASSERT(txt, "out of host memory");
        nb = mg_tokenizer_decode(tr->tok, ids, n, txt, nb);
        fwrite(txt, 1, (size_t)(nb > 0 ? nb : 0), out);
        fprintf(out, i ? "" : "|");
        MG_FREE(txt);
    }
    if (out && tr->tok && len - n_text < n_tokens)
        fprintf(out, "\n(end of document after %lld tokens)", (long long)(len - n_text));
    if (out) {
        fprintf(out, "\n-----\n");
        fflush(out);
    }
    MG_FREE(seq);
    MG_FREE(rows);
    MG_FREE(logits);
}

/* =============================================================================================
   5. Trainer: loss curves as a picture (SVG, no server)
   ========================================================================================== */
/* One plotted quantity: its JSONL key, the panel it is drawn in, its legend and colour. */
typedef struct mg__curve { const char *key, *label, *color; int panel; } mg__curve;
static const mg__curve mg__curves[] = {
    {"lm_loss", "training loss", "#1f77b4", 0},
    {"valid_lm_loss", "validation loss", "#ff7f0e", 0},
    {"lr", "learning rate", "#2ca02c", 1},
    {"grad_norm", "grad norm", "#d62728", 2},
    {"tokens_per_sec", "tokens per second", "#9467bd", 3},
};
static const char *const mg__panel_titles[] = {"lm loss", "learning rate", "grad norm",
                                               "throughput (tokens/s)"};
/* Panels whose values may be drawn on a log scale: a loss and a grad norm fall over decades
   (a warm-up, a spike); a learning rate decays to ~0 and reads best linear, as tokens/s. */
static const int mg__panel_may_log[] = {1, 0, 1, 0};
#define MG__NCURVES ((int)(sizeof mg__curves / sizeof mg__curves[0]))
#define MG__NPANELS 4

typedef struct mg__points { double *it, *v; int64_t n, cap; } mg__points;

/* Adds (it, v) to a curve. A point at or before the curve's last iteration is a resumed
   run logging again from its checkpoint: the points from `it` on are the earlier run's
   lost work and are replaced, so the curve joins the runs as one.                       */
static void mg__points_add(mg__points *p, double it, double v) {
    while (p->n > 0 && p->it[p->n - 1] >= it) p->n--;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->it = (double *)realloc(p->it, sizeof(double) * (size_t)p->cap);
        p->v = (double *)realloc(p->v, sizeof(double) * (size_t)p->cap);
        MG_ASSERT(p->it && p->v, "out of host memory");
    }
    p->it[p->n] = it;
    p->v[p->n++] = v;
}

/* The number after "key": on a JSON line (0 if absent or null). */
static int mg__json_line_num(const char *line, const char *key, double *v) {
    char pat[64];
    const char *p;
    char *end;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    if (!(p = strstr(line, pat))) return 0;
    *v = strtod(p + strlen(pat), &end);
    return end != p + strlen(pat) && isfinite(*v);
}

/* Axis tick labels: 3 significant digits. */
static void mg__svg_num(char *out, size_t cap, double v) {
    snprintf(out, cap, "%.3g", v);
}

/* A round tick step (1, 2 or 5 times a power of ten) giving about 5 ticks over [lo, hi]. */
static double mg__tick_step(double lo, double hi) {
    double raw = (hi - lo) / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* An axis range that can be drawn: a constant series, or one whose spread is below the
   doubles' resolution at its magnitude (3.0 and 3.0000000000000004; iterations 1e17 and
   1e17 + 16), is widened to its middle ± pad (at least a millionth of its magnitude, so
   that the widening is itself representable): ticks, and positions (v − lo) / (hi − lo),
   then stay distinct and finite.                                                         */
static void mg__plot_widen(double *lo, double *hi, double pad) {
    double mag = fmax(fabs(*lo), fabs(*hi)), mid = *lo / 2 + *hi / 2;
    if (*hi - *lo > 1e-9 * mag) return;
    if (pad < 1e-6 * mag) pad = 1e-6 * mag;
    *lo = mid - pad;
    *hi = mid + pad;
}

MGDEF void mg_plot_default_path(char *out, size_t cap, const char *jsonl) {
    size_t n = strlen(jsonl);
    if (n > 6 && !strcmp(jsonl + n - 6, ".jsonl")) n -= 6;
    snprintf(out, cap, "%.*s.svg", (int)n, jsonl);
}

MGDEF int mg_plot_jsonl(const char *jsonl, const char *svg, char *err, size_t errlen) {
    /* geometry: panels stacked, one shared iteration axis                                  */
    const double W = 960, PH = 200, L = 90, R = 190, T = 50, GAP = 50;
    mg__points pts[MG__NCURVES];
    FILE *in = fopen(jsonl, "rb"), *out;
    char *line = NULL, num[64];
    size_t cap = 0;
    double xmin = INFINITY, xmax = -INFINITY;
    char tmp[4200];
    int64_t n_lines = 0, k;
    int c, p, rc = 0, read_errno;
    if (!in) return mg__err(err, errlen, "%s: cannot open (%s)", jsonl, strerror(errno));
    if (mg_same_file(jsonl, svg)) {
        fclose(in);
        return mg__err(err, errlen, "%s: the picture would overwrite the log it draws (give "
                       "another output name)", svg);
    }
    memset(pts, 0, sizeof pts);
    for (;;) {                     /* one JSON object per line: getline-free, grows the buffer */
        size_t len = 0;
        int ch;
        while ((ch = fgetc(in)) != EOF && ch != '\n') {
            if (len + 2 > cap) {
                cap = cap ? 2 * cap : 4096;
                line = (char *)realloc(line, cap);
                MG_ASSERT(line, "out of host memory");
            }
            line[len++] = (char)ch;
        }
        if (len == 0 && ch == EOF) break;
        if (!line) continue;
        line[len] = 0;
        n_lines++;
        {
            double it, v;
            if (!mg__json_line_num(line, "iteration", &it)) continue;
            for (c = 0; c < MG__NCURVES; c++)
                if (mg__json_line_num(line, mg__curves[c].key, &v)) {
                    mg__points_add(&pts[c], it, v);
                    if (it < xmin) xmin = it;
                    if (it > xmax) xmax = it;
                }
        }
        if (ch == EOF) break;
    }
    read_errno = ferror(in) ? errno : 0;        /* a directory opens, then fails to read */
    fclose(in);
    free(line);
    if (read_errno) {
        for (c = 0; c < MG__NCURVES; c++) { free(pts[c].it); free(pts[c].v); }
        return mg__err(err, errlen, "%s: cannot read (%s)", jsonl, strerror(read_errno));
    }
    if (!isfinite(xmin)) {
        for (c = 0; c < MG__NCURVES; c++) { free(pts[c].it); free(pts[c].v); }
        return mg__err(err, errlen, "%s: no logged iteration in %lld lines (want the JSON "
                       "objects gpt_train --log-jsonl writes)", jsonl, (long long)n_lines);
    }
    mg__plot_widen(&xmin, &xmax, 1);
    if (!(out = mg_atomic_fopen(svg, tmp, sizeof tmp, err, errlen))) {
        for (c = 0; c < MG__NCURVES; c++) { free(pts[c].it); free(pts[c].v); }
        return -1;
    }
    fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/"
            "2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12"
            "\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"28"
            "\" font-size=\"16\">training curves of ", W, T + MG__NPANELS * (PH + GAP) + 10, L);
    for (k = 0; jsonl[k]; k++) {               /* the file name, XML-escaped */
        char ch = jsonl[k];
        if (ch == '<') fputs("&lt;", out);
        else if (ch == '>') fputs("&gt;", out);
        else if (ch == '&') fputs("&amp;", out);
        else fputc(ch, out);
    }
    fprintf(out, "</text>\n");
    for (p = 0; p < MG__NPANELS; p++) {
        /* the value axis: the panel's curves' range; log10 for a loss or grad norm whose
           values are all positive and span 30x or more (they read better so)            */
        double lo = INFINITY, hi = -INFINITY, y0 = T + p * (PH + GAP), y1 = y0 + PH;
        double x0 = L, x1 = W - R;
        int logy, legend = 0;
        for (c = 0; c < MG__NCURVES; c++)
            for (k = 0; mg__curves[c].panel == p && k < pts[c].n; k++) {
                if (pts[c].v[k] < lo) lo = pts[c].v[k];
                if (pts[c].v[k] > hi) hi = pts[c].v[k];
            }
        if (!isfinite(lo)) continue;                 /* nothing logged for this panel */
        logy = mg__panel_may_log[p] && lo > 0 && hi / lo >= 30;
        if (logy) { lo = log10(lo); hi = log10(hi); }
        if (hi - lo > 1e-9 * fmax(fabs(lo), fabs(hi))) {
            double m = (hi - lo) * 0.05;  /* 5% margins; a nonnegative quantity stays >= 0 */
            lo = !logy && lo >= 0 && lo - m < 0 ? 0 : lo - m;
            hi += m;
        } else mg__plot_widen(&lo, &hi, lo ? fabs(lo) * 0.1 : 1);
        /* data-* attributes: the axes' pixel box and value ranges (log: of log10 v), so a
           reader can map every point back to (iteration, value)                          */
        fprintf(out, "<g class=\"panel\" data-title=\"%s\" data-x0=\"%.2f\" data-x1=\"%.2f\" "
                "data-y0=\"%.2f\" data-y1=\"%.2f\" data-xmin=\"%.17g\" data-xmax=\"%.17g\" "
                "data-ymin=\"%.17g\" data-ymax=\"%.17g\" data-log=\"%d\">\n",
                mg__panel_titles[p], x0, x1, y0, y1, xmin, xmax, lo, hi, logy);
        fprintf(out, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" "
                "stroke=\"#888\"/>\n<text x=\"%.2f\" y=\"%.2f\" font-weight=\"bold\">%s%s</text>\n",
                x0, y0, x1 - x0, PH, x0, y0 - 8, mg__panel_titles[p],
                logy ? " (log scale)" : "");
        {   /* ticks with grid lines at round values: multiples of a 1-2-5 step (of log10 v
               on a log axis: whole decades when the range spans several), iterations whole;
               the i-th multiple is computed, not summed up, so rounding cannot stall it   */
            double sy = mg__tick_step(lo, hi), sx = mg__tick_step(xmin, xmax), v, i;
            if (logy && sy < 1 && hi - lo >= 2) sy = 1;
            if (sx < 1) sx = 1;
            for (i = ceil(lo / sy); (v = i * sy) <= hi + 1e-9 * sy; i++) {
                double py = y1 - (v - lo) / (hi - lo) * PH;
                mg__svg_num(num, sizeof num, logy ? pow(10, v) : fabs(v) < 1e-9 * sy ? 0 : v);
                fprintf(out, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                        "stroke=\"#eee\"/><text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s"
                        "</text>\n", x0, py, x1, py, x0 - 6, py + 4, num);
            }
            for (i = ceil(xmin / sx); (v = i * sx) <= xmax + 1e-9 * sx; i++) {
                double px = x0 + (v - xmin) / (xmax - xmin) * (x1 - x0);
                mg__svg_num(num, sizeof num, v);
                fprintf(out, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                        "stroke=\"#eee\"/><text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">"
                        "%s</text>\n", px, y0, px, y1, px, y1 + 16, num);
            }
        }
        fprintf(out, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" fill=\"#555\">iteration"
                "</text>\n", (x0 + x1) / 2, y1 + 32);
        for (c = 0; c < MG__NCURVES; c++) {
            const mg__points *q = &pts[c];
            if (mg__curves[c].panel != p || q->n == 0) continue;
            fprintf(out, "<polyline class=\"series\" data-key=\"%s\" fill=\"none\" stroke=\"%s\" "
                    "stroke-width=\"1.5\" points=\"", mg__curves[c].key, mg__curves[c].color);
            for (k = 0; k < q->n; k++) {
                double vy = logy ? log10(q->v[k]) : q->v[k];
                fprintf(out, "%s%.2f,%.2f", k ? " " : "",
                        x0 + (q->it[k] - xmin) / (xmax - xmin) * (x1 - x0),
                        y1 - (vy - lo) / (hi - lo) * PH);
            }
            fprintf(out, "\"/>\n");
            if (q->n <= 50)                          /* few points (validation): dots too */
                for (k = 0; k < q->n; k++) {
                    double vy = logy ? log10(q->v[k]) : q->v[k];
                    fprintf(out, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>",
                            x0 + (q->it[k] - xmin) / (xmax - xmin) * (x1 - x0),
                            y1 - (vy - lo) / (hi - lo) * PH, mg__curves[c].color);
                }
            fprintf(out, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
                    "stroke-width=\"3\"/><text x=\"%.2f\" y=\"%.2f\">%s</text>\n", x1 + 12,
                    y0 + 14 + 18 * legend, x1 + 36, y0 + 14 + 18 * legend, mg__curves[c].color,
                    x1 + 42, y0 + 18 + 18 * legend, mg__curves[c].label);
            legend++;
        }
        fprintf(out, "</g>\n");
    }
    fprintf(out, "</svg>\n");
    rc = mg_atomic_fclose(out, tmp, svg, 1, err, errlen);
    for (c = 0; c < MG__NCURVES; c++) { free(pts[c].it); free(pts[c].v); }
    return rc;
}

#endif /* MEGATRON_IMPLEMENTED */
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
