#include "allocation_table.hpp"

#include <algorithm>
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
  Allocation live = allocation;
  live.freed = false;
  return by_base_.emplace(live.base, live).second;
}

std::optional<Allocation> AllocationTable::find_containing(uintptr_t address) const {
  std::shared_lock lock(mutex_);
  auto after = by_base_.upper_bound(address);
  if (after == by_base_.begin()) return std::nullopt;
  const Allocation& candidate = std::prev(after)->second;
  if (candidate.freed || !candidate.contains(address)) return std::nullopt;
  return candidate;
}

std::optional<Allocation> AllocationTable::find_freed_containing(uintptr_t address) const {
  std::shared_lock lock(mutex_);
  if (freed_order_.empty()) return std::nullopt;
  auto after = by_base_.upper_bound(address);
  if (after == by_base_.begin()) return std::nullopt;
  const Allocation& candidate = std::prev(after)->second;
  if (!candidate.freed || !candidate.contains(address)) return std::nullopt;
  return candidate;
}

std::optional<Allocation> AllocationTable::find_next(uintptr_t address) const {
  std::shared_lock lock(mutex_);
  // Freed entries are skipped: at most kMaxFreed of them.
  for (auto next = by_base_.lower_bound(address); next != by_base_.end(); ++next) {
    if (!next->second.freed) return next->second;
  }
  return std::nullopt;
}

std::optional<Allocation> AllocationTable::extract(uintptr_t base) {
  std::unique_lock lock(mutex_);
  auto found = by_base_.find(base);
  if (found == by_base_.end() || found->second.freed) return std::nullopt;
  Allocation allocation = found->second;
  by_base_.erase(found);
  return allocation;
}

std::vector<Allocation> AllocationTable::hold_freed(Allocation allocation) {
  std::vector<Allocation> released;
  if (allocation.size > kMaxFreedBytes) {
    released.push_back(allocation);
    return released;
  }
  std::unique_lock lock(mutex_);
  allocation.freed = true;
  if (!by_base_.emplace(allocation.base, allocation).second) {
    released.push_back(allocation);  // cannot happen: the base was just extracted
    return released;
  }
  freed_order_.push_back(allocation.base);
  freed_bytes_ += allocation.size;
  while (freed_order_.size() > kMaxFreed || freed_bytes_ > kMaxFreedBytes) {
    auto oldest = by_base_.find(freed_order_.front());
    freed_order_.pop_front();
    if (oldest == by_base_.end()) continue;
    freed_bytes_ -= oldest->second.size;
    released.push_back(oldest->second);
    by_base_.erase(oldest);
  }
  return released;
}

std::vector<Allocation> AllocationTable::take_freed(hal_device_t device) {
  std::unique_lock lock(mutex_);
  std::vector<Allocation> released;
  std::deque<uintptr_t> kept;
  for (const uintptr_t base : freed_order_) {
    auto entry = by_base_.find(base);
    if (entry == by_base_.end()) continue;
    if (device != nullptr && entry->second.device != device) {
      kept.push_back(base);
      continue;
    }
    freed_bytes_ -= entry->second.size;
    released.push_back(entry->second);
    by_base_.erase(entry);
  }
  freed_order_ = std::move(kept);
  return released;
}

std::vector<Allocation> AllocationTable::take_all() {
  std::unique_lock lock(mutex_);
  std::vector<Allocation> all;
  all.reserve(by_base_.size());
  for (const auto& [base, allocation] : by_base_) all.push_back(allocation);
  by_base_.clear();
  freed_order_.clear();
  freed_bytes_ = 0;
  return all;
}

}  // namespace hal::loader
