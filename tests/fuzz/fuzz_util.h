/* tests/fuzz/fuzz_util.h — what every mg_data.h fuzz harness shares.

   Each harness is ONE translation unit that includes this header (which compiles the
   mg_data.h implementation into it) and defines LLVMFuzzerTestOneInput. Build and run with
   libFuzzer (tests/fuzz/run.sh does all of this):
       clang -g -O1 -std=c11 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined \
             tests/fuzz/fuzz_json.c -o build/fuzz/fuzz_json -lm
   or, without clang, as a replay program over files (regressions, a saved corpus):
       cc -DMG_FUZZ_STANDALONE -fsanitize=address,undefined ... tests/fuzz/fuzz_json.c
       build/fuzz/fuzz_json_replay FILE_OR_DIR...

   What makes the harnesses sharp:
     - Exact-size copies instead of mmap. mg_data.h maps every file it reads; AddressSanitizer
       cannot see past the end of a mapping (the rest of the page reads as zeros). Here mmap
       and munmap are redirected, for mg_data.h only, to a malloc'd copy of exactly the file's
       bytes, so a read one byte past the end of a file is a reported heap-buffer-overflow.
     - Invariants on success. A reader that accepts a file must hand out only what is inside
       it: harnesses walk every sequence, token, tensor byte and JSON token they were given.
     - One-line errors. A reader that rejects a file must say why in one non-empty line.
   An invariant violated is an abort(), which libFuzzer reports like a crash (with the input). */
#ifndef MG_FUZZ_UTIL_H
#define MG_FUZZ_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>   /* before the redirect below, so mg_data.h's include is a no-op     */
#include <sys/stat.h>
#include <unistd.h>

/* mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) of a regular file, as mg_data.h calls it:
   a heap copy of exactly len bytes (len is the file size at fstat).                        */
static void *mg_fuzz_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    (void)addr; (void)prot; (void)flags;
    unsigned char *p = (unsigned char *)malloc(len);
    size_t got = 0;
    if (!p) return MAP_FAILED;
    while (got < len) {
        ssize_t r = pread(fd, p + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { free(p); errno = EIO; return MAP_FAILED; }
        got += (size_t)r;
    }
    return p;
}
static int mg_fuzz_munmap(void *p, size_t len) {
    (void)len;
    free(p);
    return 0;
}
#define mmap mg_fuzz_mmap
#define munmap mg_fuzz_munmap
#define MG_IMPLEMENTATION
#include "mg_data.h"
#undef mmap
#undef munmap

#define MG_FUZZ_ASSERT(cond, ...)                                                     \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            abort();                                                                  \
        }                                                                             \
    } while (0)

/* A rejected file: the reader returned nonzero and wrote one non-empty line.               */
static inline void mg_fuzz_check_error(int rc, const char *err) {
    MG_FUZZ_ASSERT(rc == -1, "failure must return -1, got %d", rc);
    MG_FUZZ_ASSERT(err[0] != 0, "failure without a message");
    MG_FUZZ_ASSERT(strchr(err, '\n') == NULL && strchr(err, '\r') == NULL,
                   "message is not one line: %s", err);
}

/* A private scratch directory under $MG_FUZZ_TMP, else /dev/shm (tmpfs) or /tmp, removed at
   exit. libFuzzer ends some runs with _exit (time limit, crash), skipping the removal:
   tests/fuzz/run.sh points MG_FUZZ_TMP at a directory it removes itself.                   */
static char mg_fuzz_dir[64];
static void mg_fuzz_cleanup(void) {
    char cmd[128];
    if (!mg_fuzz_dir[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", mg_fuzz_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", mg_fuzz_dir);
}
static inline const char *mg_fuzz_path(const char *name) {
    static char buf[4][160];
    static int k;
    if (!mg_fuzz_dir[0]) {
        struct stat st;
        const char *base = getenv("MG_FUZZ_TMP");
        if (!base || strlen(base) > 40)
            base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(mg_fuzz_dir, sizeof mg_fuzz_dir, "%s/mg_fuzz.XXXXXX", base);
        if (!mkdtemp(mg_fuzz_dir)) { perror("mkdtemp"); abort(); }
        atexit(mg_fuzz_cleanup);
    }
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", mg_fuzz_dir, name);
    return buf[k];
}
static inline void mg_fuzz_put(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const char *p = (const char *)data;
    if (fd < 0) { perror(path); abort(); }
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) { perror(path); abort(); }
        p += w; n -= (size_t)w;
    }
    close(fd);
}

