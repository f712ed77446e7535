// core.streams: creation, in-order execution, host functions, queries,
// synchronisation and destruction of streams with work pending.
#include <algorithm>
#include <atomic>
#include <thread>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

struct OrderLog {
  std::mutex mutex;
  std::vector<int> order;
  const uint8_t* watched = nullptr;  // host-visible byte each host function reads
  std::vector<uint8_t> seen;
};

struct LogEntry {
  OrderLog* log;
  int index;
};

void log_host_fn(void* user_data) {
  auto* entry = static_cast<LogEntry*>(user_data);
  std::lock_guard lock(entry->log->mutex);
  entry->log->order.push_back(entry->index);
  if (entry->log->watched != nullptr) entry->log->seen.push_back(*entry->log->watched);
}

}  // namespace

HALCONFORM_TEST("core.streams.create_destroy",
                "many streams are created and destroyed; unknown flags are invalid", {}) {
  std::vector<Stream> streams;
  for (int i = 0; i < 64; ++i) streams.emplace_back(ctx.device());
  hal_device_t owner = nullptr;
  HC_OK(hal_stream_get_device(streams.back(), &owner));
  HC_REQUIRE(owner == ctx.device(), "hal_stream_get_device names another device");
  hal_stream_t stream = nullptr;
  HC_EXPECT_RESULT(hal_stream_create(ctx.device(), 0x4, &stream), HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(hal_stream_create(ctx.device(), 0, nullptr), HAL_ERROR_NULL_POINTER);
  HC_OK(hal_stream_destroy(nullptr));
  HC_OK(hal_stream_destroy(streams.back().release()));
}

HALCONFORM_TEST("core.streams.in_order",
                "fills and copies held behind a host function run in enqueue order",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  Stream stream(ctx.device());
  Buffer a(ctx.device(), 65536), b(ctx.device(), 65536);
  HostGate gate;
  gate.enqueue_on(stream);
  // b ends as 3s only if every step runs after the one before it.
  HC_OK(hal_memset_async(a.get(), 1, a.size(), stream));
  HC_OK(hal_memcpy_async(b.get(), a.get(), a.size(), stream));
  HC_OK(hal_memset_async(a.get(), 2, a.size(), stream));
  HC_OK(hal_memset_async(b.bytes() + 100, 3, b.size() - 100, stream));
  HC_OK(hal_memcpy_async(a.get(), b.get(), a.size(), stream));
  HC_OK(hal_memset_async(b.get(), 3, 100, stream));
  gate.open();
  const std::vector<uint8_t> got_a = read_back(stream, a.get(), a.size());
  const std::vector<uint8_t> got_b = read_back(stream, b.get(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const uint8_t want_a = i < 100 ? 1 : 3;
    HC_REQUIRE(got_a[i] == want_a && got_b[i] == 3,
               strf("byte %zu: a=%u b=%u, expected a=%u b=3: work ran out of order", i, got_a[i],
                    got_b[i], want_a));
  }
}

HALCONFORM_TEST("core.streams.host_fn_order",
                "host functions run in order, after the work before them",
                {.capabilities = HAL_DEVICE_CAP_HOST_MEMORY}) {
  Stream stream(ctx.device());
  Buffer flag(ctx.device(), 64, HAL_MEMORY_HOST);
  OrderLog log;
  log.watched = flag.bytes();
  std::vector<LogEntry> entries;
  for (int i = 0; i < 50; ++i) entries.push_back({&log, i});
  for (int i = 0; i < 50; ++i) {
    HC_OK(hal_memset_async(flag.get(), static_cast<uint8_t>(i + 1), 64, stream));
    HC_OK(hal_stream_enqueue_host_fn(stream, &log_host_fn, &entries[i]));
  }
  HC_OK(hal_stream_synchronize(stream));
  HC_REQUIRE(log.order.size() == 50, strf("%zu of 50 host functions ran", log.order.size()));
  for (int i = 0; i < 50; ++i) {
    HC_REQUIRE(log.order[i] == i, strf("host function %d ran in position %d", log.order[i], i));
    HC_REQUIRE(log.seen[i] == i + 1,
               strf("host function %d saw the fill value %u, expected %d", i, log.seen[i], i + 1));
  }
  HC_EXPECT_RESULT(hal_stream_enqueue_host_fn(stream, nullptr, nullptr), HAL_ERROR_NULL_POINTER);
}

HALCONFORM_TEST("core.streams.query",
                "hal_stream_query is NOT_READY while work is held and SUCCESS after it",
                {.capabilities = HAL_DEVICE_CAP_STREAM_QUERY | HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  Stream stream(ctx.device());
  HC_OK(hal_stream_query(stream));
  HostGate gate;
  gate.enqueue_on(stream);
  HC_EXPECT_RESULT(hal_stream_query(stream), HAL_NOT_READY);
  gate.open();
  HC_OK(hal_stream_synchronize(stream));
  HC_OK(hal_stream_query(stream));
}

HALCONFORM_TEST("core.streams.synchronize",
                "stream and device synchronize wait for every stream's work",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  std::atomic<int> done{0};  // outlives the streams that count into it
  std::vector<Stream> streams;
  for (int i = 0; i < 3; ++i) streams.emplace_back(ctx.device());
  auto count = [](void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); };
  HostGate gate;
  for (Stream& stream : streams) {
    gate.enqueue_on(stream);
    HC_OK(hal_stream_enqueue_host_fn(stream, count, &done));
  }
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.release();
  });
  HC_OK(hal_stream_synchronize(streams[0]));
  const int after_stream = done.load();
  HC_OK(hal_device_synchronize(ctx.device()));
  const int after_device = done.load();
  opener.join();
  gate.open();  // fails the test if the gate had to open by itself
  HC_REQUIRE(after_stream >= 1, "hal_stream_synchronize returned before its stream's work ran");
  HC_REQUIRE(after_device == 3,
             strf("hal_device_synchronize returned with %d of 3 streams' work done", after_device));
}

