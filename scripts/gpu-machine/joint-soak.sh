#!/usr/bin/env bash
# Issue 6/7, third session: 1,000,000 all-reduce rounds on three members sharing one queue of
# the H200 (every phase of every round one joint batch), checked against the CPU every 1000th
# round and bitwise across members, memory and handles before and after.
# Results in $OUT/joint-soak.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results joint-soak
CROSSGPU_DEVICES="$N0/3" timeout 300 crossgpu soak --rounds 1000000 --members 3 --check-every 1000 > "$R/soak.txt" 2>&1; log "soak exit $?"
tail -12 "$R/soak.txt" > "$OUT/summary.txt"
log finished
