// mg-test: ranks=1,2 timeout=300
/* test_recompute.c — activation recomputation changes nothing (issue 8).

   On W ranks (the runner uses 1 and 2: t = W tensor-parallel ranks) every recomputation
   setting trains 6 AdamW steps (2 microbatches of 2, 3 layers, hidden and attention dropout
   0.1 on, so every recomputed forward must regenerate the same masks) beside the same run
   without recomputation, and:
     - the 6 losses and gradient norms are BIT-identical (memcmp of the doubles);
     - every rank's parameter shard and both Adam moments are bit-identical afterwards;
   for selective, full uniform (groups of 1 and of 2 layers: 3 layers make a short last
   group), full block (1 and 2 layers), each with and without --sequence-parallel.
   On 2 ranks also through the ZB-H1 pipeline (p = 2, 4 layers, 4 microbatches of 1: the
   weight half W of a microbatch runs after later microbatches' forwards and input halves
   have reused the shared scratch): every setting above, plus bf16 with full recomputation
   and fp16 (constant loss scale) with full block recomputation, trains 6 steps bit-identical
   — losses, grad norms, each stage's weights and Adam moments — to ZB-H1 without
   recomputation AND to 1F1B without recomputation in the same precision (the split backward
   does the same operations on the same bits, each parameter's gradient summed over the
   microbatches in the same order).
   Also, on the model level (one rank's view, the serial model, 2 chunks of 3 and 2 layers so
   that block counts per chunk): the gradients of one dropout forward/backward are bit-
   identical under every setting; and the per-microbatch activation bytes fall as promised
   (none > selective > full, block in between), so the stored tensors really are gone — a
   recomputed layer's borrowed scratch is overwritten by the next layer's forward, so a
   backward that skipped the recomputation would read another layer's values and fail the
   bit-identity above. The same model with the backward split the ZB-H1 way (forwards of
   both microbatches, then both input halves, then both weight halves; fp32 and bf16, every
   setting) gives the unsplit gradients bit for bit (the tied word embedding to 1e-6: its
   embedding part, from I, and output-layer part, from W, are added in another order when
   one rank holds both), and a split layout's activation bytes
   exceed the unsplit one's by exactly the kept output gradients (the head keeps none: its
   fused classifier computes the output layer's weight gradient before W). The recomputed-FLOP
   count of a split backward counts full recomputation twice (W re-runs the forward),
   selective once.
   The attention backend: selective recomputation is checked under --attention-backend
   unfused (the flash backward recomputes the probabilities anyway, so selective stores
   the same bytes as none there — checked), full recomputation under both.                */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

#define STEPS 6
#define BASE_LINE "--data-path " GPT_DATA "gpt_tokens.bin --data-order sequential --split 1,0,0 " \
    "--eval-iters 0 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 "                \
    "--train-iters 6 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 2 --lr-decay-style cosine "      \
    "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 7 "                            \
    "--vocab-size 37 --num-layers 3 --hidden-size 32 --num-attention-heads 4 "                  \
    "--hidden-dropout 0.1 --attention-dropout 0.1 "

static const char *const settings[5] = {
    "--recompute-granularity selective",
    "--recompute-granularity full",
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2",
    "--recompute-granularity full --recompute-method block --recompute-num-layers 1",
    "--recompute-granularity full --recompute-method block --recompute-num-layers 2",
};

static void trainer_make(mg_trainer *tr, const char *line) {
    gpt_trainer_on(tr, line, &comm);
}

/* 1 iff n device floats are bitwise equal in both models' contexts. */
static int same_bits(mg_gpt *a, const float *x, mg_gpt *b, const float *y, int64_t n) {
    float *hx = (float *)malloc(sizeof(float) * (size_t)n);
    float *hy = (float *)malloc(sizeof(float) * (size_t)n);
    int same;
    mg_copy_to_host(a->ctx, hx, x, sizeof(float) * (size_t)n);
    mg_copy_to_host(b->ctx, hy, y, sizeof(float) * (size_t)n);
    same = !memcmp(hx, hy, sizeof(float) * (size_t)n);
    free(hx);
    free(hy);
    return same;
}

