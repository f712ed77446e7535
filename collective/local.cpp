#include "hal_collective/local.hpp"

#include "hal_collective/alltoallv.hpp"
#include "hal_collective/bytes.hpp"
#include "hal_collective/reduce.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

namespace hal::collective {

namespace {

// The reduction chunk: small enough that the partial result stays in L1
// while it is written to every rank's output.
constexpr size_t kChunkBytes = 16 * 1024;

const uint8_t* bytes_of(const void* p) {
  return static_cast<const uint8_t*>(p);
}
uint8_t* bytes_of(void* p) {
  return static_cast<uint8_t*>(p);
}

// [begin, end) of the elements rank |rank| reduces: equal slices, each
// starting on a cache line so no two ranks write the same line.
std::pair<size_t, size_t> slice_of(size_t count, size_t elem, uint32_t rank, uint32_t ranks) {
  const size_t unit = std::max<size_t>(1, 64 / elem);
  const size_t per_rank = ((count + ranks - 1) / ranks + unit - 1) / unit * unit;
  const size_t begin = std::min(count, per_rank * rank);
  return {begin, std::min(count, begin + per_rank)};
}

}  // namespace

LocalGroup::LocalGroup(uint32_t ranks)
    : ranks_(ranks), slots_(ranks), mailboxes_(static_cast<size_t>(ranks) * ranks) {}

void LocalGroup::fail(uint32_t rank, const Status& why) {
  std::lock_guard lock(mutex_);
  if (broken_.load(std::memory_order_relaxed)) return;
  failure_ = Status::failure(why.result, "rank " + std::to_string(rank) + ": " + why.message);
  broken_.store(true, std::memory_order_release);
}

Status LocalGroup::failure() const {
  if (!broken_.load(std::memory_order_acquire)) return {};
  std::lock_guard lock(mutex_);
  return failure_;
}

Status LocalGroup::remote_failure() const {
  const Status first = failure();
  return Status::failure(HAL_ERROR_REMOTE, "a peer failed: " + first.message);
}

Status LocalGroup::barrier(uint32_t rank, const Deadline& deadline, const char* what) {
  const uint64_t target = ++slots_[rank].episodes * ranks_;
  arrivals_.fetch_add(1, std::memory_order_acq_rel);
  bool peer_failed = false;
  Status status = wait_until(deadline, what, [&] {
    if (arrivals_.load(std::memory_order_acquire) >= target) return true;
    peer_failed = broken_.load(std::memory_order_acquire);
    return peer_failed;
  });
  if (peer_failed) return remote_failure();
  if (!status.ok()) fail(rank, status);  // our peers must not wait for us any longer
  return status;
}

Status LocalGroup::run(uint32_t rank, std::span<const hal_collective_call_t> calls,
                       const Deadline& deadline) {
  if (broken_.load(std::memory_order_acquire)) return remote_failure();
  std::vector<std::shared_ptr<SendPost>> sends;
  {
    std::lock_guard lock(mutex_);
    for (const hal_collective_call_t& call : calls) {
      if (call.kind != HAL_COLLECTIVE_SEND) continue;
      auto post = std::make_shared<SendPost>();
      post->data = call.send;
      post->bytes = call.count * dtype_size(call.dtype);
      mailbox(rank, call.peer).push_back(post);
      sends.push_back(std::move(post));
    }
  }
  // A mismatch is everyone's verdict, so the ranks go on in step; the first
  // one is what the run returns.
  Status status;
  for (const hal_collective_call_t& call : calls) {
    if (call.kind == HAL_COLLECTIVE_SEND || call.kind == HAL_COLLECTIVE_RECV) continue;
    Status done = run_collective(rank, call, deadline);
    if (done.ok()) continue;
    if (done.result != HAL_ERROR_ARGUMENT_MISMATCH) return done;
    if (status.ok()) status = std::move(done);
  }
  for (const hal_collective_call_t& call : calls) {
    if (call.kind != HAL_COLLECTIVE_RECV) continue;
    if (Status received = receive(rank, call, deadline); !received.ok()) return received;
  }
  for (const auto& post : sends) {
    bool peer_failed = false;
    Status taken = wait_until(deadline, "waiting for a peer to receive a send", [&] {
      if (post->state.load(std::memory_order_acquire) != 0) return true;
      peer_failed = broken_.load(std::memory_order_acquire);
      return peer_failed;
    });
    if (peer_failed) return remote_failure();
    if (!taken.ok()) {
      fail(rank, taken);
      return taken;
    }
    if (post->state.load(std::memory_order_acquire) == 2) {
      status = Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                               "a send and its recv disagree on the byte count");
    }
  }
  return status;
}

