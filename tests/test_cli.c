// mg-test: ranks=1 timeout=300
/* test_cli.c — every class of bad input to gpt_train gets one line "what is wrong, what would be
   valid" before any work, and nothing on disk changes:
     flags (unknown, missing value, not a number, out of range, bad choice, stray argument),
     required flags, model sizes and their combinations, batch sizes, the schedule, output
     paths, data files (missing, not a dataset, a checkpoint, ids outside the vocabulary, too
     short, bad --split), weight files (missing, truncated, not weights, other architecture),
     checkpoints (bad latest file, missing or corrupt state, other seed), device, memory.
   Checked through the library (mg_train_parse + mg_trainer_setup: the message) and, for a
   few, through the built program build/gpt_train (exit status 2, one stderr line, no output);
   plus a short successful run of the program (train, save, export, sample).                */
#include "gpt_test_util.h"
#include <sys/stat.h>
#include <sys/wait.h>

static char tmp[256];

/* The line must fail (in parse or setup) with a one-line message containing `want`. */
static void expect_error(const char *what, const char *line, const char *want) {
    mg_train_args a;
    mg_trainer tr;
    char err[MG_ERRLEN] = {0}, name[300];
    int failed = gpt_parse_line(&a, line, err, sizeof err) != 0;
    if (!failed) {
        failed = mg_trainer_setup(&tr, &a, err, sizeof err) != 0;
        if (!failed) mg_trainer_free(&tr);
    }
    snprintf(name, sizeof name, "cli: %s", what);
    mg_test_report(failed && strstr(err, want) && !strchr(err, '\n'), name, "%s",
                   failed ? err : "accepted");
}

/* A valid base line on the oracle's data, to which one wrong thing is added. */
#define BASE "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 --num-layers 1 " \
             "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1e-3 " \
             "--split 1,0,0 --eval-iters 0 "

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}

static void check_flags(void) {
    char line[1024];
    mg_train_args a;
    char err[MG_ERRLEN];
    CHECK(gpt_parse_line(&a, BASE, err, sizeof err) == 0, "cli: the base line parses");
    expect_error("unknown flag", BASE "--num-layer 2", "unknown option --num-layer");
    expect_error("flag without its value", BASE "--lr", "--lr needs a value");
    expect_error("not an integer", BASE "--micro-batch-size two", "not an integer");
    expect_error("integer with junk", BASE "--train-iters 10x", "not an integer");
    expect_error("not a number", BASE "--lr fast", "not a number");
    expect_error("negative size", BASE "--num-layers -1", "out of range");
    expect_error("zero micro-batch", BASE "--micro-batch-size 0", "out of range");
    expect_error("beta out of [0, 1)", BASE "--adam-beta2 1.5", "out of range");
    expect_error("nan value", BASE "--weight-decay nan", "not a number");
    expect_error("bad choice", BASE "--lr-decay-style exponential",
                 "invalid choice (expected one of constant|linear|cosine)");
    expect_error("bad device", BASE "--device tpu", "expected one of auto|cpu|cuda");
    expect_error("stray argument", BASE "extra", "unexpected argument 'extra'");
    expect_error("empty string value", BASE "--save=", "empty value");
    snprintf(line, sizeof line, "%s", BASE "--help");
    CHECK(gpt_parse_line(&a, line, err, sizeof err) == 0 && a.help, "cli: --help is recognised");
}

static void check_required_and_sizes(void) {
    expect_error("--train-iters required", "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 "
                 "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --lr 1",
                 "--train-iters is required");
    expect_error("--lr required", "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 "
                 "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
                 "--train-iters 2", "--lr is required");
    expect_error("--data-path required to train", "--vocab-size 37 --num-layers 1 --hidden-size "
                 "16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1",
                 "--data-path is required");
    expect_error("model size required", "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 "
                 "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1",
                 "--num-layers is required");
    expect_error("--vocab-size required", "--data-path " GPT_DATA "gpt_tokens.bin --num-layers 1 "
                 "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1",
                 "--vocab-size is required");
    expect_error("heads do not divide hidden", BASE "--num-attention-heads 3",
                 "--hidden-size 16 is not divisible by --num-attention-heads 3");
    expect_error("sequence longer than positions", BASE "--max-position-embeddings 4",
                 "--max-position-embeddings 4 is smaller than --seq-length 8");
    expect_error("global batch not a multiple", BASE "--micro-batch-size 4 --global-batch-size 6",
                 "--global-batch-size 6 is not a multiple of --micro-batch-size 4");
    expect_error("warm-up not shorter than decay", BASE "--lr-warmup-iters 5 --lr-decay-iters 5",
                 "--lr-warmup-iters 5 must be smaller than --lr-decay-iters 5");
    expect_error("min-lr above lr", BASE "--min-lr 0.1", "--min-lr 0.1 is larger than --lr");
    expect_error("vocabulary of one", BASE "--vocab-size 1", "--vocab-size 1: out of range");
    expect_error("model larger than memory", BASE "--hidden-size 65536 --num-attention-heads 2 "
                 "--num-layers 64", "more than the");
#ifndef __CUDACC__
    expect_error("--device cuda without CUDA", BASE "--device cuda", "built without CUDA");
#else
    if (!mg_cuda_available())
        expect_error("--device cuda without a GPU", BASE "--device cuda", "no CUDA GPU");
#endif
}

