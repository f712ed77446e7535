#include "cpu_info.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

namespace hal::cpu {
namespace {

// The value of the first "key : value" line of /proc/cpuinfo, or "".
std::string cpuinfo_field(const std::string& key) {
  std::ifstream file("/proc/cpuinfo");
  std::string line;
  while (std::getline(file, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return {};
}

uint32_t allowed_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return static_cast<uint32_t>(std::max(1, CPU_COUNT(&set)));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

CpuInfo CpuInfo::detect() {
  CpuInfo info;
  info.model = cpuinfo_field("model name");
  if (info.model.empty()) info.model = "unknown CPU";
  info.vendor = cpuinfo_field("vendor_id");
  if (info.vendor.empty()) info.vendor = "unknown";
  info.hardware_threads = allowed_threads();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  info.physical_memory = pages > 0 && page_size > 0
                             ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
                             : 0;
#if defined(__x86_64__)
  __builtin_cpu_init();
  info.vector_floats = __builtin_cpu_supports("avx512f") ? 16
                       : __builtin_cpu_supports("avx")   ? 8
                                                         : 4;
  info.fma_flops_per_lane = __builtin_cpu_supports("fma") ? 2 : 1;
#else
  info.vector_floats = 4;
  info.fma_flops_per_lane = 2;
#endif
  const std::string mhz = cpuinfo_field("cpu MHz");
  info.nominal_clock_hz = mhz.empty() ? 0.0 : std::strtod(mhz.c_str(), nullptr) * 1e6;
  return info;
}

double measured_clock_hz() {
  static std::once_flag once;
  static double hz = 0.0;
  std::call_once(once, [] {
#if defined(__x86_64__)
    constexpr uint64_t kIterations = 1u << 20;  // 8 adds each: ~8M cycles, ~2.5 ms
    double best = 0.0;
    for (int trial = 0; trial < 3; ++trial) {
      uint64_t value = 0;
      const auto start = std::chrono::steady_clock::now();
      for (uint64_t i = 0; i < kIterations; ++i) {
        asm volatile(
            "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
            "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
            : "+r"(value));
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // The loop counter's add and branch run in parallel with the chain.
      if (seconds > 0) best = std::max(best, static_cast<double>(kIterations * 8) / seconds);
    }
    hz = best;
#endif
  });
  return hz;
}

}  // namespace hal::cpu
