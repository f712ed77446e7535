// HAL_OP_POOLING and HAL_OP_POOLING_BACKWARD against float64 references
// written from SPEC.md §17.6.9: each window enumerated from its definition
// (fixed or adaptive), the maximum with its tie rule and flat index, the
// average with its divisor; the backward by scattering every output's
// gradient into its window (not the per-input gather a kernel uses), and
// checked against central differences on a small case.
#include <array>
#include <cmath>
#include <limits>

#include "channel_layout.hpp"
#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

using Triple = std::array<int64_t, 3>;

struct PoolCase {
  hal_pooling_kind_t kind = HAL_POOLING_MAX;
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  uint32_t spatial = 2;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  hal_dtype_t index_dtype = HAL_DTYPE_I64;
  int64_t n = 2, c = 3;
  Triple in{1, 11, 10};
  Triple kernel{1, 3, 3}, stride{1, 2, 2}, dilation{1, 1, 1};
  Triple pad_begin{0, 1, 1}, pad_end{0, 1, 1};
  Triple adaptive_out{1, 1, 1};
  bool indices = true, include_pad = false, ceil_mode = false, adaptive = false;
  int64_t divisor = 0;
  bool padded_view = false;
  int quantize = 0;  // > 0: values rounded to 1/quantize, so windows hold ties
};

Triple output_size(const PoolCase& t) {
  if (t.adaptive) return t.adaptive_out;
  Triple out{1, 1, 1};
  for (int s = 0; s < 3; ++s) {
    const int64_t span =
        t.in[s] + t.pad_begin[s] + t.pad_end[s] - (t.dilation[s] * (t.kernel[s] - 1) + 1);
    int64_t o = span / t.stride[s] + 1;
    if (t.ceil_mode) {
      o = (span + t.stride[s] - 1) / t.stride[s] + 1;
      if ((o - 1) * t.stride[s] >= t.in[s] + t.pad_begin[s]) --o;
    }
    out[s] = o;
  }
  return out;
}

Dims5 x_dims(const PoolCase& t) {
  return {t.n, t.c, t.in[0], t.in[1], t.in[2]};
}
Dims5 y_dims(const PoolCase& t) {
  const Triple o = output_size(t);
  return {t.n, t.c, o[0], o[1], o[2]};
}

std::string text3(const Triple& v, uint32_t spatial) {
  std::string text;
  for (uint32_t s = 3 - spatial; s < 3; ++s)
    text += (text.empty() ? "" : "x") + std::to_string(v[s]);
  return text;
}

std::string describe(const char* op, const PoolCase& t) {
  std::string text = std::string(op) + (t.kind == HAL_POOLING_MAX ? " max " : " average ") +
                     dtype_label(t.dtype) + " " + layout_label(t.layout) + " x" +
                     dims_label(x_dims(t), t.spatial) + " y" + dims_label(y_dims(t), t.spatial);
  if (t.adaptive) {
    text += " adaptive";
  } else {
    text += " kernel " + text3(t.kernel, t.spatial) + " stride " + text3(t.stride, t.spatial) +
            " dilation " + text3(t.dilation, t.spatial) + " pad " + text3(t.pad_begin, t.spatial) +
            "+" + text3(t.pad_end, t.spatial);
  }
  if (t.ceil_mode) text += " ceil_mode";
  if (t.include_pad) text += " count_include_pad";
  if (t.divisor != 0) text += " divisor " + std::to_string(t.divisor);
  if (t.padded_view) text += " padded-view";
  return text;
}

hal_tensor_desc_t tensor_of(const PoolCase& t, hal_dtype_t dtype, const Dims5& dims) {
  hal_tensor_desc_t tensor = dense(dtype, layout_shape(t.layout, t.spatial, dims));
  if (t.padded_view) {
    int64_t stride = 1;
    for (uint32_t d = tensor.rank; d-- > 0;) {
      tensor.strides[d] = stride;
      stride *= tensor.shape[d] + (d == tensor.rank - 1 ? 2 : 0);
    }
  }
  return tensor;
}

