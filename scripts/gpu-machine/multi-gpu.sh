#!/usr/bin/env bash
# On a machine with two or more NVIDIA GPUs (nvidia-h200-x2; prepare.sh first), the figures of
# docs/BENCHMARKS.md "All-reduce across two H200s" and the two-GPU decode. PARTS (default all,
# space-separated; a device call is at most 600 s, so split them over two calls) picks:
#   limits     the limits on the first GPU (copy bandwidths to and from host memory: the bus
#              bound; the DevicePoll wake) and the relay step across the first two GPUs;
#   allreduce  crossgpu's all-reduce across the GPUs at every size from 4 KiB to 256 MiB:
#              HostBridge and DevicePoll on the f32 wire (the same bytes as NCCL's f32
#              all-reduce) beside the wgpu baseline (one wgpu device per GPU), HostBridge on the
#              automatic wire (f16 from 1 MiB), Generic up to 4 MiB;
#   nccl       NCCL through torch.distributed at the same sizes and schedule
#              (nccl_allreduce.py), with its defaults (NVLink), then NCCL_P2P_DISABLE=1;
#   small      REPEAT (default 3) more processes each of crossgpu (HostBridge and DevicePoll,
#              f32 wire) and of NCCL through host memory at 4-256 KiB, alternated: small rounds
#              vary from process to process, so compare the spreads;
#   decode     the 27B-class decode on one GPU (HostBridge: nothing to reduce) and on every GPU
#              with HostBridge and with DevicePoll (the fused kernels), each DevicePoll step
#              replayed and recorded (--no-replay), alternated DECODE_REPEAT (default 3) times;
#   soak       1,000,000 DevicePoll rounds (ROUNDS) across the first two GPUs, checked;
#   collectives every collective (`crossgpu bench collectives`, HostBridge and DevicePoll, 4 KiB
#              to 256 MiB) across the first two GPUs beside NCCL's same collective with
#              NCCL_P2P_DISABLE=1 and with its defaults, one process per GPU (issue 32's targets).
# Results in $OUT/results.tgz (a file per run), a summary in $OUT/summary.txt.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results results
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  nvidia-smi topo -m; nproc; python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} > "$R/machine.txt" 2>&1
NGPU=$(echo "$NV" | tr , '\n' | wc -l)
if [ "$NGPU" -lt 2 ]; then log "only one NVIDIA adapter ($NV): use one-gpu.sh"; exit 1; fi
THREE=$(echo "$NV,$NV" | cut -d, -f1-3)
LAYOUTS="$NV"; [ "$NGPU" -eq 2 ] && LAYOUTS="$NV;$THREE"
[ "$NGPU" -ge 4 ] && LAYOUTS="$(echo "$NV" | cut -d, -f1-2);$THREE;$(echo "$NV" | cut -d, -f1-4)"
MEMBERS=$(echo "$LAYOUTS" | tr ';' '\n' | awk -F, '{print NF}' | paste -sd, -)
log "NVIDIA adapters: $NV ($NGPU); layouts $LAYOUTS (members $MEMBERS)"
PARTS=" ${PARTS:-limits allreduce nccl small decode soak collectives} "
part() { [[ "$PARTS" == *" $1 "* ]]; }
TWO=$(echo "$NV" | cut -d, -f1-2)
if part limits; then
timeout 120 crossgpu bench limits --adapter "$N0" --pair "$(echo "$TWO" | cut -d, -f2)" --out "$R/limits" \
    > "$R/limits.txt" 2>&1; log "limits exit $?"
fi
if part allreduce; then
timeout 240 crossgpu bench allreduce --adapter "$N0" --layouts "$LAYOUTS" --modes bridge,sync_fd,poll --wire f32 \
    --members "$MEMBERS" --baseline-adapters "$NV" --out "$R/cg-f32" > "$R/cg-f32.txt" 2>&1; log "crossgpu f32 wire exit $?"
timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$NV" --modes bridge --wire auto --no-baseline \
    --out "$R/cg-auto" > "$R/cg-auto.txt" 2>&1; log "crossgpu auto wire exit $?"
timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$NV" --modes generic --wire f32 --no-baseline \
    --max-bytes 4194304 --out "$R/cg-generic" > "$R/cg-generic.txt" 2>&1; log "crossgpu Generic exit $?"
