// The hip plugin through the public API over the stand-in runtime
// (fake_runtime/): device properties from hipGetDeviceProperties, memory of
// every kind checked by content, stream and event ordering, host functions
// (hipStreamAddCallback, as on HIP 5.2), argument marshalling checked
// against the runtime's launch log, signatures checked against the code
// object's metadata, hipError_t mapping, and a teardown that gives every
// runtime object back. Code objects are real: compiled by the system's
// hiprtc.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fake_runtime.h"
#include "cache_test_support.hpp"
#include "gpu_api_test_support.hpp"
#include "hal.h"
#include "hiprtc.hpp"

namespace {

// hipError_t values (hip_runtime_api.h), written out: the test is independent of the header.
constexpr int64_t kHipErrorOutOfMemory = 2;
constexpr int64_t kHipErrorNoBinaryForGpu = 209;
constexpr int64_t kHipErrorNotFound = 500;

// The stand-in: the HIP 5.2-like build, or the one HAL_TEST_FAKE_HIP_PATH
// names (the build with hipLaunchHostFunc).
const char* fake_path() {
  const char* configured = std::getenv("HAL_TEST_FAKE_HIP_PATH");
  return configured != nullptr ? configured : HAL_TEST_FAKE_HIP;
}

// Every test runs the hip plugin over the stand-in runtime; /dev/null passes
// for the kernel driver's node, which this machine lacks.
[[maybe_unused]] const bool kEnvironment = [] {
  setenv("HAL_PLUGINS", "hip", 1);
  setenv("HAL_HIP_RUNTIME_PATH", fake_path(), 1);
  setenv("HAL_HIP_KFD_PATH", "/dev/null", 1);
  // The system's runtime by its path (its name is the stand-in's soname, so
  // dlopen by name would answer the stand-in): the real compiler.
  setenv("HAL_HIP_HIPRTC_PATH", HAL_TEST_SYSTEM_HIP, 1);
  setenv("HAL_CACHE_DIR", HAL_TEST_CACHE_DIR, 0);  // hermetic: the build tree
  return true;
}();

// The runtime library the plugin opened (the same file: the same handle).
struct Fake {
  Fake() {
    handle = dlopen(fake_path(), RTLD_NOW);
    REQUIRE(handle != nullptr);
    launch_count =
        reinterpret_cast<fake_hip_launch_count_fn>(dlsym(handle, "fake_hip_launch_count"));
    launch_get = reinterpret_cast<fake_hip_launch_get_fn>(dlsym(handle, "fake_hip_launch_get"));
    live = reinterpret_cast<fake_hip_live_fn>(dlsym(handle, "fake_hip_live"));
    set_paused = reinterpret_cast<fake_hip_set_paused_fn>(dlsym(handle, "fake_hip_set_paused"));
    REQUIRE(launch_count != nullptr);
    REQUIRE(launch_get != nullptr);
    REQUIRE(live != nullptr);
    REQUIRE(set_paused != nullptr);
  }
  ~Fake() { dlclose(handle); }
  void* handle = nullptr;
  fake_hip_launch_count_fn launch_count = nullptr;
  fake_hip_launch_get_fn launch_get = nullptr;
  fake_hip_live_fn live = nullptr;
  fake_hip_set_paused_fn set_paused = nullptr;
};

using gpu_api_test::config;
using gpu_api_test::get;
using gpu_api_test::last_detail;
using gpu_api_test::load;
using gpu_api_test::Session;

// A HIP source compiled by the system's hiprtc, as a vendor's HSACO would be.
std::string code_object(const std::string& source, const std::string& arch = "gfx90a") {
  std::string why;
  auto hiprtc = hal::hip::Hiprtc::open(nullptr, why);
  INFO(why);
  REQUIRE(hiprtc != nullptr);
  std::string code, log;
  const bool compiled = hiprtc->compile(source, "test.hip", arch, code, log);
  INFO(log);
  REQUIRE(compiled);
  return code;
}

// One argument of each width the plugin marshals.
constexpr char kMixed[] =
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "mixed(void* p, unsigned u, float f, double d, long long i) {\n"
    "  if (p) *static_cast<double*>(p) = u + f + d + i;\n"
    "}\n";

}  // namespace

