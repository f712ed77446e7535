// core.kernels: modules, signatures, launches over big and odd grids, many
// and large arguments, shared memory, and the launch error paths. Each test
// runs once per kernel source the device loads (kernel_sources.hpp): the
// plugin's conformance kernel pack, the CPU shared object, the HAL dialect.
#include <cstring>
#include <fstream>
#include <iterator>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
#include "api_model.hpp"
#include "kernel_sources.hpp"
#include "names.hpp"

namespace halconform {
namespace {

// The most threads a block of |kernel| may have: the device's and the kernel's limits.
uint32_t kernel_max_threads(TestContext& ctx, hal_kernel_t kernel) {
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  HC_OK(hal_kernel_get_info(kernel, &info));
  return std::min(ctx.properties().max_threads_per_block, info.max_threads_per_block);
}

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

HALCONFORM_TEST("core.kernels.sources",
                "the conformance kernels load from every source the device lists (its kernel "
                "pack, the CPU shared object, the HAL dialect); none at all is 'kernels: not "
                "certified'",
                kCoreKernels) {
  std::string why_not;
  const std::vector<KernelSource> sources = kernel_sources(ctx, &why_not);
  std::string loaded, failed;
  for (const KernelSource& source : sources) {
    SourceModule module(ctx.device(), source);
    if (module.load_result() != HAL_SUCCESS) {
      failed += strf("%s%s: hal_module_load returned %s: %s", failed.empty() ? "" : "; ",
                     source.name.c_str(), hal_result_string(module.load_result()),
                     module.load_message().c_str());
      continue;
    }
    // Every kernel is there with its signature, and the smallest launch runs.
    for (const char* name : {"write_index", "affine_u32", "echo_mixed", "echo_64", "block_sum",
                             "shared_fill", "empty", "concurrency_probe"}) {
      hal_kernel_info_t info{};
      info.struct_size = sizeof(info);
      HC_OK(hal_kernel_get_info(module.kernel(name), &info));
      const std::vector<hal_arg_type_t> want = kernel_signature(name);
      HC_REQUIRE(
          info.arg_count == want.size() && std::equal(want.begin(), want.end(), info.arg_types),
          strf("%s: hal_kernel_get_info(%s) reports %u arguments, the kernel has %zu",
               source.name.c_str(), name, info.arg_count, want.size()));
    }
    Stream stream(ctx.device());
    hal_launch_config_t config{};
    config.struct_size = sizeof(config);
    config.grid[0] = config.grid[1] = config.grid[2] = 1;
    config.block[0] = config.block[1] = config.block[2] = 1;
    HC_OK(hal_launch_kernel(module.kernel("empty"), &config, 0, nullptr, stream));
    HC_OK(hal_stream_synchronize(stream));
    loaded += (loaded.empty() ? "" : ", ") + source.name;
  }
  if (loaded.empty()) {
    fail("kernels: not certified: the device declares HAL_DEVICE_CAP_KERNELS (module formats " +
         module_format_names(ctx.properties().module_formats) +
         ") and no conformance kernel loads on it: " + (failed.empty() ? why_not : failed) +
         (failed.empty() || why_not.empty() ? "" : "; " + why_not) +
         ". Ship the kernels of conformance/kernels/core_kernels.hal in a format the device "
         "loads as a conformance kernel pack (SPEC.md, Conformance)");
  }
  HC_REQUIRE(
      failed.empty(),
      "a module format the device declares does not load the conformance kernels: " + failed);
  ctx.note("kernels from " + loaded + (why_not.empty() ? "" : "; not used: " + why_not));
}

HALCONFORM_TEST("core.kernels.module_load",
                "modules load from a file and from memory; bad images and formats fail right",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource& source, SourceModule&) {
    // The source the other way round: from memory when it came from a file, and back.
    std::vector<char> image = source.image;
    std::string path = source.path;
    std::string temporary;
    if (image.empty()) {
      std::ifstream file(source.path, std::ios::binary);
      image.assign(std::istreambuf_iterator<char>(file), {});
      HC_REQUIRE(!image.empty(), "cannot read " + source.path);
    } else {
      char name[] = "/tmp/halconform-module-XXXXXX";
      const int fd = mkstemp(name);
      HC_REQUIRE(fd >= 0, std::string("mkstemp failed"));
      HC_REQUIRE(write(fd, image.data(), image.size()) == static_cast<ssize_t>(image.size()),
                 std::string("cannot write a temporary module file"));
      close(fd);
      temporary = path = name;
    }
    struct Remove {
      std::string path;
      ~Remove() {
        if (!path.empty()) unlink(path.c_str());
      }
    } remove_temporary{temporary};
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = source.format;
    desc.path = path.c_str();
    hal_module_t module = nullptr;
    HC_OK(hal_module_load(ctx.device(), &desc, &module));
    HC_OK(hal_module_unload(module));
    desc.path = nullptr;
    desc.data = image.data();
    desc.size = image.size();
    HC_OK(hal_module_load(ctx.device(), &desc, &module));
    HC_OK(hal_module_unload(module));
    const char garbage[] = "\x7f\x01this is not a module of any format {{{ ;;;";
    desc.data = garbage;
    desc.size = sizeof(garbage);
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_INVALID_MODULE);
    desc.data = nullptr;
    desc.path = "/nonexistent/halconform/module.so";
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_NOT_FOUND);
    desc.data = garbage;  // both data and path
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_INVALID_ARGUMENT);
    desc.path = nullptr;
    desc.size = 0;  // data without a size
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_INVALID_ARGUMENT);
    desc.data = nullptr;  // neither
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_INVALID_ARGUMENT);
    desc.path = path.c_str();
    desc.format = static_cast<hal_module_format_t>(99);
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_INVALID_ARGUMENT);
    for (uint32_t format = 0; format <= HAL_MODULE_FORMAT_HAL_DIALECT; ++format) {
      if ((ctx.properties().module_formats & (1u << format)) != 0) continue;
      desc.format = static_cast<hal_module_format_t>(format);
      HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_UNSUPPORTED);
    }
    desc.format = source.format;
    desc.struct_size = 8;
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, &module), HAL_ERROR_INVALID_ARGUMENT);
    desc.struct_size = sizeof(desc);
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), nullptr, &module), HAL_ERROR_NULL_POINTER);
    HC_EXPECT_RESULT(hal_module_load(ctx.device(), &desc, nullptr), HAL_ERROR_NULL_POINTER);
    HC_EXPECT_RESULT(hal_module_load(nullptr, &desc, &module), HAL_ERROR_INVALID_HANDLE);
    HC_OK(hal_module_unload(nullptr));
  });
}

