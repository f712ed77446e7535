// The ABI handshake of hal_plugin_entry (SPEC.md §10.1), written once for
// every plugin: check what the loader offers, create the plugin's context,
// and describe the plugin in |out_plugin|. A plugin whose context is made by
// Plugin(host) defines its entry point with
//
//   HAL_PLUGIN_ENTRY_POINT(Plugin, kIdentity, kTable);
//
// and one whose context is made another way writes
//
//   extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(
//       const hal_plugin_host_t* host, hal_plugin_v1_t* out_plugin) {
//     return hal::plugin::enter(host, out_plugin, kIdentity, kTable,
//         [&](const hal::plugin::ErrorReporter& report, hal_plugin_context_t** out_context) {
//           ... create the context, or return report.fail(...);
//         });
//   }
#ifndef HAL_PLUGIN_SDK_NEGOTIATE_HPP_
#define HAL_PLUGIN_SDK_NEGOTIATE_HPP_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hal_plugin.h"
#include "hal_plugin_sdk/report.hpp"
#include "hal_plugin_sdk/vendor_environment.hpp"

namespace hal::plugin {

// Who the plugin is: static strings, valid until the plugin is unloaded.
struct Identity {
  const char* name;      // short, unique, lower case: "cpu"
  const char* version;   // the plugin's own version
  const char* vendor;    // who made it
  const char* build_id;  // e.g. a git hash and the build type
  // The environment variables of the vendor libraries the plugin opens
  // (vendor_environment.hpp): removed before |create| runs, in a
  // secure-execution process. A plugin that opens no vendor library leaves
  // it out.
  const VendorEnvironment* vendor_environment = nullptr;
};

// The host fields a plugin built against this header may call (set_error,
// log): they must lie inside the struct the loader gave.
inline constexpr size_t kHostBytesUsed = offsetof(hal_plugin_host_t, log) + sizeof(void*);
// hal_plugin_v1_t up to and including |table|, which every v1 loader has; a
// plugin writes no field past it.
inline constexpr size_t kPluginBytesWritten = offsetof(hal_plugin_v1_t, table) + sizeof(void*);

// The checks of SPEC.md §10.1 step 3 before a plugin initialises: both
// pointers present, a host struct holding the services, the loader's ABI major
// equal to the plugin's, and an out struct large enough for the v1.0 fields.
// Returns HAL_SUCCESS, or the error (with a sentence through set_error when
// the host can take one) that hal_plugin_entry returns.
inline hal_result_t negotiate(const hal_plugin_host_t* host, const hal_plugin_v1_t* out_plugin,
                              const char* plugin_name) {
  if (host == nullptr || out_plugin == nullptr) return HAL_ERROR_NULL_POINTER;
  // Too small to hold set_error: nothing can be said, only returned.
  if (host->struct_size < kHostBytesUsed) return HAL_ERROR_ABI_MISMATCH;
  const ErrorReporter report(host);
  if (HAL_VERSION_MAJOR(host->abi_version) != HAL_ABI_VERSION_MAJOR) {
    return report.fail(HAL_ERROR_ABI_MISMATCH, 0,
                       "the %s plugin implements HAL ABI %u.x, the loader offers %u.%u",
                       plugin_name, HAL_ABI_VERSION_MAJOR, HAL_VERSION_MAJOR(host->abi_version),
                       HAL_VERSION_MINOR(host->abi_version));
  }
  if (out_plugin->struct_size < kPluginBytesWritten) {
    return report.fail(HAL_ERROR_ABI_MISMATCH, 0,
                       "hal_plugin_v1_t of %zu bytes is smaller than the v1.0 struct (%zu)",
                       out_plugin->struct_size, kPluginBytesWritten);
  }
  return HAL_SUCCESS;
}

// The whole of hal_plugin_entry: negotiate(), then, in a secure-execution
// process, the identity's vendor variables removed from the environment
// (logged as one warning, which the load report shows), then |create|(report,
// &context) under guarded() (no exception leaves), then the identity, the
// context and |table| into |out_plugin|. |create| returns HAL_SUCCESS with a
// non-NULL context, or an error it reported through |report| having released
// what it acquired. |out_plugin| is written only on success.
template <class Create>
hal_result_t enter(const hal_plugin_host_t* host, hal_plugin_v1_t* out_plugin,
                   const Identity& identity, const hal_plugin_table_v1_t& table,
                   Create&& create) noexcept {
  if (hal_result_t result = negotiate(host, out_plugin, identity.name); result != HAL_SUCCESS) {
    return result;
  }
  const ErrorReporter report(host);
  return guarded(report, "hal_plugin_entry", [&]() -> hal_result_t {
    if (identity.vendor_environment != nullptr) {
      const std::vector<std::string> removed =
          scrub_vendor_environment(*identity.vendor_environment);
      if (!removed.empty()) {
        std::string names;
        for (const std::string& name : removed) names += (names.empty() ? "" : ", ") + name;
        const std::string_view libraries = identity.vendor_environment->libraries;
        report.log(HAL_LOG_WARNING,
                   "secure execution (AT_SECURE): %s removed from the environment before %.*s "
                   "could read them",
                   names.c_str(), static_cast<int>(libraries.size()), libraries.data());
      }
    }
    hal_plugin_context_t* context = nullptr;
    if (hal_result_t result = create(report, &context); result != HAL_SUCCESS) return result;
    out_plugin->abi_version = HAL_ABI_VERSION;
    out_plugin->name = identity.name;
    out_plugin->version = identity.version;
    out_plugin->vendor = identity.vendor;
    out_plugin->build_id = identity.build_id;
    out_plugin->context = context;
    out_plugin->table = &table;
    return HAL_SUCCESS;
  });
}

// enter() for a plugin whose context is made by `new Plugin(host)`: a
// constructor that finds no driver or no device is not a failure (the plugin
// loads with 0 devices and logs why).
template <class Plugin>
hal_result_t enter(const hal_plugin_host_t* host, hal_plugin_v1_t* out_plugin,
                   const Identity& identity, const hal_plugin_table_v1_t& table) noexcept {
  return enter(host, out_plugin, identity, table,
               [&](const ErrorReporter&, hal_plugin_context_t** out_context) {
                 auto plugin = std::make_unique<Plugin>(host);
                 *out_context = reinterpret_cast<hal_plugin_context_t*>(plugin.release());
                 return HAL_SUCCESS;
               });
}

}  // namespace hal::plugin

// Defines hal_plugin_entry, the plugin's one exported symbol, as
// hal::plugin::enter<Plugin>(host, out_plugin, identity, table).
#define HAL_PLUGIN_ENTRY_POINT(Plugin, identity, table)                                     \
  extern "C" HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host, \
                                                             hal_plugin_v1_t* out_plugin) { \
    return ::hal::plugin::enter<Plugin>(host, out_plugin, identity, table);                 \
  }

#endif  // HAL_PLUGIN_SDK_NEGOTIATE_HPP_
