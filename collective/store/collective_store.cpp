#include "collective_store.hpp"

#include "hal_util/env.hpp"
#include "hal_util/hmac.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace hal::collective {

using namespace store_wire;

namespace store_wire {

Proof proof(const StoreSecret& secret, const char* role, const Nonce& server_nonce,
            const Nonce& client_nonce) noexcept {
  const auto* role_bytes = reinterpret_cast<const uint8_t*>(role);
  return hal::util::hmac_sha256(
      secret, {std::span(role_bytes, std::strlen(role)), server_nonce, client_nonce});
}

namespace {

hal::util::Sha256Digest direction_key(const StoreSecret& secret, const char* direction,
                                      const Nonce& server_nonce, const Nonce& client_nonce) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(direction);
  return hal::util::hmac_sha256(
      secret, {std::span(bytes, std::strlen(direction)), server_nonce, client_nonce});
}

}  // namespace

FrameSeal::FrameSeal(const StoreSecret& secret, const char* direction, const Nonce& server_nonce,
                     const Nonce& client_nonce) noexcept
    : key_(direction_key(secret, direction, server_nonce, client_nonce)) {}

Mac FrameSeal::compute(const Frame& frame, std::span<const uint8_t> key,
                       std::span<const uint8_t> value) const noexcept {
  std::array<uint8_t, 8> sequence;
  for (size_t i = 0; i < sequence.size(); ++i) {
    sequence[i] = static_cast<uint8_t>(sequence_ >> (8 * i));
  }
  const auto* header = reinterpret_cast<const uint8_t*>(&frame);
  const hal::util::Sha256Digest full =
      key_.mac({sequence, std::span(header, sizeof(Frame)), key, value});
  Mac mac;
  std::memcpy(mac.data(), full.data(), mac.size());
  return mac;
}

Mac FrameSeal::seal(const Frame& frame, std::span<const uint8_t> key,
                    std::span<const uint8_t> value) noexcept {
  const Mac mac = compute(frame, key, value);
  ++sequence_;
  return mac;
}

bool FrameSeal::open(const Frame& frame, std::span<const uint8_t> key,
                     std::span<const uint8_t> value, std::span<const uint8_t> mac) noexcept {
  if (!hal::util::equal_in_constant_time(compute(frame, key, value), mac)) return false;
  ++sequence_;
  return true;
}

std::vector<uint8_t> sealed_frame(FrameSeal& seal, const Frame& frame, std::span<const uint8_t> key,
                                  std::span<const uint8_t> value) {
  const Mac mac = seal.seal(frame, key, value);
  std::vector<uint8_t> bytes(sizeof(Frame) + key.size() + value.size() + kMacBytes);
  uint8_t* at = bytes.data();
  std::memcpy(at, &frame, sizeof(Frame));
  at += sizeof(Frame);
  if (!key.empty()) std::memcpy(at, key.data(), key.size());
  at += key.size();
  if (!value.empty()) std::memcpy(at, value.data(), value.size());
  at += value.size();
  std::memcpy(at, mac.data(), mac.size());
  return bytes;
}

}  // namespace store_wire

namespace {

constexpr uint32_t kByeDeadlineMs = 1000;
// How long a rank whose send failed looks for the store's last word.
constexpr uint32_t kExplainMs = 100;
// A request's value up to this size is copied behind its header, so that
// the frame leaves in one write.
constexpr size_t kCopiedValueBytes = 64 * 1024;
constexpr int kAcceptPauseMs = 100;  // after EMFILE: the listener stays readable
constexpr int kAcceptsPerWake = 256;

Status errno_failure(const char* what) {
  return Status::failure(HAL_ERROR_INTERNAL, std::string(what) + ": " + std::strerror(errno));
}

bool to_sockaddr(const StoreAddress& address, sockaddr_in& out) {
  out = {};
  out.sin_family = AF_INET;
  out.sin_port = htons(address.port);
  const std::string host = address.host == "localhost" ? "127.0.0.1" : address.host;
  return inet_pton(AF_INET, host.c_str(), &out.sin_addr) == 1;
}

void log_drop(const std::string& why) {
  static const bool enabled = [] {
    const char* value = hal::util::env("HAL_LOG");
    return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
  }();
  if (enabled) std::fprintf(stderr, "[hal:store] warning: dropped a connection: %s\n", why.c_str());
}

int ms_until(Clock::time_point at) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60000));
}

// ---------------------------------------------------------------- server

struct StoredValue {
  uint64_t argument = 0;
  std::vector<uint8_t> data;
};

struct Session {
  uint32_t ranks = 0;
  std::set<uint32_t> members;
  std::vector<int> join_waiters;
  bool failed = false;
  uint64_t failure = 0;  // the HAL_ERROR_REMOTE replies' argument: why, and whose rank
  uint32_t connections = 0;
  std::map<std::string, StoredValue> values;
  std::multimap<std::string, int> takers;  // key -> connection waiting for it
};

struct Connection {
  Clock::time_point handshake_deadline;
  Nonce nonce{};
  Nonce client_nonce{};
  bool nonce_read = false;  // the client's nonce came; the server's proof went
  bool authenticated = false;
  std::unique_ptr<FrameSeal> from_client;  // once authenticated
  std::unique_ptr<FrameSeal> to_client;
  uint32_t rank_plus_one = 0;  // once joined
  bool tampered = false;       // a frame failed its MAC: its session fails saying so
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;
  size_t out_sent = 0;
  std::string session;
  bool joined = false;
  bool clean = false;
  bool doomed = false;
};

