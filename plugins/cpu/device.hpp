// The cpu plugin's context and its virtual devices (api/hal/device.h). The
// context is what the loader gets back from hal_plugin_entry and passes to
// plugin_shutdown: it owns the devices, the thread pool and stream executors
// they share, and the host services. Each device owns its memory budget and
// allocator and keeps a registry of the streams, events and modules created
// on it, so device_close and plugin_shutdown can finish and free whatever the
// application left behind.
#ifndef HAL_PLUGINS_CPU_DEVICE_HPP_
#define HAL_PLUGINS_CPU_DEVICE_HPP_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "hal_plugin_sdk/owned_set.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "bounds.hpp"
#include "caching_allocator.hpp"
#include "cpu_info.hpp"
#include "event.hpp"
#include "hal_plugin.h"
#include "launch.hpp"
#include "stream.hpp"
#include "thread_pool.hpp"

namespace hal::cpu {

inline constexpr char kPluginName[] = "cpu";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";
// The most virtual devices HAL_CPU_DEVICES may ask for.
inline constexpr uint32_t kMaxDevices = 64;

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

  // Finishes and frees every object and allocation of the device.
  void release_all();
  hal_device_properties_t properties() const;
  // synchronize: every stream of the device, the first failure wins.
  // allocate and free (memory.cpp): through the device's caching allocator.
  HAL_PLUGIN_DEVICE_METHODS;

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

class Plugin : public plugin::PluginBase {
 public:
  // Each device gets |memory_per_device| bytes, or when 0 an even share of
  // half the physical memory.
  Plugin(const hal_plugin_host_t* host, uint32_t device_count, uint64_t memory_per_device,
         const StreamLimits& stream_limits = {});
  ~Plugin();

  const CpuInfo& cpu() const { return cpu_; }
  ThreadPool& pool() { return *pool_; }
  std::vector<WorkerScratch>& pool_scratch() { return pool_scratch_; }
  CompletionSignal& completion_signal() { return signal_; }
  StreamExecutors& executors() { return *executors_; }
  const StreamLimits& stream_limits() const { return stream_limits_; }
  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  // Bounds-checked dialect kernels (bounds.hpp), decided once at plugin start.
  bool bounds_checks() const { return bounds_checks_; }
  AllocationExtents& allocation_extents() { return extents_; }

 private:
  CpuInfo cpu_;
  CompletionSignal signal_;
  std::vector<WorkerScratch> pool_scratch_;  // indexed by pool worker (0 unused)
  std::unique_ptr<ThreadPool> pool_;
  StreamLimits stream_limits_;
  std::unique_ptr<StreamExecutors> executors_;
  bool bounds_checks_;
  AllocationExtents extents_;                     // filled while bounds_checks_
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed first: streams use the pool
};

// Reads HAL_CPU_DEVICES (default 2). False, with |out_error|, when the value
// is not a decimal number in [0, kMaxDevices].
bool parse_device_count(const char* text, uint32_t* out_count, std::string& out_error);

// Reads HAL_CPU_DEVICE_MEMORY, the budget of each device in bytes (unset:
// 0, the default share). False, with |out_error|, when it is not a whole
// number of at least 1 MiB.
bool parse_device_memory(const char* text, uint64_t* out_bytes, std::string& out_error);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_DEVICE_HPP_
