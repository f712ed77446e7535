// ROPE, EMBEDDING(_BACKWARD), CROSS_ENTROPY, ADAMW, TOPK_GATING.
#include "definitions.hpp"

namespace hal::ops::definitions {

namespace {

constexpr hal_result_t kInvalid = HAL_ERROR_INVALID_ARGUMENT;

// |value| is 0 or 1; else |message| names the field.
bool check_flag(const char* field, uint32_t value, std::string* message) {
  if (value <= 1) return true;
  *message = std::string("desc->") + field + " is " + std::to_string(value) + "; it must be 0 or 1";
  return false;
}

hal_result_t describe_rope(const hal_op_rope_desc_t& desc, OpSignature* out, std::string* message) {
  if (!check_flag("interleaved", desc.interleaved, message) ||
      !check_flag("inverse", desc.inverse, message) ||
      !check_flag("has_positions", desc.has_positions, message))
    return kInvalid;
  if (reject(check_tensor("x", desc.x, kFloatDtypes, 4, 4), message) ||
      reject(check_output("out", desc.out, kFloatDtypes, 4, 4), message) ||
      reject(check_same_shape("out", desc.out, "x", desc.x), message))
    return kInvalid;
  const int64_t dim = desc.x.shape[3];
  if (desc.rotary_dim == 0 || desc.rotary_dim % 2 != 0 || desc.rotary_dim > dim) {
    *message = "desc->rotary_dim is " + std::to_string(desc.rotary_dim) +
               "; it must be even, at least 2 and at most x's last dimension (" +
               std::to_string(dim) + ")";
    return kInvalid;
  }
  if (reject(check_positive_normal_scalar("desc->base", desc.base,
                                          "the frequencies are base^(-2i/rotary_dim)"),
             message))
    return kInvalid;
  const int x = add_operand(*out, "x", Role::kInput, desc.x);
  if (desc.has_positions) {
    if (reject(check_tensor("positions", desc.positions, kI32Only, 2, 2), message) ||
        reject(check_shape("positions", desc.positions, {desc.x.shape[0], desc.x.shape[1]}),
               message))
      return kInvalid;
    add_operand(*out, "positions", Role::kInput, desc.positions);
  } else {
    add_unused(*out, "positions");
  }
  add_operand(*out, "out", Role::kOutput, desc.out, x);
  out->summary = "rotary_dim=" + std::to_string(desc.rotary_dim) +
                 (desc.interleaved ? " interleaved" : " half-split") +
                 (desc.inverse ? " inverse" : "");
  return HAL_SUCCESS;
}

// ids [n...] (rank 0..7) and rows [n..., dim] of |rows_name|: the leading
// dimensions are ids' shape.
bool check_rows_of_ids(const char* rows_name, const hal_tensor_desc_t& rows,
                       const hal_tensor_desc_t& ids, int64_t dim, std::string* message) {
  bool same = rows.rank == ids.rank + 1 && rows.shape[ids.rank] == dim;
  for (uint32_t d = 0; same && d < ids.rank; ++d) same = rows.shape[d] == ids.shape[d];
  if (same) return true;
  *message = std::string(rows_name) + " is " + describe_tensor(rows) +
             "; it must have ids' shape followed by the table's dim (" + std::to_string(dim) +
             "), ids being " + describe_tensor(ids);
  return false;
}

hal_result_t describe_embedding(const hal_op_embedding_desc_t& desc, bool backward,
                                OpSignature* out, std::string* message) {
  if (!backward && desc.accumulate != 0) {
    *message = "desc->accumulate must be 0 for HAL_OP_EMBEDDING (it is for the backward op)";
    return kInvalid;
  }
  if (!check_flag("accumulate", desc.accumulate, message)) return kInvalid;
  if (desc.reserved != 0) {
    *message = "desc->reserved must be 0";
    return kInvalid;
  }
  const char* table_name = backward ? "grad_table" : "table";
  const char* rows_name = backward ? "grad_out" : "out";
  if (reject(check_tensor("ids", desc.ids, kIndexDtypes, 0, HAL_TENSOR_MAX_RANK - 1), message))
    return kInvalid;
  if (reject(backward ? check_output(table_name, desc.table, kFloatDtypes, 2, 2)
                      : check_tensor(table_name, desc.table, kFloatDtypes, 2, 2),
             message) ||
      reject(backward ? check_tensor(rows_name, desc.out, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK)
                      : check_output(rows_name, desc.out, kFloatDtypes, 1, HAL_TENSOR_MAX_RANK),
             message))
    return kInvalid;
  if (!check_rows_of_ids(rows_name, desc.out, desc.ids, desc.table.shape[1], message))
    return kInvalid;
  add_operand(*out, "ids", Role::kInput, desc.ids);
  if (backward) {
    add_operand(*out, "grad_out", Role::kInput, desc.out);
    add_operand(*out, "grad_table", desc.accumulate ? Role::kInOut : Role::kOutput, desc.table);
  } else {
    add_operand(*out, "table", Role::kInput, desc.table);
    add_operand(*out, "out", Role::kOutput, desc.out);
  }
  out->summary = "vocab=" + std::to_string(desc.table.shape[0]) +
                 " dim=" + std::to_string(desc.table.shape[1]) +
                 (desc.accumulate ? " accumulate" : "");
  return HAL_SUCCESS;
}

std::string check_grad_scale(const hal_op_scalar_t* scalars) {
  return check_f32_run_time_scalar("scalar 0 (grad_scale)", scalars[0].f64, Sign::kAny,
                                   "cross-entropy");
}

hal_result_t describe_cross_entropy(const hal_op_cross_entropy_desc_t& desc, OpSignature* out,
                                    std::string* message) {
  if (!check_flag("has_row_losses", desc.has_row_losses, message) ||
      !check_flag("has_grad", desc.has_grad, message))
    return kInvalid;
  if (desc.reserved != 0) {
    *message = "desc->reserved must be 0";
    return kInvalid;
  }
  if (reject(check_unit_interval_scalar("desc->label_smoothing", desc.label_smoothing), message))
    return kInvalid;
  if (reject(check_tensor("logits", desc.logits, kFloatDtypes, 2, 2), message) ||
      reject(check_tensor("labels", desc.labels, kIndexDtypes, 1, 1), message) ||
      reject(check_shape("labels", desc.labels, {desc.logits.shape[0]}), message) ||
      reject(check_output("loss", desc.loss, kF32Only, 1, 1), message) ||
      reject(check_shape("loss", desc.loss, {1}), message))
    return kInvalid;
  if (desc.logits.shape[1] < 1) {
    *message = "logits is " + describe_tensor(desc.logits) + "; it needs at least one class";
    return kInvalid;
  }
  const int logits = add_operand(*out, "logits", Role::kInput, desc.logits);
  add_operand(*out, "labels", Role::kInput, desc.labels);
  add_operand(*out, "loss", Role::kOutput, desc.loss);
  if (desc.has_row_losses) {
    if (reject(check_output("row_losses", desc.row_losses, kF32Only, 1, 1), message) ||
        reject(check_shape("row_losses", desc.row_losses, {desc.logits.shape[0]}), message))
      return kInvalid;
    add_operand(*out, "row_losses", Role::kOutput, desc.row_losses);
  } else {
    add_unused(*out, "row_losses");
  }
  if (desc.has_grad) {
    if (reject(check_output("grad_logits", desc.grad_logits, kFloatDtypes, 2, 2), message) ||
        reject(check_same_shape("grad_logits", desc.grad_logits, "logits", desc.logits), message))
      return kInvalid;
    add_operand(*out, "grad_logits", Role::kOutput, desc.grad_logits, logits);
  } else {
    add_unused(*out, "grad_logits");
  }
  out->scalars.push_back({"grad_scale", ScalarType::kF64});
  set_scalar_check(*out, check_grad_scale);
  out->summary = "rows=" + std::to_string(desc.logits.shape[0]) +
                 " classes=" + std::to_string(desc.logits.shape[1]);
  return HAL_SUCCESS;
}

std::string check_adamw_scalars(const hal_op_scalar_t* scalars) {
  std::string problem =
      check_f32_run_time_scalar("scalar 0 (lr)", scalars[0].f64, Sign::kNonNegative, "AdamW");
  if (!problem.empty()) return problem;
  if (scalars[1].i64 < 1) {
    return "scalar 1 (step) is " + std::to_string(scalars[1].i64) + "; it must be >= 1";
  }
  return {};
}

constexpr uint32_t kMaxAdamwTensors = 4096;

hal_result_t describe_adamw(const hal_op_adamw_desc_t& desc, OpSignature* out,
                            std::string* message) {
  if (desc.tensor_count == 0 || desc.tensor_count > kMaxAdamwTensors) {
    *message = "desc->tensor_count is " + std::to_string(desc.tensor_count) + "; it must be 1.." +
               std::to_string(kMaxAdamwTensors);
    return kInvalid;
  }
  if (desc.numels == nullptr) {
    *message = "desc->numels is NULL";
    return kInvalid;
  }
  if (!check_flag("has_master", desc.has_master, message) ||
      !check_flag("has_grad_norm", desc.has_grad_norm, message))
    return kInvalid;
  const auto float_dtype = [](hal_dtype_t dtype) {
    return static_cast<uint32_t>(dtype) < 32 && (kFloatDtypes & dtype_bit(dtype)) != 0;
  };
  if (!float_dtype(desc.param_dtype)) {
    *message = "desc->param_dtype must be one of " + describe_dtypes(kFloatDtypes);
    return kInvalid;
  }
  if (!float_dtype(desc.grad_dtype)) {
    *message = "desc->grad_dtype must be one of " + describe_dtypes(kFloatDtypes);
    return kInvalid;
  }
  if (reject(check_unit_interval_scalar("desc->beta1", desc.beta1), message) ||
      reject(check_unit_interval_scalar("desc->beta2", desc.beta2), message) ||
      reject(check_positive_normal_scalar(
                 "desc->epsilon", desc.epsilon,
                 "the update divides by sqrt(v) + epsilon, and v is 0 where the gradient is"),
             message) ||
      reject(check_non_negative_scalar("desc->weight_decay", desc.weight_decay), message) ||
      reject(check_finite_scalar("desc->max_grad_norm (<= 0: no clipping)", desc.max_grad_norm),
             message))
    return kInvalid;
  // The loader's operand checks compute byte extents in 64 bits.
  constexpr int64_t kMaxNumel = int64_t{1} << 40;
  for (uint32_t t = 0; t < desc.tensor_count; ++t) {
    if (desc.numels[t] < 0 || desc.numels[t] > kMaxNumel) {
      *message = "desc->numels[" + std::to_string(t) + "] is " + std::to_string(desc.numels[t]) +
                 "; it must be in [0, 2^40]";
      return kInvalid;
    }
  }
  if (desc.has_grad_norm) {
    add_operand(*out, "grad_norm", Role::kOutput, vector_tensor(HAL_DTYPE_F32, 1));
  } else {
    add_unused(*out, "grad_norm");
  }
  for (uint32_t t = 0; t < desc.tensor_count; ++t) {
    const int64_t n = desc.numels[t];
    add_operand(*out, "param", Role::kInOut, vector_tensor(desc.param_dtype, n));
    add_operand(*out, "grad", Role::kInput, vector_tensor(desc.grad_dtype, n));
    add_operand(*out, "m", Role::kInOut, vector_tensor(HAL_DTYPE_F32, n));
    add_operand(*out, "v", Role::kInOut, vector_tensor(HAL_DTYPE_F32, n));
    if (desc.has_master) {
      add_operand(*out, "master", Role::kInOut, vector_tensor(HAL_DTYPE_F32, n));
    } else {
      add_unused(*out, "master");
    }
  }
  out->scalars.push_back({"lr", ScalarType::kF64});
  out->scalars.push_back({"step", ScalarType::kI64});
  set_scalar_check(*out, check_adamw_scalars);
  out->summary = "tensors=" + std::to_string(desc.tensor_count) +
                 (desc.has_master ? " master" : "") + (desc.max_grad_norm > 0.0f ? " clip" : "");
  return HAL_SUCCESS;
}

hal_result_t describe_topk_gating(const hal_op_topk_gating_desc_t& desc, OpSignature* out,
                                  std::string* message) {
  if (!check_flag("renormalize", desc.renormalize, message)) return kInvalid;
  if (reject(check_tensor("logits", desc.logits, kFloatDtypes, 2, 2), message)) return kInvalid;
  const int64_t experts = desc.logits.shape[1];
  if (desc.k == 0 || desc.k > experts) {
    *message = "desc->k is " + std::to_string(desc.k) +
               "; it must be in [1, experts = " + std::to_string(experts) + "]";
    return kInvalid;
  }
  const int64_t tokens = desc.logits.shape[0];
  const int64_t k = desc.k;
  if (reject(check_output("weights", desc.weights, kF32Only, 2, 2), message) ||
      reject(check_shape("weights", desc.weights, {tokens, k}), message) ||
      reject(check_output("indices", desc.indices, kI32Only, 2, 2), message) ||
      reject(check_shape("indices", desc.indices, {tokens, k}), message))
    return kInvalid;
  add_operand(*out, "logits", Role::kInput, desc.logits);
  add_operand(*out, "weights", Role::kOutput, desc.weights);
  add_operand(*out, "indices", Role::kOutput, desc.indices);
  out->summary = "experts=" + std::to_string(experts) + " k=" + std::to_string(k) +
                 (desc.renormalize ? " renormalize" : "");
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_training_family(const hal_op_header_t* desc, OpSignature* out,
                                      std::string* message) {
  switch (desc->kind) {
    case HAL_OP_ROPE:
      return describe_rope(*reinterpret_cast<const hal_op_rope_desc_t*>(desc), out, message);
    case HAL_OP_EMBEDDING:
    case HAL_OP_EMBEDDING_BACKWARD:
      return describe_embedding(*reinterpret_cast<const hal_op_embedding_desc_t*>(desc),
                                desc->kind == HAL_OP_EMBEDDING_BACKWARD, out, message);
    case HAL_OP_CROSS_ENTROPY:
      return describe_cross_entropy(*reinterpret_cast<const hal_op_cross_entropy_desc_t*>(desc),
                                    out, message);
    case HAL_OP_ADAMW:
      return describe_adamw(*reinterpret_cast<const hal_op_adamw_desc_t*>(desc), out, message);
    case HAL_OP_TOPK_GATING:
      return describe_topk_gating(*reinterpret_cast<const hal_op_topk_gating_desc_t*>(desc), out,
                                  message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
