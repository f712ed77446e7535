// The OCP 8-bit floats on the host, written from SPEC.md §17.6.3 and
// §17.6.12 independently of any implementation: every code decoded from its
// fields in float64, and encoding as the nearest finite code (ties to the
// even code) with each format's overflow rule.
#ifndef HAL_CONFORMANCE_OPERATORS_FP8_HPP_
#define HAL_CONFORMANCE_OPERATORS_FP8_HPP_

#include <hal/dtype.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace halconform::ops {

inline bool is_fp8(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F8_E4M3 || dtype == HAL_DTYPE_F8_E5M2;
}

inline double fp8_max(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F8_E4M3 ? 448.0 : 57344.0;
}

inline double fp8_decode(uint8_t code, hal_dtype_t dtype) {
  const bool e4m3 = dtype == HAL_DTYPE_F8_E4M3;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const double sign = (code & 0x80) != 0 ? -1.0 : 1.0;
  const int e = (code & 0x7f) >> mbits;
  const int man = code & ((1 << mbits) - 1);
  if (e4m3 && e == 15 && man == 7) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3 && e == 31) {
    return man == 0 ? sign * std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(man, 1 - bias - mbits);
  return sign * std::ldexp(1.0 + man / static_cast<double>(1 << mbits), e - bias);
}

// |saturate|: quantize's rule (every overflow, infinities included, to
// +-max). Otherwise HAL_OP_CAST's: E5M2 overflows to +-inf at max + half an
// ulp, E4M3 saturates finite values and makes an infinity NaN.
inline uint8_t fp8_encode(double x, hal_dtype_t dtype, bool saturate) {
  const bool e4m3 = dtype == HAL_DTYPE_F8_E4M3;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | 0x7f;
  const double a = std::fabs(x);
  const uint8_t max_code = e4m3 ? 0x7e : 0x7b;
  if (std::isinf(a)) return sign | (saturate ? max_code : (e4m3 ? 0x7f : 0x7c));
  if (!saturate && !e4m3 && a >= 61440.0) return sign | 0x7c;
  if (a >= fp8_max(dtype)) return sign | max_code;
  uint8_t best = 0;
  double best_error = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= max_code; ++c) {
    const double error = std::fabs(fp8_decode(static_cast<uint8_t>(c), dtype) - a);
    if (error < best_error || (error == best_error && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_error = error;
    }
  }
  return sign | best;
}

}  // namespace halconform::ops

#endif  // HAL_CONFORMANCE_OPERATORS_FP8_HPP_
