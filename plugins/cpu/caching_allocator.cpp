#include "caching_allocator.hpp"

#include <sys/mman.h>

#include <bit>
#include <algorithm>
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

void CachingAllocator::release_empty_slabs_locked() {
  bool any = false;
  for (const std::unique_ptr<Slab>& slab : slabs_) {
    slab->releasing = slab->live == 0;
    any = any || slab->releasing;
  }
  if (!any) return;
  for (std::vector<FreeBlock>& list : free_small_) {
    std::erase_if(list, [](const FreeBlock& block) { return block.slab->releasing; });
  }
  std::erase_if(slabs_, [&](const std::unique_ptr<Slab>& slab) {
    if (!slab->releasing) return false;
    if (slab.get() == bump_slab_) {
      bump_slab_ = nullptr;
      bump_ = nullptr;
    }
    unmap(slab->base, slab->bytes);
    held_ -= slab->bytes;
    return true;
  });
}

CachingAllocator::Status CachingAllocator::allocate_small(size_t bytes, void** out_ptr,
                                                          int* out_errno) {
  const size_t block_bytes = std::bit_ceil(bytes);
  std::vector<FreeBlock>& free_list = free_small_[class_index(block_bytes)];
  std::lock_guard lock(mutex_);
  FreeBlock block{};
  if (!free_list.empty()) {
    block = free_list.back();
    free_list.pop_back();
  } else {
    // Carve from the newest slab at the class's natural alignment; what the
    // alignment skips is lost, which costs little since classes repeat.
    char* aligned = nullptr;
    if (bump_slab_ != nullptr) {
      aligned = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(bump_), block_bytes));
    }
    if (bump_slab_ == nullptr || aligned + block_bytes > bump_slab_->base + bump_slab_->bytes) {
      if (!reserve_locked(slab_bytes_)) return Status::kOverBudget;
      auto slab = std::make_unique<Slab>();
      slab->bytes = slab_bytes_;
      slab->base = static_cast<char*>(map_prefaulted(slab_bytes_, slab_bytes_));
      if (slab->base == nullptr) {
        *out_errno = errno;
        held_ -= slab_bytes_;
        return Status::kMapFailed;
      }
      slabs_.push_back(std::move(slab));
      bump_slab_ = slabs_.back().get();
      aligned = bump_slab_->base;
    }
    block = FreeBlock{aligned, bump_slab_};
    bump_ = aligned + block_bytes;
  }
  live_.emplace(block.ptr, Block{block_bytes, block.slab});
  ++block.slab->live;
  in_use_ += block_bytes;
  *out_ptr = block.ptr;
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
      live_.emplace(block, Block{block_bytes, nullptr});
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
  live_.emplace(block, Block{bytes, nullptr});
  *out_ptr = block;
  return Status::kOk;
}

bool CachingAllocator::deallocate(void* ptr) {
  std::lock_guard lock(mutex_);
  const auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  const Block block = it->second;
  live_.erase(it);
  in_use_ -= block.bytes;
  if (block.slab == nullptr) {
    free_large_.emplace(block.bytes, ptr);
    cached_ += block.bytes;
  } else {
    --block.slab->live;
    free_small_[class_index(block.bytes)].push_back(FreeBlock{ptr, block.slab});
  }
  return true;
}

void CachingAllocator::release_all() {
  std::lock_guard lock(mutex_);
  for (const auto& [ptr, block] : live_) {
    if (block.slab == nullptr) unmap(ptr, block.bytes);
  }
  for (const auto& [bytes, ptr] : free_large_) unmap(ptr, bytes);
  for (const std::unique_ptr<Slab>& slab : slabs_) unmap(slab->base, slab->bytes);
  live_.clear();
  free_large_.clear();
  slabs_.clear();
  for (std::vector<FreeBlock>& list : free_small_) list.clear();
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
