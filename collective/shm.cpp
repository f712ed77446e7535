#include "hal_collective/shm.hpp"

#include "hal_collective/alltoallv.hpp"
#include "hal_collective/bytes.hpp"
#include "hal_collective/limits.hpp"
#include "hal_collective/reduce.hpp"
#include "hal_collective/shm_doorbell.hpp"
#include "hal_collective/shm_segment.hpp"

#include "hal_util/env.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <random>
#include <thread>

namespace hal::collective {

namespace {

// Episodes alternate between two sets of each rank's signature, counts and
// slot (the episode's parity): a rank may publish episode e + 1 as soon as
// every peer is done with e - 1, while they may still read e. With one set
// it had to wait until they were done with e: back-to-back calls cost two
// cross-core hand-offs each (my arrival, then the peer's "done"), where
// MPI's eager messages let a rank run one call ahead and cost one.
constexpr uint32_t kSets = 2;

// One rank's counters, each on its own cache line with its sets' signatures.
// Counters only grow: episode e is published by storing e.
struct alignas(64) RankLineLayout {
  std::atomic<uint64_t> arrived{0};  // input and signature of episode `arrived` are in place
  std::atomic<uint64_t> done{0};     // it no longer reads anything of episode `done`
  std::atomic<uint32_t> signature[kSets] = {};
  std::atomic<uint32_t> policy[kSets] = {};  // PathPolicy::code(): HAL_COLL_PATH of its process
};
struct alignas(64) HeaderLine {
  std::atomic<uint32_t> broken{0};
  // Rung after every publish (arrived, done, broken) when it finds a
  // sleeper. Those counters are stored and loaded sequentially consistent,
  // as the doorbell asks (on x86 a store is then an xchg, a load a move).
  ShmDoorbell doorbell;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the segment's atomics are shared between processes: they must be lock-free");

// Whether a failure is every rank's verdict, reached alike, after which the
// ranks go on in step: a mismatch, or a forced path refused.
bool in_step(const Status& status) {
  return status.ok() || status.result == HAL_ERROR_ARGUMENT_MISMATCH ||
         status.result == HAL_ERROR_UNSUPPORTED;
}

size_t lines_bytes(uint32_t ranks) {
  return round_up(sizeof(HeaderLine) + sizeof(RankLineLayout) * ranks, kPageBytes);
}
// Each rank's region, once per set: its alltoallv counts (send, then
// receive) and its send blocks' addresses (cross memory), a cache line
// multiple, then its data slot.
size_t counts_bytes(uint32_t ranks) {
  return round_up(sizeof(uint64_t) * 3 * ranks, 64);
}
size_t set_bytes(uint32_t ranks) {
  return counts_bytes(ranks) + limits::kSegmentSlotBytes;
}
size_t region_bytes(uint32_t ranks) {
  return set_bytes(ranks) * kSets;
}
size_t segment_bytes(uint32_t ranks) {
  return lines_bytes(ranks) + region_bytes(ranks) * ranks;
}

// Reads |bytes| at |address| of process |pid| into |to| (cross-memory
// attach). 0, or the errno of the refusal; a read that stops short (an
// unmapped page in the peer) is EFAULT.
int read_across(int32_t pid, uint64_t address, void* to, size_t bytes) noexcept {
  size_t moved = 0;
  while (moved < bytes) {
    iovec local{static_cast<uint8_t*>(to) + moved, bytes - moved};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(address + moved)), bytes - moved};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EFAULT;
    moved += static_cast<size_t>(n);
  }
  return 0;
}

// What each rank offers its peers at set-up to probe cross-memory attach
// with: where to read, and what they must find there.
struct ProbeOffer {
  int32_t pid;
  uint32_t wanted;  // HAL_COMM_CMA
  uint64_t address;
  uint64_t token;
};
// Each rank's verdict: 0, or the errno (kWrongWord: the read succeeded but
// found another value) of its first refused peer.
struct ProbeVerdict {
  int32_t error;
  uint32_t peer;
};
constexpr int32_t kWrongWord = -1;

}  // namespace

