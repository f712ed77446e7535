// Events of the hip plugin: a hipEvent_t (with timing only when asked for,
// since timing costs).
#ifndef HAL_PLUGINS_HIP_EVENT_HPP_
#define HAL_PLUGINS_HIP_EVENT_HPP_

#include "runtime.hpp"

namespace hal::hip {

class Device;
class Stream;

class Event {
 public:
  Event(Device& device, hipEvent_t event, bool timing)
      : device_(device), event_(event), timing_(timing) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // event_create: hipEventCreateWithFlags.
  static hal_result_t create(Device& device, hal_event_flags_t flags, Event*& out_event);

  Device& device() const { return device_; }
  hipEvent_t get() const { return event_; }
  bool timing() const { return timing_; }

  hal_result_t record(Stream& stream);
  hal_result_t query();
  hal_result_t synchronize();
  static hal_result_t elapsed_ms(Event& start, Event& end, float& out_ms);

 private:
  Device& device_;
  hipEvent_t event_;
  bool timing_;
};

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_EVENT_HPP_
