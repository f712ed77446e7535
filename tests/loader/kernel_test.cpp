// Modules, kernels and launches: descriptor checks before the plugin, launch
// shape and argument checks against the cached signature, and a real launch
// of the mock plugin's 'scale' kernel.
#include "test_support.hpp"

#include <cstring>
#include <random>
#include <vector>

using namespace loader_test;

namespace {

hal_launch_config_t config_1d(uint32_t grid, uint32_t block) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = grid;
  config.grid[1] = config.grid[2] = 1;
  config.block[0] = block;
  config.block[1] = config.block[2] = 1;
  return config;
}

}  // namespace

TEST_CASE("hal_module_load checks its descriptor before the plugin", "[kernel]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_module_t module = nullptr;
  hal_module_desc_t desc = opencl_source_desc("kernel");
  CHECK(hal_module_load(device, nullptr, &module) == HAL_ERROR_NULL_POINTER);
  CHECK(hal_module_load(device, &desc, nullptr) == HAL_ERROR_NULL_POINTER);
  desc.struct_size = 16;
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_INVALID_ARGUMENT);
  desc = opencl_source_desc("kernel");
  desc.path = "/tmp/x";
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_detail().message, Catch::Contains("it gives both"));
  desc = opencl_source_desc("kernel");
  desc.data = nullptr;
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_detail().message, Catch::Contains("it gives neither"));
  desc = opencl_source_desc("kernel");
  desc.size = 0;
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_INVALID_ARGUMENT);
  desc = opencl_source_desc("kernel");
  desc.format = static_cast<hal_module_format_t>(99);
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_INVALID_ARGUMENT);
  desc = opencl_source_desc("kernel");
  desc.format = HAL_MODULE_FORMAT_PTX;
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_UNSUPPORTED);
  CHECK_THAT(last_detail().message, Catch::Contains("cannot load module format 3"));
  desc = opencl_source_desc("kernel");
  desc.data = nullptr;
  desc.size = 0;
  desc.path = "/nonexistent/kernel.cl";
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_NOT_FOUND);
  CHECK(last_detail().message ==
        "hal_module_load: desc->path '/nonexistent/kernel.cl' does not exist");
  desc = opencl_source_desc("kernel");
  CHECK(hal_module_load(device_of("minimal"), &desc, &module) == HAL_ERROR_UNSUPPORTED);
  CHECK_THAT(last_detail().message, Catch::Contains("does not support kernels"));
  // A failure the plugin reports carries its sentence, name and native code.
  desc = opencl_source_desc("broken image");
  CHECK(hal_module_load(device, &desc, &module) == HAL_ERROR_INVALID_MODULE);
  const Detail detail = last_detail();
  CHECK(detail.plugin == "mock");
  CHECK(detail.function == "hal_module_load");
  CHECK(detail.native_code == 7);
  CHECK(detail.message == "hal_module_load: mock: the image says it is broken");
  CHECK(module == nullptr);
}

