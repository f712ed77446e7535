// stress.memory.churn: allocate and free more than the declared total
// memory, in total, so memory that a free keeps is caught as exhaustion.
#include <chrono>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {

HALCONFORM_TEST("stress.memory.churn",
                "allocating and freeing 2x the declared total memory never runs out", {}) {
  const hal_device_properties_t& p = ctx.properties();
  const uint64_t unit = uint64_t{2} << 20;
  uint64_t large = std::min(p.max_allocation_bytes, std::max(unit, p.total_memory_bytes / 6));
  large = std::max(unit, large / unit * unit);
  const uint64_t target = 2 * p.total_memory_bytes;
  Stream stream(ctx.device());
  uint64_t churned = 0, allocations = 0;
  std::mt19937_64& random = ctx.random();
  while (churned < target) {
    // A large block and a few small odd ones live together, then all go.
    AllocationList live;
    for (int k = 0; k < 5; ++k) {
      const uint64_t size = k == 0 ? large : 1 + random() % 65536;
      void* pointer = nullptr;
      const hal_result_t result = hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, size, 0, &pointer);
      if (result != HAL_SUCCESS) {
        fail(
            strf("after allocating and freeing %llu bytes (%.2fx the declared %llu), a %llu-byte "
                 "allocation returned %s: freed memory is not coming back",
                 static_cast<unsigned long long>(churned),
                 static_cast<double>(churned) / static_cast<double>(p.total_memory_bytes),
                 static_cast<unsigned long long>(p.total_memory_bytes),
                 static_cast<unsigned long long>(size), hal_result_string(result)));
      }
      live.pointers.push_back(pointer);
      // Touch both ends so the memory is really usable, not just reserved.
      HC_OK(hal_memset_async(pointer, 0xab, 1, stream));
      HC_OK(hal_memset_async(static_cast<uint8_t*>(pointer) + size - 1, 0xcd, 1, stream));
      churned += size;
      ++allocations;
    }
    HC_OK(hal_stream_synchronize(stream));
  }
  ctx.note(strf("%llu allocations, %llu bytes allocated and freed (2x declared)",
                static_cast<unsigned long long>(allocations),
                static_cast<unsigned long long>(churned)));
}

}  // namespace halconform
