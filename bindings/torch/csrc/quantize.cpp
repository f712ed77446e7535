// Quantization on hal_ops (SPEC §17.6, the low-precision ops 50-54):
//
// - PyTorch's fake quantization (aten's fake_quantize_* and the learnable,
//   LSQ forms torch.ao.quantization's _LearnableFakeQuantize calls) on
//   HAL_OP_FAKE_QUANTIZE(_BACKWARD), with PyTorch's conventions
//   (HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE: v = x * (1 / s); CLIP_ROUNDED: the
//   straight-through mask tests the rounded value), so results are PyTorch
//   CPU's to the bit (the scale gradient to f32 summation order).
//   HAL's op has no zero point and clips to int8's [-128, 127]: an affine
//   [quant_min, quant_max] with zero point z is that op exactly when
//   quant_min - z = -128 and quant_max - z = 127 (int8 symmetric, or uint8
//   with z = 128). Every other case, and a scale that is not a positive
//   finite f32, runs PyTorch's CPU kernel through the fallback, which says
//   why: never a silently different result.
// - hal_torch::quantize_int8 and hal_torch::scaled_matmul, the deployment
//   side (HAL_OP_QUANTIZE to int8 with computed scales, HAL_OP_SCALED_MATMUL),
//   for int8 inference of a model fine-tuned with fake quantization.
#include "fallback.hpp"
#include "kernel_util.hpp"
#include "plans.hpp"

