#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one call: this build beside an older one, alternated, in
# REPEAT (default 3) processes each: what a restructuring must leave unchanged. prepare.sh with
# CROSSGPU_DEV_EXTRA="<older build's stripped crossgpu, renamed crossgpu-old>" first.
# PARTS (default "decode limits matvec"; add "allreduce", which alone fills most of a call):
#   decode:    the 27B-class decode on one member (CROSSGPU_DEVICES=N0), TOKENS (default 64);
#   profile:   the same decode's GPU profile (--profile 4, 16 tokens): time per kernel;
#   long:      the decode after a 600-token prompt (--prompt 600: a 666-position cache, which
#              this tree's decoder cuts attention over: attention_split), then its profile;
#   limits:    `bench limits` (the CPU cost of recording a dependent dispatch among them);
#   allreduce: HostBridge at 4 KiB-256 MiB on the one-GPU layouts N0/2 (two members on one
#              queue) and N0*2 (two queues), no wgpu baseline;
#   fold:      this build's decode (TOKENS) with and without --fold-norms
#              (Decoder::set_fold_norms), alternated, and each one's profile once; the older
#              build is not run;
#   matvec:    `bench matvec` of this build only: every f16 kernel and the quantized ones
#              (ggml blocks as stored) at the 27B-class shapes and SmolLM2-135M's.
# Results in $OUT/compare.tgz, a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results compare
builds=(crossgpu-old crossgpu)
for b in "${builds[@]}"; do command -v "$b" >/dev/null || { log "no $b on PATH"; exit 1; }; done
for part in ${PARTS:-decode limits matvec}; do
    for k in $(seq 1 "${REPEAT:-3}"); do
        for b in "${builds[@]}"; do
            case $part in
            decode)
                { echo "=== $b $k"; CROSSGPU_DEVICES=$N0 timeout 100 "$b" decode --preset 27b --tokens "${TOKENS:-64}"; } \
                    >> "$R/decode.txt" 2>&1 ;;
            long)
                { echo "=== $b $k"; CROSSGPU_DEVICES=$N0 timeout 150 "$b" decode --preset 27b --prompt 600 \
                    --tokens "${TOKENS:-64}"; } >> "$R/long.txt" 2>&1
                [ "$k" = 1 ] && { echo "=== $b"; CROSSGPU_DEVICES=$N0 timeout 150 "$b" decode --preset 27b \
                    --prompt 600 --tokens 16 --profile 4; } >> "$R/long-profile.txt" 2>&1 ;;
            profile)
                { echo "=== $b $k"; CROSSGPU_DEVICES=$N0 timeout 100 "$b" decode --preset 27b --tokens 16 --profile 4; } \
                    >> "$R/profile.txt" 2>&1 ;;
            limits)
                { echo "=== $b $k"; timeout 120 "$b" bench limits --adapter "$N0" --out "$R/limits-$b-$k"; } \
                    >> "$R/limits.txt" 2>&1 ;;
            allreduce)
                { echo "=== $b $k"; timeout 200 "$b" bench allreduce --adapter "$N0" --layouts "$N0/2;$N0*2" \
                    --modes bridge --no-baseline --out "$R/allreduce-$b-$k"; } >> "$R/allreduce.txt" 2>&1 ;;
            fold)
                [ "$b" = crossgpu ] || continue
                # shellcheck disable=SC2086 # $f is one flag or nothing
                for f in "" --fold-norms; do
                    { echo "=== $b ${f:-written} $k"; CROSSGPU_DEVICES=$N0 timeout 100 "$b" decode --preset 27b \
                        --tokens "${TOKENS:-64}" $f; } >> "$R/decode.txt" 2>&1
                    [ "$k" = 1 ] || continue
                    { echo "=== $b ${f:-written}"; CROSSGPU_DEVICES=$N0 timeout 100 "$b" decode --preset 27b \
                        --tokens 16 --profile 4 $f; } >> "$R/profile.txt" 2>&1
                done ;;
            matvec)
                [ "$b" = crossgpu ] && [ "$k" = 1 ] || continue
                { echo "=== $b"; timeout 300 "$b" bench matvec --adapter "$N0" --preset 27b --out "$R/matvec" \
                    --matvec-shapes ${MATVEC_SHAPES:-7168x5120,5120x5120,5120x17408,34816x5120,32000x5120,576x576,1536x576,576x1536,49152x576}; } \
                    >> "$R/matvec.txt" 2>&1 ;;
            esac
            log "$part $b $k exit $?"
        done
    done
done
{ grep -E "^===|tokens/s" "$R/decode.txt" "$R/long.txt" 2>/dev/null
  grep -E "^===|dispatch|record" "$R/limits.txt" 2>/dev/null
  grep -E "^===| (4 KiB|32 KiB|256 KiB|4 MiB|64 MiB|256 MiB) " "$R/allreduce.txt" 2>/dev/null
  cat "$R/matvec.txt" 2>/dev/null; } > "$OUT/summary.txt"
log finished
