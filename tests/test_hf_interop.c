// mg-test: ranks=1 timeout=120
/* test_hf_interop.c — megatron.h against files written by the real Hugging Face `transformers`
   and by llm.c's own checkpoint writer. tests/oracle/hf_interop.py (transformers 4.40.2) wrote
   the fixtures in tests/data/hf_* (see its header); this test needs no Python:
     - import of GPT2LMHeadModel.save_pretrained (`transformer.` prefix, lm_head absent) and of
       GPT2Model.save_pretrained (no prefix, odd vocabulary 37): the architecture read from
       the files and config.json, then the loss of a fixed batch = transformers' own forward
       (labels=tokens) and every logit = transformers' (<= 1e-5 relative);
     - the GPT2LMHeadModel save sharded (max_shard_size: model-0000N-of-0000M.safetensors and
       model.safetensors.index.json) imports bit-identical to the one-file save;
     - a Hub-style file (h.{i}.attn.bias buffers, no config.json) and an llm.c checkpoint
       (train_gpt2.py write_model: version 3, Vp 128) of the same weights import bit-identical
       to the GPT2Model save;
     - export (mg_gpt_export_hf): model.safetensors holds exactly the tensors transformers
       saved, bit for bit (names without the prefix, V rows), config.json gives the GPT2Config
       values that decide the math (the oracle recorded them from transformers), and the export
       imports back bit-exactly; llm.c -> HF conversion gives the transformers file too;
     - a model with an untied lm_head is refused with one clear error (megatron.h ties it).
   That transformers itself loads our export (no missing/unexpected keys, same loss) is checked
   live by the oracle script when build/gpt_train exists (make oracle).
   Usage: test_hf_interop [DATADIR]   (default tests/data; the oracle passes its output dir) */
#include "gpt_test_util.h"
#include <sys/stat.h>

static const char *data_dir = "tests/data";

static void data_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", data_dir, name);
}

/* --- the oracle's record: hf_ref.json (sizes, GPT2Config values) and hf_ref.safetensors --- */
typedef struct hf_ref { char *text; mg_json js; } hf_ref;

