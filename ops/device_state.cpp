#include "hal_ops/device_state.hpp"

namespace hal::ops {

namespace {
std::string last_error_message(const char* call) {
  return std::string(call) + ": " + hal_error_last_message();
}
}  // namespace

hal_result_t DeviceState::kernel(std::string_view source_name, std::string_view source,
                                 const char* name, hal_kernel_t* out_kernel, std::string* message) {
  std::lock_guard lock(mutex_);
  auto found = modules_.find(source_name);
  if (found == modules_.end()) {
    Module entry;
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
    desc.data = source.data();
    desc.size = source.size();
    const hal_result_t loaded = hal_module_load(device_, &desc, &entry.module);
    if (loaded != HAL_SUCCESS) {
      entry.failure = last_error_message("hal_module_load");
      entry.failure_result = loaded;
      entry.module = nullptr;
    }
    found = modules_.emplace(std::string(source_name), std::move(entry)).first;
  }
  Module& module = found->second;
  if (module.module == nullptr) {
    *message = "the portable module '" + std::string(source_name) +
               "' does not compile on this device: " + module.failure;
    return module.failure_result;
  }
  if (auto kernel = module.kernels.find(name); kernel != module.kernels.end()) {
    *out_kernel = kernel->second;
    return HAL_SUCCESS;
  }
  hal_kernel_desc_t kernel_desc{};
  kernel_desc.struct_size = sizeof(kernel_desc);
  kernel_desc.name = name;
  hal_kernel_t kernel = nullptr;
  if (hal_result_t result = hal_kernel_get(module.module, &kernel_desc, &kernel);
      result != HAL_SUCCESS) {
    *message = last_error_message("hal_kernel_get");
    return result;
  }
  module.kernels.emplace(name, kernel);
  *out_kernel = kernel;
  return HAL_SUCCESS;
}

}  // namespace hal::ops
