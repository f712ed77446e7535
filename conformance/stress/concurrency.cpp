// stress.concurrency: many threads driving many streams at once, and
// threads creating and destroying objects concurrently, for --duration.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

using Clock = std::chrono::steady_clock;

// Runs |body(thread_index, deadline)| on |threads| threads; the first error
// message any thread reports fails the test.
template <typename Body>
void run_threads(int threads, double seconds, Body body) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  std::mutex mutex;
  std::string first_error;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        body(t, deadline);
      } catch (const std::exception& error) {
        std::lock_guard lock(mutex);
        if (first_error.empty()) first_error = strf("thread %d: ", t) + error.what();
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
  if (!first_error.empty()) fail(first_error);
}

int thread_count(const TestContext& ctx) {
  return static_cast<int>(std::clamp<uint32_t>(ctx.properties().compute_units, 4, 8));
}

}  // namespace

HALCONFORM_TEST("stress.concurrency.threads_streams",
                "threads x streams: copies joined by events across streams stay exact", {}) {
  std::atomic<uint64_t> rounds{0};
  run_threads(thread_count(ctx), ctx.stress_seconds(), [&](int t, Clock::time_point deadline) {
    Stream first(ctx.device()), second(ctx.device());
    Event handoff(ctx.device());
    Buffer a(ctx.device(), 1 << 18), b(ctx.device(), 1 << 18);
    std::mt19937_64 random(static_cast<uint64_t>(t) * 7777 + 1);
    std::vector<uint8_t> back(a.size());
    for (uint64_t round = 0; Clock::now() < deadline; ++round) {
      const size_t size = 1 + random() % a.size();
      const std::vector<uint8_t> data = random_bytes(size, random());
      HC_OK(hal_memcpy_async(a.get(), data.data(), size, first));
      HC_OK(hal_memcpy_async(b.get(), a.get(), size, first));
      HC_OK(hal_event_record(handoff, first));
      HC_OK(hal_stream_wait_event(second, handoff));
      HC_OK(hal_memcpy_async(back.data(), b.get(), size, second));
      HC_OK(hal_stream_synchronize(second));
      HC_REQUIRE(std::equal(data.begin(), data.end(), back.begin()),
                 strf("round %llu: %zu bytes through two streams came back different",
                      static_cast<unsigned long long>(round), size));
      rounds.fetch_add(1);
    }
  });
  ctx.note(strf("%llu verified rounds on %d threads x 2 streams",
                static_cast<unsigned long long>(rounds.load()), thread_count(ctx)));
}

HALCONFORM_TEST("stress.concurrency.create_destroy",
                "threads creating and destroying streams, events and allocations concurrently",
                {}) {
  std::atomic<uint64_t> objects{0};
  run_threads(thread_count(ctx), ctx.stress_seconds(), [&](int t, Clock::time_point deadline) {
    std::mt19937_64 random(static_cast<uint64_t>(t) + 99);
    while (Clock::now() < deadline) {
      Stream stream(ctx.device());
      Event event(ctx.device());
      Buffer buffer(ctx.device(), 1 + random() % 100000);
      HC_OK(hal_memset_async(buffer.get(), static_cast<uint8_t>(t), buffer.size(), stream));
      HC_OK(hal_event_record(event, stream));
      HC_OK(hal_event_synchronize(event));
      objects.fetch_add(3);
    }
  });
  ctx.note(strf("%llu objects made and released", static_cast<unsigned long long>(objects.load())));
}

}  // namespace halconform
