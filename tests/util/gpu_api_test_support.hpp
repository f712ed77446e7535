// What the GPU plugins' tests over their stand-in vendor libraries share
// (tests/cuda, tests/hip, tests/level_zero): a session on one device with a
// stream, the last error's detail, the module, kernel and launch
// descriptors the public API takes, and the memory test every stand-in passes. Each test sets its
// plugin's environment itself.
#ifndef HAL_TESTS_UTIL_GPU_API_TEST_SUPPORT_HPP_
#define HAL_TESTS_UTIL_GPU_API_TEST_SUPPORT_HPP_

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "hal.h"

namespace gpu_api_test {

// hal_init, which must find the stand-in's two devices, device |index| and
// a stream on it; hal_shutdown at the end.
class Session {
 public:
  explicit Session(uint32_t index = 0) {
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    uint32_t count = 0;
    REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
    REQUIRE(count == 2);
    REQUIRE(hal_device_get(index, &device_) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_, 0, &stream_) == HAL_SUCCESS);
  }
  ~Session() {
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  hal_device_t device() const { return device_; }
  hal_stream_t stream() const { return stream_; }

 private:
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
};

inline hal_error_detail_t last_detail() {
  hal_error_detail_t detail{};
  detail.struct_size = sizeof(detail);
  REQUIRE(hal_error_get_detail(&detail) == HAL_SUCCESS);
  return detail;
}

// Loads |bytes| (text or binary) in |format| from memory.
inline hal_result_t load(hal_device_t device, hal_module_format_t format, const std::string& bytes,
                         hal_module_t* out) {
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = format;
  desc.data = bytes.data();
  desc.size = bytes.size();
  return hal_module_load(device, &desc, out);
}

// Kernel |name|, with the declared signature |types| when not null.
inline hal_result_t get(hal_module_t module, const char* name, hal_kernel_t* out,
                        const std::vector<hal_arg_type_t>* types = nullptr) {
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = name;
  if (types != nullptr) {
    desc.arg_types = types->data();
    desc.arg_count = static_cast<uint32_t>(types->size());
  }
  return hal_kernel_get(module, &desc, out);
}

// A grid of grid_x x |grid_y| blocks of block_x x |block_y| threads.
inline hal_launch_config_t config(uint32_t grid_x, uint32_t block_x, uint32_t shared = 0,
                                  uint32_t grid_y = 2, uint32_t block_y = 1) {
  hal_launch_config_t launch{};
  launch.struct_size = sizeof(launch);
  launch.grid[0] = grid_x, launch.grid[1] = grid_y, launch.grid[2] = 1;
  launch.block[0] = block_x, launch.block[1] = block_y, launch.block[2] = 1;
  launch.shared_memory_bytes = shared;
  return launch;
}

// Memory of every kind, allocated with the default alignment (at least
// |base_alignment|) and with |over_alignment|, copied in, across and out and
// filled, checked by content against seeded random bytes. |live_allocations|
// counts the stand-in's blocks: two more while both are held, and, as
// hal_mem_free holds memory back from the plugin for a while (SPEC.md §6,
// "Freed memory"), as before once the last hal_shutdown gave every block
// back, the over-aligned ones by their base.
inline void check_memory_kinds(const std::function<long()>& live_allocations, uint32_t seed,
                               size_t base_alignment, size_t over_alignment) {
  const long initial = live_allocations();
  {
    Session session;
    std::mt19937 random(seed);
    const size_t size = 4096 + 37;
    for (hal_memory_kind_t kind : {HAL_MEMORY_DEVICE, HAL_MEMORY_HOST, HAL_MEMORY_SHARED}) {
      INFO("kind " << static_cast<int>(kind));
      const long before = live_allocations();
      void* a = nullptr;
      void* b = nullptr;
      REQUIRE(hal_mem_alloc(session.device(), kind, size, 0, &a) == HAL_SUCCESS);
      REQUIRE(hal_mem_alloc(session.device(), kind, size, over_alignment, &b) == HAL_SUCCESS);
      CHECK(reinterpret_cast<uintptr_t>(a) % base_alignment == 0);
      CHECK(reinterpret_cast<uintptr_t>(b) % over_alignment == 0);
      CHECK(live_allocations() == before + 2);
      std::vector<uint8_t> input(size), output(size, 0);
      for (uint8_t& byte : input) byte = static_cast<uint8_t>(random());
      std::vector<uint8_t> expected = input;
      std::memset(expected.data() + 100, 0x5a, 1000);
      REQUIRE(hal_memcpy_async(a, input.data(), size, session.stream()) == HAL_SUCCESS);
      REQUIRE(hal_memcpy_async(b, a, size, session.stream()) == HAL_SUCCESS);
      REQUIRE(hal_memset_async(static_cast<uint8_t*>(b) + 100, 0x5a, 1000, session.stream()) ==
              HAL_SUCCESS);
      REQUIRE(hal_memcpy_async(output.data(), b, size, session.stream()) == HAL_SUCCESS);
      REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
      CHECK(output == expected);
      CHECK(hal_mem_free(a) == HAL_SUCCESS);
      CHECK(hal_mem_free(b) == HAL_SUCCESS);
    }
  }
  CHECK(live_allocations() == initial);
}

}  // namespace gpu_api_test

#endif  // HAL_TESTS_UTIL_GPU_API_TEST_SUPPORT_HPP_
