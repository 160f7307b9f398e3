// mg-test: ranks=2,4,8 timeout=240
/* test_dp.c — data parallelism and the distributed optimizer never change the math (issue 7).

   A table of layouts, one row per configuration (tensor-parallel size t, sequence parallelism,
   --use-distributed-optimizer, --bucket-size, dropout), filtered by the world size W of the
   run (d = W/t replicas). For each row the job trains 20 AdamW steps (warm-up + cosine decay,
   weight decay, clipping, a global batch of 8 = micro-batch 1 × 8/d microbatches per replica)
   and, in the same process on every rank, the serial model (one rank, no communication) on
   the same data; then:
     - the 20 losses and gradient norms equal the serial run's to <= 1e-5 relative;
     - the final weights, gathered from the tensor-parallel shards, equal the serial model's
       to <= 1e-5 relative (per tensor, against its RMS; the key bias, whose gradient is
       exactly zero, left out), and are bit-identical on every replica (checksum);
     - the optimizer state per rank: AdamW's two moments hold 8 bytes per element of the
       (padded) flat buffer, divided by d with the distributed optimizer.
   On 4 ranks: a checkpoint saved after 10 iterations under (t=2, d=2, distributed optimizer)
   is resumed under (t=1, d=4), (t=4, d=1), (t=2, d=2) without the distributed optimizer and
   on one rank: iterations 11–20 and the final weights equal the uninterrupted serial run.
   On every world size: a NaN planted in one rank's weights makes every rank skip the step
   (global non-finite detection), with and without the distributed optimizer; the validation
   loss (each replica its share of the batches) equals the serial one.
   (p, v and the pipeline schedules join the table after the pipeline branch is merged.)    */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

#define STEPS 20
#define BASE_LINE "--data-path " GPT_DATA "gpt_tokens.bin --data-order sequential --split 1,0,0 " \
    "--eval-iters 0 --seq-length 16 --micro-batch-size 1 --global-batch-size 8 "                \
    "--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 3 --lr-decay-iters 20 --lr-decay-style cosine "  \
    "--weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 99 "                            \
    "--vocab-size 37 --num-layers 2 --hidden-size 32 --num-attention-heads 4 "

typedef struct dp_row {
    int world;          /* ranks the row runs on                                              */
    int t, sp, dist;    /* tensor-parallel size, --sequence-parallel, --use-distributed-opt.  */
    int bucket;         /* --bucket-size (0: default, one bucket for this model)              */
    int dropout;        /* --hidden-dropout/--attention-dropout 0.1                           */
} dp_row;
static const dp_row rows[] = {
    {2, 1, 0, 0, 0, 0}, {2, 1, 0, 1, 0, 0}, {2, 1, 0, 1, 3000, 1}, {2, 1, 0, 0, 1000, 0},
    {4, 1, 0, 1, 2000, 0}, {4, 2, 0, 0, 0, 0}, {4, 2, 1, 1, 0, 0}, {4, 2, 1, 0, 4000, 1},
    {4, 1, 0, 0, 1500, 1},
    {8, 1, 0, 1, 0, 0}, {8, 2, 1, 1, 3000, 0}, {8, 4, 0, 0, 0, 1}, {8, 4, 1, 1, 2000, 0},
    {8, 2, 0, 0, 0, 0},
};

