#!/usr/bin/env bash
# A/B/... of builds of the k6 backward in one device call. Each NAME given is a build whose
# flashattn-bench is in .devbin-NAME/bin.tar.xz (a copy of a scripts/stage_device.sh output, or a
# tarball of flashattn-bench alone), all carried. First the checks, on the full build in .devbin
# (SKIP_CHECKS=1 skips them): its k6 backward gtests, then memcheck/racecheck/synccheck
# (deterministic and not) at each head dim of $CHECK_HDIMS (default 128 256). Then every build on
# each configuration of $CONFIGS (default below: "hdim seqlen batch heads [flags]" separated by
# ';'), the builds' order reversed on every other configuration so that drift favours none ->
# $OUT/ab.jsonl (each record's "build" names it) and a table in $OUT/summary.txt. NAME@FLAG runs
# build NAME with one more flashattn-bench flag (e.g. pers@--no-persistent), a variant of its own.
# Usage (device): bash scripts/bwd_ab.sh a b [c ...]
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: bwd_ab.sh NAME NAME [NAME ...]"; exit 2; }
S=$OUT/summary.txt
BUILDS="$*"
for v in "$@"; do b=${v%%@*}; [ -d /tmp/fa_$b ] || { mkdir -p /tmp/fa_$b && tar -C /tmp/fa_$b -xJf .devbin-$b/bin.tar.xz; }; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee -a $S
if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  C=/tmp/fa_check; mkdir -p $C && tar -C $C -xJf .devbin/bin.tar.xz
  timeout 120 $C/flashattn_gpu_tests --gtest_brief=1 \
    --gtest_filter='Grid/GpuBackward.*k6*:GpuBackwardEdges.*:GpuBackwardDeterminism.*:GpuBackwardValidation.*' \
    > $OUT/gtests.log 2>&1; echo "gtest rc=$?" | tee -a $S; tail -3 $OUT/gtests.log | tee -a $S
  for tool in memcheck racecheck synccheck; do for d in ${CHECK_HDIMS:-128 256}; do for det in "" --deterministic; do
    timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 $C/flashattn-bench --bwd --kernel k6 \
      --batch 2 --heads 4 --kv-heads 2 --seqlen-q 113 --seqlen-k 203 --hdim $d --causal --sinks $det \
      --iters 1 --warmup 0 > $OUT/san.log 2>&1
    rc=$?; echo "$tool d$d $det rc=$rc $(grep -h SUMMARY $OUT/san.log)" | tee -a $S
    [ $rc = 0 ] || [ -e $OUT/san_fail.log ] || cp $OUT/san.log $OUT/san_fail.log  # the first failure
  done; done; done
fi
CONFIGS=${CONFIGS:-"64 2048 8 16;64 8192 2 32 --causal;128 2048 8 16;128 8192 2 16 --causal;256 2048 8 8;256 8192 2 8 --causal"}
IFS=';' read -ra cfgs <<< "$CONFIGS"
n=0
for cfg in "${cfgs[@]}"; do
  # shellcheck disable=SC2086
  set -- $cfg
  d=$1 s=$2 b=$3 h=$4; shift 4
  n=$((n + 1))
  order=$BUILDS
  ((n % 2)) || order=$(echo "$BUILDS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for v in $order; do
    rm -f $OUT/ab.json.part
    extra=; [ "${v#*@}" != "$v" ] && extra=${v#*@}
    # shellcheck disable=SC2068,SC2086
    timeout 60 /tmp/fa_${v%%@*}/flashattn-bench --bwd --kernel k6 --hdim $d --seqlen $s --batch $b \
      --heads $h $@ $extra --json $OUT/ab.json.part > /dev/null 2>&1
    python3 - "$OUT/ab.json.part" "$OUT/ab.jsonl" "$v" "$*" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); recs = d["records"] if isinstance(d, dict) else d
with open(sys.argv[2], "a") as f:
    for r in recs:
        r["build"] = sys.argv[3]; r["flags"] = sys.argv[4]; f.write(json.dumps(r) + "\n")
        print(sys.argv[3], r["hdim"], r["seqlen_q"], sys.argv[4] or "-", round(r["tflops"], 1))
PY
  done
done 2>&1 | tee -a $S
rm -f $OUT/*.part
