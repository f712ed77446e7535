// Events of the cuda plugin: CUevents recorded on streams, waited for,
// queried and timed.
#include "event.hpp"

#include <memory>

#include "device.hpp"
#include "stream.hpp"

namespace hal::cuda {

hal_result_t Event::create(Device& device, hal_event_flags_t flags, Event*& out_event) {
  const bool timing = (flags & HAL_EVENT_FLAG_TIMING) != 0;
  CUevent created = nullptr;
  const hal_result_t result = device.run("event_create: cuEventCreate", [&](const DriverApi& cu) {
    return cu.cuEventCreate(&created, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
  });
  if (result != HAL_SUCCESS) return result;
  std::unique_ptr<Event> owned;
  try {
    owned = std::make_unique<Event>(device, created, timing);
  } catch (...) {
    if (const ContextScope bound = device.bind(); bound.ok()) device.api().cuEventDestroy(created);
    throw;
  }
  // CUDA lets pending waits on a destroyed event complete
  // (Device::remove_event).
  out_event = device.add_event(std::move(owned));
  return HAL_SUCCESS;
}

Event::~Event() {
  if (const ContextScope bound = device().bind(); bound.ok()) device().api().cuEventDestroy(event_);
}

hal_result_t Event::record(Stream& stream) {
  return stream.device().run("event_record: cuEventRecord", [&](const DriverApi& cu) {
    return cu.cuEventRecord(event_, stream.get());
  });
}

hal_result_t Event::query() {
  const ContextScope bound = device().bind();
  if (!bound.ok()) {
    return device().fail(bound.result(), "event_query");
  }
  const CUresult result = device().api().cuEventQuery(event_);
  if (result == CUDA_SUCCESS) return HAL_SUCCESS;
  if (result == CUDA_ERROR_NOT_READY) return HAL_NOT_READY;
  return device().fail(HAL_ERROR_DEVICE_LOST, result, "event_query: cuEventQuery");
}

hal_result_t Event::synchronize() {
  const ContextScope bound = device().bind();
  if (!bound.ok()) {
    return device().fail(bound.result(), "event_synchronize");
  }
  const CUresult result = device().api().cuEventSynchronize(event_);
  return result == CUDA_SUCCESS ? HAL_SUCCESS
                                : device().fail(HAL_ERROR_DEVICE_LOST, result,
                                                "event_synchronize: cuEventSynchronize");
}

hal_result_t Event::elapsed_ms(Event& first, Event& last, float& out_ms) {
  Device& owner = first.device();
  const ContextScope bound = owner.bind();
  if (!bound.ok()) {
    return owner.fail(bound.result(), "event_elapsed_ms");
  }
  const CUresult result = owner.api().cuEventElapsedTime(&out_ms, first.get(), last.get());
  if (result == CUDA_SUCCESS) return HAL_SUCCESS;
  // Not complete, or never recorded: the contract's INVALID_STATE.
  if (result == CUDA_ERROR_NOT_READY || result == CUDA_ERROR_INVALID_HANDLE) {
    return owner.fail(HAL_ERROR_INVALID_STATE, result, "event_elapsed_ms: cuEventElapsedTime");
  }
  return owner.fail(result, "event_elapsed_ms: cuEventElapsedTime");
}

}  // namespace hal::cuda
