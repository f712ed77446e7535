// The cpu plugin's context (its devices, thread pool and stream executors, and
// the environment variables that size them) and its devices.
#include "device.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "hal_plugin_sdk/uuid.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"
#include "hal_util/env.hpp"
#include "event.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::cpu {
Plugin::Plugin(const hal_plugin_host_t* host, uint32_t device_count, uint64_t memory_per_device,
               const StreamLimits& stream_limits)
    : PluginBase(host),
      cpu_(CpuInfo::detect()),
      stream_limits_(stream_limits),
      bounds_checks_(hal::util::kernel_bounds_checks()) {
  CommandQueue::retain_cache();
  // One pool thread per hardware thread beyond the caller's own: a stream's
  // runner is worker 0 of every launch it executes.
  const uint32_t workers = device_count == 0 ? 0 : cpu_.hardware_threads - 1;
  pool_scratch_.resize(workers + 1);
  pool_ = std::make_unique<ThreadPool>(workers);
  if (stream_limits_.executor_threads == 0)
    stream_limits_.executor_threads = default_executor_threads(cpu_.hardware_threads);
  executors_ = std::make_unique<StreamExecutors>(stream_limits_.executor_threads,
                                                 stream_limits_.idle_spin, *pool_);
  // Half of the physical memory, split evenly, in whole huge pages; the
  // other half stays for the application and the allocator's caches.
  const uint64_t share =
      device_count == 0 ? 0 : cpu_.physical_memory / (2 * uint64_t{device_count});
  const uint64_t budget = memory_per_device != 0
                              ? memory_per_device
                              : share / CachingAllocator::kHugePage * CachingAllocator::kHugePage;
  report().log(HAL_LOG_DEBUG,
               "cpu: %u threads, %u fp32 lanes, %s, clock %.0f MHz (from %s): declared peaks "
               "%.4g FLOP/s, %.4g bytes/s per device",
               cpu_.hardware_threads, cpu_.vector_floats, cpu_.has_fma ? "FMA" : "no FMA",
               cpu_.nominal_clock_hz / 1e6, cpu_.clock_source.c_str(),
               cpu_.peak_fp32_flops(cpu_.hardware_threads),
               cpu_.peak_memory_bandwidth(cpu_.hardware_threads));
  devices_.reserve(device_count);
  for (uint32_t i = 0; i < device_count; ++i) {
    devices_.push_back(std::make_unique<Device>(*this, i, budget));
  }
}

Plugin::~Plugin() {
  devices_.clear();  // finishes every stream before the executors and the pool go
  executors_.reset();
  pool_.reset();
  CommandQueue::release_cache();
}

bool parse_device_count(const char* text, uint32_t* out_count, std::string& out_error) {
  if (text == nullptr) {
    *out_count = 2;
    return true;
  }
  const std::string value = text;
  uint64_t count = 0;
  bool valid = !value.empty() && value.size() <= 6;
  for (char c : value) {
    if (c < '0' || c > '9') {
      valid = false;
      break;
    }
    count = count * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!valid || count > kMaxDevices) {
    out_error = "HAL_CPU_DEVICES='" + value + "' is not a device count: expected a whole number " +
                "from 0 to " + std::to_string(kMaxDevices);
    return false;
  }
  *out_count = static_cast<uint32_t>(count);
  return true;
}

bool parse_device_memory(const char* text, uint64_t* out_bytes, std::string& out_error) {
  *out_bytes = 0;
  if (text == nullptr) return true;
  const std::string value = text;
  uint64_t bytes = 0;
  bool valid = !value.empty() && value.size() <= 19;
  for (char c : value) {
    if (c < '0' || c > '9') {
      valid = false;
      break;
    }
    bytes = bytes * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!valid || bytes < (uint64_t{1} << 20)) {
    out_error = "HAL_CPU_DEVICE_MEMORY='" + value +
                "' is not a memory size: expected a whole number of bytes, at least 1048576";
    return false;
  }
  *out_bytes = bytes;
  return true;
}

Device::Device(Plugin& plugin, uint32_t index, uint64_t memory_budget)
    : plugin_(plugin), index_(index), allocator_(memory_budget) {}

Device::~Device() {
  release_all();
}

const plugin::ErrorReporter& Device::report() const {
  return plugin_.report();
}

