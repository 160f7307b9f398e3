/* bench/tokenizer.c — mg_tokenizer.h's encode speed against tiktoken and Hugging Face tokenizers
   on the same text with the same number of threads.
   Runs bench/tokenizer_peer.py (with .venv/bin/python: make deps) which writes the two texts
   (english: the data/ corpus repeated to 8 MB; multilingual: 12 scripts, 8 MB) and prints the
   references' MB/s; then encodes the same documents (paragraphs) here, spread over THREADS
   OpenMP threads, best of 3, and prints one line per pair:
       tokenizer TEXT THREADS: ours cl100k_base A MB/s, tiktoken B MB/s, xA/B
       tokenizer TEXT THREADS: ours GPT-2 tokenizer.json C MB/s, tokenizers D MB/s, xC/D
   usage: build/tokenizer [--threads N] (default 1)
   Needs build/tok/hf_gpt2.json: build/test_tokenizer makes it (tests/oracle/tokenizer_ref.py). */
#include "mg_tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static char *slurp(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "bench/tokenizer: cannot open %s (run build/test_tokenizer first)\n", path); exit(1); }
    fseek(f, 0, SEEK_END); *n = ftell(f); fseek(f, 0, SEEK_SET);
    char *p = (char *)malloc((size_t)*n + 1);
    if (fread(p, 1, (size_t)*n, f) != (size_t)*n) { fprintf(stderr, "bench/tokenizer: read %s failed\n", path); exit(1); }
    fclose(f);
    return p;
}
/* MB/s of encoding every document (paragraph) of text, best of 3.                           */
static double speed(const mg_tokenizer *t, const char *text, long n, int threads, long long *ntok) {
    long ndoc = 0, cap = 1024;
    long *start = (long *)malloc((size_t)cap * sizeof(long)), *len = (long *)malloc((size_t)cap * sizeof(long));
    for (long p = 0; p < n;) {
        const char *e = strstr(text + p, "\n\n");
        long q = e ? (long)(e - text) : n;
        if (ndoc == cap) { cap *= 2; start = (long *)realloc(start, (size_t)cap * sizeof(long)); len = (long *)realloc(len, (size_t)cap * sizeof(long)); }
        start[ndoc] = p; len[ndoc] = q - p; ndoc++;
        p = q + 2;
    }
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        long long total = 0;
        double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            int32_t *ids = (int32_t *)malloc(1 << 20);
#pragma omp for schedule(dynamic, 16)
            for (long d = 0; d < ndoc; d++) total += mg_tokenizer_encode(t, text + start[d], (size_t)len[d], 0, ids, (1 << 20) / 4);
            free(ids);
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
        *ntok = total;
    }
    free(start); free(len);
    return (double)n / 1e6 / best;
}

int main(int argc, char **argv) {
    int threads = 1;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--threads") && a + 1 < argc) threads = atoi(argv[++a]);
        else { fprintf(stderr, "bench/tokenizer: unknown option %s (valid: --threads N)\n", argv[a]); return 2; }
    }
    if (threads < 1 || threads > 256) { fprintf(stderr, "bench/tokenizer: --threads %d: must be 1..256\n", threads); return 2; }
    char cmd[256];
    snprintf(cmd, sizeof cmd, ".venv/bin/python bench/tokenizer_peer.py %d build/tok", threads);
    FILE *p = popen(cmd, "r");
    if (!p) { fprintf(stderr, "bench/tokenizer: cannot run %s\n", cmd); return 1; }
    double peer[2][2] = {{0, 0}, {0, 0}}; /* [tiktoken, tokenizers][english, multilingual]     */
    char line[256], lib[64], text[64];
    double v;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "peer %63s %63s %lf", lib, text, &v) == 3)
            peer[strcmp(lib, "tiktoken") != 0][strcmp(text, "english") != 0] = v;
    if (pclose(p) != 0 || peer[0][0] == 0) { fprintf(stderr, "bench/tokenizer: %s failed (make deps; build/test_tokenizer makes build/tok)\n", cmd); return 1; }
    char err[512];
    mg_tokenizer_desc dt = {MG_TOK_TIKTOKEN, ".venv/share/vocab/cl100k_base.tiktoken", NULL, "cl100k_base"};
    mg_tokenizer_desc dh = {MG_TOK_HF, "build/tok/hf_gpt2.json", NULL, NULL};
    mg_tokenizer *tt = mg_tokenizer_load(&dt, err, sizeof err), *th = tt ? mg_tokenizer_load(&dh, err, sizeof err) : NULL;
    if (!tt || !th) { fprintf(stderr, "bench/tokenizer: %s\n", err); return 1; }
    const char *names[2] = {"english", "multilingual"};
    for (int k = 0; k < 2; k++) {
        char path[128];
        long n;
        long long ntok;
        snprintf(path, sizeof path, "build/tok/bench_%s.txt", names[k]);
        char *s = slurp(path, &n);
        double a = speed(tt, s, n, threads, &ntok);
        printf("tokenizer %s %d threads: ours cl100k_base %.2f MB/s, tiktoken %.2f MB/s, x%.2f (%lld tokens)\n", names[k], threads, a, peer[0][k], a / peer[0][k], ntok);
        double b = speed(th, s, n, threads, &ntok);
        printf("tokenizer %s %d threads: ours GPT-2 tokenizer.json %.2f MB/s, tokenizers %.2f MB/s, x%.2f (%lld tokens)\n", names[k], threads, b, peer[1][k], b / peer[1][k], ntok);
        fflush(stdout);
        free(s);
    }
    mg_tokenizer_free(tt); mg_tokenizer_free(th);
    return 0;
}
