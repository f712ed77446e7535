// Every live allocation: what hal_mem_free, hal_mem_get_info and the bounds
// checks of copies and fills look up.
#pragma once

#include <hal/memory.h>

#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>
#include <vector>

namespace hal::loader {

struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;
  hal_device_t device = nullptr;
  hal_memory_kind_t kind = HAL_MEMORY_DEVICE;

  bool contains(uintptr_t address) const { return address >= base && address - base < size; }
};

// Ordered by base address under a reader-writer lock: lookups (every copy)
// share it, alloc and free take it alone.
class AllocationTable {
 public:
  // False when [base, base + size) overlaps a live allocation (an exact-base
  // duplicate included): SPEC.md section 6 promises disjoint allocations, and
  // a plugin that hands out overlapping memory would corrupt both users.
  bool insert(const Allocation& allocation);

  // The allocation whose [base, base + size) holds |address|.
  std::optional<Allocation> find_containing(uintptr_t address) const;

  // The allocation with the lowest base at or above |address|.
  std::optional<Allocation> find_next(uintptr_t address) const;

  // Removes and returns the allocation based exactly at |base|.
  std::optional<Allocation> extract(uintptr_t base);

  // Removes every allocation (hal_shutdown).
  std::vector<Allocation> take_all();

 private:
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, Allocation> by_base_;
};

}  // namespace hal::loader