// The bytes StoreServer writes to its thread's wake pipe.
constexpr uint8_t kWakeToStop = 1;
constexpr uint8_t kWakeToCount = 2;

// Per-entry bookkeeping charged against max_buffered_bytes besides the data.
constexpr uint64_t kEntryOverhead = 64;

class ServerLoop {
 public:
  ServerLoop(int listen_fd, int wake_fd, const StoreSecret& secret, const StoreLimits& limits,
             std::atomic<uint64_t>& dropped, StoreServer::Lingering& lingering)
      : listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        secret_(secret),
        limits_(limits),
        dropped_(dropped),
        lingering_(lingering),
        scratch_(256 * 1024) {}

  ~ServerLoop() {
    for (const auto& entry : connections_) ::close(entry.first);
  }

  void run() {
    std::vector<pollfd> fds;
    while (true) {
      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      const bool accepting = Clock::now() >= accept_paused_until_;
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
      Clock::time_point wake_at = Clock::time_point::max();
      if (!accepting) wake_at = accept_paused_until_;
      for (const auto& [fd, conn] : connections_) {
        short events = POLLIN;
        if (conn.out.size() > conn.out_sent) events |= POLLOUT;
        fds.push_back({fd, events, 0});
        if (!conn.authenticated) wake_at = std::min(wake_at, conn.handshake_deadline);
      }
      const int timeout = wake_at == Clock::time_point::max() ? -1 : ms_until(wake_at);
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
      // A linger request read now is answered after this wake's input is
      // served: what its rank sent before asking is counted.
      const uint64_t linger_request = lingering_.requested.load(std::memory_order_acquire);
      if (fds[0].revents != 0 && woken_to_stop()) return;
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        auto found = connections_.find(fds[i].fd);
        if (found == connections_.end() || found->second.doomed) continue;
        try {
          if (fds[i].revents & POLLOUT) flush(found->first, found->second);
          if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) readable(found->first, found->second);
        } catch (const std::exception& e) {
          drop(found->second, std::string("the store could not serve it: ") + e.what());
        }
      }
      expire_handshakes();
      if (fds[1].revents & POLLIN) accept_new();
      close_doomed();
      if (lingering_.answered.load(std::memory_order_relaxed) != linger_request) {
        lingering_.undelivered.store(count_undelivered(), std::memory_order_relaxed);
        lingering_.answered.store(linger_request, std::memory_order_release);
      }
    }
  }

 private:
  // The wake pipe carries kWakeToStop or kWakeToCount bytes.
  bool woken_to_stop() {
    uint8_t bytes[64];
    const ssize_t got = ::read(wake_fd_, bytes, sizeof(bytes));
    if (got < 0) return errno != EINTR && errno != EAGAIN;
    return got == 0 || std::memchr(bytes, kWakeToStop, static_cast<size_t>(got)) != nullptr;
  }

  // What is still on its way between ranks (StoreServer::linger): values
  // stored and not yet taken, replies not yet sent, frames not yet read.
  uint64_t count_undelivered() {
    uint64_t undelivered = 0;
    for (const auto& [name, session] : sessions_) undelivered += session.values.size();
    for (const auto& [fd, conn] : connections_) {
      if (conn.doomed) continue;
      int unread = 0;
      if (conn.out.size() > conn.out_sent || !conn.in.empty() ||
          (::ioctl(fd, FIONREAD, &unread) == 0 && unread > 0)) {
        ++undelivered;
      }
    }
    return undelivered;
  }

  void drop(Connection& conn, const std::string& why) {
    if (conn.doomed) return;
    conn.doomed = true;
    dropped_.fetch_add(1);
    log_drop(why);
  }

  void accept_new() {
    for (int i = 0; i < kAcceptsPerWake; ++i) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          accept_paused_until_ = Clock::now() + std::chrono::milliseconds(kAcceptPauseMs);
          log_drop("the process is out of descriptors; accepting pauses");
        }
        return;
      }
      if (connections_.size() >= limits_.max_connections && !evict_one_unauthenticated()) {
        dropped_.fetch_add(1);
        log_drop("the store is at its connection limit");
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      Connection conn;
      conn.handshake_deadline =
          Clock::now() + std::chrono::milliseconds(limits_.handshake_timeout_ms);
      std::array<uint8_t, kChallengeBytes> challenge;
      if (!hal::util::random_bytes(conn.nonce)) {
        ::close(fd);
        log_drop("no random bytes for a challenge");
        continue;
      }
      std::memcpy(challenge.data(), kChallengeMagic, sizeof(kChallengeMagic));
      std::memcpy(challenge.data() + sizeof(kChallengeMagic), conn.nonce.data(), kNonceBytes);
      Connection& placed = connections_.emplace(fd, std::move(conn)).first->second;
      queue(fd, placed, {challenge});
    }
  }

  // Makes room for a new connection under a flood: the oldest connection
  // that has not proved the secret yet goes.
  bool evict_one_unauthenticated() {
    auto oldest = connections_.end();
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      if (it->second.authenticated || it->second.doomed) continue;
      if (oldest == connections_.end() ||
          it->second.handshake_deadline < oldest->second.handshake_deadline) {
        oldest = it;
      }
    }
    if (oldest == connections_.end()) return false;
    drop(oldest->second, "evicted: the store is full and it had not authenticated");
    close_connection(oldest->first);
    return true;
  }

  void expire_handshakes() {
    const auto now = Clock::now();
    for (auto& [fd, conn] : connections_) {
      if (!conn.authenticated && now >= conn.handshake_deadline) {
        drop(conn, "it did not prove the secret in time");
      }
    }
  }

  // Closing one connection can fail a session, whose replies can doom more.
  void close_doomed() {
    while (true) {
      std::vector<int> doomed;
      for (const auto& [fd, conn] : connections_) {
        if (conn.doomed) doomed.push_back(fd);
      }
      if (doomed.empty()) return;
      for (int fd : doomed) close_connection(fd);
    }
  }

  uint64_t buffered_bytes() const {
    uint64_t total = held_bytes_;
    for (const auto& [fd, conn] : connections_) total += conn.in.size() + conn.out.size();
    return total;
  }

  void readable(int fd, Connection& conn) {
    if (!conn.authenticated) {
      // The client's nonce, then (once this server has proved the secret)
      // the client's proof: 32 bytes each, and nothing more is read before
      // that proof checks out.
      const size_t want = kNonceBytes - conn.in.size();
      uint8_t piece[kNonceBytes];
      const ssize_t got = ::recv(fd, piece, want, MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (got <= 0) return drop(conn, "it closed before proving the secret");
      conn.in.insert(conn.in.end(), piece, piece + got);
      if (conn.in.size() < kNonceBytes) return;
      if (!conn.nonce_read) {
        std::memcpy(conn.client_nonce.data(), conn.in.data(), kNonceBytes);
        conn.in.clear();
        conn.nonce_read = true;
        const Proof mine = proof(secret_, kServerRole, conn.nonce, conn.client_nonce);
        return queue(fd, conn, {mine});
      }
      const Proof expected = proof(secret_, kClientRole, conn.nonce, conn.client_nonce);
      if (!hal::util::equal_in_constant_time(expected, conn.in)) {
        return drop(conn, "its proof of the secret is wrong");
      }
      conn.in.clear();
      conn.authenticated = true;
      conn.from_client =
          std::make_unique<FrameSeal>(secret_, kToServer, conn.nonce, conn.client_nonce);
      conn.to_client =
          std::make_unique<FrameSeal>(secret_, kToClient, conn.nonce, conn.client_nonce);
      return;
    }
    const ssize_t got = ::recv(fd, scratch_.data(), scratch_.size(), MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (got <= 0) {
      if (!conn.clean && !conn.in.empty()) log_drop("it closed in the middle of a frame");
      conn.doomed = true;  // a plain close: close_connection fails its session unless clean
      return;
    }
    if (buffered_bytes() + static_cast<uint64_t>(got) > limits_.max_buffered_bytes) {
      return drop(conn, "the store holds its limit of buffered bytes");
    }
    conn.in.insert(conn.in.end(), scratch_.data(), scratch_.data() + got);
    size_t offset = 0;
    while (!conn.doomed && conn.in.size() - offset >= sizeof(Frame)) {
      Frame frame;
      std::memcpy(&frame, conn.in.data() + offset, sizeof(frame));
      if (const char* why = invalid(conn, frame)) {
        drop(conn, why);
        break;
      }
      // Both sizes are capped, so the sum cannot wrap.
      const uint64_t total = sizeof(frame) + frame.key_bytes + frame.value_bytes + kMacBytes;
      if (conn.in.size() - offset < total) break;
      const uint8_t* body = conn.in.data() + offset + sizeof(frame);
      const std::span key_bytes(body, frame.key_bytes);
      const std::span value_bytes(body + frame.key_bytes, frame.value_bytes);
      const std::span mac(body + frame.key_bytes + frame.value_bytes, kMacBytes);
      if (!conn.from_client->open(frame, key_bytes, value_bytes, mac)) {
        tampered(fd, conn);
        break;
      }
      std::string key(key_bytes.begin(), key_bytes.end());
      std::vector<uint8_t> value(value_bytes.begin(), value_bytes.end());
      offset += total;
      handle(fd, conn, frame, std::move(key), std::move(value));
    }
    conn.in.erase(conn.in.begin(), conn.in.begin() + static_cast<ptrdiff_t>(offset));
  }

  // Why |frame| breaks the protocol, or nullptr: checked on the header alone,
  // before any of its body is buffered.
  const char* invalid(const Connection& conn, const Frame& frame) const {
    if (frame.status != 0) return "a request carries a status";
    if (frame.key_bytes > limits_.max_key_bytes) return "a key is longer than the limit";
    if (frame.value_bytes > limits_.max_value_bytes) return "a value is longer than the limit";
    switch (frame.op) {
      case kJoin:
        if (conn.joined) return "it joined twice";
        if (frame.key_bytes == 0 || frame.value_bytes != 0) return "a malformed join";
        return nullptr;
      case kSet:
        return conn.joined ? nullptr : "a set before joining";
      case kTake:
        if (!conn.joined) return "a take before joining";
        return frame.value_bytes == 0 ? nullptr : "a take with a value";
      case kBye:
        return frame.key_bytes == 0 && frame.value_bytes == 0 ? nullptr : "a malformed goodbye";
      default:
        return "an unknown operation";
    }
  }

  void handle(int fd, Connection& conn, const Frame& frame, std::string key,
              std::vector<uint8_t> value) {
    switch (frame.op) {
      case kJoin:
        return join(fd, conn, key, static_cast<uint32_t>(frame.argument >> 32),
                    static_cast<uint32_t>(frame.argument));
      case kSet: {
        Session& s = sessions_[conn.session];
        if (s.failed) return;  // the rank learns it from its next take
        if (auto taker = s.takers.find(key); taker != s.takers.end()) {
          const int to = taker->second;
          held_bytes_ -= taker->first.size() + kEntryOverhead;
          s.takers.erase(taker);
          return reply(to, HAL_SUCCESS, frame.argument, &value);
        }
        if (s.values.count(key) != 0) return drop(conn, "it set a key twice");
        held_bytes_ += key.size() + value.size() + kEntryOverhead;
        s.values[std::move(key)] = {frame.argument, std::move(value)};
        return;
      }
      case kTake: {
        Session& s = sessions_[conn.session];
        if (s.failed) return reply(fd, HAL_ERROR_REMOTE, s.failure);
        if (auto found = s.values.find(key); found != s.values.end()) {
          held_bytes_ -= found->first.size() + found->second.data.size() + kEntryOverhead;
          StoredValue stored = std::move(found->second);
          s.values.erase(found);
          return reply(fd, HAL_SUCCESS, stored.argument, &stored.data);
        }
        if (buffered_bytes() + key.size() + kEntryOverhead > limits_.max_buffered_bytes) {
          return drop(conn, "the store holds its limit of buffered bytes");
        }
        held_bytes_ += key.size() + kEntryOverhead;
        s.takers.emplace(std::move(key), fd);
        return;
      }
      case kBye:
        conn.clean = true;
        return;
      default:
        return;
    }
  }

  // A frame of |conn| failed its MAC: altered, replayed, reordered or
  // reflected on the way. Its rank is told why, then dropped; its session
  // fails, and its other ranks are told whose connection it was.
  void tampered(int fd, Connection& conn) {
    reply(fd, HAL_ERROR_REMOTE, (uint64_t{kYourFrameTampered} << 32) | conn.rank_plus_one);
    conn.tampered = true;
    drop(conn, "frame " + std::to_string(conn.from_client->sequence()) +
                   " failed its integrity check (altered, replayed, reordered or reflected on "
                   "the way)");
  }

  void join(int fd, Connection& conn, const std::string& name, uint32_t rank, uint32_t ranks) {
    Session& s = sessions_[name];
    conn.joined = true;
    conn.session = name;
    ++s.connections;
    if (s.failed) return reply(fd, HAL_ERROR_REMOTE, s.failure);
    if (s.ranks == 0) s.ranks = ranks;
    if (ranks == 0 || ranks != s.ranks || rank >= ranks || s.members.count(rank) != 0) {
      conn.clean = true;  // a refused join fails nobody else
      return reply(fd, HAL_ERROR_ARGUMENT_MISMATCH);
    }
    s.members.insert(rank);
    conn.rank_plus_one = rank + 1;
    s.join_waiters.push_back(fd);
    if (s.members.size() == s.ranks) {
      for (int waiter : s.join_waiters) reply(waiter, HAL_SUCCESS);
      s.join_waiters.clear();
    }
  }

  void fail(Session& s, uint64_t failure) {
    s.failed = true;
    s.failure = failure;
    for (int waiter : s.join_waiters) reply(waiter, HAL_ERROR_REMOTE, failure);
    for (const auto& [key, taker] : s.takers) {
      held_bytes_ -= key.size() + kEntryOverhead;
      reply(taker, HAL_ERROR_REMOTE, failure);
    }
    for (const auto& [key, stored] : s.values) {
      held_bytes_ -= key.size() + stored.data.size() + kEntryOverhead;
    }
    s.join_waiters.clear();
    s.takers.clear();
    s.values.clear();
  }

  void close_connection(int fd) {
    auto found = connections_.find(fd);
    if (found == connections_.end()) return;
    Connection conn = std::move(found->second);
    connections_.erase(found);
    ::close(fd);
    if (!conn.joined) return;
    auto session = sessions_.find(conn.session);
    if (session == sessions_.end()) return;
    Session& s = session->second;
    for (auto it = s.takers.begin(); it != s.takers.end();) {
      if (it->second != fd) {
        ++it;
        continue;
      }
      held_bytes_ -= it->first.size() + kEntryOverhead;
      it = s.takers.erase(it);
    }
    std::erase(s.join_waiters, fd);
    if (!conn.clean) {
      const uint64_t why = conn.tampered ? kPeerFrameTampered : kPeerLeft;
      fail(s, (why << 32) | conn.rank_plus_one);
    }
    if (--s.connections == 0) {
      for (const auto& [key, stored] : s.values) {
        held_bytes_ -= key.size() + stored.data.size() + kEntryOverhead;
      }
      sessions_.erase(session);
    }
  }

  void reply(int fd, hal_result_t status, uint64_t argument = 0,
             const std::vector<uint8_t>* value = nullptr) {
    auto found = connections_.find(fd);
    if (found == connections_.end() || found->second.doomed) return;
    const Frame frame{kReply, static_cast<uint32_t>(status), argument, 0,
                      value != nullptr ? value->size() : 0};
    Connection& conn = found->second;
    const std::span<const uint8_t> bytes =
        value != nullptr ? std::span<const uint8_t>(*value) : std::span<const uint8_t>();
    const Mac mac = conn.to_client->seal(frame, {}, bytes);
    queue(fd, conn,
          {std::span(reinterpret_cast<const uint8_t*>(&frame), sizeof(frame)), bytes, mac});
  }

  // Sends |pieces| as one stream write (one segment when small: each
  // separate send would wake the peer once more), or buffers what the
  // socket does not take yet.
  void queue(int fd, Connection& conn, std::initializer_list<std::span<const uint8_t>> pieces) {
    if (conn.doomed) return;
    size_t bytes = 0;
    for (std::span<const uint8_t> piece : pieces) bytes += piece.size();
    const uint64_t backlog = conn.out.size() - conn.out_sent;
    if (backlog + bytes > 2 * (sizeof(Frame) + limits_.max_value_bytes + kMacBytes)) {
      return drop(conn, "it does not read its replies");
    }
    for (std::span<const uint8_t> piece : pieces) {
      conn.out.insert(conn.out.end(), piece.begin(), piece.end());
    }
    flush(fd, conn);
  }

  void flush(int fd, Connection& conn) {
    while (conn.out_sent < conn.out.size()) {
      const ssize_t sent = ::send(fd, conn.out.data() + conn.out_sent,
                                  conn.out.size() - conn.out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0 && errno == EAGAIN) return;  // POLLOUT resumes
      if (sent <= 0) {
        conn.doomed = true;  // the peer went away; reading tells whether cleanly
        return;
      }
      conn.out_sent += static_cast<size_t>(sent);
    }
    conn.out.clear();
    conn.out_sent = 0;
  }

  int listen_fd_;
  int wake_fd_;
  StoreSecret secret_;
  StoreLimits limits_;
  std::atomic<uint64_t>& dropped_;
  StoreServer::Lingering& lingering_;
  std::vector<uint8_t> scratch_;
  std::map<int, Connection> connections_;
  std::map<std::string, Session> sessions_;
  uint64_t held_bytes_ = 0;  // stored values and waiting takes
  Clock::time_point accept_paused_until_{};
};

}  // namespace

