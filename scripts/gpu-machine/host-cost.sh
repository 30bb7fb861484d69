#!/usr/bin/env bash
# Issue 6 diagnosis (third session): where a round of members sharing one queue spends its
# time, and why the decode on two members sharing a queue reaches 54% of one member. Measures
# the limits (with the GPU cost of a submit boundary), the small all-reduce with the host's
# recording time per round and the bridge's blocked share (default, pinned, a larger in-flight
# limit), then the 27B decode on one member and on `0/2` with the bridge's spin time and the
# in-flight limit varied one at a time. Results in $OUT/host-cost.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results host-cost
timeout 120 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
LAYOUTS="$N0*1;$N0/2;$N0/3;$N0/4"
small() { # $1 label, then the command prefix
    local label=$1; shift
    "$@" timeout 90 crossgpu bench allreduce --adapter "$N0" --layouts "$LAYOUTS" --modes bridge --wire f32 \
        --no-baseline --max-bytes 262144 --out "$R/$label" > "$R/$label.txt" 2>&1; log "$label exit $?"
}
small small-default env
small small-pinned taskset -c 2,3
small small-inflight1024 env CROSSGPU_MAX_IN_FLIGHT=1024
small small-default-2 env
decode one CROSSGPU_DEVICES="$N0"
decode shared-spin200 CROSSGPU_DEVICES="$N0/2"
decode shared-spin2000 CROSSGPU_DEVICES="$N0/2" CROSSGPU_ALLREDUCE_SPIN_US=2000
decode shared-spin50000 CROSSGPU_DEVICES="$N0/2" CROSSGPU_ALLREDUCE_SPIN_US=50000
decode shared-spin50000-inflight512 CROSSGPU_DEVICES="$N0/2" CROSSGPU_ALLREDUCE_SPIN_US=50000 CROSSGPU_MAX_IN_FLIGHT=512
decode one-inflight512 CROSSGPU_DEVICES="$N0" CROSSGPU_MAX_IN_FLIGHT=512
{ grep -E '"(timeline_round_trip_us|empty_submit_us|gpu_submit_step_us|gpu_dispatch_step_us)"' -A1 "$R/limits.txt"
  for f in "$R"/small-*.txt; do echo "== $(basename "$f")"; grep -E "HostBridge +(4096|32768|262144) " "$f"; done
  grep -E "===|tokens/s|host bridge" "$R/decode.txt"; } > "$OUT/summary.txt"
log finished
