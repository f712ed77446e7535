// Events of the opencl plugin: an event is the marker its last record
// enqueued on a stream's queue.
#ifndef HAL_PLUGINS_OPENCL_EVENT_HPP_
#define HAL_PLUGINS_OPENCL_EVENT_HPP_

#include <mutex>

#include "opencl.hpp"

namespace hal::opencl {

class Device;
class Stream;

class Event {
 public:
  Event(Device& device, hal_event_flags_t flags) : device_(device), flags_(flags) {}
  // event_create: the marker comes with the first record.
  static hal_result_t create(Device& device, hal_event_flags_t flags, Event*& out_event);

  Device& device() const { return device_; }
  bool timing() const { return (flags_ & HAL_EVENT_FLAG_TIMING) != 0; }
  // The marker of the last record (retained for the caller), or null.
  cl_event marker() const;
  void set_marker(ClEvent marker);

  hal_result_t record(Stream& stream);
  hal_result_t query();
  hal_result_t synchronize();
  static hal_result_t elapsed_ms(Event& start, Event& end, float& out_ms);

 private:
  // HAL_SUCCESS when |marker| completed, HAL_NOT_READY while it has not.
  hal_result_t marker_state(cl_event marker) const;

  Device& device_;
  hal_event_flags_t flags_;
  mutable std::mutex mutex_;
  ClEvent marker_;
};

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_EVENT_HPP_