/* The trainer with `setting` against the plain one, STEPS steps, t = world; both with the
   attention backend flags `backend` ("" the default, flash). */
static void check_training(const char *setting, int sp, const char *backend) {
    char line[2048], name[300];
    mg_trainer plain, rc;
    double lp[STEPS], lr[STEPS], gp[STEPS], gr[STEPS];
    int k, same;
    snprintf(line, sizeof line, BASE_LINE "%s--tensor-model-parallel-size %d%s", backend, world,
             sp ? " --sequence-parallel" : "");
    trainer_make(&plain, line);
    snprintf(line + strlen(line), sizeof line - strlen(line), " %s", setting);
    trainer_make(&rc, line);
    for (k = 0; k < STEPS; k++) {
        mg_step_result a = mg_trainer_step(&plain), b = mg_trainer_step(&rc);
        lp[k] = a.loss; lr[k] = b.loss; gp[k] = a.grad_norm; gr[k] = b.grad_norm;
    }
    snprintf(name, sizeof name, "recompute t=%d%s %s%s: %d losses and grad norms bit-identical",
             world, sp ? " sp" : "", backend, setting + 24, STEPS);
    same = !memcmp(lp, lr, sizeof lp) && !memcmp(gp, gr, sizeof gp) &&
           lp[STEPS - 1] == lp[STEPS - 1];   /* and not nan */
    mg_test_report(mg_test_agree(same), name, "last loss %.9g vs %.9g", lr[STEPS - 1],
                   lp[STEPS - 1]);
    snprintf(name, sizeof name, "recompute t=%d%s %s%s: weights and Adam moments bit-identical",
             world, sp ? " sp" : "", backend, setting + 24);
    same = same_bits(&plain.model, plain.model.param_buf, &rc.model, rc.model.param_buf,
                     plain.model.n_elems) &&
           same_bits(&plain.model, plain.opt.m, &rc.model, rc.opt.m, plain.model.n_elems) &&
           same_bits(&plain.model, plain.opt.v, &rc.model, rc.opt.v, plain.model.n_elems);
    mg_test_report(mg_test_agree(same), name, "%s", "");
    mg_trainer_free(&rc);
    mg_trainer_free(&plain);
}

/* p = 2 (2 ranks): ZB-H1 with `setting` in `precision` against ZB-H1 and 1F1B without
   recomputation in the same precision.                                                   */
#define ZB_LINE BASE_LINE "--num-layers 4 --micro-batch-size 1 --pipeline-model-parallel-size 2 "
static void check_zb(const char *precision, const char *const *zb_settings, int n_settings) {
    char line[2048], name[300];
    gpt_run zb, f1b, rc;
    int i;
    snprintf(line, sizeof line, ZB_LINE "--pipeline-schedule zb-h1 %s", precision);
    gpt_run_train(&zb, line, &comm, STEPS);
    snprintf(line, sizeof line, ZB_LINE "--pipeline-schedule 1f1b %s", precision);
    gpt_run_train(&f1b, line, &comm, STEPS);
    snprintf(name, sizeof name, "recompute zb-h1 p=2 %s: no recomputation = 1f1b bit for bit",
             precision[0] ? precision : "fp32");
    mg_test_report(mg_test_agree(gpt_run_same(&zb, &f1b)), name, "last loss %.9g vs %.9g",
                   zb.loss[STEPS - 1], f1b.loss[STEPS - 1]);
    for (i = 0; i < n_settings; i++) {
        snprintf(line, sizeof line, ZB_LINE "--pipeline-schedule zb-h1 %s %s", precision,
                 zb_settings[i]);
        gpt_run_train(&rc, line, &comm, STEPS);
        snprintf(name, sizeof name, "recompute zb-h1 p=2 %s %s: %d losses, grad norms, weights "
                 "and Adam moments bit-identical to zb-h1 and to 1f1b without recomputation",
                 precision[0] ? precision : "fp32", zb_settings[i] + 24, STEPS);
        mg_test_report(mg_test_agree(gpt_run_same(&rc, &zb) && gpt_run_same(&rc, &f1b)), name,
                       "last loss %.9g vs %.9g", rc.loss[STEPS - 1], zb.loss[STEPS - 1]);
        gpt_run_free(&rc);
    }
    gpt_run_free(&zb);
    gpt_run_free(&f1b);
}

