// What the GPU plugins' tests over their stand-in vendor libraries share
// (tests/cuda, tests/hip, tests/level_zero): a session on one device with a
// stream, the last error's detail, and the module, kernel and launch
// descriptors the public API takes. Each test sets its plugin's environment
// itself.
#ifndef HAL_TESTS_UTIL_GPU_API_TEST_SUPPORT_HPP_
#define HAL_TESTS_UTIL_GPU_API_TEST_SUPPORT_HPP_

#include <catch2/catch.hpp>

#include <cstdint>
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

}  // namespace gpu_api_test

#endif  // HAL_TESTS_UTIL_GPU_API_TEST_SUPPORT_HPP_
