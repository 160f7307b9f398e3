/* bench/data.c — speed of mg_data.h on what a training run does with files:
     index   mg_sampler_init in Megatron's shuffled order (document index shuffle, sample index,
             sample shuffle) for S sequences and n samples; its peer is numpy doing Megatron's
             two RandomState shuffles on the same sizes (bench/data_numpy.py prints both);
             and the bytes a sample of the indices (mg_sampler_index_bytes / samples);
     get     mg_sampler_get of random samples (tokens/s, data in the page cache);
     st      safetensors: writer (begin, one write per tensor, fsync + rename) and reader (open
             = mmap + header parse + checks, then a read of every byte), GB/s.
   usage: build/data [--dir /tmp] [--seqs 200000] [--tokens-per-seq 256] [--seq-len 1024]
                     [--epochs 3] [--st-mb 256]
   Output: one line per measurement, "data NAME VALUE UNIT" (read by bench/data_numpy.py).   */
#include "mg_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void die(const char *what, const char *err) {
    fprintf(stderr, "bench/data: %s: %s\n", what, err);
    exit(1);
}

int main(int argc, char **argv) {
    const char *dir = "/tmp";
    long seqs = 200000, per_seq = 256, seq_len = 1024, epochs = 3, st_mb = 256;
    for (int a = 1; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "--dir")) dir = argv[a + 1];
        else if (!strcmp(argv[a], "--seqs")) seqs = atol(argv[a + 1]);
        else if (!strcmp(argv[a], "--tokens-per-seq")) per_seq = atol(argv[a + 1]);
        else if (!strcmp(argv[a], "--seq-len")) seq_len = atol(argv[a + 1]);
        else if (!strcmp(argv[a], "--epochs")) epochs = atol(argv[a + 1]);
        else if (!strcmp(argv[a], "--st-mb")) st_mb = atol(argv[a + 1]);
        else { fprintf(stderr, "bench/data: unknown option %s\n", argv[a]); return 2; }
    }
    char err[MG_ERRLEN], prefix[600], stpath[640];
    snprintf(prefix, sizeof prefix, "%s/mg_bench_data.%ld", dir, (long)getpid());
    snprintf(stpath, sizeof stpath, "%s.safetensors", prefix);

    /* A dataset of `seqs` sequences, lengths uniform in [1, 2·per_seq), random uint16 tokens. */
    uint64_t x = 12345;
    int32_t *buf = (int32_t *)malloc(sizeof(int32_t) * (size_t)(2 * per_seq));
    mg_idx_writer w;
    double t0 = now();
    if (mg_idx_writer_begin(&w, prefix, MG_IDX_U16, err, sizeof err)) die("writer", err);
    for (long i = 0; i < seqs; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        long n = 1 + (long)(x % (uint64_t)(2 * per_seq - 1));
        for (long j = 0; j < n; j++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; buf[j] = (int32_t)(x % 50257); }
        if (mg_idx_writer_add(&w, buf, n, err, sizeof err)) die("writer", err);
        mg_idx_writer_end_document(&w);
    }
    if (mg_idx_writer_finish(&w, err, sizeof err)) die("writer", err);
    double t_write = now() - t0;
    mg_dataset ds;
    t0 = now();
    if (mg_dataset_open(prefix, &ds, err, sizeof err)) die("open", err);
    double t_open = now() - t0;
    printf("data dataset_sequences %lld count\n", (long long)ds.n_sequences);
    printf("data dataset_tokens %lld count\n", (long long)ds.n_tokens);
    printf("data indexed_write %.1f MB/s\n", 2e-6 * (double)ds.n_tokens / t_write);
    printf("data open_and_validate %.2f ms\n", 1e3 * t_open);

    /* Index building: enough samples for `epochs` passes over the train part.              */
    mg_sampler smp;
    mg_sampler_desc d;
    memset(&d, 0, sizeof d);
    d.split = "969,30,1";
    d.part = MG_SPLIT_TRAIN;
    d.seq_len = (int)seq_len;
    d.seed = 1234;
    d.order = MG_ORDER_SHUFFLED;
    d.n_samples = (int64_t)((double)epochs * 0.969 * (double)ds.n_tokens / (double)seq_len) - 1;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        t0 = now();
        if (mg_sampler_init(&smp, &ds, &d, err, sizeof err)) die("sampler", err);
        double t = now() - t0;
        best = t < best ? t : best;
        if (r < 2) mg_sampler_free(&smp);
    }
    printf("data index_doc_entries %lld count\n", (long long)smp.n_doc_index);
    printf("data index_samples %lld count\n", (long long)smp.n_samples);
    printf("data index_epochs %d count\n", smp.num_epochs);
    printf("data index_bytes_per_sample %.2f B\n",
           (double)mg_sampler_index_bytes(&smp) / (double)smp.n_samples);
    printf("data index_build %.2f ms\n", 1e3 * best);

    /* Random sample reads.                                                                  */
    int32_t *tokens = (int32_t *)malloc(sizeof(int32_t) * (size_t)(seq_len + 1));
    long reads = 20000;
    t0 = now();
    for (long i = 0; i < reads; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        if (mg_sampler_get(&smp, (int64_t)(x % (uint64_t)smp.n_samples), tokens, err, sizeof err))
            die("get", err);
    }
    double t_get = now() - t0;
    printf("data sample_get %.1f Mtokens/s\n", 1e-6 * (double)reads * (double)(seq_len + 1) / t_get);
    mg_sampler_free(&smp);
    mg_dataset_close(&ds);

    /* safetensors: 16 F32 tensors totalling st_mb MiB.                                       */
    int n_t = 16;
    int64_t per = (int64_t)st_mb * 1024 * 1024 / 4 / n_t;
    mg_st_spec spec[16];
    char names[16][16];
    memset(spec, 0, sizeof spec);
    float *data = (float *)malloc(sizeof(float) * (size_t)per);
    for (int64_t i = 0; i < per; i++) data[i] = (float)i;
    for (int t = 0; t < n_t; t++) {
        snprintf(names[t], sizeof names[t], "t%d.weight", t);
        spec[t].name = names[t];
        spec[t].dtype = MG_ST_F32;
        spec[t].ndim = 2;
        spec[t].shape[0] = per / 256;
        spec[t].shape[1] = 256;
    }
    mg_st_writer sw;
    t0 = now();
    if (mg_st_writer_begin(&sw, stpath, NULL, 1, spec, n_t, NULL, NULL, 0, err, sizeof err)) die("st", err);
    for (int t = 0; t < n_t; t++)
        if (mg_st_writer_write(&sw, t, 0, data, per / 256 * 256, err, sizeof err)) die("st", err);
    if (mg_st_writer_commit(&sw, err, sizeof err)) die("st", err);
    double t_stw = now() - t0;
    mg_st_file st;
    t0 = now();
    if (mg_st_open(stpath, &st, err, sizeof err)) die("st open", err);
    double t_sto = now() - t0;
    double sum = 0;
    for (int t = 0; t < st.n_tensors; t++) {
        const float *p = (const float *)st.tensors[t].data;  /* aligned: F32 only, header padded */
        for (int64_t i = 0; i < st.tensors[t].numel; i += 1) sum += p[i];
    }
    double t_str = now() - t0;
    double bytes = (double)n_t * (double)(per / 256 * 256) * 4;
    printf("data st_write_fsync %.2f GB/s\n", 1e-9 * bytes / t_stw);
    printf("data st_open %.3f ms\n", 1e3 * t_sto);
    printf("data st_open_and_read %.2f GB/s\n", 1e-9 * bytes / t_str);
    if (sum < 0) printf("impossible\n");
    mg_st_close(&st);

    unlink(stpath);
    char path[700];
    snprintf(path, sizeof path, "%s.bin", prefix); unlink(path);
    snprintf(path, sizeof path, "%s.idx", prefix); unlink(path);
    free(buf); free(tokens); free(data);
    return 0;
}
