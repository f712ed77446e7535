#include "stream.hpp"

#include <chrono>

#include "device.hpp"
#include "memory.hpp"
#include "plugin.hpp"

namespace hal::cpu {
namespace {

// How long an idle executor, or a thread in synchronize, polls before it
// sleeps. Commands that arrive within it start without a wake-up.
constexpr auto kSpin = std::chrono::microseconds(30);

// Polls |ready| for up to kSpin; true when it became true.
template <class Ready>
bool spin_until(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (uint32_t i = 0;; ++i) {
    if (ready()) return true;
    spin_pause(i);
    if ((i & 63u) == 63u && std::chrono::steady_clock::now() > deadline) return ready();
  }
}

}  // namespace

Stream::Stream(Device& device) : device_(device) {
  executor_ = std::thread([this] { executor_main(); });
}

Stream::~Stream() {
  shutdown();
}

void Stream::shutdown() {
  {
    std::unique_lock lock(mutex_);
    if (stopping_) return;
  }
  drain();  // a failure was reported to whoever synchronized; finishing is what matters
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (executor_.joinable()) executor_.join();
}

hal_result_t Stream::enqueue(Command&& command) {
  if (failed_.load(std::memory_order_acquire)) return report_failure("enqueue");
  bool wake;
  {
    std::lock_guard lock(mutex_);
    ring_.push(std::move(command));
    ++enqueued_;
    enqueued_seen_.store(enqueued_, std::memory_order_release);
    wake = executor_sleeping_ && !runner_busy_;
  }
  if (wake) work_cv_.notify_one();
  return HAL_SUCCESS;
}

void Stream::run_one(std::unique_lock<std::mutex>& lock) {
  Command command = ring_.pop();
  runner_busy_ = true;
  lock.unlock();
  execute(command);
  command = std::monostate{};  // drop references (module, marker) outside the lock
  lock.lock();
  runner_busy_ = false;
  ++completed_;
  completed_seen_.store(completed_, std::memory_order_release);
  if (sync_sleepers_ != 0) idle_cv_.notify_all();
  // A synchronizing thread that leaves work behind hands it to the executor.
  if (executor_sleeping_ && !ring_.empty()) work_cv_.notify_one();
}

void Stream::executor_main() {
  std::unique_lock lock(mutex_);
  while (true) {
    if (!ring_.empty() && !runner_busy_) {
      run_one(lock);
      continue;
    }
    if (stopping_ && ring_.empty()) return;
    const uint64_t seen = enqueued_;
    const uint64_t finished = completed_;
    lock.unlock();
    spin_until([&] {
      return enqueued_seen_.load(std::memory_order_acquire) != seen ||
             completed_seen_.load(std::memory_order_acquire) != finished;
    });
    lock.lock();
    if ((!ring_.empty() && !runner_busy_) || stopping_) continue;
    executor_sleeping_ = true;
    work_cv_.wait(lock, [&] { return stopping_ || (!ring_.empty() && !runner_busy_); });
    executor_sleeping_ = false;
  }
}

hal_result_t Stream::synchronize() {
  drain();
  return failed_.load(std::memory_order_acquire) ? report_failure("stream_synchronize")
                                                 : HAL_SUCCESS;
}

void Stream::drain() {
  std::unique_lock lock(mutex_);
  const uint64_t target = enqueued_;
  while (completed_ < target) {
    if (!runner_busy_ && !ring_.empty()) {
      run_one(lock);  // the runner's seat is free: do the work here
      continue;
    }
    lock.unlock();
    const bool done =
        spin_until([&] { return completed_seen_.load(std::memory_order_acquire) >= target; });
    lock.lock();
    if (done || completed_ >= target) break;
    if (!runner_busy_ && !ring_.empty()) continue;
    ++sync_sleepers_;
    idle_cv_.wait(lock, [&] { return completed_ >= target || (!runner_busy_ && !ring_.empty()); });
    --sync_sleepers_;
  }
}

hal_result_t Stream::query() {
  if (failed_.load(std::memory_order_acquire)) return report_failure("stream_query");
  // completed_seen_ is read first: it never passes enqueued_seen_.
  const uint64_t completed = completed_seen_.load(std::memory_order_acquire);
  return completed == enqueued_seen_.load(std::memory_order_acquire) ? HAL_SUCCESS : HAL_NOT_READY;
}

hal_result_t Stream::report_failure(const char* function) const {
  return device_.report().fail(HAL_ERROR_DEVICE_LOST, 0, "%s: an earlier command failed: %s",
                               function, failure_.c_str());
}

void Stream::execute(Command& command) {
  Plugin& plugin = device_.plugin();
  const bool failed = failed_.load(std::memory_order_relaxed);
  try {
    // After a failure only the synchronisation commands still run, marked
    // failed, so nobody waits forever on a stream that is lost.
    if (auto* record = std::get_if<RecordCommand>(&command)) {
      complete_marker(*record->marker, failed, plugin.completion_signal());
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
    } else if (auto* host_fn = std::get_if<HostFnCommand>(&command)) {
      host_fn->fn(host_fn->user_data);
    } else if (auto* task = std::get_if<TaskCommand>(&command)) {
      task->task->run();
    }
  } catch (const std::exception& error) {
    if (!failed_.load()) {
      failure_ = error.what();
      failed_.store(true, std::memory_order_release);
    }
  }
}

// ---- table entries ----------------------------------------------------------

hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t flags,
                           hal_impl_stream_t** out_stream) {
  Device& owner = *to_device(device);
  return plugin::guarded(owner.report(), "stream_create", [&] {
    if (flags != 0) {
      return owner.report().fail(HAL_ERROR_INVALID_ARGUMENT, 0, "stream_create: unknown flags 0x%x",
                                 flags);
    }
    *out_stream = reinterpret_cast<hal_impl_stream_t*>(owner.add_stream());
    return HAL_SUCCESS;
  });
}

hal_result_t stream_destroy(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "stream_destroy", [&] {
    owner.remove_stream(&self);
    return HAL_SUCCESS;
  });
}

hal_result_t stream_synchronize(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  return plugin::guarded(self.device().report(), "stream_synchronize",
                         [&] { return self.synchronize(); });
}

hal_result_t stream_query(hal_impl_stream_t* stream) {
  return to_stream(stream)->query();
}

hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event) {
  Stream& self = *to_stream(stream);
  return plugin::guarded(self.device().report(), "stream_wait_event", [&] {
    std::shared_ptr<Marker> marker = to_event(event)->marker();
    if (!marker) return HAL_SUCCESS;  // never recorded: complete, nothing to wait for
    return self.enqueue(WaitCommand{std::move(marker)});
  });
}

hal_result_t stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data) {
  Stream& self = *to_stream(stream);
  return plugin::guarded(self.device().report(), "stream_enqueue_host_fn", [&] {
    return self.enqueue(HostFnCommand{fn, user_data});
  });
}

}  // namespace hal::cpu
