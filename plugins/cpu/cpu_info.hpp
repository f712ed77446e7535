// What the cpu plugin knows about the host: model, ISA, threads, memory and
// clock, read once when the plugin starts from what the hardware states
// (CPUID, sysfs, /proc/cpuinfo), never timed, so the declared figures are the
// same on every run on the same machine (SPEC.md, "The cpu plugin").
#ifndef HAL_PLUGINS_CPU_CPU_INFO_HPP_
#define HAL_PLUGINS_CPU_CPU_INFO_HPP_

#include <cstdint>
#include <string>

namespace hal::cpu {

struct CpuInfo {
  std::string model;              // /proc/cpuinfo "model name" (the CPUID brand string)
  std::string vendor;             // /proc/cpuinfo "vendor_id"
  uint32_t hardware_threads = 1;  // threads this process may run on
  uint64_t physical_memory = 0;   // bytes of RAM
  uint32_t vector_floats = 4;     // fp32 lanes of the widest vector unit (CPUID): 16, 8 or 4
  bool has_fma = false;           // fused multiply-add (CPUID FMA3)
  double nominal_clock_hz = 0;    // the stated clock, whole MHz; 0 if nothing states one
  std::string clock_source;       // where nominal_clock_hz came from, for the log

  static CpuInfo detect();

  // The declared peaks of a device running on |cores| hardware threads.
  // FP32: cores x lanes x FLOPs per lane and cycle x clock, where a core with
  // FMA is assumed to have 2 FMA units (every x86 core with AVX2 or AVX-512
  // FMA since Haswell and Zen 2) doing 2 FLOPs (multiply + add) per lane, 4
  // per lane and cycle; without FMA, one add and one multiply unit, 2.
  double peak_fp32_flops(uint32_t cores) const;
  // Bytes/s. Nothing a process can read states the memory system's
  // bandwidth, so this is a documented upper bound by Little's law: a core
  // has at most kLinesInFlight cache lines of 64 bytes outstanding, each
  // taking at least kMemoryLatencyNs, i.e. 25.6 GB/s per core (x86 cores have
  // 10 to 32 miss buffers, DRAM latency is 80 to 120 ns). Every copy from and
  // to memory stays below it; it is not a DRAM figure, and is deterministic.
  static constexpr double kLinesInFlight = 32;
  static constexpr double kLineBytes = 64;
  static constexpr double kMemoryLatencyNs = 80;
  double peak_memory_bandwidth(uint32_t cores) const;
};

// The clock a "@ 2.60GHz" in a CPUID brand string states, in Hz; 0 if none.
double brand_string_clock_hz(const std::string& brand);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_CPU_INFO_HPP_
