// Collectives between processes of one host through a shared-memory segment.
//
// MPI's shared-memory transport makes a small allreduce between two local
// processes cost ~0.5 us; the same call as point-to-point messages costs
// several times that. Here the ranks meet in a segment they all map: each
// call is an episode in which every rank publishes its input and the call's
// signature in its slot, waits for the others' (spinning, then yielding,
// under the call's deadline and abort), and reduces all inputs itself, in
// rank order (one round, identical bytes on every rank). Only small
// allreduces move their data here: above 16 KiB the ring over the transport
// measured faster (a sliced variant through a shared result did not pay).
//
// Every single-collective batch goes through the episode's handshake, also
// when its data then travels over the transport, so ranks that disagree on
// a call fail with HAL_ERROR_ARGUMENT_MISMATCH on every rank whichever path
// each would take. A rank that fails or aborts marks the segment broken:
// its peers fail at once with HAL_ERROR_REMOTE.
//
// The segment is made, handed over and checked by SharedSegment
// (shm_segment.hpp), over the transport.
#pragma once

#include "hal_collective/p2p.hpp"
#include "hal_collective/status.hpp"

#include <memory>
#include <string>

namespace hal::collective {

class SharedSegment;

class ShmGroup {
 public:
  // The largest allreduce, in bytes, whose data goes through the segment.
  static constexpr size_t kMaxBytes = 16 * 1024;

  // Every rank of |transport| calls this at set-up, with |wanted| its own
  // wish (HAL_COMM_SHM=0 says no). The ranks exchange their host identity
  // and wishes, so all reach the same answer: a group, or nullptr with
  // |out_reason| saying why not (another host, a rank that does not want
  // it, a segment that could not be made or checked). |out_status| is a
  // failure of the transport itself (timeout, lost peer).
  static std::unique_ptr<ShmGroup> create(Transport& transport, bool wanted,
                                          const Deadline& deadline, Status& out_status,
                                          std::string& out_reason);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Whether a batch of these calls takes the episode's handshake (one
  // collective, not a send or recv).
  static bool handshakes(std::span<const hal_collective_call_t> calls) noexcept;

  // Whether the segment carries the data of |call| too (an allreduce of at
  // most kMaxBytes): its whole episode then runs here, and may be tried
  // with try_run.
  bool serves_data(const hal_collective_call_t& call) const noexcept;

  // Runs the handshake of |call| and, for an allreduce of at most
  // kMaxBytes, its data. |transport_path| runs the data of other calls
  // (the point-to-point algorithms) after the handshake. Goes on with the
  // episode a try_run of the same call left unfinished, if any.
  template <class TransportPath>
  Status run(const hal_collective_call_t& call, const Deadline& deadline,
             TransportPath transport_path) {
    Status status = handshake(call, deadline);
    if (status.ok()) status = serves_data(call) ? reduce(call) : transport_path();
    return finish(std::move(status));
  }

  // Tries the whole episode of |call|, which serves_data, without waiting
  // longer than |patience| for the peers. True when it finished, with its
  // outcome in |out_status|. False when a peer has not come yet: the
  // episode stays open (this rank's input may already be published) and
  // the next run(), of the same call, finishes it. Never blocks past
  // |patience|, so one thread may try the calls of several ranks in turn.
  // The clock is not read while the peers keep step (a read costs about as
  // much as the rest of an 8-byte call's overhead): |out_first_look| is its
  // first reading, a few dozen polls in, or Clock::time_point{} when the
  // episode ended before any.
  bool try_run(const hal_collective_call_t& call, Clock::duration patience, Status& out_status,
               Clock::time_point& out_first_look);

  // Marks the segment broken: peers waiting now or later fail at once.
  void fail() noexcept;

 private:
  ShmGroup(std::unique_ptr<SharedSegment> segment, uint32_t rank, uint32_t ranks);

  // Where this rank's episode stands: a call in steps (try_run, then run)
  // picks it up where it stopped.
  enum class Phase { kIdle, kWaitingForPrevious, kWaitingForArrivals };

  void begin() noexcept;
  bool previous_done() const noexcept;
  void post(const hal_collective_call_t& call) noexcept;
  bool all_arrived() const noexcept;
  Status check_signatures(const hal_collective_call_t& call) const;
  Status handshake(const hal_collective_call_t& call, const Deadline& deadline);
  Status reduce(const hal_collective_call_t& call);
  Status finish(Status status);

  struct RankLine;
  RankLine& line(uint32_t rank) const noexcept;
  uint8_t* input(uint32_t rank) const noexcept;
  template <class Ready>
  Status wait_for(const Deadline& deadline, const char* what, Ready ready);

  std::unique_ptr<SharedSegment> segment_;
  void* mapping_;  // segment_'s
  uint32_t rank_;
  uint32_t ranks_;
  uint64_t episode_ = 0;
  Phase phase_ = Phase::kIdle;
};

}  // namespace hal::collective
