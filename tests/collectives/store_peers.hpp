// Raw peers of the TCP store for its tests: sockets that speak the wire
// format by hand (store_wire), a fake store, and a legitimate round trip.
#pragma once

#include <catch2/catch.hpp>

#include "collective_store.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace store_test {

using namespace hal::collective;
using namespace hal::collective::store_wire;

inline StoreSecret secret_of(uint8_t seed) {
  StoreSecret s;
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed + i * 7);
  return s;
}

inline Deadline in_ms(uint32_t ms, const std::atomic<bool>* abort = nullptr) {
  return Deadline::after_ms(ms, abort);
}

inline std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A blocking socket to 127.0.0.1:|port| with a receive timeout (a test never hangs).
inline int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

inline bool read_exact(int fd, void* data, size_t bytes) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t got = ::recv(fd, p, bytes, 0);
    if (got <= 0) return false;
    p += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

inline void write_all(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t sent = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (sent <= 0) return;  // the server may have dropped us: that is what some tests want
    p += sent;
    bytes -= static_cast<size_t>(sent);
  }
}

// True when the server closed |fd| (EOF or reset) within the receive timeout.
inline bool closed_by_peer(int fd) {
  uint8_t byte;
  while (true) {
    const ssize_t got = ::recv(fd, &byte, 1, 0);
    if (got == 0) return true;
    if (got < 0) return errno == ECONNRESET;
  }
}

// The frame keys of one end of a raw connection, once authenticated.
struct Seals {
  std::unique_ptr<FrameSeal> out;  // what this end sends
  std::unique_ptr<FrameSeal> in;   // what it receives
};

// Completes the client side of the handshake with |secret| on a raw socket:
// the server proves first. Returns whether it proved the same secret (the
// client's proof is sent only then); |seals| then hold the frame keys.
inline bool raw_authenticate(int fd, const StoreSecret& secret, Seals* seals = nullptr) {
  uint8_t challenge[kChallengeBytes];
  if (!read_exact(fd, challenge, sizeof(challenge))) return false;
  Nonce server_nonce, client_nonce{};
  std::memcpy(server_nonce.data(), challenge + 8, kNonceBytes);
  client_nonce[0] = 42;
  write_all(fd, client_nonce.data(), kNonceBytes);
  Proof theirs;
  if (!read_exact(fd, theirs.data(), theirs.size())) return false;
  if (theirs != proof(secret, kServerRole, server_nonce, client_nonce)) return false;
  const Proof mine = proof(secret, kClientRole, server_nonce, client_nonce);
  write_all(fd, mine.data(), kProofBytes);
  if (seals != nullptr) {
    seals->out = std::make_unique<FrameSeal>(secret, kToServer, server_nonce, client_nonce);
    seals->in = std::make_unique<FrameSeal>(secret, kToClient, server_nonce, client_nonce);
  }
  return true;
}

// A frame: its header, key and value, and its MAC when |seal| is given (a
// header alone, for a frame the store must refuse on its header).
inline void send_frame(int fd, FrameSeal* seal, uint32_t op, uint64_t argument,
                       const std::string& key, uint64_t value_bytes, const void* value = nullptr) {
  const Frame frame{op, 0, argument, key.size(), value_bytes};
  if (seal != nullptr) {
    const auto bytes = sealed_frame(
        *seal, frame, bytes_of(key),
        std::span(static_cast<const uint8_t*>(value), value != nullptr ? value_bytes : 0));
    write_all(fd, bytes.data(), bytes.size());
    return;
  }
  write_all(fd, &frame, sizeof(frame));
  write_all(fd, key.data(), key.size());
  if (value != nullptr) write_all(fd, value, value_bytes);
}

// Reads one whole frame (header, key, value, MAC); false when the peer closed.
inline bool read_frame(int fd, Frame& frame, std::vector<uint8_t>& body) {
  if (!read_exact(fd, &frame, sizeof(frame))) return false;
  body.resize(frame.key_bytes + frame.value_bytes + kMacBytes);
  return read_exact(fd, body.data(), body.size());
}

inline std::shared_ptr<StoreServer> start_store(const StoreSecret& secret,
                                                StoreLimits limits = {}) {
  Status status;
  auto server = StoreServer::start({"127.0.0.1", 0}, secret, limits, status);
  INFO(status.message);
  REQUIRE(server);
  return server;
}

// A whole legitimate round trip on a fresh session: the store still serves.
inline void check_store_serves(uint16_t port, const StoreSecret& secret) {
  static std::atomic<int> sessions{0};
  Status status;
  auto client = StoreClient::connect({"127.0.0.1", port}, secret, in_ms(5000), status);
  INFO(status.message);
  REQUIRE(client);
  REQUIRE(client->join("probe" + std::to_string(sessions++), 0, 1, in_ms(5000)).ok());
  const std::string sent = "still serving";
  REQUIRE(client->set("k", sent.data(), sent.size(), in_ms(5000)).ok());
  std::vector<uint8_t> got;
  REQUIRE(client->take("k", got, 100, in_ms(5000)).ok());
  CHECK(std::string(got.begin(), got.end()) == sent);
}

// A listener that accepts nothing (and a helper that plays a store).
struct FakeServer {
  int fd = -1;
  uint16_t port = 0;
  explicit FakeServer(int backlog = 16) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(addr);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd, backlog) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
    port = ntohs(addr.sin_port);
  }
  ~FakeServer() { ::close(fd); }
  // Accepts one client and runs the server side of the handshake; |seals|
  // then hold the frame keys (replies out, requests in).
  int accept_authenticated(const StoreSecret& secret, Seals* seals = nullptr) {
    const int peer = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(peer >= 0);
    Nonce server_nonce{};
    server_nonce[1] = 7;
    write_all(peer, kChallengeMagic, sizeof(kChallengeMagic));
    write_all(peer, server_nonce.data(), kNonceBytes);
    Nonce client_nonce;
    REQUIRE(read_exact(peer, client_nonce.data(), kNonceBytes));
    const Proof mine = proof(secret, kServerRole, server_nonce, client_nonce);
    write_all(peer, mine.data(), mine.size());
    Proof theirs;
    REQUIRE(read_exact(peer, theirs.data(), theirs.size()));
    if (seals != nullptr) {
      seals->out = std::make_unique<FrameSeal>(secret, kToClient, server_nonce, client_nonce);
      seals->in = std::make_unique<FrameSeal>(secret, kToServer, server_nonce, client_nonce);
    }
    return peer;
  }
};

}  // namespace store_test
