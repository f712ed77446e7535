#include "hal_ops/signature.hpp"

#include "definitions/definitions.hpp"
#include "hal_util/names.hpp"

namespace hal::ops {

int add_operand(OpSignature& signature, const char* name, Role role,
                const hal_tensor_desc_t& tensor, int may_alias) {
  OperandSpec spec;
  spec.name = name;
  spec.role = role;
  spec.tensor = tensor;
  spec.may_alias = may_alias;
  signature.operands.push_back(spec);
  return static_cast<int>(signature.operands.size()) - 1;
}

int add_unused(OpSignature& signature, const char* name) {
  OperandSpec spec;
  spec.name = name;
  spec.used = false;
  signature.operands.push_back(spec);
  return static_cast<int>(signature.operands.size()) - 1;
}

hal_tensor_desc_t vector_tensor(hal_dtype_t dtype, int64_t count) {
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, dtype, 1, &count);
  return tensor;
}

size_t descriptor_size(hal_op_kind_t kind) {
  switch (kind) {
    case HAL_OP_MATMUL:
      return sizeof(hal_op_matmul_desc_t);
    case HAL_OP_BIAS_ACTIVATION_BACKWARD:
      return sizeof(hal_op_bias_activation_backward_desc_t);
    case HAL_OP_GROUPED_MATMUL:
      return sizeof(hal_op_grouped_matmul_desc_t);
    case HAL_OP_SOFTMAX:
    case HAL_OP_SOFTMAX_BACKWARD:
      return sizeof(hal_op_softmax_desc_t);
    case HAL_OP_NORM:
    case HAL_OP_NORM_BACKWARD:
      return sizeof(hal_op_norm_desc_t);
    case HAL_OP_BINARY:
      return sizeof(hal_op_binary_desc_t);
    case HAL_OP_UNARY:
    case HAL_OP_UNARY_BACKWARD:
      return sizeof(hal_op_unary_desc_t);
    case HAL_OP_SWIGLU:
    case HAL_OP_SWIGLU_BACKWARD:
      return sizeof(hal_op_swiglu_desc_t);
    case HAL_OP_REDUCE:
      return sizeof(hal_op_reduce_desc_t);
    case HAL_OP_ROPE:
      return sizeof(hal_op_rope_desc_t);
    case HAL_OP_EMBEDDING:
    case HAL_OP_EMBEDDING_BACKWARD:
      return sizeof(hal_op_embedding_desc_t);
    case HAL_OP_CROSS_ENTROPY:
      return sizeof(hal_op_cross_entropy_desc_t);
    case HAL_OP_ADAMW:
      return sizeof(hal_op_adamw_desc_t);
    case HAL_OP_CAST:
    case HAL_OP_PERMUTE:
      return sizeof(hal_op_cast_desc_t);
    case HAL_OP_DROPOUT:
      return sizeof(hal_op_dropout_desc_t);
    case HAL_OP_ATTENTION:
    case HAL_OP_ATTENTION_BACKWARD:
      return sizeof(hal_op_attention_desc_t);
    case HAL_OP_TOPK_GATING:
      return sizeof(hal_op_topk_gating_desc_t);
    case HAL_OP_CONVOLUTION:
    case HAL_OP_CONVOLUTION_BACKWARD_DATA:
    case HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS:
      return sizeof(hal_op_convolution_desc_t);
    case HAL_OP_POOLING:
    case HAL_OP_POOLING_BACKWARD:
      return sizeof(hal_op_pooling_desc_t);
    case HAL_OP_BATCH_NORM:
    case HAL_OP_BATCH_NORM_BACKWARD:
      return sizeof(hal_op_batch_norm_desc_t);
    case HAL_OP_GROUP_NORM:
    case HAL_OP_GROUP_NORM_BACKWARD:
      return sizeof(hal_op_group_norm_desc_t);
    case HAL_OP_UNARY_MATH:
      return sizeof(hal_op_unary_math_desc_t);
    case HAL_OP_BINARY_SCALAR:
      return sizeof(hal_op_binary_scalar_desc_t);
    case HAL_OP_WHERE:
      return sizeof(hal_op_where_desc_t);
    case HAL_OP_CLAMP:
      return sizeof(hal_op_clamp_desc_t);
    case HAL_OP_SCAN:
      return sizeof(hal_op_scan_desc_t);
    case HAL_OP_GATHER:
      return sizeof(hal_op_gather_desc_t);
    case HAL_OP_SCATTER:
      return sizeof(hal_op_scatter_desc_t);
    case HAL_OP_CAT:
      return sizeof(hal_op_cat_desc_t);
    case HAL_OP_FILL:
      return sizeof(hal_op_fill_desc_t);
    case HAL_OP_PAGED_KV_APPEND:
      return sizeof(hal_op_paged_kv_append_desc_t);
    case HAL_OP_PAGED_ATTENTION:
      return sizeof(hal_op_paged_attention_desc_t);
    case HAL_OP_QUANTIZE:
    case HAL_OP_DEQUANTIZE:
      return sizeof(hal_op_quantize_desc_t);
    case HAL_OP_SCALED_MATMUL:
      return sizeof(hal_op_scaled_matmul_desc_t);
    case HAL_OP_FAKE_QUANTIZE:
    case HAL_OP_FAKE_QUANTIZE_BACKWARD:
      return sizeof(hal_op_fake_quantize_desc_t);
    default:
      return 0;
  }
}

