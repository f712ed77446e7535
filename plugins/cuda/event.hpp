// Events of the cuda plugin: a CUevent (with timing only when asked for,
// since timing costs).
#ifndef HAL_PLUGINS_CUDA_EVENT_HPP_
#define HAL_PLUGINS_CUDA_EVENT_HPP_

#include "driver.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"

namespace hal::cuda {

class Device;
class Stream;

// cuEventCreate, with CU_EVENT_DISABLE_TIMING unless asked for.
class Event : public plugin::DeviceResource<Device> {
 public:
  Event(Device& device, CUevent event, bool timing)
      : DeviceResource(device), event_(event), timing_(timing) {}
  ~Event();

  CUevent get() const { return event_; }
  bool timing() const { return timing_; }
  HAL_PLUGIN_EVENT_METHODS;

 private:
  CUevent event_;
  bool timing_;
};

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_EVENT_HPP_
