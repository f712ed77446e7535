#include "plugin.hpp"

#include <vector>

#include "device.hpp"

namespace hal::level_zero {

Plugin::Plugin(const hal_plugin_host_t* host) : report_(host) {
  discover();
}

Plugin::~Plugin() {
  devices_.clear();  // before the contexts their objects live in
  if (loader_ == nullptr) return;
  for (const auto& entry : drivers_) {
    if (entry->context != nullptr) loader_->api().zeContextDestroy(entry->context);
  }
}

void Plugin::discover() {
  std::string why;
  loader_ = Loader::open(why);
  if (!loader_) {
    report_.log(HAL_LOG_WARNING, "level_zero: %s; 0 devices", why.c_str());
    return;
  }
  const LoaderApi& ze = loader_->api();
  uint32_t count = 0;
  if (const ze_result_t result = ze.zeDriverGet(&count, nullptr); result != ZE_RESULT_SUCCESS) {
    report_.log(HAL_LOG_WARNING, "level_zero: zeDriverGet failed: %s; 0 devices",
                ze_error_text(result).c_str());
    return;
  }
  std::vector<ze_driver_handle_t> drivers(count);
  if (count > 0) {
    if (const ze_result_t result = ze.zeDriverGet(&count, drivers.data());
        result != ZE_RESULT_SUCCESS) {
      report_.log(HAL_LOG_WARNING, "level_zero: zeDriverGet failed: %s; 0 devices",
                  ze_error_text(result).c_str());
      return;
    }
    drivers.resize(count);
  }
  for (uint32_t i = 0; i < count; ++i) add_driver_devices(drivers[i], i);
  if (devices_.empty()) {
    report_.log(HAL_LOG_WARNING,
                "level_zero: the loader (%s) lists %u driver(s) and no GPU; 0 devices",
                loader_->path().c_str(), count);
  }
}

void Plugin::add_driver_devices(ze_driver_handle_t driver, uint32_t driver_index) {
  const LoaderApi& ze = loader_->api();
  auto entry = std::make_unique<DriverContext>();
  entry->driver = driver;
  ze_driver_properties_t properties{};
  properties.stype = ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES;
  if (ze.zeDriverGetProperties(driver, &properties) == ZE_RESULT_SUCCESS) {
    entry->driver_version = properties.driverVersion;
  }
  ze.zeDriverGetApiVersion(driver, &entry->api_version);
  uint32_t count = 0;
  ze_result_t result = ze.zeDeviceGet(driver, &count, nullptr);
  std::vector<ze_device_handle_t> handles(count);
  if (result == ZE_RESULT_SUCCESS && count > 0)
    result = ze.zeDeviceGet(driver, &count, handles.data());
  if (result != ZE_RESULT_SUCCESS) {
    report_.log(HAL_LOG_WARNING, "level_zero: driver %u skipped: zeDeviceGet failed: %s",
                driver_index, ze_error_text(result).c_str());
    return;
  }
  handles.resize(count);
  if (count == 0) return;
  ze_context_desc_t context_desc{};
  context_desc.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC;
  result = ze.zeContextCreate(driver, &context_desc, &entry->context);
  if (result != ZE_RESULT_SUCCESS) {
    report_.log(HAL_LOG_WARNING, "level_zero: driver %u skipped: zeContextCreate failed: %s",
                driver_index, ze_error_text(result).c_str());
    return;
  }
  for (ze_device_handle_t handle : handles) {
    std::string why;
    auto device = Device::create(report_, *loader_, *entry, handle,
                                 static_cast<uint32_t>(devices_.size()), why);
    if (device == nullptr) {
      report_.log(HAL_LOG_WARNING, "level_zero: a device of driver %u skipped: %s", driver_index,
                  why.c_str());
      continue;
    }
    devices_.push_back(std::move(device));
  }
  drivers_.push_back(std::move(entry));
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

}  // namespace hal::level_zero
