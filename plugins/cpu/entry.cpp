// The cpu plugin's one exported symbol: the SDK's handshake (negotiate.hpp)
// with the cpu plugin's context and function table.
#include "hal_util/env.hpp"

#include <cstdlib>
#include <string>

#include "collective.hpp"
#include "device.hpp"
#include "event.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/negotiate.hpp"
#include "hal_plugin_sdk/table.hpp"
#include "module.hpp"
#include "ops/ops.hpp"
#include "stream.hpp"

#ifndef HAL_CPU_BUILD_ID
#define HAL_CPU_BUILD_ID "unknown"
#endif

namespace hal::cpu {
namespace {

// The collective and operator entries are the plugin's own functions
// (collective.cpp, ops/entry.cpp); every other entry is the SDK's over the
// plugin's classes.
struct Entries : plugin::ObjectEntries<Plugin, Device, Stream, Event, Module, Kernel> {
  static constexpr auto& comm_init_local = cpu::comm_init_local;
  static constexpr auto& comm_init_rank = cpu::comm_init_rank;
  static constexpr auto& comm_destroy = cpu::comm_destroy;
  static constexpr auto& comm_abort = cpu::comm_abort;
  static constexpr auto& comm_get_async_error = cpu::comm_get_async_error;
  static constexpr auto& comm_enqueue = cpu::comm_enqueue;
  // The store bootstraps meet through it; a rank that cannot share a
  // segment with its peers leaves them to the loader's host-staged path.
  static constexpr auto& comm_init_rank_exchange = cpu::comm_init_rank_exchange;
  // Matmul on oneDNN when built with it, the native elementwise ops always;
  // what they decline goes to the loader's portable implementations.
  static constexpr auto& op_plan_create = cpu::op_plan_create;
  static constexpr auto& op_plan_destroy = cpu::op_plan_destroy;
  static constexpr auto& op_execute = cpu::op_execute;
  static constexpr auto& op_implementation = cpu::op_implementation;
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

// Every entry of the table.
constexpr hal_plugin_table_v1_t kTable =
    plugin::make_table<Entries, plugin::kCoreEntries | plugin::kCollectiveEntries |
                                    plugin::kOperatorEntries>();

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
        bool avx512 = true;
        if (!ops::parse_avx512_setting(hal::util::env("HAL_CPU_AVX512"), &avx512, why)) {
          return report.fail(HAL_ERROR_INVALID_ARGUMENT, 0, "%s", why.c_str());
        }
        ops::allow_avx512(avx512);
        auto plugin = std::make_unique<Plugin>(host, devices, memory_per_device, stream_limits);
        *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
        return HAL_SUCCESS;
      });
}
