#include "device.hpp"

#include <cstdio>
#include <vector>

#include "hal_plugin_sdk/versioned_struct.hpp"
#include "event.hpp"
#include "module.hpp"
#include "plugin.hpp"
#include "stream.hpp"

namespace hal::cpu {
namespace {

// FNV-1a: a stable hash, so a device keeps its uuid across runs and builds.
uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t hash = 14695981039346656037ull ^ seed;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace

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

void Device::get_properties(hal_device_properties_t& out) const {
  const CpuInfo& cpu = plugin_.cpu();
  std::snprintf(out.name, sizeof(out.name), "HAL CPU device %u (%s)", index_, cpu.model.c_str());
  plugin::copy_string(out.vendor, cpu.vendor.c_str());
  plugin::copy_string(out.plugin, "cpu");
  plugin::copy_string(out.driver_version, kPluginVersion);
  const std::string identity =
      "hal-cpu/" + cpu.vendor + "/" + cpu.model + "/" + std::to_string(index_);
  const uint64_t high = fnv1a(identity, 0);
  const uint64_t low = fnv1a(identity, 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < 8; ++i) {
    out.uuid[i] = static_cast<uint8_t>(high >> (8 * i));
    out.uuid[8 + i] = static_cast<uint8_t>(low >> (8 * i));
  }
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
}

// ---- table entries ----------------------------------------------------------

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

void device_close(hal_impl_device_t* device) {
  // Devices live as long as the plugin; closing one finishes and frees what
  // was created on it. Nothing may escape this C entry.
  try {
    to_device(device)->release_all();
  } catch (...) {
  }
}

hal_result_t device_get_properties(hal_impl_device_t* device,
                                   hal_device_properties_t* out_properties) {
  Device& self = *to_device(device);
  return plugin::guarded(self.report(), "device_get_properties", [&] {
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    self.get_properties(properties);
    plugin::write_versioned_struct(properties, out_properties);
    return HAL_SUCCESS;
  });
}

hal_result_t device_synchronize(hal_impl_device_t* device) {
  Device& self = *to_device(device);
  return plugin::guarded(self.report(), "device_synchronize", [&] { return self.synchronize(); });
}

}  // namespace hal::cpu
