#!/usr/bin/env python3
"""SASS check of a built library (ctest `sass_uniform_registers`): in every kernel, each uniform
register that a memory instruction takes as its descriptor (desc[URn], which carries an L2 cache
policy) or address offset ([Rn+URn]) is written by some instruction of that kernel.

Why: nvcc 13.0's ptxas once emitted, in two bf16 FP8-KV decode kernels (hd 64 and 256) of a
variant that was measured and not kept (docs/experiments/decode_e4m3_fp16_s.patch), hinted
LDGSTS whose policy register pair no instruction wrote: an illegal instruction at run time that
only a GPU run would show. CI has no GPU; this reads the SASS instead.

Usage: sass_uniform_check.py LIBRARY. Needs cuobjdump ($FLASHATTN_CUOBJDUMP, on PATH, in
$CUDA_HOME/bin, or the one scripts/install_deps.sh puts in .deps/); without one it exits 77,
which ctest reports as skipped."""
import collections
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def find_cuobjdump():
    for c in (os.environ.get("FLASHATTN_CUOBJDUMP"), shutil.which("cuobjdump"),
              os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump"),
              os.path.join(HERE, "..", ".deps", "cuobjdump", "nvidia", "cu13", "bin", "cuobjdump")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def main():
    lib = sys.argv[1]
    dump = find_cuobjdump()
    if dump is None:
        print("sass uniform-register check skipped: no cuobjdump")
        return 77
    sass = subprocess.run([dump, "-sass", lib], capture_output=True, text=True, check=True).stdout
    kernels = collections.defaultdict(list)
    key = None
    arch = "?"
    for line in sass.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.search(r"Function : (\S+)", line)
        if m:
            key = (arch, m.group(1))
        elif key:
            kernels[key].append(line)
    instr = re.compile(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)\s+([^;]*);")
    bad = 0
    for (arch, name), lines in kernels.items():
        written, read = set(), set()
        for line in lines:
            m = instr.match(line)
            if not m:
                continue
            op, args = m.groups()
            first = args.split(",")[0].strip()
            if re.fullmatch(r"UR\d+", first):
                n = int(first[2:])
                width = 4 if ".128" in op else 2 if (".64" in op or "WIDE" in op) else 1
                written.update(range(n, n + width))
            for a, b in re.findall(r"desc\[UR(\d+)\]|\+UR(\d+)\]", line):
                read.add(int(a or b))
        missing = sorted(read - written)
        if missing:
            bad += 1
            print(f"{arch} {name}: reads UR{missing} as a memory descriptor or offset, never written")
    print(f"sass uniform-register check: {len(kernels)} kernels, {bad} with unwritten registers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
