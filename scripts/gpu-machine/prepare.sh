#!/usr/bin/env bash
# Run here (a Debian 12 / amd64 machine with cargo) before a run on the GPU machine. It fills
# four git-ignored folders at the repository root, which the device tool carries there:
#   .gl/   the Vulkan loader and vulkaninfo (Debian packages; the GPU machine has no loader);
#   .mesa/ lavapipe, Mesa's CPU Vulkan driver, with its libraries (a second vendor beside the GPU);
#   .vvl/  the Khronos validation layer (the tests turn it on) and the font libraries the
#          charts link (fontconfig, freetype);
#   .dev/  dev.tar.xz: the stripped release binaries (crossgpu, the examples) and test binaries,
#          and the files CROSSGPU_DEV_EXTRA names.
# The packages are downloaded once with apt-get (no root needed; they are unpacked on the GPU
# machine by setup.sh); the binaries are rebuilt every time. Then call the device tool with
# carry [".gl", ".vvl", ".dev"] (add ".mesa" for runs that need lavapipe beside the GPU; all
# four together can pass the tool's 64 MiB: the sizes are printed at the end) and a command
# such as
#   bash scripts/gpu-machine/one-gpu.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/crossgpu-apt-lists)
fetched=0
fetch() { # $1 folder, then package names
    local dir=$1; shift
    if [ "$fetched" = 0 ]; then mkdir -p /tmp/crossgpu-apt-lists/partial; apt-get "${apt_opts[@]}" update -qq; fetched=1; fi
    mkdir -p "$dir"
    (cd "$dir" && apt-get "${apt_opts[@]}" download -qq "$@")
}
ls .gl/libvulkan1_*.deb >/dev/null 2>&1 ||
    fetch .gl libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 vulkan-tools
ls .mesa/mesa-vulkan-drivers_*.deb >/dev/null 2>&1 ||
    fetch .mesa mesa-vulkan-drivers libllvm15 libdrm-amdgpu1 libdrm2 libelf1 libwayland-client0 \
        libx11-xcb1 libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 libxcb-xfixes0 \
        libxshmfence1 libz3-4 libedit2 libffi8 libtinfo6 libxml2 libicu72 libbsd0 libmd0
ls .vvl/vulkan-validationlayers_*.deb >/dev/null 2>&1 ||
    fetch .vvl vulkan-validationlayers libfontconfig1 libfreetype6 libpng16-16 libbrotli1 libexpat1
# The library, the command and vk-native (the burn crate has its own GPU runs: its README).
crates=(-p crossgpu -p crossgpu-cli -p crossgpu-vk)
cargo build --release "${crates[@]}" --bins --examples
cargo test --release "${crates[@]}" --no-run 2>&1 | tee /tmp/test-build.log
examples=(tp_decode cross_vendor wgpu_app custom_kernel)
rm -rf /tmp/crossgpu-dev && mkdir -p /tmp/crossgpu-dev/t
cp target/release/crossgpu /tmp/crossgpu-dev/
for e in "${examples[@]}"; do cp target/release/examples/"$e" /tmp/crossgpu-dev/; done
# The newest binary of each integration test of the library (tests/suite is one binary).
for name in suite $(ls tests/*.rs | xargs -n1 basename | sed 's/\.rs$//'); do
    bin=$(ls -t target/release/deps/"$name"-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
    [ -n "$bin" ] && cp "$bin" /tmp/crossgpu-dev/t/"$name"
done
# Other files to carry beside them (e.g. an older build's binary, renamed, for a comparison in
# the same call): CROSSGPU_DEV_EXTRA, space-separated paths.
for f in ${CROSSGPU_DEV_EXTRA:-}; do cp "$f" /tmp/crossgpu-dev/; done
strip /tmp/crossgpu-dev/crossgpu "${examples[@]/#//tmp/crossgpu-dev/}" /tmp/crossgpu-dev/t/*
rm -rf .dev && mkdir -p .dev
tar -C /tmp/crossgpu-dev -cJf .dev/dev.tar.xz .
du -sh .gl .mesa .vvl .dev
