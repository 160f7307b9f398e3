/* tests/fuzz/fuzz_tokenizer_encode.c — encode/decode of any bytes with the real vocabularies:
   GPT-2 and cl100k_base ranks (.venv/share/vocab, make deps), GPT-2 vocab.json + merges.txt,
   the HF GPT-2, Llama-3-style, Qwen2-style (normalizer NFC) and Sequence(NFKC, NFD)
   tokenizer.json and the SentencePiece model that build/test_tokenizer writes into build/tok
   (run it once first).
   Input layout: byte 0 picks the tokenizer (mod 9); the rest is the text.
   decode(encode(x)) == x for all but SentencePiece (its normalizer turns invalid UTF-8 into
   U+FFFD, as sentencepiece does) and the two with normalizers: decode(encode(x)) ==
   mg_tokenizer_normalize(x) there (NFC, NFKD of each span between added tokens); and for those, NFC(NFD(x)) == NFC(x), NFKC(NFKD(x)) == NFKC(x).
   See fuzz_tokenizer.h.                                                                     */
#include "fuzz_tokenizer.h"

#define NTOK 9
static mg_tokenizer *toks[NTOK];
static void load_all(void) {
    static const mg_tokenizer_desc d[NTOK] = {
        {MG_TOK_TIKTOKEN, ".venv/share/vocab/gpt2.tiktoken", NULL, NULL},
        {MG_TOK_TIKTOKEN, ".venv/share/vocab/cl100k_base.tiktoken", NULL, "cl100k_base"},
        {MG_TOK_TIKTOKEN, ".venv/share/vocab/cl100k_base.tiktoken", NULL, "o200k_base"},
        {MG_TOK_GPT2_BPE, "build/tok/gpt2_vocab.json", "build/tok/gpt2_merges.txt", NULL},
        {MG_TOK_HF, "build/tok/hf_gpt2.json", NULL, NULL},
        {MG_TOK_HF, "build/tok/hf_llama3.json", NULL, NULL},
        {MG_TOK_SENTENCEPIECE, "build/tok/spm.model", NULL, NULL},
        {MG_TOK_HF, "build/tok/hf_qwen2.json", NULL, NULL},
        {MG_TOK_HF, "build/tok/hf_nfkc_seq.json", NULL, NULL}};
    for (int i = 0; i < NTOK; i++) {
        char err[512];
        toks[i] = mg_tokenizer_load(&d[i], err, sizeof err);
        if (!toks[i]) { fprintf(stderr, "fuzz_tokenizer_encode: %s (make deps; run build/test_tokenizer once)\n", err); abort(); }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!toks[0]) load_all();
    if (size < 1) return 0;
    int k = data[0] % NTOK;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    if (k >= 7) {
        /* composing the full decomposition gives the composed form                            */
        static const int pairs[2][2] = {{MG_NF_NFD, MG_NF_NFC}, {MG_NF_NFKD, MG_NF_NFKC}};
        for (int p = 0; p < 2; p++) {
            size_t a, b, c;
            char *d = mg_fuzz_normalize(pairs[p][0], text, n, &a);
            char *x = mg_fuzz_normalize(pairs[p][1], d, a, &b), *y = mg_fuzz_normalize(pairs[p][1], text, n, &c);
            MG_FUZZ_ASSERT(b == c && memcmp(x, y, b) == 0, "form %d of form %d of x differs from form %d of x", pairs[p][1], pairs[p][0], pairs[p][1]);
            free(d); free(x); free(y);
        }
    }
    mg_fuzz_check_tokenizer(toks[k], text, n, k == 6 ? 0 : k == 7 ? MG_FUZZ_RT_NF + MG_NF_NFC : k == 8 ? MG_FUZZ_RT_NF + MG_NF_NFKD : 1);
    return 0;
}
