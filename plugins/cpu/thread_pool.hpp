// The worker threads that run the blocks of a kernel launch and the chunks of
// a large copy. One pool per plugin, sized to the host's cores: devices are
// virtual and share the same cores, so one pool avoids oversubscription.
//
// parallel_for(count, task) runs task(index, worker) for every index in
// [0, count); the calling thread is worker 0 and takes part, pool threads
// are workers 1..workers(). One job runs at a time: a caller that finds the
// pool busy (another stream's launch) runs its job alone, which keeps
// progress guaranteed and never nests waits.
//
// Idle workers spin for a bounded time (wake-ups through the kernel cost
// about 10 us on the VMs we target, spinning costs a core), then sleep on a
// condition variable.
#ifndef HAL_PLUGINS_CPU_THREAD_POOL_HPP_
#define HAL_PLUGINS_CPU_THREAD_POOL_HPP_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace hal::cpu {

// A job's body: runs indices [begin, end) on |worker|.
struct ParallelTask {
  void (*run)(void* context, uint64_t begin, uint64_t end, uint32_t worker);
  void* context;
};

class ThreadPool {
 public:
  explicit ThreadPool(uint32_t worker_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Pool threads, not counting the caller.
  uint32_t workers() const { return static_cast<uint32_t>(threads_.size()); }
  // Pool threads inside a job now (a snapshot).
  uint32_t workers_inside() const { return inside_.load(std::memory_order_relaxed); }

  // Runs |task| over [0, count) in chunks of |grain| indices and returns when
  // all are done. Exceptions must not leave |task|.
  void parallel_for(uint64_t count, uint64_t grain, const ParallelTask& task);

 private:
  void worker_main(uint32_t worker);
  void stop_and_join();
  void run_chunks(uint32_t worker);

  std::vector<std::thread> threads_;
  std::mutex submit_mutex_;  // one job at a time; try_lock decides who gets the pool

  // The current job. Written by the submitter only while active_ is false and
  // no worker is inside_, read by workers after an acquire of active_.
  ParallelTask task_{};
  uint64_t count_ = 0;
  uint64_t grain_ = 1;
  std::atomic<uint64_t> next_{0};      // next index to claim
  std::atomic<uint64_t> finished_{0};  // indices done
  std::atomic<bool> active_{false};
  std::atomic<uint32_t> inside_{0};      // workers currently looking at the job
  std::atomic<uint64_t> generation_{0};  // bumped per job; idle workers watch it

  std::mutex sleep_mutex_;
  std::condition_variable sleep_cv_;
  uint32_t sleepers_ = 0;  // guarded by sleep_mutex_
  bool stopping_ = false;  // guarded by sleep_mutex_
  std::atomic<bool> stop_flag_{false};
};

// Spins politely: a pause instruction, and a yield every so often so a
// spinning thread on a 2-core machine leaves room for the one it waits for.
inline void spin_pause(uint32_t iteration) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
  if ((iteration & 63u) == 63u) std::this_thread::yield();
}

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_THREAD_POOL_HPP_
