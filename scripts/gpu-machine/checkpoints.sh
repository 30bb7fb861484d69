#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one call: the decode of checkpoints read from disk beside
# the seeded preset of the same shape. scripts/write_gguf.py writes the 27B-class shape cut to
# LAYERS (default 16) layers as GGUF files of TYPES (default "f16 f16i q8_0 q4_1"; also q4_0
# and q4_k_m; f16i: F16 holding the seeded preset's kind of values, integers times a power of
# two) (llama.cpp's gguf package: its wheel and those it needs carried in .dev/pywheels,
# unpacked onto PYTHONPATH here); then REPEAT (default 3) rounds, alternated, of `crossgpu
# decode --preset 27b --layers LAYERS` and `crossgpu decode --model FILE` for each file, one
# member (CROSSGPU_DEVICES=N0), TOKENS (default 64) tokens; quantized files take 8-bit inputs (the
# default on a GPU). With F32=1, each Q8_0, Q4_0, Q4_1 and Q4_K_M file also with --f32-activations
# (its products' inputs in f32) in the same rounds, and each file's GPU profile once both ways
# after them. Where a
# `llama-bench` (llama.cpp built with its Vulkan backend) is on PATH (carried in
# .dev/dev.tar.xz), each round also runs it on each file (`-p 0 -n TOKENS -r 1 -ngl 99`: token
# generation only, every layer on the GPU); where an older build is (`crossgpu-old`, prepare.sh's
# CROSSGPU_DEV_EXTRA), it decodes each file too, in the same rounds (e.g. the kernels a file's
# formats took before a change). Results in $OUT/checkpoints.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results checkpoints
mkdir -p /tmp/py && for w in .dev/pywheels/*.whl; do python3 -m zipfile -e "$w" /tmp/py; done
export PYTHONPATH=/tmp/py
layers=${LAYERS:-16}
read -ra types <<< "${TYPES:-f16 f16i q8_0 q4_1}"
q8_types=" q8_0 q4_0 q4_1 q4_k_m "   # the files whose products take 8-bit inputs (--f32-activations: not)
for t in "${types[@]}"; do
    args=(--type "$t"); [ "$t" = f16i ] && args=(--type f16 --values integers)
    { time python3 scripts/write_gguf.py --shape 27b --layers "$layers" "${args[@]}" --out "/tmp/27b-$layers-$t.gguf"; } \
        >> "$R/write.txt" 2>&1
    log "write $t exit $? $(du -h "/tmp/27b-$layers-$t.gguf" | cut -f1)"
done
for k in $(seq 1 "${REPEAT:-3}"); do
    { echo "=== preset $k"; CROSSGPU_DEVICES=$N0 timeout 100 crossgpu decode --preset 27b --layers "$layers" \
        --tokens "${TOKENS:-64}"; } >> "$R/decode.txt" 2>&1
    log "preset $k exit $?"
    for t in "${types[@]}"; do
        { echo "=== $t $k"; CROSSGPU_DEVICES=$N0 timeout 150 crossgpu decode --model "/tmp/27b-$layers-$t.gguf" \
            --tokens "${TOKENS:-64}"; } >> "$R/decode.txt" 2>&1
        log "$t $k exit $?"
        if [ -n "${F32:-}" ] && [[ "$q8_types" == *" $t "* ]]; then
            { echo "=== $t f32-activations $k"; CROSSGPU_DEVICES=$N0 timeout 150 crossgpu decode \
                --model "/tmp/27b-$layers-$t.gguf" --tokens "${TOKENS:-64}" --f32-activations; } >> "$R/decode.txt" 2>&1
            log "$t f32-activations $k exit $?"
        fi
        if command -v crossgpu-old >/dev/null; then
            { echo "=== $t crossgpu-old $k"; CROSSGPU_DEVICES=$N0 timeout 150 crossgpu-old decode \
                --model "/tmp/27b-$layers-$t.gguf" --tokens "${TOKENS:-64}"; } >> "$R/decode.txt" 2>&1
            log "$t crossgpu-old $k exit $?"
        fi
        if command -v llama-bench >/dev/null; then
            { echo "=== $t llama-bench $k"; timeout 150 llama-bench -m "/tmp/27b-$layers-$t.gguf" -p 0 \
                -n "${TOKENS:-64}" -r 1 -ngl 99; } >> "$R/llama.txt" 2>&1
            log "$t llama-bench $k exit $?"
        fi
    done
done
if [ -n "${F32:-}" ]; then
    for t in "${types[@]}"; do
        [[ "$q8_types" == *" $t "* ]] || continue
        for inputs in "" --f32-activations; do
            { echo "=== profile $t $inputs"; CROSSGPU_DEVICES=$N0 timeout 150 crossgpu decode \
                --model "/tmp/27b-$layers-$t.gguf" --tokens 8 --profile 4 $inputs; } >> "$R/profile.txt" 2>&1
            log "profile $t $inputs exit $?"
        done
    done
fi
{ grep -E "^===|tokens/s|read |loaded" "$R/decode.txt"; grep -E "^===|tg" "$R/llama.txt" 2>/dev/null; } > "$OUT/summary.txt"
log finished
