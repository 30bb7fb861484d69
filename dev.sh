#!/usr/bin/env bash
# Set-up and day-to-day commands for crossgpu (see README.md, "Set-up: two commands").
#
#   ./dev.sh demo [ARGS...]     install what is missing, then: cargo run -p crossgpu-cli -- demo ARGS
#   ./dev.sh test [ARGS...]     install what is missing, then: cargo test --workspace ARGS (and more: usage)
#   ./dev.sh devices [ARGS...]  install what is missing, then: cargo run -p crossgpu-cli -- devices ARGS
#
# All three build in cargo's dev profile, which Cargo.toml optimises, so whichever runs second
# reuses the first one's build of every dependency (release builds are for benchmarks only).
#
# "What is missing" (Debian/Ubuntu, checked with dpkg -s, installed with apt-get only if absent):
#   libvulkan1               the Vulkan loader
#   mesa-vulkan-drivers      lavapipe, the CPU Vulkan driver (so everything runs without a GPU)
#   vulkan-validationlayers  VK_LAYER_KHRONOS_validation, which the tests turn on
#   vulkan-tools             vulkaninfo, to look at the drivers by hand
#   pkg-config, libfontconfig-dev, libfreetype-dev
#                            fonts for the benchmark charts (plotters links fontconfig/freetype)
#   gcc, libc6-dev           only when no C linker (cc) is present: rustc links through it
#   libopenmpi-dev, openmpi-bin, libclang-dev
#                            `test` only: the `mpi` feature's tests (Open MPI; bindgen needs libclang)
# Rust itself is not installed from apt (Debian's rustc is too old); install it with rustup.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

say() { printf '==> %s\n' "$*"; }
die() {
    printf 'dev.sh: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    cat <<'EOF'
usage: ./dev.sh COMMAND [ARGS...]

commands:
  demo      run every kernel on every member of a group and check it against the CPU
            (cargo run -p crossgpu-cli -- demo ARGS; e.g. ./dev.sh demo --len 1000)
  test      run the test suite with the Khronos validation layer on
            (cargo test --workspace --exclude crossgpu-burn ARGS; e.g. ./dev.sh test --
            --nocapture), the MPI ranks' test, a brief `bench ranks` and `decode --ranks`
            (feature mpi, mpirun), the burn integration's tests and data-parallel example,
            then the library's tests again on Mesa 26's lavapipe (scripts/newer-lavapipe.sh)
  devices   list the Vulkan adapters and the capabilities crossgpu uses
            (cargo run -p crossgpu-cli -- devices)

Each first installs the Vulkan packages that are missing (apt-get) and checks for cargo.
Environment: CROSSGPU_DEVICES, CROSSGPU_VALIDATION, CROSSGPU_TIMEOUT_MS, ... (see README.md).
EOF
}

# Installs the Debian packages crossgpu needs that dpkg does not report as installed.
ensure_packages() {
    local wanted=(libvulkan1 mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
        pkg-config libfontconfig-dev libfreetype-dev "$@")
    if ! command -v cc >/dev/null 2>&1; then
        wanted+=(gcc libc6-dev)
    fi
    if ! command -v dpkg >/dev/null 2>&1; then
        say "no dpkg (not Debian/Ubuntu): skipping package checks; make sure a Vulkan loader," \
            "driver (e.g. Mesa lavapipe) and the Khronos validation layer are installed"
        return 0
    fi
    local missing=() p status
    for p in "${wanted[@]}"; do
        # dpkg -s also succeeds for a removed package whose config files remain: check Status.
        status="$(dpkg -s "$p" 2>/dev/null || true)"
        if ! grep -q '^Status: install ok installed' <<<"$status"; then
            missing+=("$p")
        fi
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        say "system packages present: ${wanted[*]}"
        return 0
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            die "missing packages: ${missing[*]}; you are not root and sudo is not installed." \
                "Install them as root: apt-get install -y ${missing[*]}"
        fi
    fi
    say "installing missing packages: ${missing[*]}"
    ${sudo[@]+"${sudo[@]}"} apt-get update
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
}

ensure_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        # rustup installed, but this shell has not sourced ~/.cargo/env.
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        cat >&2 <<'EOF'
dev.sh: error: cargo is not installed.
crossgpu needs a recent Rust (see rust-version in Cargo.toml); Debian's rustc package is too old.
Install Rust with rustup:

    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y
    . "$HOME/.cargo/env"

then run this command again.
EOF
        exit 1
    fi
    say "using $(cargo --version)"
}

