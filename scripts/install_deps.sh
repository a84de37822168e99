#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build flashattn: CMake, Ninja, a C++20
# compiler, GoogleTest (Debian packages), the CuTe/CUTLASS 4.2 headers and cuobjdump (PyPI, into
# .deps/, never committed); and, for the Python package's tests, torch, pytest, numpy, scikit-build-core
# and matplotlib (PyPI; torch 2.11 is ~3 GB with its CUDA libraries and runs on CPU-only machines
# too; FLASHATTN_NO_PYTHON_DEPS=1 skips them). The CUDA toolkit (nvcc 13) must already be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "install_deps: installing ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}"
fi

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || { echo "install_deps: nvcc (CUDA toolkit 13) not found" >&2; exit 1; }

if [ ! -f .deps/cutlass/cutlass_library/source/include/cute/tensor.hpp ]; then
  echo "install_deps: fetching CuTe/CUTLASS 4.2 headers into .deps/cutlass"
  python3 -m pip install -q --no-deps --target .deps/cutlass nvidia-cutlass==4.2.0.0
fi

# cuobjdump, for the SASS check of cmake/hopper_compile_check.sh (the softmax must sit between
# K6's wgmma waits), unless the toolkit has one: PyPI, into .deps/ (never committed).
if ! command -v cuobjdump >/dev/null && [ ! -x /usr/local/cuda/bin/cuobjdump ] &&
  [ ! -x .deps/cuobjdump/nvidia/cu13/bin/nvdisasm ]; then
  echo "install_deps: fetching cuobjdump into .deps/cuobjdump"
  python3 -m pip install -q --no-deps --target .deps/cuobjdump nvidia-cuda-cuobjdump==13.5.37 \
    nvidia-cuda-nvdisasm==13.5.37  # cuobjdump -sass runs nvdisasm
  chmod +x .deps/cuobjdump/nvidia/cu13/bin/cuobjdump .deps/cuobjdump/nvidia/cu13/bin/nvdisasm
fi

# The Python test dependencies, unless present (torch >= 2.4, the oldest the package supports).
if [ "${FLASHATTN_NO_PYTHON_DEPS:-0}" != 1 ] && ! python3 - 2>/dev/null <<'PY'
import matplotlib, numpy, pytest, scikit_build_core, torch
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
assert (major, minor) >= (2, 4)
PY
then
  echo "install_deps: installing the Python test dependencies (torch 2.11, pytest, numpy, ...)"
  python3 -m pip install -q torch==2.11.0 pytest numpy scikit-build-core matplotlib
fi
