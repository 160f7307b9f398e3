// mg-test: ranks=1 timeout=120
/* tests/test_data.c — mg_data.h against independent references:
     - numpy's RandomState (raw MT19937 words, shuffles) and a transcription of Megatron's
       GPTDataset index building (tests/oracle/data.py -> tests/data/data_megatron.json):
       document, sample and shuffle indices equal, sample tokens equal;
     - indexed datasets written by a Python copy of Megatron's writer: read back exactly, and
       our writer reproduces their bytes;
     - a safetensors file written by Python (struct + json, torch conversions);
     - round trips (indexed, llm.c tokens, llm.c checkpoint, safetensors incl. writes from
       several processes at once), sequential order against its formula;
     - every class of bad file, each with its one-line message (printed in the ok line).
   Fixtures are read from tests/data (run from the repository root, as tests/run.sh does). */
#include "mg_data.h"
#include "mg_test.h"

#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[128];
static char err[MG_ERRLEN];

/* A path inside the test's temporary directory (4 rotating buffers).                       */
static const char *tp(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}
static void put_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    if (n && fwrite(data, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}
/* A failure must come back as -1 with a one-line message containing `needle`.              */
static void expect_fail(const char *name, int rc, const char *needle) {
    int ok = rc != 0 && strstr(err, needle) != NULL && strchr(err, '\n') == NULL;
    mg_test_report(ok, name, ok ? "%s" : "got \"%s\"", err);
    err[0] = 0;
}
/* Number of names in tmpdir containing `part` (leftover temporaries).                     */
static int count_names(const char *part) {
    int n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}
static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {  /* xorshift64 */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}
static float f16_to_f32(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (float)(sign ? -v : v);
}

/* ---- JSON fixture helpers ---------------------------------------------------------------- */
static mg_json load_json(const char *path, char **text) {
    long n = 0;
    mg_json js;
    *text = (char *)mg_test_read_file(path, &n);
    if (!*text || mg_json_parse(&js, *text, (size_t)n, err, sizeof err) != 0) {
        printf("not ok - fixture %s: %s (run: /usr/bin/python3 tests/oracle/data.py tests/data)\n",
               path, *text ? err : "missing");
        exit(1);
    }
    return js;
}
static int64_t jget(const mg_json *js, int64_t obj, const char *key) {
    int64_t t = mg_json_get(js, obj, key);
    if (t < 0) { printf("not ok - fixture: missing key %s\n", key); exit(1); }
    return t;
}
static int64_t jint(const mg_json *js, int64_t tok) {
    int64_t v = 0;
    if (mg_json_int(js, tok, &v) != 0) { printf("not ok - fixture: not an integer\n"); exit(1); }
    return v;
}
/* An array of integers as a malloc'd int64 array.                                           */
static int64_t *jints(const mg_json *js, int64_t arr, int64_t *n) {
    *n = js->toks[arr].size;
    int64_t *out = (int64_t *)malloc((size_t)(*n ? *n : 1) * 8);
    for (int64_t i = 0, t = arr + 1; i < *n; i++, t = js->toks[t].next) out[i] = jint(js, t);
    return out;
}
/* Token index of element i of an array (elements may be arrays themselves).                 */
static int64_t jat(const mg_json *js, int64_t arr, int64_t i) {
    int64_t t = arr + 1;
    while (i-- > 0) t = js->toks[t].next;
    return t;
}

/* ---- 7. JSON --------------------------------------------------------------------------- */
static void test_json(void) {
    const char *good = " {\"a\": [1, -2, 3.5e2, true, false, null, {}, []],\n"
                       "  \"b\": {\"c\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\\\\\\/\"}, \"\": 0 } ";
    mg_json js;
    int rc = mg_json_parse(&js, good, strlen(good), err, sizeof err);
    CHECK(rc == 0, "json: valid document parses");
    if (rc != 0) return;
    int64_t a = mg_json_get(&js, 0, "a"), b = mg_json_get(&js, 0, "b"), e = mg_json_get(&js, 0, "");
    int64_t v = 0, w = 0;
    CHECK(js.toks[0].type == MG_JSON_OBJECT && js.toks[0].size == 3 && js.toks[0].next == js.n,
          "json: root object with 3 members spanning all tokens");
    CHECK(a > 0 && js.toks[a].type == MG_JSON_ARRAY && js.toks[a].size == 8, "json: array size");
    CHECK(mg_json_int(&js, a + 1, &v) == 0 && v == 1 && mg_json_int(&js, a + 2, &w) == 0 && w == -2,
          "json: integers");
    CHECK(mg_json_int(&js, a + 3, &v) != 0, "json: 3.5e2 is not an integer");
    CHECK(js.toks[a + 4].type == MG_JSON_TRUE && js.toks[a + 5].type == MG_JSON_FALSE &&
          js.toks[a + 6].type == MG_JSON_NULL, "json: literals");
    char *s = mg_json_strdup(&js, mg_json_get(&js, b, "c"));
    CHECK(s && strcmp(s, "x\xc3\xa9\xf0\x9f\x98\x80\n\"\\/") == 0,
          "json: escapes and surrogate pair decode to UTF-8");
    free(s);
    CHECK(e > 0 && mg_json_int(&js, e, &v) == 0 && v == 0 && mg_json_get(&js, 0, "zz") < 0,
          "json: empty key found, missing key not");
    mg_json_free(&js);
    const char *ints[2] = {"9223372036854775808", "-9223372036854775808"};
    for (int i = 0; i < 2; i++) {
        rc = mg_json_parse(&js, ints[i], strlen(ints[i]), err, sizeof err);
        int ok = rc == 0 && (mg_json_int(&js, 0, &v) == 0) == (i == 1) && (i == 0 || v == INT64_MIN);
        CHECK(ok, i ? "json: INT64_MIN is an integer" : "json: 2^63 overflows int64");
        if (rc == 0) mg_json_free(&js);
    }
    static const char *const bad[] = {
        "{\"a\":1,}", "{\"a\" 1}", "{\"a\":01}", "{\"a\":\"\x01\"}", "{\"a\":\"\\q\"}",
        "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}", "[1 2]", "{\"a\":1} x", "{\"a\":tru}",
        "\"unterminated", "{\"a\":-}", "{\"a\":1.}", "{\"a\":1e}", "\"\xff\"", "\"\xc0\xaf\"",
        "", "   ", "{\"a\":\"\\u12G4\"}", "{1:2}", "[,]", "nul", "+1", "[1]]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "json: malformed #%zu rejected", i);
        expect_fail(name, mg_json_parse(&js, bad[i], strlen(bad[i]), err, sizeof err), "malformed JSON");
    }
    char deep[300];
    memset(deep, '[', 200);
    deep[200] = 0;
    expect_fail("json: nesting 200 deep rejected", mg_json_parse(&js, deep, 200, err, sizeof err),
                "nesting deeper than 64");
}

/* ---- MT19937 and shuffles against numpy --------------------------------------------------- */
static void test_mt19937(void) {
    char *text;
    mg_json js = load_json("tests/data/data_mt19937.json", &text);
    int64_t raw = jget(&js, 0, "raw"), sh = jget(&js, 0, "shuffles");
    int ok = js.toks[raw].size == 4;
    for (int64_t c = 0; c < js.toks[raw].size; c++) {
        int64_t o = jat(&js, raw, c), n1, n2, n3;
        int64_t *first = jints(&js, jget(&js, o, "first"), &n1);
        int64_t *at620 = jints(&js, jget(&js, o, "at_620"), &n2);
        int64_t *at1290 = jints(&js, jget(&js, o, "at_1290"), &n3);
        mg_mt19937 mt;
        mg_mt19937_seed(&mt, (uint32_t)jint(&js, jget(&js, o, "seed")));
        for (int i = 0; i < 1300; i++) {
            uint32_t x = mg_mt19937_next32(&mt);
            if (i < 8) ok &= x == (uint32_t)first[i];
            if (i >= 620 && i < 630) ok &= x == (uint32_t)at620[i - 620];
            if (i >= 1290) ok &= x == (uint32_t)at1290[i - 1290];
        }
        free(first); free(at620); free(at1290);
    }
    CHECK(ok, "mt19937: raw words equal numpy's (4 seeds, 1300 words, 2 refills)");
    ok = js.toks[sh].size == 5;
    for (int64_t c = 0; c < js.toks[sh].size; c++) {
        int64_t o = jat(&js, sh, c), nh, n = jint(&js, jget(&js, o, "n")), sum = 0;
        int64_t *head = jints(&js, jget(&js, o, "head"), &nh);
        int32_t *x = (int32_t *)malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) x[i] = (int32_t)i;
        mg_mt19937 mt;
        mg_mt19937_seed(&mt, (uint32_t)jint(&js, jget(&js, o, "seed")));
        mg_mt19937_shuffle_i32(&mt, x, n);
        for (int64_t i = 0; i < n; i++) sum += (int64_t)x[i] * i;
        for (int64_t i = 0; i < nh; i++) ok &= x[i] == head[i];
        ok &= sum == jint(&js, jget(&js, o, "checksum"));
        free(head); free(x);
    }
    CHECK(ok, "mt19937: RandomState.shuffle equal numpy's (n = 1 .. 70000)");
    mg_json_free(&js);
    free(text);
}

