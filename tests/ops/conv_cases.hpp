// A convolution case in canonical [N, C, D, H, W] terms, the float64 reference's taps and the
// descriptor, for the convolution tests on every implementation (tests/ops/conv_ops_test.cpp: cpu
// and opencl; tests/cuda/cudnn_conv_test.cpp: the cuda plugin on cuDNN), written once from the
// definition in api/hal/ops.h.
#ifndef HAL_TESTS_OPS_CONV_CASES_HPP_
#define HAL_TESTS_OPS_CONV_CASES_HPP_

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "float64_tensor.hpp"
#include "hal.h"

namespace op_test {

// A 2-D (or 1-D / 3-D with extents of 1) convolution case in canonical
// [N, C, D, H, W] terms.
struct Conv {
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  uint32_t spatial = 2;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  int64_t n = 2, ci = 4, co = 6, groups = 1;
  std::array<int64_t, 3> in{1, 7, 8}, k{1, 3, 3}, stride{1, 2, 1}, dil{1, 1, 2};
  std::array<int64_t, 3> pb{0, 2, 1}, pe{0, 0, 2};
  bool transposed = false, bias = true;
  hal_activation_t act = HAL_ACTIVATION_RELU;
  std::array<int64_t, 3> out() const {
    std::array<int64_t, 3> o{};
    for (int s = 0; s < 3; ++s) {
      o[s] = (in[s] + pb[s] + pe[s] - dil[s] * (k[s] - 1) - 1) / stride[s] + 1;
    }
    return o;
  }
};

inline std::vector<int64_t> shape_of(const Conv& t, int64_t n, int64_t c,
                                     const std::array<int64_t, 3>& sp) {
  std::vector<int64_t> shape{n};
  if (t.layout == HAL_CHANNELS_FIRST) shape.push_back(c);
  for (uint32_t s = 3 - t.spatial; s < 3; ++s) shape.push_back(sp[s]);
  if (t.layout == HAL_CHANNELS_LAST) shape.push_back(c);
  return shape;
}

// The logical index of (n, c, d, h, w) in a tensor of |shape| (layout order).
inline int64_t index_of(hal_channel_layout_t layout, int64_t nc, int64_t cc,
                        const std::array<int64_t, 3>& sp, int64_t n, int64_t c, int64_t d,
                        int64_t h, int64_t w) {
  (void)nc;
  if (layout == HAL_CHANNELS_FIRST) return (((n * cc + c) * sp[0] + d) * sp[1] + h) * sp[2] + w;
  return (((n * sp[0] + d) * sp[1] + h) * sp[2] + w) * cc + c;
}

// Visits (input index, output index, filter index) of every tap that reads x.
inline void taps(const Conv& t, const std::function<void(int64_t, int64_t, int64_t)>& visit) {
  const auto o = t.out();
  const int64_t cig = t.ci / t.groups, cog = t.co / t.groups;
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t c = 0; c < t.co; ++c)
      for (int64_t od = 0; od < o[0]; ++od)
        for (int64_t oh = 0; oh < o[1]; ++oh)
          for (int64_t ow = 0; ow < o[2]; ++ow)
            for (int64_t i = 0; i < cig; ++i)
              for (int64_t a = 0; a < t.k[0]; ++a)
                for (int64_t b = 0; b < t.k[1]; ++b)
                  for (int64_t e = 0; e < t.k[2]; ++e) {
                    const int64_t z = od * t.stride[0] - t.pb[0] + a * t.dil[0];
                    const int64_t y = oh * t.stride[1] - t.pb[1] + b * t.dil[1];
                    const int64_t x = ow * t.stride[2] - t.pb[2] + e * t.dil[2];
                    if (z < 0 || z >= t.in[0] || y < 0 || y >= t.in[1] || x < 0 || x >= t.in[2])
                      continue;
                    const int64_t ic = c / cog * cig + i;
                    visit(index_of(t.layout, t.n, t.ci, t.in, n, ic, z, y, x),
                          index_of(t.layout, t.n, t.co, o, n, c, od, oh, ow),
                          index_of(t.layout, t.co, cig, t.k, c, i, a, b, e));
                  }
}

