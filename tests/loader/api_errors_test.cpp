// Error paths of the public API: not initialised, NULL and foreign handles,
// wrong handle kinds, use after destroy and double destroy, result names and
// the error detail.
#include "test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace loader_test;

TEST_CASE("every call before hal_init returns HAL_ERROR_NOT_INITIALIZED", "[init]") {
  uint32_t count = 0;
  hal_device_t device = nullptr;
  void* ptr = nullptr;
  CHECK(hal_device_count(&count) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_device_get(0, &device) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_plugin_report_count(&count) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_mem_alloc(nullptr, HAL_MEMORY_DEVICE, 64, 0, &ptr) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_mem_free(nullptr) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_stream_query(nullptr) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_event_query(nullptr) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_module_unload(nullptr) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_launch_kernel(nullptr, nullptr, 0, nullptr, nullptr) == HAL_ERROR_NOT_INITIALIZED);
  const Detail detail = last_detail();
  CHECK(detail.result == HAL_ERROR_NOT_INITIALIZED);
  CHECK(detail.function == "hal_launch_kernel");
  CHECK(detail.plugin == "loader");
  CHECK_THAT(detail.message, Catch::StartsWith("hal_launch_kernel: HAL is not initialised"));
  // These work without hal_init.
  CHECK(HAL_VERSION_MAJOR(hal_get_version()) == 1);
  CHECK(std::string(hal_result_string(HAL_SUCCESS)) == "HAL_SUCCESS");
}

TEST_CASE("hal_result_string names every code", "[result]") {
  const std::pair<hal_result_t, const char*> names[] = {
      {HAL_SUCCESS, "HAL_SUCCESS"},
      {HAL_NOT_READY, "HAL_NOT_READY"},
      {HAL_ERROR_INVALID_ARGUMENT, "HAL_ERROR_INVALID_ARGUMENT"},
      {HAL_ERROR_NULL_POINTER, "HAL_ERROR_NULL_POINTER"},
      {HAL_ERROR_INVALID_HANDLE, "HAL_ERROR_INVALID_HANDLE"},
      {HAL_ERROR_DESTROYED_HANDLE, "HAL_ERROR_DESTROYED_HANDLE"},
      {HAL_ERROR_INVALID_SIZE, "HAL_ERROR_INVALID_SIZE"},
      {HAL_ERROR_OUT_OF_BOUNDS, "HAL_ERROR_OUT_OF_BOUNDS"},
      {HAL_ERROR_OUT_OF_MEMORY, "HAL_ERROR_OUT_OF_MEMORY"},
      {HAL_ERROR_UNSUPPORTED, "HAL_ERROR_UNSUPPORTED"},
      {HAL_ERROR_NOT_INITIALIZED, "HAL_ERROR_NOT_INITIALIZED"},
      {HAL_ERROR_PLUGIN_LOAD, "HAL_ERROR_PLUGIN_LOAD"},
      {HAL_ERROR_ABI_MISMATCH, "HAL_ERROR_ABI_MISMATCH"},
      {HAL_ERROR_INVALID_MODULE, "HAL_ERROR_INVALID_MODULE"},
      {HAL_ERROR_NOT_FOUND, "HAL_ERROR_NOT_FOUND"},
      {HAL_ERROR_INVALID_LAUNCH, "HAL_ERROR_INVALID_LAUNCH"},
      {HAL_ERROR_ARGUMENT_MISMATCH, "HAL_ERROR_ARGUMENT_MISMATCH"},
      {HAL_ERROR_DEVICE_MISMATCH, "HAL_ERROR_DEVICE_MISMATCH"},
      {HAL_ERROR_INVALID_STATE, "HAL_ERROR_INVALID_STATE"},
      {HAL_ERROR_TIMEOUT, "HAL_ERROR_TIMEOUT"},
      {HAL_ERROR_DEVICE_LOST, "HAL_ERROR_DEVICE_LOST"},
      {HAL_ERROR_INTERNAL, "HAL_ERROR_INTERNAL"},
      {HAL_ERROR_REMOTE, "HAL_ERROR_REMOTE"},
  };
  std::set<std::string> seen;
  for (const auto& [code, name] : names) {
    CHECK(std::string(hal_result_string(code)) == name);
    seen.insert(hal_result_string(code));
  }
  CHECK(seen.size() == std::size(names));
  CHECK(std::string(hal_result_string(static_cast<hal_result_t>(23))) == "HAL_RESULT_UNKNOWN");
  CHECK(std::string(hal_result_string(static_cast<hal_result_t>(-1))) == "HAL_RESULT_UNKNOWN");
}