double secret_strength_bits(std::span<const uint8_t> text) noexcept {
  // Past this many bytes a secret is strong or not already; the repeat
  // search below is quadratic.
  constexpr size_t kLookedAt = 4096;
  constexpr size_t kShortestRepeat = 4;
  const size_t n = std::min(text.size(), kLookedAt);
  // The bytes that count: a stretch of kShortestRepeat or more that repeats
  // an earlier one (overlapping it or not) adds nothing.
  std::array<size_t, 256> counts{};
  size_t counted = 0;
  for (size_t i = 0; i < n;) {
    size_t longest = 0;
    for (size_t j = 0; j < i && longest < n - i; ++j) {
      size_t length = 0;
      while (i + length < n && text[j + length] == text[i + length]) ++length;
      longest = std::max(longest, length);
    }
    if (longest >= kShortestRepeat) {
      i += longest;
      continue;
    }
    ++counts[text[i]];
    ++counted;
    ++i;
  }
  double bits = 0;
  for (size_t count : counts) {
    if (count != 0) {
      bits += static_cast<double>(count) *
              std::log2(static_cast<double>(counted) / static_cast<double>(count));
    }
  }
  return bits;
}

bool StoreAddress::parse(const std::string& text, StoreAddress& out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  char* end = nullptr;
  const unsigned long port = std::strtoul(text.c_str() + colon + 1, &end, 10);
  if (end == text.c_str() + colon + 1 || *end != '\0' || port > 65535) return false;
  out.host = text.substr(0, colon);
  out.port = static_cast<uint16_t>(port);
  sockaddr_in probe{};
  return to_sockaddr(out, probe);
}

