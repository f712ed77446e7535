// HAL_OP_CONVOLUTION, _BACKWARD_DATA and _BACKWARD_WEIGHTS against float64
// references written from SPEC.md §17.6.8: the convolution as its defining
// sum over taps, its data gradient by scattering each output back through
// the taps (not the gathering formulation a kernel uses), its weight
// gradient as the sum over positions; the reference gradients themselves
// against central differences of the reference forward, and the device's
// too on small shapes.
#include <array>
#include <cmath>
#include <functional>

#include "channel_layout.hpp"
#include "op_harness.hpp"
#include "reference.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

using Triple = std::array<int64_t, 3>;  // (D, H, W); unused outer dimensions 1 (or 0)

// How a test lays a tensor out in memory.
enum class Memory {
  kDense,    // row-major in the layout's order
  kPadded,   // rows of the last dimension padded by 3 elements
  kPermuted  // HAL_CHANNELS_FIRST dimensions with channels-last strides (PyTorch's channels_last)
};

// A convolution case, described by the convolution's own geometry (input
// side |in| of c_in channels, output side of c_out); with |transposed| the
// op is the transposed convolution of that geometry, x the output side.
struct ConvCase {
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  uint32_t spatial = 2;
  hal_dtype_t dtype = HAL_DTYPE_F32;      // x and w (grad_y)
  hal_dtype_t out_dtype = HAL_DTYPE_F32;  // y / grad_x / grad_w / grad_bias
  int64_t n = 2, c_in = 3, c_out = 4, groups = 1;
  Triple in{1, 9, 7};
  Triple kernel{1, 3, 3};
  Triple stride{1, 1, 1}, dilation{1, 1, 1}, pad_begin{0, 1, 1}, pad_end{0, 1, 1};
  bool transposed = false;
  bool bias = false, residual = false, residual_is_y = false;
  hal_activation_t act = HAL_ACTIVATION_NONE;
  Memory memory = Memory::kDense;
  hal_op_plan_flags_t plan_flags = 0;
};

Triple output_size(const ConvCase& t) {
  Triple out{1, 1, 1};
  for (int s = 0; s < 3; ++s) {
    const int64_t span =
        t.in[s] + t.pad_begin[s] + t.pad_end[s] - t.dilation[s] * (t.kernel[s] - 1) - 1;
    out[s] = span / t.stride[s] + 1;
  }
  return out;
}

Dims5 in_dims(const ConvCase& t) {
  return {t.n, t.c_in, t.in[0], t.in[1], t.in[2]};
}
Dims5 out_dims(const ConvCase& t) {
  const Triple o = output_size(t);
  return {t.n, t.c_out, o[0], o[1], o[2]};
}
Dims5 filter_dims(const ConvCase& t) {
  return {t.c_out, t.c_in / t.groups, t.kernel[0], t.kernel[1], t.kernel[2]};
}

std::string triple_text(const Triple& v, uint32_t spatial) {
  std::string text;
  for (uint32_t s = 3 - spatial; s < 3; ++s)
    text += (text.empty() ? "" : "x") + std::to_string(v[s]);
  return text;
}

std::string describe(const char* op, const ConvCase& t) {
  const Dims5 x = t.transposed ? out_dims(t) : in_dims(t);
  const Dims5 y = t.transposed ? in_dims(t) : out_dims(t);
  std::string text =
      std::string(op) + (t.transposed ? " (transposed) " : " ") + dtype_label(t.dtype) + "->" +
      dtype_label(t.out_dtype) + " " + layout_label(t.layout) + " x" + dims_label(x, t.spatial) +
      " w" + dims_label(filter_dims(t), t.spatial) + " y" + dims_label(y, t.spatial) + " stride " +
      triple_text(t.stride, t.spatial) + " dilation " + triple_text(t.dilation, t.spatial) +
      " pad " + triple_text(t.pad_begin, t.spatial) + "+" + triple_text(t.pad_end, t.spatial) +
      " groups " + std::to_string(t.groups);
  if (t.bias) text += " bias";
  if (t.residual) text += t.residual_is_y ? " residual=y" : " residual";
  if (t.act != HAL_ACTIVATION_NONE) text += " act" + std::to_string(t.act);
  if (t.memory == Memory::kPadded) text += " padded-view";
  if (t.memory == Memory::kPermuted) text += " channels_last-strides";
  return text;
}

