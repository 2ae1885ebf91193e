#!/usr/bin/env bash
# Installs every build and test dependency of shardplan on a fresh Debian 12 machine.
# Run as root. The CUDA toolkit (runtime, cuBLAS, NCCL, NVTX3) is expected at
# /usr/local/cuda; without it the project still builds, with the CUDA backend off.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
  build-essential cmake ninja-build git ca-certificates pkg-config \
  libboost-graph-dev libeigen3-dev nlohmann-json3-dev libcli11-dev libfmt-dev \
  libgtest-dev libgmock-dev libbenchmark-dev \
  libopenmpi-dev openmpi-bin \
  python3
