// The memory of hal tensors: a caching allocator on hal_mem_alloc (device
// memory) and one for pinned host memory (HAL_MEMORY_HOST).
//
// hal_mem_free synchronises the whole device (SPEC §6), so freeing on every
// tensor's death would serialise the host with the device. Freed blocks are
// kept instead, per (device, stream, size class), and reused by later
// allocations on the same stream, whose work is ordered after every earlier
// use (CUDA's caching-allocator model). A block used on other streams
// (recordStream) becomes reusable only when events recorded on those streams
// at its free complete. empty_cache() gives every cached block back to HAL.
#ifndef HAL_TORCH_ALLOCATOR_HPP_
#define HAL_TORCH_ALLOCATOR_HPP_

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <cstdint>

namespace hal_torch {

// The allocator registered for the hal device type.
c10::DeviceAllocator& device_allocator();

// Pinned host memory: HAL_MEMORY_HOST of the first device that offers it, or
// plain host memory when none does (is_pinned then reports false).
c10::Allocator& host_allocator();

// True when |ptr| lies in a live block of host_allocator().
bool is_pinned_host_pointer(const void* ptr);

// An asynchronous copy on |stream| reads or writes pinned host memory at
// |ptr|: the block is not reused until the work enqueued so far on |stream|
// completes. A no-op for memory that is not a pinned block.
void record_host_use(const void* ptr, const c10::Stream& stream);

// Gives every cached (unused) device block of every device, and every cached
// host block, back to HAL.
void empty_cache();

struct MemoryStats {
  int64_t allocated_bytes = 0;  // in live tensors (rounded to the block size)
  int64_t peak_allocated_bytes = 0;
  int64_t reserved_bytes = 0;  // held from HAL: live + cached
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;  // calls that returned memory, since the last reset
  int64_t hal_allocations = 0;
  int64_t hal_frees = 0;
  int64_t alloc_retries = 0;  // allocations that first failed, then emptied the cache
  int64_t ooms = 0;
};
MemoryStats memory_stats(c10::DeviceIndex device);
void reset_peak_memory_stats(c10::DeviceIndex device);

}  // namespace hal_torch

#endif  // HAL_TORCH_ALLOCATOR_HPP_
