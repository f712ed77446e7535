#!/usr/bin/env bash
# Fails when a C or C++ source under version control is not clang-formatted.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.c' '*.h' '*.cpp' '*.hpp' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check_format: not formatted (run clang-format -i): ${bad[*]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
