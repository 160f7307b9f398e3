#!/usr/bin/python3
"""tests/oracle/gpt.py — the PyTorch reference for megatron.h's GPT-2 (issue 3).

Usage: /usr/bin/python3 tests/oracle/gpt.py OUTDIR        (make oracle passes tests/data)

A tiny GPT-2 written directly in PyTorch (fp32, the llm.c / Hugging Face semantics: pre-LayerNorm,
eps 1e-5, GELU tanh, causal attention scaled by 1/sqrt(hd), tied output layer, logits over the
real vocabulary only) is given random weights and trained for 50 steps with torch.optim.AdamW.
It writes, into OUTDIR:
  gpt_model.bin          the initial weights as an llm.c checkpoint (version 3, fp32, Vp = 128)
  gpt_model.safetensors  the same weights as a Hugging Face GPT-2 safetensors file (Conv1D:
                         weights stored (in, out)), with gpt_config.json beside it
  gpt_grads.safetensors  the gradient of the loss of the first global batch w.r.t. every
                         parameter (computed in float64 from the fp32 weights, stored fp32),
                         named and laid out exactly like gpt_model.safetensors
  gpt_final.safetensors  the weights after the 50 AdamW steps, same naming
  gpt_tokens.bin         the token stream as an llm.c token file; the run reads it in the
                         sequential order: sample i of iteration k (0-based) is tokens
                         [(k*B+i)*T, (k*B+i)*T + T + 1)
  gpt_ref.safetensors    tokens (I32 [B, T+1], the first global batch), loss (F32 [1]), and per
                         step: losses, grad_norms (before clipping), lrs (F32 [50])
  gpt_ref.json           the hyper-parameters used (the C test reads the same numbers from here)
  gpt_ref_eod.safetensors  the same 50 steps from the same weights with Megatron-LM's loss mask
                         (--eod-mask-loss, eod_id in gpt_ref.json: the stream's most frequent id):
                         positions whose INPUT token is eod_id leave the loss; losses, grad_norms
                         with each microbatch's loss the mean over its kept positions (Megatron's
                         default), and pt_losses, pt_grad_norms with the loss the mean over the
                         global batch's kept positions (--calculate-per-token-loss); the losses
                         reported are Megatron-core's: Σ kept losses / Σ kept positions
The learning rate follows Megatron's OptimizerParamScheduler: the rate used by iteration k
(1-based) is get_lr(k - 1) — linear warm-up from 0, then cosine decay to min_lr, then min_lr.
Weight decay applies to weights only (not to biases and layernorm parameters); gradients are
clipped to a global norm (torch.nn.utils.clip_grad_norm_) before each step.
"""
import json, math, os, struct, sys
import torch
import torch.nn.functional as F

CFG = dict(n_layer=2, n_embd=32, n_head=4, seq_len=16, n_positions=24, vocab_size=37,
           padded_vocab=128)
HP = dict(micro_batch=2, global_batch=4, train_iters=50, lr=3e-3, min_lr=3e-4, warmup=5,
          decay_iters=40, decay_style="cosine", weight_decay=0.1, beta1=0.9, beta2=0.95,
          eps=1e-8, clip_grad=1.0, seed=1234)

L, C, NH, T = CFG["n_layer"], CFG["n_embd"], CFG["n_head"], CFG["seq_len"]
MAXT, V, VP = CFG["n_positions"], CFG["vocab_size"], CFG["padded_vocab"]


def hf_names():
    """Parameter names in Hugging Face GPT-2 order (the order this oracle keeps them in)."""
    names = ["wte.weight", "wpe.weight"]
    for i in range(L):
        p = "h.%d." % i
        names += [p + "ln_1.weight", p + "ln_1.bias", p + "attn.c_attn.weight",
                  p + "attn.c_attn.bias", p + "attn.c_proj.weight", p + "attn.c_proj.bias",
                  p + "ln_2.weight", p + "ln_2.bias", p + "mlp.c_fc.weight", p + "mlp.c_fc.bias",
                  p + "mlp.c_proj.weight", p + "mlp.c_proj.bias"]
    return names + ["ln_f.weight", "ln_f.bias"]


