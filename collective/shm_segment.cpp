#include "hal_collective/shm_segment.hpp"

#include "hal_util/env.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

namespace hal::collective {

namespace {

// A descriptor that becomes readable when process |pid| ends (-1: none,
// and that peer's end is seen only at the deadline).
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// Set-up messages travel with this tag on the collective channel, before
// any call's.
constexpr uint32_t kSetupTag = 0x7e01;
constexpr size_t kIdentityBytes = 256;

// What each rank says first: where it runs, and its pid (a peer's pid
// names the process the segment's socket serves, and is watched for its
// end).
struct Identity {
  std::array<char, kIdentityBytes> text;
  int32_t pid;
  int32_t reserved;
};

// What must match for two ranks to share a segment: the same boot of the
// same machine, the same network namespace (the hand-over socket lives in
// it), the same PID namespace (a peer's pid names the peer), the same user;
// and the wish of each, last.
std::array<char, kIdentityBytes> host_identity(bool wanted) {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  auto namespace_of = [](const char* path) {
    char target[128] = {};
    const ssize_t n = readlink(path, target, sizeof target - 1);
    return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
  };
  std::array<char, kIdentityBytes> identity{};
  std::snprintf(identity.data(), identity.size(), "%s|%s|%s|%s|%u|%d", boot.c_str(), host,
                namespace_of("/proc/self/ns/net").c_str(),
                namespace_of("/proc/self/ns/pid").c_str(), static_cast<unsigned>(geteuid()),
                wanted ? 1 : 0);
  return identity;
}

// The hand-over waits for the peers at most this long, and at most half
// the time left to set-up: a rank that has not fetched the segment by then
// (its process is slow, or it failed before it could say so) makes all go
// without, and the rest of the set-up still has time to agree on that.
constexpr auto kMaxHandOver = std::chrono::seconds(10);

Deadline hand_over_deadline(const Deadline& setup) {
  const auto now = Clock::now();
  const auto left = setup.at > now ? setup.at - now : Clock::duration::zero();
  return {now + std::min<Clock::duration>(left / 2, kMaxHandOver), setup.aborted};
}

// Maps |fd|'s |bytes| with every page present.
void* map_segment(int fd, size_t bytes, std::string& out_reason) {
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (mapping != MAP_FAILED) return mapping;
  out_reason = std::string("the segment could not be mapped: ") + std::strerror(errno);
  return nullptr;
}

bool exited(const UniqueFd& pidfd) {
  if (!pidfd.valid()) return false;
  pollfd watched{pidfd.get(), POLLIN, 0};
  return poll(&watched, 1, 0) > 0;
}

}  // namespace

Status TransportSetup::all_gather(const void* mine, void* all, size_t bytes) {
  Transport& t = transport_;
  auto* out = static_cast<uint8_t*>(all);
  std::memcpy(out + t.rank() * bytes, mine, bytes);
  for (uint32_t r = 0; r < t.ranks(); ++r) {
    if (r == t.rank()) continue;
    if (Status s = t.post_send(r, mine, bytes, kSetupTag, Channel::kCollective); !s.ok()) return s;
    if (Status s = t.post_recv(r, out + r * bytes, bytes, kSetupTag, Channel::kCollective);
        !s.ok()) {
      return s;
    }
  }
  return t.wait_all(deadline_);
}

bool shm_wanted() noexcept {
  const char* setting = util::env("HAL_COMM_SHM");
  return setting == nullptr || std::strcmp(setting, "0") != 0;
}

std::unique_ptr<SharedSegment> SharedSegment::share(SetupChannel& setup, bool wanted, size_t bytes,
                                                    const std::function<void(void*)>& initialise,
                                                    Status& out_status, std::string& out_reason) {
  const uint32_t ranks = setup.ranks();
  const uint32_t rank = setup.rank();
  // 1. Who can share: all ranks on one host, in one namespace, all willing.
  Identity mine{host_identity(wanted), static_cast<int32_t>(getpid()), 0};
  std::vector<Identity> identities(ranks);
  if (out_status = setup.all_gather(&mine, identities.data(), sizeof(Identity)); !out_status.ok()) {
    return nullptr;
  }
  bool same = ranks <= kMaxRanks;
  bool everyone_wants = true;
  // A peer's identity is bytes off the wire: only its first |length| are read,
  // and one without its terminator within the buffer matches nothing.
  const size_t length_of_mine = strnlen(mine.text.data(), kIdentityBytes);
  for (const Identity& other : identities) {
    const size_t length = strnlen(other.text.data(), kIdentityBytes);
    everyone_wants &= length > 0 && length < kIdentityBytes && other.text[length - 1] == '1';
    // Equal up to the last character, the wish.
    same &= length == length_of_mine &&
            std::memcmp(mine.text.data(), other.text.data(), length_of_mine - 1) == 0;
  }
  if (!everyone_wants) {
    out_reason = "a rank has HAL_COMM_SHM=0";
    return nullptr;
  }
  if (!same) {
    out_reason = ranks > kMaxRanks ? "more ranks than the segment serves"
                                   : "the ranks are not all on one host, user and namespace";
    return nullptr;
  }
  // A pid off the wire names a process of this user in this PID namespace
  // (the identities say so); it is only watched, never signalled.
  std::vector<pid_t> pids(ranks);
  std::vector<UniqueFd> pidfds(ranks);
  for (uint32_t r = 0; r < ranks; ++r) {
    pids[r] = identities[r].pid;
    if (r != rank && pids[r] > 0) pidfds[r] = UniqueFd(open_pidfd(pids[r]));
  }
  // 2. Rank 0 makes the segment and invites the others to fetch it.
  const SegmentSeams seams = segment_seams();
  void* mapping = nullptr;
  UniqueFd segment;
  std::unique_ptr<SegmentHost> host;
  SegmentInvitation invitation{};  // no socket name: no segment
  if (rank == 0) {
    segment = make_sealed_segment(bytes, out_reason);
    if (segment.valid()) mapping = map_segment(segment.get(), bytes, out_reason);
    if (mapping != nullptr) host = SegmentHost::open(out_reason);
    if (host) {
      initialise(mapping);
      if (seams.made) seams.made(segment.get());
      invitation = host->invitation();
    } else if (mapping != nullptr) {
      munmap(mapping, bytes);
      mapping = nullptr;
    }
  }
  std::vector<SegmentInvitation> invitations(ranks);
  out_status = setup.all_gather(&invitation, invitations.data(), sizeof(SegmentInvitation));
  // 3. The hand-over: rank 0 passes its descriptor; each peer checks what
  // it got before it maps it. Then no descriptor or socket is left.
  const Deadline hand_over = hand_over_deadline(setup.deadline());
  if (out_status.ok() && host) {
    const int forged = seams.passed ? seams.passed(segment.get()) : -1;
    host->serve(
        forged >= 0 ? forged : segment.get(), pids, hand_over,
        [&](uint32_t r) { return exited(pidfds[r]); }, out_reason);
  } else if (out_status.ok() && rank != 0) {
    if (invitations[0].socket_name[0] == '\0') {
      out_reason = "rank 0 could not make the segment";
    } else {
      UniqueFd received = fetch_segment(invitations[0], rank, pids[0], hand_over, out_reason);
      if (received.valid() && is_sealed_segment(received.get(), bytes, out_reason)) {
        mapping = map_segment(received.get(), bytes, out_reason);
      }
    }
  }
  host.reset();
  segment = UniqueFd();
  if (!out_status.ok()) {
    if (mapping != nullptr) munmap(mapping, bytes);
    return nullptr;
  }
  // 4. Everyone says whether it holds the segment: all or none keep it.
  const int32_t holds = mapping != nullptr ? 1 : 0;
  std::vector<int32_t> held(ranks);
  out_status = setup.all_gather(&holds, held.data(), sizeof holds);
  const bool all_hold =
      out_status.ok() && std::all_of(held.begin(), held.end(), [](int32_t h) { return h == 1; });
  if (!all_hold) {
    if (mapping != nullptr) munmap(mapping, bytes);
    if (out_status.ok() && out_reason.empty()) out_reason = "a rank could not map the segment";
    return nullptr;
  }
  return std::unique_ptr<SharedSegment>(new SharedSegment(mapping, bytes, std::move(pidfds)));
}

SharedSegment::~SharedSegment() {
  munmap(mapping_, bytes_);
}

bool SharedSegment::peer_exited(uint32_t rank) const noexcept {
  return rank < peer_pidfds_.size() && exited(peer_pidfds_[rank]);
}

bool SharedSegment::any_peer_exited() const noexcept {
  std::vector<pollfd> watched;
  for (const UniqueFd& fd : peer_pidfds_) {
    if (fd.valid()) watched.push_back({fd.get(), POLLIN, 0});
  }
  return !watched.empty() && poll(watched.data(), watched.size(), 0) > 0;
}

}  // namespace hal::collective
