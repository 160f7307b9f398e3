// mg-test: ranks=1,2,4 timeout=120
/* test_cli_dp.c — the data-parallel flags of gpt_train (d = world / t replicas): every bad
   combination fails with one line "what is wrong, what would be valid", on every rank, before
   any group is built (only the world agrees on the verdict):
     a global batch that the d replicas cannot share in whole microbatches; --bucket-size
     negative; --use-distributed-optimizer given a value;
   and valid lines with d > 1 (with and without the distributed optimizer) are accepted and
   give each rank its data-parallel coordinate, its share of the batch and the sharded
   optimizer state. From the 1-rank run, the program itself under mpirun -np 4 with t=2 (d=2):
   exit status 0 and the log's first lines name every rank's (tp, dp, pp) coordinates; a bad
   batch: one error line for the whole job, exit status 2. A one-document data set under the
   default --split: every rank sets up without a validation set, and under mpirun -np 2 the
   job trains, exits 0 and prints once that validation is skipped.                          */
#include "gpt_test_util.h"

static mg_comm comm;
static int world;

/* The line must fail with one line containing `want` on every rank, before any communication. */
static void expect_error(const char *what, const char *line, const char *want) {
    char label[64];
    snprintf(label, sizeof label, "cli dp (%d rank%s)", world, world > 1 ? "s" : "");
    gpt_expect_error(&comm, label, what, line, want);
}

#define BASE "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 --num-layers 1 " \
             "--seq-length 16 --train-iters 2 --lr 1e-3 --split 1,0,0 --eval-iters 0 "     \
             "--hidden-size 32 --num-attention-heads 4 "

/* A one-document data set (no end-of-text token: one sequence) in a fresh file; its path.
   SKIPPED: how the note on it begins.                                                      */
#define SKIPPED "validation skipped: --split 969,30,1 gives the validation part none of the 1 " \
                "document of "
