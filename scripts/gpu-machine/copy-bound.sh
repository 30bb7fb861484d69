#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (prepare.sh first; .gl .vvl .dev carried), in one call, the
# device-local copy bound of docs/BENCHMARKS.md "The device-local copy bound": for each of
# SIZES (bytes per buffer, default 256 MiB), REPEAT (default 3) processes each of `crossgpu bench
# limits` (the copy by kernel variant and vkCmdCopyBuffer) and of PyTorch's CUDA copy
# (scripts/gpu-machine/cuda_copy.py), alternated; then, unless
# DECODE=0, the 27B-class decode (TOKENS, default 64) printing its weight streaming against the
# Vulkan copy kernel and against the first CUDA copy's median (--copy-bound-gbps).
# Results in $OUT/copy-bound.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results copy-bound
SIZES=${SIZES:-268435456}
for size in $SIZES; do
    for k in $(seq 1 "${REPEAT:-3}"); do
        timeout 120 crossgpu bench limits --adapter "$N0" --limit-bytes "$size" --out "$R/limits-$size-$k" \
            > "$R/limits-$size-$k.txt" 2>&1; log "limits $size $k exit $?"
        timeout 120 python3 scripts/gpu-machine/cuda_copy.py "$size" > "$R/cuda-$size-$k.txt" 2>&1; log "cuda $size $k exit $?"
    done
done
if [ "${DECODE:-1}" != 0 ]; then
    cuda=$(grep -o 'median [0-9.]*' "$R/cuda-${SIZES%% *}-1.txt" | awk '{print $2}')
    CROSSGPU_DEVICES=$N0 timeout 300 crossgpu decode --preset 27b --tokens "${TOKENS:-64}" --copy-bound-gbps "${cuda:-4270}" \
        > "$R/decode.txt" 2>&1; log "decode exit $?"
fi
{ for size in $SIZES; do for k in $(seq 1 "${REPEAT:-3}"); do
    echo "== $size bytes, process $k"; grep -E "device-local|copy_vec4|vkCmdCopyBuffer" "$R/limits-$size-$k.txt"
    cat "$R/cuda-$size-$k.txt"
  done; done; grep -E "tokens/s|weight streaming" "$R/decode.txt" 2>/dev/null; } > "$OUT/summary.txt"
log finished
