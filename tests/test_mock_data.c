// mg-test: ranks=1,2 timeout=300
/* test_mock_data.c — gpt_train --mock-data trains on Megatron-LM's mock dataset, and the
   NullTokenizer gives it Megatron's ids. What test_data proves of the dataset itself (its
   lengths, its GPTDataset indices and samples against numpy and a transcription of
   MockGPTLowLevelDataset, tests/data/data_mock.json) is checked here through the trainer:
     - the trainer's training samples under --mock-data --tokenizer-type NullTokenizer
       --vocab-size 50256 (vocabulary 50257, end of document 50256: GPT-2's numbers), split
       969,30,1, seed 1234, sequence 1024, are the oracle's (case 0), and its validation
       samples under --vocab-size 1000 (ids wrapping at 1001, sequence 256) are case 1's;
     - a run on the mock data in sequential order, with --eod-mask-loss (the tokenizer's end
       of document masks the loss), equals bit for bit a run on an indexed dataset written
       with the same tokens (read through mg_dataset_token) and --eod-token-id 1000 — so the
       tokens, the end-of-document id and the vocabulary reach the model unchanged;
     - sample-based training asks the data for --train-samples samples, as Megatron-LM's
       get_train_valid_test_num_samples does, not for the iterations' whole batches: one
       epoch of the training part holds 193,533 samples of 1024 tokens, so --train-samples
       193535 (48,383 iterations of 4) needs a second epoch where --train-iters 48383
       (193,532 samples) does not;
     - on 2 ranks the mock data under d = 2 and under t = 2 trains like the serial run;
     - the errors: --mock-data without a tokenizer, with --data-path, NullTokenizer without
       --vocab-size or with a vocabulary file.                                              */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;
static char tmpdir[64];

#define MODEL "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --lr 3e-3 --seed 7 "
#define NULL_TOK(V) "--mock-data --tokenizer-type NullTokenizer --vocab-size " #V " "

/* The trainer's samples of one part against an oracle case of data_mock.json.              */
static void check_samples(const char *what, const char *line, int64_t case_no, int part) {
    long n = 0;
    char err[MG_ERRLEN], name[300];
    char *text = (char *)mg_test_read_file("tests/data/data_mock.json", &n);
    mg_json js;
    mg_trainer tr;
    int ok = text && mg_json_parse(&js, text, (size_t)n, err, sizeof err) == 0, checked = 0;
    if (!ok) {
        mg_test_report(0, what, "tests/data/data_mock.json: %s", text ? err : "missing");
        free(text);
        return;
    }
    gpt_setup_or_die(&tr, line, NULL);
    {
        const mg_blend *b = part == 0 ? &tr.train_data : &tr.valid_data;
        int64_t cases = mg_json_get(&js, 0, "cases"), c = cases + 1, samples, t, i, k;
        int32_t *tokens = (int32_t *)malloc((size_t)(tr.cfg.seq_len + 1) * 4);
        for (i = 0; i < case_no; i++) c = js.toks[c].next;
        samples = mg_json_get(&js, c, "samples");
        ok = samples > 0 && b->n_samples > 0;
        for (i = 0, t = samples + 1; ok && i < js.toks[samples].size; i++, t = js.toks[t].next) {
            int64_t u = t + 1, v;
            ok = js.toks[t].size == tr.cfg.seq_len + 1 &&
                 mg_blend_get(b, i, tokens, err, sizeof err) == 0;
            for (k = 0; ok && k <= tr.cfg.seq_len; k++, u = js.toks[u].next)
                ok = mg_json_int(&js, u, &v) == 0 && v == tokens[k];
            checked += ok;
        }
        free(tokens);
    }
    snprintf(name, sizeof name, "mock data: %s", what);
    mg_test_report(ok, name, "%d samples of %d tokens equal Megatron's", checked,
                   tr.cfg.seq_len + 1);
    mg_trainer_free(&tr);
    mg_json_free(&js);
    free(text);
}

