/* mg-test: ranks=1 flavors=cpu timeout=600 */
/* test_examples.c — the headers' arrows point one way, and the examples that embed single
   parts build and run with only the headers they name.
     1. Each header compiles as the one implementation file of a program (MG_IMPLEMENTATION)
        in a directory that holds only itself and the headers it may depend on:
          mg_tensor.h, mg_data.h, mg_plan.h,  nothing of ours
          mg_tokenizer.h
          mg_comm.h                           mg_tensor.h
          mg_transformer.h, mg_pipeline.h     mg_comm.h, mg_tensor.h
          megatron.h                          all of the above but mg_plan.h
        so a header that starts to include one above it (or beside it) fails here.
     2. examples/tp_block.cu (a tensor-parallel MLP from mg_transformer.h) builds next to
        mg_tensor.h, mg_comm.h and mg_transformer.h alone, and equals the serial block on 1
        rank, 4 ranks and 2 ranks with sequence parallelism (it exits non-zero otherwise).
     3. examples/pipeline_toy.cu builds next to mg_tensor.h, mg_comm.h and mg_pipeline.h alone
        and its 1F1B run over 4 ranks equals the serial computation.
     4. Where clang is installed, the whole implementation compiles with it as well, optimised
        for this machine (-O2 -march=native, the Makefile's warnings): clang's optimiser adds
        warnings of its own (a loop it cannot vectorise under `omp simd`).
   The C compiler is `cc` with the Makefile's warnings (-Wall -Wextra -Werror, C11) and the
   MPI and OpenBLAS flags; mpirun runs the examples (oversubscribed, as root where needed). */
#include "mg_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char repo[4096], tmp[256];

/* Runs `cmd` through sh; returns its exit status and leaves its output in tmp/out.log. */
static int run(const char *fmt, ...) {
    char cmd[8192], full[8192 + 512];
    va_list ap;
    int rc;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "( %s ) > %s/out.log 2>&1", cmd, tmp);
    rc = system(full);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}
/* The last lines of the log, for a failure's detail. */
static void show_log(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "tail -n 12 %s/out.log | sed 's/^/  | /'", tmp);
    if (system(cmd) != 0) printf("  | (no log)\n");
}

/* A fresh directory tmp/NAME holding copies of the named headers (space-separated). */
static void stage(const char *name, const char *headers) {
    run("rm -rf %s/%s && mkdir -p %s/%s && for h in %s; do cp %s/$h %s/%s/; done", tmp, name,
        tmp, name, headers, repo, tmp, name);
}

#define C_FLAGS "-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fopenmp -DMG_USE_MPI " \
                "$(mpicc --showme:compile) -I/usr/include/x86_64-linux-gnu/openblas-pthread"
#define CFLAGS_CMD "cc " C_FLAGS
#define LIBS_CMD "$(mpicc --showme:link) -lopenblas -lm -fopenmp"
#define MPIRUN "mpirun --oversubscribe --bind-to none $( [ $(id -u) = 0 ] && echo --allow-run-as-root )"

static void header_alone(const char *header, const char *deps) {
    char name[128], all[512];
    int rc;
    snprintf(name, sizeof name, "alone_%s", header);
    snprintf(all, sizeof all, "%s %s", header, deps);
    stage(name, all);
    rc = run("cd %s/%s && printf '#define MG_IMPLEMENTATION\\n#include \"%s\"\\n' > impl.c && "
             CFLAGS_CMD " -c impl.c -o impl.o", tmp, name, header);
    snprintf(all, sizeof all, "%s compiles with only {%s}", header, deps[0] ? deps : "");
    mg_test_report(rc == 0, all, rc ? "cc exit status %d" : NULL, rc);
    if (rc) show_log();
}

/* Builds examples/NAME.cu next to `headers` only; returns 0 on success. */
static int example_alone(const char *example, const char *headers) {
    char label[256];
    int rc;
    stage(example, headers);
    rc = run("cd %s/%s && cp %s/examples/%s.cu . && " CFLAGS_CMD " -x c %s.cu -o %s " LIBS_CMD,
             tmp, example, repo, example, example, example);
    snprintf(label, sizeof label, "examples/%s.cu builds with only {%s}", example, headers);
    mg_test_report(rc == 0, label, rc ? "cc exit status %d" : NULL, rc);
    if (rc) show_log();
    return rc;
}

static void example_runs(const char *example, int ranks, const char *args, const char *expect) {
    char label[256], cmd[1024];
    int rc;
    if (ranks == 1) snprintf(cmd, sizeof cmd, "cd %s/%s && ./%s %s", tmp, example, example, args);
    else snprintf(cmd, sizeof cmd, "cd %s/%s && " MPIRUN " -np %d ./%s %s", tmp, example, ranks,
                  example, args);
    rc = run("%s", cmd);
    if (rc == 0 && expect) {   /* not through run(): it would truncate the log it reads */
        snprintf(cmd, sizeof cmd, "grep -q '%s' %s/out.log", expect, tmp);
        if (system(cmd) != 0) rc = 99;
    }
    snprintf(label, sizeof label, "%s on %d rank%s%s%s", example, ranks, ranks > 1 ? "s" : "",
             args[0] ? " " : "", args);
    if (rc == 99) mg_test_report(0, label, "output lacks \"%s\"", expect);
    else mg_test_report(rc == 0, label, rc ? "exit status %d" : NULL, rc);
    if (rc) show_log();
}

int main(void) {
    if (!getcwd(repo, sizeof repo)) return 1;
    snprintf(tmp, sizeof tmp, "/tmp/mg_examples_%d", (int)getpid());
    {
        char mk[300];
        snprintf(mk, sizeof mk, "mkdir -p %s", tmp);
        if (system(mk) != 0) return 1;
    }
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("OMP_WAIT_POLICY", "passive", 0);
    setenv("OMP_NUM_THREADS", "1", 0);

    header_alone("mg_tensor.h", "");
    header_alone("mg_data.h", "");
    header_alone("mg_plan.h", "");
    header_alone("mg_tokenizer.h", "");
    header_alone("mg_comm.h", "mg_tensor.h");
    header_alone("mg_transformer.h", "mg_tensor.h mg_comm.h");
    header_alone("mg_pipeline.h", "mg_tensor.h mg_comm.h");
    header_alone("megatron.h", "mg_tensor.h mg_comm.h mg_transformer.h mg_pipeline.h mg_data.h "
                 "mg_tokenizer.h");

    if (!example_alone("tp_block", "mg_tensor.h mg_comm.h mg_transformer.h")) {
        example_runs("tp_block", 1, "", "equals the serial one");
        example_runs("tp_block", 4, "", "equals the serial one");
        example_runs("tp_block", 2, "--sequence-parallel", "equals the serial one");
    }
    if (!example_alone("pipeline_toy", "mg_tensor.h mg_comm.h mg_pipeline.h"))
        example_runs("pipeline_toy", 4, "", NULL);

    if (run("command -v clang") == 0) {
        int rc = run("cd %s && printf '#define MG_IMPLEMENTATION\n#include \"megatron.h\"\n' > "
                     "clang_impl.c && clang " C_FLAGS " -O2 -march=native -I%s -c clang_impl.c -o "
                     "clang_impl.o", tmp, repo);
        mg_test_report(rc == 0, "the implementation compiles with clang -O2 -march=native",
                       rc ? "clang exit status %d" : NULL, rc);
        if (rc) show_log();
    } else {
        printf("# clang not installed: its build of the implementation not checked\n");
    }
    run("rm -rf %s", tmp);
    return mg_test_summary();
}
