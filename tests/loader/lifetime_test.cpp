// The lifetime contract of handles on the cpu plugin: a lost stream (a
// collective that timed out) poisons only itself and never stops a free or a
// destroy (SPEC 4.4); a destroy racing calls on the same handle never
// corrupts memory (SPEC 5); a stale handle is recognised long after its
// destroy, and never reaches a live handle (SPEC 3).
#include "test_support.hpp"

#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace loader_test;

namespace {

// The cpu plugin of the build with |devices| devices.
class CpuSession {
 public:
  explicit CpuSession(const char* devices = "2") {
    setenv("HAL_CPU_DEVICES", devices, 1);
    hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
    options.plugin_path = HAL_TEST_BUILD_PLUGIN_DIR;
    options.plugins = "cpu";
    options.skip_default_search = 1;
    REQUIRE(hal_init(&options) == HAL_SUCCESS);
    REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  }
  ~CpuSession() {
    hal_shutdown();
    unsetenv("HAL_CPU_DEVICES");
  }
  CpuSession(const CpuSession&) = delete;
  CpuSession& operator=(const CpuSession&) = delete;
  hal_device_t device = nullptr;
};

void add_one(void* counter) {
  static_cast<std::atomic<int>*>(counter)->fetch_add(1);
}

}  // namespace

TEST_CASE("lost stream: only the stream is poisoned, free and destroy go on", "[lifetime]") {
  CpuSession session;
  std::array<hal_device_t, 2> devices{};
  REQUIRE(hal_device_get(0, &devices[0]) == HAL_SUCCESS);
  REQUIRE(hal_device_get(1, &devices[1]) == HAL_SUCCESS);
  std::array<hal_comm_t, 2> comms{};
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = 100;  // rank 1 never joins: rank 0 fails at this deadline
  REQUIRE(hal_comm_init_all(2, devices.data(), &config, comms.data()) == HAL_SUCCESS);

  hal_device_t device = devices[0];
  hal_stream_t lost = nullptr, healthy = nullptr;
  REQUIRE(hal_stream_create(device, 0, &lost) == HAL_SUCCESS);
  REQUIRE(hal_stream_create(device, 0, &healthy) == HAL_SUCCESS);
  hal_event_t start = nullptr, end = nullptr, other = nullptr;
  REQUIRE(hal_event_create(device, HAL_EVENT_FLAG_TIMING, &start) == HAL_SUCCESS);
  REQUIRE(hal_event_create(device, HAL_EVENT_FLAG_TIMING, &end) == HAL_SUCCESS);
  REQUIRE(hal_event_create(device, 0, &other) == HAL_SUCCESS);
  void* buffer = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 256, 0, &buffer) == HAL_SUCCESS);

  REQUIRE(hal_event_record(start, lost) == HAL_SUCCESS);
  REQUIRE(hal_allreduce(buffer, buffer, 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[0], lost) ==
          HAL_SUCCESS);
  REQUIRE(hal_event_record(end, lost) == HAL_SUCCESS);  // captures the failing collective
  CHECK(hal_stream_synchronize(lost) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_stream_query(lost) == HAL_ERROR_DEVICE_LOST);  // sticky
  CHECK(hal_event_synchronize(end) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_event_synchronize(start) == HAL_SUCCESS);  // captured work before the failure
  float ms = -1.0f;
  CHECK(hal_event_elapsed_ms(start, end, &ms) == HAL_ERROR_INVALID_STATE);
  CHECK(ms == -1.0f);

  // Every enqueue on the lost stream is refused with HAL_ERROR_DEVICE_LOST
  // (each lists it in SPEC 11), and enqueues nothing.
  std::atomic<int> ran{0};
  std::vector<uint8_t> host(64, 7);
  CHECK(hal_memcpy_async(buffer, host.data(), 64, lost) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_memset_async(buffer, 1, 64, lost) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_stream_enqueue_host_fn(lost, add_one, &ran) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_event_record(other, lost) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_stream_wait_event(lost, other) == HAL_ERROR_DEVICE_LOST);
  CHECK(hal_stream_synchronize(lost) == HAL_ERROR_DEVICE_LOST);
  CHECK(ran.load() == 0);
  CHECK(hal_device_synchronize(device) == HAL_ERROR_DEVICE_LOST);  // names the lost stream

  // The device's other streams are unaffected.
  REQUIRE(hal_memset_async(buffer, 0x5a, 256, healthy) == HAL_SUCCESS);
  REQUIRE(hal_stream_enqueue_host_fn(healthy, add_one, &ran) == HAL_SUCCESS);
  REQUIRE(hal_event_record(other, healthy) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(host.data(), buffer, 64, healthy) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(healthy) == HAL_SUCCESS);
  CHECK(hal_event_query(other) == HAL_SUCCESS);
  CHECK(ran.load() == 1);
  CHECK(host == std::vector<uint8_t>(64, 0x5a));

  // The free goes on and really frees, and leaves the thread's error detail
  // as it was (success does not change it, SPEC 4.2): a caller freeing its
  // buffers after a failure keeps the failure's message. The destroy succeeds.
  CHECK(hal_stream_synchronize(lost) == HAL_ERROR_DEVICE_LOST);
  const std::string detail = hal_error_last_message();
  REQUIRE(hal_mem_free(buffer) == HAL_SUCCESS);
  CHECK(std::string(hal_error_last_message()) == detail);
  hal_memory_info_t info{};
  info.struct_size = sizeof(info);
  CHECK(hal_mem_get_info(buffer, &info) == HAL_ERROR_NOT_FOUND);
  CHECK(hal_mem_free(buffer) == HAL_ERROR_NOT_FOUND);
  // The destroy drains the lost stream, whose failure the plugin reports
  // ("stream_query: ..."); the destroy succeeds, so the detail stays the free's.
  const Detail freed_twice = last_detail();
  CHECK(hal_stream_destroy(lost) == HAL_SUCCESS);
  check_detail_unchanged(freed_twice);
  CHECK(hal_stream_synchronize(lost) == HAL_ERROR_DESTROYED_HANDLE);
  // With the lost stream gone, the device reports no failure any more.
  CHECK(hal_device_synchronize(device) == HAL_SUCCESS);
  void* again = nullptr;
  REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 256, 0, &again) == HAL_SUCCESS);
  CHECK(hal_memset_async(again, 1, 256, healthy) == HAL_SUCCESS);
  CHECK(hal_stream_synchronize(healthy) == HAL_SUCCESS);
  CHECK(hal_mem_free(again) == HAL_SUCCESS);

  for (hal_event_t event : {start, end, other}) CHECK(hal_event_destroy(event) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(healthy) == HAL_SUCCESS);
  for (hal_comm_t comm : comms) hal_comm_destroy(comm);
}

