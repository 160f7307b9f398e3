#!/usr/bin/python3
"""tests/oracle/hf_llama.py — megatron.h against the real Hugging Face `transformers` Llama family.

Usage: /usr/bin/python3 tests/oracle/hf_llama.py OUTDIR       (make oracle passes tests/data)
       /usr/bin/python3 tests/oracle/hf_llama.py --check DIR MODEL [REFDIR]

Needs transformers 4.44.2 (tools/install-deps.sh puts it, pinned with its dependencies, in
.venv/hf, which this script puts first on sys.path); without it the first form prints that it
skipped and exits 0 (the C test reads the committed fixtures), the second exits 2.

Tiny random models built with transformers itself, every parameter randomised (norm weights
and biases too), saved with save_pretrained (safetensors) into OUTDIR:
  hf_llama/    LlamaForCausalLM: 2 layers, hidden 32, 4 heads in 2 key/value groups, SwiGLU
               width 48, vocabulary 61, Llama 3 rope scaling (factor 4, low 1, high 4,
               original 8 positions), attention_bias and mlp_bias, untied lm_head; saved
               SHARDED (max_shard_size 40KB: model-0000N-of-0000M.safetensors and
               model.safetensors.index.json), fp32.
  hf_qwen2/    Qwen2ForCausalLM: 2 layers, hidden 32, 4 heads, 1 key/value group (multi-query),
               width 40, vocabulary 50, rope_theta 1e6, rms_norm_eps 1e-6, Q/K/V biases,
               tied embeddings (no lm_head.weight in the file); fp32, one file.
  hf_mistral/  MistralForCausalLM: 1 layer, hidden 32, 4 heads of head_dim 12 (not 32/4) in 2
               groups, width 56, vocabulary 64, sliding_window null, untied; saved in BF16
               (torch_dtype bfloat16): the reference runs the same bf16 values in fp32.
  hf_llama_linear/  LlamaForCausalLM with linear rope scaling (rope_type "linear", factor 4:
               positions / 4, Megatron-LM's --rotary-seq-len-interpolation-factor 4): 2
               layers, hidden 32, 4 heads in 2 groups, width 48, vocabulary 61, no biases,
               untied; fp32, one file.
  hf_llama_ref.safetensors  per model M: M.tokens I32 [B, T+1], and transformers' forward
               of M.tokens[:, :T] in fp32: M.logits F32 [B, T, V] and M.loss F32 [1] (mean
               cross-entropy against M.tokens[:, 1:]).
  hf_llama_ref.json  per model: the sizes, batch and sequence length.

--check DIR MODEL: AutoModelForCausalLM.from_pretrained(DIR, output_loading_info=True) must
give MODEL's class (Qwen2ForCausalLM for hf_qwen2, LlamaForCausalLM for hf_llama,
MistralForCausalLM for hf_mistral) with no missing, unexpected or mismatched keys, fp32
weights, and the recorded logits and loss on M.tokens (<= 1e-5 relative): megatron.h's
--export-hf of an --init-from of that model. Prints one ok/not ok line per check; exit 1 on a
failure.
"""
import json, os, sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HF = os.path.join(REPO, ".venv", "hf")
if os.path.isdir(HF):
    sys.path.insert(0, HF)
try:
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM,
                              MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)
except ImportError as e:
    print("hf_llama: skipped (%s; tools/install-deps.sh installs transformers into .venv/hf)" % e)
    sys.exit(2 if "--check" in sys.argv else 0)

B, T = 2, 12
MODELS = {
    "hf_llama": (LlamaForCausalLM, LlamaConfig, dict(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, vocab_size=61, max_position_embeddings=16, rms_norm_eps=1e-5,
        rope_theta=10000.0, rope_scaling=dict(rope_type="llama3", factor=4.0,
                                              low_freq_factor=1.0, high_freq_factor=4.0,
                                              original_max_position_embeddings=8),
        attention_bias=True, mlp_bias=True, tie_word_embeddings=False)),
    "hf_qwen2": (Qwen2ForCausalLM, Qwen2Config, dict(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=1,
        intermediate_size=40, vocab_size=50, max_position_embeddings=16, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False)),
    "hf_mistral": (MistralForCausalLM, MistralConfig, dict(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, intermediate_size=56, vocab_size=64, max_position_embeddings=16,
        rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=None,
        tie_word_embeddings=False)),
    "hf_llama_linear": (LlamaForCausalLM, LlamaConfig, dict(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, vocab_size=61, max_position_embeddings=16, rms_norm_eps=1e-5,
        rope_theta=10000.0, rope_scaling=dict(rope_type="linear", factor=4.0),
        attention_bias=False, mlp_bias=False, tie_word_embeddings=False)),
}
SAVE = {"hf_llama": dict(max_shard_size="40KB"), "hf_qwen2": {}, "hf_mistral": {},
        "hf_llama_linear": {}}


