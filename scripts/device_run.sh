#!/usr/bin/env bash
# One call on the lent GPU: runs the steps named as arguments, logging under $OUT (at most 8 files
# come back). Binaries come prebuilt and packed in .devbin/bin.tar.xz (scripts/stage_device.sh);
# the Python steps load the package from python/ over the carried libflashattn_c.so.
#   tests              GPU test suite (whole grid; the CPU suites run in CI)
#   gtest:FILTER       the GPU test suite filtered (gtest --gtest_filter=FILTER)
#   sanitize           compute-sanitizer memcheck/racecheck/synccheck on small shapes of each family
#                      ($SANITIZE_KERNELS, default below; the Hopper ones need an sm_90 device) at
#                      each head dim of $SANITIZE_HDIMS (default 128)
#   bench:ARGS         flashattn-bench with ARGS ('+' stands for a space) -> bench.log
#   sweep:K1,K2,...    flashattn-bench --sweep standard for those kernels -> sweep.json
#   peers:BACKENDS     bench/peers_sdpa.py on the standard grid -> peers.json
#   cpu:MAXSEQ         the CPU backend on the standard grid up to MAXSEQ -> cpu.json
#   python             pytest tests/python against the carried library
#   sanitize-bwd       compute-sanitizer memcheck/racecheck/synccheck on the backward families
#                      ($SANITIZE_BWD_KERNELS, default fa2 k6; deterministic too) at each head dim
#                      of $SANITIZE_HDIMS (default 64 128 256)
#   peers-bwd:BACKENDS bench/peers_sdpa.py --bwd on the standard grid -> peers_bwd.json
#   train              bench/train_check.py: 300 training steps, flashattn vs SDPA -> train_check.json
#   compare            bench/compare.py: our kernels and SDPA backends -> compare.{json,png,md}
set -uo pipefail
OUT=${OUT:-/tmp/flashattn_out}
mkdir -p "$OUT"
B=/tmp/flashattn_bin
mkdir -p "$B" && tar -C "$B" -xJf .devbin/bin.tar.xz
export FLASHATTN_LIBRARY=$B/libflashattn_c.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv \
  | tee -a "$OUT/summary.txt"
for step in "$@"; do
  case "$step" in
    tests)
      log "gpu tests"
      $B/flashattn_gpu_tests --gtest_brief=1 2>&1 | tee "$OUT/tests.log" | tail -5 | tee -a "$OUT/summary.txt"
      ;;
    sanitize)
      log "compute-sanitizer"
      for tool in memcheck racecheck synccheck; do
        for k in ${SANITIZE_KERNELS:-k1 k2 fa2 k3 k4 k5 k6}; do
          for d in ${SANITIZE_HDIMS:-128}; do
            compute-sanitizer --tool $tool --error-exitcode 9 $B/flashattn-bench --kernel $k \
              --batch 1 --heads 2 --kv-heads 1 --seqlen-q 113 --seqlen-k 203 --hdim $d --causal \
              --iters 1 --warmup 0 >> "$OUT/sanitize.log" 2>&1
            echo "$tool $k d$d rc=$?" | tee -a "$OUT/summary.txt"
          done
        done
      done
      ;;
    gtest:*)
      log "gpu tests, filter ${step#gtest:}"
      $B/flashattn_gpu_tests --gtest_brief=1 --gtest_filter="${step#gtest:}" 2>&1 \
        | tee -a "$OUT/tests.log" | tail -8 | tee -a "$OUT/summary.txt"
      ;;
    bench:*)
      log "flashattn-bench ${step#bench:}"
      args=$(echo "${step#bench:}" | tr '+' ' ')
      # shellcheck disable=SC2086
      $B/flashattn-bench $args 2>&1 | tee -a "$OUT/bench.log" | tail -20
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
    sanitize-bwd)
      log "compute-sanitizer, backward"
      for tool in memcheck racecheck synccheck; do
        for k in ${SANITIZE_BWD_KERNELS:-fa2 k6}; do
          for d in ${SANITIZE_HDIMS:-64 128 256}; do
            for det in "" --deterministic; do
              compute-sanitizer --tool $tool --error-exitcode 9 $B/flashattn-bench --bwd $det \
                --kernel $k --batch 2 --heads 4 --kv-heads 2 --seqlen-q 113 --seqlen-k 203 \
                --hdim $d --causal --sinks --iters 1 --warmup 0 >> "$OUT/sanitize.log" 2>&1
              echo "$tool $k bwd d$d ${det:-nondet} rc=$?" | tee -a "$OUT/summary.txt"
            done
          done
        done
      done
      ;;
    peers-bwd:*)
      log "peers backward ${step#peers-bwd:}"
      PYTHONUNBUFFERED=1 python3 bench/peers_sdpa.py --bwd --backends "${step#peers-bwd:}" \
        --json "$OUT/peers_bwd.json" 2>&1 | tee "$OUT/peers_bwd.log" | tail -45
      ;;
    train)
      log "training check: flashattn vs SDPA, 300 steps"
      python3 bench/train_check.py --json "$OUT/train_check.json" > "$OUT/train.log" 2>&1
      echo "train_check rc=$?" | tee -a "$OUT/summary.txt"
      tail -8 "$OUT/train.log"
      ;;
    python)
      log "python package: pytest"
      python3 -c "import torch,flashattn;print(torch.__version__,torch.cuda.get_device_name(),flashattn.built_kernels())" \
        | tee -a "$OUT/summary.txt"
      timeout 300 python3 -m pytest tests/python -q -rs > "$OUT/pytest.log" 2>&1
      echo "pytest rc=$?" | tee -a "$OUT/summary.txt"
      tail -15 "$OUT/pytest.log"
      ;;
    compare)
      log "bench/compare.py (our kernels and SDPA, one process)"
      python3 bench/compare.py --json "$OUT/compare.json" \
        --plot "$OUT/compare.png" --markdown "$OUT/compare.md" > "$OUT/compare.log" 2>&1
      echo "compare rc=$?" | tee -a "$OUT/summary.txt"
      tail -50 "$OUT/compare.log"
      ;;
    *) echo "unknown step $step" ;;
  esac
done
