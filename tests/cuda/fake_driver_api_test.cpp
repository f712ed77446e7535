// The cuda plugin through the public API over the stand-in driver
// (fake_driver/): device properties from the driver's attributes, memory of
// every kind checked by content, stream and event ordering, argument
// marshalling checked against the driver's launch log, CUresult mapping, and
// a teardown that gives every driver object back.
#include <catch2/catch.hpp>
#include <cuda.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "gpu_api_test_support.hpp"
#include "fake_driver.h"
#include "hal.h"

namespace {

// CUresult values (cuda.h), written out: the test is independent of the header.
constexpr int64_t CUDA_ERROR_OUT_OF_MEMORY_CODE = 2;
constexpr int64_t CUDA_ERROR_INVALID_PTX_CODE = 218;
constexpr int64_t CUDA_ERROR_NOT_FOUND_CODE = 500;
constexpr int CUDA_ERROR_ILLEGAL_ADDRESS_CODE = 700;

// Every test runs the cuda plugin over the stand-in driver.
[[maybe_unused]] const bool kEnvironment = [] {
  setenv("HAL_PLUGINS", "cuda", 1);
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_FAKE_CUDA, 1);
  // Without NCCL (a machine may have one installed): the loader's collectives.
  setenv("HAL_CUDA_NCCL_PATH", "/nonexistent/libnccl.so.2", 1);
  setenv("HAL_CACHE_DIR", HAL_TEST_CACHE_DIR, 0);  // hermetic: the build tree
  return true;
}();

// The driver library the plugin opened (the same file: the same handle).
struct Fake {
  Fake() {
    handle = dlopen(HAL_TEST_FAKE_CUDA, RTLD_NOW);
    REQUIRE(handle != nullptr);
    launch_count =
        reinterpret_cast<fake_cuda_launch_count_fn>(dlsym(handle, "fake_cuda_launch_count"));
    launch_get = reinterpret_cast<fake_cuda_launch_get_fn>(dlsym(handle, "fake_cuda_launch_get"));
    live = reinterpret_cast<fake_cuda_live_fn>(dlsym(handle, "fake_cuda_live"));
    set_paused = reinterpret_cast<fake_cuda_set_paused_fn>(dlsym(handle, "fake_cuda_set_paused"));
    foreign_context =
        reinterpret_cast<fake_cuda_foreign_context_fn>(dlsym(handle, "fake_cuda_foreign_context"));
    inject_fault =
        reinterpret_cast<fake_cuda_inject_fault_fn>(dlsym(handle, "fake_cuda_inject_fault"));
    // Typed as the driver defines them: a call through another function type
    // is undefined (clang's -fsanitize=function reports it).
    set_current_entry =
        reinterpret_cast<decltype(&::cuCtxSetCurrent)>(dlsym(handle, "cuCtxSetCurrent"));
    get_current_entry =
        reinterpret_cast<decltype(&::cuCtxGetCurrent)>(dlsym(handle, "cuCtxGetCurrent"));
    REQUIRE(foreign_context != nullptr);
    REQUIRE(inject_fault != nullptr);
    REQUIRE(set_current_entry != nullptr);
    REQUIRE(get_current_entry != nullptr);
    REQUIRE(launch_count != nullptr);
    REQUIRE(launch_get != nullptr);
    REQUIRE(live != nullptr);
    REQUIRE(set_paused != nullptr);
  }
  ~Fake() { dlclose(handle); }
  void* handle = nullptr;
  fake_cuda_launch_count_fn launch_count = nullptr;
  fake_cuda_launch_get_fn launch_get = nullptr;
  fake_cuda_live_fn live = nullptr;
  fake_cuda_set_paused_fn set_paused = nullptr;
  fake_cuda_foreign_context_fn foreign_context = nullptr;
  fake_cuda_inject_fault_fn inject_fault = nullptr;
  // cuCtxSetCurrent and cuCtxGetCurrent, as the CUDA runtime calls them.
  decltype(&::cuCtxSetCurrent) set_current_entry = nullptr;
  decltype(&::cuCtxGetCurrent) get_current_entry = nullptr;
  int set_current(void* context) const {
    return static_cast<int>(set_current_entry(static_cast<CUcontext>(context)));
  }
  void* current() const {
    CUcontext context = nullptr;
    REQUIRE(get_current_entry(&context) == CUDA_SUCCESS);
    return context;
  }
};

