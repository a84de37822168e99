#!/usr/bin/env python3
"""Geometric means of a ratio A/B from bench/results JSON files, to three decimals: over the whole
standard grid, per head dim, and per (head dim, causal). docs/PERF.md quotes its output where the
passes give no such figure. Plain Python, no GPU. Usage:
    python3 docs/perf/geomeans.py OURS.json PEER.json [...] --ratio k6/sdpa_cudnn
Files are read in order; a later record of the same (kernel, hdim, seqlen, causal) replaces an
earlier one (as bench/perf_table.py does).
"""
import argparse
import json
import math


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ratio", required=True, help="A/B, kernel names as in the records")
    args = ap.parse_args()
    a, b = args.ratio.split("/")
    tflops = {}
    for path in args.files:
        with open(path) as f:
            for r in json.load(f)["records"]:
                if r.get("ok") and not r.get("skipped"):
                    tflops[(r["kernel"], r["hdim"], r["seqlen_q"], bool(r["causal"]))] = r["tflops"]
    ratios = {k[1:]: v / tflops[(b,) + k[1:]] for k, v in tflops.items()
              if k[0] == a and (b,) + k[1:] in tflops}

    def gm(keys):
        keys = list(keys)
        if not keys:
            return float("nan"), 0
        return math.exp(sum(math.log(ratios[k]) for k in keys) / len(keys)), len(keys)

    print(f"{a}/{b}: {gm(ratios)[0]:.3f} over {len(ratios)} configurations")
    for d in sorted({k[0] for k in ratios}):
        line = f"  hdim {d}: {gm(k for k in ratios if k[0] == d)[0]:.3f}"
        for causal in (False, True):
            g, n = gm(k for k in ratios if k[0] == d and k[2] == causal)
            line += f"   {'causal' if causal else 'dense'} {g:.3f} ({n})"
        print(line)


if __name__ == "__main__":
    main()
