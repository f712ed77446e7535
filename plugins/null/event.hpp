// The null plugin's events. An event captures a point of a stream; here that
// point is reached when the record runs, so recording stamps the time at once.
#ifndef HAL_PLUGINS_NULL_EVENT_HPP_
#define HAL_PLUGINS_NULL_EVENT_HPP_

#include <atomic>
#include <cstdint>

#include "device.hpp"

namespace hal::null_plugin {

class Event {
 public:
  Event(Device& device, hal_event_flags_t flags) : device_(device), flags_(flags) {}
  // event_create
  static hal_result_t create(Device& device, hal_event_flags_t flags, Event*& out_event);

  Device& device() const { return device_; }
  hal_event_flags_t flags() const { return flags_; }

  hal_result_t record(Stream& stream);
  hal_result_t query();
  hal_result_t synchronize();
  // The loader has checked that both are timing events of one device.
  static hal_result_t elapsed_ms(Event& start, Event& end, float& out_ms);

 private:
  Device& device_;
  hal_event_flags_t flags_;
  std::atomic<int64_t> recorded_ns_{-1};  // steady clock; -1: never recorded
};

}  // namespace hal::null_plugin

#endif  // HAL_PLUGINS_NULL_EVENT_HPP_
