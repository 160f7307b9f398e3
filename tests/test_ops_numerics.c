// mg-test: ranks=1 timeout=120
/* test_ops_numerics.c — the numerical building blocks of mg_tensor.h:
   fp32 -> bf16/fp16 rounding against an independent oracle (the nearest of all 65536 16-bit
   values, ties to even) including ties, overflow, subnormals and NaN; the Philox generator
   against Random123's known answers; uniform/normal statistics; dropout (rate, scale,
   determinism, independence of how rows are split, backward = same mask, attention masks by
   global head); the GEMM seam (every transpose, batched, 16-bit inputs and outputs) against a
   float64 triple loop; elementwise ops and casts; sum of squares with the nonfinite flag; the
   arena and its peak; bad arguments ending in one clear mg_fatal message.                    */
#include "ops_util.h"

/* --- 16-bit conversions ------------------------------------------------------------------- */
/* All finite non-negative 16-bit patterns, ascending in value, as doubles. */
static int finite_table(double *val, uint16_t *bits, int bf16) {
    int n = 0;
    unsigned h;
    for (h = 0; h < 0x7C00u + (bf16 ? 0x380u : 0u); h++) {
        if (bf16 && h >= 0x7F80u) break;
        val[n] = bf16 ? mg_bf16_to_f32((uint16_t)h) : mg_f16_to_f32((uint16_t)h);
        bits[n++] = (uint16_t)h;
    }
    return n;
}
/* The correctly rounded 16-bit pattern of |x| by search in the table: nearest value, ties to
   the even pattern, overflow to inf past max + half an ulp (IEEE 754 round-to-nearest-even). */
static uint16_t oracle_round(double x, const double *val, const uint16_t *bits, int n,
                             uint16_t inf_bits) {
    int lo = 0, hi = n - 1;
    double ulp_top = val[n - 1] - val[n - 2];
    if (x >= val[n - 1] + ulp_top / 2) {
        /* exactly at the midpoint: ties to even; the max pattern is odd, so inf */
        return inf_bits;
    }
    if (x >= val[n - 1]) return bits[n - 1];
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (val[mid] <= x) lo = mid; else hi = mid;
    }
    if (x - val[lo] < val[hi] - x) return bits[lo];
    if (x - val[lo] > val[hi] - x) return bits[hi];
    return (bits[lo] & 1) ? bits[hi] : bits[lo];
}
static void test_conversion(int bf16) {
    const char *name = bf16 ? "bf16" : "fp16";
    double *val = (double *)malloc(65536 * sizeof(double));
    uint16_t *bits = (uint16_t *)malloc(65536 * 2), inf_bits = bf16 ? 0x7F80 : 0x7C00;
    int n = finite_table(val, bits, bf16), i, bad_round = 0, bad_trip = 0, bad_tie = 0, nan_ok;
    char label[96];
    uint16_t (*to16)(float) = bf16 ? mg_f32_to_bf16 : mg_f32_to_f16;
    float (*from16)(uint16_t) = bf16 ? mg_bf16_to_f32 : mg_f16_to_f32;
    /* 1. every 16-bit value survives the round trip, both signs */
    for (i = 0; i < n; i++) {
        if (to16(from16(bits[i])) != bits[i]) bad_trip++;
        if (to16(from16((uint16_t)(bits[i] | 0x8000))) != (uint16_t)(bits[i] | 0x8000)) bad_trip++;
    }
    snprintf(label, sizeof label, "%s round trip of all %d finite values", name, 2 * n);
    mg_test_report(bad_trip == 0, label, "%d wrong", bad_trip);
    /* 2. exact midpoints between neighbours round to the even one; ± one fp32 ulp around them
          round to the nearer one                                                           */
    for (i = 0; i + 1 < n; i++) {
        float mid = (float)((val[i] + val[i + 1]) / 2); /* exact in fp32 */
        uint16_t even = (bits[i] & 1) ? bits[i + 1] : bits[i];
        if (to16(mid) != even || to16(-mid) != (uint16_t)(even | 0x8000)) bad_tie++;
        if (to16(nextafterf(mid, 0)) != bits[i] || to16(nextafterf(mid, INFINITY)) != bits[i + 1])
            bad_tie++;
    }
    snprintf(label, sizeof label, "%s ties to even at every midpoint", name);
    mg_test_report(bad_tie == 0, label, "%d wrong", bad_tie);
    /* 3. a million random fp32 bit patterns (all exponents) against the table oracle */
    for (i = 0; i < 1000000; i++) {
        uint32_t u;
        float f;
        uint16_t want, got;
        ops_lcg = ops_lcg * 6364136223846793005ull + 1442695040888963407ull;
        u = (uint32_t)(ops_lcg >> 32);
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        want = isinf(f) ? inf_bits : oracle_round(fabs((double)f), val, bits, n, inf_bits);
        if (signbit(f)) want |= 0x8000;
        got = to16(f);
        if (got != want) {
            if (bad_round < 3) printf("# %s(%a) = %04x, want %04x\n", name, (double)f, got, want);
            bad_round++;
        }
    }
    snprintf(label, sizeof label, "%s rounding of 1e6 random fp32 patterns", name);
    mg_test_report(bad_round == 0, label, "%d wrong", bad_round);
    /* 4. specials: overflow, inf, NaN (quiet, sign kept), signed zero, tiny values */
    {
        float big = bf16 ? 3.3962e38f : 65520.0f, below = bf16 ? 3.3960e38f : 65519.99f;
        float nan_f = nanf(""), snan;
        uint32_t snan_bits = 0x7F800001u; /* a NaN whose payload is only in the low bits */
        memcpy(&snan, &snan_bits, 4);
        snprintf(label, sizeof label, "%s overflow to inf, max stays finite", name);
        CHECK(to16(big) == inf_bits && to16(-big) == (uint16_t)(inf_bits | 0x8000) &&
              to16(below) == bits[n - 1] && to16(INFINITY) == inf_bits, label);
        nan_ok = isnan(from16(to16(nan_f))) && isnan(from16(to16(snan))) &&
                 isnan(from16(to16(-nan_f))) && (to16(-nan_f) & 0x8000);
        snprintf(label, sizeof label, "%s NaN stays NaN (incl. low-payload NaN) with sign", name);
        CHECK(nan_ok, label);
        snprintf(label, sizeof label, "%s signed zero and underflow", name);
        CHECK(to16(0.0f) == 0 && to16(-0.0f) == 0x8000 && to16(1e-30f) == (bf16 ? to16(1e-30f) : 0) &&
              (bf16 || (to16(2.9802322e-8f) == 0 && to16(2.9802326e-8f) == 1)), label);
    }
    free(val);
    free(bits);
}

