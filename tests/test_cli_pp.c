// mg-test: ranks=1,2 timeout=120
/* test_cli_pp.c — every bad pipeline-parallel configuration of gpt_train gets one line "what
   is wrong, what would be valid" on every rank before any work, and nothing is written:
     world size and p (p does not divide it; a batch the d = world/(t·p) replicas cannot
     share; p > 1 without enough ranks), layers and p·v, --num-layers-per-virtual-pipeline-
     stage, the pipeline flags without a pipeline, schedules that cannot run the chunks or
     the microbatches (1F1B or ZB-H1 with v > 1, interleaved with a bad microbatch count;
     K giving one chunk per rank is 1F1B, as in Megatron-LM, with any microbatch count;
     --num-virtual-stages-per-pipeline-rank V: v = V, not with K, V dividing a rank's layers;
     ZB-H1 with 16 bits and full recomputation is accepted — trained in test_recompute,
     test_mixed and test_dp),
     --pipeline-schedule with --pipeline-schedule-file, schedule files (missing, malformed,
     for another p, missing a microbatch, v·p not dividing the layers), the --pipeline-trace
     path and a bad schedule name. A problem seen by one rank only stops every rank, with
     that rank's message. On one rank, the built program build/gpt_train exits with status 2
     and one line. (--export-hf and --sample-tokens work with p > 1: tests/test_pp_io.c.)
   Each case runs on the world size it needs (1 or 2 ranks; the runner starts both).       */
#include "gpt_test_util.h"
#include <sys/stat.h>
#include <sys/wait.h>

static mg_comm comm;
static char tmp[256];

/* On a world of `world` ranks only: the line must fail in parse or setup on every rank, with
   a one-line message containing want (the same verdict everywhere).                      */
static void expect_error(int world, const char *what, const char *line, const char *want) {
    mg_train_args a;
    mg_trainer tr;
    char err[MG_ERRLEN] = {0}, name[300];
    int failed, ok;
    if (comm.world_size != world) return;
    failed = gpt_parse_line(&a, line, err, sizeof err) != 0;
    if (!failed) {
        a.comm = &comm;
        failed = mg_trainer_setup(&tr, &a, err, sizeof err) != 0;
        if (!failed) mg_trainer_free(&tr);
    }
    ok = mg_test_agree(failed && strstr(err, want) && !strchr(err, '\n'));
    snprintf(name, sizeof name, "cli pp (%d rank%s): %s", world, world > 1 ? "s" : "", what);
    mg_test_report(ok, name, "%s", failed ? err : "accepted");
}

/* On a world of `world` ranks only: the line passes parse and setup on every rank and
   (kind >= 0) builds schedule `kind` with v chunks per rank.                                */
static void expect_schedule(int world, const char *what, const char *line, int kind, int v) {
    mg_train_args a;
    mg_trainer tr;
    char err[MG_ERRLEN] = {0}, name[300];
    int ok;
    if (comm.world_size != world) return;
    ok = gpt_parse_line(&a, line, err, sizeof err) == 0;
    a.comm = &comm;
    ok = ok && mg_trainer_setup(&tr, &a, err, sizeof err) == 0;
    if (ok) {
        if (kind >= 0 && (tr.pipe_sched.kind != kind || tr.vp != v)) {
            snprintf(err, sizeof err, "schedule %s with v = %d",
                     mg_schedule_kind_name(tr.pipe_sched.kind), tr.vp);
            ok = 0;
        }
        mg_trainer_free(&tr);
    }
    snprintf(name, sizeof name, "cli pp (%d rank%s): %s", world, world > 1 ? "s" : "", what);
    mg_test_report(mg_test_agree(ok), name, "%s", err);
}

static void expect_ok(int world, const char *what, const char *line) {
    expect_schedule(world, what, line, -1, 0);
}

/* A valid base: 4 layers, 4 microbatches of 1. */
#define BASE "--data-path " GPT_DATA "gpt_tokens.bin --vocab-size 37 --num-layers 4 " \
             "--hidden-size 16 --num-attention-heads 2 --seq-length 8 --train-iters 2 " \
             "--lr 1e-3 --split 1,0,0 --eval-iters 0 --global-batch-size 4 "

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) { perror(path); exit(1); }
    fclose(f);
}

