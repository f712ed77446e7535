// HAL_OP_BATCH_NORM(_BACKWARD) and HAL_OP_GROUP_NORM(_BACKWARD) against
// float64 references written from SPEC.md §17.6.10: statistics in float64,
// the running statistics' momentum update with the unbiased variance, the
// gradients from their closed forms, and those closed forms against
// central differences of the reference forward (training mode, where the
// statistics depend on x) on small cases, as the device's gradients are.
#include <array>
#include <cmath>
#include <optional>

#include "channel_layout.hpp"
#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

struct NormCase {
  bool group = false;  // group norm (else batch norm)
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  uint32_t spatial = 2;
  hal_dtype_t dtype = HAL_DTYPE_F32;        // x, y, grad_y, grad_x
  hal_dtype_t param_dtype = HAL_DTYPE_F32;  // scale, shift, running stats, parameter gradients
  Dims5 dims{2, 6, 1, 5, 7};
  int64_t groups = 1;
  bool training = true, scale = true, shift = true, relu = false;
  bool update = true, save = true;
  double momentum = 0.1;
  float epsilon = 1e-5f;
  double offset = 0;  // added to x (a large common offset tests the two-pass variance)
  bool in_place = false;
  bool padded_view = false;
};

std::string describe(const char* op, const NormCase& t) {
  std::string text = std::string(op) + " " + dtype_label(t.dtype) + " " + layout_label(t.layout) +
                     " x" + dims_label(t.dims, t.spatial);
  if (t.group) text += " groups " + std::to_string(t.groups);
  if (!t.group) text += t.training ? " training" : " inference";
  if (!t.scale) text += " no-scale";
  if (!t.shift) text += " no-shift";
  if (t.relu) text += " relu";
  if (t.offset != 0) text += " offset " + std::to_string(static_cast<int>(t.offset));
  if (t.in_place) text += " in-place";
  if (t.padded_view) text += " padded-view";
  return text;
}

hal_tensor_desc_t activation_tensor(const NormCase& t, hal_dtype_t dtype) {
  hal_tensor_desc_t tensor = dense(dtype, layout_shape(t.layout, t.spatial, t.dims));
  if (t.padded_view) {
    int64_t stride = 1;
    for (uint32_t d = tensor.rank; d-- > 0;) {
      tensor.strides[d] = stride;
      stride *= tensor.shape[d] + (d == tensor.rank - 1 ? 1 : 0);
    }
  }
  return tensor;
}

// A per-channel vector, every other element used (stride 2) for the
// parameters, to exercise strides.
hal_tensor_desc_t channel_vector(hal_dtype_t dtype, int64_t channels, int64_t stride = 1) {
  hal_tensor_desc_t tensor = dense(dtype, {channels});
  tensor.strides[0] = stride;
  return tensor;
}

hal_op_batch_norm_desc_t batch_norm_desc(const NormCase& t, bool backward) {
  hal_op_batch_norm_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = backward ? HAL_OP_BATCH_NORM_BACKWARD : HAL_OP_BATCH_NORM;
  desc.layout = t.layout;
  desc.epsilon = t.epsilon;
  const int64_t c = t.dims.c;
  if (t.training) desc.flags |= HAL_BATCH_NORM_TRAINING;
  if (t.scale) desc.flags |= HAL_BATCH_NORM_SCALE;
  if (t.shift) desc.flags |= HAL_BATCH_NORM_SHIFT;
  if (t.relu) desc.flags |= HAL_BATCH_NORM_RELU;
  if (!backward && t.training && t.update) desc.flags |= HAL_BATCH_NORM_UPDATE_RUNNING;
  if (!backward && t.training && t.save) desc.flags |= HAL_BATCH_NORM_SAVE_STATS;
  if (backward) desc.flags |= HAL_BATCH_NORM_GRAD_SCALE | HAL_BATCH_NORM_GRAD_SHIFT;
  desc.x = activation_tensor(t, t.dtype);
  desc.y = activation_tensor(t, t.dtype);
  desc.scale = channel_vector(t.param_dtype, c, 2);
  desc.shift = channel_vector(t.param_dtype, c);
  desc.running_mean = channel_vector(t.param_dtype, c);
  desc.running_var = channel_vector(t.param_dtype, c, 3);
  desc.saved_mean = channel_vector(HAL_DTYPE_F32, c);
  desc.saved_rstd = channel_vector(HAL_DTYPE_F32, c);
  desc.grad_y = activation_tensor(t, t.dtype);
  desc.grad_x = t.in_place ? desc.grad_y : activation_tensor(t, t.dtype);
  desc.grad_scale = channel_vector(t.param_dtype, c);
  desc.grad_shift = channel_vector(t.param_dtype, c, 2);
  return desc;
}

