// Host-side indexing of the convolutional ops' tensors (SPEC.md §17.6.8-10),
// written from the layout definitions alone: a [N, C, spatial...] tensor in
// HAL_CHANNELS_FIRST order or [N, spatial..., C] in HAL_CHANNELS_LAST
// order, 1 to 3 spatial dimensions. The float64 references address the
// logical (row-major) values a DeviceTensor downloads through this.
#ifndef HAL_CONFORMANCE_OPERATORS_CHANNEL_LAYOUT_HPP_
#define HAL_CONFORMANCE_OPERATORS_CHANNEL_LAYOUT_HPP_

#include <hal.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "op_harness.hpp"

namespace halconform::ops {

// A tensor's sizes as (N, C, D, H, W): absent spatial dimensions are 1.
struct Dims5 {
  int64_t n = 1, c = 1, d = 1, h = 1, w = 1;
  int64_t count() const { return n * c * d * h * w; }
  int64_t positions() const { return d * h * w; }
};

// The descriptor shape of a tensor of |dims| with |spatial| spatial
// dimensions in |layout|'s order (the last |spatial| of D, H, W).
inline std::vector<int64_t> layout_shape(hal_channel_layout_t layout, uint32_t spatial,
                                         const Dims5& dims) {
  const int64_t all[3] = {dims.d, dims.h, dims.w};
  std::vector<int64_t> shape{dims.n};
  if (layout == HAL_CHANNELS_FIRST) shape.push_back(dims.c);
  for (uint32_t s = 3 - spatial; s < 3; ++s) shape.push_back(all[s]);
  if (layout == HAL_CHANNELS_LAST) shape.push_back(dims.c);
  return shape;
}

// The logical (row-major, in the layout's order) index of element
// (n, c, d, h, w); a filter is the same with n = the output channel.
struct Indexer {
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  Dims5 dims;
  int64_t operator()(int64_t n, int64_t c, int64_t d, int64_t h, int64_t w) const {
    if (layout == HAL_CHANNELS_FIRST) {
      return (((n * dims.c + c) * dims.d + d) * dims.h + h) * dims.w + w;
    }
    return (((n * dims.d + d) * dims.h + h) * dims.w + w) * dims.c + c;
  }
};

inline std::string dims_label(const Dims5& dims, uint32_t spatial) {
  std::string text = "[" + std::to_string(dims.n) + "," + std::to_string(dims.c);
  const int64_t all[3] = {dims.d, dims.h, dims.w};
  for (uint32_t s = 3 - spatial; s < 3; ++s) text += "," + std::to_string(all[s]);
  return text + "]";
}

inline const char* layout_label(hal_channel_layout_t layout) {
  return layout == HAL_CHANNELS_LAST ? "channels_last" : "channels_first";
}

}  // namespace halconform::ops

#endif  // HAL_CONFORMANCE_OPERATORS_CHANNEL_LAYOUT_HPP_
