// The hip plugin's one exported symbol: negotiates the ABI, opens the runtime
// (or finds none) and hands the loader the function table
// (hal_plugin_sdk/table.hpp).
#include "device.hpp"
#include "event.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/negotiate.hpp"
#include "hal_plugin_sdk/table.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::hip {
namespace {

using Entries = plugin::ObjectEntries<Plugin, Device, Stream, Event, Module, Kernel>;
// Every ABI 1.0 entry. Collectives and operators are the loader's
// host-staged and portable ones (no RCCL or rocBLAS here).
constexpr hal_plugin_table_v1_t kTable = plugin::make_table<Entries, plugin::kCoreEntries>();

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

// The one handshake (hal_plugin_sdk/negotiate.hpp); a missing runtime or GPU is
// not a failure: the plugin loads with 0 devices and says why (SPEC §10.8).
HAL_PLUGIN_ENTRY_POINT(hal::hip::Plugin, hal::hip::kIdentity, hal::hip::kTable)