hal_op_group_norm_desc_t group_norm_desc(const NormCase& t, bool backward) {
  hal_op_group_norm_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = backward ? HAL_OP_GROUP_NORM_BACKWARD : HAL_OP_GROUP_NORM;
  desc.layout = t.layout;
  desc.groups = static_cast<uint32_t>(t.groups);
  desc.epsilon = t.epsilon;
  const int64_t c = t.dims.c;
  if (t.scale) desc.flags |= HAL_GROUP_NORM_SCALE;
  if (t.shift) desc.flags |= HAL_GROUP_NORM_SHIFT;
  if (!backward && t.save) desc.flags |= HAL_GROUP_NORM_SAVE_STATS;
  if (backward) desc.flags |= HAL_GROUP_NORM_GRAD_SCALE | HAL_GROUP_NORM_GRAD_SHIFT;
  desc.x = activation_tensor(t, t.dtype);
  desc.y = activation_tensor(t, t.dtype);
  desc.scale = channel_vector(t.param_dtype, c, 2);
  desc.shift = channel_vector(t.param_dtype, c);
  desc.mean = dense(HAL_DTYPE_F32, {t.dims.n, t.groups});
  desc.rstd = dense(HAL_DTYPE_F32, {t.dims.n, t.groups});
  desc.grad_y = activation_tensor(t, t.dtype);
  desc.grad_x = t.in_place ? desc.grad_y : activation_tensor(t, t.dtype);
  desc.grad_scale = channel_vector(t.param_dtype, c);
  desc.grad_shift = channel_vector(t.param_dtype, c, 2);
  return desc;
}

// ---- float64 references ----------------------------------------------------

// The statistics segment of element (n, c): its channel (batch norm) or its
// sample's group (group norm).
int64_t segment_of(const NormCase& t, int64_t n, int64_t c) {
  return t.group ? n * t.groups + c / (t.dims.c / t.groups) : c;
}
int64_t segment_count(const NormCase& t) {
  return t.group ? t.dims.n * t.groups : t.dims.c;
}
int64_t segment_size(const NormCase& t) {
  return t.group ? (t.dims.c / t.groups) * t.dims.positions() : t.dims.n * t.dims.positions();
}

template <class Visit>
void for_each_element(const NormCase& t, Visit visit) {
  const Indexer index{t.layout, t.dims};
  for (int64_t n = 0; n < t.dims.n; ++n)
    for (int64_t c = 0; c < t.dims.c; ++c)
      for (int64_t d = 0; d < t.dims.d; ++d)
        for (int64_t h = 0; h < t.dims.h; ++h)
          for (int64_t w = 0; w < t.dims.w; ++w) visit(index(n, c, d, h, w), n, c);
}

struct Stats {
  std::vector<double> mean, var, rstd;  // per segment
};

Stats ref_stats(const NormCase& t, const std::vector<double>& x) {
  const int64_t segments = segment_count(t);
  const double m = static_cast<double>(segment_size(t));
  Stats s;
  s.mean.assign(segments, 0.0);
  s.var.assign(segments, 0.0);
  for_each_element(t,
                   [&](int64_t i, int64_t n, int64_t c) { s.mean[segment_of(t, n, c)] += x[i]; });
  for (double& v : s.mean) v /= m;
  for_each_element(t, [&](int64_t i, int64_t n, int64_t c) {
    const double d = x[i] - s.mean[segment_of(t, n, c)];
    s.var[segment_of(t, n, c)] += d * d;
  });
  for (double& v : s.var) v /= m;
  for (double v : s.var) s.rstd.push_back(1.0 / std::sqrt(v + t.epsilon));
  return s;
}

// y from given statistics (per segment).
std::vector<double> ref_normalize(const NormCase& t, const std::vector<double>& x,
                                  const std::vector<double>& mean, const std::vector<double>& rstd,
                                  const std::vector<double>& scale,
                                  const std::vector<double>& shift) {
  std::vector<double> y(x.size());
  for_each_element(t, [&](int64_t i, int64_t n, int64_t c) {
    const int64_t s = segment_of(t, n, c);
    double v = (x[i] - mean[s]) * rstd[s];
    if (t.scale) v *= scale[c];
    if (t.shift) v += shift[c];
    if (t.relu) v = v > 0 ? v : 0;
    y[i] = v;
  });
  return y;
}

struct Gradients {
  std::vector<double> grad_x, grad_scale, grad_shift;
};

