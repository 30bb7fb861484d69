#!/usr/bin/env bash
# Run here (Debian 12, amd64, root for apt-get install) before a call that times llama.cpp
# beside crossgpu: builds llama.cpp's `llama-bench` with its Vulkan backend, static (one binary
# that needs only libvulkan.so.1 and the C/C++ runtime, GLIBC_2.34 and GLIBCXX_3.4.30 at most:
# Ubuntu 24.04 has both), and leaves it stripped at .dev/llama/llama-bench. The comparison's
# competitor: issue 33 asks for crossgpu's decode ahead of it.
#
# Source: the llama.cpp tree vendored in the newest llama-cpp-python sdist on PyPI (0.3.36 holds
# ggml-org/llama.cpp 0c1e57098); its build-info is set to that commit (the sdist has no .git).
# Debian 12's glslc (2023.2) cannot compile llama.cpp's cooperative-matrix and integer-dot
# shaders, the H200's fast paths, so glslc 2025.2 and the Vulkan 1.4.309 headers come from
# trixie: downloaded with a private sources list and unpacked into /tmp/trixie/root (nothing on
# the system changes), glslc run through trixie's own loader. Then copy it beside the binaries
# prepare.sh packs (CROSSGPU_DEV_EXTRA=.dev/llama/llama-bench) and run checkpoints.sh, which
# times it on each file. About 11 minutes on two cores.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
T=/tmp/trixie
SRC=/tmp/llama-src
BUILD=/tmp/llama-build
apt-get install -y -qq cmake g++ libvulkan-dev >/dev/null
if [ ! -x "$T/root/usr/bin/glslc" ]; then
    mkdir -p "$T/lists/partial" "$T/cache/archives/partial" "$T/debs"
    echo 'deb http://deb.debian.org/debian trixie main' > "$T/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$T/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$T/lists" -o "Dir::Cache=$T/cache" -o Dir::State::Status=/dev/null
        -o APT::Architecture=amd64)
    apt-get "${apt_opts[@]}" update -qq
    (cd "$T/debs" && apt-get "${apt_opts[@]}" download -qq glslc libshaderc1 libc6 libgcc-s1 libstdc++6 \
        libvulkan-dev spirv-headers)
    for d in "$T"/debs/*.deb; do dpkg -x "$d" "$T/root"; done
fi
cat > "$T/glslc" <<EOF
#!/bin/sh
exec $T/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path $T/root/usr/lib/x86_64-linux-gnu $T/root/usr/bin/glslc "\$@"
EOF
chmod +x "$T/glslc"
if [ ! -d "$SRC"/llama_cpp_python-*/vendor/llama.cpp ]; then
    mkdir -p "$SRC"
    # The sdist itself, found in PyPI's simple index (`pip download` would build its build
    # dependencies first).
    python3 - "$SRC" "${LLAMA_CPP_PYTHON:-0.3.36}" <<'PY'
import re, sys, urllib.request
dest, version = sys.argv[1], sys.argv[2]
index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
url = next(u for u in re.findall(r'href="([^"]+)"', index) if f"-{version}.tar.gz" in u).split("#")[0]
urllib.request.urlretrieve(url, f"{dest}/{url.rsplit('/', 1)[1]}")
PY
    tar -C "$SRC" -xzf "$SRC"/llama_cpp_python-*.tar.gz
fi
L=$(ls -d "$SRC"/llama_cpp_python-*/vendor/llama.cpp | head -1)
sed -i 's/^set(BUILD_COMMIT "unknown")/set(BUILD_COMMIT "0c1e570")/' "$L/cmake/build-info.cmake"
cmake -S "$L" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF \
    -DVulkan_INCLUDE_DIR="$T/root/usr/include" -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so \
    -DVulkan_GLSLC_EXECUTABLE="$T/glslc" -DSPIRV-Headers_DIR="$T/root/usr/share/cmake/SPIRV-Headers" >/dev/null
nice -n 10 cmake --build "$BUILD" -j"$(nproc)" --target llama-bench
mkdir -p .dev/llama
strip -o .dev/llama/llama-bench "$BUILD/bin/llama-bench"
.dev/llama/llama-bench --version 2>&1 | tail -1
