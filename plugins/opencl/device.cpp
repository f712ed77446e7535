#include "device.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "hal_plugin_sdk/versioned_struct.hpp"
#include "module.hpp"
#include "plugin.hpp"
#include "stream.hpp"

namespace hal::opencl {
namespace {

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

uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t hash = 14695981039346656037ull ^ seed;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace

Device::Device(const plugin::ErrorReporter& report, Platform& platform, cl_device_id id,
               uint32_t index, bool fine_grain)
    : report_(report), platform_(platform), id_(id), index_(index), fine_grain_(fine_grain) {
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
  const uint64_t high = fnv1a(identity, 0), low = fnv1a(identity, 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < 8; ++i) {
    out.uuid[i] = static_cast<uint8_t>(high >> (8 * i));
    out.uuid[8 + i] = static_cast<uint8_t>(low >> (8 * i));
  }
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

Stream* Device::add_stream(std::unique_ptr<Stream> stream) {
  return streams_.add(std::move(stream));
}

void Device::remove_stream(Stream* stream) {
  const std::unique_ptr<Stream> owned = streams_.take(stream);
  if (owned) clFinish(owned->queue());
}

Event* Device::add_event(std::unique_ptr<Event> event) {
  return events_.add(std::move(event));
}

void Device::remove_event(Event* event) {
  events_.take(event);
}

Module* Device::add_module(std::unique_ptr<Module> module) {
  return modules_.add(std::move(module));
}

void Device::remove_module(Module* module) {
  modules_.take(module);
}

void Device::remember_base(void* aligned, void* base) {
  std::lock_guard lock(mutex_);
  over_aligned_.emplace(aligned, base);
}

void* Device::take_base(void* aligned) {
  std::lock_guard lock(mutex_);
  const auto it = over_aligned_.find(aligned);
  if (it == over_aligned_.end()) return aligned;
  void* base = it->second;
  over_aligned_.erase(it);
  return base;
}

hal_result_t Device::synchronize() {
  std::vector<cl_command_queue> queues;
  streams_.for_each([&](const std::unique_ptr<Stream>& stream) {
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
    return report_.fail(HAL_ERROR_DEVICE_LOST, first_error, "device_synchronize: clFinish: %s",
                        cl_error_text(first_error).c_str());
  }
  return HAL_SUCCESS;
}

void Device::release_all() {
  for (const std::unique_ptr<Stream>& stream : streams_.take_all()) clFinish(stream->queue());
  events_.take_all();
  modules_.take_all();
}

// ---- table entries ----------------------------------------------------------

void device_close(hal_impl_device_t* device) {
  try {
    to_device(device)->release_all();
  } catch (...) {
  }
}

hal_result_t device_get_properties(hal_impl_device_t* device,
                                   hal_device_properties_t* out_properties) {
  plugin::write_versioned_struct(to_device(device)->properties(), out_properties);
  return HAL_SUCCESS;
}

hal_result_t device_synchronize(hal_impl_device_t* device) {
  Device& self = *to_device(device);
  return plugin::guarded(self.report(), "device_synchronize", [&] { return self.synchronize(); });
}

hal_result_t mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                       size_t alignment, void** out_ptr) {
  Device& self = *to_device(device);
  if (kind != HAL_MEMORY_DEVICE && !self.fine_grain()) {
    return self.report().fail(HAL_ERROR_UNSUPPORTED, 0,
                              "mem_alloc: host and shared memory need fine-grain SVM, which this "
                              "device lacks");
  }
  if (size > self.properties().max_allocation_bytes) {
    return self.report().fail(
        HAL_ERROR_OUT_OF_MEMORY, 0,
        "mem_alloc: %zu bytes exceed the device's max_allocation_bytes %llu", size,
        static_cast<unsigned long long>(self.properties().max_allocation_bytes));
  }
  const cl_svm_mem_flags flags =
      CL_MEM_READ_WRITE | (self.fine_grain() ? CL_MEM_SVM_FINE_GRAIN_BUFFER : 0);
  // Some platforms (PoCL) refuse alignments above their base-address
  // alignment: those allocations get the slack and an aligned pointer inside.
  const size_t native = std::max<size_t>(self.properties().min_alignment_bytes, 1);
  const bool carve = alignment > native;
  void* base = clSVMAlloc(self.context(), flags, carve ? size + alignment : size,
                          static_cast<cl_uint>(carve ? 0 : alignment));
  void* ptr = base;
  if (carve && base != nullptr) {
    const auto address = reinterpret_cast<uintptr_t>(base);
    ptr = reinterpret_cast<void*>((address + alignment - 1) & ~(uintptr_t{alignment} - 1));
    if (ptr != base) self.remember_base(ptr, base);
  }
  if (ptr == nullptr) {
    return self.report().fail(HAL_ERROR_OUT_OF_MEMORY, 0,
                              "mem_alloc: clSVMAlloc of %zu bytes (alignment %zu) failed", size,
                              alignment);
  }
  *out_ptr = ptr;
  return HAL_SUCCESS;
}

hal_result_t mem_free(hal_impl_device_t* device, void* ptr) {
  // The loader synchronised the device first: nothing enqueued uses |ptr|.
  Device& self = *to_device(device);
  clSVMFree(self.context(), self.take_base(ptr));
  return HAL_SUCCESS;
}

}  // namespace hal::opencl
