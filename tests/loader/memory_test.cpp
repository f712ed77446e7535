// Allocations and the allocation table: argument checks, frees, bounds checks
// of copies and fills with their exact sentences, and seeded random copies.
#include "test_support.hpp"

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

using namespace loader_test;

TEST_CASE("hal_mem_alloc checks size, alignment, kind and limits", "[memory]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  void* ptr = reinterpret_cast<void*>(0x1);
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 0, 0, &ptr) == HAL_ERROR_INVALID_SIZE);
  CHECK(last_detail().message == "hal_mem_alloc: size is 0");
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 64, 48, &ptr) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(last_detail().message == "hal_mem_alloc: alignment 48 is not a power of two");
  CHECK(hal_mem_alloc(device, static_cast<hal_memory_kind_t>(7), 64, 0, &ptr) ==
        HAL_ERROR_INVALID_ARGUMENT);
  CHECK(hal_mem_alloc(device, HAL_MEMORY_SHARED, 64, 0, &ptr) == HAL_ERROR_UNSUPPORTED);
  CHECK_THAT(last_detail().message, Catch::Contains("does not support HAL_MEMORY_SHARED"));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, (size_t{1} << 26) + 1, 0, &ptr) ==
        HAL_ERROR_OUT_OF_MEMORY);
  CHECK(last_detail().message ==
        "hal_mem_alloc: size 67108865 exceeds the device's max_allocation_bytes 67108864");
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 64, 0, nullptr) == HAL_ERROR_NULL_POINTER);
  CHECK(hal_mem_alloc(nullptr, HAL_MEMORY_DEVICE, 64, 0, &ptr) == HAL_ERROR_INVALID_HANDLE);
  CHECK(ptr == reinterpret_cast<void*>(0x1));  // written only on success

  SECTION("alignment 0 means the device's minimum") {
    for (int i = 0; i < 8; ++i) {
      void* memory = nullptr;
      REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 100 + i, 0, &memory) == HAL_SUCCESS);
      CHECK(reinterpret_cast<uintptr_t>(memory) % 128 == 0);
      REQUIRE(hal_mem_free(memory) == HAL_SUCCESS);
    }
  }
  SECTION("an explicit alignment is honoured") {
    void* memory = nullptr;
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_HOST, 10, 4096, &memory) == HAL_SUCCESS);
    CHECK(reinterpret_cast<uintptr_t>(memory) % 4096 == 0);
    hal_memory_info_t info{};
    info.struct_size = sizeof(info);
    REQUIRE(hal_mem_get_info(static_cast<char*>(memory) + 9, &info) == HAL_SUCCESS);
    CHECK(info.base == memory);
    CHECK(info.size == 10);
    CHECK(info.device == device);
    CHECK(info.kind == HAL_MEMORY_HOST);
    CHECK(hal_mem_get_info(static_cast<char*>(memory) + 10, &info) == HAL_ERROR_NOT_FOUND);
    info.struct_size = 8;
    CHECK(hal_mem_get_info(memory, &info) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(hal_mem_get_info(nullptr, &info) == HAL_ERROR_NULL_POINTER);
    REQUIRE(hal_mem_free(memory) == HAL_SUCCESS);
  }
}

TEST_CASE("hal_mem_free rejects what is not a live allocation base", "[memory]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  void* memory = nullptr;
  REQUIRE(hal_mem_alloc(device_of("minimal"), HAL_MEMORY_DEVICE, 256, 0, &memory) == HAL_SUCCESS);
  CHECK(hal_mem_free(nullptr) == HAL_SUCCESS);
  CHECK(hal_mem_free(static_cast<char*>(memory) + 16) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_detail().message, Catch::Contains("is 16 bytes inside the allocation at"));
  int on_the_stack = 0;
  CHECK(hal_mem_free(&on_the_stack) == HAL_ERROR_NOT_FOUND);
  REQUIRE(hal_mem_free(memory) == HAL_SUCCESS);
  CHECK(hal_mem_free(memory) == HAL_ERROR_NOT_FOUND);
  CHECK_THAT(last_detail().message, Catch::Contains("freed already"));
}

