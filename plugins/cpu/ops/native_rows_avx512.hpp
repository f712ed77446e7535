// The row loops of softmax, log-softmax and cross-entropy's log-sum-exp, and
// the GELU and SiLU activations, on f32, written with AVX-512 intrinsics.
// GCC's clones of the portable loops (native_kernels*.cpp) leave the exp
// polynomial and the NaN-sticky maximum scalar: softmax ran at 48% of copy
// bandwidth on 64 MiB, and GELU stays bound by its division. These run one
// vector of 16 lanes per step and sum in the same 16 lanes, in the same
// order, as the portable loops (lane_sum), so both give results within
// rounding of each other and the same bits run to run.
//
// Callers check avx512_rows_available() first; on other CPUs the portable
// clones serve.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_ROWS_AVX512_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_ROWS_AVX512_HPP_

#include <cstddef>

namespace hal::cpu::ops::native {

// False when HAL_CPU_AVX512=0 turned the AVX-512 loops off (allow_avx512).
bool avx512_allowed();

// True when the CPU (and the OS) run AVX-512F and HAL_CPU_AVX512 allows it.
bool avx512_rows_available();

// The maximum of x[0, n): NaN if any element is NaN, -inf for n = 0.
float row_max_f32_avx512(const float* x, size_t n);

// The sum of e^(x[k] - shift) over k in [0, n), with e^-inf = 0. When |keep|
// is not null, keep[k] = e^(x[k] - shift) (keep may be x itself).
float row_sum_exp_f32_avx512(const float* x, float shift, float* keep, size_t n);

// y[k] = x[k] * factor (y may be x). |around_caches| writes y with
// streaming stores, which skip reading y's lines from memory first; for
// outputs far larger than the caches, and followed by
// order_streaming_stores() before another thread may read y.
void row_scale_f32_avx512(const float* x, float factor, float* y, size_t n, bool around_caches);
void order_streaming_stores();

// y[k] = (x[k] - shift) - offset (y may be x); |around_caches| as above.
void row_shift_f32_avx512(const float* x, float shift, float offset, float* y, size_t n,
                          bool around_caches);

// y[k] = GELU_TANH(alpha * x[k]) and SILU(alpha * x[k]) (y may be x): the
// portable loops' formulas, with the division by 1 + e^-z done as a refined
// reciprocal (within 2 ulp of it).
void row_gelu_tanh_f32_avx512(const float* x, float alpha, float* y, size_t n);
void row_silu_f32_avx512(const float* x, float alpha, float* y, size_t n);

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_ROWS_AVX512_HPP_
