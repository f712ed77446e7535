// HAL_OP_SOFTMAX, HAL_OP_NORM and their backward ops against float64
// references written from the textbook definitions: forward row by row,
// backward by the analytic gradient and, on small shapes, by central
// differences of the float64 forward.
#include "op_harness.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kNormalizationDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr int64_t kLengths[] = {1, 7, 333, 1025};

// ---- float64 references (rows of n, row-major) -----------------------------

std::vector<double> softmax_reference(const std::vector<double>& x, int64_t n, bool log) {
  std::vector<double> y(x.size());
  for (size_t base = 0; base < x.size(); base += static_cast<size_t>(n)) {
    double m = -kInf;
    for (int64_t c = 0; c < n; ++c) m = std::max(m, x[base + c]);
    double sum = 0;
    for (int64_t c = 0; c < n; ++c) sum += std::exp(x[base + c] - m);
    for (int64_t c = 0; c < n; ++c) {
      y[base + c] = log ? (x[base + c] - m) - std::log(sum) : std::exp(x[base + c] - m) / sum;
    }
  }
  return y;
}

// d/dx of sum(gy * f(x)) with y = f(x): softmax y_i (gy_i - sum_j gy_j y_j),
// log-softmax gy_i - softmax_i sum_j gy_j (softmax_i = exp(y_i)).
std::vector<double> softmax_backward_reference(const std::vector<double>& y,
                                               const std::vector<double>& gy, int64_t n, bool log) {
  std::vector<double> gx(y.size());
  for (size_t base = 0; base < y.size(); base += static_cast<size_t>(n)) {
    double dot = 0, total = 0;
    for (int64_t c = 0; c < n; ++c) {
      dot += gy[base + c] * y[base + c];
      total += gy[base + c];
    }
    for (int64_t c = 0; c < n; ++c) {
      gx[base + c] =
          log ? gy[base + c] - std::exp(y[base + c]) * total : y[base + c] * (gy[base + c] - dot);
    }
  }
  return gx;
}

struct NormResult {
  std::vector<double> y, mean, rstd;
};

