// Modules and kernels of the level_zero plugin: SPIR-V images built by the
// driver (zeModuleCreate, ZE_MODULE_FORMAT_IL_SPIRV) after the plugin checked
// their header and size. SPIR-V carries no signature the plugin reads, so a
// kernel's signature is declared by the caller and its count checked against
// the driver's (zeKernelGetProperties).
#ifndef HAL_PLUGINS_LEVEL_ZERO_MODULE_HPP_
#define HAL_PLUGINS_LEVEL_ZERO_MODULE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "loader.hpp"

namespace hal::level_zero {

class Device;
class Module;
class Stream;

class Kernel : public plugin::KernelInfo {
 public:
  Kernel(Module& module, ze_kernel_handle_t kernel, plugin::KernelInfo info, bool dynamic_shared)
      : KernelInfo(std::move(info)),
        module_(module),
        kernel_(kernel),
        dynamic_shared_(dynamic_shared) {}
  ~Kernel();  // zeKernelDestroy
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  Module& module() const { return module_; }
  ze_kernel_handle_t get() const { return kernel_; }
  // The entry takes one more parameter than the signature: a trailing
  // __local pointer sized per launch (the dynamic shared memory).
  bool dynamic_shared() const { return dynamic_shared_; }
  // launch.cpp. Arguments and the group size are kernel state in Level Zero,
  // read at append: a launch holds launch_mutex_ from the first zeKernelSet*
  // to the append.
  HAL_PLUGIN_KERNEL_METHODS;

 private:
  Module& module_;
  ze_kernel_handle_t kernel_;
  bool dynamic_shared_;
  std::mutex launch_mutex_;
};

// A SPIR-V image built by the driver. kernel_get's signature is the
// caller's, its count checked against the driver's.
class Module : public plugin::DeviceResource<Device> {
 public:
  Module(Device& device, ze_module_handle_t module) : DeviceResource(device), module_(module) {}
  ~Module();  // its kernels, then zeModuleDestroy

  ze_module_handle_t get() const { return module_; }
  HAL_PLUGIN_MODULE_METHODS;

 private:
  ze_module_handle_t module_;
  plugin::KernelList<Kernel> kernels_;
};

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_MODULE_HPP_