static void ref_open(hf_ref *r) {
    char path[600], err[MG_ERRLEN];
    data_path(path, sizeof path, "hf_ref.json");
    r->text = gpt_read_text(path);
    if (!r->text) { fprintf(stderr, "missing %s (run make oracle)\n", path); exit(1); }
    if (mg_json_parse(&r->js, r->text, strlen(r->text), err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        exit(1);
    }
}
static void ref_close(hf_ref *r) { mg_json_free(&r->js); free(r->text); }

/* An integer of the record: model.key, or the top-level key when model is NULL. */
static int ref_int(const hf_ref *r, const char *model, const char *key) {
    int64_t obj = model ? mg_json_get(&r->js, 0, model) : 0, v = 0;
    int64_t tok = mg_json_get(&r->js, obj, key);
    if (tok < 0 || mg_json_int(&r->js, tok, &v)) {
        fprintf(stderr, "hf_ref.json: %s.%s missing or not an integer\n", model ? model : "",
                key);
        exit(1);
    }
    return (int)v;
}

/* The architecture of one oracle model ("lm", "base", "gelu" or "relu2"). */
static mg_gpt_config ref_config(const hf_ref *r, const char *model) {
    mg_gpt_config c;
    int64_t act = mg_json_get(&r->js, mg_json_get(&r->js, 0, model), "activation_function");
    char *name = act >= 0 ? mg_json_strdup(&r->js, act) : NULL;
    memset(&c, 0, sizeof c);
    c.gelu_erf = name && !strcmp(name, "gelu");   /* "gelu_new" (GPT-2's): the tanh GELU */
    c.squared_relu = name && !strcmp(name, "relu2");
    free(name);
    c.n_layer = ref_int(r, model, "n_layer");
    c.hidden = ref_int(r, model, "n_embd");
    c.n_head = ref_int(r, model, "n_head");
    c.seq_len = ref_int(r, model, "seq_len");
    c.max_pos = ref_int(r, model, "n_positions");
    c.vocab_size = ref_int(r, model, "vocab_size");
    c.padded_vocab = mg_gpt_pad_vocab(c.vocab_size, 128, 1);
    return c;
}

/* A tensor of hf_ref.safetensors ("lm.tokens", "base.logits", ...), malloc'ed. */
static void *ref_tensor(const char *name, int64_t *n) {
    char path[600];
    data_path(path, sizeof path, "hf_ref.safetensors");
    return gpt_ref_tensor(path, name, n);
}

/* --- the model on the oracle's batch ----------------------------------------------------- */
typedef struct hf_run {
    gpt_fixture f;
    float *params;       /* host copy of the imported flat parameter buffer                 */
    double loss;         /* mean token loss of the batch                                    */
    float *logits;       /* [B, T, V] as transformers lays them out                         */
} hf_run;

/* Imports `weights` into a model of cfg and runs the oracle batch of `model` forward. */
static void hf_run_forward(hf_run *run, const hf_ref *r, const char *model, const char *weights) {
    mg_gpt_config cfg = ref_config(r, model);
    int B = ref_int(r, NULL, "batch"), T = cfg.seq_len, V = cfg.vocab_size, b, t;
    char name[64];
    int32_t *tokens;
    snprintf(name, sizeof name, "%s.tokens", model);
    tokens = (int32_t *)ref_tensor(name, NULL);
    gpt_fixture_make(&run->f, &cfg, B, 1, 1);
    gpt_import(&run->f.m, weights, 0);
    run->params = gpt_host(&run->f.m, run->f.m.param_buf);
    run->loss = mg_gpt_run_microbatches(&run->f.m, tokens, 1, 0.0f, 0) / ((double)B * T);
    run->logits = (float *)malloc(sizeof(float) * (size_t)B * T * V);
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++)
            mg_gpt_logits_row(&run->f.m, 0, t, b, run->logits + ((size_t)b * T + t) * V);
    free(tokens);
}
static void hf_run_free(hf_run *run) {
    free(run->params);
    free(run->logits);
    gpt_fixture_free(&run->f);
}

/* Loss and logits of a run against transformers' forward of the same batch. */
static void check_against_transformers(const hf_run *run, const char *model, const char *label) {
    char name[64], what[300];
    int64_t n = 0, i;
    float *want_loss, *want_logits, got_loss = (float)run->loss;
    double ss = 0, rms;
    snprintf(name, sizeof name, "%s.loss", model);
    want_loss = (float *)ref_tensor(name, NULL);
    snprintf(name, sizeof name, "%s.logits", model);
    want_logits = (float *)ref_tensor(name, &n);
    snprintf(what, sizeof what, "hf: %s: loss equals transformers' forward (labels=tokens)", label);
    mg_test_close(what, &got_loss, want_loss, 1, 1e-5, 0);
    for (i = 0; i < n; i++) ss += (double)want_logits[i] * want_logits[i];
    rms = sqrt(ss / (double)n);
    snprintf(what, sizeof what, "hf: %s: all %lld logits equal transformers'", label, (long long)n);
    mg_test_close(what, run->logits, want_logits, (long)n, 1e-5, rms);
    free(want_loss);
    free(want_logits);
}

/* The architecture a weights file reports, against the oracle's sizes. */
static void check_open(const hf_ref *r, const char *model, const char *file, mg_weights_kind kind,
                       const char *prefix, int heads_known) {
    mg_gpt_config want = ref_config(r, model);
    mg_weights_file wf;
    char path[600], err[MG_ERRLEN], what[300];
    int rc, ok;
    data_path(path, sizeof path, file);
    rc = mg_weights_open(&wf, path, err, sizeof err);
    ok = !rc && wf.kind == kind && !strcmp(wf.prefix, prefix) && wf.cfg.n_layer == want.n_layer &&
         wf.cfg.hidden == want.hidden && wf.cfg.max_pos == want.max_pos &&
         wf.cfg.vocab_size == want.vocab_size && wf.cfg.n_head == (heads_known ? want.n_head : 0);
    snprintf(what, sizeof what, "hf: %s opens as %s%s%s with the oracle's architecture", file,
             kind == MG_WEIGHTS_LLMC ? "an llm.c checkpoint" : "Hugging Face GPT-2",
             prefix[0] ? ", prefix " : "", prefix);
    if (rc) mg_test_report(0, what, "%s", err);
    else mg_test_report(ok, what, "kind %d prefix '%s': %d layers, C %d, %d heads, %d positions, "
                        "V %d", (int)wf.kind, wf.prefix, wf.cfg.n_layer, wf.cfg.hidden,
                        wf.cfg.n_head, wf.cfg.max_pos, wf.cfg.vocab_size);
    if (!rc) mg_weights_close(&wf);
}

