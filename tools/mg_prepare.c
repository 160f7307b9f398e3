/* mg_prepare — builds a token dataset from text files, for gpt_train --data-path.

     build/mg_prepare -o build/corpus TEXTFILE...                  Megatron indexed dataset
     build/mg_prepare --documents paragraph -o build/corpus TEXTFILE...
     build/mg_prepare --llmc build/corpus_tokens.bin TEXTFILE...   llm.c token file
   (`make train` passes the text files shipped in data/; see data/README.)

   Tokens are bytes: vocabulary 256, token = the byte's value (UTF-8 text stays UTF-8; a model
   trained on it prints bytes back). No tokenizer files, no special tokens.
   Documents (Megatron's GPTDataset splits --split over them):
     file       one document per input file (default);
     paragraph  a document ends after each run of blank lines;
     line       a document per line.
   Every document keeps its newlines, so the documents concatenated are the input bytes
   exactly; empty documents are skipped. Each document is one sequence.
   Output is written atomically (temporary name, fsync, rename): an interrupted run leaves any
   earlier dataset as it was. The llm.c format has no document boundaries (llm.c marks them
   with GPT-2's token 50256, which a byte vocabulary does not have): all bytes, one stream. */
#include "mg_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { DOC_FILE, DOC_PARAGRAPH, DOC_LINE } doc_mode;

static void usage(FILE *to) {
    fprintf(to,
        "usage: mg_prepare (-o PREFIX | --llmc FILE) [--documents file|paragraph|line]\n"
        "                  [--dtype uint8|uint16|int32] [--quiet] TEXTFILE...\n"
        "  -o, --output-prefix PREFIX  write a Megatron indexed dataset PREFIX.bin + PREFIX.idx\n"
        "  --llmc FILE                 write an llm.c token file (uint16, one stream)\n"
        "  --documents MODE            file (default): one document per file; paragraph: split\n"
        "                              after blank lines; line: one document per line\n"
        "  --dtype T                   token storage of the indexed dataset (default uint16, as\n"
        "                              Megatron's preprocess_data for vocabularies < 65500)\n"
        "Tokens are bytes (vocabulary 256). Each TEXTFILE is a regular file of at most 1 GiB.\n");
}

/* Each input file is read whole (its tokens are int32: 5 bytes of memory per input byte).  */
#define MAX_INPUT_BYTES ((size_t)1 << 30)

