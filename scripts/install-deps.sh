#!/usr/bin/env bash
# Installs every build and test dependency of shardplan on a fresh Debian 12 machine.
# Run as root. The CUDA toolkit (runtime, cuBLAS, NCCL, NVTX3) is expected at
# /usr/local/cuda; without it the project still builds, with the CUDA backend off.
set -euo pipefail
packages=(
  build-essential cmake ninja-build git ca-certificates pkg-config python3
  libboost-graph-dev libeigen3-dev nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libtomlplusplus-dev  # torchtitan's job TOML (--from-torchtitan)
  pybind11-dev python3-dev  # the Python module (import shardplan)
  clang libclang-rt-14-dev llvm  # the sanitizer build, libFuzzer and llvm-symbolizer
  clang-format  # 14 on Debian 12: the format check in the test suite
  python3-torch  # PyTorch 1.13 (CPU) for traces/capture and its tests
  chromium  # headless, to check that simulate --report pages render
  file  # cpack -G DEB: dpkg-shlibdeps finds the .deb's library dependencies with it
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
