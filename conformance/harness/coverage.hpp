// The coverage report: which documented paths of the API each test
// executed. Every HAL call the suite makes passes a generated wrapper
// (api_wrappers.cpp) that records, while a test runs, the function and its
// result, each enum and flag value it was given, which fields of each input
// struct were zero and which were set, and the semantic paths the hooks
// (coverage_hooks.cpp) classify: copy directions, memory kinds, in-place
// collectives, calls on a lost stream, calls from host functions...
//
// The list of paths a device should see is built from the same model
// (api_model.hpp) plus the hooks' table (coverage_paths), so a new function,
// enumerator or field is a path the moment it is in a header. A path no test
// of the run exercised is "uncovered" in the record; the CTest self-check
// (tests/conformance/coverage_check.py) fails the build on any uncovered path
// that is not waived in conformance/coverage_waivers.txt with a reason.
#ifndef HAL_CONFORMANCE_HARNESS_COVERAGE_HPP_
#define HAL_CONFORMANCE_HARNESS_COVERAGE_HPP_

#include <hal.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace halconform::coverage {

// ---- recording (the worker) -------------------------------------------------

extern std::atomic<bool> g_recording;
inline bool recording() {
  return g_recording.load(std::memory_order_relaxed);
}

// Starts recording for one test; end_test stops and returns the paths seen.
void begin_test();
std::vector<std::string> end_test();

void record(std::string_view path);
void record_result(const char* function, hal_result_t result);
void record_call(const char* function);
void record_enum(const char* type, int64_t value);
void record_flags(const char* bits_type, uint64_t flags);
// The fields of an input struct: zero or set, enum and flag values, nested structs.
void record_struct(const char* type, const void* value);
void record_op_descriptor(const hal_op_header_t* descriptor);

// ---- the paths (the parent) ---------------------------------------------------

struct Path {
  std::string name;     // "value:hal_memory_kind_t:HAL_MEMORY_HOST"
  std::string applies;  // "" when it applies to the device, else why not
  std::string source;   // "hal/memory.h" or "SPEC.md §4.4": where the path is defined
};

// Every path for a device with |properties| in a plugin of |plugin_devices|.
std::vector<Path> paths_for(const hal_device_properties_t& properties, uint32_t plugin_devices);
// The semantic ones alone (what the coverage hooks record).
std::vector<Path> semantic_paths(const hal_device_properties_t& properties,
                                 uint32_t plugin_devices);
// "DEVICE", "HOST", "SHARED": a memory kind as the copy paths name it.
std::string memory_kind_short(hal_memory_kind_t kind);

// One waiver line: a glob over path names and the reason nobody runs it.
struct Waiver {
  std::string glob;
  std::string reason;
};
std::vector<Waiver> waivers();  // conformance/coverage_waivers.txt, embedded at build time

enum class PathStatus { kCovered, kUncovered, kWaived, kNotApplicable };
const char* path_status_name(PathStatus status);

struct PathResult {
  std::string name;
  std::string source;
  PathStatus status = PathStatus::kUncovered;
  std::string reason;              // why not applicable, or the waiver's reason
  std::vector<std::string> tests;  // the tests that exercised it
};

struct DeviceCoverage {
  std::vector<PathResult> paths;
  size_t covered = 0, uncovered = 0, waived = 0, not_applicable = 0;
  // Paths a test recorded that the list does not hold (a hook without a table row).
  std::vector<std::string> unlisted;
};

// The device's coverage from what each test recorded (test -> paths).
DeviceCoverage evaluate(const hal_device_properties_t& properties, uint32_t plugin_devices,
                        const std::map<std::string, std::vector<std::string>>& recorded);

}  // namespace halconform::coverage

#endif  // HAL_CONFORMANCE_HARNESS_COVERAGE_HPP_
