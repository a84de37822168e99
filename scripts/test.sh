#!/usr/bin/env bash
# The second command of the README: builds (incrementally) and runs every test. CPU tests always
# run; GPU tests (ctest label `gpu`) skip cleanly on a machine without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
[ -f build/CMakeCache.txt ] || cmake --preset default >/dev/null
cmake --build --preset default
ctest --preset default -j "$(nproc)" "$@"
