#include "module.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hal_plugin_sdk/signature.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"
#include "device.hpp"
#include "spirv.hpp"
#include "stream.hpp"
#include "hal_util/secure_file.hpp"

namespace hal::level_zero {
namespace {

// A build log longer than this is cut (the message stays readable).
constexpr size_t kMaxLogBytes = 8192;

hal_result_t read_image(const hal_module_desc_t& desc, const plugin::ErrorReporter& report,
                        std::string& out) {
  if (desc.data != nullptr) {
    out.assign(static_cast<const char*>(desc.data), desc.size);
    return HAL_SUCCESS;
  }
  // hal_util's rule for a file at a path a user gave: a regular file, opened
  // without blocking (a FIFO never hangs the load), at most 1 GiB.
  std::vector<unsigned char> bytes;
  int error = 0;
  std::string why;
  if (!hal::util::read_regular_file(AT_FDCWD, desc.path, hal::util::ReadRule{}, bytes, error,
                                    why)) {
    return report.fail(error == ENOENT ? HAL_ERROR_NOT_FOUND : HAL_ERROR_INVALID_MODULE, error,
                       "module_load: cannot read '%s': %s", desc.path, why.c_str());
  }
  out.assign(bytes.begin(), bytes.end());
  return HAL_SUCCESS;
}

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
  device_.api().zeModuleDestroy(module_);
}

Kernel& Module::add_kernel(std::unique_ptr<Kernel> kernel) {
  std::lock_guard lock(mutex_);
  kernels_.push_back(std::move(kernel));
  return *kernels_.back();
}

hal_result_t module_load(hal_impl_device_t* device, const hal_module_desc_t* desc,
                         hal_impl_module_t** out_module) {
  Device& owner = *to_device(device);
  const plugin::ErrorReporter& report = owner.report();
  return plugin::guarded(report, "module_load", [&] {
    // The loader let through only HAL_MODULE_FORMAT_SPIRV (module_formats).
    std::string image;
    if (hal_result_t read = read_image(*desc, report, image); read != HAL_SUCCESS) return read;
    if (std::string why; !check_spirv_image(image.data(), image.size(), why)) {
      return report.fail(HAL_ERROR_INVALID_MODULE, 0,
                         "module_load: the SPIR-V image is invalid: %s", why.c_str());
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
      *out_module = reinterpret_cast<hal_impl_module_t*>(owner.add_module(std::move(owned)));
    } catch (...) {
      if (loaded != nullptr) ze.zeModuleDestroy(loaded);
      throw;
    }
    return HAL_SUCCESS;
  });
}

hal_result_t module_unload(hal_impl_module_t* module) {
  Module& self = *to_module(module);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "module_unload", [&] {
    owner.remove_module(&self);  // the loader synchronised the device first
    return HAL_SUCCESS;
  });
}

hal_result_t kernel_get(hal_impl_module_t* module, const hal_kernel_desc_t* desc,
                        hal_impl_kernel_t** out_kernel, hal_kernel_info_t* out_info) {
  Module& self = *to_module(module);
  Device& owner = self.device();
  const plugin::ErrorReporter& report = owner.report();
  return plugin::guarded(report, "kernel_get", [&] {
    const std::string name = desc->name;
    if (desc->arg_types == nullptr) {
      return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                         "kernel_get: '%s' has no signature: SPIR-V carries none the plugin "
                         "reads, so declare arg_types",
                         name.c_str());
    }
    std::vector<hal_arg_type_t> types(desc->arg_types, desc->arg_types + desc->arg_count);
    const LoaderApi& ze = owner.api();
    ze_kernel_desc_t kernel_desc{};
    kernel_desc.stype = ZE_STRUCTURE_TYPE_KERNEL_DESC;
    kernel_desc.pKernelName = name.c_str();
    ze_kernel_handle_t created = nullptr;
    if (const ze_result_t result = ze.zeKernelCreate(self.get(), &kernel_desc, &created);
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
      kernel = std::make_unique<Kernel>(self, created, name, std::move(types), limit,
                                        properties.localMemSize, dynamic_shared);
    } catch (...) {
      destroy_created();
      throw;
    }
    Kernel& added = self.add_kernel(std::move(kernel));
    *out_kernel = reinterpret_cast<hal_impl_kernel_t*>(&added);
    if (out_info != nullptr) {
      hal_kernel_info_t info{};
      info.name = added.name().c_str();
      info.arg_count = static_cast<uint32_t>(added.arg_types().size());
      for (uint32_t i = 0; i < info.arg_count; ++i) info.arg_types[i] = added.arg_types()[i];
      info.max_threads_per_block = added.max_threads();
      info.static_shared_memory_bytes = added.static_shared_bytes();
      plugin::write_versioned_struct(info, out_info);
    }
    return HAL_SUCCESS;
  });
}

hal_result_t launch_kernel(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                           const hal_launch_config_t* config, uint32_t arg_count,
                           const hal_kernel_arg_t* args) {
  Stream& target = *to_stream(stream);
  Kernel& entry = *to_kernel(kernel);
  const Device& device = target.device();
  const plugin::ErrorReporter& report = device.report();
  return plugin::guarded(report, "launch_kernel", [&] {
    // The loader checked the shape, the shared memory and the arguments
    // against this kernel (SPEC 10.3); the plugin trusts them.
    const LoaderApi& ze = device.api();
    std::lock_guard lock(entry.launch_mutex());
    if (const ze_result_t result = ze.zeKernelSetGroupSize(entry.get(), config->block[0],
                                                           config->block[1], config->block[2]);
        result != ZE_RESULT_SUCCESS) {
      return device.fail(HAL_ERROR_INVALID_LAUNCH, result, "launch_kernel: zeKernelSetGroupSize");
    }
    // The value of each argument (a pointer argument's value is the pointer);
    // the driver copies it at the call.
    for (uint32_t i = 0; i < arg_count; ++i) {
      if (const ze_result_t result =
              ze.zeKernelSetArgumentValue(entry.get(), i, args[i].size, args[i].value);
          result != ZE_RESULT_SUCCESS) {
        return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, static_cast<int64_t>(result),
                           "launch_kernel: argument %u of '%s' was refused: %s", i,
                           entry.name().c_str(), ze_error_text(result).c_str());
      }
    }
    if (entry.dynamic_shared()) {
      // A __local argument: a size and no value; Level Zero refuses size 0.
      const size_t bytes = std::max<size_t>(config->shared_memory_bytes, 1);
      if (const ze_result_t result =
              ze.zeKernelSetArgumentValue(entry.get(), arg_count, bytes, nullptr);
          result != ZE_RESULT_SUCCESS) {
        return report.fail(HAL_ERROR_INVALID_LAUNCH, static_cast<int64_t>(result),
                           "launch_kernel: dynamic shared memory of %u bytes was refused: %s",
                           config->shared_memory_bytes, ze_error_text(result).c_str());
      }
    }
    const ze_group_count_t groups = {config->grid[0], config->grid[1], config->grid[2]};
    const ze_result_t result = target.append([&](ze_command_list_handle_t list) {
      return ze.zeCommandListAppendLaunchKernel(list, entry.get(), &groups, nullptr, 0, nullptr);
    });
    if (result != ZE_RESULT_SUCCESS) {
      const std::string what =
          "launch_kernel: zeCommandListAppendLaunchKernel('" + entry.name() + "')";
      return device.fail(
          result_of(result) == HAL_ERROR_INTERNAL ? HAL_ERROR_INVALID_LAUNCH : result_of(result),
          result, what.c_str());
    }
    return HAL_SUCCESS;
  });
}

}  // namespace hal::level_zero
