#!/usr/bin/env bash
# On a multi-GPU machine (see prepare.sh), after multi-gpu.sh: every test binary with its
# members spread over the physical GPUs (CROSSGPU_TEST_ADAPTERS, validation layer on), the
# cross-vendor and wgpu-app examples (issue 5), and the single-GPU all-reduce at every size
# (1, 2 and 4 members sharing a queue of GPU 0) to measure the copy-engine phase A (issue 6).
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results results2
log "cross_vendor and wgpu_app"
{ timeout 120 cross_vendor; echo "exit $?"; timeout 60 wgpu_app; echo "exit $?"; } > "$R/cross-vendor.txt" 2>&1
log "single-GPU all-reduce, auto wire"
timeout 150 crossgpu bench allreduce --adapter "$N0" --layouts "$N0*1;$N0/2;$N0/4" --modes bridge --no-baseline \
    --out "$R/single" > "$R/single.txt" 2>&1; log "exit $?"
log "tests across $NV"
# The most telling binaries first; none starts after 480 s into the call (the call's limit is 600 s).
for name in allreduce tp_model tp properties reliability kernels groups errors drop_orders teardown wgpu_embedding validation_canary; do
    t=/tmp/dev/t/$name; [ -x "$t" ] || continue
    if [ "$SECONDS" -gt 480 ]; then echo "=== $name NOT RUN: out of time"; continue; fi
    echo "=== $(basename "$t") (members round-robin over adapters $NV)"
    CROSSGPU_TEST_ADAPTERS="$NV" timeout 100 "$t" --test-threads=1 2>&1 | grep -E "^test |test result|SKIPPED|panicked|VALIDATION ERROR|resident|error" | head -60
    echo "exit ${PIPESTATUS[0]}"
done > "$R/tests-physical.txt" 2>&1
grep -E "===|test result|exit" "$R/tests-physical.txt" > "$OUT/summary.txt"
log finished