/* --- random numbers ------------------------------------------------------------------------ */
static void test_rng(void) {
    /* Random123 kat_vectors: philox4x32 10 rounds, (counter; key) -> output */
    mg__philox4 a = mg__philox4x32(0, 0, 0, 0, 0);
    mg__philox4 b = mg__philox4x32(0xFFFFFFFFFFFFFFFFull, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
                                   0xFFFFFFFFu);
    mg__philox4 c = mg__philox4x32(0x299F31D0A4093822ull, 0x243F6A88u, 0x85A308D3u, 0x13198A2Eu,
                                   0x03707344u);
    double s = 0, s2 = 0, u_s = 0, n4 = 0, cnt_hi = 0;
    int i;
    CHECK(a.x[0] == 0x6627E8D5u && a.x[1] == 0xE169C58Du && a.x[2] == 0xBC57AC4Cu &&
          a.x[3] == 0x9B00DBD8u, "philox4x32-10 known answer (zeros)");
    CHECK(b.x[0] == 0x408F276Du && b.x[1] == 0x41C83B0Eu && b.x[2] == 0xA20BC7C6u &&
          b.x[3] == 0x6D5451FDu, "philox4x32-10 known answer (ones)");
    CHECK(c.x[0] == 0xD16CFE09u && c.x[1] == 0x94FDCCEBu && c.x[2] == 0x5001E420u &&
          c.x[3] == 0x24126EA1u, "philox4x32-10 known answer (pi digits)");
    CHECK(mg_rand_u32(5, 4 * 77 + 2) == mg__philox4x32(5, 77, 0, 0, 0).x[2] &&
          mg_rand_u32(5, ((uint64_t)3 << 34) + 1) == mg__philox4x32(5, 0, 3, 0, 0).x[1],
          "mg_rand_u32(key, i) is word i%4 of philox(key, i/4)");
    for (i = 0; i < 200000; i++) {
        double z = mg_rand_normal(42, (uint64_t)i), u = mg_rand_uniform(42, (uint64_t)i);
        s += z; s2 += z * z; n4 += z * z * z * z; u_s += u;
        if (u >= 0.5) cnt_hi++;
        if (!(u >= 0 && u < 1) || !isfinite(z)) { s = 1e9; break; }
    }
    s /= 200000; s2 /= 200000; n4 /= 200000; u_s /= 200000;
    /* standard errors: mean 0.0022, variance 0.0032, 4th moment 0.024, uniform mean 0.00065 */
    mg_test_report(fabs(s) < 0.01 && fabs(s2 - 1) < 0.015 && fabs(n4 - 3) < 0.12, "normal moments",
                   "mean %.4f var %.4f m4 %.3f", s, s2, n4);
    mg_test_report(fabs(u_s - 0.5) < 0.003 && fabs(cnt_hi / 200000 - 0.5) < 0.005, "uniform moments",
                   "mean %.4f", u_s);
    CHECK(mg_rand_u32(1, 0) != mg_rand_u32(2, 0) && mg_rand_u32(1, 0) != mg_rand_u32(1, 1) &&
          mg_dropout_key(1, 2, 3) != mg_dropout_key(1, 2, 4) &&
          mg_dropout_key(1, 2, 3) != mg_dropout_key(1, 3, 3) &&
          mg_dropout_key(1, 2, 3) == mg_dropout_key(1, 2, 3), "keys and indices change the stream");
}

/* --- dropout -------------------------------------------------------------------------------- */
static void test_dropout(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    enum { R = 64, Cc = 301 }; /* odd width: rows straddle Philox groups of 4 */
    float p = 0.3f, *ones = (float *)malloc(R * Cc * 4), *h, *h2;
    uint64_t key = mg_dropout_key(99, 5, 0);
    mg_tensor x, y, y2;
    int i, kept = 0, bad_scale = 0, bad_hash = 0;
    for (i = 0; i < R * Cc; i++) ones[i] = 1.0f;
    x = ops_dev(ctx, MG_F32, ones, R, Cc);
    y = ops_dev(ctx, MG_F32, NULL, R, Cc);
    y2 = ops_dev(ctx, MG_F32, NULL, R, Cc);
    mg_dropout_forward(ctx, &y, &x, p, key, 0);
    h = ops_host(ctx, &y);
    for (i = 0; i < R * Cc; i++) {
        int keep = mg_rand_u32(key, (uint64_t)i) >= (uint32_t)(p * 4294967296.0);
        if (h[i] != 0) kept++;
        if (h[i] != 0 && fabsf(h[i] - 1 / (1 - p)) > 1e-6f) bad_scale++;
        if ((h[i] != 0) != keep) bad_hash++;
    }
    /* 19264 draws: standard error of the kept fraction 0.0033 */
    mg_test_report(fabs(kept / (double)(R * Cc) - (1 - p)) < 0.015, "dropout keeps 1-p",
                   "kept %.4f", kept / (double)(R * Cc));
    CHECK(bad_scale == 0, "dropout scales kept values by 1/(1-p)");
    CHECK(bad_hash == 0, "dropout mask = mg_rand_u32(key, row*cols+col) >= p*2^32");
    /* same key -> same mask; another key -> another mask */
    mg_dropout_forward(ctx, &y2, &x, p, key, 0);
    h2 = ops_host(ctx, &y2);
    CHECK(!memcmp(h, h2, R * Cc * 4), "dropout is deterministic");
    free(h2);
    mg_dropout_forward(ctx, &y2, &x, p, key + 1, 0);
    h2 = ops_host(ctx, &y2);
    CHECK(memcmp(h, h2, R * Cc * 4) != 0, "dropout depends on the key");
    free(h2);
    /* rows split in two shards (row_offset) give the same mask as the whole tensor */
    {
        mg_tensor xa = mg_tensor_rows(&x, 0, 23), xb = mg_tensor_rows(&x, 23, R - 23);
        mg_tensor ya = mg_tensor_rows(&y2, 0, 23), yb = mg_tensor_rows(&y2, 23, R - 23);
        mg_dropout_forward(ctx, &ya, &xa, p, key, 0);
        mg_dropout_forward(ctx, &yb, &xb, p, key, 23);
        h2 = ops_host(ctx, &y2);
        CHECK(!memcmp(h, h2, R * Cc * 4), "dropout mask independent of the row split");
        free(h2);
    }
    /* backward applies the same mask and scale to the gradient; in place works */
    mg_dropout_backward(ctx, &x, &x, p, key, 0);
    h2 = ops_host(ctx, &x);
    CHECK(!memcmp(h, h2, R * Cc * 4), "dropout backward = same mask (in place)");
    free(h2);
    /* p = 0 copies */
    mg_dropout_forward(ctx, &y2, &y, 0.0f, key, 0);
    h2 = ops_host(ctx, &y2);
    CHECK(!memcmp(h, h2, R * Cc * 4), "dropout p=0 is the identity");
    free(h2);
    OPS_EXPECT_FATAL("dropout rejects p=1", "need 0 <= p < 1",
                     mg_dropout_forward(ctx, &y, &x, 1.0f, key, 0));
    free(h);
    free(ones);
    mg_arena_release(ctx, mark);
}

/* Attention dropout with heads split over two "ranks" (head_offset) gives the same output as
   all heads on one; and it equals out = D(P)·V with D from the global head index.          */
