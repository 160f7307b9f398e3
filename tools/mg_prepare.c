/* mg_prepare — Megatron-LM's tools/preprocess_data.py in C: text in, a token dataset out for
   gpt_train --data-path. docs/data-preparation.md is the manual.

     build/mg_prepare --input corpus.jsonl --output-prefix corpus --json-keys text \
         --tokenizer-type GPT2BPETokenizer --vocab-file vocab.json --merge-file merges.txt \
         --append-eod --workers 4
       -> corpus_text_document.bin + corpus_text_document.idx
     build/mg_prepare -o corpus --documents paragraph TEXTFILE...     plain text files
     build/mg_prepare --llmc corpus_tokens.bin TEXTFILE...            llm.c token file

   JSON lines (--input; a .gz file is read through zlib): each line is one JSON object; for
   each --json-keys key its value — a string, or a list of strings (one sequence each) — is
   one document, as Megatron's Encoder.encode does it: every string is tokenized, empty token
   lists are dropped, with --append-eod the tokenizer's end-of-document id ends a non-empty
   document (its last sequence grows by one); the document is added to PREFIX_KEY_document
   with IndexedDatasetBuilder.add_document's rule — a document with no tokens is still a
   document (an entry of the document index with no sequences), as Megatron writes it.
   Special-token strings in the text are ordinary text (Megatron's tokenize does not parse
   them either). A line that is not such an object (bad JSON, a missing key, a value of
   another type, a \u0000 inside a string) stops the run naming FILE:LINE, or with
   --bad-lines skip is reported (FILE:LINE: why) and left out.
   Plain text files (positional, options before or after them): documents per file, paragraph
   or line (--documents); each document keeps its newlines and the blank lines after it, so
   no document is blank; a file that is empty or blank adds none.
   Tokens: --tokenizer-type (Megatron-LM's names; default ByteTokenizer: id = byte value,
   vocabulary 256). Token dtype uint16 when the vocabulary is < 65,500, else int32 (Megatron's
   DType.optimal_dtype), unless --dtype says. An llm.c token file (--llmc) is of llm.c's kind
   for the vocabulary, as llm.c's data scripts pick it by the tokenizer (data_common.py
   write_datafile's model_desc): the GPT-2 kind (uint16) for a vocabulary of at most 65,536
   ids, else the Llama-3 kind (uint32).
   Workers: --workers N threads encode a batch of lines (or documents) at a time; the writer
   adds them in input order, so the output is byte-identical for every N.
   Progress: on a terminal (stderr), every --log-interval documents: documents, MB/s, percent
   of the input read and the time left. Output is atomic (temporary names, fsync, rename).   */
#include "megatron.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

typedef enum { DOC_FILE, DOC_PARAGRAPH, DOC_LINE } doc_mode;
typedef enum { BAD_STOP, BAD_SKIP } bad_mode;

#define MAX_KEYS 16
/* Each plain text file is read whole (its tokens are int32: 5 bytes of memory per byte).   */
#define MAX_INPUT_BYTES ((size_t)1 << 30)
/* JSON lines are encoded in batches of this many lines (or bytes), then written in order.   */
#define BATCH_LINES 4096
#define BATCH_BYTES ((size_t)64 << 20)
/* Why NullTokenizer refused a text.                                                         */
#define NOT_IDS "not NullTokenizer ids (decimal ids 0 … V separated by single spaces, V = " \
                "--vocab-size)"

typedef struct prep_args {
    const char *input, *output_prefix, *llmc;
    const char *keys[MAX_KEYS];
    int n_keys;
    const char *tokenizer_type, *vocab_file, *merge_file, *tokenizer_model, *tiktoken_pattern;
    int64_t null_vocab_size;     /* --vocab-size (NullTokenizer); -1 not given                */
    int append_eod, quiet, workers, dtype_given;
    mg_idx_dtype dtype;
    int64_t log_interval;
    doc_mode mode;
    bad_mode bad;
    char **files;                /* plain text inputs (positional, wherever they stand)      */
    int n_files;
} prep_args;

static void usage(FILE *to) {
    fprintf(to,
        "usage: mg_prepare --input FILE.jsonl[.gz] --output-prefix PREFIX [options]\n"
        "       mg_prepare (-o PREFIX | --llmc FILE) [options] TEXTFILE...\n"
        "JSON lines (Megatron-LM's preprocess_data):\n"
        "  --input FILE                one JSON object per line (.gz read through zlib)\n"
        "  --json-keys KEY...          keys whose text is tokenized, one dataset each: "
        "PREFIX_KEY_document (default text)\n"
        "  --bad-lines stop|skip       a line that is not such an object stops the run "
        "(default) or is reported and skipped\n"
        "Plain text files:\n"
        "  -o, --output-prefix PREFIX  write PREFIX.bin + PREFIX.idx (jsonl: "
        "PREFIX_KEY_document.bin/.idx)\n"
        "  --llmc FILE                 write an llm.c token file (one stream; GPT-2 kind,\n"
        "                              uint16, up to 65,536 ids, else Llama-3 kind, uint32)\n"
        "  --documents MODE            file (default): one document per file; paragraph: split\n"
        "                              after blank lines; line: one document per line\n"
        "Tokenizer (Megatron-LM's flags):\n"
        "  --tokenizer-type NAME       GPT2BPETokenizer, TikTokenizer, HuggingFaceTokenizer,\n"
        "                              SentencePieceTokenizer, Llama2Tokenizer, NullTokenizer,\n"
        "                              ByteTokenizer (default ByteTokenizer: id = byte,\n"
        "                              vocabulary 256)\n"
        "  --vocab-size V              NullTokenizer: the text is decimal ids 0 … V-1 separated\n"
        "                              by single spaces; V is its end-of-document id\n"
        "  --vocab-file FILE           GPT2BPETokenizer: vocab.json (the others: their one "
        "file,\n                              as --tokenizer-model)\n"
        "  --merge-file FILE           GPT2BPETokenizer: merges.txt\n"
        "  --tokenizer-model FILE      TikTokenizer: the .tiktoken rank file; "
        "HuggingFaceTokenizer:\n"
        "                              tokenizer.json (or its directory); SentencePiece: "
        "tokenizer.model\n"
        "  --tiktoken-pattern NAME     TikTokenizer: gpt2, r50k_base, cl100k_base, o200k_base\n"
        "  --append-eod                end every non-empty document with the end-of-document "
        "id\n"
        "Output and run:\n"
        "  --dtype uint8|uint16|int32  token storage (default: uint16 when the vocabulary is "
        "< 65500, else int32)\n"
        "  --workers N                 encoding threads (default 1); the output is the same "
        "for every N\n"
        "  --log-interval N            progress every N documents on a terminal (default "
        "1000)\n"
        "  --quiet                     no summary line\n"
        "--split-sentences (NLTK) is not available: give a document's sentences as a JSON list "
        "of strings.\n");
}

