// mg-test: ranks=1,2,4 timeout=180
/* test_pp_io.c — the Hugging Face export and text generation of a pipeline-parallel model
   (--export-hf, --sample-tokens) equal the serial run's, on every layout of the table whose
   t·p·d is the launched world (p = 2 or 4, v = 2, t = 2 × p = 2, p = 2 × d = 2 with the
   distributed optimizer; 4 layers, so p = 2 v = 2 puts one layer on each virtual stage).
   The serial reference is the same trainer without communication, run on rank 0 only (it
   writes its own files).
     weights the serial run trained: the layout starts from the serial run's export
       (--init-from, --train-iters 0), so it holds exactly the serial weights: its export must
       be byte-identical (model.safetensors and config.json) and its sample exactly the serial
       run's text;
     the same training: the layout trains the same ITERS iterations from the same seed; its
       export must match the serial export within 1e-5 (max |got − want| over max(|want|,
       RMS of the tensor)). Not bit for bit: the tied word embedding's gradient is summed over
       the first and last stage in another order than the serial run's, and tensor
       parallelism splits the sums of every layer, so the weights differ by fp32 rounding.
       The key part of each QKV bias is left out (gpt_mask_key_bias says why: its true
       gradient is exactly zero, and Adam turns the rounding noise into lr-sized steps).
   From the 1-rank run (cc flavour, launched alone), the program itself: build/gpt_train with
   --train-iters 0 --export-hf --sample-tokens under mpirun -np 2 (p = 2, v = 2) and -np 4
   (t = 2 × p = 2) exits with status 0, writes files byte-identical to the 1-rank run's and
   prints the same sample.                                                                 */
#include "gpt_test_util.h"

#define ITERS 6
#define SAMPLE 24                /* tokens generated                                          */

static mg_comm comm;
static int world;
static char tmp[256];

typedef struct io_case {
    int t, p, d;                 /* the layout on t·p·d ranks                                 */
    const char *flags;
} io_case;
static const io_case cases[] = {
    {1, 2, 1, "--pipeline-model-parallel-size 2"},
    {1, 2, 1, "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"},
    {2, 2, 1, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"},
    {2, 2, 1, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
              "--num-layers-per-virtual-pipeline-stage 1 --sequence-parallel"},
    {1, 2, 2, "--pipeline-model-parallel-size 2 --use-distributed-optimizer"},
    {1, 4, 1, "--pipeline-model-parallel-size 4"},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* 4 layers, hidden 16, 2 heads, 8 tokens; test_pp's run (global batch 16 = 8 microbatches of
   2, warm-up, clipping: with 4 sequences per batch a t = 2 run drifts from the serial one by
   2.6e-5 after 3 iterations, pipeline or not); a validation part, whose first sample is the
   prompt. */
static void base_line(char *out, size_t cap, const char *dir) {
    snprintf(out, cap, "--data-path %s/docs --vocab-size 37 --num-layers 4 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --micro-batch-size 2 --global-batch-size 16 "
             "--lr 3e-3 --lr-warmup-iters 2 --lr-decay-style cosine --clip-grad 0.5 --split 8,2,0 "
             "--eval-iters 1 --eval-interval 1000 --log-interval 1000 ",
             dir);
}

/* The sample mg_trainer_generate prints (on rank 0; empty elsewhere), malloc'ed. */
static char *sample_text(mg_trainer *tr) {
    FILE *f = comm.world_rank == 0 || !tr->comm ? tmpfile() : NULL;
    char *text = (char *)calloc(8192, 1);
    mg_trainer_generate(tr, SAMPLE, f);
    if (f) {
        size_t n;
        rewind(f);
        n = fread(text, 1, 8191, f);
        text[n] = 0;
        fclose(f);
    }
    return text;
}

static int same_file(const char *a, const char *b) {
    long na = -1, nb = -2;
    void *x = mg_test_read_file(a, &na), *y = mg_test_read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, (size_t)na);
    free(x);
    free(y);
    return same;
}

/* Worst error of the export in dir against the serial one, tensor by tensor (the key part
   of the QKV biases left out); inf if a tensor is missing or shaped otherwise.           */
