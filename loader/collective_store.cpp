#include "collective_store.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

namespace hal::collective {

namespace {

enum Op : uint32_t { kReply = 0, kJoin = 1, kSet = 2, kTake = 3, kBye = 4 };

struct Frame {
  uint32_t op;
  uint32_t status;  // a hal_result_t in replies
  uint64_t argument;
  uint64_t key_bytes;
  uint64_t value_bytes;
};

bool send_all(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t sent = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    bytes -= static_cast<size_t>(sent);
  }
  return true;
}

bool send_frame(int fd, const Frame& frame, const std::string& key, const void* value) {
  return send_all(fd, &frame, sizeof(frame)) && send_all(fd, key.data(), key.size()) &&
         send_all(fd, value, frame.value_bytes);
}

void send_reply(int fd, hal_result_t status, const std::vector<uint8_t>* value = nullptr) {
  const Frame frame{kReply, static_cast<uint32_t>(status), 0, 0, value ? value->size() : 0};
  send_frame(fd, frame, {}, value ? value->data() : nullptr);  // a dead reader is its own problem
}

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

struct Session {
  uint32_t ranks = 0;
  std::set<uint32_t> members;
  std::vector<int> join_waiters;
  bool failed = false;
  std::map<std::string, std::vector<uint8_t>> values;
  std::multimap<std::string, int> takers;  // key -> connection waiting for it
};

struct Connection {
  std::vector<uint8_t> in;
  std::string session;
  bool joined = false;
  bool clean = false;
};

class ServerState {
 public:
  void handle(int fd, Connection& conn, const Frame& frame, std::string key,
              std::vector<uint8_t> value) {
    switch (frame.op) {
      case kJoin:
        return join(fd, conn, key, static_cast<uint32_t>(frame.argument >> 32),
                    static_cast<uint32_t>(frame.argument));
      case kSet: {
        Session& s = sessions_[conn.session];
        if (auto taker = s.takers.find(key); taker != s.takers.end()) {
          send_reply(taker->second, HAL_SUCCESS, &value);
          s.takers.erase(taker);
        } else {
          s.values[std::move(key)] = std::move(value);
        }
        return;
      }
      case kTake: {
        Session& s = sessions_[conn.session];
        if (s.failed) return send_reply(fd, HAL_ERROR_REMOTE);
        if (auto found = s.values.find(key); found != s.values.end()) {
          send_reply(fd, HAL_SUCCESS, &found->second);
          s.values.erase(found);
        } else {
          s.takers.emplace(std::move(key), fd);
        }
        return;
      }
      case kBye:
        conn.clean = true;
        return;
      default:
        return;
    }
  }

  void closed(int fd, const Connection& conn) {
    if (!conn.joined) return;
    Session& s = sessions_[conn.session];
    for (auto it = s.takers.begin(); it != s.takers.end();) {
      it = it->second == fd ? s.takers.erase(it) : std::next(it);
    }
    if (!conn.clean) fail(s);
  }

 private:
  void join(int fd, Connection& conn, const std::string& name, uint32_t rank, uint32_t ranks) {
    Session& s = sessions_[name];
    if (s.failed) return send_reply(fd, HAL_ERROR_REMOTE);
    if (s.ranks == 0) s.ranks = ranks;
    if (ranks != s.ranks || rank >= ranks || s.members.count(rank) != 0) {
      return send_reply(fd, HAL_ERROR_ARGUMENT_MISMATCH);
    }
    s.members.insert(rank);
    conn.joined = true;
    conn.session = name;
    s.join_waiters.push_back(fd);
    if (s.members.size() == s.ranks) {
      for (int waiter : s.join_waiters) send_reply(waiter, HAL_SUCCESS);
      s.join_waiters.clear();
    }
  }

  void fail(Session& s) {
    s.failed = true;
    for (int waiter : s.join_waiters) send_reply(waiter, HAL_ERROR_REMOTE);
    for (const auto& [key, taker] : s.takers) send_reply(taker, HAL_ERROR_REMOTE);
    s.join_waiters.clear();
    s.takers.clear();
    s.values.clear();
  }

  std::map<std::string, Session> sessions_;
};

}  // namespace

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

std::unique_ptr<StoreServer> StoreServer::start(const StoreAddress& address, Status& out_status) {
  sockaddr_in addr{};
  if (!to_sockaddr(address, addr)) {
    out_status = Status::failure(HAL_ERROR_INVALID_ARGUMENT, "bad store host " + address.host);
    return nullptr;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    out_status = errno_failure("socket");
    return nullptr;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t length = sizeof(addr);
  int pipe_fds[2] = {-1, -1};
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0 ||
      ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    out_status = errno_failure(("the TCP store cannot listen on " + address.text()).c_str());
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<StoreServer>(
      new StoreServer(fd, pipe_fds[0], pipe_fds[1], ntohs(addr.sin_port)));
}

StoreServer::StoreServer(int listen_fd, int wake_read, int wake_write, uint16_t port)
    : listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write), port_(port) {
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  const char stop = 1;
  [[maybe_unused]] ssize_t ignored = ::write(wake_write_, &stop, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_read_);
  ::close(wake_write_);
}

