#!/usr/bin/env bash
# Issue 6, third session: every f16 matvec kernel (1, 2, 4 and 8 rows per workgroup, and four
# rows unrolled by two) on the three bench shapes, three processes, beside the copy kernel's
# bandwidth (bench limits) measured before and after in the same call. $OUT/matvec-variants.tgz.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results matvec-variants
timeout 90 crossgpu bench limits --adapter "$N0" --limit-bytes 268435456 --out "$R/limits-1" > "$R/limits-1.txt" 2>&1; log "limits 1 exit $?"
for k in 1 2 3; do
    timeout 120 crossgpu bench matvec --adapter "$N0" --out "$R/matvec-$k" > "$R/matvec-$k.txt" 2>&1; log "matvec $k exit $?"
done
timeout 90 crossgpu bench limits --adapter "$N0" --limit-bytes 268435456 --out "$R/limits-2" > "$R/limits-2.txt" 2>&1; log "limits 2 exit $?"
{ grep -h -A1 device_copy_kernel "$R"/limits-*.txt; grep -H "^matvec" "$R"/matvec-*.txt; } > "$OUT/summary.txt"
log finished
