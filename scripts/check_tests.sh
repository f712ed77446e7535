#!/usr/bin/env bash
# Fails when a CMake file sets a test's PASS_REGULAR_EXPRESSION or LABELS itself instead of through
# cmake/HalTesting.cmake: hal_test_expects_output (CTest ignores the exit status of a test that has
# PASS_REGULAR_EXPRESSION, and only that function also fails the test on a sanitizer's report), and
# hal_test_tier / hal_catch_discover (a test's one tier label, and the build target of its tier);
# and runs scripts/check_unity_names.py.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mapfile -t cmake_files < <(git ls-files -co --exclude-standard -- 'CMakeLists.txt' '*/CMakeLists.txt' '*.cmake' |
  grep -v '^cmake/HalTesting.cmake$' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
status=0
for rule in 'PASS_REGULAR_EXPRESSION:hal_test_expects_output' 'LABELS:hal_test_tier or hal_catch_discover' \
  'catch_discover_tests:hal_catch_discover'; do
  word="${rule%%:*}"
  mapfile -t bad < <(for f in "${cmake_files[@]}"; do grep -n "\\b$word\\b" "$f" | sed "s|^|$f:|"; done)
  if ((${#bad[@]})); then
    printf 'check_tests: set %s through %s: %s\n' "$word" "${rule#*:}" "${bad[@]}" >&2
    status=1
  fi
done
((status == 0)) && echo "check_tests: outputs, tiers and Catch2 suites are registered through cmake/HalTesting.cmake"
# Unity builds: a source's file-local name must not take the place of a name that another source
# of its target reaches through `using namespace` (scripts/check_unity_names.py says why).
python3 scripts/check_unity_names.py || status=1
exit $status