/* ---- options ------------------------------------------------------------------------------ */
static int die_usage(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "mg_prepare: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

/* An output that names an input (the same file, under any name) would be renamed over it
   once the run ends: refused with one line (2), before anything is read.                 */
static int output_overwrites_input(const prep_args *a) {
    char out[MAX_KEYS * 2 + 1][600];
    int n_out = 0;
    if (a->llmc) snprintf(out[n_out++], sizeof out[0], "%s", a->llmc);
    for (int k = 0; a->output_prefix && k < (a->input ? a->n_keys : 1); k++)
        for (int e = 0; e < 2; e++)
            snprintf(out[n_out++], sizeof out[0], a->input ? "%s_%s_document.%s" : "%s%s.%s",
                     a->output_prefix, a->input ? a->keys[k] : "", e ? "idx" : "bin");
    for (int o = 0; o < n_out; o++)
        for (int i = 0; i < (a->input ? 1 : a->n_files); i++) {
            const char *in = a->input ? a->input : a->files[i];
            if (mg_same_file(out[o], in))
                return die_usage("%s: the output would overwrite the input %s (give another "
                                 "output name)", out[o], in);
        }
    return 0;
}

/* Parses argv into a; returns 0, 1 (help printed) or 2 (one error line printed). Options
   and text files mix in any order, as in most tools (`-o x a.txt --append-eod`); after
   `--` every word is a file, for names that start with '-'. The files are gathered at the
   front of argv (a->files points there): argv's order is free to change.                  */
static int parse_args(prep_args *a, int argc, char **argv) {
    int only_files = 0;
    memset(a, 0, sizeof *a);
    a->workers = 1;
    a->null_vocab_size = -1;
    a->log_interval = 1000;
    a->dtype = MG_IDX_U16;
    a->files = argv + 1;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (only_files || arg[0] != '-' || !arg[1]) {      /* a plain text file */
            a->files[a->n_files++] = arg;    /* never past i: the words before it were read */
            continue;
        }
        if (!strcmp(arg, "--")) { only_files = 1; continue; }
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) { usage(stdout); return 1; }
        if (!strcmp(arg, "--append-eod")) { a->append_eod = 1; continue; }
        if (!strcmp(arg, "--quiet")) { a->quiet = 1; continue; }
        if (!strcmp(arg, "--split-sentences") || !strcmp(arg, "--keep-newlines"))
            return die_usage("%s: sentence splitting needs NLTK's punkt model, which mg_prepare "
                             "does not have; give each document's sentences as a JSON list of "
                             "strings (one sequence each)%s", arg, "");
        if (!strcmp(arg, "--json-keys")) {
            a->n_keys = 0;
            while (i + 1 < argc && argv[i + 1][0] != '-') {
                if (a->n_keys == MAX_KEYS) return die_usage("--json-keys: more than %s keys%s",
                                                            "16", "");
                for (int k = 0; k < a->n_keys; k++)   /* two writers of one dataset */
                    if (!strcmp(a->keys[k], argv[i + 1]))
                        return die_usage("--json-keys: '%s' is given twice (each key writes its "
                                         "own dataset, PREFIX_%s_document)", argv[i + 1],
                                         argv[i + 1]);
                a->keys[a->n_keys++] = argv[++i];
            }
            if (!a->n_keys) return die_usage("--json-keys needs at least one key%s%s", "", "");
            continue;
        }
        if (!v) return die_usage("%s needs a value (see --help)%s", arg, "");
        if (!strcmp(arg, "--input")) a->input = v;
        else if (!strcmp(arg, "-o") || !strcmp(arg, "--output-prefix")) a->output_prefix = v;
        else if (!strcmp(arg, "--llmc")) a->llmc = v;
        else if (!strcmp(arg, "--tokenizer-type")) a->tokenizer_type = v;
        else if (!strcmp(arg, "--vocab-file")) a->vocab_file = v;
        else if (!strcmp(arg, "--merge-file")) a->merge_file = v;
        else if (!strcmp(arg, "--tokenizer-model")) a->tokenizer_model = v;
        else if (!strcmp(arg, "--tiktoken-pattern")) a->tiktoken_pattern = v;
        else if (!strcmp(arg, "--vocab-size")) {
            char *end;
            long long n = strtoll(v, &end, 10);
            if (!*v || *end || n < 1 || n > 0x7ffffffe)
                return die_usage("--vocab-size %s: expected a whole number >= 1%s", v, "");
            a->null_vocab_size = n;
        } else if (!strcmp(arg, "--workers") || !strcmp(arg, "--log-interval")) {
            char *end;
            long long n = strtoll(v, &end, 10);
            if (!*v || *end || n < 1 || n > (arg[2] == 'w' ? 1024 : 1000000000000LL))
                return die_usage("%s %s: expected a whole number >= 1 (workers at most 1024)",
                                 arg, v);
            if (arg[2] == 'w') a->workers = (int)n;
            else a->log_interval = n;
        } else if (!strcmp(arg, "--bad-lines")) {
            if (!strcmp(v, "stop")) a->bad = BAD_STOP;
            else if (!strcmp(v, "skip")) a->bad = BAD_SKIP;
            else return die_usage("--bad-lines %s: expected stop or skip%s", v, "");
        } else if (!strcmp(arg, "--documents")) {
            if (!strcmp(v, "file")) a->mode = DOC_FILE;
            else if (!strcmp(v, "paragraph")) a->mode = DOC_PARAGRAPH;
            else if (!strcmp(v, "line")) a->mode = DOC_LINE;
            else return die_usage("--documents %s: expected file, paragraph or line%s", v, "");
        } else if (!strcmp(arg, "--dtype")) {
            if (!strcmp(v, "uint8")) a->dtype = MG_IDX_U8;
            else if (!strcmp(v, "uint16")) a->dtype = MG_IDX_U16;
            else if (!strcmp(v, "int32")) a->dtype = MG_IDX_I32;
            else return die_usage("--dtype %s: expected uint8, uint16 or int32%s", v, "");
            a->dtype_given = 1;
        } else {
            return die_usage("unknown option %s (see --help)%s", arg, "");
        }
        i++;                 /* the value */
    }
    if (a->input && (a->n_files || a->llmc))
        return die_usage("--input (JSON lines) and %s are exclusive%s", a->llmc ? "--llmc" :
                         "plain text files", "");
    if (a->input && !a->output_prefix)
        return die_usage("--input needs --output-prefix PREFIX (writes PREFIX_KEY_document"
                         ".bin/.idx)%s%s", "", "");
    if (!a->input && (!a->n_files || (!a->output_prefix) == (!a->llmc)))
        return die_usage("give --input FILE.jsonl --output-prefix PREFIX, or one of -o PREFIX / "
                         "--llmc FILE then text files (see --help)%s%s", "", "");
    if (a->llmc && a->dtype_given)
        return die_usage("--dtype applies to -o PREFIX; an llm.c token file (--llmc) stores "
                         "uint16 or uint32 by the vocabulary (llm.c's GPT-2 or Llama-3 kind)",
                         NULL, NULL);
    if (!a->input && (a->n_keys || a->bad))
        return die_usage("%s applies to --input (JSON lines)%s", a->n_keys ? "--json-keys" :
                         "--bad-lines", "");
    if (a->input && a->mode != DOC_FILE)
        return die_usage("--documents applies to plain text files; a JSON line is one "
                         "document%s%s", "", "");
    if (!a->tokenizer_type && (a->vocab_file || a->merge_file || a->tokenizer_model ||
                               a->tiktoken_pattern))
        return die_usage("%s needs --tokenizer-type (the tokenizer it belongs to)%s",
                         a->vocab_file ? "--vocab-file" : a->merge_file ? "--merge-file" :
                         a->tokenizer_model ? "--tokenizer-model" : "--tiktoken-pattern", "");
    if (a->null_vocab_size > 0 &&
        (!a->tokenizer_type || mg_tok_type_from_name(a->tokenizer_type) != MG_TOK_NULL))
        return die_usage("--vocab-size applies to --tokenizer-type NullTokenizer (the other "
                         "tokenizers have their vocabulary)%s%s", "", "");
    if (!a->n_keys) a->keys[a->n_keys++] = "text";
    return output_overwrites_input(a);
}

