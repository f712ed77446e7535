#include "host_functions.hpp"

namespace hal::cuda {

CUresult HostFunctions::create(const DriverApi& api, CUstream stream,
                               std::unique_ptr<HostFunctions>& out) {
  std::unique_ptr<HostFunctions> made(new HostFunctions(api));
  void* counter = nullptr;
  // Device-mapped and portable: with unified addressing the host pointer is
  // the device pointer cuStreamWaitValue32 reads.
  if (const CUresult result = api.cuMemHostAlloc(
          &counter, sizeof(uint32_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
      result != CUDA_SUCCESS) {
    return result;
  }
  made->counter_ = static_cast<uint32_t*>(counter);
  __atomic_store_n(made->counter_, 0u, __ATOMIC_RELEASE);
  if (const CUresult probed = api.cuStreamWaitValue32(
          stream, reinterpret_cast<CUdeviceptr>(counter), 0, CU_STREAM_WAIT_VALUE_GEQ);
      probed != CUDA_SUCCESS) {
    made->free_counter();
    return probed;
  }
  made->thread_ = std::thread([raw = made.get()] { raw->run(); });
  out = std::move(made);
  return CUDA_SUCCESS;
}

HostFunctions::~HostFunctions() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CUresult HostFunctions::free_counter() {
  if (counter_ == nullptr) return CUDA_SUCCESS;
  const CUresult result = api_.cuMemFreeHost(counter_);
  counter_ = nullptr;
  return result;
}

CUresult HostFunctions::enqueue(CUstream stream, hal_host_fn_t fn, void* user_data,
                                const char*& failed_call) {
  std::lock_guard lock(enqueue_mutex_);
  const uint32_t ticket = next_ticket_ + 1;
  auto job = std::make_unique<Job>(Job{this, fn, user_data, ticket});
  failed_call = "cuLaunchHostFunc";
  if (const CUresult result = api_.cuLaunchHostFunc(stream, post, job.get());
      result != CUDA_SUCCESS) {
    return result;
  }
  job.release();  // post() hands it to the host thread
  next_ticket_ = ticket;
  // The default condition: (int32_t)(*counter - ticket) >= 0, a cyclic
  // greater-or-equal, so the counter may wrap.
  failed_call = "cuStreamWaitValue32";
  return api_.cuStreamWaitValue32(stream, reinterpret_cast<CUdeviceptr>(counter_), ticket,
                                  CU_STREAM_WAIT_VALUE_GEQ);
}

void CUDA_CB HostFunctions::post(void* data) {
  std::unique_ptr<Job> job(static_cast<Job*>(data));
  HostFunctions& self = *job->owner;
  {
    std::lock_guard lock(self.mutex_);
    self.queue_.push_back(std::move(job));
  }
  self.changed_.notify_one();
}

void HostFunctions::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every function ran
    std::unique_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job->fn(job->user_data);  // HAL host functions must not throw (SPEC §7)
    // Seen by the device's wait once written (pinned, device-mapped memory).
    __atomic_store_n(counter_, job->ticket, __ATOMIC_RELEASE);
    lock.lock();
  }
}

}  // namespace hal::cuda
