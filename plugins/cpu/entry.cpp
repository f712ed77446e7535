// The cpu plugin's one exported symbol: the SDK's handshake (negotiate.hpp)
// with the cpu plugin's context and function table.
#include "hal_util/env.hpp"

#include <cstdlib>
#include <string>

#include "collective.hpp"
#include "device.hpp"
#include "event.hpp"
#include "hal_plugin.h"
#include "hal_plugin_sdk/negotiate.hpp"
#include "launch.hpp"
#include "memory.hpp"
#include "module.hpp"
#include "plugin.hpp"
#include "ops/ops.hpp"
#include "stream.hpp"

#ifndef HAL_CPU_BUILD_ID
#define HAL_CPU_BUILD_ID "unknown"
#endif

namespace hal::cpu {
namespace {

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
    .stream_enqueue_host_fn = stream_enqueue_host_fn,
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
    .comm_init_local = comm_init_local,
    .comm_init_rank = comm_init_rank,
    .comm_destroy = comm_destroy,
    .comm_abort = comm_abort,
    .comm_get_async_error = comm_get_async_error,
    .comm_enqueue = comm_enqueue,
    // The plugin's own operators (ops/): matmul on oneDNN when built with
    // it, the native elementwise ops always; what they decline goes to the
    // loader's portable implementations.
    .op_plan_create = op_plan_create,
    .op_plan_destroy = op_plan_destroy,
    .op_execute = op_execute,
    // The store bootstraps are the loader's: it runs them host-staged.
    .comm_init_rank_exchange = comm_init_rank_exchange,
};

// What the libraries the cpu plugin opens read from the environment (SPEC.md
// §15): oneDNN (ONEDNN_JIT_DUMP writes files, ONEDNN_VERBOSE prints shapes),
// the OpenMP runtime (OMP_TOOL_LIBRARIES loads a tool library in LLVM's),
// and MPI with what it runs on (Open MPI's and PMIx's component paths,
// MPICH's, UCX's module directory, libfabric's FI_PROVIDER_PATH, hwloc's
// HWLOC_PLUGINS_PATH load libraries), and the OpenCL ICD loader oneDNN links.
// libgomp reads OMP_* and GOMP_* when the plugin is mapped, before this
// list is applied: thread counts and placement, no library.
constexpr std::string_view kVendorPrefixes[] = {
    "ONEDNN_", "DNNL_",      "OMP_",   "GOMP_", "KMP_", "OMPI_",  "OPAL_",    "PMIX_",  "PRTE_",
    "MPICH_",  "MPIR_CVAR_", "HYDRA_", "UCX_",  "FI_",  "HWLOC_", "OCL_ICD_", "OPENCL_"};
constexpr hal::plugin::VendorEnvironment kVendorEnvironment = {
    "oneDNN, OpenMP, MPI and hwloc", {}, kVendorPrefixes};

constexpr hal::plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                             HAL_CPU_BUILD_ID, &kVendorEnvironment};

}  // namespace
}  // namespace hal::cpu

extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                           hal_plugin_v1_t* out_plugin) {
  using namespace hal::cpu;
  return hal::plugin::enter(
      host, out_plugin, kIdentity, kTable,
      [&](const hal::plugin::ErrorReporter& report, hal_plugin_context_t** out_context) {
        uint32_t devices = 0;
        std::string why;
        if (!parse_device_count(hal::util::env("HAL_CPU_DEVICES"), &devices, why)) {
          return report.fail(HAL_ERROR_INVALID_ARGUMENT, 0, "%s", why.c_str());
        }
        uint64_t memory_per_device = 0;
        if (!parse_device_memory(hal::util::env("HAL_CPU_DEVICE_MEMORY"), &memory_per_device,
                                 why)) {
          return report.fail(HAL_ERROR_INVALID_ARGUMENT, 0, "%s", why.c_str());
        }
        StreamLimits stream_limits;
        if (!parse_stream_limits(hal::util::env("HAL_CPU_STREAM_THREADS"),
                                 hal::util::env("HAL_CPU_STREAM_QUEUE_DEPTH"),
                                 hal::util::env("HAL_CPU_EXECUTOR_SPIN_US"), &stream_limits, why)) {
          return report.fail(HAL_ERROR_INVALID_ARGUMENT, 0, "%s", why.c_str());
        }
        auto plugin = std::make_unique<Plugin>(host, devices, memory_per_device, stream_limits);
        *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
        return HAL_SUCCESS;
      });
}
