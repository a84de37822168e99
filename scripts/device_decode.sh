#!/usr/bin/env bash
# One call on the lent GPU for the decode family (binaries prebuilt into .devbin-decode/):
#   tests      the decode GPU tests (gtest filter *Decode*) and the CPU decode tests
#   sanitize   compute-sanitizer memcheck/racecheck/synccheck on small paged and split decodes
#   bench      flashattn-bench --sweep decode -> decode.json, plus two --check runs
#   peers      bench/peers_decode.py (SDPA cuDNN and FA2) -> peers.json, then the markdown table
# Logs and JSON go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/flashattn_decode_out}
mkdir -p "$OUT"
B=.devbin-decode
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu \
  --format=csv | tee -a "$OUT/summary.txt"
for step in "$@"; do
  case "$step" in
    tests)
      log "decode gpu tests"
      $B/flashattn_gpu_tests --gtest_filter='*Decode*' --gtest_brief=1 > "$OUT/tests.log" 2>&1
      echo "gpu tests rc=$?" | tee -a "$OUT/summary.txt"
      grep -E "FAILED|PASSED|seed|Failure|error" "$OUT/tests.log" | head -40 | tee -a "$OUT/summary.txt"
      $B/flashattn_cpu_tests --gtest_filter='Decode*:*Decode*' --gtest_brief=1 2>&1 | tail -3 \
        | tee -a "$OUT/summary.txt"
      ;;
    sanitize)
      log "compute-sanitizer"
      for tool in memcheck racecheck synccheck; do
        for args in "--page-size 16 --splits 3" "--page-size 1" "--splits 1"; do
          compute-sanitizer --tool $tool --error-exitcode 9 $B/flashattn-bench --decode 3 \
            --batch 2 --heads 8 --kv-heads 2 --seqlen-k 301 --hdim 128 --causal $args --iters 1 \
            --warmup 0 >> "$OUT/sanitize.log" 2>&1
          echo "$tool [$args] rc=$?" | tee -a "$OUT/summary.txt"
        done
      done
      ;;
    bench)
      log "flashattn-bench --sweep decode"
      $B/flashattn-bench --sweep decode --iters 30 --json "$OUT/decode.json" 2>&1 \
        | tee "$OUT/bench.log"
      log "flashattn-bench --decode --check"
      for args in "--batch 8 --seqlen-k 8192 --page-size 16" "--batch 1 --seqlen-k 16384"; do
        $B/flashattn-bench --decode 1 --heads 32 --kv-heads 8 --hdim 128 $args --iters 5 \
          --check 2>&1 | tail -3 | tee -a "$OUT/summary.txt"
      done
      ;;
    peers)
      log "peers_decode.py"
      PYTHONUNBUFFERED=1 python3 bench/peers_decode.py --backends cudnn,flash --iters 30 \
        --json "$OUT/peers.json" 2>&1 | tee "$OUT/peers.log"
      python3 bench/peers_decode.py --table "$OUT/decode.json" "$OUT/peers.json" \
        | tee "$OUT/table.md"
      ;;
    *) echo "unknown step $step" ;;
  esac
done