TEST_CASE("kernels: lookup, info, launch checks and a real launch", "[kernel]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_module_t module = nullptr;
  const hal_module_desc_t desc = opencl_source_desc("scale");
  REQUIRE(hal_module_load(device, &desc, &module) == HAL_SUCCESS);

  hal_kernel_desc_t kernel_desc{};
  kernel_desc.struct_size = sizeof(kernel_desc);
  kernel_desc.name = "nope";
  hal_kernel_t kernel = nullptr;
  CHECK(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_ERROR_NOT_FOUND);
  CHECK(last_detail().plugin == "mock");
  kernel_desc.arg_count = HAL_MAX_KERNEL_ARGS + 1;
  const hal_arg_type_t bad_types[2] = {HAL_ARG_POINTER, static_cast<hal_arg_type_t>(42)};
  kernel_desc.arg_types = bad_types;
  CHECK(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_ERROR_INVALID_ARGUMENT);
  kernel_desc.arg_count = 2;
  CHECK(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_detail().message, Catch::Contains("desc->arg_types[1] is 42"));
  kernel_desc.arg_types = nullptr;
  kernel_desc.arg_count = 0;
  kernel_desc.name = nullptr;
  CHECK(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_ERROR_NULL_POINTER);
  kernel_desc.name = "scale";
  REQUIRE(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_SUCCESS);

  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_kernel_get_info(kernel, &info) == HAL_SUCCESS);
  CHECK(std::string(info.name) == "scale");
  CHECK(info.arg_count == 3);
  CHECK(info.arg_types[2] == HAL_ARG_F32);
  info.struct_size = 8;
  CHECK(hal_kernel_get_info(kernel, &info) == HAL_ERROR_INVALID_ARGUMENT);

  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  constexpr uint32_t kCount = 1000;
  std::mt19937 random(99);
  std::uniform_real_distribution<float> values(-10.0f, 10.0f);
  std::vector<float> host(kCount);
  for (float& value : host) value = values(random);
  float* data = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kCount * sizeof(float), 0,
                        reinterpret_cast<void**>(&data)) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(data, host.data(), kCount * sizeof(float), stream) == HAL_SUCCESS);

  uint32_t count = kCount;
  float factor = 2.5f;
  hal_kernel_arg_t args[3] = {{&data, sizeof(data)}, {&count, 4}, {&factor, 4}};
  hal_launch_config_t config = config_1d(8, 128);

  SECTION("launch shape") {
    CHECK(hal_launch_kernel(kernel, nullptr, 3, args, stream) == HAL_ERROR_NULL_POINTER);
    hal_launch_config_t small = config;
    small.struct_size = 8;
    CHECK(hal_launch_kernel(kernel, &small, 3, args, stream) == HAL_ERROR_INVALID_ARGUMENT);
    hal_launch_config_t zero = config;
    zero.block[1] = 0;
    CHECK(hal_launch_kernel(kernel, &zero, 3, args, stream) == HAL_ERROR_INVALID_LAUNCH);
    CHECK(last_detail().message == "hal_launch_kernel: config->block[1] (y) is 0");
    hal_launch_config_t wide = config;
    wide.grid[0] = 70000;
    CHECK(hal_launch_kernel(kernel, &wide, 3, args, stream) == HAL_ERROR_INVALID_LAUNCH);
    hal_launch_config_t tall = config;
    tall.block[2] = 65;
    CHECK(hal_launch_kernel(kernel, &tall, 3, args, stream) == HAL_ERROR_INVALID_LAUNCH);
    // The device allows 256 threads per block, the kernel 128.
    hal_launch_config_t crowded = config_1d(1, 16);
    crowded.block[1] = 9;
    CHECK(hal_launch_kernel(kernel, &crowded, 3, args, stream) == HAL_ERROR_INVALID_LAUNCH);
    CHECK(last_detail().message ==
          "hal_launch_kernel: the block has 144 threads, above the 128 allowed per block");
    hal_launch_config_t greedy = config;
    greedy.shared_memory_bytes = 4097;
    CHECK(hal_launch_kernel(kernel, &greedy, 3, args, stream) == HAL_ERROR_INVALID_LAUNCH);
  }
  SECTION("arguments") {
    CHECK(hal_launch_kernel(kernel, &config, 2, args, stream) == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK(last_detail().message == "hal_launch_kernel: arg_count is 2 but kernel 'scale' takes 3");
    CHECK(hal_launch_kernel(kernel, &config, 3, nullptr, stream) == HAL_ERROR_NULL_POINTER);
    hal_kernel_arg_t wrong_size[3] = {args[0], {&count, 8}, args[2]};
    CHECK(hal_launch_kernel(kernel, &config, 3, wrong_size, stream) == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK(last_detail().message ==
          "hal_launch_kernel: args[1].size is 8 but argument 1 of kernel 'scale' is u32 (4 bytes)");
    hal_kernel_arg_t null_value[3] = {args[0], args[1], {nullptr, 4}};
    CHECK(hal_launch_kernel(kernel, &config, 3, null_value, stream) == HAL_ERROR_NULL_POINTER);
  }
  SECTION("handles and devices") {
    CHECK(hal_launch_kernel(reinterpret_cast<hal_kernel_t>(module), &config, 3, args, stream) ==
          HAL_ERROR_INVALID_HANDLE);
    hal_stream_t other = nullptr;
    REQUIRE(hal_stream_create(device_of("mock", 1), 0, &other) == HAL_SUCCESS);
    CHECK(hal_launch_kernel(kernel, &config, 3, args, other) == HAL_ERROR_DEVICE_MISMATCH);
    CHECK(hal_stream_destroy(other) == HAL_SUCCESS);
  }
  SECTION("a launch runs in stream order") {
    REQUIRE(hal_launch_kernel(kernel, &config, 3, args, stream) == HAL_SUCCESS);
    std::vector<float> result(kCount);
    REQUIRE(hal_memcpy_async(result.data(), data, kCount * sizeof(float), stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    for (uint32_t i = 0; i < kCount; ++i) CHECK(result[i] == host[i] * 2.5f);
  }
  SECTION("unloading the module destroys its kernels") {
    REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
    CHECK(hal_launch_kernel(kernel, &config, 3, args, stream) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_kernel_get_info(kernel, &info) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_module_unload(module) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_ERROR_DESTROYED_HANDLE);
    module = nullptr;
  }
  CHECK(hal_module_unload(module) == HAL_SUCCESS);
  CHECK(hal_mem_free(data) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}