static void check_world_and_sizes(void) {
    expect_error(1, "p > 1 on one rank", BASE "--pipeline-model-parallel-size 2",
                 "--pipeline-model-parallel-size 2 does not divide the 1 launched ranks");
    expect_error(2, "p does not divide the world", BASE "--pipeline-model-parallel-size 4",
                 "--pipeline-model-parallel-size 4 does not divide the 2 launched ranks");
    expect_error(2, "d = world/p replicas need a divisible batch", BASE "--global-batch-size 3",
                 "--global-batch-size 3 is not a multiple of --micro-batch-size 1 x 2 "
                 "data-parallel replicas");
    expect_error(2, "layers not divisible by p", BASE "--num-layers 3 "
                 "--pipeline-model-parallel-size 2",
                 "--num-layers 3 is not divisible by --pipeline-model-parallel-size 2 (each stage "
                 "holds layers/p layers: use a multiple of 2, e.g. --num-layers 4)");
    expect_error(2, "K does not divide a rank's layers", BASE "--pipeline-model-parallel-size 2 "
                 "--num-layers-per-virtual-pipeline-stage 3",
                 "--num-layers-per-virtual-pipeline-stage 3 does not divide the 2 layers");
    expect_error(2, "K out of range", BASE "--pipeline-model-parallel-size 2 "
                 "--num-layers-per-virtual-pipeline-stage 0", "out of range");
    expect_error(1, "K without a pipeline", BASE "--num-layers-per-virtual-pipeline-stage 1",
                 "--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size "
                 "> 1");
    expect_error(1, "--pipeline-schedule without a pipeline", BASE "--pipeline-schedule gpipe",
                 "--pipeline-schedule needs --pipeline-model-parallel-size > 1");
    expect_error(1, "--pipeline-trace without a pipeline", BASE "--pipeline-trace /tmp/x.trace",
                 "--pipeline-trace needs --pipeline-model-parallel-size > 1");
    expect_error(1, "--comm-timeout of 0", BASE "--comm-timeout 0",
                 "--comm-timeout 0: out of range");
    expect_error(2, "bad schedule name", BASE "--pipeline-model-parallel-size 2 "
                 "--pipeline-schedule zerobubble",
                 "invalid choice (expected one of gpipe|1f1b|interleaved|zb-h1)");
}

