// Memory of the level_zero plugin: USM allocations (device, host, shared),
// and the copies and fills a stream appends to its command list.
#include <memory>

#include "device.hpp"
#include "stream.hpp"

namespace hal::level_zero {

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  // The loader passes a power of two of at least min_alignment_bytes, which
  // zeMemAlloc* take as is.
  ze_device_mem_alloc_desc_t device_desc{};
  device_desc.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC;
  ze_host_mem_alloc_desc_t host_desc{};
  host_desc.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC;
  void* ptr = nullptr;
  ze_result_t result = ZE_RESULT_SUCCESS;
  const char* call = "";
  switch (kind) {
    case HAL_MEMORY_DEVICE:
      call = "mem_alloc: zeMemAllocDevice";
      result = api().zeMemAllocDevice(context(), &device_desc, size, alignment, handle_, &ptr);
      break;
    case HAL_MEMORY_HOST:
      call = "mem_alloc: zeMemAllocHost";
      result = api().zeMemAllocHost(context(), &host_desc, size, alignment, &ptr);
      break;
    case HAL_MEMORY_SHARED:
      call = "mem_alloc: zeMemAllocShared";
      result = api().zeMemAllocShared(context(), &device_desc, &host_desc, size, alignment, handle_,
                                      &ptr);
      break;
    default:
      return report().fail(HAL_ERROR_UNSUPPORTED, 0, "mem_alloc: memory kind %d is unknown",
                           static_cast<int>(kind));
  }
  if (result == ZE_RESULT_SUCCESS && ptr == nullptr) result = ZE_RESULT_ERROR_UNKNOWN;
  if (result != ZE_RESULT_SUCCESS) {
    return report().fail(
        result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL,
        static_cast<int64_t>(result), "%s of %zu bytes aligned to %zu failed: %s", call, size,
        alignment, ze_error_text(result).c_str());
  }
  try {
    *out_ptr = allocations_.add(kind, ptr, alignment);
  } catch (...) {
    api().zeMemFree(context(), ptr);
    throw;
  }
  return HAL_SUCCESS;
}

hal_result_t Device::free(void* ptr) {
  if (plugin::Allocations::Block block{}; !allocations_.take(ptr, block)) {
    return report().fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                         "mem_free: %p is not an allocation of this device", ptr);
  }
  const ze_result_t result = api().zeMemFree(context(), ptr);
  return result == ZE_RESULT_SUCCESS ? HAL_SUCCESS : fail(result, "mem_free: zeMemFree");
}

hal_result_t Stream::copy(void* dst, const void* src, size_t size) {
  // USM: the driver tells device, host, shared and system memory apart.
  const ze_result_t result = append([&](ze_command_list_handle_t list) {
    return device().api().zeCommandListAppendMemoryCopy(list, dst, src, size, nullptr, 0, nullptr);
  });
  return result == ZE_RESULT_SUCCESS
             ? HAL_SUCCESS
             : device().fail(result, "memcpy_async: zeCommandListAppendMemoryCopy");
}

hal_result_t Stream::fill(void* dst, uint8_t value, size_t size) {
  // The specification does not say the pattern is copied at append: it lives
  // with the stream until the fill is done.
  auto pattern = std::make_shared<const uint8_t>(value);
  const uint8_t* bytes = pattern.get();
  const ze_result_t result = append(
      [&](ze_command_list_handle_t list) {
        return device().api().zeCommandListAppendMemoryFill(list, dst, bytes, 1, size, nullptr, 0,
                                                            nullptr);
      },
      std::move(pattern));
  return result == ZE_RESULT_SUCCESS
             ? HAL_SUCCESS
             : device().fail(result, "memset_async: zeCommandListAppendMemoryFill");
}

}  // namespace hal::level_zero
