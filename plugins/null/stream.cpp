// Streams and events. Each operation runs when it is enqueued (memory.cpp),
// so a stream is always idle and every recorded event is complete at once.
// TODO(null): a real device keeps a queue per stream; stream_synchronize and
// event_synchronize then wait on it, and query answers HAL_NOT_READY while
// work is pending.
#include <chrono>

#include "null.hpp"

namespace hal::null_plugin {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t,
                           hal_impl_stream_t** out_stream) {
  Device& self = *to_device(device);
  return plugin::guarded(self.report(), "stream_create", [&] {
    *out_stream = reinterpret_cast<hal_impl_stream_t*>(new Stream{&self});
    return HAL_SUCCESS;
  });
}

hal_result_t stream_destroy(hal_impl_stream_t* stream) {
  // The loader has synchronised the stream.
  delete to_stream(stream);
  return HAL_SUCCESS;
}

hal_result_t stream_synchronize(hal_impl_stream_t*) {
  return HAL_SUCCESS;
}

hal_result_t stream_query(hal_impl_stream_t*) {
  return HAL_SUCCESS;
}

hal_result_t stream_wait_event(hal_impl_stream_t*, hal_impl_event_t*) {
  // The event's captured work has completed already: nothing to wait for.
  return HAL_SUCCESS;
}

hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                          hal_impl_event_t** out_event) {
  Device& self = *to_device(device);
  return plugin::guarded(self.report(), "event_create", [&] {
    auto event = std::make_unique<Event>();
    event->device = &self;
    event->flags = flags;
    *out_event = reinterpret_cast<hal_impl_event_t*>(event.release());
    return HAL_SUCCESS;
  });
}

hal_result_t event_destroy(hal_impl_event_t* event) {
  delete to_event(event);
  return HAL_SUCCESS;
}

hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t*) {
  // The stream's earlier work is done, so the captured point is now.
  to_event(event)->recorded_ns.store(now_ns(), std::memory_order_release);
  return HAL_SUCCESS;
}

hal_result_t event_query(hal_impl_event_t*) {
  return HAL_SUCCESS;
}

hal_result_t event_synchronize(hal_impl_event_t*) {
  return HAL_SUCCESS;
}

hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms) {
  // The loader has checked that both are timing events of one device.
  const int64_t from = to_event(start)->recorded_ns.load(std::memory_order_acquire);
  const int64_t to = to_event(end)->recorded_ns.load(std::memory_order_acquire);
  if (from < 0 || to < 0) {
    return to_event(start)->device->report().fail(
        HAL_ERROR_INVALID_STATE, 0, "event_elapsed_ms: the %s event was never recorded",
        from < 0 ? "start" : "end");
  }
  *out_ms = static_cast<float>(static_cast<double>(to - from) / 1e6);
  return HAL_SUCCESS;
}

}  // namespace hal::null_plugin
