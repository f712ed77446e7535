// Embedding (HAL_OP_EMBEDDING and its deterministic dense backward) and the
// fused cross-entropy loss (HAL_OP_CROSS_ENTROPY: loss and logit gradient in
// one op, registered as the hal autograd kernel of aten's composite
// cross_entropy_loss for class-index targets with mean reduction; the other
// cases run aten's composite over the hal kernels).
#include "kernel_util.hpp"

#include <ATen/ops/cross_entropy_loss_native.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/embedding_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mul.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace hal_torch {
namespace {

// ---- embedding ------------------------------------------------------------------------------

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, c10::SymInt padding_idx,
                     bool scale_grad_by_freq, bool sparse) {
  static OpCounter& counter = op_counter("aten::embedding");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK_SYMINT(at::_ops::embedding, why, weight, indices, padding_idx,
                               scale_grad_by_freq, sparse);
  };
  TORCH_CHECK(weight.dim() == 2, "'weight' must be 2-D");
  TORCH_CHECK_INDEX(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
                    "Expected tensor for argument #1 'indices' to have one of the following "
                    "scalar types: Long, Int; but got ",
                    indices.scalar_type(), " instead");
  std::vector<int64_t> sizes(indices.sizes().begin(), indices.sizes().end());
  sizes.push_back(weight.size(1));
  at::Tensor out = at::empty(sizes, weight.options());
  if (out.numel() == 0) return out;
  const std::optional<hal_tensor_desc_t> ids = describe(indices);
  const std::optional<hal_tensor_desc_t> table = describe(weight);
  if (!ids || !table || indices.dim() >= HAL_TENSOR_MAX_RANK) {
    return fallback("a layout or dtype HAL cannot describe");
  }
  auto desc = make_desc<hal_op_embedding_desc_t>(HAL_OP_EMBEDDING);
  desc.ids = *ids;
  desc.table = *table;
  desc.out = layout(out);
  const c10::DeviceIndex device = hal_index(weight);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why);
  // An id outside [0, vocab) gives a zero row on HAL, an IndexError in aten: HAL
  // never reads out of bounds, and the difference is documented (README).
  execute(device, *plan, {operand(indices), operand(weight), operand(out)}, "embedding");
  ++counter.native;
  return out;
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                    c10::SymInt num_weights_sym, c10::SymInt padding_idx_sym,
                                    bool scale_grad_by_freq) {
  static OpCounter& counter = op_counter("aten::embedding_dense_backward");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK_SYMINT(at::_ops::embedding_dense_backward, why, grad_output, indices,
                               num_weights_sym, padding_idx_sym, scale_grad_by_freq);
  };
  if (scale_grad_by_freq) return fallback("scale_grad_by_freq");
  const int64_t num_weights = num_weights_sym.expect_int();
  const int64_t padding_idx = padding_idx_sym.expect_int();
  const int64_t dim = grad_output.size(-1);
  at::Tensor grad_weight = at::empty({num_weights, dim}, grad_output.options());
  if (grad_weight.numel() == 0) return grad_weight;
  if (indices.numel() == 0) return grad_weight.zero_();
  const std::optional<hal_tensor_desc_t> ids = describe(indices);
  const std::optional<hal_tensor_desc_t> gout = describe(grad_output);
  if (!ids || !gout || indices.dim() >= HAL_TENSOR_MAX_RANK) {
    return fallback("a layout or dtype HAL cannot describe");
  }
  auto desc = make_desc<hal_op_embedding_desc_t>(HAL_OP_EMBEDDING_BACKWARD);
  desc.accumulate = 0;
  desc.ids = *ids;
  desc.out = *gout;
  desc.table = layout(grad_weight);
  const c10::DeviceIndex device = hal_index(grad_output);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why);
  execute(device, *plan, {operand(indices), operand(grad_output), operand(grad_weight)},
          "embedding backward");
  if (padding_idx >= 0 && padding_idx < num_weights) {
    // The padding row gets no gradient: one row of a dense tensor.
    grad_weight.select(0, padding_idx).zero_();
  }
  ++counter.native;
  return grad_weight;
}

