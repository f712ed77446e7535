// Elementwise aten ops on hal_ops: arithmetic, comparisons, logical and
// bitwise ops (HAL_OP_BINARY, HAL_OP_BINARY_SCALAR for a CPU scalar
// operand), unary math (HAL_OP_UNARY_MATH), activations and their backward
// (HAL_OP_UNARY, HAL_OP_UNARY_BACKWARD), where, clamp, dropout.
//
// A TensorIterator gives each op PyTorch's own broadcasting, type promotion,
// output allocation and overlap checks; its coalesced layout becomes the HAL
// descriptors, and HAL computes mixed dtypes in its own domain (f32 for a
// float result). A case HAL declines (float64, complex, a bool sum...) runs
// through the fallback with HAL's reason.
#include "copy.hpp"
#include "generator.hpp"
#include "kernel_util.hpp"

#include <ATen/ScalarOps.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/atan2_ops.h>
#include <ATen/ops/bitwise_and_ops.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bitwise_or_ops.h>
#include <ATen/ops/bitwise_xor_ops.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/floor_divide_ops.h>
#include <ATen/ops/fmod_ops.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/logical_and_ops.h>
#include <ATen/ops/logical_or_ops.h>
#include <ATen/ops/logical_xor_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_dropout_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/remainder_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/where_ops.h>
#include <torch/library.h>

#include <cmath>
#include <functional>

namespace hal_torch {
namespace {

// ---- iterators ------------------------------------------------------------------------------

enum class Promotion {
  kCommon,        // PyTorch's common dtype (add, mul, maximum, ...)
  kIntegerFloat,  // integers promoted to the default float (true division)
  kComparison,    // compared in the common dtype, bool result
  kLogical,       // any inputs, bool result
};

// The iterator of an op writing |out| (undefined: allocate; |inplace|: out is a, never resized).
at::TensorIterator binary_iterator(Promotion promotion, const at::Tensor& out, const at::Tensor& a,
                                   const at::Tensor& b, bool inplace) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(true).allow_cpu_scalars(true);
  if (out.defined()) {
    config.add_output(out);
  } else {
    config.add_owned_output(at::Tensor());
  }
  config.add_const_input(a).add_const_input(b);
  switch (promotion) {
    case Promotion::kCommon:
    case Promotion::kIntegerFloat:
      config.promote_inputs_to_common_dtype(true)
          .cast_common_dtype_to_outputs(true)
          .enforce_safe_casting_to_output(true)
          .promote_integer_inputs_to_float(promotion == Promotion::kIntegerFloat);
      break;
    case Promotion::kComparison:
      config.promote_inputs_to_common_dtype(true);
      if (!out.defined()) config.declare_static_dtype(at::kBool);
      break;
    case Promotion::kLogical:
      config.check_all_same_dtype(false);
      if (!out.defined()) config.declare_static_dtype(at::kBool);
      break;
  }
  if (inplace) config.resize_outputs(false);
  return config.build();
}

at::TensorIterator unary_iterator(const at::Tensor& out, const at::Tensor& x, bool to_float,
                                  bool inplace, std::optional<at::ScalarType> result = {}) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(true);
  if (out.defined()) {
    config.add_output(out);
  } else {
    config.add_owned_output(at::Tensor());
  }
  config.add_const_input(x);
  if (result.has_value()) {
    config.check_all_same_dtype(false);
    if (!out.defined()) config.declare_static_dtype(*result);
  } else {
    config.promote_inputs_to_common_dtype(true)
        .cast_common_dtype_to_outputs(true)
        .enforce_safe_casting_to_output(true)
        .promote_integer_inputs_to_float(to_float);
  }
  if (inplace) config.resize_outputs(false);
  return config.build();
}

c10::Scalar cpu_scalar(const at::TensorIteratorBase& iter, int arg) {
  return at::Tensor(iter.tensor_base(arg)).item();
}

// ---- binary ---------------------------------------------------------------------------------

struct BinaryOp {
  hal_binary_op_t op;
  Promotion promotion;
  bool commutative;
};

// True when |value| (a finite double) rounds to inf in f32: HAL refuses such a run-time float
// scalar (SPEC §17.1: from halfway between FLT_MAX and 2^128 on), where PyTorch computes with inf.
bool overflows_f32(double value) {
  return std::isfinite(value) && std::fabs(value) >= 0x1.ffffffp+127;
}

bool alpha_is_one(const c10::Scalar& alpha) {
  return alpha.isFloatingPoint() ? alpha.toDouble() == 1.0
         : alpha.isBoolean()     ? alpha.toBool()
                                 : alpha.toLong() == 1;
}

// out = x OP s (s OP x with |scalar_first|), s a host value: HAL_OP_BINARY_SCALAR, or
// for float results the older ops: x * s as HAL_OP_UNARY's scaling, the others as
// HAL_OP_BINARY against s kept on the device (device_constant) and read with stride 0.
std::string run_binary_scalar(hal_binary_op_t op, at::TensorIterator& iter, int x_arg,
                              const c10::Scalar& s, bool scalar_first) {
  const c10::DeviceIndex device = hal_index(iter.output_base());
  const std::optional<hal_tensor_desc_t> x = iter_desc(iter, x_arg);
  const std::optional<hal_tensor_desc_t> out = iter_desc(iter, 0);
  if (!x || !out) return "a layout or dtype HAL cannot describe";
  if (s.isFloatingPoint() && overflows_f32(s.toDouble())) {
    return "a float scalar past f32's range (HAL computes in f32 and refuses it)";
  }
  std::string why;
  {
    auto desc = make_desc<hal_op_binary_scalar_desc_t>(HAL_OP_BINARY_SCALAR);
    desc.op = op;
    desc.alpha = 1.0f;
    desc.scalar_first = scalar_first ? 1 : 0;
    desc.scalar_is_float = s.isFloatingPoint() ? 1 : 0;
    desc.x = *x;
    desc.out = *out;
    if (const Plan* plan = plan_or_reason(device, desc, why)) {
      execute(device, *plan, {iter.data_ptr(x_arg), iter.data_ptr(0)}, "binary", {scalar_value(s)});
      return "";
    }
  }
  const bool float_result = is_hal_float(iter.dtype(0)) && is_hal_float(iter.dtype(x_arg));
  if (!float_result || s.isComplex()) return why;
  const double value = s.isBoolean() ? static_cast<double>(s.toBool()) : s.toDouble();
  if (op == HAL_BINARY_MUL) {
    auto desc = make_desc<hal_op_unary_desc_t>(HAL_OP_UNARY);
    desc.activation = HAL_ACTIVATION_NONE;
    desc.alpha = static_cast<float>(value);
    desc.x = *x;
    desc.out = *out;
    std::string unary_why;
    if (const Plan* plan = plan_or_reason(device, desc, unary_why)) {
      execute(device, *plan, {iter.data_ptr(x_arg), iter.data_ptr(0)}, "scale");
      return "";
    }
    return why + "; " + unary_why;
  }
  if (op > HAL_BINARY_MIN) return why;
  const at::Tensor constant = device_constant(device, at::kFloat, value);
  hal_tensor_desc_t broadcast{};
  broadcast.dtype = HAL_DTYPE_F32;
  broadcast.rank = out->rank;
  for (uint32_t d = 0; d < out->rank; ++d) broadcast.shape[d] = out->shape[d];  // strides 0
  auto desc = make_desc<hal_op_binary_desc_t>(HAL_OP_BINARY);
  desc.op = op;
  desc.alpha = 1.0f;
  desc.a = scalar_first ? broadcast : *x;
  desc.b = scalar_first ? *x : broadcast;
  desc.out = *out;
  std::string binary_why;
  const Plan* plan = plan_or_reason(device, desc, binary_why);
  if (plan == nullptr) return why + "; " + binary_why;
  void* const c = operand(constant);
  void* const xp = iter.data_ptr(x_arg);
  execute(device, *plan, {scalar_first ? c : xp, scalar_first ? xp : c, iter.data_ptr(0)},
          "binary");
  return "";
}

