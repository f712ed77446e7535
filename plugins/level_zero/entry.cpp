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

constexpr hal::plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                             HAL_LEVEL_ZERO_BUILD_ID};

}  // namespace
}  // namespace hal::level_zero

extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                           hal_plugin_v1_t* out_plugin) {
  using namespace hal::level_zero;
  // The one handshake (hal_plugin_sdk/negotiate.hpp); a missing driver is not
  // a failure: the plugin loads with 0 devices and says why (SPEC §10.9).
  return hal::plugin::enter(
      host, out_plugin, kIdentity, kTable,
      [&](const hal::plugin::ErrorReporter&, hal_plugin_context_t** out_context) {
        auto plugin = std::make_unique<Plugin>(host);
        *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
        return HAL_SUCCESS;
      });
}
