// Events of the cpu plugin (api/hal/event.h).
//
// Recording an event creates a Marker, a small reference-counted completion
// point that the record command completes when the stream reaches it.
// The event keeps only its newest marker, so re-recording replaces it while
// waits already enqueued hold the old one; destroying an event with waits
// still enqueued is safe for the same reason.
#ifndef HAL_PLUGINS_CPU_EVENT_HPP_
#define HAL_PLUGINS_CPU_EVENT_HPP_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "hal_plugin.h"
#include "hal_plugin_sdk/entries.hpp"

namespace hal::cpu {

class Device;
class Stream;

// One plugin-wide place to sleep until some marker completes. Markers are
// many and short-lived; a condition variable each would be waste, and
// completions without sleepers cost one atomic load.
class CompletionSignal {
 public:
  void notify_all();
  // Blocks until |done()|; done() must become true only before a notify_all().
  template <class Predicate>
  void wait(Predicate done) {
    std::unique_lock lock(mutex_);
    sleepers_.fetch_add(1);  // seq_cst, pairs with notify_all's load
    cv_.wait(lock, done);
    sleepers_.fetch_sub(1);
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<uint32_t> sleepers_{0};
};

// Called once when a marker completes; streams parked on the marker use it
// to get back to an executor (stream.hpp).
struct MarkerWaiter {
  void (*wake)(void* context);
  void* context;
};

struct Marker {
  std::atomic<bool> done{false};
  // HAL_SUCCESS, or the code the recording stream had failed with (its loss
  // code, SPEC 4.4: the bounds check's HAL_ERROR_OUT_OF_BOUNDS...); written before done
  hal_result_t failure = HAL_SUCCESS;
  std::chrono::steady_clock::time_point time{};  // when the record executed; written before done
  std::mutex waiters_mutex;
  std::vector<MarkerWaiter> waiters;  // guarded by waiters_mutex
};

// Marks |marker| complete now and wakes whoever waits for it.
void complete_marker(Marker& marker, hal_result_t failure, CompletionSignal& signal);
// Registers |waiter| to be called when |marker| completes. False, with
// nothing registered, when it already has.
bool add_marker_waiter(Marker& marker, MarkerWaiter waiter);
// Spins briefly, then sleeps until |marker| completes.
void wait_marker(const Marker& marker, CompletionSignal& signal);

class Event {
 public:
  Event(Device& device, hal_event_flags_t flags) : device_(device), flags_(flags) {}

  Device& device() const { return device_; }
  bool timing() const { return (flags_ & HAL_EVENT_FLAG_TIMING) != 0; }
  // The newest marker; nullptr when never recorded.
  std::shared_ptr<Marker> marker() const;
  void set_marker(std::shared_ptr<Marker> marker);

  // create: HAL_EVENT_FLAG_TIMING is the only flag. A record is a marker
  // the stream completes when it reaches it.
  HAL_PLUGIN_EVENT_METHODS;

 private:
  Device& device_;
  const hal_event_flags_t flags_;
  mutable std::mutex mutex_;
  std::shared_ptr<Marker> marker_;
};

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_EVENT_HPP_
