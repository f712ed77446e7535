// Fused attention for the cpu plugin's native operators (native_ops.cpp
// plans it): FlashAttention's algorithm on the CPU. The forward walks key
// blocks with an online softmax, so the score matrix is never stored and
// memory stays linear in the sequence; the backward recomputes each block's
// probabilities from the saved log-sum-exp. Operands of f32 or bf16, any
// strides with a contiguous head dimension; arithmetic in f32 on packed
// blocks. Every sum runs in an order fixed by the shape, so results are the
// same run to run.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_ATTENTION_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_ATTENTION_HPP_

#include <cstdint>
#include <vector>

#include "hal/ops.h"
#include "native_kernels.hpp"

namespace hal::cpu::ops::native {

// A [batch, seq, heads, dim] tensor whose last dimension is contiguous:
// element (b, s, h, d) lies at data + b*stride[0] + s*stride[1] +
// h*stride[2] + d elements of |type|.
struct HeadsView {
  void* data;
  Type type;
  int64_t stride[3];
};

// The log-sum-exp tensor, f32 [batch, heads, s_q], any strides.
struct LseView {
  float* data;
  int64_t stride[3];
};

// Block sparsity as one byte per (sequence, head, query block, key block),
// nonzero where the block is computed (HAL_ATTENTION_BLOCK_MASK's layout;
// block indices are expanded to it per execution). block_k is a multiple of
// the packed key block, so a packed block lies in one sparse key block.
struct BlockVisibility {
  const uint8_t* mask = nullptr;  // nullptr: dense, every block computed
  int64_t block_q = 1, block_k = 1, q_blocks = 0, k_blocks = 0;

  // Whether query row |i| of (b, head) computes the key block holding |key|.
  // A block outside the tensor (varlen: a sequence longer than max_seqlen) is
  // not computed.
  bool sees(int64_t b, int64_t heads, int64_t head, int64_t i, int64_t key) const {
    if (mask == nullptr) return true;
    const int64_t qb = i / block_q, kb = key / block_k;
    return qb < q_blocks && kb < k_blocks &&
           mask[((b * heads + head) * q_blocks + qb) * k_blocks + kb] != 0;
  }
  // Whether any of query rows [row_begin, row_end) computes that key block.
  bool any_sees(int64_t b, int64_t heads, int64_t head, int64_t row_begin, int64_t row_end,
                int64_t key) const {
    if (mask == nullptr) return true;
    const int64_t kb = key / block_k;
    if (kb >= k_blocks) return false;
    for (int64_t qb = row_begin / block_q; qb * block_q < row_end && qb < q_blocks; ++qb) {
      if (mask[((b * heads + head) * q_blocks + qb) * k_blocks + kb] != 0) return true;
    }
    return false;
  }
};

// One attention call with its operands bound.
struct Attention {
  int64_t batch, s_q, s_k, heads, kv_heads, dim;
  float scale;  // resolved: never 0
  hal_causal_alignment_t causal;
  BlockVisibility blocks;  // causal and sparse combine: a key is seen when both allow
  // Varlen: the views start at one sequence's rows (s_q, s_k its lengths,
  // batch index 0) and |sequence| is its index in the sparsity tensor; -1
  // otherwise (the batch index is the sequence).
  int64_t sequence = -1;
  HeadsView q, k, v, out;
  LseView lse;
  HeadsView grad_out, grad_q, grad_k, grad_v;  // backward only
};

// Query rows per forward work item.
inline constexpr int64_t kAttentionRowsPerItem = 128;
// Keys per packed block; a sparse block_k must be a multiple of it.
inline constexpr int64_t kAttentionBlockKeys = 64;

// One worker's scratch (packed blocks and running sums), sized by prepare_*
// before the work items run so that they never allocate.
struct AttentionScratch {
  std::vector<float> rows, acc, max, sum, keys_t, values_t, keys, values, scores, grad_scores;
  std::vector<float> grad_rows, grad_q, delta, lse, grad_k, grad_v, probs_t, grad_scores_t, row;
};
// Size |scratch| for forward or backward items of |attention| (may throw
// std::bad_alloc; the items do not).
void prepare_forward(const Attention& attention, AttentionScratch& scratch);
void prepare_backward(const Attention& attention, AttentionScratch& scratch);

// out and lse of query rows [row_begin, row_end) (at most
// kAttentionRowsPerItem) of head |head| of sequence |b|.
void attention_forward(const Attention& attention, int64_t b, int64_t head, int64_t row_begin,
                       int64_t row_end, AttentionScratch& scratch);

// Where a backward item puts its query head's share of grad_k and grad_v:
// the operands themselves (grad_k null: a kv head with one query head), or
// f32 rows of its own, key row j at grad_k + j * row_stride (and grad_v),
// which reduce_grouped_kv then sums over the kv head's query heads.
struct KvPartials {
  float* grad_k = nullptr;
  float* grad_v = nullptr;
  int64_t row_stride = 0;  // floats from one key row to the next
};

// grad_q of query head |head| of sequence |b|, and that head's share of
// grad_k and grad_v of its kv head (into |partials|). One work item per
// query head: the item sums over every key in order, so no gradient is
// summed across threads.
void attention_backward(const Attention& attention, int64_t b, int64_t head,
                        const KvPartials& partials, AttentionScratch& scratch);

// grad_k and grad_v of key rows [row_begin, row_end) of kv head |kv_head| of
// sequence |b|: the partials of its query heads g = 0, 1, ... added in that
// order. |first_head| describes the partials of query head kv_head * group;
// those of head kv_head * group + g lie g * dim floats after them. |row| is
// scratch of dim floats.
void reduce_grouped_kv(const Attention& attention, int64_t b, int64_t kv_head, int64_t row_begin,
                       int64_t row_end, const KvPartials& first_head, float* row);

// Varlen: |attention| seen as its sequence |sequence| alone, whose query
// rows are [q_begin, q_begin + q_len) and key rows [k_begin, k_begin + k_len)
// of the packed tensors (batch index 0 of the views).
Attention sequence_view(const Attention& attention, int64_t sequence, int64_t q_begin,
                        int64_t q_len, int64_t k_begin, int64_t k_len);
// Varlen: query rows [row_begin, row_end) outside every sequence get out 0
// and lse -inf (forward) or grad_q 0 (backward); key rows outside every
// sequence get grad_k = grad_v = 0.
void clear_query_rows(const Attention& attention, bool backward, int64_t row_begin,
                      int64_t row_end);
void clear_key_rows(const Attention& attention, int64_t row_begin, int64_t row_end);

}  // namespace hal::cpu::ops::native

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_ATTENTION_HPP_
