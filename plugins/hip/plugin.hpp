// The hip plugin's context: the runtime (absent when /dev/kfd or
// libamdhip64.so.5 is missing; then 0 devices and the reason in the load
// report), hiprtc when present, and one Device per GPU.
#ifndef HAL_PLUGINS_HIP_PLUGIN_HPP_
#define HAL_PLUGINS_HIP_PLUGIN_HPP_

#include <memory>
#include <string>
#include <vector>

#include "hal_plugin_sdk/report.hpp"
#include "hiprtc.hpp"
#include "runtime.hpp"

namespace hal::hip {

inline constexpr char kPluginName[] = "hip";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";

class Device;

class Plugin {
 public:
  // Opens the runtime and finds the devices; logs a warning (the load
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

  plugin::ErrorReporter report_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Hiprtc> hiprtc_;
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed before the runtime
};

inline Plugin* to_plugin(hal_plugin_context_t* context) {
  return reinterpret_cast<Plugin*>(context);
}

void plugin_shutdown(hal_plugin_context_t* context);
hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count);
hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device);

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_PLUGIN_HPP_
