#!/usr/bin/env bash
# The second command of the README: builds (incrementally) and runs every test: the C++ suites
# through ctest (arguments go to ctest), then the Python package's pytest suite against the
# libflashattn_c.so this build made (FLASHATTN_LIBRARY; no second CUDA build). CPU tests always
# run; GPU tests (ctest label `gpu`, pytest marker `gpu`) skip cleanly without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
[ -f build/CMakeCache.txt ] || cmake --preset default >/dev/null
cmake --build --preset default
ctest --preset default -j "$(nproc)" "$@"

export FLASHATTN_LIBRARY="$PWD/build/python/libflashattn_c.so"
rc=0
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest tests/python -q || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests from tests/python" >&2
  exit 1
fi
exit "$rc"
