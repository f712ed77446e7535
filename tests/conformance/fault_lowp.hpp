// The fault plugin's planted low-precision faults (fault_lowp.cpp).
#ifndef HAL_TESTS_CONFORMANCE_FAULT_LOWP_HPP_
#define HAL_TESTS_CONFORMANCE_FAULT_LOWP_HPP_

#include <hal_plugin.h>

namespace fault_lowp {

enum class LowpFault {
  kScalePerColumn,              // scaled matmul takes a's scale at d's column instead of a's row
  kE4m3NanAsNumber,             // e4m3's NaN code S.1111.111 decoded as the number +-480
  kSteOutsideRange,             // fake quantize's backward passes grad_y outside the clipping range
  kQuantizeHalfAway,            // quantize to i8 rounds ties away from zero (std::round)
  kClipRoundedIgnored,          // fake quantize's backward ignores CLIP_ROUNDED: the mask tests v
  kDequantizeRowBlocksIgnored,  // dequantize takes every row's scale from the first row block
};

// Replaces |table|'s operator entries: the op the fault concerns is served
// here, on the host (cpu device memory is host memory), with the fault;
// every other plan goes to |real|.
void plant(hal_plugin_table_v1_t& table, const hal_plugin_table_v1_t* real, LowpFault fault);

}  // namespace fault_lowp

#endif  // HAL_TESTS_CONFORMANCE_FAULT_LOWP_HPP_