static double export_err(const char *dir, const char *ref_dir, char *worst_name, size_t cap) {
    char pa[512], pb[512], err[MG_ERRLEN];
    mg_st_file got, want;
    double worst = 0;
    int i;
    snprintf(pa, sizeof pa, "%s/model.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/model.safetensors", ref_dir);
    if (mg_st_open(pa, &got, err, sizeof err)) { snprintf(worst_name, cap, "%s", err); return INFINITY; }
    if (mg_st_open(pb, &want, err, sizeof err)) {
        mg_st_close(&got);
        snprintf(worst_name, cap, "%s", err);
        return INFINITY;
    }
    for (i = 0; i < want.n_tensors; i++) {
        const mg_st_tensor *w = &want.tensors[i], *g = mg_st_find(&got, w->name);
        int64_t n = w->numel, k, C = n / 3;
        float *a, *b;
        double ss = 0, e;
        if (!g || g->numel != n || g->dtype != MG_ST_F32 || w->dtype != MG_ST_F32) {
            snprintf(worst_name, cap, "%s", w->name);
            worst = INFINITY;
            continue;
        }
        a = (float *)malloc(sizeof(float) * (size_t)n);
        b = (float *)malloc(sizeof(float) * (size_t)n);
        memcpy(a, g->data, sizeof(float) * (size_t)n);
        memcpy(b, w->data, sizeof(float) * (size_t)n);
        if (strstr(w->name, "attn.c_attn.bias"))     /* [q | k | v]: the key part is [C, 2C) */
            for (k = C; k < 2 * C; k++) a[k] = b[k] = 0;
        for (k = 0; k < n; k++) ss += (double)b[k] * b[k];
        e = mg_test_max_rel(a, b, (long)n, sqrt(ss / (double)(n ? n : 1)) + 1e-30);
        if (!(e <= worst)) {
            worst = e;
            snprintf(worst_name, cap, "%s", w->name);
        }
        free(a);
        free(b);
    }
    mg_st_close(&got);
    mg_st_close(&want);
    return worst;
}

/* Sets up line over comm (NULL: serial), trains it to the end, exports to dir, samples. */
static char *run(const char *line, mg_comm *c, const char *dir) {
    mg_trainer tr;
    char err[MG_ERRLEN], *text;
    gpt_trainer_on(&tr, line, c);
    while (tr.iteration < tr.args.train_iters) mg_trainer_step(&tr);
    if (mg_gpt_export_hf(&tr.model, dir, err, sizeof err)) {
        fprintf(stderr, "rank %d: export to %s: %s\n", c ? c->world_rank : 0, dir, err);
        exit(1);
    }
    text = sample_text(&tr);
    mg_trainer_free(&tr);
    return text;
}

static void check_library(void) {
    char base[1024], line[2048], ref[400], dir[400], worst[MG_ERRLEN], name[400];
    char *ref_sample = NULL;
    int i;
    if (world == 1) return;                    /* the layouts need 2 or 4 ranks */
    memset(tmp, 0, sizeof tmp);
    if (comm.world_rank == 0) {
        char prefix[300];
        gpt_tmpdir(tmp, sizeof tmp, "pp_io");
        snprintf(prefix, sizeof prefix, "%s/docs", tmp);
        gpt_make_docs(prefix);
    }
    MPI_Bcast(tmp, (int)sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
    base_line(base, sizeof base, tmp);
    snprintf(ref, sizeof ref, "%s/serial", tmp);
    if (comm.world_rank == 0) {                /* the serial reference: trained, exported */
        snprintf(line, sizeof line, "%s--train-iters %d", base, ITERS);
        ref_sample = run(line, NULL, ref);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < N_CASES; i++) {
        const io_case *k = &cases[i];
        char *text;
        int ok;
        double e = 0;
        if (k->t * k->p * k->d != world) continue;
        /* the serial weights: export bit for bit, the same sample */
        snprintf(dir, sizeof dir, "%s/case%d_loaded", tmp, i);
        snprintf(line, sizeof line, "%s--train-iters 0 --init-from %s %s", base, ref, k->flags);
        text = run(line, &comm, dir);
        if (comm.world_rank == 0) {
            char a[500], b[500];
            snprintf(a, sizeof a, "%s/model.safetensors", dir);
            snprintf(b, sizeof b, "%s/model.safetensors", ref);
            ok = same_file(a, b);
            snprintf(a, sizeof a, "%s/config.json", dir);
            snprintf(b, sizeof b, "%s/config.json", ref);
            ok = ok && same_file(a, b);
        } else ok = 1;
        snprintf(name, sizeof name, "pp io (%d ranks): %s, the serial run's weights: export "
                 "byte-identical to the serial export", world, k->flags);
        mg_test_report(mg_test_agree(ok), name, "%s", "");
        ok = comm.world_rank != 0 || (strstr(text, "----- sample") && !strcmp(text, ref_sample));
        snprintf(name, sizeof name, "pp io (%d ranks): %s, the serial run's weights: sample = "
                 "the serial run's", world, k->flags);
        mg_test_report(mg_test_agree(ok), name, "%s", ok ? "" : text);
        free(text);
        /* the same 3 iterations from the seed: the export within 1e-5 of the serial one */
        snprintf(dir, sizeof dir, "%s/case%d_trained", tmp, i);
        snprintf(line, sizeof line, "%s--train-iters %d %s", base, ITERS, k->flags);
        free(run(line, &comm, dir));
        worst[0] = 0;
        if (comm.world_rank == 0) e = export_err(dir, ref, worst, sizeof worst);
        snprintf(name, sizeof name, "pp io (%d ranks): %s, %d iterations from the seed: export "
                 "= the serial export (rel 1e-5)", world, k->flags, ITERS);
        mg_test_report(mg_test_agree(e <= 1e-5), name, "max rel err %.3g (%s)", e, worst);
    }
    free(ref_sample);
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm.world_rank == 0) gpt_rmtree(tmp);
}

