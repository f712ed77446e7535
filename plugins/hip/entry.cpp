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

constexpr hal::plugin::Identity kIdentity = {kPluginName, "1.0.0", "HAL project", HAL_HIP_BUILD_ID};

}  // namespace
}  // namespace hal::hip

// The one handshake (hal_plugin_sdk/negotiate.hpp); a missing runtime or GPU is
// not a failure: the plugin loads with 0 devices and says why (SPEC §10.8).
HAL_PLUGIN_ENTRY_POINT(hal::hip::Plugin, hal::hip::kIdentity, hal::hip::kTable)
