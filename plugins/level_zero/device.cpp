// The level_zero plugin's context (the loader, its drivers and their GPUs,
// found at load) and its devices' properties.
#include "device.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "event.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::level_zero {
namespace {

constexpr uint32_t kIntelVendorId = 0x8086;

uint32_t clamp_u32(uint64_t value) {
  return static_cast<uint32_t>(std::min<uint64_t>(value, UINT32_MAX));
}

}  // namespace

Plugin::Plugin(const hal_plugin_host_t* host) : PluginBase(host) {
  std::string why;
  loader_ = Loader::open(why);
  if (!loader_) {
    report().log(HAL_LOG_WARNING, "level_zero: %s; 0 devices", why.c_str());
    return;
  }
  const LoaderApi& ze = loader_->api();
  uint32_t count = 0;
  if (const ze_result_t result = ze.zeDriverGet(&count, nullptr); result != ZE_RESULT_SUCCESS) {
    report().log(HAL_LOG_WARNING, "level_zero: zeDriverGet failed: %s; 0 devices",
                 ze_error_text(result).c_str());
    return;
  }
  std::vector<ze_driver_handle_t> drivers(count);
  if (count > 0) {
    if (const ze_result_t result = ze.zeDriverGet(&count, drivers.data());
        result != ZE_RESULT_SUCCESS) {
      report().log(HAL_LOG_WARNING, "level_zero: zeDriverGet failed: %s; 0 devices",
                   ze_error_text(result).c_str());
      return;
    }
    drivers.resize(count);
  }
  for (uint32_t i = 0; i < count; ++i) add_driver_devices(drivers[i], i);
  if (devices_.empty()) {
    report().log(HAL_LOG_WARNING,
                 "level_zero: the loader (%s) lists %u driver(s) and no GPU; 0 devices",
                 loader_->path().c_str(), count);
  }
}

Plugin::~Plugin() {
  devices_.clear();  // before the contexts their objects live in
  if (loader_ == nullptr) return;
  for (const auto& entry : drivers_) {
    if (entry->context != nullptr) loader_->api().zeContextDestroy(entry->context);
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
    report().log(HAL_LOG_WARNING, "level_zero: driver %u skipped: zeDeviceGet failed: %s",
                 driver_index, ze_error_text(result).c_str());
    return;
  }
  handles.resize(count);
  if (count == 0) return;
  ze_context_desc_t context_desc{};
  context_desc.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC;
  result = ze.zeContextCreate(driver, &context_desc, &entry->context);
  if (result != ZE_RESULT_SUCCESS) {
    report().log(HAL_LOG_WARNING, "level_zero: driver %u skipped: zeContextCreate failed: %s",
                 driver_index, ze_error_text(result).c_str());
    return;
  }
  for (ze_device_handle_t handle : handles) {
    std::string why;
    auto device = Device::create(report(), *loader_, *entry, handle,
                                 static_cast<uint32_t>(devices_.size()), why);
    if (device == nullptr) {
      report().log(HAL_LOG_WARNING, "level_zero: a device of driver %u skipped: %s", driver_index,
                   why.c_str());
      continue;
    }
    devices_.push_back(std::move(device));
  }
  drivers_.push_back(std::move(entry));
}

Device::Device(const plugin::ErrorReporter& report, const Loader& loader,
               const DriverContext& driver, ze_device_handle_t handle, uint32_t index)
    : DeviceBase(report), loader_(loader), driver_(driver), handle_(handle), index_(index) {
  event_pools_ = std::make_unique<EventPools>(*this);
}

std::unique_ptr<Device> Device::create(const plugin::ErrorReporter& report, const Loader& loader,
                                       const DriverContext& driver, ze_device_handle_t handle,
                                       uint32_t index, std::string& why) {
  std::unique_ptr<Device> device(new Device(report, loader, driver, handle, index));
  if (!device->read_properties(why)) return nullptr;
  return device;
}

Device::~Device() {
  release_all();
  for (const plugin::Allocations::Block& block : allocations_.take_all()) {
    api().zeMemFree(context(), block.base);
  }
}

ze_context_handle_t Device::context() const {
  return driver_.context;
}

hal_result_t Device::fail(ze_result_t result, const char* what) const {
  return fail(result_of(result), result, what);
}

hal_result_t Device::fail(hal_result_t mapped, ze_result_t result, const char* what) const {
  return report().fail(mapped, static_cast<int64_t>(result), "%s: %s", what,
                       ze_error_text(result).c_str());
}

