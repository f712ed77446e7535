// Streams and events of the opencl plugin. A stream is an in-order command
// queue (with profiling, for event timing); an event is the marker its last
// record enqueued.
#ifndef HAL_PLUGINS_OPENCL_STREAM_HPP_
#define HAL_PLUGINS_OPENCL_STREAM_HPP_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "opencl.hpp"

namespace hal::opencl {

class Device;

// Runs a stream's host functions, in order, on a thread of its own (started
// on first use). Never on the thread that enqueues (PoCL runs an event
// callback inside clSetEventCallback when the event already completed, and a
// host function that blocks would then block the enqueuing call) nor on
// PoCL's own threads (a blocking one would stall other queues' callbacks).
class HostThread {
 public:
  HostThread() = default;
  HostThread(const HostThread&) = delete;
  HostThread& operator=(const HostThread&) = delete;
  ~HostThread();  // runs what was posted, then joins
  void post(std::function<void()> work);

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> work_;
  bool stopping_ = false;
  std::thread thread_;
};

class Stream {
 public:
  Stream(Device& device, ClQueue queue) : device_(device), queue_(std::move(queue)) {}
  Device& device() const { return device_; }
  cl_command_queue queue() const { return queue_.get(); }
  // Remembers the event of the command just enqueued: the queue is in
  // order, so its completion means everything enqueued so far completed
  // (what stream_query reports). Takes ownership of |event|.
  void track(cl_event event) {
    std::lock_guard lock(mutex_);
    last_.reset(event);
  }
  // The last command's event, retained for the caller, or null.
  cl_event last() const {
    std::lock_guard lock(mutex_);
    if (last_) clRetainEvent(last_.get());
    return last_.get();
  }
  HostThread& host_thread() { return host_thread_; }

 private:
  Device& device_;
  ClQueue queue_;
  mutable std::mutex mutex_;
  ClEvent last_;
  HostThread host_thread_;  // last: destroyed (joined) first
};

class Event {
 public:
  Event(Device& device, hal_event_flags_t flags) : device_(device), flags_(flags) {}
  Device& device() const { return device_; }
  bool timing() const { return (flags_ & HAL_EVENT_FLAG_TIMING) != 0; }
  // The marker of the last record (retained for the caller), or null.
  cl_event marker() const;
  void set_marker(ClEvent marker);

 private:
  Device& device_;
  hal_event_flags_t flags_;
  mutable std::mutex mutex_;
  ClEvent marker_;
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

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_STREAM_HPP_
