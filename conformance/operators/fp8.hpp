// The OCP 8-bit floats on the host, written from SPEC.md §17.6.3 and
// §17.6.12 independently of any implementation: every code decoded from its
// fields in float64, and encoding as the nearest finite code (ties to the
// even code) with each format's overflow rule; and quantize's grids (i8 and
// the two fp8s). The one host reference of the operators profile
// (operators/lowp.cpp, op_harness.cpp) and of tests/ops/lowp_ops_test.cpp.
#ifndef HAL_CONFORMANCE_OPERATORS_FP8_HPP_
#define HAL_CONFORMANCE_OPERATORS_FP8_HPP_

#include <hal/dtype.h>

#include <algorithm>
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

// The ends of quantize's grid for |q| (i8 or an fp8).
inline double quant_max(hal_dtype_t q) {
  return q == HAL_DTYPE_I8 ? 127.0 : fp8_max(q);
}
inline double quant_min(hal_dtype_t q) {
  return q == HAL_DTYPE_I8 ? -128.0 : -fp8_max(q);
}

// |v| rounded half to even onto |q|'s grid, saturating (quantize's rule; NaN
// is 0 for i8).
inline double grid_value(double v, hal_dtype_t q) {
  if (q != HAL_DTYPE_I8) return fp8_decode(fp8_encode(v, q, true), q);
  if (std::isnan(v)) return 0.0;
  const double c = std::min(127.0, std::max(-128.0, v));
  return std::nearbyint(c);  // the default rounding mode: ties to even
}

// The byte quantize stores for |v|: an i8 in two's complement, or an fp8 code.
inline uint8_t quant_code(double v, hal_dtype_t q) {
  if (q == HAL_DTYPE_I8) return static_cast<uint8_t>(static_cast<int8_t>(grid_value(v, q)));
  return fp8_encode(v, q, true);
}

// The value of a quantized byte of |q|.
inline double quant_decode(uint8_t code, hal_dtype_t q) {
  if (q == HAL_DTYPE_I8) return static_cast<int8_t>(code);
  return fp8_decode(code, q);
}

}  // namespace halconform::ops

#endif  // HAL_CONFORMANCE_OPERATORS_FP8_HPP_
