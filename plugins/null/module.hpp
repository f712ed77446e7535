// The null plugin's modules and kernels: not implemented. The device declares
// no HAL_DEVICE_CAP_KERNELS and no module format, so the loader refuses module
// loads before they reach Module::load; the methods are here to be filled in.
#ifndef HAL_PLUGINS_NULL_MODULE_HPP_
#define HAL_PLUGINS_NULL_MODULE_HPP_

#include <cstdint>

#include "device.hpp"

namespace hal::null_plugin {

// TODO(null): a kernel of a module: the device's entry point, the signature
// it is bound to (hal_plugin_sdk/kernel_signature.hpp), its launch limits.
class Kernel {
 public:
  // launch.cpp: launch_kernel
  hal_result_t launch(Stream& stream, const hal_launch_config_t& config, uint32_t arg_count,
                      const hal_kernel_arg_t* args);
};

// TODO(null): the device's code, loaded, with the kernels taken from it.
class Module {
 public:
  explicit Module(Device& device) : device_(device) {}
  // module_load
  static hal_result_t load(Device& device, const hal_module_desc_t& desc, Module*& out_module);

  Device& device() const { return device_; }
  // kernel_get
  hal_result_t get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel,
                          hal_kernel_info_t* out_info);

 private:
  Device& device_;
};

}  // namespace hal::null_plugin

#endif  // HAL_PLUGINS_NULL_MODULE_HPP_