HALCONFORM_TEST("core.kernels.signature",
                "kernels resolve their signature; mismatches and unknown names fail",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource& source, SourceModule& module) {
    const hal_kernel_t kernel = module.kernel("echo_mixed");
    hal_kernel_info_t info{};
    info.struct_size = sizeof(info);
    HC_OK(hal_kernel_get_info(kernel, &info));
    const std::vector<hal_arg_type_t> expected = kernel_signature("echo_mixed");
    HC_REQUIRE(info.arg_count == 8 && std::strcmp(info.name, "echo_mixed") == 0,
               strf("hal_kernel_get_info says '%s' with %u arguments", info.name, info.arg_count));
    for (int i = 0; i < 8; ++i) {
      HC_REQUIRE(info.arg_types[i] == expected[i],
                 strf("hal_kernel_get_info(echo_mixed): argument %d is %s, declared %s", i,
                      model::enum_label("hal_arg_type_t", info.arg_types[i]).c_str(),
                      model::enum_label("hal_arg_type_t", expected[i]).c_str()));
    }
    HC_REQUIRE(info.max_threads_per_block >= 1 &&
                   info.max_threads_per_block <= ctx.properties().max_threads_per_block,
               strf("hal_kernel_get_info(echo_mixed).max_threads_per_block %u is not in [1, the "
                    "device's max_threads_per_block %u]",
                    info.max_threads_per_block, ctx.properties().max_threads_per_block));
    hal_kernel_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.name = "echo_mixed";
    hal_kernel_t other = nullptr;
    // Formats whose module states its signature (SPEC.md §8): the module's,
    // when none is declared, and a declared one must agree with it.
    if (source.format == HAL_MODULE_FORMAT_CPU_SHARED_OBJECT ||
        source.format == HAL_MODULE_FORMAT_HAL_DIALECT) {
      HC_OK(hal_kernel_get(module.get(), &desc, &other));
      HC_OK(hal_kernel_get_info(other, &info));
      HC_REQUIRE(
          info.arg_count == 8 && std::equal(expected.begin(), expected.end(), info.arg_types),
          strf("hal_kernel_get(echo_mixed) with arg_types NULL: the module's signature "
               "has %u arguments, the kernel 8 (ptr,i32,u32,i64,u64,f32,f64,ptr)",
               info.arg_count));
      desc.arg_types = expected.data();
      desc.arg_count = 7;  // one short of the module's signature
      HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_ARGUMENT_MISMATCH);
      std::vector<hal_arg_type_t> wrong = expected;
      wrong[1] = HAL_ARG_F32;  // i32 declared as f32: the same size, another type
      desc.arg_types = wrong.data();
      desc.arg_count = 8;
      HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_ARGUMENT_MISMATCH);
    }
    desc.arg_types = expected.data();
    desc.arg_count = 8;
    HC_OK(hal_kernel_get(module.get(), &desc, &other));
    desc.arg_count = HAL_MAX_KERNEL_ARGS + 1;
    HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_INVALID_ARGUMENT);
    std::vector<hal_arg_type_t> unknown = expected;
    unknown[2] = static_cast<hal_arg_type_t>(77);
    desc.arg_types = unknown.data();
    desc.arg_count = 8;
    HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_INVALID_ARGUMENT);
    desc.arg_types = nullptr;
    desc.arg_count = 3;  // a count without types
    HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_INVALID_ARGUMENT);
    desc.arg_count = 0;
    desc.name = "no_such_kernel";
    desc.arg_types = expected.data();
    desc.arg_count = 8;
    HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_NOT_FOUND);
    desc.name = nullptr;
    HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_NULL_POINTER);
    desc.name = "echo_mixed";
    HC_EXPECT_RESULT(hal_kernel_get(module.get(), nullptr, &other), HAL_ERROR_NULL_POINTER);
    HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, nullptr), HAL_ERROR_NULL_POINTER);
    desc.struct_size = 8;
    HC_EXPECT_RESULT(hal_kernel_get(module.get(), &desc, &other), HAL_ERROR_INVALID_ARGUMENT);
    info.struct_size = 8;
    HC_EXPECT_RESULT(hal_kernel_get_info(kernel, &info), HAL_ERROR_INVALID_ARGUMENT);
    HC_EXPECT_RESULT(hal_kernel_get_info(kernel, nullptr), HAL_ERROR_NULL_POINTER);
    HC_EXPECT_RESULT(hal_kernel_get_info(nullptr, &info), HAL_ERROR_INVALID_HANDLE);
    HC_EXPECT_RESULT(hal_kernel_get(nullptr, &desc, &other), HAL_ERROR_INVALID_HANDLE);
  });
}

