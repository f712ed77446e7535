// The TCP store: a tiny key-value server that ranks started without mpirun
// use to find each other (join) and, in the loader's host-staged fallback,
// to pass messages (set / take). One server thread multiplexes every
// connection with poll(). A rank whose connection drops without a goodbye
// fails its session: every pending and later request of that session is
// answered HAL_ERROR_REMOTE, so a dead rank is an error in every survivor.
//
// The store is reachable by every local user (and, bound elsewhere than
// loopback, by the network), so it trusts nothing it reads: a connection
// proves knowledge of the job's secret (HMAC-SHA-256 challenge-response,
// both ways, the server first) before the server reads a frame from it,
// every frame after that carries a MAC under a key of its direction and
// connection with an implicit sequence number (so no frame can be altered,
// replayed, reordered or reflected on the way), every field is checked
// against StoreLimits before use, and a peer that breaks a rule is dropped.
// Clients use non-blocking sockets polled against the call's deadline and an
// interrupt descriptor, so no socket call outlives its deadline or an abort.
#pragma once

#include "hal_collective/status.hpp"
#include "hal_util/hmac.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace hal::collective {

struct StoreAddress {
  std::string host;  // dotted IPv4 or "localhost"
  uint16_t port = 0;
  static bool parse(const std::string& text, StoreAddress& out);
  std::string text() const { return host + ":" + std::to_string(port); }
};

// The key both ends of every connection prove they hold.
using StoreSecret = std::array<uint8_t, 32>;

// The strength a fixed-session store's secret (HAL_COMM_STORE_SECRET or its
// file) must have: an estimate of at least kMinSecretBits. Anyone who can
// reach the store can collect a proof and test guesses of the secret
// offline, so what people type is refused. The estimate: drop every stretch
// of 4 or more bytes that repeats an earlier stretch; of the m bytes left,
// sum log2(m / the count of that byte among them), m times the entropy of
// their own frequencies. "summer2026summer2026" estimates 29 bits, "correct
// horse battery staple" 98, a 36-character UUID about 134 (below 128 one
// time in ten). It cannot tell random bytes from a clever pattern, so the
// rule to follow is random bytes: 32 in hex (64 digits, about 244 bits by
// the estimate, none below 210 in 3,000 draws), 32 in base64 (44
// characters, about 215), or 32 raw bytes in the file (about 156).
inline constexpr double kMinSecretBits = 128;
double secret_strength_bits(std::span<const uint8_t> text) noexcept;

