# cmake -DHOME_DIR=<the tests' HOME> -P hal_test_home_check.cmake: fails,
# naming what it found, when the tests of a ctest run left anything in the
# HOME they ran with (cmake/HalTestEnvironment.cmake).
if(NOT HOME_DIR)
  message(FATAL_ERROR "hal_test_home_check.cmake: HOME_DIR is not set")
endif()
file(GLOB_RECURSE written LIST_DIRECTORIES true "${HOME_DIR}/*")
if(written)
  list(JOIN written "\n  " listing)
  message(FATAL_ERROR
    "the tests wrote into their HOME (${HOME_DIR}), which stands for the home of "
    "whoever runs them: a test that needs a file there must set HOME (or the "
    "variable the writer follows: HAL_CACHE_DIR, POCL_CACHE_DIR, XDG_CACHE_HOME) "
    "to a directory of its own. Found:\n  ${listing}")
endif()