TEST_CASE("lost stream: a buffer the size of the device's budget is freed", "[lifetime]") {
  CpuSession session;
  std::array<hal_device_t, 2> devices{};
  REQUIRE(hal_device_get(0, &devices[0]) == HAL_SUCCESS);
  REQUIRE(hal_device_get(1, &devices[1]) == HAL_SUCCESS);
  std::array<hal_comm_t, 2> comms{};
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = 50;
  REQUIRE(hal_comm_init_all(2, devices.data(), &config, comms.data()) == HAL_SUCCESS);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(devices[0], 0, &stream) == HAL_SUCCESS);
  const hal_device_properties_t properties = properties_of(devices[0]);
  // The largest single allocation; repeated ten times it outgrows what a leak could keep.
  const size_t size =
      static_cast<size_t>(std::min<uint64_t>(properties.max_allocation_bytes, uint64_t{64} << 20));
  for (int round = 0; round < 10; ++round) {
    void* buffer = nullptr;
    REQUIRE(hal_mem_alloc(devices[0], HAL_MEMORY_DEVICE, size, 0, &buffer) == HAL_SUCCESS);
    if (round == 0) {
      REQUIRE(hal_allreduce(buffer, buffer, 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[0], stream) ==
              HAL_SUCCESS);
      REQUIRE(hal_stream_synchronize(stream) == HAL_ERROR_DEVICE_LOST);
    }
    REQUIRE(hal_mem_free(buffer) == HAL_SUCCESS);
  }
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  for (hal_comm_t comm : comms) hal_comm_destroy(comm);
}

