// mg-test: ranks=1 flavors=cpu,asan timeout=300
/* test_hf_llama.c — Hugging Face Llama-family interop: megatron.h against directories that
   transformers 4.44.2 wrote (tests/oracle/hf_llama.py: tests/data/hf_llama/ sharded fp32 Llama
   with Llama 3 rope scaling, 2 key/value groups, all biases, untied; hf_qwen2/ tied Qwen2 with
   Q/K/V biases and one group; hf_mistral/ bf16 Mistral with head_dim 12 ≠ hidden/heads;
   hf_llama_linear/ Llama with linear rope scaling, factor 4, Megatron-LM's
   --rotary-seq-len-interpolation-factor 4):
     - mg_weights_open reads each directory's architecture from config.json (and the shards
       from model.safetensors.index.json); imported, the model gives transformers' logits and
       loss on the oracle's batch (<= 1e-5 relative; the bf16 file in fp32 on both sides);
     - gpt_train --init-from DIR --export-hf OUT writes exactly the input tensors (names,
       shapes, bytes; bf16 ones as their fp32 values) on one rank, with t = 2, and with p = 2
       (the tied embedding from the first stage), and through --save / --load (state.json
       keeps config.json's switches and rope numbers); transformers loads OUT as the same
       class and gives the same logits (tests/oracle/hf_llama.py --check, through .venv/hf);
     - bad input gets one line naming it: heads not divisible by groups, groups not
       divisible by t, an odd head dimension with rope, flags contradicting config.json, an
       unsupported architecture, rope_scaling of another type (of type "default": read
       as plain rotary positions, as transformers computes it), hidden_act, attention_bias
       without mlp_bias, a short sliding window; a model no Hugging Face class holds is not
       exported.                                                                            */
#include "gpt_test_util.h"
#include <limits.h>
#include <sys/stat.h>

#define REF GPT_DATA "hf_llama_ref.safetensors"
static const char *const models[4] = {"hf_llama", "hf_qwen2", "hf_mistral", "hf_llama_linear"};
static const char *const archs[4] = {"LlamaForCausalLM", "Qwen2ForCausalLM",
                                     "MistralForCausalLM", "LlamaForCausalLM"};
static char tmp[300];

/* --- import: the model's logits against transformers' ------------------------------------ */
static void check_import(int k) {
    char path[300], name[120], err[MG_ERRLEN], what[300];
    mg_weights_file wf;
    mg_gpt_config cfg;
    gpt_fixture f;
    int64_t n_tok = 0, n = 0, i;
    int32_t *tokens;
    float *want_logits, *want_loss, *logits, got_loss;
    int B, T, V, b, t;
    double ss = 0;
    snprintf(path, sizeof path, GPT_DATA "%s", models[k]);
    if (mg_weights_open(&wf, path, err, sizeof err)) {
        snprintf(what, sizeof what, "hf_llama: %s opens", models[k]);
        mg_test_report(0, what, "%s", err);
        return;
    }
    snprintf(what, sizeof what, "hf_llama: %s opens as %s (%d shard%s)", models[k], archs[k],
             wf.n_shards, wf.n_shards > 1 ? "s" : "");
    mg_test_report(wf.kind == MG_WEIGHTS_HF_LLAMA && !strcmp(wf.arch, archs[k]) &&
                   (k || wf.n_shards == 2), what, "kind %d, %s", (int)wf.kind, wf.arch);
    snprintf(name, sizeof name, "%s.tokens", models[k]);
    tokens = (int32_t *)gpt_ref_tensor(REF, name, &n_tok);
    snprintf(name, sizeof name, "%s.logits", models[k]);
    want_logits = gpt_ref_tensor(REF, name, &n);
    snprintf(name, sizeof name, "%s.loss", models[k]);
    want_loss = gpt_ref_tensor(REF, name, NULL);
    cfg = wf.cfg;
    B = 2;
    T = (int)(n_tok / B) - 1;
    V = cfg.vocab_size;
    cfg.seq_len = T;
    cfg.padded_vocab = mg_gpt_pad_vocab(V, 128, 1);
    gpt_fixture_make(&f, &cfg, B, 1, 1);
    if (mg_gpt_import(&f.m, &wf, err, sizeof err)) {
        snprintf(what, sizeof what, "hf_llama: %s imports", models[k]);
        mg_test_report(0, what, "%s", err);
    } else {
        logits = (float *)malloc(sizeof(float) * (size_t)n);
        got_loss = (float)(mg_gpt_run_microbatches(&f.m, tokens, 1, 0.0f, 0) / ((double)B * T));
        for (b = 0; b < B; b++)
            for (t = 0; t < T; t++)
                mg_gpt_logits_row(&f.m, 0, t, b, logits + ((size_t)b * T + t) * V);
        for (i = 0; i < n; i++) ss += (double)want_logits[i] * want_logits[i];
        snprintf(what, sizeof what, "hf_llama: %s: all %lld logits equal transformers'",
                 models[k], (long long)n);
        mg_test_close(what, logits, want_logits, (long)n, 1e-5, sqrt(ss / (double)n));
        snprintf(what, sizeof what, "hf_llama: %s: loss equals transformers'", models[k]);
        mg_test_close(what, &got_loss, want_loss, 1, 1e-5, 0);
        free(logits);
    }
    gpt_fixture_free(&f);
    mg_weights_close(&wf);
    free(tokens);
    free(want_logits);
    free(want_loss);
}

