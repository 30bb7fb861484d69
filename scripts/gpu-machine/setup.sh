# Sourced on the GPU machine from the repo root: the Vulkan loader, lavapipe beside the NVIDIA
# driver (.gl/setup.sh), the Khronos validation layer, and the binaries unpacked to /tmp/dev.
source .gl/setup.sh
dpkg -x .vvl/vulkan-validationlayers_*.deb /
# Libraries the charts link (fontconfig, freetype), beside whatever the image has.
mkdir -p /opt/extra; for f in .vvl/lib*.deb; do dpkg -x "$f" /opt/extra; done
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/opt/extra/usr/lib/x86_64-linux-gnu:/opt/extra/lib/x86_64-linux-gnu
mkdir -p /tmp/dev && tar -C /tmp/dev -xJf .dev/dev.tar.xz
export PATH=/tmp/dev:$PATH RUST_BACKTRACE=1