static void check_paths_and_data(void) {
    char line[2048], path[512], bad[512];
    int32_t toks[64];
    int i;
    char err[MG_ERRLEN];
    /* output paths */
    snprintf(path, sizeof path, "%s/plainfile", tmp);
    write_file(path, "x", 1);
    snprintf(line, sizeof line, BASE "--save %s", path);
    expect_error("--save names a file", line, "exists and is not a directory");
    snprintf(line, sizeof line, BASE "--save %s/no/such/dir", tmp);
    expect_error("--save under a missing directory", line, "does not exist");
    expect_error("--save-interval without --save", BASE "--save-interval 5",
                 "--save-interval needs --save");
    snprintf(line, sizeof line, BASE "--log-jsonl %s", tmp);
    expect_error("--log-jsonl names a directory", line, "is a directory");
    snprintf(line, sizeof line, BASE "--log-jsonl %s/missing/log.jsonl", tmp);
    expect_error("--log-jsonl in a missing directory", line, "does not exist");
    snprintf(line, sizeof line, BASE "--export-hf %s", path);
    expect_error("--export-hf names a file", line, "exists and is not a directory");
    /* data */
    expect_error("missing data", "--data-path /nonexistent/data --vocab-size 37 --num-layers 1 "
                 "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1",
                 "no such dataset");
    snprintf(bad, sizeof bad, "%s/garbage.bin", tmp);
    write_file(bad, "this is not a dataset at all, just some text.................", 60);
    snprintf(line, sizeof line, "--data-path %s --vocab-size 37 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1", bad);
    expect_error("data file of another format", line, "neither an llm.c token file");
    expect_error("a checkpoint given as data", "--data-path " GPT_DATA "gpt_model.bin "
                 "--vocab-size 37 --num-layers 1 --hidden-size 16 --num-attention-heads 2 "
                 "--seq-length 8 --train-iters 2 --lr 1", "model checkpoint, not token data");
    expect_error("token ids beyond the vocabulary", "--data-path " GPT_DATA "gpt_tokens.bin "
                 "--vocab-size 20 --num-layers 1 --hidden-size 16 --num-attention-heads 2 "
                 "--seq-length 8 --train-iters 2 --lr 1 --split 1,0,0",
                 "is outside the vocabulary (--vocab-size 20");
    for (i = 0; i < 5; i++) toks[i] = i;
    snprintf(path, sizeof path, "%s/short.bin", tmp);
    mg_llmc_tokens_write(path, toks, 5, err, sizeof err);
    snprintf(line, sizeof line, "--data-path %s --vocab-size 37 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1 --split 1,0,0", path);
    expect_error("data shorter than one sample", line, "fewer than one sample needs");
    expect_error("--split not numbers", BASE "--split a,b,c", "--split a,b,c");
    expect_error("--split without training data", BASE "--split 0,1,0", "--split");
}

