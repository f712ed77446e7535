// Softmax, log-softmax, layer norm and RMS norm, forward and backward, on
// HAL_OP_SOFTMAX(_BACKWARD) and HAL_OP_NORM(_BACKWARD).
//
// HAL works on the last dimension: softmax over another one is a transposed
// view (no copy); a norm over several trailing dimensions views them as one.
// rms_norm is a CompositeImplicitAutograd op in aten (its fused form has no
// autograd for other devices), so the hal device registers its autograd
// kernel: one HAL forward saving rstd, one HAL backward.
#include "kernel_util.hpp"

#include <ATen/native/Resize.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/zeros.h>
#include <c10/util/irange.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

namespace hal_torch {
namespace {

// ---- softmax --------------------------------------------------------------------------------

// |t| with dimension |dim| moved last (a view).
at::Tensor dim_last(const at::Tensor& t, int64_t dim) {
  if (t.dim() == 0) return t.reshape({1});
  return dim == t.dim() - 1 ? t : t.transpose(dim, -1);
}

std::string run_softmax(bool log, const at::Tensor& x, int64_t dim, const at::Tensor& y) {
  if (x.numel() == 0) return "";
  const at::Tensor xv = dim_last(x, dim);
  const at::Tensor yv = dim_last(y, dim);
  const std::optional<hal_tensor_desc_t> xd = describe(xv);
  const std::optional<hal_tensor_desc_t> yd = describe(yv);
  if (!xd || !yd) return "a layout or dtype HAL cannot describe";
  auto desc = make_desc<hal_op_softmax_desc_t>(HAL_OP_SOFTMAX);
  desc.log = log ? 1 : 0;
  desc.x = *xd;
  desc.y = *yd;
  const c10::DeviceIndex device = hal_index(x);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {operand(xv), operand(yv)}, log ? "log_softmax" : "softmax");
  return "";
}

// out= with a fresh target when out overlaps x in another layout.
at::Tensor& softmax_out_impl(OpCounter& counter, bool log, const at::Tensor& self, int64_t dim,
                             bool half_to_float, at::Tensor& out,
                             const std::function<at::Tensor&(const std::string&)>& fallback) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (half_to_float && self.scalar_type() != at::kHalf) {
    return fallback("half_to_float with a non-half input");
  }
  const at::ScalarType dtype = half_to_float ? at::kFloat : self.scalar_type();
  TORCH_CHECK(out.scalar_type() == dtype, "softmax: expected out dtype ", dtype, " but got ",
              out.scalar_type());
  at::native::resize_output(out, self.sizes());
  at::Tensor target = out;
  if (memory_overlaps(out, self) && !same_view(out, self)) target = empty_like_contiguous(out);
  const std::string why = run_softmax(log, self, d, target);
  if (!why.empty()) return fallback(why);
  if (!target.is_same(out)) out.copy_(target);
  ++counter.native;
  return out;
}

at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::_softmax.out");
  return softmax_out_impl(
      counter, false, self, dim, half_to_float, out, [&](const std::string& why) -> at::Tensor& {
        return HAL_FALLBACK(at::_ops::_softmax_out, why, self, dim, half_to_float, out);
      });
}

at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  at::Tensor out = at::empty(self.sizes(),
                             self.options().dtype(half_to_float ? at::kFloat : self.scalar_type()));
  return softmax_out(self, dim, half_to_float, out);
}

at::Tensor& log_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                            at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::_log_softmax.out");
  return softmax_out_impl(
      counter, true, self, dim, half_to_float, out, [&](const std::string& why) -> at::Tensor& {
        return HAL_FALLBACK(at::_ops::_log_softmax_out, why, self, dim, half_to_float, out);
      });
}

at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  at::Tensor out = at::empty(self.sizes(),
                             self.options().dtype(half_to_float ? at::kFloat : self.scalar_type()));
  return log_softmax_out(self, dim, half_to_float, out);
}

std::string run_softmax_backward(bool log, const at::Tensor& grad_output, const at::Tensor& output,
                                 int64_t dim, const at::Tensor& grad_input) {
  if (grad_input.numel() == 0) return "";
  const at::Tensor gy = dim_last(grad_output, dim);
  const at::Tensor y = dim_last(output, dim);
  const at::Tensor gx = dim_last(grad_input, dim);
  const std::optional<hal_tensor_desc_t> gyd = describe(gy);
  const std::optional<hal_tensor_desc_t> yd = describe(y);
  const std::optional<hal_tensor_desc_t> gxd = describe(gx);
  if (!gyd || !yd || !gxd) return "a layout or dtype HAL cannot describe";
  auto desc = make_desc<hal_op_softmax_desc_t>(HAL_OP_SOFTMAX_BACKWARD);
  desc.log = log ? 1 : 0;
  desc.x = *gyd;
  desc.y = *yd;
  desc.grad_x = *gxd;
  const c10::DeviceIndex device = hal_index(grad_input);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {operand(y), operand(gy), operand(gx)}, "softmax backward");
  return "";
}

