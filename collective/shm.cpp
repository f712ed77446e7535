#include "hal_collective/shm.hpp"

#include "hal_collective/reduce.hpp"
#include "hal_collective/shm_segment.hpp"

#include <atomic>
#include <cstring>
#include <new>
#include <thread>

namespace hal::collective {

namespace {

constexpr size_t kPage = 4096;

size_t round_up(size_t value, size_t unit) {
  return (value + unit - 1) / unit * unit;
}

// One rank's counters, each on its own cache line with its slot's signature.
// Counters only grow: episode e is published by storing e.
struct alignas(64) RankLineLayout {
  std::atomic<uint64_t> arrived{0};  // input and signature of episode `arrived` are in place
  std::atomic<uint64_t> done{0};     // it no longer reads anything of episode `done`
  std::atomic<uint32_t> signature{0};
};
struct alignas(64) HeaderLine {
  std::atomic<uint32_t> broken{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the segment's atomics are shared between processes: they must be lock-free");

size_t lines_bytes(uint32_t ranks) {
  return round_up(sizeof(HeaderLine) + sizeof(RankLineLayout) * ranks, kPage);
}
size_t segment_bytes(uint32_t ranks) {
  return lines_bytes(ranks) + ShmGroup::kMaxBytes * ranks;
}

}  // namespace

struct ShmGroup::RankLine : RankLineLayout {};

std::unique_ptr<ShmGroup> ShmGroup::create(Transport& transport, bool wanted,
                                           const Deadline& deadline, Status& out_status,
                                           std::string& out_reason) {
  const uint32_t ranks = transport.ranks();
  TransportSetup setup(transport, deadline);
  auto segment = SharedSegment::share(
      setup, wanted, segment_bytes(ranks),
      [ranks](void* mapping) {
        new (mapping) HeaderLine{};
        auto* lines =
            reinterpret_cast<RankLineLayout*>(static_cast<uint8_t*>(mapping) + sizeof(HeaderLine));
        for (uint32_t r = 0; r < ranks; ++r) new (lines + r) RankLineLayout{};
      },
      out_status, out_reason);
  if (!segment) return nullptr;
  return std::unique_ptr<ShmGroup>(new ShmGroup(std::move(segment), transport.rank(), ranks));
}

ShmGroup::ShmGroup(std::unique_ptr<SharedSegment> segment, uint32_t rank, uint32_t ranks)
    : segment_(std::move(segment)), mapping_(segment_->data()), rank_(rank), ranks_(ranks) {}

ShmGroup::~ShmGroup() = default;

ShmGroup::RankLine& ShmGroup::line(uint32_t rank) const noexcept {
  return reinterpret_cast<RankLine*>(static_cast<uint8_t*>(mapping_) + sizeof(HeaderLine))[rank];
}
uint8_t* ShmGroup::input(uint32_t rank) const noexcept {
  return static_cast<uint8_t*>(mapping_) + lines_bytes(ranks_) + ShmGroup::kMaxBytes * rank;
}

void ShmGroup::fail() noexcept {
  static_cast<HeaderLine*>(mapping_)->broken.store(1, std::memory_order_release);
}

bool ShmGroup::handshakes(std::span<const hal_collective_call_t> calls) noexcept {
  return calls.size() == 1 && calls[0].kind != HAL_COLLECTIVE_SEND &&
         calls[0].kind != HAL_COLLECTIVE_RECV;
}

bool ShmGroup::serves_data(const hal_collective_call_t& call) const noexcept {
  return call.kind == HAL_COLLECTIVE_ALLREDUCE && call.count * dtype_size(call.dtype) <= kMaxBytes;
}

template <class Ready>
Status ShmGroup::wait_for(const Deadline& deadline, const char* what, Ready ready) {
  // The peers' processes are looked at once every this many polls: a poll is
  // a few cache-line reads, a look a system call.
  constexpr uint32_t kPollsPerLivenessCheck = 1024;
  const auto& header = *static_cast<const HeaderLine*>(mapping_);
  bool broken = false;
  bool exited = false;
  uint32_t polls = 0;
  Status status = wait_until(deadline, what, [&] {
    if (ready()) return true;
    broken = header.broken.load(std::memory_order_acquire) != 0;
    exited = !broken && ++polls % kPollsPerLivenessCheck == 0 && segment_->any_peer_exited();
    return broken || exited;
  });
  if (broken) {
    return Status::failure(HAL_ERROR_REMOTE,
                           "a peer process failed or aborted (it marked the shared segment)");
  }
  if (exited) {
    // Its peers would wait for it until the deadline: the segment says so.
    fail();
    return Status::failure(HAL_ERROR_REMOTE, std::string("a peer process exited while ") + what);
  }
  return status;
}

void ShmGroup::begin() noexcept {
  if (phase_ != Phase::kIdle) return;  // a try_run left this episode open
  ++episode_;
  phase_ = Phase::kWaitingForPrevious;
}

// Our slot is ours again once every rank is done with the last episode.
bool ShmGroup::previous_done() const noexcept {
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (line(r).done.load(std::memory_order_acquire) < episode_ - 1) return false;
  }
  return true;
}

void ShmGroup::post(const hal_collective_call_t& call) noexcept {
  RankLine& mine = line(rank_);
  mine.signature.store(call_signature(call), std::memory_order_relaxed);
  if (serves_data(call) && call.count != 0) {
    std::memcpy(input(rank_), call.send, call.count * dtype_size(call.dtype));
  }
  mine.arrived.store(episode_, std::memory_order_release);
  phase_ = Phase::kWaitingForArrivals;
}

bool ShmGroup::all_arrived() const noexcept {
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (line(r).arrived.load(std::memory_order_acquire) < episode_) return false;
  }
  return true;
}

Status ShmGroup::check_signatures(const hal_collective_call_t& call) const {
  const uint32_t expected = line(0).signature.load(std::memory_order_relaxed);
  for (uint32_t r = 1; r < ranks_; ++r) {
    if (line(r).signature.load(std::memory_order_relaxed) != expected) {
      return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                             std::string("the ranks called ") + kind_name(call.kind) +
                                 " with different counts, dtypes, ops or roots");
    }
  }
  return {};
}

