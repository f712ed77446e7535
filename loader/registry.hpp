// The loader's global state between hal_init and hal_shutdown: the plugins,
// their load reports, the devices and the allocation table. Destroyed handles
// live on in their slabs (handle.hpp).
#pragma once

#include "allocation_table.hpp"
#include "collective/collective_comm.hpp"
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

// A plugin reporting more devices is refused (SPEC §9.3): a broken count must
// not make hal_init open devices for minutes.
inline constexpr uint32_t kMaxDevicesPerPlugin = 4096;

struct Registry {
  // Immutable once hal_init returns, so readers need no lock.
  std::vector<std::unique_ptr<PluginRecord>> plugins;
  std::vector<hal::loader::HandleOwner<hal_device_s>> devices;
  std::vector<PluginReport> reports;

  AllocationTable allocations;
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

// What runs around a registry's lifetime, under the init lock: hal_init and
// hal_shutdown (api_init.cpp) pass the layers' start and stop here, so the
// registry itself knows nothing of the layers that depend on it.
struct LifecycleHooks {
  // After the registry is built, before any call can reach it.
  void (*started)(const Registry& registry) noexcept;
  // Once no call can reach it any more, before it releases anything.
  void (*stopping)(const Registry& registry) noexcept;
  // After it is gone.
  void (*stopped)() noexcept;
};

// hal_init and hal_shutdown behind their reference count; the hooks run at
// the first reference and at the last release only.
hal_result_t initialize(const hal_init_options_t* options, const LifecycleHooks& hooks);
hal_result_t shut_down(const LifecycleHooks& hooks);

}  // namespace hal::loader
