// mg-test: ranks=1,2,4 timeout=120
/* test_cli_tp.c — the tensor-parallel flags of gpt_train reject every bad combination with one
   line "what is wrong, what would be valid", on every rank, before any communication but
   the ranks' agreement on the verdict (one all-reduce over the world; the groups are never
   built and nothing travels on them):
     world size not a multiple of --tensor-model-parallel-size; ranks left over for data
     parallelism with a global batch they cannot share; hidden size or heads not divisible by t; sequence
     length not divisible by t with --sequence-parallel; --sequence-parallel given a value;
     dropout probabilities outside [0, 1); t out of range. --sequence-parallel with t = 1 runs
     with one warning that it is off (Megatron-LM's validate_args).
   Checked through the library (mg_train_parse + mg_trainer_setup with the job's comm) on 1, 2
   and 4 ranks, and, from the 1-rank run, through the program itself launched by mpirun on 2
   ranks: exit status 2 and exactly one error line for the whole job.                       */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

/* The line must fail with one line containing `want` on every rank, before any communication. */
static void expect_error(const char *what, const char *line, const char *want) {
    char label[64];
    snprintf(label, sizeof label, "cli tp (%d rank%s)", world, world > 1 ? "s" : "");
    gpt_expect_error(&comm, label, what, line, want);
}

#define BASE "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 --num-layers 1 " \
             "--seq-length 16 --train-iters 2 --lr 1e-3 --split 1,0,0 --eval-iters 0 "

static void check_library(void) {
    char line[1024], want[200];
    int t = world;
    uint64_t sent = 0;
    int k;
    /* world size against t */
    snprintf(line, sizeof line, BASE "--hidden-size 32 --num-attention-heads 4 "
             "--tensor-model-parallel-size %d", 2 * world);
    snprintf(want, sizeof want, "--tensor-model-parallel-size %d does not divide the %d "
             "launched ranks", 2 * world, world);
    expect_error("world size not a multiple of t", line, want);
    if (world > 1) {
        snprintf(want, sizeof want, "--global-batch-size 1 is not a multiple of "
                 "--micro-batch-size 1 x %d data-parallel replicas", world);
        expect_error("ranks left for data parallelism need a divisible batch", BASE
                     "--hidden-size 32 --num-attention-heads 4 --global-batch-size 1", want);
        /* sizes against t = world */
        snprintf(line, sizeof line, BASE "--hidden-size %d --num-attention-heads 3 "
                 "--tensor-model-parallel-size %d", 3 * (t + 1), t);
        snprintf(want, sizeof want, "--hidden-size %d is not divisible by "
                 "--tensor-model-parallel-size %d", 3 * (t + 1), t);
        expect_error("hidden size not divisible by t", line, want);
        snprintf(line, sizeof line, BASE "--hidden-size %d --num-attention-heads 3 "
                 "--tensor-model-parallel-size %d", 3 * t * 4, t);
        snprintf(want, sizeof want, "--num-attention-heads 3 is not divisible by "
                 "--tensor-model-parallel-size %d", t);
        expect_error("heads not divisible by t", line, want);
        snprintf(line, sizeof line, BASE "--hidden-size 32 --num-attention-heads 4 "
                 "--tensor-model-parallel-size %d --sequence-parallel --seq-length %d", t, 4 * t + 1);
        snprintf(want, sizeof want, "--seq-length %d is not divisible by "
                 "--tensor-model-parallel-size %d", 4 * t + 1, t);
        expect_error("sequence not divisible by t with --sequence-parallel", line, want);
    }
    expect_error("--sequence-parallel with a value", BASE "--hidden-size 32 "
                 "--num-attention-heads 4 --sequence-parallel=1",
                 "--sequence-parallel takes no value");
    expect_error("t of zero", BASE "--tensor-model-parallel-size 0", "out of range");
    expect_error("hidden dropout of 1", BASE "--hidden-dropout 1", "--hidden-dropout 1: out of "
                 "range (expected P, a number >= 0 and below 1)");
    expect_error("negative attention dropout", BASE "--attention-dropout -0.1",
                 "--attention-dropout -0.1: out of range");
    for (k = 0; k < MG_GROUP_KINDS; k++)
        if (k != MG_GROUP_WORLD) sent += comm.bytes_sent[k];
    mg_test_report(mg_test_agree(comm.tensor.size == 0 && sent == 0), "cli tp: every error came "
                   "before any communication but the world's agreement on it (no groups built, "
                   "nothing sent on them)", "%s", "");
    /* and the valid line is accepted (this one builds the groups) */
    {
        mg_train_args a;
        mg_trainer tr;
        char err[MG_ERRLEN] = {0};
        int ok;
        snprintf(line, sizeof line, BASE "--hidden-size 32 --num-attention-heads 4 "
                 "--tensor-model-parallel-size %d --sequence-parallel", t);
        ok = gpt_parse_line(&a, line, err, sizeof err) == 0;
        a.comm = &comm;
        ok = ok && mg_trainer_setup(&tr, &a, err, sizeof err) == 0;
        if (ok) mg_trainer_free(&tr);
        else fprintf(stderr, "rank %d: %s\n", comm.world_rank, err);
        mg_test_report(mg_test_agree(ok), "cli tp: the valid tensor-parallel line is accepted",
                       "%s", "");
    }
}

