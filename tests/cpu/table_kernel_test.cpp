// The cpu plugin's table driven directly: modules, kernels, launch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "hal/cpu_kernel.h"
#include "table_helpers.hpp"

using namespace hal::test;

TEST_CASE("vector add through an exported signature", "[cpu][table][kernel]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  TestModule module(t, plugin.device(0));
  hal_impl_kernel_t* add = module.kernel("vector_add");
  hal_impl_stream_t* stream = make_stream(t, plugin.device(0));
  for (uint32_t n : {1u, 1000u, 100003u}) {
    auto* a = static_cast<float*>(alloc(t, plugin.device(0), n * 4));
    auto* b = static_cast<float*>(alloc(t, plugin.device(0), n * 4));
    auto* c = static_cast<float*>(alloc(t, plugin.device(0), n * 4));
    for (uint32_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i);
      b[i] = 0.5f * static_cast<float>(i);
    }
    const auto args = kernel_args(a, b, c, n);
    const hal_launch_config_t config = config_of({(n + 255) / 256, 1, 1}, {256, 1, 1});
    REQUIRE(t.launch_kernel(stream, add, &config, 4, args.data()) == HAL_SUCCESS);
    REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
    for (uint32_t i = 0; i < n; ++i) REQUIRE(c[i] == 1.5f * static_cast<float>(i));
    for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c)}) {
      REQUIRE(t.mem_free(plugin.device(0), p) == HAL_SUCCESS);
    }
  }
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("3-D grids with odd sizes cover every element exactly once", "[cpu][table][kernel]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  TestModule module(t, plugin.device(1));
  hal_impl_kernel_t* write_index = module.kernel("write_index");
  hal_impl_stream_t* stream = make_stream(t, plugin.device(1));
  struct Shape {
    uint32_t nx, ny, nz, bx, by, bz;
  };
  for (const Shape& s :
       {Shape{1, 1, 1, 1, 1, 1}, Shape{37, 5, 3, 8, 2, 1}, Shape{13, 17, 19, 3, 5, 7},
        Shape{1000, 1, 1, 1024, 1, 1}, Shape{2, 3, 129, 1, 1, 4}}) {
    const size_t count = size_t{s.nx} * s.ny * s.nz;
    auto* out = static_cast<uint32_t*>(alloc(t, plugin.device(1), count * 16));
    REQUIRE(t.memset_async(stream, out, 0, count * 16) == HAL_SUCCESS);
    const auto args = kernel_args(out, s.nx, s.ny, s.nz);
    const hal_launch_config_t config =
        config_of({(s.nx + s.bx - 1) / s.bx, (s.ny + s.by - 1) / s.by, (s.nz + s.bz - 1) / s.bz},
                  {s.bx, s.by, s.bz});
    REQUIRE(t.launch_kernel(stream, write_index, &config, 4, args.data()) == HAL_SUCCESS);
    REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
    for (uint32_t z = 0; z < s.nz; ++z) {
      for (uint32_t y = 0; y < s.ny; ++y) {
        for (uint32_t x = 0; x < s.nx; ++x) {
          const uint32_t* slot = out + 4 * ((size_t{z} * s.ny + y) * s.nx + x);
          REQUIRE(slot[0] == x);
          REQUIRE(slot[1] == y);
          REQUIRE(slot[2] == z);
          REQUIRE(slot[3] == 1);
        }
      }
    }
    REQUIRE(t.mem_free(plugin.device(1), out) == HAL_SUCCESS);
  }
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("a kernel with 23 arguments of every type gets each value", "[cpu][table][kernel]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  TestModule module(t, plugin.device(0));
  const std::vector<hal_arg_type_t> types = {
      HAL_ARG_POINTER, HAL_ARG_I32, HAL_ARG_U32, HAL_ARG_I64,     HAL_ARG_U64, HAL_ARG_F32,
      HAL_ARG_F64,     HAL_ARG_I32, HAL_ARG_U32, HAL_ARG_I64,     HAL_ARG_U64, HAL_ARG_F32,
      HAL_ARG_F64,     HAL_ARG_I32, HAL_ARG_U32, HAL_ARG_I64,     HAL_ARG_U64, HAL_ARG_F32,
      HAL_ARG_F64,     HAL_ARG_F32, HAL_ARG_F64, HAL_ARG_POINTER, HAL_ARG_I32};
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = "many_args";
  desc.arg_types = types.data();
  desc.arg_count = static_cast<uint32_t>(types.size());
  hal_impl_kernel_t* kernel = nullptr;
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(t.kernel_get(module.module, &desc, &kernel, &info) == HAL_SUCCESS);
  CHECK(info.arg_count == types.size());
  CHECK(std::string(info.name) == "many_args");
  CHECK(info.arg_types[22] == HAL_ARG_I32);

  auto* out = static_cast<int64_t*>(alloc(t, plugin.device(0), 23 * 8));
  const int32_t a0 = -7, a6 = INT32_MIN, a12 = 123456, a21 = -1;
  const uint32_t a1 = 0xFFFFFFFFu, a7 = 42, a13 = 0x80000000u;
  const int64_t a2 = INT64_MIN + 5, a8 = -99, a14 = int64_t{1} << 40;
  const uint64_t a3 = 0xFEDCBA9876543210ull, a9 = 1, a15 = 0;
  const float a4 = 1.25f, a10 = -3.5f, a16 = 1e-20f, a18 = 65504.0f;
  const double a5 = 3.141592653589793, a11 = -2.0e300, a17 = 0.1, a19 = 1.0 / 3.0;
  void* const a20 = reinterpret_cast<void*>(uintptr_t{0x1234567890});
  const auto args = kernel_args(out, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13,
                                a14, a15, a16, a17, a18, a19, a20, a21);
  hal_impl_stream_t* stream = make_stream(t, plugin.device(0));
  const hal_launch_config_t config = config_of({3, 2, 1}, {1, 1, 1});
  REQUIRE(t.launch_kernel(stream, kernel, &config, 23, args.data()) == HAL_SUCCESS);
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  const auto* as_double = reinterpret_cast<const double*>(out);
  CHECK(out[0] == a0);
  CHECK(out[1] == a1);
  CHECK(out[2] == a2);
  CHECK(static_cast<uint64_t>(out[3]) == a3);
  CHECK(as_double[4] == a4);
  CHECK(as_double[5] == a5);
  CHECK(out[6] == a6);
  CHECK(out[7] == a7);
  CHECK(out[8] == a8);
  CHECK(static_cast<uint64_t>(out[9]) == a9);
  CHECK(as_double[10] == a10);
  CHECK(as_double[11] == a11);
  CHECK(out[12] == a12);
  CHECK(out[13] == a13);
  CHECK(out[14] == a14);
  CHECK(static_cast<uint64_t>(out[15]) == a15);
  CHECK(as_double[16] == a16);
  CHECK(as_double[17] == a17);
  CHECK(as_double[18] == a18);
  CHECK(as_double[19] == a19);
  CHECK(out[20] == static_cast<int64_t>(reinterpret_cast<uintptr_t>(a20)));
  CHECK(out[21] == a21);
  CHECK(out[22] == sizeof(hal_cpu_block_context_t) + 0);
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("group-shared memory per block", "[cpu][table][kernel]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  TestModule module(t, plugin.device(0));
  hal_impl_kernel_t* block_sum = module.kernel("block_sum");
  hal_impl_stream_t* stream = make_stream(t, plugin.device(0));
  const uint32_t n = 100000, threads = 128, blocks = (n + threads - 1) / threads;
  auto* in = static_cast<float*>(alloc(t, plugin.device(0), n * 4));
  auto* out = static_cast<float*>(alloc(t, plugin.device(0), blocks * 4));
  for (uint32_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 7);
  for (uint32_t shared : {threads * 4, 64u * 1024}) {
    const auto args = kernel_args(in, out, n);
    const hal_launch_config_t config = config_of({blocks, 1, 1}, {threads, 1, 1}, shared);
    REQUIRE(t.launch_kernel(stream, block_sum, &config, 3, args.data()) == HAL_SUCCESS);
    REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
    for (uint32_t b = 0; b < blocks; ++b) {
      float expected = 0;
      for (uint32_t i = b * threads; i < std::min(n, (b + 1) * threads); ++i) {
        expected += static_cast<float>(i % 7);
      }
      REQUIRE(out[b] == expected);
    }
  }
  // More than the device's shared memory is the loader's to refuse (SPEC
  // 10.3; cpu api_test): the plugin trusts the launch it is given.
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("module and kernel errors", "[cpu][table][module]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
  hal_impl_module_t* module = nullptr;

  SECTION("not an ELF image in memory") {
    const char text[] = "this is not a shared object";
    desc.data = text;
    desc.size = sizeof(text);
    CHECK(t.module_load(device, &desc, &module) == HAL_ERROR_INVALID_MODULE);
    CHECK(last_error().message.find("not a loadable") != std::string::npos);
  }
  SECTION("not an ELF file") {
    desc.path = HAL_TEST_CPU_NOT_ELF_PATH;
    CHECK(t.module_load(device, &desc, &module) == HAL_ERROR_INVALID_MODULE);
  }
  SECTION("missing file") {
    desc.path = "/nonexistent/kernels.so";
    CHECK(t.module_load(device, &desc, &module) == HAL_ERROR_NOT_FOUND);
  }
  // A format outside the device's module_formats never reaches the plugin:
  // the loader refuses it (SPEC 10.3).
  SECTION("an image in memory loads and runs") {
    std::ifstream file(HAL_TEST_CPU_KERNELS_PATH, std::ios::binary);
    const std::vector<char> image((std::istreambuf_iterator<char>(file)),
                                  std::istreambuf_iterator<char>());
    desc.data = image.data();
    desc.size = image.size();
    REQUIRE(t.module_load(device, &desc, &module) == HAL_SUCCESS);
    hal_module_desc_t again = desc;  // two images in memory at once stay distinct
    hal_impl_module_t* second = nullptr;
    REQUIRE(t.module_load(device, &again, &second) == HAL_SUCCESS);
    hal_kernel_desc_t kdesc{};
    kdesc.struct_size = sizeof(kdesc);
    kdesc.name = "empty";
    hal_impl_kernel_t* kernel = nullptr;
    REQUIRE(t.kernel_get(module, &kdesc, &kernel, nullptr) == HAL_SUCCESS);
    hal_impl_stream_t* stream = make_stream(t, device);
    const hal_launch_config_t config = config_of({4, 4, 4}, {1, 1, 1});
    REQUIRE(t.launch_kernel(stream, kernel, &config, 0, nullptr) == HAL_SUCCESS);
    // Unloading with the launch maybe still queued is safe.
    REQUIRE(t.module_unload(module) == HAL_SUCCESS);
    REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
    REQUIRE(t.module_unload(second) == HAL_SUCCESS);
    module = nullptr;
  }
  SECTION("kernel lookup") {
    TestModule loaded(t, device);
    hal_kernel_desc_t kdesc{};
    kdesc.struct_size = sizeof(kdesc);
    hal_impl_kernel_t* kernel = nullptr;

    kdesc.name = "no_such_kernel";
    CHECK(t.kernel_get(loaded.module, &kdesc, &kernel, nullptr) == HAL_ERROR_NOT_FOUND);
    CHECK(last_error().message.find("no_such_kernel") != std::string::npos);

    kdesc.name = "many_args";  // exports no signature and none declared
    CHECK(t.kernel_get(loaded.module, &kdesc, &kernel, nullptr) == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK(last_error().message.find("no signature") != std::string::npos);

    // The plugin binds the module's own signature and reports it, whatever
    // was declared: comparing the two is the loader's rule (SPEC 10.3, the
    // cpu api_test checks it through hal_kernel_get).
    const hal_arg_type_t exported[] = {HAL_ARG_POINTER, HAL_ARG_POINTER, HAL_ARG_POINTER,
                                       HAL_ARG_U32};
    const hal_arg_type_t wrong[] = {HAL_ARG_POINTER, HAL_ARG_I64};
    kdesc.name = "vector_add";
    kdesc.arg_types = wrong;
    kdesc.arg_count = 2;
    hal_kernel_info_t info{};
    info.struct_size = sizeof(info);
    CHECK(t.kernel_get(loaded.module, &kdesc, &kernel, &info) == HAL_SUCCESS);
    REQUIRE(info.arg_count == 4);
    CHECK(std::equal(exported, exported + 4, info.arg_types));
    // Without a signature of its own, the declared one is what it binds.
    const hal_arg_type_t declared[] = {HAL_ARG_POINTER, HAL_ARG_F64};
    kdesc.name = "many_args";
    kdesc.arg_types = declared;
    kdesc.arg_count = 2;
    info = {};
    info.struct_size = sizeof(info);
    CHECK(t.kernel_get(loaded.module, &kdesc, &kernel, &info) == HAL_SUCCESS);
    REQUIRE(info.arg_count == 2);
    CHECK(std::equal(declared, declared + 2, info.arg_types));

    kdesc.name = "bad_signature";
    kdesc.arg_types = nullptr;
    kdesc.arg_count = 0;
    // Off the grammar is no signature (SPEC.md §8): ARGUMENT_MISMATCH,
    // naming the string's fault; blanks and trailing commas included.
    CHECK(t.kernel_get(loaded.module, &kdesc, &kernel, nullptr) == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK(last_error().message.find("'float' at position 1") != std::string::npos);
    for (const auto& [entry, fault] : {std::pair{"blank_signature", "' i32' at position 1"},
                                       std::pair{"trailing_comma_signature", "'' at position 1"},
                                       std::pair{"upper_case_signature", "'PTR' at position 0"}}) {
      CAPTURE(entry);
      kdesc.name = entry;
      CHECK(t.kernel_get(loaded.module, &kdesc, &kernel, nullptr) == HAL_ERROR_ARGUMENT_MISMATCH);
      CHECK(last_error().message.find(fault) != std::string::npos);
      CHECK(last_error().message.find("hal_kernel_signature_" + std::string(entry)) !=
            std::string::npos);
    }

    kdesc.name = "vector_add";
    kernel = nullptr;
    REQUIRE(t.kernel_get(loaded.module, &kdesc, &kernel, nullptr) == HAL_SUCCESS);
    CHECK(kernel != nullptr);
    // A launch with the wrong argument count is the loader's to refuse.
  }
}
