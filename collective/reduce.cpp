#include "hal_collective/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

namespace hal::collective {

namespace {

// Signed integers reduce through their unsigned twin: a sum that overflows
// wraps instead of being undefined.
template <class T, bool = std::is_integral_v<T>>
struct ArithmeticOf {
  using type = T;
};
template <class T>
struct ArithmeticOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using Arithmetic = typename ArithmeticOf<T>::type;

template <class T, class Combine>
void combine_all(T* dst, const T* a, const T* b, size_t count, Combine combine) noexcept {
  for (size_t i = 0; i < count; ++i) dst[i] = combine(a[i], b[i]);
}

template <class T>
void reduce_typed(T* dst, const T* a, const T* b, size_t count, hal_reduce_op_t op) noexcept {
  using U = Arithmetic<T>;
  switch (op) {
    case HAL_REDUCE_SUM:
    case HAL_REDUCE_AVG:
      combine_all(dst, a, b, count, [](T x, T y) { return static_cast<T>(U(x) + U(y)); });
      break;
    case HAL_REDUCE_PROD:
      combine_all(dst, a, b, count, [](T x, T y) { return static_cast<T>(U(x) * U(y)); });
      break;
    case HAL_REDUCE_MIN:
      combine_all(dst, a, b, count, [](T x, T y) { return y < x ? y : x; });
      break;
    case HAL_REDUCE_MAX:
      combine_all(dst, a, b, count, [](T x, T y) { return x < y ? y : x; });
      break;
    default:
      break;
  }
}

// 16-bit floats: widen a block to float, reduce, narrow. The block stays in L1.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduce_16bit(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t count,
                  hal_reduce_op_t op) noexcept {
  constexpr size_t kBlock = 256;
  float wa[kBlock];
  float wb[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    for (size_t i = 0; i < n; ++i) {
      wa[i] = Widen(a[start + i]);
      wb[i] = Widen(b[start + i]);
    }
    reduce_typed(wa, wa, wb, n, op);
    for (size_t i = 0; i < n; ++i) dst[start + i] = Narrow(wa[i]);
  }
}

template <class T>
void divide_typed(T* dst, size_t count, uint32_t ranks) noexcept {
  for (size_t i = 0; i < count; ++i) dst[i] = static_cast<T>(dst[i] / static_cast<T>(ranks));
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide_16bit(uint16_t* dst, size_t count, uint32_t ranks) noexcept {
  for (size_t i = 0; i < count; ++i) dst[i] = Narrow(Widen(dst[i]) / static_cast<float>(ranks));
}

}  // namespace

float half_to_float(uint16_t bits) noexcept {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out = 0;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);  // inf or nan
  } else if (exponent != 0) {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa != 0) {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    out = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  } else {
    out = sign;
  }
  return std::bit_cast<float>(out);
}

uint16_t float_to_half(float value) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or nan (keep a quiet nan)
    return static_cast<uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (magnitude < 0x38800000u) {  // subnormal or zero: round through a float add
    const float rounded = std::bit_cast<float>(magnitude) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(rounded) - 0x3f000000u));
  }
  const uint32_t odd = (magnitude >> 13) & 1u;
  const uint32_t biased = magnitude + 0xc8000fffu + odd;  // rebias exponent, round to even
  return static_cast<uint16_t>(sign | (biased >> 13));
}

float bf16_to_float(uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_bf16(float value) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

void reduce_pair(void* dst, const void* a, const void* b, size_t count, hal_dtype_t dtype,
                 hal_reduce_op_t op) noexcept {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return reduce_typed(static_cast<float*>(dst), static_cast<const float*>(a),
                          static_cast<const float*>(b), count, op);
    case HAL_DTYPE_F64:
      return reduce_typed(static_cast<double*>(dst), static_cast<const double*>(a),
                          static_cast<const double*>(b), count, op);
    case HAL_DTYPE_I32:
      return reduce_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(a),
                          static_cast<const int32_t*>(b), count, op);
    case HAL_DTYPE_I64:
      return reduce_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(a),
                          static_cast<const int64_t*>(b), count, op);
    case HAL_DTYPE_I8:
      return reduce_typed(static_cast<int8_t*>(dst), static_cast<const int8_t*>(a),
                          static_cast<const int8_t*>(b), count, op);
    case HAL_DTYPE_U8:
      return reduce_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(a),
                          static_cast<const uint8_t*>(b), count, op);
    case HAL_DTYPE_F16:
      return reduce_16bit<half_to_float, float_to_half>(static_cast<uint16_t*>(dst),
                                                        static_cast<const uint16_t*>(a),
                                                        static_cast<const uint16_t*>(b), count, op);
    case HAL_DTYPE_BF16:
      return reduce_16bit<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst),
                                                        static_cast<const uint16_t*>(a),
                                                        static_cast<const uint16_t*>(b), count, op);
    default:
      return;
  }
}

void finish_average(void* dst, size_t count, hal_dtype_t dtype, uint32_t ranks) noexcept {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return divide_typed(static_cast<float*>(dst), count, ranks);
    case HAL_DTYPE_F64:
      return divide_typed(static_cast<double*>(dst), count, ranks);
    case HAL_DTYPE_I32:
      return divide_typed(static_cast<int32_t*>(dst), count, ranks);
    case HAL_DTYPE_I64:
      return divide_typed(static_cast<int64_t*>(dst), count, ranks);
    case HAL_DTYPE_I8:
      return divide_typed(static_cast<int8_t*>(dst), count, ranks);
    case HAL_DTYPE_U8:
      return divide_typed(static_cast<uint8_t*>(dst), count, ranks);
    case HAL_DTYPE_F16:
      return divide_16bit<half_to_float, float_to_half>(static_cast<uint16_t*>(dst), count, ranks);
    case HAL_DTYPE_BF16:
      return divide_16bit<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst), count, ranks);
    default:
      return;
  }
}

}  // namespace hal::collective
