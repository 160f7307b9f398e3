#!/usr/bin/python3
"""bench/train.py — the PyTorch peer of bench/train.c: the same GPT-2 (weights loaded from the
Hugging Face safetensors file the C side exported), the same token file read in the same
sequential order, fp32, torch.optim.AdamW, on the CPU with --threads threads. Prints one line:
    peer tokens_per_sec=X ms_per_iter=Y first_loss=Z
Run by build/train; by hand:
    /usr/bin/python3 bench/train.py --init DIR --data FILE --layers 6 --hidden 384 --heads 6 \
        --seq 256 --batch 4 --warmup 2 --iters 10 --threads 2
"""
import argparse, json, os, struct, sys, time
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
from gpt import gpt2_forward  # noqa: E402  (the oracle's GPT-2: one definition of the model)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        f.seek(0)
        raw = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        b, e = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(raw[base + b:base + e], dtype=np.float32)
                                     .copy()).reshape(info["shape"])
    return out


def read_llmc_tokens(path):
    with open(path, "rb") as f:
        hdr = struct.unpack("<256i", f.read(1024))
        assert hdr[0] == 20240520 and hdr[1] == 1
        return torch.from_numpy(np.frombuffer(f.read(2 * hdr[2]), dtype=np.uint16).astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    for k in ("layers", "heads", "seq", "batch", "warmup", "iters", "threads"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--lr", type=float, default=1e-4)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    P = read_safetensors(a.init + "/model.safetensors")
    assert P["wte.weight"].shape[1] == a.hidden
    params = [t.requires_grad_(True) for t in P.values()]
    decay = [t for n, t in P.items() if n.endswith(".weight") and "ln_" not in n]
    other = [t for n, t in P.items() if not (n.endswith(".weight") and "ln_" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": other, "weight_decay": 0.0}], lr=a.lr)
    data = read_llmc_tokens(a.data)
    B, T = a.batch, a.seq
    first_loss, t0 = None, 0.0
    for k in range(a.warmup + a.iters):
        if k == a.warmup:
            t0 = time.perf_counter()
        rows = torch.stack([data[(k * B + i) * T:(k * B + i) * T + T + 1] for i in range(B)])
        opt.zero_grad(set_to_none=True)
        loss = gpt2_forward(P, rows[:, :-1], rows[:, 1:], a.layers, a.heads)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if first_loss is None:
            first_loss = loss.item()
    dt = time.perf_counter() - t0
    print("peer tokens_per_sec=%.1f ms_per_iter=%.2f first_loss=%.6f"
          % (a.iters * B * T / dt, 1e3 * dt / a.iters, first_loss))


if __name__ == "__main__":
    main()