std::shared_ptr<StoreServer> StoreServer::start(const StoreAddress& address,
                                                const StoreSecret& secret,
                                                const StoreLimits& limits, Status& out_status) {
  sockaddr_in addr{};
  if (!to_sockaddr(address, addr)) {
    out_status = Status::failure(HAL_ERROR_INVALID_ARGUMENT, "bad store host " + address.host);
    return nullptr;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    out_status = errno_failure("socket");
    return nullptr;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t length = sizeof(addr);
  int pipe_fds[2] = {-1, -1};
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0 ||
      ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    out_status = errno_failure(("the TCP store cannot listen on " + address.text()).c_str());
    ::close(fd);
    return nullptr;
  }
  std::shared_ptr<StoreServer> server(
      new StoreServer(fd, pipe_fds[0], pipe_fds[1], ntohs(addr.sin_port)));
  auto dropped = server->dropped_;
  auto lingering = server->lingering_;
  // The thread owns its state; nothing it throws leaves it.
  server->thread_ = std::thread([fd, wake = pipe_fds[0], secret, limits, dropped, lingering] {
    try {
      ServerLoop loop(fd, wake, secret, limits, *dropped, *lingering);
      loop.run();
    } catch (const std::exception& e) {
      log_drop(std::string("the store stopped serving: ") + e.what());
    }
  });
  server->native_thread_ = server->thread_.native_handle();
  return server;
}