TEST_CASE("copies and fills are bounds-checked against the allocation table", "[memory]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  constexpr size_t kSize = 65536;
  char* a = nullptr;
  char* b = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kSize, 0, reinterpret_cast<void**>(&a)) ==
          HAL_SUCCESS);
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kSize, 0, reinterpret_cast<void**>(&b)) ==
          HAL_SUCCESS);
  std::vector<char> host(2 * kSize);

  CHECK(hal_memcpy_async(a + 61440, host.data(), 4096, stream) == HAL_SUCCESS);
  CHECK(hal_memcpy_async(a + 61440, host.data(), 4097, stream) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(last_detail().message ==
        "hal_memcpy_async: dst: 4097 bytes at offset 61440 overrun a 65536-byte allocation");
  CHECK(hal_memcpy_async(host.data(), b + 1, kSize, stream) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(last_detail().message ==
        "hal_memcpy_async: src: 65536 bytes at offset 1 overrun a 65536-byte allocation");
  CHECK(hal_memset_async(b + 100, 0, kSize, stream) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(last_detail().message ==
        "hal_memset_async: dst: 65536 bytes at offset 100 overrun a 65536-byte allocation");
  CHECK(last_detail().function == "hal_memset_async");
  CHECK(last_detail().plugin == "loader");

  CHECK(hal_memcpy_async(a, a + 100, 200, stream) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_detail().message, Catch::Contains("overlap"));
  CHECK(hal_memcpy_async(host.data(), host.data() + 10, 20, stream) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(hal_memcpy_async(nullptr, a, 16, stream) == HAL_ERROR_NULL_POINTER);
  CHECK(last_detail().message == "hal_memcpy_async: dst is NULL with size 16");
  CHECK(hal_memcpy_async(a, nullptr, 16, stream) == HAL_ERROR_NULL_POINTER);
  CHECK(hal_memset_async(nullptr, 0, 16, stream) == HAL_ERROR_NULL_POINTER);
  CHECK(hal_memcpy_async(a, host.data(), SIZE_MAX - 8, stream) == HAL_ERROR_INVALID_SIZE);
  CHECK_THAT(last_detail().message, Catch::Contains("overflows the address space"));
  // Size 0 succeeds without looking at the pointers.
  CHECK(hal_memcpy_async(nullptr, nullptr, 0, stream) == HAL_SUCCESS);
  CHECK(hal_memset_async(nullptr, 0, 0, stream) == HAL_SUCCESS);
  CHECK(hal_memcpy_async(a, b, 16, nullptr) == HAL_ERROR_INVALID_HANDLE);

  SECTION("another plugin's allocation is a device mismatch") {
    void* foreign = nullptr;
    REQUIRE(hal_mem_alloc(device_of("minimal"), HAL_MEMORY_DEVICE, 64, 0, &foreign) == HAL_SUCCESS);
    CHECK(hal_memcpy_async(a, foreign, 64, stream) == HAL_ERROR_DEVICE_MISMATCH);
    CHECK_THAT(last_detail().message, Catch::Contains("src is an allocation of device 0 (plugin "
                                                      "'minimal'), but the stream is on device 1"));
    CHECK(hal_mem_free(foreign) == HAL_SUCCESS);
  }
  SECTION("a host range starting at an allocation's end, or running into one, is out of bounds") {
    // The mock plugin allocates from the heap, whose chunk headers keep two
    // allocations from touching: the bytes around |a| are nobody's.
    const auto in_allocation = [](const void* p) {
      hal_memory_info_t info{};
      info.struct_size = sizeof info;
      return hal_mem_get_info(p, &info) == HAL_SUCCESS;
    };
    // [a - 8, a + 8) overruns whatever holds a - 8: host memory (rule 3) or,
    // where the heap packs blocks back to back, the allocation before |a|.
    CHECK(hal_memcpy_async(host.data(), a - 8, 16, stream) == HAL_ERROR_OUT_OF_BOUNDS);
    if (!in_allocation(a - 8)) {
      CHECK(hal_memcpy_async(host.data(), a - 8, 16, stream) == HAL_ERROR_OUT_OF_BOUNDS);
      // The loader and, in Debug builds, the validation layer word it differently.
      CHECK_THAT(last_detail().message, Catch::Contains("runs into"));
    }
  }
  SECTION("another device of the same plugin is accepted") {
    void* peer = nullptr;
    REQUIRE(hal_mem_alloc(device_of("mock", 1), HAL_MEMORY_DEVICE, 64, 0, &peer) == HAL_SUCCESS);
    CHECK(hal_memcpy_async(peer, a, 64, stream) == HAL_SUCCESS);
    CHECK(hal_stream_synchronize(stream) == HAL_SUCCESS);
    CHECK(hal_mem_free(peer) == HAL_SUCCESS);
  }
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  CHECK(hal_mem_free(a) == HAL_SUCCESS);
  CHECK(hal_mem_free(b) == HAL_SUCCESS);
}

TEST_CASE("seeded random copies round-trip through device memory", "[memory]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  std::mt19937_64 random(20240611);
  for (const char* plugin : {"minimal", "mock"}) {
    INFO("plugin " << plugin);
    hal_device_t device = device_of(plugin);
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
    for (int round = 0; round < 20; ++round) {
      const size_t size = 1 + random() % 100000;
      std::vector<uint8_t> source(size);
      std::vector<uint8_t> result(size, 0);
      for (uint8_t& byte : source) byte = static_cast<uint8_t>(random());
      const size_t offset = random() % 64;
      const size_t length = size - offset;
      void* d1 = nullptr;
      void* d2 = nullptr;
      REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, size, 0, &d1) == HAL_SUCCESS);
      REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, size, 0, &d2) == HAL_SUCCESS);
      REQUIRE(hal_memcpy_async(d1, source.data(), size, stream) == HAL_SUCCESS);
      REQUIRE(hal_memcpy_async(static_cast<uint8_t*>(d2) + offset,
                               static_cast<uint8_t*>(d1) + offset, length, stream) == HAL_SUCCESS);
      REQUIRE(hal_memset_async(d2, 0xa5, offset, stream) == HAL_SUCCESS);
      REQUIRE(hal_memcpy_async(result.data(), d2, size, stream) == HAL_SUCCESS);
      REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
      std::vector<uint8_t> expected = source;
      std::fill_n(expected.begin(), offset, uint8_t{0xa5});
      CHECK(result == expected);
      REQUIRE(hal_mem_free(d1) == HAL_SUCCESS);
      REQUIRE(hal_mem_free(d2) == HAL_SUCCESS);
    }
    REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
  }
}

TEST_CASE("allocations and frees from many threads keep the table consistent", "[memory]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t));
      hal_stream_t stream = nullptr;
      if (hal_stream_create(device, 0, &stream) != HAL_SUCCESS) ++failures;
      for (int i = 0; i < 100; ++i) {
        void* ptr = nullptr;
        const size_t size = 1 + random() % 4096;
        if (hal_mem_alloc(device, HAL_MEMORY_DEVICE, size, 0, &ptr) != HAL_SUCCESS) ++failures;
        if (hal_memset_async(ptr, static_cast<uint8_t>(i), size, stream) != HAL_SUCCESS) ++failures;
        if (hal_memset_async(ptr, 0, size + 1, stream) != HAL_ERROR_OUT_OF_BOUNDS) ++failures;
        if (hal_mem_free(ptr) != HAL_SUCCESS) ++failures;
      }
      if (hal_stream_destroy(stream) != HAL_SUCCESS) ++failures;
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures == 0);
}