/* --- export ------------------------------------------------------------------------------- */
/* Every tensor of `want` (a transformers file; `prefix` stripped from its names) is in `got`
   under the bare name with the same dtype, shape and bytes, and got has nothing else.      */
static int same_tensors(const char *got_path, const char *want_path, const char *prefix,
                        char *why, size_t cap) {
    mg_st_file got, want;
    char err[MG_ERRLEN];
    size_t plen = strlen(prefix);
    int i, ok = 1;
    if (mg_st_open(got_path, &got, err, sizeof err)) { snprintf(why, cap, "%s", err); return 0; }
    if (mg_st_open(want_path, &want, err, sizeof err)) {
        mg_st_close(&got);
        snprintf(why, cap, "%s", err);
        return 0;
    }
    if (got.n_tensors != want.n_tensors) {
        snprintf(why, cap, "%d tensors, transformers saved %d", got.n_tensors, want.n_tensors);
        ok = 0;
    }
    for (i = 0; i < want.n_tensors && ok; i++) {
        const mg_st_tensor *w = &want.tensors[i], *g;
        const char *bare = strncmp(w->name, prefix, plen) ? w->name : w->name + plen;
        int d;
        g = mg_st_find(&got, bare);
        if (!g) { snprintf(why, cap, "%s missing", bare); ok = 0; break; }
        ok = g->dtype == w->dtype && g->ndim == w->ndim && g->nbytes == w->nbytes;
        for (d = 0; ok && d < w->ndim; d++) ok = g->shape[d] == w->shape[d];
        if (!ok) { snprintf(why, cap, "%s: dtype or shape differs", bare); break; }
        if (memcmp(g->data, w->data, w->nbytes)) {
            snprintf(why, cap, "%s: values differ", bare);
            ok = 0;
        }
    }
    mg_st_close(&got);
    mg_st_close(&want);
    return ok;
}

/* Tokens a and b (of js_a, js_b) hold the same JSON value: strings decoded, numbers by value,
   true/false/null by type. */
static int json_same(const mg_json *js_a, int64_t a, const mg_json *js_b, int64_t b) {
    const mg_json_tok *ta = &js_a->toks[a], *tb = &js_b->toks[b];
    int same = ta->type == tb->type;
    if (same && ta->type == MG_JSON_NUMBER) {
        same = strtod(js_a->text + ta->start, NULL) == strtod(js_b->text + tb->start, NULL);
    } else if (same && ta->type == MG_JSON_STRING) {
        char *sa = mg_json_strdup(js_a, a), *sb = mg_json_strdup(js_b, b);
        same = sa && sb && !strcmp(sa, sb);
        free(sa);
        free(sb);
    }
    return same;
}

/* The config.json at `path` makes transformers build the oracle's model: each GPT2Config value
   the oracle recorded for `model` is in the file with the same value, or the key is absent and
   GPT2Config's default (also recorded; model_type has none) is that value.                  */
