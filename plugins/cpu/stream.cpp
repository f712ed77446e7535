#include "stream.hpp"

#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <new>

#include "bounds.hpp"
#include "device.hpp"
#include "event.hpp"
#include "memory.hpp"
#include "module.hpp"

namespace hal::cpu {
namespace {

// How long an idle executor, or a thread in synchronize, polls before it
// sleeps. Commands that arrive within it start without a wake-up.
constexpr auto kSpin = std::chrono::microseconds(30);

// The long idle spin (StreamLimits::idle_spin, HAL_CPU_EXECUTOR_SPIN_US).
// Waking a sleeping thread costs the thread that enqueues 15-18 us in the
// wake-up call on the VMs we target (a halted vCPU is woken through the
// hypervisor; measured with a condition variable whose sleeper had been
// idle for 50 us or more), and an enqueue-then-synchronize loop of
// mid-sized work paid it on every call: 18 us of a 190 us 256^3 sgemm at
// one thread. So an executor that was woken within the long spin of
// falling asleep polls that long the next time, one such thread at a time
// and only while a core is free of the plugin's work (core_to_spare); a
// longer sleep, or a long spin that found nothing, puts it back on kSpin.
// A stream fed faster than kSpin keeps its thread in Stream::serve and
// never spins long.
constexpr uint64_t kMaxIdleSpinMicroseconds = 10000;

// Commands an executor runs on one stream before it lets another ready
// stream have its turn.
constexpr uint32_t kFairnessQuota = 64;

constexpr uint32_t kMaxExecutorThreads = 1024;
constexpr uint64_t kMaxQueueDepth = uint64_t{1} << 30;

// Polls |ready| for up to |spin|; true when it became true.
template <class Ready>
bool spin_until(Ready ready, std::chrono::microseconds spin = kSpin) {
  const auto deadline = std::chrono::steady_clock::now() + spin;
  for (uint32_t i = 0;; ++i) {
    if (ready()) return true;
    spin_pause(i);
    if ((i & 63u) == 63u && std::chrono::steady_clock::now() > deadline) return ready();
  }
}

thread_local StreamExecutors* tls_executors = nullptr;  // set on executor threads
thread_local const Stream* tls_running = nullptr;       // the stream whose command runs here

// Marks an executor thread as inside a command that may block for long, so
// the executor set may start another thread for the streams still waiting.
class BlockingScope {
 public:
  BlockingScope() : executors_(tls_executors) {
    if (executors_ != nullptr) executors_->begin_blocking();
  }
  ~BlockingScope() {
    if (executors_ != nullptr) executors_->end_blocking();
  }
  BlockingScope(const BlockingScope&) = delete;
  BlockingScope& operator=(const BlockingScope&) = delete;

 private:
  StreamExecutors* executors_;
};

// Counts, in |counter| unless null, a command that runs on this thread.
class InlineRunScope {
 public:
  explicit InlineRunScope(std::atomic<uint32_t>* counter) : counter_(counter) {
    if (counter_ != nullptr) counter_->fetch_add(1, std::memory_order_acq_rel);
  }
  ~InlineRunScope() {
    if (counter_ != nullptr) counter_->fetch_sub(1, std::memory_order_acq_rel);
  }
  InlineRunScope(const InlineRunScope&) = delete;
  InlineRunScope& operator=(const InlineRunScope&) = delete;

