#include "registry.hpp"

#include "collective/collective_dispatch.hpp"
#include "discovery.hpp"
#include "error.hpp"
#include "fallbacks.hpp"
#include "plugin_file.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace hal::loader {

namespace detail {
std::atomic<Registry*> active_registry{nullptr};
}

namespace {

std::mutex init_mutex;
uint32_t init_reference_count = 0;
std::unique_ptr<Registry> current_registry;

// A process that exits with HAL initialised (no last hal_shutdown) is torn down here, at the
// start of its exit. Functions registered with __cxa_atexit run in the reverse order of their
// registration, static destructors among them: the plugins' static objects were registered
// when hal_init loaded them, so this, registered after each hal_init that loaded plugins, runs
// before they are destroyed (current_registry's own destructor ran after them, calling plugins
// whose statics were gone). Registered with libhal's DSO handle, it runs when libhal is unloaded
// too. Another thread inside hal_init or hal_shutdown at exit keeps the lock: then this leaves
// the registry to current_registry's destructor, as before.
extern "C" int __cxa_atexit(void (*function)(void*), void* argument, void* dso_handle);
extern "C" void* __dso_handle;

void tear_down_at_exit(void*) noexcept {
  std::unique_lock lock(init_mutex, std::try_to_lock);
  if (!lock.owns_lock() || init_reference_count == 0) return;
  detail::active_registry.store(nullptr, std::memory_order_release);
  init_reference_count = 0;
  current_registry.reset();
}

// Plugins report no more than the devices' own fields; the loader fills in
// what only it knows and repairs limits a plugin left at zero.
void complete_properties(hal_device_properties_t& properties, const PluginRecord& plugin,
                         uint32_t global_index, uint32_t plugin_index) {
  properties.struct_size = sizeof(hal_device_properties_t);
  properties.next = nullptr;
  properties.index = global_index;
  properties.plugin_device_index = plugin_index;
  std::memset(properties.plugin, 0, sizeof(properties.plugin));
  std::strncpy(properties.plugin, plugin.name.c_str(), sizeof(properties.plugin) - 1);
  properties.name[sizeof(properties.name) - 1] = '\0';
  properties.vendor[sizeof(properties.vendor) - 1] = '\0';
  properties.driver_version[sizeof(properties.driver_version) - 1] = '\0';
  const uint64_t alignment = properties.min_alignment_bytes;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) properties.min_alignment_bytes = 1;
  if (properties.max_allocation_bytes == 0) properties.max_allocation_bytes = UINT64_MAX;
  // A declared capability is a promise: drop those whose table entries are absent.
  const hal_plugin_table_v1_t& table = plugin.table;
  if (!plugin.kernels) properties.capabilities &= ~HAL_DEVICE_CAP_KERNELS;
  if (table.stream_enqueue_host_fn == nullptr)
    properties.capabilities &= ~HAL_DEVICE_CAP_HOST_CALLBACKS;
  if (table.stream_query == nullptr) properties.capabilities &= ~HAL_DEVICE_CAP_STREAM_QUERY;
  // Loader events keep no timestamps.
  if (plugin.loader_events || table.event_elapsed_ms == nullptr)
    properties.capabilities &= ~HAL_DEVICE_CAP_EVENT_TIMING;
  // Without its own collective entries a plugin gets the loader's host-staged ones.
  // The host-staged collectives include alltoallv; a plugin's own have it
  // only when it says so.
  if (!plugin.collectives) {
    properties.capabilities &= ~HAL_DEVICE_CAP_COLLECTIVES;
    properties.capabilities |= HAL_DEVICE_CAP_ALLTOALLV;
  }
}

// Opens every device of a freshly loaded plugin. On failure closes what it
// opened and says why.
bool enumerate_devices(PluginRecord& plugin, uint32_t first_index,
                       std::vector<HandleOwner<hal_device_s>>& out_devices, PluginReport& report) {
  const auto fail_with = [&](const char* step, hal_result_t result) {
    std::string said = take_plugin_message();
    report.outcome = HAL_PLUGIN_FAILED_INIT;
    report.result = result;
    report.reason = format("%s returned %s", step, result_name(result));
    if (!said.empty()) report.reason += ": " + said;
    for (auto& device : out_devices) {
      if (plugin.table.device_close != nullptr) plugin.table.device_close(device->impl);
    }
    out_devices.clear();
    return false;
  };
  take_plugin_message();
  uint32_t count = 0;
  if (hal_result_t result = plugin.table.device_count(plugin.context, &count);
      result != HAL_SUCCESS) {
    return fail_with("device_count", result);
  }
  if (count > kMaxDevicesPerPlugin) {
    report.outcome = HAL_PLUGIN_FAILED_INIT;
    report.result = HAL_ERROR_INTERNAL;
    report.reason = format("device_count reported %u devices, more than the %u a plugin may have",
                           count, kMaxDevicesPerPlugin);
    return false;
  }
  for (uint32_t index = 0; index < count; ++index) {
    hal_impl_device_t* impl = nullptr;
    if (hal_result_t result = plugin.table.device_open(plugin.context, index, &impl);
        result != HAL_SUCCESS) {
      return fail_with("device_open", result);
    }
    auto device = make_handle<hal_device_s>(&plugin, impl);
    hal_device_s* raw = device.get();
    out_devices.push_back(std::move(device));
    raw->properties.struct_size = sizeof(hal_device_properties_t);
    if (hal_result_t result = plugin.table.device_get_properties(impl, &raw->properties);
        result != HAL_SUCCESS) {
      return fail_with("device_get_properties", result);
    }
    complete_properties(raw->properties, plugin, first_index + index, index);
  }
  return true;
}

