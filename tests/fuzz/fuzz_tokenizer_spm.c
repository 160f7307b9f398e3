/* tests/fuzz/fuzz_tokenizer_spm.c — SentencePiece tokenizer.model (ModelProto protobuf).
   Input layout: the model file. A loaded tokenizer encodes the input and a fixed text
   (mg_fuzz_check_tokenizer; not lossless: the normalizer may drop spaces). See
   fuzz_tokenizer.h.                                                                        */
#include "fuzz_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mg_tokenizer_desc d = {MG_TOK_SENTENCEPIECE, mg_fuzz_path("tokenizer.model"), NULL, NULL};
    mg_fuzz_put(d.vocab_file, data, size);
    char err[512] = "";
    mg_tokenizer *t = mg_tokenizer_load(&d, err, sizeof err);
    if (!t) { mg_fuzz_check_load_error(t, err); return 0; }
    static const char text[] = "  Hello,  world! <s> caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xff  ";
    mg_fuzz_check_tokenizer(t, text, sizeof text - 1, 0);
    mg_fuzz_check_tokenizer(t, data, size < 512 ? size : 512, 0);
    mg_tokenizer_free(t);
    return 0;
}