/* --- export: every input tensor, byte for byte ------------------------------------------- */
/* The export OUT/model.safetensors holds exactly the tensors of the input directory: same
   names and shapes, F32, and each value the input's (fp32 bytes; bf16/f16 converted).     */
static int same_as_input(const char *in_dir, const char *out_dir, char *why, size_t cap) {
    mg_weights_file in;
    mg_st_file out;
    char path[600], err[MG_ERRLEN];
    int s, i, d, total = 0, ok = 1;
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (mg_weights_open(&in, in_dir, err, sizeof err)) { snprintf(why, cap, "%s", err); return 0; }
    if (mg_st_open(path, &out, err, sizeof err)) {
        snprintf(why, cap, "%s", err);
        mg_weights_close(&in);
        return 0;
    }
    for (s = 0; s < in.n_shards && ok; s++)
        for (i = 0; i < in.shards[s].n_tensors && ok; i++, total++) {
            const mg_st_tensor *w = &in.shards[s].tensors[i], *g = mg_st_find(&out, w->name);
            float *want = (float *)malloc(sizeof(float) * (size_t)w->numel + 4);
            int64_t e;
            ok = g && g->dtype == MG_ST_F32 && g->ndim == w->ndim && g->numel == w->numel;
            for (d = 0; ok && d < w->ndim; d++) ok = g->shape[d] == w->shape[d];
            if (!ok) snprintf(why, cap, "%s: missing, or another dtype or shape", w->name);
            for (e = 0; ok && e < w->numel; e++) {
                uint16_t h;
                if (w->dtype == MG_ST_F32) { memcpy(&want[e], (const char *)w->data + 4 * e, 4); continue; }
                memcpy(&h, (const char *)w->data + 2 * e, 2);
                want[e] = w->dtype == MG_ST_BF16 ? mg_bf16_to_f32(h) : mg_f16_to_f32(h);
            }
            if (ok && memcmp(want, g->data, (size_t)w->numel * 4)) {
                snprintf(why, cap, "%s: values differ", w->name);
                ok = 0;
            }
            free(want);
        }
    if (ok && out.n_tensors != total) {
        snprintf(why, cap, "%d tensors, the input has %d", out.n_tensors, total);
        ok = 0;
    }
    if (ok) snprintf(why, cap, "%d tensors", total);
    mg_st_close(&out);
    mg_weights_close(&in);
    return ok;
}

