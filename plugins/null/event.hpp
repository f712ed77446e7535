// The null plugin's events. An event captures a point of a stream; here that
// point is reached when the record runs, so recording stamps the time at once.
#ifndef HAL_PLUGINS_NULL_EVENT_HPP_
#define HAL_PLUGINS_NULL_EVENT_HPP_

#include <atomic>
#include <cstdint>

#include "device.hpp"

namespace hal::null_plugin {

class Event : public plugin::DeviceResource<Device> {
 public:
  Event(Device& device, hal_event_flags_t flags) : DeviceResource(device), flags_(flags) {}
  hal_event_flags_t flags() const { return flags_; }
  HAL_PLUGIN_EVENT_METHODS;

 private:
  hal_event_flags_t flags_;
  std::atomic<int64_t> recorded_ns_{-1};  // steady clock; -1: never recorded
};

}  // namespace hal::null_plugin

#endif  // HAL_PLUGINS_NULL_EVENT_HPP_
