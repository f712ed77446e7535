#include "hal_collective/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "hal_util/isa_clones.hpp"

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

#if defined(__x86_64__)
// f16 on CPUs with F16C (every AVX2 CPU): the conversions in hardware,
// vcvtph2ps and vcvtps2ph with round to nearest even, 8 at a time. Results
// equal the scalar path's except for a NaN's payload bits (both give a
// quiet NaN of the same sign).
__attribute__((target("avx2,f16c"))) void reduce_f16_f16c(uint16_t* dst, const uint16_t* a,
                                                          const uint16_t* b, size_t count,
                                                          hal_reduce_op_t op) noexcept {
  constexpr size_t kBlock = 256;
  alignas(32) float wa[kBlock];
  alignas(32) float wb[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i ha = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + start + i));
      const __m128i hb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + start + i));
      _mm256_store_ps(wa + i, _mm256_cvtph_ps(ha));
      _mm256_store_ps(wb + i, _mm256_cvtph_ps(hb));
    }
    for (; i < n; ++i) {
      wa[i] = half_to_float(a[start + i]);
      wb[i] = half_to_float(b[start + i]);
    }
    reduce_typed(wa, wa, wb, n, op);
    i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_load_ps(wa + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + start + i), h);
    }
    for (; i < n; ++i) dst[start + i] = float_to_half(wa[i]);
  }
}

bool has_f16c() noexcept {
  // avx2 through the builtin (it also checks that the OS saves the AVX
  // registers); F16C from CPUID leaf 1, ECX bit 29 (Clang's builtin does not
  // know the name).
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & (1u << 29)) != 0;
  }();
  return has;
}
#endif

template <class T>
void divide_typed(T* dst, size_t count, uint32_t ranks) noexcept {
  for (size_t i = 0; i < count; ++i) dst[i] = static_cast<T>(dst[i] / static_cast<T>(ranks));
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide_16bit(uint16_t* dst, size_t count, uint32_t ranks) noexcept {
  for (size_t i = 0; i < count; ++i) dst[i] = Narrow(Widen(dst[i]) / static_cast<float>(ranks));
}

}  // namespace

// The conversions are branch-free (every path computed, one selected), so
// the loops that call them vectorise; they round to nearest even like the
// scalar definitions in SPEC §13 (F. Giesen's float/half method).
float half_to_float(uint16_t bits) noexcept {
  const uint32_t exponent_mantissa = static_cast<uint32_t>(bits & 0x7fffu) << 13;
  const uint32_t exponent = exponent_mantissa & 0x0f800000u;
  const uint32_t normal = exponent_mantissa + ((127u - 15u) << 23);
  // Inf and NaN: the exponent all ones (the mantissa, quiet bit included, kept).
  const uint32_t special = normal + ((128u - 16u) << 23);
  // Zero and subnormals: exact through a float subtraction of 2^-14.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(normal + (1u << 23)) -
                                                     std::bit_cast<float>(113u << 23));
  const uint32_t magnitude =
      exponent == 0x0f800000u ? special : (exponent == 0 ? subnormal : normal);
  return std::bit_cast<float>(magnitude | (static_cast<uint32_t>(bits & 0x8000u) << 16));
}

uint16_t float_to_half(float value) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // NaN stays a quiet NaN; inf and what rounds past 65504 become inf.
  const uint32_t special = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // Below 2^-14: the float add of 0.5 rounds the subnormal to nearest even.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + 0.5f) - 0x3f000000u;
  // Normal: rebias the exponent and round to nearest even on bit 13.
  const uint32_t odd = (magnitude >> 13) & 1u;
  const uint32_t normal = (magnitude + 0xc8000fffu + odd) >> 13;
  const uint32_t half =
      magnitude >= 0x477ff000u ? special : (magnitude < 0x38800000u ? subnormal : normal);
  return static_cast<uint16_t>(sign | half);
}

float bf16_to_float(uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_bf16(float value) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Cloned per ISA: the loops above, inlined, vectorise for AVX-512 or AVX2
// where the CPU has them.
HAL_ISA_CLONES void reduce_pair(void* dst, const void* a, const void* b, size_t count,
                                hal_dtype_t dtype, hal_reduce_op_t op) noexcept {
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
#if defined(__x86_64__)
      if (has_f16c()) {
        return reduce_f16_f16c(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                               static_cast<const uint16_t*>(b), count, op);
      }
#endif
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

HAL_ISA_CLONES void finish_average(void* dst, size_t count, hal_dtype_t dtype,
                                   uint32_t ranks) noexcept {
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
