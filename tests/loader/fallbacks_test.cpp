// The loader's portable fallbacks, exercised through the minimal plugin
// (synchronous, only required entries) and the mock plugin (asynchronous
// streams and host functions, but no events, memset or device_synchronize).
#include "test_support.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace loader_test;

namespace {

// A host function that holds its stream until the test opens it, so the test
// can observe work that is enqueued but not done.
struct Gate {
  std::mutex mutex;
  std::condition_variable opened_cv;
  bool opened = false;

  static void hold(void* data) {
    auto* gate = static_cast<Gate*>(data);
    std::unique_lock lock(gate->mutex);
    gate->opened_cv.wait(lock, [&] { return gate->opened; });
  }
  void open() {
    {
      std::lock_guard lock(mutex);
      opened = true;
    }
    opened_cv.notify_all();
  }
};

void append_marker(void* data) {
  auto* pair = static_cast<std::pair<std::vector<int>*, int>*>(data);
  pair->first->push_back(pair->second);
}

}  // namespace

TEST_CASE("memset and host functions fall back on a plugin without them", "[fallbacks]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("minimal");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);

  // Larger than one fill chunk, starting at an odd offset.
  constexpr size_t kSize = (size_t{3} << 20) + 77;
  uint8_t* memory = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kSize, 0, reinterpret_cast<void**>(&memory)) ==
          HAL_SUCCESS);
  REQUIRE(hal_memset_async(memory, 0x11, kSize, stream) == HAL_SUCCESS);
  REQUIRE(hal_memset_async(memory + 3, 0xee, kSize - 10, stream) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
  size_t wrong = 0;
  for (size_t i = 0; i < kSize; ++i) {
    const uint8_t expected = (i >= 3 && i < kSize - 7) ? 0xee : 0x11;
    wrong += memory[i] != expected;
  }
  CHECK(wrong == 0);

  std::vector<int> order;
  std::pair<std::vector<int>*, int> first{&order, 1};
  std::pair<std::vector<int>*, int> second{&order, 2};
  REQUIRE(hal_stream_enqueue_host_fn(stream, append_marker, &first) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(stream, append_marker, &second) == HAL_SUCCESS);
  CHECK(order == std::vector<int>{1, 2});  // the fallback runs them before returning

  CHECK(hal_device_synchronize(device) == HAL_SUCCESS);
  CHECK(hal_mem_free(memory) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("loader events on a synchronous plugin", "[fallbacks][event]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("minimal");
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  hal_event_t start = nullptr;
  hal_event_t end = nullptr;
  REQUIRE(hal_event_create(device, 0, &start) == HAL_SUCCESS);
  REQUIRE(hal_event_create(device, 0, &end) == HAL_SUCCESS);
  CHECK(hal_event_query(start) == HAL_SUCCESS);  // never recorded: complete
  CHECK(hal_event_synchronize(start) == HAL_SUCCESS);
  CHECK(hal_stream_wait_event(stream, start) == HAL_SUCCESS);
  REQUIRE(hal_event_record(start, stream) == HAL_SUCCESS);
  REQUIRE(hal_event_record(end, stream) == HAL_SUCCESS);
  CHECK(hal_event_synchronize(end) == HAL_SUCCESS);
  CHECK(hal_event_query(end) == HAL_SUCCESS);
  CHECK(hal_stream_wait_event(stream, end) == HAL_SUCCESS);
  CHECK(hal_event_destroy(start) == HAL_SUCCESS);
  CHECK(hal_event_destroy(end) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("loader events order asynchronous streams", "[fallbacks][event]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  hal_stream_t producer = nullptr;
  hal_stream_t consumer = nullptr;
  REQUIRE(hal_stream_create(device, 0, &producer) == HAL_SUCCESS);
  REQUIRE(hal_stream_create(device, 0, &consumer) == HAL_SUCCESS);
  hal_event_t ready = nullptr;
  REQUIRE(hal_event_create(device, 0, &ready) == HAL_SUCCESS);

  constexpr size_t kSize = 1 << 16;
  std::mt19937 random(7);
  std::vector<uint8_t> input(kSize);
  for (uint8_t& byte : input) byte = static_cast<uint8_t>(random());
  std::vector<uint8_t> output(kSize, 0);
  void* staging = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kSize, 0, &staging) == HAL_SUCCESS);

  Gate gate;
  REQUIRE(hal_stream_enqueue_host_fn(producer, Gate::hold, &gate) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(staging, input.data(), kSize, producer) == HAL_SUCCESS);
  REQUIRE(hal_event_record(ready, producer) == HAL_SUCCESS);
  REQUIRE(hal_stream_wait_event(consumer, ready) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(output.data(), staging, kSize, consumer) == HAL_SUCCESS);

  // Everything is held behind the gate.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(hal_event_query(ready) == HAL_NOT_READY);
  CHECK(hal_stream_query(consumer) == HAL_NOT_READY);
  CHECK(hal_stream_query(producer) == HAL_NOT_READY);
  gate.open();
  REQUIRE(hal_stream_synchronize(consumer) == HAL_SUCCESS);
  CHECK(output == input);
  CHECK(hal_event_query(ready) == HAL_SUCCESS);

  // Destroying an event a pending wait captured is safe: the wait completes.
  Gate second_gate;
  REQUIRE(hal_stream_enqueue_host_fn(producer, Gate::hold, &second_gate) == HAL_SUCCESS);
  REQUIRE(hal_event_record(ready, producer) == HAL_SUCCESS);
  REQUIRE(hal_stream_wait_event(consumer, ready) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(ready) == HAL_SUCCESS);
  second_gate.open();
  CHECK(hal_stream_synchronize(consumer) == HAL_SUCCESS);

  CHECK(hal_mem_free(staging) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(producer) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(consumer) == HAL_SUCCESS);
}

TEST_CASE("a stream waits for an event of another plugin", "[fallbacks][event]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_stream_t mock_stream = nullptr;
  hal_stream_t minimal_stream = nullptr;
  REQUIRE(hal_stream_create(device_of("mock"), 0, &mock_stream) == HAL_SUCCESS);
  REQUIRE(hal_stream_create(device_of("minimal"), 0, &minimal_stream) == HAL_SUCCESS);
  hal_event_t mock_done = nullptr;
  REQUIRE(hal_event_create(device_of("mock"), 0, &mock_done) == HAL_SUCCESS);

  std::atomic<bool> mock_work_ran{false};
  Gate gate;
  REQUIRE(hal_stream_enqueue_host_fn(mock_stream, Gate::hold, &gate) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(
              mock_stream, [](void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); },
              &mock_work_ran) == HAL_SUCCESS);
  REQUIRE(hal_event_record(mock_done, mock_stream) == HAL_SUCCESS);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.open();
  });
  // The minimal stream is synchronous, so its wait blocks here until the mock
  // stream passed the gate.
  REQUIRE(hal_stream_wait_event(minimal_stream, mock_done) == HAL_SUCCESS);
  CHECK(mock_work_ran.load());
  opener.join();
  CHECK(hal_event_destroy(mock_done) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(mock_stream) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(minimal_stream) == HAL_SUCCESS);
}