TEST_CASE("each GPU is a device with the runtime's properties") {
  Session session;
  for (uint32_t index = 0; index < 2; ++index) {
    hal_device_t device = nullptr;
    REQUIRE(hal_device_get(index, &device) == HAL_SUCCESS);
    hal_device_properties_t p{};
    p.struct_size = sizeof(p);
    REQUIRE(hal_device_get_properties(device, &p) == HAL_SUCCESS);
    const int cus = index == 0 ? 4 : 8;  // the fake's CU counts
    CHECK(std::string(p.name) == "HAL fake AMD GPU " + std::to_string(index));
    CHECK(std::string(p.plugin) == "hip");
    CHECK(std::string(p.vendor) == "AMD");
    CHECK(std::string(p.driver_version) == "HIP 5.2.21153");
    CHECK(p.type == HAL_DEVICE_TYPE_GPU);
    CHECK(p.plugin_device_index == index);
    CHECK(p.compute_units == static_cast<uint32_t>(cus));
    CHECK(p.total_memory_bytes == (uint64_t{2} << 30));
    CHECK(p.min_alignment_bytes == 256);
    CHECK(p.max_threads_per_block == 1024);
    CHECK(p.max_block_dims[2] == 1024);
    CHECK(p.max_grid_dims[0] == 0x7fffffffu);
    CHECK(p.max_grid_dims[1] == 65536);
    CHECK(p.max_shared_memory_bytes == 64 * 1024);
    CHECK(p.subgroup_size == 64);
    CHECK(p.uuid[0] == 0xb0 + 16 * index);
    // 1.7 GHz x CUs x 128 FP32 lanes (gfx90a: packed FP32) x 2 (FMA);
    // 2 x 1.6 GHz x 4096 bits / 8.
    CHECK(p.peak_fp32_flops == Approx(2.0 * 1.7e9 * cus * 128));
    CHECK(p.peak_memory_bandwidth == Approx(2.0 * 1.6e9 * 4096 / 8));
    CHECK(p.module_formats ==
          ((1u << HAL_MODULE_FORMAT_HSACO) | (1u << HAL_MODULE_FORMAT_HAL_DIALECT)));
    const uint32_t caps = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                          HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_HOST_MEMORY |
                          HAL_DEVICE_CAP_SHARED_MEMORY | HAL_DEVICE_CAP_STREAM_QUERY |
                          // The loader's host-staged collectives serve alltoallv.
                          HAL_DEVICE_CAP_ALLTOALLV;
    CHECK(p.capabilities == caps);
  }
}

TEST_CASE("memory of every kind: copies and fills checked by content") {
  Fake fake;
  gpu_api_test::check_memory_kinds([&] { return fake.live("allocations"); }, 20261203, 256, 4096);
}

TEST_CASE("hipErrorOutOfMemory is HAL_ERROR_OUT_OF_MEMORY with the hipError_t") {
  Session session;
  void* ptr = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, FAKE_HIP_OOM_BYTES, 0, &ptr) ==
          HAL_ERROR_OUT_OF_MEMORY);
  const hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == kHipErrorOutOfMemory);
  CHECK(std::string(detail.plugin) == "hip");
  CHECK(std::string(detail.message).find("hipErrorOutOfMemory (2)") != std::string::npos);
  CHECK(std::string(detail.message).find("hipMalloc") != std::string::npos);
  // An oversized alignment overflows before the runtime is asked.
  CHECK(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, SIZE_MAX - 100, 1u << 20, &ptr) !=
        HAL_SUCCESS);
}

