/* tests/fuzz/fuzz_tokenizer_json.c — the JSON loaders: Hugging Face tokenizer.json, and GPT-2's
   vocab.json + merges.txt.
   Input layout: byte 0 even: the rest is a tokenizer.json; odd: the rest is vocab.json up to
   the first NUL byte, then merges.txt. A loaded tokenizer then encodes the input itself and a
   fixed text (mg_fuzz_check_tokenizer; GPT-2 is lossless). See fuzz_tokenizer.h.          */
#include "fuzz_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int gpt2 = data[0] & 1;
    data++; size--;
    char err[512] = "";
    mg_tokenizer_desc d = {MG_TOK_HF, mg_fuzz_path("tokenizer.json"), NULL, NULL};
    if (gpt2) {
        const uint8_t *z = (const uint8_t *)memchr(data, 0, size);
        size_t vl = z ? (size_t)(z - data) : size;
        d.type = MG_TOK_GPT2_BPE;
        d.vocab_file = mg_fuzz_path("vocab.json");
        d.merge_file = mg_fuzz_path("merges.txt");
        mg_fuzz_put(d.vocab_file, data, vl);
        mg_fuzz_put(d.merge_file, data + vl + (z != NULL), size - vl - (z != NULL));
    } else mg_fuzz_put(d.vocab_file, data, size);
    mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
    if (!t) { mg_fuzz_check_load_error(t, err); return 0; }
    static const char text[] = "Hello, world! It's 2024 \xe2\x80\x94 caf\xc3\xa9 <|endoftext|>\xff\xfe  \n\n";
    mg_fuzz_check_tokenizer(t, text, sizeof text - 1, gpt2);
    mg_fuzz_check_tokenizer(t, data, size < 512 ? size : 512, gpt2);
    mg_tokenizer_free(t);
    return 0;
}
