#include "hal_collective/shm_segment.hpp"

#include "hal_util/env.hpp"
#include "hal_util/hmac.hpp"

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
constexpr size_t kNameBytes = 64;
constexpr char kNamePrefix[] = "/hal-comm-";

// What must match for two ranks to share a segment: the same boot of the
// same machine, the same mount and IPC namespaces (the same /dev/shm), the
// same PID namespace (a peer's pid names the peer), the same user; and the
// wish of each, last.
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
  std::snprintf(
      identity.data(), identity.size(), "%s|%s|%s|%s|%s|%u|%d", boot.c_str(), host,
      namespace_of("/proc/self/ns/mnt").c_str(), namespace_of("/proc/self/ns/ipc").c_str(),
      namespace_of("/proc/self/ns/pid").c_str(), static_cast<unsigned>(geteuid()), wanted ? 1 : 0);
  return identity;
}

// A segment of |bytes| under a fresh random name, or "" (and why) when none
// could be made.
std::string create_segment(size_t bytes, void*& out_mapping, std::string& out_reason) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::array<uint8_t, 16> random{};
    if (!util::random_bytes(random)) {
      out_reason = "no random name for the segment (getrandom failed)";
      return {};
    }
    std::string name = kNamePrefix;
    for (uint8_t byte : random) {
      static const char kHex[] = "0123456789abcdef";
      name += kHex[byte >> 4];
      name += kHex[byte & 15];
    }
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;  // taken: another name
    if (fd < 0) {
      out_reason = std::string("shm_open failed: ") + std::strerror(errno);
      return {};
    }
    void* mapping = MAP_FAILED;
    if (fchmod(fd, 0600) == 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
      mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    }
    const int saved = errno;
    close(fd);
    if (mapping == MAP_FAILED) {
      shm_unlink(name.c_str());
      out_reason = std::string("the segment could not be sized or mapped: ") + std::strerror(saved);
      return {};
    }
    out_mapping = mapping;
    return name;
  }
  out_reason = "every random segment name was taken";
  return {};
}

// Opens what rank 0 named, if it is what rank 0 made: a name of ours, a
// regular file of this user that nobody else may open, of the size agreed.
void* open_segment(const char* name, size_t bytes, std::string& out_reason) {
  const size_t prefix = sizeof kNamePrefix - 1;
  const size_t length = strnlen(name, kNameBytes);
  bool well_formed = length == prefix + 32 && std::strncmp(name, kNamePrefix, prefix) == 0;
  for (size_t i = prefix; well_formed && i < length; ++i) {
    well_formed = std::strchr("0123456789abcdef", name[i]) != nullptr;
  }
  if (!well_formed) {
    out_reason = "rank 0 named no segment of ours";
    return nullptr;
  }
  const int fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    out_reason = std::string("shm_open of rank 0's segment failed: ") + std::strerror(errno);
    return nullptr;
  }
  struct stat info {};
  void* mapping = MAP_FAILED;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || info.st_uid != geteuid() ||
      (info.st_mode & 0777) != 0600 || static_cast<size_t>(info.st_size) != bytes) {
    out_reason = "rank 0's segment is not a private file of this user of the agreed size";
  } else {
    mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (mapping == MAP_FAILED) out_reason = std::string("mmap failed: ") + std::strerror(errno);
  }
  close(fd);
  return mapping == MAP_FAILED ? nullptr : mapping;
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

