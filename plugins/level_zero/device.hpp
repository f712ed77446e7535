// The level_zero plugin's context and devices. The context holds the loader
// (absent when libze_loader.so.1 is missing or zeInit fails; then 0 devices
// and the reason in the load report), one context per driver, and one Device
// per GPU. A device has its driver's context, its properties read from
// zeDeviceGetProperties / ComputeProperties / MemoryProperties, its USM
// allocations, and the streams, events and modules created on it, so
// device_close can finish and free whatever the application left.
#ifndef HAL_PLUGINS_LEVEL_ZERO_DEVICE_HPP_
#define HAL_PLUGINS_LEVEL_ZERO_DEVICE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hal_plugin_sdk/allocations.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "loader.hpp"

namespace hal::level_zero {

class EventPools;

// What the devices report as their plugin (hal_device_properties_t).
inline constexpr char kPluginName[] = "level_zero";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";

// One driver the loader lists, with the context all its devices share (so
// events and USM of one driver work across its devices).
struct DriverContext {
  ze_driver_handle_t driver = nullptr;
  ze_context_handle_t context = nullptr;
  uint32_t driver_version = 0;
  ze_api_version_t api_version = ZE_API_VERSION_1_0;
};

class Event;
class Module;
class Stream;

// USM allocations are at least this aligned: the plugin asks for it (Level
// Zero has no documented default alignment).
inline constexpr size_t kMinAlignment = 64;

class Device : public plugin::DeviceBase<Stream, Event, Module> {
 public:
  // Reads the properties and finds a compute queue group; null with |why|
  // when the device has none.
  static std::unique_ptr<Device> create(const plugin::ErrorReporter& report, const Loader& loader,
                                        const DriverContext& driver, ze_device_handle_t handle,
                                        uint32_t index, std::string& why);
  ~Device();

  const LoaderApi& api() const { return loader_.api(); }
  ze_context_handle_t context() const;
  ze_device_handle_t handle() const { return handle_; }
  uint32_t compute_ordinal() const { return compute_ordinal_; }
  const hal_device_properties_t& properties() const { return properties_; }
  // Nanoseconds per timestamp tick, and the mask of a kernel timestamp's
  // valid bits (timestamps wrap there).
  double timestamp_ns_per_tick() const { return ns_per_tick_; }
  uint64_t timestamp_mask() const { return timestamp_mask_; }
  // The device's reused event pools (event.hpp).
  EventPools& event_pools() const { return *event_pools_; }

  // report().fail() with |result|'s mapping, its code and its name.
  hal_result_t fail(ze_result_t result, const char* what) const;
  hal_result_t fail(hal_result_t mapped, ze_result_t result, const char* what) const;

  // allocate and free (memory.cpp); no synchronize: the table leaves
  // device_synchronize to the loader (entry.cpp).
  HAL_PLUGIN_DEVICE_METHODS;

 private:
  Device(const plugin::ErrorReporter& report, const Loader& loader, const DriverContext& driver,
         ze_device_handle_t handle, uint32_t index);
  bool read_properties(std::string& why);

  const Loader& loader_;
  const DriverContext& driver_;
  // Destroyed after ~Device's release_all(): every EventSet is back by then.
  std::unique_ptr<EventPools> event_pools_;
  ze_device_handle_t handle_;
  uint32_t index_;
  uint32_t compute_ordinal_ = 0;
  double ns_per_tick_ = 1.0;
  uint64_t timestamp_mask_ = ~uint64_t{0};
  hal_device_properties_t properties_{};
  // The driver takes the alignment as is: nothing is carved.
  plugin::Allocations allocations_{SIZE_MAX};
};

class Plugin : public plugin::PluginBase {
 public:
  // Opens the loader and finds the devices; logs a warning (the load
  // report's reason) and never fails when there are none.
  explicit Plugin(const hal_plugin_host_t* host);
  ~Plugin();

  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }

 private:
  void add_driver_devices(ze_driver_handle_t driver, uint32_t driver_index);

  std::unique_ptr<Loader> loader_;
  std::vector<std::unique_ptr<DriverContext>> drivers_;  // destroyed after the devices
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_DEVICE_HPP_
