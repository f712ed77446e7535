#include "metrics.hpp"

#include <deque>
#include <mutex>
#include <unordered_map>

namespace hal_torch {
namespace {

struct Registry {
  std::mutex mutex;
  std::deque<OpCounter> counters;  // a deque never moves its elements
  std::unordered_map<std::string, OpCounter*> by_name;
};

Registry& registry() {
  static auto* const instance = new Registry;  // used by kernels until the process ends
  return *instance;
}

}  // namespace

OpCounter& op_counter(std::string_view op) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.by_name.find(std::string(op));
  if (found != r.by_name.end()) return *found->second;
  OpCounter& counter = r.counters.emplace_back();
  r.by_name.emplace(std::string(op), &counter);
  return counter;
}

std::map<std::string, OpCounts> snapshot_counters() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::map<std::string, OpCounts> out;
  for (const auto& [name, c] : r.by_name) {
    OpCounts counts{c->native.load(),          c->fallback.load(),      c->bytes_to_host.load(),
                    c->bytes_to_device.load(), c->bytes_aliased.load(), c->fallback_ns.load()};
    if (counts.native == 0 && counts.fallback == 0) continue;
    out.emplace(name, counts);
  }
  return out;
}

void reset_counters() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (OpCounter& c : r.counters) {
    c.native = 0;
    c.fallback = 0;
    c.bytes_to_host = 0;
    c.bytes_to_device = 0;
    c.bytes_aliased = 0;
    c.fallback_ns = 0;
  }
  g_plans_created = 0;
  g_plan_cache_hits = 0;
}

}  // namespace hal_torch
