// Streams of the cpu plugin (api/hal/stream.h): asynchronous, in-order
// queues of commands, served by a bounded set of executor threads.
//
// A stream is a queue and a little state; it owns no thread. When work
// arrives on an idle stream, the stream is handed to the plugin's
// StreamExecutors, whose threads serve ready streams one at a time: exactly
// one thread at a time runs a stream's commands (the "runner"), which keeps
// them in order. stream_synchronize runs pending commands itself when the
// runner's seat is free, so launch + synchronize costs no thread wake-up.
//
// Bounds:
// - Executor threads: at most StreamLimits::executor_threads serve streams
//   (default min(2 x hardware threads, 64), HAL_CPU_STREAM_THREADS). A
//   command that may block for long (a collective, a host function) does
//   not count against that while it runs: the set grows by up to
//   kMaxBlockingExecutors more threads, so N in-process ranks on N streams
//   meet even when N exceeds the executor count. A stream waiting for an
//   event that has not completed is parked (it leaves its executor and is
//   handed back when the event completes), so waits never hold a thread.
// - Queue depth: at most StreamLimits::queue_depth commands wait on a stream
//   (default 65536, HAL_CPU_STREAM_QUEUE_DEPTH). Enqueueing on a full stream
//   blocks until the stream has room; the enqueueing thread runs the
//   stream's commands itself while the runner's seat is free. A command
//   enqueued by a host function on its own stream is never held back.
// - Memory: the queue gives its chunks back once drained (command.hpp).
#ifndef HAL_PLUGINS_CPU_STREAM_HPP_
#define HAL_PLUGINS_CPU_STREAM_HPP_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "command.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "launch.hpp"
#include "thread_pool.hpp"

namespace hal::cpu {

class Device;
class Event;
class Stream;

// Threads that may serve streams while others run blocking commands.
inline constexpr uint32_t kMaxBlockingExecutors = 64;

struct StreamLimits {
  uint32_t executor_threads = 0;  // 0: the default for the host
  uint64_t queue_depth = 65536;
  // How long an idle executor that was woken soon after it fell asleep
  // polls for work the next time (why: stream.cpp, the long idle spin).
  // Up to kSpin (30 us), 0 included: never longer than the short spin
  // every idle thread takes.
  std::chrono::microseconds idle_spin{250};
};

// Reads HAL_CPU_STREAM_THREADS (1..1024; unset: min(2 x hardware threads,
// 64)), HAL_CPU_STREAM_QUEUE_DEPTH (1..2^30 commands; unset: 65536) and
// HAL_CPU_EXECUTOR_SPIN_US (0..10000; unset: 250). False, with |out_error|,
// on any other value.
bool parse_stream_limits(const char* threads_text, const char* depth_text, const char* spin_text,
                         StreamLimits* out, std::string& out_error);
uint32_t default_executor_threads(uint32_t hardware_threads);

// The plugin's executor threads. Threads start on demand, up to the limit,
// and then stay (asleep when idle) until the plugin shuts down.
class StreamExecutors {
 public:
  // |pool|'s threads and the caller are the cores the long idle spin
  // counts as the plugin's (stream.cpp).
  StreamExecutors(uint32_t max_threads, std::chrono::microseconds idle_spin, const ThreadPool& pool)
      : max_threads_(max_threads), idle_spin_(idle_spin), pool_(pool) {}
  ~StreamExecutors();  // every stream must be shut down before
  StreamExecutors(const StreamExecutors&) = delete;
  StreamExecutors& operator=(const StreamExecutors&) = delete;

  uint32_t max_threads() const { return max_threads_; }
  // Hands |stream|, which has work, to an executor. False when it could not
  // be queued (out of memory): synchronize still runs its work inline.
  bool submit(Stream* stream);
  // Brackets a command that may block for long on an executor thread.
  void begin_blocking();
  void end_blocking();

 private:
  void executor_main();
  bool waiting_streams() const { return ready_count_.load(std::memory_order_relaxed) != 0; }
  void grow_locked();          // starts a thread when ready streams outnumber idle threads
  bool core_to_spare() const;  // a core none of the plugin's threads works on
  friend class Stream;

