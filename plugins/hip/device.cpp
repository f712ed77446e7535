// The hip plugin's context (the runtime, hiprtc and the GPUs, found at load)
// and its devices' properties.
#include "device.hpp"

#include <algorithm>
#include <cstring>

#include "event.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::hip {
Plugin::Plugin(const hal_plugin_host_t* host) : PluginBase(host) {
  std::string why;
  runtime_ = Runtime::open(why);
  if (!runtime_) {
    report().log(HAL_LOG_WARNING, "hip: %s; 0 devices", why.c_str());
    return;
  }
  const RuntimeApi& api = runtime_->api();
  int count = 0;
  if (const HipStatus result = api.hipGetDeviceCount(&count); result != hipSuccess) {
    report().log(HAL_LOG_WARNING, "hip: hipGetDeviceCount failed: %s; 0 devices",
                 hip_error_text(result).c_str());
    return;
  }
  if (count <= 0) {
    report().log(HAL_LOG_WARNING, "hip: the runtime (%s) sees no GPU; 0 devices",
                 runtime_->path().c_str());
    return;
  }
  // What was found, for halinfo (HAL_LOG=1) and scripts that record it.
  report().log(HAL_LOG_INFO, "hip: runtime %s from %s", version_text(runtime_->version()).c_str(),
               runtime_->path().c_str());
  std::string hiprtc_why;
  hiprtc_ = Hiprtc::open(runtime_->library(), hiprtc_why);
  if (!hiprtc_) {
    report().log(HAL_LOG_INFO, "hip: %s; HAL dialect modules are not offered", hiprtc_why.c_str());
  } else {
    report().log(HAL_LOG_INFO, "hip: dialect modules through %s", hiprtc_->identity().c_str());
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    hipDeviceProp_t properties{};
    const HipStatus result = api.hipGetDeviceProperties(&properties, ordinal);
    if (result != hipSuccess) {
      report().log(HAL_LOG_WARNING, "hip: GPU %d skipped: hipGetDeviceProperties: %s", ordinal,
                   hip_error_text(result).c_str());
      continue;
    }
    devices_.push_back(std::make_unique<Device>(report(), *runtime_, hiprtc_.get(), ordinal,
                                                properties,
                                                static_cast<uint32_t>(devices_.size())));
  }
}

uint32_t fp32_lanes_per_cu(const std::string& arch) {
  const std::string base = base_arch(arch);
  if (base == "gfx90a" || base.rfind("gfx94", 0) == 0 || base.rfind("gfx11", 0) == 0) return 128;
  return 64;
}

Device::Device(const plugin::ErrorReporter& report, const Runtime& runtime, const Hiprtc* hiprtc,
               int ordinal, const hipDeviceProp_t& properties, uint32_t index)
    : DeviceBase(report), runtime_(runtime), hiprtc_(hiprtc), ordinal_(ordinal), index_(index) {
  read_properties(properties);
}

Device::~Device() {
  release_all();
  // What the application left: freed without a caller to report a failure to.
  const std::vector<plugin::Allocations::Block> left = allocations_.take_all();
  if (bind() == hipSuccess) {
    for (const plugin::Allocations::Block& block : left) (void)release(block.kind, block.base);
  }
}

hal_result_t Device::fail(HipStatus result, const char* what) const {
  return fail(result_of(result), result, what);
}

hal_result_t Device::fail(hal_result_t mapped, HipStatus result, const char* what) const {
  return report().fail(mapped, static_cast<int64_t>(result), "%s: %s", what,
                       hip_error_text(result).c_str());
}

void Device::read_properties(const hipDeviceProp_t& hip) {
  hal_device_properties_t& out = properties_;
  out.struct_size = sizeof(out);
  // The runtime's strings are fixed arrays: bounded copies, NUL-terminated.
  const std::string name(hip.name, strnlen(hip.name, sizeof(hip.name)));
  if (name.empty()) {
    std::snprintf(out.name, sizeof(out.name), "HIP device %u", index_);
  } else {
    plugin::copy_string(out.name, name.c_str());
  }
  arch_.assign(hip.gcnArchName, strnlen(hip.gcnArchName, sizeof(hip.gcnArchName)));
  plugin::copy_string(out.vendor, "AMD");
  plugin::copy_string(out.plugin, kPluginName);
  plugin::copy_string(out.driver_version, version_text(runtime_.version()).c_str());
  hipUUID uuid{};
  if (api().hipDeviceGetUuid(&uuid, ordinal_) == hipSuccess) {
    std::memcpy(out.uuid, uuid.bytes, sizeof(out.uuid));
  }
  out.type = HAL_DEVICE_TYPE_GPU;
  // HOST_CALLBACKS: hipLaunchHostFunc runs them on a runtime thread.
  out.capabilities = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                     HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_HOST_MEMORY |
                     HAL_DEVICE_CAP_STREAM_QUERY;
  if (hip.managedMemory != 0) out.capabilities |= HAL_DEVICE_CAP_SHARED_MEMORY;
  out.module_formats = 1u << HAL_MODULE_FORMAT_HSACO;
  if (hiprtc_ != nullptr && valid_arch_name(arch_)) {
    out.module_formats |= 1u << HAL_MODULE_FORMAT_HAL_DIALECT;
  }
  const int cus = std::max(hip.multiProcessorCount, 0);
  out.compute_units = static_cast<uint32_t>(cus);
  out.total_memory_bytes = hip.totalGlobalMem;
  out.max_allocation_bytes = hip.totalGlobalMem;
  out.min_alignment_bytes = kNativeAlignment;
  out.max_threads_per_block = static_cast<uint32_t>(std::max(hip.maxThreadsPerBlock, 0));
  for (int i = 0; i < 3; ++i) {
    out.max_block_dims[i] = static_cast<uint32_t>(std::max(hip.maxThreadsDim[i], 0));
    out.max_grid_dims[i] = static_cast<uint32_t>(std::max(hip.maxGridSize[i], 0));
  }
  // AMD GPUs have no opt-in above the per-block LDS (64 KiB): a launch may
  // use all of it without raising a kernel attribute first.
  out.max_shared_memory_bytes = static_cast<uint32_t>(hip.sharedMemPerBlock);
  out.subgroup_size = static_cast<uint32_t>(hip.warpSize > 0 ? hip.warpSize : 64);
  // Declared peaks from the properties: one FMA (2 FLOP) per FP32 lane per
  // clock, and DDR memory (2 transfers per clock) over the bus. Clocks are kHz.
  const double clock_hz = hip.clockRate * 1e3;
  out.peak_fp32_flops = 2.0 * clock_hz * cus * fp32_lanes_per_cu(arch_);
  out.peak_memory_bandwidth = 2.0 * hip.memoryClockRate * 1e3 * hip.memoryBusWidth / 8.0;
}

hal_result_t Device::synchronize() {
  if (const HipStatus bound = bind(); bound != hipSuccess) {
    return fail(bound, "device_synchronize");
  }
  const HipStatus result = api().hipDeviceSynchronize();
  return result == hipSuccess
             ? HAL_SUCCESS
             : fail(HAL_ERROR_DEVICE_LOST, result, "device_synchronize: hipDeviceSynchronize");
}

}  // namespace hal::hip
