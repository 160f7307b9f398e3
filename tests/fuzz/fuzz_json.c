/* tests/fuzz/fuzz_json.c — mg_json_parse (the parser under safetensors headers, config.json
   and checkpoint state files) and mg_hf_config_read, on arbitrary bytes.
   On success every token must lie inside the text and inside the token array, every
   container's `next` must skip exactly its subtree, and every accessor (get, strdup, int) must
   work on every token. See fuzz_util.h for the conventions.                                */
#include "fuzz_util.h"

/* Walks the value at token t (checking its subtree); returns the index after it.           */
static int64_t walk(const mg_json *js, int64_t t, size_t len, int depth) {
    MG_FUZZ_ASSERT(t >= 0 && t < js->n, "token %lld of %lld", (long long)t, (long long)js->n);
    MG_FUZZ_ASSERT(depth <= 65, "depth %d", depth);
    const mg_json_tok *tok = &js->toks[t];
    MG_FUZZ_ASSERT(tok->start >= 0 && tok->start <= tok->end && (size_t)tok->end <= len,
                   "token %lld spans [%lld, %lld) of %zu", (long long)t, (long long)tok->start,
                   (long long)tok->end, len);
    MG_FUZZ_ASSERT(tok->next > t && tok->next <= js->n, "next");
    int64_t k = t + 1;
    if (tok->type == MG_JSON_OBJECT) {
        for (int64_t m = 0; m < tok->size; m++) {
            MG_FUZZ_ASSERT(k < js->n && js->toks[k].type == MG_JSON_STRING, "key");
            char *key = mg_json_strdup(js, k);
            if (key) {   /* the first member of that name is what get finds */
                int64_t v = mg_json_get(js, t, key);
                MG_FUZZ_ASSERT(v > t && v < tok->next, "get");
                free(key);
            }
            k = walk(js, k, len, depth + 1);
            k = walk(js, k, len, depth + 1);
        }
    } else if (tok->type == MG_JSON_ARRAY) {
        for (int64_t m = 0; m < tok->size; m++) k = walk(js, k, len, depth + 1);
    } else {
        int64_t v;
        char *s = mg_json_strdup(js, t);
        MG_FUZZ_ASSERT((s != NULL) <= (tok->type == MG_JSON_STRING), "strdup of a non-string");
        free(s);
        if (mg_json_int(js, t, &v) == 0)
            MG_FUZZ_ASSERT(tok->type == MG_JSON_NUMBER, "int of a non-number");
    }
    MG_FUZZ_ASSERT(k == tok->next, "token %lld: subtree ends at %lld, next says %lld",
                   (long long)t, (long long)k, (long long)tok->next);
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[MG_ERRLEN] = "";
    mg_json js;
    int rc = mg_json_parse(&js, (const char *)data, size, err, sizeof err);
    if (rc != 0) {
        mg_fuzz_check_error(rc, err);
    } else {
        MG_FUZZ_ASSERT(walk(&js, 0, size, 0) == js.n, "root does not span all tokens");
        mg_json_free(&js);
    }
    /* The same bytes as a config.json file.                                                */
    mg_hf_config cfg;
    const char *path = mg_fuzz_path("config.json");
    err[0] = 0;
    mg_fuzz_put(path, data, size);
    rc = mg_hf_config_read(path, &cfg, err, sizeof err);
    if (rc != 0) mg_fuzz_check_error(rc, err);
    else
        MG_FUZZ_ASSERT(cfg.n_layer > 0 && cfg.n_head > 0 && cfg.n_embd > 0 &&
                       cfg.n_positions > 0 && cfg.vocab_size > 0, "config values");
    return 0;
}
