// MATMUL, BIAS_ACTIVATION_BACKWARD, GROUPED_MATMUL.
#include "definitions.hpp"

namespace hal::ops::definitions {

namespace {

constexpr uint32_t kMatmulFlags =
    HAL_MATMUL_TRANSPOSE_A | HAL_MATMUL_TRANSPOSE_B | HAL_MATMUL_BIAS | HAL_MATMUL_SAVE_AUX;

// The epilogue activations (those of cuBLASLt's epilogues; SiLU is not one).
std::string check_epilogue_activation(const char* field, hal_activation_t activation) {
  const auto value = static_cast<uint32_t>(activation);
  if (value == HAL_ACTIVATION_NONE || value == HAL_ACTIVATION_RELU ||
      value == HAL_ACTIVATION_GELU_TANH || value == HAL_ACTIVATION_GELU_ERF) {
    return {};
  }
  return std::string(field) + " " + std::to_string(value) +
         " is not an epilogue activation (NONE, RELU, GELU_TANH or GELU_ERF)";
}

// Stride 0 broadcasts only along batch dimensions: dimensions from
// |first_matrix_dim| on with more than one element must have a stride.
std::string check_matrix_strides(const char* name, const hal_tensor_desc_t& tensor,
                                 uint32_t first_matrix_dim) {
  if (is_empty(tensor)) return {};  // never read
  for (uint32_t d = first_matrix_dim; d < tensor.rank; ++d) {
    if (tensor.shape[d] > 1 && tensor.strides[d] == 0) {
      return std::string(name) + " " + describe_tensor(tensor) + " has stride 0 in dimension " +
             std::to_string(d) + "; only batch dimensions may broadcast";
    }
  }
  return {};
}

// |name| has |reference|'s batch dimensions (all but the last two).
std::string check_batch(const char* name, const hal_tensor_desc_t& tensor,
                        const hal_tensor_desc_t& reference) {
  if (tensor.rank != reference.rank) {
    return std::string(name) + " has rank " + std::to_string(tensor.rank) + " but d has rank " +
           std::to_string(reference.rank) + "; a, b, c, d and aux share one rank";
  }
  for (uint32_t d = 0; d + 2 < tensor.rank; ++d) {
    if (tensor.shape[d] != reference.shape[d]) {
      return std::string(name) + " " + describe_tensor(tensor) + " has batch dimension " +
             std::to_string(d) + " of " + std::to_string(tensor.shape[d]) + " but d " +
             describe_tensor(reference) + " has " + std::to_string(reference.shape[d]) +
             " (broadcast with stride 0, not with size 1)";
    }
  }
  return {};
}

hal_result_t describe_matmul(const hal_op_matmul_desc_t& desc, OpSignature* out,
                             std::string* message) {
  if ((desc.flags & ~kMatmulFlags) != 0) {
    *message = "desc->flags " + std::to_string(desc.flags) +
               " has bits outside hal_matmul_flag_bits_t (TRANSPOSE_A, TRANSPOSE_B, BIAS, "
               "SAVE_AUX)";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_epilogue_activation("desc->activation", desc.activation), message) ||
      reject(check_finite_scalar("desc->alpha", desc.alpha), message) ||
      reject(check_finite_scalar("desc->beta", desc.beta), message) ||
      reject(check_tensor("a", desc.a, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_tensor("b", desc.b, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message) ||
      reject(check_output("d", desc.d, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.a.dtype != desc.b.dtype) {
    *message = "a " + describe_tensor(desc.a) + " and b " + describe_tensor(desc.b) +
               " must have the same dtype";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const uint32_t rank = desc.d.rank;
  if (reject(check_batch("a", desc.a, desc.d), message) ||
      reject(check_batch("b", desc.b, desc.d), message) ||
      reject(check_matrix_strides("a", desc.a, rank - 2), message) ||
      reject(check_matrix_strides("b", desc.b, rank - 2), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const bool transpose_a = (desc.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
  const bool transpose_b = (desc.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
  const int64_t m = desc.d.shape[rank - 2];
  const int64_t n = desc.d.shape[rank - 1];
  const int64_t a_rows = desc.a.shape[rank - 2], a_cols = desc.a.shape[rank - 1];
  const int64_t b_rows = desc.b.shape[rank - 2], b_cols = desc.b.shape[rank - 1];
  const int64_t a_m = transpose_a ? a_cols : a_rows;
  const int64_t k = transpose_a ? a_rows : a_cols;
  const int64_t b_k = transpose_b ? b_cols : b_rows;
  const int64_t b_n = transpose_b ? b_rows : b_cols;
  if (b_k != k) {
    *message = "a " + describe_tensor(desc.a) + " has k = " + std::to_string(k) + " but b " +
               describe_tensor(desc.b) + " has k = " + std::to_string(b_k) +
               (transpose_b ? " (b is [n, k] with TRANSPOSE_B)" : " (b is [k, n])");
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (a_m != m || b_n != n) {
    *message = "d " + describe_tensor(desc.d) + " must be [..., m, n] = [..., " +
               std::to_string(a_m) + ", " + std::to_string(b_n) + "] for a " +
               describe_tensor(desc.a) + " and b " + describe_tensor(desc.b) +
               (transpose_a ? " (a transposed)" : "") + (transpose_b ? " (b transposed)" : "");
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const bool uses_c = desc.beta != 0.0f;
  if (uses_c) {
    if (reject(check_tensor("c", desc.c, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_batch("c", desc.c, desc.d), message) ||
        reject(check_same_shape("c", desc.c, "d", desc.d), message) ||
        reject(check_matrix_strides("c", desc.c, rank - 2), message))
      return HAL_ERROR_INVALID_ARGUMENT;
  }
  const bool has_bias = (desc.flags & HAL_MATMUL_BIAS) != 0;
  if (has_bias) {
    if (reject(check_tensor("bias", desc.bias, kFloatDtypes, 1, 1), message) ||
        reject(check_shape("bias", desc.bias, {n}), message) ||
        reject(check_matrix_strides("bias", desc.bias, 0), message))
      return HAL_ERROR_INVALID_ARGUMENT;
  }
  const bool has_aux = (desc.flags & HAL_MATMUL_SAVE_AUX) != 0;
  if (has_aux) {
    if (reject(check_output("aux", desc.aux, kFloatDtypes, 2, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_same_shape("aux", desc.aux, "d", desc.d), message))
      return HAL_ERROR_INVALID_ARGUMENT;
  }
  // In hal_matmul_operand_t's order (api/hal/ops.h): a, b, c, d, bias, aux.
  add_operand(*out, "a", Role::kInput, desc.a);
  add_operand(*out, "b", Role::kInput, desc.b);
  const int c = uses_c ? add_operand(*out, "c", Role::kInput, desc.c) : add_unused(*out, "c");
  add_operand(*out, "d", Role::kOutput, desc.d, uses_c ? c : -1);
  if (has_bias) {
    add_operand(*out, "bias", Role::kInput, desc.bias);
  } else {
    add_unused(*out, "bias");
  }
  if (has_aux) {
    add_operand(*out, "aux", Role::kOutput, desc.aux);
  } else {
    add_unused(*out, "aux");
  }
  static_assert(HAL_MATMUL_OPERAND_COUNT == 6,
                "one operand above for each of hal_matmul_operand_t");
  int64_t batch = 1;
  for (uint32_t d = 0; d + 2 < rank; ++d) batch *= desc.d.shape[d];
  out->summary = "batch=" + std::to_string(batch) + " m=" + std::to_string(m) +
                 " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 (transpose_a ? " a^T" : "") + (transpose_b ? " b^T" : "") + (uses_c ? " +c" : "") +
                 (has_bias ? " +bias" : "") + " act=" + std::to_string(desc.activation) +
                 (has_aux ? " aux" : "");
  return HAL_SUCCESS;
}

hal_result_t describe_bias_activation_backward(const hal_op_bias_activation_backward_desc_t& desc,
                                               OpSignature* out, std::string* message) {
  if (reject(check_epilogue_activation("desc->activation", desc.activation), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.compute_bias_grad > 1) {
    *message = "desc->compute_bias_grad is " + std::to_string(desc.compute_bias_grad) +
               "; it must be 0 or 1";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const bool uses_aux = desc.activation != HAL_ACTIVATION_NONE;
  if (reject(check_tensor("grad_out", desc.grad_out, kFloatDtypes, 2, 2), message) ||
      reject(check_output("grad_pre", desc.grad_pre, kFloatDtypes, 2, 2), message) ||
      reject(check_same_shape("grad_pre", desc.grad_pre, "grad_out", desc.grad_out), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (uses_aux) {
    if (reject(check_tensor("aux", desc.aux, kFloatDtypes, 2, 2), message) ||
        reject(check_same_shape("aux", desc.aux, "grad_out", desc.grad_out), message))
      return HAL_ERROR_INVALID_ARGUMENT;
  }
  const int64_t n = desc.grad_out.shape[1];
  if (desc.compute_bias_grad != 0) {
    if (reject(check_output("grad_bias", desc.grad_bias, kFloatDtypes, 1, 1), message) ||
        reject(check_shape("grad_bias", desc.grad_bias, {n}), message))
      return HAL_ERROR_INVALID_ARGUMENT;
  }
  const int grad_out = add_operand(*out, "grad_out", Role::kInput, desc.grad_out);
  if (uses_aux) {
    add_operand(*out, "aux", Role::kInput, desc.aux);
  } else {
    add_unused(*out, "aux");
  }
  add_operand(*out, "grad_pre", Role::kOutput, desc.grad_pre, grad_out);
  if (desc.compute_bias_grad != 0) {
    add_operand(*out, "grad_bias", Role::kOutput, desc.grad_bias);
  } else {
    add_unused(*out, "grad_bias");
  }
  out->summary = "rows=" + std::to_string(desc.grad_out.shape[0]) + " n=" + std::to_string(n) +
                 " act=" + std::to_string(desc.activation) +
                 (desc.compute_bias_grad != 0 ? " grad_bias" : "");
  return HAL_SUCCESS;
}

hal_result_t describe_grouped_matmul(const hal_op_grouped_matmul_desc_t& desc, OpSignature* out,
                                     std::string* message) {
  if ((desc.flags & ~static_cast<uint32_t>(HAL_MATMUL_TRANSPOSE_B)) != 0) {
    *message = "desc->flags " + std::to_string(desc.flags) +
               " has bits other than HAL_MATMUL_TRANSPOSE_B, the only grouped matmul flag";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_tensor("a", desc.a, kFloatDtypes, 2, 2), message) ||
      reject(check_tensor("b", desc.b, kFloatDtypes, 3, 3), message) ||
      reject(check_output("d", desc.d, kFloatDtypes, 2, 2), message) ||
      reject(check_matrix_strides("a", desc.a, 0), message) ||
      reject(check_matrix_strides("b", desc.b, 1), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.a.dtype != desc.b.dtype) {
    *message = "a " + describe_tensor(desc.a) + " and b " + describe_tensor(desc.b) +
               " must have the same dtype";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  const bool transpose_b = (desc.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
  const int64_t rows = desc.a.shape[0];
  const int64_t k = desc.a.shape[1];
  const int64_t groups = desc.groups;
  const int64_t b_k = transpose_b ? desc.b.shape[2] : desc.b.shape[1];
  const int64_t n = transpose_b ? desc.b.shape[1] : desc.b.shape[2];
  if (desc.b.shape[0] != groups) {
    *message = "b " + describe_tensor(desc.b) +
               " must have desc->groups = " + std::to_string(groups) + " matrices in dimension 0";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (b_k != k) {
    *message = "a " + describe_tensor(desc.a) + " has k = " + std::to_string(k) + " but b " +
               describe_tensor(desc.b) + " has k = " + std::to_string(b_k) +
               (transpose_b ? " (b is [groups, n, k] with TRANSPOSE_B)" : " (b is [groups, k, n])");
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_shape("d", desc.d, {rows, n}), message)) return HAL_ERROR_INVALID_ARGUMENT;
  // In hal_matmul_operand_t's order (api/hal/ops.h): a, b, c, d, bias, aux.
  add_operand(*out, "a", Role::kInput, desc.a);
  add_operand(*out, "b", Role::kInput, desc.b);
  add_operand(*out, "offsets", Role::kInput, vector_tensor(HAL_DTYPE_I32, groups + 1));
  add_operand(*out, "d", Role::kOutput, desc.d);
  out->summary = "groups=" + std::to_string(groups) + " rows=" + std::to_string(rows) +
                 " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                 (transpose_b ? " b^T" : "");
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_matmul_family(const hal_op_header_t* desc, OpSignature* out,
                                    std::string* message) {
  switch (desc->kind) {
    case HAL_OP_MATMUL:
      return describe_matmul(*reinterpret_cast<const hal_op_matmul_desc_t*>(desc), out, message);
    case HAL_OP_BIAS_ACTIVATION_BACKWARD:
      return describe_bias_activation_backward(
          *reinterpret_cast<const hal_op_bias_activation_backward_desc_t*>(desc), out, message);
    case HAL_OP_GROUPED_MATMUL:
      return describe_grouped_matmul(*reinterpret_cast<const hal_op_grouped_matmul_desc_t*>(desc),
                                     out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