// The wire format (SPEC.md §13.6). All integers are little-endian.
//   server -> client  challenge: kChallengeMagic (8 bytes), server nonce Ns (32)
//   client -> server  client nonce Nc (32)
//   server -> client  proof(kServerRole) (32)        the server proves first
//   client -> server  proof(kClientRole) (32)        only once the server's checks out
//   then frames both ways: Frame (32 bytes), key, value, MAC (16)
namespace store_wire {
inline constexpr char kChallengeMagic[8] = {'H', 'A', 'L', 'S', 'T', 'O', 'R', '3'};
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kChallengeBytes = sizeof(kChallengeMagic) + kNonceBytes;
inline constexpr size_t kProofBytes = 32;
inline constexpr const char* kClientRole = "hal-store-client";
inline constexpr const char* kServerRole = "hal-store-server";
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;
// HMAC-SHA-256 under the secret of role, the server's nonce and the
// client's nonce.
Proof proof(const StoreSecret& secret, const char* role, const Nonce& server_nonce,
            const Nonce& client_nonce) noexcept;

enum Op : uint32_t { kReply = 0, kJoin = 1, kSet = 2, kTake = 3, kBye = 4 };
struct Frame {
  uint32_t op;
  uint32_t status;    // a hal_result_t in replies, 0 in requests
  uint64_t argument;  // join: rank << 32 | ranks; set, take reply: the chunked value's total bytes;
                      // a HAL_ERROR_REMOTE reply: Failure << 32 | (the rank it concerns + 1, or 0)
  uint64_t key_bytes;
  uint64_t value_bytes;
};
static_assert(sizeof(Frame) == 32);

// Why a session failed, in a HAL_ERROR_REMOTE reply's argument.
enum Failure : uint32_t {
  kPeerLeft = 0,           // a rank's connection closed without a goodbye
  kYourFrameTampered = 1,  // a frame of this connection failed its MAC: it is dropped
  kPeerFrameTampered = 2,  // a frame of another rank's connection failed its MAC
};

// The directions of a connection, each with a key of its own (so a frame
// reflected back to its sender fails).
inline constexpr const char* kToServer = "hal-store-frames client->server";
inline constexpr const char* kToClient = "hal-store-frames server->client";
inline constexpr size_t kMacBytes = 16;  // HMAC-SHA-256 cut to 128 bits (RFC 4868)
using Mac = std::array<uint8_t, kMacBytes>;

// One direction of one authenticated connection: its key,
// HMAC-SHA-256(secret, direction || Ns || Nc), and the number of the next
// frame (from 0, never sent: both ends count). A frame's MAC is
// HMAC-SHA-256(key, sequence (8 bytes) || Frame || key || value).
class FrameSeal {
 public:
  FrameSeal(const StoreSecret& secret, const char* direction, const Nonce& server_nonce,
            const Nonce& client_nonce) noexcept;
  // The MAC of the next frame in this direction; counts it.
  Mac seal(const Frame& frame, std::span<const uint8_t> key,
           std::span<const uint8_t> value) noexcept;
  // Whether |mac| is the next frame's; counts it only then.
  bool open(const Frame& frame, std::span<const uint8_t> key, std::span<const uint8_t> value,
            std::span<const uint8_t> mac) noexcept;
  uint64_t sequence() const noexcept { return sequence_; }

 private:
  Mac compute(const Frame& frame, std::span<const uint8_t> key,
              std::span<const uint8_t> value) const noexcept;
  hal::util::HmacSha256 key_;
  uint64_t sequence_ = 0;
};

// A whole frame as it goes on the wire, sealed by |seal| (tests and the fuzz
// target build frames with it).
std::vector<uint8_t> sealed_frame(FrameSeal& seal, const Frame& frame, std::span<const uint8_t> key,
                                  std::span<const uint8_t> value);
}  // namespace store_wire

// What one store holds at most; a peer that would exceed a limit is dropped.
struct StoreLimits {
  uint32_t max_connections = 1024;           // authenticated or still proving
  uint64_t max_key_bytes = 1024;             // one key (or session name)
  uint64_t max_value_bytes = 64ull << 20;    // one frame's value; larger sets are chunked
  uint64_t max_buffered_bytes = 4ull << 30;  // stored values + every connection's buffers
  uint32_t handshake_timeout_ms = 10000;     // to prove the secret after accept
};

class StoreServer {
 public:
  // Listens on |address| (port 0: any free port, see port()).
  static std::shared_ptr<StoreServer> start(const StoreAddress& address, const StoreSecret& secret,
                                            const StoreLimits& limits, Status& out_status);
  ~StoreServer();  // stop()
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  uint16_t port() const { return port_; }
  // Stops serving now: the thread ends and every descriptor is closed.
  // Idempotent and safe from any thread.
  void stop() noexcept;
  // CPU time the server thread used so far (zero once stopped).
  std::chrono::nanoseconds cpu_time() const noexcept;
  // Connections the server dropped for breaking a rule (tests watch it).
  uint64_t dropped() const noexcept { return dropped_->load(); }
  // Waits until every value stored here has been taken and every reply
  // sent (a peer still reading this process's last message), or a session
  // failed and dropped them, or |deadline|: false then. A process that
  // serves the store calls it before it stops the store, so a peer one
  // step behind finishes instead of finding the store gone.
  bool linger(const Deadline& deadline) const noexcept;

  // linger's exchange with the server thread: a request number, and the
  // count the thread took after serving the input that was waiting then.
  struct Lingering {
    std::atomic<uint64_t> requested{0};
    std::atomic<uint64_t> answered{0};
    std::atomic<uint64_t> undelivered{0};
  };