// ---- cross-entropy --------------------------------------------------------------------------

struct CrossEntropyResult {
  at::Tensor loss;         // f32 [1]
  at::Tensor grad_logits;  // logits' shape, or undefined
};

// HAL's fused loss (mean over the counted rows) and, with |want_grad|, its gradient.
std::string run_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                              int64_t ignore_index, double label_smoothing, bool want_grad,
                              CrossEntropyResult& r) {
  const std::optional<hal_tensor_desc_t> ld = describe(logits);
  const std::optional<hal_tensor_desc_t> yd = describe(labels);
  if (!ld || !yd) return "a layout or dtype HAL cannot describe";
  r.loss = at::empty({1}, logits.options().dtype(at::kFloat));
  auto desc = make_desc<hal_op_cross_entropy_desc_t>(HAL_OP_CROSS_ENTROPY);
  desc.ignore_index = ignore_index;
  desc.label_smoothing = static_cast<float>(label_smoothing);
  desc.logits = *ld;
  desc.labels = *yd;
  desc.loss = layout(r.loss);
  if (want_grad) {
    r.grad_logits = at::empty(logits.sizes(), logits.options());
    desc.has_grad = 1;
    desc.grad_logits = layout(r.grad_logits);
  }
  const c10::DeviceIndex device = hal_index(logits);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  hal_op_scalar_t grad_scale{};
  grad_scale.f64 = 1.0;
  execute(device, *plan,
          {operand(logits), operand(labels), operand(r.loss), nullptr,
           want_grad ? operand(r.grad_logits) : nullptr},
          "cross_entropy", {grad_scale});
  return "";
}

class CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
 public:
  // |loss| and |grad_logits| were computed by HAL before apply (so a decline could still
  // take the composite); forward only hands them to autograd.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& loss, const at::Tensor& grad_logits) {
    ctx->save_for_backward({grad_logits});
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor grad_logits = ctx->get_saved_variables()[0];
    // d loss / d logits times the incoming (0-dim) gradient, on the device.
    return {at::mul(grad_logits, grads[0].to(grad_logits.scalar_type())), at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor cross_entropy_loss(const at::Tensor& self, const at::Tensor& target,
                              const std::optional<at::Tensor>& weight, int64_t reduction,
                              c10::SymInt ignore_index, double label_smoothing) {
  static OpCounter& counter = op_counter("aten::cross_entropy_loss");
  const auto composite = [&] {
    return at::native::cross_entropy_loss_symint(self, target, weight, reduction, ignore_index,
                                                 label_smoothing);
  };
  const bool class_targets = target.scalar_type() == at::kLong || target.scalar_type() == at::kInt;
  if (reduction != at::Reduction::Mean || (weight.has_value() && weight->defined()) ||
      !class_targets || self.dim() != 2 || target.dim() != 1 || !is_hal_float(self.scalar_type()) ||
      self.size(0) != target.size(0) || self.size(1) == 0 || label_smoothing < 0 ||
      label_smoothing >= 1 || target.device() != self.device()) {
    return composite();
  }
  const bool want_grad = c10::GradMode::is_enabled() && self.requires_grad();
  CrossEntropyResult r;
  if (!run_cross_entropy(self, target, ignore_index.expect_int(), label_smoothing, want_grad, r)
           .empty()) {
    return composite();
  }
  ++counter.native;
  at::Tensor loss = r.loss.reshape({});
  if (loss.scalar_type() != self.scalar_type()) loss = loss.to(self.scalar_type());
  if (!want_grad) return loss;
  return CrossEntropyFunction::apply(self, loss, r.grad_logits);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("embedding", TORCH_FN(embedding));
  m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
  m.impl("cross_entropy_loss", TORCH_FN(cross_entropy_loss));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("cross_entropy_loss", TORCH_FN(cross_entropy_loss));
}

}  // namespace hal_torch
