// Every live allocation, and the ones freed last: what hal_mem_free,
// hal_mem_get_info and the bounds checks of copies, fills, collectives and
// launches look up.
#pragma once

#include <hal/memory.h>

#include <cstdint>
#include <deque>
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
  // Freed by hal_mem_free and held back from the plugin (SPEC.md §6, "Freed
  // memory"): no call takes it, and nothing else can be handed out there.
  bool freed = false;

  bool contains(uintptr_t address) const { return address >= base && address - base < size; }
};

// Ordered by base address under a reader-writer lock: lookups (every copy)
// share it, alloc and free take it alone.
//
// Freed allocations stay in the table for a while, marked freed, before the
// loader gives them back to their plugin: until then the plugin cannot hand
// the memory out again and the process heap cannot reuse it, so a freed
// pointer that comes back is recognised for certain and refused. The window
// is bounded: at most kMaxFreed allocations and kMaxFreedBytes bytes; an
// allocation bigger than that is given back at once and not remembered.
class AllocationTable {
 public:
  static constexpr size_t kMaxFreed = 256;
  static constexpr size_t kMaxFreedBytes = size_t{64} << 20;

  // False when [base, base + size) overlaps an allocation of the table, live
  // or freed (an exact-base duplicate included): SPEC.md section 6 promises
  // disjoint allocations, and a plugin that hands out overlapping memory
  // would corrupt both users.
  bool insert(const Allocation& allocation);

  // The live allocation whose [base, base + size) holds |address|.
  std::optional<Allocation> find_containing(uintptr_t address) const;
  // The freed allocation (still held back) whose range holds |address|.
  std::optional<Allocation> find_freed_containing(uintptr_t address) const;

  // The live allocation with the lowest base at or above |address|.
  std::optional<Allocation> find_next(uintptr_t address) const;

  // Removes and returns the live allocation based exactly at |base|.
  std::optional<Allocation> extract(uintptr_t base);

  // Keeps |allocation| (extracted, its device drained) as freed. Returns
  // what must now go back to the plugins: the oldest freed allocations past
  // the window, or |allocation| itself when it alone exceeds it.
  std::vector<Allocation> hold_freed(Allocation allocation);

  // Removes the freed allocations of |device| (all devices for nullptr), to
  // give back to the plugin: a plugin out of memory gets them back first.
  std::vector<Allocation> take_freed(hal_device_t device);

  // Removes every allocation, live and freed (hal_shutdown).
  std::vector<Allocation> take_all();

 private:
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, Allocation> by_base_;
  std::deque<uintptr_t> freed_order_;  // bases of the freed entries, oldest first
  size_t freed_bytes_ = 0;
};

}  // namespace hal::loader
