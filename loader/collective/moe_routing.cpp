#include "moe_routing.hpp"

#include <cstdio>

namespace hal::loader::moe {

namespace {

std::string format(const char* fmt, auto... args) {
  char text[256];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

const int64_t* block_of(const std::vector<int64_t>& blocks, uint32_t rank, uint32_t num_experts) {
  return blocks.data() + size_t{rank} * block_words(num_experts);
}

}  // namespace

std::vector<int64_t> local_block(const int32_t* indices, size_t num_tokens, uint32_t top_k,
                                 uint32_t num_experts, size_t recv_capacity) {
  std::vector<int64_t> block(block_words(num_experts), 0);
  block[kTag] = kBlockTag;
  block[kNumExperts] = num_experts;
  block[kTopK] = top_k;
  block[kRecvCapacity] =
      static_cast<int64_t>(recv_capacity > INT64_MAX ? INT64_MAX : recv_capacity);
  block[kBadToken] = -1;
  const size_t pairs = num_tokens * top_k;
  for (size_t p = 0; p < pairs; ++p) {
    const int32_t expert = indices[p];
    if (expert < 0 || static_cast<uint32_t>(expert) >= num_experts) {
      block[kBadToken] = static_cast<int64_t>(p);
      block[kBadExpert] = expert;
      // A rank with a bad index sends nothing: no rank makes the routing.
      for (uint32_t e = 0; e < num_experts; ++e) block[kHeaderWords + e] = 0;
      return block;
    }
    ++block[kHeaderWords + static_cast<uint32_t>(expert)];
  }
  return block;
}

hal::Status judge(const std::vector<int64_t>& blocks, uint32_t ranks, uint32_t num_experts,
                  uint32_t top_k) {
  for (uint32_t r = 0; r < ranks; ++r) {
    const int64_t* block = block_of(blocks, r, num_experts);
    if (block[kTag] != kBlockTag || block[kNumExperts] != num_experts || block[kTopK] != top_k) {
      return {HAL_ERROR_ARGUMENT_MISMATCH,
              format("the ranks disagree: this rank has %u experts and top_k %u, rank %u has "
                     "%lld experts and top_k %lld",
                     num_experts, top_k, r, static_cast<long long>(block[kNumExperts]),
                     static_cast<long long>(block[kTopK]))};
    }
  }
  for (uint32_t r = 0; r < ranks; ++r) {
    const int64_t* block = block_of(blocks, r, num_experts);
    if (block[kBadToken] >= 0) {
      return {HAL_ERROR_INVALID_ARGUMENT,
              format("rank %u: token %lld slot %lld has expert index %lld, outside [0, %u)", r,
                     static_cast<long long>(block[kBadToken] / top_k),
                     static_cast<long long>(block[kBadToken] % top_k),
                     static_cast<long long>(block[kBadExpert]), num_experts)};
    }
  }
  const uint32_t local = num_experts / ranks;
  for (uint32_t to = 0; to < ranks; ++to) {
    int64_t rows = 0;
    for (uint32_t from = 0; from < ranks; ++from) {
      const int64_t* block = block_of(blocks, from, num_experts);
      for (uint32_t l = 0; l < local; ++l) rows += block[kHeaderWords + to * local + l];
    }
    const int64_t capacity = block_of(blocks, to, num_experts)[kRecvCapacity];
    if (rows > capacity) {
      return {HAL_ERROR_OUT_OF_BOUNDS,
              format("rank %u would receive %lld rows, more than its recv_capacity of %lld", to,
                     static_cast<long long>(rows), static_cast<long long>(capacity))};
    }
    if (rows > INT32_MAX) {
      return {HAL_ERROR_INVALID_ARGUMENT,
              format("rank %u would receive %lld rows, more than 2^31 - 1", to,
                     static_cast<long long>(rows))};
    }
  }
  return {};
}

Layout make_layout(const int32_t* indices, size_t num_tokens, uint32_t top_k, uint32_t num_experts,
                   const std::vector<int64_t>& blocks, uint32_t rank, uint32_t ranks) {
  Layout layout;
  const uint32_t local = num_experts / ranks;
  const int64_t* mine = block_of(blocks, rank, num_experts);
  // Send order: a stable counting sort of the pairs by expert.
  std::vector<size_t> cursor(num_experts + 1, 0);
  for (uint32_t e = 0; e < num_experts; ++e)
    cursor[e + 1] = cursor[e] + static_cast<size_t>(mine[kHeaderWords + e]);
  const size_t pairs = num_tokens * top_k;
  layout.send_token.resize(pairs);
  layout.send_pair.resize(pairs);
  for (size_t p = 0; p < pairs; ++p) {
    const size_t at = cursor[static_cast<uint32_t>(indices[p])]++;
    layout.send_token[at] = static_cast<int32_t>(p / top_k);
    layout.send_pair[at] = static_cast<int32_t>(p);
  }
  layout.send_rows.assign(ranks, 0);
  for (uint32_t e = 0; e < num_experts; ++e)
    layout.send_rows[e / local] += static_cast<size_t>(mine[kHeaderWords + e]);
  // Receive side: counts[from][l] rows of local expert l from rank |from|.
  const uint32_t first = rank * local;
  auto count = [&](uint32_t from, uint32_t l) {
    return static_cast<size_t>(block_of(blocks, from, num_experts)[kHeaderWords + first + l]);
  };
  layout.recv_rows.assign(ranks, 0);
  layout.expert_counts.assign(local, 0);
  for (uint32_t from = 0; from < ranks; ++from) {
    for (uint32_t l = 0; l < local; ++l) {
      layout.recv_rows[from] += count(from, l);
      layout.expert_counts[l] += count(from, l);
    }
  }
  layout.offsets.assign(local + 1, 0);
  for (uint32_t l = 0; l < local; ++l)
    layout.offsets[l + 1] = layout.offsets[l] + static_cast<int32_t>(layout.expert_counts[l]);
  const size_t received = static_cast<size_t>(layout.offsets[local]);
  layout.from_staged.resize(received);
  layout.to_staged.resize(received);
  std::vector<size_t> grouped_cursor(layout.offsets.begin(), layout.offsets.end() - 1);
  size_t staged = 0;
  for (uint32_t from = 0; from < ranks; ++from) {
    for (uint32_t l = 0; l < local; ++l) {
      for (size_t i = 0; i < count(from, l); ++i, ++staged) {
        const size_t grouped = grouped_cursor[l]++;
        layout.from_staged[grouped] = static_cast<int32_t>(staged);
        layout.to_staged[staged] = static_cast<int32_t>(grouped);
      }
    }
  }
  return layout;
}

}  // namespace hal::loader::moe
