// 2-D pooling on the hal device, on HAL_OP_POOLING(_BACKWARD) (SPEC §17.6.9):
// max_pool2d_with_indices, avg_pool2d, _adaptive_avg_pool2d and their
// backwards (F.max_pool2d, F.avg_pool2d and F.adaptive_avg_pool2d reach these).
//
// PyTorch's geometry maps one to one: symmetric padding, ceil_mode,
// count_include_pad, divisor_override; max pooling's int64 indices are HAL's
// flat h * W + w positions in each (n, c) plane. Tensors are described
// channels-first with their own strides (channels_last needs no copy) and an
// unbatched [C, H, W] input as a [1, C, H, W] view. What HAL declines falls
// back to aten's CPU kernels, which also raise aten's errors for bad geometry.
#include "kernel_util.hpp"

#include <ATen/ops/_adaptive_avg_pool2d_backward_ops.h>
#include <ATen/ops/_adaptive_avg_pool2d_ops.h>
#include <ATen/ops/avg_pool2d_backward_ops.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <torch/library.h>

#include <array>
#include <limits>
#include <optional>

namespace hal_torch {
namespace {

// The windows of one 2-D pooling in PyTorch's terms.
struct Geometry {
  std::array<int64_t, 2> kernel{}, stride{}, padding{}, dilation{1, 1};
  bool ceil_mode = false;
};

// PyTorch's rule: one value for both dimensions or one per dimension; an empty stride is the
// kernel. False for lists of another length (aten then raises its error).
bool pair(c10::IntArrayRef v, std::array<int64_t, 2>& out) {
  if (v.size() == 1) {
    out = {v[0], v[0]};
    return true;
  }
  if (v.size() == 2) {
    out = {v[0], v[1]};
    return true;
  }
  return false;
}

std::optional<Geometry> geometry(c10::IntArrayRef kernel, c10::IntArrayRef stride,
                                 c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                 bool ceil_mode) {
  Geometry g;
  g.ceil_mode = ceil_mode;
  if (!pair(kernel, g.kernel) || !pair(padding, g.padding)) return std::nullopt;
  if (stride.empty()) {
    g.stride = g.kernel;
  } else if (!pair(stride, g.stride)) {
    return std::nullopt;
  }
  if (!dilation.empty() && !pair(dilation, g.dilation)) return std::nullopt;
  for (int d = 0; d < 2; ++d) {
    if (g.kernel[d] < 1 || g.stride[d] < 1 || g.dilation[d] < 1 || g.padding[d] < 0 ||
        g.padding[d] > g.kernel[d] / 2) {
      return std::nullopt;
    }
  }
  return g;
}

// PyTorch's pooling_output_shape: 0 when the window does not fit.
int64_t output_extent(int64_t in, const Geometry& g, int d) {
  const int64_t span = in + 2 * g.padding[d] - g.dilation[d] * (g.kernel[d] - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (span + (g.ceil_mode ? g.stride[d] - 1 : 0)) / g.stride[d] + 1;
  if (g.ceil_mode && (out - 1) * g.stride[d] >= in + g.padding[d]) --out;
  return out;
}

// |t| as [N, C, H, W]: an unbatched [C, H, W] gets a leading 1 (a view).
at::Tensor batched(const at::Tensor& t) {
  return t.dim() == 3 ? t.unsqueeze(0) : t;
}

bool hal_float_on(const at::Tensor& t, const at::Device& device) {
  return t.device() == device && is_hal_float(t.scalar_type());
}

// A pooling descriptor of |kind| for [N, C, H, W] x and y (indices when given), or why not.
std::string pool_desc(hal_op_kind_t kind, hal_pooling_kind_t pooling, uint32_t flags,
                      const Geometry& g, int64_t divisor_override, const at::Tensor& x,
                      const at::Tensor& y, const at::Tensor& indices, hal_op_pooling_desc_t& desc) {
  desc = make_desc<hal_op_pooling_desc_t>(kind);
  desc.pooling = pooling;
  desc.layout = HAL_CHANNELS_FIRST;
  desc.spatial_dims = 2;
  desc.flags = flags;
  for (int d = 0; d < 2; ++d) {
    desc.kernel[d] = g.kernel[d];
    desc.stride[d] = g.stride[d];
    desc.dilation[d] = g.dilation[d];
    desc.pad_begin[d] = g.padding[d];
    desc.pad_end[d] = g.padding[d];
  }
  desc.divisor_override = divisor_override;
  const std::optional<hal_tensor_desc_t> xd = describe(x);
  const std::optional<hal_tensor_desc_t> yd = describe(y);
  if (!xd || !yd) return "a layout or dtype HAL cannot describe";
  desc.x = *xd;
  desc.y = *yd;
  if (indices.defined()) {
    const std::optional<hal_tensor_desc_t> id = describe(indices);
    if (!id) return "indices HAL cannot describe";
    desc.indices = *id;
  }
  return "";
}

// The forward output for |input| with spatial extents |oh|, |ow|, in input's memory format.
at::Tensor pooled_like(const at::Tensor& input, int64_t oh, int64_t ow, at::ScalarType dtype) {
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end());
  sizes[sizes.size() - 2] = oh;
  sizes[sizes.size() - 1] = ow;
  const at::Tensor b = batched(input);
  const at::MemoryFormat format =
      input.dim() == 4 ? b.suggest_memory_format() : at::MemoryFormat::Contiguous;
  return at::empty(sizes, input.options().dtype(dtype).memory_format(format));
}

// Forward: y (and indices) from x; empty reason = done.
std::string run_forward(hal_pooling_kind_t pooling, uint32_t flags, const Geometry& g,
                        int64_t divisor_override, const at::Tensor& input, const at::Tensor& y,
                        const at::Tensor& indices) {
  hal_op_pooling_desc_t desc;
  const at::Tensor x4 = batched(input), y4 = batched(y);
  const at::Tensor i4 = indices.defined() ? batched(indices) : at::Tensor();
  std::string why =
      pool_desc(HAL_OP_POOLING, pooling, flags, g, divisor_override, x4, y4, i4, desc);
  if (!why.empty()) return why;
  const c10::DeviceIndex device = hal_index(input);
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {operand(x4), operand(y4), operand(i4)}, "pooling");
  return "";
}

// Backward: grad_x from grad_y (and the forward's indices); empty reason = done.
std::string run_backward(hal_pooling_kind_t pooling, uint32_t flags, const Geometry& g,
                         int64_t divisor_override, const at::Tensor& grad_y,
                         const at::Tensor& indices, const at::Tensor& grad_x) {
  hal_op_pooling_desc_t desc;
  const at::Tensor gx4 = batched(grad_x), gy4 = batched(grad_y);
  const at::Tensor i4 = indices.defined() ? batched(indices) : at::Tensor();
  std::string why =
      pool_desc(HAL_OP_POOLING_BACKWARD, pooling, flags, g, divisor_override, gx4, gy4, i4, desc);
  if (!why.empty()) return why;
  const c10::DeviceIndex device = hal_index(grad_x);
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {operand(gy4), operand(i4), operand(gx4)}, "pooling backward");
  return "";
}