// Layernorm (or rmsnorm) of each row; empty gamma/beta mean 1 and 0.
NormResult norm_reference(const std::vector<double>& x, int64_t rows, int64_t n, bool rms,
                          double epsilon, const std::vector<double>& gamma,
                          const std::vector<double>& beta) {
  NormResult out{std::vector<double>(x.size()), std::vector<double>(rows),
                 std::vector<double>(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * n;
    double mean = 0;
    if (!rms) {
      for (int64_t c = 0; c < n; ++c) mean += row[c];
      mean /= static_cast<double>(n);
    }
    double var = 0;
    for (int64_t c = 0; c < n; ++c) var += (row[c] - mean) * (row[c] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1 / std::sqrt(var + epsilon);
    out.mean[r] = mean;
    out.rstd[r] = rstd;
    for (int64_t c = 0; c < n; ++c) {
      double v = (row[c] - mean) * rstd;
      if (!gamma.empty()) v *= gamma[c];
      if (!beta.empty()) v += beta[c];
      out.y[r * n + c] = v;
    }
  }
  return out;
}

struct NormGrads {
  std::vector<double> grad_x, grad_gamma, grad_beta;
};

// The analytic gradient of sum(gy * norm(x)) from the saved mean and rstd:
// with g = gy * gamma and xhat = (x - mean) rstd,
// grad_x = rstd (g - mean(g) - xhat mean(g xhat)) (rmsnorm: no mean(g)),
// grad_gamma = sum_rows gy xhat, grad_beta = sum_rows gy.
NormGrads norm_backward_reference(const std::vector<double>& x, const std::vector<double>& gy,
                                  const std::vector<double>& mean, const std::vector<double>& rstd,
                                  int64_t rows, int64_t n, bool rms,
                                  const std::vector<double>& gamma) {
  NormGrads out{std::vector<double>(x.size()), std::vector<double>(n, 0.0),
                std::vector<double>(n, 0.0)};
  for (int64_t r = 0; r < rows; ++r) {
    const double mu = rms ? 0.0 : mean[r];
    double sum_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < n; ++c) {
      const double g = gy[r * n + c] * (gamma.empty() ? 1.0 : gamma[c]);
      const double xhat = (x[r * n + c] - mu) * rstd[r];
      sum_g += g;
      sum_gx += g * xhat;
      out.grad_gamma[c] += gy[r * n + c] * xhat;
      out.grad_beta[c] += gy[r * n + c];
    }
    for (int64_t c = 0; c < n; ++c) {
      const double g = gy[r * n + c] * (gamma.empty() ? 1.0 : gamma[c]);
      const double xhat = (x[r * n + c] - mu) * rstd[r];
      out.grad_x[r * n + c] = rstd[r] * (g - (rms ? 0.0 : sum_g / static_cast<double>(n)) -
                                         xhat * sum_gx / static_cast<double>(n));
    }
  }
  return out;
}

// Central differences of a scalar function of |values| (each perturbed in turn).
std::vector<double> finite_differences(std::vector<double> values,
                                       const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> grad(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double saved = values[i];
    const double h = 1e-6 * std::max(1.0, std::fabs(saved));
    values[i] = saved + h;
    const double up = f(values);
    values[i] = saved - h;
    const double down = f(values);
    values[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

double weighted_sum(const std::vector<double>& weights, const std::vector<double>& values) {
  double total = 0;
  for (size_t i = 0; i < values.size(); ++i) total += weights[i] * values[i];
  return total;
}

std::vector<double> rounded(hal_dtype_t dtype, std::vector<double> values) {
  for (double& v : values) v = round_to(dtype, v);
  return values;
}

// ---- tolerances ------------------------------------------------------------

// Softmax outputs are probabilities: the error is relative (exp and the
// division each a few ulp, the f32 sum ~sqrt(n) ulp), plus the output's
// rounding; atol only covers values the dtype flushes to 0 (f16 below 6e-8).
Tolerance probability_tolerance(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F16:
      return {1e-7, 2e-3};
    case HAL_DTYPE_BF16:
      return {1e-9, 1.6e-2};
    default:
      return {1e-9, 2e-5};
  }
}

// ---- descriptors -----------------------------------------------------------

hal_op_softmax_desc_t softmax_desc(bool backward, bool log, const hal_tensor_desc_t& x,
                                   const hal_tensor_desc_t& y,
                                   const hal_tensor_desc_t& grad_x = {}) {
  hal_op_softmax_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = backward ? HAL_OP_SOFTMAX_BACKWARD : HAL_OP_SOFTMAX;
  desc.log = log ? 1 : 0;
  desc.x = x;
  desc.y = y;
  desc.grad_x = grad_x;
  return desc;
}

struct NormOptions {
  bool rms = false;
  bool gamma = false;
  bool beta = false;
  bool mean = false;
  bool rstd = false;
  float epsilon = 1e-5f;
};

int64_t rows_of(const hal_tensor_desc_t& x) {
  int64_t rows = 1;
  for (uint32_t d = 0; d + 1 < x.rank; ++d) rows *= x.shape[d];
  return rows;
}

hal_op_norm_desc_t norm_desc(const NormOptions& options, const hal_tensor_desc_t& x,
                             const hal_tensor_desc_t& y, hal_dtype_t parameter_dtype) {
  hal_op_norm_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_NORM;
  desc.norm = options.rms ? HAL_NORM_RMSNORM : HAL_NORM_LAYERNORM;
  desc.epsilon = options.epsilon;
  const int64_t n = x.shape[x.rank - 1];
  const int64_t row_count = rows_of(x);
  desc.has_gamma = options.gamma ? 1 : 0;
  desc.has_beta = options.beta ? 1 : 0;
  desc.has_mean = options.mean ? 1 : 0;
  desc.has_rstd = options.rstd ? 1 : 0;
  desc.x = x;
  desc.y = y;
  if (options.gamma) desc.gamma = dense(parameter_dtype, {n});
  if (options.beta) desc.beta = dense(parameter_dtype, {n});
  if (options.mean) desc.mean = dense(HAL_DTYPE_F32, {row_count});
  if (options.rstd) desc.rstd = dense(HAL_DTYPE_F32, {row_count});
  return desc;
}

std::string norm_label(const NormOptions& options, const hal_tensor_desc_t& x) {
  std::string text = options.rms ? "rmsnorm " : "layernorm ";
  text += label(x);
  if (options.gamma) text += " gamma";
  if (options.beta) text += " beta";
  if (options.mean) text += " mean";
  if (options.rstd) text += " rstd";
  return text;
}

// ---- softmax runs ----------------------------------------------------------

void run_softmax(TestContext& ctx, bool log, const hal_tensor_desc_t& x_layout,
                 const hal_tensor_desc_t& y_layout, double low, double high) {
  hal_op_softmax_desc_t desc = softmax_desc(false, log, x_layout, y_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const int64_t n = x_layout.shape[x_layout.rank - 1];
  const auto x = random_values(ctx.random(), numel(x_layout), x_layout.dtype, low, high);
  DeviceTensor dx(ctx.device(), x_layout, x);
  DeviceTensor dy(ctx.device(), y_layout);
  execute(ctx, plan, {dx.data(), dy.data()});
  const std::string what =
      std::string(log ? "log_softmax " : "softmax ") + label(x_layout) + " -> " + label(y_layout);
  expect_close(dy.download(), softmax_reference(x, n, log),
               log ? tolerance_for(y_layout.dtype, 4) : probability_tolerance(y_layout.dtype),
               what);
  dy.check_untouched(what);
  dx.check_untouched(what + " (x)");
}

void run_softmax_backward(TestContext& ctx, bool log, const hal_tensor_desc_t& y_layout,
                          const hal_tensor_desc_t& gy_layout, const hal_tensor_desc_t& gx_layout,
                          bool in_place = false) {
  hal_op_softmax_desc_t desc = softmax_desc(true, log, gy_layout, y_layout, gx_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const int64_t n = y_layout.shape[y_layout.rank - 1];
  const int64_t count = numel(y_layout);
  // y is a real forward output (rows summing to 1), as the op expects.
  const auto x = random_values(ctx.random(), count, HAL_DTYPE_F32, -4, 4);
  const auto y = rounded(y_layout.dtype, softmax_reference(x, n, log));
  const auto gy = random_values(ctx.random(), count, gy_layout.dtype);
  DeviceTensor dy(ctx.device(), y_layout, y), dgy(ctx.device(), gy_layout, gy);
  DeviceTensor dgx(ctx.device(), gx_layout);
  execute(ctx, plan, {dy.data(), dgy.data(), in_place ? dgy.data() : dgx.data()});
  const std::string what = std::string(log ? "log_softmax" : "softmax") + " backward " +
                           label(y_layout) + " " + label(gy_layout) + " -> " + label(gx_layout) +
                           (in_place ? " in place" : "");
  const auto expected = softmax_backward_reference(y, gy, n, log);
  // softmax: grad_x = y (gy - dot) cancels where gy ~ dot; the error is
  // absolute, about an f32 ulp of gy times y <= 1. log-softmax: O(1) values.
  Tolerance tolerance = tolerance_for(gx_layout.dtype, 4);
  if (!log) tolerance.atol = std::max(2e-6, probability_tolerance(gx_layout.dtype).atol);
  if (!log && gx_layout.dtype != HAL_DTYPE_F32) tolerance.atol = 1e-5;
  expect_close(in_place ? dgy.download() : dgx.download(), expected, tolerance, what);
  if (!in_place) dgx.check_untouched(what);
}

// ---- norm runs -------------------------------------------------------------

void run_norm(TestContext& ctx, const NormOptions& options, const hal_tensor_desc_t& x_layout,
              const hal_tensor_desc_t& y_layout, hal_dtype_t parameter_dtype, double low,
              double high, double offset = 0, bool in_place = false,
              Tolerance y_tolerance = {0, 0}) {
  hal_op_norm_desc_t desc = norm_desc(options, x_layout, y_layout, parameter_dtype);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const int64_t n = x_layout.shape[x_layout.rank - 1];
  const int64_t rows = rows_of(x_layout);
  auto x = random_values(ctx.random(), numel(x_layout), x_layout.dtype, low, high);
  if (offset != 0) {
    for (double& v : x) v += offset;
    x = rounded(x_layout.dtype, x);
  }
  std::vector<double> gamma, beta;
  if (options.gamma) gamma = random_values(ctx.random(), n, parameter_dtype, 0.5, 1.5);
  if (options.beta) beta = random_values(ctx.random(), n, parameter_dtype, -1, 1);
  DeviceTensor dx(ctx.device(), x_layout, x);
  DeviceTensor dgamma(ctx.device(), options.gamma ? desc.gamma : dense(parameter_dtype, {1}),
                      gamma);
  DeviceTensor dbeta(ctx.device(), options.beta ? desc.beta : dense(parameter_dtype, {1}), beta);
  DeviceTensor dy(ctx.device(), y_layout);
  DeviceTensor dmean(ctx.device(), dense(HAL_DTYPE_F32, {std::max<int64_t>(rows, 1)}));
  DeviceTensor drstd(ctx.device(), dense(HAL_DTYPE_F32, {std::max<int64_t>(rows, 1)}));
  void* y_pointer = in_place ? dx.data() : dy.data();
  execute(
      ctx, plan,
      {dx.data(), options.gamma ? dgamma.data() : nullptr, options.beta ? dbeta.data() : nullptr,
       y_pointer, options.mean ? dmean.data() : nullptr, options.rstd ? drstd.data() : nullptr});
  const double epsilon = static_cast<double>(options.epsilon);
  const NormResult expected = norm_reference(x, rows, n, options.rms, epsilon, gamma, beta);
  const std::string what =
      norm_label(options, x_layout) + " -> " + label(y_layout) + (in_place ? " in place" : "");
  const Tolerance tolerance = y_tolerance.rtol > 0 ? y_tolerance : tolerance_for(y_layout.dtype, 4);
  expect_close(in_place ? dx.download() : dy.download(), expected.y, tolerance, what);
  if (!in_place) dy.check_untouched(what);
  // mean and rstd are f32 computed from the same (rounded) inputs whatever
  // x's dtype: f32 accuracy, mean's error scaled by the data's magnitude.
  const double scale = std::max(std::fabs(low), std::fabs(high)) + std::fabs(offset);
  if (options.mean && rows > 0) {
    auto got = dmean.download();
    got.resize(static_cast<size_t>(rows));
    expect_close(got, expected.mean, {2e-6 * scale, 1e-5}, what + " mean");
  }
  if (options.rstd && rows > 0) {
    auto got = drstd.download();
    got.resize(static_cast<size_t>(rows));
    expect_close(got, expected.rstd, {0, offset != 0 ? 1e-3 : 2e-5}, what + " rstd");
  }
}

struct NormBackwardOptions {
  bool rms = false;
  bool gamma = false;
  bool grad_gamma = false;
  bool grad_beta = false;
  hal_dtype_t grad_parameter_dtype = HAL_DTYPE_F32;
};

hal_op_norm_desc_t norm_backward_desc(const NormBackwardOptions& options,
                                      const hal_tensor_desc_t& x, const hal_tensor_desc_t& gy,
                                      const hal_tensor_desc_t& gx) {
  hal_op_norm_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_NORM_BACKWARD;
  desc.norm = options.rms ? HAL_NORM_RMSNORM : HAL_NORM_LAYERNORM;
  desc.epsilon = 1e-5f;
  const int64_t n = x.shape[x.rank - 1];
  const int64_t rows = rows_of(x);
  desc.has_gamma = options.gamma ? 1 : 0;
  desc.has_beta = options.grad_beta ? 1 : 0;
  desc.has_grad_gamma = options.grad_gamma ? 1 : 0;
  desc.has_grad_beta = options.grad_beta ? 1 : 0;
  desc.x = x;
  desc.gamma = dense(x.dtype, {n});
  desc.mean = dense(HAL_DTYPE_F32, {rows});
  desc.rstd = dense(HAL_DTYPE_F32, {rows});
  desc.grad_y = gy;
  desc.grad_x = gx;
  desc.grad_gamma = dense(options.grad_parameter_dtype, {n});
  desc.grad_beta = dense(options.grad_parameter_dtype, {n});
  return desc;
}

struct NormBackwardOutputs {
  std::vector<double> grad_x, grad_gamma, grad_beta;
};

// Runs the backward on device from x, gamma (empty: none) and gy, giving it
// the mean and rstd of the float64 forward rounded to f32 (as a forward saves
// them).
NormBackwardOutputs execute_norm_backward(
    TestContext& ctx, const NormBackwardOptions& options, const hal_tensor_desc_t& x_layout,
    const hal_tensor_desc_t& gy_layout, const hal_tensor_desc_t& gx_layout,
    const std::vector<double>& x, const std::vector<double>& gamma, const std::vector<double>& gy,
    const NormResult& saved, bool in_place = false, hal_op_plan_flags_t flags = 0) {
  hal_op_norm_desc_t desc = norm_backward_desc(options, x_layout, gy_layout, gx_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, flags);
  const int64_t n = x_layout.shape[x_layout.rank - 1];
  const int64_t rows = rows_of(x_layout);
  const int64_t stats = std::max<int64_t>(rows, 1);
  std::vector<double> mean = rounded(HAL_DTYPE_F32, saved.mean);
  std::vector<double> rstd = rounded(HAL_DTYPE_F32, saved.rstd);
  mean.resize(static_cast<size_t>(stats), 0.0);
  rstd.resize(static_cast<size_t>(stats), 1.0);
  DeviceTensor dx(ctx.device(), x_layout, x);
  DeviceTensor dgamma(ctx.device(), dense(x_layout.dtype, {std::max<int64_t>(n, 1)}),
                      gamma.empty() ? std::vector<double>(std::max<int64_t>(n, 1), 1.0) : gamma);
  DeviceTensor dmean(ctx.device(), dense(HAL_DTYPE_F32, {stats}), mean);
  DeviceTensor drstd(ctx.device(), dense(HAL_DTYPE_F32, {stats}), rstd);
  DeviceTensor dgy(ctx.device(), gy_layout, gy);
  DeviceTensor dgx(ctx.device(), gx_layout);
  // Filled with 7 so that a column left unwritten shows.
  const std::vector<double> sevens(std::max<int64_t>(n, 1), 7.0);
  DeviceTensor dgg(ctx.device(), dense(options.grad_parameter_dtype, {std::max<int64_t>(n, 1)}),
                   sevens);
  DeviceTensor dgb(ctx.device(), dense(options.grad_parameter_dtype, {std::max<int64_t>(n, 1)}),
                   sevens);
  execute(ctx, plan,
          {dx.data(), options.gamma ? dgamma.data() : nullptr, options.rms ? nullptr : dmean.data(),
           drstd.data(), dgy.data(), in_place ? dgy.data() : dgx.data(),
           options.grad_gamma ? dgg.data() : nullptr, options.grad_beta ? dgb.data() : nullptr});
  NormBackwardOutputs out;
  out.grad_x = in_place ? dgy.download() : dgx.download();
  if (!in_place) dgx.check_untouched("grad_x");
  out.grad_gamma = dgg.download();
  out.grad_gamma.resize(static_cast<size_t>(n));
  out.grad_beta = dgb.download();
  out.grad_beta.resize(static_cast<size_t>(n));
  return out;
}

void run_norm_backward(TestContext& ctx, const NormBackwardOptions& options,
                       const hal_tensor_desc_t& x_layout, const hal_tensor_desc_t& gy_layout,
                       const hal_tensor_desc_t& gx_layout, bool in_place = false) {
  const int64_t n = x_layout.shape[x_layout.rank - 1];
  const int64_t rows = rows_of(x_layout);
  const auto x = random_values(ctx.random(), numel(x_layout), x_layout.dtype, -2, 2);
  std::vector<double> gamma;
  if (options.gamma) gamma = random_values(ctx.random(), n, x_layout.dtype, 0.5, 1.5);
  const auto gy = random_values(ctx.random(), numel(gy_layout), gy_layout.dtype);
  const NormResult saved = norm_reference(x, rows, n, options.rms, 1e-5, {}, {});
  const NormBackwardOutputs got = execute_norm_backward(ctx, options, x_layout, gy_layout,
                                                        gx_layout, x, gamma, gy, saved, in_place);
  // The reference uses the saved statistics the device got (rounded to f32).
  const NormGrads expected =
      norm_backward_reference(x, gy, rounded(HAL_DTYPE_F32, saved.mean),
                              rounded(HAL_DTYPE_F32, saved.rstd), rows, n, options.rms, gamma);
  std::string what = std::string(options.rms ? "rmsnorm" : "layernorm") + " backward " +
                     label(x_layout) + (options.gamma ? " gamma" : "") +
                     (in_place ? " in place" : "");
  // grad_x sums n terms per row; grad_gamma/beta sum rows terms per column.
  expect_close(got.grad_x, expected.grad_x, tolerance_for(gx_layout.dtype, 16), what + " grad_x");
  const Tolerance column_tolerance =
      tolerance_for(options.grad_parameter_dtype, static_cast<double>(rows));
  if (options.grad_gamma) {
    expect_close(got.grad_gamma, expected.grad_gamma, column_tolerance, what + " grad_gamma");
  } else {
    HC_REQUIRE(got.grad_gamma.empty() || got.grad_gamma[0] == 7.0,
               what + ": grad_gamma written though not asked for");
  }
  if (options.grad_beta) {
    expect_close(got.grad_beta, expected.grad_beta, column_tolerance, what + " grad_beta");
  } else {
    HC_REQUIRE(got.grad_beta.empty() || got.grad_beta[0] == 7.0,
               what + ": grad_beta written though not asked for");
  }
}

}  // namespace

// ---- softmax ---------------------------------------------------------------

HALCONFORM_TEST("operators.softmax.forward",
                "softmax and log-softmax, every dtype, odd n, x in [-100, 100]", {}) {
  for (hal_dtype_t dtype : kNormalizationDtypes) {
    for (bool log : {false, true}) {
      for (int64_t n : kLengths) {
        run_softmax(ctx, log, dense(dtype, {3, n}), dense(dtype, {3, n}), -100, 100);
      }
      run_softmax(ctx, log, dense(dtype, {2, 3, 65}), dense(dtype, {2, 3, 65}), -1, 1);
      run_softmax(ctx, log, dense(dtype, {257}), dense(dtype, {257}), -5, 5);
    }
  }
}

HALCONFORM_TEST("operators.softmax.strided",
                "padded rows, a non-contiguous last dimension, mixed dtypes", {}) {
  for (bool log : {false, true}) {
    run_softmax(ctx, log, padded(HAL_DTYPE_F32, {5, 333}, 3), padded(HAL_DTYPE_F32, {5, 333}, 5),
                -100, 100);
    run_softmax(ctx, log, transposed(dense(HAL_DTYPE_F32, {129, 6}), 0, 1),
                dense(HAL_DTYPE_F32, {6, 129}), -10, 10);
    run_softmax(ctx, log, transposed(dense(HAL_DTYPE_F16, {4, 5, 7}), 0, 1),
                transposed(dense(HAL_DTYPE_F32, {7, 4, 5}), 0, 2), -10, 10);
    run_softmax(ctx, log, dense(HAL_DTYPE_BF16, {4, 100}), dense(HAL_DTYPE_F16, {4, 100}), -3, 3);
    run_softmax(ctx, log, dense(HAL_DTYPE_F16, {4, 100}), padded(HAL_DTYPE_BF16, {4, 100}, 1), -3,
                3);
  }
}

HALCONFORM_TEST("operators.softmax.in_place", "y may be x exactly", {}) {
  for (hal_dtype_t dtype : kNormalizationDtypes) {
    for (bool log : {false, true}) {
      for (const hal_tensor_desc_t& layout :
           {dense(dtype, {4, 333}), transposed(dense(dtype, {33, 4}), 0, 1)}) {
        hal_op_softmax_desc_t desc = softmax_desc(false, log, layout, layout);
        Plan plan;
        plan_or_skip(ctx, &desc.header, plan);
        const int64_t n = layout.shape[1];
        const auto x = random_values(ctx.random(), numel(layout), dtype, -20, 20);
        DeviceTensor dx(ctx.device(), layout, x);
        execute(ctx, plan, {dx.data(), dx.data()});
        expect_close(dx.download(), softmax_reference(x, n, log),
                     log ? tolerance_for(dtype, 4) : probability_tolerance(dtype),
                     "softmax in place " + label(layout));
        dx.check_untouched("softmax in place");
      }
    }
  }
}

HALCONFORM_TEST("operators.softmax.edge_cases",
                "rows of -inf give NaN, partly masked rows, +inf, n = 1, empty tensors", {}) {
  for (bool log : {false, true}) {
    const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {4, 5});
    hal_op_softmax_desc_t desc = softmax_desc(false, log, layout, layout);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    const std::vector<double> x = {-kInf, -kInf, -kInf, -kInf, -kInf,  // all masked
                                   -kInf, 1.0,   -kInf, 2.0,   -kInf,  // partly masked
                                   1e30,  -1e30, 0.0,   88.0,  -88.0,
                                   kInf,  1.0,   2.0,   3.0,   4.0};  // +inf: NaN (inf - inf)
    DeviceTensor dx(ctx.device(), layout, x), dy(ctx.device(), layout);
    execute(ctx, plan, {dx.data(), dy.data()});
    const auto got = dy.download();
    for (int c = 0; c < 5; ++c) {
      HC_REQUIRE(std::isnan(got[c]), std::string("a row of -inf gives NaN, got ") +
                                         std::to_string(got[c]) + (log ? " (log)" : ""));
    }
    std::vector<double> expected = softmax_reference(x, 5, log);
    expected.erase(expected.begin(), expected.begin() + 5);
    std::vector<double> rest(got.begin() + 5, got.end());
    expect_close(rest, expected,
                 log ? tolerance_for(HAL_DTYPE_F32, 4) : probability_tolerance(HAL_DTYPE_F32),
                 "masked and extreme rows");
    // n = 1: softmax 1, log-softmax 0.
    run_softmax(ctx, log, dense(HAL_DTYPE_F16, {9, 1}), dense(HAL_DTYPE_F32, {9, 1}), -100, 100);
    run_softmax(ctx, log, dense(HAL_DTYPE_F32, {0, 7}), dense(HAL_DTYPE_F32, {0, 7}), -1, 1);
    run_softmax(ctx, log, dense(HAL_DTYPE_F32, {4, 0}), dense(HAL_DTYPE_F32, {4, 0}), -1, 1);
    run_softmax_backward(ctx, log, dense(HAL_DTYPE_F32, {0, 3}), dense(HAL_DTYPE_F32, {0, 3}),
                         dense(HAL_DTYPE_F32, {0, 3}));
  }
}

HALCONFORM_TEST("operators.softmax.backward",
                "grad_x against the analytic float64 gradient: dtypes, odd n, strided, in place",
                {}) {
  for (bool log : {false, true}) {
    for (hal_dtype_t dtype : kNormalizationDtypes) {
      for (int64_t n : kLengths) {
        run_softmax_backward(ctx, log, dense(dtype, {3, n}), dense(dtype, {3, n}),
                             dense(dtype, {3, n}));
      }
      run_softmax_backward(ctx, log, dense(dtype, {4, 77}), dense(dtype, {4, 77}),
                           dense(dtype, {4, 77}), true);
    }
    run_softmax_backward(ctx, log, padded(HAL_DTYPE_F32, {5, 33}, 2),
                         transposed(dense(HAL_DTYPE_F32, {33, 5}), 0, 1),
                         padded(HAL_DTYPE_F32, {5, 33}, 7));
    run_softmax_backward(ctx, log, dense(HAL_DTYPE_BF16, {5, 33}), dense(HAL_DTYPE_F16, {5, 33}),
                         dense(HAL_DTYPE_F32, {5, 33}));
  }
}

HALCONFORM_TEST("operators.softmax.finite_differences",
                "grad_x matches float64 central differences of the forward (3x5)", {}) {
  for (bool log : {false, true}) {
    const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {3, 5});
    hal_op_softmax_desc_t desc = softmax_desc(true, log, layout, layout, layout);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    const auto x = random_values(ctx.random(), 15, HAL_DTYPE_F32, -3, 3);
    const auto gy = random_values(ctx.random(), 15, HAL_DTYPE_F32);
    const auto y = rounded(HAL_DTYPE_F32, softmax_reference(x, 5, log));
    DeviceTensor dy(ctx.device(), layout, y), dgy(ctx.device(), layout, gy),
        dgx(ctx.device(), layout);
    execute(ctx, plan, {dy.data(), dgy.data(), dgx.data()});
    const auto numeric = finite_differences(x, [&](const std::vector<double>& values) {
      return weighted_sum(gy, softmax_reference(values, 5, log));
    });
    expect_close(dgx.download(), numeric, {2e-6, 1e-5},
                 std::string(log ? "log_softmax" : "softmax") + " vs finite differences");
  }
}

HALCONFORM_TEST("operators.softmax.deterministic", "two runs give the same bits", {}) {
  for (bool backward : {false, true}) {
    const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {8, 1025});
    hal_op_softmax_desc_t desc = softmax_desc(backward, false, layout, layout, layout);
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
    const auto a = random_values(ctx.random(), numel(layout), HAL_DTYPE_F32, -10, 10);
    const auto b = random_values(ctx.random(), numel(layout), HAL_DTYPE_F32);
    DeviceTensor da(ctx.device(), layout, a), db(ctx.device(), layout, b);
    DeviceTensor first(ctx.device(), layout), second(ctx.device(), layout);
    const std::vector<void*> inputs =
        backward ? std::vector<void*>{da.data(), db.data()} : std::vector<void*>{da.data()};
    auto with = [&](void* out) {
      auto operands = inputs;
      operands.push_back(out);
      return operands;
    };
    execute(ctx, plan, with(first.data()));
    execute(ctx, plan, with(second.data()));
    expect_identical(first.download(), second.download(),
                     backward ? "softmax backward twice" : "softmax twice");
  }
}

HALCONFORM_TEST("operators.softmax.errors", "descriptor rules", {}) {
  Acceptance accepted(ctx);
  const hal_tensor_desc_t good = dense(HAL_DTYPE_F32, {4, 5});
  hal_op_softmax_desc_t desc = softmax_desc(false, false, good, dense(HAL_DTYPE_F32, {4, 6}));
  expect_refused(ctx, &desc.header, "softmax: y's shape differs from x's");
  desc = softmax_desc(false, false, dense(HAL_DTYPE_F32, {}), dense(HAL_DTYPE_F32, {}));
  expect_refused(ctx, &desc.header, "softmax: x of rank 0");
  desc = softmax_desc(false, false, dense(HAL_DTYPE_I32, {4, 5}), good);
  expect_refused(ctx, &desc.header, "softmax: x of HAL_DTYPE_I32");
  desc = softmax_desc(false, false, good, good);
  desc.log = 2;
  expect_refused(ctx, &desc.header, "softmax: log 2 (0 or 1)");
  desc = softmax_desc(false, false, good, good);
  desc.y.strides[0] = 0;  // an output reaching one element twice
  expect_refused(ctx, &desc.header,
                 "softmax: y.strides[0] 0 (an output reaching one element twice)");
  desc = softmax_desc(true, false, good, good, dense(HAL_DTYPE_F32, {5, 4}));
  expect_refused(ctx, &desc.header, "softmax backward: grad_x's shape");
  desc = softmax_desc(true, false, dense(HAL_DTYPE_F32, {4, 4}), good, good);
  expect_refused(ctx, &desc.header, "softmax backward: grad_y's shape");
  desc = softmax_desc(true, true, good, good, good);
  if (accepted.expect(&desc.header, "log-softmax backward over f32 [4, 5]")) {
    // Execution: grad_x may be grad_y, not y.
    Plan plan;
    plan_or_skip(ctx, &desc.header, plan);
    DeviceTensor dy(ctx.device(), good, std::vector<double>(20, 0.2)),
        dgy(ctx.device(), good, std::vector<double>(20, 1.0));
    HC_EXPECT_RESULT(try_execute(ctx, plan, {dy.data(), dgy.data(), dy.data()}),
                     HAL_ERROR_INVALID_ARGUMENT);
  }
  accepted.finish();
}

// ---- norm ------------------------------------------------------------------

HALCONFORM_TEST("operators.norm.forward",
                "layernorm and rmsnorm, every dtype, odd n, x in [-100, 100], saved statistics",
                {}) {
  for (hal_dtype_t dtype : kNormalizationDtypes) {
    for (bool rms : {false, true}) {
      for (int64_t n : kLengths) {
        NormOptions options;
        options.rms = rms;
        options.gamma = true;
        options.beta = !rms;
        options.mean = !rms;
        options.rstd = true;
        run_norm(ctx, options, dense(dtype, {3, n}), dense(dtype, {3, n}), dtype, -100, 100);
      }
    }
  }
}

HALCONFORM_TEST("operators.norm.optional_operands",
                "every combination of gamma, beta, mean and rstd; parameter dtypes", {}) {
  for (bool rms : {false, true}) {
    for (int mask = 0; mask < 16; ++mask) {
      NormOptions options;
      options.rms = rms;
      options.gamma = (mask & 1) != 0;
      options.beta = (mask & 2) != 0 && !rms;
      options.mean = (mask & 4) != 0 && !rms;
      options.rstd = (mask & 8) != 0;
      options.epsilon = mask % 3 == 0 ? std::numeric_limits<float>::min() : 1e-3f;
      if (rms && ((mask & 2) != 0 || (mask & 4) != 0)) continue;
      run_norm(ctx, options, dense(HAL_DTYPE_F32, {6, 65}), dense(HAL_DTYPE_F32, {6, 65}),
               mask % 2 == 0 ? HAL_DTYPE_F32 : HAL_DTYPE_BF16, -3, 3);
    }
  }
  // gamma and beta of another dtype than x, y of a third.
  NormOptions options;
  options.gamma = options.beta = options.mean = options.rstd = true;
  run_norm(ctx, options, dense(HAL_DTYPE_BF16, {5, 40}), dense(HAL_DTYPE_F32, {5, 40}),
           HAL_DTYPE_F16, -3, 3);
}

HALCONFORM_TEST("operators.norm.strided_and_in_place",
                "padded and transposed x, strided y, y = x, rank 1 and 3", {}) {
  for (bool rms : {false, true}) {
    NormOptions options;
    options.rms = rms;
    options.gamma = true;
    options.beta = !rms;
    options.mean = !rms;
    options.rstd = true;
    run_norm(ctx, options, padded(HAL_DTYPE_F32, {5, 333}, 3), padded(HAL_DTYPE_F32, {5, 333}, 2),
             HAL_DTYPE_F32, -10, 10);
    run_norm(ctx, options, transposed(dense(HAL_DTYPE_F16, {77, 6}), 0, 1),
             dense(HAL_DTYPE_F16, {6, 77}), HAL_DTYPE_F32, -10, 10);
    run_norm(ctx, options, transposed(dense(HAL_DTYPE_F32, {4, 5, 7}), 0, 1),
             dense(HAL_DTYPE_F32, {5, 4, 7}), HAL_DTYPE_F32, -1, 1);
    run_norm(ctx, options, dense(HAL_DTYPE_F32, {129}), dense(HAL_DTYPE_F32, {129}), HAL_DTYPE_F32,
             -1, 1);
    for (hal_dtype_t dtype : kNormalizationDtypes) {
      run_norm(ctx, options, dense(dtype, {4, 100}), dense(dtype, {4, 100}), dtype, -5, 5, 0, true);
    }
    run_norm(ctx, options, padded(HAL_DTYPE_F32, {4, 100}, 3), padded(HAL_DTYPE_F32, {4, 100}, 3),
             HAL_DTYPE_F32, -5, 5, 0, true);
  }
  // A strided gamma and beta (every other element).
  NormOptions options;
  options.gamma = options.beta = true;
  hal_op_norm_desc_t desc =
      norm_desc(options, dense(HAL_DTYPE_F32, {3, 9}), dense(HAL_DTYPE_F32, {3, 9}), HAL_DTYPE_F32);
  desc.gamma.strides[0] = 2;
  desc.beta.strides[0] = 3;
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const auto x = random_values(ctx.random(), 27, HAL_DTYPE_F32);
  const auto gamma_storage = random_values(ctx.random(), 17, HAL_DTYPE_F32);
  const auto beta_storage = random_values(ctx.random(), 25, HAL_DTYPE_F32);
  std::vector<double> gamma, beta;
  for (int c = 0; c < 9; ++c) {
    gamma.push_back(gamma_storage[2 * c]);
    beta.push_back(beta_storage[3 * c]);
  }
  DeviceTensor dx(ctx.device(), desc.x, x), dy(ctx.device(), desc.y);
  DeviceTensor dgamma(ctx.device(), dense(HAL_DTYPE_F32, {17}), gamma_storage);
  DeviceTensor dbeta(ctx.device(), dense(HAL_DTYPE_F32, {25}), beta_storage);
  execute(ctx, plan, {dx.data(), dgamma.data(), dbeta.data(), dy.data(), nullptr, nullptr});
  expect_close(dy.download(), norm_reference(x, 3, 9, false, 1e-5, gamma, beta).y,
               tolerance_for(HAL_DTYPE_F32, 4), "layernorm with strided gamma and beta");
}

HALCONFORM_TEST("operators.norm.stability",
                "a large common offset (two-pass variance) and n = 1, empty tensors", {}) {
  NormOptions options;
  options.mean = options.rstd = true;
  // x = 300 + U(-1, 1): E[x^2] - E[x]^2 in f32 would lose the variance
  // (~0.33 against 9e4); two passes keep it to the mean's rounding (~1e-4).
  run_norm(ctx, options, dense(HAL_DTYPE_F32, {4, 333}), dense(HAL_DTYPE_F32, {4, 333}),
           HAL_DTYPE_F32, -1, 1, 300, false, {2e-3, 1e-3});
  // n = 1: layernorm gives beta (x - mean = 0), rmsnorm x / sqrt(x^2 + eps).
  for (bool rms : {false, true}) {
    NormOptions one;
    one.rms = rms;
    one.gamma = true;
    one.beta = !rms;
    one.mean = !rms;
    one.rstd = true;
    run_norm(ctx, one, dense(HAL_DTYPE_F32, {7, 1}), dense(HAL_DTYPE_F32, {7, 1}), HAL_DTYPE_F32,
             -100, 100);
    run_norm(ctx, one, dense(HAL_DTYPE_F32, {0, 7}), dense(HAL_DTYPE_F32, {0, 7}), HAL_DTYPE_F32,
             -1, 1);
  }
  // n = 0: mean and rstd NaN (statistics of an empty row).
  options.gamma = true;
  hal_op_norm_desc_t desc =
      norm_desc(options, dense(HAL_DTYPE_F32, {3, 0}), dense(HAL_DTYPE_F32, {3, 0}), HAL_DTYPE_F32);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), desc.x), dy(ctx.device(), desc.y);
  DeviceTensor dgamma(ctx.device(), dense(HAL_DTYPE_F32, {1}));
  DeviceTensor dmean(ctx.device(), desc.mean), drstd(ctx.device(), desc.rstd);
  execute(ctx, plan, {dx.data(), dgamma.data(), nullptr, dy.data(), dmean.data(), drstd.data()});
  for (double v : dmean.download()) HC_REQUIRE(std::isnan(v), std::string("n = 0: mean NaN"));
  for (double v : drstd.download()) HC_REQUIRE(std::isnan(v), std::string("n = 0: rstd NaN"));
}

