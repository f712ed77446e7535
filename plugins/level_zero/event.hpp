// Events of the level_zero plugin. A HAL event is one Level Zero event in its
// own host-visible pool (with kernel timestamps when timing); the pools are
// EventSets, which the streams use for their markers too.
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

// An event pool of |count| host-visible events and the events, destroyed
// together. Owned by shared_ptr wherever a command list may still use it.
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
  explicit EventSet(const Device& device) : device_(device) {}
  const Device& device_;
  ze_event_pool_handle_t pool_ = nullptr;
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
