// Point-to-point messages between the processes of one host through a
// shared-memory segment: the cpu plugin's transport when its ranks met over
// the loader's store (the store serves set-up only).
//
// Every ordered pair of ranks (sender, receiver) has, per channel, a
// bounded ring in the segment: the sender writes a message (a header with
// its sequence number, length, tag and a check word, then its bytes) as
// far as the ring has room and the receiver reads it out as it comes, so a
// message of any size streams through in ring-sized pieces. A send
// completes once the receiver has taken all of it, so a receiver that finds
// another tag or length rejects the message and both sides fail with
// HAL_ERROR_ARGUMENT_MISMATCH. Waits spin, then yield, under the deadline
// and abort; a rank that fails marks the segment broken, and a peer whose
// process ended is seen through its pidfd: both are HAL_ERROR_REMOTE.
//
// Everything read from the segment is checked before it is used (cursors
// within a ring's length of ours, a header's check word and sequence), and
// every copy is bounded by this rank's own cursors and buffers, so a peer
// that writes garbage makes this rank fail, never write out of bounds.
#pragma once

#include "hal_collective/p2p.hpp"
#include "hal_collective/shm_segment.hpp"

#include <memory>
#include <string>
#include <vector>

namespace hal::collective {

class ShmTransport final : public Transport {
 public:
  // Every rank of |setup| calls this with its |wanted| wish; the same answer
  // on every rank, as SharedSegment::share gives it.
  static std::unique_ptr<ShmTransport> create(SetupChannel& setup, bool wanted, Status& out_status,
                                              std::string& out_reason);
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  uint32_t rank() const override { return rank_; }
  uint32_t ranks() const override { return ranks_; }
  Status post_send(uint32_t peer, const void* data, size_t bytes, uint32_t tag,
                   Channel channel) override;
  Status post_recv(uint32_t peer, void* data, size_t bytes, uint32_t tag, Channel channel) override;
  Status wait_all(const Deadline& deadline) override;
  void fail() noexcept override;
  bool any_peer_exited() const noexcept override;

  // The capacity of each ring, in bytes.
  size_t ring_bytes() const noexcept { return ring_bytes_; }
  // The bytes of the ring from this rank to |peer| on |channel|: tests play
  // a peer that corrupts what it sent.
  uint8_t* ring_for_testing(uint32_t peer, Channel channel) const noexcept;

 private:
  struct Op;
  struct RingControl;

  ShmTransport(std::unique_ptr<SharedSegment> segment, uint32_t rank, uint32_t ranks,
               size_t ring_bytes);
  static size_t controls_bytes(uint32_t ranks);
  uint32_t ring_index(uint32_t from, uint32_t to, Channel channel) const noexcept;
  RingControl& control(uint32_t ring) const noexcept;
  uint8_t* ring_data(uint32_t ring) const noexcept;
  bool broken() const noexcept;
  // One pass over the posted messages: true when all are complete or one
  // failed (|verdict|).
  bool progress(Status& verdict);
  bool progress_send(Op& op, Status& verdict);
  bool progress_recv(Op& op, Status& verdict);
  bool peer_lost(Status& verdict) const;
  Status corrupt(const char* what);

  std::unique_ptr<SharedSegment> segment_;
  uint8_t* base_;  // segment_'s
  uint32_t rank_;
  uint32_t ranks_;
  size_t ring_bytes_;
  // Per peer and channel (peer * 2 + channel): this rank's own cursors, never
  // read back from the segment, and the next message's sequence number.
  std::vector<uint64_t> sent_;      // bytes written to the ring to the peer
  std::vector<uint64_t> taken_;     // bytes read from the ring from the peer
  std::vector<uint64_t> send_seq_;  // messages posted to the peer
  std::vector<uint64_t> recv_seq_;  // messages posted from the peer
  std::vector<Op> ops_;
  // Scratch of progress(): an earlier message on the ring is unfinished.
  std::vector<uint8_t> send_busy_;
  std::vector<uint8_t> recv_busy_;
  Status out_of_step_;  // a failed wait leaves the rings out of step for good
};

}  // namespace hal::collective