// The closed-form gradients (SPEC.md §17.6.10), from the statistics given.
Gradients ref_gradients(const NormCase& t, const std::vector<double>& x,
                        const std::vector<double>& grad_y, const std::vector<double>& y,
                        const std::vector<double>& mean, const std::vector<double>& rstd,
                        const std::vector<double>& scale) {
  const int64_t segments = segment_count(t);
  const double m = static_cast<double>(segment_size(t));
  const bool batch_statistics = t.group || t.training;
  Gradients g;
  g.grad_x.assign(x.size(), 0.0);
  g.grad_scale.assign(t.dims.c, 0.0);
  g.grad_shift.assign(t.dims.c, 0.0);
  std::vector<double> sum_h(segments, 0.0), sum_hx(segments, 0.0);
  const auto term = [&](int64_t i) { return t.relu && !(y[i] > 0) ? 0.0 : grad_y[i]; };
  for_each_element(t, [&](int64_t i, int64_t n, int64_t c) {
    const int64_t s = segment_of(t, n, c);
    const double xhat = (x[i] - mean[s]) * rstd[s];
    const double h = term(i) * (t.group && t.scale ? scale[c] : 1.0);
    sum_h[s] += h;
    sum_hx[s] += h * xhat;
    g.grad_shift[c] += term(i);
    g.grad_scale[c] += term(i) * xhat;
  });
  for_each_element(t, [&](int64_t i, int64_t n, int64_t c) {
    const int64_t s = segment_of(t, n, c);
    const double xhat = (x[i] - mean[s]) * rstd[s];
    const double sc = t.scale ? scale[c] : 1.0;
    if (t.group) {
      g.grad_x[i] = rstd[s] * (term(i) * sc - sum_h[s] / m - xhat * sum_hx[s] / m);
    } else if (batch_statistics) {
      g.grad_x[i] = sc * rstd[s] * (term(i) - sum_h[s] / m - xhat * sum_hx[s] / m);
    } else {
      g.grad_x[i] = term(i) * sc * rstd[s];
    }
  });
  return g;
}

// Per-channel parameter values as a strided vector holds them (logical order).
std::vector<double> params(std::mt19937_64& random, int64_t count, hal_dtype_t dtype, double low,
                           double high) {
  return random_values(random, count, dtype, low, high);
}

// ---- batch norm on the device ---------------------------------------------

void check_batch_norm(TestContext& ctx, const NormCase& t) {
  const std::string what = describe("batch_norm", t);
  const hal_op_batch_norm_desc_t desc = batch_norm_desc(t, false);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  std::mt19937_64 random(ctx.random()());
  const int64_t c = t.dims.c;
  std::vector<double> xv = random_values(random, numel(desc.x), t.dtype, -2.0, 2.0);
  for (double& v : xv) v = round_to(t.dtype, v + t.offset);
  const auto scale = params(random, c, t.param_dtype, 0.5, 1.5);
  const auto shift = params(random, c, t.param_dtype, -0.5, 0.5);
  const auto run_mean = params(random, c, t.param_dtype, -0.5, 0.5);
  const auto run_var = params(random, c, t.param_dtype, 0.5, 2.0);
  DeviceTensor x(ctx.device(), desc.x, xv);
  DeviceTensor sc(ctx.device(), desc.scale, scale);
  DeviceTensor sh(ctx.device(), desc.shift, shift);
  DeviceTensor rm(ctx.device(), desc.running_mean, run_mean);
  DeviceTensor rv(ctx.device(), desc.running_var, run_var);
  DeviceTensor y(ctx.device(), desc.y, t.in_place ? xv : std::vector<double>(numel(desc.y), 7.0));
  DeviceTensor saved_mean(ctx.device(), desc.saved_mean, std::vector<double>(c, 7.0));
  DeviceTensor saved_rstd(ctx.device(), desc.saved_rstd, std::vector<double>(c, 7.0));
  const bool uses_running = !t.training || t.update;
  std::vector<hal_op_scalar_t> scalars;
  if (t.training && t.update) scalars.push_back({t.momentum, 0, 0});
  execute(ctx, plan,
          {t.in_place ? y.data() : x.data(), t.scale ? sc.data() : nullptr,
           t.shift ? sh.data() : nullptr, uses_running ? rm.data() : nullptr,
           uses_running ? rv.data() : nullptr, y.data(),
           t.training && t.save ? saved_mean.data() : nullptr,
           t.training && t.save ? saved_rstd.data() : nullptr},
          scalars);
  const double m = static_cast<double>(segment_size(t));
  Stats stats;
  if (t.training) {
    stats = ref_stats(t, xv);
  } else {
    stats.mean = run_mean;
    for (double v : run_var) stats.rstd.push_back(1.0 / std::sqrt(v + t.epsilon));
  }
  const auto expected = ref_normalize(t, xv, stats.mean, stats.rstd, scale, shift);
  // The output's error: the f32 statistics over m elements, scaled by rstd
  // (a large offset costs its rounding / std), then the rounding to dtype.
  Tolerance tolerance = tolerance_for(t.dtype, m);
  if (t.offset != 0) tolerance.atol = std::max(tolerance.atol, 2e-3);
  expect_close(y.download(), expected, tolerance, what + " y");
  y.check_untouched(what + " y");
  if (t.training && t.save) {
    Tolerance mean_tolerance = tolerance_for(HAL_DTYPE_F32, m);
    mean_tolerance.atol *= 1 + std::fabs(t.offset);
    expect_close(saved_mean.download(), stats.mean, mean_tolerance, what + " saved_mean");
    expect_close(saved_rstd.download(), stats.rstd,
                 {tolerance_for(HAL_DTYPE_F32, m).atol * (1 + std::fabs(t.offset)), 1e-4},
                 what + " saved_rstd");
  }
  if (t.training && t.update) {
    std::vector<double> new_mean(c), new_var(c);
    for (int64_t k = 0; k < c; ++k) {
      new_mean[k] = (1 - t.momentum) * run_mean[k] + t.momentum * stats.mean[k];
      new_var[k] = (1 - t.momentum) * run_var[k] + t.momentum * stats.var[k] * m / (m - 1);
    }
    Tolerance running = tolerance_for(t.param_dtype, m);
    running.atol *= 1 + std::fabs(t.offset);
    expect_close(rm.download(), new_mean, running, what + " running_mean");
    expect_close(rv.download(), new_var, running, what + " running_var (unbiased)");
  } else if (t.training) {
    HC_REQUIRE(rm.download() == run_mean && rv.download() == run_var,
               what + ": the running statistics changed without UPDATE_RUNNING");
  }
}