// out = a OP alpha*b on HAL (alpha only with ADD/SUB); "" when done, else why not.
std::string run_binary(const BinaryOp& op, at::TensorIterator& iter, const c10::Scalar& alpha) {
  if (iter.numel() == 0) return "";
  const bool scalar_a = iter.is_cpu_scalar(1);
  const bool scalar_b = iter.is_cpu_scalar(2);
  if (scalar_a && scalar_b) return "both operands are CPU scalars";
  const c10::DeviceIndex device = hal_index(iter.output_base());
  const std::optional<hal_tensor_desc_t> out = iter_desc(iter, 0);
  if (!out) return "a layout or dtype HAL cannot describe";
  std::string why;
  if (scalar_a || scalar_b) {
    const int x_arg = scalar_b ? 1 : 2;
    c10::Scalar s = cpu_scalar(iter, scalar_b ? 2 : 1);
    if (!alpha_is_one(alpha)) {
      if (scalar_a) return "alpha with a scalar first operand";
      s = s.isFloatingPoint() || alpha.isFloatingPoint()
              ? c10::Scalar(s.toDouble() * alpha.toDouble())
              : c10::Scalar(s.toLong() * alpha.toLong());
    }
    return run_binary_scalar(op.op, iter, x_arg, s, scalar_a);
  }
  if (!alpha_is_one(alpha)) return "alpha";  // the caller scales b first
  int a_arg = 1;
  int b_arg = 2;
  // HAL lets out be b only when a's layout differs from out's: an out that is b goes first.
  if (iter.data_ptr(0) == iter.data_ptr(2) && iter.data_ptr(0) != iter.data_ptr(1)) {
    if (!op.commutative) return "out is the second operand";
    std::swap(a_arg, b_arg);
  }
  const std::optional<hal_tensor_desc_t> a = iter_desc(iter, a_arg);
  const std::optional<hal_tensor_desc_t> b = iter_desc(iter, b_arg);
  if (!a || !b) return "a layout or dtype HAL cannot describe";
  auto desc = make_desc<hal_op_binary_desc_t>(HAL_OP_BINARY);
  desc.op = op.op;
  desc.alpha = 1.0f;
  desc.a = *a;
  desc.b = *b;
  desc.out = *out;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {iter.data_ptr(a_arg), iter.data_ptr(b_arg), iter.data_ptr(0)}, "binary");
  return "";
}

using Fallback = std::function<at::Tensor(const std::string&)>;

// b scaled by alpha (add/sub with alpha != 1 between two device tensors: HAL_OP_BINARY's alpha
// scales a OP b, not b), what at::mul(b, alpha) gives. A float b (alpha real) is scaled by
// HAL_OP_UNARY straight into a tensor of b's layout: through at::mul, the dispatcher, a wrapped
// scalar tensor and a TensorIterator cost more than the op itself (optimizer updates,
// p.add_(g, alpha=-lr), are such small calls).
at::Tensor scaled(const at::Tensor& b, const c10::Scalar& alpha) {
  const double value = alpha.isComplex()   ? std::nan("")
                       : alpha.isBoolean() ? static_cast<double>(alpha.toBool())
                                           : alpha.toDouble();
  if (b.is_privateuseone() && is_hal_float(b.scalar_type()) && std::isfinite(value) &&
      !overflows_f32(value) && b.numel() > 0 && b.is_non_overlapping_and_dense()) {
    at::Tensor out = at::empty_strided(b.sizes(), b.strides(), b.options());
    const std::optional<hal_tensor_desc_t> x = describe(b);
    const std::optional<hal_tensor_desc_t> y = describe(out);
    if (x && y) {
      auto desc = make_desc<hal_op_unary_desc_t>(HAL_OP_UNARY);
      desc.activation = HAL_ACTIVATION_NONE;
      desc.alpha = static_cast<float>(value);
      desc.x = *x;
      desc.out = *y;
      std::string why;  // a declined plan takes at::mul's path
      if (const Plan* plan = plan_or_reason(hal_index(b), desc, why)) {
        execute(hal_index(b), *plan, {operand(b), operand(out)}, "scale");
        return out;
      }
    }
  }
  return at::mul(b, alpha);
}

// An alpha that f32 cannot hold: aten's kernel decides what it means (PyTorch refuses one that
// the op's dtype cannot hold: "value cannot be converted to type float without overflow").
bool alpha_overflows_f32(const c10::Scalar& alpha) {
  return alpha.isFloatingPoint() && overflows_f32(alpha.toDouble());
}

// True when add/sub scale b before the op: alpha != 1 between two device tensors (a CPU scalar
// operand takes alpha into the scalar instead), known before the iterator is built.
bool scales_b_first(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  return a.is_privateuseone() && b.is_privateuseone() && !alpha_is_one(alpha);
}

at::Tensor binary(OpCounter& counter, const BinaryOp& op, const at::Tensor& a, const at::Tensor& b,
                  const c10::Scalar& alpha, const Fallback& fallback) {
  if (alpha_overflows_f32(alpha)) return fallback("alpha past f32's range");
  const bool scale_first = scales_b_first(a, b, alpha);
  at::TensorIterator iter =
      binary_iterator(op.promotion, at::Tensor(), a, scale_first ? scaled(b, alpha) : b, false);
  std::string why = run_binary(op, iter, scale_first ? c10::Scalar(1) : alpha);
  if (why == "alpha") {
    iter = binary_iterator(op.promotion, at::Tensor(), a, scaled(b, alpha), false);
    why = run_binary(op, iter, 1);
  }
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return iter.output();
}

void binary_into(OpCounter& counter, const BinaryOp& op, const at::Tensor& a, const at::Tensor& b,
                 const c10::Scalar& alpha, const at::Tensor& out, bool inplace,
                 const Fallback& fallback) {
  if (alpha_overflows_f32(alpha)) {
    fallback("alpha past f32's range");
    return;
  }
  const bool scale_first = scales_b_first(a, b, alpha);
  at::TensorIterator iter =
      binary_iterator(op.promotion, out, a, scale_first ? scaled(b, alpha) : b, inplace);
  std::string why = run_binary(op, iter, scale_first ? c10::Scalar(1) : alpha);
  if (why == "alpha") {
    iter = binary_iterator(op.promotion, out, a, scaled(b, alpha), inplace);
    why = run_binary(op, iter, 1);
  }
  if (!why.empty()) {
    fallback(why);
    return;
  }
  ++counter.native;
}

