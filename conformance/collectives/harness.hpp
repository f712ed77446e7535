// Runs one collective case over ranks this process drives: device buffers
// per rank, seeded inputs, every rank's call (in one group, as a single
// thread driving several ranks must), then the check against the reference.
#pragma once

#include "reference.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <sstream>

namespace coll_test {

struct Rank {
  hal_comm_t comm = nullptr;
  hal_stream_t stream = nullptr;
  hal_device_t device = nullptr;
  uint32_t rank = 0;
};

struct Case {
  Kind kind;
  hal_dtype_t dtype;
  hal_reduce_op_t op;
  size_t count;
  uint32_t root;
  bool in_place;
  uint64_t seed;
  std::string label() const {
    std::ostringstream out;
    out << kind_label(kind) << " " << dtype_name(dtype);
    if (reduces(kind)) out << " " << op_name(op);
    out << " count=" << count << " root=" << root << (in_place ? " in-place" : " out-of-place");
    return out.str();
  }
};

// A device allocation freed on scope exit.
class Buffer {
 public:
  Buffer(hal_device_t device, size_t bytes) {
    if (bytes != 0 && hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &ptr_) != HAL_SUCCESS) {
      ptr_ = nullptr;
    }
  }
  ~Buffer() { hal_mem_free(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// Runs |c| on |ranks| (all ranks of a communicator of |n|, or this process's
// one rank of it), returns "" or the first difference. |all_inputs| has
// every rank's inputs (each process regenerates them from the seed).
inline std::string run_case(const Case& c, std::vector<Rank>& ranks, uint32_t n) {
  const size_t elem = elem_size(c.dtype);
  const Shape shape = shape_of(c.kind, c.count, n);
  std::vector<std::vector<double>> in(n);
  for (uint32_t r = 0; r < n; ++r) in[r] = inputs(c.seed, r, shape.send, c.dtype);
  std::vector<std::unique_ptr<Buffer>> sends;
  std::vector<std::unique_ptr<Buffer>> recvs;
  for (Rank& rank : ranks) {
    const size_t send_bytes = shape.send * elem;
    // In place: one buffer, the input where the call reads it.
    const size_t recv_bytes =
        c.in_place ? std::max(shape.recv, shape.send) * elem : shape.recv * elem;
    recvs.push_back(std::make_unique<Buffer>(rank.device, recv_bytes));
    sends.push_back(std::make_unique<Buffer>(rank.device, c.in_place ? 0 : send_bytes));
    std::vector<uint8_t> host(std::max(send_bytes, recv_bytes), kUntouchedByte);
    for (size_t i = 0; i < shape.send; ++i) store(c.dtype, host.data(), i, in[rank.rank][i]);
    void* target = c.in_place ? recvs.back()->get() : sends.back()->get();
    if (c.in_place && c.kind == Kind::kAllgather) {
      // In place by offset: the input sits at the rank's block of the output.
      std::vector<uint8_t> shifted(recv_bytes, kUntouchedByte);
      std::memcpy(shifted.data() + rank.rank * send_bytes, host.data(), send_bytes);
      host = shifted;
    }
    if (send_bytes != 0 || recv_bytes != 0) {
      hal_memcpy_async(target, host.data(), c.in_place ? recv_bytes : send_bytes, rank.stream);
    }
    if (!c.in_place && recv_bytes != 0) {
      hal_memset_async(recvs.back()->get(), kUntouchedByte, recv_bytes, rank.stream);
    }
    if (hal_stream_synchronize(rank.stream) != HAL_SUCCESS) return "staging the inputs failed";
  }
  hal_group_start();
  for (size_t i = 0; i < ranks.size(); ++i) {
    Rank& rank = ranks[i];
    void* recv = recvs[i]->get();
    const void* send = sends[i]->get();
    if (c.in_place) {
      send = c.kind == Kind::kAllgather
                 ? static_cast<uint8_t*>(recv) + rank.rank * shape.send * elem
                 : recv;
    }
    const hal_result_t r = issue(c.kind, send, recv, c.count, c.dtype, c.op, c.root, rank.rank, n,
                                 rank.comm, rank.stream);
    if (r != HAL_SUCCESS) {
      hal_group_end();
      return std::string("rank ") + std::to_string(rank.rank) + " issue: " + hal_result_string(r) +
             " " + hal_error_last_message();
    }
  }
  if (hal_result_t r = hal_group_end(); r != HAL_SUCCESS) {
    return std::string("group end: ") + hal_result_string(r) + " " + hal_error_last_message();
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    Rank& rank = ranks[i];
    if (hal_result_t r = hal_stream_synchronize(rank.stream); r != HAL_SUCCESS) {
      return std::string("rank ") + std::to_string(rank.rank) + " sync: " + hal_result_string(r) +
             " " + hal_error_last_message();
    }
    const std::vector<double> want =
        expected(c.kind, c.op, c.dtype, c.count, c.root, rank.rank, in);
    if (want.empty()) {
      // A reduce's receive buffer off the root is not written (SPEC.md §13.2):
      // it must still hold what it held, the fill or (in place) the input.
      if (c.kind == Kind::kReduce && rank.rank != c.root && c.count > 0) {
        std::vector<uint8_t> untouched(c.count * elem, kUntouchedByte);
        if (c.in_place) {
          for (size_t e = 0; e < c.count; ++e)
            store(c.dtype, untouched.data(), e, in[rank.rank][e]);
        }
        std::vector<uint8_t> got(untouched.size());
        hal_memcpy_async(got.data(), recvs[i]->get(), got.size(), rank.stream);
        hal_stream_synchronize(rank.stream);
        for (size_t b = 0; b < got.size(); ++b) {
          if (got[b] != untouched[b]) {
            char value[8];
            std::snprintf(value, sizeof(value), "0x%02x", got[b]);
            return "rank " + std::to_string(rank.rank) + " (not the root " +
                   std::to_string(c.root) + "): byte " + std::to_string(b) +
                   " of its receive buffer was written (" + value + ", the fill was 0xa5), but a " +
                   "reduce writes the root's only";
          }
        }
      }
      continue;
    }
    std::vector<uint8_t> got(want.size() * elem);
    if (!got.empty()) {
      hal_memcpy_async(got.data(), recvs[i]->get(), got.size(), rank.stream);
      hal_stream_synchronize(rank.stream);
    }
    for (size_t e = 0; e < want.size(); ++e) {
      const double value = load(c.dtype, got.data(), e);
      if (!close_enough(c.dtype, value, want[e])) {
        return "rank " + std::to_string(rank.rank) + " element " + std::to_string(e) +
               element_origin(c.kind, c.count, rank.rank, n, e) + ": got " + std::to_string(value) +
               ", want " + std::to_string(want[e]);
      }
    }
  }
  return {};
}

// Every case of the matrix for |n| ranks: each kind, dtype, op (reductions),
// count; allreduce, broadcast and allgather also in place. |counts| defaults
// to kCounts; |kinds| to every kind.
inline std::vector<Case> matrix(uint32_t n, uint64_t seed,
                                const std::vector<size_t>& counts = {std::begin(kCounts),
                                                                     std::end(kCounts)},
                                const std::vector<Kind>& kinds = {std::begin(kKinds),
                                                                  std::end(kKinds)}) {
  std::vector<Case> cases;
  for (Kind k : kinds) {
    for (hal_dtype_t d : kDtypes) {
      for (size_t count : counts) {
        const uint32_t root = static_cast<uint32_t>(count % n);
        if (reduces(k)) {
          for (hal_reduce_op_t op : kOps) cases.push_back({k, d, op, count, root, false, seed++});
        } else {
          cases.push_back({k, d, HAL_REDUCE_SUM, count, root, false, seed++});
        }
        const bool in_place_kind =
            k == Kind::kAllreduce || k == Kind::kBroadcast || k == Kind::kAllgather;
        if (in_place_kind && count > 1) {
          cases.push_back({k, d, HAL_REDUCE_SUM, count, root, true, seed++});
        }
      }
    }
  }
  return cases;
}

}  // namespace coll_test
