#include "caching_allocator.hpp"

#include <sys/mman.h>

#include <bit>
#include <algorithm>
#include <cerrno>
#include <cstring>

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

namespace {

// Slabs are 2 MiB (a transparent huge page) unless the budget is small:
// then a sixteenth of it, so small blocks never take more than a slice.
size_t slab_size_for(uint64_t budget) {
  const uint64_t share = budget / 16;
  if (share >= CachingAllocator::kHugePage) return CachingAllocator::kHugePage;
  const size_t floor = size_t{64} << 10;
  return share <= floor ? floor : static_cast<size_t>(std::bit_floor(share));
}

}  // namespace

CachingAllocator::CachingAllocator(uint64_t budget_bytes)
    : budget_(budget_bytes),
      slab_bytes_(slab_size_for(budget_bytes)),
      small_limit_(std::min(kLargeThreshold, slab_bytes_)) {}

CachingAllocator::Status CachingAllocator::allocate(size_t size, size_t alignment, void** out_ptr,
                                                    int* out_errno) {
  // Requests too large to round are over budget anyway.
  if (size > budget_ || alignment > budget_) return Status::kOverBudget;
  const size_t bytes = size < alignment ? alignment : size;
  if (bytes <= small_limit_) return allocate_small(std::max(bytes, kMinBlock), out_ptr, out_errno);
  const size_t mapped = round_up(bytes, kPage);
  const size_t natural = mapped >= kHugePage ? kHugePage : kPage;
  return allocate_large(mapped, std::max(alignment, natural), out_ptr, out_errno);
}

bool CachingAllocator::reserve_locked(size_t bytes) {
  if (bytes > budget_) return false;
  // Cheapest first: cached mappings (largest first), then empty slabs.
  while (held_ + bytes > budget_ && !free_large_.empty()) {
    auto largest = std::prev(free_large_.end());
    unmap(largest->second, largest->first);
    cached_ -= largest->first;
    held_ -= largest->first;
    free_large_.erase(largest);
  }
  if (held_ + bytes > budget_) release_empty_slabs_locked();
  if (held_ + bytes > budget_) return false;
  held_ += bytes;
  return true;
}

CachingAllocator::Slab* CachingAllocator::slab_of_locked(const void* ptr) const {
  const uintptr_t base = reinterpret_cast<uintptr_t>(ptr) & ~(uintptr_t{slab_bytes_} - 1);
  const auto found = slabs_.find(base);
  return found != slabs_.end() ? found->second.get() : nullptr;
}

void* CachingAllocator::pop_free_locked(size_t index) {
  void* block = free_small_[index];
  if (block == nullptr) return nullptr;
  const uint8_t free_mark = static_cast<uint8_t>(kFreeBit | (index + 1));
  void* next = nullptr;
  std::memcpy(&next, block, sizeof(next));
  // The next link is followed only if it leads to a free block of this
  // class; anything else (the caller wrote to freed memory) ends the list.
  if (next != nullptr) {
    const Slab* slab = slab_of_locked(next);
    const size_t offset =
        slab != nullptr ? static_cast<size_t>(static_cast<char*>(next) - slab->base) : 0;
    if (slab == nullptr || offset % kMinBlock != 0 ||
        slab->granules[offset / kMinBlock] != free_mark) {
      next = nullptr;
    }
  }
  free_small_[index] = next;
  return block;
}

void CachingAllocator::release_empty_slabs_locked() {
  bool any = false;
  for (const auto& [base, slab] : slabs_) {
    slab->releasing = slab->live == 0;
    any = any || slab->releasing;
  }
  if (!any) return;
  // Each free list keeps the blocks of the slabs that stay.
  for (size_t index = 0; index < kClassCount; ++index) {
    std::vector<void*> kept;
    while (void* block = pop_free_locked(index)) {
      if (!slab_of_locked(block)->releasing) kept.push_back(block);
    }
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
      std::memcpy(*it, &free_small_[index], sizeof(void*));
      free_small_[index] = *it;
    }
  }
  std::erase_if(slabs_, [&](const auto& entry) {
    Slab& slab = *entry.second;
    if (!slab.releasing) return false;
    if (&slab == bump_slab_) {
      bump_slab_ = nullptr;
      bump_ = nullptr;
    }
    unmap(slab.base, slab.bytes);
    held_ -= slab.bytes + map_bytes();
    return true;
  });
}

