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

constexpr hal::plugin::Identity kIdentity = {kPluginName, "1.0.0", "HAL project",
                                             HAL_LEVEL_ZERO_BUILD_ID};

}  // namespace
}  // namespace hal::level_zero

// The one handshake (hal_plugin_sdk/negotiate.hpp); a missing driver is not
// a failure: the plugin loads with 0 devices and says why (SPEC §10.9).
HAL_PLUGIN_ENTRY_POINT(hal::level_zero::Plugin, hal::level_zero::kIdentity, hal::level_zero::kTable)