hal_op_pooling_desc_t pool_desc(const PoolCase& t, bool backward) {
  hal_op_pooling_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = backward ? HAL_OP_POOLING_BACKWARD : HAL_OP_POOLING;
  desc.pooling = t.kind;
  desc.layout = t.layout;
  desc.spatial_dims = t.spatial;
  const bool max = t.kind == HAL_POOLING_MAX;
  if (max && t.indices) desc.flags |= HAL_POOLING_INDICES;
  if (t.include_pad) desc.flags |= HAL_POOLING_COUNT_INCLUDE_PAD;
  if (t.ceil_mode) desc.flags |= HAL_POOLING_CEIL_MODE;
  if (t.adaptive) desc.flags |= HAL_POOLING_ADAPTIVE;
  desc.divisor_override = t.divisor;
  if (!t.adaptive) {
    for (uint32_t s = 0; s < t.spatial; ++s) {
      const uint32_t c = 3 - t.spatial + s;
      desc.kernel[s] = t.kernel[c];
      desc.stride[s] = t.stride[c];
      desc.dilation[s] = t.dilation[c];
      desc.pad_begin[s] = t.pad_begin[c];
      desc.pad_end[s] = t.pad_end[c];
    }
  }
  desc.x = tensor_of(t, t.dtype, x_dims(t));
  desc.y = tensor_of(t, t.dtype, y_dims(t));
  if (max && t.indices) desc.indices = tensor_of(t, t.index_dtype, y_dims(t));
  return desc;
}

// ---- float64 references ----------------------------------------------------

// The positions of window o along one dimension, and those counted by an
// average's divisor.
struct Window {
  std::vector<int64_t> inside;  // positions inside x, in order
  int64_t padded_count = 0;     // taps inside [-pad_begin, i + pad_end)
};

Window window(const PoolCase& t, int s, int64_t o, int64_t out) {
  Window win;
  if (t.adaptive) {
    const int64_t start = (o * t.in[s]) / out;
    const int64_t end = ((o + 1) * t.in[s] + out - 1) / out;
    for (int64_t p = start; p < end; ++p) win.inside.push_back(p);
    win.padded_count = end - start;
    return win;
  }
  for (int64_t k = 0; k < t.kernel[s]; ++k) {
    const int64_t p = o * t.stride[s] - t.pad_begin[s] + k * t.dilation[s];
    if (p >= 0 && p < t.in[s]) win.inside.push_back(p);
    if (p >= -t.pad_begin[s] && p < t.in[s] + t.pad_end[s]) ++win.padded_count;
  }
  return win;
}

struct PoolReference {
  std::vector<double> y, indices;
};

// Visits every output with its three windows.
template <class Visit>
void for_each_window(const PoolCase& t, Visit visit) {
  const Dims5 yd = y_dims(t);
  for (int64_t n = 0; n < yd.n; ++n)
    for (int64_t c = 0; c < yd.c; ++c)
      for (int64_t od = 0; od < yd.d; ++od)
        for (int64_t oh = 0; oh < yd.h; ++oh)
          for (int64_t ow = 0; ow < yd.w; ++ow)
            visit(n, c, od, oh, ow, window(t, 0, od, yd.d), window(t, 1, oh, yd.h),
                  window(t, 2, ow, yd.w));
}

double divisor_of(const PoolCase& t, const Window& a, const Window& b, const Window& w) {
  if (t.divisor > 0) return static_cast<double>(t.divisor);
  if (t.include_pad) return static_cast<double>(a.padded_count * b.padded_count * w.padded_count);
  return static_cast<double>(a.inside.size() * b.inside.size() * w.inside.size());
}