Status LocalGroup::receive(uint32_t rank, const hal_collective_call_t& call,
                           const Deadline& deadline) {
  std::shared_ptr<SendPost> post;
  bool peer_failed = false;
  Status status = wait_until(deadline, "waiting for the matching send", [&] {
    std::lock_guard lock(mutex_);
    auto& queue = mailbox(call.peer, rank);
    if (!queue.empty()) {
      post = std::move(queue.front());
      queue.pop_front();
      return true;
    }
    peer_failed = broken_.load(std::memory_order_relaxed);
    return peer_failed;
  });
  if (peer_failed) return remote_failure();
  if (!status.ok()) {
    fail(rank, status);
    return status;
  }
  const size_t bytes = call.count * dtype_size(call.dtype);
  if (post->bytes != bytes) {
    post->state.store(2, std::memory_order_release);
    return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                           "recv of " + std::to_string(bytes) + " bytes from rank " +
                               std::to_string(call.peer) + " met a send of " +
                               std::to_string(post->bytes) + " bytes");
  }
  copy_block(call.recv, post->data, bytes);
  post->state.store(1, std::memory_order_release);
  return {};
}

Status LocalGroup::run_collective(uint32_t rank, const hal_collective_call_t& call,
                                  const Deadline& deadline) {
  slots_[rank].call = &call;
  if (Status arrived = barrier(rank, deadline, "waiting for the other ranks to arrive");
      !arrived.ok()) {
    return arrived;
  }
  // Every rank compares every call with rank 0's, so all reach the same verdict.
  const uint32_t expected = call_signature(*slots_[0].call);
  bool match = true;
  for (uint32_t r = 1; r < ranks_; ++r) match &= call_signature(*slots_[r].call) == expected;
  Status verdict;
  if (!match) {
    verdict = Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                              std::string("the ranks called ") + kind_name(call.kind) +
                                  " with different counts, dtypes, ops or roots");
  } else if (call.kind == HAL_COLLECTIVE_ALLTOALLV) {
    verdict = check_alltoallv_counts(
        ranks_,
        [&](uint32_t from, uint32_t to) { return layout_of(*slots_[from].call).send_counts[to]; },
        [&](uint32_t at, uint32_t from) { return layout_of(*slots_[at].call).recv_counts[from]; });
  }
  if (verdict.ok()) do_share(rank, call);
  // Nobody may publish its next call before everyone finished reading this one.
  if (Status done = barrier(rank, deadline, "waiting for the other ranks to finish"); !done.ok()) {
    return done;
  }
  return verdict;
}

