# hal_test_expects_output(TEST REGEX): the test passes when its output matches REGEX and no
# sanitizer reported. CTest ignores the exit status of a test that has PASS_REGULAR_EXPRESSION,
# so a sanitizer's report (exit status 1) beside the expected text would otherwise pass unseen
# (a crash by a signal still fails it). Every test judged by its output, in any folder, sets
# its expectation here, never the property directly (scripts/check_tests.sh checks that).
function(hal_test_expects_output test regex)
  get_test_property(${test} FAIL_REGULAR_EXPRESSION fail_patterns)
  if(NOT fail_patterns)
    set(fail_patterns "")
  endif()
  list(APPEND fail_patterns
    "ERROR: AddressSanitizer" "ERROR: LeakSanitizer" "WARNING: ThreadSanitizer" "runtime error: ")
  set_tests_properties(${test} PROPERTIES
    PASS_REGULAR_EXPRESSION "${regex}"
    FAIL_REGULAR_EXPRESSION "${fail_patterns}")
endfunction()

# The halconform tests that check what a kernel computed. A stand-in driver
# that loads modules and records launches without running them (the fake
# cuda, hip and level_zero drivers) fails them, as any driver that does not
# run kernels must; their halconform runs leave these out (--exclude), and a
# real device runs them (scripts/gpu_check.sh).
set(halconform_kernel_runs "core.kernels.arguments,core.kernels.chain_and_unload,core.kernels.grid_coverage,core.kernels.max_block,core.kernels.max_grid,core.kernels.parallelism,core.kernels.shared_memory,core.kernels.shared_memory_limit")
