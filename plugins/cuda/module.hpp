// Modules and kernels of the cuda plugin: PTX and cubin/fatbin loaded by the
// driver (cuModuleLoadData), and HAL dialect source compiled to PTX with
// NVRTC first. A kernel's signature comes from the dialect, or is declared.
#ifndef HAL_PLUGINS_CUDA_MODULE_HPP_
#define HAL_PLUGINS_CUDA_MODULE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver.hpp"
#include "hal_dialect/dialect.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/objects.hpp"

namespace hal::cuda {

class Device;
class Module;
class Stream;

class Kernel : public plugin::KernelInfo {
 public:
  Kernel(Module& module, CUfunction function, plugin::KernelInfo info)
      : KernelInfo(std::move(info)), module_(module), function_(function) {}

  Module& module() const { return module_; }
  CUfunction function() const { return function_; }
  // Raises the kernel's dynamic shared memory limit to |bytes| once (above
  // the default 48 KiB a launch needs the opt-in). Thread-safe.
  CUresult ensure_dynamic_shared(const DriverApi& api, uint32_t bytes);
  HAL_PLUGIN_KERNEL_METHODS;  // launch.cpp

 private:
  Module& module_;
  CUfunction function_;
  std::mutex mutex_;
  uint32_t dynamic_shared_limit_ = 48 * 1024;  // guarded by mutex_
};

// PTX or cubin (or HAL dialect source compiled to PTX by NVRTC), loaded by
// the driver. kernel_get binds the signature the dialect or the caller
// gives, checked against the entry's parameters where the driver tells them.
class Module : public plugin::DeviceResource<Device> {
 public:
  Module(Device& device, CUmodule module, std::unique_ptr<dialect::TranslatedModule> dialect)
      : DeviceResource(device), module_(module), dialect_(std::move(dialect)) {}
  ~Module();  // cuModuleUnload

  CUmodule get() const { return module_; }
  const dialect::TranslatedModule* dialect() const { return dialect_.get(); }
  HAL_PLUGIN_MODULE_METHODS;

 private:
  CUmodule module_;
  std::unique_ptr<dialect::TranslatedModule> dialect_;
  plugin::KernelList<Kernel> kernels_;
};

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_MODULE_HPP_
