#include "hal_collective/p2p.hpp"

#include "hal_collective/alltoallv.hpp"
#include "hal_collective/bytes.hpp"
#include "hal_collective/reduce.hpp"

#include <algorithm>
#include <cstring>

namespace hal::collective {

namespace {

uint8_t* at(void* base, size_t offset) {
  return static_cast<uint8_t*>(base) + offset;
}
const uint8_t* at(const void* base, size_t offset) {
  return static_cast<const uint8_t*>(base) + offset;
}
uint32_t wrap(int64_t value, uint32_t n) {
  return static_cast<uint32_t>(((value % n) + n) % n);
}

class Runner {
 public:
  Runner(Transport& transport, const Deadline& deadline, std::vector<uint8_t>& scratch)
      : t_(transport), deadline_(deadline), scratch_(scratch) {}

  // |path|: direct or ring, as the chooser decided (it refused the kinds a
  // path has no algorithm for).
  Status run(const hal_collective_call_t& call, Path path, bool counts_checked) {
    tag_ = call_signature(call) & 0x7fffu;
    elem_ = dtype_size(call.dtype);
    switch (call.kind) {
      case HAL_COLLECTIVE_ALLREDUCE:
        return path == Path::kRing ? allreduce_ring(call) : allreduce_direct(call);
      case HAL_COLLECTIVE_REDUCE_SCATTER:
        return reduce_scatter(call);
      case HAL_COLLECTIVE_ALLGATHER:
        return allgather(call);
      case HAL_COLLECTIVE_BROADCAST:
        return broadcast(call);
      case HAL_COLLECTIVE_REDUCE:
        return reduce(call);
      case HAL_COLLECTIVE_ALLTOALL:
        return alltoall(call);
      case HAL_COLLECTIVE_ALLTOALLV:
        return counts_checked ? alltoallv_blocks(call) : alltoallv(call);
      default:
        return {};
    }
  }

 private:
  uint32_t me() const { return t_.rank(); }
  uint32_t n() const { return t_.ranks(); }

  uint8_t* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  Status exchange(uint32_t to, const void* send, size_t send_bytes, uint32_t from, void* recv,
                  size_t recv_bytes) {
    if (Status s = t_.post_send(to, send, send_bytes, tag_, Channel::kCollective); !s.ok())
      return s;
    if (Status s = t_.post_recv(from, recv, recv_bytes, tag_, Channel::kCollective); !s.ok()) {
      return s;
    }
    return t_.wait_all(deadline_);
  }

  // Every rank sends its whole buffer to every other and reduces all of them
  // in rank order, so every rank computes identical bytes.
  Status gather_and_reduce(const hal_collective_call_t& call, void* out, bool everyone) {
    const size_t bytes = call.count * elem_;
    uint8_t* slots = scratch(bytes * n());
    std::memcpy(slots + me() * bytes, call.send, bytes);
    for (uint32_t r = 0; r < n(); ++r) {
      if (r == me()) continue;
      // allreduce: everyone to everyone; reduce: everyone to the root.
      const bool to_peer = everyone || r == call.peer;
      const bool from_peer = everyone || me() == call.peer;
      if (to_peer) {
        if (Status s = t_.post_send(r, call.send, bytes, tag_, Channel::kCollective); !s.ok()) {
          return s;
        }
      }
      if (from_peer) {
        if (Status s = t_.post_recv(r, slots + r * bytes, bytes, tag_, Channel::kCollective);
            !s.ok()) {
          return s;
        }
      }
    }
    if (Status s = t_.wait_all(deadline_); !s.ok()) return s;
    if (out == nullptr) return {};
    if (n() == 1) {
      copy_block(out, slots, bytes);
    } else {
      reduce_pair(out, slots, slots + bytes, call.count, call.dtype, call.op);
      for (uint32_t r = 2; r < n(); ++r) {
        reduce_pair(out, out, slots + r * bytes, call.count, call.dtype, call.op);
      }
    }
    if (call.op == HAL_REDUCE_AVG) finish_average(out, call.count, call.dtype, n());
    return {};
  }

  Status allreduce_direct(const hal_collective_call_t& call) {
    return gather_and_reduce(call, call.recv, true);
  }

  Status reduce(const hal_collective_call_t& call) {
    return gather_and_reduce(call, me() == call.peer ? call.recv : nullptr, false);
  }