 private:
  std::atomic<uint32_t>* counter_;
};

bool parse_count(const char* name, const char* text, uint64_t min, uint64_t max, uint64_t* out,
                 std::string& out_error) {
  const std::string value = text;
  uint64_t number = 0;
  bool valid = !value.empty() && value.size() <= 10;
  for (char c : value) {
    if (c < '0' || c > '9') {
      valid = false;
      break;
    }
    number = number * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!valid || number < min || number > max) {
    out_error = std::string(name) + "='" + value + "' is not valid: expected a whole number from " +
                std::to_string(min) + " to " + std::to_string(max);
    return false;
  }
  *out = number;
  return true;
}

}  // namespace

// ---- limits -----------------------------------------------------------------

uint32_t default_executor_threads(uint32_t hardware_threads) {
  const uint32_t doubled = 2 * (hardware_threads == 0 ? 1 : hardware_threads);
  return doubled < 64 ? doubled : 64;
}

bool parse_stream_limits(const char* threads_text, const char* depth_text, const char* spin_text,
                         StreamLimits* out, std::string& out_error) {
  *out = StreamLimits{};
  uint64_t value = 0;
  if (threads_text != nullptr) {
    if (!parse_count("HAL_CPU_STREAM_THREADS", threads_text, 1, kMaxExecutorThreads, &value,
                     out_error))
      return false;
    out->executor_threads = static_cast<uint32_t>(value);
  }
  if (depth_text != nullptr) {
    if (!parse_count("HAL_CPU_STREAM_QUEUE_DEPTH", depth_text, 1, kMaxQueueDepth, &value,
                     out_error))
      return false;
    out->queue_depth = value;
  }
  if (spin_text != nullptr) {
    if (!parse_count("HAL_CPU_EXECUTOR_SPIN_US", spin_text, 0, kMaxIdleSpinMicroseconds, &value,
                     out_error))
      return false;
    out->idle_spin = std::chrono::microseconds(value);
  }
  return true;
}

// ---- the command queue ------------------------------------------------------

struct CommandQueue::Chunk {
  // About 16 KiB a chunk: big enough that the chunk change (a mutex) is
  // rare, small enough that a thousand shallow streams hold little.
  static constexpr size_t kCommands = ((size_t{16} << 10) - sizeof(void*)) / sizeof(Command);
  Command commands[kCommands];
  Chunk* next = nullptr;
};

// Drained chunks of every stream, up to kCachedChunkBytes, kept for the next
// stream that needs one: a fresh mapping costs its page faults (~11 us a
// 4 KiB page on the VMs we target), which a pipelined producer running ahead
// of its stream would otherwise pay every few hundred commands. Beyond that
// they go back to the system.
class ChunkCache {
 public:
  static constexpr size_t kCachedChunkBytes = size_t{4} << 20;

  explicit ChunkCache(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
    chunks_.reserve(kCachedChunkBytes / chunk_bytes_);
  }
  ~ChunkCache() {
    for (void* chunk : chunks_) munmap(chunk, chunk_bytes_);
  }
  ChunkCache(const ChunkCache&) = delete;
  ChunkCache& operator=(const ChunkCache&) = delete;

