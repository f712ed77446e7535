// torch.optim.AdamW(fused=True) and Adam(fused=True) as HAL_OP_ADAMW: one
// HAL call per tensor list (per group of tensors sharing dtypes and step),
// so the optimizer state never leaves the device.
//
// The step count lives in device tensors that the optimizer increments
// before the call; HAL takes it as a host scalar, so the counts are read
// once per call (one copy per tensor and one stream synchronisation).
#include "kernel_util.hpp"

#include <ATen/ops/_fused_adam_ops.h>
#include <ATen/ops/_fused_adamw_ops.h>
#include <torch/library.h>

#include <cstring>
#include <map>
#include <set>
#include <tuple>

namespace hal_torch {
namespace {

// The float values of the 0-dim step tensors (device or CPU).
std::vector<double> read_steps(at::TensorList steps) {
  std::vector<double> values(steps.size());
  std::vector<float> device_values(steps.size());
  std::set<c10::DeviceIndex> devices;
  for (size_t i = 0; i < steps.size(); ++i) {
    const at::Tensor& s = steps[i];
    if (s.device().type() != kHalDeviceType || s.scalar_type() != at::kFloat) {
      values[i] = s.item().toDouble();
      continue;
    }
    const c10::DeviceIndex device = hal_index(s);
    check(hal_memcpy_async(&device_values[i], s.const_data_ptr(), sizeof(float),
                           current_hal_stream(device)),
          "reading the optimizer's step");
    devices.insert(device);
    values[i] = -1;  // filled below
  }
  for (c10::DeviceIndex device : devices) {
    check(hal_stream_synchronize(current_hal_stream(device)), "reading the optimizer's step");
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    if (values[i] == -1) values[i] = device_values[i];
  }
  return values;
}

// One planned HAL_OP_ADAMW call: a chunk of up to 4096 tensors of one group.
struct AdamwCall {
  c10::DeviceIndex device;
  const Plan* plan;
  std::vector<void*> operands;
  hal_op_scalar_t scalars[2];
};

// Plans HAL_OP_ADAMW over |indices| (same device, dtypes and step) into |calls|. "" when
// every chunk is planned; nothing runs until every group is (a decline then falls back
// with no tensor updated twice).
std::string plan_adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                       at::TensorList exp_avg_sqs, const std::vector<size_t>& indices, double lr,
                       double beta1, double beta2, double weight_decay, double eps, int64_t step,
                       std::vector<AdamwCall>& calls) {
  constexpr size_t kMaxTensors = 4096;
  for (size_t first = 0; first < indices.size(); first += kMaxTensors) {
    const size_t count = std::min(kMaxTensors, indices.size() - first);
    std::vector<int64_t> numels(count);
    AdamwCall call{};
    call.operands.push_back(nullptr);  // grad_norm: not asked for
    for (size_t j = 0; j < count; ++j) {
      const size_t i = indices[first + j];
      numels[j] = params[i].numel();
      call.operands.insert(call.operands.end(),
                           {operand(params[i]), operand(grads[i]), operand(exp_avgs[i]),
                            operand(exp_avg_sqs[i]), nullptr});
    }
    auto desc = make_desc<hal_op_adamw_desc_t>(HAL_OP_ADAMW);
    desc.tensor_count = static_cast<uint32_t>(count);
    desc.has_master = 0;
    desc.param_dtype = *hal_dtype(params[indices[first]].scalar_type());
    desc.grad_dtype = *hal_dtype(grads[indices[first]].scalar_type());
    desc.beta1 = static_cast<float>(beta1);
    desc.beta2 = static_cast<float>(beta2);
    desc.epsilon = static_cast<float>(eps);
    desc.weight_decay = static_cast<float>(weight_decay);
    desc.max_grad_norm = 0.0f;
    const hal_op_adamw_desc_t key = desc;
    desc.numels = numels.data();
    const auto* bytes = reinterpret_cast<const std::byte*>(numels.data());
    call.device = hal_index(params[indices[first]]);
    const PlanResult planned = plan_for_keyed(
        call.device, desc, key, std::span<const std::byte>(bytes, count * sizeof(int64_t)));
    if (!planned) return *planned.decline;
    call.plan = planned.plan;
    call.scalars[0].f64 = lr;
    call.scalars[1].i64 = step;
    calls.push_back(std::move(call));
  }
  return "";
}

// Checks the lists HAL can take and groups them by (device, dtypes, step). "" when done.
std::string fused_adamw_impl(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                             at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                             at::TensorList steps, double lr, double beta1, double beta2,
                             double weight_decay, double eps, bool amsgrad, bool maximize,
                             const std::optional<at::Tensor>& grad_scale,
                             const std::optional<at::Tensor>& found_inf) {
  if (amsgrad) return "amsgrad (HAL's AdamW keeps no max of v)";
  if (maximize) return "maximize";
  if ((grad_scale.has_value() && grad_scale->defined()) ||
      (found_inf.has_value() && found_inf->defined())) {
    return "a grad scaler's grad_scale/found_inf";
  }
  const size_t n = params.size();
  TORCH_CHECK(
      grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n,
      "_fused_adamw_: the tensor lists differ in length");
  (void)max_exp_avg_sqs;
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    if (p.device().type() != kHalDeviceType) return "a parameter off the hal device";
    for (const at::Tensor* t : {&grads[i], &exp_avgs[i], &exp_avg_sqs[i]}) {
      if (t->device() != p.device()) return "tensors of one parameter on different devices";
      if (!t->is_contiguous() || t->numel() != p.numel()) return "non-dense state";
    }
    if (!p.is_contiguous()) return "a non-contiguous parameter";
    if (!is_hal_float(p.scalar_type()) || !is_hal_float(grads[i].scalar_type())) {
      return "parameters or gradients of a dtype HAL's AdamW does not take";
    }
    if (exp_avgs[i].scalar_type() != at::kFloat || exp_avg_sqs[i].scalar_type() != at::kFloat) {
      return "optimizer state that is not float32";
    }
  }
  const std::vector<double> step_values = read_steps(steps);
  std::map<std::tuple<c10::DeviceIndex, at::ScalarType, at::ScalarType, int64_t>,
           std::vector<size_t>>
      groups;
  for (size_t i = 0; i < n; ++i) {
    const auto step = static_cast<int64_t>(step_values[i]);
    if (step < 1 || static_cast<double>(step) != step_values[i]) return "a step that is not >= 1";
    groups[{hal_index(params[i]), params[i].scalar_type(), grads[i].scalar_type(), step}].push_back(
        i);
  }
  std::vector<AdamwCall> calls;
  for (const auto& [key, indices] : groups) {
    const std::string why = plan_adamw(params, grads, exp_avgs, exp_avg_sqs, indices, lr, beta1,
                                       beta2, weight_decay, eps, std::get<3>(key), calls);
    if (!why.empty()) return why;
  }
  for (const AdamwCall& call : calls) {
    execute(call.device, *call.plan, call.operands, call.scalars, "_fused_adamw_");
  }
  return "";
}

