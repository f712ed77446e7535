// Modules and kernels of the cuda plugin: PTX and cubin, and HAL dialect
// source compiled by NVRTC (a cubin for the device's architecture, else PTX).
#include "module.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

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

// cuModuleLoadDataEx with the JIT's error and info logs captured (cuda.h,
// CUjit_option: CU_JIT_ERROR_LOG_BUFFER / _SIZE_BYTES, "IN: Log buffer size
// in bytes. Log messages will be capped at this size (including null
// terminator). OUT: Amount of log buffer filled with messages"; the size
// travels in the option's value slot itself). On failure |error_log| holds
// what the JIT said (ptxas's "Unsupported .version", a syntax error's line).
CUresult load_with_logs(const DriverApi& cu, CUmodule& loaded, const void* image,
                        std::string& error_log, std::string& info_log) {
  constexpr size_t kLogBytes = 8192;
  std::vector<char> errors(kLogBytes, '\0'), infos(kLogBytes, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {errors.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(kLogBytes)),
                    infos.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(kLogBytes))};
  const CUresult result = cu.cuModuleLoadDataEx(&loaded, image, 4, options, values);
  // The filled sizes come back in the value slots; never trust them past the
  // buffer, and stop at the first NUL either way.
  const auto text = [](const std::vector<char>& buffer, void* filled) {
    const size_t bytes =
        std::min(static_cast<size_t>(reinterpret_cast<uintptr_t>(filled)), buffer.size());
    std::string out(buffer.data(), strnlen(buffer.data(), bytes));
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  };
  error_log = text(errors, values[1]);
  info_log = text(infos, values[3]);
  return result;
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
  std::string dialect_target;  // "sm_90 cubin" when the dialect became one
  if (format == HAL_MODULE_FORMAT_HAL_DIALECT) {
    const Nvrtc& nvrtc = *owner.nvrtc();  // the format bit is set only with NVRTC
    const CompileTarget target = nvrtc.pick_target(owner.cc_major(), owner.cc_minor());
    if (!target.cubin) {
      // PTX is JIT-compiled by the driver, which refuses a PTX ISA newer
      // than its own: say why this one is not a cubin before it is tried.
      report.log(HAL_LOG_INFO,
                 "module_load: the dialect is compiled to %s, not a cubin: %s; the driver "
                 "(CUDA %d.%d) JIT-compiles it, and refuses PTX of a newer CUDA than its own",
                 target.describe().c_str(), target.why_ptx.c_str(), owner.driver_version() / 1000,
                 owner.driver_version() % 1000 / 10);
    }
    auto compiled = std::make_unique<CompiledDialect>();
    std::string message;
    image.resize(strnlen(image.c_str(), image.size()));
    const auto log = [&](hal_log_level_t level, const std::string& line) {
      report.log(level, "%s", line.c_str());
    };
    CacheOutcome outcome;
    if (compile_dialect_cached(nvrtc, image, target, log, *compiled, outcome, message) !=
        DialectStatus::kOk) {
      return report.fail_message(HAL_ERROR_INVALID_MODULE, 0, "module_load: " + message);
    }
    image = std::move(compiled->image);
    translated = std::make_unique<dialect::TranslatedModule>(std::move(compiled->translated));
    if (target.cubin) dialect_target = target.describe();
  }
  if (format == HAL_MODULE_FORMAT_CUBIN || !dialect_target.empty()) {
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
  std::string error_log, info_log;
  const CUresult result = load_with_logs(owner.api(), loaded, image.data(), error_log, info_log);
  if (result != CUDA_SUCCESS) {
    std::string what = "module_load: cuModuleLoadDataEx";
    if (!dialect_target.empty()) what += " (the dialect as an " + dialect_target + ")";
    return owner.fail(result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY
                                                                   : HAL_ERROR_INVALID_MODULE,
                      result, what.c_str(),
                      error_log.empty() ? std::string() : "; the JIT's error log:\n" + error_log);
  }
  if (!info_log.empty())
    report.log(HAL_LOG_DEBUG, "module_load: the JIT says: %s", info_log.c_str());
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
