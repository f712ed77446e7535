#!/usr/bin/env bash
# The test suite: set up, then build and run CTest in three build trees (ASan+UBSan, TSan,
# Release), each running the test tiers that suit it. Exits non-zero on any failure.
#
#   scripts/test.sh         the default tier (CI): what catches the bugs the suites have found
#   scripts/test.sh --all   the full tier: also the stress and slow labels and fuzzing
#
# Every test carries one tier label (cmake/HalTesting.cmake); the table below is the one place
# that says which labels each tree runs. A failed test is run again only when tests/known_flaky.txt
# names it with the failure's message and a reason; every other failure fails the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${HAL_TEST_BUILD_ROOT:-$root/_build-test}"
tier=default
case "${1:-}" in
  "") ;;
  --all) tier=all ;;
  *)
    echo "usage: scripts/test.sh [--all]" >&2
    exit 2
    ;;
esac

# ---- which labels each tree runs -------------------------------------------------------------
# ASan+UBSan: everything that runs HAL's own code, but the work of vendor compilers and the
# packaging checks (uninstrumented or configuration-independent: Release runs them once).
# TSan: the tests of whatever owns threads. Release: everything of the tier.
declare -A labels excludes selects
if [[ "$tier" == default ]]; then
  labels[asan]="-LE ^(vendor-compile|packaging|stress|slow)$"
  # The 3-device collectives profile repeats, in memory, what the 2-device one and the 1..4-rank
  # collectives matrix check under ASan (17 of its test seconds); Release runs it (its selection
  # takes what ASan did not run, and it builds halconform). A test left to Release this way must
  # run programs Release builds: the MPI jobs' worker is a test program it does not build.
  excludes[asan]='^(conformance\.cpu\.collectives\.device3)$'
  # Under TSan each MPI job and each extra device count repeats the threads of a smaller one
  # (ranks are processes; the thread code paths are the same): the 2-rank MPI run and the
  # 2-device collectives profile stay, the 3- and 4-rank ones run in ASan and Release. They were
  # 430 of TSan's 1,170 test seconds. The 2-rank run without cross-memory attach (9 s) repeats
  # np2's threads over the pairwise transport, which the shared-segment tests run under TSan.
  labels[tsan]="-L ^concurrency$"
  excludes[tsan]='^(collectives\.mpi\.np[34]|collectives\.mpi\..*messages_over_mpi|collectives\.mpi\.np2\.(path_verbose|no_cross_memory)|conformance\.cpu\.collectives\.device3)$'
  tsan_targets="hal_tier_concurrency"
  # Release: the vendor compilers' and the packaging tiers, which only it runs, and each other
  # test once per run: a unit, contract or concurrency test the ASan tree ran is not repeated
  # (TSan runs the concurrency ones optimised). What only Release builds runs here: the Python
  # and PyTorch bindings, the allocator cases a sanitizer's allocator hides, and the coverage
  # report with the certification runs it needs (its fixtures: every device, the reference
  # plugin's whole matrix), and the whole conformance self-test. scripts/select_tests.py picks.
  labels[release]="-LE ^(stress|slow)$"
  selects[release]="--skip-tiers (stress|slow) --once (unit|contract|concurrency) --ran-in $out/asan"
  # So it builds the library, plugins, tools, bindings, samples and benchmarks, and of tests/
  # only what its tiers and those tests run.
  # The PyTorch extension is compiled once, by the packaging test torch.wheel (`pip install
  # ./bindings/torch` against this tree installed into a prefix), and hal_torch's suites run in
  # the environment it installs the wheel into (HAL_TORCH_TESTS_ON_WHEEL).
  release_build=(-DHAL_TESTS_IN_ALL=OFF -DHAL_TORCH_TESTS_ON_WHEEL=ON)
  release_targets="all hal_tier_vendor-compile hal_tier_packaging hal_unsanitized"
else
  labels[asan]="-LE ^(vendor-compile|packaging|slow)$"
  labels[tsan]="-L ^(concurrency|stress)$"
  tsan_targets="hal_tier_concurrency hal_tier_stress"
  labels[release]=""
  release_build=(-DHAL_TESTS_IN_ALL=ON)
  release_targets=""
fi

phase_times=()
phase_start() { phase_begin=$SECONDS; }
phase_end() { phase_times+=("$(printf '%5ds  %s' $((SECONDS - phase_begin)) "$1")"); }

phase_start
# --for-tests: the tools only tests use (mypy); --torch: the Release tree builds bindings/torch
# (HAL_BUILD_TORCH) and runs its tests.
"$root/scripts/setup.sh" --for-tests --torch
phase_end setup