bool cross_memory_wanted() noexcept {
  const char* setting = util::env("HAL_COMM_CMA");
  return setting == nullptr || std::strcmp(setting, "0") != 0;
}

struct ShmGroup::RankLine : RankLineLayout {};

std::unique_ptr<ShmGroup> ShmGroup::create(Transport& transport, bool wanted,
                                           const Deadline& deadline, Status& out_status,
                                           std::string& out_reason,
                                           const CrossMemoryOptions& cross_memory) {
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
  std::unique_ptr<ShmGroup> group(new ShmGroup(std::move(segment), transport.rank(), ranks));
  if (out_status = group->probe_cross_memory(setup, cross_memory); !out_status.ok()) {
    return nullptr;
  }
  return group;
}

// Every rank reads a random word of every peer's memory, where the peer
// says it lies, through the kernel's cross-memory attach; the ranks then
// share their verdicts, so all use it only when all may, and all give the
// same reason when not. A refusal (EPERM from Yama's ptrace_scope, another
// user, a seccomp filter's ENOSYS) is never an error: the two-copy paths
// serve. The pids come over the set-up channel; reading the token back
// proves that a pid names the peer that offered it.
Status ShmGroup::probe_cross_memory(SetupChannel& setup, const CrossMemoryOptions& options) {
  std::random_device entropy;
  probe_token_ = (uint64_t{entropy()} << 32 | entropy()) | 1;
  const ProbeOffer mine{static_cast<int32_t>(getpid()), options.wanted ? 1u : 0u,
                        reinterpret_cast<uintptr_t>(&probe_token_), probe_token_};
  std::vector<ProbeOffer> offers(ranks_);
  if (Status s = setup.all_gather(&mine, offers.data(), sizeof(ProbeOffer)); !s.ok()) return s;
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (offers[r].wanted == 0) {
      cross_memory_reason_ = "rank " + std::to_string(r) + " set HAL_COMM_CMA=0";
      return {};
    }
  }
  ProbeVerdict verdict{0, rank_};
  for (uint32_t k = 1; k < ranks_ && verdict.error == 0; ++k) {
    const uint32_t peer = (rank_ + k) % ranks_;
    int error = options.refuse ? options.refuse(rank_, peer) : 0;
    if (error == 0) {
      uint64_t word = 0;
      error = read_across(offers[peer].pid, offers[peer].address, &word, sizeof word);
      if (error == 0 && word != offers[peer].token) error = kWrongWord;
    }
    if (error != 0) verdict = {error, peer};
  }
  std::vector<ProbeVerdict> verdicts(ranks_);
  if (Status s = setup.all_gather(&verdict, verdicts.data(), sizeof(ProbeVerdict)); !s.ok()) {
    return s;
  }
  for (uint32_t r = 0; r < ranks_; ++r) {
    const ProbeVerdict& v = verdicts[r];
    if (v.error == 0) continue;
    cross_memory_reason_ =
        "rank " + std::to_string(r) + " may not read rank " + std::to_string(v.peer) +
        "'s memory (" +
        (v.error == kWrongWord ? std::string("it read another value than the peer offered")
                               : std::string("process_vm_readv: ") + std::strerror(v.error)) +
        (v.error == EPERM ? "; Yama's kernel.yama.ptrace_scope or a non-dumpable process" : "") +
        ")";
    return {};
  }
  pids_.resize(ranks_);
  for (uint32_t r = 0; r < ranks_; ++r) pids_[r] = offers[r].pid;
  cross_memory_ = true;
  return {};
}

ShmGroup::ShmGroup(std::unique_ptr<SharedSegment> segment, uint32_t rank, uint32_t ranks)
    : segment_(std::move(segment)),
      mapping_(segment_->data()),
      rank_(rank),
      ranks_(ranks),
      matrix_(size_t{2} * ranks * ranks) {}

ShmGroup::~ShmGroup() = default;