// The descriptor of a tensor of |dims| (a filter when |filter|).
hal_tensor_desc_t tensor_of(const ConvCase& t, hal_dtype_t dtype, const Dims5& dims) {
  const std::vector<int64_t> shape = layout_shape(t.layout, t.spatial, dims);
  hal_tensor_desc_t tensor = dense(dtype, shape);
  const uint32_t rank = tensor.rank;
  if (t.memory == Memory::kPadded) {
    int64_t stride = 1;
    for (uint32_t d = rank; d-- > 0;) {
      tensor.strides[d] = stride;
      stride *= tensor.shape[d] + (d == rank - 1 ? 3 : 0);
    }
  } else if (t.memory == Memory::kPermuted && t.layout == HAL_CHANNELS_FIRST) {
    // Memory order N, spatial..., C of a channels-first description.
    int64_t stride = 1;
    tensor.strides[1] = stride;
    stride *= tensor.shape[1];
    for (uint32_t d = rank; d-- > 2;) {
      tensor.strides[d] = stride;
      stride *= tensor.shape[d];
    }
    tensor.strides[0] = stride;
  }
  return tensor;
}

void fill_params(hal_op_convolution_desc_t& desc, const ConvCase& t) {
  desc.layout = t.layout;
  desc.spatial_dims = t.spatial;
  desc.groups = static_cast<uint32_t>(t.groups);
  for (uint32_t s = 0; s < t.spatial; ++s) {
    const uint32_t c = 3 - t.spatial + s;
    desc.stride[s] = t.stride[c];
    desc.dilation[s] = t.dilation[c];
    desc.pad_begin[s] = t.pad_begin[c];
    desc.pad_end[s] = t.pad_end[c];
  }
}

hal_op_convolution_desc_t conv_desc(const ConvCase& t, hal_op_kind_t kind) {
  hal_op_convolution_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  fill_params(desc, t);
  const Dims5 x = t.transposed ? out_dims(t) : in_dims(t);
  const Dims5 y = t.transposed ? in_dims(t) : out_dims(t);
  const bool forward = kind == HAL_OP_CONVOLUTION;
  const bool data = kind == HAL_OP_CONVOLUTION_BACKWARD_DATA;
  const bool weights = kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS;
  desc.x = tensor_of(t, data ? t.out_dtype : t.dtype, x);
  desc.w = tensor_of(t, weights ? t.out_dtype : t.dtype, filter_dims(t));
  desc.y = tensor_of(t, forward ? t.out_dtype : t.dtype, y);
  if (t.transposed) desc.flags |= HAL_CONV_TRANSPOSED;
  if (t.bias && !data) {
    desc.flags |= HAL_CONV_BIAS;
    desc.bias = dense(forward ? HAL_DTYPE_F32 : t.out_dtype, {y.c});
  }
  if (t.residual && forward) {
    desc.flags |= HAL_CONV_RESIDUAL;
    desc.residual = t.residual_is_y ? desc.y : tensor_of(t, HAL_DTYPE_F32, y);
  }
  if (forward) desc.activation = t.act;
  return desc;
}

// ---- float64 references (SPEC.md §17.6.8) ---------------------------------

struct Geometry {
  Dims5 in, out, filter;
  Indexer in_index, out_index, filter_index;
  const ConvCase* t;
};

Geometry geometry(const ConvCase& t) {
  Geometry g;
  g.in = in_dims(t);
  g.out = out_dims(t);
  g.filter = filter_dims(t);
  g.in_index = {t.layout, g.in};
  g.out_index = {t.layout, g.out};
  g.filter_index = {t.layout, g.filter};
  g.t = &t;
  return g;
}

// Calls visit(in_index, out_index, filter_index) for every (input, output,
// tap) triple of the convolution whose input position lies inside.
void for_each_tap(const Geometry& g, const std::function<void(int64_t, int64_t, int64_t)>& visit) {
  const ConvCase& t = *g.t;
  const int64_t cig = t.c_in / t.groups, cog = t.c_out / t.groups;
  for (int64_t n = 0; n < g.out.n; ++n)
    for (int64_t co = 0; co < g.out.c; ++co)
      for (int64_t od = 0; od < g.out.d; ++od)
        for (int64_t oh = 0; oh < g.out.h; ++oh)
          for (int64_t ow = 0; ow < g.out.w; ++ow) {
            const int64_t o = g.out_index(n, co, od, oh, ow);
            const int64_t group = co / cog;
            for (int64_t ci = 0; ci < cig; ++ci)
              for (int64_t kd = 0; kd < g.filter.d; ++kd)
                for (int64_t kh = 0; kh < g.filter.h; ++kh)
                  for (int64_t kw = 0; kw < g.filter.w; ++kw) {
                    const int64_t z = od * t.stride[0] - t.pad_begin[0] + kd * t.dilation[0];
                    const int64_t y = oh * t.stride[1] - t.pad_begin[1] + kh * t.dilation[1];
                    const int64_t x = ow * t.stride[2] - t.pad_begin[2] + kw * t.dilation[2];
                    if (z < 0 || z >= g.in.d || y < 0 || y >= g.in.h || x < 0 || x >= g.in.w)
                      continue;
                    visit(g.in_index(n, group * cig + ci, z, y, x), o,
                          g.filter_index(co, ci, kd, kh, kw));
                  }
          }
}