# Format, test-registration and SPEC checks first: cheap, and a failure says which file.
phase_start
status=0
"$root/scripts/check_format.sh" || status=1
"$root/scripts/check_tests.sh" || status=1
echo "== [spec] SPEC.md against the headers"
"$root/scripts/check_spec.sh" || status=1
phase_end "format, test registration and SPEC checks"

# One kernel cache and one PoCL cache for the three trees: the compiled kernels do not depend on
# the tree's flags (cmake/hal_test_environment.cmake.in).
export HAL_TEST_SHARED_CACHE_ROOT="$out/caches"
mkdir -p "$HAL_TEST_SHARED_CACHE_ROOT"

# LeakSanitizer comes with ASan on Linux; stated so that nobody turns it off by accident.
# intercept_tls_get_addr=0: GCC 12's LeakSanitizer crashes at exit ("Tracer caught signal 11")
# while a libgomp worker that ran oneDNN (the cpu plugin's matmul) still holds dynamic TLS.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:intercept_tls_get_addr=0}"
# Leaks inside PoCL's LLVM are not ours; tests/sanitizers/lsan.supp says why.
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

suites_run=()
# start_build NAME CMAKE_ARGS...: configures and builds the tree NAME in the background, at the
# lowest CPU priority, into $out/NAME.build.log; finish_build NAME waits for it. A tree is built
# while the tree before it runs its tests: the test phases left a fifth of the CPU idle (tests
# that wait on a gate, a deadline, a peer process or a pip run), and the build at nice 19 takes
# only what the tests leave (the kernel's weights: 15 against their 1024). The build's
# environment (CC, CXX, HAL_BUILD_TARGET) is the caller's.
declare -A build_pids build_started
start_build() {
  local name="$1"
  shift
  build_started[$name]=$SECONDS
  # Its own session (setsid), so that an early exit stops the build's compilers too. A new
  # session is a new scheduling group where the kernel groups sessions (autogroup, Debian's
  # default), and groups share the CPU equally whatever their processes' nice values: the
  # build lowers its own group's weight to nice 19 first (the cold run of 53fb374 gave each
  # of the three builds a third of the CPU: the ASan build took 688 s instead of about 220).
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c '[[ -w /proc/self/autogroup ]] && echo 19 > /proc/self/autogroup
    exec nice -n 19 "$@"' build "$root/scripts/build.sh" "$out/$name" "$@" \
    > "$out/$name.build.log" 2>&1 &
  build_pids[$name]=$!
}
# shellcheck disable=SC2317 # the EXIT trap calls it
stop_builds() {
  local pid
  for pid in "${build_pids[@]}"; do kill -- "-$pid" 2> /dev/null || true; done
}
trap stop_builds EXIT
# finish_build NAME: waits for the build, prints its log, checks every test has one tier label.
finish_build() {
  local name="$1" result=0
  phase_start
  echo "== [$name] build (started $((SECONDS - build_started[$name])) s ago)"
  wait "${build_pids[$name]}" || result=1
  unset "build_pids[$name]"
  cat "$out/$name.build.log"
  if ((result)); then
    phase_end "[$name] build, waited for (FAILED)"
    return 1
  fi
  phase_end "[$name] build, waited for (it began $((SECONDS - build_started[$name])) s before)"
  python3 "$root/scripts/check_test_labels.py" "$out/$name"
}
# run_tests NAME: runs the tree's labels, reruns only known-flaky failures.
run_tests() {
  local name="$1"
  local tree="$out/$name"
  phase_start
  local selection=(${labels[$name]})
  [[ -n "${excludes[$name]:-}" ]] && selection+=(-E "${excludes[$name]}")
  if [[ -n "${selects[$name]:-}" ]]; then
    # shellcheck disable=SC2086 # the options are words by design
    python3 "$root/scripts/select_tests.py" "$tree" "$tree/selected_tests.txt" ${selects[$name]} ||
      return 1
    selection=(-I "$tree/selected_tests.txt")
  fi
  # CTest starts the costliest tests first, by the times of its last run in this tree. A fresh
  # tree has none, and ran them in registration order: the longest ones (a wheel build, the
  # self-test) started last and ran alone at the end. tests/ctest_costs/<tree>.txt holds the
  # tests of over a second from a cold CI run (refresh: scripts/ci_cost_report.py --costs).
  local costs="$tree/Testing/Temporary/CTestCostData.txt"
  if [[ ! -f "$costs" && -f "$root/tests/ctest_costs/$name.txt" ]]; then
    mkdir -p "$(dirname "$costs")"
    cp "$root/tests/ctest_costs/$name.txt" "$costs"
  fi
  # What this tree runs, by name: a later tree's selection runs what this one left out.
  python3 "$root/scripts/select_tests.py" --write-run-list "$tree" "${selection[@]}" || return 1
  echo "== [$name] ctest ${selection[*]}"
  local result=0
  # One test more than cores: a fifth of the test phases' CPU time was idle at -j nproc (tests
  # that wait on a gate, a deadline, a peer process or a pip run).
  (cd "$tree" && ctest --no-tests=error --output-on-failure --timeout 300 -j "$(($(nproc) + 1))" \
    "${selection[@]}") 2>&1 | tee "$tree/ctest.log" || result=1
  if ((result)); then
    # Exits 0 only when every failure was a known-flaky one and passed when run again.
    if python3 "$root/scripts/rerun_known_flaky.py" "$tree" "$root/tests/known_flaky.txt"; then
      result=0
    fi
  fi
  phase_end "[$name] ctest"
  suites_run+=("$tree")
  return $result
}