/* ---- Megatron datasets written by Python, and the sampler against the oracle ----------- */
static void test_megatron(void) {
    char *text;
    mg_json js = load_json("tests/data/data_megatron.json", &text);
    int64_t dss = jget(&js, 0, "datasets"), cases = jget(&js, 0, "cases");
    static const char *const names[2] = {"u16", "i32"};
    for (int k = 0; k < 2; k++) {
        char prefix[128], label[512];
        int64_t o = jget(&js, dss, names[k]), nl, nd;
        int64_t *lengths = jints(&js, jget(&js, o, "lengths"), &nl);
        int64_t *docs = jints(&js, jget(&js, o, "doc_indices"), &nd);
        int64_t seqs = jget(&js, o, "sequences");
        snprintf(prefix, sizeof prefix, "tests/data/data_megatron_%s", names[k]);
        static const char *const suffix[3] = {"", ".bin", ".idx"};
        for (int f = 0; f < 3; f++) {
            char path[160];
            mg_dataset ds;
            snprintf(path, sizeof path, "%s%s", prefix, suffix[f]);
            int rc = mg_dataset_open(path, &ds, err, sizeof err);
            int ok = rc == 0 && ds.format == MG_DATA_INDEXED && ds.n_sequences == nl &&
                     ds.n_documents == nd - 1;
            for (int64_t d = 0; ok && d < nd; d++) ok &= mg_dataset_doc_bound(&ds, d) == docs[d];
            int64_t pos = 0, lo = INT64_MAX, hi = INT64_MIN;
            for (int64_t i = 0; ok && i < nl; i++) {
                int64_t n, *tok = jints(&js, jat(&js, seqs, i), &n);
                ok &= mg_dataset_seq_len(&ds, i) == lengths[i] && n == lengths[i] &&
                      mg_dataset_seq_start(&ds, i) == pos;
                for (int64_t j = 0; ok && j < n; j++) {
                    ok &= mg_dataset_token(&ds, pos + j) == tok[j];
                    lo = tok[j] < lo ? tok[j] : lo;
                    hi = tok[j] > hi ? tok[j] : hi;
                }
                pos += n;
                free(tok);
            }
            int64_t rlo, rhi;
            if (ok) mg_dataset_token_range(&ds, &rlo, &rhi);
            ok = ok && pos == ds.n_tokens && rlo == lo && rhi == hi;
            snprintf(label, sizeof label, "megatron %s: Python-written dataset read via '%s'",
                     names[k], path + 11);
            mg_test_report(ok, label, rc ? "%s" : "", err);
            if (rc == 0) mg_dataset_close(&ds);
        }
        /* Our writer reproduces the Python (Megatron) writer's bytes exactly.               */
        mg_idx_writer w;
        int rc = mg_idx_writer_begin(&w, tp("rewrite"), k ? MG_IDX_I32 : MG_IDX_U16, err, sizeof err);
        for (int64_t d = 0; rc == 0 && d + 1 < nd; d++) {
            for (int64_t i = docs[d]; rc == 0 && i < docs[d + 1]; i++) {
                int64_t n, *tok = jints(&js, jat(&js, seqs, i), &n);
                int32_t *t32 = (int32_t *)malloc((size_t)(n ? n : 1) * 4);
                for (int64_t j = 0; j < n; j++) t32[j] = (int32_t)tok[j];
                rc = mg_idx_writer_add(&w, t32, n, err, sizeof err);
                free(tok); free(t32);
            }
            mg_idx_writer_end_document(&w);
        }
        if (rc == 0) rc = mg_idx_writer_finish(&w, err, sizeof err);
        int same = rc == 0;
        for (int f = 1; same && f < 3; f++) {
            char want[160], got[300];
            long n1 = 0, n2 = 0;
            snprintf(want, sizeof want, "%s%s", prefix, suffix[f]);
            snprintf(got, sizeof got, "%s%s", tp("rewrite"), suffix[f]);
            char *a = (char *)mg_test_read_file(want, &n1), *b = (char *)mg_test_read_file(got, &n2);
            same = a && b && n1 == n2 && memcmp(a, b, (size_t)n1) == 0;
            free(a); free(b);
        }
        snprintf(label, sizeof label, "megatron %s: our writer reproduces Megatron's bytes", names[k]);
        mg_test_report(same, label, rc ? "%s" : "", err);
        free(lengths); free(docs);
    }

    for (int64_t c = 0; c < js.toks[cases].size; c++) {
        int64_t o = jat(&js, cases, c), n_di, n_si, n_sh;
        char prefix[128], split[64], label[512];
        char *dsname = mg_json_strdup(&js, jget(&js, o, "dataset"));
        char *sp = mg_json_strdup(&js, jget(&js, o, "split"));
        snprintf(prefix, sizeof prefix, "tests/data/data_megatron_%s", dsname);
        snprintf(split, sizeof split, "%s", sp);
        free(dsname); free(sp);
        int64_t *di = jints(&js, jget(&js, o, "doc_index"), &n_di);
        int64_t *si = jints(&js, jget(&js, o, "sample_index"), &n_si);
        int64_t *sh = jints(&js, jget(&js, o, "shuffle_index"), &n_sh);
        /* Each case twice: the default (sample and shuffle index 32-bit, as Megatron stores
           them below 2^31 document entries and 2^32 samples: 12 bytes a sample besides the
           document index) and the 64-bit storage that only data past those sizes would get,
           forced by index_width = 8 (24 bytes a sample).                                  */
        for (int wide = 0; wide < 2; wide++) {
            mg_sampler_desc desc;
            memset(&desc, 0, sizeof desc);
            desc.split = split;
            desc.part = (mg_split_part)jint(&js, jget(&js, o, "part"));
            desc.seq_len = (int)jint(&js, jget(&js, o, "seq_len"));
            desc.n_samples = jint(&js, jget(&js, o, "n_samples"));
            desc.seed = (uint32_t)jint(&js, jget(&js, o, "seed"));
            desc.order = MG_ORDER_SHUFFLED;
            desc.index_width = wide ? 8 : 0;
            const char *width = wide ? " (64-bit index)" : "";
            mg_dataset ds;
            mg_sampler smp;
            int rc = mg_dataset_open(prefix, &ds, err, sizeof err);
            if (rc == 0) rc = mg_sampler_init(&smp, &ds, &desc, err, sizeof err);
            int ok = rc == 0 && smp.num_epochs == jint(&js, jget(&js, o, "num_epochs")) &&
                     smp.separate_final_epoch == jint(&js, jget(&js, o, "separate_final_epoch")) &&
                     smp.seq_begin == jint(&js, jget(&js, o, "begin")) &&
                     smp.seq_end == jint(&js, jget(&js, o, "end")) && smp.n_doc_index == n_di &&
                     smp.n_samples == n_sh && 2 * (smp.n_samples + 1) == n_si;
            for (int64_t i = 0; ok && i < n_di; i++) ok &= smp.doc_index[i] == di[i];
            for (int64_t i = 0; ok && i < n_si; i++) ok &= mg_ix_get(smp.sample_index, i) == si[i];
            for (int64_t i = 0; ok && i < n_sh; i++) ok &= mg_ix_get(smp.shuffle_index, i) == sh[i];
            snprintf(label, sizeof label, "sampler vs Megatron: %s split '%s' part %d s=%d n=%lld "
                     "seed %u: indices equal%s", prefix + 11, split, (int)desc.part, desc.seq_len,
                     (long long)desc.n_samples, desc.seed, width);
            if (rc != 0)
                mg_test_report(0, label, "%s", err);
            else
                mg_test_report(ok, label, "epochs %d, separate final epoch %d, %lld samples",
                               smp.num_epochs, smp.separate_final_epoch, (long long)smp.n_samples);
            if (rc == 0) {
                int64_t w = wide ? 8 : 4, n = smp.n_samples;
                int64_t want = 4 * n_di + 2 * w * (n + 1) + w * n;
                int64_t got = mg_sampler_index_bytes(&smp);
                snprintf(label, sizeof label, "sampler: %s case %lld: index entries %lld-bit, "
                         "%lld bytes a sample + 4 a document entry", prefix + 11, (long long)c,
                         (long long)(8 * w), (long long)(3 * w));
                mg_test_report(smp.sample_index.width == w && smp.shuffle_index.width == w &&
                               got == want, label, "widths %d %d, %lld bytes, want %lld",
                               smp.sample_index.width, smp.shuffle_index.width, (long long)got,
                               (long long)want);
            }
            int64_t samples = jget(&js, o, "samples");
            int32_t tokens[64];
            int tok_ok = rc == 0;
            for (int64_t i = 0; tok_ok && i < js.toks[samples].size; i++) {
                int64_t n, *want = jints(&js, jat(&js, samples, i), &n);
                tok_ok = n == desc.seq_len + 1 &&
                         mg_sampler_get(&smp, i, tokens, err, sizeof err) == 0;
                for (int64_t j = 0; tok_ok && j < n; j++) tok_ok = tokens[j] == want[j];
                free(want);
            }
            snprintf(label, sizeof label, "sampler vs Megatron: %s case %lld: sample tokens "
                     "equal%s", prefix + 11, (long long)c, width);
            CHECK(tok_ok, label);
            if (rc == 0) mg_sampler_free(&smp);
            mg_dataset_close(&ds);
        }
        free(di); free(si); free(sh);
    }

    /* Sequential order: sample i = stream[(i·s + k) mod T], stream = the part's sequences
       concatenated (built here from the fixture's token lists).                           */
    int64_t o = jget(&js, dss, "u16"), seqs = jget(&js, o, "sequences");
    for (int part = 0; part < 2; part++) {
        mg_dataset ds;
        mg_sampler smp;
        mg_sampler_desc desc;
        memset(&desc, 0, sizeof desc);
        desc.split = "80,20,0";
        desc.part = (mg_split_part)part;
        desc.seq_len = 10;
        desc.n_samples = 500;  /* far more than one pass: wraps around */
        desc.order = MG_ORDER_SEQUENTIAL;
        int rc = mg_dataset_open("tests/data/data_megatron_u16", &ds, err, sizeof err);
        if (rc == 0) rc = mg_sampler_init(&smp, &ds, &desc, err, sizeof err);
        int64_t b = 0, e = 0, T = 0;
        mg_split_range(desc.split, desc.part, js.toks[seqs].size, &b, &e, err, sizeof err);
        int64_t *stream = (int64_t *)malloc(8 * 4096);
        for (int64_t i = b; i < e; i++) {
            int64_t n, *tok = jints(&js, jat(&js, seqs, i), &n);
            for (int64_t j = 0; j < n; j++) stream[T++] = tok[j];
            free(tok);
        }
        int ok = rc == 0 && smp.part_tokens == T && smp.n_samples == 500;
        int32_t tokens[11];
        for (int64_t i = 0; ok && i < 500; i++) {
            ok = mg_sampler_get(&smp, i, tokens, err, sizeof err) == 0;
            for (int k = 0; ok && k <= 10; k++) ok = tokens[k] == stream[(i * 10 + k) % T];
        }
        mg_test_report(ok, part ? "sequential: valid part follows (i*s + k) mod T"
                                : "sequential: train part follows (i*s + k) mod T, wrapping",
                       "%lld tokens, 500 samples", (long long)T);
        if (ok) {
            expect_fail("sampler: sample index past the end", mg_sampler_get(&smp, 500, tokens, err,
                        sizeof err), "only 500 available");
            expect_fail("sampler: negative sample index", mg_sampler_get(&smp, -1, tokens, err,
                        sizeof err), "requested");
        }
        free(stream);
        if (rc == 0) mg_sampler_free(&smp);
        mg_dataset_close(&ds);
    }
    mg_json_free(&js);
    free(text);
}