ShmGroup::RankLine& ShmGroup::line(uint32_t rank) const noexcept {
  return reinterpret_cast<RankLine*>(static_cast<uint8_t*>(mapping_) + sizeof(HeaderLine))[rank];
}
uint32_t ShmGroup::set() const noexcept {
  return static_cast<uint32_t>(episode_ % kSets);
}
uint64_t* ShmGroup::counts(uint32_t rank) const noexcept {
  return reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(mapping_) + lines_bytes(ranks_) +
                                     region_bytes(ranks_) * rank + set_bytes(ranks_) * set());
}
uint8_t* ShmGroup::input(uint32_t rank) const noexcept {
  return reinterpret_cast<uint8_t*>(counts(rank)) + counts_bytes(ranks_);
}

void ShmGroup::fail() noexcept {
  static_cast<HeaderLine*>(mapping_)->broken.store(1, std::memory_order_seq_cst);
  ring();
}

void ShmGroup::ring() const noexcept {
  static_cast<HeaderLine*>(mapping_)->doorbell.ring();
}

bool ShmGroup::handshakes(std::span<const hal_collective_call_t> calls) noexcept {
  return calls.size() == 1 && calls[0].kind != HAL_COLLECTIVE_SEND &&
         calls[0].kind != HAL_COLLECTIVE_RECV;
}

// Polls for up to limits::kSegmentSpin (a peer in step arrives within a
// microsecond or two), then sleeps on the segment's doorbell in slices,
// looking at the deadline, the abort flag and the peers' processes after
// each: a peer that publishes rings it, one that fails marks the segment
// and rings it, one that exits without either is seen within a slice.
template <class Ready>
Status ShmGroup::wait_for(const Deadline& deadline, const char* what, Ready ready) {
  // The longest sleep between looks at the abort flag and the deadline (a
  // rank aborted by its own process's hal_comm_abort also rings), and how
  // often the peers' processes are looked at (a system call).
  constexpr auto kSleepSlice = std::chrono::milliseconds(2);
  constexpr auto kLivenessInterval = std::chrono::milliseconds(2);
  auto& header = *static_cast<HeaderLine*>(mapping_);
  bool broken = false;
  auto settled = [&] {
    if (ready()) return true;
    broken = header.broken.load(std::memory_order_seq_cst) != 0;
    return broken;
  };
  // Polling, for long_spin_ ? kSegmentLongSpin : kSegmentSpin; the clock
  // is read once every 64 polls.
  Clock::time_point spin_until{};
  bool asleep = false;
  for (uint32_t i = 1; !settled(); ++i) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (i % 64 != 0) continue;
    const Clock::time_point now = Clock::now();
    if (i == 64) {
      spin_until = now + (long_spin_ ? limits::kSegmentLongSpin : limits::kSegmentSpin);
    } else if (now > spin_until) {
      asleep = true;
      break;
    }
  }
  // A sleep that ends within the long spin says the peers were only a
  // little late: the next wait polls that long. A longer sleep (a peer
  // preempted, more ranks than cores), or a long spin that found nothing,
  // puts it back on the short one.
  const bool short_spin_failed = asleep && !long_spin_;
  const Clock::time_point fell_asleep = asleep ? Clock::now() : Clock::time_point{};
  if (asleep) long_spin_ = false;
  // Asleep, one slice at a time.
  Status status;
  bool exited = false;
  // A sleep that a ring ends (most: a peer preempted for a while) needs no
  // look at the peers' processes; one slice without a ring does.
  Clock::time_point next_liveness = Clock::now() + kLivenessInterval;
  while (asleep) {
    const Clock::time_point now = Clock::now();
    if (deadline.is_aborted()) {
      status = Status::failure(HAL_ERROR_INVALID_STATE,
                               std::string("the communicator was aborted while ") + what);
      break;
    }
    if (now > deadline.at) {
      if (!settled()) {
        status =
            Status::failure(HAL_ERROR_TIMEOUT, std::string("the deadline passed while ") + what);
      }
      break;
    }
    if (now >= next_liveness) {
      next_liveness = now + kLivenessInterval;
      if (segment_->any_peer_exited()) {
        exited = !settled();
        break;
      }
    }
    const uint32_t seen = header.doorbell.announce();
    if (!settled()) {
      header.doorbell.sleep(seen, std::min<Clock::duration>(kSleepSlice, deadline.at - now));
    }
    header.doorbell.leave();
    asleep = !settled();
  }
  if (short_spin_failed && status.ok() && Clock::now() - fell_asleep < limits::kSegmentLongSpin) {
    long_spin_ = true;
  }
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

