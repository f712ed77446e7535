#include "native_rows_avx512.hpp"

#include "ops.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <limits>

#include "hal_util/x86_intrinsics.hpp"
#include "native_exp_avx512.hpp"

namespace hal::cpu::ops::native {

namespace {
std::atomic<bool> avx512_allowed_flag{true};
}  // namespace

bool avx512_allowed() {
  return avx512_allowed_flag.load(std::memory_order_relaxed);
}

}  // namespace hal::cpu::ops::native

namespace hal::cpu::ops {

bool parse_avx512_setting(const char* text, bool* out_allowed, std::string& out_error) {
  if (text == nullptr || std::strcmp(text, "1") == 0) {
    *out_allowed = true;
    return true;
  }
  if (std::strcmp(text, "0") == 0) {
    *out_allowed = false;
    return true;
  }
  out_error = std::string("HAL_CPU_AVX512='") + text + "' is not valid: expected 0 or 1";
  return false;
}

void allow_avx512(bool allowed) {
  native::avx512_allowed_flag.store(allowed, std::memory_order_relaxed);
}

}  // namespace hal::cpu::ops

namespace hal::cpu::ops::native {

#if defined(__x86_64__)

#define HAL_AVX512 __attribute__((target("avx512f")))

namespace {

// Lanes [0, n) of a vector, for the tail of a row.
HAL_AVX512 inline __mmask16 first_lanes(size_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

// Streaming stores take 64-byte-aligned addresses: the elements before the
// first aligned one go through the caches like the tail; n when y has no
// aligned element at all.
inline size_t streaming_head(const float* y, size_t n) {
  const auto address = reinterpret_cast<uintptr_t>(y);
  if (address % sizeof(float) != 0) return n;
  return ((64 - (address & 63u)) & 63u) / sizeof(float);
}

// y[k] = op(x[k]) for k in [0, n), one vector at a time and the tail
// masked; |around_caches| writes the aligned body with streaming stores.
template <typename Op>
HAL_AVX512 inline void map_row(const float* x, float* y, size_t n, bool around_caches,
                               const Op& op) {
  size_t j = 0;
  if (around_caches) {
    const size_t head = streaming_head(y, n);
    if (head < n) {
      const __mmask16 lanes = first_lanes(head);
      _mm512_mask_storeu_ps(y, lanes, op(_mm512_maskz_loadu_ps(lanes, x)));
      for (j = head; j + 16 <= n; j += 16) _mm512_stream_ps(y + j, op(_mm512_loadu_ps(x + j)));
    }
  }
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(y + j, op(_mm512_loadu_ps(x + j)));
  if (j < n) {
    const __mmask16 tail = first_lanes(n - j);
    _mm512_mask_storeu_ps(y + j, tail, op(_mm512_maskz_loadu_ps(tail, x + j)));
  }
}

// v * factor.
struct Scale {
  __m512 factor;
  HAL_AVX512 __m512 operator()(__m512 v) const { return _mm512_mul_ps(v, factor); }
};

// (v - shift) - offset, the two roundings of the portable loop.
struct Shift {
  __m512 shift, offset;
  HAL_AVX512 __m512 operator()(__m512 v) const {
    return _mm512_sub_ps(_mm512_sub_ps(v, shift), offset);
  }
};

// v / d for d in [1, 2^64]: a reciprocal estimate (relative error < 2^-14)
// refined by one Newton step (to ~2^-28), then one product; within 2 ulp of
// the division, at a fraction of its cost (vdivps bound GELU's throughput).
// An infinite or NaN v stays infinite or NaN, as with the division.
HAL_AVX512 inline __m512 divide_moderate(__m512 v, __m512 d) {
  const __m512 estimate = _mm512_rcp14_ps(d);
  const __m512 error = _mm512_fnmadd_ps(d, estimate, _mm512_set1_ps(1.0f));
  return _mm512_mul_ps(v, _mm512_fmadd_ps(estimate, error, estimate));
}

// v / (1 + e^-z) = v sigmoid(z), as native_kernels_activation.cpp's times_sigmoid
// computes it: past e^88 the exponential is +inf, and the result v * 0 (-0,
// +0, or NaN for infinite v). Below, 1 + e^-z reaches 1.7e38, whose
// reciprocal would be subnormal: beyond 2^64 both v and it are scaled by
// 2^-64 first (exact for every v that gets there, which has |v| >= 6).
HAL_AVX512 inline __m512 times_sigmoid(__m512 v, __m512 z) {
  const __m512 minus_z = _mm512_sub_ps(_mm512_setzero_ps(), z);
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), exp_or_zero(minus_z));
  const __mmask16 large = _mm512_cmp_ps_mask(d, _mm512_set1_ps(0x1p64f), _CMP_GT_OQ);
  const __m512 scale = _mm512_mask_blend_ps(large, _mm512_set1_ps(1.0f), _mm512_set1_ps(0x1p-64f));
  const __m512 y = divide_moderate(_mm512_mul_ps(v, scale), _mm512_mul_ps(d, scale));
  const __mmask16 overflow = _mm512_cmp_ps_mask(minus_z, _mm512_set1_ps(88.0f), _CMP_GT_OQ);
  return _mm512_mask_mul_ps(y, overflow, v, _mm512_setzero_ps());
}

// GELU (tanh form) of alpha * x: v sigmoid(2u), u = sqrt(2/pi) (v + 0.044715 v^3),
// as native_kernels_activation.cpp's activate writes it.
struct GeluTanh {
  __m512 alpha;
  HAL_AVX512 __m512 operator()(__m512 x) const {
    const __m512 v = _mm512_mul_ps(alpha, x);
    const __m512 cubic =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), v), _mm512_mul_ps(v, v));
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_add_ps(v, cubic));
    return times_sigmoid(v, _mm512_add_ps(u, u));
  }
};

