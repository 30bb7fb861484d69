#!/usr/bin/env bash
# Issue 6, third session, final build on nvidia-h200-x2: the 27B decode on one GPU and on two
# (alternated, three each), the small and large all-reduce across the two GPUs beside NCCL-free
# loopback, and the all-reduce, tp, tp_model and wgpu-embedding tests with members spread over
# the GPUs (validation on). Results in $OUT/final-two-gpus.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results final-two-gpus
for k in 1 2 3; do
    decode "one-$k" CROSSGPU_DEVICES="$N0"
    decode "two-gpus-$k" CROSSGPU_DEVICES="$NV"
done
timeout 200 crossgpu bench allreduce --adapter "$N0" --layouts "$NV;$N0*1;$N0/2" --modes bridge --wire auto \
    --no-baseline --out "$R/allreduce" > "$R/allreduce.txt" 2>&1; log "allreduce exit $?"
for t in allreduce tp tp_model wgpu_embedding; do
    { echo "=== $t, CROSSGPU_TEST_ADAPTERS=$NV"; CROSSGPU_TEST_ADAPTERS=$NV timeout 200 /tmp/dev/t/$t 2>&1 | tail -30; echo "exit ${PIPESTATUS[0]}"; } >> "$R/tests.txt"
    log "tests $t"
done
{ grep -E "===|tokens/s|host bridge" "$R/decode.txt"; grep -h "tokens:" "$R/decode.txt" | sort | uniq -c
  grep -E " (4096|32768|262144|1048576|67108864|268435456) B" "$R/allreduce.txt"; grep -E "===|test result|exit" "$R/tests.txt"; } > "$OUT/summary.txt"
log finished