std::unique_ptr<SharedSegment> SharedSegment::share(SetupChannel& setup, bool wanted,
                                                    uint32_t max_ranks, size_t bytes,
                                                    const std::function<void(void*)>& initialise,
                                                    Status& out_status, std::string& out_reason) {
  const uint32_t ranks = setup.ranks();
  const uint32_t rank = setup.rank();
  // 1. Who can share: all ranks on one host, in one namespace, all willing.
  const auto identity = host_identity(wanted);
  std::vector<char> identities(kIdentityBytes * ranks);
  if (out_status = setup.all_gather(identity.data(), identities.data(), kIdentityBytes);
      !out_status.ok()) {
    return nullptr;
  }
  bool same = ranks <= max_ranks;
  bool everyone_wants = true;
  // A peer's identity is bytes off the wire: only its first |length| are read,
  // and one without its terminator within the buffer matches nothing.
  const size_t mine = strnlen(identity.data(), kIdentityBytes);
  for (uint32_t r = 0; r < ranks; ++r) {
    const char* other = identities.data() + r * kIdentityBytes;
    const size_t length = strnlen(other, kIdentityBytes);
    everyone_wants &= length > 0 && length < kIdentityBytes && other[length - 1] == '1';
    // Equal up to the last character, the wish.
    same &= length == mine && std::memcmp(identity.data(), other, mine - 1) == 0;
  }
  if (!everyone_wants) {
    out_reason = "a rank has HAL_COMM_SHM=0";
    return nullptr;
  }
  if (!same) {
    out_reason = ranks > max_ranks ? "more ranks than the segment serves"
                                   : "the ranks are not all on one host, user and namespace";
    return nullptr;
  }
  // 2. Rank 0 makes the segment and names it; the others open it.
  void* mapping = nullptr;
  std::array<char, kNameBytes> name{};
  if (rank == 0) {
    const std::string made = create_segment(bytes, mapping, out_reason);
    std::snprintf(name.data(), name.size(), "%s", made.c_str());
    if (mapping != nullptr) initialise(mapping);
  }
  std::vector<char> names(kNameBytes * ranks);
  if (out_status = setup.all_gather(name.data(), names.data(), kNameBytes); !out_status.ok()) {
    if (mapping != nullptr) munmap(mapping, bytes);
    if (rank == 0 && name[0] != '\0') shm_unlink(name.data());
    return nullptr;
  }
  if (rank != 0) {
    const char* named = names.data();  // rank 0's
    if (named[0] == '\0') {
      out_reason = "rank 0 could not make the segment";
    } else {
      mapping = open_segment(named, bytes, out_reason);
    }
  }
  // 3. Everyone says whether it holds the segment, and its pid (so that a
  // peer's end is seen at once); then the name goes.
  struct Holding {
    int32_t holds;
    int32_t pid;
  };
  const Holding mine_holding{mapping != nullptr ? 1 : 0, static_cast<int32_t>(getpid())};
  std::vector<Holding> held(ranks);
  out_status = setup.all_gather(&mine_holding, held.data(), sizeof(Holding));
  if (rank == 0 && name[0] != '\0') shm_unlink(name.data());
  const bool all_hold = out_status.ok() && std::all_of(held.begin(), held.end(),
                                                       [](Holding h) { return h.holds == 1; });
  if (!all_hold) {
    if (mapping != nullptr) munmap(mapping, bytes);
    if (out_status.ok() && out_reason.empty()) out_reason = "a rank could not open the segment";
    return nullptr;
  }
  std::unique_ptr<SharedSegment> segment(new SharedSegment(mapping, bytes));
  segment->peer_pidfds_.assign(ranks, -1);
  for (uint32_t r = 0; r < ranks; ++r) {
    // A pid off the wire names a process of this user in this PID namespace
    // (the identity says so), and is only watched, never signalled.
    if (r != rank && held[r].pid > 0) segment->peer_pidfds_[r] = open_pidfd(held[r].pid);
  }
  return segment;
}

SharedSegment::~SharedSegment() {
  for (int fd : peer_pidfds_) {
    if (fd >= 0) close(fd);
  }
  munmap(mapping_, bytes_);
}

bool SharedSegment::peer_exited(uint32_t rank) const noexcept {
  if (rank >= peer_pidfds_.size() || peer_pidfds_[rank] < 0) return false;
  pollfd watched{peer_pidfds_[rank], POLLIN, 0};
  return poll(&watched, 1, 0) > 0;
}

bool SharedSegment::any_peer_exited() const noexcept {
  std::vector<pollfd> watched;
  for (int fd : peer_pidfds_) {
    if (fd >= 0) watched.push_back({fd, POLLIN, 0});
  }
  return !watched.empty() && poll(watched.data(), watched.size(), 0) > 0;
}

}  // namespace hal::collective