#include <ATen/ATen.h>
#include <ATen/ops/_fake_quantize_learnable_per_channel_affine_backward_ops.h>
#include <ATen/ops/_fake_quantize_learnable_per_channel_affine_ops.h>
#include <ATen/ops/_fake_quantize_learnable_per_tensor_affine_backward_ops.h>
#include <ATen/ops/_fake_quantize_learnable_per_tensor_affine_ops.h>
#include <ATen/ops/_fake_quantize_per_tensor_affine_cachemask_tensor_qparams_ops.h>
#include <ATen/ops/fake_quantize_per_channel_affine_cachemask_ops.h>
#include <ATen/ops/fake_quantize_per_tensor_affine_cachemask_ops.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace hal_torch {
namespace {

constexpr int64_t kInt8Min = -128;
constexpr int64_t kInt8Max = 127;

// Why HAL's op is not PyTorch's affine range for zero point |z|; empty when it is.
std::string range_reason(int64_t z, int64_t quant_min, int64_t quant_max) {
  if (quant_min - z == kInt8Min && quant_max - z == kInt8Max) return {};
  return "HAL's fake quantization has no zero point and clips to int8's [-128, 127]; "
         "[quant_min, quant_max] = [" +
         std::to_string(quant_min) + ", " + std::to_string(quant_max) + "] with zero point " +
         std::to_string(z) + " is [" + std::to_string(quant_min - z) + ", " +
         std::to_string(quant_max - z) + "] around it";
}

// Why |x| is not an input HAL's op takes here; empty when it is.
std::string input_reason(const at::Tensor& x) {
  if (!is_hal_float(x.scalar_type()))
    return std::string("the input is ") + c10::toString(x.scalar_type()) +
           " (HAL's fake quantization takes float32, float16 and bfloat16)";
  if (x.numel() == 0) return "the input is empty";
  return {};
}

// Why the scales (on the host) are not all positive finite floats; empty when they are.
std::string scale_reason(const at::Tensor& host_scale) {
  const at::Tensor s = host_scale.to(at::kFloat).contiguous();
  const float* p = s.const_data_ptr<float>();
  for (int64_t i = 0; i < s.numel(); ++i)
    if (!(std::isfinite(p[i]) && p[i] > 0.0f))
      return "a scale is " + std::to_string(p[i]) + " (HAL takes positive finite scales)";
  return {};
}

// A per-channel zero point (on the host) as the one integer every channel shares, or why not.
std::string channel_zero_point(const at::Tensor& host_zero_point, int64_t quant_min,
                               int64_t quant_max, bool round, int64_t* z) {
  at::Tensor zp = host_zero_point.to(at::kDouble).contiguous();
  if (round) zp = zp.round().clamp(static_cast<double>(quant_min), static_cast<double>(quant_max));
  const double* p = zp.const_data_ptr<double>();
  for (int64_t i = 0; i < zp.numel(); ++i) {
    if (p[i] != std::floor(p[i])) return "a zero point is not an integer";
    if (i > 0 && p[i] != p[0]) return "the zero points differ between channels";
  }
  *z = zp.numel() > 0 ? static_cast<int64_t>(p[0]) : 0;
  return {};
}

// x as HAL sees it for one scale per tensor (axis < 0) or one per channel
// along |axis|: the channel moved to the front, so that channel c is rows
// c * per_channel .. of the [rows, cols] matrix (cols = the last dimension),
// or, for a vector, column c.
struct QuantView {
  at::Tensor x;
  hal_quant_blocks_t blocks{0, 0};
  std::vector<int64_t> scale_sizes{1, 1};
};

QuantView quant_view(const at::Tensor& t, int64_t axis) {
  QuantView v;
  v.x = t.dim() == 0 ? t.reshape({1}) : (axis < 0 ? t : t.movedim(axis, 0));
  if (axis < 0) return v;
  const int64_t channels = v.x.size(0);
  if (v.x.dim() == 1) {
    v.blocks = {0, 1};
    v.scale_sizes = {1, channels};
  } else {
    v.blocks = {static_cast<uint32_t>(v.x.numel() / (channels * v.x.size(-1))), 0};
    v.scale_sizes = {channels, 1};
  }
  return v;
}

// The scale (a hal f32 tensor of numel 1 or channels) laid out as HAL's [r, c] scale tensor.
hal_tensor_desc_t scale_layout(const at::Tensor& scale, const QuantView& view) {
  const int64_t stride = scale.dim() == 0 ? 1 : scale.stride(0);
  const std::vector<int64_t> strides =
      view.scale_sizes[1] == 1 ? std::vector<int64_t>{stride, 1} : std::vector<int64_t>{0, stride};
  return layout(scale, view.scale_sizes, strides);
}

// y = fake_quantize(x) on HAL (y a fresh tensor like x). Empty on success, else HAL's reason.
std::string run_forward(const at::Tensor& x, const at::Tensor& scale, int64_t axis,
                        const at::Tensor& y) {
  const QuantView xv = quant_view(x, axis);
  const QuantView yv = quant_view(y, axis);
  const auto xd = describe(xv.x);
  const auto yd = describe(yv.x);
  if (!xd || !yd) return "HAL cannot describe the input's layout";
  auto desc = make_desc<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE);
  desc.qdtype = HAL_DTYPE_I8;
  desc.flags = HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE;
  desc.blocks = xv.blocks;
  desc.x = *xd;
  desc.y = *yd;
  desc.scale = scale_layout(scale, xv);
  std::string why;
  const Plan* plan = plan_or_reason(hal_index(x), desc, why);
  if (plan == nullptr) return why;
  execute(hal_index(x), *plan, {operand(xv.x), operand(scale), operand(yv.x)},
          "aten::fake_quantize");
  return {};
}

// grad_x (and, when grad_scale is defined, grad_scale's f32 [channels or 1]
// sums times |factor|): PyTorch's straight-through estimator and LSQ
// gradient. Empty on success, else HAL's reason.
std::string run_backward(const at::Tensor& x, const at::Tensor& scale, int64_t axis,
                         const at::Tensor& grad_y, const at::Tensor& grad_x,
                         const at::Tensor& grad_scale, double factor) {
  const QuantView xv = quant_view(x, axis);
  const QuantView gyv = quant_view(grad_y, axis);
  const QuantView gxv = quant_view(grad_x, axis);
  const auto xd = describe(xv.x);
  const auto gyd = describe(gyv.x);
  const auto gxd = describe(gxv.x);
  if (!xd || !gyd || !gxd) return "HAL cannot describe the operands' layout";
  auto desc = make_desc<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE_BACKWARD);
  desc.qdtype = HAL_DTYPE_I8;
  desc.flags = HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE | HAL_FAKE_QUANTIZE_CLIP_ROUNDED;
  desc.blocks = xv.blocks;
  desc.x = *xd;
  desc.grad_y = *gyd;
  desc.grad_x = *gxd;
  desc.scale = scale_layout(scale, xv);
  if (grad_scale.defined()) {
    desc.flags |= HAL_FAKE_QUANTIZE_GRAD_SCALE;
    desc.grad_scale_factor = static_cast<float>(factor);
    desc.grad_scale = scale_layout(grad_scale, xv);
  }
  std::string why;
  const Plan* plan = plan_or_reason(hal_index(x), desc, why);
  if (plan == nullptr) return why;
  execute(hal_index(x), *plan,
          {operand(xv.x), operand(scale), operand(gyv.x), operand(gxv.x), operand(grad_scale)},
          "aten::fake_quantize_backward");
  return {};
}