StoreServer::StoreServer(int listen_fd, int wake_read, int wake_write, uint16_t port)
    : listen_fd_(listen_fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      port_(port),
      dropped_(std::make_shared<std::atomic<uint64_t>>(0)),
      lingering_(std::make_shared<Lingering>()) {}

bool StoreServer::linger(const Deadline& deadline) const noexcept {
  // Asks the server thread to count, waits for its answer, and asks again
  // (every millisecond) until nothing is left; a stopped server owes nothing.
  auto stopped = [&] {
    std::lock_guard lock(stop_mutex_);
    return listen_fd_ < 0;
  };
  auto passed = [&] { return deadline.is_aborted() || Clock::now() >= deadline.at; };
  while (true) {
    uint64_t request = 0;
    {
      std::lock_guard lock(stop_mutex_);
      if (listen_fd_ < 0) return true;
      request = lingering_->requested.fetch_add(1, std::memory_order_acq_rel) + 1;
      const uint8_t count = kWakeToCount;
      [[maybe_unused]] ssize_t ignored = ::write(wake_write_, &count, 1);
    }
    while (lingering_->answered.load(std::memory_order_acquire) < request) {
      if (stopped()) return true;
      if (passed()) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (lingering_->undelivered.load(std::memory_order_relaxed) == 0) return true;
    if (passed()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

StoreServer::~StoreServer() {
  stop();
}

void StoreServer::stop() noexcept {
  std::lock_guard lock(stop_mutex_);
  if (listen_fd_ < 0) return;
  const uint8_t stop = kWakeToStop;
  [[maybe_unused]] ssize_t ignored = ::write(wake_write_, &stop, 1);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_read_);
  ::close(wake_write_);
  listen_fd_ = wake_read_ = wake_write_ = -1;
}

std::chrono::nanoseconds StoreServer::cpu_time() const noexcept {
  std::lock_guard lock(stop_mutex_);
  if (listen_fd_ < 0) return {};
  clockid_t clock{};
  timespec spent{};
  if (pthread_getcpuclockid(native_thread_, &clock) != 0 || clock_gettime(clock, &spent) != 0) {
    return {};
  }
  return std::chrono::seconds(spent.tv_sec) + std::chrono::nanoseconds(spent.tv_nsec);
}

StoreRoster::~StoreRoster() {
  for (Entry& entry : entries_) {
    if (auto server = entry.server.lock()) server->stop();
  }
}

void StoreRoster::add(const std::shared_ptr<StoreServer>& server, uint64_t session, bool hold) {
  std::lock_guard lock(mutex_);
  std::erase_if(entries_, [](const Entry& e) { return e.server.expired(); });
  entries_.push_back({hold ? server : nullptr, server, session});
}

std::shared_ptr<StoreServer> StoreRoster::find(uint16_t port, uint64_t session) {
  std::lock_guard lock(mutex_);
  for (const Entry& entry : entries_) {
    auto server = entry.server.lock();
    if (server && entry.session == session && server->port() == port) return server;
  }
  return nullptr;
}

void StoreRoster::adopted(const StoreServer* server) {
  std::lock_guard lock(mutex_);
  for (Entry& entry : entries_) {
    if (entry.held.get() == server) entry.held.reset();
  }
}

// ---------------------------------------------------------------- client

std::unique_ptr<StoreClient> StoreClient::connect(const StoreAddress& address,
                                                  const StoreSecret& secret,
                                                  const Deadline& deadline, Status& out_status) {
  sockaddr_in addr{};
  if (!to_sockaddr(address, addr)) {
    out_status = Status::failure(HAL_ERROR_INVALID_ARGUMENT, "bad store host " + address.host);
    return nullptr;
  }
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const int interrupt_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0 || interrupt_fd < 0) {
      out_status = errno_failure("socket");
      if (fd >= 0) ::close(fd);
      if (interrupt_fd >= 0) ::close(interrupt_fd);
      return nullptr;
    }
    const int one = 1;  // requests are small and answered: no Nagle delay
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::unique_ptr<StoreClient> client(new StoreClient(fd, interrupt_fd, address));
    client->broken_ = true;  // no goodbye until authenticated
    Status status;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) {
        status = Status::failure(HAL_ERROR_REMOTE, std::strerror(errno));
      } else {
        status = client->wait_ready(POLLOUT, deadline);
        int error = 0;
        socklen_t length = sizeof(error);
        if (status.ok() &&
            (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0)) {
          status = Status::failure(HAL_ERROR_REMOTE, std::strerror(error));
        }
      }
    }
    // The challenge; a server at its limit closes at once.
    std::array<uint8_t, kChallengeBytes> challenge;
    bool challenged = false;
    if (status.ok()) {
      status = client->recv_bytes(challenge.data(), challenge.size(), deadline);
      challenged = status.ok();
    }
    if (challenged) {
      if (std::memcmp(challenge.data(), kChallengeMagic, sizeof(kChallengeMagic)) != 0) {
        out_status = Status::failure(HAL_ERROR_REMOTE, "what answers at " + address.text() +
                                                           " is not a HAL store of this version");
        return nullptr;
      }
      Nonce server_nonce, client_nonce;
      std::memcpy(server_nonce.data(), challenge.data() + sizeof(kChallengeMagic), kNonceBytes);
      if (!hal::util::random_bytes(client_nonce)) {
        out_status = errno_failure("getrandom");
        return nullptr;
      }
      // The server proves the secret first: nothing derived from it leaves
      // this rank before that proof checks out, so a process that took the
      // port first learns nothing to test guesses against.
      Proof theirs{};
      status = client->send_bytes(client_nonce.data(), client_nonce.size(), deadline);
      if (status.ok()) status = client->recv_bytes(theirs.data(), theirs.size(), deadline);
      if (!status.ok()) {
        out_status =
            Status::failure(status.result, "the TCP store at " + address.text() +
                                               " broke off the handshake: " + status.message);
        return nullptr;
      }
      if (!hal::util::equal_in_constant_time(
              theirs, proof(secret, kServerRole, server_nonce, client_nonce))) {
        out_status = Status::failure(
            HAL_ERROR_INVALID_ARGUMENT,
            "the TCP store at " + address.text() +
                " did not prove this rank's secret (an id from another job, a different "
                "HAL_COMM_STORE_SECRET, or another process listening on that port)");
        return nullptr;
      }
      const Proof mine = proof(secret, kClientRole, server_nonce, client_nonce);
      if (status = client->send_bytes(mine.data(), mine.size(), deadline); !status.ok()) {
        out_status = status;
        return nullptr;
      }
      client->to_server_ =
          std::make_unique<FrameSeal>(secret, kToServer, server_nonce, client_nonce);
      client->from_server_ =
          std::make_unique<FrameSeal>(secret, kToClient, server_nonce, client_nonce);
      client->broken_ = false;
      return client;
    }
    if (status.result != HAL_ERROR_REMOTE) {  // the deadline or an abort
      out_status = Status::failure(status.result, "no TCP store answered at " + address.text() +
                                                      " in time: " + status.message);
      return nullptr;
    }
    client.reset();
    // Refused (not listening yet) or closed at once (full): retry shortly.
    if (deadline.is_aborted() || Clock::now() >= deadline.at) {
      out_status = Status::failure(HAL_ERROR_TIMEOUT,
                                   "no TCP store answered at " + address.text() + " in time");
      return nullptr;
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(10), deadline.at - Clock::now()));
  }
}

