# No test writes into the home of whoever runs the suite. The kernel caches
# default to $HOME/.cache (SPEC.md §8), so a test that compiles kernels with
# no cache directory of its own would otherwise leave entries there.
#
# ctest reads hal_test_environment.cmake before it starts any test of this
# tree and runs every test in the environment that script sets: HOME is an
# empty directory of the build tree (the XDG_*_HOME variables unset, so what
# follows them follows HOME), and HAL's and pocl's kernel caches are
# directories of the build tree. A test that sets one of them itself (its
# ENVIRONMENT property, or setenv inside the test) still has its own.
# CTestCustom.cmake empties that HOME before a run and, after the last test,
# fails the run (ctest exits non-zero) when a test left anything in it.

set(_hal_test_environment_dir "${CMAKE_CURRENT_LIST_DIR}")

# The script is a TEST_INCLUDE_FILE of every directory of the tree, so that
# a ctest started in a subdirectory of the build tree reads it as well.
function(_hal_include_test_environment directory script)
  set_property(DIRECTORY "${directory}" APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
  get_property(subdirectories DIRECTORY "${directory}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    _hal_include_test_environment("${subdirectory}" "${script}")
  endforeach()
endfunction()

# Called once, at the end of the top-level CMakeLists.txt, after every
# directory that adds tests.
function(hal_keep_tests_out_of_home)
  set(HAL_TEST_HOME "${PROJECT_BINARY_DIR}/test-home")
  set(HAL_TEST_CACHE_DIR "${PROJECT_BINARY_DIR}/kernel-cache")
  set(HAL_TEST_POCL_CACHE_DIR "${PROJECT_BINARY_DIR}/pocl-cache")
  # The tests that build a project (tests/install) compile through the cache of whoever
  # configured the tree, where its own builds went: a fresh clone's wheel builds reuse the last
  # run's objects. A cache of the tree's own when there is no ccache to ask.
  set(HAL_TEST_CCACHE_DIR "${PROJECT_BINARY_DIR}/test-ccache")
  find_program(HAL_CCACHE_PROGRAM ccache)
  if(HAL_CCACHE_PROGRAM)
    execute_process(COMMAND "${HAL_CCACHE_PROGRAM}" -k cache_dir OUTPUT_VARIABLE cache_dir
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE cache_dir_failed)
    if(NOT cache_dir_failed AND IS_ABSOLUTE "${cache_dir}")
      set(HAL_TEST_CCACHE_DIR "${cache_dir}")
    endif()
  endif()
  # An ASan tree's LeakSanitizer suppressions (hal_test_environment.cmake.in says why).
  set(HAL_TEST_LSAN_SUPPRESSIONS "")
  if(HAL_SANITIZE MATCHES "address")
    set(HAL_TEST_LSAN_SUPPRESSIONS "${PROJECT_SOURCE_DIR}/tests/sanitizers/lsan.supp")
  endif()
  set(HAL_TEST_HOME_CHECK "${_hal_test_environment_dir}/hal_test_home_check.cmake")
  set(script "${PROJECT_BINARY_DIR}/hal_test_environment.cmake")
  configure_file("${_hal_test_environment_dir}/hal_test_environment.cmake.in" "${script}" @ONLY)
  configure_file("${_hal_test_environment_dir}/CTestCustom.cmake.in"
    "${PROJECT_BINARY_DIR}/CTestCustom.cmake" @ONLY)
  _hal_include_test_environment("${PROJECT_SOURCE_DIR}" "${script}")
endfunction()
