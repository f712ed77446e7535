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

# Test tiers. Every test carries exactly one of these LABELS (scripts/check_test_labels.py
# fails the run otherwise), and scripts/test.sh decides from them which tests each build tree
# runs (the table there is the one place that says so):
#   unit            fast, self-contained; every tree
#   contract        API behaviour and certification runs; ASan+UBSan and Release
#   concurrency     threads, streams, events, collectives, abort; TSan as well
#   vendor-compile  the work is a vendor compiler's (NVRTC, hiprtc, PoCL's LLVM); Release only
#   packaging       install trees, out-of-tree builds, ABI and SPEC checks; Release only, once
#   stress          long load and many-object runs; the full tier (scripts/test.sh --all)
#   slow            big matrices and benchmark-like runs; the full tier
# Catch2 suites name theirs in catch_discover_tests(... PROPERTIES LABELS <tier>).
set(HAL_TEST_TIERS unit contract concurrency vendor-compile packaging stress slow)

# One build target per tier, hal_tier_<tier>, that builds what the tier's tests run: a tree that
# runs only some tiers (scripts/test.sh's TSan tree) builds only their targets.
foreach(tier IN LISTS HAL_TEST_TIERS)
  if(NOT TARGET hal_tier_${tier})
    add_custom_target(hal_tier_${tier})
  endif()
endforeach()

# hal_unsanitized_targets(TARGET...): what the tests only a tree without sanitizers runs need
# from tests/ (built by hal_unsanitized): the whole conformance self-test and the reference
# plugin's full matrix (a sanitized tree runs their quick parts), the cases glibc's own allocator
# decides (a sanitizer brings its own). scripts/test.sh's Release tree runs those and its own
# tiers and builds nothing else under tests/ (HAL_TESTS_IN_ALL=OFF). A suite left out here is
# reported by ctest as <target>_NOT_BUILT, or as a command not found, where a run selects it.
if(NOT TARGET hal_unsanitized)
  add_custom_target(hal_unsanitized)
endif()
function(hal_unsanitized_targets)
  if(NOT HAL_SANITIZE)
    add_dependencies(hal_unsanitized ${ARGN})
  endif()
endfunction()

# hal_test_paths(TARGET NAME=VALUE...): target_compile_definitions(TARGET PRIVATE ...) for
# definitions that name files. A value in the build tree (under PROJECT_BINARY_DIR, or a
# $<TARGET_FILE:...>) or in the repository (under PROJECT_SOURCE_DIR) becomes
# hal_test_build_path("<relative>") or hal_test_source_path("<relative>"), resolved at run time
# by tests/paths; any other definition is passed as it is. So no test source's compile command
# holds the clone's folder, and ccache serves a second clone's tests (tests/paths/test_paths.h).
function(hal_test_paths target)
  set(definitions "")
  foreach(definition IN LISTS ARGN)
    if(NOT definition MATCHES "^([A-Za-z_][A-Za-z_0-9]*)=\"?([^\"]*)\"?$")
      list(APPEND definitions "${definition}")
      continue()
    endif()
    set(name "${CMAKE_MATCH_1}")
    set(value "${CMAKE_MATCH_2}")
    # Prefixes compared as text: a folder's name may hold a regular expression's characters.
    string(LENGTH "${PROJECT_BINARY_DIR}/" build_length)
    string(LENGTH "${PROJECT_SOURCE_DIR}/" source_length)
    string(FIND "${value}" "${PROJECT_BINARY_DIR}/" in_build)
    string(FIND "${value}" "${PROJECT_SOURCE_DIR}/" in_source)
    if(value MATCHES "^\\$<TARGET_FILE:[^>]+>$")
      list(APPEND definitions
        "${name}=hal_test_build_path(\"$<PATH:RELATIVE_PATH,${value},${PROJECT_BINARY_DIR}>\")")
    elseif(in_build EQUAL 0)
      string(SUBSTRING "${value}" ${build_length} -1 relative)
      list(APPEND definitions "${name}=hal_test_build_path(\"${relative}\")")
    elseif(in_source EQUAL 0)
      string(SUBSTRING "${value}" ${source_length} -1 relative)
      list(APPEND definitions "${name}=hal_test_source_path(\"${relative}\")")
    else()
      list(APPEND definitions "${definition}")
    endif()
  endforeach()
  target_compile_definitions(${target} PRIVATE ${definitions})
  target_link_libraries(${target} PRIVATE hal_test_paths)
endfunction()