void check_batch_norm_backward(TestContext& ctx, const NormCase& t) {
  const std::string what = describe("batch_norm_backward", t);
  const hal_op_batch_norm_desc_t desc = batch_norm_desc(t, true);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  std::mt19937_64 random(ctx.random()());
  const int64_t c = t.dims.c;
  const auto xv = random_values(random, numel(desc.x), t.dtype, -2.0, 2.0);
  const auto gyv = random_values(random, numel(desc.grad_y), t.dtype);
  const auto scale = params(random, c, t.param_dtype, 0.5, 1.5);
  const auto shift = params(random, c, t.param_dtype, -0.5, 0.5);
  const auto run_mean = params(random, c, t.param_dtype, -0.5, 0.5);
  const auto run_var = params(random, c, t.param_dtype, 0.5, 2.0);
  // The statistics the forward would have saved (f32), and its output y.
  Stats stats;
  if (t.training) {
    stats = ref_stats(t, xv);
    for (double& v : stats.mean) v = round_to(HAL_DTYPE_F32, v);
    for (double& v : stats.rstd) v = round_to(HAL_DTYPE_F32, v);
  } else {
    stats.mean = run_mean;
    for (double v : run_var) stats.rstd.push_back(1.0 / std::sqrt(v + t.epsilon));
  }
  std::vector<double> yv = ref_normalize(t, xv, stats.mean, stats.rstd, scale, shift);
  for (double& v : yv) v = round_to(t.dtype, v);
  DeviceTensor x(ctx.device(), desc.x, xv);
  DeviceTensor gy(ctx.device(), desc.grad_y, gyv);
  DeviceTensor sc(ctx.device(), desc.scale, scale);
  DeviceTensor saved_mean(ctx.device(), desc.saved_mean, stats.mean);
  DeviceTensor saved_rstd(ctx.device(), desc.saved_rstd, stats.rstd);
  DeviceTensor rm(ctx.device(), desc.running_mean, run_mean);
  DeviceTensor rv(ctx.device(), desc.running_var, run_var);
  DeviceTensor y(ctx.device(), desc.y, yv);
  DeviceTensor gx(ctx.device(), t.in_place ? dense(HAL_DTYPE_F32, {1}) : desc.grad_x);
  DeviceTensor gscale(ctx.device(), desc.grad_scale, std::vector<double>(c, 7.0));
  DeviceTensor gshift(ctx.device(), desc.grad_shift, std::vector<double>(c, 7.0));
  execute(
      ctx, plan,
      {x.data(), gy.data(), t.scale ? sc.data() : nullptr, t.training ? saved_mean.data() : nullptr,
       t.training ? saved_rstd.data() : nullptr, t.training ? nullptr : rm.data(),
       t.training ? nullptr : rv.data(), t.relu ? y.data() : nullptr,
       t.in_place ? gy.data() : gx.data(), gscale.data(), gshift.data()});
  const Gradients g = ref_gradients(t, xv, gyv, yv, stats.mean, stats.rstd, scale);
  const double m = static_cast<double>(segment_size(t));
  expect_close(t.in_place ? gy.download() : gx.download(), g.grad_x,
               tolerance_for(t.dtype, 16 + m / 8), what + " grad_x");
  expect_close(gscale.download(), g.grad_scale, tolerance_for(t.param_dtype, m),
               what + " grad_scale");
  expect_close(gshift.download(), g.grad_shift, tolerance_for(t.param_dtype, m),
               what + " grad_shift");
}

