#!/usr/bin/env bash
# Configures shardplan with Debian 12's stock CMake modules, unpacked from the cmake-data
# package that matches the installed cmake, so a machine whose system modules were patched
# by hand cannot hide a configure failure a fresh machine would hit (FindCUDAToolkit with
# CUDA >= 12.9, which has no libnvToolsExt: see cmake/cuda_toolkit.cmake).
# Usage: stock_cmake_test.sh SOURCE_DIR WORK_DIR
set -euo pipefail
source_dir=$1
work=$2
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

version=$(dpkg-query -W -f='${Version}' cmake-data) || fail "cmake-data is not installed"
cmake_series=$(cmake --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
stock=$work/cmake-data-$version
modules=$stock/usr/share/cmake-$cmake_series/Modules
if [ ! -f "$modules/FindCUDAToolkit.cmake" ]; then
  rm -rf "$stock" && mkdir -p "$stock"
  # apt-get download needs the package lists of `apt-get update` (scripts/install-deps.sh).
  (cd "$work" && apt-get download -q "cmake-data=$version") ||
    fail "could not download cmake-data=$version with apt-get (network, or run apt-get update)"
  deb=$(ls "$work"/cmake-data_*.deb | head -n 1)
  dpkg-deb -x "$deb" "$stock"
  dpkg-deb -e "$deb" "$stock/DEBIAN"
  rm -f "$deb"
fi
# The modules must be the package's own bytes, not a patched copy.
(cd "$stock" && grep " usr/share/cmake-$cmake_series/Modules/" DEBIAN/md5sums | md5sum --quiet -c -) ||
  fail "the unpacked modules differ from cmake-data's md5sums"
echo "stock modules: $modules (cmake-data $version)"

cuda_complete=no
if [ -f /usr/local/cuda/include/nccl.h ] || ls /usr/local/cuda/lib64/libnccl.so* >/dev/null 2>&1; then
  cuda_complete=yes
fi

# 1. The bug this guards against is real here: a project requiring CMake 3.25 that looks
#    for CUDA with the stock module fails when the toolkit has no libnvToolsExt.
if [ -d /usr/local/cuda ] && ! ls /usr/local/cuda/lib64/libnvToolsExt.so* >/dev/null 2>&1; then
  probe=$work/probe
  rm -rf "$probe" && mkdir -p "$probe"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(probe LANGUAGES CXX)\nset(CUDAToolkit_ROOT /usr/local/cuda)\nfind_package(CUDAToolkit QUIET)\n' >"$probe/CMakeLists.txt"
  if cmake -S "$probe" -B "$probe/build" -DCMAKE_MODULE_PATH="$modules" >"$probe/log" 2>&1; then
    echo "note: the stock module configured a plain CMake 3.25 project with this toolkit"
  else
    grep -q "CUDA::nvToolsExt" "$probe/log" || { cat "$probe/log"; fail "probe failed for another reason"; }
    echo "reproduced: the stock module fails a plain CMake 3.25 project (no libnvToolsExt)"
  fi
fi

configure() {  # name, expected exit (0 or 1), extra cmake arguments...
  local name=$1 expected=$2
  shift 2
  local dir=$work/$name
  rm -rf "$dir"
  local rc=0
  cmake -S "$source_dir" -B "$dir" -G Ninja -DBUILD_TESTING=OFF -DCMAKE_MODULE_PATH="$modules" \
    "$@" >"$work/$name.log" 2>&1 || rc=$?
  if { [ "$expected" = 0 ] && [ $rc -ne 0 ]; } || { [ "$expected" != 0 ] && [ $rc -eq 0 ]; }; then
    cat "$work/$name.log"
    fail "$name: configure exited $rc, expected $([ "$expected" = 0 ] && echo 0 || echo non-zero)"
  fi
  echo "$name: configure exited $rc as expected"
}

# 2. With the toolkit: configures, and the CUDA backend is on when NCCL is there.
configure with-cuda 0
if [ "$cuda_complete" = yes ]; then
  grep -q "CUDA executor backend ON" "$work/with-cuda.log" ||
    fail "with-cuda: /usr/local/cuda has NCCL but the CUDA backend is off"
fi
# 3. Without the toolkit: configures with the backend off.
configure without-cuda 0 -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
grep -q "CUDA executor backend OFF" "$work/without-cuda.log" ||
  fail "without-cuda: the CUDA backend is not reported off"
# 4. Asking for the backend without a toolkit is a clear error.
configure cuda-required-missing 1 -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DSHARDPLAN_CUDA=ON
grep -q "SHARDPLAN_CUDA=ON but the CUDA toolkit" "$work/cuda-required-missing.log" ||
  fail "cuda-required-missing: no clear message"
echo "PASS"
