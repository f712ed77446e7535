#include "fallbacks.hpp"

#include "error.hpp"

#include <algorithm>
#include <vector>

namespace hal::loader {

namespace {

constexpr size_t kFillChunkBytes = size_t{1} << 20;

// Host-function payloads own themselves: the trampoline deletes them after
// running, the enqueuing code deletes them when the enqueue fails.
struct CompletionMark {
  std::shared_ptr<EventState> state;
  uint64_t generation;
};

struct GenerationWait {
  std::shared_ptr<EventState> state;
  uint64_t generation;
};

struct ForeignEventWait {
  std::shared_ptr<EventState> state;
};

void release_staging(void* data) noexcept {
  delete static_cast<std::vector<uint8_t>*>(data);
}

void mark_generation_complete(EventState& state, uint64_t generation) noexcept {
  {
    std::lock_guard lock(state.mutex);
    if (generation > state.completed_generation) state.completed_generation = generation;
  }
  state.completed_cv.notify_all();
}

void run_completion_mark(void* data) noexcept {
  std::unique_ptr<CompletionMark> mark(static_cast<CompletionMark*>(data));
  mark_generation_complete(*mark->state, mark->generation);
}

void run_generation_wait(void* data) noexcept {
  std::unique_ptr<GenerationWait> wait(static_cast<GenerationWait*>(data));
  EventState& state = *wait->state;
  std::unique_lock lock(state.mutex);
  state.completed_cv.wait(lock, [&] { return state.completed_generation >= wait->generation; });
}

void run_foreign_event_wait(void* data) noexcept {
  std::unique_ptr<ForeignEventWait> wait(static_cast<ForeignEventWait*>(data));
  // A failure here has no caller to report to; the event's own plugin reports
  // it to whoever synchronises that event.
  wait->state->plugin->table.event_synchronize(wait->state->impl);
}

// Enqueues |payload| behind |run|, keeping ownership when the enqueue fails.
template <class Payload>
hal_result_t enqueue_owned(hal_stream_s* stream, void (*run)(void*) noexcept,
                           std::unique_ptr<Payload>& payload, const char* function) {
  const hal_result_t result = enqueue_host_fn(stream, run, payload.get(), function);
  // The fallback and the plugin both ran or queued the function, which owns
  // the payload from then on.
  if (result == HAL_SUCCESS) payload.release();
  return result;
}

}  // namespace

hal_result_t stream_entry_failed(hal_stream_s* stream, StreamEntry entry, hal_result_t result,
                                 const char* function, const PluginRecord& plugin) noexcept {
  const hal_result_t code = fail_from_plugin(result, function, plugin.name);
  if (plugin_reported_loss(entry, result)) {
    // The first loss stands: later reports of the same stream repeat it.
    hal_result_t none = HAL_SUCCESS;
    stream->loss.compare_exchange_strong(none, code, std::memory_order_relaxed);
  }
  return code;
}

hal_result_t refuse_lost_stream(const hal_stream_s* stream, const char* function) noexcept {
  const hal_result_t loss = stream->loss.load(std::memory_order_relaxed);
  if (loss == HAL_SUCCESS) [[likely]]
    return HAL_SUCCESS;
  return fail(loss, function,
              "stream %p is lost: earlier work on it failed with %s (reported by an earlier "
              "call); nothing more is enqueued on it, destroy it",
              static_cast<const void*>(stream), result_name(loss));
}

// A release waits for the work and drops a lost stream's failure, whatever
// its code (SPEC 4.4): a stream is lost with the code of what failed on it
// (the cpu plugin's bounds check gives HAL_ERROR_OUT_OF_BOUNDS, a plugin may
// report a timed-out or mismatched collective as itself), and every one means
// that the work has ended. A release that stopped at one loss code but not at
// another would leave an object nobody can release. The release succeeds, so
// it leaves the thread's error detail as it was (SPEC 4.2): the loss it met is
// not its failure. (hal_moe_routing_create frees its buffers after its
// collective failed: that free must not replace the collective's message.)
void drain_device(hal_device_s* device, const char* function) noexcept {
  const KeepErrorDetail keep;
  const PluginRecord& plugin = *device->plugin;
  if (plugin.table.device_synchronize != nullptr) {
    // Returns once every stream's work has ended, lost streams' included.
    if (plugin.table.device_synchronize(device->impl) != HAL_SUCCESS) drop_plugin_report();
    return;
  }
  try {
    // Every stream, also after a lost one: the memory being freed may be in
    // use by the work of any stream of the device.
    device->streams.for_each([function](hal_stream_s* stream) {
      synchronize_stream(stream, function);
      return HAL_SUCCESS;
    });
  } catch (const std::exception&) {
    // std::system_error from the set's mutex: nothing more to wait for here.
  }
}

void drain_stream(hal_stream_s* stream, const char* function) noexcept {
  const KeepErrorDetail keep;
  synchronize_stream(stream, function);
}

hal_result_t synchronize_stream(hal_stream_s* stream, const char* function) noexcept {
  const PluginRecord& plugin = *stream->header.plugin;
  const hal_result_t result = plugin.table.stream_synchronize(stream->impl);
  if (result != HAL_SUCCESS) {
    return stream_entry_failed(stream, StreamEntry::kWait, result, function, plugin);
  }
  return HAL_SUCCESS;
}

namespace {

// SPEC §4.4: a loss belongs to a stream. When the plugin's device_synchronize
// reports one, the device's streams are asked which is lost (they have all
// finished their work, so each answer is immediate); the first lost stream
// is marked lost and named in the detail, with what failed on it:
// "hal_device_synchronize: stream 0x... is lost: <the failure>". A loss no
// stream claims (the device itself failed) keeps the plugin's detail.
// "<function>: <cause>" becomes "<function>: stream 0x... is lost: <cause>".
void say_stream_lost(const hal_stream_s* stream, const char* function) {
  ErrorDetail& detail = thread_error_detail();
  const std::string prefix = std::string(function) + ": ";
  const std::string cause = detail.message.compare(0, prefix.size(), prefix) == 0
                                ? detail.message.substr(prefix.size())
                                : detail.message;
  detail.message = format("%s: stream %p is lost: %s", function, static_cast<const void*>(stream),
                          cause.c_str());
}

void name_lost_stream(hal_device_s* device, const char* function) noexcept {
  const PluginRecord& plugin = *device->plugin;
  try {
    const ErrorDetail device_detail = thread_error_detail();
    const hal_result_t found = device->streams.for_each([&](hal_stream_s* stream) {
      const hal_result_t result = plugin.table.stream_synchronize(stream->impl);
      if (!plugin_reported_loss(StreamEntry::kWait, result)) return HAL_SUCCESS;  // healthy
      stream_entry_failed(stream, StreamEntry::kWait, result, function, plugin);
      say_stream_lost(stream, function);
      return result;  // stops at the first lost stream
    });
    if (found == HAL_SUCCESS) thread_error_detail() = device_detail;
  } catch (...) {
    // Out of memory while naming the stream: the plugin's detail stands.
  }
}

}  // namespace

hal_result_t synchronize_device(hal_device_s* device, const char* function) noexcept {
  const PluginRecord& plugin = *device->plugin;
  if (plugin.table.device_synchronize != nullptr) {
    const hal_result_t result = plugin.table.device_synchronize(device->impl);
    if (result == HAL_SUCCESS) return HAL_SUCCESS;
    const hal_result_t code = fail_from_plugin(result, function, plugin.name);
    if (plugin_reported_loss(StreamEntry::kWait, result)) name_lost_stream(device, function);
    return code;
  }
  try {
    return device->streams.for_each([function](hal_stream_s* stream) {
      const hal_result_t result = synchronize_stream(stream, function);
      if (plugin_reported_loss(StreamEntry::kWait, result)) say_stream_lost(stream, function);
      return result;
    });
  } catch (const std::exception& e) {  // std::system_error from the set's mutex
    return fail(HAL_ERROR_INTERNAL, function, "internal loader error: %s", e.what());
  }
}

hal_result_t enqueue_host_fn(hal_stream_s* stream, hal_host_fn_t fn, void* user_data,
                             const char* function) noexcept {
  const PluginRecord& plugin = *stream->header.plugin;
  if (plugin.table.stream_enqueue_host_fn != nullptr) {
    const hal_result_t result = plugin.table.stream_enqueue_host_fn(stream->impl, fn, user_data);
    if (result != HAL_SUCCESS) {
      return stream_entry_failed(stream, StreamEntry::kEnqueue, result, function, plugin);
    }
    return HAL_SUCCESS;
  }
  if (hal_result_t result = synchronize_stream(stream, function); result != HAL_SUCCESS) {
    return result;
  }
  fn(user_data);
  return HAL_SUCCESS;
}

hal_result_t fill_memory(hal_stream_s* stream, void* dst, uint8_t value, size_t size,
                         const char* function) {
  const PluginRecord& plugin = *stream->header.plugin;
  if (plugin.table.memset_async != nullptr) {
    const hal_result_t result = plugin.table.memset_async(stream->impl, dst, value, size);
    if (result != HAL_SUCCESS)
      return stream_entry_failed(stream, StreamEntry::kEnqueue, result, function, plugin);
    return HAL_SUCCESS;
  }
  // Host-staged fill: a staging buffer holding |value|, copied chunk by chunk
  // and released by a host function behind the copies, so the call does not
  // wait for the device (unless host functions themselves fall back).
  const size_t chunk = std::min(size, kFillChunkBytes);
  auto staging = std::make_unique<std::vector<uint8_t>>(chunk, value);
  auto* destination = static_cast<uint8_t*>(dst);
  for (size_t offset = 0; offset < size; offset += chunk) {
    const size_t bytes = std::min(chunk, size - offset);
    const hal_result_t result =
        plugin.table.memcpy_async(stream->impl, destination + offset, staging->data(), bytes);
    if (result != HAL_SUCCESS) {
      const hal_result_t reported =
          stream_entry_failed(stream, StreamEntry::kEnqueue, result, function, plugin);
      plugin.table.stream_synchronize(stream->impl);  // earlier chunks may still read it
      return reported;
    }
  }
  const hal_result_t released = enqueue_owned(stream, release_staging, staging, function);
  if (released != HAL_SUCCESS) plugin.table.stream_synchronize(stream->impl);
  return released;
}

hal_result_t record_loader_event(const std::shared_ptr<EventState>& state, hal_stream_s* stream,
                                 const char* function) {
  uint64_t generation = 0;
  {
    std::lock_guard lock(state->mutex);
    generation = ++state->recorded_generation;
  }
  auto mark = std::make_unique<CompletionMark>(CompletionMark{state, generation});
  const hal_result_t result = enqueue_owned(stream, run_completion_mark, mark, function);
  // A record that could not be enqueued must not leave waiters hanging.
  if (result != HAL_SUCCESS) mark_generation_complete(*state, generation);
  return result;
}

hal_result_t query_loader_event(EventState& state) noexcept {
  std::lock_guard lock(state.mutex);
  return state.completed_generation >= state.recorded_generation ? HAL_SUCCESS : HAL_NOT_READY;
}

hal_result_t synchronize_loader_event(EventState& state) noexcept {
  std::unique_lock lock(state.mutex);
  const uint64_t target = state.recorded_generation;
  state.completed_cv.wait(lock, [&] { return state.completed_generation >= target; });
  return HAL_SUCCESS;
}

hal_result_t wait_for_event(hal_stream_s* stream, const std::shared_ptr<EventState>& state,
                            const char* function) {
  if (state->impl == nullptr) {
    uint64_t generation = 0;
    {
      std::lock_guard lock(state->mutex);
      if (state->completed_generation >= state->recorded_generation) return HAL_SUCCESS;
      generation = state->recorded_generation;
    }
    auto wait = std::make_unique<GenerationWait>(GenerationWait{state, generation});
    return enqueue_owned(stream, run_generation_wait, wait, function);
  }
  const PluginRecord& stream_plugin = *stream->header.plugin;
  if (state->plugin == &stream_plugin && stream_plugin.table.stream_wait_event != nullptr) {
    const hal_result_t result = stream_plugin.table.stream_wait_event(stream->impl, state->impl);
    if (result != HAL_SUCCESS)
      return stream_entry_failed(stream, StreamEntry::kEnqueue, result, function, stream_plugin);
    return HAL_SUCCESS;
  }
  // Another plugin's event: the stream's work waits on a host function that
  // blocks in that plugin's event_synchronize.
  auto wait = std::make_unique<ForeignEventWait>(ForeignEventWait{state});
  return enqueue_owned(stream, run_foreign_event_wait, wait, function);
}

}  // namespace hal::loader
