// Streams of the cuda plugin: non-blocking CUstreams, and the sticky fault a
// failed collective leaves on one (StreamFault).
#include "stream.hpp"

#include <memory>
#include <string>

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
    if (const ContextScope bound = device.bind(); bound.ok()) device.api().cuStreamDestroy(created);
    throw;
  }
  out_stream = device.add_stream(std::move(owned));
  return HAL_SUCCESS;
}

Stream::~Stream() {
  if (const ContextScope bound = device().bind(); bound.ok()) {
    device().api().cuStreamSynchronize(stream_);
    device().api().cuStreamDestroy(stream_);
    if (staging_ != nullptr) device().api().cuMemFreeHost(staging_);
    if (host_functions_) host_functions_->free_counter();
  }
  host_functions_.reset();  // every function ran: the stream was synchronised
}

hal_result_t Stream::report_fault(const char* what) const {
  int64_t native_code = 0;
  std::string detail;
  if (!fault_->get(native_code, detail)) return HAL_SUCCESS;
  return device().report().fail(HAL_ERROR_DEVICE_LOST, native_code, "%s: %s", what, detail.c_str());
}

hal_result_t Stream::synchronize() {
  const ContextScope bound = device().bind();
  if (!bound.ok()) {
    return device().fail(bound.result(), "stream_synchronize");
  }
  const CUresult result = device().api().cuStreamSynchronize(stream_);
  return result == CUDA_SUCCESS ? report_fault("stream_synchronize")
                                : device().fail(HAL_ERROR_DEVICE_LOST, result,
                                                "stream_synchronize: cuStreamSynchronize");
}

hal_result_t Stream::query() {
  const ContextScope bound = device().bind();
  if (!bound.ok()) {
    return device().fail(bound.result(), "stream_query");
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
  // On the stream's host thread, never the driver's (host_functions.hpp).
  const ContextScope bound = device().bind();
  if (!bound.ok()) return device().fail(bound.result(), "stream_enqueue_host_fn");
  std::lock_guard lock(host_functions_mutex_);
  if (!host_functions_ && !driver_thread_only_) {
    const CUresult made = HostFunctions::create(device().api(), stream_, host_functions_);
    if (made == CUDA_ERROR_NOT_SUPPORTED) {
      // No stream memory operations on this device: the function runs on
      // the driver's thread, where it must not call CUDA (SPEC §10.7).
      driver_thread_only_ = true;
      device().report().log(HAL_LOG_WARNING,
                            "cuda: cuStreamWaitValue32 is not supported; host functions run on "
                            "the driver's thread and must not call HAL on a cuda device");
    } else if (made != CUDA_SUCCESS) {
      return device().fail(made, "stream_enqueue_host_fn: its host thread's counter");
    }
  }
  if (driver_thread_only_) {
    struct Call {
      hal_host_fn_t fn;
      void* user_data;
    };
    auto call = std::make_unique<Call>(Call{fn, user_data});
    const CUresult result = device().api().cuLaunchHostFunc(
        stream_,
        [](void* data) {
          const std::unique_ptr<Call> owned(static_cast<Call*>(data));
          set_on_driver_thread(true);  // its HAL calls are refused, not run
          owned->fn(owned->user_data);
          set_on_driver_thread(false);
        },
        call.get());
    if (result != CUDA_SUCCESS) {
      return device().fail(result, "stream_enqueue_host_fn: cuLaunchHostFunc");
    }
    call.release();  // the trampoline deletes it
    return HAL_SUCCESS;
  }
  const char* call = "";
  const CUresult result = host_functions_->enqueue(stream_, fn, user_data, call);
  if (result == CUDA_SUCCESS) return HAL_SUCCESS;
  const std::string what = std::string("stream_enqueue_host_fn: ") + call;
  return device().fail(result, what.c_str());
}

}  // namespace hal::cuda