/* ---- encoding ------------------------------------------------------------------------------ */
/* Token ids of one text into a growing buffer at ids[*n...]; 0, -1 out of memory, or -2 text
   the tokenizer refuses (NullTokenizer: not ids).                                          */
static int encode_append(const mg_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                         int64_t *n, int64_t *cap) {
    for (;;) {
        int64_t room = *cap - *n;
        int64_t need = mg_tokenizer_encode(tok, text, len, 0, *ids + *n, room);
        if (need < 0) return -2;
        if (need <= room) { *n += need; return 0; }
        int64_t grown = 2 * (*n + need) + 64;
        int32_t *p = (int32_t *)realloc(*ids, (size_t)grown * sizeof(int32_t));
        if (!p) return -1;
        *ids = p;
        *cap = grown;
    }
}

/* One document: its tokens and the lengths of its sequences (Megatron's sentence_lens).    */
typedef struct doc_out {
    int32_t *ids; int64_t n_ids, cap_ids;
    int64_t *lens; int n_lens, cap_lens;
} doc_out;

static int doc_push_len(doc_out *d, int64_t len) {
    if (d->n_lens == d->cap_lens) {
        int cap = d->cap_lens ? 2 * d->cap_lens : 4;
        int64_t *p = (int64_t *)realloc(d->lens, (size_t)cap * sizeof(int64_t));
        if (!p) return -1;
        d->lens = p;
        d->cap_lens = cap;
    }
    d->lens[d->n_lens++] = len;
    return 0;
}

