// Modules and kernels of the opencl plugin: OpenCL C source, or HAL dialect
// source translated to it, built by the platform's compiler.
#include "module.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/module_image.hpp"

namespace hal::opencl {
namespace {

// -cl-kernel-arg-info: native OpenCL C kernels get their signature from the
// compiler's argument info when the caller declares none.
constexpr char kBuildOptions[] = "-cl-std=CL1.2 -cl-kernel-arg-info";
constexpr size_t kMaxBuildLogBytes = 6000;

std::string build_log(cl_program program, cl_device_id device) {
  size_t size = 0;
  clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
  std::string log(size, '\0');
  if (size > 0) {
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    log.resize(size - 1);
  }
  if (log.size() > kMaxBuildLogBytes) log = log.substr(0, kMaxBuildLogBytes) + "\n[... log cut]";
  return log;
}

// A native kernel's signature from the compiler's argument info; false,
// with |why|, when an argument has no HAL type (or there is no info).
bool signature_from_arg_info(cl_kernel kernel, std::vector<hal_arg_type_t>& out, std::string& why) {
  cl_uint count = 0;
  clGetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof(count), &count, nullptr);
  for (cl_uint i = 0; i < count; ++i) {
    cl_kernel_arg_address_qualifier space = 0;
    if (clGetKernelArgInfo(kernel, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof(space), &space,
                           nullptr) != CL_SUCCESS) {
      why = "the OpenCL compiler gives no argument info";
      return false;
    }
    if (space == CL_KERNEL_ARG_ADDRESS_GLOBAL || space == CL_KERNEL_ARG_ADDRESS_CONSTANT) {
      out.push_back(HAL_ARG_POINTER);
      continue;
    }
    char type[64] = {};
    clGetKernelArgInfo(kernel, i, CL_KERNEL_ARG_TYPE_NAME, sizeof(type) - 1, type, nullptr);
    const std::string_view name(type);
    static constexpr std::pair<std::string_view, hal_arg_type_t> kTypes[] = {
        {"int", HAL_ARG_I32},   {"uint", HAL_ARG_U32},  {"long", HAL_ARG_I64},
        {"ulong", HAL_ARG_U64}, {"float", HAL_ARG_F32}, {"double", HAL_ARG_F64}};
    bool found = false;
    for (const auto& [spelling, hal_type] : kTypes) {
      if (space == CL_KERNEL_ARG_ADDRESS_PRIVATE && name == spelling) {
        out.push_back(hal_type);
        found = true;
      }
    }
    if (!found) {
      why = "argument " + std::to_string(i) + " (" + std::string(name) + ", address space 0x" +
            std::to_string(space) + ") has no HAL argument type";
      return false;
    }
  }
  return true;
}

}  // namespace

hal_result_t Module::load(Device& owner, const hal_module_desc_t& desc, Module*& out_module) {
  const plugin::ErrorReporter& report = owner.report();
  // The loader let through only the formats in the device's module_formats.
  std::string source;
  if (hal_result_t read = plugin::read_module_image(desc, report, source, true);
      read != HAL_SUCCESS)
    return read;
  std::unique_ptr<dialect::TranslatedModule> translated;
  if (desc.format == HAL_MODULE_FORMAT_HAL_DIALECT) {
    translated = std::make_unique<dialect::TranslatedModule>();
    dialect::Diagnostic diagnostic;
    if (!dialect::translate(source, dialect::Backend::kOpenCL, *translated, diagnostic)) {
      return report.fail_message(
          HAL_ERROR_INVALID_MODULE, 0,
          "module_load: the HAL dialect source is invalid: " + diagnostic.to_string());
    }
    source = translated->text;
  }
  const char* text = source.c_str();
  const size_t length = source.size();
  cl_int status = CL_SUCCESS;
  ClProgram program(clCreateProgramWithSource(owner.context(), 1, &text, &length, &status));
  if (status != CL_SUCCESS) {
    return report.fail(result_of(status) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY
                                                                    : HAL_ERROR_INVALID_MODULE,
                       status, "module_load: clCreateProgramWithSource: %s",
                       cl_error_text(status).c_str());
  }
  const cl_device_id device_id = owner.id();
  status = clBuildProgram(program.get(), 1, &device_id, kBuildOptions, nullptr, nullptr);
  if (status != CL_SUCCESS) {
    return report.fail_message(HAL_ERROR_INVALID_MODULE, status,
                               std::string("module_load: the OpenCL compiler rejected the ") +
                                   (translated ? "translated HAL dialect" : "OpenCL C") +
                                   " source (" + cl_error_text(status) + "):\n" +
                                   build_log(program.get(), device_id));
  }
  out_module =
      owner.add_module(std::make_unique<Module>(owner, std::move(program), std::move(translated)));
  return HAL_SUCCESS;
}

