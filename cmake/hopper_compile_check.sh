#!/usr/bin/env bash
# Compiler launcher for the sm_90a objects (CUDA_COMPILER_LAUNCHER of flashattn_sm90): runs the
# nvcc command it is given with ptxas -v and the intermediates kept, then fails the build when
#   - ptxas spilled registers or reports wgmma serialized / setmaxnreg ignored ("Potential
#     Performance Loss"), or
#   - a tensor-core kernel instantiation (inst/k4_*..k8_*, bwd_sm90_*) has no wgmma.mma_async in
#     its PTX, or a warp-specialized one (k5_*, k6_*, k7_*, k8_*, bwd_sm90_*) no setmaxnreg, or
#   - in a K6, K7 or K8 (FP8) object, the softmax is not between the mainloop's two wgmma waits (no MUFU.EX2
#     between `WARPGROUP.DEPBAR.LE gsb0, 0x1` and the next `0x0`): ptxas once hoisted P·V's wait
#     above the softmax in every K6 kernel and the intra-warpgroup overlap was silently lost, or
#     any of their wgmma's has N <= 16 (a tile N CuTe split into small atoms: d 192's Q·Kᵀ). This
#     check reads the SASS, so it needs cuobjdump ($FLASHATTN_CUOBJDUMP, on PATH, in
#     $CUDA_HOME/bin, or the one scripts/install_deps.sh puts in .deps/); without one it says it
#     was skipped.
# So CI, which has no GPU, still proves the Hopper kernels were built as Hopper kernels.
set -uo pipefail
src="" obj="" prev=""
for arg in "$@"; do
  case "$arg" in *.cu) src="$arg" ;; esac
  [ "$prev" = "-o" ] && obj="$arg"
  prev="$arg"
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
      k5_* | k6_* | k7_* | k8_* | bwd_sm90_*) grep -q "setmaxnreg" "$ptx" || fail "no setmaxnreg in the PTX" ;;
    esac
    case "$(basename "$src")" in
      k6_* | k7_* | k8_*)
        dump=${FLASHATTN_CUOBJDUMP:-$(command -v cuobjdump || true)}
        for c in "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump" \
          "$(dirname "$0")/../.deps/cuobjdump/nvidia/cu13/bin/cuobjdump"; do
          [ -n "$dump" ] || [ ! -x "$c" ] || dump=$c
        done
        if [ -n "$dump" ] && [ -n "$obj" ]; then
          sass=$(PATH="$(dirname "$dump"):$PATH" "$dump" -sass "$obj")
          # A GEMM N that CuTe's selector could not cover with one atom (tile_size.h,
          # gmma_n_one_atom) comes out as n8/n16 wgmma's, each re-reading its A operand: d 192's
          # Q·Kᵀ ran so, 26-51% slower, until the extended shapes were enabled for it.
          small=$(grep -oE "[HQ]GMMA\.64x(8|16)x[0-9]+" <<<"$sass" | sort -u | tr '\n' ' ')
          [ -z "$small" ] || fail "wgmma with N <= 16 in a forward kernel ($small): a tile N split into small atoms"
          windows=$(awk '
            /WARPGROUP.DEPBAR.LE gsb0, 0x1/ { open = 1; n = 0; next }
            open && /MUFU.EX2/ { n++ }
            open && /WARPGROUP.DEPBAR.LE gsb0, 0x0/ { print n; open = 0 }' <<<"$sass")
          [ -n "$windows" ] || fail "no wgmma wait window found in the SASS"
          ! grep -qx 0 <<<"$windows" ||
            fail "no MUFU.EX2 between the mainloop's wgmma waits: the softmax does not overlap P·V"
        else
          echo "hopper compile check: $src: overlap (SASS) check skipped: no cuobjdump" >&2
        fi
        ;;
    esac
    ;;
esac
exit 0
