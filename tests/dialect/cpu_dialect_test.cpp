// HAL dialect modules on the cpu plugin through the public API: the run-time
// compiler and its cache, and every bad input returning its own result code
// and diagnostic while the stream and the device stay usable.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include "hal.h"

namespace {

constexpr const char* kGood = R"(
kernel max_block(128) void fill(global int* out, int value, int n) {
  shared int staging[128];
  staging[local_id(0)] = value + local_id(0);
  barrier();
  int i = global_id(0);
  if (i < n) out[i] = staging[local_id(0)];
}
kernel void big_shared(global int* out) {
  shared int huge[12288];
  huge[local_id(0)] = 1;
  out[0] = huge[0];
}
)";

class Session {
 public:
  Session() {
    setenv("HAL_CPU_DEVICES", "1", 0);
    setenv("HAL_CACHE_DIR", HAL_TEST_CACHE_DIR, 0);  // hermetic: the build tree
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    REQUIRE(hal_device_get(0, &device_) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_, 0, &stream_) == HAL_SUCCESS);
  }
  ~Session() {
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  hal_device_t device() const { return device_; }
  hal_stream_t stream() const { return stream_; }

  hal_result_t load(const std::string& source, hal_module_t* out) {
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
    desc.data = source.c_str();
    desc.size = source.size();
    return hal_module_load(device_, &desc, out);
  }
  hal_kernel_t kernel(hal_module_t module, const char* name) {
    hal_kernel_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.name = name;
    hal_kernel_t kernel = nullptr;
    REQUIRE(hal_kernel_get(module, &desc, &kernel) == HAL_SUCCESS);
    return kernel;
  }
  // fill(out, 7, n) over 2 blocks of 64, checked: the stream still works.
  void check_still_usable(hal_kernel_t fill) {
    void* out = nullptr;
    REQUIRE(hal_mem_alloc(device_, HAL_MEMORY_DEVICE, 100 * sizeof(int), 0, &out) == HAL_SUCCESS);
    const int value = 7, n = 100;
    const hal_kernel_arg_t args[] = {{&out, sizeof(out)}, {&value, 4}, {&n, 4}};
    hal_launch_config_t config{};
    config.struct_size = sizeof(config);
    config.grid[0] = 2, config.grid[1] = config.grid[2] = 1;
    config.block[0] = 64, config.block[1] = config.block[2] = 1;
    REQUIRE(hal_launch_kernel(fill, &config, 3, args, stream_) == HAL_SUCCESS);
    std::vector<int> host(100);
    REQUIRE(hal_memcpy_async(host.data(), out, 100 * sizeof(int), stream_) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream_) == HAL_SUCCESS);
    for (int i = 0; i < n; ++i) REQUIRE(host[i] == 7 + i % 64);
    REQUIRE(hal_mem_free(out) == HAL_SUCCESS);
  }

 private:
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
};

hal_launch_config_t config_of(uint32_t grid, uint32_t block, uint32_t shared = 0) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = grid, config.grid[1] = config.grid[2] = 1;
  config.block[0] = block, config.block[1] = config.block[2] = 1;
  config.shared_memory_bytes = shared;
  return config;
}

std::string detail_message() {
  hal_error_detail_t detail{};
  detail.struct_size = sizeof(detail);
  REQUIRE(hal_error_get_detail(&detail) == HAL_SUCCESS);
  return detail.message;
}

size_t cached_objects() {
  const char* directory = std::getenv("HAL_CACHE_DIR");  // CTest sets it to the build tree
  REQUIRE(directory != nullptr);
  size_t count = 0;
  std::error_code error;  // no objects/ yet: none
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(directory) + "/objects", error)) {
    count += entry.path().extension() == ".so";
  }
  return count;
}

}  // namespace

