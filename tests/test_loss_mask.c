// mg-test: ranks=1,2,4 timeout=300 flavors=cpu,cuda,asan
/* test_loss_mask.c — Megatron-LM's loss mask (--eod-mask-loss) changes nothing but speed and
   memory under any layout. The end-of-document id is 7, the most frequent id of the oracle's
   token stream (tests/oracle/gpt.py, whose masked runs test_train checks on one rank), so most
   microbatches of 16 positions lose one or more of them and keep different counts: each
   microbatch's loss is the mean over its own kept positions, which a layout that mixed up
   microbatches, positions or counts would change. Every row trains 8 AdamW steps (a global
   batch of 8 sequences of 16 tokens, micro-batch 1 or 2) and is compared with the serial run
   of the same flags in the same process: losses and gradient norms, and the masked validation
   loss after the 8 steps (one global batch, the same data), to <= 1e-5 relative, the
   final weights (gathered) to <= 5e-5 of each tensor's RMS, and the weights bit-identical on
   every replica. (The weights' tolerance: Adam divides each gradient by √v, which amplifies
   the fp32 reordering of an element whose gradient is near zero — with per-token loss under
   c=2 one element of the first MLP weight lands 0.9–1.2e-5 from the serial run's while the
   losses and gradient norms agree to 1e-7; the other rows stay under 3e-6.)
     2 ranks  t=2 with sequence parallelism; p=2 1F1B; d=2; c=2 (each context rank keeps its
              own positions' targets; the microbatch's count is the whole sequence's); d=2 and
              c=2 with --calculate-per-token-loss (the global batch's count, summed over the
              data group before the first forward)
     4 ranks  t=2 × p=2 interleaved; p=2 × d=2 ZB-H1 with per-token loss; t=2 × c=2 × d=1
              with the distributed optimizer; c=2 × d=2 with per-token loss
   On one rank: the validation loss under the mask (Σ kept losses / Σ kept positions over the
   evaluated batches) read from the training data before any step equals the first training
   step's loss (the oracle-checked formula); the per-token and the per-microbatch runs differ
   (so the rows above tell them apart); an id that never occurs masks nothing (the run equals
   the unmasked one bit for bit); and the flags' errors: --eod-mask-loss without an id,
   --eod-token-id without --eod-mask-loss, an id outside the vocabulary.                     */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

#define STEPS 8
#define TOL 1e-5
#define WTOL 5e-5   /* see the top of the file */
#define EOD " --eod-mask-loss --eod-token-id 7"
#define PER_TOKEN " --calculate-per-token-loss"
#define BASE_LINE "--train-data-path " GPT_DATA "gpt_tokens.bin --valid-data-path " GPT_DATA     \
    "gpt_tokens.bin --data-order sequential --eval-iters 1 --eval-interval 1000 "              \
    "--seq-length 16 --global-batch-size 8 --train-iters 8 "                                  \
    "--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 2 --lr-decay-iters 8 --lr-decay-style cosine "   \
    "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 7 --vocab-size 37 "            \
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 "

typedef struct mask_row {
    int world;
    int micro;            /* --micro-batch-size                                               */
    int per_token;        /* --calculate-per-token-loss                                       */
    const char *layout;   /* the parallel flags                                               */
} mask_row;
static const mask_row rows[] = {
    {2, 2, 0, "--tensor-model-parallel-size 2 --sequence-parallel"},
    {2, 1, 0, "--pipeline-model-parallel-size 2 --pipeline-schedule 1f1b"},
    {2, 2, 0, ""},   /* d = 2 */
    {2, 1, 0, "--context-parallel-size 2"},
    {2, 1, 1, ""},
    {2, 2, 1, "--context-parallel-size 2"},
    {4, 1, 0, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
              "--num-layers-per-virtual-pipeline-stage 1"},
    {4, 1, 1, "--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1"},
    {4, 2, 0, "--tensor-model-parallel-size 2 --context-parallel-size 2 "
              "--use-distributed-optimizer"},
    {4, 1, 1, "--context-parallel-size 2 --use-distributed-optimizer"},
};

static void line_of(char *out, size_t cap, int micro, int per_token, const char *layout,
                    const char *extra) {
    snprintf(out, cap, BASE_LINE "--micro-batch-size %d %s" EOD "%s %s", micro, layout,
             per_token ? PER_TOKEN : "", extra);
}

/* The serial runs, one per (micro-batch size, per-token), made when first needed. */
static mg_trainer ser[3][2];
static float ser_loss[3][2][STEPS], ser_norm[3][2][STEPS];
static double ser_valid[3][2];
static int have[3][2];
static mg_trainer *serial(int micro, int per_token) {
    if (!have[micro][per_token]) {
        char line[2048];
        line_of(line, sizeof line, micro, per_token, "", "");
        gpt_setup_or_die(&ser[micro][per_token], line, NULL);
        gpt_train_steps(&ser[micro][per_token], STEPS, ser_loss[micro][per_token],
                        ser_norm[micro][per_token]);
        ser_valid[micro][per_token] = mg_trainer_evaluate(&ser[micro][per_token], NULL);
        have[micro][per_token] = 1;
    }
    return &ser[micro][per_token];
}