std::vector<double> ref_conv(const Geometry& g, const std::vector<double>& in,
                             const std::vector<double>& w) {
  std::vector<double> out(static_cast<size_t>(g.out.count()), 0.0);
  for_each_tap(g, [&](int64_t i, int64_t o, int64_t f) { out[o] += in[i] * w[f]; });
  return out;
}

// The data gradient, by scattering every output back through its taps.
std::vector<double> ref_conv_adjoint(const Geometry& g, const std::vector<double>& grad_out,
                                     const std::vector<double>& w) {
  std::vector<double> grad_in(static_cast<size_t>(g.in.count()), 0.0);
  for_each_tap(g, [&](int64_t i, int64_t o, int64_t f) { grad_in[i] += grad_out[o] * w[f]; });
  return grad_in;
}

std::vector<double> ref_conv_weights(const Geometry& g, const std::vector<double>& in,
                                     const std::vector<double>& grad_out) {
  std::vector<double> grad_w(static_cast<size_t>(g.filter.count()), 0.0);
  for_each_tap(g, [&](int64_t i, int64_t o, int64_t f) { grad_w[f] += grad_out[o] * in[i]; });
  return grad_w;
}

// Per channel: the sum of a tensor of |dims| over N and space.
std::vector<double> ref_channel_sums(const Dims5& dims, const Indexer& index,
                                     const std::vector<double>& values) {
  std::vector<double> sums(static_cast<size_t>(dims.c), 0.0);
  for (int64_t n = 0; n < dims.n; ++n)
    for (int64_t c = 0; c < dims.c; ++c)
      for (int64_t d = 0; d < dims.d; ++d)
        for (int64_t h = 0; h < dims.h; ++h)
          for (int64_t w = 0; w < dims.w; ++w) sums[c] += values[index(n, c, d, h, w)];
  return sums;
}

int64_t taps(const ConvCase& t) {
  return t.kernel[0] * t.kernel[1] * t.kernel[2];
}

// ---- the device -----------------------------------------------------------

void check_forward(TestContext& ctx, const ConvCase& t) {
  const hal_op_convolution_desc_t desc = conv_desc(t, HAL_OP_CONVOLUTION);
  const std::string what = describe("convolution", t);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, t.plan_flags);
  std::mt19937_64 random(ctx.random()());
  const Geometry g = geometry(t);
  DeviceTensor x(ctx.device(), desc.x, random_values(random, numel(desc.x), t.dtype));
  DeviceTensor w(ctx.device(), desc.w, random_values(random, numel(desc.w), t.dtype));
  const Dims5 y_dims = t.transposed ? g.in : g.out;
  DeviceTensor bias(ctx.device(), t.bias ? desc.bias : dense(HAL_DTYPE_F32, {1}),
                    random_values(random, t.bias ? y_dims.c : 1, HAL_DTYPE_F32));
  const auto residual_values =
      random_values(random, numel(desc.y), t.residual_is_y ? t.out_dtype : HAL_DTYPE_F32);
  DeviceTensor y(ctx.device(), desc.y,
                 t.residual_is_y ? residual_values : std::vector<double>(numel(desc.y), 7.0));
  DeviceTensor residual(ctx.device(),
                        t.residual && !t.residual_is_y ? desc.residual : dense(HAL_DTYPE_F32, {1}),
                        t.residual && !t.residual_is_y ? residual_values : std::vector<double>{0});
  const auto xv = x.download(), wv = w.download(), bv = bias.download();
  execute(ctx, plan,
          {x.data(), w.data(), t.bias ? bias.data() : nullptr,
           t.residual ? (t.residual_is_y ? y.data() : residual.data()) : nullptr, y.data()});
  std::vector<double> expected = t.transposed ? ref_conv_adjoint(g, xv, wv) : ref_conv(g, xv, wv);
  const Indexer y_index = t.transposed ? g.in_index : g.out_index;
  for (int64_t n = 0; n < y_dims.n; ++n)
    for (int64_t c = 0; c < y_dims.c; ++c)
      for (int64_t d = 0; d < y_dims.d; ++d)
        for (int64_t h = 0; h < y_dims.h; ++h)
          for (int64_t w2 = 0; w2 < y_dims.w; ++w2) {
            const int64_t i = y_index(n, c, d, h, w2);
            double v = expected[i];
            if (t.bias) v += bv[c];
            if (t.residual) v += residual_values[i];
            expected[i] = reference::activation(t.act, v);
          }
  const double terms =
      static_cast<double>((t.transposed ? t.c_out : t.c_in) / t.groups * taps(t)) + 2;
  expect_close(y.download(), expected, tolerance_for(t.out_dtype, terms), what + " y");
  y.check_untouched(what + " y");
}