static void test_attention_dropout(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    enum { T = 9, B = 2, NH = 4, HD = 3, C = NH * HD };
    float *qkv_h = ops_randn_array(T * B * 3 * C, 1.0f), *qkv_split[2], *full_h, *split_h;
    float *dout_h = ops_randn_array(T * B * C, 1.0f), *dfull, *dsplit;
    mg_attn_dropout drop = {0.25f, 1234, 0, NH};
    mg_tensor qkv = ops_dev(ctx, MG_F32, qkv_h, T * B, 3 * C), out = ops_dev(ctx, MG_F32, NULL, T * B, C);
    mg_tensor att = ops_dev(ctx, MG_F32, NULL, B * NH * T, T), dout = ops_dev(ctx, MG_F32, dout_h, T * B, C);
    mg_tensor dqkv = ops_dev(ctx, MG_F32, NULL, T * B, 3 * C), datt = ops_dev(ctx, MG_F32, NULL, B * NH * T, T);
    int r, t, b, h, j, zeros = 0, total = 0;
    mg_attention_forward(ctx, &out, &att, &qkv, B, T, NH, &drop);
    mg_attention_backward(ctx, &dqkv, &datt, &dout, &qkv, &att, B, T, NH, &drop);
    full_h = ops_host(ctx, &out);
    dfull = ops_host(ctx, &dqkv);
    split_h = (float *)malloc(T * B * C * 4);
    dsplit = (float *)malloc(T * B * 3 * C * 4);
    /* two ranks with 2 heads each: qkv columns of heads [2r, 2r+2) */
    for (r = 0; r < 2; r++) {
        int lc = C / 2;
        float *dl = (float *)malloc(T * B * lc * 4);
        mg_attn_dropout dr = {0.25f, 1234, 2 * r, NH};
        mg_tensor q, o, a, dq, da, dol;
        float *oh, *dqh;
        qkv_split[r] = (float *)malloc(T * B * 3 * lc * 4);
        for (t = 0; t < T * B; t++) {
            memcpy(qkv_split[r] + t * 3 * lc, qkv_h + t * 3 * C + r * 3 * lc, 3 * lc * 4);
            memcpy(dl + t * lc, dout_h + t * C + r * lc, lc * 4);
        }
        q = ops_dev(ctx, MG_F32, qkv_split[r], T * B, 3 * lc);
        o = ops_dev(ctx, MG_F32, NULL, T * B, lc);
        a = ops_dev(ctx, MG_F32, NULL, B * 2 * T, T);
        dq = ops_dev(ctx, MG_F32, NULL, T * B, 3 * lc);
        da = ops_dev(ctx, MG_F32, NULL, B * 2 * T, T);
        dol = ops_dev(ctx, MG_F32, dl, T * B, lc);
        mg_attention_forward(ctx, &o, &a, &q, B, T, 2, &dr);
        mg_attention_backward(ctx, &dq, &da, &dol, &q, &a, B, T, 2, &dr);
        oh = ops_host(ctx, &o);
        dqh = ops_host(ctx, &dq);
        for (t = 0; t < T * B; t++) {
            memcpy(split_h + t * C + r * lc, oh + t * lc, lc * 4);
            memcpy(dsplit + t * 3 * C + r * 3 * lc, dqh + t * 3 * lc, 3 * lc * 4);
        }
        free(oh); free(dqh); free(dl); free(qkv_split[r]);
    }
    ops_close_host("attention dropout: heads split over 2 ranks = unsplit", split_h, full_h,
                   T * B * C, 1e-6, 1e-6);
    ops_close_host("attention dropout backward: heads split = unsplit", dsplit, dfull,
                   T * B * 3 * C, 1e-6, 1e-6);
    /* out = D(P)·V recomputed on the host from the saved probabilities */
    {
        float *P = ops_host(ctx, &att), *want = (float *)calloc(T * B * C, 4);
        uint32_t thr = (uint32_t)(0.25 * 4294967296.0);
        for (b = 0; b < B; b++)
            for (h = 0; h < NH; h++)
                for (t = 0; t < T; t++)
                    for (j = 0; j <= t; j++) {
                        uint64_t g = (((uint64_t)b * NH + h) * T + t) * T + j;
                        float pd = mg_rand_u32(1234, g) >= thr ? P[g] / 0.75f : 0.0f;
                        int d;
                        total++;
                        zeros += pd == 0.0f;
                        for (d = 0; d < HD; d++)
                            want[(t * B + b) * C + h * HD + d] +=
                                pd * qkv_h[(j * B + b) * 3 * C + h * 3 * HD + 2 * HD + d];
                    }
        ops_close_host("attention dropout = D(P)·V with global-head keys", full_h, want,
                       T * B * C, 1e-5, 1e-6);
        mg_test_report(zeros > total / 10 && zeros < total * 4 / 10, "attention dropout drops ~p",
                       "%d of %d", zeros, total);
        free(P);
        free(want);
    }
    free(qkv_h); free(dout_h); free(full_h); free(split_h); free(dfull); free(dsplit);
    mg_arena_release(ctx, mark);
}

