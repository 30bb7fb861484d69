#!/usr/bin/env bash
# Issue 6 diagnosis (third session), nvidia-h200-x2: the process-to-process "latency step".
# Six processes of the small all-reduce (two GPUs; two members sharing GPU 0's queue) and four
# of the 27B decode on two GPUs, each reporting the host's time per round and the mean host
# time of its driver calls (vkQueueSubmit; the bridge's vkGetSemaphoreCounterValue and
# vkSignalSemaphore), to see which one moves when a process is slow.
# Results in $OUT/step-diag.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results step-diag
for k in 1 2 3 4 5 6; do
    timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$NV;$N0/2" --modes bridge --wire f32 \
        --no-baseline --max-bytes 262144 --out "$R/small-$k" > "$R/small-$k.txt" 2>&1; log "small $k exit $?"
done
for k in 1 2 3 4; do
    { echo "=== two GPUs, run $k"; CROSSGPU_DEVICES="$NV" timeout 120 crossgpu decode --preset 27b --tokens 32; } >> "$R/decode.txt" 2>&1
    log "decode $k exit $?"
done
{ for f in "$R"/small-*.txt; do echo "== $(basename "$f")"; grep -E "HostBridge +(4096|32768|262144) " "$f" | sed -E 's/ +\(p10[^)]*\)//'; done
  grep -E "===|tokens/s|driver calls" "$R/decode.txt"; } > "$OUT/summary.txt"
log finished