/* transformers loads out_dir as model k's class and gives its logits (the oracle script). */
static void check_transformers(int k, const char *out_dir, const char *label) {
    char cmd[900], line[1000], what[300];
    FILE *p;
    int oks = 0, bad = 0, st;
    snprintf(cmd, sizeof cmd, "%s tests/oracle/hf_llama.py --check %s %s 2>&1; echo \"status $?\"",
             getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3", out_dir, models[k]);
    p = popen(cmd, "r");
    line[0] = 0;
    st = -1;
    while (p && fgets(line, sizeof line, p)) {
        if (!strncmp(line, "ok - ", 5)) oks++;
        else if (!strncmp(line, "not ok", 6) || strstr(line, "Error")) {
            bad++;
            fprintf(stderr, "%s", line);
        }
        if (sscanf(line, "status %d", &st) == 1) break;
    }
    if (p) pclose(p);
    snprintf(what, sizeof what, "hf_llama: %s: transformers loads the export as %s, same "
             "logits and loss", label, archs[k]);
    mg_test_report(st == 0 && oks == 4 && !bad, what, "%d checks ok, %d failed, status %d%s",
                   oks, bad, st, st == 2 ? " (transformers not installed: make deps)" : "");
}

static void check_export(int k, int np, const char *layout) {
    char args[800], out[400], in[300], first[600], why[600], what[300], label[200];
    int status, errs;
    snprintf(in, sizeof in, GPT_DATA "%s", models[k]);
    snprintf(out, sizeof out, "%s/%s_%d%s", tmp, models[k], np, layout[0] ? "l" : "");
    snprintf(args, sizeof args, "--init-from %s --train-iters 0 --seq-length 12 %s "
             "--export-hf %s", in, layout, out);
    errs = gpt_mpirun_train(np, args, &status, first, sizeof first, NULL, NULL);
    snprintf(label, sizeof label, "%s%s%s", models[k], layout[0] ? " " : "", layout);
    snprintf(what, sizeof what, "hf_llama: gpt_train --init-from %s --export-hf: the input "
             "tensors byte for byte", label);
    if (errs || status) { mg_test_report(0, what, "status %d: %s", status, first); return; }
    mg_test_report(same_as_input(in, out, why, sizeof why), what, "%s", why);
    check_transformers(k, out, label);
}

/* --init-from, --save, then --load and --export-hf: the checkpoint keeps what config.json
   said (the switches in state.json's args, Llama 3's rope numbers in its rope_scaling), so
   the export is the input again and transformers computes the same logits.               */
static void check_checkpoint(void) {
    char args[1000], ck[400], out[400], first[600], why[600];
    const char *what = "hf_llama: --init-from hf_llama, --save, --load, --export-hf: the input "
                       "tensors byte for byte";
    int status, errs;
    snprintf(ck, sizeof ck, "%s/ckpt", tmp);
    snprintf(out, sizeof out, "%s/from_ckpt", tmp);
    snprintf(args, sizeof args, "--init-from " GPT_DATA "hf_llama --train-iters 0 "
             "--seq-length 12 --save %s", ck);
    errs = gpt_mpirun_train(1, args, &status, first, sizeof first, NULL, NULL);
    if (!errs && !status) {
        snprintf(args, sizeof args, "--load %s --train-iters 0 --export-hf %s", ck, out);
        errs = gpt_mpirun_train(1, args, &status, first, sizeof first, NULL, NULL);
    }
    if (errs || status) { mg_test_report(0, what, "status %d: %s", status, first); return; }
    mg_test_report(same_as_input(GPT_DATA "hf_llama", out, why, sizeof why), what, "%s", why);
    check_transformers(0, out, "hf_llama through a checkpoint");
}

/* Linear rope scaling (hf_llama_linear, factor 4) is Megatron-LM's
   --rotary-seq-len-interpolation-factor: a checkpoint keeps it (another factor on --load is
   refused, naming both), config.json's refuses another on the command line, and it needs
   rotary positions.                                                                          */
static void check_linear_rope_flag(void) {
    char args[1000], ck[400], first[600];
    int status, errs;
    snprintf(ck, sizeof ck, "%s/ckpt_linear", tmp);
    snprintf(args, sizeof args, "--init-from " GPT_DATA "hf_llama_linear --train-iters 0 "
             "--seq-length 12 --save %s", ck);
    errs = gpt_mpirun_train(1, args, &status, first, sizeof first, NULL, NULL);
    if (!errs && !status) {
        snprintf(args, sizeof args, "--load %s --train-iters 0 "
                 "--rotary-seq-len-interpolation-factor 2", ck);
        errs = gpt_mpirun_train(1, args, &status, first, sizeof first, NULL, NULL);
    }
    mg_test_report(errs == 1 && status == 2 && strstr(first, "--rotary-seq-len-interpolation-"
                   "factor 2.0 on the command line differs from the checkpoint") &&
                   strstr(first, "which has 4.0"), "hf_llama: a checkpoint of hf_llama_linear "
                   "keeps --rotary-seq-len-interpolation-factor 4", "status %d: %s", status,
                   first);
    gpt_expect_error(NULL, "hf_llama", "--rotary-seq-len-interpolation-factor contradicting "
                     "config.json", "--init-from " GPT_DATA "hf_llama_linear --train-iters 0 "
                     "--seq-length 12 --rotary-seq-len-interpolation-factor 2",
                     "--rotary-seq-len-interpolation-factor 2.0 on the command line differs from "
                     GPT_DATA "hf_llama_linear/config.json, which has 4.0");
    gpt_expect_error(NULL, "hf_llama", "--rotary-seq-len-interpolation-factor without rotary "
                     "positions", "--num-layers 1 --hidden-size 32 --num-attention-heads 4 "
                     "--seq-length 8 --vocab-size 50 --train-iters 0 "
                     "--rotary-seq-len-interpolation-factor 4",
                     "--rotary-seq-len-interpolation-factor 4 applies to rotary positions");
}

/* rope_scaling {"rope_type": "default", …} (LlamaConfig(rope_scaling={"rope_type":
   "default"}).save_pretrained writes it): transformers computes plain rotary positions, the
   numbers beside it unused — the model of rope_scaling null, so hf_llama imported without
   its Llama 3 scaling.                                                                     */
static void bad_dir(int k, const char *from, const char *to, char *dir, size_t cap);
static void check_rope_default(void) {
    char dir[400], err[MG_ERRLEN];
    const char *what = "hf_llama: rope_scaling of rope_type \"default\" opens as plain rotary "
                       "positions (transformers' default rope)";
    mg_weights_file plain, wf;
    bad_dir(0, "\"rope_type\": \"llama3\"", "\"rope_type\": \"default\"", dir, sizeof dir);
    if (mg_weights_open(&wf, dir, err, sizeof err)) { mg_test_report(0, what, "%s", err); return; }
    if (mg_weights_open(&plain, GPT_DATA "hf_llama", err, sizeof err)) {
        mg_test_report(0, what, "%s", err);
        mg_weights_close(&wf);
        return;
    }
    plain.cfg.use_rope_scaling = 0;
    plain.cfg.rope_scaling_factor = plain.cfg.rope_low_freq_factor = 0;
    plain.cfg.rope_high_freq_factor = 0;
    plain.cfg.rope_original_max_pos = 0;
    mg_test_report(!memcmp(&wf.cfg, &plain.cfg, sizeof wf.cfg), what,
                   "use_rope_scaling %d, factor %g", wf.cfg.use_rope_scaling,
                   (double)wf.cfg.rope_scaling_factor);
    mg_weights_close(&plain);
    mg_weights_close(&wf);
}

/* --- bad input: one line --------------------------------------------------------------- */
/* A copy of model k's directory (symlinked weights) whose config.json has `from` replaced by
   `to` (which must occur); returns the directory in dir.                                  */
static void bad_dir(int k, const char *from, const char *to, char *dir, size_t cap) {
    static int serial;
    char src[300], path[700], abs_path[PATH_MAX], *text, *at, *mod;
    const char *files[4] = {"model.safetensors", "model.safetensors.index.json",
                            "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    int i;
    FILE *fp;
    snprintf(dir, cap, "%s/bad%d", tmp, serial++);
    mkdir(dir, 0755);
    for (i = 0; i < 4; i++) {
        snprintf(src, sizeof src, GPT_DATA "%s/%s", models[k], files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (realpath(src, abs_path) && symlink(abs_path, path) != 0) perror("symlink");
    }
    snprintf(src, sizeof src, GPT_DATA "%s/config.json", models[k]);
    text = gpt_read_text(src);
    at = text ? strstr(text, from) : NULL;
    if (!at) { fprintf(stderr, "%s: no '%s'\n", src, from); exit(1); }
    mod = (char *)malloc(strlen(text) + strlen(to) + 1);
    sprintf(mod, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    snprintf(path, sizeof path, "%s/config.json", dir);
    fp = fopen(path, "w");
    if (!fp || fputs(mod, fp) < 0 || fclose(fp)) { perror(path); exit(1); }
    free(text);
    free(mod);
}

static void expect_bad_config(const char *what, int k, const char *from, const char *to,
                              const char *flags, const char *want) {
    char dir[400], line[900];
    bad_dir(k, from, to, dir, sizeof dir);
    snprintf(line, sizeof line, "--init-from %s --train-iters 0 --seq-length 12%s%s", dir,
             flags[0] ? " " : "", flags);
    gpt_expect_error(NULL, "hf_llama", what, line, want);
}

static void expect_cli_error(const char *what, int np, const char *args, const char *want) {
    char first[800], name[300];
    int status, errs = gpt_mpirun_train(np, args, &status, first, sizeof first, NULL, NULL);
    first[strcspn(first, "\n")] = 0;
    snprintf(name, sizeof name, "hf_llama: %s", what);
    mg_test_report(errs >= 1 && status != 0 && strstr(first, want) != NULL, name, "%s",
                   first[0] ? first : "accepted");
}

int main(void) {
    int k;
    gpt_tmpdir(tmp, sizeof tmp, "hfllama");
    for (k = 0; k < 4; k++) check_import(k);
    for (k = 0; k < 4; k++) check_export(k, 1, "");
    check_export(3, 2, "--tensor-model-parallel-size 2");
    check_export(0, 2, "--tensor-model-parallel-size 2");
    check_export(1, 2, "--pipeline-model-parallel-size 2");
    check_checkpoint();
    check_linear_rope_flag();
    check_rope_default();

    expect_bad_config("heads not divisible by key/value groups", 0, "\"num_key_value_heads\": 2",
                      "\"num_key_value_heads\": 3", "",
                      "--num-query-groups 3 does not divide --num-attention-heads 4");
    expect_cli_error("groups not divisible by t (Qwen2's one group, t = 2)", 2,
                     "--init-from " GPT_DATA "hf_qwen2 --train-iters 0 --seq-length 12 "
                     "--tensor-model-parallel-size 2",
                     "--num-query-groups 1 is not divisible by --tensor-model-parallel-size 2");
    expect_bad_config("an odd head dimension with rotary positions", 2, "\"head_dim\": 12",
                      "\"head_dim\": 11", "", "rotary positions need an even head dimension");
    expect_bad_config("an unsupported architecture", 0, "LlamaForCausalLM", "GemmaForCausalLM",
                      "", "architectures [\"GemmaForCausalLM\"] is not a model megatron.h reads");
    expect_bad_config("rope_scaling of another type", 0, "\"rope_type\": \"llama3\"",
                      "\"rope_type\": \"yarn\"", "", "rope_scaling of rope_type \"yarn\"");
    expect_bad_config("hidden_act other than silu", 1, "\"silu\"", "\"gelu\"", "",
                      "hidden_act is \"gelu\"");
    expect_bad_config("attention_bias without mlp_bias", 0, "\"mlp_bias\": true",
                      "\"mlp_bias\": false", "", "attention_bias true with mlp_bias false");
    expect_bad_config("a sliding window shorter than the positions", 2,
                      "\"sliding_window\": null", "\"sliding_window\": 8", "",
                      "sliding_window 8 is shorter than max_position_embeddings 16");
    gpt_expect_error(NULL, "hf_llama", "--num-query-groups contradicting config.json",
                     "--init-from " GPT_DATA "hf_llama --train-iters 0 --seq-length 12 "
                     "--group-query-attention --num-query-groups 4",
                     "--num-query-groups 4 on the command line differs from "
                     GPT_DATA "hf_llama/config.json, which has 2");
    gpt_expect_error(NULL, "hf_llama", "--disable-bias-linear contradicting config.json",
                     "--init-from " GPT_DATA "hf_llama --train-iters 0 --seq-length 12 "
                     "--disable-bias-linear",
                     "--disable-bias-linear on the command line differs from "
                     GPT_DATA "hf_llama/config.json, which has it off");
    gpt_expect_error(NULL, "hf_llama", "--norm-epsilon contradicting config.json",
                     "--init-from " GPT_DATA "hf_qwen2 --train-iters 0 --seq-length 12 "
                     "--norm-epsilon 1e-5",
                     "--norm-epsilon 1e-05 on the command line differs from "
                     GPT_DATA "hf_qwen2/config.json, which has 1e-06");
    gpt_expect_error(NULL, "hf_llama", "--hidden-size contradicting config.json",
                     "--init-from " GPT_DATA "hf_mistral --train-iters 0 --seq-length 12 "
                     "--hidden-size 64", "--hidden-size 64 does not match");
    gpt_expect_error(NULL, "hf_llama", "flags that agree with config.json pass (the sizes are checked next)",
                     "--init-from " GPT_DATA "hf_qwen2 --train-iters 0 --seq-length 12 "
                     "--norm-epsilon 1e-6 --add-qkv-bias --swiglu --group-query-attention "
                     "--num-query-groups 1 --hidden-size 33", "--hidden-size 33 does not match");
    expect_cli_error("a model no Hugging Face class holds is not exported", 1,
                     "--num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 8 "
                     "--vocab-size 50 --normalization RMSNorm --swiglu --train-iters 0 "
                     "--export-hf /tmp/mg_hfllama_never", "no Hugging Face class megatron.h "
                     "writes computes");
    gpt_rmtree(tmp);
    return mg_test_summary();
}
