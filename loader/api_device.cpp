// hal/device.h: devices, their properties and synchronisation.
#include <cstddef>

#include "api_common.hpp"
#include "layers/intercept.hpp"
#include "fallbacks.hpp"
#include "host_functions.hpp"

using namespace hal::loader;

static hal_result_t device_count_body(uint32_t* out_count) {
  constexpr const char* kFunction = "hal_device_count";
  Registry* registry = nullptr;
  if (hal_result_t result =
          check_preconditions_in(registry, kFunction, Required{out_count, "out_count"});
      result != HAL_SUCCESS) {
    return result;
  }
  *out_count = static_cast<uint32_t>(registry->devices.size());
  return HAL_SUCCESS;
}

static hal_result_t device_get_body(uint32_t index, hal_device_t* out_device) {
  constexpr const char* kFunction = "hal_device_get";
  Registry* registry = nullptr;
  if (hal_result_t result =
          check_preconditions_in(registry, kFunction, Required{out_device, "out_device"});
      result != HAL_SUCCESS) {
    return result;
  }
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
  if (hal_result_t result = check_preconditions(kFunction, Live{device, "device"},
                                                Required{out_properties, "out_properties"});
      result != HAL_SUCCESS) {
    return result;
  }
  // A binary built against the 1.0 header passes the 1.0 size (fields were
  // appended since): the loader writes only that much (write_sized).
  constexpr size_t kVersion1Size = offsetof(hal_device_properties_t, max_ranks_per_device);
  hal_result_t result = HAL_SUCCESS;
  if (struct_too_small(out_properties, kFunction, "out_properties", "hal_device_properties_t 1.0",
                       result, kVersion1Size)) {
    return result;
  }
  write_sized(device->properties, out_properties);
  return HAL_SUCCESS;
}

static hal_result_t device_synchronize_body(hal_device_t device) {
  constexpr const char* kFunction = "hal_device_synchronize";
  if (hal_result_t result = check_preconditions(kFunction, Live{device, "device"});
      result != HAL_SUCCESS) {
    return result;
  }
  if (hal_result_t result = refuse_wait_in_host_fn(nullptr, device, kFunction);
      result != HAL_SUCCESS) {
    return result;
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
