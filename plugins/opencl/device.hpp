// The opencl plugin's context and devices. The context holds the platforms
// and SVM-capable devices found at load time, each platform with one
// context, so events and memory work across its devices. A device owns the
// streams, events and modules created on it, so device_close can finish and
// free whatever the application left behind.
#ifndef HAL_PLUGINS_OPENCL_DEVICE_HPP_
#define HAL_PLUGINS_OPENCL_DEVICE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "opencl.hpp"

namespace hal::opencl {

class Event;
class Module;
class Stream;

// What the devices report as their plugin (hal_device_properties_t).
inline constexpr char kPluginName[] = "opencl";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";

struct Platform {
  cl_platform_id id = nullptr;
  std::string name;
  ClContext context;
};

class Device : public plugin::DeviceBase<Stream, Event, Module> {
 public:
  Device(const plugin::ErrorReporter& report, Platform& platform, cl_device_id id, uint32_t index,
         bool fine_grain);
  ~Device();

  cl_device_id id() const { return id_; }
  cl_context context() const;
  uint32_t index() const { return index_; }
  // Fine-grain buffer SVM: the host reads and writes allocations directly.
  bool fine_grain() const { return fine_grain_; }
  const hal_device_properties_t& properties() const { return properties_; }
  // synchronize (device.cpp), allocate and free (memory.cpp).
  HAL_PLUGIN_DEVICE_METHODS;

 private:
  void read_properties();
  // Allocations aligned beyond what clSVMAlloc grants are carved out of a
  // larger one: |aligned| -> the pointer clSVMFree needs.
  void remember_base(void* aligned, void* base);
  void* take_base(void* aligned);  // |aligned| itself when not remembered

  Platform& platform_;
  cl_device_id id_;
  uint32_t index_;
  bool fine_grain_;
  hal_device_properties_t properties_{};
  std::mutex mutex_;                               // guards over_aligned_
  std::unordered_map<void*, void*> over_aligned_;  // guarded by mutex_
};

class Plugin : public plugin::PluginBase {
 public:
  // Finds the devices; logs (never fails) when there are none.
  explicit Plugin(const hal_plugin_host_t* host);

  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }

 private:
  std::vector<std::unique_ptr<Platform>> platforms_;
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed before the platforms
};

}  // namespace hal::opencl

#endif  // HAL_PLUGINS_OPENCL_DEVICE_HPP_
