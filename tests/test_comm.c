// mg-test: ranks=1,2,3,8 timeout=180
/* tests/test_comm.c — mg_comm.h on real ranks, every operation against a serial computation.

   Every rank can compute every rank's input (a pure function of rank and index), so each rank
   checks its own result against the serial answer, then the ranks agree on the verdict through
   plain MPI (independent of the library under test) and rank 0 prints it.

   Inputs are chosen so that the fp32 sum of any order is exact while the bf16/fp16 result
   needs rounding: one rank holds a "big" value (256·k for bf16, 2048·k for fp16), the others
   small halves. Then the CPU backend's promise — accumulate in fp32, round once — is checked
   bit for bit: a 16-bit running sum (the naive MPI user-op) would lose the small terms.

   Covered: all-reduce, reduce-scatter, all-gather, broadcast × fp32/bf16/fp16 × sum/max/avg ×
   in place/out of place × counts 0, 1, 7, 1000, 4099; nonblocking operations overlapped with
   compute (post, compute, test, wait); grouped send/recv in deadlock-prone orders; the real
   groups for every (t, p) the world size allows; the traffic counters. Buffers live on ctx's
   device (MG_DEVICE=cuda with a GPU per rank exercises NCCL; the runner uses the CPU). */
#include "mg_comm.h"
#include "mg_test.h"
#include <string.h>

static mg_comm comm;
static mg_ctx ctx;
static const int64_t counts[] = {0, 1, 7, 1000, 4099};
#define N_COUNTS ((int)(sizeof counts / sizeof counts[0]))
#define MAX_COUNT 4099
static const mg_dtype dtypes[] = {MG_F32, MG_BF16, MG_F16};
static const mg_redop redops[] = {MG_SUM, MG_MAX, MG_AVG};
static const char *const redop_names[] = {"sum", "max", "avg"};

/* ---- verdicts: agreed across ranks through plain MPI (mg_test_agree), not the library -------- */
static char why[512];   /* this rank's first failure */
static void fail_once(const char *fmt, const char *what, long a, double got, double want) {
    if (!why[0]) snprintf(why, sizeof why, fmt, what, a, got, want);
}
static void verdict(int ok, const char *name) {
    int all = mg_test_agree(ok);
    if (!ok) fprintf(stderr, "rank %d: %s: %s\n", comm.world_rank, name, why);
    mg_test_report(all, name, all ? "" : "failed on some rank (see stderr)");
    why[0] = 0;
}

/* ---- inputs and the serial oracle ----------------------------------------------------------- */
/* Element i of rank r's input (exactly representable in every dtype). salt varies the data. */
static float input(int r, int n, int64_t i, mg_dtype dt, int salt) {
    float big = dt == MG_F16 ? 2048.0f : 256.0f;
    if (n > 1 && (i + r + salt) % n == 0) return big * (float)(1 + (i / n) % 3);
    return 0.5f * (float)((r * 7 + i * 3 + salt) % 5 - 2);
}
/* The serial answer for element i: reduce in exact arithmetic (the values make the fp32 sum
   exact), average in fp32, then round once to dt.                                             */
static float reduced(int n, int64_t i, mg_dtype dt, mg_redop op, int salt) {
    double sum = 0, mx = -1e30;
    for (int r = 0; r < n; r++) {
        double x = input(r, n, i, dt, salt);
        sum += x;
        if (x > mx) mx = x;
    }
    float v = op == MG_MAX ? (float)mx : op == MG_AVG ? (float)sum / (float)n : (float)sum;
    uint16_t h;
    if (dt == MG_BF16) { h = mg_f32_to_bf16(v); return mg_bf16_to_f32(h); }
    if (dt == MG_F16) { h = mg_f32_to_f16(v); return mg_f16_to_f32(h); }
    return v;
}

/* Host staging <-> device buffers of any dtype, values as fp32 (MAX_COUNT · world fp32).    */
static unsigned char *host_bytes;
static void put(void *dev, mg_dtype dt, int64_t n, float (*f)(int64_t, void *), void *arg) {
    for (int64_t i = 0; i < n; i++) mg_store(host_bytes, dt, i, f(i, arg));
    mg_copy_to_device(&ctx, dev, host_bytes, (size_t)n * mg_dtype_size(dt));
}
static void get(float *out, const void *dev, mg_dtype dt, int64_t n) {
    mg_copy_to_host(&ctx, host_bytes, dev, (size_t)n * mg_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) out[i] = mg_load(host_bytes, dt, i);
}
typedef struct { int rank, n, salt; mg_dtype dt; int64_t offset; } gen_args;
static float gen_input(int64_t i, void *p) {
    gen_args *a = (gen_args *)p;
    return input(a->rank, a->n, a->offset + i, a->dt, a->salt);
}
static float gen_garbage(int64_t i, void *p) { (void)p; return -12345.0f + (float)(i % 7); }

