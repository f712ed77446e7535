// The cuda plugin's one exported symbol: negotiates the ABI, opens the driver
// (or finds none) and hands the loader the function table.
#include "collective/comm.hpp"
#include "device.hpp"
#include "hal_plugin.h"
#include "hal_plugin_sdk/negotiate.hpp"
#include "module.hpp"
#include "ops/ops.hpp"
#include "plugin.hpp"
#include "stream.hpp"

namespace hal::cuda {
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
  table.op_plan_create = op_plan_create;
  table.op_plan_destroy = op_plan_destroy;
  table.op_execute = op_execute;
  return table;  // the collective entries stay NULL: the loader's host-staged ones serve
}

// The table of a plugin that found NCCL.
hal_plugin_table_v1_t make_collective_table() {
  hal_plugin_table_v1_t table = make_table();
  table.comm_init_local = collective::comm_init_local;
  table.comm_init_rank_exchange = collective::comm_init_rank_exchange;
  table.comm_destroy = collective::comm_destroy;
  table.comm_abort = collective::comm_abort;
  table.comm_get_async_error = collective::comm_get_async_error;
  table.comm_enqueue = collective::comm_enqueue;
  return table;
}

const hal_plugin_table_v1_t kTable = make_table();
const hal_plugin_table_v1_t kCollectiveTable = make_collective_table();

// What the CUDA libraries the plugin opens read from the environment (SPEC.md
// §15): the driver (CUDA_INJECTION64_PATH loads a library, CUDA_CACHE_PATH
// is its JIT cache, __GL_* and __NV_* its settings), NCCL (NCCL_NET_PLUGIN,
// NCCL_TUNER_PLUGIN load libraries, NCCL_DEBUG_FILE writes one), cuBLASLt
// (CUBLASLT_LOG_FILE writes one) and NVRTC.
constexpr std::string_view kVendorPrefixes[] = {"CUDA_",  "NCCL_", "CUBLAS_", "CUBLASLT_",
                                                "NVRTC_", "__NV_", "__GL_"};
constexpr hal::plugin::VendorEnvironment kVendorEnvironment = {
    "the CUDA driver, NVRTC, NCCL and cuBLASLt", {}, kVendorPrefixes};

constexpr hal::plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                             HAL_CUDA_BUILD_ID, &kVendorEnvironment};

}  // namespace
}  // namespace hal::cuda

extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                           hal_plugin_v1_t* out_plugin) {
  using namespace hal::cuda;
  // The one handshake (hal_plugin_sdk/negotiate.hpp); a missing driver is not
  // a failure: the plugin loads with 0 devices and says why (SPEC §10.7).
  bool collectives = false;
  const hal_result_t entered = hal::plugin::enter(
      host, out_plugin, kIdentity, kTable,
      [&](const hal::plugin::ErrorReporter&, hal_plugin_context_t** out_context) {
        auto plugin = std::make_unique<Plugin>(host);
        collectives = plugin->has_collectives();
        *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
        return HAL_SUCCESS;
      });
  // Which table depends on what the plugin found: NCCL, or not.
  if (entered == HAL_SUCCESS && collectives) out_plugin->table = &kCollectiveTable;
  return entered;
}
