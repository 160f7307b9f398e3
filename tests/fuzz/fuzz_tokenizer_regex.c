/* tests/fuzz/fuzz_tokenizer_regex.c — the pre-tokenization regex engine, through a
   tokenizer.json whose Split pattern is the input.
   Input layout: the pattern up to the first NUL byte, then the text. The tokenizer.json has
   the 256 byte tokens and no merges, so encode is lossless; the pieces must tile the text
   (ascending ends, the last at its end). A pattern that does not compile is one line.     */
#include "fuzz_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *z = (const uint8_t *)memchr(data, 0, size);
    if (!z) return 0;
    size_t pl = (size_t)(z - data);
    const uint8_t *text = z + 1;
    size_t tl = size - pl - 1;
    /* {"model":{"type":"BPE","vocab":{<256 byte-level chars>},"merges":[]},"pre_tokenizer":
       {"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"<pattern>"},
       "behavior":"Isolated","invert":false},{"type":"ByteLevel","use_regex":false}]}}       */
    char *j = (char *)malloc(8192 + 6 * pl);
    size_t n = (size_t)sprintf(j, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0, extra = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        unsigned c = printable ? (unsigned)b : 256u + (unsigned)extra++;
        n += (size_t)sprintf(j + n, "%s\"\\u%04x\":%d", b ? "," : "", c, b);
    }
    n += (size_t)sprintf(j + n, "},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                                "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"");
    for (size_t i = 0; i < pl; i++) {
        unsigned char c = data[i];
        if (c == '"' || c == '\\') { j[n++] = '\\'; j[n++] = (char)c; }
        else if (c < 0x20) n += (size_t)sprintf(j + n, "\\u%04x", c);
        else j[n++] = (char)c;
    }
    n += (size_t)sprintf(j + n, "\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"use_regex\":false}]}}");
    mg_tokenizer_desc d = {MG_TOK_HF, mg_fuzz_path("tokenizer.json"), NULL, NULL};
    mg_fuzz_put(d.vocab_file, j, n);
    free(j);
    char err[512] = "";
    mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
    if (!t) { mg_fuzz_check_load_error(t, err); return 0; }
    int64_t np = mg_tokenizer_pretokenize(t, (const char *)text, tl, NULL, 0);
    int64_t *ends = (int64_t *)malloc((size_t)(np + 1) * sizeof(int64_t));
    MG_FUZZ_ASSERT(mg_tokenizer_pretokenize(t, (const char *)text, tl, ends, np) == np, "pieces changed");
    for (int64_t i = 0; i < np; i++) MG_FUZZ_ASSERT(ends[i] > (i ? ends[i - 1] : 0), "piece %lld empty or out of order", (long long)i);
    MG_FUZZ_ASSERT(tl == 0 ? np == 0 : ends[np - 1] == (int64_t)tl, "pieces do not end at the text's end");
    free(ends);
    mg_fuzz_check_tokenizer(t, text, tl, 1);
    mg_tokenizer_free(t);
    return 0;
}
