#include "thread_pool.hpp"

#include <chrono>

namespace hal::cpu {
namespace {

// How long an idle worker keeps polling before it sleeps: long enough to
// catch back-to-back launches, short enough not to starve 2-core machines.
constexpr auto kIdleSpin = std::chrono::microseconds(50);

}  // namespace

ThreadPool::ThreadPool(uint32_t worker_threads) {
  threads_.reserve(worker_threads);
  try {
    for (uint32_t i = 0; i < worker_threads; ++i) {
      threads_.emplace_back([this, worker = i + 1] { worker_main(worker); });
    }
  } catch (...) {
    stop_and_join();  // the destructor does not run when a constructor throws
    throw;
  }
}

ThreadPool::~ThreadPool() {
  stop_and_join();
}

void ThreadPool::stop_and_join() {
  {
    std::lock_guard lock(sleep_mutex_);
    stopping_ = true;
    stop_flag_.store(true);
  }
  sleep_cv_.notify_all();
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

void ThreadPool::run_chunks(uint32_t worker) {
  const uint64_t count = count_;
  const uint64_t grain = grain_;
  while (true) {
    const uint64_t begin = next_.fetch_add(grain, std::memory_order_relaxed);
    if (begin >= count) return;
    const uint64_t end = begin + grain < count ? begin + grain : count;
    task_.run(task_.context, begin, end, worker);
    finished_.fetch_add(end - begin, std::memory_order_release);
  }
}

void ThreadPool::parallel_for(uint64_t count, uint64_t grain, const ParallelTask& task) {
  if (count == 0) return;
  if (grain == 0) grain = 1;
  std::unique_lock submit(submit_mutex_, std::try_to_lock);
  if (threads_.empty() || count <= grain || !submit.owns_lock()) {
    task.run(task.context, 0, count, 0);
    return;
  }
  task_ = task;
  count_ = count;
  grain_ = grain;
  next_.store(0, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  active_.store(true);  // seq_cst: publishes the job fields above
  generation_.fetch_add(1);
  {
    // Only take the lock when somebody sleeps: spinning workers see the
    // generation change by themselves.
    std::unique_lock lock(sleep_mutex_);
    const bool wake = sleepers_ != 0;
    lock.unlock();
    if (wake) sleep_cv_.notify_all();
  }
  run_chunks(0);
  for (uint32_t i = 0; finished_.load(std::memory_order_acquire) < count; ++i) spin_pause(i);
  // Retire the job; a worker that entered late sees active_ false and leaves
  // without reading the fields the next job will overwrite.
  active_.store(false);
  for (uint32_t i = 0; inside_.load() != 0; ++i) spin_pause(i);
}

void ThreadPool::worker_main(uint32_t worker) {
  uint64_t seen = generation_.load();
  while (true) {
    // Spin for a while, then sleep until a new generation or shutdown.
    const auto spin_until = std::chrono::steady_clock::now() + kIdleSpin;
    uint32_t iteration = 0;
    while (generation_.load(std::memory_order_acquire) == seen &&
           !stop_flag_.load(std::memory_order_relaxed)) {
      spin_pause(iteration);
      if ((++iteration & 255u) == 0 && std::chrono::steady_clock::now() > spin_until) {
        std::unique_lock lock(sleep_mutex_);
        ++sleepers_;
        sleep_cv_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });
        --sleepers_;
        break;
      }
    }
    if (stop_flag_.load()) return;
    seen = generation_.load();
    inside_.fetch_add(1);  // seq_cst, pairs with the submitter's active_/inside_ checks
    if (active_.load()) run_chunks(worker);
    inside_.fetch_sub(1);
  }
}

}  // namespace hal::cpu
