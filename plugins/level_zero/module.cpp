// Modules and kernels of the level_zero plugin: SPIR-V built by the driver.
#include "module.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/module_image.hpp"
#include "hal_plugin_sdk/signature.hpp"
#include "spirv.hpp"

namespace hal::level_zero {
namespace {

// A build log longer than this is cut (the message stays readable).
constexpr size_t kMaxLogBytes = 8192;

// The driver's build log (empty when it has none), then the log is destroyed.
std::string take_build_log(const LoaderApi& ze, ze_module_build_log_handle_t log) {
  if (log == nullptr) return {};
  std::string text;
  size_t size = 0;
  if (ze.zeModuleBuildLogGetString(log, &size, nullptr) == ZE_RESULT_SUCCESS && size > 0) {
    std::string buffer(size, '\0');
    if (ze.zeModuleBuildLogGetString(log, &size, buffer.data()) == ZE_RESULT_SUCCESS) {
      buffer.resize(strnlen(buffer.c_str(), std::min(size, buffer.size())));
      text = std::move(buffer);
    }
  }
  ze.zeModuleBuildLogDestroy(log);
  if (text.size() > kMaxLogBytes) {
    text.resize(kMaxLogBytes);
    text += " [...]";
  }
  return text;
}

}  // namespace

Kernel::~Kernel() {
  module_.device().api().zeKernelDestroy(kernel_);
}

Module::~Module() {
  kernels_.clear();
  device().api().zeModuleDestroy(module_);
}

hal_result_t Module::load(Device& owner, const hal_module_desc_t& desc, Module*& out_module) {
  const plugin::ErrorReporter& report = owner.report();
  // The loader let through only HAL_MODULE_FORMAT_SPIRV (module_formats).
  std::string image;
  if (hal_result_t read = plugin::read_module_image(desc, report, image); read != HAL_SUCCESS)
    return read;
  if (std::string why; !check_spirv_image(image.data(), image.size(), why)) {
    return report.fail(HAL_ERROR_INVALID_MODULE, 0, "module_load: the SPIR-V image is invalid: %s",
                       why.c_str());
  }
  const LoaderApi& ze = owner.api();
  ze_module_desc_t module_desc{};
  module_desc.stype = ZE_STRUCTURE_TYPE_MODULE_DESC;
  module_desc.format = ZE_MODULE_FORMAT_IL_SPIRV;
  module_desc.inputSize = image.size();
  module_desc.pInputModule = reinterpret_cast<const uint8_t*>(image.data());
  module_desc.pBuildFlags = "";
  ze_module_handle_t loaded = nullptr;
  ze_module_build_log_handle_t log = nullptr;
  const ze_result_t result =
      ze.zeModuleCreate(owner.context(), owner.handle(), &module_desc, &loaded, &log);
  const std::string build_log = take_build_log(ze, log);
  if (result != ZE_RESULT_SUCCESS) {
    const hal_result_t mapped = result_of(result) == HAL_ERROR_OUT_OF_MEMORY
                                    ? HAL_ERROR_OUT_OF_MEMORY
                                    : HAL_ERROR_INVALID_MODULE;
    std::string message = "module_load: zeModuleCreate: " + ze_error_text(result);
    if (!build_log.empty()) message += "; build log: " + build_log;
    return report.fail_message(mapped, static_cast<int64_t>(result), message);
  }
  try {
    auto owned = std::make_unique<Module>(owner, loaded);
    loaded = nullptr;
    out_module = owner.add_module(std::move(owned));
  } catch (...) {
    if (loaded != nullptr) ze.zeModuleDestroy(loaded);
    throw;
  }
  return HAL_SUCCESS;
}

hal_result_t Module::get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel) {
  Device& owner = device();
  const plugin::ErrorReporter& report = owner.report();
  const std::string name = desc.name;
  if (desc.arg_types == nullptr) {
    return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                       "kernel_get: '%s' has no signature: SPIR-V carries none the plugin "
                       "reads, so declare arg_types",
                       name.c_str());
  }
  std::vector<hal_arg_type_t> types(desc.arg_types, desc.arg_types + desc.arg_count);
  const LoaderApi& ze = owner.api();
  ze_kernel_desc_t kernel_desc{};
  kernel_desc.stype = ZE_STRUCTURE_TYPE_KERNEL_DESC;
  kernel_desc.pKernelName = name.c_str();
  ze_kernel_handle_t created = nullptr;
  if (const ze_result_t result = ze.zeKernelCreate(module_, &kernel_desc, &created);
      result != ZE_RESULT_SUCCESS) {
    const std::string what = "kernel_get: zeKernelCreate('" + name + "')";
    return owner.fail(result, what.c_str());
  }
  // Owned from here: destroyed on every early return.
  std::unique_ptr<Kernel> kernel;
  auto destroy_created = [&] {
    if (kernel == nullptr && created != nullptr) ze.zeKernelDestroy(created);
  };
  ze_kernel_properties_t properties{};
  properties.stype = ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES;
  if (const ze_result_t result = ze.zeKernelGetProperties(created, &properties);
      result != ZE_RESULT_SUCCESS) {
    destroy_created();
    return owner.fail(result, "kernel_get: zeKernelGetProperties");
  }
  // A declared signature that disagrees with the entry would be undefined
  // behaviour on the device; one extra parameter is the dynamic __local.
  const uint32_t declared = static_cast<uint32_t>(types.size());
  if (properties.numKernelArgs != declared && properties.numKernelArgs != declared + 1) {
    destroy_created();
    const std::string signature = plugin::format_signature(types.data(), types.size());
    return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                       "kernel_get: '%s' takes %u parameters, the declared signature \"%s\" "
                       "has %u (or %u with a trailing __local for dynamic shared memory)",
                       name.c_str(), properties.numKernelArgs, signature.c_str(), declared,
                       declared + 1);
  }
  const bool dynamic_shared = properties.numKernelArgs == declared + 1;
  uint32_t limit = owner.properties().max_threads_per_block;
  const uint64_t required = uint64_t{properties.requiredGroupSizeX} *
                            properties.requiredGroupSizeY * properties.requiredGroupSizeZ;
  if (required > 0) limit = static_cast<uint32_t>(std::min<uint64_t>(limit, required));
  try {
    kernel = std::make_unique<Kernel>(
        *this, created, plugin::KernelInfo(name, std::move(types), limit, properties.localMemSize),
        dynamic_shared);
  } catch (...) {
    destroy_created();
    throw;
  }
  Kernel& added = kernels_.add(std::move(kernel));
  out_kernel = &added;
  return HAL_SUCCESS;
}

}  // namespace hal::level_zero
