// UNARY_MATH, BINARY_SCALAR, WHERE, CLAMP, and the dtype rule of every
// binary op (HAL_OP_BINARY's and HAL_OP_BINARY_SCALAR's), written once here.
#include "definitions.hpp"
#include "hal_util/names.hpp"

#include <utility>

namespace hal::ops::definitions {

namespace {

constexpr DtypeSet kNumericDtypes = kFloatDtypes | kIntegerDtypes | kBoolDtype;

std::string dtype_name(hal_dtype_t dtype) {
  return hal::util::dtype_name(dtype);
}

bool in(DtypeSet set, hal_dtype_t dtype) {
  return (set & dtype_bit(dtype)) != 0;
}

}  // namespace

BinaryClass binary_class(hal_binary_op_t op) {
  if (op >= HAL_BINARY_EQ && op <= HAL_BINARY_GE) return BinaryClass::kComparison;
  if (op >= HAL_BINARY_LOGICAL_AND && op <= HAL_BINARY_LOGICAL_XOR) return BinaryClass::kLogical;
  if (op >= HAL_BINARY_BITWISE_AND && op <= HAL_BINARY_BITWISE_XOR) return BinaryClass::kBitwise;
  return BinaryClass::kArithmetic;
}

std::string check_binary_dtypes(hal_binary_op_t op, float alpha, const char* a_name, hal_dtype_t a,
                                const char* b_name, hal_dtype_t b, hal_dtype_t out) {
  if (static_cast<uint32_t>(op) >= HAL_BINARY_OP_COUNT) {
    return "desc->op " + std::to_string(op) + " is not a hal_binary_op_t";
  }
  const BinaryClass kind = binary_class(op);
  const std::pair<const char*, hal_dtype_t> inputs[] = {{a_name, a}, {b_name, b}};
  const auto inputs_in = [&](DtypeSet allowed, const char* why) -> std::string {
    for (const auto& [name, dtype] : inputs) {
      if (!in(allowed, dtype)) {
        return std::string(name) + " has dtype " + dtype_name(dtype) + "; " + why + " takes " +
               describe_dtypes(allowed);
      }
    }
    return {};
  };
  bool integer_domain = false;
  switch (kind) {
    case BinaryClass::kArithmetic:
      if (is_float_dtype(out)) {
        if (std::string problem = inputs_in(kNumericDtypes, "a float-domain op"); !problem.empty())
          return problem;
      } else if (is_integer_dtype(out)) {
        if (op == HAL_BINARY_DIV || op == HAL_BINARY_ATAN2) {
          return std::string("out has dtype ") + dtype_name(out) +
                 "; DIV and ATAN2 give floats and need a float out";
        }
        if (std::string problem = inputs_in(kIntegerDtypes | kBoolDtype, "an integer out");
            !problem.empty())
          return problem;
        integer_domain = true;
      } else {
        return std::string("out has dtype ") + dtype_name(out) +
               "; an arithmetic op writes f32, f16, bf16 or an integer dtype";
      }
      break;
    case BinaryClass::kComparison:
    case BinaryClass::kLogical:
      if (out != HAL_DTYPE_BOOL) {
        return std::string("out has dtype ") + dtype_name(out) +
               "; comparisons and logical ops write bool";
      }
      if (std::string problem = inputs_in(kNumericDtypes, "a comparison or logical op");
          !problem.empty())
        return problem;
      integer_domain = true;  // alpha has no meaning here
      break;
    case BinaryClass::kBitwise:
      if (!in(kIntegerDtypes | kBoolDtype, out)) {
        return std::string("out has dtype ") + dtype_name(out) +
               "; a bitwise op writes an integer dtype or bool";
      }
      if (std::string problem = inputs_in(kIntegerDtypes | kBoolDtype, "a bitwise op");
          !problem.empty())
        return problem;
      integer_domain = true;
      break;
  }
  if (integer_domain && alpha != 1.0f) {
    return "desc->alpha is " + std::to_string(alpha) +
           "; it scales float arithmetic only and must be 1 for this op and dtype";
  }
  return {};
}

namespace {

// Which dtypes UNARY_MATH's op takes: kFloatOnly (float x and out),
// kFloatOrSame (float, or an integer x with out of x's dtype), kToBool (any
// x, a bool out), kBitwise (integer or bool x, out of x's dtype).
enum class UnaryClass { kFloatOnly, kFloatOrSame, kToBool, kBitwise };

UnaryClass unary_class(hal_unary_math_t op) {
  if (op <= HAL_UNARY_MATH_ERFINV) return UnaryClass::kFloatOnly;
  if (op <= HAL_UNARY_MATH_TRUNC) return UnaryClass::kFloatOrSame;
  if (op <= HAL_UNARY_MATH_ISFINITE) return UnaryClass::kToBool;
  return UnaryClass::kBitwise;
}

hal_result_t describe_unary_math(const hal_op_unary_math_desc_t& desc, OpSignature* out,
                                 std::string* message) {
  if (static_cast<uint32_t>(desc.op) >= HAL_UNARY_MATH_COUNT) {
    *message = "desc->op " + std::to_string(desc.op) + " is not a hal_unary_math_t";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (desc.reserved != 0) {
    *message = "desc->reserved must be 0";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  DtypeSet x_dtypes = kFloatDtypes;
  DtypeSet out_dtypes = kFloatDtypes;
  switch (unary_class(desc.op)) {
    case UnaryClass::kFloatOnly:
      break;
    case UnaryClass::kFloatOrSame:
      x_dtypes = kFloatDtypes | kIntegerDtypes;
      out_dtypes = is_integer_dtype(desc.x.dtype) ? dtype_bit(desc.x.dtype) : kFloatDtypes;
      break;
    case UnaryClass::kToBool:
      x_dtypes = kNumericDtypes;
      out_dtypes = kBoolDtype;
      break;
    case UnaryClass::kBitwise:
      x_dtypes = kIntegerDtypes | kBoolDtype;
      out_dtypes = dtype_bit(desc.x.dtype);
      break;
  }
  if (reject(check_tensor("x", desc.x, x_dtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_output("out", desc.out, out_dtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("out", desc.out, "x", desc.x), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int x = add_operand(*out, "x", Role::kInput, desc.x);
  add_operand(*out, "out", Role::kOutput, desc.out, x);
  return HAL_SUCCESS;
}

hal_result_t describe_binary_scalar(const hal_op_binary_scalar_desc_t& desc, OpSignature* out,
                                    std::string* message) {
  if (desc.scalar_first > 1 || desc.scalar_is_float > 1) {
    *message = "desc->scalar_first and desc->scalar_is_float must be 0 or 1";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_finite_scalar("desc->alpha", desc.alpha), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (reject(check_tensor("x", desc.x, kNumericDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_output("out", desc.out, kNumericDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("out", desc.out, "x", desc.x), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  // The scalar takes part as an f32 (float) or an i64 (integer) operand.
  const hal_dtype_t scalar = desc.scalar_is_float ? HAL_DTYPE_F32 : HAL_DTYPE_I64;
  const std::string problem = desc.scalar_first
                                  ? check_binary_dtypes(desc.op, desc.alpha, "the scalar", scalar,
                                                        "x", desc.x.dtype, desc.out.dtype)
                                  : check_binary_dtypes(desc.op, desc.alpha, "x", desc.x.dtype,
                                                        "the scalar", scalar, desc.out.dtype);
  if (reject(problem, message)) return HAL_ERROR_INVALID_ARGUMENT;
  const int x = add_operand(*out, "x", Role::kInput, desc.x);
  add_operand(*out, "out", Role::kOutput, desc.out, x);
  out->scalars.push_back({"s", desc.scalar_is_float ? ScalarType::kF64 : ScalarType::kI64});
  // A float s is an f32 operand (an integer one is taken as it is, in i64).
  if (desc.scalar_is_float) {
    set_scalar_check(*out, [](const hal_op_scalar_t* scalars) {
      return check_value_scalar("scalar 0 (s)", scalars[0], ScalarType::kF64, HAL_DTYPE_F32);
    });
  }
  return HAL_SUCCESS;
}

// A run-time scalar converted to |out|'s dtype is read from the f64 field
// for a float (or f64) dtype, else from the i64 field.
ScalarType scalar_type_for(hal_dtype_t out) {
  return is_float_dtype(out) || out == HAL_DTYPE_F64 ? ScalarType::kF64 : ScalarType::kI64;
}

hal_result_t describe_where(const hal_op_where_desc_t& desc, OpSignature* out,
                            std::string* message) {
  if (desc.a_is_scalar > 1 || desc.b_is_scalar > 1) {
    *message = "desc->a_is_scalar and desc->b_is_scalar must be 0 or 1";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_output("out", desc.out, kAllDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_tensor("cond", desc.cond, kBoolDtype | dtype_bit(HAL_DTYPE_U8), 0,
                          HAL_TENSOR_MAX_RANK),
             message) ||
      reject(check_broadcast("cond", desc.cond, desc.out), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  add_operand(*out, "cond", Role::kInput, desc.cond);
  const std::pair<const char*, const hal_tensor_desc_t*> values[] = {{"a", &desc.a},
                                                                     {"b", &desc.b}};
  const uint32_t is_scalar[] = {desc.a_is_scalar, desc.b_is_scalar};
  int alias = -1;
  for (int v = 0; v < 2; ++v) {
    const auto& [name, tensor] = values[v];
    if (is_scalar[v]) {
      add_unused(*out, name);
      continue;
    }
    if (reject(check_tensor(name, *tensor, kAllDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_broadcast(name, *tensor, desc.out), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    const int index = add_operand(*out, name, Role::kInput, *tensor);
    if (alias < 0 && same_layout(*tensor, desc.out)) alias = index;
  }
  add_operand(*out, "out", Role::kOutput, desc.out, alias);
  if (desc.a_is_scalar) out->scalars.push_back({"a", scalar_type_for(desc.out.dtype)});
  if (desc.b_is_scalar) out->scalars.push_back({"b", scalar_type_for(desc.out.dtype)});
  // Each scalar value is converted to out's dtype.
  if (!out->scalars.empty()) {
    const hal_dtype_t target = desc.out.dtype;
    const ScalarType type = scalar_type_for(target);
    const bool a_first = desc.a_is_scalar != 0;
    const size_t count = out->scalars.size();
    set_scalar_check(*out, [target, type, a_first, count](const hal_op_scalar_t* scalars) {
      for (size_t i = 0; i < count; ++i) {
        const bool is_a = a_first && i == 0;
        std::string problem =
            check_value_scalar(is_a ? "scalar 0 (a)" : (i == 0 ? "scalar 0 (b)" : "scalar 1 (b)"),
                               scalars[i], type, target);
        if (!problem.empty()) return problem;
      }
      return std::string();
    });
  }
  return HAL_SUCCESS;
}

hal_result_t describe_clamp(const hal_op_clamp_desc_t& desc, OpSignature* out,
                            std::string* message) {
  if (static_cast<uint32_t>(desc.min_kind) >= HAL_CLAMP_BOUND_COUNT ||
      static_cast<uint32_t>(desc.max_kind) >= HAL_CLAMP_BOUND_COUNT) {
    *message = "desc->min_kind and desc->max_kind must be hal_clamp_bound_t values";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_tensor("x", desc.x, kFloatDtypes | kIntegerDtypes, 0, HAL_TENSOR_MAX_RANK),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const bool integer = is_integer_dtype(desc.x.dtype);
  const DtypeSet domain = integer ? kIntegerDtypes : kFloatDtypes;
  const DtypeSet out_dtypes = integer ? dtype_bit(desc.x.dtype) : kFloatDtypes;
  if (reject(check_output("out", desc.out, out_dtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("out", desc.out, "x", desc.x), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int x = add_operand(*out, "x", Role::kInput, desc.x);
  const std::pair<const char*, const hal_tensor_desc_t*> bounds[] = {{"min", &desc.min},
                                                                     {"max", &desc.max}};
  const hal_clamp_bound_t kinds[] = {desc.min_kind, desc.max_kind};
  for (int k = 0; k < 2; ++k) {
    const auto& [name, tensor] = bounds[k];
    if (kinds[k] != HAL_CLAMP_BOUND_TENSOR) {
      add_unused(*out, name);
      continue;
    }
    if (reject(check_tensor(name, *tensor, domain, 0, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_broadcast(name, *tensor, desc.x), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    add_operand(*out, name, Role::kInput, *tensor);
  }
  add_operand(*out, "out", Role::kOutput, desc.out, x);
  const ScalarType type = integer ? ScalarType::kI64 : ScalarType::kF64;
  if (desc.min_kind == HAL_CLAMP_BOUND_SCALAR) out->scalars.push_back({"min", type});
  if (desc.max_kind == HAL_CLAMP_BOUND_SCALAR) out->scalars.push_back({"max", type});
  // Float bounds take part in f32 math; integer ones are compared in i64 as
  // they are.
  if (!integer && !out->scalars.empty()) {
    const bool min_first = desc.min_kind == HAL_CLAMP_BOUND_SCALAR;
    const size_t count = out->scalars.size();
    set_scalar_check(*out, [min_first, count](const hal_op_scalar_t* scalars) {
      for (size_t i = 0; i < count; ++i) {
        const bool is_min = min_first && i == 0;
        std::string problem = check_value_scalar(
            is_min ? "scalar 0 (min)" : (i == 0 ? "scalar 0 (max)" : "scalar 1 (max)"), scalars[i],
            ScalarType::kF64, HAL_DTYPE_F32);
        if (!problem.empty()) return problem;
      }
      return std::string();
    });
  }
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_math_family(const hal_op_header_t* desc, OpSignature* out,
                                  std::string* message) {
  switch (desc->kind) {
    case HAL_OP_UNARY_MATH:
      return describe_unary_math(*reinterpret_cast<const hal_op_unary_math_desc_t*>(desc), out,
                                 message);
    case HAL_OP_BINARY_SCALAR:
      return describe_binary_scalar(*reinterpret_cast<const hal_op_binary_scalar_desc_t*>(desc),
                                    out, message);
    case HAL_OP_WHERE:
      return describe_where(*reinterpret_cast<const hal_op_where_desc_t*>(desc), out, message);
    case HAL_OP_CLAMP:
      return describe_clamp(*reinterpret_cast<const hal_op_clamp_desc_t*>(desc), out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
