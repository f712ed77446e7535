// The opencl plugin's context: the platforms and SVM-capable devices found at
// load time, each platform with one context, so events and memory work
// across its devices.
#ifndef HAL_PLUGINS_OPENCL_PLUGIN_HPP_
#define HAL_PLUGINS_OPENCL_PLUGIN_HPP_

#include <memory>
#include <string>
#include <vector>

#include "hal_plugin_sdk/report.hpp"
#include "opencl.hpp"

namespace hal::opencl {

inline constexpr char kPluginName[] = "opencl";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";

class Device;

struct Platform {
  cl_platform_id id = nullptr;
  std::string name;
  ClContext context;
};

class Plugin {
 public:
  // Finds the devices; logs (never fails) when there are none.
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
  std::vector<std::unique_ptr<Platform>> platforms_;
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed before the platforms
};

inline Plugin* to_plugin(hal_plugin_context_t* context) {
  return reinterpret_cast<Plugin*>(context);
}

void plugin_shutdown(hal_plugin_context_t* context);
hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count);
hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device);

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_PLUGIN_HPP_
