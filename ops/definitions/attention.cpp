// ATTENTION and ATTENTION_BACKWARD (FlashAttention's contract).
#include "definitions.hpp"

#include <cstdint>

namespace hal::ops::definitions {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The dense layout of the block sparsity operand the descriptor implies:
// [batch, heads, ceil(s_q / block_q), ceil(s_k / block_k) or topk].
hal_tensor_desc_t sparsity_tensor(const hal_op_attention_desc_t& desc) {
  const bool varlen = desc.has_cu_seqlens != 0;
  const int64_t s_q = varlen ? desc.max_seqlen_q : desc.q.shape[1];
  const int64_t s_k = varlen ? desc.max_seqlen_k : desc.k.shape[1];
  const bool indices = desc.sparsity == HAL_ATTENTION_BLOCK_INDICES;
  const int64_t shape[4] = {
      desc.batch, desc.q.shape[2], ceil_div(s_q, desc.block_q),
      indices ? static_cast<int64_t>(desc.topk) : ceil_div(s_k, desc.block_k)};
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, indices ? HAL_DTYPE_I32 : HAL_DTYPE_U8, 4, shape);
  return tensor;
}

hal_result_t describe_attention(const hal_op_attention_desc_t& desc, bool backward,
                                OpSignature* out, std::string* message) {
  if (static_cast<uint32_t>(desc.causal) > HAL_CAUSAL_BOTTOM_RIGHT) {
    return invalid(message, "desc->causal " + std::to_string(desc.causal) +
                                " is not a hal_causal_alignment_t");
  }
  if (static_cast<uint32_t>(desc.sparsity) > HAL_ATTENTION_BLOCK_INDICES) {
    return invalid(message, "desc->sparsity " + std::to_string(desc.sparsity) +
                                " is not a hal_attention_sparsity_t");
  }
  if (reject(check_finite_scalar("desc->scale (0 selects 1/sqrt(d))", desc.scale), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.has_cu_seqlens > 1) return invalid(message, "desc->has_cu_seqlens must be 0 or 1");
  if (reject(check_tensor("q", desc.q, kFloatDtypes, 4, 4), message) ||
      reject(check_tensor("k", desc.k, kFloatDtypes, 4, 4), message) ||
      reject(check_tensor("v", desc.v, kFloatDtypes, 4, 4), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  const int64_t batch_rows = desc.q.shape[0];
  const int64_t s_q = desc.q.shape[1];
  const int64_t heads = desc.q.shape[2];
  const int64_t dim = desc.q.shape[3];
  const int64_t kv_heads = desc.k.shape[2];
  if (dim < 1) return invalid(message, "q.shape[3] (the head dim) must be at least 1");
  if (desc.k.shape[3] != dim || desc.v.shape[3] != dim) {
    return invalid(message, "the head dims differ: q " + describe_tensor(desc.q) + ", k " +
                                describe_tensor(desc.k) + ", v " + describe_tensor(desc.v) +
                                " (shape[3] must match)");
  }
  if (reject(check_same_shape("v", desc.v, "k", desc.k), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0) {
    return invalid(message, "q.shape[2] (heads, " + std::to_string(heads) +
                                ") must be a positive multiple of k.shape[2] (kv_heads, " +
                                std::to_string(kv_heads) + ")");
  }
  if (heads > INT32_MAX || dim > INT32_MAX) {
    return invalid(message, "heads and the head dim must fit in int32");
  }
  if (desc.k.shape[0] != batch_rows) {
    return invalid(message,
                   "k.shape[0] must equal q.shape[0] (" + std::to_string(batch_rows) + ")");
  }
  const bool varlen = desc.has_cu_seqlens != 0;
  if (varlen) {
    if (batch_rows != 1) {
      return invalid(
          message, "with has_cu_seqlens, q and k are packed: q.shape[0] and k.shape[0] must be 1");
    }
    if (desc.batch >= INT32_MAX) return invalid(message, "desc->batch must be below 2^31 - 1");
  } else if (static_cast<int64_t>(desc.batch) != batch_rows) {
    return invalid(message, "desc->batch (" + std::to_string(desc.batch) +
                                ") must equal q.shape[0] (" + std::to_string(batch_rows) +
                                ") without has_cu_seqlens");
  }
  if (desc.sparsity != HAL_ATTENTION_DENSE) {
    if (desc.block_q == 0 || desc.block_k == 0) {
      return invalid(message, "desc->block_q and desc->block_k must be at least 1 with sparsity");
    }
    if (desc.sparsity == HAL_ATTENTION_BLOCK_INDICES && (desc.topk == 0 || desc.topk > INT32_MAX)) {
      return invalid(message, "desc->topk must be in [1, 2^31) with HAL_ATTENTION_BLOCK_INDICES");
    }
    // The sparsity tensor's element count must fit in int64.
    const bool indices = desc.sparsity == HAL_ATTENTION_BLOCK_INDICES;
    const int64_t rows = varlen ? desc.max_seqlen_q : s_q;
    const int64_t cols = varlen ? desc.max_seqlen_k : desc.k.shape[1];
    int64_t count = 0;
    if (__builtin_mul_overflow(static_cast<int64_t>(desc.batch), heads, &count) ||
        __builtin_mul_overflow(count, ceil_div(rows, desc.block_q), &count) ||
        __builtin_mul_overflow(count, indices ? int64_t{desc.topk} : ceil_div(cols, desc.block_k),
                               &count) ||
        count > INT64_MAX / 4) {
      return invalid(message, "the block sparsity tensor's size overflows int64");
    }
  }

  // out (forward output, backward input) and lse.
  const char* out_name = "out";
  if (!backward) {
    if (reject(check_output(out_name, desc.out, kFloatDtypes, 4, 4), message) ||
        reject(check_output("lse", desc.lse, kF32Only, 3, 3), message))
      return HAL_ERROR_INVALID_ARGUMENT;
  } else if (reject(check_tensor(out_name, desc.out, kFloatDtypes, 4, 4), message) ||
             reject(check_tensor("lse", desc.lse, kF32Only, 3, 3), message)) {
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_same_shape(out_name, desc.out, "q", desc.q), message) ||
      reject(check_shape("lse", desc.lse, {batch_rows, heads, s_q}), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (backward) {
    if (reject(check_tensor("grad_out", desc.grad_out, kFloatDtypes, 4, 4), message) ||
        reject(check_same_shape("grad_out", desc.grad_out, "q", desc.q), message) ||
        reject(check_output("grad_q", desc.grad_q, kFloatDtypes, 4, 4), message) ||
        reject(check_same_shape("grad_q", desc.grad_q, "q", desc.q), message) ||
        reject(check_output("grad_k", desc.grad_k, kFloatDtypes, 4, 4), message) ||
        reject(check_same_shape("grad_k", desc.grad_k, "k", desc.k), message) ||
        reject(check_output("grad_v", desc.grad_v, kFloatDtypes, 4, 4), message) ||
        reject(check_same_shape("grad_v", desc.grad_v, "k", desc.k), message))
      return HAL_ERROR_INVALID_ARGUMENT;
  }

  add_operand(*out, "q", Role::kInput, desc.q);
  add_operand(*out, "k", Role::kInput, desc.k);
  add_operand(*out, "v", Role::kInput, desc.v);
  add_operand(*out, "out", backward ? Role::kInput : Role::kOutput, desc.out);
  add_operand(*out, "lse", backward ? Role::kInput : Role::kOutput, desc.lse);
  if (varlen) {
    add_operand(*out, "cu_seqlens_q", Role::kInput,
                vector_tensor(HAL_DTYPE_I32, static_cast<int64_t>(desc.batch) + 1));
    add_operand(*out, "cu_seqlens_k", Role::kInput,
                vector_tensor(HAL_DTYPE_I32, static_cast<int64_t>(desc.batch) + 1));
  } else {
    add_unused(*out, "cu_seqlens_q");
    add_unused(*out, "cu_seqlens_k");
  }
  if (desc.sparsity == HAL_ATTENTION_BLOCK_MASK) {
    add_operand(*out, "block_mask", Role::kInput, sparsity_tensor(desc));
  } else if (desc.sparsity == HAL_ATTENTION_BLOCK_INDICES) {
    add_operand(*out, "block_indices", Role::kInput, sparsity_tensor(desc));
  } else {
    add_unused(*out, "block_sparsity");
  }
  if (backward) {
    add_operand(*out, "grad_out", Role::kInput, desc.grad_out);
    add_operand(*out, "grad_q", Role::kOutput, desc.grad_q);
    add_operand(*out, "grad_k", Role::kOutput, desc.grad_k);
    add_operand(*out, "grad_v", Role::kOutput, desc.grad_v);
  }
  out->summary = "b=" + std::to_string(desc.batch) + " s_q=" + std::to_string(s_q) +
                 " s_k=" + std::to_string(desc.k.shape[1]) + " h=" + std::to_string(heads) +
                 " kv_h=" + std::to_string(kv_heads) + " d=" + std::to_string(dim) +
                 " causal=" + std::to_string(desc.causal) +
                 " sparsity=" + std::to_string(desc.sparsity) + (varlen ? " varlen" : "");
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_attention_family(const hal_op_header_t* desc, OpSignature* out,
                                       std::string* message) {
  switch (desc->kind) {
    case HAL_OP_ATTENTION:
    case HAL_OP_ATTENTION_BACKWARD:
      return describe_attention(*reinterpret_cast<const hal_op_attention_desc_t*>(desc),
                                desc->kind == HAL_OP_ATTENTION_BACKWARD, out, message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