 private:
  StoreServer(int listen_fd, int wake_read, int wake_write, uint16_t port);

  int listen_fd_;
  int wake_read_;
  int wake_write_;
  uint16_t port_;
  std::shared_ptr<std::atomic<uint64_t>> dropped_;
  std::shared_ptr<Lingering> lingering_;
  pthread_t native_thread_{};
  mutable std::mutex stop_mutex_;
  std::thread thread_;
};

// The stores this process serves: it holds a store made for a unique id
// until a communicator of this process adopts it (then the communicators
// keep it alive), and stops every store still alive when it is destroyed
// (with the registry, at the last hal_shutdown).
class StoreRoster {
 public:
  StoreRoster() = default;
  StoreRoster(const StoreRoster&) = delete;
  StoreRoster& operator=(const StoreRoster&) = delete;
  ~StoreRoster();
  // |hold|: keep |server| alive until adopted() (else only watch it).
  void add(const std::shared_ptr<StoreServer>& server, uint64_t session, bool hold);
  // The live store of this process on |port| for |session|, or nullptr.
  std::shared_ptr<StoreServer> find(uint16_t port, uint64_t session);
  // A communicator holds |server| now; the roster only watches it.
  void adopted(const StoreServer* server);

 private:
  struct Entry {
    std::shared_ptr<StoreServer> held;
    std::weak_ptr<StoreServer> server;
    uint64_t session;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

class StoreClient {
 public:
  // Connects and authenticates (the server proves the secret first; this
  // side sends nothing derived from it before that checks out), retrying a
  // refused connect until the deadline (rank 0's server may start later).
  static std::unique_ptr<StoreClient> connect(const StoreAddress& address,
                                              const StoreSecret& secret, const Deadline& deadline,
                                              Status& out_status);
  ~StoreClient();  // says goodbye (within a second): a clean leave never fails the session
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Enters |session| as |rank| of |ranks| and returns when all have joined.
  Status join(const std::string& session, uint32_t rank, uint32_t ranks, const Deadline& deadline);
  Status set(const std::string& key, const void* data, size_t bytes, const Deadline& deadline);
  // Waits for |key|, removes it from the store, returns its value; a value
  // longer than |max_bytes| is refused before anything is allocated for it.
  Status take(const std::string& key, std::vector<uint8_t>& out_value, size_t max_bytes,
              const Deadline& deadline);
  // Wakes a call blocked on this connection from any thread; that call and
  // every later one fail with HAL_ERROR_INVALID_STATE (what abort uses).
  void interrupt() noexcept;
  // Drops the connection without a goodbye: what a crash looks like to peers.
  // Only while no call is in flight.
  void sever();

 private:
  StoreClient(int fd, int interrupt_fd, const StoreAddress& address)
      : fd_(fd), interrupt_fd_(interrupt_fd), address_(address.text()) {}
  Status wait_ready(short events, const Deadline& deadline);
  Status send_bytes(const void* data, size_t bytes, const Deadline& deadline);
  Status recv_bytes(void* data, size_t bytes, const Deadline& deadline);
  Status request(uint32_t op, const std::string& key, const void* data, size_t bytes,
                 uint64_t argument, const Deadline& deadline);
  Status reply(std::vector<uint8_t>* out_value, size_t offset, size_t max_bytes,
               uint64_t* out_argument, const Deadline& deadline);
  Status broken(Status status);
  Status tampered(const char* what);

  int fd_;
  int interrupt_fd_;
  std::string address_;                               // names the store in errors
  std::unique_ptr<store_wire::FrameSeal> to_server_;  // set once authenticated
  std::unique_ptr<store_wire::FrameSeal> from_server_;
  std::atomic<bool> interrupted_{false};
  bool broken_ = false;                 // a call failed mid-frame: the stream is out of step
  bool dropped_for_integrity_ = false;  // the store said a frame of this rank failed its MAC
  Status broken_status_;
};

}  // namespace hal::collective
