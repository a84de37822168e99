#!/usr/bin/env python3
"""One call from 16-bit tensors, as a user makes it: flash_attn_func(q, k, v, causal, fp8=MODE) for
MODE in per_tensor (torch's per-(batch, KV head) amax quantisation, then K7), per_block and
per_block_hadamard (the library's pre-pass, then K8), and None (bf16 on K6), on the standard grid.
Every mode's time includes its own quantisation: the comparison issue 17's "K8 end to end >= 0.9x
K7" leaves open (flashattn-bench times K7 on inputs quantised beforehand, on the host).

Timing as bench/peers_sdpa.py (its `measure`: warm-up, each call between its own CUDA events,
median), input sets rotated (> 256 MB). Run on the GPU with the library carried:
    FLASHATTN_LIBRARY=.../libflashattn_c.so PYTHONPATH=python python3 bench/k8_e2e.py --json OUT.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_sdpa  # noqa: E402  (measure, the grid)

MODES = (None, "per_tensor", "per_block", "per_block_hadamard")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", required=True)
    p.add_argument("--hdims", type=peers_sdpa.int_list, default=list(peers_sdpa.HDIMS))
    p.add_argument("--seqlens", type=peers_sdpa.int_list, default=list(peers_sdpa.SEQLENS))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args(argv)
    import torch
    from flashattn import flash_attn_func

    records = []
    for d in a.hdims:
        for s in a.seqlens:
            b, h = peers_sdpa.TOKENS // s, peers_sdpa.HIDDEN // d
            set_bytes = 3 * b * s * h * d * 2
            nsets = max(2, min(8, -(-(256 << 20) // set_bytes)))
            sets = [[torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                     for _ in range(3)] for _ in range(nsets)]
            for causal in (False, True):
                flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
                for mode in MODES:
                    def run(i):
                        q, k, v = sets[i]
                        flash_attn_func(q, k, v, causal=causal, fp8=mode)
                    ms, ms_min, iters = peers_sdpa.measure(torch, run, nsets, a.iters, a.warmup)
                    name = mode or "bf16"
                    records.append(dict(kernel="flash_attn_func", fp8=name, dtype="bf16",
                                        batch=b, heads=h, kv_heads=h, seqlen_q=s, seqlen_k=s,
                                        hdim=d, hdim_v=d, causal=causal, ms=ms, ms_min=ms_min,
                                        iters=iters, tflops=flops / ms / 1e9, flops=flops))
                    print(f"hd{d} s{s}{' causal' if causal else ''} {name}: {ms:.4f} ms "
                          f"{flops / ms / 1e9:.1f} TFLOP/s", flush=True)
            del sets
    with open(a.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "note": "each mode's time includes "
                   "its quantisation from bf16 (flash_attn_func(..., fp8=mode))",
                   "records": records}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
