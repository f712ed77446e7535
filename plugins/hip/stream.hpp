// Streams of the hip plugin: a stream is a non-blocking hipStream_t of its
// device.
#ifndef HAL_PLUGINS_HIP_STREAM_HPP_
#define HAL_PLUGINS_HIP_STREAM_HPP_

#include <cstddef>
#include <cstdint>

#include "runtime.hpp"

namespace hal::hip {

class Device;
class Event;

class Stream {
 public:
  Stream(Device& device, hipStream_t stream) : device_(device), stream_(stream) {}
  ~Stream();  // synchronises, then destroys the hipStream_t
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  // stream_create: hipStreamCreateWithFlags(hipStreamNonBlocking).
  static hal_result_t create(Device& device, hal_stream_flags_t flags, Stream*& out_stream);

  Device& device() const { return device_; }
  hipStream_t get() const { return stream_; }

  // memory.cpp: memcpy_async, memset_async
  hal_result_t copy(void* dst, const void* src, size_t size);
  hal_result_t fill(void* dst, uint8_t value, size_t size);
  // stream.cpp
  hal_result_t synchronize();
  hal_result_t query();
  hal_result_t wait(Event& event);
  hal_result_t enqueue_host_fn(hal_host_fn_t fn, void* user_data);

 private:
  Device& device_;
  hipStream_t stream_;
};

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_STREAM_HPP_