/* Serial model of 5 layers in 2 chunks; one dropout forward/backward of 2 microbatches.
   split: 2 activation slots and a split backward (layout.split_backward).                 */
static int model_backend;   /* the attention backend of model_make's layouts */
static void model_make(gpt_fixture *f, int gran, int method, int n, mg_dtype dt, int split) {
    mg_gpt_config c;
    mg_gpt_layout L;
    char err[MG_ERRLEN];
    memset(&c, 0, sizeof c);
    c.n_layer = 5; c.hidden = 32; c.n_head = 4; c.seq_len = 8; c.max_pos = 8;
    c.vocab_size = 37; c.padded_vocab = mg_gpt_pad_vocab(37, 128, 1);
    c.hidden_dropout = 0.1f; c.attention_dropout = 0.2f; c.dropout_seed = 11;
    L = mg_gpt_layout_single(&c, 2, 2, 2);
    L.dtype = dt;
    L.n_slots = split ? 2 : 1;
    L.split_backward = split;
    L.recompute_granularity = gran;
    L.recompute_method = method;
    L.recompute_num_layers = n;
    L.attention_backend = model_backend;
    f->ctx = gpt_ctx(mg_gpt_arena_bytes(&c, &L) + (8u << 20));
    if (mg_gpt_create(&f->m, &f->ctx, &c, &L, err, sizeof err)) {
        fprintf(stderr, "mg_gpt_create: %s\n", err);
        exit(1);
    }
    mg_gpt_init_weights(&f->m, 5);
}

/* Returns the activation bytes without recomputation. */
static size_t check_model_chunks(int backend) {
    static const int cases[5][3] = {{MG_RECOMPUTE_SELECTIVE, 0, 0},
                                    {MG_RECOMPUTE_FULL, MG_RECOMPUTE_UNIFORM, 1},
                                    {MG_RECOMPUTE_FULL, MG_RECOMPUTE_UNIFORM, 2},
                                    {MG_RECOMPUTE_FULL, MG_RECOMPUTE_BLOCK, 1},
                                    {MG_RECOMPUTE_FULL, MG_RECOMPUTE_BLOCK, 2}};
    int32_t samples[2 * 2 * 9];
    gpt_fixture ref, f;
    double loss_ref, loss;
    size_t bytes[5];
    int i, k;
    char name[200];
    size_t none;
    const char *bk = backend == MG_ATTN_FLASH ? "flash" : "unfused";
    for (i = 0; i < 2 * 2 * 9; i++) samples[i] = (i * 7 + 3) % 37;
    model_backend = backend;
    model_make(&ref, MG_RECOMPUTE_NONE, 0, 0, MG_F32, 0);
    ref.m.training = 1;
    mg_gpt_zero_grad(&ref.m);
    loss_ref = mg_gpt_run_microbatches(&ref.m, samples, 2, 0.03f, 1);
    for (k = 0; k < 5; k++) {
        model_make(&f, cases[k][0], cases[k][1], cases[k][2], MG_F32, 0);
        f.m.training = 1;
        mg_gpt_zero_grad(&f.m);
        loss = mg_gpt_run_microbatches(&f.m, samples, 2, 0.03f, 1);
        bytes[k] = f.m.act_bytes;
        snprintf(name, sizeof name, "recompute model %s, 2 chunks, %s %s N=%d: loss and gradients "
                 "bit-identical", bk, cases[k][0] == MG_RECOMPUTE_FULL ? "full" : "selective",
                 cases[k][1] == MG_RECOMPUTE_BLOCK ? "block" : "uniform", cases[k][2]);
        mg_test_report(mg_test_agree(loss == loss_ref &&
                                     same_bits(&f.m, f.m.grad_buf, &ref.m, ref.m.grad_buf,
                                               f.m.n_elems)), name, "loss %.9g vs %.9g", loss,
                       loss_ref);
        gpt_fixture_free(&f);
    }
    /* unfused: selective drops the probabilities; flash keeps none to drop (the same bytes) */
    snprintf(name, sizeof name, "recompute %s: activation bytes none %zu > block-1 %zu > "
             "block-2 %zu > full %zu; none %s selective %zu > full", bk, ref.m.act_bytes, bytes[3],
             bytes[4], bytes[1], backend == MG_ATTN_FLASH ? "=" : ">", bytes[0]);
    mg_test_report(mg_test_agree(ref.m.act_bytes > bytes[3] && bytes[3] > bytes[4] &&
                                 bytes[4] > bytes[1] &&
                                 (backend == MG_ATTN_FLASH ? ref.m.act_bytes == bytes[0]
                                                           : ref.m.act_bytes > bytes[0]) &&
                                 bytes[0] > bytes[1] && bytes[2] < bytes[1]), name, "%s", "");
    none = ref.m.act_bytes;
    gpt_fixture_free(&ref);
    return none;
}

