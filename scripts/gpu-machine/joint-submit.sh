#!/usr/bin/env bash
# Issue 6 experiment (third session): members sharing a queue submitting each all-reduce phase as
# one batch (CROSSGPU_JOINT_SUBMIT=1, the new default) against a submit each (=0), alternated
# twice: the small all-reduce on 1-4 members sharing one queue, and the 27B decode on `0/2`
# (bridge spin at its new 2 ms default); the limits with the GPU cost of a submit, of a joint
# batch and of a plain submit; then the all-reduce and error tests on members sharing the
# H200's queue with validation. Results in $OUT/joint-submit.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results joint-submit
timeout 120 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
LAYOUTS="$N0*1;$N0/2;$N0/3;$N0/4"
for k in 1 2; do
    for j in 1 0; do
        CROSSGPU_JOINT_SUBMIT=$j timeout 90 crossgpu bench allreduce --adapter "$N0" --layouts "$LAYOUTS" --modes bridge \
            --wire f32 --no-baseline --max-bytes 262144 --out "$R/small-joint$j-$k" > "$R/small-joint$j-$k.txt" 2>&1
        log "small joint $j run $k exit $?"
    done
done
decode one CROSSGPU_DEVICES="$N0"
for k in 1 2; do
    decode "shared-joint1-$k" CROSSGPU_DEVICES="$N0/2" CROSSGPU_JOINT_SUBMIT=1
    decode "shared-joint0-$k" CROSSGPU_DEVICES="$N0/2" CROSSGPU_JOINT_SUBMIT=0
done
decode shared-joint1-spin200 CROSSGPU_DEVICES="$N0/2" CROSSGPU_ALLREDUCE_SPIN_US=200
CROSSGPU_JOINT_SUBMIT=1 timeout 150 crossgpu bench allreduce --adapter "$N0" --layouts "$N0/2;$N0*2;$N0,$N0" --modes bridge \
    --no-baseline --out "$R/large-joint1" > "$R/large-joint1.txt" 2>&1; log "large exit $?"
for t in allreduce errors; do
    { echo "=== $t, CROSSGPU_TEST_STANDINS=shared"; CROSSGPU_TEST_ADAPTER=$N0 CROSSGPU_TEST_STANDINS=shared timeout 150 /tmp/dev/t/$t 2>&1 | tail -25; echo "exit ${PIPESTATUS[0]}"; } >> "$R/tests.txt"
    log "tests $t"
done
{ grep -E '"(timeline_round_trip_us|empty_submit_us|gpu_[a-z_]+_us)"' -A1 "$R/limits.txt"
  for f in "$R"/small-*.txt "$R/large-joint1.txt"; do echo "== $(basename "$f")"; grep -E "HostBridge +(4096|32768|262144|67108864|268435456) " "$f"; done
  grep -E "===|tokens/s|host bridge" "$R/decode.txt"; grep -E "===|test result|exit" "$R/tests.txt"; } > "$OUT/summary.txt"
log finished