/* Compares n results with the oracle f(offset + i); exact unless tol > 0.                    */
static int expect(const float *got, int64_t n, float (*want)(int64_t, void *), void *arg,
                  const char *what, double tol) {
    for (int64_t i = 0; i < n; i++) {
        float w = want(i, arg);
        double err = fabs((double)got[i] - (double)w);
        if (tol > 0 ? !(err <= tol * (fabs((double)w) + 1)) : !(got[i] == w)) {
            fail_once("%s: element %ld: got %.9g, want %.9g", what, (long)i, got[i], w);
            return 0;
        }
    }
    return 1;
}
typedef struct { int n, salt; mg_dtype dt; mg_redop op; int64_t offset; } red_args;
static float want_reduced(int64_t i, void *p) {
    red_args *a = (red_args *)p;
    return reduced(a->n, a->offset + i, a->dt, a->op, a->salt);
}
/* NCCL rounds 16-bit partial sums on the way; only the CPU path promises one rounding.      */
static double tolerance(mg_dtype dt) {
    return ctx.device == MG_DEVICE_CUDA && dt != MG_F32 ? 1.0 / 64 : 0;
}

static float *got;          /* host results                                                   */
static void *dsend, *drecv; /* device buffers of MAX_COUNT · world elements (fp32-sized)      */

/* ---- 3. collectives ------------------------------------------------------------------------- */
static void test_all_reduce(mg_group *g, mg_dtype dt) {
    int ok = 1, n = g->size;
    for (int o = 0; o < 3; o++)
        for (int ip = 0; ip < 2; ip++)
            for (int c = 0; c < N_COUNTS; c++) {
                int64_t count = counts[c];
                int salt = o + 3 * c;
                gen_args in = {g->rank, n, salt, dt, 0};
                red_args want = {n, salt, dt, redops[o], 0};
                void *recv = ip ? dsend : drecv;
                char what[96];
                snprintf(what, sizeof what, "%s %s count %ld", redop_names[o],
                         ip ? "in place" : "out of place", (long)count);
                put(dsend, dt, count, gen_input, &in);
                if (!ip) put(drecv, dt, count, gen_garbage, NULL);
                mg_all_reduce(&comm, g, dsend, recv, count, dt, redops[o]);
                get(got, recv, dt, count);
                ok &= expect(got, count, want_reduced, &want, what, tolerance(dt));
                if (!ip) {   /* out of place leaves send alone */
                    get(got, dsend, dt, count);
                    ok &= expect(got, count, gen_input, &in, "send buffer changed", 0);
                }
            }
    char name[96];
    snprintf(name, sizeof name, "all_reduce %s on %s group of %d", mg_dtype_name(dt), g->name, n);
    verdict(ok, name);
}

static void test_reduce_scatter(mg_group *g, mg_dtype dt) {
    int ok = 1, n = g->size;
    size_t es = mg_dtype_size(dt);
    for (int o = 0; o < 3; o++)
        for (int ip = 0; ip < 2; ip++)
            for (int c = 0; c < N_COUNTS; c++) {
                int64_t count = counts[c];
                int salt = 1 + o + 3 * c;
                gen_args in = {g->rank, n, salt, dt, 0};
                red_args want = {n, salt, dt, redops[o], (int64_t)g->rank * count};
                void *recv = ip ? (char *)dsend + (size_t)g->rank * count * es : drecv;
                char what[96];
                snprintf(what, sizeof what, "%s %s count %ld", redop_names[o],
                         ip ? "in place" : "out of place", (long)count);
                put(dsend, dt, count * n, gen_input, &in);
                if (!ip) put(drecv, dt, count, gen_garbage, NULL);
                mg_reduce_scatter(&comm, g, dsend, recv, count, dt, redops[o]);
                get(got, recv, dt, count);
                ok &= expect(got, count, want_reduced, &want, what, tolerance(dt));
            }
    char name[96];
    snprintf(name, sizeof name, "reduce_scatter %s on %s group of %d", mg_dtype_name(dt),
             g->name, n);
    verdict(ok, name);
}

