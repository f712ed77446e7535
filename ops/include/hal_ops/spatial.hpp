// Tensors of the convolutional ops (convolution, pooling, batch and group
// norm) in one canonical order whatever the descriptor's layout: an
// activation as [N, C, D, H, W] and a filter as [C_out, C_in/groups, KD, KH,
// KW], each with its own strides (the descriptor's, permuted). A tensor with
// fewer than 3 spatial dimensions gets outer ones of extent 1 (stride 0), so
// every rule and every implementation works on 3 spatial dimensions.
#pragma once

#include <hal/ops.h>

#include <array>
#include <cstdint>
#include <string>

namespace hal::ops {

inline constexpr uint32_t kSpatial = HAL_CONV_MAX_SPATIAL_DIMS;

struct Canonical5 {
  hal_dtype_t dtype = HAL_DTYPE_F32;
  std::array<int64_t, 5> shape{1, 1, 1, 1, 1};
  std::array<int64_t, 5> strides{0, 0, 0, 0, 0};
};

// The descriptor dimension that holds canonical dimension |c| (0 N or
// C_out, 1 C or C_in/groups, 2 + s spatial s of the spatial_dims) of a rank
// spatial_dims + 2 tensor.
inline uint32_t layout_dim(hal_channel_layout_t layout, uint32_t spatial_dims, uint32_t c) {
  if (c == 0) return 0;
  if (layout == HAL_CHANNELS_LAST) return c == 1 ? spatial_dims + 1 : c - 1;
  return c;
}

// |tensor| (rank spatial_dims + 2 in |layout|'s order) as [N, C, D, H, W];
// a filter the same way as [C_out, C_in/groups, KD, KH, KW].
inline Canonical5 canonical(const hal_tensor_desc_t& tensor, hal_channel_layout_t layout,
                            uint32_t spatial_dims) {
  Canonical5 out;
  out.dtype = tensor.dtype;
  for (uint32_t c = 0; c < 2; ++c) {
    const uint32_t d = layout_dim(layout, spatial_dims, c);
    out.shape[c] = tensor.shape[d];
    out.strides[c] = tensor.strides[d];
  }
  for (uint32_t s = 0; s < spatial_dims; ++s) {
    const uint32_t d = layout_dim(layout, spatial_dims, 2 + s);
    out.shape[2 + kSpatial - spatial_dims + s] = tensor.shape[d];
    out.strides[2 + kSpatial - spatial_dims + s] = tensor.strides[d];
  }
  return out;
}

// The tensor's channel dimension (batch and group norm): 1, or the last.
inline uint32_t channel_dim(hal_channel_layout_t layout, uint32_t rank) {
  return layout == HAL_CHANNELS_LAST ? rank - 1 : 1;
}

// A per-dimension parameter array of a descriptor padded to 3 spatial
// dimensions, outer first (|fill| for the dimensions the op does not have).
inline std::array<int64_t, kSpatial> spatial_param(const int64_t* values, uint32_t spatial_dims,
                                                   int64_t fill) {
  std::array<int64_t, kSpatial> out{fill, fill, fill};
  for (uint32_t s = 0; s < spatial_dims; ++s) out[kSpatial - spatial_dims + s] = values[s];
  return out;
}

// floor(a / b) and ceil(a / b) for b > 0 and any sign of a.
inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
inline int64_t ceil_div(int64_t a, int64_t b) {
  return -floor_div(-a, b);
}

// The output extent of a convolution (and of pooling without ceil mode):
// floor((i + pad_begin + pad_end - eff) / stride) + 1, eff = dilation (k - 1)
// + 1; below 1 when no window fits.
inline int64_t conv_output_extent(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                                  int64_t pad_begin, int64_t pad_end) {
  const int64_t span = in + pad_begin + pad_end - (dilation * (kernel - 1) + 1);
  if (span < 0) return 0;
  return span / stride + 1;
}

// Pooling's output extent with PyTorch's ceil mode: rounded up, less one
// when the last window would start at or past in + pad_begin.
inline int64_t pool_output_extent(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                                  int64_t pad_begin, int64_t pad_end, bool ceil_mode) {
  const int64_t span = in + pad_begin + pad_end - (dilation * (kernel - 1) + 1);
  if (span < 0) return 0;
  if (!ceil_mode) return span / stride + 1;
  int64_t out = ceil_div(span, stride) + 1;
  if ((out - 1) * stride >= in + pad_begin) --out;
  return out;
}

// "NCHW", "NDHWC", "OIHW" ...: a layout's name for messages.
std::string layout_name(hal_channel_layout_t layout, uint32_t spatial_dims, bool filter);

}  // namespace hal::ops