/* ---- numpy's default_rng and Megatron's mock data (data_mock.json, tests/oracle/data.py) -- */
static uint64_t hex64(const char *s) { return strtoull(s, NULL, 16); }
/* checksum as the oracle's: sum of (i mod 1000 + 1) * a[i].                                  */
static int64_t ix_checksum(mg_ix a, int64_t n) {
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (i % 1000 + 1) * mg_ix_get(a, i);
    return sum;
}
static void test_mock(void) {
    char *text, label[256];
    mg_json js = load_json("tests/data/data_mock.json", &text);
    int64_t pcg = jget(&js, 0, "pcg64"), draws = jget(&js, 0, "integers");
    int64_t mock = jget(&js, 0, "mock"), cases = jget(&js, 0, "cases");
    int ok = js.toks[pcg].size == 5;
    for (int64_t c = 0; c < js.toks[pcg].size; c++) {
        int64_t o = jat(&js, pcg, c), raw = jget(&js, o, "raw");
        char *seed = mg_json_strdup(&js, jget(&js, o, "seed"));
        char *state = mg_json_strdup(&js, jget(&js, o, "state"));
        char *inc = mg_json_strdup(&js, jget(&js, o, "inc"));
        char want_state[40], want_inc[40];
        mg_pcg64 g;
        mg_pcg64_seed(&g, strtoull(seed, NULL, 10));
        snprintf(want_state, sizeof want_state, "%016llx%016llx", (unsigned long long)g.state_hi,
                 (unsigned long long)g.state_lo);
        snprintf(want_inc, sizeof want_inc, "%016llx%016llx", (unsigned long long)g.inc_hi,
                 (unsigned long long)g.inc_lo);
        ok &= !strcmp(state, want_state) && !strcmp(inc, want_inc);
        for (int64_t i = 0; i < js.toks[raw].size; i++) {
            char *h = mg_json_strdup(&js, jat(&js, raw, i));
            ok &= mg_pcg64_next64(&g) == hex64(h);
            free(h);
        }
        free(seed); free(state); free(inc);
    }
    CHECK(ok, "pcg64: SeedSequence seeding and raw outputs equal numpy's (seeds 0 … 2^64-1)");
    ok = js.toks[draws].size == 5;
    for (int64_t c = 0; c < js.toks[draws].size; c++) {
        int64_t o = jat(&js, draws, c), nh, sum = 0;
        int64_t low = jint(&js, jget(&js, o, "low")), high = jint(&js, jget(&js, o, "high"));
        int64_t *head = jints(&js, jget(&js, o, "head"), &nh);
        mg_pcg64 g;
        mg_pcg64_seed(&g, (uint64_t)jint(&js, jget(&js, o, "seed")));
        for (int64_t i = 0; i < 10000; i++) {
            int64_t x = low + (int64_t)mg_pcg64_bounded32(&g, (uint32_t)(high - 1 - low));
            if (i < nh) ok &= x == head[i];
            sum += (i % 1000 + 1) * x;
        }
        ok &= sum == jint(&js, jget(&js, o, "checksum"));
        free(head);
    }
    CHECK(ok, "pcg64: Generator.integers(low, high, dtype=int32) draws equal numpy's");

    mg_dataset ds;
    int rc = mg_dataset_open_mock(&ds, 50257, 50256, err, sizeof err);
    int64_t nh, nt, sum = 0;
    int64_t *head = jints(&js, jget(&js, mock, "head"), &nh);
    int64_t *tail = jints(&js, jget(&js, mock, "tail"), &nt);
    ok = rc == 0 && ds.format == MG_DATA_MOCK && ds.n_sequences == MG_MOCK_SEQUENCES &&
         ds.n_documents == MG_MOCK_SEQUENCES &&
         ds.n_tokens == jint(&js, jget(&js, mock, "n_tokens"));
    for (int64_t s = 0; ok && s < ds.n_sequences; s++) {
        int64_t L = mg_dataset_seq_len(&ds, s);
        sum += (s % 1000 + 1) * L;
        if (s < nh) ok &= L == head[s];
        if (s >= ds.n_sequences - nt) ok &= L == tail[s - (ds.n_sequences - nt)];
        ok &= mg_dataset_doc_bound(&ds, s) == s;
    }
    ok = ok && sum == jint(&js, jget(&js, mock, "checksum"));
    mg_test_report(ok, "mock data: 100000 sequence lengths equal Megatron's (default_rng(0))",
                   rc ? "%s" : "", err);
    if (rc == 0) {   /* tokens by index, at sequence edges; the range from the lengths */
        int64_t lo, hi, s = 7, start = mg_dataset_seq_start(&ds, s), L = mg_dataset_seq_len(&ds, s);
        mg_dataset_token_range(&ds, &lo, &hi);
        CHECK(mg_dataset_token(&ds, start) == 1 && mg_dataset_token(&ds, start + L - 2) == L - 1 &&
              mg_dataset_token(&ds, start + L - 1) == 50256 && mg_dataset_token(&ds, start + L) == 1 &&
              lo == 1 && hi == 50256, "mock data: tokens 1 … L-1 then the eod; range 1 … eod");
        mg_dataset_close(&ds);
    }
    rc = mg_dataset_open_mock(&ds, 1001, 1000, err, sizeof err);
    if (rc == 0) {   /* sequences longer than the vocabulary wrap: 0 appears */
        int64_t lo, hi;
        mg_dataset_token_range(&ds, &lo, &hi);
        CHECK(lo == 0 && hi == 1000, "mock data, vocabulary 1001: ids wrap to 0 … 1000");
        mg_dataset_close(&ds);
    }
    expect_fail("mock data: eod outside the vocabulary",
                mg_dataset_open_mock(&ds, 100, 100, err, sizeof err), "outside the vocabulary");
    expect_fail("mock data: empty vocabulary", mg_dataset_open_mock(&ds, 0, 0, err, sizeof err),
                "a vocabulary of 0 ids");
    free(head); free(tail);

    for (int64_t c = 0; c < js.toks[cases].size; c++) {
        int64_t o = jat(&js, cases, c), nd, nsh;
        char *sp = mg_json_strdup(&js, jget(&js, o, "split"));
        int64_t *dhead = jints(&js, jget(&js, o, "doc_index_head"), &nd);
        int64_t *shead = jints(&js, jget(&js, o, "shuffle_head"), &nsh);
        mg_sampler_desc desc;
        mg_sampler smp;
        memset(&desc, 0, sizeof desc);
        desc.split = sp;
        desc.part = (mg_split_part)jint(&js, jget(&js, o, "part"));
        desc.seq_len = (int)jint(&js, jget(&js, o, "seq_len"));
        desc.n_samples = jint(&js, jget(&js, o, "n_samples"));
        desc.seed = (uint32_t)jint(&js, jget(&js, o, "seed"));
        desc.order = MG_ORDER_SHUFFLED;
        rc = mg_dataset_open_mock(&ds, jint(&js, jget(&js, o, "vocab")),
                                  jint(&js, jget(&js, o, "eod")), err, sizeof err);
        if (rc == 0) rc = mg_sampler_init(&smp, &ds, &desc, err, sizeof err);
        int64_t n_total = jint(&js, jget(&js, o, "n_total"));
        ok = rc == 0 && smp.num_epochs == jint(&js, jget(&js, o, "num_epochs")) &&
             smp.separate_final_epoch == jint(&js, jget(&js, o, "separate_final_epoch")) &&
             smp.seq_begin == jint(&js, jget(&js, o, "begin")) &&
             smp.seq_end == jint(&js, jget(&js, o, "end")) &&
             smp.n_doc_index == jint(&js, jget(&js, o, "n_doc_index")) && smp.n_samples == n_total;
        if (ok) {
            mg_ix di = {smp.doc_index, 4};
            ok = ix_checksum(di, smp.n_doc_index) == jint(&js, jget(&js, o, "doc_index")) &&
                 ix_checksum(smp.sample_index, 2 * (n_total + 1)) ==
                 jint(&js, jget(&js, o, "sample_index")) &&
                 ix_checksum(smp.shuffle_index, n_total) == jint(&js, jget(&js, o, "shuffle_index"));
            for (int64_t i = 0; i < nd; i++) ok &= smp.doc_index[i] == dhead[i];
            for (int64_t i = 0; i < nsh; i++) ok &= mg_ix_get(smp.shuffle_index, i) == shead[i];
        }
        snprintf(label, sizeof label, "mock data vs Megatron: vocab %lld split '%s' part %d s=%d "
                 "n=%lld seed %u: indices equal", (long long)jint(&js, jget(&js, o, "vocab")), sp,
                 (int)desc.part, desc.seq_len, (long long)desc.n_samples, desc.seed);
        mg_test_report(ok, label, rc ? "%s" : "", err);
        int64_t samples = jget(&js, o, "samples");
        int32_t *tokens = (int32_t *)malloc((size_t)(desc.seq_len + 1) * 4);
        int tok_ok = rc == 0;
        for (int64_t i = 0; tok_ok && i < js.toks[samples].size; i++) {
            int64_t n, *want = jints(&js, jat(&js, samples, i), &n);
            tok_ok = n == desc.seq_len + 1 && mg_sampler_get(&smp, i, tokens, err, sizeof err) == 0;
            for (int64_t j = 0; tok_ok && j < n; j++) tok_ok = tokens[j] == want[j];
            free(want);
        }
        snprintf(label, sizeof label, "mock data vs Megatron: case %lld: sample tokens equal",
                 (long long)c);
        CHECK(tok_ok, label);
        if (rc == 0) { mg_sampler_free(&smp); mg_dataset_close(&ds); }
        free(tokens); free(dhead); free(shead); free(sp);
    }
    /* sequential order reads runs across many sequences                                      */
    if (mg_dataset_open_mock(&ds, 50257, 50256, err, sizeof err) == 0) {
        mg_sampler_desc desc;
        mg_sampler smp;
        int32_t tokens[5001];
        memset(&desc, 0, sizeof desc);
        desc.seq_len = 5000;
        desc.n_samples = 10;
        desc.order = MG_ORDER_SEQUENTIAL;
        ok = mg_sampler_init(&smp, &ds, &desc, err, sizeof err) == 0;
        for (int64_t i = 0; ok && i < 10; i++) {
            ok = mg_sampler_get(&smp, i, tokens, err, sizeof err) == 0;
            for (int k = 0; ok && k <= 5000; k++)
                ok = tokens[k] == mg_dataset_token(&ds, i * 5000 + k);
        }
        CHECK(ok, "mock data: sequential samples equal the tokens by index, across sequences");
        if (ok) mg_sampler_free(&smp);
        mg_dataset_close(&ds);
    }
    mg_json_free(&js);
    free(text);
}

/* ---- sampler and split errors --------------------------------------------------------------- */
static void test_sampler_errors(void) {
    mg_dataset ds;
    mg_sampler smp;
    mg_sampler_desc d;
    double w[3];
    int64_t b, e, out[3];
    if (mg_dataset_open("tests/data/data_megatron_u16", &ds, err, sizeof err) != 0) {
        CHECK(0, "sampler errors: fixture opens");
        return;
    }
    CHECK(mg_split_parse("969, 30, 1", w, err, sizeof err) == 0 && w[0] == 969.0 / 1000 &&
          w[2] == 1.0 / 1000, "split: '969, 30, 1' normalised");
    CHECK(mg_split_parse("98,2", w, err, sizeof err) == 0 && w[2] == 0, "split: missing weight is 0");
    /* 44 sequences: round(0.98·44 = 43.12) = 43; round-half-even: 0.5·4 = 2 -> [0, 2)      */
    CHECK(mg_split_range("98,2,0", MG_SPLIT_VALID, 44, &b, &e, err, sizeof err) == 0 && b == 43 &&
          e == 44, "split: 98,2,0 of 44 sequences -> valid [43, 44)");
    CHECK(mg_split_range("1,1,2", MG_SPLIT_TRAIN, 10, &b, &e, err, sizeof err) == 0 && b == 0 &&
          e == 2, "split: round half to even (2.5 -> 2) as Python");
    CHECK(mg_split_range("1,1,2", MG_SPLIT_VALID, 10, &b, &e, err, sizeof err) == 0 && b == 2 &&
          e == 5, "split: 1,1,2 of 10 -> valid [2, 5)");
    CHECK(mg_split_range("1,2,1", MG_SPLIT_VALID, 6, &b, &e, err, sizeof err) == 0 && b == 2 &&
          e == 4, "split: 1,2,1 of 6 -> valid [round(1.5) = 2, round(4.5) = 4)");
    expect_fail("split: all zero", mg_split_parse("0,0,0", w, err, sizeof err), "expected weights");
    expect_fail("split: no numbers", mg_split_parse("abc", w, err, sizeof err), "expected weights");
    expect_fail("split: bad number", mg_split_parse("1.2.3", w, err, sizeof err), "bad number");
    expect_fail("split: four weights", mg_split_parse("1,2,3,4", w, err, sizeof err), "more than three");
    memset(&d, 0, sizeof d);
    d.split = "100,0,0"; d.part = MG_SPLIT_VALID; d.seq_len = 8; d.n_samples = 4; d.seed = 1;
    expect_fail("sampler: part with zero weight", mg_sampler_init(&smp, &ds, &d, err, sizeof err),
                "no weight");
    d.split = "969,30,1"; d.part = MG_SPLIT_TEST;
    expect_fail("sampler: part rounding to no sequences, how many it needs",
                mg_sampler_init(&smp, &ds, &d, err, sizeof err), "--split 969,30,1 gives the "
                "test part none of its 44 sequences (the split divides whole sequences; a test "
                "part needs 501 or more with this split)");
    d.split = NULL; d.part = MG_SPLIT_TRAIN; d.seq_len = 1;
    expect_fail("sampler: seq_len 1 shuffled", mg_sampler_init(&smp, &ds, &d, err, sizeof err), "too small");
    d.seq_len = 8; d.n_samples = 0;
    expect_fail("sampler: zero samples", mg_sampler_init(&smp, &ds, &d, err, sizeof err), "no samples");
    d.n_samples = INT64_MAX / 4;
    expect_fail("sampler: sample count overflow", mg_sampler_init(&smp, &ds, &d, err, sizeof err),
                "overflow");
    d.n_samples = 2; d.order = (mg_data_order)7;
    expect_fail("sampler: unknown order", mg_sampler_init(&smp, &ds, &d, err, sizeof err), "unknown data order");
    d.order = MG_ORDER_SHUFFLED; d.index_width = 4;
    expect_fail("sampler: index width other than 0 or 8", mg_sampler_init(&smp, &ds, &d, err,
                sizeof err), "index width 4: 0 (4 bytes where the values fit) or 8");
    d.index_width = 0;
    /* NULL arguments were dereferenced (segfault); each is now an error return by name */
    expect_fail("sampler: NULL desc", mg_sampler_init(&smp, &ds, NULL, err, sizeof err),
                "mg_sampler_init: desc is NULL");
    d.order = MG_ORDER_SEQUENTIAL;
    if (mg_sampler_init(&smp, &ds, &d, err, sizeof err) == 0) {
        expect_fail("sampler: NULL tokens", mg_sampler_get(&smp, 0, NULL, err, sizeof err),
                    "mg_sampler_get: tokens is NULL (room for 9 needed)");
        mg_sampler_free(&smp);
    } else {
        CHECK(0, "sampler: a sequential sampler of 2 samples");
    }
    {
        mg_dataset none;
        mg_idx_writer wr;
        expect_fail("dataset: NULL path", mg_dataset_open(NULL, &none, err, sizeof err),
                    "mg_dataset_open: path is NULL");
        if (mg_idx_writer_begin(&wr, tp("nulltokens"), MG_IDX_U16, err, sizeof err) == 0) {
            expect_fail("writer: NULL tokens with a count",
                        mg_idx_writer_add(&wr, NULL, 3, err, sizeof err),
                        "mg_idx_writer_add: tokens is NULL with 3 tokens");
            mg_idx_writer_abort(&wr);
        } else {
            CHECK(0, "writer: begin in the test directory");
        }
    }
    mg_data_num_samples(100, 8, 10, 2, out);
    CHECK(out[0] == 800 && out[1] == 176 && out[2] == 16, "num_samples: Megatron's formula");
    mg_dataset_close(&ds);
}

