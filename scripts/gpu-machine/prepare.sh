#!/usr/bin/env bash
# Run here (the CPU machine) before a run on the GPU machine: builds the release binaries and
# test binaries, packs them into the git-ignored .dev/dev.tar.xz, and fetches the Vulkan loader,
# lavapipe (.gl/, .mesa/, see ../shared/device/README.md) and the Khronos validation layer (.vvl/).
# Then call the device tool with carry [".gl", ".mesa", ".vvl", ".dev"] and a command that runs
# scripts/gpu-machine/<script>.sh.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
for d in /.gl/ /.mesa/ /.dev/ /.vvl/; do grep -qxF "$d" .git/info/exclude || echo "$d" >> .git/info/exclude; done
[ -d .mesa ] || ../shared/device/fetch-vulkan-debs
if ! ls .vvl/vulkan-validationlayers_*.deb >/dev/null 2>&1; then
    mkdir -p .vvl /tmp/amd64/partial
    (cd .vvl && apt-get -oAPT::Architecture=amd64 -oDir::State::Lists=/tmp/amd64 download -qq vulkan-validationlayers \
        libfontconfig1 libfreetype6 libpng16-16 libbrotli1 libexpat1)
fi
cargo build --release --workspace --bins --examples
cargo test --release --workspace --no-run 2>&1 | tee /tmp/test-build.log
rm -rf /tmp/crossgpu-dev && mkdir -p /tmp/crossgpu-dev/t
cp target/release/crossgpu target/release/examples/{tp_decode,cross_vendor,wgpu_app} /tmp/crossgpu-dev/
# The newest binary of each integration test.
for t in tests/*.rs; do
    name=$(basename "$t" .rs)
    bin=$(ls -t target/release/deps/"$name"-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
    [ -n "$bin" ] && cp "$bin" /tmp/crossgpu-dev/t/"$name"
done
strip /tmp/crossgpu-dev/crossgpu /tmp/crossgpu-dev/{tp_decode,cross_vendor,wgpu_app} /tmp/crossgpu-dev/t/*
rm -rf .dev && mkdir -p .dev
tar -C /tmp/crossgpu-dev -cJf .dev/dev.tar.xz .
du -sh .gl .mesa .vvl .dev
