// mg-test: ranks=1,2,4 timeout=300
/* test_tp.c — tensor and sequence parallelism never change the math (issue 5).

   On W ranks (the runner uses 1, 2 and 4) every configuration below trains t = W tensor-
   parallel ranks for 20 AdamW steps (warm-up + cosine decay, weight decay, clipping, 2
   microbatches of 2) and, in the same process on every rank, the serial model (t = 1, no
   communication) on the same data; then:
     - the 20 losses and gradient norms equal the serial run's to <= 1e-5 relative;
     - the final weights, gathered from the shards, equal the serial model's to <= 1e-5
       relative (per tensor, against the tensor's RMS; the key bias is left out: its gradient
       is exactly zero, see gpt_mask_key_bias), and the padding rows of the word embedding
       (Vp = 128·t) stay zero;
     - the replicated parameters (layernorms, position embedding, row-parallel biases) are bit
       for bit the same on every rank of the tensor group;
   for: random initialisation and an imported llm.c checkpoint and Hugging Face safetensors
   file (QKV [q|k|v] rows sharded by heads), each with and without --sequence-parallel, and
   with --hidden-dropout / --attention-dropout on (masks keyed by global coordinates), also
   under sequence parallelism, without biases (--disable-bias-linear: the exact GELU), with
   the squared ReLU (--squared-relu), with zero-centred norms (--apply-layernorm-1p), from
   --init-method-xavier-uniform, with --decoupled-lr (the vocabulary-parallel tensors' own
   rate), and
   with the fused classifier in ragged chunks of 5 rows (both runs). Before training, the
   imported shards gathered back equal the serial import bit for bit.
   Also: dropout changes the loss (the switch is live) and its backward is right (central
   finite differences of the loss, whose masks are a pure function of the step, against
   the gradients of the dropout model); the tensor group's traffic per layer per microbatch,
   counted by mg_comm's counters, is the paper's 8·b·s·h·(t−1)/t floats (4 bytes each) with
   plain tensor parallelism and 10·b·s·h·(t−1)/t with sequence parallelism (the extra two:
   the layernorm outputs re-gathered in the backward).                                    */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

#define STEPS 20
#define BASE_LINE "--data-path " GPT_DATA "gpt_tokens.bin --data-order sequential --split 1,0,0 " \
    "--eval-iters 0 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 "                \
    "--train-iters 20 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 3 --lr-decay-style cosine "     \
    "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 99 "
#define MODEL_FLAGS "--vocab-size 37 --num-layers 2 --hidden-size 32 --num-attention-heads 4 "

