#include "module.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hal_plugin_sdk/kernel_signature.hpp"
#include "device.hpp"
#include "dialect_cache.hpp"
#include "hiprtc.hpp"
#include "stream.hpp"
#include "hal_util/secure_file.hpp"

namespace hal::hip {
namespace {

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

// Checks |types| against the kernel's explicit arguments as its code
// object's metadata lists them: a wrong declared signature would be
// undefined behaviour on the device. Empty when they agree.
std::string signature_disagreement(const KernelMetadata& kernel,
                                   const std::vector<hal_arg_type_t>& types) {
  const std::vector<size_t> sizes(kernel.arg_sizes.begin(), kernel.arg_sizes.end());
  return plugin::signature_size_disagreement(
      sizes, types, {"the code object's kernel", "argument", "the kernel"});
}

}  // namespace

Module::~Module() {
  kernels_.clear();
  if (device_.bind() == hipSuccess) (void)device_.api().hipModuleUnload(module_);
}

const KernelMetadata* Module::metadata(const std::string& name) const {
  for (const KernelMetadata& kernel : metadata_) {
    if (kernel.name == name) return &kernel;
  }
  return nullptr;
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
    // The loader let through only the formats in the device's module_formats
    // (HAL_MODULE_FORMAT_HAL_DIALECT is there only with hiprtc).
    const hal_module_format_t format = desc->format;
    std::string image;
    if (hal_result_t read = read_image(*desc, report, image); read != HAL_SUCCESS) return read;
    std::unique_ptr<dialect::TranslatedModule> translated;
    if (format == HAL_MODULE_FORMAT_HAL_DIALECT) {
      const Hiprtc& hiprtc = *owner.hiprtc();  // the format bit is set only with hiprtc
      auto compiled = std::make_unique<CompiledDialect>();
      std::string message;
      image.resize(strnlen(image.c_str(), image.size()));
      const auto log = [&](hal_log_level_t level, const std::string& line) {
        report.log(level, "%s", line.c_str());
      };
      CacheOutcome outcome;
      if (compile_dialect_cached(hiprtc, image, owner.arch(), log, *compiled, outcome, message) !=
          DialectStatus::kOk) {
        return report.fail_message(HAL_ERROR_INVALID_MODULE, 0, "module_load: " + message);
      }
      image = std::move(compiled->code);
      translated = std::make_unique<dialect::TranslatedModule>(std::move(compiled->translated));
    }
    // hipModuleLoadData takes no size: every image (hiprtc's too) is checked
    // to lie within its bytes before the runtime reads it.
    std::vector<KernelMetadata> metadata;
    std::string why;
    if (!check_code_object(image.data(), image.size(), why)) {
      return report.fail(HAL_ERROR_INVALID_MODULE, 0, "module_load: the code object is invalid: %s",
                         why.c_str());
    }
    // Without metadata (a code object v2 image) signatures stay unchecked.
    if (!read_kernel_metadata(image.data(), image.size(), metadata, why)) metadata.clear();
    if (const hipError_t bound = owner.bind(); bound != hipSuccess) {
      return owner.fail(bound, "module_load");
    }
    hipModule_t loaded = nullptr;
    const hipError_t result = owner.api().hipModuleLoadData(&loaded, image.data());
    if (result != hipSuccess) {
      return owner.fail(result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY
                                                                     : HAL_ERROR_INVALID_MODULE,
                        result, "module_load: hipModuleLoadData");
    }
    std::unique_ptr<Module> owned;
    try {
      owned = std::make_unique<Module>(owner, loaded, std::move(translated), std::move(metadata));
    } catch (...) {
      (void)owner.api().hipModuleUnload(loaded);
      throw;
    }
    *out_module = reinterpret_cast<hal_impl_module_t*>(owner.add_module(std::move(owned)));
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
    const dialect::KernelRecord* record = nullptr;
    std::vector<hal_arg_type_t> types;
    if (const hal_result_t resolved = plugin::resolve_kernel_signature(
            report, self.dialect(), *desc,
            "a code object gives only argument sizes, not types, so declare arg_types", record,
            types);
        resolved != HAL_SUCCESS) {
      return resolved;
    }
    if (const hipError_t bound = owner.bind(); bound != hipSuccess) {
      return owner.fail(bound, "kernel_get");
    }
    const RuntimeApi& hip = owner.api();
    hipFunction_t function = nullptr;
    if (const hipError_t result = hip.hipModuleGetFunction(&function, self.get(), name.c_str());
        result != hipSuccess) {
      const std::string what = "kernel_get: hipModuleGetFunction('" + name + "')";
      return owner.fail(result == hipErrorNotFound ? HAL_ERROR_NOT_FOUND : result_of(result),
                        result, what.c_str());
    }
    const KernelMetadata* metadata = self.metadata(name);
    if (metadata != nullptr) {
      if (const std::string why = signature_disagreement(*metadata, types); !why.empty()) {
        return report.fail_message(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                                   "kernel_get: '" + name + "': " + why);
      }
    }
    int max_threads = 0;
    int static_shared = 0;
    if (hip.hipFuncGetAttribute(&max_threads, HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function) !=
        hipSuccess) {
      max_threads = 0;
    }
    if (hip.hipFuncGetAttribute(&static_shared, HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function) !=
        hipSuccess) {
      static_shared = 0;
    }
    uint32_t limit = owner.properties().max_threads_per_block;
    if (max_threads > 0) limit = std::min(limit, static_cast<uint32_t>(max_threads));
    if (metadata != nullptr && metadata->max_flat_workgroup_size != 0) {
      limit = std::min(limit, metadata->max_flat_workgroup_size);
    }
    if (record != nullptr && record->max_threads_per_block != 0) {
      limit = std::min(limit, record->max_threads_per_block);
    }
    const uint32_t shared = record != nullptr ? record->static_shared_bytes
                                              : static_cast<uint32_t>(std::max(static_shared, 0));
    Kernel& added = self.add_kernel(
        std::make_unique<Kernel>(self, function, name, std::move(types), limit, shared));
    *out_kernel = reinterpret_cast<hal_impl_kernel_t*>(&added);
    plugin::write_kernel_info(added.name(), added.arg_types(), added.max_threads(),
                              added.static_shared_bytes(), out_info);
    return HAL_SUCCESS;
  });
}

