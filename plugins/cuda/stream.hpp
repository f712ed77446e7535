// Streams and events of the cuda plugin: a stream is a non-blocking CUstream
// of the device's primary context, an event a CUevent (with timing only when
// asked for, since timing costs).
#ifndef HAL_PLUGINS_CUDA_STREAM_HPP_
#define HAL_PLUGINS_CUDA_STREAM_HPP_

#include <memory>
#include <mutex>
#include <string>

#include "driver.hpp"

namespace hal::cuda {

class Device;

// A failure of work the driver does not see fail: a collective the plugin
// aborted (collective/comm.cpp). Sticky, as SPEC §4.4 asks: the stream's
// synchronize and query report it from then on.
class StreamFault {
 public:
  void set(int64_t native_code, std::string detail) {
    std::lock_guard lock(mutex_);
    if (failed_) return;  // the first failure is the one to explain
    failed_ = true;
    native_code_ = native_code;
    detail_ = std::move(detail);
  }
  bool get(int64_t& native_code, std::string& detail) const {
    std::lock_guard lock(mutex_);
    native_code = native_code_;
    detail = detail_;
    return failed_;
  }

 private:
  mutable std::mutex mutex_;
  bool failed_ = false;      // guarded by mutex_
  int64_t native_code_ = 0;  // guarded by mutex_
  std::string detail_;       // guarded by mutex_
};

class Stream {
 public:
  Stream(Device& device, CUstream stream) : device_(device), stream_(stream) {}
  ~Stream();  // synchronises, then destroys the CUstream
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Device& device() const { return device_; }
  CUstream get() const { return stream_; }
  // Shared with the collectives in flight on the stream.
  const std::shared_ptr<StreamFault>& fault() const { return fault_; }
  // HAL_ERROR_DEVICE_LOST with the fault's detail when a collective failed
  // on the stream, else HAL_SUCCESS.
  hal_result_t report_fault(const char* what) const;

 private:
  Device& device_;
  CUstream stream_;
  std::shared_ptr<StreamFault> fault_ = std::make_shared<StreamFault>();
};

class Event {
 public:
  Event(Device& device, CUevent event, bool timing)
      : device_(device), event_(event), timing_(timing) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Device& device() const { return device_; }
  CUevent get() const { return event_; }
  bool timing() const { return timing_; }

 private:
  Device& device_;
  CUevent event_;
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

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_STREAM_HPP_