PluginReport report_for(const Candidate& candidate) {
  PluginReport report;
  report.path = candidate.path;
  report.found_by = candidate.found_by;
  report.requested = candidate.requested;
  report.name = candidate.path.empty() ? candidate.requested_as : "";
  return report;
}

const PluginRecord* find_plugin(const Registry& registry, const std::string& name) {
  for (const auto& plugin : registry.plugins) {
    if (plugin->name == name) return plugin.get();
  }
  return nullptr;
}

PluginReport duplicate_of(const PluginRecord& earlier, PluginReport report) {
  report.outcome = HAL_PLUGIN_SKIPPED_DUPLICATE;
  report.result = HAL_SUCCESS;
  report.reason = format("a plugin named '%s' was already loaded from %s", earlier.name.c_str(),
                         earlier.path.c_str());
  return report;
}

const char* failed_step(hal_plugin_outcome_t outcome) {
  switch (outcome) {
    case HAL_PLUGIN_FAILED_OPEN:
      return "failed to open";
    case HAL_PLUGIN_FAILED_SYMBOL:
      return "has no entry symbol";
    case HAL_PLUGIN_FAILED_ABI:
      return "failed ABI negotiation";
    default:
      return "failed to initialise";
  }
}

const char* outcome_name(hal_plugin_outcome_t outcome) {
  switch (outcome) {
    case HAL_PLUGIN_LOADED:
      return "HAL_PLUGIN_LOADED";
    case HAL_PLUGIN_SKIPPED_DUPLICATE:
      return "HAL_PLUGIN_SKIPPED_DUPLICATE";
    case HAL_PLUGIN_FAILED_OPEN:
      return "HAL_PLUGIN_FAILED_OPEN";
    case HAL_PLUGIN_FAILED_SYMBOL:
      return "HAL_PLUGIN_FAILED_SYMBOL";
    case HAL_PLUGIN_FAILED_ABI:
      return "HAL_PLUGIN_FAILED_ABI";
    case HAL_PLUGIN_FAILED_INIT:
      return "HAL_PLUGIN_FAILED_INIT";
    default:
      return "HAL_PLUGIN_OUTCOME_UNKNOWN";
  }
}

// SPEC §12: "hal: loader: <name>: <OUTCOME> (<path>, found by <found_by>, <n> devices)[: <reason>]"
void log_report(const PluginReport& report) {
  log_line("loader", "%s: %s (%s, found by %s, %u devices)%s%s", report.name.c_str(),
           outcome_name(report.outcome), report.path.empty() ? "no file" : report.path.c_str(),
           report.found_by.c_str(), report.device_count, report.reason.empty() ? "" : ": ",
           report.reason.c_str());
}

// Loads one candidate into |registry|; returns its report.
PluginReport load_candidate(const Candidate& candidate, Registry& registry) {
  PluginReport report = report_for(candidate);
  if (candidate.path.empty()) {
    report.outcome = HAL_PLUGIN_FAILED_OPEN;
    report.result = HAL_ERROR_PLUGIN_LOAD;
    report.reason = candidate.lookup_error;
    return report;
  }
  // A name already loaded is a duplicate before the file is even opened.
  report.name = plugin_name_from_path(candidate.path);
  if (const PluginRecord* earlier = find_plugin(registry, report.name)) {
    return duplicate_of(*earlier, std::move(report));
  }
  if (std::string refusal = plugin_file_refusal(candidate.path); !refusal.empty()) {
    report.outcome = HAL_PLUGIN_FAILED_OPEN;
    report.result = HAL_ERROR_PLUGIN_LOAD;
    report.reason = std::move(refusal);
    return report;
  }
  PluginRecord identity;
  LoadOutcome loaded = load_plugin_library(candidate.path, identity);
  report.name = identity.name;
  report.version = identity.version;
  report.vendor = identity.vendor;
  report.build_id = identity.build_id;
  report.abi_version = identity.abi_version;
  report.outcome = loaded.outcome;
  report.result = loaded.result;
  report.reason = loaded.reason;
  if (loaded.outcome != HAL_PLUGIN_LOADED) return report;

  // Its own name can differ from the file's: then it is shut down and unloaded here.
  if (const PluginRecord* earlier = find_plugin(registry, loaded.plugin->name)) {
    return duplicate_of(*earlier, std::move(report));
  }
  std::vector<HandleOwner<hal_device_s>> devices;
  if (!enumerate_devices(*loaded.plugin, static_cast<uint32_t>(registry.devices.size()), devices,
                         report)) {
    return report;
  }
  loaded.plugin->loading = false;
  report.reason = loaded.plugin->last_load_warning;
  report.device_count = static_cast<uint32_t>(devices.size());
  for (auto& device : devices) registry.devices.push_back(std::move(device));
  registry.plugins.push_back(std::move(loaded.plugin));
  return report;
}

