// mg-test: ranks=1,2,4,8 timeout=300
/* test_mixed.c — mixed precision (--bf16, --fp16) and fp16 loss scaling (issue 8).

   1. The loss-scaler state machine against hand-worked sequences of Megatron-LM's
      DynamicGradScaler.update (initial scale, window 3, hysteresis 2, min scale): the
      hysteresis counter is only re-armed by a growth, so after it ran out every further inf
      halves the scale; the floor holds; a constant scaler never moves.
   2. bf16 and fp16 track fp32: on t = W ranks (1, 2; with and without sequence parallelism
      at t = 2), the oracle setup of tests/test_tp.c (the llm.c checkpoint of tests/oracle,
      20 AdamW steps) runs in fp32, bf16 and fp16 (constant loss scale 1024). Bound: u nats
      for the first loss and 2u for all 20, u the unit roundoff of the format (bf16 2^-8,
      fp16 2^-11): a relative error u in logits of size ~1 moves the loss by ~u nats, and the
      mean over the batch's tokens averages the independent roundings down rather than up;
      the measured errors sit 20-60x below the bounds (README, "Activation recomputation and mixed precision"), while a stale 16-bit
      weight copy or an fp16 overflow misses them by orders of magnitude.
   3. fp16 dynamic scaling on a real overflow: --initial-loss-scale 2^32 overflows the fp16
      gradients at once (dloss · 2^32 > 65504), so iterations are skipped — weights, Adam
      moments and step untouched, bit for bit — and the scale follows the state machine
      (checked step by step against it, fed with the observed skips) until the gradients
      fit; then updates happen. The number of skipped iterations and the scale are the same
      on every rank.
   4. Injected inf on one rank only: an inf poked into the last rank's gradient shard makes
      mg_adamw_update skip on EVERY rank (nothing changes anywhere, grad norm nan).
   5. Memory: bf16/fp16 activations take half the fp32 bytes (act_bytes; the token ids stay
      32-bit).
   6. Resume: the loss scaler's state (scale, growth and hysteresis trackers) travels in the
      checkpoint: an fp16 run saved after 5 iterations and resumed gives the uninterrupted
      run's next losses and scales bit for bit.
   7. ZB-H1 in 16 bits (2 ranks: p = 2, the oracle setup with 4 microbatches of 1, so W runs
      after later microbatches have reused the shared scratch):
      bf16 and fp16 (constant scale 1024) track the fp32 ZB-H1 run within the bounds of 2.;
      and bf16, fp16 (constant scale) and fp16 with dynamic scaling from 2^32 (skipped
      iterations, window 3, hysteresis 2) equal the same precision's 1F1B run BIT FOR BIT —
      losses, grad norms, loss scales, skipped iterations, each stage's weights and Adam
      moments — since the split backward does the same 16-bit operations on the same bits
      and sums each parameter's gradient over the microbatches in the same order: a bound
      would hide a W that read another microbatch's data at the 16-bit rounding level.
   8. Every parallel layout (4 and 8 ranks): data parallelism with and without the
      distributed optimizer (which shards the fp32 master in 16-bit runs), tensor + sequence
      parallelism, 1F1B, GPipe, ZB-H1 and interleaved pipelines, and t × p × d together, each
      in bf16 and fp16 (scale 1024), track the SERIAL fp32 run (one rank, in the same process)
      within the bounds of 2.; and fp16 with dynamic scaling from 2^32 skips exactly the
      iterations the serial fp16 run skips, with the same scale at every step (the overflow
      of dloss·2^32 does not depend on the layout; every rank agrees through the global
      non-finite check).                                                                */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