hal_result_t launch_kernel(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                           const hal_launch_config_t* config, uint32_t arg_count,
                           const hal_kernel_arg_t* args) {
  Stream& target = *to_stream(stream);
  Kernel& entry = *to_kernel(kernel);
  Device& device = target.device();
  const plugin::ErrorReporter& report = device.report();
  return plugin::guarded(report, "launch_kernel", [&] {
    // The loader checked the shape, the shared memory and the arguments
    // against this kernel (SPEC 10.3); the plugin trusts them.
    if (const hipError_t bound = device.bind(); bound != hipSuccess) {
      return device.fail(bound, "launch_kernel");
    }
    // kernelParams: one pointer per argument to its value; the loader has
    // checked each size against the signature, and hipModuleLaunchKernel
    // copies the values into the kernarg segment before it returns.
    void* params[HAL_MAX_KERNEL_ARGS] = {};
    for (uint32_t i = 0; i < arg_count; ++i) params[i] = const_cast<void*>(args[i].value);
    const hipError_t result = device.api().hipModuleLaunchKernel(
        entry.function(), config->grid[0], config->grid[1], config->grid[2], config->block[0],
        config->block[1], config->block[2], config->shared_memory_bytes, target.get(),
        arg_count > 0 ? params : nullptr, nullptr);
    if (result != hipSuccess) {
      const std::string what = "launch_kernel: hipModuleLaunchKernel('" + entry.name() + "')";
      const hal_result_t mapped =
          result == hipErrorInvalidValue ? HAL_ERROR_INVALID_LAUNCH : result_of(result);
      return device.fail(mapped, result, what.c_str());
    }
    return HAL_SUCCESS;
  });
}

}  // namespace hal::hip