// Shared checks of a forward: a 3-D or 4-D hal float input with a non-empty plane.
std::string check_input(const at::Tensor& input) {
  if (input.device().type() != kHalDeviceType) return "an input on another device";
  if (input.dim() != 3 && input.dim() != 4) return "an input of rank other than 3 or 4";
  if (!is_hal_float(input.scalar_type())) return "a dtype other than f32/f16/bf16";
  if (input.numel() == 0) return "an empty input";
  return "";
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(
    const at::Tensor& self, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
  static OpCounter& counter = op_counter("aten::max_pool2d_with_indices");
  std::string why = check_input(self);
  const std::optional<Geometry> g = geometry(kernel_size, stride, padding, dilation, ceil_mode);
  if (why.empty() && !g) why = "a geometry aten refuses";
  if (why.empty()) {
    const int64_t oh = output_extent(self.size(-2), *g, 0);
    const int64_t ow = output_extent(self.size(-1), *g, 1);
    why = "a window larger than the padded input";
    if (oh >= 1 && ow >= 1) {
      at::Tensor y = pooled_like(self, oh, ow, self.scalar_type());
      at::Tensor indices = pooled_like(self, oh, ow, at::kLong);
      const uint32_t flags =
          HAL_POOLING_INDICES | (ceil_mode ? static_cast<uint32_t>(HAL_POOLING_CEIL_MODE) : 0u);
      why = run_forward(HAL_POOLING_MAX, flags, *g, 0, self, y, indices);
      if (why.empty()) {
        ++counter.native;
        return {y, indices};
      }
    }
  }
  return HAL_FALLBACK(at::_ops::max_pool2d_with_indices, why, self, kernel_size, stride, padding,
                      dilation, ceil_mode);
}

at::Tensor max_pool2d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                            c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                                            c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                            bool ceil_mode, const at::Tensor& indices) {
  static OpCounter& counter = op_counter("aten::max_pool2d_with_indices_backward");
  std::string why = check_input(self);
  const std::optional<Geometry> g = geometry(kernel_size, stride, padding, dilation, ceil_mode);
  if (why.empty() && !g) why = "a geometry aten refuses";
  if (why.empty() &&
      (!hal_float_on(grad_output, self.device()) || indices.device() != self.device() ||
       indices.scalar_type() != at::kLong || grad_output.dim() != self.dim())) {
    why = "grad_output or indices of another device, dtype or rank";
  }
  if (why.empty()) {
    at::Tensor grad_input = at::empty_like(self);
    const uint32_t flags =
        HAL_POOLING_INDICES | (ceil_mode ? static_cast<uint32_t>(HAL_POOLING_CEIL_MODE) : 0u);
    why = run_backward(HAL_POOLING_MAX, flags, *g, 0, grad_output, indices, grad_input);
    if (why.empty()) {
      ++counter.native;
      return grad_input;
    }
  }
  return HAL_FALLBACK(at::_ops::max_pool2d_with_indices_backward, why, grad_output, self,
                      kernel_size, stride, padding, dilation, ceil_mode, indices);
}