HALCONFORM_TEST("core.streams.destroy_drains",
                "destroying a stream with pending work runs the work first and returns SUCCESS",
                {}) {
  std::vector<uint8_t> host(1 << 20, 0);
  Buffer buffer(ctx.device(), host.size());
  hal_stream_t stream = nullptr;
  HC_OK(hal_stream_create(ctx.device(), 0, &stream));
  HC_OK(hal_memset_async(buffer.get(), 0x77, buffer.size(), stream));
  HC_OK(hal_memcpy_async(host.data(), buffer.get(), host.size(), stream));
  HC_OK(hal_stream_destroy(stream));
  for (size_t i = 0; i < host.size(); i += 4093) {
    HC_REQUIRE(host[i] == 0x77,
               strf("byte %zu is 0x%02x after the stream was destroyed", i, host[i]));
  }
}

HALCONFORM_TEST("core.streams.concurrent_enqueue",
                "several threads enqueueing on one stream are serialised, nothing lost", {}) {
  Stream stream(ctx.device());
  constexpr int kThreads = 4, kCopies = 64;
  Buffer source(ctx.device(), kThreads * kCopies * 64);
  std::vector<uint8_t> host(source.size(), 0);
  const std::vector<uint8_t> data = random_bytes(source.size(), 5);
  HC_OK(hal_memcpy_async(source.get(), data.data(), data.size(), stream));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCopies; ++c) {
        const size_t offset = static_cast<size_t>(t * kCopies + c) * 64;
        if (hal_memcpy_async(host.data() + offset, source.bytes() + offset, 64, stream) !=
            HAL_SUCCESS) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  HC_OK(hal_stream_synchronize(stream));
  HC_REQUIRE(failures.load() == 0, strf("%d concurrent enqueues failed", failures.load()));
  if (host != data) {
    const auto at = static_cast<size_t>(
        std::mismatch(host.begin(), host.end(), data.begin()).first - host.begin());
    fail(
        strf("hal_memcpy_async #%zu of thread %zu (64 bytes at offset %zu), enqueued "
             "concurrently on one stream: byte %zu is 0x%02x, expected 0x%02x: lost or "
             "corrupted data",
             at / 64 % kCopies, at / 64 / kCopies, at / 64 * 64, at, host[at], data[at]));
  }
}

HALCONFORM_TEST("core.streams.device_synchronize",
                "hal_device_synchronize alone waits for the work of every stream of the device",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  constexpr int kStreams = 4;
  // What the streams' work writes outlives the streams (their destruction
  // runs what a faulty plugin left queued).
  std::vector<std::vector<uint8_t>> host(kStreams, std::vector<uint8_t>(65536, 0));
  std::atomic<int> done{0};
  std::vector<Stream> streams;
  std::vector<Buffer> buffers;
  for (int i = 0; i < kStreams; ++i) {
    streams.emplace_back(ctx.device());
    buffers.emplace_back(ctx.device(), 65536);
  }
  auto count = [](void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); };
  HostGate gate;
  for (int i = 0; i < kStreams; ++i) {
    gate.enqueue_on(streams[i]);
    HC_OK(hal_memset_async(buffers[i].get(), static_cast<uint8_t>(0x40 + i), 65536, streams[i]));
    HC_OK(hal_memcpy_async(host[i].data(), buffers[i].get(), 65536, streams[i]));
    HC_OK(hal_stream_enqueue_host_fn(streams[i], count, &done));
  }
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.release();
  });
  // Only the device-wide wait: no stream is synchronised on its own first.
  const hal_result_t result = hal_device_synchronize(ctx.device());
  const int after_device = done.load();
  int unfinished = 0;
  for (int i = 0; i < kStreams; ++i) {
    if (host[i][0] != 0x40 + i || host[i][65535] != 0x40 + i) ++unfinished;
  }
  opener.join();
  for (Stream& stream : streams) hal_stream_synchronize(stream);  // before |host| may go
  gate.open();
  HC_OK(result);
  HC_REQUIRE(after_device == kStreams && unfinished == 0,
             strf("hal_device_synchronize returned with %d of %d streams' work done (%d streams' "
                  "fill and copy not finished)",
                  after_device, kStreams, unfinished));
}

}  // namespace halconform
