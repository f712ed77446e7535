// What the low-precision ops (SPEC.md §17.7) share between their rules and
// their implementations: the block grid of a quantized tensor's scales and
// the quantized types' ranges.
#pragma once

#include <hal/ops.h>

#include <cstdint>

namespace hal::ops {

// The blocks of a [rows, cols] matrix: each block's extents (0 in
// hal_quant_blocks_t resolved to the whole dimension, at least 1) and how
// many there are along each dimension.
struct QuantGrid {
  int64_t block_rows = 1, block_cols = 1;
  int64_t block_rows_count = 1, block_cols_count = 1;
};

inline QuantGrid quant_grid(int64_t rows, int64_t cols, const hal_quant_blocks_t& blocks) {
  QuantGrid grid;
  grid.block_rows = blocks.rows == 0 ? (rows > 0 ? rows : 1) : blocks.rows;
  grid.block_cols = blocks.cols == 0 ? (cols > 0 ? cols : 1) : blocks.cols;
  grid.block_rows_count = (rows + grid.block_rows - 1) / grid.block_rows;
  grid.block_cols_count = (cols + grid.block_cols - 1) / grid.block_cols;
  if (blocks.rows == 0) grid.block_rows_count = 1;
  if (blocks.cols == 0) grid.block_cols_count = 1;
  return grid;
}

// The largest magnitude a quantized type holds: 127 (i8's positive end;
// -128 is its negative one), 448 (e4m3), 57344 (e5m2).
inline float quant_max(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F8_E4M3 ? 448.0f : dtype == HAL_DTYPE_F8_E5M2 ? 57344.0f : 127.0f;
}

}  // namespace hal::ops
