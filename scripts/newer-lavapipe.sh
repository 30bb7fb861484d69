#!/usr/bin/env bash
# A second lavapipe generation for the tests: Mesa 26.1.6 from Debian trixie-backports, whose
# lavapipe has SYNC_FD semaphores (Debian 12's 22.3 has none), so the SyncFd all-reduce runs,
# and cooperative matrices (8 × 8 × 8), so the prompt's products on matrix units run; with
# trixie's validation layer, which knows them.
#
#   scripts/newer-lavapipe.sh fetch          download and unpack it into .newer-lavapipe/ (once)
#   scripts/newer-lavapipe.sh run CMD ARGS   run CMD with it as the only Vulkan driver
#
# Nothing on the system changes: apt-get runs with a private sources list, lists and cache
# (the Debian mirror must be reachable), and `dpkg -x` unpacks the packages (about 70 MB, 334
# MB unpacked) into the git-ignored .newer-lavapipe/root. Its libraries need glibc 2.38, newer
# than Debian 12's, so `run` starts CMD through trixie's own dynamic loader with trixie's
# libraries first on the library path (the system's after them), and trixie's validation layer
# instead of the system's (VK_LAYER_PATH); CMD's children start through the system's loader and do not see
# this driver, unless started through this script again (the tests do so through
# CROSSGPU_TEST_WRAPPER, which `run` sets). `fetch` exits 1 with the reason where it cannot fetch; `run` exits 3 when the
# driver was not fetched.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIR=$PWD/.newer-lavapipe
MESA=26.1.6-1~bpo13+1
ROOT=$DIR/root
LIB=$ROOT/usr/lib/x86_64-linux-gnu
# trixie's validation layer (1.4): Debian 12's (1.3.239) predates VK_KHR_cooperative_matrix and
# reports every use of it as an error.
LAYERS=$ROOT/usr/share/vulkan/explicit_layer.d
apt_opts=(-o "Dir::Etc::SourceList=$DIR/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$DIR/lists" -o "Dir::Cache=$DIR/cache" -o Dir::State::Status=/dev/null
    -o APT::Architecture=amd64 -o APT::Get::List-Cleanup=0)

fetch() {
    if [ -e "$DIR/lvp_icd.json" ] && [ -e "$LAYERS/VkLayer_khronos_validation.json" ]; then
        return 0
    fi
    [ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] || { echo "newer lavapipe: not an amd64 Debian/Ubuntu system" >&2; exit 1; }
    mkdir -p "$DIR/lists/partial" "$DIR/cache/archives/partial" "$DIR/debs"
    printf 'deb http://deb.debian.org/debian trixie main\ndeb http://deb.debian.org/debian trixie-backports main\n' \
        > "$DIR/sources.list"
    apt-get "${apt_opts[@]}" update -qq || { echo "newer lavapipe: apt-get update of trixie(-backports) failed" >&2; exit 1; }
    # Mesa's lavapipe and the Vulkan loader with everything they depend on, from trixie-backports
    # where it has a version, else trixie.
    local pkgs
    pkgs=$(apt-cache "${apt_opts[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "mesa-vulkan-drivers=$MESA" libvulkan1 vulkan-validationlayers |
        grep -v '^[ <]' | sort -u | grep -vx mesa-vulkan-drivers)
    # shellcheck disable=SC2086
    (cd "$DIR/debs" && apt-get "${apt_opts[@]}" -t trixie-backports download -qq $pkgs "mesa-vulkan-drivers=$MESA") ||
        { echo "newer lavapipe: download failed" >&2; exit 1; }
    rm -rf "$ROOT" && mkdir -p "$ROOT"
    for f in "$DIR"/debs/*.deb; do dpkg -x "$f" "$ROOT"; done
    sed "s#\"libvulkan_lvp.so\"#\"$LIB/libvulkan_lvp.so\"#" "$ROOT/usr/share/vulkan/icd.d/lvp_icd.json" \
        > "$DIR/lvp_icd.json"
    rm -rf "$DIR/cache" "$DIR/debs"
    echo "newer lavapipe: Mesa $MESA in $ROOT"
}

case "${1:-}" in
    fetch) fetch ;;
    run)
        shift
        [ -e "$DIR/lvp_icd.json" ] || { echo "newer lavapipe: not fetched (scripts/newer-lavapipe.sh fetch)" >&2; exit 3; }
        # CROSSGPU_TEST_WRAPPER: how a test starts a child of itself under this driver.
        export VK_DRIVER_FILES=$DIR/lvp_icd.json VK_ICD_FILENAMES=$DIR/lvp_icd.json \
            VK_LAYER_PATH=$LAYERS CROSSGPU_TEST_WRAPPER=$PWD/scripts/newer-lavapipe.sh
        exec "$LIB/ld-linux-x86-64.so.2" --library-path "$LIB:$ROOT/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu" "$@"
        ;;
    *) sed -n '2,8p' "$0" >&2; exit 2 ;;
esac