typedef struct { int n, salt; mg_dtype dt; int64_t count; } gather_args;
static float want_gathered(int64_t i, void *p) {   /* chunk r of the result is rank r's input */
    gather_args *a = (gather_args *)p;
    return input((int)(i / a->count), a->n, i % a->count, a->dt, a->salt);
}
static void test_all_gather(mg_group *g, mg_dtype dt) {
    int ok = 1, n = g->size;
    size_t es = mg_dtype_size(dt);
    for (int ip = 0; ip < 2; ip++)
        for (int c = 0; c < N_COUNTS; c++) {
            int64_t count = counts[c];
            int salt = 2 + c;
            gen_args in = {g->rank, n, salt, dt, 0};
            gather_args want = {n, salt, dt, count};
            void *send = ip ? (char *)drecv + (size_t)g->rank * count * es : dsend;
            char what[96];
            snprintf(what, sizeof what, "%s count %ld", ip ? "in place" : "out of place",
                     (long)count);
            put(drecv, dt, count * n, gen_garbage, NULL);
            put(send, dt, count, gen_input, &in);
            mg_all_gather(&comm, g, send, drecv, count, dt);
            get(got, drecv, dt, count * n);
            if (count) ok &= expect(got, count * n, want_gathered, &want, what, 0);
        }
    char name[96];
    snprintf(name, sizeof name, "all_gather %s on %s group of %d", mg_dtype_name(dt), g->name, n);
    verdict(ok, name);
}

static void test_broadcast(mg_group *g, mg_dtype dt) {
    int ok = 1, n = g->size;
    for (int root = 0; root < n; root += (n > 1 ? n - 1 : 1))
        for (int ip = 0; ip < 2; ip++)
            for (int c = 0; c < N_COUNTS; c++) {
                int64_t count = counts[c];
                int salt = 3 + c;
                gen_args in = {root, n, salt, dt, 0};
                char what[96];
                snprintf(what, sizeof what, "root %d %s count %ld", root,
                         ip ? "in place" : "out of place", (long)count);
                put(drecv, dt, count, gen_garbage, NULL);
                if (g->rank == root) put(ip ? drecv : dsend, dt, count, gen_input, &in);
                mg_broadcast(&comm, g, ip ? drecv : dsend, drecv, count, dt, root);
                get(got, drecv, dt, count);
                ok &= expect(got, count, gen_input, &in, what, 0);
            }
    char name[96];
    snprintf(name, sizeof name, "broadcast %s on %s group of %d", mg_dtype_name(dt), g->name, n);
    verdict(ok, name);
}

/* Random fp32 data (inexact sums): the result matches a double-precision sum to fp32 noise,
   and every rank holds bit-identical results (checked through an MPI max/min of the bits). */