TEST_CASE("stream order: queued work, events and host functions complete together") {
  Session session;
  Fake fake;
  void* host = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_HOST, 256, 0, &host) == HAL_SUCCESS);
  hal_event_t start = nullptr, end = nullptr;
  REQUIRE(hal_event_create(session.device(), HAL_EVENT_FLAG_TIMING, &start) == HAL_SUCCESS);
  REQUIRE(hal_event_create(session.device(), HAL_EVENT_FLAG_TIMING, &end) == HAL_SUCCESS);
  hal_stream_t other = nullptr;
  REQUIRE(hal_stream_create(session.device(), 0, &other) == HAL_SUCCESS);
  CHECK(hal_event_query(end) == HAL_SUCCESS);  // never recorded: complete

  struct Seen {
    const uint8_t* memory;
    uint8_t value = 0;
    int calls = 0;
  } seen{static_cast<const uint8_t*>(host)};
  fake.set_paused(1);
  REQUIRE(hal_event_record(start, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(host, 0x7e, 256, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_event_record(end, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_wait_event(other, end) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(
              other,
              [](void* user) {
                auto* s = static_cast<Seen*>(user);
                s->value = s->memory[255];
                ++s->calls;
              },
              &seen) == HAL_SUCCESS);
  // The runtime's hipLaunchHostFunc when it has one, else a stream callback.
  const bool host_func = fake.live("host_funcs") >= 0;
  CHECK(fake.live("callbacks") == (host_func ? 0 : 1));
  if (host_func) CHECK(fake.live("host_funcs") == 1);
  CHECK(hal_stream_query(session.stream()) == HAL_NOT_READY);
  CHECK(hal_event_query(end) == HAL_NOT_READY);
  CHECK(seen.calls == 0);
  float ms = -1;
  CHECK(hal_event_elapsed_ms(start, end, &ms) == HAL_ERROR_INVALID_STATE);
  fake.set_paused(0);
  CHECK(hal_stream_synchronize(other) == HAL_SUCCESS);
  CHECK(seen.calls == 1);
  CHECK(seen.value == 0x7e);  // the host function ran after the fill it waited for
  CHECK(fake.live("callbacks") == 0);
  CHECK(hal_stream_query(session.stream()) == HAL_SUCCESS);
  CHECK(hal_event_query(end) == HAL_SUCCESS);
  CHECK(hal_event_synchronize(end) == HAL_SUCCESS);
  REQUIRE(hal_event_elapsed_ms(start, end, &ms) == HAL_SUCCESS);
  CHECK(ms >= 0.0f);
  CHECK(hal_device_synchronize(session.device()) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(other) == HAL_SUCCESS);
  CHECK(hal_event_destroy(start) == HAL_SUCCESS);
  CHECK(hal_event_destroy(end) == HAL_SUCCESS);
  CHECK(hal_mem_free(host) == HAL_SUCCESS);
}

TEST_CASE("launch arguments reach hipModuleLaunchKernel marshalled by the signature") {
  Session session(1);  // the second GPU: the launch must run with it current
  Fake fake;
  std::mt19937_64 random(7);
  hal_module_t module = nullptr;
  REQUIRE(load(session.device(), HAL_MODULE_FORMAT_HSACO, code_object(kMixed), &module) ==
          HAL_SUCCESS);
  hal_kernel_t kernel = nullptr;
  CHECK(get(module, "mixed", &kernel) == HAL_ERROR_ARGUMENT_MISMATCH);  // HSACO: declare it
  const std::vector<hal_arg_type_t> types = {HAL_ARG_POINTER, HAL_ARG_U32, HAL_ARG_F32, HAL_ARG_F64,
                                             HAL_ARG_I64};
  // A declared signature that disagrees with the code object's metadata: a count and a size.
  const std::vector<hal_arg_type_t> short_types = {HAL_ARG_POINTER, HAL_ARG_U32};
  CHECK(get(module, "mixed", &kernel, &short_types) == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(std::string(hal_error_last_message()).find("takes 5 arguments") != std::string::npos);
  const std::vector<hal_arg_type_t> wrong_size = {HAL_ARG_POINTER, HAL_ARG_U64, HAL_ARG_F32,
                                                  HAL_ARG_F64, HAL_ARG_I64};
  CHECK(get(module, "mixed", &kernel, &wrong_size) == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(std::string(hal_error_last_message()).find("argument 1 of the kernel is 4 bytes") !=
        std::string::npos);
  REQUIRE(get(module, "mixed", &kernel, &types) == HAL_SUCCESS);
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_kernel_get_info(kernel, &info) == HAL_SUCCESS);
  CHECK(info.max_threads_per_block == 256);  // __launch_bounds__(256)

  void* buffer = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 1024, 0, &buffer) == HAL_SUCCESS);
  const uint32_t u = static_cast<uint32_t>(random());
  const float f = 0.25f * static_cast<float>(random() % 1000);
  const double d = -1.0 / static_cast<double>(1 + random() % 1000);
  const int64_t i = -static_cast<int64_t>(random() >> 2);
  const hal_kernel_arg_t args[] = {{&buffer, sizeof(buffer)}, {&u, 4}, {&f, 4}, {&d, 8}, {&i, 8}};
  const size_t before = fake.launch_count();
  const hal_launch_config_t launch = config(3, 128, 1024);
  REQUIRE(hal_launch_kernel(kernel, &launch, 5, args, session.stream()) == HAL_SUCCESS);
  REQUIRE(fake.launch_count() == before + 1);
  fake_hip_launch_t seen{};
  REQUIRE(fake.launch_get(before, &seen) == 1);
  CHECK(std::string(seen.name) == "mixed");
  CHECK(seen.device == 1);
  CHECK(seen.grid[0] == 3);
  CHECK(seen.grid[1] == 2);
  CHECK(seen.block[0] == 128);
  CHECK(seen.shared_bytes == 1024);
  REQUIRE(seen.param_count == 5);
  std::vector<uint8_t> expected(8 + 4 + 4 + 8 + 8);
  std::memcpy(expected.data(), &buffer, 8);
  std::memcpy(expected.data() + 8, &u, 4);
  std::memcpy(expected.data() + 12, &f, 4);
  std::memcpy(expected.data() + 16, &d, 8);
  std::memcpy(expected.data() + 24, &i, 8);
  CHECK(std::vector<uint8_t>(seen.params, seen.params + expected.size()) == expected);

  // Above the kernel's workgroup limit: refused before the runtime, never sent.
  const hal_launch_config_t too_big = config(1, 512);
  CHECK(hal_launch_kernel(kernel, &too_big, 5, args, session.stream()) == HAL_ERROR_INVALID_LAUNCH);
  CHECK(fake.launch_count() == before + 1);
  CHECK(hal_mem_free(buffer) == HAL_SUCCESS);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE(
    "a dialect module is compiled by hiprtc for the device and its signature comes from "
    "the source") {
  Session session;
  Fake fake;
  const std::string source =
      "kernel void saxpy(float alpha, global const float* x, global float* y, unsigned n) {\n"
      "  int i = global_id(0);\n"
      "  if (i < n) y[i] = alpha * x[i] + y[i];\n"
      "}\n";
  hal_module_t module = nullptr;
  REQUIRE(load(session.device(), HAL_MODULE_FORMAT_HAL_DIALECT, source, &module) == HAL_SUCCESS);
  hal_kernel_t kernel = nullptr;
  REQUIRE(get(module, "saxpy", &kernel) == HAL_SUCCESS);
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_kernel_get_info(kernel, &info) == HAL_SUCCESS);
  REQUIRE(info.arg_count == 4);
  CHECK(info.arg_types[0] == HAL_ARG_F32);
  CHECK(info.arg_types[1] == HAL_ARG_POINTER);
  CHECK(info.arg_types[3] == HAL_ARG_U32);
  void* x = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 64, 0, &x) == HAL_SUCCESS);
  const float alpha = 2.5f;
  const uint32_t n = 16;
  const hal_kernel_arg_t args[] = {{&alpha, 4}, {&x, 8}, {&x, 8}, {&n, 4}};
  const size_t before = fake.launch_count();
  const hal_launch_config_t launch = config(1, 16);
  REQUIRE(hal_launch_kernel(kernel, &launch, 4, args, session.stream()) == HAL_SUCCESS);
  fake_hip_launch_t seen{};
  REQUIRE(fake.launch_get(before, &seen) == 1);
  CHECK(std::string(seen.name) == "saxpy");
  REQUIRE(seen.param_count == 4);
  float alpha_seen = 0;
  std::memcpy(&alpha_seen, seen.params, 4);
  CHECK(alpha_seen == alpha);
  uint32_t n_seen = 0;
  std::memcpy(&n_seen, seen.params + 20, 4);
  CHECK(n_seen == n);
  CHECK(hal_kernel_get(module, nullptr, &kernel) == HAL_ERROR_NULL_POINTER);
  CHECK(get(module, "nothing", &kernel) == HAL_ERROR_NOT_FOUND);
  CHECK(hal_mem_free(x) == HAL_SUCCESS);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("a second load of the same dialect source is a kernel cache hit, and damage is rebuilt") {
  cache_test::Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  cache_test::EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  cache_test::EnvOverride log("HAL_LOG", "1");
  Session session;
  Fake fake;
  const std::string source =
      "kernel void add_one(global int* x, unsigned n) {\n"
      "  int i = global_id(0);\n"
      "  if (i < n) x[i] = x[i] + 1;\n"
      "}\n";
  // Loads the source, launches its kernel once, and returns the log lines.
  auto load_and_launch = [&](const char* what) {
    CAPTURE(what);
    cache_test::StderrCapture capture(scratch.path + "/stderr.txt");
    hal_module_t module = nullptr;
    REQUIRE(load(session.device(), HAL_MODULE_FORMAT_HAL_DIALECT, source, &module) == HAL_SUCCESS);
    hal_kernel_t kernel = nullptr;
    REQUIRE(get(module, "add_one", &kernel) == HAL_SUCCESS);
    void* x = nullptr;
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 64, 0, &x) == HAL_SUCCESS);
    const uint32_t n = 16;
    const hal_kernel_arg_t args[] = {{&x, 8}, {&n, 4}};
    const size_t before = fake.launch_count();
    const hal_launch_config_t launch = config(1, 16);
    REQUIRE(hal_launch_kernel(kernel, &launch, 2, args, session.stream()) == HAL_SUCCESS);
    fake_hip_launch_t seen{};
    REQUIRE(fake.launch_get(before, &seen) == 1);
    CHECK(std::string(seen.name) == "add_one");
    CHECK(hal_mem_free(x) == HAL_SUCCESS);
    CHECK(hal_module_unload(module) == HAL_SUCCESS);
    return capture.text();
  };
  const std::string first = load_and_launch("the first load");
  CHECK(first.find("compiled and stored as the kernel cache entry '" + directory +
                   "/objects/hip-") != std::string::npos);
  const std::string entry =
      directory + "/objects/" + cache_test::only_entry(directory + "/objects", ".hsaco");
  const ino_t stored = cache_test::inode_of(entry);

  const std::string second = load_and_launch("the second load");
  CHECK(second.find("the kernel cache entry '" + entry + "' is used: nothing is compiled") !=
        std::string::npos);
  CHECK(second.find("compiled and stored") == std::string::npos);
  CHECK(cache_test::inode_of(entry) == stored);  // not written again

  // Truncated: the hash disagrees, so it is compiled and stored again.
  const std::string bytes = cache_test::slurp(entry);
  cache_test::write_file(entry, bytes.substr(0, bytes.size() / 2));
  const std::string third = load_and_launch("the load after the damage");
  CHECK(third.find("the kernel cache entry " + entry + " is rebuilt: ") != std::string::npos);
  CHECK(cache_test::slurp(entry) == bytes);

  // A consistent entry (its record matches) holding a code object for
  // another GPU: the runtime would refuse it (hipErrorNoBinaryForGpu), so
  // the plugin must refuse it first and compile for this device again.
  const std::string gfx908 = code_object(kMixed, "gfx908");
  cache_test::write_file(entry, gfx908);
  cache_test::write_file(cache_test::record_path(entry, ".hsaco"),
                         cache_test::record_for(entry, gfx908));
  const std::string fourth = load_and_launch("the load after a planted gfx908 entry");
  CHECK(fourth.find("the kernel cache entry " + entry + " is rebuilt: '" +
                    entry.substr(entry.rfind('/') + 1) +
                    "': the code object is built for gfx908, not gfx90a:sramecc+:xnack-") !=
        std::string::npos);
  CHECK(cache_test::slurp(entry) == bytes);
}

