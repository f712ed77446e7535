// The opencl plugin's context (the platforms and their SVM devices, found at
// load) and its devices' properties.
#include "device.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "event.hpp"
#include "hal_plugin_sdk/uuid.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"
#include "module.hpp"
#include "stream.hpp"

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

template <class T>
T device_value(cl_device_id device, cl_device_info what, T fallback) {
  T value{};
  return clGetDeviceInfo(device, what, sizeof(value), &value, nullptr) == CL_SUCCESS ? value
                                                                                     : fallback;
}

std::string device_string(cl_device_id device, cl_device_info what) {
  size_t size = 0;
  if (clGetDeviceInfo(device, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string text(size, '\0');
  clGetDeviceInfo(device, what, size, text.data(), nullptr);
  text.resize(size - 1);
  return text;
}

}  // namespace

Plugin::Plugin(const hal_plugin_host_t* host) : PluginBase(host) {
  // The ICD loader and the vendor libraries it opens are not built to be
  // unloaded (their globals own allocations, and a second hal_init would
  // initialise them twice): pin them for the life of the process, even after
  // the loader closes this plugin.
  dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  cl_uint count = 0;
  cl_int status = clGetPlatformIDs(0, nullptr, &count);
  if (status != CL_SUCCESS || count == 0) {
    report().log(HAL_LOG_INFO, "opencl: no OpenCL platform (clGetPlatformIDs: %s); 0 devices",
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
      report().log(HAL_LOG_INFO, "opencl: platform '%s' has no devices", name.c_str());
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
        report().log(HAL_LOG_INFO, "opencl: a device of '%s' has no SVM; skipped", name.c_str());
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
      report().log(HAL_LOG_WARNING, "opencl: clCreateContext on '%s' failed: %s", name.c_str(),
                   cl_error_text(status).c_str());
      continue;
    }
    for (size_t i = 0; i < usable.size(); ++i) {
      devices_.push_back(std::make_unique<Device>(
          report(), *platform, usable[i], static_cast<uint32_t>(devices_.size()), fine_grain[i]));
    }
    platforms_.push_back(std::move(platform));
  }
  if (devices_.empty()) report().log(HAL_LOG_INFO, "opencl: no device with SVM; 0 devices");
}

Device::Device(const plugin::ErrorReporter& report, Platform& platform, cl_device_id id,
               uint32_t index, bool fine_grain)
    : DeviceBase(report), platform_(platform), id_(id), index_(index), fine_grain_(fine_grain) {
  read_properties();
}

Device::~Device() {
  release_all();
}

cl_context Device::context() const {
  return platform_.context.get();
}

void Device::read_properties() {
  hal_device_properties_t& out = properties_;
  out.struct_size = sizeof(out);
  const std::string name = device_string(id_, CL_DEVICE_NAME);
  std::snprintf(out.name, sizeof(out.name), "OpenCL %s: %s", platform_.name.c_str(), name.c_str());
  plugin::copy_string(out.vendor, device_string(id_, CL_DEVICE_VENDOR).c_str());
  plugin::copy_string(out.plugin, kPluginName);
  plugin::copy_string(out.driver_version, device_string(id_, CL_DRIVER_VERSION).c_str());
  const std::string identity =
      "hal-opencl/" + platform_.name + "/" + name + "/" + std::to_string(index_);
  plugin::uuid_from_name(identity, out.uuid);
  const auto type = device_value<cl_device_type>(id_, CL_DEVICE_TYPE, CL_DEVICE_TYPE_DEFAULT);
  out.type = (type & CL_DEVICE_TYPE_CPU) != 0   ? HAL_DEVICE_TYPE_CPU
             : (type & CL_DEVICE_TYPE_GPU) != 0 ? HAL_DEVICE_TYPE_GPU
                                                : HAL_DEVICE_TYPE_ACCELERATOR;
  out.plugin_device_index = index_;
  out.capabilities = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                     HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_STREAM_QUERY;
  if (fine_grain_) {
    // Fine-grain SVM is coherent with the host without map/unmap.
    out.capabilities |= HAL_DEVICE_CAP_UNIFIED_ADDRESSING | HAL_DEVICE_CAP_HOST_MEMORY |
                        HAL_DEVICE_CAP_SHARED_MEMORY;
  }
  out.module_formats = (1u << HAL_MODULE_FORMAT_OPENCL_C) | (1u << HAL_MODULE_FORMAT_HAL_DIALECT);
  out.compute_units = device_value<cl_uint>(id_, CL_DEVICE_MAX_COMPUTE_UNITS, 1);
  out.total_memory_bytes = device_value<cl_ulong>(id_, CL_DEVICE_GLOBAL_MEM_SIZE, 0);
  out.max_allocation_bytes = device_value<cl_ulong>(id_, CL_DEVICE_MAX_MEM_ALLOC_SIZE, 0);
  out.min_alignment_bytes = device_value<cl_uint>(id_, CL_DEVICE_MEM_BASE_ADDR_ALIGN, 1024) / 8;
  const auto max_group = device_value<size_t>(id_, CL_DEVICE_MAX_WORK_GROUP_SIZE, 1);
  out.max_threads_per_block = static_cast<uint32_t>(std::min<size_t>(max_group, UINT32_MAX));
  size_t item_sizes[3] = {1, 1, 1};
  clGetDeviceInfo(id_, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(item_sizes), item_sizes, nullptr);
  for (int d = 0; d < 3; ++d) {
    out.max_block_dims[d] = static_cast<uint32_t>(std::min<size_t>(item_sizes[d], UINT32_MAX));
  }
  // The dialect's ids are int: grid x block must stay below 2^31 per dimension.
  out.max_grid_dims[0] = 0x7fffffffu;
  out.max_grid_dims[1] = out.max_grid_dims[2] = 65535;
  out.max_shared_memory_bytes = static_cast<uint32_t>(
      std::min<cl_ulong>(device_value<cl_ulong>(id_, CL_DEVICE_LOCAL_MEM_SIZE, 0), UINT32_MAX));
  // OpenCL 1.2-level devices have no sub-groups; the preferred work-group
  // multiple is the SIMD width the compiler vectorises work-items to.
  out.subgroup_size = static_cast<uint32_t>(
      device_value<size_t>(id_, CL_DEVICE_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, 1));
  out.peak_fp32_flops = 0;
  out.peak_memory_bandwidth = 0;
}

hal_result_t Device::synchronize() {
  std::vector<cl_command_queue> queues;
  for_each_stream([&](const std::unique_ptr<Stream>& stream) {
    clRetainCommandQueue(stream->queue());
    queues.push_back(stream->queue());
  });
  cl_int first_error = CL_SUCCESS;
  for (cl_command_queue queue : queues) {
    const cl_int status = clFinish(queue);
    if (first_error == CL_SUCCESS) first_error = status;
    clReleaseCommandQueue(queue);
  }
  if (first_error != CL_SUCCESS) {
    return report().fail(HAL_ERROR_DEVICE_LOST, first_error, "device_synchronize: clFinish: %s",
                         cl_error_text(first_error).c_str());
  }
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
