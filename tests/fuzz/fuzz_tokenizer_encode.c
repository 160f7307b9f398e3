/* tests/fuzz/fuzz_tokenizer_encode.c — encode/decode of any bytes with the real vocabularies:
   GPT-2 and cl100k_base ranks (.venv/share/vocab, make deps), GPT-2 vocab.json + merges.txt,
   the HF GPT-2 and Llama-3-style tokenizer.json and the SentencePiece model that
   build/test_tokenizer writes into build/tok (run it once first).
   Input layout: byte 0 picks the tokenizer (mod 7); the rest is the text.
   decode(encode(x)) == x for all but SentencePiece (its normalizer turns invalid UTF-8 into
   U+FFFD, as sentencepiece does). See fuzz_tokenizer.h.                                    */
#include "fuzz_tokenizer.h"

static mg_tokenizer *toks[7];
static void load_all(void) {
    static const mg_tokenizer_desc d[7] = {
        {MG_TOK_TIKTOKEN, ".venv/share/vocab/gpt2.tiktoken", NULL, NULL},
        {MG_TOK_TIKTOKEN, ".venv/share/vocab/cl100k_base.tiktoken", NULL, "cl100k_base"},
        {MG_TOK_TIKTOKEN, ".venv/share/vocab/cl100k_base.tiktoken", NULL, "o200k_base"},
        {MG_TOK_GPT2_BPE, "build/tok/gpt2_vocab.json", "build/tok/gpt2_merges.txt", NULL},
        {MG_TOK_HF, "build/tok/hf_gpt2.json", NULL, NULL},
        {MG_TOK_HF, "build/tok/hf_llama3.json", NULL, NULL},
        {MG_TOK_SENTENCEPIECE, "build/tok/spm.model", NULL, NULL}};
    for (int i = 0; i < 7; i++) {
        char err[512];
        toks[i] = mg_tokenizer_load(&d[i], err, sizeof err);
        if (!toks[i]) { fprintf(stderr, "fuzz_tokenizer_encode: %s (make deps; run build/test_tokenizer once)\n", err); abort(); }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!toks[0]) load_all();
    if (size < 1) return 0;
    int k = data[0] % 7;
    mg_fuzz_check_tokenizer(toks[k], data + 1, size - 1, k != 6);
    return 0;
}