PoolReference ref_pool(const PoolCase& t, const std::vector<double>& x) {
  const Dims5 xd = x_dims(t), yd = y_dims(t);
  const Indexer xi{t.layout, xd}, yi{t.layout, yd};
  PoolReference ref;
  ref.y.assign(static_cast<size_t>(yd.count()), 0.0);
  ref.indices.assign(static_cast<size_t>(yd.count()), -1.0);
  for_each_window(t, [&](int64_t n, int64_t c, int64_t od, int64_t oh, int64_t ow, const Window& a,
                         const Window& b, const Window& w) {
    const int64_t o = yi(n, c, od, oh, ow);
    double best = -std::numeric_limits<double>::infinity();
    int64_t best_index = -1;
    double sum = 0;
    for (int64_t pd : a.inside)
      for (int64_t ph : b.inside)
        for (int64_t pw : w.inside) {
          const double v = x[xi(n, c, pd, ph, pw)];
          sum += v;
          // The first element; then a larger one, or any NaN (the last wins).
          if (best_index < 0 || v > best || std::isnan(v)) {
            best = v;
            best_index = (pd * xd.h + ph) * xd.w + pw;
          }
        }
    if (t.kind == HAL_POOLING_MAX) {
      ref.y[o] = best;
      ref.indices[o] = static_cast<double>(best_index);
    } else {
      ref.y[o] = sum / divisor_of(t, a, b, w);
    }
  });
  return ref;
}

// The backward, scattering each output's gradient into its window.
std::vector<double> ref_pool_backward(const PoolCase& t, const std::vector<double>& grad_y,
                                      const std::vector<double>& indices) {
  const Dims5 xd = x_dims(t), yd = y_dims(t);
  const Indexer xi{t.layout, xd}, yi{t.layout, yd};
  std::vector<double> grad_x(static_cast<size_t>(xd.count()), 0.0);
  for_each_window(t, [&](int64_t n, int64_t c, int64_t od, int64_t oh, int64_t ow, const Window& a,
                         const Window& b, const Window& w) {
    const int64_t o = yi(n, c, od, oh, ow);
    if (t.kind == HAL_POOLING_MAX) {
      const auto flat = static_cast<int64_t>(indices[o]);
      if (flat < 0) return;
      const int64_t pw = flat % xd.w, ph = (flat / xd.w) % xd.h, pd = flat / (xd.w * xd.h);
      grad_x[xi(n, c, pd, ph, pw)] += grad_y[o];
      return;
    }
    const double divide = divisor_of(t, a, b, w);
    for (int64_t pd : a.inside)
      for (int64_t ph : b.inside)
        for (int64_t pw : w.inside) grad_x[xi(n, c, pd, ph, pw)] += grad_y[o] / divide;
  });
  return grad_x;
}

std::vector<double> input_values(std::mt19937_64& random, const PoolCase& t, int64_t count) {
  std::vector<double> values = random_values(random, count, t.dtype, -4.0, 4.0);
  if (t.quantize > 0) {
    for (double& v : values) v = std::round(v * t.quantize) / t.quantize;
  }
  return values;
}

// Forward then backward on the device, each against the reference.
void check_pool(TestContext& ctx, const PoolCase& t) {
  const std::string what = describe("pooling", t);
  const hal_op_pooling_desc_t desc = pool_desc(t, false);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  std::mt19937_64 random(ctx.random()());
  const bool indices = t.kind == HAL_POOLING_MAX && t.indices;
  DeviceTensor x(ctx.device(), desc.x, input_values(random, t, numel(desc.x)));
  DeviceTensor y(ctx.device(), desc.y, std::vector<double>(numel(desc.y), 7.0));
  DeviceTensor idx(ctx.device(), indices ? desc.indices : dense(HAL_DTYPE_I32, {1}),
                   std::vector<double>(indices ? numel(desc.indices) : 1, 7.0));
  execute(ctx, plan, {x.data(), y.data(), indices ? idx.data() : nullptr});
  const PoolReference ref = ref_pool(t, x.download());
  // Max is exact (one element, its dtype); an average is a sum of the
  // window over its count.
  const double window_size = static_cast<double>(t.kernel[0] * t.kernel[1] * t.kernel[2]);
  expect_close(y.download(), ref.y,
               t.kind == HAL_POOLING_MAX ? Tolerance{0, 0} : tolerance_for(t.dtype, window_size),
               what + " y");
  y.check_untouched(what + " y");
  if (indices) {
    expect_close(idx.download(), ref.indices, {0, 0}, what + " indices");
    idx.check_untouched(what + " indices");
  }
  // The backward, with the forward's indices.
  if (t.kind == HAL_POOLING_MAX && !t.indices) return;
  const std::string back = describe("pooling_backward", t);
  const hal_op_pooling_desc_t bdesc = pool_desc(t, true);
  Plan bplan;
  plan_or_skip(ctx, &bdesc.header, bplan);
  DeviceTensor grad_y(ctx.device(), bdesc.y, random_values(random, numel(bdesc.y), t.dtype));
  DeviceTensor grad_x(ctx.device(), bdesc.x, std::vector<double>(numel(bdesc.x), 7.0));
  execute(ctx, bplan, {grad_y.data(), indices ? idx.data() : nullptr, grad_x.data()});
  const std::vector<double> expected = ref_pool_backward(t, grad_y.download(), ref.indices);
  expect_close(grad_x.download(), expected, tolerance_for(t.dtype, window_size), back + " grad_x");
  grad_x.check_untouched(back + " grad_x");
}