def init_params(gen):
    """GPT-2 initialisation, plus non-trivial biases and layernorm weights so that every
    gradient path is exercised. Conv1D layout: linear weights are (in, out)."""
    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std
    P = {"wte.weight": normal(V, C), "wpe.weight": normal(MAXT, C, std=0.01)}
    for i in range(L):
        p = "h.%d." % i
        P[p + "ln_1.weight"] = 1 + normal(C, std=0.1)
        P[p + "ln_1.bias"] = normal(C, std=0.05)
        P[p + "attn.c_attn.weight"] = normal(C, 3 * C, std=0.1)  # large: non-uniform attention
        P[p + "attn.c_attn.bias"] = normal(3 * C, std=0.05)
        P[p + "attn.c_proj.weight"] = normal(C, C, std=0.02 / math.sqrt(2 * L))
        P[p + "attn.c_proj.bias"] = normal(C, std=0.02)
        P[p + "ln_2.weight"] = 1 + normal(C, std=0.1)
        P[p + "ln_2.bias"] = normal(C, std=0.05)
        P[p + "mlp.c_fc.weight"] = normal(C, 4 * C)
        P[p + "mlp.c_fc.bias"] = normal(4 * C, std=0.05)
        P[p + "mlp.c_proj.weight"] = normal(4 * C, C, std=0.02 / math.sqrt(2 * L))
        P[p + "mlp.c_proj.bias"] = normal(C, std=0.02)
    P["ln_f.weight"] = 1 + normal(C, std=0.1)
    P["ln_f.bias"] = normal(C, std=0.05)
    return {k: P[k].clone().requires_grad_(True) for k in hf_names()}


def gpt2_forward(P, idx, targets, n_layer, n_head, reduction="mean"):
    """GPT-2 with Hugging Face names and Conv1D weights P; idx, targets: int64 [B, T]. Returns
    the mean cross-entropy over all B*T positions (reduction "none": the B*T losses, batch-
    major). (bench/train.py imports it too.)"""
    B, Tn = idx.shape
    C = P["wte.weight"].shape[1]
    NH = n_head
    x = P["wte.weight"][idx] + P["wpe.weight"][:Tn]
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    hd = C // NH
    for i in range(n_layer):
        p = "h.%d." % i
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
        qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]      # [B, T, 3C]
        q, k, v = qkv.split(C, dim=2)                                           # [q | k | v]
        q = q.view(B, Tn, NH, hd).transpose(1, 2)
        k = k.view(B, Tn, NH, hd).transpose(1, 2)
        v = v.view(B, Tn, NH, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, Tn, C)
        x = x + y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
        h = F.gelu(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    logits = x @ P["wte.weight"].t()                                            # [B, T, V]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction=reduction)


def forward(P, idx, targets):
    return gpt2_forward(P, idx, targets, L, NH)


def megatron_lr(num_steps):
    """Megatron-LM OptimizerParamScheduler.get_lr (init_lr 0), steps counted in iterations."""
    max_lr, min_lr, warm, decay = HP["lr"], HP["min_lr"], HP["warmup"], HP["decay_iters"]
    if warm > 0 and num_steps <= warm:
        return max_lr * num_steps / warm
    if HP["decay_style"] == "constant":
        return max_lr
    if num_steps > decay:
        return min_lr
    ratio = (num_steps - warm) / (decay - warm)
    coeff = 1.0 - ratio if HP["decay_style"] == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1)
    return min_lr + coeff * (max_lr - min_lr)


def masked_loss(P, inp, tgt, eod):
    """Megatron-LM's loss mask: Σ of the losses at positions whose input is not eod, and
    their count."""
    per = gpt2_forward(P, inp, tgt, L, NH, reduction="none")
    keep = (inp != eod).reshape(-1).to(per.dtype)
    return (per * keep).sum(), keep.sum()


