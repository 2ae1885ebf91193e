#!/usr/bin/env bash
# Installs the build into a temporary prefix and uses it as a user would, from another
# folder: the installed command (with its CUDA plugin found under the prefix), the capture
# tool through its bin/ link, and `import shardplan`; then packs the Debian packages with
# cpack and checks what they hold and depend on.
# Usage: install_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
work=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log" || fail "cmake --install"

cd "$work"  # nowhere near the build tree
[ -x "$prefix/bin/shardplan" ] || fail "no bin/shardplan"
"$prefix/bin/shardplan" describe --model tiny --gpus 2 --json > describe.json ||
  fail "the installed shardplan does not run"
grep -q '"parameters"' describe.json || fail "describe --json printed no parameters"
version=$("$prefix/bin/shardplan" version --json)
if grep -q '"cuda_backend": true' <<< "$version"; then
  [ -f "$prefix/lib/shardplan/libshardplan_cuda.so" ] || fail "the CUDA plugin was not installed"
  grep -q "\"cuda_plugin\": \"$prefix/lib/shardplan/libshardplan_cuda.so\"" <<< "$version" ||
    fail "the installed command did not load the installed plugin: $version"
fi

"$prefix/bin/shardplan-capture" --help > capture_help.txt || fail "bin/shardplan-capture --help"
grep -q -- "--plan" capture_help.txt || fail "the capture tool's help has no --plan"

if [ -n "$(find "$build/python" -name 'shardplan*.so' 2> /dev/null)" ]; then
  module=$(find "$prefix/lib" -path '*dist-packages/shardplan*.so' | head -n 1)
  [ -n "$module" ] || fail "the Python module was not installed under the prefix"
  PYTHONPATH=$(dirname "$module") /usr/bin/python3 -c '
import shardplan, sys
assert shardplan.__file__.startswith(sys.argv[1]), shardplan.__file__
print(shardplan.describe({"model": "tiny", "gpus": 2})["model"])' "$prefix" > python.txt ||
    fail "import shardplan from the prefix"
  grep -q tiny python.txt || fail "the installed module did not describe tiny"
fi

# The Debian packages.
(cd "$build" && cpack -G DEB -B "$work/packages" > "$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
deb=$(ls "$work"/packages/shardplan_*.deb | head -n 1)
[ -f "$deb" ] || fail "no shardplan_*.deb"
dpkg-deb -c "$deb" > contents.txt
grep -q ' ./usr/bin/shardplan$' contents.txt || fail "the package has no /usr/bin/shardplan"
grep -q ' ./usr/bin/shardplan-capture -> ' contents.txt || fail "the package has no capture link"
grep -q './usr/lib/shardplan/capture/shardplan_capture/plan.py' contents.txt ||
  fail "the package has no capture package"
depends=$(dpkg-deb -f "$deb" Depends)
for library in libfmt libopenmpi libtomlplusplus zlib1g; do
  grep -q "$library" <<< "$depends" || fail "Depends has no $library: $depends"
done
if grep -q '"cuda_backend": true' <<< "$version"; then
  cuda_deb=$(ls "$work"/packages/shardplan-cuda_*.deb | head -n 1)
  dpkg-deb -c "$cuda_deb" | grep -q './usr/lib/shardplan/libshardplan_cuda.so' ||
    fail "shardplan-cuda has no plugin"
fi
echo "installed into $prefix and packed $(ls "$work"/packages/*.deb | xargs -n1 basename | tr '\n' ' ')"