static void check_schedules(void) {
    char line[2048];
    expect_error(2, "1F1B with two chunks per rank", BASE "--pipeline-model-parallel-size 2 "
                 "--num-layers-per-virtual-pipeline-stage 1 --pipeline-schedule 1f1b",
                 "schedule 1f1b runs one model chunk per rank, but v = 2");
    expect_error(2, "ZB-H1 with two chunks per rank", BASE "--pipeline-model-parallel-size 2 "
                 "--num-layers-per-virtual-pipeline-stage 1 --pipeline-schedule zb-h1",
                 "schedule zb-h1 runs one model chunk per rank, but v = 2");
    expect_ok(2, "ZB-H1 with bf16 is accepted", BASE "--pipeline-model-parallel-size 2 "
              "--pipeline-schedule zb-h1 --bf16");
    expect_ok(2, "ZB-H1 with fp16 and full block recomputation is accepted", BASE
              "--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1 --fp16 "
              "--recompute-granularity full --recompute-method block");
    expect_error(2, "interleaved with m = 3 microbatches", BASE "--pipeline-model-parallel-size "
                 "2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 3",
                 "m = 3 microbatches must be a multiple of the microbatch group");
    /* Megatron-LM's validate_args: K = the layers of a rank is one virtual stage, no virtual
       pipeline (virtual_pipeline_model_parallel_size None): 1F1B, any microbatch count */
    expect_schedule(2, "K giving one chunk per rank runs 1F1B, m = 3 accepted", BASE
                    "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
                    "--global-batch-size 3", MG_SCHED_1F1B, 1);
    expect_schedule(2, "K giving two chunks per rank runs the interleaved schedule", BASE
                    "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1",
                    MG_SCHED_INTERLEAVED, 2);
    /* Megatron-LM's other name for v: --num-virtual-stages-per-pipeline-rank V */
    expect_schedule(2, "V = 2 chunks per rank runs the interleaved schedule", BASE
                    "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2",
                    MG_SCHED_INTERLEAVED, 2);
    expect_schedule(2, "V = 1 runs 1F1B, m = 3 accepted", BASE "--pipeline-model-parallel-size "
                    "2 --num-virtual-stages-per-pipeline-rank 1 --global-batch-size 3",
                    MG_SCHED_1F1B, 1);
    expect_error(2, "K with V", BASE "--pipeline-model-parallel-size 2 "
                 "--num-layers-per-virtual-pipeline-stage 1 "
                 "--num-virtual-stages-per-pipeline-rank 2",
                 "--num-layers-per-virtual-pipeline-stage and "
                 "--num-virtual-stages-per-pipeline-rank exclude each other");
    expect_error(2, "V does not divide a rank's layers", BASE "--pipeline-model-parallel-size 2 "
                 "--num-virtual-stages-per-pipeline-rank 3",
                 "--num-virtual-stages-per-pipeline-rank 3 does not divide the 2 layers of a "
                 "pipeline rank");
    expect_error(1, "V without a pipeline", BASE "--num-virtual-stages-per-pipeline-rank 2",
                 "--num-virtual-stages-per-pipeline-rank needs --pipeline-model-parallel-size "
                 "> 1");
    expect_error(2, "microbatch group outside Megatron's rule", BASE "--pipeline-model-parallel-"
                 "size 2 --num-layers-per-virtual-pipeline-stage 1 "
                 "--microbatch-group-size-per-virtual-pipeline-stage 3", "microbatch group");
    expect_error(2, "microbatch group with 1F1B", BASE "--pipeline-model-parallel-size 2 "
                 "--microbatch-group-size-per-virtual-pipeline-stage 2",
                 "applies to the interleaved schedule only (not 1f1b)");
    expect_error(1, "microbatch group without a pipeline", BASE
                 "--microbatch-group-size-per-virtual-pipeline-stage 2",
                 "--microbatch-group-size-per-virtual-pipeline-stage needs "
                 "--pipeline-model-parallel-size > 1");
    /* schedule files (in tmp): extra flags, the file, the message */
    {
        static const char *const file_cases[][4] = {
            {"--pipeline-schedule and --pipeline-schedule-file", "--pipeline-schedule 1f1b",
             "ok.sched", "--pipeline-schedule and --pipeline-schedule-file exclude each other"},
            {"schedule file missing", "", "missing.sched", "missing.sched': No such file"},
            {"schedule file with a microbatch group",
             "--microbatch-group-size-per-virtual-pipeline-stage 2", "ok.sched",
             "not to --pipeline-schedule-file"},
            {"schedule file with a bad token", "", "garbage.sched", "unknown action 'X'"},
            {"schedule file for another p", "", "three.sched",
             "has 3 rank lines but the pipeline has p = 2 ranks"},
            {"schedule file without every microbatch", "--global-batch-size 6", "ok.sched",
             "microbatch 4 never runs forward"},
            {"schedule file whose p·v does not divide the layers", "--num-layers 6", "v2.sched",
             "--num-layers 6 is not divisible by p·v = 4"},
            {"schedule file a named pipe (refused, not waited on)", "", "pipe.sched",
             "pipe.sched': not a regular file"},
            {"schedule file a directory", "", "dir.sched", "dir.sched': it is a directory"},
        };
        int i;
        for (i = 0; i < (int)(sizeof file_cases / sizeof file_cases[0]); i++) {
            snprintf(line, sizeof line, BASE "--pipeline-model-parallel-size 2 %s "
                     "--pipeline-schedule-file %s/%s", file_cases[i][1], tmp, file_cases[i][2]);
            expect_error(2, file_cases[i][0], line, file_cases[i][3]);
        }
    }
    /* a valid file is accepted (trained in tests/test_pp.c) */
    if (comm.world_size == 2) {
        mg_train_args a;
        mg_trainer tr;
        char err[MG_ERRLEN];
        int ok;
        snprintf(line, sizeof line, BASE "--pipeline-model-parallel-size 2 "
                 "--pipeline-schedule-file %s/ok.sched", tmp);
        ok = gpt_parse_line(&a, line, err, sizeof err) == 0;
        a.comm = &comm;
        ok = ok && mg_trainer_setup(&tr, &a, err, sizeof err) == 0;
        if (ok) mg_trainer_free(&tr);
        CHECK(mg_test_agree(ok), "cli pp (2 ranks): a valid schedule file is accepted");
        ok = gpt_parse_line(&a, BASE "--pipeline-model-parallel-size 2 --global-batch-size 8 "
                            "--num-layers-per-virtual-pipeline-stage 1 "
                            "--microbatch-group-size-per-virtual-pipeline-stage 4", err,
                            sizeof err) == 0;
        a.comm = &comm;
        ok = ok && mg_trainer_setup(&tr, &a, err, sizeof err) == 0;
        if (ok) mg_trainer_free(&tr);
        CHECK(mg_test_agree(ok), "cli pp (2 ranks): a valid microbatch group is accepted");
    }
}

