// The gross violations the performance profile fails on (SPEC.md,
// "Conformance"): never noise, only figures that make a declaration or an
// implementation plainly wrong.
#ifndef HAL_CONFORMANCE_PERFORMANCE_THRESHOLDS_HPP_
#define HAL_CONFORMANCE_PERFORMANCE_THRESHOLDS_HPP_

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

// Fails when |achieved| is above the declared figure by the limit, or (when
// |check_floor|) below the floor. Nothing is checked when nothing is declared.
inline void check_against_declared(const std::string& what, double achieved, double declared,
                                   bool check_floor) {
  if (!(declared > 0)) return;
  const double ratio = achieved / declared;
  if (ratio > kAboveDeclaredLimit) {
    fail(strf("%s: achieved %.4g is %.1f%% of the declared %.4g: the declaration is too low",
              what.c_str(), achieved, 100 * ratio, declared));
  }
  if (check_floor && ratio < kBelowDeclaredLimit) {
    fail(strf("%s: achieved %.4g is %.3f%% of the declared %.4g (floor %.0f%%)", what.c_str(),
              achieved, 100 * ratio, declared, 100 * kBelowDeclaredLimit));
  }
}

}  // namespace halconform

#endif  // HAL_CONFORMANCE_PERFORMANCE_THRESHOLDS_HPP_
