// The opencl plugin through the public API, on whatever OpenCL platform the
// machine has (PoCL in CI): SVM memory, in-order streams, events, host
// callbacks, native OpenCL C and HAL dialect modules, and bad input.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "hal.h"

namespace {

class Session {
 public:
  Session() {
    setenv("POCL_CACHE_DIR", HAL_TEST_POCL_CACHE_DIR, 0);  // hermetic: the build tree
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    uint32_t count = 0;
    REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
    REQUIRE(count >= 1);
    REQUIRE(hal_device_get(0, &device_) == HAL_SUCCESS);
    properties_.struct_size = sizeof(properties_);
    REQUIRE(hal_device_get_properties(device_, &properties_) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_, 0, &stream_) == HAL_SUCCESS);
  }
  ~Session() {
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  hal_device_t device() const { return device_; }
  hal_stream_t stream() const { return stream_; }
  const hal_device_properties_t& properties() const { return properties_; }

  hal_result_t load(hal_module_format_t format, const std::string& source, hal_module_t* out) {
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = format;
    desc.data = source.c_str();
    desc.size = source.size();
    return hal_module_load(device_, &desc, out);
  }
  hal_result_t get(hal_module_t module, const char* name, hal_kernel_t* out,
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

 private:
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
  hal_device_properties_t properties_{};
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

constexpr const char* kOpenClSource = R"(
__kernel void scale(__global float* x, float factor, int n) {
  int i = get_global_id(0);
  if (i < n) x[i] *= factor;
}
__kernel void spin_then_write(__global int* flag, int value) {
  volatile int sink = 0;
  for (int i = 0; i < 200000; ++i) sink += i;
  flag[0] = value;
}
)";

constexpr const char* kDialectSource = R"(
kernel max_block(64) void iota(global int* out, int base, int n) {
  shared int staging[64];
  staging[local_id(0)] = base + global_id(0);
  barrier();
  if (global_id(0) < n) out[global_id(0)] = staging[local_id(0)];
}
kernel void hungry(global int* out) {
  shared int huge[1024];
  local int* extra = dynamic_shared(int);
  huge[local_id(0)] = 1;
  extra[0] = 2;
  out[0] = huge[0] + extra[0];
}
)";

}  // namespace

TEST_CASE("opencl: a device with SVM, both module formats", "[opencl]") {
  Session session;
  const hal_device_properties_t& p = session.properties();
  CHECK(std::string(p.plugin) == "opencl");
  CHECK((p.capabilities & HAL_DEVICE_CAP_KERNELS) != 0);
  CHECK((p.module_formats & (1u << HAL_MODULE_FORMAT_OPENCL_C)) != 0);
  CHECK((p.module_formats & (1u << HAL_MODULE_FORMAT_HAL_DIALECT)) != 0);
  CHECK(p.max_threads_per_block >= 64);
  CHECK(p.max_shared_memory_bytes >= 16 * 1024);
  CHECK(p.subgroup_size >= 1);
}

