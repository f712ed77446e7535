// The null plugin: the skeleton a vendor clones to start a HAL plugin
// (README.md beside this file). One device whose memory is host RAM, streams
// that run each operation in order as it is enqueued, events with timing, and
// no kernels. Every place a real device differs says so with TODO(null).
//
// This header: the plugin's context and its device. The table's entries are
// the SDK's (hal_plugin_sdk/entries.hpp): each plugin class keeps only its
// methods, one source file per object (README.md, "Where things go").
#ifndef HAL_PLUGINS_NULL_DEVICE_HPP_
#define HAL_PLUGINS_NULL_DEVICE_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hal_plugin.h"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "hal_plugin_sdk/report.hpp"

namespace hal::null_plugin {

inline constexpr char kPluginName[] = "null";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project (plugin template)";

// TODO(null): the real device's limits. The launch limits must be at least 1
// even for a device without kernels (SPEC.md §11.3).
inline constexpr uint64_t kDeviceMemoryBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMinAlignmentBytes = 64;

class Event;
class Module;
class Stream;

// One device. It owns the streams, events and modules made on it
// (DeviceBase), so that device_close frees what the application left. Made
// and destroyed in device.cpp, where those classes are complete.
class Device : public plugin::DeviceBase<Stream, Event, Module> {
 public:
  Device(const plugin::ErrorReporter& report, uint32_t index);
  ~Device();  // releases what the application left

  uint32_t index() const { return index_; }
  hal_device_properties_t properties() const;
  // synchronize (device.cpp), allocate and free (memory.cpp).
  HAL_PLUGIN_DEVICE_METHODS;

 private:
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
class Plugin : public plugin::PluginBase {
 public:
  // TODO(null): open the driver and enumerate its devices (device.cpp).
  explicit Plugin(const hal_plugin_host_t* host);
  ~Plugin();

  // 0 devices is valid: a plugin whose driver or hardware is absent loads.
  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }

 private:
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace hal::null_plugin

#endif  // HAL_PLUGINS_NULL_DEVICE_HPP_
