// PAGED_KV_APPEND and PAGED_ATTENTION: the paged KV cache (SPEC.md §17.6.11).
// One shape rule for the cache, the block table and the sequence lengths,
// shared by both ops.
#include "definitions.hpp"
#include "scalars.hpp"

#include <cmath>
#include <cstdint>
#include <string>

namespace hal::ops::definitions {

namespace {

std::string flag_problem(const char* field, uint32_t value) {
  if (value <= 1) return {};
  return std::string("desc->") + field + " must be 0 or 1 (it is " + std::to_string(value) + ")";
}

// What the cache operands say about the cache, checked once for both ops.
struct CacheShape {
  int64_t batch = 0, kv_heads = 0, head_dim = 0, head_dim_v = 0;
};

// k_cache [num_blocks, block_size, kv_heads, head_dim] (kv_heads and
// head_dim as |shape| says), v_cache likewise with head_dim_v (unless
// values_in_keys), block_table i32 [batch, max_blocks], seq_lens i32
// [batch]. |caches_written|: the caches are outputs (the append).
std::string check_cache(const hal_tensor_desc_t& k_cache, const hal_tensor_desc_t& v_cache,
                        bool values_in_keys, const hal_tensor_desc_t& block_table,
                        const hal_tensor_desc_t& seq_lens, bool caches_written, CacheShape& shape) {
  const auto check = caches_written ? check_output : check_tensor;
  if (std::string problem = check("k_cache", k_cache, kFloatDtypes, 4, 4); !problem.empty())
    return problem;
  const int64_t num_blocks = k_cache.shape[0];
  const int64_t block_size = k_cache.shape[1];
  if (block_size < 1) return "k_cache.shape[1] (block_size) must be at least 1";
  if (num_blocks > INT32_MAX) return "k_cache.shape[0] (num_blocks) must fit in int32";
  if (k_cache.shape[2] != shape.kv_heads || k_cache.shape[3] != shape.head_dim) {
    return "k_cache " + describe_tensor(k_cache) + " must be [num_blocks, block_size, " +
           std::to_string(shape.kv_heads) + ", " + std::to_string(shape.head_dim) +
           "] (kv_heads and head_dim of the keys)";
  }
  if (!values_in_keys) {
    if (std::string problem = check("v_cache", v_cache, kFloatDtypes, 4, 4); !problem.empty())
      return problem;
    if (v_cache.shape[0] != num_blocks || v_cache.shape[1] != block_size ||
        v_cache.shape[2] != shape.kv_heads || v_cache.shape[3] != shape.head_dim_v) {
      return "v_cache " + describe_tensor(v_cache) + " must be [" + std::to_string(num_blocks) +
             ", " + std::to_string(block_size) + ", " + std::to_string(shape.kv_heads) + ", " +
             std::to_string(shape.head_dim_v) + "] (k_cache's blocks, the values' head dim)";
    }
  } else if (shape.head_dim_v > shape.head_dim) {
    return "with values_in_keys the values are the first head_dim_v dims of each key row: " +
           std::to_string(shape.head_dim_v) + " exceeds the key head dim " +
           std::to_string(shape.head_dim);
  }
  if (std::string problem = check_tensor("block_table", block_table, kI32Only, 2, 2);
      !problem.empty())
    return problem;
  if (block_table.shape[0] != shape.batch) {
    return "block_table " + describe_tensor(block_table) + " must have batch (" +
           std::to_string(shape.batch) + ") rows";
  }
  // Positions are i32 in every implementation.
  if (block_table.shape[1] > INT32_MAX / block_size) {
    return "block_table.shape[1] * block_size (the most tokens a sequence can hold) must fit in "
           "int32";
  }
  if (std::string problem = check_tensor("seq_lens", seq_lens, kI32Only, 1, 1); !problem.empty())
    return problem;
  return check_shape("seq_lens", seq_lens, {shape.batch});
}

hal_result_t describe_append(const hal_op_paged_kv_append_desc_t& desc, OpSignature* out,
                             std::string* message) {
  const bool values_in_keys = desc.values_in_keys == 1;
  if (reject(flag_problem("values_in_keys", desc.values_in_keys), message) ||
      reject(flag_problem("rope_interleaved", desc.rope_interleaved), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.reserved != 0) return invalid(message, "desc->reserved must be 0");
  if (reject(check_tensor("k_new", desc.k_new, kFloatDtypes, 4, 4), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  CacheShape shape;
  shape.batch = desc.k_new.shape[0];
  const int64_t s_new = desc.k_new.shape[1];
  shape.kv_heads = desc.k_new.shape[2];
  shape.head_dim = desc.k_new.shape[3];
  if (shape.kv_heads < 1 || shape.head_dim < 1) {
    return invalid(message, "k_new " + describe_tensor(desc.k_new) +
                                " must have at least one kv head and one dim per head");
  }
  if (shape.batch > INT32_MAX || s_new > INT32_MAX) {
    return invalid(message, "k_new's batch and s_new must fit in int32");
  }
  if (!values_in_keys) {
    if (reject(check_tensor("v_new", desc.v_new, kFloatDtypes, 4, 4), message))
      return HAL_ERROR_INVALID_ARGUMENT;
    shape.head_dim_v = desc.v_new.shape[3];
    if (desc.v_new.shape[0] != shape.batch || desc.v_new.shape[1] != s_new ||
        desc.v_new.shape[2] != shape.kv_heads || shape.head_dim_v < 1) {
      return invalid(message, "v_new " + describe_tensor(desc.v_new) + " must be [" +
                                  std::to_string(shape.batch) + ", " + std::to_string(s_new) +
                                  ", " + std::to_string(shape.kv_heads) +
                                  ", head_dim_v >= 1] (k_new's tokens and kv heads)");
    }
  }
  if (desc.rope_dim == 0) {
    if (desc.rope_offset != 0) return invalid(message, "desc->rope_offset must be 0 without rope");
  } else {
    if (desc.rope_dim % 2 != 0) {
      return invalid(message, "desc->rope_dim " + std::to_string(desc.rope_dim) + " must be even");
    }
    if (static_cast<int64_t>(desc.rope_offset) + desc.rope_dim > shape.head_dim) {
      return invalid(message, "desc->rope_offset + desc->rope_dim (" +
                                  std::to_string(desc.rope_offset) + " + " +
                                  std::to_string(desc.rope_dim) + ") exceeds the key head dim " +
                                  std::to_string(shape.head_dim));
    }
    if (reject(check_positive_normal_scalar("desc->rope_base", desc.rope_base,
                                            "the rotation's frequencies are its powers"),
               message))
      return HAL_ERROR_INVALID_ARGUMENT;
  }
  if (reject(check_cache(desc.k_cache, desc.v_cache, values_in_keys, desc.block_table,
                         desc.seq_lens, true, shape),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;

  add_operand(*out, "k_new", Role::kInput, desc.k_new);
  if (values_in_keys) {
    add_unused(*out, "v_new");
  } else {
    add_operand(*out, "v_new", Role::kInput, desc.v_new);
  }
  add_operand(*out, "block_table", Role::kInput, desc.block_table);
  add_operand(*out, "seq_lens", Role::kInput, desc.seq_lens);
  add_operand(*out, "k_cache", Role::kInOut, desc.k_cache);
  if (values_in_keys) {
    add_unused(*out, "v_cache");
  } else {
    add_operand(*out, "v_cache", Role::kInOut, desc.v_cache);
  }
  add_operand(*out, "status", Role::kInOut, vector_tensor(HAL_DTYPE_I32, 1));
  out->summary =
      "b=" + std::to_string(shape.batch) + " s_new=" + std::to_string(s_new) +
      " kv_h=" + std::to_string(shape.kv_heads) + " d=" + std::to_string(shape.head_dim) +
      (values_in_keys ? " values_in_keys" : " d_v=" + std::to_string(shape.head_dim_v)) +
      " blocks=" + std::to_string(desc.k_cache.shape[0]) + "x" +
      std::to_string(desc.k_cache.shape[1]) +
      (desc.rope_dim > 0
           ? " rope=" + std::to_string(desc.rope_dim) + "@" + std::to_string(desc.rope_offset)
           : std::string());
  return HAL_SUCCESS;
}

hal_result_t describe_attention(const hal_op_paged_attention_desc_t& desc, OpSignature* out,
                                std::string* message) {
  const bool values_in_keys = desc.values_in_keys == 1;
  if (reject(flag_problem("causal", desc.causal), message) ||
      reject(flag_problem("values_in_keys", desc.values_in_keys), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (reject(check_finite_scalar("desc->scale", desc.scale), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (desc.num_splits > 4096) {
    return invalid(message, "desc->num_splits " + std::to_string(desc.num_splits) +
                                " must be at most 4096 (0: the implementation chooses)");
  }
  if (reject(check_tensor("q", desc.q, kFloatDtypes, 4, 4), message) ||
      reject(check_tensor("k_cache", desc.k_cache, kFloatDtypes, 4, 4), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  CacheShape shape;
  shape.batch = desc.q.shape[0];
  const int64_t s_q = desc.q.shape[1];
  const int64_t heads = desc.q.shape[2];
  shape.head_dim = desc.q.shape[3];
  shape.kv_heads = desc.k_cache.shape[2];
  if (shape.head_dim < 1) return invalid(message, "q.shape[3] (head_dim) must be at least 1");
  if (heads < 1 || shape.kv_heads < 1 || heads % shape.kv_heads != 0) {
    return invalid(message, "q.shape[2] (heads, " + std::to_string(heads) +
                                ") must be a positive multiple of k_cache.shape[2] (kv_heads, " +
                                std::to_string(shape.kv_heads) + ")");
  }
  if (shape.batch > INT32_MAX || s_q > INT32_MAX || heads > INT32_MAX) {
    return invalid(message, "q's batch, s_q and heads must fit in int32");
  }
  if (reject(check_output("out", desc.out, kFloatDtypes, 4, 4), message))
    return HAL_ERROR_INVALID_ARGUMENT;
  shape.head_dim_v = desc.out.shape[3];
  if (desc.out.shape[0] != shape.batch || desc.out.shape[1] != s_q || desc.out.shape[2] != heads ||
      shape.head_dim_v < 1) {
    return invalid(message, "out " + describe_tensor(desc.out) + " must be [" +
                                std::to_string(shape.batch) + ", " + std::to_string(s_q) + ", " +
                                std::to_string(heads) + ", head_dim_v >= 1] (q's)");
  }
  if (reject(check_cache(desc.k_cache, desc.v_cache, values_in_keys, desc.block_table,
                         desc.seq_lens, false, shape),
             message))
    return HAL_ERROR_INVALID_ARGUMENT;
  if (reject(check_output("lse", desc.lse, kF32Only, 3, 3), message) ||
      reject(check_shape("lse", desc.lse, {shape.batch, heads, s_q}), message))
    return HAL_ERROR_INVALID_ARGUMENT;

  add_operand(*out, "q", Role::kInput, desc.q);
  add_operand(*out, "k_cache", Role::kInput, desc.k_cache);
  if (values_in_keys) {
    add_unused(*out, "v_cache");
  } else {
    add_operand(*out, "v_cache", Role::kInput, desc.v_cache);
  }
  add_operand(*out, "block_table", Role::kInput, desc.block_table);
  add_operand(*out, "seq_lens", Role::kInput, desc.seq_lens);
  add_operand(*out, "out", Role::kOutput, desc.out);
  add_operand(*out, "lse", Role::kOutput, desc.lse);
  add_operand(*out, "status", Role::kInOut, vector_tensor(HAL_DTYPE_I32, 1));
  out->summary = "b=" + std::to_string(shape.batch) + " s_q=" + std::to_string(s_q) +
                 " h=" + std::to_string(heads) + " kv_h=" + std::to_string(shape.kv_heads) +
                 " d=" + std::to_string(shape.head_dim) +
                 " d_v=" + std::to_string(shape.head_dim_v) +
                 (values_in_keys ? " values_in_keys" : "") +
                 " blocks=" + std::to_string(desc.k_cache.shape[0]) + "x" +
                 std::to_string(desc.k_cache.shape[1]) +
                 " max_blocks=" + std::to_string(desc.block_table.shape[1]) +
                 (desc.causal ? " causal" : "") + " splits=" + std::to_string(desc.num_splits);
  return HAL_SUCCESS;
}

}  // namespace

hal_result_t describe_paged_family(const hal_op_header_t* desc, OpSignature* out,
                                   std::string* message) {
  switch (desc->kind) {
    case HAL_OP_PAGED_KV_APPEND:
      return describe_append(*reinterpret_cast<const hal_op_paged_kv_append_desc_t*>(desc), out,
                             message);
    case HAL_OP_PAGED_ATTENTION:
      return describe_attention(*reinterpret_cast<const hal_op_paged_attention_desc_t*>(desc), out,
                                message);
    default:
      *message =
          std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
      return HAL_ERROR_UNSUPPORTED;
  }
}

}  // namespace hal::ops::definitions
