// hal/stream.h: streams and host functions.
#include "api_common.hpp"
#include "layers/intercept.hpp"
#include "fallbacks.hpp"
#include "host_functions.hpp"

using namespace hal::loader;

static hal_result_t stream_create_body(hal_device_t device, hal_stream_flags_t flags,
                                       hal_stream_t* out_stream) {
  constexpr const char* kFunction = "hal_stream_create";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result = check_preconditions(kFunction, Live{device, "device"},
                                                  Required{out_stream, "out_stream"});
        result != HAL_SUCCESS) {
      return result;
    }
    if (flags != HAL_STREAM_FLAG_NONE) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "flags 0x%x has bits no v1.0 stream flag defines", flags);
    }
    const PluginRecord& plugin = *device->plugin;
    hal_impl_stream_t* impl = nullptr;
    if (hal_result_t result = plugin.table.stream_create(device->impl, flags, &impl);
        result != HAL_SUCCESS) {
      return fail_from_plugin(result, kFunction, plugin.name);
    }
    HandleOwner<hal_stream_s> stream;
    try {
      stream = make_handle<hal_stream_s>(&plugin, impl, device);
    } catch (...) {
      plugin.table.stream_destroy(impl);
      throw;
    }
    *out_stream = device->streams.add(std::move(stream));
    return HAL_SUCCESS;
  });
}

static hal_result_t stream_destroy_body(hal_stream_t stream) {
  constexpr const char* kFunction = "hal_stream_destroy";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result = check_preconditions(kFunction, Nullable{stream, "stream"});
        result != HAL_SUCCESS) {
      return result;
    }
    if (stream == nullptr) return HAL_SUCCESS;
    if (hal_result_t result = refuse_wait_in_host_fn(stream, nullptr, kFunction);
        result != HAL_SUCCESS) {
      return result;
    }
    // One destroy wins; it waits for the calls using the stream to return, and
    // later calls (or a second destroy) see a destroyed handle.
    if (!begin_destroy(stream->header)) {
      return reject_destroying(stream, HandleKind::kStream, kFunction, "stream");
    }
    HandleOwner<hal_stream_s> owned = stream->device->streams.take(stream);
    const PluginRecord& plugin = *stream->header.plugin;
    // The work finishes first; a lost stream's failure, whatever its code,
    // is dropped (SPEC 4.4).
    drain_stream(stream, kFunction);
    const hal_result_t destroyed = plugin.table.stream_destroy(stream->impl);
    if (destroyed != HAL_SUCCESS) return fail_from_plugin(destroyed, kFunction, plugin.name);
    return HAL_SUCCESS;
  });
}

static hal_result_t stream_get_device_body(hal_stream_t stream, hal_device_t* out_device) {
  constexpr const char* kFunction = "hal_stream_get_device";
  HandleUse<hal_stream_s> use;
  if (hal_result_t result = check_preconditions(kFunction, Held{stream, "stream", use},
                                                Required{out_device, "out_device"});
      result != HAL_SUCCESS) {
    return result;
  }
  *out_device = stream->device;
  return HAL_SUCCESS;
}

static hal_result_t stream_synchronize_body(hal_stream_t stream) {
  constexpr const char* kFunction = "hal_stream_synchronize";
  HandleUse<hal_stream_s> use;
  if (hal_result_t result = check_preconditions(kFunction, Held{stream, "stream", use});
      result != HAL_SUCCESS) [[unlikely]] {
    return result;
  }
  if (hal_result_t result = refuse_wait_in_host_fn(stream, nullptr, kFunction);
      result != HAL_SUCCESS) [[unlikely]] {
    return result;
  }
  return synchronize_stream(stream, kFunction);
}

