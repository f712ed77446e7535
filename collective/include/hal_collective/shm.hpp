// Collectives between processes of one host through a shared-memory segment.
//
// MPI's shared-memory transport makes a small allreduce between two local
// processes cost ~0.5 us; the same call as point-to-point messages costs
// several times that. Here the ranks meet in a segment they all map: each
// call is an episode in which every rank publishes the call's signature
// (and an alltoallv's counts) in its line and, where it may travel here, its
// input in its slot, waits for the others' (spinning, then asleep on the
// segment's doorbell, shm_doorbell.hpp, under the call's deadline and
// abort), and then either reduces all inputs itself,
// in rank order (allreduce: one round, identical bytes on every rank), or
// copies its blocks out of its peers' slots (alltoallv). Which calls move
// their data here is the path chooser's (path.hpp, limits.hpp); an
// alltoallv's is decided once every rank's counts are in, so all ranks see
// the same largest send total and reach the same path.
//
// Every single-collective batch goes through the episode's handshake, also
// when its data then travels over the transport, so ranks that disagree on
// a call fail with HAL_ERROR_ARGUMENT_MISMATCH on every rank whichever path
// each would take. A rank that fails or aborts marks the segment broken:
// its peers fail at once with HAL_ERROR_REMOTE.
//
// An alltoallv larger than a slot goes through the episode too where the
// kernel lets every rank read every peer's memory (cross-memory attach,
// process_vm_readv; probed once at set-up between the actual ranks): each
// rank publishes the addresses of its send blocks next to its counts, reads
// its own blocks straight out of its peers' send buffers into its receive
// buffer (one copy, where the transport's rings copy twice), and returns once
// every peer is done reading its send buffer. What a rank reads is bounded by
// its own receive counts: a peer whose published count disagrees is an error,
// nothing is written out of bounds. Where the probe is refused (another
// user's process, Yama's ptrace_scope, a seccomp filter, HAL_COMM_CMA=0) the
// ranks keep the two-copy paths and say why (cross_memory_reason()).
//
// The segment is made, handed over and checked by SharedSegment
// (shm_segment.hpp), over the transport.
#pragma once

#include "hal_collective/p2p.hpp"
#include "hal_collective/path.hpp"
#include "hal_collective/status.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hal::collective {

class SharedSegment;
class SetupChannel;

// Whether HAL_COMM_CMA lets this process read its peers' memory (unset or
// anything but "0").
bool cross_memory_wanted() noexcept;

// Cross-memory attach at set-up: the rank's wish and, for tests, a fault
// that replaces the kernel's verdict on rank |self| reading |peer| (0:
// allowed, else the errno to report, as if the probe had been refused).
struct CrossMemoryOptions {
  bool wanted = true;
  std::function<int(uint32_t self, uint32_t peer)> refuse;
};

class ShmGroup {
 public:
  // Every rank of |transport| calls this at set-up, with |wanted| its own
  // wish (HAL_COMM_SHM=0 says no). The ranks exchange their host identity
  // and wishes, so all reach the same answer: a group, or nullptr with
  // |out_reason| saying why not (another host, a rank that does not want
  // it, a segment that could not be made or checked). |out_status| is a
  // failure of the transport itself (timeout, lost peer).
  // |cross_memory| as above: every rank probes reading every peer; all use
  // it only when all may.
  static std::unique_ptr<ShmGroup> create(Transport& transport, bool wanted,
                                          const Deadline& deadline, Status& out_status,
                                          std::string& out_reason,
                                          const CrossMemoryOptions& cross_memory = {});
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Whether a batch of these calls takes the episode's handshake (one
  // collective, not a send or recv).
  static bool handshakes(std::span<const hal_collective_call_t> calls) noexcept;

  // Runs the handshake of |call| and then its data: through the segment
  // where |chooser| picks it, else |transport_path|(DecidedPath) runs
  // them over the transport. Goes on with the episode a try_run of the
  // same call left unfinished, if any.
  template <class TransportPath>
  Status run(const hal_collective_call_t& call, const Deadline& deadline, const Chooser& chooser,
             TransportPath transport_path) {
    if (phase_ == Phase::kWaitingForReaders) return finish(await_readers(deadline));
    Status status = handshake(call, deadline, chooser);
    if (status.ok()) {
      const PathChoice choice = decide(call, chooser);
      if (!choice.ok()) {
        status = choice.refusal;  // the same verdict on every rank
      } else if (choice.path == Path::kSegment) {
        status = serve(call);
        if (status.ok() && phase_ == Phase::kWaitingForReaders) status = await_readers(deadline);
      } else {
        status = transport_path(DecidedPath{choice.path, call.kind == HAL_COLLECTIVE_ALLTOALLV});
      }
    }
    return finish(std::move(status));
  }

