#!/usr/bin/env bash
# On the GPU machine (see prepare.sh): `crossgpu bench all` on the NVIDIA GPU (queue stand-ins
# 1-4, two VkDevices, the NVIDIA + lavapipe pair, the wgpu baseline), then every test binary on
# the NVIDIA adapter as VkDevices and as queue stand-ins. Everything goes under $OUT.
set -uo pipefail
source scripts/gpu-machine/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv; } > "$OUT/machine.txt" 2>&1
crossgpu devices > "$OUT/devices.txt" 2>&1
crossgpu bench all --adapter nvidia --pair llvmpipe --out "$OUT" > "$OUT/bench.txt" 2>&1
run_tests() { # $1: label; the environment selects the members
    for t in /tmp/dev/t/*; do
        echo "=== $(basename "$t") ($1)"
        "$t" --test-threads=1 2>&1 | grep -E "^test |test result|SKIPPED|panicked|VALIDATION|suppressed|resident" | head -60
    done
}
CROSSGPU_TEST_ADAPTER=nvidia run_tests "NVIDIA, one VkDevice per member" > "$OUT/tests-vkdevices.txt" 2>&1
CROSSGPU_TEST_ADAPTER=nvidia CROSSGPU_TEST_STANDINS=1 run_tests "NVIDIA, queues of one VkDevice" > "$OUT/tests-standins.txt" 2>&1
echo finished >> "$OUT/machine.txt"