/* ---- round trips ------------------------------------------------------------------------- */
static void test_indexed_roundtrip(void) {
    static const mg_idx_dtype types[6] = {MG_IDX_U8, MG_IDX_I8, MG_IDX_I16, MG_IDX_U16,
                                          MG_IDX_I32, MG_IDX_I64};
    static const int64_t lo[6] = {0, -128, -32768, 0, INT32_MIN, INT32_MIN};
    static const int64_t span[6] = {256, 256, 65536, 65536, 4294967296ll, 4294967296ll};
    for (int k = 0; k < 6; k++) {
        int32_t toks[300], all[20000];
        int64_t n_all = 0, lens[200], n_seq = 0, docs[100], n_docs = 1;
        mg_idx_writer w;
        docs[0] = 0;
        int rc = mg_idx_writer_begin(&w, tp("rt"), types[k], err, sizeof err);
        for (int d = 0; rc == 0 && d < 40; d++) {
            int nseq = 1 + (int)(rnd() % 3);
            for (int s = 0; rc == 0 && s < nseq; s++) {
                int n = d == 5 && s == 0 ? 0 : 1 + (int)(rnd() % 120);
                for (int j = 0; j < n; j++) toks[j] = (int32_t)(lo[k] + (int64_t)(rnd() % (uint64_t)span[k]));
                if (d == 0 && n > 2) { toks[0] = (int32_t)lo[k]; toks[1] = (int32_t)(lo[k] + span[k] - 1); }
                rc = mg_idx_writer_add(&w, toks, n, err, sizeof err);
                memcpy(all + n_all, toks, (size_t)n * 4);
                n_all += n;
                lens[n_seq++] = n;
            }
            mg_idx_writer_end_document(&w);
            docs[n_docs++] = n_seq;
        }
        if (rc == 0) rc = mg_idx_writer_finish(&w, err, sizeof err);
        mg_dataset ds;
        if (rc == 0) rc = mg_dataset_open(tp("rt"), &ds, err, sizeof err);
        int ok = rc == 0 && ds.token_dtype == types[k] && ds.n_tokens == n_all &&
                 ds.n_sequences == n_seq && ds.n_documents == n_docs - 1;
        for (int64_t i = 0; ok && i < n_all; i++) ok = mg_dataset_token(&ds, i) == all[i];
        for (int64_t i = 0, pos = 0; ok && i < n_seq; pos += lens[i++])
            ok = mg_dataset_seq_len(&ds, i) == lens[i] && mg_dataset_seq_start(&ds, i) == pos;
        for (int64_t i = 0; ok && i < n_docs; i++) ok = mg_dataset_doc_bound(&ds, i) == docs[i];
        char label[96];
        snprintf(label, sizeof label, "indexed round trip, dtype code %d (%lld tokens)", (int)types[k],
                 (long long)n_all);
        mg_test_report(ok, label, rc ? "%s" : "", err);
        if (rc == 0) mg_dataset_close(&ds);
    }
    CHECK(count_names(".tmp.") == 0, "indexed writer leaves no temporaries");
    mg_idx_writer w;
    int32_t big[2] = {1, 300};
    mg_idx_writer_begin(&w, tp("rt8"), MG_IDX_U8, err, sizeof err);
    expect_fail("indexed writer: token 300 in uint8", mg_idx_writer_add(&w, big, 2, err, sizeof err),
                "does not fit");
    expect_fail("indexed writer: empty dataset", mg_idx_writer_finish(&w, err, sizeof err), "no tokens");
    CHECK(count_names(".tmp.") == 0 && !mg_test_read_file(tp("rt8.idx"), NULL),
          "indexed writer: failure leaves no files");
}

static void test_llmc_tokens(void) {
    static const int32_t toks[12] = {50256, 1, 2, 3, 50256, 4, 50256, 50256, 5, 6, 7, 65535};
    mg_dataset ds;
    int rc = mg_llmc_tokens_write(tp("tok.bin"), MG_LLMC_GPT2, toks, 12, err, sizeof err);
    if (rc == 0) rc = mg_dataset_open(tp("tok.bin"), &ds, err, sizeof err);
    int ok = rc == 0 && ds.format == MG_DATA_LLMC_TOKENS && ds.n_tokens == 12 &&
             ds.n_sequences == 4 && ds.n_documents == 4;
    static const int32_t len[4] = {4, 2, 1, 5};
    for (int i = 0, pos = 0; ok && i < 4; pos += len[i++])
        ok = mg_dataset_seq_len(&ds, i) == len[i] && mg_dataset_seq_start(&ds, i) == pos &&
             mg_dataset_doc_bound(&ds, i + 1) == i + 1;
    for (int i = 0; ok && i < 12; i++) ok = mg_dataset_token(&ds, i) == toks[i];
    mg_test_report(ok, "llm.c tokens: round trip; documents split at token 50256", rc ? "%s" : "", err);
    if (rc == 0) mg_dataset_close(&ds);
    rc = mg_llmc_tokens_write(tp("tok2.bin"), MG_LLMC_GPT2, toks + 1, 3, err, sizeof err);
    if (rc == 0) rc = mg_dataset_open(tp("tok2.bin"), &ds, err, sizeof err);
    CHECK(rc == 0 && ds.n_sequences == 1 && mg_dataset_seq_len(&ds, 0) == 3,
          "llm.c tokens: without 50256 the file is one sequence");
    if (rc == 0) mg_dataset_close(&ds);
    int32_t bad[2] = {1, 70000};
    expect_fail("llm.c tokens: 70000 does not fit uint16",
                mg_llmc_tokens_write(tp("tok.bin"), MG_LLMC_GPT2, bad, 2, err, sizeof err),
                "does not fit uint16");
    rc = mg_dataset_open(tp("tok.bin"), &ds, err, sizeof err);
    CHECK(rc == 0 && ds.n_tokens == 12, "llm.c tokens: a failed write leaves the old file intact");
    if (rc == 0) mg_dataset_close(&ds);
}

/* llm.c token files of both kinds, written by tests/oracle/data.py's transcription of llm.c's
   dev/data/data_common.py write_datafile (HEADERS_INFO: GPT-2 magic 20240520 version 1
   uint16; Llama-3 magic 20240801 version 7 uint32): the tokens of data_llmc.json, sequences
   starting at 50256 (GPT-2) or 128000 (Llama-3).                                          */
static void test_llmc_python(void) {
    static const char *const kinds[2] = {"gpt2", "llama3"};
    char *text;
    mg_json js = load_json("tests/data/data_llmc.json", &text);
    for (int k = 0; k < 2; k++) {
        char path[200], label[200];
        int64_t n_tok, n_seq, *tok, *seq, lo = 0, hi = 0;
        int64_t obj = jget(&js, 0, kinds[k]);
        tok = jints(&js, jget(&js, obj, "tokens"), &n_tok);
        seq = jints(&js, jget(&js, obj, "seq_lens"), &n_seq);
        snprintf(path, sizeof path, "tests/data/data_llmc_%s.bin", kinds[k]);
        mg_dataset ds;
        int rc = mg_dataset_open(path, &ds, err, sizeof err);
        int ok = rc == 0 && ds.format == MG_DATA_LLMC_TOKENS && ds.n_tokens == n_tok &&
                 ds.token_dtype == (k ? MG_TOKEN_U32 : MG_IDX_U16) && ds.token_size == 2 + 2 * k &&
                 ds.n_sequences == n_seq && ds.n_documents == n_seq;
        for (int64_t i = 0, pos = 0; ok && i < n_seq; pos += seq[i++])
            ok = mg_dataset_seq_len(&ds, i) == seq[i] && mg_dataset_seq_start(&ds, i) == pos;
        for (int64_t i = 0; ok && i < n_tok; i++) ok = mg_dataset_token(&ds, i) == tok[i];
        if (ok) mg_dataset_token_range(&ds, &lo, &hi);
        ok = ok && lo == 0 && hi == (k ? 4294967295LL : 65535);
        snprintf(label, sizeof label, "llm.c tokens written by llm.c's write_datafile (%s kind): "
                 "tokens%s, sequences, token range", k ? "Llama-3" : "GPT-2",
                 k ? " (ids above 65535 up to 2^32-1 kept)" : "");
        mg_test_report(ok, label, rc ? "%s" : "", err);
        if (rc == 0) mg_dataset_close(&ds);
        /* our writer writes the same bytes (Llama-3: the tokens that fit int32, all but the
           last; the header's count patched to match)                                        */
        long n_py = 0, n_ours = 0;
        unsigned char *py = (unsigned char *)mg_test_read_file(path, &n_py), *ours = NULL;
        int32_t n_write = (int32_t)(k ? n_tok - 1 : n_tok), t32[64];
        for (int i = 0; i < n_write; i++) t32[i] = (int32_t)tok[i];
        rc = mg_llmc_tokens_write(tp("ours.bin"), k ? MG_LLMC_LLAMA3 : MG_LLMC_GPT2, t32, n_write,
                                  err, sizeof err);
        if (rc == 0) ours = (unsigned char *)mg_test_read_file(tp("ours.bin"), &n_ours);
        if (py) memcpy(py + 8, &n_write, 4);
        ok = rc == 0 && py && ours && n_ours == 1024 + (2 + 2 * k) * n_write &&
             !memcmp(py, ours, (size_t)n_ours);
        snprintf(label, sizeof label, "llm.c tokens: mg_llmc_tokens_write (%s kind) writes the "
                 "bytes of llm.c's write_datafile", k ? "Llama-3" : "GPT-2");
        mg_test_report(ok, label, rc ? "%s" : "", err);
        free(py); free(ours); free(tok); free(seq);
    }
    mg_json_free(&js);
    free(text);
    int32_t neg[2] = {1, -1};
    expect_fail("llm.c tokens: a negative id does not fit the Llama-3 kind",
                mg_llmc_tokens_write(tp("ours.bin"), MG_LLMC_LLAMA3, neg, 2, err, sizeof err),
                "token -1 does not fit uint32");
}

static void test_llmc_checkpoint(void) {
    mg_llmc_config cfg = {8, 10, 2, 2, 4, 16};  /* maxT V L NH C Vp */
    mg_llmc_param layout[MG_LLMC_NPARAMS];
    int64_t n = 0, C = 4, L = 2;
    int rc = mg_llmc_layout(&cfg, layout, &n, err, sizeof err);
    int64_t want = 16 * C + 8 * C + L * (12 * C * C + 13 * C) + 2 * C;  /* llm.c's count */
    CHECK(rc == 0 && n == want && layout[4].shape[1] == 3 * C && layout[12].shape[2] == 4 * C &&
          layout[15].offset == n - C && !strcmp(layout[4].name, "qkvw"),
          "llm.c layout: 16 tensors, llm.c's parameter count and order");
    float *p = (float *)malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) { uint32_t u = (uint32_t)rnd(); memcpy(&p[i], &u, 4); }
    mg_llmc_checkpoint ck;
    rc = mg_llmc_write(tp("model.bin"), &cfg, p, err, sizeof err);
    if (rc == 0) rc = mg_llmc_open(tp("model.bin"), &ck, err, sizeof err);
    int ok = rc == 0 && ck.version == 3 && ck.dtype == MG_ST_F32 && ck.n_params == n &&
             !memcmp(&ck.cfg, &cfg, sizeof cfg) && !memcmp(ck.data, p, (size_t)n * 4);
    mg_test_report(ok, "llm.c checkpoint v3: write -> read bit-exact", rc ? "%s" : "", err);
    if (rc == 0) mg_llmc_close(&ck);

    /* Version 5 (bf16), written by hand as llm.c's train_gpt2.py does.                     */
    int32_t header[256] = {20240326, 5, 8, 10, 2, 2, 4, 16};
    uint16_t *h16 = (uint16_t *)malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) h16[i] = (uint16_t)rnd();
    FILE *f = fopen(tp("model5.bin"), "wb");
    fwrite(header, 4, 256, f); fwrite(h16, 2, (size_t)n, f); fclose(f);
    rc = mg_llmc_open(tp("model5.bin"), &ck, err, sizeof err);
    CHECK(rc == 0 && ck.version == 5 && ck.dtype == MG_ST_BF16 && !memcmp(ck.data, h16, (size_t)n * 2),
          "llm.c checkpoint v5 (bf16) read");
    if (rc == 0) mg_llmc_close(&ck);

    /* Parallel: the creator begins, two forked joiners write one half each, creator commits. */
    mg_pfile pf;
    rc = mg_llmc_writer_begin(&pf, tp("par.bin"), "job7", 1, &cfg, err, sizeof err);
    pid_t kids[2];
    for (int c = 0; rc == 0 && c < 2; c++) {
        kids[c] = fork();
        if (kids[c] == 0) {
            mg_pfile mine;
            int64_t half = n / 2, from = c * half, cnt = c ? n - half : half;
            int r = mg_llmc_writer_begin(&mine, tp("par.bin"), "job7", 0, &cfg, err, sizeof err);
            if (r == 0) r = mg_pfile_write(&mine, MG_LLMC_HEADER_BYTES + 4 * from, p + from,
                                           (size_t)cnt * 4, err, sizeof err);
            if (r == 0) r = mg_pfile_close(&mine, err, sizeof err);
            _exit(r == 0 ? 0 : 1);
        }
    }
    int kids_ok = 1;
    for (int c = 0; rc == 0 && c < 2; c++) {
        int status = 0;
        waitpid(kids[c], &status, 0);
        kids_ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    if (rc == 0) rc = mg_pfile_commit(&pf, err, sizeof err);
    if (rc == 0) rc = mg_llmc_open(tp("par.bin"), &ck, err, sizeof err);
    CHECK(rc == 0 && kids_ok && !memcmp(ck.data, p, (size_t)n * 4) && count_names("par.bin.tmp") == 0,
          "llm.c checkpoint: 2 processes write halves into one file, bit-exact");
    if (rc == 0) mg_llmc_close(&ck);
    free(p); free(h16);
}

