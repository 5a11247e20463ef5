#!/usr/bin/env bash
# On a GPU host without network: unpacks the .deb files from
# scripts/gpu-deps-bundle.sh into a private prefix (never into /) and builds
# dslaunch against the host's own LibTorch (CUDA), CUDA toolkit and NCCL.
#   scripts/gpu-build.sh [DEPS_DIR] [targets...]
# Environment: PREFIX (default /opt/dslaunch-deps), BUILD_DIR (build-gpu),
# CUDA_ARCH (90 = Hopper).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=${1:-$root/.gpu-deps}
shift || true
prefix=${PREFIX:-/opt/dslaunch-deps}
build=${BUILD_DIR:-$root/build-gpu}
mkdir -p "$prefix"
for f in "$deps"/*.deb; do dpkg -x "$f" "$prefix"; done
lib="$prefix/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" PATH="$prefix/usr/bin:$PATH"
# The packages' .pc files say prefix=/usr: the sysroot points them at the prefix.
export PKG_CONFIG_PATH="$lib/pkgconfig:$prefix/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$prefix"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" \
  -DCMAKE_EXE_LINKER_FLAGS="-L$lib -Wl,-rpath,$lib" -DCMAKE_SHARED_LINKER_FLAGS="-L$lib" \
  -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90} -DDSLAUNCH_CUDA_ROOT=/usr/local/cuda \
  -DProtobuf_PROTOC_EXECUTABLE="$prefix/usr/bin/protoc" \
  -DGRPC_CPP_PLUGIN="$prefix/usr/bin/grpc_cpp_plugin"
ninja -C "$build" "$@"
