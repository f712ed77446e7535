// The null plugin's streams. TODO(null): a real stream is the device's queue:
// its enqueue methods hand work to it and return. Here each operation runs
// as it is enqueued, so a stream is always idle and in order by construction.
#ifndef HAL_PLUGINS_NULL_STREAM_HPP_
#define HAL_PLUGINS_NULL_STREAM_HPP_

#include <cstddef>
#include <cstdint>

#include "device.hpp"

namespace hal::null_plugin {

class Stream {
 public:
  explicit Stream(Device& device) : device_(device) {}
  // stream_create
  static hal_result_t create(Device& device, hal_stream_flags_t flags, Stream*& out_stream);

  Device& device() const { return device_; }

  // memory.cpp: memcpy_async, memset_async
  hal_result_t copy(void* dst, const void* src, size_t size);
  hal_result_t fill(void* dst, uint8_t value, size_t size);
  // stream.cpp
  hal_result_t synchronize();
  hal_result_t query();
  hal_result_t wait(Event& event);

 private:
  Device& device_;
};

}  // namespace hal::null_plugin

#endif  // HAL_PLUGINS_NULL_STREAM_HPP_
