// Streams of the cuda plugin: a stream is a non-blocking CUstream of the
// device's primary context.
#ifndef HAL_PLUGINS_CUDA_STREAM_HPP_
#define HAL_PLUGINS_CUDA_STREAM_HPP_

#include <memory>
#include <mutex>
#include <string>

#include "driver.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "host_functions.hpp"
#include "hal_plugin_sdk/objects.hpp"

namespace hal::cuda {

class Device;
class Event;

// A failure of work the driver does not see fail: a collective the plugin
// aborted (collective/comm.cpp). Sticky, as SPEC §4.4 asks: the stream's
// synchronize and query report it from then on.
class StreamFault {
 public:
  void set(int64_t native_code, std::string detail) {
    std::lock_guard lock(mutex_);
    if (failed_) return;  // the first failure is the one to explain
    failed_ = true;
    native_code_ = native_code;
    detail_ = std::move(detail);
  }
  bool get(int64_t& native_code, std::string& detail) const {
    std::lock_guard lock(mutex_);
    native_code = native_code_;
    detail = detail_;
    return failed_;
  }

 private:
  mutable std::mutex mutex_;
  bool failed_ = false;      // guarded by mutex_
  int64_t native_code_ = 0;  // guarded by mutex_
  std::string detail_;       // guarded by mutex_
};

// cuStreamCreate(CU_STREAM_NON_BLOCKING).
class Stream : public plugin::DeviceResource<Device> {
 public:
  Stream(Device& device, CUstream stream) : DeviceResource(device), stream_(stream) {}
  ~Stream();  // synchronises, then destroys the CUstream

  CUstream get() const { return stream_; }
  // Shared with the collectives in flight on the stream.
  const std::shared_ptr<StreamFault>& fault() const { return fault_; }
  // HAL_ERROR_DEVICE_LOST with the fault's detail when a collective failed
  // on the stream, else HAL_SUCCESS.
  hal_result_t report_fault(const char* what) const;
  // copy and fill in memory.cpp, the others in stream.cpp.
  HAL_PLUGIN_STREAM_METHODS;

 private:
  // How CUDA sees a pointer of a copy or fill (memory.cpp).
  enum class Memory { kDevice, kPinned, kPageable };
  Memory classify(const void* pointer, CUresult& error) const;
  // A host function of the driver's that copies (value < 0) or fills.
  CUresult enqueue_host_copy(void* dst, const void* src, size_t size, int value);

  // The pinned buffer copies with pageable host memory are staged through,
  // made on the first such copy, freed with the stream.
  static constexpr size_t kStagingBytes = size_t{4} << 20;
  std::mutex staging_mutex_;  // one copy's chunks at a time use the buffer
  void* staging_ = nullptr;   // guarded by staging_mutex_

  // The thread HAL host functions run on, started by the first one.
  std::mutex host_functions_mutex_;
  std::unique_ptr<HostFunctions> host_functions_;  // guarded by host_functions_mutex_
  bool driver_thread_only_ = false;                // no cuStreamWaitValue32; guarded likewise

  CUstream stream_;
  std::shared_ptr<StreamFault> fault_ = std::make_shared<StreamFault>();
};

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_STREAM_HPP_