TEST_CASE(
    "runtime errors keep their hipError_t: a code object for another GPU, a missing "
    "kernel") {
  Session session;
  Fake fake;
  hal_module_t module = nullptr;
  // Built for gfx908: the runtime (a gfx90a device) has no binary for it.
  CHECK(load(session.device(), HAL_MODULE_FORMAT_HSACO, code_object(kMixed, "gfx908"), &module) ==
        HAL_ERROR_INVALID_MODULE);
  hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == kHipErrorNoBinaryForGpu);
  CHECK(std::string(detail.message).find("hipModuleLoadData: hipErrorNoBinaryForGpu (209)") !=
        std::string::npos);

  REQUIRE(load(session.device(), HAL_MODULE_FORMAT_HSACO, code_object(kMixed), &module) ==
          HAL_SUCCESS);
  const std::vector<hal_arg_type_t> one = {HAL_ARG_POINTER};  // declared, so the runtime is asked
  hal_kernel_t kernel = nullptr;
  CHECK(get(module, "absent", &kernel, &one) == HAL_ERROR_NOT_FOUND);
  detail = last_detail();
  CHECK(detail.native_code == kHipErrorNotFound);
  CHECK(std::string(detail.message).find("hipErrorNotFound (500)") != std::string::npos);
  CHECK(std::string(detail.message).find("absent") != std::string::npos);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);

  // Code objects the plugin refuses before the runtime reads them (no size is passed).
  const long modules = fake.live("modules");
  const std::string code = code_object(kMixed);
  CHECK(load(session.device(), HAL_MODULE_FORMAT_HSACO, code.substr(0, code.size() - 1), &module) ==
        HAL_ERROR_INVALID_MODULE);
  CHECK(std::string(hal_error_last_message()).find("the code object is invalid") !=
        std::string::npos);
  CHECK(load(session.device(), HAL_MODULE_FORMAT_HSACO, "not a code object", &module) ==
        HAL_ERROR_INVALID_MODULE);
  CHECK(load(session.device(), HAL_MODULE_FORMAT_HSACO, std::string(), &module) != HAL_SUCCESS);
  CHECK(fake.live("modules") == modules);

  const std::string broken = "kernel void k(global float* out) {\n  out[0] = nope;\n}\n";
  CHECK(load(session.device(), HAL_MODULE_FORMAT_HAL_DIALECT, broken, &module) ==
        HAL_ERROR_INVALID_MODULE);
  CHECK(std::string(hal_error_last_message()).find("nope") != std::string::npos);
  // A format the device does not list never reaches the plugin.
  CHECK(load(session.device(), HAL_MODULE_FORMAT_PTX, ".version 9.0", &module) != HAL_SUCCESS);
}

