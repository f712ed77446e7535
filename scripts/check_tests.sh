#!/usr/bin/env bash
# Fails when a CMake file sets a test's PASS_REGULAR_EXPRESSION itself instead of through
# hal_test_expects_output (cmake/HalTesting.cmake): CTest then ignores the test's exit status,
# and only that function also fails the test on a sanitizer's report.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mapfile -t bad < <(git ls-files -co --exclude-standard -- 'CMakeLists.txt' '*/CMakeLists.txt' '*.cmake' |
  grep -v '^cmake/HalTesting.cmake$' | while read -r f; do
    [ -f "$f" ] && grep -n 'PASS_REGULAR_EXPRESSION' "$f" | sed "s|^|$f:|"
  done)
if ((${#bad[@]})); then
  printf 'check_tests: set PASS_REGULAR_EXPRESSION through hal_test_expects_output: %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_tests: every test judged by its output goes through hal_test_expects_output"
