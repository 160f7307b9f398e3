/* ops_util.h — helpers shared by the tests of mg_tensor.h (tests/test_ops*.c):
   a context on the device the runner chose (MG_DEVICE), host<->device tensors, the reader of
   the PyTorch reference files written by tests/oracle/ops.py, and a fatal-error catcher.     */
#ifndef OPS_UTIL_H
#define OPS_UTIL_H
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mg_tensor.h"
/* mg_test.h includes <mpi.h> when MG_USE_MPI: keep it to MPI's C API when nvcc compiles the
   test as C++ (the C++ bindings do not build with -Werror). Can go once mg_test.h does it. */
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include "mg_test.h"

/* --- context and tensors ----------------------------------------------------------------- */
static inline mg_ctx ops_ctx_make(size_t arena_bytes) {
    mg_ctx ctx;
    mg_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = MG_DEVICE_AUTO;
    d.arena_bytes = arena_bytes;
    mg_ctx_init(&ctx, &d);
    return ctx;
}
/* A device tensor of any dtype holding the given fp32 values (rounded to dt). */
static inline mg_tensor ops_dev(mg_ctx *ctx, mg_dtype dt, const float *host, int64_t rows, int64_t cols) {
    mg_tensor t = mg_tensor_2d(ctx, dt, rows, cols);
    int64_t n = rows * cols, i;
    void *tmp = malloc((size_t)n * 4 + 4);
    for (i = 0; i < n; i++) mg_store(tmp, dt, i, host ? host[i] : 0.0f);
    mg_copy_to_device(ctx, t.data, tmp, mg_nbytes(&t));
    free(tmp);
    return t;
}
/* The values of a device tensor as fp32 in a malloc'ed host array. */
static inline float *ops_host(mg_ctx *ctx, const mg_tensor *t) {
    int64_t n = mg_numel(t), i;
    void *tmp = malloc(mg_nbytes(t) + 4);
    float *out = (float *)malloc((size_t)n * 4 + 4);
    mg_copy_to_host(ctx, tmp, t->data, mg_nbytes(t));
    for (i = 0; i < n; i++) out[i] = mg_load(tmp, t->dtype, i);
    free(tmp);
    return out;
}
static inline float *ops_dev_f32(mg_ctx *ctx, const float *host, int64_t n) {
    float *p = (float *)mg_alloc(ctx, (size_t)n * 4);
    if (host) mg_copy_to_device(ctx, p, host, (size_t)n * 4);
    else mg_memset_zero(ctx, p, (size_t)n * 4);
    return p;
}
static inline float *ops_host_f32(mg_ctx *ctx, const float *dev, int64_t n) {
    float *p = (float *)malloc((size_t)n * 4 + 4);
    mg_copy_to_host(ctx, p, dev, (size_t)n * 4);
    return p;
}
static inline int32_t *ops_dev_i32(mg_ctx *ctx, const int32_t *host, int64_t n) {
    int32_t *p = (int32_t *)mg_alloc(ctx, (size_t)n * 4);
    mg_copy_to_device(ctx, p, host, (size_t)n * 4);
    return p;
}
/* Relative error floor for a reference array: a tenth of its RMS. fp32 results that come out
   of sums with cancellation carry an absolute error of a few ulps of the terms, so entries near
   zero are measured against the array's scale, not against themselves.                      */
static inline double ops_floor(const float *want, long n) {
    double s = 0;
    long i;
    for (i = 0; i < n; i++) s += (double)want[i] * want[i];
    return n ? 0.1 * sqrt(s / n) : 1.0;
}
/* want ≈ got to tol relative (see ops_floor; floor is a lower bound on top of it). */
static inline int ops_close_host(const char *name, const float *got, const float *want, long n,
                          double tol, double floor) {
    double f = ops_floor(want, n);
    return mg_test_close(name, got, want, n, tol, f > floor ? f : floor);
}
/* Checks a device tensor against fp32 reference values. */
static inline int ops_close(mg_ctx *ctx, const char *name, const mg_tensor *t, const float *want,
                     double tol, double floor) {
    float *got = ops_host(ctx, t);
    int ok = ops_close_host(name, got, want, (long)mg_numel(t), tol, floor);
    free(got);
    return ok;
}
/* Deterministic pseudo-random test values (an LCG; independent of the library's RNG). */
static uint64_t ops_lcg = 88172645463325252ull;
static inline float ops_randn(void) {
    double s = 0;
    int i;
    for (i = 0; i < 12; i++) {
        ops_lcg = ops_lcg * 6364136223846793005ull + 1442695040888963407ull;
        s += (double)(ops_lcg >> 11) / 9007199254740992.0;
    }
    return (float)(s - 6.0);
}
static inline float *ops_randn_array(int64_t n, float scale) {
    float *p = (float *)malloc((size_t)n * 4 + 4);
    int64_t i;
    for (i = 0; i < n; i++) p[i] = scale * ops_randn();
    return p;
}

