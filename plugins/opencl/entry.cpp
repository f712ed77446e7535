// The opencl plugin's one exported symbol: the SDK's handshake
// (negotiate.hpp) with a context that discovers the platforms, and the table
// of every ABI 1.0 entry (hal_plugin_sdk/table.hpp). Collectives and
// operators are left to the loader's host-staged and portable ones.
#include "device.hpp"
#include "event.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/negotiate.hpp"
#include "hal_plugin_sdk/table.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::opencl {
namespace {

using Entries = plugin::ObjectEntries<Plugin, Device, Stream, Event, Module, Kernel>;
constexpr hal_plugin_table_v1_t kTable = plugin::make_table<Entries, plugin::kCoreEntries>();

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

HAL_PLUGIN_ENTRY_POINT(hal::opencl::Plugin, hal::opencl::kIdentity, hal::opencl::kTable)
