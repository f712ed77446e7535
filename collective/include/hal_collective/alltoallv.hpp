// hal_alltoallv as the host engines see it: the layout behind an
// HAL_COLLECTIVE_ALLTOALLV call (plugin_v1.h), the owned copy that a queued
// call keeps, and the rule that the ranks' counts agree.
#pragma once

#include "hal_collective/status.hpp"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hal::collective {

inline const hal_alltoallv_layout_t& layout_of(const hal_collective_call_t& call) noexcept {
  return *static_cast<const hal_alltoallv_layout_t*>(call.send);
}

// The bytes a layout of |ranks| entries spans in its send and receive
// buffers: the furthest displacement plus count, times |elem|. The loader
// checked that none of it overflows.
CallExtent alltoallv_extent(const hal_alltoallv_layout_t& layout, uint32_t ranks,
                            size_t elem) noexcept;

// One side of a caller's layout resolved: packed displacements (the
// exclusive prefix sums) where |displs| is NULL, 0 for an empty block (its
// displacement reaches nothing). False, with the rank in |out_bad_rank|,
// when a block's end in bytes would overflow.
bool resolve_alltoallv_side(const size_t* counts, const size_t* displs, uint32_t ranks, size_t elem,
                            std::vector<size_t>& out_counts, std::vector<size_t>& out_displs,
                            uint32_t& out_bad_rank);

// A layout with its four arrays in storage of its own: inside the object up
// to kInlineRanks ranks (a queued alltoallv of a small job makes no
// allocation for them), on the heap beyond.
class OwnedLayout {
 public:
  OwnedLayout(const hal_alltoallv_layout_t& layout, uint32_t ranks);
  OwnedLayout(const OwnedLayout&) = delete;
  OwnedLayout& operator=(const OwnedLayout&) = delete;
  const hal_alltoallv_layout_t* view() const { return &view_; }
  // Points the layout at other buffers (the loader's host staging).
  void rebase(const void* sendbuf, void* recvbuf) {
    view_.sendbuf = sendbuf;
    view_.recvbuf = recvbuf;
  }

 private:
  static constexpr uint32_t kInlineRanks = 8;
  size_t inline_[4 * kInlineRanks];
  std::vector<size_t> heap_;
  hal_alltoallv_layout_t view_{};
};

// A batch of calls that keeps what they point to beyond the call that gave
// them: a copy of every alltoallv layout, the calls repointed at the copies.
class OwnedCalls {
 public:
  OwnedCalls() = default;
  explicit OwnedCalls(std::span<const hal_collective_call_t> calls);
  OwnedCalls(const OwnedCalls&) = delete;  // the calls point into the layouts held here
  OwnedCalls& operator=(const OwnedCalls&) = delete;
  std::span<const hal_collective_call_t> calls() const {
    return many_.empty() ? std::span(&single_, count_) : std::span(many_);
  }
  std::span<hal_collective_call_t> calls() {
    return many_.empty() ? std::span(&single_, count_) : std::span(many_);
  }
  // The owned layout of calls()[index], which must be an alltoallv.
  OwnedLayout& layout(size_t index);

 private:
  // One call, the common case (a small allreduce's whole cost is a few
  // hundred nanoseconds), is held without an allocation; several in many_.
  hal_collective_call_t single_{};
  size_t count_ = 0;  // of single_: 0 or 1
  std::vector<hal_collective_call_t> many_;
  // The layout of single_ when it is an alltoallv (no allocation: every
  // MoE step queues one).
  std::optional<OwnedLayout> single_layout_;
  // Of many_: empty unless a call is an alltoallv; then one per call, null
  // for others.
  std::vector<std::unique_ptr<OwnedLayout>> layouts_;
};

// Every rank's receive count from each peer must equal what that peer sends
// it. |sent(from, to)| and |expected(at, from)| read the ranks' counts; the
// failure names the first pair that disagrees. Each rank that runs this over
// the same counts reaches the same verdict.
template <class Sent, class Expected>
Status check_alltoallv_counts(uint32_t ranks, Sent sent, Expected expected) {
  for (uint32_t to = 0; to < ranks; ++to) {
    for (uint32_t from = 0; from < ranks; ++from) {
      const size_t sends = sent(from, to);
      const size_t receives = expected(to, from);
      if (sends == receives) continue;
      return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                             "alltoallv: rank " + std::to_string(from) + " sends " +
                                 std::to_string(sends) + " elements to rank " + std::to_string(to) +
                                 ", which expects " + std::to_string(receives));
    }
  }
  return {};
}

}  // namespace hal::collective
