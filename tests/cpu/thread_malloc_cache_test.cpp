// The cpu plugin's thread malloc cache fill (plugins/cpu/ops/
// thread_malloc_cache.hpp): it holds nothing, and with glibc it lets an
// aligned block that is freed and taken again on every call (what
// dnnl_sgemm does with its packing buffer) come back at the same address.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <thread>
#include <vector>

#include "ops/thread_malloc_cache.hpp"

using hal::cpu::ops::fill_thread_malloc_cache;

// Only glibc's own allocator behaves so (ASan and TSan bring their own).
#if defined(__GLIBC__) && !defined(HAL_SANITIZER_ADDRESS) && !defined(HAL_SANITIZER_THREAD)
#define HAL_TEST_GLIBC_ALLOCATOR 1
#else
#define HAL_TEST_GLIBC_ALLOCATOR 0
#endif

namespace {

#if HAL_TEST_GLIBC_ALLOCATOR
// dnnl_sgemm's packing buffer at 1024^3 on one thread, and its alignment.
constexpr size_t kBufferBytes = 2'229'952;
constexpr size_t kBufferAlignment = 128;

// On a fresh thread (a heap of its own): the addresses of |calls| aligned
// blocks each taken and freed, as a library does per call, with the cache
// filled before each when |fill|; a null address for a failed call. Catch's
// assertions stay on the test's thread.
std::vector<void*> buffer_addresses(int calls, bool fill) {
  std::vector<void*> addresses(calls, nullptr);
  std::thread worker([&] {
    for (int call = 0; call < calls; ++call) {
      if (fill && !fill_thread_malloc_cache()) return;
      void* block = nullptr;
      if (posix_memalign(&block, kBufferAlignment, kBufferBytes) != 0) return;
      static_cast<volatile char*>(block)[0] = 1;
      addresses[call] = block;
      std::free(block);
    }
  });
  worker.join();
  return addresses;
}
#endif

}  // namespace

TEST_CASE("filling the thread's malloc cache holds no memory and leaves malloc working") {
  int fills_done = 0;
  int sizes_served = 0;
  constexpr int kLargest = 2 * hal::cpu::ops::kThreadMallocCacheLargest;
  std::thread worker([&] {
    for (int round = 0; round < 3; ++round) fills_done += fill_thread_malloc_cache() ? 1 : 0;
    // Every size the fill touched is still served.
    for (int bytes = 1; bytes <= kLargest; ++bytes) {
      void* block = std::malloc(bytes);
      if (block == nullptr) break;
      static_cast<volatile char*>(block)[bytes - 1] = 1;
      std::free(block);
      ++sizes_served;
    }
  });
  worker.join();
  CHECK(fills_done == 3);
  CHECK(sizes_served == kLargest);
  // The main thread too (its heap is the process's main one).
  CHECK(fill_thread_malloc_cache());
}

#if HAL_TEST_GLIBC_ALLOCATOR
TEST_CASE("with the cache filled, glibc hands a per-call aligned buffer back at one address") {
  // The first block of this size is mmapped; freeing it raises glibc's mmap
  // threshold, and the later ones come from the thread's heap.
  buffer_addresses(1, false);
  constexpr int kCalls = 10;
  const std::vector<void*> addresses = buffer_addresses(kCalls, true);
  // The first heap-served call takes new memory; every later one reuses it
  // (without the fill the block moved up by its own size for ~7 calls).
  REQUIRE(addresses[1] != nullptr);
  for (int call = 2; call < kCalls; ++call) {
    INFO("call " << call);
    CHECK(addresses[call] == addresses[1]);
  }
}
#endif
