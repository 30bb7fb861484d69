#!/usr/bin/env bash
# On a multi-GPU machine (nvidia-h200-x2 / -x4; see prepare.sh), issue 8: crossgpu's all-reduce
# across the physical GPUs (HostBridge on the f32 wire, the same bytes as NCCL, and on the
# automatic wire; Generic at small sizes; the wgpu baseline across the GPUs), NCCL through
# torch.distributed at the same sizes (defaults, then NCCL_P2P_DISABLE=1), and the 27B-class
# decode on 1 GPU and on every GPU; then the limits and the one-GPU layouts (issue 6) on GPU 0.
# With SOAK=1 it ends with the issue-7 soak on GPU 0.
# Everything lands in $OUT/results.tgz (the device tool returns at most 8 files) and a summary.
set -uo pipefail
source scripts/gpu-machine/setup.sh
start_results results
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  nvidia-smi topo -m; nproc; python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} > "$R/machine.txt" 2>&1
NGPU=$(echo "$NV" | tr , '\n' | wc -l)
THREE=$(echo "$NV,$NV" | cut -d, -f1-3)
log "NVIDIA adapters: $NV ($NGPU); three members: $THREE"
LAYOUTS="$NV"; [ "$NGPU" -eq 2 ] && LAYOUTS="$NV;$THREE"
[ "$NGPU" -ge 4 ] && LAYOUTS="$(echo "$NV" | cut -d, -f1-2);$THREE;$(echo "$NV" | cut -d, -f1-4)"
MEMBERS=$(echo "$LAYOUTS" | tr ';' '\n' | awk -F, '{print NF}' | paste -sd, -)
log "crossgpu f32 wire on $LAYOUTS (members $MEMBERS)"
timeout 240 crossgpu bench allreduce --adapter "$N0" --layouts "$LAYOUTS" --modes bridge,sync_fd --wire f32 \
    --members "$MEMBERS" --baseline-adapters "$NV" --out "$R/cg-f32" > "$R/cg-f32.txt" 2>&1; log "exit $?"
log "crossgpu auto wire on $NV"
timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$NV" --modes bridge --wire auto --no-baseline \
    --out "$R/cg-auto" > "$R/cg-auto.txt" 2>&1; log "exit $?"
log "crossgpu Generic on $NV up to 4 MiB"
timeout 60 crossgpu bench allreduce --adapter "$N0" --layouts "$NV" --modes generic --wire f32 --no-baseline \
    --max-bytes 4194304 --out "$R/cg-generic" > "$R/cg-generic.txt" 2>&1; log "exit $?"
for g in $(seq 2 "$NGPU"); do
    [ "$g" -eq 2 ] || [ "$g" -eq 3 ] || [ "$g" -eq 4 ] || continue
    log "NCCL defaults, $g GPUs"
    timeout 150 python3 scripts/gpu-machine/nccl_allreduce.py --gpus "$g" --label default --out "$R/nccl-default-$g.json" > "$R/nccl-default-$g.txt" 2>&1; log "exit $?"
    log "NCCL P2P disabled, $g GPUs"
    NCCL_P2P_DISABLE=1 timeout 150 python3 scripts/gpu-machine/nccl_allreduce.py --gpus "$g" --label p2p-disabled --port 29518 --out "$R/nccl-nop2p-$g.json" > "$R/nccl-nop2p-$g.txt" 2>&1; log "exit $?"
done
for l in "$N0" "$NV"; do
    log "27B decode on $l"
    { echo "=== CROSSGPU_DEVICES=$l"; CROSSGPU_DEVICES="$l" timeout 100 crossgpu decode --preset 27b --tokens 32; echo "exit $?"; } >> "$R/decode-27b.txt" 2>&1
done
log "limits on GPU $N0"
timeout 90 crossgpu bench limits --adapter "$N0" --out "$R/limits" > "$R/limits.txt" 2>&1; log "exit $?"
log "one-GPU layouts on GPU $N0"
timeout 180 crossgpu bench allreduce --adapter "$N0" --layouts "$N0*1;$N0/2;$N0/3;$N0/4;$N0*2;$N0,$N0" --modes bridge \
    --no-baseline --out "$R/one-gpu" > "$R/one-gpu.txt" 2>&1; log "exit $?"
if [ "${SOAK:-0}" = 1 ]; then
    log "soak 1,000,000 rounds on nvidia/3"
    CROSSGPU_DEVICES="$N0/3" timeout 200 crossgpu soak --rounds 1000000 --members 3 --check-every 1000 > "$R/soak.txt" 2>&1
    log "soak exit $?"
fi
grep -hE "tokens|exit|tokens/s" "$R/decode-27b.txt" > "$OUT/summary.txt"; tail -3 "$R/soak.txt" >> "$OUT/summary.txt" 2>/dev/null
log finished