void check_backward_data(TestContext& ctx, const ConvCase& t) {
  const hal_op_convolution_desc_t desc = conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_DATA);
  const std::string what = describe("convolution_backward_data", t);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, t.plan_flags);
  std::mt19937_64 random(ctx.random()());
  const Geometry g = geometry(t);
  DeviceTensor grad_y(ctx.device(), desc.y, random_values(random, numel(desc.y), t.dtype));
  DeviceTensor w(ctx.device(), desc.w, random_values(random, numel(desc.w), t.dtype));
  DeviceTensor grad_x(ctx.device(), desc.x, std::vector<double>(numel(desc.x), 7.0));
  execute(ctx, plan, {grad_y.data(), w.data(), grad_x.data()});
  const auto gy = grad_y.download(), wv = w.download();
  const std::vector<double> expected =
      t.transposed ? ref_conv(g, gy, wv) : ref_conv_adjoint(g, gy, wv);
  const double terms = static_cast<double>((t.transposed ? t.c_in : t.c_out) / t.groups * taps(t));
  expect_close(grad_x.download(), expected, tolerance_for(t.out_dtype, terms), what + " grad_x");
  grad_x.check_untouched(what + " grad_x");
}

void check_backward_weights(TestContext& ctx, const ConvCase& t) {
  const hal_op_convolution_desc_t desc = conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS);
  const std::string what = describe("convolution_backward_weights", t);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, t.plan_flags);
  std::mt19937_64 random(ctx.random()());
  const Geometry g = geometry(t);
  DeviceTensor x(ctx.device(), desc.x, random_values(random, numel(desc.x), t.dtype));
  DeviceTensor grad_y(ctx.device(), desc.y, random_values(random, numel(desc.y), t.dtype));
  DeviceTensor grad_w(ctx.device(), desc.w, std::vector<double>(numel(desc.w), 7.0));
  const Dims5 y_dims = t.transposed ? g.in : g.out;
  DeviceTensor grad_bias(ctx.device(), t.bias ? desc.bias : dense(HAL_DTYPE_F32, {1}),
                         std::vector<double>(t.bias ? y_dims.c : 1, 7.0));
  execute(ctx, plan, {x.data(), grad_y.data(), grad_w.data(), t.bias ? grad_bias.data() : nullptr});
  const auto xv = x.download(), gy = grad_y.download();
  // Transposed: the convolution's input side is grad_y, its output side x.
  const std::vector<double> expected =
      t.transposed ? ref_conv_weights(g, gy, xv) : ref_conv_weights(g, xv, gy);
  const Dims5& sum_dims = t.transposed ? g.in : g.out;
  const double positions = static_cast<double>(g.out.n * g.out.positions());
  expect_close(grad_w.download(), expected, tolerance_for(t.out_dtype, positions),
               what + " grad_w");
  grad_w.check_untouched(what + " grad_w");
  if (t.bias) {
    const auto sums = ref_channel_sums(sum_dims, t.transposed ? g.in_index : g.out_index, gy);
    expect_close(grad_bias.download(), sums,
                 tolerance_for(t.out_dtype, static_cast<double>(sum_dims.n * sum_dims.positions())),
                 what + " grad_bias");
  }
}

void check_all(TestContext& ctx, const ConvCase& t) {
  check_forward(ctx, t);
  ConvCase backward = t;
  backward.bias = t.bias;
  backward.residual = false;
  backward.act = HAL_ACTIVATION_NONE;
  check_backward_data(ctx, backward);
  check_backward_weights(ctx, backward);
}

constexpr hal_dtype_t kConvolutionDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_channel_layout_t kConvolutionLayouts[] = {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST};

}  // namespace

HALCONFORM_TEST("operators.convolution.dtypes_and_layouts",
                "2-D forward and both backwards: f32/f16/bf16 x channels-first/last, odd sizes",
                {}) {
  for (hal_dtype_t dtype : kConvolutionDtypes) {
    for (hal_channel_layout_t layout : kConvolutionLayouts) {
      ConvCase t;
      t.layout = layout;
      t.dtype = t.out_dtype = dtype;
      t.n = 2;
      t.c_in = 5;
      t.c_out = 6;
      t.in = {1, 9, 7};
      t.bias = true;
      check_all(ctx, t);
    }
  }
  ConvCase mixed;  // 16-bit inputs, f32 outputs
  mixed.dtype = HAL_DTYPE_BF16;
  mixed.out_dtype = HAL_DTYPE_F32;
  mixed.c_in = 8;
  mixed.c_out = 16;
  check_all(ctx, mixed);
}