/* Encoder.encode for one text: tokens appended as one sequence when there are any.       */
static int doc_add_text(doc_out *d, const mg_tokenizer *tok, const char *text, size_t len) {
    int64_t before = d->n_ids;
    int rc = encode_append(tok, text, len, &d->ids, &d->n_ids, &d->cap_ids);
    if (rc) return rc;
    return d->n_ids > before ? doc_push_len(d, d->n_ids - before) : 0;
}

/* --append-eod: after a non-empty document, its last sequence one longer.                 */
static int doc_finish(doc_out *d, int32_t eod, int append_eod) {
    if (!append_eod || !d->n_ids) return 0;
    if (d->n_ids == d->cap_ids) {
        int32_t *p = (int32_t *)realloc(d->ids, (size_t)(d->cap_ids + 64) * sizeof(int32_t));
        if (!p) return -1;
        d->ids = p;
        d->cap_ids += 64;
    }
    d->ids[d->n_ids++] = eod;
    d->lens[d->n_lens - 1]++;
    return 0;
}

static void doc_free(doc_out *d) {
    free(d->ids);
    free(d->lens);
    memset(d, 0, sizeof *d);
}

/* The dataset writers: one per key (jsonl) or one (text files); written in input order.   */
typedef struct prep_out {
    mg_idx_writer w[MAX_KEYS];
    int n_open;
    int64_t docs, tokens, empty_docs;
} prep_out;

static int out_add(prep_out *o, int k, const doc_out *d, char *err, size_t errlen) {
    int64_t off = 0;
    for (int s = 0; s < d->n_lens; s++) {
        if (mg_idx_writer_add(&o->w[k], d->ids + off, d->lens[s], err, errlen)) return -1;
        off += d->lens[s];
    }
    mg_idx_writer_end_document(&o->w[k]);
    o->tokens += d->n_ids;
    o->empty_docs += d->n_ids == 0;
    return 0;
}

/* ---- progress ------------------------------------------------------------------------------ */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct progress {
    int on;                      /* stderr is a terminal                                     */
    double t0, next;
    int64_t next_docs, interval;
    double total;                /* input bytes (on disk), 0 unknown                         */
} progress;

/* "\rmg_prepare: N documents, X MB/s, P% read, ETA Ns" at most every --log-interval
   documents (and at most 10 times a second).                                                */
static void progress_show(progress *p, int64_t docs, double bytes_in, double pos, int last) {
    double t = now_s(), el = t - p->t0;
    if (!p->on || (!last && (docs < p->next_docs || t < p->next))) return;
    p->next_docs = docs + p->interval;
    p->next = t + 0.1;
    fprintf(stderr, "\rmg_prepare: %lld documents, %.1f MB/s", (long long)docs,
            el > 0 ? bytes_in / el / 1048576.0 : 0.0);
    if (p->total > 0 && pos > 0)
        fprintf(stderr, ", %.0f%% read, ETA %.0f s   ", 100.0 * pos / p->total,
                el * (p->total - pos) / pos);
    if (last) fprintf(stderr, "\n");
}

/* ---- JSON lines ---------------------------------------------------------------------------- */
typedef struct line_job {
    char *text; size_t len;
    int64_t line_no;
    doc_out doc[MAX_KEYS];
    char why[200];               /* non-empty: a bad line                                   */
} line_job;

/* Encoder.encode of one line: every key's document, or why the line is bad.               */
static void encode_line(line_job *j, const prep_args *a, const mg_tokenizer *tok, int32_t eod) {
    mg_json js;
    char err[MG_ERRLEN];
    j->why[0] = 0;
    if (mg_json_parse(&js, j->text, j->len, err, sizeof err)) {
        snprintf(j->why, sizeof j->why, "not JSON: %.150s", err);
        return;
    }
    if (js.toks[0].type != MG_JSON_OBJECT) {
        snprintf(j->why, sizeof j->why, "not a JSON object");
        mg_json_free(&js);
        return;
    }
    for (int k = 0; k < a->n_keys && !j->why[0]; k++) {
        int64_t v = mg_json_get(&js, 0, a->keys[k]);
        int64_t n = 1, t, i;
        if (v < 0) {
            snprintf(j->why, sizeof j->why, "no key \"%.60s\"", a->keys[k]);
            break;
        }
        if (js.toks[v].type == MG_JSON_ARRAY) { n = js.toks[v].size; t = v + 1; }
        else t = v;
        for (i = 0; i < n && !j->why[0]; i++, t = js.toks[t].next) {
            char *s;
            if (js.toks[t].type != MG_JSON_STRING) {
                snprintf(j->why, sizeof j->why, "\"%.60s\" is not a string or a list of strings",
                         a->keys[k]);
                break;
            }
            s = mg_json_strdup(&js, t);
            if (!s) {
                snprintf(j->why, sizeof j->why, "\"%.60s\" holds \\u0000", a->keys[k]);
                break;
            }
            int added = doc_add_text(&j->doc[k], tok, s, strlen(s));
            if (added)
                snprintf(j->why, sizeof j->why, "%s", added == -2 ? NOT_IDS : "out of memory");
            free(s);
        }
        if (!j->why[0] && doc_finish(&j->doc[k], eod, a->append_eod))
            snprintf(j->why, sizeof j->why, "out of memory");
    }
    mg_json_free(&js);
}