void fused_adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                 at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList steps,
                 double lr, double beta1, double beta2, double weight_decay, double eps,
                 bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale,
                 const std::optional<at::Tensor>& found_inf) {
  static OpCounter& counter = op_counter("aten::_fused_adamw_");
  const std::string why =
      fused_adamw_impl(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1,
                       beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
  if (why.empty()) {
    ++counter.native;
    return;
  }
  HAL_FALLBACK(at::_ops::_fused_adamw_, why, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
               steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,
               found_inf);
}

void fused_adamw_tensor_lr(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                           at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                           at::TensorList steps, const at::Tensor& lr, double beta1, double beta2,
                           double weight_decay, double eps, bool amsgrad, bool maximize,
                           const std::optional<at::Tensor>& grad_scale,
                           const std::optional<at::Tensor>& found_inf) {
  static OpCounter& counter = op_counter("aten::_fused_adamw_.tensor_lr");
  const std::string why = fused_adamw_impl(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                           steps, lr.item().toDouble(), beta1, beta2, weight_decay,
                                           eps, amsgrad, maximize, grad_scale, found_inf);
  if (why.empty()) {
    ++counter.native;
    return;
  }
  HAL_FALLBACK(at::_ops::_fused_adamw__tensor_lr, why, params, grads, exp_avgs, exp_avg_sqs,
               max_exp_avg_sqs, steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
               grad_scale, found_inf);
}

// Adam(fused=True) is AdamW when the weight decay is 0 (Adam's decay is L2, coupled).
void fused_adam(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList steps,
                double lr, double beta1, double beta2, double weight_decay, double eps,
                bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf) {
  static OpCounter& counter = op_counter("aten::_fused_adam_");
  const std::string why =
      weight_decay != 0.0
          ? std::string("Adam's coupled weight decay")
          : fused_adamw_impl(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr,
                             beta1, beta2, 0.0, eps, amsgrad, maximize, grad_scale, found_inf);
  if (why.empty()) {
    ++counter.native;
    return;
  }
  HAL_FALLBACK(at::_ops::_fused_adam_, why, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
               steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,
               found_inf);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adamw_", TORCH_FN(fused_adamw));
  m.impl("_fused_adamw_.tensor_lr", TORCH_FN(fused_adamw_tensor_lr));
  m.impl("_fused_adam_", TORCH_FN(fused_adam));
}

}  // namespace hal_torch
