#!/usr/bin/env bash
# On the GPU machine (prepare.sh first): the cross-vendor example (one member per vendor and
# driver: the first NVIDIA GPU and lavapipe, decoder split by measured speed), the wgpu
# application example and a user's kernel on the GPU beside lavapipe (custom_kernel), then every test binary with the Khronos validation layer on. With two
# or more NVIDIA GPUs the tests' members are spread round-robin over them
# (CROSSGPU_TEST_ADAPTERS); with one, they are members sharing its queue
# (CROSSGPU_TEST_ADAPTER, CROSSGPU_TEST_STANDINS=shared). docs/DEVICES.md and
# docs/RELIABILITY.md show the results. $OUT/tests.tgz, summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results tests
{ timeout 120 cross_vendor; echo "exit $?"; timeout 60 wgpu_app; echo "exit $?"
  CROSSGPU_DEVICES="$N0,llvmpipe" timeout 60 custom_kernel; echo "exit $?"; } > "$R/cross-vendor.txt" 2>&1; log "examples"
if [ "$NV" != "$N0" ]; then
    export CROSSGPU_TEST_ADAPTERS="$NV"; WHERE="members round-robin over adapters $NV"
else
    export CROSSGPU_TEST_ADAPTER="$N0" CROSSGPU_TEST_STANDINS=shared; WHERE="members sharing adapter $N0's queue"
fi
# The most telling subjects first (tests/suite is one binary; a filter picks a subject); none
# starts after 480 s into the call (the call's limit is 600 s).
run_tests() { # LABEL BINARY [FILTER]
    if [ "$SECONDS" -gt 480 ]; then echo "=== $1 NOT RUN: out of time"; return; fi
    echo "=== $1 ($WHERE)"
    timeout 100 "/tmp/dev/t/$2" --test-threads=1 ${3:+"$3"} 2>&1 | grep -E "^test |test result|SKIPPED|panicked|VALIDATION ERROR|suppressed|resident|error" | head -60
    echo "exit ${PIPESTATUS[0]}"
}
{
    for subject in allreduce two_comms user_kernels tp_model tp_kernels tp_linear tp_decoder poll decode_modes replay properties kernels groups errors drop_orders teardown; do
        run_tests "$subject" suite "$subject::"
    done
    for name in reliability wgpu_embedding validation_canary; do run_tests "$name" "$name"; done
} > "$R/tests.txt" 2>&1
{ grep -E "split|equal|OK|exit" "$R/cross-vendor.txt"; grep -E "===|test result|exit" "$R/tests.txt"; } > "$OUT/summary.txt"
log finished