static void test_safetensors_roundtrip(void) {
    mg_st_spec specs[8];
    memset(specs, 0, sizeof specs);
    const char *names[8] = {"wte.weight", "h.0.ln_1.bias", "half", "ids", "bytes", "empty",
                            "scalar", "we\"ird\\ name \xc3\xa9\t"};
    mg_st_dtype dts[8] = {MG_ST_F32, MG_ST_BF16, MG_ST_F16, MG_ST_I64, MG_ST_U8, MG_ST_F32,
                          MG_ST_F32, MG_ST_F64};
    int ndims[8] = {2, 1, 3, 1, 1, 2, 0, 1};
    int64_t shapes[8][3] = {{3, 4}, {5}, {2, 2, 2}, {2}, {7}, {0, 5}, {0}, {3}};
    unsigned char *data[8];
    size_t bytes[8];
    for (int t = 0; t < 8; t++) {
        specs[t].name = names[t];
        specs[t].dtype = dts[t];
        specs[t].ndim = ndims[t];
        int64_t numel = 1;
        for (int d = 0; d < ndims[t]; d++) { specs[t].shape[d] = shapes[t][d]; numel *= shapes[t][d]; }
        bytes[t] = (size_t)numel * mg_st_dtype_size(dts[t]);
        data[t] = (unsigned char *)malloc(bytes[t] + 1);
        for (size_t i = 0; i < bytes[t]; i++) data[t][i] = (unsigned char)rnd();
    }
    const char *mk[2] = {"format", "note \"q\""}, *mv[2] = {"pt", "line1\nline2 \xe2\x9c\x93"};
    mg_st_writer w;
    int rc = mg_st_writer_begin(&w, tp("m.safetensors"), "t1", 1, specs, 8, mk, mv, 2, err, sizeof err);
    /* Pieces in reverse order, each tensor in two element ranges; tensors 2 and 3 written by
       forked joiners (the multi-process path).                                              */
    pid_t kid = -1;
    if (rc == 0) {
        kid = fork();
        if (kid == 0) {
            mg_st_writer j;
            int r = mg_st_writer_begin(&j, tp("m.safetensors"), "t1", 0, specs, 8, mk, mv, 2, err,
                                       sizeof err);
            for (int t = 2; r == 0 && t <= 3; t++)
                r = mg_st_writer_write(&j, mg_st_writer_find(&j, names[t]), 0, data[t],
                                       (int64_t)(bytes[t] / mg_st_dtype_size(dts[t])), err, sizeof err);
            if (r == 0) r = mg_st_writer_close(&j, err, sizeof err);
            _exit(r == 0 ? 0 : 1);
        }
    }
    for (int t = 7; rc == 0 && t >= 0; t--) {
        if (t == 2 || t == 3) continue;
        int64_t numel = (int64_t)(bytes[t] / mg_st_dtype_size(dts[t])), half = numel / 2;
        size_t es = mg_st_dtype_size(dts[t]);
        rc = mg_st_writer_write(&w, t, half, data[t] + half * es, numel - half, err, sizeof err);
        if (rc == 0) rc = mg_st_writer_write(&w, t, 0, data[t], half, err, sizeof err);
    }
    if (rc == 0)
        expect_fail("safetensors writer: range past the tensor's end",
                    mg_st_writer_write(&w, 0, 10, data[0], 3, err, sizeof err), "outside");
    int status = 1;
    if (kid > 0) waitpid(kid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "safetensors: joiner process wrote its tensors");
    if (rc == 0) rc = mg_st_writer_commit(&w, err, sizeof err);
    mg_st_file st;
    if (rc == 0) rc = mg_st_open(tp("m.safetensors"), &st, err, sizeof err);
    int ok = rc == 0 && st.n_tensors == 8 && st.n_meta == 2;
    for (int t = 0; ok && t < 8; t++) {
        const mg_st_tensor *x = mg_st_find(&st, names[t]);
        ok = x && x->dtype == dts[t] && x->ndim == ndims[t] && x->nbytes == bytes[t] &&
             !memcmp(x->data, data[t], bytes[t]) &&
             (uintptr_t)x->data % mg_st_dtype_size(dts[t]) == 0;  /* mmap is page aligned */
        for (int d = 0; ok && d < ndims[t]; d++) ok = x->shape[d] == shapes[t][d];
    }
    ok = ok && mg_st_meta(&st, mk[1]) && !strcmp(mg_st_meta(&st, mk[1]), mv[1]) &&
         !strcmp(mg_st_meta(&st, "format"), "pt") && !mg_st_find(&st, "nope");
    mg_test_report(ok, "safetensors: write (2 processes, pieces out of order) -> read bit-exact, aligned",
                   rc ? "%s" : "", err);
    long flen = 0;
    unsigned char *raw = (unsigned char *)mg_test_read_file(tp("m.safetensors"), &flen);
    uint64_t hn = 0;
    if (raw) memcpy(&hn, raw, 8);
    CHECK(raw && (8 + hn) % 8 == 0 && raw[8] == '{', "safetensors: data starts 8-byte aligned");
    free(raw);
    if (rc == 0) mg_st_close(&st);
    CHECK(count_names(".tmp.") == 0, "safetensors writer leaves no temporaries");

    mg_st_writer j;
    /* Joiners whose tensor list differs from the creator's: same size (4x3 vs 3x4), then
       another size.                                                                         */
    specs[0].shape[0] = 4; specs[0].shape[1] = 3;
    rc = mg_st_writer_begin(&w, tp("x.safetensors"), "t2", 1, specs + 0, 1, NULL, NULL, 0, err, sizeof err);
    specs[0].shape[0] = 3; specs[0].shape[1] = 4;
    expect_fail("safetensors: joiner with a different layout of the same size",
                mg_st_writer_begin(&j, tp("x.safetensors"), "t2", 0, specs, 1, NULL, NULL, 0, err,
                                   sizeof err), "header differs");
    specs[0].shape[0] = 5;
    expect_fail("safetensors: joiner expecting another file size",
                mg_st_writer_begin(&j, tp("x.safetensors"), "t2", 0, specs, 1, NULL, NULL, 0, err,
                                   sizeof err), "this process expects");
    if (rc == 0) mg_st_writer_abort(&w);
    CHECK(count_names("x.safetensors") == 0, "safetensors: abort removes the temporary");
    specs[1].name = specs[0].name;
    expect_fail("safetensors writer: duplicate names",
                mg_st_writer_begin(&w, tp("y.safetensors"), NULL, 1, specs, 2, NULL, NULL, 0, err,
                                   sizeof err), "listed twice");
    for (int t = 0; t < 8; t++) free(data[t]);
}

static void test_safetensors_python(void) {
    char *text;
    mg_json js = load_json("tests/data/data_st_py.json", &text);
    mg_st_file st;
    int rc = mg_st_open("tests/data/data_st_py.safetensors", &st, err, sizeof err);
    int64_t tensors = jget(&js, 0, "tensors"), meta = jget(&js, 0, "metadata");
    int ok = rc == 0 && st.n_tensors == js.toks[tensors].size && st.n_meta == js.toks[meta].size;
    for (int64_t k = tensors + 1, m = 0; ok && m < js.toks[tensors].size; m++, k = js.toks[k + 1].next) {
        char *name = mg_json_strdup(&js, k), *dt = mg_json_strdup(&js, jget(&js, k + 1, "dtype"));
        const mg_st_tensor *t = mg_st_find(&st, name);
        int64_t nshape, nvals = js.toks[jget(&js, k + 1, "values")].size;
        int64_t *shape = jints(&js, jget(&js, k + 1, "shape"), &nshape);
        ok = t && !strcmp(mg_st_dtype_name(t->dtype), dt) && t->ndim == nshape && t->numel == nvals;
        for (int d = 0; ok && d < nshape; d++) ok = t->shape[d] == shape[d];
        int64_t vals = jget(&js, k + 1, "values");
        for (int64_t i = 0; ok && i < nvals; i++) {
            const unsigned char *b = (const unsigned char *)t->data;
            float got = 0;
            uint16_t h;
            if (t->dtype == MG_ST_F32) memcpy(&got, b + 4 * i, 4);
            else { memcpy(&h, b + 2 * i, 2); got = t->dtype == MG_ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h); }
            char *end;
            double want = strtod(text + js.toks[jat(&js, vals, i)].start, &end);
            ok = got == (float)want;
        }
        free(name); free(dt); free(shape);
    }
    for (int64_t k = meta + 1, m = 0; ok && m < js.toks[meta].size; m++, k = js.toks[k + 1].next) {
        char *key = mg_json_strdup(&js, k), *val = mg_json_strdup(&js, k + 1);
        ok = mg_st_meta(&st, key) && !strcmp(mg_st_meta(&st, key), val);
        free(key); free(val);
    }
    if (rc != 0)
        mg_test_report(0, "safetensors written by Python read", "%s", err);
    else
        mg_test_report(ok, "safetensors written by Python (F32, BF16, F16, 0-size, 0-dim, escaped "
                       "names) read", "%d tensors", st.n_tensors);
    if (rc == 0) mg_st_close(&st);
    mg_json_free(&js);
    free(text);
}

static void test_hf_config(void) {
    mg_hf_config c = {3, 4, 64, 128, 256, 0, 0}, r;
    memset(&r, 0, sizeof r);
    int rc = mg_hf_config_write(tp("config.json"), &c, err, sizeof err);
    if (rc == 0) rc = mg_hf_config_read(tp("config.json"), &r, err, sizeof err);
    CHECK(rc == 0 && !memcmp(&c, &r, sizeof c), "config.json: write -> read");
    const char *missing = "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 9}";
    put_file(tp("c1.json"), missing, strlen(missing));
    rc = mg_hf_config_read(tp("c1.json"), &r, err, sizeof err);
    CHECK(rc == 0 && r.n_layer == 2 && r.n_positions == 1024,
          "config.json: a missing n_positions is GPT2Config's default, 1024");
    put_file(tp("c1.json"), "{}", 2);
    rc = mg_hf_config_read(tp("c1.json"), &r, err, sizeof err);
    CHECK(rc == 0 && r.n_layer == 12 && r.n_head == 12 && r.n_embd == 768 &&
          r.n_positions == 1024 && r.vocab_size == 50257,
          "config.json: {} is GPT2Config() (GPT-2 small: 12, 12, 768, 1024, 50257)");
    put_file(tp("c1.json"), "[12]", 4);
    expect_fail("config.json: not an object", mg_hf_config_read(tp("c1.json"), &r, err, sizeof err),
                "not a JSON object");
    const char *frac = "{\"n_layer\": 2, \"n_head\": 2.5, \"n_embd\": 8, \"n_positions\": 4, \"vocab_size\": 9}";
    put_file(tp("c2.json"), frac, strlen(frac));
    expect_fail("config.json: fractional n_head", mg_hf_config_read(tp("c2.json"), &r, err, sizeof err),
                "\"n_head\" is 2.5, not a positive integer");
    put_file(tp("c3.json"), "{\"n_layer\": 2,", 14);
    expect_fail("config.json: malformed", mg_hf_config_read(tp("c3.json"), &r, err, sizeof err),
                "malformed JSON");
    /* A wrong path to something huge is refused by its size, before it is read or parsed.  */
    int fits = truncate(tp("c3.json"), (off_t)17 << 20) == 0;
    expect_fail("config.json: a 17 MB file is refused unread",
                fits ? mg_hf_config_read(tp("c3.json"), &r, err, sizeof err) : 0, "more than the");
    char *text = NULL;
    size_t len = 0;
    rc = mg_read_file(tp("c2.json"), 1000, &text, &len, err, sizeof err);
    CHECK(rc == 0 && len == strlen(frac) && !strcmp(text, frac),
          "mg_read_file: whole file, NUL-terminated");
    free(text);
    expect_fail("mg_read_file: a file over the limit", mg_read_file(tp("c2.json"), 10, &text, &len,
                err, sizeof err), "more than the 10");
}

