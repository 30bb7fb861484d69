#!/usr/bin/env bash
# On the GPU machine (see prepare.sh): crossgpu devices, every test binary on the NVIDIA
# adapter (separate VkDevices, then queue stand-ins) with the validation layer, the demo on the
# NVIDIA + lavapipe pair and with SyncFd forced, and the 27B-class decode on 1, 2 and 4 queue
# stand-ins. Writes everything under $OUT.
set -uo pipefail
source scripts/gpu-machine/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/machine.txt" 2>&1
crossgpu devices > "$OUT/devices.txt" 2>&1
run_tests() { # $1: label; environment selects the members
    for t in /tmp/dev/t/*; do
        echo "=== $(basename "$t") ($1)"
        "$t" --test-threads=1 2>&1 | grep -E "^test |test result|SKIPPED|panicked|VALIDATION|suppressed" | head -80
    done
}
CROSSGPU_TEST_ADAPTER=nvidia run_tests "NVIDIA, one VkDevice per member" > "$OUT/tests-vkdevices.txt" 2>&1
CROSSGPU_TEST_ADAPTER=nvidia CROSSGPU_TEST_STANDINS=1 run_tests "NVIDIA, queues of one VkDevice" > "$OUT/tests-standins.txt" 2>&1
{
    echo "=== demo on nvidia,llvmpipe"; CROSSGPU_DEVICES=nvidia,llvmpipe crossgpu demo
    echo "=== demo on nvidia*2, SyncFd forced"; CROSSGPU_DEVICES='nvidia*2' CROSSGPU_ALLREDUCE=sync_fd crossgpu demo
    echo "=== decode small on nvidia,llvmpipe --check"; CROSSGPU_DEVICES=nvidia,llvmpipe crossgpu decode --tokens 32 --check
} > "$OUT/pair.txt" 2>&1
for n in 1 2 4; do
    echo "=== 27b decode, nvidia*$n"
    CROSSGPU_DEVICES="nvidia*$n" crossgpu decode --preset 27b --tokens 32 2>&1 | grep -v '^\s*$'
done > "$OUT/decode-27b.txt" 2>&1
echo finished >> "$OUT/machine.txt"
