// Scalar helpers the cpu plugin's native loops share (native_kernels*.cpp,
// native_attention.cpp): bf16 conversions and an exp without a libm call,
// inline so each ISA clone of a loop compiles them for its own ISA.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_MATH_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_MATH_HPP_

#include <bit>
#include <cstdint>

#include "hal_util/isa_clones.hpp"

namespace hal::cpu::ops::native {

inline float from_bf16(uint16_t bits) {
  return std::bit_cast<float>(uint32_t{bits} << 16);
}

inline uint16_t to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// e^x for x in float's range, without a libm call: x = n ln2 + r, |r| <= ln2/2,
// e^r by the Cephes expf polynomial, 2^n through the exponent bits. Inputs
// are clamped to [-87, 88] (results 1.6e-38 .. 1.65e38): the activations only
// divide by the result, and softmax-like callers skip masked entries rather
// than rely on exp(-inf) = 0, so the clamp does not show in their results.
inline float exp_clamped(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  n = n == n ? n : 0.0f;                                             // NaN: any n; x stays NaN
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t exponent = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(exponent);
}

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_MATH_HPP_