/* --- GEMM seam ---------------------------------------------------------------------------- */
/* x rounded to dtype dt and back. */
static float round_to(int dt, float x) {
    return dt == MG_BF16 ? mg_bf16_to_f32(mg_f32_to_bf16(x)) :
           dt == MG_F16 ? mg_f16_to_f32(mg_f32_to_f16(x)) : x;
}
/* C = alpha·op(A)·op(B) + beta·C on column-major data, in double. */
static void gemm_ref(int ta, int tb, int m, int n, int k, double alpha, const float *A, int lda,
                     const float *B, int ldb, double beta, float *C, int ldc) {
    int i, j, l;
    for (j = 0; j < n; j++)
        for (i = 0; i < m; i++) {
            double s = 0;
            for (l = 0; l < k; l++)
                s += (double)(ta ? A[l + i * lda] : A[i + l * lda]) *
                     (double)(tb ? B[j + l * ldb] : B[l + j * ldb]);
            C[i + j * ldc] = (float)(alpha * s + beta * C[i + j * ldc]);
        }
}
static void test_gemm(mg_ctx *ctx) {
    int ta, tb, dt;
    const int m = 13, n = 9, k = 70, batch = 5;
    for (dt = 0; dt < 3; dt++)
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++) {
                size_t mark = mg_arena_mark(ctx);
                mg_dtype in_dt = (mg_dtype)dt;
                int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 2, ldc = m + 1;
                int64_t sA = (int64_t)lda * (ta ? m : k) + 5, sB = (int64_t)ldb * (tb ? k : n) + 1;
                int64_t sC = (int64_t)ldc * n + 7, i;
                float *A = ops_randn_array(sA * batch, 1), *Bm = ops_randn_array(sB * batch, 1);
                float *C0 = ops_randn_array(sC * batch, 1), *want = (float *)malloc(sC * batch * 4);
                mg_tensor a, b, c;
                char label[128];
                int bi;
                /* the oracle sees the inputs as rounded to the input dtype */
                for (i = 0; i < sA * batch; i++) A[i] = round_to(dt, A[i]);
                for (i = 0; i < sB * batch; i++) Bm[i] = round_to(dt, Bm[i]);
                memcpy(want, C0, sC * batch * 4);
                for (bi = 0; bi < batch; bi++)
                    gemm_ref(ta, tb, m, n, k, 0.75, A + bi * sA, lda, Bm + bi * sB, ldb, 0.5,
                             want + bi * sC, ldc);
                a = ops_dev(ctx, in_dt, A, 1, sA * batch);
                b = ops_dev(ctx, in_dt, Bm, 1, sB * batch);
                c = ops_dev(ctx, MG_F32, C0, 1, sC * batch);
                mg_gemm_strided_batched(ctx, ta, tb, m, n, k, 0.75f, a.data, in_dt, lda, sA, b.data,
                                        in_dt, ldb, sB, 0.5f, c.data, MG_F32, ldc, sC, batch);
                snprintf(label, sizeof label, "gemm batched %s inputs, op(A)=%s op(B)=%s, fp32 C",
                         mg_dtype_name(in_dt), ta ? "T" : "N", tb ? "T" : "N");
                ops_close(ctx, label, &c, want, 1e-5, 1e-6); /* gaps in C must be untouched too */
                /* single GEMM, C in the input dtype (rounded once at the end) */
                if (ta == tb) {
                    float *w16 = (float *)malloc(sC * 4);
                    mg_tensor c16 = ops_dev(ctx, in_dt, C0, 1, sC);
                    for (i = 0; i < sC; i++) w16[i] = round_to(dt, C0[i]);
                    gemm_ref(ta, tb, m, n, k, 0.75, A, lda, Bm, ldb, 0.5, w16, ldc);
                    for (i = 0; i < sC; i++) w16[i] = round_to(dt, w16[i]);
                    mg_gemm(ctx, ta, tb, m, n, k, 0.75f, a.data, in_dt, lda, b.data, in_dt, ldb, 0.5f,
                            c16.data, in_dt, ldc);
                    snprintf(label, sizeof label, "gemm %s in, %s out, op %s%s", mg_dtype_name(in_dt),
                             mg_dtype_name(in_dt), ta ? "T" : "N", tb ? "T" : "N");
                    /* one rounding of the output: half an ulp of the 16-bit format */
                    ops_close(ctx, label, &c16, w16, dt == 0 ? 1e-5 : dt == 1 ? 4e-3 : 5e-4, 1e-6);
                    free(w16);
                }
                free(A); free(Bm); free(C0); free(want);
                mg_arena_release(ctx, mark);
            }
    OPS_EXPECT_FATAL("gemm rejects fp32 inputs with a bf16 C", "C must be the inputs' dtype or fp32",
                     mg_gemm(ctx, 0, 0, 2, 2, 2, 1, NULL, MG_F32, 2, NULL, MG_F32, 2, 0, NULL, MG_BF16, 2));
    OPS_EXPECT_FATAL("gemm rejects mixed A/B dtypes", "they must match",
                     mg_gemm(ctx, 0, 0, 2, 2, 2, 1, NULL, MG_F32, 2, NULL, MG_BF16, 2, 0, NULL, MG_F32, 2));
    OPS_EXPECT_FATAL("gemm rejects a short lda", "leading dimensions",
                     mg_gemm(ctx, 0, 0, 4, 2, 2, 1, NULL, MG_F32, 3, NULL, MG_F32, 2, 0, NULL, MG_F32, 4));
    /* k = 0 (BLAS): C = β·C, and C = 0 with β = 0 without reading C (a NaN there does not
       survive). Batch of 2 3×2 matrices, ldc 4, stride 9: the gaps stay untouched.        */
    for (dt = 0; dt < 2; dt++) {
        size_t mark = mg_arena_mark(ctx);
        mg_dtype cdt = dt ? MG_BF16 : MG_F32; /* bf16 inputs with a bf16 C, or fp32 */
        float h[18], want_b[18], want_z[18], zero[2] = {0, 0};
        mg_tensor a = ops_dev(ctx, cdt, zero, 1, 2), c, z;
        int bi, j, r;
        for (r = 0; r < 18; r++) h[r] = want_b[r] = want_z[r] = (float)(r + 1);
        for (bi = 0; bi < 2; bi++)
            for (j = 0; j < 2; j++)
                for (r = 0; r < 3; r++) {
                    want_b[bi * 9 + j * 4 + r] *= 0.5f;
                    want_z[bi * 9 + j * 4 + r] = 0.0f;
                }
        c = ops_dev(ctx, cdt, h, 1, 18);
        mg_gemm_strided_batched(ctx, 0, 0, 3, 2, 0, 1.0f, a.data, cdt, 3, 0, a.data, cdt, 1, 0,
                                0.5f, c.data, cdt, 4, 9, 2);
        ops_close(ctx, dt ? "gemm k = 0: C = beta*C (bf16)" : "gemm k = 0: C = beta*C (fp32)",
                  &c, want_b, 0.0, 1e-6);
        h[5] = NAN;
        z = ops_dev(ctx, cdt, h, 1, 18);
        mg_gemm_strided_batched(ctx, 1, 1, 3, 2, 0, 1.0f, a.data, cdt, 1, 0, a.data, cdt, 2, 0,
                                0.0f, z.data, cdt, 4, 9, 2);
        ops_close(ctx, dt ? "gemm k = 0, beta = 0: C = 0, NaN not read (bf16)"
                          : "gemm k = 0, beta = 0: C = 0, NaN not read (fp32)", &z, want_z, 0.0, 1e-6);
        mg_arena_release(ctx, mark);
    }
}

/* Large enough to take every CPU path: batch >= threads and the split single GEMM. */
static void test_gemm_paths(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    const int m = 96, n = 160, k = 64;
    float *A = ops_randn_array(m * k * 4, 1), *Bm = ops_randn_array(k * n * 4, 1);
    float *want = (float *)calloc(m * n * 4, 4);
    mg_tensor a = ops_dev(ctx, MG_F32, A, 1, m * k * 4), b = ops_dev(ctx, MG_F32, Bm, 1, k * n * 4);
    mg_tensor c = ops_dev(ctx, MG_F32, NULL, 1, m * n * 4), c1 = mg_tensor_rows(&c, 0, 1);
    int i;
    for (i = 0; i < 4; i++)
        gemm_ref(0, 0, m, n, k, 1, A + i * m * k, m, Bm + i * k * n, k, 0, want + i * m * n, m);
    mg_gemm_strided_batched(ctx, 0, 0, m, n, k, 1, a.data, MG_F32, m, m * k, b.data, MG_F32, k,
                            k * n, 0, c.data, MG_F32, m, m * n, 4);
    ops_close(ctx, "gemm batch of 4 (parallel over the batch)", &c, want, 1e-5, 1e-6);
    mg_gemm(ctx, 1, 1, n, m, k, 1, b.data, MG_F32, k, a.data, MG_F32, m, 0, c.data, MG_F32, n);
    c1.shape[1] = m * n;
    { /* Cᵀ = Bᵀ·Aᵀ: the transpose of the first product */
        float *wt = (float *)malloc(m * n * 4);
        int r, s;
        for (r = 0; r < m; r++)
            for (s = 0; s < n; s++) wt[s + r * n] = want[r + s * m];
        ops_close(ctx, "gemm large single (split over threads), both transposed", &c1, wt, 1e-5, 1e-6);
        free(wt);
    }
    mg_gemm(ctx, 0, 0, m, n, k, 1, a.data, MG_F32, m, b.data, MG_F32, k, 0, c.data, MG_F32, m);
    ops_close(ctx, "gemm large single, tall split", &c1, want, 1e-5, 1e-6);
    free(A); free(Bm); free(want);
    mg_arena_release(ctx, mark);
}