at::Tensor& softmax_backward_out_impl(
    OpCounter& counter, bool log, const at::Tensor& grad_output, const at::Tensor& output,
    int64_t dim, at::ScalarType input_dtype, at::Tensor& grad_input,
    const std::function<at::Tensor&(const std::string&)>& fallback) {
  const int64_t d = at::maybe_wrap_dim(dim, grad_output.dim());
  TORCH_CHECK(grad_input.scalar_type() == input_dtype, "softmax backward: expected grad_input ",
              input_dtype, " but got ", grad_input.scalar_type());
  at::native::resize_output(grad_input, grad_output.sizes());
  at::Tensor target = grad_input;
  if ((memory_overlaps(grad_input, grad_output) && !same_view(grad_input, grad_output)) ||
      memory_overlaps(grad_input, output)) {
    target = empty_like_contiguous(grad_input);
  }
  const std::string why = run_softmax_backward(log, grad_output, output, d, target);
  if (!why.empty()) return fallback(why);
  if (!target.is_same(grad_input)) grad_input.copy_(target);
  ++counter.native;
  return grad_input;
}

at::Tensor& softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                 int64_t dim, at::ScalarType input_dtype, at::Tensor& grad_input) {
  static OpCounter& counter = op_counter("aten::_softmax_backward_data.out");
  return softmax_backward_out_impl(counter, false, grad_output, output, dim, input_dtype,
                                   grad_input, [&](const std::string& why) -> at::Tensor& {
                                     return HAL_FALLBACK(at::_ops::_softmax_backward_data_out, why,
                                                         grad_output, output, dim, input_dtype,
                                                         grad_input);
                                   });
}

at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype) {
  at::Tensor grad_input = at::empty(grad_output.sizes(), grad_output.options().dtype(input_dtype));
  return softmax_backward_out(grad_output, output, dim, input_dtype, grad_input);
}

at::Tensor& log_softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                     int64_t dim, at::ScalarType input_dtype, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::_log_softmax_backward_data.out");
  return softmax_backward_out_impl(counter, true, grad_output, output, dim, input_dtype, out,
                                   [&](const std::string& why) -> at::Tensor& {
                                     return HAL_FALLBACK(at::_ops::_log_softmax_backward_data_out,
                                                         why, grad_output, output, dim, input_dtype,
                                                         out);
                                   });
}

at::Tensor log_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                int64_t dim, at::ScalarType input_dtype) {
  at::Tensor out = at::empty(grad_output.sizes(), grad_output.options().dtype(input_dtype));
  return log_softmax_backward_out(grad_output, output, dim, input_dtype, out);
}

// ---- layer norm and RMS norm ----------------------------------------------------------------

// |t| as [rows..., n]: its trailing |normalized| dimensions merged into one (a view
// when they are mergeable, else a dense copy).
at::Tensor as_rows(const at::Tensor& t, size_t normalized) {
  if (normalized <= 1 && t.dim() >= 1) return t;
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end() - static_cast<int64_t>(normalized));
  int64_t n = 1;
  for (size_t i = 0; i < normalized; ++i) n *= t.size(t.dim() - 1 - static_cast<int64_t>(i));
  sizes.push_back(n);
  return t.reshape(sizes);  // a view when possible; a contiguous copy otherwise
}

// A parameter [normalized_shape] as [n].
at::Tensor as_vector(const at::Tensor& p) {
  return p.dim() == 1 ? p : p.reshape({-1});
}

struct NormForward {
  at::Tensor y, mean, rstd;
};

