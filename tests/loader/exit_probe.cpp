// Run by lifetime_test.cpp: initialises HAL, fails one call, creates a stream on device 0 and
// returns from main
// without hal_shutdown, so the teardown runs while the process exits. Output: one line
// "exit_probe: init=<result> stream=<result>", then whatever the exit prints.
#include <hal.h>

#include <cstdio>

int main() {
  const hal_result_t init = hal_init(nullptr);
  hal_result_t stream_result = HAL_ERROR_NOT_INITIALIZED;
  if (init == HAL_SUCCESS) {
    hal_device_t device = nullptr;
    hal_stream_t stream = nullptr;
    // A failed call first: this thread's error detail then holds a message of its own, which
    // the thread's exit destroys before the static objects.
    (void)hal_device_get(1u << 20, &device);
    stream_result = hal_device_get(0, &device);
    if (stream_result == HAL_SUCCESS) stream_result = hal_stream_create(device, 0, &stream);
  }
  std::printf("exit_probe: init=%s stream=%s\n", hal_result_string(init),
              hal_result_string(stream_result));
  std::fflush(stdout);
  return 0;
}
