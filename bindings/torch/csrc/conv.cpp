// Convolution on the hal device, on HAL_OP_CONVOLUTION(_BACKWARD_DATA,
// _BACKWARD_WEIGHTS) (SPEC §17.6.8). aten sends every convolution of an
// out-of-tree device to the "overrideable" ops, whose default kernels only
// raise, so the boxed fallback never sees them (the research note's trap):
// what HAL declines (float64, a geometry it refuses, tensors on two devices)
// runs aten's own convolution on the CPU through the fallback instead.
//
// PyTorch's geometry maps one to one: padding on both sides, the transposed
// weight [C_in, C_out/groups, k...] is HAL's transposed filter, and y is
// sized with the output padding. Tensors are described channels-first with
// their own strides, so channels_last tensors need no copy.
#include "kernel_util.hpp"

#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>

namespace hal_torch {
namespace {

// aten's geometry arguments of one convolution, as plain integers.
struct Geometry {
  c10::IntArrayRef stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

// The descriptor for |g| with x, w, y (the forward's input, weight, output) described, or why
// not. |bias| is described when defined.
std::string conv_desc(const Geometry& g, const at::Tensor& x, const at::Tensor& w,
                      const at::Tensor& y, const at::Tensor& bias, hal_op_kind_t kind,
                      hal_op_convolution_desc_t& desc) {
  const int64_t spatial = x.dim() - 2;
  if (spatial < 1 || spatial > HAL_CONV_MAX_SPATIAL_DIMS) return "not 1, 2 or 3 spatial dims";
  if (g.groups < 1 || g.groups > INT32_MAX) return "a group count HAL cannot hold";
  const auto per_dim = [spatial](c10::IntArrayRef v) {
    return static_cast<int64_t>(v.size()) == spatial;
  };
  if (!per_dim(g.stride) || !per_dim(g.padding) || !per_dim(g.dilation)) {
    return "geometry lists of another length than the spatial dims";
  }
  for (const at::Tensor* t : {&x, &w, &y, &bias}) {
    if (t->defined() && !is_hal_float(t->scalar_type())) return "a dtype other than f32/f16/bf16";
  }
  desc = make_desc<hal_op_convolution_desc_t>(kind);
  desc.layout = HAL_CHANNELS_FIRST;
  desc.spatial_dims = static_cast<uint32_t>(spatial);
  desc.groups = static_cast<uint32_t>(g.groups);
  desc.activation = HAL_ACTIVATION_NONE;
  desc.flags = g.transposed ? static_cast<uint32_t>(HAL_CONV_TRANSPOSED) : 0u;
  for (int64_t d = 0; d < spatial; ++d) {
    desc.stride[d] = g.stride[d];
    desc.dilation[d] = g.dilation[d];
    desc.pad_begin[d] = g.padding[d];
    desc.pad_end[d] = g.padding[d];
  }
  const std::optional<hal_tensor_desc_t> xd = describe(x);
  const std::optional<hal_tensor_desc_t> wd = describe(w);
  const std::optional<hal_tensor_desc_t> yd = describe(y);
  if (!xd || !wd || !yd) return "a layout or dtype HAL cannot describe";
  desc.x = *xd;
  desc.w = *wd;
  desc.y = *yd;
  if (bias.defined()) {
    const std::optional<hal_tensor_desc_t> bd = describe(bias);
    if (!bd) return "a bias HAL cannot describe";
    desc.bias = *bd;
    desc.flags |= HAL_CONV_BIAS;
  }
  return "";
}

// The forward output's sizes, or an empty vector when the geometry gives none (aten's own
// convolution then raises its error through the fallback).
std::vector<int64_t> output_sizes(const Geometry& g, const at::Tensor& input,
                                  const at::Tensor& weight) {
  const int64_t spatial = input.dim() - 2;
  if (spatial < 1 || weight.dim() != input.dim()) return {};
  if (g.transposed && static_cast<int64_t>(g.output_padding.size()) != spatial) return {};
  std::vector<int64_t> sizes{input.size(0),
                             g.transposed ? weight.size(1) * g.groups : weight.size(0)};
  for (int64_t d = 0; d < spatial; ++d) {
    if (static_cast<size_t>(d) >= g.stride.size() || static_cast<size_t>(d) >= g.padding.size() ||
        static_cast<size_t>(d) >= g.dilation.size()) {
      return {};
    }
    const int64_t i = input.size(d + 2), k = weight.size(d + 2);
    const int64_t s = g.stride[d], p = g.padding[d], dil = g.dilation[d];
    if (s < 1 || dil < 1 || p < 0) return {};
    int64_t o = 0;
    if (g.transposed) {
      const int64_t op = g.output_padding[d];
      if (op < 0 || op >= s) return {};  // output_padding >= stride: HAL cannot express it
      o = (i - 1) * s - 2 * p + dil * (k - 1) + 1 + op;
    } else {
      o = (i + 2 * p - dil * (k - 1) - 1) / s + 1;
      if (i + 2 * p - dil * (k - 1) - 1 < 0) return {};
    }
    if (o < 1) return {};
    sizes.push_back(o);
  }
  return sizes;
}

bool on_one_hal_device(std::initializer_list<const at::Tensor*> tensors) {
  const at::Device device = (*tensors.begin())->device();
  for (const at::Tensor* t : tensors) {
    if (t->defined() && t->device() != device) return false;
  }
  return device.type() == kHalDeviceType;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias_opt,
                                    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                                    c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  static OpCounter& counter = op_counter("aten::convolution_overrideable");
  const at::Tensor bias = bias_opt.has_value() ? *bias_opt : at::Tensor();
  const Geometry g{C10_AS_INTARRAYREF_SLOW(stride),
                   C10_AS_INTARRAYREF_SLOW(padding),
                   C10_AS_INTARRAYREF_SLOW(dilation),
                   C10_AS_INTARRAYREF_SLOW(output_padding),
                   transposed,
                   groups.expect_int()};
  std::string why = "tensors on more than one device";
  if (on_one_hal_device({&input, &weight, &bias})) {
    const std::vector<int64_t> sizes = output_sizes(g, input, weight);
    why = "a geometry with no output";
    if (!sizes.empty()) {
      at::Tensor y = at::empty(sizes, input.options().memory_format(input.suggest_memory_format()));
      hal_op_convolution_desc_t desc;
      why = conv_desc(g, input, weight, y, bias, HAL_OP_CONVOLUTION, desc);
      const Plan* plan = why.empty() ? plan_or_reason(hal_index(input), desc, why) : nullptr;
      if (plan != nullptr) {
        execute(hal_index(input), *plan,
                {operand(input), operand(weight), operand(bias), nullptr, operand(y)},
                "convolution");
        ++counter.native;
        return y;
      }
    }
  }
  return HAL_FALLBACK_SYMINT(at::_ops::convolution, why, input, weight, bias_opt, stride, padding,
                             dilation, transposed, output_padding, groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
    bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups,
    std::array<bool, 3> output_mask) {
  static OpCounter& counter = op_counter("aten::convolution_backward_overrideable");
  const Geometry g{C10_AS_INTARRAYREF_SLOW(stride),
                   C10_AS_INTARRAYREF_SLOW(padding),
                   C10_AS_INTARRAYREF_SLOW(dilation),
                   C10_AS_INTARRAYREF_SLOW(output_padding),
                   transposed,
                   groups.expect_int()};
  std::string why = "tensors on more than one device";
  if (on_one_hal_device({&grad_output, &input, &weight})) {
    // Both kinds are planned before either runs: a decline of one falls back whole.
    const auto like = [](const at::Tensor& t) {
      return at::empty(t.sizes(), t.options().memory_format(t.suggest_memory_format()));
    };
    at::Tensor grad_input, grad_weight, grad_bias;
    hal_op_convolution_desc_t data_desc, weights_desc;
    const Plan* data_plan = nullptr;
    const Plan* weights_plan = nullptr;
    const c10::DeviceIndex device = hal_index(input);
    why.clear();
    if (output_mask[0]) {
      grad_input = like(input);
      why = conv_desc(g, grad_input, weight, grad_output, at::Tensor(),
                      HAL_OP_CONVOLUTION_BACKWARD_DATA, data_desc);
      if (why.empty()) data_plan = plan_or_reason(device, data_desc, why);
    }
    if (why.empty() && (output_mask[1] || output_mask[2])) {
      // HAL writes grad_w always; a grad_bias alone still needs a grad_w to write.
      grad_weight = like(weight);
      if (output_mask[2]) grad_bias = at::empty({grad_output.size(1)}, weight.options());
      why = conv_desc(g, input, grad_weight, grad_output, grad_bias,
                      HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS, weights_desc);
      if (why.empty()) weights_plan = plan_or_reason(device, weights_desc, why);
    }
    if (why.empty()) {
      if (data_plan != nullptr) {
        execute(device, *data_plan, {operand(grad_output), operand(weight), operand(grad_input)},
                "convolution backward (data)");
      }
      if (weights_plan != nullptr) {
        execute(device, *weights_plan,
                {operand(input), operand(grad_output), operand(grad_weight), operand(grad_bias)},
                "convolution backward (weights)");
      }
      ++counter.native;
      return {grad_input, output_mask[1] ? grad_weight : at::Tensor(), grad_bias};
    }
  }
  // The bias gradient's size: output channels (weight dim 0, or dim 1 x groups transposed).
  std::optional<std::vector<c10::SymInt>> bias_sizes;
  if (output_mask[2]) {
    bias_sizes =
        std::vector<c10::SymInt>{transposed ? weight.sym_size(1) * groups : weight.sym_size(0)};
  }
  const at::OptionalSymIntArrayRef bias_ref =
      bias_sizes ? at::OptionalSymIntArrayRef(*bias_sizes) : at::OptionalSymIntArrayRef();
  return HAL_FALLBACK_SYMINT(at::_ops::convolution_backward, why, grad_output, input, weight,
                             bias_ref, stride, padding, dilation, transposed, output_padding,
                             groups, output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

}  // namespace hal_torch
