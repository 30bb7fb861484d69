#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one call: the prompt as a batch (`Decoder::prefill`) on
# one member — `crossgpu decode --prompt PROMPT` (default 512 tokens, a warm-up run then a timed
# one) on the 27B-class preset at 64 layers and cut to 16 (llama.cpp's llama-bench pp512 was
# measured on the 16-layer cut), then on GGUF files of the 16-layer cut written by
# scripts/write_gguf.py in TYPES (default "q8_0 q4_1"; the gguf package's wheels carried in
# .dev/pywheels). The preset runs once per value of CROSSGPU_MATRIX_UNITS in UNITS (default
# "1 0": the f16 products on the matrix units, then on the tiled kernel). REPEAT (default 3)
# processes each, alternated. When the test suite's binary was carried (.dev's `suite`), the
# prompt's tests run on the GPU first (its matrix units required). Results in $OUT/prompt.tgz, a
# summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results prompt
mkdir -p /tmp/py && for w in .dev/pywheels/*.whl; do python3 -m zipfile -e "$w" /tmp/py; done
export PYTHONPATH=/tmp/py
if command -v suite >/dev/null; then
    CROSSGPU_DEVICES=$N0 CROSSGPU_TEST_REQUIRE=cooperative_matrix timeout 300 suite --test-threads 1 \
        prompt:: > "$R/tests.txt" 2>&1
    log "prompt tests exit $?"
fi
read -ra types <<< "${TYPES-q8_0 q4_1}"
for t in "${types[@]}"; do
    { time python3 scripts/write_gguf.py --shape 27b --layers 16 --type "$t" --out "/tmp/27b-16-$t.gguf"; } \
        >> "$R/write.txt" 2>&1
    log "write $t exit $?"
done
n=${PROMPT:-512}
for k in $(seq 1 "${REPEAT:-3}"); do
    for layers in 64 16; do
        for units in ${UNITS:-1 0}; do
            { echo "=== preset $layers layers, matrix units $units, $k"; CROSSGPU_MATRIX_UNITS=$units \
                CROSSGPU_DEVICES=$N0 timeout 120 crossgpu decode --preset 27b --layers "$layers" \
                --prompt "$n" --tokens 32; } >> "$R/decode.txt" 2>&1
            log "preset $layers units $units $k exit $?"
        done
    done
    for t in "${types[@]}"; do
        { echo "=== $t 16 layers $k"; CROSSGPU_DEVICES=$N0 timeout 120 crossgpu decode --model "/tmp/27b-16-$t.gguf" \
            --prompt "$n" --tokens 32; } >> "$R/decode.txt" 2>&1
        log "$t $k exit $?"
    done
done
{ grep -E "^test |test result" "$R/tests.txt" 2>/dev/null; grep -E "^===|prompt:|tokens/s,|loaded" "$R/decode.txt"; } \
    > "$OUT/summary.txt"
log finished
