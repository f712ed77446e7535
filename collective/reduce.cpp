#include "hal_collective/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hal_util/isa_clones.hpp"
#include "hal_util/x86_intrinsics.hpp"

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

// The vector widths of the 16-bit loops, narrowest first.
enum class Lanes { kNone, kAvx2, kAvx512 };

#if defined(__x86_64__)
// The 16-bit floats in one pass per vector: widen a and b, combine, narrow,
// store; no staging through L1 arrays. f16 converts in hardware (F16C's
// vcvtph2ps / vcvtps2ph, round to nearest even); bf16 widens by a shift and
// narrows with the integer rounding of float_to_bf16 (ties to even, a NaN
// kept quiet with its sign and upper payload), so results equal the scalar
// path's bit for bit, except a NaN's payload for f16 (both are quiet NaNs of
// the same sign) and the NaN of two NaN operands (the compiler may swap an
// add's or multiply's operands, and x86 returns the first). Min and max keep the scalar rule: the
// first operand unless the second compares less (greater), so a NaN operand picks alike.

// 8 lanes: AVX2 with F16C (every AVX2 CPU has it).
template <bool kBf16>
__attribute__((target("avx2,f16c"))) inline __m256 widen8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (!kBf16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <bool kBf16>
__attribute__((target("avx2,f16c"))) inline void narrow8(uint16_t* p, __m256 v) {
  if constexpr (!kBf16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  } else {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                              _mm256_set1_epi32(0x7f800000));
    const __m256i chosen = _mm256_blendv_epi8(rounded, quiet, is_nan);
    // Pack the 8 low halves (per 128-bit lane), then gather both lanes' 4.
    const __m256i packed =
        _mm256_permute4x64_epi64(_mm256_packus_epi32(chosen, chosen), 0b00001000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
}

template <hal_reduce_op_t kOp>
__attribute__((target("avx2,f16c"))) inline __m256 combine8(__m256 x, __m256 y) {
  if constexpr (kOp == HAL_REDUCE_PROD) return _mm256_mul_ps(x, y);
  if constexpr (kOp == HAL_REDUCE_MIN) return _mm256_min_ps(y, x);  // y < x ? y : x
  if constexpr (kOp == HAL_REDUCE_MAX) return _mm256_max_ps(y, x);  // y > x ? y : x
  return _mm256_add_ps(x, y);
}

template <hal_reduce_op_t kOp, bool kBf16>
__attribute__((target("avx2,f16c"))) size_t reduce_16bit_avx2(uint16_t* dst, const uint16_t* a,
                                                              const uint16_t* b,
                                                              size_t count) noexcept {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    narrow8<kBf16>(dst + i, combine8<kOp>(widen8<kBf16>(a + i), widen8<kBf16>(b + i)));
  }
  return i;
}

// How far ahead of the 16-bit loops' reads their software prefetches go: on
// 32 MiB inputs reduced in the allreduce's 16 KiB chunks (CPU time, Zen 5),
// 2 KiB ahead made the f16 loop 25-29% faster than no prefetch; 512 B gained
// 5-12%, 4 KiB as much as 2 KiB.
constexpr size_t kPrefetchBytes = 2048;

// Prefetches element |i| + kPrefetchBytes of |base|. The address is
// computed as an integer: near the end it lies past the buffer, where a
// prefetch does not fault but forming the pointer `base + i + ahead` would
// be undefined behaviour.
inline void prefetch_ahead(const uint16_t* base, size_t i) {
  const uintptr_t address =
      reinterpret_cast<uintptr_t>(base) + i * sizeof(uint16_t) + kPrefetchBytes;
  _mm_prefetch(reinterpret_cast<const char*>(address), _MM_HINT_T0);
}

// 16 lanes: AVX-512F has every instruction these need.
template <bool kBf16>
__attribute__((target("avx512f"))) inline __m512 widen16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (!kBf16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// bf16 by integer arithmetic: float_to_bf16 on 16 lanes.
__attribute__((target("avx512f"))) inline __m256i bf16_by_integers(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));
}

