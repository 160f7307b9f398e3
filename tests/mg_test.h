/* mg_test.h — the tiny check library every test program uses.
   A test prints one line per check, "ok - NAME" or "not ok - NAME: why"; tests/run.sh counts
   them. Multi-rank tests agree on each result first (e.g. all-reduce the failure count) and
   only world rank 0 prints (mg_test_quiet on the others). The first line of each test source
   is its spec for the runner:
       // mg-test: ranks=1,2,4 timeout=120 flavors=cpu,cuda,asan
   (ranks default 1, timeout 300 s, flavors all three; a multi-rank test runs under mpirun). */
#ifndef MG_TEST_H
#define MG_TEST_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef MG_USE_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* OpenMPI's C++ bindings break nvcc builds */
#endif
#include <mpi.h>
#endif

static int mg_test_passed, mg_test_failed, mg_test_quiet; /* quiet: ranks other than 0 */

static inline void mg_test_report(int ok, const char *name, const char *fmt, ...) {
    char detail[1024] = "";
    if (ok) mg_test_passed++; else mg_test_failed++;
    if (mg_test_quiet) return;
    if (fmt) {
        va_list ap; va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    if (!detail[0]) printf("%s - %s\n", ok ? "ok" : "not ok", name);
    else if (ok) printf("ok - %s (%s)\n", name, detail);
    else printf("not ok - %s: %s\n", name, detail);
    fflush(stdout);
}
#define CHECK(cond, name) mg_test_report(!!(cond), (name), "%s", (cond) ? "" : #cond)

/* Max relative error, |a-b| / max(|b|, floor) elementwise; floor guards near-zero values. */
static inline double mg_test_max_rel(const float *got, const float *want, long n, double floor) {
    double worst = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double s = fabs((double)want[i]); if (s < floor) s = floor;
        double r = d / s;
        if (!(r <= worst)) worst = r;  /* nan propagates as failure */
    }
    return worst;
}
/* Checks got ≈ want with max relative error <= tol (floor: see above); prints the error. */
static inline int mg_test_close(const char *name, const float *got, const float *want, long n,
                         double tol, double floor) {
    double e = mg_test_max_rel(got, want, n, floor);
    int ok = e <= tol;
    mg_test_report(ok, name, "max rel err %.3g, tol %.1g", e, tol);
    return ok;
}
/* Reads a whole file; returns NULL if missing. */
static inline void *mg_test_read_file(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (fread(p, 1, (size_t)n, f) != (size_t)n) { fclose(f); free(p); return NULL; }
    fclose(f);
    if (len) *len = n;
    return p;
}
/* 1 on every rank iff ok is 1 on every rank of the job (a logical AND over MPI_COMM_WORLD), so
   all ranks report the same verdict. Without MPI: ok itself.                                  */
static inline int mg_test_agree(int ok) {
#ifdef MG_USE_MPI
    int initialized = 0, all = ok;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all;
#else
    return ok;
#endif
}
static inline int mg_test_summary(void) {
    if (!mg_test_quiet) printf("# %d passed, %d failed\n", mg_test_passed, mg_test_failed);
    return mg_test_failed ? 1 : 0;
}
#endif
