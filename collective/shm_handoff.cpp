#include "hal_collective/shm_handoff.hpp"

#include "hal_util/hmac.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <thread>

namespace hal::collective {

namespace {

constexpr char kSocketPrefix[] = "hal-comm-";
constexpr size_t kRandomNameBytes = 16;  // 32 hex digits after the prefix
constexpr uint32_t kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
// Connections accepted and not yet answered; past this the oldest goes
// (only processes of the job's ranks get this far).
constexpr size_t kMaxPending = 256;

// What a peer sends: the token, then its rank (host order: one host).
struct Request {
  std::array<uint8_t, 32> token;
  uint32_t rank;
};
static_assert(sizeof(Request) == 36);

std::mutex g_seams_mutex;
SegmentSeams g_seams;

std::string errno_text(const char* what, int error) {
  return std::string(what) + ": " + std::strerror(error);
}

// The abstract-namespace address of |name|: a leading NUL, then the name
// without its terminator (the length says where it ends).
socklen_t abstract_address(const char* name, sockaddr_un& out) {
  out = {};
  out.sun_family = AF_UNIX;
  const size_t length = strnlen(name, SegmentInvitation::kNameBytes);
  std::memcpy(out.sun_path + 1, name, length);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
}

bool well_formed_name(const char* name) {
  const size_t prefix = sizeof kSocketPrefix - 1;
  const size_t length = strnlen(name, SegmentInvitation::kNameBytes);
  if (length != prefix + 2 * kRandomNameBytes || std::strncmp(name, kSocketPrefix, prefix) != 0) {
    return false;
  }
  for (size_t i = prefix; i < length; ++i) {
    if (std::strchr("0123456789abcdef", name[i]) == nullptr) return false;
  }
  return true;
}

// The kernel's word on who is at the other end of a connected socket (for
// a client: the process that called listen).
bool peer_credentials(int fd, ucred& out) {
  socklen_t length = sizeof out;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &out, &length) == 0 && length == sizeof out;
}

// Passes |fd| with one byte of data.
bool send_descriptor(int socket, int fd) {
  char byte = 'S';
  iovec data{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  ssize_t sent;
  do {
    sent = sendmsg(socket, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  return sent == 1;
}

}  // namespace

void set_segment_seams_for_testing(SegmentSeams seams) {
  std::lock_guard lock(g_seams_mutex);
  g_seams = std::move(seams);
}

SegmentSeams segment_seams() {
  std::lock_guard lock(g_seams_mutex);
  return g_seams;
}

UniqueFd make_sealed_segment(size_t bytes, std::string& why) {
  // A file-size limit applies to memory files too, and going past it would
  // end the process with SIGXFSZ: ask first.
  rlimit limit{};
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      bytes > limit.rlim_cur) {
    why = "the segment's " + std::to_string(bytes) +
          " bytes exceed this process's file-size limit (RLIMIT_FSIZE " +
          std::to_string(limit.rlim_cur) + ")";
    return UniqueFd();
  }
  UniqueFd fd(memfd_create("hal-comm-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    why = errno_text("memfd_create refused the segment", errno);
    return UniqueFd();
  }
  // Every page now: a page that cannot be had later would be a SIGBUS in
  // whichever rank touched it first.
  int result;
  do {
    result = fallocate(fd.get(), 0, 0, static_cast<off_t>(bytes));
  } while (result != 0 && errno == EINTR);
  const int injected = segment_seams().backing_error;
  if (result != 0 || injected != 0) {
    why = errno_text(("the segment's " + std::to_string(bytes) +
                      " bytes could not be backed by "
                      "memory")
                         .c_str(),
                     injected != 0 ? injected : errno);
    return UniqueFd();
  }
  if (fcntl(fd.get(), F_ADD_SEALS, kRequiredSeals) != 0) {
    why = errno_text("the segment could not be sealed", errno);
    return UniqueFd();
  }
  return fd;
}

bool is_sealed_segment(int fd, size_t bytes, std::string& why) {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    why =
        "the descriptor received is not a memory file (" + std::string(std::strerror(errno)) + ")";
    return false;
  }
  if ((static_cast<uint32_t>(seals) & kRequiredSeals) != kRequiredSeals) {
    why = "the segment received is not sealed against shrinking, growing and further seals";
    return false;
  }
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    why = "the segment received is not a regular memory file";
    return false;
  }
  if (static_cast<uint64_t>(info.st_size) != bytes) {
    why = "the segment received has " + std::to_string(info.st_size) + " bytes, not the " +
          std::to_string(bytes) + " agreed";
    return false;
  }
  // st_blocks counts 512-byte units of memory the file holds: all of it.
  if (static_cast<uint64_t>(info.st_blocks) * 512 < bytes) {
    why = "the segment received is not backed in full (" +
          std::to_string(static_cast<uint64_t>(info.st_blocks) * 512) + " of " +
          std::to_string(bytes) + " bytes)";
    return false;
  }
  return true;
}

struct SegmentHost::Pending {
  UniqueFd fd;
  pid_t pid;
  Request request{};
  size_t got = 0;
};

SegmentHost::SegmentHost(UniqueFd listener, const SegmentInvitation& invitation)
    : listener_(std::move(listener)), invitation_(invitation) {}

SegmentHost::~SegmentHost() = default;

std::unique_ptr<SegmentHost> SegmentHost::open(std::string& why) {
  SegmentInvitation invitation{};
  if (!util::random_bytes(invitation.token)) {
    why = "no random token for the segment's hand-over (getrandom failed)";
    return nullptr;
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::array<uint8_t, kRandomNameBytes> random{};
    if (!util::random_bytes(random)) {
      why = "no random name for the segment's socket (getrandom failed)";
      return nullptr;
    }
    std::string name = kSocketPrefix;
    for (uint8_t byte : random) {
      static const char kHex[] = "0123456789abcdef";
      name += kHex[byte >> 4];
      name += kHex[byte & 15];
    }
    UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listener.valid()) {
      why = errno_text("no Unix socket for the segment's hand-over", errno);
      return nullptr;
    }
    sockaddr_un address;
    const socklen_t length = abstract_address(name.c_str(), address);
    if (bind(listener.get(), reinterpret_cast<sockaddr*>(&address), length) != 0) {
      if (errno == EADDRINUSE) continue;  // taken: another name
      why = errno_text("the segment's socket could not be bound", errno);
      return nullptr;
    }
    if (listen(listener.get(), SOMAXCONN) != 0) {
      why = errno_text("the segment's socket could not listen", errno);
      return nullptr;
    }
    std::snprintf(invitation.socket_name, sizeof invitation.socket_name, "%s", name.c_str());
    return std::unique_ptr<SegmentHost>(new SegmentHost(std::move(listener), invitation));
  }
  why = "every random socket name for the segment was taken";
  return nullptr;
}

