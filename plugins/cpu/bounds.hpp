// Bounds-checked dialect kernels (SPEC.md §14.1): with HAL_VALIDATION=1 (or
// HAL_VALIDATION_BOUNDS=1) the cpu plugin translates dialect modules with
// every access through a `global` pointer checked (hal_dialect's
// TranslateOptions::bounds_checked), records the exact extent of every
// allocation (the caching allocator rounds sizes up, so its blocks are no
// bounds), and gives each launch of such a kernel a record of where each
// pointer argument may reach. The first access outside is reported with the
// kernel, the argument and the index, and fails the stream.
#ifndef HAL_PLUGINS_CPU_BOUNDS_HPP_
#define HAL_PLUGINS_CPU_BOUNDS_HPP_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "hal_dialect/bounds_check.h"
#include "hal_plugin.h"

namespace hal::cpu {

// The requested extent of every live allocation of the plugin (all devices:
// a kernel may take another device's host or shared memory). Thread-safe.
class AllocationExtents {
 public:
  void add(const void* base, size_t size);
  void remove(const void* base);
  // The allocation holding |pointer|, or {0, 0} when none does.
  hal_bounds_range_t find(const void* pointer) const;

 private:
  mutable std::mutex mutex_;
  std::map<uintptr_t, size_t> extents_;  // base -> bytes
};

// One launch's record: the hidden last argument of a bounds-checked kernel
// points at |record|, which points at |ranges|. Heap-allocated per launch and
// never moved while the launch runs.
struct BoundsLaunch {
  std::vector<hal_bounds_range_t> ranges;  // one per argument
  std::vector<uintptr_t> pointers;         // each pointer argument's value (0 otherwise)
  hal_bounds_record_t record{};
  hal_bounds_record_t* record_pointer = nullptr;  // the argument slot libffi reads
};

// The ranges of |args| (pointer arguments looked up in |extents|).
std::unique_ptr<BoundsLaunch> make_bounds_launch(const AllocationExtents& extents,
                                                 const std::vector<hal_arg_type_t>& types,
                                                 const hal_kernel_arg_t* args);

// The report of a launch whose record was claimed: "kernel 'vadd': args[2] ...".
std::string describe_bad_access(const std::string& kernel, const BoundsLaunch& launch);

// A command that failed with a result of its own (the stream reports it, not
// HAL_ERROR_DEVICE_LOST).
class CommandFailure : public std::runtime_error {
 public:
  CommandFailure(hal_result_t result, const std::string& message)
      : std::runtime_error(message), result_(result) {}
  hal_result_t result() const { return result_; }

 private:
  hal_result_t result_;
};

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_BOUNDS_HPP_