HALCONFORM_TEST("operators.convolution.geometry",
                "stride, asymmetric and large padding, dilation with stride, 1x1, big channels",
                {}) {
  for (hal_channel_layout_t layout : kConvolutionLayouts) {
    ConvCase t;
    t.layout = layout;
    t.n = 2;
    t.c_in = 4;
    t.c_out = 6;
    t.in = {1, 11, 10};
    t.stride = {1, 2, 3};
    t.pad_begin = {0, 2, 0};
    t.pad_end = {0, 0, 1};  // asymmetric: the wrong side shifts every output
    check_all(ctx, t);
    t.stride = {1, 2, 2};
    t.dilation = {1, 2, 3};  // dilation with stride
    t.pad_begin = {0, 1, 3};
    t.pad_end = {0, 3, 2};
    check_all(ctx, t);
    t.stride = {1, 1, 1};
    t.dilation = {1, 1, 1};
    t.pad_begin = {0, 3, 4};  // padding past the kernel's half-width: edge outputs see only zeros
    t.pad_end = {0, 4, 3};
    t.in = {1, 5, 6};
    check_all(ctx, t);
    ConvCase pointwise = t;  // 1x1, stride 2, and enough channels for full 64-wide tiles
    pointwise.kernel = {1, 1, 1};
    pointwise.pad_begin = pointwise.pad_end = {0, 0, 0};
    pointwise.stride = {1, 2, 2};
    pointwise.c_in = 70;
    pointwise.c_out = 67;
    pointwise.in = {1, 9, 9};
    check_all(ctx, pointwise);
  }
}

HALCONFORM_TEST("operators.convolution.groups", "grouped and depthwise convolutions", {}) {
  for (hal_channel_layout_t layout : kConvolutionLayouts) {
    ConvCase grouped;
    grouped.layout = layout;
    grouped.c_in = 6;
    grouped.c_out = 9;
    grouped.groups = 3;
    grouped.stride = {1, 2, 1};
    grouped.bias = true;
    check_all(ctx, grouped);
    ConvCase wide = grouped;  // groups with 64-wide tiles
    wide.c_in = 32;
    wide.c_out = 80;
    wide.groups = 2;
    check_all(ctx, wide);
    ConvCase depthwise;
    depthwise.layout = layout;
    depthwise.c_in = depthwise.c_out = depthwise.groups = 8;
    depthwise.in = {1, 12, 11};
    depthwise.dilation = {1, 2, 2};
    depthwise.pad_begin = {0, 2, 2};
    depthwise.pad_end = {0, 2, 2};
    check_all(ctx, depthwise);
    ConvCase multiplier = depthwise;  // depthwise with 2 filters per channel
    multiplier.c_out = 16;
    multiplier.stride = {1, 2, 2};
    check_all(ctx, multiplier);
  }
}

HALCONFORM_TEST("operators.convolution.dims_1d_3d", "1-D and 3-D convolutions", {}) {
  for (hal_channel_layout_t layout : kConvolutionLayouts) {
    ConvCase one;
    one.layout = layout;
    one.spatial = 1;
    one.in = {1, 1, 23};
    one.kernel = {1, 1, 5};
    one.stride = {1, 1, 2};
    one.dilation = {1, 1, 2};
    one.pad_begin = {0, 0, 3};
    one.pad_end = {0, 0, 1};
    one.c_in = 6;
    one.c_out = 4;
    one.groups = 2;
    one.bias = true;
    check_all(ctx, one);
    ConvCase three;
    three.layout = layout;
    three.spatial = 3;
    three.in = {5, 6, 7};
    three.kernel = {3, 2, 3};
    three.stride = {2, 1, 2};
    three.pad_begin = {1, 0, 1};
    three.pad_end = {0, 1, 2};
    three.c_in = 3;
    three.c_out = 5;
    three.bias = true;
    check_all(ctx, three);
  }
}

