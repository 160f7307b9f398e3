// mg-test: ranks=2,4 timeout=300
/* test_pp.c — pipeline parallelism does not change the math.
   For every pipeline layout of the table whose size t·p equals the launched world (2 or 4
   ranks): GPipe, 1F1B, interleaved 1F1B (v = 2), ZB-H1 (split backward, deferred W) and a
   schedule read from a file, 20 training iterations of a tiny GPT through gpt_train's own
   trainer (mg_trainer_setup / mg_trainer_step with --pipeline-model-parallel-size …) must
   give the serial run's losses and gradient norms (relative 1e-5), the same validation loss
   (evaluation runs a forward-only pipeline) and the same final weights on every stage —
   including both copies of the tied word embedding (first and last stage). Two starts
   besides the counter-based initialisation: the weights of an llm.c checkpoint
   (--init-from, each stage importing its own tensors) and a serial run's checkpoint after
   10 iterations (--load: the pipeline resumes it and trains the last 10). The serial run
   is the same trainer with one stage and no communication, computed on every rank.
   In the last iteration (without sequence parallelism) the model's gradient hook — what
   data-parallel overlap starts buckets from — must report every gradient exactly once and
   only when final (bit-identical to the end of the step), the word embedding never (its
   stage parts are summed after the flush): during each chunk's last backward, or with ZB-H1
   its last weight half.
   Tensor × pipeline (t = 2, p = 2 on 4 ranks): every built-in schedule, with and without
   --sequence-parallel, against the same serial run; the weights are gathered over the
   tensor group before the comparison. Megatron's scatter/gather is on without sequence
   parallelism: each rank's pipeline traffic must equal the sequence-parallel run's (both
   send [B·T/t, C] per message; without scatter/gather it would be t times more). The table
   is the one place to add layouts.                                                          */
#include "gpt_test_util.h"

#define ITERS 20

typedef enum { FROM_SEED = 0, FROM_LLMC, FROM_CHECKPOINT } pp_start;
static const char *const start_name[3] = {"", " from an llm.c checkpoint",
                                          " resuming a serial checkpoint"};
typedef struct pp_case {
    int t, p, v;                 /* tensor, pipeline sizes; chunks per pipeline rank          */
    const char *schedule;        /* --pipeline-schedule, or "file" (the 1F1B schedule written
                                    to a file and read back with --pipeline-schedule-file)    */
    pp_start start;
    const char *extra;           /* more flags                                                */
} pp_case;
static const pp_case cases[] = {
    {1, 2, 1, "gpipe", FROM_SEED, ""}, {1, 2, 1, "1f1b", FROM_SEED, ""},
    {1, 2, 2, "interleaved", FROM_SEED, ""}, {1, 2, 1, "zb-h1", FROM_SEED, ""},
    {1, 2, 2, "gpipe", FROM_SEED, ""}, {1, 2, 1, "file", FROM_SEED, ""},
    {1, 2, 1, "1f1b", FROM_LLMC, ""}, {1, 2, 1, "zb-h1", FROM_CHECKPOINT, ""},
    {1, 2, 2, "interleaved", FROM_SEED, "--microbatch-group-size-per-virtual-pipeline-stage 4"},
    {1, 4, 1, "gpipe", FROM_SEED, ""}, {1, 4, 1, "1f1b", FROM_SEED, ""},
    {1, 4, 2, "interleaved", FROM_SEED, ""}, {1, 4, 1, "zb-h1", FROM_SEED, ""},
    {1, 4, 2, "interleaved", FROM_CHECKPOINT, ""},
    {2, 2, 1, "gpipe", FROM_SEED, ""}, {2, 2, 1, "1f1b", FROM_SEED, ""},
    {2, 2, 2, "interleaved", FROM_SEED, ""}, {2, 2, 1, "zb-h1", FROM_SEED, ""},
    {2, 2, 1, "gpipe", FROM_SEED, "--sequence-parallel"},
    {2, 2, 1, "1f1b", FROM_SEED, "--sequence-parallel"},
    {2, 2, 2, "interleaved", FROM_SEED, "--sequence-parallel"},
    {2, 2, 1, "zb-h1", FROM_SEED, "--sequence-parallel"},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))
#define N_LAYERS 8               /* divisible by every p·v of the table                       */

/* The model and run every case shares: 8 layers, hidden 16, 2 heads, 8 tokens, global batch
   16 = 8 microbatches of 2, clipping active (the norm is near the 0.5 limit). */