// PyTorch's mask (the rounded value inside [quant_min, quant_max]): the
// straight-through gradient of ones, as bool.
std::string run_mask(const at::Tensor& x, const at::Tensor& scale, int64_t axis, at::Tensor* mask) {
  const at::Tensor ones = at::ones_like(x, at::MemoryFormat::Contiguous);
  const at::Tensor passed = at::empty_like(ones);
  std::string why = run_backward(x, scale, axis, ones, passed, at::Tensor(), 1.0);
  if (why.empty()) *mask = passed.ne(0);
  return why;
}

// A hal f32 tensor [1] holding |value| (PyTorch's per-tensor scale is a double, used as float).
at::Tensor scale_tensor(const at::Tensor& like, double value) {
  return at::full({1}, static_cast<float>(value), like.options().dtype(at::kFloat));
}

// The forward and PyTorch's mask; empty on success, else HAL's reason.
std::string cachemask(const at::Tensor& x, const at::Tensor& scale, int64_t axis,
                      std::tuple<at::Tensor, at::Tensor>* out) {
  at::Tensor y = at::empty_like(x);
  at::Tensor mask;
  std::string why = run_forward(x, scale, axis, y);
  if (why.empty()) why = run_mask(x, scale, axis, &mask);
  if (why.empty()) *out = {y, mask};
  return why;
}

// ---- aten::fake_quantize_per_tensor_affine_cachemask ----------------------------------------

std::tuple<at::Tensor, at::Tensor> per_tensor_cachemask(const at::Tensor& self, double scale,
                                                        int64_t zero_point, int64_t quant_min,
                                                        int64_t quant_max) {
  static OpCounter& counter = op_counter("aten::fake_quantize_per_tensor_affine_cachemask");
  std::string why = input_reason(self);
  if (why.empty() && quant_min > quant_max) why = "quant_min > quant_max";
  if (why.empty()) why = range_reason(zero_point, quant_min, quant_max);
  if (why.empty()) why = scale_reason(at::scalar_tensor(scale, at::kFloat));
  if (why.empty()) {
    std::tuple<at::Tensor, at::Tensor> out;
    why = cachemask(self, scale_tensor(self, scale), -1, &out);
    if (why.empty()) {
      ++counter.native;
      return out;
    }
  }
  return HAL_FALLBACK(at::_ops::fake_quantize_per_tensor_affine_cachemask, why, self, scale,
                      zero_point, quant_min, quant_max);
}

std::tuple<at::Tensor, at::Tensor> per_tensor_cachemask_tensor_qparams(
    const at::Tensor& self, const at::Tensor& scale, const at::Tensor& zero_point,
    const at::Tensor& fake_quant_enabled, int64_t quant_min, int64_t quant_max) {
  static OpCounter& counter =
      op_counter("aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams");
  std::string why = input_reason(self);
  if (why.empty() &&
      (scale.numel() != 1 || zero_point.numel() != 1 || fake_quant_enabled.numel() != 1 ||
       scale.scalar_type() != at::kFloat || scale.device() != self.device()))
    why =
        "the scale, zero point or enable flag is not one value (scale float32, on the input's "
        "device)";
  if (why.empty() && quant_min > quant_max) why = "quant_min > quant_max";
  if (why.empty() && fake_quant_enabled.cpu().item<double>() == 0.0)
    why = "fake quantization is disabled (fake_quant_enabled = 0)";
  if (why.empty()) {
    const at::Tensor zp = zero_point.cpu().to(at::kDouble);
    const double z = zp.item<double>();
    why = z == std::floor(z) ? range_reason(static_cast<int64_t>(z), quant_min, quant_max)
                             : "the zero point is not an integer";
  }
  if (why.empty()) why = scale_reason(scale.cpu());
  if (why.empty()) {
    std::tuple<at::Tensor, at::Tensor> out;
    why = cachemask(self, scale.reshape({1}), -1, &out);
    if (why.empty()) {
      ++counter.native;
      return out;
    }
  }
  return HAL_FALLBACK(at::_ops::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams, why,
                      self, scale, zero_point, fake_quant_enabled, quant_min, quant_max);
}

