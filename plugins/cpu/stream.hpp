// Streams of the cpu plugin (api/hal/stream.h): asynchronous, in-order
// queues of commands.
//
// Each stream has a ring of commands and an executor thread. Exactly one
// thread at a time runs the stream's commands (the "runner"), which keeps
// them in order: normally the executor, but stream_synchronize runs pending
// commands itself when the runner's seat is free, so launch + synchronize
// costs no thread wake-up. The executor spins briefly when idle (a futex
// wake costs ~10 us on the VMs we target), then sleeps.
#ifndef HAL_PLUGINS_CPU_STREAM_HPP_
#define HAL_PLUGINS_CPU_STREAM_HPP_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "command.hpp"
#include "launch.hpp"

namespace hal::cpu {

class Device;

class Stream {
 public:
  explicit Stream(Device& device);
  ~Stream();  // finishes pending work, stops the executor
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device& device() const { return device_; }

  // Queues |command|. HAL_ERROR_DEVICE_LOST (reported) when earlier work failed.
  hal_result_t enqueue(Command&& command);
  // Runs or waits for everything enqueued before the call.
  hal_result_t synchronize();
  // HAL_SUCCESS, HAL_NOT_READY or HAL_ERROR_DEVICE_LOST; never blocks.
  hal_result_t query();
  // Finishes pending work and joins the executor. Idempotent.
  void shutdown();

 private:
  void executor_main();
  // Runs or waits for everything enqueued so far, without reporting.
  void drain();
  // Pops one command and runs it with the lock released. Requires a
  // non-empty ring and a free runner seat.
  void run_one(std::unique_lock<std::mutex>& lock);
  void execute(Command& command);
  hal_result_t report_failure(const char* function) const;

  Device& device_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // the executor sleeps here
  std::condition_variable idle_cv_;  // synchronizing threads sleep here
  CommandRing ring_;
  uint64_t enqueued_ = 0;                   // commands ever enqueued (guarded by mutex_)
  uint64_t completed_ = 0;                  // commands ever finished (guarded by mutex_)
  std::atomic<uint64_t> enqueued_seen_{0};  // copies for lock-free readers
  std::atomic<uint64_t> completed_seen_{0};
  bool runner_busy_ = false;  // a thread is executing a command
  bool executor_sleeping_ = false;
  uint32_t sync_sleepers_ = 0;
  bool stopping_ = false;
  std::atomic<bool> failed_{false};
  std::string failure_;    // written once, before failed_ is set
  WorkerScratch scratch_;  // worker 0's group-shared memory for this stream's launches
  std::thread executor_;
};

inline Stream* to_stream(hal_impl_stream_t* stream) {
  return reinterpret_cast<Stream*>(stream);
}

hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t flags,
                           hal_impl_stream_t** out_stream);
hal_result_t stream_destroy(hal_impl_stream_t* stream);
hal_result_t stream_synchronize(hal_impl_stream_t* stream);
hal_result_t stream_query(hal_impl_stream_t* stream);
hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event);
hal_result_t stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_STREAM_HPP_
