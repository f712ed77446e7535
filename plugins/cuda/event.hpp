// Events of the cuda plugin: a CUevent (with timing only when asked for,
// since timing costs).
#ifndef HAL_PLUGINS_CUDA_EVENT_HPP_
#define HAL_PLUGINS_CUDA_EVENT_HPP_

#include "driver.hpp"

namespace hal::cuda {

class Device;
class Stream;

class Event {
 public:
  Event(Device& device, CUevent event, bool timing)
      : device_(device), event_(event), timing_(timing) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // event_create: cuEventCreate.
  static hal_result_t create(Device& device, hal_event_flags_t flags, Event*& out_event);

  Device& device() const { return device_; }
  CUevent get() const { return event_; }
  bool timing() const { return timing_; }

  hal_result_t record(Stream& stream);
  hal_result_t query();
  hal_result_t synchronize();
  static hal_result_t elapsed_ms(Event& start, Event& end, float& out_ms);

 private:
  Device& device_;
  CUevent event_;
  bool timing_;
};

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_EVENT_HPP_
