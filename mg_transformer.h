/* mg_transformer.h — the tensor-parallel transformer layer of Megatron-LM, header-only (MIT
   license at the end of the file). Needs mg_tensor.h (ops) and mg_comm.h (groups) and nothing
   above them: a program can build its own model from these pieces without megatron.h.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_transformer.h"   (includes mg_comm.h and mg_tensor.h)
   examples/tp_block.cu builds a tensor-parallel MLP from section 2 and checks it against the
   serial block; megatron.h builds the GPT model from section 3.

   TOUR
     1. Megatron's communication operators over the tensor group (mg_tp_group): mg_tp_gather
        before a column-parallel layer, mg_tp_reduce after a row-parallel one, each the other's
        backward; plain tensor parallelism or sequence parallelism.
     1b. Context parallelism (mg_cp_group): the load-balanced causal split of the sequence over
        the context group and the ring attention that the layer runs when it has c > 1 ranks.
     2. Tensor-parallel linear layers: ColumnParallelLinear and RowParallelLinear, each forward
        with its input-gradient and weight-gradient halves (so that a pipeline schedule can run
        the weight half later, ZB-H1), on a shared scratch (mg_transformer).
     3. The transformer layer, pre-norm, with Megatron-LM's switches: GPT-2 by default
        (LayerNorm, learned positions outside the layer, multi-head attention, GELU MLP,
        biases) and the Llama family's options (RMSNorm, rotary positions, grouped-query
        attention, a head dimension of its own, SwiGLU MLP, no biases or Q/K/V biases only).
        Its configuration, its parameter tensors and how each is split, the activations one
        microbatch keeps, forward, backward (optionally recomputing the attention core:
        selective recomputation), the deferred weight half, and dropout keyed by global
        coordinates so that masks never depend on the split.

   THE SPLIT (Megatron-LM; Narayanan et al. 2021 §2.3, Korthikanti et al. 2022 §4.2)
     Every rank of the tensor group holds the whole residual stream [N, C] (N = T·B rows,
     sequence-major: row t·B + b) — or, with sequence parallelism, its n = N/t rows
     [r·n, (r+1)·n), i.e. T/t positions — and 1/t of every weight matrix:
       column-parallel  QKV (this rank's query groups: their query heads and key/value
                        heads), MLP-up and SwiGLU's gate (matching slices, so the gated
                        product is local): Y_r = X·A_rᵀ + a_r — needs all of X
       row-parallel     attention-out, MLP-down: partial Z_r = Y_r·B_rᵀ, Z = Σ_r Z_r + b
     and the communication is Megatron's pair of conjugate operators around each block
     (forward / backward):
                         before column-parallel        after row-parallel
       plain TP          f: identity / all-reduce       g: all-reduce / identity
       sequence-par.     all-gather / reduce-scatter    reduce-scatter / all-gather
     Per layer and microbatch that is 2 all-reduces of N·C floats forward and 2 backward
     (8·N·C·(t−1)/t floats over a ring), or with sequence parallelism 4 all-gathers + 4
     reduce-scatters of (t−1)/t·N·C each plus 2 all-gathers in the backward that re-gather the
     layernorm outputs the column-parallel weight gradients need: 10·N·C·(t−1)/t floats.
     Row-parallel biases are added by tensor-parallel rank 0 only, so the sum adds them once;
     their gradients come from the whole (gathered) output gradient, equal on every rank. The
     layernorms under sequence parallelism see their rows only: their gradients are partial
     sums that the caller all-reduces over the tensor group once per iteration
     (mg_gpt_reduce_grads does).

   CONVENTIONS
     Activations are [rows, features] row-major, in the dtype of mg_layer_config (fp32, bf16
     or fp16; every op accumulates in fp32); parameters and their gradients are fp32 views
     (the 16-bit working copy for the weights in mixed precision). Linear weights are (out, in):
     y = x·Wᵀ + b. Parameter gradients ACCUMULATE (+=) over microbatches; activation gradients
     overwrite, except the residual stream's, to which each block adds its branch.
*/
#ifndef MG_TRANSFORMER_H
#define MG_TRANSFORMER_H
#include "mg_tensor.h"
#include "mg_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
   1. Megatron's tensor-parallel operators
     mg_tp_gather  before a column-parallel layer: plain TP — `local` is already the whole
                   activation (Megatron's f / copy_to_tensor_model_parallel_region: identity
                   forward); sequence parallel — all-gather the ranks' row blocks into `full`
                   (gather_from_sequence_parallel_region). Returns the whole activation.
     mg_tp_reduce  after a row-parallel layer: plain TP — all-reduce `partial` in place (g /
                   reduce_from_tensor_model_parallel_region) and return it; sequence parallel
                   — reduce-scatter it into this rank's rows `local` (reduce_scatter_to_
                   sequence_parallel_region) and return `local`.
   Each is the other's backward: the gradient of a gathered input is reduced, the gradient of
   a reduced output is gathered. Row blocks are rank-ordered: rank r holds rows [r·n, (r+1)·n)
   of the [N, …] activation. Device buffers; a group of size 1 communicates nothing.
   ------------------------------------------------------------------------------------------ */
typedef struct mg_tp_group {
    mg_comm *comm;            /* comm->tensor is the group; may be NULL when size is 1         */
    int rank, size;
    int sequence_parallel;    /* in effect: requested and size > 1                            */
} mg_tp_group;
/* The tensor group of comm (set up by mg_comm_setup_groups); comm NULL: one rank. */
MGDEF mg_tp_group mg_tp_group_make(mg_comm *comm, int sequence_parallel);
MGDEF const mg_tensor *mg_tp_gather(const mg_tp_group *g, const mg_tensor *local,
                                    mg_tensor *full);
MGDEF mg_tensor *mg_tp_reduce(const mg_tp_group *g, mg_tensor *partial, mg_tensor *local);
/* In-place sum (MG_SUM) or max (MG_MAX) of n fp32 values over the group. */
MGDEF void mg_tp_all_reduce(const mg_tp_group *g, float *buf, int64_t n, mg_redop op);
/* The group's communicator (fatal when the group has several ranks but no comm). */
MGDEF mg_comm *mg_tp_comm(const mg_tp_group *g);

/* ---------------------------------------------------------------------------------------------
   1b. Context parallelism (Megatron-LM's --context-parallel-size c; Liu et al. 2023, ring
       attention). The c ranks of the context group split every sequence: the T positions are
       cut into 2c chunks of Tc = T/(2c) and rank i holds chunks i and 2c−1−i (the load-balanced
       causal split: the early chunk sees few keys, the late one many, so every rank does the
       same attention work). A rank's T/c local positions are its two chunks in order — local
       row t·B + b, t < Tc in chunk i, t >= Tc in chunk 2c−1−i — and everything but attention
       (norms, linears, MLP, residuals, dropout, the loss) is token-local. Attention is the ring
       (mg_transformer_layer_forward/backward call it when the group has c > 1 ranks):
         forward   the packed K/V of the local tokens ([T/c, B, ng, 2, hd]: key/value heads only,
                   so grouped-query attention moves ng/nh of the heads) travel c − 1 hops around
                   the ring (rank i sends to i+1, receives from i−1, nonblocking, posted before
                   the attention of the block in hand so the transfer overlaps it); each local
                   query chunk attends to each visible key chunk with mg_attn_block_forward at the
                   chunks' global positions, merging the partial outputs by log-sum-exp.
         backward  with the final lse and Δ = rowsum(dO ∘ O), the same ring again: dQ sums in a
                   local fp32 buffer; the fp32 dK, dV of each block travel with it, one hop
                   behind the K/V: while a step computes this rank's contribution to the block
                   in hand, the sum of the previous block leaves and the partial sum of this
                   one arrives (the transfers overlap the step); after c hops each rank holds
                   the dK/dV of its own keys over all queries.
       Causal visibility of chunk pairs: a key chunk is visible to a query chunk iff it is not
       later; invisible pairs are skipped. Dropout masks use the global positions (the block
       API's q_pos0/k_pos0 and T_global), so they equal one rank's.
   ------------------------------------------------------------------------------------------ */
typedef struct mg_cp_group {
    mg_comm *comm;            /* comm->context is the group; may be NULL when size is 1        */
    int rank, size;
} mg_cp_group;
/* The context group of comm (set up by mg_comm_setup_groups_cp); comm NULL: one rank. */
MGDEF mg_cp_group mg_cp_group_make(mg_comm *comm);
/* Global position of the first token of local chunk `half` (0 or 1) of rank `rank` of c, with
   T_local = T/c positions per rank: half 0 is chunk rank, half 1 chunk 2c−1−rank. c = 1: the
   two halves are just the first and second half of the sequence.                           */
MGDEF int64_t mg_cp_chunk_pos(int rank, int c, int64_t T_local, int half);
/* The global position of local position t (0 <= t < T_local).                              */
MGDEF int64_t mg_cp_global_pos(int rank, int c, int64_t T_local, int64_t t);
/* Attention tiles (MG_ATTN_TILE² query-key tiles per batch row and head, mg_attn_block_tiles)
   that rank `rank`'s ring forward computes for T_local = T/c positions: its measure of work.
   The ring's forwards add the same count to mg_transformer.cp_tiles.                       */
MGDEF int64_t mg_cp_attention_tiles(int rank, int c, int64_t T_local);

