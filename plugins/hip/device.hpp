// One AMD GPU: its runtime ordinal (made current on the calling thread by
// every entry, since HIP's current device is per thread), its properties
// from hipGetDeviceProperties, its allocations (by kind, so mem_free calls
// the right free), and the registries of the streams, events and modules
// created on it, so device_close can finish and free whatever the
// application left behind.
#ifndef HAL_PLUGINS_HIP_DEVICE_HPP_
#define HAL_PLUGINS_HIP_DEVICE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "hal_plugin_sdk/device_entries.hpp"
#include "hal_plugin_sdk/owned_set.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "hiprtc.hpp"
#include "runtime.hpp"

namespace hal::hip {

class Event;
class Module;
class Stream;

// FP32 FMA lanes per compute unit for an architecture ("gfx90a"): 128 where
// the CU issues packed FP32 (CDNA2 gfx90a, CDNA3 gfx94x) or dual-issues it
// (RDNA3 gfx11xx), else 64 (four SIMD16 on GCN/CDNA1, two SIMD32 on RDNA).
uint32_t fp32_lanes_per_cu(const std::string& arch);

class Device {
 public:
  Device(const plugin::ErrorReporter& report, const Runtime& runtime, const Hiprtc* hiprtc,
         int ordinal, const hipDeviceProp_t& properties, uint32_t index);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const plugin::ErrorReporter& report() const { return report_; }
  const RuntimeApi& api() const { return runtime_.api(); }
  const Hiprtc* hiprtc() const { return hiprtc_; }
  const hal_device_properties_t& properties() const { return properties_; }
  // The gcnArchName ("gfx90a:sramecc+:xnack-"): what hiprtc compiles for.
  const std::string& arch() const { return arch_; }

  // Makes the device current on the calling thread. Returns the runtime's answer.
  hipError_t bind() const { return api().hipSetDevice(ordinal_); }
  // report().fail() with |result|'s mapping, its code and its name.
  hal_result_t fail(hipError_t result, const char* what) const;
  hal_result_t fail(hal_result_t mapped, hipError_t result, const char* what) const;

  Stream* add_stream(std::unique_ptr<Stream> stream);
  void remove_stream(Stream* stream);
  Event* add_event(std::unique_ptr<Event> event);
  void remove_event(Event* event);
  Module* add_module(std::unique_ptr<Module> module);
  void remove_module(Module* module);

  hal_result_t allocate(hal_memory_kind_t kind, size_t size, size_t alignment, void** out_ptr);
  hal_result_t free(void* ptr);

  hal_result_t synchronize();
  void release_all();

 private:
  void read_properties(const hipDeviceProp_t& hip);
  hipError_t release(hal_memory_kind_t kind, void* base) const;

  struct Allocation {
    hal_memory_kind_t kind;
    void* base;  // what the runtime returned (below the pointer when over-aligned)
  };

  plugin::ErrorReporter report_;
  const Runtime& runtime_;
  const Hiprtc* hiprtc_;
  int ordinal_;
  uint32_t index_;
  std::string arch_;
  hal_device_properties_t properties_{};
  plugin::OwnedSet<Stream, std::unique_ptr<Stream>> streams_;
  plugin::OwnedSet<Event, std::unique_ptr<Event>> events_;
  plugin::OwnedSet<Module, std::unique_ptr<Module>> modules_;
  std::mutex mutex_;                                   // guards allocations_
  std::unordered_map<void*, Allocation> allocations_;  // guarded by mutex_
};

inline Device* to_device(hal_impl_device_t* device) {
  return reinterpret_cast<Device*>(device);
}

// The table's device entries: hal_plugin_sdk/device_entries.hpp.
using DeviceEntries = plugin::DeviceEntries<Device>;

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_DEVICE_HPP_