static int config_has_values(const hf_ref *r, const char *model, const char *path, char *why,
                             size_t cap) {
    char *text = gpt_read_text(path), err[MG_ERRLEN];
    mg_json js;
    int64_t model_obj = mg_json_get(&r->js, 0, model), want, defaults, k;
    int ok = 1;
    if (!text) { snprintf(why, cap, "%s missing", path); return 0; }
    if (mg_json_parse(&js, text, strlen(text), err, sizeof err)) {
        snprintf(why, cap, "%s: %s", path, err);
        free(text);
        return 0;
    }
    want = mg_json_get(&r->js, model_obj, "config");
    defaults = mg_json_get(&r->js, model_obj, "config_default");
    if (want < 0 || defaults < 0) { snprintf(why, cap, "hf_ref.json: no %s.config", model); ok = 0; }
    for (k = want + 1; ok && k < r->js.toks[want].next; k = r->js.toks[k + 1].next) {
        char *key = mg_json_strdup(&r->js, k);
        int64_t got = mg_json_get(&js, 0, key), dflt = mg_json_get(&r->js, defaults, key);
        if (got >= 0 ? !json_same(&js, got, &r->js, k + 1)
                     : dflt < 0 || !json_same(&r->js, dflt, &r->js, k + 1)) {
            snprintf(why, cap, "\"%s\" %s", key, got >= 0 ? "differs" : "missing, and "
                     "transformers' default is not the model's");
            ok = 0;
        }
        free(key);
    }
    mg_json_free(&js);
    free(text);
    return ok;
}

/* Exports a run's model; checks the files against what transformers saved (want_dir holds
   its model.safetensors and the prefix its names carry) and that the export imports back
   bit-exactly. */
static void check_export(const hf_ref *r, hf_run *run, const char *model, const char *label,
                         const char *want_file, const char *prefix) {
    char dir[256], path[600], want[600], err[MG_ERRLEN], why[1400] = "", what[300];
    hf_run back;
    gpt_tmpdir(dir, sizeof dir, "hfexport");
    snprintf(path, sizeof path, "%s/out", dir);
    if (mg_gpt_export_hf(&run->f.m, path, err, sizeof err)) {
        snprintf(what, sizeof what, "hf: %s: export", label);
        mg_test_report(0, what, "%s", err);
        gpt_rmtree(dir);
        return;
    }
    snprintf(path, sizeof path, "%s/out/model.safetensors", dir);
    data_path(want, sizeof want, want_file);
    snprintf(what, sizeof what, "hf: %s: exported tensors = those transformers saved, bit for "
             "bit", label);
    mg_test_report(same_tensors(path, want, prefix, why, sizeof why), what, "%s", why);
    snprintf(path, sizeof path, "%s/out/config.json", dir);
    why[0] = 0;
    snprintf(what, sizeof what, "hf: %s: exported config.json gives transformers' GPT2Config "
             "values", label);
    mg_test_report(config_has_values(r, model, path, why, sizeof why), what, "%s", why);
    snprintf(path, sizeof path, "%s/out", dir);
    hf_run_forward(&back, r, model, path);
    snprintf(what, sizeof what, "hf: %s: export -> import is bit-exact (weights, loss)", label);
    CHECK(!memcmp(back.params, run->params, sizeof(float) * (size_t)run->f.m.n_elems) &&
          back.loss == run->loss, what);
    hf_run_free(&back);
    gpt_rmtree(dir);
}

/* A file's MLP activation must be the model's: the exact-GELU and squared-ReLU files into a
   tanh-GELU model, GPT-2's tanh file into an exact-GELU or a squared-ReLU model, are refused
   by mg_gpt_import with one line.                                                          */
static void check_gelu_mismatch(const hf_ref *r) {
    static const struct { const char *file, *model; int erf, relu2; const char *want; } cases[] = {
        {"hf_gelu", "gelu", 0, 0, "the model's MLP computes the tanh GELU, "},
        {"hf_lm", "lm", 1, 0, "the model's MLP computes the exact (erf) GELU, "},
        {"hf_relu2", "relu2", 0, 0, "the model's MLP computes the tanh GELU, "},
        {"hf_lm", "lm", 0, 1, "the model's MLP computes the squared ReLU, "}};
    int i;
    for (i = 0; i < 4; i++) {
        mg_gpt_config cfg = ref_config(r, cases[i].model);
        mg_weights_file wf;
        gpt_fixture f;
        char path[600], err[MG_ERRLEN] = "", what[200];
        int rc = -1;
        cfg.gelu_erf = cases[i].erf;
        cfg.squared_relu = cases[i].relu2;
        data_path(path, sizeof path, cases[i].file);
        gpt_fixture_make(&f, &cfg, 1, 1, 1);
        if (!mg_weights_open(&wf, path, err, sizeof err)) {
            rc = mg_gpt_import(&f.m, &wf, err, sizeof err);
            mg_weights_close(&wf);
        }
        snprintf(what, sizeof what, "hf: %s into a model of %s: refused", cases[i].file,
                 cases[i].relu2 ? "the squared ReLU" : cases[i].erf ? "the exact GELU"
                                                                    : "the tanh GELU");
        mg_test_report(rc != 0 && !strncmp(err, cases[i].want, strlen(cases[i].want)) &&
                       !strchr(err, '\n'), what, "%s", err);
        gpt_fixture_free(&f);
    }
}

