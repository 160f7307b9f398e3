/* traffic.h — the bytes one rank sends in one training iteration of an mg_trainer, per process
   group, from PAPER.md's formulas, in mg_comm's units (mg_comm.h section 7: a ring all-reduce
   of `bytes` sends 2·(n−1)/n·bytes, an all-gather or reduce-scatter (n−1)/n·the full buffer, a
   send its bytes), so each figure can stand beside mg_comm's counter comm->bytes_sent[group].
   Shared by bench/scaling.c (prints both) and tests/test_traffic.c (checks them).

   Symbols (PAPER.md): t, p, d tensor/pipeline/data sizes, v model chunks per pipeline rank,
   m microbatches per replica per iteration (B/(b·d)), b micro-batch, s sequence, h hidden, l
   layers, e bytes of an activation element (4 fp32; 2 with --bf16/--fp16), Vp the padded
   vocabulary, P_r the elements of this rank's flat gradient buffer (its layers, the embeddings
   on the first and last stage, padded to a multiple of 64·d).

     tensor     per layer per microbatch 8·b·s·h·(t−1)/t·e (two all-reduces of b·s·h in the
                forward, two in the backward); with sequence parallelism 10·… (the four all-
                reduces become all-gather/reduce-scatter pairs of the same volume, and the
                backward re-gathers the two layernorm outputs for the weight gradients);
                × l/p layers on this rank × m. With p > 1 and t > 1 without sequence
                parallelism, Megatron's scatter/gather adds the all-gather that rebuilds every
                received pipeline message: (t−1)/t·b·s·h·e each.
                Beyond the paper's per-layer count (tensor_outside), with X = (t−1)/t·b·s·h·e
                (one all-gather or reduce-scatter of a [b·s, h] activation; an all-reduce is
                2X) per microbatch: the vocabulary-parallel embedding on the first stage, 2X
                (the all-reduce of its output; with sequence parallelism a reduce-scatter and
                the backward's all-gather); the output layer and cross-entropy on the last
                (the fused classifier, whose forward runs its backward too), 2X (the
                all-reduce of the input gradient; with sequence parallelism the final
                layernorm's output gathered once and the input gradient reduce-scattered) +
                the b·s fp32 statistics (row max, then the sums of exponentials and the target
                logits: three b·s all-reduces' worth); and per iteration, with sequence
                parallelism, the all-reduce of
                the layernorm gradients, 2·(t−1)/t·4·h·(4 per layer + 2 on the last stage).
     pipeline   one message of b·s·h/t·e per microbatch across every boundary between virtual
                stages, forward (the activation) and backward (its gradient); with t > 1 each
                tensor rank sends its 1/t (scatter/gather, or its own slice under sequence
                parallelism). A rank sends m messages for each virtual stage it holds that is
                not the last (forward) and m for each that is not the first (backward):
                2·v·m messages, m fewer on the first pipeline rank and m fewer on the last
                (with v = 1 and p = 2: m each).
     data       the ring all-reduce of the gradients, 2·(d−1)/d·4·P_r; the distributed
                optimizer's reduce-scatter of the fp32 gradients, (d−1)/d·4·P_r, plus the
                all-gather of the updated weights, (d−1)/d·P_r·(4, or e when mixed precision
                shards the fp32 master).
     embedding  p > 1, first and last stage only: the all-reduce of the tied word embedding's
                gradient [Vp/t, h] between the two, 2·(2−1)/2·4·Vp·h/t.

   Left out everywhere: the per-iteration scalars (loss, gradient norm: a few floats on the
   data, tensor and pipeline groups), tens of bytes against the megabytes above. Counted for
   training without activation recomputation (a recomputed forward repeats its tensor-parallel
   communication).                                                                          */
#ifndef BENCH_TRAFFIC_H
#define BENCH_TRAFFIC_H
#include "megatron.h"

typedef struct traffic {
    double tensor, pipeline, data, embedding;   /* bytes sent per iteration, this rank       */
    double tensor_outside;                      /* tensor group beyond the paper's layers   */
    double pipeline_messages;                   /* messages this rank sends per iteration    */
} traffic;

/* PAPER.md's volumes for this rank of a set-up trainer (see above). */
static inline traffic traffic_formula(const mg_trainer *tr) {
    const mg_gpt_layout *L = &tr->model.layout;
    traffic f;
    int t = L->tp_size, p = tr->pp, v = tr->vp, d = tr->dp_size > 1 ? tr->dp_size : 1;
    int sp = tr->model.tf.tp.sequence_parallel, c;
    int has_head = L->chunks[L->n_chunks - 1].has_head;
    double m = tr->n_micro, e = (double)mg_dtype_size((mg_dtype)L->dtype);
    double bs = (double)L->micro_batch * tr->cfg.seq_len, bsh = bs * tr->cfg.hidden;
    double X = (t - 1.0) / t * bsh * e;  /* one all-gather / reduce-scatter of [b·s, h]     */
    double P = (double)tr->model.n_elems, share = (d - 1.0) / d;
    double weight_bytes = tr->model.layout.shard_master ? e : 4.0;
    memset(&f, 0, sizeof f);
    /* pipeline: virtual stage c·p + pp_rank of S = p·v sends forward unless it is the last,
       backward unless it is the first                                                      */
    if (p > 1)
        for (c = 0; c < v; c++) {
            int stage = c * p + L->pp_rank;
            f.pipeline_messages += (stage < p * v - 1 ? m : 0) + (stage > 0 ? m : 0);
        }
    f.pipeline = f.pipeline_messages * bsh / t * e;
    /* tensor: the paper's per-layer volume over this rank's l/p layers, and scatter/gather's
       all-gather of each received message (a rank receives as many as it sends)           */
    f.tensor = (sp ? 10.0 : 8.0) * bsh * (t - 1.0) / t * e * ((double)tr->cfg.n_layer / p) * m;
    if (p > 1 && t > 1 && !sp) f.tensor += f.pipeline_messages * X;
    /* tensor, outside the layers: embedding, head, sequence-parallel layernorm gradients   */
    if (L->chunks[0].has_embedding) f.tensor_outside += 2 * X * m;
    if (has_head) f.tensor_outside += (2 * X + 3 * 2 * (t - 1.0) / t * bs * 4) * m;
    if (sp)
        f.tensor_outside += 2 * (t - 1.0) / t * 4 * tr->cfg.hidden *
                            (4.0 * tr->cfg.n_layer / p + (has_head ? 2 : 0));
    /* data */
    f.data = tr->dp.distributed ? share * 4 * P + share * weight_bytes * P : 2 * share * 4 * P;
    /* embedding group: the tied word embedding, first and last stage */
    if (p > 1 && (L->chunks[0].has_embedding || has_head))
        f.embedding = 4.0 * tr->cfg.padded_vocab * tr->cfg.hidden / t;
    return f;
}

/* mg_comm's counters for the same groups (bytes sent since the last mg_comm_reset_traffic),
   divided by the iterations run since.                                                    */
static inline traffic traffic_counted(const mg_comm *comm, int iterations) {
    traffic c;
    memset(&c, 0, sizeof c);
    c.tensor = (double)comm->bytes_sent[MG_GROUP_TENSOR] / iterations;
    c.pipeline = (double)comm->bytes_sent[MG_GROUP_PIPELINE] / iterations;
    c.data = (double)comm->bytes_sent[MG_GROUP_DATA] / iterations;
    c.embedding = (double)comm->bytes_sent[MG_GROUP_EMBEDDING] / iterations;
    return c;
}
#endif