bool Device::read_properties(std::string& why) {
  const LoaderApi& ze = api();
  ze_device_properties_t device{};
  device.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  if (const ze_result_t result = ze.zeDeviceGetProperties(handle_, &device);
      result != ZE_RESULT_SUCCESS) {
    why = "zeDeviceGetProperties failed: " + ze_error_text(result);
    return false;
  }
  if (device.type != ZE_DEVICE_TYPE_GPU) {
    why = "not a GPU (ze_device_type_t " + std::to_string(static_cast<int>(device.type)) + ")";
    return false;
  }
  ze_device_compute_properties_t compute{};
  compute.stype = ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES;
  if (const ze_result_t result = ze.zeDeviceGetComputeProperties(handle_, &compute);
      result != ZE_RESULT_SUCCESS) {
    why = "zeDeviceGetComputeProperties failed: " + ze_error_text(result);
    return false;
  }
  // A HAL stream is an immediate command list on a compute queue group.
  uint32_t group_count = 0;
  ze.zeDeviceGetCommandQueueGroupProperties(handle_, &group_count, nullptr);
  std::vector<ze_command_queue_group_properties_t> groups(group_count);
  for (auto& group : groups) group.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
  if (group_count > 0) {
    ze.zeDeviceGetCommandQueueGroupProperties(handle_, &group_count, groups.data());
  }
  bool found = false;
  for (uint32_t i = 0; i < group_count && !found; ++i) {
    if ((groups[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) != 0) {
      compute_ordinal_ = i;
      found = true;
    }
  }
  if (!found) {
    why = "none of its " + std::to_string(group_count) + " command queue groups runs compute";
    return false;
  }
  uint32_t memory_count = 0;
  ze.zeDeviceGetMemoryProperties(handle_, &memory_count, nullptr);
  std::vector<ze_device_memory_properties_t> memories(memory_count);
  for (auto& memory : memories) memory.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
  if (memory_count > 0) ze.zeDeviceGetMemoryProperties(handle_, &memory_count, memories.data());
  memories.resize(memory_count);
  ze_device_memory_access_properties_t access{};
  access.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_ACCESS_PROPERTIES;
  if (ze.zeDeviceGetMemoryAccessProperties(handle_, &access) != ZE_RESULT_SUCCESS) access = {};

  hal_device_properties_t& out = properties_;
  out.struct_size = sizeof(out);
  // The driver's name is up to 255 characters; HAL's field holds 127.
  std::snprintf(out.name, sizeof(out.name), "%.*s", static_cast<int>(sizeof(out.name) - 1),
                device.name);
  if (out.name[0] == '\0') std::snprintf(out.name, sizeof(out.name), "Level Zero GPU %u", index_);
  if (device.vendorId == kIntelVendorId) {
    plugin::copy_string(out.vendor, "Intel");
  } else {
    std::snprintf(out.vendor, sizeof(out.vendor), "PCI vendor 0x%04x", device.vendorId);
  }
  plugin::copy_string(out.plugin, kPluginName);
  std::snprintf(out.driver_version, sizeof(out.driver_version), "Level Zero driver %u (API %u.%u)",
                driver_.driver_version, ZE_MAJOR_VERSION(driver_.api_version),
                ZE_MINOR_VERSION(driver_.api_version));
  static_assert(sizeof(out.uuid) == ZE_MAX_DEVICE_UUID_SIZE);
  std::memcpy(out.uuid, device.uuid.id, sizeof(out.uuid));
  out.type = HAL_DEVICE_TYPE_GPU;
  // STREAM_QUERY: stream_query and event_query poll an event (never block).
  out.capabilities =
      HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_STREAM_QUERY;
  if (access.hostAllocCapabilities != 0) out.capabilities |= HAL_DEVICE_CAP_HOST_MEMORY;
  if (access.sharedSingleDeviceAllocCapabilities != 0) {
    out.capabilities |= HAL_DEVICE_CAP_SHARED_MEMORY;
  }
  // Timing needs a timer: timerResolution is nanoseconds per tick for
  // ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES (the 1.2 struct type gives Hz).
  if (device.timerResolution != 0 && device.kernelTimestampValidBits != 0) {
    out.capabilities |= HAL_DEVICE_CAP_EVENT_TIMING;
    ns_per_tick_ = static_cast<double>(device.timerResolution);
    timestamp_mask_ = device.kernelTimestampValidBits >= 64
                          ? ~uint64_t{0}
                          : (uint64_t{1} << device.kernelTimestampValidBits) - 1;
  }
  out.module_formats = 1u << HAL_MODULE_FORMAT_SPIRV;
  const uint64_t execution_units =
      uint64_t{device.numSlices} * device.numSubslicesPerSlice * device.numEUsPerSubslice;
  out.compute_units = clamp_u32(execution_units);
  uint64_t total = 0;
  double bandwidth = 0;
  for (const auto& memory : memories) {
    total += memory.totalSize;
    // Double data rate over the bus: MHz x 1e6 x 2 transfers x bits / 8.
    bandwidth = std::max(bandwidth, memory.maxClockRate * 1e6 * 2.0 * memory.maxBusWidth / 8.0);
  }
  out.total_memory_bytes = total;
  out.max_allocation_bytes = device.maxMemAllocSize;
  out.min_alignment_bytes = kMinAlignment;
  out.max_threads_per_block = compute.maxTotalGroupSize;
  out.max_block_dims[0] = compute.maxGroupSizeX;
  out.max_block_dims[1] = compute.maxGroupSizeY;
  out.max_block_dims[2] = compute.maxGroupSizeZ;
  out.max_grid_dims[0] = compute.maxGroupCountX;
  out.max_grid_dims[1] = compute.maxGroupCountY;
  out.max_grid_dims[2] = compute.maxGroupCountZ;
  out.max_shared_memory_bytes = compute.maxSharedLocalMemory;
  // The widest sub-group the device offers (the sizes are listed ascending).
  const uint32_t subgroups = std::min<uint32_t>(compute.numSubGroupSizes, ZE_SUBGROUPSIZE_COUNT);
  out.subgroup_size = subgroups > 0 ? compute.subGroupSizes[subgroups - 1] : 0;
  // Declared peak: one FMA (2 FLOP) per SIMD lane per EU per clock (MHz).
  out.peak_fp32_flops = 2.0 * static_cast<double>(execution_units) * device.physicalEUSimdWidth *
                        device.coreClockRate * 1e6;
  out.peak_memory_bandwidth = bandwidth;
  return true;
}

}  // namespace hal::level_zero