/* The program under mpirun: the sample block of its output, its error lines. */
typedef struct { char sample[8192]; int in_sample; } prog_out;
static void keep_sample(const char *line, void *user) {
    prog_out *o = (prog_out *)user;
    if (!strncmp(line, "----- sample", 12)) o->in_sample = 1;
    if (o->in_sample && strlen(o->sample) + strlen(line) < sizeof o->sample)
        strcat(o->sample, line);
    if (!strcmp(line, "-----\n")) o->in_sample = 0;
}
static void check_program(void) {
    static const struct { int np; const char *flags; } layouts[] = {
        {2, "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"},
        {4, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"},
    };
    char dir[256], base[1024], args[2048], first[1024], name[400], a[400], b[400];
    prog_out serial, out;
    int status, n, i;
    if (access("build/gpt_train", X_OK) != 0) {
        mg_test_report(0, "pp io: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    gpt_tmpdir(dir, sizeof dir, "pp_io_prog");
    snprintf(a, sizeof a, "%s/docs", dir);
    gpt_make_docs(a);
    base_line(base, sizeof base, dir);
    memset(&serial, 0, sizeof serial);
    snprintf(args, sizeof args, "%s--device cpu --train-iters 0 --sample-tokens %d --export-hf "
             "%s/serial", base, SAMPLE, dir);
    n = gpt_mpirun_train(1, args, &status, first, sizeof first, keep_sample, &serial);
    CHECK(n == 0 && status == 0 && strstr(serial.sample, "-----\n"),
          "pp io: gpt_train on 1 rank exports and samples");
    for (i = 0; i < 2; i++) {
        int same;
        memset(&out, 0, sizeof out);
        snprintf(args, sizeof args, "%s--device cpu --train-iters 0 --sample-tokens %d "
                 "--export-hf %s/layout%d %s", base, SAMPLE, dir, i, layouts[i].flags);
        n = gpt_mpirun_train(layouts[i].np, args, &status, first, sizeof first, keep_sample,
                             &out);
        snprintf(a, sizeof a, "%s/serial/model.safetensors", dir);
        snprintf(b, sizeof b, "%s/layout%d/model.safetensors", dir, i);
        same = same_file(a, b);
        snprintf(a, sizeof a, "%s/serial/config.json", dir);
        snprintf(b, sizeof b, "%s/layout%d/config.json", dir, i);
        same = same && same_file(a, b);
        snprintf(name, sizeof name, "pp io: mpirun -np %d gpt_train %s: status 0, export "
                 "byte-identical to 1 rank's, the same sample", layouts[i].np, layouts[i].flags);
        mg_test_report(n == 0 && status == 0 && same && out.sample[0] &&
                       !strcmp(out.sample, serial.sample), name, "status %d, %d error lines "
                       "(%s), export %s, sample '%s' vs '%s'", status, n, first,
                       same ? "same" : "differs", out.sample, serial.sample);
    }
    gpt_rmtree(dir);
}

int main(int argc, char **argv) {
    return gpt_cli_main(&argc, &argv, &comm, &world, check_program, check_library);
}
