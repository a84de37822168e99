#!/usr/bin/env python3
"""Reads a Hopper-kernel timeline and says where each consumer
warpgroup's time goes: cycles between consecutive stamps, grouped by (from, to) tag pair, summed
over the traced blocks; then the first tiles of block 0 with every consumer warpgroup and the
producer interleaved on one clock.

The timeline comes from a diagnosis build (src/kernels/fa3_sm90/timeline.cuh):
  cmake -S . -B build-timeline -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_TIMELINE=ON
  cmake --build build-timeline --target flashattn-bench
  build-timeline/tools/flashattn-bench --timeline-out tl.bin --kernel k6 --hdim 128 \
      --seqlen 512 --batch 32 --heads 16 --iters 5
  python3 bench/timeline.py tl.bin [--tiles N] [--mhz 1980]
Every launch overwrites the file, so it holds the last one. The traced binary's own timings
include the copy-out after each launch: read the cycles in the file, not the bench's table.
"""
import argparse
import collections
import struct

TAGS = {1: "tile", 2: "K full", 3: "slot", 4: "S in", 5: "softmax", 6: "PV done", 8: "last PV",
        9: "epilogue", 10: "exit", 11: "begin", 12: "E:convert", 13: "E:bar1", 14: "E:staged",
        15: "E:stored", 20: "P:tile", 21: "P:kv", 22: "P:next", 23: "P:q", 24: "P:k"}
# Role 0 is the producer, then one per consumer warpgroup (three at head dim 64: timeline.cuh's
# kRoles is 4, and the file says how many roles it holds).
ROLES = ["producer", "consumer wg0", "consumer wg1", "consumer wg2"]


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    blocks, roles = struct.unpack_from("ii", data, 0)
    off = 8
    out = []
    for _ in range(blocks):
        per = []
        for _ in range(roles):
            (n,) = struct.unpack_from("i", data, off)
            off += 4
            recs = struct.unpack_from(f"{2 * n}I", data, off)
            off += 8 * n
            ev, last, hi = [], None, 0
            for i in range(n):
                tag, clk = recs[2 * i], recs[2 * i + 1]
                if last is not None and clk < last:
                    hi += 1 << 32  # the 32-bit clock wrapped
                last = clk
                ev.append((tag, clk + hi))
            per.append(ev)
        out.append(per)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--tiles", type=int, default=3, help="tiles of block 0 to print in full")
    ap.add_argument("--mhz", type=float, default=1980.0, help="SM clock, for microseconds")
    a = ap.parse_args()
    data = read(a.file)
    us = lambda c: c / a.mhz

    for role in range(1, len(data[0])):
        pairs = collections.defaultdict(lambda: [0, 0])
        total, tiles = 0, 0
        for per in data:
            ev = per[role]
            if len(ev) < 2:
                continue
            for (t0, c0), (t1, c1) in zip(ev, ev[1:]):
                pairs[(t0, t1)][0] += c1 - c0
                pairs[(t0, t1)][1] += 1
            total += ev[-1][1] - ev[0][1]
            tiles += sum(1 for t, _ in ev if t == 1)
        if total == 0:
            continue
        print(f"\n{ROLES[role]}: {len(data)} blocks, {tiles} tiles, "
              f"{us(total) / len(data):.1f} us per block, "
              f"{us(total) / max(tiles, 1):.2f} us per tile")
        print(f"{'from':>10} -> {'to':<10} {'count':>7} {'mean cyc':>9} {'share':>7}")
        for (t0, t1), (c, n) in sorted(pairs.items(), key=lambda kv: -kv[1][0]):
            print(f"{TAGS.get(t0, t0):>10} -> {TAGS.get(t1, t1):<10} {n:>7} {c / n:>9.0f} "
                  f"{100 * c / total:>6.1f}%")

    # Block 0, interleaved: the first --tiles tiles of consumer wg0.
    per = data[0]
    base = min(ev[0][1] for ev in per if ev)
    merged = sorted((c - base, r, t) for r, ev in enumerate(per) for t, c in ev)
    end_tile = None
    seen = 0
    for c, r, t in merged:
        if r == 1 and t == 1:
            seen += 1
            if seen > a.tiles:
                break
        print(f"{c:>9} cyc {us(c):>8.2f} us  {ROLES[r]:<13} {TAGS.get(t, t)}")


if __name__ == "__main__":
    main()
