// The collectives TCP store's wire protocol (loader/collective_store.cpp),
// both ends. The first input byte picks the role the input plays:
//   0: a peer that never authenticates: the rest is sent as is
//   1: an authenticated peer: the rest is sent as frames
//   2: an authenticated peer that joined a session first
//   3: a store answering a real client: after a correct handshake the rest
//      is what the client reads as replies to a join and a take
// After each input the store must still serve a whole join/set/take round
// trip, and the client must have returned (no hang, no huge allocation).
#include "collective_store.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

using namespace hal::collective;
using namespace hal::collective::store_wire;

namespace {

const StoreSecret kSecret = [] {
  StoreSecret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(i * 13 + 1);
  return s;
}();

// libFuzzer's timeout alarm (SIGALRM, installed without SA_RESTART) may
// interrupt any of the harness's socket calls: each retries on EINTR, so an
// interrupted call is never mistaken for the store's answer.

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    // Interrupted: the connection goes on in the background; wait for it.
    int error = errno;
    if (error == EINTR) {
      pollfd writable{fd, POLLOUT, 0};
      int ready;
      do {
        ready = ::poll(&writable, 1, 5000);
      } while (ready < 0 && errno == EINTR);
      socklen_t length = sizeof(error);
      if (ready == 1)
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      else
        error = ready == 0 ? ETIMEDOUT : errno;
    }
    if (error != 0) {
      errno = error;
      std::perror("connect to the store");
      std::abort();
    }
  }
  return fd;
}

bool read_exact(int fd, void* data, size_t bytes) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t got = ::recv(fd, p, bytes, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

void write_all(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t sent = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return;  // dropped by the store: a fine outcome
    p += sent;
    bytes -= static_cast<size_t>(sent);
  }
}

// Reads until the other end closes: the store has then seen every byte.
void drain(int fd) {
  uint8_t buffer[4096];
  for (;;) {
    const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
  }
}

bool client_handshake(int fd) {
  uint8_t challenge[kChallengeBytes];
  if (!read_exact(fd, challenge, sizeof(challenge))) return false;
  Nonce server_nonce, client_nonce{};
  std::memcpy(server_nonce.data(), challenge + sizeof(kChallengeMagic), kNonceBytes);
  const Proof mine = proof(kSecret, "hal-store-client", server_nonce, client_nonce);
  write_all(fd, client_nonce.data(), kNonceBytes);
  write_all(fd, mine.data(), mine.size());
  Proof theirs;
  return read_exact(fd, theirs.data(), theirs.size());
}

void fuzz_server(uint16_t port, uint8_t role, const uint8_t* data, size_t size) {
  const int fd = connect_to(port);
  if (role >= 1 && !client_handshake(fd)) {
    std::fprintf(stderr, "the store refused a correct handshake\n");
    std::abort();
  }
  if (role == 2) {
    const std::string session = "fuzz";
    const Frame join{kJoin, 0, 1, session.size(), 0};  // rank 0 of 1
    write_all(fd, &join, sizeof(join));
    write_all(fd, session.data(), session.size());
  }
  write_all(fd, data, size);
  ::shutdown(fd, SHUT_WR);
  drain(fd);
  ::close(fd);
}

void fuzz_client(const uint8_t* data, size_t size) {
  static const int listener = [] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 4) != 0)
      std::abort();
    return fd;
  }();
  sockaddr_in addr{};
  socklen_t length = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length);
  std::thread fake_store([&] {
    int peer;
    do {
      peer = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    } while (peer < 0 && errno == EINTR);
    if (peer < 0) return;
    Nonce server_nonce{};
    write_all(peer, kChallengeMagic, sizeof(kChallengeMagic));
    write_all(peer, server_nonce.data(), kNonceBytes);
    uint8_t response[kResponseBytes];
    if (read_exact(peer, response, sizeof(response))) {
      Nonce client_nonce;
      std::memcpy(client_nonce.data(), response, kNonceBytes);
      const Proof mine = proof(kSecret, "hal-store-server", server_nonce, client_nonce);
      write_all(peer, mine.data(), mine.size());
      write_all(peer, data, size);
    }
    ::shutdown(peer, SHUT_WR);
    drain(peer);
    ::close(peer);
  });
  {
    Status status;
    auto client = StoreClient::connect({"127.0.0.1", ntohs(addr.sin_port)}, kSecret,
                                       Deadline::after_ms(5000, nullptr), status);
    if (client) {
      const Status joined = client->join("s", 0, 1, Deadline::after_ms(5000, nullptr));
      std::vector<uint8_t> value;
      const Status taken = client->take("k", value, 1024, Deadline::after_ms(5000, nullptr));
      if (taken.ok() && value.size() > 1024) std::abort();
      if (joined.result == HAL_ERROR_TIMEOUT || taken.result == HAL_ERROR_TIMEOUT) {
        std::fprintf(stderr, "the client waited for a store that had closed\n");
        std::abort();
      }
    }
  }  // the client says goodbye and closes: the fake store's drain ends
  fake_store.join();
}

void check_serves(uint16_t port) {
  static int round = 0;
  Status status;
  auto client =
      StoreClient::connect({"127.0.0.1", port}, kSecret, Deadline::after_ms(5000, nullptr), status);
  const std::string value = "probe";
  std::vector<uint8_t> got;
  const bool ok =
      client &&
      client->join("probe" + std::to_string(round++), 0, 1, Deadline::after_ms(5000, nullptr))
          .ok() &&
      client->set("k", value.data(), value.size(), Deadline::after_ms(5000, nullptr)).ok() &&
      client->take("k", got, 64, Deadline::after_ms(5000, nullptr)).ok() &&
      std::string(got.begin(), got.end()) == value;
  if (!ok) {
    std::fprintf(stderr, "the store stopped serving: %s\n", status.message.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<StoreServer> server = [] {
    StoreLimits limits;
    limits.max_key_bytes = 256;
    limits.max_value_bytes = 64 * 1024;
    limits.max_buffered_bytes = 1 << 20;
    Status status;
    auto started = StoreServer::start({"127.0.0.1", 0}, kSecret, limits, status);
    if (!started) {
      std::fprintf(stderr, "the store did not start: %s\n", status.message.c_str());
      std::abort();
    }
    return started;
  }();
  if (size == 0 || size > 64 * 1024) return 0;
  const uint8_t role = data[0] % 4;
  if (role == 3) {
    fuzz_client(data + 1, size - 1);
  } else {
    fuzz_server(server->port(), role, data + 1, size - 1);
  }
  check_serves(server->port());
  return 0;
}
