#!/usr/bin/env bash
# RECORD: CROSSGPU_BRIDGE_POLL_NS, the variable this run varies, was removed after it (no consistent
# gain: docs/BENCHMARKS.md, third session); the script is kept as the record of what ran.
# Issue 6 experiment (third session): is the host's recording time per round (which jumps
# between runs: the "latency step") slowed by the bridge thread polling the `done` semaphores
# back to back? The small all-reduce with the bridge polling back to back (default), with a
# 2 us pause between polls (CROSSGPU_BRIDGE_POLL_NS=2000), and not spinning at all
# (CROSSGPU_ALLREDUCE_SPIN_US=0), alternated twice; the decode on `0/2` both first ways.
# Results in $OUT/bridge-poll.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results bridge-poll
small() { # $1 label, then env assignments
    local label=$1; shift
    env "$@" timeout 90 crossgpu bench allreduce --adapter "$N0" --layouts "$N0*1;$N0/2;$N0/3;$N0/4" --modes bridge --wire f32 \
        --no-baseline --max-bytes 262144 --out "$R/$label" > "$R/$label.txt" 2>&1; log "$label exit $?"
}
for k in 1 2; do
    small "poll0-$k" CROSSGPU_BRIDGE_POLL_NS=0
    small "poll2000-$k" CROSSGPU_BRIDGE_POLL_NS=2000
    small "spin0-$k" CROSSGPU_ALLREDUCE_SPIN_US=0
done
for p in 0 2000; do
    { echo "=== poll $p"; CROSSGPU_BRIDGE_POLL_NS=$p CROSSGPU_DEVICES="$N0/2" timeout 120 crossgpu decode --preset 27b --tokens 32; } >> "$R/decode.txt" 2>&1
    log "decode poll $p exit $?"
done
{ for f in "$R"/poll0-*.txt "$R"/poll2000-*.txt "$R"/spin0-*.txt; do echo "== $(basename "$f")"; grep -E "HostBridge +(4096|32768|262144) " "$f"; done
  grep -E "===|tokens/s|host bridge" "$R/decode.txt"; } > "$OUT/summary.txt"
log finished