TEST_CASE("opencl: memory copies, fills and host access through SVM", "[opencl]") {
  Session session;
  const size_t n = 100003;
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, n, 0, &a) == HAL_SUCCESS);
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, n, 0, &b) == HAL_SUCCESS);
  std::vector<unsigned char> source(n), back(n);
  std::mt19937 engine(1);
  for (auto& byte : source) byte = static_cast<unsigned char>(engine());
  REQUIRE(hal_memcpy_async(a, source.data(), n, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(b, a, n, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(static_cast<char*>(b) + 10, 0xab, 5, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(back.data(), b, n, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(back[i] == (i >= 10 && i < 15 ? 0xab : source[i]));
  }
  if ((session.properties().capabilities & HAL_DEVICE_CAP_UNIFIED_ADDRESSING) != 0) {
    REQUIRE(std::memcmp(a, source.data(), n) == 0);  // fine-grain SVM: the host reads it
  }
  REQUIRE(hal_memcpy_async(b, a, n + 1, session.stream()) == HAL_ERROR_OUT_OF_BOUNDS);
  REQUIRE(hal_mem_free(a) == HAL_SUCCESS);
  REQUIRE(hal_mem_free(b) == HAL_SUCCESS);
}

TEST_CASE("opencl: native OpenCL C, host callbacks and events in stream order", "[opencl]") {
  Session session;
  hal_module_t module = nullptr;
  REQUIRE(session.load(HAL_MODULE_FORMAT_OPENCL_C, kOpenClSource, &module) == HAL_SUCCESS);
  hal_kernel_t scale = nullptr, spin = nullptr;
  REQUIRE(session.get(module, "scale", &scale) == HAL_SUCCESS);  // signature from arg info
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_kernel_get_info(scale, &info) == HAL_SUCCESS);
  REQUIRE(info.arg_count == 3);
  CHECK(info.arg_types[0] == HAL_ARG_POINTER);
  CHECK(info.arg_types[1] == HAL_ARG_F32);
  CHECK(info.arg_types[2] == HAL_ARG_I32);
  const std::vector<hal_arg_type_t> wrong = {HAL_ARG_POINTER, HAL_ARG_I32, HAL_ARG_I32};
  hal_kernel_t mismatched = nullptr;
  REQUIRE(session.get(module, "scale", &mismatched, &wrong) == HAL_ERROR_ARGUMENT_MISMATCH);
  REQUIRE(session.get(module, "spin_then_write", &spin) == HAL_SUCCESS);

  int* flag = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, sizeof(int), 0,
                        reinterpret_cast<void**>(&flag)) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(flag, 0, sizeof(int), session.stream()) == HAL_SUCCESS);
  hal_event_t start = nullptr, end = nullptr;
  REQUIRE(hal_event_create(session.device(), HAL_EVENT_FLAG_TIMING, &start) == HAL_SUCCESS);
  REQUIRE(hal_event_create(session.device(), HAL_EVENT_FLAG_TIMING, &end) == HAL_SUCCESS);
  REQUIRE(hal_event_record(start, session.stream()) == HAL_SUCCESS);
  const int value = 42;
  const hal_kernel_arg_t args[] = {{&flag, sizeof(flag)}, {&value, 4}};
  const hal_launch_config_t one = config_of(1, 1);
  REQUIRE(hal_launch_kernel(spin, &one, 2, args, session.stream()) == HAL_SUCCESS);
  // The callback runs after the kernel and before the copy that follows it.
  struct Seen {
    int* flag;
    std::atomic<int> value{-1};
  } seen{flag};
  int copied = 0;
  REQUIRE(hal_stream_enqueue_host_fn(
              session.stream(),
              [](void* data) {
                auto* s = static_cast<Seen*>(data);
                int host_copy = 0;
                std::memcpy(&host_copy, s->flag, sizeof(int));  // SVM: readable on the host
                s->value = host_copy;
              },
              &seen) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(&copied, flag, sizeof(int), session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_event_record(end, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_event_synchronize(end) == HAL_SUCCESS);
  REQUIRE(hal_event_query(end) == HAL_SUCCESS);
  REQUIRE(hal_stream_query(session.stream()) == HAL_SUCCESS);
  REQUIRE(copied == 42);
  if ((session.properties().capabilities & HAL_DEVICE_CAP_UNIFIED_ADDRESSING) != 0) {
    REQUIRE(seen.value == 42);
  }
  float ms = -1;
  REQUIRE(hal_event_elapsed_ms(start, end, &ms) == HAL_SUCCESS);
  CHECK(ms >= 0);

  // A second stream waits on an event of the first.
  hal_stream_t other = nullptr;
  REQUIRE(hal_stream_create(session.device(), 0, &other) == HAL_SUCCESS);
  const int later = 7;
  const hal_kernel_arg_t later_args[] = {{&flag, sizeof(flag)}, {&later, 4}};
  REQUIRE(hal_launch_kernel(spin, &one, 2, later_args, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_event_record(end, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_wait_event(other, end) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(&copied, flag, sizeof(int), other) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(other) == HAL_SUCCESS);
  REQUIRE(copied == 7);

  REQUIRE(hal_stream_destroy(other) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(start) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(end) == HAL_SUCCESS);
  REQUIRE(hal_mem_free(flag) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("opencl: dialect kernels and bad input", "[opencl]") {
  Session session;
  hal_module_t module = nullptr;
  REQUIRE(session.load(HAL_MODULE_FORMAT_HAL_DIALECT, kDialectSource, &module) == HAL_SUCCESS);
  hal_kernel_t iota = nullptr;
  REQUIRE(session.get(module, "iota", &iota) == HAL_SUCCESS);
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_kernel_get_info(iota, &info) == HAL_SUCCESS);
  REQUIRE(info.max_threads_per_block == 64);
  REQUIRE(info.static_shared_memory_bytes == 256);

  const int n = 150, base = 1000;
  int* out = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 256 * sizeof(int), 0,
                        reinterpret_cast<void**>(&out)) == HAL_SUCCESS);
  const hal_kernel_arg_t args[] = {{&out, sizeof(out)}, {&base, 4}, {&n, 4}};
  const hal_launch_config_t good = config_of(3, 64);
  auto check_usable = [&] {
    REQUIRE(hal_launch_kernel(iota, &good, 3, args, session.stream()) == HAL_SUCCESS);
    std::vector<int> host(n);
    REQUIRE(hal_memcpy_async(host.data(), out, n * sizeof(int), session.stream()) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
    for (int i = 0; i < n; ++i) REQUIRE(host[i] == base + i);
  };
  check_usable();

  hal_module_t broken = nullptr;
  REQUIRE(session.load(HAL_MODULE_FORMAT_HAL_DIALECT,
                       "kernel void k(global int* p) {\n p[0] = 1\n}",
                       &broken) == HAL_ERROR_INVALID_MODULE);
  CHECK(detail_message().find("hal-dialect:") != std::string::npos);  // the build log, mapped
  REQUIRE(session.load(HAL_MODULE_FORMAT_OPENCL_C, "__kernel void k( {", &broken) ==
          HAL_ERROR_INVALID_MODULE);
  REQUIRE(session.load(HAL_MODULE_FORMAT_HAL_DIALECT,
                       "kernel void k(global float* p) { barrier(2); }",
                       &broken) == HAL_ERROR_INVALID_MODULE);
  CHECK(detail_message().find("barrier takes no arguments") != std::string::npos);
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
    REQUIRE(session.load(HAL_MODULE_FORMAT_HAL_DIALECT, source, &broken) ==
            HAL_ERROR_INVALID_MODULE);
    CHECK(detail_message().find(message) != std::string::npos);
  }
  hal_kernel_t missing = nullptr;
  REQUIRE(session.get(module, "nope", &missing) == HAL_ERROR_NOT_FOUND);
  CHECK(detail_message().find("its kernels: iota, hungry") != std::string::npos);
  REQUIRE(hal_launch_kernel(iota, &good, 2, args, session.stream()) == HAL_ERROR_ARGUMENT_MISMATCH);
  const int64_t wide = 0;
  const hal_kernel_arg_t wide_args[] = {{&out, sizeof(out)}, {&wide, 8}, {&n, 4}};
  REQUIRE(hal_launch_kernel(iota, &good, 3, wide_args, session.stream()) ==
          HAL_ERROR_ARGUMENT_MISMATCH);
  const hal_launch_config_t too_wide = config_of(1, 128);
  REQUIRE(hal_launch_kernel(iota, &too_wide, 3, args, session.stream()) ==
          HAL_ERROR_INVALID_LAUNCH);
  hal_kernel_t hungry = nullptr;
  REQUIRE(session.get(module, "hungry", &hungry) == HAL_SUCCESS);
  const hal_kernel_arg_t hungry_args[] = {{&out, sizeof(out)}};
  const uint32_t limit = session.properties().max_shared_memory_bytes;
  const hal_launch_config_t too_much = config_of(1, 1, limit - 1024);  // + 4 KiB static
  REQUIRE(hal_launch_kernel(hungry, &too_much, 1, hungry_args, session.stream()) ==
          HAL_ERROR_INVALID_LAUNCH);
  const hal_launch_config_t fits = config_of(1, 1, 64);
  REQUIRE(hal_launch_kernel(hungry, &fits, 1, hungry_args, session.stream()) == HAL_SUCCESS);
  int first = 0;
  REQUIRE(hal_memcpy_async(&first, out, sizeof(int), session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  REQUIRE(first == 3);
  check_usable();  // the stream and the device survived every refusal
  REQUIRE(hal_mem_free(out) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(module) == HAL_SUCCESS);
}

// Run by CTest with OCL_ICD_VENDORS pointing nowhere: the plugin loads and
// reports zero devices.
TEST_CASE("opencl: no platform means zero devices, not a failure", "[.no_platform]") {
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  uint32_t count = 99;
  REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
  REQUIRE(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  REQUIRE(report.outcome == HAL_PLUGIN_LOADED);
  REQUIRE(std::string(report.name) == "opencl");
  REQUIRE(hal_shutdown() == HAL_SUCCESS);
}