StoreClient::~StoreClient() {
  // An interrupted (aborted) rank leaves without a goodbye: its peers fail.
  if (fd_ >= 0 && !broken_ && !interrupted_.load()) {
    request(kBye, {}, nullptr, 0, 0, Deadline::after_ms(kByeDeadlineMs, nullptr));
  }
  if (fd_ >= 0) ::close(fd_);
  ::close(interrupt_fd_);
}

void StoreClient::interrupt() noexcept {
  interrupted_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t ignored = ::write(interrupt_fd_, &one, sizeof(one));
}

void StoreClient::sever() {
  if (fd_ < 0) return;
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  fd_ = -1;
}

Status StoreClient::broken(Status status) {
  broken_ = true;
  broken_status_ = status;
  return status;
}

Status StoreClient::wait_ready(short events, const Deadline& deadline) {
  while (true) {
    pollfd fds[2] = {{fd_, events, 0}, {interrupt_fd_, POLLIN, 0}};
    if (deadline.is_aborted()) {
      return Status::failure(HAL_ERROR_INVALID_STATE, "the communicator was aborted");
    }
    if (Clock::now() >= deadline.at) {
      return Status::failure(HAL_ERROR_TIMEOUT, "the deadline passed waiting for the TCP store");
    }
    // Bounded naps: the abort flag is seen even if nobody calls interrupt().
    const int ready = ::poll(fds, 2, std::min(ms_until(deadline.at), 100));
    if (ready < 0 && errno != EINTR) return errno_failure("poll");
    if (fds[1].revents != 0) {
      return Status::failure(HAL_ERROR_INVALID_STATE, "the communicator was aborted");
    }
    if (fds[0].revents != 0) return {};
  }
}