  // Ring: reduce-scatter, then all-gather, over n segments of the buffer.
  Status allreduce_ring(const hal_collective_call_t& call) {
    const uint32_t ranks = n();
    const size_t per = (call.count + ranks - 1) / ranks;
    auto begin = [&](uint32_t seg) { return std::min<size_t>(call.count, per * seg) * elem_; };
    auto length = [&](uint32_t seg) { return begin(seg + 1) - begin(seg); };
    const uint32_t right = wrap(me() + 1, ranks);
    const uint32_t left = wrap(int64_t{me()} - 1, ranks);
    uint8_t* incoming = scratch(per * elem_);
    for (uint32_t step = 0; step + 1 < ranks; ++step) {
      const uint32_t out_seg = wrap(int64_t{me()} - step, ranks);
      const uint32_t in_seg = wrap(int64_t{me()} - step - 1, ranks);
      // Step 0 sends our own contribution; later steps the partial sums.
      const void* source =
          step == 0 ? at(call.send, begin(out_seg)) : at(call.recv, begin(out_seg));
      if (Status s = exchange(right, source, length(out_seg), left, incoming, length(in_seg));
          !s.ok()) {
        return s;
      }
      reduce_pair(at(call.recv, begin(in_seg)), at(call.send, begin(in_seg)), incoming,
                  length(in_seg) / elem_, call.dtype, call.op);
    }
    const uint32_t owned = wrap(me() + 1, ranks);
    if (call.op == HAL_REDUCE_AVG) {
      finish_average(at(call.recv, begin(owned)), length(owned) / elem_, call.dtype, ranks);
    }
    for (uint32_t step = 0; step + 1 < ranks; ++step) {
      const uint32_t out_seg = wrap(int64_t{me()} + 1 - step, ranks);
      const uint32_t in_seg = wrap(int64_t{me()} - step, ranks);
      if (Status s = exchange(right, at(call.recv, begin(out_seg)), length(out_seg), left,
                              at(call.recv, begin(in_seg)), length(in_seg));
          !s.ok()) {
        return s;
      }
    }
    return {};
  }

  // Ring over the blocks; rank r ends with block r. Partial sums alternate
  // between two scratch halves: one is on the wire while the other fills.
  Status reduce_scatter(const hal_collective_call_t& call) {
    const uint32_t ranks = n();
    const size_t block = call.count * elem_;
    if (ranks == 1) {
      copy_block(call.recv, call.send, block);
      return {};
    }
    uint8_t* space = scratch(block * 3);
    uint8_t* incoming = space;
    uint8_t* partial[2] = {space + block, space + 2 * block};
    const uint32_t right = wrap(me() + 1, ranks);
    const uint32_t left = wrap(int64_t{me()} - 1, ranks);
    for (uint32_t step = 0; step + 1 < ranks; ++step) {
      const uint32_t out_block = wrap(int64_t{me()} - step - 1, ranks);
      const uint32_t in_block = wrap(int64_t{me()} - step - 2, ranks);
      const void* source = step == 0 ? at(call.send, out_block * block) : partial[step & 1];
      if (Status s = exchange(right, source, block, left, incoming, block); !s.ok()) return s;
      void* target = step + 2 == ranks ? call.recv : partial[(step + 1) & 1];
      reduce_pair(target, at(call.send, in_block * block), incoming, call.count, call.dtype,
                  call.op);
    }
    if (call.op == HAL_REDUCE_AVG) finish_average(call.recv, call.count, call.dtype, ranks);
    return {};
  }

  Status allgather(const hal_collective_call_t& call) {
    const uint32_t ranks = n();
    const size_t block = call.count * elem_;
    copy_block(at(call.recv, me() * block), call.send, block);
    const uint32_t right = wrap(me() + 1, ranks);
    const uint32_t left = wrap(int64_t{me()} - 1, ranks);
    for (uint32_t step = 0; step + 1 < ranks; ++step) {
      const uint32_t out_block = wrap(int64_t{me()} - step, ranks);
      const uint32_t in_block = wrap(int64_t{me()} - step - 1, ranks);
      if (Status s = exchange(right, at(call.recv, out_block * block), block, left,
                              at(call.recv, in_block * block), block);
          !s.ok()) {
        return s;
      }
    }
    return {};
  }

  Status broadcast(const hal_collective_call_t& call) {
    const size_t bytes = call.count * elem_;
    if (me() == call.peer) {
      for (uint32_t r = 0; r < n(); ++r) {
        if (r == me()) continue;
        if (Status s = t_.post_send(r, call.send, bytes, tag_, Channel::kCollective); !s.ok()) {
          return s;
        }
      }
      copy_block(call.recv, call.send, bytes);
    } else if (Status s = t_.post_recv(call.peer, call.recv, bytes, tag_, Channel::kCollective);
               !s.ok()) {
      return s;
    }
    return t_.wait_all(deadline_);
  }

  Status alltoall(const hal_collective_call_t& call) {
    const size_t block = call.count * elem_;
    copy_block(at(call.recv, me() * block), at(call.send, me() * block), block);
    for (uint32_t step = 1; step < n(); ++step) {
      const uint32_t to = wrap(me() + step, n());
      const uint32_t from = wrap(int64_t{me()} - step, n());
      if (Status s = t_.post_send(to, at(call.send, to * block), block, tag_, Channel::kCollective);
          !s.ok()) {
        return s;
      }
      if (Status s =
              t_.post_recv(from, at(call.recv, from * block), block, tag_, Channel::kCollective);
          !s.ok()) {
        return s;
      }
    }
    return t_.wait_all(deadline_);
  }