Status ShmGroup::handshake(const hal_collective_call_t& call, const Deadline& deadline) {
  begin();
  if (phase_ == Phase::kWaitingForPrevious) {
    if (Status s = wait_for(deadline, "waiting for the peers to finish the previous call",
                            [this] { return previous_done(); });
        !s.ok()) {
      return s;
    }
    post(call);
  }
  if (Status s = wait_for(deadline, "waiting for the other ranks to arrive",
                          [this] { return all_arrived(); });
      !s.ok()) {
    return s;
  }
  return check_signatures(call);
}

bool ShmGroup::try_run(const hal_collective_call_t& call, Clock::duration patience,
                       Status& out_status, Clock::time_point& out_first_look) {
  begin();
  // The clock is read once every kPollsPerClockRead polls: a poll costs a
  // few cache-line reads, a clock read about as much as all of them. The
  // patience counts from the first reading.
  constexpr uint32_t kPollsPerClockRead = 64;
  out_first_look = Clock::time_point{};
  Clock::time_point give_up{};
  for (uint32_t i = 1;; ++i) {
    if (phase_ == Phase::kWaitingForPrevious && previous_done()) post(call);
    if (phase_ == Phase::kWaitingForArrivals && all_arrived()) break;
    if (i % kPollsPerClockRead == 0) {
      const auto now = Clock::now();
      if (i == kPollsPerClockRead) {
        out_first_look = now;
        give_up = now + patience;
      } else if (now > give_up) {
        return false;
      }
      std::this_thread::yield();  // on a small machine the peer may need this core
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  Status status = check_signatures(call);
  if (status.ok()) status = reduce(call);
  out_status = finish(std::move(status));
  return true;
}

// Every rank reduces all inputs, in rank order: identical bytes everywhere.
Status ShmGroup::reduce(const hal_collective_call_t& call) {
  const size_t count = call.count;
  if (count == 0) return {};
  if (ranks_ == 1) {
    std::memcpy(call.recv, input(0), count * dtype_size(call.dtype));
  } else {
    reduce_pair(call.recv, input(0), input(1), count, call.dtype, call.op);
    for (uint32_t r = 2; r < ranks_; ++r) {
      reduce_pair(call.recv, call.recv, input(r), count, call.dtype, call.op);
    }
  }
  if (call.op == HAL_REDUCE_AVG) finish_average(call.recv, count, call.dtype, ranks_);
  return {};
}

Status ShmGroup::finish(Status status) {
  phase_ = Phase::kIdle;
  // A mismatch is everyone's verdict and leaves the ranks in step; any other
  // failure leaves this rank behind, so its peers must stop waiting for it.
  if (!status.ok() && status.result != HAL_ERROR_ARGUMENT_MISMATCH) fail();
  line(rank_).done.store(episode_, std::memory_order_release);
  return status;
}

}  // namespace hal::collective
