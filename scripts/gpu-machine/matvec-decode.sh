#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (prepare.sh first), in one call, the figures of
# docs/BENCHMARKS.md "Matrix-vector products", "The fused decoder kernels" and "27B-class
# decode": the copy kernel's bandwidth (bench limits), then every f16 matvec kernel and each
# fused decoder kernel beside the dispatches it replaces (bench matvec), REPEAT (default 3)
# processes; then the 27B-class decode alternated DECODE_REPEAT (default 4) times: one member
# (64 tokens), two members sharing its queue (32 tokens) and, where the machine has two or
# more GPUs, every GPU (32 tokens). Every decode prints the tokens (the same in every process
# and layout), dispatches per token and the weight-streaming ratio.
# Results in $OUT/matvec-decode.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results matvec-decode
timeout 90 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
for k in $(seq 1 "${REPEAT:-3}"); do
    timeout 120 crossgpu bench matvec --adapter "$N0" --out "$R/matvec-$k" > "$R/matvec-$k.txt" 2>&1; log "matvec $k exit $?"
done
for k in $(seq 1 "${DECODE_REPEAT:-4}"); do
    TOKENS=64 decode "one-$k" CROSSGPU_DEVICES="$N0"
    TOKENS=32 decode "shared-$k" CROSSGPU_DEVICES="$N0/2"
    [ "$NV" != "$N0" ] && TOKENS=32 decode "all-gpus-$k" CROSSGPU_DEVICES="$NV"
done
{ grep -h -A1 device_copy_kernel "$R/limits.txt"; grep -H "^matvec" "$R"/matvec-*.txt
  grep -E "===|tokens/s|dispatches|ratio" "$R/decode.txt"; grep -h "tokens:" "$R/decode.txt" | sort | uniq -c; } > "$OUT/summary.txt"
log finished
