#!/usr/bin/env bash
# A/B of two builds of the k6 backward in one device call: .devbin-a/bin.tar.xz (A, a copy of an
# earlier scripts/stage_device.sh output) against .devbin/bin.tar.xz (B), both carried. First B's
# k6 backward gtests and memcheck/racecheck at d 128/256 (SKIP_CHECKS=1 skips them), then A and B
# interleaved on six configs (d 64/128/256; 2k dense, 8k causal) -> $OUT/ab_{A,B}.jsonl.
# Usage (device): bash scripts/bwd_ab.sh
set -uo pipefail
A=/tmp/fa_a; B=/tmp/fa_b; mkdir -p $A $B
tar -C $A -xJf .devbin-a/bin.tar.xz; tar -C $B -xJf .devbin/bin.tar.xz
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee -a $S
[ "${SKIP_CHECKS:-0}" = 1 ] || timeout 90 $B/flashattn_gpu_tests --gtest_brief=1 \
  --gtest_filter='Grid/GpuBackward.*k6*:GpuBackwardEdges.*:GpuBackwardDeterminism.*:GpuBackwardValidation.*' \
  > $OUT/gtests.log 2>&1; echo "gtest rc=$?" | tee -a $S; tail -3 $OUT/gtests.log | tee -a $S
[ "${SKIP_CHECKS:-0}" = 1 ] || for tool in memcheck racecheck; do for d in 128 256; do
  timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 $B/flashattn-bench --bwd --kernel k6 \
    --batch 2 --heads 4 --kv-heads 2 --seqlen-q 113 --seqlen-k 203 --hdim $d --causal --sinks \
    --iters 1 --warmup 0 > $OUT/san.log 2>&1; echo "$tool d$d rc=$? $(grep -h SUMMARY $OUT/san.log)" | tee -a $S
done; done
for cfg in "64 2048 8 16" "64 8192 2 32 --causal" "128 2048 8 16" "128 8192 2 16 --causal" "256 2048 8 8" "256 8192 2 8 --causal"; do
  set -- $cfg
  for v in A B; do
    dir=$A; [ $v = B ] && dir=$B
    timeout 40 $dir/flashattn-bench --bwd --kernel k6 --hdim $1 --seqlen $2 --batch $3 --heads $4 ${5:-} \
      --json $OUT/ab_$v.json.part > /dev/null 2>&1
    python3 - "$OUT/ab_$v.json.part" "$OUT/ab_$v.jsonl" "$v" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); recs = d["records"] if isinstance(d, dict) else d
with open(sys.argv[2], "a") as f:
    for r in recs:
        r["build"] = sys.argv[3]; f.write(json.dumps(r) + "\n")
        print(sys.argv[3], r["hdim"], r["seqlen_q"], r["causal"], round(r["tflops"], 1))
PY
  done
done 2>&1 | tee -a $S
rm -f $OUT/*.part
