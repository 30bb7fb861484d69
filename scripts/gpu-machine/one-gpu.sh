#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (nvidia-h200; prepare.sh first), in one call, the figures of
# docs/BENCHMARKS.md "All-reduce layouts on one H200" and "Limits":
#   1. the limits (copy bandwidths, the host-signalled timeline round trip, the CPU cost of a
#      submit, the GPU cost of a dispatch, of a submit and of a joint batch), REPEAT times;
#   2. the all-reduce at every size on every one-GPU layout (1 member; 2-4 members sharing one
#      queue; 2 members on a queue each; two VkDevices) beside the wgpu baseline (2-4 wgpu
#      devices on the GPU);
#   3. REPEAT (default 3) more processes of the small sizes (4-256 KiB, f32 wire) on 1-4
#      members sharing one queue: small rounds vary from process to process.
# Results in $OUT/one-gpu.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results one-gpu
for k in $(seq 1 "${REPEAT:-3}"); do
    timeout 120 crossgpu bench limits --adapter "$N0" --out "$R/limits-$k" > "$R/limits-$k.txt" 2>&1; log "limits $k exit $?"
done
timeout 300 crossgpu bench allreduce --adapter "$N0" --layouts "$N0*1;$N0/2;$N0/3;$N0/4;$N0*2;$N0,$N0" --modes bridge \
    --members 2,3,4 --out "$R/allreduce" > "$R/allreduce.txt" 2>&1; log "allreduce exit $?"
for k in $(seq 1 "${REPEAT:-3}"); do
    timeout 90 crossgpu bench allreduce --adapter "$N0" --layouts "$N0*1;$N0/2;$N0/3;$N0/4" --modes bridge --wire f32 \
        --no-baseline --max-bytes 262144 --out "$R/small-$k" > "$R/small-$k.txt" 2>&1; log "small $k exit $?"
done
{ for f in "$R"/limits-*.txt; do echo "== $(basename "$f")"; grep -E "GB/s|us " "$f"; done
  grep -E " (4 KiB|32 KiB|256 KiB|64 MiB|256 MiB) " "$R/allreduce.txt"
  for f in "$R"/small-*.txt; do echo "== $(basename "$f")"; grep -E "HostBridge +(4 KiB|32 KiB|256 KiB) " "$f"; done; } > "$OUT/summary.txt"
log finished
