// The plugin's context and its devices: counting, opening, properties.
#include <cstdio>

#include "hal_plugin_sdk/versioned_struct.hpp"
#include "null.hpp"

namespace hal::null_plugin {

void Device::get_properties(hal_device_properties_t& p) const {
  // TODO(null): the real device's name, vendor, driver version and a uuid
  // stable across runs for the same physical device.
  std::snprintf(p.name, sizeof(p.name), "HAL null device %u (host memory)", index_);
  plugin::copy_string(p.vendor, "HAL project");
  plugin::copy_string(p.driver_version, kPluginVersion);
  std::snprintf(reinterpret_cast<char*>(p.uuid), sizeof(p.uuid), "hal-null-%06u", index_);
  p.type = HAL_DEVICE_TYPE_ACCELERATOR;
  // Declare only what the table and the device really do: halconform checks
  // every bit (SPEC.md §11.3). Host RAM is addressable from the host, and a
  // stream that finishes each operation at enqueue never blocks a query.
  // TODO(null): HAL_DEVICE_CAP_KERNELS with module_formats once the kernel
  // entries work; HAL_DEVICE_CAP_PEER_ACCESS for copies between devices.
  p.capabilities = HAL_DEVICE_CAP_EVENT_TIMING | HAL_DEVICE_CAP_HOST_MEMORY |
                   HAL_DEVICE_CAP_SHARED_MEMORY | HAL_DEVICE_CAP_UNIFIED_ADDRESSING |
                   HAL_DEVICE_CAP_STREAM_QUERY;
  p.module_formats = 0;
  p.compute_units = 1;
  p.total_memory_bytes = kDeviceMemoryBytes;
  p.max_allocation_bytes = kDeviceMemoryBytes;
  p.min_alignment_bytes = kMinAlignmentBytes;
  // Launch limits are at least 1 on every device, kernels or not.
  p.max_threads_per_block = 1;
  for (int d = 0; d < 3; ++d) {
    p.max_block_dims[d] = 1;
    p.max_grid_dims[d] = 1;
  }
  p.max_shared_memory_bytes = 0;
  p.subgroup_size = 1;
  p.peak_fp32_flops = 0;  // not declared
  p.peak_memory_bandwidth = 0;
}

void plugin_shutdown(hal_plugin_context_t* context) {
  // TODO(null): close the driver. Every device is closed by now.
  delete to_plugin(context);
}

hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count) {
  *out_count = to_plugin(context)->device_count();
  return HAL_SUCCESS;
}

hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device) {
  // The loader asks for 0..device_count-1 only.
  *out_device = reinterpret_cast<hal_impl_device_t*>(&to_plugin(context)->device(index));
  return HAL_SUCCESS;
}

void device_close(hal_impl_device_t*) {
  // The plugin owns its devices; the loader has destroyed every stream,
  // event and allocation of this one already.
}

hal_result_t device_get_properties(hal_impl_device_t* device,
                                   hal_device_properties_t* out_properties) {
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  to_device(device)->get_properties(properties);
  // Never past the loader's struct_size: it may be an older, smaller struct.
  plugin::write_versioned_struct(properties, out_properties);
  return HAL_SUCCESS;
}

hal_result_t device_synchronize(hal_impl_device_t*) {
  // TODO(null): wait for every queue of the device. Here nothing is pending.
  return HAL_SUCCESS;
}

}  // namespace hal::null_plugin