/* The GPT2Config keys that change the math (transformers 4.40.2): what megatron.h computes
   is accepted, anything else refused with the key named; the writer states every one.      */
static void test_hf_config_math(void) {
    /* a valid config of n_embd 8 with one member put last (a name given twice means its last
       value, as Python's json.loads, which transformers reads config.json with, takes it)   */
    static const char *const base = "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, "
                                    "\"n_positions\": 4, \"vocab_size\": 9%s}";
    static const struct { const char *member, *needle; } bad[] = {
        {"\"model_type\": \"gpt_neo\"", "\"model_type\" is \"gpt_neo\"; megatron.h imports GPT-2"},
        {"\"model_type\": null", "\"model_type\" is null"},
        {"\"activation_function\": \"gelu_10\"", "\"activation_function\" is \"gelu_10\"; megatron.h"},
        {"\"activation_function\": \"relu\"", "\"activation_function\" is \"relu\""},
        {"\"activation_function\": 1", "\"activation_function\" is 1"},
        {"\"layer_norm_epsilon\": 1e-6", "\"layer_norm_epsilon\" is 1e-6; megatron.h's layernorms"},
        {"\"layer_norm_epsilon\": \"1e-5\"", "\"layer_norm_epsilon\" is \"1e-5\""},
        {"\"scale_attn_weights\": false", "\"scale_attn_weights\" is false; megatron.h needs true"},
        {"\"scale_attn_weights\": \"true\"", "\"scale_attn_weights\" is \"true\", not true or false"},
        {"\"scale_attn_by_inverse_layer_idx\": true",
         "\"scale_attn_by_inverse_layer_idx\" is true; megatron.h needs false"},
        {"\"reorder_and_upcast_attn\": 0", "\"reorder_and_upcast_attn\" is 0, not true or false"},
        {"\"add_cross_attention\": true", "\"add_cross_attention\" is true; megatron.h needs false"},
        {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\" is false; megatron.h needs true"},
        {"\"n_inner\": 100", "\"n_inner\" is 100; megatron.h's MLP is 4 x n_embd = 32 wide"},
        {"\"n_inner\": 32.5", "\"n_inner\" is 32.5"},
        {"\"n_layer\": 0", "\"n_layer\" is 0, not a positive integer"},
        {"\"vocab_size\": 3000000000", "\"vocab_size\" is 3000000000, not a positive integer below 2^31"},
    };
    static const char *const good[] = {
        "", "\"model_type\": \"gpt2\"", "\"activation_function\": \"gelu_new\"",
        "\"activation_function\": \"gelu_pytorch_tanh\"", "\"activation_function\": \"gelu_fast\"",
        "\"activation_function\": \"gelu_accurate\"", "\"activation_function\": \"gelu\"",
        "\"activation_function\": \"gelu_python\"", "\"layer_norm_epsilon\": 1e-05",
        "\"layer_norm_epsilon\": 9.99999974737875e-06", "\"reorder_and_upcast_attn\": true",
        "\"reorder_and_upcast_attn\": false", "\"n_inner\": null", "\"n_inner\": 32",
        "\"scale_attn_weights\": true", "\"scale_attn_by_inverse_layer_idx\": false",
        "\"add_cross_attention\": false", "\"tie_word_embeddings\": true"};
    char text[512], label[200], member[200];
    mg_hf_config c;
    int ok = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(member, sizeof member, ", %s", bad[i].member);
        snprintf(text, sizeof text, base, member);
        put_file(tp("math.json"), text, strlen(text));
        snprintf(label, sizeof label, "config.json: %s is refused, the key named", bad[i].member);
        expect_fail(label, mg_hf_config_read(tp("math.json"), &c, err, sizeof err), bad[i].needle);
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        member[0] = 0;
        if (good[i][0]) snprintf(member, sizeof member, ", %s", good[i]);
        snprintf(text, sizeof text, base, member);
        put_file(tp("math.json"), text, strlen(text));
        /* the exact GELU's two names; every other variant is the tanh GELU */
        int exact = strstr(good[i], "\"gelu\"") || strstr(good[i], "gelu_python");
        err[0] = 0;
        if (mg_hf_config_read(tp("math.json"), &c, err, sizeof err) != 0 || c.n_embd != 8 ||
            c.gelu_exact != exact) {
            mg_test_report(0, "config.json: what megatron.h computes is accepted", "%s: %s "
                           "(gelu_exact %d)", good[i], err, c.gelu_exact);
            ok = 0;
        }
    }
    if (ok) mg_test_report(1, "config.json: what megatron.h computes is accepted", "%d variants",
                           (int)(sizeof good / sizeof good[0]));
    /* config.json files as transformers 4.40.2 saved them (GPT2LMHeadModel, GPT2Model) */
    ok = mg_hf_config_read("tests/data/hf_lm/config.json", &c, err, sizeof err) == 0 &&
         c.n_layer == 2 && c.n_embd == 24 && c.n_head == 4;
    ok = ok && mg_hf_config_read("tests/data/hf_base/config.json", &c, err, sizeof err) == 0 &&
         c.n_layer == 1 && c.vocab_size == 37;
    mg_test_report(ok, "config.json: transformers' own files (hf_lm, hf_base) read", "%s", err);
    /* the writer states every math key with our value (no reader has to know the defaults) */
    mg_hf_config w = {2, 2, 8, 4, 9, 0, 0};
    char *written = NULL;
    size_t len = 0;
    mg_json js;
    int rc = mg_hf_config_write(tp("written.json"), &w, err, sizeof err);
    if (rc == 0) rc = mg_read_file(tp("written.json"), 4096, &written, &len, err, sizeof err);
    if (rc == 0) rc = mg_json_parse(&js, written, len, err, sizeof err);
    static const char *const stated[][2] = {
        {"model_type", "\"gpt2\""}, {"activation_function", "\"gelu_new\""},
        {"layer_norm_epsilon", "1e-05"}, {"scale_attn_weights", "true"},
        {"scale_attn_by_inverse_layer_idx", "false"}, {"reorder_and_upcast_attn", "false"},
        {"add_cross_attention", "false"}, {"n_inner", "null"}, {"tie_word_embeddings", "true"}};
    ok = rc == 0;
    for (int k = 0; ok && k < 9; k++) {
        int64_t t = mg_json_get(&js, 0, stated[k][0]);
        const char *at = t < 0 ? "" : written + js.toks[t].start -
                                      (js.toks[t].type == MG_JSON_STRING);
        ok = t >= 0 && !strncmp(at, stated[k][1], strlen(stated[k][1]));
        if (!ok) snprintf(err, sizeof err, "%s missing or not %s", stated[k][0], stated[k][1]);
    }
    if (rc == 0) mg_json_free(&js);
    free(written);
    mg_test_report(ok, "config.json: the writer states each math key with megatron.h's value",
                   "%s", ok ? "" : err);
    err[0] = 0;
}

/* ---- bad files ------------------------------------------------------------------------------ */
static unsigned char *read_all(const char *path, long *n) {
    return (unsigned char *)mg_test_read_file(path, n);
}
/* Writes an .idx variant (bytes of base with a patch at offset) beside the good .bin.       */
static int open_idx_variant(const unsigned char *idx, long n, long at, const void *patch,
                            size_t plen, long new_len) {
    unsigned char *b = (unsigned char *)malloc((size_t)(new_len > n ? new_len : n) + 16);
    memcpy(b, idx, (size_t)n);
    if (new_len > n) memset(b + n, 0, (size_t)(new_len - n));
    if (patch) memcpy(b + at, patch, plen);
    put_file(tp("bad.idx"), b, (size_t)new_len);
    free(b);
    mg_dataset ds;
    int rc = mg_dataset_open(tp("bad"), &ds, err, sizeof err);
    if (rc == 0) mg_dataset_close(&ds);
    return rc;
}

static void test_bad_indexed(void) {
    /* A good dataset: 3 sequences (lengths 3, 2, 4), 2 documents, uint16.                  */
    int32_t t[4] = {1, 2, 3, 4};
    mg_idx_writer w;
    mg_idx_writer_begin(&w, tp("good"), MG_IDX_U16, err, sizeof err);
    mg_idx_writer_add(&w, t, 3, err, sizeof err);
    mg_idx_writer_end_document(&w);
    mg_idx_writer_add(&w, t, 2, err, sizeof err);
    mg_idx_writer_add(&w, t, 4, err, sizeof err);
    if (mg_idx_writer_finish(&w, err, sizeof err) != 0) { CHECK(0, "bad files: base dataset"); return; }
    long n = 0, nb = 0;
    unsigned char *idx = read_all(tp("good.idx"), &n), *bin = read_all(tp("good.bin"), &nb);
    put_file(tp("bad.bin"), bin, (size_t)nb);
    /* layout: 34 header | lengths 3×4 @34 | pointers 3×8 @46 | docs 3×8 @70 | end 94        */
    int64_t v;
    uint64_t u;
    CHECK(n == 94 && open_idx_variant(idx, n, 0, NULL, 0, n) == 0, "bad files: unmodified copy opens");
    expect_fail("indexed: wrong magic", open_idx_variant(idx, n, 0, "XMIDIDX", 7, n), "bad magic");
    u = 2;
    expect_fail("indexed: wrong version", open_idx_variant(idx, n, 9, &u, 8, n), "unsupported version 2");
    expect_fail("indexed: truncated header", open_idx_variant(idx, n, 0, NULL, 0, 20), "truncated header");
    expect_fail("indexed: truncated index", open_idx_variant(idx, n, 0, NULL, 0, n - 4), "truncated");
    expect_fail("indexed: index with extra bytes", open_idx_variant(idx, n, 0, NULL, 0, n + 5),
                "size mismatch");
    CHECK(open_idx_variant(idx, n, 0, NULL, 0, n + 3) == 0,
          "indexed: multimodal sequence_modes (S extra bytes) tolerated");
    unsigned char code = 7;
    expect_fail("indexed: float token dtype", open_idx_variant(idx, n, 17, &code, 1, n), "not an integer type");
    code = 9;
    expect_fail("indexed: unknown dtype code", open_idx_variant(idx, n, 17, &code, 1, n), "unknown dtype code 9");
    u = (uint64_t)1 << 61;
    expect_fail("indexed: absurd sequence count", open_idx_variant(idx, n, 18, &u, 8, n), "more than the file");
    u = 4;
    expect_fail("indexed: sequence count vs file size", open_idx_variant(idx, n, 18, &u, 8, n), "truncated");
    v = 8;
    expect_fail("indexed: pointers vs lengths", open_idx_variant(idx, n, 46 + 8, &v, 8, n), "points to byte 8");
    v = 2;
    expect_fail("indexed: document index not ending at S", open_idx_variant(idx, n, 70 + 16, &v, 8, n),
                "not at the sequence count");
    v = 1;
    expect_fail("indexed: document index not starting at 0", open_idx_variant(idx, n, 70, &v, 8, n),
                "must start with 0");
    v = 5;  /* documents [0, 5, 3] */
    expect_fail("indexed: decreasing document index", open_idx_variant(idx, n, 70 + 8, &v, 8, n), "decreases");
    int32_t neg = -1;
    expect_fail("indexed: negative sequence length", open_idx_variant(idx, n, 34 + 4, &neg, 4, n),
                "negative length");
    put_file(tp("bad.bin"), bin, (size_t)nb - 2);
    expect_fail("indexed: truncated .bin", open_idx_variant(idx, n, 0, NULL, 0, n), "truncated");
    put_file(tp("bad.bin"), bin, (size_t)nb);
    FILE *f = fopen(tp("bad.bin"), "ab"); fputc(0, f); fputc(0, f); fclose(f);
    expect_fail("indexed: .bin longer than the index says", open_idx_variant(idx, n, 0, NULL, 0, n),
                "size mismatch");
    unlink(tp("bad.bin"));
    expect_fail("indexed: missing .bin", open_idx_variant(idx, n, 0, NULL, 0, n), "cannot open");
    /* Empty: S = 0, D = 1, empty .bin.                                                        */
    unsigned char empty[42];
    memcpy(empty, idx, 18);
    u = 0; memcpy(empty + 18, &u, 8);
    u = 1; memcpy(empty + 26, &u, 8);
    v = 0; memcpy(empty + 34, &v, 8);
    put_file(tp("bad.bin"), "", 0);
    expect_fail("indexed: empty dataset", open_idx_variant(empty, 42, 0, NULL, 0, 42), "empty dataset");
    free(idx); free(bin);
}