bool SegmentHost::serve_once(int segment, const std::vector<pid_t>& pids,
                             std::vector<uint8_t>& served, std::string& why) {
  std::vector<pollfd> watched;
  watched.push_back({listener_.get(), POLLIN, 0});
  for (const Pending& p : pending_) watched.push_back({p.fd.get(), POLLIN, 0});
  if (poll(watched.data(), watched.size(), kServePollMs) < 0 && errno != EINTR) {
    why = errno_text("poll on the segment's socket failed", errno);
    return false;
  }
  // Requests first (indices stay valid), then new connections.
  for (size_t i = pending_.size(); i-- > 0;) {
    if (watched[i + 1].revents == 0) continue;
    Pending& p = pending_[i];
    const ssize_t got = recv(p.fd.get(), reinterpret_cast<uint8_t*>(&p.request) + p.got,
                             sizeof(Request) - p.got, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    bool keep = got > 0;
    if (keep) p.got += static_cast<size_t>(got);
    if (keep && p.got == sizeof(Request)) {
      const uint32_t rank = p.request.rank;
      const bool genuine = util::equal_in_constant_time(p.request.token, invitation_.token) &&
                           rank != 0 && rank < pids.size() && !served[rank] && pids[rank] == p.pid;
      if (genuine && send_descriptor(p.fd.get(), segment)) served[rank] = 1;
      keep = false;  // answered or refused: either way done
    }
    if (!keep) pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(i));
  }
  while (true) {
    UniqueFd connection(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!connection.valid()) break;  // none waiting (or out of descriptors: next pass)
    ucred who{};
    // Only a process of this user that is one of the ranks may wait here.
    if (!peer_credentials(connection.get(), who) || who.uid != geteuid() ||
        std::find(pids.begin() + 1, pids.end(), who.pid) == pids.end()) {
      continue;  // closed unanswered
    }
    if (pending_.size() == kMaxPending) pending_.erase(pending_.begin());
    pending_.push_back({std::move(connection), who.pid});
  }
  return true;
}

