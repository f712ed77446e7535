// The in-process collective engine: the ranks of one hal_comm_init_all
// communicator live in one address space, so each rank reads its peers'
// buffers directly. Used by the cpu plugin on its device memory and by the
// loader's host-staged fallback on staging buffers.
//
// A collective is a rendezvous: each rank publishes its call, a barrier,
// each rank then does 1/n of the work (an element slice of a reduction, its
// own block of a gather), a second barrier. Reductions go chunk by chunk
// through a small buffer that stays in L1, so each input is read once and
// each output written once: 2·n·S bytes of memory traffic for an allreduce
// of S bytes over n ranks, spread over the n ranks' threads. Sends and recvs
// meet in per-pair mailboxes instead.
#pragma once

#include "hal_collective/status.hpp"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace hal::collective {

class LocalGroup {
 public:
  explicit LocalGroup(uint32_t ranks);
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  uint32_t ranks() const { return ranks_; }

  // Runs |calls| as rank |rank|: its sends are posted first, then the
  // collectives run in order with every rank, then its recvs, then it waits
  // until its sends were taken. One run per rank at a time.
  Status run(uint32_t rank, std::span<const hal_collective_call_t> calls, const Deadline& deadline);

  // Breaks the group because |rank| failed, died or aborted: every waiting
  // and later run fails with HAL_ERROR_REMOTE. The first failure is kept.
  void fail(uint32_t rank, const Status& why);
  // HAL_SUCCESS, or why the group is broken.
  Status failure() const;

 private:
  struct alignas(64) RankSlot {
    const hal_collective_call_t* call = nullptr;  // published before the first barrier
    uint64_t episodes = 0;                        // barriers this rank passed
  };
  struct SendPost {
    const void* data;
    size_t bytes;
    std::atomic<int> state{0};  // 0 posted, 1 taken, 2 size mismatch
  };

  Status barrier(uint32_t rank, const Deadline& deadline, const char* what);
  Status run_collective(uint32_t rank, const hal_collective_call_t& call, const Deadline& deadline);
  void do_share(uint32_t rank, const hal_collective_call_t& call);
  Status receive(uint32_t rank, const hal_collective_call_t& call, const Deadline& deadline);
  Status remote_failure() const;
  std::deque<std::shared_ptr<SendPost>>& mailbox(uint32_t from, uint32_t to) {
    return mailboxes_[from * ranks_ + to];
  }

  const uint32_t ranks_;
  std::vector<RankSlot> slots_;
  alignas(64) std::atomic<uint64_t> arrivals_{0};
  alignas(64) std::atomic<bool> broken_{false};
  mutable std::mutex mutex_;  // guards failure_ and the mailboxes
  Status failure_;
  std::vector<std::deque<std::shared_ptr<SendPost>>> mailboxes_;
};

}  // namespace hal::collective
