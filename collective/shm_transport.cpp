#include "hal_collective/shm_transport.hpp"

#include "hal_collective/bytes.hpp"

#include "hal_collective/limits.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

namespace hal::collective {

namespace {

using limits::kMaxRing;
using limits::kMinRing;
using limits::kRingBudget;
constexpr uint32_t kChannels = 2;
// The peers' processes are looked at once every this many polls: a poll is
// a few cache-line reads, a look a system call.
constexpr uint32_t kPollsPerLivenessCheck = 1024;

struct alignas(64) SegmentHeader {
  std::atomic<uint32_t> broken{0};
};
struct alignas(64) Cursor {
  std::atomic<uint64_t> value{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the segment's atomics are shared between processes: they must be lock-free");

// What precedes every message in a ring.
struct MessageHeader {
  uint64_t sequence;
  uint64_t length;
  uint32_t tag;
  uint32_t check;
};
static_assert(sizeof(MessageHeader) == 24);

uint32_t check_word(uint64_t sequence, uint64_t length, uint32_t tag) {
  uint64_t mixed = sequence * 0x9e3779b97f4a7c15ull ^ length * 0xc2b2ae3d27d4eb4full ^
                   (uint64_t{tag} << 17) ^ 0x48414c5f53484dull;
  mixed ^= mixed >> 29;
  mixed *= 0xbf58476d1ce4e5b9ull;
  return static_cast<uint32_t>(mixed ^ (mixed >> 32));
}

size_t rings_of(uint32_t ranks) {
  return size_t{kChannels} * ranks * ranks;
}

size_t ring_bytes_for(uint32_t ranks) {
  const size_t rings = rings_of(ranks);
  return std::clamp(kRingBudget / rings / kPageBytes * kPageBytes, kMinRing, kMaxRing);
}

// Copies |bytes| into the ring of |capacity| at stream position |at|, or
// out of it: two pieces when it wraps. Positions are this rank's own.
void copy_into(uint8_t* ring, size_t capacity, uint64_t at, const uint8_t* from, size_t bytes) {
  if (bytes == 0) return;  // |from| may be null then
  const size_t offset = static_cast<size_t>(at % capacity);
  const size_t first = std::min(bytes, capacity - offset);
  std::memcpy(ring + offset, from, first);
  std::memcpy(ring, from + first, bytes - first);
}
void copy_out(const uint8_t* ring, size_t capacity, uint64_t at, uint8_t* to, size_t bytes) {
  if (bytes == 0) return;
  const size_t offset = static_cast<size_t>(at % capacity);
  const size_t first = std::min(bytes, capacity - offset);
  std::memcpy(to, ring + offset, first);
  std::memcpy(to + first, ring, bytes - first);
}

}  // namespace

// One ring's cursors, each on its own cache line: the sender's total bytes
// written, the receiver's total bytes taken, and the receiver's verdict on a
// message it refused (its sequence + 1).
struct ShmTransport::RingControl {
  Cursor head;
  Cursor tail;
  Cursor rejected;
};

struct ShmTransport::Op {
  bool is_send;
  uint32_t peer;
  uint32_t local_ring;  // peer * kChannels + channel
  uint32_t ring;        // in the segment
  uint8_t* data;
  size_t bytes;
  uint32_t tag;
  uint64_t sequence;
  size_t moved = 0;  // header and payload bytes through the ring
  uint64_t end = 0;  // send: the stream position after its last byte
  bool done = false;
};

std::unique_ptr<ShmTransport> ShmTransport::create(SetupChannel& setup, bool wanted,
                                                   Status& out_status, std::string& out_reason) {
  const uint32_t ranks = setup.ranks();
  // More ranks than kMaxRanks are declined by share(): no size to compute.
  const uint32_t served = std::min(ranks, SharedSegment::kMaxRanks);
  const size_t ring_bytes = ring_bytes_for(served);
  const size_t rings = rings_of(served);
  auto segment = SharedSegment::share(
      setup, wanted, controls_bytes(served) + ring_bytes * rings,
      [rings](void* mapping) {
        new (mapping) SegmentHeader{};
        auto* control =
            reinterpret_cast<RingControl*>(static_cast<uint8_t*>(mapping) + sizeof(SegmentHeader));
        for (size_t i = 0; i < rings; ++i) new (control + i) RingControl{};
      },
      out_status, out_reason);
  if (!segment) return nullptr;
  return std::unique_ptr<ShmTransport>(
      new ShmTransport(std::move(segment), setup.rank(), ranks, ring_bytes));
}

ShmTransport::ShmTransport(std::unique_ptr<SharedSegment> segment, uint32_t rank, uint32_t ranks,
                           size_t ring_bytes)
    : segment_(std::move(segment)),
      base_(static_cast<uint8_t*>(segment_->data())),
      rank_(rank),
      ranks_(ranks),
      ring_bytes_(ring_bytes),
      sent_(size_t{kChannels} * ranks),
      taken_(size_t{kChannels} * ranks),
      send_seq_(size_t{kChannels} * ranks),
      recv_seq_(size_t{kChannels} * ranks),
      send_busy_(size_t{kChannels} * ranks),
      recv_busy_(size_t{kChannels} * ranks) {}

ShmTransport::~ShmTransport() = default;

uint32_t ShmTransport::ring_index(uint32_t from, uint32_t to, Channel channel) const noexcept {
  return (from * ranks_ + to) * kChannels + static_cast<uint32_t>(channel);
}

ShmTransport::RingControl& ShmTransport::control(uint32_t ring) const noexcept {
  return reinterpret_cast<RingControl*>(base_ + sizeof(SegmentHeader))[ring];
}

// The rings' cursors come first, then their bytes, each ring's page-aligned.
size_t ShmTransport::controls_bytes(uint32_t ranks) {
  return round_up(sizeof(SegmentHeader) + sizeof(RingControl) * rings_of(ranks), kPageBytes);
}

uint8_t* ShmTransport::ring_data(uint32_t ring) const noexcept {
  return base_ + controls_bytes(ranks_) + ring_bytes_ * ring;
}

uint8_t* ShmTransport::ring_for_testing(uint32_t peer, Channel channel) const noexcept {
  return ring_data(ring_index(rank_, peer, channel));
}

bool ShmTransport::broken() const noexcept {
  return reinterpret_cast<const SegmentHeader*>(base_)->broken.load(std::memory_order_acquire) != 0;
}

bool ShmTransport::any_peer_exited() const noexcept {
  return segment_->any_peer_exited();
}

void ShmTransport::fail() noexcept {
  reinterpret_cast<SegmentHeader*>(base_)->broken.store(1, std::memory_order_release);
}

Status ShmTransport::post_send(uint32_t peer, const void* data, size_t bytes, uint32_t tag,
                               Channel channel) {
  if (peer >= ranks_) {
    return Status::failure(HAL_ERROR_INVALID_ARGUMENT, "a send to a rank that does not exist");
  }
  const uint32_t local = peer * kChannels + static_cast<uint32_t>(channel);
  ops_.push_back({true, peer, local, ring_index(rank_, peer, channel),
                  const_cast<uint8_t*>(static_cast<const uint8_t*>(data)), bytes, tag,
                  send_seq_[local]++});
  return {};
}

Status ShmTransport::post_recv(uint32_t peer, void* data, size_t bytes, uint32_t tag,
                               Channel channel) {
  if (peer >= ranks_) {
    return Status::failure(HAL_ERROR_INVALID_ARGUMENT, "a receive from a rank that does not exist");
  }
  const uint32_t local = peer * kChannels + static_cast<uint32_t>(channel);
  ops_.push_back({false, peer, local, ring_index(peer, rank_, channel), static_cast<uint8_t*>(data),
                  bytes, tag, recv_seq_[local]++});
  return {};
}

Status ShmTransport::corrupt(const char* what) {
  fail();
  return Status::failure(HAL_ERROR_REMOTE, std::string("the shared segment is corrupt: ") + what);
}

// Writes as much of |op| as the ring has room for; done once the receiver
// has taken all of it.
bool ShmTransport::progress_send(Op& op, Status& verdict) {
  RingControl& ring = control(op.ring);
  uint64_t& head = sent_[op.local_ring];
  const size_t total = sizeof(MessageHeader) + op.bytes;
  const uint64_t tail = ring.tail.value.load(std::memory_order_acquire);
  if (tail > head || head - tail > ring_bytes_) {
    verdict = corrupt("a receiver's cursor is outside its ring");
    return false;
  }
  if (ring.rejected.value.load(std::memory_order_acquire) != 0) {
    verdict = Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                              "a peer called a different collective, count, dtype, op or root "
                              "(it refused this rank's message)");
    return false;
  }
  if (op.moved < total) {
    const size_t room = ring_bytes_ - static_cast<size_t>(head - tail);
    // The header goes in whole, so a receiver never sees half of one.
    if (op.moved == 0 && room < sizeof(MessageHeader)) return false;
    uint8_t* data = ring_data(op.ring);
    size_t budget = std::min(room, total - op.moved);
    if (op.moved == 0) {
      const MessageHeader header{op.sequence, op.bytes, op.tag,
                                 check_word(op.sequence, op.bytes, op.tag)};
      copy_into(data, ring_bytes_, head, reinterpret_cast<const uint8_t*>(&header), sizeof header);
      head += sizeof header;
      op.moved = sizeof header;
      budget -= sizeof header;
    }
    const size_t payload = op.moved - sizeof(MessageHeader);
    copy_into(data, ring_bytes_, head, op.data + payload, budget);
    head += budget;
    op.moved += budget;
    ring.head.value.store(head, std::memory_order_release);
    if (op.moved == total) op.end = head;
  }
  return op.moved == total && tail >= op.end;
}

// Reads what has come of |op|: its header (checked, then matched against
// what this rank expects), then its bytes.
bool ShmTransport::progress_recv(Op& op, Status& verdict) {
  RingControl& ring = control(op.ring);
  uint64_t& tail = taken_[op.local_ring];
  const uint64_t before = tail;
  const uint64_t head = ring.head.value.load(std::memory_order_acquire);
  if (head < tail || head - tail > ring_bytes_) {
    verdict = corrupt("a sender's cursor is outside its ring");
    return false;
  }
  size_t available = static_cast<size_t>(head - tail);
  const uint8_t* data = ring_data(op.ring);
  if (op.moved == 0) {
    if (available < sizeof(MessageHeader)) return false;
    MessageHeader header{};
    copy_out(data, ring_bytes_, tail, reinterpret_cast<uint8_t*>(&header), sizeof header);
    if (header.check != check_word(header.sequence, header.length, header.tag) ||
        header.sequence != op.sequence) {
      verdict = corrupt("a message header fails its check");
      return false;
    }
    if (header.tag != op.tag || header.length != op.bytes) {
      // Refused, not taken: the sender sees the verdict instead of its end.
      ring.rejected.value.store(op.sequence + 1, std::memory_order_release);
      verdict = Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                                "a peer called a different collective, count, dtype, op or root");
      return false;
    }
    tail += sizeof header;
    op.moved = sizeof header;
    available -= sizeof header;
  }
  const size_t payload = op.moved - sizeof(MessageHeader);
  const size_t take = std::min(available, op.bytes - payload);
  copy_out(data, ring_bytes_, tail, op.data + payload, take);
  tail += take;
  op.moved += take;
  if (tail != before) ring.tail.value.store(tail, std::memory_order_release);
  return op.moved == sizeof(MessageHeader) + op.bytes;
}

bool ShmTransport::progress(Status& verdict) {
  // Messages on one ring go in the order they were posted: a later one
  // waits until the one before it is all written (send) or read (recv).
  std::fill(send_busy_.begin(), send_busy_.end(), uint8_t{0});
  std::fill(recv_busy_.begin(), recv_busy_.end(), uint8_t{0});
  bool all_done = true;
  for (Op& op : ops_) {
    if (op.done) continue;
    uint8_t& busy = (op.is_send ? send_busy_ : recv_busy_)[op.local_ring];
    if (!busy) op.done = op.is_send ? progress_send(op, verdict) : progress_recv(op, verdict);
    if (!verdict.ok()) return true;
    // A send all written lets the next one on its ring start writing.
    busy = op.is_send ? op.moved < sizeof(MessageHeader) + op.bytes : !op.done;
    all_done &= op.done;
  }
  return all_done;
}

// Whether the process of a peer this rank still waits for has ended.
bool ShmTransport::peer_lost(Status& verdict) const {
  for (const Op& op : ops_) {
    if (op.done || !segment_->peer_exited(op.peer)) continue;
    verdict = Status::failure(HAL_ERROR_REMOTE, "a peer process exited");
    return true;
  }
  return false;
}

Status ShmTransport::wait_all(const Deadline& deadline) {
  if (!out_of_step_.ok()) {
    ops_.clear();
    return out_of_step_;
  }
  Status verdict;
  uint32_t polls = 0;
  auto moved = [this] {
    size_t total = 0;
    for (const Op& op : ops_) total += op.moved;
    return total;
  };
  // wait_until backs off (yields, then naps of 20 us) the longer it polls.
  // A message larger than its ring streams through in many passes, each
  // waiting for the peer to make room or to write more: a wait that ended
  // because bytes moved starts again from spinning, so a transfer that keeps
  // moving never naps between its pieces (measured: a 16 MiB alltoallv of 2
  // processes spent most of its time in those naps, 10-50x MPI's time).
  Status waited;
  for (bool finished = false; !finished && waited.ok();) {
    waited = wait_until(deadline, "waiting for messages through the shared segment", [&]() -> bool {
      const size_t before = moved();
      if (progress(verdict)) return finished = true;
      if (broken()) {
        finished = true;
        // A refusal comes before the mark of the rank that refused.
        if (progress(verdict) && !verdict.ok()) return true;
        verdict = Status::failure(HAL_ERROR_REMOTE,
                                  "a peer process failed or aborted (it marked the shared "
                                  "segment)");
        return true;
      }
      if (++polls % kPollsPerLivenessCheck == 0 && peer_lost(verdict)) return finished = true;
      return moved() != before;
    });
  }
  ops_.clear();
  Status result = !waited.ok() ? waited : verdict;
  if (!result.ok()) out_of_step_ = result;
  return result;
}

}  // namespace hal::collective