HALCONFORM_TEST("operators.norm.backward",
                "grad_x, grad_gamma, grad_beta against the analytic float64 gradient", {}) {
  for (bool rms : {false, true}) {
    for (hal_dtype_t dtype : kNormalizationDtypes) {
      for (int64_t n : kLengths) {
        NormBackwardOptions options;
        options.rms = rms;
        options.gamma = true;
        options.grad_gamma = true;
        options.grad_beta = !rms;
        run_norm_backward(ctx, options, dense(dtype, {5, n}), dense(dtype, {5, n}),
                          dense(dtype, {5, n}));
      }
      // grad_gamma/beta in x's dtype, in place.
      NormBackwardOptions options;
      options.rms = rms;
      options.gamma = true;
      options.grad_gamma = true;
      options.grad_beta = !rms;
      options.grad_parameter_dtype = dtype;
      run_norm_backward(ctx, options, dense(dtype, {6, 50}), dense(dtype, {6, 50}),
                        dense(dtype, {6, 50}), true);
    }
    // Every optional operand on and off.
    for (int mask = 0; mask < 8; ++mask) {
      NormBackwardOptions options;
      options.rms = rms;
      options.gamma = (mask & 1) != 0;
      options.grad_gamma = (mask & 3) == 3;
      options.grad_beta = (mask & 4) != 0 && !rms;
      run_norm_backward(ctx, options, dense(HAL_DTYPE_F32, {7, 31}), dense(HAL_DTYPE_F32, {7, 31}),
                        dense(HAL_DTYPE_F32, {7, 31}));
    }
    // Strided views, mixed dtypes.
    NormBackwardOptions options;
    options.rms = rms;
    options.gamma = options.grad_gamma = true;
    options.grad_beta = !rms;
    run_norm_backward(ctx, options, padded(HAL_DTYPE_F32, {5, 33}, 2),
                      transposed(dense(HAL_DTYPE_F32, {33, 5}), 0, 1),
                      padded(HAL_DTYPE_F16, {5, 33}, 1));
    run_norm_backward(ctx, options, transposed(dense(HAL_DTYPE_F32, {3, 4, 9}), 0, 1),
                      dense(HAL_DTYPE_BF16, {4, 3, 9}), dense(HAL_DTYPE_F32, {4, 3, 9}));
  }
}

