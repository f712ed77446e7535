// hal/device.h: devices, their properties and synchronisation.
#include "api_common.hpp"
#include "layers/intercept.hpp"
#include "fallbacks.hpp"

using namespace hal::loader;

static hal_result_t device_count_body(uint32_t* out_count) {
  constexpr const char* kFunction = "hal_device_count";
  const Registry* registry = active_registry();
  if (registry == nullptr) return not_initialized(kFunction);
  if (out_count == nullptr) return null_argument(kFunction, "out_count");
  *out_count = static_cast<uint32_t>(registry->devices.size());
  return HAL_SUCCESS;
}

static hal_result_t device_get_body(uint32_t index, hal_device_t* out_device) {
  constexpr const char* kFunction = "hal_device_get";
  const Registry* registry = active_registry();
  if (registry == nullptr) return not_initialized(kFunction);
  if (out_device == nullptr) return null_argument(kFunction, "out_device");
  if (index >= registry->devices.size()) {
    return fail(HAL_ERROR_NOT_FOUND, kFunction, "index %u is out of range: there are %zu devices",
                index, registry->devices.size());
  }
  *out_device = registry->devices[index].get();
  return HAL_SUCCESS;
}

static hal_result_t device_get_properties_body(hal_device_t device,
                                               hal_device_properties_t* out_properties) {
  constexpr const char* kFunction = "hal_device_get_properties";
  if (active_registry() == nullptr) return not_initialized(kFunction);
  if (!is_live(device, HandleKind::kDevice)) {
    return reject_handle(device, HandleKind::kDevice, kFunction, "device");
  }
  if (out_properties == nullptr) return null_argument(kFunction, "out_properties");
  hal_result_t result = HAL_SUCCESS;
  if (struct_too_small(out_properties, kFunction, "out_properties", "hal_device_properties_t",
                       result)) {
    return result;
  }
  write_sized(device->properties, out_properties);
  return HAL_SUCCESS;
}

static hal_result_t device_synchronize_body(hal_device_t device) {
  constexpr const char* kFunction = "hal_device_synchronize";
  if (active_registry() == nullptr) return not_initialized(kFunction);
  if (!is_live(device, HandleKind::kDevice)) {
    return reject_handle(device, HandleKind::kDevice, kFunction, "device");
  }
  return synchronize_device(device, kFunction);
}

// ---- the public entries: the layers' hook around each body above ----

hal_result_t hal_device_count(uint32_t* out_count) {
  return layers::call<layers::DeviceCount, device_count_body>(HAL_CALLER, out_count);
}

hal_result_t hal_device_get(uint32_t index, hal_device_t* out_device) {
  return layers::call<layers::DeviceGet, device_get_body>(HAL_CALLER, index, out_device);
}

hal_result_t hal_device_get_properties(hal_device_t device,
                                       hal_device_properties_t* out_properties) {
  return layers::call<layers::DeviceGetProperties, device_get_properties_body>(HAL_CALLER, device,
                                                                               out_properties);
}

hal_result_t hal_device_synchronize(hal_device_t device) {
  return layers::call<layers::DeviceSynchronize, device_synchronize_body>(HAL_CALLER, device);
}
