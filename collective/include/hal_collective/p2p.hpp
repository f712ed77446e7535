// Collectives between processes, built on point-to-point messages: the
// algorithms (ring reduce-scatter and all-gather, direct exchange for small
// messages, pairwise all-to-all) over a Transport that MPI (cpu plugin) or
// the TCP store (the loader's fallback) or shared memory (ShmTransport)
// provides.
//
// Every message carries the signature of the call it belongs to (an MPI tag,
// a header on the store), so ranks that disagree on a call's count, dtype,
// op or root fail with HAL_ERROR_ARGUMENT_MISMATCH instead of exchanging
// the wrong bytes.
#pragma once

#include "hal_collective/path.hpp"
#include "hal_collective/status.hpp"

#include <memory>
#include <span>
#include <vector>

namespace hal::collective {

// Point-to-point calls and collectives travel on separate channels, so a
// send left unmatched by one batch never meets a collective of the next.
enum class Channel : uint32_t { kCollective = 0, kPointToPoint = 1 };

class Transport {
 public:
  virtual ~Transport() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t ranks() const = 0;
  // Posts a message to |peer|; |data| stays valid until wait_all returns.
  virtual Status post_send(uint32_t peer, const void* data, size_t bytes, uint32_t tag,
                           Channel channel) = 0;
  // Posts the receipt of the next message from |peer| into exactly |bytes|.
  virtual Status post_recv(uint32_t peer, void* data, size_t bytes, uint32_t tag,
                           Channel channel) = 0;
  // Completes every posted message. A received message with another tag or
  // size is HAL_ERROR_ARGUMENT_MISMATCH; a lost peer HAL_ERROR_REMOTE.
  virtual Status wait_all(const Deadline& deadline) = 0;
  // Tells the peers this rank is out of step (it failed or aborted), so
  // their waits on it fail at once where the transport can say so (shared
  // memory); callable from any thread. MPI's peers wait for the deadline.
  virtual void fail() noexcept {}
  // Whether the process of a peer is known to have ended (where the
  // transport watches them: shared memory).
  virtual bool any_peer_exited() const noexcept { return false; }
};

// A path already decided for a single call (by a shared segment's episode):
// direct or ring, and whether an alltoallv's counts were checked there (then
// only its blocks travel).
struct DecidedPath {
  Path path = Path::kDirect;
  bool counts_checked = false;
};

// Runs one rank's |calls| over |transport|: its sends and recvs posted
// together, its collectives in order, each on the path |chooser| picks
// (direct or ring), or on |decided| where given (a batch of one call).
// |scratch| is the rank's reusable working memory (never freed between
// calls: fresh pages cost ~11 us each on the VMs we target, which is what
// makes Open MPI slow at 64 MiB).
Status run_p2p(Transport& transport, std::span<const hal_collective_call_t> calls,
               const Deadline& deadline, std::vector<uint8_t>& scratch, const Chooser& chooser,
               const DecidedPath* decided = nullptr);

}  // namespace hal::collective