/* The mock data's first n tokens as one sequence of an indexed dataset at prefix.          */
static void write_mock_prefix(const char *prefix, int64_t vocab, int64_t eod, int64_t n) {
    mg_dataset ds;
    mg_idx_writer w;
    char err[MG_ERRLEN];
    int32_t *tok = (int32_t *)malloc((size_t)n * 4);
    int64_t i;
    if (mg_dataset_open_mock(&ds, vocab, eod, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    for (i = 0; i < n; i++) tok[i] = (int32_t)mg_dataset_token(&ds, i);
    if (mg_idx_writer_begin(&w, prefix, MG_IDX_U16, err, sizeof err) ||
        mg_idx_writer_add(&w, tok, n, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    mg_idx_writer_end_document(&w);
    if (mg_idx_writer_finish(&w, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    mg_dataset_close(&ds);
    free(tok);
}

/* Sequential mock data = the same tokens from a file, bit for bit, the loss masked at the
   end-of-document id. 24 steps of 4 × 64 tokens read 6145 tokens: the first document (3484
   tokens) ends inside them, so the mask and the next document's ids 1, 2, … take part.   */
static void check_same_as_file(void) {
    char prefix[128], line[2048];
    gpt_run mock, file;
    const char *common = "--data-order sequential --split 1,0,0 --eval-iters 0 --seq-length 64 "
                         "--micro-batch-size 2 --global-batch-size 4 --train-iters 24 "
                         "--eod-mask-loss " MODEL;
    snprintf(prefix, sizeof prefix, "%s/mock_head", tmpdir);
    write_mock_prefix(prefix, 1001, 1000, 24 * 4 * 64 + 1);
    snprintf(line, sizeof line, NULL_TOK(1000) "%s", common);
    gpt_run_train(&mock, line, NULL, 24);
    snprintf(line, sizeof line, "--data-path %s --vocab-size 1001 --eod-token-id 1000 %s", prefix,
             common);
    gpt_run_train(&file, line, NULL, 24);
    mg_test_report(gpt_run_same(&mock, &file), "mock data: 24 steps in sequential order, the "
                   "loss masked at NullTokenizer's end of document, equal a run on the same "
                   "tokens from an indexed dataset (--eod-token-id 1000) bit for bit",
                   "first loss %.6f / %.6f, last %.6f / %.6f", mock.loss[0], file.loss[0],
                   mock.loss[23], file.loss[23]);
    gpt_run_free(&mock);
    gpt_run_free(&file);
}

/* The training part's epochs under --train-samples 193535 and --train-iters 48383.         */
static void check_train_samples_count(void) {
    static const char *const counts[2] = {"--train-samples 193535", "--train-iters 48383"};
    char line[2048], err[MG_ERRLEN];
    int epochs[2] = {0, 0}, iters[2] = {0, 0}, k;
    mg_trainer tr;
    for (k = 0; k < 2; k++) {
        snprintf(line, sizeof line, NULL_TOK(50256) "--seq-length 1024 --max-position-embeddings "
                 "1024 --micro-batch-size 4 --eval-iters 0 --seed 1234 --num-layers 1 "
                 "--hidden-size 16 --num-attention-heads 2 --lr 1e-3 %s", counts[k]);
        if (gpt_setup_line(&tr, line, NULL, err, sizeof err) == 0) {
            epochs[k] = tr.train_data.smp[0].num_epochs;
            iters[k] = (int)tr.args.train_iters;
            mg_trainer_free(&tr);
        } else {
            fprintf(stderr, "%s\n", err);
        }
    }
    mg_test_report(epochs[0] == 2 && epochs[1] == 1 && iters[0] == 48383 && iters[1] == 48383,
                   "mock data: --train-samples 193535 asks for 193,535 samples (2 epochs), "
                   "--train-iters 48383 for 193,532 (1 epoch)", "epochs %d and %d, iterations "
                   "%d and %d", epochs[0], epochs[1], iters[0], iters[1]);
}

/* Two ranks: the mock data's shuffled samples, read by each data-parallel replica for its
   share or by both tensor ranks, train as on one rank.                                     */
static void check_layouts(void) {
    static const char *const layouts[2] = {"", "--tensor-model-parallel-size 2"};
    char line[2048], name[300];
    float loss[6], norm[6], ser_loss[6], ser_norm[6];
    mg_trainer ser, tr;
    int k;
    const char *common = NULL_TOK(300) "--seq-length 32 --micro-batch-size 2 "
                         "--global-batch-size 4 --train-iters 6 --eval-iters 0 " MODEL;
    gpt_setup_or_die(&ser, common, NULL);
    gpt_train_steps(&ser, 6, ser_loss, ser_norm);
    mg_trainer_free(&ser);
    for (k = 0; k < 2; k++) {
        double e_loss, e_norm;
        snprintf(line, sizeof line, "%s%s", common, layouts[k]);
        gpt_setup_or_die(&tr, line, &comm);
        gpt_train_steps(&tr, 6, loss, norm);
        e_loss = gpt_agree_max(mg_test_max_rel(loss, ser_loss, 6, 0));
        e_norm = gpt_agree_max(mg_test_max_rel(norm, ser_norm, 6, 0));
        snprintf(name, sizeof name, "mock data: %s: 6 steps = serial", k ? "t=2" : "d=2");
        mg_test_report(e_loss <= 1e-5 && e_norm <= 1e-5, name, "losses %.3g, grad norms %.3g",
                       e_loss, e_norm);
        mg_trainer_free(&tr);
    }
}

int main(int argc, char **argv) {
    char line[2048];
    mg_comm *c;
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    c = world > 1 ? &comm : NULL;
    if (world == 1) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/mg_test_mock.XXXXXX");
        if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
        check_samples("training samples (NullTokenizer --vocab-size 50256, split 969,30,1, "
                      "s = 1024, seed 1234)", NULL_TOK(50256) "--seq-length 1024 "
                      "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 4 "
                      "--train-iters 16 --eval-iters 0 --seed 1234 --num-layers 1 "
                      "--hidden-size 16 --num-attention-heads 2 --lr 1e-3", 0, 0);
        check_samples("validation samples (NullTokenizer --vocab-size 1000: ids wrap at 1001, "
                      "s = 256)", NULL_TOK(1000) "--seq-length 256 --micro-batch-size 1 "
                      "--global-batch-size 4 --train-iters 16 --eval-iters 2 --eval-interval 8 "
                      "--seed 1234 --num-layers 1 --hidden-size 16 --num-attention-heads 2 --lr 1e-3",
                      1, 1);
        check_same_as_file();
        check_train_samples_count();
    } else {
        check_layouts();
    }
    snprintf(line, sizeof line, "--mock-data --vocab-size 64 --seq-length 16 --train-iters 2 "
             MODEL);
    gpt_expect_error(c, "mock data", "--mock-data without a tokenizer", line,
                     "--mock-data needs --tokenizer-type");
    snprintf(line, sizeof line, NULL_TOK(64) "--data-path " GPT_DATA "gpt_tokens.bin "
             "--seq-length 16 --train-iters 2 " MODEL);
    gpt_expect_error(c, "mock data", "--mock-data with --data-path", line,
                     "--mock-data with --data-path: give either");
    snprintf(line, sizeof line, "--mock-data --tokenizer-type NullTokenizer --seq-length 16 "
             "--train-iters 2 " MODEL);
    gpt_expect_error(c, "mock data", "NullTokenizer without --vocab-size", line,
                     "--tokenizer-type NullTokenizer needs --vocab-size V");
    snprintf(line, sizeof line, NULL_TOK(64) "--vocab-file x.json --seq-length 16 "
             "--train-iters 2 " MODEL);
    gpt_expect_error(c, "mock data", "NullTokenizer with a vocabulary file", line,
                     "--tokenizer-type NullTokenizer takes no tokenizer files");
    if (world == 1) {
        snprintf(line, sizeof line, "rm -rf '%s'", tmpdir);
        if (system(line) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