hal_result_t build_registry(const hal_init_options_t* options, Registry& registry) {
  const DiscoveryPlan plan = discover_plugins(options);
  for (const Candidate& candidate : plan.candidates) {
    PluginReport report = load_candidate(candidate, registry);
    log_report(report);
    const bool failed =
        report.outcome != HAL_PLUGIN_LOADED && report.outcome != HAL_PLUGIN_SKIPPED_DUPLICATE;
    registry.reports.push_back(std::move(report));
    if (failed && plan.explicit_list) {
      const PluginReport& failure = registry.reports.back();
      return fail(HAL_ERROR_PLUGIN_LOAD, "hal_init", "plugin %s (%s, from %s) %s: %s",
                  candidate.requested_as.c_str(),
                  failure.path.empty() ? "no file" : failure.path.c_str(),
                  candidate.found_by.c_str(),
                  failure.path.empty() ? "was not found" : failed_step(failure.outcome),
                  failure.reason.c_str());
    }
  }
  return HAL_SUCCESS;
}

}  // namespace

Registry::~Registry() {
  release_live_comms(*this);  // aborted first: no collective in flight waits on a peer
  // Streams first drain, so nothing in flight still uses what follows.
  for (auto& device : devices) {
    device->streams.for_each([](hal_stream_s* stream) {
      table_of(stream).stream_synchronize(stream->impl);
      return HAL_SUCCESS;
    });
  }
  for (auto& device : devices) {
    const hal_plugin_table_v1_t& table = device->plugin->table;
    device->op_plans.take_all();  // before the modules their kernels belong to
    for (auto& module : device->modules.take_all()) {
      if (table.module_unload != nullptr) table.module_unload(module->impl);
    }
    device->events.take_all();  // each EventState releases its plugin event
    for (auto& stream : device->streams.take_all()) table.stream_destroy(stream->impl);
  }
  for (const Allocation& allocation : allocations.take_all()) {
    table_of(allocation.device)
        .mem_free(allocation.device->impl, reinterpret_cast<void*>(allocation.base));
  }
  for (auto& device : devices) {
    if (device->plugin->table.device_close != nullptr)
      device->plugin->table.device_close(device->impl);
  }
  devices.clear();
  // Later plugins may have been loaded knowing earlier ones: unload in reverse.
  while (!plugins.empty()) plugins.pop_back();
}

hal_result_t not_initialized(const char* function) noexcept {
  return fail(HAL_ERROR_NOT_INITIALIZED, function,
              "HAL is not initialised: call hal_init first (or hal_shutdown already ran)");
}

hal_result_t initialize(const hal_init_options_t* options, const LifecycleHooks& hooks) {
  std::lock_guard lock(init_mutex);
  if (options != nullptr && options->struct_size < sizeof(hal_init_options_t)) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, "hal_init",
                "options->struct_size is %zu, smaller than the %zu bytes of hal_init_options_t",
                options->struct_size, sizeof(hal_init_options_t));
  }
  if (init_reference_count > 0) {
    ++init_reference_count;
    return HAL_SUCCESS;
  }
  auto registry = std::make_unique<Registry>();
  if (hal_result_t result = build_registry(options, *registry); result != HAL_SUCCESS) {
    return result;  // ~Registry unloads whatever loaded
  }
  current_registry = std::move(registry);
  init_reference_count = 1;
  // After the plugins loaded (above): see tear_down_at_exit. A failed registration leaves the
  // teardown to current_registry's destructor.
  (void)__cxa_atexit(&tear_down_at_exit, nullptr, &__dso_handle);
  hooks.started(*current_registry);
  detail::active_registry.store(current_registry.get(), std::memory_order_release);
  return HAL_SUCCESS;
}

hal_result_t shut_down(const LifecycleHooks& hooks) {
  std::lock_guard lock(init_mutex);
  if (init_reference_count == 0) return not_initialized("hal_shutdown");
  if (--init_reference_count > 0) return HAL_SUCCESS;
  detail::active_registry.store(nullptr, std::memory_order_release);
  hooks.stopping(*current_registry);
  current_registry.reset();
  hooks.stopped();
  return HAL_SUCCESS;
}

}  // namespace hal::loader
