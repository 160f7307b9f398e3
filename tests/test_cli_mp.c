// mg-test: ranks=1,2 timeout=120 flavors=cpu,asan
/* test_cli_mp.c — the recomputation and mixed-precision flags of gpt_train (issue 8).
   Bad combinations are refused with one line "what is wrong, what would be valid", on every
   rank, before any communication: --bf16 with --fp16; loss-scale flags without --fp16;
   --recompute-method / --recompute-num-layers with --recompute-granularity selective (without
   a granularity they are accepted and ignored, as in Megatron-LM); more
   recomputed layers than layers; an unknown granularity; --hysteresis 0; a minimum loss
   scale above the initial one. Then, from the 1-rank run, the program itself: an fp16 run
   with selective recomputation prints its precision line, the loss scale in Megatron's log
   line (2^32 halving: the first iterations overflow and are counted as skipped) and both
   throughput figures (with and without recomputed FLOPs); a bf16 full-recomputation run
   trains with loss scale 1.                                                               */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

/* The line must fail with one line containing want on every rank, before any tensor-group
   communication; want NULL: it must be accepted (parse and setup) on every rank. */
static void expect_verdict(const char *what, const char *line, const char *want) {
    mg_train_args a;
    mg_trainer tr;
    char err[MG_ERRLEN] = {0}, name[300];
    uint64_t sent = comm.bytes_sent[MG_GROUP_TENSOR];
    int failed = gpt_parse_line(&a, line, err, sizeof err) != 0, ok;
    if (!failed) {
        a.comm = &comm;
        failed = mg_trainer_setup(&tr, &a, err, sizeof err) != 0;
        if (!failed) mg_trainer_free(&tr);
    }
    ok = want ? failed && strstr(err, want) && !strchr(err, '\n') &&
                    comm.bytes_sent[MG_GROUP_TENSOR] == sent
              : !failed;
    snprintf(name, sizeof name, "cli mp (%d rank%s): %s", world, world > 1 ? "s" : "", what);
    if (!ok)
        fprintf(stderr, "rank %d: %s: got '%s', want '%s'\n", comm.world_rank, what,
                failed ? err : "accepted", want ? want : "accepted");
    mg_test_report(mg_test_agree(ok), name, "%s", failed ? err : "accepted");
}

#define BASE "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 --num-layers 2 " \
             "--hidden-size 32 --num-attention-heads 4 --seq-length 16 --train-iters 2 "  \
             "--lr 1e-3 --split 1,0,0 --eval-iters 0 "

static void check_library(void) {
    char line[1024];
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --bf16 --fp16", world);
    expect_verdict("--bf16 with --fp16", line, "--bf16 and --fp16 exclude each other");
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --bf16 --loss-scale 8",
             world);
    expect_verdict("--loss-scale without --fp16", line, "--loss-scale applies to --fp16 only");
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --hysteresis 3", world);
    expect_verdict("--hysteresis without --fp16", line, "--hysteresis applies to --fp16 only");
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --fp16 --hysteresis 0",
             world);
    expect_verdict("--hysteresis 0", line, "--hysteresis 0: out of range");
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --fp16 "
             "--initial-loss-scale 4 --min-loss-scale 8", world);
    expect_verdict("min loss scale above the initial", line,
                 "--min-loss-scale 8 is larger than --initial-loss-scale 4");
    /* Megatron-LM looks at the method and the layer count only with a granularity */
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --recompute-method block "
             "--recompute-num-layers 3", world);
    expect_verdict("--recompute-method and --recompute-num-layers without a granularity are "
                 "accepted", line, NULL);
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --recompute-granularity "
             "selective --recompute-method uniform", world);
    expect_verdict("--recompute-method with selective", line,
                 "--recompute-method applies to --recompute-granularity full only, not to "
                 "selective");
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --recompute-granularity "
             "selective --recompute-num-layers 1", world);
    expect_verdict("--recompute-num-layers with selective", line,
                 "--recompute-num-layers applies to --recompute-granularity full only");
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --recompute-granularity "
             "full --recompute-num-layers 3", world);
    expect_verdict("more recomputed layers than layers", line,
                 "--recompute-num-layers 3: must be 1 … --num-layers 2");
    snprintf(line, sizeof line, BASE "--tensor-model-parallel-size %d --recompute-granularity "
             "layer", world);
    expect_verdict("unknown granularity", line,
                 "--recompute-granularity layer: invalid choice (expected one of "
                 "none|selective|full)");
}

/* Runs the program; returns its combined output (static buffer). */
static const char *run(const char *flags) {
    static char out[16384];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 build/gpt_train --init-from %sgpt_model.bin "
             "--data-path %sgpt_tokens.bin --split 1,0,0 --eval-iters 0 --seq-length 16 "
             "--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 %s 2>&1; "
             "echo \"status $?\"", GPT_DATA, GPT_DATA, flags);
    gpt_capture(cmd, out, sizeof out);
    return out;
}

static void check_program(void) {
    const char *out;
    int ok;
    if (access("build/gpt_train", X_OK) != 0) {
        mg_test_report(0, "cli mp: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    out = run("--train-iters 3 --fp16 --recompute-granularity selective");
    ok = strstr(out, "gpt_train: fp16 activations and weight copy (fp32 master weights), "
                "dynamic loss scale; recomputation selective") &&
         strstr(out, "loss scale: 4294967296.0 |") &&             /* iteration 1: 2^32 */
         strstr(out, "loss scale: 2147483648.0 |") &&             /* iteration 3: halved */
         strstr(out, "number of skipped iterations:   1 |") &&
         strstr(out, "throughput per GPU (TFLOP/s/GPU): ") &&
         strstr(out, "| with recomputed FLOPs (TFLOP/s/GPU): ") && strstr(out, "status 0\n");
    mg_test_report(ok, "cli mp: gpt_train --fp16 prints precision, loss scale, skipped "
                   "iterations and both throughputs", "%s", "");
    if (!ok) fprintf(stderr, "%s\n", out);
    out = run("--train-iters 2 --bf16 --recompute-granularity full --recompute-method block "
              "--recompute-num-layers 1");
    ok = strstr(out, "gpt_train: bf16 activations and weight copy (fp32 master weights); "
                "recomputation full") && strstr(out, "loss scale: 1.0 |") &&
         strstr(out, "number of skipped iterations:   0 |") && strstr(out, "status 0\n");
    mg_test_report(ok, "cli mp: gpt_train --bf16 with full recomputation trains", "%s", "");
    if (!ok) fprintf(stderr, "%s\n", out);
}

int main(int argc, char **argv) {
    mg_comm_init(&comm, &argc, &argv);
    world = comm.world_size;
    mg_test_quiet = comm.world_rank != 0;
    check_library();
    if (world == 1) check_program();
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