/* A GPT2LMHeadModel whose lm_head is not the word embedding cannot be represented: refused. */
static void check_untied(void) {
    mg_weights_file wf;
    char path[600], err[MG_ERRLEN] = "";
    int rc;
    data_path(path, sizeof path, "hf_untied");
    rc = mg_weights_open(&wf, path, err, sizeof err);
    if (!rc) mg_weights_close(&wf);
    mg_test_report(rc != 0 && strstr(err, "lm_head") && !strchr(err, '\n'),
                   "hf: an untied lm_head.weight is refused with one line naming it", "%s",
                   rc ? err : "opened without error");
}

/* --- careless and unsupported input ------------------------------------------------------- */
/* mg_weights_open(path) must fail with one line holding `needle`. */
static void expect_open_fails(const char *what, const char *path, const char *needle) {
    mg_weights_file wf;
    char err[MG_ERRLEN] = "", name[400];
    int rc = mg_weights_open(&wf, path, err, sizeof err);
    if (!rc) mg_weights_close(&wf);
    snprintf(name, sizeof name, "hf: %s", what);
    mg_test_report(rc != 0 && strstr(err, needle) && !strchr(err, '\n'), name, "%s",
                   rc ? err : "opened without error");
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, strlen(text), f) != strlen(text)) { perror(path); exit(1); }
    fclose(f);
}

/* A safetensors file of zero-filled F32 tensors (shape [rows, cols]) and string metadata. */
static void write_st(const char *path, int n, const char *const *names, const int64_t (*shapes)[2],
                     const char *const *meta_keys, const char *const *meta_vals, int n_meta) {
    mg_st_spec spec[4];
    mg_st_writer w;
    char err[MG_ERRLEN];
    int i, rc;
    memset(spec, 0, sizeof spec);
    for (i = 0; i < n; i++) {
        spec[i].name = names[i];
        spec[i].dtype = MG_ST_F32;
        spec[i].ndim = 2;
        spec[i].shape[0] = shapes[i][0];
        spec[i].shape[1] = shapes[i][1];
    }
    rc = mg_st_writer_begin(&w, path, NULL, 1, spec, n, meta_keys, meta_vals, n_meta, err,
                            sizeof err);
    for (i = 0; i < n && !rc; i++) {
        int64_t numel = shapes[i][0] * shapes[i][1];
        float *zeros = (float *)calloc((size_t)(numel ? numel : 1), sizeof(float));
        rc = mg_st_writer_write(&w, i, 0, zeros, numel, err, sizeof err);
        free(zeros);
    }
    if (!rc) rc = mg_st_writer_commit(&w, err, sizeof err);
    if (rc) { fprintf(stderr, "%s: %s\n", path, err); exit(1); }
}

/* The real GPT2Model save (hf_base) beside a config.json that changes one math-deciding key:
   refused with the key named; the other keys' accepted values open. Then config.json and the
   weights path as a named pipe, a directory, an oversized or a garbage file; shapes and
   metadata that do not fit an int.                                                         */
