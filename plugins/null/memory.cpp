// Device memory (host RAM here) and the copy and fill operations.
#include <cstring>
#include <new>

#include "device.hpp"
#include "stream.hpp"

namespace hal::null_plugin {

hal_result_t Device::allocate(hal_memory_kind_t, size_t size, size_t alignment, void** out_ptr) {
  // The loader has checked size > 0, size <= max_allocation_bytes and that
  // |alignment| is a power of two of at least min_alignment_bytes. The budget
  // of the whole device is ours to enforce. Every kind is host RAM here.
  // TODO(null): HAL_MEMORY_HOST is pinned host memory and HAL_MEMORY_SHARED
  // migrates; declare only the kinds you serve.
  std::lock_guard lock(mutex_);
  if (size > kDeviceMemoryBytes - allocated_bytes_) {
    return report().fail(
        HAL_ERROR_OUT_OF_MEMORY, 0, "null device %u: %zu bytes requested, %llu of %llu bytes free",
        index_, size, static_cast<unsigned long long>(kDeviceMemoryBytes - allocated_bytes_),
        static_cast<unsigned long long>(kDeviceMemoryBytes));
  }
  // TODO(null): allocate from the device's memory instead of the host heap.
  void* ptr = ::operator new (size, std::align_val_t{alignment}, std::nothrow);
  if (ptr == nullptr) {
    return report().fail(HAL_ERROR_OUT_OF_MEMORY, 0, "null device %u: the host is out of memory",
                         index_);
  }
  allocations_.emplace(ptr, Allocation{size, alignment});
  allocated_bytes_ += size;
  *out_ptr = ptr;
  return HAL_SUCCESS;
}

hal_result_t Device::free(void* ptr) {
  // |ptr| is the base of a live allocation of this device (the loader checked)
  // and the device is idle.
  std::lock_guard lock(mutex_);
  const auto it = allocations_.find(ptr);
  if (it == allocations_.end()) {
    return report().fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                         "null device %u: %p is not an allocation of this device", index_, ptr);
  }
  allocated_bytes_ -= it->second.size;
  const std::align_val_t alignment{it->second.alignment};
  allocations_.erase(it);
  ::operator delete(ptr, alignment);
  return HAL_SUCCESS;
}

// The loader has bounds-checked both ranges and they do not overlap.
// TODO(null): enqueue a DMA on the stream's queue and return.
hal_result_t Stream::copy(void* dst, const void* src, size_t size) {
  std::memcpy(dst, src, size);
  return HAL_SUCCESS;
}

hal_result_t Stream::fill(void* dst, uint8_t value, size_t size) {
  std::memset(dst, value, size);
  return HAL_SUCCESS;
}

}  // namespace hal::null_plugin
