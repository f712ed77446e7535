// Batch norm on the hal device, on HAL_OP_BATCH_NORM(_BACKWARD) (SPEC §17.6.10).
//
// aten's batch_norm reaches native_batch_norm and native_batch_norm_backward
// on every device that is not CUDA (cuDNN) or ROCm (MIOpen); the functional
// _native_batch_norm_legit forms (export, torch.compile) are registered too.
// The mapping is one to one: training takes the batch's statistics, saves
// mean and 1/sqrt(var + eps) (f32, as HAL writes them; aten's CPU kernel also
// saves f32 for f32 input) and, with running stats, updates them in place
// with the unbiased variance; inference reads the running stats and saves
// nothing (empty tensors, as aten's CPU kernel). What HAL declines (float64,
// momentum outside [0, 1], one value per channel, tensors on two devices)
// falls back to aten's CPU kernels.
#include "kernel_util.hpp"

#include <ATen/ops/_native_batch_norm_legit_no_training_ops.h>
#include <ATen/ops/_native_batch_norm_legit_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_batch_norm_ops.h>
#include <torch/library.h>

#include <cmath>
#include <optional>

namespace hal_torch {
namespace {

at::Tensor defined_or_empty(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

// True when every defined tensor of |tensors| lies on |input|'s hal device.
bool on_input_device(const at::Tensor& input, std::initializer_list<const at::Tensor*> tensors) {
  if (input.device().type() != kHalDeviceType) return false;
  for (const at::Tensor* t : tensors) {
    if (t->defined() && t->device() != input.device()) return false;
  }
  return true;
}

// Describes |t| into |field| when defined and sets |flag|; false when HAL cannot describe it.
bool describe_optional(const at::Tensor& t, hal_tensor_desc_t& field, uint32_t& flags,
                       uint32_t flag) {
  if (!t.defined()) return true;
  const std::optional<hal_tensor_desc_t> d = describe(t);
  if (!d) return false;
  field = *d;
  flags |= flag;
  return true;
}

bool describe_into(const at::Tensor& t, hal_tensor_desc_t& field) {
  const std::optional<hal_tensor_desc_t> d = describe(t);
  if (!d) return false;
  field = *d;
  return true;
}

struct Forward {
  at::Tensor y, saved_mean, saved_rstd;
};

// The forward on HAL, or why not. Running stats are updated in place when training with them.
std::string run_forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                        const at::Tensor& running_mean, const at::Tensor& running_var,
                        bool training, double momentum, double eps, Forward& out) {
  if (!on_input_device(input, {&weight, &bias, &running_mean, &running_var})) {
    return "tensors on more than one device";
  }
  if (input.dim() < 2) return "an input of rank < 2";
  if (running_mean.defined() != running_var.defined()) return "one running statistic of two";
  if (!training && !running_mean.defined()) return "inference without running statistics";
  for (const at::Tensor* t : {&input, &weight, &bias, &running_mean, &running_var}) {
    if (t->defined() && !is_hal_float(t->scalar_type())) return "a dtype other than f32/f16/bf16";
  }
  const bool update = training && running_mean.defined();
  if (update && !(momentum >= 0.0 && momentum <= 1.0)) return "a momentum outside [0, 1]";
  if (!(std::isfinite(eps) && eps > 0)) return "an epsilon HAL does not take";

  auto desc = make_desc<hal_op_batch_norm_desc_t>(HAL_OP_BATCH_NORM);
  desc.layout = HAL_CHANNELS_FIRST;  // [N, C, ...] with the tensor's own strides
  desc.epsilon = static_cast<float>(eps);
  const int64_t channels = input.size(1);
  out.y = at::empty_like(input);
  if (training) {
    out.saved_mean = at::empty({channels}, input.options().dtype(at::kFloat));
    out.saved_rstd = at::empty({channels}, input.options().dtype(at::kFloat));
    desc.flags |= HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SAVE_STATS;
    if (update) desc.flags |= HAL_BATCH_NORM_UPDATE_RUNNING;
  } else {
    out.saved_mean = at::empty({0}, input.options());
    out.saved_rstd = at::empty({0}, input.options());
  }
  if (!describe_into(input, desc.x) || !describe_into(out.y, desc.y) ||
      !describe_optional(weight, desc.scale, desc.flags, HAL_BATCH_NORM_SCALE) ||
      !describe_optional(bias, desc.shift, desc.flags, HAL_BATCH_NORM_SHIFT) ||
      (running_mean.defined() && (!describe_into(running_mean, desc.running_mean) ||
                                  !describe_into(running_var, desc.running_var))) ||
      (training && (!describe_into(out.saved_mean, desc.saved_mean) ||
                    !describe_into(out.saved_rstd, desc.saved_rstd)))) {
    return "a layout or dtype HAL cannot describe";
  }
  const c10::DeviceIndex device = hal_index(input);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  const bool running = training ? update : true;  // running stats read or updated
  hal_op_scalar_t momentum_scalar{};
  momentum_scalar.f64 = momentum;
  void* const operands[] = {operand(input),
                            operand(weight),
                            operand(bias),
                            running ? operand(running_mean) : nullptr,
                            running ? operand(running_var) : nullptr,
                            operand(out.y),
                            training ? operand(out.saved_mean) : nullptr,
                            training ? operand(out.saved_rstd) : nullptr};
  execute(device, *plan, operands,
          std::span<const hal_op_scalar_t>(&momentum_scalar, update ? 1 : 0), "batch_norm");
  return "";
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  static OpCounter& counter = op_counter("aten::native_batch_norm");
  Forward f;
  const std::string why = run_forward(input, defined_or_empty(weight), defined_or_empty(bias),
                                      defined_or_empty(running_mean), defined_or_empty(running_var),
                                      training, momentum, eps, f);
  if (!why.empty()) {
    return HAL_FALLBACK(at::_ops::native_batch_norm, why, input, weight, bias, running_mean,
                        running_var, training, momentum, eps);
  }
  ++counter.native;
  return {f.y, f.saved_mean, f.saved_rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    bool training, double momentum, double eps) {
  static OpCounter& counter = op_counter("aten::_native_batch_norm_legit");
  Forward f;
  const std::string why = run_forward(input, defined_or_empty(weight), defined_or_empty(bias),
                                      running_mean, running_var, training, momentum, eps, f);
  if (!why.empty()) {
    return HAL_FALLBACK(at::_ops::_native_batch_norm_legit, why, input, weight, bias, running_mean,
                        running_var, training, momentum, eps);
  }
  ++counter.native;
  return {f.y, f.saved_mean, f.saved_rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum, double eps) {
  static OpCounter& counter = op_counter("aten::_native_batch_norm_legit.no_stats");
  Forward f;
  const std::string why = run_forward(input, defined_or_empty(weight), defined_or_empty(bias),
                                      at::Tensor(), at::Tensor(), training, momentum, eps, f);
  if (!why.empty()) {
    return HAL_FALLBACK(at::_ops::_native_batch_norm_legit_no_stats, why, input, weight, bias,
                        training, momentum, eps);
  }
  ++counter.native;
  return {f.y, f.saved_mean, f.saved_rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input,
    const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& running_mean_opt,
    const std::optional<at::Tensor>& running_var_opt,
    const std::optional<at::Tensor>& save_mean_opt,
    const std::optional<at::Tensor>& save_invstd_opt, bool train, double eps,
    std::array<bool, 3> output_mask) {
  static OpCounter& counter = op_counter("aten::native_batch_norm_backward");
  const at::Tensor weight = defined_or_empty(weight_opt);
  const at::Tensor running_mean = defined_or_empty(running_mean_opt);
  const at::Tensor running_var = defined_or_empty(running_var_opt);
  at::Tensor save_mean = defined_or_empty(save_mean_opt);
  at::Tensor save_rstd = defined_or_empty(save_invstd_opt);
  std::string why = "tensors on more than one device";
  if (on_input_device(input,
                      {&grad_out, &weight, &running_mean, &running_var, &save_mean, &save_rstd})) {
    why.clear();
    if (input.dim() < 2) why = "an input of rank < 2";
    for (const at::Tensor* t : {&grad_out, &input, &weight, &running_mean, &running_var}) {
      if (why.empty() && t->defined() && !is_hal_float(t->scalar_type())) {
        why = "a dtype other than f32/f16/bf16";
      }
    }
    if (why.empty() && train && (!save_mean.defined() || !save_rstd.defined())) {
      why = "training without saved statistics";
    }
    if (why.empty() && !train && (!running_mean.defined() || !running_var.defined())) {
      why = "inference without running statistics";
    }
    if (why.empty() && !train && !(std::isfinite(eps) && eps > 0)) {
      why = "an epsilon HAL does not take";
    }
    // HAL reads saved statistics in f32 (what the forward above saves).
    if (why.empty() && train) {
      if (!is_hal_float(save_mean.scalar_type()) || !is_hal_float(save_rstd.scalar_type())) {
        why = "saved statistics of a dtype HAL lacks";
      } else {
        save_mean = save_mean.to(at::kFloat);
        save_rstd = save_rstd.to(at::kFloat);
      }
    }
  }
  if (why.empty()) {
    auto desc = make_desc<hal_op_batch_norm_desc_t>(HAL_OP_BATCH_NORM_BACKWARD);
    desc.layout = HAL_CHANNELS_FIRST;
    desc.epsilon = train ? 0.0f : static_cast<float>(eps);
    if (train) desc.flags |= HAL_BATCH_NORM_TRAINING;
    const int64_t channels = input.size(1);
    // HAL writes grad_x always, and grad_scale/grad_shift only when asked.
    at::Tensor grad_input = at::empty_like(input);
    const at::TensorOptions param_options = weight.defined() ? weight.options() : input.options();
    at::Tensor grad_weight, grad_bias;
    if (output_mask[1]) grad_weight = at::empty({channels}, param_options);
    if (output_mask[2]) grad_bias = at::empty({channels}, param_options);
    const bool described =
        describe_into(input, desc.x) && describe_into(grad_out, desc.grad_y) &&
        describe_into(grad_input, desc.grad_x) &&
        describe_optional(weight, desc.scale, desc.flags, HAL_BATCH_NORM_SCALE) &&
        describe_optional(grad_weight, desc.grad_scale, desc.flags, HAL_BATCH_NORM_GRAD_SCALE) &&
        describe_optional(grad_bias, desc.grad_shift, desc.flags, HAL_BATCH_NORM_GRAD_SHIFT) &&
        (train ? describe_into(save_mean, desc.saved_mean) &&
                     describe_into(save_rstd, desc.saved_rstd)
               : describe_into(running_mean, desc.running_mean) &&
                     describe_into(running_var, desc.running_var));
    if (!described) {
      why = "a layout or dtype HAL cannot describe";
    } else {
      const c10::DeviceIndex device = hal_index(input);
      const Plan* plan = plan_or_reason(device, desc, why);
      if (plan != nullptr) {
        execute(device, *plan,
                {operand(input), operand(grad_out), operand(weight),
                 train ? operand(save_mean) : nullptr, train ? operand(save_rstd) : nullptr,
                 train ? nullptr : operand(running_mean), train ? nullptr : operand(running_var),
                 nullptr, operand(grad_input), operand(grad_weight), operand(grad_bias)},
                "batch_norm backward");
        ++counter.native;
        return {output_mask[0] ? grad_input : at::Tensor(), grad_weight, grad_bias};
      }
    }
  }
  return HAL_FALLBACK(at::_ops::native_batch_norm_backward, why, grad_out, input, weight_opt,
                      running_mean_opt, running_var_opt, save_mean_opt, save_invstd_opt, train, eps,
                      output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
  m.impl("native_batch_norm_backward", TORCH_FN(native_batch_norm_backward));
  m.impl("_native_batch_norm_legit", TORCH_FN(native_batch_norm_legit));
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(native_batch_norm_legit_no_stats));
}

}  // namespace hal_torch