static void check_careless(void) {
    static const char *const bad[][2] = {   /* member put last (it wins), key in the error */
        {"\"model_type\": \"gpt_neo\"", "\"model_type\" is \"gpt_neo\""},
        {"\"activation_function\": \"relu\"", "\"activation_function\" is \"relu\""},
        {"\"activation_function\": \"quick_gelu\"", "\"activation_function\" is \"quick_gelu\""},
        {"\"layer_norm_epsilon\": 1e-06", "\"layer_norm_epsilon\" is 1e-06"},
        {"\"scale_attn_weights\": false", "\"scale_attn_weights\" is false"},
        {"\"scale_attn_by_inverse_layer_idx\": true", "\"scale_attn_by_inverse_layer_idx\" is true"},
        {"\"add_cross_attention\": true", "\"add_cross_attention\" is true"},
        {"\"n_inner\": 48", "\"n_inner\" is 48"},
        {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\" is false"},
        {"\"reorder_and_upcast_attn\": null", "\"reorder_and_upcast_attn\" is null"},
    };
    static const char *const good[] = {"\"reorder_and_upcast_attn\": true",
                                       "\"activation_function\": \"gelu_pytorch_tanh\"",
                                       "\"n_inner\": 64", "\"activation_function\": \"gelu\"",
                                       "\"activation_function\": \"gelu_python\""};
    char dir[256], path[600], cfg[600], text[4096], what[300];
    char *orig;
    long len = 0;
    void *weights;
    size_t i;
    mg_weights_file wf;
    char err[MG_ERRLEN];
    gpt_tmpdir(dir, sizeof dir, "hfcareless");
    data_path(path, sizeof path, "hf_base/config.json");
    orig = gpt_read_text(path);
    data_path(path, sizeof path, "hf_base/model.safetensors");
    weights = mg_test_read_file(path, &len);
    if (!orig || !weights || orig[0] != '{') { fprintf(stderr, "hf_base fixture missing\n"); exit(1); }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(weights, 1, (size_t)len, f) != (size_t)len) { perror(path); exit(1); }
        fclose(f);
    }
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    {   /* the members go before the object's closing brace: the last of a repeated key wins,
           as Python's json.loads (and transformers) read it */
        char *close = strrchr(orig, '}');
        if (!close) { fprintf(stderr, "hf_base/config.json: no closing brace\n"); exit(1); }
        *close = 0;
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s, %s}\n", orig, bad[i][0]);
        write_text(cfg, text);
        snprintf(what, sizeof what, "config.json with %s beside transformers' weights: refused, "
                 "the key named", bad[i][0]);
        expect_open_fails(what, dir, bad[i][1]);
    }
    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc;
        snprintf(text, sizeof text, "%s, %s}\n", orig, good[i]);
        write_text(cfg, text);
        rc = mg_weights_open(&wf, dir, err, sizeof err);
        int exact = strstr(good[i], "\"gelu\"") || strstr(good[i], "gelu_python");
        snprintf(what, sizeof what, "hf: config.json with %s %s: opens", good[i],
                 exact ? "(the exact GELU)" : "(the same function)");
        mg_test_report(!rc && wf.cfg.n_head == 2 && wf.cfg.hidden == 16 &&
                       wf.cfg.gelu_erf == exact, what, "%s", rc ? err : "");
        if (!rc) mg_weights_close(&wf);
    }
    /* config.json that is no small regular file: refused, never waited on */
    alarm(60);
    remove(cfg);
    if (mkfifo(cfg, 0600) == 0)
        expect_open_fails("config.json as a named pipe: refused without waiting for a writer",
                          dir, "not a regular file");
    remove(cfg);
    mkdir(cfg, 0755);
    expect_open_fails("config.json as a directory: refused", dir, "is a directory");
    rmdir(cfg);
    write_text(cfg, "{\"n_layer\": 1,");
    expect_open_fails("config.json cut short: refused", dir, "malformed JSON");
    if (truncate(cfg, (off_t)17 << 20) == 0)
        expect_open_fails("a 17 MB config.json: refused unread", dir, "more than the");
    remove(cfg);
    /* the weights path itself */
    snprintf(path, sizeof path, "%s/fifo.safetensors", dir);
    if (mkfifo(path, 0600) == 0)
        expect_open_fails("weights path a named pipe: refused without waiting for a writer", path,
                          "not a regular file");
    snprintf(path, sizeof path, "%s/empty_dir", dir);
    mkdir(path, 0755);
    expect_open_fails("a directory without model.safetensors: refused", path,
                      "model.safetensors: cannot open");
    alarm(0);
    {   /* int64 shapes and metadata strings that do not fit the model's ints */
        static const char *const hf_names[2] = {"wte.weight", "wpe.weight"};
        static const char *const mg_names[1] = {"embedding.word_embeddings.weight"};
        static const int64_t huge[2][2] = {{3000000000LL, 0}, {4, 0}}, small[2][2] = {{5, 4}, {3, 4}};
        const char *heads_key[1] = {"n_head"}, *heads_val[1] = {"two"};
        const char *arch_keys[5] = {"num_layers", "hidden_size", "num_attention_heads",
                                    "max_position_embeddings", "vocab_size"};
        const char *arch_vals[5] = {"1", "4", "2", "99999999999", "5"};
        snprintf(path, sizeof path, "%s/huge.safetensors", dir);
        write_st(path, 2, hf_names, huge, NULL, NULL, 0);
        expect_open_fails("wte.weight of 3e9 rows (int64 shape): refused, not wrapped", path,
                          "the rows of wte.weight (vocab_size) is 3000000000");
        snprintf(path, sizeof path, "%s/heads.safetensors", dir);
        write_st(path, 2, hf_names, small, heads_key, heads_val, 1);
        expect_open_fails("metadata n_head 'two' (no config.json): refused", path,
                          "metadata n_head is 'two', not a positive integer");
        snprintf(path, sizeof path, "%s/ours.safetensors", dir);
        write_st(path, 1, mg_names, small, arch_keys, arch_vals, 5);
        expect_open_fails("our model file with max_position_embeddings 99999999999: refused", path,
                          "metadata max_position_embeddings is '99999999999', not a positive");
    }
    free(orig);
    free(weights);
    gpt_rmtree(dir);
}

