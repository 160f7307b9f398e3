// mg-test: ranks=1 timeout=300
/* test_cli.c — every class of bad input to gpt_train gets one line "what is wrong, what would be
   valid" before any work, and nothing on disk changes:
     flags (unknown: the closest flags suggested; missing value, not a number, out of range,
     bad choice, stray argument),
     required flags, model sizes and their combinations, batch sizes, the schedule, output
     paths, data files (missing, not a dataset, a checkpoint, ids outside the vocabulary, too
     short, bad --split), weight files (missing, truncated, not weights, other architecture),
     checkpoints (bad latest file, missing or corrupt state, other seed), device, memory.
   Checked through the library (mg_train_parse + mg_trainer_setup: the message) and, for a
   few, through the built program build/gpt_train (exit status 2, one stderr line, no output);
   plus a short successful run of the program (train, save, export, sample), and a data set
   too small for its --split to give validation a document or a sample: it trains without
   validation (as Megatron-LM does) and one line says why. --help lists every flag once under
   its Megatron-LM argument group; `make help` lists every phony target and the variables.  */
#include "gpt_test_util.h"
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char tmp[256];

/* The line must fail (in parse or setup) with a one-line message containing `want` (a want
   that starts with '^': the message starts with the rest). */
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
    mg_test_report(failed && (want[0] == '^' ? !strncmp(err, want + 1, strlen(want + 1))
                                             : strstr(err, want) != NULL) &&
                   !strchr(err, '\n'), name, "%s", failed ? err : "accepted");
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

/* --attention-backend takes Megatron-LM's names too: fused runs the tiled attention as flash
   and auto do, local the unfused one; anything else is refused. */
static void check_attention_backend_names(void) {
    static const char *names[] = {"auto", "flash", "fused", "unfused", "local"};
    static const int want[] = {MG_ATTN_FLASH, MG_ATTN_FLASH, MG_ATTN_FLASH, MG_ATTN_UNFUSED,
                               MG_ATTN_UNFUSED};
    int i;
    for (i = 0; i < 5; i++) {
        char line[1024], err[MG_ERRLEN] = {0};
        mg_train_args a;
        mg_trainer tr;
        int ok = 0;
        snprintf(line, sizeof line, BASE "--attention-backend %s", names[i]);
        if (gpt_parse_line(&a, line, err, sizeof err) == 0 &&
            mg_trainer_setup(&tr, &a, err, sizeof err) == 0) {
            ok = tr.model.layout.attention_backend == want[i];
            mg_trainer_free(&tr);
        }
        mg_test_report(ok, "cli: --attention-backend name", "%s -> %s%s", names[i],
                       want[i] == MG_ATTN_FLASH ? "the tiled attention" : "the unfused attention",
                       err[0] ? err : "");
    }
    expect_error("attention backend not among the names", BASE "--attention-backend sdpa",
                 "--attention-backend sdpa: invalid choice (expected one of auto|flash|unfused|fused|local)");
}

/* The environment the context reads is checked in setup (every rank, before any
   communication), one line each: MG_ATTN_KERNELS always, MG_DEVICE where --device is auto.
   A valid MG_ATTN_KERNELS reaches the trainer's context. */
static void check_environment(void) {
    const char *dev = getenv("MG_DEVICE");
    char keep[64] = "", err[MG_ERRLEN] = {0};
    mg_train_args a;
    mg_trainer tr;
    int ok = 0;
    if (dev) snprintf(keep, sizeof keep, "%s", dev);
    setenv("MG_ATTN_KERNELS", "fast", 1);
    expect_error("MG_ATTN_KERNELS=fast refused in setup", BASE,
                 "^MG_ATTN_KERNELS=fast: expected mma, wmma, simt or auto");
    setenv("MG_ATTN_KERNELS", "wmma", 1);
    if (gpt_parse_line(&a, BASE, err, sizeof err) == 0 &&
        mg_trainer_setup(&tr, &a, err, sizeof err) == 0) {
        ok = tr.ctx.attn_kernels == MG_ATTN_KERNELS_WMMA;
        mg_trainer_free(&tr);
    }
    mg_test_report(ok, "cli: MG_ATTN_KERNELS=wmma reaches the context", "%s", err);
    unsetenv("MG_ATTN_KERNELS");
    setenv("MG_DEVICE", "gpu", 1);
    expect_error("MG_DEVICE=gpu refused in setup (--device auto)", BASE,
                 "^MG_DEVICE=gpu: expected cpu, cuda or auto");
    ok = gpt_parse_line(&a, BASE "--device cpu", err, sizeof err) == 0 &&
         mg_trainer_setup(&tr, &a, err, sizeof err) == 0;
    if (ok) mg_trainer_free(&tr);
    mg_test_report(ok, "cli: MG_DEVICE is not read with --device cpu", "%s", err);
    if (dev) setenv("MG_DEVICE", keep, 1);
    else unsetenv("MG_DEVICE");
}

static void check_flags(void) {
    char line[1024];
    mg_train_args a;
    char err[MG_ERRLEN];
    CHECK(gpt_parse_line(&a, BASE, err, sizeof err) == 0, "cli: the base line parses");
    expect_error("unknown flag", BASE "--num-layer 2",
                 "^unknown flag --num-layer; did you mean --num-layers? (see --help");
    expect_error("unknown flag, the start of three", BASE "--lr-decay cosine", "^unknown flag "
                 "--lr-decay; did you mean --lr-decay-style or --lr-decay-iters or "
                 "--lr-decay-samples?");
    expect_error("unknown flag, the words of one", BASE "--tensor-parallel 2",
                 "^unknown flag --tensor-parallel; did you mean --tensor-model-parallel-size?");
    expect_error("unknown flag, '_' and capitals", BASE "--Num_Layers 2",
                 "^unknown flag --Num_Layers; did you mean --num-layers?");
    expect_error("unknown flag, nothing close", BASE "--fp32",
                 "^unknown flag --fp32 (see --help for every flag)");
    expect_error("flag without its value", BASE "--lr",
                 "^--lr needs a value (expected LR, a number in 0 … 1000)");
    expect_error("flag followed by a flag", BASE "--micro-batch-size --seed 3",
                 "^--micro-batch-size needs a value before --seed (expected B, a whole number "
                 "in 1 … 1000000)");
    expect_error("empty number", BASE "--train-iters=",
                 "^--train-iters: empty value (expected N, a whole number >= 0)");
    expect_error("--enable-cuda-graph on the CPU", BASE "--enable-cuda-graph --device cpu",
                 "^--enable-cuda-graph needs the GPU (--device cpu was given)");
    expect_error("zero interval", BASE "--eval-interval 0",
                 "^--eval-interval 0: out of range (expected N, a whole number >= 1)");
    expect_error("a whole number above a bound of 1e15", BASE "--train-iters "
                 "9223372036854775807", "^--train-iters 9223372036854775807: out of range "
                 "(expected N, a whole number in 0 … 1000000000000000)");
    expect_error("a number above a bound of 1e30", BASE "--fp16 --initial-loss-scale 1e40",
                 "^--initial-loss-scale 1e40: out of range (expected X, a number in 1e-30 … "
                 "1e+30)");
    expect_error("choice in capitals", BASE "--lr-decay-style Cosine", "^--lr-decay-style Cosine: "
                 "invalid choice (expected one of constant|linear|cosine|inverse-square-root|WSD; did you "
                 "mean cosine?)");
    expect_error("choice in other capitals", BASE "--normalization rmsnorm", "^--normalization "
                 "rmsnorm: invalid choice (expected one of LayerNorm|RMSNorm; did you mean "
                 "RMSNorm?)");
    expect_error("one dash", BASE "-lr 1", "^unexpected argument '-lr' (flags start with two "
                 "dashes: did you mean --lr?)");
    expect_error("no dashes", BASE "lr 1", "^unexpected argument 'lr' (did you mean --lr?)");
    expect_error("a value after a switch", BASE "--bf16 true", "^unexpected argument 'true' "
                 "after --bf16, which takes no value");
    expect_error("--help with a value", BASE "--help=1", "^--help takes no value");
    expect_error("not an integer", BASE "--micro-batch-size two", "not an integer");
    expect_error("integer with junk", BASE "--train-iters 10x", "not an integer");
    expect_error("not a number", BASE "--lr fast", "not a number");
    expect_error("negative size", BASE "--num-layers -1", "out of range");
    expect_error("zero micro-batch", BASE "--micro-batch-size 0", "out of range");
    expect_error("beta out of [0, 1)", BASE "--adam-beta2 1.5", "out of range");
    expect_error("nan value", BASE "--weight-decay nan", "not a number");
    expect_error("bad choice", BASE "--lr-decay-style exponential",
                 "invalid choice (expected one of constant|linear|cosine|inverse-square-root|"
                 "WSD)");
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
    expect_error("sequence past 32-bit T x T", BASE "--seq-length 100000", "^--seq-length 100000: "
                 "at most 46340 (sizes in the GEMM seam are 32-bit: T x T must fit)");
    expect_error("logits past 32-bit GEMM sizes", BASE "--vocab-size 1073741824",
                 "^--micro-batch-size 1 × --seq-length 8 × 1073741824 vocabulary rows per rank "
                 "(--vocab-size 1073741824 padded to 1073741824, / --tensor-model-parallel-size "
                 "1) = 8589934592 logits, more than the 2147483647 a 32-bit GEMM size holds (a "
                 "smaller --micro-batch-size or --seq-length, or a larger "
                 "--tensor-model-parallel-size, which divides the vocabulary, fits)");
    expect_error("MLP activations past 32-bit GEMM sizes", BASE "--hidden-size 40000 "
                 "--num-attention-heads 2 --micro-batch-size 2000", "^--micro-batch-size 2000 × "
                 "--seq-length 8 × 4 × --hidden-size 40000 = 2560000000 elements of the MLP's "
                 "activations, more than the 2147483647");
    expect_error("global batch not a multiple", BASE "--micro-batch-size 4 --global-batch-size 6",
                 "^--global-batch-size 6 is not a multiple of --micro-batch-size 4 (gradients "
                 "accumulate over whole microbatches: use a multiple of 4, e.g. 8)");
    expect_error("recompute layers with selective", BASE "--recompute-granularity selective "
                 "--recompute-num-layers 1", "^--recompute-num-layers applies to "
                 "--recompute-granularity full only, not to selective");
    expect_error("warm-up not shorter than decay", BASE "--lr-warmup-iters 5 --lr-decay-iters 5",
                 "^--lr-warmup-iters 5: the warm-up must be shorter than the decay, "
                 "--lr-decay-iters 5 (default: --train-iters)");
    /* Megatron's OptimizerParamScheduler asserts it for the constant style too */
    expect_error("warm-up not shorter than decay, constant", BASE "--lr-decay-style constant "
                 "--lr-warmup-iters 2", "^--lr-warmup-iters 2: the warm-up must be shorter than "
                 "the decay, --lr-decay-iters 2 (default: --train-iters)");
    expect_error("a warm-up fraction of the whole decay", BASE "--lr-warmup-fraction 1",
                 "^--lr-warmup-fraction 1: the warm-up must be shorter than the decay");
    expect_error("--lr-warmup-fraction with --lr-warmup-iters", BASE "--train-iters 10 "
                 "--lr-warmup-fraction 0.1 --lr-warmup-iters 1", "^--lr-warmup-fraction and "
                 "--lr-warmup-iters 1 exclude each other");
    expect_error("--lr-warmup-init above --lr", BASE "--lr-warmup-init 0.01",
                 "^--lr-warmup-init 0.01 is larger than --lr 0.001");
    /* Megatron-LM's OptimizerParamScheduler asserts WSD's annealing length is given, and its
       validate_args the weight decay's ends for linear and cosine only (end >= start) */
    expect_error("WSD without its annealing", BASE "--lr-decay-style WSD",
                 "^--lr-decay-style WSD needs --lr-wsd-decay-iters N (the iterations of its "
                 "annealing, at the end of the decay)");
    expect_error("bad WSD annealing", BASE "--lr-decay-style WSD --lr-wsd-decay-iters 1 "
                 "--lr-wsd-decay-style sqrt", "^--lr-wsd-decay-style sqrt: invalid choice "
                 "(expected one of exponential|linear|cosine|minus_sqrt)");
    expect_error("start weight decay with the constant style", BASE "--start-weight-decay 0.1",
                 "^--start-weight-decay needs --weight-decay-incr-style linear or cosine (the "
                 "constant style decays by --weight-decay throughout)");
    expect_error("end weight decay with the constant style", BASE "--end-weight-decay 0.1",
                 "^--end-weight-decay needs --weight-decay-incr-style linear or cosine");
    expect_error("an increment without its end", BASE "--weight-decay-incr-style cosine "
                 "--start-weight-decay 0", "^--weight-decay-incr-style cosine needs "
                 "--start-weight-decay and --end-weight-decay (the weight decay it rises "
                 "between)");
    expect_error("a falling weight decay", BASE "--weight-decay-incr-style linear "
                 "--start-weight-decay 0.1 --end-weight-decay 0.01", "^--end-weight-decay 0.01 "
                 "is smaller than --start-weight-decay 0.1 (the weight decay only rises: it must "
                 "be >=)");
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
    expect_error("--save names a file", line, "exists and is not a directory (give a directory, "
                 "or a new name to create one)");
    snprintf(line, sizeof line, BASE "--save %s/no/such/dir", tmp);
    expect_error("--save under a missing directory", line, "the directory it would be created in "
                 "does not exist (create that first, or give a path in an existing directory)");
    expect_error("--save-interval without --save", BASE "--save-interval 5",
                 "--save-interval needs --save");
    snprintf(line, sizeof line, BASE "--log-jsonl %s", tmp);
    expect_error("--log-jsonl names a directory", line, "is a directory");
    snprintf(line, sizeof line, BASE "--log-jsonl %s/missing/log.jsonl", tmp);
    expect_error("--log-jsonl in a missing directory", line, "does not exist");
    snprintf(line, sizeof line, BASE "--export-hf %s", path);
    expect_error("--export-hf names a file", line, "exists and is not a directory");
    /* a named pipe as an output: refused up front, never opened (opening it waits for a
       reader, and the log is read back to draw it) */
    alarm(60);
    snprintf(path, sizeof path, "%s/out.fifo", tmp);
    if (mkfifo(path, 0600) == 0) {
        snprintf(line, sizeof line, BASE "--log-jsonl %s", path);
        expect_error("--log-jsonl a named pipe: refused without waiting", line, "out.fifo: not a "
                     "regular file (a named pipe, device or socket; give the name of a file to "
                     "write)");
        snprintf(line, sizeof line, BASE "--pipeline-trace %s", path);
        snprintf(bad, sizeof bad, "^--pipeline-trace %.400s: not a regular file", path);
        expect_error("--pipeline-trace a named pipe: refused without waiting", line, bad);
        remove(path);
    }
    alarm(0);
    /* outputs that cannot be created or written: refused before any work (root may write
       into a read-only directory: /proc refuses everyone) */
    if (geteuid() == 0) snprintf(path, sizeof path, "/proc/self/mg_no_such_ckpt");
    else {
        snprintf(path, sizeof path, "%s/readonly", tmp);
        mkdir(path, 0555);
        chmod(path, 0555);
        snprintf(path + strlen(path), sizeof path - strlen(path), "/ckpt");
    }
    {
        static const char *const outs[3][3] = {   /* flag, name suffix, the error */
            {"--save", "", "cannot create this directory ("},
            {"--export-hf", "", "cannot create this directory ("},
            {"--log-jsonl", ".jsonl", "cannot create this file ("}};
        for (i = 0; i < 3; i++) {
            char what[120];
            snprintf(line, sizeof line, BASE "%s %s%s", outs[i][0], path, outs[i][1]);
            snprintf(what, sizeof what, "%s in a directory where nothing can be created",
                     outs[i][0]);
            expect_error(what, line, outs[i][2]);
        }
    }
    *strrchr(path, '/') = 0;                    /* the read-only directory itself */
    snprintf(line, sizeof line, BASE "--save %s", path);
    expect_error("--save an existing directory where nothing can be created", line,
                 "cannot create files in this directory (");
    /* a file no one may write: mode 0444 (sysfs's refuses root too) */
    if (geteuid() == 0) snprintf(path, sizeof path, "/sys/kernel/uevent_seqnum");
    else {
        snprintf(path, sizeof path, "%s/readonly.jsonl", tmp);
        write_file(path, "", 0);
        chmod(path, 0444);
    }
    snprintf(line, sizeof line, BASE "--log-jsonl %s", path);
    if (access(path, F_OK) == 0)
        expect_error("--log-jsonl an existing file that cannot be written", line,
                     ": cannot write to this file (");
    snprintf(path, sizeof path, "%s/probe_save", tmp);
    snprintf(line, sizeof line, BASE "--save %s", path);
    {   /* a new --save directory that can be created: tried, and not left behind */
        mg_trainer tr;
        int rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
        struct stat st;
        mg_test_report(!rc && stat(path, &st) != 0, "cli: --save of a new directory: tried at "
                       "setup and removed again (created by the first save)", "%s",
                       rc ? err : stat(path, &st) == 0 ? "left behind" : "");
        if (!rc) mg_trainer_free(&tr);
    }
    /* data */
    expect_error("missing data", "--data-path /nonexistent/data --vocab-size 37 --num-layers 1 "
                 "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1",
                 "no such dataset");
    snprintf(bad, sizeof bad, "%s/garbage.bin", tmp);
    write_file(bad, "this is not a dataset at all, just some text.................", 60);
    snprintf(line, sizeof line, "--data-path %s --vocab-size 37 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1", bad);
    expect_error("data file of another format", line, "neither an llm.c token file");
    expect_error("Llama switches on a GPT-2 file", "--init-from " GPT_DATA "gpt_model.bin "
                 "--data-path " GPT_DATA "gpt_tokens.bin --train-iters 1 --lr 1e-3 --swiglu",
                 "the model's --swiglu (1) does not match " GPT_DATA "gpt_model.bin, which has 0");
    expect_error("an untied output layer from a GPT-2 file", "--init-from " GPT_DATA
                 "gpt_model.bin --data-path " GPT_DATA "gpt_tokens.bin --train-iters 1 --lr 1e-3 "
                 "--untie-embeddings-and-output-weights", "the model's "
                 "--untie-embeddings-and-output-weights (1) does not match");
    expect_error("a checkpoint given as data", "--data-path " GPT_DATA "gpt_model.bin "
                 "--vocab-size 37 --num-layers 1 --hidden-size 16 --num-attention-heads 2 "
                 "--seq-length 8 --train-iters 2 --lr 1", "model checkpoint, not token data");
    expect_error("token ids beyond the vocabulary", "--data-path " GPT_DATA "gpt_tokens.bin "
                 "--vocab-size 20 --num-layers 1 --hidden-size 16 --num-attention-heads 2 "
                 "--seq-length 8 --train-iters 2 --lr 1 --split 1,0,0",
                 "is outside the vocabulary (--vocab-size 20");
    /* llm.c's Llama-3 token file (tests/oracle/data.py, llm.c's write_datafile): read (before:
       "neither an llm.c token file"), its ids up to 2^32-1 checked against the vocabulary;
       llm.c's evaluation file (magic 20240522) named as what it is                          */
    expect_error("an llm.c Llama-3 token file's ids beyond the vocabulary", "--data-path "
                 "tests/data/data_llmc_llama3.bin --vocab-size 128256 --num-layers 1 "
                 "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1",
                 "data_llmc_llama3.bin: token id 4294967295 is outside the vocabulary "
                 "(--vocab-size 128256: ids 0 … 128255)");
    expect_error("an llm.c evaluation file given as data", "--data-path "
                 "tests/data/data_llmc_eval.bin --vocab-size 37 --num-layers 1 --hidden-size 16 "
                 "--num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1",
                 "data_llmc_eval.bin: this is an llm.c evaluation file (magic 20240522");
    for (i = 0; i < 5; i++) toks[i] = i;
    snprintf(path, sizeof path, "%s/short.bin", tmp);
    mg_llmc_tokens_write(path, MG_LLMC_GPT2, toks, 5, err, sizeof err);
    snprintf(line, sizeof line, "--data-path %s --vocab-size 37 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1 --split 1,0,0", path);
    expect_error("data shorter than one sample", line, "fewer than one sample needs "
                 "(--seq-length + 1 = 9); --seq-length 4 or less, or more data, fits");
    expect_error("sequence of one token, shuffled", BASE "--seq-length 1", "training part (2 "
                 "samples: --train-iters x --global-batch-size): sequence length (--seq-length) "
                 "1 too small: the shuffled order (Megatron's GPTDataset) needs at least 2; "
                 "--data-order sequential takes 1");
    expect_error("an llm.c file named without .bin", "--data-path " GPT_DATA "gpt_tokens "
                 "--vocab-size 37 --num-layers 1 --hidden-size 16 --num-attention-heads 2 "
                 "--seq-length 8 --train-iters 2 --lr 1", "gpt_tokens.bin does: an llm.c token "
                 "file is given by its full name)");
    expect_error("--split not numbers", BASE "--split a,b,c",
                 "^--split 'a,b,c': expected weights like 969,30,1");
    expect_error("--split of four numbers", BASE "--split 1,2,3,4",
                 "^--split '1,2,3,4': more than three weights (expected train,valid,test");
    expect_error("--split without training data", BASE "--split 0,1,0", "^--split 0,1,0 gives "
                 "the training part no weight (the first number is the training share");
    /* PREFIX.idx a directory: said so (not "does not exist") */
    snprintf(path, sizeof path, "%s/dirprefix.idx", tmp);
    mkdir(path, 0755);
    snprintf(line, sizeof line, "--data-path %s/dirprefix --vocab-size 37 --num-layers 1 "
             "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1",
             tmp);
    expect_error("PREFIX.idx a directory", line, "dirprefix.idx is a directory, not an index "
                 "file (a dataset is PREFIX.idx + PREFIX.bin, two regular files)");
    /* a sequence longer than the positions of the model file: where they came from */
    expect_error("--seq-length past config.json's n_positions", "--init-from " GPT_DATA
                 "hf_base --data-path " GPT_DATA "gpt_tokens.bin --train-iters 1 --lr 1e-3 "
                 "--split 1,0,0 --seq-length 32", "^--seq-length 32 is longer than the 16 "
                 "positions of the model in " GPT_DATA "hf_base/model.safetensors "
                 "(config.json's n_positions there; give --seq-length 16 or less)");
    /* tokenizer files: the message names the flag */
    snprintf(path, sizeof path, "%s/badvocab.json", tmp);
    write_file(path, "{\"a\": 0, \"b\"", strlen("{\"a\": 0, \"b\""));
    snprintf(bad, sizeof bad, "%s/merges.txt", tmp);
    write_file(bad, "#version: 0.2\na b\n", strlen("#version: 0.2\na b\n"));
    snprintf(line, sizeof line, BASE "--tokenizer-type GPT2BPETokenizer --vocab-file %s "
             "--merge-file %s", path, bad);
    {
        char want[700];
        snprintf(want, sizeof want, "^--vocab-file %.400s: ", path);
        expect_error("a broken --vocab-file: the flag named", line, want);
        write_file(bad, "#version: 0.2\nab\n", 17);
        write_file(path, "{\"a\": 0, \"b\": 1, \"ab\": 2}", 25);
        snprintf(want, sizeof want, "^--merge-file %.400s: ", bad);
        expect_error("a broken --merge-file: the flag named", line, want);
        /* both files without --tokenizer-type: GPT2BPETokenizer, pretrain_gpt.py's default
           (its loader reads them, and says this vocabulary lacks GPT-2's byte tokens) */
        write_file(bad, "#version: 0.2\na b\n", strlen("#version: 0.2\na b\n"));
        snprintf(line, sizeof line, "--data-path " GPT_DATA "gpt_tokens.bin --num-layers 1 "
                 "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 "
                 "--lr 1e-3 --split 1,0,0 --eval-iters 0 --vocab-file %s --merge-file %s", path,
                 bad);
        snprintf(want, sizeof want, "^--vocab-file %.400s: byte 0x00 has no token (not a "
                 "byte-level vocabulary)", path);
        expect_error("--vocab-file and --merge-file alone: GPT2BPETokenizer (pretrain_gpt.py's "
                     "default)", line, want);
        snprintf(line, sizeof line, BASE "--merge-file %s", bad);
        expect_error("--merge-file alone: no tokenizer to take", line, "^--merge-file needs "
                     "--tokenizer-type (the tokenizer it belongs to; --vocab-file and "
                     "--merge-file together mean GPT2BPETokenizer");
    }
    expect_error("--load under a missing directory", BASE "--load /nonexistent/x/y",
                 "^--load /nonexistent/x/y: no such directory, nor the directory it would be in");
}