/* ---------------------------------------------------------------------------------------------
   3a. The layer's configuration and the per-rank state its calls share (declared before
       section 2, whose layers run on that state)
   ------------------------------------------------------------------------------------------ */
typedef struct mg_layer_config {
    int hidden;               /* C                                                              */
    int n_head;               /* query heads of the whole layer                                 */
    int n_group;              /* key/value heads (query groups): n_head for multi-head
                                 attention, fewer for grouped-query, 1 for multi-query; t must
                                 divide it (a rank holds whole groups)                         */
    int head_dim;             /* hd (Megatron's --kv-channels; C / n_head for GPT-2)           */
    int ffn_hidden;           /* F: the MLP's width (4C for GPT-2)                              */
    int seq_len;              /* T: positions this rank holds (T/c of the sequence with context
                                 parallelism, see mg_transformer_set_cp)                       */
    int micro_batch;          /* B: a call processes N = T·B rows                               */
    mg_dtype dtype;           /* activations and their gradients                                */
    mg_norm norm;             /* LayerNorm eps 1e-5 (GPT-2) or RMSNorm                          */
    int swiglu;               /* MLP = down(silu(gate(x)) ⊙ up(x)); else down(GELU(up(x)))      */
    int bias;                 /* biases on the linear layers (0: --disable-bias-linear)       */
    int qkv_bias;             /* a Q/K/V bias even without the others (--add-qkv-bias, Qwen2) */
    int rope;                 /* rotary positions on queries and keys (table: rope, rot_dim)  */
    int rot_dim;              /* rotated dims of each head (even, <= hd)                       */
    mg_rope rope_freq;        /* its frequencies                                                */
    /* dropout (training only; 0 = off): hidden_dropout on the attention-out and MLP-down
       branches before the residual add, attention_dropout on the attention probabilities.
       Masks: mg_dropout_key(dropout_seed, site, global microbatch) at global coordinates.    */
    float hidden_dropout, attention_dropout;
    uint64_t dropout_seed;
    /* the attention core (--attention-backend): MG_ATTN_FLASH, the tiled attention of
       mg_flash_attention_* (keeps a log-sum-exp per row; its backward recomputes the
       probabilities tile by tile), or MG_ATTN_UNFUSED (keeps the [B, nh/t, T, T] probabilities) */
    int attention_backend;
    mg_act_kind act;          /* the MLP's activation without swiglu: MG_ACT_GELU (GPT-2's),
                                 MG_ACT_GELU_ERF or MG_ACT_RELU2                              */
} mg_layer_config;
enum { MG_ATTN_FLASH = 0, MG_ATTN_UNFUSED = 1 };

/* One rank's share of the layers: the configuration, the tensor group, where this rank's
   residual-stream rows sit, and the scratch every forward and backward shares (one
   microbatch at a time). Set up by mg_transformer_init + mg_transformer_claim_scratch.      */
typedef struct mg_transformer {
    mg_ctx *ctx;
    mg_layer_config cfg;
    mg_tp_group tp;           /* tp.sequence_parallel: in effect (requested and t > 1)         */
    int64_t n_rows;           /* n: residual-stream rows on this rank (N, or N/t with sp)      */
    int64_t row0;             /* first global row of them (tp.rank·n with sp, else 0)          */
    mg_tensor dresid;         /* [n, C] gradient of the residual stream: a layer's backward
                                 reads the gradient of its output here and leaves the gradient
                                 of its input here                                            */
    mg_tensor dlocal;         /* [n, C] a branch's gradient after dropout; with sp also the
                                 reduce-scattered input gradient of a column-parallel layer    */
    mg_tensor full_a;         /* [N, C] sp: the all-gathered layernorm output                   */
    mg_tensor full_b;         /* [N, C] row-parallel partial output (sp), gathered gradient
                                 (sp), and the partial input gradient of column-parallel layers */
    mg_tensor dCt, d3C, d4C;  /* [N,Q/t] [N,QKV/t] [N,F/t] with Q = nh·hd and QKV = (nh + 2·ng)·hd
                                 the widths of attention and of qkv                          */
    mg_tensor datt;           /* [B, nh/t, T, T] the unfused attention's probability gradient   */
    mg_tensor dgate;          /* [N, F/t] SwiGLU: the gate's output gradient                    */
    float *rope_cs;           /* rope: device [T·c, rot_dim/2, 2] cos/sin table (mg_rope_table) */
    /* context parallelism (1b; cp.size 1: none): the ring's buffers — two packed K/V blocks
       [N, ng/t, 2, hd] in the activations' dtype (the block in hand and the one arriving), three
       fp32 dK/dV blocks (this rank's contribution, the sum leaving, the partial sum arriving),
       the queries' fp32 gradient [N, nh/t, hd], Δ fp32 [2][B, nh/t, T/2]                   */
    mg_cp_group cp;
    void *cp_kv[2];
    float *cp_dkv[3], *cp_dq, *cp_delta;
    int64_t cp_tiles;         /* attention tiles computed by this rank's forwards (the work
                                 balance of the causal split; mg_attn_block_tiles)             */
} mg_transformer;

/* Fills tf (no allocation): the rows this rank holds follow from tp and cfg. */
MGDEF void mg_transformer_init(mg_transformer *tf, mg_ctx *ctx, const mg_layer_config *cfg,
                               mg_tp_group tp);
/* Makes the layers context-parallel over cp (call after mg_transformer_init, before claiming):
   cfg.seq_len is then this rank's T/c positions; rope tables, dropout masks and attention use
   the global positions of mg_cp_global_pos.                                                  */
MGDEF void mg_transformer_set_cp(mg_transformer *tf, mg_cp_group cp);
/* Claims the shared scratch (see mg_claim: counts with c->ctx NULL). */
MGDEF void mg_transformer_claim_scratch(mg_transformer *tf, mg_claim *c);

/* ---------------------------------------------------------------------------------------------
   2. Tensor-parallel linear layers (Megatron-Core's ColumnParallelLinear / RowParallelLinear).
      Weights are this rank's slices: column-parallel W_r [out/t, in] and b_r [out/t];
      row-parallel W_r [out, in/t] and b [out] (replicated, added on rank 0).
        column forward    y [N, out/t] = gather(x)·W_rᵀ + b_r      x: [n, in] this rank's rows
        column backward   dW_r += dyᵀ·gather(x), db_r += Σ dy; dx = reduce(dy·W_r) [n, in]
        row forward       z [n, out] = reduce(y_r·W_rᵀ) (+ b)      y_r: [N, in/t]
        row backward      g = gather(dz); dy_r = g·W_r [N, in/t]; dW_r += gᵀ·y_r, db += Σ g
      A NULL weight-gradient pointer skips the weight half (run it later with the
      ..._backward_weight function: the deferred W of a zero-bubble schedule).
   ------------------------------------------------------------------------------------------ */
MGDEF void mg_column_parallel_linear_forward(mg_transformer *tf, mg_tensor *y, const mg_tensor *x,
                                             const mg_tensor *w, const mg_tensor *b);
/* Returns dx: tf->dlocal with sequence parallelism, else tf->full_b (both scratch). */
MGDEF mg_tensor *mg_column_parallel_linear_backward(mg_transformer *tf, const mg_tensor *dy,
                                                    const mg_tensor *x, const mg_tensor *w,
                                                    mg_tensor *dw, mg_tensor *db);
/* The same in two steps, for several column-parallel layers reading one x (SwiGLU's up and
   gate): each _partial adds its dy·W_r into tf->full_b (accumulate 0 for the first) and runs
   its weight half; then one mg_column_parallel_reduce returns dx.                         */
MGDEF void mg_column_parallel_linear_backward_partial(mg_transformer *tf, const mg_tensor *dy,
                                                      const mg_tensor *x, const mg_tensor *w,
                                                      mg_tensor *dw, mg_tensor *db,
                                                      int accumulate);
MGDEF mg_tensor *mg_column_parallel_reduce(mg_transformer *tf);
MGDEF void mg_column_parallel_linear_backward_weight(mg_transformer *tf, const mg_tensor *dy,
                                                     const mg_tensor *x, mg_tensor *dw,
                                                     mg_tensor *db);
/* z is this rank's [n, out] rows; the partial product goes through tf->full_b with sp. */
MGDEF void mg_row_parallel_linear_forward(mg_transformer *tf, mg_tensor *z, const mg_tensor *y,
                                          const mg_tensor *w, const mg_tensor *b);
/* dy [N, in/t] = g·W_r where g is dz gathered; keep_g (may be NULL) receives a copy of g, the
   output gradient a deferred weight half needs. Returns g (dz itself without sp).          */
MGDEF const mg_tensor *mg_row_parallel_linear_backward(mg_transformer *tf, mg_tensor *dy,
                                                       const mg_tensor *dz, const mg_tensor *y,
                                                       const mg_tensor *w, mg_tensor *dw,
                                                       mg_tensor *db, mg_tensor *keep_g);
/* The GELU MLP's pair, fused with cuBLASLt epilogues (mg_linear_gelu_forward and
   mg_linear_backward_input_gelu of mg_tensor.h): the column-parallel forward writes both the
   GELU input y_pre and the activation y = gelu(y_pre); the row-parallel backward turns its
   input gradient into dy_pre = (g·W_r) ⊙ gelu'(y_pre) and, when db_pre is non-NULL, adds
   Σ_rows dy_pre to it — the column-parallel layer's bias gradient, which that layer's own
   backward then leaves alone (its db NULL).                                                 */
