// mg-test: ranks=1,2,4 timeout=300
/* test_blend.c — blended data, Megatron-LM's way (issue 17, item 5): mg_data.h's mg_blend and
   gpt_train's --data-path W1 P1 W2 P2 / --train-data-path / --valid-data-path /
   --test-data-path.
     - mg_blend_indices is helpers.cpp's build_blending_indices: for weights 0.7/0.3 the first
       ten datasets are 0 1 0 0 1 0 0 1 0 0 (worked by hand in the comment below), and for
       several weight sets over 20,000 samples every prefix of i samples has each dataset's
       count within one sample of w·i, and dataset_sample_index counts each dataset's samples
       0, 1, 2, … in order;
     - mg_blend_parse: one prefix alone is unweighted; pairs are normalised; an odd word count,
       a word that is not a number, a zero weight are refused with one line;
     - several prefixes without weights (Megatron-LM's blend by size): each dataset's part one
       epoch, weights = its samples / all their samples, the blend min(N, all) samples and
       the indices of those weights; a run asking for more training samples than one epoch of
       each is one error line;
     - mg_blend_init asks each dataset's sampler for ceil(ceil(N·w)·1.005) samples (Megatron's
       surplus), and blended sample i is exactly sample dataset_sample_index[i] of dataset
       dataset_index[i];
     - the trainer on --data-path 0.7 A 0.3 B: the training blend of the run's N = iters·B
       samples has realised fractions within one sample of the weights at every prefix;
       a dataset of one document in the blend skips validation with one note line;
       --train/valid/test-data-path runs (validation and test losses finite) and the
       exclusions and bad inputs are one-line errors;
     - resume exact: 6 iterations, save, load, 6 more = 12 uninterrupted, losses bit for bit;
     - on 2 ranks: the blended run under (t=2), (d=2) and (p=2) gives the serial run's losses
       to 1e-5 relative; on 4 ranks under (t=2, p=2), (t=2, d=2) with the distributed
       optimizer and (p=2, d=2).                                                                      */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;
static char dir[256], pa[300], pb[300];

#define MODEL "--vocab-size 37 --num-layers 2 --hidden-size 32 --num-attention-heads 4 " \
    "--seq-length 16 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3 --seed 7 "   \
    "--log-interval 1 "

/* Two indexed datasets with different token patterns: A 60 documents of 30 tokens (ids < 29),
   B 40 documents of 50 tokens (ids < 37).                                                   */