CachingAllocator::Status CachingAllocator::allocate_small(size_t bytes, void** out_ptr,
                                                          int* out_errno) {
  const size_t block_bytes = std::bit_ceil(bytes);
  const size_t index = class_index(block_bytes);
  std::lock_guard lock(mutex_);
  // The block's record is charged first: it is what a full budget of tiny
  // blocks runs out of.
  if (!reserve_locked(kRecordBytes)) return Status::kOverBudget;
  void* block = pop_free_locked(index);
  Slab* slab = block != nullptr ? slab_of_locked(block) : nullptr;
  if (block == nullptr) {
    // Carve from the newest slab at the class's natural alignment; what the
    // alignment skips is lost, which costs little since classes repeat.
    char* aligned = nullptr;
    if (bump_slab_ != nullptr) {
      aligned = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(bump_), block_bytes));
    }
    if (bump_slab_ == nullptr || aligned + block_bytes > bump_slab_->base + bump_slab_->bytes) {
      if (!reserve_locked(slab_bytes_ + map_bytes())) {
        held_ -= kRecordBytes;
        return Status::kOverBudget;
      }
      auto fresh = std::make_unique<Slab>();
      fresh->bytes = slab_bytes_;
      fresh->base = static_cast<char*>(map_prefaulted(slab_bytes_, slab_bytes_));
      if (fresh->base == nullptr) {
        *out_errno = errno;
        held_ -= slab_bytes_ + map_bytes() + kRecordBytes;
        return Status::kMapFailed;
      }
      fresh->granules = std::make_unique<uint8_t[]>(map_bytes());
      bump_slab_ = fresh.get();
      slabs_.emplace(reinterpret_cast<uintptr_t>(fresh->base), std::move(fresh));
      aligned = bump_slab_->base;
    }
    block = aligned;
    slab = bump_slab_;
    bump_ = aligned + block_bytes;
  }
  slab->granules[static_cast<size_t>(static_cast<char*>(block) - slab->base) / kMinBlock] =
      static_cast<uint8_t>(index + 1);
  ++slab->live;
  in_use_ += block_bytes;
  *out_ptr = block;
  return Status::kOk;
}

CachingAllocator::Status CachingAllocator::allocate_large(size_t bytes, size_t alignment,
                                                          void** out_ptr, int* out_errno) {
  {
    std::lock_guard lock(mutex_);
    // Best fit among cached mappings, accepting up to twice the size so a
    // big cached block is not wasted on a small request.
    for (auto it = free_large_.lower_bound(bytes);
         it != free_large_.end() && it->first <= 2 * bytes; ++it) {
      if (reinterpret_cast<uintptr_t>(it->second) % alignment != 0) continue;
      void* block = it->second;
      const size_t block_bytes = it->first;
      free_large_.erase(it);
      cached_ -= block_bytes;
      live_large_.emplace(block, block_bytes);
      in_use_ += block_bytes;
      *out_ptr = block;
      return Status::kOk;
    }
    // Counted held now so concurrent callers cannot overrun the budget
    // while this one maps without the lock.
    if (!reserve_locked(bytes)) return Status::kOverBudget;
    in_use_ += bytes;
  }
  void* block = map_prefaulted(bytes, alignment);
  std::lock_guard lock(mutex_);
  if (block == nullptr) {
    in_use_ -= bytes;
    held_ -= bytes;
    *out_errno = errno;
    return Status::kMapFailed;
  }
  live_large_.emplace(block, bytes);
  *out_ptr = block;
  return Status::kOk;
}

bool CachingAllocator::deallocate(void* ptr) {
  std::lock_guard lock(mutex_);
  if (Slab* slab = slab_of_locked(ptr)) {
    const size_t offset = static_cast<size_t>(static_cast<char*>(ptr) - slab->base);
    if (offset % kMinBlock != 0) return false;
    uint8_t& granule = slab->granules[offset / kMinBlock];
    if (granule == 0 || (granule & kFreeBit) != 0) return false;  // no live block starts here
    const size_t index = granule - 1u;
    granule = static_cast<uint8_t>(granule | kFreeBit);
    std::memcpy(ptr, &free_small_[index], sizeof(void*));
    free_small_[index] = ptr;
    --slab->live;
    in_use_ -= kMinBlock << index;
    held_ -= kRecordBytes;
    return true;
  }
  const auto it = live_large_.find(ptr);
  if (it == live_large_.end()) return false;
  const size_t bytes = it->second;
  live_large_.erase(it);
  in_use_ -= bytes;
  free_large_.emplace(bytes, ptr);
  cached_ += bytes;
  return true;
}

void CachingAllocator::release_all() {
  std::lock_guard lock(mutex_);
  for (const auto& [ptr, bytes] : live_large_) unmap(ptr, bytes);
  for (const auto& [bytes, ptr] : free_large_) unmap(ptr, bytes);
  for (const auto& [base, slab] : slabs_) unmap(slab->base, slab->bytes);
  live_large_.clear();
  free_large_.clear();
  slabs_.clear();
  free_small_.fill(nullptr);
  bump_slab_ = nullptr;
  bump_ = nullptr;
  in_use_ = held_ = cached_ = 0;
}

uint64_t CachingAllocator::bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

uint64_t CachingAllocator::bytes_held() const {
  std::lock_guard lock(mutex_);
  return held_;
}

}  // namespace hal::cpu