HALCONFORM_TEST("core.kernels.grid_coverage",
                "odd 1-D, 2-D and 3-D grids and blocks cover every element exactly once",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream stream(ctx.device());
    const hal_kernel_t kernel = module.kernel("write_index");
    const uint32_t max_block = std::min(kernel_max_threads(ctx, kernel), 256u);
    check_coverage(ctx, kernel, stream, {1, 1, 1}, {1, 1, 1});
    check_coverage(ctx, kernel, stream, {1000003, 1, 1}, {max_block, 1, 1});
    check_coverage(ctx, kernel, stream, {37, 29, 3}, {std::min(max_block, 4u), 3, 2});
    check_coverage(ctx, kernel, stream, {5, 7, 11}, {1, 1, 1});
    // A big grid of one-thread blocks: 100 003 blocks.
    check_coverage(ctx, kernel, stream, {100003, 1, 1}, {1, 1, 1});
  });
}

HALCONFORM_TEST("core.kernels.arguments",
                "every argument type, extreme values, and 64 arguments arrive intact",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream stream(ctx.device());
    Buffer out(ctx.device(), 64 * 8);
    HC_OK(hal_memset_async(out.get(), 0, out.size(), stream));
    void* pointer = out.get();
    int32_t a = INT32_MIN;
    uint32_t b = UINT32_MAX;
    int64_t c = INT64_MIN + 1;
    uint64_t d = 0xfedcba9876543210ull;
    float e = -3.25e38f;
    double f = 1.0 / 3.0;
    // A second pointer argument, echoed as its value. It points into |out| so a
    // validation layer that checks kernel pointers accepts it.
    const void* g = static_cast<const char*>(out.get()) + 8 * 40 + 4;
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
    const char* names[] = {"HAL_ARG_I32", "HAL_ARG_U32", "HAL_ARG_I64",    "HAL_ARG_U64",
                           "HAL_ARG_F32", "HAL_ARG_F64", "HAL_ARG_POINTER"};
    for (int i = 0; i < 7; ++i) {
      HC_REQUIRE(echoed[i] == want[i],
                 strf("hal_launch_kernel(echo_mixed): argument %d (%s) arrived as 0x%llx, sent "
                      "0x%llx",
                      i + 1, names[i], static_cast<unsigned long long>(echoed[i]),
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
                 strf("hal_launch_kernel(echo_64): argument %d of 64 arrived as 0x%llx, sent "
                      "0x%llx",
                      i + 2, static_cast<unsigned long long>(echoed[i]),
                      static_cast<unsigned long long>(values[i])));
    }
  });
}