template <bool kBf16>
__attribute__((target("avx512f"))) inline void narrow16(uint16_t* p, __m512 v) {
  if constexpr (!kBf16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_by_integers(v));
  }
}

template <hal_reduce_op_t kOp>
__attribute__((target("avx512f"))) inline __m512 combine16(__m512 x, __m512 y) {
  if constexpr (kOp == HAL_REDUCE_PROD) return _mm512_mul_ps(x, y);
  if constexpr (kOp == HAL_REDUCE_MIN) return _mm512_min_ps(y, x);
  if constexpr (kOp == HAL_REDUCE_MAX) return _mm512_max_ps(y, x);
  return _mm512_add_ps(x, y);
}

// A float's bits rounded (ties to even) so that its upper half is its bf16;
// a NaN's upper half is kept, made quiet (float_to_bf16 on 16 lanes, without
// the shift).
__attribute__((target("avx512f"))) inline __m512i bf16_in_upper_half(__m512i bits) {
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd);
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, is_nan, bits, _mm512_set1_epi32(0x00400000));
}

// bf16, 32 lanes at a time without crossing 128-bit lanes: in each 32-bit
// lane of a 64-byte load, the even element widens by a shift and the odd one
// by a mask; the two sums are rounded where they lie and put back together
// with one ternary logic (20% faster than widening 16 by vpmovzxwd and
// narrowing by vpmovdw, on L1-resident pairs on Zen 5).
template <hal_reduce_op_t kOp>
__attribute__((target("avx512f"))) size_t reduce_bf16_pairs_avx512(uint16_t* dst, const uint16_t* a,
                                                                   const uint16_t* b,
                                                                   size_t count) noexcept {
  const __m512i upper = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    prefetch_ahead(a, i);
    prefetch_ahead(b, i);
    const __m512i x = _mm512_loadu_si512(a + i);
    const __m512i y = _mm512_loadu_si512(b + i);
    const __m512 even = combine16<kOp>(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                                       _mm512_castsi512_ps(_mm512_slli_epi32(y, 16)));
    const __m512 odd = combine16<kOp>(_mm512_castsi512_ps(_mm512_and_si512(x, upper)),
                                      _mm512_castsi512_ps(_mm512_and_si512(y, upper)));
    const __m512i even_bits = _mm512_srli_epi32(bf16_in_upper_half(_mm512_castps_si512(even)), 16);
    const __m512i odd_bits = bf16_in_upper_half(_mm512_castps_si512(odd));
    // upper ? odd_bits : even_bits, bit by bit.
    _mm512_storeu_si512(dst + i, _mm512_ternarylogic_epi32(upper, odd_bits, even_bits, 0xca));
  }
  return i;
}

// f16 with software prefetch kPrefetchBytes ahead of both inputs. The
// in-process allreduce reads its inputs from memory, one chunk at a time:
// the hardware prefetcher alone left the converters waiting at each chunk.
template <hal_reduce_op_t kOp>
__attribute__((target("avx512f"))) size_t reduce_f16_prefetching_avx512(uint16_t* dst,
                                                                        const uint16_t* a,
                                                                        const uint16_t* b,
                                                                        size_t count) noexcept {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    prefetch_ahead(a, i);
    prefetch_ahead(b, i);
    narrow16<false>(dst + i, combine16<kOp>(widen16<false>(a + i), widen16<false>(b + i)));
  }
  return i;
}

template <hal_reduce_op_t kOp, bool kBf16>
__attribute__((target("avx512f"))) size_t reduce_16bit_avx512(uint16_t* dst, const uint16_t* a,
                                                              const uint16_t* b,
                                                              size_t count) noexcept {
  size_t i = 0;
  if constexpr (kBf16) {
    i = reduce_bf16_pairs_avx512<kOp>(dst, a, b, count);
  } else {
    i = reduce_f16_prefetching_avx512<kOp>(dst, a, b, count);
  }
  for (; i + 16 <= count; i += 16) {
    narrow16<kBf16>(dst + i, combine16<kOp>(widen16<kBf16>(a + i), widen16<kBf16>(b + i)));
  }
  return i;
}

