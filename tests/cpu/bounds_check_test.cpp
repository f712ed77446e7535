// Bounds-checked dialect kernels on the cpu plugin (SPEC.md §14.1). CTest runs
// this with HAL_VALIDATION=1, so every dialect module is translated with each
// `global` access checked against its argument's allocation; [unchecked] runs
// with HAL_VALIDATION_BOUNDS=0 and shows what the checks stop.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hal.h"

namespace {

constexpr uint32_t kN = 1000;  // 4000 bytes: the allocator's block is 4096, so the bytes
                               // past the end are mapped and a missed check would go unseen

const char kSource[] = R"(
kernel void write_past(global const float* a, global float* c, int n) {
  int i = global_id(0);
  if (i <= n) c[i] = a[i < n ? i : 0] + 1.0f;  // i == n writes one past c's end
}
kernel void read_past(global const float* a, global float* c, int n) {
  int i = global_id(0);
  if (i < n) c[i] = a[i + 1];  // i == n - 1 reads one past a's end
}
kernel void read_before(global const float* a, global float* c, int n) {
  int i = global_id(0);
  if (i < n) c[i] = a[i - 3];  // i < 3 read before a's start
}
kernel void derived(global const float* a, global float* c, int n) {
  int i = global_id(0);
  global const float* row = a + 10;
  if (i < n) c[i] = row[i];  // from the argument's pointer: index i + 10
}
kernel max_block(64) void staged(global const float* a, global float* c, int n) {
  shared float tile[64];
  int t = local_id(0), i = global_id(0);
  tile[t] = i < n ? a[i] : 0.0f;
  barrier();
  if (i <= n) c[i] = tile[63 - t];  // i == n writes past the end, after a barrier
}
kernel void in_bounds(global const float* a, global float* c, global int* count, int n) {
  int i = global_id(0);
  if (i < n) {
    global float* out = c + i;
    *out = 2.0f * a[i];
    atomic_add(count, 1);
  }
}
)";

struct Fixture {
  Fixture() {
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
    hal_module_desc_t desc{};
    desc.struct_size = sizeof desc;
    desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
    desc.data = kSource;
    desc.size = sizeof kSource - 1;
    REQUIRE(hal_module_load(device, &desc, &module) == HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kN * sizeof(float), 0, &a) == HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kN * sizeof(float), 0, &c) == HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, sizeof(int32_t), 0, &count) == HAL_SUCCESS);
    // The cpu device's memory is the host's: the test reads and writes it directly, the
    // slack past c's 4000 bytes included (inside the allocator's block).
    auto* host_a = static_cast<float*>(a);
    for (uint32_t i = 0; i < kN; ++i) host_a[i] = static_cast<float>(i);
    std::memset(c, 0, kN * sizeof(float));
    std::memset(static_cast<char*>(c) + kN * sizeof(float), 0x5a, 96);  // a sentinel
    std::memset(count, 0, sizeof(int32_t));
  }
  ~Fixture() {
    if (stream) hal_stream_destroy(stream);
    hal_mem_free(a);
    hal_mem_free(c);
    hal_mem_free(count);
    hal_module_unload(module);
    hal_shutdown();
  }
  // Launches |name| over 1024 work-items (64-wide blocks) on a fresh stream, records
  // |before| (when given) ahead of it and |event| (when given) behind it, and returns what
  // synchronising it gives.
  hal_result_t run(const char* name, bool with_count = false, hal_event_t event = nullptr,
                   hal_event_t before = nullptr) {
    hal_kernel_desc_t kd{};
    kd.struct_size = sizeof kd;
    kd.name = name;
    hal_kernel_t kernel = nullptr;
    REQUIRE(hal_kernel_get(module, &kd, &kernel) == HAL_SUCCESS);
    if (stream) hal_stream_destroy(stream);
    stream = nullptr;
    REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
    if (before != nullptr) REQUIRE(hal_event_record(before, stream) == HAL_SUCCESS);
    const int32_t n = kN;
    std::vector<hal_kernel_arg_t> args = {{&a, sizeof a}, {&c, sizeof c}};
    if (with_count) args.push_back({&count, sizeof count});
    args.push_back({&n, sizeof n});
    hal_launch_config_t config{};
    config.struct_size = sizeof config;
    config.grid[0] = 16;
    config.block[0] = 64;
    config.grid[1] = config.grid[2] = config.block[1] = config.block[2] = 1;
    REQUIRE(hal_launch_kernel(kernel, &config, static_cast<uint32_t>(args.size()), args.data(),
                              stream) == HAL_SUCCESS);
    if (event != nullptr) REQUIRE(hal_event_record(event, stream) == HAL_SUCCESS);
    return hal_stream_synchronize(stream);
  }
  bool sentinel_intact() const {
    const auto* past = static_cast<const unsigned char*>(c) + kN * sizeof(float);
    for (int i = 0; i < 96; ++i)
      if (past[i] != 0x5a) return false;
    return true;
  }
  const float* out() const { return static_cast<const float*>(c); }

  hal_device_t device = nullptr;
  hal_module_t module = nullptr;
  hal_stream_t stream = nullptr;
  void *a = nullptr, *c = nullptr, *count = nullptr;
};

}  // namespace