/* --- reference files (format: see tests/oracle/ops.py) --------------------------------------- */
typedef struct ops_ref {
    int count;
    char names[64][48];
    int kind[64];
    int64_t numel[64];
    const void *data[64];
    void *blob;
} ops_ref;
static inline int ops_ref_load(ops_ref *r, const char *group) {
    char path[256];
    long len = 0, pos = 12;
    unsigned char *b;
    int i;
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "tests/data/ops_%s.bin", group);
    b = (unsigned char *)mg_test_read_file(path, &len);
    if (!b || len < 12 || memcmp(b, "MGREF1\0\0", 8)) {
        mg_test_report(0, group, "cannot read %s (run `make oracle`)", path);
        free(b);
        return 0;
    }
    r->blob = b;
    memcpy(&r->count, b + 8, 4);
    for (i = 0; i < r->count && i < 64; i++) {
        uint32_t nl, kind, nd, d;
        int64_t shape, n = 1;
        memcpy(&nl, b + pos, 4); pos += 4;
        memcpy(r->names[i], b + pos, nl < 47 ? nl : 47); pos += nl;
        memcpy(&kind, b + pos, 4); memcpy(&nd, b + pos + 4, 4); pos += 8;
        for (d = 0; d < nd; d++) { memcpy(&shape, b + pos, 8); pos += 8; n *= shape; }
        pos = (pos + 7) & ~7L; /* data is 8-byte aligned in the file */
        r->kind[i] = (int)kind;
        r->numel[i] = n;
        r->data[i] = b + pos;
        pos += n * 4;
        if (pos > len) { mg_test_report(0, group, "truncated %s", path); return 0; }
    }
    return 1;
}
/* The named array, checked to hold n elements (aborts the test program otherwise: a reference
   file out of step with the test is a bug to fix, not a result).                            */
static inline const void *ops_ref_get(const ops_ref *r, const char *name, int64_t n) {
    int i;
    for (i = 0; i < r->count; i++)
        if (!strcmp(r->names[i], name)) {
            if (n >= 0 && r->numel[i] != n) {
                printf("not ok - reference %s has %lld elements, expected %lld\n", name,
                       (long long)r->numel[i], (long long)n);
                exit(1);
            }
            return r->data[i];
        }
    printf("not ok - reference array %s missing (run `make oracle`)\n", name);
    exit(1);
}
#define OPS_F32(r, name, n) ((const float *)ops_ref_get((r), (name), (n)))
#define OPS_I32(r, name, n) ((const int32_t *)ops_ref_get((r), (name), (n)))

/* --- catching mg_fatal ------------------------------------------------------------------------ */
static jmp_buf ops_fatal_jmp;
static char ops_fatal_msg[1024];
static inline void ops_fatal_catch(const char *file, int line, const char *msg) {
    (void)file; (void)line;
    snprintf(ops_fatal_msg, sizeof ops_fatal_msg, "%s", msg);
    longjmp(ops_fatal_jmp, 1);
}
/* Runs stmt expecting mg_fatal with a message containing `expect`. */
#define OPS_EXPECT_FATAL(name, expect, stmt) do { \
    ops_fatal_msg[0] = 0; mg_set_fatal_handler(ops_fatal_catch); \
    if (!setjmp(ops_fatal_jmp)) { stmt; mg_set_fatal_handler(NULL); \
        mg_test_report(0, name, "no error raised"); } \
    else { mg_set_fatal_handler(NULL); \
        mg_test_report(strstr(ops_fatal_msg, expect) != NULL, name, "message: %s", ops_fatal_msg); } \
} while (0)
#endif