HALCONFORM_TEST("operators.norm.backward_empty", "no rows give zero parameter gradients", {}) {
  NormBackwardOptions options;
  options.gamma = options.grad_gamma = options.grad_beta = true;
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {0, 6});
  const NormBackwardOutputs got =
      execute_norm_backward(ctx, options, layout, layout, layout, {}, std::vector<double>(6, 1.0),
                            {}, NormResult{{}, {}, {}});
  expect_close(got.grad_gamma, std::vector<double>(6, 0.0), {0, 0}, "grad_gamma of no rows");
  expect_close(got.grad_beta, std::vector<double>(6, 0.0), {0, 0}, "grad_beta of no rows");
}

HALCONFORM_TEST("operators.norm.finite_differences",
                "grad_x, grad_gamma, grad_beta match float64 central differences (3x5)", {}) {
  for (bool rms : {false, true}) {
    const int64_t rows = 3, n = 5;
    const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {rows, n});
    const auto x = random_values(ctx.random(), rows * n, HAL_DTYPE_F32, -2, 2);
    const auto gamma = random_values(ctx.random(), n, HAL_DTYPE_F32, 0.5, 1.5);
    const auto beta = random_values(ctx.random(), n, HAL_DTYPE_F32);
    const auto gy = random_values(ctx.random(), rows * n, HAL_DTYPE_F32);
    const double epsilon = 1e-5;
    const std::vector<double> no_beta;
    const auto& b = rms ? no_beta : beta;
    const NormResult saved = norm_reference(x, rows, n, rms, epsilon, gamma, b);
    NormBackwardOptions options;
    options.rms = rms;
    options.gamma = options.grad_gamma = true;
    options.grad_beta = !rms;
    const NormBackwardOutputs got =
        execute_norm_backward(ctx, options, layout, layout, layout, x, gamma, gy, saved);
    const auto loss_x = [&](const std::vector<double>& values) {
      return weighted_sum(gy, norm_reference(values, rows, n, rms, epsilon, gamma, b).y);
    };
    const auto loss_gamma = [&](const std::vector<double>& values) {
      return weighted_sum(gy, norm_reference(x, rows, n, rms, epsilon, values, b).y);
    };
    const auto loss_beta = [&](const std::vector<double>& values) {
      return weighted_sum(gy, norm_reference(x, rows, n, rms, epsilon, gamma, values).y);
    };
    const std::string what = rms ? "rmsnorm" : "layernorm";
    // f32 device arithmetic against exact derivatives: ~1e-6 relative.
    const Tolerance tolerance{1e-5, 1e-5};
    expect_close(got.grad_x, finite_differences(x, loss_x), tolerance,
                 what + " grad_x vs finite differences");
    expect_close(got.grad_gamma, finite_differences(gamma, loss_gamma), tolerance,
                 what + " grad_gamma vs finite differences");
    if (!rms) {
      expect_close(got.grad_beta, finite_differences(beta, loss_beta), tolerance,
                   what + " grad_beta vs finite differences");
    }
  }
}

