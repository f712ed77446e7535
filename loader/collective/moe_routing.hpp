// The host side of an MoE routing (hal/moe.h): what each rank tells the
// others, the verdict every rank reaches alike from what they all told, and
// the permutations dispatch and combine run on the device. Pure functions
// of host data, so that every rank computes the same answer from the same
// exchanged blocks.
#pragma once

#include <hal/result.h>

#include "hal_util/status.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hal::loader::moe {

// One rank's block of the count exchange (int64 words): a header, then the
// rows it sends to each global expert. Every rank gathers every block.
enum BlockWord : size_t {
  kTag = 0,       // kBlockTag: a block of this format
  kNumExperts,    // the rank's num_experts
  kTopK,          // the rank's top_k
  kRecvCapacity,  // the rows the rank can receive
  kBadToken,      // the first (token * top_k + slot) whose index is out of range, or -1
  kBadExpert,     //   and that index
  kHeaderWords,   // the per-expert counts start here
};
inline constexpr int64_t kBlockTag = 0x4d6f4531;  // "MoE1"

inline size_t block_words(uint32_t num_experts) {
  return kHeaderWords + num_experts;
}

// This rank's block from its indices (num_tokens * top_k of them).
std::vector<int64_t> local_block(const int32_t* indices, size_t num_tokens, uint32_t top_k,
                                 uint32_t num_experts, size_t recv_capacity);

// What every rank concludes from the gathered blocks (|blocks| holds
// |ranks| blocks of block_words(num_experts)): that they disagree on the
// expert count or top_k (ARGUMENT_MISMATCH), that some rank has an index out
// of range (INVALID_ARGUMENT), that some rank would receive more than its
// capacity (OUT_OF_BOUNDS), or that the routing can be made.
hal::Status judge(const std::vector<int64_t>& blocks, uint32_t ranks, uint32_t num_experts,
                  uint32_t top_k);

// Where every row goes. Row counts are below 2^31 (checked by the caller),
// so the permutations are i32, as HAL_OP_EMBEDDING's ids.
struct Layout {
  std::vector<int32_t> send_token;    // [S] the token of send row i
  std::vector<int32_t> send_pair;     // [S] its (token * top_k + slot)
  std::vector<size_t> send_rows;      // [ranks] rows sent to each rank, packed in rank order
  std::vector<size_t> recv_rows;      // [ranks] rows received from each rank, packed
  std::vector<int32_t> from_staged;   // [R] grouped row g = staged row from_staged[g]
  std::vector<int32_t> to_staged;     // [R] staged row s = grouped row to_staged[s]
  std::vector<int32_t> offsets;       // [local experts + 1] of the grouped layout
  std::vector<size_t> expert_counts;  // [local experts]
};

// The layout of rank |rank| from its indices and the gathered blocks (after
// judge() passed). Send rows are ordered by global expert, then by pair;
// staged rows (as alltoallv lands them) by source rank, then local expert;
// grouped rows by local expert, then source rank.
Layout make_layout(const int32_t* indices, size_t num_tokens, uint32_t top_k, uint32_t num_experts,
                   const std::vector<int64_t>& blocks, uint32_t rank, uint32_t ranks);

}  // namespace hal::loader::moe