def forward(model, tokens):
    """transformers' fp32 forward of tokens[:, :T]: logits [B, T, V] and the mean loss."""
    with torch.no_grad():
        logits = model(input_ids=tokens[:, :T].long(), use_cache=False).logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1).long())
    return logits.contiguous(), loss.reshape(1)


def build(out):
    from safetensors.torch import save_file
    torch.manual_seed(2024)
    ref, sizes = {}, {}
    for name, (cls, cfg_cls, kw) in MODELS.items():
        cfg = cfg_cls(**kw)
        cfg._attn_implementation = "eager"
        model = cls(cfg).float().eval()
        with torch.no_grad():   # every parameter random: norms, biases, embeddings
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):
                    p.copy_(1 + 0.1 * torch.randn_like(p))
                else:
                    p.copy_((0.5 if "embed" in pname else 0.2) * torch.randn_like(p))
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        if name == "hf_mistral":      # a bf16 file; the reference: its values in fp32
            model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
            model = cls.from_pretrained(d, torch_dtype=torch.float32,
                                        attn_implementation="eager").eval()
        else:
            model.save_pretrained(d, safe_serialization=True, **SAVE[name])
        tokens = torch.randint(0, kw["vocab_size"], (B, T + 1), dtype=torch.int32)
        logits, loss = forward(model, tokens)
        ref[name + ".tokens"] = tokens
        ref[name + ".logits"] = logits
        ref[name + ".loss"] = loss
        sizes[name] = dict(batch=B, seq_len=T, vocab_size=kw["vocab_size"],
                           architecture=cls.__name__, files=sorted(os.listdir(d)))
        print("oracle hf_llama: %s (%s) loss %.6f, files %s"
              % (name, cls.__name__, loss.item(), " ".join(sorted(os.listdir(d)))))
    save_file(ref, os.path.join(out, "hf_llama_ref.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "hf_llama_ref.json"), "w") as f:
        json.dump(dict(transformers=transformers.__version__, models=sizes), f, indent=1)


def check(d, name, refdir):
    from safetensors.torch import load_file
    ok = True

    def report(good, what, detail):
        nonlocal ok
        ok = ok and good
        print("%s - hf_llama: %s: %s (%s)" % ("ok" if good else "not ok", name, what, detail))

    ref = load_file(os.path.join(refdir, "hf_llama_ref.safetensors"))
    model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True,
                                                       attn_implementation="eager")
    want = MODELS[name][0].__name__
    bad = {k: v for k, v in info.items() if v}
    report(type(model).__name__ == want and not bad,
           "transformers loads the export as %s with every key" % want,
           "%s, %s" % (type(model).__name__, bad or "no missing/unexpected/mismatched keys"))
    dtypes = {p.dtype for p in model.parameters()}
    report(dtypes == {torch.float32}, "the export's weights are fp32", str(dtypes))
    logits, loss = forward(model.float().eval(), ref[name + ".tokens"])
    want_logits, want_loss = ref[name + ".logits"], ref[name + ".loss"]
    scale = want_logits.abs().max().item()
    err = (logits - want_logits).abs().max().item() / scale
    report(err <= 1e-5, "its logits equal the source model's", "max error %.2e of max |logit|" % err)
    lerr = abs(loss.item() - want_loss.item()) / abs(want_loss.item())
    report(lerr <= 1e-5, "its loss equals the source model's",
           "%.6f vs %.6f, relative %.1e" % (loss.item(), want_loss.item(), lerr))
    return ok


if __name__ == "__main__":
    torch.set_num_threads(1)
    if len(sys.argv) >= 4 and sys.argv[1] == "--check":
        sys.exit(0 if check(sys.argv[2], sys.argv[3],
                            sys.argv[4] if len(sys.argv) > 4 else os.path.join(REPO, "tests/data"))
                 else 1)
    build(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