// A host function that holds its stream until the test opens the gate (or
// 20 s pass: a caller blocked behind it fails the test instead of hanging).
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> passed{false};
  std::atomic<bool> timed_out{false};
  static void wait(void* user) {
    auto* gate = static_cast<Gate*>(user);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!gate->open.load()) {
      if (std::chrono::steady_clock::now() > until) {
        gate->timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    gate->passed = true;
  }
};

using gpu_api_test::config;
using gpu_api_test::get;
using gpu_api_test::last_detail;
using gpu_api_test::load;
using gpu_api_test::Session;

// A PTX entry with one parameter of each width the plugin marshals.
constexpr char kPtx[] = R"(
.version 9.0
.target sm_90
.address_size 64
.visible .entry mixed(
	.param .u64 mixed_param_0,
	.param .u32 mixed_param_1,
	.param .f32 mixed_param_2,
	.param .f64 mixed_param_3,
	.param .u64 mixed_param_4
)
.maxntid 256, 1, 1
{
	ret;
}
)";

}  // namespace

TEST_CASE("each GPU is a device with the driver's properties") {
  Session session;
  for (uint32_t index = 0; index < 2; ++index) {
    hal_device_t device = nullptr;
    REQUIRE(hal_device_get(index, &device) == HAL_SUCCESS);
    hal_device_properties_t p{};
    p.struct_size = sizeof(p);
    REQUIRE(hal_device_get_properties(device, &p) == HAL_SUCCESS);
    const int sms = index == 0 ? 4 : 8;  // the fake's SM counts
    CHECK(std::string(p.name) == "HAL fake GPU " + std::to_string(index));
    CHECK(std::string(p.plugin) == "cuda");
    CHECK(std::string(p.vendor) == "NVIDIA");
    CHECK(std::string(p.driver_version) == "CUDA driver 13.0");
    CHECK(p.type == HAL_DEVICE_TYPE_GPU);
    CHECK(p.plugin_device_index == index);
    CHECK(p.compute_units == static_cast<uint32_t>(sms));
    // What a context can allocate: the fake's 2 GiB less its context's 300 MiB
    // and the plugin's 128 MiB of headroom (device.cpp), not cuDeviceTotalMem.
    CHECK(p.total_memory_bytes == (uint64_t{2048 - 300 - 128} << 20));
    CHECK(p.max_allocation_bytes == p.total_memory_bytes);
    CHECK(p.min_alignment_bytes == 256);
    CHECK(p.max_threads_per_block == 1024);
    CHECK(p.max_block_dims[2] == 64);
    CHECK(p.max_grid_dims[0] == 0x7fffffffu);
    CHECK(p.max_shared_memory_bytes == 227 * 1024);
    CHECK(p.subgroup_size == 32);
    CHECK(p.uuid[0] == 0xa0 + 16 * index);
    // 1.5 GHz x SMs x 128 FP32 lanes (sm_90) x 2 (FMA); 2 x 2 GHz x 256 bits / 8.
    CHECK(p.peak_fp32_flops == Approx(2.0 * 1.5e9 * sms * 128));
    CHECK(p.peak_memory_bandwidth == Approx(2.0 * 2e9 * 256 / 8));
    const uint32_t formats = (1u << HAL_MODULE_FORMAT_PTX) | (1u << HAL_MODULE_FORMAT_CUBIN) |
                             (1u << HAL_MODULE_FORMAT_HAL_DIALECT);
    CHECK(p.module_formats == formats);
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
  gpu_api_test::check_memory_kinds([&] { return fake.live("allocations"); }, 20261201, 256, 4096);
}

TEST_CASE("CUDA_ERROR_OUT_OF_MEMORY is HAL_ERROR_OUT_OF_MEMORY with the CUresult") {
  Session session;
  void* ptr = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, FAKE_CUDA_OOM_BYTES, 0, &ptr) ==
          HAL_ERROR_OUT_OF_MEMORY);
  const hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == CUDA_ERROR_OUT_OF_MEMORY_CODE);
  CHECK(std::string(detail.plugin) == "cuda");
  CHECK(std::string(detail.message).find("CUDA_ERROR_OUT_OF_MEMORY (2)") != std::string::npos);
  CHECK(std::string(detail.message).find("cuMemAlloc") != std::string::npos);
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
  CHECK(hal_stream_query(session.stream()) == HAL_NOT_READY);
  CHECK(hal_event_query(end) == HAL_NOT_READY);
  CHECK(seen.calls == 0);
  float ms = -1;
  CHECK(hal_event_elapsed_ms(start, end, &ms) == HAL_ERROR_INVALID_STATE);
  fake.set_paused(0);
  CHECK(hal_stream_synchronize(other) == HAL_SUCCESS);
  CHECK(seen.calls == 1);
  CHECK(seen.value == 0x7e);  // the host function ran after the fill it waited for
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

