// Modules and kernels of the opencl plugin: OpenCL C source built with the
// platform's compiler, and HAL dialect source translated to OpenCL C first.
#ifndef HAL_PLUGINS_OPENCL_MODULE_HPP_
#define HAL_PLUGINS_OPENCL_MODULE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hal_dialect/dialect.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "opencl.hpp"

namespace hal::opencl {

class Device;
class Module;
class Stream;

class Kernel : public plugin::KernelInfo {
 public:
  Kernel(Module& module, ClKernel kernel, plugin::KernelInfo info, bool dynamic_shared)
      : KernelInfo(std::move(info)),
        module_(module),
        kernel_(std::move(kernel)),
        dynamic_shared_(dynamic_shared) {}

  Module& module() const { return module_; }
  cl_kernel kernel() const { return kernel_.get(); }
  // A dialect kernel using dynamic_shared(T) takes a hidden trailing __local argument.
  bool dynamic_shared() const { return dynamic_shared_; }
  HAL_PLUGIN_KERNEL_METHODS;  // launch.cpp

 private:
  Module& module_;
  ClKernel kernel_;
  bool dynamic_shared_;
  std::mutex launch_mutex_;  // clSetKernelArg + enqueue must not interleave between threads
};

// |dialect| holds the kernel records when the source was the HAL dialect.
class Module : public plugin::DeviceResource<Device> {
 public:
  Module(Device& device, ClProgram program, std::unique_ptr<dialect::TranslatedModule> dialect)
      : DeviceResource(device), program_(std::move(program)), dialect_(std::move(dialect)) {}

  cl_program program() const { return program_.get(); }
  const dialect::TranslatedModule* dialect() const { return dialect_.get(); }
  HAL_PLUGIN_MODULE_METHODS;

 private:
  ClProgram program_;
  std::unique_ptr<dialect::TranslatedModule> dialect_;
  plugin::KernelList<Kernel> kernels_;
};

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_MODULE_HPP_
