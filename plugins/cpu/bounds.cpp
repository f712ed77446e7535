#include "bounds.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

namespace hal::cpu {

void AllocationExtents::add(const void* base, size_t size) {
  std::lock_guard lock(mutex_);
  extents_[reinterpret_cast<uintptr_t>(base)] = size;
}

void AllocationExtents::remove(const void* base) {
  std::lock_guard lock(mutex_);
  extents_.erase(reinterpret_cast<uintptr_t>(base));
}

hal_bounds_range_t AllocationExtents::find(const void* pointer) const {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  std::lock_guard lock(mutex_);
  auto next = extents_.upper_bound(address);
  if (next == extents_.begin()) return {0, 0};
  const auto& [base, bytes] = *std::prev(next);
  // A pointer one past the end still belongs to its allocation (a kernel may
  // hold it without reading through it); every access through it is outside.
  if (address - base > bytes) return {0, 0};
  return {base, base + bytes};
}

std::unique_ptr<BoundsLaunch> make_bounds_launch(const AllocationExtents& extents,
                                                 const std::vector<hal_arg_type_t>& types,
                                                 const hal_kernel_arg_t* args) {
  auto launch = std::make_unique<BoundsLaunch>();
  launch->ranges.assign(types.size(), hal_bounds_range_t{0, 0});
  launch->pointers.assign(types.size(), 0);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != HAL_ARG_POINTER) continue;
    void* pointer = nullptr;
    std::memcpy(&pointer, args[i].value, sizeof pointer);
    launch->pointers[i] = reinterpret_cast<uintptr_t>(pointer);
    if (pointer != nullptr) launch->ranges[i] = extents.find(pointer);
  }
  launch->record.ranges = launch->ranges.data();
  launch->record.arg_count = static_cast<uint32_t>(types.size());
  launch->record_pointer = &launch->record;
  return launch;
}

std::string describe_bad_access(const std::string& kernel, const BoundsLaunch& launch) {
  const hal_bounds_record_t& r = launch.record;
  const uint32_t arg = r.arg_index < launch.ranges.size() ? r.arg_index : 0;
  const hal_bounds_range_t range =
      launch.ranges.empty() ? hal_bounds_range_t{0, 0} : launch.ranges[arg];
  const uintptr_t pointer = launch.pointers.empty() ? 0 : launch.pointers[arg];
  const int64_t size = r.element_bytes != 0 ? r.element_bytes : 1;
  // The elements of the allocation, counted from the argument's pointer.
  const int64_t first = (static_cast<int64_t>(range.begin) - static_cast<int64_t>(pointer)) / size;
  const int64_t end = (static_cast<int64_t>(range.end) - static_cast<int64_t>(pointer)) / size;
  char text[768];
  std::snprintf(text, sizeof text,
                "kernel '%s' made an out-of-bounds %s of args[%u] at index %" PRId64
                " (%u-byte elements, counted from the argument's pointer 0x%" PRIxPTR
                "): the argument's allocation holds %" PRIu64 " bytes at 0x%" PRIxPTR
                ", indices %" PRId64 "..%" PRId64 " from that pointer; %" PRIu64
                " bad access(es) in the launch, none performed (reads gave 0, writes were "
                "dropped)",
                kernel.c_str(), r.read_only ? "read" : "read or write", arg, r.element_index,
                r.element_bytes, pointer, static_cast<uint64_t>(range.end - range.begin),
                range.begin, first, end - 1, r.bad_accesses);
  return text;
}

}  // namespace hal::cpu