// ---- group norm on the device ---------------------------------------------

void check_group_norm(TestContext& ctx, const NormCase& t) {
  const std::string what = describe("group_norm", t);
  const hal_op_group_norm_desc_t desc = group_norm_desc(t, false);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  std::mt19937_64 random(ctx.random()());
  const int64_t c = t.dims.c;
  std::vector<double> xv = random_values(random, numel(desc.x), t.dtype, -2.0, 2.0);
  for (double& v : xv) v = round_to(t.dtype, v + t.offset);
  const auto scale = params(random, c, t.param_dtype, 0.5, 1.5);
  const auto shift = params(random, c, t.param_dtype, -0.5, 0.5);
  DeviceTensor x(ctx.device(), desc.x, xv);
  DeviceTensor sc(ctx.device(), desc.scale, scale);
  DeviceTensor sh(ctx.device(), desc.shift, shift);
  DeviceTensor y(ctx.device(), desc.y, t.in_place ? xv : std::vector<double>(numel(desc.y), 7.0));
  DeviceTensor mean(ctx.device(), desc.mean);
  DeviceTensor rstd(ctx.device(), desc.rstd);
  execute(ctx, plan,
          {t.in_place ? y.data() : x.data(), t.scale ? sc.data() : nullptr,
           t.shift ? sh.data() : nullptr, y.data(), t.save ? mean.data() : nullptr,
           t.save ? rstd.data() : nullptr});
  const Stats stats = ref_stats(t, xv);
  const double m = static_cast<double>(segment_size(t));
  Tolerance tolerance = tolerance_for(t.dtype, m);
  if (t.offset != 0) tolerance.atol = std::max(tolerance.atol, 2e-3);
  expect_close(y.download(), ref_normalize(t, xv, stats.mean, stats.rstd, scale, shift), tolerance,
               what + " y");
  if (t.save) {
    Tolerance stat_tolerance = tolerance_for(HAL_DTYPE_F32, m);
    stat_tolerance.atol *= 1 + std::fabs(t.offset);
    expect_close(mean.download(), stats.mean, stat_tolerance, what + " mean");
    expect_close(rstd.download(), stats.rstd, {stat_tolerance.atol, 1e-4}, what + " rstd");
  }
}

void check_group_norm_backward(TestContext& ctx, const NormCase& t) {
  const std::string what = describe("group_norm_backward", t);
  const hal_op_group_norm_desc_t desc = group_norm_desc(t, true);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  std::mt19937_64 random(ctx.random()());
  const int64_t c = t.dims.c;
  const auto xv = random_values(random, numel(desc.x), t.dtype, -2.0, 2.0);
  const auto gyv = random_values(random, numel(desc.grad_y), t.dtype);
  const auto scale = params(random, c, t.param_dtype, 0.5, 1.5);
  Stats stats = ref_stats(t, xv);
  for (double& v : stats.mean) v = round_to(HAL_DTYPE_F32, v);
  for (double& v : stats.rstd) v = round_to(HAL_DTYPE_F32, v);
  DeviceTensor x(ctx.device(), desc.x, xv);
  DeviceTensor gy(ctx.device(), desc.grad_y, gyv);
  DeviceTensor sc(ctx.device(), desc.scale, scale);
  DeviceTensor mean(ctx.device(), desc.mean, stats.mean);
  DeviceTensor rstd(ctx.device(), desc.rstd, stats.rstd);
  DeviceTensor gx(ctx.device(), t.in_place ? dense(HAL_DTYPE_F32, {1}) : desc.grad_x);
  DeviceTensor gscale(ctx.device(), desc.grad_scale);
  DeviceTensor gshift(ctx.device(), desc.grad_shift);
  execute(ctx, plan,
          {x.data(), gy.data(), t.scale ? sc.data() : nullptr, mean.data(), rstd.data(),
           t.in_place ? gy.data() : gx.data(), gscale.data(), gshift.data()});
  const Gradients g = ref_gradients(t, xv, gyv, xv, stats.mean, stats.rstd, scale);
  const double m = static_cast<double>(segment_size(t));
  expect_close(t.in_place ? gy.download() : gx.download(), g.grad_x,
               tolerance_for(t.dtype, 16 + m / 8), what + " grad_x");
  const double per_channel = static_cast<double>(t.dims.n * t.dims.positions());
  expect_close(gscale.download(), g.grad_scale, tolerance_for(t.param_dtype, per_channel),
               what + " grad_scale");
  expect_close(gshift.download(), g.grad_shift, tolerance_for(t.param_dtype, per_channel),
               what + " grad_shift");
}

constexpr hal_dtype_t kChannelNormDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_channel_layout_t kChannelNormLayouts[] = {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST};

}  // namespace

