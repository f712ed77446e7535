#!/usr/bin/env bash
# Fails when a C or C++ source under version control is not clang-formatted.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed (scripts/setup.sh)" >&2; exit 1; }
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.c' '*.h' '*.cpp' '*.hpp' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
# Batches of files over every core; clang-format names each file it would change.
mapfile -t bad < <(printf '%s\0' "${files[@]}" |
  xargs -0 -P "$(nproc)" -n 32 clang-format --dry-run --Werror 2>&1 |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if ((${#bad[@]})); then
  echo "check_format: not formatted (run clang-format -i): ${bad[*]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