MGDEF void mg_column_parallel_linear_gelu_forward(mg_transformer *tf, mg_tensor *y,
                                                  mg_tensor *y_pre, const mg_tensor *x,
                                                  const mg_tensor *w, const mg_tensor *b);
MGDEF const mg_tensor *mg_row_parallel_linear_backward_gelu(mg_transformer *tf, mg_tensor *dy_pre,
                                                            mg_tensor *db_pre, const mg_tensor *dz,
                                                            const mg_tensor *y,
                                                            const mg_tensor *y_pre,
                                                            const mg_tensor *w, mg_tensor *dw,
                                                            mg_tensor *db, mg_tensor *keep_g);
/* Where a row-parallel layer (or a vocabulary-parallel embedding) writes its partial sum
   before mg_tp_reduce: straight into its [n, C] destination with plain TP (reduced in place),
   into the [N, C] scratch tf->full_b with sequence parallelism (then reduce-scattered).     */
MGDEF mg_tensor *mg_transformer_partial(mg_transformer *tf, mg_tensor *local);

/* ---------------------------------------------------------------------------------------------
   3b. The layer's parameters, in flat-buffer (and llm.c) order. Split: QKV weight and bias and
       MLP-up (FC1) weight and bias column-parallel (QKV by heads: rows ordered (head, {q,k,v},
       hd), Megatron's interleaved layout, so rank r owns a contiguous block); attention-out
       (PROJ) and MLP-down (FC2) weights row-parallel; layernorms and the row-parallel biases
       replicated.
   ------------------------------------------------------------------------------------------ */
typedef enum {
    MG_LN1_W = 0, MG_LN1_B, MG_QKV_W, MG_QKV_B, MG_PROJ_W, MG_PROJ_B,
    MG_LN2_W, MG_LN2_B, MG_FC1_W, MG_FC1_B, MG_FC2_W, MG_FC2_B, MG_GATE_W, MG_GATE_B,
    MG_LAYER_TENSORS
} mg_layer_tensor;
/* Which tensors the configuration has: norm biases with LayerNorm only, linear biases unless
   disabled (the QKV bias also with qkv_bias), the gate with SwiGLU. A layer's calls take an
   array of MG_LAYER_TENSORS tensors indexed by kind, absent ones with data NULL. FC1 is the
   MLP's up projection in both MLPs.                                                        */
MGDEF int mg_layer_has_tensor(const mg_layer_config *cfg, int kind);
/* Global shape of tensor `kind` (rows, and columns or 0 for a vector), and how it is split:
   1 column-parallel (rows), 2 row-parallel (columns), 0 replicated.                        */
MGDEF int mg_layer_tensor_shape(const mg_layer_config *cfg, int kind, int64_t shape[2]);

/* Activations one layer keeps for its backward, for one microbatch. n = N/t rows with
   sequence parallelism, else n = N.                                                        */
typedef struct mg_layer_acts {
    mg_tensor ln1;            /* [n, C]      input layernorm output                            */
    float *ln1_mean, *ln1_rstd; /* [n]                                                         */
    mg_tensor qkv;            /* [N, 3C/t]   per head [q k v]                                  */
    mg_tensor att;            /* unfused: [B, nh/t, T, T] attention probabilities (before
                                 dropout)                                                      */
    mg_tensor lse;            /* flash: [B, nh/t, T] fp32 log-sum-exp of each query's scores;
                                 with context parallelism [2][B, nh/t, T/2], per local chunk
                                 over all keys of the sequence                                */
    mg_tensor atty;           /* [N, C/t]    attention output before the projection            */
    mg_tensor resid_mid;      /* [n, C]      residual stream after the attention block         */
    mg_tensor ln2;            /* [n, C]                                                         */
    float *ln2_mean, *ln2_rstd;
    mg_tensor fc;             /* [N, F/t]    MLP-up output (pre-activation)                    */
    mg_tensor gate;           /* [N, F/t]    SwiGLU: the gate's output                          */
    mg_tensor fc_gelu;        /* [N, F/t]    the activation: GELU(fc) or silu(gate)⊙fc          */
    mg_tensor out;            /* [n, C]      the layer's output: residual stream                */
    /* a split backward only (defer_w): d loss / d(output) of the four linears, kept by the
       input half for the weight half (dW = doutᵀ·input); dout_fc2 and dout_proj are the whole
       [N, C] gradient (all-gathered with sequence parallelism)                              */
    mg_tensor dout_fc2, dout_fc1, dout_proj, dout_qkv; /* [N,C] [N,F/t] [N,C] [N,QKV/t]     */
    mg_tensor dout_gate;      /* [N, F/t] SwiGLU                                                */
} mg_layer_acts;

/* Claims one layer's activations: everything (own_all) or — for a layer whose attention core
   is recomputed (own_att 0) — everything but the unfused attention's probabilities (the flash
   backend's log-sum-exps are always kept: its backward recomputes the probabilities from
   them, so selective recomputation has nothing more to do); `out` alone (own_out) for
   the last layer of a full-recomputation group; the four output gradients with douts (a
   split backward).                                                                         */
MGDEF void mg_layer_acts_claim(const mg_transformer *tf, mg_claim *c, mg_layer_acts *la,
                               int own_all, int own_att, int own_out, int douts);

/* Which call this is, for dropout: layer (global index) keys the layer's sites, microbatch
   (global index) the masks; dropout_on is the training flag of the forward (its backward must
   pass the same).                                                                           */
typedef struct mg_layer_id {
    int layer;
    int dropout_on;
    uint64_t microbatch;
} mg_layer_id;

/* Dropout sites: 0 the embedding output; for layer l, 1 + 3l the attention probabilities,
   2 + 3l the attention-out branch, 3 + 3l the MLP-down branch.                             */
#define MG_SITE_EMBEDDING 0
#define MG_SITE_ATTN_PROBS(l) (1 + 3 * (uint64_t)(l))
#define MG_SITE_ATTN_OUT(l) (2 + 3 * (uint64_t)(l))
#define MG_SITE_MLP_OUT(l) (3 + 3 * (uint64_t)(l))
/* Hidden dropout on this rank's residual-stream rows (the global [N, C] tensor's rows row0 …
   row0 + n − 1: the mask does not depend on t or sequence parallelism), in place; and the
   gradient through it: dout itself when off, else the masked, scaled copy in tf->dlocal.    */
MGDEF void mg_transformer_dropout(mg_transformer *tf, const mg_layer_id *id, mg_tensor *x,
                                  uint64_t site);
MGDEF const mg_tensor *mg_transformer_dropout_grad(mg_transformer *tf, const mg_layer_id *id,
                                                   const mg_tensor *dout, uint64_t site);

/* One layer, forward: x [n, C] -> la->out [n, C]. w: the layer's MG_LAYER_TENSORS tensors by
   kind (this rank's slices; absent ones with data NULL).                                    */
MGDEF void mg_transformer_layer_forward(mg_transformer *tf, const mg_layer_id *id,
                                        const mg_tensor *w, mg_layer_acts *la,
                                        const mg_tensor *x);
/* One layer, backward: on entry tf->dresid = dL/d(out) [n, C]; on return dL/dx. g: the
   gradient tensors by kind (accumulated). selective: recompute the attention probabilities from the
   kept qkv first (la->att is shared scratch). defer_w: leave the linears' weight halves for
   mg_transformer_layer_backward_weight (the output gradients are kept in la->dout_*).       */
MGDEF void mg_transformer_layer_backward(mg_transformer *tf, const mg_layer_id *id,
                                         const mg_tensor *w, mg_tensor *g, mg_layer_acts *la,
                                         const mg_tensor *x, int selective, int defer_w);
MGDEF void mg_transformer_layer_backward_weight(mg_transformer *tf, mg_tensor *g,
                                                mg_layer_acts *la);

#ifdef __cplusplus
}
#endif
#endif /* MG_TRANSFORMER_H */

/* =============================================================================================
   IMPLEMENTATION
   ========================================================================================== */
#if defined(MG_IMPLEMENTATION) && !defined(MG_IMPLEMENTATION_ELSEWHERE)
#ifndef MG_TRANSFORMER_IMPLEMENTED
#define MG_TRANSFORMER_IMPLEMENTED
#include <stdio.h>
#include <string.h>