static void make_data(void) {
    mg_idx_writer w;
    char err[MG_ERRLEN];
    int32_t doc[50];
    int d, i, k;
    gpt_tmpdir(dir, sizeof dir, "blend");
    snprintf(pa, sizeof pa, "%s/A", dir);
    snprintf(pb, sizeof pb, "%s/B", dir);
    for (k = 0; k < 2; k++) {
        int n_docs = k ? 40 : 60, len = k ? 50 : 30;
        if (mg_idx_writer_begin(&w, k ? pb : pa, MG_IDX_U16, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
        for (d = 0; d < n_docs; d++) {
            for (i = 0; i < len; i++)
                doc[i] = k ? (d * 11 + 2 * i * i + 1) % 37 : (d * 5 + i * 3) % 29;
            mg_idx_writer_add(&w, doc, len, err, sizeof err);
            mg_idx_writer_end_document(&w);
        }
        if (mg_idx_writer_finish(&w, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    }
}

/* Every prefix of the indices: each dataset's count within one sample of w·i, and its
   samples numbered 0, 1, 2, … in order. Returns the worst |count − w·i|.                   */
static double worst_prefix_error(const double *w, int n, const int16_t *di, const int64_t *dsi,
                                 int64_t size, int *ordered) {
    int64_t count[8] = {0}, i;
    double worst = 0;
    int k;
    *ordered = 1;
    for (i = 0; i < size; i++) {
        if (dsi[i] != count[di[i]]) *ordered = 0;
        count[di[i]]++;
        for (k = 0; k < n; k++) {
            double e = fabs((double)count[k] - w[k] * (double)(i + 1));
            if (e > worst) worst = e;
        }
    }
    return worst;
}

static void check_indices(void) {
    /* w = (0.7, 0.3), error w·max(i, 1) − count:
       i=0: .7, .3 → 0;  i=1: −.3, .3 → 1;  i=2: .4, −.4 → 0;  i=3: .1, −.1 → 0;
       i=4: −.2, .2 → 1;  i=5: .5 → 0;  i=6: .2 → 0;  i=7: −.1, .1 → 1;  i=8: .6 → 0;  i=9: .3 → 0 */
    static const int16_t want[10] = {0, 1, 0, 0, 1, 0, 0, 1, 0, 0};
    static const double sets[4][4] = {{0.7, 0.3}, {0.5, 0.25, 0.25}, {0.1, 0.2, 0.3, 0.4},
                                      {0.999, 0.001}};
    static const int ns[4] = {2, 3, 4, 2};
    enum { N = 20000 };
    int16_t *di = (int16_t *)malloc(sizeof(int16_t) * N);
    int64_t *dsi = (int64_t *)malloc(sizeof(int64_t) * N);
    int s, ordered;
    char name[160];
    mg_blend_indices(sets[0], 2, 10, di, dsi);
    mg_test_report(!memcmp(di, want, sizeof want), "blend: indices of 0.7/0.3 = 0 1 0 0 1 0 0 1 "
                   "0 0 (helpers.cpp's rule, worked by hand)", "%d %d %d %d %d %d %d %d %d %d",
                   di[0], di[1], di[2], di[3], di[4], di[5], di[6], di[7], di[8], di[9]);
    for (s = 0; s < 4; s++) {
        double e;
        mg_blend_indices(sets[s], ns[s], N, di, dsi);
        e = worst_prefix_error(sets[s], ns[s], di, dsi, N, &ordered);
        snprintf(name, sizeof name, "blend: %d datasets (%g, %g, …), every prefix of %d samples "
                 "within one sample of the weights", ns[s], sets[s][0], sets[s][1], N);
        mg_test_report(e <= 1.0 && ordered, name, "worst |count - w*i| %.4f, in order %d", e,
                       ordered);
    }
    free(di);
    free(dsi);
}

static void check_parse(void) {
    const char *prefixes[4];
    double w[4];
    int n, weighted, rc;
    char err[MG_ERRLEN];
    const char *one[1] = {"A"}, *two[4] = {"3", "A", "1", "B"}, *odd[3] = {"0.7", "A", "B"};
    const char *word[4] = {"0.7", "A", "x", "B"}, *zero[4] = {"0.7", "A", "0", "B"};
    rc = mg_blend_parse("--data-path", one, 1, prefixes, w, 4, &n, &weighted, err, sizeof err);
    mg_test_report(rc == 0 && n == 1 && !weighted && !strcmp(prefixes[0], "A"),
                   "blend: one prefix alone is one unweighted dataset", "rc %d n %d", rc, n);
    rc = mg_blend_parse("--data-path", two, 4, prefixes, w, 4, &n, &weighted, err, sizeof err);
    mg_test_report(rc == 0 && n == 2 && weighted && w[0] == 0.75 && w[1] == 0.25 &&
                   !strcmp(prefixes[1], "B"), "blend: 3 A 1 B -> weights 0.75, 0.25",
                   "rc %d n %d w %g %g", rc, n, w[0], w[1]);
    rc = mg_blend_parse("--data-path", odd, 3, prefixes, w, 4, &n, &weighted, err, sizeof err);
    mg_test_report(rc && strstr(err, "pairs WEIGHT PREFIX") != NULL, "blend: odd word count "
                   "refused", "%s", err);
    rc = mg_blend_parse("--data-path", word, 4, prefixes, w, 4, &n, &weighted, err, sizeof err);
    mg_test_report(rc && strstr(err, "'x' (word 3) is not a weight") != NULL,
                   "blend: a word that is not a weight refused", "%s", err);
    rc = mg_blend_parse("--data-path", zero, 4, prefixes, w, 4, &n, &weighted, err, sizeof err);
    mg_test_report(rc && strstr(err, "must be positive") != NULL, "blend: zero weight refused",
                   "%s", err);
}

/* mg_blend_init over A and B (shuffled, the --split train part): per-dataset sizes with the
   surplus, and each blended sample is its dataset's sample, token for token.               */
static void check_blend_samples(void) {
    mg_dataset ds[2];
    const mg_dataset *dp[2] = {&ds[0], &ds[1]};
    double w[2] = {0.7, 0.3};
    mg_sampler_desc d;
    mg_blend b;
    mg_sampler ref[2];
    int have_ref[2] = {0, 0};
    char err[MG_ERRLEN];
    int32_t got[17], want[17];
    int64_t i, N = 200;
    int k, ok = 1, sizes_ok = 1;
    if (mg_dataset_open(pa, &ds[0], err, sizeof err) || mg_dataset_open(pb, &ds[1], err, sizeof err)) {
        mg_test_report(0, "blend: open the test datasets", "%s", err);
        return;
    }
    memset(&d, 0, sizeof d);
    d.split = "90,10,0";
    d.part = MG_SPLIT_TRAIN;
    d.seq_len = 16;
    d.n_samples = N;
    d.seed = 1234;
    d.order = MG_ORDER_SHUFFLED;
    if (mg_blend_init(&b, dp, w, 2, 1, &d, err, sizeof err)) {
        mg_test_report(0, "blend: mg_blend_init", "%s", err);
        mg_dataset_close(&ds[0]);
        mg_dataset_close(&ds[1]);
        return;
    }
    for (k = 0; k < 2; k++) {   /* each dataset's own sampler, asked for Megatron's size */
        mg_sampler_desc dk = d;
        dk.n_samples = (int64_t)ceil(ceil((double)N * w[k]) * 1.005);   /* 141, 61 */
        sizes_ok &= dk.n_samples == (k ? 61 : 141);
        have_ref[k] = mg_sampler_init(&ref[k], dp[k], &dk, err, sizeof err) == 0;
        sizes_ok &= have_ref[k] && ref[k].n_samples == b.smp[k].n_samples;
    }
    for (i = 0; i < N && sizes_ok; i++) {
        k = b.dataset_index[i];
        if (mg_blend_get(&b, i, got, err, sizeof err) ||
            mg_sampler_get(&ref[k], b.dataset_sample_index[i], want, err, sizeof err) ||
            memcmp(got, want, sizeof got))
            ok = 0;
    }
    mg_test_report(sizes_ok, "blend: each dataset's sampler asked for ceil(ceil(N*w)*1.005) "
                   "samples (N = 200: 141 and 61)", "A %lld, B %lld available",
                   (long long)b.smp[0].n_samples, (long long)b.smp[1].n_samples);
    mg_test_report(ok && sizes_ok, "blend: sample i = sample dataset_sample_index[i] of "
                   "dataset dataset_index[i], 200 samples token for token", "%s", ok ? "" : err);
    for (k = 0; k < 2; k++)
        if (have_ref[k]) mg_sampler_free(&ref[k]);
    mg_blend_free(&b);
    mg_dataset_close(&ds[0]);
    mg_dataset_close(&ds[1]);
}

/* The trainer's training blend for --data-path 0.7 A 0.3 B over the run's N = 30·8 samples:
   realised fractions within one sample of the weights at every prefix; the per-split flags
   run; bad lines fail with one line.                                                        */
static void check_trainer_blend(void) {
    mg_trainer tr;
    char line[2048];
    double e;
    int ordered;
    snprintf(line, sizeof line, MODEL "--data-path 0.7 %s 0.3 %s --train-iters 30 "
             "--eval-iters 1 --eval-interval 10", pa, pb);
    gpt_trainer_on(&tr, line, NULL);
    e = worst_prefix_error(tr.train_data.weights, 2, tr.train_data.dataset_index,
                           tr.train_data.dataset_sample_index, tr.train_data.n_samples, &ordered);
    mg_test_report(tr.train_data.n == 2 && tr.train_data.n_samples == 240 && e <= 1.0 &&
                   tr.has_valid && tr.valid_data.n == 2, "blend: gpt_train --data-path 0.7 A "
                   "0.3 B: 240 training samples, every prefix within one sample of 0.7/0.3; "
                   "validation blended too", "n %d, %lld samples, worst %.3f",
                   tr.train_data.n, (long long)tr.train_data.n_samples, e);
    mg_trainer_free(&tr);

    snprintf(line, sizeof line, MODEL "--train-data-path 0.5 %s 0.5 %s --valid-data-path %s "
             "--test-data-path 1 %s --train-iters 4 --eval-iters 2", pa, pb, pb, pa);
    gpt_trainer_on(&tr, line, NULL);
    {
        double v, t;
        int k;
        for (k = 0; k < 4; k++) mg_trainer_step(&tr);
        v = mg_trainer_evaluate(&tr, NULL);
        t = mg_trainer_test(&tr, NULL);
        /* --train-data-path uses all of each dataset: A's 60 documents, B's 40 */
        mg_test_report(isfinite(v) && isfinite(t) && tr.train_data.smp[0].seq_end == 60 &&
                       tr.train_data.smp[1].seq_end == 40 && tr.valid_data.smp[0].seq_begin == 0
                       && tr.valid_data.smp[0].seq_end == 40 && !tr.valid_data.weighted &&
                       tr.test_data.weighted, "blend: --train-data-path blend, "
                       "--valid-data-path, --test-data-path: each dataset used whole; "
                       "validation and test losses", "valid %.4f test %.4f", v, t);
    }
    mg_trainer_free(&tr);

    snprintf(line, sizeof line, MODEL "--data-path %s --train-data-path %s --train-iters 2", pa,
             pb);
    gpt_expect_error(NULL, "blend", "--data-path with --train-data-path refused", line,
                     "give either --data-path");
    snprintf(line, sizeof line, MODEL "--train-data-path %s --split 9,1,0 --train-iters 2", pa);
    gpt_expect_error(NULL, "blend", "--split with --train-data-path refused", line,
                     "--split applies to --data-path");
    snprintf(line, sizeof line, MODEL "--data-path 0.7 %s %s --train-iters 2", pa, pb);
    gpt_expect_error(NULL, "blend", "--data-path W A B (odd) refused", line,
                     "--data-path: 3 words; a blend is pairs WEIGHT PREFIX");
    snprintf(line, sizeof line, MODEL "--data-path 0.7 %s -1 %s --train-iters 2", pa, pb);
    gpt_expect_error(NULL, "blend", "negative weight refused", line, "must be positive");
    snprintf(line, sizeof line, "--vocab-size 30 --num-layers 2 --hidden-size 32 "
             "--num-attention-heads 4 --seq-length 16 --global-batch-size 8 --lr 1e-3 "
             "--data-path 0.5 %s 0.5 %s --train-iters 2", pa, pb);
    gpt_expect_error(NULL, "blend", "a blended dataset with ids beyond --vocab-size names it",
                     line, "B: token id 36 is outside the vocabulary");
    snprintf(line, sizeof line, MODEL "--valid-data-path %s --train-iters 2", pa);
    gpt_expect_error(NULL, "blend", "--valid-data-path without --train-data-path refused", line,
                     "--valid-data-path needs --train-data-path");
}

/* --data-path A B: no weights, blended by size (BlendedMegatronDatasetBuilder with weights
   None): one epoch of each dataset's training part, weights = their sample counts over the
   sum, the blend the run's N samples (N <= the sum) with the blending indices of those
   weights; a run of more samples than the sum is refused.                                   */
static void check_unweighted_blend(void) {
    const char *prefixes[4];
    const char *words[2];
    double w[4];
    int n, weighted, rc, ok, k;
    char err[MG_ERRLEN], line[2048];
    mg_trainer tr;
    words[0] = pa;
    words[1] = pb;
    rc = mg_blend_parse("--data-path", words, 2, prefixes, w, 4, &n, &weighted, err, sizeof err);
    mg_test_report(rc == 0 && n == 2 && !weighted && prefixes[1] == pb, "blend: A B (no "
                   "weights) -> two datasets, blended by size", "rc %d n %d weighted %d", rc, n,
                   weighted);
    snprintf(line, sizeof line, MODEL "--data-path %s %s --train-iters 28 --eval-iters 1 "
             "--eval-interval 14", pa, pb);
    gpt_trainer_on(&tr, line, NULL);
    {
        const mg_blend *b = &tr.train_data;
        int64_t total = b->smp[0].n_samples + b->smp[1].n_samples, i;
        int16_t *di = (int16_t *)malloc(224 * sizeof(int16_t));
        int64_t *dsi = (int64_t *)malloc(224 * sizeof(int64_t));
        double want[2];
        for (k = 0; k < 2; k++) want[k] = (double)b->smp[k].n_samples / (double)total;
        ok = b->n == 2 && b->weighted && b->n_samples == 224 && total >= 224 &&
             b->smp[0].num_epochs == 1 && b->smp[1].num_epochs == 1 &&
             b->weights[0] == want[0] && b->weights[1] == want[1] &&
             mg_blend_indices(want, 2, 224, di, dsi) == 0;
        for (i = 0; ok && i < 224; i++)
            ok = di[i] == b->dataset_index[i] && dsi[i] == b->dataset_sample_index[i];
        mg_test_report(ok && tr.has_valid && tr.valid_data.n == 2, "blend: gpt_train "
                       "--data-path A B: one epoch of each, weights their shares, 224 training "
                       "samples blended by them; validation blended too", "%lld + %lld samples, "
                       "weights %.4f %.4f", (long long)b->smp[0].n_samples,
                       (long long)b->smp[1].n_samples, b->weights[0], b->weights[1]);
        free(di);
        free(dsi);
    }
    mg_trainer_free(&tr);
    snprintf(line, sizeof line, MODEL "--data-path %s %s --train-iters 30", pa, pb);
    gpt_expect_error(NULL, "blend", "--data-path A B asking for more than one epoch of each",
                     line, "datasets without weights are blended by their sizes, one epoch of "
                     "each: 229 training samples, fewer than the 240 the run trains on");
}

/* A blend whose second dataset is one document: under the default --split 969,30,1 that
   dataset gives validation no document, so the run trains without validation (as a single
   small dataset does, test_cli): setup succeeds, has_valid is 0, one note line names the
   dataset and what would give a validation set, and mg_trainer_evaluate returns NAN.      */
static void check_blend_no_validation(void) {
    mg_idx_writer w;
    mg_trainer tr;
    char line[2048], pc[300], err[MG_ERRLEN];
    int32_t doc[100];
    int i, rc;
    double loss;
    snprintf(pc, sizeof pc, "%s/C", dir);
    for (i = 0; i < 100; i++) doc[i] = (i * 7) % 37;
    rc = mg_idx_writer_begin(&w, pc, MG_IDX_U16, err, sizeof err) ||
         mg_idx_writer_add(&w, doc, 100, err, sizeof err);
    if (!rc) {
        mg_idx_writer_end_document(&w);
        rc = mg_idx_writer_finish(&w, err, sizeof err);
    }
    if (rc) { fprintf(stderr, "%s\n", err); exit(1); }
    snprintf(line, sizeof line, MODEL "--data-path 0.5 %s 0.5 %s --train-iters 2 "
             "--eval-iters 1 --eval-interval 1", pa, pc);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    if (rc) {
        mg_test_report(0, "blend: a one-document dataset in the blend: trains", "%s", err);
        return;
    }
    mg_trainer_step(&tr);
    loss = mg_trainer_evaluate(&tr, NULL);
    mg_test_report(!tr.has_valid && isnan(loss) && tr.iteration == 1 &&
                   strstr(tr.valid_note, "validation skipped: --split 969,30,1 gives the "
                          "validation part none of the 1 document of ") &&
                   strstr(tr.valid_note, "/C; a validation set needs 17 or more documents") &&
                   !strchr(tr.valid_note, '\n'), "blend: a dataset of one document in a "
                   "--data-path blend: trains, validation skipped, one line naming it", "%s",
                   tr.valid_note);
    mg_trainer_free(&tr);
}

/* 12 uninterrupted iterations against 6, a checkpoint, and 6 more from it (one rank each,
   this rank's own directory): the resumed run's losses are the same bits.                  */
static void check_resume(void) {
    mg_trainer tr;
    char line[2048], base[1200], err[MG_ERRLEN];
    double full[12], resumed[6];
    int k, same = 1, rc;
    snprintf(base, sizeof base, MODEL "--data-path 0.6 %s 0.4 %s --train-iters 12 "
             "--eval-iters 0 --lr-warmup-iters 2 --lr-decay-style cosine", pa, pb);
    gpt_trainer_on(&tr, base, NULL);
    for (k = 0; k < 12; k++) full[k] = mg_trainer_step(&tr).loss;
    mg_trainer_free(&tr);
    snprintf(line, sizeof line, "%s --save %s/ck", base, dir);
    gpt_trainer_on(&tr, line, NULL);
    for (k = 0; k < 6; k++) same &= mg_trainer_step(&tr).loss == full[k];
    rc = mg_trainer_save(&tr, tr.args.save, err, sizeof err);
    mg_trainer_free(&tr);
    snprintf(line, sizeof line, "%s --load %s/ck", base, dir);
    gpt_trainer_on(&tr, line, NULL);
    for (k = 0; k < 6; k++) resumed[k] = mg_trainer_step(&tr).loss;
    for (k = 0; k < 6; k++) same &= resumed[k] == full[6 + k];
    mg_test_report(rc == 0 && tr.loaded_iteration == 6 && tr.consumed_samples == 96 && same,
                   "blend: resume exact (6 + save + load + 6 = 12 uninterrupted, losses bit for "
                   "bit)", "save %d, loaded %lld, last %.9g vs %.9g", rc,
                   (long long)tr.loaded_iteration, resumed[5], full[11]);
    mg_trainer_free(&tr);
}

/* 2 or 4 ranks: the blended run under three layouts against the serial one (1e-5
   relative).                                                                              */
static void check_layouts(void) {
    static const char *layouts2[3] = {"--tensor-model-parallel-size 2",
                                      "--tensor-model-parallel-size 1",
                                      "--pipeline-model-parallel-size 2"};
    static const char *names2[3] = {"t=2", "d=2", "p=2"};
    static const char *layouts4[3] = {"--tensor-model-parallel-size 2 "
                                      "--pipeline-model-parallel-size 2",
                                      "--tensor-model-parallel-size 2 "
                                      "--use-distributed-optimizer",
                                      "--pipeline-model-parallel-size 2"};
    static const char *names4[3] = {"t=2 p=2", "t=2 d=2 distopt", "p=2 d=2"};
    const char **layouts = world == 4 ? layouts4 : layouts2, **names = world == 4 ? names4 : names2;
    char line[2048], name[200];
    gpt_run ser, par;
    int i;
    snprintf(line, sizeof line, MODEL "--data-path 0.7 %s 0.3 %s --train-iters 10 "
             "--eval-iters 0", pa, pb);
    gpt_run_train(&ser, line, NULL, 10);
    for (i = 0; i < 3; i++) {
        char pline[2200];
        float a[10], b[10];
        double e;
        int k;
        snprintf(pline, sizeof pline, "%s %s", line, layouts[i]);
        gpt_run_train(&par, pline, &comm, 10);
        for (k = 0; k < 10; k++) { a[k] = (float)par.loss[k]; b[k] = (float)ser.loss[k]; }
        e = mg_test_max_rel(a, b, 10, 0);
        snprintf(name, sizeof name, "blend: 10 blended iterations under %s = serial losses",
                 names[i]);
        mg_test_report(mg_test_agree(e <= 1e-5), name, "max rel %.3g (tol 1e-5)", e);
        gpt_run_free(&par);
    }
    gpt_run_free(&ser);
}

int main(int argc, char **argv) {
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    make_data();                      /* each rank its own copy */
    if (world == 1) {
        check_indices();
        check_parse();
        check_blend_samples();
        check_trainer_blend();
        check_unweighted_blend();
        check_blend_no_validation();
        check_resume();
    } else if (world == 2 || world == 4) {
        check_layouts();
    }
    gpt_rmtree(dir);
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
