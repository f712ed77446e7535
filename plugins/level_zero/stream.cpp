#include "stream.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>

#include "device.hpp"

namespace hal::level_zero {
namespace {

constexpr uint64_t kForever = UINT64_MAX;

// Runs |body| for a table entry: exceptions become errors, a ze_result_t
// failure carries its code and name.
template <class Body>
hal_result_t entry(const Device& device, const char* what, Body&& body) {
  return plugin::guarded(device.report(), what, [&] {
    const ze_result_t result = body(device.api());
    return result == ZE_RESULT_SUCCESS ? HAL_SUCCESS : device.fail(result, what);
  });
}

}  // namespace

// ---- EventSet ---------------------------------------------------------------

std::shared_ptr<EventSet> EventSet::create(const Device& device, uint32_t count, bool timestamps,
                                           ze_result_t& out_result) {
  const LoaderApi& ze = device.api();
  std::shared_ptr<EventSet> set(new EventSet(device));
  ze_event_pool_desc_t pool_desc{};
  pool_desc.stype = ZE_STRUCTURE_TYPE_EVENT_POOL_DESC;
  pool_desc.flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE;
  if (timestamps) pool_desc.flags |= ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP;
  pool_desc.count = count;
  ze_device_handle_t handle = device.handle();
  out_result = ze.zeEventPoolCreate(device.context(), &pool_desc, 1, &handle, &set->pool_);
  if (out_result != ZE_RESULT_SUCCESS) return nullptr;
  set->events_.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    ze_event_desc_t desc{};
    desc.stype = ZE_STRUCTURE_TYPE_EVENT_DESC;
    desc.index = i;
    // Host scope: the host observes (and signals) these events.
    desc.signal = ZE_EVENT_SCOPE_FLAG_HOST;
    desc.wait = ZE_EVENT_SCOPE_FLAG_HOST;
    ze_event_handle_t event = nullptr;
    out_result = ze.zeEventCreate(set->pool_, &desc, &event);
    if (out_result != ZE_RESULT_SUCCESS) return nullptr;  // ~EventSet frees the rest
    set->events_.push_back(event);
  }
  return set;
}

EventSet::~EventSet() {
  for (ze_event_handle_t event : events_) device_.api().zeEventDestroy(event);
  if (pool_ != nullptr) device_.api().zeEventPoolDestroy(pool_);
}

// ---- Event ------------------------------------------------------------------

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
    out_result = device_.api().zeEventHostReset(set->get(0));
    if (out_result != ZE_RESULT_SUCCESS) return nullptr;
  } else {
    set = EventSet::create(device_, 1, timing_, out_result);
    if (set == nullptr) return nullptr;
  }
  if (current_ != nullptr && spares_.size() < kSpares) spares_.push_back(std::move(current_));
  current_ = set;
  out_result = ZE_RESULT_SUCCESS;
  return set;
}

// ---- Stream -----------------------------------------------------------------

std::unique_ptr<Stream> Stream::create(Device& device, ze_result_t& out_result) {
  auto markers = EventSet::create(device, kMarkers, false, out_result);
  if (markers == nullptr) return nullptr;
  ze_command_queue_desc_t desc{};
  desc.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC;
  desc.ordinal = device.compute_ordinal();
  desc.index = 0;
  desc.mode = ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS;
  desc.priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL;
  ze_command_list_handle_t list = nullptr;
  out_result =
      device.api().zeCommandListCreateImmediate(device.context(), device.handle(), &desc, &list);
  if (out_result != ZE_RESULT_SUCCESS) return nullptr;
  return std::unique_ptr<Stream>(new Stream(device, list, std::move(markers)));
}

Stream::~Stream() {
  synchronize("stream_destroy");  // the loader synchronised it; this covers shutdown
  {
    std::lock_guard lock(host_mutex_);
    stopping_ = true;
  }
  host_ready_.notify_all();
  if (worker_.joinable()) worker_.join();
  device_.api().zeCommandListDestroy(list_);
  keep_.clear();  // the list is gone: nothing uses these any more
}

ze_result_t Stream::after_append_locked(ze_result_t result, std::shared_ptr<const void> keep) {
  dirty_ = true;
  if (keep != nullptr) keep_.push_back(std::move(keep));
  if (result != ZE_RESULT_SUCCESS) return result;
  // Level Zero orders a command list's commands only across barriers; a HAL
  // stream runs each command after the one before has finished.
  return device_.api().zeCommandListAppendBarrier(list_, nullptr, 0, nullptr);
}

