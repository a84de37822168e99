#!/usr/bin/env python3
"""Executed warp instructions per SASS opcode of two kernels, from ncu's source page as CSV
(`ncu --import R.ncu-rep --page source --csv --print-source sass > A.csv`, a report taken with
`--section SourceCounters`), side by side: the difference in % of the first kernel's total, and
each opcode's share of the warp-stall samples. Plain Python, no GPU.
Usage: python3 bench/ncu_opcodes.py A.csv B.csv [--names a,b] [--top 40]
"""
import argparse
import collections
import csv
import re


def load(path):
    rows = list(csv.reader(open(path)))
    hdr = rows[1]
    i_src, i_ex = hdr.index("Source"), hdr.index("Instructions Executed")
    i_smp = hdr.index("Warp Stall Sampling (All Samples)")
    executed, samples = collections.Counter(), collections.Counter()
    static = 0
    for r in rows[2:]:
        if len(r) <= i_ex:
            continue
        static += 1
        op = re.sub(r"^@!?U?P\w+\s+", "", r[i_src].strip()).split(" ")[0].split(".")[0]
        executed[op] += int(r[i_ex].replace(",", "") or 0)
        samples[op] += int(r[i_smp].replace(",", "") or 0)
    return executed, samples, static


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--names", default="a,b")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    na, nb = args.names.split(",")
    (ea, sa, ta), (eb, sb, tb) = load(args.a), load(args.b)
    tot_a, tot_b = sum(ea.values()), sum(eb.values())
    smp_a, smp_b = sum(sa.values()), sum(sb.values())
    print(f"{na}: {tot_a} warp instructions executed, {ta} static; {nb}: {tot_b}, {tb} static")
    print(f"{'opcode':12s} {na:>12s} {nb:>12s} {nb + '-' + na:>9s} | samples {na:>6s} {nb:>6s}")
    for op in sorted(set(ea) | set(eb), key=lambda k: -(ea[k] + eb[k]))[:args.top]:
        print(f"{op:12s} {ea[op]:12d} {eb[op]:12d} {100.0 * (eb[op] - ea[op]) / tot_a:+8.2f}% |"
              f" {100.0 * sa[op] / max(smp_a, 1):13.1f}% {100.0 * sb[op] / max(smp_b, 1):5.1f}%")


if __name__ == "__main__":
    main()
