#include "stream.hpp"

#include <memory>

#include "device.hpp"

namespace hal::cuda {
namespace {

// Runs |call| with the stream's device bound; a failure carries the CUresult.
template <class Call>
hal_result_t on_device(Device& device, const char* what, Call&& call) {
  return plugin::guarded(device.report(), what, [&] {
    if (const CUresult bound = device.bind(); bound != CUDA_SUCCESS) {
      return device.fail(bound, what);
    }
    const CUresult result = call(device.api());
    return result == CUDA_SUCCESS ? HAL_SUCCESS : device.fail(result, what);
  });
}

}  // namespace

Stream::~Stream() {
  if (device_.bind() == CUDA_SUCCESS) {
    device_.api().cuStreamSynchronize(stream_);
    device_.api().cuStreamDestroy(stream_);
  }
}

hal_result_t Stream::report_fault(const char* what) const {
  int64_t native_code = 0;
  std::string detail;
  if (!fault_->get(native_code, detail)) return HAL_SUCCESS;
  return device_.report().fail(HAL_ERROR_DEVICE_LOST, native_code, "%s: %s", what, detail.c_str());
}

Event::~Event() {
  if (device_.bind() == CUDA_SUCCESS) device_.api().cuEventDestroy(event_);
}

hal_result_t memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src, size_t size) {
  Stream& self = *to_stream(stream);
  // Unified addressing: the driver tells device, pinned, managed and
  // pageable host memory apart by the pointer.
  return on_device(self.device(), "memcpy_async: cuMemcpyAsync", [&](const DriverApi& cu) {
    return cu.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
                            size, self.get());
  });
}

hal_result_t memset_async(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size) {
  Stream& self = *to_stream(stream);
  return on_device(self.device(), "memset_async: cuMemsetD8Async", [&](const DriverApi& cu) {
    return cu.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(dst), value, size, self.get());
  });
}

hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t /*flags*/,
                           hal_impl_stream_t** out_stream) {
  Device& owner = *to_device(device);
  CUstream created = nullptr;
  const hal_result_t result = on_device(
      owner, "stream_create: cuStreamCreate",
      [&](const DriverApi& cu) { return cu.cuStreamCreate(&created, CU_STREAM_NON_BLOCKING); });
  if (result != HAL_SUCCESS) return result;
  const hal_result_t added = plugin::guarded(owner.report(), "stream_create", [&] {
    auto owned = std::make_unique<Stream>(owner, created);
    created = nullptr;  // owned now
    *out_stream = reinterpret_cast<hal_impl_stream_t*>(owner.add_stream(std::move(owned)));
    return HAL_SUCCESS;
  });
  // Out of host memory before the Stream owned it: give the stream back.
  if (created != nullptr && owner.bind() == CUDA_SUCCESS) owner.api().cuStreamDestroy(created);
  return added;
}

hal_result_t stream_destroy(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "stream_destroy", [&] {
    owner.remove_stream(&self);
    return HAL_SUCCESS;
  });
}

hal_result_t stream_synchronize(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "stream_synchronize", [&] {
    if (const CUresult bound = owner.bind(); bound != CUDA_SUCCESS) {
      return owner.fail(bound, "stream_synchronize");
    }
    const CUresult result = owner.api().cuStreamSynchronize(self.get());
    return result == CUDA_SUCCESS ? self.report_fault("stream_synchronize")
                                  : owner.fail(HAL_ERROR_DEVICE_LOST, result,
                                               "stream_synchronize: cuStreamSynchronize");
  });
}

hal_result_t stream_query(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "stream_query", [&] {
    if (const CUresult bound = owner.bind(); bound != CUDA_SUCCESS) {
      return owner.fail(bound, "stream_query");
    }
    const CUresult result = owner.api().cuStreamQuery(self.get());
    if (result == CUDA_SUCCESS) return self.report_fault("stream_query");
    if (result == CUDA_ERROR_NOT_READY) return HAL_NOT_READY;
    return owner.fail(HAL_ERROR_DEVICE_LOST, result, "stream_query: cuStreamQuery");
  });
}

hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event) {
  Stream& self = *to_stream(stream);
  Event& awaited = *to_event(event);
  // CUDA events work across the contexts of one process.
  return on_device(self.device(), "stream_wait_event: cuStreamWaitEvent", [&](const DriverApi& cu) {
    return cu.cuStreamWaitEvent(self.get(), awaited.get(), 0);
  });
}

hal_result_t stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data) {
  Stream& self = *to_stream(stream);
  // hal_host_fn_t and CUhostFn are both void (*)(void*).
  return on_device(
      self.device(), "stream_enqueue_host_fn: cuLaunchHostFunc",
      [&](const DriverApi& cu) { return cu.cuLaunchHostFunc(self.get(), fn, user_data); });
}

hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                          hal_impl_event_t** out_event) {
  Device& owner = *to_device(device);
  const bool timing = (flags & HAL_EVENT_FLAG_TIMING) != 0;
  CUevent created = nullptr;
  const hal_result_t result =
      on_device(owner, "event_create: cuEventCreate", [&](const DriverApi& cu) {
        return cu.cuEventCreate(&created, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
      });
  if (result != HAL_SUCCESS) return result;
  const hal_result_t added = plugin::guarded(owner.report(), "event_create", [&] {
    auto owned = std::make_unique<Event>(owner, created, timing);
    created = nullptr;  // owned now
    *out_event = reinterpret_cast<hal_impl_event_t*>(owner.add_event(std::move(owned)));
    return HAL_SUCCESS;
  });
  if (created != nullptr && owner.bind() == CUDA_SUCCESS) owner.api().cuEventDestroy(created);
  return added;
}

hal_result_t event_destroy(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "event_destroy", [&] {
    owner.remove_event(&self);  // CUDA lets pending waits on a destroyed event complete
    return HAL_SUCCESS;
  });
}

hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t* stream) {
  Event& self = *to_event(event);
  Stream& target = *to_stream(stream);
  return on_device(target.device(), "event_record: cuEventRecord",
                   [&](const DriverApi& cu) { return cu.cuEventRecord(self.get(), target.get()); });
}

hal_result_t event_query(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "event_query", [&] {
    if (const CUresult bound = owner.bind(); bound != CUDA_SUCCESS) {
      return owner.fail(bound, "event_query");
    }
    const CUresult result = owner.api().cuEventQuery(self.get());
    if (result == CUDA_SUCCESS) return HAL_SUCCESS;
    if (result == CUDA_ERROR_NOT_READY) return HAL_NOT_READY;
    return owner.fail(HAL_ERROR_DEVICE_LOST, result, "event_query: cuEventQuery");
  });
}

hal_result_t event_synchronize(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "event_synchronize", [&] {
    if (const CUresult bound = owner.bind(); bound != CUDA_SUCCESS) {
      return owner.fail(bound, "event_synchronize");
    }
    const CUresult result = owner.api().cuEventSynchronize(self.get());
    return result == CUDA_SUCCESS
               ? HAL_SUCCESS
               : owner.fail(HAL_ERROR_DEVICE_LOST, result, "event_synchronize: cuEventSynchronize");
  });
}

hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms) {
  Event& first = *to_event(start);
  Event& last = *to_event(end);
  Device& owner = first.device();
  return plugin::guarded(owner.report(), "event_elapsed_ms", [&] {
    if (const CUresult bound = owner.bind(); bound != CUDA_SUCCESS) {
      return owner.fail(bound, "event_elapsed_ms");
    }
    const CUresult result = owner.api().cuEventElapsedTime(out_ms, first.get(), last.get());
    if (result == CUDA_SUCCESS) return HAL_SUCCESS;
    // Not complete, or never recorded: the contract's INVALID_STATE.
    if (result == CUDA_ERROR_NOT_READY || result == CUDA_ERROR_INVALID_HANDLE) {
      return owner.fail(HAL_ERROR_INVALID_STATE, result, "event_elapsed_ms: cuEventElapsedTime");
    }
    return owner.fail(result, "event_elapsed_ms: cuEventElapsedTime");
  });
}

}  // namespace hal::cuda