static char base[1024], base_llmc[1024];
static void make_base(const char *data) {
    const char *run = "--micro-batch-size 2 --global-batch-size 16 --lr 3e-3 "
                      "--lr-warmup-iters 2 --lr-decay-style cosine --clip-grad 0.5 --split 8,2,0 "
                      "--eval-iters 1 --eval-interval 1000 --log-interval 1000";
    snprintf(base, sizeof base, "--data-path %s --vocab-size 37 --num-layers %d --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --train-iters %d %s", data, N_LAYERS,
             ITERS, run);
    /* the oracle's llm.c checkpoint: 2 layers, hidden 32, 4 heads, 24 positions */
    snprintf(base_llmc, sizeof base_llmc, "--init-from " GPT_DATA "gpt_model.bin --data-path "
             "%s --seq-length 8 --train-iters %d %s", data, ITERS, run);
}

typedef struct run_result {
    double loss[ITERS], norm[ITERS], valid;
    int first;                   /* the iteration the run started at (a resumed one: > 0)    */
    int64_t hook_bad;            /* elements the gradient hook got wrong in the last iteration */
    mg_trainer tr;               /* kept for its weights                                       */
} run_result;

/* The gradient hook's timing, which data-parallel overlap relies on: a hook installed on the
   model for one iteration (with d = 1 the trainer's mg_dp leaves it alone) copies every range
   the model reports final. After the step each reported element must be what the backward
   finally left there, bit for bit, and the reports must cover the flat buffer exactly once
   — except the word embedding with p > 1, never reported (its two stage parts are summed
   over the embedding group after the flush).                                             */
typedef struct hook_record { mg_gpt *m; float *seen; int *times; } hook_record;
static void hook_record_range(void *user, int64_t first, int64_t end) {
    hook_record *h = (hook_record *)user;
    int64_t i;
    mg_copy_to_host(h->m->ctx, h->seen + first, h->m->grad_buf + first,
                    sizeof(float) * (size_t)(end - first));
    for (i = first; i < end; i++) h->times[i]++;
}
static void hook_begin(hook_record *h, mg_gpt *m) {
    h->m = m;
    h->seen = (float *)calloc((size_t)m->n_elems, sizeof(float));
    h->times = (int *)calloc((size_t)m->n_elems, sizeof(int));
    m->grads_final = hook_record_range;
    m->grads_final_user = h;
}
/* Elements reported wrongly (too early, twice, or not at all). */
static int64_t hook_end(hook_record *h) {
    mg_gpt *m = h->m;
    float *grads = gpt_host(m, m->grad_buf);
    int iwte = m->idx_global[0];
    int64_t wte_end = m->layout.pp_size > 1 && iwte >= 0 ? m->params[iwte + 1].offset : 0;
    int64_t i, bad = 0;
    for (i = 0; i < m->n_elems; i++)
        bad += i < wte_end ? h->times[i] != 0
                           : h->times[i] != 1 || memcmp(&h->seen[i], &grads[i], sizeof(float));
    m->grads_final = NULL;
    m->grads_final_user = NULL;
    free(grads);
    free(h->seen);
    free(h->times);
    return bad;
}

/* Sets up the trainer of line and trains it up to iteration `until`; validates at the end.
   check_hook: records the gradient hook during the last iteration (r->hook_bad).          */
