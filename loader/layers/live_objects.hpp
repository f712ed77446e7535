// The validation layer's own record of every handle and allocation HAL gave
// out, and of every handle it destroyed. Unlike the dispatch header's magic,
// it answers "is this a live stream?" without reading the handle's memory, so
// a handle stays recognised as destroyed after its slab slot was handed out
// again. It also remembers where each object was created, for the
// leak report at the last hal_shutdown.
#pragma once

#include "handle.hpp"
#include "layers/creation_site.hpp"

#include <hal/memory.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace hal::loader::layers {

struct HandleState {
  bool known = false;  // false: never a HAL handle (or forgotten, see kMaxRemembered)
  bool live = false;
  HandleKind kind = HandleKind::kDevice;
  const hal_device_s* device = nullptr;
  bool recorded = false;  // events: hal_event_record succeeded at least once
};

// An allocation as the validation layer sees it (bounds and reachability).
struct AllocationView {
  uintptr_t base = 0;
  size_t size = 0;
  hal_memory_kind_t kind = HAL_MEMORY_DEVICE;
  const hal_device_s* device = nullptr;
};

class LiveObjects {
 public:
  void add_handle(const void* handle, HandleKind kind, const hal_device_s* device,
                  const void* owner_module, CreationSite site);
  HandleState find(const void* handle) const;
  void mark_destroyed(const void* handle);
  // hal_module_unload destroys the module's kernels with it.
  void mark_kernels_destroyed(const void* module);
  void mark_recorded(const void* event);
  // An object libhal made for itself (the operators' portable modules): not
  // the application's, so never in the leak report.
  void mark_internal(const void* handle);

  void add_allocation(const void* base, size_t size, hal_memory_kind_t kind,
                      const hal_device_s* device, CreationSite site);
  void remove_allocation(const void* base);
  // The allocation holding |address|.
  std::optional<AllocationView> allocation_containing(uintptr_t address) const;
  // The lowest allocation that overlaps [begin, end).
  std::optional<AllocationView> first_allocation_overlapping(uintptr_t begin, uintptr_t end) const;
  // The allocation whose one-past-the-end address is |address|.
  std::optional<AllocationView> allocation_ending_at(uintptr_t address) const;

  // Lines describing every live stream, event, module and allocation, with
  // where each was created; empty when nothing is left.
  std::string leak_report() const;
  void clear();

 private:
  struct HandleRecord {
    HandleKind kind;
    bool live;
    bool recorded;
    bool internal = false;  // made by libhal for itself (mark_internal)
    const hal_device_s* device;
    const void* owner_module;
    uint64_t serial;
    CreationSite site;
  };
  struct AllocationRecord {
    size_t size;
    hal_memory_kind_t kind;
    const hal_device_s* device;
    uint64_t serial;
    CreationSite site;
  };
  // Destroyed handles are remembered until the table holds this many entries;
  // then the destroyed ones are forgotten (a later use reads as "not a HAL
  // handle", still an error, and still without touching freed memory).
  static constexpr size_t kMaxRemembered = size_t{1} << 20;

  void forget_destroyed_locked();

  mutable std::mutex mutex_;
  std::unordered_map<const void*, HandleRecord> handles_;
  std::map<const void*, AllocationRecord> allocations_;
  uint64_t next_serial_ = 0;
};

}  // namespace hal::loader::layers