HALCONFORM_TEST("core.kernels.shared_memory",
                "dynamic group-shared memory is per block and sized as requested", kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream stream(ctx.device());
    const hal_kernel_t kernel = module.kernel("block_sum");
    const uint32_t threads = std::min(kernel_max_threads(ctx, kernel), 128u);
    const uint32_t n = 10007, blocks = (n + threads - 1) / threads;
    HC_REQUIRE(ctx.properties().max_shared_memory_bytes >= threads * 4,
               strf("max_shared_memory_bytes %u cannot hold one word for each of %u threads",
                    ctx.properties().max_shared_memory_bytes, threads));
    std::vector<uint32_t> input(n);
    for (uint32_t& v : input) v = static_cast<uint32_t>(ctx.random()() % 1000);
    Buffer in(ctx.device(), n * 4), out(ctx.device(), blocks * 4);
    HC_OK(hal_memcpy_async(in.get(), input.data(), n * 4, stream));
    void* in_ptr = in.get();
    void* out_ptr = out.get();
    const hal_kernel_arg_t args[] = {{&in_ptr, 8}, {&out_ptr, 8}, {&n, 4}};
    const hal_launch_config_t config = launch_config(blocks, 1, 1, threads, 1, 1, threads * 4);
    HC_OK(hal_launch_kernel(kernel, &config, 3, args, stream));
    const std::vector<uint8_t> bytes = read_back(stream, out.get(), blocks * 4);
    const auto* sums = reinterpret_cast<const uint32_t*>(bytes.data());
    for (uint32_t blk = 0; blk < blocks; ++blk) {
      uint32_t expected = 0;
      for (uint32_t t = 0; t < threads && blk * threads + t < n; ++t)
        expected += input[blk * threads + t];
      HC_REQUIRE(sums[blk] == expected,
                 strf("hal_launch_kernel(block_sum) with %u bytes of shared memory: block %u "
                      "summed %u, expected %u",
                      threads * 4, blk, sums[blk], expected));
    }
  });
}

