#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one call: the collectives (issue 32). When the suite's
# binary was carried (.dev's `t/suite`), its `collectives::` tests run first on the GPU's
# members (two to four members on one queue: CROSSGPU_TEST_STANDINS=shared) and, where lavapipe
# was carried (.mesa), on the GPU beside lavapipe (members alternating, DevicePoll included).
# Then `crossgpu bench collectives` on two members sharing the GPU's queue (HostBridge; the
# stand-in for two GPUs until a machine with two is lent), REPEAT (default 3) processes, sizes
# 4 KiB to 256 MiB, f32 sum — and max, and f16 — and on the GPU beside lavapipe (HostBridge and
# DevicePoll, up to 4 MiB). Results in $OUT/collectives.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results collectives
L=$(grep -E '^\[[0-9]+\] llvmpipe' "$R/devices.txt" | sed -E 's/^\[([0-9]+)\].*/\1/' | head -1)
if [ -x /tmp/dev/t/suite ]; then
    CROSSGPU_TEST_ADAPTER=$N0 CROSSGPU_TEST_STANDINS=shared timeout 240 /tmp/dev/t/suite --test-threads 1 \
        collectives:: > "$R/tests-gpu.txt" 2>&1
    log "collectives tests on the GPU exit $?"
    if [ -n "$L" ]; then
        LP_NUM_THREADS=8 CROSSGPU_TEST_ADAPTERS=$N0,$L timeout 240 /tmp/dev/t/suite --test-threads 1 \
            collectives::every collectives::misuse > "$R/tests-cross.txt" 2>&1
        log "collectives tests on the GPU and lavapipe exit $?"
    fi
fi
for k in $(seq 1 "${REPEAT:-3}"); do
    timeout 150 crossgpu bench collectives --layouts "$N0/2" --modes bridge --max-bytes $((256 << 20)) \
        --json "$R/f32-sum-$k.json" > "$R/f32-sum-$k.txt" 2>&1
    log "bench f32 sum $k exit $?"
done
timeout 100 crossgpu bench collectives --layouts "$N0/2" --modes bridge --op max --max-bytes $((64 << 20)) \
    --collectives all_reduce,reduce_scatter --json "$R/f32-max.json" > "$R/f32-max.txt" 2>&1
log "bench f32 max exit $?"
timeout 100 crossgpu bench collectives --layouts "$N0/2" --modes bridge --dtype f16 --max-bytes $((64 << 20)) \
    --json "$R/f16-sum.json" > "$R/f16-sum.txt" 2>&1
log "bench f16 sum exit $?"
if [ -n "$L" ]; then
    LP_NUM_THREADS=8 timeout 150 crossgpu bench collectives --layouts "$N0,$L" --modes bridge,poll \
        --max-bytes $((4 << 20)) --json "$R/cross.json" > "$R/cross.txt" 2>&1
    log "bench cross-vendor exit $?"
fi
{ grep -hE "^test |test result|SKIPPED" "$R"/tests-*.txt 2>/dev/null; for f in "$R"/*.txt; do
    case $f in */tests-*|*/devices.txt|*/timeline.txt) continue;; esac; echo "=== $(basename "$f")"; grep -vE '^$' "$f"; done; } \
    > "$OUT/summary.txt"
log finished
