// Events of the level_zero plugin: the event pools (EventSet) and the HAL
// events recorded, waited for and timed through them.
#include "event.hpp"

#include <cstdint>
#include <memory>

#include "device.hpp"
#include "stream.hpp"

namespace hal::level_zero {

ze_result_t EventPools::grow(Kind& kind, bool timestamps) {
  const LoaderApi& ze = device_.api();
  ze_event_pool_desc_t pool_desc{};
  pool_desc.stype = ZE_STRUCTURE_TYPE_EVENT_POOL_DESC;
  pool_desc.flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE;
  if (timestamps) pool_desc.flags |= ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP;
  pool_desc.count = kPoolSize;
  ze_device_handle_t handle = device_.handle();
  ze_event_pool_handle_t pool = nullptr;
  ze_result_t result = ze.zeEventPoolCreate(device_.context(), &pool_desc, 1, &handle, &pool);
  if (result != ZE_RESULT_SUCCESS) return result;
  kind.pools.push_back(pool);
  for (uint32_t i = 0; i < kPoolSize; ++i) {
    ze_event_desc_t desc{};
    desc.stype = ZE_STRUCTURE_TYPE_EVENT_DESC;
    desc.index = i;
    // Host scope: the host observes (and signals) these events.
    desc.signal = ZE_EVENT_SCOPE_FLAG_HOST;
    desc.wait = ZE_EVENT_SCOPE_FLAG_HOST;
    ze_event_handle_t event = nullptr;
    result = ze.zeEventCreate(pool, &desc, &event);
    if (result != ZE_RESULT_SUCCESS) return result;  // the ones made stay, destroyed at the end
    kind.all.push_back(event);
    kind.idle.push_back(event);
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t EventPools::take(bool timestamps, uint32_t count, std::vector<ze_event_handle_t>& out) {
  std::lock_guard lock(mutex_);
  Kind& kind = kinds_[timestamps ? 1 : 0];
  while (kind.idle.size() < count) {
    if (const ze_result_t result = grow(kind, timestamps); result != ZE_RESULT_SUCCESS) {
      return result;
    }
  }
  out.assign(kind.idle.end() - count, kind.idle.end());
  kind.idle.resize(kind.idle.size() - count);
  return ZE_RESULT_SUCCESS;
}

void EventPools::give_back(bool timestamps, const std::vector<ze_event_handle_t>& events) {
  // "The application must ensure the device is not currently referencing the
  // event before it is reset" (zeEventHostReset): the caller's promise.
  std::lock_guard lock(mutex_);
  Kind& kind = kinds_[timestamps ? 1 : 0];
  for (ze_event_handle_t event : events) {
    if (device_.api().zeEventHostReset(event) == ZE_RESULT_SUCCESS) kind.idle.push_back(event);
  }
}

EventPools::~EventPools() {
  for (Kind& kind : kinds_) {
    for (ze_event_handle_t event : kind.all) device_.api().zeEventDestroy(event);
    for (ze_event_pool_handle_t pool : kind.pools) device_.api().zeEventPoolDestroy(pool);
  }
}

std::shared_ptr<EventSet> EventSet::create(const Device& device, uint32_t count, bool timestamps,
                                           ze_result_t& out_result) {
  std::shared_ptr<EventSet> set(new EventSet(device.event_pools(), timestamps));
  out_result = set->pools_.take(timestamps, count, set->events_);
  if (out_result != ZE_RESULT_SUCCESS) return nullptr;
  return set;
}

EventSet::~EventSet() {
  if (!events_.empty()) pools_.give_back(timestamps_, events_);
}

std::shared_ptr<EventSet> Event::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

std::shared_ptr<EventSet> Event::next(ze_result_t& out_result) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<EventSet> set;
  // A spare only this event holds: every command that used it is done (the
  // streams drop theirs once they saw it complete), so a reset is safe.
  for (auto& spare : spares_) {
    if (spare.use_count() == 1) {
      set = std::move(spare);
      spare = std::move(spares_.back());
      spares_.pop_back();
      break;
    }
  }
  if (set != nullptr) {
    out_result = device().api().zeEventHostReset(set->get(0));
    if (out_result != ZE_RESULT_SUCCESS) return nullptr;
  } else {
    set = EventSet::create(device(), 1, timing_, out_result);
    if (set == nullptr) return nullptr;
  }
  if (current_ != nullptr && spares_.size() < kSpares) spares_.push_back(std::move(current_));
  current_ = set;
  out_result = ZE_RESULT_SUCCESS;
  return set;
}

hal_result_t Event::create(Device& device, hal_event_flags_t flags, Event*& out_event) {
  const bool timing = (flags & HAL_EVENT_FLAG_TIMING) != 0;
  // Streams that recorded or wait on an event hold its L0 events: when the
  // event is destroyed, pending waits complete, and each L0 event goes once
  // no command uses it.
  out_event = device.add_event(std::make_unique<Event>(device, timing));
  return HAL_SUCCESS;
}

hal_result_t Event::record(Stream& stream) {
  const char* what = "event_record: zeCommandListAppendSignalEvent";
  ze_result_t result = ZE_RESULT_SUCCESS;
  std::shared_ptr<EventSet> set = next(result);
  if (set == nullptr) return stream.device().fail(result, what);
  ze_event_handle_t handle = set->get(0);
  result = stream.append(
      [&](ze_command_list_handle_t list) {
        return stream.device().api().zeCommandListAppendSignalEvent(list, handle);
      },
      std::move(set));
  return result == ZE_RESULT_SUCCESS ? HAL_SUCCESS : stream.device().fail(result, what);
}

hal_result_t Event::query() {
  const std::shared_ptr<EventSet> set = current();
  if (set == nullptr) return HAL_SUCCESS;
  const ze_result_t result = device().api().zeEventQueryStatus(set->get(0));
  if (result == ZE_RESULT_SUCCESS) return HAL_SUCCESS;
  if (result == ZE_RESULT_NOT_READY) return HAL_NOT_READY;
  return device().fail(HAL_ERROR_DEVICE_LOST, result, "event_query: zeEventQueryStatus");
}

hal_result_t Event::synchronize() {
  const std::shared_ptr<EventSet> set = current();
  if (set == nullptr) return HAL_SUCCESS;
  const ze_result_t result = device().api().zeEventHostSynchronize(set->get(0), kForever);
  return result == ZE_RESULT_SUCCESS ? HAL_SUCCESS
                                     : device().fail(HAL_ERROR_DEVICE_LOST, result,
                                                     "event_synchronize: zeEventHostSynchronize");
}

hal_result_t Event::elapsed_ms(Event& first, Event& last, float& out_ms) {
  const Device& owner = first.device();
  const plugin::ErrorReporter& report = owner.report();
  const LoaderApi& ze = owner.api();
  ze_kernel_timestamp_result_t stamps[2] = {};
  Event* events[2] = {&first, &last};
  for (int i = 0; i < 2; ++i) {
    const std::shared_ptr<EventSet> set = events[i]->current();
    if (set == nullptr) {
      return report.fail(HAL_ERROR_INVALID_STATE, 0,
                         "event_elapsed_ms: the %s event was never recorded",
                         i == 0 ? "start" : "end");
    }
    const ze_result_t status = ze.zeEventQueryStatus(set->get(0));
    if (status == ZE_RESULT_NOT_READY) {
      return owner.fail(HAL_ERROR_INVALID_STATE, status,
                        i == 0 ? "event_elapsed_ms: the start event is not complete"
                               : "event_elapsed_ms: the end event is not complete");
    }
    if (status != ZE_RESULT_SUCCESS)
      return owner.fail(status, "event_elapsed_ms: zeEventQueryStatus");
    if (const ze_result_t result = ze.zeEventQueryKernelTimestamp(set->get(0), &stamps[i]);
        result != ZE_RESULT_SUCCESS) {
      return owner.fail(result, "event_elapsed_ms: zeEventQueryKernelTimestamp");
    }
  }
  // The global (wall-clock) end of each signal, in ticks that wrap at the
  // valid bits: the shorter way round gives the sign.
  const uint64_t mask = owner.timestamp_mask();
  const uint64_t forward = (stamps[1].global.kernelEnd - stamps[0].global.kernelEnd) & mask;
  const uint64_t backward = (stamps[0].global.kernelEnd - stamps[1].global.kernelEnd) & mask;
  const double ticks =
      forward <= backward ? static_cast<double>(forward) : -static_cast<double>(backward);
  out_ms = static_cast<float>(ticks * owner.timestamp_ns_per_tick() / 1e6);
  return HAL_SUCCESS;
}

}  // namespace hal::level_zero