TEST_CASE("device_synchronize waits for every live stream of the device", "[fallbacks]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_device_t device = device_of("mock");
  std::vector<hal_stream_t> streams(3);
  for (hal_stream_t& stream : streams) {
    REQUIRE(hal_stream_create(device, 0, &stream) == HAL_SUCCESS);
  }
  std::atomic<int> finished{0};
  Gate gate;
  for (hal_stream_t stream : streams) {
    REQUIRE(hal_stream_enqueue_host_fn(stream, Gate::hold, &gate) == HAL_SUCCESS);
    REQUIRE(hal_stream_enqueue_host_fn(
                stream, [](void* count) { ++*static_cast<std::atomic<int>*>(count); }, &finished) ==
            HAL_SUCCESS);
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.open();
  });
  REQUIRE(hal_device_synchronize(device) == HAL_SUCCESS);
  CHECK(finished.load() == 3);
  opener.join();

  // hal_mem_free synchronises the device before releasing memory in use.
  void* memory = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 1 << 20, 0, &memory) == HAL_SUCCESS);
  std::vector<uint8_t> host(1 << 20, 3);
  Gate free_gate;
  REQUIRE(hal_stream_enqueue_host_fn(streams[0], Gate::hold, &free_gate) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(memory, host.data(), host.size(), streams[0]) == HAL_SUCCESS);
  std::thread free_opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    free_gate.open();
  });
  CHECK(hal_mem_free(memory) == HAL_SUCCESS);
  CHECK(hal_stream_query(streams[0]) == HAL_SUCCESS);
  free_opener.join();
  for (hal_stream_t stream : streams) CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

