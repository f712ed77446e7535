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

namespace {

// HAL_SUCCESS when |marker| completed, HAL_NOT_READY while it has not.
hal_result_t marker_state(const Event& event, cl_event marker) {
  cl_int execution = CL_COMPLETE;
  const cl_int status = clGetEventInfo(marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution),
                                       &execution, nullptr);
  if (status != CL_SUCCESS || execution < 0) {
    return event.device().report().fail(
        HAL_ERROR_DEVICE_LOST, status != CL_SUCCESS ? status : execution,
        "event_query: the recorded work failed: %s",
        cl_error_text(status != CL_SUCCESS ? status : execution).c_str());
  }
  return execution == CL_COMPLETE ? HAL_SUCCESS : HAL_NOT_READY;
}

}  // namespace

hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                          hal_impl_event_t** out_event) {
  Device& owner = *to_device(device);
  return plugin::guarded(owner.report(), "event_create", [&] {
    Event* event = owner.add_event(std::make_unique<Event>(owner, flags));
    *out_event = reinterpret_cast<hal_impl_event_t*>(event);
    return HAL_SUCCESS;
  });
}

hal_result_t event_destroy(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  // Barriers already enqueued on it hold their own reference to the marker.
  self.device().remove_event(&self);
  return HAL_SUCCESS;
}

hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t* stream) {
  Event& self = *to_event(event);
  Stream& target = *to_stream(stream);
  cl_event raw = nullptr;
  const cl_int status = clEnqueueMarkerWithWaitList(target.queue(), 0, nullptr, &raw);
  if (status != CL_SUCCESS) {
    return self.device().report().fail(HAL_ERROR_DEVICE_LOST, status,
                                       "event_record: clEnqueueMarkerWithWaitList: %s",
                                       cl_error_text(status).c_str());
  }
  self.set_marker(ClEvent(raw));
  clRetainEvent(raw);  // the stream's last command too
  target.track(raw);
  clFlush(target.queue());  // so the marker completes without a blocking call
  return HAL_SUCCESS;
}

hal_result_t event_query(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  const ClEvent marker(self.marker());
  return marker ? marker_state(self, marker.get()) : HAL_SUCCESS;
}

hal_result_t event_synchronize(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  const ClEvent marker(self.marker());
  if (!marker) return HAL_SUCCESS;
  cl_event wait_list[] = {marker.get()};
  const cl_int status = clWaitForEvents(1, wait_list);
  if (status != CL_SUCCESS) {
    return self.device().report().fail(HAL_ERROR_DEVICE_LOST, status,
                                       "event_synchronize: clWaitForEvents: %s",
                                       cl_error_text(status).c_str());
  }
  return marker_state(self, marker.get());
}

hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms) {
  Event& first = *to_event(start);
  Event& second = *to_event(end);
  const plugin::ErrorReporter& report = first.device().report();
  if (!first.timing() || !second.timing()) {
    return report.fail(HAL_ERROR_INVALID_STATE, 0,
                       "event_elapsed_ms: both events need HAL_EVENT_FLAG_TIMING");
  }
  const ClEvent a(first.marker()), b(second.marker());
  if (!a || !b) {
    return report.fail(HAL_ERROR_INVALID_STATE, 0, "event_elapsed_ms: an event was never recorded");
  }
  if (marker_state(first, a.get()) != HAL_SUCCESS || marker_state(second, b.get()) != HAL_SUCCESS) {
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
  *out_ms = static_cast<float>((static_cast<double>(end_ns) - static_cast<double>(begin_ns)) / 1e6);
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