def adamw_run(P, names, decay, forward_fn, batch, eod=None, per_token=False):
    """HP["train_iters"] steps of torch.optim.AdamW (weight decay on the names in decay only)
    at Megatron's learning rate, gradients accumulated over the global batch's microbatches and
    clipped to a global norm. Returns the per-step losses, norms (before clipping) and lrs.
    eod given: the loss mask (masked_loss), each microbatch's loss its kept positions' mean
    divided by the microbatches (per_token: the global batch's kept positions' mean); the
    loss returned is Σ kept losses / Σ kept positions, as Megatron-core reports it."""
    Bm, Bg = HP["micro_batch"], HP["global_batch"]
    opt = torch.optim.AdamW([{"params": [P[n] for n in names if n in decay],
                              "weight_decay": HP["weight_decay"]},
                             {"params": [P[n] for n in names if n not in decay],
                              "weight_decay": 0.0}], lr=HP["lr"],
                            betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"])
    losses, norms, lrs = [], [], []
    for k in range(HP["train_iters"]):
        lr = megatron_lr(k)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=False)
        gb, total = batch(k), 0.0
        kept_all = (gb[:, :-1] != eod).sum().item() if eod is not None else 0
        for mb in range(Bg // Bm):
            sub = gb[mb * Bm:(mb + 1) * Bm]
            if eod is None:
                loss = forward_fn(P, sub[:, :-1], sub[:, 1:]) * (Bm / Bg)
                total += loss.item()
            else:
                s, kept = masked_loss(P, sub[:, :-1], sub[:, 1:], eod)
                loss = s / kept_all if per_token else s / kept * (Bm / Bg)
                total += s.item() / kept_all
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([P[n] for n in names], HP["clip_grad"])
        opt.step()
        losses.append(total); norms.append(norm.item()); lrs.append(lr)
    return losses, norms, lrs


# ---- file writers -----------------------------------------------------------------------------
def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, tensor) in file order. Row-major, no gaps."""
    header, blobs, off = {}, [], 0
    codes = {torch.float32: "F32", torch.int32: "I32"}
    for name, t in tensors:
        t = t.detach().contiguous()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(blobs))


def write_llmc_checkpoint(path, P):
    """llm.c train_gpt2.py write_model, version 3: fp32, vocabulary padded to VP rows."""
    hdr = [0] * 256
    hdr[0:8] = [20240326, 3, MAXT, V, L, NH, C, VP]
    wte = torch.zeros(VP, C)
    wte[:V] = P["wte.weight"].detach()
    def stack(suffix, transpose):
        ts = [P["h.%d.%s" % (i, suffix)].detach() for i in range(L)]
        return torch.stack([t.t() if transpose else t for t in ts])
    order = [wte, P["wpe.weight"].detach(),
             stack("ln_1.weight", 0), stack("ln_1.bias", 0),
             stack("attn.c_attn.weight", 1), stack("attn.c_attn.bias", 0),
             stack("attn.c_proj.weight", 1), stack("attn.c_proj.bias", 0),
             stack("ln_2.weight", 0), stack("ln_2.bias", 0),
             stack("mlp.c_fc.weight", 1), stack("mlp.c_fc.bias", 0),
             stack("mlp.c_proj.weight", 1), stack("mlp.c_proj.bias", 0),
             P["ln_f.weight"].detach(), P["ln_f.bias"].detach()]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        for t in order:
            f.write(t.contiguous().float().numpy().tobytes())


def write_llmc_tokens(path, toks):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)))
        f.write(struct.pack("<%dH" % len(toks), *toks))


def markov_tokens(gen, n):
    """A token stream with structure to learn: a sparse random Markov chain over V ids."""
    nxt = torch.randint(0, V, (V, 3), generator=gen)
    toks, cur = [], 0
    for _ in range(n):
        toks.append(int(cur))
        cur = nxt[cur, torch.randint(0, 3, (1,), generator=gen)].item()
    return toks


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(HP["seed"])
    P = init_params(gen)
    names = hf_names()
    Bm, Bg, iters = HP["micro_batch"], HP["global_batch"], HP["train_iters"]
    stream = markov_tokens(gen, iters * Bg * T + 1)
    data = torch.tensor(stream, dtype=torch.int64)

    def batch(k):  # sequential order: global batch of iteration k (0-based) as [Bg, T+1]
        return torch.stack([data[(k * Bg + i) * T:(k * Bg + i) * T + T + 1] for i in range(Bg)])

    hf_meta = {"format": "pt"}
    write_llmc_checkpoint(os.path.join(out, "gpt_model.bin"), P)
    write_safetensors(os.path.join(out, "gpt_model.safetensors"), [(n, P[n]) for n in names],
                      hf_meta)
    with open(os.path.join(out, "gpt_config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": L,
                   "n_head": NH, "n_embd": C, "n_positions": MAXT, "n_ctx": MAXT,
                   "vocab_size": V, "activation_function": "gelu_new",
                   "layer_norm_epsilon": 1e-5}, f, indent=1)
    write_llmc_tokens(os.path.join(out, "gpt_tokens.bin"), stream)

    # gradient of the first global batch (the loss is the mean over all its tokens), computed in
    # float64 from the fp32 weights: the reference is then the exact answer for these weights
    # (to ~1e-16), and the C model's fp32 result is measured against it alone.
    first = batch(0)
    P64 = {n: P[n].detach().double().requires_grad_(True) for n in names}
    loss0 = forward(P64, first[:, :-1], first[:, 1:])
    grads = torch.autograd.grad(loss0, [P64[n] for n in names])
    write_safetensors(os.path.join(out, "gpt_grads.safetensors"),
                      [(n, g.float()) for n, g in zip(names, grads)], hf_meta)

    # 50 AdamW steps with gradient accumulation over Bg / Bm microbatches
    decay = [n for n in names if n.endswith(".weight") and "ln_" not in n]
    P0 = {n: P[n].detach().clone() for n in names}
    losses, norms, lrs = adamw_run(P, names, decay, forward, batch)
    write_safetensors(os.path.join(out, "gpt_final.safetensors"), [(n, P[n]) for n in names],
                      hf_meta)
    write_safetensors(os.path.join(out, "gpt_ref.safetensors"), [
        ("tokens", first.to(torch.int32)), ("loss", loss0.detach().float().reshape(1)),
        ("losses", torch.tensor(losses)), ("grad_norms", torch.tensor(norms)),
        ("lrs", torch.tensor(lrs))])
    # the loss mask (--eod-mask-loss) from the same initial weights, both normalisations
    eod = max(range(V), key=lambda i: (stream.count(i), -i))
    eod_runs = []
    for per_token in (False, True):
        Pm = {n: P0[n].clone().requires_grad_(True) for n in names}
        eod_runs.append(adamw_run(Pm, names, decay, forward, batch, eod, per_token))
    write_safetensors(os.path.join(out, "gpt_ref_eod.safetensors"), [
        ("losses", torch.tensor(eod_runs[0][0])), ("grad_norms", torch.tensor(eod_runs[0][1])),
        ("pt_losses", torch.tensor(eod_runs[1][0])),
        ("pt_grad_norms", torch.tensor(eod_runs[1][1]))])
    with open(os.path.join(out, "gpt_ref.json"), "w") as f:
        json.dump(dict(CFG, eod_id=eod, **HP), f, indent=1)
    print("oracle gpt: loss %.6f -> %.6f after %d steps; grad norm %.4f (clip %.1f)"
          % (losses[0], losses[-1], iters, norms[0], HP["clip_grad"]))


if __name__ == "__main__":
    main()