/* C (uploaded from c_host, nc floats) = α·op(A)·op(B) + β·C through mg_gemm, fp32. */
static mg_tensor gemm_on(mg_ctx *ctx, int ta, int tb, int m, int n, int k, float alpha,
                         const mg_tensor *a, int lda, const mg_tensor *b, int ldb, float beta,
                         const float *c_host, int64_t nc, int ldc) {
    mg_tensor c = ops_dev(ctx, MG_F32, c_host, 1, nc);
    mg_gemm(ctx, ta, tb, m, n, k, alpha, a->data, MG_F32, lda, b->data, MG_F32, ldb, beta, c.data,
            MG_F32, ldc);
    return c;
}
/* A context like ctx with n_threads threads (one thread: its sums must come out bit for bit
   the same as the team's). */
static mg_ctx threads_ctx(const mg_ctx *ctx, int n_threads) {
    mg_ctx c;
    mg_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = ctx->device;
    d.n_threads = n_threads;
    d.arena_bytes = (size_t)16 << 20;
    mg_ctx_init(&c, &d);
    return c;
}
static mg_ctx one_thread_ctx(const mg_ctx *ctx) { return threads_ctx(ctx, 1); }
/* Shapes across the CPU sgemm's block edges (6d: 48×8 micro-tiles, k in slices of at most
   384, blocks of 240 rows and 1536 columns): rows past a block with a ragged tile, k in three
   uneven slices and not a multiple of 8; columns past a block, ragged on both sides; a last
   panel of 30 rows (two of its three vectors) with 4 ragged columns; C of one short panel
   (40 rows), op(B)'s columns split over threads with the ragged panel on the second.
   Every op(A)/op(B), padded leading dimensions; against the double oracle, then β = 0 over a
   C of NaN (not read), α = 0 over an A of NaN (C = β·C). Where the packed kernel runs (the
   context has its packing areas, cpu_gemm_pack, and C has at least 16 columns, as all these
   have), every element is one sum over k in order: a one-thread context, which does not split
   the GEMM, gives the same bits.                                                             */
static void test_gemm_blocks(mg_ctx *ctx) {
    const int shapes[4][3] = {{290, 21, 1100}, {100, 1545, 37}, {126, 300, 45}, {40, 203, 70}};
    mg_ctx one = one_thread_ctx(ctx);
    int sh, ta, tb;
    for (sh = 0; sh < 4; sh++)
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++) {
                const int m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2];
                int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldc = m + 2;
                int64_t na = (int64_t)lda * (ta ? m : k), nb = (int64_t)ldb * (tb ? k : n);
                int64_t nc = (int64_t)ldc * n, i;
                size_t mark = mg_arena_mark(ctx), mark1 = mg_arena_mark(&one);
                float *A = ops_randn_array(na, 1), *Bm = ops_randn_array(nb, 1);
                float *C0 = ops_randn_array(nc, 1), *want = (float *)malloc(sizeof(float) * nc);
                float *nan_c = (float *)malloc(sizeof(float) * nc), *nan_a = (float *)malloc(sizeof(float) * na);
                mg_tensor a, b, c, c1, a_nan;
                char label[160];
                memcpy(want, C0, sizeof(float) * nc);
                gemm_ref(ta, tb, m, n, k, 0.75, A, lda, Bm, ldb, 0.5, want, ldc);
                a = ops_dev(ctx, MG_F32, A, 1, na);
                b = ops_dev(ctx, MG_F32, Bm, 1, nb);
                c = gemm_on(ctx, ta, tb, m, n, k, 0.75f, &a, lda, &b, ldb, 0.5f, C0, nc, ldc);
                snprintf(label, sizeof label, "gemm across the blocks %d×%d×%d, op %s%s, α 0.75 β 0.5",
                         m, n, k, ta ? "T" : "N", tb ? "T" : "N");
                /* an fp32 sum of k products is off by about √k·u·Σ|a·b| (u = 2⁻²⁴), and Σ|a·b|
                   is about √k times the result's scale for random signs: a bound in √k         */
                ops_close(ctx, label, &c, want, 1e-6 * sqrt((double)k), 1e-6);
                if (ctx->device == MG_DEVICE_CPU && ctx->cpu_gemm_pack) {   /* one thread: same bits */
                    mg_tensor a1 = ops_dev(&one, MG_F32, A, 1, na), b1 = ops_dev(&one, MG_F32, Bm, 1, nb);
                    float *got = ops_host(ctx, &c), *got1;
                    c1 = gemm_on(&one, ta, tb, m, n, k, 0.75f, &a1, lda, &b1, ldb, 0.5f, C0, nc, ldc);
                    got1 = ops_host(&one, &c1);
                    snprintf(label, sizeof label, "gemm %d×%d×%d op %s%s: split over threads or not, "
                             "the same bits", m, n, k, ta ? "T" : "N", tb ? "T" : "N");
                    CHECK(memcmp(got, got1, sizeof(float) * nc) == 0, label);
                    free(got);
                    free(got1);
                }
                /* β = 0: C's NaNs are not read; the gaps between C's columns keep them */
                for (i = 0; i < nc; i++) nan_c[i] = NAN;
                memset(want, 0, sizeof(float) * nc);
                gemm_ref(ta, tb, m, n, k, 0.75, A, lda, Bm, ldb, 0.0, want, ldc);
                c = gemm_on(ctx, ta, tb, m, n, k, 0.75f, &a, lda, &b, ldb, 0.0f, nan_c, nc, ldc);
                {
                    float *got = ops_host(ctx, &c);
                    int fine = 1, col, row;
                    for (col = 0; col < n && fine; col++)
                        for (row = 0; row < ldc; row++) {
                            float g = got[row + (int64_t)col * ldc];
                            if (row >= m ? !isnan(g) : !(isfinite(g) && fabs(g - want[row + (int64_t)col * ldc]) <=
                                                          1e-4 * (1 + fabs(want[row + (int64_t)col * ldc])))) {
                                fine = 0;
                                break;
                            }
                        }
                    snprintf(label, sizeof label, "gemm %d×%d×%d op %s%s, β = 0: C's NaNs not read, "
                             "the gaps untouched", m, n, k, ta ? "T" : "N", tb ? "T" : "N");
                    CHECK(fine, label);
                    free(got);
                }
                /* α = 0: A (all NaN) is not read, C = β·C */
                for (i = 0; i < na; i++) nan_a[i] = NAN;
                for (i = 0; i < nc; i++) want[i] = C0[i];
                for (i = 0; i < n; i++) {
                    int r;
                    for (r = 0; r < m; r++) want[r + i * ldc] = 0.5f * C0[r + i * ldc];
                }
                a_nan = ops_dev(ctx, MG_F32, nan_a, 1, na);
                c = gemm_on(ctx, ta, tb, m, n, k, 0.0f, &a_nan, lda, &b, ldb, 0.5f, C0, nc, ldc);
                snprintf(label, sizeof label, "gemm %d×%d×%d op %s%s, α = 0: A not read, C = β·C",
                         m, n, k, ta ? "T" : "N", tb ? "T" : "N");
                ops_close(ctx, label, &c, want, 0.0, 1e-6);
                free(A); free(Bm); free(C0); free(want); free(nan_c); free(nan_a);
                mg_arena_release(ctx, mark);
                mg_arena_release(&one, mark1);
            }
    mg_ctx_free(&one);
}

