#!/usr/bin/env bash
# Issue 6: every f16 matvec kernel on the three bench shapes, beside the copy kernel's
# bandwidth (bench limits) in the same call. $OUT/matvec.tgz.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results matvec
timeout 90 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
timeout 120 crossgpu bench matvec --adapter "$N0" --out "$R/matvec" > "$R/matvec.txt" 2>&1; log "matvec exit $?"
{ grep -A1 device_copy_kernel "$R/limits.txt"; grep "^matvec" "$R/matvec.txt"; } > "$OUT/summary.txt"
log finished