  const uint32_t max_threads_;
  const std::chrono::microseconds idle_spin_;  // StreamLimits::idle_spin
  const ThreadPool& pool_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::deque<Stream*> ready_;           // streams waiting for an executor
  std::atomic<size_t> ready_count_{0};  // ready_.size() for spinning threads
  std::vector<std::thread> threads_;
  uint32_t idle_ = 0;      // threads not serving a stream (spinning or asleep)
  uint32_t sleeping_ = 0;  // of those, asleep on work_cv_
  uint32_t blocked_ = 0;   // threads inside a blocking command
  bool stopping_ = false;
  std::atomic<bool> stop_flag_{false};
  std::atomic<bool> long_spinner_{false};    // an idle thread is in the long spin
  std::atomic<uint32_t> serving_{0};         // threads serving a stream (threads - idle_)
  std::atomic<uint32_t> inline_runners_{0};  // other threads running a command now
};

class Stream {
 public:
  explicit Stream(Device& device);
  ~Stream();  // finishes pending work
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device& device() const { return device_; }

  // Queues |command|; blocks while the queue is full. HAL_ERROR_DEVICE_LOST
  // (reported) when earlier work failed.
  hal_result_t enqueue(Command&& command);
  // Queues |command| as enqueue does; when the stream is idle (nothing
  // queued, running or parked, so stream order already holds), the calling
  // thread first offers the task its finish_inline(), holding the runner's
  // seat meanwhile. A task finished there is complete when this returns
  // (synchronize, query and events recorded after it see it so); one that
  // is not runs from the queue as any other command. A busy stream is
  // given up to |wait_for_idle| to become idle first.
  hal_result_t enqueue_task(TaskCommand&& command, std::chrono::nanoseconds wait_for_idle);
  // Finishes pending work and waits until no executor holds the stream.
  // Idempotent.
  void shutdown();
  // Runs or waits for everything enqueued so far, without reporting a
  // failure (synchronize reports it).
  void drain();

  // create: a stream of |device| (flags must be 0). copy and fill
  // (memory.cpp) queue commands. synchronize runs or waits for everything
  // enqueued before the call. query: HAL_SUCCESS, HAL_NOT_READY or
  // HAL_ERROR_DEVICE_LOST; never blocks. wait queues a wait for the event's
  // latest record (none: nothing to wait for).
  HAL_PLUGIN_STREAM_METHODS;

 private:
  friend class StreamExecutors;
  // Executor side: runs commands until the stream is empty, parked or taken
  // over by an inline runner. True when it stopped early for fairness and
  // must be queued again (it stays scheduled).
  bool serve();
  static void wake_from_marker(void* stream);
  // Hands the stream to an executor when it has runnable work and nobody
  // serves it. Requires mutex_.
  void schedule_locked();
  // Pops one command and runs it with the lock released. Requires a
  // non-empty queue and a free runner seat.
  void run_one(std::unique_lock<std::mutex>& lock);
  void execute(Command& command);
  hal_result_t report_failure(const char* function) const;

  Device& device_;
  StreamExecutors& executors_;
  const uint64_t queue_depth_;
  std::mutex mutex_;
  std::condition_variable idle_cv_;  // threads waiting for progress sleep here
  CommandQueue queue_;
  uint64_t enqueued_ = 0;                   // commands ever enqueued (guarded by mutex_)
  uint64_t completed_ = 0;                  // commands ever finished (guarded by mutex_)
  std::atomic<uint64_t> enqueued_seen_{0};  // copies for lock-free readers
  std::atomic<uint64_t> completed_seen_{0};
  bool runner_busy_ = false;  // a thread is executing a command
  bool scheduled_ = false;    // queued for or held by an executor
  bool parked_ = false;       // the front command waits for an event not yet complete
  bool shut_down_ = false;
  uint32_t sleepers_ = 0;  // threads asleep on idle_cv_
  std::atomic<bool> failed_{false};
  std::string failure_;                                  // written once, before failed_ is set
  hal_result_t failure_result_ = HAL_ERROR_DEVICE_LOST;  // likewise
  WorkerScratch scratch_;  // worker 0's group-shared memory for this stream's launches
};

inline Stream* to_stream(hal_impl_stream_t* stream) {
  return reinterpret_cast<Stream*>(stream);
}

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_STREAM_HPP_
