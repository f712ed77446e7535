#include "scalars.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>

namespace hal::ops::definitions {

namespace {

constexpr float kFloatMinNormal = std::numeric_limits<float>::min();
// The smallest double that rounds to infinity as a float: halfway between
// FLT_MAX (0x1.fffffep+127) and 2^128, a tie that rounds to the even 2^128.
constexpr double kFloatOverflow = 0x1.ffffffp+127;

// "desc->alpha is inf": the value with the fewest digits that read back as
// it (1e+300, not 1.0000000000000001e+300).
template <typename Real>
std::string field_is(const char* name, Real value) {
  char text[64];
  for (int digits = 1; digits <= std::numeric_limits<Real>::max_digits10; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(value));
    Real back;
    if constexpr (std::is_same_v<Real, float>) {
      back = std::strtof(text, nullptr);
    } else {
      back = std::strtod(text, nullptr);
    }
    if (back == value || std::isnan(value)) break;
  }
  return std::string(name) + " is " + text;
}

}  // namespace

std::string check_finite_scalar(const char* name, float value) {
  if (std::isfinite(value)) return {};
  return field_is(name, value) + "; it must be a finite number";
}

std::string check_non_negative_scalar(const char* name, float value) {
  if (std::isfinite(value) && value >= 0.0f) return {};
  return field_is(name, value) + "; it must be a finite number >= 0";
}

std::string check_unit_interval_scalar(const char* name, float value) {
  if (value >= 0.0f && value < 1.0f) return {};  // NaN fails both
  return field_is(name, value) + "; it must be in [0, 1)";
}

std::string check_positive_normal_scalar(const char* name, float value, const char* why) {
  if (std::isfinite(value) && value >= kFloatMinNormal) return {};
  return field_is(name, value) +
         "; it must be a finite number >= 1.17549435e-38 (FLT_MIN: > 0 and not subnormal): " + why;
}

std::string check_f32_run_time_scalar(const char* name, double value, Sign sign, const char* op) {
  const std::string is = field_is(name, value);
  const std::string computes = std::string(op) + " computes in f32";
  if (!std::isfinite(value)) return is + "; it must be a finite number";
  if (sign == Sign::kNonNegative && !(value >= 0.0)) return is + "; it must be >= 0";
  // Rounded to f32 as the op will: from halfway between FLT_MAX and 2^128
  // on, to inf (converting such a double to float is undefined in C++, so
  // the bound is checked first); a nonzero value below FLT_MIN, to 0 or a
  // subnormal.
  if (std::fabs(value) >= kFloatOverflow) {
    return is + ", which is " + (value > 0 ? "+inf" : "-inf") + " in f32 (" + computes +
           "); it must be finite in f32, at most 3.40282347e+38 in magnitude";
  }
  const float rounded = static_cast<float>(value);
  if (value != 0.0 && !(std::fabs(rounded) >= kFloatMinNormal)) {
    return is + ", which f32 cannot hold (" + computes +
           "): it must be 0 or at least 1.17549435e-38 (FLT_MIN) in magnitude";
  }
  return {};
}

}  // namespace hal::ops::definitions