/* The input, buffered: a file that starts with gzip's magic bytes is inflated (zlib), member
   after member as gzip does; any other file is read as it is. Lines of any length and any
   bytes (a NUL byte stays in the line, and makes it bad JSON). Inflating here, not through
   gzread, is what sees the end of the last member: gzread ignores whatever follows it, and
   bytes there that are neither another member nor zero padding (which gzip itself skips)
   are a damaged or wrongly joined file, refused as gzip warns of them.                     */
typedef struct line_reader {
    int fd, gz, in_eof;
    int done, failed;            /* the last gzip member has ended; what follows is bad   */
    z_stream zs;
    unsigned char in[1 << 16];
    char buf[1 << 16];
    int pos, len, eof;
    int64_t raw;                 /* bytes read from the file (progress)                    */
    const char *why;             /* an error: what is wrong                                 */
} line_reader;

/* More input after the bytes not yet consumed (kept, moved to the front); 1, 0 at the end
   of the file, -1 on a read error.                                                         */
static int reader_more(line_reader *r) {
    ssize_t got;
    uInt keep = r->zs.avail_in;
    if (r->in_eof) return 0;
    if (keep) memmove(r->in, r->zs.next_in, keep);
    do got = read(r->fd, r->in + keep, sizeof r->in - keep); while (got < 0 && errno == EINTR);
    if (got < 0) { r->why = strerror(errno); return -1; }
    if (got == 0) r->in_eof = 1;
    r->raw += got;
    r->zs.next_in = r->in;
    r->zs.avail_in = keep + (uInt)got;
    return got > 0;
}

static int reader_open(line_reader *r, const char *path) {
    memset(r, 0, sizeof *r);
    if ((r->fd = open(path, O_RDONLY)) < 0) return -1;
    while (r->zs.avail_in < 2 && reader_more(r) > 0) {}   /* a read error shows at the first read */
    r->gz = r->zs.avail_in >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b;
    return r->gz && inflateInit2(&r->zs, 15 + 16) != Z_OK ? -1 : 0;
}

static void reader_close(line_reader *r) {
    if (r->gz) inflateEnd(&r->zs);
    if (r->fd >= 0) close(r->fd);
}

/* After a gzip member: another member (1: reset, go on), the end of the file or zero padding
   up to it (0), or bytes that are neither (-1).                                           */
static int reader_after_member(line_reader *r) {
    int padding = 0;
    for (;;) {
        while (r->zs.avail_in < 2 && !r->in_eof)
            if (reader_more(r) < 0) return -1;
        if (r->zs.avail_in == 0) return 0;
        if (!padding && r->zs.avail_in >= 2 && r->zs.next_in[0] == 0x1f &&
            r->zs.next_in[1] == 0x8b)
            return inflateReset(&r->zs) == Z_OK ? 1 : -1;
        for (uInt i = 0; i < r->zs.avail_in; i++)
            if (r->zs.next_in[i]) {
                r->why = "bytes after the last gzip member that are neither gzip nor zero "
                         "padding: a damaged or wrongly joined file";
                return -1;
            }
        padding = 1;                         /* zeros: skipped, as gzip skips them */
        r->zs.avail_in = 0;
    }
}

/* The next bytes of the text into r->buf (r->len); 0 at the end, -1 with r->why.         */
static int reader_fill(line_reader *r) {
    if (!r->gz) {
        if (r->zs.avail_in == 0 && reader_more(r) < 0) return -1;
        memcpy(r->buf, r->zs.next_in, r->zs.avail_in);
        r->len = (int)r->zs.avail_in;
        r->zs.avail_in = 0;
        return r->len > 0;
    }
    if (r->failed) return -1;  /* after the text that came before the bad bytes (r->why) */
    if (r->done) return 0;
    r->zs.next_out = (Bytef *)r->buf;
    r->zs.avail_out = sizeof r->buf;
    while (r->zs.avail_out == sizeof r->buf) {
        int z;
        if (r->zs.avail_in == 0) {
            int more = reader_more(r);
            if (more < 0) return -1;
            if (more == 0) {
                r->why = "damaged compressed data";   /* cut short inside a member */
                return -1;
            }
        }
        z = inflate(&r->zs, Z_NO_FLUSH);
        if (z == Z_STREAM_END) {
            int next = reader_after_member(r);
            if (next < 0) {
                if (!r->why) r->why = "damaged compressed data";
                r->failed = 1;
                break;
            }
            if (next == 0) { r->done = 1; break; }   /* the end of the last member */
        } else if (z != Z_OK && z != Z_BUF_ERROR) {
            r->why = "damaged compressed data";
            return -1;
        }
    }
    r->len = (int)(sizeof r->buf - r->zs.avail_out);
    return r->len > 0 ? 1 : r->failed ? -1 : 0;
}

/* Reads the next line (without its '\n') into a new buffer; 1, 0 at the end, -1 on an error
   (out of memory, a read error, damaged .gz: r->why).                                       */