// y = norm(x) over the trailing |normalized| dims; mean and rstd f32 [rows] (mean only for
// layer norm). "" when done.
std::string run_norm(hal_norm_kind_t kind, const at::Tensor& x, size_t normalized,
                     const at::Tensor& gamma, const at::Tensor& beta, double eps, NormForward& f) {
  const at::Tensor xr = as_rows(x, normalized);
  f.y = at::empty(x.sizes(), x.options());
  const int64_t rows = xr.numel() / std::max<int64_t>(1, xr.size(-1));
  const at::TensorOptions stats = x.options().dtype(at::kFloat);
  f.rstd = at::empty({xr.size(-1) == 0 ? xr.numel() : rows}, stats);
  if (kind == HAL_NORM_LAYERNORM) f.mean = at::empty(f.rstd.sizes(), stats);
  if (x.numel() == 0) return "";
  const at::Tensor yr = as_rows(f.y, normalized);
  const std::optional<hal_tensor_desc_t> xd = describe(xr);
  const std::optional<hal_tensor_desc_t> yd = describe(yr);
  if (!xd || !yd) return "a layout or dtype HAL cannot describe";
  auto desc = make_desc<hal_op_norm_desc_t>(HAL_OP_NORM);
  desc.norm = kind;
  desc.epsilon = static_cast<float>(eps);
  desc.x = *xd;
  desc.y = *yd;
  at::Tensor g;
  at::Tensor b;
  if (gamma.defined()) {
    g = as_vector(gamma);
    const std::optional<hal_tensor_desc_t> gd = describe(g);
    if (!gd) return "a layout or dtype HAL cannot describe";
    desc.has_gamma = 1;
    desc.gamma = *gd;
  }
  if (beta.defined()) {
    b = as_vector(beta);
    const std::optional<hal_tensor_desc_t> bd = describe(b);
    if (!bd) return "a layout or dtype HAL cannot describe";
    desc.has_beta = 1;
    desc.beta = *bd;
  }
  if (kind == HAL_NORM_LAYERNORM) {
    desc.has_mean = 1;
    desc.mean = layout(f.mean);
  }
  desc.has_rstd = 1;
  desc.rstd = layout(f.rstd);
  const c10::DeviceIndex device = hal_index(x);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan,
          {operand(xr), g.defined() ? operand(g) : nullptr, b.defined() ? operand(b) : nullptr,
           operand(yr), f.mean.defined() ? operand(f.mean) : nullptr, operand(f.rstd)},
          kind == HAL_NORM_LAYERNORM ? "layer_norm" : "rms_norm");
  return "";
}

struct NormBackward {
  at::Tensor grad_x, grad_gamma, grad_beta;
};

std::string run_norm_backward(hal_norm_kind_t kind, const at::Tensor& grad_y, const at::Tensor& x,
                              size_t normalized, const at::Tensor& mean, const at::Tensor& rstd,
                              const at::Tensor& gamma, bool has_beta, bool want_gamma,
                              bool want_beta, NormBackward& r, at::IntArrayRef beta_sizes = {},
                              at::ScalarType beta_dtype = at::kFloat) {
  const at::Tensor xr = as_rows(x, normalized);
  const at::Tensor gyr = as_rows(grad_y, normalized);
  r.grad_x = at::empty(x.sizes(), x.options());
  if (want_gamma) r.grad_gamma = at::empty(gamma.sizes(), gamma.options());
  if (want_beta) r.grad_beta = at::empty(beta_sizes, x.options().dtype(beta_dtype));
  if (x.numel() == 0) {
    if (want_gamma) r.grad_gamma.zero_();
    if (want_beta) r.grad_beta.zero_();
    return "";
  }
  const at::Tensor gxr = as_rows(r.grad_x, normalized);
  const std::optional<hal_tensor_desc_t> xd = describe(xr);
  const std::optional<hal_tensor_desc_t> gyd = describe(gyr);
  const std::optional<hal_tensor_desc_t> gxd = describe(gxr);
  const at::Tensor mean_v = mean.defined() ? mean.reshape({-1}) : mean;
  const at::Tensor rstd_v = rstd.reshape({-1});
  if (!xd || !gyd || !gxd || rstd_v.scalar_type() != at::kFloat) {
    return "a layout or dtype HAL cannot describe";
  }
  auto desc = make_desc<hal_op_norm_desc_t>(HAL_OP_NORM_BACKWARD);
  desc.norm = kind;
  desc.epsilon = 0.0f;
  desc.x = *xd;
  desc.grad_y = *gyd;
  desc.grad_x = *gxd;
  desc.rstd = layout(rstd_v);
  if (kind == HAL_NORM_LAYERNORM) {
    if (!mean_v.defined() || mean_v.scalar_type() != at::kFloat) return "a mean HAL cannot read";
    desc.mean = layout(mean_v);
  }
  at::Tensor g;
  if (gamma.defined()) {
    g = as_vector(gamma);
    const std::optional<hal_tensor_desc_t> gd = describe(g);
    if (!gd) return "a layout or dtype HAL cannot describe";
    desc.has_gamma = 1;
    desc.gamma = *gd;
  }
  desc.has_beta = has_beta ? 1 : 0;
  at::Tensor gg;
  at::Tensor gb;
  if (want_gamma) {
    gg = as_vector(r.grad_gamma);
    desc.has_grad_gamma = 1;
    desc.grad_gamma = layout(gg);
  }
  if (want_beta) {
    gb = as_vector(r.grad_beta);
    desc.has_grad_beta = 1;
    desc.grad_beta = layout(gb);
  }
  const c10::DeviceIndex device = hal_index(x);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(
      device, *plan,
      {operand(xr), g.defined() ? operand(g) : nullptr,
       kind == HAL_NORM_LAYERNORM ? operand(mean_v) : nullptr, operand(rstd_v), operand(gyr),
       operand(gxr), gg.defined() ? operand(gg) : nullptr, gb.defined() ? operand(gb) : nullptr},
      kind == HAL_NORM_LAYERNORM ? "layer_norm backward" : "rms_norm backward");
  return "";
}