/* Everything a reader promised about an opened dataset, and a sampler run over it.
   params (8 bytes, any values) choose the sampler: seq_len, samples, order, split, seed.   */
static inline void mg_fuzz_check_dataset(const mg_dataset *ds, const unsigned char params[8]) {
    static const char *const splits[4] = {"1,0,0", "969,30,1", "1,1,1", "50,50,0"};
    char err[MG_ERRLEN] = "";
    int64_t pos = 0, lo, hi;
    MG_FUZZ_ASSERT(ds->n_tokens > 0 && ds->n_sequences >= 1 && ds->n_documents >= 0 &&
                   ds->token_size >= 1 && ds->token_size <= 8, "header fields");
    for (int64_t i = 0; i < ds->n_sequences; i++) {
        int32_t n = mg_dataset_seq_len(ds, i);
        MG_FUZZ_ASSERT(n >= 0 && mg_dataset_seq_start(ds, i) == pos, "sequence %lld", (long long)i);
        pos += n;
    }
    MG_FUZZ_ASSERT(pos == ds->n_tokens, "lengths sum to %lld, n_tokens %lld", (long long)pos,
                   (long long)ds->n_tokens);
    MG_FUZZ_ASSERT(mg_dataset_doc_bound(ds, 0) == 0 &&
                   mg_dataset_doc_bound(ds, ds->n_documents) == ds->n_sequences, "doc bounds");
    for (int64_t d = 1; d <= ds->n_documents; d++)
        MG_FUZZ_ASSERT(mg_dataset_doc_bound(ds, d) >= mg_dataset_doc_bound(ds, d - 1), "doc %lld",
                       (long long)d);
    mg_dataset_token_range(ds, &lo, &hi);   /* touches every token */
    MG_FUZZ_ASSERT(lo <= hi, "token range");

    mg_sampler_desc desc;
    mg_sampler smp;
    memset(&desc, 0, sizeof desc);
    desc.seq_len = 1 + params[0] % 32;
    desc.n_samples = 1 + (params[1] | params[2] << 8) % 512;
    desc.order = (params[3] & 1) ? MG_ORDER_SEQUENTIAL : MG_ORDER_SHUFFLED;
    desc.split = splits[params[4] % 4];
    desc.part = (mg_split_part)(params[5] % 3);
    desc.seed = (uint32_t)(params[6] | params[7] << 8);
    int rc = mg_sampler_init(&smp, ds, &desc, err, sizeof err);
    if (rc != 0) { mg_fuzz_check_error(rc, err); return; }
    MG_FUZZ_ASSERT(smp.n_samples >= desc.n_samples, "sampler has %lld of %lld samples",
                   (long long)smp.n_samples, (long long)desc.n_samples);
    int32_t tokens[40];
    for (int64_t i = 0; i < desc.n_samples; i++) {
        rc = mg_sampler_get(&smp, i, tokens, err, sizeof err);
        if (rc != 0) {   /* only a token wider than int32 may fail a sample */
            mg_fuzz_check_error(rc, err);
            MG_FUZZ_ASSERT(strstr(err, "does not fit int32") != NULL, "sample %lld: %s",
                           (long long)i, err);
            continue;
        }
        for (int k = 0; k <= desc.seq_len; k++)
            MG_FUZZ_ASSERT(tokens[k] >= lo && tokens[k] <= hi, "sample %lld token %d",
                           (long long)i, k);
    }
    mg_sampler_free(&smp);
}

#ifdef MG_FUZZ_STANDALONE
/* Replay: runs the harness on each file named (directories: on each file inside).          */
#include <dirent.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void mg_fuzz_replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = (unsigned char *)realloc(buf, cap);
            if (!buf) { perror("realloc"); exit(1); }
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    fclose(f);
    /* an exact-size copy, so reads past the end of the input are caught too */
    unsigned char *exact = (unsigned char *)malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
}
int main(int argc, char **argv) {
    int files = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) == 0 && S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[a]);
            struct dirent *e;
            while (d && (e = readdir(d)) != NULL) {
                char p[2048];
                if (e->d_name[0] == '.') continue;
                snprintf(p, sizeof p, "%s/%s", argv[a], e->d_name);
                mg_fuzz_replay_file(p);
                files++;
            }
            if (d) closedir(d);
        } else {
            mg_fuzz_replay_file(argv[a]);
            files++;
        }
    }
    printf("%s: %d inputs replayed, no failure\n", argv[0], files);
    return 0;
}
#endif
#endif /* MG_FUZZ_UTIL_H */
