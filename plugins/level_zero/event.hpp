// Events of the level_zero plugin. A HAL event is one Level Zero event (with
// kernel timestamps when timing) of an EventSet, which the streams use for
// their markers and host functions too. The events come from a few pools per
// device, reused (EventPools): not a pool per event.
#ifndef HAL_PLUGINS_LEVEL_ZERO_EVENT_HPP_
#define HAL_PLUGINS_LEVEL_ZERO_EVENT_HPP_

#include <memory>
#include <mutex>
#include <vector>

#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "loader.hpp"

namespace hal::level_zero {

class Device;
class Stream;

// A device's host-visible events, kept in pools of kPoolSize and reused: an
// event given back is reset (zeEventHostReset) and handed out again, so a
// HAL event, a stream's markers or a host function costs no
// zeEventPoolCreate once the pools hold enough events. Two kinds: with
// kernel timestamps (timing events) and without. Thread-safe.
class EventPools {
 public:
  static constexpr uint32_t kPoolSize = 64;
  explicit EventPools(const Device& device) : device_(device) {}
  ~EventPools();  // destroys every event and pool: nothing may use them any more
  EventPools(const EventPools&) = delete;
  EventPools& operator=(const EventPools&) = delete;
  // |count| unsignaled events of one kind to |out|; on failure the code of
  // the failing call (nothing is taken).
  ze_result_t take(bool timestamps, uint32_t count, std::vector<ze_event_handle_t>& out);
  // Gives events back once nothing may signal or wait on them any more:
  // each is reset and kept for the next take (one whose reset fails is left
  // out, destroyed with the pools).
  void give_back(bool timestamps, const std::vector<ze_event_handle_t>& events);

 private:
  struct Kind {
    std::vector<ze_event_pool_handle_t> pools;
    std::vector<ze_event_handle_t> all;   // every event made, for the destructor
    std::vector<ze_event_handle_t> idle;  // reset, ready to hand out
  };
  ze_result_t grow(Kind& kind, bool timestamps);  // one more pool; the mutex held
  const Device& device_;
  std::mutex mutex_;
  Kind kinds_[2];  // [0] without timestamps, [1] with
};

// |count| events of the device's EventPools, given back together. Owned by
// shared_ptr wherever a command list may still use it.
class EventSet {
 public:
  // Null with the failing call's code in |out_result|.
  static std::shared_ptr<EventSet> create(const Device& device, uint32_t count, bool timestamps,
                                          ze_result_t& out_result);
  ~EventSet();
  EventSet(const EventSet&) = delete;
  EventSet& operator=(const EventSet&) = delete;
  ze_event_handle_t get(uint32_t index) const { return events_[index]; }

 private:
  EventSet(EventPools& pools, bool timestamps) : pools_(pools), timestamps_(timestamps) {}
  EventPools& pools_;
  bool timestamps_;
  std::vector<ze_event_handle_t> events_;
};

// A HAL event. Each record signals a fresh L0 event (a spare one whose
// earlier uses are over, or a new pool): waits enqueued before a re-record
// keep the point they captured, and no event is reset while a command may
// still signal or wait on it (Level Zero forbids that).
// The L0 event comes with the first record.
class Event : public plugin::DeviceResource<Device> {
 public:
  Event(Device& device, bool timing) : DeviceResource(device), timing_(timing) {}
  bool timing() const { return timing_; }
  // The L0 event of the latest record; null when never recorded (an event
  // never recorded is complete).
  std::shared_ptr<EventSet> current() const;
  // Makes a reset event the current one and returns it, for the caller to
  // append its signal.
  std::shared_ptr<EventSet> next(ze_result_t& out_result);

  HAL_PLUGIN_EVENT_METHODS;

 private:
  static constexpr size_t kSpares = 4;
  bool timing_;
  mutable std::mutex mutex_;  // guards current_ and spares_
  std::shared_ptr<EventSet> current_;
  std::vector<std::shared_ptr<EventSet>> spares_;
};

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_EVENT_HPP_