void LocalGroup::do_share(uint32_t rank, const hal_collective_call_t& call) {
  const size_t elem = dtype_size(call.dtype);
  const size_t count = call.count;
  const uint32_t n = ranks_;
  auto peer = [&](uint32_t r) -> const hal_collective_call_t& { return *slots_[r].call; };
  // Per thread, on the heap: a 16 KiB thread_local array would sit in every
  // thread's static TLS block of libhal and of the cpu plugin.
  struct alignas(64) Chunk {
    uint8_t bytes[kChunkBytes];
  };
  static thread_local std::unique_ptr<Chunk> partial_chunk;
  if (!partial_chunk) partial_chunk = std::make_unique<Chunk>();
  uint8_t* const partial = partial_chunk->bytes;
  const size_t chunk_elems = kChunkBytes / elem;

  // Reduces elements [begin, end) at |offset| bytes into every rank's send
  // buffer and hands each finished chunk to |emit|.
  auto reduce_range = [&](size_t begin, size_t end, size_t offset, auto emit) {
    for (size_t at = begin; at < end; at += chunk_elems) {
      const size_t elems = std::min(chunk_elems, end - at);
      const size_t byte_at = offset + at * elem;
      if (n == 1) {
        std::memcpy(partial, bytes_of(peer(0).send) + byte_at, elems * elem);
      } else {
        reduce_pair(partial, bytes_of(peer(0).send) + byte_at, bytes_of(peer(1).send) + byte_at,
                    elems, call.dtype, call.op);
      }
      for (uint32_t r = 2; r < n; ++r) {
        reduce_pair(partial, partial, bytes_of(peer(r).send) + byte_at, elems, call.dtype, call.op);
      }
      if (call.op == HAL_REDUCE_AVG) finish_average(partial, elems, call.dtype, n);
      emit(at, elems);
    }
  };

  switch (call.kind) {
    case HAL_COLLECTIVE_ALLREDUCE: {
      const auto [begin, end] = slice_of(count, elem, rank, n);
      reduce_range(begin, end, 0, [&](size_t at, size_t elems) {
        for (uint32_t r = 0; r < n; ++r) {
          std::memcpy(bytes_of(peer(r).recv) + at * elem, partial, elems * elem);
        }
      });
      break;
    }
    case HAL_COLLECTIVE_REDUCE: {
      const auto [begin, end] = slice_of(count, elem, rank, n);
      void* root_recv = peer(call.peer).recv;
      reduce_range(begin, end, 0, [&](size_t at, size_t elems) {
        std::memcpy(bytes_of(root_recv) + at * elem, partial, elems * elem);
      });
      break;
    }
    case HAL_COLLECTIVE_REDUCE_SCATTER: {
      // Rank r alone reads block r of every input, so in place is safe.
      reduce_range(0, count, rank * count * elem, [&](size_t at, size_t elems) {
        std::memcpy(bytes_of(call.recv) + at * elem, partial, elems * elem);
      });
      break;
    }
    case HAL_COLLECTIVE_BROADCAST: {
      const auto [begin, end] = slice_of(count, elem, rank, n);
      const uint8_t* source = bytes_of(peer(call.peer).send);
      for (uint32_t r = 0; r < n; ++r) {
        copy_block(bytes_of(peer(r).recv) + begin * elem, source + begin * elem,
                   (end - begin) * elem);
      }
      break;
    }
    case HAL_COLLECTIVE_ALLGATHER: {
      for (uint32_t r = 0; r < n; ++r) {
        copy_block(bytes_of(peer(r).recv) + rank * count * elem, call.send, count * elem);
      }
      break;
    }
    case HAL_COLLECTIVE_ALLTOALL: {
      for (uint32_t r = 0; r < n; ++r) {
        copy_block(bytes_of(call.recv) + r * count * elem,
                   bytes_of(peer(r).send) + rank * count * elem, count * elem);
      }
      break;
    }
    case HAL_COLLECTIVE_ALLTOALLV: {
      // Each rank pulls what its peers send it into its own receive buffer.
      const hal_alltoallv_layout_t& mine = layout_of(call);
      for (uint32_t r = 0; r < n; ++r) {
        const hal_alltoallv_layout_t& theirs = layout_of(peer(r));
        copy_block(bytes_of(mine.recvbuf) + mine.recv_displs[r] * elem,
                   bytes_of(theirs.sendbuf) + theirs.send_displs[rank] * elem,
                   mine.recv_counts[r] * elem);
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace hal::collective