/* ---- 1. Communication operators ------------------------------------------------------------ */
MGDEF mg_comm *mg_tp_comm(const mg_tp_group *g) {
    MG_ASSERT(g->comm, "tensor-parallel size %d needs the job's comm (mg_gpt_layout_tp)", g->size);
    return g->comm;
}
MGDEF mg_tp_group mg_tp_group_make(mg_comm *comm, int sequence_parallel) {
    mg_tp_group g;
    g.comm = comm;
    g.rank = comm ? comm->tensor.rank : 0;
    g.size = comm ? comm->tensor.size : 1;
    g.sequence_parallel = sequence_parallel && g.size > 1;
    return g;
}
MGDEF void mg_tp_all_reduce(const mg_tp_group *g, float *buf, int64_t n, mg_redop op) {
    mg_comm *comm;
    if (g->size == 1) return;
    comm = mg_tp_comm(g);
    mg_all_reduce(comm, &comm->tensor, buf, buf, n, MG_F32, op);
}
MGDEF const mg_tensor *mg_tp_gather(const mg_tp_group *g, const mg_tensor *local,
                                    mg_tensor *full) {
    mg_comm *comm;
    if (!g->sequence_parallel) return local;
    MG_ASSERT(mg_numel(full) == mg_numel(local) * g->size, "mg_tp_gather: %lld elements into "
              "%lld (want %d x)", (long long)mg_numel(local), (long long)mg_numel(full), g->size);
    comm = mg_tp_comm(g);
    mg_all_gather(comm, &comm->tensor, local->data, full->data, mg_numel(local), local->dtype);
    return full;
}
MGDEF mg_tensor *mg_tp_reduce(const mg_tp_group *g, mg_tensor *partial, mg_tensor *local) {
    mg_comm *comm;
    if (!g->sequence_parallel) {
        if (g->size > 1) {
            comm = mg_tp_comm(g);
            mg_all_reduce(comm, &comm->tensor, partial->data, partial->data, mg_numel(partial),
                          partial->dtype, MG_SUM);
        }
        return partial;
    }
    MG_ASSERT(mg_numel(partial) == mg_numel(local) * g->size, "mg_tp_reduce: %lld elements "
              "into %lld (want 1/%d)", (long long)mg_numel(partial), (long long)mg_numel(local),
              g->size);
    comm = mg_tp_comm(g);
    mg_reduce_scatter(comm, &comm->tensor, partial->data, local->data, mg_numel(local),
                      partial->dtype, MG_SUM);
    return local;
}

/* ---- 1b. Context parallelism: the split ---------------------------------------------------- */
MGDEF mg_cp_group mg_cp_group_make(mg_comm *comm) {
    mg_cp_group g;
    g.comm = comm;
    g.rank = comm && comm->context.size > 0 ? comm->context.rank : 0;
    g.size = comm && comm->context.size > 0 ? comm->context.size : 1;
    return g;
}
MGDEF int64_t mg_cp_chunk_pos(int rank, int c, int64_t T_local, int half) {
    return (half ? 2 * (int64_t)c - 1 - rank : (int64_t)rank) * (T_local / 2);
}
MGDEF int64_t mg_cp_global_pos(int rank, int c, int64_t T_local, int64_t t) {
    int half = t >= T_local / 2;
    if (c <= 1) return t;
    return mg_cp_chunk_pos(rank, c, T_local, half) + t - half * (T_local / 2);
}
MGDEF int64_t mg_cp_attention_tiles(int rank, int c, int64_t T_local) {
    mg_attn_block k;
    int64_t n = 0;
    memset(&k, 0, sizeof k);
    k.B = k.n_head = k.n_group = 1;
    k.Tq = k.Tk = (int)(T_local / 2);
    for (int s = 0; s < c; s++)          /* the ring's blocks, as mg__cp_attention_forward */
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                k.q_pos0 = mg_cp_chunk_pos(rank, c, T_local, a);
                k.k_pos0 = mg_cp_chunk_pos((rank + c - s) % c, c, T_local, b);
                if (k.k_pos0 <= k.q_pos0) n += mg_attn_block_tiles(&k);
            }
    return n;
}

/* ---- 3a. Configuration and shared state ---------------------------------------------------- */
MGDEF void mg_transformer_init(mg_transformer *tf, mg_ctx *ctx, const mg_layer_config *cfg,
                               mg_tp_group tp) {
    int64_t N = (int64_t)cfg->micro_batch * cfg->seq_len;
    memset(tf, 0, sizeof *tf);
    tf->ctx = ctx;
    tf->cfg = *cfg;
    tf->tp = tp;
    tf->tp.sequence_parallel = tp.sequence_parallel && tp.size > 1;
    tf->n_rows = tf->tp.sequence_parallel ? N / tp.size : N;
    tf->row0 = tf->tp.sequence_parallel ? tf->n_rows * tp.rank : 0;
    tf->cp.size = 1;
}
MGDEF void mg_transformer_set_cp(mg_transformer *tf, mg_cp_group cp) {
    MG_ASSERT(cp.size >= 1 && cp.rank >= 0 && cp.rank < cp.size &&
              (cp.size == 1 || (tf->cfg.seq_len % 2 == 0 &&
                                tf->cfg.attention_backend == MG_ATTN_FLASH)),
              "mg_transformer_set_cp: rank %d of %d with %d local positions (need an even "
              "number, and the tiled attention backend)", cp.rank, cp.size, tf->cfg.seq_len);
    tf->cp = cp;
}

/* Widths of this rank's slices: Q = nh·hd/t (attention output), QKV = (nh + 2·ng)·hd/t, F/t. */
typedef struct mg__widths { int64_t B, T, N, C, n, nh, ng, q, qkv, f; } mg__widths;
static mg__widths mg__widths_of(const mg_transformer *tf) {
    const mg_layer_config *k = &tf->cfg;
    int64_t t = tf->tp.size;
    mg__widths w;
    w.B = k->micro_batch; w.T = k->seq_len; w.N = w.B * w.T; w.C = k->hidden; w.n = tf->n_rows;
    w.nh = k->n_head / t; w.ng = k->n_group / t;
    w.q = w.nh * k->head_dim; w.qkv = (w.nh + 2 * w.ng) * k->head_dim; w.f = k->ffn_hidden / t;
    return w;
}

MGDEF void mg_transformer_claim_scratch(mg_transformer *tf, mg_claim *c) {
    mg__widths w = mg__widths_of(tf);
    mg_dtype dt = tf->cfg.dtype;
    tf->dresid = mg_claim_tensor(c, dt, w.n, w.C, 0, 0);
    tf->dlocal = mg_claim_tensor(c, dt, w.n, w.C, 0, 0);
    if (tf->tp.sequence_parallel) tf->full_a = mg_claim_tensor(c, dt, w.N, w.C, 0, 0);
    tf->full_b = mg_claim_tensor(c, dt, w.N, w.C, 0, 0);
    tf->dCt = mg_claim_tensor(c, dt, w.N, w.q, 0, 0);
    tf->d3C = mg_claim_tensor(c, dt, w.N, w.qkv, 0, 0);
    tf->d4C = mg_claim_tensor(c, dt, w.N, w.f, 0, 0);
    if (tf->cfg.attention_backend == MG_ATTN_UNFUSED)
        tf->datt = mg_claim_tensor(c, dt, w.B, w.nh, w.T, w.T);
    if (tf->cp.size > 1) {   /* the ring's buffers */
        int64_t kvn = w.N * w.ng * 2 * tf->cfg.head_dim;
        for (int k = 0; k < 2; k++)
            tf->cp_kv[k] = mg_claim_bytes(c, (size_t)kvn * mg_dtype_size(dt));
        for (int k = 0; k < 3; k++) tf->cp_dkv[k] = mg_claim_f32(c, kvn);
        tf->cp_dq = mg_claim_f32(c, w.N * w.q);
        tf->cp_delta = mg_claim_f32(c, w.B * w.nh * w.T);
    }
    if (tf->cfg.swiglu) tf->dgate = mg_claim_tensor(c, dt, w.N, w.f, 0, 0);
    if (tf->cfg.rope) {   /* the table (every global position), computed once on the host */
        size_t n = (size_t)w.T * (size_t)tf->cp.size * (size_t)tf->cfg.rot_dim;
        tf->rope_cs = mg_claim_f32(c, (int64_t)n);
        if (c->ctx) {
            float *host = (float *)MG_MALLOC(n * sizeof(float));
            MG_ASSERT(host, "out of host memory");
            mg_rope_table(host, (int)(w.T * tf->cp.size), tf->cfg.rot_dim, &tf->cfg.rope_freq);
            mg_copy_to_device(c->ctx, tf->rope_cs, host, n * sizeof(float));
            MG_FREE(host);
        }
    }
}

MGDEF void mg_layer_acts_claim(const mg_transformer *tf, mg_claim *c, mg_layer_acts *la,
                               int own_all, int own_att, int own_out, int douts) {
    mg__widths w = mg__widths_of(tf);
    mg_dtype dt = tf->cfg.dtype;
    if (own_all) {
        la->ln1 = mg_claim_tensor(c, dt, w.n, w.C, 0, 0);
        la->ln1_mean = mg_claim_f32(c, w.n);
        la->ln1_rstd = mg_claim_f32(c, w.n);
        la->qkv = mg_claim_tensor(c, dt, w.N, w.qkv, 0, 0);
        if (tf->cfg.attention_backend == MG_ATTN_FLASH)
            la->lse = mg_claim_tensor(c, MG_F32, w.B, w.nh, w.T, 0);
        else if (own_att)
            la->att = mg_claim_tensor(c, dt, w.B, w.nh, w.T, w.T);
        la->atty = mg_claim_tensor(c, dt, w.N, w.q, 0, 0);
        la->resid_mid = mg_claim_tensor(c, dt, w.n, w.C, 0, 0);
        la->ln2 = mg_claim_tensor(c, dt, w.n, w.C, 0, 0);
        la->ln2_mean = mg_claim_f32(c, w.n);
        la->ln2_rstd = mg_claim_f32(c, w.n);
        la->fc = mg_claim_tensor(c, dt, w.N, w.f, 0, 0);
        if (tf->cfg.swiglu) la->gate = mg_claim_tensor(c, dt, w.N, w.f, 0, 0);
        la->fc_gelu = mg_claim_tensor(c, dt, w.N, w.f, 0, 0);
    }
    if (own_out) la->out = mg_claim_tensor(c, dt, w.n, w.C, 0, 0);
    if (douts) {
        la->dout_fc2 = mg_claim_tensor(c, dt, w.N, w.C, 0, 0);
        la->dout_fc1 = mg_claim_tensor(c, dt, w.N, w.f, 0, 0);
        la->dout_proj = mg_claim_tensor(c, dt, w.N, w.C, 0, 0);
        la->dout_qkv = mg_claim_tensor(c, dt, w.N, w.qkv, 0, 0);
        if (tf->cfg.swiglu) la->dout_gate = mg_claim_tensor(c, dt, w.N, w.f, 0, 0);
    }
}

