#include "plugin.hpp"

#include <dlfcn.h>

#include <vector>

#include "device.hpp"

namespace hal::opencl {
namespace {

std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  size_t size = 0;
  if (clGetPlatformInfo(platform, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string text(size, '\0');
  clGetPlatformInfo(platform, what, size, text.data(), nullptr);
  text.resize(size - 1);
  return text;
}

}  // namespace

std::string cl_error_text(cl_int code) {
  const char* name = "an OpenCL error";
  switch (code) {
    case CL_DEVICE_NOT_FOUND:
      name = "CL_DEVICE_NOT_FOUND";
      break;
    case CL_OUT_OF_RESOURCES:
      name = "CL_OUT_OF_RESOURCES";
      break;
    case CL_OUT_OF_HOST_MEMORY:
      name = "CL_OUT_OF_HOST_MEMORY";
      break;
    case CL_BUILD_PROGRAM_FAILURE:
      name = "CL_BUILD_PROGRAM_FAILURE";
      break;
    case CL_INVALID_VALUE:
      name = "CL_INVALID_VALUE";
      break;
    case CL_INVALID_KERNEL_NAME:
      name = "CL_INVALID_KERNEL_NAME";
      break;
    case CL_INVALID_KERNEL_ARGS:
      name = "CL_INVALID_KERNEL_ARGS";
      break;
    case CL_INVALID_ARG_SIZE:
      name = "CL_INVALID_ARG_SIZE";
      break;
    case CL_INVALID_ARG_VALUE:
      name = "CL_INVALID_ARG_VALUE";
      break;
    case CL_INVALID_WORK_GROUP_SIZE:
      name = "CL_INVALID_WORK_GROUP_SIZE";
      break;
    case CL_INVALID_WORK_ITEM_SIZE:
      name = "CL_INVALID_WORK_ITEM_SIZE";
      break;
    case CL_INVALID_GLOBAL_WORK_SIZE:
      name = "CL_INVALID_GLOBAL_WORK_SIZE";
      break;
    case CL_INVALID_EVENT:
      name = "CL_INVALID_EVENT";
      break;
    case CL_PROFILING_INFO_NOT_AVAILABLE:
      name = "CL_PROFILING_INFO_NOT_AVAILABLE";
      break;
    case -1001:
      name = "CL_PLATFORM_NOT_FOUND_KHR";
      break;
    default:
      break;
  }
  return std::string(name) + " (" + std::to_string(code) + ")";
}

hal_result_t result_of(cl_int code) {
  switch (code) {
    case CL_OUT_OF_HOST_MEMORY:
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return HAL_ERROR_OUT_OF_MEMORY;
    case CL_OUT_OF_RESOURCES:
    case CL_INVALID_WORK_GROUP_SIZE:
    case CL_INVALID_WORK_ITEM_SIZE:
    case CL_INVALID_GLOBAL_WORK_SIZE:
      return HAL_ERROR_INVALID_LAUNCH;
    default:
      return HAL_ERROR_INTERNAL;
  }
}

Plugin::Plugin(const hal_plugin_host_t* host) : report_(host) {
  // The ICD loader and the vendor libraries it opens are not built to be
  // unloaded (their globals own allocations, and a second hal_init would
  // initialise them twice): pin them for the life of the process, even after
  // the loader closes this plugin.
  dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  discover();
}

Plugin::~Plugin() {
  devices_.clear();
  platforms_.clear();
}

void Plugin::discover() {
  cl_uint count = 0;
  cl_int status = clGetPlatformIDs(0, nullptr, &count);
  if (status != CL_SUCCESS || count == 0) {
    report_.log(HAL_LOG_INFO, "opencl: no OpenCL platform (clGetPlatformIDs: %s); 0 devices",
                status != CL_SUCCESS ? cl_error_text(status).c_str() : "none installed");
    return;
  }
  std::vector<cl_platform_id> platforms(count);
  clGetPlatformIDs(count, platforms.data(), nullptr);
  for (cl_platform_id id : platforms) {
    const std::string name = platform_string(id, CL_PLATFORM_NAME);
    cl_uint device_total = 0;
    if (clGetDeviceIDs(id, CL_DEVICE_TYPE_ALL, 0, nullptr, &device_total) != CL_SUCCESS ||
        device_total == 0) {
      report_.log(HAL_LOG_INFO, "opencl: platform '%s' has no devices", name.c_str());
      continue;
    }
    std::vector<cl_device_id> all(device_total);
    clGetDeviceIDs(id, CL_DEVICE_TYPE_ALL, device_total, all.data(), nullptr);
    // HAL's memory model is device pointers: only devices with SVM qualify.
    std::vector<cl_device_id> usable;
    std::vector<bool> fine_grain;
    for (cl_device_id device : all) {
      cl_device_svm_capabilities svm = 0;
      if (clGetDeviceInfo(device, CL_DEVICE_SVM_CAPABILITIES, sizeof(svm), &svm, nullptr) !=
              CL_SUCCESS ||
          (svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) == 0) {
        report_.log(HAL_LOG_INFO, "opencl: a device of '%s' has no SVM; skipped", name.c_str());
        continue;
      }
      usable.push_back(device);
      fine_grain.push_back((svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0);
    }
    if (usable.empty()) continue;
    auto platform = std::make_unique<Platform>();
    platform->id = id;
    platform->name = name;
    const cl_context_properties properties[] = {CL_CONTEXT_PLATFORM,
                                                reinterpret_cast<cl_context_properties>(id), 0};
    platform->context.reset(clCreateContext(properties, static_cast<cl_uint>(usable.size()),
                                            usable.data(), nullptr, nullptr, &status));
    if (status != CL_SUCCESS) {
      report_.log(HAL_LOG_WARNING, "opencl: clCreateContext on '%s' failed: %s", name.c_str(),
                  cl_error_text(status).c_str());
      continue;
    }
    for (size_t i = 0; i < usable.size(); ++i) {
      devices_.push_back(std::make_unique<Device>(
          report_, *platform, usable[i], static_cast<uint32_t>(devices_.size()), fine_grain[i]));
    }
    platforms_.push_back(std::move(platform));
  }
  if (devices_.empty()) report_.log(HAL_LOG_INFO, "opencl: no device with SVM; 0 devices");
}

void plugin_shutdown(hal_plugin_context_t* context) {
  // The loader calls this once, after every other call returned.
  std::unique_ptr<Plugin> plugin(to_plugin(context));
  try {
    for (uint32_t i = 0; i < plugin->device_count(); ++i) plugin->device(i).release_all();
  } catch (...) {
  }
}

hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count) {
  *out_count = to_plugin(context)->device_count();
  return HAL_SUCCESS;
}

hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device) {
  // The loader asks for 0..device_count-1 only (SPEC 10.3).
  *out_device = reinterpret_cast<hal_impl_device_t*>(&to_plugin(context)->device(index));
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
