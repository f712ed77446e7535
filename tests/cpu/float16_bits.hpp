// The bits of bf16 and f16 values, for tests that build and read 16-bit
// tensors: computed here independently of the plugin's conversions.
#ifndef HAL_TESTS_CPU_FLOAT16_BITS_HPP_
#define HAL_TESTS_CPU_FLOAT16_BITS_HPP_

#include <cstdint>
#include <cstring>

namespace hal::test {

// bf16 from f32, rounding to nearest even (the inputs are finite).
inline uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float from_bf16(uint16_t value) {
  const uint32_t bits = uint32_t{value} << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// f16 by bit arithmetic, rounding to nearest even (NaNs stay NaN with their payload's top bits
// and the quiet bit, as F16C's conversion does): independent of the plugin's F16C loops, and of
// the compiler (clang 14 has no _Float16 on x86).
inline uint16_t to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  float absolute;
  std::memcpy(&absolute, &magnitude, sizeof absolute);
  if (absolute >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (absolute < 0x1p-14f) {
    // Subnormal (or zero): the value in units of 2^-24, rounded to nearest even; 1024 units is
    // the smallest normal's encoding.
    const float units = absolute * 0x1p24f;
    uint32_t whole = static_cast<uint32_t>(units);
    const float rest = units - static_cast<float>(whole);
    if (rest > 0.5f || (rest == 0.5f && (whole & 1u) != 0)) ++whole;
    return static_cast<uint16_t>(sign | whole);
  }
  // Normal: rebias the exponent, keep 10 mantissa bits, round the 13 dropped ones to nearest
  // even (a carry into the exponent is the right encoding).
  uint32_t half = (magnitude >> 13) - ((127u - 15u) << 10);
  const uint32_t dropped = magnitude & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u) != 0)) ++half;
  return static_cast<uint16_t>(sign | half);
}

inline float from_f16(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    float value = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&out, &value, sizeof out);
    out |= sign;
  } else if (exponent == 31) {
    // Infinity, or a NaN made quiet (as F16C's conversion does).
    out = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0u);
  } else {
    out = sign | ((exponent + 127u - 15u) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof value);
  return value;
}

}  // namespace hal::test

#endif  // HAL_TESTS_CPU_FLOAT16_BITS_HPP_
