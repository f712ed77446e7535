// The null plugin: the skeleton a vendor clones to start a HAL plugin
// (README.md beside this file). One device whose memory is host RAM, streams
// that run each operation in order as it is enqueued, events with timing, and
// no kernels. Every place a real device differs says so with TODO(null).
#ifndef HAL_PLUGINS_NULL_NULL_HPP_
#define HAL_PLUGINS_NULL_NULL_HPP_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hal_plugin.h"
#include "hal_plugin_sdk/report.hpp"

namespace hal::null_plugin {

inline constexpr char kPluginName[] = "null";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project (plugin template)";

// TODO(null): the real device's limits. The launch limits must be at least 1
// even for a device without kernels (SPEC.md §11.3).
inline constexpr uint64_t kDeviceMemoryBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMinAlignmentBytes = 64;

class Device {
 public:
  Device(const plugin::ErrorReporter& report, uint32_t index) : report_(report), index_(index) {}

  const plugin::ErrorReporter& report() const { return report_; }
  void get_properties(hal_device_properties_t& properties) const;

  hal_result_t allocate(size_t size, size_t alignment, void** out_ptr);
  hal_result_t free(void* ptr);

 private:
  plugin::ErrorReporter report_;
  uint32_t index_;
  struct Allocation {
    size_t size;
    size_t alignment;  // operator delete gets the alignment operator new got
  };
  std::mutex mutex_;
  std::unordered_map<void*, Allocation> allocations_;  // by base, under |mutex_|
  uint64_t allocated_bytes_ = 0;                       // under |mutex_|
};

// The plugin's context: the host services and the devices.
class Plugin {
 public:
  // TODO(null): enumerate the driver's devices; 0 is valid when none is present.
  // Here: HAL_NULL_DEVICES (1 to 8, default 1) alike devices, so that a
  // certification of several devices (collectives over 2 and 4 ranks) runs
  // on the skeleton too.
  explicit Plugin(const hal_plugin_host_t* host) : report_(host) {
    for (uint32_t i = 0; i < configured_device_count(); ++i) {
      devices_.push_back(std::make_unique<Device>(report_, i));
    }
  }

  const plugin::ErrorReporter& report() const { return report_; }
  uint32_t device_count() const { return static_cast<uint32_t>(devices_.size()); }
  Device& device(uint32_t index) { return *devices_[index]; }

 private:
  static uint32_t configured_device_count() {
    const char* text = secure_getenv("HAL_NULL_DEVICES");
    const long count = text != nullptr ? std::strtol(text, nullptr, 10) : 1;
    return count >= 1 && count <= 8 ? static_cast<uint32_t>(count) : 1;
  }

  plugin::ErrorReporter report_;
  std::vector<std::unique_ptr<Device>> devices_;
};

// TODO(null): a real stream is the device's queue: enqueue entries hand work
// to it and return. Here each operation runs as it is enqueued, so a stream
// is always idle and in order by construction.
struct Stream {
  Device* device;
};

// An event captures a point of a stream; here that point is reached when
// event_record runs, so recording stamps the time at once.
struct Event {
  Device* device;
  hal_event_flags_t flags;
  std::atomic<int64_t> recorded_ns{-1};  // steady clock; -1: never recorded
};

inline Plugin* to_plugin(hal_plugin_context_t* context) {
  return reinterpret_cast<Plugin*>(context);
}
inline Device* to_device(hal_impl_device_t* device) {
  return reinterpret_cast<Device*>(device);
}
inline Stream* to_stream(hal_impl_stream_t* stream) {
  return reinterpret_cast<Stream*>(stream);
}
inline Event* to_event(hal_impl_event_t* event) {
  return reinterpret_cast<Event*>(event);
}

// The table entries, one group per source file.
void plugin_shutdown(hal_plugin_context_t* context);
hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count);
hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device);
void device_close(hal_impl_device_t* device);
hal_result_t device_get_properties(hal_impl_device_t* device,
                                   hal_device_properties_t* out_properties);
hal_result_t device_synchronize(hal_impl_device_t* device);

hal_result_t mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                       size_t alignment, void** out_ptr);
hal_result_t mem_free(hal_impl_device_t* device, void* ptr);
hal_result_t memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src, size_t size);
hal_result_t memset_async(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size);

hal_result_t stream_create(hal_impl_device_t* device, hal_stream_flags_t flags,
                           hal_impl_stream_t** out_stream);
hal_result_t stream_destroy(hal_impl_stream_t* stream);
hal_result_t stream_synchronize(hal_impl_stream_t* stream);
hal_result_t stream_query(hal_impl_stream_t* stream);
hal_result_t stream_wait_event(hal_impl_stream_t* stream, hal_impl_event_t* event);

hal_result_t event_create(hal_impl_device_t* device, hal_event_flags_t flags,
                          hal_impl_event_t** out_event);
hal_result_t event_destroy(hal_impl_event_t* event);
hal_result_t event_record(hal_impl_event_t* event, hal_impl_stream_t* stream);
hal_result_t event_query(hal_impl_event_t* event);
hal_result_t event_synchronize(hal_impl_event_t* event);
hal_result_t event_elapsed_ms(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms);

hal_result_t module_load(hal_impl_device_t* device, const hal_module_desc_t* desc,
                         hal_impl_module_t** out_module);
hal_result_t module_unload(hal_impl_module_t* module);
hal_result_t kernel_get(hal_impl_module_t* module, const hal_kernel_desc_t* desc,
                        hal_impl_kernel_t** out_kernel, hal_kernel_info_t* out_info);
hal_result_t launch_kernel(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                           const hal_launch_config_t* config, uint32_t arg_count,
                           const hal_kernel_arg_t* args);

}  // namespace hal::null_plugin

#endif  // HAL_PLUGINS_NULL_NULL_HPP_