// The three forms of an arithmetic op with alpha (add, sub).
#define HAL_ALPHA_BINARY(fn, aten, hal_op, commutative)                                      \
  at::Tensor fn(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {        \
    static OpCounter& counter = op_counter("aten::" #aten ".Tensor");                        \
    return binary(counter, {hal_op, Promotion::kCommon, commutative}, a, b, alpha,           \
                  [&](const std::string& why) {                                              \
                    return HAL_FALLBACK(at::_ops::aten##_Tensor, why, a, b, alpha);          \
                  });                                                                        \
  }                                                                                          \
  at::Tensor& fn##_(at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {          \
    static OpCounter& counter = op_counter("aten::" #aten "_.Tensor");                       \
    binary_into(counter, {hal_op, Promotion::kCommon, commutative}, a, b, alpha, a, true,    \
                [&](const std::string& why) {                                                \
                  return HAL_FALLBACK(at::_ops::aten##__Tensor, why, a, b, alpha);           \
                });                                                                          \
    return a;                                                                                \
  }                                                                                          \
  at::Tensor& fn##_out(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha,   \
                       at::Tensor& out) {                                                    \
    static OpCounter& counter = op_counter("aten::" #aten ".out");                           \
    binary_into(counter, {hal_op, Promotion::kCommon, commutative}, a, b, alpha, out, false, \
                [&](const std::string& why) {                                                \
                  return HAL_FALLBACK(at::_ops::aten##_out, why, a, b, alpha, out);          \
                });                                                                          \
    return out;                                                                              \
  }

HAL_ALPHA_BINARY(add, add, HAL_BINARY_ADD, true)
HAL_ALPHA_BINARY(sub, sub, HAL_BINARY_SUB, false)

// Ops without alpha: functional and out= forms, and the in-place form where aten has one.
// The counters carry aten's overload names, as the fallback's do.
#define HAL_PLAIN_BINARY(fn, functional_op, out_op, name, out_name, hal_op, promotion, comm)       \
  at::Tensor fn(const at::Tensor& a, const at::Tensor& b) {                                        \
    static OpCounter& counter = op_counter("aten::" name);                                         \
    return binary(counter, {hal_op, promotion, comm}, a, b, 1,                                     \
                  [&](const std::string& why) { return HAL_FALLBACK(functional_op, why, a, b); }); \
  }                                                                                                \
  at::Tensor& fn##_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {                \
    static OpCounter& counter = op_counter("aten::" out_name);                                     \
    binary_into(counter, {hal_op, promotion, comm}, a, b, 1, out, false,                           \
                [&](const std::string& why) { return HAL_FALLBACK(out_op, why, a, b, out); });     \
    return out;                                                                                    \
  }
#define HAL_INPLACE_BINARY(fn, inplace_op, inplace_name, hal_op, promotion, comm)             \
  at::Tensor& fn##_(at::Tensor& a, const at::Tensor& b) {                                     \
    static OpCounter& counter = op_counter("aten::" inplace_name);                            \
    binary_into(counter, {hal_op, promotion, comm}, a, b, 1, a, true,                         \
                [&](const std::string& why) { return HAL_FALLBACK(inplace_op, why, a, b); }); \
    return a;                                                                                 \
  }

// (function, aten ops functional/in-place/out=, their overload names, HAL op, promotion,
// commutative)
#define HAL_BINARY_WITH_INPLACE(fn, functional_op, inplace_op, out_op, name, inplace_name, \
                                out_name, hal_op, promotion, c)                            \
  HAL_PLAIN_BINARY(fn, functional_op, out_op, name, out_name, hal_op, promotion, c)        \
  HAL_INPLACE_BINARY(fn, inplace_op, inplace_name, hal_op, promotion, c)

HAL_BINARY_WITH_INPLACE(mul, at::_ops::mul_Tensor, at::_ops::mul__Tensor, at::_ops::mul_out,
                        "mul.Tensor", "mul_.Tensor", "mul.out", HAL_BINARY_MUL, Promotion::kCommon,
                        true)
HAL_BINARY_WITH_INPLACE(div, at::_ops::div_Tensor, at::_ops::div__Tensor, at::_ops::div_out,
                        "div.Tensor", "div_.Tensor", "div.out", HAL_BINARY_DIV,
                        Promotion::kIntegerFloat, false)
HAL_PLAIN_BINARY(maximum, at::_ops::maximum, at::_ops::maximum_out, "maximum", "maximum.out",
                 HAL_BINARY_MAX, Promotion::kCommon, true)
HAL_PLAIN_BINARY(minimum, at::_ops::minimum, at::_ops::minimum_out, "minimum", "minimum.out",
                 HAL_BINARY_MIN, Promotion::kCommon, true)
HAL_BINARY_WITH_INPLACE(atan2, at::_ops::atan2, at::_ops::atan2_, at::_ops::atan2_out, "atan2",
                        "atan2_", "atan2.out", HAL_BINARY_ATAN2, Promotion::kIntegerFloat, false)
HAL_BINARY_WITH_INPLACE(fmod, at::_ops::fmod_Tensor, at::_ops::fmod__Tensor,
                        at::_ops::fmod_Tensor_out, "fmod.Tensor", "fmod_.Tensor", "fmod.Tensor_out",
                        HAL_BINARY_FMOD, Promotion::kCommon, false)
HAL_BINARY_WITH_INPLACE(remainder, at::_ops::remainder_Tensor, at::_ops::remainder__Tensor,
                        at::_ops::remainder_Tensor_out, "remainder.Tensor", "remainder_.Tensor",
                        "remainder.Tensor_out", HAL_BINARY_REMAINDER, Promotion::kCommon, false)
HAL_BINARY_WITH_INPLACE(floor_divide, at::_ops::floor_divide, at::_ops::floor_divide__Tensor,
                        at::_ops::floor_divide_out, "floor_divide", "floor_divide_.Tensor",
                        "floor_divide.out", HAL_BINARY_FLOOR_DIVIDE, Promotion::kCommon, false)
HAL_BINARY_WITH_INPLACE(pow, at::_ops::pow_Tensor_Tensor, at::_ops::pow__Tensor,
                        at::_ops::pow_Tensor_Tensor_out, "pow.Tensor_Tensor", "pow_.Tensor",
                        "pow.Tensor_Tensor_out", HAL_BINARY_POW, Promotion::kCommon, false)
HAL_BINARY_WITH_INPLACE(logical_and, at::_ops::logical_and, at::_ops::logical_and_,
                        at::_ops::logical_and_out, "logical_and", "logical_and_", "logical_and.out",
                        HAL_BINARY_LOGICAL_AND, Promotion::kLogical, true)
HAL_BINARY_WITH_INPLACE(logical_or, at::_ops::logical_or, at::_ops::logical_or_,
                        at::_ops::logical_or_out, "logical_or", "logical_or_", "logical_or.out",
                        HAL_BINARY_LOGICAL_OR, Promotion::kLogical, true)
HAL_BINARY_WITH_INPLACE(logical_xor, at::_ops::logical_xor, at::_ops::logical_xor_,
                        at::_ops::logical_xor_out, "logical_xor", "logical_xor_", "logical_xor.out",
                        HAL_BINARY_LOGICAL_XOR, Promotion::kLogical, true)
HAL_BINARY_WITH_INPLACE(bitwise_and, at::_ops::bitwise_and_Tensor, at::_ops::bitwise_and__Tensor,
                        at::_ops::bitwise_and_Tensor_out, "bitwise_and.Tensor",
                        "bitwise_and_.Tensor", "bitwise_and.Tensor_out", HAL_BINARY_BITWISE_AND,
                        Promotion::kCommon, true)
HAL_BINARY_WITH_INPLACE(bitwise_or, at::_ops::bitwise_or_Tensor, at::_ops::bitwise_or__Tensor,
                        at::_ops::bitwise_or_Tensor_out, "bitwise_or.Tensor", "bitwise_or_.Tensor",
                        "bitwise_or.Tensor_out", HAL_BINARY_BITWISE_OR, Promotion::kCommon, true)
HAL_BINARY_WITH_INPLACE(bitwise_xor, at::_ops::bitwise_xor_Tensor, at::_ops::bitwise_xor__Tensor,
                        at::_ops::bitwise_xor_Tensor_out, "bitwise_xor.Tensor",
                        "bitwise_xor_.Tensor", "bitwise_xor.Tensor_out", HAL_BINARY_BITWISE_XOR,
                        Promotion::kCommon, true)

// div with a rounding mode: "trunc" and "floor" are HAL ops of their own.
std::optional<hal_binary_op_t> division(std::optional<c10::string_view> mode) {
  if (!mode.has_value()) return HAL_BINARY_DIV;
  if (*mode == "trunc") return HAL_BINARY_TRUNC_DIVIDE;
  if (*mode == "floor") return HAL_BINARY_FLOOR_DIVIDE;
  return std::nullopt;  // the fallback raises torch's own error
}

at::Tensor div_mode(const at::Tensor& a, const at::Tensor& b,
                    std::optional<c10::string_view> mode) {
  static OpCounter& counter = op_counter("aten::div.Tensor_mode");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::div_Tensor_mode, why, a, b, mode);
  };
  const std::optional<hal_binary_op_t> op = division(mode);
  if (!op) return fallback("an unknown rounding mode");
  return binary(counter, {*op, mode ? Promotion::kCommon : Promotion::kIntegerFloat, false}, a, b,
                1, fallback);
}

