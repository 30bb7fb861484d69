# Sourced on the GPU machine from the repo root: the Vulkan loader, lavapipe beside the NVIDIA
# driver (.gl/setup.sh), the Khronos validation layer, and the binaries unpacked to /tmp/dev.
source .gl/setup.sh
dpkg -x .vvl/vulkan-validationlayers_*.deb /
# Libraries the charts link (fontconfig, freetype), beside whatever the image has.
mkdir -p /opt/extra; for f in .vvl/lib*.deb; do dpkg -x "$f" /opt/extra; done
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/opt/extra/usr/lib/x86_64-linux-gnu:/opt/extra/lib/x86_64-linux-gnu
mkdir -p /tmp/dev && tar -C /tmp/dev -xJf .dev/dev.tar.xz
export PATH=/tmp/dev:$PATH RUST_BACKTRACE=1

# start_results NAME: collect this call's outputs in $R, packed into $OUT/NAME.tgz at every
# `log` (the device tool returns at most 8 files, and a call cut at its time limit still
# returns what ran); lists the adapters and sets NV (the NVIDIA adapters' indices, e.g. 0,1)
# and N0 (the first of them).
start_results() {
    RESULTS_NAME=$1
    OUT=${OUT:-/tmp/out}; R=/tmp/$1; rm -rf "$R"; mkdir -p "$OUT" "$R"
    crossgpu devices > "$R/devices.txt" 2>&1
    NV=$(grep -E '^\[[0-9]+\] NVIDIA' "$R/devices.txt" | sed -E 's/^\[([0-9]+)\].*/\1/' | paste -sd, -)
    N0=${NV%%,*}
}
finish() { tar -C "$R" -czf "$OUT/$RESULTS_NAME.tgz" .; cp "$R/timeline.txt" "$OUT/" 2>/dev/null; }
log() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$R/timeline.txt"; finish; }
# decode LABEL [VAR=value ...]: the 27B decode of 32 tokens with those variables set, appended
# to $R/decode.txt under a "=== LABEL" line, then logged.
decode() { # $1 label, then env assignments
    local label=$1; shift
    { echo "=== $label: $*"; env "$@" timeout 120 crossgpu decode --preset 27b --tokens 32; } >> "$R/decode.txt" 2>&1
    log "decode $label exit $?"
}
