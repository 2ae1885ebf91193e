#!/usr/bin/env bash
# Every C++ source is formatted by the .clang-format at the root (Debian 12's
# clang-format 14: another version may format differently). Prints the files that are
# not, with clang-format's first complaints, and fails.
set -euo pipefail
root="$1"
if ! command -v clang-format >/dev/null; then
  echo "clang-format is not installed: apt-get install clang-format (scripts/install-deps.sh)" >&2
  exit 1
fi
cd "$root"
mapfile -t files < <(find calibrate cli executor interop models planner pool python simulator traces tests \
  \( -name '*.cc' -o -name '*.h' \) -not -path 'tests/fuzz/corpus/*' 2>/dev/null | sort)
echo "${#files[@]} files checked"
# One call for all of them; only when it complains, one call per file to name them.
clang-format --dry-run --Werror "${files[@]}" >/dev/null 2>&1 && exit 0
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (clang-format -i $f)" >&2
    clang-format --dry-run "$f" 2>&1 | head -6 >&2
    bad=1
  fi
done
exit "$bad"
