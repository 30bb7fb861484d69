#!/usr/bin/env bash
# On the GPU machine (see prepare.sh): the 1,000,000-round soak on 3 members of the NVIDIA GPU
# sharing a queue, then every test binary on the NVIDIA adapter (members sharing one queue,
# and one VkDevice each) with the validation layer. Under $OUT.
set -uo pipefail
source scripts/gpu-machine/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# Issue 5: the cross-vendor example (NVIDIA + lavapipe) and the wgpu application example.
{ cross_vendor; echo "exit $?"; wgpu_app; echo "exit $?"; } > "$OUT/cross-vendor.txt" 2>&1
CROSSGPU_DEVICES='nvidia/3' timeout 300 crossgpu soak --rounds 1000000 --members 3 --check-every 1000 > "$OUT/soak.txt" 2>&1
echo "soak exit $?" >> "$OUT/soak.txt"
run_tests() { # $1: label; the environment selects the members
    for t in /tmp/dev/t/*; do
        echo "=== $(basename "$t") ($1)"
        timeout 120 "$t" --test-threads=1 2>&1 | grep -E "^test |test result|SKIPPED|panicked|VALIDATION ERROR|suppressed|resident" | head -60
    done
}
CROSSGPU_TEST_ADAPTER=nvidia CROSSGPU_TEST_STANDINS=shared run_tests "NVIDIA, members sharing one queue" > "$OUT/tests-shared.txt" 2>&1
CROSSGPU_TEST_ADAPTER=nvidia run_tests "NVIDIA, one VkDevice per member" > "$OUT/tests-vkdevices.txt" 2>&1
echo finished >> "$OUT/tests-vkdevices.txt"
