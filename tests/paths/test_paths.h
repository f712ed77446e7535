/* Where a test finds the build tree's and the repository's files, at run time.
 *
 * The build gives every test target that names a file (hal_test_paths() in
 * cmake/HalTesting.cmake) definitions such as
 *   HAL_TEST_PLUGIN_DIR=hal_test_build_path("lib/hal/plugins")
 * and force-includes this header, so the target's sources use HAL_TEST_PLUGIN_DIR as the
 * absolute path it stands for. The absolute roots are compiled into test_paths.cpp alone: a
 * definition holding the clone's folder made ccache miss the whole unity batch of every test
 * source in another clone of the repository. */
#ifndef HAL_TESTS_PATHS_TEST_PATHS_H
#define HAL_TESTS_PATHS_TEST_PATHS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The absolute path of `relative` in the build tree; valid until the process exits
 * (or the library linking tests/paths is unloaded). */
const char* hal_test_build_path(const char* relative);
/* The absolute path of `relative` in the repository; valid until the process exits
 * (or the library linking tests/paths is unloaded). */
const char* hal_test_source_path(const char* relative);

#ifdef __cplusplus
}
#endif

#endif