#define STEPS 20
#define TOL_FIRST_BF16 (1.0 / 256)     /* u = 2^-8: 8 significant bits  */
#define TOL_FIRST_FP16 (1.0 / 2048)    /* u = 2^-11: 11 significant bits */
#define TOL_BF16 (2 * TOL_FIRST_BF16)
#define TOL_FP16 (2 * TOL_FIRST_FP16)
#define TRAIN_LINE "--data-path " GPT_DATA "gpt_tokens.bin --data-order sequential --split 1,0,0 " \
    "--eval-iters 0 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 "                \
    "--train-iters 20 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 3 --lr-decay-style cosine "     \
    "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 99 "
#define ORACLE_MODEL "--init-from " GPT_DATA "gpt_model.bin "
#define BASE_LINE TRAIN_LINE ORACLE_MODEL

static double agree_max(double x) {
#ifdef MG_USE_MPI
    double all = x;
    if (!(x == x)) x = 1e300;
    MPI_Allreduce(&x, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
#else
    return x;
#endif
}
/* 1 iff x is the same on every rank. */
static int agree_same(double x) {
    return agree_max(x) == -agree_max(-x);
}

static void trainer_make(mg_trainer *tr, const char *line) {
    gpt_trainer_on(tr, line, &comm);
}

/* ---- 1. the state machine ----------------------------------------------------------------- */
static void check_scaler_unit(void) {
    /* events: 1 = inf, 0 = clean; want: the scale after each, as a power of two (window 3,
       hysteresis 2, start 2^32, floor 2^28)                                                 */
    static const int events[] = {1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
    static const int want[] =   {32, 31, 30, 30, 30, 31, 31, 31, 30, 30, 30, 31, 31, 31, 32,
                                 32, 31, 30, 29, 28, 28};
    mg_loss_scaler s;
    int i, ok = 1, n = (int)(sizeof events / sizeof events[0]);
    char got[256] = "";
    mg_loss_scaler_init(&s, 1, 4294967296.0, 268435456.0, 3, 2);
    for (i = 0; i < n; i++) {
        int e;
        mg_loss_scaler_update(&s, events[i]);
        e = (int)lrint(log2(s.scale));
        if (e != want[i] || s.scale != ldexp(1.0, e)) ok = 0;
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", e);
    }
    mg_test_report(ok, "loss scaler: Megatron's hysteresis / window / floor sequence",
                   "log2 scales %s", got);
    mg_loss_scaler_init(&s, 1, 1024.0, 1.0, 1000, 1);    /* hysteresis 1: every inf halves */
    for (i = 0; i < 12; i++) mg_loss_scaler_update(&s, 1);
    mg_test_report(s.scale == 1.0, "loss scaler: hysteresis 1 halves at once, floor 1",
                   "scale %g", s.scale);
    for (i = 0; i < 999; i++) mg_loss_scaler_update(&s, 0);
    ok = s.scale == 1.0;
    mg_loss_scaler_update(&s, 0);
    mg_test_report(ok && s.scale == 2.0, "loss scaler: grows x2 after exactly 1000 clean "
                   "iterations", "scale %g", s.scale);
    mg_loss_scaler_init(&s, 0, 512.0, 1.0, 1, 1);
    for (i = 0; i < 5; i++) mg_loss_scaler_update(&s, i & 1);
    mg_test_report(s.scale == 512.0, "loss scaler: a constant scale never moves", "scale %g",
                   s.scale);
}

/* ---- 2. 16-bit runs track fp32 ------------------------------------------------------------ */
static void check_tracking(int sp) {
    static const char *const prec[2] = {"--bf16", "--fp16 --loss-scale 1024"};
    static const double tol[2] = {TOL_BF16, TOL_FP16}, tol_first[2] = {TOL_FIRST_BF16,
                                                                      TOL_FIRST_FP16};
    char line[2048], name[256];
    double ref[STEPS], worst, first;
    mg_trainer tr;
    int k, p;
    snprintf(line, sizeof line, BASE_LINE "--tensor-model-parallel-size %d%s", world,
             sp ? " --sequence-parallel" : "");
    trainer_make(&tr, line);
    for (k = 0; k < STEPS; k++) ref[k] = mg_trainer_step(&tr).loss;
    mg_trainer_free(&tr);
    for (p = 0; p < 2; p++) {
        char pline[2200];
        int skipped = 0;
        snprintf(pline, sizeof pline, "%s %s", line, prec[p]);
        trainer_make(&tr, pline);
        worst = first = 0;
        for (k = 0; k < STEPS; k++) {
            mg_step_result r = mg_trainer_step(&tr);
            double d = fabs(r.loss - ref[k]);
            skipped += r.skipped;
            if (!(d <= worst)) worst = d;
            if (k == 0) first = d;
        }
        mg_trainer_free(&tr);
        worst = agree_max(worst);
        first = agree_max(first);
        snprintf(name, sizeof name, "mixed t=%d%s %s: first loss within %g of fp32", world,
                 sp ? " sp" : "", p ? "fp16" : "bf16", tol_first[p]);
        mg_test_report(first <= tol_first[p], name, "|diff| %.3g (loss %.4f)", first, ref[0]);
        snprintf(name, sizeof name, "mixed t=%d%s %s: %d losses within %g of fp32, none skipped",
                 world, sp ? " sp" : "", p ? "fp16" : "bf16", STEPS, tol[p]);
        mg_test_report(mg_test_agree(skipped == 0) && worst <= tol[p], name,
                       "max |diff| %.3g, skipped %d (last fp32 loss %.4f)", worst, skipped,
                       ref[STEPS - 1]);
    }
}

/* ---- 3. a real fp16 overflow: skipped iterations and the scale ----------------------------- */
static int same_host(mg_gpt *m, const float *dev, const float *host) {
    float *h = gpt_host(m, dev);
    int same = !memcmp(h, host, sizeof(float) * (size_t)m->n_elems);
    free(h);
    return same;
}
static void check_overflow_run(void) {
    char line[2048], name[200];
    mg_trainer tr;
    mg_loss_scaler model;
    int k, ok_untouched = 1, ok_scale = 1, ok_lr = 1, n_skipped = 0, n_clean = 0,
        first_skipped = 0;
    double lr_want = 0, lr_last = 0;
    snprintf(line, sizeof line, BASE_LINE "--tensor-model-parallel-size %d --fp16 "
             "--loss-scale-window 3 --hysteresis 2", world);
    trainer_make(&tr, line);
    mg_loss_scaler_init(&model, 1, 4294967296.0, 1.0, 3, 2);
    for (k = 0; k < STEPS; k++) {
        float *w = gpt_host(&tr.model, tr.model.param_buf), *mom = gpt_host(&tr.model, tr.opt.v);
        int64_t step = tr.opt.step;
        mg_step_result r = mg_trainer_step(&tr);
        /* Megatron's scheduler advances only after a successful update: the learning rate
           of iteration k is the schedule's after the clean iterations before it */
        lr_want = mg_lr_at(&tr.sched, n_clean);
        if (r.lr != lr_want) ok_lr = 0;
        lr_last = r.lr;
        if (r.loss_scale != model.scale) ok_scale = 0;
        mg_loss_scaler_update(&model, r.skipped);
        if (tr.scaler.scale != model.scale) ok_scale = 0;
        if (k == 0) first_skipped = r.skipped;
        if (r.skipped) {
            n_skipped++;
            if (!same_host(&tr.model, tr.model.param_buf, w) ||
                !same_host(&tr.model, tr.opt.v, mom) || tr.opt.step != step ||
                r.grad_norm == r.grad_norm)
                ok_untouched = 0;
        } else {
            n_clean++;
        }
        free(w);
        free(mom);
    }
    mg_test_report(mg_test_agree(first_skipped), "fp16 scale 2^32: the first iteration "
                   "overflows and is skipped", "%s", "");
    snprintf(name, sizeof name, "fp16 t=%d: %d skipped iterations leave weights, Adam state and "
             "step untouched (grad norm nan)", world, n_skipped);
    mg_test_report(mg_test_agree(ok_untouched), name, "%s", "");
    snprintf(name, sizeof name, "fp16 t=%d: scale follows the state machine to %g, then %d "
             "clean updates", world, tr.scaler.scale, n_clean);
    mg_test_report(mg_test_agree(ok_scale && n_clean > 0 && n_skipped > 1), name,
                   "skipped %d clean %d", n_skipped, n_clean);
    snprintf(name, sizeof name, "fp16 t=%d: skipped iterations do not advance the learning "
             "rate schedule (Megatron: the scheduler steps after successful updates only); "
             "warm-up from 0 over the %d clean ones", world, n_clean);
    mg_test_report(mg_test_agree(ok_lr && n_skipped > 3), name, "last lr %g, schedule %g",
                   lr_last, lr_want);
    snprintf(name, sizeof name, "fp16 t=%d: scale and skipped-iteration count equal on every "
             "rank; the trainer counted them", world);
    mg_test_report(mg_test_agree(agree_same(tr.scaler.scale) && agree_same(n_skipped) &&
                                 tr.skipped_iters == n_skipped && tr.nan_iters == 0), name,
                   "scale %g, skipped %lld", tr.scaler.scale, (long long)tr.skipped_iters);
    mg_trainer_free(&tr);
}

/* ---- 4. an inf on one rank only skips everywhere ------------------------------------------ */
static void check_injected_inf(void) {
    char line[2048], name[200];
    mg_trainer tr;
    double norm = 0, tokens;
    float *before;
    int applied, i;
    snprintf(line, sizeof line, BASE_LINE "--tensor-model-parallel-size %d --fp16 "
             "--loss-scale 256", world);
    trainer_make(&tr, line);
    mg_trainer_step(&tr);                                   /* a clean step first */
    tokens = (double)tr.args.global_batch_size * tr.cfg.seq_len;
    mg_gpt_zero_grad(&tr.model);
    tr.model.training = 1;
    mg_gpt_run_microbatches(&tr.model, tr.batch, tr.n_micro, (float)(256 / tokens), 1);
    tr.model.training = 0;
    mg_gpt_reduce_grads(&tr.model);
    if (comm.world_rank == world - 1) {          /* a split tensor: this rank's shard only */
        float inf = INFINITY;
        for (i = 0; i < tr.model.n_params; i++)
            if (tr.model.params[i].split == MG_TP_COLUMN) break;
        mg_copy_to_device(&tr.ctx, tr.model.grad_buf + tr.model.params[i].offset + 3, &inf,
                          sizeof inf);
    }
    before = gpt_host(&tr.model, tr.model.param_buf);
    tr.opt.loss_scale = 256;
    applied = mg_adamw_update(&tr.opt, &tr.model, 1e-3f, 1.0f, &norm);
    snprintf(name, sizeof name, "fp16 t=%d: an inf in rank %d's gradient shard skips the update "
             "on every rank", world, world - 1);
    mg_test_report(mg_test_agree(!applied && norm != norm &&
                                 same_host(&tr.model, tr.model.param_buf, before)), name,
                   "applied %d, norm %g", applied, norm);
    free(before);
    mg_trainer_free(&tr);
}

/* ---- 5. activation memory halves ---------------------------------------------------------- */
static void check_memory(void) {
    mg_gpt_config c = gpt_ref_config();
    mg_gpt_layout L = mg_gpt_layout_single(&c, 2, 2, 1);
    mg_ctx ctx;
    mg_gpt a, b;
    char err[MG_ERRLEN];
    ctx = gpt_ctx(2 * mg_gpt_arena_bytes(&c, &L) + (8u << 20));
    if (mg_gpt_create(&a, &ctx, &c, &L, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    L.dtype = MG_BF16;
    if (mg_gpt_create(&b, &ctx, &c, &L, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    /* the token ids stay 32-bit (the fused classifier keeps no logits per microbatch: its
       one chunk is scratch); 256-byte alignment rounds every tensor */
    {
        size_t keep = 2 * (((size_t)2 * c.seq_len * 4 + 255) / 256 * 256);
        mg_test_report(b.act_bytes < a.act_bytes &&
                       b.act_bytes - keep <= (a.act_bytes - keep) / 2 + 64 * 256,
                   "bf16: activations other than the token ids take half the bytes",
                       "fp32 %zu, bf16 %zu", a.act_bytes, b.act_bytes);
    }
    mg_gpt_destroy(&b);
    mg_gpt_destroy(&a);
    mg_ctx_free(&ctx);
}

/* ---- 6. resume keeps the scaler -------------------------------------------------------- */
static void check_resume(void) {
    /* window 2 re-arms the hysteresis often; Megatron's defaults from 2^32 skip the first
       iterations, and the hysteresis tracker, re-armed only by a growth, goes negative
       (2 - 5 = -3 at the save) — a legitimate state that must travel in the checkpoint */
    static const char *const scaler[2] = {"--initial-loss-scale 4194304 --loss-scale-window 2 "
                                          "--hysteresis 2", ""};
    char line[2048], rline[2400], dir[256], err[MG_ERRLEN], name[300];
    mg_trainer a, b;
    double la[4], sa[4], lb[4], sb[4];
    int k, ok, i;
    long long tracker;
    for (i = 0; i < 2; i++) {
        if (comm.world_rank == 0) gpt_tmpdir(dir, sizeof dir, "mp");
#ifdef MG_USE_MPI
        MPI_Bcast(dir, (int)sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
#endif
        snprintf(line, sizeof line, BASE_LINE "--tensor-model-parallel-size %d --fp16 %s", world,
                 scaler[i]);
        trainer_make(&a, line);
        for (k = 0; k < 5; k++) mg_trainer_step(&a);
        tracker = (long long)a.scaler.hysteresis_tracker;
        ok = mg_trainer_save(&a, dir, err, sizeof err) == 0 && (i == 0 || tracker < 0);
        for (k = 0; k < 4; k++) {
            mg_step_result r = mg_trainer_step(&a);
            la[k] = r.loss;
            sa[k] = r.loss_scale;
        }
        snprintf(rline, sizeof rline, "%s --load %s", line, dir);
        trainer_make(&b, rline);
        for (k = 0; k < 4; k++) {
            mg_step_result r = mg_trainer_step(&b);
            lb[k] = r.loss;
            sb[k] = r.loss_scale;
        }
        ok = ok && !memcmp(la, lb, sizeof la) && !memcmp(sa, sb, sizeof sa) &&
             a.scaler.scale == b.scaler.scale &&
             a.scaler.growth_tracker == b.scaler.growth_tracker &&
             a.scaler.hysteresis_tracker == b.scaler.hysteresis_tracker;
        snprintf(name, sizeof name, "fp16 t=%d%s: resume restores the loss scaler (hysteresis "
                 "tracker %lld at the save): next 4 losses and scales bit-identical", world,
                 i ? " (defaults, 2^32)" : "", tracker);
        mg_test_report(mg_test_agree(ok), name, "scales %g %g %g %g vs %g %g %g %g", sa[0],
                       sa[1], sa[2], sa[3], sb[0], sb[1], sb[2], sb[3]);
        mg_trainer_free(&a);
        mg_trainer_free(&b);
#ifdef MG_USE_MPI
        MPI_Barrier(MPI_COMM_WORLD);
#endif
        if (comm.world_rank == 0) gpt_rmtree(dir);
    }
}

/* |loss − ref| of a run: at the first step and the worst over all, the maxima over the ranks. */
static void loss_gap(const gpt_run *run, const gpt_run *ref, double *first, double *worst) {
    int k;
    *worst = 0;
    for (k = 0; k < run->steps; k++)
        if (!(fabs(run->loss[k] - ref->loss[k]) <= *worst)) *worst = fabs(run->loss[k] - ref->loss[k]);
    *worst = agree_max(*worst);
    *first = agree_max(fabs(run->loss[0] - ref->loss[0]));
}

/* ---- 7. ZB-H1 (split backward) in 16 bits ----------------------------------------------- */
static void check_zb(void) {
#define ZB_LINE BASE_LINE "--micro-batch-size 1 --pipeline-model-parallel-size 2 "
    static const char *const prec[3] = {"--bf16", "--fp16 --loss-scale 1024",
                                        "--fp16 --loss-scale-window 3 --hysteresis 2"};
    static const double tol[2] = {TOL_BF16, TOL_FP16}, tol_first[2] = {TOL_FIRST_BF16,
                                                                      TOL_FIRST_FP16};
    char line[2048], name[300];
    gpt_run ref, zb, f1b;
    int p;
    gpt_run_train(&ref, ZB_LINE "--pipeline-schedule zb-h1", &comm, STEPS);
    for (p = 0; p < 3; p++) {
        snprintf(line, sizeof line, ZB_LINE "--pipeline-schedule zb-h1 %s", prec[p]);
        gpt_run_train(&zb, line, &comm, STEPS);
        snprintf(line, sizeof line, ZB_LINE "--pipeline-schedule 1f1b %s", prec[p]);
        gpt_run_train(&f1b, line, &comm, STEPS);
        if (p < 2) {
            double worst, first;
            loss_gap(&zb, &ref, &first, &worst);
            snprintf(name, sizeof name, "mixed zb-h1 p=2 %s: first loss within %g, %d losses "
                     "within %g of fp32 zb-h1, none skipped", p ? "fp16" : "bf16", tol_first[p],
                     STEPS, tol[p]);
            mg_test_report(first <= tol_first[p] && worst <= tol[p] &&
                           mg_test_agree(zb.skipped == 0), name,
                           "first |diff| %.3g, max %.3g, skipped %d", first, worst, zb.skipped);
        }
        snprintf(name, sizeof name, "mixed zb-h1 p=2 %s: %d losses, grad norms, loss scales, "
                 "%d skipped, weights and Adam moments bit-identical to 1f1b", prec[p], STEPS,
                 zb.skipped);
        mg_test_report(mg_test_agree(gpt_run_same(&zb, &f1b) &&
                                     (p < 2 ? zb.skipped == 0
                                            : zb.skipped > 0 && zb.skipped < STEPS)), name,
                       "last loss %.9g vs %.9g, scale %g", zb.loss[STEPS - 1],
                       f1b.loss[STEPS - 1], zb.scale[STEPS - 1]);
        gpt_run_free(&zb);
        gpt_run_free(&f1b);
    }
    gpt_run_free(&ref);
}

/* ---- 8. every parallel layout tracks the serial fp32 run ---------------------------------- */
typedef struct mixed_layout {
    int world;
    const char *flags;   /* t, p, schedule, v, sp, distributed optimizer */
    int four_layers;     /* interleaving needs p·v | layers: random init, 4 layers            */
} mixed_layout;
static const mixed_layout layouts[] = {
    {4, "--use-distributed-optimizer", 0},
    {4, "--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer", 0},
    {4, "--pipeline-model-parallel-size 2 --pipeline-schedule 1f1b --use-distributed-optimizer",
     0},
    {4, "--pipeline-model-parallel-size 2 --pipeline-schedule gpipe", 0},
    {4, "--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1 --use-distributed-optimizer "
        "--bucket-size 1000", 0},
    {4, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel", 0},
    {4, "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1", 1},
    {8, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel "
        "--use-distributed-optimizer", 0},
    {8, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
        "--num-layers-per-virtual-pipeline-stage 1 --use-distributed-optimizer", 1},
};
#define LAYOUT_LINE TRAIN_LINE "--micro-batch-size 1 "
#define FOUR_LAYERS "--num-layers 4 --vocab-size 37 --hidden-size 32 --num-attention-heads 4 "
static void check_layouts(void) {
    static const char *const prec[2] = {"--bf16", "--fp16 --loss-scale 1024"};
    static const double tol[2] = {TOL_BF16, TOL_FP16}, tol_first[2] = {TOL_FIRST_BF16,
                                                                      TOL_FIRST_FP16};
    gpt_run ref[2], dyn[2];   /* serial fp32 and serial fp16 dynamic, per model (2 / 4 layers) */
    int have[2] = {0, 0}, i, p, k;
    for (i = 0; i < (int)(sizeof layouts / sizeof layouts[0]); i++) {
        const mixed_layout *L = &layouts[i];
        const char *model = L->four_layers ? FOUR_LAYERS : ORACLE_MODEL;
        char line[2048], name[400];
        gpt_run run;
        if (L->world != world) continue;
        if (!have[L->four_layers]) {   /* the serial runs: one rank each, no communication */
            snprintf(line, sizeof line, LAYOUT_LINE "%s", model);
            gpt_run_train(&ref[L->four_layers], line, NULL, STEPS);
            snprintf(line, sizeof line, LAYOUT_LINE "%s --fp16", model);
            gpt_run_train(&dyn[L->four_layers], line, NULL, STEPS);
            have[L->four_layers] = 1;
        }
        for (p = 0; p < 2; p++) {
            const gpt_run *want = &ref[L->four_layers];
            double worst, first;
            snprintf(line, sizeof line, LAYOUT_LINE "%s %s %s", model, L->flags, prec[p]);
            gpt_run_train(&run, line, &comm, STEPS);
            loss_gap(&run, want, &first, &worst);
            snprintf(name, sizeof name, "mixed %d ranks %s%s %s: first loss within %g, %d losses "
                     "within %g of the serial fp32 run, none skipped", world,
                     L->four_layers ? "(4 layers) " : "", L->flags, p ? "fp16" : "bf16",
                     tol_first[p], STEPS, tol[p]);
            mg_test_report(first <= tol_first[p] && worst <= tol[p] &&
                           mg_test_agree(run.skipped == 0), name,
                           "first |diff| %.3g, max %.3g, skipped %d", first, worst, run.skipped);
            gpt_run_free(&run);
        }
        /* fp16, dynamic scaling from 2^32: the serial run's skips and scales, step by step */
        {
            const gpt_run *want = &dyn[L->four_layers];
            int same = 1;
            snprintf(line, sizeof line, LAYOUT_LINE "%s %s --fp16", model, L->flags);
            gpt_run_train(&run, line, &comm, STEPS);
            for (k = 0; k < STEPS; k++) same &= run.scale[k] == want->scale[k];
            snprintf(name, sizeof name, "mixed %d ranks %s%s fp16 dynamic: %d skipped iterations "
                     "and the loss scale of every step = the serial fp16 run's", world,
                     L->four_layers ? "(4 layers) " : "", L->flags, want->skipped);
            mg_test_report(mg_test_agree(same && run.skipped == want->skipped &&
                                         want->skipped > 0 && want->skipped < STEPS), name,
                           "skipped %d vs %d, last scale %g vs %g", run.skipped, want->skipped,
                           run.scale[STEPS - 1], want->scale[STEPS - 1]);
            gpt_run_free(&run);
        }
    }
    for (i = 0; i < 2; i++)
        if (have[i]) {
            gpt_run_free(&ref[i]);
            gpt_run_free(&dyn[i]);
        }
}

int main(int argc, char **argv) {
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    if (world >= 4) {   /* the layouts of 4 and 8 ranks; the rest runs on 1 and 2 */
        check_layouts();
    } else {
        check_scaler_unit();
        check_tracking(0);
        if (world > 1) check_tracking(1);
        check_overflow_run();
        check_injected_inf();
        check_memory();
        check_resume();
        if (world == 2) check_zb();
    }
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
