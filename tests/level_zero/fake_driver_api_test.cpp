// The level_zero plugin through the public API over the real Level Zero
// loader and the stand-in driver (fake_driver/, reached through
// ZE_ENABLE_ALT_DRIVERS): properties from the driver's property structs,
// memory of every kind checked by content, stream order with barriers,
// host functions, events and timestamps, SPIR-V checks and build logs,
// argument marshalling checked against the driver's launch log, ze_result_t
// codes in the error detail, and a teardown that gives every object back.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_driver.h"
#include "gpu_api_test_support.hpp"
#include "hal.h"

namespace {

// ze_result_t values (ze_api.h), written out: the test is independent of the header.
constexpr int64_t kOutOfDeviceMemory = 0x70000003;
constexpr int64_t kModuleBuildFailure = 0x70000004;
constexpr int64_t kInvalidKernelName = 0x78000011;

// Every test runs the level_zero plugin over the loader and the stand-in;
// the loader reads the list at its first zeInit, in the first hal_init.
[[maybe_unused]] const bool kEnvironment = [] {
  setenv("HAL_PLUGINS", "level_zero", 1);
  setenv("ZE_ENABLE_ALT_DRIVERS", HAL_TEST_FAKE_ZE, 1);
  return true;
}();

// The driver library the loader opened (the same file: the same handle).
struct Fake {
  Fake() {
    handle = dlopen(HAL_TEST_FAKE_ZE, RTLD_NOW);
    REQUIRE(handle != nullptr);
    launch_count = reinterpret_cast<fake_ze_launch_count_fn>(dlsym(handle, "fake_ze_launch_count"));
    launch_get = reinterpret_cast<fake_ze_launch_get_fn>(dlsym(handle, "fake_ze_launch_get"));
    live = reinterpret_cast<fake_ze_live_fn>(dlsym(handle, "fake_ze_live"));
    set_paused = reinterpret_cast<fake_ze_set_paused_fn>(dlsym(handle, "fake_ze_set_paused"));
    REQUIRE(launch_count != nullptr);
    REQUIRE(launch_get != nullptr);
    REQUIRE(live != nullptr);
    REQUIRE(set_paused != nullptr);
  }
  ~Fake() {
    set_paused(0);
    dlclose(handle);
  }
  void* handle = nullptr;
  fake_ze_launch_count_fn launch_count = nullptr;
  fake_ze_launch_get_fn launch_get = nullptr;
  fake_ze_live_fn live = nullptr;
  fake_ze_set_paused_fn set_paused = nullptr;
};

using gpu_api_test::get;
using gpu_api_test::last_detail;
using gpu_api_test::Session;

bool message_has(const hal_error_detail_t& detail, const std::string& text) {
  return std::string(detail.message).find(text) != std::string::npos;
}

// SPIR-V written word by word: OpenCL kernels whose functions take |params|
// 32-bit integers each (the stand-in reads entry names and parameter counts).
class SpirvModule {
 public:
  SpirvModule& capability(uint32_t which) {
    body_.insert(body_.begin() + static_cast<long>(capabilities_++), {(2u << 16) | 17, which});
    return *this;
  }
  SpirvModule& kernel(const std::string& name, uint32_t params) {
    kernels_.push_back({name, params});
    return *this;
  }
  std::vector<uint32_t> words() const {
    // ids: 1 void, 2 i32, then per kernel a function type, a function, its
    // parameters and a label.
    std::vector<uint32_t> out = {0x07230203u, 0x00010200u, 0, 0, 0};
    out.insert(out.end(), body_.begin(), body_.end());
    out.insert(out.end(),
               {(2u << 16) | 17, 6, (3u << 16) | 14, 2, 2});  // Kernel; Physical64 OpenCL
    uint32_t next = 3;
    std::vector<uint32_t> functions, entries;
    for (const auto& [name, params] : kernels_) {
      const uint32_t type = next++, function = next++;
      std::vector<uint32_t> literal((name.size() + 4) / 4, 0);
      std::memcpy(literal.data(), name.data(), name.size());
      entries.push_back(static_cast<uint32_t>(3 + literal.size()) << 16 | 15);
      entries.push_back(6);  // Kernel
      entries.push_back(function);
      entries.insert(entries.end(), literal.begin(), literal.end());
      functions.push_back((3 + params) << 16 | 33);  // OpTypeFunction void(i32...)
      functions.push_back(type);
      functions.push_back(1);
      for (uint32_t i = 0; i < params; ++i) functions.push_back(2);
      functions.insert(functions.end(), {(5u << 16) | 54, 1, function, 0, type});
      for (uint32_t i = 0; i < params; ++i)
        functions.insert(functions.end(), {(3u << 16) | 55, 2, next++});
      functions.insert(functions.end(),
                       {(2u << 16) | 248, next++, (1u << 16) | 253, (1u << 16) | 56});
    }
    out.insert(out.end(), entries.begin(), entries.end());
    out.insert(out.end(), {(2u << 16) | 19, 1, (4u << 16) | 21, 2, 32, 0});  // void, i32
    out.insert(out.end(), functions.begin(), functions.end());
    out[3] = next;  // the id bound
    return out;
  }

