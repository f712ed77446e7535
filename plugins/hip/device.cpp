#include "device.hpp"

#include <algorithm>
#include <cstring>

#include "module.hpp"
#include "plugin.hpp"
#include "stream.hpp"

namespace hal::hip {
namespace {

// HIP allocations are at least this aligned (hipMalloc's documented 256).
constexpr size_t kNativeAlignment = 256;

}  // namespace

uint32_t fp32_lanes_per_cu(const std::string& arch) {
  const std::string base = base_arch(arch);
  if (base == "gfx90a" || base.rfind("gfx94", 0) == 0 || base.rfind("gfx11", 0) == 0) return 128;
  return 64;
}

Device::Device(const plugin::ErrorReporter& report, const Runtime& runtime, const Hiprtc* hiprtc,
               int ordinal, const hipDeviceProp_t& properties, uint32_t index)
    : report_(report), runtime_(runtime), hiprtc_(hiprtc), ordinal_(ordinal), index_(index) {
  read_properties(properties);
}

Device::~Device() {
  release_all();
  std::lock_guard lock(mutex_);
  // What the application left: freed without a caller to report a failure to.
  if (bind() == hipSuccess) {
    for (const auto& [ptr, allocation] : allocations_) {
      (void)release(allocation.kind, allocation.base);
    }
  }
  allocations_.clear();
}

hal_result_t Device::fail(hipError_t result, const char* what) const {
  return fail(result_of(result), result, what);
}

hal_result_t Device::fail(hal_result_t mapped, hipError_t result, const char* what) const {
  return report_.fail(mapped, static_cast<int64_t>(result), "%s: %s", what,
                      hip_error_text(result).c_str());
}

void Device::read_properties(const hipDeviceProp_t& hip) {
  hal_device_properties_t& out = properties_;
  out.struct_size = sizeof(out);
  // The runtime's strings are fixed arrays: bounded copies, NUL-terminated.
  const std::string name(hip.name, strnlen(hip.name, sizeof(hip.name)));
  if (name.empty()) {
    std::snprintf(out.name, sizeof(out.name), "HIP device %u", index_);
  } else {
    plugin::copy_string(out.name, name.c_str());
  }
  arch_.assign(hip.gcnArchName, strnlen(hip.gcnArchName, sizeof(hip.gcnArchName)));
  plugin::copy_string(out.vendor, "AMD");
  plugin::copy_string(out.plugin, kPluginName);
  plugin::copy_string(out.driver_version, version_text(runtime_.version()).c_str());
  hipUUID uuid{};
  if (api().hipDeviceGetUuid(&uuid, ordinal_) == hipSuccess) {
    std::memcpy(out.uuid, uuid.bytes, sizeof(out.uuid));
  }
  out.type = HAL_DEVICE_TYPE_GPU;
  // HOST_CALLBACKS: hipLaunchHostFunc runs them on a runtime thread.
  out.capabilities = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                     HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_HOST_MEMORY |
                     HAL_DEVICE_CAP_STREAM_QUERY;
  if (hip.managedMemory != 0) out.capabilities |= HAL_DEVICE_CAP_SHARED_MEMORY;
  out.module_formats = 1u << HAL_MODULE_FORMAT_HSACO;
  if (hiprtc_ != nullptr && valid_arch_name(arch_)) {
    out.module_formats |= 1u << HAL_MODULE_FORMAT_HAL_DIALECT;
  }
  const int cus = std::max(hip.multiProcessorCount, 0);
  out.compute_units = static_cast<uint32_t>(cus);
  out.total_memory_bytes = hip.totalGlobalMem;
  out.max_allocation_bytes = hip.totalGlobalMem;
  out.min_alignment_bytes = kNativeAlignment;
  out.max_threads_per_block = static_cast<uint32_t>(std::max(hip.maxThreadsPerBlock, 0));
  for (int i = 0; i < 3; ++i) {
    out.max_block_dims[i] = static_cast<uint32_t>(std::max(hip.maxThreadsDim[i], 0));
    out.max_grid_dims[i] = static_cast<uint32_t>(std::max(hip.maxGridSize[i], 0));
  }
  // AMD GPUs have no opt-in above the per-block LDS (64 KiB): a launch may
  // use all of it without raising a kernel attribute first.
  out.max_shared_memory_bytes = static_cast<uint32_t>(hip.sharedMemPerBlock);
  out.subgroup_size = static_cast<uint32_t>(hip.warpSize > 0 ? hip.warpSize : 64);
  // Declared peaks from the properties: one FMA (2 FLOP) per FP32 lane per
  // clock, and DDR memory (2 transfers per clock) over the bus. Clocks are kHz.
  const double clock_hz = hip.clockRate * 1e3;
  out.peak_fp32_flops = 2.0 * clock_hz * cus * fp32_lanes_per_cu(arch_);
  out.peak_memory_bandwidth = 2.0 * hip.memoryClockRate * 1e3 * hip.memoryBusWidth / 8.0;
}

Stream* Device::add_stream(std::unique_ptr<Stream> stream) {
  return streams_.add(std::move(stream));
}

void Device::remove_stream(Stream* stream) {
  streams_.take(stream);  // ~Stream synchronises and destroys the hipStream_t
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

hipError_t Device::release(hal_memory_kind_t kind, void* base) const {
  return kind == HAL_MEMORY_HOST ? api().hipHostFree(base) : api().hipFree(base);
}

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  if (const hipError_t bound = bind(); bound != hipSuccess) return fail(bound, "mem_alloc");
  // Alignments above the runtime's are carved out of a larger allocation.
  const bool carve = alignment > kNativeAlignment;
  const size_t bytes = carve ? size + alignment : size;
  if (bytes < size) {
    return report_.fail(HAL_ERROR_OUT_OF_MEMORY, 0,
                        "mem_alloc: %zu bytes aligned to %zu overflow the address space", size,
                        alignment);
  }
  void* base = nullptr;
  hipError_t result = hipSuccess;
  const char* call = "";
  switch (kind) {
    case HAL_MEMORY_DEVICE:
      call = "mem_alloc: hipMalloc";
      result = api().hipMalloc(&base, bytes);
      break;
    case HAL_MEMORY_HOST:
      call = "mem_alloc: hipHostMalloc";
      result = api().hipHostMalloc(&base, bytes, hipHostMallocPortable | hipHostMallocMapped);
      break;
    case HAL_MEMORY_SHARED:
      call = "mem_alloc: hipMallocManaged";
      result = api().hipMallocManaged(&base, bytes, hipMemAttachGlobal);
      break;
    default:
      return report_.fail(HAL_ERROR_UNSUPPORTED, 0, "mem_alloc: memory kind %d is unknown",
                          static_cast<int>(kind));
  }
  if (result != hipSuccess) {
    return report_.fail(
        result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL,
        static_cast<int64_t>(result), "%s of %zu bytes failed: %s", call, bytes,
        hip_error_text(result).c_str());
  }
  void* ptr = base;
  if (carve) {
    const auto address = reinterpret_cast<uintptr_t>(base);
    ptr = reinterpret_cast<void*>((address + alignment - 1) & ~(uintptr_t{alignment} - 1));
  }
  std::lock_guard lock(mutex_);
  allocations_.emplace(ptr, Allocation{kind, base});
  *out_ptr = ptr;
  return HAL_SUCCESS;
}

hal_result_t Device::free(void* ptr) {
  Allocation allocation{};
  {
    std::lock_guard lock(mutex_);
    const auto it = allocations_.find(ptr);
    if (it == allocations_.end()) {
      return report_.fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                          "mem_free: %p is not an allocation of this device", ptr);
    }
    allocation = it->second;
    allocations_.erase(it);
  }
  if (const hipError_t bound = bind(); bound != hipSuccess) return fail(bound, "mem_free");
  const hipError_t result = release(allocation.kind, allocation.base);
  return result == hipSuccess
             ? HAL_SUCCESS
             : fail(result, allocation.kind == HAL_MEMORY_HOST ? "mem_free: hipHostFree"
                                                               : "mem_free: hipFree");
}

hal_result_t Device::synchronize() {
  if (const hipError_t bound = bind(); bound != hipSuccess) {
    return fail(bound, "device_synchronize");
  }
  const hipError_t result = api().hipDeviceSynchronize();
  return result == hipSuccess
             ? HAL_SUCCESS
             : fail(HAL_ERROR_DEVICE_LOST, result, "device_synchronize: hipDeviceSynchronize");
}

void Device::release_all() {
  streams_.take_all();  // each synchronises and destroys its hipStream_t
  events_.take_all();
  modules_.take_all();
}

}  // namespace hal::hip
