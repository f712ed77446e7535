#include "event.hpp"

#include "device.hpp"
#include "plugin.hpp"
#include "stream.hpp"
#include "thread_pool.hpp"

namespace hal::cpu {
namespace {

// Polls a marker this long before sleeping: cross-stream dependencies are
// often satisfied within microseconds.
constexpr auto kMarkerSpin = std::chrono::microseconds(30);

}  // namespace

void CompletionSignal::notify_all() {
  if (sleepers_.load() == 0) return;  // seq_cst, pairs with wait()'s increment
  {
    // Taking the lock orders this notify after a sleeper's predicate check.
    std::lock_guard lock(mutex_);
  }
  cv_.notify_all();
}

void complete_marker(Marker& marker, bool failed, CompletionSignal& signal) {
  marker.failed = failed;
  marker.time = std::chrono::steady_clock::now();
  marker.done.store(true);  // seq_cst: ordered before notify_all's sleeper check
  signal.notify_all();
  std::vector<MarkerWaiter> waiters;
  {
    // add_marker_waiter checks done under this lock: no waiter is missed.
    std::lock_guard lock(marker.waiters_mutex);
    waiters.swap(marker.waiters);
  }
  for (const MarkerWaiter& waiter : waiters) waiter.wake(waiter.context);
}

bool add_marker_waiter(Marker& marker, MarkerWaiter waiter) {
  std::lock_guard lock(marker.waiters_mutex);
  if (marker.done.load()) return false;
  marker.waiters.push_back(waiter);
  return true;
}

void wait_marker(const Marker& marker, CompletionSignal& signal) {
  const auto deadline = std::chrono::steady_clock::now() + kMarkerSpin;
  for (uint32_t i = 0; !marker.done.load(std::memory_order_acquire); ++i) {
    spin_pause(i);
    if ((i & 63u) == 63u && std::chrono::steady_clock::now() > deadline) {
      signal.wait([&] { return marker.done.load(); });
      return;
    }
  }
}

std::shared_ptr<Marker> Event::marker() const {
  std::lock_guard lock(mutex_);
  return marker_;
}

void Event::set_marker(std::shared_ptr<Marker> marker) {
  std::lock_guard lock(mutex_);
  marker_ = std::move(marker);
}

// ---- table entries ----------------------------------------------------------

hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                          hal_impl_event_t** out_event) {
  Device& owner = *to_device(device);
  return plugin::guarded(owner.report(), "event_create", [&] {
    if ((flags & ~static_cast<hal_event_flags_t>(HAL_EVENT_FLAG_TIMING)) != 0) {
      return owner.report().fail(HAL_ERROR_INVALID_ARGUMENT, 0, "event_create: unknown flags 0x%x",
                                 flags);
    }
    *out_event = reinterpret_cast<hal_impl_event_t*>(owner.add_event(flags));
    return HAL_SUCCESS;
  });
}

hal_result_t event_destroy(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "event_destroy", [&] {
    owner.remove_event(&self);  // enqueued waits and records keep their marker alive
    return HAL_SUCCESS;
  });
}

hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t* stream) {
  Event& self = *to_event(event);
  Stream& target = *to_stream(stream);
  return plugin::guarded(self.device().report(), "event_record", [&] {
    if (&target.device() != &self.device()) {
      return self.device().report().fail(
          HAL_ERROR_DEVICE_MISMATCH, 0,
          "event_record: the event belongs to cpu device %u, the stream to cpu device %u",
          self.device().index(), target.device().index());
    }
    auto marker = std::make_shared<Marker>();
    const hal_result_t result = target.enqueue(RecordCommand{marker});
    if (result == HAL_SUCCESS) self.set_marker(std::move(marker));
    return result;
  });
}

hal_result_t event_query(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  return plugin::guarded(self.device().report(), "event_query", [&] {
    const std::shared_ptr<Marker> marker = self.marker();
    if (!marker) return HAL_SUCCESS;
    if (!marker->done.load(std::memory_order_acquire)) return HAL_NOT_READY;
    if (marker->failed) {
      return self.device().report().fail(HAL_ERROR_DEVICE_LOST, 0,
                                         "event_query: the recording stream had failed");
    }
    return HAL_SUCCESS;
  });
}

hal_result_t event_synchronize(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  return plugin::guarded(self.device().report(), "event_synchronize", [&] {
    const std::shared_ptr<Marker> marker = self.marker();
    if (!marker) return HAL_SUCCESS;
    wait_marker(*marker, self.device().plugin().completion_signal());
    if (marker->failed) {
      return self.device().report().fail(HAL_ERROR_DEVICE_LOST, 0,
                                         "event_synchronize: the recording stream had failed");
    }
    return HAL_SUCCESS;
  });
}

hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms) {
  Event& first = *to_event(start);
  Event& last = *to_event(end);
  const plugin::ErrorReporter& report = first.device().report();
  return plugin::guarded(report, "event_elapsed_ms", [&] {
    if (!first.timing() || !last.timing()) {
      return report.fail(HAL_ERROR_INVALID_STATE, 0,
                         "event_elapsed_ms: the %s event was created without "
                         "HAL_EVENT_FLAG_TIMING",
                         !first.timing() ? "start" : "end");
    }
    const std::shared_ptr<Marker> a = first.marker();
    const std::shared_ptr<Marker> b = last.marker();
    if (!a || !b) {
      return report.fail(HAL_ERROR_INVALID_STATE, 0,
                         "event_elapsed_ms: the %s event was never recorded", !a ? "start" : "end");
    }
    const bool a_done = a->done.load(std::memory_order_acquire);
    const bool b_done = b->done.load(std::memory_order_acquire);
    if (!a_done || !b_done) {
      return report.fail(HAL_ERROR_INVALID_STATE, 0,
                         "event_elapsed_ms: the %s event has not completed yet",
                         !a_done ? "start" : "end");
    }
    *out_ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
    return HAL_SUCCESS;
  });
}

}  // namespace hal::cpu