TEST_CASE("shutdown gives every runtime object back, even those the application left") {
  Fake fake;
  {
    Session session;
    void* memory = nullptr;
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_SHARED, 100, 0, &memory) == HAL_SUCCESS);
    void* pinned = nullptr;
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_HOST, 100, 0, &pinned) == HAL_SUCCESS);
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device(), 0, &stream) == HAL_SUCCESS);
    hal_event_t event = nullptr;
    REQUIRE(hal_event_create(session.device(), 0, &event) == HAL_SUCCESS);
    hal_module_t module = nullptr;
    REQUIRE(load(session.device(), HAL_MODULE_FORMAT_HSACO, code_object(kMixed), &module) ==
            HAL_SUCCESS);
    CHECK(fake.live("modules") == 1);
    CHECK(fake.live("streams") == 2);
  }
  CHECK(fake.live("allocations") == 0);
  CHECK(fake.live("streams") == 0);
  CHECK(fake.live("events") == 0);
  CHECK(fake.live("modules") == 0);
}

TEST_CASE(
    "a failing hipGetDeviceCount leaves the plugin loaded with 0 devices and the "
    "hipError_t's name") {
  setenv("HAL_FAKE_HIP_COUNT_ERROR", "100", 1);  // hipErrorNoDevice, as on this machine
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  unsetenv("HAL_FAKE_HIP_COUNT_ERROR");
  uint32_t count = 99;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(report.outcome == HAL_PLUGIN_LOADED);
  CHECK(std::string(report.reason) ==
        "hip: hipGetDeviceCount failed: hipErrorNoDevice (100); 0 devices");
  hal_shutdown();
}