/* Export states each GPT2Config key that decides the math, with megatron.h's value, instead
   of leaving it to transformers' defaults. */
static void check_export_states_keys(hf_run *run) {
    static const char *const keys[9] = {"model_type", "activation_function",
        "layer_norm_epsilon", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
        "reorder_and_upcast_attn", "add_cross_attention", "n_inner", "tie_word_embeddings"};
    char dir[256], path[600], err[MG_ERRLEN], missing[200] = "";
    char *text;
    mg_json js;
    mg_hf_config c;
    int k, ok, parsed;
    gpt_tmpdir(dir, sizeof dir, "hfkeys");
    ok = mg_gpt_export_hf(&run->f.m, dir, err, sizeof err) == 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    text = ok ? gpt_read_text(path) : NULL;
    ok = parsed = text && mg_json_parse(&js, text, strlen(text), err, sizeof err) == 0;
    for (k = 0; ok && k < 9; k++)
        if (mg_json_get(&js, 0, keys[k]) < 0) {
            snprintf(missing, sizeof missing, "%s not stated", keys[k]);
            ok = 0;
        }
    if (parsed) mg_json_free(&js);
    ok = ok && mg_hf_config_read(path, &c, err, sizeof err) == 0;   /* and reads back */
    mg_test_report(ok, "hf: exported config.json states every math-deciding key (and reads back)",
                   "%s", missing[0] ? missing : ok ? "" : err);
    free(text);
    gpt_rmtree(dir);
}

/* check_open, then the oracle batch through the weights of data file `file`. */
static void open_and_run(hf_run *run, const hf_ref *r, const char *model, const char *file,
                         mg_weights_kind kind, const char *prefix, int heads_known) {
    char path[600];
    check_open(r, model, file, kind, prefix, heads_known);
    data_path(path, sizeof path, file);
    hf_run_forward(run, r, model, path);
}

/* Two imports of the same weights: bit-identical parameters, identical loss. */
static void check_same_import(const hf_run *got, const hf_run *want, const char *what) {
    CHECK(!memcmp(got->params, want->params, sizeof(float) * (size_t)want->f.m.n_elems) &&
          got->loss == want->loss, what);
}

