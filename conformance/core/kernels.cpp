// core.kernels: modules, signatures, launches over big and odd grids, many
// and large arguments, shared memory, and the launch error paths. The
// kernels are CPU shared objects built by the conformance tree.
#include <cstring>
#include <fstream>
#include <iterator>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

constexpr Requirements kCpuKernels{HAL_DEVICE_CAP_KERNELS,
                                   1u << HAL_MODULE_FORMAT_CPU_SHARED_OBJECT, 1};

hal_launch_config_t launch_config(uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                  uint32_t bz, uint32_t shared = 0) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = gx, config.grid[1] = gy, config.grid[2] = gz;
  config.block[0] = bx, config.block[1] = by, config.block[2] = bz;
  config.shared_memory_bytes = shared;
  return config;
}

// Launches write_index over |extent| with |block| and checks every element
// was written once with its own coordinates.
void check_coverage(TestContext& ctx, hal_kernel_t kernel, hal_stream_t stream,
                    const uint32_t (&extent)[3], const uint32_t (&block)[3]) {
  const size_t elements = size_t{extent[0]} * extent[1] * extent[2];
  Buffer out(ctx.device(), elements * 16);
  HC_OK(hal_memset_async(out.get(), 0, out.size(), stream));
  hal_launch_config_t config =
      launch_config((extent[0] + block[0] - 1) / block[0], (extent[1] + block[1] - 1) / block[1],
                    (extent[2] + block[2] - 1) / block[2], block[0], block[1], block[2]);
  void* pointer = out.get();
  const hal_kernel_arg_t bound[] = {
      {&pointer, sizeof(void*)}, {&extent[0], 4}, {&extent[1], 4}, {&extent[2], 4}};
  HC_OK(hal_launch_kernel(kernel, &config, 4, bound, stream));
  const std::vector<uint8_t> bytes = read_back(stream, out.get(), out.size());
  const auto* slots = reinterpret_cast<const uint32_t*>(bytes.data());
  for (size_t i = 0; i < elements; ++i) {
    const uint32_t x = static_cast<uint32_t>(i % extent[0]);
    const uint32_t y = static_cast<uint32_t>(i / extent[0] % extent[1]);
    const uint32_t z = static_cast<uint32_t>(i / (size_t{extent[0]} * extent[1]));
    const uint32_t* slot = slots + 4 * i;
    HC_REQUIRE(slot[3] == 1 && slot[0] == x && slot[1] == y && slot[2] == z,
               strf("hal_launch_kernel(write_index) over a grid %ux%ux%u of blocks %ux%ux%u: "
                    "element (%u,%u,%u) written %u times (expected once), holding (%u,%u,%u)",
                    config.grid[0], config.grid[1], config.grid[2], block[0], block[1], block[2], x,
                    y, z, slot[3], slot[0], slot[1], slot[2]));
  }
}

}  // namespace

HALCONFORM_TEST("core.kernels.module_load",
                "modules load from a file and from memory; bad images and formats fail right",
                kCpuKernels) {
  Module from_file(ctx.device(), ctx.kernels_path());
  std::ifstream file(ctx.kernels_path(), std::ios::binary);
  const std::vector<char> image((std::istreambuf_iterator<char>(file)), {});
  HC_REQUIRE(!image.empty(), "cannot read " + ctx.kernels_path());
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
  desc.data = image.data();
  desc.size = image.size();
  hal_module_t module = nullptr;
  HC_OK(hal_module_load(ctx.device(), &desc, &module));
  HC_OK(hal_module_unload(module));
  const char garbage[] = "this is not a shared object";
  desc.data = garbage;
  desc.size = sizeof(garbage);
  HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_INVALID_MODULE);
  desc.data = nullptr;
  desc.path = "/nonexistent/halconform/module.so";
  HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_NOT_FOUND);
  desc.data = garbage;  // both data and path
  HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_INVALID_ARGUMENT);
  desc.data = nullptr;
  desc.path = ctx.kernels_path().c_str();
  for (uint32_t format = HAL_MODULE_FORMAT_OPENCL_C; format <= HAL_MODULE_FORMAT_HSACO; ++format) {
    if ((ctx.properties().module_formats & (1u << format)) != 0) continue;
    desc.format = static_cast<hal_module_format_t>(format);
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_UNSUPPORTED);
  }
  HC_OK(hal_module_unload(nullptr));
}