TEST_CASE("a code the header does not name is shown by number, without asking the runtime") {
  setenv("HAL_FAKE_HIP_COUNT_ERROR", "12345", 1);  // HIP 5.2's hipGetErrorName crashes on it
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  unsetenv("HAL_FAKE_HIP_COUNT_ERROR");
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(std::string(report.reason) ==
        "hip: hipGetDeviceCount failed: HIP error (12345); 0 devices");
  hal_shutdown();
}

TEST_CASE("no kernel driver node: the runtime is not loaded at all") {
  setenv("HAL_HIP_KFD_PATH", "/nonexistent/kfd", 1);
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  setenv("HAL_HIP_KFD_PATH", "/dev/null", 1);
  uint32_t count = 99;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(report.outcome == HAL_PLUGIN_LOADED);
  CHECK(std::string(report.reason) ==
        "hip: no /nonexistent/kfd: the amdgpu kernel driver is not loaded; 0 devices");
  hal_shutdown();
}

TEST_CASE("a library refused as hiprtc is not left loaded in the process") {
  REQUIRE(dlopen(HAL_TEST_NOT_A_RUNTIME, RTLD_NOW | RTLD_NOLOAD) == nullptr);
  setenv("HAL_HIP_HIPRTC_PATH", HAL_TEST_NOT_A_RUNTIME, 1);
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  setenv("HAL_HIP_HIPRTC_PATH", HAL_TEST_SYSTEM_HIP, 1);
  // The runtime is there; only HAL dialect modules are not offered.
  uint32_t count = 0;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 2);
  hal_device_t device = nullptr;
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  REQUIRE(hal_device_get_properties(device, &properties) == HAL_SUCCESS);
  CHECK(properties.module_formats == (1u << HAL_MODULE_FORMAT_HSACO));
  void* still_loaded = dlopen(HAL_TEST_NOT_A_RUNTIME, RTLD_NOW | RTLD_NOLOAD);
  CHECK(still_loaded == nullptr);
  if (still_loaded != nullptr) dlclose(still_loaded);
  hal_shutdown();
}

TEST_CASE("a library refused as the HIP runtime is not left loaded in the process") {
  REQUIRE(dlopen(HAL_TEST_NOT_A_RUNTIME, RTLD_NOW | RTLD_NOLOAD) == nullptr);
  setenv("HAL_HIP_RUNTIME_PATH", HAL_TEST_NOT_A_RUNTIME, 1);
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  setenv("HAL_HIP_RUNTIME_PATH", fake_path(), 1);
  uint32_t count = 99;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(std::string(report.reason).find("not a HIP runtime") != std::string::npos);
  void* still_loaded = dlopen(HAL_TEST_NOT_A_RUNTIME, RTLD_NOW | RTLD_NOLOAD);
  CHECK(still_loaded == nullptr);
  if (still_loaded != nullptr) dlclose(still_loaded);
  hal_shutdown();
}