Status StoreClient::send_bytes(const void* data, size_t bytes, const Deadline& deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t sent = ::send(fd_, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno == EAGAIN) {
      if (Status s = wait_ready(POLLOUT, deadline); !s.ok()) return s;
      continue;
    }
    if (sent <= 0) return Status::failure(HAL_ERROR_REMOTE, "the TCP store connection broke");
    p += sent;
    bytes -= static_cast<size_t>(sent);
  }
  return {};
}

Status StoreClient::recv_bytes(void* data, size_t bytes, const Deadline& deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t got = ::recv(fd_, p, bytes, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) {
      if (Status s = wait_ready(POLLIN, deadline); !s.ok()) return s;
      continue;
    }
    if (got <= 0) return Status::failure(HAL_ERROR_REMOTE, "the TCP store went away");
    p += got;
    bytes -= static_cast<size_t>(got);
  }
  return {};
}

Status StoreClient::tampered(const char* what) {
  return broken(Status::failure(
      HAL_ERROR_REMOTE, "the TCP store at " + address_ + ": " + what + " (frame " +
                            std::to_string(from_server_->sequence()) +
                            ") failed its integrity check: altered, replayed or reordered on the "
                            "way"));
}

Status StoreClient::request(uint32_t op, const std::string& key, const void* data, size_t bytes,
                            uint64_t argument, const Deadline& deadline) {
  if (fd_ < 0) return Status::failure(HAL_ERROR_INVALID_STATE, "the store connection is closed");
  if (broken_) return broken_status_;
  const Frame frame{op, 0, argument, key.size(), bytes};
  const std::span key_bytes(reinterpret_cast<const uint8_t*>(key.data()), key.size());
  const std::span value(static_cast<const uint8_t*>(data), bytes);
  const Mac mac = to_server_->seal(frame, key_bytes, value);
  // One write for a small frame (each separate one would wake the store
  // once more); a large value is sent from where it lies.
  const bool whole = bytes <= kCopiedValueBytes;
  std::vector<uint8_t> head(sizeof(frame) + key.size() + (whole ? bytes + kMacBytes : 0));
  uint8_t* at = head.data();
  std::memcpy(at, &frame, sizeof(frame));
  at += sizeof(frame);
  if (!key.empty()) std::memcpy(at, key.data(), key.size());
  at += key.size();
  if (whole) {
    if (bytes != 0) std::memcpy(at, data, bytes);
    std::memcpy(at + bytes, mac.data(), mac.size());
  }
  Status s = send_bytes(head.data(), head.size(), deadline);
  if (s.ok() && !whole) s = send_bytes(data, bytes, deadline);
  if (s.ok() && !whole) s = send_bytes(mac.data(), mac.size(), deadline);
  if (s.ok()) return s;
  // A store that dropped this rank may have said why first (a frame of it
  // failed its check): that reply is still in the socket.
  if (s.result == HAL_ERROR_REMOTE) {
    Status said = reply(nullptr, 0, 0, nullptr, Deadline::after_ms(kExplainMs, nullptr));
    if (said.result == HAL_ERROR_REMOTE && dropped_for_integrity_) s = said;
  }
  return broken(s);
}

