// Memory of the cuda plugin: device, pinned host and managed allocations
// (over-aligned ones carved out of larger ones), and the copies and fills a
// stream enqueues.
#include <cstdint>

#include "device.hpp"
#include "stream.hpp"

namespace hal::cuda {

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  if (const CUresult bound = bind(); bound != CUDA_SUCCESS) return fail(bound, "mem_alloc");
  // Alignments above the driver's are carved out of a larger allocation.
  const size_t bytes = allocations_.block_bytes(size, alignment);
  if (bytes == 0) {
    return report().fail(HAL_ERROR_OUT_OF_MEMORY, 0,
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
      return report().fail(HAL_ERROR_UNSUPPORTED, 0, "mem_alloc: memory kind %d is unknown",
                           static_cast<int>(kind));
  }
  if (result != CUDA_SUCCESS) {
    return report().fail(
        result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL,
        static_cast<int64_t>(result), "%s of %zu bytes failed: %s", call, bytes,
        cu_error_text(&api(), result).c_str());
  }
  *out_ptr = allocations_.add(kind, base, alignment);
  return HAL_SUCCESS;
}

hal_result_t Device::free(void* ptr) {
  plugin::Allocations::Block block{};
  if (!allocations_.take(ptr, block)) {
    return report().fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                         "mem_free: %p is not an allocation of this device", ptr);
  }
  if (const CUresult bound = bind(); bound != CUDA_SUCCESS) return fail(bound, "mem_free");
  const CUresult result = release(block.kind, block.base);
  return result == CUDA_SUCCESS ? HAL_SUCCESS : fail(result, "mem_free");
}

CUresult Device::release(hal_memory_kind_t kind, void* base) const {
  return kind == HAL_MEMORY_HOST ? api().cuMemFreeHost(base)
                                 : api().cuMemFree(reinterpret_cast<CUdeviceptr>(base));
}

hal_result_t Stream::copy(void* dst, const void* src, size_t size) {
  // Unified addressing: the driver tells device, pinned, managed and
  // pageable host memory apart by the pointer.
  return device().run("memcpy_async: cuMemcpyAsync", [&](const DriverApi& cu) {
    return cu.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
                            size, stream_);
  });
}

hal_result_t Stream::fill(void* dst, uint8_t value, size_t size) {
  return device().run("memset_async: cuMemsetD8Async", [&](const DriverApi& cu) {
    return cu.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(dst), value, size, stream_);
  });
}

}  // namespace hal::cuda