/* The two microbatches of samples through every chunk with the backward split the ZB-H1 way
   — F0 F1, then the input halves I0 I1, then the weight halves W0 W1 — so that microbatch
   1's forward and input half overwrite the shared scratch (recomputation's, the
   classifier's) between microbatch 0's input and weight halves. Returns the summed token loss. */
static double run_split(mg_gpt *m, const int32_t *samples, float dloss) {
    int64_t per_mb = (int64_t)m->layout.micro_batch * (m->cfg.seq_len + 1);
    int mb, ch, nc = m->layout.n_chunks;
    mg_gpt_sync_weights(m);
    for (mb = 0; mb < 2; mb++)
        for (ch = 0; ch < nc; ch++) {
            mg_gpt_set_batch(m, ch, mb, samples + mb * per_mb);
            if (ch > 0)
                mg_copy(m->ctx, mg_gpt_chunk_input(m, ch, mb)->data,
                        mg_gpt_chunk_output(m, ch - 1, mb)->data,
                        mg_nbytes(mg_gpt_chunk_input(m, ch, mb)));
            mg_gpt_forward(m, ch, mb, mb);
        }
    for (mb = 0; mb < 2; mb++)
        for (ch = nc - 1; ch >= 0; ch--) mg_gpt_backward_input(m, ch, mb, dloss);
    for (mb = 0; mb < 2; mb++)
        for (ch = nc - 1; ch >= 0; ch--) mg_gpt_backward_weight(m, ch, mb);
    return mg_gpt_loss_sum(m, 0, 2);
}

/* The split backward equals the whole one bit for bit, fp32 and bf16, every setting; a split
   layout stores exactly the output gradients more.                                        */
