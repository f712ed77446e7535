#include "device.hpp"

#include <algorithm>
#include <cstring>

#include "module.hpp"
#include "ops/cublaslt.hpp"
#include "plugin.hpp"
#include "stream.hpp"

namespace hal::cuda {
namespace {

// CUDA allocations are at least this aligned (cuMemAlloc's documented 256).
constexpr size_t kNativeAlignment = 256;

}  // namespace

uint32_t fp32_lanes_per_sm(int major, int minor) {
  switch (major) {
    case 3:
      return 192;
    case 5:
      return 128;
    case 6:
      return minor == 0 ? 64 : 128;
    case 7:
      return 64;
    case 8:
      return minor == 0 ? 64 : 128;
    default:
      return 128;  // 9.x, 10.x, 12.x and later
  }
}

Device::Device(const plugin::ErrorReporter& report, const Driver& driver, const Nvrtc* nvrtc,
               ops::CublasLtLoader& blas_loader, const collective::Nccl* nccl, CUdevice handle,
               CUcontext context, uint32_t index)
    : report_(report),
      driver_(driver),
      nvrtc_(nvrtc),
      nccl_(nccl),
      handle_(handle),
      context_(context),
      index_(index),
      blas_(std::make_unique<ops::DeviceBlas>(blas_loader)) {
  read_properties();
}

Device::~Device() {
  release_all();
  // The cuBLASLt handle (if a matmul was planned) goes with the context
  // current, before the context is released.
  if (bind() == CUDA_SUCCESS) blas_.reset();
  std::lock_guard lock(mutex_);
  if (bind() == CUDA_SUCCESS) {
    for (const auto& [ptr, allocation] : allocations_) {
      if (allocation.kind == HAL_MEMORY_HOST) {
        api().cuMemFreeHost(allocation.base);
      } else {
        api().cuMemFree(reinterpret_cast<CUdeviceptr>(allocation.base));
      }
    }
  }
  allocations_.clear();
  api().cuDevicePrimaryCtxRelease(handle_);
}

hal_result_t Device::fail(CUresult result, const char* what) const {
  return fail(result_of(result), result, what);
}

hal_result_t Device::fail(hal_result_t mapped, CUresult result, const char* what) const {
  return report_.fail(mapped, static_cast<int64_t>(result), "%s: %s", what,
                      cu_error_text(&api(), result).c_str());
}

void Device::read_properties() {
  const DriverApi& cu = api();
  auto attribute = [&](CUdevice_attribute which, int fallback = 0) {
    int value = 0;
    return cu.cuDeviceGetAttribute(&value, which, handle_) == CUDA_SUCCESS ? value : fallback;
  };
  hal_device_properties_t& out = properties_;
  out.struct_size = sizeof(out);
  // Written in place (the struct is zeroed): NUL-terminated within the field.
  if (cu.cuDeviceGetName(out.name, sizeof(out.name) - 1, handle_) != CUDA_SUCCESS) {
    std::snprintf(out.name, sizeof(out.name), "CUDA device %u", index_);
  }
  plugin::copy_string(out.vendor, "NVIDIA");
  plugin::copy_string(out.plugin, kPluginName);
  const int version = driver_.version();
  const std::string driver_text =
      "CUDA driver " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  plugin::copy_string(out.driver_version, driver_text.c_str());
  CUuuid uuid{};
  if (cu.cuDeviceGetUuid(&uuid, handle_) == CUDA_SUCCESS) {
    std::memcpy(out.uuid, uuid.bytes, sizeof(out.uuid));
  }
  out.type = HAL_DEVICE_TYPE_GPU;
  cc_major_ = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  cc_minor_ = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  // HOST_CALLBACKS: cuLaunchHostFunc runs them on the driver's thread.
  out.capabilities = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                     HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_HOST_MEMORY |
                     HAL_DEVICE_CAP_STREAM_QUERY;
  // Collectives on NCCL (collective/), alltoallv with them (the plugin checks
  // that the ranks' counts agree before the data); without NCCL the loader's
  // host-staged ones.
  if (nccl_ != nullptr) out.capabilities |= HAL_DEVICE_CAP_COLLECTIVES | HAL_DEVICE_CAP_ALLTOALLV;
  if (attribute(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) != 0) {
    out.capabilities |= HAL_DEVICE_CAP_SHARED_MEMORY;
  }
  out.module_formats = (1u << HAL_MODULE_FORMAT_PTX) | (1u << HAL_MODULE_FORMAT_CUBIN);
  if (nvrtc_ != nullptr && nvrtc_->pick_arch(cc_major_, cc_minor_) != 0) {
    out.module_formats |= 1u << HAL_MODULE_FORMAT_HAL_DIALECT;
  }
  const int sms = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  out.compute_units = static_cast<uint32_t>(sms);
  size_t total = 0;
  cu.cuDeviceTotalMem(&total, handle_);
  out.total_memory_bytes = total;
  out.max_allocation_bytes = total;
  out.min_alignment_bytes = kNativeAlignment;
  out.max_threads_per_block =
      static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  out.max_block_dims[0] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X));
  out.max_block_dims[1] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y));
  out.max_block_dims[2] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z));
  out.max_grid_dims[0] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X));
  out.max_grid_dims[1] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y));
  out.max_grid_dims[2] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z));
  // The opt-in limit: launches above the default 48 KiB raise the kernel's
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first (launch_kernel).
  out.max_shared_memory_bytes =
      static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)));
  out.subgroup_size = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32));
  // Declared peaks from the attributes: one FMA (2 FLOP) per FP32 lane per
  // clock, and DDR memory (2 transfers per clock) over the bus. Clocks are kHz.
  const double clock_hz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) * 1e3;
  out.peak_fp32_flops = 2.0 * clock_hz * sms * fp32_lanes_per_sm(cc_major_, cc_minor_);
  const double memory_clock_hz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) * 1e3;
  const double bus_bits = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  out.peak_memory_bandwidth = 2.0 * memory_clock_hz * bus_bits / 8.0;
}

