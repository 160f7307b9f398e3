/* mg-test: ranks=1 flavors=cpu timeout=300 */
/* test_prepare.c — tools/mg_prepare as Megatron-LM's tools/preprocess_data.py (issue 17, item
   3), run as the program a user runs (build/mg_prepare, the cc build; `make` builds it):
     - cross-check with Megatron's format: tests/oracle/preprocess.py (committed outputs in
       tests/data/prep_*) runs preprocess_data.py's Encoder.encode and a byte-for-byte copy of
       IndexedDatasetBuilder (add_document, finalize, _IndexWriter) on prep_input.jsonl with
       the byte tokenizer; mg_prepare's PREFIX_KEY_document.bin/.idx equal those files byte
       for byte for --json-keys text title --append-eod (uint16) and --dtype int32 without EOD,
       also read from the .jsonl.gz;
     - the same output whatever --workers: 1, 2 and 7 threads on a corpus of 30 copies of the
       input (6000 lines, more than one batch of 4096 lines);
     - empty documents are recorded as Megatron records them (a document index entry with no
       sequence), and mg_dataset_open reads the result;
     - a malformed line: by default the run stops naming FILE:LINE and writes nothing; with
       --bad-lines skip each bad line is named and left out, and the rest equals the input
       without those lines; a truncated .gz is an error whatever --bad-lines says;
     - all or none: a key whose dataset has no tokens fails the run and no key's dataset is
       left; a key twice in one JSON object is its last value (Python's json.loads); blank
       lines are never documents of their own (line and paragraph modes, a blank file);
       options after the text files apply; an output naming an input is refused; a .gz with
       garbage after its last member is refused, zero padding and two members are read;
     - flags: --split-sentences, an unknown --tokenizer-type, a tokenizer file without
       --tokenizer-type, a tokenizer without its files (the message names the missing one),
       a --json-keys key twice, --input with text files, --json-keys on text files,
       NullTokenizer without --vocab-size and --vocab-size without it are one-line errors
       (exit 2, nothing written);
     - NullTokenizer (text that is ids): each line's ids then the end of document V; an id
       past V or a word that is no id stops the run (FILE, or FILE:LINE), nothing written;
     - progress on a terminal: under script(1) (a pseudo-terminal) stderr shows documents,
       MB/s and ETA; through a pipe it shows none;
     - a real vocabulary: with GPT-2's ranks (.venv/share/vocab/gpt2.tiktoken, from the install
       step) mg_prepare --tokenizer-type TikTokenizer --append-eod equals, byte for byte, the
       oracle driving tiktoken itself (.venv/bin/python tests/oracle/preprocess.py --tiktoken);
     - gpt_train with text (item 4): --tokenizer-type sets the vocabulary (the header line
       says 50257; a disagreeing --vocab-size and a dataset with ids beyond the tokenizer's
       vocabulary are one-line errors), --prompt is encoded and the sample printed as text
       starting with the prompt, ending early at the end-of-document id (a model trained on
       nothing but byte 255, prompted with it, stops at once); --prompt without --tokenizer-type and a tokenizer file without
       it are refused;
     - tools/mg_tokenize, with the same tokenizer flags: GPT-2's ids of "Hello world" (15496
       995), and one-line errors for a missing or unknown --tokenizer-type, an unknown flag, a
       stray argument, a flag without its value, a GPT-2 BPE without its merges, two files
       for one; --decode: ids beyond 32 bits or negative are out of range (not wrapped), ids
       on standard input are read to their end and no further.                            */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/wait.h>
#include "mg_data.h"
#include "mg_test.h"

#define TOOL "build/mg_prepare"
#define DATA "tests/data/"
static char dir[256];

