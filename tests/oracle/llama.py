#!/usr/bin/python3
"""tests/oracle/llama.py — the PyTorch reference for megatron.h's Llama-family model (issue 16).

Usage: /usr/bin/python3 tests/oracle/llama.py OUTDIR        (make oracle passes tests/data)

A tiny Llama written directly in PyTorch with Hugging Face transformers' LlamaForCausalLM
semantics (fp32): RMSNorm (x·rsqrt(mean(x²) + eps) in fp32, times the weight), rotary positions
applied rotate-half with transformers' fp32 frequencies and Llama 3 scaling, grouped-query
attention (query head j reads key/value head j // (heads/groups)) with a head dimension of its
own (kv_channels 12 with hidden 32), SwiGLU MLP down(silu(gate(x)) * up(x)), no biases, an
untied output layer, logits over the real vocabulary only, mean cross-entropy. Random weights,
then 20 AdamW steps. Written into OUTDIR, in megatron.h's checkpoint naming and layout (so the
C tests load them with mg_gpt_import, independently of any Hugging Face importer):
  llama_model.safetensors  initial weights: decoder.layers.N.self_attention.linear_qkv.weight
                           in Megatron's grouped layout (per key/value group: its query heads,
                           then its key head, then its value head), linear_proj, mlp.linear_fc1
                           (up), mlp.linear_fc1_gate, mlp.linear_fc2, input_layernorm and
                           pre_mlp_layernorm weights, embedding.word_embeddings.weight,
                           decoder.final_layernorm.weight, output_layer.weight (V rows)
  llama_grads.safetensors  the gradient of the first global batch's loss (float64 from the fp32
                           weights), same names and layout
  llama_final.safetensors  the weights after the 20 AdamW steps
  llama_tokens.bin         the token stream (llm.c token file), read sequentially
  llama_ref.safetensors    tokens (first global batch), loss, logits of sample 0 ([T, V]),
                           per step losses, grad_norms, lrs
  llama_ref.json           configuration and hyper-parameters (the C tests read them)
The rotary formulas are transformers 4.44's (_compute_default_rope_parameters,
_compute_llama3_parameters, LlamaRotaryEmbedding, apply_rotary_pos_emb); the optimizer and
learning-rate schedule are gpt.py's (torch.optim.AdamW, Megatron's OptimizerParamScheduler).
"""
import json, math, os, sys
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402  (file writers, the AdamW run, the token stream)
import ops  # noqa: E402  (transformers' rotary frequencies)

CFG = dict(n_layer=2, hidden=32, n_head=4, n_query_groups=2, kv_channels=12, ffn_hidden=48,
           seq_len=16, max_position_embeddings=16, vocab_size=37, rms_norm_eps=1e-5,
           rope_theta=10000.0, rope_factor=4.0, rope_low_freq_factor=1.0,
           rope_high_freq_factor=4.0, rope_original_max_position_embeddings=8)
HP = dict(micro_batch=2, global_batch=4, train_iters=20, lr=3e-3, min_lr=3e-4, warmup=3,
          decay_iters=16, decay_style="cosine", weight_decay=0.1, beta1=0.9, beta2=0.95,
          eps=1e-8, clip_grad=1.0, seed=4321)

L, C, NH, G, HD = CFG["n_layer"], CFG["hidden"], CFG["n_head"], CFG["n_query_groups"], \
    CFG["kv_channels"]
FF, T, V = CFG["ffn_hidden"], CFG["seq_len"], CFG["vocab_size"]