static void check_weights_and_checkpoints(void) {
    char line[2048], path[700], dir[512], sub[700];
    long len = 0;
    char *model = (char *)mg_test_read_file(GPT_DATA "gpt_model.bin", &len);
    mg_trainer tr;
    char err[MG_ERRLEN];
    struct stat st1, st2;
    /* --init-from */
    expect_error("--init-from missing file", BASE "--init-from /nonexistent/model.bin",
                 "cannot open");
    snprintf(path, sizeof path, "%s/truncated.bin", tmp);
    write_file(path, model, 5000);
    snprintf(line, sizeof line, BASE "--init-from %s", path);
    expect_error("--init-from truncated llm.c checkpoint", line, "truncated");
    snprintf(path, sizeof path, "%s/garbage.bin", tmp);
    snprintf(line, sizeof line, BASE "--init-from %s", path);
    expect_error("--init-from a file that holds no weights", line,
                 "neither an llm.c checkpoint");
    snprintf(line, sizeof line, "--init-from %sgpt_model.bin --data-path %sgpt_tokens.bin "
             "--hidden-size 64 --train-iters 1 --lr 1 --split 1,0,0", GPT_DATA, GPT_DATA);
    expect_error("--init-from with another architecture", line,
                 "--hidden-size 64 does not match");
    snprintf(line, sizeof line, "--init-from %sgpt_model.safetensors --data-path %sgpt_tokens.bin"
             " --train-iters 1 --lr 1 --split 1,0,0", GPT_DATA, GPT_DATA);
    expect_error("--init-from safetensors without config.json nor heads", line,
                 "--num-attention-heads is required");
    /* --load: a checkpoint, then damage copies of it */
    snprintf(dir, sizeof dir, "%s/ckpt", tmp);
    snprintf(line, sizeof line, BASE "--save %s --seed 7", dir);
    gpt_trainer_from_line(&tr, line);
    mg_trainer_step(&tr);
    if (mg_trainer_save(&tr, dir, err, sizeof err)) fprintf(stderr, "%s\n", err);
    mg_trainer_free(&tr);
    snprintf(line, sizeof line, BASE "--load %s --seed 8", dir);
    expect_error("--load with another --seed", line, "--seed 8 differs from the checkpoint's 7");
    snprintf(line, sizeof line, BASE "--load %s --hidden-size 32 --num-attention-heads 2", dir);
    expect_error("--load with another architecture", line, "--hidden-size 32 does not match");
    /* nothing on disk changes when setup fails */
    snprintf(sub, sizeof sub, "%s/iter_0000001/model.safetensors", dir);
    stat(sub, &st1);
    snprintf(line, sizeof line, BASE "--load %s --save %s --lr-decay-style bogus", dir, dir);
    expect_error("failed run with --save on a checkpoint", line, "invalid choice");
    snprintf(line, sizeof line, BASE "--load %s --save %s --hidden-size 32", dir, dir);
    expect_error("failed setup with --save on a checkpoint", line, "does not match");
    stat(sub, &st2);
    CHECK(st1.st_mtime == st2.st_mtime && st1.st_size == st2.st_size && st1.st_ino == st2.st_ino,
          "cli: failed runs leave the checkpoint untouched");
    /* damaged checkpoints */
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    write_file(path, "seven\n", 6);
    snprintf(line, sizeof line, BASE "--load %s", dir);
    expect_error("--load with a malformed latest file", line, "expected an iteration number");
    write_file(path, "9\n", 2);
    expect_error("--load whose latest names a missing iteration", line, "iter_0000009");
    write_file(path, "1\n", 2);
    {   /* the weights file cut short */
        char *st;
        snprintf(sub, sizeof sub, "%s/iter_0000001/model.safetensors", dir);
        st = (char *)mg_test_read_file(sub, &len);
        write_file(sub, st, (size_t)len / 2);
        expect_error("--load with a truncated model file", line, "model.safetensors");
        write_file(sub, st, (size_t)len);
        free(st);
    }
    snprintf(sub, sizeof sub, "%s/iter_0000001/state.json", dir);
    write_file(sub, "{\"iteration\": 1,", 16);
    expect_error("--load with a corrupt state.json", line, "state.json");
    free(model);
}

/* The program itself: exit status 2 and one stderr line for a bad flag; a short real run. */
static void check_program(void) {
    char cmd[2048], out[8192] = {0};
    FILE *p;
    size_t n;
    int status;
    const char *prog = "build/gpt_train";
    if (access(prog, X_OK) != 0) {
        mg_test_report(0, "cli: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    snprintf(cmd, sizeof cmd, "%s " BASE "--bogus 1 2>&1 >/dev/null; echo \"status $?\"", prog);
    p = popen(cmd, "r");
    n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    status = p ? pclose(p) : -1;
    CHECK(status == 0 && !strcmp(out, "gpt_train: error: unknown option --bogus (see --help for "
          "the list)\nstatus 2\n"), "cli: gpt_train prints one error line and exits with 2");
    snprintf(cmd, sizeof cmd, "%s --help > /dev/null; echo \"status $?\"", prog);
    p = popen(cmd, "r");
    n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    if (p) pclose(p);
    CHECK(!strcmp(out, "status 0\n"), "cli: gpt_train --help exits with 0");
    snprintf(cmd, sizeof cmd, "%s/docs", tmp);
    gpt_make_docs(cmd);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s --init-from %sgpt_model.bin --data-path "
             "%s/docs --split 8,2,0 --seq-length 16 --micro-batch-size 2 "
             "--global-batch-size 4 --train-iters 4 --lr 1e-3 --log-interval 2 --eval-interval 2 "
             "--eval-iters 1 --save %s/run --export-hf %s/hf --sample-tokens 5 2>&1; "
             "echo \"status $?\"", prog, GPT_DATA, tmp, tmp, tmp);
    p = popen(cmd, "r");
    n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    if (p) pclose(p);
    CHECK(strstr(out, "iteration        4/       4") && strstr(out, "validation loss at "
          "iteration 4") && strstr(out, "saved") && strstr(out, "exported") &&
          strstr(out, "----- sample") && strstr(out, "status 0\n"),
          "cli: gpt_train trains, validates, saves, exports and samples");
    if (!strstr(out, "status 0\n")) fprintf(stderr, "%s\n", out);
}

int main(void) {
    gpt_tmpdir(tmp, sizeof tmp, "cli");
    check_flags();
    check_required_and_sizes();
    check_paths_and_data();
    check_weights_and_checkpoints();
    check_program();
    gpt_rmtree(tmp);
    return mg_test_summary();
}
