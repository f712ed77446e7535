#include "scalars.hpp"

#include "hal_util/names.hpp"

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

// From this magnitude on a double rounds to infinity in the float |dtype|:
// halfway between its largest finite value and the next power of two, a tie
// that rounds to the even infinity.
double float_overflow(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F16:
      return 65520.0;  // 65504 + 16
    case HAL_DTYPE_BF16:
      return 0x1.ffp+127;  // (2 - 2^-7) 2^127 + 2^119
    default:
      return kFloatOverflow;
  }
}

double float_max(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F16:
      return 65504.0;
    case HAL_DTYPE_BF16:
      return 0x1.fep+127;  // (2 - 2^-7) 2^127, bf16's largest finite value
    default:
      return std::numeric_limits<float>::max();
  }
}

bool is_float_target(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_F16 || dtype == HAL_DTYPE_BF16;
}

// True when the finite f64 |value| stays finite in the float |target|.
bool fits_float(double value, hal_dtype_t target) {
  return std::fabs(value) < float_overflow(target);
}

// Why |what| (an f64 value that does not fit_float) cannot be a |target| value.
std::string overflows_float(const std::string& what, hal_dtype_t target) {
  char max[32];
  std::snprintf(max, sizeof max, "%.9g", float_max(target));
  return what + ", which overflows " + hal::util::dtype_name(target) +
         " (it would become inf): a finite value must be at most " + max + " in magnitude";
}

}  // namespace

std::string check_value_scalar(const char* name, const hal_op_scalar_t& scalar, ScalarType type,
                               hal_dtype_t target) {
  if (type != ScalarType::kF64 || !is_float_target(target)) return {};
  const double value = scalar.f64;
  // Checked at every execution: the message is made only for a value refused.
  if (!std::isfinite(value) || fits_float(value, target)) return {};  // NaN and +-inf are values
  return overflows_float(field_is(name, value), target);
}

std::string check_fill_scalars(const hal_op_scalar_t* scalars, ScalarType type, hal_dtype_t target,
                               int64_t count) {
  std::string problem = check_value_scalar("scalar 0 (start)", scalars[0], type, target);
  if (!problem.empty() || count <= 1 || type != ScalarType::kF64) return problem;
  const double start = scalars[0].f64, step = scalars[1].f64;
  if (step == 0.0) return {};
  if (!std::isfinite(step)) {
    return field_is("scalar 1 (step)", step) + "; a step other than 0 must be finite";
  }
  if (!std::isfinite(start)) return {};  // every element is that value
  // The last element, as the op computes it (one fma in f64).
  const double value = std::fma(static_cast<double>(count - 1), step, start);
  if (std::isfinite(value) && (!is_float_target(target) || fits_float(value, target))) return {};
  const std::string last = "the last element, start + " + std::to_string(count - 1) + " * step,";
  if (!std::isfinite(value)) return last + " overflows f64";
  char text[40];
  std::snprintf(text, sizeof text, " is %.17g", value);
  return overflows_float(last + text, target);
}

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
  // Checked at every execution (AdamW's learning rate...): the message is made only for a value
  // refused (field_is alone costs up to 17 snprintf/strtod round trips).
  const auto is = [&] { return field_is(name, value); };
  const auto computes = [&] { return std::string(op) + " computes in f32"; };
  if (!std::isfinite(value)) return is() + "; it must be a finite number";
  if (sign == Sign::kNonNegative && !(value >= 0.0)) return is() + "; it must be >= 0";
  // Rounded to f32 as the op will: from halfway between FLT_MAX and 2^128
  // on, to inf (converting such a double to float is undefined in C++, so
  // the bound is checked first); a nonzero value below FLT_MIN, to 0 or a
  // subnormal.
  if (std::fabs(value) >= kFloatOverflow) {
    return is() + ", which is " + (value > 0 ? "+inf" : "-inf") + " in f32 (" + computes() +
           "); it must be finite in f32, at most 3.40282347e+38 in magnitude";
  }
  const float rounded = static_cast<float>(value);
  if (value != 0.0 && !(std::fabs(rounded) >= kFloatMinNormal)) {
    return is() + ", which f32 cannot hold (" + computes() +
           "): it must be 0 or at least 1.17549435e-38 (FLT_MIN) in magnitude";
  }
  return {};
}

}  // namespace hal::ops::definitions