TEST_CASE("launch arguments reach cuLaunchKernel marshalled by the signature") {
  Session session;
  Fake fake;
  std::mt19937_64 random(7);
  hal_module_t module = nullptr;
  REQUIRE(load(session.device(), HAL_MODULE_FORMAT_PTX, kPtx, &module) == HAL_SUCCESS);
  hal_kernel_t kernel = nullptr;
  CHECK(get(module, "mixed", &kernel) == HAL_ERROR_ARGUMENT_MISMATCH);  // PTX: declare it
  const std::vector<hal_arg_type_t> types = {HAL_ARG_POINTER, HAL_ARG_U32, HAL_ARG_F32, HAL_ARG_F64,
                                             HAL_ARG_I64};
  // A declared signature that disagrees with the entry's parameters
  // (cuFuncGetParamInfo): a count and a size.
  const std::vector<hal_arg_type_t> short_types = {HAL_ARG_POINTER, HAL_ARG_U32};
  CHECK(get(module, "mixed", &kernel, &short_types) == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(std::string(hal_error_last_message()).find("takes 5 parameters") != std::string::npos);
  const std::vector<hal_arg_type_t> wrong_size = {HAL_ARG_POINTER, HAL_ARG_U64, HAL_ARG_F32,
                                                  HAL_ARG_F64, HAL_ARG_I64};
  CHECK(get(module, "mixed", &kernel, &wrong_size) == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(std::string(hal_error_last_message()).find("parameter 1 of the entry is 4 bytes") !=
        std::string::npos);
  REQUIRE(get(module, "mixed", &kernel, &types) == HAL_SUCCESS);
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_kernel_get_info(kernel, &info) == HAL_SUCCESS);
  CHECK(info.max_threads_per_block == 256);  // the entry's .maxntid

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
  fake_cuda_launch_t seen{};
  REQUIRE(fake.launch_get(before, &seen) == 1);
  CHECK(std::string(seen.name) == "mixed");
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

  // Above the kernel's .maxntid: refused by the plugin, never sent.
  const hal_launch_config_t too_big = config(1, 512);
  CHECK(hal_launch_kernel(kernel, &too_big, 5, args, session.stream()) == HAL_ERROR_INVALID_LAUNCH);
  CHECK(fake.launch_count() == before + 1);
  CHECK(hal_mem_free(buffer) == HAL_SUCCESS);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);
}

TEST_CASE("a dialect module is compiled by NVRTC and its signature comes from the source") {
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
  fake_cuda_launch_t seen{};
  REQUIRE(fake.launch_get(before, &seen) == 1);
  CHECK(std::string(seen.name) == "saxpy");
  REQUIRE(seen.param_count == 4);
  float alpha_seen = 0;
  std::memcpy(&alpha_seen, seen.params, 4);
  CHECK(alpha_seen == alpha);
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
    fake_cuda_launch_t seen{};
    REQUIRE(fake.launch_get(before, &seen) == 1);
    CHECK(std::string(seen.name) == "add_one");
    CHECK(hal_mem_free(x) == HAL_SUCCESS);
    CHECK(hal_module_unload(module) == HAL_SUCCESS);
    return capture.text();
  };
  const std::string first = load_and_launch("the first load");
  CHECK(first.find("compiled and stored as the kernel cache entry '" + directory +
                   "/objects/cuda-") != std::string::npos);
  const std::string entry =
      directory + "/objects/" + cache_test::only_entry(directory + "/objects", ".cubin");
  const ino_t stored = cache_test::inode_of(entry);

  const std::string second = load_and_launch("the second load");
  CHECK(second.find("the kernel cache entry '" + entry + "' is used: nothing is compiled") !=
        std::string::npos);
  CHECK(second.find("compiled and stored") == std::string::npos);
  CHECK(cache_test::inode_of(entry) == stored);  // not written again

  // A flipped byte: the hash disagrees, so it is compiled and stored again.
  std::string bytes = cache_test::slurp(entry);
  bytes[bytes.size() / 2] ^= 0x20;
  cache_test::write_file(entry, bytes);
  const std::string third = load_and_launch("the load after the damage");
  CHECK(third.find("the kernel cache entry " + entry + " is rebuilt: ") != std::string::npos);
  CHECK(third.find("compiled and stored as the kernel cache entry '" + entry + "'") !=
        std::string::npos);
  CHECK(cache_test::slurp(entry) != bytes);
}