// This episode's set is ours again once every rank is done with the
// episode before the last, which used it.
bool ShmGroup::previous_done() const noexcept {
  if (episode_ <= kSets) return true;
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (line(r).done.load(std::memory_order_seq_cst) < episode_ - kSets) return false;
  }
  return true;
}

void ShmGroup::post(const hal_collective_call_t& call, const Chooser& chooser) noexcept {
  RankLine& mine = line(rank_);
  mine.signature[set()].store(call_signature(call), std::memory_order_relaxed);
  mine.policy[set()].store(chooser.policy.code(), std::memory_order_relaxed);
  const CallFacts facts = facts_of(call);
  if (call.kind == HAL_COLLECTIVE_ALLREDUCE) {
    // Every rank reaches the same answer: the size is part of the signature.
    if (call.count != 0 &&
        choose_path(facts, chooser.means, chooser.policy).path == Path::kSegment) {
      std::memcpy(input(rank_), call.send, facts.bytes);
    }
  } else if (call.kind == HAL_COLLECTIVE_ALLTOALLV) {
    // The counts always; the blocks, packed in rank order, where they fit:
    // the path is decided once every rank's counts are in.
    const hal_alltoallv_layout_t& layout = layout_of(call);
    const size_t elem = dtype_size(call.dtype);
    uint64_t* row = counts(rank_);
    for (uint32_t r = 0; r < ranks_; ++r) {
      row[r] = layout.send_counts[r];
      row[ranks_ + r] = layout.recv_counts[r];
    }
    if (cross_memory_) {
      // Where each peer reads its block, should the episode go across.
      const auto base = reinterpret_cast<uintptr_t>(layout.sendbuf);
      for (uint32_t r = 0; r < ranks_; ++r) {
        row[2 * ranks_ + r] = base + layout.send_displs[r] * elem;
      }
    }
    const bool may_carry = !chooser.policy.forced || chooser.policy.path == Path::kSegment;
    if (may_carry && facts.bytes <= limits::kSegmentSlotBytes) {
      size_t packed = 0;
      for (uint32_t r = 0; r < ranks_; ++r) {
        const size_t bytes = layout.send_counts[r] * elem;
        if (bytes == 0) continue;
        std::memcpy(input(rank_) + packed,
                    static_cast<const uint8_t*>(layout.sendbuf) + layout.send_displs[r] * elem,
                    bytes);
        packed += bytes;
      }
    }
  }
  mine.arrived.store(episode_, std::memory_order_seq_cst);
  ring();
  phase_ = Phase::kWaitingForArrivals;
}

bool ShmGroup::all_arrived() const noexcept {
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (line(r).arrived.load(std::memory_order_seq_cst) < episode_) return false;
  }
  return true;
}

// Once every peer has arrived, its counts and the first lines of its slot
// are read next, one after the other (decide, then the copy): each a
// transfer from the core that wrote it. Asking for all of them at once
// overlaps those transfers instead of paying them in turn.
void ShmGroup::prefetch_published() const noexcept {
  constexpr size_t kLine = 64;
  constexpr size_t kSlotLines = 4;
  const size_t count_lines = counts_bytes(ranks_) / kLine;
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (r == rank_) continue;
    const auto* counts_at = reinterpret_cast<const uint8_t*>(counts(r));
    for (size_t l = 0; l < count_lines; ++l) __builtin_prefetch(counts_at + l * kLine);
    for (size_t l = 0; l < kSlotLines; ++l) __builtin_prefetch(input(r) + l * kLine);
  }
}