  // A chunk's memory: cached, else freshly mapped.
  void* take() {
    {
      std::lock_guard lock(mutex_);
      if (!chunks_.empty()) {
        void* chunk = chunks_.back();
        chunks_.pop_back();
        return chunk;
      }
    }
    // Its own mapping, so a drained backlog can go back to the system at
    // once instead of staying in the heap.
    void* chunk =
        mmap(nullptr, chunk_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (chunk == MAP_FAILED) throw std::bad_alloc();
    return chunk;
  }
  // Keeps |chunk| while the cache has room, else unmaps it.
  void give(void* chunk) {
    {
      std::lock_guard lock(mutex_);
      if (chunks_.size() < chunks_.capacity()) {
        chunks_.push_back(chunk);  // within the reserved capacity: cannot throw
        return;
      }
    }
    munmap(chunk, chunk_bytes_);
  }

 private:
  const size_t chunk_bytes_;
  std::mutex mutex_;
  std::vector<void*> chunks_;
};

namespace {
// The one cache, alive while any cpu plugin context is: created by the first
// Plugin, destroyed by the last, after its streams (a function-local static
// would die in exit handlers before a stream that a static's destructor
// destroys).
std::mutex g_cache_mutex;
uint32_t g_cache_users = 0;
ChunkCache* g_cache = nullptr;
}  // namespace

void CommandQueue::retain_cache() {
  std::lock_guard lock(g_cache_mutex);
  if (g_cache_users++ == 0) g_cache = std::make_unique<ChunkCache>(sizeof(Chunk)).release();
}

void CommandQueue::release_cache() noexcept {
  std::lock_guard lock(g_cache_mutex);
  if (--g_cache_users == 0) {
    std::unique_ptr<ChunkCache> last(g_cache);
    g_cache = nullptr;
  }
}

ChunkCache& CommandQueue::cache() {
  return *g_cache;
}

CommandQueue::Chunk* CommandQueue::new_chunk() {
  return new (cache().take()) Chunk();
}

void CommandQueue::delete_chunk(Chunk* chunk) {
  if (chunk == nullptr) return;
  chunk->~Chunk();
  cache().give(chunk);
}

CommandQueue::~CommandQueue() {
  while (head_ != nullptr) {
    Chunk* next = head_->next;
    delete_chunk(head_);
    head_ = next;
  }
  delete_chunk(spare_);
}

Command& CommandQueue::front() {
  return head_->commands[head_index_];
}

void CommandQueue::push(Command&& command) {
  if (tail_ == nullptr || tail_index_ == Chunk::kCommands) {
    Chunk* chunk = spare_ != nullptr ? spare_ : new_chunk();
    spare_ = nullptr;
    if (tail_ == nullptr) {
      head_ = chunk;
      head_index_ = 0;
    } else {
      tail_->next = chunk;
    }
    tail_ = chunk;
    tail_index_ = 0;
  }
  tail_->commands[tail_index_++] = std::move(command);
  ++count_;
}

Command CommandQueue::pop() {
  Command command = std::move(head_->commands[head_index_]);
  head_->commands[head_index_] = std::monostate{};
  ++head_index_;
  --count_;
  if (count_ == 0) {
    // Empty: start over in the same chunk, give the rest back.
    Chunk* rest = head_->next;
    head_->next = nullptr;
    tail_ = head_;
    head_index_ = tail_index_ = 0;
    while (rest != nullptr) {
      Chunk* next = rest->next;
      delete_chunk(rest);
      rest = next;
    }
  } else if (head_index_ == Chunk::kCommands) {
    Chunk* drained = head_;
    head_ = drained->next;
    head_index_ = 0;
    drained->next = nullptr;
    if (spare_ == nullptr) {
      spare_ = drained;
    } else {
      delete_chunk(drained);
    }
  }
  return command;
}

// ---- executors --------------------------------------------------------------

StreamExecutors::~StreamExecutors() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    stop_flag_.store(true);
  }
  work_cv_.notify_all();
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

void StreamExecutors::grow_locked() {
  const auto threads = static_cast<uint32_t>(threads_.size());
  if (ready_.size() <= idle_ || threads - blocked_ >= max_threads_ ||
      threads >= max_threads_ + kMaxBlockingExecutors) {
    return;
  }
  try {
    threads_.emplace_back([this] { executor_main(); });
    ++idle_;
  } catch (const std::exception&) {
    // No thread to spare (EAGAIN): the streams still progress on the
    // threads there are, and synchronize runs work inline.
  }
}

bool StreamExecutors::submit(Stream* stream) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    try {
      ready_.push_back(stream);
    } catch (const std::exception&) {
      return false;
    }
    ready_count_.store(ready_.size(), std::memory_order_release);
    grow_locked();
    wake = sleeping_ != 0 && ready_.size() > idle_ - sleeping_;
  }
  if (wake) work_cv_.notify_one();
  return true;
}

void StreamExecutors::begin_blocking() {
  std::lock_guard lock(mutex_);
  ++blocked_;
  grow_locked();
}

void StreamExecutors::end_blocking() {
  std::lock_guard lock(mutex_);
  --blocked_;
}

// The plugin's threads at work: executors serving a stream, other threads
// running a stream's command (a synchronize doing the work itself) and the
// pool's threads inside a job. A spinner on a core one of them needs would
// slow it. Not counted: an OpenMP team's threads beyond its caller (the
// oneDNN thread's, cpu.onednn), and the application's own threads.
bool StreamExecutors::core_to_spare() const {
  const uint32_t cores = pool_.workers() + 1;
  const uint32_t working = serving_.load(std::memory_order_acquire) +
                           inline_runners_.load(std::memory_order_acquire) + pool_.workers_inside();
  return working + 1 <= cores;  // + 1: the spinner
}