TEST_CASE("a dialect module is a cubin for the device, so a driver older than NVRTC loads it") {
  cache_test::Scratch scratch;
  cache_test::EnvOverride log_level("HAL_LOG", "1");
  const std::string source =
      "kernel void twice(global float* x, unsigned n) {\n"
      "  int i = global_id(0);\n"
      "  if (i < n) x[i] = 2.0f * x[i];\n"
      "}\n";
  // Loads |source| on device 0 and returns the result, the error's message
  // and what the plugin logged.
  struct Outcome {
    hal_result_t result;
    std::string message, log;
    int64_t native;
  };
  auto load_source = [&] {
    Outcome outcome{};
    cache_test::StderrCapture capture(scratch.path + "/stderr.txt");
    Session session;
    hal_module_t module = nullptr;
    outcome.result = load(session.device(), HAL_MODULE_FORMAT_HAL_DIALECT, source, &module);
    if (outcome.result == HAL_SUCCESS) {
      hal_kernel_t kernel = nullptr;
      CHECK(get(module, "twice", &kernel) == HAL_SUCCESS);
      CHECK(hal_module_unload(module) == HAL_SUCCESS);
    } else {
      outcome.message = hal_error_last_message();
      outcome.native = last_detail().native_code;
    }
    outcome.log = capture.text();
    return outcome;
  };
  // CUDA 12.4 reads PTX ISA up to 8.4; NVRTC 13's PTX says 9.0.
  cache_test::EnvOverride driver("HAL_FAKE_CUDA_DRIVER_VERSION", "12040");
  SECTION("an H100 (sm_90): the cubin loads, no PTX is JIT-compiled") {
    const Outcome outcome = load_source();
    INFO(outcome.message << outcome.log);
    CHECK(outcome.result == HAL_SUCCESS);
    CHECK(outcome.log.find("not a cubin") == std::string::npos);
  }
  SECTION("an architecture NVRTC cannot emit: PTX, the reason logged, the JIT's refusal quoted") {
    cache_test::EnvOverride cc("HAL_FAKE_CUDA_CC", "85");
    const Outcome outcome = load_source();
    INFO(outcome.message << outcome.log);
    CHECK(outcome.result == HAL_ERROR_INVALID_MODULE);
    CHECK(outcome.native == 222);  // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
    CHECK(outcome.log.find("compiled to compute_80 PTX, not a cubin: NVRTC 13.0 does not offer "
                           "sm_85") != std::string::npos);
    CHECK(outcome.message.find("the JIT's error log:\nptxas application ptx input, line ") !=
          std::string::npos);
    CHECK(outcome.message.find("Unsupported .version 9.0; current version is '8.4'") !=
          std::string::npos);
  }
  SECTION("the same PTX on a driver as new as NVRTC loads") {
    cache_test::EnvOverride cc("HAL_FAKE_CUDA_CC", "85");
    cache_test::EnvOverride newer("HAL_FAKE_CUDA_DRIVER_VERSION", "13000");
    const Outcome outcome = load_source();
    INFO(outcome.message << outcome.log);
    CHECK(outcome.result == HAL_SUCCESS);
    CHECK(outcome.log.find("compiled to compute_80 PTX, not a cubin") != std::string::npos);
  }
}

TEST_CASE("the JIT's error log is part of a PTX module's load error") {
  Session session;
  std::string too_new = kPtx;
  too_new.replace(too_new.find(".version 9.0"), 12, ".version 9.7");
  hal_module_t module = nullptr;
  CHECK(load(session.device(), HAL_MODULE_FORMAT_PTX, too_new, &module) ==
        HAL_ERROR_INVALID_MODULE);
  std::string message = hal_error_last_message();
  CHECK(last_detail().native_code == 222);
  CHECK(message.find("CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222); the JIT's error log:\n"
                     "ptxas application ptx input, line 2; fatal   : Unsupported .version 9.7; "
                     "current version is '9.0'") != std::string::npos);
  std::string newer_target = kPtx;
  newer_target.replace(newer_target.find(".target sm_90"), 13, ".target sm_100");
  CHECK(load(session.device(), HAL_MODULE_FORMAT_PTX, newer_target, &module) ==
        HAL_ERROR_INVALID_MODULE);
  message = hal_error_last_message();
  CHECK(message.find("line 3; fatal   : SM version specified by .target is higher") !=
        std::string::npos);
}

