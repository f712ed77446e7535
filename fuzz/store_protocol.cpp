// The collectives TCP store's wire protocol (collective/store/collective_store.cpp),
// both ends. The first input byte picks the role the input plays (mod 7):
//   0: a peer that never authenticates: the rest is sent as is
//   1: an authenticated peer: the rest is read as frames (header, then as
//      much of its key and value as the input holds), each sealed with a
//      valid MAC by the harness before it is sent
//   2: the same, after joining a session
//   3: a store answering a real client: after a correct handshake the rest
//      is read as reply frames, sealed, that the client reads as the
//      answers to a join and a take
//   4: role 2, then the sealed stream is tampered with as a relay would:
//      byte 1 picks flip / replay / swap, bytes 2-3 where (the rest are frames)
//   5: role 3, tampered the same way; a take that succeeds must return the
//      value the untampered replies carried (a tampered value never passes)
//   6: role 2 without the harness's MACs: the frames' MAC bytes are the
//      input's own (forged)
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
#include <memory>
#include <span>
#include <thread>
#include <vector>

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

// The two frame keys of a connection, as one end holds them.
struct Seals {
  std::unique_ptr<FrameSeal> out;
  std::unique_ptr<FrameSeal> in;
};

bool client_handshake(int fd, Seals& seals) {
  uint8_t challenge[kChallengeBytes];
  if (!read_exact(fd, challenge, sizeof(challenge))) return false;
  Nonce server_nonce, client_nonce{};
  std::memcpy(server_nonce.data(), challenge + sizeof(kChallengeMagic), kNonceBytes);
  write_all(fd, client_nonce.data(), kNonceBytes);
  Proof theirs;
  if (!read_exact(fd, theirs.data(), theirs.size()) ||
      theirs != proof(kSecret, kServerRole, server_nonce, client_nonce)) {
    return false;
  }
  const Proof mine = proof(kSecret, kClientRole, server_nonce, client_nonce);
  write_all(fd, mine.data(), mine.size());
  seals.out = std::make_unique<FrameSeal>(kSecret, kToServer, server_nonce, client_nonce);
  seals.in = std::make_unique<FrameSeal>(kSecret, kToClient, server_nonce, client_nonce);
  return true;
}

// The input read as frames: each a header, then as much of its key and
// value as the input still holds. Whole frames are sealed with |seal|; a
// cut one (and any tail shorter than a header) goes as is and ends the list.
std::vector<std::vector<uint8_t>> sealed_frames(FrameSeal& seal, const uint8_t* data, size_t size) {
  std::vector<std::vector<uint8_t>> frames;
  while (size > 0) {
    if (size < sizeof(Frame)) {
      frames.emplace_back(data, data + size);
      break;
    }
    Frame frame;
    std::memcpy(&frame, data, sizeof(frame));
    const size_t left = size - sizeof(Frame);
    const bool whole = frame.key_bytes <= left && frame.value_bytes <= left - frame.key_bytes;
    if (!whole) {
      frames.emplace_back(data, data + size);
      break;
    }
    const uint8_t* key = data + sizeof(Frame);
    const uint8_t* value = key + frame.key_bytes;
    frames.push_back(sealed_frame(seal, frame, std::span(key, frame.key_bytes),
                                  std::span(value, frame.value_bytes)));
    const size_t used = sizeof(Frame) + frame.key_bytes + frame.value_bytes;
    data += used;
    size -= used;
  }
  return frames;
}

// What a relay does to a sealed stream: |action| 0 flips one byte (at
// |where| in the stream), 1 sends frame |where| twice, 2 swaps frames
// |where| and |where| + 1.
std::vector<uint8_t> tampered(const std::vector<std::vector<uint8_t>>& frames, uint8_t action,
                              uint16_t where) {
  std::vector<std::vector<uint8_t>> order = frames;
  if (!order.empty()) {
    const size_t at = where % order.size();
    if (action % 3 == 1) order.insert(order.begin() + static_cast<ptrdiff_t>(at), order[at]);
    if (action % 3 == 2 && at + 1 < order.size()) std::swap(order[at], order[at + 1]);
  }
  std::vector<uint8_t> stream;
  for (const auto& frame : order) stream.insert(stream.end(), frame.begin(), frame.end());
  if (action % 3 == 0 && !stream.empty()) stream[where % stream.size()] ^= 0x01;
  return stream;
}

