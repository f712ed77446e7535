// core.host_functions: what a host function may call (SPEC.md §7): the calls
// that would wait for itself are refused with HAL_ERROR_INVALID_STATE before
// they do anything, waits on other streams and devices are allowed and
// complete. And timing: elapsed time across streams, with every event flag.
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "api_model.hpp"
#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
#include "kernel_sources.hpp"

namespace halconform {
namespace {

// What one host function did from inside its stream.
struct Inside {
  hal_stream_t own = nullptr;
  hal_stream_t other = nullptr;  // a stream of the same device with pending work
  hal_device_t device = nullptr;
  hal_device_t peer = nullptr;    // another device, or nullptr
  void* allocation = nullptr;     // of the own device
  hal_module_t module = nullptr;  // of the own device, or nullptr
  std::atomic<bool>* other_done = nullptr;
  hal_result_t sync_own = HAL_SUCCESS, destroy_own = HAL_SUCCESS, device_own = HAL_SUCCESS,
               free_own = HAL_SUCCESS, unload_own = HAL_SUCCESS, sync_other = HAL_ERROR_INTERNAL,
               device_peer = HAL_ERROR_INTERNAL;
  bool other_done_after_sync = false;
  bool ran = false;
};

void call_from_inside(void* data) {
  auto* in = static_cast<Inside*>(data);
  in->sync_own = hal_stream_synchronize(in->own);
  in->destroy_own = hal_stream_destroy(in->own);
  in->device_own = hal_device_synchronize(in->device);
  in->free_own = hal_mem_free(in->allocation);
  if (in->module != nullptr) in->unload_own = hal_module_unload(in->module);
  in->sync_other = hal_stream_synchronize(in->other);
  in->other_done_after_sync = in->other_done->load();
  if (in->peer != nullptr) in->device_peer = hal_device_synchronize(in->peer);
  in->ran = true;
}

void sleep_ms(void* milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(milliseconds)));
}

void expect_refused_inside_host_function(hal_result_t result, const char* call) {
  HC_REQUIRE(result == HAL_ERROR_INVALID_STATE,
             strf("%s from a host function returned %s, expected HAL_ERROR_INVALID_STATE: it "
                  "would wait for the host function itself (SPEC.md §7)",
                  call, hal_result_string(result)));
}

}  // namespace

HALCONFORM_TEST("core.host_functions.calls",
                "a host function's calls that would wait for itself are refused and change "
                "nothing; its waits on other streams and devices complete",
                {}) {
  Stream own(ctx.device()), other(ctx.device());
  Inside inside;
  inside.own = own;
  inside.other = other;
  inside.device = ctx.device();
  inside.peer = ctx.peer_device();
  HC_OK(hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, 4096, 0, &inside.allocation));
  AllocationList owned;
  owned.pointers.push_back(inside.allocation);
  std::vector<KernelSource> sources = kernel_sources(ctx);
  std::unique_ptr<SourceModule> module;
  for (const KernelSource& source : sources) {
    module = std::make_unique<SourceModule>(ctx.device(), source);
    if (module->load_result() == HAL_SUCCESS) break;
    module.reset();
  }
  if (module) inside.module = module->get();
  // Work pending on the other stream: a wait on it must see it done.
  std::atomic<bool> other_done{false};
  inside.other_done = &other_done;
  int pause = 20;
  HC_OK(hal_stream_enqueue_host_fn(other, sleep_ms, &pause));
  HC_OK(hal_stream_enqueue_host_fn(other, set_flag, &other_done));
  HC_OK(hal_stream_enqueue_host_fn(own, call_from_inside, &inside));
  HC_OK(hal_stream_synchronize(own));
  HC_OK(hal_stream_synchronize(other));
  HC_REQUIRE(inside.ran, std::string("the host function did not run"));
  expect_refused_inside_host_function(inside.sync_own, "hal_stream_synchronize of its own stream");
  expect_refused_inside_host_function(inside.destroy_own, "hal_stream_destroy of its own stream");
  expect_refused_inside_host_function(inside.device_own,
                                      "hal_device_synchronize of its own device");
  expect_refused_inside_host_function(inside.free_own,
                                      "hal_mem_free of an allocation of its own device");
  if (inside.module != nullptr) {
    expect_refused_inside_host_function(inside.unload_own,
                                        "hal_module_unload of a module of its own device");
  }
  // Refused before doing anything: the stream, the allocation and the module live on.
  const hal_result_t still = hal_stream_query(own);
  HC_REQUIRE(still == HAL_SUCCESS || still == HAL_NOT_READY,
             strf("hal_stream_destroy from a host function was refused, yet its stream answers "
                  "hal_stream_query with %s",
                  hal_result_string(still)));
  hal_memory_info_t info{};
  info.struct_size = sizeof(info);
  HC_REQUIRE(hal_mem_get_info(inside.allocation, &info) == HAL_SUCCESS,
             std::string("hal_mem_free from a host function was refused, yet the allocation is "
                         "gone"));
  HC_OK(hal_memset_async(inside.allocation, 0, 4096, own));
  HC_OK(hal_stream_synchronize(own));
  HC_REQUIRE(inside.sync_other == HAL_SUCCESS && inside.other_done_after_sync,
             strf("hal_stream_synchronize of another stream of the device, from a host function, "
                  "returned %s with that stream's work %s: waits on other streams are allowed "
                  "and wait (SPEC.md §7)",
                  hal_result_string(inside.sync_other),
                  inside.other_done_after_sync ? "done" : "not done"));
  if (inside.peer != nullptr) {
    HC_REQUIRE(inside.device_peer == HAL_SUCCESS,
               strf("hal_device_synchronize of another device from a host function returned %s; "
                    "waits on other devices are allowed (SPEC.md §7)",
                    hal_result_string(inside.device_peer)));
  }
}

