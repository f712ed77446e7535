#!/usr/bin/env bash
# The whole test suite: set up, then build and run CTest in three configurations:
# release, address+undefined sanitizers, thread sanitizer. Exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${HAL_TEST_BUILD_ROOT:-$root/_build-test}"

# --torch: the Release suite builds bindings/torch (HAL_BUILD_TORCH) and runs its tests.
"$root/scripts/setup.sh" --torch

# Format and test-registration checks first: cheap, and a failure says exactly which file.
"$root/scripts/check_format.sh"
"$root/scripts/check_tests.sh"

# run_suite NAME [--retry] CMAKE_ARGS...
# --retry (the sanitizer builds only): a test that fails is run again, up
# to two more times, and fails the suite only if every run fails. LeakSanitizer's exit-time tracer
# occasionally dies of a signal ("Tracer caught signal 11") while PoCL's worker
# threads are exiting: that is the sanitizer's fault, not the test's. Every
# first failure stays in the log; the Release suite runs without retries.
run_suite() {
  local name="$1"
  shift
  local repeat=()
  if [[ "${1:-}" == "--retry" ]]; then
    repeat=(--repeat until-pass:3)
    shift
  fi
  echo "== [$name] build"
  "$root/scripts/build.sh" "$out/$name" "$@" || return 1
  echo "== [$name] ctest"
  (cd "$out/$name" && ctest --no-tests=error --output-on-failure --timeout 300 -j "$(nproc)" "${repeat[@]}") || return 1
}

status=0
# LeakSanitizer comes with ASan on Linux; stated so that nobody turns it off by accident.
# intercept_tls_get_addr=0: GCC 12's LeakSanitizer crashes at exit ("Tracer caught signal 11")
# while a libgomp worker that ran oneDNN (the cpu plugin's matmul) still holds dynamic TLS.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:intercept_tls_get_addr=0}"
# Leaks inside PoCL's LLVM are not ours; tests/sanitizers/lsan.supp says why.
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
run_suite asan --retry -DCMAKE_BUILD_TYPE=Debug -DHAL_SANITIZE=address,undefined -DHAL_BUILD_BENCH=OFF || status=1
run_suite tsan --retry -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHAL_SANITIZE=thread -DHAL_BUILD_BENCH=OFF || status=1
# Fuzzing (clang, its own build tree, ~20 s per target) and the ABI check against the baseline.
"$root/scripts/fuzz.sh" "$out/fuzz" || status=1
echo "== [abi] check"
"$root/scripts/abi_check.sh" --library "$out/asan/lib/libhal.so" | grep -v '^abi: compatible' || status=1
echo "== [spec] SPEC.md against the headers"
"$root/scripts/check_spec.sh" || status=1
# The release suite runs last so that its CTest summary closes the output.
run_suite release -DCMAKE_BUILD_TYPE=Release || status=1
exit $status