// HAL's flags and divisor for aten's average-pooling options, or nullopt when HAL has none.
std::optional<std::pair<uint32_t, int64_t>> average_options(
    bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  uint32_t flags = 0;
  if (ceil_mode) flags |= HAL_POOLING_CEIL_MODE;
  if (count_include_pad) flags |= HAL_POOLING_COUNT_INCLUDE_PAD;
  int64_t divisor = 0;
  if (divisor_override.has_value()) {
    if (*divisor_override < 1 || *divisor_override > std::numeric_limits<int32_t>::max()) {
      return std::nullopt;
    }
    divisor = *divisor_override;
  }
  return std::make_pair(flags, divisor);
}

at::Tensor avg_pool2d(const at::Tensor& self, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                      c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                      std::optional<int64_t> divisor_override) {
  static OpCounter& counter = op_counter("aten::avg_pool2d");
  std::string why = check_input(self);
  const std::optional<Geometry> g = geometry(kernel_size, stride, padding, {}, ceil_mode);
  const auto options = average_options(ceil_mode, count_include_pad, divisor_override);
  if (why.empty() && (!g || !options)) why = "a geometry or divisor aten refuses";
  if (why.empty()) {
    const int64_t oh = output_extent(self.size(-2), *g, 0);
    const int64_t ow = output_extent(self.size(-1), *g, 1);
    why = "a window larger than the padded input";
    if (oh >= 1 && ow >= 1) {
      at::Tensor y = pooled_like(self, oh, ow, self.scalar_type());
      why = run_forward(HAL_POOLING_AVERAGE, options->first, *g, options->second, self, y,
                        at::Tensor());
      if (why.empty()) {
        ++counter.native;
        return y;
      }
    }
  }
  return HAL_FALLBACK(at::_ops::avg_pool2d, why, self, kernel_size, stride, padding, ceil_mode,
                      count_include_pad, divisor_override);
}

at::Tensor avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor_override) {
  static OpCounter& counter = op_counter("aten::avg_pool2d_backward");
  std::string why = check_input(self);
  const std::optional<Geometry> g = geometry(kernel_size, stride, padding, {}, ceil_mode);
  const auto options = average_options(ceil_mode, count_include_pad, divisor_override);
  if (why.empty() && (!g || !options)) why = "a geometry or divisor aten refuses";
  if (why.empty() &&
      (!hal_float_on(grad_output, self.device()) || grad_output.dim() != self.dim())) {
    why = "grad_output of another device, dtype or rank";
  }
  if (why.empty()) {
    at::Tensor grad_input = at::empty_like(self);
    why = run_backward(HAL_POOLING_AVERAGE, options->first, *g, options->second, grad_output,
                       at::Tensor(), grad_input);
    if (why.empty()) {
      ++counter.native;
      return grad_input;
    }
  }
  return HAL_FALLBACK(at::_ops::avg_pool2d_backward, why, grad_output, self, kernel_size, stride,
                      padding, ceil_mode, count_include_pad, divisor_override);
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef output_size_sym) {
  static OpCounter& counter = op_counter("aten::_adaptive_avg_pool2d");
  const c10::IntArrayRef output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  std::string why = check_input(self);
  if (why.empty() && (output_size.size() != 2 || output_size[0] < 1 || output_size[1] < 1)) {
    why = "an output size aten refuses";
  }
  if (why.empty()) {
    at::Tensor y = pooled_like(self, output_size[0], output_size[1], self.scalar_type());
    why = run_forward(HAL_POOLING_AVERAGE, HAL_POOLING_ADAPTIVE, Geometry{}, 0, self, y,
                      at::Tensor());
    if (why.empty()) {
      ++counter.native;
      return y;
    }
  }
  return HAL_FALLBACK_SYMINT(at::_ops::_adaptive_avg_pool2d, why, self, output_size_sym);
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  static OpCounter& counter = op_counter("aten::_adaptive_avg_pool2d_backward");
  std::string why = check_input(self);
  if (why.empty() &&
      (!hal_float_on(grad_output, self.device()) || grad_output.dim() != self.dim())) {
    why = "grad_output of another device, dtype or rank";
  }
  if (why.empty()) {
    at::Tensor grad_input = at::empty_like(self);
    why = run_backward(HAL_POOLING_AVERAGE, HAL_POOLING_ADAPTIVE, Geometry{}, 0, grad_output,
                       at::Tensor(), grad_input);
    if (why.empty()) {
      ++counter.native;
      return grad_input;
    }
  }
  return HAL_FALLBACK(at::_ops::_adaptive_avg_pool2d_backward, why, grad_output, self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices));
  m.impl("max_pool2d_with_indices_backward", TORCH_FN(max_pool2d_with_indices_backward));
  m.impl("avg_pool2d", TORCH_FN(avg_pool2d));
  m.impl("avg_pool2d_backward", TORCH_FN(avg_pool2d_backward));
  m.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool2d));
  m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool2d_backward));
}

}  // namespace hal_torch