void StreamExecutors::executor_main() {
  tls_executors = this;
  bool woken_soon = false;  // its last sleep ended within idle_spin_
  std::unique_lock lock(mutex_);
  while (true) {
    if (!ready_.empty()) {
      Stream* stream = ready_.front();
      ready_.pop_front();
      ready_count_.store(ready_.size(), std::memory_order_relaxed);
      --idle_;
      serving_.fetch_add(1, std::memory_order_acq_rel);
      lock.unlock();
      const bool again = stream->serve();
      lock.lock();
      serving_.fetch_sub(1, std::memory_order_acq_rel);
      ++idle_;
      if (again) {
        try {
          ready_.push_back(stream);
          ready_count_.store(ready_.size(), std::memory_order_relaxed);
        } catch (const std::exception&) {
          lock.unlock();  // no memory to queue it: keep serving it here
          while (stream->serve()) {
          }
          lock.lock();
        }
      }
      continue;
    }
    if (stopping_) return;
    lock.unlock();
    const bool long_spin = woken_soon && idle_spin_ > kSpin && core_to_spare() &&
                           !long_spinner_.exchange(true, std::memory_order_acq_rel);
    const bool found = spin_until(
        [&] {
          return ready_count_.load(std::memory_order_acquire) != 0 ||
                 stop_flag_.load(std::memory_order_relaxed) || (long_spin && !core_to_spare());
        },
        long_spin ? idle_spin_ : kSpin);
    if (long_spin) {
      long_spinner_.store(false, std::memory_order_release);
      woken_soon = found;
    }
    lock.lock();
    if (!ready_.empty() || stopping_) continue;
    ++sleeping_;
    const auto asleep_since = std::chrono::steady_clock::now();
    work_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
    woken_soon = std::chrono::steady_clock::now() - asleep_since < idle_spin_;
    --sleeping_;
  }
}

// ---- streams ----------------------------------------------------------------

Stream::Stream(Device& device)
    : device_(device),
      executors_(device.plugin().executors()),
      queue_depth_(device.plugin().stream_limits().queue_depth) {}

Stream::~Stream() {
  shutdown();
}

void Stream::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (shut_down_) return;
  }
  drain();  // a failure was reported to whoever synchronized; finishing is what matters
  std::unique_lock lock(mutex_);
  shut_down_ = true;
  // An executor may still hold the stream (queued, or about to let go).
  ++sleepers_;
  idle_cv_.wait(lock, [&] { return !scheduled_; });
  --sleepers_;
}

void Stream::schedule_locked() {
  if (scheduled_ || parked_ || runner_busy_ || queue_.empty()) return;
  scheduled_ = executors_.submit(this);
}

hal_result_t Stream::enqueue(Command&& command) {
  if (failed_.load(std::memory_order_acquire)) return report_failure("enqueue");
  std::unique_lock lock(mutex_);
  // Back-pressure, except for a command a host function puts on its own
  // stream: that one could never see room.
  while (queue_.size() >= queue_depth_ && tls_running != this) {
    if (!runner_busy_ && !parked_) {
      run_one(lock);  // the runner's seat is free: make room here
      continue;
    }
    ++sleepers_;
    idle_cv_.wait(lock,
                  [&] { return queue_.size() < queue_depth_ || (!runner_busy_ && !parked_); });
    --sleepers_;
  }
  queue_.push(std::move(command));
  ++enqueued_;
  enqueued_seen_.store(enqueued_, std::memory_order_release);
  schedule_locked();
  return HAL_SUCCESS;
}

