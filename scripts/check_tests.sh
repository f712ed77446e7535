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
# grep_cmake_files REGEX: FILE:LINE:TEXT of each match in the CMake files. (Not a loop of greps in
# a process substitution: that subshell inherits errexit and pipefail, so the first file without a
# match ended it, and every rule below checked only the top-level CMakeLists.txt.)
grep_cmake_files() {
  grep -n -H -e "$1" -- "${cmake_files[@]}" || true
}
for rule in 'PASS_REGULAR_EXPRESSION:hal_test_expects_output' 'LABELS:hal_test_tier or hal_catch_discover' \
  'catch_discover_tests:hal_catch_discover'; do
  word="${rule%%:*}"
  mapfile -t bad < <(grep_cmake_files "\\b$word\\b")
  if ((${#bad[@]})); then
    printf 'check_tests: set %s through %s: %s\n' "$word" "${rule#*:}" "${bad[@]}" >&2
    status=1
  fi
done
# One CTest slot per test: CTest starts a test of N slots only when N are free at once, which a
# run of one-slot tests never leaves, so every test that asked for more (the MPI jobs, the wheel
# builds, the README's training runs) ran alone at the end of its tree's phase, a minute of each
# CI run. A test that runs several processes or threads shares the cores like any other.
mapfile -t bad < <(grep_cmake_files '\bPROCESSORS\b')
if ((${#bad[@]})); then
  printf 'check_tests: a test takes one CTest slot (no PROCESSORS property): %s\n' "${bad[@]}" >&2
  status=1
fi
((status == 0)) && echo "check_tests: outputs, tiers and Catch2 suites are registered through cmake/HalTesting.cmake"
# Unity builds: a source's file-local name must not take the place of a name that another source
# of its target reaches through `using namespace` (scripts/check_unity_names.py says why).
python3 scripts/check_unity_names.py || status=1
exit $status
