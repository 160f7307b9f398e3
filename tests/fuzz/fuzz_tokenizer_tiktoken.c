/* tests/fuzz/fuzz_tokenizer_tiktoken.c — tiktoken rank files ("base64 rank" lines).
   Input layout: byte 0 picks the pattern (0 guessed from the size, 1 gpt2, 2 cl100k_base,
   3 o200k_base, 4 an unknown name); the rest is the rank file. A loaded tokenizer encodes the
   input and a fixed text, losslessly (every byte has a rank). See fuzz_tokenizer.h.        */
#include "fuzz_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const pats[5] = {NULL, "gpt2", "cl100k_base", "o200k_base", "p50k_edit"};
    if (size < 1) return 0;
    mg_tokenizer_desc d = {MG_TOK_TIKTOKEN, mg_fuzz_path("ranks.tiktoken"), NULL, pats[data[0] % 5]};
    mg_fuzz_put(d.vocab_file, data + 1, size - 1);
    char err[512] = "";
    mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
    if (!t) { mg_fuzz_check_load_error(t, err); return 0; }
    static const char text[] = "Hello, world! I'LL 12345 caf\xc3\xa9 <|endoftext|>\xed\xa0\x80 \t\n\n  x";
    mg_fuzz_check_tokenizer(t, text, sizeof text - 1, 1);
    mg_fuzz_check_tokenizer(t, data, size < 512 ? size : 512, 1);
    mg_tokenizer_free(t);
    return 0;
}
