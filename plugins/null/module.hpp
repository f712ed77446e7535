// The null plugin's modules and kernels: not implemented. The device declares
// no HAL_DEVICE_CAP_KERNELS and no module format, so the loader refuses module
// loads before they reach Module::load; the methods are here to be filled in.
#ifndef HAL_PLUGINS_NULL_MODULE_HPP_
#define HAL_PLUGINS_NULL_MODULE_HPP_

#include <cstdint>

#include "device.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"

namespace hal::null_plugin {

// A kernel of a module: what kernel_get reports (KernelInfo: its name, the
// signature it is bound to, its launch limits). TODO(null): the device's
// entry point, for launch.
class Kernel : public plugin::KernelInfo {
 public:
  using KernelInfo::KernelInfo;
  HAL_PLUGIN_KERNEL_METHODS;  // launch.cpp
};

// TODO(null): the device's code, loaded, with the kernels taken from it.
class Module : public plugin::DeviceResource<Device> {
 public:
  explicit Module(Device& device) : DeviceResource(device) {}
  HAL_PLUGIN_MODULE_METHODS;
};

}  // namespace hal::null_plugin

#endif  // HAL_PLUGINS_NULL_MODULE_HPP_
