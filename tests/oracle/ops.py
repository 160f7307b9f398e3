#!/usr/bin/python3
"""PyTorch oracle for the ops of mg_tensor.h (run: /usr/bin/python3 tests/oracle/ops.py tests/data).

Builds small fp32 inputs with a fixed seed, computes every op forward and backward in float64 and
writes one reference file per op group, tests/data/ops_<group>.bin, read by tests/test_ops.c.

Each op is written out explicitly (the formulas mg_tensor.h implements), then
  * compared with PyTorch's own modules (F.gelu(approximate='tanh'), F.layer_norm, F.linear,
    F.cross_entropy, torch.optim.AdamW) in float64: a mistake in a formula below fails here;
  * differentiated by autograd, and its autograd gradient checked against finite differences by
    torch.autograd.gradcheck in float64.
The C test then holds the C implementation to these references (<= 1e-5 relative in fp32).

Shapes are odd on purpose: T=7, B=2, C=12, 3 heads of 4, vocabulary 37 padded to 40.

File format (little-endian): b"MGREF1\\0\\0", uint32 count, then per array: uint32 name length,
name, uint32 kind (0 float32, 1 int32), uint32 ndim, int64 shape[ndim], zero padding to a
multiple of 8 bytes from the file start, the data row-major.
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

T, B, C, NH, V, VP = 7, 2, 12, 3, 37, 40
HD = C // NH
N = T * B
torch.manual_seed(1234)
DT = torch.float64


def f32(*shape, scale=1.0):
    """Random fp32 values, returned as float64 holding exactly those fp32 values."""
    return (torch.randn(*shape, dtype=torch.float32) * scale).to(DT)


class Writer:
    def __init__(self):
        self.arrays = []

    def add(self, name, t):
        t = t.detach()
        kind = 1 if t.dtype in (torch.int32, torch.int64) else 0
        t = t.to(torch.int32 if kind else torch.float32).contiguous()
        self.arrays.append((name, kind, list(t.shape), t.numpy().tobytes()))

    def save(self, path):
        with open(path, "wb") as f:
            f.write(b"MGREF1\0\0" + struct.pack("<I", len(self.arrays)))
            for name, kind, shape, data in self.arrays:
                nb = name.encode()
                f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<II", kind, len(shape)))
                f.write(struct.pack("<%dq" % len(shape), *shape))
                f.write(b"\0" * (-f.tell() % 8) + data)  # data 8-byte aligned in the file


def agree(name, got, want, tol=1e-12):
    err = (got - want).abs().max().item()
    if not err <= tol * max(1.0, want.abs().max().item()):
        sys.exit("oracle: %s disagrees with PyTorch's own op (max abs err %g)" % (name, err))


def gradcheck(name, fn, inputs):
    inputs = [x.detach().clone().requires_grad_(True) for x in inputs]
    if not torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5):
        sys.exit("oracle: gradcheck failed for " + name)


def backward(fn, inputs, dout):
    """Forward in float64 and the gradients of sum(out * dout) w.r.t. inputs."""
    inputs = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, dout)
    return out.detach(), [g.detach() for g in grads]


# --- the formulas ------------------------------------------------------------------------------
def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def linear(x, w, b):
    return x @ w.t() + b


def attention(qkv):
    """qkv [T, B, NH, 3, HD] (Megatron's interleaved layout) -> out [T, B, NH*HD], probs."""
    q, k, v = (qkv[:, :, :, i, :].permute(1, 2, 0, 3) for i in range(3))  # [B, NH, T, HD]
    s = q @ k.transpose(-1, -2) / math.sqrt(HD)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
    out = (p @ v).permute(2, 0, 1, 3).reshape(T, B, NH * HD)
    return out, p


def xent(logits, targets):
    """Per-row loss over the real vocabulary (columns >= V are padding)."""
    real = logits[:, :V]
    return torch.logsumexp(real, -1) - real.gather(1, targets[:, None].long())[:, 0]


def embedding(tokens, wte, wpe):
    """tokens [B, T] -> [T, B, C] sequence-major."""
    return (wte[tokens.long()] + wpe[None, :T]).transpose(0, 1)


# Llama-family shapes: 4 query heads in 2 groups of head dim 8, 6 of its dims rotated
NQ, G, D, ROT = 4, 2, 8, 6
ROPE_BASE, ROPE_FACTOR, ROPE_LOW, ROPE_HIGH, ROPE_OLD = 500000.0, 8.0, 1.0, 4.0, 8


def rope_inv_freq(dim, base, llama3=None):
    """transformers 4.44's rotary frequencies in fp32: _compute_default_rope_parameters, and with
    llama3 = (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
    _compute_llama3_parameters."""
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if llama3 is None:
        return inv
    factor, low, high, old = llama3
    low_wl, high_wl = old / low, old / high
    wl = 2 * math.pi / inv
    inv_l = torch.where(wl > low_wl, inv / factor, inv)
    smooth = (old / wl - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    return torch.where(medium, smoothed, inv_l)


def rmsnorm(x, w):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def swiglu(gate, up):
    return gate * torch.sigmoid(gate) * up


def rope(qkv, cos_sin, t0):
    """Rotate-half on the first ROT dims of every query and key head of qkv [T, B, G, NQ/G+2, D];
    row t is at position t0 + t; cos_sin [positions, ROT/2, 2]."""
    h = ROT // 2
    c = cos_sin[t0:t0 + T, :, 0][:, None, None, None, :]
    s = cos_sin[t0:t0 + T, :, 1][:, None, None, None, :]
    qk, v = qkv[:, :, :, :-1], qkv[:, :, :, -1:]
    x1, x2, rest = qk[..., :h], qk[..., h:ROT], qk[..., ROT:]
    rot = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], -1)
    return torch.cat([rot, v], 3)