/* End (exclusive) of the document starting at `start` in text[0..n).                     */
static long document_end(const unsigned char *text, long n, long start, doc_mode mode) {
    if (mode == DOC_FILE) return n;
    long i = start;
    if (mode == DOC_LINE) {
        while (i < n && text[i] != '\n') i++;
        return i < n ? i + 1 : n;
    }
    /* paragraph: up to the first blank line (a '\n' followed by optional spaces/tabs/'\r'
       and another '\n'), then through all following blank lines.                        */
    while (i < n) {
        if (text[i++] != '\n') continue;
        long j = i;
        while (j < n && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
        if (j < n && text[j] == '\n') {  /* blank line: swallow the whole run */
            i = j + 1;
            for (;;) {
                j = i;
                while (j < n && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
                if (j < n && text[j] == '\n') i = j + 1; else break;
            }
            return i;
        }
    }
    return n;
}

int main(int argc, char **argv) {
    const char *prefix = NULL, *llmc = NULL;
    doc_mode mode = DOC_FILE;
    mg_idx_dtype dtype = MG_IDX_U16;
    int quiet = 0, first_file = 0;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        int has_value = a + 1 < argc;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) { usage(stdout); return 0; }
        if ((!strcmp(arg, "-o") || !strcmp(arg, "--output-prefix")) && has_value) prefix = argv[++a];
        else if (!strcmp(arg, "--llmc") && has_value) llmc = argv[++a];
        else if (!strcmp(arg, "--quiet")) quiet = 1;
        else if (!strcmp(arg, "--documents") && has_value) {
            const char *m = argv[++a];
            if (!strcmp(m, "file")) mode = DOC_FILE;
            else if (!strcmp(m, "paragraph")) mode = DOC_PARAGRAPH;
            else if (!strcmp(m, "line")) mode = DOC_LINE;
            else { fprintf(stderr, "mg_prepare: --documents %s: expected file, paragraph or line\n", m); return 2; }
        } else if (!strcmp(arg, "--dtype") && has_value) {
            const char *t = argv[++a];
            if (!strcmp(t, "uint8")) dtype = MG_IDX_U8;
            else if (!strcmp(t, "uint16")) dtype = MG_IDX_U16;
            else if (!strcmp(t, "int32")) dtype = MG_IDX_I32;
            else { fprintf(stderr, "mg_prepare: --dtype %s: expected uint8, uint16 or int32\n", t); return 2; }
        } else if (arg[0] == '-' && arg[1]) {
            fprintf(stderr, "mg_prepare: unknown or incomplete option %s (see --help)\n", arg);
            return 2;
        } else {
            first_file = a;
            break;
        }
    }
    if (!first_file || (!prefix) == (!llmc)) {
        fprintf(stderr, "mg_prepare: give exactly one of -o PREFIX / --llmc FILE, then text files "
                        "(see --help)\n");
        return 2;
    }

    char err[MG_ERRLEN] = "";
    mg_idx_writer w;
    int32_t *stream = NULL;            /* llm.c: all tokens */
    int64_t n_stream = 0, cap_stream = 0, n_docs = 0, n_tokens = 0;
    int32_t *tokens = NULL;
    if (prefix && mg_idx_writer_begin(&w, prefix, dtype, err, sizeof err) != 0) {
        fprintf(stderr, "mg_prepare: %s\n", err);
        return 1;
    }
    int rc = 0;
    for (int a = first_file; a < argc && rc == 0; a++) {
        char *bytes = NULL;
        size_t len = 0;
        /* a directory, a named pipe or an oversized file: one line, nothing waited on */
        if (mg_read_file(argv[a], MAX_INPUT_BYTES, &bytes, &len, err, sizeof err) != 0) {
            rc = 1;
            break;
        }
        const unsigned char *text = (const unsigned char *)bytes;
        long n = (long)len;
        free(tokens);
        tokens = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
        if (!tokens) {
            snprintf(err, sizeof err, "%s: out of memory for %ld tokens", argv[a], n);
            free(bytes);   /* MG_FREE of the library: free by default */
            rc = 1;
            break;
        }
        for (long i = 0; i < n; i++) tokens[i] = text[i];
        if (llmc) {
            if (n_stream + n > cap_stream) {
                cap_stream = 2 * (n_stream + n);
                int32_t *grown = (int32_t *)malloc((size_t)cap_stream * sizeof(int32_t));
                if (!grown) {
                    snprintf(err, sizeof err, "out of memory for %lld tokens",
                             (long long)cap_stream);
                    free(bytes);
                    rc = 1;
                    break;
                }
                if (n_stream) memcpy(grown, stream, (size_t)n_stream * sizeof(int32_t));
                free(stream);
                stream = grown;
            }
            memcpy(stream + n_stream, tokens, (size_t)n * sizeof(int32_t));
            n_stream += n;
        }
        for (long start = 0; start < n && rc == 0;) {
            long end = document_end(text, n, start, mode);
            n_docs++;
            n_tokens += end - start;
            if (prefix) {
                rc = mg_idx_writer_add(&w, tokens + start, end - start, err, sizeof err);
                mg_idx_writer_end_document(&w);
            }
            start = end;
        }
        free(bytes);
    }
    free(tokens);
    if (rc == 0 && prefix) rc = mg_idx_writer_finish(&w, err, sizeof err);
    else if (prefix) mg_idx_writer_abort(&w);
    if (rc == 0 && llmc) {
        if (n_stream == 0) {
            snprintf(err, sizeof err, "%s: no tokens to write (empty input)", llmc);
            rc = 1;
        } else {
            rc = mg_llmc_tokens_write(llmc, stream, n_stream, err, sizeof err);
        }
    }
    free(stream);
    if (rc != 0) {
        if (err[0]) fprintf(stderr, "mg_prepare: %s\n", err);
        return 1;
    }
    if (!quiet) {
        if (prefix)
            printf("mg_prepare: %d file(s), %lld documents, %lld tokens (bytes, vocab 256) -> "
                   "%s.bin, %s.idx\n", argc - first_file, (long long)n_docs, (long long)n_tokens,
                   prefix, prefix);
        else
            printf("mg_prepare: %d file(s), %lld tokens (bytes, vocab 256) -> %s (llm.c)\n",
                   argc - first_file, (long long)n_tokens, llmc);
    }
    return 0;
}
