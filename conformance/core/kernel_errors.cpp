// core.kernels error paths and lifetimes: invalid launches, argument
// mismatches, device mismatches, and unloading with launches pending.
#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
#include "kernel_sources.hpp"

namespace halconform {
namespace {

hal_launch_config_t one_block() {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  return config;
}

}  // namespace

HALCONFORM_TEST("core.kernels.launch_errors",
                "zero or oversized grids and blocks, too much shared memory and wrong arguments "
                "are rejected with the documented codes",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream stream(ctx.device());
    hal_kernel_t empty = module.kernel("empty");
    const hal_device_properties_t& p = ctx.properties();
    hal_launch_config_t config = one_block();
    HC_OK(hal_launch_kernel(empty, &config, 0, nullptr, stream));
    for (int dim = 0; dim < 3; ++dim) {
      config = one_block();
      config.grid[dim] = 0;
      HC_EXPECT_RESULT(hal_launch_kernel(empty, &config, 0, nullptr, stream),
                       HAL_ERROR_INVALID_LAUNCH);
      config = one_block();
      config.block[dim] = 0;
      HC_EXPECT_RESULT(hal_launch_kernel(empty, &config, 0, nullptr, stream),
                       HAL_ERROR_INVALID_LAUNCH);
      if (p.max_block_dims[dim] < UINT32_MAX) {
        config = one_block();
        config.block[dim] = p.max_block_dims[dim] + 1;
        HC_EXPECT_RESULT(hal_launch_kernel(empty, &config, 0, nullptr, stream),
                         HAL_ERROR_INVALID_LAUNCH);
      }
      if (p.max_grid_dims[dim] < UINT32_MAX) {
        config = one_block();
        config.grid[dim] = p.max_grid_dims[dim] + 1;
        HC_EXPECT_RESULT(hal_launch_kernel(empty, &config, 0, nullptr, stream),
                         HAL_ERROR_INVALID_LAUNCH);
      }
    }
    config = one_block();
    config.shared_memory_bytes = p.max_shared_memory_bytes + 1;
    HC_EXPECT_RESULT(hal_launch_kernel(empty, &config, 0, nullptr, stream),
                     HAL_ERROR_INVALID_LAUNCH);
    config = one_block();
    config.struct_size = 8;
    HC_EXPECT_RESULT(hal_launch_kernel(empty, &config, 0, nullptr, stream),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_EXPECT_RESULT(hal_launch_kernel(empty, nullptr, 0, nullptr, stream), HAL_ERROR_NULL_POINTER);

    hal_kernel_t affine = module.kernel("affine_u32");
    Buffer data(ctx.device(), 64);
    void* pointer = data.get();
    uint32_t n = 16, a = 3;
    uint64_t wide = 7;
    config = one_block();
    const hal_kernel_arg_t too_few[] = {{&pointer, 8}, {&n, 4}, {&a, 4}};
    HC_EXPECT_RESULT(hal_launch_kernel(affine, &config, 3, too_few, stream),
                     HAL_ERROR_ARGUMENT_MISMATCH);
    const hal_kernel_arg_t wrong_size[] = {{&pointer, 8}, {&n, 4}, {&a, 4}, {&wide, 8}};
    HC_EXPECT_RESULT(hal_launch_kernel(affine, &config, 4, wrong_size, stream),
                     HAL_ERROR_ARGUMENT_MISMATCH);
    const hal_kernel_arg_t null_value[] = {{&pointer, 8}, {&n, 4}, {nullptr, 4}, {&a, 4}};
    HC_EXPECT_RESULT(hal_launch_kernel(affine, &config, 4, null_value, stream),
                     HAL_ERROR_NULL_POINTER);
    HC_EXPECT_RESULT(hal_launch_kernel(affine, &config, 4, nullptr, stream),
                     HAL_ERROR_NULL_POINTER);
    const hal_kernel_arg_t right[] = {{&pointer, 8}, {&n, 4}, {&a, 4}, {&a, 4}};
    HC_EXPECT_RESULT(hal_launch_kernel(nullptr, &config, 4, right, stream),
                     HAL_ERROR_INVALID_HANDLE);
    HC_EXPECT_RESULT(hal_launch_kernel(affine, &config, 4, right, nullptr),
                     HAL_ERROR_INVALID_HANDLE);
    HC_OK(hal_stream_synchronize(stream));
  });
}

HALCONFORM_TEST("core.kernels.device_mismatch",
                "a kernel of one device launched on another device's stream is DEVICE_MISMATCH",
                {HAL_DEVICE_CAP_KERNELS, 0, 2}) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream peer_stream(ctx.peer_device());
    const hal_launch_config_t config = one_block();
    HC_EXPECT_RESULT(hal_launch_kernel(module.kernel("empty"), &config, 0, nullptr, peer_stream),
                     HAL_ERROR_DEVICE_MISMATCH);
  });
}

HALCONFORM_TEST(
    "core.kernels.chain_and_unload",
    "a long chain of dependent launches is exact, and unload waits for pending launches",
    {HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_HOST_CALLBACKS, 0, 1}) {
  for_each_kernel_source(ctx, [&](const KernelSource& source, SourceModule&) {
    Stream stream(ctx.device());
    constexpr uint32_t kElements = 4099, kLaunches = 200;
    std::vector<uint32_t> expected(kElements);
    for (uint32_t i = 0; i < kElements; ++i) expected[i] = i;
    Buffer data(ctx.device(), kElements * 4);
    HC_OK(hal_memcpy_async(data.get(), expected.data(), kElements * 4, stream));
    HC_OK(hal_stream_synchronize(stream));
    {
      SourceModule loaded(ctx.device(), source);
      HC_OK(loaded.load_result());
      hal_kernel_t affine = loaded.kernel("affine_u32");
      HostGate gate;
      gate.enqueue_on(stream);  // every launch is still pending when unload starts
      void* pointer = data.get();
      uint32_t n = kElements;
      hal_launch_config_t config = one_block();
      config.grid[0] = (kElements + 63) / 64;
      config.block[0] = 64;
      for (uint32_t k = 0; k < kLaunches; ++k) {
        uint32_t a = 2 * k + 3, b = k * 7919u;
        const hal_kernel_arg_t args[] = {{&pointer, 8}, {&n, 4}, {&a, 4}, {&b, 4}};
        HC_OK(hal_launch_kernel(affine, &config, 4, args, stream));
        for (uint32_t& x : expected) x = x * a + b;
      }
      gate.open();
    }  // SourceModule's destructor unloads here, with launches possibly still queued.
    const std::vector<uint8_t> bytes = read_back(stream, data.get(), kElements * 4);
    const auto* got = reinterpret_cast<const uint32_t*>(bytes.data());
    for (uint32_t i = 0; i < kElements; ++i) {
      HC_REQUIRE(got[i] == expected[i],
                 strf("hal_launch_kernel(affine_u32) x %u, then hal_module_unload with them "
                      "pending: element %u is %u, expected %u",
                      kLaunches, i, got[i], expected[i]));
    }
  });
}

}  // namespace halconform