HALCONFORM_TEST("operators.batch_norm.training",
                "batch statistics, saved statistics, the running update (unbiased variance)", {}) {
  for (hal_dtype_t dtype : kChannelNormDtypes) {
    for (hal_channel_layout_t layout : kChannelNormLayouts) {
      NormCase t;
      t.layout = layout;
      t.dtype = dtype;
      check_batch_norm(ctx, t);
    }
  }
  NormCase t;
  t.offset = 100;  // a one-pass E[x^2] - E[x]^2 in f32 loses the variance here
  check_batch_norm(ctx, t);
  t.offset = 0;
  t.scale = t.shift = false;
  t.save = false;
  t.relu = true;
  t.in_place = true;
  check_batch_norm(ctx, t);
  NormCase other;  // no running update, bf16 parameters, 1-D and 3-D, a padded view
  other.update = false;
  other.param_dtype = HAL_DTYPE_BF16;
  other.spatial = 1;
  other.dims = {3, 5, 1, 1, 11};
  check_batch_norm(ctx, other);
  other.spatial = 3;
  other.layout = HAL_CHANNELS_LAST;
  other.dims = {2, 4, 3, 4, 5};
  other.padded_view = true;
  other.momentum = 1.0;
  other.update = true;
  check_batch_norm(ctx, other);
}

HALCONFORM_TEST("operators.batch_norm.inference", "the running statistics, fused relu", {}) {
  for (hal_dtype_t dtype : kChannelNormDtypes) {
    for (hal_channel_layout_t layout : kChannelNormLayouts) {
      NormCase t;
      t.training = false;
      t.layout = layout;
      t.dtype = dtype;
      t.relu = layout == HAL_CHANNELS_LAST;
      check_batch_norm(ctx, t);
    }
  }
}

HALCONFORM_TEST("operators.batch_norm.backward",
                "training and inference gradients, fused relu, grad_x in place", {}) {
  for (hal_dtype_t dtype : kChannelNormDtypes) {
    for (hal_channel_layout_t layout : kChannelNormLayouts) {
      NormCase t;
      t.layout = layout;
      t.dtype = dtype;
      check_batch_norm_backward(ctx, t);
      t.training = false;
      check_batch_norm_backward(ctx, t);
    }
  }
  NormCase t;
  t.relu = true;
  t.in_place = true;
  check_batch_norm_backward(ctx, t);
  t.scale = false;
  t.dims = {4, 3, 1, 33, 40};  // several chunks per channel
  check_batch_norm_backward(ctx, t);
}

HALCONFORM_TEST("operators.group_norm.forward_backward",
                "group norm: groups 1, 2 and C; saved statistics; gradients", {}) {
  for (hal_dtype_t dtype : kChannelNormDtypes) {
    for (hal_channel_layout_t layout : kChannelNormLayouts) {
      for (int64_t groups : {1, 2, 6}) {
        NormCase t;
        t.group = true;
        t.layout = layout;
        t.dtype = dtype;
        t.groups = groups;
        check_group_norm(ctx, t);
        check_group_norm_backward(ctx, t);
      }
    }
  }
  NormCase t;
  t.group = true;
  t.groups = 3;
  t.offset = 100;
  t.in_place = true;
  check_group_norm(ctx, t);
  t.offset = 0;
  t.scale = false;
  t.spatial = 3;
  t.dims = {2, 6, 2, 3, 4};
  check_group_norm(ctx, t);
  check_group_norm_backward(ctx, t);
}

