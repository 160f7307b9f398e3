#!/usr/bin/python3
"""tests/oracle/hf_interop.py — megatron.h against the real Hugging Face `transformers` GPT-2.

Usage: /usr/bin/python3 tests/oracle/hf_interop.py OUTDIR     (make oracle passes tests/data)

Needs `transformers` (tested with 4.40.2 on torch 1.13); without it the script prints that it
skipped and exits 0, and the C test keeps reading the committed fixtures.

Small random GPT-2 models are built with transformers itself, every parameter randomised (biases
and layernorms too, so no path is trivially zero), and written the way real checkpoints are:
  hf_lm/         GPT2LMHeadModel.save_pretrained(safe_serialization=True): names carry the
                 `transformer.` prefix, lm_head.weight is absent (tied), no attn.bias buffers;
                 config.json + generation_config.json exactly as transformers writes them.
                 2 layers, hidden 24, 4 heads, 20 positions, vocabulary 50.
  hf_lm_sharded/ the hf_lm model saved with max_shard_size="20KB": its tensors spread over
                 model-0000N-of-0000M.safetensors, model.safetensors.index.json naming them
                 (how save_pretrained writes any model over 5 GB, GPT-2 XL in fp32 among them).
  hf_base/       GPT2Model.save_pretrained of a second model (odd vocabulary 37, 1 layer,
                 hidden 16, 2 heads, 16 positions): no prefix, architectures ["GPT2Model"].
  hf_hub.safetensors   the hf_base weights laid out like the Hub's own gpt2 model.safetensors
                 (no prefix, plus the h.{i}.attn.bias causal-mask buffers older transformers
                 saved) and with no config.json beside it (heads unknown to the file).
  hf_llmc.bin    the hf_base weights as an llm.c checkpoint, written by a transcription of
                 karpathy/llm.c train_gpt2.py write_model (version 3, fp32, header of 256 int32,
                 Vp = 37 rounded up to 128 with zero rows, llm.c's (out, in) Linear layout).
  hf_untied/     GPT2LMHeadModel with tie_word_embeddings=False (lm_head.weight present and
                 different from wte): megatron.h ties the output layer, so it must refuse it.
  hf_gelu/       GPT2LMHeadModel with activation_function "gelu" (the exact, erf GELU, not
                 GPT-2's "gelu_new" tanh approximation): 2 layers, hidden 16, 2 heads, 16
                 positions, vocabulary 37.
  hf_relu2/      the same sizes with activation_function "relu2", the squared ReLU.
  hf_ref.safetensors   per model ("lm", "base", "gelu", "relu2"): tokens I32 [B, T+1], and transformers' own
                 forward on them: loss F32 [1] (labels=tokens: the mean cross-entropy of
                 positions 0..T-1 predicting tokens 1..T) and logits F32 [B, T, V].
  hf_ref.json    the sizes, and the GPT2Config values that decide the model's math (what an
                 exported config.json must say for transformers to build the same model), with
                 GPT2Config's defaults (what transformers assumes for an absent key).

Then, when the programs are built and newer than the headers (build/test_hf_interop,
build/gpt_train), the live checks:
  - build/test_hf_interop OUTDIR: the C test on the fixtures just written;
  - build/gpt_train --init-from X --train-iters 0 --export-hf DIR, for X = hf_lm/, hf_base/,
    hf_llmc.bin, hf_hub.safetensors, hf_gelu/ and hf_relu2/, then AutoModelForCausalLM.from_pretrained(DIR,
    output_loading_info=True): a GPT2LMHeadModel, no missing, unexpected or mismatched keys,
    no errors, lm_head tied, every parameter equal to the source model's, the same loss and
    logits as the source model on the same tokens.
Without the programs those checks are skipped (said so); a failed check exits 1.
"""
import json, os, shutil, struct, subprocess, sys, tempfile

try:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel
    from safetensors.torch import save_file
except ImportError as e:
    print("hf_interop: skipped (%s; install transformers for /usr/bin/python3 to regenerate "
          "tests/data/hf_*)" % e)
    sys.exit(0)