TEST_CASE("driver errors keep their CUresult: a bad image, a missing entry") {
  Session session;
  hal_module_t module = nullptr;
  CHECK(load(session.device(), HAL_MODULE_FORMAT_PTX, "not ptx at all", &module) ==
        HAL_ERROR_INVALID_MODULE);
  hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == CUDA_ERROR_INVALID_PTX_CODE);
  CHECK(std::string(detail.message).find("CUDA_ERROR_INVALID_PTX") != std::string::npos);

  REQUIRE(load(session.device(), HAL_MODULE_FORMAT_PTX, kPtx, &module) == HAL_SUCCESS);
  const std::vector<hal_arg_type_t> none = {HAL_ARG_POINTER};  // declared, so the driver is asked
  hal_kernel_t kernel = nullptr;
  CHECK(get(module, "absent", &kernel, &none) == HAL_ERROR_NOT_FOUND);
  detail = last_detail();
  CHECK(detail.native_code == CUDA_ERROR_NOT_FOUND_CODE);
  CHECK(std::string(detail.message).find("CUDA_ERROR_NOT_FOUND") != std::string::npos);
  CHECK(std::string(detail.message).find("absent") != std::string::npos);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);

  // A cubin the plugin refuses before the driver reads it (no size is passed).
  const std::string truncated = std::string(
                                    "\x7f"
                                    "ELF\x02\x01",
                                    6) +
                                std::string(20, '\0');
  CHECK(load(session.device(), HAL_MODULE_FORMAT_CUBIN, truncated, &module) ==
        HAL_ERROR_INVALID_MODULE);
  CHECK(std::string(hal_error_last_message()).find("the cubin image is invalid") !=
        std::string::npos);

  const std::string broken = "kernel void k(global float* out) {\n  out[0] = nope;\n}\n";
  CHECK(load(session.device(), HAL_MODULE_FORMAT_HAL_DIALECT, broken, &module) ==
        HAL_ERROR_INVALID_MODULE);
  CHECK(std::string(hal_error_last_message()).find("nope") != std::string::npos);
}

TEST_CASE("shutdown gives every driver object back, even those the application left") {
  Fake fake;
  {
    Session session;
    void* memory = nullptr;
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_SHARED, 100, 0, &memory) == HAL_SUCCESS);
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device(), 0, &stream) == HAL_SUCCESS);
    hal_event_t event = nullptr;
    REQUIRE(hal_event_create(session.device(), 0, &event) == HAL_SUCCESS);
    hal_module_t module = nullptr;
    REQUIRE(load(session.device(), HAL_MODULE_FORMAT_PTX, kPtx, &module) == HAL_SUCCESS);
    CHECK(fake.live("contexts") == 1);  // device 1 was never used: no context there
    CHECK(fake.live("modules") == 1);
  }
  CHECK(fake.live("allocations") == 0);
  CHECK(fake.live("streams") == 0);
  CHECK(fake.live("events") == 0);
  CHECK(fake.live("modules") == 0);
  CHECK(fake.live("contexts") == 0);
}

TEST_CASE("a failing cuInit leaves the plugin loaded with 0 devices and the CUresult's name") {
  setenv("HAL_FAKE_CUDA_INIT_ERROR", "100", 1);  // CUDA_ERROR_NO_DEVICE
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  unsetenv("HAL_FAKE_CUDA_INIT_ERROR");
  uint32_t count = 99;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(report.outcome == HAL_PLUGIN_LOADED);
  CHECK(std::string(report.reason) == "cuda: cuInit failed: CUDA_ERROR_NO_DEVICE (100); 0 devices");
  hal_shutdown();
}

#ifdef HAL_TEST_CUDA_STUB
TEST_CASE("a driver refused before cuInit is not left loaded in the process") {
  // The toolkit's stub libcuda answers every cuGetProcAddress with
  // CUDA_ERROR_STUB_LIBRARY: the plugin refuses it before cuInit runs.
  REQUIRE(dlopen(HAL_TEST_CUDA_STUB, RTLD_NOW | RTLD_NOLOAD) == nullptr);
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_CUDA_STUB, 1);
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_FAKE_CUDA, 1);
  uint32_t count = 99;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(std::string(report.reason).find("CUDA_ERROR_STUB_LIBRARY") != std::string::npos);
  void* still_loaded = dlopen(HAL_TEST_CUDA_STUB, RTLD_NOW | RTLD_NOLOAD);
  CHECK(still_loaded == nullptr);
  if (still_loaded != nullptr) dlclose(still_loaded);
  hal_shutdown();
}
#endif

