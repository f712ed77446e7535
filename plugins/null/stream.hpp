// The null plugin's streams. TODO(null): a real stream is the device's queue:
// its enqueue methods hand work to it and return. Here each operation runs
// as it is enqueued, so a stream is always idle and in order by construction.
#ifndef HAL_PLUGINS_NULL_STREAM_HPP_
#define HAL_PLUGINS_NULL_STREAM_HPP_

#include <cstddef>
#include <cstdint>

#include "device.hpp"

namespace hal::null_plugin {

class Stream : public plugin::DeviceResource<Device> {
 public:
  explicit Stream(Device& device) : DeviceResource(device) {}
  // copy and fill in memory.cpp, the others in stream.cpp.
  // TODO(null): enqueue_host_fn, the entry entry.cpp leaves NULL for now.
  HAL_PLUGIN_STREAM_METHODS;
};

}  // namespace hal::null_plugin

#endif  // HAL_PLUGINS_NULL_STREAM_HPP_
