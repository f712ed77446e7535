// Portable fallbacks for optional table entries a plugin leaves NULL, and the
// loader's own events. Each helper uses the plugin's entry when it has one,
// so API files call these without caring which path runs.
#pragma once

#include "objects.hpp"

#include <hal/plugin_v1.h>

#include <cstdint>
#include <memory>

namespace hal::loader {

// The kinds of plugin entry that answer about a stream (SPEC 4.4, "Which
// results lose a stream"). A wait entry (stream_synchronize, stream_query,
// device_synchronize, event_query, event_synchronize) reports nothing but the
// outcome of work already enqueued: its every failure is a loss, with the
// code of what failed (the cpu plugin's bounds check: HAL_ERROR_OUT_OF_BOUNDS).
// An enqueue entry may also refuse the call itself (arguments only the plugin
// can judge, no memory for the command): only HAL_ERROR_DEVICE_LOST from it
// says the stream is lost; another code's loss is learnt at the next wait.
enum class StreamEntry { kWait, kEnqueue };

// Whether |result| from a plugin entry of kind |entry| says that the stream
// it answers about is lost: the one rule every caller applies.
constexpr bool plugin_reported_loss(StreamEntry entry, hal_result_t result) noexcept {
  if (entry == StreamEntry::kEnqueue) return result == HAL_ERROR_DEVICE_LOST;
  return result != HAL_SUCCESS && result != HAL_NOT_READY;
}

// A plugin entry of kind |entry| on |stream| failed with |result|: the public
// call's detail, and a loss (plugin_reported_loss) marks the stream lost for
// good with the public call's code (SPEC 4.4).
hal_result_t stream_entry_failed(hal_stream_s* stream, StreamEntry entry, hal_result_t result,
                                 const char* function, const PluginRecord& plugin) noexcept;

// The stream's loss code when |stream| is known lost: every enqueue entry
// refuses such a stream before reaching the plugin, for every plugin alike.
hal_result_t refuse_lost_stream(const hal_stream_s* stream, const char* function) noexcept;

// Waits for the work of |device| (or of |stream|) and drops a lost stream's
// failure, whatever its code, leaving the thread's error detail as it was:
// what destroys and hal_mem_free do, which go on after any loss (SPEC 4.4).
void drain_device(hal_device_s* device, const char* function) noexcept;
void drain_stream(hal_stream_s* stream, const char* function) noexcept;

// stream_synchronize, with a plugin failure turned into the public call's detail.
hal_result_t synchronize_stream(hal_stream_s* stream, const char* function) noexcept;

// device_synchronize, or every live stream of the device in turn.
hal_result_t synchronize_device(hal_device_s* device, const char* function) noexcept;

// stream_enqueue_host_fn, or: synchronise the stream, then run |fn| here.
hal_result_t enqueue_host_fn(hal_stream_s* stream, hal_host_fn_t fn, void* user_data,
                             const char* function) noexcept;

// memset_async, or: copy from a host staging buffer holding |value| in
// chunks, and free the buffer in a host function enqueued behind the copies.
hal_result_t fill_memory(hal_stream_s* stream, void* dst, uint8_t value, size_t size,
                         const char* function);

// Loader events, for plugins without event entries.
hal_result_t record_loader_event(const std::shared_ptr<EventState>& state, hal_stream_s* stream,
                                 const char* function);
hal_result_t query_loader_event(EventState& state) noexcept;
hal_result_t synchronize_loader_event(EventState& state) noexcept;

// hal_stream_wait_event for every pairing: a plugin's own wait when stream and
// event share a plugin that has one, else a host function on |stream| that
// waits for the event (a loader event's generation, or another plugin's
// event_synchronize).
hal_result_t wait_for_event(hal_stream_s* stream, const std::shared_ptr<EventState>& state,
                            const char* function);

}  // namespace hal::loader
