#!/usr/bin/env bash
# The first command of the README: installs what is missing, builds, and runs the main job:
# flashattn-bench on its default workload with --check (on the GPU when there is one, otherwise
# on the CPU backend). Extra arguments go to flashattn-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
cmake --preset default >/dev/null
cmake --build --preset default
exec build/tools/flashattn-bench --check "$@"
