#!/usr/bin/env bash
# The final binaries on the GPU machine: the 1,000,000-round soak on 3 members sharing GPU 0's
# queue (issue 7), the cross-vendor example (issue 5), and the main test binaries across the
# physical GPUs with the validation layer. $OUT/results10.tgz.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results results10
{ timeout 60 cross_vendor; echo "exit $?"; timeout 60 wgpu_app; echo "exit $?"; } > "$R/cross-vendor.txt" 2>&1; log "cross_vendor"
CROSSGPU_DEVICES="$N0/3" timeout 230 crossgpu soak --rounds 1000000 --members 3 --check-every 1000 > "$R/soak.txt" 2>&1
log "soak exit $?"
for name in allreduce properties tp_model reliability; do
    if [ "$SECONDS" -gt 400 ]; then echo "=== $name NOT RUN: out of time"; continue; fi
    echo "=== $name (members round-robin over $NV)"
    CROSSGPU_TEST_ADAPTERS="$NV" timeout 80 /tmp/dev/t/$name --test-threads=1 2>&1 | grep -E "^test |test result|panicked|VALIDATION ERROR" | head -40
    echo "exit ${PIPESTATUS[0]}"
done > "$R/tests.txt" 2>&1
{ tail -8 "$R/soak.txt"; grep -E "split|equal|OK|exit" "$R/cross-vendor.txt"; grep -E "===|test result" "$R/tests.txt"; } > "$OUT/summary.txt"
log finished
