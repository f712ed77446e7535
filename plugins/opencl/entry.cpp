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

constexpr hal::plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                             "opencl " __DATE__};

}  // namespace
}  // namespace hal::opencl

extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                           hal_plugin_v1_t* out_plugin) {
  using namespace hal::opencl;
  return hal::plugin::enter(
      host, out_plugin, kIdentity, kTable,
      [&](const hal::plugin::ErrorReporter&, hal_plugin_context_t** out_context) {
        auto plugin = std::make_unique<Plugin>(host);
        *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
        return HAL_SUCCESS;
      });
}
