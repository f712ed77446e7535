// Streams of the level_zero plugin: immediate command lists kept in order,
// their completion markers, and the thread that runs their host functions.
#include "stream.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>

#include "device.hpp"
#include "event.hpp"

namespace hal::level_zero {

hal_result_t Stream::create(Device& device, hal_stream_flags_t, Stream*& out_stream) {
  ze_result_t result = ZE_RESULT_SUCCESS;
  std::unique_ptr<Stream> made = make(device, result);
  if (made == nullptr) return device.fail(result, "stream_create: zeCommandListCreateImmediate");
  out_stream = device.add_stream(std::move(made));
  return HAL_SUCCESS;
}

hal_result_t Stream::wait(Event& awaited) {
  if (awaited.device().context() != device().context()) {
    return device().report().fail(HAL_ERROR_UNSUPPORTED, 0,
                                  "stream_wait_event: the event's device is on another Level Zero "
                                  "driver (events work within one driver's context)");
  }
  // The point captured now: a later record signals another L0 event.
  std::shared_ptr<EventSet> captured = awaited.current();
  if (captured == nullptr) return HAL_SUCCESS;  // never recorded: complete
  ze_event_handle_t handle = captured->get(0);
  const ze_result_t result = append(
      [&](ze_command_list_handle_t list) {
        return device().api().zeCommandListAppendWaitOnEvents(list, 1, &handle);
      },
      std::move(captured));
  return result == ZE_RESULT_SUCCESS
             ? HAL_SUCCESS
             : device().fail(result, "stream_wait_event: zeCommandListAppendWaitOnEvents");
}

std::unique_ptr<Stream> Stream::make(Device& device, ze_result_t& out_result) {
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
  finish("stream_destroy");  // the loader synchronised it; this covers shutdown
  {
    std::lock_guard lock(host_mutex_);
    stopping_ = true;
  }
  host_ready_.notify_all();
  if (worker_.joinable()) worker_.join();
  device().api().zeCommandListDestroy(list_);
  keep_.clear();  // the list is gone: nothing uses these any more
}

ze_result_t Stream::after_append_locked(ze_result_t result, std::shared_ptr<const void> keep) {
  dirty_ = true;
  if (keep != nullptr) keep_.push_back(std::move(keep));
  if (result != ZE_RESULT_SUCCESS) return result;
  // Level Zero orders a command list's commands only across barriers; a HAL
  // stream runs each command after the one before has finished.
  return device().api().zeCommandListAppendBarrier(list_, nullptr, 0, nullptr);
}

ze_result_t Stream::marker_locked(bool may_block, int& out_marker) {
  const LoaderApi& ze = device().api();
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

hal_result_t Stream::synchronize() {
  return finish("stream_synchronize");
}

hal_result_t Stream::finish(const char* what) {
  int marker = -1;
  std::vector<std::shared_ptr<const void>> done;
  {
    std::lock_guard lock(mutex_);
    if (const ze_result_t result = marker_locked(true, marker); result != ZE_RESULT_SUCCESS) {
      return device().fail(HAL_ERROR_DEVICE_LOST, result, what);
    }
    if (marker < 0) return HAL_SUCCESS;
    done.swap(keep_);  // all used by commands before the marker
  }
  // A marker may be observed and reused by another thread meanwhile; its
  // next signal comes after this one, so waiting for it is still correct.
  const ze_result_t result =
      device().api().zeEventHostSynchronize(markers_->get(static_cast<uint32_t>(marker)), kForever);
  std::lock_guard lock(mutex_);
  if (result != ZE_RESULT_SUCCESS) {
    // The commands may still use them: keep them with the stream.
    for (auto& kept : done) keep_.push_back(std::move(kept));
    return device().fail(HAL_ERROR_DEVICE_LOST, result, what);
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
    return device().fail(HAL_ERROR_DEVICE_LOST, result, "stream_query");
  }
  if (marker < 0) return HAL_SUCCESS;
  const ze_result_t status =
      device().api().zeEventQueryStatus(markers_->get(static_cast<uint32_t>(marker)));
  if (status == ZE_RESULT_NOT_READY) return HAL_NOT_READY;
  if (status != ZE_RESULT_SUCCESS) {
    return device().fail(HAL_ERROR_DEVICE_LOST, status, "stream_query: zeEventQueryStatus");
  }
  retire_locked(marker);
  keep_.clear();  // the marker is the newest command: everything before is done
  return HAL_SUCCESS;
}

hal_result_t Stream::enqueue_host_fn(hal_host_fn_t fn, void* user_data) {
  const char* what = "stream_enqueue_host_fn";
  ze_result_t created = ZE_RESULT_SUCCESS;
  std::shared_ptr<EventSet> events = EventSet::create(device(), 2, false, created);
  if (events == nullptr) return device().fail(created, "stream_enqueue_host_fn: zeEventPoolCreate");
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
        ze_result_t appended = device().api().zeCommandListAppendSignalEvent(list, before);
        if (appended == ZE_RESULT_SUCCESS) {
          appended = device().api().zeCommandListAppendWaitOnEvents(list, 1, &after);
        }
        return appended;
      },
      events);
  if (result != ZE_RESULT_SUCCESS) {
    // Nothing waits on "after" unless the signal was appended: release it.
    device().api().zeEventHostSignal(after);
    return device().fail(result, what);
  }
  {
    std::lock_guard lock(host_mutex_);
    host_calls_.push_back(HostCall{fn, user_data, std::move(events)});
  }
  host_ready_.notify_one();
  return HAL_SUCCESS;
}

void Stream::run_host_calls() {
  const LoaderApi& ze = device().api();
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

}  // namespace hal::level_zero
