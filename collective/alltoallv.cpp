#include "hal_collective/alltoallv.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace hal::collective {

CallExtent alltoallv_extent(const hal_alltoallv_layout_t& layout, uint32_t ranks,
                            size_t elem) noexcept {
  CallExtent extent;
  for (uint32_t r = 0; r < ranks; ++r) {
    // An empty range reaches nothing, whatever its displacement.
    if (layout.send_counts[r] != 0) {
      extent.send_bytes =
          std::max(extent.send_bytes, (layout.send_displs[r] + layout.send_counts[r]) * elem);
    }
    if (layout.recv_counts[r] != 0) {
      extent.recv_bytes =
          std::max(extent.recv_bytes, (layout.recv_displs[r] + layout.recv_counts[r]) * elem);
    }
  }
  return extent;
}

bool resolve_alltoallv_side(const size_t* counts, const size_t* displs, uint32_t ranks, size_t elem,
                            std::vector<size_t>& out_counts, std::vector<size_t>& out_displs,
                            uint32_t& out_bad_rank) {
  out_counts.assign(counts, counts + ranks);
  out_displs.assign(ranks, 0);
  size_t packed = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    const size_t count = counts[r];
    const size_t displ = displs != nullptr ? displs[r] : packed;
    if (count == 0) continue;
    if (displ > SIZE_MAX - count || displ + count > SIZE_MAX / elem) {
      out_bad_rank = r;
      return false;
    }
    out_displs[r] = displ;
    packed = displ + count;
  }
  return true;
}

OwnedLayout::OwnedLayout(const hal_alltoallv_layout_t& layout, uint32_t ranks) {
  size_t* arrays = inline_;
  if (ranks > kInlineRanks) {
    heap_.resize(size_t{4} * ranks);
    arrays = heap_.data();
  }
  const size_t* sources[4] = {layout.send_counts, layout.send_displs, layout.recv_counts,
                              layout.recv_displs};
  for (size_t a = 0; a < 4; ++a) std::copy_n(sources[a], ranks, arrays + a * ranks);
  view_ = {layout.sendbuf, layout.recvbuf,     arrays,
           arrays + ranks, arrays + 2 * ranks, arrays + 3 * ranks};
}

OwnedCalls::OwnedCalls(std::span<const hal_collective_call_t> calls) {
  if (calls.size() == 1) {
    single_ = calls.front();
    count_ = 1;
    if (single_.kind == HAL_COLLECTIVE_ALLTOALLV) {
      single_layout_.emplace(layout_of(single_), static_cast<uint32_t>(single_.count));
      single_.send = single_layout_->view();
    }
    return;
  }
  many_.assign(calls.begin(), calls.end());
  const std::span<hal_collective_call_t> owned = this->calls();
  for (size_t i = 0; i < owned.size(); ++i) {
    if (owned[i].kind != HAL_COLLECTIVE_ALLTOALLV) continue;
    if (layouts_.empty()) layouts_.resize(owned.size());
    layouts_[i] =
        std::make_unique<OwnedLayout>(layout_of(owned[i]), static_cast<uint32_t>(owned[i].count));
    owned[i].send = layouts_[i]->view();
  }
}

OwnedLayout& OwnedCalls::layout(size_t index) {
  if (index == 0 && single_layout_) return *single_layout_;
  if (index >= layouts_.size() || layouts_[index] == nullptr) {
    throw std::out_of_range("OwnedCalls::layout: call " + std::to_string(index) +
                            " is not an alltoallv");
  }
  return *layouts_[index];
}

}  // namespace hal::collective