static int read_line(line_reader *r, char **out, size_t *len) {
    size_t cap = 256, n = 0;
    char *line = (char *)malloc(cap);
    int got = 0;                 /* saw any byte of this line (an empty line is a line)  */
    if (!line) { r->why = "out of memory"; return -1; }
    for (;;) {
        if (r->pos == r->len) {
            if (r->eof) break;
            int more = reader_fill(r);
            r->pos = 0;
            if (more < 0) { free(line); return -1; }
            if (more == 0) { r->len = 0; r->eof = 1; break; }
        }
        char *nl = (char *)memchr(r->buf + r->pos, '\n', (size_t)(r->len - r->pos));
        size_t take = nl ? (size_t)(nl - (r->buf + r->pos)) : (size_t)(r->len - r->pos);
        if (n + take + 1 > cap) {
            while (n + take + 1 > cap) cap *= 2;
            char *p = (char *)realloc(line, cap);
            if (!p) { free(line); r->why = "out of memory"; return -1; }
            line = p;
        }
        memcpy(line + n, r->buf + r->pos, take);
        n += take;
        r->pos += (int)take + (nl != NULL);
        got = 1;
        if (nl) break;
    }
    if (!got) { free(line); return 0; }
    line[n] = 0;
    *out = line;
    *len = n;
    return 1;
}

static int run_jsonl(const prep_args *a, const mg_tokenizer *tok, mg_idx_dtype dtype,
                     prep_out *o, int64_t *skipped, double *bytes_in) {
    char err[MG_ERRLEN], prefix[420];
    struct stat st;
    line_reader *rd = (line_reader *)calloc(1, sizeof *rd);
    line_job *jobs;
    progress pg;
    int32_t eod = mg_tokenizer_eod(tok);
    int64_t line_no = 0;
    int rc = 0, at_end = 0;
    if (a->append_eod && eod < 0) {
        fprintf(stderr, "mg_prepare: --append-eod: tokenizer %s has no end-of-document token\n",
                a->tokenizer_type);
        return 2;
    }
    if (stat(a->input, &st) != 0) {
        fprintf(stderr, "mg_prepare: --input %s: %s\n", a->input, strerror(errno));
        return 1;
    }
    if (!S_ISREG(st.st_mode)) {   /* a directory, or a pipe nobody may ever write to */
        fprintf(stderr, "mg_prepare: --input %s: not a regular file\n", a->input);
        return 1;
    }
    jobs = (line_job *)calloc(BATCH_LINES, sizeof *jobs);
    if (rd) rd->fd = -1;
    if (!rd || !jobs || reader_open(rd, a->input) != 0) {
        fprintf(stderr, "mg_prepare: --input %s: cannot open (%s)\n", a->input,
                rd && jobs ? strerror(errno) : "out of memory");
        if (rd) reader_close(rd);
        free(rd);
        free(jobs);
        return 1;
    }
    for (int k = 0; k < a->n_keys; k++, o->n_open++) {
        snprintf(prefix, sizeof prefix, "%s_%s_document", a->output_prefix, a->keys[k]);
        if (mg_idx_writer_begin(&o->w[k], prefix, dtype, err, sizeof err)) {
            fprintf(stderr, "mg_prepare: %s\n", err);
            rc = 1;
            break;
        }
    }
    memset(&pg, 0, sizeof pg);
    pg.on = isatty(2);
    pg.t0 = now_s();
    pg.interval = pg.next_docs = a->log_interval;
    pg.total = (double)st.st_size;
    double off0 = 0, off1;       /* input offset (on disk) before and after the batch         */
    while (rc == 0 && !at_end) {
        int n = 0;
        size_t batch_bytes = 0;
        while (n < BATCH_LINES && batch_bytes < BATCH_BYTES) {   /* read a batch */
            int r = read_line(rd, &jobs[n].text, &jobs[n].len);
            if (r < 0) {
                fprintf(stderr, "mg_prepare: %s: cannot read after line %lld (%s)\n", a->input,
                        (long long)line_no, rd->why ? rd->why : "out of memory");
                rc = 1;
            }
            if (r <= 0) { at_end = 1; break; }
            jobs[n].line_no = ++line_no;
            batch_bytes += jobs[n].len + 1;
            n++;
        }
        if (rc) break;
        off1 = (double)rd->raw;
        #pragma omp parallel for num_threads(a->workers) schedule(dynamic, 1)
        for (int i = 0; i < n; i++) encode_line(&jobs[i], a, tok, eod);
        for (int i = 0; i < n; i++) {   /* in input order: the same output for any workers */
            line_job *j = &jobs[i];
            if (rc == 0 && j->why[0]) {
                fprintf(stderr, "mg_prepare: %s:%lld: %s%s\n", a->input, (long long)j->line_no,
                        j->why, a->bad == BAD_SKIP ? " (skipped)" :
                        " (--bad-lines skip leaves such lines out)");
                if (a->bad == BAD_STOP) rc = 1;
                else ++*skipped;
            } else if (rc == 0) {
                for (int k = 0; k < a->n_keys && rc == 0; k++)
                    if (out_add(o, k, &j->doc[k], err, sizeof err)) {
                        fprintf(stderr, "mg_prepare: %s:%lld: %s\n", a->input,
                                (long long)j->line_no, err);
                        rc = 1;
                    }
                o->docs++;
            }
            for (int k = 0; k < a->n_keys; k++) doc_free(&j->doc[k]);
            free(j->text);
            *bytes_in += (double)(j->len + 1);
            /* the input read so far, interpolated over the batch's lines */
            progress_show(&pg, o->docs, *bytes_in, off0 + (off1 - off0) * (i + 1) / n, 0);
        }
        off0 = off1;
    }
    if (rc == 0) progress_show(&pg, o->docs, *bytes_in, pg.total, 1);
    reader_close(rd);
    free(rd);
    free(jobs);
    return rc;
}

