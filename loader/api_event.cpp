// hal/event.h: events, from the plugin or, when it has none, from the loader.
#include "api_common.hpp"
#include "layers/intercept.hpp"
#include "fallbacks.hpp"

using namespace hal::loader;

namespace {

// Whether the work |state| captured is known to have failed: its query, a
// wait entry, reports the recording stream's loss, whatever its code
// (plugin_reported_loss, SPEC 4.4). A probe: the plugin's report is not
// passed on. Loader events never record failures.
bool captured_failed_work(const EventState& state) noexcept {
  if (state.impl == nullptr || state.plugin->table.event_query == nullptr) return false;
  const hal_result_t result = state.plugin->table.event_query(state.impl);
  if (!plugin_reported_loss(StreamEntry::kWait, result)) return false;
  drop_plugin_report();
  return true;
}

}  // namespace

static hal_result_t event_create_body(hal_device_t device, hal_event_flags_t flags,
                                      hal_event_t* out_event) {
  constexpr const char* kFunction = "hal_event_create";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result = check_preconditions(kFunction, Live{device, "device"},
                                                  Required{out_event, "out_event"});
        result != HAL_SUCCESS) {
      return result;
    }
    if ((flags & ~static_cast<hal_event_flags_t>(HAL_EVENT_FLAG_TIMING)) != 0) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "flags 0x%x has bits no v1.0 event flag defines", flags);
    }
    const bool timing = (flags & HAL_EVENT_FLAG_TIMING) != 0;
    if (timing && (device->properties.capabilities & HAL_DEVICE_CAP_EVENT_TIMING) == 0) {
      return fail(HAL_ERROR_UNSUPPORTED, kFunction,
                  "HAL_EVENT_FLAG_TIMING needs HAL_DEVICE_CAP_EVENT_TIMING, which device %u "
                  "(plugin '%s') lacks",
                  device->properties.index, device->plugin->name.c_str());
    }
    const PluginRecord& plugin = *device->plugin;
    std::shared_ptr<EventState> state;
    if (plugin.loader_events) {
      state = std::make_shared<EventState>(&plugin, nullptr, timing);
    } else {
      hal_impl_event_t* impl = nullptr;
      if (hal_result_t result = plugin.table.event_create(device->impl, flags, &impl);
          result != HAL_SUCCESS) {
        return fail_from_plugin(result, kFunction, plugin.name);
      }
      try {
        state = std::make_shared<EventState>(&plugin, impl, timing);
      } catch (...) {
        plugin.table.event_destroy(impl);
        throw;
      }
    }
    *out_event = device->events.add(make_handle<hal_event_s>(&plugin, device, state, flags));
    return HAL_SUCCESS;
  });
}

static hal_result_t event_destroy_body(hal_event_t event) {
  constexpr const char* kFunction = "hal_event_destroy";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result = check_preconditions(kFunction, Nullable{event, "event"});
        result != HAL_SUCCESS) {
      return result;
    }
    if (event == nullptr) return HAL_SUCCESS;
    // One destroy wins, after the calls using the event have returned.
    if (!begin_destroy(event->header)) {
      return reject_destroying(event, HandleKind::kEvent, kFunction, "event");
    }
    // Waits already enqueued hold their own reference to the state; the
    // plugin's event is destroyed when the last of them has run.
    event->device->events.take(event);
    return HAL_SUCCESS;
  });
}

