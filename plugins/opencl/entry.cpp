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

constexpr hal::plugin::Identity kIdentity = {kPluginName, "1.0.0", "HAL project",
                                             "opencl " __DATE__};

}  // namespace
}  // namespace hal::opencl

HAL_PLUGIN_ENTRY_POINT(hal::opencl::Plugin, hal::opencl::kIdentity, hal::opencl::kTable)
