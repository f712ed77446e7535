// Streams of the hip plugin: a stream is a non-blocking hipStream_t of its
// device.
#ifndef HAL_PLUGINS_HIP_STREAM_HPP_
#define HAL_PLUGINS_HIP_STREAM_HPP_

#include <cstddef>
#include <cstdint>

#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "runtime.hpp"

namespace hal::hip {

class Device;
class Event;

// hipStreamCreateWithFlags(hipStreamNonBlocking).
class Stream : public plugin::DeviceResource<Device> {
 public:
  Stream(Device& device, hipStream_t stream) : DeviceResource(device), stream_(stream) {}
  ~Stream();  // synchronises, then destroys the hipStream_t

  hipStream_t get() const { return stream_; }
  // copy and fill in memory.cpp, the others in stream.cpp.
  HAL_PLUGIN_STREAM_METHODS;

 private:
  hipStream_t stream_;
};

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_STREAM_HPP_
