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
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "image.hpp"
#include "runtime.hpp"

namespace hal::hip {

class Device;
class Module;
class Stream;

class Kernel : public plugin::KernelInfo {
 public:
  Kernel(Module& module, hipFunction_t function, plugin::KernelInfo info)
      : KernelInfo(std::move(info)), module_(module), function_(function) {}

  Module& module() const { return module_; }
  hipFunction_t function() const { return function_; }
  HAL_PLUGIN_KERNEL_METHODS;  // launch.cpp

 private:
  Module& module_;
  hipFunction_t function_;
};

// A code object (or HAL dialect source compiled to one by hiprtc), checked,
// then loaded by the runtime. kernel_get binds the signature the dialect or
// the caller gives, checked against the code object's argument sizes.
class Module : public plugin::DeviceResource<Device> {
 public:
  Module(Device& device, hipModule_t module, std::unique_ptr<dialect::TranslatedModule> dialect,
         std::vector<KernelMetadata> metadata)
      : DeviceResource(device),
        module_(module),
        dialect_(std::move(dialect)),
        metadata_(std::move(metadata)) {}
  ~Module();  // hipModuleUnload

  hipModule_t get() const { return module_; }
  const dialect::TranslatedModule* dialect() const { return dialect_.get(); }
  // The code object's record of |name|; null when the metadata lacks it.
  const KernelMetadata* metadata(const std::string& name) const;
  HAL_PLUGIN_MODULE_METHODS;

 private:
  hipModule_t module_;
  std::unique_ptr<dialect::TranslatedModule> dialect_;
  std::vector<KernelMetadata> metadata_;  // immutable after construction
  plugin::KernelList<Kernel> kernels_;
};

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_MODULE_HPP_
