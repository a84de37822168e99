#!/usr/bin/env bash
# One call on the lent GPU: runs the steps named as arguments, logging under $OUT (at most 8 files
# come back). Binaries come prebuilt in .devbin/ (scripts/stage_device.sh).
#   tests              GPU test suite (whole grid), then the CPU suite
#   sanitize           compute-sanitizer memcheck/racecheck/synccheck on small shapes of each family
#   sweep:K1,K2,...    flashattn-bench --sweep standard for those kernels -> sweep.json
#   peers:BACKENDS     bench/peers_sdpa.py on the standard grid -> peers.json
#   cpu:MAXSEQ         the CPU backend on the standard grid up to MAXSEQ -> cpu.json
set -uo pipefail
OUT=${OUT:-/tmp/flashattn_out}
mkdir -p "$OUT"
B=.devbin
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv \
  | tee -a "$OUT/summary.txt"
for step in "$@"; do
  case "$step" in
    tests)
      log "gpu tests"
      $B/flashattn_gpu_tests --gtest_brief=1 2>&1 | tee "$OUT/tests.log" | tail -5 | tee -a "$OUT/summary.txt"
      $B/flashattn_cpu_tests --gtest_brief=1 2>&1 | tail -3 | tee -a "$OUT/summary.txt"
      ;;
    sanitize)
      log "compute-sanitizer"
      for tool in memcheck racecheck synccheck; do
        for k in k1 k2; do
          compute-sanitizer --tool $tool --error-exitcode 9 $B/flashattn-bench --kernel $k --batch 1 \
            --heads 2 --kv-heads 1 --seqlen-q 113 --seqlen-k 203 --hdim 128 --causal --iters 1 \
            --warmup 0 >> "$OUT/sanitize.log" 2>&1
          echo "$tool $k rc=$?" | tee -a "$OUT/summary.txt"
        done
      done
      ;;
    sweep:*)
      log "sweep ${step#sweep:}"
      $B/flashattn-bench --kernel "${step#sweep:}" --sweep standard --json "$OUT/sweep.json" \
        2>"$OUT/sweep.err" | tee "$OUT/sweep.log" | tail -80
      ;;
    peers:*)
      log "peers ${step#peers:}"
      PYTHONUNBUFFERED=1 python3 bench/peers_sdpa.py --backends "${step#peers:}" \
        --json "$OUT/peers.json" 2>&1 | tee "$OUT/peers.log" | tail -45
      ;;
    cpu:*)
      log "cpu sweep up to ${step#cpu:}"
      $B/flashattn-bench --kernel cpu --sweep standard --max-seqlen "${step#cpu:}" --iters 3 \
        --json "$OUT/cpu.json" 2>/dev/null | tail -40
      ;;
    *) echo "unknown step $step" ;;
  esac
done