fi
if part nccl; then
for g in $(seq 2 "$NGPU"); do
    [ "$g" -le 4 ] || continue
    timeout 150 python3 scripts/gpu-machine/nccl_allreduce.py --gpus "$g" --label default \
        --out "$R/nccl-default-$g.json" > "$R/nccl-default-$g.txt" 2>&1; log "NCCL defaults, $g GPUs exit $?"
    NCCL_P2P_DISABLE=1 timeout 150 python3 scripts/gpu-machine/nccl_allreduce.py --gpus "$g" --label p2p-disabled --port 29518 \
        --out "$R/nccl-nop2p-$g.json" > "$R/nccl-nop2p-$g.txt" 2>&1; log "NCCL P2P disabled, $g GPUs exit $?"
done
fi
if part small; then
for k in $(seq 1 "${REPEAT:-3}"); do
    timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$TWO" --modes bridge,poll --wire f32 --no-baseline \
        --max-bytes 262144 --out "$R/small-cg-$k" > "$R/small-cg-$k.txt" 2>&1; log "small crossgpu $k exit $?"
    NCCL_P2P_DISABLE=1 timeout 90 python3 scripts/gpu-machine/nccl_allreduce.py --gpus 2 --label p2p-disabled --port 29519 \
        --max-bytes 262144 --out "$R/small-nccl-nop2p-$k.json" > "$R/small-nccl-nop2p-$k.txt" 2>&1; log "small NCCL P2P disabled $k exit $?"
done
fi
if part decode; then
for k in $(seq 1 "${DECODE_REPEAT:-3}"); do
    decode "one-gpu-$k" CROSSGPU_DEVICES="$N0"
    decode "all-gpus-bridge-$k" CROSSGPU_DEVICES="$NV" CROSSGPU_ALLREDUCE=bridge
    decode "all-gpus-poll-$k" CROSSGPU_DEVICES="$NV" CROSSGPU_ALLREDUCE=poll
    DECODE_ARGS=--no-replay decode "all-gpus-poll-recorded-$k" CROSSGPU_DEVICES="$NV" CROSSGPU_ALLREDUCE=poll
done
fi
if part soak; then
CROSSGPU_ALLREDUCE=poll CROSSGPU_DEVICES="$TWO" timeout 280 crossgpu soak --rounds "${ROUNDS:-1000000}" --members 2 \
    --check-every 1000 > "$R/soak-poll.txt" 2>&1
log "DevicePoll soak exit $?"
fi
if part collectives; then
for c in all_gather reduce_scatter broadcast all_reduce; do
    timeout 90 crossgpu bench collectives --layouts "$TWO" --modes bridge,poll --collectives "$c" \
        --max-bytes $((256 << 20)) --json "$R/coll-cg-$c.json" > "$R/coll-cg-$c.txt" 2>&1; log "crossgpu $c exit $?"
    for label in p2p-disabled default; do
        p2p=0; [ "$label" = p2p-disabled ] && p2p=1
        NCCL_P2P_DISABLE=$p2p timeout 120 python3 scripts/gpu-machine/nccl_allreduce.py --gpus 2 --label "$label" \
            --collective "$c" --port 29520 --out "$R/coll-nccl-$label-$c.json" > "$R/coll-nccl-$label-$c.txt" 2>&1
        log "NCCL $label $c exit $?"
    done
done
fi
# crossgpu prints payloads as KiB/MiB, nccl_allreduce.py in bytes.
{ grep -h "relay\|wake" "$R"/limits.txt; echo "32 KiB, one line per process:"
  grep -hE " 32 KiB | 32768 B" "$R"/cg-f32.txt "$R"/small-cg-*.txt "$R"/nccl-*-2.txt "$R"/small-nccl-*.txt
  grep -hE " 256 MiB | 268435456 B" "$R"/cg-*.txt "$R"/nccl-*-2.txt
  grep -E "===|tokens/s" "$R/decode.txt"; grep -h "tokens:" "$R/decode.txt" | sort | uniq -c
  tail -12 "$R/soak-poll.txt"; } > "$OUT/summary.txt" 2>/dev/null
log finished
