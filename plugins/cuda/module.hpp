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

namespace hal::cuda {

class Device;
class Module;
class Stream;

class Kernel {
 public:
  Kernel(Module& module, CUfunction function, std::string name,
         std::vector<hal_arg_type_t> arg_types, uint32_t max_threads, uint32_t static_shared)
      : module_(module),
        function_(function),
        name_(std::move(name)),
        arg_types_(std::move(arg_types)),
        max_threads_(max_threads),
        static_shared_(static_shared) {}

  Module& module() const { return module_; }
  CUfunction function() const { return function_; }
  const std::string& name() const { return name_; }
  const std::vector<hal_arg_type_t>& arg_types() const { return arg_types_; }
  uint32_t max_threads() const { return max_threads_; }
  uint32_t static_shared_bytes() const { return static_shared_; }
  // Raises the kernel's dynamic shared memory limit to |bytes| once (above
  // the default 48 KiB a launch needs the opt-in). Thread-safe.
  CUresult ensure_dynamic_shared(const DriverApi& api, uint32_t bytes);

  // launch.cpp: launch_kernel
  hal_result_t launch(Stream& stream, const hal_launch_config_t& config, uint32_t arg_count,
                      const hal_kernel_arg_t* args);

 private:
  Module& module_;
  CUfunction function_;
  std::string name_;
  std::vector<hal_arg_type_t> arg_types_;
  uint32_t max_threads_;
  uint32_t static_shared_;
  std::mutex mutex_;
  uint32_t dynamic_shared_limit_ = 48 * 1024;  // guarded by mutex_
};

class Module {
 public:
  Module(Device& device, CUmodule module, std::unique_ptr<dialect::TranslatedModule> dialect)
      : device_(device), module_(module), dialect_(std::move(dialect)) {}
  ~Module();  // cuModuleUnload
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  // module_load: PTX or cubin, or HAL dialect source compiled to PTX by
  // NVRTC, loaded by the driver.
  static hal_result_t load(Device& device, const hal_module_desc_t& desc, Module*& out_module);

  Device& device() const { return device_; }
  CUmodule get() const { return module_; }
  const dialect::TranslatedModule* dialect() const { return dialect_.get(); }
  Kernel& add_kernel(std::unique_ptr<Kernel> kernel);
  // kernel_get: the signature the dialect or the caller gives, checked
  // against the entry's parameters where the driver tells them.
  hal_result_t get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel,
                          hal_kernel_info_t* out_info);

 private:
  Device& device_;
  CUmodule module_;
  std::unique_ptr<dialect::TranslatedModule> dialect_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_MODULE_HPP_
