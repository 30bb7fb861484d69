#!/usr/bin/env bash
# On the GPU machine (see prepare.sh): `crossgpu bench all` on the NVIDIA GPU — limits; the
# all-reduce with 1-4 members sharing one queue and on one queue each, two VkDevices, the
# NVIDIA + lavapipe pair, and the wgpu baseline; matvec; the 27B-class decode. Under $OUT.
set -uo pipefail
source scripts/gpu-machine/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv; } > "$OUT/machine.txt" 2>&1
crossgpu devices > "$OUT/devices.txt" 2>&1
crossgpu bench all --adapter nvidia --pair llvmpipe --out "$OUT" > "$OUT/bench.txt" 2>&1
echo finished >> "$OUT/machine.txt"
