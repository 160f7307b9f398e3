/* gpt_test_util.h — helpers shared by the model/trainer tests (tests/test_model.c,
   tests/test_train.c, tests/test_cli.c): the PyTorch reference files of tests/oracle/gpt.py,
   models built from them, comparisons, temporary directories.                               */
#ifndef GPT_TEST_UTIL_H
#define GPT_TEST_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include "megatron.h"
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1   /* mg_test.h includes mpi.h: its C++ bindings do not build clean */
#endif
#include "mg_test.h"
#include "ops_util.h"    /* ops_ctx_make: the context the runner asked for */

#define GPT_DATA "tests/data/"

/* A context on the device the runner chose (MG_DEVICE), with the given arena. */
#define gpt_ctx ops_ctx_make

/* A whole file as a NUL-terminated string (malloc'ed), or NULL. */
static inline char *gpt_read_text(const char *path) {
    long len = 0;
    char *raw = (char *)mg_test_read_file(path, &len), *s;
    if (!raw) return NULL;
    s = (char *)malloc((size_t)len + 1);
    memcpy(s, raw, (size_t)len);
    s[len] = 0;
    free(raw);
    return s;
}

/* One number of an oracle's JSON file (its configuration and hyper-parameters). */
static inline double gpt_json_num(const char *path, const char *key) {
    char *text = gpt_read_text(path), *end;
    mg_json js;
    char err[MG_ERRLEN];
    double v = NAN;
    int64_t t;
    if (!text) { fprintf(stderr, "missing %s\n", path); exit(1); }
    if (mg_json_parse(&js, text, strlen(text), err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    t = mg_json_get(&js, 0, key);
    if (t >= 0) v = strtod(text + js.toks[t].start, &end);
    mg_json_free(&js);
    free(text);
    if (t < 0) { fprintf(stderr, "%s: no key %s\n", path, key); exit(1); }
    return v;
}
/* One number from tests/data/gpt_ref.json (the GPT-2 oracle's configuration). */
static inline double gpt_ref_num(const char *key) {
    return gpt_json_num(GPT_DATA "gpt_ref.json", key);
}

/* The oracle's model configuration. */
static inline mg_gpt_config gpt_ref_config(void) {
    mg_gpt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = (int)gpt_ref_num("n_layer");
    c.hidden = (int)gpt_ref_num("n_embd");
    c.n_head = (int)gpt_ref_num("n_head");
    c.seq_len = (int)gpt_ref_num("seq_len");
    c.max_pos = (int)gpt_ref_num("n_positions");
    c.vocab_size = (int)gpt_ref_num("vocab_size");
    c.padded_vocab = mg_gpt_pad_vocab(c.vocab_size, 128, 1);
    return c;
}

/* The Llama oracle's model configuration (tests/oracle/llama.py, tests/data/llama_ref.json):
   RMSNorm, SwiGLU, llama3-scaled rope, GQA with its own head dimension, untied, no biases. */
#define LLAMA_REF GPT_DATA "llama_ref.json"
static inline mg_gpt_config gpt_llama_config(void) {
    mg_gpt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = (int)gpt_json_num(LLAMA_REF, "n_layer");
    c.hidden = (int)gpt_json_num(LLAMA_REF, "hidden");
    c.n_head = (int)gpt_json_num(LLAMA_REF, "n_head");
    c.n_query_groups = (int)gpt_json_num(LLAMA_REF, "n_query_groups");
    c.kv_channels = (int)gpt_json_num(LLAMA_REF, "kv_channels");
    c.ffn_hidden = (int)gpt_json_num(LLAMA_REF, "ffn_hidden");
    c.seq_len = (int)gpt_json_num(LLAMA_REF, "seq_len");
    c.max_pos = (int)gpt_json_num(LLAMA_REF, "max_position_embeddings");
    c.vocab_size = (int)gpt_json_num(LLAMA_REF, "vocab_size");
    c.padded_vocab = mg_gpt_pad_vocab(c.vocab_size, 128, 1);
    c.normalization = MG_NORM_RMSNORM;
    c.norm_epsilon = (float)gpt_json_num(LLAMA_REF, "rms_norm_eps");
    c.swiglu = 1;
    c.position_embedding = MG_POS_ROPE;
    c.rotary_base = (float)gpt_json_num(LLAMA_REF, "rope_theta");
    c.use_rope_scaling = 1;
    c.rope_scaling_factor = (float)gpt_json_num(LLAMA_REF, "rope_factor");
    c.rope_low_freq_factor = (float)gpt_json_num(LLAMA_REF, "rope_low_freq_factor");
    c.rope_high_freq_factor = (float)gpt_json_num(LLAMA_REF, "rope_high_freq_factor");
    c.rope_original_max_pos = (int)gpt_json_num(LLAMA_REF, "rope_original_max_position_embeddings");
    c.untie_embeddings = 1;
    c.disable_bias_linear = 1;
    return c;
}

/* A model with its own context: micro-batch B, n_micro microbatches, n_chunks chunks. */
typedef struct gpt_fixture { mg_ctx ctx; mg_gpt m; } gpt_fixture;
static inline void gpt_fixture_make_layout(gpt_fixture *f, const mg_gpt_config *cfg,
                                           const mg_gpt_layout *L) {
    char err[MG_ERRLEN];
    f->ctx = gpt_ctx(mg_gpt_arena_bytes(cfg, L) + (8u << 20));
    if (mg_gpt_create(&f->m, &f->ctx, cfg, L, err, sizeof err)) {
        fprintf(stderr, "mg_gpt_create: %s\n", err);
        exit(1);
    }
}
static inline void gpt_fixture_make(gpt_fixture *f, const mg_gpt_config *cfg, int B, int n_micro,
                             int n_chunks) {
    mg_gpt_layout L = mg_gpt_layout_single(cfg, B, n_micro, n_chunks);
    gpt_fixture_make_layout(f, cfg, &L);
}
static inline void gpt_fixture_free(gpt_fixture *f) {
    mg_gpt_destroy(&f->m);
    mg_ctx_free(&f->ctx);
}
/* Imports a weights file into the model's parameters (or, with into_grads, its gradient
   buffer: the oracle writes gradients as a weights file). Exits on error. */
static inline void gpt_import(mg_gpt *m, const char *path, int into_grads) {
    mg_weights_file wf;
    char err[MG_ERRLEN];
    if (mg_weights_open(&wf, path, err, sizeof err) || mg_gpt_import(m, &wf, err, sizeof err)) {
        fprintf(stderr, "import %s: %s\n", path, err);
        exit(1);
    }
    mg_weights_close(&wf);
    if (into_grads) {   /* move what was imported into the gradient buffer */
        mg_copy(m->ctx, m->grad_buf, m->param_buf, (size_t)m->n_elems * sizeof(float));
        mg_memset_zero(m->ctx, m->param_buf, (size_t)m->n_elems * sizeof(float));
    }
}
/* A flat device buffer of the model copied to the host (malloc'ed). */
static inline float *gpt_host(mg_gpt *m, const float *flat) {
    float *h = (float *)malloc((size_t)m->n_elems * sizeof(float));
    mg_copy_to_host(m->ctx, h, flat, (size_t)m->n_elems * sizeof(float));
    return h;
}
/* Relative error of got against want over one parameter: max |got - want| / max(|want|, RMS
   of want over the tensor). Elements far below the tensor's typical size are measured against
   that size: an fp32 sum whose terms cancel to a small value keeps the absolute error of the
   terms, so a purely elementwise measure would test the cancellation, not the model.        */
static inline double gpt_param_err(const mg_param_desc *d, const float *got, const float *want) {
    double ss = 0;
    int64_t i;
    for (i = 0; i < d->numel; i++) ss += (double)want[d->offset + i] * want[d->offset + i];
    return mg_test_max_rel(got + d->offset, want + d->offset, d->numel,
                           sqrt(ss / (double)(d->numel ? d->numel : 1)) + 1e-30);
}
/* Worst gpt_param_err over all parameters; *worst names the parameter. */
static inline double gpt_all_err(const mg_gpt *m, const float *got, const float *want, int *worst) {
    double e = 0;
    int i;
    for (i = 0; i < m->n_params; i++) {
        double ei = gpt_param_err(&m->params[i], got, want);
        if (!(ei <= e)) { e = ei; if (worst) *worst = i; }
    }
    return e;
}
/* Zeroes the key part of every QKV bias in a host copy of a flat buffer. The key bias has an
   exactly zero gradient (adding a constant to every key adds the same q.b to a softmax row,
   which the softmax ignores), so two fp32 implementations compute different rounding noise
   for it, and Adam, which divides by sqrt(v), turns that noise into lr-sized steps: after
   training, those elements differ by ~lr between any two implementations and carry no
   information. Comparisons of trained weights leave them out. */
static inline void gpt_mask_key_bias(const mg_gpt *m, float *flat) {
    int i;
    int64_t r, hd = m->cfg.hidden / m->cfg.n_head;
    for (i = 0; i < m->n_params; i++)
        if (m->params[i].kind == MG_QKV_B)
            for (r = 0; r < m->params[i].numel; r++)
                if ((r / hd) % 3 == 1) flat[m->params[i].offset + r] = 0;  /* (head, {q,k,v}, hd) */
}

/* An indexed dataset PREFIX.bin/.idx of 50 documents of 40 tokens (ids < 37), so that a
   --split has documents for each part. */
static inline void gpt_make_docs(const char *prefix) {
    mg_idx_writer w;
    char err[MG_ERRLEN];
    int32_t doc[40];
    int d, i;
    if (mg_idx_writer_begin(&w, prefix, MG_IDX_U16, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    for (d = 0; d < 50; d++) {
        for (i = 0; i < 40; i++) doc[i] = (d * 7 + i * i) % 37;
        mg_idx_writer_add(&w, doc, 40, err, sizeof err);
        mg_idx_writer_end_document(&w);
    }
    if (mg_idx_writer_finish(&w, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
}

/* mkdtemp under /tmp: a fresh directory name in out. */
static inline void gpt_tmpdir(char *out, size_t cap, const char *tag) {
    snprintf(out, cap, "/tmp/mg_%s_XXXXXX", tag);
    if (!mkdtemp(out)) { perror("mkdtemp"); exit(1); }
}
static inline void gpt_rmtree(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}
/* Reference tensor by name from an oracle safetensors file, as a malloc'ed fp32 array. */
static inline float *gpt_ref_tensor(const char *path, const char *name, int64_t *n) {
    mg_st_file st;
    char err[MG_ERRLEN];
    const mg_st_tensor *t;
    float *out;
    if (mg_st_open(path, &st, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    t = mg_st_find(&st, name);
    if (!t) { fprintf(stderr, "%s: no tensor %s\n", path, name); exit(1); }
    out = (float *)malloc(t->nbytes + 4);
    memcpy(out, t->data, t->nbytes);
    if (n) *n = t->numel;
    mg_st_close(&st);
    return out;
}
/* Parses a command line (words separated by spaces; no quoting) into args with the defaults
   first. Returns mg_train_parse's result; err receives its message. The words stay allocated
   (the args point into them). */
static inline int gpt_parse_line(mg_train_args *a, const char *line, char *err, size_t errlen) {
    char *buf = strdup(line);          /* args point into it: kept for the test's lifetime */
    char *argv[128], *p;
    int argc = 0;
    argv[argc++] = (char *)"gpt_train";
    for (p = strtok(buf, " "); p && argc < 127; p = strtok(NULL, " ")) argv[argc++] = p;
    argv[argc] = NULL;
    mg_train_args_default(a);
    return mg_train_parse(a, argc, argv, err, errlen);
}
/* Parse + setup over comm (NULL: one rank, no communication); 0, or -1 with the reason. */
static inline int gpt_setup_line(mg_trainer *tr, const char *line, mg_comm *comm, char *err,
                                 size_t errlen) {
    mg_train_args a;
    if (gpt_parse_line(&a, line, err, errlen)) return -1;
    a.comm = comm;
    return mg_trainer_setup(tr, &a, err, errlen);
}
/* A run a test expects to work, over comm: exits with the rank and the message otherwise. */
static inline void gpt_setup_or_die(mg_trainer *tr, const char *line, mg_comm *comm) {
    char err[MG_ERRLEN];
    if (gpt_setup_line(tr, line, comm, err, sizeof err) == 0) return;
    fprintf(stderr, "rank %d: setup failed: %s\n  line: %s\n", comm ? comm->world_rank : 0, err,
            line);
    exit(1);
}
/* The line must fail (parse or setup over comm, every rank of the job) with a one-line
   message containing `want`; reported as "label: what", the verdict agreed over the ranks. */
static inline void gpt_expect_error(mg_comm *comm, const char *label, const char *what,
                                    const char *line, const char *want) {
    mg_trainer tr;
    char err[MG_ERRLEN] = {0}, name[300];
    int failed = gpt_setup_line(&tr, line, comm, err, sizeof err) != 0, ok;
    if (!failed) mg_trainer_free(&tr);
    ok = failed && strstr(err, want) && !strchr(err, '\n');
    snprintf(name, sizeof name, "%s: %s", label, what);
    if (!ok)
        fprintf(stderr, "rank %d: %s: got '%s', want '%s'\n", comm ? comm->world_rank : 0, what,
                failed ? err : "accepted", want);
    mg_test_report(mg_test_agree(ok), name, "%s", failed ? err : "accepted");
}
/* Runs cmd through the shell and reads what it prints into out (cap bytes, NUL-terminated);
   returns pclose's status, -1 when it did not run.                                         */
static inline int gpt_capture(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, cap - 1, p) : 0;
    out[n] = 0;
    return p ? pclose(p) : -1;
}
/* build/gpt_train ARGS under `mpirun -np np` (one OpenMP thread per rank), its stdout and
   stderr read line by line: returns the number of "gpt_train: error:" lines (the first one
   copied to first), *status the exit status (-1: it did not run); on_line (may be NULL)
   sees every line.                                                                         */
static inline int gpt_mpirun_train(int np, const char *args, int *status, char *first,
                                   size_t cap, void (*on_line)(const char *line, void *user),
                                   void *user) {
    char cmd[4096], buf[4096];
    FILE *p;
    int n = 0, st;
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none%s -np %d "
             "build/gpt_train %s 2>&1; echo \"status $?\"", getuid() == 0 ?
             " --allow-run-as-root" : "", np, args);
    p = popen(cmd, "r");
    *status = -1;
    first[0] = 0;
    while (p && fgets(buf, sizeof buf, p)) {
        if (!strncmp(buf, "gpt_train: error:", 17) && !n++ && cap > 0) {
            size_t len = strlen(buf) < cap ? strlen(buf) : cap - 1;
            memcpy(first, buf, len);
            first[len] = 0;
        }
        if (sscanf(buf, "status %d", &st) == 1) *status = st;
        else if (on_line) on_line(buf, user);
    }
    if (p) pclose(p);
    return n;
}
/* Parse + setup; exits with the message if either fails (for runs a test expects to work). */
static inline void gpt_trainer_from_line(mg_trainer *tr, const char *line) {
    mg_train_args a;
    char err[MG_ERRLEN];
    if (gpt_parse_line(&a, line, err, sizeof err) || mg_trainer_setup(tr, &a, err, sizeof err)) {
        fprintf(stderr, "setup failed: %s\n  line: %s\n", err, line);
        exit(1);
    }
}
/* Parse + setup over the job's communicator (NULL: a serial model); exits naming the rank. */
static inline void gpt_trainer_on(mg_trainer *tr, const char *line, mg_comm *comm) {
    mg_train_args a;
    char err[MG_ERRLEN];
    if (gpt_parse_line(&a, line, err, sizeof err) == 0) {
        a.comm = comm;
        if (mg_trainer_setup(tr, &a, err, sizeof err) == 0) return;
    }
    fprintf(stderr, "rank %d: setup failed: %s\n  line: %s\n", comm ? comm->world_rank : 0, err,
            line);
    exit(1);
}
/* A training run kept for a bit-for-bit comparison with another: per step the loss, gradient
   norm, loss scale and whether it was skipped; then this rank's fp32 weights (its pieces of a
   sharded master) and Adam moments (host copies). gpt_run_train trains `steps` (<= GPT_RUN_STEPS) iterations of `line` over
   comm; gpt_run_same is 1 iff two runs agree in every bit (and the losses are not nan).   */
#define GPT_RUN_STEPS 32
typedef struct gpt_run {
    double loss[GPT_RUN_STEPS], norm[GPT_RUN_STEPS], scale[GPT_RUN_STEPS];
    int steps, skipped;
    float *w, *m, *v;
    int64_t n_w, n_mom;
} gpt_run;
static inline float *gpt_run_host(mg_ctx *ctx, const float *dev, int64_t n) {
    float *h = (float *)malloc(sizeof(float) * (size_t)(n + 1));
    mg_copy_to_host(ctx, h, dev, sizeof(float) * (size_t)n);
    return h;
}
static inline void gpt_run_train(gpt_run *r, const char *line, mg_comm *comm, int steps) {
    mg_trainer tr;
    int k;
    memset(r, 0, sizeof *r);
    r->steps = steps < GPT_RUN_STEPS ? steps : GPT_RUN_STEPS;
    gpt_trainer_on(&tr, line, comm);
    for (k = 0; k < r->steps; k++) {
        mg_step_result s = mg_trainer_step(&tr);
        r->loss[k] = s.loss;
        r->norm[k] = s.grad_norm;
        r->scale[k] = s.loss_scale;
        r->skipped += s.skipped;
    }
    /* the fp32 (master) weights: the whole flat buffer, or this rank's sharded pieces */
    r->n_w = tr.opt.master ? tr.opt.n : tr.model.n_elems;
    r->n_mom = tr.opt.n;
    r->w = gpt_run_host(&tr.ctx, tr.opt.master ? tr.opt.master : tr.model.param_buf, r->n_w);
    r->m = gpt_run_host(&tr.ctx, tr.opt.m, r->n_mom);
    r->v = gpt_run_host(&tr.ctx, tr.opt.v, r->n_mom);
    mg_trainer_free(&tr);
}
static inline int gpt_run_same(const gpt_run *a, const gpt_run *b) {
    size_t steps = sizeof(double) * (size_t)a->steps, w = sizeof(float) * (size_t)a->n_w;
    size_t mom = sizeof(float) * (size_t)a->n_mom;
    return a->steps == b->steps && a->n_w == b->n_w && a->n_mom == b->n_mom &&
           !memcmp(a->loss, b->loss, steps) && !memcmp(a->norm, b->norm, steps) &&
           !memcmp(a->scale, b->scale, steps) && a->skipped == b->skipped &&
           a->loss[a->steps - 1] == a->loss[a->steps - 1] && !memcmp(a->w, b->w, w) &&
           !memcmp(a->m, b->m, mom) && !memcmp(a->v, b->v, mom);
}
static inline void gpt_run_free(gpt_run *r) {
    free(r->w);
    free(r->m);
    free(r->v);
}
/* main() of a command-line test in two parts: check_program runs build/gpt_train itself under
   its own mpirun, so it runs only when this test was launched alone (not by mpirun) and only in
   the plain cc flavour; check_library then runs on every rank of the runner's job. */
static inline int gpt_cli_main(int *argc, char ***argv, mg_comm *comm, int *world,
                               void (*check_program)(void), void (*check_library)(void)) {
    int alone = getenv("OMPI_COMM_WORLD_SIZE") == NULL && getenv("PMI_SIZE") == NULL;
#if !defined(__CUDACC__) && !defined(__SANITIZE_ADDRESS__)
    if (alone) check_program();
#else
    (void)alone;
    (void)check_program;
#endif
    mg_comm_init(comm, argc, argv);
    *world = comm->world_size;
    mg_test_quiet = comm->world_rank != 0;
    check_library();
    mg_comm_finalize(comm);
    return mg_test_summary();
}

/* Worst relative error of par's fp32 parameters (gathered over its tensor group; a sharded
   master must have been gathered: mg_adamw_gather_master) against ser's, per tensor against
   its RMS, GPT-2's key bias left out (its gradient is exactly zero); *sum: a checksum of the
   gathered weights (equal on every replica iff they are bit-identical). Collective over par's
   tensor group.                                                                             */
static inline double gpt_compare_weights(mg_gpt *par, mg_gpt *ser, uint64_t *sum) {
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
        mg_gpt_shard_to_global(par, i, mg_gpt_fp32_params(par), got);    /* collective */
        mg_gpt_shard_to_global(ser, j, mg_gpt_fp32_params(ser), want);
        n = d->kind == MG_WTE || d->kind == MG_OUT_W ? (int64_t)par->cfg.vocab_size * cols
                                                     : rows_par * cols;
        for (r = 0; r < n * 4; r++) *sum = (*sum ^ bytes[r]) * 1099511628211ull;
        if (d->kind == MG_QKV_B && mg_gpt_is_gpt2(&par->cfg)) {
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
/* n training steps of tr, recording each step's loss and gradient norm. */
static inline void gpt_train_steps(mg_trainer *tr, int n, float *loss, float *norm) {
    int k;
    for (k = 0; k < n; k++) {
        mg_step_result r = mg_trainer_step(tr);
        loss[k] = (float)r.loss;
        norm[k] = (float)r.grad_norm;
    }
}
#ifdef MG_USE_MPI
/* The maximum of x over the job (nan counts as huge: a failure anywhere fails everywhere). */
static inline double gpt_agree_max(double x) {
    double all = x;
    if (!(x == x)) x = 1e300;
    MPI_Allreduce(&x, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}
/* x equal on every rank of the same pipeline stage (the gathered weights of one stage are
   the same on all its tensor-parallel ranks and on every replica).                          */
static inline int gpt_same_on_stage(const mg_comm *comm, uint64_t x) {
    int world = comm->world_size, r, q, ok = 1;
    unsigned long long mine[2], *all = (unsigned long long *)malloc(16 * (size_t)world);
    mine[0] = (unsigned long long)comm->topo.pp_rank;
    mine[1] = x;
    MPI_Allgather(mine, 2, MPI_UNSIGNED_LONG_LONG, all, 2, MPI_UNSIGNED_LONG_LONG,
                  MPI_COMM_WORLD);
    for (r = 0; r < world; r++)
        for (q = 0; q < world; q++)
            if (all[2 * r] == all[2 * q] && all[2 * r + 1] != all[2 * q + 1]) ok = 0;
    free(all);
    return ok;
}
#endif
#endif
