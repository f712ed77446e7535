#include "thread_malloc_cache.hpp"

#include <array>
#include <cstdlib>

namespace hal::cpu::ops {
namespace {

// glibc's block sizes go up in steps of 16 bytes, each block carrying an
// 8-byte header: requests of 24, 40, ... bytes land in one bin each.
constexpr size_t kSmallest = 24;
constexpr size_t kStep = 16;
constexpr size_t kSizes = (kThreadMallocCacheLargest - kSmallest) / kStep + 1;

}  // namespace

bool fill_thread_malloc_cache() noexcept {
  std::array<void*, kSizes * kThreadMallocCacheDepth> held{};
  size_t count = 0;
  bool complete = true;
  for (size_t bytes = kSmallest; bytes <= kThreadMallocCacheLargest && complete; bytes += kStep) {
    for (int i = 0; i < kThreadMallocCacheDepth; ++i) {
      void* block = std::malloc(bytes);
      if (block == nullptr) {
        complete = false;
        break;
      }
      held[count++] = block;
    }
  }
  // Freed in the order taken: each bin ends up holding the blocks again.
  for (size_t i = 0; i < count; ++i) std::free(held[i]);
  return complete;
}

}  // namespace hal::cpu::ops