/* mg_linear_backward_weight: dW against float64, and the bias gradient as the plain column
   sums — each column added in row order in fp32, then added to dbias once — bit for bit, on
   the context's threads and on one (the CPU sums dout's columns inside the dW GEMM, split with
   its columns or its rows). Shapes whose GEMM splits over columns (Out ≥ In) and over rows
   (In > Out), with k = N in three slices, and one with fewer than 16 columns (Out = 9: the
   OpenBLAS path). On a CUDA context the column sums run in another order: there they are held
   to fp32's summation bound instead.                                                       */
static void test_linear_bgrad(mg_ctx *ctx0) {
    const int shapes[3][3] = {{1100, 130, 300}, {777, 500, 40}, {300, 70, 9}};   /* N, In, Out */
    mg_ctx one = one_thread_ctx(ctx0);
    int sh;
    for (sh = 0; sh < 6; sh++) {
        mg_ctx *ctx = sh < 3 ? ctx0 : &one;
        const int N = shapes[sh % 3][0], In = shapes[sh % 3][1], Out = shapes[sh % 3][2];
        size_t mark = mg_arena_mark(ctx);
        float *x = ops_randn_array((int64_t)N * In, 1), *dy = ops_randn_array((int64_t)N * Out, 1);
        float *w0 = ops_randn_array((int64_t)Out * In, 1), *b0 = ops_randn_array(Out, 1);
        float *want_w = (float *)malloc(sizeof(float) * (size_t)Out * In);
        float *want_b = (float *)malloc(sizeof(float) * (size_t)Out), *got_b;
        mg_tensor xt = ops_dev(ctx, MG_F32, x, N, In), dyt = ops_dev(ctx, MG_F32, dy, N, Out);
        mg_tensor dw = ops_dev(ctx, MG_F32, w0, Out, In), db = ops_dev(ctx, MG_F32, b0, 1, Out);
        char label[160];
        int r, j, same = 1;
        double worst = 0.0;   /* CUDA: the largest |error| / Σ|terms| of the sums */
        memcpy(want_w, w0, sizeof(float) * (size_t)Out * In);
        /* dWᵀ(In×Out) += xᵀ·dy in column-major terms: A = x (In×N), B = dy (Out×N) transposed */
        gemm_ref(0, 1, In, Out, N, 1.0, x, In, dy, Out, 1.0, want_w, In);
        for (j = 0; j < Out; j++) {
            float acc = 0.0f;
            for (r = 0; r < N; r++) acc += dy[(int64_t)r * Out + j];
            want_b[j] = b0[j] + acc;
        }
        mg_linear_backward_weight(ctx, &dw, &db, &dyt, &xt);
        snprintf(label, sizeof label, "linear backward weight N %d In %d Out %d, %d thread(s): dW vs "
                 "float64", N, In, Out, ctx->n_threads);
        ops_close(ctx, label, &dw, want_w, 1e-6 * sqrt((double)N), 1e-6);
        got_b = ops_host(ctx, &db);
        if (ctx->device != MG_DEVICE_CUDA) {
            for (j = 0; j < Out; j++) same &= got_b[j] == want_b[j];
            snprintf(label, sizeof label, "linear backward weight N %d In %d Out %d, %d thread(s): "
                     "dbias = the in-order column sums, bit for bit", N, In, Out, ctx->n_threads);
        } else {
            /* the device sums row chunks in parallel (mg__cuda_colsum), another order: within
               the bound of any fp32 summation order of the N + 1 terms (Higham, 4.3:
               |error| ≤ γ_N·Σ|terms|, γ_N ≈ N·2⁻²⁴) of the float64 sums */
            for (j = 0; j < Out; j++) {
                double sum = b0[j], mag = fabs((double)b0[j]);
                for (r = 0; r < N; r++) {
                    sum += dy[(int64_t)r * Out + j];
                    mag += fabs((double)dy[(int64_t)r * Out + j]);
                }
                same &= fabs(got_b[j] - sum) <= N * ldexp(1.0, -24) * mag;
                if (fabs(got_b[j] - sum) / mag > worst) worst = fabs(got_b[j] - sum) / mag;
            }
            snprintf(label, sizeof label, "linear backward weight N %d In %d Out %d, %d thread(s): "
                     "dbias = the float64 column sums within N·2^-24·Σ|terms|", N, In, Out,
                     ctx->n_threads);
        }
        mg_test_report(same, label, "worst |error| %.3g·Σ|terms|", worst);
        free(x); free(dy); free(w0); free(b0); free(want_w); free(want_b); free(got_b);
        mg_arena_release(ctx, mark);
    }
    mg_ctx_free(&one);
}

/* x rounded to the values bf16 holds. */
static void bf16_values(float *x, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) x[i] = mg_bf16_to_f32(mg_f32_to_bf16(x[i]));
}
/* mg_linear_forward with a bias: the CPU's GEMM adds the bias to its first k-slice in place of
   β·C; on every backend the result must be the bits of out = bias followed by a β = 1 GEMM
   (what cuBLAS and OpenBLAS compute), and within the float64 bound. One k-slice and two
   (k = 500), a C of one short row panel (Out = 40), fp32 and bf16.                          */
static void test_linear_bias_forward(mg_ctx *ctx) {
    const int shapes[2][3] = {{1100, 130, 300}, {777, 500, 40}};   /* N, In, Out */
    int sh, d;
    for (sh = 0; sh < 2; sh++)
        for (d = 0; d < 2; d++) {
            const int N = shapes[sh][0], In = shapes[sh][1], Out = shapes[sh][2];
            const mg_dtype dt = d ? MG_BF16 : MG_F32;
            size_t mark = mg_arena_mark(ctx);
            float *x = ops_randn_array((int64_t)N * In, 1), *w = ops_randn_array((int64_t)Out * In, 1);
            float *b = ops_randn_array(Out, 1), *rows = (float *)malloc(sizeof(float) * (size_t)N * Out);
            float *want = (float *)malloc(sizeof(float) * (size_t)N * Out), *got, *got2;
            mg_tensor xt, wt, bt, out, out2;
            char label[160];
            int64_t i;
            if (d) {   /* the values bf16 holds, so the oracle sees the same inputs */
                bf16_values(x, (int64_t)N * In);
                bf16_values(w, (int64_t)Out * In);
                bf16_values(b, Out);
            }
            for (i = 0; i < (int64_t)N * Out; i++) rows[i] = want[i] = b[i % Out];
            xt = ops_dev(ctx, dt, x, N, In);
            wt = ops_dev(ctx, dt, w, Out, In);
            bt = ops_dev(ctx, dt, b, 1, Out);
            out = ops_dev(ctx, dt, NULL, N, Out);
            out2 = ops_dev(ctx, dt, rows, N, Out);
            mg_linear_forward(ctx, &out, &xt, &wt, &bt);
            mg_gemm(ctx, 1, 0, Out, N, In, 1.0f, wt.data, dt, In, xt.data, dt, In, 1.0f, out2.data,
                    dt, Out);
            /* yᵀ(Out×N) = W·xᵀ + b in column-major terms */
            gemm_ref(1, 0, Out, N, In, 1.0, w, In, x, In, 1.0, want, Out);
            snprintf(label, sizeof label, "linear forward N %d In %d Out %d %s: y = x·Wᵀ + b vs float64",
                     N, In, Out, d ? "bf16" : "fp32");
            ops_close(ctx, label, &out, want, d ? 8e-3 : 1e-6 * sqrt((double)In), d ? 8e-3 : 1e-6);
            got = ops_host(ctx, &out);
            got2 = ops_host(ctx, &out2);
            snprintf(label, sizeof label, "linear forward N %d In %d Out %d %s: the bits of out = bias, "
                     "then a β = 1 GEMM", N, In, Out, d ? "bf16" : "fp32");
            CHECK(memcmp(got, got2, sizeof(float) * (size_t)N * Out) == 0, label);
            free(x); free(w); free(b); free(rows); free(want); free(got); free(got2);
            mg_arena_release(ctx, mark);
        }
}

