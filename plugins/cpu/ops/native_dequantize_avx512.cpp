// See native_dequantize_avx512.hpp.
#include "native_dequantize_avx512.hpp"

#include <cstring>

#include "native_rows_avx512.hpp"

#if defined(__x86_64__)
// GCC 12 reports the "undefined" source vector inside its own unmasked
// intrinsics (_mm512_cvtepi32_ps, _mm512_cvtph_ps) as (maybe) used
// uninitialized (GCC only: clang has no -Wmaybe-uninitialized).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#endif

namespace hal::cpu::ops::native {

#if defined(__x86_64__)

#define HAL_DEQUANTIZE_AVX512 __attribute__((target("avx512f")))

namespace {

enum class Codes { kI8, kE4m3, kE5m2 };
enum class Out { kF32, kBf16, kF16 };

// The values of 16 codes, exactly (see the header).
template <Codes C>
HAL_DEQUANTIZE_AVX512 inline __m512 decode(__m128i codes) {
  if constexpr (C == Codes::kI8) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes));
  } else if constexpr (C == Codes::kE5m2) {
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(codes), 8));
  } else {
    const __m256i wide = _mm256_cvtepu8_epi16(codes);
    const __m256i magnitude = _mm256_and_si256(wide, _mm256_set1_epi16(0x7f));
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(wide, _mm256_set1_epi16(0x80)), 8);
    // Exponent and mantissa into f16's low exponent bits and high mantissa
    // bits: the value times 2^-8. The NaN code's lanes get f16's all-ones
    // exponent (its mantissa 0x380 is not 0: a NaN).
    __m256i half = _mm256_or_si256(_mm256_slli_epi16(magnitude, 7), sign);
    const __m256i nan = _mm256_cmpeq_epi16(magnitude, _mm256_set1_epi16(0x7f));
    half = _mm256_or_si256(half, _mm256_and_si256(nan, _mm256_set1_epi16(0x7c00)));
    return _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.0f));
  }
}

// 16 results narrowed to |O| and stored at |to| (element 0 of the 16).
template <Out O>
HAL_DEQUANTIZE_AVX512 inline void store(void* to, __m512 v) {
  if constexpr (O == Out::kF32) {
    _mm512_storeu_ps(static_cast<float*>(to), v);
  } else if constexpr (O == Out::kBf16) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    _mm256_storeu_si256(static_cast<__m256i*>(to),
                        _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet)));
  } else {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i canonical = _mm512_or_si512(
        _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u))),
        _mm512_set1_epi32(0x7fc00000));
    v = _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(canonical));
    _mm256_storeu_si256(static_cast<__m256i*>(to), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
}

template <Codes C, Out O, bool PerElement>
HAL_DEQUANTIZE_AVX512 void run(const uint8_t* q, float scale, const float* scales, int64_t n,
                               void* x) {
  constexpr int64_t kBytes = O == Out::kF32 ? 4 : 2;
  auto* out = static_cast<unsigned char*>(x);
  const __m512 broadcast = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 s = broadcast;
    if constexpr (PerElement) s = _mm512_loadu_ps(scales + i);
    const __m512 v = decode<C>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)));
    store<O>(out + i * kBytes, _mm512_mul_ps(v, s));
  }
  if (i == n) return;
  // The last n % 16 elements through 16-lane buffers (no access past the run).
  const auto rest = static_cast<size_t>(n - i);
  alignas(16) uint8_t codes[16] = {};
  alignas(64) float lane_scales[16] = {};
  alignas(64) unsigned char results[64];
  std::memcpy(codes, q + i, rest);
  if constexpr (PerElement) std::memcpy(lane_scales, scales + i, rest * sizeof(float));
  __m512 s = broadcast;
  if constexpr (PerElement) s = _mm512_load_ps(lane_scales);
  const __m512 v = decode<C>(_mm_load_si128(reinterpret_cast<const __m128i*>(codes)));
  store<O>(results, _mm512_mul_ps(v, s));
  std::memcpy(out + i * kBytes, results, rest * kBytes);
}

template <Codes C, Out O>
void run_with(const uint8_t* q, float scale, const float* scales, int64_t n, void* x) {
  if (scales != nullptr) return run<C, O, true>(q, scale, scales, n, x);
  run<C, O, false>(q, scale, scales, n, x);
}

template <Codes C>
void run_to(const uint8_t* q, float scale, const float* scales, int64_t n, void* x,
            hal_dtype_t x_dtype) {
  switch (x_dtype) {
    case HAL_DTYPE_F32:
      return run_with<C, Out::kF32>(q, scale, scales, n, x);
    case HAL_DTYPE_BF16:
      return run_with<C, Out::kBf16>(q, scale, scales, n, x);
    default:
      return run_with<C, Out::kF16>(q, scale, scales, n, x);
  }
}

}  // namespace

bool dequantize_avx512_available() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available && avx512_allowed();
}

void dequantize_run_avx512(const uint8_t* q, hal_dtype_t q_dtype, float scale, const float* scales,
                           int64_t n, void* x, hal_dtype_t x_dtype) {
  switch (q_dtype) {
    case HAL_DTYPE_I8:
      return run_to<Codes::kI8>(q, scale, scales, n, x, x_dtype);
    case HAL_DTYPE_F8_E4M3:
      return run_to<Codes::kE4m3>(q, scale, scales, n, x, x_dtype);
    default:
      return run_to<Codes::kE5m2>(q, scale, scales, n, x, x_dtype);
  }
}

#else  // not x86-64

bool dequantize_avx512_available() {
  return false;
}
void dequantize_run_avx512(const uint8_t*, hal_dtype_t, float, const float*, int64_t, void*,
                           hal_dtype_t) {}

#endif

}  // namespace hal::cpu::ops::native