HALCONFORM_TEST("operators.channel_norm.finite_differences",
                "batch and group norm gradients against central differences", {}) {
  for (int which = 0; which < 3; ++which) {
    NormCase t;
    t.group = which == 2;
    t.groups = 2;
    t.training = which != 1;
    t.dims = {2, 4, 1, 2, 3};
    t.relu = which == 0;
    std::mt19937_64 random(ctx.random()());
    std::vector<double> xv = random_values(random, t.dims.count(), HAL_DTYPE_F32, -2, 2);
    std::vector<double> scale = random_values(random, t.dims.c, HAL_DTYPE_F32, 0.5, 1.5);
    std::vector<double> shift = random_values(random, t.dims.c, HAL_DTYPE_F32, -0.5, 0.5);
    const auto run_mean = random_values(random, t.dims.c, HAL_DTYPE_F32, -0.5, 0.5);
    const auto run_var = random_values(random, t.dims.c, HAL_DTYPE_F32, 0.5, 2.0);
    const auto r = random_values(random, t.dims.count(), HAL_DTYPE_F32);
    const auto forward = [&](const std::vector<double>& xs, const std::vector<double>& sc,
                             const std::vector<double>& sh) {
      Stats s;
      if (t.training) {
        s = ref_stats(t, xs);
      } else {
        s.mean = run_mean;
        for (double v : run_var) s.rstd.push_back(1.0 / std::sqrt(v + t.epsilon));
      }
      return ref_normalize(t, xs, s.mean, s.rstd, sc, sh);
    };
    const auto loss = [&](const std::vector<double>& xs, const std::vector<double>& sc,
                          const std::vector<double>& sh) {
      const auto y = forward(xs, sc, sh);
      double sum = 0;
      for (size_t i = 0; i < y.size(); ++i) sum += r[i] * y[i];
      return sum;
    };
    const auto central = [&](std::vector<double>& values) {
      std::vector<double> grad(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        const double keep = values[i];
        values[i] = keep + 1e-6;
        const double up = loss(xv, scale, shift);
        values[i] = keep - 1e-6;
        const double down = loss(xv, scale, shift);
        values[i] = keep;
        grad[i] = (up - down) / 2e-6;
      }
      return grad;
    };
    const auto fd_x = central(xv);
    const auto fd_scale = central(scale);
    const auto fd_shift = central(shift);
    Stats stats;
    if (t.training || t.group) {
      stats = ref_stats(t, xv);
    } else {
      stats.mean = run_mean;
      for (double v : run_var) stats.rstd.push_back(1.0 / std::sqrt(v + t.epsilon));
    }
    const auto y = forward(xv, scale, shift);
    const Gradients ref = ref_gradients(t, xv, r, y, stats.mean, stats.rstd, scale);
    const std::string what =
        describe(t.group ? "group_norm finite differences" : "batch_norm finite differences", t);
    expect_close(ref.grad_x, fd_x, {1e-6, 1e-6}, what + " reference grad_x");
    expect_close(ref.grad_scale, fd_scale, {1e-6, 1e-6}, what + " reference grad_scale");
    expect_close(ref.grad_shift, fd_shift, {1e-6, 1e-6}, what + " reference grad_shift");
    // The device, from f32 statistics.
    std::vector<double> mean32 = stats.mean, rstd32 = stats.rstd;
    for (double& v : mean32) v = round_to(HAL_DTYPE_F32, v);
    for (double& v : rstd32) v = round_to(HAL_DTYPE_F32, v);
    std::vector<double> device_x, device_scale, device_shift;
    const Tolerance tolerance{2e-5, 1e-4};
    if (t.group) {
      const hal_op_group_norm_desc_t desc = group_norm_desc(t, true);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor dx(ctx.device(), desc.x, xv), dgy(ctx.device(), desc.grad_y, r);
      DeviceTensor dsc(ctx.device(), desc.scale, scale);
      DeviceTensor dm(ctx.device(), desc.mean, mean32), ds(ctx.device(), desc.rstd, rstd32);
      DeviceTensor dgx(ctx.device(), desc.grad_x), dgs(ctx.device(), desc.grad_scale);
      DeviceTensor dgb(ctx.device(), desc.grad_shift);
      execute(ctx, plan,
              {dx.data(), dgy.data(), dsc.data(), dm.data(), ds.data(), dgx.data(), dgs.data(),
               dgb.data()});
      device_x = dgx.download();
      device_scale = dgs.download();
      device_shift = dgb.download();
    } else {
      const hal_op_batch_norm_desc_t desc = batch_norm_desc(t, true);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      std::vector<double> y32 = y;
      for (double& v : y32) v = round_to(HAL_DTYPE_F32, v);
      DeviceTensor dx(ctx.device(), desc.x, xv), dgy(ctx.device(), desc.grad_y, r);
      DeviceTensor dsc(ctx.device(), desc.scale, scale);
      DeviceTensor dm(ctx.device(), desc.saved_mean, mean32);
      DeviceTensor ds(ctx.device(), desc.saved_rstd, rstd32);
      DeviceTensor drm(ctx.device(), desc.running_mean, run_mean);
      DeviceTensor drv(ctx.device(), desc.running_var, run_var);
      DeviceTensor dy(ctx.device(), desc.y, y32);
      DeviceTensor dgx(ctx.device(), desc.grad_x), dgs(ctx.device(), desc.grad_scale);
      DeviceTensor dgb(ctx.device(), desc.grad_shift);
      execute(ctx, plan,
              {dx.data(), dgy.data(), dsc.data(), t.training ? dm.data() : nullptr,
               t.training ? ds.data() : nullptr, t.training ? nullptr : drm.data(),
               t.training ? nullptr : drv.data(), t.relu ? dy.data() : nullptr, dgx.data(),
               dgs.data(), dgb.data()});
      device_x = dgx.download();
      device_scale = dgs.download();
      device_shift = dgb.download();
    }
    expect_close(device_x, fd_x, tolerance, what + " device grad_x");
    expect_close(device_scale, fd_scale, tolerance, what + " device grad_scale");
    expect_close(device_shift, fd_shift, tolerance, what + " device grad_shift");
  }
}