/* mg_linear_forward_residual: the bits of mg_linear_forward followed by mg_add, on the
   context's threads and on one — one k-slice and four (In = 1500), a C of one short row panel
   (Out = 40) and fewer than 16 columns of C (N = 9: the OpenBLAS path), fp32 and bf16 — and
   within the float64 bound.                                                                  */
static void test_linear_residual(mg_ctx *ctx0) {
    const int shapes[3][3] = {{1100, 130, 300}, {777, 1500, 40}, {9, 200, 70}};   /* N, In, Out */
    mg_ctx one = one_thread_ctx(ctx0);
    int sh, d;
    for (sh = 0; sh < 6; sh++)
        for (d = 0; d < 2; d++) {
            mg_ctx *ctx = sh < 3 ? ctx0 : &one;
            const int N = shapes[sh % 3][0], In = shapes[sh % 3][1], Out = shapes[sh % 3][2];
            const mg_dtype dt = d ? MG_BF16 : MG_F32;
            size_t mark = mg_arena_mark(ctx);
            float *x = ops_randn_array((int64_t)N * In, 1), *w = ops_randn_array((int64_t)Out * In, 1);
            float *b = ops_randn_array(Out, 1), *r = ops_randn_array((int64_t)N * Out, 1);
            float *want = (float *)malloc(sizeof(float) * (size_t)N * Out), *got, *got2;
            mg_tensor xt, wt, bt, rt, out, out2;
            char label[160];
            int64_t i;
            if (d) {
                bf16_values(x, (int64_t)N * In);
                bf16_values(w, (int64_t)Out * In);
                bf16_values(b, Out);
                bf16_values(r, (int64_t)N * Out);
            }
            for (i = 0; i < (int64_t)N * Out; i++) want[i] = b[i % Out] + r[i];
            xt = ops_dev(ctx, dt, x, N, In);
            wt = ops_dev(ctx, dt, w, Out, In);
            bt = ops_dev(ctx, dt, b, 1, Out);
            rt = ops_dev(ctx, dt, r, N, Out);
            out = ops_dev(ctx, dt, NULL, N, Out);
            out2 = ops_dev(ctx, dt, NULL, N, Out);
            mg_linear_forward_residual(ctx, &out, &xt, &wt, &bt, &rt);
            mg_linear_forward(ctx, &out2, &xt, &wt, &bt);
            mg_add(ctx, &out2, &out2, &rt);
            gemm_ref(1, 0, Out, N, In, 1.0, w, In, x, In, 1.0, want, Out);
            snprintf(label, sizeof label, "linear forward + residual N %d In %d Out %d %s, %d thread(s): "
                     "vs float64", N, In, Out, d ? "bf16" : "fp32", ctx->n_threads);
            /* bf16: rounded twice (the linear output, then the sum), each by up to 2^-9 of a
               value that can be several times the sum where the residual cancels it */
            ops_close(ctx, label, &out, want, d ? 2e-2 : 1e-6 * sqrt((double)In), d ? 8e-3 : 1e-6);
            got = ops_host(ctx, &out);
            got2 = ops_host(ctx, &out2);
            snprintf(label, sizeof label, "linear forward + residual N %d In %d Out %d %s, %d thread(s): "
                     "the bits of mg_linear_forward then mg_add", N, In, Out, d ? "bf16" : "fp32",
                     ctx->n_threads);
            CHECK(memcmp(got, got2, sizeof(float) * (size_t)N * Out) == 0, label);
            free(x); free(w); free(b); free(r); free(want); free(got); free(got2);
            mg_arena_release(ctx, mark);
        }
    mg_ctx_free(&one);
}

/* --- elementwise, casts, sumsq, arena ------------------------------------------------------ */
static void test_elementwise(mg_ctx *ctx) {
    size_t mark = mg_arena_mark(ctx);
    enum { n = 5000 };
    float *a = ops_randn_array(n, 2), *b = ops_randn_array(n, 2), *want = (float *)malloc(n * 4), *h;
    mg_tensor ta = ops_dev(ctx, MG_F32, a, 1, n), tb = ops_dev(ctx, MG_F32, b, 1, n);
    mg_tensor o = ops_dev(ctx, MG_F32, NULL, 1, n), h16;
    int i, dt, ok;
    double ss = 0;
    int nonfinite = -1;
    mg_add(ctx, &o, &ta, &tb);
    for (i = 0; i < n; i++) want[i] = a[i] + b[i];
    ops_close(ctx, "add", &o, want, 1e-7, 1e-6);
    mg_axpy(ctx, &o, -0.5f, &ta);
    for (i = 0; i < n; i++) want[i] = want[i] + -0.5f * a[i];
    ops_close(ctx, "axpy", &o, want, 1e-7, 1e-6);
    mg_scale(ctx, &o, 3.0f);
    for (i = 0; i < n; i++) want[i] *= 3.0f;
    ops_close(ctx, "scale", &o, want, 1e-7, 1e-6);
    mg_fill(ctx, &o, 0.25f);
    for (i = 0; i < n; i++) want[i] = 0.25f;
    ops_close(ctx, "fill", &o, want, 0, 1e-6);
    /* casts to and from 16-bit round like the scalar conversions */
    for (dt = 1; dt <= 2; dt++) {
        char label[64];
        h16 = ops_dev(ctx, (mg_dtype)dt, NULL, 1, n);
        mg_cast(ctx, &h16, &ta);
        mg_cast(ctx, &o, &h16);
        h = ops_host(ctx, &o);
        ok = 1;
        for (i = 0; i < n; i++) {
            if (h[i] != round_to(dt, a[i])) ok = 0;
        }
        snprintf(label, sizeof label, "cast fp32 -> %s -> fp32 rounds to nearest even",
                 mg_dtype_name((mg_dtype)dt));
        CHECK(ok, label);
        free(h);
        /* 16-bit add: computed in fp32, rounded once */
        mg_add(ctx, &h16, &h16, &h16);
        h = ops_host(ctx, &h16);
        ok = 1;
        for (i = 0; i < n; i++) {
            if (h[i] != 2 * round_to(dt, a[i])) ok = 0;
        }
        snprintf(label, sizeof label, "add in %s", mg_dtype_name((mg_dtype)dt));
        CHECK(ok, label);
        free(h);
    }
    /* sumsq: double accumulation, nonfinite flag */
    for (i = 0; i < n; i++) ss += (double)a[i] * a[i];
    {
        double got = mg_sumsq(ctx, (const float *)ta.data, n, &nonfinite);
        mg_test_report(fabs(got - ss) <= 1e-12 * ss && nonfinite == 0, "sumsq", "%.17g vs %.17g", got, ss);
        a[1234] = INFINITY;
        mg_copy_to_device(ctx, ta.data, a, n * 4);
        mg_sumsq(ctx, (const float *)ta.data, n, &nonfinite);
        CHECK(nonfinite == 1, "sumsq flags inf");
        a[1234] = nanf("");
        mg_copy_to_device(ctx, ta.data, a, n * 4);
        mg_sumsq(ctx, (const float *)ta.data, n, &nonfinite);
        CHECK(nonfinite == 1, "sumsq flags nan");
        a[1234] = 3e38f; /* finite: its square overflows fp32 but not the double sum */
        mg_copy_to_device(ctx, ta.data, a, n * 4);
        got = mg_sumsq(ctx, (const float *)ta.data, n, &nonfinite);
        CHECK(nonfinite == 0 && got > 8.9e76, "sumsq of a huge finite value is finite");
    }
    /* device-to-device copies: equal or disjoint ranges (cudaMemcpy's rule, on both backends) */
    mg_copy(ctx, o.data, ta.data, n * 4);
    mg_copy(ctx, o.data, o.data, n * 4);
    ops_close(ctx, "copy", &o, a, 0, 1e-6);
    OPS_EXPECT_FATAL("copy rejects overlapping ranges", "ranges overlap",
                     mg_copy(ctx, (float *)o.data + 1, o.data, 16));
    free(a); free(b); free(want);
    mg_arena_release(ctx, mark);
}

