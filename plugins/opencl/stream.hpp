// Streams of the opencl plugin: a stream is an in-order command queue (with
// profiling, for event timing).
#ifndef HAL_PLUGINS_OPENCL_STREAM_HPP_
#define HAL_PLUGINS_OPENCL_STREAM_HPP_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "opencl.hpp"

namespace hal::opencl {

class Device;
class Event;

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

// An in-order queue, with profiling for event timing.
class Stream : public plugin::DeviceResource<Device> {
 public:
  Stream(Device& device, ClQueue queue) : DeviceResource(device), queue_(std::move(queue)) {}
  ~Stream();  // finishes the queue's work first

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
  // report().fail() for an enqueue the queue refused, or earlier work that
  // failed: HAL_ERROR_OUT_OF_MEMORY or HAL_ERROR_DEVICE_LOST, with the code.
  hal_result_t fail(const char* what, cl_int status) const;

  // copy and fill in memory.cpp, the others in stream.cpp.
  HAL_PLUGIN_STREAM_METHODS;

 private:
  ClQueue queue_;
  mutable std::mutex mutex_;
  ClEvent last_;
  HostThread host_thread_;  // last: destroyed (joined) first
};

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_STREAM_HPP_