Status ShmGroup::check_signatures(const hal_collective_call_t& call) const {
  const uint32_t expected = line(0).signature[set()].load(std::memory_order_relaxed);
  const uint32_t policy = line(0).policy[set()].load(std::memory_order_relaxed);
  for (uint32_t r = 1; r < ranks_; ++r) {
    if (line(r).policy[set()].load(std::memory_order_relaxed) != policy) {
      return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                             "the ranks' processes were given different HAL_COLL_PATH values");
    }
  }
  for (uint32_t r = 1; r < ranks_; ++r) {
    if (line(r).signature[set()].load(std::memory_order_relaxed) != expected) {
      return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                             std::string("the ranks called ") + kind_name(call.kind) +
                                 " with different counts, dtypes, ops or roots");
    }
  }
  return {};
}

Status ShmGroup::handshake(const hal_collective_call_t& call, const Deadline& deadline,
                           const Chooser& chooser) {
  begin();
  if (phase_ == Phase::kWaitingForPrevious) {
    if (Status s = wait_for(deadline, "waiting for the peers to finish the previous call",
                            [this] { return previous_done(); });
        !s.ok()) {
      return s;
    }
    post(call, chooser);
  }
  if (Status s = wait_for(deadline, "waiting for the other ranks to arrive",
                          [this] { return all_arrived(); });
      !s.ok()) {
    return s;
  }
  prefetch_published();
  return check_signatures(call);
}

