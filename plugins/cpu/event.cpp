#include "event.hpp"

#include "device.hpp"
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

void complete_marker(Marker& marker, hal_result_t failure, CompletionSignal& signal) {
  marker.failure = failure;
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

hal_result_t Event::create(Device& device, hal_event_flags_t flags, Event*& out_event) {
  if ((flags & ~static_cast<hal_event_flags_t>(HAL_EVENT_FLAG_TIMING)) != 0) {
    return device.report().fail(HAL_ERROR_INVALID_ARGUMENT, 0, "event_create: unknown flags 0x%x",
                                flags);
  }
  // Enqueued waits and records keep their marker alive past event_destroy.
  out_event = device.add_event(flags);
  return HAL_SUCCESS;
}

hal_result_t Event::record(Stream& stream) {
  if (&stream.device() != &device_) {
    return device_.report().fail(
        HAL_ERROR_DEVICE_MISMATCH, 0,
        "event_record: the event belongs to cpu device %u, the stream to cpu device %u",
        device_.index(), stream.device().index());
  }
  auto marker = std::make_shared<Marker>();
  const hal_result_t result = stream.enqueue(RecordCommand{marker});
  if (result == HAL_SUCCESS) set_marker(std::move(marker));
  return result;
}

hal_result_t Event::query() {
  const std::shared_ptr<Marker> marker = this->marker();
  if (!marker) return HAL_SUCCESS;
  if (!marker->done.load(std::memory_order_acquire)) return HAL_NOT_READY;
  if (marker->failure != HAL_SUCCESS) {
    return device_.report().fail(marker->failure, 0,
                                 "event_query: the recording stream had failed");
  }
  return HAL_SUCCESS;
}

hal_result_t Event::synchronize() {
  const std::shared_ptr<Marker> marker = this->marker();
  if (!marker) return HAL_SUCCESS;
  wait_marker(*marker, device_.plugin().completion_signal());
  if (marker->failure != HAL_SUCCESS) {
    return device_.report().fail(marker->failure, 0,
                                 "event_synchronize: the recording stream had failed");
  }
  return HAL_SUCCESS;
}

hal_result_t Event::elapsed_ms(Event& start, Event& end, float& out_ms) {
  const plugin::ErrorReporter& report = start.device().report();
  if (!start.timing() || !end.timing()) {
    return report.fail(HAL_ERROR_INVALID_STATE, 0,
                       "event_elapsed_ms: the %s event was created without "
                       "HAL_EVENT_FLAG_TIMING",
                       !start.timing() ? "start" : "end");
  }
  const std::shared_ptr<Marker> a = start.marker();
  const std::shared_ptr<Marker> b = end.marker();
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
  out_ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
  return HAL_SUCCESS;
}

}  // namespace hal::cpu
