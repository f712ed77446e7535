// Events of the opencl plugin: an event is the marker its last record
// enqueued on a stream's queue.
#ifndef HAL_PLUGINS_OPENCL_EVENT_HPP_
#define HAL_PLUGINS_OPENCL_EVENT_HPP_

#include <mutex>

#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "opencl.hpp"

namespace hal::opencl {

class Device;
class Stream;

// The marker comes with the first record.
class Event : public plugin::DeviceResource<Device> {
 public:
  Event(Device& device, hal_event_flags_t flags) : DeviceResource(device), flags_(flags) {}
  bool timing() const { return (flags_ & HAL_EVENT_FLAG_TIMING) != 0; }
  // The marker of the last record (retained for the caller), or null.
  cl_event marker() const;
  void set_marker(ClEvent marker);

  HAL_PLUGIN_EVENT_METHODS;

 private:
  // HAL_SUCCESS when |marker| completed, HAL_NOT_READY while it has not.
  hal_result_t marker_state(cl_event marker) const;

  hal_event_flags_t flags_;
  mutable std::mutex mutex_;
  ClEvent marker_;
};

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_EVENT_HPP_
