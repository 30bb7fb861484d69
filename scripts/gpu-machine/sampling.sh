#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one call: what drawing the next token on the device costs.
# When the test suite's binary was carried (.dev's `suite`), its `sampling::` tests run on the
# GPU first (the draw kernels against the host's draws and the f64 softmax). Then `crossgpu
# decode` on the 27B-class preset cut to LAYERS (default "16 1") layers, 128 tokens, once per
# draw — greedy, from every token (temperature 0.8), top-k 40, top-k 40 with top-p 0.95 —
# REPEAT (default 3) processes each, alternated (with `crossgpu-old` beside them where .dev
# carries one: an older build's greedy decode); and one `--profile 4` run per draw (the draw
# kernels' GPU time by name). Results in $OUT/sampling.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results sampling
if command -v suite >/dev/null; then
    CROSSGPU_DEVICES=$N0 timeout 300 suite --test-threads 1 sampling:: > "$R/tests.txt" 2>&1
    log "sampling tests exit $?"
fi
draws=("greedy:" "every:--temperature 0.8" "top-k:--temperature 0.8 --top-k 40"
    "nucleus:--temperature 0.8 --top-k 40 --top-p 0.95")
runs=("${draws[@]}")
command -v crossgpu-old >/dev/null && runs=("old-greedy:" "${draws[@]}")
for k in $(seq 1 "${REPEAT:-3}"); do
    for layers in ${LAYERS:-16 1}; do
        for d in "${runs[@]}"; do
            bin=crossgpu; [ "${d%%:*}" = old-greedy ] && bin=crossgpu-old
            # shellcheck disable=SC2086 # the draw's flags are several words
            { echo "=== ${d%%:*} $layers layers $k"; CROSSGPU_DEVICES=$N0 timeout 120 $bin decode --preset 27b \
                --layers "$layers" --tokens 128 ${d#*:}; } >> "$R/decode.txt" 2>&1
            log "${d%%:*} $layers $k exit $?"
        done
    done
done
for d in "${runs[@]}"; do
    bin=crossgpu; [ "${d%%:*}" = old-greedy ] && bin=crossgpu-old
    # shellcheck disable=SC2086
    { echo "=== profile ${d%%:*}"; CROSSGPU_DEVICES=$N0 timeout 120 $bin decode --preset 27b --layers 16 \
        --tokens 16 --profile 4 ${d#*:}; } >> "$R/profile.txt" 2>&1
    log "profile ${d%%:*} exit $?"
done
{ grep -E "^test |test result" "$R/tests.txt" 2>/dev/null; grep -E "^===|tokens/s,|next token" "$R/decode.txt"
    grep -E "^===|sample|select|argmax" "$R/profile.txt"; } > "$OUT/summary.txt"
log finished
