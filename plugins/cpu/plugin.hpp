// The cpu plugin's context: what the loader gets back from hal_plugin_entry
// and passes to plugin_shutdown. It owns the devices, the thread pool they
// share, and the host services.
#ifndef HAL_PLUGINS_CPU_PLUGIN_HPP_
#define HAL_PLUGINS_CPU_PLUGIN_HPP_

#include <memory>
#include <vector>

#include "bounds.hpp"
#include "hal_plugin_sdk/report.hpp"
#include "cpu_info.hpp"
#include "device.hpp"
#include "event.hpp"
#include "launch.hpp"
#include "stream.hpp"
#include "thread_pool.hpp"

namespace hal::cpu {

inline constexpr char kPluginName[] = "cpu";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";
// The most virtual devices HAL_CPU_DEVICES may ask for.
inline constexpr uint32_t kMaxDevices = 64;

class Plugin {
 public:
  // Each device gets |memory_per_device| bytes, or when 0 an even share of
  // half the physical memory.
  Plugin(const hal_plugin_host_t* host, uint32_t device_count, uint64_t memory_per_device,
         const StreamLimits& stream_limits = {});
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const plugin::ErrorReporter& report() const { return report_; }
  const CpuInfo& cpu() const { return cpu_; }
  ThreadPool& pool() { return *pool_; }
  std::vector<WorkerScratch>& pool_scratch() { return pool_scratch_; }
  CompletionSignal& completion_signal() { return signal_; }
  StreamExecutors& executors() { return *executors_; }
  const StreamLimits& stream_limits() const { return stream_limits_; }
  uint32_t device_count() const { return static_cast<uint32_t>(devices_.size()); }
  Device& device(uint32_t index) { return *devices_[index]; }
  // Bounds-checked dialect kernels (bounds.hpp), decided once at plugin start.
  bool bounds_checks() const { return bounds_checks_; }
  AllocationExtents& allocation_extents() { return extents_; }

 private:
  plugin::ErrorReporter report_;
  CpuInfo cpu_;
  CompletionSignal signal_;
  std::vector<WorkerScratch> pool_scratch_;  // indexed by pool worker (0 unused)
  std::unique_ptr<ThreadPool> pool_;
  StreamLimits stream_limits_;
  std::unique_ptr<StreamExecutors> executors_;
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed first: streams use the pool
  bool bounds_checks_;
  AllocationExtents extents_;  // filled while bounds_checks_
};

inline Plugin* to_plugin(hal_plugin_context_t* context) {
  return reinterpret_cast<Plugin*>(context);
}

// Reads HAL_CPU_DEVICES (default 2). False, with |out_error|, when the value
// is not a decimal number in [0, kMaxDevices].
bool parse_device_count(const char* text, uint32_t* out_count, std::string& out_error);

// Reads HAL_CPU_DEVICE_MEMORY, the budget of each device in bytes (unset:
// 0, the default share). False, with |out_error|, when it is not a whole
// number of at least 1 MiB.
bool parse_device_memory(const char* text, uint64_t* out_bytes, std::string& out_error);

void plugin_shutdown(hal_plugin_context_t* context);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_PLUGIN_HPP_
