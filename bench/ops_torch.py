#!/usr/bin/python3
"""PyTorch peer of bench/ops.c: the same ops at the same shapes and thread count, timed the same
way (median of --reps runs after 2 warm-ups), printed side by side with the C results.

    /usr/bin/python3 bench/ops_torch.py --c build/ops --threads 2 [--B 4 --T 256 --C 384
                                        --nh 6 --V 8192 --reps 10] [--rounds 2]

With --c, runs the C bench (and this one) --rounds times alternately, keeps each op's best
median over the rounds (the machine may be shared), and prints a markdown table:
op | megatron.h ms | PyTorch ms | PyTorch/megatron.h | GFLOP/s (ours). Without --c it prints
PyTorch's lines in the C bench's format ("op NAME MEDIAN_MS"). The PyTorch ops are the ones its
own training would run: F.linear / mm for the linear layers, native_layer_norm and its backward,
gelu(approximate='tanh') and gelu_backward, baddbmm + masked softmax + bmm for attention (with
_softmax_backward_data), log_softmax + nll_loss and their backward, embedding_dense_backward,
torch.optim.AdamW, linalg.vector_norm.
"""
import argparse
import math
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def timed(fn, reps):
    for _ in range(2):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def torch_bench(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T, C, NH, V, N = a.B, a.T, a.C, a.nh, a.V, a.B * a.T
    hd = C // NH
    r = {}

    def run(name, fn):
        r[name] = timed(fn, a.reps)
        print("op %s %.4f" % (name, r[name]), file=sys.stderr if a.c else sys.stdout, flush=True)

    with torch.no_grad():
        x, y = torch.randn(2048, 2048), torch.randn(2048, 2048)
        out = torch.empty(2048, 2048)
        run("sgemm_2048", lambda: torch.mm(x, y, out=out))
        for lname, fin, fout in (("qkv", C, 3 * C), ("attproj", C, C), ("fc", C, 4 * C),
                                 ("fcproj", 4 * C, C), ("lmhead", C, V)):
            inp, w, b = torch.randn(N, fin), torch.randn(fout, fin) * 0.1, torch.randn(fout)
            dout, dw, db = torch.randn(N, fout), torch.zeros(fout, fin), torch.zeros(fout)
            dinp = torch.empty(N, fin)
            bias = None if lname == "lmhead" else b
            run("linear_%s_fwd" % lname, lambda: F.linear(inp, w, bias))
            run("linear_%s_bwd_input" % lname, lambda: torch.mm(dout, w, out=dinp))

            def bwd_w():
                dw.addmm_(dout.t(), inp)
                if bias is not None:
                    db.add_(dout.sum(0))
            run("linear_%s_bwd_weight" % lname, bwd_w)

        xc, lw, lb, dc = torch.randn(N, C), torch.randn(C), torch.randn(C), torch.randn(N, C)
        _, mean, rstd = torch.native_layer_norm(xc, [C], lw, lb, 1e-5)
        run("layernorm_fwd", lambda: torch.native_layer_norm(xc, [C], lw, lb, 1e-5))
        run("layernorm_bwd", lambda: torch.ops.aten.native_layer_norm_backward(
            dc, xc, [C], mean, rstd, lw, lb, [True, True, True]))
        x4, d4 = torch.randn(N, 4 * C), torch.randn(N, 4 * C)
        run("gelu_fwd", lambda: F.gelu(x4, approximate="tanh"))
        run("gelu_bwd", lambda: torch.ops.aten.gelu_backward(d4, x4, approximate="tanh"))
        zc = torch.empty(N, C)
        run("residual_add", lambda: torch.add(xc, dc, out=zc))
        run("dropout_fwd_p0.1", lambda: F.dropout(x4, 0.1, training=True))

        # attention core on qkv [T, B, nh, 3, hd] (Megatron's layout), as Megatron's
        # CoreAttention does it without fused kernels
        qkv = torch.randn(T, B, NH, 3, hd)
        q, k, v = (qkv[:, :, :, i, :].reshape(T, B * NH, hd).transpose(0, 1) for i in range(3))
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        scale = 1.0 / math.sqrt(hd)
        scores = torch.empty(B * NH, T, T)

        def attn_fwd():
            s = torch.baddbmm(scores, q, k.transpose(1, 2), beta=0.0, alpha=scale)
            p = torch.softmax(s.masked_fill_(mask, float("-inf")), dim=-1)
            return p, torch.bmm(p, v).transpose(0, 1).reshape(T, B, C)
        run("attention_fwd", attn_fwd)
        p, _ = attn_fwd()
        dout = torch.randn(B * NH, T, hd)

        def attn_bwd():
            dp = torch.bmm(dout, v.transpose(1, 2))
            dv = torch.bmm(p.transpose(1, 2), dout)
            ds = torch._softmax_backward_data(dp, p, -1, torch.float32)
            dq = torch.bmm(ds, k) * scale
            dk = torch.bmm(ds.transpose(1, 2), q) * scale
            return dq, dk, dv
        run("attention_bwd", attn_bwd)

        logits = torch.randn(N, V) * 4
        tgt = (torch.arange(N) * 7919) % V
        ls = torch.log_softmax(logits, -1)
        run("xent_fwd", lambda: F.nll_loss(torch.log_softmax(logits, -1), tgt))
        one = torch.tensor(1.0)

        def xent_bwd():
            g = torch.ops.aten.nll_loss_backward(one, ls, tgt, None, 1, -100, torch.tensor(float(N)))
            return torch.ops.aten._log_softmax_backward_data(g, ls, 1, torch.float32)
        run("xent_bwd", xent_bwd)

        wte, wpe = torch.randn(V, C), torch.randn(T, C)
        tok = ((torch.arange(N) * 7919) % V).reshape(B, T)
        run("embedding_fwd", lambda: F.embedding(tok.t(), wte) + wpe[:, None, :])
        demb = torch.randn(T, B, C)
        run("embedding_bwd", lambda: (torch.ops.aten.embedding_dense_backward(
            demb, tok.t(), V, -1, False), demb.sum(1)))

    n = 12 * C * C * 4 + V * C
    prm = torch.nn.Parameter(torch.randn(n))
    prm.grad = torch.randn(n)
    opt = torch.optim.AdamW([prm], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    run("adamw_step", opt.step)
    with torch.no_grad():
        run("grad_sumsq", lambda: torch.linalg.vector_norm(prm.grad))
    return r


def c_bench(a):
    cmd = [a.c, "--threads", str(a.threads), "--B", str(a.B), "--T", str(a.T), "--C", str(a.C),
           "--nh", str(a.nh), "--V", str(a.V), "--reps", str(a.reps)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res, header = {}, ""
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "op":
            res[f[1]] = (float(f[2]), float(f[3]) if len(f) > 3 else None)
        elif line.startswith("# device"):
            header = line
    return res, header


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--c", help="path of the C bench (build/ops) to run side by side")
    ap.add_argument("--threads", type=int, default=2)
    for k, v in (("B", 4), ("T", 256), ("C", 384), ("nh", 6), ("V", 8192), ("reps", 10),
                 ("rounds", 2)):
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    if not a.c:
        torch_bench(a)
        return
    best_c, best_t, header = {}, {}, ""
    for _ in range(a.rounds):
        res, header = c_bench(a)
        for k, v in res.items():
            if k not in best_c or v[0] < best_c[k][0]:
                best_c[k] = v
        for k, v in torch_bench(a).items():
            best_t[k] = min(v, best_t.get(k, v))
    print(header.replace("# ", "") + "; PyTorch %s, %d threads; best of %d rounds of medians"
          % (torch.__version__, a.threads, a.rounds))
    print()
    print("| op | megatron.h ms | PyTorch ms | PyTorch / megatron.h | megatron.h GFLOP/s |")
    print("|---|---:|---:|---:|---:|")
    for k, (ms, gf) in best_c.items():
        tk = "sgemm_2048" if k.startswith("sgemm_2048") else k
        if k.startswith("flash_"):   # the tiled attention beside PyTorch's one attention
            tk = k[len("flash_"):]
        t = best_t.get(tk)
        print("| %s | %.3f | %s | %s | %s |" % (
            k, ms, "%.3f" % t if t is not None else "-",
            "%.2f" % (t / ms) if t is not None and ms > 0 else "-",
            "%.1f" % gf if gf is not None else ""))


if __name__ == "__main__":
    main()
