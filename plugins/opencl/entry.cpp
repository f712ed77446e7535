// The opencl plugin's one exported symbol: the SDK's handshake
// (negotiate.hpp) with a context that discovers the platforms.
#include "device.hpp"
#include "hal_plugin.h"
#include "hal_plugin_sdk/negotiate.hpp"
#include "module.hpp"
#include "plugin.hpp"
#include "stream.hpp"

namespace hal::opencl {
namespace {

hal_plugin_table_v1_t make_table() {
  hal_plugin_table_v1_t table{};
  table.struct_size = sizeof(hal_plugin_table_v1_t);
  table.plugin_shutdown = plugin_shutdown;
  table.device_count = device_count;
  table.device_open = device_open;
  table.device_close = device_close;
  table.device_get_properties = device_get_properties;
  table.device_synchronize = device_synchronize;
  table.mem_alloc = mem_alloc;
  table.mem_free = mem_free;
  table.memcpy_async = memcpy_async;
  table.memset_async = memset_async;
  table.stream_create = stream_create;
  table.stream_destroy = stream_destroy;
  table.stream_synchronize = stream_synchronize;
  table.stream_query = stream_query;
  table.stream_wait_event = stream_wait_event;
  table.stream_enqueue_host_fn = stream_enqueue_host_fn;
  table.event_create = event_create;
  table.event_destroy = event_destroy;
  table.event_record = event_record;
  table.event_query = event_query;
  table.event_synchronize = event_synchronize;
  table.event_elapsed_ms = event_elapsed_ms;
  table.module_load = module_load;
  table.module_unload = module_unload;
  table.kernel_get = kernel_get;
  table.launch_kernel = launch_kernel;
  return table;  // entries appended to the table later (collectives...) stay NULL
}

const hal_plugin_table_v1_t kTable = make_table();

// What the OpenCL ICD loader and the OpenCL implementations it opens read
// from the environment (SPEC.md §15): OCL_ICD_VENDORS, OCL_ICD_FILENAMES and
// OPENCL_VENDOR_PATH name the drivers to load, OPENCL_LAYERS and
// OPENCL_LAYER_PATH load layers, POCL_* (POCL_BUILDING, POCL_CACHE_DIR,
// POCL_DEVICES...) and RUSTICL_* steer the implementations.
constexpr std::string_view kVendorPrefixes[] = {"OCL_ICD_", "OPENCL_", "POCL_", "RUSTICL_"};
constexpr hal::plugin::VendorEnvironment kVendorEnvironment = {
    "the OpenCL ICD loader and PoCL", {}, kVendorPrefixes};

constexpr hal::plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                             "opencl " __DATE__, &kVendorEnvironment};

}  // namespace
}  // namespace hal::opencl

extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                           hal_plugin_v1_t* out_plugin) {
  using namespace hal::opencl;
  return hal::plugin::enter(
      host, out_plugin, kIdentity, kTable,
      [&](const hal::plugin::ErrorReporter&, hal_plugin_context_t** out_context) {
        auto plugin = std::make_unique<Plugin>(host);
        *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
        return HAL_SUCCESS;
      });
}
