#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (prepare.sh first; carry .gl .vvl .dev), in one call: the
# 27B-class decode on one member (CROSSGPU_DEVICES=N0, TOKENS, default 64) under each of
# VARIANTS, `crossgpu decode` flag sets separated by `|` (default "|--fold-norms": the
# defaults, then the residual norms folded into the products; a set starting `bin=NAME` runs
# the binary NAME instead, e.g. an older build carried through prepare.sh's
# CROSSGPU_DEV_EXTRA, for two builds in one call; words NAME=VALUE set the environment),
# alternated, REPEAT (default 3)
# processes each, with PyTorch + CUDA graphs (torch_decode.py) once a round beside them
# (TORCH=0 leaves it out); then the GPU profile (--profile 4, 16 tokens) once per variant
# (PROFILE=0 leaves it out); then, where the test suite's binary was carried and TESTS (test
# name filters, default "decode_modes:: tp_kernels::pending_norms") is not 0, those tests on
# the GPU (members sharing its queue), validation layer on. The figures of docs/BENCHMARKS.md
# "The norms". Results in $OUT/variants.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results variants
IFS='|' read -ra variants <<< "${VARIANTS-|--fold-norms}"
# VARIANTS="" is the defaults alone (read gives no element for an empty line).
[ "${#variants[@]}" -eq 0 ] && variants=("")
decode() { # $1 a variant, then more flags
    local v=$1 bin=crossgpu envs=() flags=() word; shift
    # shellcheck disable=SC2086 # a variant holds several words
    for word in $v; do
        if [[ $word == bin=* ]]; then bin=${word#bin=}
        elif [[ $word =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$word")
        else flags+=("$word"); fi
    done
    env CROSSGPU_DEVICES="$N0" "${envs[@]}" timeout 100 "$bin" decode --preset 27b "$@" "${flags[@]}"
}
for k in $(seq 1 "${REPEAT:-3}"); do
    for v in "${variants[@]}"; do
        { echo "=== [$v] $k"; decode "$v" --tokens "${TOKENS:-64}"; } >> "$R/decode.txt" 2>&1
        log "decode [$v] $k exit $?"
    done
    torch_round "$k"
done
if [ "${PROFILE:-1}" != 0 ]; then
    for v in "${variants[@]}"; do
        { echo "=== [$v]"; decode "$v" --tokens 16 --profile 4; } >> "$R/profile.txt" 2>&1
        log "profile [$v] exit $?"
    done
fi
if [ -x /tmp/dev/t/suite ] && [ "${TESTS-x}" != 0 ]; then
    # shellcheck disable=SC2086 # several filters
    CROSSGPU_TEST_ADAPTER=$N0 CROSSGPU_TEST_STANDINS=shared timeout 240 /tmp/dev/t/suite --test-threads 1 \
        ${TESTS:-decode_modes:: tp_kernels::pending_norms} > "$R/tests.txt" 2>&1
    log "tests exit $?"
fi
{ grep -E "^===|tokens/s|tokens:" "$R/decode.txt" | sed -E 's/(tokens: \[[0-9, ]{60})[^]]*\]/\1...]/'
  grep -E "^===|tokens/s" "$R/torch.txt" 2>/dev/null
  cat "$R/profile.txt" 2>/dev/null
  grep -E "^test |test result|VALIDATION|skip|panicked|differ" "$R/tests.txt" 2>/dev/null; } > "$OUT/summary.txt"
log finished
