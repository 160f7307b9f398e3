/* tests/fuzz/fuzz_tokenizer.h — what the mg_tokenizer.h fuzz harnesses share (with fuzz_util.h:
   scratch files, one-line error checks, MG_FUZZ_ASSERT).
   mg_fuzz_check_tokenizer: a tokenizer that loaded must encode any bytes, with and without
   specials, to ids inside its vocabulary, the cap protocol must agree with a full call, decode
   must accept every id encode gave, and where the format is lossless (bytes, tiktoken, GPT-2
   vocab.json + merges.txt: every byte has a token) decode(encode(x)) == x, or, for a
   tokenizer.json with a normalizer (lossless = MG_FUZZ_RT_NF + MG_NF_*), decode(encode(x)) ==
   mg_tokenizer_normalize(x), and NF idempotent: NF(NF(x)) == NF(x).                          */
#ifndef MG_FUZZ_TOKENIZER_H
#define MG_FUZZ_TOKENIZER_H
#include "fuzz_util.h"
#include "mg_tokenizer.h"

#define MG_FUZZ_RT_NF 100
/* mg_unicode_normalize into a new buffer (*n: its length)                                   */
static inline char *mg_fuzz_normalize(int form, const void *text, size_t len, size_t *n) {
    int64_t k = mg_unicode_normalize(form, (const char *)text, len, NULL, 0);
    char *b = (char *)malloc((size_t)k + 1);
    MG_FUZZ_ASSERT(b && mg_unicode_normalize(form, (const char *)text, len, b, k) == k, "normalize size changed");
    *n = (size_t)k;
    return b;
}
static inline void mg_fuzz_check_tokenizer(const mg_tokenizer *t, const void *text, size_t n, int lossless) {
    int32_t V = mg_tokenizer_vocab_size(t);
    MG_FUZZ_ASSERT(V > 0, "vocabulary size %d", V);
    MG_FUZZ_ASSERT(mg_tokenizer_eod(t) >= -1 && mg_tokenizer_eod(t) < V, "eod %d", mg_tokenizer_eod(t));
    MG_FUZZ_ASSERT(mg_tokenizer_bos(t) >= -1 && mg_tokenizer_bos(t) < V, "bos %d", mg_tokenizer_bos(t));
    for (int allow = 0; allow < 2; allow++) {
        int64_t m = mg_tokenizer_encode(t, (const char *)text, n, allow, NULL, 0);
        MG_FUZZ_ASSERT(m >= 0 && m <= 3 * (int64_t)n + 4, "%lld ids for %zu bytes", (long long)m, n);
        int32_t *ids = (int32_t *)malloc((size_t)(m + 1) * sizeof(int32_t));
        int32_t few[3] = {-7, -7, -7};
        MG_FUZZ_ASSERT(mg_tokenizer_encode(t, (const char *)text, n, allow, ids, m) == m, "second call");
        MG_FUZZ_ASSERT(mg_tokenizer_encode(t, (const char *)text, n, allow, few, 2) == m, "capped call");
        MG_FUZZ_ASSERT(few[2] == -7 && (m < 1 || few[0] == ids[0]) && (m < 2 || few[1] == ids[1]), "cap not respected");
        for (int64_t i = 0; i < m; i++) MG_FUZZ_ASSERT(ids[i] >= 0 && ids[i] < V, "id %d of %d", ids[i], V);
        int64_t k = mg_tokenizer_decode(t, ids, m, NULL, 0);
        MG_FUZZ_ASSERT(k >= 0, "decode refused encode's ids");
        char *out = (char *)malloc((size_t)k + 1);
        MG_FUZZ_ASSERT(mg_tokenizer_decode(t, ids, m, out, k) == k, "decode size changed");
        if (lossless >= MG_FUZZ_RT_NF) {
            size_t a, b;
            char *nf = mg_fuzz_normalize(lossless - MG_FUZZ_RT_NF, text, n, &a);
            char *nf2 = mg_fuzz_normalize(lossless - MG_FUZZ_RT_NF, nf, a, &b);
            MG_FUZZ_ASSERT(a == b && memcmp(nf, nf2, a) == 0, "NF(NF(x)) != NF(x) (%zu vs %zu bytes)", b, a);
            /* the spans between raw-matched added tokens are normalized each on its own        */
            int64_t tn = mg_tokenizer_normalize(t, (const char *)text, n, allow, NULL, 0);
            char *tx = (char *)malloc((size_t)tn + 1);
            MG_FUZZ_ASSERT(mg_tokenizer_normalize(t, (const char *)text, n, allow, tx, tn) == tn, "normalize size changed");
            MG_FUZZ_ASSERT(k == tn && memcmp(out, tx, (size_t)tn) == 0, "decode(encode(x)) != normalized x (%lld vs %lld bytes)",
                           (long long)k, (long long)tn);
            free(nf); free(nf2); free(tx);
        } else if (lossless) MG_FUZZ_ASSERT(k == (int64_t)n && memcmp(out, text, n) == 0, "decode(encode(x)) != x (%lld vs %zu bytes)", (long long)k, n);
        free(out);
        free(ids);
    }
}
/* A rejected file: NULL and one non-empty line.                                              */
static inline void mg_fuzz_check_load_error(const mg_tokenizer *t, const char *err) {
    MG_FUZZ_ASSERT(t == NULL, "loaded");
    mg_fuzz_check_error(-1, err);
}
#endif