HALCONFORM_TEST("operators.convolution.epilogues_and_views",
                "bias, residual (also in place), every activation; padded and permuted views", {}) {
  ConvCase t;
  t.c_in = 4;
  t.c_out = 5;
  t.bias = true;
  for (hal_activation_t act : {HAL_ACTIVATION_RELU, HAL_ACTIVATION_GELU_TANH,
                               HAL_ACTIVATION_GELU_ERF, HAL_ACTIVATION_SILU}) {
    t.act = act;
    t.residual = act == HAL_ACTIVATION_RELU || act == HAL_ACTIVATION_SILU;
    t.residual_is_y = act == HAL_ACTIVATION_SILU;
    check_forward(ctx, t);
  }
  for (Memory memory : {Memory::kPadded, Memory::kPermuted}) {
    ConvCase view;
    view.memory = memory;
    view.c_in = 6;
    view.c_out = 4;
    view.stride = {1, 2, 1};
    view.bias = true;
    check_all(ctx, view);
  }
  ConvCase padded_last;
  padded_last.layout = HAL_CHANNELS_LAST;
  padded_last.memory = Memory::kPadded;
  padded_last.c_in = 5;
  padded_last.c_out = 3;
  check_all(ctx, padded_last);
}

HALCONFORM_TEST("operators.convolution.transposed",
                "transposed convolution: forward, both backwards, output padding, groups", {}) {
  for (hal_channel_layout_t layout : kConvolutionLayouts) {
    ConvCase t;
    t.layout = layout;
    t.transposed = true;
    t.c_in = 4;         // the transposed op's output channels
    t.c_out = 6;        // its input channels
    t.in = {1, 10, 9};  // y's size: 9 and 10 are 2 * 4 + 1 + output padding 0 / 1
    t.stride = {1, 2, 2};
    t.pad_begin = {0, 1, 1};
    t.pad_end = {0, 1, 1};
    t.bias = true;
    t.act = HAL_ACTIVATION_RELU;
    check_all(ctx, t);
    t.groups = 2;
    t.dilation = {1, 2, 1};
    t.pad_begin = {0, 2, 0};
    t.pad_end = {0, 0, 2};
    t.act = HAL_ACTIVATION_NONE;
    check_all(ctx, t);
  }
}

HALCONFORM_TEST("operators.convolution.split_reduction",
                "weight gradient over a long reduction (split into chunks), deterministic", {}) {
  ConvCase t;
  t.n = 4;
  t.c_in = 16;
  t.c_out = 24;
  t.in = {1, 33, 31};
  t.bias = true;
  t.plan_flags = HAL_OP_PLAN_DETERMINISTIC;
  check_backward_weights(ctx, t);
  ConvCase depthwise = t;
  depthwise.c_in = depthwise.c_out = depthwise.groups = 4;
  check_backward_weights(ctx, depthwise);
}

HALCONFORM_TEST("operators.convolution.determinism",
                "deterministic plans give the same bits twice (forward and both backwards)", {}) {
  for (hal_op_kind_t kind : {HAL_OP_CONVOLUTION, HAL_OP_CONVOLUTION_BACKWARD_DATA,
                             HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS}) {
    ConvCase t;
    t.n = 3;
    t.c_in = 24;
    t.c_out = 20;
    t.in = {1, 15, 14};
    t.stride = {1, 2, 2};
    const hal_op_convolution_desc_t desc = conv_desc(t, kind);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
    std::mt19937_64 random(ctx.random()());
    const bool data = kind == HAL_OP_CONVOLUTION_BACKWARD_DATA;
    const bool weights = kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS;
    DeviceTensor x(ctx.device(), desc.x, random_values(random, numel(desc.x), t.dtype));
    DeviceTensor w(ctx.device(), desc.w, random_values(random, numel(desc.w), t.dtype));
    DeviceTensor y(ctx.device(), desc.y, random_values(random, numel(desc.y), t.dtype));
    std::vector<void*> operands =
        weights ? std::vector<void*>{x.data(), y.data(), w.data(), nullptr}
        : data  ? std::vector<void*>{y.data(), w.data(), x.data()}
                : std::vector<void*>{x.data(), w.data(), nullptr, nullptr, y.data()};
    const DeviceTensor& out = weights ? w : data ? x : y;
    execute(ctx, plan, operands);
    const auto first = out.download();
    execute(ctx, plan, operands);
    expect_identical(first, out.download(), describe(ctx.test().name.c_str(), t));
  }
}

