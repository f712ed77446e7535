#include "layers/live_objects.hpp"

#include "error.hpp"
#include "objects.hpp"
#include "hal_util/names.hpp"

#include <algorithm>
#include <vector>

namespace hal::loader::layers {

void LiveObjects::add_handle(const void* handle, HandleKind kind, const hal_device_s* device,
                             const void* owner_module, CreationSite site) {
  std::lock_guard lock(mutex_);
  if (handles_.size() >= kMaxRemembered) forget_destroyed_locked();
  // A new object may reuse the address (slab slot) of a destroyed one.
  handles_[handle] =
      HandleRecord{kind, true, false, false, device, owner_module, next_serial_++, std::move(site)};
}

HandleState LiveObjects::find(const void* handle) const {
  std::lock_guard lock(mutex_);
  const auto found = handles_.find(handle);
  if (found == handles_.end()) return {};
  const HandleRecord& record = found->second;
  return {true, record.live, record.kind, record.device, record.recorded};
}

void LiveObjects::mark_destroyed(const void* handle) {
  std::lock_guard lock(mutex_);
  const auto found = handles_.find(handle);
  if (found == handles_.end()) return;
  found->second.live = false;
  found->second.site = {};  // the site only matters for leaks
}

void LiveObjects::mark_internal(const void* handle) {
  std::lock_guard lock(mutex_);
  const auto found = handles_.find(handle);
  if (found != handles_.end()) found->second.internal = true;
}

void LiveObjects::mark_kernels_destroyed(const void* module) {
  std::lock_guard lock(mutex_);
  for (auto& [handle, record] : handles_) {
    if (record.kind == HandleKind::kKernel && record.owner_module == module) record.live = false;
  }
}

void LiveObjects::mark_recorded(const void* event) {
  std::lock_guard lock(mutex_);
  const auto found = handles_.find(event);
  if (found != handles_.end()) found->second.recorded = true;
}

void LiveObjects::add_allocation(const void* base, size_t size, hal_memory_kind_t kind,
                                 const hal_device_s* device, CreationSite site) {
  std::lock_guard lock(mutex_);
  allocations_[base] = AllocationRecord{size, kind, device, next_serial_++, std::move(site)};
}

void LiveObjects::remove_allocation(const void* base) {
  std::lock_guard lock(mutex_);
  allocations_.erase(base);
}

std::optional<AllocationView> LiveObjects::allocation_containing(uintptr_t address) const {
  return first_allocation_overlapping(address, address + 1);
}

std::optional<AllocationView> LiveObjects::first_allocation_overlapping(uintptr_t begin,
                                                                        uintptr_t end) const {
  std::lock_guard lock(mutex_);
  // The one starting at or before |begin| may reach into the range; else the
  // first one starting inside it.
  auto after = allocations_.upper_bound(reinterpret_cast<const void*>(begin));
  if (after != allocations_.begin()) {
    const auto& [base, record] = *std::prev(after);
    const auto start = reinterpret_cast<uintptr_t>(base);
    if (begin - start < record.size)
      return AllocationView{start, record.size, record.kind, record.device};
  }
  if (after != allocations_.end() && reinterpret_cast<uintptr_t>(after->first) < end) {
    const auto& [base, record] = *after;
    return AllocationView{reinterpret_cast<uintptr_t>(base), record.size, record.kind,
                          record.device};
  }
  return std::nullopt;
}

std::optional<AllocationView> LiveObjects::allocation_ending_at(uintptr_t address) const {
  if (address == 0) return std::nullopt;
  const std::optional<AllocationView> last = allocation_containing(address - 1);
  if (last && last->base + last->size == address) return last;
  return std::nullopt;
}

std::string LiveObjects::leak_report() const {
  std::lock_guard lock(mutex_);
  struct Line {
    uint64_t serial;
    std::string text;
  };
  std::vector<Line> lines;
  size_t objects = 0;
  size_t bytes = 0;
  for (const auto& [handle, record] : handles_) {
    // Devices belong to the loader; kernels go with their module.
    if (!record.live || record.internal || record.kind == HandleKind::kDevice ||
        record.kind == HandleKind::kKernel)
      continue;
    ++objects;
    lines.push_back(
        {record.serial,
         format("  %s %p on device %u, created at %s", kind_name(record.kind), handle,
                record.device->properties.index, describe_site(record.site, "      ").c_str())});
  }
  for (const auto& [base, record] : allocations_) {
    bytes += record.size;
    lines.push_back(
        {record.serial,
         format("  allocation %p of %zu bytes (%s) on device %u, "
                "created at %s",
                base, record.size, hal::util::memory_kind_name(record.kind),
                record.device->properties.index, describe_site(record.site, "      ").c_str())});
  }
  if (lines.empty()) return {};
  std::sort(lines.begin(), lines.end(),
            [](const Line& a, const Line& b) { return a.serial < b.serial; });
  std::string report = format(
      "leak report: %zu object%s and %zu allocation%s (%zu bytes) still alive at the last "
      "hal_shutdown, which releases them now:",
      objects, objects == 1 ? "" : "s", allocations_.size(), allocations_.size() == 1 ? "" : "s",
      bytes);
  for (const Line& line : lines) report += "\n" + line.text;
  return report;
}

void LiveObjects::clear() {
  std::lock_guard lock(mutex_);
  handles_.clear();
  allocations_.clear();
  next_serial_ = 0;
}

void LiveObjects::forget_destroyed_locked() {
  std::erase_if(handles_, [](const auto& entry) { return !entry.second.live; });
}

}  // namespace hal::loader::layers