TEST_CASE("a library without cuGetProcAddress_v2 is not left loaded in the process") {
  REQUIRE(dlopen(HAL_TEST_NOT_A_RUNTIME, RTLD_NOW | RTLD_NOLOAD) == nullptr);
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_NOT_A_RUNTIME, 1);
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_FAKE_CUDA, 1);
  uint32_t count = 99;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(std::string(report.reason).find("has no cuGetProcAddress_v2") != std::string::npos);
  void* still_loaded = dlopen(HAL_TEST_NOT_A_RUNTIME, RTLD_NOW | RTLD_NOLOAD);
  CHECK(still_loaded == nullptr);
  if (still_loaded != nullptr) dlclose(still_loaded);
  hal_shutdown();
}

TEST_CASE("primary contexts are retained on first use and never left current on the caller") {
  Fake fake;
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  // Measuring the memory at load retained and released each context: none is held.
  CHECK(fake.live("contexts") == 0);
  hal_device_t first = nullptr, second = nullptr;
  REQUIRE(hal_device_get(0, &first) == HAL_SUCCESS);
  REQUIRE(hal_device_get(1, &second) == HAL_SUCCESS);
  // The CUDA runtime's context (PyTorch's current device) on this thread.
  void* const foreign = fake.foreign_context();
  REQUIRE(fake.set_current(foreign) == 0);
  void* memory = nullptr;
  REQUIRE(hal_mem_alloc(first, HAL_MEMORY_DEVICE, 4096, 0, &memory) == HAL_SUCCESS);
  CHECK(fake.current() == foreign);
  CHECK(fake.live("contexts") == 1);  // the first device's, on its first use
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(first, 0, &stream) == HAL_SUCCESS);
  std::vector<uint8_t> input(4096, 0x11), output(4096, 0);
  REQUIRE(hal_memcpy_async(memory, input.data(), input.size(), stream) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(output.data(), memory, output.size(), stream) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(output == input);
  CHECK(fake.current() == foreign);
  // No context current stays no context current.
  REQUIRE(fake.set_current(nullptr) == 0);
  void* other = nullptr;
  REQUIRE(hal_mem_alloc(second, HAL_MEMORY_DEVICE, 4096, 0, &other) == HAL_SUCCESS);
  CHECK(fake.current() == nullptr);
  CHECK(fake.live("contexts") == 2);
  CHECK(hal_mem_free(other) == HAL_SUCCESS);
  CHECK(hal_mem_free(memory) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  CHECK(fake.current() == nullptr);
  hal_shutdown();
  CHECK(fake.live("contexts") == 0);
}

TEST_CASE("the declared total memory can be allocated, all live at once, and no more") {
  Session session;
  hal_device_properties_t p{};
  p.struct_size = sizeof(p);
  REQUIRE(hal_device_get_properties(session.device(), &p) == HAL_SUCCESS);
  std::vector<void*> live;
  uint64_t allocated = 0;
  const uint64_t chunk = p.total_memory_bytes / 8 / (2 << 20) * (2 << 20);
  while (allocated < p.total_memory_bytes) {
    const uint64_t size = std::min(chunk, p.total_memory_bytes - allocated);
    void* pointer = nullptr;
    INFO("after " << allocated << " of " << p.total_memory_bytes << " bytes");
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, size, 0, &pointer) == HAL_SUCCESS);
    live.push_back(pointer);
    allocated += size;
  }
  for (void* pointer : live) CHECK(hal_mem_free(pointer) == HAL_SUCCESS);
}

