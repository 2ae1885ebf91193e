#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test with ctest;
# then the same suite built with clang under AddressSanitizer + UndefinedBehaviorSanitizer
# (any report fails its test), with each reader's fuzz target run for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
bash scripts/build-sanitize.sh
# build_stock_cmake checks the configure step, which the first run already did.
ctest --test-dir build-sanitize --output-on-failure -j"$(nproc)" -E '^(build_stock_cmake|install_and_package)$'
