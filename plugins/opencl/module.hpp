// Modules and kernels of the opencl plugin: OpenCL C source built with the
// platform's compiler, and HAL dialect source translated to OpenCL C first.
#ifndef HAL_PLUGINS_OPENCL_MODULE_HPP_
#define HAL_PLUGINS_OPENCL_MODULE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hal_dialect/dialect.hpp"
#include "opencl.hpp"

namespace hal::opencl {

class Device;
class Module;
class Stream;

class Kernel {
 public:
  Kernel(Module& module, ClKernel kernel, std::string name, std::vector<hal_arg_type_t> arg_types,
         uint32_t max_threads, uint32_t static_shared_bytes, bool dynamic_shared)
      : module_(module),
        kernel_(std::move(kernel)),
        name_(std::move(name)),
        arg_types_(std::move(arg_types)),
        max_threads_(max_threads),
        static_shared_bytes_(static_shared_bytes),
        dynamic_shared_(dynamic_shared) {}

  Module& module() const { return module_; }
  cl_kernel kernel() const { return kernel_.get(); }
  const std::string& name() const { return name_; }
  const std::vector<hal_arg_type_t>& arg_types() const { return arg_types_; }
  uint32_t max_threads() const { return max_threads_; }
  uint32_t static_shared_bytes() const { return static_shared_bytes_; }
  // A dialect kernel using dynamic_shared(T) takes a hidden trailing __local argument.
  bool dynamic_shared() const { return dynamic_shared_; }
  // clSetKernelArg + enqueue must not interleave between threads.
  std::mutex& launch_mutex() { return launch_mutex_; }

  // launch.cpp: launch_kernel
  hal_result_t launch(Stream& stream, const hal_launch_config_t& config, uint32_t arg_count,
                      const hal_kernel_arg_t* args);

 private:
  Module& module_;
  ClKernel kernel_;
  std::string name_;
  std::vector<hal_arg_type_t> arg_types_;
  uint32_t max_threads_;
  uint32_t static_shared_bytes_;
  bool dynamic_shared_;
  std::mutex launch_mutex_;
};

class Module {
 public:
  // |dialect| holds the kernel records when the source was the HAL dialect.
  Module(Device& device, ClProgram program, std::unique_ptr<dialect::TranslatedModule> dialect)
      : device_(device), program_(std::move(program)), dialect_(std::move(dialect)) {}
  // module_load: OpenCL C, or HAL dialect source translated to it, built by
  // the platform's compiler.
  static hal_result_t load(Device& device, const hal_module_desc_t& desc, Module*& out_module);

  Device& device() const { return device_; }
  cl_program program() const { return program_.get(); }
  const dialect::TranslatedModule* dialect() const { return dialect_.get(); }
  Kernel& add_kernel(std::unique_ptr<Kernel> kernel);
  // kernel_get
  hal_result_t get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel,
                          hal_kernel_info_t* out_info);

 private:
  Device& device_;
  ClProgram program_;
  std::unique_ptr<dialect::TranslatedModule> dialect_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_MODULE_HPP_