ze_result_t Stream::marker_locked(bool may_block, int& out_marker) {
  const LoaderApi& ze = device_.api();
  if (!dirty_) {
    out_marker = pending_.empty() ? -1 : static_cast<int>(pending_.back());
    return ZE_RESULT_SUCCESS;
  }
  // A free marker: a new one, one observed before, or the oldest.
  uint32_t marker = 0;
  if (!free_.empty()) {
    marker = free_.back();
    free_.pop_back();
  } else if (created_ < kMarkers) {
    marker = created_++;
  } else {
    // All in flight: the oldest is reused once it signals. A query does not
    // wait for it: while it is pending the stream is not done.
    marker = pending_.front();
    if (const ze_result_t waited =
            ze.zeEventHostSynchronize(markers_->get(marker), may_block ? kForever : 0);
        waited != ZE_RESULT_SUCCESS) {
      return waited;
    }
    pending_.pop_front();
  }
  // Reset on the host before the signal is appended: no earlier signal of
  // this marker is pending (it was observed), so only the new one sets it.
  ze_result_t result = ze.zeEventHostReset(markers_->get(marker));
  if (result == ZE_RESULT_SUCCESS) {
    result = ze.zeCommandListAppendSignalEvent(list_, markers_->get(marker));
  }
  if (result != ZE_RESULT_SUCCESS) {
    free_.push_back(marker);
    return result;
  }
  pending_.push_back(marker);
  dirty_ = false;
  out_marker = static_cast<int>(marker);
  return ZE_RESULT_SUCCESS;
}

void Stream::retire_locked(int marker) {
  // In order: every marker appended before |marker| has signalled too.
  while (!pending_.empty()) {
    const uint32_t oldest = pending_.front();
    pending_.pop_front();
    free_.push_back(oldest);
    if (static_cast<int>(oldest) == marker) break;
  }
}

hal_result_t Stream::synchronize(const char* what) {
  int marker = -1;
  std::vector<std::shared_ptr<const void>> done;
  {
    std::lock_guard lock(mutex_);
    if (const ze_result_t result = marker_locked(true, marker); result != ZE_RESULT_SUCCESS) {
      return device_.fail(HAL_ERROR_DEVICE_LOST, result, what);
    }
    if (marker < 0) return HAL_SUCCESS;
    done.swap(keep_);  // all used by commands before the marker
  }
  // A marker may be observed and reused by another thread meanwhile; its
  // next signal comes after this one, so waiting for it is still correct.
  const ze_result_t result =
      device_.api().zeEventHostSynchronize(markers_->get(static_cast<uint32_t>(marker)), kForever);
  std::lock_guard lock(mutex_);
  if (result != ZE_RESULT_SUCCESS) {
    // The commands may still use them: keep them with the stream.
    for (auto& kept : done) keep_.push_back(std::move(kept));
    return device_.fail(HAL_ERROR_DEVICE_LOST, result, what);
  }
  if (!pending_.empty() && std::find(pending_.begin(), pending_.end(),
                                     static_cast<uint32_t>(marker)) != pending_.end()) {
    retire_locked(marker);
  }
  return HAL_SUCCESS;
}

hal_result_t Stream::query() {
  std::lock_guard lock(mutex_);
  int marker = -1;
  if (const ze_result_t result = marker_locked(false, marker); result != ZE_RESULT_SUCCESS) {
    if (result == ZE_RESULT_NOT_READY) return HAL_NOT_READY;  // an older marker is pending
    return device_.fail(HAL_ERROR_DEVICE_LOST, result, "stream_query");
  }
  if (marker < 0) return HAL_SUCCESS;
  const ze_result_t status =
      device_.api().zeEventQueryStatus(markers_->get(static_cast<uint32_t>(marker)));
  if (status == ZE_RESULT_NOT_READY) return HAL_NOT_READY;
  if (status != ZE_RESULT_SUCCESS) {
    return device_.fail(HAL_ERROR_DEVICE_LOST, status, "stream_query: zeEventQueryStatus");
  }
  retire_locked(marker);
  keep_.clear();  // the marker is the newest command: everything before is done
  return HAL_SUCCESS;
}

