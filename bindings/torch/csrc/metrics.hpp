// What ran where: per aten op, calls served by a HAL plan ("native"), calls
// that ran on the CPU through the fallback, the bytes the fallback copied
// each way and the time it took (hal_torch.metrics(), as torch_xla's metrics
// report). Counters are atomics; a call site keeps its counter's reference.
#ifndef HAL_TORCH_METRICS_HPP_
#define HAL_TORCH_METRICS_HPP_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace hal_torch {

struct OpCounter {
  std::atomic<int64_t> native{0};
  std::atomic<int64_t> fallback{0};
  std::atomic<int64_t> bytes_to_host{0};    // copied device -> host by the fallback
  std::atomic<int64_t> bytes_to_device{0};  // copied host -> device by the fallback
  std::atomic<int64_t> bytes_aliased{0};    // device memory the CPU read in place (no copy)
  std::atomic<int64_t> fallback_ns{0};      // wall time inside the fallback
};

// The counter of |op| ("aten::mm", "aten::add.Tensor"); made on first use,
// never moves.
OpCounter& op_counter(std::string_view op);

struct OpCounts {
  int64_t native, fallback, bytes_to_host, bytes_to_device, bytes_aliased, fallback_ns;
};
std::map<std::string, OpCounts> snapshot_counters();
void reset_counters();

// Plans made (cache misses) and served from the cache, over all devices.
inline std::atomic<int64_t> g_plans_created{0};
inline std::atomic<int64_t> g_plan_cache_hits{0};

}  // namespace hal_torch

#endif  // HAL_TORCH_METRICS_HPP_
