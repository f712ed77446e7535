// cpu.native's HAL_OP_DEQUANTIZE loop with AVX-512F intrinsics (SPEC.md
// §17.6.12): x = q * scale in f32, rounded once to x's dtype.
//
// Why intrinsics: dequantize reads one byte and writes 2 or 4 per element, so
// it is bound by memory only if decoding a code costs a few vector
// instructions. A table lookup per byte does not vectorise (a gather of 16
// floats costs more than the bytes' transfer); instead the codes go through
// vcvtph2ps, which is exact and ignores MXCSR.DAZ: an e5m2 code is the high
// byte of the f16 of the same value, and an e4m3 code shifted into f16's
// fields is its value times 2^-8 (every e4m3 value, subnormals included, is
// an f16), times 256 after the conversion (exact); e4m3's NaN code
// S.1111.111 is set apart. i8 is widened to i32 and converted.
//
// The narrowing to bf16 rounds to nearest even in integer arithmetic (not
// vcvtneps2bf16, which flushes subnormals), a NaN to its quiet bf16; to f16
// vcvtps2ph, a NaN first made the quiet NaN of its sign: the scalar path's
// bits (native_half.hpp) and the portable kernels'.
//
// Callers check dequantize_avx512_available() first (AVX-512F and
// HAL_CPU_AVX512 not 0); elsewhere the plain loops of native_lowp.cpp serve.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_DEQUANTIZE_AVX512_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_DEQUANTIZE_AVX512_HPP_

#include <cstdint>

#include "hal/ops.h"

namespace hal::cpu::ops::native {

// True when the CPU runs AVX-512F and HAL_CPU_AVX512 allows it.
bool dequantize_avx512_available();

// x[i] = value(q[i]) * scale for i < n: one scale for the whole run when
// |scales| is null, else scales[i] per element. |q_dtype| I8, F8_E4M3 or
// F8_E5M2; |x_dtype| F32, BF16 or F16; |x| points at element 0 of the run.
void dequantize_run_avx512(const uint8_t* q, hal_dtype_t q_dtype, float scale, const float* scales,
                           int64_t n, void* x, hal_dtype_t x_dtype);

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_DEQUANTIZE_AVX512_HPP_