static void test_random_all_reduce(void) {
    int n = comm.world_size, ok = 1;
    int64_t count = 3001;
    float *mine = (float *)malloc(sizeof(float) * (size_t)count);
    for (int64_t i = 0; i < count; i++) mine[i] = mg_rand_normal(1234 + (uint64_t)comm.world_rank,
                                                                 (uint64_t)i);
    mg_copy_to_device(&ctx, dsend, mine, sizeof(float) * (size_t)count);
    mg_all_reduce(&comm, &comm.world, dsend, drecv, count, MG_F32, MG_SUM);
    mg_copy_to_host(&ctx, got, drecv, sizeof(float) * (size_t)count);
    for (int64_t i = 0; i < count && ok; i++) {
        double want = 0;
        for (int r = 0; r < n; r++) want += mg_rand_normal(1234 + (uint64_t)r, (uint64_t)i);
        if (!(fabs(got[i] - want) <= 1e-5 * (fabs(want) + 1))) {
            fail_once("%s %ld: got %.9g want %.9g", "random sum", (long)i, got[i], want);
            ok = 0;
        }
    }
#ifdef MG_USE_MPI
    {   /* identical on every rank: the bitwise max and min agree */
        uint64_t h = 0, hmax = 0, hmin = 0;
        for (int64_t i = 0; i < count; i++) {
            uint32_t b;
            memcpy(&b, &got[i], 4);
            h = h * 1000003u + b;
        }
        MPI_Allreduce(&h, &hmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&h, &hmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
        if (hmax != hmin) {
            fail_once("%s %ld %g %g", "results differ across ranks", 0, 0, 0);
            ok = 0;
        }
    }
#endif
    free(mine);
    verdict(ok, "all_reduce fp32 random data: double-sum accuracy, same bits on every rank");
}

/* ---- 5. nonblocking, overlapped with compute ------------------------------------------------ */
static volatile double sink;   /* keeps busy_work from being optimised away */
static void busy_work(int64_t iters) {   /* stands in for a layer's backward */
    double acc = 0;
    for (int64_t i = 0; i < iters; i++) acc += sin((double)i * 1e-3);
    sink += acc;
}
static void test_nonblocking(void) {
    mg_group *g = &comm.world;
    int n = g->size, ok = 1, polls_pending = 0;
    const int64_t big = 1 << 18, chunk = 777;
    size_t arena_mark = mg_arena_mark(&ctx);
    void *a = mg_alloc(&ctx, sizeof(float) * (size_t)big);
    void *b_send = mg_alloc(&ctx, 2 * (size_t)(chunk * n));
    void *b_recv = mg_alloc(&ctx, 2 * (size_t)chunk);
    void *c_recv = mg_alloc(&ctx, 2 * (size_t)(chunk * n));
    gen_args in_b = {g->rank, n, 12, MG_BF16, 0};
    gen_args in_c = {g->rank, n, 13, MG_F16, 0};
    red_args want_a = {n, 11, MG_F32, MG_AVG, 0};
    red_args want_b = {n, 12, MG_BF16, MG_SUM, (int64_t)g->rank * chunk};
    gather_args want_c = {n, 13, MG_F16, chunk};
    float *big_host = (float *)malloc(sizeof(float) * (size_t)(big > chunk * n ? big : chunk * n));
    for (int64_t i = 0; i < big; i++) big_host[i] = input(g->rank, n, i, MG_F32, 11);
    mg_copy_to_device(&ctx, a, big_host, sizeof(float) * (size_t)big);
    put(b_send, MG_BF16, chunk * n, gen_input, &in_b);
    put(dsend, MG_F16, chunk, gen_input, &in_c);

    /* post three operations on the same group, compute while testing, wait in reverse order */
    mg_request ra = mg_iall_reduce(&comm, g, a, a, big, MG_F32, MG_AVG);
    mg_request rb = mg_ireduce_scatter(&comm, g, b_send, b_recv, chunk, MG_BF16, MG_SUM);
    mg_request rc = mg_iall_gather(&comm, g, dsend, c_recv, chunk, MG_F16);
    for (int step = 0; step < 20; step++) {
        busy_work(20000);
        polls_pending += !mg_test(&comm, &ra);
    }
    mg_wait(&comm, &rc);
    mg_wait(&comm, &rb);
    mg_wait(&comm, &ra);
    ok &= ra.id == 0 && rb.id == 0 && rc.id == 0 && mg_test(&comm, &ra) == 1;
    if (!ok) fail_once("%s %ld %g %g", "handles not cleared after wait", 0, 0, 0);
    mg_copy_to_host(&ctx, big_host, a, sizeof(float) * (size_t)big);
    ok &= expect(big_host, big, want_reduced, &want_a, "iall_reduce fp32 avg", tolerance(MG_F32));
    get(got, b_recv, MG_BF16, chunk);
    ok &= expect(got, chunk, want_reduced, &want_b, "ireduce_scatter bf16 sum", tolerance(MG_BF16));
    get(big_host, c_recv, MG_F16, chunk * n);
    ok &= expect(big_host, chunk * n, want_gathered, &want_c, "iall_gather fp16", 0);

    /* mg_test until done also completes (and runs the bf16 rounding step) */
    {
        mg_request r = mg_ireduce_scatter(&comm, g, b_send, b_recv, chunk, MG_BF16, MG_SUM);
        while (!mg_test(&comm, &r)) busy_work(100);
        get(got, b_recv, MG_BF16, chunk);
        ok &= r.id == 0 && expect(got, chunk, want_reduced, &want_b, "test-driven bf16", 0);
    }
    free(big_host);
    mg_arena_release(&ctx, arena_mark);
    char name[160];
    snprintf(name, sizeof name, "nonblocking all_reduce/reduce_scatter/all_gather overlapped "
             "with compute (mg_test said pending %d times on rank 0)", polls_pending);
    verdict(ok, name);
}

/* ---- 4. point-to-point ---------------------------------------------------------------------- */
typedef struct { int from, to, salt; mg_dtype dt; } msg_args;
static float msg_value(int64_t i, void *p) {
    msg_args *m = (msg_args *)p;
    return (float)((m->from * 31 + m->to * 7 + i + m->salt) % 200) * 0.5f;
}
static void test_p2p(void) {
    mg_group *g = &comm.world;
    int n = g->size, r = g->rank, ok = 1;
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    /* A ring in both directions, every rank posting its receives FIRST: with blocking calls
       this order deadlocks; grouped it must not. Sizes differ per direction.               */
    const int64_t c_fwd = 1001, c_bwd = 37;
    void *fwd_send = dsend, *fwd_recv = drecv;
    void *bwd_send = (char *)dsend + 4 * 2048, *bwd_recv = (char *)drecv + 4 * 2048;
    msg_args out_f = {r, next, 1, MG_F32}, out_b = {r, prev, 2, MG_BF16};
    msg_args in_f = {prev, r, 1, MG_F32}, in_b = {next, r, 2, MG_BF16};
    put(fwd_send, MG_F32, c_fwd, msg_value, &out_f);
    put(bwd_send, MG_BF16, c_bwd, msg_value, &out_b);
    mg_group_start(&comm);
    mg_recv(&comm, g, fwd_recv, c_fwd, MG_F32, prev);
    mg_recv(&comm, g, bwd_recv, c_bwd, MG_BF16, next);
    mg_group_start(&comm);   /* nesting: only the outer end completes */
    mg_send(&comm, g, fwd_send, c_fwd, MG_F32, next);
    mg_group_end(&comm);
    mg_send(&comm, g, bwd_send, c_bwd, MG_BF16, prev);
    mg_group_end(&comm);
    get(got, fwd_recv, MG_F32, c_fwd);
    ok &= expect(got, c_fwd, msg_value, &in_f, "ring forward", 0);
    get(got, bwd_recv, MG_BF16, c_bwd);
    ok &= expect(got, c_bwd, msg_value, &in_b, "ring backward", 0);

    /* Async group end, overlapped with compute; two messages to one peer keep their order. */
    {
        msg_args m1 = {r, next, 5, MG_F16}, m2 = {r, next, 6, MG_F16};
        msg_args w1 = {prev, r, 5, MG_F16}, w2 = {prev, r, 6, MG_F16};
        put(fwd_send, MG_F16, 50, msg_value, &m1);
        put(bwd_send, MG_F16, 50, msg_value, &m2);
        mg_group_start(&comm);
        mg_send(&comm, g, fwd_send, 50, MG_F16, next);
        mg_send(&comm, g, bwd_send, 50, MG_F16, next);
        mg_recv(&comm, g, fwd_recv, 50, MG_F16, prev);
        mg_recv(&comm, g, bwd_recv, 50, MG_F16, prev);
        mg_request req = mg_group_end_async(&comm);
        busy_work(10000);
        mg_wait(&comm, &req);
        get(got, fwd_recv, MG_F16, 50);
        ok &= expect(got, 50, msg_value, &w1, "first of two messages", 0);
        get(got, bwd_recv, MG_F16, 50);
        ok &= expect(got, 50, msg_value, &w2, "second of two messages", 0);
    }
    /* Blocking and nonblocking calls outside a group, even ranks sending first. */
    if (n > 1) {
        int partner = r ^ 1;
        if (partner < n) {
            msg_args out = {r, partner, 9, MG_F32}, in = {partner, r, 9, MG_F32};
            put(dsend, MG_F32, 64, msg_value, &out);
            if (r % 2 == 0) {
                mg_send(&comm, g, dsend, 64, MG_F32, partner);
                mg_recv(&comm, g, drecv, 64, MG_F32, partner);
            } else {
                mg_recv(&comm, g, drecv, 64, MG_F32, partner);
                mg_send(&comm, g, dsend, 64, MG_F32, partner);
            }
            get(got, drecv, MG_F32, 64);
            ok &= expect(got, 64, msg_value, &in, "blocking exchange", 0);
            mg_request rr = mg_irecv(&comm, g, drecv, 64, MG_F32, partner);
            mg_request rs = mg_isend(&comm, g, dsend, 64, MG_F32, partner);
            mg_wait(&comm, &rs);
            mg_wait(&comm, &rr);
            get(got, drecv, MG_F32, 64);
            ok &= expect(got, 64, msg_value, &in, "isend/irecv exchange", 0);
        }
    }
    verdict(ok, "grouped send/recv: two-way ring posted receive-first, nested and async groups, "
                "message order, blocking and nonblocking pairs");
}

/* ---- 2. the real groups for every (t, p) the world size allows ----------------------------- */
static void test_groups(void) {
    int world = comm.world_size, ok = 1, tried = 0;
    int *members = (int *)malloc(sizeof(int) * (size_t)world);
    int *gathered = (int *)malloc(sizeof(int) * (size_t)world);
    void *dev_ranks = mg_alloc(&ctx, sizeof(float) * (size_t)world);
    for (int t = 1; t <= world; t++)
        for (int p = 1; t * p <= world; p++) {
            if (world % (t * p)) continue;
            mg_comm_setup_groups(&comm, &ctx, t, p, 1);
            tried++;
            ok &= comm.topo.t == t && comm.topo.p == p && comm.topo.d == world / (t * p);
            ok &= mg_topology_world_rank(&comm.topo, comm.topo.tp_rank, comm.topo.dp_rank,
                                         comm.topo.pp_rank) == comm.world_rank;
            for (int k = MG_GROUP_TENSOR; k < MG_GROUP_KINDS; k++) {
                mg_group *g = mg_comm_group(&comm, (mg_group_kind)k);
                int m = mg_topology_group(&comm.topo, comm.world_rank, (mg_group_kind)k, members);
                int expected_size = k == MG_GROUP_TENSOR ? t : k == MG_GROUP_DATA ? world / (t * p)
                                  : k == MG_GROUP_PIPELINE ? p : -1;
                if (expected_size >= 0 && m != expected_size) ok = 0;
                if (g->size != m) { ok = 0; continue; }
                if (m == 0) continue;   /* a middle stage has no embedding group */
                ok &= memcmp(g->world_ranks, members, sizeof(int) * (size_t)m) == 0;
                ok &= g->world_ranks[g->rank] == comm.world_rank;
                /* the communicator really holds these ranks, in this order */
                float me = (float)comm.world_rank;
                mg_copy_to_device(&ctx, dsend, &me, sizeof me);
                mg_all_gather(&comm, g, dsend, dev_ranks, 1, MG_F32);
                get(got, dev_ranks, MG_F32, m);
                for (int i = 0; i < m; i++) gathered[i] = (int)got[i];
                if (memcmp(gathered, members, sizeof(int) * (size_t)m) != 0) {
                    fail_once("%s t=%ld: gathered ranks differ (first %g vs %g)", g->name, (long)t,
                              gathered[0], members[0]);
                    ok = 0;
                }
            }
        }
    free(members);
    free(gathered);
    char name[128];
    snprintf(name, sizeof name, "groups for all %d (t, p) of %d ranks hold the ranks of "
             "Megatron's order, in order", tried, world);
    verdict(ok, name);
}

/* ---- 7. traffic counters -------------------------------------------------------------------- */
static void test_traffic(void) {
    int ok = 1;
    /* t = world size: one tensor group of all ranks (the paper's per-layer count below). */
    int t = comm.world_size;
    mg_comm_setup_groups(&comm, &ctx, t, 1, 1);
    mg_group *g = &comm.tensor;
    uint64_t n = (uint64_t)g->size;
    mg_comm_reset_traffic(&comm);
    mg_all_reduce(&comm, g, dsend, dsend, 1000, MG_BF16, MG_SUM);
    ok &= comm.bytes_sent[MG_GROUP_TENSOR] == 2 * (n - 1) * 2000 / n;
    mg_comm_reset_traffic(&comm);
    mg_reduce_scatter(&comm, g, dsend, drecv, 100, MG_F32, MG_SUM);
    mg_all_gather(&comm, g, drecv, dsend, 100, MG_F32);
    ok &= comm.bytes_sent[MG_GROUP_TENSOR] == 2 * (n - 1) * 400;
    mg_comm_reset_traffic(&comm);
    mg_broadcast(&comm, g, dsend, dsend, 999, MG_F16, 0);
    ok &= comm.bytes_sent[MG_GROUP_TENSOR] == (n - 1) * 1998 / n;
    for (int k = 0; k < MG_GROUP_KINDS; k++) ok &= k == MG_GROUP_TENSOR || comm.bytes_sent[k] == 0;
    /* Send counts its bytes on the group used; receive counts nothing. */
    mg_comm_reset_traffic(&comm);
    mg_group_start(&comm);
    mg_send(&comm, &comm.world, dsend, 10, MG_BF16, (comm.world_rank + 1) % comm.world_size);
    mg_recv(&comm, &comm.world, drecv, 10, MG_BF16,
            (comm.world_rank + comm.world_size - 1) % comm.world_size);
    mg_group_end(&comm);
    ok &= comm.bytes_sent[MG_GROUP_WORLD] == 20 && comm.bytes_sent[MG_GROUP_TENSOR] == 0;
    /* Megatron's layer: 2 all-reduces forward + 2 backward of b·s·h bf16 activations per
       microbatch = 8·b·s·h·(t−1)/t elements' worth, i.e. 16·b·s·h·(t−1)/t bytes.     */
    {
        const int64_t b = 2, s = 8, h = 24, bsh = b * s * h;   /* divisible by t = 1, 2, 3, 8 */
        mg_comm_reset_traffic(&comm);
        for (int i = 0; i < 4; i++) mg_all_reduce(&comm, g, dsend, dsend, bsh, MG_BF16, MG_SUM);
        ok &= comm.bytes_sent[MG_GROUP_TENSOR] == (uint64_t)(8 * bsh * (t - 1) / t) * 2;
    }
    if (!ok) fail_once("%s %ld %g %g", "counter mismatch", 0, 0, 0);
    verdict(ok, "traffic counters: ring all-reduce 2(n-1)/n, reduce-scatter/all-gather (n-1)/n of "
                "the full buffer, broadcast (n-1)/n, send bytes; 8bsh(t-1)/t per layer");
}

int main(int argc, char **argv) {
    mg_comm_init(&comm, &argc, &argv);
    mg_test_quiet = comm.world_rank != 0;
    mg_ctx_desc desc = {MG_DEVICE_AUTO, mg_comm_cuda_device(&comm),
                        mg_comm_default_threads(&comm), (size_t)8 << 20};
    mg_ctx_init(&ctx, &desc);
    comm.timeout_s = 120;
    int n = comm.world_size;
    got = (float *)malloc(sizeof(float) * (size_t)MAX_COUNT * (size_t)n);
    host_bytes = (unsigned char *)malloc(sizeof(float) * (size_t)MAX_COUNT * (size_t)n);
    dsend = mg_alloc(&ctx, sizeof(float) * (size_t)MAX_COUNT * (size_t)n);
    drecv = mg_alloc(&ctx, sizeof(float) * (size_t)MAX_COUNT * (size_t)n);

    CHECK(mg_comm_default_threads(&comm) >= 1 && comm.local_size >= 1 &&
          comm.local_rank < comm.local_size, "threads per rank and local rank are sane");

    /* Collectives over the world (before mg_comm_setup_groups: host buffers, MPI) and, once
       groups exist, over a group smaller than the world.                                   */
    mg_comm_setup_groups(&comm, &ctx, 1, 1, 1);
    for (int d = 0; d < 3; d++) {
        test_all_reduce(&comm.world, dtypes[d]);
        test_reduce_scatter(&comm.world, dtypes[d]);
        test_all_gather(&comm.world, dtypes[d]);
        test_broadcast(&comm.world, dtypes[d]);
    }
    if (n % 2 == 0) {   /* t = n/2: two tensor groups side by side, same calls at once */
        mg_comm_setup_groups(&comm, &ctx, n / 2, 1, 1);
        test_all_reduce(&comm.tensor, MG_BF16);
        test_reduce_scatter(&comm.tensor, MG_F32);
        test_all_gather(&comm.tensor, MG_F16);
        test_broadcast(&comm.tensor, MG_F32);
    }
    test_random_all_reduce();
    test_nonblocking();
    test_p2p();
    test_groups();
    test_traffic();

    int failed = mg_test_summary();
    free(got);
    free(host_bytes);
    mg_ctx_free(&ctx);
    mg_comm_finalize(&comm);
    return failed;
}
