// Convolution on the hal device. aten sends every convolution of an
// out-of-tree device to the "overrideable" ops, whose default kernels only
// raise, so the boxed fallback never sees them (the research note's trap).
// Until HAL has convolution operators (the convolution issue), these run
// aten's own convolution and its backward on the CPU through the fallback:
// counted, warned about once, zero-copy on host-accessible memory.
#include "kernel_util.hpp"

#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <torch/library.h>

namespace hal_torch {
namespace {

constexpr const char* kNoConvolution = "HAL has no convolution operator yet";

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                                    c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return HAL_FALLBACK_SYMINT(at::_ops::convolution, kNoConvolution, input, weight, bias, stride,
                             padding, dilation, transposed, output_padding, groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
    bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups,
    std::array<bool, 3> output_mask) {
  // The bias gradient's size: output channels (weight dim 0, or dim 1 x groups transposed).
  std::optional<std::vector<c10::SymInt>> bias_sizes;
  if (output_mask[2]) {
    bias_sizes =
        std::vector<c10::SymInt>{transposed ? weight.sym_size(1) * groups : weight.sym_size(0)};
  }
  const at::OptionalSymIntArrayRef bias_ref =
      bias_sizes ? at::OptionalSymIntArrayRef(*bias_sizes) : at::OptionalSymIntArrayRef();
  return HAL_FALLBACK_SYMINT(at::_ops::convolution_backward, kNoConvolution, grad_output, input,
                             weight, bias_ref, stride, padding, dilation, transposed,
                             output_padding, groups, output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

}  // namespace hal_torch