Stream* Device::add_stream(std::unique_ptr<Stream> stream) {
  return streams_.add(std::move(stream));
}

void Device::remove_stream(Stream* stream) {
  streams_.take(stream);  // ~Stream synchronises and destroys the CUstream
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

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  if (const CUresult bound = bind(); bound != CUDA_SUCCESS) return fail(bound, "mem_alloc");
  // Alignments above the driver's are carved out of a larger allocation.
  const bool carve = alignment > kNativeAlignment;
  const size_t bytes = carve ? size + alignment : size;
  if (bytes < size) {
    return report_.fail(HAL_ERROR_OUT_OF_MEMORY, 0,
                        "mem_alloc: %zu bytes aligned to %zu overflow the address space", size,
                        alignment);
  }
  void* base = nullptr;
  CUresult result = CUDA_SUCCESS;
  const char* call = "";
  switch (kind) {
    case HAL_MEMORY_DEVICE: {
      CUdeviceptr device_ptr = 0;
      call = "mem_alloc: cuMemAlloc";
      result = api().cuMemAlloc(&device_ptr, bytes);
      base = reinterpret_cast<void*>(device_ptr);
      break;
    }
    case HAL_MEMORY_HOST:
      call = "mem_alloc: cuMemHostAlloc";
      result =
          api().cuMemHostAlloc(&base, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
      break;
    case HAL_MEMORY_SHARED: {
      CUdeviceptr managed = 0;
      call = "mem_alloc: cuMemAllocManaged";
      result = api().cuMemAllocManaged(&managed, bytes, CU_MEM_ATTACH_GLOBAL);
      base = reinterpret_cast<void*>(managed);
      break;
    }
    default:
      return report_.fail(HAL_ERROR_UNSUPPORTED, 0, "mem_alloc: memory kind %d is unknown",
                          static_cast<int>(kind));
  }
  if (result != CUDA_SUCCESS) {
    return report_.fail(
        result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL,
        static_cast<int64_t>(result), "%s of %zu bytes failed: %s", call, bytes,
        cu_error_text(&api(), result).c_str());
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
  if (const CUresult bound = bind(); bound != CUDA_SUCCESS) return fail(bound, "mem_free");
  const CUresult result = allocation.kind == HAL_MEMORY_HOST
                              ? api().cuMemFreeHost(allocation.base)
                              : api().cuMemFree(reinterpret_cast<CUdeviceptr>(allocation.base));
  return result == CUDA_SUCCESS ? HAL_SUCCESS : fail(result, "mem_free");
}

hal_result_t Device::synchronize() {
  if (const CUresult bound = bind(); bound != CUDA_SUCCESS) {
    return fail(bound, "device_synchronize");
  }
  const CUresult result = api().cuCtxSynchronize();
  if (result != CUDA_SUCCESS) {
    return fail(HAL_ERROR_DEVICE_LOST, result, "device_synchronize: cuCtxSynchronize");
  }
  // A stream lost to a failed collective (SPEC §4.4) fails its device's synchronize too.
  hal_result_t lost = HAL_SUCCESS;
  streams_.for_each([&](const std::unique_ptr<Stream>& stream) {
    if (lost == HAL_SUCCESS) lost = stream->report_fault("device_synchronize");
  });
  return lost;
}

void Device::release_all() {
  streams_.take_all();  // each synchronises and destroys its CUstream
  events_.take_all();
  modules_.take_all();
}

}  // namespace hal::cuda