HALCONFORM_TEST("core.events.timing_across_streams",
                "elapsed time between events of two streams of the device is signed and "
                "antisymmetric; every event flag behaves as declared",
                {}) {
  // Every value of hal_event_flag_bits_t, as the headers define them.
  const model::EnumType* flags = model::find_enum("hal_event_flag_bits_t");
  HC_REQUIRE(flags != nullptr, std::string("the API model has no hal_event_flag_bits_t"));
  for (const model::EnumValue& flag : flags->values) {
    hal_event_t event = nullptr;
    const hal_result_t created =
        hal_event_create(ctx.device(), static_cast<hal_event_flags_t>(flag.value), &event);
    const bool timing = (flag.value & HAL_EVENT_FLAG_TIMING) != 0;
    if (timing && !ctx.has(HAL_DEVICE_CAP_EVENT_TIMING)) {
      HC_REQUIRE(created == HAL_ERROR_UNSUPPORTED,
                 strf("hal_event_create(%s) without HAL_DEVICE_CAP_EVENT_TIMING returned %s, "
                      "expected HAL_ERROR_UNSUPPORTED",
                      flag.name, hal_result_string(created)));
      continue;
    }
    HC_REQUIRE(created == HAL_SUCCESS, strf("hal_event_create(%s) returned %s: %s", flag.name,
                                            hal_result_string(created), hal_error_last_message()));
    Stream stream(ctx.device());
    HC_OK(hal_event_record(event, stream));
    HC_OK(hal_event_synchronize(event));
    float ms = 0;
    const hal_result_t elapsed = hal_event_elapsed_ms(event, event, &ms);
    HC_OK(hal_event_destroy(event));
    HC_REQUIRE(timing ? elapsed == HAL_SUCCESS && ms == 0.0f : elapsed == HAL_ERROR_INVALID_STATE,
               strf("hal_event_elapsed_ms of an event created with %s and itself returned %s "
                    "(%.3f ms), expected %s",
                    flag.name, hal_result_string(elapsed), ms,
                    timing ? "HAL_SUCCESS and 0 ms" : "HAL_ERROR_INVALID_STATE (no timing)"));
  }
  if (!ctx.has(HAL_DEVICE_CAP_EVENT_TIMING)) {
    ctx.note("no HAL_DEVICE_CAP_EVENT_TIMING: HAL_EVENT_FLAG_TIMING is refused");
    return;
  }
  // Stream b's event completes first; stream a's after a pause that starts later.
  Stream a(ctx.device()), b(ctx.device());
  Event early(ctx.device(), HAL_EVENT_FLAG_TIMING), late(ctx.device(), HAL_EVENT_FLAG_TIMING);
  HC_OK(hal_event_record(early, b));
  HC_OK(hal_event_synchronize(early));
  int pause = 100;
  const auto before = std::chrono::steady_clock::now();
  HC_OK(hal_stream_enqueue_host_fn(a, sleep_ms, &pause));
  HC_OK(hal_event_record(late, a));
  HC_OK(hal_event_synchronize(late));
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - before).count();
  float forward = 0, backward = 0;
  HC_OK(hal_event_elapsed_ms(early, late, &forward));
  HC_OK(hal_event_elapsed_ms(late, early, &backward));
  // Gross bounds only: the pause lies between the two completions.
  HC_REQUIRE(forward >= 0.8f * static_cast<float>(pause) && forward <= wall_ms + 1000.0,
             strf("hal_event_elapsed_ms(early on stream b, late on stream a) is %.3f ms for a %d "
                  "ms pause between them (the host saw %.1f ms from before the pause): one clock "
                  "across the device's streams",
                  forward, pause, wall_ms));
  HC_REQUIRE(std::fabs(forward + backward) <= 0.001f * std::fabs(forward) + 0.01f,
             strf("hal_event_elapsed_ms is %.3f ms one way and %.3f ms the other across two "
                  "streams: expected the negative (SPEC.md §7, timing)",
                  forward, backward));
  ctx.note(strf("%.3f ms across streams for a %d ms pause", forward, pause));
}

}  // namespace halconform
