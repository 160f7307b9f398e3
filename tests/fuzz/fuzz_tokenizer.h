/* tests/fuzz/fuzz_tokenizer.h — what the mg_tokenizer.h fuzz harnesses share (with fuzz_util.h:
   scratch files, one-line error checks, MG_FUZZ_ASSERT).
   mg_fuzz_check_tokenizer: a tokenizer that loaded must encode any bytes, with and without
   specials, to ids inside its vocabulary, the cap protocol must agree with a full call, decode
   must accept every id encode gave, and where the format is lossless (bytes, tiktoken, GPT-2
   vocab.json + merges.txt: every byte has a token) decode(encode(x)) == x.                   */
#ifndef MG_FUZZ_TOKENIZER_H
#define MG_FUZZ_TOKENIZER_H
#include "fuzz_util.h"
#include "mg_tokenizer.h"

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
        if (lossless) MG_FUZZ_ASSERT(k == (int64_t)n && memcmp(out, text, n) == 0, "decode(encode(x)) != x (%lld vs %zu bytes)", (long long)k, n);
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
