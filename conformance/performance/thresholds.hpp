// The gross violations the performance profile fails on (SPEC.md,
// "Conformance"): never noise, only figures that make a declaration or an
// implementation plainly wrong.
#ifndef HAL_CONFORMANCE_PERFORMANCE_THRESHOLDS_HPP_
#define HAL_CONFORMANCE_PERFORMANCE_THRESHOLDS_HPP_

#include <hal.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "check.hpp"

namespace halconform {

// Achieved more than 10% above the declared peak: the declaration is wrong.
inline constexpr double kAboveDeclaredLimit = 1.10;
// Achieved below 1% of the declared peak: the device or plugin is broken.
inline constexpr double kBelowDeclaredLimit = 0.01;
// A launch round trip (enqueue + synchronize of an empty kernel) over 100 ms.
inline constexpr double kMaxLaunchRoundTripSeconds = 0.1;

// How much of its declared compute units the process got over a window: a
// device of type CPU runs its work on the process's threads, and on a loaded
// machine (a neighbour's CPU hog, a shared VM) those get fewer cores than
// compute_units. A floor scales by it, so load slows a figure and never fails
// it; a ceiling does not (load only lowers what is achieved). 1 for other
// devices, whose work does not run on this process's cores.
class CpuShare {
 public:
  CpuShare() : cpu_(process_cpu_seconds()), wall_(std::chrono::steady_clock::now()) {}
  double of(const hal_device_properties_t& p) const {
    if (p.type != HAL_DEVICE_TYPE_CPU) return 1.0;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_).count();
    const double cpu = process_cpu_seconds() - cpu_;
    const double units = std::max(1u, p.compute_units);
    return std::clamp(cpu / (std::max(wall, 1e-6) * units), 0.01, 1.0);
  }

 private:
  static double process_cpu_seconds() {
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
  }
  double cpu_;
  std::chrono::steady_clock::time_point wall_;
};

// Fails when |achieved| is above the declared figure by the limit, or (when
// |check_floor|) below the floor, scaled by |share| of the device's compute
// units the process ran on (CpuShare). Nothing is checked when nothing is declared.
inline void check_against_declared(const std::string& what, double achieved, double declared,
                                   bool check_floor, double share = 1.0) {
  if (!(declared > 0)) return;
  const double ratio = achieved / declared;
  if (ratio > kAboveDeclaredLimit) {
    fail(strf("%s: achieved %.4g is %.1f%% of the declared %.4g: the declaration is too low",
              what.c_str(), achieved, 100 * ratio, declared));
  }
  if (check_floor && ratio < kBelowDeclaredLimit * share) {
    fail(strf(
        "%s: achieved %.4g is %.3f%% of the declared %.4g (floor %.0f%%, scaled to the "
        "%.0f%% of its compute units the process ran on)",
        what.c_str(), achieved, 100 * ratio, declared, 100 * kBelowDeclaredLimit, 100 * share));
  }
}

}  // namespace halconform

#endif  // HAL_CONFORMANCE_PERFORMANCE_THRESHOLDS_HPP_
