// Events of the opencl plugin: a record enqueues a marker on the stream's
// queue; waits, queries and timing read that marker.
#include "event.hpp"

#include <memory>

#include "device.hpp"
#include "stream.hpp"

namespace hal::opencl {

cl_event Event::marker() const {
  std::lock_guard lock(mutex_);
  if (marker_) clRetainEvent(marker_.get());
  return marker_.get();
}

void Event::set_marker(ClEvent marker) {
  std::lock_guard lock(mutex_);
  marker_ = std::move(marker);
}

hal_result_t Event::marker_state(cl_event marker) const {
  cl_int execution = CL_COMPLETE;
  const cl_int status = clGetEventInfo(marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution),
                                       &execution, nullptr);
  if (status != CL_SUCCESS || execution < 0) {
    return device().report().fail(HAL_ERROR_DEVICE_LOST, status != CL_SUCCESS ? status : execution,
                                  "event_query: the recorded work failed: %s",
                                  cl_error_text(status != CL_SUCCESS ? status : execution).c_str());
  }
  return execution == CL_COMPLETE ? HAL_SUCCESS : HAL_NOT_READY;
}

hal_result_t Event::create(Device& device, hal_event_flags_t flags, Event*& out_event) {
  // Barriers already enqueued on an event hold their own reference to its
  // marker, so destroying it (Device::remove_event) leaves them intact.
  out_event = device.add_event(std::make_unique<Event>(device, flags));
  return HAL_SUCCESS;
}

hal_result_t Event::record(Stream& stream) {
  cl_event raw = nullptr;
  const cl_int status = clEnqueueMarkerWithWaitList(stream.queue(), 0, nullptr, &raw);
  if (status != CL_SUCCESS) {
    return device().report().fail(HAL_ERROR_DEVICE_LOST, status,
                                  "event_record: clEnqueueMarkerWithWaitList: %s",
                                  cl_error_text(status).c_str());
  }
  set_marker(ClEvent(raw));
  clRetainEvent(raw);  // the stream's last command too
  stream.track(raw);
  clFlush(stream.queue());  // so the marker completes without a blocking call
  return HAL_SUCCESS;
}

hal_result_t Event::query() {
  const ClEvent recorded(marker());
  return recorded ? marker_state(recorded.get()) : HAL_SUCCESS;
}

hal_result_t Event::synchronize() {
  const ClEvent recorded(marker());
  if (!recorded) return HAL_SUCCESS;
  cl_event wait_list[] = {recorded.get()};
  const cl_int status = clWaitForEvents(1, wait_list);
  if (status != CL_SUCCESS) {
    return device().report().fail(HAL_ERROR_DEVICE_LOST, status,
                                  "event_synchronize: clWaitForEvents: %s",
                                  cl_error_text(status).c_str());
  }
  return marker_state(recorded.get());
}

hal_result_t Event::elapsed_ms(Event& start, Event& end, float& out_ms) {
  const plugin::ErrorReporter& report = start.device().report();
  if (!start.timing() || !end.timing()) {
    return report.fail(HAL_ERROR_INVALID_STATE, 0,
                       "event_elapsed_ms: both events need HAL_EVENT_FLAG_TIMING");
  }
  const ClEvent a(start.marker()), b(end.marker());
  if (!a || !b) {
    return report.fail(HAL_ERROR_INVALID_STATE, 0, "event_elapsed_ms: an event was never recorded");
  }
  if (start.marker_state(a.get()) != HAL_SUCCESS || end.marker_state(b.get()) != HAL_SUCCESS) {
    return report.fail(HAL_ERROR_INVALID_STATE, 0, "event_elapsed_ms: an event is not complete");
  }
  cl_ulong begin_ns = 0, end_ns = 0;
  cl_int status = clGetEventProfilingInfo(a.get(), CL_PROFILING_COMMAND_END, sizeof(begin_ns),
                                          &begin_ns, nullptr);
  if (status == CL_SUCCESS) {
    status = clGetEventProfilingInfo(b.get(), CL_PROFILING_COMMAND_END, sizeof(end_ns), &end_ns,
                                     nullptr);
  }
  if (status != CL_SUCCESS) {
    return report.fail(HAL_ERROR_INVALID_STATE, status,
                       "event_elapsed_ms: clGetEventProfilingInfo: %s",
                       cl_error_text(status).c_str());
  }
  out_ms = static_cast<float>((static_cast<double>(end_ns) - static_cast<double>(begin_ns)) / 1e6);
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