TEST_CASE("pageable host memory: copies and fills return at once and keep stream order") {
  Session session;
  void* device_memory = nullptr;
  // Larger than the plugin's 4 MiB staging buffer: several chunks each way.
  const size_t size = (size_t{9} << 20) + 333;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, size, 0, &device_memory) ==
          HAL_SUCCESS);
  std::mt19937 random(20261207);
  std::vector<uint8_t> source(size), written(size), back(size, 0), copied(size, 0), filled(size, 0);
  for (uint8_t& byte : written) byte = static_cast<uint8_t>(random());
  struct Write {
    std::vector<uint8_t>* to;
    const std::vector<uint8_t>* from;
  } write{&source, &written};
  Gate gate;
  // Stream order: the gate, then a host function that writes the source,
  // then the copies. A copy that read the source when it was enqueued, or a
  // call that waited for the stream, fails here.
  REQUIRE(hal_stream_enqueue_host_fn(session.stream(), Gate::wait, &gate) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(
              session.stream(),
              [](void* user) {
                auto* w = static_cast<Write*>(user);
                *w->to = *w->from;
              },
              &write) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(device_memory, source.data(), size, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(back.data(), device_memory, size, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(copied.data(), source.data(), size, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(filled.data() + 7, 0xc3, size - 14, session.stream()) == HAL_SUCCESS);
  // Every call returned with the stream held at the gate.
  CHECK_FALSE(gate.passed.load());
  gate.open = true;
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  CHECK_FALSE(gate.timed_out.load());
  CHECK(back == written);
  CHECK(copied == written);
  CHECK(filled[6] == 0);
  CHECK(filled[7] == 0xc3);
  CHECK(filled[size - 8] == 0xc3);
  CHECK(filled[size - 7] == 0);
  CHECK(std::count(filled.begin(), filled.end(), 0xc3) == static_cast<long>(size - 14));
  CHECK(hal_mem_free(device_memory) == HAL_SUCCESS);
}

TEST_CASE("a fatal CUDA error loses the device, stickily, the other device keeps working") {
  Fake fake;
  Session session;
  void* memory = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 4096, 0, &memory) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(memory, 1, 4096, session.stream()) == HAL_SUCCESS);
  // A kernel touched an illegal address: the context is unusable from now on.
  fake.inject_fault(0, CUDA_ERROR_ILLEGAL_ADDRESS_CODE);
  CHECK(hal_stream_synchronize(session.stream()) == HAL_ERROR_DEVICE_LOST);
  hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == CUDA_ERROR_ILLEGAL_ADDRESS_CODE);
  CHECK(std::string(detail.message).find("cuStreamSynchronize") != std::string::npos);
  // Sticky: every later call on the device is DEVICE_LOST, without reaching the driver.
  void* more = nullptr;
  CHECK(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 4096, 0, &more) ==
        HAL_ERROR_DEVICE_LOST);
  CHECK(last_detail().native_code == CUDA_ERROR_ILLEGAL_ADDRESS_CODE);
  hal_stream_t stream = nullptr;
  CHECK(hal_stream_create(session.device(), 0, &stream) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_stream_query(session.stream()) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_device_synchronize(session.device()) == HAL_ERROR_DEVICE_LOST);
  // Not a bad module: the driver is never asked (it would answer 700 to a
  // module too, which the plugin would otherwise read as an invalid image).
  hal_module_t module = nullptr;
  CHECK(load(session.device(), HAL_MODULE_FORMAT_PTX, kPtx, &module) == HAL_ERROR_DEVICE_LOST);
  // The lost device's memory is freed without an error (SPEC §4.4).
  CHECK(hal_mem_free(memory) == HAL_SUCCESS);
  // The other GPU's context is its own.
  hal_device_t second = nullptr;
  REQUIRE(hal_device_get(1, &second) == HAL_SUCCESS);
  void* fine = nullptr;
  REQUIRE(hal_mem_alloc(second, HAL_MEMORY_DEVICE, 4096, 0, &fine) == HAL_SUCCESS);
  hal_stream_t second_stream = nullptr;
  REQUIRE(hal_stream_create(second, 0, &second_stream) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(fine, 2, 4096, second_stream) == HAL_SUCCESS);
  CHECK(hal_stream_synchronize(second_stream) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(second_stream) == HAL_SUCCESS);
  CHECK(hal_mem_free(fine) == HAL_SUCCESS);
}

