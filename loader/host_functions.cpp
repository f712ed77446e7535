#include "host_functions.hpp"

#include "api_common.hpp"
#include "fallbacks.hpp"

#include <memory>
#include <new>

namespace hal::loader {

namespace {

// The host function running on this thread, innermost first (a host
// function of a plugin without HAL_DEVICE_CAP_HOST_CALLBACKS runs on the
// enqueuing thread, which may itself be running one).
struct RunningHostFn {
  const hal_stream_s* stream;
  const hal_device_s* device;
  const RunningHostFn* outer;
};
thread_local const RunningHostFn* t_running = nullptr;

struct ApplicationHostFn {
  hal_host_fn_t fn;
  void* user_data;
  const hal_stream_s* stream;
  const hal_device_s* device;
};

void run_application_host_fn(void* data) noexcept {
  const std::unique_ptr<ApplicationHostFn> call(static_cast<ApplicationHostFn*>(data));
  const RunningHostFn running{call->stream, call->device, t_running};
  t_running = &running;
  call->fn(call->user_data);
  t_running = running.outer;
}

}  // namespace

hal_result_t enqueue_application_host_fn(hal_stream_s* stream, hal_host_fn_t fn, void* user_data,
                                         const char* function) noexcept {
  std::unique_ptr<ApplicationHostFn> call(
      new (std::nothrow) ApplicationHostFn{fn, user_data, stream, stream->device});
  if (call == nullptr) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, function, "no memory to queue the host function");
  }
  const hal_result_t result =
      enqueue_host_fn(stream, run_application_host_fn, call.get(), function);
  // Enqueued (or already run, on a plugin without host callbacks): the
  // trampoline owns it.
  if (result == HAL_SUCCESS) call.release();
  return result;
}

hal_result_t refuse_wait_in_host_fn(const hal_stream_s* stream, const hal_device_s* device,
                                    const char* function) noexcept {
  for (const RunningHostFn* running = t_running; running != nullptr; running = running->outer) {
    if (stream != nullptr && running->stream == stream) {
      return fail(HAL_ERROR_INVALID_STATE, function,
                  "called from a host function of this stream, which waits for that function "
                  "to return: it would never finish");
    }
    if (device != nullptr && running->device == device) {
      return fail(HAL_ERROR_INVALID_STATE, function,
                  "called from a host function of a stream of this device: waiting for the "
                  "device's work waits for that function, which would never return");
    }
  }
  return HAL_SUCCESS;
}

}  // namespace hal::loader