at::Tensor& div_mode_(at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
  static OpCounter& counter = op_counter("aten::div_.Tensor_mode");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::div__Tensor_mode, why, a, b, mode);
  };
  const std::optional<hal_binary_op_t> op = division(mode);
  if (!op) return fallback("an unknown rounding mode"), a;
  binary_into(counter, {*op, mode ? Promotion::kCommon : Promotion::kIntegerFloat, false}, a, b, 1,
              a, true, fallback);
  return a;
}

at::Tensor& div_mode_out(const at::Tensor& a, const at::Tensor& b,
                         std::optional<c10::string_view> mode, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::div.out_mode");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::div_out_mode, why, a, b, mode, out);
  };
  const std::optional<hal_binary_op_t> op = division(mode);
  if (!op) return fallback("an unknown rounding mode"), out;
  binary_into(counter, {*op, mode ? Promotion::kCommon : Promotion::kIntegerFloat, false}, a, b, 1,
              out, false, fallback);
  return out;
}

// Comparisons: Tensor and Scalar forms, each functional, in-place and out=.
#define HAL_COMPARISON(fn, aten, hal_op)                                                           \
  at::Tensor fn##_tensor(const at::Tensor& a, const at::Tensor& b) {                               \
    static OpCounter& counter = op_counter("aten::" #aten ".Tensor");                              \
    return binary(                                                                                 \
        counter, {hal_op, Promotion::kComparison, false}, a, b, 1,                                 \
        [&](const std::string& why) { return HAL_FALLBACK(at::_ops::aten##_Tensor, why, a, b); }); \
  }                                                                                                \
  at::Tensor& fn##_tensor_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {         \
    static OpCounter& counter = op_counter("aten::" #aten ".Tensor_out");                          \
    binary_into(counter, {hal_op, Promotion::kComparison, false}, a, b, 1, out, false,             \
                [&](const std::string& why) {                                                      \
                  return HAL_FALLBACK(at::_ops::aten##_Tensor_out, why, a, b, out);                \
                });                                                                                \
    return out;                                                                                    \
  }                                                                                                \
  at::Tensor fn##_scalar(const at::Tensor& a, const c10::Scalar& b) {                              \
    static OpCounter& counter = op_counter("aten::" #aten ".Scalar");                              \
    const at::Tensor wrapped = at::native::wrapped_scalar_tensor(b);                               \
    return binary(                                                                                 \
        counter, {hal_op, Promotion::kComparison, false}, a, wrapped, 1,                           \
        [&](const std::string& why) { return HAL_FALLBACK(at::_ops::aten##_Scalar, why, a, b); }); \
  }                                                                                                \
  at::Tensor& fn##_scalar_out(const at::Tensor& a, const c10::Scalar& b, at::Tensor& out) {        \
    static OpCounter& counter = op_counter("aten::" #aten ".Scalar_out");                          \
    const at::Tensor wrapped = at::native::wrapped_scalar_tensor(b);                               \
    binary_into(counter, {hal_op, Promotion::kComparison, false}, a, wrapped, 1, out, false,       \
                [&](const std::string& why) {                                                      \
                  return HAL_FALLBACK(at::_ops::aten##_Scalar_out, why, a, b, out);                \
                });                                                                                \
    return out;                                                                                    \
  }

HAL_COMPARISON(eq, eq, HAL_BINARY_EQ)
HAL_COMPARISON(ne, ne, HAL_BINARY_NE)
HAL_COMPARISON(lt, lt, HAL_BINARY_LT)
HAL_COMPARISON(le, le, HAL_BINARY_LE)
HAL_COMPARISON(gt, gt, HAL_BINARY_GT)
HAL_COMPARISON(ge, ge, HAL_BINARY_GE)

// pow with a scalar exponent: HAL_OP_BINARY_SCALAR (integer bases to negative integer
// powers raise in PyTorch: left to the fallback).
at::Tensor& pow_scalar_out(const at::Tensor& a, const c10::Scalar& exponent, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::pow.Tensor_Scalar_out");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::pow_Tensor_Scalar_out, why, a, exponent, out);
  };
  if (at::isIntegralType(a.scalar_type(), true) && exponent.isIntegral(true) &&
      exponent.toLong() < 0) {
    return fallback("an integer to a negative power"), out;
  }
  binary_into(counter, {HAL_BINARY_POW, Promotion::kCommon, false}, a,
              at::native::wrapped_scalar_tensor(exponent), 1, out, false, fallback);
  return out;
}

// ---- unary math -----------------------------------------------------------------------------

std::string run_unary_math(hal_unary_math_t op, at::TensorIterator& iter) {
  if (iter.numel() == 0) return "";
  const std::optional<hal_tensor_desc_t> x = iter_desc(iter, 1);
  const std::optional<hal_tensor_desc_t> out = iter_desc(iter, 0);
  if (!x || !out) return "a layout or dtype HAL cannot describe";
  const c10::DeviceIndex device = hal_index(iter.output_base());
  auto desc = make_desc<hal_op_unary_math_desc_t>(HAL_OP_UNARY_MATH);
  desc.op = op;
  desc.x = *x;
  desc.out = *out;
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {iter.data_ptr(1), iter.data_ptr(0)}, "unary math");
  return "";
}

enum class UnaryResult { kSame, kFloat, kBool };

// out= form of a unary math op; the functional and in-place forms are torch's
// composites over it.
at::Tensor& unary_math_out(OpCounter& counter, hal_unary_math_t op, UnaryResult result,
                           const at::Tensor& x, at::Tensor& out, const Fallback& fallback) {
  // HAL has no complex dtypes, and aten's complex rules (abs of complex is real) are its own.
  if (x.is_complex() || out.is_complex()) {
    fallback("complex tensors");
    return out;
  }
  at::TensorIterator iter = result == UnaryResult::kBool
                                ? unary_iterator(out, x, false, false, at::kBool)
                                : unary_iterator(out, x, result == UnaryResult::kFloat, false);
  const std::string why = run_unary_math(op, iter);
  if (!why.empty()) {
    fallback(why);
    return out;
  }
  ++counter.native;
  return out;
}

#define HAL_UNARY_MATH(fn, aten, hal_op, result)                                         \
  at::Tensor& fn##_out(const at::Tensor& x, at::Tensor& out) {                           \
    static OpCounter& counter = op_counter("aten::" #aten ".out");                       \
    return unary_math_out(counter, hal_op, result, x, out, [&](const std::string& why) { \
      return HAL_FALLBACK(at::_ops::aten##_out, why, x, out);                            \
    });                                                                                  \
  }

}  // namespace
}  // namespace hal_torch

// The unary ops' at::_ops structs.
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/ceil_ops.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/erf_ops.h>
#include <ATen/ops/erfinv_ops.h>
#include <ATen/ops/exp2_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/expm1_ops.h>
#include <ATen/ops/floor_ops.h>
#include <ATen/ops/isinf_ops.h>
#include <ATen/ops/isnan_ops.h>
#include <ATen/ops/log10_ops.h>
#include <ATen/ops/log1p_ops.h>
#include <ATen/ops/log2_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/logical_not_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/round_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/sign_ops.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/tan_ops.h>
#include <ATen/ops/atan_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/trunc_ops.h>

namespace hal_torch {
namespace {

HAL_UNARY_MATH(exp, exp, HAL_UNARY_MATH_EXP, UnaryResult::kFloat)
HAL_UNARY_MATH(exp2, exp2, HAL_UNARY_MATH_EXP2, UnaryResult::kFloat)
HAL_UNARY_MATH(expm1, expm1, HAL_UNARY_MATH_EXPM1, UnaryResult::kFloat)
HAL_UNARY_MATH(log, log, HAL_UNARY_MATH_LOG, UnaryResult::kFloat)
HAL_UNARY_MATH(log2, log2, HAL_UNARY_MATH_LOG2, UnaryResult::kFloat)
HAL_UNARY_MATH(log10, log10, HAL_UNARY_MATH_LOG10, UnaryResult::kFloat)
HAL_UNARY_MATH(log1p, log1p, HAL_UNARY_MATH_LOG1P, UnaryResult::kFloat)
HAL_UNARY_MATH(sqrt, sqrt, HAL_UNARY_MATH_SQRT, UnaryResult::kFloat)
HAL_UNARY_MATH(rsqrt, rsqrt, HAL_UNARY_MATH_RSQRT, UnaryResult::kFloat)
HAL_UNARY_MATH(reciprocal, reciprocal, HAL_UNARY_MATH_RECIPROCAL, UnaryResult::kFloat)
HAL_UNARY_MATH(sin, sin, HAL_UNARY_MATH_SIN, UnaryResult::kFloat)
HAL_UNARY_MATH(cos, cos, HAL_UNARY_MATH_COS, UnaryResult::kFloat)
HAL_UNARY_MATH(tan, tan, HAL_UNARY_MATH_TAN, UnaryResult::kFloat)
HAL_UNARY_MATH(tanh, tanh, HAL_UNARY_MATH_TANH, UnaryResult::kFloat)
HAL_UNARY_MATH(atan, atan, HAL_UNARY_MATH_ATAN, UnaryResult::kFloat)
HAL_UNARY_MATH(sigmoid, sigmoid, HAL_UNARY_MATH_SIGMOID, UnaryResult::kFloat)
HAL_UNARY_MATH(erf, erf, HAL_UNARY_MATH_ERF, UnaryResult::kFloat)
HAL_UNARY_MATH(erfinv, erfinv, HAL_UNARY_MATH_ERFINV, UnaryResult::kFloat)
HAL_UNARY_MATH(abs, abs, HAL_UNARY_MATH_ABS, UnaryResult::kSame)
HAL_UNARY_MATH(neg, neg, HAL_UNARY_MATH_NEG, UnaryResult::kSame)
HAL_UNARY_MATH(sign, sign, HAL_UNARY_MATH_SIGN, UnaryResult::kSame)
HAL_UNARY_MATH(floor, floor, HAL_UNARY_MATH_FLOOR, UnaryResult::kSame)
HAL_UNARY_MATH(ceil, ceil, HAL_UNARY_MATH_CEIL, UnaryResult::kSame)
HAL_UNARY_MATH(round, round, HAL_UNARY_MATH_ROUND, UnaryResult::kSame)
HAL_UNARY_MATH(trunc, trunc, HAL_UNARY_MATH_TRUNC, UnaryResult::kSame)
HAL_UNARY_MATH(bitwise_not, bitwise_not, HAL_UNARY_MATH_BITWISE_NOT, UnaryResult::kSame)
HAL_UNARY_MATH(logical_not, logical_not, HAL_UNARY_MATH_LOGICAL_NOT, UnaryResult::kBool)

// ---- activations ----------------------------------------------------------------------------

std::optional<hal_activation_t> gelu_kind(c10::string_view approximate) {
  if (approximate == "none") return HAL_ACTIVATION_GELU_ERF;
  if (approximate == "tanh") return HAL_ACTIVATION_GELU_TANH;
  return std::nullopt;
}

std::string run_activation(hal_activation_t activation, at::TensorIterator& iter) {
  if (iter.numel() == 0) return "";
  const std::optional<hal_tensor_desc_t> x = iter_desc(iter, 1);
  const std::optional<hal_tensor_desc_t> out = iter_desc(iter, 0);
  if (!x || !out) return "a layout or dtype HAL cannot describe";
  const c10::DeviceIndex device = hal_index(iter.output_base());
  auto desc = make_desc<hal_op_unary_desc_t>(HAL_OP_UNARY);
  desc.activation = activation;
  desc.alpha = 1.0f;
  desc.x = *x;
  desc.out = *out;
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {iter.data_ptr(1), iter.data_ptr(0)}, "activation");
  return "";
}

// grad_x = grad_out * act'(x): iterator operands 0 grad_x, 1 grad_out, 2 x.
std::string run_activation_backward(hal_activation_t activation, at::TensorIterator& iter) {
  if (iter.numel() == 0) return "";
  const std::optional<hal_tensor_desc_t> grad_x = iter_desc(iter, 0);
  const std::optional<hal_tensor_desc_t> grad_out = iter_desc(iter, 1);
  const std::optional<hal_tensor_desc_t> x = iter_desc(iter, 2);
  if (!grad_x || !grad_out || !x) return "a layout or dtype HAL cannot describe";
  const c10::DeviceIndex device = hal_index(iter.output_base());
  auto desc = make_desc<hal_op_unary_desc_t>(HAL_OP_UNARY_BACKWARD);
  desc.activation = activation;
  desc.alpha = 1.0f;
  desc.x = *x;
  desc.out = *grad_out;
  desc.grad_x = *grad_x;
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {iter.data_ptr(2), iter.data_ptr(1), iter.data_ptr(0)},
          "activation backward");
  return "";
}

at::Tensor& gelu_out(const at::Tensor& x, c10::string_view approximate, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::gelu.out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::gelu_out, why, x, approximate, out);
  };
  const std::optional<hal_activation_t> kind = gelu_kind(approximate);
  if (!kind) return fallback("an unknown approximation");
  at::TensorIterator iter = unary_iterator(out, x, false, false);
  const std::string why = run_activation(*kind, iter);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return out;
}

at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
  static OpCounter& counter = op_counter("aten::gelu");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::gelu, why, x, approximate);
  };
  const std::optional<hal_activation_t> kind = gelu_kind(approximate);
  if (!kind) return fallback("an unknown approximation");
  at::TensorIterator iter = unary_iterator(at::Tensor(), x, false, false);
  const std::string why = run_activation(*kind, iter);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return iter.output();
}