static void check_row(const mask_row *row) {
    char line[2048], name[400];
    mg_trainer tr, *s = serial(row->micro, row->per_token);
    float loss[STEPS], norm[STEPS];
    double e_loss, e_norm, e_w, valid, e_valid;
    uint64_t sum;
    line_of(line, sizeof line, row->micro, row->per_token, row->layout, "");
    gpt_setup_or_die(&tr, line, &comm);
    gpt_train_steps(&tr, STEPS, loss, norm);
    e_loss = gpt_agree_max(mg_test_max_rel(loss, ser_loss[row->micro][row->per_token], STEPS, 0));
    e_norm = gpt_agree_max(mg_test_max_rel(norm, ser_norm[row->micro][row->per_token], STEPS, 0));
    valid = mg_trainer_evaluate(&tr, NULL);   /* the masked validation loss, every rank */
    e_valid = gpt_agree_max(fabs(valid - ser_valid[row->micro][row->per_token]) /
                            fabs(ser_valid[row->micro][row->per_token]));
    mg_adamw_gather_master(&tr.opt, &tr.model);
    e_w = gpt_agree_max(gpt_compare_weights(&tr.model, &s->model, &sum));
    snprintf(name, sizeof name, "loss mask%s: %s (micro-batch %d, d=%d): %d steps and the "
             "validation loss after them = serial; weights bit-identical on every replica",
             row->per_token ? ", per token" : "", row->layout[0] ? row->layout : "data parallel",
             row->micro, tr.dp_size, STEPS);
    mg_test_report(e_loss <= TOL && e_norm <= TOL && e_valid <= TOL && e_w <= WTOL &&
                   gpt_same_on_stage(&comm, sum), name, "losses %.3g, grad norms %.3g, "
                   "validation %.3g, weights %.3g (tol %.0e, weights %.0e)", e_loss, e_norm,
                   e_valid, e_w, TOL, WTOL);
    mg_trainer_free(&tr);
}

/* One rank: what the rows lean on. */
static void check_serial(void) {
    char line[2048];
    mg_trainer tr, plain, never;
    float l_plain[STEPS], n_plain[STEPS], l_never[STEPS], n_never[STEPS];
    double valid, e_pt;
    mg_step_result r;
    int k, same = 1;
    /* validation from the training data at iteration 0 = the first step's loss */
    snprintf(line, sizeof line, BASE_LINE "--micro-batch-size 2" EOD);
    gpt_setup_or_die(&tr, line, NULL);
    valid = mg_trainer_evaluate(&tr, NULL);
    r = mg_trainer_step(&tr);
    mg_test_report(fabs(valid - r.loss) <= 1e-6 * fabs(r.loss), "loss mask: the validation "
                   "loss before training (the training data's first batch) = the first step's "
                   "loss", "validation %.9f, step %.9f", valid, r.loss);
    mg_trainer_free(&tr);
    /* the two normalisations differ on this data */
    serial(2, 0);
    serial(2, 1);
    e_pt = mg_test_max_rel(ser_loss[2][1], ser_loss[2][0], STEPS, 0);
    mg_test_report(e_pt > 10 * TOL, "loss mask: --calculate-per-token-loss changes the run "
                   "(the microbatches keep different counts)", "losses differ by %.3g "
                   "relative", e_pt);
    /* an id the data never holds masks nothing: the unmasked run, bit for bit */
    snprintf(line, sizeof line, BASE_LINE "--micro-batch-size 2");
    gpt_setup_or_die(&plain, line, NULL);
    gpt_train_steps(&plain, STEPS, l_plain, n_plain);
    snprintf(line, sizeof line, BASE_LINE "--micro-batch-size 2 --eod-mask-loss "
             "--eod-token-id 14");
    gpt_setup_or_die(&never, line, NULL);
    {   /* 14 must indeed be absent from the samples the run reads */
        int64_t n = (int64_t)STEPS * 8 * 16 + 1, i;
        int32_t *toks = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        FILE *f = fopen(GPT_DATA "gpt_tokens.bin", "rb");
        uint16_t v;
        if (!f || fseek(f, 1024, SEEK_SET)) { perror("gpt_tokens.bin"); exit(1); }
        for (i = 0; i < n && fread(&v, 2, 1, f) == 1; i++) toks[i] = v;
        fclose(f);
        for (k = 0; k < i; k++) same &= toks[k] != 14;
        free(toks);
    }
    gpt_train_steps(&never, STEPS, l_never, n_never);
    for (k = 0; k < STEPS; k++) same &= l_never[k] == l_plain[k] && n_never[k] == n_plain[k];
    mg_test_report(same, "loss mask: an id the data never holds masks nothing (the unmasked "
                   "run bit for bit)", "");
    mg_trainer_free(&plain);
    mg_trainer_free(&never);
}

int main(int argc, char **argv) {
    int i, a, b;
    char line[2048];
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    if (world == 1) check_serial();
    for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++)
        if (rows[i].world == world) check_row(&rows[i]);
    snprintf(line, sizeof line, BASE_LINE "--eod-mask-loss");
    gpt_expect_error(world > 1 ? &comm : NULL, "loss mask", "--eod-mask-loss without an id",
                     line, "--eod-mask-loss needs the end-of-document id: --tokenizer-type");
    snprintf(line, sizeof line, BASE_LINE "--eod-token-id 3");
    gpt_expect_error(world > 1 ? &comm : NULL, "loss mask", "--eod-token-id alone", line,
                     "--eod-token-id 3 applies to --eod-mask-loss");
    snprintf(line, sizeof line, BASE_LINE "--eod-mask-loss --eod-token-id 37");
    gpt_expect_error(world > 1 ? &comm : NULL, "loss mask", "an id outside the vocabulary",
                     line, "--eod-token-id 37 is outside the vocabulary 0 … 36");
    for (a = 0; a < 3; a++)
        for (b = 0; b < 2; b++) if (have[a][b]) mg_trainer_free(&ser[a][b]);
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
