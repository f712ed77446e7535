#include "allocation_table.hpp"

#include <mutex>

namespace hal::loader {

bool AllocationTable::insert(const Allocation& allocation) {
  std::unique_lock lock(mutex_);
  if (allocation.size == 0 || allocation.base + allocation.size < allocation.base) return false;
  // Only two neighbours can overlap: the last allocation below the base and
  // the first at or above it (the table itself never holds overlaps).
  auto next = by_base_.lower_bound(allocation.base);
  if (next != by_base_.end() && next->first - allocation.base < allocation.size) return false;
  if (next != by_base_.begin() && std::prev(next)->second.contains(allocation.base)) return false;
  return by_base_.emplace(allocation.base, allocation).second;
}

std::optional<Allocation> AllocationTable::find_containing(uintptr_t address) const {
  std::shared_lock lock(mutex_);
  auto after = by_base_.upper_bound(address);
  if (after == by_base_.begin()) return std::nullopt;
  const Allocation& candidate = std::prev(after)->second;
  if (!candidate.contains(address)) return std::nullopt;
  return candidate;
}

std::optional<Allocation> AllocationTable::find_next(uintptr_t address) const {
  std::shared_lock lock(mutex_);
  auto next = by_base_.lower_bound(address);
  if (next == by_base_.end()) return std::nullopt;
  return next->second;
}

std::optional<Allocation> AllocationTable::extract(uintptr_t base) {
  std::unique_lock lock(mutex_);
  auto found = by_base_.find(base);
  if (found == by_base_.end()) return std::nullopt;
  Allocation allocation = found->second;
  by_base_.erase(found);
  return allocation;
}

std::vector<Allocation> AllocationTable::take_all() {
  std::unique_lock lock(mutex_);
  std::vector<Allocation> all;
  all.reserve(by_base_.size());
  for (const auto& [base, allocation] : by_base_) all.push_back(allocation);
  by_base_.clear();
  return all;
}

}  // namespace hal::loader