static void test_bad_llmc(void) {
    mg_dataset ds;
    mg_llmc_checkpoint ck;
    int32_t hdr[256 + 4] = {20240520, 1, 8};
    put_file(tp("t.bin"), hdr, 1024 + 2 * 6);  /* says 8 tokens, holds 6 */
    expect_fail("llm.c tokens: truncated data", mg_dataset_open(tp("t.bin"), &ds, err, sizeof err), "truncated");
    hdr[1] = 2;
    put_file(tp("t.bin"), hdr, 1024 + 2 * 8);
    expect_fail("llm.c tokens: wrong version", mg_dataset_open(tp("t.bin"), &ds, err, sizeof err),
                "unsupported version 2");
    hdr[1] = 1; hdr[2] = -5;
    put_file(tp("t.bin"), hdr, 1024);
    expect_fail("llm.c tokens: negative count", mg_dataset_open(tp("t.bin"), &ds, err, sizeof err), "negative");
    hdr[2] = 0;
    put_file(tp("t.bin"), hdr, 1024);
    expect_fail("llm.c tokens: no tokens", mg_dataset_open(tp("t.bin"), &ds, err, sizeof err), "empty dataset");
    put_file(tp("t.bin"), hdr, 100);
    expect_fail("llm.c tokens: truncated header", mg_dataset_open(tp("t.bin"), &ds, err, sizeof err),
                "truncated header");
    /* the Llama-3 kind (uint32 tokens): the same checks, sizes of 4 bytes a token          */
    int32_t l3[256 + 9] = {20240801, 7, 8};
    put_file(tp("t.bin"), l3, 1024 + 2 * 8);   /* 8 tokens of a GPT-2 file's size */
    expect_fail("llm.c Llama-3 tokens: truncated data",
                mg_dataset_open(tp("t.bin"), &ds, err, sizeof err),
                "truncated: 1040 bytes, but 8 Llama-3 tokens (4 bytes each) need 1056");
    put_file(tp("t.bin"), l3, 1024 + 4 * 8 + 2);
    expect_fail("llm.c Llama-3 tokens: size mismatch", mg_dataset_open(tp("t.bin"), &ds, err,
                sizeof err), "size mismatch: 1058 bytes, but 8 Llama-3 tokens");
    l3[1] = 1;
    put_file(tp("t.bin"), l3, 1024 + 4 * 8);
    expect_fail("llm.c Llama-3 tokens: the GPT-2 kind's version under the Llama-3 magic",
                mg_dataset_open(tp("t.bin"), &ds, err, sizeof err),
                "llm.c Llama-3 token file (magic 20240801) of unsupported version 1 (llm.c writes "
                "version 7)");
    hdr[1] = 7; hdr[2] = 8;
    put_file(tp("t.bin"), hdr, 1024 + 2 * 8);
    expect_fail("llm.c tokens: the Llama-3 kind's version under the GPT-2 magic",
                mg_dataset_open(tp("t.bin"), &ds, err, sizeof err),
                "llm.c GPT-2 token file (magic 20240520) of unsupported version 7 (llm.c writes "
                "version 1)");
    hdr[1] = 1;
    l3[1] = 7; l3[2] = 0;
    put_file(tp("t.bin"), l3, 1024);
    expect_fail("llm.c Llama-3 tokens: no tokens",
                mg_dataset_open(tp("t.bin"), &ds, err, sizeof err), "empty dataset");
    expect_fail("dataset: an llm.c evaluation file (hellaswag) is not training tokens",
                mg_dataset_open("tests/data/data_llmc_eval.bin", &ds, err, sizeof err),
                "data_llmc_eval.bin: this is an llm.c evaluation file (magic 20240522: "
                "multiple-choice examples");
    expect_fail("llm.c checkpoint: an llm.c evaluation file is not one",
                mg_llmc_open("tests/data/data_llmc_eval.bin", &ck, err, sizeof err),
                "an llm.c evaluation file");
    expect_fail("llm.c checkpoint: a Llama-3 token file is not one",
                mg_llmc_open("tests/data/data_llmc_llama3.bin", &ck, err, sizeof err),
                "this is an llm.c Llama-3 token file, not a model checkpoint");
    put_file(tp("junk.txt"), "hello world", 11);
    expect_fail("dataset: unknown format", mg_dataset_open(tp("junk.txt"), &ds, err, sizeof err),
                "neither an llm.c token file (magic 20240520 or 20240801)");
    expect_fail("dataset: no such path", mg_dataset_open(tp("nothing"), &ds, err, sizeof err), "no such dataset");

    int32_t ch[256] = {20240326, 3, 8, 10, 2, 2, 4, 16};
    mg_llmc_config cfg = {8, 10, 2, 2, 4, 16};
    mg_llmc_param layout[MG_LLMC_NPARAMS];
    int64_t np = 0;
    mg_llmc_layout(&cfg, layout, &np, err, sizeof err);
    size_t full = 1024 + (size_t)np * 4;
    unsigned char *buf = (unsigned char *)calloc(full + 8, 1);
    memcpy(buf, ch, sizeof ch);
    put_file(tp("c.bin"), buf, full);
    CHECK(mg_llmc_open(tp("c.bin"), &ck, err, sizeof err) == 0, "llm.c checkpoint: base file opens");
    mg_llmc_close(&ck);
    expect_fail("dataset: a checkpoint is not token data", mg_dataset_open(tp("c.bin"), &ds, err, sizeof err),
                "model checkpoint");
    put_file(tp("c.bin"), buf, full - 4);
    expect_fail("llm.c checkpoint: truncated data", mg_llmc_open(tp("c.bin"), &ck, err, sizeof err), "truncated");
    put_file(tp("c.bin"), buf, full + 4);
    expect_fail("llm.c checkpoint: trailing bytes", mg_llmc_open(tp("c.bin"), &ck, err, sizeof err), "size mismatch");
    put_file(tp("c.bin"), buf, 512);
    expect_fail("llm.c checkpoint: truncated header", mg_llmc_open(tp("c.bin"), &ck, err, sizeof err),
                "truncated header");
    int32_t patch[2][8] = {{20240326, 4}, {20240520, 1}};
    const char *needle[2] = {"unsupported version 4", "token file"};
    for (int k = 0; k < 2; k++) {
        memcpy(buf, patch[k], 8);
        put_file(tp("c.bin"), buf, full);
        expect_fail(k ? "llm.c checkpoint: token file passed" : "llm.c checkpoint: wrong version",
                    mg_llmc_open(tp("c.bin"), &ck, err, sizeof err), needle[k]);
    }
    ch[0] = 1234;
    memcpy(buf, ch, 8);
    put_file(tp("c.bin"), buf, full);
    expect_fail("llm.c checkpoint: wrong magic", mg_llmc_open(tp("c.bin"), &ck, err, sizeof err), "bad magic");
    ch[0] = 20240326; ch[7] = 9;  /* Vp < V */
    memcpy(buf, ch, 32);
    put_file(tp("c.bin"), buf, full);
    expect_fail("llm.c checkpoint: padded vocab below vocab", mg_llmc_open(tp("c.bin"), &ck, err, sizeof err),
                "Vp >= V");
    ch[7] = 16; ch[5] = 3;  /* C % NH */
    memcpy(buf, ch, 32);
    put_file(tp("c.bin"), buf, full);
    expect_fail("llm.c checkpoint: heads do not divide channels", mg_llmc_open(tp("c.bin"), &ck, err, sizeof err),
                "not divisible");
    ch[5] = 1; ch[4] = 2000000000; ch[6] = 2000000000;  /* L·C·C overflows */
    memcpy(buf, ch, 32);
    put_file(tp("c.bin"), buf, full);
    expect_fail("llm.c checkpoint: sizes overflow", mg_llmc_open(tp("c.bin"), &ck, err, sizeof err), "too large");
    free(buf);
}

/* A safetensors file from a header text and data_len zero bytes.                            */
static int open_st(const char *header, size_t data_len) {
    size_t hn = strlen(header);
    unsigned char *b = (unsigned char *)calloc(8 + hn + data_len + 1, 1);
    uint64_t h64 = hn;
    memcpy(b, &h64, 8);
    memcpy(b + 8, header, hn);
    put_file(tp("bad.safetensors"), b, 8 + hn + data_len);
    free(b);
    mg_st_file st;
    int rc = mg_st_open(tp("bad.safetensors"), &st, err, sizeof err);
    if (rc == 0) mg_st_close(&st);
    return rc;
}

static void test_bad_safetensors(void) {
    const char *ok2 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[8,12]}}";
    CHECK(open_st(ok2, 12) == 0, "safetensors: base file opens");
    expect_fail("safetensors: truncated data", open_st(ok2, 10), "truncated data");
    expect_fail("safetensors: trailing bytes", open_st(ok2, 14), "trailing bytes");
    put_file(tp("bad.safetensors"), "\x10\0\0", 3);
    mg_st_file st;
    expect_fail("safetensors: shorter than 8 bytes", mg_st_open(tp("bad.safetensors"), &st, err, sizeof err),
                "truncated");
    unsigned char big[12] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    put_file(tp("bad.safetensors"), big, 12);
    expect_fail("safetensors: header length past the end", mg_st_open(tp("bad.safetensors"), &st, err, sizeof err),
                "runs past the end");
    expect_fail("safetensors: header not an object", open_st("[1, 2]  ", 0), "does not start with '{'");
    static const struct { const char *header; size_t data; const char *needle, *name; } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, "malformed JSON",
         "safetensors: malformed header (trailing comma)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "malformed JSON",
         "safetensors: malformed header (unclosed)"},
        {"{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype 'Q7'",
         "safetensors: unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12",
         "safetensors: offsets disagree with shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "gap",
         "safetensors: gap between tensors"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap",
         "safetensors: overlapping tensors"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap",
         "safetensors: first tensor not at 0"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "appears twice",
         "safetensors: duplicate tensor names"},
        {"{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, "must be strings", "safetensors: non-string metadata"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "needs dtype, shape and data_offsets",
         "safetensors: missing data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]",
         "safetensors: negative dimension"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "0 <= begin <= end",
         "safetensors: reversed offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         "at most 8", "safetensors: too many dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
         "overflows", "safetensors: shape overflow"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4,
         "data_offsets must be", "safetensors: offset beyond int64"},
        {"{\"a\":5}", 0, "needs dtype", "safetensors: tensor entry not an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\x01", 4, "malformed JSON",
         "safetensors: control byte after the header object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_fail(cases[i].name, open_st(cases[i].header, cases[i].data), cases[i].needle);
}

/* ---- careless input: pipes, directories, empty and unreadable files, huge headers -------- */
static int read_dataset(const char *path) {
    mg_dataset ds;
    int rc = mg_dataset_open(path, &ds, err, sizeof err);
    if (rc == 0) mg_dataset_close(&ds);
    return rc;
}
static int read_safetensors(const char *path) {
    mg_st_file st;
    int rc = mg_st_open(path, &st, err, sizeof err);
    if (rc == 0) mg_st_close(&st);
    return rc;
}
static int read_checkpoint(const char *path) {
    mg_llmc_checkpoint ck;
    int rc = mg_llmc_open(path, &ck, err, sizeof err);
    if (rc == 0) mg_llmc_close(&ck);
    return rc;
}
static int read_config(const char *path) {
    mg_hf_config c;
    return mg_hf_config_read(path, &c, err, sizeof err);
}
static const struct { const char *name; int (*read)(const char *); const char *on_empty; }
    readers[4] = {{"dataset", read_dataset, "neither an llm.c token file"},
                  {"safetensors", read_safetensors, "truncated"},
                  {"llm.c checkpoint", read_checkpoint, "truncated header"},
                  {"config.json", read_config, "malformed JSON"}};

/* Each reader, as root or not, on a file it may not read: checked in a child process that
   runs as user nobody when the test runs as root (root reads everything). Returns a bit per
   reader that failed to say "Permission denied"; 255 when the user cannot be changed.   */
static int unreadable_child(const char *path) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) return 255;
    int bad = 0;
    for (int r = 0; r < 4; r++)
        if (readers[r].read(path) == 0 || !strstr(err, "Permission denied") || strchr(err, '\n'))
            bad |= 1 << r;
    return bad;
}