HALCONFORM_TEST("operators.convolution.finite_differences",
                "both gradients (reference and device) against central differences", {}) {
  for (bool transposed : {false, true}) {
    ConvCase t;
    t.n = 1;
    t.c_in = 4;
    t.c_out = 2;
    t.groups = 2;
    t.in = {1, 5, 6};
    t.kernel = {1, 3, 2};
    t.stride = {1, 2, 1};
    t.pad_begin = {0, 1, 0};
    t.pad_end = {0, 0, 1};
    t.transposed = transposed;
    const Geometry g = geometry(t);
    std::mt19937_64 random(ctx.random()());
    // The op's x (input side, or output side when transposed), w, and the
    // weights r of the loss L = sum(r * op(x, w)).
    const Dims5 x_dims = transposed ? g.out : g.in;
    const Dims5 y_dims = transposed ? g.in : g.out;
    std::vector<double> xv = random_values(random, x_dims.count(), HAL_DTYPE_F32);
    std::vector<double> wv = random_values(random, g.filter.count(), HAL_DTYPE_F32);
    const std::vector<double> r = random_values(random, y_dims.count(), HAL_DTYPE_F32);
    const auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
      const std::vector<double> y = transposed ? ref_conv_adjoint(g, xs, ws) : ref_conv(g, xs, ws);
      double sum = 0;
      for (size_t i = 0; i < y.size(); ++i) sum += r[i] * y[i];
      return sum;
    };
    const auto central = [&](std::vector<double>& values, bool of_x) {
      std::vector<double> grad(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        const double keep = values[i];
        const double h = 1e-3;
        values[i] = keep + h;
        const double up = of_x ? loss(values, wv) : loss(xv, values);
        values[i] = keep - h;
        const double down = of_x ? loss(values, wv) : loss(xv, values);
        values[i] = keep;
        grad[i] = (up - down) / (2 * h);
      }
      return grad;
    };
    const std::vector<double> fd_x = central(xv, true);
    const std::vector<double> fd_w = central(wv, false);
    const std::string what = describe("convolution finite differences", t);
    // The reference gradients are the derivative of the reference forward.
    expect_close(transposed ? ref_conv(g, r, wv) : ref_conv_adjoint(g, r, wv), fd_x, {1e-9, 1e-9},
                 what + " reference grad_x");
    expect_close(transposed ? ref_conv_weights(g, r, xv) : ref_conv_weights(g, xv, r), fd_w,
                 {1e-9, 1e-9}, what + " reference grad_w");
    // The device's.
    const hal_op_convolution_desc_t data = conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_DATA);
    const hal_op_convolution_desc_t weights = conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS);
    Plan data_plan, weights_plan;
    plan_or_skip(ctx, &data.header, data_plan);
    plan_or_skip(ctx, &weights.header, weights_plan);
    DeviceTensor x(ctx.device(), data.x, xv);
    DeviceTensor w(ctx.device(), data.w, wv);
    DeviceTensor gy(ctx.device(), data.y, r);
    DeviceTensor gx(ctx.device(), data.x);
    DeviceTensor gw(ctx.device(), data.w);
    execute(ctx, data_plan, {gy.data(), w.data(), gx.data()});
    execute(ctx, weights_plan, {x.data(), gy.data(), gw.data(), nullptr});
    expect_close(gx.download(), fd_x, tolerance_for(HAL_DTYPE_F32, 16), what + " device grad_x");
    expect_close(gw.download(), fd_w, tolerance_for(HAL_DTYPE_F32, 16), what + " device grad_w");
  }
}

namespace {

// |tensor| with dimension |d| of extent |extent|, dense again.
hal_tensor_desc_t reshaped(const hal_tensor_desc_t& tensor, uint32_t d, int64_t extent) {
  std::vector<int64_t> shape = shape_of(tensor);
  shape[d] = extent;
  return dense(tensor.dtype, shape);
}

}  // namespace

