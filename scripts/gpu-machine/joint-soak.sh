#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (prepare.sh first): the soak of docs/RELIABILITY.md, 1,000,000
# all-reduce rounds on three members sharing one queue of the first GPU (so every phase of
# every round is one joint batch), sizes from 1 element to 64 Ki elements on both wires,
# checked against the CPU's f64 sum every 1000th round and bitwise across members, with
# resident memory, file descriptors and live Vulkan objects before and after.
# With two or more NVIDIA GPUs it then soaks DevicePoll across the first two the same way.
# ROUNDS overrides the number of rounds. Results in $OUT/joint-soak.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results joint-soak
CROSSGPU_DEVICES="$N0/3" timeout 300 crossgpu soak --rounds "${ROUNDS:-1000000}" --members 3 --check-every 1000 > "$R/soak.txt" 2>&1
log "soak exit $?"
tail -12 "$R/soak.txt" > "$OUT/summary.txt"
if [ "$NV" != "$N0" ]; then
    TWO=$(echo "$NV" | cut -d, -f1-2)
    CROSSGPU_ALLREDUCE=poll CROSSGPU_DEVICES="$TWO" timeout 280 crossgpu soak --rounds "${ROUNDS:-1000000}" --members 2 \
        --check-every 1000 > "$R/soak-poll.txt" 2>&1
    log "DevicePoll soak exit $?"
    tail -12 "$R/soak-poll.txt" >> "$OUT/summary.txt"
fi
log finished
