// Streams of the level_zero plugin. A stream is an immediate command list on
// the device's compute queue group, kept in order with a barrier after every
// command (Level Zero 1.4 has no in-order flag). Its completion is observed
// through marker events (an EventSet, event.hpp): one is appended after the
// newest work whenever the stream is synchronised or queried. Level Zero has
// no host functions: a plugin thread per stream runs them (see
// Stream::enqueue_host_fn).
#ifndef HAL_PLUGINS_LEVEL_ZERO_STREAM_HPP_
#define HAL_PLUGINS_LEVEL_ZERO_STREAM_HPP_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "event.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "loader.hpp"

namespace hal::level_zero {

class Device;
class Event;

class Stream : public plugin::DeviceResource<Device> {
 public:
  // Null with the failing call's code in |out_result|.
  static std::unique_ptr<Stream> make(Device& device, ze_result_t& out_result);
  ~Stream();  // synchronises, stops the host function thread, destroys the list

  // Appends what |append(list)| appends, then a barrier, under the stream's
  // lock (a command list is not thread-safe). |keep| lives until the stream
  // is next seen complete. Returns the first failing code.
  template <class Append>
  ze_result_t append(Append&& append, std::shared_ptr<const void> keep = nullptr);

  // copy and fill in memory.cpp, the others in stream.cpp. wait: on the
  // device, for the point the event's latest record captured.
  // enqueue_host_fn: fn(user_data) on the stream's host thread once the work
  // enqueued before it completes; work enqueued after it waits for it to
  // return. synchronize: finish("stream_synchronize"). query: HAL_SUCCESS
  // when everything enqueued so far is done, else HAL_NOT_READY.
  HAL_PLUGIN_STREAM_METHODS;
  // Blocks until everything enqueued so far (host functions included) is
  // done; a failure names |what|.
  hal_result_t finish(const char* what);

 private:
  struct HostCall {
    hal_host_fn_t fn;
    void* user_data;
    std::shared_ptr<EventSet> events;  // 0: the work before is done; 1: fn returned
  };
  static constexpr uint32_t kMarkers = 16;
  static constexpr size_t kKeepLimit = 1024;  // then the stream is synchronised

  Stream(Device& device, ze_command_list_handle_t list, std::shared_ptr<EventSet> markers)
      : DeviceResource(device), list_(list), markers_(std::move(markers)) {}
  // The marker after the newest work (appending one when work came since
  // the last); -1 when the stream is known idle. With all markers in
  // flight it waits for the oldest, or (!may_block) answers
  // ZE_RESULT_NOT_READY while the oldest is pending. Under mutex_.
  ze_result_t marker_locked(bool may_block, int& out_marker);
  // Every pending marker up to |marker| has signalled. Under mutex_.
  void retire_locked(int marker);
  void run_host_calls();
  ze_result_t after_append_locked(ze_result_t result, std::shared_ptr<const void> keep);

  ze_command_list_handle_t list_;
  std::shared_ptr<EventSet> markers_;
  std::mutex mutex_;  // guards list_'s appends and everything below
  bool dirty_ = false;
  std::deque<uint32_t> pending_;                   // appended markers, oldest first
  uint32_t created_ = 0;                           // markers used so far (at most kMarkers)
  std::vector<uint32_t> free_;                     // markers signalled and observed
  std::vector<std::shared_ptr<const void>> keep_;  // what queued commands use
  std::mutex host_mutex_;                          // guards host_calls_, stopping_, worker_
  std::condition_variable host_ready_;
  std::deque<HostCall> host_calls_;
  bool stopping_ = false;
  std::thread worker_;  // started by the first host function
};

template <class Append>
ze_result_t Stream::append(Append&& append, std::shared_ptr<const void> keep) {
  std::unique_lock lock(mutex_);
  ze_result_t result = append(list_);
  if (result == ZE_RESULT_SUCCESS) result = after_append_locked(result, std::move(keep));
  const bool full = keep_.size() > kKeepLimit;
  lock.unlock();
  if (full && result == ZE_RESULT_SUCCESS) finish("stream: reclaiming events");
  return result;
}

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_STREAM_HPP_
