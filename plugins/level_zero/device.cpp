#include "device.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "hal_plugin_sdk/versioned_struct.hpp"
#include "module.hpp"
#include "plugin.hpp"
#include "stream.hpp"

namespace hal::level_zero {
namespace {

constexpr uint32_t kIntelVendorId = 0x8086;

uint32_t clamp_u32(uint64_t value) {
  return static_cast<uint32_t>(std::min<uint64_t>(value, UINT32_MAX));
}

}  // namespace

Device::Device(const plugin::ErrorReporter& report, const Loader& loader,
               const DriverContext& driver, ze_device_handle_t handle, uint32_t index)
    : report_(report), loader_(loader), driver_(driver), handle_(handle), index_(index) {}

std::unique_ptr<Device> Device::create(const plugin::ErrorReporter& report, const Loader& loader,
                                       const DriverContext& driver, ze_device_handle_t handle,
                                       uint32_t index, std::string& why) {
  std::unique_ptr<Device> device(new Device(report, loader, driver, handle, index));
  if (!device->read_properties(why)) return nullptr;
  return device;
}

Device::~Device() {
  release_all();
  std::lock_guard lock(mutex_);
  for (const auto& [ptr, kind] : allocations_) api().zeMemFree(context(), ptr);
  allocations_.clear();
}

ze_context_handle_t Device::context() const {
  return driver_.context;
}

hal_result_t Device::fail(ze_result_t result, const char* what) const {
  return fail(result_of(result), result, what);
}

hal_result_t Device::fail(hal_result_t mapped, ze_result_t result, const char* what) const {
  return report_.fail(mapped, static_cast<int64_t>(result), "%s: %s", what,
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

Stream* Device::add_stream(std::unique_ptr<Stream> stream) {
  return streams_.add(std::move(stream));
}

void Device::remove_stream(Stream* stream) {
  streams_.take(stream);  // ~Stream synchronises and destroys the command list
}

Event* Device::add_event(std::unique_ptr<Event> event) {
  return events_.add(std::move(event));
}

void Device::remove_event(Event* event) {
  events_.take(event);
}

Module* Device::add_module(std::unique_ptr<Module> module) {
  return modules_.add(std::move(module));
}

void Device::remove_module(Module* module) {
  modules_.take(module);
}

hal_result_t Device::allocate(hal_memory_kind_t kind, size_t size, size_t alignment,
                              void** out_ptr) {
  // The loader passes a power of two of at least min_alignment_bytes, which
  // zeMemAlloc* take as is.
  ze_device_mem_alloc_desc_t device_desc{};
  device_desc.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC;
  ze_host_mem_alloc_desc_t host_desc{};
  host_desc.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC;
  void* ptr = nullptr;
  ze_result_t result = ZE_RESULT_SUCCESS;
  const char* call = "";
  switch (kind) {
    case HAL_MEMORY_DEVICE:
      call = "mem_alloc: zeMemAllocDevice";
      result = api().zeMemAllocDevice(context(), &device_desc, size, alignment, handle_, &ptr);
      break;
    case HAL_MEMORY_HOST:
      call = "mem_alloc: zeMemAllocHost";
      result = api().zeMemAllocHost(context(), &host_desc, size, alignment, &ptr);
      break;
    case HAL_MEMORY_SHARED:
      call = "mem_alloc: zeMemAllocShared";
      result = api().zeMemAllocShared(context(), &device_desc, &host_desc, size, alignment, handle_,
                                      &ptr);
      break;
    default:
      return report_.fail(HAL_ERROR_UNSUPPORTED, 0, "mem_alloc: memory kind %d is unknown",
                          static_cast<int>(kind));
  }
  if (result == ZE_RESULT_SUCCESS && ptr == nullptr) result = ZE_RESULT_ERROR_UNKNOWN;
  if (result != ZE_RESULT_SUCCESS) {
    return report_.fail(
        result_of(result) == HAL_ERROR_OUT_OF_MEMORY ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL,
        static_cast<int64_t>(result), "%s of %zu bytes aligned to %zu failed: %s", call, size,
        alignment, ze_error_text(result).c_str());
  }
  try {
    std::lock_guard lock(mutex_);
    allocations_.emplace(ptr, kind);
  } catch (...) {
    api().zeMemFree(context(), ptr);
    throw;
  }
  *out_ptr = ptr;
  return HAL_SUCCESS;
}

hal_result_t Device::free(void* ptr) {
  {
    std::lock_guard lock(mutex_);
    const auto it = allocations_.find(ptr);
    if (it == allocations_.end()) {
      return report_.fail(HAL_ERROR_INVALID_ARGUMENT, 0,
                          "mem_free: %p is not an allocation of this device", ptr);
    }
    allocations_.erase(it);
  }
  const ze_result_t result = api().zeMemFree(context(), ptr);
  return result == ZE_RESULT_SUCCESS ? HAL_SUCCESS : fail(result, "mem_free: zeMemFree");
}

void Device::release_all() {
  streams_.take_all();  // each synchronises, then drops the L0 events it used
  events_.take_all();
  modules_.take_all();
}

// ---- table entries ----------------------------------------------------------

void device_close(hal_impl_device_t* device) {
  try {
    to_device(device)->release_all();
  } catch (...) {
  }
}

hal_result_t device_get_properties(hal_impl_device_t* device,
                                   hal_device_properties_t* out_properties) {
  plugin::write_versioned_struct(to_device(device)->properties(), out_properties);
  return HAL_SUCCESS;
}

hal_result_t mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                       size_t alignment, void** out_ptr) {
  Device& self = *to_device(device);
  return plugin::guarded(self.report(), "mem_alloc",
                         [&] { return self.allocate(kind, size, alignment, out_ptr); });
}

hal_result_t mem_free(hal_impl_device_t* device, void* ptr) {
  // The loader synchronised the device first: nothing enqueued uses |ptr|.
  Device& self = *to_device(device);
  return plugin::guarded(self.report(), "mem_free", [&] { return self.free(ptr); });
}

}  // namespace hal::level_zero