// inline: a hint that keeps this body inside hal_stream_query, as it was
// before check_preconditions (bench/loader_overhead measures this call).
static inline hal_result_t stream_query_body(hal_stream_t stream) {
  constexpr const char* kFunction = "hal_stream_query";
  HandleUse<hal_stream_s> use;
  if (hal_result_t result = check_preconditions(kFunction, Held{stream, "stream", use});
      result != HAL_SUCCESS) [[unlikely]] {
    return result;
  }
  const PluginRecord& plugin = *stream->header.plugin;
  if (plugin.table.stream_query == nullptr) [[unlikely]] {
    // Without a non-blocking query the answer waits for the work (the device
    // then lacks HAL_DEVICE_CAP_STREAM_QUERY).
    if (hal_result_t result = refuse_wait_in_host_fn(stream, nullptr, kFunction);
        result != HAL_SUCCESS) {
      return result;
    }
    return synchronize_stream(stream, kFunction);
  }
  const hal_result_t result = plugin.table.stream_query(stream->impl);
  if (result != HAL_SUCCESS && result != HAL_NOT_READY) [[unlikely]] {
    return stream_entry_failed(stream, StreamEntry::kWait, result, kFunction, plugin);
  }
  return result;
}

static hal_result_t stream_wait_event_body(hal_stream_t stream, hal_event_t event) {
  constexpr const char* kFunction = "hal_stream_wait_event";
  return guarded(kFunction, [&]() -> hal_result_t {
    HandleUse<hal_stream_s> stream_use;
    HandleUse<hal_event_s> event_use;
    if (hal_result_t result = check_preconditions(kFunction, Held{stream, "stream", stream_use},
                                                  Held{event, "event", event_use});
        result != HAL_SUCCESS) {
      return result;
    }
    std::lock_guard lock(stream->enqueue_mutex);
    if (hal_result_t result = refuse_lost_stream(stream, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    const layers::tracing::StreamOpSpan span(stream, kFunction, 0);
    return wait_for_event(stream, event->state, kFunction);
  });
}

static hal_result_t stream_enqueue_host_fn_body(hal_stream_t stream, hal_host_fn_t fn,
                                                void* user_data) {
  constexpr const char* kFunction = "hal_stream_enqueue_host_fn";
  HandleUse<hal_stream_s> use;
  if (hal_result_t result = check_preconditions(kFunction, Held{stream, "stream", use},
                                                Required{reinterpret_cast<const void*>(fn), "fn"});
      result != HAL_SUCCESS) {
    return result;
  }
  return guarded(kFunction, [&] {
    std::lock_guard lock(stream->enqueue_mutex);
    if (hal_result_t result = refuse_lost_stream(stream, kFunction); result != HAL_SUCCESS) {
      return result;
    }
    const layers::tracing::StreamOpSpan span(stream, kFunction, 0);
    return enqueue_application_host_fn(stream, fn, user_data, kFunction);
  });
}

// ---- the public entries: the layers' hook around each body above ----

hal_result_t hal_stream_create(hal_device_t device, hal_stream_flags_t flags,
                               hal_stream_t* out_stream) {
  return layers::call<layers::StreamCreate, stream_create_body>(HAL_CALLER, device, flags,
                                                                out_stream);
}

hal_result_t hal_stream_destroy(hal_stream_t stream) {
  return layers::call<layers::StreamDestroy, stream_destroy_body>(HAL_CALLER, stream);
}

hal_result_t hal_stream_get_device(hal_stream_t stream, hal_device_t* out_device) {
  return layers::call<layers::StreamGetDevice, stream_get_device_body>(HAL_CALLER, stream,
                                                                       out_device);
}

hal_result_t hal_stream_synchronize(hal_stream_t stream) {
  return layers::call<layers::StreamSynchronize, stream_synchronize_body>(HAL_CALLER, stream);
}

hal_result_t hal_stream_query(hal_stream_t stream) {
  return layers::call<layers::StreamQuery, stream_query_body>(HAL_CALLER, stream);
}

hal_result_t hal_stream_wait_event(hal_stream_t stream, hal_event_t event) {
  return layers::call<layers::StreamWaitEvent, stream_wait_event_body>(HAL_CALLER, stream, event);
}

hal_result_t hal_stream_enqueue_host_fn(hal_stream_t stream, hal_host_fn_t fn, void* user_data) {
  return layers::call<layers::StreamEnqueueHostFn, stream_enqueue_host_fn_body>(HAL_CALLER, stream,
                                                                                fn, user_data);
}
