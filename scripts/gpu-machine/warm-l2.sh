#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (prepare.sh first; carry .gl .vvl .dev), in one call, the
# figures of docs/BENCHMARKS.md "Weights warmed into L2":
#   1. the 27B-class decode on one member (CROSSGPU_DEVICES=N0, TOKENS, default 64) with each
#      product's first weights warmed into L2 beside the norm or attention before it
#      (`--warm-l2 MIB`, Decoder::set_warm_l2) at each of WARM (MiB, default "0 8 16 32 48"),
#      alternated, REPEAT (default 3) processes each, and PyTorch + CUDA graphs
#      (torch_decode.py) once a round beside them (TORCH=0 leaves it out);
#      With TYPES (e.g. "q4_1 q4_k_m"), the same shape cut to 16 layers as GGUF files of those
#      types (scripts/write_gguf.py; gguf's wheels carried in .dev/pywheels) decodes in the
#      same rounds at each of WARM (8-bit inputs, the default on a GPU); F16=0 leaves the
#      27B preset out.
#   2. the GPU profile (--profile 4, 16 tokens) once at each of PROFILE (default "0 16"; "" none);
#   3. where the test suite's binary was carried (.dev's t/suite) and TESTS is not 0, the
#      warm's tests and the decode modes' on the GPU (members sharing its queue), validation
#      layer on.
# Results in $OUT/warm.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results warm
read -ra types <<< "${TYPES:-}"
if [ ${#types[@]} -gt 0 ]; then
    mkdir -p /tmp/py && for w in .dev/pywheels/*.whl; do python3 -m zipfile -e "$w" /tmp/py; done
    for t in "${types[@]}"; do
        PYTHONPATH=/tmp/py python3 scripts/write_gguf.py --shape 27b --layers 16 --type "$t" \
            --out "/tmp/27b-16-$t.gguf" >> "$R/write.txt" 2>&1
        log "write $t exit $?"
    done
fi
for k in $(seq 1 "${REPEAT:-3}"); do
    for w in ${WARM:-0 8 16 32 48}; do
        if [ "${F16:-1}" != 0 ]; then
            # shellcheck disable=SC2086 # DECODE_ARGS holds several words
            { echo "=== warm $w $k"; CROSSGPU_DEVICES=$N0 timeout 100 crossgpu decode --preset 27b \
                --tokens "${TOKENS:-64}" --warm-l2 "$w" ${DECODE_ARGS:-}; } >> "$R/decode.txt" 2>&1
            log "decode warm $w $k exit $?"
        fi
        for t in "${types[@]}"; do
            { echo "=== $t warm $w $k"; CROSSGPU_DEVICES=$N0 timeout 100 crossgpu decode \
                --model "/tmp/27b-16-$t.gguf" --tokens "${TOKENS:-64}" --warm-l2 "$w"; } >> "$R/decode.txt" 2>&1
            log "decode $t warm $w $k exit $?"
        done
    done
    torch_round "$k"
done
for w in ${PROFILE-0 16}; do
    { echo "=== warm $w"; CROSSGPU_DEVICES=$N0 timeout 100 crossgpu decode --preset 27b --tokens 16 \
        --profile 4 --warm-l2 "$w"; } >> "$R/profile.txt" 2>&1
    log "profile warm $w exit $?"
done
if [ -x /tmp/dev/t/suite ] && [ "${TESTS:-1}" != 0 ]; then
    CROSSGPU_TEST_ADAPTER=$N0 CROSSGPU_TEST_STANDINS=shared timeout 240 /tmp/dev/t/suite --test-threads 1 \
        warm_l2:: decode_modes:: > "$R/tests.txt" 2>&1
    log "tests exit $?"
fi
{ grep -E "^===|tokens/s|tokens:" "$R/decode.txt" | sed -E 's/(tokens: \[[0-9, ]{60})[^]]*\]/\1...]/'
  grep -E "^===|tokens/s" "$R/torch.txt" 2>/dev/null
  cat "$R/profile.txt"
  grep -E "^test |test result|VALIDATION|skip" "$R/tests.txt" 2>/dev/null; } > "$OUT/summary.txt"
log finished
