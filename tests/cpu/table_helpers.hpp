// Helpers shared by the table tests of streams, events and kernels.
#ifndef HAL_TESTS_CPU_TABLE_HELPERS_HPP_
#define HAL_TESTS_CPU_TABLE_HELPERS_HPP_

#include <catch2/catch.hpp>

#include <array>
#include <stdexcept>

#include "plugin_harness.hpp"

namespace hal::test {

// Builds the argument array of a launch from C++ values.
template <class... Args>
inline std::array<hal_kernel_arg_t, sizeof...(Args)> kernel_args(const Args&... values) {
  return {hal_kernel_arg_t{&values, sizeof(Args)}...};
}

inline hal_launch_config_t config_of(std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                                     uint32_t shared = 0) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  for (int d = 0; d < 3; ++d) {
    config.grid[d] = grid[d];
    config.block[d] = block[d];
  }
  config.shared_memory_bytes = shared;
  return config;
}

// The test kernels loaded on one device.
struct TestModule {
  const hal_plugin_table_v1_t& t;
  hal_impl_module_t* module = nullptr;

  TestModule(const hal_plugin_table_v1_t& table, hal_impl_device_t* device) : t(table) {
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
    desc.path = HAL_TEST_CPU_KERNELS_PATH;
    if (t.module_load(device, &desc, &module) != HAL_SUCCESS) {
      throw std::runtime_error(last_error().message);
    }
  }
  ~TestModule() {
    if (module != nullptr) t.module_unload(module);
  }

  hal_impl_kernel_t* kernel(const char* name) {
    hal_kernel_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.name = name;
    hal_impl_kernel_t* kernel = nullptr;
    hal_kernel_info_t info{};
    info.struct_size = sizeof(info);
    if (t.kernel_get(module, &desc, &kernel, &info) != HAL_SUCCESS) {
      throw std::runtime_error(last_error().message);
    }
    return kernel;
  }
};

inline void* alloc(const hal_plugin_table_v1_t& t, hal_impl_device_t* device, size_t size) {
  void* ptr = nullptr;
  REQUIRE(t.mem_alloc(device, HAL_MEMORY_DEVICE, size, 64, &ptr) == HAL_SUCCESS);
  return ptr;
}

inline hal_impl_stream_t* make_stream(const hal_plugin_table_v1_t& t, hal_impl_device_t* device) {
  hal_impl_stream_t* stream = nullptr;
  REQUIRE(t.stream_create(device, 0, &stream) == HAL_SUCCESS);
  return stream;
}

inline hal_impl_event_t* make_event(const hal_plugin_table_v1_t& t, hal_impl_device_t* device,
                                    hal_event_flags_t flags = 0) {
  hal_impl_event_t* event = nullptr;
  REQUIRE(t.event_create(device, flags, &event) == HAL_SUCCESS);
  return event;
}

inline hal_result_t launch_affine(const hal_plugin_table_v1_t& t, hal_impl_stream_t* stream,
                                  hal_impl_kernel_t* affine, uint32_t* x, uint32_t n, uint32_t a,
                                  uint32_t b) {
  const auto args = kernel_args(x, n, a, b);
  const hal_launch_config_t config = config_of({(n + 63) / 64, 1, 1}, {64, 1, 1});
  return t.launch_kernel(stream, affine, &config, 4, args.data());
}

}  // namespace hal::test

#endif  // HAL_TESTS_CPU_TABLE_HELPERS_HPP_
