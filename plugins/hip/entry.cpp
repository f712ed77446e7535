// The hip plugin's one exported symbol: negotiates the ABI, opens the runtime
// (or finds none) and hands the loader the function table.
#include "device.hpp"
#include "hal_plugin.h"
#include "hal_plugin_sdk/negotiate.hpp"
#include "module.hpp"
#include "plugin.hpp"
#include "stream.hpp"

namespace hal::hip {
namespace {

hal_plugin_table_v1_t make_table() {
  hal_plugin_table_v1_t table{};
  table.struct_size = sizeof(hal_plugin_table_v1_t);
  table.plugin_shutdown = plugin_shutdown;
  table.device_count = device_count;
  table.device_open = device_open;
  DeviceEntries::fill(table);  // close, properties, synchronize, mem_alloc, mem_free
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

// What the ROCm libraries the plugin opens read from the environment (SPEC.md
// §15): the HIP runtime and its compiler (HIP_PATH, ROCM_PATH, HIP_CLANG_PATH
// choose what runs; AMD_LOG_LEVEL_FILE writes a file; AMD_*, GPU_*, ROC_*
// are its settings), the HSA runtime (HSA_TOOLS_LIB loads libraries),
// rocprofiler (ROCP_*) and RCCL (its NCCL_* and RCCL_* settings, plugins).
constexpr std::string_view kVendorPrefixes[] = {"HIP_",  "HIPRTC_",      "HSA_",  "ROCR_",
                                                "ROCM_", "ROC_",         "AMD_",  "GPU_",
                                                "ROCP_", "ROCPROFILER_", "RCCL_", "NCCL_"};
constexpr hal::plugin::VendorEnvironment kVendorEnvironment = {
    "the HIP runtime, HSA and RCCL", {}, kVendorPrefixes};

constexpr hal::plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                             HAL_HIP_BUILD_ID, &kVendorEnvironment};

}  // namespace
}  // namespace hal::hip

extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                           hal_plugin_v1_t* out_plugin) {
  using namespace hal::hip;
  // The one handshake (hal_plugin_sdk/negotiate.hpp); a missing runtime or GPU is not
  // a failure: the plugin loads with 0 devices and says why (SPEC §10.8).
  return hal::plugin::enter(
      host, out_plugin, kIdentity, kTable,
      [&](const hal::plugin::ErrorReporter&, hal_plugin_context_t** out_context) {
        auto plugin = std::make_unique<Plugin>(host);
        *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
        return HAL_SUCCESS;
      });
}
