#!/usr/bin/env bash
# Configures and builds shardplan with clang under AddressSanitizer +
# UndefinedBehaviorSanitizer into ./build-sanitize, with a libFuzzer target per reader
# (tests/fuzz). -O1 and line tables only: stack traces name file and line, and the
# build stays a few minutes on two cores. The CUDA backend is off here: no GPU runs it
# under a sanitizer, and the sanitizers do not cover device code.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
  -DSHARDPLAN_SANITIZE=ON -DSHARDPLAN_FUZZ=ON -DSHARDPLAN_CUDA=OFF
cmake --build build-sanitize -j"$(nproc)"