TEST_CASE("hal_error_get_detail validates its argument and is per thread", "[result]") {
  CHECK(hal_error_get_detail(nullptr) == HAL_ERROR_NULL_POINTER);
  hal_error_detail_t small{};
  small.struct_size = sizeof(small) - 1;
  CHECK(hal_error_get_detail(&small) == HAL_ERROR_INVALID_ARGUMENT);
  // A fresh thread has no failure yet.
  hal_result_t fresh = HAL_SUCCESS;
  std::string fresh_message = "unset";
  std::thread([&] {
    hal_error_detail_t detail{};
    detail.struct_size = sizeof(detail);
    fresh = hal_error_get_detail(&detail);
    fresh_message = hal_error_last_message();
  }).join();
  CHECK(fresh == HAL_ERROR_NOT_FOUND);
  CHECK(fresh_message.empty());
}

TEST_CASE("handles are validated: NULL, foreign, wrong kind, destroyed", "[handles]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  hal_event_t event = nullptr;
  REQUIRE(hal_event_create(device, 0, &event) == HAL_SUCCESS);

  SECTION("NULL") {
    CHECK(hal_stream_synchronize(nullptr) == HAL_ERROR_INVALID_HANDLE);
    CHECK(last_detail().message ==
          "hal_stream_synchronize: stream is NULL, expected a stream handle");
    CHECK(hal_event_record(event, nullptr) == HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_device_synchronize(nullptr) == HAL_ERROR_INVALID_HANDLE);
    hal_stream_t out = nullptr;
    CHECK(hal_stream_create(nullptr, 0, &out) == HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_stream_create(device, 0, nullptr) == HAL_ERROR_NULL_POINTER);
    CHECK(hal_stream_create(device, 1, &out) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(out == nullptr);
  }
  SECTION("a handle of another kind") {
    CHECK(hal_event_query(reinterpret_cast<hal_event_t>(stream)) == HAL_ERROR_INVALID_HANDLE);
    CHECK_THAT(last_detail().message, Catch::Contains("is a stream handle, not an event handle"));
    CHECK(hal_stream_query(reinterpret_cast<hal_stream_t>(event)) == HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_stream_synchronize(reinterpret_cast<hal_stream_t>(device)) ==
          HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_device_synchronize(reinterpret_cast<hal_device_t>(stream)) ==
          HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_event_destroy(reinterpret_cast<hal_event_t>(stream)) == HAL_ERROR_INVALID_HANDLE);
    CHECK(hal_stream_destroy(reinterpret_cast<hal_stream_t>(event)) == HAL_ERROR_INVALID_HANDLE);
    // Neither was destroyed by the mistaken calls.
    CHECK(hal_stream_synchronize(stream) == HAL_SUCCESS);
    CHECK(hal_event_query(event) == HAL_SUCCESS);
  }
  SECTION("a pointer that is no handle at all") {
    alignas(16) unsigned char garbage[64];
    std::memset(garbage, 0x5a, sizeof(garbage));
    CHECK(hal_stream_query(reinterpret_cast<hal_stream_t>(garbage)) == HAL_ERROR_INVALID_HANDLE);
    CHECK_THAT(last_detail().message,
               Catch::Contains("is not a HAL handle (expected a stream handle)"));
  }
  SECTION("use after destroy and double destroy") {
    REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
    CHECK(hal_stream_synchronize(stream) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK_THAT(last_detail().message, Catch::Contains("already destroyed"));
    CHECK(hal_stream_destroy(stream) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_event_record(event, stream) == HAL_ERROR_DESTROYED_HANDLE);
    REQUIRE(hal_event_destroy(event) == HAL_SUCCESS);
    CHECK(hal_event_destroy(event) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_event_synchronize(event) == HAL_ERROR_DESTROYED_HANDLE);
    // A destroyed stream passed as an event is the wrong kind, not "destroyed".
    CHECK(hal_event_query(reinterpret_cast<hal_event_t>(stream)) == HAL_ERROR_INVALID_HANDLE);
    stream = nullptr;
    event = nullptr;
  }
  SECTION("destroying NULL is a no-op") {
    CHECK(hal_stream_destroy(nullptr) == HAL_SUCCESS);
    CHECK(hal_event_destroy(nullptr) == HAL_SUCCESS);
    CHECK(hal_module_unload(nullptr) == HAL_SUCCESS);
  }
  SECTION("the quarantine keeps recognising thousands of destroyed handles") {
    std::vector<hal_stream_t> destroyed;
    for (int i = 0; i < 300; ++i) {
      hal_stream_t s = nullptr;
      REQUIRE(hal_stream_create(device, 0, &s) == HAL_SUCCESS);
      REQUIRE(hal_stream_destroy(s) == HAL_SUCCESS);
      destroyed.push_back(s);
    }
    for (hal_stream_t s : destroyed) CHECK(hal_stream_query(s) == HAL_ERROR_DESTROYED_HANDLE);
  }
  CHECK(hal_event_destroy(event) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("device queries check their arguments", "[device]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  CHECK(hal_device_count(nullptr) == HAL_ERROR_NULL_POINTER);
  CHECK(last_detail().message == "hal_device_count: out_count is NULL");
  hal_device_t device = nullptr;
  CHECK(hal_device_get(3, &device) == HAL_ERROR_NOT_FOUND);
  CHECK(last_detail().message == "hal_device_get: index 3 is out of range: there are 3 devices");
  CHECK(hal_device_get(0, nullptr) == HAL_ERROR_NULL_POINTER);
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  // A caller built against the 1.0 header (before max_ranks_per_device was
  // appended) passes the 1.0 size: accepted, and nothing past it is written.
  constexpr size_t kVersion1 = offsetof(hal_device_properties_t, max_ranks_per_device);
  alignas(hal_device_properties_t) unsigned char bytes[sizeof(hal_device_properties_t)];
  std::memset(bytes, 0xa5, sizeof(bytes));
  hal_device_properties_t header{};
  header.struct_size = kVersion1;
  std::memcpy(bytes, &header, sizeof(header.struct_size) + sizeof(header.next));
  auto* old_caller = reinterpret_cast<hal_device_properties_t*>(bytes);
  CHECK(hal_device_get_properties(device, old_caller) == HAL_SUCCESS);
  CHECK(old_caller->struct_size == kVersion1);
  CHECK(old_caller->min_alignment_bytes > 0);
  for (size_t i = kVersion1; i < sizeof(bytes); ++i) {
    INFO("byte " << i);
    CHECK(bytes[i] == 0xa5);
  }
  hal_device_properties_t properties{};
  properties.struct_size = kVersion1 - 8;
  CHECK(hal_device_get_properties(device, &properties) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(last_detail().message.find("smaller than the " + std::to_string(kVersion1) + " bytes") !=
        std::string::npos);
  CHECK(hal_device_get_properties(device, nullptr) == HAL_ERROR_NULL_POINTER);

  const hal_device_properties_t minimal = properties_of(device_of("minimal"));
  CHECK(std::string(minimal.plugin) == "minimal");
  CHECK(std::string(minimal.name) == "HAL minimal test device");
  CHECK(minimal.min_alignment_bytes == 64);
  // The minimal plugin claims more than its table backs; the loader keeps
  // only what is true, and adds what its host-staged collectives give.
  CHECK(minimal.capabilities == (HAL_DEVICE_CAP_UNIFIED_ADDRESSING | HAL_DEVICE_CAP_ALLTOALLV));
  const hal_device_properties_t mock0 = properties_of(device_of("mock"));
  CHECK(mock0.capabilities ==
        (HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_STREAM_QUERY |
         HAL_DEVICE_CAP_UNIFIED_ADDRESSING | HAL_DEVICE_CAP_HOST_MEMORY |
         HAL_DEVICE_CAP_PEER_ACCESS | HAL_DEVICE_CAP_ALLTOALLV));
  const hal_device_properties_t mock1 = properties_of(device_of("mock", 1));
  CHECK(mock1.index == 2);
  CHECK(mock1.plugin_device_index == 1);
  CHECK(std::string(mock1.name) == "HAL mock device 1");
}

TEST_CASE("stream queries and host functions check their arguments", "[stream]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device_of("minimal"), 0, &stream) == HAL_SUCCESS);
  // Without stream_query the answer waits for the work (SPEC.md section 10.3).
  CHECK(hal_stream_query(stream) == HAL_SUCCESS);
  hal_device_t out = nullptr;
  CHECK(hal_stream_get_device(stream, &out) == HAL_SUCCESS);
  CHECK(out == device_of("minimal"));
  CHECK(hal_stream_get_device(stream, nullptr) == HAL_ERROR_NULL_POINTER);
  CHECK(hal_stream_enqueue_host_fn(stream, nullptr, nullptr) == HAL_ERROR_NULL_POINTER);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("events check flags, devices and timing", "[event]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_event_t event = nullptr;
  CHECK(hal_event_create(device, 0x10, &event) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(hal_event_create(device, 0, nullptr) == HAL_ERROR_NULL_POINTER);
  // Loader events keep no timestamps: the device lacks HAL_DEVICE_CAP_EVENT_TIMING.
  hal_event_t timed = nullptr;
  CHECK(hal_event_create(device, HAL_EVENT_FLAG_TIMING, &timed) == HAL_ERROR_UNSUPPORTED);
  CHECK_THAT(last_detail().message, Catch::Contains("lacks"));
  CHECK(timed == nullptr);
  REQUIRE(hal_event_create(device, 0, &timed) == HAL_SUCCESS);
  hal_event_t untimed = nullptr;
  REQUIRE(hal_event_create(device, 0, &untimed) == HAL_SUCCESS);
  float ms = 0;
  CHECK(hal_event_elapsed_ms(timed, untimed, &ms) == HAL_ERROR_INVALID_STATE);
  CHECK_THAT(last_detail().message,
             Catch::Contains("start was created without HAL_EVENT_FLAG_TIMING"));
  CHECK(hal_event_elapsed_ms(timed, timed, nullptr) == HAL_ERROR_NULL_POINTER);

  hal_stream_t other_device_stream = nullptr;
  REQUIRE(hal_stream_create(device_of("mock", 1), 0, &other_device_stream) == HAL_SUCCESS);
  CHECK(hal_event_record(timed, other_device_stream) == HAL_ERROR_DEVICE_MISMATCH);
  hal_event_t other_timed = nullptr;
  REQUIRE(hal_event_create(device_of("mock", 1), 0, &other_timed) == HAL_SUCCESS);
  CHECK(hal_event_elapsed_ms(timed, other_timed, &ms) == HAL_ERROR_DEVICE_MISMATCH);
  CHECK(hal_event_destroy(other_timed) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(other_device_stream) == HAL_SUCCESS);
  CHECK(hal_event_destroy(timed) == HAL_SUCCESS);
  CHECK(hal_event_destroy(untimed) == HAL_SUCCESS);
}

TEST_CASE("hal_shutdown releases what the application leaked", "[init]") {
  {
    Session session(kPluginDir);
    REQUIRE(session.result == HAL_SUCCESS);
    hal_device_t device = device_of("mock");
    hal_stream_t stream = nullptr;
    hal_event_t event = nullptr;
    void* memory = nullptr;
    REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
    REQUIRE(hal_event_create(device, 0, &event) == HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 4096, 0, &memory) == HAL_SUCCESS);
    REQUIRE(hal_memset_async(memory, 1, 4096, stream) == HAL_SUCCESS);
    REQUIRE(hal_event_record(event, stream) == HAL_SUCCESS);
  }
  // Under AddressSanitizer a leak here fails the run; a second session works.
  Session again(kPluginDir);
  CHECK(again.result == HAL_SUCCESS);
}

namespace {

// HAL_TEST_MOCK_LOSE_STREAMS=1 for the scope: every mock stream reports itself lost.
struct MockStreamsLost {
  MockStreamsLost() { setenv("HAL_TEST_MOCK_LOSE_STREAMS", "1", 1); }
  ~MockStreamsLost() { unsetenv("HAL_TEST_MOCK_LOSE_STREAMS"); }
  MockStreamsLost(const MockStreamsLost&) = delete;
  MockStreamsLost& operator=(const MockStreamsLost&) = delete;
};

}  // namespace

// SPEC 4.2: success does not change the detail. A plugin's report through
// host->set_error becomes the detail only when the call fails with it; here
// the plugin reports and the public call still succeeds.
TEST_CASE("a call that succeeds after its plugin reported leaves the error detail as it was",
          "[result]") {
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  // The failure to keep: the plugin's own report, with its native code.
  const hal_module_desc_t broken = opencl_source_desc("broken image");
  hal_module_t module = nullptr;
  REQUIRE(hal_module_load(device, &broken, &module) == HAL_ERROR_INVALID_MODULE);
  const Detail failed = last_detail();
  REQUIRE(failed.message == "hal_module_load: mock: the image says it is broken");
  REQUIRE(failed.native_code == 7);

  SECTION("destroying a lost stream: the drain and the plugin's destroy both report") {
    {
      MockStreamsLost lost;
      CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
    }
    check_detail_unchanged(failed);
    // The report the destroy dropped is not the reason of the plugin's next
    // failure, which comes without one.
    const hal_module_desc_t bogus = opencl_source_desc("bogus");
    CHECK(hal_module_load(device, &bogus, &module) == HAL_ERROR_INTERNAL);
    CHECK(last_detail().message ==
          "hal_module_load: plugin 'mock' returned -7, which is not a hal_result_t failure");
  }
  SECTION("an op query the plugin declines with a report") {
    hal_op_unary_desc_t strided = scale_desc();
    strided.x.strides[0] = 2;  // the mock declines: "mock: only dense tensors"
    hal_op_implementations_info_t info{};
    info.struct_size = sizeof(info);
    REQUIRE(hal_op_query_implementations(device, HAL_OP_UNARY, &strided.header, 0, &info) ==
            HAL_SUCCESS);
    REQUIRE(info.count >= 1);
    CHECK(info.candidates[0].verdict == HAL_OP_VERDICT_DECLINES);
    CHECK_THAT(info.candidates[0].reason, Catch::Contains("mock: only dense tensors"));
    check_detail_unchanged(failed);
    CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  }
  SECTION("on a thread with no failure yet, the call records none") {
    hal_result_t destroyed = HAL_ERROR_INTERNAL;
    hal_result_t read = HAL_SUCCESS;
    std::string message = "unset";
    {
      MockStreamsLost lost;
      std::thread([&] {
        destroyed = hal_stream_destroy(stream);
        hal_error_detail_t detail{};
        detail.struct_size = sizeof(detail);
        read = hal_error_get_detail(&detail);
        message = hal_error_last_message();
      }).join();
    }
    CHECK(destroyed == HAL_SUCCESS);
    CHECK(read == HAL_ERROR_NOT_FOUND);
    CHECK(message.empty());
    check_detail_unchanged(failed);
  }
}

namespace {

// One of the mock plugin's settings (tests/loader/plugins/mock.cpp) for the scope.
struct MockSetting {
  MockSetting(const char* variable, const std::string& value) : name(variable) {
    setenv(variable, value.c_str(), 1);
  }
  ~MockSetting() { unsetenv(name); }
  MockSetting(const MockSetting&) = delete;
  MockSetting& operator=(const MockSetting&) = delete;
  const char* name;
};

void sleep_then_mark(void* done) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  static_cast<std::atomic<bool>*>(done)->store(true);
}

}  // namespace

// SPEC 4.4: a stream is lost with the code of what failed on it, and releasing goes on
// whatever that code is: each release succeeds, really releases, and leaves the detail of
// the loss as it was (SPEC 4.2). A release that dropped only HAL_ERROR_DEVICE_LOST failed
// with the other codes and kept the memory.
TEST_CASE("releases after a stream loss succeed whatever the loss code", "[stream][result]") {
  const hal_result_t code =
      GENERATE(HAL_ERROR_DEVICE_LOST, HAL_ERROR_OUT_OF_BOUNDS, HAL_ERROR_TIMEOUT,
               HAL_ERROR_ARGUMENT_MISMATCH, HAL_ERROR_INTERNAL);
  CAPTURE(hal_result_string(code));
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  hal_stream_t stream = nullptr;
  hal_event_t event = nullptr;
  hal_module_t module = nullptr;
  hal_kernel_t kernel = nullptr;
  float* data = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  REQUIRE(hal_event_create(device, 0, &event) == HAL_SUCCESS);
  const hal_module_desc_t desc = opencl_source_desc("scale");
  REQUIRE(hal_module_load(device, &desc, &module) == HAL_SUCCESS);
  hal_kernel_desc_t kernel_desc{};
  kernel_desc.struct_size = sizeof(kernel_desc);
  kernel_desc.name = "scale";
  REQUIRE(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_SUCCESS);
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 64 * sizeof(float), 0,
                        reinterpret_cast<void**>(&data)) == HAL_SUCCESS);
  // The memory's, the module's and the event's last use is on the stream that is lost.
  REQUIRE(hal_memset_async(data, 0, 64 * sizeof(float), stream) == HAL_SUCCESS);
  uint32_t count = 64;
  float factor = 2.0f;
  hal_kernel_arg_t args[3] = {{&data, sizeof(data)}, {&count, 4}, {&factor, 4}};
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = 64;
  config.block[1] = config.block[2] = 1;
  REQUIRE(hal_launch_kernel(kernel, &config, 3, args, stream) == HAL_SUCCESS);
  REQUIRE(hal_event_record(event, stream) == HAL_SUCCESS);

  const MockSetting lose("HAL_TEST_MOCK_LOSE_STREAMS", "1");
  const MockSetting loss_code("HAL_TEST_MOCK_LOSS_CODE", std::to_string(code));
  REQUIRE(hal_stream_synchronize(stream) == code);
  const Detail loss = last_detail();
  REQUIRE(loss.message ==
          "hal_stream_synchronize: mock: the stream is lost "
          "(HAL_TEST_MOCK_LOSE_STREAMS)");

  CHECK(hal_mem_free(data) == HAL_SUCCESS);
  check_detail_unchanged(loss);
  CHECK(hal_module_unload(module) == HAL_SUCCESS);
  check_detail_unchanged(loss);
  CHECK(hal_event_destroy(event) == HAL_SUCCESS);
  check_detail_unchanged(loss);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  check_detail_unchanged(loss);
  // Really released: each handle (and the pointer) is gone for good.
  hal_memory_info_t info{};
  info.struct_size = sizeof(info);
  CHECK(hal_mem_get_info(data, &info) == HAL_ERROR_NOT_FOUND);
  CHECK(hal_mem_free(data) == HAL_ERROR_NOT_FOUND);
  CHECK(hal_stream_destroy(stream) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_event_destroy(event) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_module_unload(module) == HAL_ERROR_DESTROYED_HANDLE);
}

// SPEC 4.4: a stream is lost with the code of what failed on it, whatever that code is. Once a
// wait reported the loss, the loader refuses every enqueue on the stream itself, with the loss
// code (the mock's copy would succeed), and hal_device_synchronize names the lost stream. A
// loader that recognised only HAL_ERROR_DEVICE_LOST let the copy reach the plugin and kept the
// plugin's detail unnamed.
TEST_CASE("a stream lost with any code refuses later enqueues with that code and is named",
          "[stream][result]") {
  const hal_result_t code = GENERATE(HAL_ERROR_DEVICE_LOST, HAL_ERROR_OUT_OF_BOUNDS,
                                     HAL_ERROR_TIMEOUT, HAL_ERROR_INTERNAL);
  CAPTURE(hal_result_string(code));
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  std::vector<uint8_t> source(64, 1), destination(64, 0);
  REQUIRE(hal_memcpy_async(destination.data(), source.data(), 64, stream) == HAL_SUCCESS);
  char stream_name[32];
  std::snprintf(stream_name, sizeof stream_name, "stream %p is lost: ", static_cast<void*>(stream));
  {
    const MockSetting lose("HAL_TEST_MOCK_LOSE_STREAMS", "1");
    const MockSetting loss_code("HAL_TEST_MOCK_LOSS_CODE", std::to_string(code));
    REQUIRE(hal_stream_synchronize(stream) == code);

    CHECK(hal_memcpy_async(destination.data(), source.data(), 64, stream) == code);
    const Detail refused = last_detail();
    CHECK(refused.plugin == "loader");
    CHECK_THAT(refused.message,
               Catch::StartsWith(std::string("hal_memcpy_async: ") + stream_name +
                                 "earlier work on it failed with " + hal_result_string(code)));
    CHECK(hal_stream_enqueue_host_fn(stream, sleep_then_mark, nullptr) == code);

    CHECK(hal_device_synchronize(device) == code);
    CHECK(last_detail().message == std::string("hal_device_synchronize: ") + stream_name +
                                       "mock: the stream is lost (HAL_TEST_MOCK_LOSE_STREAMS)");
  }
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

// SPEC 4.4: from an enqueue entry only HAL_ERROR_DEVICE_LOST loses the stream; another code
// refuses the call and the stream stays usable (a loader that took every failure for a loss
// would refuse the next copy).
TEST_CASE("an enqueue the plugin refuses loses its stream only with HAL_ERROR_DEVICE_LOST",
          "[stream][result]") {
  const hal_result_t code = GENERATE(HAL_ERROR_DEVICE_LOST, HAL_ERROR_INVALID_ARGUMENT,
                                     HAL_ERROR_OUT_OF_MEMORY, HAL_ERROR_OUT_OF_BOUNDS);
  CAPTURE(hal_result_string(code));
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  std::vector<uint8_t> source(64, 1), destination(64, 0);
  {
    const MockSetting fails("HAL_TEST_MOCK_COPY_FAILS", std::to_string(code));
    REQUIRE(hal_memcpy_async(destination.data(), source.data(), 64, stream) == code);
    CHECK(last_detail().plugin == "mock");
  }
  const hal_result_t next = hal_memcpy_async(destination.data(), source.data(), 64, stream);
  if (code == HAL_ERROR_DEVICE_LOST) {
    CHECK(next == HAL_ERROR_DEVICE_LOST);
    CHECK(last_detail().plugin == "loader");
  } else {
    CHECK(next == HAL_SUCCESS);
    CHECK(hal_stream_synchronize(stream) == HAL_SUCCESS);
    CHECK(destination == source);
  }
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

// hal_mem_free waits for the work of every stream of the device (the mock has no
// device_synchronize, so the loader waits for each stream): a lost stream met first must
// not end the wait, or the memory is freed under another stream's work.
TEST_CASE("hal_mem_free waits for the work of all streams of the device including lost ones",
          "[memory][stream]") {
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  // Busy streams, each lost once its work has ended: whichever the loader asks first, the
  // others' work must end before the free returns.
  std::vector<hal_stream_t> streams(4);
  for (hal_stream_t& stream : streams)
    REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  void* memory = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 4096, 0, &memory) == HAL_SUCCESS);
  std::vector<std::atomic<bool>> done(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    REQUIRE(hal_stream_enqueue_host_fn(streams[i], sleep_then_mark, &done[i]) == HAL_SUCCESS);
  }
  {
    const MockSetting lose("HAL_TEST_MOCK_LOSE_STREAMS", "1");
    CHECK(hal_mem_free(memory) == HAL_SUCCESS);
    for (size_t i = 0; i < streams.size(); ++i) {
      CAPTURE(i);
      CHECK(done[i].load());  // this stream's work ended before the free returned
    }
    for (hal_stream_t stream : streams) CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  }
}

// SPEC 4.2 for a public call that the loader makes on the caller's behalf and whose failure
// it answers itself: the portable operators plan with hal_module_load; when the module does
// not compile, the portable implementation declines (its reason names the failure) and
// hal_op_query_implementations succeeds, so the thread's detail stays as it was.
TEST_CASE("a failed public call inside a call that succeeds leaves the error detail",
          "[result][ops]") {
  const MockSetting dialect("HAL_TEST_MOCK_DIALECT", "1");
  Session session(kPluginDir, "mock");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_device_t device = device_of("mock");
  const hal_module_desc_t broken = opencl_source_desc("broken image");
  hal_module_t module = nullptr;
  REQUIRE(hal_module_load(device, &broken, &module) == HAL_ERROR_INVALID_MODULE);
  const Detail failed = last_detail();
  hal_op_unary_desc_t strided = scale_desc();
  strided.x.strides[0] = 2;  // the mock declines, so the portable implementation is asked
  hal_op_implementations_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_op_query_implementations(device, HAL_OP_UNARY, &strided.header, 0, &info) ==
          HAL_SUCCESS);
  REQUIRE(info.count >= 2);
  CHECK(info.candidates[1].verdict == HAL_OP_VERDICT_DECLINES);
  CHECK_THAT(info.candidates[1].reason, Catch::Contains("mock: no dialect compiler"));
  check_detail_unchanged(failed);
}