static const char *tp(const char *name) {
    static char buf[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Runs a shell command; its exit status (-1: not run). Output to out (stdout+stderr). */
static int run(const char *cmd, char *out, size_t cap) {
    char full[4096];
    FILE *p;
    size_t n = 0;
    int st;
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    p = popen(full, "r");
    if (!p) return -1;
    if (out && cap) {
        n = fread(out, 1, cap - 1, p);
        out[n] = 0;
    } else {
        char sink[4096];
        while (fread(sink, 1, sizeof sink, p) > 0) {}
    }
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int same_file(const char *a, const char *b) {
    long na = 0, nb = 0;
    void *x = mg_test_read_file(a, &na), *y = mg_test_read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, (size_t)na);
    free(x);
    free(y);
    return same;
}

/* Files in dir whose name starts with prefix. */
static int count_names(const char *prefix) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

static void check_oracle(void) {
    static const char *const runs[3][3] = {
        /* input, flags, reference prefix */
        {DATA "prep_input.jsonl", "--json-keys text title --append-eod", "prep_ref_eod"},
        {DATA "prep_input.jsonl", "--dtype int32", "prep_ref_i32"},
        {DATA "prep_input.jsonl.gz", "--json-keys text title --append-eod", "prep_ref_eod"}};
    for (int r = 0; r < 3; r++) {
        char cmd[2048], out[4096], name[300];
        const char *keys[2] = {"text", "title"};
        int nk = r == 1 ? 1 : 2, ok, rc;
        snprintf(cmd, sizeof cmd, TOOL " --input %s --output-prefix %s/o%d %s --workers 2", runs[r][0],
                 dir, r, runs[r][1]);
        rc = run(cmd, out, sizeof out);
        ok = rc == 0;
        for (int k = 0; k < nk && ok; k++) {
            char got[600], want[600];
            for (int e = 0; e < 2 && ok; e++) {
                snprintf(got, sizeof got, "%s/o%d_%s_document.%s", dir, r, keys[k], e ? "idx" : "bin");
                snprintf(want, sizeof want, DATA "%s_%s_document.%s", runs[r][2], keys[k],
                         e ? "idx" : "bin");
                ok = same_file(got, want);
            }
        }
        snprintf(name, sizeof name, "prepare: %s %s = Megatron's preprocess_data + "
                 "IndexedDatasetBuilder (oracle), .bin and .idx byte for byte",
                 strstr(runs[r][0], ".gz") ? "prep_input.jsonl.gz" : "prep_input.jsonl",
                 runs[r][1]);
        mg_test_report(ok, name, "rc %d: %.300s", rc, out);
    }
}

/* Empty documents: entries of the document index with no sequence, as Megatron writes. */
static void check_empty_docs(void) {
    mg_dataset ds;
    char err[MG_ERRLEN];
    int64_t empty = 0, d;
    int ok = mg_dataset_open(tp("o0_text_document"), &ds, err, sizeof err) == 0;
    if (ok) {
        for (d = 0; d < ds.n_documents; d++)
            empty += mg_dataset_doc_bound(&ds, d) == mg_dataset_doc_bound(&ds, d + 1);
        ok = ds.n_documents == 200 && empty > 0 && ds.token_dtype == MG_IDX_U16;
        mg_test_report(ok, "prepare: 200 lines = 200 documents, the empty ones kept as documents "
                       "without sequences; read back by mg_dataset_open (uint16)",
                       "%lld documents, %lld empty", (long long)ds.n_documents, (long long)empty);
        mg_dataset_close(&ds);
    } else {
        mg_test_report(0, "prepare: read back the output", "%s", err);
    }
}

static void check_workers(void) {
    char cmd[2048], out[2048];
    int ok = 1;
    snprintf(cmd, sizeof cmd, "for i in $(seq 30); do cat " DATA "prep_input.jsonl; done > %s",
             tp("big.jsonl"));
    ok = run(cmd, NULL, 0) == 0;
    static const int workers[3] = {1, 2, 7};
    for (int w = 0; w < 3 && ok; w++) {
        snprintf(cmd, sizeof cmd, TOOL " --quiet --input %s --output-prefix %s/w%d --json-keys "
                 "text title --append-eod --workers %d", tp("big.jsonl"), dir, workers[w],
                 workers[w]);
        ok = run(cmd, out, sizeof out) == 0;
    }
    for (int w = 1; w < 3 && ok; w++) {
        char a[100], b[100];
        static const char *const files[4] = {"text_document.bin", "text_document.idx",
                                             "title_document.bin", "title_document.idx"};
        for (int f = 0; f < 4 && ok; f++) {
            snprintf(a, sizeof a, "w1_%s", files[f]);
            snprintf(b, sizeof b, "w%d_%s", workers[w], files[f]);
            ok = same_file(tp(a), tp(b));
        }
    }
    mg_test_report(ok, "prepare: --workers 1, 2, 7 on 6000 lines (two batches): identical "
                   ".bin/.idx", "%.200s", out);
}

static void check_bad_lines(void) {
    char cmd[2048], out[4096];
    int rc;
    mg_dataset ds;
    char err[MG_ERRLEN];
    FILE *f = fopen(tp("bad.jsonl"), "w");
    fprintf(f, "{\"text\": \"one\"}\n{\"text\": \"two\n{\"txt\": \"three\"}\n[1, 2]\n"
               "{\"text\": 5}\n{\"text\": [\"a\", 1]}\n{\"text\": \"six\"}\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, TOOL " --input %s --output-prefix %s/bad", tp("bad.jsonl"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 1 && strstr(out, "bad.jsonl:2: not JSON") && !strstr(out, ":3:") &&
                   count_names("bad_") == 0, "prepare: a malformed line stops the run at "
                   "FILE:LINE, nothing written", "rc %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, TOOL " --input %s --output-prefix %s/bad --bad-lines skip",
             tp("bad.jsonl"), dir);
    rc = run(cmd, out, sizeof out);
    int ok = rc == 0 && strstr(out, ":2: not JSON") && strstr(out, ":3: no key \"text\"") &&
             strstr(out, ":4: not a JSON object") &&
             strstr(out, ":5: \"text\" is not a string or a list of strings") &&
             strstr(out, ":6: \"text\" is not a string") && strstr(out, "5 bad lines skipped");
    if (ok && mg_dataset_open(tp("bad_text_document"), &ds, err, sizeof err) == 0) {
        /* the good lines 1 and 7: "one", "six" */
        ok = ds.n_documents == 2 && ds.n_tokens == 6 && mg_dataset_token(&ds, 3) == 's';
        mg_dataset_close(&ds);
    } else {
        ok = 0;
    }
    mg_test_report(ok, "prepare: --bad-lines skip names each bad line (bad JSON, missing key, "
                   "not an object, wrong types) and keeps the good ones", "rc %d: %.400s", rc,
                   out);
    /* a .gz cut short: an error even with --bad-lines skip, nothing written */
    snprintf(cmd, sizeof cmd, "head -c 5000 " DATA "prep_input.jsonl.gz > %s && " TOOL
             " --input %s --output-prefix %s/cut --bad-lines skip", tp("cut.jsonl.gz"),
             tp("cut.jsonl.gz"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 1 && strstr(out, "cut.jsonl.gz: cannot read after line ") &&
                   strstr(out, "(damaged compressed data)") && count_names("cut_") == 0,
                   "prepare: a truncated .jsonl.gz stops the run (damaged compressed data), "
                   "nothing written", "rc %d: %.300s", rc, out);
}

static void write_text(const char *name, const char *text) {
    FILE *f = fopen(tp(name), "wb");
    if (f) { fputs(text, f); fclose(f); }
}

/* The token lengths of each document of a byte-level dataset, "6,4" (documents without a
   sequence as 0); "" when it cannot be read.                                             */
static void doc_lengths(const char *prefix, char *out, size_t cap) {
    mg_dataset ds;
    char err[MG_ERRLEN];
    size_t n = 0;
    out[0] = 0;
    if (mg_dataset_open(tp(prefix), &ds, err, sizeof err)) return;
    for (int64_t d = 0; d < ds.n_documents && n + 24 < cap; d++) {
        int64_t len = 0;
        for (int64_t q = mg_dataset_doc_bound(&ds, d); q < mg_dataset_doc_bound(&ds, d + 1); q++)
            len += mg_dataset_seq_len(&ds, q);
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? "," : "", (long long)len);
    }
    mg_dataset_close(&ds);
}

/* Several datasets are written all or none; a key given twice in a JSON object is its last
   value (Python's json.loads); blank lines are never documents of their own; options after
   the text files; outputs that would replace inputs; what follows a .gz's last member.   */
static void check_all_or_none(void) {
    char cmd[2048], out[4096], lens[200];
    int rc;
    /* title empty on every line: its dataset fails, and text's is not left behind */
    write_text("aon.jsonl", "{\"text\":\"abc\",\"title\":\"\"}\n{\"text\":\"de\",\"title\":\"\"}\n");
    snprintf(cmd, sizeof cmd, TOOL " --input %s --output-prefix %s/aon --json-keys text title",
             tp("aon.jsonl"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 1 && strstr(out, "aon_title_document: no tokens to write") &&
                   count_names("aon_") == 0, "prepare: one key's dataset fails (no tokens): no "
                   "dataset of any key is written, no temporary left", "rc %d, %d files: %.300s",
                   rc, count_names("aon_"), out);
    write_text("dk.jsonl", "{\"text\":\"first\",\"text\":\"second\"}\n");
    snprintf(cmd, sizeof cmd, TOOL " --quiet --input %s --output-prefix %s/dk", tp("dk.jsonl"),
             dir);
    rc = run(cmd, out, sizeof out);
    {
        mg_dataset ds;
        char err[MG_ERRLEN], text[16] = "";
        if (rc == 0 && mg_dataset_open(tp("dk_text_document"), &ds, err, sizeof err) == 0) {
            for (int64_t i = 0; i < ds.n_tokens && i < 15; i++) text[i] = (char)mg_dataset_token(&ds, i);
            mg_dataset_close(&ds);
        }
        mg_test_report(!strcmp(text, "second"), "prepare: a key twice in one JSON object is its "
                       "last value, as Python's json.loads", "rc %d, got '%s': %.200s", rc, text,
                       out);
    }
    /* blank lines: part of the document before them, never one of their own */
    write_text("ln.txt", "one\n\n\ntwo\n");
    write_text("pp.txt", "\n\npara\n");
    write_text("ws.txt", " \n\t\n\r\n");
    /* ... and options after the files are options (they were opened as files) */
    static const struct { const char *args, *prefix, *want, *name; } modes[] = {
        {"--quiet --documents line ln.txt", "ln", "6,4", "prepare: --documents line on 'one\\n"
         "\\n\\ntwo\\n': 2 documents (6, 4 bytes), the blank lines with 'one'"},
        {"--quiet --documents paragraph pp.txt ws.txt", "pp", "7", "prepare: --documents "
         "paragraph: leading blank lines go with the first paragraph, a file of blank lines "
         "adds nothing"},
        {"ln.txt --append-eod --documents line", "late", "7,5", "prepare: options after the "
         "text files (--append-eod --documents line) apply"},
    };
    char repo[1024];
    if (!getcwd(repo, sizeof repo)) repo[0] = 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd %s && %s/" TOOL " -o %s %s", dir, repo, modes[i].prefix,
                 modes[i].args);
        rc = run(cmd, out, sizeof out);
        doc_lengths(modes[i].prefix, lens, sizeof lens);
        mg_test_report(rc == 0 && !strcmp(lens, modes[i].want), modes[i].name,
                       "rc %d, lengths %s: %.200s", rc, lens, out);
    }
    /* outputs that name an input: refused up front, the input intact */
    write_text("same.bin", "keep me\n");
    snprintf(cmd, sizeof cmd, TOOL " -o %s/same %s", dir, tp("same.bin"));
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 2 && strstr(out, "same.bin: the output would overwrite the input") &&
                   same_file(tp("same.bin"), tp("same.bin")) && count_names("same.") == 1,
                   "prepare: -o PREFIX whose PREFIX.bin is the input: refused, one line",
                   "rc %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, TOOL " --llmc %s %s", tp("ln.txt"), tp("ln.txt"));
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 2 && strstr(out, "ln.txt: the output would overwrite the input"),
                   "prepare: --llmc FILE that is the input: refused, one line", "rc %d: %.300s",
                   rc, out);
    /* after the last gzip member: garbage is refused, zero padding and a second member read */
    snprintf(cmd, sizeof cmd, "cp " DATA "prep_input.jsonl.gz %s && printf 'x' >> %s && "
             TOOL " --input %s --output-prefix %s/tg", tp("tg.jsonl.gz"), tp("tg.jsonl.gz"),
             tp("tg.jsonl.gz"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 1 && strstr(out, "tg.jsonl.gz: cannot read after line 200 (bytes after "
                   "the last gzip member that are neither gzip nor zero padding") &&
                   count_names("tg_") == 0, "prepare: a .gz with garbage after its last member "
                   "is refused, nothing written", "rc %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, "(cat " DATA "prep_input.jsonl.gz; head -c 700 /dev/zero) > %s && "
             TOOL " --quiet --input %s --output-prefix %s/tz --json-keys text title "
             "--append-eod", tp("tz.jsonl.gz"), tp("tz.jsonl.gz"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0 && same_file(tp("tz_text_document.bin"), DATA
                   "prep_ref_eod_text_document.bin") && same_file(tp("tz_text_document.idx"),
                   DATA "prep_ref_eod_text_document.idx"), "prepare: a .gz with zero padding "
                   "after it (as gzip, skipped): the same dataset", "rc %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, "(head -n 120 " DATA "prep_input.jsonl | gzip -c; tail -n +121 "
             DATA "prep_input.jsonl | gzip -c) > %s && " TOOL " --quiet --input %s "
             "--output-prefix %s/tm --json-keys text title --append-eod", tp("tm.jsonl.gz"),
             tp("tm.jsonl.gz"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0 && same_file(tp("tm_title_document.bin"), DATA
                   "prep_ref_eod_title_document.bin") && same_file(tp("tm_title_document.idx"),
                   DATA "prep_ref_eod_title_document.idx"), "prepare: a .gz of two members "
                   "(as gzip joins them): the same dataset", "rc %d: %.300s", rc, out);
}

static void check_flag_errors(void) {
    static const char *const cases[][2] = {
        {"--input " DATA "prep_input.jsonl -o DIR/e --split-sentences",
         "--split-sentences: sentence splitting needs NLTK"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --tokenizer-type Foo",
         "--tokenizer-type Foo: unknown (expected GPT2BPETokenizer"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --vocab-file v.json",
         "--vocab-file needs --tokenizer-type"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --tokenizer-type GPT2BPETokenizer "
         "--vocab-file v.json", "GPT2BPETokenizer takes --vocab-file vocab.json and --merge-file "
         "merges.txt: --merge-file is missing"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --tokenizer-type GPT2BPETokenizer "
         "--merge-file m.txt", "merges.txt: --vocab-file is missing"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --tokenizer-type TikTokenizer "
         "--vocab-file a --tokenizer-model b", "TikTokenizer takes one file, --tokenizer-model "
         "FILE or --vocab-file FILE: both were given"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --tokenizer-type HuggingFaceTokenizer",
         "--vocab-file FILE: none was given"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --json-keys text title text",
         "--json-keys: 'text' is given twice"},
        {"--json-keys text -o DIR/e data/01_the_river_town.txt",
         "--json-keys applies to --input"},
        {"-o DIR/e --bad-lines skip data/01_the_river_town.txt",
         "--bad-lines applies to --input"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --documents line",
         "--documents applies to plain text files"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --workers 0",
         "--workers 0: expected a whole number >= 1"},
        {"--input " DATA "prep_input.jsonl", "--input needs --output-prefix"},
        {"--llmc DIR/e.bin --dtype uint16 data/01_the_river_town.txt",
         "--dtype applies to -o PREFIX; an llm.c token file (--llmc) stores uint16 or uint32"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --tokenizer-type NullTokenizer",
         "--tokenizer-type NullTokenizer needs --vocab-size V"},
        {"--input " DATA "prep_input.jsonl -o DIR/e --vocab-size 10",
         "--vocab-size applies to --tokenizer-type NullTokenizer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[2048], out[2048], args[1200], name[300], *p;
        snprintf(args, sizeof args, "%s", cases[i][0]);
        if ((p = strstr(args, "DIR"))) {       /* the temporary directory for DIR */
            char rest[1200];
            snprintf(rest, sizeof rest, "%s", p + 3);
            snprintf(p, sizeof args - (size_t)(p - args), "%s%s", dir, rest);
        }
        snprintf(cmd, sizeof cmd, TOOL " %s", args);
        int rc = run(cmd, out, sizeof out);
        char *nl = strchr(out, '\n');
        snprintf(name, sizeof name, "prepare: error: %.100s", cases[i][1]);
        mg_test_report(rc == 2 && !strncmp(out, "mg_prepare: ", 12) && strstr(out, cases[i][1])
                       && nl && !nl[1] && count_names("e_") == 0, name, "rc %d: %.300s", rc,
                       out);
    }
}

/* NullTokenizer (Megatron's, for text that is ids already): each line's ids, then the end of
   document V = --vocab-size; a text that is not ids stops the run naming the file (or
   FILE:LINE) and writes nothing.                                                           */
static void check_null_tokenizer(void) {
    char cmd[2048], out[2048];
    mg_dataset ds;
    int rc, ok;
    write_text("ids.txt", "1 2 3\n4 5\n");
    snprintf(cmd, sizeof cmd, TOOL " --tokenizer-type NullTokenizer --vocab-size 10 --append-eod "
             "--documents line -o %s %s", tp("ids"), tp("ids.txt"));
    rc = run(cmd, out, sizeof out);
    ok = rc == 0 && mg_dataset_open(tp("ids"), &ds, out, sizeof out) == 0;
    if (ok) {
        static const int64_t want[7] = {1, 2, 3, 10, 4, 5, 10};
        ok = ds.n_documents == 2 && ds.n_tokens == 7;
        for (int64_t i = 0; ok && i < 7; i++) ok = mg_dataset_token(&ds, i) == want[i];
        mg_dataset_close(&ds);
    }
    mg_test_report(ok, "prepare: NullTokenizer --vocab-size 10: each line's ids, then eod 10",
                   "rc %d: %.300s", rc, out);
    write_text("bad_ids.txt", "1 2 33\n");
    snprintf(cmd, sizeof cmd, TOOL " --tokenizer-type NullTokenizer --vocab-size 10 -o %s/e %s",
             dir, tp("bad_ids.txt"));
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 1 && strstr(out, "bad_ids.txt: not NullTokenizer ids") &&
                   count_names("e.") == 0, "prepare: NullTokenizer: an id past V stops the run, "
                   "nothing written", "rc %d: %.300s", rc, out);
    write_text("bad_ids.jsonl", "{\"text\": \"7 8 9\"}\n{\"text\": \"1 x\"}\n");
    snprintf(cmd, sizeof cmd, TOOL " --tokenizer-type NullTokenizer --vocab-size 10 --input %s "
             "--output-prefix %s/e", tp("bad_ids.jsonl"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 1 && strstr(out, "bad_ids.jsonl:2: not NullTokenizer ids") &&
                   count_names("e_") == 0, "prepare: NullTokenizer: a JSON line that is not ids "
                   "is named FILE:LINE", "rc %d: %.300s", rc, out);
}

static void check_progress(void) {
    char cmd[2048], out[8192];
    int rc;
    snprintf(cmd, sizeof cmd, "script -qec '" TOOL " --input %s --output-prefix %s/pt "
             "--log-interval 1000 --workers 2' /dev/null", tp("big.jsonl"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0 && strstr(out, "\rmg_prepare: ") && strstr(out, " documents, ") &&
                   strstr(out, " MB/s") && strstr(out, "% read, ETA "), "prepare: on a "
                   "terminal, progress shows documents, MB/s, percent read and ETA",
                   "rc %d: %.200s", rc, out);
    snprintf(cmd, sizeof cmd, TOOL " --input %s --output-prefix %s/pt --workers 2",
             tp("big.jsonl"), dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0 && !strchr(out, '\r') && strstr(out, "6000 documents"),
                   "prepare: through a pipe, no progress lines (the summary only)", "%.200s",
                   out);
}

#define VOCAB ".venv/share/vocab/gpt2.tiktoken"
#define TRAIN "build/gpt_train --num-layers 2 --hidden-size 64 --num-attention-heads 4 " \
    "--seq-length 32 --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --eval-iters 0 " \
    "--split 1,0,0 --device cpu "

/* tools/mg_tokenize, the same flags: GPT-2's ids for a known text, and one-line errors. */
static void check_tokenize_cli(void) {
    static const char *const cases[][3] = {
        {"--text hi", "2", "mg_tokenize: --tokenizer-type is required (GPT2BPETokenizer"},
        {"--tokenizer-type ByteTokenizer --bogus", "2", "mg_tokenize: --bogus: unknown flag"},
        {"--tokenizer-type ByteTokenizer hello", "2", "mg_tokenize: hello: unknown argument "
         "(the text goes after --text, or on standard input)"},
        {"--tokenizer-type ByteTokenizer --text", "2", "mg_tokenize: --text needs a value"},
        {"--tokenizer-type GPT2BPETokenizer --vocab-file v.json --text hi", "1", "mg_tokenize: "
         "--tokenizer-type GPT2BPETokenizer takes --vocab-file vocab.json and --merge-file "
         "merges.txt: --merge-file is missing"},
        {"--tokenizer-type HuggingFaceTokenizer --vocab-file X --tokenizer-model X", "1",
         "mg_tokenize: --tokenizer-type HuggingFaceTokenizer takes one file, --tokenizer-model "
         "FILE or --vocab-file FILE: both were given"},
        {"--tokenizer-type ByteTokenizer --decode --text '4294967361 4294967362'", "1",
         "mg_tokenize: --decode: an id is outside 0..255 (4294967361)"},
        {"--tokenizer-type ByteTokenizer --decode --text '65 -1'", "1",
         "mg_tokenize: --decode: an id is outside 0..255 (-1)"},
        {"--tokenizer-type ByteTokenizer --decode --text '65,66 67'", "0", "ABC\n"},
        {"--tokenizer-type Foo --text hi", "1", "mg_tokenize: --tokenizer-type Foo: unknown"},
        {"--tokenizer-type TikTokenizer --vocab-file " VOCAB " --text 'Hello world'", "0",
         "15496 995\n2 tokens, vocabulary 50257, eod 50256, bos -1\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[2048], out[2048], name[300];
        int want = atoi(cases[i][1]), rc;
        snprintf(cmd, sizeof cmd, "build/mg_tokenize %s < /dev/null", cases[i][0]);
        rc = run(cmd, out, sizeof out);
        snprintf(name, sizeof name, "tokenize: %s: exit %d, %s", cases[i][0], want,
                 want ? "one error line" : "GPT-2's ids");
        mg_test_report(rc == want && (want ? strstr(out, cases[i][2]) == out &&
                                             strchr(out, '\n') == out + strlen(out) - 1
                                           : !strcmp(out, cases[i][2])),
                       name, "rc %d: %.300s", rc, out);
    }
    /* ids on standard input: read to its end and no further (the buffer was not terminated,
       and the parser ran on into whatever the allocator left there: MALLOC_PERTURB_ fills it) */
    char out[2048];
    int rc = run("printf '65 66' | MALLOC_PERTURB_=85 build/mg_tokenize --tokenizer-type "
                 "ByteTokenizer --decode", out, sizeof out);
    mg_test_report(rc == 0 && !strcmp(out, "AB\n"), "tokenize: --decode reads the ids on "
                   "standard input and nothing past them", "rc %d: %.300s", rc, out);
}

/* --llmc picks llm.c's kind by the vocabulary, as llm.c's data scripts pick it by the
   tokenizer (data_common.py write_datafile's model_desc): GPT-2's ranks (50,257 ids) give
   the GPT-2 kind (uint16), cl100k_base's (100,277) the Llama-3 kind (uint32); either holds the
   tokens of the same text as -o PREFIX writes them, ids above 65535 kept (before: refused).
   gpt_train trains on the Llama-3 kind file.                                              */
static void check_llmc_kinds(void) {
    static const char *const vocab[2] = {VOCAB, ".venv/share/vocab/cl100k_base.tiktoken"};
    static const char *const pattern[2] = {"gpt2", "cl100k_base"};
    const char *text = "data/01_the_river_town.txt";
    char cmd[2048], out[4096], err[MG_ERRLEN], name[300];
    for (int k = 0; k < 2; k++) {
        mg_dataset ll, ix;
        int64_t hi = 0;
        int ok = 0;
        snprintf(cmd, sizeof cmd, TOOL " --quiet --llmc %s/kind%d_llmc.bin --tokenizer-type "
                 "TikTokenizer --tokenizer-model %s --tiktoken-pattern %s %s && " TOOL " --quiet "
                 "-o %s/kind%d_idx --dtype int32 --tokenizer-type TikTokenizer "
                 "--tokenizer-model %s --tiktoken-pattern %s %s", dir, k, vocab[k], pattern[k],
                 text, dir, k, vocab[k], pattern[k], text);
        int rc = run(cmd, out, sizeof out);
        snprintf(cmd, sizeof cmd, "%s/kind%d_llmc.bin", dir, k);
        if (rc == 0 && mg_dataset_open(cmd, &ll, err, sizeof err) == 0) {
            snprintf(cmd, sizeof cmd, "%s/kind%d_idx", dir, k);
            if (mg_dataset_open(cmd, &ix, err, sizeof err) == 0) {
                ok = ll.format == MG_DATA_LLMC_TOKENS && ll.n_tokens == ix.n_tokens &&
                     ll.token_dtype == (k ? MG_TOKEN_U32 : MG_IDX_U16);
                for (int64_t i = 0; ok && i < ll.n_tokens; i++)
                    ok = mg_dataset_token(&ll, i) == mg_dataset_token(&ix, i);
                mg_dataset_token_range(&ll, NULL, &hi);
                ok = ok && (k ? hi > 65535 : hi < 50257);
                mg_dataset_close(&ix);
            }
            mg_dataset_close(&ll);
        }
        snprintf(name, sizeof name, "prepare: --llmc with %s's ranks writes llm.c's %s kind, the "
                 "tokens of -o PREFIX%s", pattern[k], k ? "Llama-3" : "GPT-2",
                 k ? " (ids above 65535 kept)" : "");
        mg_test_report(ok, name, "rc %d: %.300s %s (largest id %lld)", rc, out, err,
                       (long long)hi);
    }
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/kind1_llmc.bin --vocab-size 100352 "
             "--train-iters 1", dir);
    int rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0, "prepare: gpt_train trains on the Llama-3 kind llm.c file",
                   "rc %d: %.600s", rc, out);
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/kind1_llmc.bin --vocab-size 50257 "
             "--train-iters 1", dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc != 0 && strstr(out, "is outside the vocabulary (--vocab-size 50257: ids "
                   "0 … 50256)"), "prepare: gpt_train refuses a Llama-3 kind file with ids "
                   "beyond --vocab-size", "rc %d: %.600s", rc, out);
}

static void check_tiktoken(void) {
    char cmd[2048], out[4096];
    int rc, ok;
    if (access(VOCAB, R_OK) != 0 || access(".venv/bin/python", X_OK) != 0) {
        mg_test_report(0, "prepare: GPT-2's ranks and the .venv are installed", "missing "
                       VOCAB " or .venv/bin/python: run make deps");
        return;
    }
    snprintf(cmd, sizeof cmd, ".venv/bin/python tests/oracle/preprocess.py --tiktoken " VOCAB
             " " DATA "prep_input.jsonl %s/tkref", dir);
    rc = run(cmd, out, sizeof out);
    snprintf(cmd, sizeof cmd, TOOL " --quiet --input " DATA "prep_input.jsonl --output-prefix "
             "%s/tk --append-eod --tokenizer-type TikTokenizer --tokenizer-model " VOCAB
             " --workers 3", dir);
    ok = rc == 0 && run(cmd, out, sizeof out) == 0 &&
         same_file(tp("tk_text_document.bin"), tp("tkref_text_document.bin")) &&
         same_file(tp("tk_text_document.idx"), tp("tkref_text_document.idx"));
    mg_test_report(ok, "prepare: TikTokenizer (GPT-2's ranks) --append-eod = preprocess_data "
                   "with tiktoken itself, .bin and .idx byte for byte", "rc %d: %.300s", rc, out);
    /* the rank file given as --vocab-file (tools/mg_tokenize's spelling): the same dataset */
    snprintf(cmd, sizeof cmd, TOOL " --quiet --input " DATA "prep_input.jsonl --output-prefix "
             "%s/tkv --append-eod --tokenizer-type TikTokenizer --vocab-file " VOCAB, dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0 && same_file(tp("tkv_text_document.bin"), tp("tk_text_document.bin"))
                   && same_file(tp("tkv_text_document.idx"), tp("tk_text_document.idx")),
                   "prepare: TikTokenizer's file as --vocab-file = as --tokenizer-model",
                   "rc %d: %.300s", rc, out);
    check_llmc_kinds();
}

static void check_train_text(void) {
    char cmd[2048], out[16384];
    int rc;
    int32_t ids[3] = {5, 300, 7};
    mg_idx_writer w;
    char err[MG_ERRLEN];
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/tk_text_document --tokenizer-type "
             "TikTokenizer --tokenizer-model " VOCAB " --train-iters 2 --sample-tokens 8 "
             "--prompt 'The river town'", dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0 && strstr(out, "vocabulary 50257") &&
                   strstr(out, "----- sample (8 tokens after a 3-token prompt") &&
                   strstr(out, "\nThe river town|"), "train text: --tokenizer-type "
                   "TikTokenizer: vocabulary 50257 from the tokenizer, --prompt encoded (3 "
                   "tokens), the sample printed as text after it", "rc %d: %.600s", rc, out);
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/tk_text_document --tokenizer-type "
             "TikTokenizer --tokenizer-model " VOCAB " --train-iters 1 --vocab-size 50304", dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 2 && strstr(out, "--vocab-size 50304 disagrees with --tokenizer-type "
                   "TikTokenizer, which has 50257 ids"), "train text: a disagreeing --vocab-size "
                   "is an error", "rc %d: %.300s", rc, out);
    /* a dataset with id 300 under the byte tokenizer (256 ids) */
    if (mg_idx_writer_begin(&w, tp("big_ids"), MG_IDX_U16, err, sizeof err) == 0) {
        for (int k = 0; k < 40; k++) mg_idx_writer_add(&w, ids, 3, err, sizeof err);
        mg_idx_writer_finish(&w, err, sizeof err);
    }
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/big_ids --tokenizer-type ByteTokenizer "
             "--train-iters 1", dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 2 && strstr(out, "big_ids: token id 300 is outside the vocabulary "
                   "(--tokenizer-type ByteTokenizer: ids 0 … 255)"), "train text: a dataset "
                   "with ids beyond the tokenizer's vocabulary is refused, naming both",
                   "rc %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/o0_text_document --vocab-size 256 "
             "--train-iters 1 --sample-tokens 4 --prompt hi", dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 2 && strstr(out, "--prompt needs --tokenizer-type"), "train text: "
                   "--prompt without --tokenizer-type refused", "rc %d: %.300s", rc, out);
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/o0_text_document --vocab-size 256 "
             "--train-iters 1 --merge-file merges.txt", dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 2 && strstr(out, "--merge-file needs --tokenizer-type"), "train text: "
                   "a tokenizer file without --tokenizer-type refused", "rc %d: %.300s", rc,
                   out);
    /* a corpus of nothing but the end-of-document byte (255), prompted with two of them: the
       trained model emits it first, and the sample stops there */
    if (mg_idx_writer_begin(&w, tp("eod_only"), MG_IDX_U16, err, sizeof err) == 0) {
        int32_t eods[50];
        for (int k = 0; k < 50; k++) eods[k] = 255;
        for (int k = 0; k < 20; k++) mg_idx_writer_add(&w, eods, 50, err, sizeof err);
        mg_idx_writer_finish(&w, err, sizeof err);
    }
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/eod_only --tokenizer-type ByteTokenizer "
             "--train-iters 30 --lr 1e-2 --sample-tokens 10 --prompt \"$(printf '\\377\\377')\"",
             dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0 && strstr(out, "\n\377\377|\n(end of document after 0 tokens)"),
                   "train text: the sample stops at the tokenizer's end-of-document token",
                   "rc %d: %.600s", rc, out);
    snprintf(cmd, sizeof cmd, TRAIN "--data-path %s/o0_text_document --tokenizer-type "
             "ByteTokenizer --train-iters 2 --sample-tokens 5 --prompt 'Hello there'", dir);
    rc = run(cmd, out, sizeof out);
    mg_test_report(rc == 0 && strstr(out, "vocabulary 256") &&
                   strstr(out, "(5 tokens after a 11-token prompt") &&
                   strstr(out, "\nHello there|"), "train text: ByteTokenizer --prompt: 11 "
                   "byte tokens, printed back as text", "rc %d: %.600s", rc, out);
}

int main(void) {
    char cmd[300];
    snprintf(dir, sizeof dir, "/tmp/mg_test_prepare.XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    if (access(TOOL, X_OK) != 0) {
        mg_test_report(0, "prepare: " TOOL " is built (make " TOOL ")", "missing");
        return mg_test_summary();
    }
    check_oracle();
    check_empty_docs();
    check_workers();
    check_bad_lines();
    check_all_or_none();
    check_flag_errors();
    check_null_tokenizer();
    check_progress();
    check_tiktoken();
    check_tokenize_cli();
    check_train_text();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return mg_test_summary();
}