def gqa_split(qkv):
    """qkv [T, B, G, NQ/G + 2, D] -> q [B, NQ, T, D], k, v [B, G, T, D]."""
    q = qkv[:, :, :, :-2].reshape(T, B, NQ, D).permute(1, 2, 0, 3)
    k = qkv[:, :, :, -2].permute(1, 2, 0, 3)
    v = qkv[:, :, :, -1].permute(1, 2, 0, 3)
    return q, k, v


def gqa(qkv):
    q, k, v = gqa_split(qkv)
    rep = NQ // G
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)   # head h reads group h/rep
    s = q @ k.transpose(-1, -2) / math.sqrt(D)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
    return (p @ v).permute(2, 0, 1, 3).reshape(T, B, NQ * D), p


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    os.makedirs(outdir, exist_ok=True)

    # embedding: wte padded to VP rows, positions up to T+1 (one spare row)
    w = Writer()
    tokens = torch.randint(0, V, (B, T), dtype=torch.int32)
    wte, wpe, dout = f32(VP, C), f32(T + 1, C), f32(T, B, C)
    out, (dwte, dwpe) = backward(lambda a, b: embedding(tokens, a, b), [wte, wpe], dout)
    agree("embedding", out, (F.embedding(tokens.long(), wte) + wpe[:T]).transpose(0, 1))
    gradcheck("embedding", lambda a, b: embedding(tokens, a, b), [wte, wpe])
    for k, v in dict(tokens=tokens, wte=wte, wpe=wpe, dout=dout, out=out, dwte=dwte,
                     dwpe=dwpe).items():
        w.add(k, v)
    w.save(os.path.join(outdir, "ops_embedding.bin"))

    # layernorm
    w = Writer()
    x, lw, lb, dout = f32(N, C, scale=2.0), 1 + f32(C, scale=0.3), f32(C, scale=0.3), f32(N, C)
    out, (dx, dlw, dlb) = backward(layernorm, [x, lw, lb], dout)
    agree("layernorm", out, F.layer_norm(x, (C,), lw, lb, 1e-5))
    gradcheck("layernorm", layernorm, [x, lw, lb])
    mean = x.mean(-1)
    rstd = 1 / torch.sqrt(x.var(-1, unbiased=False) + 1e-5)
    for k, v in dict(inp=x, weight=lw, bias=lb, dout=dout, out=out, mean=mean, rstd=rstd,
                     dinp=dx, dweight=dlw, dbias=dlb).items():
        w.add(k, v)
    w.save(os.path.join(outdir, "ops_layernorm.bin"))

    # linear: an up projection (C -> 3C) and a down projection (4C -> C)
    w = Writer()
    for tag, fin, fout in (("up", C, 3 * C), ("down", 4 * C, C)):
        x, lw, lb, dout = f32(N, fin), f32(fout, fin, scale=0.3), f32(fout), f32(N, fout)
        out, (dx, dlw, dlb) = backward(linear, [x, lw, lb], dout)
        agree("linear", out, F.linear(x, lw, lb))
        gradcheck("linear", linear, [x, lw, lb])
        for k, v in dict(inp=x, weight=lw, bias=lb, dout=dout, out=out, dinp=dx, dweight=dlw,
                         dbias=dlb).items():
            w.add(tag + "_" + k, v)
    w.save(os.path.join(outdir, "ops_linear.bin"))

    # gelu
    w = Writer()
    x, dout = f32(N, 4 * C, scale=1.5), f32(N, 4 * C)
    out, (dx,) = backward(gelu, [x], dout)
    agree("gelu", out, F.gelu(x, approximate="tanh"))
    gradcheck("gelu", gelu, [x])
    for k, v in dict(inp=x, dout=dout, out=out, dinp=dx).items():
        w.add(k, v)
    w.save(os.path.join(outdir, "ops_gelu.bin"))

    # gelu, exact (erf): F.gelu itself, on the same inputs (no new draws: the later fixtures
    # keep their bytes)
    w = Writer()
    out, (dx,) = backward(lambda a: F.gelu(a), [x], dout)
    gradcheck("gelu_erf", lambda a: F.gelu(a), [x])
    for k, v in dict(inp=x, dout=dout, out=out, dinp=dx).items():
        w.add(k, v)
    w.save(os.path.join(outdir, "ops_gelu_erf.bin"))

    # squared ReLU (Megatron-LM's --squared-relu: torch.pow(F.relu(x), 2)), same inputs again
    w = Writer()
    relu2 = lambda a: torch.pow(F.relu(a), 2)
    out, (dx,) = backward(relu2, [x], dout)
    gradcheck("relu2", relu2, [x])
    for k, v in dict(inp=x, dout=dout, out=out, dinp=dx).items():
        w.add(k, v)
    w.save(os.path.join(outdir, "ops_relu2.bin"))

    # attention core
    w = Writer()
    qkv, dout = f32(T, B, NH, 3, HD), f32(T, B, NH * HD)
    out, (dqkv,) = backward(lambda a: attention(a)[0], [qkv], dout)
    probs = attention(qkv)[1]
    q, k, v = (qkv[:, :, :, i, :].permute(1, 2, 0, 3) for i in range(3))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    ref = F.softmax((q @ k.transpose(-1, -2) / math.sqrt(HD)).masked_fill(~mask, -1e300), -1) @ v
    agree("attention", out, ref.permute(2, 0, 1, 3).reshape(T, B, C))
    gradcheck("attention", lambda a: attention(a)[0], [qkv])
    for k_, v_ in dict(qkv=qkv.reshape(N, 3 * C), dout=dout.reshape(N, C), out=out.reshape(N, C),
                       att=probs, dqkv=dqkv.reshape(N, 3 * C)).items():
        w.add(k_, v_)
    w.save(os.path.join(outdir, "ops_attention.bin"))

    # cross-entropy over a padded vocabulary (padding columns hold large junk values)
    w = Writer()
    logits = f32(N, VP, scale=3.0)
    logits[:, V:] = 50.0
    targets = torch.randint(0, V, (N,), dtype=torch.int32)
    dloss = 1.0 / N
    losses, (dlogits,) = backward(lambda l: xent(l, targets), [logits],
                                  torch.full((N,), dloss, dtype=DT))
    agree("xent", losses, F.cross_entropy(logits[:, :V], targets.long(), reduction="none"))
    gradcheck("xent", lambda l: xent(l, targets), [logits])
    # rows 0, 5 and the last ignored (target -1), as PyTorch's ignore_index: loss 0, gradient 0
    targets_ign = targets.clone()
    targets_ign[[0, 5, N - 1]] = -1
    losses_ign, (dlogits_ign,) = backward(
        lambda l: F.cross_entropy(l[:, :V], targets_ign.long(), ignore_index=-1, reduction="none"),
        [logits], torch.full((N,), dloss, dtype=DT))
    for k, v in dict(logits=logits, targets=targets, losses=losses, dlogits=dlogits,
                     dloss=torch.tensor([dloss]), targets_ign=targets_ign, losses_ign=losses_ign,
                     dlogits_ign=dlogits_ign).items():
        w.add(k, v)
    w.save(os.path.join(outdir, "ops_xent.bin"))

    # AdamW: three steps of torch.optim.AdamW with gradient scale 0.5 folded into the grads
    w = Writer()
    n, lr, b1, b2, eps, wd, gscale = 50, 1e-2, 0.9, 0.95, 1e-8, 0.1, 0.5
    p0 = f32(n)
    grads = [f32(n) for _ in range(3)]
    param = p0.clone().requires_grad_(True)
    opt = torch.optim.AdamW([param], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    w.add("param0", p0)
    w.add("hparams", torch.tensor([lr, b1, b2, eps, wd, gscale]))
    for step, g in enumerate(grads, 1):
        param.grad = g * gscale
        opt.step()
        st = opt.state[param]
        w.add("grad%d" % step, g)
        w.add("param%d" % step, param)
        w.add("m%d" % step, st["exp_avg"])
        w.add("v%d" % step, st["exp_avg_sq"])
    w.save(os.path.join(outdir, "ops_adamw.bin"))

    # the Llama family's ops: RMSNorm, SwiGLU, rotary embedding (partial, llama3-scaled) and
    # grouped-query attention, in the grouped qkv layout [T, B, G, (NQ/G + 2), D]
    w = Writer()
    x, lw, dout = f32(N, C, scale=2.0), 1 + f32(C, scale=0.3), f32(N, C)
    out, (dx, dlw) = backward(rmsnorm, [x, lw], dout)
    agree("rmsnorm", out, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * lw)
    gradcheck("rmsnorm", rmsnorm, [x, lw])
    rstd = torch.rsqrt(x.pow(2).mean(-1) + 1e-6)
    for k, v in dict(rms_inp=x, rms_weight=lw, rms_dout=dout, rms_out=out, rms_rstd=rstd,
                     rms_dinp=dx, rms_dweight=dlw).items():
        w.add(k, v)
    gate, up, dout = f32(N, 2 * C, scale=1.5), f32(N, 2 * C), f32(N, 2 * C)
    out, (dgate, dup) = backward(swiglu, [gate, up], dout)
    agree("swiglu", out, F.silu(gate) * up)
    gradcheck("swiglu", swiglu, [gate, up])
    for k, v in dict(sw_gate=gate, sw_up=up, sw_dout=dout, sw_out=out, sw_dgate=dgate,
                     sw_dup=dup).items():
        w.add(k, v)
    # rotary tables exactly as transformers 4.44 computes them (fp32), rot = 6 of 8 dims
    for tag, llama3 in (("rope", False), ("rope3", True)):
        inv = rope_inv_freq(ROT, ROPE_BASE, (ROPE_FACTOR, ROPE_LOW, ROPE_HIGH, ROPE_OLD)
                            if llama3 else None)
        pos = torch.arange(T + 3, dtype=torch.float32)
        ang = inv[:, None].float() @ pos[None, :]          # [ROT/2, positions] in fp32
        table = torch.stack([ang.t().cos(), ang.t().sin()], -1)   # [positions, ROT/2, 2]
        w.add(tag + "_table", table)
    cos_sin = table.to(DT)   # the llama3 one drives the op check
    qkv, dout = f32(T, B, G, NQ // G + 2, D), f32(T, B, G, NQ // G + 2, D)
    T0 = 2
    out, (dqkv,) = backward(lambda a: rope(a, cos_sin, T0), [qkv], dout)
    gradcheck("rope", lambda a: rope(a, cos_sin, T0), [qkv])
    for k, v in dict(rp_qkv=qkv.reshape(N, -1), rp_dout=dout.reshape(N, -1),
                     rp_out=out.reshape(N, -1), rp_dqkv=dqkv.reshape(N, -1)).items():
        w.add(k, v)
    qkv, dout = f32(T, B, G, NQ // G + 2, D), f32(T, B, NQ * D)
    out, (dqkv,) = backward(lambda a: gqa(a)[0], [qkv], dout)
    probs = gqa(qkv)[1]
    q, k, v = gqa_split(qkv)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    rep = NQ // G
    ref = F.softmax((q @ k.repeat_interleave(rep, 1).transpose(-1, -2) / math.sqrt(D))
                    .masked_fill(~mask, -1e300), -1) @ v.repeat_interleave(rep, 1)
    agree("gqa", out, ref.permute(2, 0, 1, 3).reshape(T, B, NQ * D))
    gradcheck("gqa", lambda a: gqa(a)[0], [qkv])
    for k_, v_ in dict(gq_qkv=qkv.reshape(N, -1), gq_dout=dout.reshape(N, -1),
                       gq_out=out.reshape(N, -1), gq_att=probs,
                       gq_dqkv=dqkv.reshape(N, -1)).items():
        w.add(k_, v_)
    w.save(os.path.join(outdir, "ops_llama.bin"))

    total = sum(os.path.getsize(os.path.join(outdir, f)) for f in os.listdir(outdir)
                if f.startswith("ops_"))
    print("oracle: ops_*.bin written to %s (%d bytes)" % (outdir, total))


if __name__ == "__main__":
    main()