static void test_careless_input(void) {
    char label[128], path[600];
    alarm(60);  /* a reader that blocks (on a pipe, say) ends the test instead of hanging it */
    snprintf(path, sizeof path, "%s", tp("pipe"));
    int have_fifo = mkfifo(path, 0600) == 0;
    CHECK(have_fifo, "careless input: mkfifo for the named-pipe cases");
    mkdir(tp("adir"), 0755);
    put_file(tp("empty"), "", 0);
    for (int r = 0; r < 4; r++) {
        if (have_fifo) {
            snprintf(label, sizeof label, "%s: a named pipe is refused, without waiting for a writer",
                     readers[r].name);
            expect_fail(label, readers[r].read(path), "not a regular file");
        }
        snprintf(label, sizeof label, "%s: a directory is refused", readers[r].name);
        expect_fail(label, readers[r].read(tp("adir")), "is a directory");
        snprintf(label, sizeof label, "%s: a directory with a trailing slash is refused",
                 readers[r].name);
        expect_fail(label, readers[r].read(tp("adir/")), "is a directory");
        snprintf(label, sizeof label, "%s: a 0-byte file is refused", readers[r].name);
        expect_fail(label, readers[r].read(tp("empty")), readers[r].on_empty);
    }
    unsigned char head[8] = {0};
    put_file(tp("four"), "abcd", 4);
    CHECK(mg_read_head(tp("four"), head, sizeof head, err, sizeof err) == 4 &&
          !memcmp(head, "abcd", 4), "mg_read_head: the first bytes of a short file");
    if (have_fifo)
        expect_fail("mg_read_head: a named pipe is refused, without waiting for a writer",
                    (int)mg_read_head(path, head, 4, err, sizeof err), "not a regular file");
    expect_fail("mg_read_head: a directory is refused",
                (int)mg_read_head(tp("adir"), head, 4, err, sizeof err), "is a directory");
    expect_fail("dataset: /dev/null (a device) is refused", read_dataset("/dev/null"),
                "not a regular file");
    expect_fail("dataset: a path through a regular file", read_dataset(tp("empty/x")), "Not a directory");

    /* Unreadable files (mode 0), as user nobody when the test runs as root.               */
    put_file(tp("secret"), "{}", 2);
    chmod(tp("secret"), 0);
    snprintf(path, sizeof path, "%s", tp("secret"));
    pid_t kid = fork();
    if (kid == 0) _exit(unreadable_child(path));
    int status = 0;
    waitpid(kid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 254;
    if (code == 255) {
        printf("# careless input: unreadable-file cases skipped (cannot switch to user nobody)\n");
    } else {
        for (int r = 0; r < 4; r++) {
            snprintf(label, sizeof label, "%s: an unreadable file is refused with its reason",
                     readers[r].name);
            mg_test_report(!(code & (1 << r)), label, "child status %d", code);
        }
    }
    alarm(0);

    /* Duplicate names among 100,000 tensors: found (by sorting, not by comparing all pairs). */
    const int nt = 100000;
    size_t cap = (size_t)nt * 72 + 64, hn = 0;
    char *h = (char *)malloc(cap);
    hn += (size_t)snprintf(h, cap, "{");
    for (int t = 0; t < nt; t++)
        hn += (size_t)snprintf(h + hn, cap - hn, "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[1],"
                               "\"data_offsets\":[%d,%d]}", t ? "," : "", t == nt - 1 ? 17 : t,
                               t, t + 1);
    hn += (size_t)snprintf(h + hn, cap - hn, "}");
    expect_fail("safetensors: a duplicate name among 100000 tensors", open_st(h, (size_t)nt),
                "tensor 't17' appears twice");
    free(h);

    /* A part of one 2-token sequence and 1000 empty ones, asked for 10^7 samples: the
       document index would need 10^10 entries (40 GB); refused before allocating.          */
    mg_idx_writer w;
    int32_t two[2] = {1, 2};
    int rc = mg_idx_writer_begin(&w, tp("sparse"), MG_IDX_U16, err, sizeof err);
    for (int i = 0; rc == 0 && i < 1000; i++) rc = mg_idx_writer_add(&w, two, 0, err, sizeof err);
    if (rc == 0) rc = mg_idx_writer_add(&w, two, 2, err, sizeof err);
    if (rc == 0) rc = mg_idx_writer_finish(&w, err, sizeof err);
    mg_dataset ds;
    if (rc == 0) rc = mg_dataset_open(tp("sparse"), &ds, err, sizeof err);
    if (rc != 0) {
        mg_test_report(0, "sampler: sparse dataset fixture", "%s", err);
    } else {
        mg_sampler smp;
        mg_sampler_desc d;
        memset(&d, 0, sizeof d);
        d.split = "1,0,0"; d.seq_len = 2; d.n_samples = 10000000; d.seed = 1;
        expect_fail("sampler: absurd document index refused before allocating",
                    mg_sampler_init(&smp, &ds, &d, err, sizeof err), "limit 2^31 - 1");
        mg_dataset_close(&ds);
    }
}

static void test_atomic(void) {
    int rc = mg_atomic_write(tp("a.txt"), "one", 3, err, sizeof err);
    if (rc == 0) rc = mg_atomic_write(tp("a.txt"), "second", 6, err, sizeof err);
    long n = 0;
    char *s = (char *)mg_test_read_file(tp("a.txt"), &n);
    CHECK(rc == 0 && s && n == 6 && !memcmp(s, "second", 6) && count_names(".tmp.") == 0,
          "atomic write: replaces the file, no temporaries left");
    free(s);
    mg_pfile f;
    rc = mg_pfile_begin(&f, tp("p.bin"), NULL, 1, 16, "hd", 2, err, sizeof err);
    expect_fail("pfile: write past the end", rc ? -1 : mg_pfile_write(&f, 10, "0123456789", 10, err, sizeof err),
                "past the end");
    mg_pfile_abort(&f);
    CHECK(count_names("p.bin") == 0, "pfile: abort removes the temporary, no file created");
    expect_fail("pfile: joiner without a creator", mg_pfile_begin(&f, tp("q.bin"), "zz", 0, 16, NULL, 0, err,
                sizeof err), "the creator must begin first");

    char tmp[512];
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tp("ckpt"));
    for (int round = 0; round < 2; round++) {
        char file[600];
        rc = mg_atomic_dir_begin(dir, "it10", tmp, sizeof tmp, err, sizeof err);
        snprintf(file, sizeof file, "%s/%s", tmp, round ? "new.txt" : "old.txt");
        if (rc == 0) rc = mg_atomic_write(file, "x", 1, err, sizeof err);
        if (rc == 0) rc = mg_atomic_dir_commit(tmp, dir, err, sizeof err);
    }
    char oldf[600], newf[600];
    snprintf(oldf, sizeof oldf, "%s/old.txt", dir);
    snprintf(newf, sizeof newf, "%s/new.txt", dir);
    struct stat st;
    CHECK(rc == 0 && stat(newf, &st) == 0 && stat(oldf, &st) != 0 && count_names("ckpt.") == 0,
          "atomic dir: second commit replaces the first, nothing left over");
    rc = mg_atomic_dir_begin(dir, NULL, tmp, sizeof tmp, err, sizeof err);
    mg_atomic_dir_abort(tmp);
    CHECK(rc == 0 && count_names("ckpt.tmp") == 0 && stat(newf, &st) == 0,
          "atomic dir: abort removes the temporary, keeps the old");
}

/* ---- tools/mg_prepare end to end (the binary `make` builds beside this test) ------------- */
static void test_mg_prepare(void) {
    const char *tool = "build/mg_prepare";
    if (access(tool, X_OK) != 0) {
        CHECK(0, "mg_prepare: build/mg_prepare is built (make build/mg_prepare)");
        return;
    }
    const char *a = "One.\nstill one.\n\n\nTwo.\n \nThree", *b = "b1\nb2\n";
    put_file(tp("a.txt"), a, strlen(a));
    put_file(tp("b.txt"), b, strlen(b));
    static const char *const modes[3] = {"file", "paragraph", "line"};
    /* Expected sequence lengths: per file; after blank-line runs; per line, the blank lines
       after a line in its document (no document is blank).                                */
    static const int32_t want[3][9] = {{30, 6}, {18, 7, 5, 6}, {5, 13, 7, 5, 3, 3}};
    static const int nwant[3] = {2, 4, 6};
    for (int m = 0; m < 3; m++) {
        char cmd[1200], label[96];
        snprintf(cmd, sizeof cmd, "%s --quiet --documents %s -o %s %s %s", tool, modes[m],
                 tp("prep"), tp("a.txt"), tp("b.txt"));
        int rc = system(cmd);
        mg_dataset ds;
        int ok = rc == 0 && mg_dataset_open(tp("prep"), &ds, err, sizeof err) == 0;
        if (ok) {
            ok = ds.token_dtype == MG_IDX_U16 && ds.n_tokens == 36 && ds.n_sequences == nwant[m] &&
                 ds.n_documents == nwant[m];
            for (int i = 0; ok && i < nwant[m]; i++) ok = mg_dataset_seq_len(&ds, i) == want[m][i];
            for (int i = 0; ok && i < 36; i++)
                ok = mg_dataset_token(&ds, i) == (unsigned char)(i < 30 ? a[i] : b[i - 30]);
            mg_dataset_close(&ds);
        }
        snprintf(label, sizeof label, "mg_prepare --documents %s: bytes and document bounds", modes[m]);
        CHECK(ok, label);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s --quiet --llmc %s %s", tool, tp("prep_llmc.bin"), tp("b.txt"));
    mg_dataset ds;
    int ok = system(cmd) == 0 && mg_dataset_open(tp("prep_llmc.bin"), &ds, err, sizeof err) == 0;
    if (ok) {
        ok = ds.format == MG_DATA_LLMC_TOKENS && ds.n_tokens == 6 && mg_dataset_token(&ds, 2) == '\n';
        mg_dataset_close(&ds);
    }
    CHECK(ok, "mg_prepare --llmc: llm.c token file of the bytes");
    snprintf(cmd, sizeof cmd, "%s --quiet -o %s %s %s 2>/dev/null", tool, tp("prep_bad"),
             tp("a.txt"), tp("missing.txt"));
    CHECK(system(cmd) != 0 && count_names("prep_bad") == 0,
          "mg_prepare: a missing input fails and writes nothing");
    /* inputs that are not small regular files: one stderr line, exit 1, nothing written, and
       a named pipe without a writer is refused at once (timeout 20 s ends a hang) */
    static const char *const inputs[3][2] = {{"adir", "is a directory"},
                                             {"pipe", "not a regular file"},
                                             {"huge.txt", "more than the 1073741824"}};
    mkdir(tp("adir"), 0755);           /* both may exist already (test_careless_input) */
    mkfifo(tp("pipe"), 0600);
    put_file(tp("huge.txt"), "", 0);
    int sparse = truncate(tp("huge.txt"), ((off_t)1 << 30) + 1) == 0;   /* no disk used */
    for (int i = 0; i < 3; i++) {
        char out[1024] = "", label[160];
        if (i == 2 && !sparse) continue;
        snprintf(cmd, sizeof cmd, "timeout 20 %s --quiet -o %s %s %s 2>&1 >/dev/null; "
                 "echo \"status $?\"", tool, tp("prep_bad"), tp("a.txt"), tp(inputs[i][0]));
        FILE *p = popen(cmd, "r");
        size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
        out[n] = 0;
        if (p) pclose(p);
        char *nl = strchr(out, '\n');
        snprintf(label, sizeof label, "mg_prepare: an input that is %s: one line, exit 1, nothing "
                 "written", i == 0 ? "a directory" : i == 1 ? "a named pipe" : "over 1 GiB");
        mg_test_report(!strncmp(out, "mg_prepare: ", 12) && nl && strstr(out, inputs[i][1]) &&
                       strstr(out, inputs[i][1]) < nl && !strcmp(nl + 1, "status 1\n") &&
                       count_names("prep_bad") == 0, label, "%.*s", nl ? (int)(nl - out) : 200,
                       out);
    }
    unlink(tp("huge.txt"));
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mg_test_data.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_json();
    test_mt19937();
    test_megatron();
    test_mock();
    test_sampler_errors();
    test_indexed_roundtrip();
    test_llmc_tokens();
    test_llmc_python();
    test_llmc_checkpoint();
    test_safetensors_roundtrip();
    test_safetensors_python();
    test_hf_config();
    test_hf_config_math();
    test_bad_indexed();
    test_bad_llmc();
    test_bad_safetensors();
    test_careless_input();
    test_atomic();
    test_mg_prepare();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return mg_test_summary();
}
