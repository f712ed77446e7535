// The loader's global state between hal_init and hal_shutdown: the plugins,
// their load reports, the devices, the allocation table and the quarantines.
#pragma once

#include "allocation_table.hpp"
#include "collective_comm.hpp"
#include "collective_store.hpp"
#include "handle.hpp"
#include "objects.hpp"
#include "plugin_library.hpp"

#include <hal/init.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace hal::loader {

struct PluginReport {
  std::string path;
  std::string name;
  std::string version;
  std::string vendor;
  std::string build_id;
  std::string reason;
  std::string found_by;
  hal_plugin_outcome_t outcome = HAL_PLUGIN_FAILED_OPEN;
  hal_result_t result = HAL_SUCCESS;
  uint32_t abi_version = 0;
  uint32_t device_count = 0;
  bool requested = false;
};

inline constexpr size_t kQuarantineCapacity = 4096;

struct Registry {
  // Immutable once hal_init returns, so readers need no lock.
  std::vector<std::unique_ptr<PluginRecord>> plugins;
  std::vector<std::unique_ptr<hal_device_s>> devices;
  std::vector<PluginReport> reports;

  AllocationTable allocations;
  Quarantine<hal_stream_s> retired_streams{kQuarantineCapacity};
  Quarantine<hal_event_s> retired_events{kQuarantineCapacity};
  Quarantine<hal_module_s> retired_modules{kQuarantineCapacity};
  Quarantine<hal_kernel_s> retired_kernels{kQuarantineCapacity};
  // The communicators not yet destroyed: the last hal_shutdown aborts and
  // frees them (release_live_comms, first thing in ~Registry).
  LiveSet<hal_comm_s> comms;
  // The collectives stores this process serves; the last hal_shutdown stops
  // them (declared last: stopped before anything above is released).
  collective::StoreRoster stores;

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  // Releases every object still alive, closes devices, shuts plugins down.
  ~Registry();
};

namespace detail {
extern std::atomic<Registry*> active_registry;
}

// The registry while HAL is initialised, else NULL. One relaxed load: the
// documented rule that nothing runs concurrently with hal_init/hal_shutdown
// provides the ordering.
inline Registry* active_registry() noexcept {
  return detail::active_registry.load(std::memory_order_acquire);
}

hal_result_t not_initialized(const char* function) noexcept;

// hal_init and hal_shutdown behind their reference count.
hal_result_t initialize(const hal_init_options_t* options);
hal_result_t shut_down();

}  // namespace hal::loader
