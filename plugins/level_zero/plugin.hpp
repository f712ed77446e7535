// The level_zero plugin's context: the loader (absent when libze_loader.so.1
// is missing or zeInit fails; then 0 devices and the reason in the load
// report), one context per driver, and one Device per GPU.
#ifndef HAL_PLUGINS_LEVEL_ZERO_PLUGIN_HPP_
#define HAL_PLUGINS_LEVEL_ZERO_PLUGIN_HPP_

#include <memory>
#include <string>
#include <vector>

#include "hal_plugin_sdk/report.hpp"
#include "loader.hpp"

namespace hal::level_zero {

inline constexpr char kPluginName[] = "level_zero";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";

class Device;

// One driver the loader lists, with the context all its devices share (so
// events and USM of one driver work across its devices).
struct DriverContext {
  ze_driver_handle_t driver = nullptr;
  ze_context_handle_t context = nullptr;
  uint32_t driver_version = 0;
  ze_api_version_t api_version = ZE_API_VERSION_1_0;
};

class Plugin {
 public:
  // Opens the loader and finds the devices; logs a warning (the load
  // report's reason) and never fails when there are none.
  explicit Plugin(const hal_plugin_host_t* host);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const plugin::ErrorReporter& report() const { return report_; }
  uint32_t device_count() const { return static_cast<uint32_t>(devices_.size()); }
  Device& device(uint32_t index) { return *devices_[index]; }

 private:
  void discover();
  void add_driver_devices(ze_driver_handle_t driver, uint32_t driver_index);

  plugin::ErrorReporter report_;
  std::unique_ptr<Loader> loader_;
  std::vector<std::unique_ptr<DriverContext>> drivers_;  // destroyed after the devices
  std::vector<std::unique_ptr<Device>> devices_;
};

inline Plugin* to_plugin(hal_plugin_context_t* context) {
  return reinterpret_cast<Plugin*>(context);
}

void plugin_shutdown(hal_plugin_context_t* context);
hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count);
hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device);

}  // namespace hal::level_zero

#endif  // HAL_PLUGINS_LEVEL_ZERO_PLUGIN_HPP_