at::TensorIterator backward_iterator(const at::Tensor& grad_x, const at::Tensor& grad_out,
                                     const at::Tensor& x) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(true);
  if (grad_x.defined()) {
    config.add_output(grad_x);
  } else {
    config.add_owned_output(at::Tensor());
  }
  return config.add_const_input(grad_out)
      .add_const_input(x)
      .promote_inputs_to_common_dtype(true)
      .cast_common_dtype_to_outputs(true)
      .enforce_safe_casting_to_output(true)
      .build();
}

at::Tensor& gelu_backward_out(const at::Tensor& grad_out, const at::Tensor& x,
                              c10::string_view approximate, at::Tensor& grad_x) {
  static OpCounter& counter = op_counter("aten::gelu_backward.grad_input");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::gelu_backward_grad_input, why, grad_out, x, approximate, grad_x);
  };
  const std::optional<hal_activation_t> kind = gelu_kind(approximate);
  if (!kind) return fallback("an unknown approximation");
  at::TensorIterator iter = backward_iterator(grad_x, grad_out, x);
  const std::string why = run_activation_backward(*kind, iter);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return grad_x;
}

at::Tensor gelu_backward(const at::Tensor& grad_out, const at::Tensor& x,
                         c10::string_view approximate) {
  static OpCounter& counter = op_counter("aten::gelu_backward");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::gelu_backward, why, grad_out, x, approximate);
  };
  const std::optional<hal_activation_t> kind = gelu_kind(approximate);
  if (!kind) return fallback("an unknown approximation");
  at::TensorIterator iter = backward_iterator(at::Tensor(), grad_out, x);
  const std::string why = run_activation_backward(*kind, iter);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return iter.output();
}

