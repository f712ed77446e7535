#include "native_half.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hal_collective/reduce.hpp"
#include "native_math.hpp"
#include "hal_util/x86_intrinsics.hpp"

namespace hal::cpu::ops::native {
namespace {

// Elements per block: three f32 blocks (6 KiB) stay in L1 beside the operands.
constexpr size_t kBlock = 512;

// The widest F16C conversions this CPU has.
enum class Converter { kScalar, kAvx2, kAvx512 };

Converter converter() {
#if defined(__x86_64__)
  // F16C from CPUID leaf 1, ECX bit 29 (Clang's builtin does not know the name).
  static const Converter widest = [] {
    if (__builtin_cpu_supports("avx512f")) return Converter::kAvx512;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
    return __builtin_cpu_supports("avx2") && f16c ? Converter::kAvx2 : Converter::kScalar;
  }();
  return widest;
#else
  return Converter::kScalar;
#endif
}

#if defined(__x86_64__)
// The loops return how many elements they converted; the scalar path takes
// the rest. Narrowing first makes a NaN the quiet NaN of its sign with no
// payload (0x7fc00000 | sign narrows to 0x7e00 | sign), where vcvtps2ph
// would keep the payload's upper bits.
__attribute__((target("avx512f"))) size_t widen_f16_avx512(const uint16_t* from, float* to,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i));
    _mm512_storeu_ps(to + i, _mm512_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx512f"))) size_t narrow_f16_avx512(const float* from, uint16_t* to,
                                                            size_t n) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i quiet_nan = _mm512_set1_epi32(0x7fc00000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(from + i);
    const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i canonical =
        _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), sign), quiet_nan);
    v = _mm512_mask_mov_ps(v, is_nan, _mm512_castsi512_ps(canonical));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

__attribute__((target("avx2,f16c"))) size_t widen_f16_avx2(const uint16_t* from, float* to,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i));
    _mm256_storeu_ps(to + i, _mm256_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx2,f16c"))) size_t narrow_f16_avx2(const float* from, uint16_t* to,
                                                            size_t n) {
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 quiet_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(from + i);
    const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    v = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), quiet_nan), is_nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#endif

void widen_f16(const uint16_t* from, float* to, size_t n) {
  size_t done = 0;
#if defined(__x86_64__)
  const Converter widest = converter();
  if (widest == Converter::kAvx512) done = widen_f16_avx512(from, to, n);
  if (widest == Converter::kAvx2) done = widen_f16_avx2(from, to, n);
#endif
  for (size_t i = done; i < n; ++i) to[i] = hal::collective::half_to_float(from[i]);
}

void narrow_f16(const float* from, uint16_t* to, size_t n) {
  size_t done = 0;
#if defined(__x86_64__)
  const Converter widest = converter();
  if (widest == Converter::kAvx512) done = narrow_f16_avx512(from, to, n);
  if (widest == Converter::kAvx2) done = narrow_f16_avx2(from, to, n);
#endif
  for (size_t i = done; i < n; ++i) to[i] = hal::collective::float_to_half(from[i]);
}

// Elements [first, first + n) of |from| as f32 in |to|, or, for an f32
// operand, a pointer to them in place.
const float* widened(ConstHalfRef from, size_t first, size_t n, float* to) {
  switch (from.dtype) {
    case HAL_DTYPE_F32:
      return static_cast<const float*>(from.data) + first;
    case HAL_DTYPE_BF16: {
      const auto* bits = static_cast<const uint16_t*>(from.data) + first;
      for (size_t i = 0; i < n; ++i) to[i] = from_bf16(bits[i]);
      return to;
    }
    default:
      widen_f16(static_cast<const uint16_t*>(from.data) + first, to, n);
      return to;
  }
}

// Where the f32 results for elements [first, first + n) of |to| go: in place
// for an f32 operand, else |scratch|, which narrowed() then stores.
float* result_block(HalfRef to, size_t first, float* scratch) {
  return to.dtype == HAL_DTYPE_F32 ? static_cast<float*>(to.data) + first : scratch;
}