/* The program on 2 ranks (mpirun from the 1-rank run only): the "gpt_train: error:" lines. */
static int program_errors(const char *flags, int *status, char *first, size_t cap) {
    char args[2048];
    snprintf(args, sizeof args, BASE "%s", flags);
    return gpt_mpirun_train(2, args, status, first, cap, NULL, NULL);
}

/* on_line of gpt_mpirun_train: counts the lines that begin with prefix. */
typedef struct { const char *prefix; int count; } line_count;
static void count_lines(const char *line, void *user) {
    line_count *c = (line_count *)user;
    if (!strncmp(line, c->prefix, strlen(c->prefix))) c->count++;
}

static void check_program(void) {
    char first[1024];
    line_count warning = {"gpt_train: warning: --sequence-parallel is off: it needs "
                          "--tensor-model-parallel-size > 1", 0};
    char args[2048];
    int status, n;
    if (access("build/gpt_train", X_OK) != 0) {
        mg_test_report(0, "cli tp: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    n = program_errors("--hidden-size 30 --num-attention-heads 3 --tensor-model-parallel-size 2",
                       &status, first, sizeof first);
    mg_test_report(n == 1 && status == 2 && strstr(first, "--num-attention-heads 3 is not "
                   "divisible by --tensor-model-parallel-size 2"), "cli tp: mpirun -np 2 "
                   "gpt_train with bad heads: one error line, exit status 2", "%d lines, status "
                   "%d: %s", n, status, first);
    n = program_errors("--hidden-size 32 --num-attention-heads 4 --tensor-model-parallel-size 2 "
                       "--sequence-parallel --seq-length 15", &status, first, sizeof first);
    mg_test_report(n == 1 && status == 2 && strstr(first, "--seq-length 15 is not divisible"),
                   "cli tp: mpirun -np 2 gpt_train --sequence-parallel with an odd sequence: one "
                   "error line, exit status 2", "%d lines, status %d: %s", n, status, first);
    /* Megatron-LM's validate_args turns it off with t = 1 and warns once (warn_rank_0) */
    snprintf(args, sizeof args, BASE "--hidden-size 32 --num-attention-heads 4 "
             "--sequence-parallel --log-interval 1");
    n = gpt_mpirun_train(2, args, &status, first, sizeof first, count_lines, &warning);
    mg_test_report(n == 0 && status == 0 && warning.count == 1, "cli tp: mpirun -np 2 "
                   "gpt_train --sequence-parallel with t = 1 trains and warns once that it is "
                   "off", "%d error lines, status %d, %d warnings", n, status, warning.count);
    n = program_errors("--hidden-size 32 --num-attention-heads 4 --global-batch-size 1", &status,
                       first, sizeof first);
    mg_test_report(n == 1 && status == 2 && strstr(first, "data-parallel replicas"),
                   "cli tp: mpirun -np 2 gpt_train without --tensor-model-parallel-size: one "
                   "error line, exit status 2", "%d lines, status %d: %s", n, status, first);
}

int main(int argc, char **argv) {
    return gpt_cli_main(&argc, &argv, &comm, &world, check_program, check_library);
}