at::Tensor& silu_out(const at::Tensor& x, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::silu.out");
  at::TensorIterator iter = unary_iterator(out, x, false, false);
  const std::string why = run_activation(HAL_ACTIVATION_SILU, iter);
  if (!why.empty()) return HAL_FALLBACK(at::_ops::silu_out, why, x, out);
  ++counter.native;
  return out;
}

at::Tensor& silu_backward_out(const at::Tensor& grad_out, const at::Tensor& x, at::Tensor& grad_x) {
  static OpCounter& counter = op_counter("aten::silu_backward.grad_input");
  at::TensorIterator iter = backward_iterator(grad_x, grad_out, x);
  const std::string why = run_activation_backward(HAL_ACTIVATION_SILU, iter);
  if (!why.empty()) {
    return HAL_FALLBACK(at::_ops::silu_backward_grad_input, why, grad_out, x, grad_x);
  }
  ++counter.native;
  return grad_x;
}

at::Tensor relu(const at::Tensor& x) {
  static OpCounter& counter = op_counter("aten::relu");
  at::TensorIterator iter = unary_iterator(at::Tensor(), x, false, false);
  const std::string why = run_activation(HAL_ACTIVATION_RELU, iter);
  if (!why.empty()) return HAL_FALLBACK(at::_ops::relu, why, x);
  ++counter.native;
  return iter.output();
}

at::Tensor& relu_(at::Tensor& x) {
  static OpCounter& counter = op_counter("aten::relu_");
  at::TensorIterator iter = unary_iterator(x, x, false, true);
  const std::string why = run_activation(HAL_ACTIVATION_RELU, iter);
  if (!why.empty()) return HAL_FALLBACK(at::_ops::relu_, why, x);
  ++counter.native;
  return x;
}

// threshold_backward(grad, self, 0) is relu's backward: grad where self > 0.
at::Tensor& threshold_backward_out(const at::Tensor& grad_out, const at::Tensor& self,
                                   const c10::Scalar& threshold, at::Tensor& grad_x) {
  static OpCounter& counter = op_counter("aten::threshold_backward.grad_input");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::threshold_backward_grad_input, why, grad_out, self, threshold,
                        grad_x);
  };
  if (threshold.toDouble() != 0.0) return fallback("a threshold other than 0");
  at::TensorIterator iter = backward_iterator(grad_x, grad_out, self);
  const std::string why = run_activation_backward(HAL_ACTIVATION_RELU, iter);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return grad_x;
}

// ---- where, clamp ---------------------------------------------------------------------------

at::Tensor& where_out(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other,
                      at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::where.self_out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::where_self_out, why, condition, self, other, out);
  };
  if (condition.scalar_type() != at::kBool && condition.scalar_type() != at::kByte) {
    return fallback("a condition that is not bool");
  }
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .set_check_mem_overlap(true)
                                .add_output(out)
                                .add_const_input(condition)
                                .add_const_input(self)
                                .add_const_input(other)
                                .allow_cpu_scalars(true)
                                .promote_inputs_to_common_dtype(true)
                                .cast_common_dtype_to_outputs(true)
                                .enforce_safe_casting_to_output(true)
                                .check_all_same_dtype(false)
                                .build();
  if (iter.numel() == 0) return out;
  if (iter.is_cpu_scalar(1) && !condition.is_cpu()) return fallback("a CPU scalar condition");
  const c10::DeviceIndex device = hal_index(iter.output_base());
  auto desc = make_desc<hal_op_where_desc_t>(HAL_OP_WHERE);
  std::vector<hal_op_scalar_t> scalars;
  const std::optional<hal_tensor_desc_t> cond = iter_desc(iter, 1);
  const std::optional<hal_tensor_desc_t> result = iter_desc(iter, 0);
  if (!cond || !result) return fallback("a layout or dtype HAL cannot describe");
  desc.cond = *cond;
  desc.out = *result;
  void* a = nullptr;
  void* b = nullptr;
  for (int arg : {2, 3}) {
    const bool scalar = iter.is_cpu_scalar(arg);
    if (scalar) {
      scalars.push_back(scalar_value(cpu_scalar(iter, arg)));
    } else {
      const std::optional<hal_tensor_desc_t> d = iter_desc(iter, arg);
      if (!d) return fallback("a layout or dtype HAL cannot describe");
      (arg == 2 ? desc.a : desc.b) = *d;
      (arg == 2 ? a : b) = iter.data_ptr(arg);
    }
    (arg == 2 ? desc.a_is_scalar : desc.b_is_scalar) = scalar ? 1 : 0;
  }
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why);
  void* const operands[] = {iter.data_ptr(1), a, b, iter.data_ptr(0)};
  execute(device, *plan, operands, scalars, "where");
  ++counter.native;
  return out;
}

at::Tensor where_self(const at::Tensor& condition, const at::Tensor& self,
                      const at::Tensor& other) {
  // The result's dtype and shape as aten computes them; then the out= kernel.
  const at::ScalarType dtype = at::result_type(self, other);
  c10::Device device = condition.device();
  for (const at::Tensor* t : {&self, &other, &condition}) {
    if (t->device().type() == kHalDeviceType) device = t->device();
  }
  at::Tensor out = at::empty({0}, self.options().dtype(dtype).device(device));
  return where_out(condition, self, other, out);
}