HALCONFORM_TEST("core.kernels.max_block",
                "a block of the declared maximum threads runs every one of its work-items, and "
                "one thread more is HAL_ERROR_INVALID_LAUNCH",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream stream(ctx.device());
    const hal_kernel_t kernel = module.kernel("write_index");
    const hal_device_properties_t& p = ctx.properties();
    const uint32_t max_threads = kernel_max_threads(ctx, kernel);
    // The whole maximum along x (as far as max_block_dims allows), then along y and z.
    const uint32_t bx = std::min(max_threads, p.max_block_dims[0]);
    check_coverage(ctx, kernel, stream, {bx * 3, 1, 1}, {bx, 1, 1});
    const uint32_t by = std::min(max_threads / bx, p.max_block_dims[1]);
    if (by > 1) check_coverage(ctx, kernel, stream, {bx, by * 2, 1}, {bx, by, 1});
    const uint32_t bz = std::min(max_threads, p.max_block_dims[2]);
    check_coverage(ctx, kernel, stream, {1, 1, bz * 2}, {1, 1, bz});
    // One thread past the kernel's (or device's) limit, in a shape every dimension allows.
    if (max_threads < UINT32_MAX && bx < p.max_block_dims[0] && bx == max_threads) {
      const hal_launch_config_t over = launch_config(1, 1, 1, max_threads + 1, 1, 1);
      uint32_t one = 1;
      void* none = nullptr;
      const hal_kernel_arg_t args[] = {{&none, 8}, {&one, 4}, {&one, 4}, {&one, 4}};
      HC_EXPECT_RESULT(hal_launch_kernel(kernel, &over, 4, args, stream), HAL_ERROR_INVALID_LAUNCH);
    }
    ctx.note(strf("blocks of %u threads (x), %ux%u (x, y) and %u (z)", bx, bx, by, bz));
  });
}

HALCONFORM_TEST("core.kernels.max_grid",
                "grids at the declared max_grid_dims[1] and [2] (and [0] up to 2^20) run every "
                "block",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream stream(ctx.device());
    const hal_kernel_t kernel = module.kernel("write_index");
    const hal_device_properties_t& p = ctx.properties();
    // Bounded so the test stays fast; a declared limit past the bound is noted.
    const uint32_t most_blocks = ctx.by_tier(1u << 16, 1u << 20, 1u << 20);
    const uint32_t gx = std::min(p.max_grid_dims[0], most_blocks);
    const uint32_t gy = std::min(p.max_grid_dims[1], most_blocks);
    const uint32_t gz = std::min(p.max_grid_dims[2], most_blocks);
    check_coverage(ctx, kernel, stream, {gx, 1, 1}, {1, 1, 1});
    check_coverage(ctx, kernel, stream, {1, gy, 1}, {1, 1, 1});
    check_coverage(ctx, kernel, stream, {1, 1, gz}, {1, 1, 1});
    ctx.note(strf("grids of %u, %u and %u blocks (declared %u, %u, %u)", gx, gy, gz,
                  p.max_grid_dims[0], p.max_grid_dims[1], p.max_grid_dims[2]));
  });
}

