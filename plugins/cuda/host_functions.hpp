// HAL host functions on a cuda stream. CUDA runs the functions of
// cuLaunchHostFunc on a driver thread that it may share among all streams
// ("Host functions without a mandated order (such as in independent streams)
// execute in undefined order and may be serialized"), and such a function
// "must not make any CUDA API calls" nor wait for CUDA work not ordered
// before it. A HAL host function may do both (SPEC §7: it may use every other
// stream, and block on a gate another stream opens), so it never runs there:
// the driver thread only posts it to the stream's own host thread (a
// non-blocking hand-over, no CUDA call), and the stream then waits on the
// device with cuStreamWaitValue32 for a pinned, device-mapped counter that
// the host thread advances when the function returns.
#ifndef HAL_PLUGINS_CUDA_HOST_FUNCTIONS_HPP_
#define HAL_PLUGINS_CUDA_HOST_FUNCTIONS_HPP_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "driver.hpp"
#include "hal_plugin.h"

namespace hal::cuda {

class HostFunctions {
 public:
  // Allocates the counter (cuMemHostAlloc, DEVICEMAP) with the stream's
  // context current, checks that |stream| can wait on it (a wait for 0 is
  // met at once; CUDA_ERROR_NOT_SUPPORTED where the device has no stream
  // memory operations), and starts the host thread.
  static CUresult create(const DriverApi& api, CUstream stream,
                         std::unique_ptr<HostFunctions>& out);
  // Stops the thread; the stream was synchronised first, so nothing is
  // pending. The counter is freed by free_counter() with the context current.
  ~HostFunctions();
  HostFunctions(const HostFunctions&) = delete;
  HostFunctions& operator=(const HostFunctions&) = delete;

  // Enqueues |fn(user_data)| on |stream| (its context current): the post on
  // the driver thread, then the stream's wait for the counter.
  CUresult enqueue(CUstream stream, hal_host_fn_t fn, void* user_data, const char*& failed_call);
  CUresult free_counter();

 private:
  struct Job {
    HostFunctions* owner;
    hal_host_fn_t fn;
    void* user_data;
    uint32_t ticket;
  };
  explicit HostFunctions(const DriverApi& api) : api_(api) {}
  static void CUDA_CB post(void* job);  // on the driver's thread: never a CUDA call
  void run();

  const DriverApi& api_;
  uint32_t* counter_ = nullptr;  // pinned; the stream waits for it to reach a ticket
  std::mutex enqueue_mutex_;     // a ticket's post and wait are adjacent on the stream
  uint32_t next_ticket_ = 0;     // guarded by enqueue_mutex_

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Job>> queue_;  // guarded by mutex_
  bool stopping_ = false;                   // guarded by mutex_
  std::thread thread_;
};

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_HOST_FUNCTIONS_HPP_