HALCONFORM_TEST("operators.channel_norm.errors", "every batch and group norm rule", {}) {
  NormCase t;
  const hal_op_batch_norm_desc_t good = batch_norm_desc(t, false);
  hal_op_batch_norm_desc_t d = good;
  d.running_var = dense(HAL_DTYPE_F32, {5});  // 6 channels
  expect_refused_naming(ctx, d, "running_var");
  d = good;
  d.saved_rstd.dtype = HAL_DTYPE_BF16;
  expect_refused_naming(ctx, d, "saved_rstd has dtype bf16");
  d = good;
  d.scale = dense(HAL_DTYPE_F32, {7});
  expect_refused_naming(ctx, d, "scale");
  d = good;
  d.epsilon = -1.0f;
  expect_refused_naming(ctx, d, "desc->epsilon");
  d = good;
  d.flags &= ~static_cast<uint32_t>(HAL_BATCH_NORM_TRAINING);
  expect_refused_naming(ctx, d, "need HAL_BATCH_NORM_TRAINING");
  d = good;
  d.flags |= HAL_BATCH_NORM_GRAD_SCALE;
  expect_refused_naming(ctx, d, "GRAD_SCALE and GRAD_SHIFT are the backward's");
  d = good;
  d.y = dense(d.y.dtype, {2, 5, 5, 7});
  expect_refused_naming(ctx, d, "must have the shape of");
  d = good;
  d.layout = static_cast<hal_channel_layout_t>(3);
  expect_refused_naming(ctx, d, "desc->layout");
  d = good;
  d.x = dense(HAL_DTYPE_F32, {1, 6});  // one value per channel, updating the running variance
  d.y = d.x;
  expect_refused_naming(ctx, d, "unbiased");
  hal_op_batch_norm_desc_t b = batch_norm_desc(t, true);
  b.flags |= HAL_BATCH_NORM_UPDATE_RUNNING;
  expect_refused_naming(ctx, b, "batch_norm_backward does not take");
  b = batch_norm_desc(t, true);
  b.saved_mean = dense(HAL_DTYPE_F32, {3});
  expect_refused_naming(ctx, b, "saved_mean");

  // Momentum outside [0, 1] fails the execution and writes nothing.
  Plan plan;
  plan_or_skip(ctx, &good.header, plan);
  const int64_t c = t.dims.c;
  DeviceTensor x(ctx.device(), good.x, std::vector<double>(numel(good.x), 1.0));
  DeviceTensor sc(ctx.device(), good.scale, std::vector<double>(c, 1.0));
  DeviceTensor sh(ctx.device(), good.shift, std::vector<double>(c, 0.0));
  DeviceTensor rm(ctx.device(), good.running_mean, std::vector<double>(c, 0.0));
  DeviceTensor rv(ctx.device(), good.running_var, std::vector<double>(c, 1.0));
  DeviceTensor y(ctx.device(), good.y, std::vector<double>(numel(good.y), 7.0));
  DeviceTensor smean(ctx.device(), good.saved_mean, std::vector<double>(c, 7.0));
  DeviceTensor srstd(ctx.device(), good.saved_rstd, std::vector<double>(c, 7.0));
  const size_t workspace_bytes = plan.info().workspace_bytes;
  std::optional<DeviceTensor> workspace;
  if (workspace_bytes > 0) {
    workspace.emplace(ctx.device(), dense(HAL_DTYPE_U8, {static_cast<int64_t>(workspace_bytes)}));
  }
  HC_EXPECT_RESULT(
      try_execute(ctx, plan,
                  {x.data(), sc.data(), sh.data(), rm.data(), rv.data(), y.data(), smean.data(),
                   srstd.data()},
                  {{1.5, 0, 0}}, workspace ? workspace->data() : nullptr, workspace_bytes),
      HAL_ERROR_INVALID_ARGUMENT);
  for (double v : y.download()) HC_REQUIRE(v == 7.0, "a refused batch_norm wrote y");

  NormCase g;
  g.group = true;
  g.groups = 2;
  const hal_op_group_norm_desc_t ggood = group_norm_desc(g, false);
  hal_op_group_norm_desc_t gd = ggood;
  gd.groups = 4;  // 6 channels
  expect_refused_naming(ctx, gd, "desc->groups 4");
  gd = ggood;
  gd.mean = dense(HAL_DTYPE_F32, {2, 3});
  expect_refused_naming(ctx, gd, "mean");
  gd = ggood;
  gd.flags |= HAL_GROUP_NORM_GRAD_SHIFT;
  expect_refused_naming(ctx, gd, "group_norm does not take");
  hal_op_group_norm_desc_t gb = group_norm_desc(g, true);
  gb.rstd.dtype = HAL_DTYPE_F16;
  expect_refused_naming(ctx, gb, "rstd has dtype f16");
}
