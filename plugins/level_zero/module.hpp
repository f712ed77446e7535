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

#include "loader.hpp"

namespace hal::level_zero {

class Device;
class Module;
class Stream;

class Kernel {
 public:
  Kernel(Module& module, ze_kernel_handle_t kernel, std::string name,
         std::vector<hal_arg_type_t> arg_types, uint32_t max_threads, uint32_t static_shared,
         bool dynamic_shared)
      : module_(module),
        kernel_(kernel),
        name_(std::move(name)),
        arg_types_(std::move(arg_types)),
        max_threads_(max_threads),
        static_shared_(static_shared),
        dynamic_shared_(dynamic_shared) {}
  ~Kernel();  // zeKernelDestroy
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  Module& module() const { return module_; }
  ze_kernel_handle_t get() const { return kernel_; }
  const std::string& name() const { return name_; }
  const std::vector<hal_arg_type_t>& arg_types() const { return arg_types_; }
  uint32_t max_threads() const { return max_threads_; }
  uint32_t static_shared_bytes() const { return static_shared_; }
  // The entry takes one more parameter than the signature: a trailing
  // __local pointer sized per launch (the dynamic shared memory).
  bool dynamic_shared() const { return dynamic_shared_; }
  // launch.cpp: launch_kernel. Arguments and the group size are kernel
  // state in Level Zero, read at append: a launch holds launch_mutex_ from
  // the first zeKernelSet* to the append.
  hal_result_t launch(Stream& stream, const hal_launch_config_t& config, uint32_t arg_count,
                      const hal_kernel_arg_t* args);

 private:
  Module& module_;
  ze_kernel_handle_t kernel_;
  std::string name_;
  std::vector<hal_arg_type_t> arg_types_;
  uint32_t max_threads_;
  uint32_t static_shared_;
  bool dynamic_shared_;
  std::mutex launch_mutex_;
};

class Module {
 public:
  Module(Device& device, ze_module_handle_t module) : device_(device), module_(module) {}
  // module_load: a SPIR-V image, checked, then built by the driver.
  static hal_result_t load(Device& device, const hal_module_desc_t& desc, Module*& out_module);
  ~Module();  // its kernels, then zeModuleDestroy
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Device& device() const { return device_; }
  ze_module_handle_t get() const { return module_; }
  Kernel& add_kernel(std::unique_ptr<Kernel> kernel);
  // kernel_get: the signature is the caller's, its count checked against
  // the driver's.
  hal_result_t get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel,
                          hal_kernel_info_t* out_info);

 private:
  Device& device_;
  ze_module_handle_t module_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Kernel>> kernels_;  // guarded by mutex_
};

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_MODULE_HPP_