constexpr hal_dtype_t kPoolingDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_channel_layout_t kPoolingLayouts[] = {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST};

}  // namespace

HALCONFORM_TEST("operators.pooling.max", "max pooling and its indices and backward", {}) {
  for (hal_dtype_t dtype : kPoolingDtypes) {
    for (hal_channel_layout_t layout : kPoolingLayouts) {
      PoolCase t;  // ResNet's stem: 3x3, stride 2, padding 1
      t.layout = layout;
      t.dtype = dtype;
      t.index_dtype = dtype == HAL_DTYPE_F16 ? HAL_DTYPE_I32 : HAL_DTYPE_I64;
      check_pool(ctx, t);
    }
  }
  PoolCase t;
  t.kernel = {1, 2, 3};
  t.dilation = {1, 3, 2};  // dilation with stride
  t.stride = {1, 2, 1};
  t.pad_begin = {0, 2, 0};  // asymmetric, at most half the dilated window
  t.pad_end = {0, 0, 2};
  check_pool(ctx, t);
  t.ceil_mode = true;
  t.in = {1, 12, 9};
  check_pool(ctx, t);
  PoolCase ties;  // few distinct values: the first maximum's index
  ties.quantize = 1;
  ties.in = {1, 8, 9};
  ties.stride = {1, 1, 1};
  check_pool(ctx, ties);
  ties.layout = HAL_CHANNELS_LAST;
  ties.padded_view = true;
  check_pool(ctx, ties);
  PoolCase plain;  // no indices
  plain.indices = false;
  check_pool(ctx, plain);
}

HALCONFORM_TEST("operators.pooling.max_special_values", "-inf windows and NaN", {}) {
  PoolCase t;
  t.n = 1;
  t.c = 2;
  t.in = {1, 4, 4};
  t.kernel = {1, 2, 2};
  t.stride = {1, 2, 2};
  t.pad_begin = t.pad_end = {0, 0, 0};
  const hal_op_pooling_desc_t desc = pool_desc(t, false);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> values(32, 0.5);
  for (int i = 0; i < 16; ++i) values[i] = -inf;  // channel 0: all -inf
  values[16 + 5] = std::nan("");                  // channel 1, window (0, 0): one NaN
  values[16 + 2] = std::nan("");                  // window (0, 1): two NaNs, the last wins
  values[16 + 3] = std::nan("");
  DeviceTensor x(ctx.device(), desc.x, values);
  DeviceTensor y(ctx.device(), desc.y);
  DeviceTensor idx(ctx.device(), desc.indices);
  execute(ctx, plan, {x.data(), y.data(), idx.data()});
  const PoolReference ref = ref_pool(t, values);
  const std::string what = describe("pooling", t) + " (-inf and NaN)";
  expect_close(y.download(), ref.y, {0, 0}, what + " y");
  expect_close(idx.download(), ref.indices, {0, 0}, what + " indices");
}