hal_result_t Stream::enqueue_host_fn(hal_host_fn_t fn, void* user_data) {
  const char* what = "stream_enqueue_host_fn";
  ze_result_t created = ZE_RESULT_SUCCESS;
  std::shared_ptr<EventSet> events = EventSet::create(device_, 2, false, created);
  if (events == nullptr) return device_.fail(created, "stream_enqueue_host_fn: zeEventPoolCreate");
  {
    std::lock_guard lock(host_mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { run_host_calls(); });
  }
  // The list signals "before" when the earlier work is done, then waits for
  // "after", which the host thread signals once fn returns.
  ze_event_handle_t before = events->get(0);
  ze_event_handle_t after = events->get(1);
  const ze_result_t result = append(
      [&](ze_command_list_handle_t list) {
        ze_result_t appended = device_.api().zeCommandListAppendSignalEvent(list, before);
        if (appended == ZE_RESULT_SUCCESS) {
          appended = device_.api().zeCommandListAppendWaitOnEvents(list, 1, &after);
        }
        return appended;
      },
      events);
  if (result != ZE_RESULT_SUCCESS) {
    // Nothing waits on "after" unless the signal was appended: release it.
    device_.api().zeEventHostSignal(after);
    return device_.fail(result, what);
  }
  {
    std::lock_guard lock(host_mutex_);
    host_calls_.push_back(HostCall{fn, user_data, std::move(events)});
  }
  host_ready_.notify_one();
  return HAL_SUCCESS;
}

void Stream::run_host_calls() {
  const LoaderApi& ze = device_.api();
  for (;;) {
    HostCall call{};
    {
      std::unique_lock lock(host_mutex_);
      host_ready_.wait(lock, [&] { return stopping_ || !host_calls_.empty(); });
      if (host_calls_.empty()) return;  // stopping, and every call has run
      call = std::move(host_calls_.front());
      host_calls_.pop_front();
    }
    // A failed wait (device lost) still runs fn: its caller may wait for it.
    ze.zeEventHostSynchronize(call.events->get(0), kForever);
    call.fn(call.user_data);
    ze.zeEventHostSignal(call.events->get(1));
  }
}

// ---- table entries: copies and fills ---------------------------------------

hal_result_t memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src, size_t size) {
  Stream& self = *to_stream(stream);
  // USM: the driver tells device, host, shared and system memory apart.
  return entry(
      self.device(), "memcpy_async: zeCommandListAppendMemoryCopy", [&](const LoaderApi& ze) {
        return self.append([&](ze_command_list_handle_t list) {
          return ze.zeCommandListAppendMemoryCopy(list, dst, src, size, nullptr, 0, nullptr);
        });
      });
}

hal_result_t memset_async(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size) {
  Stream& self = *to_stream(stream);
  // The specification does not say the pattern is copied at append: it lives
  // with the stream until the fill is done.
  return entry(self.device(), "memset_async: zeCommandListAppendMemoryFill",
               [&](const LoaderApi& ze) {
                 auto pattern = std::make_shared<const uint8_t>(value);
                 const uint8_t* bytes = pattern.get();
                 return self.append(
                     [&](ze_command_list_handle_t list) {
                       return ze.zeCommandListAppendMemoryFill(list, dst, bytes, 1, size, nullptr,
                                                               0, nullptr);
                     },
                     std::move(pattern));
               });
}

// ---- table entries: streams -------------------------------------------------

hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t /*flags*/,
                           hal_impl_stream_t** out_stream) {
  Device& owner = *to_device(device);
  return plugin::guarded(owner.report(), "stream_create", [&] {
    ze_result_t result = ZE_RESULT_SUCCESS;
    std::unique_ptr<Stream> created = Stream::create(owner, result);
    if (created == nullptr) {
      return owner.fail(result, "stream_create: zeCommandListCreateImmediate");
    }
    *out_stream = reinterpret_cast<hal_impl_stream_t*>(owner.add_stream(std::move(created)));
    return HAL_SUCCESS;
  });
}

hal_result_t stream_destroy(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "stream_destroy", [&] {
    owner.remove_stream(&self);
    return HAL_SUCCESS;
  });
}

hal_result_t stream_synchronize(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  return plugin::guarded(self.device().report(), "stream_synchronize",
                         [&] { return self.synchronize("stream_synchronize"); });
}

hal_result_t stream_query(hal_impl_stream_t* stream) {
  Stream& self = *to_stream(stream);
  return plugin::guarded(self.device().report(), "stream_query", [&] { return self.query(); });
}

hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event) {
  Stream& self = *to_stream(stream);
  Event& awaited = *to_event(event);
  const Device& device = self.device();
  return plugin::guarded(device.report(), "stream_wait_event", [&] {
    if (awaited.device().context() != device.context()) {
      return device.report().fail(HAL_ERROR_UNSUPPORTED, 0,
                                  "stream_wait_event: the event's device is on another Level Zero "
                                  "driver (events work within one driver's context)");
    }
    // The point captured now: a later record signals another L0 event.
    std::shared_ptr<EventSet> captured = awaited.current();
    if (captured == nullptr) return HAL_SUCCESS;  // never recorded: complete
    ze_event_handle_t handle = captured->get(0);
    const ze_result_t result = self.append(
        [&](ze_command_list_handle_t list) {
          return device.api().zeCommandListAppendWaitOnEvents(list, 1, &handle);
        },
        std::move(captured));
    return result == ZE_RESULT_SUCCESS
               ? HAL_SUCCESS
               : device.fail(result, "stream_wait_event: zeCommandListAppendWaitOnEvents");
  });
}

hal_result_t stream_enqueue_host_fn(hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data) {
  Stream& self = *to_stream(stream);
  return plugin::guarded(self.device().report(), "stream_enqueue_host_fn",
                         [&] { return self.enqueue_host_fn(fn, user_data); });
}

// ---- table entries: events --------------------------------------------------

hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                          hal_impl_event_t** out_event) {
  Device& owner = *to_device(device);
  const bool timing = (flags & HAL_EVENT_FLAG_TIMING) != 0;
  return plugin::guarded(owner.report(), "event_create", [&] {
    // The L0 event comes with the first record.
    auto created = std::make_unique<Event>(owner, timing);
    *out_event = reinterpret_cast<hal_impl_event_t*>(owner.add_event(std::move(created)));
    return HAL_SUCCESS;
  });
}

hal_result_t event_destroy(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  Device& owner = self.device();
  return plugin::guarded(owner.report(), "event_destroy", [&] {
    // Streams that recorded or wait on it hold its L0 events: pending waits
    // complete, and each L0 event goes once no command uses it.
    owner.remove_event(&self);
    return HAL_SUCCESS;
  });
}

hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t* stream) {
  Event& self = *to_event(event);
  Stream& target = *to_stream(stream);
  const Device& device = target.device();
  return entry(device, "event_record: zeCommandListAppendSignalEvent", [&](const LoaderApi& ze) {
    ze_result_t result = ZE_RESULT_SUCCESS;
    std::shared_ptr<EventSet> set = self.next(result);
    if (set == nullptr) return result;
    ze_event_handle_t handle = set->get(0);
    return target.append(
        [&](ze_command_list_handle_t list) {
          return ze.zeCommandListAppendSignalEvent(list, handle);
        },
        std::move(set));
  });
}

hal_result_t event_query(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  const Device& owner = self.device();
  return plugin::guarded(owner.report(), "event_query", [&] {
    const std::shared_ptr<EventSet> set = self.current();
    if (set == nullptr) return HAL_SUCCESS;
    const ze_result_t result = owner.api().zeEventQueryStatus(set->get(0));
    if (result == ZE_RESULT_SUCCESS) return HAL_SUCCESS;
    if (result == ZE_RESULT_NOT_READY) return HAL_NOT_READY;
    return owner.fail(HAL_ERROR_DEVICE_LOST, result, "event_query: zeEventQueryStatus");
  });
}

hal_result_t event_synchronize(hal_impl_event_t* event) {
  Event& self = *to_event(event);
  const Device& owner = self.device();
  return plugin::guarded(owner.report(), "event_synchronize", [&] {
    const std::shared_ptr<EventSet> set = self.current();
    if (set == nullptr) return HAL_SUCCESS;
    const ze_result_t result = owner.api().zeEventHostSynchronize(set->get(0), kForever);
    return result == ZE_RESULT_SUCCESS ? HAL_SUCCESS
                                       : owner.fail(HAL_ERROR_DEVICE_LOST, result,
                                                    "event_synchronize: zeEventHostSynchronize");
  });
}

hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms) {
  Event& first = *to_event(start);
  Event& last = *to_event(end);
  const Device& owner = first.device();
  const plugin::ErrorReporter& report = owner.report();
  return plugin::guarded(report, "event_elapsed_ms", [&] {
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
    *out_ms = static_cast<float>(ticks * owner.timestamp_ns_per_tick() / 1e6);
    return HAL_SUCCESS;
  });
}

}  // namespace hal::level_zero