// ---- aten::fake_quantize_per_channel_affine_cachemask ---------------------------------------

// Why (self, scale, zero_point, axis) is not a per-channel case HAL serves; *z the zero point.
std::string per_channel_reason(const at::Tensor& self, const at::Tensor& scale,
                               const at::Tensor& zero_point, int64_t axis, int64_t quant_min,
                               int64_t quant_max, bool round_zero_point, int64_t* z) {
  std::string why = input_reason(self);
  if (!why.empty()) return why;
  if (self.dim() == 0 || axis < 0 || axis >= self.dim()) return "the axis is out of range";
  if (scale.dim() != 1 || zero_point.dim() != 1 || scale.size(0) != self.size(axis) ||
      zero_point.size(0) != self.size(axis))
    return "the scale and zero point are not one value per channel";
  if (scale.scalar_type() != at::kFloat || scale.device() != self.device())
    return "the scale is not float32 on the input's device";
  if (quant_min > quant_max) return "quant_min > quant_max";
  why = channel_zero_point(zero_point.cpu(), quant_min, quant_max, round_zero_point, z);
  if (why.empty()) why = range_reason(*z, quant_min, quant_max);
  if (why.empty()) why = scale_reason(scale.cpu());
  return why;
}

std::tuple<at::Tensor, at::Tensor> per_channel_cachemask(const at::Tensor& self,
                                                         const at::Tensor& scale,
                                                         const at::Tensor& zero_point, int64_t axis,
                                                         int64_t quant_min, int64_t quant_max) {
  static OpCounter& counter = op_counter("aten::fake_quantize_per_channel_affine_cachemask");
  int64_t z = 0;
  std::string why =
      per_channel_reason(self, scale, zero_point, axis, quant_min, quant_max, false, &z);
  if (why.empty() && zero_point.scalar_type() != at::kInt &&
      zero_point.scalar_type() != at::kFloat && zero_point.scalar_type() != at::kHalf)
    why = "the zero point is not int32, float32 or float16";
  if (why.empty()) {
    std::tuple<at::Tensor, at::Tensor> out;
    why = cachemask(self, scale, axis, &out);
    if (why.empty()) {
      ++counter.native;
      return out;
    }
  }
  return HAL_FALLBACK(at::_ops::fake_quantize_per_channel_affine_cachemask, why, self, scale,
                      zero_point, axis, quant_min, quant_max);
}

// ---- the learnable (LSQ) forms --------------------------------------------------------------

// Why the learnable per-tensor case is not HAL's; the scale and zero point are read once.
std::string learnable_per_tensor_reason(const at::Tensor& self, const at::Tensor& scale,
                                        const at::Tensor& zero_point, int64_t quant_min,
                                        int64_t quant_max) {
  std::string why = input_reason(self);
  if (!why.empty()) return why;
  if (scale.numel() != 1 || zero_point.numel() != 1 || scale.scalar_type() != at::kFloat ||
      scale.device() != self.device())
    return "the scale and zero point are not one value each (scale float32, on the input's "
           "device)";
  if (quant_min > quant_max) return "quant_min > quant_max";
  // PyTorch rounds the zero point to nearest in the forward and as trunc(z + 0.5) in the
  // backward: one integer value means both agree.
  const double z = zero_point.cpu().to(at::kDouble).item<double>();
  if (z != std::floor(z)) return "the zero point is not an integer";
  if (z < static_cast<double>(quant_min) || z > static_cast<double>(quant_max))
    return "the zero point lies outside [quant_min, quant_max]";
  why = range_reason(static_cast<int64_t>(z), quant_min, quant_max);
  if (why.empty()) why = scale_reason(scale.cpu());
  return why;
}

