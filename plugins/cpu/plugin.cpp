#include "plugin.hpp"

#include "hal_util/env.hpp"

#include <string>

namespace hal::cpu {

Plugin::Plugin(const hal_plugin_host_t* host, uint32_t device_count, uint64_t memory_per_device,
               const StreamLimits& stream_limits)
    : report_(host),
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
  report_.log(HAL_LOG_DEBUG,
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

void plugin_shutdown(hal_plugin_context_t* context) {
  // Nothing may escape a C entry; destruction only joins and unmaps.
  try {
    delete to_plugin(context);  // the one owner: entry.cpp released it to the loader
  } catch (...) {
  }
}

}  // namespace hal::cpu