HALCONFORM_TEST("core.kernels.shared_memory_limit",
                "a block with every byte of the declared max_shared_memory_bytes has them all "
                "to itself, and one byte more is HAL_ERROR_INVALID_LAUNCH",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream stream(ctx.device());
    const hal_kernel_t kernel = module.kernel("shared_fill");
    hal_kernel_info_t info{};
    info.struct_size = sizeof(info);
    HC_OK(hal_kernel_get_info(kernel, &info));
    const uint32_t limit = ctx.properties().max_shared_memory_bytes;
    HC_REQUIRE(info.static_shared_memory_bytes <= limit,
               strf("hal_kernel_get_info(shared_fill).static_shared_memory_bytes %u exceeds the "
                    "device's max_shared_memory_bytes %u",
                    info.static_shared_memory_bytes, limit));
    const uint32_t dynamic = limit - info.static_shared_memory_bytes;
    const uint32_t words = dynamic / 4;
    const uint32_t threads = std::min(kernel_max_threads(ctx, kernel), 64u);
    const uint32_t blocks = std::max(2u, std::min(ctx.properties().compute_units, 8u));
    Buffer out(ctx.device(), blocks * 8);
    HC_OK(hal_memset_async(out.get(), 0, out.size(), stream));
    void* pointer = out.get();
    const hal_kernel_arg_t args[] = {{&pointer, 8}, {&words, 4}};
    const hal_launch_config_t at_limit = launch_config(blocks, 1, 1, threads, 1, 1, dynamic);
    HC_OK(hal_launch_kernel(kernel, &at_limit, 2, args, stream));
    const std::vector<uint8_t> bytes = read_back(stream, out.get(), out.size());
    const auto* counts = reinterpret_cast<const uint32_t*>(bytes.data());
    for (uint32_t b = 0; b < blocks; ++b) {
      HC_REQUIRE(counts[2 * b + 1] == threads,
                 strf("hal_launch_kernel(shared_fill) of %u blocks of %u threads: block %u ran %u "
                      "threads: the kernel did not run whole",
                      blocks, threads, b, counts[2 * b + 1]));
      HC_REQUIRE(counts[2 * b] == 0,
                 strf("hal_launch_kernel(shared_fill) with shared_memory_bytes %u (the declared "
                      "max_shared_memory_bytes %u less %u static): block %u found %u of its %u "
                      "words not holding what it wrote: the memory is not all there, or not the "
                      "block's own",
                      dynamic, limit, info.static_shared_memory_bytes, b, counts[2 * b], words));
    }
    const hal_launch_config_t over = launch_config(1, 1, 1, 1, 1, 1, dynamic + 1);
    HC_EXPECT_RESULT(hal_launch_kernel(kernel, &over, 2, args, stream), HAL_ERROR_INVALID_LAUNCH);
    ctx.note(strf("%u blocks with %u bytes of shared memory each", blocks, dynamic));
  });
}

HALCONFORM_TEST("core.kernels.parallelism",
                "as many blocks run at once as compute_units declares (at least half of it)",
                kCoreKernels) {
  for_each_kernel_source(ctx, [&](const KernelSource&, SourceModule& module) {
    Stream stream(ctx.device());
    const uint32_t units = ctx.properties().compute_units;
    HC_REQUIRE(units >= 1, std::string("compute_units is 0"));
    // Blocks that wait (a bounded number of polls) until |units| of them ran at
    // once: a high-water mark of blocks running concurrently, never a hang.
    Buffer state(ctx.device(), 4 * sizeof(uint32_t));
    const uint32_t initial[4] = {0, 0, units, 0};
    HC_OK(hal_memcpy_async(state.get(), initial, sizeof(initial), stream));
    void* pointer = state.get();
    const uint32_t spins = 50u * 1000u * 1000u;
    const hal_kernel_arg_t args[] = {{&pointer, sizeof(void*)}, {&spins, 4}};
    const hal_launch_config_t config = launch_config(units, 1, 1, 1, 1, 1);
    HC_OK(hal_launch_kernel(module.kernel("concurrency_probe"), &config, 2, args, stream));
    const std::vector<uint8_t> bytes = read_back(stream, state.get(), state.size());
    uint32_t seen[4];
    std::memcpy(seen, bytes.data(), sizeof(seen));
    HC_REQUIRE(seen[0] == 0, strf("concurrency_probe left %u blocks counted as running", seen[0]));
    // Half: a worker may be the launching thread, or busy a moment elsewhere;
    // an overstated count (a multiple of the real one) stays far below it.
    HC_REQUIRE(seen[1] * 2 >= units,
               strf("compute_units declares %u, but hal_launch_kernel of %u waiting blocks ran "
                    "at most %u at once: the declared parallelism is overstated",
                    units, units, seen[1]));
    ctx.note(strf("%u of %u blocks ran at once", seen[1], units));
  });
}

}  // namespace halconform
