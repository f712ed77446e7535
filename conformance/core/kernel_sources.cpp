#include "kernel_sources.hpp"

#include <fnmatch.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <utility>

#include "api_model.hpp"
#include "check.hpp"

namespace halconform {

// conformance/kernels/core_kernels.hal, embedded by conformance/CMakeLists.txt.
extern const std::string_view kCoreKernelsSource;

namespace {

const char* format_name(hal_module_format_t format) {
  const model::EnumType* formats = model::find_enum("hal_module_format_t");
  const char* name = formats != nullptr ? model::enum_name(*formats, format) : nullptr;
  return name != nullptr ? name : "an unknown format";
}

bool format_from_name(const std::string& name, hal_module_format_t& out) {
  const model::EnumType* formats = model::find_enum("hal_module_format_t");
  if (formats == nullptr) return false;
  for (const model::EnumValue& v : formats->values) {
    if (name == v.name) {
      out = static_cast<hal_module_format_t>(v.value);
      return true;
    }
  }
  return false;
}

bool loads(const hal_device_properties_t& p, hal_module_format_t format) {
  return (p.capabilities & HAL_DEVICE_CAP_KERNELS) != 0 && (p.module_formats & (1u << format)) != 0;
}

// The pack's lines for this device: "<FORMAT> <file> [<device-name glob>]".
void pack_sources(TestContext& ctx, const std::string& manifest, std::vector<KernelSource>& out,
                  std::string& why_not) {
  std::ifstream in(manifest);
  if (!in) {
    why_not += "; the kernel pack " + manifest + " cannot be read";
    return;
  }
  const std::string dir = manifest.substr(0, manifest.rfind('/') + 1);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string format_word, file, glob;
    if (!(words >> format_word)) continue;
    hal_module_format_t format;
    if (!(words >> file) || !format_from_name(format_word, format)) {
      why_not += strf("; %s:%d is not '<HAL_MODULE_FORMAT_...> <file> [<device glob>]'",
                      manifest.c_str(), number);
      continue;
    }
    words >> glob;
    const std::string label =
        strf("the conformance kernel pack (%s %s)", format_word.c_str(), file.c_str());
    if (!glob.empty() && fnmatch(glob.c_str(), ctx.properties().name, 0) != 0) {
      why_not += "; " + label + " is for devices named " + glob;
      continue;
    }
    if (!loads(ctx.properties(), format)) {
      why_not += "; " + label + ": the device does not load " + format_word;
      continue;
    }
    out.push_back({label, format, file.front() == '/' ? file : dir + file, {}, "pack"});
  }
}

}  // namespace

std::vector<KernelSource> kernel_sources(TestContext& ctx, std::string* why_not) {
  std::vector<KernelSource> sources;
  std::string reasons;
  const hal_device_properties_t& p = ctx.properties();
  if (!ctx.settings().kernel_pack.empty()) {
    pack_sources(ctx, ctx.settings().kernel_pack, sources, reasons);
  } else {
    reasons += "; the plugin ships no conformance kernel pack";
  }
  if (loads(p, HAL_MODULE_FORMAT_CPU_SHARED_OBJECT)) {
    if (std::ifstream(ctx.kernels_path()).good()) {
      sources.push_back({"the CPU shared object " + ctx.kernels_path(),
                         HAL_MODULE_FORMAT_CPU_SHARED_OBJECT,
                         ctx.kernels_path(),
                         {},
                         "cpu_shared_object"});
    } else {
      reasons += "; the CPU shared object " + ctx.kernels_path() + " is missing";
    }
  } else {
    reasons += "; the device does not load HAL_MODULE_FORMAT_CPU_SHARED_OBJECT";
  }
  if (loads(p, HAL_MODULE_FORMAT_HAL_DIALECT)) {
    sources.push_back({"the HAL dialect source core_kernels.hal",
                       HAL_MODULE_FORMAT_HAL_DIALECT,
                       {},
                       std::vector<char>(kCoreKernelsSource.begin(), kCoreKernelsSource.end()),
                       "dialect"});
  } else {
    reasons += "; the device does not load HAL_MODULE_FORMAT_HAL_DIALECT";
  }
  if (why_not != nullptr) *why_not = reasons.empty() ? "" : reasons.substr(2);
  return sources;
}

