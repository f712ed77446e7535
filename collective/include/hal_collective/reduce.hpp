// Element-wise reductions over every hal_dtype_t and hal_reduce_op_t: the
// arithmetic of all host collective paths (the loader's host-staged fallback
// and the cpu plugin). f16 and bf16 are widened to float per element and
// rounded back to nearest-even; integers wrap like unsigned arithmetic.
#pragma once

#include <hal/collective.h>

#include <cstddef>
#include <cstdint>

namespace hal::collective {

// dst[i] = a[i] op b[i]. |dst| may alias |a| or |b| exactly. AVG accumulates
// as SUM; finish_average divides once at the end.
void reduce_pair(void* dst, const void* a, const void* b, size_t count, hal_dtype_t dtype,
                 hal_reduce_op_t op) noexcept;

// dst[i] /= ranks, for AVG after the sum (integers truncate toward zero).
void finish_average(void* dst, size_t count, hal_dtype_t dtype, uint32_t ranks) noexcept;

// For tests: reduce_pair of f16 or bf16 through the vector loops of one
// width (0: none, the scalar path alone; 1: AVX2 with F16C; 2: AVX-512F),
// so each path the CPU has is checked against the others
// on the machine that runs it. False, doing nothing, when the CPU lacks it.
bool reduce_pair_16bit_at_width(unsigned width, void* dst, const void* a, const void* b,
                                size_t count, hal_dtype_t dtype, hal_reduce_op_t op) noexcept;

// The value conversions of the 16-bit floats, shared with tests and benches.
float half_to_float(uint16_t bits) noexcept;
uint16_t float_to_half(float value) noexcept;
float bf16_to_float(uint16_t bits) noexcept;
uint16_t float_to_bf16(float value) noexcept;

// The collective dtypes: f32 .. u8 (hal_dtype_t's first eight). BOOL is not
// one (a framework sends it as u8); later values are not either until the
// collectives learn them.
inline bool is_valid_dtype(hal_dtype_t dtype) noexcept {
  return static_cast<uint32_t>(dtype) <= static_cast<uint32_t>(HAL_DTYPE_U8);
}
inline bool is_valid_op(hal_reduce_op_t op) noexcept {
  return static_cast<uint32_t>(op) < HAL_REDUCE_OP_COUNT;
}
inline size_t dtype_size(hal_dtype_t dtype) noexcept {
  return HAL_DTYPE_SIZE(dtype);
}

}  // namespace hal::collective
