// Streams and events of the hip plugin: a stream is a non-blocking hipStream_t
// of its device, an event a hipEvent_t (with timing only when
// asked for, since timing costs).
#ifndef HAL_PLUGINS_HIP_STREAM_HPP_
#define HAL_PLUGINS_HIP_STREAM_HPP_

#include "runtime.hpp"

namespace hal::hip {

class Device;

class Stream {
 public:
  Stream(Device& device, hipStream_t stream) : device_(device), stream_(stream) {}
  ~Stream();  // synchronises, then destroys the hipStream_t
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Device& device() const { return device_; }
  hipStream_t get() const { return stream_; }

 private:
  Device& device_;
  hipStream_t stream_;
};

class Event {
 public:
  Event(Device& device, hipEvent_t event, bool timing)
      : device_(device), event_(event), timing_(timing) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Device& device() const { return device_; }
  hipEvent_t get() const { return event_; }
  bool timing() const { return timing_; }

 private:
  Device& device_;
  hipEvent_t event_;
  bool timing_;
};

inline Stream* to_stream(hal_impl_stream_t* stream) {
  return reinterpret_cast<Stream*>(stream);
}
inline Event* to_event(hal_impl_event_t* event) {
  return reinterpret_cast<Event*>(event);
}

hal_result_t memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src, size_t size);
hal_result_t memset_async(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size);
hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t flags,
                           hal_impl_stream_t** out_stream);
hal_result_t stream_destroy(hal_impl_stream_t* stream);
hal_result_t stream_synchronize(hal_impl_stream_t* stream);
hal_result_t stream_query(hal_impl_stream_t* stream);
hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event);
hal_result_t stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data);

hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                          hal_impl_event_t** out_event);
hal_result_t event_destroy(hal_impl_event_t* event);
hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t* stream);
hal_result_t event_query(hal_impl_event_t* event);
hal_result_t event_synchronize(hal_impl_event_t* event);
hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms);

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_STREAM_HPP_
