/* tools/mg_tokenize.c — encode text with a tokenizer (mg_tokenizer.h) and print the ids, or
   decode ids back to text. Flags are Megatron-LM's:
     build/mg_tokenize --tokenizer-type TYPE [--vocab-file F] [--merge-file F]
                       [--tokenizer-model F] [--tiktoken-pattern P] [--vocab-size V]
                       [--allow-special]
                       [--pieces] [--decode] [--text TEXT]
   TYPE: GPT2BPETokenizer (--vocab-file vocab.json --merge-file merges.txt), TikTokenizer
   (--vocab-file *.tiktoken [--tiktoken-pattern gpt2|r50k_base|cl100k_base|o200k_base]),
   HuggingFaceTokenizer (--vocab-file tokenizer.json), SentencePieceTokenizer/Llama2Tokenizer
   (--tokenizer-model tokenizer.model), NullTokenizer (--vocab-size V: the text is decimal
   ids 0 … V separated by single spaces, V the end of document), ByteTokenizer.
   Without --text it reads standard input. Prints one line: the ids separated by spaces
   (--pieces: id:"decoded bytes" per token, bytes outside printable ASCII as \xNN), then a line
   "N tokens, vocabulary V, eod E, bos B". --decode: the text is ids; prints the bytes.    */
#include "megatron.h"   /* mg_tokenizer_from_flags: the flags, checked as gpt_train does */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: mg_tokenize --tokenizer-type TYPE [--vocab-file F] [--merge-file F] [--tokenizer-model F]\n"
               "                   [--tiktoken-pattern P] [--vocab-size V] [--allow-special] [--pieces] [--decode]\n"
               "                   [--text TEXT]\n"
               "TYPE: GPT2BPETokenizer, TikTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, Llama2Tokenizer,\n"
               "      NullTokenizer (with --vocab-size V), ByteTokenizer. Without --text, reads standard input.\n");
}