// clamp with Scalar or Tensor bounds (absent: NONE).
at::Tensor& clamp_impl(OpCounter& counter, const at::Tensor& x, const at::Tensor* min_t,
                       const std::optional<c10::Scalar>& min_s, const at::Tensor* max_t,
                       const std::optional<c10::Scalar>& max_s, at::Tensor& out,
                       const Fallback& fallback) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(true).add_output(out).add_const_input(x);
  if (min_t != nullptr) config.add_const_input(*min_t);
  if (max_t != nullptr) config.add_const_input(*max_t);
  config.promote_inputs_to_common_dtype(true)
      .cast_common_dtype_to_outputs(true)
      .enforce_safe_casting_to_output(true);
  at::TensorIterator iter = config.build();
  if (iter.numel() == 0) return out;
  const c10::DeviceIndex device = hal_index(iter.output_base());
  auto desc = make_desc<hal_op_clamp_desc_t>(HAL_OP_CLAMP);
  std::vector<hal_op_scalar_t> scalars;
  const std::optional<hal_tensor_desc_t> xd = iter_desc(iter, 1);
  const std::optional<hal_tensor_desc_t> od = iter_desc(iter, 0);
  if (!xd || !od) return fallback(std::string("a layout or dtype HAL cannot describe")), out;
  desc.x = *xd;
  desc.out = *od;
  int arg = 2;
  void* lo = nullptr;
  void* hi = nullptr;
  if (min_t != nullptr) {
    const std::optional<hal_tensor_desc_t> d = iter_desc(iter, arg);
    if (!d || iter.is_cpu_scalar(arg)) return fallback("a CPU tensor bound"), out;
    desc.min_kind = HAL_CLAMP_BOUND_TENSOR;
    desc.min = *d;
    lo = iter.data_ptr(arg++);
  } else if (min_s.has_value()) {
    desc.min_kind = HAL_CLAMP_BOUND_SCALAR;
    scalars.push_back(scalar_value(*min_s));
  }
  if (max_t != nullptr) {
    const std::optional<hal_tensor_desc_t> d = iter_desc(iter, arg);
    if (!d || iter.is_cpu_scalar(arg)) return fallback("a CPU tensor bound"), out;
    desc.max_kind = HAL_CLAMP_BOUND_TENSOR;
    desc.max = *d;
    hi = iter.data_ptr(arg++);
  } else if (max_s.has_value()) {
    desc.max_kind = HAL_CLAMP_BOUND_SCALAR;
    scalars.push_back(scalar_value(*max_s));
  }
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why), out;
  void* const operands[] = {iter.data_ptr(1), lo, hi, iter.data_ptr(0)};
  execute(device, *plan, operands, scalars, "clamp");
  ++counter.native;
  return out;
}

at::Tensor& clamp_out(const at::Tensor& x, const std::optional<c10::Scalar>& min,
                      const std::optional<c10::Scalar>& max, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::clamp.out");
  return clamp_impl(counter, x, nullptr, min, nullptr, max, out, [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::clamp_out, why, x, min, max, out);
  });
}

at::Tensor& clamp_tensor_out(const at::Tensor& x, const std::optional<at::Tensor>& min,
                             const std::optional<at::Tensor>& max, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::clamp.Tensor_out");
  const at::Tensor* lo = min.has_value() && min->defined() ? &*min : nullptr;
  const at::Tensor* hi = max.has_value() && max->defined() ? &*max : nullptr;
  return clamp_impl(counter, x, lo, std::nullopt, hi, std::nullopt, out,
                    [&](const std::string& why) {
                      return HAL_FALLBACK(at::_ops::clamp_Tensor_out, why, x, min, max, out);
                    });
}

at::Tensor& clamp_min_out(const at::Tensor& x, const c10::Scalar& min, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::clamp_min.out");
  return clamp_impl(counter, x, nullptr, min, nullptr, std::nullopt, out,
                    [&](const std::string& why) {
                      return HAL_FALLBACK(at::_ops::clamp_min_out, why, x, min, out);
                    });
}

at::Tensor& clamp_max_out(const at::Tensor& x, const c10::Scalar& max, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::clamp_max.out");
  return clamp_impl(counter, x, nullptr, std::nullopt, nullptr, max, out,
                    [&](const std::string& why) {
                      return HAL_FALLBACK(at::_ops::clamp_max_out, why, x, max, out);
                    });
}

// ---- dropout --------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  static OpCounter& counter = op_counter("aten::native_dropout");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::native_dropout, why, input, p, train);
  };
  const bool training = train.value_or(true);
  TORCH_CHECK_VALUE(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
  if (!training || p == 0 || input.numel() == 0) {
    at::Tensor output = input.clone();
    mask.fill_(true);
    ++counter.native;
    return {output, mask};
  }
  at::Tensor output = at::empty(input.sizes(), input.options());
  if (p == 1) {
    output.zero_();
    mask.zero_();
    ++counter.native;
    return {output, mask};
  }
  const c10::DeviceIndex device = hal_index(input);
  const at::Tensor x = input.contiguous();
  auto desc = make_desc<hal_op_dropout_desc_t>(HAL_OP_DROPOUT);
  desc.probability = static_cast<float>(p);
  desc.has_mask = 1;
  const std::optional<hal_tensor_desc_t> xd = describe(x);
  if (!xd) return fallback("a layout or dtype HAL cannot describe");
  desc.x = *xd;
  desc.out = layout(output);
  desc.mask = layout(mask);
  desc.mask.dtype = HAL_DTYPE_U8;  // 0 or 1: a torch bool's bytes
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why);
  HalGenerator* generator = generator_or_default(std::nullopt, device);
  hal_op_scalar_t seed{};
  hal_op_scalar_t offset{};
  {
    std::lock_guard<std::mutex> lock(generator->mutex_);
    const auto [s, o] = generator->reserve(static_cast<uint64_t>(x.numel()));
    seed.u64 = s;
    offset.u64 = o;
  }
  execute(device, *plan, {operand(x), operand(output), operand(mask)}, "dropout", {seed, offset});
  ++counter.native;
  return {output, mask};
}