TEST_CASE("destroy racing calls on the same stream or event never corrupts memory",
          "[lifetime][race]") {
  CpuSession session("1");
  std::mt19937 random(20261201);
  constexpr int kRounds = 150;
  constexpr int kThreads = 3;
  int destroyed_seen = 0;
  for (int round = 0; round < kRounds; ++round) {
    hal_stream_t stream = nullptr;
    hal_event_t event = nullptr;
    REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
    REQUIRE(hal_event_create(session.device, 0, &event) == HAL_SUCCESS);
    std::atomic<int> ran{0};
    std::atomic<bool> go{false};
    std::atomic<int> unexpected{0};
    const int destroy_after = static_cast<int>(random() % 40);
    std::vector<std::thread> users;
    for (int t = 0; t < kThreads; ++t) {
      users.emplace_back([&, t] {
        while (!go.load()) std::this_thread::yield();
        for (int i = 0; i < 60; ++i) {
          hal_result_t result = HAL_SUCCESS;
          switch ((i + t) % 5) {
            case 0:
              result = hal_stream_enqueue_host_fn(stream, add_one, &ran);
              break;
            case 1:
              result = hal_event_record(event, stream);
              break;
            case 2:
              result = hal_stream_wait_event(stream, event);
              break;
            case 3:
              result = hal_event_query(event);
              break;
            default:
              result = hal_stream_query(stream);
              break;
          }
          if (result != HAL_SUCCESS && result != HAL_NOT_READY &&
              result != HAL_ERROR_DESTROYED_HANDLE) {
            unexpected.fetch_add(1);
          }
        }
      });
    }
    go.store(true);
    for (int i = 0; i < destroy_after; ++i) std::this_thread::yield();
    // Stream and event are destroyed while the users still call; with ASan
    // and TSan this reports a double free or a race if the loader lets a
    // destroy overlap a call.
    if (round % 2 == 0) {
      CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
      CHECK(hal_event_destroy(event) == HAL_SUCCESS);
    } else {
      CHECK(hal_event_destroy(event) == HAL_SUCCESS);
      CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
    }
    for (std::thread& user : users) user.join();
    CHECK(unexpected.load() == 0);
    if (hal_stream_query(stream) == HAL_ERROR_DESTROYED_HANDLE) ++destroyed_seen;
    CHECK(hal_event_destroy(event) == HAL_ERROR_DESTROYED_HANDLE);
  }
  CHECK(destroyed_seen == kRounds);
}

TEST_CASE("two threads destroying one stream: one succeeds, the other is told",
          "[lifetime][race]") {
  CpuSession session("1");
  for (int round = 0; round < 200; ++round) {
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
    std::atomic<int> succeeded{0}, destroyed{0};
    std::vector<std::thread> destroyers;
    for (int t = 0; t < 2; ++t) {
      destroyers.emplace_back([&] {
        const hal_result_t result = hal_stream_destroy(stream);
        if (result == HAL_SUCCESS) succeeded.fetch_add(1);
        if (result == HAL_ERROR_DESTROYED_HANDLE) destroyed.fetch_add(1);
      });
    }
    for (std::thread& destroyer : destroyers) destroyer.join();
    CHECK(succeeded.load() == 1);
    CHECK(destroyed.load() == 1);
  }
}

