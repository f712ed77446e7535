#include "stream.hpp"

#include <memory>

#include "device.hpp"

namespace hal::hip {
namespace {

// Runs |call| with the device current; a failure carries the hipError_t.
template <class Call>
hal_result_t on_device(Device& device, const char* what, Call&& call) {
  return plugin::guarded(device.report(), what, [&] {
    if (const hipError_t bound = device.bind(); bound != hipSuccess) {
      return device.fail(bound, what);
    }
    const hipError_t result = call(device.api());
    return result == hipSuccess ? HAL_SUCCESS : device.fail(result, what);
  });
}

// A synchronize or a query: NOT_READY is an answer, any other failure means
// the work on the device did not complete (HAL_ERROR_DEVICE_LOST).
template <class Call>
hal_result_t wait_or_query(Device& device, const char* what, bool query, Call&& call) {
  return plugin::guarded(device.report(), what, [&] {
    if (const hipError_t bound = device.bind(); bound != hipSuccess) {
      return device.fail(bound, what);
    }
    const hipError_t result = call(device.api());
    if (result == hipSuccess) return HAL_SUCCESS;
    if (query && result == hipErrorNotReady) return HAL_NOT_READY;
    return device.fail(HAL_ERROR_DEVICE_LOST, result, what);
  });
}

}  // namespace

// Teardown has no caller to report to: a failure here (a lost device) is
// dropped, and the handle is gone either way.
Stream::~Stream() {
  if (device_.bind() == hipSuccess) {
    (void)device_.api().hipStreamSynchronize(stream_);
    (void)device_.api().hipStreamDestroy(stream_);
  }
}

Event::~Event() {
  if (device_.bind() == hipSuccess) (void)device_.api().hipEventDestroy(event_);
}

hal_result_t memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src, size_t size) {
  Stream& self = *to_stream(stream);
  // hipMemcpyDefault: unified addressing tells device, pinned, managed and
  // pageable host memory apart by the pointer.
  return on_device(self.device(), "memcpy_async: hipMemcpyAsync", [&](const RuntimeApi& hip) {
    return hip.hipMemcpyAsync(dst, src, size, hipMemcpyDefault, self.get());
  });
}

hal_result_t memset_async(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size) {
  Stream& self = *to_stream(stream);
  return on_device(self.device(), "memset_async: hipMemsetAsync", [&](const RuntimeApi& hip) {
    return hip.hipMemsetAsync(dst, value, size, self.get());
  });
}

hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t /*flags*/,
                           hal_impl_stream_t** out_stream) {
  Device& owner = *to_device(device);
  hipStream_t created = nullptr;
  const hal_result_t result =
      on_device(owner, "stream_create: hipStreamCreateWithFlags", [&](const RuntimeApi& hip) {
        return hip.hipStreamCreateWithFlags(&created, hipStreamNonBlocking);
      });
  if (result != HAL_SUCCESS) return result;
  const hal_result_t added = plugin::guarded(owner.report(), "stream_create", [&] {
    auto owned = std::make_unique<Stream>(owner, created);
    created = nullptr;  // owned now
    *out_stream = reinterpret_cast<hal_impl_stream_t*>(owner.add_stream(std::move(owned)));
    return HAL_SUCCESS;
  });
  // Out of host memory before the Stream owned it: give the stream back.
  if (created != nullptr) (void)owner.api().hipStreamDestroy(created);
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
  return wait_or_query(self.device(), "stream_synchronize: hipStreamSynchronize", false,
                       [&](const RuntimeApi& hip) { return hip.hipStreamSynchronize(self.get()); });
}

hal_result_t stream_query(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  return wait_or_query(self.device(), "stream_query: hipStreamQuery", true,
                       [&](const RuntimeApi& hip) { return hip.hipStreamQuery(self.get()); });
}

hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event) {
  Stream& self = *to_stream(stream);
  Event& awaited = *to_event(event);
  // HIP events work across the devices of one process.
  return on_device(
      self.device(), "stream_wait_event: hipStreamWaitEvent",
      [&](const RuntimeApi& hip) { return hip.hipStreamWaitEvent(self.get(), awaited.get(), 0); });
}