void StoreServer::serve() {
  ServerState state;
  std::map<int, Connection> connections;
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& [fd, conn] : connections) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        connections.emplace(fd, Connection{});
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = fds[i].fd;
      Connection& conn = connections[fd];
      uint8_t buffer[64 * 1024];
      const ssize_t got = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got <= 0) {
        state.closed(fd, conn);
        ::close(fd);
        connections.erase(fd);
        continue;
      }
      conn.in.insert(conn.in.end(), buffer, buffer + got);
      while (conn.in.size() >= sizeof(Frame)) {
        Frame frame;
        std::memcpy(&frame, conn.in.data(), sizeof(frame));
        const size_t total = sizeof(frame) + frame.key_bytes + frame.value_bytes;
        if (conn.in.size() < total) break;
        const auto* key = reinterpret_cast<const char*>(conn.in.data() + sizeof(frame));
        std::vector<uint8_t> value(conn.in.begin() + sizeof(frame) + frame.key_bytes,
                                   conn.in.begin() + total);
        state.handle(fd, conn, frame, std::string(key, frame.key_bytes), std::move(value));
        conn.in.erase(conn.in.begin(), conn.in.begin() + total);
      }
    }
  }
  for (const auto& [fd, conn] : connections) ::close(fd);
}

std::unique_ptr<StoreClient> StoreClient::connect(const StoreAddress& address,
                                                  const Deadline& deadline, Status& out_status) {
  sockaddr_in addr{};
  if (!to_sockaddr(address, addr)) {
    out_status = Status::failure(HAL_ERROR_INVALID_ARGUMENT, "bad store host " + address.host);
    return nullptr;
  }
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      out_status = errno_failure("socket");
      return nullptr;
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return std::unique_ptr<StoreClient>(new StoreClient(fd));
    }
    ::close(fd);
    if (deadline.is_aborted() || Clock::now() > deadline.at) {
      out_status = Status::failure(HAL_ERROR_TIMEOUT,
                                   "no TCP store answered at " + address.text() + " in time");
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

StoreClient::~StoreClient() {
  if (fd_ < 0) return;
  request(kBye, {}, nullptr, 0, 0);
  ::close(fd_);
}

void StoreClient::sever() {
  if (fd_ < 0) return;
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  fd_ = -1;
}

Status StoreClient::request(uint32_t op, const std::string& key, const void* data, size_t bytes,
                            uint64_t argument) {
  if (fd_ < 0) return Status::failure(HAL_ERROR_INVALID_STATE, "the store connection is closed");
  const Frame frame{op, 0, argument, key.size(), bytes};
  if (!send_frame(fd_, frame, key, data)) {
    return Status::failure(HAL_ERROR_REMOTE, "the TCP store connection broke");
  }
  return {};
}

Status StoreClient::reply(std::vector<uint8_t>* out_value, const Deadline& deadline) {
  Frame frame{};
  std::vector<uint8_t> value;
  size_t have = 0;
  auto* header = reinterpret_cast<uint8_t*>(&frame);
  size_t need = sizeof(frame);
  bool header_done = false;
  while (true) {
    if (have == need) {
      if (header_done) break;
      header_done = true;
      value.resize(frame.value_bytes);
      have = 0;
      need = frame.value_bytes;
      continue;
    }
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, 10);
    if (ready == 0 || (ready < 0 && errno == EINTR)) {
      if (deadline.is_aborted()) {
        return Status::failure(HAL_ERROR_INVALID_STATE, "the communicator was aborted");
      }
      if (Clock::now() > deadline.at) {
        return Status::failure(HAL_ERROR_TIMEOUT, "the deadline passed waiting for a peer");
      }
      continue;
    }
    uint8_t* target = header_done ? value.data() : header;
    const ssize_t got = ::recv(fd_, target + have, need - have, 0);
    if (got <= 0) return Status::failure(HAL_ERROR_REMOTE, "the TCP store went away");
    have += static_cast<size_t>(got);
  }
  const auto status = static_cast<hal_result_t>(frame.status);
  if (status == HAL_ERROR_REMOTE) {
    return Status::failure(status, "a peer rank died or left the communicator");
  }
  if (status != HAL_SUCCESS) {
    return Status::failure(status, "the ranks disagree on the rank count, or a rank joined twice");
  }
  if (out_value != nullptr) *out_value = std::move(value);
  return {};
}

Status StoreClient::join(const std::string& session, uint32_t rank, uint32_t ranks,
                         const Deadline& deadline) {
  const uint64_t argument = (static_cast<uint64_t>(rank) << 32) | ranks;
  if (Status s = request(kJoin, session, nullptr, 0, argument); !s.ok()) return s;
  return reply(nullptr, deadline);
}

Status StoreClient::set(const std::string& key, const void* data, size_t bytes) {
  return request(kSet, key, data, bytes, 0);
}

Status StoreClient::take(const std::string& key, std::vector<uint8_t>& out_value,
                         const Deadline& deadline) {
  if (Status s = request(kTake, key, nullptr, 0, 0); !s.ok()) return s;
  return reply(&out_value, deadline);
}

}  // namespace hal::collective
