// Events of the hip plugin: a hipEvent_t (with timing only when asked for,
// since timing costs).
#ifndef HAL_PLUGINS_HIP_EVENT_HPP_
#define HAL_PLUGINS_HIP_EVENT_HPP_

#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "runtime.hpp"

namespace hal::hip {

class Device;
class Stream;

// hipEventCreateWithFlags, with hipEventDisableTiming unless asked for.
class Event : public plugin::DeviceResource<Device> {
 public:
  Event(Device& device, hipEvent_t event, bool timing)
      : DeviceResource(device), event_(event), timing_(timing) {}
  ~Event();

  hipEvent_t get() const { return event_; }
  bool timing() const { return timing_; }
  HAL_PLUGIN_EVENT_METHODS;

 private:
  hipEvent_t event_;
  bool timing_;
};

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_EVENT_HPP_
