// One plugin library: loading it with Boost.DLL, negotiating the ABI through
// hal_plugin_entry and keeping a loader-owned copy of its function table.
#pragma once

#include <hal/plugin_v1.h>

#include <boost/dll/shared_library.hpp>

#include <memory>
#include <string>

namespace hal::loader {

class PluginRecord {
 public:
  PluginRecord() = default;
  PluginRecord(const PluginRecord&) = delete;
  PluginRecord& operator=(const PluginRecord&) = delete;
  // Calls plugin_shutdown (when the entry succeeded) and unloads the library.
  ~PluginRecord();

  // Zero-filled, then the plugin's table copied over it: an entry beyond an
  // older plugin's table is NULL, which means "unsupported". First member so
  // dispatch reaches it through the handle's plugin pointer with no offset.
  hal_plugin_table_v1_t table{};
  hal_plugin_context_t* context = nullptr;
  std::string path;
  std::string name;  // the file stem until the plugin tells its own
  std::string version;
  std::string vendor;
  std::string build_id;
  uint32_t abi_version = 0;
  // The plugin lacks events: the loader provides them on host functions.
  bool loader_events = false;
  // All four of module_load, module_unload, kernel_get, launch_kernel exist.
  bool kernels = false;
  // All four of comm_init_local, comm_destroy, comm_abort, comm_enqueue exist;
  // otherwise the loader's host-staged collectives serve every device.
  bool collectives = false;
  // What hal_plugin_entry succeeded; only then is plugin_shutdown owed.
  bool entry_succeeded = false;
  // Between the entry call and the end of device enumeration.
  bool loading = true;
  std::string last_load_warning;
  hal_plugin_host_t host{};
  boost::dll::shared_library library;
};

// The outcome of loading one candidate. |plugin| is set only when loaded.
struct LoadOutcome {
  hal_plugin_outcome_t outcome = HAL_PLUGIN_FAILED_OPEN;
  hal_result_t result = HAL_ERROR_PLUGIN_LOAD;
  std::string reason;
  std::unique_ptr<PluginRecord> plugin;
};

// "cpu" for ".../hal_plugin_cpu.so": the name a candidate is known by before
// it is opened.
std::string plugin_name_from_path(const std::string& path);

// dlopens |path| (RTLD_NOW | RTLD_LOCAL), calls its entry and checks what it
// returned. On failure the record (if any) is already unloaded. The record's
// identity fields are filled as far as they became known, for the report.
LoadOutcome load_plugin_library(const std::string& path, PluginRecord& identity_out);

}  // namespace hal::loader