HALCONFORM_TEST("operators.norm.deterministic", "forward and backward twice give the same bits",
                {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_BF16, {64, 333});
  NormOptions forward_options;
  forward_options.gamma = forward_options.beta = forward_options.mean = forward_options.rstd = true;
  hal_op_norm_desc_t desc = norm_desc(forward_options, layout, layout, HAL_DTYPE_F32);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
  const auto x = random_values(ctx.random(), numel(layout), HAL_DTYPE_BF16, -5, 5);
  const auto gamma = random_values(ctx.random(), 333, HAL_DTYPE_F32);
  DeviceTensor dx(ctx.device(), layout, x), dgamma(ctx.device(), desc.gamma, gamma),
      dbeta(ctx.device(), desc.beta, gamma);
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    DeviceTensor dy(ctx.device(), layout), dmean(ctx.device(), desc.mean),
        drstd(ctx.device(), desc.rstd);
    execute(ctx, plan,
            {dx.data(), dgamma.data(), dbeta.data(), dy.data(), dmean.data(), drstd.data()});
    auto all = dy.download();
    for (double v : dmean.download()) all.push_back(v);
    for (double v : drstd.download()) all.push_back(v);
    runs.push_back(std::move(all));
  }
  expect_identical(runs[0], runs[1], "norm forward twice");

  NormBackwardOptions options;
  options.gamma = options.grad_gamma = options.grad_beta = true;
  const auto gy = random_values(ctx.random(), numel(layout), HAL_DTYPE_BF16);
  const NormResult saved = norm_reference(x, 64, 333, false, 1e-5, {}, {});
  const auto first = execute_norm_backward(ctx, options, layout, layout, layout, x, gamma, gy,
                                           saved, false, HAL_OP_PLAN_DETERMINISTIC);
  const auto second = execute_norm_backward(ctx, options, layout, layout, layout, x, gamma, gy,
                                            saved, false, HAL_OP_PLAN_DETERMINISTIC);
  expect_identical(first.grad_x, second.grad_x, "norm backward grad_x twice");
  expect_identical(first.grad_gamma, second.grad_gamma, "norm backward grad_gamma twice");
  expect_identical(first.grad_beta, second.grad_beta, "norm backward grad_beta twice");
}