/* Megatron-LM's --data-args-path (--data-path's words in a file, any whitespace between them)
   and --per-split-data-args-path (a JSON object of the train, valid and test blends: lists of
   words, weights as strings or numbers, one string of words, or null): each trains exactly
   as the same words typed; and the files' errors, one line each.                           */
#define DARGS_BASE "--vocab-size 1000 --num-layers 1 --hidden-size 16 --num-attention-heads 2 " \
                   "--seq-length 8 --train-iters 3 --lr 1e-3 --seed 7 "
static void check_data_args_files(void) {
    static const char *const blend = "tests/data/data_megatron_u16 0.3 "
                                     "tests/data/prep_ref_eod_text_document";
    char path[600], json[600], line[2048], typed[2048], want[900];
    gpt_run file_run, typed_run;
    FILE *f;
    int k;
    snprintf(path, sizeof path, "%s/data_args.txt", tmp);
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "0.7\n\ttests/data/data_megatron_u16   0.3\r\n"
                "tests/data/prep_ref_eod_text_document\n");
        fclose(f);
    }
    snprintf(line, sizeof line, DARGS_BASE "--eval-iters 1 --eval-interval 3 --data-args-path %s",
             path);
    snprintf(typed, sizeof typed, DARGS_BASE "--eval-iters 1 --eval-interval 3 --data-path 0.7 %s",
             blend);
    gpt_run_train(&file_run, line, NULL, 3);
    gpt_run_train(&typed_run, typed, NULL, 3);
    mg_test_report(gpt_run_same(&file_run, &typed_run), "cli: --data-args-path (the words on "
                   "several lines) trains as --data-path with the same words typed, bit for bit",
                   "losses %.6f / %.6f", file_run.loss[2], typed_run.loss[2]);
    gpt_run_free(&file_run);
    gpt_run_free(&typed_run);
    snprintf(json, sizeof json, "%s/per_split.json", tmp);
    f = fopen(json, "w");
    if (f) {
        fprintf(f, "{\"train\": [\"0.5\", \"tests/data/data_megatron_u16\", 0.5, "
                "\"tests/data/prep_ref_eod_text_document\"], \"valid\": "
                "\"tests/data/prep_ref_eod_text_document\", \"test\": null}");
        fclose(f);
    }
    snprintf(line, sizeof line, DARGS_BASE "--eval-iters 1 --per-split-data-args-path %s", json);
    snprintf(typed, sizeof typed, DARGS_BASE "--eval-iters 1 --train-data-path 0.5 "
             "tests/data/data_megatron_u16 0.5 tests/data/prep_ref_eod_text_document "
             "--valid-data-path tests/data/prep_ref_eod_text_document");
    gpt_run_train(&file_run, line, NULL, 3);
    gpt_run_train(&typed_run, typed, NULL, 3);
    mg_test_report(gpt_run_same(&file_run, &typed_run), "cli: --per-split-data-args-path (a "
                   "list with string and number weights, a string, null) trains as "
                   "--train-data-path and --valid-data-path typed, bit for bit",
                   "losses %.6f / %.6f", file_run.loss[2], typed_run.loss[2]);
    gpt_run_free(&file_run);
    gpt_run_free(&typed_run);
    /* the errors */
    snprintf(line, sizeof line, DARGS_BASE "--data-args-path %s --per-split-data-args-path %s",
             path, json);
    expect_error("--data-args-path with --per-split-data-args-path", line,
                 "^--data-args-path and --per-split-data-args-path exclude each other");
    snprintf(line, sizeof line, DARGS_BASE "--data-args-path %s --data-path x", path);
    expect_error("--data-args-path with --data-path", line, "^--data-args-path with "
                 "--data-path: give the words in one place");
    snprintf(line, sizeof line, DARGS_BASE "--per-split-data-args-path %s --valid-data-path x",
             json);
    expect_error("--per-split-data-args-path with --valid-data-path", line,
                 "^--per-split-data-args-path with --valid-data-path");
    snprintf(line, sizeof line, DARGS_BASE "--data-args-path %s/missing.txt", tmp);
    snprintf(want, sizeof want, "^--data-args-path %s/missing.txt", tmp);
    expect_error("--data-args-path: a missing file", line, want);
    {   /* an empty file; JSON that is not the object; a missing part; a bad element */
        static const char *const bad[][2] = {
            {"", "no words (expected PATH, or W1 PATH1 W2 PATH2"},
            {"[\"a\"]", "not a JSON object (expected {\"train\": [...], \"valid\": [...], "
                        "\"test\": [...]})"},
            {"{\"train\": \"a\", \"test\": null}", "no \"valid\" (Megatron-LM reads \"train\", "
                                                    "\"valid\" and \"test\"; null for a part "
                                                    "without data)"},
            {"{\"train\": [\"a\", true], \"valid\": null, \"test\": null}",
             "\"train\" element 1 is neither a path nor a weight"},
            {"{\"train\": 3, \"valid\": null, \"test\": null}", "\"train\" is not a list of "
                                                               "words, a string or null"},
            {"{\"train\": [\"\"], \"valid\": null, \"test\": null}", "\"train\" element 0 is an "
                                                                  "empty path"},
        };
        for (k = 0; k < (int)(sizeof bad / sizeof bad[0]); k++) {
            char what[200];
            snprintf(path, sizeof path, "%s/bad_args_%d", tmp, k);
            write_file(path, bad[k][0], strlen(bad[k][0]));
            snprintf(line, sizeof line, DARGS_BASE "--%s %s", k ? "per-split-data-args-path" :
                     "data-args-path", path);
            snprintf(what, sizeof what, "--%s: %s", k ? "per-split-data-args-path" :
                     "data-args-path", bad[k][1]);
            expect_error(what, line, bad[k][1]);
        }
    }
    /* 4098 words: one more pair than the 4096 a data flag holds */
    snprintf(path, sizeof path, "%s/many_args.txt", tmp);
    f = fopen(path, "w");
    for (k = 0; f && k < 2049; k++) fprintf(f, "1 tests/data/data_megatron_u16\n");
    if (f) fclose(f);
    snprintf(line, sizeof line, DARGS_BASE "--data-args-path %s", path);
    expect_error("--data-args-path: more words than a data flag holds", line,
                 "^--data-args-path: more than 4096 words (2048 datasets)");
}

/* --help lists the flags in Megatron-LM's argument groups: the headings in their order, and
   every flag of the table exactly once, under the heading of its group (no line for a flag
   the table does not hold). */
static void check_help(void) {
    static const char *const groups[] = {"options", "network size", "regularization", "training",
        "initialization", "learning rate", "checkpointing", "mixed precision", "distributed",
        "validation", "data and dataloader", "logging", "inference", "device"};
    const int n_groups = (int)(sizeof groups / sizeof groups[0]);
    char lines[400][160], heading[160] = "";
    int n = 0, i, k, g = 0, headings_ok = 1, flags = 0, misplaced = 0, stray = 0;
    const char *name, *group;
    char where[400] = "";
    FILE *f = tmpfile();
    if (!f) { perror("tmpfile"); exit(1); }
    mg_train_print_help(f, "gpt_train");
    rewind(f);
    while (n < 400 && fgets(lines[n], sizeof lines[n], f)) n++;
    fclose(f);
    for (i = 0; i < n; i++)   /* the table's flags end where Megatron-LM's compatibility ones
                                 begin (check_megatron_compat) */
        if (!strcmp(lines[i], "Megatron-LM flags accepted for compatibility:\n")) n = i;
    /* headings: "title:" after a blank line, in Megatron-LM's order */
    for (i = 1; i < n; i++) {
        size_t len = strlen(lines[i]);
        if (lines[i - 1][0] == '\n' && lines[i][0] != ' ' && len > 2 && lines[i][len - 2] == ':') {
            if (g >= n_groups || strncmp(lines[i], groups[g], len - 2) || strlen(groups[g]) != len - 2)
                headings_ok = 0;
            g++;
        }
    }
    mg_test_report(headings_ok && g == n_groups, "cli: --help has Megatron-LM's group headings, "
                   "network size … data and dataloader, logging, in order", "%d headings", g);
    /* each flag: one line "  --name ..." whose heading above is its group's */
    for (k = 0; (name = mg_train_flag_name(k, &group)) != NULL; k++) {
        int seen = 0, under_it = 0;
        size_t len = strlen(name);
        flags++;
        heading[0] = 0;
        for (i = 0; i < n; i++) {
            size_t ll = strlen(lines[i]);
            if (lines[i][0] != ' ' && ll > 2 && lines[i][ll - 2] == ':')
                snprintf(heading, sizeof heading, "%.*s", (int)(ll - 2), lines[i]);
            if (!strncmp(lines[i], "  ", 2) && !strncmp(lines[i] + 2, name, len) &&
                (lines[i][2 + len] == ' ' || lines[i][2 + len] == '\n')) {
                seen++;
                under_it = group && !strcmp(heading, group);
            }
        }
        if (seen != 1 || !under_it) {
            misplaced++;
            snprintf(where + strlen(where), sizeof where - strlen(where), " %s(%d, %s)", name,
                     seen, group ? group : "no group");
        }
    }
    for (i = 0; i < n; i++)       /* every "  --x" line is a flag of the table */
        if (!strncmp(lines[i], "  --", 4)) {
            char word[96];
            sscanf(lines[i] + 2, "%95s", word);
            for (k = 0; (name = mg_train_flag_name(k, NULL)) != NULL && strcmp(name, word); k++) {}
            stray += name == NULL;
        }
    mg_test_report(flags > 50 && misplaced == 0 && stray == 0, "cli: --help lists every flag "
                   "exactly once, under its group's heading", "%d flags, %d misplaced:%s, %d "
                   "lines of no flag", flags, misplaced, where, stray);
}

/* A data set too small for its --split to give validation a document (or a sample) trains
   without validation, as Megatron-LM does: setup succeeds, has_valid is 0, valid_note says
   why in one line, and mg_trainer_evaluate returns NAN and writes nothing to --log-jsonl. */