/* ---- plain text files ---------------------------------------------------------------------- */
/* If the line at i is blank (only spaces, tabs, '\r', up to a '\n' or the end of the text),
   the index just after it; else -1.                                                          */
static long blank_line_end(const unsigned char *text, long n, long i) {
    if (i >= n) return -1;
    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r')) i++;
    return i == n ? n : text[i] == '\n' ? i + 1 : -1;
}
static long skip_blank_lines(const unsigned char *text, long n, long i) {
    long j;
    while ((j = blank_line_end(text, n, i)) >= 0) i = j;
    return i;
}

/* End (exclusive) of the document starting at `start` in text[0..n). A line or paragraph
   document holds its text and the run of blank lines after it, so every byte of the file is
   in one document and no document is only blank lines (blank lines at the very start of a
   file belong to its first document).                                                    */
static long document_end(const unsigned char *text, long n, long start, doc_mode mode) {
    long i = skip_blank_lines(text, n, start);
    if (mode == DOC_FILE) return n;
    for (;;) {                          /* at a line with text: through its newline */
        while (i < n && text[i] != '\n') i++;
        if (i < n) i++;
        if (i >= n) return n;
        if (mode == DOC_LINE || blank_line_end(text, n, i) >= 0)
            return skip_blank_lines(text, n, i);
    }
}

/* A file of nothing but blank lines (spaces, tabs, '\r' and newlines) is one such document:
   empty, skipped as an empty one is.                                                     */
