// core.events: completion, host waits, cross-stream and cross-device waits,
// re-recording, destruction with waits pending, and timing.
#include <atomic>
#include <chrono>
#include <thread>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

void sleep_20ms(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// Stream |waiter| waits on |event|, recorded on |producer| behind a gate and
// a fill of |buffer|; the waiter then copies |buffer| to the host. The host
// must see the fill, which only happens if the wait held the copy back.
void check_wait(hal_stream_t producer, hal_stream_t waiter, hal_event_t event,
                const Buffer& buffer) {
  HostGate gate;
  HC_OK(hal_memset_async(buffer.get(), 0x01, buffer.size(), producer));
  HC_OK(hal_stream_synchronize(producer));
  gate.enqueue_on(producer);
  HC_OK(hal_memset_async(buffer.get(), 0x99, buffer.size(), producer));
  HC_OK(hal_event_record(event, producer));
  HC_OK(hal_stream_wait_event(waiter, event));
  std::vector<uint8_t> host(buffer.size(), 0);
  std::atomic<bool> waiter_done{false};
  // The waiter's work writes |host| and |waiter_done|: it is drained (the
  // gate opened first) before they go, also when a check throws (the caller
  // owns the stream).
  struct Drain {
    HostGate& gate;
    hal_stream_t stream;
    ~Drain() {
      gate.release();
      hal_stream_synchronize(stream);
    }
  } drain{gate, waiter};
  HC_OK(hal_memcpy_async(host.data(), buffer.get(), host.size(), waiter));
  HC_OK(hal_stream_enqueue_host_fn(waiter, set_flag, &waiter_done));
  // Give the waiter time to run ahead while the producer is still held: a
  // stream that ignored the wait finishes its copy now. Without this pause a
  // plugin whose executor starts a moment later would copy after the release
  // and pass by luck. A correct plugin costs the whole pause.
  const auto pause_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (!waiter_done.load() && std::chrono::steady_clock::now() < pause_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool ran_ahead = waiter_done.load();
  // Release, drain, then check the gate: |host| must outlive the queued copy.
  gate.release();
  HC_OK(hal_stream_synchronize(waiter));
  HC_OK(hal_stream_synchronize(producer));
  gate.open();
  HC_REQUIRE(!ran_ahead,
             "hal_stream_wait_event: the waiting stream ran its copy and a host function while "
             "the event's work was still held behind a gate: it did not wait for the event");
  for (size_t i = 0; i < host.size(); i += 511) {
    HC_REQUIRE(host[i] == 0x99, strf("byte %zu copied after the wait is 0x%02x: the waiting "
                                     "stream did not wait for the event",
                                     i, host[i]));
  }
}

}  // namespace

HALCONFORM_TEST("core.events.create",
                "a new event is complete; unknown flags are invalid; TIMING needs the capability",
                {}) {
  Event event(ctx.device());
  HC_OK(hal_event_query(event));
  HC_OK(hal_event_synchronize(event));
  hal_event_t other = nullptr;
  HC_EXPECT_RESULT(hal_event_create(ctx.device(), 0x80, &other), HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(hal_event_create(ctx.device(), 0, nullptr), HAL_ERROR_NULL_POINTER);
  if (!ctx.has(HAL_DEVICE_CAP_EVENT_TIMING)) {
    HC_EXPECT_RESULT(hal_event_create(ctx.device(), HAL_EVENT_FLAG_TIMING, &other),
                     HAL_ERROR_UNSUPPORTED);
  }
  HC_OK(hal_event_destroy(nullptr));
}

HALCONFORM_TEST("core.events.query",
                "an event over held work is NOT_READY until the work completes",
                {.capabilities = HAL_DEVICE_CAP_STREAM_QUERY | HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  Stream stream(ctx.device());
  Event event(ctx.device());
  HostGate gate;
  gate.enqueue_on(stream);
  HC_OK(hal_event_record(event, stream));
  HC_EXPECT_RESULT(hal_event_query(event), HAL_NOT_READY);
  gate.open();
  HC_OK(hal_event_synchronize(event));
  HC_OK(hal_event_query(event));
}

HALCONFORM_TEST("core.events.synchronize",
                "hal_event_synchronize returns only after the captured work has run",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  // Declared before the stream, whose destruction runs what is still queued:
  // a plugin that returns early must fail the check, not write a dead flag.
  std::atomic<bool> ran{false};
  Stream stream(ctx.device());
  Event event(ctx.device());
  HostGate gate;
  gate.enqueue_on(stream);
  HC_OK(hal_stream_enqueue_host_fn(stream, set_flag, &ran));
  HC_OK(hal_event_record(event, stream));
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.release();
  });
  const hal_result_t result = hal_event_synchronize(event);
  const bool ran_before_return = ran.load();
  opener.join();
  gate.open();  // fails the test if the gate had to open by itself
  HC_OK(result);
  HC_REQUIRE(ran_before_return, "hal_event_synchronize returned before the captured work ran");
}

HALCONFORM_TEST("core.events.cross_stream_wait",
                "a stream waiting on another stream's event runs after the event's work",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  Stream producer(ctx.device()), waiter(ctx.device());
  Event event(ctx.device());
  Buffer buffer(ctx.device(), 100000);
  check_wait(producer, waiter, event, buffer);
}

HALCONFORM_TEST("core.events.cross_device_wait",
                "a stream of another device waits on this device's event",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS, .min_devices = 2}) {
  Stream producer(ctx.device()), waiter(ctx.peer_device());
  Event event(ctx.device());
  Buffer buffer(ctx.device(), 100000);
  if ((ctx.peer_properties().capabilities & HAL_DEVICE_CAP_PEER_ACCESS) == 0 ||
      !ctx.has(HAL_DEVICE_CAP_PEER_ACCESS)) {
    ctx.skip("the devices do not declare HAL_DEVICE_CAP_PEER_ACCESS for the copy");
  }
  check_wait(producer, waiter, event, buffer);
  Stream peer_stream(ctx.peer_device());
  HC_EXPECT_RESULT(hal_event_record(event, peer_stream), HAL_ERROR_DEVICE_MISMATCH);
}

