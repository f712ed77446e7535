// The null plugin's one exported symbol: the SDK's handshake (negotiate.hpp)
// with this plugin's identity, context and function table.
#include "hal_plugin_sdk/negotiate.hpp"
#include "null.hpp"

#ifndef HAL_NULL_BUILD_ID
#define HAL_NULL_BUILD_ID "null plugin template"  // TODO(null): a git hash and build type
#endif

namespace hal::null_plugin {
namespace {

// Every entry of SPEC.md §10.3. The ones left NULL have a loader fallback
// that serves a device like this one; implementing them is how a real device
// gets asynchronous host callbacks and native collectives (the loader clears
// HAL_DEVICE_CAP_HOST_CALLBACKS while stream_enqueue_host_fn is NULL).
constexpr hal_plugin_table_v1_t kTable = {
    .struct_size = sizeof(hal_plugin_table_v1_t),
    .plugin_shutdown = plugin_shutdown,
    .device_count = device_count,
    .device_open = device_open,
    .device_close = device_close,
    .device_get_properties = device_get_properties,
    .device_synchronize = device_synchronize,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .memcpy_async = memcpy_async,
    .memset_async = memset_async,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .stream_query = stream_query,
    .stream_wait_event = stream_wait_event,
    // TODO(null): run host functions in stream order on a thread of the
    // plugin, then declare HAL_DEVICE_CAP_HOST_CALLBACKS. NULL: the loader
    // synchronises the stream and calls the function on the caller's thread.
    .stream_enqueue_host_fn = nullptr,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_query,
    .event_synchronize = event_synchronize,
    .event_elapsed_ms = event_elapsed_ms,
    .module_load = module_load,
    .module_unload = module_unload,
    .kernel_get = kernel_get,
    .launch_kernel = launch_kernel,
    // TODO(null): native collectives (SPEC.md §10.4): set at least
    // comm_init_local, comm_destroy, comm_abort and comm_enqueue. All NULL:
    // the loader runs host-staged collectives over memcpy_async.
    .comm_init_local = nullptr,
    .comm_init_rank = nullptr,
    .comm_destroy = nullptr,
    .comm_abort = nullptr,
    .comm_get_async_error = nullptr,
    .comm_enqueue = nullptr,
    // Operators: none of its own yet; the loader's portable ones serve it.
    .op_plan_create = nullptr,
    .op_plan_destroy = nullptr,
    .op_execute = nullptr,
    .comm_init_rank_exchange = nullptr,
};

constexpr plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                        HAL_NULL_BUILD_ID};

}  // namespace
}  // namespace hal::null_plugin

extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                           hal_plugin_v1_t* out_plugin) {
  using namespace hal::null_plugin;
  return hal::plugin::enter(
      host, out_plugin, kIdentity, kTable,
      [&](const hal::plugin::ErrorReporter&, hal_plugin_context_t** out_context) {
        // TODO(null): open the driver here; on failure release what was
        // acquired and return report.fail(...) with the driver's code.
        auto plugin = std::make_unique<Plugin>(host);
        *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
        return HAL_SUCCESS;
      });
}
