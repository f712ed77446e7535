// BINARY, UNARY(_BACKWARD), SWIGLU(_BACKWARD), REDUCE, CAST, PERMUTE, DROPOUT.
#include "definitions.hpp"

namespace hal::ops::definitions {

namespace {

hal_result_t describe_unary(const hal_op_unary_desc_t& desc, bool backward, OpSignature* out,
                            std::string* message) {
  if (static_cast<uint32_t>(desc.activation) >= HAL_ACTIVATION_COUNT) {
    *message = "desc->activation " + std::to_string(desc.activation) + " is not a hal_activation_t";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_tensor("x", desc.x, kFloatDtypes, 0, HAL_TENSOR_MAX_RANK), message))
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

}  // namespace

hal_result_t describe_elementwise_family(const hal_op_header_t* desc, OpSignature* out,
                                         std::string* message) {
  switch (desc->kind) {
    case HAL_OP_UNARY:
    case HAL_OP_UNARY_BACKWARD:
      return describe_unary(*reinterpret_cast<const hal_op_unary_desc_t*>(desc),
                            desc->kind == HAL_OP_UNARY_BACKWARD, out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