HALCONFORM_TEST("core.events.rerecord",
                "re-recording moves the captured point; waits enqueued before keep the old one",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  std::atomic<bool> waiter_ran{false};  // outlives the streams (see core.events.synchronize)
  Stream stream(ctx.device()), waiter(ctx.device());
  Event event(ctx.device());
  HostGate first, second;
  first.enqueue_on(stream);
  HC_OK(hal_event_record(event, stream));
  HC_OK(hal_stream_wait_event(waiter, event));  // captures the first point
  HC_OK(hal_stream_enqueue_host_fn(waiter, set_flag, &waiter_ran));
  second.enqueue_on(stream);
  HC_OK(hal_event_record(event, stream));  // the event now waits for |second| too
  first.open();
  HC_OK(hal_stream_synchronize(waiter));  // must not need |second|
  HC_REQUIRE(waiter_ran.load(), "the wait did not complete at its captured point");
  HC_REQUIRE(!second.was_held_open_by_timeout(), "the waiter waited for the re-recorded point");
  if (ctx.has(HAL_DEVICE_CAP_STREAM_QUERY)) {
    HC_EXPECT_RESULT(hal_event_query(event), HAL_NOT_READY);
  }
  second.open();
  HC_OK(hal_event_synchronize(event));
}

HALCONFORM_TEST("core.events.destroy_pending",
                "an event destroyed while a wait on it is pending still orders the wait",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  Stream producer(ctx.device()), waiter(ctx.device());
  Buffer buffer(ctx.device(), 4096);
  HostGate gate;
  hal_event_t event = nullptr;
  HC_OK(hal_event_create(ctx.device(), 0, &event));
  gate.enqueue_on(producer);
  HC_OK(hal_memset_async(buffer.get(), 0x5e, buffer.size(), producer));
  HC_OK(hal_event_record(event, producer));
  HC_OK(hal_stream_wait_event(waiter, event));
  HC_OK(hal_event_destroy(event));
  std::vector<uint8_t> host(buffer.size(), 0);
  HC_OK(hal_memcpy_async(host.data(), buffer.get(), host.size(), waiter));
  gate.release();
  HC_OK(hal_stream_synchronize(waiter));
  gate.open();
  HC_REQUIRE(host[0] == 0x5e && host.back() == 0x5e,
             "the wait on a destroyed event did not hold back the copy");
}

HALCONFORM_TEST("core.events.timing",
                "elapsed time spans the work between two timing events; misuse is INVALID_STATE",
                {.capabilities = HAL_DEVICE_CAP_EVENT_TIMING}) {
  Stream stream(ctx.device());
  Event start(ctx.device(), HAL_EVENT_FLAG_TIMING), end(ctx.device(), HAL_EVENT_FLAG_TIMING);
  Event plain(ctx.device());
  float ms = -1;
  HC_EXPECT_RESULT(hal_event_elapsed_ms(start, end, &ms), HAL_ERROR_INVALID_STATE);
  const auto before = std::chrono::steady_clock::now();
  HC_OK(hal_event_record(start, stream));
  HC_OK(hal_stream_enqueue_host_fn(stream, sleep_20ms, nullptr));
  HC_OK(hal_event_record(end, stream));
  HC_OK(hal_event_synchronize(end));
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - before).count();
  HC_OK(hal_event_elapsed_ms(start, end, &ms));
  // Gross bounds only: the 20 ms sleep lies between the two completions, and
  // nothing between them can take longer than the host saw.
  HC_REQUIRE(ms >= 15.0f && ms <= wall_ms + 5.0,
             strf("elapsed %.3f ms for a 20 ms host function (host saw %.3f ms)", ms, wall_ms));
  float backwards = 0;
  HC_OK(hal_event_elapsed_ms(end, start, &backwards));
  HC_REQUIRE(backwards <= 0, strf("elapsed(end, start) is %.3f ms, expected <= 0", backwards));
  HC_OK(hal_event_record(plain, stream));
  HC_OK(hal_stream_synchronize(stream));
  HC_EXPECT_RESULT(hal_event_elapsed_ms(start, plain, &ms), HAL_ERROR_INVALID_STATE);
  HC_EXPECT_RESULT(hal_event_elapsed_ms(start, end, nullptr), HAL_ERROR_NULL_POINTER);
}

}  // namespace halconform
