// Events. Every operation is complete when its enqueue returns (memory.cpp),
// so a recorded event is complete at once.
// TODO(null): a real event is a point in the device's queue; synchronize
// waits for it, and query answers HAL_NOT_READY until the queue reaches it.
#include "event.hpp"

#include <chrono>
#include <memory>

namespace hal::null_plugin {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

hal_result_t Event::create(Device& device, hal_event_flags_t flags, Event*& out_event) {
  out_event = device.add_event(std::make_unique<Event>(device, flags));
  return HAL_SUCCESS;
}

hal_result_t Event::record(Stream&) {
  // The stream's earlier work is done, so the captured point is now.
  recorded_ns_.store(now_ns(), std::memory_order_release);
  return HAL_SUCCESS;
}

hal_result_t Event::query() {
  return HAL_SUCCESS;
}

hal_result_t Event::synchronize() {
  return HAL_SUCCESS;
}

hal_result_t Event::elapsed_ms(Event& start, Event& end, float& out_ms) {
  const int64_t from = start.recorded_ns_.load(std::memory_order_acquire);
  const int64_t to = end.recorded_ns_.load(std::memory_order_acquire);
  if (from < 0 || to < 0) {
    return start.device().report().fail(HAL_ERROR_INVALID_STATE, 0,
                                        "event_elapsed_ms: the %s event was never recorded",
                                        from < 0 ? "start" : "end");
  }
  out_ms = static_cast<float>(static_cast<double>(to - from) / 1e6);
  return HAL_SUCCESS;
}

}  // namespace hal::null_plugin