std::vector<hal_arg_type_t> kernel_signature(const std::string& name) {
  using A = std::vector<hal_arg_type_t>;
  if (name == "write_index" || name == "affine_u32") {
    return A{HAL_ARG_POINTER, HAL_ARG_U32, HAL_ARG_U32, HAL_ARG_U32};
  }
  if (name == "echo_mixed") {
    return A{HAL_ARG_POINTER, HAL_ARG_I32, HAL_ARG_U32, HAL_ARG_I64,
             HAL_ARG_U64,     HAL_ARG_F32, HAL_ARG_F64, HAL_ARG_POINTER};
  }
  if (name == "echo_64") {
    A types{HAL_ARG_POINTER};
    types.resize(HAL_MAX_KERNEL_ARGS, HAL_ARG_U64);
    return types;
  }
  if (name == "block_sum") return A{HAL_ARG_POINTER, HAL_ARG_POINTER, HAL_ARG_U32};
  if (name == "shared_fill" || name == "concurrency_probe") return A{HAL_ARG_POINTER, HAL_ARG_U32};
  if (name == "empty") return A{};
  fail("no conformance kernel is named " + name);
}

SourceModule::SourceModule(hal_device_t device, const KernelSource& source) {
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = source.format;
  if (source.path.empty()) {
    desc.data = source.image.data();
    desc.size = source.image.size();
  } else {
    desc.path = source.path.c_str();
  }
  load_result_ = hal_module_load(device, &desc, &module_);
  if (load_result_ != HAL_SUCCESS) {
    module_ = nullptr;
    load_message_ = hal_error_last_message();
  }
}

SourceModule::~SourceModule() {
  if (module_ != nullptr) hal_module_unload(module_);
}

hal_module_t SourceModule::release() {
  kernels_.clear();
  return std::exchange(module_, nullptr);
}

hal_kernel_t SourceModule::kernel(const char* name) {
  if (auto found = kernels_.find(name); found != kernels_.end()) return found->second;
  const std::vector<hal_arg_type_t> types = kernel_signature(name);
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = name;
  // A non-NULL array even for no arguments: a declared signature (SPEC.md §8).
  static const hal_arg_type_t kNone[1] = {HAL_ARG_POINTER};
  desc.arg_types = types.empty() ? kNone : types.data();
  desc.arg_count = static_cast<uint32_t>(types.size());
  hal_kernel_t kernel = nullptr;
  const hal_result_t result = hal_kernel_get(module_, &desc, &kernel);
  if (result != HAL_SUCCESS) {
    fail(strf("hal_kernel_get(%s) with its declared signature returned %s: %s", name,
              hal_result_string(result), hal_error_last_message()));
  }
  kernels_[name] = kernel;
  return kernel;
}

std::string source_names(const std::vector<KernelSource>& sources) {
  std::string names;
  for (const KernelSource& source : sources) {
    names += (names.empty() ? "" : ", ") + std::string(format_name(source.format));
  }
  return names.empty() ? "none" : names;
}

void for_each_kernel_source(TestContext& ctx,
                            const std::function<void(const KernelSource&, SourceModule&)>& body) {
  std::string why_not;
  const std::vector<KernelSource> sources = kernel_sources(ctx, &why_not);
  size_t ran = 0;
  std::string ran_names;
  for (const KernelSource& source : sources) {
    SourceModule module(ctx.device(), source);
    if (module.load_result() != HAL_SUCCESS) {
      why_not += strf("; %s does not load (%s: %s)", source.name.c_str(),
                      hal_result_string(module.load_result()), module.load_message().c_str());
      continue;
    }
    try {
      body(source, module);
    } catch (const TestFailure& failure) {
      throw TestFailure("through " + source.name + ": " + failure.what());
    }
    ++ran;
    ran_names += (ran_names.empty() ? "" : ", ") + source.name;
  }
  if (ran == 0) {
    ctx.skip("no conformance kernel source loads on this device (see core.kernels.sources): " +
             why_not);
  }
  ctx.note("kernels from " + ran_names);
}

}  // namespace halconform
