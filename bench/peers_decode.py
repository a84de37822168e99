#!/usr/bin/env python3
"""PyTorch SDPA (cuDNN, FA2) on the decode grid, timed like flashattn-bench --sweep decode, in its JSON schema.

Run on the GPU machine:
    python3 bench/peers_decode.py --backends cudnn,flash --json bench/results/sdpa_decode_h100.json
    python3 bench/peers_decode.py --table ours.json peers.json   # markdown table, ratios, geomeans

One query token (batch, heads, 1, hdim) against K/V (batch, kv_heads, seqlen_k, hdim), GQA through
enable_gqa=True (as ../shared/peers.py measured PEERS.md's decode figures); a backend that refuses
GQA is run on K/V expanded to the query heads beforehand (recorded as "gqa": "expanded"; the bytes
counted stay those of the unexpanded K/V). Timing as peers_sdpa.py: warm-up, each call between its
own CUDA events, enqueued back to back, median of >= 20; inputs rotated among sets totalling
> 256 MB so the 50 MB L2 does not hold them. GB/s = K+V bytes / median time. A 1 GiB
device-to-device copy is timed in the same process (bytes read + written per second).
"""
import argparse
import datetime
import json
import math
import sys

from peers_sdpa import cpu_model, measure, sm_clock_mhz

ROTATION_BYTES, MAX_SETS = 256 << 20, 8
# (batch, heads, kv_heads, seqlen_k, hdim): flashattn-bench's decode grid without the paged rows.
GRID = [(1, 32, 8, 8192, 128), (1, 32, 8, 65536, 128), (8, 32, 8, 8192, 128),
        (32, 32, 8, 4096, 128), (64, 32, 8, 8192, 128), (128, 32, 8, 2048, 128),
        (1, 32, 8, 16384, 128), (1, 32, 8, 32768, 128), (8, 32, 8, 4096, 128),
        (8, 32, 32, 8192, 128), (1, 32, 32, 16384, 128), (8, 32, 8, 8192, 64),
        (1, 32, 8, 32768, 64)]
# The configurations of the geometric-mean bar: PEERS.md's six, 32/32 heads, head dim 64.
GEOMEAN = [(1, 32, 8, 8192, 128), (1, 32, 8, 65536, 128), (8, 32, 8, 8192, 128),
           (32, 32, 8, 4096, 128), (64, 32, 8, 8192, 128), (128, 32, 8, 2048, 128),
           (8, 32, 32, 8192, 128), (8, 32, 8, 8192, 64)]


def copy_gbps(torch):
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ts = []
    for i in range(23):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        torch.cuda.synchronize()
        if i >= 3:
            ts.append(a.elapsed_time(b))
    ts.sort()
    med = 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
    return 2 * 2**30 / (med * 1e-3) / 1e9


