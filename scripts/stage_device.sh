#!/usr/bin/env bash
# Packs what a device run needs into .devbin/bin.tar.xz (ignored by git), so the device tool can
# carry it: the GPU has no network and builds are cheaper here. The three binaries (the GPU test
# suite, flashattn-bench, libflashattn_c.so for the Python package) are ~65 MB raw, more than a
# call may carry; xz brings them to ~9 MB. scripts/device_run.sh unpacks them on the device.
# Usage: scripts/stage_device.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build --preset default
# The SASS check of uniform registers (cmake/sass_uniform_check.py) before anything goes to the
# GPU: a kernel that reads a register nothing writes fails there as an illegal instruction, and a
# device call is dearer than this minute.
ctest --test-dir build -R sass_uniform_registers --output-on-failure
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp build/tests/flashattn_gpu_tests build/tools/flashattn-bench build/python/libflashattn_c.so "$stage/"
rm -rf .devbin && mkdir -p .devbin
tar -C "$stage" -cf - . | xz -1 -T2 > .devbin/bin.tar.xz
du -sh .devbin