at::Tensor learnable_per_tensor(const at::Tensor& self, const at::Tensor& scale,
                                const at::Tensor& zero_point, int64_t quant_min, int64_t quant_max,
                                double grad_factor) {
  static OpCounter& counter = op_counter("aten::_fake_quantize_learnable_per_tensor_affine");
  std::string why = learnable_per_tensor_reason(self, scale, zero_point, quant_min, quant_max);
  if (why.empty()) {
    at::Tensor y = at::empty_like(self);
    why = run_forward(self, scale.reshape({1}), -1, y);
    if (why.empty()) {
      ++counter.native;
      return y;
    }
  }
  return HAL_FALLBACK(at::_ops::_fake_quantize_learnable_per_tensor_affine, why, self, scale,
                      zero_point, quant_min, quant_max, grad_factor);
}

// dZeroPoint: PyTorch's -scale * grad_factor * grad_y summed over the elements outside the
// range, i.e. where the straight-through gradient is 0 (grad_y - grad_x is grad_y there and
// exactly 0 inside); summed over every dimension but |axis| (all of them: axis < 0).
at::Tensor zero_point_gradient(const at::Tensor& grad, const at::Tensor& grad_x,
                               const at::Tensor& scale, int64_t axis, double grad_factor) {
  const at::Tensor outside = (grad - grad_x).to(at::kFloat);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d != axis) dims.push_back(d);
  at::Tensor sum = dims.empty() ? outside : outside.sum(dims);
  return sum.reshape({-1}) * scale.reshape({-1}) * (-grad_factor);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> learnable_per_tensor_backward(
    const at::Tensor& grad, const at::Tensor& self, const at::Tensor& scale,
    const at::Tensor& zero_point, int64_t quant_min, int64_t quant_max, double grad_factor) {
  static OpCounter& counter =
      op_counter("aten::_fake_quantize_learnable_per_tensor_affine_backward");
  std::string why = learnable_per_tensor_reason(self, scale, zero_point, quant_min, quant_max);
  if (why.empty() && (grad.sizes() != self.sizes() || grad.scalar_type() != self.scalar_type()))
    why = "grad and self differ in shape or dtype";
  if (why.empty()) {
    at::Tensor grad_x = at::empty_like(self);
    at::Tensor grad_scale = at::empty({1}, scale.options());
    why = run_backward(self, scale.reshape({1}), -1, grad, grad_x, grad_scale, grad_factor);
    if (why.empty()) {
      ++counter.native;
      at::Tensor grad_zero_point =
          zero_point_gradient(grad, grad_x, scale, -1, grad_factor).to(zero_point.scalar_type());
      return {grad_x, grad_scale.reshape({1}), grad_zero_point.reshape({1})};
    }
  }
  return HAL_FALLBACK(at::_ops::_fake_quantize_learnable_per_tensor_affine_backward, why, grad,
                      self, scale, zero_point, quant_min, quant_max, grad_factor);
}