hal_result_t Stream::enqueue_task(TaskCommand&& command, std::chrono::nanoseconds wait_for_idle) {
  if (failed_.load(std::memory_order_acquire)) return report_failure("enqueue");
  StreamTask& task = *command.task;
  if (wait_for_idle.count() > 0) {
    // Lock-free, as query: everything enqueued has completed. A command
    // completes after the runner's seat is free again (run_one). Bounded
    // and without yielding: on a loaded host a yield costs a time slice,
    // far more than the wait it would share.
    const auto give_up = std::chrono::steady_clock::now() + wait_for_idle;
    for (uint32_t i = 1; completed_seen_.load(std::memory_order_acquire) !=
                         enqueued_seen_.load(std::memory_order_acquire);
         ++i) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 0 && std::chrono::steady_clock::now() > give_up) break;
    }
  }
  std::unique_lock lock(mutex_);
  if (!queue_.empty() || runner_busy_ || parked_ || tls_running == this) {
    lock.unlock();
    return enqueue(std::move(command));
  }
  // The task waits at the front of the queue while this thread holds the
  // runner's seat: nobody else runs it, and whatever is enqueued meanwhile
  // queues behind it.
  queue_.push(std::move(command));
  ++enqueued_;
  enqueued_seen_.store(enqueued_, std::memory_order_release);
  runner_busy_ = true;
  lock.unlock();
  const Stream* previous = tls_running;
  tls_running = this;
  const bool finished = task.finish_inline();
  tls_running = previous;
  lock.lock();
  runner_busy_ = false;
  Command done;  // released after the lock, as run_one does
  if (finished) {
    done = queue_.pop();
    ++completed_;
    completed_seen_.store(completed_, std::memory_order_release);
  }
  if (sleepers_ != 0) idle_cv_.notify_all();
  schedule_locked();  // the rest of the task, or work enqueued meanwhile
  lock.unlock();
  return HAL_SUCCESS;
}

void Stream::run_one(std::unique_lock<std::mutex>& lock) {
  Command command = queue_.pop();
  runner_busy_ = true;
  lock.unlock();
  const Stream* previous = tls_running;
  tls_running = this;
  {
    // A command run by a thread that is not one of the executors (a
    // synchronize, a full queue's enqueue) keeps them from spinning long.
    InlineRunScope inline_run(tls_executors == &executors_ ? nullptr : &executors_.inline_runners_);
    execute(command);
  }
  command = std::monostate{};  // drop references (module, marker) outside the lock
  tls_running = previous;
  lock.lock();
  runner_busy_ = false;
  ++completed_;
  completed_seen_.store(completed_, std::memory_order_release);
  if (sleepers_ != 0) idle_cv_.notify_all();
}

bool Stream::serve() {
  std::unique_lock lock(mutex_);
  for (uint32_t served = 0;; ++served) {
    if (queue_.empty() && !runner_busy_ && !parked_ && !executors_.waiting_streams()) {
      // Nobody else needs this thread: stay with the stream a moment, as
      // its next command usually follows at once (a pipelined producer);
      // handing it back and forth would cost more than the command.
      const uint64_t seen = enqueued_;
      lock.unlock();
      spin_until([&] {
        return enqueued_seen_.load(std::memory_order_acquire) != seen ||
               executors_.waiting_streams();
      });
      lock.lock();
    }
    if (queue_.empty() || runner_busy_ || parked_) break;
    // A wait for an event that has not completed parks the stream instead
    // of holding this thread; the marker hands it back when it completes.
    if (auto* wait = std::get_if<WaitCommand>(&queue_.front());
        wait != nullptr && !wait->marker->done.load(std::memory_order_acquire) &&
        add_marker_waiter(*wait->marker, MarkerWaiter{&Stream::wake_from_marker, this})) {
      parked_ = true;
      break;
    }
    if (served >= kFairnessQuota && executors_.waiting_streams()) return true;
    run_one(lock);
  }
  scheduled_ = false;
  if (sleepers_ != 0) idle_cv_.notify_all();
  return false;
}

void Stream::wake_from_marker(void* context) {
  Stream& self = *static_cast<Stream*>(context);
  std::lock_guard lock(self.mutex_);
  self.parked_ = false;
  self.schedule_locked();
  if (self.sleepers_ != 0) self.idle_cv_.notify_all();
}

hal_result_t Stream::synchronize() {
  drain();
  return failed_.load(std::memory_order_acquire) ? report_failure("stream_synchronize")
                                                 : HAL_SUCCESS;
}

