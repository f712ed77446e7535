// The plugin's context and its devices: finding them, their properties,
// waiting for them, and what device_close releases.
#include "device.hpp"

#include <cstdio>
#include <cstdlib>

#include "event.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::null_plugin {

namespace {

// HAL_NULL_DEVICES (1 to 8, default 1; any other value means 1): alike
// devices, so that a certification of several devices (collectives over 2
// and 4 ranks) runs on the skeleton too.
uint32_t configured_device_count() {
  const char* text = secure_getenv("HAL_NULL_DEVICES");
  const long count = text != nullptr ? std::strtol(text, nullptr, 10) : 1;
  return count >= 1 && count <= 8 ? static_cast<uint32_t>(count) : 1;
}

}  // namespace

Plugin::Plugin(const hal_plugin_host_t* host) : PluginBase(host) {
  // TODO(null): open the driver and enumerate its devices; none is valid.
  for (uint32_t i = 0; i < configured_device_count(); ++i) {
    devices_.push_back(std::make_unique<Device>(report(), i));
  }
}

Plugin::~Plugin() {
  // TODO(null): close the driver once the devices are gone. The loader has
  // closed every device by now.
  devices_.clear();
}

Device::Device(const plugin::ErrorReporter& report, uint32_t index)
    : DeviceBase(report), index_(index) {}

Device::~Device() {
  release_all();
}

hal_device_properties_t Device::properties() const {
  hal_device_properties_t p{};
  p.struct_size = sizeof(p);
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
  return p;
}

hal_result_t Device::synchronize() {
  // TODO(null): wait for every queue of the device. Here nothing is pending.
  return HAL_SUCCESS;
}

}  // namespace hal::null_plugin