static void check_model_split(void) {
    static const int cases[5][3] = {{MG_RECOMPUTE_NONE, 0, 0},
                                    {MG_RECOMPUTE_SELECTIVE, 0, 0},
                                    {MG_RECOMPUTE_FULL, MG_RECOMPUTE_UNIFORM, 1},
                                    {MG_RECOMPUTE_FULL, MG_RECOMPUTE_UNIFORM, 2},
                                    {MG_RECOMPUTE_FULL, MG_RECOMPUTE_BLOCK, 1}};
    static const mg_dtype dts[2] = {MG_F32, MG_BF16};
    int32_t samples[2 * 2 * 9];
    gpt_fixture ref, f;
    double loss_ref, loss;
    int i, k, d;
    char name[300], what[40];
    for (i = 0; i < 2 * 2 * 9; i++) samples[i] = (i * 5 + 1) % 37;
    for (d = 0; d < 2; d++) {
        model_make(&ref, MG_RECOMPUTE_NONE, 0, 0, dts[d], 0);
        ref.m.training = 1;
        mg_gpt_zero_grad(&ref.m);
        loss_ref = mg_gpt_run_microbatches(&ref.m, samples, 2, 0.03f, 1);
        for (k = 0; k < 5; k++) {
            size_t dout, want;
            model_make(&f, cases[k][0], cases[k][1], cases[k][2], dts[d], 1);
            f.m.training = 1;
            mg_gpt_zero_grad(&f.m);
            loss = run_split(&f.m, samples, 0.03f);
            snprintf(what, sizeof what, "%s N=%d", cases[k][0] == MG_RECOMPUTE_FULL ?
                     (cases[k][1] == MG_RECOMPUTE_BLOCK ? "full block" : "full uniform") :
                     cases[k][0] ? "selective" : "none", cases[k][2]);
            snprintf(name, sizeof name, "recompute model, split backward (F0 F1 I0 I1 W0 W1), %s "
                     "%s: loss and gradients = the whole backward's, bit for bit (the tied "
                     "embedding to 1e-6)", dts[d] == MG_F32 ? "fp32" : "bf16", what);
            {
                float *got = gpt_host(&f.m, f.m.grad_buf), *want = gpt_host(&ref.m, ref.m.grad_buf);
                double e_wte = 0;
                int same = 1;
                for (i = 0; i < f.m.n_params; i++) {
                    const mg_param_desc *pd = &f.m.params[i];
                    if (pd->kind == MG_WTE) e_wte = gpt_param_err(pd, got, want);
                    else same &= !memcmp(got + pd->offset, want + pd->offset,
                                         sizeof(float) * (size_t)pd->numel);
                }
                mg_test_report(mg_test_agree(loss == loss_ref && same && e_wte <= 1e-6), name,
                               "loss %.9g vs %.9g, other tensors %s, tied wte %.3g", loss,
                               loss_ref, same ? "bit-identical" : "DIFFER", e_wte);
                free(got);
                free(want);
            }
            /* against the same layout unsplit: the dout_* of every layer and slot (the
               slot's own also for recomputed layers), [N,C] [N,4C] [N,C] [N,3C] each — N = 16,
               C = 32 — and nothing for the head                                             */
            {
                const mg_layer_acts *la = &f.m.acts[0].layers[0];
                mg_gpt_layout L = f.m.layout;
                size_t e = mg_dtype_size(dts[d]), unsplit, split;
                dout = (size_t)(mg_numel(&la->dout_fc2) + mg_numel(&la->dout_fc1) +
                                mg_numel(&la->dout_proj) + mg_numel(&la->dout_qkv)) * e;
                split = mg_gpt_arena_bytes(&f.m.cfg, &L);
                L.split_backward = 0;
                unsplit = mg_gpt_arena_bytes(&f.m.cfg, &L);
                want = unsplit + 2 * 5 * dout;
                snprintf(name, sizeof name, "recompute model, split backward %s %s: arena = "
                         "unsplit + 2 slots x 5 layers x output gradients (%zu + 10 x %zu)",
                         dts[d] == MG_F32 ? "fp32" : "bf16", what, unsplit, dout);
                mg_test_report(mg_test_agree(split == want && dout == 16 * 32 * 9 * e), name,
                               "%zu vs %zu", split, want);
            }
            gpt_fixture_free(&f);
        }
        gpt_fixture_free(&ref);
    }
}

/* Recomputed FLOPs: full recomputation of every layer turns the 72 form into the paper's
   96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)); selective adds the attention core 4·B·s²·h per layer
   with the unfused attention and nothing with the tiled one;
   block recomputes N layers per chunk.                                                    */