int main(int argc, char **argv) {
    const char *type = NULL, *text = NULL, *vocab = NULL, *merges = NULL, *model = NULL;
    const char *pattern = NULL, *vocab_size = NULL;
    static const char *const valued[] = {"--tokenizer-type", "--vocab-file", "--merge-file",
                                         "--tokenizer-model", "--tiktoken-pattern", "--text",
                                         "--vocab-size"};
    const char **slot[] = {&type, &vocab, &merges, &model, &pattern, &text, &vocab_size};
    int allow = 0, pieces = 0, decode = 0;
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a];
        int k = 0;
        while (k < 7 && strcmp(f, valued[k])) k++;
        if (k < 7) {
            if (a + 1 >= argc) {
                fprintf(stderr, "mg_tokenize: %s needs a value (see --help)\n", f);
                return 2;
            }
            *slot[k] = argv[++a];
        }
        else if (!strcmp(f, "--allow-special")) allow = 1;
        else if (!strcmp(f, "--pieces")) pieces = 1;
        else if (!strcmp(f, "--decode")) decode = 1;
        else if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); return 0; }
        else { fprintf(stderr, "mg_tokenize: %s: unknown %s\n", f, f[0] == '-' ? "flag (see --help)"
                       : "argument (the text goes after --text, or on standard input)");
               return 2; }
    }
    if (!type) {
        fprintf(stderr, "mg_tokenize: --tokenizer-type is required (GPT2BPETokenizer, TikTokenizer, "
                        "HuggingFaceTokenizer, SentencePieceTokenizer, Llama2Tokenizer, "
                        "NullTokenizer or ByteTokenizer)\n");
        return 2;
    }
    char err[MG_ERRLEN];   /* the type's files checked as gpt_train and mg_prepare check them */
    long long null_vocab = -1;
    if (vocab_size) {
        char *end;
        null_vocab = strtoll(vocab_size, &end, 10);
        if (!*vocab_size || *end || null_vocab < 1 || mg_tok_type_from_name(type) != MG_TOK_NULL) {
            fprintf(stderr, "mg_tokenize: --vocab-size %s: %s\n", vocab_size,
                    mg_tok_type_from_name(type) != MG_TOK_NULL ? "applies to NullTokenizer" :
                    "expected a whole number >= 1");
            return 2;
        }
    }
    mg_tokenizer *t = mg_tokenizer_from_flags(type, vocab, merges, model, pattern, null_vocab, err,
                                              sizeof err);
    if (!t) { fprintf(stderr, "mg_tokenize: %s\n", err); return 1; }
    char *buf = NULL;
    size_t n = 0;
    if (text) n = strlen(text);
    else {
        /* n bytes read, and a NUL after them (room for it kept): --decode parses the ids as a
           string, and the input itself may hold NUL bytes, which encode takes as text      */
        size_t cap = 1 << 16;
        buf = (char *)malloc(cap);
        size_t r;
        while (buf && (r = fread(buf + n, 1, cap - 1 - n, stdin)) > 0) {
            n += r;
            if (n + 1 == cap) buf = (char *)realloc(buf, cap *= 2);
        }
        if (!buf) { fprintf(stderr, "mg_tokenize: out of memory reading standard input\n"); return 1; }
        if (ferror(stdin)) {
            fprintf(stderr, "mg_tokenize: cannot read standard input (%s)\n", strerror(errno));
            return 1;
        }
        buf[n] = 0;
        text = buf;
    }
    if (decode) {
        int64_t m = 0, cap = 16, V = mg_tokenizer_vocab_size(t);
        int32_t *ids = (int32_t *)malloc((size_t)cap * sizeof(int32_t));
        for (const char *p = text; p < text + n;) {
            char *e;
            long long v;
            if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',') { p++; continue; }
            errno = 0;
            v = strtoll(p, &e, 10);
            if (e == p) {
                fprintf(stderr, "mg_tokenize: --decode: '%c' is not part of an id\n", *p);
                return 2;
            }
            /* range-checked here, before the int32 an id is stored in could wrap it */
            if (errno == ERANGE || v < 0 || v >= V) {
                fprintf(stderr, "mg_tokenize: --decode: an id is outside 0..%lld (%.*s)\n",
                        (long long)V - 1, (int)(e - p), p);
                return 1;
            }
            if (m == cap) ids = (int32_t *)realloc(ids, (size_t)(cap *= 2) * sizeof(int32_t));
            ids[m++] = (int32_t)v;
            p = e;
        }
        int64_t k = mg_tokenizer_decode(t, ids, m, NULL, 0);
        if (k < 0) { fprintf(stderr, "mg_tokenize: --decode: an id is outside 0..%d (or names no token)\n", mg_tokenizer_vocab_size(t) - 1); return 1; }
        char *out = (char *)malloc((size_t)k + 1);
        mg_tokenizer_decode(t, ids, m, out, k);
        fwrite(out, 1, (size_t)k, stdout);
        printf("\n");
        return 0;
    }
    int64_t m = mg_tokenizer_encode(t, text, n, allow, NULL, 0);
    if (m < 0) {   /* NullTokenizer: not ids */
        fprintf(stderr, "mg_tokenize: the text is not %s ids (decimal, 0 … %d, separated by "
                "single spaces)\n", type, mg_tokenizer_vocab_size(t) - 1);
        return 1;
    }
    int32_t *ids = (int32_t *)malloc((size_t)(m + 1) * sizeof(int32_t));
    mg_tokenizer_encode(t, text, n, allow, ids, m);
    for (int64_t i = 0; i < m; i++) {
        printf(i ? " " : "");
        if (!pieces) { printf("%d", ids[i]); continue; }
        char piece[256];
        int64_t k = mg_tokenizer_decode(t, ids + i, 1, piece, sizeof piece);
        printf("%d:\"", ids[i]);
        for (int64_t j = 0; j < k && j < (int64_t)sizeof piece; j++) {
            unsigned char c = (unsigned char)piece[j];
            if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') putchar(c); else printf("\\x%02x", c);
        }
        printf("\"");
    }
    printf("\n%lld tokens, vocabulary %d, eod %d, bos %d\n", (long long)m, mg_tokenizer_vocab_size(t),
           mg_tokenizer_eod(t), mg_tokenizer_bos(t));
    free(ids); free(buf);
    mg_tokenizer_free(t);
    return 0;
}