HALCONFORM_TEST("core.kernels.signature",
                "kernels resolve their exported signature; mismatches and unknown names fail",
                kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  hal_kernel_t kernel = module.kernel("echo_mixed");
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  HC_OK(hal_kernel_get_info(kernel, &info));
  const hal_arg_type_t expected[] = {HAL_ARG_POINTER, HAL_ARG_I32, HAL_ARG_U32, HAL_ARG_I64,
                                     HAL_ARG_U64,     HAL_ARG_F32, HAL_ARG_F64, HAL_ARG_POINTER};
  HC_REQUIRE(info.arg_count == 8 && std::strcmp(info.name, "echo_mixed") == 0,
             strf("kernel info says '%s' with %u arguments", info.name, info.arg_count));
  for (int i = 0; i < 8; ++i) {
    HC_REQUIRE(info.arg_types[i] == expected[i],
               strf("argument %d has type %d", i, info.arg_types[i]));
  }
  HC_REQUIRE(info.max_threads_per_block >= 1 &&
                 info.max_threads_per_block <= ctx.properties().max_threads_per_block,
             strf("kernel max_threads_per_block %u", info.max_threads_per_block));
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = "echo_mixed";
  desc.arg_types = expected;
  desc.arg_count = 7;  // one short of the module's signature
  hal_kernel_t other = nullptr;
  HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_ARGUMENT_MISMATCH);
  desc.arg_count = 8;
  HC_OK(hal_kernel_get(module.get(), &desc, &other));
  desc.name = "no_such_kernel";
  HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_NOT_FOUND);
  info.struct_size = 8;
  HC_EXPECT_RESULT(hal_kernel_get_info(kernel, &info), HAL_ERROR_INVALID_ARGUMENT);
}

HALCONFORM_TEST("core.kernels.grid_coverage",
                "odd 1-D, 2-D and 3-D grids and blocks cover every element exactly once",
                kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  Stream stream(ctx.device());
  hal_kernel_t kernel = module.kernel("write_index");
  const uint32_t max_block = std::min(ctx.properties().max_threads_per_block, 256u);
  check_coverage(ctx, kernel, stream, {1, 1, 1}, {1, 1, 1});
  check_coverage(ctx, kernel, stream, {1000003, 1, 1}, {max_block, 1, 1});
  check_coverage(ctx, kernel, stream, {37, 29, 3}, {4, 3, 2});
  check_coverage(ctx, kernel, stream, {5, 7, 11}, {1, 1, 1});
  // A big grid of one-thread blocks: 100 003 blocks.
  check_coverage(ctx, kernel, stream, {100003, 1, 1}, {1, 1, 1});
}