static double agree_max(double x) {
    double all = x;
    if (!(x == x)) x = 1e300;                                  /* nan: fail everywhere */
    MPI_Allreduce(&x, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

static void trainer_make(mg_trainer *tr, const char *line, int with_comm) {
    gpt_setup_or_die(tr, line, with_comm ? &comm : NULL);
}

static void row_line(char *out, size_t cap, int t, int sp, int dist, int bucket, int dropout,
                     int iters, const char *extra) {
    snprintf(out, cap, BASE_LINE "--train-iters %d --tensor-model-parallel-size %d%s%s "
             "--bucket-size %d%s %s", iters, t, sp ? " --sequence-parallel" : "",
             dist ? " --use-distributed-optimizer" : "", bucket,
             dropout ? " --hidden-dropout 0.1 --attention-dropout 0.1" : "", extra);
}

/* Worst relative error of par's parameters (gathered over its tensor group) against ser's,
   per tensor against its RMS, the key bias left out; *sum: a checksum of the gathered
   weights (equal on every replica iff they are bit-identical).                             */
static double compare_weights(mg_gpt *par, mg_gpt *ser, uint64_t *sum) {
    double e = 0;
    int i;
    *sum = 1469598103934665603ull;
    for (i = 0; i < par->n_params; i++) {
        const mg_param_desc *d = &par->params[i];
        int j = mg_gpt_find_param(ser, d->name);
        int64_t cols = d->ndim == 2 ? d->shape[1] : 1, r, n;
        int64_t rows_par = d->shape[0], rows_ser = ser->params[j].shape[0];
        float *got = (float *)malloc(sizeof(float) * (size_t)(rows_par * cols));
        float *want = (float *)malloc(sizeof(float) * (size_t)(rows_ser * cols));
        const unsigned char *bytes = (const unsigned char *)got;
        double ss = 0, ei;
        mg_gpt_shard_to_global(par, i, par->param_buf, got);    /* collective */
        mg_gpt_shard_to_global(ser, j, ser->param_buf, want);
        n = d->kind == MG_WTE ? (int64_t)par->cfg.vocab_size * cols : rows_par * cols;
        for (r = 0; r < n * 4; r++) *sum = (*sum ^ bytes[r]) * 1099511628211ull;
        if (d->kind == MG_QKV_B) {
            int64_t hd = par->cfg.hidden / par->cfg.n_head;
            for (r = 0; r < n; r++) if ((r / hd) % 3 == 1) got[r] = want[r] = 0;
        }
        for (r = 0; r < n; r++) ss += (double)want[r] * want[r];
        ei = mg_test_max_rel(got, want, (long)n, sqrt(ss / (double)n) + 1e-30);
        if (!(ei <= e)) e = ei;
        free(got);
        free(want);
    }
    return e;
}

static int same_everywhere(uint64_t x) {
    unsigned long long v = x, lo = 0, hi = 0;
    MPI_Allreduce(&v, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* The serial run of a row's model (dropout or not): losses, norms and the trainer itself. */
static void serial_run(mg_trainer *ser, int dropout, float *loss, float *norm) {
    char line[2048];
    int k;
    row_line(line, sizeof line, 1, 0, 0, 0, dropout, STEPS, "");
    trainer_make(ser, line, 0);
    for (k = 0; k < STEPS; k++) {
        mg_step_result r = mg_trainer_step(ser);
        loss[k] = (float)r.loss;
        norm[k] = (float)r.grad_norm;
    }
}

static void check_row(const dp_row *row, mg_trainer *ser, const float *want_loss,
                      const float *want_norm) {
    char line[2048], name[200];
    mg_trainer tr;
    float loss[STEPS], norm[STEPS];
    double e_loss, e_norm, e_w;
    uint64_t sum;
    int64_t held;
    int k, d = world / row->t, mem_ok;
    row_line(line, sizeof line, row->t, row->sp, row->dist, row->bucket, row->dropout, STEPS, "");
    trainer_make(&tr, line, 1);
    for (k = 0; k < STEPS; k++) {
        mg_step_result r = mg_trainer_step(&tr);
        loss[k] = (float)r.loss;
        norm[k] = (float)r.grad_norm;
    }
    e_loss = agree_max(mg_test_max_rel(loss, want_loss, STEPS, 0));
    e_norm = agree_max(mg_test_max_rel(norm, want_norm, STEPS, 0));
    e_w = agree_max(compare_weights(&tr.model, &ser->model, &sum));
    snprintf(name, sizeof name, "dp: t=%d d=%d%s%s bucket=%d%s: 20 steps = serial", row->t, d,
             row->sp ? " sp" : "", row->dist ? " distopt" : "", row->bucket,
             row->dropout ? " dropout" : "");
    mg_test_report(e_loss <= 1e-5 && e_norm <= 1e-5 && e_w <= 1e-5, name,
                   "losses %.3g, grad norms %.3g, weights %.3g (tol 1e-5)", e_loss, e_norm, e_w);
    CHECK(same_everywhere(sum), "dp: the final weights are bit-identical on every rank");
    /* optimizer state: 2 moments x 4 bytes per element of the padded flat buffer, / d */
    for (k = 0, held = 0; k < tr.model.n_params; k++) held += tr.model.params[k].numel;
    /* the flat buffer: this rank's parameters, gaps below 64 per tensor, padding below 64·d */
    mem_ok = tr.opt.n * 8 == (row->dist ? 8 * tr.model.n_elems / d : 8 * tr.model.n_elems) &&
             tr.model.n_elems % (64 * d) == 0 && tr.model.n_elems >= held &&
             tr.model.n_elems < held + 64 * (tr.model.n_params + d);
    mem_ok = agree_max(mem_ok ? 0 : 1) == 0;
    snprintf(name, sizeof name, "dp: t=%d d=%d%s: optimizer state %lld bytes/rank = 8 x %lld "
             "elements%s", row->t, d, row->dist ? " distopt" : "", (long long)(tr.opt.n * 8),
             (long long)tr.model.n_elems, row->dist ? " / d" : "");
    CHECK(mem_ok, name);
    mg_trainer_free(&tr);
}

static void check_resume(mg_trainer *ser, const float *want_loss) {
    static const int layouts[][3] = {{1, 0, 1}, {4, 0, 1}, {2, 0, 1}, {1, 0, 0}};
    char tmpl[] = "/tmp/mg_test_dp_XXXXXX", line[2048], extra[1200], name[200];
    char *dir;
    mg_trainer tr;
    int k, i;
    /* the saving job: t=2, d=2, distributed optimizer, 10 iterations then a checkpoint */
    dir = comm.world_rank == 0 ? mkdtemp(tmpl) : tmpl;
    MPI_Bcast(tmpl, (int)sizeof tmpl, MPI_CHAR, 0, MPI_COMM_WORLD);
    dir = tmpl;
    snprintf(extra, sizeof extra, "--save %s/ck", dir);
    row_line(line, sizeof line, 2, 1, 1, 2000, 0, STEPS, extra);
    trainer_make(&tr, line, 1);
    for (k = 0; k < 10; k++) mg_trainer_step(&tr);
    {
        char err[MG_ERRLEN];
        int rc = mg_trainer_save(&tr, tr.args.save, err, sizeof err);
        CHECK(rc == 0, "dp: save under t=2 d=2 distopt (parallel ranks)");
    }
    mg_trainer_free(&tr);
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < 4; i++) {
        int t = layouts[i][0], dist = layouts[i][1], with_comm = layouts[i][2];
        float loss[10];
        double e_loss, e_w;
        uint64_t sum;
        snprintf(extra, sizeof extra, "--load %s/ck", dir);
        row_line(line, sizeof line, t, 0, dist, 0, 0, STEPS, extra);
        trainer_make(&tr, line, with_comm);
        for (k = 0; k < 10; k++) loss[k] = (float)mg_trainer_step(&tr).loss;
        e_loss = agree_max(mg_test_max_rel(loss, want_loss + 10, 10, 0));
        e_w = agree_max(with_comm ? compare_weights(&tr.model, &ser->model, &sum)
                                  : compare_weights(&tr.model, &ser->model, &sum));
        snprintf(name, sizeof name, "dp: resume (t=2 d=2 distopt) -> %s: iterations 11-20 = "
                 "uninterrupted", i == 3 ? "1 rank" : i == 0 ? "t=1 d=4" : i == 1 ? "t=4 d=1"
                 : "t=2 d=2 no distopt");
        mg_test_report(tr.loaded_iteration == 10 && e_loss <= 1e-5 && e_w <= 1e-5, name,
                       "loaded %lld, losses %.3g, weights %.3g (tol 1e-5)",
                       (long long)tr.loaded_iteration, e_loss, e_w);
        mg_trainer_free(&tr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm.world_rank == 0) {
        snprintf(line, sizeof line, "rm -rf %s", dir);
        if (system(line) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
}

/* A non-finite gradient on ONE replica (a NaN planted in the final layernorm weight of the
   last data-parallel replica, on all its tensor-parallel ranks) is seen by every rank: the
   loss and the norm are NaN everywhere, the step is skipped everywhere and no other
   replica's weights change — with and without the distributed optimizer.                   */
static void check_nonfinite(int dist) {
    char line[2048], name[200];
    mg_trainer tr;
    mg_step_result r;
    int t = world >= 4 ? 2 : 1, idx, k, ok;
    float nan_value = NAN, *before, *after;
    row_line(line, sizeof line, t, 0, dist, 2000, 0, STEPS, "");
    trainer_make(&tr, line, 1);
    mg_trainer_step(&tr);
    idx = mg_gpt_find_param(&tr.model, "decoder.final_layernorm.weight");
    before = (float *)malloc(sizeof(float) * (size_t)tr.model.n_elems);
    after = (float *)malloc(sizeof(float) * (size_t)tr.model.n_elems);
    mg_copy_to_host(&tr.ctx, before, tr.model.param_buf, sizeof(float) * (size_t)tr.model.n_elems);
    if (tr.dp_rank == tr.dp_size - 1)
        mg_copy_to_device(&tr.ctx, tr.model.param_buf + tr.model.params[idx].offset, &nan_value,
                          sizeof nan_value);
    r = mg_trainer_step(&tr);
    mg_copy_to_host(&tr.ctx, after, tr.model.param_buf, sizeof(float) * (size_t)tr.model.n_elems);
    ok = r.skipped == 1 && !(r.grad_norm == r.grad_norm) && !(r.loss == r.loss) &&
         tr.skipped_iters == 1 &&
         tr.opt.step == 1;
    if (tr.dp_rank != tr.dp_size - 1)
        for (k = 0; k < tr.model.n_elems; k++) ok &= memcmp(&before[k], &after[k], 4) == 0;
    snprintf(name, sizeof name, "dp: a NaN in one replica of t=%d d=%d%s: loss NaN, the step "
             "skipped on every rank, weights unchanged", t, world / t, dist ? " distopt" : "");
    mg_test_report(mg_test_agree(ok), name, "skipped %d, loss %g, norm %g", r.skipped, r.loss,
                   r.grad_norm);
    free(before);
    free(after);
    mg_trainer_free(&tr);
}

/* Validation under data parallelism: each replica evaluates its share of every validation
   batch and the sums are added — the loss equals the serial evaluation's.                  */
static void check_evaluate(void) {
    char line[2048], name[160], dir[256], extra[600];
    mg_trainer par, ser;
    double lp, ls;
    int t = world >= 4 ? 2 : 1;
    gpt_tmpdir(dir, sizeof dir, "dp_valid");    /* each rank its own copy of one dataset */
    snprintf(extra, sizeof extra, "--data-path %s/ds --data-order shuffled --split 8,2,0 "
             "--eval-iters 2", dir);
    {
        char prefix[400];
        snprintf(prefix, sizeof prefix, "%s/ds", dir);
        gpt_make_docs(prefix);
    }
    row_line(line, sizeof line, t, 0, 1, 0, 0, STEPS, extra);   /* later flags win */
    trainer_make(&par, line, 1);
    row_line(line, sizeof line, 1, 0, 0, 0, 0, STEPS, extra);
    trainer_make(&ser, line, 0);
    lp = mg_trainer_evaluate(&par, NULL);
    ls = mg_trainer_evaluate(&ser, NULL);
    snprintf(name, sizeof name, "dp: validation loss under t=%d d=%d = serial", t, world / t);
    mg_test_report(mg_test_agree(fabs(lp - ls) <= 1e-5 * fabs(ls) && lp == lp), name,
                   "%.9g vs %.9g", lp, ls);
    mg_trainer_free(&par);
    mg_trainer_free(&ser);
    gpt_rmtree(dir);
}

int main(int argc, char **argv) {
    mg_trainer ser[2];
    float loss[2][STEPS], norm[2][STEPS];
    int i, have[2] = {0, 0};
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
        const dp_row *row = &rows[i];
        if (row->world != world) continue;
        if (!have[row->dropout]) {
            serial_run(&ser[row->dropout], row->dropout, loss[row->dropout], norm[row->dropout]);
            have[row->dropout] = 1;
        }
        check_row(row, &ser[row->dropout], loss[row->dropout], norm[row->dropout]);
    }
    if (world == 4) check_resume(&ser[0], loss[0]);
    check_nonfinite(0);
    check_nonfinite(1);
    check_evaluate();
    for (i = 0; i < 2; i++) if (have[i]) mg_trainer_free(&ser[i]);
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
