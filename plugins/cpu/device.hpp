// Virtual devices of the cpu plugin (api/hal/device.h). Each device owns its
// memory budget and allocator and keeps a registry of the streams, events
// and modules created on it, so device_close and plugin_shutdown can finish
// and free whatever the application left behind.
#ifndef HAL_PLUGINS_CPU_DEVICE_HPP_
#define HAL_PLUGINS_CPU_DEVICE_HPP_

#include <cstdint>
#include <memory>
#include "hal_plugin_sdk/owned_set.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "caching_allocator.hpp"
#include "hal_plugin.h"

namespace hal::cpu {

class Event;
class Module;
class Plugin;
class Stream;

// Launch limits the plugin declares (and launch_kernel enforces).
inline constexpr uint32_t kMaxThreadsPerBlock = 1024;
inline constexpr uint32_t kMaxSharedMemoryBytes = 64 * 1024;
// A cache line: what vector loads and false-sharing avoidance want.
inline constexpr size_t kMinAlignmentBytes = 64;

class Device {
 public:
  Device(Plugin& plugin, uint32_t index, uint64_t memory_budget);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  Plugin& plugin() const { return plugin_; }
  uint32_t index() const { return index_; }
  const plugin::ErrorReporter& report() const;
  CachingAllocator& allocator() { return allocator_; }

  Stream* add_stream();
  void remove_stream(Stream* stream);  // waits for its work
  Event* add_event(hal_event_flags_t flags);
  void remove_event(Event* event);
  Module* add_module(std::shared_ptr<Module> module);
  void remove_module(Module* module);

  // Waits for every stream of the device; the first failure wins.
  hal_result_t synchronize();
  // Finishes and frees every object and allocation of the device.
  void release_all();
  void get_properties(hal_device_properties_t& out) const;

 private:
  Plugin& plugin_;
  const uint32_t index_;
  CachingAllocator allocator_;
  plugin::OwnedSet<Stream, std::shared_ptr<Stream>> streams_;
  plugin::OwnedSet<Event, std::unique_ptr<Event>> events_;
  plugin::OwnedSet<Module, std::shared_ptr<Module>> modules_;
};

inline Device* to_device(hal_impl_device_t* device) {
  return reinterpret_cast<Device*>(device);
}

hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count);
hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device);
void device_close(hal_impl_device_t* device);
hal_result_t device_get_properties(hal_impl_device_t* device,
                                   hal_device_properties_t* out_properties);
hal_result_t device_synchronize(hal_impl_device_t* device);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_DEVICE_HPP_