namespace {

// What a HAL_ERROR_REMOTE reply's argument says happened.
std::string remote_failure(uint64_t argument, const std::string& address) {
  const uint32_t rank_plus_one = static_cast<uint32_t>(argument);
  const std::string whose =
      rank_plus_one != 0 ? "rank " + std::to_string(rank_plus_one - 1) : std::string("a peer rank");
  switch (static_cast<uint32_t>(argument >> 32)) {
    case kYourFrameTampered:
      return "the TCP store at " + address +
             " dropped this rank: a frame it sent failed its integrity check (altered, "
             "replayed or reordered on the way)";
    case kPeerFrameTampered:
      return whose + "'s connection to the TCP store at " + address +
             " failed its integrity check (a frame altered, replayed or reordered on the way); "
             "the communicator is over";
    default:
      return whose + " died or left the communicator";
  }
}

}  // namespace

// Reads one reply, checks its MAC, then acts on it; its value goes to
// (*out_value)[offset...], which must stay within |max_bytes|.
Status StoreClient::reply(std::vector<uint8_t>* out_value, size_t offset, size_t max_bytes,
                          uint64_t* out_argument, const Deadline& deadline) {
  Frame frame{};
  if (Status s = recv_bytes(&frame, sizeof(frame), deadline); !s.ok()) return broken(s);
  const bool sized = frame.value_bytes <= max_bytes - std::min(offset, max_bytes);
  // A store answers one of three results; the field is never cast unchecked.
  const bool known_status = frame.status == HAL_SUCCESS || frame.status == HAL_ERROR_REMOTE ||
                            frame.status == HAL_ERROR_ARGUMENT_MISMATCH;
  if (frame.op != kReply || frame.key_bytes != 0 || !sized || !known_status ||
      (frame.status != HAL_SUCCESS && frame.value_bytes != 0) ||
      (out_value == nullptr && frame.value_bytes != 0)) {
    return broken(
        Status::failure(HAL_ERROR_REMOTE,
                        "the TCP store sent a malformed reply (or a value larger than expected)"));
  }
  std::span<const uint8_t> value;
  if (frame.value_bytes != 0) {
    out_value->resize(offset + frame.value_bytes);
    if (Status s = recv_bytes(out_value->data() + offset, frame.value_bytes, deadline); !s.ok()) {
      return broken(s);
    }
    value = std::span(out_value->data() + offset, frame.value_bytes);
  }
  Mac mac;
  if (Status s = recv_bytes(mac.data(), mac.size(), deadline); !s.ok()) return broken(s);
  if (!from_server_->open(frame, {}, value, mac)) {
    if (out_value != nullptr) out_value->resize(offset);  // nothing unverified stays
    return tampered("a reply");
  }
  if (frame.status == HAL_ERROR_REMOTE) {
    dropped_for_integrity_ = (frame.argument >> 32) == kYourFrameTampered;
    return Status::failure(HAL_ERROR_REMOTE, remote_failure(frame.argument, address_));
  }
  if (frame.status == HAL_ERROR_ARGUMENT_MISMATCH) {
    return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                           "the ranks disagree on the rank count, or a rank joined twice");
  }
  if (out_argument != nullptr) *out_argument = frame.argument;
  return {};
}

Status StoreClient::join(const std::string& session, uint32_t rank, uint32_t ranks,
                         const Deadline& deadline) {
  const uint64_t argument = (static_cast<uint64_t>(rank) << 32) | ranks;
  if (Status s = request(kJoin, session, nullptr, 0, argument, deadline); !s.ok()) return s;
  return reply(nullptr, 0, 0, nullptr, deadline);
}

namespace {
// Values above one frame's limit travel as numbered chunks; the first,
// under the key itself, carries the total size in its argument.
constexpr size_t kChunkBytes = 16u << 20;
std::string chunk_key(const std::string& key, size_t index) {
  return index == 0 ? key : key + "~" + std::to_string(index);
}
}  // namespace

Status StoreClient::set(const std::string& key, const void* data, size_t bytes,
                        const Deadline& deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t index = 0;
  size_t done = 0;
  do {
    const size_t chunk = std::min(kChunkBytes, bytes - done);
    if (Status s = request(kSet, chunk_key(key, index), p + done, chunk, bytes, deadline); !s.ok())
      return s;
    done += chunk;
    ++index;
  } while (done < bytes);
  return {};
}

Status StoreClient::take(const std::string& key, std::vector<uint8_t>& out_value, size_t max_bytes,
                         const Deadline& deadline) {
  out_value.clear();
  uint64_t total = 0;
  size_t index = 0;
  do {
    if (Status s = request(kTake, chunk_key(key, index), nullptr, 0, 0, deadline); !s.ok())
      return s;
    uint64_t announced = 0;
    if (Status s = reply(&out_value, out_value.size(), max_bytes, &announced, deadline); !s.ok())
      return s;
    if (index == 0) total = announced;
    if (announced != total || total > max_bytes || out_value.size() > total ||
        (out_value.size() < total && out_value.size() != (index + 1) * kChunkBytes)) {
      return broken(Status::failure(HAL_ERROR_REMOTE, "the TCP store sent inconsistent chunks"));
    }
    ++index;
  } while (out_value.size() < total);
  return {};
}

}  // namespace hal::collective
