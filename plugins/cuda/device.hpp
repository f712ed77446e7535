// The cuda plugin's context and devices. The context holds the driver (absent
// when libcuda.so.1 is missing or cuInit fails; then 0 devices and the reason
// in the load report), NVRTC, NCCL and cuBLASLt when present, and one Device
// per GPU. A device has its primary context, its properties read from the
// driver's attributes, its allocations (by kind, so mem_free calls the right
// free), and the streams, events and modules created on it, so device_close
// can finish and free whatever the application left behind.
#ifndef HAL_PLUGINS_CUDA_DEVICE_HPP_
#define HAL_PLUGINS_CUDA_DEVICE_HPP_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hal_plugin_sdk/allocations.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "collective/nccl.hpp"
#include "driver.hpp"
#include "nvrtc.hpp"
#include "ops/cublaslt.hpp"
#if HAL_CUDA_HAVE_CUDNN
#include "ops/cudnn.hpp"
#define HAL_CUDA_IF_CUDNN(...) __VA_ARGS__
#else
#define HAL_CUDA_IF_CUDNN(...)
#endif

namespace hal::cuda {

class Event;
class Module;
class Stream;

// The device's primary context made current on the calling thread for the
// scope's life, and the thread's previous context (often the CUDA runtime's,
// e.g. PyTorch's current device on the same thread) put back after: HAL never
// leaves its context current on a caller's thread. The context is bound only
// when it is not already current (cuCtxGetCurrent is a thread-local read).
class [[nodiscard]] ContextScope {
 public:
  // |result| is what getting the context gave (its retain, or the device's
  // sticky fatal error): the scope binds nothing unless it is CUDA_SUCCESS.
  ContextScope(const DriverApi& api, CUcontext context, CUresult result);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  bool ok() const { return result_ == CUDA_SUCCESS; }
  CUresult result() const { return result_; }

 private:
  const DriverApi& api_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
  CUresult result_;
};

// The errors after which the CUDA Driver API documents the context as
// unusable (CUresult: CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED,
// CUDA_ERROR_ILLEGAL_INSTRUCTION, ... "This leaves the process in an
// inconsistent state and any further CUDA work will return the same error").
// They are sticky: the device is lost (HAL_ERROR_DEVICE_LOST from then on).
bool is_fatal(CUresult code);

// Set while a HAL host function runs on the CUDA driver's thread (only where
// the device has no stream memory operations, stream.cpp): every entry called
// from it is refused with CUDA_ERROR_NOT_PERMITTED, as CUDA forbids CUDA calls
// there, instead of deadlocking or corrupting the driver.
bool on_driver_thread();
void set_on_driver_thread(bool value);

// What the devices report as their plugin (hal_device_properties_t).
inline constexpr char kPluginName[] = "cuda";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";
// CUDA allocations are at least this aligned (cuMemAlloc's documented 256).
inline constexpr size_t kNativeAlignment = 256;

// FP32 lanes per SM for a compute capability (NVIDIA's tables); 128 for
// architectures newer than the table.
uint32_t fp32_lanes_per_sm(int major, int minor);

class Device : public plugin::DeviceBase<Stream, Event, Module> {
 public:
  Device(const plugin::ErrorReporter& report, const Driver& driver, const Nvrtc* nvrtc,
         ops::CublasLtLoader& blas_loader, const collective::Nccl* nccl, CUdevice handle,
         uint32_t index HAL_CUDA_IF_CUDNN(, ops::CudnnLoader& dnn_loader));
  ~Device();

  const DriverApi& api() const { return driver_.api(); }
  const Nvrtc* nvrtc() const { return nvrtc_; }
  int driver_version() const { return driver_.version(); }  // 13000 for CUDA 13.0
  // NCCL, or null when the plugin found none (the loader's collectives serve).
  const collective::Nccl* nccl() const { return nccl_; }
  const hal_device_properties_t& properties() const { return properties_; }
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  // cuBLASLt on this device, opened at its first matmul plan (ops/).
  ops::DeviceBlas& blas() const { return *blas_; }
#if HAL_CUDA_HAVE_CUDNN
  // cuDNN on this device, opened at its first convolution plan (ops/).
  ops::DeviceDnn& dnn() const {
    return *dnn_;
  }
#endif

  // Makes the device's primary context current on the calling thread for the
  // scope's life (the table may be called from any thread), retaining it on
  // the device's first use; once the device is lost (is_fatal), the scope
  // fails with that error and binds nothing.
  ContextScope bind() const;
  // The fatal CUresult the device was lost to, or CUDA_SUCCESS.
  CUresult lost() const {
    return lost_.load(std::memory_order_acquire);
  }
  // report().fail() with |result|'s mapping, its code and its name; a fatal
  // |result| marks the device lost.
  hal_result_t fail(CUresult result, const char* what) const;
  // |detail|, when given, follows the CUresult's name ("; the JIT's error log: ...").
  hal_result_t fail(hal_result_t mapped, CUresult result, const char* what,
                    const std::string& detail = {}) const;
  // Runs |call(api())| with the device's context bound; a failure carries
  // the CUresult and |what|.
  template <class Call>
  hal_result_t run(const char* what, Call&& call) const {
    const ContextScope bound = bind();
    if (!bound.ok()) return fail(bound.result(), what);
    const CUresult result = call(api());
    return result == CUDA_SUCCESS ? HAL_SUCCESS : fail(result, what);
  }

  // synchronize (device.cpp), allocate and free (memory.cpp).
  HAL_PLUGIN_DEVICE_METHODS;

 private:
  void read_properties();
  // Retains the primary context on first use (cuDevicePrimaryCtxRetain).
  CUresult context(CUcontext& out) const;
  // What cuMemGetInfo says a context of this device can allocate (measured
  // at load, with the primary context retained for the measurement only).
  size_t allocatable_bytes(size_t total) const;
  CUresult release(hal_memory_kind_t kind, void* base) const;  // memory.cpp

  const Driver& driver_;
  const Nvrtc* nvrtc_;
  const collective::Nccl* nccl_;
  CUdevice handle_;
  mutable std::mutex context_mutex_;
  mutable std::atomic<CUcontext> context_{nullptr};  // retained on first use
  mutable std::atomic<CUresult> lost_{CUDA_SUCCESS};
  uint32_t index_;
  int cc_major_ = 0, cc_minor_ = 0;
  hal_device_properties_t properties_{};
  std::unique_ptr<ops::DeviceBlas> blas_;  // its handle is destroyed before the context
#if HAL_CUDA_HAVE_CUDNN
  std::unique_ptr<ops::DeviceDnn> dnn_;  // likewise
#endif
  plugin::Allocations allocations_{kNativeAlignment};
};

class Plugin : public plugin::PluginBase {
 public:
  // Opens the driver and finds the devices; logs a warning (the load
  // report's reason) and never fails when there are none.
  explicit Plugin(const hal_plugin_host_t* host);

  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  // Whether the plugin serves collectives itself (NCCL was found).
  bool has_collectives() const { return nccl_ != nullptr; }

 private:
  std::unique_ptr<Driver> driver_;
  std::unique_ptr<Nvrtc> nvrtc_;
  std::unique_ptr<const collective::Nccl> nccl_;  // opened at load, when there are GPUs
  // Opens nothing until the first matmul plan (SPEC §10.7, Operators).
  ops::CublasLtLoader blas_loader_;
#if HAL_CUDA_HAVE_CUDNN
  ops::CudnnLoader dnn_loader_;  // opens nothing until the first convolution plan
#endif
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed before the driver
};

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_DEVICE_HPP_