MGDEF int mg_layer_has_tensor(const mg_layer_config *k, int kind) {
    switch (kind) {
    case MG_LN1_B: case MG_LN2_B: return !k->norm.rms;
    case MG_QKV_B: return k->bias || k->qkv_bias;
    case MG_PROJ_B: case MG_FC1_B: case MG_FC2_B: return k->bias;
    case MG_GATE_W: return k->swiglu;
    case MG_GATE_B: return k->swiglu && k->bias;
    default: return kind >= 0 && kind < MG_LAYER_TENSORS;
    }
}
MGDEF int mg_layer_tensor_shape(const mg_layer_config *k, int kind, int64_t shape[2]) {
    int64_t C = k->hidden, q = (int64_t)k->n_head * k->head_dim;
    int64_t qkv = (int64_t)(k->n_head + 2 * k->n_group) * k->head_dim, F = k->ffn_hidden;
    shape[1] = 0;
    switch (kind) {
    case MG_QKV_W: shape[0] = qkv; shape[1] = C; return 1;
    case MG_QKV_B: shape[0] = qkv; return 1;
    case MG_PROJ_W: shape[0] = C; shape[1] = q; return 2;
    case MG_FC1_W: case MG_GATE_W: shape[0] = F; shape[1] = C; return 1;
    case MG_FC1_B: case MG_GATE_B: shape[0] = F; return 1;
    case MG_FC2_W: shape[0] = C; shape[1] = F; return 2;
    default: shape[0] = C; return 0;   /* norms, row-parallel biases */
    }
}

/* ---- 2. Tensor-parallel linear layers -------------------------------------------------------- */
MGDEF mg_tensor *mg_transformer_partial(mg_transformer *tf, mg_tensor *local) {
    return tf->tp.sequence_parallel ? &tf->full_b : local;
}
MGDEF void mg_column_parallel_linear_forward(mg_transformer *tf, mg_tensor *y, const mg_tensor *x,
                                             const mg_tensor *w, const mg_tensor *b) {
    mg_linear_forward(tf->ctx, y, mg_tp_gather(&tf->tp, x, &tf->full_a), w, b);
}
MGDEF void mg_column_parallel_linear_backward_weight(mg_transformer *tf, const mg_tensor *dy,
                                                     const mg_tensor *x, mg_tensor *dw,
                                                     mg_tensor *db) {
    /* only this rank's rows of x were kept: gathered again with sequence parallelism */
    mg_linear_backward_weight(tf->ctx, dw, db, dy, mg_tp_gather(&tf->tp, x, &tf->full_a));
}
MGDEF void mg_column_parallel_linear_backward_partial(mg_transformer *tf, const mg_tensor *dy,
                                                      const mg_tensor *x, const mg_tensor *w,
                                                      mg_tensor *dw, mg_tensor *db,
                                                      int accumulate) {
    mg_linear_backward_input(tf->ctx, &tf->full_b, dy, w, accumulate); /* this rank's partial */
    if (dw) mg_column_parallel_linear_backward_weight(tf, dy, x, dw, db);
}
MGDEF mg_tensor *mg_column_parallel_reduce(mg_transformer *tf) {
    return mg_tp_reduce(&tf->tp, &tf->full_b, &tf->dlocal);
}
MGDEF mg_tensor *mg_column_parallel_linear_backward(mg_transformer *tf, const mg_tensor *dy,
                                                    const mg_tensor *x, const mg_tensor *w,
                                                    mg_tensor *dw, mg_tensor *db) {
    mg_column_parallel_linear_backward_partial(tf, dy, x, w, dw, db, 0);
    return mg_column_parallel_reduce(tf);
}
MGDEF void mg_row_parallel_linear_forward(mg_transformer *tf, mg_tensor *z, const mg_tensor *y,
                                          const mg_tensor *w, const mg_tensor *b) {
    mg_tensor *partial = mg_transformer_partial(tf, z);
    mg_linear_forward(tf->ctx, partial, y, w, tf->tp.rank == 0 ? b : NULL);
    mg_tp_reduce(&tf->tp, partial, z);
}
/* Both row-parallel backwards: y_pre NULL is the plain one, else the input half goes through
   the GELU (and db_pre).                                                                     */
static const mg_tensor *mg__row_parallel_backward(mg_transformer *tf, mg_tensor *dy,
                                                  mg_tensor *db_pre, const mg_tensor *dz,
                                                  const mg_tensor *y, const mg_tensor *y_pre,
                                                  const mg_tensor *w, mg_tensor *dw,
                                                  mg_tensor *db, mg_tensor *keep_g) {
    const mg_tensor *g = mg_tp_gather(&tf->tp, dz, &tf->full_b);
    if (keep_g) mg_copy(tf->ctx, keep_g->data, g->data, mg_nbytes(g));
    if (y_pre) mg_linear_backward_input_act(tf->ctx, dy, db_pre, g, w, y_pre, tf->cfg.act);
    else mg_linear_backward_input(tf->ctx, dy, g, w, 0);
    if (dw) mg_linear_backward_weight(tf->ctx, dw, db, g, y);
    return g;
}
MGDEF const mg_tensor *mg_row_parallel_linear_backward(mg_transformer *tf, mg_tensor *dy,
                                                       const mg_tensor *dz, const mg_tensor *y,
                                                       const mg_tensor *w, mg_tensor *dw,
                                                       mg_tensor *db, mg_tensor *keep_g) {
    return mg__row_parallel_backward(tf, dy, NULL, dz, y, NULL, w, dw, db, keep_g);
}
MGDEF const mg_tensor *mg_row_parallel_linear_backward_gelu(mg_transformer *tf, mg_tensor *dy_pre,
                                                            mg_tensor *db_pre, const mg_tensor *dz,
                                                            const mg_tensor *y,
                                                            const mg_tensor *y_pre,
                                                            const mg_tensor *w, mg_tensor *dw,
                                                            mg_tensor *db, mg_tensor *keep_g) {
    return mg__row_parallel_backward(tf, dy_pre, db_pre, dz, y, y_pre, w, dw, db, keep_g);
}
MGDEF void mg_column_parallel_linear_gelu_forward(mg_transformer *tf, mg_tensor *y,
                                                  mg_tensor *y_pre, const mg_tensor *x,
                                                  const mg_tensor *w, const mg_tensor *b) {
    mg_linear_act_forward(tf->ctx, y, y_pre, mg_tp_gather(&tf->tp, x, &tf->full_a), w, b,
                             tf->cfg.act);
}

/* ---- 3. The layer ------------------------------------------------------------------------- */
static uint64_t mg__layer_key(const mg_transformer *tf, const mg_layer_id *id, uint64_t site) {
    return mg_dropout_key(tf->cfg.dropout_seed, site, id->microbatch);
}
/* The global rows of this rank's residual-stream rows [row0, row0 + n): with context
   parallelism one run per local chunk the rows touch ({first row within the n, count, first
   global row t·B + b}), else one run. Masks keyed by global rows are then those of one rank. */
typedef struct mg__cp_run { int64_t r, n, g; } mg__cp_run;
static int mg__cp_runs(const mg_transformer *tf, mg__cp_run run[2]) {
    int64_t B = tf->cfg.micro_batch, Tl = tf->cfg.seq_len, half = Tl / 2 * B;
    int64_t r0 = tf->row0, r1 = tf->row0 + tf->n_rows;
    int k = 0;
    if (tf->cp.size <= 1) { run[0].r = 0; run[0].n = tf->n_rows; run[0].g = tf->row0; return 1; }
    for (int h = 0; h < 2; h++) {
        int64_t lo = r0 > h * half ? r0 : h * half, hi = r1 < (h + 1) * half ? r1 : (h + 1) * half;
        if (hi <= lo) continue;
        run[k].r = lo - r0;
        run[k].n = hi - lo;
        run[k].g = mg_cp_chunk_pos(tf->cp.rank, tf->cp.size, Tl, h) * B + lo - h * half;
        k++;
    }
    return k;
}
/* Whether the hidden dropout runs in this pass (training, with a rate). */
static int mg__hidden_dropout_on(const mg_transformer *tf, const mg_layer_id *id) {
    return id->dropout_on && !(tf->cfg.hidden_dropout <= 0);
}
MGDEF void mg_transformer_dropout(mg_transformer *tf, const mg_layer_id *id, mg_tensor *x,
                                  uint64_t site) {
    mg__cp_run run[2];
    if (!mg__hidden_dropout_on(tf, id)) return;
    for (int k = 0, n = mg__cp_runs(tf, run); k < n; k++) {
        mg_tensor v = mg_tensor_rows(x, run[k].r, run[k].n);
        mg_dropout_forward(tf->ctx, &v, &v, tf->cfg.hidden_dropout, mg__layer_key(tf, id, site),
                           run[k].g);
    }
}
MGDEF const mg_tensor *mg_transformer_dropout_grad(mg_transformer *tf, const mg_layer_id *id,
                                                   const mg_tensor *dout, uint64_t site) {
    mg__cp_run run[2];
    if (!mg__hidden_dropout_on(tf, id)) return dout;
    for (int k = 0, n = mg__cp_runs(tf, run); k < n; k++) {
        mg_tensor d = mg_tensor_rows(&tf->dlocal, run[k].r, run[k].n);
        mg_tensor g = mg_tensor_rows(dout, run[k].r, run[k].n);
        mg_dropout_backward(tf->ctx, &d, &g, tf->cfg.hidden_dropout, mg__layer_key(tf, id, site),
                            run[k].g);
    }
    return &tf->dlocal;
}
/* The attention-probability dropout of the layer (NULL: off): the global [B, nh, T, T]
   probabilities' mask, this rank's heads at head offset tp.rank·nh/t.                       */
