// Communicator handles under the contract of every other handle (SPEC §3):
// a stale one is rejected as destroyed however many communicators were made
// since, a destroy or abort is exclusive with calls on the same communicator,
// and an abort still interrupts a collective blocked in flight.
#include <catch2/catch.hpp>

#include <hal/collective.h>
#include <hal/device.h>
#include <hal/init.h>
#include <hal/memory.h>
#include <hal/stream.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <unordered_set>
#include <vector>

namespace {

// hal_init over one plugin of one directory; shuts down at scope exit.
class Session {
 public:
  Session(const char* dir, const char* plugin) {
    setenv("HAL_CPU_DEVICES", "2", 1);
    hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
    options.plugin_path = dir;
    options.plugins = plugin;
    options.skip_default_search = 1;
    REQUIRE(hal_init(&options) == HAL_SUCCESS);
  }
  ~Session() { hal_shutdown(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

std::vector<hal_device_t> devices(uint32_t n) {
  std::vector<hal_device_t> out(n);
  for (uint32_t i = 0; i < n; ++i) REQUIRE(hal_device_get(i, &out[i]) == HAL_SUCCESS);
  return out;
}

std::vector<hal_comm_t> init_all(const std::vector<hal_device_t>& on, uint32_t timeout_ms) {
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = timeout_ms;
  std::vector<hal_comm_t> comms(on.size());
  REQUIRE(hal_comm_init_all(static_cast<uint32_t>(on.size()), on.data(), &config, comms.data()) ==
          HAL_SUCCESS);
  return comms;
}

// Device memory freed at scope exit.
class Buffer {
 public:
  Buffer(hal_device_t device, size_t bytes) {
    REQUIRE(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &ptr_) == HAL_SUCCESS);
  }
  ~Buffer() { hal_mem_free(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

struct Plugin {
  const char* dir;
  const char* name;
};

// The cpu plugin's own collectives (enqueued on the stream) and the loader's
// host-staged ones (the mock test plugin has none; they block in the call).
Plugin pick_plugin() {
  Plugin plugin{};
  SECTION("cpu plugin") {
    plugin = {HAL_TEST_PLUGIN_DIR, "cpu"};
  }
  SECTION("loader fallback") {
    plugin = {HAL_TEST_LOADER_PLUGIN_DIR, "mock"};
  }
  return plugin;
}

}  // namespace

TEST_CASE("a stale communicator stays destroyed after 10,000 others were made", "[comm_handle]") {
  const Plugin plugin = pick_plugin();
  Session session(plugin.dir, plugin.name);
  const std::vector<hal_device_t> on = devices(2);
  // Far more than the 4096 destroyed communicators the loader used to keep:
  // heap memory would long have been reused by then.
  constexpr int kCycles = 10000;
  std::vector<hal_comm_t> first = init_all(on, 5000);
  REQUIRE(hal_comm_destroy(first[0]) == HAL_SUCCESS);
  REQUIRE(hal_comm_abort(first[1]) == HAL_SUCCESS);
  std::unordered_set<hal_comm_t> made{first[0], first[1]};
  for (int i = 0; i < kCycles; ++i) {
    hal_comm_t comms[2] = {};
    hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
    REQUIRE(hal_comm_init_all(2, on.data(), &config, comms) == HAL_SUCCESS);
    // No handle is handed out twice within the window (SPEC §3).
    REQUIRE(made.insert(comms[0]).second);
    REQUIRE(made.insert(comms[1]).second);
    REQUIRE(hal_comm_destroy(comms[0]) == HAL_SUCCESS);
    REQUIRE(hal_comm_destroy(comms[1]) == HAL_SUCCESS);
  }

  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(on[0], 0, &stream) == HAL_SUCCESS);
  Buffer buffer(on[0], 64);
  for (hal_comm_t stale : first) {
    hal_result_t error = HAL_SUCCESS;
    uint32_t value = 0;
    hal_device_t device = nullptr;
    CHECK(hal_comm_get_async_error(stale, &error) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_comm_count(stale, &value) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_comm_rank(stale, &value) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_comm_get_device(stale, &device) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_allreduce(buffer.get(), buffer.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, stale,
                        stream) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_comm_destroy(stale) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_comm_abort(stale) == HAL_ERROR_DESTROYED_HANDLE);
  }

  // A communicator made afterwards is unaffected by all of it.
  std::vector<hal_comm_t> live = init_all({on[0]}, 5000);
  CHECK(made.count(live[0]) == 0);
  uint32_t count = 0, rank = 7;
  CHECK(hal_comm_count(live[0], &count) == HAL_SUCCESS);
  CHECK(hal_comm_rank(live[0], &rank) == HAL_SUCCESS);
  CHECK(count == 1);
  CHECK(rank == 0);
  const float ones[4] = {1, 1, 1, 1};
  float out[4] = {};
  REQUIRE(hal_memcpy_async(buffer.get(), ones, sizeof(ones), stream) == HAL_SUCCESS);
  CHECK(hal_allreduce(buffer.get(), buffer.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, live[0],
                      stream) == HAL_SUCCESS);
  REQUIRE(hal_memcpy_async(out, buffer.get(), sizeof(out), stream) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(out[0] == 1.0f);
  CHECK(out[3] == 1.0f);
  hal_result_t error = HAL_ERROR_INTERNAL;
  CHECK(hal_comm_get_async_error(live[0], &error) == HAL_SUCCESS);
  CHECK(error == HAL_SUCCESS);
  CHECK(hal_comm_destroy(live[0]) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("destroy and abort are exclusive with calls on the same communicator", "[comm_handle]") {
  const Plugin plugin = pick_plugin();
  Session session(plugin.dir, plugin.name);
  const std::vector<hal_device_t> on = devices(1);
  constexpr int kRounds = 30;
  constexpr int kCallers = 3;
  constexpr int kMaxCollectives = 32;  // per caller and round
  const uint32_t seed = Catch::rngSeed();
  INFO("seed " << seed);
  Buffer buffer(on[0], 64 * kCallers);
  for (int round = 0; round < kRounds; ++round) {
    // One rank: its collectives complete without a peer, so the calls race
    // the destroy itself rather than wait in it.
    const hal_comm_t comm = init_all(on, 5000)[0];
    // One stream: the rank's collectives run in one order (a rank's calls
    // on several streams at once would be the caller's race, not this one).
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(on[0], 0, &stream) == HAL_SUCCESS);
    std::atomic<int> started{0};
    std::atomic<bool> go{false};
    std::vector<std::vector<hal_result_t>> seen(kCallers);
    std::vector<std::thread> callers;
    for (int t = 0; t < kCallers; ++t) {
      callers.emplace_back([&, t] {
        std::mt19937 rng(seed + static_cast<uint32_t>(round * kCallers + t));
        void* mine = static_cast<char*>(buffer.get()) + 64 * t;
        started.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        int collectives = 0;
        // Until the communicator is seen destroyed, and a few calls beyond.
        for (int after = 0; after < 4;) {
          hal_result_t r = HAL_SUCCESS;
          uint32_t value = 0;
          // A bounded number of collectives: the stream runs them all.
          switch (rng() % 4) {
            case 0:
              if (collectives < kMaxCollectives) {
                ++collectives;
                r = hal_allreduce(mine, mine, 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream);
                break;
              }
              [[fallthrough]];
            case 1: {
              hal_result_t error = HAL_SUCCESS;
              r = hal_comm_get_async_error(comm, &error);
              break;
            }
            case 2:
              r = hal_comm_count(comm, &value);
              if (r == HAL_SUCCESS && value != 1) r = HAL_ERROR_INTERNAL;
              break;
            default:
              r = hal_comm_rank(comm, &value);
              if (r == HAL_SUCCESS && value != 0) r = HAL_ERROR_INTERNAL;
              break;
          }
          seen[t].push_back(r);
          if (r == HAL_ERROR_DESTROYED_HANDLE) ++after;
        }
      });
    }
    while (started.load() < kCallers) std::this_thread::yield();
    // Two destroyers: destroy and, by the seed, a destroy or an abort.
    std::mt19937 rng(seed + 1000003u * static_cast<uint32_t>(round + 1));
    const bool second_aborts = rng() % 2 == 0;
    const int delay = static_cast<int>(rng() % 500);
    hal_result_t destroyed[2] = {};
    std::thread second([&] {
      for (int i = 0; i < delay; ++i) std::this_thread::yield();
      destroyed[1] = second_aborts ? hal_comm_abort(comm) : hal_comm_destroy(comm);
    });
    go.store(true);
    for (int i = 0; i < delay; ++i) std::this_thread::yield();
    destroyed[0] = hal_comm_destroy(comm);
    second.join();
    for (std::thread& t : callers) t.join();

    INFO("round " << round << (second_aborts ? ", destroy and abort" : ", two destroys"));
    // Exactly one of them ended the communicator; the other found it destroyed.
    CHECK(((destroyed[0] == HAL_SUCCESS && destroyed[1] == HAL_ERROR_DESTROYED_HANDLE) ||
           (destroyed[1] == HAL_SUCCESS && destroyed[0] == HAL_ERROR_DESTROYED_HANDLE)));
    const bool aborted = second_aborts && destroyed[1] == HAL_SUCCESS;
    for (const std::vector<hal_result_t>& results : seen) {
      // Once destroyed, always destroyed; before, every call succeeds, but
      // an abort fails the collectives in flight (the rank's own failure,
      // the group's, or their stream's, SPEC §13.3).
      bool gone = false;
      hal_result_t unexpected = HAL_SUCCESS;
      for (hal_result_t r : results) {
        const bool abort_failure = aborted && (r == HAL_ERROR_INVALID_STATE ||
                                               r == HAL_ERROR_REMOTE || r == HAL_ERROR_DEVICE_LOST);
        const bool expected =
            gone ? r == HAL_ERROR_DESTROYED_HANDLE
                 : r == HAL_SUCCESS || r == HAL_ERROR_DESTROYED_HANDLE || abort_failure;
        if (!expected && unexpected == HAL_SUCCESS)
          unexpected = r == HAL_SUCCESS ? HAL_ERROR_INTERNAL : r;
        gone = gone || r == HAL_ERROR_DESTROYED_HANDLE;
      }
      CHECK(unexpected == HAL_SUCCESS);
      CHECK(gone);
    }
    // An aborted communicator's enqueued calls fail their stream.
    const hal_result_t synced = hal_stream_synchronize(stream);
    CHECK((synced == HAL_SUCCESS || (aborted && synced == HAL_ERROR_DEVICE_LOST)));
    CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  }
}

TEST_CASE("an abort from another thread interrupts a collective blocked in flight",
          "[comm_handle]") {
  // The loader's host-staged ranks block in the call itself.
  Session session(HAL_TEST_LOADER_PLUGIN_DIR, "mock");
  const std::vector<hal_device_t> on = devices(2);
  // A deadline far beyond the test's length: only the abort can end the wait
  // (an expired deadline would say HAL_ERROR_TIMEOUT).
  std::vector<hal_comm_t> comms = init_all(on, 600000);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(on[0], 0, &stream) == HAL_SUCCESS);
  Buffer buffer(on[0], 64);
  std::atomic<bool> calling{false};
  hal_result_t blocked = HAL_SUCCESS;
  // Rank 1 never takes part.
  std::thread rank0([&] {
    calling.store(true);
    blocked = hal_allreduce(buffer.get(), buffer.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[0],
                            stream);
  });
  while (!calling.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // most likely in the wait by now
  SECTION("the blocked rank is aborted") {
    CHECK(hal_comm_abort(comms[0]) == HAL_SUCCESS);
    rank0.join();
    // The call failed (it saw the handle destroyed, or the abort broke its
    // wait), and not at its deadline.
    INFO("the blocked call returned " << hal_result_string(blocked));
    CHECK(blocked != HAL_SUCCESS);
    CHECK(blocked != HAL_ERROR_TIMEOUT);
    uint32_t rank = 0;
    CHECK(hal_comm_rank(comms[0], &rank) == HAL_ERROR_DESTROYED_HANDLE);
    CHECK(hal_comm_destroy(comms[1]) == HAL_SUCCESS);
  }
  SECTION("the missing peer is aborted") {
    CHECK(hal_comm_abort(comms[1]) == HAL_SUCCESS);
    rank0.join();
    CHECK(blocked == HAL_ERROR_REMOTE);
    // Then the failed rank ends without waiting for anyone.
    CHECK(hal_comm_destroy(comms[0]) == HAL_SUCCESS);
  }
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("a communicator destroyed inside an open group fails the group's end", "[comm_handle]") {
  const Plugin plugin = pick_plugin();
  Session session(plugin.dir, plugin.name);
  const std::vector<hal_device_t> on = devices(1);
  hal_stream_t stream = nullptr;
  REQUIRE(hal_stream_create(on[0], 0, &stream) == HAL_SUCCESS);
  Buffer buffer(on[0], 64);
  const hal_comm_t comm = init_all(on, 5000)[0];
  REQUIRE(hal_group_start() == HAL_SUCCESS);
  REQUIRE(hal_allreduce(buffer.get(), buffer.get(), 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm,
                        stream) == HAL_SUCCESS);
  REQUIRE(hal_comm_destroy(comm) == HAL_SUCCESS);
  // The batch holds the communicator again when it runs, and finds it gone.
  CHECK(hal_group_end() == HAL_ERROR_DESTROYED_HANDLE);
  CHECK(hal_stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
}
