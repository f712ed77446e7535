// Memory of the hip plugin: device, pinned host and managed allocations
// (over-aligned ones carved out of larger ones), and the copies and fills a
// stream enqueues.
#include <cstdint>

#include "device.hpp"
#include "stream.hpp"

namespace hal::hip {

HipStatus Device::release(hal_memory_kind_t kind, void* base) const {
  return kind == HAL_MEMORY_HOST ? api().hipHostFree(base) : api().hipFree(base);
}

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  if (const HipStatus bound = bind(); bound != hipSuccess) return fail(bound, "mem_alloc");
  // Alignments above the runtime's are carved out of a larger allocation.
  const size_t bytes = allocations_.block_bytes(size, alignment);
  if (bytes == 0) {
    return report().fail(HAL_ERROR_OUT_OF_MEMORY, 0,
                         "mem_alloc: %zu bytes aligned to %zu overflow the address space", size,
                         alignment);
  }
  void* base = nullptr;
  HipStatus result = hipSuccess;
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
      return report().fail(HAL_ERROR_UNSUPPORTED, 0, "mem_alloc: memory kind %d is unknown",
                           static_cast<int>(kind));
  }
  if (result != hipSuccess) {
    return report().fail(
        result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL,
        static_cast<int64_t>(result), "%s of %zu bytes failed: %s", call, bytes,
        hip_error_text(result).c_str());
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
  if (const HipStatus bound = bind(); bound != hipSuccess) return fail(bound, "mem_free");
  const HipStatus result = release(block.kind, block.base);
  return result == hipSuccess ? HAL_SUCCESS
                              : fail(result, block.kind == HAL_MEMORY_HOST ? "mem_free: hipHostFree"
                                                                           : "mem_free: hipFree");
}

hal_result_t Stream::copy(void* dst, const void* src, size_t size) {
  // hipMemcpyDefault: unified addressing tells device, pinned, managed and
  // pageable host memory apart by the pointer.
  return device().run("memcpy_async: hipMemcpyAsync", [&](const RuntimeApi& hip) {
    return hip.hipMemcpyAsync(dst, src, size, hipMemcpyDefault, stream_);
  });
}

hal_result_t Stream::fill(void* dst, uint8_t value, size_t size) {
  return device().run("memset_async: hipMemsetAsync", [&](const RuntimeApi& hip) {
    return hip.hipMemsetAsync(dst, value, size, stream_);
  });
}

}  // namespace hal::hip
