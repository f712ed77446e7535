// SOFTMAX(_BACKWARD), NORM(_BACKWARD): row-wise ops over the last dimension.
#include "definitions.hpp"

namespace hal::ops::definitions {

namespace {

hal_result_t invalid_argument(std::string text, std::string* message) {
  *message = std::move(text);
  return HAL_ERROR_INVALID_ARGUMENT;
}

// The rows of a [rows..., n] tensor: the product of its leading dimensions.
int64_t row_count(const hal_tensor_desc_t& tensor) {
  int64_t rows = 1;
  for (uint32_t d = 0; d + 1 < tensor.rank; ++d) rows *= tensor.shape[d];
  return rows;
}

int64_t last_extent(const hal_tensor_desc_t& tensor) {
  return tensor.shape[tensor.rank - 1];
}

hal_result_t describe_softmax(const hal_op_softmax_desc_t& desc, bool backward, OpSignature* out,
                              std::string* message) {
  if (desc.log > 1) {
    return invalid_argument("desc->log is " + std::to_string(desc.log) + "; it must be 0 or 1",
                            message);
  }
  const char* kind = desc.log != 0 ? "log_softmax" : "softmax";
  if (!backward) {
    if (reject(check_tensor("x", desc.x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_output("y", desc.y, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_same_shape("y", desc.y, "x", desc.x), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    const int x = add_operand(*out, "x", Role::kInput, desc.x);
    add_operand(*out, "y", Role::kOutput, desc.y, x);
  } else {
    // desc.x is grad_y's layout, desc.y the forward output's.
    if (reject(check_tensor("y", desc.y, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_tensor("grad_y (desc->x)", desc.x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_y (desc->x)", desc.x, "y", desc.y), message) ||
        reject(check_output("grad_x", desc.grad_x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_x", desc.grad_x, "y", desc.y), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    add_operand(*out, "y", Role::kInput, desc.y);
    const int grad_y = add_operand(*out, "grad_y", Role::kInput, desc.x);
    add_operand(*out, "grad_x", Role::kOutput, desc.grad_x, grad_y);
  }
  const hal_tensor_desc_t& shape = backward ? desc.y : desc.x;
  out->summary = std::string(kind) + " rows=" + std::to_string(row_count(shape)) +
                 " n=" + std::to_string(last_extent(shape));
  return HAL_SUCCESS;
}

// A flag of the descriptor: 0 or 1.
std::string check_flag(const char* name, uint32_t value) {
  if (value <= 1) return {};
  return std::string("desc->") + name + " is " + std::to_string(value) + "; it must be 0 or 1";
}

// A per-row statistic: f32 [rows], any stride.
std::string check_statistic(const char* name, const hal_tensor_desc_t& tensor, int64_t rows,
                            bool output) {
  std::string problem = output ? check_output(name, tensor, kF32Only, 1, 1)
                               : check_tensor(name, tensor, kF32Only, 1, 1);
  if (problem.empty()) problem = check_shape(name, tensor, {rows});
  return problem;
}

// A per-column parameter: [n], any float dtype (|allowed|), any stride.
std::string check_parameter(const char* name, const hal_tensor_desc_t& tensor, int64_t n,
                            DtypeSet allowed, bool output) {
  std::string problem = output ? check_output(name, tensor, allowed, 1, 1)
                               : check_tensor(name, tensor, allowed, 1, 1);
  if (problem.empty()) problem = check_shape(name, tensor, {n});
  return problem;
}

hal_result_t describe_norm(const hal_op_norm_desc_t& desc, bool backward, OpSignature* out,
                           std::string* message) {
  if (desc.norm != HAL_NORM_LAYERNORM && desc.norm != HAL_NORM_RMSNORM) {
    return invalid_argument(
        "desc->norm " + std::to_string(desc.norm) +
            " is not a hal_norm_kind_t (HAL_NORM_LAYERNORM or HAL_NORM_RMSNORM)",
        message);
  }
  const bool layernorm = desc.norm == HAL_NORM_LAYERNORM;
  // The forward divides by sqrt(var + epsilon) (var = 0 for a constant
  // row); the backward reads the rstd the forward saved and never uses it.
  if (reject(backward
                 ? check_non_negative_scalar("desc->epsilon", desc.epsilon)
                 : check_positive_normal_scalar(
                       "desc->epsilon", desc.epsilon,
                       "rows are divided by sqrt(var + epsilon), and a constant row has var 0"),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (reject(check_flag("has_gamma", desc.has_gamma), message) ||
      reject(check_flag("has_beta", desc.has_beta), message) ||
      reject(check_flag("has_mean", desc.has_mean), message) ||
      reject(check_flag("has_rstd", desc.has_rstd), message) ||
      reject(check_flag("has_grad_gamma", desc.has_grad_gamma), message) ||
      reject(check_flag("has_grad_beta", desc.has_grad_beta), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.has_beta != 0 && !layernorm) {
    return invalid_argument("desc->has_beta is set for HAL_NORM_RMSNORM, which has no beta",
                            message);
  }
  if (reject(check_tensor("x", desc.x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int64_t n = last_extent(desc.x);
  const int64_t rows = row_count(desc.x);
  if (desc.has_gamma != 0 &&
      reject(check_parameter("gamma", desc.gamma, n, kFloatDtypes, false), message))
    return HAL_ERROR_INVALID_ARGUMENT;

  if (!backward) {
    if (desc.has_mean != 0 && !layernorm) {
      return invalid_argument("desc->has_mean is set for HAL_NORM_RMSNORM, which saves no mean",
                              message);
    }
    if (desc.has_grad_gamma != 0 || desc.has_grad_beta != 0) {
      return invalid_argument(
          "desc->has_grad_gamma and has_grad_beta are for HAL_OP_NORM_BACKWARD only", message);
    }
    if ((desc.has_beta != 0 &&
         reject(check_parameter("beta", desc.beta, n, kFloatDtypes, false), message)) ||
        reject(check_output("y", desc.y, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK), message) ||
        reject(check_same_shape("y", desc.y, "x", desc.x), message) ||
        (desc.has_mean != 0 && reject(check_statistic("mean", desc.mean, rows, true), message)) ||
        (desc.has_rstd != 0 && reject(check_statistic("rstd", desc.rstd, rows, true), message)))
      return HAL_ERROR_INVALID_ARGUMENT;
    const int x = add_operand(*out, "x", Role::kInput, desc.x);
    if (desc.has_gamma != 0) {
      add_operand(*out, "gamma", Role::kInput, desc.gamma);
    } else {
      add_unused(*out, "gamma");
    }
    if (desc.has_beta != 0) {
      add_operand(*out, "beta", Role::kInput, desc.beta);
    } else {
      add_unused(*out, "beta");
    }
    add_operand(*out, "y", Role::kOutput, desc.y, x);
    if (desc.has_mean != 0) {
      add_operand(*out, "mean", Role::kOutput, desc.mean);
    } else {
      add_unused(*out, "mean");
    }
    if (desc.has_rstd != 0) {
      add_operand(*out, "rstd", Role::kOutput, desc.rstd);
    } else {
      add_unused(*out, "rstd");
    }
  } else {
    // has_mean and has_rstd are the forward's: the backward always reads
    // rstd, and mean for layernorm.
    if (desc.has_grad_gamma != 0 && desc.has_gamma == 0) {
      return invalid_argument("desc->has_grad_gamma is set without has_gamma", message);
    }
    if (desc.has_grad_beta != 0 && desc.has_beta == 0) {
      return invalid_argument("desc->has_grad_beta is set without has_beta (layernorm only)",
                              message);
    }
    const DtypeSet grad_dtypes = kF32Only | dtype_bit(desc.x.dtype);
    if ((layernorm && reject(check_statistic("mean", desc.mean, rows, false), message)) ||
        reject(check_statistic("rstd", desc.rstd, rows, false), message) ||
        reject(check_tensor("grad_y", desc.grad_y, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_y", desc.grad_y, "x", desc.x), message) ||
        reject(check_output("grad_x", desc.grad_x, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK),
               message) ||
        reject(check_same_shape("grad_x", desc.grad_x, "x", desc.x), message) ||
        (desc.has_grad_gamma != 0 &&
         reject(check_parameter("grad_gamma", desc.grad_gamma, n, grad_dtypes, true), message)) ||
        (desc.has_grad_beta != 0 &&
         reject(check_parameter("grad_beta", desc.grad_beta, n, grad_dtypes, true), message)))
      return HAL_ERROR_INVALID_ARGUMENT;
    add_operand(*out, "x", Role::kInput, desc.x);
    if (desc.has_gamma != 0) {
      add_operand(*out, "gamma", Role::kInput, desc.gamma);
    } else {
      add_unused(*out, "gamma");
    }
    if (layernorm) {
      add_operand(*out, "mean", Role::kInput, desc.mean);
    } else {
      add_unused(*out, "mean");
    }
    add_operand(*out, "rstd", Role::kInput, desc.rstd);
    const int grad_y = add_operand(*out, "grad_y", Role::kInput, desc.grad_y);
    add_operand(*out, "grad_x", Role::kOutput, desc.grad_x, grad_y);
    if (desc.has_grad_gamma != 0) {
      add_operand(*out, "grad_gamma", Role::kOutput, desc.grad_gamma);
    } else {
      add_unused(*out, "grad_gamma");
    }
    if (desc.has_grad_beta != 0) {
      add_operand(*out, "grad_beta", Role::kOutput, desc.grad_beta);
    } else {
      add_unused(*out, "grad_beta");
    }
  }
  out->summary = std::string(layernorm ? "layernorm" : "rmsnorm") +
                 " rows=" + std::to_string(rows) + " n=" + std::to_string(n);
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_normalization_family(const hal_op_header_t* desc, OpSignature* out,
                                           std::string* message) {
  switch (desc->kind) {
    case HAL_OP_SOFTMAX:
    case HAL_OP_SOFTMAX_BACKWARD:
      return describe_softmax(*reinterpret_cast<const hal_op_softmax_desc_t*>(desc),
                              desc->kind == HAL_OP_SOFTMAX_BACKWARD, out, message);
    case HAL_OP_NORM:
    case HAL_OP_NORM_BACKWARD:
      return describe_norm(*reinterpret_cast<const hal_op_norm_desc_t*>(desc),
                           desc->kind == HAL_OP_NORM_BACKWARD, out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
