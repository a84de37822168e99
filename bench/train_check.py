#!/usr/bin/env python3
"""Training check (issue 18): a small GPT-style model trained twice from the same initial weights
on the same batches, once with flashattn's flash_attn_func as its attention and once with PyTorch
SDPA; the loss curves must agree within --tol (relative) at every step.

On the GPU machine (offline: the data are random tokens from a fixed seed):
    PYTHONPATH=python python3 bench/train_check.py --json bench/results/train_check_h100.json
CPU smoke test (tiny model, the cpu kernel):
    PYTHONPATH=python python3 bench/train_check.py --device cpu --steps 5

Model: token and position embeddings, pre-LayerNorm blocks (causal self-attention with heads of
dimension d_model / heads, a GELU MLP of 4 * d_model), a final LayerNorm and an untied output
layer; AdamW. Weights fp32, forward and backward under bf16 autocast, so the attention runs on bf16
q, k, v in both runs. Data: each sequence is a random block of tokens written twice, so that the
second half is predictable only by attending to the first (the loss falls as the model learns to
copy, which needs correct attention gradients). Exit status 1 when a step's losses differ by more
than --tol relative to SDPA's, 0 otherwise; the JSON holds both curves and the per-step difference.
"""
import argparse
import copy
import datetime
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # cuda: the model; cpu: a smoke test of a few seconds on two cores
    "cuda": dict(layers=4, d_model=256, heads=4, vocab=512, seq=256, batch=8, steps=300),
    "cpu": dict(layers=2, d_model=128, heads=2, vocab=128, seq=64, batch=2, steps=5),
}


class Block(nn.Module):
    def __init__(self, d_model, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        x = x + self.proj(self.attention(q, k, v).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d_model, heads, layers, attention):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, attention) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def set_attention(self, attention):
        for blk in self.blocks:
            blk.attention = attention

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def sdpa_attention(q, k, v):
    """(batch, seqlen, heads, head_dim) in and out, as flash_attn_func."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         is_causal=True)
    return out.transpose(1, 2)


def flashattn_attention(kernel, deterministic):
    from flashattn import flash_attn_func

    def attention(q, k, v):
        return flash_attn_func(q, k, v, causal=True, kernel=kernel, deterministic=deterministic)
    return attention


def make_batches(steps, batch, seq, vocab, seed):
    """(steps, batch, seq + 1) int64: a random block of (seq + 1) / 2 tokens written twice."""
    gen = torch.Generator().manual_seed(seed)
    half = (seq + 2) // 2
    block = torch.randint(0, vocab, (steps, batch, half), generator=gen)
    return torch.cat([block, block], dim=2)[:, :, :seq + 1]


def train(model, batches, steps, lr, device, dtype, log_every, name):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, betas=(0.9, 0.95))
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        data = batches[step].to(device, non_blocking=True)
        inp, tgt = data[:, :-1], data[:, 1:]
        with torch.autocast(device_type=device.type, dtype=dtype):
            logits = model(inp)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise RuntimeError(f"{name}: loss {losses[-1]} at step {step}")
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"{name:>9} step {step:>4} loss {losses[-1]:.5f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return losses, time.perf_counter() - start


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    for name in ("layers", "d_model", "heads", "vocab", "seq", "batch", "steps"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                       help=f"default: {PRESETS['cuda'][name]} on cuda, "
                            f"{PRESETS['cpu'][name]} on cpu")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0, help="weights and data")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--kernel", default="auto", help="flashattn forward family")
    p.add_argument("--deterministic", action="store_true", help="flashattn's deterministic bwd")
    p.add_argument("--tol", type=float, default=0.01, help="max relative loss difference")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--json", help="output file")
    a = p.parse_args(argv)
    for name, value in PRESETS[a.device].items():
        if getattr(a, name) is None:
            setattr(a, name, value)
    if a.d_model % a.heads:
        p.error(f"--d-model {a.d_model} must be a multiple of --heads {a.heads}")
    return a


def main(argv):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("train_check: no CUDA device (use --device cpu for the smoke test)", file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    print(f"# train_check seed {args.seed}: {args.layers} layers, d_model {args.d_model}, "
          f"{args.heads} heads of {args.d_model // args.heads}, vocab {args.vocab}, seq "
          f"{args.seq}, batch {args.batch}, {args.steps} steps, {args.dtype} autocast, "
          f"{device}", flush=True)

    torch.manual_seed(args.seed)
    init = GPT(args.vocab, args.seq, args.d_model, args.heads, args.layers, None)
    batches = make_batches(args.steps, args.batch, args.seq, args.vocab, args.seed + 1)
    runs = {}
    for name, attention in (("flashattn", flashattn_attention(args.kernel, args.deterministic)),
                            ("sdpa", sdpa_attention)):
        model = copy.deepcopy(init).to(device)
        model.set_attention(attention)
        runs[name] = train(model, batches, args.steps, args.lr, device, dtype, args.log_every,
                           name)

    ours, theirs = runs["flashattn"][0], runs["sdpa"][0]
    rel = [abs(a - b) / abs(b) for a, b in zip(ours, theirs)]
    worst = max(range(len(rel)), key=rel.__getitem__)
    ok = rel[worst] <= args.tol
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
        "command": " ".join(["bench/train_check.py"] + argv), "torch": torch.__version__,
        "config": {k: getattr(args, k) for k in ("layers", "d_model", "heads", "vocab", "seq",
                                                 "batch", "steps", "lr", "seed", "dtype",
                                                 "kernel", "deterministic", "tol")},
        "loss_flashattn": ours, "loss_sdpa": theirs, "rel_diff": rel,
        "max_rel_diff": rel[worst], "max_rel_diff_step": worst,
        "seconds": {name: r[1] for name, r in runs.items()}, "ok": ok,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"# final loss flashattn {ours[-1]:.5f}, sdpa {theirs[-1]:.5f} (first {theirs[0]:.5f}); "
          f"max relative difference {rel[worst]:.2e} at step {worst} "
          f"({'within' if ok else 'ABOVE'} {args.tol:g}); "
          f"{runs['flashattn'][1]:.1f} s vs {runs['sdpa'][1]:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
