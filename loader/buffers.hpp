// The memory a call reads or writes through the pointers it is given (the
// copies' and fills' dst and src, the collectives' buffers, a launch's
// pointer arguments), checked in SPEC.md §4.1's order, written once:
//   step 4, values, buffer by buffer in parameter order: NULL where the
//     call touches bytes (HAL_ERROR_NULL_POINTER), then an address + size
//     that overflows (HAL_ERROR_INVALID_SIZE) (check_buffer_values);
//   step 5, ranges: where each buffer lies, buffer by buffer: memory
//     hal_mem_free released (HAL_ERROR_INVALID_ARGUMENT, §6 "Freed memory"),
//     a range that overruns its allocation, and (for copies and fills) a
//     host range that runs into an allocation (HAL_ERROR_OUT_OF_BOUNDS)
//     (check_buffer_ranges); then how the ranges relate: ranges that must be
//     disjoint and overlap (HAL_ERROR_INVALID_ARGUMENT, the call's own check);
//   step 6, devices, buffer by buffer: an allocation the call's device may
//     not use (HAL_ERROR_DEVICE_MISMATCH) (check_buffer_devices).
#pragma once

#include "error.hpp"
#include "registry.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <span>

namespace hal::loader {

struct Buffer {
  const char* name;  // "dst", "sendbuf": the parameter, for messages
  const void* pointer;
  size_t bytes;  // what the call touches; 0: nothing, and NULL is allowed
};

// Which allocations the call's device may use (step 6), and whether host
// ranges are checked against running into an allocation (step 5, §6 rule 3).
struct BufferRules {
  const hal_device_s* device;  // the device the call runs on
  const char* device_owner;    // "the stream", "the communicator's rank": for messages
  // An allocation of another device of the same plugin is allowed when both
  // declare HAL_DEVICE_CAP_PEER_ACCESS (copies and fills); otherwise only the
  // call's device.
  bool peers = false;
  bool host_ranges_checked = false;
};

// Step 4 for |buffers|, in order.
hal_result_t check_buffer_values(std::span<const Buffer> buffers, const char* function) noexcept;

// What check_buffer_ranges found, for check_buffer_devices: the allocation
// each of the first few buffers lies in (calls have at most a few).
struct BufferPlaces {
  static constexpr size_t kKept = 4;
  std::array<std::optional<Allocation>, kKept> allocations;
};

// Step 5's places for |buffers|, in order.
hal_result_t check_buffer_ranges(const Registry& registry, std::span<const Buffer> buffers,
                                 const BufferRules& rules, const char* function,
                                 BufferPlaces& out_places);

// Step 6 for |buffers|, in order, from what check_buffer_ranges found.
hal_result_t check_buffer_devices(const Registry& registry, std::span<const Buffer> buffers,
                                  const BufferRules& rules, const BufferPlaces& places,
                                  const char* function);

// Step 5's freed-memory rule for one address the loader cannot bound (a
// launch's pointer argument): HAL_ERROR_INVALID_ARGUMENT when |address| lies
// in an allocation hal_mem_free released that is still held back.
hal_result_t refuse_freed(const Registry& registry, uintptr_t address, const char* what,
                          const char* function);

}  // namespace hal::loader
