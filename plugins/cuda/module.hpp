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

  Device& device() const { return device_; }
  CUmodule get() const { return module_; }
  const dialect::TranslatedModule* dialect() const { return dialect_.get(); }
  Kernel& add_kernel(std::unique_ptr<Kernel> kernel);

 private:
  Device& device_;
  CUmodule module_;
  std::unique_ptr<dialect::TranslatedModule> dialect_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

inline Module* to_module(hal_impl_module_t* module) {
  return reinterpret_cast<Module*>(module);
}
inline Kernel* to_kernel(hal_impl_kernel_t* kernel) {
  return reinterpret_cast<Kernel*>(kernel);
}

hal_result_t module_load(hal_impl_device_t* device, const hal_module_desc_t* desc,
                         hal_impl_module_t** out_module);
hal_result_t module_unload(hal_impl_module_t* module);
hal_result_t kernel_get(hal_impl_module_t* module, const hal_kernel_desc_t* desc,
                        hal_impl_kernel_t** out_kernel, hal_kernel_info_t* out_info);
hal_result_t launch_kernel(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                           const hal_launch_config_t* config, uint32_t arg_count,
                           const hal_kernel_arg_t* args);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_MODULE_HPP_