void Stream::drain() {
  std::unique_lock lock(mutex_);
  const uint64_t target = enqueued_;
  const auto runnable = [&] { return !runner_busy_ && !parked_ && !queue_.empty(); };
  while (completed_ < target) {
    if (runnable()) {
      run_one(lock);  // the runner's seat is free: do the work here
      continue;
    }
    lock.unlock();
    const bool done =
        spin_until([&] { return completed_seen_.load(std::memory_order_acquire) >= target; });
    lock.lock();
    if (done || completed_ >= target) break;
    if (runnable()) continue;
    ++sleepers_;
    idle_cv_.wait(lock, [&] { return completed_ >= target || runnable(); });
    --sleepers_;
  }
  schedule_locked();  // work enqueued meanwhile goes back to an executor
}

hal_result_t Stream::query() {
  if (failed_.load(std::memory_order_acquire)) return report_failure("stream_query");
  // completed_seen_ is read first: it never passes enqueued_seen_.
  const uint64_t completed = completed_seen_.load(std::memory_order_acquire);
  return completed == enqueued_seen_.load(std::memory_order_acquire) ? HAL_SUCCESS : HAL_NOT_READY;
}

hal_result_t Stream::report_failure(const char* function) const {
  return device_.report().fail(failure_result_, 0, "%s: an earlier command failed: %s", function,
                               failure_.c_str());
}

void Stream::execute(Command& command) {
  Plugin& plugin = device_.plugin();
  const bool failed = failed_.load(std::memory_order_relaxed);
  try {
    // After a failure only the synchronisation commands still run, marked
    // failed, so nobody waits forever on a stream that is lost.
    if (auto* record = std::get_if<RecordCommand>(&command)) {
      // The event reports the stream's loss with the stream's code (SPEC 4.4).
      complete_marker(*record->marker, failed ? failure_result_ : HAL_SUCCESS,
                      plugin.completion_signal());
    } else if (auto* wait = std::get_if<WaitCommand>(&command)) {
      wait_marker(*wait->marker, plugin.completion_signal());
    } else if (failed) {
      return;
    } else if (auto* copy = std::get_if<CopyCommand>(&command)) {
      execute_copy(plugin.pool(), copy->dst, copy->src, copy->size);
    } else if (auto* fill = std::get_if<FillCommand>(&command)) {
      execute_fill(plugin.pool(), fill->dst, fill->value, fill->size);
    } else if (auto* launch = std::get_if<LaunchCommand>(&command)) {
      execute_launch(*launch, plugin.pool(), scratch_, plugin.pool_scratch());
      if (launch->bounds && launch->bounds->record.claimed != 0) {
        // As compute-sanitizer does: said at once, and the stream fails (its
        // kernel's results are not what the kernel meant to compute).
        const std::string what = describe_bad_access(launch->kernel->name(), *launch->bounds);
        std::fprintf(stderr, "hal: validation: error: %s\n", what.c_str());
        throw CommandFailure(HAL_ERROR_OUT_OF_BOUNDS, what);
      }
    } else if (auto* host_fn = std::get_if<HostFnCommand>(&command)) {
      BlockingScope blocking;  // may wait on anything, e.g. the loader's event fallback
      host_fn->fn(host_fn->user_data);
    } else if (auto* task = std::get_if<TaskCommand>(&command)) {
      BlockingScope blocking;  // a collective waits for its peers
      task->task->run();
    }
  } catch (const std::exception& error) {
    if (!failed_.load()) {
      failure_ = error.what();
      if (const auto* failure = dynamic_cast<const CommandFailure*>(&error)) {
        failure_result_ = failure->result();
      }
      failed_.store(true, std::memory_order_release);
    }
  }
}

hal_result_t Stream::create(Device& device, hal_stream_flags_t flags, Stream*& out_stream) {
  if (flags != 0) {
    return device.report().fail(HAL_ERROR_INVALID_ARGUMENT, 0, "stream_create: unknown flags 0x%x",
                                flags);
  }
  out_stream = device.add_stream();
  return HAL_SUCCESS;
}

hal_result_t Stream::wait(Event& event) {
  std::shared_ptr<Marker> marker = event.marker();
  if (!marker) return HAL_SUCCESS;  // never recorded: complete, nothing to wait for
  return enqueue(WaitCommand{std::move(marker)});
}

hal_result_t Stream::enqueue_host_fn(hal_host_fn_t fn, void* user_data) {
  return enqueue(HostFnCommand{fn, user_data});
}

}  // namespace hal::cpu