Lanes widest_lanes() noexcept {
  // avx2 and avx512f through the builtin (it also checks that the OS saves
  // the registers); F16C from CPUID leaf 1, ECX bit 29 (Clang's builtin does
  // not know the name). AVX-512 BF16's vcvtneps2bf16 is not used: on Zen 5
  // it measured slower than the integer rounding below (L1-resident pairs,
  // 52-70 against 61-76 GB/s), and it flushes subnormals, which would need
  // a second path.
  static const Lanes lanes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
    if (__builtin_cpu_supports("avx512f")) return Lanes::kAvx512;
    return __builtin_cpu_supports("avx2") && f16c ? Lanes::kAvx2 : Lanes::kNone;
  }();
  return lanes;
}

// The elements of dst[0, count) the vector loops of |lanes| reduced; the
// rest is the scalar path's.
template <hal_reduce_op_t kOp>
size_t reduce_16bit_vectors(Lanes lanes, uint16_t* dst, const uint16_t* a, const uint16_t* b,
                            size_t count, bool bf16) noexcept {
  switch (lanes) {
    case Lanes::kAvx512:
      return bf16 ? reduce_16bit_avx512<kOp, true>(dst, a, b, count)
                  : reduce_16bit_avx512<kOp, false>(dst, a, b, count);
    case Lanes::kAvx2:
      return bf16 ? reduce_16bit_avx2<kOp, true>(dst, a, b, count)
                  : reduce_16bit_avx2<kOp, false>(dst, a, b, count);
    default:
      return 0;
  }
}
#else
Lanes widest_lanes() noexcept {
  return Lanes::kNone;
}

template <hal_reduce_op_t>
size_t reduce_16bit_vectors(Lanes, uint16_t*, const uint16_t*, const uint16_t*, size_t,
                            bool) noexcept {
  return 0;
}
#endif

size_t reduce_16bit_vectors(Lanes lanes, uint16_t* dst, const uint16_t* a, const uint16_t* b,
                            size_t count, bool bf16, hal_reduce_op_t op) noexcept {
  switch (op) {
    case HAL_REDUCE_SUM:
    case HAL_REDUCE_AVG:
      return reduce_16bit_vectors<HAL_REDUCE_SUM>(lanes, dst, a, b, count, bf16);
    case HAL_REDUCE_PROD:
      return reduce_16bit_vectors<HAL_REDUCE_PROD>(lanes, dst, a, b, count, bf16);
    case HAL_REDUCE_MIN:
      return reduce_16bit_vectors<HAL_REDUCE_MIN>(lanes, dst, a, b, count, bf16);
    case HAL_REDUCE_MAX:
      return reduce_16bit_vectors<HAL_REDUCE_MAX>(lanes, dst, a, b, count, bf16);
    default:
      return 0;
  }
}

// f16 or bf16: the vector loops of |lanes|, then the scalar path for the
// elements they leave.
void reduce_16bit_pair(Lanes lanes, void* dst, const void* a, const void* b, size_t count,
                       bool bf16, hal_reduce_op_t op) noexcept {
  auto* out = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  const size_t done = reduce_16bit_vectors(lanes, out, x, y, count, bf16, op);
  if (bf16) {
    return reduce_16bit<bf16_to_float, float_to_bf16>(out + done, x + done, y + done, count - done,
                                                      op);
  }
  return reduce_16bit<half_to_float, float_to_half>(out + done, x + done, y + done, count - done,
                                                    op);
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
    case HAL_DTYPE_BF16:
      return reduce_16bit_pair(widest_lanes(), dst, a, b, count, dtype == HAL_DTYPE_BF16, op);
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

bool reduce_pair_16bit_at_width(unsigned width, void* dst, const void* a, const void* b,
                                size_t count, hal_dtype_t dtype, hal_reduce_op_t op) noexcept {
  if (width > static_cast<unsigned>(widest_lanes())) return false;
  if (dtype != HAL_DTYPE_F16 && dtype != HAL_DTYPE_BF16) return false;
  reduce_16bit_pair(static_cast<Lanes>(width), dst, a, b, count, dtype == HAL_DTYPE_BF16, op);
  return true;
}

}  // namespace hal::collective
