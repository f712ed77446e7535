#include "plugin_library.hpp"

#include "error.hpp"

#include "hal_util/elf_image.hpp"
#include "hal_util/env.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

namespace hal::loader {

namespace {

void host_set_error(void* host_context, hal_result_t result, int64_t native_code,
                    const char* message) {
  const auto* plugin = static_cast<const PluginRecord*>(host_context);
  record_plugin_error(plugin->name, result, native_code, message);
}

void host_log(void* host_context, hal_log_level_t level, const char* message) {
  auto* plugin = static_cast<PluginRecord*>(host_context);
  // While loading, the last warning explains a plugin that loads with no
  // devices (its driver is absent); the report shows it.
  if (plugin->loading && level == HAL_LOG_WARNING && message != nullptr) {
    try {
      plugin->last_load_warning = message;
    } catch (...) {
    }
  }
  const char* level_name = level == HAL_LOG_DEBUG  ? "debug"
                           : level == HAL_LOG_INFO ? "info"
                                                   : "warning";
  log_line(plugin->name.c_str(), "%s: %s", level_name, message != nullptr ? message : "");
}

// Boost.DLL wraps dlerror() as "... (dlerror system message: <text>): <errno text>";
// the errno part is meaningless, so the report keeps only dlerror's own text.
std::string dlerror_text(const std::string& what) {
  static constexpr std::string_view kMarker = "dlerror system message: ";
  const size_t start = what.find(kMarker);
  const size_t end = what.rfind("): ");
  if (start == std::string::npos || end == std::string::npos || end < start) return what;
  return what.substr(start + kMarker.size(), end - start - kMarker.size());
}

struct RequiredEntry {
  const char* name;
  bool present;
};

}  // namespace

std::string plugin_name_from_path(const std::string& path) {
  static constexpr std::string_view kPrefix = "hal_plugin_";
  std::string stem = std::filesystem::path(path).stem().string();
  if (stem.size() > kPrefix.size() && stem.compare(0, kPrefix.size(), kPrefix) == 0)
    stem.erase(0, kPrefix.size());
  return stem;
}

namespace {

LoadOutcome failure(hal_plugin_outcome_t outcome, hal_result_t result, std::string reason) {
  LoadOutcome failed;
  failed.outcome = outcome;
  failed.result = result;
  failed.reason = std::move(reason);
  return failed;
}

using Failure = std::optional<LoadOutcome>;

// Step 1: dlopens the file and finds hal_plugin_entry.
Failure open_library(PluginRecord& plugin, hal_plugin_entry_fn_t& out_entry) {
  const std::string& path = plugin.path;
  // dlopen trusts the file: a truncated object dies of SIGBUS inside it.
  if (std::string why; !hal::util::check_elf_file(path, why)) {
    return failure(HAL_PLUGIN_FAILED_OPEN, HAL_ERROR_PLUGIN_LOAD, std::move(why));
  }
  try {
    plugin.library.load(boost::dll::fs::path(path),
                        boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::system_error& e) {
    return failure(HAL_PLUGIN_FAILED_OPEN, HAL_ERROR_PLUGIN_LOAD, dlerror_text(e.what()));
  }
  try {
    out_entry = plugin.library.get<hal_result_t(const hal_plugin_host_t*, hal_plugin_v1_t*)>(
        HAL_PLUGIN_ENTRY_NAME);
  } catch (const std::system_error& e) {
    return failure(HAL_PLUGIN_FAILED_SYMBOL, HAL_ERROR_PLUGIN_LOAD, dlerror_text(e.what()));
  }
  return std::nullopt;
}

// Step 2: calls the entry, negotiates the ABI and takes the plugin's identity.
Failure call_entry(PluginRecord& plugin, hal_plugin_entry_fn_t entry, hal_plugin_v1_t& description,
                   PluginRecord& identity) {
  plugin.host.struct_size = sizeof(hal_plugin_host_t);
  plugin.host.abi_version = HAL_ABI_VERSION;
  plugin.host.host_context = &plugin;
  plugin.host.set_error = host_set_error;
  plugin.host.log = host_log;

  std::memset(&description, 0, sizeof(description));
  description.struct_size = sizeof(description);
  take_plugin_message();  // a stale report must not become this plugin's reason
  const hal_result_t entry_result = entry(&plugin.host, &description);
  plugin.abi_version = description.abi_version;
  identity.abi_version = description.abi_version;
  if (entry_result != HAL_SUCCESS) {
    std::string said = take_plugin_message();
    std::string reason = format(HAL_PLUGIN_ENTRY_NAME " returned %s", result_name(entry_result));
    if (!said.empty()) reason += ": " + said;
    if (entry_result == HAL_ERROR_ABI_MISMATCH) {
      reason += format(" (the loader's ABI is %u.%u.%u)", HAL_ABI_VERSION_MAJOR,
                       HAL_ABI_VERSION_MINOR, HAL_ABI_VERSION_PATCH);
      return failure(HAL_PLUGIN_FAILED_ABI, HAL_ERROR_ABI_MISMATCH, std::move(reason));
    }
    return failure(HAL_PLUGIN_FAILED_INIT, entry_result, std::move(reason));
  }
  // From here on the plugin is initialised: a failing check still owes it
  // plugin_shutdown, which ~PluginRecord calls once the table is copied.
  if (HAL_VERSION_MAJOR(description.abi_version) != HAL_ABI_VERSION_MAJOR) {
    return failure(HAL_PLUGIN_FAILED_ABI, HAL_ERROR_ABI_MISMATCH,
                   format("the plugin implements ABI %u.%u.%u, the loader ABI major %u",
                          HAL_VERSION_MAJOR(description.abi_version),
                          HAL_VERSION_MINOR(description.abi_version),
                          HAL_VERSION_PATCH(description.abi_version), HAL_ABI_VERSION_MAJOR));
  }
  if (description.name == nullptr || description.name[0] == '\0') {
    return failure(HAL_PLUGIN_FAILED_ABI, HAL_ERROR_ABI_MISMATCH,
                   "the plugin returned no name (hal_plugin_v1_t.name is NULL or empty)");
  }
  plugin.name = description.name;
  plugin.version = description.version != nullptr ? description.version : "";
  plugin.vendor = description.vendor != nullptr ? description.vendor : "";
  plugin.build_id = description.build_id != nullptr ? description.build_id : "";
  identity.name = plugin.name;
  identity.version = plugin.version;
  identity.vendor = plugin.vendor;
  identity.build_id = plugin.build_id;
  return std::nullopt;
}

// Step 3: copies the plugin's function table and checks its required entries.
Failure check_plugin_table(PluginRecord& plugin, const hal_plugin_v1_t& description) {
  if (description.table == nullptr) {
    return failure(HAL_PLUGIN_FAILED_ABI, HAL_ERROR_ABI_MISMATCH,
                   "the plugin returned no function table (hal_plugin_v1_t.table is NULL)");
  }
  // Every v1 plugin has at least the core table (through launch_kernel); the
  // entries appended after it (collectives, later minors) are optional, so a
  // plugin built against an older, shorter table loads with them NULL.
  constexpr size_t kCoreTableSize =
      offsetof(hal_plugin_table_v1_t, launch_kernel) + sizeof(hal_plugin_table_v1_t::launch_kernel);
  if (description.table->struct_size < kCoreTableSize) {
    return failure(HAL_PLUGIN_FAILED_ABI, HAL_ERROR_ABI_MISMATCH,
                   format("the plugin's function table declares struct_size %zu, smaller than "
                          "the %zu bytes of the core v1 table",
                          description.table->struct_size, kCoreTableSize));
  }
  std::memcpy(&plugin.table, description.table,
              std::min(description.table->struct_size, sizeof(hal_plugin_table_v1_t)));
  plugin.table.struct_size = sizeof(hal_plugin_table_v1_t);
  plugin.context = description.context;
  plugin.entry_succeeded = true;

  const hal_plugin_table_v1_t& table = plugin.table;
  const RequiredEntry required[] = {
      {"device_count", table.device_count != nullptr},
      {"device_open", table.device_open != nullptr},
      {"device_get_properties", table.device_get_properties != nullptr},
      {"mem_alloc", table.mem_alloc != nullptr},
      {"mem_free", table.mem_free != nullptr},
      {"stream_create", table.stream_create != nullptr},
      {"stream_destroy", table.stream_destroy != nullptr},
      {"stream_synchronize", table.stream_synchronize != nullptr},
      {"memcpy_async", table.memcpy_async != nullptr},
  };
  for (const RequiredEntry& entry_check : required) {
    if (!entry_check.present) {
      return failure(
          HAL_PLUGIN_FAILED_ABI, HAL_ERROR_ABI_MISMATCH,
          format("the plugin's function table lacks the required entry %s", entry_check.name));
    }
  }
  // Events come from the plugin only when it implements the whole set the
  // loader needs; otherwise the loader's own events serve every call.
  plugin.loader_events = table.event_create == nullptr || table.event_destroy == nullptr ||
                         table.event_record == nullptr || table.event_query == nullptr ||
                         table.event_synchronize == nullptr;
  plugin.kernels = table.module_load != nullptr && table.module_unload != nullptr &&
                   table.kernel_get != nullptr && table.launch_kernel != nullptr;
  plugin.collectives = table.comm_init_local != nullptr && table.comm_destroy != nullptr &&
                       table.comm_abort != nullptr && table.comm_enqueue != nullptr;
  return std::nullopt;
}

}  // namespace

PluginRecord::~PluginRecord() {
  if (entry_succeeded && table.plugin_shutdown != nullptr) table.plugin_shutdown(context);
  // |library| unloads in its own destructor, after the plugin let go of everything.
}

LoadOutcome load_plugin_library(const std::string& path, PluginRecord& identity) {
  auto plugin = std::make_unique<PluginRecord>();
  plugin->path = path;
  plugin->name = plugin_name_from_path(path);
  identity.path = plugin->path;
  identity.name = plugin->name;

  hal_plugin_entry_fn_t entry = nullptr;
  if (Failure failed = open_library(*plugin, entry)) return std::move(*failed);
  hal_plugin_v1_t description;
  if (Failure failed = call_entry(*plugin, entry, description, identity)) return std::move(*failed);
  if (Failure failed = check_plugin_table(*plugin, description)) return std::move(*failed);

  LoadOutcome loaded;
  loaded.outcome = HAL_PLUGIN_LOADED;
  loaded.result = HAL_SUCCESS;
  loaded.plugin = std::move(plugin);
  return loaded;
}

}  // namespace hal::loader