void narrowed(const float* from, HalfRef to, size_t first, size_t n) {
  switch (to.dtype) {
    case HAL_DTYPE_F32:
      return;  // written in place
    case HAL_DTYPE_BF16: {
      auto* bits = static_cast<uint16_t*>(to.data) + first;
      for (size_t i = 0; i < n; ++i) bits[i] = to_bf16(from[i]);
      return;
    }
    default:
      return narrow_f16(from, static_cast<uint16_t*>(to.data) + first, n);
  }
}

}  // namespace

void to_f32(ConstHalfRef from, size_t first, size_t n, float* to) {
  const float* values = widened(from, first, n, to);
  if (values != to) std::memcpy(to, values, n * sizeof(float));
}

void from_f32(const float* from, HalfRef to, size_t first, size_t n) {
  if (to.dtype == HAL_DTYPE_F32) {
    std::memcpy(static_cast<float*>(to.data) + first, from, n * sizeof(float));
    return;
  }
  narrowed(from, to, first, n);
}

void binary_with_f16(hal_binary_op_t op, float alpha, ConstHalfRef a, ConstHalfRef b,
                     const BinaryLayout& layout, HalfRef out, size_t begin, size_t end) {
  const uint32_t inner = layout.rank - 1;
  const bool a_runs = layout.stride_a[inner] != 0, b_runs = layout.stride_b[inner] != 0;
  float block_a[kBlock], block_b[kBlock], block_out[kBlock];
  for_each_binary_run(layout, begin, end, [&](size_t at_a, size_t at_b, size_t i, size_t n) {
    for (size_t start = 0; start < n; start += kBlock) {
      const size_t m = std::min(kBlock, n - start);
      // The block as a one-dimensional binary op in f32: an input that is
      // one value along the run is widened once and read with stride 0.
      BinaryLayout block;
      block.extent[0] = m;
      block.stride_a[0] = a_runs ? 1 : 0;
      block.stride_b[0] = b_runs ? 1 : 0;
      const float* fa = widened(a, a_runs ? at_a + start : at_a, a_runs ? m : 1, block_a);
      const float* fb = widened(b, b_runs ? at_b + start : at_b, b_runs ? m : 1, block_b);
      float* fo = result_block(out, i + start, block_out);
      binary(op, alpha, ConstRef{fa, Type::kF32}, ConstRef{fb, Type::kF32}, block,
             Ref{fo, Type::kF32}, 0, m);
      narrowed(fo, out, i + start, m);
    }
  });
}

void unary_forward_with_f16(hal_activation_t activation, float alpha, ConstHalfRef x, HalfRef out,
                            size_t begin, size_t end) {
  float block_x[kBlock], block_out[kBlock];
  for (size_t start = begin; start < end; start += kBlock) {
    const size_t m = std::min(kBlock, end - start);
    const float* fx = widened(x, start, m, block_x);
    float* fo = result_block(out, start, block_out);
    unary_forward(activation, alpha, ConstRef{fx, Type::kF32}, Ref{fo, Type::kF32}, 0, m);
    narrowed(fo, out, start, m);
  }
}

void unary_backward_with_f16(hal_activation_t activation, float alpha, ConstHalfRef x,
                             ConstHalfRef grad_out, HalfRef grad_x, size_t begin, size_t end) {
  float block_x[kBlock], block_grad[kBlock], block_out[kBlock];
  for (size_t start = begin; start < end; start += kBlock) {
    const size_t m = std::min(kBlock, end - start);
    const float* fx = widened(x, start, m, block_x);
    const float* fg = widened(grad_out, start, m, block_grad);
    float* fo = result_block(grad_x, start, block_out);
    unary_backward(activation, alpha, ConstRef{fx, Type::kF32}, ConstRef{fg, Type::kF32},
                   Ref{fo, Type::kF32}, 0, m);
    narrowed(fo, grad_x, start, m);
  }
}

}  // namespace hal::cpu::ops::native