# The sanitizer trees compile with clang, about twice as fast as g++ 12 on the same sources (a
# cpu plugin test file: 3.3 s against 7.7 s under ASan+UBSan, 4.0 against 8.5 s under TSan);
# Release compiles with g++, the compiler the product ships from. So both compilers' warnings
# hold (-Werror), and UBSan is clang's, which checks more (enum loads, function types).
# Debug information is line tables only: all a sanitizer's report needs (file:line in every
# frame), at 10 % less compile time than -g. TSan's tree builds at -O1, which TSan's authors
# recommend: 25 % less compile time than -O2, about the same test time. (Precompiled standard
# headers per target were tried and dropped: 5-15 % less compile time per target cold, but the
# PCH holds the build folder's path, so ccache missed every file using it in another clone.)
# Every tree compiles as a unity build: each target's sources in batches of 16 per translation unit
# (a source with compile options of its own, such as an ISA-specific kernel or an ASan-tree file
# at -O1, stays alone). Most of the project's files are small and most of their compile time is the
# headers they share (Catch2, the C++ library, oneDNN): ASan+UBSan's tree took about half the
# compiler time. So the sources must not collide when concatenated: a file-local name is unique
# within its target (README.md), which this build checks on every CI run. ccache
# still shares these objects between clones (it hashes the preprocessed text, with paths relative
# to the repository).
unity=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16)
debug_lines=(-DCMAKE_C_FLAGS_DEBUG=-gline-tables-only -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only)
tsan_flags="-O1 -gline-tables-only -DNDEBUG"
tsan_args=("${unity[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="$tsan_flags"
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$tsan_flags" -DHAL_SANITIZE=thread -DHAL_BUILD_BENCH=OFF)
release_args=("${unity[@]}" -DCMAKE_BUILD_TYPE=Release "${release_build[@]}")
# All three trees build from the start: ASan's in the foreground, TSan's and Release's in the
# background at nice 19 (start_build), so they take the CPU that ASan's build and then the
# tests leave idle (a build's configure, link and test-discovery tails; tests that wait).
CC=clang CXX=clang++ HAL_BUILD_TARGET="$tsan_targets" start_build tsan "${tsan_args[@]}"
HAL_BUILD_TARGET="$release_targets" start_build release "${release_args[@]}"
phase_start
echo "== [asan] build"
if CC=clang CXX=clang++ "$root/scripts/build.sh" "$out/asan" "${unity[@]}" -DCMAKE_BUILD_TYPE=Debug \
  "${debug_lines[@]}" -DHAL_SANITIZE=address,undefined -DHAL_BUILD_BENCH=OFF; then
  phase_end "[asan] build"
  { python3 "$root/scripts/check_test_labels.py" "$out/asan" && run_tests asan; } || status=1
else
  phase_end "[asan] build (FAILED)"
  status=1
fi
{ finish_build tsan && run_tests tsan; } || status=1
if [[ "$tier" == all ]]; then
  # Fuzzing (clang, its own build tree, HAL_FUZZ_SECONDS per target). Every tree replays the
  # corpora and the regressions as the unit tests fuzz.replay_*.
  phase_start
  "$root/scripts/fuzz.sh" "$out/fuzz" || status=1
  phase_end "fuzz"
fi
# The release suite runs last so that its CTest summary closes the output.
{ finish_build release && run_tests release; } || status=1

# Where the time went: the phases, the slowest build steps and the slowest tests of each tree.
echo "== where the time went (tier: $tier)"
printf '%s\n' "${phase_times[@]}"
python3 "$root/scripts/ci_cost_report.py" "$out/asan" "$out/tsan" "$out/release"
echo "== test.sh: $([[ $status == 0 ]] && echo passed || echo FAILED) (tier $tier, ${SECONDS}s)"
# The last suite's own summary closes the output.
if [[ -f "$out/release/ctest.log" ]]; then
  echo "== [release] ctest summary"
  sed -n '/tests passed, /,$p' "$out/release/ctest.log"
fi
exit $status
