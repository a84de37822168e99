#!/usr/bin/env bash
# Paged KV in prefill, its cost (issue 21): the same variable-length forward with contiguous
# packed k/v (--varlen) and with k/v in a paged cache read through a shuffled block table
# (--page-size N), in one device call, alternated twice (A B A B) so drift shows; every record
# into one JSON. The paged call first gathers the keys and values into library workspace (one
# extra read and write of them), so the gap should be about that copy's time.
# Usage (device): scripts/paged_cost.sh BENCH_BINARY OUT.json
set -uo pipefail
bench=$1 out=$2
tmp=$(mktemp -d)
i=0
run() {  # label, then flashattn-bench arguments
  local label=$1
  shift
  for rep in 1 2; do
    for page in 0 16 256; do
      i=$((i + 1))
      local mode=(--varlen)
      [ "$page" -gt 0 ] && mode=(--page-size "$page")
      "$bench" "$@" "${mode[@]}" --json "$tmp/$(printf %03d $i)_${label}_page${page}_r${rep}.json" \
        | grep -E '^(k6|fa2)' | sed "s/^/[$label page$page r$rep] /"
    done
  done
}
run k6_d128_s8k --kernel k6 --batch 2 --heads 32 --kv-heads 8 --seqlen 8192 --hdim 128 --iters 30
run k6_d128_s8k_causal --kernel k6 --batch 2 --heads 32 --kv-heads 8 --seqlen 8192 --hdim 128 --causal --iters 30
run k6_d128_s1k_causal --kernel k6 --batch 16 --heads 32 --kv-heads 8 --seqlen 1024 --hdim 128 --causal --iters 30
run k6_d128_chunk512_of_8k --kernel k6 --batch 4 --heads 32 --kv-heads 8 --seqlen-q 512 --seqlen-k 8192 --hdim 128 --causal --iters 30
run k6_d64_s4k --kernel k6 --batch 4 --heads 32 --kv-heads 32 --seqlen 4096 --hdim 64 --iters 30
run fa2_d128_s8k_causal --kernel fa2 --batch 2 --heads 32 --kv-heads 8 --seqlen 8192 --hdim 128 --causal --iters 30
# Page size 1 (a gather row per token: the worst case for the copy's addressing), once.
for page in 0 1; do
  i=$((i + 1))
  mode=(--varlen)
  [ "$page" -gt 0 ] && mode=(--page-size "$page")
  "$bench" --kernel k6 --batch 2 --heads 32 --kv-heads 8 --seqlen 8192 --hdim 128 --causal \
    --iters 30 "${mode[@]}" --json "$tmp/$(printf %03d $i)_k6_page1_check_page${page}_r1.json" \
    | grep -E '^k6' | sed "s/^/[page$page] /"
done
python3 "$(dirname "$0")/merge_records.py" "$tmp" "$out" scripts/paged_cost.sh
python3 - "$out" <<'PY'
import json, sys
merged = json.load(open(sys.argv[1]))
# Paged over contiguous, per label and repetition.
import re
ms = {rec["label"]: rec["ms"] for rec in merged["records"]}
for label, t in sorted(ms.items()):
    base = ms.get(re.sub(r"_page\d+_", "_page0_", label))
    if "_page0_" not in label and t and base:
        print(f"{label}: {t:.3f} ms vs {base:.3f} ms contiguous ({(t / base - 1) * 100:+.1f}%)")
PY