bool ShmGroup::try_run(const hal_collective_call_t& call, const Chooser& chooser,
                       Clock::duration patience, Status& out_status,
                       Clock::time_point& out_first_look) {
  begin();
  // The clock is read once every kPollsPerClockRead polls: a poll costs a
  // few cache-line reads, a clock read about as much as all of them. The
  // patience counts from the first reading.
  constexpr uint32_t kPollsPerClockRead = 64;
  out_first_look = Clock::time_point{};
  Clock::time_point give_up{};
  for (uint32_t i = 1;; ++i) {
    if (phase_ == Phase::kWaitingForPrevious && previous_done()) post(call, chooser);
    if (phase_ == Phase::kWaitingForArrivals && all_arrived()) break;
    if (i % kPollsPerClockRead == 0) {
      const auto now = Clock::now();
      if (i == kPollsPerClockRead) {
        out_first_look = now;
        give_up = now + patience;
      } else if (now > give_up) {
        return false;
      }
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  prefetch_published();
  Status status = check_signatures(call);
  if (status.ok()) {
    const PathChoice choice = decide(call, chooser);
    // The transport's part runs on the stream: run() picks the episode up.
    if (choice.ok() && choice.path != Path::kSegment) return false;
    status = choice.ok() ? serve(call) : choice.refusal;
    if (status.ok() && phase_ == Phase::kWaitingForReaders) {
      // The peers are reading this rank's send buffer now, about as much as
      // this rank read: wait for them (busy, not late: no yield) within the
      // patience or as long as this rank's reads took, at most 2 ms; else
      // run() waits for the rest.
      const Clock::time_point started = Clock::now();
      if (out_first_look == Clock::time_point{}) out_first_look = started;
      const Clock::time_point give_up_readers =
          started +
          std::max<Clock::duration>(
              patience, std::min<Clock::duration>(read_took_, std::chrono::milliseconds(2)));
      for (uint32_t i = 1; !readers_done(); ++i) {
        if (i % kPollsPerClockRead == 0 && Clock::now() > give_up_readers) return false;
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      }
    }
  }
  out_status = finish(std::move(status));
  return true;
}

PathChoice ShmGroup::decide(const hal_collective_call_t& call, const Chooser& chooser) {
  CallFacts facts = facts_of(call);
  if (call.kind == HAL_COLLECTIVE_ALLTOALLV) {
    // A snapshot of every rank's counts: what is checked is what is used.
    const size_t row = size_t{2} * ranks_;
    for (uint32_t r = 0; r < ranks_; ++r) {
      std::memcpy(&matrix_[r * row], counts(r), row * sizeof(uint64_t));
    }
    PathChoice refused;
    refused.refusal = check_alltoallv_counts(
        ranks_, [&](uint32_t from, uint32_t to) { return matrix_[from * row + to]; },
        [&](uint32_t at, uint32_t from) { return matrix_[at * row + ranks_ + from]; });
    if (!refused.ok()) return refused;
    // The largest send total, saturating: a count no slot holds is "too big".
    const size_t elem = dtype_size(call.dtype);
    const uint64_t cap = limits::kSegmentSlotBytes / elem;
    size_t largest = 0;
    for (uint32_t r = 0; r < ranks_; ++r) {
      uint64_t total = 0;
      for (uint32_t to = 0; to < ranks_; ++to) {
        total += std::min<uint64_t>(matrix_[r * row + to], cap + 1);
      }
      largest = std::max<size_t>(largest, std::min<uint64_t>(total, cap + 1) * elem);
    }
    facts.bytes = largest;
    largest_send_ = largest;
  }
  return chooser.choose(facts);
}

Status ShmGroup::serve(const hal_collective_call_t& call) {
  return call.kind == HAL_COLLECTIVE_ALLTOALLV ? alltoallv(call) : reduce(call);
}

namespace {

// What every peer published it sends this rank (the checked snapshot) must
// be what this rank's own call expects: the matrix came out of the segment,
// which any process of the user can write, and a receive is bounded by the
// caller's counts, never by a peer's word.
Status check_own_receives(const hal_alltoallv_layout_t& layout, const std::vector<uint64_t>& matrix,
                          uint32_t rank, uint32_t ranks) {
  const size_t row = size_t{2} * ranks;
  for (uint32_t from = 0; from < ranks; ++from) {
    const uint64_t published = matrix[from * row + rank];
    if (published != layout.recv_counts[from]) {
      return Status::failure(HAL_ERROR_REMOTE,
                             "alltoallv: rank " + std::to_string(from) + " published " +
                                 std::to_string(published) + " elements for rank " +
                                 std::to_string(rank) + ", which expects " +
                                 std::to_string(layout.recv_counts[from]) +
                                 " (the shared segment was altered); nothing received from it");
    }
  }
  return {};
}

}  // namespace

// Each rank's blocks lie packed in its slot in rank order: the block for
// this rank starts after those for the ranks before it. decide() checked
// the counts and that every rank's total fits its slot. Larger calls (the
// chooser sends them here only with cross memory) go across.
Status ShmGroup::alltoallv(const hal_collective_call_t& call) {
  const hal_alltoallv_layout_t& layout = layout_of(call);
  if (Status s = check_own_receives(layout, matrix_, rank_, ranks_); !s.ok()) return s;
  if (largest_send_ > limits::kSegmentAlltoallvBytes) return alltoallv_cross_memory(call);
  const size_t elem = dtype_size(call.dtype);
  const size_t row = size_t{2} * ranks_;
  for (uint32_t from = 0; from < ranks_; ++from) {
    const uint64_t* sent = &matrix_[from * row];
    size_t offset = 0;
    for (uint32_t to = 0; to < rank_; ++to) offset += sent[to] * elem;
    const size_t bytes = sent[rank_] * elem;
    if (offset + bytes > limits::kSegmentSlotBytes) {
      return Status::failure(HAL_ERROR_INTERNAL, "alltoallv: a block outside its slot");
    }
    if (bytes != 0) {
      std::memcpy(static_cast<uint8_t*>(layout.recvbuf) + layout.recv_displs[from] * elem,
                  input(from) + offset, bytes);
    }
  }
  return {};
}

// One copy per block: each rank reads its blocks straight out of its peers'
// send buffers (process_vm_readv), at the addresses they published, as many
// bytes as its own receive counts say (check_own_receives held them to the
// peers' published counts). Then it says it is done reading, and the
// episode waits (await_readers) until every peer is done reading this
// rank's send buffer before the call completes.
Status ShmGroup::alltoallv_cross_memory(const hal_collective_call_t& call) {
  if (!cross_memory_) {
    return Status::failure(HAL_ERROR_INTERNAL,
                           "alltoallv: larger than a slot without cross-memory attach");
  }
  const hal_alltoallv_layout_t& layout = layout_of(call);
  const size_t elem = dtype_size(call.dtype);
  auto* received = static_cast<uint8_t*>(layout.recvbuf);
  const Clock::time_point started = Clock::now();
  for (uint32_t k = 0; k < ranks_; ++k) {
    // Staggered: rank r reads rank r + 1 first, so no peer serves all at once.
    const uint32_t from = (rank_ + k) % ranks_;
    const size_t bytes = layout.recv_counts[from] * elem;
    if (bytes == 0) continue;
    uint8_t* to = received + layout.recv_displs[from] * elem;
    if (from == rank_) {
      std::memcpy(to,
                  static_cast<const uint8_t*>(layout.sendbuf) + layout.send_displs[rank_] * elem,
                  bytes);
      continue;
    }
    const uint64_t address = counts(from)[2 * ranks_ + rank_];
    if (const int error = read_across(pids_[from], address, to, bytes); error != 0) {
      return Status::failure(HAL_ERROR_REMOTE,
                             "alltoallv: rank " + std::to_string(rank_) + " could not read " +
                                 std::to_string(bytes) + " bytes of rank " + std::to_string(from) +
                                 "'s send buffer (process_vm_readv: " + std::strerror(error) + ")");
    }
  }
  read_took_ = Clock::now() - started;
  line(rank_).done.store(episode_, std::memory_order_seq_cst);
  ring();
  phase_ = Phase::kWaitingForReaders;
  return {};
}

bool ShmGroup::readers_done() const noexcept {
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (line(r).done.load(std::memory_order_seq_cst) < episode_) return false;
  }
  return true;
}

// A peer whose read failed marks the segment broken before it says done:
// the call fails on this rank too, not only on the reader's.
Status ShmGroup::await_readers(const Deadline& deadline) {
  // The peers read about as much as this rank did, and started about when
  // it did: they are busy, not late. Polling (without giving the core away,
  // which on a loaded host costs a whole time slice) for as long again as
  // this rank's own reads took, at most 2 ms, sees them finish.
  const Clock::time_point until =
      Clock::now() + std::min<Clock::duration>(read_took_, std::chrono::milliseconds(2));
  for (uint32_t i = 1; !readers_done(); ++i) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && Clock::now() > until) break;
  }
  Status status = wait_for(deadline, "waiting for the peers to read this rank's send buffer",
                           [this] { return readers_done(); });
  if (status.ok() &&
      static_cast<const HeaderLine*>(mapping_)->broken.load(std::memory_order_acquire) != 0) {
    return Status::failure(HAL_ERROR_REMOTE,
                           "a peer process failed while reading this rank's send buffer (it "
                           "marked the shared segment)");
  }
  return status;
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
  // A mismatch or a refused forced path is everyone's verdict and leaves the
  // ranks in step; any other failure leaves this rank behind, so its peers
  // must stop waiting for it.
  if (!in_step(status)) fail();
  line(rank_).done.store(episode_, std::memory_order_seq_cst);
  ring();
  return status;
}

Status run_batch(Transport& transport, ShmGroup* shm, std::span<const hal_collective_call_t> calls,
                 const Deadline& deadline, std::vector<uint8_t>& scratch, const Chooser& chooser) {
  if (shm != nullptr && ShmGroup::handshakes(calls)) {
    Status status = shm->run(calls.front(), deadline, chooser, [&](const DecidedPath& decided) {
      return run_p2p(transport, calls, deadline, scratch, chooser, &decided);
    });
    if (!in_step(status)) transport.fail();
    return status;
  }
  Status status = run_p2p(transport, calls, deadline, scratch, chooser);
  // This rank is unusable now: peers meeting it in the segment must not
  // wait. A mismatch reached its peers as a refused message already; a
  // refusal of a forced path happens on every rank before anything moves.
  if (!status.ok() && status.result != HAL_ERROR_UNSUPPORTED) {
    if (shm != nullptr) shm->fail();
    if (status.result != HAL_ERROR_ARGUMENT_MISMATCH) transport.fail();
  }
  return status;
}

}  // namespace hal::collective