namespace {

// What the waiting entry points returned when a host function called them.
struct WaitsFromHostFn {
  hal_stream_t own = nullptr;
  hal_stream_t elsewhere = nullptr;  // a stream of another device
  hal_device_t device = nullptr;
  void* memory = nullptr;
  hal_result_t own_synchronize = HAL_SUCCESS, own_destroy = HAL_SUCCESS,
               device_synchronize = HAL_SUCCESS, mem_free = HAL_SUCCESS,
               elsewhere_synchronize = HAL_ERROR_INTERNAL;
  std::string message;
  std::atomic<bool> ran{false};

  static void run(void* data) {
    auto* self = static_cast<WaitsFromHostFn*>(data);
    self->own_synchronize = hal_stream_synchronize(self->own);
    self->message = hal_error_last_message();
    self->own_destroy = hal_stream_destroy(self->own);
    self->device_synchronize = hal_device_synchronize(self->device);
    self->mem_free = hal_mem_free(self->memory);
    self->elsewhere_synchronize = hal_stream_synchronize(self->elsewhere);
    self->ran.store(true);
  }
};

}  // namespace

TEST_CASE(
    "a host function's wait for its own stream or device fails with INVALID_STATE instead of "
    "hanging, and loses nothing",
    "[fallbacks][host_fn]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  // mock runs host functions on its own thread; minimal has none, so the
  // loader runs them on the enqueuing thread.
  for (const char* plugin : {"mock", "minimal"}) {
    INFO("plugin " << plugin);
    const char* other_plugin = std::string(plugin) == "mock" ? "minimal" : "mock";
    WaitsFromHostFn waits;
    waits.device = device_of(plugin);
    REQUIRE(hal_stream_create(waits.device, 0, &waits.own) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_of(other_plugin), 0, &waits.elsewhere) == HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(waits.device, HAL_MEMORY_DEVICE, 4096, 0, &waits.memory) == HAL_SUCCESS);
    REQUIRE(hal_stream_enqueue_host_fn(waits.own, WaitsFromHostFn::run, &waits) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(waits.own) == HAL_SUCCESS);
    REQUIRE(waits.ran.load());
    CHECK(waits.own_synchronize == HAL_ERROR_INVALID_STATE);
    CHECK(waits.message.find("host function") != std::string::npos);
    CHECK(waits.own_destroy == HAL_ERROR_INVALID_STATE);
    CHECK(waits.device_synchronize == HAL_ERROR_INVALID_STATE);
    CHECK(waits.mem_free == HAL_ERROR_INVALID_STATE);
    CHECK(waits.elsewhere_synchronize == HAL_SUCCESS);
    // Nothing was lost: the stream and the memory are still there to use and release.
    std::vector<uint8_t> host(4096, 7);
    CHECK(hal_memcpy_async(waits.memory, host.data(), host.size(), waits.own) == HAL_SUCCESS);
    CHECK(hal_stream_synchronize(waits.own) == HAL_SUCCESS);
    CHECK(hal_mem_free(waits.memory) == HAL_SUCCESS);
    CHECK(hal_stream_destroy(waits.own) == HAL_SUCCESS);
    CHECK(hal_stream_destroy(waits.elsewhere) == HAL_SUCCESS);
    // Outside host functions the same calls wait as before.
    CHECK(hal_device_synchronize(waits.device) == HAL_SUCCESS);
  }
}