  // Tries the whole episode of |call| without waiting longer than
  // |patience| for the peers. True when it finished, with its outcome in
  // |out_status|. False when a peer has not come yet, or the chooser sent
  // the data elsewhere: the episode stays open (this rank's input may
  // already be published) and the next run(), of the same call, finishes
  // it. Never blocks past |patience|, so one thread may try the calls of
  // several ranks in turn. The clock is not read while the peers keep step
  // (a read costs about as much as the rest of an 8-byte call's overhead):
  // |out_first_look| is its first reading, a few dozen polls in, or
  // Clock::time_point{} when the episode ended before any.
  bool try_run(const hal_collective_call_t& call, const Chooser& chooser, Clock::duration patience,
               Status& out_status, Clock::time_point& out_first_look);

  // Marks the segment broken: peers waiting now or later fail at once.
  void fail() noexcept;

  // Whether alltoallvs larger than a slot are read across processes
  // (every rank's answer is the same), and if not, why not.
  bool cross_memory() const noexcept { return cross_memory_; }
  const std::string& cross_memory_reason() const noexcept { return cross_memory_reason_; }

 private:
  ShmGroup(std::unique_ptr<SharedSegment> segment, uint32_t rank, uint32_t ranks);

  // Where this rank's episode stands: a call in steps (try_run, then run)
  // picks it up where it stopped.
  // kWaitingForReaders: a cross-memory alltoallv has read its blocks; its
  // peers may still read this rank's send buffer.
  enum class Phase { kIdle, kWaitingForPrevious, kWaitingForArrivals, kWaitingForReaders };

  void begin() noexcept;
  bool previous_done() const noexcept;
  void post(const hal_collective_call_t& call, const Chooser& chooser) noexcept;
  bool all_arrived() const noexcept;
  void prefetch_published() const noexcept;
  Status check_signatures(const hal_collective_call_t& call) const;
  Status handshake(const hal_collective_call_t& call, const Deadline& deadline,
                   const Chooser& chooser);
  // The path of an arrived episode: an alltoallv's counts checked and its
  // largest send total taken from every rank's line.
  PathChoice decide(const hal_collective_call_t& call, const Chooser& chooser);
  Status serve(const hal_collective_call_t& call);
  Status reduce(const hal_collective_call_t& call);
  Status alltoallv(const hal_collective_call_t& call);
  Status alltoallv_cross_memory(const hal_collective_call_t& call);
  bool readers_done() const noexcept;
  Status await_readers(const Deadline& deadline);
  Status finish(Status status);
  Status probe_cross_memory(SetupChannel& setup, const CrossMemoryOptions& options);

  struct RankLine;
  RankLine& line(uint32_t rank) const noexcept;
  uint32_t set() const noexcept;  // the episode's set of signatures, counts and slots
  // send counts, then receive counts, then the send blocks' addresses
  uint64_t* counts(uint32_t rank) const noexcept;
  uint8_t* input(uint32_t rank) const noexcept;
  template <class Ready>
  Status wait_for(const Deadline& deadline, const char* what, Ready ready);
  void ring() const noexcept;  // wakes peers asleep in wait_for

  std::unique_ptr<SharedSegment> segment_;
  void* mapping_;  // segment_'s
  uint32_t rank_;
  uint32_t ranks_;
  uint64_t episode_ = 0;
  Phase phase_ = Phase::kIdle;
  std::vector<uint64_t> matrix_;  // the arrived alltoallv's counts, every rank's row
  size_t largest_send_ = 0;       // the arrived alltoallv's largest send total, in bytes
  Clock::duration read_took_{};   // this rank's reads of the last cross-memory alltoallv
  bool long_spin_ = false;        // wait_for polls for kSegmentLongSpin (its last sleep was short)
  bool cross_memory_ = false;
  std::string cross_memory_reason_;
  std::vector<int32_t> pids_;  // every rank's process (cross memory)
  uint64_t probe_token_ = 0;   // what the peers read here at set-up
};

// One batch of a rank whose peers are processes: a single collective
// through the segment's episode (its data through the segment or, as the
// chooser says, the transport), anything else over the transport. A
// failure other than a mismatch marks the transport (and the segment)
// broken, so the peers fail at once instead of at their deadline. The cpu
// plugin's ranks in processes run their calls here.
Status run_batch(Transport& transport, ShmGroup* shm, std::span<const hal_collective_call_t> calls,
                 const Deadline& deadline, std::vector<uint8_t>& scratch, const Chooser& chooser);

}  // namespace hal::collective
