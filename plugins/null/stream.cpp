// Streams. Each operation runs when it is enqueued (memory.cpp), so a stream
// is always idle.
// TODO(null): a real device keeps a queue per stream; synchronize then waits
// on it, and query answers HAL_NOT_READY while work is pending.
#include "stream.hpp"

#include <memory>

namespace hal::null_plugin {

hal_result_t Stream::create(Device& device, hal_stream_flags_t, Stream*& out_stream) {
  out_stream = device.add_stream(std::make_unique<Stream>(device));
  return HAL_SUCCESS;
}

hal_result_t Stream::synchronize() {
  return HAL_SUCCESS;
}

hal_result_t Stream::query() {
  return HAL_SUCCESS;
}

hal_result_t Stream::wait(Event&) {
  // The event's captured work has completed already: nothing to wait for.
  return HAL_SUCCESS;
}

}  // namespace hal::null_plugin
