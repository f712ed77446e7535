#include "cpu_info.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
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

// The number a sysfs file holds, or 0 when it is missing or not a number.
double read_number(const std::string& path) {
  std::ifstream file(path);
  double value = 0;
  if (!(file >> value) || !(value > 0)) return 0;
  return value;
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
                       : __builtin_cpu_supports("avx2")  ? 8
                                                         : 4;
  info.has_fma = __builtin_cpu_supports("fma");
#else
  info.vector_floats = 4;  // 128-bit SIMD (NEON and the like)
  info.has_fma = true;
#endif
  // The stated clock, first found of: the kernel's cpufreq limits (the
  // highest clock the core runs at, then its base clock), the "@ x.xxGHz" of
  // the brand string, the "cpu MHz" of /proc/cpuinfo (the TSC clock in a VM).
  // A peak is an upper bound, so the highest stated clock comes first.
  const char* kCpufreq = "/sys/devices/system/cpu/cpu0/cpufreq/";
  for (const char* file : {"cpuinfo_max_freq", "base_frequency"}) {
    const double khz = read_number(std::string(kCpufreq) + file);
    if (khz > 0) {
      info.nominal_clock_hz = khz * 1e3;
      info.clock_source = std::string("cpufreq ") + file;
      break;
    }
  }
  if (info.nominal_clock_hz <= 0) {
    info.nominal_clock_hz = brand_string_clock_hz(info.model);
    if (info.nominal_clock_hz > 0) info.clock_source = "brand string";
  }
  if (info.nominal_clock_hz <= 0) {
    const std::string mhz = cpuinfo_field("cpu MHz");
    info.nominal_clock_hz = mhz.empty() ? 0.0 : std::strtod(mhz.c_str(), nullptr) * 1e6;
    if (info.nominal_clock_hz > 0) info.clock_source = "/proc/cpuinfo cpu MHz";
  }
  // Whole MHz: a stated clock has no finer meaning, and a "cpu MHz" that
  // wobbles in its last digits must not move the declared peaks.
  info.nominal_clock_hz = std::round(info.nominal_clock_hz / 1e6) * 1e6;
  if (info.nominal_clock_hz <= 0) {
    info.nominal_clock_hz = 0;
    info.clock_source = "none";
  }
  return info;
}

double CpuInfo::peak_fp32_flops(uint32_t cores) const {
  const double flops_per_lane_and_cycle = has_fma ? 4.0 : 2.0;
  return static_cast<double>(cores) * vector_floats * flops_per_lane_and_cycle * nominal_clock_hz;
}

double CpuInfo::peak_memory_bandwidth(uint32_t cores) const {
  return static_cast<double>(cores) * kLinesInFlight * kLineBytes / (kMemoryLatencyNs * 1e-9);
}

double brand_string_clock_hz(const std::string& brand) {
  // "Intel(R) Xeon(R) Gold 6140 CPU @ 2.30GHz": the number after the last '@'.
  const size_t at = brand.rfind('@');
  if (at == std::string::npos) return 0;
  const char* start = brand.c_str() + at + 1;
  char* end = nullptr;
  const double value = std::strtod(start, &end);
  if (end == start || !(value > 0) || value > 1e6) return 0;
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  if (unit.rfind("GHz", 0) == 0) return value * 1e9;
  if (unit.rfind("MHz", 0) == 0) return value * 1e6;
  return 0;
}

}  // namespace hal::cpu