TEST_CASE("cpu dialect: compile, cache, signature from the source", "[dialect][cpu]") {
  Session session;
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  REQUIRE(hal_device_get_properties(session.device(), &properties) == HAL_SUCCESS);
  REQUIRE((properties.module_formats & (1u << HAL_MODULE_FORMAT_HAL_DIALECT)) != 0);

  hal_module_t module = nullptr;
  REQUIRE(session.load(kGood, &module) == HAL_SUCCESS);
  const size_t cached = cached_objects();
  hal_module_t again = nullptr;
  REQUIRE(session.load(kGood, &again) == HAL_SUCCESS);  // a cache hit: no new object
  REQUIRE(cached_objects() == cached);

  hal_kernel_t fill = session.kernel(module, "fill");
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_kernel_get_info(fill, &info) == HAL_SUCCESS);
  REQUIRE(info.arg_count == 3);
  REQUIRE(info.arg_types[0] == HAL_ARG_POINTER);
  REQUIRE(info.arg_types[1] == HAL_ARG_I32);
  REQUIRE(info.max_threads_per_block == 128);
  REQUIRE(info.static_shared_memory_bytes == 512);
  session.check_still_usable(fill);
  REQUIRE(hal_module_unload(again) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("cpu dialect: bad input gets a specific result and a diagnostic", "[dialect][cpu]") {
  Session session;
  hal_module_t module = nullptr;
  REQUIRE(session.load(kGood, &module) == HAL_SUCCESS);
  hal_kernel_t fill = session.kernel(module, "fill");
  hal_module_t broken = nullptr;

  // A syntax error: the compiler's diagnostic, pointing at the user's line.
  REQUIRE(session.load("kernel void k(global int* p) {\n  p[0] = 1\n}\n", &broken) ==
          HAL_ERROR_INVALID_MODULE);
  std::string message = detail_message();
  CHECK(message.find("hal-dialect:2") != std::string::npos);
  CHECK(message.find("error") != std::string::npos);
  // A rule of the dialect: the front end's diagnostic.
  REQUIRE(session.load("kernel void k(float* p) {}", &broken) == HAL_ERROR_INVALID_MODULE);
  CHECK(detail_message().find("must point to global memory") != std::string::npos);
  // The exclusions of SPEC 8 come from the front end, with the same message on every device.
  for (const auto& [source, message] : std::initializer_list<std::pair<const char*, const char*>>{
           {"int counter;\nkernel void k() {}", "line 1:5: global variable 'counter'"},
           {"int f(int n) { return n ? f(n - 1) : 0; }\nkernel void k() {}",
            "line 1:27: 'f' calls itself"},
           {"int b(int n);\nint a(int n) { return b(n); }\nint b(int n) { return a(n); }\n"
            "kernel void k() { a(1); }",
            "line 3:23: recursion: 'a' calls 'b' calls 'a'"},
           {"kernel void k() {\n  int (*op)(int) = 0;\n}", "line 2:7: function pointers"},
           {"kernel void barrier() {}", "line 1:13: 'barrier' is a builtin name"}}) {
    INFO(source);
    REQUIRE(session.load(source, &broken) == HAL_ERROR_INVALID_MODULE);
    CHECK(detail_message().find(message) != std::string::npos);
  }

  // Unknown entry point.
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = "no_such_kernel";
  hal_kernel_t kernel = nullptr;
  REQUIRE(hal_kernel_get(module, &desc, &kernel) == HAL_ERROR_NOT_FOUND);
  // A declared signature that disagrees with the source.
  const hal_arg_type_t wrong[] = {HAL_ARG_POINTER, HAL_ARG_F32, HAL_ARG_I32};
  desc.name = "fill";
  desc.arg_types = wrong;
  desc.arg_count = 3;
  REQUIRE(hal_kernel_get(module, &desc, &kernel) == HAL_ERROR_ARGUMENT_MISMATCH);

  void* out = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 4096, 0, &out) == HAL_SUCCESS);
  const int value = 1;
  const int64_t wide = 1;
  const hal_kernel_arg_t args[] = {{&out, sizeof(out)}, {&value, 4}, {&value, 4}};
  const hal_launch_config_t good = config_of(1, 64);
  // Argument count and size.
  REQUIRE(hal_launch_kernel(fill, &good, 2, args, session.stream()) == HAL_ERROR_ARGUMENT_MISMATCH);
  const hal_kernel_arg_t wide_args[] = {{&out, sizeof(out)}, {&wide, 8}, {&value, 4}};
  REQUIRE(hal_launch_kernel(fill, &good, 3, wide_args, session.stream()) ==
          HAL_ERROR_ARGUMENT_MISMATCH);
  // A block above the kernel's max_block(128).
  const hal_launch_config_t too_wide = config_of(1, 256);
  REQUIRE(hal_launch_kernel(fill, &too_wide, 3, args, session.stream()) ==
          HAL_ERROR_INVALID_LAUNCH);
  CHECK(detail_message().find("128") != std::string::npos);
  // More shared memory than the device has: 48 KiB static + 32 KiB dynamic > 64 KiB.
  hal_kernel_t big = session.kernel(module, "big_shared");
  const hal_kernel_arg_t big_args[] = {{&out, sizeof(out)}};
  const hal_launch_config_t too_much = config_of(1, 1, 32 * 1024);
  REQUIRE(hal_launch_kernel(big, &too_much, 1, big_args, session.stream()) ==
          HAL_ERROR_INVALID_LAUNCH);
  CHECK(detail_message().find("49152 bytes of static") != std::string::npos);
  const hal_launch_config_t fits = config_of(1, 1);
  REQUIRE(hal_launch_kernel(big, &fits, 1, big_args, session.stream()) == HAL_SUCCESS);

  session.check_still_usable(fill);
  REQUIRE(hal_mem_free(out) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("cpu dialect: no C++ compiler is a clear error", "[dialect][cpu]") {
  Session session;
  const char* saved = std::getenv("HAL_CXX");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("HAL_CXX", "/nonexistent/c++", 1);
  hal_module_t module = nullptr;
  const hal_result_t result = session.load(kGood, &module);
  if (saved != nullptr) {
    setenv("HAL_CXX", restore.c_str(), 1);
  } else {
    unsetenv("HAL_CXX");
  }
  REQUIRE(result == HAL_ERROR_UNSUPPORTED);
  CHECK(detail_message().find("HAL_CXX names '/nonexistent/c++'") != std::string::npos);
  // The device still works with the compiler back.
  REQUIRE(session.load(kGood, &module) == HAL_SUCCESS);
  session.check_still_usable(session.kernel(module, "fill"));
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

// Modules with barriers keep state in thread_local storage, which glibc may
// keep mapped after dlclose; the next image staged under the same descriptor
// number must still run its own code, not the lingering module's.
TEST_CASE("cpu dialect: each module loaded after an unloaded one runs its own code",
          "[dialect][cpu]") {
  Session session;
  void* out = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 64 * sizeof(int), 0, &out) ==
          HAL_SUCCESS);
  const hal_kernel_arg_t args[] = {{&out, sizeof(out)}};
  const hal_launch_config_t config = config_of(1, 64);
  for (int version = 1; version <= 6; ++version) {
    // The same kernel name in every module, a different constant in each;
    // odd versions have a barrier, even ones none, and even ones add a kernel.
    std::string source =
        "kernel void stamp(global int* out) {\n"
        "  shared int staging[64];\n"
        "  staging[local_id(0)] = " +
        std::to_string(1000 * version) + " + local_id(0);\n";
    // A barrier under a condition: the coroutine path, whose prelude has
    // thread_local state.
    if (version % 2 == 1) source += "  if (group_id(0) % 2 == 0) { barrier(); }\n";
    source += "  out[global_id(0)] = staging[local_id(0)];\n}\n";
    if (version % 2 == 0) {
      source += "kernel void only_in_" + std::to_string(version) +
                "(global int* out) { out[0] = " + std::to_string(version) + "; }\n";
    }
    hal_module_t module = nullptr;
    REQUIRE(session.load(source, &module) == HAL_SUCCESS);
    hal_kernel_t stamp = session.kernel(module, "stamp");
    REQUIRE(hal_launch_kernel(stamp, &config, 1, args, session.stream()) == HAL_SUCCESS);
    std::vector<int> host(64);
    REQUIRE(hal_memcpy_async(host.data(), out, host.size() * sizeof(int), session.stream()) ==
            HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
    INFO("module version " << version);
    for (int i = 0; i < 64; ++i) REQUIRE(host[i] == 1000 * version + i);
    if (version % 2 == 0) {
      const std::string own = "only_in_" + std::to_string(version);
      session.kernel(module, own.c_str());  // REQUIREs that it is found
    }
    REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
  }
  REQUIRE(hal_mem_free(out) == HAL_SUCCESS);
}