TEST_CASE("stale handles stay destroyed after 10,000 create/destroy cycles", "[lifetime]") {
  CpuSession session("1");
  hal_stream_t stale = nullptr;
  hal_event_t stale_event = nullptr;
  REQUIRE(hal_stream_create(session.device, 0, &stale) == HAL_SUCCESS);
  REQUIRE(hal_event_create(session.device, 0, &stale_event) == HAL_SUCCESS);
  REQUIRE(hal_stream_destroy(stale) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(stale_event) == HAL_SUCCESS);
  // Live handles created among the churn: a stale handle must never reach one.
  std::vector<hal_stream_t> live;
  std::vector<hal_event_t> live_events;
  for (int i = 0; i < 10000; ++i) {
    hal_stream_t stream = nullptr;
    hal_event_t event = nullptr;
    REQUIRE(hal_event_create(session.device, 0, &event) == HAL_SUCCESS);
    if (i % 1000 == 999) {
      REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
      live.push_back(stream);
      live_events.push_back(event);
      continue;
    }
    REQUIRE(hal_event_destroy(event) == HAL_SUCCESS);
    if (i % 2 == 0) {  // streams start a thread each: half as many, still past 4096
      REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
      REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
    }
  }
  for (hal_stream_t stream : live) CHECK(stream != stale);
  for (hal_event_t event : live_events) CHECK(event != stale_event);
  CHECK(hal_stream_destroy(stale) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_stream_query(stale) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_event_record(stale_event, live[0]) == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_event_destroy(stale_event) == HAL_ERROR_DESTROYED_HANDLE);
  // The live streams were not touched by any of that.
  std::atomic<int> ran{0};
  for (hal_stream_t stream : live) {
    REQUIRE(hal_stream_enqueue_host_fn(stream, add_one, &ran) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
  }
  CHECK(ran.load() == static_cast<int>(live.size()));
  for (hal_event_t event : live_events) CHECK(hal_event_destroy(event) == HAL_SUCCESS);
}

namespace {

struct SelfDestroy {
  hal_stream_t stream;
  hal_result_t result;
};

void destroy_own_stream(void* data) {
  auto* self = static_cast<SelfDestroy*>(data);
  self->result = hal_stream_destroy(self->stream);
}

}  // namespace

TEST_CASE("a host function destroying the stream it runs on is refused, not a hang", "[lifetime]") {
  // The minimal plugin has no host callbacks: the loader's fallback runs the
  // function on the calling thread, inside hal_stream_enqueue_host_fn.
  Session session(kPluginDir, "minimal");
  REQUIRE(session.result == HAL_SUCCESS);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(device_of("minimal"), 0, &stream) == HAL_SUCCESS);
  SelfDestroy self{stream, HAL_SUCCESS};
  REQUIRE(hal_stream_enqueue_host_fn(stream, destroy_own_stream, &self) == HAL_SUCCESS);
  CHECK(self.result == HAL_ERROR_INVALID_STATE);  // the wait for itself, refused first
  // The stream is intact and can be destroyed once the call has returned.
  CHECK(hal_stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

namespace {

struct ExitRun {
  std::string output;
  int status = -1;
};

// Runs the exit probe (exit_probe.cpp) with a clean environment plus |variables|; output is
// stdout and stderr together, so a sanitizer's or glibc's report of the exit is in it.
ExitRun run_exit_probe(const std::string& variables) {
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string command = std::string("env -i PATH=/usr/bin:/bin ") +
                              (asan != nullptr ? std::string("ASAN_OPTIONS='") + asan + "' " : "") +
                              variables + " '" + HAL_TEST_EXIT_PROBE + "' 2>&1";
  ExitRun run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[512] = {};
  while (std::fgets(line, sizeof(line), pipe) != nullptr) run.output += line;
  run.status = pclose(pipe);
  return run;
}

}  // namespace

// A process that returns from main with HAL initialised: the loader tears down at exit,
// draining the streams through the plugin, which may report failures then. The thread's own
// error detail is destroyed before static objects (a double free at exit when a lost stream
// reported into it), and the plugin's static objects are destroyed before the loader's (the
// plugin was called after them).
TEST_CASE("a process exiting without hal_shutdown tears HAL down before its plugins' statics",
          "[lifetime]") {
  const std::string plugins =
      std::string("HAL_PLUGIN_PATH='") + HAL_TEST_PLUGIN_DIR + "' HAL_PLUGINS=mock ";
  for (const char* lose : {"0", "1"}) {
    CAPTURE(lose);
    const ExitRun run = run_exit_probe(plugins + "HAL_TEST_MOCK_LOSE_STREAMS=" + lose);
    INFO(run.output);
    CHECK(run.output.find("exit_probe: init=HAL_SUCCESS stream=HAL_SUCCESS") != std::string::npos);
    CHECK(run.output.find("after the plugin's static objects were destroyed") == std::string::npos);
    CHECK(run.output.find("double free") == std::string::npos);
    CHECK(run.output.find("Sanitizer") == std::string::npos);
    CHECK(WIFEXITED(run.status));
    CHECK(WEXITSTATUS(run.status) == 0);
  }
}