# hal_optimize_when_sanitized(SOURCE...): in the ASan+UBSan tree (a Debug build, so -O0),
# these sources compile at -O1, as the TSan tree's all do. Name a file only where perf shows
# the test time is its own -O0 code: float64 references, seeded inputs and element checks
# through std::vector, std::function and <random>, 5-10x slower than at -O1 (the 4-rank
# collectives matrix and its TCP-store twin: 70 of their 75 CPU seconds under ASan; the
# operators profile: halconform's checks are 57 % of its 50 CPU seconds). The whole tree at -O1
# ran the tests 3x faster but compiled 2x slower: a cold CI run would lose. Call it in the
# directory that adds the sources' target (source properties are per directory).
function(hal_optimize_when_sanitized)
  # Outside unity batches in every tree, so that each tree concatenates the same sources (a
  # source with options of its own is compiled alone: the batches would differ between trees).
  set_property(SOURCE ${ARGN} PROPERTY SKIP_UNITY_BUILD_INCLUSION ON)
  if(HAL_SANITIZE MATCHES "address" AND CMAKE_BUILD_TYPE STREQUAL "Debug")
    set_property(SOURCE ${ARGN} APPEND PROPERTY COMPILE_OPTIONS -O1)
  endif()
endfunction()

# hal_test_tier(TIER TEST... [TARGETS TARGET...]): gives each named test its tier; TARGETS are
# what the tests run (their executables, and plugins they load), built by hal_tier_<TIER>.
function(hal_test_tier tier)
  if(NOT tier IN_LIST HAL_TEST_TIERS)
    message(FATAL_ERROR "hal_test_tier: '${tier}' is not one of: ${HAL_TEST_TIERS}")
  endif()
  cmake_parse_arguments(arg "" "" "TARGETS" ${ARGN})
  set_tests_properties(${arg_UNPARSED_ARGUMENTS} PROPERTIES LABELS ${tier})
  if(arg_TARGETS)
    add_dependencies(hal_tier_${tier} ${arg_TARGETS})
  endif()
endfunction()

# hal_catch_discover(TARGET PREFIX <prefix> TIER <tier> [TEST_SPEC <spec>]
#                    [ENVIRONMENT <var=value>...] [ENVIRONMENT_MODIFICATION <op>...])
# Registers the Catch2 test cases of TARGET as CTest tests named <prefix><case name>, each with
# its tier and environment. catch_discover_tests alone cannot carry a list-valued property (it
# passes PROPERTIES to its discovery script as one list and pairs the items up again, so an
# environment of two variables became two property names); here the properties are set by a
# script of our own that ctest reads after the discovered list.
function(hal_catch_discover target)
  cmake_parse_arguments(arg "" "PREFIX;TIER;TEST_SPEC" "ENVIRONMENT;ENVIRONMENT_MODIFICATION"
    ${ARGN})
  if(arg_UNPARSED_ARGUMENTS OR NOT DEFINED arg_PREFIX OR NOT arg_TIER)
    message(FATAL_ERROR "hal_catch_discover(${target}): want PREFIX, TIER and optional "
      "TEST_SPEC, ENVIRONMENT, ENVIRONMENT_MODIFICATION; got ${ARGN}")
  endif()
  if(NOT arg_TIER IN_LIST HAL_TEST_TIERS)
    message(FATAL_ERROR "hal_catch_discover(${target}): '${arg_TIER}' is not one of: ${HAL_TEST_TIERS}")
  endif()
  # One list variable per call (a target may be discovered twice with different specs).
  string(MAKE_C_IDENTIFIER "hal_catch_${target}_${arg_PREFIX}_${arg_TEST_SPEC}" list_variable)
  set(spec_arguments "")
  if(DEFINED arg_TEST_SPEC)
    set(spec_arguments TEST_SPEC "${arg_TEST_SPEC}")
  endif()
  # --warn NoTests: a registered test whose name matches no test case fails (Catch2's exit 2).
  # Without it, a case whose name CTest cut (a ';' ends a CMake list item) ran nothing and
  # passed: twelve such cases never ran.
  catch_discover_tests(${target} TEST_PREFIX "${arg_PREFIX}" TEST_LIST ${list_variable}
    ${spec_arguments} EXTRA_ARGS --warn NoTests)
  add_dependencies(hal_tier_${arg_TIER} ${target})
  set(properties "LABELS ${arg_TIER}")
  if(arg_ENVIRONMENT)
    string(APPEND properties " ENVIRONMENT [==[${arg_ENVIRONMENT}]==]")
  endif()
  if(arg_ENVIRONMENT_MODIFICATION)
    string(APPEND properties " ENVIRONMENT_MODIFICATION [==[${arg_ENVIRONMENT_MODIFICATION}]==]")
  endif()
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${list_variable}_properties.cmake")
  file(GENERATE OUTPUT "${script}" CONTENT
    "if(${list_variable})\n  set_tests_properties(\${${list_variable}} PROPERTIES ${properties})\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()

# The halconform tests that check what a kernel computed. A stand-in driver
# that loads modules and records launches without running them (the fake
# cuda, hip and level_zero drivers) fails them, as any driver that does not
# run kernels must; their halconform runs leave these out (--exclude), and a
# real device runs them (scripts/gpu_check.sh).
set(halconform_kernel_runs "core.kernels.arguments,core.kernels.chain_and_unload,core.kernels.grid_coverage,core.kernels.max_block,core.kernels.max_grid,core.kernels.parallelism,core.kernels.shared_memory,core.kernels.shared_memory_limit")