void fuzz_server(uint16_t port, uint8_t role, const uint8_t* data, size_t size) {
  const int fd = connect_to(port);
  Seals seals;
  if (role >= 1 && !client_handshake(fd, seals)) {
    std::fprintf(stderr, "the store refused a correct handshake\n");
    std::abort();
  }
  if (role == 2 || role == 4 || role == 6) {
    const std::string session = "fuzz";
    const Frame join{kJoin, 0, 1, session.size(), 0};  // rank 0 of 1
    const auto bytes = sealed_frame(
        *seals.out, join,
        std::span(reinterpret_cast<const uint8_t*>(session.data()), session.size()), {});
    write_all(fd, bytes.data(), bytes.size());
  }
  if (role == 0 || role == 6) {
    write_all(fd, data, size);
  } else if (role == 4) {
    const uint8_t action = size > 0 ? data[0] : 0;
    const uint16_t where = size > 2 ? static_cast<uint16_t>(data[1] | data[2] << 8) : 0;
    const size_t skip = std::min<size_t>(size, 3);
    const auto stream =
        tampered(sealed_frames(*seals.out, data + skip, size - skip), action, where);
    write_all(fd, stream.data(), stream.size());
  } else {
    for (const auto& frame : sealed_frames(*seals.out, data, size)) {
      write_all(fd, frame.data(), frame.size());
    }
  }
  ::shutdown(fd, SHUT_WR);
  drain(fd);
  ::close(fd);
}

// The value a take gets from |frames| (the join's reply first, then the
// take's) when both were whole, successful replies; else none.
bool expected_take(const std::vector<std::vector<uint8_t>>& frames, std::vector<uint8_t>& out) {
  if (frames.size() < 2) return false;
  for (size_t i = 0; i < 2; ++i) {
    if (frames[i].size() < sizeof(Frame)) return false;
    Frame frame;
    std::memcpy(&frame, frames[i].data(), sizeof(frame));
    if (frame.op != kReply || frame.status != 0) return false;
    if (i == 1) {
      out.assign(frames[i].begin() + sizeof(Frame) + static_cast<ptrdiff_t>(frame.key_bytes),
                 frames[i].begin() + sizeof(Frame) +
                     static_cast<ptrdiff_t>(frame.key_bytes + frame.value_bytes));
    }
  }
  return true;
}

void fuzz_client(uint8_t role, const uint8_t* data, size_t size) {
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
  // Role 5: the replies as sealed (before the relay's hand), for the oracle.
  std::vector<std::vector<uint8_t>> untampered;
  std::thread fake_store([&] {
    int peer;
    do {
      peer = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    } while (peer < 0 && errno == EINTR);
    if (peer < 0) return;
    Nonce server_nonce{}, client_nonce;
    write_all(peer, kChallengeMagic, sizeof(kChallengeMagic));
    write_all(peer, server_nonce.data(), kNonceBytes);
    Proof theirs;
    if (read_exact(peer, client_nonce.data(), kNonceBytes)) {
      const Proof mine = proof(kSecret, kServerRole, server_nonce, client_nonce);
      write_all(peer, mine.data(), mine.size());
      if (read_exact(peer, theirs.data(), theirs.size())) {
        FrameSeal replies(kSecret, kToClient, server_nonce, client_nonce);
        if (role == 5) {
          const uint8_t action = size > 0 ? data[0] : 0;
          const uint16_t where = size > 2 ? static_cast<uint16_t>(data[1] | data[2] << 8) : 0;
          const size_t skip = std::min<size_t>(size, 3);
          untampered = sealed_frames(replies, data + skip, size - skip);
          const auto stream = tampered(untampered, action, where);
          write_all(peer, stream.data(), stream.size());
        } else {
          for (const auto& frame : sealed_frames(replies, data, size)) {
            write_all(peer, frame.data(), frame.size());
          }
        }
      }
    }
    ::shutdown(peer, SHUT_WR);
    drain(peer);
    ::close(peer);
  });
  bool took = false;
  std::vector<uint8_t> value;
  {
    Status status;
    auto client = StoreClient::connect({"127.0.0.1", ntohs(addr.sin_port)}, kSecret,
                                       Deadline::after_ms(5000, nullptr), status);
    if (client) {
      const Status joined = client->join("s", 0, 1, Deadline::after_ms(5000, nullptr));
      const Status taken = client->take("k", value, 1024, Deadline::after_ms(5000, nullptr));
      if (taken.ok() && value.size() > 1024) std::abort();
      if (joined.result == HAL_ERROR_TIMEOUT || taken.result == HAL_ERROR_TIMEOUT) {
        std::fprintf(stderr, "the client waited for a store that had closed\n");
        std::abort();
      }
      took = joined.ok() && taken.ok();
    }
  }  // the client says goodbye and closes: the fake store's drain ends
  fake_store.join();
  std::vector<uint8_t> meant;
  if (role == 5 && took && (!expected_take(untampered, meant) || meant != value)) {
    std::fprintf(stderr, "the client took a value the relay altered\n");
    std::abort();
  }
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
  const uint8_t role = data[0] % 7;
  if (role == 3 || role == 5) {
    fuzz_client(role, data + 1, size - 1);
  } else {
    fuzz_server(server->port(), role, data + 1, size - 1);
  }
  check_serves(server->port());
  return 0;
}
