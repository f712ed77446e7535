#include "caching_allocator.hpp"

#include <sys/mman.h>

#include <bit>
#include <cerrno>

namespace hal::cpu {
namespace {

size_t round_up(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

size_t class_index(size_t bytes) {
  if (bytes <= CachingAllocator::kMinBlock) return 0;
  return static_cast<size_t>(std::countr_zero(std::bit_ceil(bytes))) -
         static_cast<size_t>(std::countr_zero(CachingAllocator::kMinBlock));
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels fall back to touching pages
#endif

}  // namespace

void* map_prefaulted(size_t bytes, size_t alignment) {
  // Over-map and trim so the block starts on a huge-page (or stricter)
  // boundary: THP only backs 2 MiB-aligned ranges. The trims happen once per
  // mapping, never on the hot path.
  const size_t span = bytes + alignment;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = aligned + bytes;
  if (start + span > tail) munmap(reinterpret_cast<void*>(tail), start + span - tail);
  void* block = reinterpret_cast<void*>(aligned);
  madvise(block, bytes, MADV_HUGEPAGE);  // a hint: fine if THP is off
  if (madvise(block, bytes, MADV_POPULATE_WRITE) != 0) {
    volatile char* page = static_cast<char*>(block);
    for (size_t offset = 0; offset < bytes; offset += 4096) page[offset] = 0;
  }
  return block;
}

void unmap(void* ptr, size_t bytes) {
  munmap(ptr, bytes);
}

CachingAllocator::Status CachingAllocator::allocate(size_t size, size_t alignment, void** out_ptr,
                                                    int* out_errno) {
  // Requests too large to round are over budget anyway.
  if (size > budget_ || alignment > budget_) return Status::kOverBudget;
  const size_t bytes = size < alignment ? alignment : size;
  if (bytes <= kLargeThreshold)
    return allocate_small(std::max(bytes, kMinBlock), out_ptr, out_errno);
  return allocate_large(round_up(bytes, kHugePage), std::max(alignment, kHugePage), out_ptr,
                        out_errno);
}

CachingAllocator::Status CachingAllocator::allocate_small(size_t bytes, void** out_ptr,
                                                          int* out_errno) {
  const size_t block_bytes = std::bit_ceil(bytes);
  std::vector<void*>& free_list = free_small_[class_index(block_bytes)];
  std::lock_guard lock(mutex_);
  if (in_use_ + block_bytes > budget_) return Status::kOverBudget;
  void* block = nullptr;
  if (!free_list.empty()) {
    block = free_list.back();
    free_list.pop_back();
  } else {
    // Carve from the newest slab at the class's natural alignment; what the
    // alignment skips is lost, which costs little since classes repeat.
    auto aligned =
        reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(bump_), block_bytes));
    if (bump_ == nullptr || aligned + block_bytes > bump_end_) {
      void* slab = map_prefaulted(kHugePage, kHugePage);
      if (slab == nullptr) {
        *out_errno = errno;
        return Status::kMapFailed;
      }
      slabs_.emplace_back(slab, kHugePage);
      bump_ = static_cast<char*>(slab);
      bump_end_ = bump_ + kHugePage;
      aligned = bump_;
    }
    block = aligned;
    bump_ = aligned + block_bytes;
  }
  live_.emplace(block, Block{block_bytes, false});
  in_use_ += block_bytes;
  *out_ptr = block;
  return Status::kOk;
}

CachingAllocator::Status CachingAllocator::allocate_large(size_t bytes, size_t alignment,
                                                          void** out_ptr, int* out_errno) {
  {
    std::lock_guard lock(mutex_);
    if (in_use_ + bytes > budget_) return Status::kOverBudget;
    // Best fit among cached mappings, accepting up to twice the size so a
    // big cached block is not wasted on a small request.
    for (auto it = free_large_.lower_bound(bytes);
         it != free_large_.end() && it->first <= 2 * bytes; ++it) {
      if (reinterpret_cast<uintptr_t>(it->second) % alignment != 0) continue;
      void* block = it->second;
      const size_t block_bytes = it->first;
      free_large_.erase(it);
      cached_ -= block_bytes;
      live_.emplace(block, Block{block_bytes, true});
      in_use_ += block_bytes;
      *out_ptr = block;
      return Status::kOk;
    }
    // Reserve the bytes now so concurrent callers cannot overrun the budget
    // while this one maps without the lock.
    in_use_ += bytes;
    trim_cache_locked();
  }
  void* block = map_prefaulted(bytes, alignment);
  std::lock_guard lock(mutex_);
  if (block == nullptr) {
    in_use_ -= bytes;
    *out_errno = errno;
    return Status::kMapFailed;
  }
  live_.emplace(block, Block{bytes, true});
  *out_ptr = block;
  return Status::kOk;
}

void CachingAllocator::trim_cache_locked() {
  // Give cached mappings back to the system, largest first, until live plus
  // cached memory fits the budget again; physical memory is what the budget
  // protects.
  while (!free_large_.empty() && in_use_ + cached_ > budget_) {
    auto largest = std::prev(free_large_.end());
    unmap(largest->second, largest->first);
    cached_ -= largest->first;
    free_large_.erase(largest);
  }
}

bool CachingAllocator::deallocate(void* ptr) {
  std::lock_guard lock(mutex_);
  const auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  const Block block = it->second;
  live_.erase(it);
  in_use_ -= block.bytes;
  if (block.large) {
    free_large_.emplace(block.bytes, ptr);
    cached_ += block.bytes;
  } else {
    free_small_[class_index(block.bytes)].push_back(ptr);
  }
  return true;
}

void CachingAllocator::release_all() {
  std::lock_guard lock(mutex_);
  for (const auto& [ptr, block] : live_) {
    if (block.large) unmap(ptr, block.bytes);
  }
  for (const auto& [bytes, ptr] : free_large_) unmap(ptr, bytes);
  for (const auto& [ptr, bytes] : slabs_) unmap(ptr, bytes);
  live_.clear();
  free_large_.clear();
  slabs_.clear();
  for (std::vector<void*>& list : free_small_) list.clear();
  bump_ = bump_end_ = nullptr;
  in_use_ = cached_ = 0;
}

uint64_t CachingAllocator::bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

uint64_t CachingAllocator::bytes_cached() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

}  // namespace hal::cpu