# Mesa's drivers (lavapipe) warn when XDG_RUNTIME_DIR is unset: give them a private directory.
ensure_runtime_dir() {
    if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
        XDG_RUNTIME_DIR="$(mktemp -d "${TMPDIR:-/tmp}/crossgpu-xdg.XXXXXX")"
        chmod 700 "$XDG_RUNTIME_DIR"
        export XDG_RUNTIME_DIR
        # Removed when this script exits (cargo runs as a child, not through exec).
        trap 'rm -rf -- "$XDG_RUNTIME_DIR"' EXIT
        say "XDG_RUNTIME_DIR was unset: using $XDG_RUNTIME_DIR"
    fi
}

setup() {
    ensure_packages "$@"
    ensure_cargo
    ensure_runtime_dir
}

run() {
    say "running: $*"
    "$@"
}

cmd="${1:-}"
if [ $# -gt 0 ]; then
    shift
fi

case "$cmd" in
    demo)
        setup
        run cargo run -p crossgpu-cli -- demo "$@"
        ;;
    test)
        setup libopenmpi-dev openmpi-bin libclang-dev
        # llvmpipe runs all its VkDevices' kernels on one pool of threads (the CPU count by
        # default); the DevicePoll tests poll from up to 4 members at once, each holding one.
        if [ -z "${LP_NUM_THREADS:-}" ]; then
            export LP_NUM_THREADS=$(($(nproc) > 4 ? $(nproc) : 4))
            say "LP_NUM_THREADS=$LP_NUM_THREADS (DevicePoll tests poll from up to 4 lavapipe devices)"
        fi
        # The burn integration (integrations/burn) builds burn and cubecl, about 10 minutes on
        # two cores: it runs on its own below.
        run cargo test --workspace --exclude crossgpu-burn "$@"
        # The communicator across MPI ranks (feature `mpi`): its test starts itself under
        # mpirun with 2, 3 and 4 ranks of lavapipe members.
        run cargo test -p crossgpu --features mpi --test ranks "$@"
        # `crossgpu bench ranks` and `decode --ranks` briefly across two ranks, so that the
        # commands run here too (their figures come from longer runs: docs/SCALE-OUT.md).
        run cargo build -p crossgpu-cli --features mpi
        local_root=()
        if [ "$(id -u)" -eq 0 ]; then local_root=(--allow-run-as-root); fi
        run mpirun -np 2 --oversubscribe ${local_root[@]+"${local_root[@]}"} "${CARGO_TARGET_DIR:-target}/debug/crossgpu" \
            bench ranks --sizes 32768,262144 --iters 3
        run mpirun -np 2 --oversubscribe ${local_root[@]+"${local_root[@]}"} "${CARGO_TARGET_DIR:-target}/debug/crossgpu" \
            decode --ranks --layers 1 --tokens 4 --check
        # The burn integration: its tests, and its data-parallel example (two lavapipe members
        # against one; it exits non-zero when a check fails).
        run cargo test -p crossgpu-burn "$@"
        run cargo run -p crossgpu-burn --example data_parallel -- --devices llvmpipe --members 2 --steps 20
        # A second lavapipe generation (Mesa 26 from trixie-backports, unpacked into the
        # git-ignored .newer-lavapipe/; the system is not touched): its SYNC_FD semaphores run
        # the SyncFd mode, which Debian 12's lavapipe lacks, and the library's whole suite runs
        # on it once more. CROSSGPU_NEWER_LAVAPIPE=0 skips this.
        if [ "${CROSSGPU_NEWER_LAVAPIPE:-1}" = 0 ]; then
            say "SKIPPED: the tests on Mesa 26's lavapipe (CROSSGPU_NEWER_LAVAPIPE=0)"
        elif scripts/newer-lavapipe.sh fetch; then
            say "the library's tests again on Mesa 26's lavapipe (scripts/newer-lavapipe.sh)"
            CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$PWD/scripts/newer-lavapipe.sh run" \
                run cargo test -p crossgpu "$@"
        else
            say "SKIPPED: the tests on Mesa 26's lavapipe, which could not be fetched (above); the SyncFd mode did not run"
        fi
        ;;
    devices)
        setup
        run cargo run -p crossgpu-cli -- devices "$@"
        ;;
    -h | --help | help)
        usage
        ;;
    "")
        usage >&2
        exit 2
        ;;
    *)
        printf 'dev.sh: unknown command: %s\n\n' "$cmd" >&2
        usage >&2
        exit 2
        ;;
esac
