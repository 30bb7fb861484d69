# Sourced on the GPU machine from the repo root: the Vulkan loader, lavapipe beside the NVIDIA
# driver (.gl/setup.sh), the Khronos validation layer, and the binaries unpacked to /tmp/dev.
source .gl/setup.sh
for f in .vvl/*.deb; do dpkg -x "$f" /; done
mkdir -p /tmp/dev && tar -C /tmp/dev -xJf .dev/dev.tar.xz
export PATH=/tmp/dev:$PATH RUST_BACKTRACE=1