HALCONFORM_TEST("operators.convolution.errors", "every descriptor rule gives its message", {}) {
  ConvCase t;
  t.c_in = 4;
  t.c_out = 6;
  t.groups = 2;
  const hal_op_convolution_desc_t good = conv_desc(t, HAL_OP_CONVOLUTION);
  {
    Plan plan;
    plan_or_skip(ctx, &good.header, plan);
  }
  hal_op_convolution_desc_t d = good;
  d.layout = static_cast<hal_channel_layout_t>(2);
  expect_refused_naming(ctx, d, "desc->layout");
  d = good;
  d.spatial_dims = 4;
  expect_refused_naming(ctx, d, "desc->spatial_dims");
  d = good;
  d.flags = 1u << 7;
  expect_refused_naming(ctx, d, "desc->flags");
  d = good;
  d.groups = 0;
  expect_refused_naming(ctx, d, "desc->groups");
  d = good;
  d.groups = 4;  // 6 output channels are not divisible by 4
  expect_refused_naming(ctx, d, "desc->groups 4 must divide");
  d = good;
  d.stride[1] = 0;
  expect_refused_naming(ctx, d, "desc->stride[1]");
  d = good;
  d.dilation[0] = -1;
  expect_refused_naming(ctx, d, "desc->dilation[0]");
  d = good;
  d.pad_end[0] = -2;
  expect_refused_naming(ctx, d, "desc->pad_end[0]");
  d = good;
  d.activation = static_cast<hal_activation_t>(9);
  expect_refused_naming(ctx, d, "desc->activation");
  d = good;
  d.w = reshaped(d.w, 1, 4);  // C_in / groups is 2
  expect_refused_naming(ctx, d, "filters of 2 channels");
  d = good;
  d.w = reshaped(d.w, 0, 5);
  expect_refused_naming(ctx, d, "must have 6 filters");
  d = good;
  d.y = reshaped(d.y, 2, d.y.shape[2] + 1);  // the output size does not follow from the geometry
  expect_refused_naming(ctx, d, "spatial dimension 0: y has extent");
  d = good;
  d.y = reshaped(d.y, 0, 3);
  expect_refused_naming(ctx, d, "batch sizes");
  d = good;
  d.x = reshaped(d.x, 3, 1);  // W of 1, unpadded, under a kernel of 3: no output
  d.pad_begin[1] = 0;
  d.pad_end[1] = 0;
  expect_refused_naming(ctx, d, "the output size is <= 0");
  d = good;
  d.w.dtype = HAL_DTYPE_BF16;
  expect_refused_naming(ctx, d, "must have one dtype");
  d = good;
  d.x.dtype = HAL_DTYPE_I32;
  expect_refused_naming(ctx, d, "x has dtype i32");
  d = good;
  d.y.strides[0] = 0;
  expect_refused_naming(ctx, d, "reaches one element from two indices");
  d = good;
  d.x.rank = 3;
  expect_refused_naming(ctx, d, "x has rank 3");
  d = good;
  d.flags |= HAL_CONV_BIAS;
  d.bias = dense(HAL_DTYPE_F32, {5});
  expect_refused_naming(ctx, d, "bias");
  d = good;
  d.flags |= HAL_CONV_RESIDUAL;
  d.residual = dense(HAL_DTYPE_F32, {1, 1});
  expect_refused_naming(ctx, d, "residual");
  d = good;
  d.reserved = 1;
  expect_refused_naming(ctx, d, "desc->reserved");
  hal_op_convolution_desc_t data = conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_DATA);
  data.activation = HAL_ACTIVATION_RELU;
  expect_refused_naming(ctx, data, "HAL_ACTIVATION_NONE");
  data = conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_DATA);
  data.flags |= HAL_CONV_BIAS;
  expect_refused_naming(ctx, data, "HAL_CONV_BIAS");
  hal_op_convolution_desc_t weights = conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS);
  weights.flags |= HAL_CONV_RESIDUAL;
  expect_refused_naming(ctx, weights, "HAL_CONV_RESIDUAL");
  weights = conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS);
  weights.w.strides[1] = 0;  // grad_w is an output
  expect_refused_naming(ctx, weights, "grad_w (desc->w)");
  ConvCase transposed = t;
  transposed.transposed = true;
  transposed.stride = {1, 2, 2};
  hal_op_convolution_desc_t tr = conv_desc(transposed, HAL_OP_CONVOLUTION);
  tr.y = reshaped(tr.y, 2, tr.y.shape[2] + 2);  // past the output padding the stride allows
  expect_refused_naming(ctx, tr, "the transposed convolution of");

  // Execution: too little workspace, and a missing bias, write nothing.
  ConvCase split;
  split.n = 4;
  split.c_in = 16;
  split.c_out = 24;
  split.in = {1, 33, 31};
  const hal_op_convolution_desc_t wdesc = conv_desc(split, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS);
  Plan plan;
  plan_or_skip(ctx, &wdesc.header, plan);
  const size_t needed = plan.info().workspace_bytes;
  DeviceTensor x(ctx.device(), wdesc.x, std::vector<double>(numel(wdesc.x), 1.0));
  DeviceTensor gy(ctx.device(), wdesc.y, std::vector<double>(numel(wdesc.y), 1.0));
  DeviceTensor gw(ctx.device(), wdesc.w, std::vector<double>(numel(wdesc.w), 7.0));
  if (needed > 0) {
    DeviceTensor workspace(ctx.device(), dense(HAL_DTYPE_U8, {static_cast<int64_t>(needed)}));
    HC_EXPECT_RESULT(try_execute(ctx, plan, {x.data(), gy.data(), gw.data(), nullptr}, {},
                                 workspace.data(), needed - 1),
                     HAL_ERROR_INVALID_ARGUMENT);
  }
  for (double v : gw.download()) HC_REQUIRE(v == 7.0, "a refused execution wrote grad_w");
}
