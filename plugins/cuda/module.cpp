// Modules and kernels of the cuda plugin: PTX and cubin, and HAL dialect
// source compiled to PTX by NVRTC.
#include "module.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/module_image.hpp"
#include "device.hpp"
#include "dialect_cache.hpp"
#include "image.hpp"
#include "nvrtc.hpp"

namespace hal::cuda {
namespace {

// Checks |types| against the entry's parameters as the driver knows them
// (cuFuncGetParamInfo, CUDA 12.4+): a PTX or cubin signature is declared by
// the caller, and a wrong one would be undefined behaviour on the device.
// Empty when they agree or the driver cannot tell.
std::string signature_disagreement(const DriverApi& cu, CUfunction function,
                                   const std::vector<hal_arg_type_t>& types) {
  if (cu.cuFuncGetParamInfo == nullptr) return {};
  std::vector<size_t> sizes;
  for (size_t index = 0; index <= HAL_MAX_KERNEL_ARGS; ++index) {
    size_t offset = 0, size = 0;
    const CUresult result = cu.cuFuncGetParamInfo(function, index, &offset, &size);
    if (result == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (result != CUDA_SUCCESS) return {};          // the driver cannot tell
    sizes.push_back(size);
  }
  return plugin::signature_size_disagreement(sizes, types, {"the entry", "parameter", "the entry"});
}

}  // namespace

CUresult Kernel::ensure_dynamic_shared(const DriverApi& api, uint32_t bytes) {
  std::lock_guard lock(mutex_);
  if (bytes <= dynamic_shared_limit_) return CUDA_SUCCESS;
  const CUresult result = api.cuFuncSetAttribute(
      function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes));
  if (result == CUDA_SUCCESS) dynamic_shared_limit_ = bytes;
  return result;
}

Module::~Module() {
  kernels_.clear();
  if (const ContextScope bound = device().bind(); bound.ok())
    device().api().cuModuleUnload(module_);
}

hal_result_t Module::load(Device& owner, const hal_module_desc_t& desc, Module*& out_module) {
  const plugin::ErrorReporter& report = owner.report();
  // The loader let through only the formats in the device's module_formats
  // (HAL_MODULE_FORMAT_HAL_DIALECT is there only with NVRTC).
  const hal_module_format_t format = desc.format;
  std::string image;
  if (hal_result_t read = plugin::read_module_image(desc, report, image); read != HAL_SUCCESS)
    return read;
  std::unique_ptr<dialect::TranslatedModule> translated;
  if (format == HAL_MODULE_FORMAT_HAL_DIALECT) {
    const Nvrtc& nvrtc = *owner.nvrtc();  // the format bit is set only with NVRTC
    const int arch = nvrtc.pick_arch(owner.cc_major(), owner.cc_minor());
    auto compiled = std::make_unique<CompiledDialect>();
    std::string message;
    image.resize(strnlen(image.c_str(), image.size()));
    const auto log = [&](hal_log_level_t level, const std::string& line) {
      report.log(level, "%s", line.c_str());
    };
    CacheOutcome outcome;
    if (compile_dialect_cached(nvrtc, image, arch, log, *compiled, outcome, message) !=
        DialectStatus::kOk) {
      return report.fail_message(HAL_ERROR_INVALID_MODULE, 0, "module_load: " + message);
    }
    image = std::move(compiled->ptx);
    translated = std::make_unique<dialect::TranslatedModule>(std::move(compiled->translated));
  }
  if (format == HAL_MODULE_FORMAT_CUBIN) {
    std::string why;
    if (!check_binary_image(image.data(), image.size(), why)) {
      return report.fail(HAL_ERROR_INVALID_MODULE, 0, "module_load: the cubin image is invalid: %s",
                         why.c_str());
    }
  } else {
    image.push_back('\0');  // PTX is text
  }
  const ContextScope bound = owner.bind();
  if (!bound.ok()) {
    return owner.fail(bound.result(), "module_load");
  }
  CUmodule loaded = nullptr;
  const CUresult result = owner.api().cuModuleLoadData(&loaded, image.data());
  if (result != CUDA_SUCCESS) {
    return owner.fail(result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY
                                                                   : HAL_ERROR_INVALID_MODULE,
                      result, "module_load: cuModuleLoadData");
  }
  auto owned = std::make_unique<Module>(owner, loaded, std::move(translated));
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
          "PTX and cubin carry none the plugin reads, so declare arg_types", record, types);
      resolved != HAL_SUCCESS) {
    return resolved;
  }
  const ContextScope bound = owner.bind();
  if (!bound.ok()) {
    return owner.fail(bound.result(), "kernel_get");
  }
  const DriverApi& cu = owner.api();
  CUfunction function = nullptr;
  if (const CUresult result = cu.cuModuleGetFunction(&function, module_, name.c_str());
      result != CUDA_SUCCESS) {
    const std::string what = "kernel_get: cuModuleGetFunction('" + name + "')";
    return owner.fail(result == CUDA_ERROR_NOT_FOUND ? HAL_ERROR_NOT_FOUND : result_of(result),
                      result, what.c_str());
  }
  if (const std::string why = signature_disagreement(cu, function, types); !why.empty()) {
    return report.fail_message(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                               "kernel_get: '" + name + "': " + why);
  }
  int max_threads = 0;
  int static_shared = 0;
  cu.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function);
  cu.cuFuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function);
  uint32_t limit = owner.properties().max_threads_per_block;
  if (max_threads > 0) limit = std::min(limit, static_cast<uint32_t>(max_threads));
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

}  // namespace hal::cuda
