#!/usr/bin/env bash
# Diagnosis (issue 6/7): why the small all-reduce took 29 µs in one run and 56 µs in another on
# one H200. Measures the small sizes cold, then after heavy GPU work (GPU clocks sampled between),
# each with CROSSGPU_MAX_IN_FLIGHT 128 (the default) and 512 (the old limit); soak rate with both;
# then the groups and reliability tests across the physical GPUs. Results in $OUT/results3.tgz.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results results3
clocks() { nvidia-smi --query-gpu=index,pstate,clocks.sm,clocks.mem,power.draw --format=csv,noheader | sed "s/^/[$1] /" >> "$R/clocks.txt"; }
small() { # $1 label; $2 max in flight
    clocks "$1 before"
    CROSSGPU_MAX_IN_FLIGHT=$2 timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$NV;$N0*1;$N0/2" --modes bridge \
        --no-baseline --max-bytes 262144 --out "$R/$1" > "$R/$1.txt" 2>&1; log "$1 exit $?"
    clocks "$1 after"
}
small cold-128 128
small cold-512 512
clocks "idle 5 s later"
log "heavy work: bench limits"
timeout 60 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "limits exit $?"
clocks "after limits"
small warm-128 128
small warm-512 512
small warm-128b 128
for f in 128 512; do
    CROSSGPU_MAX_IN_FLIGHT=$f CROSSGPU_DEVICES="$N0/3" timeout 60 crossgpu soak --rounds 150000 --members 3 --check-every 1000 > "$R/soak-$f.txt" 2>&1
    log "soak $f exit $?"
done
for name in groups reliability; do
    echo "=== $name (members round-robin over $NV)"
    CROSSGPU_TEST_ADAPTERS="$NV" timeout 100 /tmp/dev/t/$name --test-threads=1 2>&1 | grep -E "^test |test result|panicked|VALIDATION ERROR" | head -40
    echo "exit ${PIPESTATUS[0]}"
done > "$R/tests.txt" 2>&1
{ grep -h "HostBridge" "$R"/*-128*.txt "$R"/*-512.txt | head -0; for f in "$R"/cold-*.txt "$R"/warm-*.txt; do echo "== $(basename $f)"; grep -E "^\S+ +HostBridge +(4096|32768) " "$f"; done; grep -h "rounds:" "$R"/soak-*.txt; grep "test result" "$R/tests.txt"; cat "$R/clocks.txt"; } > "$OUT/summary.txt"
log finished