UniqueFd fetch_segment(const SegmentInvitation& invitation, uint32_t rank, pid_t host_pid,
                       const Deadline& deadline, std::string& why) {
  if (!well_formed_name(invitation.socket_name)) {
    why = "rank 0 named no segment socket of ours";
    return UniqueFd();
  }
  sockaddr_un address;
  const socklen_t length = abstract_address(invitation.socket_name, address);
  auto passed = [&] { return deadline.is_aborted() || Clock::now() >= deadline.at; };
  UniqueFd connection;
  while (true) {
    connection = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!connection.valid()) {
      why = errno_text("no Unix socket to fetch the segment", errno);
      return UniqueFd();
    }
    if (connect(connection.get(), reinterpret_cast<sockaddr*>(&address), length) == 0) break;
    // A full accept queue: rank 0 drains it every pass.
    if (errno != EAGAIN && errno != EINTR) {
      why = errno_text("rank 0's segment socket could not be reached", errno);
      return UniqueFd();
    }
    if (passed()) {
      why = "rank 0's segment socket did not accept before the deadline";
      return UniqueFd();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ucred who{};
  if (!peer_credentials(connection.get(), who) || who.uid != geteuid() || who.pid != host_pid) {
    why = "the segment socket does not belong to rank 0's process of this user";
    return UniqueFd();
  }
  Request request{invitation.token, rank};
  if (send(connection.get(), &request, sizeof request, MSG_NOSIGNAL | MSG_DONTWAIT) !=
      static_cast<ssize_t>(sizeof request)) {
    why = errno_text("the request for the segment could not be sent", errno);
    return UniqueFd();
  }
  while (true) {
    pollfd readable{connection.get(), POLLIN, 0};
    const int ready = poll(&readable, 1, kServePollMs);
    if (ready > 0) break;
    if (ready < 0 && errno != EINTR) {
      why = errno_text("poll for the segment failed", errno);
      return UniqueFd();
    }
    if (passed()) {
      why = "rank 0 did not pass the segment before the deadline";
      return UniqueFd();
    }
  }
  char byte = 0;
  iovec data{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ssize_t got;
  do {
    got = recvmsg(connection.get(), &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  // Every descriptor that came is closed unless it is the one expected.
  UniqueFd received;
  bool one_descriptor = false;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof fd);
      UniqueFd owned(fd);
      one_descriptor = !received.valid() && count == 1;
      if (one_descriptor) received = std::move(owned);
    }
  }
  if (got != 1 || (message.msg_flags & MSG_CTRUNC) != 0 || !one_descriptor) {
    why = got == 0 ? "rank 0 closed the hand-over without passing the segment"
                   : "rank 0's answer carried no single descriptor";
    return UniqueFd();
  }
  return received;
}

}  // namespace hal::collective
