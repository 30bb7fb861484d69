#!/usr/bin/env bash
# Issue 6, third session, last build: the limits and matvec (every kernel, twice) in one call,
# then the 27B decode alternated three times: one member against two members sharing the
# queue, and, where the machine has two GPUs, against the two GPUs.
# Results in $OUT/final-matvec-decode.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results final-matvec-decode
timeout 90 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
for k in 1 2; do
    timeout 120 crossgpu bench matvec --adapter "$N0" --out "$R/matvec-$k" > "$R/matvec-$k.txt" 2>&1; log "matvec $k exit $?"
done
for k in 1 2 3; do
    decode "one-$k" CROSSGPU_DEVICES="$N0"
    decode "shared-$k" CROSSGPU_DEVICES="$N0/2"
    [ "$NV" != "$N0" ] && decode "two-gpus-$k" CROSSGPU_DEVICES="$NV"
done
{ grep -h -A1 device_copy_kernel "$R/limits.txt"; grep -H "^matvec" "$R"/matvec-*.txt
  grep -E "===|tokens/s" "$R/decode.txt"; grep -h "tokens:" "$R/decode.txt" | sort | uniq -c; } > "$OUT/summary.txt"
log finished