HALCONFORM_TEST("operators.norm.errors", "descriptor rules and optional operands at execution",
                {}) {
  const hal_tensor_desc_t x = dense(HAL_DTYPE_F32, {4, 5});
  NormOptions all;
  all.gamma = all.beta = all.mean = all.rstd = true;
  Acceptance accepted(ctx);
  const hal_op_norm_desc_t good = norm_desc(all, x, x, HAL_DTYPE_F32);
  accepted.expect(&good.header, "layernorm over f32 [4, 5] with every optional operand");
  const auto refused = [&](const hal_op_norm_desc_t& desc, const char* why) {
    expect_refused(ctx, &desc.header, why);
  };
  hal_op_norm_desc_t desc = good;
  desc.y = dense(HAL_DTYPE_F32, {4, 6});
  refused(desc, "y's shape");
  desc = good;
  desc.x = dense(HAL_DTYPE_F32, {});
  refused(desc, "x of rank 0");
  desc = good;
  desc.x = dense(HAL_DTYPE_I32, {4, 5});
  refused(desc, "x of dtype i32");
  desc = good;
  desc.gamma = dense(HAL_DTYPE_F32, {6});
  refused(desc, "gamma's shape");
  desc = good;
  desc.gamma = hal_tensor_desc_t{};
  refused(desc, "gamma missing with has_gamma");
  desc = good;
  desc.beta = dense(HAL_DTYPE_F32, {1, 5});
  refused(desc, "beta's rank");
  desc = good;
  desc.mean = dense(HAL_DTYPE_F16, {4});
  refused(desc, "mean of dtype f16");
  desc = good;
  desc.mean = dense(HAL_DTYPE_F32, {5});
  refused(desc, "mean's shape");
  desc = good;
  desc.rstd = dense(HAL_DTYPE_F32, {4, 1});
  refused(desc, "rstd's rank");
  desc = good;
  desc.rstd = dense(HAL_DTYPE_BF16, {4});
  refused(desc, "rstd's dtype");
  desc = good;
  desc.norm = static_cast<hal_norm_kind_t>(2);
  refused(desc, "norm kind 2");
  desc = good;
  desc.epsilon = -1e-5f;
  refused(desc, "epsilon < 0");
  desc = good;
  desc.epsilon = std::numeric_limits<float>::quiet_NaN();
  refused(desc, "epsilon NaN");
  desc = good;
  desc.epsilon = std::numeric_limits<float>::infinity();
  refused(desc, "epsilon inf");
  desc = good;
  desc.has_gamma = 2;
  refused(desc, "has_gamma 2");
  desc = good;
  desc.norm = HAL_NORM_RMSNORM;
  refused(desc, "rmsnorm with beta and mean");
  desc.has_beta = 0;
  refused(desc, "rmsnorm with mean");
  desc.has_mean = 0;
  accepted.expect(&desc.header, "rmsnorm with gamma and rstd");
  desc = good;
  desc.has_grad_gamma = 1;
  refused(desc, "has_grad_gamma in the forward");

  // Backward.
  NormBackwardOptions options;
  options.gamma = options.grad_gamma = options.grad_beta = true;
  const hal_op_norm_desc_t good_backward = norm_backward_desc(options, x, x, x);
  accepted.expect(&good_backward.header, "layernorm backward with gamma, grad_gamma and grad_beta");
  desc = good_backward;
  desc.has_gamma = 0;
  refused(desc, "grad_gamma without gamma");
  desc = good_backward;
  desc.has_beta = 0;
  refused(desc, "grad_beta without has_beta");
  desc = good_backward;
  desc.grad_gamma = dense(HAL_DTYPE_BF16, {5});
  refused(desc, "grad_gamma neither f32 nor x's dtype");
  desc = good_backward;
  desc.grad_beta = dense(HAL_DTYPE_F32, {4});
  refused(desc, "grad_beta's shape");
  desc = good_backward;
  desc.mean = hal_tensor_desc_t{};
  refused(desc, "layernorm backward without mean");
  desc = good_backward;
  desc.rstd = dense(HAL_DTYPE_F32, {3});
  refused(desc, "rstd's shape");
  desc = good_backward;
  desc.grad_y = dense(HAL_DTYPE_F32, {4, 4});
  refused(desc, "grad_y's shape");
  desc = good_backward;
  desc.grad_x = dense(HAL_DTYPE_F32, {5, 4});
  refused(desc, "grad_x's shape");

  // Execution: a used operand given NULL, an unused one given memory.
  accepted.finish();
  Plan plan;
  NormOptions gamma_only;
  gamma_only.gamma = true;
  desc = norm_desc(gamma_only, x, x, HAL_DTYPE_F32);
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), x, std::vector<double>(20, 1.0)), dy(ctx.device(), x);
  DeviceTensor dgamma(ctx.device(), dense(HAL_DTYPE_F32, {5}), std::vector<double>(5, 1.0));
  DeviceTensor dstat(ctx.device(), dense(HAL_DTYPE_F32, {4}));
  HC_EXPECT_RESULT(
      try_execute(ctx, plan, {dx.data(), nullptr, nullptr, dy.data(), nullptr, nullptr}),
      HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(
      try_execute(ctx, plan, {dx.data(), dgamma.data(), nullptr, dy.data(), dstat.data(), nullptr}),
      HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(
      try_execute(ctx, plan, {dx.data(), dgamma.data(), nullptr, dy.data(), nullptr, nullptr}),
      HAL_SUCCESS);
}