// grad * mask * scale in one HAL_OP_BINARY (the bool mask read as 0/1).
at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  static OpCounter& counter = op_counter("aten::native_dropout_backward");
  const auto fallback = [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::native_dropout_backward, why, grad, mask, scale);
  };
  if (grad.numel() == 0) return at::empty(grad.sizes(), grad.options());
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_owned_output(at::Tensor())
                                .add_const_input(grad)
                                .add_const_input(mask)
                                .check_all_same_dtype(false)
                                .declare_static_dtype_and_device(grad.scalar_type(), grad.device())
                                .build();
  const std::optional<hal_tensor_desc_t> out = iter_desc(iter, 0);
  const std::optional<hal_tensor_desc_t> a = iter_desc(iter, 1);
  const std::optional<hal_tensor_desc_t> b = iter_desc(iter, 2);
  if (!out || !a || !b) return fallback("a layout or dtype HAL cannot describe");
  auto desc = make_desc<hal_op_binary_desc_t>(HAL_OP_BINARY);
  desc.op = HAL_BINARY_MUL;
  desc.alpha = static_cast<float>(scale);
  desc.a = *a;
  desc.b = *b;
  desc.out = *out;
  const c10::DeviceIndex device = hal_index(grad);
  std::string why;
  if (const Plan* plan = plan_or_reason(device, desc, why)) {
    execute(device, *plan, {iter.data_ptr(1), iter.data_ptr(2), iter.data_ptr(0)},
            "dropout backward");
    ++counter.native;
    return iter.output();
  }
  // A BINARY that takes no bool operand: the mask made 0/1 floats first (a cast reads its
  // bytes as u8), then the product.
  at::Tensor keep = at::empty(mask.sizes(), grad.options());
  if (!device_cast(mask, keep)) return fallback(why);
  at::TensorIterator floats = at::TensorIteratorConfig()
                                  .add_owned_output(at::Tensor())
                                  .add_const_input(grad)
                                  .add_const_input(keep)
                                  .build();
  const std::optional<hal_tensor_desc_t> fo = iter_desc(floats, 0);
  const std::optional<hal_tensor_desc_t> fa = iter_desc(floats, 1);
  const std::optional<hal_tensor_desc_t> fb = iter_desc(floats, 2);
  if (!fo || !fa || !fb) return fallback(why);
  desc.a = *fa;
  desc.b = *fb;
  desc.out = *fo;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why);
  execute(device, *plan, {floats.data_ptr(1), floats.data_ptr(2), floats.data_ptr(0)},
          "dropout backward");
  ++counter.native;
  return floats.output();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", TORCH_FN(add));
  m.impl("add_.Tensor", TORCH_FN(add_));
  m.impl("add.out", TORCH_FN(add_out));
  m.impl("sub.Tensor", TORCH_FN(sub));
  m.impl("sub_.Tensor", TORCH_FN(sub_));
  m.impl("sub.out", TORCH_FN(sub_out));
  m.impl("mul.Tensor", TORCH_FN(mul));
  m.impl("mul_.Tensor", TORCH_FN(mul_));
  m.impl("mul.out", TORCH_FN(mul_out));
  m.impl("div.Tensor", TORCH_FN(div));
  m.impl("div_.Tensor", TORCH_FN(div_));
  m.impl("div.out", TORCH_FN(div_out));
  m.impl("div.Tensor_mode", TORCH_FN(div_mode));
  m.impl("div_.Tensor_mode", TORCH_FN(div_mode_));
  m.impl("div.out_mode", TORCH_FN(div_mode_out));
  m.impl("maximum", TORCH_FN(maximum));
  m.impl("maximum.out", TORCH_FN(maximum_out));
  m.impl("minimum", TORCH_FN(minimum));
  m.impl("minimum.out", TORCH_FN(minimum_out));
#define HAL_REGISTER_BINARY(fn, functional, inplace, out) \
  m.impl(functional, TORCH_FN(fn));                       \
  m.impl(inplace, TORCH_FN(fn##_));                       \
  m.impl(out, TORCH_FN(fn##_out));
  HAL_REGISTER_BINARY(atan2, "atan2", "atan2_", "atan2.out")
  HAL_REGISTER_BINARY(fmod, "fmod.Tensor", "fmod_.Tensor", "fmod.Tensor_out")
  HAL_REGISTER_BINARY(remainder, "remainder.Tensor", "remainder_.Tensor", "remainder.Tensor_out")
  HAL_REGISTER_BINARY(floor_divide, "floor_divide", "floor_divide_.Tensor", "floor_divide.out")
  HAL_REGISTER_BINARY(pow, "pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out")
  HAL_REGISTER_BINARY(logical_and, "logical_and", "logical_and_", "logical_and.out")
  HAL_REGISTER_BINARY(logical_or, "logical_or", "logical_or_", "logical_or.out")
  HAL_REGISTER_BINARY(logical_xor, "logical_xor", "logical_xor_", "logical_xor.out")
  HAL_REGISTER_BINARY(bitwise_and, "bitwise_and.Tensor", "bitwise_and_.Tensor",
                      "bitwise_and.Tensor_out")
  HAL_REGISTER_BINARY(bitwise_or, "bitwise_or.Tensor", "bitwise_or_.Tensor",
                      "bitwise_or.Tensor_out")
  HAL_REGISTER_BINARY(bitwise_xor, "bitwise_xor.Tensor", "bitwise_xor_.Tensor",
                      "bitwise_xor.Tensor_out")
#undef HAL_REGISTER_BINARY
  m.impl("pow.Tensor_Scalar_out", TORCH_FN(pow_scalar_out));
#define HAL_REGISTER_COMPARISON(fn)                     \
  m.impl(#fn ".Tensor", TORCH_FN(fn##_tensor));         \
  m.impl(#fn ".Tensor_out", TORCH_FN(fn##_tensor_out)); \
  m.impl(#fn ".Scalar", TORCH_FN(fn##_scalar));         \
  m.impl(#fn ".Scalar_out", TORCH_FN(fn##_scalar_out));
  HAL_REGISTER_COMPARISON(eq)
  HAL_REGISTER_COMPARISON(ne)
  HAL_REGISTER_COMPARISON(lt)
  HAL_REGISTER_COMPARISON(le)
  HAL_REGISTER_COMPARISON(gt)
  HAL_REGISTER_COMPARISON(ge)
#undef HAL_REGISTER_COMPARISON
  for (const auto& [name, fn] : std::initializer_list<
           std::pair<const char*, at::Tensor& (*)(const at::Tensor&, at::Tensor&)>>{
           {"exp.out", exp_out},
           {"exp2.out", exp2_out},
           {"expm1.out", expm1_out},
           {"log.out", log_out},
           {"log2.out", log2_out},
           {"log10.out", log10_out},
           {"log1p.out", log1p_out},
           {"sqrt.out", sqrt_out},
           {"rsqrt.out", rsqrt_out},
           {"reciprocal.out", reciprocal_out},
           {"sin.out", sin_out},
           {"cos.out", cos_out},
           {"tan.out", tan_out},
           {"tanh.out", tanh_out},
           {"atan.out", atan_out},
           {"sigmoid.out", sigmoid_out},
           {"erf.out", erf_out},
           {"erfinv.out", erfinv_out},
           {"abs.out", abs_out},
           {"neg.out", neg_out},
           {"sign.out", sign_out},
           {"floor.out", floor_out},
           {"ceil.out", ceil_out},
           {"round.out", round_out},
           {"trunc.out", trunc_out},
           {"bitwise_not.out", bitwise_not_out},
           {"logical_not.out", logical_not_out}}) {
    m.impl(name, fn);
  }
  m.impl("gelu", TORCH_FN(gelu));
  m.impl("gelu.out", TORCH_FN(gelu_out));
  m.impl("gelu_backward", TORCH_FN(gelu_backward));
  m.impl("gelu_backward.grad_input", TORCH_FN(gelu_backward_out));
  m.impl("silu.out", TORCH_FN(silu_out));
  m.impl("silu_backward.grad_input", TORCH_FN(silu_backward_out));
  m.impl("relu", TORCH_FN(relu));
  m.impl("relu_", TORCH_FN(relu_));
  m.impl("threshold_backward.grad_input", TORCH_FN(threshold_backward_out));
  m.impl("where.self", TORCH_FN(where_self));
  m.impl("where.self_out", TORCH_FN(where_out));
  m.impl("clamp.out", TORCH_FN(clamp_out));
  m.impl("clamp.Tensor_out", TORCH_FN(clamp_tensor_out));
  m.impl("clamp_min.out", TORCH_FN(clamp_min_out));
  m.impl("clamp_max.out", TORCH_FN(clamp_max_out));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
}

}  // namespace hal_torch