static hal_result_t event_record_body(hal_event_t event, hal_stream_t stream) {
  constexpr const char* kFunction = "hal_event_record";
  return guarded(kFunction, [&]() -> hal_result_t {
    HandleUse<hal_event_s> event_use;
    HandleUse<hal_stream_s> stream_use;
    if (hal_result_t result = check_preconditions(kFunction, Held{event, "event", event_use},
                                                  Held{stream, "stream", stream_use});
        result != HAL_SUCCESS) {
      return result;
    }
    if (stream->device != event->device) {
      return fail(HAL_ERROR_DEVICE_MISMATCH, kFunction,
                  "stream is on device %u but event was created on device %u",
                  stream->device->properties.index, event->device->properties.index);
    }
    EventState& state = *event->state;
    std::lock_guard lock(stream->enqueue_mutex);
    if (hal_result_t result = refuse_lost_stream(stream, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    const layers::tracing::StreamOpSpan span(stream, kFunction, 0);
    if (state.impl == nullptr) return record_loader_event(event->state, stream, kFunction);
    const hal_result_t result = state.plugin->table.event_record(state.impl, stream->impl);
    if (result != HAL_SUCCESS)
      return stream_entry_failed(stream, StreamEntry::kEnqueue, result, kFunction, *state.plugin);
    return HAL_SUCCESS;
  });
}

static hal_result_t event_query_body(hal_event_t event) {
  constexpr const char* kFunction = "hal_event_query";
  HandleUse<hal_event_s> use;
  if (hal_result_t result = check_preconditions(kFunction, Held{event, "event", use});
      result != HAL_SUCCESS) {
    return result;
  }
  EventState& state = *event->state;
  if (state.impl == nullptr) return query_loader_event(state);
  const hal_result_t result = state.plugin->table.event_query(state.impl);
  if (result != HAL_SUCCESS && result != HAL_NOT_READY) {
    return fail_from_plugin(result, kFunction, state.plugin->name);
  }
  return result;
}

static hal_result_t event_synchronize_body(hal_event_t event) {
  constexpr const char* kFunction = "hal_event_synchronize";
  HandleUse<hal_event_s> use;
  if (hal_result_t result = check_preconditions(kFunction, Held{event, "event", use});
      result != HAL_SUCCESS) {
    return result;
  }
  EventState& state = *event->state;
  if (state.impl == nullptr) return synchronize_loader_event(state);
  const hal_result_t result = state.plugin->table.event_synchronize(state.impl);
  if (result != HAL_SUCCESS) return fail_from_plugin(result, kFunction, state.plugin->name);
  return HAL_SUCCESS;
}

static hal_result_t event_elapsed_ms_body(hal_event_t start, hal_event_t end, float* out_ms) {
  constexpr const char* kFunction = "hal_event_elapsed_ms";
  HandleUse<hal_event_s> start_use;
  HandleUse<hal_event_s> end_use;
  if (hal_result_t result =
          check_preconditions(kFunction, Held{start, "start", start_use}, Held{end, "end", end_use},
                              Required{out_ms, "out_ms"});
      result != HAL_SUCCESS) {
    return result;
  }
  if (start->device != end->device) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, kFunction, "start is on device %u and end on device %u",
                start->device->properties.index, end->device->properties.index);
  }
  if (!start->state->timing_enabled || !end->state->timing_enabled) {
    return fail(HAL_ERROR_INVALID_STATE, kFunction, "%s was created without HAL_EVENT_FLAG_TIMING",
                start->state->timing_enabled ? "end" : "start");
  }
  EventState& first = *start->state;
  EventState& last = *end->state;
  const PluginRecord& plugin = *first.plugin;
  // Unreachable for loader events and plugins without event_elapsed_ms: their
  // devices lack HAL_DEVICE_CAP_EVENT_TIMING, so no event has the flag.
  if (first.impl == nullptr || plugin.table.event_elapsed_ms == nullptr) {
    return unsupported_entry(kFunction, plugin, "event_elapsed_ms");
  }
  // No time between failed work (SPEC 11.5): whatever the plugin's timestamps say.
  for (const EventState* state : {&first, &last}) {
    if (captured_failed_work(*state)) {
      return fail(HAL_ERROR_INVALID_STATE, kFunction,
                  "%s captured work that failed (its stream is lost): there is no elapsed time",
                  state == &first ? "start" : "end");
    }
  }
  const hal_result_t result = plugin.table.event_elapsed_ms(first.impl, last.impl, out_ms);
  if (result != HAL_SUCCESS) return fail_from_plugin(result, kFunction, plugin.name);
  return HAL_SUCCESS;
}

// ---- the public entries: the layers' hook around each body above ----

hal_result_t hal_event_create(hal_device_t device, hal_event_flags_t flags,
                              hal_event_t* out_event) {
  return layers::call<layers::EventCreate, event_create_body>(HAL_CALLER, device, flags, out_event);
}

hal_result_t hal_event_destroy(hal_event_t event) {
  return layers::call<layers::EventDestroy, event_destroy_body>(HAL_CALLER, event);
}

hal_result_t hal_event_record(hal_event_t event, hal_stream_t stream) {
  return layers::call<layers::EventRecord, event_record_body>(HAL_CALLER, event, stream);
}

hal_result_t hal_event_query(hal_event_t event) {
  return layers::call<layers::EventQuery, event_query_body>(HAL_CALLER, event);
}

hal_result_t hal_event_synchronize(hal_event_t event) {
  return layers::call<layers::EventSynchronize, event_synchronize_body>(HAL_CALLER, event);
}

hal_result_t hal_event_elapsed_ms(hal_event_t start, hal_event_t end, float* out_ms) {
  return layers::call<layers::EventElapsedMs, event_elapsed_ms_body>(HAL_CALLER, start, end,
                                                                     out_ms);
}
