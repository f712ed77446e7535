#include "memory.hpp"

#include <cstring>

#include "device.hpp"
#include "stream.hpp"
#include "hal_util/names.hpp"
#include "thread_pool.hpp"

namespace hal::cpu {
namespace {

// Below this a copy runs on one thread: waking a pool worker costs more than
// it saves. Above it, chunks are big enough to stream well and numerous
// enough to balance two or more workers.
constexpr size_t kParallelCopyBytes = size_t{4} << 20;
constexpr size_t kCopyChunkBytes = size_t{1} << 20;

struct CopyJob {
  char* dst;
  const char* src;
  size_t size;
};

void copy_chunks(void* context, uint64_t begin, uint64_t end, uint32_t /*worker*/) {
  const CopyJob& job = *static_cast<const CopyJob*>(context);
  const size_t first = begin * kCopyChunkBytes;
  const size_t last = std::min(job.size, end * kCopyChunkBytes);
  std::memcpy(job.dst + first, job.src + first, last - first);
}

struct FillJob {
  char* dst;
  size_t size;
  uint8_t value;
};

void fill_chunks(void* context, uint64_t begin, uint64_t end, uint32_t /*worker*/) {
  const FillJob& job = *static_cast<const FillJob*>(context);
  const size_t first = begin * kCopyChunkBytes;
  const size_t last = std::min(job.size, end * kCopyChunkBytes);
  std::memset(job.dst + first, job.value, last - first);
}

size_t chunk_count(size_t size) {
  return (size + kCopyChunkBytes - 1) / kCopyChunkBytes;
}

}  // namespace

void execute_copy(ThreadPool& pool, void* dst, const void* src, size_t size) {
  if (size < kParallelCopyBytes) {
    std::memcpy(dst, src, size);
    return;
  }
  CopyJob job{static_cast<char*>(dst), static_cast<const char*>(src), size};
  pool.parallel_for(chunk_count(size), 1, ParallelTask{&copy_chunks, &job});
}

void execute_fill(ThreadPool& pool, void* dst, uint8_t value, size_t size) {
  if (size < kParallelCopyBytes) {
    std::memset(dst, value, size);
    return;
  }
  FillJob job{static_cast<char*>(dst), size, value};
  pool.parallel_for(chunk_count(size), 1, ParallelTask{&fill_chunks, &job});
}

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  const plugin::ErrorReporter& report = this->report();
  if (kind != HAL_MEMORY_DEVICE && kind != HAL_MEMORY_HOST && kind != HAL_MEMORY_SHARED) {
    return report.fail(HAL_ERROR_INVALID_ARGUMENT, 0, "mem_alloc: unknown memory kind %d",
                       static_cast<int>(kind));
  }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return report.fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                       "mem_alloc: alignment %zu is not a power of two", alignment);
  }
  // Every kind is host memory here; all of them count against the budget
  // because they all take the host's physical memory.
  CachingAllocator& allocator = allocator_;
  int error = 0;
  switch (allocator.allocate(size, std::max(alignment, kMinAlignmentBytes), out_ptr, &error)) {
    case CachingAllocator::Status::kOk:
      if (plugin_.bounds_checks()) {
        try {
          plugin_.allocation_extents().add(*out_ptr, size);
        } catch (...) {
          allocator.deallocate(*out_ptr);
          throw;
        }
      }
      return HAL_SUCCESS;
    case CachingAllocator::Status::kOverBudget:
      return report.fail(
          HAL_ERROR_OUT_OF_MEMORY, 0,
          "mem_alloc: %zu bytes of %s memory (alignment %zu) do not fit: cpu "
          "device %u has %llu of %llu bytes in use (%llu held with its caches)",
          size, hal::util::short_name(hal::util::memory_kind_table(), static_cast<uint32_t>(kind)),
          alignment, index_, static_cast<unsigned long long>(allocator.bytes_in_use()),
          static_cast<unsigned long long>(allocator.budget()),
          static_cast<unsigned long long>(allocator.bytes_held()));
    case CachingAllocator::Status::kMapFailed:
      return report.fail(HAL_ERROR_OUT_OF_MEMORY, error,
                         "mem_alloc: mapping memory for %zu bytes failed: %s", size,
                         std::strerror(error));
  }
  return report.fail(HAL_ERROR_INTERNAL, 0, "mem_alloc: unreachable");
}

hal_result_t Device::free(void* ptr) {
  // The extent goes first: once the block is free, another thread may be
  // handed the same address and record its own extent.
  if (plugin_.bounds_checks()) plugin_.allocation_extents().remove(ptr);
  if (!allocator_.deallocate(ptr)) {
    return report().fail(HAL_ERROR_NOT_FOUND, 0,
                         "mem_free: %p is not a live allocation of cpu device %u", ptr, index_);
  }
  return HAL_SUCCESS;
}

hal_result_t Stream::copy(void* dst, const void* src, size_t size) {
  return enqueue(CopyCommand{dst, src, size});
}

hal_result_t Stream::fill(void* dst, uint8_t value, size_t size) {
  return enqueue(FillCommand{dst, size, value});
}

}  // namespace hal::cpu