TEST_CASE("host functions of different streams never share the driver's thread, and may use HAL") {
  // The stand-in driver runs every stream's cuLaunchHostFunc functions on one
  // thread and refuses CUDA calls there, as CUDA may: a HAL host function
  // that blocks until another stream's host function opens its gate, or that
  // calls HAL, would stall or fail there.
  Session session;
  hal_stream_t other = nullptr;
  REQUIRE(hal_stream_create(session.device(), 0, &other) == HAL_SUCCESS);
  void* memory = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_HOST, 4096, 0, &memory) == HAL_SUCCESS);
  Gate gate;
  struct Opener {
    Gate* gate;
    hal_stream_t third;
    void* memory;
    hal_result_t fill = HAL_ERROR_INTERNAL, sync = HAL_ERROR_INTERNAL;
  };
  hal_stream_t third = nullptr;
  REQUIRE(hal_stream_create(session.device(), 0, &third) == HAL_SUCCESS);
  Opener opener{&gate, third, memory};
  REQUIRE(hal_stream_enqueue_host_fn(session.stream(), Gate::wait, &gate) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(
              other,
              [](void* user) {
                auto* o = static_cast<Opener*>(user);
                // HAL on another stream of the device, from a host function.
                o->fill = hal_memset_async(o->memory, 0x3d, 4096, o->third);
                o->sync = hal_stream_synchronize(o->third);
                o->gate->open = true;
              },
              &opener) == HAL_SUCCESS);
  CHECK(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  CHECK(hal_stream_synchronize(other) == HAL_SUCCESS);
  CHECK_FALSE(gate.timed_out.load());
  CHECK(gate.passed.load());
  CHECK(opener.fill == HAL_SUCCESS);
  CHECK(opener.sync == HAL_SUCCESS);
  CHECK(static_cast<const uint8_t*>(memory)[4095] == 0x3d);
  // Work after a host function waits for it to return.
  std::vector<int> order;
  struct Step {
    std::vector<int>* order;
    int value;
  } first{&order, 1}, second{&order, 2};
  const auto step = [](void* user) {
    auto* s = static_cast<Step*>(user);
    std::this_thread::sleep_for(std::chrono::milliseconds(s->value == 1 ? 20 : 0));
    s->order->push_back(s->value);
  };
  REQUIRE(hal_stream_enqueue_host_fn(other, step, &first) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(memory, 0x11, 16, other) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(other, step, &second) == HAL_SUCCESS);
  CHECK(hal_stream_synchronize(other) == HAL_SUCCESS);
  CHECK(order == std::vector<int>{1, 2});
  CHECK(hal_stream_destroy(third) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(other) == HAL_SUCCESS);
  CHECK(hal_mem_free(memory) == HAL_SUCCESS);
}

TEST_CASE("an older driver is negotiated down, and one too old is named with both versions") {
  setenv("HAL_FAKE_CUDA_DRIVER_VERSION", "12040", 1);  // CUDA 12.4 under the 13.0 headers
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  uint32_t count = 0;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 2);
  if (count > 0) {
    hal_device_t device = nullptr;
    REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
    hal_device_properties_t p{};
    p.struct_size = sizeof(p);
    REQUIRE(hal_device_get_properties(device, &p) == HAL_SUCCESS);
    CHECK(std::string(p.driver_version) == "CUDA driver 12.4");
  }
  hal_shutdown();
  setenv("HAL_FAKE_CUDA_DRIVER_VERSION", "11080", 1);
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  unsetenv("HAL_FAKE_CUDA_DRIVER_VERSION");
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(report.outcome == HAL_PLUGIN_LOADED);
  const std::string reason = report.reason;
  INFO(reason);
  CHECK(reason.find("the driver supports CUDA 11.8, the plugin was built with CUDA 13.0 headers "
                    "and needs a driver for CUDA 12.0 or later; 0 devices") != std::string::npos);
  hal_shutdown();
}

TEST_CASE(
    "without stream memory operations, a host function's HAL call is refused, not deadlocked") {
  setenv("HAL_FAKE_CUDA_NO_STREAM_MEMOPS", "1", 1);
  Fake fake;
  {
    Session session;
    hal_stream_t other = nullptr;
    REQUIRE(hal_stream_create(session.device(), 0, &other) == HAL_SUCCESS);
    struct Calls {
      hal_device_t device;
      hal_stream_t other;
      hal_result_t created = HAL_SUCCESS;
      hal_result_t synchronized = HAL_SUCCESS;
      bool ran = false;
    } calls{session.device(), other};
    // On the driver's thread: a HAL call on a cuda device would be a CUDA
    // call there, which CUDA forbids; the plugin refuses it before the driver.
    REQUIRE(hal_stream_enqueue_host_fn(
                session.stream(),
                [](void* user) {
                  auto* c = static_cast<Calls*>(user);
                  hal_event_t event = nullptr;
                  c->created = hal_event_create(c->device, 0, &event);
                  c->synchronized = hal_stream_synchronize(c->other);
                  c->ran = true;
                },
                &calls) == HAL_SUCCESS);
    CHECK(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
    CHECK(calls.ran);
    CHECK(calls.created == HAL_ERROR_INVALID_STATE);
    CHECK(calls.synchronized == HAL_ERROR_INVALID_STATE);
    CHECK(fake.live("driver_thread_calls") == 0);  // refused before the driver
    // The same calls from the application's thread work.
    CHECK(hal_stream_synchronize(other) == HAL_SUCCESS);
    CHECK(hal_stream_destroy(other) == HAL_SUCCESS);
  }
  unsetenv("HAL_FAKE_CUDA_NO_STREAM_MEMOPS");
}
