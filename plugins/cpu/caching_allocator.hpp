// The memory behind one cpu device: a caching allocator, because touching
// freshly mapped 4 KiB pages costs ~11 us each on the VMs we target and every
// munmap slows unrelated memory for a while (research/baselines.md 4b).
//
// - Small blocks (up to 256 KiB, and no bigger than a slab) come in
//   power-of-two size classes, carved from slabs (2 MiB transparent-huge-page
//   slabs; smaller ones for budgets under 32 MiB); a block of class c is
//   aligned to c. Slabs are aligned to their size, so a block's slab is its
//   address rounded down; each slab keeps one byte per 64-byte granule (the
//   class of the block that starts there, and whether it is free), and a
//   freed block holds the link of its class's free list in its first bytes,
//   checked against that byte before it is followed. So the bookkeeping of
//   a small block is 1/64 of its slab, charged with the slab.
// - Large blocks are their own mappings, rounded to 4 KiB pages (2 MiB
//   aligned, with MADV_HUGEPAGE, from 2 MiB up) and pre-faulted once when
//   mapped. Freed ones are cached and handed out again for requests that fit.
// - The budget (total_memory_bytes) bounds everything the allocator holds,
//   not only the bytes handed out: slabs with their granule maps, live and
//   cached large mappings, and kRecordBytes for each live small block, the
//   host memory that tracks it outside the slabs (the loader's record of the
//   allocation, SPEC.md §6): a budget filled with 64-byte blocks holds a
//   third of it in blocks, not four times it in bookkeeping. When a new slab
//   or mapping would pass the budget, cached mappings are unmapped and slabs
//   whose blocks are all free are released first; what still does not fit is
//   HAL_ERROR_OUT_OF_MEMORY, as on a GPU that is full. A large block is
//   charged its page-rounded size (its tracking is under 0.1% of it), so the
//   largest allocation that fits a fresh device is the budget rounded down
//   to a page.
// Thread-safe: one mutex, held for bookkeeping and slab mapping, never
// across the page faults of a new large mapping.
#ifndef HAL_PLUGINS_CPU_CACHING_ALLOCATOR_HPP_
#define HAL_PLUGINS_CPU_CACHING_ALLOCATOR_HPP_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace hal::cpu {

class CachingAllocator {
 public:
  static constexpr size_t kPage = 4096;
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kMinBlock = 64;
  static constexpr size_t kLargeThreshold = size_t{256} << 10;
  // Charged for each live small block beyond its class: the host memory that
  // tracks it outside its slab (the loader keeps a record of every
  // allocation, about 80 bytes of heap). A bound, not a measurement.
  static constexpr size_t kRecordBytes = 128;

  enum class Status { kOk, kOverBudget, kMapFailed };

  explicit CachingAllocator(uint64_t budget_bytes);
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
  // The largest single allocation a fresh device admits.
  uint64_t max_allocation() const { return budget_ / kPage * kPage; }
  uint64_t bytes_in_use() const;
  // Everything charged: slabs with their maps, live and cached large
  // mappings, and the live small blocks' records (<= budget).
  uint64_t bytes_held() const;

 private:
  struct Slab {
    char* base;
    size_t bytes;
    uint32_t live = 0;  // blocks handed out and not freed
    bool releasing = false;
    // Per 64-byte granule: 0 where no block starts, else 1 + the class of
    // the block that starts there, with kFreeBit while it is free.
    std::unique_ptr<uint8_t[]> granules;
  };
  static constexpr uint8_t kFreeBit = 0x80;
  static constexpr size_t kClassCount = 13;  // 64 B .. 256 KiB

  Status allocate_small(size_t bytes, void** out_ptr, int* out_errno);
  Status allocate_large(size_t bytes, size_t alignment, void** out_ptr, int* out_errno);
  // Makes room for |bytes| more held bytes, unmapping cached mappings and
  // empty slabs as needed, and counts them held. False when they cannot fit.
  bool reserve_locked(size_t bytes);
  void release_empty_slabs_locked();
  // The slab holding |ptr|, or nullptr.
  Slab* slab_of_locked(const void* ptr) const;
  // A free block of class |index| off its free list, or nullptr. A link
  // that does not lead to a free block of that class (memory written after
  // it was freed) ends the list: its blocks are not reused.
  void* pop_free_locked(size_t index);
  // Per slab: its map's bytes, charged with it.
  size_t map_bytes() const { return slab_bytes_ / kMinBlock; }

  const uint64_t budget_;
  const size_t slab_bytes_;   // size (and alignment) of every slab
  const size_t small_limit_;  // largest small block
  mutable std::mutex mutex_;
  uint64_t in_use_ = 0;  // bytes of live blocks
  uint64_t held_ = 0;    // bytes charged: slabs, maps, large mappings, records
  uint64_t cached_ = 0;  // bytes of large mappings in the cache
  std::unordered_map<void*, size_t> live_large_;      // live large blocks' sizes
  std::array<void*, kClassCount> free_small_{};       // free list heads
  std::map<uintptr_t, std::unique_ptr<Slab>> slabs_;  // by base
  Slab* bump_slab_ = nullptr;                         // the slab new blocks are carved from
  char* bump_ = nullptr;                              // its free tail
  std::multimap<size_t, void*> free_large_;           // cached mappings by size
};

// Maps |bytes| (a multiple of 2 MiB) aligned to |alignment| (>= 2 MiB), asks
// for transparent huge pages and faults every page in, so the first user
// does not pay for it. nullptr with errno on failure.
void* map_prefaulted(size_t bytes, size_t alignment);
void unmap(void* ptr, size_t bytes);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_CACHING_ALLOCATOR_HPP_