  // The counts travel first: each rank sends its send and receive rows to
  // every other, so every rank checks the same matrix and reaches the same
  // verdict before any data moves. Then a pairwise exchange as in alltoall.
  Status alltoallv(const hal_collective_call_t& call) {
    const hal_alltoallv_layout_t& mine = layout_of(call);
    const uint32_t ranks = n();
    const size_t row = size_t{2} * ranks;  // send counts, then receive counts
    // In the scratch (no allocation per call; the blocks do not use it).
    auto* rows = reinterpret_cast<uint64_t*>(scratch(row * ranks * sizeof(uint64_t)));
    uint64_t* own = rows + me() * row;
    for (uint32_t r = 0; r < ranks; ++r) {
      own[r] = mine.send_counts[r];
      own[ranks + r] = mine.recv_counts[r];
    }
    for (uint32_t r = 0; r < ranks; ++r) {
      if (r == me()) continue;
      if (Status s = t_.post_send(r, own, row * sizeof(uint64_t), tag_, Channel::kCollective);
          !s.ok()) {
        return s;
      }
      if (Status s =
              t_.post_recv(r, rows + r * row, row * sizeof(uint64_t), tag_, Channel::kCollective);
          !s.ok()) {
        return s;
      }
    }
    if (Status s = t_.wait_all(deadline_); !s.ok()) return s;
    if (Status verdict = check_alltoallv_counts(
            ranks, [&](uint32_t from, uint32_t to) { return rows[from * row + to]; },
            [&](uint32_t at, uint32_t from) { return rows[at * row + ranks + from]; });
        !verdict.ok()) {
      return verdict;
    }
    return alltoallv_blocks(call);
  }

  // The blocks of an alltoallv whose counts every rank has checked.
  Status alltoallv_blocks(const hal_collective_call_t& call) {
    const hal_alltoallv_layout_t& mine = layout_of(call);
    const uint32_t ranks = n();
    auto sent = [&](uint32_t r) { return at(mine.sendbuf, mine.send_displs[r] * elem_); };
    auto landing = [&](uint32_t r) { return at(mine.recvbuf, mine.recv_displs[r] * elem_); };
    copy_block(landing(me()), sent(me()), mine.recv_counts[me()] * elem_);
    for (uint32_t step = 1; step < ranks; ++step) {
      const uint32_t to = wrap(me() + step, ranks);
      const uint32_t from = wrap(int64_t{me()} - step, ranks);
      if (Status s =
              t_.post_send(to, sent(to), mine.send_counts[to] * elem_, tag_, Channel::kCollective);
          !s.ok()) {
        return s;
      }
      if (Status s = t_.post_recv(from, landing(from), mine.recv_counts[from] * elem_, tag_,
                                  Channel::kCollective);
          !s.ok()) {
        return s;
      }
    }
    return t_.wait_all(deadline_);
  }

  Transport& t_;
  const Deadline& deadline_;
  std::vector<uint8_t>& scratch_;
  uint32_t tag_ = 0;
  size_t elem_ = 1;
};

}  // namespace

Status run_p2p(Transport& transport, std::span<const hal_collective_call_t> calls,
               const Deadline& deadline, std::vector<uint8_t>& scratch, const Chooser& chooser,
               const DecidedPath* decided) {
  // A refusal (a forced path that cannot serve a call) comes before any
  // message is posted: the ranks stay in step.
  // What runs here runs over the transport: no segment serves it (a batch
  // of several calls, or a rank without one), whatever the rank has.
  Chooser over_transport = chooser;
  over_transport.means.segment = false;
  if (decided == nullptr) {
    if (Status refused = over_transport.check(calls); !refused.ok()) return refused;
  }
  // Sends and recvs first, all posted before anything waits, so a group's
  // exchange cannot deadlock; their completion joins the first wait.
  bool posted = false;
  for (const hal_collective_call_t& call : calls) {
    const size_t bytes = call.count * dtype_size(call.dtype);
    const uint32_t tag = call_signature(call) & 0x7fffu;
    Status s;
    if (call.kind == HAL_COLLECTIVE_SEND) {
      s = transport.post_send(call.peer, call.send, bytes, tag, Channel::kPointToPoint);
      posted = true;
    } else if (call.kind == HAL_COLLECTIVE_RECV) {
      s = transport.post_recv(call.peer, call.recv, bytes, tag, Channel::kPointToPoint);
      posted = true;
    }
    if (!s.ok()) return s;
  }
  Runner runner(transport, deadline, scratch);
  for (const hal_collective_call_t& call : calls) {
    if (call.kind == HAL_COLLECTIVE_SEND || call.kind == HAL_COLLECTIVE_RECV) continue;
    if (call.count == 0) continue;
    if (decided != nullptr) {
      if (Status s = runner.run(call, decided->path, decided->counts_checked); !s.ok()) return s;
      continue;
    }
    const Path path = choose_path(facts_of(call), over_transport.means, over_transport.policy).path;
    if (Status s = runner.run(call, path, false); !s.ok()) return s;
  }
  return posted ? transport.wait_all(deadline) : Status{};
}

}  // namespace hal::collective
