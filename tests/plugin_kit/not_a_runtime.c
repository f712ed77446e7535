/* A shared library that is no vendor runtime: the GPU plugins' tests point
 * HAL_CUDA_DRIVER_PATH, HAL_HIP_RUNTIME_PATH and HAL_LEVEL_ZERO_LOADER_PATH at
 * it to check that a library refused for its missing entry points is closed
 * again (hal_plugin_sdk/vendor_library.hpp), not left mapped. */
int hal_test_not_a_runtime(void) {
  return 42;
}
