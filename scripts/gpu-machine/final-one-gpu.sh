#!/usr/bin/env bash
# Issue 6, third session, final build on one H200: the limits, the all-reduce on every one-GPU
# layout beside the wgpu baseline (same call), matvec, the 27B decode on one member and on two
# sharing a queue (alternated, three each), a 200,000-round soak on three members sharing a
# queue (the joint-submit path), and the reliability, tp and tp_model tests on the H200 (members
# sharing its queue) with validation. Results in $OUT/final-one-gpu.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results final-one-gpu
timeout 120 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
timeout 300 crossgpu bench allreduce --adapter "$N0" --layouts "$N0*1;$N0/2;$N0/3;$N0/4;$N0*2;$N0,$N0" --modes bridge \
    --members 2,3,4 --out "$R/allreduce" > "$R/allreduce.txt" 2>&1; log "allreduce exit $?"
timeout 60 crossgpu bench matvec --adapter "$N0" --out "$R/matvec" > "$R/matvec.txt" 2>&1; log "matvec exit $?"
for k in 1 2 3; do
    decode "one-$k" CROSSGPU_DEVICES="$N0"
    decode "shared-$k" CROSSGPU_DEVICES="$N0/2"
done
CROSSGPU_DEVICES="$N0/3" timeout 120 crossgpu soak --rounds 200000 --members 3 --check-every 1000 > "$R/soak.txt" 2>&1; log "soak exit $?"
for t in reliability tp tp_model; do
    { echo "=== $t, CROSSGPU_TEST_STANDINS=shared"; CROSSGPU_TEST_ADAPTER=$N0 CROSSGPU_TEST_STANDINS=shared timeout 200 /tmp/dev/t/$t 2>&1 | tail -30; echo "exit ${PIPESTATUS[0]}"; } >> "$R/tests.txt"
    log "tests $t"
done
{ grep -E '"(device_copy_kernel_gbps|timeline_round_trip_us|empty_submit_us|gpu_[a-z_]+_us)"' -A1 "$R/limits.txt"
  grep -E " (4096|32768|262144|67108864|268435456) B" "$R/allreduce.txt"; grep -E "^matvec" "$R/matvec.txt"
  grep -E "===|tokens/s|host bridge" "$R/decode.txt"; grep -h "tokens:" "$R/decode.txt" | sort | uniq -c
  tail -5 "$R/soak.txt"; grep -E "===|test result|exit" "$R/tests.txt"; } > "$OUT/summary.txt"
log finished
