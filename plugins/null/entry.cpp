// The null plugin's one exported symbol: the SDK's handshake (negotiate.hpp)
// with this plugin's identity, context and function table. The table comes
// from the SDK's one list of entries (hal_plugin_sdk/table.hpp): this file
// only says which of them the plugin implements.
#include "device.hpp"
#include "event.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/negotiate.hpp"
#include "hal_plugin_sdk/table.hpp"
#include "module.hpp"
#include "stream.hpp"

#ifndef HAL_NULL_BUILD_ID
#define HAL_NULL_BUILD_ID "null plugin template"  // TODO(null): a git hash and build type
#endif

namespace hal::null_plugin {
namespace {

using Entries = plugin::ObjectEntries<Plugin, Device, Stream, Event, Module, Kernel>;

// Every entry of ABI 1.0 (SPEC.md §10.3) but one. The ones left NULL have a
// loader fallback that serves a device like this one:
// - stream_enqueue_host_fn: the loader synchronises the stream and calls the
//   function on the caller's thread, and clears HAL_DEVICE_CAP_HOST_CALLBACKS.
//   TODO(null): run host functions in stream order on a thread of the plugin
//   (Stream::enqueue_host_fn), then implement it and declare the capability.
// - the collectives: the loader runs host-staged collectives over
//   memcpy_async. TODO(null): native collectives (SPEC.md §10.4), a Comm class
//   and plugin::kCollectiveEntries (at least comm_init_local, comm_destroy,
//   comm_abort and comm_enqueue).
// - the operators: the loader's portable implementations serve the device.
constexpr plugin::EntrySet kImplemented =
    plugin::kCoreEntries - plugin::Entry::stream_enqueue_host_fn;
constexpr hal_plugin_table_v1_t kTable = plugin::make_table<Entries, kImplemented>();

constexpr plugin::Identity kIdentity = {kPluginName, kPluginVersion, kPluginVendor,
                                        HAL_NULL_BUILD_ID};

}  // namespace
}  // namespace hal::null_plugin

// TODO(null): a driver that cannot open is no failure: the plugin loads with
// 0 devices and logs why. For a failure that must refuse the load, use
// plugin::enter with a create function that returns report.fail(...).
HAL_PLUGIN_ENTRY_POINT(hal::null_plugin::Plugin, hal::null_plugin::kIdentity,
                       hal::null_plugin::kTable)
