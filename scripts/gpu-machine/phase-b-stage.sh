#!/usr/bin/env bash
# Issue 6 experiment, one thing varied at a time: phase B reading the peers' slots straight from
# host memory in the reduce shader (default) against copying them into device memory with the
# copy engine first (CROSSGPU_PHASE_B_STAGE_BYTES=1 MiB), on two physical GPUs (f32 and auto
# wire) and on one GPU (loopback, 2 members sharing a queue). Then the small-size latency in
# separate processes, plain and pinned to two cores (the 29-vs-55 µs bimodality), and the 27B
# decode on 1 GPU, 2 GPUs and 2 stand-ins sharing a queue. Results in $OUT/results4.tgz.
# Kept as the record of that run: CROSSGPU_PHASE_B_STAGE_BYTES was removed afterwards (staging
# lost to the vec4 kernel), so on today's build both of its variants run the same code.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results results4
ab() { # $1 name; $2 layouts; $3 wire
    for v in direct staged; do
        s=18446744073709551615; [ $v = staged ] && s=1048576
        CROSSGPU_PHASE_B_STAGE_BYTES=$s timeout 90 crossgpu bench allreduce --adapter "$N0" --layouts "$2" --modes bridge \
            --wire "$3" --no-baseline --out "$R/$1-$v" > "$R/$1-$v.txt" 2>&1; log "$1 $v exit $?"
    done
}
ab gpus-f32 "$NV" f32
ab gpus-auto "$NV" auto
ab one-gpu "$N0*1;$N0/2" auto
for k in 1 2 3; do
    timeout 30 crossgpu bench allreduce --adapter "$N0" --layouts "$N0*1;$NV" --modes bridge --no-baseline --max-bytes 65536 --out "$R/small-$k" > "$R/small-$k.txt" 2>&1
    taskset -c 2,3 timeout 30 crossgpu bench allreduce --adapter "$N0" --layouts "$N0*1;$NV" --modes bridge --no-baseline --max-bytes 65536 --out "$R/small-pinned-$k" > "$R/small-pinned-$k.txt" 2>&1
    log "small $k"
done
for l in "$N0" "$NV" "$N0/2"; do
    { echo "=== CROSSGPU_DEVICES=$l"; CROSSGPU_DEVICES="$l" timeout 100 crossgpu decode --preset 27b --tokens 32; echo "exit $?"; } >> "$R/decode-27b.txt" 2>&1
    log "decode $l"
done
{ for f in "$R"/*-direct.txt "$R"/*-staged.txt; do echo "== $(basename $f)"; grep -E "HostBridge +(32768|1048576|16777216|67108864|268435456) " "$f"; done
  for f in "$R"/small-*.txt; do echo "== $(basename $f)"; grep -E "HostBridge +(4096|32768) " "$f"; done
  grep -E "===|tokens/s" "$R/decode-27b.txt"; } > "$OUT/summary.txt"
log finished
