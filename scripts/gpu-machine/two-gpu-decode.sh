#!/usr/bin/env bash
# Issue 6, third session, on nvidia-h200-x2: the 27B decode on one GPU, on two GPUs with the
# bridge's new 2 ms spin and with the old 200 µs (alternated), and on two members sharing GPU 0's
# queue; then the small all-reduce (two GPUs, loopback, 2 and 4 members sharing a queue) unpinned
# and pinned, with the host's recording time per round, and the CPU topology, for the latency
# step. Results in $OUT/two-gpu-decode.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results two-gpu-decode
{ nproc; lscpu; numactl -H 2>&1; nvidia-smi topo -m 2>&1; } > "$R/machine.txt" 2>&1
for k in 1 2; do
    decode "one-$k" CROSSGPU_DEVICES="$N0"
    decode "two-gpus-spin2000-$k" CROSSGPU_DEVICES="$NV"
    decode "two-gpus-spin200-$k" CROSSGPU_DEVICES="$NV" CROSSGPU_ALLREDUCE_SPIN_US=200
    decode "shared-$k" CROSSGPU_DEVICES="$N0/2"
done
HALF=$(( $(nproc) / 2 - 1 ))
small() { # $1 label, then the command prefix
    local label=$1; shift
    "$@" timeout 90 crossgpu bench allreduce --adapter "$N0" --layouts "$NV;$N0*1;$N0/2;$N0/4" --modes bridge --wire f32 \
        --no-baseline --max-bytes 262144 --out "$R/$label" > "$R/$label.txt" 2>&1; log "$label exit $?"
}
small small-1 env
small small-pinned-2-3 taskset -c 2,3
small small-2 env
small small-pinned-half taskset -c 0-$HALF
small small-3 env
{ grep -E "^(CPU\(s\)|Thread|Core|Socket|NUMA)" "$R/machine.txt"
  for f in "$R"/small-*.txt; do echo "== $(basename "$f")"; grep -E "HostBridge +(4096|32768|262144) " "$f"; done
  grep -E "===|tokens/s|host bridge" "$R/decode.txt"; grep -h "tokens:" "$R/decode.txt" | sort | uniq -c; } > "$OUT/summary.txt"
log finished