HALCONFORM_TEST("core.kernels.arguments",
                "every argument type, extreme values, and 64 arguments arrive intact",
                kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  Stream stream(ctx.device());
  Buffer out(ctx.device(), 64 * 8);
  void* pointer = out.get();
  int32_t a = INT32_MIN;
  uint32_t b = UINT32_MAX;
  int64_t c = INT64_MIN + 1;
  uint64_t d = 0xfedcba9876543210ull;
  float e = -3.25e38f;
  double f = 1.0 / 3.0;
  // A second pointer argument, echoed as its value. It points into |out| so a
  // validation layer that checks kernel pointers accepts it.
  const void* g = static_cast<const char*>(out.get()) + 8 * 40 + 3;
  const hal_kernel_arg_t mixed[] = {{&pointer, 8}, {&a, 4}, {&b, 4}, {&c, 8},
                                    {&d, 8},       {&e, 4}, {&f, 8}, {&g, 8}};
  const hal_launch_config_t config = launch_config(3, 1, 1, 1, 1, 1);
  HC_OK(hal_launch_kernel(module.kernel("echo_mixed"), &config, 8, mixed, stream));
  // Argument values are copied at enqueue: changing them now changes nothing.
  a = 0, b = 0, c = 0, d = 0, e = 0, f = 0;
  std::vector<uint8_t> bytes = read_back(stream, out.get(), 7 * 8);
  uint64_t echoed[64];
  std::memcpy(echoed, bytes.data(), 7 * 8);
  uint32_t e_bits;
  const float e_value = -3.25e38f;
  std::memcpy(&e_bits, &e_value, 4);
  uint64_t f_bits;
  const double f_value = 1.0 / 3.0;
  std::memcpy(&f_bits, &f_value, 8);
  const uint64_t want[] = {static_cast<uint64_t>(int64_t{INT32_MIN}),
                           UINT32_MAX,
                           static_cast<uint64_t>(INT64_MIN + 1),
                           0xfedcba9876543210ull,
                           e_bits,
                           f_bits,
                           reinterpret_cast<uint64_t>(g)};
  for (int i = 0; i < 7; ++i) {
    HC_REQUIRE(echoed[i] == want[i], strf("mixed argument %d arrived as 0x%llx, sent 0x%llx", i,
                                          static_cast<unsigned long long>(echoed[i]),
                                          static_cast<unsigned long long>(want[i])));
  }
  std::vector<uint64_t> values(63);
  std::vector<hal_kernel_arg_t> args{{&pointer, 8}};
  for (uint64_t& value : values) {
    value = ctx.random()();
    args.push_back({&value, 8});
  }
  HC_OK(hal_launch_kernel(module.kernel("echo_64"), &config, 64, args.data(), stream));
  bytes = read_back(stream, out.get(), 63 * 8);
  std::memcpy(echoed, bytes.data(), 63 * 8);
  for (int i = 0; i < 63; ++i) {
    HC_REQUIRE(echoed[i] == values[i],
               strf("hal_launch_kernel(echo_64): argument %d of 64 arrived as 0x%llx, sent 0x%llx",
                    i + 2, static_cast<unsigned long long>(echoed[i]),
                    static_cast<unsigned long long>(values[i])));
  }
}

HALCONFORM_TEST("core.kernels.shared_memory",
                "dynamic group-shared memory is per block, aligned and sized as requested",
                kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  Stream stream(ctx.device());
  const uint32_t threads = std::min(ctx.properties().max_threads_per_block, 128u);
  const uint32_t n = 10007, blocks = (n + threads - 1) / threads;
  HC_REQUIRE(ctx.properties().max_shared_memory_bytes >= threads * 4,
             "max_shared_memory_bytes cannot hold one word per thread");
  std::vector<uint32_t> input(n);
  for (uint32_t& v : input) v = static_cast<uint32_t>(ctx.random()() % 1000);
  Buffer in(ctx.device(), n * 4), out(ctx.device(), blocks * 4);
  HC_OK(hal_memcpy_async(in.get(), input.data(), n * 4, stream));
  void* in_ptr = in.get();
  void* out_ptr = out.get();
  const hal_kernel_arg_t args[] = {{&in_ptr, 8}, {&out_ptr, 8}, {&n, 4}};
  const hal_launch_config_t config = launch_config(blocks, 1, 1, threads, 1, 1, threads * 4);
  HC_OK(hal_launch_kernel(module.kernel("block_sum"), &config, 3, args, stream));
  const std::vector<uint8_t> bytes = read_back(stream, out.get(), blocks * 4);
  const auto* sums = reinterpret_cast<const uint32_t*>(bytes.data());
  for (uint32_t blk = 0; blk < blocks; ++blk) {
    uint32_t expected = 0;
    for (uint32_t t = 0; t < threads && blk * threads + t < n; ++t)
      expected += input[blk * threads + t];
    HC_REQUIRE(sums[blk] == expected,
               strf("block %u summed %u, expected %u", blk, sums[blk], expected));
  }
}