Stream* Device::add_stream() {
  return streams_.add(std::make_shared<Stream>(*this));
}

void Device::remove_stream(Stream* stream) {
  const std::shared_ptr<Stream> owned = streams_.take(stream);
  // Outside the set's lock: finishing the work may take long. A concurrent
  // device_synchronize holding another reference only sees an idle stream.
  if (owned) owned->shutdown();
}

Event* Device::add_event(hal_event_flags_t flags) {
  return events_.add(std::make_unique<Event>(*this, flags));
}

void Device::remove_event(Event* event) {
  events_.take(event);
}

Module* Device::add_module(std::shared_ptr<Module> module) {
  return modules_.add(std::move(module));
}

void Device::remove_module(Module* module) {
  // dlclose runs here, or after the last enqueued launch of the module ran.
  modules_.take(module);
}

hal_result_t Device::synchronize() {
  std::vector<std::shared_ptr<Stream>> streams;
  streams_.for_each([&](const std::shared_ptr<Stream>& stream) { streams.push_back(stream); });
  hal_result_t result = HAL_SUCCESS;
  for (const std::shared_ptr<Stream>& stream : streams) {
    const hal_result_t one = stream->synchronize();
    if (result == HAL_SUCCESS) result = one;
  }
  return result;
}

void Device::release_all() {
  // Streams first: their pending launches still use modules and memory.
  for (const std::shared_ptr<Stream>& stream : streams_.take_all()) stream->shutdown();
  modules_.take_all();
  events_.take_all();
  allocator_.release_all();
}

hal_device_properties_t Device::properties() const {
  hal_device_properties_t out{};
  out.struct_size = sizeof(out);
  const CpuInfo& cpu = plugin_.cpu();
  std::snprintf(out.name, sizeof(out.name), "HAL CPU device %u (%s)", index_, cpu.model.c_str());
  plugin::copy_string(out.vendor, cpu.vendor.c_str());
  plugin::copy_string(out.plugin, "cpu");
  plugin::copy_string(out.driver_version, kPluginVersion);
  const std::string identity =
      "hal-cpu/" + cpu.vendor + "/" + cpu.model + "/" + std::to_string(index_);
  plugin::uuid_from_name(identity, out.uuid);
  out.uuid[6] = static_cast<uint8_t>((out.uuid[6] & 0x0f) | 0x80);  // RFC 4122 version 8 (custom)
  out.uuid[8] = static_cast<uint8_t>((out.uuid[8] & 0x3f) | 0x80);  // RFC 4122 variant
  out.type = HAL_DEVICE_TYPE_CPU;
  out.plugin_device_index = index_;
  out.capabilities = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                     HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_HOST_MEMORY |
                     HAL_DEVICE_CAP_SHARED_MEMORY | HAL_DEVICE_CAP_UNIFIED_ADDRESSING |
                     HAL_DEVICE_CAP_PEER_ACCESS | HAL_DEVICE_CAP_STREAM_QUERY |
                     HAL_DEVICE_CAP_COLLECTIVES | HAL_DEVICE_CAP_ALLTOALLV;
  out.module_formats =
      (1u << HAL_MODULE_FORMAT_CPU_SHARED_OBJECT) | (1u << HAL_MODULE_FORMAT_HAL_DIALECT);
  out.compute_units = cpu.hardware_threads;
  out.total_memory_bytes = allocator_.budget();
  out.max_allocation_bytes = allocator_.max_allocation();
  out.min_alignment_bytes = kMinAlignmentBytes;
  out.max_threads_per_block = kMaxThreadsPerBlock;
  out.max_block_dims[0] = out.max_block_dims[1] = out.max_block_dims[2] = kMaxThreadsPerBlock;
  out.max_grid_dims[0] = 0x7fffffffu;
  out.max_grid_dims[1] = out.max_grid_dims[2] = 65535;
  out.max_shared_memory_bytes = kMaxSharedMemoryBytes;
  out.subgroup_size = cpu.vector_floats;
  // Declared from what the hardware states, never timed (cpu_info.hpp).
  out.peak_fp32_flops = cpu.peak_fp32_flops(out.compute_units);
  out.peak_memory_bandwidth = cpu.peak_memory_bandwidth(out.compute_units);
  return out;
}

}  // namespace hal::cpu