// Statistics shaped as aten's: input.shape[:axis] + [1] * len(normalized_shape).
at::Tensor stats_view(const at::Tensor& stats, const at::Tensor& input, size_t normalized) {
  std::vector<int64_t> sizes(input.sizes().begin(),
                             input.sizes().end() - static_cast<int64_t>(normalized));
  sizes.insert(sizes.end(), normalized, 1);
  return stats.view(sizes);
}

void check_normalized_shape(const at::Tensor& input, c10::IntArrayRef normalized_shape) {
  const auto n = static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(n >= 1,
              "Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
              "least one element, but got normalized_shape = ",
              normalized_shape);
  TORCH_CHECK(
      input.dim() >= n &&
          input.sizes().slice(static_cast<size_t>(input.dim() - n)).equals(normalized_shape),
      "Given normalized_shape=", normalized_shape, ", expected input with shape [*, ",
      normalized_shape, "], but got input of size", input.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  static OpCounter& counter = op_counter("aten::native_layer_norm");
  const c10::IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  check_normalized_shape(input, normalized_shape);
  const at::Tensor gamma = weight.has_value() ? *weight : at::Tensor();
  const at::Tensor beta = bias.has_value() ? *bias : at::Tensor();
  NormForward f;
  const std::string why =
      run_norm(HAL_NORM_LAYERNORM, input, normalized_shape.size(), gamma, beta, eps, f);
  if (!why.empty()) {
    return HAL_FALLBACK_SYMINT(at::_ops::native_layer_norm, why, input, normalized_shape_sym,
                               weight, bias, eps);
  }
  ++counter.native;
  // aten's dtype for the statistics: the input's, except f32 when a 16-bit input has f32
  // parameters (its "mixed type"); HAL computes them in f32 either way.
  const bool reduced = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  const at::Tensor& param = gamma.defined() ? gamma : beta;
  const at::ScalarType stats = reduced && param.defined() && param.scalar_type() == at::kFloat
                                   ? at::kFloat
                                   : input.scalar_type();
  return {f.y, stats_view(f.mean.to(stats), input, normalized_shape.size()),
          stats_view(f.rstd.to(stats), input, normalized_shape.size())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  static OpCounter& counter = op_counter("aten::native_layer_norm_backward");
  const c10::IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const at::Tensor gamma = weight.has_value() ? *weight : at::Tensor();
  const bool has_beta = bias.has_value() && bias->defined();
  // 16-bit statistics (aten's dtype for a 16-bit input with 16-bit parameters) are read in f32.
  const auto as_f32 = [](const at::Tensor& t) {
    return t.defined() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16)
               ? t.to(at::kFloat)
               : t;
  };
  NormBackward r;
  const std::string why = run_norm_backward(
      HAL_NORM_LAYERNORM, grad_out, input, normalized_shape.size(), as_f32(mean), as_f32(rstd),
      gamma, has_beta, output_mask[1] && gamma.defined(), output_mask[2] && has_beta, r,
      has_beta ? bias->sizes() : at::IntArrayRef(), has_beta ? bias->scalar_type() : at::kFloat);
  if (!why.empty()) {
    return HAL_FALLBACK_SYMINT(at::_ops::native_layer_norm_backward, why, grad_out, input,
                               normalized_shape_sym, mean, rstd, weight, bias, output_mask);
  }
  ++counter.native;
  return {output_mask[0] ? r.grad_x : at::Tensor(), r.grad_gamma, r.grad_beta};
}

// rms_norm with HAL's forward and backward (see the file's comment).
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  // |weight| is a placeholder (empty) without |has_weight|: autograd's apply takes no
  // undefined tensors.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight_or_placeholder, bool has_weight,
                            int64_t normalized, double eps) {
    const at::Tensor weight = has_weight ? weight_or_placeholder : at::Tensor();
    NormForward f;
    const std::string why = run_norm(HAL_NORM_RMSNORM, input, static_cast<size_t>(normalized),
                                     weight, at::Tensor(), eps, f);
    TORCH_CHECK(why.empty(), "hal rms_norm: ", why);
    ctx->save_for_backward({input, weight_or_placeholder, f.rstd});
    ctx->saved_data["normalized"] = normalized;
    ctx->saved_data["has_weight"] = has_weight;
    return f.y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static OpCounter& counter = op_counter("aten::rms_norm (backward)");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor weight = ctx->saved_data["has_weight"].toBool() ? saved[1] : at::Tensor();
    const at::Tensor& rstd = saved[2];
    const auto normalized = static_cast<size_t>(ctx->saved_data["normalized"].toInt());
    NormBackward r;
    const at::Tensor grad = grads[0].defined() ? grads[0] : at::zeros_like(input);
    const std::string why =
        run_norm_backward(HAL_NORM_RMSNORM, grad, input, normalized, at::Tensor(), rstd, weight,
                          false, weight.defined() && ctx->needs_input_grad(1), false, r);
    TORCH_CHECK(why.empty(), "hal rms_norm backward: ", why);
    ++counter.native;
    return {r.grad_x, r.grad_gamma, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

double rms_eps(const at::Tensor& input, std::optional<double> eps) {
  if (eps.has_value()) return *eps;
  switch (input.scalar_type()) {
    case at::kHalf:
      return static_cast<double>(std::numeric_limits<c10::Half>::epsilon());
    case at::kBFloat16:
      return static_cast<double>(std::numeric_limits<c10::BFloat16>::epsilon());
    default:
      return static_cast<double>(std::numeric_limits<float>::epsilon());
  }
}

// aten's math for the cases HAL does not take (its composite is not exported by the
// wheel): computed in float for 16-bit inputs, as aten does.
at::Tensor rms_norm_math(const at::Tensor& input, size_t normalized, const at::Tensor& weight,
                         double eps) {
  const bool reduced = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  const at::Tensor x = reduced ? input.to(at::kFloat) : input;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < normalized; ++i) dims.push_back(input.dim() - 1 - static_cast<int64_t>(i));
  const at::Tensor rstd = at::rsqrt(at::mean(at::pow(x, 2), dims, /*keepdim=*/true).add(eps));
  at::Tensor result = x.mul(rstd);
  if (weight.defined()) result = result.mul(weight).type_as(x);
  return result.type_as(input);
}

// Registered for AutogradPrivateUse1 and PrivateUse1: HAL when it takes the case, aten's
// math (whose ops then run here one by one) when not.
at::Tensor rms_norm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
                    const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  static OpCounter& counter = op_counter("aten::rms_norm");
  const c10::IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  check_normalized_shape(input, normalized_shape);
  const at::Tensor gamma = weight.has_value() ? *weight : at::Tensor();
  const double epsilon = rms_eps(input, eps);
  const bool hal_case = std::isfinite(epsilon) && epsilon >= 0 &&  // HAL's rule for epsilon
                        is_hal_float(input.scalar_type()) &&
                        (!gamma.defined() || is_hal_float(gamma.scalar_type())) &&
                        input.dim() <= HAL_TENSOR_MAX_RANK;
  if (!hal_case) return rms_norm_math(input, normalized_shape.size(), gamma, epsilon);
  ++counter.native;
  const at::Tensor weight_arg = gamma.defined() ? gamma : at::empty({0}, input.options());
  return RmsNormFunction::apply(input, weight_arg, gamma.defined(),
                                static_cast<int64_t>(normalized_shape.size()), epsilon);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_softmax", TORCH_FN(softmax));
  m.impl("_softmax.out", TORCH_FN(softmax_out));
  m.impl("_log_softmax", TORCH_FN(log_softmax));
  m.impl("_log_softmax.out", TORCH_FN(log_softmax_out));
  m.impl("_softmax_backward_data", TORCH_FN(softmax_backward));
  m.impl("_softmax_backward_data.out", TORCH_FN(softmax_backward_out));
  m.impl("_log_softmax_backward_data", TORCH_FN(log_softmax_backward));
  m.impl("_log_softmax_backward_data.out", TORCH_FN(log_softmax_backward_out));
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  m.impl("rms_norm", TORCH_FN(rms_norm));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("rms_norm", TORCH_FN(rms_norm));
}

}  // namespace hal_torch
