// Events of the hip plugin: hipEvent_t recorded on streams, waited for,
// queried and timed.
#include "event.hpp"

#include <memory>

#include "device.hpp"
#include "stream.hpp"

namespace hal::hip {

hal_result_t Event::create(Device& device, hal_event_flags_t flags, Event*& out_event) {
  const bool timing = (flags & HAL_EVENT_FLAG_TIMING) != 0;
  hipEvent_t created = nullptr;
  const hal_result_t result =
      device.run("event_create: hipEventCreateWithFlags", [&](const RuntimeApi& hip) {
        return hip.hipEventCreateWithFlags(&created,
                                           timing ? hipEventDefault : hipEventDisableTiming);
      });
  if (result != HAL_SUCCESS) return result;
  std::unique_ptr<Event> owned;
  try {
    owned = std::make_unique<Event>(device, created, timing);
  } catch (...) {
    (void)device.api().hipEventDestroy(created);
    throw;
  }
  // HIP lets pending waits on a destroyed event complete
  // (Device::remove_event).
  out_event = device.add_event(std::move(owned));
  return HAL_SUCCESS;
}

Event::~Event() {
  if (device().bind() == hipSuccess) (void)device().api().hipEventDestroy(event_);
}

hal_result_t Event::record(Stream& stream) {
  return stream.device().run("event_record: hipEventRecord", [&](const RuntimeApi& hip) {
    return hip.hipEventRecord(event_, stream.get());
  });
}

hal_result_t Event::query() {
  return device().wait("event_query: hipEventQuery", true,
                       [&](const RuntimeApi& hip) { return hip.hipEventQuery(event_); });
}

hal_result_t Event::synchronize() {
  return device().wait("event_synchronize: hipEventSynchronize", false,
                       [&](const RuntimeApi& hip) { return hip.hipEventSynchronize(event_); });
}

hal_result_t Event::elapsed_ms(Event& first, Event& last, float& out_ms) {
  Device& owner = first.device();
  if (const HipStatus bound = owner.bind(); bound != hipSuccess) {
    return owner.fail(bound, "event_elapsed_ms");
  }
  const HipStatus result = owner.api().hipEventElapsedTime(&out_ms, first.get(), last.get());
  if (result == hipSuccess) return HAL_SUCCESS;
  // Not complete, or never recorded: the contract's INVALID_STATE.
  if (result == hipErrorNotReady || result == hipErrorInvalidHandle) {
    return owner.fail(HAL_ERROR_INVALID_STATE, result, "event_elapsed_ms: hipEventElapsedTime");
  }
  return owner.fail(result, "event_elapsed_ms: hipEventElapsedTime");
}

}  // namespace hal::hip
