#!/usr/bin/env bash
# Compares the SASS of two builds' device objects, instruction for instruction, with the names
# that a refactor may change taken out: function and symbol names (mangled kernel names carry the
# template arguments, e.g. a renamed Config or Schedule) and the comment columns. Used to prove a
# refactor left the kernels unchanged (issue 16).
# Usage: scripts/sass_diff.sh OLD.o NEW.o      (exit 0: identical; 1: differs, diff printed)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dump=${FLASHATTN_CUOBJDUMP:-$(command -v cuobjdump || true)}
for c in "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump" "$here/.deps/cuobjdump/nvidia/cu13/bin/cuobjdump"; do
  [ -n "$dump" ] || [ ! -x "$c" ] || dump=$c
done
[ -n "$dump" ] || { echo "sass_diff: no cuobjdump" >&2; exit 2; }
norm() {
  # Keep instruction lines only (cuobjdump prints /*addr*/ INSTR ; /* encoding */), drop the
  # encodings and any symbol reference, and sort the kernels by their instruction text so that a
  # different mangled name (which reorders the dump) does not count.
  PATH="$(dirname "$dump"):$PATH" "$dump" -sass "$1" | awk '
    /Function :/ { if (body != "") print body; body = ""; next }
    /^ +\/\*[0-9a-f]+\*\// && !/^ +\/\* 0x/ {
      line = $0
      sub(/^ +\/\*[0-9a-f]+\*\/ +/, "", line)
      sub(/ *;.*$/, "", line)
      gsub(/`\([^)]*\)/, "`(SYM)", line)
      body = body line "\\n"
    }
    END { if (body != "") print body }' | sort
}
if diff <(norm "$1") <(norm "$2") > /tmp/sass_diff.$$; then
  echo "identical: $(norm "$1" | wc -l) kernels"
  rm -f /tmp/sass_diff.$$
else
  echo "DIFFERENT: $1 vs $2"
  head -c 4000 /tmp/sass_diff.$$ | tr '\\' '\n' | head -60
  rm -f /tmp/sass_diff.$$
  exit 1
fi
