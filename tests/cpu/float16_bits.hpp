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

// f16 through the compiler's _Float16 (software conversions at the default
// -march, rounding to nearest even): independent of the plugin's F16C loops.
inline uint16_t to_f16(float value) {
  const _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, sizeof bits);
  return bits;
}

inline float from_f16(uint16_t bits) {
  _Float16 half;
  std::memcpy(&half, &bits, sizeof half);
  return static_cast<float>(half);
}

}  // namespace hal::test

#endif  // HAL_TESTS_CPU_FLOAT16_BITS_HPP_
