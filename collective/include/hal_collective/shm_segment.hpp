// A shared-memory segment that the ranks of one host map together: the one
// place that decides whether they can share, makes the segment, hands it
// over and checks it. Used by ShmGroup (small allreduces) and ShmTransport
// (messages).
//
// The ranks first exchange their host identity (boot id, host name, network
// and PID namespaces, effective user), their pid and their wish
// (HAL_COMM_SHM=0 says no), so all reach the same answer. Rank 0 then makes
// the segment (an anonymous memory file, backed in full and sealed before it
// is mapped: shm_handoff.hpp), invites the others over the set-up channel
// and passes them its descriptor over a Unix socket; each checks what it
// received before it maps it. Nothing of the segment has a name: it cannot
// be opened, truncated or left behind from outside, and it ends with its
// last rank. When it cannot be made or shared, every rank goes without, and
// says why.
#pragma once

#include "hal_collective/limits.hpp"
#include "hal_collective/p2p.hpp"
#include "hal_collective/shm_handoff.hpp"
#include "hal_collective/status.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hal::collective {

// How the ranks move their set-up bytes before they share memory: over a
// Transport (MPI), or over the loader's bootstrap broadcasts (a store).
class SetupChannel {
 public:
  virtual ~SetupChannel() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t ranks() const = 0;
  // Every rank's |bytes| from |mine| into |all| (rank r's at r * bytes).
  virtual Status all_gather(const void* mine, void* all, size_t bytes) = 0;
  // When the set-up must be over (the hand-over of the segment waits no longer).
  virtual Deadline deadline() const = 0;
};

// A SetupChannel over |transport|'s collective channel, each exchange
// under |deadline|.
class TransportSetup final : public SetupChannel {
 public:
  TransportSetup(Transport& transport, const Deadline& deadline)
      : transport_(transport), deadline_(deadline) {}
  uint32_t rank() const override { return transport_.rank(); }
  uint32_t ranks() const override { return transport_.ranks(); }
  Status all_gather(const void* mine, void* all, size_t bytes) override;
  Deadline deadline() const override { return deadline_; }

 private:
  Transport& transport_;
  Deadline deadline_;
};

class SharedSegment {
 public:
  // Groups of more ranks than this go without a segment (the transport's
  // rings grow with the square of the ranks).
  static constexpr uint32_t kMaxRanks = limits::kMaxSegmentRanks;

  // Every rank of |setup| calls this at set-up with its |wanted| wish. A
  // segment of |bytes|, which rank 0 has passed to |initialise| before
  // anyone else maps it; or nullptr with |out_reason| saying why not
  // (another host, more than kMaxRanks, a rank that does not want it, a
  // segment that could not be made, handed over or checked), the same
  // answer on every rank.
  // |out_status| is a failure of the set-up channel itself.
  static std::unique_ptr<SharedSegment> share(SetupChannel& setup, bool wanted, size_t bytes,
                                              const std::function<void(void*)>& initialise,
                                              Status& out_status, std::string& out_reason);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  void* data() const noexcept { return mapping_; }
  size_t size() const noexcept { return bytes_; }
  // Whether the process of rank |rank| (or of any other rank) has ended
  // (through a pidfd each, taken at set-up): a peer that died waits in the
  // segment for nobody, so a rank waiting on it fails at once instead of at
  // its deadline. Cheap (one poll), but not free: callers ask now and then.
  bool peer_exited(uint32_t rank) const noexcept;
  bool any_peer_exited() const noexcept;

 private:
  SharedSegment(void* mapping, size_t bytes, std::vector<UniqueFd> peer_pidfds)
      : mapping_(mapping), bytes_(bytes), peer_pidfds_(std::move(peer_pidfds)) {}
  void* mapping_;
  size_t bytes_;
  std::vector<UniqueFd> peer_pidfds_;  // per rank; none for this rank and where pidfds are missing
};

// Whether HAL_COMM_SHM lets this process share memory with its peers
// (unset or anything but "0").
bool shm_wanted() noexcept;

}  // namespace hal::collective
