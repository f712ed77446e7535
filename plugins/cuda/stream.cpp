// Streams of the cuda plugin: non-blocking CUstreams, and the sticky fault a
// failed collective leaves on one (StreamFault).
#include "stream.hpp"

#include <memory>

#include "device.hpp"
#include "event.hpp"

namespace hal::cuda {

hal_result_t Stream::create(Device& device, hal_stream_flags_t, Stream*& out_stream) {
  CUstream created = nullptr;
  const hal_result_t result = device.run("stream_create: cuStreamCreate", [&](const DriverApi& cu) {
    return cu.cuStreamCreate(&created, CU_STREAM_NON_BLOCKING);
  });
  if (result != HAL_SUCCESS) return result;
  std::unique_ptr<Stream> owned;
  try {
    owned = std::make_unique<Stream>(device, created);
  } catch (...) {
    // Out of host memory before the Stream owned it: give the stream back.
    if (device.bind() == CUDA_SUCCESS) device.api().cuStreamDestroy(created);
    throw;
  }
  out_stream = device.add_stream(std::move(owned));
  return HAL_SUCCESS;
}

Stream::~Stream() {
  if (device().bind() == CUDA_SUCCESS) {
    device().api().cuStreamSynchronize(stream_);
    device().api().cuStreamDestroy(stream_);
  }
}

hal_result_t Stream::report_fault(const char* what) const {
  int64_t native_code = 0;
  std::string detail;
  if (!fault_->get(native_code, detail)) return HAL_SUCCESS;
  return device().report().fail(HAL_ERROR_DEVICE_LOST, native_code, "%s: %s", what, detail.c_str());
}

hal_result_t Stream::synchronize() {
  if (const CUresult bound = device().bind(); bound != CUDA_SUCCESS) {
    return device().fail(bound, "stream_synchronize");
  }
  const CUresult result = device().api().cuStreamSynchronize(stream_);
  return result == CUDA_SUCCESS ? report_fault("stream_synchronize")
                                : device().fail(HAL_ERROR_DEVICE_LOST, result,
                                                "stream_synchronize: cuStreamSynchronize");
}

hal_result_t Stream::query() {
  if (const CUresult bound = device().bind(); bound != CUDA_SUCCESS) {
    return device().fail(bound, "stream_query");
  }
  const CUresult result = device().api().cuStreamQuery(stream_);
  if (result == CUDA_SUCCESS) return report_fault("stream_query");
  if (result == CUDA_ERROR_NOT_READY) return HAL_NOT_READY;
  return device().fail(HAL_ERROR_DEVICE_LOST, result, "stream_query: cuStreamQuery");
}

hal_result_t Stream::wait(Event& awaited) {
  // CUDA events work across the contexts of one process.
  return device().run("stream_wait_event: cuStreamWaitEvent", [&](const DriverApi& cu) {
    return cu.cuStreamWaitEvent(stream_, awaited.get(), 0);
  });
}

hal_result_t Stream::enqueue_host_fn(hal_host_fn_t fn, void* user_data) {
  // hal_host_fn_t and CUhostFn are both void (*)(void*).
  return device().run("stream_enqueue_host_fn: cuLaunchHostFunc", [&](const DriverApi& cu) {
    return cu.cuLaunchHostFunc(stream_, fn, user_data);
  });
}

}  // namespace hal::cuda
