// e^x on 16 f32 lanes with AVX-512F, shared by the row loops
// (native_rows_avx512.cpp) and paged decode attention (native_paged_avx512.cpp).
// Include after hal_util/x86_intrinsics.hpp, in .cpp files only.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_EXP_AVX512_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_EXP_AVX512_HPP_

#if defined(__x86_64__)

namespace hal::cpu::ops::native {

// e^x per lane, the vector twin of native_math.hpp's exp_clamped followed by
// exp_or_zero: 0 below -87.5 (e^-inf = 0), NaN for NaN, otherwise the
// Cephes polynomial on r = x - n ln2 and 2^n through the exponent bits.
__attribute__((target("avx512f"))) inline __m512 exp_or_zero(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.5f), _CMP_LT_OQ);
  const __m512 clamped =
      _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 magic = _mm512_set1_ps(12582912.0f);  // 1.5 * 2^23: round to nearest
  const __m512 n =
      _mm512_sub_ps(_mm512_fmadd_ps(clamped, _mm512_set1_ps(1.44269504088896341f), magic), magic);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), clamped);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i exponent =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  const __m512 value = _mm512_mul_ps(p, _mm512_castsi512_ps(exponent));
  return _mm512_mask_blend_ps(nan, _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), value),
                              x);
}

}  // namespace hal::cpu::ops::native

#endif  // defined(__x86_64__)

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_EXP_AVX512_HPP_