def hf_names():
    names = ["model.embed_tokens.weight"]
    for i in range(L):
        p = "model.layers.%d." % i
        names += [p + "input_layernorm.weight", p + "self_attn.q_proj.weight",
                  p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight",
                  p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
                  p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
    return names + ["model.norm.weight", "lm_head.weight"]


def init_params(gen):
    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std
    P = {"model.embed_tokens.weight": normal(V, C, std=0.5), "lm_head.weight": normal(V, C, std=0.1),
         "model.norm.weight": 1 + normal(C, std=0.1)}
    for i in range(L):
        p = "model.layers.%d." % i
        P[p + "input_layernorm.weight"] = 1 + normal(C, std=0.1)
        P[p + "post_attention_layernorm.weight"] = 1 + normal(C, std=0.1)
        P[p + "self_attn.q_proj.weight"] = normal(NH * HD, C, std=0.2)
        P[p + "self_attn.k_proj.weight"] = normal(G * HD, C, std=0.2)
        P[p + "self_attn.v_proj.weight"] = normal(G * HD, C, std=0.2)
        P[p + "self_attn.o_proj.weight"] = normal(C, NH * HD, std=0.1)
        P[p + "mlp.gate_proj.weight"] = normal(FF, C, std=0.2)
        P[p + "mlp.up_proj.weight"] = normal(FF, C, std=0.2)
        P[p + "mlp.down_proj.weight"] = normal(C, FF, std=0.1)
    return {n: t.float().requires_grad_(True) for n, t in P.items()}


def rope_inv_freq():
    """transformers' llama3 rope frequencies (ops.py holds the formula)."""
    return ops.rope_inv_freq(HD, CFG["rope_theta"],
                             (CFG["rope_factor"], CFG["rope_low_freq_factor"],
                              CFG["rope_high_freq_factor"],
                              CFG["rope_original_max_position_embeddings"]))


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_forward(P, idx, targets, logits_out=None):
    """LlamaForCausalLM's forward (no biases, untied head); idx, targets int64 [B, T]."""
    B, Tn = idx.shape
    dt = P["model.norm.weight"].dtype
    pos = torch.arange(Tn, dtype=torch.float32)
    freqs = (rope_inv_freq()[:, None].float() @ pos[None, :]).t()         # [T, HD/2] fp32
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dt), emb.sin().to(dt)                       # cast to x's dtype

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + CFG["rms_norm_eps"]) * w

    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    x = P["model.embed_tokens.weight"][idx]
    for i in range(L):
        p = "model.layers.%d." % i
        h = rms(x, P[p + "input_layernorm.weight"])
        q = (h @ P[p + "self_attn.q_proj.weight"].t()).view(B, Tn, NH, HD).transpose(1, 2)
        k = (h @ P[p + "self_attn.k_proj.weight"].t()).view(B, Tn, G, HD).transpose(1, 2)
        v = (h @ P[p + "self_attn.v_proj.weight"].t()).view(B, Tn, G, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // G, dim=1)                         # repeat_kv
        v = v.repeat_interleave(NH // G, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HD)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, Tn, NH * HD)
        x = x + y @ P[p + "self_attn.o_proj.weight"].t()
        h = rms(x, P[p + "post_attention_layernorm.weight"])
        g = F.silu(h @ P[p + "mlp.gate_proj.weight"].t())
        x = x + (g * (h @ P[p + "mlp.up_proj.weight"].t())) @ P[p + "mlp.down_proj.weight"].t()
    x = rms(x, P["model.norm.weight"])
    logits = x @ P["lm_head.weight"].t()
    if logits_out is not None:
        logits_out.append(logits.detach())
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def to_megatron(P):
    """Hugging Face names and layout -> megatron.h's checkpoint names and layout."""
    out = [("embedding.word_embeddings.weight", P["model.embed_tokens.weight"])]
    per = NH // G
    for i in range(L):
        p, m = "model.layers.%d." % i, "decoder.layers.%d." % i
        q = P[p + "self_attn.q_proj.weight"].reshape(G, per * HD, C)
        k = P[p + "self_attn.k_proj.weight"].reshape(G, HD, C)
        v = P[p + "self_attn.v_proj.weight"].reshape(G, HD, C)
        qkv = torch.cat([q, k, v], dim=1).reshape(-1, C)   # per group: its queries, key, value
        out += [(m + "input_layernorm.weight", P[p + "input_layernorm.weight"]),
                (m + "self_attention.linear_qkv.weight", qkv),
                (m + "self_attention.linear_proj.weight", P[p + "self_attn.o_proj.weight"]),
                (m + "pre_mlp_layernorm.weight", P[p + "post_attention_layernorm.weight"]),
                (m + "mlp.linear_fc1.weight", P[p + "mlp.up_proj.weight"]),
                (m + "mlp.linear_fc2.weight", P[p + "mlp.down_proj.weight"]),
                (m + "mlp.linear_fc1_gate.weight", P[p + "mlp.gate_proj.weight"])]
    out += [("decoder.final_layernorm.weight", P["model.norm.weight"]),
            ("output_layer.weight", P["lm_head.weight"])]
    return [(n, t.detach().float().contiguous()) for n, t in out]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(HP["seed"])
    P = init_params(gen)
    names = hf_names()
    Bm, Bg, iters = HP["micro_batch"], HP["global_batch"], HP["train_iters"]
    gpt.V = V
    stream = gpt.markov_tokens(gen, iters * Bg * T + 1)
    data = torch.tensor(stream, dtype=torch.int64)

    def batch(k):
        return torch.stack([data[(k * Bg + i) * T:(k * Bg + i) * T + T + 1] for i in range(Bg)])

    meta = {"format": "pt", "num_layers": str(L), "hidden_size": str(C),
            "num_attention_heads": str(NH), "max_position_embeddings": str(T),
            "vocab_size": str(V)}
    gpt.write_safetensors(os.path.join(out, "llama_model.safetensors"), to_megatron(P), meta)
    gpt.write_llmc_tokens(os.path.join(out, "llama_tokens.bin"), stream)

    first = batch(0)
    P64 = {n: P[n].detach().double().requires_grad_(True) for n in names}
    logits = []
    loss0 = llama_forward(P64, first[:, :-1], first[:, 1:], logits)
    grads = torch.autograd.grad(loss0, [P64[n] for n in names])
    gpt.write_safetensors(os.path.join(out, "llama_grads.safetensors"),
                          to_megatron(dict(zip(names, grads))), meta)

    gpt.HP.update(HP)
    losses, norms, lrs = gpt.adamw_run(P, names, [n for n in names if "norm" not in n],
                                       llama_forward, batch)
    gpt.write_safetensors(os.path.join(out, "llama_final.safetensors"), to_megatron(P), meta)
    gpt.write_safetensors(os.path.join(out, "llama_ref.safetensors"), [
        ("tokens", first.to(torch.int32)), ("loss", loss0.detach().float().reshape(1)),
        ("logits0", logits[0][0].float().contiguous()),
        ("losses", torch.tensor(losses)), ("grad_norms", torch.tensor(norms)),
        ("lrs", torch.tensor(lrs))])
    with open(os.path.join(out, "llama_ref.json"), "w") as f:
        json.dump(dict(CFG, **HP), f, indent=1)
    print("oracle llama: loss %.6f -> %.6f after %d steps; grad norm %.4f (clip %.1f)"
          % (losses[0], losses[-1], iters, norms[0], HP["clip_grad"]))


if __name__ == "__main__":
    main()
