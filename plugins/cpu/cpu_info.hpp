// What the cpu plugin knows about the host: model, ISA, threads, memory and
// clock. Read once when the plugin starts; the clock is measured lazily.
#ifndef HAL_PLUGINS_CPU_CPU_INFO_HPP_
#define HAL_PLUGINS_CPU_CPU_INFO_HPP_

#include <cstdint>
#include <mutex>
#include <string>

namespace hal::cpu {

struct CpuInfo {
  std::string model;            // /proc/cpuinfo "model name"
  std::string vendor;           // /proc/cpuinfo "vendor_id"
  uint32_t hardware_threads;    // threads this process may run on
  uint64_t physical_memory;     // bytes of RAM
  uint32_t vector_floats;       // fp32 lanes of the widest vector unit: 16, 8 or 4
  uint32_t fma_flops_per_lane;  // 2 with FMA (multiply + add), 1 without
  double nominal_clock_hz;      // /proc/cpuinfo "cpu MHz" (the TSC clock in a VM), 0 if unknown

  static CpuInfo detect();
};

// The effective core clock, measured once (about 2 ms) on first use with a
// chain of dependent integer adds, which retire one per cycle on every x86
// core since the Pentium Pro. It sees the boost clock that the nominal
// "cpu MHz" of a VM does not (3.4 GHz measured vs 2.1 GHz nominal here).
double measured_clock_hz();

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_CPU_INFO_HPP_