static int blank_document(const char *text, long n) {
    for (long i = 0; i < n; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r' && text[i] != '\n') return 0;
    return 1;
}

/* Text files: each file's documents encoded by the workers, added in order (indexed) or to
   one stream (llm.c: *stream, all tokens).                                                  */
static int run_text(const prep_args *a, const mg_tokenizer *tok, prep_out *o, int32_t **stream,
                    int64_t *n_stream, double *bytes_in) {
    char err[MG_ERRLEN] = "";
    int32_t eod = mg_tokenizer_eod(tok);
    int64_t cap_stream = 0;
    int rc = 0;
    if (a->append_eod && eod < 0) {
        fprintf(stderr, "mg_prepare: --append-eod: tokenizer %s has no end-of-document token\n",
                a->tokenizer_type);
        return 2;
    }
    for (int f = 0; f < a->n_files && rc == 0; f++) {
        char *bytes = NULL;
        size_t len = 0;
        long n_docs = 0, cap_docs = 0, *starts = NULL;   /* document d: [starts[2d], [2d+1]) */
        doc_out *docs;
        /* a directory, a named pipe or an oversized file: one line, nothing waited on */
        if (mg_read_file(a->files[f], MAX_INPUT_BYTES, &bytes, &len, err, sizeof err) != 0) {
            fprintf(stderr, "mg_prepare: %s\n", err);
            return 1;
        }
        *bytes_in += (double)len;
        for (long s = 0, e; s < (long)len; s = e) {      /* document boundaries */
            e = document_end((const unsigned char *)bytes, (long)len, s, a->mode);
            if (blank_document(bytes + s, e - s)) continue;
            if (2 * n_docs + 2 > cap_docs) {
                cap_docs = 2 * cap_docs + 64;
                long *p = (long *)realloc(starts, (size_t)cap_docs * sizeof(long));
                if (!p) { rc = 1; break; }
                starts = p;
            }
            starts[2 * n_docs] = s;
            starts[2 * n_docs++ + 1] = e;
        }
        docs = (doc_out *)calloc((size_t)(n_docs ? n_docs : 1), sizeof *docs);
        if (rc || !docs) {
            fprintf(stderr, "mg_prepare: %s: out of memory\n", a->files[f]);
            free(starts);
            free(bytes);
            free(docs);
            return 1;
        }
        int failed = 0;   /* 1: out of memory, 2: text the tokenizer refuses */
        #pragma omp parallel for num_threads(a->workers) schedule(dynamic, 1) reduction(|:failed)
        for (long d = 0; d < n_docs; d++) {
            int added = doc_add_text(&docs[d], tok, bytes + starts[2 * d],
                                     (size_t)(starts[2 * d + 1] - starts[2 * d]));
            failed |= added == -2 ? 2 : added || doc_finish(&docs[d], eod, a->append_eod);
        }
        if (failed) {
            fprintf(stderr, "mg_prepare: %s: %s\n", a->files[f], failed & 2 ? NOT_IDS :
                    "out of memory while encoding");
            rc = 1;
        }
        for (long d = 0; d < n_docs && rc == 0; d++) {
            if (!docs[d].n_ids) continue;        /* empty documents are skipped */
            o->docs++;
            if (a->output_prefix) {
                if (out_add(o, 0, &docs[d], err, sizeof err)) {
                    fprintf(stderr, "mg_prepare: %s: %s\n", a->files[f], err);
                    rc = 1;
                }
                continue;
            }
            if (*n_stream + docs[d].n_ids > cap_stream) {    /* llm.c: one stream */
                cap_stream = 2 * (*n_stream + docs[d].n_ids);
                int32_t *p = (int32_t *)realloc(*stream, (size_t)cap_stream * sizeof(int32_t));
                if (!p) { fprintf(stderr, "mg_prepare: out of memory\n"); rc = 1; break; }
                *stream = p;
            }
            memcpy(*stream + *n_stream, docs[d].ids, (size_t)docs[d].n_ids * sizeof(int32_t));
            *n_stream += docs[d].n_ids;
            o->tokens += docs[d].n_ids;
        }
        for (long d = 0; d < n_docs; d++) doc_free(&docs[d]);
        free(docs);
        free(starts);
        free(bytes);
    }
    return rc;
}

int main(int argc, char **argv) {
    prep_args a;
    prep_out o;
    char err[MG_ERRLEN];
    mg_tokenizer *tok;
    mg_idx_dtype dtype;
    int32_t *stream = NULL;
    int64_t n_stream = 0, skipped = 0, vocab;
    double bytes_in = 0, t0 = now_s();
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    tok = mg_tokenizer_from_flags(a.tokenizer_type, a.vocab_file, a.merge_file,
                                  a.tokenizer_model, a.tiktoken_pattern, a.null_vocab_size,
                                  err, sizeof err);
    if (!tok) { fprintf(stderr, "mg_prepare: %s\n", err); return 2; }
    if (!a.tokenizer_type) a.tokenizer_type = "ByteTokenizer";
    vocab = mg_tokenizer_vocab_size(tok);
    /* DType.optimal_dtype(vocab_size); a --dtype too narrow for the vocabulary is refused  */
    dtype = a.dtype_given ? a.dtype : vocab < 65500 ? MG_IDX_U16 : MG_IDX_I32;
    /* llm.c's rule: the token file's kind follows the tokenizer (GPT-2's uint16 or Llama 3's
       uint32); ours, whose tokenizers are many, follows the vocabulary's size              */
    mg_llmc_tokens_kind llmc_kind = vocab > 65536 ? MG_LLMC_LLAMA3 : MG_LLMC_GPT2;
    if (!a.llmc &&
        ((dtype == MG_IDX_U8 && vocab > 256) || (dtype == MG_IDX_U16 && vocab > 65536))) {
        fprintf(stderr, "mg_prepare: --dtype: the %s vocabulary has %lld ids (up to %lld), more "
                "than %s holds; use --dtype int32\n", a.tokenizer_type, (long long)vocab,
                (long long)vocab - 1, dtype == MG_IDX_U8 ? "uint8" : "uint16");
        mg_tokenizer_free(tok);
        return 2;
    }
    memset(&o, 0, sizeof o);
    if (a.input) {
        rc = run_jsonl(&a, tok, dtype, &o, &skipped, &bytes_in);
    } else {
        if (a.output_prefix) {
            if (mg_idx_writer_begin(&o.w[0], a.output_prefix, dtype, err, sizeof err)) {
                fprintf(stderr, "mg_prepare: %s\n", err);
                mg_tokenizer_free(tok);
                return 1;
            }
            o.n_open = 1;
        }
        rc = run_text(&a, tok, &o, &stream, &n_stream, &bytes_in);
    }
    /* all datasets or none: every one checked and complete under its temporary name first
       (an empty one fails here), then all renamed into place                             */
    for (int k = 0; k < o.n_open && rc == 0; k++)
        if (mg_idx_writer_prepare(&o.w[k], err, sizeof err)) {
            fprintf(stderr, "mg_prepare: %s\n", err);
            rc = 1;
        }
    for (int k = 0; k < o.n_open; k++) {
        if (rc == 0 && mg_idx_writer_commit(&o.w[k], err, sizeof err)) {
            fprintf(stderr, "mg_prepare: %s\n", err);
            rc = 1;
        } else if (rc) {
            mg_idx_writer_abort(&o.w[k]);
        }
    }
    if (rc == 0 && a.llmc) {
        if (n_stream == 0) {
            fprintf(stderr, "mg_prepare: %s: no tokens to write (empty input)\n", a.llmc);
            rc = 1;
        } else if (mg_llmc_tokens_write(a.llmc, llmc_kind, stream, n_stream, err, sizeof err)) {
            fprintf(stderr, "mg_prepare: %s\n", err);
            rc = 1;
        }
    }
    free(stream);
    mg_tokenizer_free(tok);
    if (rc) return rc;
    if (!a.quiet) {
        double el = now_s() - t0;
        const char *name = strcmp(a.tokenizer_type, "ByteTokenizer") ? a.tokenizer_type : "bytes";
        if (a.input)
            printf("mg_prepare: %s: %lld documents (%lld empty, %lld bad lines skipped), %lld "
                   "tokens (%s, vocab %lld), %.1f MB/s -> ", a.input, (long long)o.docs,
                   (long long)o.empty_docs, (long long)skipped, (long long)o.tokens, name,
                   (long long)vocab, el > 0 ? bytes_in / el / 1048576.0 : 0.0);
        else if (a.llmc)
            printf("mg_prepare: %d file(s), %lld tokens (%s, vocab %lld) -> ", a.n_files,
                   (long long)o.tokens, name, (long long)vocab);
        else
            printf("mg_prepare: %d file(s), %lld documents, %lld tokens (%s, vocab %lld) -> ",
                   a.n_files, (long long)o.docs, (long long)o.tokens, name, (long long)vocab);
        if (a.llmc)
            printf("%s (llm.c%s)\n", a.llmc,
                   llmc_kind == MG_LLMC_LLAMA3 ? ", Llama-3 kind: uint32" : "");
        else if (!a.input) printf("%s.bin, %s.idx\n", a.output_prefix, a.output_prefix);
        else
            for (int k = 0; k < a.n_keys; k++)
                printf("%s_%s_document.bin/.idx%s", a.output_prefix, a.keys[k],
                       k + 1 < a.n_keys ? ", " : "\n");
    }
    return 0;
}
