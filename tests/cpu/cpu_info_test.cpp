// The cpu plugin's declared figures: derived from what the hardware states
// (SPEC.md, "The cpu plugin's devices"), so the same on every detection.
#include <catch2/catch.hpp>

#include "cpu_info.hpp"

using hal::cpu::brand_string_clock_hz;
using hal::cpu::CpuInfo;

TEST_CASE("the clock of a CPUID brand string is the number after its '@'") {
  CHECK(brand_string_clock_hz("Intel(R) Xeon(R) Gold 6140 CPU @ 2.30GHz") == Approx(2.30e9));
  CHECK(brand_string_clock_hz("Intel(R) Core(TM) i7-4770 CPU @3.40GHz") == Approx(3.40e9));
  CHECK(brand_string_clock_hz("Some CPU @ 800 MHz") == Approx(800e6));
  // No clock stated, or not a clock: nothing is guessed.
  CHECK(brand_string_clock_hz("AMD EPYC 7763 64-Core Processor") == 0);
  CHECK(brand_string_clock_hz("AMD EPYC") == 0);
  CHECK(brand_string_clock_hz("") == 0);
  CHECK(brand_string_clock_hz("CPU @ fast") == 0);
  CHECK(brand_string_clock_hz("CPU @ 2.5") == 0);
  CHECK(brand_string_clock_hz("CPU @ -2.5GHz") == 0);
  CHECK(brand_string_clock_hz("CPU @ 1e300GHz") == 0);
}

TEST_CASE("declared FP32 peak: cores x lanes x 4 with FMA (2 units x multiply-add), x 2 without") {
  CpuInfo info;
  info.nominal_clock_hz = 2.5e9;
  info.vector_floats = 16;
  info.has_fma = true;
  CHECK(info.peak_fp32_flops(8) == Approx(8 * 16 * 4 * 2.5e9));
  info.vector_floats = 8;
  CHECK(info.peak_fp32_flops(1) == Approx(8 * 4 * 2.5e9));
  info.has_fma = false;
  info.vector_floats = 4;
  CHECK(info.peak_fp32_flops(2) == Approx(2 * 4 * 2 * 2.5e9));
  info.nominal_clock_hz = 0;  // nothing states a clock: nothing declared
  CHECK(info.peak_fp32_flops(2) == 0);
}

TEST_CASE("declared memory bandwidth: 32 lines of 64 bytes per 80 ns, per core") {
  CpuInfo info;
  CHECK(info.peak_memory_bandwidth(1) == Approx(25.6e9));
  CHECK(info.peak_memory_bandwidth(4) == Approx(4 * 25.6e9));
}

TEST_CASE("detection is deterministic and states what it found") {
  const CpuInfo first = CpuInfo::detect();
  const CpuInfo second = CpuInfo::detect();
  CHECK(first.model == second.model);
  CHECK(first.hardware_threads == second.hardware_threads);
  CHECK(first.vector_floats == second.vector_floats);
  CHECK(first.has_fma == second.has_fma);
  CHECK(first.nominal_clock_hz == second.nominal_clock_hz);
  CHECK(first.peak_fp32_flops(first.hardware_threads) ==
        second.peak_fp32_flops(second.hardware_threads));
  CHECK((first.vector_floats == 4 || first.vector_floats == 8 || first.vector_floats == 16));
  CHECK(first.hardware_threads >= 1);
  // A stated clock is whole MHz, or 0 when nothing states one.
  CHECK(first.nominal_clock_hz / 1e6 ==
        Approx(static_cast<double>(static_cast<uint64_t>(first.nominal_clock_hz / 1e6))));
  CHECK_FALSE(first.clock_source.empty());
}
