// The memory behind one cpu device: a caching allocator, because touching
// freshly mapped 4 KiB pages costs ~11 us each on the VMs we target and every
// munmap slows unrelated memory for a while (research/baselines.md 4b).
//
// - Small blocks (<= kLargeThreshold) come in power-of-two size classes,
//   carved from 2 MiB transparent-huge-page slabs; a block of class c is
//   aligned to c. Freed blocks go to their class's free list; slabs are only
//   unmapped when the allocator is destroyed.
// - Large blocks are their own mappings, rounded to 2 MiB, 2 MiB aligned,
//   MADV_HUGEPAGE and pre-faulted once when mapped. Freed ones are cached and
//   handed out again for requests that fit; the cache is trimmed (munmap)
//   only when live + cached memory would pass the budget, or at destruction.
// - The budget (total_memory_bytes) bounds the bytes handed out; exceeding it
//   is HAL_ERROR_OUT_OF_MEMORY, as a GPU that is full.
// Thread-safe: one mutex, held only for bookkeeping, never across page faults
// of a new mapping.
#ifndef HAL_PLUGINS_CPU_CACHING_ALLOCATOR_HPP_
#define HAL_PLUGINS_CPU_CACHING_ALLOCATOR_HPP_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace hal::cpu {

class CachingAllocator {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kMinBlock = 64;
  static constexpr size_t kLargeThreshold = size_t{256} << 10;

  enum class Status { kOk, kOverBudget, kMapFailed };

  explicit CachingAllocator(uint64_t budget_bytes) : budget_(budget_bytes) {}
  ~CachingAllocator() { release_all(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // |alignment| is a power of two. On kMapFailed, *out_errno says why.
  Status allocate(size_t size, size_t alignment, void** out_ptr, int* out_errno);
  // False when |ptr| is not a live block of this allocator.
  bool deallocate(void* ptr);
  // Unmaps everything, live blocks included (device close, plugin shutdown).
  void release_all();

  uint64_t budget() const { return budget_; }
  uint64_t bytes_in_use() const;
  uint64_t bytes_cached() const;

 private:
  struct Block {
    size_t bytes;  // what the block occupies (class size or mapping size)
    bool large;
  };
  static constexpr size_t kClassCount = 13;  // 64 B .. 256 KiB

  Status allocate_small(size_t bytes, void** out_ptr, int* out_errno);
  Status allocate_large(size_t bytes, size_t alignment, void** out_ptr, int* out_errno);
  void trim_cache_locked();

  const uint64_t budget_;
  mutable std::mutex mutex_;
  uint64_t in_use_ = 0;  // bytes of live blocks
  uint64_t cached_ = 0;  // bytes of large mappings in the cache
  std::unordered_map<void*, Block> live_;
  std::array<std::vector<void*>, kClassCount> free_small_;
  std::vector<std::pair<void*, size_t>> slabs_;  // every small-block slab mapping
  char* bump_ = nullptr;                         // free tail of the newest slab
  char* bump_end_ = nullptr;
  std::multimap<size_t, void*> free_large_;  // cached mappings by size
};

// Maps |bytes| (a multiple of 2 MiB) aligned to |alignment| (>= 2 MiB), asks
// for transparent huge pages and faults every page in, so the first user
// does not pay for it. nullptr with errno on failure.
void* map_prefaulted(size_t bytes, size_t alignment);
void unmap(void* ptr, size_t bytes);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_CACHING_ALLOCATOR_HPP_
