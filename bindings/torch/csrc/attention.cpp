// scaled_dot_product_attention on HAL_OP_ATTENTION(_BACKWARD).
//
// aten picks a backend through _fused_sdp_choice_stub, which it consults for
// a device only when the stub has that device's entry (the research note's
// trap: without it SDPA silently takes the math path). The choice here is
// "overrideable" exactly when HAL can plan the case (no additive mask, no
// dropout, equal head dims, heads a multiple of kv heads, HAL's dtypes and
// head-dim limits): the forward and backward plans are made while choosing
// and reused. Everything else takes aten's math path, whose matmul, softmax
// and elementwise ops run on hal kernels too.
//
// torch's q, k, v are [B, H, L, D] views of [B, L, H, D] projections, which
// is HAL's layout: the descriptors are the transposed views, no copies. The
// output is allocated [B, L, H, D] and returned transposed, so
// out.transpose(1, 2).reshape(B, L, H*D) is a view. is_causal is torch's
// top-left alignment.
#include "kernel_util.hpp"

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_ops.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>

namespace hal_torch {
namespace {

struct AttentionCase {
  hal_op_attention_desc_t forward;
  hal_op_attention_desc_t backward;
};

double softmax_scale(const at::Tensor& q, std::optional<double> scale) {
  return scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// HAL descriptors for q, k, v ([B, H, L, D] as torch holds them); nullopt with |why| when
// HAL cannot take the case.
std::optional<AttentionCase> describe_attention(const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, bool is_causal,
                                                std::optional<double> scale, std::string& why) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) {
    why = "unbatched or non-4-D inputs";
  } else if (!is_hal_float(q.scalar_type()) || q.scalar_type() != k.scalar_type() ||
             q.scalar_type() != v.scalar_type()) {
    why = "dtypes HAL's attention does not take";
  } else if (q.size(0) != k.size(0) || k.sizes() != v.sizes() || q.size(3) != k.size(3)) {
    why = "different head dims or batch sizes";
  } else if (k.size(1) == 0 || q.size(1) % k.size(1) != 0) {
    why = "query heads not a multiple of key heads";
  } else if (q.numel() == 0 || k.numel() == 0) {
    why = "empty inputs";
  } else if (!std::isfinite(softmax_scale(q, scale))) {
    why = "a non-finite scale";
  }
  if (!why.empty()) return std::nullopt;
  const double s = softmax_scale(q, scale);
  AttentionCase c{make_desc<hal_op_attention_desc_t>(HAL_OP_ATTENTION),
                  make_desc<hal_op_attention_desc_t>(HAL_OP_ATTENTION_BACKWARD)};
  for (hal_op_attention_desc_t* d : {&c.forward, &c.backward}) {
    d->causal = is_causal ? HAL_CAUSAL_TOP_LEFT : HAL_CAUSAL_NONE;
    d->sparsity = HAL_ATTENTION_DENSE;
    d->scale = static_cast<float>(s);
    d->batch = static_cast<uint32_t>(q.size(0));
    d->q = layout(q.transpose(1, 2));
    d->k = layout(k.transpose(1, 2));
    d->v = layout(v.transpose(1, 2));
    // out [B, L, H, D] and lse [B, H, L], dense, as the forward allocates them.
    const int64_t shape[4] = {q.size(0), q.size(2), q.size(1), q.size(3)};
    hal_tensor_desc_contiguous(&d->out, d->q.dtype, 4, shape);
    const int64_t lse_shape[3] = {q.size(0), q.size(1), q.size(2)};
    hal_tensor_desc_contiguous(&d->lse, HAL_DTYPE_F32, 3, lse_shape);
  }
  hal_op_attention_desc_t& b = c.backward;
  b.grad_out = b.out;
  b.grad_q = b.out;
  const int64_t kv_shape[4] = {k.size(0), k.size(2), k.size(1), k.size(3)};
  hal_tensor_desc_contiguous(&b.grad_k, b.k.dtype, 4, kv_shape);
  b.grad_v = b.grad_k;
  return c;
}

bool sdp_enabled_for_hal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  if (!at::globalContext().userEnabledOverrideableSDP()) return false;
  if (mask.has_value() && mask->defined()) return false;  // HAL masks are causal and block-sparse
  if (dropout_p > 0.0) return false;                      // HAL's attention has no dropout
  if (!enable_gqa && q.dim() == 4 && k.dim() == 4 && q.size(1) != k.size(1)) return false;
  std::string why;
  const std::optional<AttentionCase> c = describe_attention(q, k, v, is_causal, scale, why);
  if (!c) return false;
  const c10::DeviceIndex device = hal_index(q);
  if (!plan_for(device, c->forward)) return false;
  const bool grad =
      at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  return !grad || static_cast<bool>(plan_for(device, c->backward));
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  if (sdp_enabled_for_hal(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa)) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  if (!at::globalContext().userEnabledMathSDP()) {
    TORCH_CHECK(false,
                "hal: no scaled_dot_product_attention backend is enabled for this case "
                "(HAL's attention takes no additive mask or dropout; math is disabled)");
  }
  return static_cast<int64_t>(at::SDPBackend::math);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
sdpa_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
             const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
             bool return_debug_mask, std::optional<double> scale) {
  static OpCounter& counter = op_counter("aten::_scaled_dot_product_fused_attention_overrideable");
  TORCH_CHECK(!(attn_bias.has_value() && attn_bias->defined()) && dropout_p == 0.0,
              "hal: HAL's attention takes no additive mask and no dropout (the SDPA choice "
              "sends those to the math path)");
  std::string why;
  const std::optional<AttentionCase> c = describe_attention(q, k, v, is_causal, scale, why);
  TORCH_CHECK(c.has_value(), "hal attention: ", why);
  const c10::DeviceIndex device = hal_index(q);
  const PlanResult planned = plan_for(device, c->forward);
  TORCH_CHECK(planned, "hal attention: ", *planned.decline);
  at::Tensor out = at::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options());
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  void* const operands[] = {operand(q),   operand(k), operand(v), operand(out),
                            operand(lse), nullptr,    nullptr,    nullptr};
  execute(device, *planned.plan, operands, {}, "attention");
  ++counter.native;
  const at::Tensor philox = at::empty({}, at::TensorOptions().dtype(at::kLong));
  return {out.transpose(1, 2),    lse,    at::Tensor(), at::Tensor(), c10::SymInt(q.size(2)),
          c10::SymInt(k.size(2)), philox, philox,       at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal,
    const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
    std::optional<double> scale) {
  static OpCounter& counter =
      op_counter("aten::_scaled_dot_product_fused_attention_overrideable_backward");
  TORCH_CHECK(!attn_bias.defined() && dropout_p == 0.0, "hal: attention backward without mask");
  std::string why;
  std::optional<AttentionCase> c = describe_attention(q, k, v, is_causal, scale, why);
  TORCH_CHECK(c.has_value(), "hal attention backward: ", why);
  // out and grad_out as they are: [B, H, L, D] views of any layout.
  c->backward.out = layout(out.transpose(1, 2));
  c->backward.grad_out = layout(grad_out.transpose(1, 2));
  const c10::DeviceIndex device = hal_index(q);
  const PlanResult planned = plan_for(device, c->backward);
  TORCH_CHECK(planned, "hal attention backward: ", *planned.decline);
  at::Tensor grad_q = at::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options());
  at::Tensor grad_k = at::empty({k.size(0), k.size(2), k.size(1), k.size(3)}, k.options());
  at::Tensor grad_v = at::empty({v.size(0), v.size(2), v.size(1), v.size(3)}, v.options());
  void* const operands[] = {operand(q),        operand(k),      operand(v),      operand(out),
                            operand(lse),      nullptr,         nullptr,         nullptr,
                            operand(grad_out), operand(grad_q), operand(grad_k), operand(grad_v)};
  execute(device, *planned.plan, operands, {}, "attention backward");
  ++counter.native;
  return {grad_input_mask[0] ? grad_q.transpose(1, 2) : at::Tensor(),
          grad_input_mask[1] ? grad_k.transpose(1, 2) : at::Tensor(),
          grad_input_mask[2] ? grad_v.transpose(1, 2) : at::Tensor(), at::Tensor()};
}

}  // namespace
}  // namespace hal_torch

namespace at::native {
// aten consults the stub's PrivateUse1 entry to decide whether to ask the device at all.
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &hal_torch::fused_sdp_choice)
}  // namespace at::native

namespace hal_torch {
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(sdpa_backward));
}
}  // namespace hal_torch
