#!/usr/bin/env bash
# On a connected Debian 12 machine: downloads the .deb files that a GPU host
# without network needs to build dslaunch (everything but LibTorch, CUDA and
# NCCL, which the GPU host has) into .gpu-deps/ (git-ignored). Carry that
# folder to the GPU host and run scripts/gpu-build.sh there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.gpu-deps}
mkdir -p "$out"
packages=(
  libgrpc++-dev libgrpc++1.51 libgrpc-dev libgrpc29 libprotobuf-dev libprotobuf32 libprotoc32
  protobuf-compiler protobuf-compiler-grpc libabsl-dev libabsl20220623 libyaml-cpp-dev
  libyaml-cpp0.7 libboost1.74-dev libboost-filesystem1.74-dev libboost-filesystem1.74.0
  libboost-system1.74-dev libboost-system1.74.0 libc-ares2 libc-ares-dev libre2-9 libre2-dev
  libssl3 libssl-dev zlib1g-dev libupb-dev libsentencepiece-dev libsentencepiece0
  libgtest-dev libgmock-dev libgloo-dev libxxhash-dev liburing-dev liburing2
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  civetweb libcivetweb-dev libcivetweb1 libcurl4-openssl-dev libcurl4
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1
)
cd "$out"
apt-get download "${packages[@]}"
du -sh "$out"