int main(int argc, char **argv) {
    hf_ref r;
    hf_run lm, lm_sharded, base, hub, llmc, gelu, relu2;
    if (argc > 1) data_dir = argv[1];
    ref_open(&r);

    /* GPT2LMHeadModel.save_pretrained: transformer.-prefixed names, tied lm_head absent */
    open_and_run(&lm, &r, "lm", "hf_lm", MG_WEIGHTS_HF, "transformer.", 1);
    check_against_transformers(&lm, "lm", "GPT2LMHeadModel save (V 50)");
    check_export(&r, &lm, "lm", "GPT2LMHeadModel save", "hf_lm/model.safetensors",
                 "transformer.");

    /* the same model saved in four shards, found through model.safetensors.index.json */
    open_and_run(&lm_sharded, &r, "lm", "hf_lm_sharded", MG_WEIGHTS_HF, "transformer.", 1);
    check_same_import(&lm_sharded, &lm, "hf: GPT2LMHeadModel save in 4 shards (index.json) "
                      "imports bit-identical to the one-file save");

    /* GPT2Model.save_pretrained: bare names, vocabulary 37 (padded to 128 inside) */
    open_and_run(&base, &r, "base", "hf_base", MG_WEIGHTS_HF, "", 1);
    check_against_transformers(&base, "base", "GPT2Model save (V 37)");
    check_export(&r, &base, "base", "GPT2Model save", "hf_base/model.safetensors", "");

    /* the same weights as a Hub-style file (attn.bias buffers, no config.json) ... */
    open_and_run(&hub, &r, "base", "hf_hub.safetensors", MG_WEIGHTS_HF, "", 0);
    check_same_import(&hub, &base, "hf: Hub-style file (attn.bias buffers) imports "
                      "bit-identical to the GPT2Model save");

    /* ... and as llm.c's train_gpt2.py write_model writes it */
    open_and_run(&llmc, &r, "base", "hf_llmc.bin", MG_WEIGHTS_LLMC, "", 1);
    check_same_import(&llmc, &base, "hf: llm.c checkpoint (version 3, Vp 128) imports "
                      "bit-identical to the GPT2Model save");
    check_against_transformers(&llmc, "base", "llm.c checkpoint");
    check_export(&r, &llmc, "base", "llm.c -> HF", "hf_base/model.safetensors", "");

    /* activation_function "gelu": the exact (erf) GELU, imported, run and exported as such */
    open_and_run(&gelu, &r, "gelu", "hf_gelu", MG_WEIGHTS_HF, "transformer.", 1);
    CHECK(gelu.f.m.cfg.gelu_erf == 1 && gelu.f.m.tf.cfg.act == MG_ACT_GELU_ERF,
          "hf: activation_function \"gelu\": the model computes the exact (erf) GELU");
    check_against_transformers(&gelu, "gelu", "GPT2LMHeadModel, exact GELU");
    check_export(&r, &gelu, "gelu", "GPT2LMHeadModel, exact GELU", "hf_gelu/model.safetensors",
                 "transformer.");
    check_gelu_mismatch(&r);

    /* activation_function "relu2": the squared ReLU (Megatron-LM's --squared-relu) */
    open_and_run(&relu2, &r, "relu2", "hf_relu2", MG_WEIGHTS_HF, "transformer.", 1);
    CHECK(relu2.f.m.cfg.squared_relu == 1 && relu2.f.m.tf.cfg.act == MG_ACT_RELU2,
          "hf: activation_function \"relu2\": the model computes the squared ReLU");
    check_against_transformers(&relu2, "relu2", "GPT2LMHeadModel, squared ReLU");
    check_export(&r, &relu2, "relu2", "GPT2LMHeadModel, squared ReLU",
                 "hf_relu2/model.safetensors", "transformer.");

    check_untied();
    check_careless();
    check_export_states_keys(&base);

    hf_run_free(&lm);
    hf_run_free(&lm_sharded);
    hf_run_free(&base);
    hf_run_free(&hub);
    hf_run_free(&llmc);
    hf_run_free(&gelu);
    hf_run_free(&relu2);
    ref_close(&r);
    return mg_test_summary();
}