HALCONFORM_TEST("operators.pooling.average",
                "average pooling: count_include_pad, ceil mode, divisor_override, asymmetric", {}) {
  for (hal_dtype_t dtype : kPoolingDtypes) {
    for (hal_channel_layout_t layout : kPoolingLayouts) {
      for (bool include : {false, true}) {
        PoolCase t;
        t.kind = HAL_POOLING_AVERAGE;
        t.layout = layout;
        t.dtype = dtype;
        t.include_pad = include;
        check_pool(ctx, t);
      }
    }
  }
  PoolCase t;
  t.kind = HAL_POOLING_AVERAGE;
  t.pad_begin = {0, 1, 0};
  t.pad_end = {0, 0, 1};
  t.kernel = {1, 3, 2};
  t.stride = {1, 2, 2};
  for (bool include : {false, true}) {
    t.include_pad = include;
    t.ceil_mode = true;  // the last window runs past i + pad_end: not counted either way
    t.in = {1, 10, 8};
    check_pool(ctx, t);
  }
  t.include_pad = false;
  t.divisor = 5;
  check_pool(ctx, t);
}

HALCONFORM_TEST("operators.pooling.adaptive", "adaptive average and max pooling", {}) {
  for (hal_pooling_kind_t kind : {HAL_POOLING_AVERAGE, HAL_POOLING_MAX}) {
    for (hal_channel_layout_t layout : kPoolingLayouts) {
      PoolCase t;
      t.kind = kind;
      t.layout = layout;
      t.adaptive = true;
      t.in = {1, 7, 10};
      t.adaptive_out = {1, 3, 4};  // windows of uneven sizes that overlap
      check_pool(ctx, t);
      t.in = {1, 5, 8};
      t.adaptive_out = {1, 7, 1};  // more outputs than inputs; a global pool
      check_pool(ctx, t);
    }
  }
}

HALCONFORM_TEST("operators.pooling.dims_1d_3d", "1-D and 3-D pooling", {}) {
  for (hal_pooling_kind_t kind : {HAL_POOLING_MAX, HAL_POOLING_AVERAGE}) {
    PoolCase one;
    one.kind = kind;
    one.spatial = 1;
    one.in = {1, 1, 17};
    one.kernel = {1, 1, 4};
    one.stride = {1, 1, 3};
    one.pad_begin = {0, 0, 2};
    one.pad_end = {0, 0, 1};
    one.include_pad = kind == HAL_POOLING_AVERAGE;
    check_pool(ctx, one);
    PoolCase three;
    three.kind = kind;
    three.spatial = 3;
    three.layout = HAL_CHANNELS_LAST;
    three.in = {5, 6, 7};
    three.kernel = {2, 3, 2};
    three.stride = {2, 2, 1};
    three.pad_begin = {1, 1, 0};
    three.pad_end = {0, 1, 1};
    check_pool(ctx, three);
  }
}

HALCONFORM_TEST("operators.pooling.finite_differences",
                "the backward against central differences of the reference forward", {}) {
  for (hal_pooling_kind_t kind : {HAL_POOLING_AVERAGE, HAL_POOLING_MAX}) {
    PoolCase t;
    t.kind = kind;
    t.n = 1;
    t.c = 2;
    t.in = {1, 5, 6};
    t.include_pad = kind == HAL_POOLING_AVERAGE;
    std::mt19937_64 random(ctx.random()());
    std::vector<double> xv = random_values(random, x_dims(t).count(), HAL_DTYPE_F32, -4, 4);
    const std::vector<double> r = random_values(random, y_dims(t).count(), HAL_DTYPE_F32);
    const auto loss = [&](const std::vector<double>& xs) {
      const PoolReference ref = ref_pool(t, xs);
      double sum = 0;
      for (size_t i = 0; i < r.size(); ++i) sum += r[i] * ref.y[i];
      return sum;
    };
    std::vector<double> fd(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const double keep = xv[i];
      xv[i] = keep + 1e-6;
      const double up = loss(xv);
      xv[i] = keep - 1e-6;
      const double down = loss(xv);
      xv[i] = keep;
      fd[i] = (up - down) / 2e-6;
    }
    const std::string what = describe("pooling_backward finite differences", t);
    const PoolReference ref = ref_pool(t, xv);
    expect_close(ref_pool_backward(t, r, ref.indices), fd, {1e-7, 1e-7}, what + " reference");
    const hal_op_pooling_desc_t fdesc = pool_desc(t, false);
    const hal_op_pooling_desc_t bdesc = pool_desc(t, true);
    Plan fplan, bplan;
    plan_or_skip(ctx, &fdesc.header, fplan);
    plan_or_skip(ctx, &bdesc.header, bplan);
    const bool max = kind == HAL_POOLING_MAX;
    DeviceTensor x(ctx.device(), fdesc.x, xv);
    DeviceTensor y(ctx.device(), fdesc.y);
    DeviceTensor idx(ctx.device(), max ? fdesc.indices : dense(HAL_DTYPE_I64, {1}));
    DeviceTensor gy(ctx.device(), bdesc.y, r);
    DeviceTensor gx(ctx.device(), bdesc.x);
    execute(ctx, fplan, {x.data(), y.data(), max ? idx.data() : nullptr});
    execute(ctx, bplan, {gy.data(), max ? idx.data() : nullptr, gx.data()});
    expect_close(gx.download(), fd, tolerance_for(HAL_DTYPE_F32, 9), what + " device");
  }
}