static const mg_attn_dropout *mg__layer_attn_dropout(const mg_transformer *tf,
                                                     const mg_layer_id *id, mg_attn_dropout *d) {
    if (!id->dropout_on || tf->cfg.attention_dropout <= 0) return NULL;
    d->p = tf->cfg.attention_dropout;
    d->seed = mg__layer_key(tf, id, MG_SITE_ATTN_PROBS(id->layer));
    d->n_head_total = tf->cfg.n_head;
    d->head_offset = tf->tp.rank * (tf->cfg.n_head / tf->tp.size);
    return d;
}

/* An optional tensor of a layer's array (NULL when the configuration has none). */
static const mg_tensor *mg__opt(const mg_tensor *t) { return t->data ? t : NULL; }
static mg_tensor *mg__opt_g(mg_tensor *t) { return t->data ? t : NULL; }

/* Rotary positions on qkv's queries and keys (inverse: the backward's rotation of dqkv) at the
   rows' global positions: with context parallelism each local chunk at its own.             */
static void mg__layer_rope(mg_transformer *tf, mg_tensor *qkv, int inverse) {
    mg__widths d = mg__widths_of(tf);
    int halves = tf->cp.size > 1 ? 2 : 1;
    for (int h = 0; h < halves; h++) {
        int64_t rows = d.N / halves;
        mg_tensor v = mg_tensor_rows(qkv, h * rows, rows);
        int t0 = (int)(halves > 1 ? mg_cp_chunk_pos(tf->cp.rank, tf->cp.size, d.T, h) : 0);
        if (inverse)
            mg_rope_backward(tf->ctx, &v, (int)d.B, (int)d.nh, (int)d.ng, tf->cfg.rot_dim, t0,
                             tf->rope_cs);
        else
            mg_rope_forward(tf->ctx, &v, (int)d.B, (int)d.nh, (int)d.ng, tf->cfg.rot_dim, t0,
                            tf->rope_cs);
    }
}

/* ---- 1b. Context parallelism: the ring ------------------------------------------------------
   A view of per-head rows in a [T, B, …] buffer whose (t, b) row is row_w elements wide,
   from local position t0 and column col: ld_t = B·row_w, ld_b = row_w.                       */
static mg_attn_view mg__cp_view(void *base, mg_dtype dt, int64_t t0, int64_t B, int64_t row_w,
                                int64_t ld_g, int64_t ld_h, int64_t col) {
    mg_attn_view v;
    v.dtype = dt;
    v.ld_b = row_w;
    v.ld_t = B * row_w;
    v.ld_g = ld_g;
    v.ld_h = ld_h;
    v.data = (char *)base + (size_t)(t0 * v.ld_t + col) * mg_dtype_size(dt);
    return v;
}
/* Local query chunk a (of qkv) against key chunk b of the packed K/V `kv` that rank src holds:
   their global positions make the causal mask and the dropout mask those of one rank.       */
static mg_attn_block mg__cp_block(const mg_transformer *tf, const mg_tensor *qkv, int a,
                                  void *kv, int src, int b, const mg_attn_dropout *drop) {
    mg__widths d = mg__widths_of(tf);
    int64_t hd = tf->cfg.head_dim, per = d.nh / d.ng, Tc = d.T / 2;
    mg_attn_block k;
    memset(&k, 0, sizeof k);
    k.B = (int)d.B; k.Tq = k.Tk = (int)Tc; k.n_head = (int)d.nh; k.n_group = (int)d.ng;
    k.hd = (int)hd;
    k.q = mg__cp_view(qkv->data, qkv->dtype, a * Tc, d.B, d.qkv, (per + 2) * hd, hd, 0);
    k.k = mg__cp_view(kv, qkv->dtype, b * Tc, d.B, d.ng * 2 * hd, 2 * hd, hd, 0);
    k.v = mg__cp_view(kv, qkv->dtype, b * Tc, d.B, d.ng * 2 * hd, 2 * hd, hd, hd);
    k.q_pos0 = mg_cp_chunk_pos(tf->cp.rank, tf->cp.size, d.T, a);
    k.k_pos0 = mg_cp_chunk_pos(src, tf->cp.size, d.T, b);
    k.T_global = d.T * tf->cp.size;
    k.drop = drop;
    return k;
}
/* Query-head rows of an [N, nh/t·hd] buffer (atty, its gradient, the fp32 dQ), chunk a.     */
static mg_attn_view mg__cp_heads(const mg_transformer *tf, void *base, mg_dtype dt, int a) {
    mg__widths d = mg__widths_of(tf);
    int64_t hd = tf->cfg.head_dim;
    return mg__cp_view(base, dt, a * (d.T / 2), d.B, d.q, d.nh / d.ng * hd, hd, 0);
}
/* Copies the key/value columns of qkv ([N, ng/t, per + 2, hd]) into the packed [N, ng/t, 2,
   hd] buffer kv, or back (unpack: kv's values into qkv's key/value columns).               */
static void mg__cp_pack(const mg_transformer *tf, void *qkv, void *kv, mg_dtype dt, int unpack) {
    mg__widths d = mg__widths_of(tf);
    size_t es = mg_dtype_size(dt), hd = (size_t)tf->cfg.head_dim, per = (size_t)(d.nh / d.ng);
    char *cols = (char *)qkv + per * hd * es;
    size_t rows = (size_t)(d.N * d.ng);
    if (unpack) mg_copy_2d(tf->ctx, cols, (per + 2) * hd * es, kv, 2 * hd * es, 2 * hd * es, rows);
    else mg_copy_2d(tf->ctx, kv, 2 * hd * es, cols, (per + 2) * hd * es, 2 * hd * es, rows);
}
/* One hop of the ring: send `send` to the next rank, receive `recv` from the previous one
   (grouped, so the pair never deadlocks; NCCL on the communication stream on CUDA).         */
static mg_request mg__cp_shift(const mg_transformer *tf, const void *send, void *recv,
                               int64_t count, mg_dtype dt) {
    mg_comm *comm = tf->cp.comm;
    int c = tf->cp.size;
    mg_group_start(comm);
    mg_send(comm, &comm->context, send, count, dt, (tf->cp.rank + 1) % c);
    mg_recv(comm, &comm->context, recv, count, dt, (tf->cp.rank + c - 1) % c);
    return mg_group_end_async(comm);
}

/* Ring attention, forward: la->atty and la->lse from la->qkv. Step s (0 … c−1) holds the K/V
   of rank src = rank − s; the next block's hop is posted before this block's attention, so
   the transfer overlaps it. Each query chunk's first visible block writes (merge 0), later
   ones merge by log-sum-exp.                                                               */
static void mg__cp_attention_forward(mg_transformer *tf, const mg_attn_dropout *drop,
                                     mg_layer_acts *la) {
    mg__widths d = mg__widths_of(tf);
    int c = tf->cp.size, cur = 0, started[2] = {0, 0};
    int64_t kvn = d.N * d.ng * 2 * tf->cfg.head_dim, lse_half = d.B * d.nh * (d.T / 2);
    mg_dtype dt = la->qkv.dtype;
    float *lse = (float *)la->lse.data;
    mg__cp_pack(tf, la->qkv.data, tf->cp_kv[0], dt, 0);
    for (int s = 0; s < c; s++) {
        int src = (tf->cp.rank + c - s) % c;
        mg_request req = {0};
        if (s + 1 < c) req = mg__cp_shift(tf, tf->cp_kv[cur], tf->cp_kv[1 - cur], kvn, dt);
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                mg_attn_block k = mg__cp_block(tf, &la->qkv, a, tf->cp_kv[cur], src, b, drop);
                mg_attn_view o = mg__cp_heads(tf, la->atty.data, dt, a);
                if (k.k_pos0 > k.q_pos0) continue;   /* a later chunk: invisible */
                mg_attn_block_forward(tf->ctx, &k, &o, lse + a * lse_half, started[a]);
                started[a] = 1;
                tf->cp_tiles += mg_attn_block_tiles(&k);
            }
        mg_wait(tf->cp.comm, &req);
        cur = 1 - cur;
    }
}