static void train(run_result *r, const char *line, mg_comm *comm, int until, int check_hook) {
    mg_train_args a;
    char err[MG_ERRLEN];
    if (gpt_parse_line(&a, line, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    a.comm = comm;
    if (mg_trainer_setup(&r->tr, &a, err, sizeof err)) {
        fprintf(stderr, "setup failed: %s\n  line: %s\n", err, line);
        exit(1);
    }
    r->first = (int)r->tr.iteration;
    r->hook_bad = 0;
    while (r->tr.iteration < until) {
        int i = (int)r->tr.iteration, last = check_hook && i == until - 1;
        hook_record h;
        mg_step_result s;
        if (last) hook_begin(&h, &r->tr.model);
        s = mg_trainer_step(&r->tr);
        if (last) r->hook_bad = hook_end(&h);
        r->loss[i] = s.loss;
        r->norm[i] = s.grad_norm;
    }
    if (until == ITERS) r->valid = mg_trainer_evaluate(&r->tr, NULL); /* (not before a save) */
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30); }
static double world_max(double x) {
    double y = x;
    if (!(x == x)) x = INFINITY;                   /* nan: worst */
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return y;
}

/* Worst error of this rank's parameters, gathered over its tensor group (collective there),
   against the serial model's same-named ones: max |got − want| over max(|want|, RMS of the
   tensor), the word embedding's V real rows only (the padding depends on t), the key bias
   left out (gpt_mask_key_bias says why).                                                  */
static double weights_err(mg_gpt *pipe, mg_gpt *serial, float *serial_host) {
    double worst = 0;
    int i;
    for (i = 0; i < pipe->n_params; i++) {
        const mg_param_desc *d = &pipe->params[i];
        int j = mg_gpt_find_param(serial, d->name);
        int64_t cols = d->ndim == 2 ? d->shape[1] : 1, n = d->shape[0] * cols, r;
        int64_t hd = pipe->cfg.hidden / pipe->cfg.n_head;
        float *got = (float *)malloc(sizeof(float) * (size_t)n), *want;
        double ss = 0, e;
        mg_gpt_shard_to_global(pipe, i, pipe->param_buf, got);
        if (j < 0) { free(got); worst = INFINITY; continue; }
        if (d->kind == MG_WTE) n = (int64_t)pipe->cfg.vocab_size * cols;
        want = (float *)malloc(sizeof(float) * (size_t)n);
        memcpy(want, serial_host + serial->params[j].offset, sizeof(float) * (size_t)n);
        if (d->kind == MG_QKV_B)
            for (r = 0; r < n; r++) if ((r / hd) % 3 == 1) got[r] = want[r] = 0;
        for (r = 0; r < n; r++) ss += (double)want[r] * want[r];
        e = mg_test_max_rel(got, want, (long)n, sqrt(ss / (double)n) + 1e-30);
        if (!(e <= worst)) worst = e;
        free(got);
        free(want);
    }
    return worst;
}

/* The serial reference of a start (computed once, on every rank). */
static run_result *reference(pp_start start, run_result **cache, float **weights) {
    if (!cache[start]) {
        cache[start] = (run_result *)calloc(1, sizeof(run_result));
        train(cache[start], start == FROM_LLMC ? base_llmc : base, NULL, ITERS, 0);
        weights[start] = gpt_host(&cache[start]->tr.model, cache[start]->tr.model.param_buf);
    }
    return cache[start];
}

int main(int argc, char **argv) {
    mg_comm comm;
    char tmp[256], prefix[300], line[2048], sched_path[300], ckpt[300], name[500], label[300];
    run_result *serial_cache[3] = {NULL, NULL, NULL}, *serial;
    run_result *pipe = (run_result *)calloc(1, sizeof(run_result));
    float *serial_w_cache[3] = {NULL, NULL, NULL}, *serial_w;
    uint64_t pipe_bytes[N_CASES];       /* bytes this rank sent on its pipeline group      */
    int k, ran = 0, have_ckpt = 0;
    mg_comm_init(&comm, &argc, &argv);
    mg_test_quiet = comm.world_rank != 0;
    /* one data set for all ranks: rank 0 writes it, the others wait */
    memset(tmp, 0, sizeof tmp);
    if (comm.world_rank == 0) {
        gpt_tmpdir(tmp, sizeof tmp, "pp");
        snprintf(prefix, sizeof prefix, "%s/docs", tmp);
        gpt_make_docs(prefix);
    }
    MPI_Bcast(tmp, (int)sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(prefix, sizeof prefix, "%s/docs", tmp);
    snprintf(sched_path, sizeof sched_path, "%s/1f1b_p%d.sched", tmp, comm.world_size);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", tmp);
    make_base(prefix);

    for (k = 0; k < N_CASES; k++) {
        const pp_case *c = &cases[k];
        double loss_err = 0, norm_err = 0, w_err, v_err;
        uint64_t sent_before = comm.bytes_sent[MG_GROUP_PIPELINE];
        int i, j;
        if (c->t * c->p != comm.world_size) continue;
        serial = reference(c->start, serial_cache, serial_w_cache);
        serial_w = serial_w_cache[c->start];
        if (c->start == FROM_CHECKPOINT && !have_ckpt) {  /* a serial run's iteration 10 */
            if (comm.world_rank == 0) {
                run_result *half = (run_result *)calloc(1, sizeof(run_result));
                char err[MG_ERRLEN];
                train(half, base, NULL, ITERS / 2, 0);
                if (mg_trainer_save(&half->tr, ckpt, err, sizeof err)) {
                    fprintf(stderr, "%s\n", err);
                    exit(1);
                }
                mg_trainer_free(&half->tr);
                free(half);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            have_ckpt = 1;
        }
        if (!strcmp(c->schedule, "file")) {      /* the built-in 1F1B, through its text form */
            mg_schedule s;
            mg_schedule_desc sd = mg_schedule_desc_default(MG_SCHED_1F1B, c->p, c->v, 8);
            char err[MG_ERRLEN];
            if (comm.world_rank == 0) {
                FILE *f = fopen(sched_path, "w");
                if (mg_schedule_build(&s, &sd, err, sizeof err) || !f) {
                    fprintf(stderr, "%s\n", err);
                    exit(1);
                }
                fprintf(f, "# 1F1B, p=%d, m=8, written by test_pp\n", c->p);
                mg_schedule_write(&s, f);
                fclose(f);
                mg_schedule_free(&s);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            snprintf(line, sizeof line, "%s --pipeline-model-parallel-size %d "
                     "--pipeline-schedule-file %s", base, c->p, sched_path);
        } else {
            snprintf(line, sizeof line, "%s --pipeline-model-parallel-size %d "
                     "--pipeline-schedule %s", c->start == FROM_LLMC ? base_llmc : base, c->p,
                     c->schedule);
            if (c->v > 1)
                snprintf(line + strlen(line), sizeof line - strlen(line),
                         " --num-layers-per-virtual-pipeline-stage %d", N_LAYERS / (c->p * c->v));
        }
        if (c->t > 1)
            snprintf(line + strlen(line), sizeof line - strlen(line),
                     " --tensor-model-parallel-size %d", c->t);
        if (c->start == FROM_CHECKPOINT)
            snprintf(line + strlen(line), sizeof line - strlen(line), " --load %s", ckpt);
        snprintf(line + strlen(line), sizeof line - strlen(line), " %s", c->extra);
        /* (sequence parallelism sums the layernorm gradients over the tensor group after the
           hook: the snapshot would differ there by design) */
        train(pipe, line, &comm, ITERS, !strstr(c->extra, "--sequence-parallel"));
        pipe_bytes[k] = comm.bytes_sent[MG_GROUP_PIPELINE] - sent_before;
        ran++;
        if (c->start == FROM_CHECKPOINT && pipe->first != ITERS / 2) loss_err = INFINITY;
        for (i = pipe->first; i < ITERS; i++) {
            double le = rel(pipe->loss[i], serial->loss[i]);
            double ne = rel(pipe->norm[i], serial->norm[i]);
            if (!(le <= loss_err)) loss_err = le;
            if (!(ne <= norm_err)) norm_err = ne;
        }
        loss_err = world_max(loss_err);
        norm_err = world_max(norm_err);
        v_err = world_max(rel(pipe->valid, serial->valid));
        w_err = world_max(weights_err(&pipe->tr.model, &serial->tr.model, serial_w));
        snprintf(label, sizeof label, "pp: t=%d p=%d v=%d %s%s%s%s", c->t, c->p, c->v,
                 c->schedule, c->extra[0] ? " " : "", c->extra, start_name[c->start]);
        snprintf(name, sizeof name, "%s: %d losses equal the serial run", label,
                 ITERS - pipe->first);
        mg_test_report(loss_err <= 1e-5, name, "max rel err %.2g (first %.6f, last %.6f)",
                       loss_err, serial->loss[0], serial->loss[ITERS - 1]);
        snprintf(name, sizeof name, "%s: gradient norms (tied embedding counted once)", label);
        mg_test_report(norm_err <= 1e-5, name, "max rel err %.2g", norm_err);
        snprintf(name, sizeof name, "%s: validation loss (forward-only pipeline)", label);
        mg_test_report(v_err <= 1e-5, name, "rel err %.2g", v_err);
        snprintf(name, sizeof name, "%s: final weights of every stage", label);
        mg_test_report(w_err <= 1e-5, name, "max rel err %.2g", w_err);
        if (!strstr(c->extra, "--sequence-parallel")) {
            snprintf(name, sizeof name, "%s: the gradient hook reports each chunk's gradients "
                     "once, when final (during its last backward%s)", label,
                     strcmp(c->schedule, "zb-h1") ? "" : "'s weight half");
            mg_test_report(world_max((double)pipe->hook_bad) == 0, name, "rank %d: %lld "
                           "elements reported early, twice or never", comm.world_rank,
                           (long long)pipe->hook_bad);
        }
        for (j = 0; j < k && c->t > 1 && !strcmp(c->extra, "--sequence-parallel"); j++)
            if (cases[j].t == c->t && cases[j].p == c->p && cases[j].v == c->v &&
                !strcmp(cases[j].schedule, c->schedule) && !cases[j].extra[0]) {
                snprintf(name, sizeof name, "%s: pipeline traffic = the scatter/gather run's "
                         "without sequence parallelism", label);
                mg_test_report(world_max(pipe_bytes[j] != pipe_bytes[k]) == 0, name,
                               "rank 0: %llu bytes, without sp %llu", (unsigned long long)
                               pipe_bytes[k], (unsigned long long)pipe_bytes[j]);
            }
        mg_trainer_free(&pipe->tr);
    }
    CHECK(ran > 0, "pp: the table has cases for this world size");
    for (k = 0; k < 3; k++)
        if (serial_cache[k]) {
            mg_trainer_free(&serial_cache[k]->tr);
            free(serial_cache[k]);
            free(serial_w_cache[k]);
        }
    free(pipe);
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm.world_rank == 0) gpt_rmtree(tmp);
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
