// cpu.native's f16 elementwise ops (BINARY, UNARY forward and backward):
// blocks of the f16 operands are widened to f32, the f32 loops of
// native_kernels.cpp run on them, and the results are narrowed back. Any
// operand may be f32, bf16 or f16; the planners send a call here when one is
// f16. The conversions are F16C's (AVX-512 or AVX2) where the CPU has it,
// else the scalar ones the collectives use: both round to nearest even, and a
// NaN becomes the quiet NaN 0x7e00 with its sign, as the portable kernels'
// store_f16 does, so results are the portable implementation's bit for bit
// (the f32 arithmetic being the same).
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_HALF_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_HALF_HPP_

#include <cstddef>

#include "hal/ops.h"
#include "native_kernels.hpp"

namespace hal::cpu::ops::native {

// One operand of the f16 paths: storage and its dtype (f32, bf16 or f16).
struct HalfRef {
  void* data;
  hal_dtype_t dtype;
};
struct ConstHalfRef {
  const void* data;
  hal_dtype_t dtype;
};

// Elements [first, first + n) of |from| (f32, bf16 or f16) as f32 in |to|.
void to_f32(ConstHalfRef from, size_t first, size_t n, float* to);
// |from|'s n values stored into elements [first, first + n) of |to|, rounded
// to its dtype (f32, bf16 or f16) as the loops above round.
void from_f32(const float* from, HalfRef to, size_t first, size_t n);

// binary() (native_kernels.hpp) for operands that may be f16.
void binary_with_f16(hal_binary_op_t op, float alpha, ConstHalfRef a, ConstHalfRef b,
                     const BinaryLayout& layout, HalfRef out, size_t begin, size_t end);
// unary_forward() and unary_backward() for operands that may be f16.
void unary_forward_with_f16(hal_activation_t activation, float alpha, ConstHalfRef x, HalfRef out,
                            size_t begin, size_t end);
void unary_backward_with_f16(hal_activation_t activation, float alpha, ConstHalfRef x,
                             ConstHalfRef grad_out, HalfRef grad_x, size_t begin, size_t end);

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_HALF_HPP_
