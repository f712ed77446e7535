// Modules and kernels of the hip plugin: AMD GPU code objects, and HAL
// dialect source compiled to one by hiprtc.
#include "module.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/module_image.hpp"
#include "device.hpp"
#include "dialect_cache.hpp"
#include "hiprtc.hpp"

namespace hal::hip {
namespace {

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
  if (device().bind() == hipSuccess) (void)device().api().hipModuleUnload(module_);
}

const KernelMetadata* Module::metadata(const std::string& name) const {
  for (const KernelMetadata& kernel : metadata_) {
    if (kernel.name == name) return &kernel;
  }
  return nullptr;
}

hal_result_t Module::load(Device& owner, const hal_module_desc_t& desc, Module*& out_module) {
  const plugin::ErrorReporter& report = owner.report();
  // The loader let through only the formats in the device's module_formats
  // (HAL_MODULE_FORMAT_HAL_DIALECT is there only with hiprtc).
  const hal_module_format_t format = desc.format;
  std::string image;
  if (hal_result_t read = plugin::read_module_image(desc, report, image); read != HAL_SUCCESS)
    return read;
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
  if (const HipStatus bound = owner.bind(); bound != hipSuccess) {
    return owner.fail(bound, "module_load");
  }
  hipModule_t loaded = nullptr;
  const HipStatus result = owner.api().hipModuleLoadData(&loaded, image.data());
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
  out_module = owner.add_module(std::move(owned));
  return HAL_SUCCESS;
}

hal_result_t Module::get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel) {
  Device& owner = device();
  const plugin::ErrorReporter& report = owner.report();
  const std::string name = desc.name;
  const dialect::KernelRecord* record = nullptr;
  std::vector<hal_arg_type_t> types;
  if (const hal_result_t resolved = plugin::resolve_kernel_signature(
          report, dialect(), desc,
          "a code object gives only argument sizes, not types, so declare arg_types", record,
          types);
      resolved != HAL_SUCCESS) {
    return resolved;
  }
  if (const HipStatus bound = owner.bind(); bound != hipSuccess) {
    return owner.fail(bound, "kernel_get");
  }
  const RuntimeApi& hip = owner.api();
  hipFunction_t function = nullptr;
  if (const HipStatus result = hip.hipModuleGetFunction(&function, module_, name.c_str());
      result != hipSuccess) {
    const std::string what = "kernel_get: hipModuleGetFunction('" + name + "')";
    return owner.fail(result == hipErrorNotFound ? HAL_ERROR_NOT_FOUND : result_of(result), result,
                      what.c_str());
  }
  const KernelMetadata* entry_metadata = metadata(name);
  if (entry_metadata != nullptr) {
    if (const std::string why = signature_disagreement(*entry_metadata, types); !why.empty()) {
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
  if (entry_metadata != nullptr && entry_metadata->max_flat_workgroup_size != 0) {
    limit = std::min(limit, entry_metadata->max_flat_workgroup_size);
  }
  if (record != nullptr && record->max_threads_per_block != 0) {
    limit = std::min(limit, record->max_threads_per_block);
  }
  const uint32_t shared = record != nullptr ? record->static_shared_bytes
                                            : static_cast<uint32_t>(std::max(static_shared, 0));
  Kernel& added = kernels_.add(std::make_unique<Kernel>(
      *this, function, plugin::KernelInfo(name, std::move(types), limit, shared)));
  out_kernel = &added;
  return HAL_SUCCESS;
}

}  // namespace hal::hip
