#include "plugin.hpp"

#include "device.hpp"

namespace hal::hip {

Plugin::Plugin(const hal_plugin_host_t* host) : report_(host) {
  discover();
}

Plugin::~Plugin() {
  devices_.clear();
}

void Plugin::discover() {
  std::string why;
  runtime_ = Runtime::open(why);
  if (!runtime_) {
    report_.log(HAL_LOG_WARNING, "hip: %s; 0 devices", why.c_str());
    return;
  }
  const RuntimeApi& api = runtime_->api();
  int count = 0;
  if (const hipError_t result = api.hipGetDeviceCount(&count); result != hipSuccess) {
    report_.log(HAL_LOG_WARNING, "hip: hipGetDeviceCount failed: %s; 0 devices",
                hip_error_text(result).c_str());
    return;
  }
  if (count <= 0) {
    report_.log(HAL_LOG_WARNING, "hip: the runtime (%s) sees no GPU; 0 devices",
                runtime_->path().c_str());
    return;
  }
  std::string hiprtc_why;
  hiprtc_ = Hiprtc::open(runtime_->library(), hiprtc_why);
  if (!hiprtc_) {
    report_.log(HAL_LOG_INFO, "hip: %s; HAL dialect modules are not offered", hiprtc_why.c_str());
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    hipDeviceProp_t properties{};
    const hipError_t result = api.hipGetDeviceProperties(&properties, ordinal);
    if (result != hipSuccess) {
      report_.log(HAL_LOG_WARNING, "hip: GPU %d skipped: hipGetDeviceProperties: %s", ordinal,
                  hip_error_text(result).c_str());
      continue;
    }
    devices_.push_back(std::make_unique<Device>(report_, *runtime_, hiprtc_.get(), ordinal,
                                                properties,
                                                static_cast<uint32_t>(devices_.size())));
  }
}

void plugin_shutdown(hal_plugin_context_t* context) {
  // The loader calls this once, after every other call returned.
  std::unique_ptr<Plugin> plugin(to_plugin(context));
  try {
    for (uint32_t i = 0; i < plugin->device_count(); ++i) plugin->device(i).release_all();
  } catch (...) {
  }
}

hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count) {
  *out_count = to_plugin(context)->device_count();
  return HAL_SUCCESS;
}

hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device) {
  // The loader asks for 0..device_count-1 only (SPEC 10.3).
  *out_device = reinterpret_cast<hal_impl_device_t*>(&to_plugin(context)->device(index));
  return HAL_SUCCESS;
}

}  // namespace hal::hip