/* Ring attention, backward: d_qkv from dout (tf->dCt, used as scratch once read). Δ per query
   chunk first; then the ring of the forward, where the fp32 dK/dV of each block travel one
   hop behind its K/V, summed by every rank it passes, so that after c hops every rank holds
   the dK/dV of its own keys over all queries. dQ sums in fp32 locally; both are rounded once
   into d_qkv at the end.                                                                    */
static void mg__cp_attention_backward(mg_transformer *tf, const mg_attn_dropout *drop,
                                      mg_layer_acts *la, mg_tensor *d_qkv) {
    mg__widths d = mg__widths_of(tf);
    int c = tf->cp.size, cur = 0;
    int64_t kvn = d.N * d.ng * 2 * tf->cfg.head_dim, lse_half = d.B * d.nh * (d.T / 2);
    mg_dtype dt = la->qkv.dtype;
    const float *lse = (const float *)la->lse.data;
    mg_tensor dq32, dq, dkv32, dkv, acc, part;
    int64_t shape[1] = {kvn};
    int out = 0, in = 1, loc = 2;   /* the fp32 dK/dV buffers' roles, see below */
    mg_request rdkv = {0};
    mg_memset_zero(tf->ctx, tf->cp_dq, (size_t)(d.N * d.q) * sizeof(float));
    mg__cp_pack(tf, la->qkv.data, tf->cp_kv[0], dt, 0);
    for (int a = 0; a < 2; a++) {
        mg_attn_block k = mg__cp_block(tf, &la->qkv, a, tf->cp_kv[0], tf->cp.rank, 0, drop);
        mg_attn_view o = mg__cp_heads(tf, la->atty.data, dt, a);
        mg_attn_view dout = mg__cp_heads(tf, tf->dCt.data, dt, a);
        mg_attn_delta(tf->ctx, tf->cp_delta + a * lse_half, &k, &dout, &o);
    }
    /* Step s: dkv[loc] collects this rank's contribution to the block in hand (src's keys);
       meanwhile dkv[out], the sum the previous step finished, goes to the next rank and dkv[in]
       receives from the previous rank the partial sum of the block in hand (every rank before
       this one in the ring), to which dkv[loc] is then added. Step 0's block is this rank's
       own: its sum is dkv[loc] alone. The last sum travels after the loop.                */
    for (int s = 0; s < c; s++) {
        int src = (tf->cp.rank + c - s) % c, t;
        mg_request req = {0};
        if (s + 1 < c) req = mg__cp_shift(tf, tf->cp_kv[cur], tf->cp_kv[1 - cur], kvn, dt);
        if (s > 0) rdkv = mg__cp_shift(tf, tf->cp_dkv[out], tf->cp_dkv[in], kvn, MG_F32);
        mg_memset_zero(tf->ctx, tf->cp_dkv[loc], (size_t)kvn * sizeof(float));
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                mg_attn_block k = mg__cp_block(tf, &la->qkv, a, tf->cp_kv[cur], src, b, drop);
                mg_attn_view dout = mg__cp_heads(tf, tf->dCt.data, dt, a);
                mg_attn_view dq = mg__cp_heads(tf, tf->cp_dq, MG_F32, a);
                mg_attn_view dk = mg__cp_view(tf->cp_dkv[loc], MG_F32, b * (d.T / 2), d.B,
                                              d.ng * 2 * k.hd, 2 * k.hd, k.hd, 0);
                mg_attn_view dv = dk;
                if (k.k_pos0 > k.q_pos0) continue;
                dv.data = (float *)dk.data + k.hd;
                mg_attn_block_backward(tf->ctx, &k, &dout, lse + a * lse_half,
                                       tf->cp_delta + a * lse_half, &dq, &dk, &dv, 1);
            }
        mg_wait(tf->cp.comm, &req);
        mg_wait(tf->cp.comm, &rdkv);
        acc = mg_tensor_wrap(tf->cp_dkv[loc], MG_F32, 1, shape);
        if (s > 0) {   /* the block's sum: the ring's partial plus this rank's */
            part = mg_tensor_wrap(tf->cp_dkv[in], MG_F32, 1, shape);
            mg_axpy(tf->ctx, &part, 1.0f, &acc);
            t = out; out = in; in = t;
        } else {
            t = out; out = loc; loc = t;
        }
        cur = 1 - cur;
    }
    rdkv = mg__cp_shift(tf, tf->cp_dkv[out], tf->cp_dkv[in], kvn, MG_F32);
    mg_wait(tf->cp.comm, &rdkv);
    cur = in;
    /* tf->cp_dkv[cur] is this rank's own dK/dV now (its c contributions summed around the
       ring); round both into d_qkv                                                          */
    dq32 = mg_tensor_wrap(tf->cp_dq, MG_F32, 2, tf->dCt.shape);
    dq = tf->dCt;
    mg_cast(tf->ctx, &dq, &dq32);
    {
        int64_t hd = tf->cfg.head_dim, per = d.nh / d.ng;
        size_t es = mg_dtype_size(dt);
        mg_copy_2d(tf->ctx, d_qkv->data, (size_t)((per + 2) * hd) * es, dq.data,
                   (size_t)(per * hd) * es, (size_t)(per * hd) * es, (size_t)(d.N * d.ng));
    }
    {
        int64_t shape2[2] = {d.N, kvn / d.N};
        dkv32 = mg_tensor_wrap(tf->cp_dkv[cur], MG_F32, 2, shape2);
        dkv = mg_tensor_wrap(tf->cp_kv[0], dt, 2, shape2);
        mg_cast(tf->ctx, &dkv, &dkv32);
        mg__cp_pack(tf, d_qkv->data, dkv.data, dt, 1);
    }
}


/* A block's output: z = dropout(row-parallel linear(y)) + resid. Without a tensor-parallel
   reduction between the GEMM and the sum (one tensor rank) and without dropout, one fused op
   (mg_linear_forward_residual: the same bits).                                               */
static void mg__row_parallel_forward_residual(mg_transformer *tf, const mg_layer_id *id,
                                              mg_tensor *z, const mg_tensor *y, const mg_tensor *w,
                                              const mg_tensor *b, const mg_tensor *resid,
                                              uint64_t site) {
    if (tf->tp.size == 1 && !tf->tp.sequence_parallel && !mg__hidden_dropout_on(tf, id)) {
        mg_linear_forward_residual(tf->ctx, z, y, w, b, resid);
        return;
    }
    mg_row_parallel_linear_forward(tf, z, y, w, b);
    mg_transformer_dropout(tf, id, z, site);
    mg_add(tf->ctx, z, z, resid);
}
/* Forward, with Megatron's operators in brackets:
     ln1 = norm(x); [f / all-gather] qkv = ln1·Wqkvᵀ (+ b) (column-parallel: this rank's
           query groups); rope: queries and keys rotated by position
     atty = dropout(softmax(q·kᵀ/√hd, causal))·v          (each query head reads its group)
     resid_mid = x + dropout([g / reduce-scatter] atty·Wprojᵀ (+ b))        (row-parallel)
     ln2 = norm(resid_mid); [f / all-gather] fc = ln2·Wfc1ᵀ (+ b)           (column-parallel)
           SwiGLU: also gate = ln2·Wgateᵀ (+ b), same split
     act = GELU(fc), or silu(gate) ⊙ fc
     out = resid_mid + dropout([g / reduce-scatter] act·Wfc2ᵀ (+ b))        (row-parallel)  */
MGDEF void mg_transformer_layer_forward(mg_transformer *tf, const mg_layer_id *id,
                                        const mg_tensor *w, mg_layer_acts *la,
                                        const mg_tensor *x) {
    mg_ctx *ctx = tf->ctx;
    const mg_layer_config *k = &tf->cfg;
    mg__widths d = mg__widths_of(tf);
    mg_attn_dropout adrop;
    /* attention block */
    mg_norm_forward(ctx, &k->norm, &la->ln1, la->ln1_mean, la->ln1_rstd, x, &w[MG_LN1_W],
                    mg__opt(&w[MG_LN1_B]));
    mg_column_parallel_linear_forward(tf, &la->qkv, &la->ln1, &w[MG_QKV_W],
                                      mg__opt(&w[MG_QKV_B]));
    if (k->rope) mg__layer_rope(tf, &la->qkv, 0);
    if (tf->cp.size > 1)
        mg__cp_attention_forward(tf, mg__layer_attn_dropout(tf, id, &adrop), la);
    else if (k->attention_backend == MG_ATTN_FLASH)
        mg_flash_attention_forward(ctx, &la->atty, &la->lse, &la->qkv, (int)d.B, (int)d.T,
                                   (int)d.nh, (int)d.ng, mg__layer_attn_dropout(tf, id, &adrop));
    else
        mg_attention_forward_gqa(ctx, &la->atty, &la->att, &la->qkv, (int)d.B, (int)d.T,
                                 (int)d.nh, (int)d.ng, mg__layer_attn_dropout(tf, id, &adrop));
    mg__row_parallel_forward_residual(tf, id, &la->resid_mid, &la->atty, &w[MG_PROJ_W],
                                      mg__opt(&w[MG_PROJ_B]), x, MG_SITE_ATTN_OUT(id->layer));
    /* MLP block */
    mg_norm_forward(ctx, &k->norm, &la->ln2, la->ln2_mean, la->ln2_rstd, &la->resid_mid,
                    &w[MG_LN2_W], mg__opt(&w[MG_LN2_B]));
    if (k->swiglu) {
        mg_column_parallel_linear_forward(tf, &la->fc, &la->ln2, &w[MG_FC1_W],
                                          mg__opt(&w[MG_FC1_B]));
        mg_column_parallel_linear_forward(tf, &la->gate, &la->ln2, &w[MG_GATE_W],
                                          mg__opt(&w[MG_GATE_B]));
        mg_swiglu_forward(ctx, &la->fc_gelu, &la->gate, &la->fc);
    } else {   /* one fused GEMM + bias + GELU, keeping fc for the backward */
        mg_column_parallel_linear_gelu_forward(tf, &la->fc_gelu, &la->fc, &la->ln2, &w[MG_FC1_W],
                                               mg__opt(&w[MG_FC1_B]));
    }
    mg__row_parallel_forward_residual(tf, id, &la->out, &la->fc_gelu, &w[MG_FC2_W],
                                      mg__opt(&w[MG_FC2_B]), &la->resid_mid,
                                      MG_SITE_MLP_OUT(id->layer));
}