HALCONFORM_TEST("core.kernels.max_block",
                "a block of the declared maximum threads runs every one of its work-items",
                kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  Stream stream(ctx.device());
  hal_kernel_t kernel = module.kernel("write_index");
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  HC_OK(hal_kernel_get_info(kernel, &info));
  const hal_device_properties_t& p = ctx.properties();
  const uint32_t max_threads = std::min(p.max_threads_per_block, info.max_threads_per_block);
  // The whole maximum along x (as far as max_block_dims allows), then along y and z.
  const uint32_t bx = std::min(max_threads, p.max_block_dims[0]);
  check_coverage(ctx, kernel, stream, {bx * 3, 1, 1}, {bx, 1, 1});
  const uint32_t by = std::min(max_threads / bx, p.max_block_dims[1]);
  if (by > 1) check_coverage(ctx, kernel, stream, {bx, by * 2, 1}, {bx, by, 1});
  const uint32_t bz = std::min(max_threads, p.max_block_dims[2]);
  check_coverage(ctx, kernel, stream, {1, 1, bz * 2}, {1, 1, bz});
  ctx.note(strf("blocks of %u threads (x), %ux%u (x, y) and %u (z)", bx, bx, by, bz));
}

HALCONFORM_TEST("core.kernels.max_grid",
                "grids at the declared max_grid_dims[1] and [2] (and [0] up to 2^20) run every "
                "block",
                kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  Stream stream(ctx.device());
  hal_kernel_t kernel = module.kernel("write_index");
  const hal_device_properties_t& p = ctx.properties();
  // Bounded so the test stays fast; a declared limit past the bound is noted.
  constexpr uint32_t kMostBlocks = 1u << 20;
  const uint32_t gx = std::min(p.max_grid_dims[0], kMostBlocks);
  const uint32_t gy = std::min(p.max_grid_dims[1], kMostBlocks);
  const uint32_t gz = std::min(p.max_grid_dims[2], kMostBlocks);
  check_coverage(ctx, kernel, stream, {gx, 1, 1}, {1, 1, 1});
  check_coverage(ctx, kernel, stream, {1, gy, 1}, {1, 1, 1});
  check_coverage(ctx, kernel, stream, {1, 1, gz}, {1, 1, 1});
  ctx.note(strf("grids of %u, %u and %u blocks (declared %u, %u, %u)", gx, gy, gz,
                p.max_grid_dims[0], p.max_grid_dims[1], p.max_grid_dims[2]));
}

HALCONFORM_TEST("core.kernels.parallelism",
                "as many blocks run at once as compute_units declares (at least half of it)",
                kCpuKernels) {
  Module module(ctx.device(), ctx.kernels_path());
  Stream stream(ctx.device());
  const uint32_t units = ctx.properties().compute_units;
  HC_REQUIRE(units >= 1, "compute_units is 0");
  // Blocks that wait (at most 2 s in all) until |units| of them ran at once: a
  // high-water mark of blocks running concurrently, bounded, never a hang.
  Buffer state(ctx.device(), 4 * sizeof(uint64_t));
  const uint64_t initial[4] = {0, 0, units, 0};
  HC_OK(hal_memcpy_async(state.get(), initial, sizeof(initial), stream));
  void* pointer = state.get();
  const uint32_t wait_ms = 2000;
  const hal_kernel_arg_t args[] = {{&pointer, sizeof(void*)}, {&wait_ms, 4}};
  const hal_launch_config_t config = launch_config(units, 1, 1, 1, 1, 1);
  HC_OK(hal_launch_kernel(module.kernel("concurrency_probe"), &config, 2, args, stream));
  const std::vector<uint8_t> bytes = read_back(stream, state.get(), state.size());
  uint64_t seen[4];
  std::memcpy(seen, bytes.data(), sizeof(seen));
  HC_REQUIRE(seen[0] == 0, strf("concurrency_probe left %llu blocks counted as running",
                                static_cast<unsigned long long>(seen[0])));
  // Half: a worker may be the launching thread, or busy a moment elsewhere;
  // an overstated count (a multiple of the real one) stays far below it.
  HC_REQUIRE(seen[1] * 2 >= units,
             strf("compute_units declares %u, but hal_launch_kernel of %u spinning blocks ran at "
                  "most %llu at once in 2 s: the declared parallelism is overstated",
                  units, units, static_cast<unsigned long long>(seen[1])));
  ctx.note(strf("%llu of %u blocks ran at once", static_cast<unsigned long long>(seen[1]), units));
}

}  // namespace halconform