hal_result_t describe(const hal_op_header_t* desc, OpSignature* out_signature,
                      std::string* message) {
  using namespace definitions;
  DescribeFn describe_family = nullptr;
  switch (desc->kind) {
    case HAL_OP_MATMUL:
    case HAL_OP_BIAS_ACTIVATION_BACKWARD:
    case HAL_OP_GROUPED_MATMUL:
      describe_family = describe_matmul_family;
      break;
    case HAL_OP_SOFTMAX:
    case HAL_OP_SOFTMAX_BACKWARD:
    case HAL_OP_NORM:
    case HAL_OP_NORM_BACKWARD:
      describe_family = describe_normalization_family;
      break;
    case HAL_OP_BINARY:
    case HAL_OP_UNARY:
    case HAL_OP_UNARY_BACKWARD:
    case HAL_OP_SWIGLU:
    case HAL_OP_SWIGLU_BACKWARD:
    case HAL_OP_REDUCE:
    case HAL_OP_CAST:
    case HAL_OP_PERMUTE:
    case HAL_OP_DROPOUT:
      describe_family = describe_elementwise_family;
      break;
    case HAL_OP_ROPE:
    case HAL_OP_EMBEDDING:
    case HAL_OP_EMBEDDING_BACKWARD:
    case HAL_OP_CROSS_ENTROPY:
    case HAL_OP_ADAMW:
    case HAL_OP_TOPK_GATING:
      describe_family = describe_training_family;
      break;
    case HAL_OP_ATTENTION:
    case HAL_OP_ATTENTION_BACKWARD:
      describe_family = describe_attention_family;
      break;
    case HAL_OP_CONVOLUTION:
    case HAL_OP_CONVOLUTION_BACKWARD_DATA:
    case HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS:
      describe_family = describe_convolution_family;
      break;
    case HAL_OP_POOLING:
    case HAL_OP_POOLING_BACKWARD:
      describe_family = describe_pooling_family;
      break;
    case HAL_OP_BATCH_NORM:
    case HAL_OP_BATCH_NORM_BACKWARD:
    case HAL_OP_GROUP_NORM:
    case HAL_OP_GROUP_NORM_BACKWARD:
      describe_family = describe_channel_norm_family;
      break;
    case HAL_OP_UNARY_MATH:
    case HAL_OP_BINARY_SCALAR:
    case HAL_OP_WHERE:
    case HAL_OP_CLAMP:
      describe_family = describe_math_family;
      break;
    case HAL_OP_SCAN:
    case HAL_OP_GATHER:
    case HAL_OP_SCATTER:
    case HAL_OP_CAT:
    case HAL_OP_FILL:
      describe_family = describe_indexing_family;
      break;
    case HAL_OP_PAGED_KV_APPEND:
    case HAL_OP_PAGED_ATTENTION:
      describe_family = describe_paged_family;
      break;
    case HAL_OP_QUANTIZE:
    case HAL_OP_DEQUANTIZE:
    case HAL_OP_SCALED_MATMUL:
    case HAL_OP_FAKE_QUANTIZE:
    case HAL_OP_FAKE_QUANTIZE_BACKWARD:
      describe_family = describe_lowp_family;
      break;
    default:
      *message = "desc->kind " + std::to_string(static_cast<uint32_t>(desc->kind)) +
                 " is not a hal_op_kind_t";
      return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (desc->reserved != 0) {
    *message = "desc->header.reserved must be 0";
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  *out_signature = OpSignature{};
  return describe_family(desc, out_signature, message);
}

}  // namespace hal::ops
