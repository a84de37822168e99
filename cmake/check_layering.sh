#!/usr/bin/env bash
# Includes point down only (STYLE.md, "The layers"): the kernel families, the device primitives
# and the reference include nothing from the dispatch layer (src/api/), and the primitives and the
# reference nothing from the families (src/kernels/). Run by ctest (test `layering`) on every CI
# run; prints each offending include and fails.
# Usage: cmake/check_layering.sh [repository root]
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
bad=0
report() {
  local what=$1 pattern=$2
  shift 2
  local hits
  hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$pattern" "$@" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layering: $what:"
    echo "$hits"
    bad=1
  fi
}
report "kernels, common and reference include the dispatch layer (src/api/)" 'api/' \
  src/kernels src/common src/reference
report "common and reference include a kernel family (src/kernels/)" 'kernels/' \
  src/common src/reference
[ "$bad" -eq 0 ] && echo "layering: includes point down only"
exit "$bad"
