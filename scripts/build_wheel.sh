#!/usr/bin/env bash
# Builds the Python package as a wheel in .whl/ (git-ignored): libflashattn_c.so compiled here
# (CUDA toolkit and network needed), carried to the GPU machine, which has neither. There:
#   pip install --no-deps --no-index --target /tmp/site .whl/flashattn-*.whl
#   PYTHONPATH=/tmp/site python3 -m pytest tests/python -q
# The wheel is py3-none-<platform>: one build serves every Python >= 3.10 and torch >= 2.4.
# --prebuilt PATH packages an already built libflashattn_c.so instead of compiling (CI, after
# scripts/test.sh built build/python/libflashattn_c.so).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh  # the CuTe/CUTLASS headers: without them the tensor-core families drop out
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
args=()
if [ "${1:-}" = "--prebuilt" ]; then
  lib=$(realpath "$2")
  shift 2
  args=(-Ccmake.define.FLASHATTN_PREBUILT_C_LIBRARY="$lib" -Cbuild-dir=build-wheel/prebuilt)
fi
rm -f .whl/flashattn-*.whl
python3 -m pip wheel . --no-deps -w .whl/ "${args[@]}" "$@"
ls -l .whl/flashattn-*.whl
