#!/usr/bin/env python3
"""Markdown table of TFLOP/s from bench/results JSON files (flashattn-bench or peers_sdpa.py).

One row per standard-grid configuration (hdim, seqlen, causal), one column per kernel, and
optional ratio columns `A/B`. Usage:
    bench/perf_table.py results1.json results2.json ... [--ratio k2/k1 --ratio k2/sdpa_math]
--mode fwd|bwd keeps the records of one pass (peers_sdpa.py --bwd writes mode "bwd"; a record
without `mode` is a forward one).
"""
import argparse
import json
import math


def load(paths, mode=None):
    rows = {}
    kernels = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for r in doc["records"]:
            if r.get("skipped") or (mode and r.get("mode", "fwd") != mode):
                continue
            key = (r["hdim"], r["seqlen_q"], bool(r["causal"]))
            name = r["kernel"]
            if name not in kernels:
                kernels.append(name)
            rows.setdefault(key, {})[name] = r["tflops"] if r.get("ok") else None
    return rows, kernels


def fmt(tflops):
    return f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}"


def markdown(rows, kernels, ratios):
    """The table as markdown lines, then one geometric-mean line per ratio (A, B)."""
    head = ["hdim", "seqlen", "causal"] + kernels + [f"{a}/{b}" for a, b in ratios]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    logs = {r: [] for r in ratios}
    for key in sorted(rows):
        vals = rows[key]
        cells = [str(key[0]), str(key[1]), "yes" if key[2] else "no"]
        cells += [fmt(vals[k]) if vals.get(k) else "-" for k in kernels]
        for a, b in ratios:
            if vals.get(a) and vals.get(b):
                x = vals[a] / vals[b]
                logs[(a, b)].append(math.log(x))
                cells.append(f"{x:.2f}")
            else:
                cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    for (a, b), l in logs.items():
        if l:
            lines.append(f"\nGeometric mean {a}/{b} over {len(l)} configurations: "
                         f"{math.exp(sum(l) / len(l)):.2f}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ratio", action="append", default=[], help="A/B column, kernel names")
    ap.add_argument("--mode", choices=("fwd", "bwd"), help="only the records of this pass")
    args = ap.parse_args()
    rows, kernels = load(args.files, args.mode)
    print("\n".join(markdown(rows, kernels, [tuple(r.split("/")) for r in args.ratio])))


if __name__ == "__main__":
    main()