TEST_CASE("a write past the end is reported with the kernel, the argument and the index",
          "[bounds]") {
  Fixture f;
  REQUIRE(f.run("write_past") == HAL_ERROR_OUT_OF_BOUNDS);
  const std::string message = hal_error_last_message();
  CHECK_THAT(message, Catch::Contains("kernel 'write_past' made an out-of-bounds read or write "
                                      "of args[1] at index 1000 (4-byte elements"));
  CHECK_THAT(message, Catch::Contains("holds 4000 bytes"));
  CHECK_THAT(message, Catch::Contains("indices 0..999 from that pointer"));
  CHECK_THAT(message, Catch::Contains("1 bad access(es)"));
  CHECK(f.sentinel_intact());  // the write did not happen
  for (uint32_t i = 0; i < kN; ++i) REQUIRE(f.out()[i] == static_cast<float>(i) + 1.0f);
  // The stream stays failed, like a device after a fault; a new one works.
  CHECK(hal_stream_query(f.stream) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(f.run("in_bounds", true) == HAL_SUCCESS);
}

TEST_CASE("reads past either end and through derived pointers are reported", "[bounds]") {
  Fixture f;
  REQUIRE(f.run("read_past") == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK_THAT(hal_error_last_message(),
             Catch::Contains("out-of-bounds read of args[0] at index 1000 "));
  CHECK(f.out()[kN - 1] == 0.0f);  // the bad read gave 0
  CHECK(f.out()[kN - 2] == static_cast<float>(kN - 1));

  REQUIRE(f.run("read_before") == HAL_ERROR_OUT_OF_BOUNDS);
  const std::string before = hal_error_last_message();
  CHECK_THAT(before, Catch::Contains("read of args[0] at index -"));
  CHECK_THAT(before, Catch::Contains("3 bad access(es)"));

  REQUIRE(f.run("derived") == HAL_ERROR_OUT_OF_BOUNDS);
  const std::string derived = hal_error_last_message();
  // row = a + 10: the first bad index, counted from a, is 1000 or past it.
  CHECK_THAT(derived, Catch::Contains("read of args[0] at index 10"));
  CHECK_THAT(derived, Catch::Contains("10 bad access(es)"));
}

TEST_CASE("kernels with barriers are checked too", "[bounds]") {
  Fixture f;
  REQUIRE(f.run("staged") == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK_THAT(hal_error_last_message(),
             Catch::Contains("kernel 'staged' made an out-of-bounds read or write of args[1] at "
                             "index 1000 "));
  CHECK(f.sentinel_intact());
}

TEST_CASE("an in-bounds kernel runs unchanged", "[bounds]") {
  Fixture f;
  REQUIRE(f.run("in_bounds", true) == HAL_SUCCESS);
  for (uint32_t i = 0; i < kN; ++i) REQUIRE(f.out()[i] == 2.0f * static_cast<float>(i));
  CHECK(*static_cast<const int32_t*>(f.count) == static_cast<int32_t>(kN));
  CHECK(f.sentinel_intact());
}

TEST_CASE("without the checks the same write lands past the end", "[unchecked]") {
  Fixture f;
  REQUIRE(f.run("write_past") == HAL_SUCCESS);
  CHECK_FALSE(f.sentinel_intact());
}

// SPEC 4.4: a stream lost with HAL_ERROR_OUT_OF_BOUNDS is released as one lost with
// HAL_ERROR_DEVICE_LOST: the memory, module and event last used on it and the stream itself
// are released, each call succeeds, and the detail of the bad access stays the thread's
// detail (SPEC 4.2).
TEST_CASE("everything used on a stream the bounds check failed is released", "[bounds]") {
  Fixture f;
  hal_event_t event = nullptr;
  REQUIRE(hal_event_create(f.device, 0, &event) == HAL_SUCCESS);
  REQUIRE(f.run("write_past", false, event) == HAL_ERROR_OUT_OF_BOUNDS);
  const std::string bad_access = hal_error_last_message();
  REQUIRE_THAT(bad_access, Catch::Contains("kernel 'write_past' made an out-of-bounds"));
  const auto detail_kept = [&] { CHECK(hal_error_last_message() == bad_access); };

  void* const freed = f.c;
  const hal_module_t unloaded = f.module;
  const hal_stream_t destroyed = f.stream;
  f.c = nullptr;
  f.module = nullptr;
  f.stream = nullptr;
  CHECK(hal_mem_free(freed) == HAL_SUCCESS);
  detail_kept();
  CHECK(hal_module_unload(unloaded) == HAL_SUCCESS);
  detail_kept();
  CHECK(hal_event_destroy(event) == HAL_SUCCESS);
  detail_kept();
  CHECK(hal_stream_destroy(destroyed) == HAL_SUCCESS);
  detail_kept();
  // Really released: each is gone for good.
  hal_memory_info_t info{};
  info.struct_size = sizeof info;
  CHECK(hal_mem_get_info(freed, &info) == HAL_ERROR_NOT_FOUND);
  CHECK(hal_module_unload(unloaded) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_event_destroy(event) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_stream_destroy(destroyed) == HAL_ERROR_DESTROYED_HANDLE);
}

// SPEC 4.4: the stream is lost with the bounds check's code, and every call that meets the
// loss says so with it: the loader refuses later enqueues itself (its detail, not the
// plugin's), hal_device_synchronize names the stream, the event that captured the failed
// launch reports it, and there is no elapsed time up to that event. A loader that knew a
// loss only by HAL_ERROR_DEVICE_LOST passed the enqueue to the plugin, left the stream
// unnamed and timed the failed work.
TEST_CASE("a stream the bounds check failed is lost with HAL_ERROR_OUT_OF_BOUNDS", "[bounds]") {
  Fixture f;
  hal_event_t start = nullptr;
  hal_event_t end = nullptr;
  REQUIRE(hal_event_create(f.device, HAL_EVENT_FLAG_TIMING, &start) == HAL_SUCCESS);
  REQUIRE(hal_event_create(f.device, HAL_EVENT_FLAG_TIMING, &end) == HAL_SUCCESS);
  REQUIRE(f.run("write_past", false, end, start) == HAL_ERROR_OUT_OF_BOUNDS);
  char stream_lost[48];
  std::snprintf(stream_lost, sizeof stream_lost,
                "stream %p is lost: ", static_cast<void*>(f.stream));
  hal_error_detail_t detail{};
  detail.struct_size = sizeof detail;

  CHECK(hal_memset_async(f.c, 0, 4, f.stream) == HAL_ERROR_OUT_OF_BOUNDS);
  REQUIRE(hal_error_get_detail(&detail) == HAL_SUCCESS);
  CHECK(std::string(detail.plugin) == "loader");
  CHECK_THAT(detail.message, Catch::Contains(stream_lost) &&
                                 Catch::Contains("failed with HAL_ERROR_OUT_OF_BOUNDS"));

  CHECK(hal_device_synchronize(f.device) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK_THAT(hal_error_last_message(),
             Catch::StartsWith(std::string("hal_device_synchronize: ") + stream_lost) &&
                 Catch::Contains("kernel 'write_past' made an out-of-bounds"));

  CHECK(hal_event_query(start) == HAL_SUCCESS);
  CHECK(hal_event_query(end) == HAL_ERROR_OUT_OF_BOUNDS);
  CHECK(hal_event_synchronize(end) == HAL_ERROR_OUT_OF_BOUNDS);
  float ms = -1.0f;
  CHECK(hal_event_elapsed_ms(start, end, &ms) == HAL_ERROR_INVALID_STATE);
  CHECK_THAT(hal_error_last_message(), Catch::Contains("end captured work that failed"));
  CHECK(hal_event_destroy(start) == HAL_SUCCESS);
  CHECK(hal_event_destroy(end) == HAL_SUCCESS);
}
