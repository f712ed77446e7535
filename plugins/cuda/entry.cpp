// The cuda plugin's one exported symbol: negotiates the ABI, opens the driver
// (or finds none) and hands the loader the function table.
#include "collective/comm.hpp"
#include "device.hpp"
#include "event.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/negotiate.hpp"
#include "hal_plugin_sdk/table.hpp"
#include "module.hpp"
#include "ops/ops.hpp"
#include "stream.hpp"

namespace hal::cuda {
namespace {

using Entries = plugin::ObjectEntries<Plugin, Device, Stream, Event, Module, Kernel,
                                      collective::Comm, ops::OpPlan>;
// Every ABI 1.0 entry and the operators (matmul on cuBLASLt, convolution on
// cuDNN; the plugin declines the rest, which the loader's portable
// implementations serve).
constexpr plugin::EntrySet kImplemented = plugin::kCoreEntries | plugin::kOperatorEntries;
// The table of a plugin that found no NCCL: the loader's host-staged
// collectives serve.
constexpr hal_plugin_table_v1_t kTable = plugin::make_table<Entries, kImplemented>();
// The table of a plugin that found NCCL. comm_init_rank stays NULL: the MPI
// bootstrap goes to the loader's host-staged path; the store bootstraps meet
// through comm_init_rank_exchange.
constexpr hal_plugin_table_v1_t kCollectiveTable =
    plugin::make_table<Entries, kImplemented |
                                    (plugin::kCollectiveEntries - plugin::Entry::comm_init_rank)>();

// What the CUDA libraries the plugin opens read from the environment (SPEC.md
// §15): the driver (CUDA_INJECTION64_PATH loads a library, CUDA_CACHE_PATH
// is its JIT cache, __GL_* and __NV_* its settings), NCCL (NCCL_NET_PLUGIN,
// NCCL_TUNER_PLUGIN load libraries, NCCL_DEBUG_FILE writes one), cuBLASLt
// (CUBLASLT_LOG_FILE writes one), cuDNN (CUDNN_LOGDEST_DBG writes one) and
// NVRTC.
constexpr std::string_view kVendorPrefixes[] = {"CUDA_",  "NCCL_",  "CUBLAS_", "CUBLASLT_",
                                                "CUDNN_", "NVRTC_", "__NV_",   "__GL_"};
constexpr hal::plugin::VendorEnvironment kVendorEnvironment = {
    "the CUDA driver, NVRTC, NCCL, cuBLASLt and cuDNN", {}, kVendorPrefixes};

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