// SiLU of alpha * x: v sigmoid(v).
struct Silu {
  __m512 alpha;
  HAL_AVX512 __m512 operator()(__m512 x) const {
    const __m512 v = _mm512_mul_ps(alpha, x);
    return times_sigmoid(v, v);
  }
};

// The 16 lanes summed in lane order, as lane_sum does.
HAL_AVX512 inline float sum_lanes(__m512 lanes) {
  alignas(64) float values[16];
  _mm512_store_ps(values, lanes);
  float sum = 0.0f;
  for (float value : values) sum += value;
  return sum;
}

}  // namespace

bool avx512_rows_available() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available && avx512_allowed();
}

HAL_AVX512 float row_max_f32_avx512(const float* x, size_t n) {
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 best = lowest;
  __mmask16 nan = 0;
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    best = _mm512_max_ps(v, best);
  }
  if (j < n) {
    const __m512 v = _mm512_mask_loadu_ps(lowest, first_lanes(n - j), x + j);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    best = _mm512_max_ps(v, best);
  }
  if (nan != 0) return std::numeric_limits<float>::quiet_NaN();
  return _mm512_reduce_max_ps(best);
}

HAL_AVX512 float row_sum_exp_f32_avx512(const float* x, float shift, float* keep, size_t n) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 lanes = _mm512_setzero_ps();
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp_or_zero(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
    if (keep != nullptr) _mm512_storeu_ps(keep + j, e);
    lanes = _mm512_add_ps(lanes, e);
  }
  float sum = sum_lanes(lanes);
  if (j < n) {
    // The tail after the lanes, in order, as lane_sum adds it.
    const __mmask16 tail = first_lanes(n - j);
    const __m512 e = exp_or_zero(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + j), s));
    if (keep != nullptr) _mm512_mask_storeu_ps(keep + j, tail, e);
    alignas(64) float values[16];
    _mm512_store_ps(values, e);
    for (size_t k = 0; k < n - j; ++k) sum += values[k];
  }
  return sum;
}

HAL_AVX512 void row_scale_f32_avx512(const float* x, float factor, float* y, size_t n,
                                     bool around_caches) {
  map_row(x, y, n, around_caches, Scale{_mm512_set1_ps(factor)});
}

void order_streaming_stores() {
  _mm_sfence();
}

HAL_AVX512 void row_shift_f32_avx512(const float* x, float shift, float offset, float* y, size_t n,
                                     bool around_caches) {
  map_row(x, y, n, around_caches, Shift{_mm512_set1_ps(shift), _mm512_set1_ps(offset)});
}

HAL_AVX512 void row_gelu_tanh_f32_avx512(const float* x, float alpha, float* y, size_t n) {
  map_row(x, y, n, false, GeluTanh{_mm512_set1_ps(alpha)});
}

HAL_AVX512 void row_silu_f32_avx512(const float* x, float alpha, float* y, size_t n) {
  map_row(x, y, n, false, Silu{_mm512_set1_ps(alpha)});
}

#undef HAL_AVX512

#else  // not x86-64: the portable clones serve

bool avx512_rows_available() {
  return false;
}
float row_max_f32_avx512(const float*, size_t) {
  return std::numeric_limits<float>::quiet_NaN();
}
float row_sum_exp_f32_avx512(const float*, float, float*, size_t) {
  return std::numeric_limits<float>::quiet_NaN();
}
void row_scale_f32_avx512(const float*, float, float*, size_t, bool) {}
void order_streaming_stores() {}
void row_shift_f32_avx512(const float*, float, float, float*, size_t, bool) {}
void row_gelu_tanh_f32_avx512(const float*, float, float*, size_t) {}
void row_silu_f32_avx512(const float*, float, float*, size_t) {}

#endif

}  // namespace hal::cpu::ops::native