hal_result_t Module::get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel) {
  Device& owner = device();
  const plugin::ErrorReporter& report = owner.report();
  const std::string name = desc.name;
  const dialect::KernelRecord* record = nullptr;
  if (dialect() != nullptr) {
    record = dialect()->find(name);
    if (record == nullptr) {
      std::string known;
      for (const dialect::KernelRecord& kernel : dialect()->kernels) {
        known += (known.empty() ? "" : ", ") + kernel.entry;
      }
      return report.fail(HAL_ERROR_NOT_FOUND, 0,
                         "kernel_get: the module has no kernel '%s' (its kernels: %s)",
                         name.c_str(), known.c_str());
    }
  }
  cl_int status = CL_SUCCESS;
  ClKernel kernel(clCreateKernel(program(), name.c_str(), &status));
  if (status != CL_SUCCESS) {
    return report.fail(status == CL_INVALID_KERNEL_NAME ? HAL_ERROR_NOT_FOUND : HAL_ERROR_INTERNAL,
                       status, "kernel_get: clCreateKernel('%s'): %s", name.c_str(),
                       cl_error_text(status).c_str());
  }
  std::vector<hal_arg_type_t> module_types;
  std::string why;
  const bool module_signature = record != nullptr
                                    ? (module_types = record->arg_types, true)
                                    : signature_from_arg_info(kernel.get(), module_types, why);
  // Bound to the module's own signature when it has one: the loader
  // compares a declared signature with the one reported in out_info.
  std::vector<hal_arg_type_t> types;
  if (module_signature) {
    types = std::move(module_types);
  } else if (desc.arg_types != nullptr) {
    // Without argument info only the count can be checked here.
    types.assign(desc.arg_types, desc.arg_types + desc.arg_count);
    cl_uint count = 0;
    clGetKernelInfo(kernel.get(), CL_KERNEL_NUM_ARGS, sizeof(count), &count, nullptr);
    if (count != types.size()) {
      return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                         "kernel_get: '%s' takes %u arguments, the declared signature has %zu",
                         name.c_str(), count, types.size());
    }
  } else {
    return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                       "kernel_get: '%s' has no signature: declare arg_types (%s)", name.c_str(),
                       why.c_str());
  }
  size_t work_group = owner.properties().max_threads_per_block;
  clGetKernelWorkGroupInfo(kernel.get(), owner.id(), CL_KERNEL_WORK_GROUP_SIZE, sizeof(work_group),
                           &work_group, nullptr);
  uint32_t max_threads =
      static_cast<uint32_t>(std::min<size_t>(work_group, owner.properties().max_threads_per_block));
  if (record != nullptr && record->max_threads_per_block != 0) {
    max_threads = std::min(max_threads, record->max_threads_per_block);
  }
  cl_ulong local_bytes = 0;
  clGetKernelWorkGroupInfo(kernel.get(), owner.id(), CL_KERNEL_LOCAL_MEM_SIZE, sizeof(local_bytes),
                           &local_bytes, nullptr);
  const uint32_t static_shared =
      record != nullptr ? record->static_shared_bytes
                        : static_cast<uint32_t>(std::min<cl_ulong>(local_bytes, UINT32_MAX));
  Kernel& added = kernels_.add(std::make_unique<Kernel>(
      *this, std::move(kernel),
      plugin::KernelInfo(name, std::move(types), max_threads, static_shared),
      record != nullptr && record->dynamic_shared));
  out_kernel = &added;
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
