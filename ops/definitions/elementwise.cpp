// BINARY, UNARY(_BACKWARD), SWIGLU(_BACKWARD), REDUCE, CAST, PERMUTE, DROPOUT.
#include "definitions.hpp"

#include <cstdio>
#include <utility>

namespace hal::ops::definitions {

namespace {

hal_result_t describe_unary(const hal_op_unary_desc_t& desc, bool backward, OpSignature* out,
                            std::string* message) {
  if (static_cast<uint32_t>(desc.activation) >= HAL_ACTIVATION_COUNT) {
    *message = "desc->activation " + std::to_string(desc.activation) + " is not a hal_activation_t";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_finite_scalar("desc->alpha", desc.alpha), message) ||
      reject(check_tensor("x", desc.x, kFloatDtypes, 0, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (!backward) {
    if (reject(check_output("out", desc.out, kFloatDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_same_shape("out", desc.out, "x", desc.x), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    const int x = add_operand(*out, "x", Role::kInput, desc.x);
    add_operand(*out, "out", Role::kOutput, desc.out, x);
    return HAL_SUCCESS;
  }
  if (reject(check_tensor("grad_out", desc.out, kFloatDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("grad_out", desc.out, "x", desc.x), message) ||
      reject(check_output("grad_x", desc.grad_x, kFloatDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("grad_x", desc.grad_x, "x", desc.x), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  add_operand(*out, "x", Role::kInput, desc.x);
  const int grad_out = add_operand(*out, "grad_out", Role::kInput, desc.out);
  add_operand(*out, "grad_x", Role::kOutput, desc.grad_x, grad_out);
  return HAL_SUCCESS;
}

hal_result_t describe_binary(const hal_op_binary_desc_t& desc, OpSignature* out,
                             std::string* message) {
  if (static_cast<uint32_t>(desc.op) >= HAL_BINARY_OP_COUNT) {
    *message = "desc->op " + std::to_string(desc.op) + " is not a hal_binary_op_t";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  constexpr DtypeSet kOperands = kFloatDtypes | kIntegerDtypes | kBoolDtype;
  if (reject(check_finite_scalar("desc->alpha", desc.alpha), message) ||
      reject(check_tensor("a", desc.a, kOperands, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_tensor("b", desc.b, kOperands, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_output("out", desc.out, kOperands, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_binary_dtypes(desc.op, desc.alpha, "a", desc.a.dtype, "b", desc.b.dtype,
                                 desc.out.dtype),
             message) ||
      reject(check_broadcast("a", desc.a, desc.out), message) ||
      reject(check_broadcast("b", desc.b, desc.out), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int a = add_operand(*out, "a", Role::kInput, desc.a);
  const int b = add_operand(*out, "b", Role::kInput, desc.b);
  // One operand out may be exactly: a when it has out's layout, else b.
  const int alias = same_layout(desc.a, desc.out) ? a : (same_layout(desc.b, desc.out) ? b : -1);
  add_operand(*out, "out", Role::kOutput, desc.out, alias);
  return HAL_SUCCESS;
}

hal_result_t describe_swiglu(const hal_op_swiglu_desc_t& desc, bool backward, OpSignature* out,
                             std::string* message) {
  if (reject(check_tensor("x", desc.x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const uint32_t last = desc.x.rank - 1;
  if (desc.x.shape[last] % 2 != 0) {
    *message = "x " + describe_tensor(desc.x) +
               " must have an even last dimension (the gate and up halves)";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  hal_tensor_desc_t half = desc.x;
  half.shape[last] /= 2;
  const char* out_name = backward ? "grad_out" : "out";
  const std::string out_problem =
      backward ? check_tensor(out_name, desc.out, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK)
               : check_output(out_name, desc.out, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK);
  if (reject(out_problem, message)) return HAL_ERROR_INVALID_ARGUMENT;
  if (!same_shape(desc.out, half)) {
    *message = std::string(out_name) + " " + describe_tensor(desc.out) +
               " must have x's shape with the last dimension halved: x is " +
               describe_tensor(desc.x);
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  add_operand(*out, "x", Role::kInput, desc.x);
  if (!backward) {
    add_operand(*out, "out", Role::kOutput, desc.out);
    return HAL_SUCCESS;
  }
  if (reject(check_output("grad_x", desc.grad_x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape("grad_x", desc.grad_x, "x", desc.x), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  add_operand(*out, "grad_out", Role::kInput, desc.out);
  add_operand(*out, "grad_x", Role::kOutput, desc.grad_x);
  return HAL_SUCCESS;
}

// Which out dtypes a reduction of |x| takes, or an empty set with |why| when
// the kind does not reduce x's dtype.
DtypeSet reduce_out_dtypes(hal_reduce_kind_t kind, hal_dtype_t x, std::string* why) {
  if (kind == HAL_REDUCE_KIND_ARGMAX || kind == HAL_REDUCE_KIND_ARGMIN) {
    return dtype_bit(HAL_DTYPE_I64);
  }
  if (is_float_dtype(x)) return kFloatDtypes;
  switch (kind) {
    case HAL_REDUCE_KIND_SUM:
    case HAL_REDUCE_KIND_PROD:
      return kIntegerDtypes;
    case HAL_REDUCE_KIND_MAX:
    case HAL_REDUCE_KIND_MIN:
      return dtype_bit(x);
    default:
      *why = "MEAN and NORM2 reduce float dtypes only";
      return 0;
  }
}

hal_result_t describe_reduce(const hal_op_reduce_desc_t& desc, OpSignature* out,
                             std::string* message) {
  if (static_cast<uint32_t>(desc.reduce) >= HAL_REDUCE_KIND_COUNT) {
    *message = "desc->reduce " + std::to_string(desc.reduce) + " is not a hal_reduce_kind_t";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_tensor("x", desc.x, kFloatDtypes | kIntegerDtypes | kBoolDtype, 0,
                          HAL_TENSOR_MAX_RANK),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  std::string why;
  const DtypeSet out_dtypes = reduce_out_dtypes(desc.reduce, desc.x.dtype, &why);
  if (out_dtypes == 0) {
    *message = "x " + describe_tensor(desc.x) + ": " + why;
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_output("out", desc.out, out_dtypes, 0, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if ((uint64_t{desc.axes_mask} >> desc.x.rank) != 0) {
    *message = "desc->axes_mask 0x" +
               [&] {
                 char hex[16];
                 std::snprintf(hex, sizeof(hex), "%x", desc.axes_mask);
                 return std::string(hex);
               }() +
               " names an axis at or past x's rank " + std::to_string(desc.x.rank);
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  hal_tensor_desc_t expected = desc.x;
  int64_t reduced = 1;
  for (uint32_t d = 0; d < desc.x.rank; ++d) {
    if ((desc.axes_mask >> d) & 1u) {
      expected.shape[d] = 1;
      reduced *= desc.x.shape[d];
    }
  }
  if (!same_shape(desc.out, expected)) {
    *message = "out " + describe_tensor(desc.out) +
               " must have x's rank and shape with 1 in every reduced axis: x is " +
               describe_tensor(desc.x);
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if ((desc.reduce == HAL_REDUCE_KIND_ARGMAX || desc.reduce == HAL_REDUCE_KIND_ARGMIN) &&
      reduced == 0 && !is_empty(desc.out)) {
    *message = "x " + describe_tensor(desc.x) +
               ": ARGMAX and ARGMIN have no index to give over an empty reduction";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  add_operand(*out, "x", Role::kInput, desc.x);
  add_operand(*out, "out", Role::kOutput, desc.out);
  return HAL_SUCCESS;
}

hal_result_t describe_cast(const hal_op_cast_desc_t& desc, bool permute, OpSignature* out,
                           std::string* message) {
  if (reject(check_tensor("in", desc.in, kAllDtypes | kFp8Dtypes, 0, HAL_TENSOR_MAX_RANK),
             message) ||
      reject(check_output("out", desc.out, kAllDtypes | kFp8Dtypes, 0, HAL_TENSOR_MAX_RANK),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (!permute) {
    if (reject(check_same_shape("out", desc.out, "in", desc.in), message))
      return HAL_ERROR_INVALID_ARGUMENT;
  } else {
    if (desc.out.rank != desc.in.rank) {
      *message = "out " + describe_tensor(desc.out) + " must have in's rank " +
                 std::to_string(desc.in.rank);
      return HAL_ERROR_INVALID_ARGUMENT;
    }
    uint32_t seen = 0;
    for (uint32_t d = 0; d < desc.in.rank; ++d) {
      const uint32_t from = desc.perm[d];
      if (from >= desc.in.rank || ((seen >> from) & 1u) != 0) {
        *message = "desc->perm[" + std::to_string(d) + "] = " + std::to_string(from) +
                   ": perm[0..rank) must be a permutation of 0.." + std::to_string(desc.in.rank) +
                   "-1";
        return HAL_ERROR_INVALID_ARGUMENT;
      }
      seen |= 1u << from;
      if (desc.out.shape[d] != desc.in.shape[from]) {
        *message = "out " + describe_tensor(desc.out) + " dimension " + std::to_string(d) +
                   " must be in's dimension perm[" + std::to_string(d) +
                   "] = " + std::to_string(from) + " (" + std::to_string(desc.in.shape[from]) + ")";
        return HAL_ERROR_INVALID_ARGUMENT;
      }
    }
  }
  add_operand(*out, "in", Role::kInput, desc.in);
  add_operand(*out, "out", Role::kOutput, desc.out);
  return HAL_SUCCESS;
}

hal_result_t describe_dropout(const hal_op_dropout_desc_t& desc, OpSignature* out,
                              std::string* message) {
  if (reject(check_unit_interval_scalar("desc->probability", desc.probability), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.backward > 1 || desc.has_mask > 1) {
    *message = "desc->backward and desc->has_mask must be 0 or 1";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (desc.reserved != 0) {
    *message = "desc->reserved must be 0";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const char* x_name = desc.backward ? "grad_out" : "x";
  const char* out_name = desc.backward ? "grad_x" : "out";
  if (reject(check_tensor(x_name, desc.x, kFloatDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_output(out_name, desc.out, kFloatDtypes, 0, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_same_shape(out_name, desc.out, x_name, desc.x), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int x = add_operand(*out, x_name, Role::kInput, desc.x);
  add_operand(*out, out_name, Role::kOutput, desc.out, x);
  if (desc.has_mask) {
    if (reject(check_output("mask", desc.mask, dtype_bit(HAL_DTYPE_U8), 0, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("mask", desc.mask, x_name, desc.x), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    add_operand(*out, "mask", Role::kOutput, desc.mask);
  } else {
    add_unused(*out, "mask");
  }
  out->scalars.push_back({"seed", ScalarType::kU64});
  out->scalars.push_back({"offset", ScalarType::kU64});
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_elementwise_family(const hal_op_header_t* desc, OpSignature* out,
                                         std::string* message) {
  switch (desc->kind) {
    case HAL_OP_UNARY:
    case HAL_OP_UNARY_BACKWARD:
      return describe_unary(*reinterpret_cast<const hal_op_unary_desc_t*>(desc),
                            desc->kind == HAL_OP_UNARY_BACKWARD, out, message);
    case HAL_OP_BINARY:
      return describe_binary(*reinterpret_cast<const hal_op_binary_desc_t*>(desc), out, message);
    case HAL_OP_SWIGLU:
    case HAL_OP_SWIGLU_BACKWARD:
      return describe_swiglu(*reinterpret_cast<const hal_op_swiglu_desc_t*>(desc),
                             desc->kind == HAL_OP_SWIGLU_BACKWARD, out, message);
    case HAL_OP_REDUCE:
      return describe_reduce(*reinterpret_cast<const hal_op_reduce_desc_t*>(desc), out, message);
    case HAL_OP_CAST:
    case HAL_OP_PERMUTE:
      return describe_cast(*reinterpret_cast<const hal_op_cast_desc_t*>(desc),
                           desc->kind == HAL_OP_PERMUTE, out, message);
    case HAL_OP_DROPOUT:
      return describe_dropout(*reinterpret_cast<const hal_op_dropout_desc_t*>(desc), out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