/* Backward. The residual stream's gradient tf->dresid flows straight through; each block adds
   its branch:
     MLP:  g = [identity / all-gather] dropout'(dresid)
           dact = g·Wfc2; dfc = GELU'(fc)⊙dact — or SwiGLU: dgate = dact⊙fc⊙silu'(gate),
           dfc = dact⊙silu(gate); partial dln2 = dfc·Wfc1 (+ dgate·Wgate)
           dresid += norm2'([all-reduce (f) / reduce-scatter] partial)
     attn: the same with Wproj, attention' (and rope', the inverse rotation) and Wqkv.
   Each linear's backward is its input half then its weight half. With defer_w the weight
   halves are left for mg_transformer_layer_backward_weight: the output gradient each needs is
   written to (or, for the two row-parallel ones, copied into) la->dout_* instead of the
   shared scratch. Selective recomputation (unfused attention): the attention probabilities
   are recomputed from the stored (rotated) qkv, with the same dropout key, just before the
   attention backward; the recomputed attention output is not needed (atty was kept) and lands
   in the dCt scratch, overwritten next. The flash backward recomputes them anyway.          */
MGDEF void mg_transformer_layer_backward(mg_transformer *tf, const mg_layer_id *id,
                                         const mg_tensor *w, mg_tensor *g, mg_layer_acts *la,
                                         const mg_tensor *x, int selective, int defer_w) {
    mg_ctx *ctx = tf->ctx;
    const mg_layer_config *k = &tf->cfg;
    mg__widths d = mg__widths_of(tf);
    mg_attn_dropout adrop;
    const mg_tensor *g_out;
    mg_tensor *dln;
    mg_tensor *d_fc1 = defer_w ? &la->dout_fc1 : &tf->d4C;     /* dact, then dfc             */
    mg_tensor *d_gate = defer_w ? &la->dout_gate : &tf->dgate;
    mg_tensor *d_qkv = defer_w ? &la->dout_qkv : &tf->d3C;
    /* MLP block */
    g_out = mg_transformer_dropout_grad(tf, id, &tf->dresid, MG_SITE_MLP_OUT(id->layer));
    if (k->swiglu)
        mg_row_parallel_linear_backward(tf, d_fc1, g_out, &la->fc_gelu, &w[MG_FC2_W],
                                        defer_w ? NULL : &g[MG_FC2_W], mg__opt_g(&g[MG_FC2_B]),
                                        defer_w ? &la->dout_fc2 : NULL);
    else   /* dfc = (g·Wfc2) ⊙ GELU'(fc) and fc1's bias gradient, in the GEMM's epilogue */
        mg_row_parallel_linear_backward_gelu(tf, d_fc1, mg__opt_g(&g[MG_FC1_B]), g_out,
                                             &la->fc_gelu, &la->fc, &w[MG_FC2_W],
                                             defer_w ? NULL : &g[MG_FC2_W],
                                             mg__opt_g(&g[MG_FC2_B]),
                                             defer_w ? &la->dout_fc2 : NULL);
    if (k->swiglu) {
        mg_swiglu_backward(ctx, d_gate, d_fc1, d_fc1, &la->gate, &la->fc);
        mg_column_parallel_linear_backward_partial(tf, d_fc1, &la->ln2, &w[MG_FC1_W],
                                                   defer_w ? NULL : &g[MG_FC1_W],
                                                   mg__opt_g(&g[MG_FC1_B]), 0);
        mg_column_parallel_linear_backward_partial(tf, d_gate, &la->ln2, &w[MG_GATE_W],
                                                   defer_w ? NULL : &g[MG_GATE_W],
                                                   mg__opt_g(&g[MG_GATE_B]), 1);
        dln = mg_column_parallel_reduce(tf);
    } else {
        dln = mg_column_parallel_linear_backward(tf, d_fc1, &la->ln2, &w[MG_FC1_W],
                                                 defer_w ? NULL : &g[MG_FC1_W], NULL);
    }
    mg_norm_backward(ctx, &k->norm, &tf->dresid, &g[MG_LN2_W], mg__opt_g(&g[MG_LN2_B]), dln,
                     &la->resid_mid, &w[MG_LN2_W], la->ln2_mean, la->ln2_rstd, 1);
    /* attention block */
    if (selective && k->attention_backend == MG_ATTN_UNFUSED)
        mg_attention_forward_gqa(ctx, &tf->dCt, &la->att, &la->qkv, (int)d.B, (int)d.T,
                                 (int)d.nh, (int)d.ng, mg__layer_attn_dropout(tf, id, &adrop));
    g_out = mg_transformer_dropout_grad(tf, id, &tf->dresid, MG_SITE_ATTN_OUT(id->layer));
    mg_row_parallel_linear_backward(tf, &tf->dCt, g_out, &la->atty, &w[MG_PROJ_W],
                                    defer_w ? NULL : &g[MG_PROJ_W], mg__opt_g(&g[MG_PROJ_B]),
                                    defer_w ? &la->dout_proj : NULL);
    if (tf->cp.size > 1)
        mg__cp_attention_backward(tf, mg__layer_attn_dropout(tf, id, &adrop), la, d_qkv);
    else if (k->attention_backend == MG_ATTN_FLASH)
        mg_flash_attention_backward(ctx, d_qkv, &tf->dCt, &la->atty, &la->lse, &la->qkv,
                                    (int)d.B, (int)d.T, (int)d.nh, (int)d.ng,
                                    mg__layer_attn_dropout(tf, id, &adrop));
    else
        mg_attention_backward_gqa(ctx, d_qkv, &tf->datt, &tf->dCt, &la->qkv, &la->att, (int)d.B,
                                  (int)d.T, (int)d.nh, (int)d.ng,
                                  mg__layer_attn_dropout(tf, id, &adrop));
    if (k->rope) mg__layer_rope(tf, d_qkv, 1);
    dln = mg_column_parallel_linear_backward(tf, d_qkv, &la->ln1, &w[MG_QKV_W],
                                             defer_w ? NULL : &g[MG_QKV_W],
                                             mg__opt_g(&g[MG_QKV_B]));
    mg_norm_backward(ctx, &k->norm, &tf->dresid, &g[MG_LN1_W], mg__opt_g(&g[MG_LN1_B]), dln, x,
                     &w[MG_LN1_W], la->ln1_mean, la->ln1_rstd, 1);
}

/* The weight halves a deferred backward left, from the kept output gradients; the norm
   outputs are all-gathered again with sequence parallelism (collective over the tensor group,
   whose ranks run the same schedule).                                                       */
MGDEF void mg_transformer_layer_backward_weight(mg_transformer *tf, mg_tensor *g,
                                                mg_layer_acts *la) {
    mg_linear_backward_weight(tf->ctx, &g[MG_FC2_W], mg__opt_g(&g[MG_FC2_B]), &la->dout_fc2,
                              &la->fc_gelu);
    /* fc1's bias gradient came out of the fused GELU backward, unless the MLP is SwiGLU */
    mg_column_parallel_linear_backward_weight(tf, &la->dout_fc1, &la->ln2, &g[MG_FC1_W],
                                              tf->cfg.swiglu ? mg__opt_g(&g[MG_FC1_B]) : NULL);
    if (tf->cfg.swiglu)
        mg_column_parallel_linear_backward_weight(tf, &la->dout_gate, &la->ln2, &g[MG_GATE_W],
                                                  mg__opt_g(&g[MG_GATE_B]));
    mg_linear_backward_weight(tf->ctx, &g[MG_PROJ_W], mg__opt_g(&g[MG_PROJ_B]), &la->dout_proj,
                              &la->atty);
    mg_column_parallel_linear_backward_weight(tf, &la->dout_qkv, &la->ln1, &g[MG_QKV_W],
                                              mg__opt_g(&g[MG_QKV_B]));
}

#endif /* MG_TRANSFORMER_IMPLEMENTED */
#endif /* MG_IMPLEMENTATION */

/*
MIT License — Copyright (c) 2025 the megatron.h authors. See LICENSE for the full text.
*/