B = 2
MODELS = {   # name: GPT-2 sizes; T = n_positions - 1 tokens are scored per sequence
    "lm": dict(n_layer=2, n_embd=24, n_head=4, n_positions=20, vocab_size=50),
    "base": dict(n_layer=1, n_embd=16, n_head=2, n_positions=16, vocab_size=37),
    # the exact GELU (GPT2Config's "gelu": F.gelu, erf), GPT2LMHeadModel save
    "gelu": dict(n_layer=2, n_embd=16, n_head=2, n_positions=16, vocab_size=37,
                 activation_function="gelu"),
    # the squared ReLU (transformers' "relu2", Megatron-LM's --squared-relu)
    "relu2": dict(n_layer=2, n_embd=16, n_head=2, n_positions=16, vocab_size=37,
                  activation_function="relu2"),
}
T = {"lm": 15, "base": 15, "gelu": 15, "relu2": 15}
# GPT2Config fields that change the math; an exported config.json must give them these values
MATH_KEYS = ["model_type", "activation_function", "layer_norm_epsilon", "n_layer", "n_head",
             "n_embd", "n_positions", "vocab_size", "n_inner", "scale_attn_weights",
             "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "tie_word_embeddings"]
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
failures = []


def check(ok, what):
    print("%s - hf_interop: %s" % ("ok" if ok else "not ok", what))
    if not ok:
        failures.append(what)


def make_model(sizes, seed, tied=True):
    """A GPT2LMHeadModel (eval mode: no dropout) with every parameter drawn at random."""
    torch.manual_seed(seed)
    cfg = GPT2Config(**sizes, tie_word_embeddings=tied)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
               name.endswith("ln_f.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.05 * torch.randn_like(p))
            else:   # std 0.1 (not GPT-2's 0.02) so attention is far from uniform
                p.copy_(0.1 * torch.randn_like(p))
    return model


def hf_forward(model, tokens):
    """transformers' own loss (labels shift inside the model) and the logits of the T inputs."""
    with torch.no_grad():
        out = model(input_ids=tokens, labels=tokens)
    return out.loss.reshape(1).float(), out.logits[:, :-1, :].contiguous().float()


# --- llm.c checkpoint: a transcription of karpathy/llm.c train_gpt2.py (write_model,
# write_tensors, pad_vocab; version 3 = fp32 with padded vocabulary) -------------------------
def llmc_state_dict(model):
    """llm.c's GPT keeps nn.Linear weights (out, in); its from_pretrained transposes the
    Conv1D weights of transformers' GPT-2. Same here, names as llm.c's model has them."""
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    sd = {}
    for name, p in model.named_parameters():       # lm_head is tied: not a separate parameter
        sd[name] = p.detach().t() if name.endswith(conv1d) else p.detach()
    return sd


def llmc_pad_vocab(tensor, multiple=128, value=0):
    V, C = tensor.shape                    # llm.c asserts V == 50257; any V here
    Vp = ((V + multiple - 1) // multiple) * multiple
    return torch.nn.functional.pad(tensor, (0, 0, 0, Vp - V), value=value) if Vp > V else tensor


def llmc_write_model(model, filename):
    cfg = model.config
    L = cfg.n_layer
    header = torch.zeros(256, dtype=torch.int32)
    header[0] = 20240326                  # magic
    header[1] = 3                         # version 3: fp32, padded vocabulary
    header[2] = cfg.n_positions           # block_size
    header[3] = cfg.vocab_size
    header[4] = L
    header[5] = cfg.n_head
    header[6] = cfg.n_embd
    params = llmc_state_dict(model)
    wte_padded = llmc_pad_vocab(params["transformer.wte.weight"])
    params["transformer.wte.weight"] = wte_padded
    header[7] = wte_padded.size(0)
    order = ["transformer.wte.weight", "transformer.wpe.weight"]
    for part in ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                 "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]:
        order += ["transformer.h.%d.%s" % (i, part) for i in range(L)]
    order += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    with open(filename, "wb") as f:
        f.write(header.numpy().tobytes())
        for name in order:
            f.write(params[name].cpu().to(torch.float32).contiguous().numpy().tobytes())


def write_fixtures(out):
    models = {"lm": make_model(MODELS["lm"], 1234), "base": make_model(MODELS["base"], 4321),
              "gelu": make_model(MODELS["gelu"], 2468), "relu2": make_model(MODELS["relu2"], 1357)}
    for d in ("hf_lm", "hf_lm_sharded", "hf_base", "hf_untied", "hf_gelu", "hf_relu2"):
        shutil.rmtree(os.path.join(out, d), ignore_errors=True)
    models["lm"].save_pretrained(os.path.join(out, "hf_lm"), safe_serialization=True)
    models["lm"].save_pretrained(os.path.join(out, "hf_lm_sharded"), safe_serialization=True,
                                 max_shard_size="20KB")
    models["base"].transformer.save_pretrained(os.path.join(out, "hf_base"),
                                               safe_serialization=True)
    base = models["base"].transformer
    hub = {k: v.contiguous() for k, v in base.state_dict().items()}
    for i, block in enumerate(base.h):     # the causal-mask buffer, [1, 1, P, P]
        hub["h.%d.attn.bias" % i] = block.attn.bias.to(torch.float32).contiguous()
    save_file(hub, os.path.join(out, "hf_hub.safetensors"), metadata={"format": "pt"})
    llmc_write_model(models["base"], os.path.join(out, "hf_llmc.bin"))
    untied = make_model(MODELS["base"], 99, tied=False)
    untied.save_pretrained(os.path.join(out, "hf_untied"), safe_serialization=True)
    models["gelu"].save_pretrained(os.path.join(out, "hf_gelu"), safe_serialization=True)
    models["relu2"].save_pretrained(os.path.join(out, "hf_relu2"), safe_serialization=True)

    gen = torch.Generator().manual_seed(7)
    ref, ref_json = {}, {"batch": B, "transformers_version": transformers.__version__}
    for name, model in models.items():
        toks = torch.randint(0, MODELS[name]["vocab_size"], (B, T[name] + 1), generator=gen)
        loss, logits = hf_forward(model, toks)
        ref[name + ".tokens"] = toks.to(torch.int32)
        ref[name + ".loss"] = loss
        ref[name + ".logits"] = logits
        d = model.config.to_dict()
        # a key absent from a config.json takes GPT2Config's default (model_type has none:
        # AutoConfig / AutoModelForCausalLM need it)
        defaults = GPT2Config().to_dict()
        ref_json[name] = dict(seq_len=T[name], **MODELS[name],
                              config={k: d[k] for k in MATH_KEYS},
                              config_default={k: defaults[k] for k in MATH_KEYS
                                              if k != "model_type"})
        print("hf_interop: %s: transformers loss %.7f" % (name, loss.item()))
    save_file(ref, os.path.join(out, "hf_ref.safetensors"))
    with open(os.path.join(out, "hf_ref.json"), "w") as f:
        json.dump(ref_json, f, indent=1, sort_keys=True)
        f.write("\n")
    return models, ref


def built(program):
    """build/PROGRAM exists and is newer than every header (a stale one is not run)."""
    path = os.path.join(ROOT, "build", program)
    if not os.access(path, os.X_OK):
        print("hf_interop: build/%s not built: its checks skipped" % program)
        return None
    headers = [os.path.join(ROOT, h) for h in os.listdir(ROOT) if h.endswith(".h")]
    if any(os.path.getmtime(h) > os.path.getmtime(path) for h in headers):
        print("hf_interop: build/%s is older than the headers: its checks skipped (make it "
              "first)" % program)
        return None
    return path


def live_checks(out, models, ref):
    c_test = built("test_hf_interop")
    if c_test:
        r = subprocess.run([c_test, out], cwd=ROOT, capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        check(r.returncode == 0, "build/test_hf_interop passes on the fixtures just written")
    gpt_train = built("gpt_train")
    if not gpt_train:
        return
    sources = [("hf_lm/", "lm"), ("hf_base/", "base"), ("hf_llmc.bin", "base"),
               ("hf_hub.safetensors", "base"), ("hf_gelu/", "gelu"), ("hf_relu2/", "relu2")]
    for src, name in sources:
        tmp = tempfile.mkdtemp(prefix="hf_interop_")
        dst = os.path.join(tmp, "export")
        try:
            cmd = [gpt_train, "--init-from", os.path.join(out, src), "--train-iters", "0",
                   "--export-hf", dst, "--device", "cpu"]
            if src.endswith(".safetensors"):    # no config.json beside it: heads from the flag
                cmd += ["--num-attention-heads", str(MODELS[name]["n_head"])]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                check(False, "gpt_train exports %s: %s" % (src, (r.stderr or r.stdout).strip()))
                continue
            got, info = AutoModelForCausalLM.from_pretrained(dst, output_loading_info=True)
            got.eval()
            check(isinstance(got, GPT2LMHeadModel), "AutoModelForCausalLM builds a "
                  "GPT2LMHeadModel from the export of %s" % src)
            clean = not any(info[k] for k in ("missing_keys", "unexpected_keys",
                                              "mismatched_keys", "error_msgs"))
            check(clean, "from_pretrained(export of %s) loads with no missing, unexpected or "
                  "mismatched keys (%s)" % (src, {k: v for k, v in info.items() if v}))
            want_sd, got_sd = models[name].state_dict(), got.state_dict()
            same = all(torch.equal(want_sd[k], got_sd[k]) for k in want_sd
                       if not k.endswith(("attn.bias", "attn.masked_bias")))
            check(same, "export of %s: every parameter bit-equal to the source model" % src)
            tied = got.lm_head.weight.data_ptr() == got.transformer.wte.weight.data_ptr()
            check(tied, "export of %s: lm_head tied to wte after loading" % src)
            loss, logits = hf_forward(got, ref[name + ".tokens"].long())
            rel = abs(loss.item() - ref[name + ".loss"].item()) / abs(ref[name + ".loss"].item())
            check(rel <= 1e-6 and torch.equal(logits, ref[name + ".logits"]),
                  "export of %s: transformers' loss %.7f = the source's %.7f (rel %.2g), "
                  "logits identical" % (src, loss.item(), ref[name + ".loss"].item(), rel))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data")
    torch.set_num_threads(1)
    print("hf_interop: transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    models, ref = write_fixtures(out)
    live_checks(out, models, ref)
    if failures:
        print("hf_interop: %d check(s) failed" % len(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
