// The level_zero plugin's one exported symbol: negotiates the ABI, opens the
// Level Zero loader (or finds none) and hands the loader the function table
// (hal_plugin_sdk/table.hpp).
#include "device.hpp"
#include "event.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/negotiate.hpp"
#include "hal_plugin_sdk/table.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::level_zero {
namespace {

using Entries = plugin::ObjectEntries<Plugin, Device, Stream, Event, Module, Kernel>;
// Every ABI 1.0 entry but device_synchronize: Level Zero has no wait for a
// whole device's immediate command lists, so the loader synchronises each
// live stream of the device. Collectives and operators are the loader's.
constexpr plugin::EntrySet kImplemented = plugin::kCoreEntries - plugin::Entry::device_synchronize;
constexpr hal_plugin_table_v1_t kTable = plugin::make_table<Entries, kImplemented>();

// What the Level Zero loader and its drivers read from the environment
// (SPEC.md §15): ZE_ENABLE_ALT_DRIVERS names the driver libraries to load,
// ZE_ENABLE_VALIDATION_LAYER and ZE_ENABLE_TRACING_LAYER load layers, and
// the rest (ZE_*, ZEL_*, ZES_*, ZET_*) are their settings.
constexpr std::string_view kVendorPrefixes[] = {"ZE_", "ZEL_", "ZES_", "ZET_"};
constexpr hal::plugin::VendorEnvironment kVendorEnvironment = {
    "the Level Zero loader and its drivers", {}, kVendorPrefixes};

constexpr hal::plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                             HAL_LEVEL_ZERO_BUILD_ID, &kVendorEnvironment};

}  // namespace
}  // namespace hal::level_zero

// The one handshake (hal_plugin_sdk/negotiate.hpp); a missing driver is not
// a failure: the plugin loads with 0 devices and says why (SPEC §10.9).
HAL_PLUGIN_ENTRY_POINT(hal::level_zero::Plugin, hal::level_zero::kIdentity, hal::level_zero::kTable)
