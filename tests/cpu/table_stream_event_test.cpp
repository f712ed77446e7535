// The cpu plugin's table driven directly: streams, events, ordering, threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "hal/cpu_kernel.h"
#include "table_helpers.hpp"

using namespace hal::test;
TEST_CASE("a long chain of dependent kernels and copies keeps stream order",
          "[cpu][table][stream]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  TestModule module(t, device);
  hal_impl_kernel_t* affine = module.kernel("affine_u32");
  hal_impl_stream_t* stream = make_stream(t, device);
  const uint32_t n = 3001;
  auto* x = static_cast<uint32_t*>(alloc(t, device, n * 4));
  auto* y = static_cast<uint32_t*>(alloc(t, device, n * 4));
  std::mt19937 random(1234);
  std::vector<uint32_t> host(n);
  for (uint32_t& v : host) v = random();
  const std::vector<uint32_t> initial = host;  // the copy reads it asynchronously
  REQUIRE(t.memcpy_async(stream, x, initial.data(), n * 4) == HAL_SUCCESS);
  for (int step = 0; step < 300; ++step) {
    const uint32_t a = random() | 1, b = random();
    REQUIRE(launch_affine(t, stream, affine, x, n, a, b) == HAL_SUCCESS);
    for (uint32_t& v : host) v = v * a + b;
    if (step % 3 == 0) {  // bounce through y: copies must order with kernels
      REQUIRE(t.memcpy_async(stream, y, x, n * 4) == HAL_SUCCESS);
      REQUIRE(t.memset_async(stream, x, 0xEE, n * 4) == HAL_SUCCESS);
      REQUIRE(t.memcpy_async(stream, x, y, n * 4) == HAL_SUCCESS);
    }
  }
  std::vector<uint32_t> result(n);
  REQUIRE(t.memcpy_async(stream, result.data(), x, n * 4) == HAL_SUCCESS);
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(result == host);
  CHECK(t.stream_query(stream) == HAL_SUCCESS);
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("large copies and fills are exact", "[cpu][table][memory]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* d0 = plugin.device(0);
  hal_impl_device_t* d1 = plugin.device(1);
  const size_t size = (size_t{24} << 20) + 12345;
  auto* a = static_cast<unsigned char*>(alloc(t, d0, size));
  auto* b = static_cast<unsigned char*>(alloc(t, d1, size));
  for (size_t i = 0; i < size; ++i) a[i] = static_cast<unsigned char>(i * 131 + (i >> 16));
  hal_impl_stream_t* stream = make_stream(t, d0);
  REQUIRE(t.memcpy_async(stream, b, a, size) == HAL_SUCCESS);  // peer copy
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(std::memcmp(a, b, size) == 0);
  REQUIRE(t.memset_async(stream, b + 7, 0x3C, size - 14) == HAL_SUCCESS);
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(b[6] == a[6]);
  CHECK(b[7] == 0x3C);
  CHECK(b[size - 8] == 0x3C);
  CHECK(b[size - 7] == a[size - 7]);
  size_t wrong = 0;
  for (size_t i = 7; i < size - 7; ++i) wrong += b[i] != 0x3C;
  CHECK(wrong == 0);
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
}

namespace {

struct HostFnLog {
  std::vector<int> order;  // written by the stream's runner only
};

struct HostFnCall {
  HostFnLog* log;
  int value;
};

void append_value(void* user_data) {
  auto* call = static_cast<HostFnCall*>(user_data);
  call->log->order.push_back(call->value);
}

void sleep_a_little(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

TEST_CASE("host functions run in stream order", "[cpu][table][stream]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_stream_t* stream = make_stream(t, plugin.device(0));
  HostFnLog log;
  std::vector<HostFnCall> calls;
  for (int i = 0; i < 500; ++i) calls.push_back({&log, i});
  for (int i = 0; i < 500; ++i) {
    REQUIRE(t.stream_enqueue_host_fn(stream, &append_value, &calls[i]) == HAL_SUCCESS);
  }
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  REQUIRE(log.order.size() == 500);
  for (int i = 0; i < 500; ++i) REQUIRE(log.order[i] == i);
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
}

TEST_CASE("events: query, synchronize, elapsed time, errors", "[cpu][table][event]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  hal_impl_stream_t* stream = make_stream(t, device);
  hal_impl_event_t* start = make_event(t, device, HAL_EVENT_FLAG_TIMING);
  hal_impl_event_t* end = make_event(t, device, HAL_EVENT_FLAG_TIMING);
  hal_impl_event_t* plain = make_event(t, device);
  float ms = -1;

  // Never recorded: complete, but without a time.
  CHECK(t.event_query(start) == HAL_SUCCESS);
  CHECK(t.event_synchronize(start) == HAL_SUCCESS);
  CHECK(t.event_elapsed_ms(start, end, &ms) == HAL_ERROR_INVALID_STATE);
  CHECK(last_error().message.find("never recorded") != std::string::npos);

  REQUIRE(t.event_record(start, stream) == HAL_SUCCESS);
  REQUIRE(t.stream_enqueue_host_fn(stream, &sleep_a_little, nullptr) == HAL_SUCCESS);
  REQUIRE(t.event_record(end, stream) == HAL_SUCCESS);
  REQUIRE(t.event_record(plain, stream) == HAL_SUCCESS);
  // The sleep is still running (20 ms): the end is not complete yet, so
  // elapsed time is refused. (A correctness check, not a timing assertion:
  // at worst the host function finished and both results are success.)
  const hal_result_t early = t.event_query(end);
  CHECK((early == HAL_NOT_READY || early == HAL_SUCCESS));
  if (early == HAL_NOT_READY) {
    CHECK(t.event_elapsed_ms(start, end, &ms) == HAL_ERROR_INVALID_STATE);
    CHECK(t.stream_query(stream) == HAL_NOT_READY);
  }
  REQUIRE(t.event_synchronize(end) == HAL_SUCCESS);
  CHECK(t.event_query(end) == HAL_SUCCESS);
  REQUIRE(t.event_elapsed_ms(start, end, &ms) == HAL_SUCCESS);
  CHECK(ms > 0.0f);
  CHECK(t.event_elapsed_ms(start, plain, &ms) == HAL_ERROR_INVALID_STATE);
  CHECK(last_error().message.find("HAL_EVENT_FLAG_TIMING") != std::string::npos);

  // Recording on another device's stream is refused.
  hal_impl_stream_t* other = make_stream(t, plugin.device(1));
  CHECK(t.event_record(start, other) == HAL_ERROR_DEVICE_MISMATCH);
  hal_impl_event_t* unused = nullptr;
  CHECK(t.event_create(device, 0x80, &unused) == HAL_ERROR_INVALID_ARGUMENT);
  hal_impl_stream_t* unused_stream = nullptr;
  CHECK(t.stream_create(device, 1, &unused_stream) == HAL_ERROR_INVALID_ARGUMENT);

  for (hal_impl_event_t* e : {start, end, plain}) REQUIRE(t.event_destroy(e) == HAL_SUCCESS);
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
  REQUIRE(t.stream_destroy(other) == HAL_SUCCESS);
}

TEST_CASE("destroying with work pending is safe", "[cpu][table][stream][event]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  hal_impl_stream_t* producer = make_stream(t, device);
  hal_impl_stream_t* consumer = make_stream(t, plugin.device(1));
  hal_impl_event_t* event = make_event(t, device);
  HostFnLog log;
  HostFnCall first{&log, 1}, second{&log, 2};
  REQUIRE(t.stream_enqueue_host_fn(producer, &sleep_a_little, nullptr) == HAL_SUCCESS);
  REQUIRE(t.stream_enqueue_host_fn(producer, &append_value, &first) == HAL_SUCCESS);
  REQUIRE(t.event_record(event, producer) == HAL_SUCCESS);
  REQUIRE(t.stream_wait_event(consumer, event) == HAL_SUCCESS);
  REQUIRE(t.event_destroy(event) == HAL_SUCCESS);  // the wait keeps what it needs
  REQUIRE(t.stream_enqueue_host_fn(consumer, &append_value, &second) == HAL_SUCCESS);
  REQUIRE(t.stream_destroy(consumer) == HAL_SUCCESS);  // waits for the producer's event
  REQUIRE(log.order == std::vector<int>{1, 2});
  REQUIRE(t.stream_destroy(producer) == HAL_SUCCESS);

  // Streams, events, modules and memory left behind are freed by device_close
  // and plugin_shutdown (the harness's destructor).
  hal_impl_stream_t* leaked = make_stream(t, device);
  REQUIRE(t.stream_enqueue_host_fn(leaked, &sleep_a_little, nullptr) == HAL_SUCCESS);
  make_event(t, device);
  alloc(t, device, 1 << 22);
  TestModule* module = new TestModule(t, device);
  (void)module->kernel("empty");
  module->module = nullptr;  // leak it on purpose; the destructor would unload it
  delete module;
}

TEST_CASE("device_synchronize waits for every stream", "[cpu][table][device]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(1);
  std::vector<hal_impl_stream_t*> streams;
  HostFnLog logs[4];
  HostFnCall calls[4];
  for (int i = 0; i < 4; ++i) {
    streams.push_back(make_stream(t, device));
    calls[i] = {&logs[i], i};
    REQUIRE(t.stream_enqueue_host_fn(streams[i], &sleep_a_little, nullptr) == HAL_SUCCESS);
    REQUIRE(t.stream_enqueue_host_fn(streams[i], &append_value, &calls[i]) == HAL_SUCCESS);
  }
  REQUIRE(t.device_synchronize(device) == HAL_SUCCESS);
  for (int i = 0; i < 4; ++i) {
    CHECK(logs[i].order == std::vector<int>{i});
    CHECK(t.stream_query(streams[i]) == HAL_SUCCESS);
    REQUIRE(t.stream_destroy(streams[i]) == HAL_SUCCESS);
  }
}

TEST_CASE("cross-stream, cross-device ping-pong from several threads", "[cpu][table][event]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* d0 = plugin.device(0);
  hal_impl_device_t* d1 = plugin.device(1);
  TestModule m0(t, d0);
  TestModule m1(t, d1);
  hal_impl_kernel_t* affine0 = m0.kernel("affine_u32");
  hal_impl_kernel_t* affine1 = m1.kernel("affine_u32");
  constexpr int kThreads = 4;
  constexpr int kRounds = 60;
  constexpr uint32_t n = 1000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      hal_impl_stream_t *s0 = nullptr, *s1 = nullptr;
      hal_impl_event_t *e0 = nullptr, *e1 = nullptr;
      void *p0 = nullptr, *p1 = nullptr;
      bool ok = t.stream_create(d0, 0, &s0) == HAL_SUCCESS &&
                t.stream_create(d1, 0, &s1) == HAL_SUCCESS &&
                t.event_create(d0, 0, &e0) == HAL_SUCCESS &&
                t.event_create(d1, 0, &e1) == HAL_SUCCESS &&
                t.mem_alloc(d0, HAL_MEMORY_DEVICE, n * 4, 64, &p0) == HAL_SUCCESS &&
                t.mem_alloc(d1, HAL_MEMORY_DEVICE, n * 4, 64, &p1) == HAL_SUCCESS;
      if (!ok) {
        ++failures;
        return;
      }
      auto* x0 = static_cast<uint32_t*>(p0);
      auto* x1 = static_cast<uint32_t*>(p1);
      std::mt19937 random(100 + id);
      std::vector<uint32_t> host(n);
      for (uint32_t& v : host) v = random();
      std::vector<uint32_t> initial = host;
      ok &= t.memcpy_async(s0, x0, initial.data(), n * 4) == HAL_SUCCESS;
      for (int round = 0; round < kRounds && ok; ++round) {
        const uint32_t a0 = random() | 1, b0 = random(), a1 = random() | 1, b1 = random();
        // device 0 works, hands over to device 1, which works and hands back.
        ok &= launch_affine(t, s0, affine0, x0, n, a0, b0) == HAL_SUCCESS;
        ok &= t.event_record(e0, s0) == HAL_SUCCESS;
        ok &= t.stream_wait_event(s1, e0) == HAL_SUCCESS;
        ok &= t.memcpy_async(s1, x1, x0, n * 4) == HAL_SUCCESS;
        ok &= launch_affine(t, s1, affine1, x1, n, a1, b1) == HAL_SUCCESS;
        ok &= t.event_record(e1, s1) == HAL_SUCCESS;
        ok &= t.stream_wait_event(s0, e1) == HAL_SUCCESS;
        ok &= t.memcpy_async(s0, x0, x1, n * 4) == HAL_SUCCESS;
        for (uint32_t& v : host) v = (v * a0 + b0) * a1 + b1;
      }
      std::vector<uint32_t> result(n);
      ok &= t.memcpy_async(s0, result.data(), x0, n * 4) == HAL_SUCCESS;
      ok &= t.stream_synchronize(s0) == HAL_SUCCESS;
      ok &= result == host;
      ok &= t.stream_destroy(s0) == HAL_SUCCESS;
      ok &= t.stream_destroy(s1) == HAL_SUCCESS;
      ok &= t.event_destroy(e0) == HAL_SUCCESS;
      ok &= t.event_destroy(e1) == HAL_SUCCESS;
      ok &= t.mem_free(d0, p0) == HAL_SUCCESS;
      ok &= t.mem_free(d1, p1) == HAL_SUCCESS;
      if (!ok) ++failures;
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures == 0);
}

TEST_CASE("enqueue on one stream from several threads is serialised", "[cpu][table][stream]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_stream_t* stream = make_stream(t, plugin.device(0));
  std::atomic<int> counter{0};
  struct Bump {
    static void run(void* user_data) {
      static_cast<std::atomic<int>*>(user_data)->fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 2000; ++k) t.stream_enqueue_host_fn(stream, &Bump::run, &counter);
      t.stream_synchronize(stream);
    });
  }
  for (std::thread& thread : threads) thread.join();
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(counter.load() == 8000);
  REQUIRE(t.stream_destroy(stream) == HAL_SUCCESS);
}
