// A cpu device's budget bounds the memory that tiny allocations really take
// (SPEC §6, "The cpu plugin's budget"): a budget filled with 64-byte blocks
// through the public API, the loader's record of each allocation included,
// stays within the budget in resident memory, read from /proc/self/statm.
#include "test_support.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace loader_test;

namespace {

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Under ThreadSanitizer every byte touched brings shadow pages several times
// its size: resident memory measures the sanitizer, not the allocator.
#if defined(HAL_SANITIZER_THREAD)
constexpr bool kResidentMeasuresTheAllocator = false;
#else
constexpr bool kResidentMeasuresTheAllocator = true;
#endif

struct EnvSetting {
  const char* name;
  EnvSetting(const char* variable, const char* value) : name(variable) {
    setenv(variable, value, 1);
  }
  ~EnvSetting() { unsetenv(name); }
  EnvSetting(const EnvSetting&) = delete;
  EnvSetting& operator=(const EnvSetting&) = delete;
};

}  // namespace

TEST_CASE("a budget filled with 64-byte allocations holds no more than the budget",
          "[memory][budget][security]") {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  constexpr uint64_t kBudget = 64 * kMiB;
  // Charged per 64-byte block: the block and 128 bytes for what tracks it
  // (SPEC §6).
  constexpr uint64_t kCharge = 64 + 128;
  const EnvSetting budget("HAL_CPU_DEVICE_MEMORY", "67108864");
  const EnvSetting devices("HAL_CPU_DEVICES", "1");
  const EnvSetting no_validation("HAL_VALIDATION", "0");  // its records are its own
  Session session(HAL_TEST_BUILD_PLUGIN_DIR, "cpu");
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("cpu");
  REQUIRE(properties_of(device).total_memory_bytes == kBudget);

  std::vector<void*> blocks;
  blocks.reserve(kBudget / kCharge + 64);
  std::fill_n(std::back_inserter(blocks), blocks.capacity(), nullptr);  // touched before
  blocks.clear();
  const uint64_t before = resident_bytes();
  while (true) {
    void* block = nullptr;
    const hal_result_t result = hal_mem_alloc(device, HAL_MEMORY_DEVICE, 64, 0, &block);
    if (result != HAL_SUCCESS) {
      REQUIRE(result == HAL_ERROR_OUT_OF_MEMORY);
      break;
    }
    REQUIRE(blocks.size() < blocks.capacity());  // never more than the charge admits
    blocks.push_back(block);
  }
  const uint64_t after = resident_bytes();
  // Most of the budget is usable: all but the slabs' maps and the last slab.
  CHECK(blocks.size() <= kBudget / kCharge);
  CHECK(blocks.size() >= (kBudget - 4 * kMiB) / kCharge);
  // Resident growth: the slabs, their maps and the loader's records, within
  // the budget; 8 MiB of slack for the allocator's own pages and the
  // sanitizers' shadow of what the test touches.
  INFO("resident grew by " << (after - before) / kMiB << " MiB for " << blocks.size() << " blocks");
  if (kResidentMeasuresTheAllocator) CHECK(after - before <= kBudget + 8 * kMiB);
  // The blocks are distinct and usable memory.
  for (size_t i = 0; i < blocks.size(); i += 997) static_cast<char*>(blocks[i])[63] = char(i);
  for (size_t i = 0; i < blocks.size(); i += 997)
    CHECK(static_cast<char*>(blocks[i])[63] == char(i));
  for (void* block : blocks) REQUIRE(hal_mem_free(block) == HAL_SUCCESS);
}
