#!/usr/bin/env bash
# Issue 6: after the phase-B kernel reads slots as vec4 and skips its own slot (it used to read
# all N through `select`), direct host reads against staging through device memory at large
# sizes; the limits with the duplex probes; the small sizes and the decode with the new
# defaults (phase A by kernel up to 64 KiB). $OUT/results6.tgz.
# Kept as the record of that run: CROSSGPU_PHASE_B_STAGE_BYTES was removed afterwards (staging
# lost to the vec4 kernel), so on today's build both of its variants run the same code.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results results6
timeout 90 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
ab() { # $1 name; $2 layouts; $3 wire
    for v in direct staged; do
        s=18446744073709551615; [ $v = staged ] && s=1048576
        CROSSGPU_PHASE_B_STAGE_BYTES=$s timeout 90 crossgpu bench allreduce --adapter "$N0" --layouts "$2" --modes bridge \
            --wire "$3" --no-baseline --out "$R/$1-$v" > "$R/$1-$v.txt" 2>&1; log "$1 $v exit $?"
    done
}
ab gpus-f32 "$NV" f32
ab gpus-auto "$NV" auto
ab one-gpu "$N0/2" auto
for k in 1 2; do
    timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$NV;$N0*1;$N0/2" --modes bridge --no-baseline \
        --max-bytes 1048576 --out "$R/small-$k" > "$R/small-$k.txt" 2>&1; log "small $k exit $?"
done
for l in "$N0" "$NV" "$NV" "$N0/2"; do
    { echo "=== CROSSGPU_DEVICES=$l"; CROSSGPU_DEVICES="$l" timeout 100 crossgpu decode --preset 27b --tokens 32; } >> "$R/decode.txt" 2>&1
    log "decode $l"
done
{ grep -E "gbps|round_trip" -A1 "$R/limits.txt" | grep -E "gbps|_us|median"
  for f in "$R"/*-direct.txt "$R"/*-staged.txt "$R"/small-*.txt; do echo "== $(basename $f)"; grep -E "HostBridge +(4096|32768|262144|1048576|16777216|67108864|268435456) " "$f"; done
  grep -E "===|tokens/s|tokens:" "$R/decode.txt"; } > "$OUT/summary.txt"
log finished