static void check_no_validation(void) {
    char line[2048], one[512], jsonl[512], err[MG_ERRLEN];
    int32_t toks[200];
    int i, rc;
    long len = 0;
    char *text;
    mg_trainer tr;
    double loss;
    CHECK(mg_split_min_sequences("969,30,1", MG_SPLIT_VALID) == 17 &&
          mg_split_count("969,30,1", MG_SPLIT_VALID, 16) == 0 &&
          mg_split_count("969,30,1", MG_SPLIT_VALID, 17) == 1 &&
          mg_split_min_sequences("98,2,0", MG_SPLIT_VALID) == 25 &&
          mg_split_count("98,2,0", MG_SPLIT_VALID, 24) == 0 &&
          mg_split_min_sequences("1,0,0", MG_SPLIT_VALID) == -1,
          "cli: the validation part needs 17 documents under 969,30,1 and 25 under 98,2,0");
    {   /* the bound holds for every size above it, not only at it */
        int64_t S, bad = 0, need = mg_split_min_sequences("969,30,1", MG_SPLIT_VALID);
        for (S = need; S < 5000; S++) bad += mg_split_count("969,30,1", MG_SPLIT_VALID, S) < 1;
        CHECK(bad == 0, "cli: every data set of 17 or more documents has a validation part");
    }
    for (i = 0; i < 200; i++) toks[i] = (i * 5) % 37;      /* no end-of-text: one document */
    snprintf(one, sizeof one, "%s/one.bin", tmp);
    if (mg_llmc_tokens_write(one, MG_LLMC_GPT2, toks, 200, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    snprintf(jsonl, sizeof jsonl, "%s/novalid.jsonl", tmp);
    snprintf(line, sizeof line, "--data-path %s --vocab-size 37 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1e-3 --eval-interval 1 "
             "--log-interval 1 "
             "--log-jsonl %s", one, jsonl);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    if (!rc) {
        mg_step_result r = mg_trainer_step(&tr);
        mg_trainer_log(&tr, &r, NULL);
        loss = mg_trainer_evaluate(&tr, NULL);
        mg_test_report(!tr.has_valid && isnan(loss) && tr.consumed_valid_samples == 0 &&
                       strstr(tr.valid_note, "validation skipped: --split 969,30,1 gives the "
                              "validation part none of the 1 document of ") &&
                       strstr(tr.valid_note, "needs 17 or more documents with this split (one "
                              "cannot be split)") && !strchr(tr.valid_note, '\n'),
                       "cli: one document, default --split: trains, no validation, one note "
                       "line why", "%s", tr.valid_note);
        mg_trainer_free(&tr);
        text = (char *)mg_test_read_file(jsonl, &len);
        mg_test_report(text && len > 0 && !memmem(text, (size_t)len, "valid", 5) &&
                       !memmem(text, (size_t)len, "null", 4), "cli: no validation: the JSONL "
                       "log holds the training line only (no validation object, no null)", "%.*s",
                       (int)len, text ? text : "");
        free(text);
    } else mg_test_report(0, "cli: one document, default --split: trains", "%s", err);
    /* five documents of 40 tokens: none for validation; holding out one is suggested */
    snprintf(one, sizeof one, "%s/five.bin", tmp);
    {
        int32_t five[205];
        for (i = 0; i < 205; i++) five[i] = i % 41 == 0 ? MG_LLMC_EOT : (i * 3) % 37;
        if (mg_llmc_tokens_write(one, MG_LLMC_GPT2, five, 205, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
    }
    snprintf(line, sizeof line, "--data-path %s --vocab-size 50257 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1e-3", one);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && !tr.has_valid && strstr(tr.valid_note, "none of the 5 documents") &&
                   strstr(tr.valid_note, "or a larger validation share (--split 4,1,0 holds out "
                          "1 of these 5)"), "cli: five documents, default --split: no "
                   "validation; the note suggests --split 4,1,0", "%s", rc ? err : tr.valid_note);
    if (!rc) mg_trainer_free(&tr);
    /* a validation document shorter than one sample (sequence 64 > the 40 tokens held out) */
    snprintf(line, sizeof line, "--data-path %s --vocab-size 50257 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 64 --train-iters 2 --lr 1e-3 --split 4,1,0", one);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && !tr.has_valid && strstr(tr.valid_note, "validation skipped: the "
                   "validation part of --split 4,1,0 (1 of the 5 documents of ") &&
                   strstr(tr.valid_note, ") holds 41 tokens, fewer than one sample needs "
                          "(--seq-length + 1 = 65)"), "cli: a validation part shorter than one "
                   "sample: no validation, one note line", "%s", rc ? err : tr.valid_note);
    if (!rc) mg_trainer_free(&tr);
    /* --split without a validation weight: a note only when evaluation was asked for */
    rc = gpt_setup_line(&tr, BASE, NULL, err, sizeof err);
    mg_test_report(!rc && !tr.has_valid && !tr.valid_note[0], "cli: --split 1,0,0 --eval-iters "
                   "0: no validation, no note", "%s", rc ? err : tr.valid_note);
    if (!rc) mg_trainer_free(&tr);
    rc = gpt_setup_line(&tr, BASE "--eval-iters 2 --eval-interval 5", NULL, err, sizeof err);
    mg_test_report(!rc && !tr.has_valid && strstr(tr.valid_note, "validation skipped: --split "
                   "1,0,0 gives the validation part no weight, so --eval-interval and "
                   "--eval-iters do nothing"), "cli: --split 1,0,0 with --eval-interval: no "
                   "validation, a note says the flags do nothing", "%s",
                   rc ? err : tr.valid_note);
    if (!rc) mg_trainer_free(&tr);
}

/* --log-jsonl on a full disk (a file-size limit makes its writes fail, EFBIG): one warning
   line, the file cut back to its whole records (none ends mid-object), no more records, and
   training goes on.                                                                         */
static void check_jsonl_write_failure(void) {
    char line[1024], jsonl[512], warn[512], err[MG_ERRLEN], *text;
    mg_trainer tr;
    struct rlimit old, rl;
    void (*prev)(int);
    long len = 0, before;
    int rc, k, saved_stderr, warnings = 0;
    FILE *w;
    snprintf(jsonl, sizeof jsonl, "%s/full.jsonl", tmp);
    snprintf(warn, sizeof warn, "%s/full.stderr", tmp);
    snprintf(line, sizeof line, BASE "--train-iters 6 --log-interval 1 --log-jsonl %s", jsonl);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    if (rc) { mg_test_report(0, "cli: --log-jsonl on a full disk", "%s", err); return; }
    for (k = 0; k < 2; k++) {
        mg_step_result r = mg_trainer_step(&tr);
        mg_trainer_log(&tr, &r, NULL);
    }
    free(mg_test_read_file(jsonl, &before));
    getrlimit(RLIMIT_FSIZE, &old);
    rl = old;
    rl.rlim_cur = (rlim_t)before + 40;             /* the next record does not fit */
    prev = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &rl);
    fflush(stderr);
    saved_stderr = dup(2);
    w = fopen(warn, "w");
    dup2(fileno(w), 2);
    for (k = 0; k < 3; k++) {                      /* three more logged iterations */
        mg_step_result r = mg_trainer_step(&tr);
        mg_trainer_log(&tr, &r, NULL);
    }
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    fclose(w);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    text = (char *)mg_test_read_file(warn, &len);
    for (k = 0; text && k < len; k++) warnings += text[k] == '\n';
    mg_test_report(warnings == 1 && text && strstr(text, "gpt_train: warning: --log-jsonl ") &&
                   strstr(text, "cannot write the record of iteration 3 (File too large); the "
                          "file keeps the whole records before it, and no more are written "
                          "(training goes on)"), "cli: --log-jsonl on a full disk: one warning "
                   "line with the reason", "%.*s", (int)len, text ? text : "");
    free(text);
    text = (char *)mg_test_read_file(jsonl, &len);
    mg_test_report(tr.jsonl == NULL && tr.iteration == 5 && len == before && text &&
                   text[len - 1] == '\n', "cli: --log-jsonl on a full disk: the file keeps its "
                   "two whole records, training went on to iteration 5", "%ld bytes of %ld, "
                   "iteration %lld", len, before, (long long)tr.iteration);
    free(text);
    mg_trainer_free(&tr);
}

/* A validation loss that is nan prints a perplexity of NAN, not exp(700) = 1e304. */
static void check_nan_validation(void) {
    char err[MG_ERRLEN], text[4096] = {0};
    mg_trainer tr;
    FILE *out = tmpfile();
    int64_t i;
    size_t n;
    double loss;
    int rc = gpt_setup_line(&tr, "--train-data-path " GPT_DATA "gpt_tokens.bin "
                            "--valid-data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 "
                            "--num-layers 1 --hidden-size 16 --num-attention-heads 2 "
                            "--seq-length 8 --train-iters 2 --lr 1e-3 --eval-iters 1", NULL,
                            err, sizeof err);
    if (rc || !out) {
        mg_test_report(0, "cli: a nan validation loss prints a nan perplexity", "%s", err);
        if (out) fclose(out);
        return;
    }
    for (i = 0; i < tr.model.n_elems; i++) mg_gpt_fp32_params(&tr.model)[i] = NAN;
    loss = mg_trainer_evaluate(&tr, out);
    rewind(out);
    n = fread(text, 1, sizeof text - 1, out);
    text[n] = 0;
    fclose(out);
    mg_test_report(isnan(loss) && strstr(text, "lm loss value: NAN | lm loss PPL: NAN |"),
                   "cli: a nan validation loss prints a nan perplexity (not 1e304)", "%s", text);
    mg_trainer_free(&tr);
}

/* A checkpoint of iteration 1 (the base line, --seed 7) in dir. */
static void save_one_iteration(const char *dir) {
    char line[2048], err[MG_ERRLEN];
    mg_trainer tr;
    snprintf(line, sizeof line, BASE "--save %s --seed 7", dir);
    gpt_trainer_from_line(&tr, line);
    mg_trainer_step(&tr);
    if (mg_trainer_save(&tr, dir, err, sizeof err)) fprintf(stderr, "%s\n", err);
    mg_trainer_free(&tr);
}

/* The GELU a checkpoint was trained with comes back on --load without its flags: the exact
   one of --disable-bias-linear, the tanh one of --disable-bias-linear --openai-gelu; a flag
   that contradicts it is refused; a checkpoint from before --openai-gelu was stored (every
   GELU was the tanh one then) resumes with the tanh GELU.                                  */
static void check_gelu_on_resume(void) {
    static const struct { const char *flags; int erf; } saved[] = {
        {"--disable-bias-linear", 1}, {"--disable-bias-linear --openai-gelu", 0},
        {"--squared-relu", 2}};   /* erf 2: the squared ReLU */
    char line[2048], dir[512], err[MG_ERRLEN], what[200], state[700];
    mg_trainer tr;
    int i, rc;
    for (i = 0; i < 3; i++) {
        snprintf(dir, sizeof dir, "%s/gelu%d", tmp, i);
        snprintf(line, sizeof line, BASE "%s --save %s --seed 7", saved[i].flags, dir);
        gpt_trainer_from_line(&tr, line);
        mg_trainer_step(&tr);
        rc = mg_trainer_save(&tr, dir, err, sizeof err);
        mg_trainer_free(&tr);
        if (rc) { mg_test_report(0, "cli: save for the GELU resume", "%s", err); return; }
        snprintf(line, sizeof line, BASE "--load %s --seed 7", dir);
        rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
        snprintf(what, sizeof what, "cli: a checkpoint of %s resumes with %s, its flags left "
                 "out", saved[i].flags, saved[i].erf == 2 ? "the squared ReLU"
                 : saved[i].erf ? "the exact GELU" : "the tanh GELU");
        mg_test_report(!rc && tr.cfg.gelu_erf == (saved[i].erf == 1) &&
                       tr.cfg.squared_relu == (saved[i].erf == 2), what, "%s", rc ? err : "");
        if (!rc) mg_trainer_free(&tr);
    }
    /* a Hugging Face GPT-2 file says which GELU it computes: a flag that contradicts it */
#define HF_LINE "--data-path " GPT_DATA "gpt_tokens.bin --seq-length 8 --train-iters 2 " \
                "--lr 1e-3 --split 1,0,0 --eval-iters 0 --init-from " GPT_DATA
    expect_error("--openai-gelu against an exact-GELU Hugging Face file", HF_LINE "hf_gelu "
                 "--openai-gelu", "^--openai-gelu (the tanh GELU) differs from " GPT_DATA
                 "hf_gelu/model.safetensors, whose GELU is the exact one");
    expect_error("--no-bias-gelu-fusion against GPT-2's tanh GELU", HF_LINE "hf_base "
                 "--no-bias-gelu-fusion", "^--no-bias-gelu-fusion (the exact GELU) differs "
                 "from " GPT_DATA "hf_base/model.safetensors, whose GELU is the tanh "
                 "approximation");
    expect_error("--squared-relu against a GELU Hugging Face file", HF_LINE "hf_base "
                 "--squared-relu", "^--squared-relu differs from " GPT_DATA
                 "hf_base/model.safetensors, whose MLP computes GELU");
    rc = gpt_setup_line(&tr, HF_LINE "hf_relu2 --no-bias-gelu-fusion", NULL, err, sizeof err);
    mg_test_report(!rc && tr.cfg.squared_relu && tr.model.tf.cfg.act == MG_ACT_RELU2,
                   "cli: --init-from a squared-ReLU Hugging Face file: the squared ReLU, no flag "
                   "needed (a GELU flag beside it changes nothing)", "%s", rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
    rc = gpt_setup_line(&tr, HF_LINE "hf_gelu", NULL, err, sizeof err);
    mg_test_report(!rc && tr.cfg.gelu_erf && tr.model.tf.cfg.act == MG_ACT_GELU_ERF,
                   "cli: --init-from an exact-GELU Hugging Face file: the exact GELU, no flag "
                   "needed", "%s", rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
#undef HF_LINE
    snprintf(line, sizeof line, BASE "--load %s/gelu0 --seed 7 --openai-gelu", tmp);
    expect_error("--openai-gelu against an exact-GELU checkpoint", line, "--openai-gelu on the "
                 "command line differs from the checkpoint");
    /* gelu1's state.json without its "openai-gelu" key: a checkpoint from before the flag */
    snprintf(state, sizeof state, "%s/gelu1/iter_0000001/state.json", tmp);
    {
        long len = 0;
        char *text = (char *)mg_test_read_file(state, &len), *key;
        char *end;
        if (!text || !(key = strstr(text, ",\n    \"openai-gelu\": true"))) {
            mg_test_report(0, "cli: state.json holds \"openai-gelu\": true", "%s", state);
            free(text);
            return;
        }
        end = key + strlen(",\n    \"openai-gelu\": true");
        memmove(key, end, (size_t)(text + len - end));
        write_file(state, text, (size_t)(len - (end - key)));
        free(text);
    }
    snprintf(line, sizeof line, BASE "--load %s/gelu1 --seed 7", tmp);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.cfg.gelu_erf == 0 && tr.cfg.disable_bias_linear,
                   "cli: a --disable-bias-linear checkpoint from before --openai-gelu was stored "
                   "resumes with the tanh GELU it trained with", "%s", rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
}

/* --apply-layernorm-1p (zero-centred norm weights): the norm weights start at 0 and the run
   is the plain model's with every norm scale stored minus 1 — step 1 bit for bit (the same
   effective weights, so the same gradients and the same Adam update), then equal to rounding
   (1 + (w + Δ) against (1 + w) + Δ: norms take no weight decay). The export holds the scales
   (1 + w): a plain model imports it with the 1p model's weights, and a 1p model imports them
   back to within an ulp of 1. A checkpoint keeps the switch.                               */
static void check_layernorm_1p(void) {
    enum { STEPS = 12 };
    char line[2048], dir[512], err[MG_ERRLEN];
    mg_trainer a, b, c;
    float la[STEPS], lb[STEPS], na[STEPS], nb[STEPS];
    float *wa, *wc;
    double e_loss, e_norm, e_w = 0, e_back = 0;
    int zero = 1, i, rc, nrm = 0;
    int64_t k;
    snprintf(line, sizeof line, BASE "--seed 7 --train-iters %d --apply-layernorm-1p", STEPS);
    gpt_setup_or_die(&a, line, NULL);
    snprintf(line, sizeof line, BASE "--seed 7 --train-iters %d", STEPS);
    gpt_setup_or_die(&b, line, NULL);
    wa = gpt_host(&a.model, a.model.param_buf);
    for (i = 0; i < a.model.n_params; i++) {
        const mg_param_desc *d = &a.model.params[i];
        if (d->kind != MG_LN1_W && d->kind != MG_LN2_W && d->kind != MG_LNF_W) continue;
        nrm++;
        for (k = 0; k < d->numel; k++) zero &= wa[d->offset + k] == 0.0f;
    }
    free(wa);
    mg_test_report(zero && nrm == 3, "cli: --apply-layernorm-1p: the norm weights start at 0 "
                   "(the scale 1 + 0)", "%d norm weights", nrm);
    gpt_train_steps(&a, STEPS, la, na);
    gpt_train_steps(&b, STEPS, lb, nb);
    e_loss = mg_test_max_rel(la, lb, STEPS, 0);
    e_norm = mg_test_max_rel(na, nb, STEPS, 0);
    mg_test_report(la[0] == lb[0] && na[0] == nb[0] && e_loss <= 1e-6 && e_norm <= 1e-5,
                   "cli: --apply-layernorm-1p trains as the plain model (step 1 bit for bit, then "
                   "to rounding)", "loss 1: %.9g vs %.9g; %d steps: losses %.3g, grad norms %.3g",
                   la[0], lb[0], STEPS, e_loss, e_norm);
    gpt_tmpdir(dir, sizeof dir, "ln1p");
    snprintf(line, sizeof line, "%s/hf", dir);
    rc = mg_gpt_export_hf(&a.model, line, err, sizeof err);
    if (rc) mg_test_report(0, "cli: --apply-layernorm-1p model exports", "%s", err);
    for (i = 0; i < 2 && !rc; i++) {   /* into a plain model, then into a 1p one */
        snprintf(line, sizeof line, BASE "--train-iters 1 --init-from %s/hf%s", dir,
                 i ? " --apply-layernorm-1p" : "");
        rc = gpt_setup_line(&c, line, NULL, err, sizeof err);
        if (rc) { mg_test_report(0, "cli: import of the 1p export", "%s", err); break; }
        wa = gpt_host(&a.model, a.model.param_buf);
        wc = gpt_host(&c.model, c.model.param_buf);
        for (k = 0; k < a.model.n_elems; k++) {
            int j = 0, norm_w = 0;
            for (j = 0; j < a.model.n_params; j++) {
                const mg_param_desc *d = &a.model.params[j];
                if (k >= d->offset && k < d->offset + d->numel)
                    norm_w = d->kind == MG_LN1_W || d->kind == MG_LN2_W || d->kind == MG_LNF_W;
            }
            if (i == 0) {   /* the plain model holds the scales: fl(1 + w), exactly */
                double want = norm_w ? (double)(1.0f + wa[k]) : (double)wa[k];
                if ((double)wc[k] != want) e_w = 1;
            } else {        /* back to w: within half an ulp of 1 */
                double d = fabs((double)wc[k] - (double)wa[k]);
                if (d > e_back) e_back = d;
            }
        }
        free(wa);
        free(wc);
        mg_trainer_free(&c);
    }
    if (!rc) {
        mg_test_report(e_w == 0, "cli: the 1p export holds the scales 1 + w: a plain model "
                       "imports them bit for bit, the rest as it is", "%s", e_w ? "differs" : "");
        mg_test_report(e_back <= 0x1p-24, "cli: a 1p model imports the export back to within "
                       "half an ulp of 1", "max |w' - w| %.3g", e_back);
    }
    /* the switch in the checkpoint */
    snprintf(line, sizeof line, "%s/ck", dir);
    rc = mg_trainer_save(&a, line, err, sizeof err);
    mg_trainer_free(&a);
    mg_trainer_free(&b);
    if (!rc) {
        snprintf(line, sizeof line, BASE "--seed 7 --train-iters %d --load %s/ck", STEPS, dir);
        rc = gpt_setup_line(&c, line, NULL, err, sizeof err);
        mg_test_report(!rc && c.cfg.layernorm_1p && c.model.tf.cfg.norm.zero_centered,
                       "cli: a checkpoint of --apply-layernorm-1p resumes with it, the flag "
                       "left out", "%s", rc ? err : "");
        if (!rc) mg_trainer_free(&c);
    } else {
        mg_test_report(0, "cli: save of the 1p model", "%s", err);
    }
    gpt_rmtree(dir);
}

/* --no-save-optim: the checkpoint holds model.safetensors and state.json, no moments; a resume
   without --no-load-optim or --finetune is refused with one line (Megatron-LM exits too),
   with --no-load-optim it takes the weights (bit for bit), the iteration and the samples.   */
static void check_no_save_optim(void) {
    char line[2048], dir[512], path[700], err[MG_ERRLEN];
    mg_trainer a, b;
    float *wa, *wb;
    int rc, same = 0, files;
    gpt_tmpdir(dir, sizeof dir, "nosaveoptim");
    snprintf(line, sizeof line, BASE "--seed 7 --no-save-optim --save %s", dir);
    gpt_setup_or_die(&a, line, NULL);
    mg_trainer_step(&a);
    rc = mg_trainer_save(&a, dir, err, sizeof err);
    snprintf(path, sizeof path, "%s/iter_0000001/model.safetensors", dir);
    files = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/iter_0000001/state.json", dir);
    files += access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/iter_0000001/optimizer.safetensors", dir);
    files += 2 * (access(path, F_OK) == 0);
    snprintf(path, sizeof path, "%s/iter_0000001/optimizer_sq.safetensors", dir);
    files += 2 * (access(path, F_OK) == 0);
    mg_test_report(!rc && files == 2, "cli: --no-save-optim: the checkpoint holds "
                   "model.safetensors and state.json, no optimizer files", "%s", rc ? err : "");
    snprintf(line, sizeof line, BASE "--load %s", dir);
    expect_error("--load of a --no-save-optim checkpoint without --no-load-optim", line,
                 "holds no optimizer state (saved with --no-save-optim): give --no-load-optim");
    snprintf(line, sizeof line, BASE "--load %s --no-load-optim", dir);
    rc = gpt_setup_line(&b, line, NULL, err, sizeof err);
    if (!rc) {
        wa = gpt_host(&a.model, a.model.param_buf);
        wb = gpt_host(&b.model, b.model.param_buf);
        same = !memcmp(wa, wb, sizeof(float) * (size_t)a.model.n_elems) && b.iteration == 1 &&
               b.consumed_samples == a.consumed_samples;
        free(wa);
        free(wb);
        mg_trainer_free(&b);
    }
    mg_test_report(same, "cli: --no-load-optim resumes a --no-save-optim checkpoint: its "
                   "weights bit for bit, iteration 1, its samples", "%s", rc ? err : "");
    snprintf(line, sizeof line, BASE "--load %s --finetune", dir);
    rc = gpt_setup_line(&b, line, NULL, err, sizeof err);
    mg_test_report(!rc && b.iteration == 0, "cli: --finetune from a --no-save-optim checkpoint",
                   "%s", rc ? err : "");
    if (!rc) mg_trainer_free(&b);
    mg_trainer_free(&a);
    gpt_rmtree(dir);
}

/* --decoupled-lr / --decoupled-min-lr (Megatron-LM's decoupled param group: the word
   embedding and the output layer): equal to --lr and --min-lr the run is the plain one bit
   for bit; --decoupled-lr 0 freezes exactly those tensors (weight decay scales with the rate
   too) while everything else trains; the log line's decoupled rate follows the schedule; a
   checkpoint keeps the pair (a resume with another is refused, the checkpoint's is taken with
   --use-checkpoint-opt_param-scheduler).                                                     */
static int compat_notes(const char *line, char *notes, size_t cap);
static void check_decoupled_lr(void) {
    enum { STEPS = 6 };
#define DEC "--seed 7 --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters 2 " \
            "--lr-decay-iters 6 --weight-decay 0.1 --untie-embeddings-and-output-weights "
    char line[2048], dir[512], err[MG_ERRLEN];
    mg_trainer a, b;
    float la[STEPS], lb[STEPS], na[STEPS], nb[STEPS], *w0, *w1;
    int i, frozen = 1, moved = 1, same, rc;
    mg_step_result r;
    snprintf(line, sizeof line, BASE DEC "--train-iters %d --decoupled-lr 2e-3 "
             "--decoupled-min-lr 2e-4", STEPS);
    gpt_setup_or_die(&a, line, NULL);
    snprintf(line, sizeof line, BASE DEC "--train-iters %d", STEPS);
    gpt_setup_or_die(&b, line, NULL);
    gpt_train_steps(&a, STEPS, la, na);
    gpt_train_steps(&b, STEPS, lb, nb);
    w0 = gpt_host(&a.model, a.model.param_buf);
    w1 = gpt_host(&b.model, b.model.param_buf);
    same = !memcmp(la, lb, sizeof la) && !memcmp(na, nb, sizeof na) &&
           !memcmp(w0, w1, sizeof(float) * (size_t)a.model.n_elems);
    mg_test_report(same, "cli: --decoupled-lr = --lr, --decoupled-min-lr = --min-lr: the plain "
                   "run bit for bit", "%d steps", STEPS);
    free(w0);
    free(w1);
    mg_trainer_free(&a);
    mg_trainer_free(&b);
    {   /* the minimum alone: nothing to apply it to, one warning */
        char notes[400];
        CHECK(compat_notes(BASE "--decoupled-min-lr 1e-5", notes, sizeof notes) &&
              !strcmp(notes, "gpt_train: warning: --decoupled-min-lr without --decoupled-lr "
                      "changes nothing (as in Megatron-LM: there is no decoupled param group "
                      "without it)\n"), "cli: --decoupled-min-lr alone: one warning");
    }
    /* --decoupled-lr 0 --decoupled-min-lr 0 (the minimum defaults to --min-lr's 2e-4): the
       word embedding and the output layer stay; the rest trains */
    snprintf(line, sizeof line, BASE DEC "--train-iters %d --decoupled-lr 0 --decoupled-min-lr 0",
             STEPS);
    gpt_setup_or_die(&a, line, NULL);
    w0 = gpt_host(&a.model, a.model.param_buf);
    for (i = 0; i < STEPS; i++) r = mg_trainer_step(&a);
    w1 = gpt_host(&a.model, a.model.param_buf);
    for (i = 0; i < a.model.n_params; i++) {
        const mg_param_desc *d = &a.model.params[i];
        int dec = d->kind == MG_WTE || d->kind == MG_OUT_W;
        int changed = memcmp(w0 + d->offset, w1 + d->offset, sizeof(float) * (size_t)d->numel);
        if (dec && changed) frozen = 0;
        if (!dec && d->ndim == 2 && !changed) moved = 0;
    }
    mg_test_report(frozen && moved && r.lr2 == 0.0 && r.lr > 0, "cli: --decoupled-lr 0 "
                   "--decoupled-min-lr 0 freezes the word embedding and the output layer exactly "
                   "(decay too); every other weight trains", "lr %g, decoupled %g", r.lr, r.lr2);
    free(w0);
    free(w1);
    /* the checkpoint keeps the pair */
    gpt_tmpdir(dir, sizeof dir, "decoupled");
    rc = mg_trainer_save(&a, dir, err, sizeof err);
    mg_trainer_free(&a);
    if (rc) { mg_test_report(0, "cli: save with --decoupled-lr", "%s", err); gpt_rmtree(dir); return; }
    snprintf(line, sizeof line, BASE DEC "--train-iters %d --load %s --decoupled-lr 1e-3 "
             "--decoupled-min-lr 0", STEPS + 2, dir);
    expect_error("resume with another --decoupled-lr", line, "--decoupled-lr 0.001 differs "
                 "from the checkpoint's 0 (on resume");
    snprintf(line, sizeof line, BASE DEC "--train-iters %d --load %s --decoupled-lr 0",
             STEPS + 2, dir);
    expect_error("resume with another --decoupled-min-lr", line, "--decoupled-min-lr 0.0002 "
                 "differs from the checkpoint's 0 (on resume");
    snprintf(line, sizeof line, BASE DEC "--train-iters %d --load %s", STEPS + 2, dir);
    expect_error("resume without the checkpoint's --decoupled-lr", line, "--decoupled-lr "
                 "(not given) differs from the checkpoint's 0 (");
    snprintf(line, sizeof line, BASE DEC "--train-iters %d --load %s "
             "--use-checkpoint-opt_param-scheduler", STEPS + 2, dir);
    rc = gpt_setup_line(&a, line, NULL, err, sizeof err);
    mg_test_report(!rc && a.sched.decoupled && a.sched.decoupled_max_lr == 0.0 &&
                   a.sched.decoupled_min_lr == 0.0, "cli: --use-checkpoint-opt_param-scheduler "
                   "takes the checkpoint's --decoupled-lr 0 and --decoupled-min-lr 0", "%s",
                   rc ? err : "");
    if (!rc) mg_trainer_free(&a);
    gpt_rmtree(dir);
#undef DEC
}

/* --finetune (Megatron-LM's): the weights of --load's latest checkpoint and nothing else —
   iteration 0, no samples consumed, no optimizer steps, the command line's seed and schedule
   (another --seed and --lr than the checkpoint's are taken, where a resume refuses them). */
static void check_finetune(void) {
    char line[2048], dir[512], err[MG_ERRLEN];
    mg_trainer tr, ref;
    float *want, *got;
    int rc;
    snprintf(dir, sizeof dir, "%s/finetune", tmp);
    save_one_iteration(dir);                        /* --seed 7, --lr 1e-3, one iteration */
    snprintf(line, sizeof line, BASE "--load %s", dir);
    gpt_setup_or_die(&ref, line, NULL);
    want = gpt_host(&ref.model, ref.model.param_buf);
    snprintf(line, sizeof line, BASE "--load %s --finetune --seed 11 --lr 5e-4", dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    got = rc ? NULL : gpt_host(&tr.model, tr.model.param_buf);
    mg_test_report(!rc && tr.load_found == 3 && tr.iteration == 0 && tr.loaded_iteration == -1 &&
                   tr.consumed_samples == 0 && tr.opt.step == 0 && tr.args.seed == 11 &&
                   tr.sched.max_lr == 5e-4 && ref.iteration == 1 &&
                   !memcmp(got, want, sizeof(float) * (size_t)ref.model.n_elems),
                   "cli: --load DIR --finetune: the checkpoint's weights, iteration 0, no "
                   "optimizer steps, the line's --seed and --lr", "%s", rc ? err : "");
    free(got);
    free(want);
    if (!rc) mg_trainer_free(&tr);
    mg_trainer_free(&ref);
}

/* --no-load-optim (Megatron-LM's): --load's weights, iteration and consumed samples, not its
   optimizer — zero Adam moments, step 0 — so the learning-rate schedule starts again: a
   changed schedule is taken without --override-opt_param-scheduler (no scheduler state is
   loaded to compare), and with one warm-up iteration the first update's rate is 0. Without
   --load it is refused.                                                                    */
static void check_no_load_optim(void) {
    char line[2048], dir[512], err[MG_ERRLEN];
    mg_trainer tr, ref;
    float *want, *got, *m, *v;
    int rc, zero = 0;
    int64_t i;
    mg_step_result r;
    memset(&r, 0, sizeof r);
    snprintf(dir, sizeof dir, "%s/no_load_optim", tmp);
    save_one_iteration(dir);                        /* --seed 7, --lr 1e-3, one iteration */
    snprintf(line, sizeof line, BASE "--load %s", dir);
    gpt_setup_or_die(&ref, line, NULL);
    want = gpt_host(&ref.model, ref.model.param_buf);
    snprintf(line, sizeof line, BASE "--load %s --no-load-optim --lr 2e-3 --lr-warmup-iters 1 "
             "--train-iters 3 --log-interval 1", dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    got = rc ? NULL : gpt_host(&tr.model, tr.model.param_buf);
    m = rc ? NULL : gpt_host(&tr.model, tr.opt.m);
    v = rc ? NULL : gpt_host(&tr.model, tr.opt.v);
    for (i = 0; !rc && i < tr.model.n_elems; i++) zero += m[i] == 0.0f && v[i] == 0.0f;
    mg_test_report(!rc && tr.iteration == 1 && tr.loaded_iteration == 1 && ref.opt.step == 1 &&
                   tr.opt.step == 0 && tr.consumed_samples == ref.consumed_samples &&
                   tr.sched.max_lr == 2e-3 && zero == tr.model.n_elems &&
                   !memcmp(got, want, sizeof(float) * (size_t)ref.model.n_elems),
                   "cli: --load DIR --no-load-optim: the checkpoint's weights, iteration and "
                   "samples; zero moments, step 0; the line's schedule", "%s",
                   rc ? err : "");
    if (!rc) r = mg_trainer_step(&tr);
    mg_test_report(!rc && r.has_values && r.lr == 0.0 && tr.iteration == 2 && tr.opt.step == 1,
                   "cli: --no-load-optim: the schedule starts again (warm-up: the first "
                   "update's learning rate 0)", "lr %g", r.lr);
    free(got);
    free(m);
    free(v);
    if (!rc) mg_trainer_free(&tr);
    /* bf16: the fp32 masters are the checkpoint's weights rounded to bf16 (Megatron's
       reload_model_params), or with --load-main-params-from-ckpt the checkpoint's own */
    for (i = 0; i < 2; i++) {
        int64_t k, same = 0;
        snprintf(line, sizeof line, BASE "--load %s --no-load-optim --bf16%s", dir,
                 i ? " --load-main-params-from-ckpt" : "");
        rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
        got = rc ? NULL : gpt_host(&tr.model, mg_gpt_fp32_params(&tr.model));
        for (k = 0; !rc && k < tr.model.n_elems; k++)
            same += got[k] == (i ? want[k] : mg_bf16_to_f32(mg_f32_to_bf16(want[k])));
        mg_test_report(!rc && same == tr.model.n_elems, i ? "cli: --no-load-optim "
                       "--load-main-params-from-ckpt --bf16: the checkpoint's fp32 masters"
                       : "cli: --no-load-optim --bf16: the masters are the checkpoint's "
                       "weights rounded to bf16, as Megatron-LM's reload_model_params",
                       "%s %lld of %lld", rc ? err : "", (long long)same,
                       rc ? 0LL : (long long)tr.model.n_elems);
        free(got);
        if (!rc) mg_trainer_free(&tr);
    }
    free(want);
    mg_trainer_free(&ref);
    expect_error("--no-load-optim without --load", BASE "--no-load-optim",
                 "^--no-load-optim applies to the checkpoint of --load (no --load given)");
    snprintf(line, sizeof line, BASE "--load %s --load-main-params-from-ckpt", dir);
    expect_error("--load-main-params-from-ckpt without --no-load-optim", line,
                 "^--load-main-params-from-ckpt must be used with --no-load-optim");
}

/* Resuming with another learning-rate schedule (the checkpoint of save_one_iteration: --lr
   1e-3, linear decay over --train-iters 2, weight decay 0.01), as Megatron-LM's
   OptimizerParamScheduler: a difference is an error naming the flag and both values;
   --override-opt_param-scheduler takes the command line's, --use-checkpoint-opt_param-
   scheduler the checkpoint's (then --lr may be left out); a checkpoint written before the
   schedule was stored is not checked.                                                      */
static void check_schedule_on_resume(const char *dir) {
    static const char *const changed[][2] = {
        {"--lr 2e-3", "^--lr 0.002 differs from the checkpoint's 0.001 (on resume Megatron-LM's "
                      "OptimizerParamScheduler refuses a changed schedule: give "
                      "--use-checkpoint-opt_param-scheduler to keep the checkpoint's, or "
                      "--override-opt_param-scheduler to take the command line's)"},
        {"--min-lr 1e-4", "^--min-lr 0.0001 differs from the checkpoint's 0 ("},
        {"--lr-warmup-iters 1 --train-iters 3", "^--lr-warmup-iters 1 differs from the "
                                                "checkpoint's 0 ("},
        {"--train-iters 3", "^--train-iters 3 (the decay length without --lr-decay-iters) "
                            "differs from the checkpoint's 2 ("},
        {"--lr-decay-iters 5", "^--lr-decay-iters 5 differs from the checkpoint's 2 ("},
        {"--lr-decay-style cosine", "^--lr-decay-style cosine differs from the checkpoint's "
                                    "linear ("},
        {"--weight-decay 0.1", "^--weight-decay 0.1 differs from the checkpoint's 0.01 ("},
    };
    char line[2048], what[200], state[700], err[MG_ERRLEN];
    char *text, *cut;
    long len = 0;
    size_t i;
    mg_trainer tr;
    int rc;
    for (i = 0; i < sizeof changed / sizeof changed[0]; i++) {
        snprintf(line, sizeof line, BASE "--load %s --seed 7 %s", dir, changed[i][0]);
        snprintf(what, sizeof what, "--load with %s: the schedule differs", changed[i][0]);
        expect_error(what, line, changed[i][1]);
    }
    expect_error("both schedule switches", BASE "--override-opt_param-scheduler "
                 "--use-checkpoint-opt_param-scheduler", "^--override-opt_param-scheduler and "
                 "--use-checkpoint-opt_param-scheduler exclude each other");
    snprintf(line, sizeof line, BASE "--load %s --lr 2e-3 --train-iters 3 "
             "--override-opt_param-scheduler", dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.sched.max_lr == 2e-3 && tr.sched.decay_iters == 3,
                   "cli: --override-opt_param-scheduler: the command line's schedule (lr 2e-3, "
                   "decay 3)", "%s", rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
    /* the checkpoint's, --lr left out */
    snprintf(line, sizeof line, "--data-path " GPT_DATA "gpt_tokens.bin --train-iters 3 --split "
             "1,0,0 --eval-iters 0 --lr-decay-style cosine --weight-decay 0.5 --load %s "
             "--use-checkpoint-opt_param-scheduler", dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.sched.max_lr == 1e-3 && tr.sched.decay_iters == 2 &&
                   tr.sched.style == MG_LR_LINEAR && tr.args.weight_decay == 0.01,
                   "cli: --use-checkpoint-opt_param-scheduler: the checkpoint's schedule, --lr "
                   "left out", "%s", rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
    /* a checkpoint from before the schedule was stored: not checked */
    snprintf(state, sizeof state, "%s/iter_0000001/state.json", dir);
    text = (char *)mg_test_read_file(state, &len);
    if (!text || !(cut = strstr(text, "  \"opt_param_scheduler\""))) {
        mg_test_report(0, "cli: state.json holds opt_param_scheduler", "%s", state);
        free(text);
        return;
    }
    write_file(state, text, (size_t)(cut - text));
    {
        char *nl = strchr(cut, '\n') + 1;
        FILE *f = fopen(state, "ab");
        fwrite(nl, 1, (size_t)(text + len - nl), f);
        fclose(f);
    }
    snprintf(line, sizeof line, BASE "--load %s --train-iters 3", dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.sched.decay_iters == 3, "cli: --load of a checkpoint without "
                   "opt_param_scheduler (older files): the schedule is not checked", "%s",
                   rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
    write_file(state, text, (size_t)len);
    free(text);
}

/* The schedule of BASE + flags — its learning rates (at: mg_lr_at) or weight decays
   (mg_wd_at) after k = 0 … n − 1 updates — against Megatron-LM's, to 1e-14 relative, reported
   as what; returns 0 with the trainer set up in *tr (the caller frees it).                 */
static int expect_schedule(mg_trainer *tr, const char *flags,
                           double (*at)(const mg_lr_schedule *, int64_t), const double *megatron,
                           int n, const char *what) {
    char line[2048], err[MG_ERRLEN];
    double worst = 0;
    int rc, k;
    snprintf(line, sizeof line, BASE "%s", flags);
    rc = gpt_setup_line(tr, line, NULL, err, sizeof err);
    for (k = 0; !rc && k < n; k++) {
        double e = fabs(at(&tr->sched, k) - megatron[k]) / megatron[k];
        if (!(e <= worst)) worst = e;
    }
    mg_test_report(!rc && worst < 1e-14, what, "%s worst relative error %.3g", rc ? err : "",
                   worst);
    return rc;
}

/* --lr-warmup-fraction and --lr-warmup-init against Megatron-LM's OptimizerParamScheduler.get_lr
   (megatron/core/optimizer_param_scheduler.py) run in Python, counting samples as Megatron does
   (4 per iteration): warm-up 0.25 x 10 decay iterations = 2.5 iterations from 1e-4 to --lr 1e-3,
   then down to --min-lr 5e-5 at iteration 10; lr after k updates, k = 0 … 11.           */
static void check_warmup_fraction_and_init(void) {
    static const char *const styles[3] = {"cosine", "linear", "constant"};
    static const double megatron[3][12] = {
        {0.0001, 0.00045999999999999996, 0.00081999999999999998, 0.00098962011034855763,
         0.00090928307232810009, 0.00076250000000000005, 0.00057465102005213543,
         0.00037821692767190003, 0.00020716296197954249, 9.1065907619764538e-05,
         5.0000000000000002e-05, 5.0000000000000002e-05},
        {0.0001, 0.00045999999999999996, 0.00081999999999999998, 0.0009366666666666667,
         0.00081000000000000006, 0.00068333333333333343, 0.00055666666666666668,
         0.00043000000000000004, 0.00030333333333333341, 0.00017666666666666663,
         5.0000000000000002e-05, 5.0000000000000002e-05},
        {0.0001, 0.00045999999999999996, 0.00081999999999999998, 0.001, 0.001, 0.001, 0.001,
         0.001, 0.001, 0.001, 0.001, 0.001}};
    char flags[300], what[200];
    mg_trainer tr;
    int s;
    for (s = 0; s < 3; s++) {
        snprintf(flags, sizeof flags, "--micro-batch-size 4 --train-iters 12 --lr 1e-3 "
                 "--min-lr 5e-5 --lr-warmup-init 1e-4 --lr-warmup-fraction 0.25 "
                 "--lr-decay-iters 10 --lr-decay-style %s", styles[s]);
        snprintf(what, sizeof what, "cli: --lr-warmup-fraction 0.25 --lr-warmup-init 1e-4, "
                 "%s decay: the learning rates of Megatron-LM's scheduler", styles[s]);
        if (!expect_schedule(&tr, flags, mg_lr_at, megatron[s], 12, what)) mg_trainer_free(&tr);
    }
}

/* The learning-rate styles inverse-square-root and WSD and the weight-decay increment against
   Megatron-LM's OptimizerParamScheduler.get_lr and get_wd (megatron/core/
   optimizer_param_scheduler.py), transcribed in tests/oracle/lr_schedule.py and run there
   with the steps counted in samples as Megatron does (4 per iteration): --lr 1e-3 --min-lr
   5e-5 --lr-warmup-init 1e-4 over --lr-decay-iters 10 of --train-iters 12, the rates after
   k = 0 … 12 updates (past the decay's end included); WSD warms up over 2 iterations and
   anneals over the last 4 (from k = 6 to 10); inverse-square-root with 3 iterations of
   warm-up and with none (then the first rate is --lr and the next --lr / √4: samples); the
   weight decay from 0.01 to 0.1 over the 12 iterations, k = 0 … 14. The trainer's fused
   step then takes each iteration's weight decay (mg_optim_state's args).                 */
static void check_lr_styles_and_weight_decay_incr(void) {
    static const char *const lr_flags[6] = {
        "--lr-decay-style inverse-square-root --lr-warmup-iters 3",
        "--lr-decay-style inverse-square-root",
        "--lr-decay-style WSD --lr-warmup-iters 2 --lr-wsd-decay-iters 4",
        "--lr-decay-style WSD --lr-warmup-iters 2 --lr-wsd-decay-iters 4 "
        "--lr-wsd-decay-style linear",
        "--lr-decay-style WSD --lr-warmup-iters 2 --lr-wsd-decay-iters 4 "
        "--lr-wsd-decay-style cosine",
        "--lr-decay-style WSD --lr-warmup-iters 2 --lr-wsd-decay-iters 4 "
        "--lr-wsd-decay-style minus_sqrt"};
    static const double megatron_lr[6][13] = {
        /* inverse-square-root, warm-up 3 */
        {0.0001, 0.00039999999999999996, 0.0007, 0.001, 0.0008660254037844386,
         0.0007745966692414833, 0.0007071067811865475, 0.000654653670707977,
         0.0006123724356957945, 0.0005773502691896257, 0.000547722557505166, 5e-05, 5e-05},
        /* inverse-square-root, warm-up 0 */
        {0.001, 0.0005, 0.00035355339059327376, 0.0002886751345948129, 0.00025,
         0.00022360679774997895, 0.00020412414523193154, 0.0001889822365046136,
         0.00017677669529663688, 0.00016666666666666666, 0.00015811388300841897, 5e-05, 5e-05},
        /* WSD, warm-up 2, annealing 4 (exponential) */
        {0.0001, 0.00055, 0.001, 0.001, 0.001, 0.001, 0.001, 0.0006977031889820576,
         0.0004435028842544404, 0.00022974675925258498, 5e-05, 5e-05, 5e-05},
        /* WSD, warm-up 2, annealing 4 (linear) */
        {0.0001, 0.00055, 0.001, 0.001, 0.001, 0.001, 0.001, 0.0007625, 0.000525, 0.0002875,
         5e-05, 5e-05, 5e-05},
        /* WSD, warm-up 2, annealing 4 (cosine) */
        {0.0001, 0.00055, 0.001, 0.001, 0.001, 0.001, 0.001, 0.0008608757210636101, 0.000525,
         0.00018912427893638995, 5e-05, 5e-05, 5e-05},
        /* WSD, warm-up 2, annealing 4 (minus_sqrt) */
        {0.0001, 0.00055, 0.001, 0.001, 0.001, 0.001, 0.001, 0.000525, 0.0003282485578727798,
         0.00017727586640478333, 5e-05, 5e-05, 5e-05},
    };
    static const char *const wd_styles[2] = {"linear", "cosine"};
    static const double megatron_wd[2][15] = {
        /* weight decay 0.01 -> 0.1 over 12 iterations (linear) */
        {0.01, 0.0175, 0.025, 0.0325, 0.04, 0.04750000000000001, 0.05500000000000001,
         0.06250000000000001, 0.07, 0.0775, 0.085, 0.0925, 0.1, 0.1, 0.1},
        /* weight decay 0.01 -> 0.1 over 12 iterations (cosine) */
        {0.01, 0.011533337816991932, 0.01602885682970026, 0.023180194846605363,
         0.032499999999999994, 0.04335314297038659, 0.05500000000000001, 0.06664685702961345,
         0.0775, 0.08681980515339464, 0.09397114317029975, 0.09846666218300808, 0.1, 0.1, 0.1},
    };
    char flags[300], what[300];
    mg_trainer tr;
    int s, k;
    for (s = 0; s < 6; s++) {
        snprintf(flags, sizeof flags, "--micro-batch-size 4 --train-iters 12 --lr 1e-3 "
                 "--min-lr 5e-5 --lr-warmup-init 1e-4 --lr-decay-iters 10 %s", lr_flags[s]);
        snprintf(what, sizeof what, "cli: %s: the learning rates of Megatron-LM's scheduler "
                 "after 0 … 12 updates", lr_flags[s]);
        if (!expect_schedule(&tr, flags, mg_lr_at, megatron_lr[s], 13, what))
            mg_trainer_free(&tr);
    }
    for (s = 0; s < 2; s++) {
        int stepped = 1;
        snprintf(flags, sizeof flags, "--micro-batch-size 4 --train-iters 12 "
                 "--weight-decay-incr-style %s --start-weight-decay 0.01 "
                 "--end-weight-decay 0.1", wd_styles[s]);
        snprintf(what, sizeof what, "cli: --weight-decay-incr-style %s 0.01 -> 0.1: the weight "
                 "decays of Megatron-LM's scheduler after 0 … 14 updates", wd_styles[s]);
        if (expect_schedule(&tr, flags, mg_wd_at, megatron_wd[s], 15, what)) continue;
        for (k = 0; k < 3; k++) {   /* iteration k + 1 decays by the weight decay after k */
            mg_trainer_step(&tr);
            stepped &= tr.opt.state->args.weight_decay == (float)megatron_wd[s][k];
        }
        snprintf(what, sizeof what, "cli: --weight-decay-incr-style %s: the fused AdamW step of "
                 "iterations 1 … 3 takes the schedule's weight decay", wd_styles[s]);
        mg_test_report(stepped, what, "");
        mg_trainer_free(&tr);
    }
}

/* Sample-based training (Megatron-LM's --train-samples, --lr-decay-samples,
   --lr-warmup-samples, --lr-wsd-decay-samples): --train-samples 50 with 4 samples an iteration
   trains 12 iterations, and the schedule's lengths, none a multiple of 4, stay in samples.
   The rates and weight decays after k = 0 … 12 (14) updates against Megatron-LM's
   OptimizerParamScheduler run in Python with those lengths (tests/oracle/lr_schedule.py), to
   1e-14; a checkpoint of such a run (its lengths fractions of an iteration) resumes, refuses
   another length naming it in samples, and --use-checkpoint-opt_param-scheduler takes it back
   in samples; and Megatron's validate_args: the sample flags need --train-samples, the
   iteration ones are refused with it.                                                       */
#define SBASE "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 --num-layers 1 " \
              "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --lr 1e-3 --split 1,0,0 " \
              "--eval-iters 0 --micro-batch-size 4 --train-samples 50 --min-lr 5e-5 " \
              "--lr-warmup-init 1e-4 "
static void check_sample_based(void) {
    static const char *const lr_flags[5] = {
        "--lr-warmup-samples 9 --lr-decay-samples 41 --lr-decay-style cosine",
        "--lr-warmup-samples 9 --lr-decay-samples 41 --lr-decay-style linear",
        "--lr-warmup-samples 9 --lr-decay-samples 41 --lr-decay-style WSD "
        "--lr-wsd-decay-samples 17 --lr-wsd-decay-style cosine",
        "--lr-warmup-samples 9 --lr-decay-samples 41 --lr-decay-style inverse-square-root",
        "--lr-warmup-fraction 0.25 --lr-decay-samples 41 --lr-decay-style cosine"};
    static const double megatron_lr[5][13] = {
        /* samples: warm-up 9, decay 41 (cosine) */
        {0.0001, 0.0005, 0.0009, 0.0009795466594727993, 0.0008921799653473,
         0.0007489134499923491, 0.0005715581416565414, 0.0003871147783041305,
         0.00022366319002226843, 0.0001060873994345314, 5.228725483070651e-05, 5e-05, 5e-05},
        /* samples: warm-up 9, decay 41 (linear) */
        {0.0001, 0.0005, 0.0009, 0.0009109375000000001, 0.0007921875, 0.0006734375,
         0.0005546875000000001, 0.0004359375, 0.00031718750000000003, 0.0001984375, 7.96875e-05,
         5e-05, 5e-05},
        /* samples: warm-up 9, decay 41, WSD annealing 17 (cosine) */
        {0.0001, 0.0005, 0.0009, 0.001, 0.001, 0.001, 0.001, 0.0008760292356798131,
         0.0005688274707450685, 0.00023874854771985325, 5.808777765014666e-05, 5e-05, 5e-05},
        /* samples: warm-up 9, decay 41 (inverse-square-root) */
        {0.0001, 0.0005, 0.0009, 0.0008660254037844387, 0.00075, 0.0006708203932499369,
         0.0006123724356957946, 0.0005669467095138408, 0.0005303300858899106, 0.0005,
         0.00047434164902525685, 5e-05, 5e-05},
        /* samples: warm-up 0.25 x 41 (cosine) */
        {0.0001, 0.0004512195121951219, 0.0008024390243902439, 0.0009924283239048921,
         0.0009203688293623029, 0.0007831945862505801, 0.0006034973258521003,
         0.00041087205176965617, 0.00023704292979084707, 0.00011063851819099189,
         5.247682503772102e-05, 5e-05, 5e-05}};
    static const double megatron_wd[15] = {
        /* samples: weight decay 0.01 -> 0.1 over --train-samples 50 (linear) */
        0.01, 0.0172, 0.0244, 0.0316, 0.0388, 0.046000000000000006, 0.053200000000000004,
        0.06040000000000001, 0.06760000000000001, 0.0748, 0.082, 0.0892, 0.0964, 0.1, 0.1};
    static const char *const errors[][2] = {
        {"--train-iters 12", "^--train-samples and --train-iters exclude each other"},
        {"--lr-decay-iters 10", "^--lr-decay-iters with --train-samples: the schedule is counted "
                                "in samples (give --lr-decay-samples)"},
        {"--lr-warmup-iters 2", "^--lr-warmup-iters with --train-samples: the schedule is "
                                "counted in samples (give --lr-warmup-samples)"},
        {"--lr-decay-style WSD --lr-wsd-decay-iters 2", "^--lr-wsd-decay-iters with "
                                                        "--train-samples"},
        {"--lr-decay-style WSD", "^--lr-decay-style WSD needs --lr-wsd-decay-samples N (the "
                                 "samples of its annealing"},
        {"--lr-warmup-fraction 0.1 --lr-warmup-samples 4", "^--lr-warmup-fraction and "
                                                           "--lr-warmup-samples 4 exclude"},
        {"--lr-warmup-samples 41 --lr-decay-samples 41", "^--lr-warmup-samples 41: the warm-up "
                                                         "must be shorter than the decay, "
                                                         "--lr-decay-samples 41"},
        {"--global-batch-size 64", "^--train-samples 50 is less than one global batch "
                                   "(--global-batch-size 64)"},
    };
    char flags[400], line[2048], what[300], err[MG_ERRLEN], dir[600];
    mg_trainer tr;
    int s, k, rc;
    for (s = 0; s < 5; s++) {
        snprintf(line, sizeof line, SBASE "%s", lr_flags[s]);
        snprintf(what, sizeof what, "cli: --train-samples 50 %s: the learning rates of "
                 "Megatron-LM's scheduler after 0 … 12 updates (samples)", lr_flags[s]);
        rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
        if (!rc) {
            double worst = 0;
            for (k = 0; k < 13; k++) {
                double e = fabs(mg_lr_at(&tr.sched, k) - megatron_lr[s][k]) / megatron_lr[s][k];
                if (!(e <= worst)) worst = e;
            }
            mg_test_report(worst < 1e-14 && tr.args.train_iters == 12, what, "worst relative "
                           "error %.3g, %lld iterations", worst, (long long)tr.args.train_iters);
            mg_trainer_free(&tr);
        } else {
            mg_test_report(0, what, "%s", err);
        }
    }
    snprintf(line, sizeof line, SBASE "--weight-decay-incr-style linear --start-weight-decay "
             "0.01 --end-weight-decay 0.1");
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    if (!rc) {
        double worst = 0;
        for (k = 0; k < 15; k++) {
            double e = fabs(mg_wd_at(&tr.sched, k) - megatron_wd[k]) / megatron_wd[k];
            if (!(e <= worst)) worst = e;
        }
        mg_test_report(worst < 1e-14, "cli: --train-samples 50: the weight-decay increment over "
                       "50 samples, Megatron-LM's get_wd", "worst relative error %.3g", worst);
        mg_trainer_free(&tr);
    } else {
        mg_test_report(0, "cli: --train-samples 50: the weight-decay increment", "%s", err);
    }
    for (k = 0; k < (int)(sizeof errors / sizeof errors[0]); k++) {
        snprintf(line, sizeof line, SBASE "%s", errors[k][0]);
        snprintf(what, sizeof what, "--train-samples with %s", errors[k][0]);
        expect_error(what, line, errors[k][1]);
    }
    expect_error("--lr-decay-samples without --train-samples", BASE "--lr-decay-samples 64",
                 "^--lr-decay-samples applies to sample-based training (--train-samples); with "
                 "--train-iters give --lr-decay-iters");
    expect_error("--lr-warmup-samples without --train-samples", BASE "--lr-warmup-samples 8",
                 "^--lr-warmup-samples applies to sample-based training");
    /* a checkpoint of iteration 2: decay 41 / 4 = 10.25 iterations, warm-up 2.25 */
    snprintf(dir, sizeof dir, "%s/ckpt_samples", tmp);
    snprintf(flags, sizeof flags, "--lr-warmup-samples 9 --lr-decay-samples 41 --seed 7 ");
    snprintf(line, sizeof line, SBASE "%s--save %s", flags, dir);
    gpt_trainer_from_line(&tr, line);
    mg_trainer_step(&tr);
    mg_trainer_step(&tr);
    if (mg_trainer_save(&tr, dir, err, sizeof err)) fprintf(stderr, "%s\n", err);
    mg_trainer_free(&tr);
    snprintf(line, sizeof line, SBASE "%s--load %s", flags, dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.iteration == 2 && tr.sched.decay_iters == 10.25 &&
                   tr.sched.warmup_iters == 2.25, "cli: --load of a sample-based run: the same "
                   "schedule (decay 41 samples = 10.25 iterations) resumes", "%s",
                   rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
    snprintf(line, sizeof line, SBASE "--lr-warmup-samples 9 --lr-decay-samples 40 --seed 7 "
             "--load %s", dir);
    expect_error("--load of a sample-based run with another --lr-decay-samples", line,
                 "^--lr-decay-samples 40 differs from the checkpoint's 41 (");
    snprintf(line, sizeof line, SBASE "--lr-warmup-samples 9 --seed 7 --load %s", dir);
    expect_error("--load of a sample-based run without its --lr-decay-samples", line,
                 "^--train-samples 50 (the decay length without --lr-decay-samples) differs "
                 "from the checkpoint's 41 (");
    snprintf(line, sizeof line, SBASE "--seed 7 --load %s --use-checkpoint-opt_param-scheduler",
             dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.args.lr_decay_samples == 41 && tr.args.lr_warmup_samples == 9 &&
                   tr.sched.decay_iters == 10.25, "cli: --use-checkpoint-opt_param-scheduler of "
                   "a sample-based run: its decay and warm-up back in samples (41, 9)", "%s",
                   rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
}

/* Resuming a WSD run whose weight decay rises (linear, 0.01 -> 0.1 over --train-iters 4),
   as Megatron-LM's OptimizerParamScheduler.load_state_dict: the decay style and the weight
   decay's start, end, increment length and style must equal the checkpoint's;
   --lr-wsd-decay-iters and --lr-wsd-decay-style are not in Megatron's state (state_dict holds
   neither), so the command line's are taken; --use-checkpoint-opt_param-scheduler takes the
   rest from the checkpoint but still needs WSD's annealing on the command line.           */
#define WSD_RUN "--train-iters 4 --lr-decay-style WSD --lr-wsd-decay-iters 2 --seed 7 " \
                "--weight-decay-incr-style linear --start-weight-decay 0.01 --end-weight-decay 0.1 "
static void check_wsd_and_wd_incr_on_resume(const char *tmp) {
    static const char *const changed[][2] = {
        {"--lr-decay-style cosine", "^--lr-decay-style cosine differs from the checkpoint's WSD "
                                    "(on resume Megatron-LM's OptimizerParamScheduler refuses"},
        {"--end-weight-decay 0.2", "^--end-weight-decay 0.2 differs from the checkpoint's 0.1 ("},
        {"--lr-decay-iters 4 --train-iters 6", "^--train-iters 6 (the weight-decay increment's "
                                               "length) differs from the checkpoint's 4 ("},
        {"--weight-decay-incr-style cosine", "^--weight-decay-incr-style cosine differs from the "
                                             "checkpoint's linear ("},
    };
    char dir[600], line[2048], what[300], err[MG_ERRLEN];
    mg_trainer tr;
    size_t i;
    int rc;
    snprintf(dir, sizeof dir, "%s/ckpt_wsd", tmp);
    snprintf(line, sizeof line, BASE WSD_RUN "--save %s", dir);
    gpt_trainer_from_line(&tr, line);
    mg_trainer_step(&tr);
    if (mg_trainer_save(&tr, dir, err, sizeof err)) fprintf(stderr, "%s\n", err);
    mg_trainer_free(&tr);
    for (i = 0; i < sizeof changed / sizeof changed[0]; i++) {
        snprintf(line, sizeof line, BASE WSD_RUN "--load %s %s", dir, changed[i][0]);
        snprintf(what, sizeof what, "--load of a WSD run with %s: the schedule differs",
                 changed[i][0]);
        expect_error(what, line, changed[i][1]);
    }
    snprintf(line, sizeof line, BASE WSD_RUN "--load %s --lr-wsd-decay-iters 1 "
             "--lr-wsd-decay-style cosine", dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.sched.wsd_decay_iters == 1 && tr.sched.wsd_style == MG_WSD_COSINE,
                   "cli: --load of a WSD run with another --lr-wsd-decay-iters and "
                   "--lr-wsd-decay-style: the command line's (not in Megatron-LM's state)", "%s",
                   rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
    snprintf(line, sizeof line, BASE "--train-iters 6 --load %s "
             "--use-checkpoint-opt_param-scheduler", dir);
    expect_error("--use-checkpoint-opt_param-scheduler of a WSD run without its annealing",
                 line, "^--use-checkpoint-opt_param-scheduler: the checkpoint's --lr-decay-style "
                 "WSD needs --lr-wsd-decay-iters N on the command line");
    snprintf(line, sizeof line, BASE "--train-iters 6 --lr-wsd-decay-iters 2 --load %s "
             "--use-checkpoint-opt_param-scheduler", dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.sched.style == MG_LR_WSD && tr.sched.decay_iters == 4 &&
                   tr.sched.wd_style == MG_WD_LINEAR && tr.sched.start_wd == 0.01 &&
                   tr.sched.end_wd == 0.1 && tr.sched.wd_incr_iters == 4,
                   "cli: --use-checkpoint-opt_param-scheduler of a WSD run: the checkpoint's "
                   "decay and weight-decay increment (over its 4 iterations, not 6)", "%s",
                   rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
}

static void check_weights_and_checkpoints(void) {
    char line[2048], path[700], dir[512], sub[700];
    long len = 0;
    char *model = (char *)mg_test_read_file(GPT_DATA "gpt_model.bin", &len);
    struct stat st1, st2;
    /* --init-from */
    expect_error("--init-from missing file", BASE "--init-from /nonexistent/model.bin",
                 "^--init-from /nonexistent/model.bin: /nonexistent/model.bin: cannot open");
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
    save_one_iteration(dir);
    snprintf(line, sizeof line, BASE "--load %s --seed 8", dir);
    expect_error("--load with another --seed", line, "--seed 8 differs from the checkpoint's 7");
    snprintf(line, sizeof line, BASE "--load %s --data-order sequential", dir);
    expect_error("--load with another --data-order", line, "^--data-order sequential differs "
                 "from the checkpoint's shuffled");
    snprintf(line, sizeof line, BASE "--load %s --hidden-size 32 --num-attention-heads 2", dir);
    expect_error("--load with another architecture", line, "--hidden-size 32 does not match");
    check_schedule_on_resume(dir);
    check_wsd_and_wd_incr_on_resume(tmp);
    {   /* weights that are not finite: refused before any work, naming tensor and element */
        char *st;
        uint64_t hlen;
        const uint32_t nan_bits = 0x7fc00000u, inf_bits = 0xff800000u;
        snprintf(sub, sizeof sub, "%s/iter_0000001/model.safetensors", dir);
        st = (char *)mg_test_read_file(sub, &len);
        memcpy(&hlen, st, 8);
        memcpy(st + 8 + hlen + 4 * 5, &nan_bits, 4);      /* element 5 of the first tensor */
        snprintf(path, sizeof path, "%s/nan.safetensors", tmp);
        write_file(path, st, (size_t)len);
        snprintf(line, sizeof line, BASE "--init-from %s", path);
        expect_error("--init-from weights holding a nan", line, "nan.safetensors: tensor "
                     "embedding.word_embeddings.weight holds nan at element 5 (in the file's "
                     "order); weights must be finite (every loss would be nan)");
        memcpy(st + 8 + hlen + 4 * 5, &inf_bits, 4);
        write_file(path, st, (size_t)len);
        expect_error("--init-from weights holding -inf", line, "holds -inf at element 5");
        free(st);
    }
    /* the iteration's directory instead of the checkpoint's: refused (it would start from
       random weights, saying there is no checkpoint there) */
    snprintf(line, sizeof line, BASE "--load %s/iter_0000001", dir);
    {
        char want[1400];
        snprintf(want, sizeof want, "--load %s/iter_0000001: holds a checkpoint's files "
                 "(state.json, model.safetensors) but no latest_checkpointed_iteration.txt: "
                 "--load takes the directory that holds the iter_NNNNNNN directories (--load "
                 "%s), as in Megatron-LM", dir, dir);
        expect_error("--load of an iteration's directory", line, want);
    }
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
    expect_error("--load with a malformed latest file", line,
                 "latest_checkpointed_iteration.txt holds 'seven', not an iteration number");
    write_file(path, "9\n", 2);
    expect_error("--load whose latest names a missing iteration", line, "latest_checkpointed_"
                 "iteration.txt names iteration 9, but ");
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

/* text with the value of "key": (up to the next ',') replaced by value; malloc'ed. */
static char *patch_key(const char *text, const char *key, const char *value) {
    char pat[80], *out = (char *)malloc(strlen(text) + strlen(value) + 1);
    const char *at, *end;
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    at = strstr(text, pat);
    if (!out || !at || !(end = strchr(at, ','))) { fprintf(stderr, "no %s\n", key); exit(1); }
    at += strlen(pat);
    sprintf(out, "%.*s%s%s", (int)(at - text), text, value, end);
    return out;
}

/* The checkpoint's small files as a careless user (or a damaged disk) leaves them:
   latest_checkpointed_iteration.txt and state.json as garbage, out-of-range numbers, a named
   pipe, a directory, an oversized file; Megatron's 'release'. Each refused with one line
   naming the file (and the key), or, for 'release', loaded as Megatron does.               */
static void check_small_files(void) {
    char line[2048], dir[512], latest[700], state[700], rel[700], path[700], cmd[2000];
    char err[MG_ERRLEN];
    char *good_state, *bad;
    long len = 0;
    size_t i;
    mg_trainer tr, ref;
    float *want, *got;
    int rc;
    static const char *const latest_bad[][2] = {
        {"-3\n", "holds '-3', not an iteration number"},
        {"99999999999999999999\n", "holds '99999999999999999999', not an iteration number"},
        {"", "holds '', not an iteration number"},
        {"1 2\n", "holds '1 2', not"},
        {"0x10\n", "holds '0x10', not"},
        {"Release\n", "holds 'Release', not"},
        {"1\0002\n", "holds '1?2', not"},       /* a NUL inside: 4 bytes written */
    };
    static const char *const state_bad[][3] = {   /* key, value, the error */
        {"iteration", "5", "iteration is 5, but the file lies in the directory of iteration 1"},
        {"consumed_train_samples", "-1", "consumed_train_samples is -1, not an integer in [0, "},
        {"num_layers", "1099511627776", "num_layers is 1099511627776, not an integer in [1, "
                                        "2147483647]"},
        {"hidden_size", "16.5", "hidden_size is 16.5, not an integer"},
        {"seed", "4294967296", "seed is 4294967296, not an integer in [0, 4294967295]"},
        {"data_order_index", "7", "data_order_index is 7, not an integer in [0, 1]"},
        {"vocab_size", "\"37\"", "vocab_size is \"37\", not an integer"},
        {"loss_scale", "\"big\"", "loss_scale is not a positive number"},
        {"loss_scale_growth_tracker", "-2", "loss_scale_growth_tracker must be an integer >= 0"},
        /* negative is legitimate (each inf decrements it): only a non-integer or an absurd
           value is refused */
        {"loss_scale_hysteresis_tracker", "1.5", "loss_scale_hysteresis_tracker must be an "
                                                 "integer >= -1e15"},
        {"loss_scale_hysteresis_tracker", "-10000000000000000", "loss_scale_hysteresis_tracker "
                                                                "must be an integer >= -1e15"},
    };
    snprintf(dir, sizeof dir, "%s/small", tmp);
    save_one_iteration(dir);
    snprintf(latest, sizeof latest, "%s/latest_checkpointed_iteration.txt", dir);
    snprintf(state, sizeof state, "%s/iter_0000001/state.json", dir);
    snprintf(line, sizeof line, BASE "--load %s", dir);
    good_state = (char *)mg_test_read_file(state, &len);
    if (!good_state) { fprintf(stderr, "no %s\n", state); exit(1); }
    good_state = (char *)realloc(good_state, (size_t)len + 1);
    good_state[len] = 0;

    /* latest_checkpointed_iteration.txt */
    for (i = 0; i < sizeof latest_bad / sizeof latest_bad[0]; i++) {
        char what[160];
        write_file(latest, latest_bad[i][0], i == 6 ? 4 : strlen(latest_bad[i][0]));
        snprintf(what, sizeof what, "--load, latest file '%.20s': refused", latest_bad[i][0]);
        for (char *c = what; *c; c++) if (*c == '\n') *c = ' ';
        expect_error(what, line, latest_bad[i][1]);
    }
    write_file(latest, " 1 \r\n", 5);   /* Python's strip(): Megatron reads it as 1 */
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.iteration == 1 && tr.loaded_iteration == 1,
                   "cli: --load, latest file ' 1 \\r\\n': iteration 1 (blanks stripped as "
                   "Megatron does)", "%s", rc ? err : "");
    if (!rc) mg_trainer_free(&tr);
    alarm(60);   /* a reader that waits on a pipe ends the test instead of hanging it */
    remove(latest);
    if (mkfifo(latest, 0600) == 0)
        expect_error("--load, latest file a named pipe: refused without waiting", line,
                     "latest_checkpointed_iteration.txt: not a regular file");
    remove(latest);
    mkdir(latest, 0755);
    expect_error("--load, latest file a directory: refused", line,
                 "latest_checkpointed_iteration.txt: is a directory");
    rmdir(latest);
    bad = (char *)malloc(5000);
    memset(bad, '1', 5000);
    write_file(latest, bad, 5000);
    free(bad);
    expect_error("--load, latest file of 5000 bytes: refused unread", line,
                 "5000 bytes, more than the 4096");

    /* 'release': Megatron's released checkpoint, weights from DIR/release, iteration 0 */
    write_file(latest, "release\n", 8);
    expect_error("--load 'release' without DIR/release/model.safetensors: refused", line,
                 "says 'release', but");
    snprintf(rel, sizeof rel, "%s/release", dir);
    mkdir(rel, 0755);
    snprintf(cmd, sizeof cmd, "cp %s/iter_0000001/model.safetensors %s/", dir, rel);
    if (system(cmd) != 0) fprintf(stderr, "%s failed\n", cmd);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    write_file(latest, "1\n", 2);
    gpt_setup_or_die(&ref, line, NULL);
    want = gpt_host(&ref.model, ref.model.param_buf);
    got = rc ? NULL : gpt_host(&tr.model, tr.model.param_buf);
    mg_test_report(!rc && tr.iteration == 0 && tr.loaded_iteration == -1 && tr.opt.step == 0 &&
                   tr.consumed_samples == 0 && !memcmp(got, want, sizeof(float) *
                   (size_t)ref.model.n_elems), "cli: --load 'release': the release's weights "
                   "(= iteration 1's), from iteration 0 without optimizer state", "%s",
                   rc ? err : "");
    free(got);
    if (!rc) {   /* the library call alone: weights only, nothing else changes */
        mg_gpt_init_weights(&tr.model, 99);
        write_file(latest, "release", 7);
        rc = mg_trainer_load(&tr, dir, err, sizeof err);
        got = gpt_host(&tr.model, tr.model.param_buf);
        mg_test_report(rc == 1 && tr.iteration == 0 && !memcmp(got, want, sizeof(float) *
                       (size_t)ref.model.n_elems), "cli: mg_trainer_load of a 'release': its "
                       "weights", "rc %d %s", rc, rc == 1 ? "" : err);
        free(got);
        write_file(latest, "1\n", 2);
        mg_trainer_free(&tr);
    }
    free(want);
    mg_trainer_free(&ref);
    /* an iteration directory of Megatron-LM's own checkpoint files (torch: mp_rank_00/…,
       torch_dist: .metadata): refused by name, not as a moved checkpoint */
    snprintf(path, sizeof path, "%s/iter_0000002", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/iter_0000002/mp_rank_00", dir);
    mkdir(path, 0755);
    write_file(latest, "2\n", 2);
    expect_error("--load of Megatron-LM's torch checkpoint (iter_0000002/mp_rank_00): named", line,
                 "iter_0000002 holds Megatron-LM's own checkpoint files (mp_rank_00), not "
                 "megatron.h's");
    snprintf(path, sizeof path, "%s/iter_0000003", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/iter_0000003/.metadata", dir);
    write_file(path, "x", 1);
    write_file(latest, "3\n", 2);
    expect_error("--load of Megatron-LM's torch_dist checkpoint (iter_0000003/.metadata): named",
                 line, "iter_0000003 holds Megatron-LM's own checkpoint files (.metadata)");
    write_file(latest, "1\n", 2);

    /* state.json */
    for (i = 0; i < sizeof state_bad / sizeof state_bad[0]; i++) {
        char what[200];
        bad = patch_key(good_state, state_bad[i][0], state_bad[i][1]);
        write_file(state, bad, strlen(bad));
        free(bad);
        snprintf(what, sizeof what, "--load, state.json with %s %s: refused", state_bad[i][0],
                 state_bad[i][1]);
        expect_error(what, line, state_bad[i][2]);
    }
    write_file(state, "[1]", 3);
    expect_error("--load, state.json not an object: refused", line, "state.json: not a JSON object");
    remove(state);
    if (mkfifo(state, 0600) == 0)
        expect_error("--load, state.json a named pipe: refused without waiting", line,
                     "state.json: not a regular file");
    remove(state);
    mkdir(state, 0755);
    expect_error("--load, state.json a directory: refused", line, "state.json: is a directory");
    rmdir(state);
    write_file(state, good_state, (size_t)len);
    if (truncate(state, (off_t)2 << 20) == 0)
        expect_error("--load, state.json of 2 MiB: refused unread", line,
                     "2097152 bytes, more than the 1048576");
    write_file(state, good_state, (size_t)len);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.iteration == 1, "cli: --load of the restored checkpoint works", "%s",
                   rc ? err : "");
    if (!rc) mg_trainer_free(&tr);

    /* --init-from a pipe or a directory without weights */
    snprintf(path, sizeof path, "%s/fifo.bin", tmp);
    if (mkfifo(path, 0600) == 0) {
        snprintf(line, sizeof line, BASE "--init-from %s", path);
        expect_error("--init-from a named pipe: refused without waiting", line,
                     "fifo.bin: not a regular file");
    }
    snprintf(line, sizeof line, BASE "--init-from %s", rel);
    remove(rel);
    snprintf(cmd, sizeof cmd, "%s/model.safetensors", rel);
    remove(cmd);
    rmdir(rel);
    mkdir(rel, 0755);
    expect_error("--init-from a directory without model.safetensors", line,
                 "release/model.safetensors: cannot open: No such file or directory (expected an "
                 "llm.c checkpoint, a model.safetensors, or a directory holding one)");
    alarm(0);
    free(good_state);
}

/* Long paths: a checkpoint directory of 1500 characters (past the old buffers of 400 and
   1100, which cut the name: --load then found no checkpoint and trained from random weights)
   saves and resumes; a path without room for the names a run makes under it is refused
   before any work, naming its length and the limit.                                        */
static void check_long_paths(void) {
    char dir[1700], line[8192], err[MG_ERRLEN], flag_path[4100];
    mg_trainer tr;
    int rc, k;
    size_t n = (size_t)snprintf(dir, sizeof dir, "%s/long", tmp);
    mkdir(dir, 0755);
    while (n < 1400) {                   /* components of 200 characters */
        dir[n++] = '/';
        for (k = 0; k < 200; k++) dir[n++] = (char)('a' + k % 26);
        dir[n] = 0;
        mkdir(dir, 0755);
    }
    snprintf(dir + n, sizeof dir - n, "/ckpt");
    save_one_iteration(dir);
    snprintf(line, sizeof line, BASE "--load %s", dir);
    rc = gpt_setup_line(&tr, line, NULL, err, sizeof err);
    mg_test_report(!rc && tr.loaded_iteration == 1, "cli: --load of a directory of 1400+ "
                   "characters resumes its checkpoint (iteration 1)", "%zu characters: %s",
                   strlen(dir), rc ? err : tr.loaded_iteration == 1 ? "" : "not resumed");
    if (!rc) mg_trainer_free(&tr);
    memset(flag_path, 'x', sizeof flag_path);
    flag_path[0] = '/';
    flag_path[4000] = 0;
    snprintf(line, sizeof line, BASE "--save %s", flag_path);
    expect_error("--save of 4000 characters: refused before any work", line, "^--save /xxxx");
    expect_error("--save of 4000 characters: the message says why", line, "a path of 4000 "
                 "characters; with the 128 more that the names under it take it would pass "
                 "the 4095 characters a path may have (give a path of at most 3967 characters");
    snprintf(line, sizeof line, BASE "--load %s", flag_path);
    expect_error("--load of 4000 characters: refused", line, "^--load /xxx");
    snprintf(line, sizeof line, BASE "--export-hf %s", flag_path);
    expect_error("--export-hf of 4000 characters: refused", line, "^--export-hf /xxx");
    /* an error naming a long path keeps its end, the reason (MG_ERRLEN cuts the middle) */
    snprintf(line, sizeof line, "--data-path %s --vocab-size 37 --num-layers 1 --hidden-size "
             "16 --num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1", flag_path);
    {
        char err2[MG_ERRLEN] = {0};
        mg_train_args a;
        mg_trainer t2;
        int failed = gpt_parse_line(&a, line, err2, sizeof err2) != 0 ||
                     mg_trainer_setup(&t2, &a, err2, sizeof err2) != 0;
        size_t len = strlen(err2);
        mg_test_report(failed && !strncmp(err2, "--data-path: /xxx", 17) && strstr(err2, "…") &&
                       len > 16 && !strcmp(err2 + len - 15, ": path too long"), "cli: an error about "
                       "a 4000-character path keeps its beginning and its reason, '…' between",
                       "%s", err2);
    }
    flag_path[4070] = 0;
    memset(flag_path + 4000, 'x', 70);
    snprintf(line, sizeof line, BASE "--log-jsonl %s", flag_path);
    expect_error("--log-jsonl of 4070 characters: refused", line, "the 32 more that the names "
                 "beside it take");
}

/* The program itself: exit status 2 and one stderr line for a bad flag; a short real run. */
static void check_program(void) {
    char cmd[2048], out[8192] = {0};
    int status;
    const char *prog = "build/gpt_train";
    if (access(prog, X_OK) != 0) {
        mg_test_report(0, "cli: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    snprintf(cmd, sizeof cmd, "%s " BASE "--bogus 1 2>&1 >/dev/null; echo \"status $?\"", prog);
    status = gpt_capture(cmd, out, sizeof out);
    CHECK(status == 0 && !strcmp(out, "gpt_train: error: unknown flag --bogus (see --help for "
          "every flag)\nstatus 2\n"), "cli: gpt_train prints one error line and exits with 2");
    snprintf(cmd, sizeof cmd, "%s --help > /dev/null; echo \"status $?\"", prog);
    gpt_capture(cmd, out, sizeof out);
    CHECK(!strcmp(out, "status 0\n"), "cli: gpt_train --help exits with 0");
    snprintf(cmd, sizeof cmd, "%s/docs", tmp);
    gpt_make_docs(cmd);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s --init-from %sgpt_model.bin --data-path "
             "%s/docs --split 8,2,0 --seq-length 16 --micro-batch-size 2 "
             "--global-batch-size 4 --train-iters 4 --lr 1e-3 --log-interval 2 --eval-interval 2 "
             "--eval-iters 1 --save %s/run --save-interval 2 --export-hf %s/hf "
             "--sample-tokens 5 2>&1; echo \"status $?\"", prog, GPT_DATA, tmp, tmp, tmp);
    gpt_capture(cmd, out, sizeof out);
    CHECK(strstr(out, "iteration        4/       4") && strstr(out, "validation loss at "
          "iteration 4") && strstr(out, "saved") && strstr(out, "exported") &&
          strstr(out, "----- sample") && strstr(out, "status 0\n") &&
          !strstr(out, "on test set"), "cli: gpt_train trains, validates, saves, exports and "
          "samples (--split 8,2,0: no test part, no test line)");
    if (!strstr(out, "status 0\n")) fprintf(stderr, "%s\n", out);
    {   /* every save prints its line, as Megatron-LM's "successfully saved checkpoint from
           iteration N to DIR": the --save-interval ones (after that iteration's validation)
           as the final one; iteration 4 is saved once, by the interval */
        char saved2[600], saved4[600];
        const char *at2, *at4;
        snprintf(saved2, sizeof saved2, "\ngpt_train: saved %s/run/iter_0000002\n", tmp);
        snprintf(saved4, sizeof saved4, "\ngpt_train: saved %s/run/iter_0000004\n", tmp);
        at2 = strstr(out, saved2);
        at4 = strstr(out, saved4);
        CHECK(at2 && at4 && at2 > strstr(out, "validation loss at iteration 2 ") &&
              at4 > strstr(out, "validation loss at iteration 4 ") &&
              !strstr(at4 + 1, saved4) && !strstr(out, "iter_0000001") &&
              !strstr(out, "iter_0000003"), "cli: --save-interval 2 of 4 iterations prints "
              "'gpt_train: saved DIR/iter_0000002' and '…/iter_0000004', each once, after "
              "the iteration's validation");
        if (!at2 || !at4) fprintf(stderr, "%s\n", out);
    }
    /* --split's third share is the test part: Megatron-LM evaluates it once after training
       ("validation loss at iteration N on test set"); with no share, no test line */
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s --data-path %s/docs --vocab-size 37 "
             "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 "
             "--micro-batch-size 2 --global-batch-size 4 --train-iters 2 --lr 1e-3 "
             "--eval-interval 2 --eval-iters 1 --split 8,1,1 --log-jsonl %s/split.jsonl 2>&1; "
             "echo \"status $?\"", prog, tmp, tmp);
    gpt_capture(cmd, out, sizeof out);
    {   /* Megatron's pretrain: the interval's validation, the validation again after the
           loop, then the test set; the JSONL log keeps one validation loss an iteration */
        const char *valid = strstr(out, " validation loss at iteration 2 | lm loss value: ");
        const char *final = strstr(out, " validation loss at iteration 2 on validation set | "
                                   "lm loss value: ");
        const char *test = strstr(out, " validation loss at iteration 2 on test set | lm loss "
                                  "value: ");
        char path[300], jl[4096] = {0};
        FILE *jf;
        int n_valid = 0;
        snprintf(path, sizeof path, "%s/split.jsonl", tmp);
        jf = fopen(path, "r");
        if (jf) {
            while (fgets(jl, sizeof jl, jf)) n_valid += strstr(jl, "\"valid_lm_loss\"") != NULL;
            fclose(jf);
        }
        CHECK(valid && final && test && valid < final && final < test && n_valid == 1 &&
              strstr(out, "status 0\n"), "cli: --split 8,1,1: after training the validation "
              "again ('… on validation set') and the test part ('… on test set'), in "
              "Megatron-LM's order; one validation loss in the JSONL log");
        if (!test || !final) fprintf(stderr, "%s\n", out);
    }
    /* A run resumed with a longer --eval-interval than its checkpoint's: the first run
       validated at iterations 1 … 4 (4 batches of the validation part consumed), the
       resumed one sizes the part for (6 / 6 + 1) = 2 and validates twice more (at 6 and
       after training): the samples are read cyclically, as Megatron-LM's validation
       iterator is, rather than past the end. */
    snprintf(cmd, sizeof cmd, "for a in '--train-iters 4 --eval-interval 1 --save %s/rv' "
             "'--train-iters 6 --eval-interval 6 --load %s/rv --override-opt_param-scheduler'; "
             "do OMP_NUM_THREADS=1 %s "
             "--data-path %s/docs --vocab-size 37 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 16 --micro-batch-size 2 "
             "--global-batch-size 4 --lr 1e-3 --eval-iters 1 --split 8,2,0 $a 2>&1 || echo "
             "failed; done; echo \"status $?\"", tmp, tmp, prog, tmp);
    gpt_capture(cmd, out, sizeof out);
    CHECK(strstr(out, "validation loss at iteration 6 on validation set") &&
          !strstr(out, "failed") && strstr(out, "status 0\n"), "cli: a run resumed with a "
          "longer --eval-interval validates past its part's samples, cyclically");
    if (!strstr(out, "on validation set") || strstr(out, "failed")) fprintf(stderr, "%s\n", out);
    /* one document, the default --split 969,30,1: trains, one line says validation is
       skipped, no validation at --eval-interval nor at the end */
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s --data-path %s/one.bin --vocab-size 37 "
             "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 "
             "--train-iters 3 --lr 1e-3 --log-interval 1 --eval-interval 2 2>&1; "
             "echo \"status $?\"", prog, tmp);
    gpt_capture(cmd, out, sizeof out);
    {
        const char *skip = strstr(out, "\ngpt_train: validation skipped: --split 969,30,1 gives "
                                  "the validation part none of the 1 document of ");
        CHECK(skip && !strstr(skip + 30, "validation skipped") && strstr(out, "iteration        "
              "3/       3") && !strstr(out, "validation loss") && !strstr(out, "error") &&
              strstr(out, "status 0\n"), "cli: gpt_train on one document with the default "
              "--split trains and prints once that validation is skipped");
        if (!skip || !strstr(out, "status 0\n")) fprintf(stderr, "%s\n", out);
    }
}

/* `make help` lists every phony target of the Makefile (each .PHONY line) and the
   per-program patterns, one line each: "  TARGET  what it does". */
static void check_make_help(void) {
    char out[8192] = {0}, *mk, *at, *end, want[96];
    const char *const patterns[3] = {"build/<name>", "build/<name>_cuda", "build/<name>_asan"};
    FILE *p;
    size_t n;
    long len = 0;
    int listed = 0, missing = 0, i;
    char missed[512] = "";
    mk = (char *)mg_test_read_file("Makefile", &len);
    p = popen("make -s --no-print-directory help 2>&1", "r");
    n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    if (p) pclose(p);
    if (!mk) { mg_test_report(0, "cli: make help", "no Makefile here"); return; }
    mk = (char *)realloc(mk, (size_t)len + 1);
    mk[len] = 0;
    for (at = strstr(mk, "\n.PHONY:"); at; at = strstr(end, "\n.PHONY:")) {
        char *word;
        at += 8;
        end = strchr(at, '\n');
        if (!end) end = at + strlen(at);
        while (at < end) {                       /* each target named on the line */
            while (at < end && *at == ' ') at++;
            word = at;
            while (at < end && *at != ' ') at++;
            if (at == word) continue;
            snprintf(want, sizeof want, "\n  %.*s ", (int)(at - word), word);
            listed++;
            if (!strstr(out, want)) {
                missing++;
                snprintf(missed + strlen(missed), sizeof missed - strlen(missed), " %.*s",
                         (int)(at - word), word);
            }
        }
    }
    for (i = 0; i < 3; i++) {
        snprintf(want, sizeof want, "\n  %s ", patterns[i]);
        missing += !strstr(out, want);
    }
    mg_test_report(listed >= 11 && missing == 0, "cli: make help lists every phony target of "
                   "the Makefile and build/<name>, _cuda, _asan", "%d targets, missing:%s",
                   listed, missed);
    CHECK(strstr(out, "\n  RANKS TP PP ") && strstr(out, "\n  ITERS ") && strstr(out, "\n  CC="),
          "cli: make help lists the variables (CC, NVCC, RANKS, TP, PP, ITERS, …)");
    free(mk);
}

/* --init-method-std σ: the weights' normal initialisation takes σ, attention-out and MLP-down
   σ/√(2·layers) (Megatron-LM's init_method_normal and scaled_init_method_normal): each
   descriptor's σ, and the sample standard deviation of the initialised MLP weights (4096
   values a tensor: within 10 % of σ). */
static void check_init_method_std(void) {
    static const char line[] = BASE "--num-layers 2 --hidden-size 32 --init-method-std 0.05";
    mg_trainer tr;
    char err[MG_ERRLEN] = {0}, worst[160] = "";
    double worst_rel = 0;
    float *h;
    int i;
    if (gpt_setup_line(&tr, line, NULL, err, sizeof err)) {
        mg_test_report(0, "cli: --init-method-std 0.05: the initialisation's sigma", "%s", err);
        return;
    }
    h = gpt_host(&tr.model, tr.model.param_buf);
    for (i = 0; i < tr.model.n_params; i++) {
        const mg_param_desc *d = &tr.model.params[i];
        double want = d->kind == MG_PROJ_W || d->kind == MG_FC2_W ? 0.05 / sqrt(2.0 * 2) : 0.05;
        double rel = 0, ss = 0;
        int64_t k;
        if (d->init != MG_INIT_NORMAL) continue;
        rel = fabs(d->init_std - want) / want;
        if (d->kind == MG_FC1_W || d->kind == MG_FC2_W) {
            for (k = 0; k < d->numel; k++) ss += (double)h[d->offset + k] * h[d->offset + k];
            if (fabs(sqrt(ss / (double)d->numel) - want) / want > 0.1) rel = 1;
        }
        if (rel > worst_rel) {
            worst_rel = rel;
            snprintf(worst, sizeof worst, "%s: sigma %g (sample %g), want %g", d->name,
                     d->init_std, d->numel ? sqrt(ss / (double)d->numel) : 0.0, want);
        }
    }
    mg_test_report(worst_rel < 1e-6, "cli: --init-method-std 0.05: weights 0.05, attention-out "
                   "and MLP-down 0.05/sqrt(2 x 2 layers), as initialised", "%s", worst);
    free(h);
    mg_trainer_free(&tr);
}

/* --init-method-xavier-uniform: every 2-D weight U(−a, a), a = √(6/(fan_in + fan_out)) of its
   global shape (V rows for the vocabulary tensors), attention-out and MLP-down too; norms
   and biases as before. Each descriptor's bound, every value inside it, and the sample
   variance of the tensors of 2048 values or more within 10 % of a²/3.                     */
static void check_init_xavier(void) {
    static const char line[] = BASE "--num-layers 2 --hidden-size 32 --init-method-xavier-uniform";
    mg_trainer tr;
    char err[MG_ERRLEN] = {0}, worst[200] = "";
    int i, n_uniform = 0, bad = 0;
    float *h;
    if (gpt_setup_line(&tr, line, NULL, err, sizeof err)) {
        mg_test_report(0, "cli: --init-method-xavier-uniform", "%s", err);
        return;
    }
    h = gpt_host(&tr.model, tr.model.param_buf);
    for (i = 0; i < tr.model.n_params; i++) {
        const mg_param_desc *d = &tr.model.params[i];
        double fan_out = d->kind == MG_WTE || d->kind == MG_OUT_W ? tr.cfg.vocab_size
                                                                  : (double)d->shape[0];
        double a = sqrt(6.0 / ((double)d->shape[1] + fan_out)), ss = 0;
        int64_t k, n = 0;
        if (d->ndim != 2) continue;
        n_uniform += d->init == MG_INIT_UNIFORM;
        for (k = 0; k < d->numel; k++) {   /* the vocabulary's padding rows stay 0 */
            float v = h[d->offset + k];
            if (!(fabs(v) <= a)) bad = 1;
            ss += (double)v * v;
            n += v != 0.0f;
        }
        if (d->init != MG_INIT_UNIFORM || fabs(d->init_std - a) > 1e-6 * a ||
            (n >= 2048 && fabs(ss / (double)n - a * a / 3) > 0.1 * a * a / 3) || bad) {
            snprintf(worst, sizeof worst, "%s: kind %d bound %g want %g, sample variance %g "
                     "want %g%s", d->name, (int)d->init, d->init_std, a, n ? ss / (double)n : 0.0,
                     a * a / 3, bad ? ", a value outside" : "");
            bad = 1;
            break;
        }
    }
    mg_test_report(!bad && n_uniform >= 8, "cli: --init-method-xavier-uniform: every weight "
                   "U(-a, a), a = sqrt(6/(fan_in + fan_out))", "%d uniform tensors%s%s",
                   n_uniform, worst[0] ? "; " : "", worst);
    free(h);
    mg_trainer_free(&tr);
}

/* Megatron-LM launch scripts run: its switches that megatron.h's run already matches are
   accepted (an alias sets our flag; one that does not apply literally prints one warning),
   its features megatron.h lacks are refused with one line naming the flag and the reason,
   its own checks of these flags are kept. --help lists the accepted ones, and each parses. */
/* What mg_train_print_compat_notes prints after setting up `line` (one rank), into notes
   ("" for nothing); 0 when the setup failed (notes then holds its error). */
static int compat_notes(const char *line, char *notes, size_t cap) {
    char err[MG_ERRLEN] = "";
    mg_trainer tr;
    FILE *f = tmpfile();
    size_t got = 0;
    int ok = f && gpt_setup_line(&tr, line, NULL, err, sizeof err) == 0;
    if (ok) {
        mg_train_print_compat_notes(&tr.args, f, "gpt_train");
        rewind(f);
        got = fread(notes, 1, cap - 1, f);
        mg_trainer_free(&tr);
    }
    if (f) fclose(f);
    notes[got] = 0;
    if (!ok) snprintf(notes, cap, "%s", err);
    return ok;
}

static void check_megatron_compat(void) {
    mg_train_args a;
    mg_trainer tr;
    char err[MG_ERRLEN], line[160], cmd[4096], out[16384] = {0};
    int n = 0, i, listed = 0, parsed = 0, warnings = 0, status;
    FILE *f = tmpfile();
    /* --eod-mask-loss takes the tokenizer's end-of-document id (ByteTokenizer's is 255) */
#define BYTES "--data-path " GPT_DATA "gpt_tokens.bin --num-layers 1 --hidden-size 16 "  \
              "--num-attention-heads 2 --seq-length 8 --train-iters 2 --lr 1e-3 --split 1,0,0 " \
              "--eval-iters 0 --tokenizer-type ByteTokenizer "
    CHECK(gpt_setup_line(&tr, BYTES "--eod-mask-loss", NULL, err, sizeof err) == 0 && tr.eod_id == 255 && tr.model.eod_mask &&
          tr.model.eod_id == 255, "cli: --eod-mask-loss masks --tokenizer-type's "
          "end-of-document id");
    mg_trainer_free(&tr);
    /* older spellings: --layernorm-epsilon is --norm-epsilon, set where it stands */
    CHECK(gpt_parse_line(&a, BASE "--layernorm-epsilon 1e-6", err, sizeof err) == 0 &&
          a.norm_epsilon == 1e-6 && mg_train_flag_given(&a, "--norm-epsilon") &&
          gpt_parse_line(&a, BASE "--layernorm-epsilon 1e-6 --norm-epsilon 2e-6", err,
                         sizeof err) == 0 && a.norm_epsilon == 2e-6,
          "cli: --layernorm-epsilon EPS is --norm-epsilon EPS (the later one counts)");
    expect_error("--layernorm-epsilon not a number", BASE "--layernorm-epsilon tiny",
                 "^--layernorm-epsilon tiny: not a number");
    expect_error("--layernorm-epsilon without its value", BASE "--layernorm-epsilon",
                 "^--layernorm-epsilon needs a value (expected EPS, as --norm-epsilon)");
    expect_error("--checkpoint-activations refused with the new spelling",
                 BASE "--checkpoint-activations", "^--checkpoint-activations is not supported "
                 "by megatron.h: Megatron-LM's removed spelling (it refuses it too): give "
                 "--recompute-activations");
    expect_error("--checkpoint-num-layers refused with the new spelling",
                 BASE "--checkpoint-num-layers 2", "^--checkpoint-num-layers is not supported "
                 "by megatron.h: Megatron-LM's removed spelling: give --recompute-num-layers");
    /* Megatron's --distributed-timeout-minutes is --comm-timeout in minutes */
    CHECK(gpt_parse_line(&a, BASE "--distributed-timeout-minutes 2.5", err, sizeof err) == 0 &&
          a.comm_timeout == 150.0, "cli: --distributed-timeout-minutes 2.5 = --comm-timeout 150");
    expect_error("--distributed-timeout-minutes with --comm-timeout", BASE "--comm-timeout 60 "
                 "--distributed-timeout-minutes 1", "^--distributed-timeout-minutes and "
                 "--comm-timeout set the same bound: give one of them");
    /* Megatron-LM's MLP computes the exact (erf) GELU where its fused bias-GELU kernel (tanh)
       is off: --no-bias-gelu-fusion, or --disable-bias-linear (validate_args turns the fusion
       off); --openai-gelu keeps the tanh GELU; SwiGLU has no GELU; --squared-relu replaces it
       (Nemotron's lines give it with the fusion off). No warning either way.               */
    {
        static const struct { const char *flags; int erf, relu2; } gelu[] = {
            {"", 0, 0}, {"--no-bias-gelu-fusion", 1, 0}, {"--disable-bias-linear", 1, 0},
            {"--disable-bias-linear --openai-gelu", 0, 0},
            {"--no-bias-gelu-fusion --openai-gelu", 0, 0}, {"--bias-gelu-fusion", 0, 0},
            {"--disable-bias-linear --swiglu --ffn-hidden-size 32", 0, 0},
            {"--squared-relu", 0, 1}, {"--squared-relu --disable-bias-linear", 0, 1},
            {"--squared-relu --no-bias-gelu-fusion", 0, 1}};
        int i;
        for (i = 0; i < (int)(sizeof gelu / sizeof gelu[0]); i++) {
            char notes[400], name[160], gl[1024];
            mg_trainer tg;
            int ok = 0, kind = -1;
            snprintf(gl, sizeof gl, BASE "%s", gelu[i].flags);
            err[0] = 0;
            if (gpt_parse_line(&a, gl, err, sizeof err) == 0 &&
                mg_trainer_setup(&tg, &a, err, sizeof err) == 0) {
                kind = (int)tg.model.tf.cfg.act;
                ok = tg.cfg.gelu_erf == gelu[i].erf && tg.cfg.squared_relu == gelu[i].relu2 &&
                     kind == (gelu[i].relu2 ? MG_ACT_RELU2
                              : gelu[i].erf ? MG_ACT_GELU_ERF : MG_ACT_GELU);
                mg_trainer_free(&tg);
            }
            ok = ok && compat_notes(gl, notes, sizeof notes) && notes[0] == 0;
            snprintf(name, sizeof name, "cli: %s: %s, no warning",
                     gelu[i].flags[0] ? gelu[i].flags : "the default",
                     strstr(gelu[i].flags, "swiglu") ? "SwiGLU, no GELU"
                     : gelu[i].relu2 ? "the squared ReLU"
                     : gelu[i].erf ? "the exact (erf) GELU" : "the tanh GELU");
            mg_test_report(ok, name, "layer's kind %d%s%s", kind, err[0] ? "; " : "", err);
        }
    }
    expect_error("--squared-relu with --swiglu", BASE "--squared-relu --swiglu "
                 "--ffn-hidden-size 32", "^--squared-relu and --swiglu exclude each other");
    expect_error("--eod-token-id against the tokenizer's", BYTES "--eod-mask-loss "
                 "--eod-token-id 3", "^--eod-token-id 3 disagrees with "
                 "--tokenizer-type ByteTokenizer, whose end-of-document id is 255 (leave "
                 "--eod-token-id out)");
    expect_error("--reset-position-ids refused with learned positions",
                 BASE "--reset-position-ids", "^--reset-position-ids is not supported by "
                 "megatron.h with learned absolute positions: they run over the whole sequence");
    {   /* with rope it is taken with a note (it changes nothing, as in Megatron-LM) */
        char notes[1024];
        int ok = compat_notes(BASE "--position-embedding-type rope --reset-position-ids", notes,
                              sizeof notes) &&
                 strstr(notes, "warning: --reset-position-ids: rotary positions run over the "
                               "whole sequence, as in Megatron-LM") != NULL;
        mg_test_report(ok, "cli: --reset-position-ids with rope: taken (Megatron-LM's rotary "
                       "embedding reads no position ids), with a note", "%s", notes);
    }
    expect_error("--reset-attention-mask refused", BASE "--reset-attention-mask",
                 "^--reset-attention-mask is not supported by megatron.h: ");
    expect_error("--qk-layernorm refused", BASE "--qk-layernorm",
                 "^--qk-layernorm is not supported by megatron.h: ");
    {   /* --ddp-bucket-size: --bucket-size under Megatron-LM's newer name */
        mg_train_args a;
        char err[MG_ERRLEN] = {0};
        int ok = gpt_parse_line(&a, BASE "--ddp-bucket-size 1000", err, sizeof err) == 0 &&
                 a.bucket_size == 1000;
        mg_test_report(ok, "cli: --ddp-bucket-size N sets --bucket-size N", "%s", err);
    }
    expect_error("--non-persistent-save-interval refused", BASE "--non-persistent-save-interval "
                 "5", "^--non-persistent-save-interval is not supported by megatron.h: ");
    expect_error("--window-size refused", BASE "--window-size 128,0",
                 "^--window-size is not supported by megatron.h: attention sees every earlier");
    expect_error("--apply-residual-connection-post-layernorm refused by its name",
                 BASE "--apply-residual-connection-post-layernorm", "^--apply-residual-"
                 "connection-post-layernorm is not supported by megatron.h: ");
    {   /* the notes: taken, one warning each */
        char notes[2048];
        int ok = compat_notes(BASE "--distribute-saved-activations --log-progress", notes,
                              sizeof notes) &&
                 strstr(notes, "warning: --distribute-saved-activations: it changes where") &&
                 strstr(notes, "warning: --log-progress: no progress.txt");
        mg_test_report(ok, "cli: --distribute-saved-activations and --log-progress: taken, one "
                       "warning each", "%s", notes);
    }
    expect_error("--num-experts refused by its name", BASE "--num-experts 8",
                 "^--num-experts is not supported by megatron.h: no mixture of experts");
    expect_error("--fp8-format refused by its name", BASE "--fp8-format hybrid",
                 "^--fp8-format is not supported by megatron.h: no fp8 training");
    expect_error("--optimizer sgd refused (adam is taken)", BASE "--optimizer sgd",
                 "^--optimizer sgd is not supported by megatron.h: the optimizer is AdamW");
    expect_error("--exp-avg-dtype bf16 refused (fp32 is taken)", BASE "--exp-avg-dtype bf16",
                 "^--exp-avg-dtype bf16 is not supported by megatron.h: Adam's moments are fp32");
    expect_error("--mock-data replaces --data-path (taken: Megatron-LM's mock dataset)",
                 BASE "--mock-data", "^--mock-data with --data-path: give either");
    expect_error("--rotary-interleaved refused", BASE "--rotary-interleaved",
                 "^--rotary-interleaved is not supported by megatron.h: rotary dimensions pair "
                 "as rotate-half");
    expect_error("--rampup-batch-size refused by its name", BASE "--rampup-batch-size 4 4 100",
                 "^--rampup-batch-size is not supported by megatron.h: ");
    expect_error("--dataloader-type cyclic refused", BASE "--dataloader-type cyclic",
                 "^--dataloader-type cyclic is not supported by megatron.h: ");
    expect_error("--transformer-impl of no choice", BASE "--transformer-impl te",
                 "^--transformer-impl te: invalid choice (expected local|transformer_engine)");
    expect_error("--num-workers not a number", BASE "--num-workers two", "^--num-workers two: "
                 "invalid value (expected a whole number >= 0)");
    expect_error("--distributed-backend without its value", BASE "--distributed-backend",
                 "^--distributed-backend needs a value (expected nccl|gloo)");
    expect_error("a compatibility switch with a value", BASE "--use-flash-attn=1",
                 "^--use-flash-attn takes no value");
    expect_error("--overlap-param-gather without the distributed optimizer",
                 BASE "--overlap-grad-reduce --overlap-param-gather", "^--overlap-param-gather "
                 "needs --use-distributed-optimizer (Megatron-LM: '--overlap-param-gather only "
                 "supported with distributed optimizer')");
    expect_error("--overlap-param-gather without --overlap-grad-reduce",
                 BASE "--use-distributed-optimizer --overlap-param-gather",
                 "^--overlap-param-gather needs --overlap-grad-reduce");
    expect_error("--use-flash-attn with --attention-backend unfused",
                 BASE "--use-flash-attn --attention-backend unfused",
                 "^--use-flash-attn contradicts --attention-backend unfused");
    /* the old spellings: Megatron's validate_args sets the new flag, whatever else was given */
    CHECK(gpt_parse_line(&a, BASE "--recompute-activations --recompute-granularity full", err,
                         sizeof err) == 0 && a.recompute_granularity == MG_RECOMPUTE_SELECTIVE &&
          mg_train_flag_given(&a, "--recompute-granularity"), "cli: --recompute-activations is "
          "--recompute-granularity selective");
    CHECK(gpt_parse_line(&a, BASE "--use-rotary-position-embeddings", err, sizeof err) == 0 &&
          a.position_embedding_type == MG_POS_ROPE, "cli: --use-rotary-position-embeddings is "
          "--position-embedding-type rope");
    {   /* the warning of a NOTE row names the flag, without the value's placeholder */
        char notes[1024];
        int parsed = compat_notes(BASE "--async-save --wandb-project proj", notes, sizeof notes);
        CHECK(parsed && !strcmp(notes, "gpt_train: warning: --wandb-project: no Weights & "
                                "Biases logging here: the figures go to --tensorboard-dir and "
                                "--log-jsonl\ngpt_train: warning: --async-save: checkpoints are "
                                "saved while training waits (written to temporary names, "
                                "fsynced, renamed): the same files\n"),
              "cli: a switch's and a named value's compatibility warnings");
        if (!parsed || strncmp(notes, "gpt_train: warning: --wandb", 27))
            fprintf(stderr, "%s\n", notes);
    }
    snprintf(cmd, sizeof cmd, BASE "--load %s/no_ckpt_here --exit-on-missing-checkpoint", tmp);
    expect_error("--exit-on-missing-checkpoint without a checkpoint", cmd,
                 "no checkpoint there (no latest_checkpointed_iteration.txt), and "
                 "--exit-on-missing-checkpoint stops the run rather than start from random "
                 "weights");
    /* Llama launch scripts: rope and --no-position-embedding (either spelling of rope) */
    CHECK(gpt_parse_line(&a, BASE "--position-embedding-type rope --no-position-embedding", err,
                         sizeof err) == 0 &&
          gpt_parse_line(&a, BASE "--no-position-embedding --use-rotary-position-embeddings",
                         err, sizeof err) == 0 && a.position_embedding_type == MG_POS_ROPE,
          "cli: --no-position-embedding with rotary positions");
    expect_error("--no-position-embedding without rope", BASE "--no-position-embedding",
                 "^--no-position-embedding with --position-embedding-type learned_absolute: "
                 "give --position-embedding-type none");
    CHECK(gpt_parse_line(&a, BASE "--use-distributed-optimizer --overlap-grad-reduce "
                         "--overlap-param-gather --transformer-impl=local --num-workers=2",
                         err, sizeof err) == 0, "cli: --overlap-param-gather with its two "
          "flags, and valued compatibility flags as --name=VALUE");
    /* --help: each line of the compatibility section is a flag (and value) that parses */
    if (!f) { perror("tmpfile"); exit(1); }
    mg_train_print_help(f, "gpt_train");
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        char flag[96] = "", value[96] = "", full[512];
        if (!strcmp(line, "Megatron-LM flags accepted for compatibility:\n")) n = 1;
        else if (n && line[0] != ' ') n = line[0] == '\n' ? n : 0;
        if (!n || strncmp(line, "  --", 4)) continue;
        listed++;
        if (strlen(line) > 35 && line[35] == ' ')
            line[35] = 0;             /* the left column: "--flag VALUES" (help after it) */
        sscanf(line + 2, "%95s %95s", flag, value);
        if (strchr(value, '|')) *strchr(value, '|') = 0;   /* the first of its values */
        if (!strcmp(value, "N")) snprintf(value, sizeof value, "1");
        if (!strcmp(value, "EPS")) snprintf(value, sizeof value, "1e-6");
        if (value[0] && (value[0] < 'A' || value[0] > 'Z' || !strcmp(value, "DIR")))
            snprintf(full, sizeof full, BASE "%s %s", flag, !strcmp(value, "DIR") ? tmp : value);
        else snprintf(full, sizeof full, BASE "%s%s", flag,
                      !strcmp(flag, "--overlap-param-gather")
                          ? " --use-distributed-optimizer --overlap-grad-reduce"
                      : !strcmp(flag, "--no-position-embedding")
                          ? " --position-embedding-type rope" : "");
        if (gpt_parse_line(&a, full, err, sizeof err) == 0) parsed++;
        else fprintf(stderr, "%s: %s\n", full, err);
    }
    fclose(f);
    mg_test_report(listed >= 30 && parsed == listed, "cli: --help lists Megatron-LM's flags "
                   "accepted for compatibility, and each parses", "%d listed, %d parsed",
                   listed, parsed);
    /* a Megatron-LM pretrain_gpt.sh-style line trains: every switch accepted, one warning
       each for Transformer Engine and the checkpoint format; --no-bias-gelu-fusion gives
       the exact GELU, as there                                                          */
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 build/gpt_train --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 "
             "--micro-batch-size 1 --global-batch-size 2 --lr 1e-3 --train-iters 2 "
             "--lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0 "
             "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 --split 1,0,0 "
             "--eval-iters 0 --log-interval 1 --use-mcore-models --transformer-impl "
             "transformer_engine --use-flash-attn --overlap-grad-reduce "
             "--accumulate-allreduce-grads-in-fp32 --attention-softmax-in-fp32 "
             "--no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-dropout-fusion "
             "--no-gradient-accumulation-fusion --no-async-tensor-model-parallel-allreduce "
             "--distributed-backend nccl --use-cpu-initialization --num-workers 2 "
             "--dataloader-type single --empty-unused-memory-level 0 --data-cache-path %s "
             "--no-create-attention-mask-in-dataloader --log-throughput "
             "--recompute-activations --make-vocab-size-divisible-by 128 --no-load-rng "
             "--no-save-rng --ckpt-format torch 2>&1; echo \"status $?\"", tmp);
    status = gpt_capture(cmd, out, sizeof out);
    for (i = 0; out[i]; i++)
        warnings += !strncmp(out + i, "gpt_train: warning:", 19);
    CHECK(status == 0 && strstr(out, "iteration        2/       2") &&
          strstr(out, "recomputation selective") && strstr(out, "status 0\n") && warnings == 2 &&
          strstr(out, "LayerNorm, exact-GELU MLP of width 64") &&
          strstr(out, "gpt_train: warning: --transformer-impl transformer_engine: no Transformer "
                 "Engine here") && strstr(out, "gpt_train: warning: --ckpt-format: checkpoints "
                 "are megatron.h's"),
          "cli: a Megatron-LM pretrain_gpt.sh-style line (fusion switches, --use-mcore-models, "
          "--use-flash-attn, --overlap-grad-reduce, …) trains 2 iterations, with one warning "
          "each for --transformer-impl transformer_engine and --ckpt-format, and the exact "
          "GELU of --no-bias-gelu-fusion");
    if (!strstr(out, "status 0\n") || warnings != 2) fprintf(stderr, "%s\n", out);
    (void)tr;
}

/* --make-vocab-size-divisible-by N pads V to a multiple of N·t (Megatron-LM's rule; default
   128); checkpoints hold the V real rows, so one saved under one N loads under another.   */
static void check_vocab_divisor(void) {
    mg_trainer tr;
    char dir[400], err[MG_ERRLEN];
    int rc;
    gpt_trainer_from_line(&tr, BASE "--make-vocab-size-divisible-by 1");
    mg_test_report(tr.cfg.padded_vocab == 37, "cli: --make-vocab-size-divisible-by 1 leaves "
                   "V = 37 unpadded", "padded %d", tr.cfg.padded_vocab);
    mg_trainer_step(&tr);
    snprintf(dir, sizeof dir, "%s/vocab_divisor", tmp);
    rc = mg_trainer_save(&tr, dir, err, sizeof err);
    mg_trainer_free(&tr);
    mg_test_report(rc == 0, "cli: saved under --make-vocab-size-divisible-by 1", "%s",
                   rc ? err : "saved");
    {
        char line[1024];
        snprintf(line, sizeof line, BASE "--make-vocab-size-divisible-by 48 --load %s", dir);
        gpt_trainer_from_line(&tr, line);
        CHECK(tr.cfg.padded_vocab == 48 && tr.loaded_iteration == 1, "cli: that checkpoint "
              "resumes under --make-vocab-size-divisible-by 48 (V padded to 48, iteration 1)");
        mg_trainer_free(&tr);
    }
    gpt_trainer_from_line(&tr, BASE);
    CHECK(tr.cfg.padded_vocab == 128, "cli: the default pads V = 37 to 128");
    mg_trainer_free(&tr);
}

int main(void) {
    gpt_tmpdir(tmp, sizeof tmp, "cli");
    check_flags();
    check_attention_backend_names();
    check_environment();
    check_help();
    check_required_and_sizes();
    check_paths_and_data();
    check_no_validation();
    check_data_args_files();
    check_nan_validation();
    check_jsonl_write_failure();
    check_warmup_fraction_and_init();
    check_lr_styles_and_weight_decay_incr();
    check_sample_based();
    check_init_method_std();
    check_init_xavier();
    check_weights_and_checkpoints();
    check_small_files();
    check_finetune();
    check_gelu_on_resume();
    check_layernorm_1p();
    check_no_save_optim();
    check_decoupled_lr();
    check_no_load_optim();
    check_long_paths();
    check_program();
    check_make_help();
    check_megatron_compat();
    check_vocab_divisor();
    gpt_rmtree(tmp);
    return mg_test_summary();
}
