#!/usr/bin/env bash
# Copies the binaries a device run needs into .devbin/ (ignored by git), so the device tool can
# carry them: the GPU has no network and builds are cheaper here. Usage: scripts/stage_device.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build --preset default
rm -rf .devbin && mkdir -p .devbin
cp build/tests/flashattn_gpu_tests build/tests/flashattn_cpu_tests build/tools/flashattn-bench .devbin/
du -sh .devbin