static void write_one_document(char *path, size_t cap) {
    int32_t toks[200];
    char err[MG_ERRLEN];
    int i, fd;
    snprintf(path, cap, "/tmp/mg_cli_dp_one_XXXXXX");
    fd = mkstemp(path);
    if (fd < 0) { perror("mkstemp"); exit(1); }
    close(fd);
    for (i = 0; i < 200; i++) toks[i] = (i * 5) % 37;
    if (mg_llmc_tokens_write(path, MG_LLMC_GPT2, toks, 200, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
}

static void check_library(void) {
    char line[1024], want[300];
    uint64_t sent = 0;
    int k;
    if (world > 1) {
        snprintf(line, sizeof line, BASE "--micro-batch-size 2 --global-batch-size %d",
                 2 * world + 2);
        snprintf(want, sizeof want, "--global-batch-size %d is not a multiple of "
                 "--micro-batch-size 2 x %d data-parallel replicas (%d ranks / "
                 "--tensor-model-parallel-size 1); use a multiple of %d", 2 * world + 2, world,
                 world, 2 * world);
        expect_error("global batch not shared by the replicas", line, want);
    }
    expect_error("negative bucket size", BASE "--bucket-size -5", "--bucket-size -5: out of range");
    if (world > 1) {   /* the graph captures one rank's optimizer step: refused here */
        char want[200];
        snprintf(want, sizeof want, "--enable-cuda-graph captures the optimizer step of one rank; "
                 "with %d ranks", world);
        expect_error("--enable-cuda-graph over several ranks", BASE "--enable-cuda-graph", want);
    }
    expect_error("--use-distributed-optimizer with a value", BASE
                 "--use-distributed-optimizer=1", "--use-distributed-optimizer takes no value");
    for (k = 0; k < MG_GROUP_KINDS; k++)   /* the world's verdict agreement aside */
        if (k != MG_GROUP_WORLD) sent += comm.bytes_sent[k];
    mg_test_report(mg_test_agree(comm.data.size == 0 && sent == 0), "cli dp: every error came "
                   "before any group was built (no data group, nothing sent on one)", "%s", "");
    {   /* one document, the default --split: every rank builds no validation set */
        mg_trainer tr;
        char one[64], err[MG_ERRLEN] = {0}, name[200];
        int ok;
        write_one_document(one, sizeof one);
        snprintf(line, sizeof line, "--data-path %s --vocab-size 37 --num-layers 1 "
                 "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 "
                 "--lr 1e-3 --global-batch-size %d", one, world);
        ok = gpt_setup_line(&tr, line, &comm, err, sizeof err) == 0;
        if (ok) {
            ok = !tr.has_valid && !strncmp(tr.valid_note, SKIPPED, strlen(SKIPPED)) &&
                 isnan(mg_trainer_evaluate(&tr, NULL));
            mg_trainer_free(&tr);
        }
        remove(one);
        snprintf(name, sizeof name, "cli dp (%d rank%s): one document, default --split: every "
                 "rank sets up without a validation set", world, world > 1 ? "s" : "");
        mg_test_report(mg_test_agree(ok), name, "%s", err);
    }
    {   /* no --global-batch-size: Megatron-LM's default, micro-batch x d */
        mg_trainer tr;
        char err[MG_ERRLEN] = {0}, name[200];
        int ok;
        snprintf(line, sizeof line, BASE "--micro-batch-size 2");
        ok = gpt_setup_line(&tr, line, &comm, err, sizeof err) == 0;
        if (ok) {
            ok = tr.args.global_batch_size == 2 * world && tr.n_micro == 1;
            mg_trainer_free(&tr);
        }
        snprintf(name, sizeof name, "cli dp (%d rank%s): no --global-batch-size: the default is "
                 "--micro-batch-size 2 x d = %d, one microbatch per replica", world,
                 world > 1 ? "s" : "", 2 * world);
        mg_test_report(mg_test_agree(ok), name, "%s", err);
    }
    /* valid lines: t = 1 (d = world) with and without the distributed optimizer */
    for (k = 0; k < 2; k++) {
        mg_trainer tr;
        char err[MG_ERRLEN] = {0}, name[200];
        int ok;
        snprintf(line, sizeof line, BASE "--micro-batch-size 1 --global-batch-size %d%s",
                 2 * world, k ? " --use-distributed-optimizer --bucket-size 1000" : "");
        ok = gpt_setup_line(&tr, line, &comm, err, sizeof err) == 0;
        if (ok) {
            ok = tr.dp_size == world && tr.dp_rank == comm.world_rank && tr.n_micro == 2 &&
                 tr.opt.n == (k && world > 1 ? tr.model.n_elems / world : tr.model.n_elems) &&
                 (k == 0 || world == 1 || tr.dp.n_buckets > 1);
            mg_trainer_free(&tr);
        } else fprintf(stderr, "rank %d: %s\n", comm.world_rank, err);
        snprintf(name, sizeof name, "cli dp (%d rank%s): valid line%s accepted: d = %d, 2 "
                 "microbatches per replica%s", world, world > 1 ? "s" : "",
                 k ? " with --use-distributed-optimizer" : "", world,
                 k ? ", moments sharded" : "");
        mg_test_report(mg_test_agree(ok), name, "%s", err);
    }
}

/* Counts the layout lines of the log: the summary line, one line per rank, and which layers
   each pipeline stage holds (with p = 1 one line for every rank).                          */
static void count_layout(const char *line, void *user) {
    int *count = (int *)user;
    if (!strncmp(line, "rank ", 5) && strstr(line, " tp ") && strstr(line, " dp ") &&
        strstr(line, " pp ")) (*count)++;
    if (!strncmp(line, "gpt_train: layout t=", 20) && strstr(line, "x d=2")) (*count)++;
    if (!strcmp(line, "every rank holds the embeddings, layers 0-1, the final layernorm, "
                      "output layer and loss\n") ||
        !strcmp(line, "pipeline stage 0 holds the embeddings, layer 0\n") ||
        !strcmp(line, "pipeline stage 1 holds layer 1, the final layernorm, output layer and "
                      "loss\n")) (*count)++;
}

/* The program under mpirun -np 4: error lines, exit status, layout lines of the log. */
static int program_run(const char *flags, int *status, int *layout_lines, char *first,
                       size_t cap) {
    char args[2048];
    snprintf(args, sizeof args, BASE "--num-layers 2 --device cpu %s", flags);   /* later flags win */
    *layout_lines = 0;
    return gpt_mpirun_train(4, args, status, first, cap, count_layout, layout_lines);
}

/* Counts the lines saying validation is skipped, and validation lines. */
static void count_skip(const char *line, void *user) {
    int *count = (int *)user;
    if (!strncmp(line, "gpt_train: ", 11) && !strncmp(line + 11, SKIPPED, strlen(SKIPPED)))
        count[0]++;
    if (strstr(line, "validation loss")) count[1]++;
}

/* One document, the default --split, d = 2 replicas on 2 ranks: every rank trains without
   validation (each --eval-interval and the end skipped alike), rank 0 says so once.      */
static void check_program_no_validation(void) {
    char one[64], args[1024], first[2048];
    int status, n, count[2] = {0, 0};
    write_one_document(one, sizeof one);
    snprintf(args, sizeof args, "--data-path %s --vocab-size 37 --num-layers 1 --hidden-size 16 "
             "--num-attention-heads 2 --seq-length 8 --micro-batch-size 1 --global-batch-size 2 "
             "--train-iters 3 --lr 1e-3 --eval-interval 1 --eval-iters 2 --device cpu", one);
    n = gpt_mpirun_train(2, args, &status, first, sizeof first, count_skip, count);
    mg_test_report(n == 0 && status == 0 && count[0] == 1 && count[1] == 0, "cli dp: mpirun -np "
                   "2 gpt_train on one document with the default --split: both ranks train, exit "
                   "0, one line says validation is skipped", "%d error lines, status %d, %d skip "
                   "lines, %d validation lines: %s", n, status, count[0], count[1], first);
    remove(one);
}

static void check_program(void) {
    char first[2048];
    int status, n, lines;
    if (access("build/gpt_train", X_OK) != 0) {
        mg_test_report(0, "cli dp: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    /* flags, layout lines expected (summary + 4 ranks + the layers: one line with p = 1,
       one per stage with p = 2), what the run is */
    static const struct { const char *flags; int lines; const char *what; } runs[2] = {
        {"--tensor-model-parallel-size 2 --use-distributed-optimizer", 6,
         "t=2 (d=2, distributed optimizer)"},
        {"--pipeline-model-parallel-size 2", 7, "p=2 (d=2)"}};
    int i;
    for (i = 0; i < 2; i++) {
        char flags[300], name[300];
        snprintf(flags, sizeof flags, "%s --micro-batch-size 1 --global-batch-size 4",
                 runs[i].flags);
        n = program_run(flags, &status, &lines, first, sizeof first);
        snprintf(name, sizeof name, "cli dp: mpirun -np 4 gpt_train %s trains; the log opens "
                 "with the layout, the 4 ranks' (tp, dp, pp) and the layers they hold",
                 runs[i].what);
        mg_test_report(n == 0 && status == 0 && lines == runs[i].lines, name, "%d error lines, "
                       "status %d, %d layout lines: %s", n, status, lines, first);
    }
    check_program_no_validation();
    n = program_run("--tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 3",
                    &status, &lines, first, sizeof first);
    mg_test_report(n == 1 && status == 2 && strstr(first, "data-parallel replicas"),
                   "cli dp: mpirun -np 4 gpt_train with a batch 2 replicas cannot share: one "
                   "error line, exit status 2", "%d lines, status %d: %s", n, status, first);
}

int main(int argc, char **argv) {
    return gpt_cli_main(&argc, &argv, &comm, &world, check_program, check_library);
}