static void check_flops(void) {
    mg_gpt_config c;
    mg_gpt_layout L;
    double B = 8, s, h, l, V, paper, got;
    memset(&c, 0, sizeof c);
    c.n_layer = 6; c.hidden = 64; c.n_head = 4; c.seq_len = 32; c.max_pos = 32;
    c.vocab_size = 300; c.padded_vocab = mg_gpt_pad_vocab(300, 128, 1);
    s = c.seq_len; h = c.hidden; l = c.n_layer; V = c.padded_vocab;
    L = mg_gpt_layout_single(&c, 1, 1, 2);
    L.recompute_granularity = MG_RECOMPUTE_FULL;
    paper = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    got = mg_gpt_flops_per_iteration(&c, 8) + mg_gpt_flops_recomputed(&c, &L, 8);
    mg_test_report(fabs(got / paper - 1) < 1e-12, "recompute FLOPs: full = the paper's 96 form",
                   "%.6g vs %.6g", got, paper);
    L.recompute_granularity = MG_RECOMPUTE_SELECTIVE;
    mg_test_report(mg_gpt_flops_recomputed(&c, &L, 8) == 0,
                   "recompute FLOPs: selective with the tiled attention = 0 (its backward "
                   "recomputes the scores either way)", "%.6g", mg_gpt_flops_recomputed(&c, &L, 8));
    L.attention_backend = MG_ATTN_UNFUSED;
    mg_test_report(mg_gpt_flops_recomputed(&c, &L, 8) == 4 * B * s * s * h * l,
                   "recompute FLOPs: selective with the unfused attention = 4·B·s²·h per layer",
                   "%.6g", mg_gpt_flops_recomputed(&c, &L, 8));
    L.attention_backend = MG_ATTN_FLASH;
    L.recompute_granularity = MG_RECOMPUTE_FULL;
    L.recompute_method = MG_RECOMPUTE_BLOCK;
    L.recompute_num_layers = 1;            /* 1 of the 3 layers of each chunk */
    got = mg_gpt_flops_recomputed(&c, &L, 8);
    mg_test_report(fabs(got / ((24 * B * s * h * h + 4 * B * s * s * h) * 2) - 1) < 1e-12,
                   "recompute FLOPs: block N=1 over 2 chunks = 2 layer forwards", "%.6g", got);
    L.split_backward = 1;                  /* ZB-H1: W re-runs the recomputed forwards */
    mg_test_report(mg_gpt_flops_recomputed(&c, &L, 8) == 2 * got,
                   "recompute FLOPs: split backward counts full recomputation twice", "%.6g",
                   mg_gpt_flops_recomputed(&c, &L, 8));
    L.recompute_granularity = MG_RECOMPUTE_SELECTIVE;
    L.attention_backend = MG_ATTN_UNFUSED;
    mg_test_report(mg_gpt_flops_recomputed(&c, &L, 8) == 4 * B * s * s * h * l,
                   "recompute FLOPs: split backward counts selective (unfused) once", "%.6g",
                   mg_gpt_flops_recomputed(&c, &L, 8));
}

int main(int argc, char **argv) {
    int i, sp;
    size_t flash, unfused;
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    /* selective recomputation under the unfused attention (the flash backward recomputes the
       probabilities anyway), full recomputation under both */
    for (sp = 0; sp < (world > 1 ? 2 : 1); sp++)
        for (i = 0; i < 5; i++) check_training(settings[i], sp, i ? "" : "--attention-backend unfused ");
    check_training(settings[1], 0, "--attention-backend unfused ");
    if (world == 2) {
        check_zb("--attention-backend unfused", settings, 1);
        check_zb("", settings + 1, 4);
        check_zb("--bf16", settings + 1, 2);
        check_zb("--fp16 --loss-scale 1024", settings + 3, 1);
    }
    unfused = check_model_chunks(MG_ATTN_UNFUSED);
    flash = check_model_chunks(MG_ATTN_FLASH);
    mg_test_report(mg_test_agree(flash < unfused), "flash attention stores fewer activation bytes "
                   "than unfused", "%zu vs %zu", flash, unfused);
    check_model_split();
    check_flops();
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