def run_peers(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    torch.manual_seed(0)
    out = {"device": torch.cuda.get_device_name(0), "sm_clock_mhz": sm_clock_mhz(torch),
           "host": cpu_model(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": " ".join(sys.argv), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "records": []}
    out["copy_gbps"] = copy_gbps(torch)
    print(f"# device: {out['device']}, torch {out['torch']}, cudnn {out['cudnn']}; "
          f"D2D copy {out['copy_gbps']:.0f} GB/s (read+write)", flush=True)
    print(f"{'kernel':<12} {'b':>4} {'hq':>4} {'hkv':>4} {'sk':>7} {'d':>4} {'ms':>9} {'GB/s':>7} "
          f"{'%copy':>6} gqa", flush=True)
    for be in args.backends:
        for (b, hq, hkv, sk, d) in GRID:
            kv_bytes = 2 * b * hkv * sk * d * 2
            rec = {"kernel": f"sdpa_{be}", "mode": "decode", "dtype": args.dtype, "batch": b,
                   "heads": hq, "kv_heads": hkv, "seqlen_q": 1, "seqlen_k": sk, "hdim": d,
                   "hdim_v": d, "causal": False, "window": [-1, -1], "ms": None, "ms_min": None,
                   "iters": 0, "tflops": None, "flops": 4.0 * b * hq * sk * d,
                   "bytes": kv_bytes, "gbps": None, "copy_gbps": out["copy_gbps"], "ok": False}
            sets = []
            try:
                set_bytes = kv_bytes + 2 * b * hq * d * 2
                nsets = max(1, min(MAX_SETS, -(-ROTATION_BYTES // set_bytes)))
                sets = [(torch.randn(b, hq, 1, d, device="cuda", dtype=dtype),
                         torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype),
                         torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype)) for _ in range(nsets)]
                gqa = hq != hkv

                def call(i, expand=False):
                    q, k, v = sets[i]
                    with sdpa_kernel([backends[be]]):
                        if gqa and not expand:
                            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                        return F.scaled_dot_product_attention(q, k, v)

                mode = "enable_gqa" if gqa else "none"
                try:
                    call(0)
                    torch.cuda.synchronize()
                except Exception:
                    if not gqa:
                        raise
                    mode = "expanded"
                    sets = [(q, k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1))
                            for q, k, v in sets]
                fn = (lambda i: call(i, expand=True)) if mode == "expanded" else call
                ms, ms_min, iters = measure(torch, fn, nsets, args.iters, args.warmup)
                rec.update(ms=ms, ms_min=ms_min, iters=iters, gbps=kv_bytes / (ms * 1e-3) / 1e9,
                           tflops=rec["flops"] / (ms * 1e-3) / 1e12, gqa=mode, ok=True)
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            finally:
                sets = None
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            out["records"].append(rec)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(out, f, indent=1)
            if rec["ok"]:
                print(f"{rec['kernel']:<12} {b:>4} {hq:>4} {hkv:>4} {sk:>7} {d:>4} {rec['ms']:>9.4f} "
                      f"{rec['gbps']:>7.0f} {100 * rec['gbps'] / out['copy_gbps']:>5.1f}% {rec['gqa']}",
                      flush=True)
            else:
                print(f"{rec['kernel']:<12} {b:>4} {hq:>4} {hkv:>4} {sk:>7} {d:>4} ERR {rec['error']}",
                      flush=True)
    return 0


def table(paths):
    """Markdown: one row per contiguous decode config, GB/s per kernel, ratio to cuDNN, geomeans."""
    rows, kernels, copies = {}, [], {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for r in doc["records"]:
            if r.get("page_size", 0) or r.get("seqlen_q", 1) != 1:
                continue
            key = (r["batch"], r["heads"], r["kv_heads"], r["seqlen_k"], r["hdim"])
            if r["kernel"] not in kernels:
                kernels.append(r["kernel"])
            rows.setdefault(key, {})[r["kernel"]] = r["gbps"] if r.get("ok") else None
            copies[r["kernel"]] = r.get("copy_gbps") or doc.get("copy_gbps")
    print("| batch | heads q/kv | KV length | hdim | " + " | ".join(f"{k} GB/s" for k in kernels)
          + " | decode % of copy | decode / sdpa_cudnn |")
    print("|" + "---|" * (len(kernels) + 6))
    ratios, in_bar = [], []
    for key in sorted(rows, key=lambda k: (k[4], k[2] != 8, k[0], k[3])):
        b, hq, hkv, sk, d = key
        got = rows[key]
        ours, cudnn = got.get("decode"), got.get("sdpa_cudnn")
        pct = f"{100 * ours / copies['decode']:.1f}%" if ours and copies.get("decode") else "-"
        ratio = ours / cudnn if ours and cudnn else None
        if ratio:
            ratios.append(ratio)
            if key in GEOMEAN:
                in_bar.append(ratio)
        cells = " | ".join(f"{got[k]:.0f}" if got.get(k) else "-" for k in kernels)
        print(f"| {b} | {hq}/{hkv} | {sk} | {d} | {cells} | {pct} | "
              f"{f'{ratio:.2f}' if ratio else '-'} |")
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
    print(f"\nGeometric mean decode / sdpa_cudnn: {gm(in_bar):.2f} over the {len(in_bar)} configs of "
          f"the bar (PEERS.md's six, 32/32 heads, hdim 64); {gm(ratios):.2f} over all {len(ratios)}.")
    print("Copy rates in the runs: " + ", ".join(f"{k} {v:.0f} GB/s" for k, v in copies.items() if v))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="cudnn,flash")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json")
    p.add_argument("--table", nargs="+", metavar="JSON", help="print the markdown table and exit")
    a = p.parse_args(argv)
    if a.table:
        table(a.table)
        return 0
    a.backends = [x for x in a.backends.split(",") if x]
    return run_peers(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