namespace {

hal_tensor_desc_t reshaped(const hal_tensor_desc_t& tensor, uint32_t d, int64_t extent) {
  std::vector<int64_t> shape = shape_of(tensor);
  shape[d] = extent;
  return dense(tensor.dtype, shape);
}

}  // namespace

HALCONFORM_TEST("operators.pooling.errors", "every pooling rule gives its message", {}) {
  PoolCase t;
  const hal_op_pooling_desc_t good = pool_desc(t, false);
  {
    Plan plan;
    plan_or_skip(ctx, &good.header, plan);
  }
  hal_op_pooling_desc_t d = good;
  d.pooling = static_cast<hal_pooling_kind_t>(5);
  expect_refused_naming(ctx, d, "desc->pooling");
  d = good;
  d.flags |= HAL_POOLING_COUNT_INCLUDE_PAD;
  expect_refused_naming(ctx, d, "HAL_POOLING_COUNT_INCLUDE_PAD");
  d = good;
  d.pad_begin[1] = 2;  // past half of the 3-wide window
  expect_refused_naming(ctx, d, "past half the window");
  d = good;
  d.kernel[0] = 0;
  expect_refused_naming(ctx, d, "desc->kernel[0]");
  d = good;
  d.y = reshaped(d.y, 2, 5);  // 11 pooled by 3 / 2 / 1+1 gives 6
  expect_refused_naming(ctx, d, "gives 6");
  d = good;
  d.y = reshaped(d.y, 1, 4);
  expect_refused_naming(ctx, d, "the same N and C");
  d = good;
  d.indices.dtype = HAL_DTYPE_F32;
  expect_refused_naming(ctx, d, "indices has dtype f32");
  d = good;
  d.indices = reshaped(d.indices, 3, 1);
  expect_refused_naming(ctx, d, "indices");
  d = good;
  d.divisor_override = 3;
  expect_refused_naming(ctx, d, "divisor_override");
  d = good;
  d.flags |= HAL_POOLING_ADAPTIVE | HAL_POOLING_CEIL_MODE;
  expect_refused_naming(ctx, d, "HAL_POOLING_ADAPTIVE");
  d = good;
  d.x = reshaped(d.x, 2, 1);  // H of 1, unpadded, under a window of 3: no output
  d.pad_begin[0] = d.pad_end[0] = 0;
  expect_refused_naming(ctx, d, "the output size is <= 0");
  PoolCase avg = t;
  avg.kind = HAL_POOLING_AVERAGE;
  hal_op_pooling_desc_t a = pool_desc(avg, false);
  a.dilation[0] = 2;
  expect_refused_naming(ctx, a, "average pooling takes dilation 1");
  hal_op_pooling_desc_t b = pool_desc(t, true);
  b.flags &= ~static_cast<uint32_t>(HAL_POOLING_INDICES);
  expect_refused_naming(ctx, b, "reads the forward's indices");
}