/* ---- verdicts: every rank checks its own part; the worst error is agreed through MPI ----- */
static double agree_max(double x) {
#ifdef MG_USE_MPI
    double all = x;
    if (!(x == x)) x = 1e300;                                  /* nan: fail everywhere */
    MPI_Allreduce(&x, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
#else
    return x;
#endif
}
static void verdict_err(const char *name, double err, double tol, const char *where) {
    double worst = agree_max(err);
    mg_test_report(worst <= tol, name, "max rel err %.3g%s%s, tol %.0g", worst,
                   where && where[0] ? " at " : "", where ? where : "", tol);
}

/* The first global batch of the training data into tr->batch. */
static void fetch_first_batch(mg_trainer *tr) {
    char err[MG_ERRLEN];
    int64_t i;
    for (i = 0; i < tr->args.global_batch_size; i++)
        if (mg_blend_get(&tr->train_data, i, tr->batch + i * (tr->cfg.seq_len + 1), err,
                           sizeof err)) {
            fprintf(stderr, "sample %lld: %s\n", (long long)i, err);
            exit(1);
        }
}

/* A trainer from a command line; with_comm: over the job's ranks (else a serial model). */
static void trainer_make(mg_trainer *tr, const char *line, int with_comm) {
    gpt_setup_or_die(tr, line, with_comm ? &comm : NULL);
}

/* Worst relative error of the parallel model's parameters (gathered) against the serial
   one's, over every tensor; *worst names it. Checks too that the padding rows of the word
   embedding are zero and (mask_key) leaves the key bias out.                              */
static double compare_weights(mg_gpt *par, mg_gpt *ser, int mask_key, int *pad_ok,
                              char *worst, size_t cap) {
    double e = 0;
    int i;
    *pad_ok = 1;
    for (i = 0; i < par->n_params; i++) {
        const mg_param_desc *d = &par->params[i];
        int j = mg_gpt_find_param(ser, d->name);
        const mg_param_desc *ds = &ser->params[j];
        int64_t rows = d->shape[0], cols = d->ndim == 2 ? d->shape[1] : 1, r, n;
        float *got = (float *)malloc(sizeof(float) * (size_t)(rows * cols));
        float *want = (float *)malloc(sizeof(float) * (size_t)(ds->shape[0] * cols));
        double ss = 0, ei;
        mg_gpt_shard_to_global(par, i, par->param_buf, got);    /* collective */
        mg_gpt_shard_to_global(ser, j, ser->param_buf, want);
        /* the vocabulary tensors: the V real rows (Vp = 128·t differs), the padding zero */
        n = d->kind == MG_WTE || d->kind == MG_OUT_W ? (int64_t)par->cfg.vocab_size * cols
                                                      : rows * cols;
        if (d->kind == MG_WTE || d->kind == MG_OUT_W)
            for (r = n; r < rows * cols; r++) if (got[r] != 0) *pad_ok = 0;
        if (mask_key && d->kind == MG_QKV_B) {
            int64_t hd = par->cfg.hidden / par->cfg.n_head;
            for (r = 0; r < n; r++) if ((r / hd) % 3 == 1) got[r] = want[r] = 0;
        }
        for (r = 0; r < n; r++) ss += (double)want[r] * want[r];
        ei = mg_test_max_rel(got, want, (long)n, sqrt(ss / (double)n) + 1e-30);
        if (!(ei <= e)) { e = ei; snprintf(worst, cap, "%s", d->name); }
        free(got);
        free(want);
    }
    return e;
}

/* 1 iff every replicated parameter is bit-identical on all ranks of the job (a checksum of
   its bytes, min and max over the ranks compared through MPI).                              */
static int replicated_identical(mg_gpt *m) {
    int i, ok = 1;
    for (i = 0; i < m->n_params; i++) {
        const mg_param_desc *d = &m->params[i];
        float *h;
        uint64_t sum = 1469598103934665603ull;
        int64_t k;
        if (d->split != MG_TP_REPLICATED) continue;
        h = (float *)malloc(sizeof(float) * (size_t)d->numel);
        mg_copy_to_host(m->ctx, h, m->param_buf + d->offset, sizeof(float) * (size_t)d->numel);
        for (k = 0; k < d->numel; k++) {
            uint32_t u;
            memcpy(&u, &h[k], 4);
            sum = (sum ^ u) * 1099511628211ull;
        }
        free(h);
#ifdef MG_USE_MPI
        {
            unsigned long long lo = sum, hi = sum, x = sum;
            MPI_Allreduce(&x, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
            MPI_Allreduce(&x, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
            if (lo != hi) ok = 0;
        }
#endif
    }
    return ok;
}

/* One configuration: the t = world run against the serial run, 20 steps. */
static void check_run(const char *what, const char *extra) {
    char line[2048], pline[2200], name[256], worst[96] = "";
    mg_trainer par, ser;
    float lp[STEPS], ls[STEPS], np_[STEPS], ns[STEPS];
    double e;
    int k, pad_ok;
    snprintf(line, sizeof line, BASE_LINE "%s", extra);
    snprintf(pline, sizeof pline, "%s --tensor-model-parallel-size %d", line, world);
    trainer_make(&par, pline, 1);
    trainer_make(&ser, line, 0);
    if (strstr(extra, "--init-from")) {           /* the import itself, before training */
        e = compare_weights(&par.model, &ser.model, 0, &pad_ok, worst, sizeof worst);
        snprintf(name, sizeof name, "tp t=%d %s: imported shards gathered = the serial import",
                 world, what);
        verdict_err(name, e, 0, worst);
    }
    for (k = 0; k < STEPS; k++) {
        mg_step_result rp = mg_trainer_step(&par), rs = mg_trainer_step(&ser);
        lp[k] = (float)rp.loss; ls[k] = (float)rs.loss;
        np_[k] = (float)rp.grad_norm; ns[k] = (float)rs.grad_norm;
    }
    snprintf(name, sizeof name, "tp t=%d %s: 20 losses = serial", world, what);
    verdict_err(name, mg_test_max_rel(lp, ls, STEPS, 0), 1e-5, "");
    snprintf(name, sizeof name, "tp t=%d %s: 20 gradient norms = serial", world, what);
    verdict_err(name, mg_test_max_rel(np_, ns, STEPS, 0), 1e-5, "");
    e = compare_weights(&par.model, &ser.model, 1, &pad_ok, worst, sizeof worst);
    snprintf(name, sizeof name, "tp t=%d %s: final weights (gathered) = serial", world, what);
    verdict_err(name, e, 1e-5, worst);
    snprintf(name, sizeof name, "tp t=%d %s: padding rows zero, replicated parameters identical "
             "on all ranks", world, what);
    k = replicated_identical(&par.model);
    mg_test_report(mg_test_agree(pad_ok && k), name, "%s", "");
    mg_trainer_free(&par);
    mg_trainer_free(&ser);
}

/* Dropout is live (it changes the first loss) and its backward is right: central differences
   of the (deterministic) dropout loss against the model's gradient, at the largest gradient
   entry of several tensors. Serial model, every rank the same.                              */
static void check_dropout_gradient(void) {
    mg_trainer tr;
    const char *names[5] = {"embedding.word_embeddings.weight",
                            "decoder.layers.0.self_attention.linear_qkv.weight",
                            "decoder.layers.1.self_attention.linear_proj.weight",
                            "decoder.layers.0.mlp.linear_fc2.weight",
                            "decoder.layers.1.input_layernorm.weight"};
    double worst = 0, tokens, base_loss, plain;
    float *g;
    int i;
    char where[96] = "";
    mg_gpt *m;
    trainer_make(&tr, BASE_LINE MODEL_FLAGS "--hidden-dropout 0.2 --attention-dropout 0.2", 0);
    m = &tr.model;
    tokens = (double)tr.args.global_batch_size * tr.cfg.seq_len;
    fetch_first_batch(&tr);
    plain = mg_gpt_run_microbatches(m, tr.batch, tr.n_micro, 0.0f, 0) / tokens;  /* eval mode */
    m->training = 1;
    m->microbatch_base = 7;
    mg_gpt_zero_grad(m);
    base_loss = mg_gpt_run_microbatches(m, tr.batch, tr.n_micro, (float)(1.0 / tokens), 1) / tokens;
    mg_test_report(mg_test_agree(fabs(base_loss - plain) > 1e-3), "tp: dropout changes the loss",
                   "%.6f with dropout 0.2, %.6f without", base_loss, plain);
    g = gpt_host(m, m->grad_buf);
    for (i = 0; i < 5; i++) {
        int idx = mg_gpt_find_param(m, names[i]);
        const mg_param_desc *d = &m->params[idx];
        int64_t best = 0, j;
        float w0, h = 1e-2f;
        double lplus, lminus, fd, err;
        for (j = 0; j < d->numel; j++)
            if (fabsf(g[d->offset + j]) > fabsf(g[d->offset + best])) best = j;
        mg_copy_to_host(m->ctx, &w0, m->param_buf + d->offset + best, 4);
        w0 += h;
        mg_copy_to_device(m->ctx, m->param_buf + d->offset + best, &w0, 4);
        lplus = mg_gpt_run_microbatches(m, tr.batch, tr.n_micro, 0.0f, 0) / tokens;
        w0 -= 2 * h;
        mg_copy_to_device(m->ctx, m->param_buf + d->offset + best, &w0, 4);
        lminus = mg_gpt_run_microbatches(m, tr.batch, tr.n_micro, 0.0f, 0) / tokens;
        w0 += h;
        mg_copy_to_device(m->ctx, m->param_buf + d->offset + best, &w0, 4);
        fd = (lplus - lminus) / (2.0 * h);
        err = fabs(fd - g[d->offset + best]) / fabs(g[d->offset + best]);
        if (!(err <= worst)) { worst = err; snprintf(where, sizeof where, "%s", d->name); }
    }
    verdict_err("tp: dropout backward = central differences of the dropout loss", worst, 2e-2,
                where);
    free(g);
    mg_trainer_free(&tr);
}

/* A temporary directory made by rank 0, its name shared with every rank. */
static void shared_tmpdir(char *dir, size_t cap) {
    if (comm.world_rank == 0) gpt_tmpdir(dir, cap, "tp");
#ifdef MG_USE_MPI
    MPI_Bcast(dir, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
#endif
}
/* 1 iff the two files hold the same bytes (checked by rank 0, agreed by all). */
static int same_file(const char *a, const char *b) {
    int ok = 0;
    if (comm.world_rank == 0) {
        long na = 0, nb = 0;
        char *x = (char *)mg_test_read_file(a, &na), *y = (char *)mg_test_read_file(b, &nb);
        ok = x && y && na == nb && !memcmp(x, y, (size_t)na);
        free(x);
        free(y);
    }
    return mg_test_agree(ok || comm.world_rank != 0);
}

/* Checkpoints and exports do not depend on t: the files a t-rank job writes (gathered, only
   the V real rows of the word embedding) are byte for byte the serial model's; a checkpoint
   saved at step 10 by t ranks (dropout and sequence parallelism on) resumes on one rank to the
   same steps 11 … 20 as the uninterrupted t-rank run — dropout masks included, since they are
   keyed by the iteration — and on t ranks to bit-identical ones.                            */
static void check_checkpoints(void) {
    char dir[256], line[2048], pline[2200], a[400], b[400], err[MG_ERRLEN], name[200];
    mg_trainer par, ser, res;
    float want[10], got1[10], gott[10];
    int k, ok;
    shared_tmpdir(dir, sizeof dir);
    /* files written right after an import */
    snprintf(line, sizeof line, BASE_LINE "--init-from " GPT_DATA "gpt_model.bin");
    snprintf(pline, sizeof pline, "%s --tensor-model-parallel-size %d --sequence-parallel", line,
             world);
    trainer_make(&par, pline, 1);
    trainer_make(&ser, line, 0);
    snprintf(a, sizeof a, "%s/par", dir);
    snprintf(b, sizeof b, "%s/ser", dir);
    ok = mg_trainer_save(&par, a, err, sizeof err) == 0;
    if (comm.world_rank == 0) ok &= mg_trainer_save(&ser, b, err, sizeof err) == 0;
    snprintf(a, sizeof a, "%s/par/iter_0000000/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/ser/iter_0000000/model.safetensors", dir);
    snprintf(name, sizeof name, "tp t=%d: checkpoint model file = the serial one, byte for byte",
             world);
    mg_test_report(mg_test_agree(ok) && same_file(a, b), name, "%s", "");
    snprintf(a, sizeof a, "%s/hf_par", dir);
    snprintf(b, sizeof b, "%s/hf_ser", dir);
    ok = mg_gpt_export_hf(&par.model, a, err, sizeof err) == 0;
    if (comm.world_rank == 0) ok &= mg_gpt_export_hf(&ser.model, b, err, sizeof err) == 0;
    snprintf(a, sizeof a, "%s/hf_par/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/hf_ser/model.safetensors", dir);
    snprintf(name, sizeof name, "tp t=%d: Hugging Face export = the serial one, byte for byte",
             world);
    mg_test_report(mg_test_agree(ok) && same_file(a, b), name, "%s", "");
    mg_trainer_free(&par);
    mg_trainer_free(&ser);
    /* save at 10 on t ranks, resume on 1 and on t */
    snprintf(line, sizeof line, BASE_LINE MODEL_FLAGS "--hidden-dropout 0.1 "
             "--attention-dropout 0.1 --load %s/run", dir);
    snprintf(pline, sizeof pline, "%s --tensor-model-parallel-size %d --sequence-parallel", line,
             world);
    trainer_make(&par, pline, 1);
    for (k = 0; k < 10; k++) mg_trainer_step(&par);
    snprintf(a, sizeof a, "%s/run", dir);
    ok = mg_trainer_save(&par, a, err, sizeof err) == 0;
    for (k = 0; k < 10; k++) want[k] = (float)mg_trainer_step(&par).loss;
    mg_trainer_free(&par);
    trainer_make(&res, pline, 1);
    ok &= res.iteration == 10;
    for (k = 0; k < 10; k++) gott[k] = (float)mg_trainer_step(&res).loss;
    mg_trainer_free(&res);
    trainer_make(&ser, line, 0);
    ok &= ser.iteration == 10;
    for (k = 0; k < 10; k++) got1[k] = (float)mg_trainer_step(&ser).loss;
    mg_trainer_free(&ser);
    snprintf(name, sizeof name, "tp t=%d sp dropout: saved at 10, resumed on %d ranks: steps "
             "11-20 bit-identical", world, world);
    mg_test_report(mg_test_agree(ok && !memcmp(gott, want, sizeof want)), name, "%s", "");
    snprintf(name, sizeof name, "tp t=%d sp dropout: saved at 10, resumed on 1 rank: steps 11-20 "
             "equal", world);
    verdict_err(name, mg_test_max_rel(got1, want, 10, 0), 1e-5, "");
    if (comm.world_rank == 0) gpt_rmtree(dir);
}

/* Bytes the tensor group sent during one forward + backward of one microbatch, with a model of
   n_layer layers. */
static double traffic_one_microbatch(int n_layer, int sp) {
    char line[2048];
    mg_trainer tr;
    uint64_t before;
    snprintf(line, sizeof line, BASE_LINE "--vocab-size 37 --num-layers %d --hidden-size 32 "
             "--num-attention-heads 4 --tensor-model-parallel-size %d %s", n_layer, world,
             sp ? "--sequence-parallel" : "");
    trainer_make(&tr, line, 1);
    fetch_first_batch(&tr);
    before = comm.bytes_sent[MG_GROUP_TENSOR];
    mg_gpt_run_microbatches(&tr.model, tr.batch, 1, 1e-3f, 1);
    before = comm.bytes_sent[MG_GROUP_TENSOR] - before;
    mg_trainer_free(&tr);
    return (double)before;
}

static void check_traffic(void) {
    const double b = 2, s = 16, h = 32, t = world, bytes = 4;
    int sp;
    for (sp = 0; sp < 2; sp++) {
        double per_layer = traffic_one_microbatch(2, sp) - traffic_one_microbatch(1, sp);
        double want = (sp ? 10 : 8) * b * s * h * (t - 1) / t * bytes;
        char name[200];
        snprintf(name, sizeof name, "tp t=%d%s: tensor-group bytes per layer per microbatch = "
                 "%d·b·s·h·(t−1)/t · 4", world, sp ? " sp" : "", sp ? 10 : 8);
        mg_test_report(mg_test_agree(per_layer == want), name, "counted %.0f, formula %.0f",
                       per_layer, want);
    }
}

int main(int argc, char **argv) {
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    check_run("random init", MODEL_FLAGS);
    check_run("random init, sp", MODEL_FLAGS "--sequence-parallel");
    check_run("random init, sp, classifier in chunks of 5 rows (32 = 6 x 5 + 2)",
              MODEL_FLAGS "--sequence-parallel --classifier-chunk-rows 5");
    check_run("llm.c import", "--init-from " GPT_DATA "gpt_model.bin");
    check_run("llm.c import, sp", "--init-from " GPT_DATA "gpt_model.bin --sequence-parallel");
    check_run("HF import, sp", "--init-from " GPT_DATA "gpt_model.safetensors --num-attention-heads 4 "
              "--sequence-parallel");
    check_run("no biases: the exact (erf) GELU, sp", MODEL_FLAGS "--disable-bias-linear "
              "--sequence-parallel");
    check_run("squared ReLU", MODEL_FLAGS "--squared-relu");
    check_run("zero-centred norms, sp", MODEL_FLAGS "--apply-layernorm-1p --sequence-parallel");
    check_run("xavier init", MODEL_FLAGS "--init-method-xavier-uniform");
    check_run("decoupled lr, untied, sp", MODEL_FLAGS "--decoupled-lr 1e-2 --decoupled-min-lr 1e-3 "
              "--untie-embeddings-and-output-weights --sequence-parallel");
    check_run("dropout", MODEL_FLAGS "--hidden-dropout 0.1 --attention-dropout 0.1");
    check_run("dropout, sp", MODEL_FLAGS "--hidden-dropout 0.1 --attention-dropout 0.1 "
              "--sequence-parallel");
    check_dropout_gradient();
    check_checkpoints();
    check_traffic();
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
