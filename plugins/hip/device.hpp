// The hip plugin's context and devices. The context holds the runtime (absent
// when /dev/kfd or libamdhip64.so.5 is missing; then 0 devices and the reason
// in the load report), hiprtc when present, and one Device per GPU. A device
// has its runtime ordinal (made current on the calling thread by every
// entry, since HIP's current device is per thread), its properties from
// hipGetDeviceProperties, its allocations (by kind, so mem_free calls the
// right free), and the streams, events and modules created on it, so
// device_close can finish and free whatever the application left behind.
#ifndef HAL_PLUGINS_HIP_DEVICE_HPP_
#define HAL_PLUGINS_HIP_DEVICE_HPP_

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hal_plugin_sdk/allocations.hpp"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/objects.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "hiprtc.hpp"
#include "runtime.hpp"

namespace hal::hip {

class Event;
class Module;
class Stream;

// What the devices report as their plugin (hal_device_properties_t).
inline constexpr char kPluginName[] = "hip";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";
// HIP allocations are at least this aligned (hipMalloc's documented 256).
inline constexpr size_t kNativeAlignment = 256;

// FP32 FMA lanes per compute unit for an architecture ("gfx90a"): 128 where
// the CU issues packed FP32 (CDNA2 gfx90a, CDNA3 gfx94x) or dual-issues it
// (RDNA3 gfx11xx), else 64 (four SIMD16 on GCN/CDNA1, two SIMD32 on RDNA).
uint32_t fp32_lanes_per_cu(const std::string& arch);

class Device : public plugin::DeviceBase<Stream, Event, Module> {
 public:
  Device(const plugin::ErrorReporter& report, const Runtime& runtime, const Hiprtc* hiprtc,
         int ordinal, const hipDeviceProp_t& properties, uint32_t index);
  ~Device();

  const RuntimeApi& api() const { return runtime_.api(); }
  const Hiprtc* hiprtc() const { return hiprtc_; }
  const hal_device_properties_t& properties() const { return properties_; }
  // The gcnArchName ("gfx90a:sramecc+:xnack-"): what hiprtc compiles for.
  const std::string& arch() const { return arch_; }

  // Makes the device current on the calling thread. Returns the runtime's answer.
  HipStatus bind() const { return api().hipSetDevice(ordinal_); }
  // report().fail() with |result|'s mapping, its code and its name.
  hal_result_t fail(HipStatus result, const char* what) const;
  hal_result_t fail(hal_result_t mapped, HipStatus result, const char* what) const;
  // Runs |call(api())| with the device current; a failure carries the
  // hipError_t and |what|.
  template <class Call>
  hal_result_t run(const char* what, Call&& call) const {
    if (const HipStatus bound = bind(); bound != hipSuccess) return fail(bound, what);
    const HipStatus result = call(api());
    return result == hipSuccess ? HAL_SUCCESS : fail(result, what);
  }
  // run() for a synchronize or a query: NOT_READY is an answer (when
  // |query|), any other failure means the work on the device did not
  // complete (HAL_ERROR_DEVICE_LOST).
  template <class Call>
  hal_result_t wait(const char* what, bool query, Call&& call) const {
    if (const HipStatus bound = bind(); bound != hipSuccess) return fail(bound, what);
    const HipStatus result = call(api());
    if (result == hipSuccess) return HAL_SUCCESS;
    if (query && result == hipErrorNotReady) return HAL_NOT_READY;
    return fail(HAL_ERROR_DEVICE_LOST, result, what);
  }

  // synchronize (device.cpp), allocate and free (memory.cpp).
  HAL_PLUGIN_DEVICE_METHODS;

 private:
  void read_properties(const hipDeviceProp_t& hip);
  HipStatus release(hal_memory_kind_t kind, void* base) const;

  const Runtime& runtime_;
  const Hiprtc* hiprtc_;
  int ordinal_;
  uint32_t index_;
  std::string arch_;
  hal_device_properties_t properties_{};
  plugin::Allocations allocations_{kNativeAlignment};
};

class Plugin : public plugin::PluginBase {
 public:
  // Opens the runtime and finds the devices; logs a warning (the load
  // report's reason) and never fails when there are none.
  explicit Plugin(const hal_plugin_host_t* host);

  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }

 private:
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Hiprtc> hiprtc_;
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed before the runtime
};

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_DEVICE_HPP_