namespace {

// What hipStreamAddCallback hands its callback back: the HAL function and its
// argument. Owned by the runtime's callback from a successful enqueue on.
struct HostCall {
  hal_host_fn_t fn;
  void* user_data;
};

void run_host_call(hipStream_t /*stream*/, hipError_t /*status*/, void* data) {
  // Runs even when earlier work failed (status): the HAL contract runs fn
  // once per enqueue, and the failure surfaces at the next synchronise.
  const std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
  call->fn(call->user_data);
}

}  // namespace

hal_result_t stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data) {
  Stream& self = *to_stream(stream);
  const RuntimeApi& api = self.device().api();
  if (api.hipLaunchHostFunc != nullptr) {
    // hal_host_fn_t and hipHostFn_t are both void (*)(void*).
    return on_device(
        self.device(), "stream_enqueue_host_fn: hipLaunchHostFunc",
        [&](const RuntimeApi& hip) { return hip.hipLaunchHostFunc(self.get(), fn, user_data); });
  }
  // HIP 5.2 exports no hipLaunchHostFunc: a stream callback, which also
  // holds back the stream's later work until it returns.
  return plugin::guarded(self.device().report(), "stream_enqueue_host_fn", [&] {
    auto call = std::make_unique<HostCall>(HostCall{fn, user_data});
    const hal_result_t result = on_device(
        self.device(), "stream_enqueue_host_fn: hipStreamAddCallback", [&](const RuntimeApi& hip) {
          return hip.hipStreamAddCallback(self.get(), run_host_call, call.get(), 0);
        });
    if (result == HAL_SUCCESS) (void)call.release();  // run_host_call frees it
    return result;
  });
}

hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                          hal_impl_event_t** out_event) {
  Device& owner = *to_device(device);
  const bool timing = (flags & HAL_EVENT_FLAG_TIMING) != 0;
  hipEvent_t created = nullptr;
  const hal_result_t result =
      on_device(owner, "event_create: hipEventCreateWithFlags", [&](const RuntimeApi& hip) {
        return hip.hipEventCreateWithFlags(&created,
                                           timing ? hipEventDefault : hipEventDisableTiming);
      });
  if (result != HAL_SUCCESS) return result;
  const hal_result_t added = plugin::guarded(owner.report(), "event_create", [&] {
    auto owned = std::make_unique<Event>(owner, created, timing);
    created = nullptr;  // owned now
    *out_event = reinterpret_cast<hal_impl_event_t*>(owner.add_event(std::move(owned)));
    return HAL_SUCCESS;
  });
  if (created != nullptr) (void)owner.api().hipEventDestroy(created);
  return added;
}

hal_result_t event_destroy(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "event_destroy", [&] {
    owner.remove_event(&self);  // HIP lets pending waits on a destroyed event complete
    return HAL_SUCCESS;
  });
}

hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t* stream) {
  Event& self = *to_event(event);
  Stream& target = *to_stream(stream);
  return on_device(target.device(), "event_record: hipEventRecord", [&](const RuntimeApi& hip) {
    return hip.hipEventRecord(self.get(), target.get());
  });
}

hal_result_t event_query(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  return wait_or_query(self.device(), "event_query: hipEventQuery", true,
                       [&](const RuntimeApi& hip) { return hip.hipEventQuery(self.get()); });
}

hal_result_t event_synchronize(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  return wait_or_query(self.device(), "event_synchronize: hipEventSynchronize", false,
                       [&](const RuntimeApi& hip) { return hip.hipEventSynchronize(self.get()); });
}

hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms) {
  Event& first = *to_event(start);
  Event& last = *to_event(end);
  Device& owner = first.device();
  return plugin::guarded(owner.report(), "event_elapsed_ms", [&] {
    if (const hipError_t bound = owner.bind(); bound != hipSuccess) {
      return owner.fail(bound, "event_elapsed_ms");
    }
    const hipError_t result = owner.api().hipEventElapsedTime(out_ms, first.get(), last.get());
    if (result == hipSuccess) return HAL_SUCCESS;
    // Not complete, or never recorded: the contract's INVALID_STATE.
    if (result == hipErrorNotReady || result == hipErrorInvalidHandle) {
      return owner.fail(HAL_ERROR_INVALID_STATE, result, "event_elapsed_ms: hipEventElapsedTime");
    }
    return owner.fail(result, "event_elapsed_ms: hipEventElapsedTime");
  });
}

}  // namespace hal::hip
