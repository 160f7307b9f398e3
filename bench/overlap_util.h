/* overlap_util.h — helpers shared by bench/overlap.c and bench/scaling.c (data-parallel
   benches under mpirun): integer options, a trainer from a Megatron flag line, a token file,
   a clock.                                                                                  */
#ifndef OVERLAP_UTIL_H
#define OVERLAP_UTIL_H
#include "megatron.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int bench_arg_int(int argc, char **argv, const char *name, int def) {
    int i;
    for (i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return def;
}
static int bench_arg_flag(int argc, char **argv, const char *name) {
    int i;
    for (i = 1; i < argc; i++) if (!strcmp(argv[i], name)) return 1;
    return 0;
}
static double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* n_tokens random byte tokens as an llm.c token file at path (every rank writes the same
   contents; the write is an atomic rename, so concurrent writers are harmless).           */
static int bench_tokens(const char *path, int64_t n_tokens) {
    char err[MG_ERRLEN];
    int64_t i;
    int32_t *tokens = (int32_t *)malloc(sizeof(int32_t) * (size_t)n_tokens);
    int rc;
    for (i = 0; i < n_tokens; i++) tokens[i] = (int32_t)(mg_rand_u32(7, (uint64_t)i) & 255);
    rc = mg_llmc_tokens_write(path, MG_LLMC_GPT2, tokens, n_tokens, err, sizeof err);
    if (rc) fprintf(stderr, "bench: %s\n", err);
    free(tokens);
    return rc;
}

/* A trainer over comm from one line of gpt_train flags; 0, or -1 with the reason printed by
   world rank 0. (The parsed strings point into a copy of the line that is never freed.)  */
static int bench_trainer(mg_trainer *tr, mg_comm *comm, const char *line) {
    char *buf = (char *)malloc(strlen(line) + 1), *argv[128], *p, err[MG_ERRLEN];
    int argc = 0;
    mg_train_args a;
    strcpy(buf, line);
    argv[argc++] = (char *)"bench";
    for (p = strtok(buf, " "); p && argc < 127; p = strtok(NULL, " ")) argv[argc++] = p;
    argv[argc] = NULL;
    mg_train_args_default(&a);
    if (mg_train_parse(&a, argc, argv, err, sizeof err) == 0) {
        a.comm = comm;
        if (mg_trainer_setup(tr, &a, err, sizeof err) == 0) return 0;
    }
    if (comm->world_rank == 0) fprintf(stderr, "bench: %s\n  line: %s\n", err, line);
    return -1;
}
#endif