/* mg_memset_zero: from 1 MiB the CPU splits the range over the context's threads at cache
   lines. Ranges just under and over that size, at odd offsets and odd lengths, with 1, 2 and
   3 threads: every byte inside is zero, every byte around it untouched.                    */
static void test_memset_zero(mg_ctx *ctx0) {
    const size_t lens[3] = {((size_t)1 << 20) - 1, ((size_t)1 << 20) + 13, (size_t)3 << 20 | 5};
    const size_t total = ((size_t)3 << 20) + 256;
    unsigned char *host = (unsigned char *)malloc(total);
    int nt, k;
    for (nt = 1; nt <= 3; nt++) {
        mg_ctx c = threads_ctx(ctx0, nt);
        unsigned char *dev = (unsigned char *)mg_alloc(&c, total);
        for (k = 0; k < 3; k++) {
            size_t off = 7 + 64 * (size_t)k, i, bad = 0;
            memset(host, 0xA5, total);
            mg_copy_to_device(&c, dev, host, total);
            mg_memset_zero(&c, dev + off, lens[k]);
            mg_copy_to_host(&c, host, dev, total);
            for (i = 0; i < total; i++)
                bad += host[i] != (i >= off && i < off + lens[k] ? 0 : 0xA5);
            mg_test_report(bad == 0, "mg_memset_zero: zero inside, untouched around",
                           "%zu bytes at offset %zu, %d thread(s): %zu bytes wrong", lens[k], off,
                           nt, bad);
        }
        mg_ctx_free(&c);
    }
    free(host);
}

static void test_arena(void) {
    mg_ctx ctx = ops_ctx_make(1 << 20);
    size_t m0, m1;
    void *p1, *p2;
    p1 = mg_alloc(&ctx, 100);
    m0 = mg_arena_mark(&ctx);
    p2 = mg_alloc(&ctx, 1000);
    CHECK(((uintptr_t)p1 & 255) == 0 && ((uintptr_t)p2 & 255) == 0 && (char *)p2 - (char *)p1 == 256,
          "arena: 256-byte aligned bump allocation");
    m1 = mg_arena_mark(&ctx);
    {   /* mg_ctx_memory: the workspace (CUDA) on top of the arena; live blocks counted */
        mg_memory_stats st = mg_ctx_memory(&ctx);
        size_t ws = ctx.blas_workspace_size;
        int64_t extra = ctx.blas_workspace != NULL;
        CHECK(st.allocations == 2 + extra && st.allocated == 1280 + ws &&
              st.max_allocated == 1280 + ws && st.reserved == ctx.arena_size + ws &&
              (ctx.device == MG_DEVICE_CPU) == (ws == 0),
              "arena: mg_ctx_memory counts 2 live blocks, the bytes in use, the peak, the size "
              "(+ the cuBLAS workspace on CUDA)");
        mg_arena_release(&ctx, m0);
        st = mg_ctx_memory(&ctx);
        CHECK(st.allocations == 1 + extra && st.allocated == 256 + ws &&
              st.max_allocated == 1280 + ws, "arena: a release drops the blocks above the mark "
              "from mg_ctx_memory's count");
    }
    CHECK(ctx.arena_used == 256 && m1 == 256 + 1024 && ctx.arena_peak == 1280,
          "arena: release rewinds, peak is kept");
    mg_arena_reset_peak(&ctx);
    CHECK(ctx.arena_peak == 256, "arena: reset_peak sets the peak to the current use");
    /* op scratch is returned: a 16-bit GEMM widens into scratch and releases it */
    {
        mg_tensor a = mg_tensor_2d(&ctx, MG_BF16, 8, 8), c = mg_tensor_2d(&ctx, MG_F32, 8, 8);
        size_t used;
        mg_memset_zero(&ctx, a.data, mg_nbytes(&a));
        used = ctx.arena_used;
        mg_gemm(&ctx, 0, 0, 8, 8, 8, 1, a.data, MG_BF16, 8, a.data, MG_BF16, 8, 0, c.data, MG_F32, 8);
        CHECK(ctx.arena_used == used && (ctx.arena_peak > used || ctx.device == MG_DEVICE_CUDA),
              "arena: op scratch released, counted in the peak");
    }
    OPS_EXPECT_FATAL("arena exhausted is one clear error", "arena exhausted",
                     mg_alloc(&ctx, 2 << 20));
    mg_ctx_free(&ctx);
}

int main(void) {
    mg_ctx ctx = ops_ctx_make((size_t)32 << 20);
    test_conversion(1);
    test_conversion(0);
    test_rng();
    test_dropout(&ctx);
    test_attention_dropout(&ctx);
    test_gemm(&ctx);
    test_gemm_paths(&ctx);
    test_gemm_blocks(&ctx);
    test_linear_bgrad(&ctx);
    test_linear_bias_forward(&ctx);
    test_linear_residual(&ctx);
    test_elementwise(&ctx);
    test_memset_zero(&ctx);
    test_arena();
    mg_ctx_free(&ctx);
    return mg_test_summary();
}
