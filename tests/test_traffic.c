// mg-test: ranks=4 timeout=120
/* test_traffic.c — the communication volumes bench/scaling prints from PAPER.md's formulas
   (bench/traffic.h) equal what mg_comm counts, rank by rank. For every layout of the table,
   a tiny GPT trains through gpt_train's own trainer on 4 ranks: one warm-up iteration, then
   ITERS counted ones; per rank and per iteration, counted − formula must lie in [0, 32·n)
   bytes for the pipeline (point-to-point: b·s·h/t·e per message, 2·v·m messages, m fewer on
   the first and on the last pipeline rank), data (ring all-reduce 2·(d−1)/d·4·P_r, or the
   distributed optimizer's reduce-scatter + all-gather), embedding (the tied word embedding
   between the first and the last stage) and tensor groups (the paper's 8·b·s·h·(t−1)/t per
   layer per microbatch, 10·… with sequence parallelism, scatter/gather's all-gathers, and
   traffic.h's embedding, head and layernorm-gradient terms), n the group's size: what may
   remain are the loss and gradient-norm scalars (a few floats per collective, on groups of
   n ranks), while the smallest term a formula counts — one all-reduce of a microbatch's b·s
   fp32 cross-entropy statistics over 2 ranks — is 128 bytes, a message ≥ 1 KiB. Layouts: pipeline × data with 1F1B, GPipe + ZeRO-1, bf16 + ZeRO-1
   (2-byte messages and weights); tensor × pipeline with scatter/gather, with sequence
   parallelism under ZB-H1, in bf16; interleaved 1F1B (v = 2) over 4 stages; tensor × data
   without a pipeline. The table is the one place to add layouts.                            */
#include "gpt_test_util.h"
#include "bench/traffic.h"

#define ITERS 2
#define BASE "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 --num-layers 8 "     \
             "--hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 " \
             "--global-batch-size 16 --lr 1e-3 --split 1,0,0 --eval-iters 0 --train-iters 3 "

typedef struct { int t, p; const char *flags; } traffic_case;
static const traffic_case cases[] = {
    {1, 2, "--pipeline-schedule 1f1b"},
    {1, 2, "--pipeline-schedule gpipe --use-distributed-optimizer"},
    {1, 2, "--pipeline-schedule 1f1b --bf16 --use-distributed-optimizer"},
    {2, 2, "--pipeline-schedule 1f1b"},
    {2, 2, "--pipeline-schedule zb-h1 --sequence-parallel"},
    {2, 2, "--pipeline-schedule 1f1b --bf16"},
    {1, 4, "--num-layers-per-virtual-pipeline-stage 1"},
    {2, 1, ""},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* counted − formula in [0, 32·n) bytes per iteration; the detail line on failure */
static int within(const char *group, double counted, double formula, int n, char *why,
                  size_t cap) {
    double diff = counted - formula;
    if (diff >= 0 && diff < 32.0 * n) return 1;
    if (!why[0])
        snprintf(why, cap, "%s: counted %.0f, formula %.0f", group, counted, formula);
    return 0;
}

int main(int argc, char **argv) {
    static mg_comm comm;
    int k;
    mg_comm_init(&comm, &argc, &argv);
    mg_test_quiet = comm.world_rank != 0;
    for (k = 0; k < N_CASES; k++) {
        const traffic_case *c = &cases[k];
        mg_trainer tr;
        traffic f, n;
        char line[1024], name[300], why[300] = "";
        int i, ok = 1;
        snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d "
                 "--pipeline-model-parallel-size %d %s", c->t, c->p, c->flags);
        gpt_setup_or_die(&tr, line, &comm);
        mg_trainer_step(&tr);                      /* warm-up: first-iteration work aside */
        mg_comm_reset_traffic(&comm);
        for (i = 0; i < ITERS; i++) mg_trainer_step(&tr);
        n = traffic_counted(&comm, ITERS);
        f = traffic_formula(&tr);
        ok &= within("pipeline", n.pipeline, f.pipeline, comm.pipeline.size, why, sizeof why);
        ok &= within("data", n.data, f.data, comm.data.size, why, sizeof why);
        ok &= within("embedding", n.embedding, f.embedding, 2, why, sizeof why);
        ok &= within("tensor", n.tensor, f.tensor + f.tensor_outside, comm.tensor.size, why,
                     sizeof why);
        /* the layouts exercise what they name: messages on every pipeline rank, replicas */
        ok &= (c->p == 1) == (f.pipeline_messages == 0) && (tr.dp_size > 1) == (f.data > 0);
        if (!ok) fprintf(stderr, "rank %d (tp %d, pp %d, dp %d): %s\n", comm.world_rank,
                         tr.model.layout.tp_rank, tr.model.layout.pp_rank, tr.dp_rank,
                         why[0] ? why : "a group is idle that the layout should use");
        snprintf(name, sizeof name, "traffic: t=%d p=%d d=%d%s%s: mg_comm's bytes per rank per "
                 "iteration equal the formulas (pipeline, data, embedding, tensor)", c->t, c->p,
                 tr.dp_size, c->flags[0] ? " " : "", c->flags);
        mg_test_report(mg_test_agree(ok), name, "rank 0: pipeline %.0f B (%.0f messages), "
                       "data %.0f B, embedding %.0f B, tensor %.0f B", n.pipeline,
                       f.pipeline_messages, n.data, n.embedding, n.tensor);
        mg_trainer_free(&tr);
    }
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