inline hal_op_convolution_desc_t conv_desc(const Conv& t, hal_op_kind_t kind, const Tensor& x,
                                           const Tensor& w, const Tensor& y, const Tensor& bias) {
  hal_op_convolution_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = kind;
  desc.layout = t.layout;
  desc.spatial_dims = t.spatial;
  desc.groups = static_cast<uint32_t>(t.groups);
  desc.flags = (t.transposed ? uint32_t{HAL_CONV_TRANSPOSED} : 0u) |
               (t.bias && kind != HAL_OP_CONVOLUTION_BACKWARD_DATA ? uint32_t{HAL_CONV_BIAS} : 0u);
  desc.activation = kind == HAL_OP_CONVOLUTION ? t.act : HAL_ACTIVATION_NONE;
  for (uint32_t s = 0; s < t.spatial; ++s) {
    const uint32_t c = 3 - t.spatial + s;
    desc.stride[s] = t.stride[c];
    desc.dilation[s] = t.dil[c];
    desc.pad_begin[s] = t.pb[c];
    desc.pad_end[s] = t.pe[c];
  }
  desc.x = x.desc;
  desc.w = w.desc;
  desc.y = y.desc;
  desc.bias = bias.desc;
  return desc;
}

inline double activate(hal_activation_t act, double v) {
  return act == HAL_ACTIVATION_RELU ? (v > 0 ? v : 0) : v;
}

// ---- float64 references, from values already rounded to the dtype ----------
// In the op's terms: the transposed op's x is the convolution's output side.

// The channel of element |i| of the op's y (|count| elements).
inline int64_t y_channel_of(const Conv& t, size_t i, size_t count) {
  const int64_t channels = t.transposed ? t.ci : t.co;
  const auto index = static_cast<int64_t>(i);
  if (t.layout == HAL_CHANNELS_LAST) return index % channels;
  return index / (static_cast<int64_t>(count) / t.n / channels) % channels;
}

// y of HAL_OP_CONVOLUTION from x, w and the bias (when |t| has one), activated.
inline std::vector<double> forward_reference(const Conv& t, const std::vector<double>& xv,
                                             const std::vector<double>& wv,
                                             const std::vector<double>& bv, size_t y_count) {
  std::vector<double> want(y_count, 0.0);
  if (!t.transposed) {
    taps(t, [&](int64_t i, int64_t out, int64_t f) { want[out] += xv[i] * wv[f]; });
  } else {
    taps(t, [&](int64_t i, int64_t out, int64_t f) { want[i] += xv[out] * wv[f]; });
  }
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = activate(t.act, want[i] + (t.bias ? bv[y_channel_of(t, i, y_count)] : 0.0));
  }
  return want;
}

// grad_x of HAL_OP_CONVOLUTION_BACKWARD_DATA from grad_y (|gv|, y's layout) and w.
inline std::vector<double> backward_data_reference(const Conv& t, const std::vector<double>& gv,
                                                   const std::vector<double>& wv, size_t x_count) {
  std::vector<double> want(x_count, 0.0);
  if (!t.transposed) {
    taps(t, [&](int64_t i, int64_t out, int64_t f) { want[i] += gv[out] * wv[f]; });
  } else {
    taps(t, [&](int64_t i, int64_t out, int64_t f) { want[out] += gv[i] * wv[f]; });
  }
  return want;
}

// grad_w of HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS from x and grad_y.
inline std::vector<double> backward_weights_reference(const Conv& t, const std::vector<double>& xv,
                                                      const std::vector<double>& gv,
                                                      size_t w_count) {
  std::vector<double> want(w_count, 0.0);
  if (!t.transposed) {
    taps(t, [&](int64_t i, int64_t out, int64_t f) { want[f] += xv[i] * gv[out]; });
  } else {
    taps(t, [&](int64_t i, int64_t out, int64_t f) { want[f] += gv[i] * xv[out]; });
  }
  return want;
}

// grad_bias: grad_y summed per channel.
inline std::vector<double> bias_gradient_reference(const Conv& t, const std::vector<double>& gv) {
  std::vector<double> want(static_cast<size_t>(t.transposed ? t.ci : t.co), 0.0);
  for (size_t i = 0; i < gv.size(); ++i) want[y_channel_of(t, i, gv.size())] += gv[i];
  return want;
}

}  // namespace op_test

#endif  // HAL_TESTS_OPS_CONV_CASES_HPP_
