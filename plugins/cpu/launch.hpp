// Kernel launch for the cpu plugin: Kernel::launch (launch_kernel) enqueues a
// launch command, whose execution spreads the grid's blocks over the thread
// pool and calls each block once through libffi.
#ifndef HAL_PLUGINS_CPU_LAUNCH_HPP_
#define HAL_PLUGINS_CPU_LAUNCH_HPP_

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#include "hal_plugin.h"

namespace hal::cpu {

struct LaunchCommand;
class ThreadPool;

// A worker's group-shared memory: 64-byte aligned, grown on demand and then
// reused by every later launch, so launches allocate nothing.
class WorkerScratch {
 public:
  // At least |bytes| bytes; nullptr for 0. May throw std::bad_alloc.
  void* reserve(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (bytes > capacity_) {
      buffer_.reset(static_cast<std::byte*>(::operator new (bytes, std::align_val_t{kAlignment})));
      capacity_ = bytes;
    }
    return buffer_.get();
  }

 private:
  static constexpr size_t kAlignment = 64;
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete (p, std::align_val_t{kAlignment}); }
  };
  std::unique_ptr<std::byte, AlignedDelete> buffer_;
  size_t capacity_ = 0;
};

// Runs every block of |launch|. |caller_scratch| serves the calling thread
// (worker 0), |pool_scratch[w]| pool worker w.
void execute_launch(const LaunchCommand& launch, ThreadPool& pool, WorkerScratch& caller_scratch,
                    std::vector<WorkerScratch>& pool_scratch);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_LAUNCH_HPP_
