#!/usr/bin/env bash
# Compiler launcher for the sm_90a objects (CUDA_COMPILER_LAUNCHER of flashattn_sm90): runs the
# nvcc command it is given with ptxas -v and the intermediates kept, then fails the build when
#   - ptxas spilled registers or reports wgmma serialized / setmaxnreg ignored ("Potential
#     Performance Loss"), or
#   - a tensor-core kernel instantiation (inst/k4_*..k6_*) has no wgmma.mma_async in its PTX, or a
#     warp-specialized one (k5_*, k6_*) no setmaxnreg.
# So CI, which has no GPU, still proves the Hopper kernels were built as Hopper kernels.
set -uo pipefail
src=""
for arg in "$@"; do
  case "$arg" in *.cu) src="$arg" ;; esac
done
keep=$(mktemp -d)
trap 'rm -rf "$keep"' EXIT
log=$("$@" -Xptxas=-v --keep --keep-dir "$keep" 2>&1)
rc=$?
# ptxas -v prints a resource summary per kernel; show only what is not routine.
printf '%s\n' "$log" | grep -vE '^ptxas info *: (Compiling|Function properties|Used|Compile time|[0-9]+ bytes gmem)|^ *[0-9]+ bytes stack frame' >&2
[ "$rc" -eq 0 ] || exit "$rc"
fail() {
  echo "hopper compile check: $src: $*" >&2
  exit 1
}
if grep -q "Potential Performance Loss" <<<"$log"; then
  fail "$(grep "Potential Performance Loss" <<<"$log" | head -3)"
fi
if grep -qE "[1-9][0-9]* bytes spill (stores|loads)" <<<"$log"; then
  fail "ptxas spilled registers: $(grep -E 'bytes spill' <<<"$log" | sort -u | head -3)"
fi
case "$src" in
  */inst/*.cu)
    ptx=$(ls "$keep"/*.ptx 2>/dev/null | head -1)
    [ -n "$ptx" ] || fail "no PTX was kept"
    case "$(basename "$src")" in
      k3_*) ;;  # K3 computes on CUDA cores: TMA + mbarriers only
      *) grep -q "wgmma.mma_async" "$ptx" || fail "no wgmma.mma_async in the PTX (built for sm_90a?)" ;;
    esac
    case "$(basename "$src")" in
      k5_* | k6_*) grep -q "setmaxnreg" "$ptx" || fail "no setmaxnreg in the PTX" ;;
    esac
    ;;
esac
exit 0