at::Tensor learnable_per_channel(const at::Tensor& self, const at::Tensor& scale,
                                 const at::Tensor& zero_point, int64_t axis, int64_t quant_min,
                                 int64_t quant_max, double grad_factor) {
  static OpCounter& counter = op_counter("aten::_fake_quantize_learnable_per_channel_affine");
  int64_t z = 0;
  // PyTorch's forward rounds the zero points (round, then clamp); that value must be one
  // integer shared by all channels.
  std::string why =
      per_channel_reason(self, scale, zero_point, axis, quant_min, quant_max, true, &z);
  if (why.empty()) {
    at::Tensor y = at::empty_like(self);
    why = run_forward(self, scale, axis, y);
    if (why.empty()) {
      ++counter.native;
      return y;
    }
  }
  return HAL_FALLBACK(at::_ops::_fake_quantize_learnable_per_channel_affine, why, self, scale,
                      zero_point, axis, quant_min, quant_max, grad_factor);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> learnable_per_channel_backward(
    const at::Tensor& grad, const at::Tensor& self, const at::Tensor& scale,
    const at::Tensor& zero_point, int64_t axis, int64_t quant_min, int64_t quant_max,
    double grad_factor) {
  static OpCounter& counter =
      op_counter("aten::_fake_quantize_learnable_per_channel_affine_backward");
  int64_t z = 0;
  // The backward rounds as trunc(z + 0.5): unrounded integers agree with the forward.
  std::string why =
      per_channel_reason(self, scale, zero_point, axis, quant_min, quant_max, false, &z);
  if (why.empty() && (z < quant_min || z > quant_max))
    why = "the zero point lies outside [quant_min, quant_max]";
  if (why.empty() && (grad.sizes() != self.sizes() || grad.scalar_type() != self.scalar_type()))
    why = "grad and self differ in shape or dtype";
  if (why.empty()) {
    at::Tensor grad_x = at::empty_like(self);
    at::Tensor grad_scale = at::empty({scale.size(0)}, scale.options());
    why = run_backward(self, scale, axis, grad, grad_x, grad_scale, grad_factor);
    if (why.empty()) {
      ++counter.native;
      at::Tensor grad_zero_point =
          zero_point_gradient(grad, grad_x, scale, axis, grad_factor).to(zero_point.scalar_type());
      return {grad_x, grad_scale, grad_zero_point};
    }
  }
  return HAL_FALLBACK(at::_ops::_fake_quantize_learnable_per_channel_affine_backward, why, grad,
                      self, scale, zero_point, axis, quant_min, quant_max, grad_factor);
}

// ---- deployment: hal_torch::quantize_int8, hal_torch::scaled_matmul ------------------------

void check_blocks(const char* what, int64_t rows, int64_t cols) {
  TORCH_CHECK(rows >= 0 && cols >= 0 && rows <= UINT32_MAX && cols <= UINT32_MAX, what,
              ": block extents must be in [0, 2^32) (0: the whole dimension), got [", rows, ", ",
              cols, "]");
}

// q = int8(x / scale) per block (HAL_OP_QUANTIZE): with |given| its scales
// (static scaling, f32 [rows / block rows, cols / block cols]), else
// computed as amax / 127 and returned.
std::tuple<at::Tensor, at::Tensor> quantize_int8(const at::Tensor& x, int64_t block_rows,
                                                 int64_t block_cols,
                                                 const std::optional<at::Tensor>& given) {
  check_blocks("hal_torch::quantize_int8", block_rows, block_cols);
  TORCH_CHECK(x.device().type() == c10::DeviceType::PrivateUse1,
              "hal_torch::quantize_int8: x must be a hal tensor, got ", x.device());
  TORCH_CHECK(x.dim() >= 1 && is_hal_float(x.scalar_type()),
              "hal_torch::quantize_int8: x must be float32, float16 or bfloat16 of rank >= 1");
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const int64_t br = block_rows == 0 ? rows : block_rows;
  const int64_t bc = block_cols == 0 ? cols : block_cols;
  TORCH_CHECK(br > 0 && bc > 0 && rows % br == 0 && cols % bc == 0,
              "hal_torch::quantize_int8: blocks [", block_rows, ", ", block_cols,
              "] must divide x's [rows, cols] = [", rows, ", ", cols, "]");
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  at::Tensor scale;
  auto desc = make_desc<hal_op_quantize_desc_t>(HAL_OP_QUANTIZE);
  if (given.has_value() && given->defined()) {
    TORCH_CHECK(given->scalar_type() == at::kFloat && given->device() == x.device() &&
                    given->numel() == (rows / br) * (cols / bc),
                "hal_torch::quantize_int8: the given scale must be float32 on x's device with ",
                (rows / br) * (cols / bc), " values (one per block), got ", given->sizes());
    scale = given->reshape({rows / br, cols / bc});
    desc.flags = HAL_QUANTIZE_GIVEN_SCALE;
  } else {
    scale = at::empty({rows / br, cols / bc}, x.options().dtype(at::kFloat));
  }
  desc.blocks = {static_cast<uint32_t>(block_rows), static_cast<uint32_t>(block_cols)};
  const auto xd = describe(x);
  TORCH_CHECK(xd.has_value(), "hal_torch::quantize_int8: HAL cannot describe x's layout");
  desc.x = *xd;
  desc.q = layout(q);
  desc.scale = layout(scale);
  std::string why;
  const Plan* plan = plan_or_reason(hal_index(x), desc, why);
  TORCH_CHECK(plan != nullptr, "hal_torch::quantize_int8: HAL declined: ", why);
  execute(hal_index(x), *plan, {operand(x), operand(q), operand(scale)},
          "hal_torch::quantize_int8");
  return {q, scale};
}

// d = (a * a_scale) @ (b * b_scale)^T, a [m, k] and b [n, k] int8 (HAL_OP_SCALED_MATMUL).
at::Tensor scaled_matmul(const at::Tensor& a, const at::Tensor& a_scale, int64_t a_block_rows,
                         int64_t a_block_cols, const at::Tensor& b, const at::Tensor& b_scale,
                         int64_t b_block_rows, int64_t b_block_cols, at::ScalarType out_dtype) {
  check_blocks("hal_torch::scaled_matmul a", a_block_rows, a_block_cols);
  check_blocks("hal_torch::scaled_matmul b", b_block_rows, b_block_cols);
  TORCH_CHECK(a.device() == b.device() && a.device() == a_scale.device() &&
                  a.device() == b_scale.device() &&
                  a.device().type() == c10::DeviceType::PrivateUse1,
              "hal_torch::scaled_matmul: every operand must be on one hal device");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1),
              "hal_torch::scaled_matmul: a [m, k] and b [n, k], got ", a.sizes(), " and ",
              b.sizes());
  TORCH_CHECK(a_scale.dim() == 2 && b_scale.dim() == 2,
              "hal_torch::scaled_matmul: the scales must be rank 2");
  at::Tensor d = at::empty({a.size(0), b.size(0)}, a.options().dtype(out_dtype));
  auto desc = make_desc<hal_op_scaled_matmul_desc_t>(HAL_OP_SCALED_MATMUL);
  desc.a_blocks = {static_cast<uint32_t>(a_block_rows), static_cast<uint32_t>(a_block_cols)};
  desc.b_blocks = {static_cast<uint32_t>(b_block_rows), static_cast<uint32_t>(b_block_cols)};
  const auto ad = describe(a), asd = describe(a_scale), bd = describe(b), bsd = describe(b_scale),
             dd = describe(d);
  TORCH_CHECK(ad && asd && bd && bsd && dd,
              "hal_torch::scaled_matmul: HAL cannot describe an operand (a dtype HAL lacks?)");
  desc.a = *ad;
  desc.a_scale = *asd;
  desc.b = *bd;
  desc.b_scale = *bsd;
  desc.d = *dd;
  std::string why;
  const Plan* plan = plan_or_reason(hal_index(a), desc, why);
  TORCH_CHECK(plan != nullptr, "hal_torch::scaled_matmul: HAL declined: ", why);
  execute(hal_index(a), *plan,
          {operand(a), operand(a_scale), operand(b), operand(b_scale), nullptr, operand(d)},
          "hal_torch::scaled_matmul");
  return d;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fake_quantize_per_tensor_affine_cachemask", TORCH_FN(per_tensor_cachemask));
  m.impl("_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
         TORCH_FN(per_tensor_cachemask_tensor_qparams));
  m.impl("fake_quantize_per_channel_affine_cachemask", TORCH_FN(per_channel_cachemask));
  m.impl("_fake_quantize_learnable_per_tensor_affine", TORCH_FN(learnable_per_tensor));
  m.impl("_fake_quantize_learnable_per_tensor_affine_backward",
         TORCH_FN(learnable_per_tensor_backward));
  m.impl("_fake_quantize_learnable_per_channel_affine", TORCH_FN(learnable_per_channel));
  m.impl("_fake_quantize_learnable_per_channel_affine_backward",
         TORCH_FN(learnable_per_channel_backward));
}

TORCH_LIBRARY(hal_torch, m) {
  m.def(
      "quantize_int8(Tensor x, int block_rows, int block_cols, Tensor? scale=None) -> (Tensor, "
      "Tensor)");
  m.def(
      "scaled_matmul(Tensor a, Tensor a_scale, int a_block_rows, int a_block_cols, Tensor b, "
      "Tensor b_scale, int b_block_rows, int b_block_cols, ScalarType out_dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(hal_torch, PrivateUse1, m) {
  m.impl("quantize_int8", TORCH_FN(quantize_int8));
  m.impl("scaled_matmul", TORCH_FN(scaled_matmul));
}

}  // namespace hal_torch
