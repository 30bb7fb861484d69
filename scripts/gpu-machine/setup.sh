# shellcheck shell=bash
# Sourced on the GPU machine from the repository root, after prepare.sh's folders were carried
# there: unpacks the Vulkan loader (.gl), lavapipe (.mesa, under /opt/mesa, beside the NVIDIA
# driver in one Vulkan instance), the Khronos validation layer and the chart's font libraries
# (.vvl), and the binaries (.dev) to /tmp/dev, which it puts first on PATH.
# NVIDIA_ICD overrides where the NVIDIA driver's Vulkan ICD file is looked for.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
if [ -z "${NVIDIA_ICD:-}" ]; then
    for NVIDIA_ICD in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
        /etc/vulkan/icd.d/nvidia_icd.json; do [ -e "$NVIDIA_ICD" ] && break; done
fi
VK_DRIVER_FILES=$NVIDIA_ICD
# lavapipe only when .mesa was carried (the four folders together can pass the 64 MiB carry:
# leave .mesa out unless a run needs the CPU device, e.g. the cross-vendor pair).
if ls .mesa/*.deb >/dev/null 2>&1; then
    mkdir -p /opt/mesa; for f in .mesa/*.deb; do dpkg -x "$f" /opt/mesa; done
    sed "s#/usr/lib/x86_64-linux-gnu#/opt/mesa/usr/lib/x86_64-linux-gnu#" \
        /opt/mesa/usr/share/vulkan/icd.d/lvp_icd.x86_64.json > /opt/lvp_icd.json
    VK_DRIVER_FILES=$VK_DRIVER_FILES:/opt/lvp_icd.json
fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} VK_DRIVER_FILES
dpkg -x .vvl/vulkan-validationlayers_*.deb /
mkdir -p /opt/extra; for f in .vvl/lib*.deb; do dpkg -x "$f" /opt/extra; done
export LD_LIBRARY_PATH=/opt/mesa/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/opt/extra/usr/lib/x86_64-linux-gnu:/opt/extra/lib/x86_64-linux-gnu
mkdir -p /tmp/dev && tar -C /tmp/dev -xJf .dev/dev.tar.xz
export PATH=/tmp/dev:$PATH RUST_BACKTRACE=1

# start_results NAME: collect this call's outputs in $R, packed into $OUT/NAME.tgz at every
# `log` (the device tool returns a few files, and a call cut at its time limit still returns
# what ran); lists the adapters and sets NV (the NVIDIA adapters' indices, e.g. 0,1) and N0
# (the first of them).
start_results() {
    RESULTS_NAME=$1
    OUT=${OUT:-/tmp/out}; R=/tmp/$1; rm -rf "$R"; mkdir -p "$OUT" "$R"
    crossgpu devices > "$R/devices.txt" 2>&1
    NV=$(grep -E '^\[[0-9]+\] NVIDIA' "$R/devices.txt" | sed -E 's/^\[([0-9]+)\].*/\1/' | paste -sd, -)
    N0=${NV%%,*}
    if [ -z "$N0" ]; then echo "no NVIDIA adapter:" >&2; cat "$R/devices.txt" >&2; exit 1; fi
}
finish() { tar -C "$R" -czf "$OUT/$RESULTS_NAME.tgz" .; cp "$R/timeline.txt" "$OUT/" 2>/dev/null; }
log() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$R/timeline.txt"; finish; }
# decode LABEL [VAR=value ...]: the 27B-class decode of $TOKENS tokens (default 32) with those
# variables set and $DECODE_ARGS added to the command, appended to $R/decode.txt under a
# "=== LABEL" line, then logged.
decode() {
    local label=$1; shift
    # shellcheck disable=SC2086 # DECODE_ARGS holds several words
    { echo "=== $label: $* ${DECODE_ARGS:-} (${TOKENS:-32} tokens)"; env "$@" timeout 120 crossgpu decode --preset 27b --tokens "${TOKENS:-32}" ${DECODE_ARGS:-}; } >> "$R/decode.txt" 2>&1
    log "decode $label exit $?"
}
# torch_round K: where TORCH (default 1) is 1, PyTorch + CUDA graphs on the same shape
# (torch_decode.py, $TOKENS tokens, default 64) once, appended to $R/torch.txt under
# "=== torch K", then logged: the reference a decode script runs once a round beside crossgpu.
torch_round() {
    [ "${TORCH:-1}" = 1 ] || return 0
    { echo "=== torch $1"; timeout 150 python3 scripts/gpu-machine/torch_decode.py "${TOKENS:-64}"; } \
        >> "$R/torch.txt" 2>&1
    log "torch $1 exit $?"
}
