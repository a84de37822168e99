#!/usr/bin/env bash
# Soft-capping's cost (issue 21): the same kernel and shape with and without --softcap 30, in one
# device call, alternated twice (A B A B) so drift shows; every record into one JSON.
# Usage (device): scripts/softcap_cost.sh BENCH_BINARY OUT.json
set -uo pipefail
bench=$1 out=$2
tmp=$(mktemp -d)
i=0
run() {  # label, then flashattn-bench arguments
  local label=$1
  shift
  for rep in 1 2; do
    for cap in 0 30; do
      i=$((i + 1))
      "$bench" "$@" --softcap $cap --json "$tmp/$(printf %03d $i)_${label}_cap${cap}_r${rep}.json" \
        | grep -E '^(k6|fa2|decode)' | sed "s/^/[$label cap$cap r$rep] /"
    done
  done
}
run k6_d128_s8k --kernel k6 --batch 2 --heads 16 --seqlen 8192 --hdim 128 --iters 30
run k6_d128_s8k_causal --kernel k6 --batch 2 --heads 16 --seqlen 8192 --hdim 128 --causal --iters 30
run k6_d128_s1k --kernel k6 --batch 16 --heads 16 --seqlen 1024 --hdim 128 --iters 30
run fa2_d128_s8k --kernel fa2 --batch 2 --heads 16 --seqlen 8192 --hdim 128 --iters 30
run fa2bwd_d128_s8k_causal --bwd --kernel fa2 --batch 2 --heads 16 --seqlen 8192 --hdim 128 --causal --iters 20
run decode_b1_16k --decode 1 --batch 1 --heads 32 --kv-heads 8 --seqlen-k 16384 --hdim 128 --page-size 16 --iters 30
python3 "$(dirname "$0")/merge_records.py" "$tmp" "$out" scripts/softcap_cost.sh
