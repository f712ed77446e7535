// Modules and kernels of the hip plugin: AMD GPU code objects (HSACO, or an
// offload bundle of them) loaded by the runtime (hipModuleLoadData), and HAL
// dialect source compiled to a code object with hiprtc first. A kernel's
// signature comes from the dialect, or is declared; either is checked
// against the argument sizes in the code object's metadata.
#ifndef HAL_PLUGINS_HIP_MODULE_HPP_
#define HAL_PLUGINS_HIP_MODULE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hal_dialect/dialect.hpp"
#include "image.hpp"
#include "runtime.hpp"

namespace hal::hip {

class Device;
class Module;
class Stream;

class Kernel {
 public:
  Kernel(Module& module, hipFunction_t function, std::string name,
         std::vector<hal_arg_type_t> arg_types, uint32_t max_threads, uint32_t static_shared)
      : module_(module),
        function_(function),
        name_(std::move(name)),
        arg_types_(std::move(arg_types)),
        max_threads_(max_threads),
        static_shared_(static_shared) {}

  Module& module() const { return module_; }
  hipFunction_t function() const { return function_; }
  const std::string& name() const { return name_; }
  const std::vector<hal_arg_type_t>& arg_types() const { return arg_types_; }
  uint32_t max_threads() const { return max_threads_; }
  uint32_t static_shared_bytes() const { return static_shared_; }

  // launch.cpp: launch_kernel
  hal_result_t launch(Stream& stream, const hal_launch_config_t& config, uint32_t arg_count,
                      const hal_kernel_arg_t* args);

 private:
  Module& module_;
  hipFunction_t function_;
  std::string name_;
  std::vector<hal_arg_type_t> arg_types_;
  uint32_t max_threads_;
  uint32_t static_shared_;
};

class Module {
 public:
  Module(Device& device, hipModule_t module, std::unique_ptr<dialect::TranslatedModule> dialect,
         std::vector<KernelMetadata> metadata)
      : device_(device),
        module_(module),
        dialect_(std::move(dialect)),
        metadata_(std::move(metadata)) {}
  ~Module();  // hipModuleUnload
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  // module_load: a code object, or HAL dialect source compiled to one by
  // hiprtc, checked, then loaded by the runtime.
  static hal_result_t load(Device& device, const hal_module_desc_t& desc, Module*& out_module);

  Device& device() const { return device_; }
  hipModule_t get() const { return module_; }
  const dialect::TranslatedModule* dialect() const { return dialect_.get(); }
  // The code object's record of |name|; null when the metadata lacks it.
  const KernelMetadata* metadata(const std::string& name) const;
  Kernel& add_kernel(std::unique_ptr<Kernel> kernel);
  // kernel_get: the signature the dialect or the caller gives, checked
  // against the code object's argument sizes.
  hal_result_t get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel,
                          hal_kernel_info_t* out_info);

 private:
  Device& device_;
  hipModule_t module_;
  std::unique_ptr<dialect::TranslatedModule> dialect_;
  std::vector<KernelMetadata> metadata_;  // immutable after construction
  std::mutex mutex_;                      // guards kernels_
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_MODULE_HPP_