static void check_outputs_and_agreement(void) {
    char line[2048], path[512];
    struct stat st;
    snprintf(line, sizeof line, BASE "--pipeline-model-parallel-size 2 "
             "--pipeline-trace %s/no/such/dir/run.trace", tmp);
    expect_error(2, "--pipeline-trace in a missing directory", line, "does not exist");
    snprintf(path, sizeof path, "%s/never.trace", tmp);
    snprintf(line, sizeof line, BASE "--pipeline-model-parallel-size 2 --num-layers 3 "
             "--pipeline-trace %s", path);
    expect_error(2, "a failed setup writes no trace", line, "is not divisible");
    if (comm.world_size == 2)
        CHECK(mg_test_agree(stat(path, &st) != 0), "cli pp (2 ranks): no trace file written");
    if (comm.world_size == 2) {   /* rank 1 alone sees a problem: every rank stops with it */
        mg_train_args a;
        mg_trainer tr;
        char err[MG_ERRLEN] = {0};
        int failed;
        snprintf(line, sizeof line, BASE "--pipeline-model-parallel-size 2%s",
                 comm.world_rank == 1 ? " --num-layers 3" : "");
        failed = gpt_parse_line(&a, line, err, sizeof err) != 0;
        a.comm = &comm;
        if (!failed) failed = mg_trainer_setup(&tr, &a, err, sizeof err) != 0;
        if (!failed) mg_trainer_free(&tr);
        CHECK(mg_test_agree(failed && (comm.world_rank == 1 || strstr(err, "rank 1: --num-layers"
                                       " 3 is not divisible"))),
              "cli pp (2 ranks): a problem on one rank stops every rank with its message");
    }
}

/* The program itself, run before this process joins MPI and only when it was not launched by
   mpirun (a child of an MPI process would try to join its job): status 2, one stderr line. */
static void check_program(void) {
    char cmd[1024], out[2048];
    int status;
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE")) return;
    if (access("build/gpt_train", X_OK) != 0) {
        mg_test_report(0, "cli pp: build/gpt_train exists", "build it with make build/gpt_train");
        return;
    }
    snprintf(cmd, sizeof cmd, "build/gpt_train " BASE
             "--pipeline-model-parallel-size 2 2>&1 >/dev/null; echo status $?");
    status = gpt_capture(cmd, out, sizeof out);
    CHECK(status == 0 && !strcmp(out, "gpt_train: error: --pipeline-model-parallel-size 2 does "
          "not divide the 1 launched ranks (mpirun -np N with N a multiple of 2)\nstatus 2\n"),
          "cli pp: gpt_train prints one error line and exits with 2");
}

int main(int argc, char **argv) {
    check_program();
    mg_comm_init(&comm, &argc, &argv);
    mg_test_quiet = comm.world_rank != 0;
    memset(tmp, 0, sizeof tmp);
    if (comm.world_rank == 0) gpt_tmpdir(tmp, sizeof tmp, "cli_pp");
    MPI_Bcast(tmp, (int)sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (comm.world_rank == 0) {
        char path[512];
        snprintf(path, sizeof path, "%s/ok.sched", tmp);           /* 1F1B, p = 2, m = 4 */
        write_text(path, "0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3\n1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3\n");
        snprintf(path, sizeof path, "%s/garbage.sched", tmp);
        write_text(path, "0F0 0X0 0B0\n1F0 1B0\n");
        snprintf(path, sizeof path, "%s/three.sched", tmp);
        write_text(path, "0F0 0B0\n1F0 1B0\n2F0 2B0\n");
        snprintf(path, sizeof path, "%s/pipe.sched", tmp);         /* no writer, ever */
        if (mkfifo(path, 0600) != 0) perror(path);
        snprintf(path, sizeof path, "%s/dir.sched", tmp);
        if (mkdir(path, 0755) != 0) perror(path);
        snprintf(path, sizeof path, "%s/v2.sched", tmp);           /* GPipe, p = 2, v = 2 */
        write_text(path, "0F0 0F1 0F2 0F3 2F0 2F1 2F2 2F3 2B0 2B1 2B2 2B3 0B0 0B1 0B2 0B3\n"
                         "1F0 1F1 1F2 1F3 3F0 3F1 3F2 3F3 3B0 3B1 3B2 3B3 1B0 1B1 1B2 1B3\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    check_world_and_sizes();
    check_schedules();
    check_outputs_and_agreement();
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm.world_rank == 0) gpt_rmtree(tmp);
    mg_comm_finalize(&comm);
    return mg_test_summary();
}