 private:
  size_t capabilities_ = 0;
  std::vector<uint32_t> body_;
  std::vector<std::pair<std::string, uint32_t>> kernels_;
};

hal_result_t load(hal_device_t device, const void* data, size_t size, hal_module_t* out) {
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_SPIRV;
  desc.data = data;
  desc.size = size;
  return hal_module_load(device, &desc, out);
}

hal_result_t load(hal_device_t device, const std::vector<uint32_t>& words, hal_module_t* out) {
  return load(device, words.data(), words.size() * 4, out);
}

hal_launch_config_t config(uint32_t grid_x, uint32_t block_x, uint32_t shared = 0) {
  hal_launch_config_t launch{};
  launch.struct_size = sizeof(launch);
  launch.grid[0] = grid_x, launch.grid[1] = 3, launch.grid[2] = 1;
  launch.block[0] = block_x, launch.block[1] = 2, launch.block[2] = 1;
  launch.shared_memory_bytes = shared;
  return launch;
}

}  // namespace

TEST_CASE("each GPU is a device with the driver's properties") {
  Session session;
  for (uint32_t index = 0; index < 2; ++index) {
    hal_device_t device = nullptr;
    REQUIRE(hal_device_get(index, &device) == HAL_SUCCESS);
    hal_device_properties_t p{};
    p.struct_size = sizeof(p);
    REQUIRE(hal_device_get_properties(device, &p) == HAL_SUCCESS);
    CHECK(std::string(p.name) == "HAL stand-in Level Zero GPU " + std::to_string(index));
    CHECK(std::string(p.plugin) == "level_zero");
    CHECK(std::string(p.vendor) == "Intel");
    CHECK(std::string(p.driver_version) == "Level Zero driver 23456 (API 1.4)");
    CHECK(p.type == HAL_DEVICE_TYPE_GPU);
    CHECK(p.plugin_device_index == index);
    CHECK(p.compute_units == 2 * 4 * 8);  // slices x subslices x EUs
    CHECK(p.total_memory_bytes == (uint64_t{16} << 30));
    CHECK(p.max_allocation_bytes == FAKE_ZE_MAX_ALLOC_BYTES);
    CHECK(p.min_alignment_bytes == 64);
    CHECK(p.max_threads_per_block == 1024);
    CHECK(p.max_block_dims[2] == 64);
    CHECK(p.max_grid_dims[0] == 0x7fffffffu);
    CHECK(p.max_grid_dims[1] == 65535);
    CHECK(p.max_shared_memory_bytes == 65536);
    CHECK(p.subgroup_size == 32);
    CHECK(p.uuid[0] == 0xf0);
    CHECK(p.uuid[15] == index);
    // 2 (FMA) x 64 EUs x SIMD 8 x 1.6 GHz; 2 x 1 GHz x 256 bits / 8.
    CHECK(p.peak_fp32_flops == Approx(2.0 * 64 * 8 * 1.6e9));
    CHECK(p.peak_memory_bandwidth == Approx(2.0 * 1e9 * 256 / 8));
    CHECK(p.module_formats == (1u << HAL_MODULE_FORMAT_SPIRV));
    const uint32_t caps = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                          HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_HOST_MEMORY |
                          HAL_DEVICE_CAP_SHARED_MEMORY | HAL_DEVICE_CAP_STREAM_QUERY;
    CHECK((p.capabilities & caps) == caps);
    CHECK((p.capabilities & HAL_DEVICE_CAP_UNIFIED_ADDRESSING) == 0);
  }
}

