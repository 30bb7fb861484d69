#!/usr/bin/env bash
# Issue 6 experiment: phase A storing into the host slot from a kernel (CROSSGPU_PHASE_A_KERNEL_BYTES)
# against the copy engine at small sizes, alternated twice, on two GPUs, one GPU and two members
# sharing a queue; the decode on two GPUs both ways; the limits with the new duplex and
# kernel-over-the-bus rates; and the cross_vendor example (split measured at load). $OUT/results5.tgz.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results results5
timeout 90 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
for k in 1 2; do
    for a in 0 1048576; do
        CROSSGPU_PHASE_A_KERNEL_BYTES=$a timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$NV;$N0*1;$N0/2" \
            --modes bridge --no-baseline --max-bytes 4194304 --out "$R/a$a-$k" > "$R/a$a-$k.txt" 2>&1; log "phase A kernel $a run $k exit $?"
    done
done
for a in 0 1048576 0 1048576; do
    { echo "=== CROSSGPU_PHASE_A_KERNEL_BYTES=$a CROSSGPU_DEVICES=$NV"; CROSSGPU_PHASE_A_KERNEL_BYTES=$a CROSSGPU_DEVICES="$NV" timeout 100 crossgpu decode --preset 27b --tokens 32; } >> "$R/decode.txt" 2>&1
    log "decode $a"
done
{ timeout 120 cross_vendor; echo "exit $?"; timeout 60 wgpu_app; echo "exit $?"; } > "$R/cross-vendor.txt" 2>&1; log "cross_vendor"
{ grep -E "gbps|round_trip" -A1 "$R/limits.txt" | grep -E "gbps|_us|median"
  for f in "$R"/a*.txt; do echo "== $(basename $f)"; grep -E "HostBridge +(4096|32768|262144|1048576) " "$f"; done
  grep -E "===|tokens/s" "$R/decode.txt"; grep -E "split|equal|OK|exit" "$R/cross-vendor.txt"; } > "$OUT/summary.txt"
log finished
