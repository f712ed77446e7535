// The shared segment itself and how rank 0 hands it to the other ranks of
// its host, so that nothing outside the job can end its life, change its
// size or find it left behind.
//
// The segment is an anonymous memory file (memfd_create): it has no name in
// any file system, so no process can open it by name, a full /dev/shm does
// not touch it, and it is gone with the last descriptor and mapping, however
// its ranks end. It is backed in full when made (fallocate: no later page
// fault can fail for want of memory, which would be SIGBUS) and sealed
// (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before anyone maps it, so no
// holder of a descriptor, however it got one, can truncate or grow it.
//
// Rank 0 passes the descriptor over a Unix socket bound in the abstract
// namespace under a fresh random name (no file; it goes with the process)
// with SCM_RIGHTS. A peer is served only if the kernel says the connection
// comes from the process of the rank it claims, of this user (SO_PEERCRED),
// and it presents the set-up's random token, which only the ranks learn over
// their set-up channel; a peer sends the token only to a socket the kernel
// says belongs to rank 0's process of this user. Every descriptor received
// is checked (a memory file sealed as above, of the agreed size, backed in
// full) before it is mapped.
#pragma once

#include "hal_collective/status.hpp"
#include "hal_util/secure_file.hpp"

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hal::collective {

using util::UniqueFd;

// A segment of |bytes| as described above; an invalid descriptor and |why|
// when it cannot be made (memfd_create refused, no memory to back it, a
// file-size limit below |bytes|).
UniqueFd make_sealed_segment(size_t bytes, std::string& why);

// Whether |fd| is a segment as make_sealed_segment makes them: a memory file
// sealed against shrinking, growing and further seals, of exactly |bytes|,
// backed in full. |why| says which rule it breaks.
bool is_sealed_segment(int fd, size_t bytes, std::string& why);

// What rank 0 tells the others over the set-up channel: where to fetch the
// segment, and the token that proves they are ranks of this set-up. A
// fixed-size record of plain bytes (it travels as is).
struct SegmentInvitation {
  static constexpr size_t kNameBytes = 48;
  char socket_name[kNameBytes];   // abstract-namespace name, NUL-terminated; "" = none
  std::array<uint8_t, 32> token;  // from getrandom
};

// Rank 0's side: the listening socket and the token.
class SegmentHost {
 public:
  // A socket under a fresh random name; nullptr and |why| when none.
  static std::unique_ptr<SegmentHost> open(std::string& why);
  ~SegmentHost();
  SegmentHost(const SegmentHost&) = delete;
  SegmentHost& operator=(const SegmentHost&) = delete;

  const SegmentInvitation& invitation() const noexcept { return invitation_; }

  // Passes |segment| once to each rank r != 0 of |pids| (pids[r] its
  // process) that connects from that process, of this user, with the token
  // and its rank. Returns when every rank has it; false with |why| when a
  // peer's process ends (|peer_exited|), or |deadline| passes or the set-up
  // is aborted first. Connections from anyone else are closed unanswered.
  template <class PeerExited>
  bool serve(int segment, const std::vector<pid_t>& pids, const Deadline& deadline,
             PeerExited peer_exited, std::string& why);

 private:
  SegmentHost(UniqueFd listener, const SegmentInvitation& invitation);
  // One pass: accepts and answers what is waiting (|served| per rank).
  bool serve_once(int segment, const std::vector<pid_t>& pids, std::vector<uint8_t>& served,
                  std::string& why);

  struct Pending;
  UniqueFd listener_;
  SegmentInvitation invitation_;
  std::vector<Pending> pending_;  // accepted, request not read whole yet
};

// A peer's side: connects to |invitation|'s socket, which must belong to
// process |host_pid| of this user, presents the token and |rank|, and
// returns the descriptor rank 0 passed (not yet checked: see
// is_sealed_segment). Retries a full accept queue until |deadline|.
UniqueFd fetch_segment(const SegmentInvitation& invitation, uint32_t rank, pid_t host_pid,
                       const Deadline& deadline, std::string& why);

// Seams for the tests (tests/collectives/shm_handoff_test.cpp) to play a
// machine without memory, a process that tampers with the segment, a forger
// or a rank that dies during set-up. Process-wide; empty unless a test sets
// them (before its ranks start).
struct SegmentSeams {
  int backing_error = 0;  // make_sealed_segment fails as if fallocate said this errno
  std::function<void(int segment)> made;  // rank 0: the segment is sealed and mapped, not offered
  std::function<int(int segment)>
      passed;  // rank 0: the descriptor to pass instead (-1: the segment)
};
void set_segment_seams_for_testing(SegmentSeams seams);
SegmentSeams segment_seams();

// How long SegmentHost::serve sleeps between passes, in milliseconds: a
// wake to look at the deadline, the abort flag and the peers' processes.
inline constexpr int kServePollMs = 10;

template <class PeerExited>
bool SegmentHost::serve(int segment, const std::vector<pid_t>& pids, const Deadline& deadline,
                        PeerExited peer_exited, std::string& why) {
  std::vector<uint8_t> served(pids.size(), 0);
  if (!served.empty()) served[0] = 1;  // rank 0 is this process
  while (true) {
    if (!serve_once(segment, pids, served, why)) return false;
    bool all = true;
    for (uint32_t r = 0; r < served.size(); ++r) {
      if (served[r]) continue;
      all = false;
      if (peer_exited(r)) {
        why = "the process of rank " + std::to_string(r) + " ended during set-up";
        return false;
      }
    }
    if (all) return true;
    if (deadline.is_aborted()) {
      why = "the set-up was aborted while rank 0 handed out the segment";
      return false;
    }
    if (Clock::now() >= deadline.at) {
      why = "a rank did not fetch the segment before the deadline";
      return false;
    }
  }
}

}  // namespace hal::collective