TEST_CASE("memory of every kind: copies and fills checked by content") {
  Fake fake;
  gpu_api_test::check_memory_kinds([&] { return fake.live("allocations"); }, 20261203, 64, 8192);
}

TEST_CASE("a failed zeMemAlloc* is HAL_ERROR_OUT_OF_MEMORY with the ze_result_t") {
  Session session;
  void* ptr = nullptr;
  CHECK(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, FAKE_ZE_OOM_BYTES, 0, &ptr) ==
        HAL_ERROR_OUT_OF_MEMORY);
  const hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == kOutOfDeviceMemory);
  CHECK(message_has(detail, "zeMemAllocDevice"));
  CHECK(message_has(detail, "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (0x70000003)"));
  CHECK(ptr == nullptr);
  // Past the device's maxMemAllocSize: refused, never a crash.
  CHECK(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, FAKE_ZE_MAX_ALLOC_BYTES + 1, 0, &ptr) !=
        HAL_SUCCESS);
  CHECK(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, SIZE_MAX, 0, &ptr) != HAL_SUCCESS);
  CHECK(ptr == nullptr);
}

TEST_CASE("a stream runs its commands in order, each after a barrier") {
  Session session;
  Fake fake;
  const size_t size = 1 << 16;
  void* scratch = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, size, 0, &scratch) == HAL_SUCCESS);
  std::vector<uint8_t> first(size, 0), second(size, 0);
  const long barriers = fake.live("barriers");
  fake.set_paused(1);
  REQUIRE(hal_memset_async(scratch, 1, size, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(first.data(), scratch, size, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(scratch, 2, size, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(second.data(), scratch, size, session.stream()) == HAL_SUCCESS);
  CHECK(fake.live("barriers") == barriers + 4);
  CHECK(hal_stream_query(session.stream()) == HAL_NOT_READY);
  CHECK(hal_stream_query(session.stream()) == HAL_NOT_READY);  // no new work: the same marker
  // More queries over new work than the stream has markers: with all of
  // them pending a query answers NOT_READY at once (it never blocks).
  for (int i = 0; i < 24; ++i) {
    REQUIRE(hal_memset_async(scratch, 3, 64, session.stream()) == HAL_SUCCESS);
    CHECK(hal_stream_query(session.stream()) == HAL_NOT_READY);
  }
  REQUIRE(hal_memset_async(scratch, 2, size, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(second.data(), scratch, size, session.stream()) == HAL_SUCCESS);
  fake.set_paused(0);
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  CHECK(hal_stream_query(session.stream()) == HAL_SUCCESS);
  CHECK(first == std::vector<uint8_t>(size, 1));
  CHECK(second == std::vector<uint8_t>(size, 2));
  // More queries than the stream has markers, each over new work.
  for (int i = 0; i < 40; ++i) {
    REQUIRE(hal_memset_async(scratch, static_cast<uint8_t>(i), 64, session.stream()) ==
            HAL_SUCCESS);
    const hal_result_t status = hal_stream_query(session.stream());
    CHECK((status == HAL_SUCCESS || status == HAL_NOT_READY));
  }
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  CHECK(hal_mem_free(scratch) == HAL_SUCCESS);
}

namespace {

struct HostProbe {
  uint8_t* watched = nullptr;  // read by the host function
  uint8_t seen = 0;
  uint8_t* written = nullptr;  // written by the host function
  std::atomic<int> calls{0};
};

void host_probe(void* user_data) {
  auto* probe = static_cast<HostProbe*>(user_data);
  probe->seen = probe->watched[0];
  probe->written[0] = 0x77;
  probe->calls.fetch_add(1);
}

}  // namespace

TEST_CASE("host functions run after the work before them, and the work after waits for them") {
  Session session;
  Fake fake;
  void* host = nullptr;
  void* dev = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_HOST, 64, 0, &host) == HAL_SUCCESS);
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 64, 0, &dev) == HAL_SUCCESS);
  std::memset(host, 0, 64);
  HostProbe probe;
  probe.watched = static_cast<uint8_t*>(host);
  probe.written = static_cast<uint8_t*>(host) + 1;
  uint8_t copied[2] = {0, 0};
  fake.set_paused(1);
  REQUIRE(hal_memset_async(host, 0x42, 1, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(session.stream(), host_probe, &probe) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(dev, host, 2, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(copied, dev, 2, session.stream()) == HAL_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(probe.calls.load() == 0);  // the fill before it has not run
  fake.set_paused(0);
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  CHECK(probe.calls.load() == 1);
  CHECK(probe.seen == 0x42);
  CHECK(copied[0] == 0x42);
  CHECK(copied[1] == 0x77);  // the copy after it saw what it wrote
  CHECK(hal_mem_free(host) == HAL_SUCCESS);
  CHECK(hal_mem_free(dev) == HAL_SUCCESS);
}

namespace {

void sleep_20ms(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

TEST_CASE("events order streams and time the work between them") {
  Session session;
  Fake fake;
  hal_stream_t other = nullptr;
  REQUIRE(hal_stream_create(session.device(), 0, &other) == HAL_SUCCESS);
  hal_event_t start = nullptr, end = nullptr, plain = nullptr;
  REQUIRE(hal_event_create(session.device(), HAL_EVENT_FLAG_TIMING, &start) == HAL_SUCCESS);
  REQUIRE(hal_event_create(session.device(), HAL_EVENT_FLAG_TIMING, &end) == HAL_SUCCESS);
  REQUIRE(hal_event_create(session.device(), 0, &plain) == HAL_SUCCESS);
  CHECK(hal_event_query(plain) == HAL_SUCCESS);  // never recorded: complete
  CHECK(hal_event_synchronize(plain) == HAL_SUCCESS);
  float ms = -1;
  CHECK(hal_event_elapsed_ms(start, end, &ms) == HAL_ERROR_INVALID_STATE);

  const size_t size = 4096;
  void* buffer = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, size, 0, &buffer) == HAL_SUCCESS);
  std::vector<uint8_t> out(size, 0);
  fake.set_paused(1);
  REQUIRE(hal_memset_async(buffer, 9, size, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_event_record(plain, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_wait_event(other, plain) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(out.data(), buffer, size, other) == HAL_SUCCESS);
  CHECK(hal_event_query(plain) == HAL_NOT_READY);
  fake.set_paused(0);
  REQUIRE(hal_stream_synchronize(other) == HAL_SUCCESS);
  CHECK(out == std::vector<uint8_t>(size, 9));
  CHECK(hal_event_query(plain) == HAL_SUCCESS);

  REQUIRE(hal_event_record(start, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(session.stream(), sleep_20ms, nullptr) == HAL_SUCCESS);
  REQUIRE(hal_event_record(end, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_event_synchronize(end) == HAL_SUCCESS);
  REQUIRE(hal_event_elapsed_ms(start, end, &ms) == HAL_SUCCESS);
  CHECK(ms >= 19.0f);
  CHECK(ms < 10000.0f);
  REQUIRE(hal_event_elapsed_ms(end, start, &ms) == HAL_SUCCESS);
  CHECK(ms <= -19.0f);
  // Re-recording moves the point; the earlier L0 events are recycled.
  for (int i = 0; i < 10; ++i) {
    REQUIRE(hal_event_record(start, session.stream()) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  }
  const long pools = fake.live("event_pools");
  REQUIRE(hal_event_record(start, session.stream()) == HAL_SUCCESS);
  CHECK(fake.live("event_pools") == pools);  // a spare, not a new pool
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);

  CHECK(hal_event_destroy(start) == HAL_SUCCESS);
  CHECK(hal_event_destroy(end) == HAL_SUCCESS);
  CHECK(hal_event_destroy(plain) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(other) == HAL_SUCCESS);
  CHECK(hal_mem_free(buffer) == HAL_SUCCESS);
}

TEST_CASE("events and host functions share a few reused event pools, not one pool each") {
  Session session;
  Fake fake;
  const long pools = fake.live("event_pools");
  // 150 events alive at once, each recorded, and 40 host functions: events
  // for all of them, in pools of 64 (the stream's markers included).
  auto round = [&] {
    std::vector<hal_event_t> events(150, nullptr);
    for (hal_event_t& event : events) {
      REQUIRE(hal_event_create(session.device(), 0, &event) == HAL_SUCCESS);
      REQUIRE(hal_event_record(event, session.stream()) == HAL_SUCCESS);
    }
    std::atomic<int> ran{0};
    for (int i = 0; i < 40; ++i) {
      REQUIRE(hal_stream_enqueue_host_fn(
                  session.stream(), [](void* user) { ++*static_cast<std::atomic<int>*>(user); },
                  &ran) == HAL_SUCCESS);
    }
    REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
    CHECK(ran.load() == 40);
    for (hal_event_t event : events) {
      CHECK(hal_event_query(event) == HAL_SUCCESS);
      CHECK(hal_event_destroy(event) == HAL_SUCCESS);
    }
  };
  round();
  const long grown = fake.live("event_pools") - pools;
  CHECK(grown >= 3);  // 150 + 2 x 40 events need at least 3 pools of 64 (150 alone: 3)
  CHECK(grown <= 6);  // and not one per event
  round();            // the same events again, reset: no new pool
  CHECK(fake.live("event_pools") - pools == grown);
}

TEST_CASE("an event destroyed while a wait on it is pending: the wait still completes") {
  Session session;
  Fake fake;
  hal_stream_t other = nullptr;
  REQUIRE(hal_stream_create(session.device(), 0, &other) == HAL_SUCCESS);
  hal_event_t event = nullptr;
  REQUIRE(hal_event_create(session.device(), 0, &event) == HAL_SUCCESS);
  uint8_t value = 0;
  void* buffer = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 1, 0, &buffer) == HAL_SUCCESS);
  fake.set_paused(1);
  REQUIRE(hal_memset_async(buffer, 5, 1, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_event_record(event, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_wait_event(other, event) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(&value, buffer, 1, other) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(event) == HAL_SUCCESS);
  const long resets = fake.live("event_resets");
  fake.set_paused(0);
  REQUIRE(hal_stream_synchronize(other) == HAL_SUCCESS);
  CHECK(value == 5);
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  // Given back to the device's event pools (reset for reuse) once both
  // streams were seen past it, not before.
  CHECK(fake.live("event_resets") > resets);
  CHECK(hal_stream_destroy(other) == HAL_SUCCESS);
  CHECK(hal_mem_free(buffer) == HAL_SUCCESS);
}

TEST_CASE("bad SPIR-V images are refused with the reason, before the driver sees them") {
  Session session;
  Fake fake;
  const long modules = fake.live("modules");
  const std::vector<uint32_t> good = SpirvModule().kernel("k", 1).words();
  hal_module_t module = nullptr;
  CHECK(load(session.device(), good.data(), 18, &module) == HAL_ERROR_INVALID_MODULE);
  CHECK(message_has(last_detail(), "18 bytes is not"));
  CHECK(load(session.device(), good.data(), 16, &module) == HAL_ERROR_INVALID_MODULE);
  CHECK(message_has(last_detail(), "shorter than its 20-byte header"));
  std::vector<uint32_t> bad = good;
  bad[0] = 0xdeadbeef;
  CHECK(load(session.device(), bad, &module) == HAL_ERROR_INVALID_MODULE);
  CHECK(message_has(last_detail(), "the magic number is 0xdeadbeef"));
  bad = good;
  bad.insert(bad.end(), {(4u << 16) | 21, 9});  // an OpTypeInt of 4 words cut after 2
  CHECK(load(session.device(), bad, &module) == HAL_ERROR_INVALID_MODULE);
  CHECK(message_has(last_detail(), "ends past the end of the"));
  const std::string text = "__kernel void k() {}";  // OpenCL C is not SPIR-V
  CHECK(load(session.device(), text.data(), text.size() - text.size() % 4, &module) ==
        HAL_ERROR_INVALID_MODULE);
  CHECK(module == nullptr);
  CHECK(fake.live("modules") == modules);
}

TEST_CASE("a build failure carries the driver's build log and ze_result_t") {
  Session session;
  Fake fake;
  const long logs = fake.live("build_logs");
  hal_module_t module = nullptr;
  const std::vector<uint32_t> shader = SpirvModule().capability(1).kernel("k", 0).words();
  CHECK(load(session.device(), shader, &module) == HAL_ERROR_INVALID_MODULE);
  const hal_error_detail_t detail = last_detail();
  CHECK(detail.native_code == kModuleBuildFailure);
  CHECK(message_has(detail, "zeModuleCreate: ZE_RESULT_ERROR_MODULE_BUILD_FAILURE (0x70000004)"));
  CHECK(message_has(detail, "build log: fake driver: the module declares the Shader capability"));
  CHECK(fake.live("build_logs") == logs);  // destroyed after reading
  CHECK(fake.live("modules") == 0);
}

TEST_CASE("kernels: declared signatures checked, arguments marshalled as set at the append") {
  Session session;
  Fake fake;
  const std::vector<uint32_t> words =
      SpirvModule().kernel("scale", 3).kernel("tiled", 2).kernel("none", 0).words();
  hal_module_t module = nullptr;
  REQUIRE(load(session.device(), words, &module) == HAL_SUCCESS);
  hal_kernel_t kernel = nullptr;
  const std::vector<hal_arg_type_t> three = {HAL_ARG_POINTER, HAL_ARG_U32, HAL_ARG_F32};
  CHECK(get(module, "scale", &kernel, nullptr) == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(message_has(last_detail(), "declare arg_types"));
  const std::vector<hal_arg_type_t> five(5, HAL_ARG_U64);
  CHECK(get(module, "scale", &kernel, &five) == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(message_has(last_detail(), "'scale' takes 3 parameters"));
  CHECK(get(module, "absent", &kernel, &three) == HAL_ERROR_NOT_FOUND);
  CHECK(last_detail().native_code == kInvalidKernelName);
  CHECK(message_has(last_detail(), "ZE_RESULT_ERROR_INVALID_KERNEL_NAME"));
  CHECK(fake.live("kernels") == 0);  // the refused ones were destroyed
  REQUIRE(get(module, "scale", &kernel, &three) == HAL_SUCCESS);
  hal_kernel_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_kernel_get_info(kernel, &info) == HAL_SUCCESS);
  CHECK(info.arg_count == 3);
  CHECK(info.max_threads_per_block == 1024);

  void* buffer = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 256, 0, &buffer) == HAL_SUCCESS);
  uint32_t n = 0xabcd0123u;
  float factor = 2.5f;
  const hal_kernel_arg_t args[3] = {{&buffer, sizeof(buffer)}, {&n, 4}, {&factor, 4}};
  const hal_launch_config_t launch = config(7, 32);
  const size_t before = fake.launch_count();
  REQUIRE(hal_launch_kernel(kernel, &launch, 3, args, session.stream()) == HAL_SUCCESS);
  n = 0, factor = 0;  // copied at the launch: the driver saw the old values
  REQUIRE(fake.launch_count() == before + 1);
  fake_ze_launch_t seen{};
  REQUIRE(fake.launch_get(before, &seen) == 1);
  CHECK(std::string(seen.name) == "scale");
  CHECK(seen.group_count[0] == 7);
  CHECK(seen.group_count[1] == 3);
  CHECK(seen.group_count[2] == 1);
  CHECK(seen.group_size[0] == 32);
  CHECK(seen.group_size[1] == 2);
  CHECK(seen.arg_count == 3);
  CHECK(seen.arg_sizes[0] == 8);
  CHECK(seen.arg_sizes[1] == 4);
  CHECK(seen.arg_sizes[2] == 4);
  CHECK(seen.local_args == 0);
  void* pointer = nullptr;
  uint32_t n_seen = 0;
  float factor_seen = 0;
  std::memcpy(&pointer, seen.args, 8);
  std::memcpy(&n_seen, seen.args + 8, 4);
  std::memcpy(&factor_seen, seen.args + 12, 4);
  CHECK(pointer == buffer);
  CHECK(n_seen == 0xabcd0123u);
  CHECK(factor_seen == 2.5f);

  // One parameter more than declared: the trailing __local, sized per launch.
  const std::vector<hal_arg_type_t> one = {HAL_ARG_POINTER};
  hal_kernel_t tiled = nullptr;
  REQUIRE(get(module, "tiled", &tiled, &one) == HAL_SUCCESS);
  const hal_launch_config_t shared = config(2, 64, 4096);
  const hal_result_t launched = hal_launch_kernel(tiled, &shared, 1, args, session.stream());
  INFO(hal_error_last_message());
  REQUIRE(launched == HAL_SUCCESS);
  REQUIRE(fake.launch_get(before + 1, &seen) == 1);
  CHECK(std::string(seen.name) == "tiled");
  CHECK(seen.local_args == 2u);
  CHECK(seen.arg_sizes[1] == 4096);
  // No shared memory asked: the __local still gets a size (L0 refuses 0).
  const hal_launch_config_t unshared = config(2, 64, 0);
  REQUIRE(hal_launch_kernel(tiled, &unshared, 1, args, session.stream()) == HAL_SUCCESS);
  REQUIRE(fake.launch_get(before + 2, &seen) == 1);
  CHECK(seen.arg_sizes[1] == 1);

  hal_kernel_t none = nullptr;
  const std::vector<hal_arg_type_t> empty;
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = "none";
  desc.arg_types = one.data();  // a declared, empty signature
  desc.arg_count = 0;
  REQUIRE(hal_kernel_get(module, &desc, &none) == HAL_SUCCESS);
  REQUIRE(hal_launch_kernel(none, &launch, 0, nullptr, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  CHECK(fake.live("kernels") == 3);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);
  CHECK(fake.live("kernels") == 0);
  CHECK(fake.live("modules") == 0);
  CHECK(hal_mem_free(buffer) == HAL_SUCCESS);
}

TEST_CASE("shutdown gives every driver object back, even those the application left") {
  Fake fake;
  {
    Session session;
    void* ptr = nullptr;
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_SHARED, 1024, 0, &ptr) == HAL_SUCCESS);
    hal_event_t event = nullptr;
    REQUIRE(hal_event_create(session.device(), HAL_EVENT_FLAG_TIMING, &event) == HAL_SUCCESS);
    REQUIRE(hal_event_record(event, session.stream()) == HAL_SUCCESS);
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device(), 0, &stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_enqueue_host_fn(stream, sleep_20ms, nullptr) == HAL_SUCCESS);
    hal_module_t module = nullptr;
    REQUIRE(load(session.device(), SpirvModule().kernel("k", 1).words(), &module) == HAL_SUCCESS);
    hal_kernel_t kernel = nullptr;
    const std::vector<hal_arg_type_t> one = {HAL_ARG_U32};
    REQUIRE(get(module, "k", &kernel, &one) == HAL_SUCCESS);
    CHECK(fake.live("contexts") == 1);
    CHECK(fake.live("command_lists") == 2);
    CHECK(fake.live("modules") == 1);
  }
  CHECK(fake.live("allocations") == 0);
  CHECK(fake.live("command_lists") == 0);
  CHECK(fake.live("event_pools") == 0);
  CHECK(fake.live("events") == 0);
  CHECK(fake.live("kernels") == 0);
  CHECK(fake.live("modules") == 0);
  CHECK(fake.live("build_logs") == 0);
  CHECK(fake.live("contexts") == 0);
}

TEST_CASE("a library refused as the Level Zero loader is not left loaded in the process") {
  REQUIRE(dlopen(HAL_TEST_NOT_A_RUNTIME, RTLD_NOW | RTLD_NOLOAD) == nullptr);
  setenv("HAL_LEVEL_ZERO_LOADER_PATH", HAL_TEST_NOT_A_RUNTIME, 1);
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  unsetenv("HAL_LEVEL_ZERO_LOADER_PATH");
  uint32_t count = 99;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report);
  REQUIRE(hal_plugin_report_get(0, &report) == HAL_SUCCESS);
  CHECK(std::string(report.reason).find("not a Level Zero 1.4+ loader") != std::string::npos);
  void* still_loaded = dlopen(HAL_TEST_NOT_A_RUNTIME, RTLD_NOW | RTLD_NOLOAD);
  CHECK(still_loaded == nullptr);
  if (still_loaded != nullptr) dlclose(still_loaded);
  hal_shutdown();
}
