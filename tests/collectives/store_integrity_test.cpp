// The TCP store after the handshake and before it (issue 32): every frame
// carries a MAC under a key of its direction and connection, with an
// implicit sequence number, so a relay that does not know the secret can
// neither alter nor replay, reorder or reflect a frame (each is a clear
// HAL_ERROR_REMOTE naming whose connection failed, never a wrong value);
// the server proves the secret first, so a squatter on the port collects
// nothing derived from it; a fixed-session secret must be strong enough;
// and its file is never waited on (a FIFO, a device, a link).
#include <catch2/catch.hpp>

#include "collective_store.hpp"
#include "store_peers.hpp"

#include <hal/collective.h>
#include <hal/device.h>
#include <hal/result.h>
#include <hal/init.h>
#include <hal/memory.h>
#include <hal/stream.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

using namespace store_test;
using namespace std::chrono_literals;

namespace {

enum class Way { kToServer, kToClient };

// A relay between clients and a store that does not know the secret: it
// passes the handshake through, then cuts the stream into frames (their
// headers say how long each is) and lets |rule| decide what goes on for
// each: as it is, altered, twice, later, or not at all. |rule| may also
// send a frame back where it came from (reflection) through |back|.
class Relay {
 public:
  using Back = std::function<void(const std::vector<uint8_t>&)>;
  // Frames to forward in place of |frame|, the |index|-th of its way on
  // its connection.
  using Rule = std::function<std::vector<std::vector<uint8_t>>(
      Way way, size_t index, std::vector<uint8_t> frame, const Back& back)>;

  Relay(uint16_t upstream, Rule rule) : upstream_(upstream), rule_(std::move(rule)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(addr);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Relay() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard lock(mutex_);
      for (auto& link : links_) {
        ::shutdown(link->client, SHUT_RDWR);
        ::shutdown(link->server, SHUT_RDWR);
      }
    }
    for (auto& link : links_) {
      link->pumps[0].join();
      link->pumps[1].join();
      ::close(link->client);
      ::close(link->server);
    }
    ::close(listener_);
  }
  uint16_t port() const { return port_; }

 private:
  struct Link {
    int client = -1;
    int server = -1;
    std::mutex writing[2];  // to the server, to the client
    std::thread pumps[2];
  };

  void accept_loop() {
    while (true) {
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      // Not up yet (rank 0 starts the store later): the client retries.
      const int server = connect_upstream();
      if (server < 0) {
        ::close(client);
        continue;
      }
      auto link = std::make_unique<Link>();
      link->client = client;
      link->server = server;
      Link* raw = link.get();
      link->pumps[0] = std::thread([this, raw] { pump(*raw, Way::kToServer); });
      link->pumps[1] = std::thread([this, raw] { pump(*raw, Way::kToClient); });
      std::lock_guard lock(mutex_);
      links_.push_back(std::move(link));
    }
  }

  int connect_upstream() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(upstream_);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void pump(Link& link, Way way) {
    const bool up = way == Way::kToServer;
    const int from = up ? link.client : link.server;
    const int to = up ? link.server : link.client;
    std::mutex& writing = link.writing[up ? 0 : 1];
    auto forward = [&](const std::vector<uint8_t>& bytes) {
      std::lock_guard lock(writing);
      write_all(to, bytes.data(), bytes.size());
    };
    const Back back = [&](const std::vector<uint8_t>& bytes) {
      std::lock_guard lock(link.writing[up ? 1 : 0]);
      write_all(from, bytes.data(), bytes.size());
    };
    // The handshake as it is, piece by piece as each side waits for the
    // other: the client's nonce, then its proof up; the challenge, then the
    // server's proof down.
    bool handshake = true;
    for (const size_t piece : up ? std::vector<size_t>{kNonceBytes, kProofBytes}
                                 : std::vector<size_t>{kChallengeBytes, kProofBytes}) {
      std::vector<uint8_t> bytes(piece);
      handshake = handshake && read_exact(from, bytes.data(), bytes.size());
      if (handshake) forward(bytes);
    }
    if (handshake) {
      for (size_t index = 0;; ++index) {
        Frame frame;
        std::vector<uint8_t> body;
        if (!read_frame(from, frame, body)) break;
        std::vector<uint8_t> whole(sizeof(Frame) + body.size());
        std::memcpy(whole.data(), &frame, sizeof(Frame));
        std::memcpy(whole.data() + sizeof(Frame), body.data(), body.size());
        for (const auto& out : rule_(way, index, std::move(whole), back)) forward(out);
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  uint16_t upstream_;
  Rule rule_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Link>> links_;
};

Frame header_of(const std::vector<uint8_t>& frame) {
  Frame header;
  std::memcpy(&header, frame.data(), sizeof(header));
  return header;
}

// Two ranks of one session: rank 0 straight to the store, rank 1 through
// |relay|.
struct TwoRanks {
  std::unique_ptr<StoreClient> direct;
  std::unique_ptr<StoreClient> relayed;
  TwoRanks(uint16_t store, uint16_t relay, const StoreSecret& secret) {
    Status status;
    direct = StoreClient::connect({"127.0.0.1", store}, secret, in_ms(5000), status);
    relayed = StoreClient::connect({"127.0.0.1", relay}, secret, in_ms(5000), status);
    INFO(status.message);
    REQUIRE(direct);
    REQUIRE(relayed);
    auto joined =
        std::async(std::launch::async, [&] { return relayed->join("s", 1, 2, in_ms(5000)); });
    REQUIRE(direct->join("s", 0, 2, in_ms(5000)).ok());
    REQUIRE(joined.get().ok());
  }
};

std::vector<uint8_t> value_of(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace

TEST_CASE("store integrity: a relay passing frames untouched changes nothing",
          "[store][integrity]") {
  const StoreSecret secret = secret_of(21);
  auto server = start_store(secret);
  Relay relay(server->port(), [](Way, size_t, std::vector<uint8_t> frame, const Relay::Back&) {
    return std::vector<std::vector<uint8_t>>{std::move(frame)};
  });
  TwoRanks ranks(server->port(), relay.port(), secret);
  for (int round = 0; round < 3; ++round) {
    const auto sent = value_of("payload " + std::to_string(round));
    REQUIRE(ranks.relayed->set("up" + std::to_string(round), sent.data(), sent.size(), in_ms(5000))
                .ok());
    std::vector<uint8_t> got;
    REQUIRE(ranks.direct->take("up" + std::to_string(round), got, 64, in_ms(5000)).ok());
    CHECK(got == sent);
    REQUIRE(ranks.direct->set("down" + std::to_string(round), sent.data(), sent.size(), in_ms(5000))
                .ok());
    REQUIRE(ranks.relayed->take("down" + std::to_string(round), got, 64, in_ms(5000)).ok());
    CHECK(got == sent);
  }
}

TEST_CASE("store integrity: an altered, replayed, reordered or reflected frame is refused",
          "[store][integrity]") {
  // What the relay does to rank 1's frames (its join is frame 0 to the
  // server and its reply frame 0 to it): each case must end the session
  // with HAL_ERROR_REMOTE on both ranks, saying why, and deliver nothing.
  struct Case {
    const char* what;
    Way way;        // whose frames it touches
    size_t target;  // which one
    int action;     // 0 alter a value byte, 1 send twice, 2 hold back and send after the next,
                    // 3 send back to where it came from (and not on)
    const char* relayed_says;  // in rank 1's error ("": any HAL_ERROR_REMOTE)
    const char* direct_says;   // in rank 0's
  };
  const char* kTamperedUp = "dropped this rank: a frame it sent failed its integrity check";
  const char* kPeerTampered = "rank 1's connection to the TCP store";
  const Case cases[] = {
      {"a value byte of a set altered on the way to the store", Way::kToServer, 1, 0, kTamperedUp,
       kPeerTampered},
      {"a set replayed to the store", Way::kToServer, 1, 1, kTamperedUp, kPeerTampered},
      {"two sets swapped on the way to the store", Way::kToServer, 1, 2, kTamperedUp,
       kPeerTampered},
      {"a value byte of a reply altered on the way to the rank", Way::kToClient, 1, 0,
       "a reply (frame 1) failed its integrity check", "rank 1 died or left"},
      {"a reply replayed to the rank", Way::kToClient, 1, 1,
       "a reply (frame 2) failed its integrity check", "rank 1 died or left"},
      // A reply is no request: the store refuses it by its header already
      // (and its MAC is under the other direction's key).
      {"a reply reflected back to the store", Way::kToClient, 1, 3, "", "rank 1 died or left"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const StoreSecret secret = secret_of(22);
    auto server = start_store(secret);
    std::vector<uint8_t> held;
    Relay relay(
        server->port(),
        [&](Way way, size_t index, std::vector<uint8_t> frame,
            const Relay::Back& back) -> std::vector<std::vector<uint8_t>> {
          if (way != c.way || (index != c.target && !(c.action == 2 && index == c.target + 1))) {
            return {std::move(frame)};
          }
          switch (c.action) {
            case 0:
              frame[frame.size() - kMacBytes - 1] ^= 0x01;  // the value's last byte
              return {std::move(frame)};
            case 1:
              return {frame, frame};
            case 2:
              if (index == c.target) {
                held = std::move(frame);
                return {};
              }
              return {std::move(frame), held};
            default:
              back(frame);
              return {};
          }
        });
    TwoRanks ranks(server->port(), relay.port(), secret);
    const auto a = value_of("first value"), b = value_of("second value");
    std::vector<uint8_t> got;
    Status relayed, direct;
    if (c.way == Way::kToServer) {
      // Rank 1 sets two values; rank 0 waits for them.
      (void)ranks.relayed->set("a", a.data(), a.size(), in_ms(5000));
      (void)ranks.relayed->set("b", b.data(), b.size(), in_ms(5000));
      direct = ranks.direct->take("a", got, 64, in_ms(5000));
      if (direct.ok()) direct = ranks.direct->take("b", got, 64, in_ms(5000));
      relayed = ranks.relayed->take("never", got, 64, in_ms(5000));
    } else {
      // Rank 0 sets values; rank 1 takes them (its take replies are its
      // frames 1 and 2 from the store).
      REQUIRE(ranks.direct->set("a", a.data(), a.size(), in_ms(5000)).ok());
      REQUIRE(ranks.direct->set("b", b.data(), b.size(), in_ms(5000)).ok());
      relayed = ranks.relayed->take("a", got, 64, in_ms(5000));
      if (relayed.ok()) {
        CHECK(got == a);
        relayed = ranks.relayed->take("b", got, 64, in_ms(5000));
      }
      if (relayed.ok()) relayed = ranks.relayed->take("c", got, 64, in_ms(5000));
      // Rank 1 leaves without a goodbye (its stream is out of step).
      ranks.relayed.reset();
      direct = ranks.direct->take("never", got, 64, in_ms(5000));
    }
    INFO("rank 1: " << relayed.message);
    INFO("rank 0: " << direct.message);
    CHECK(relayed.result == HAL_ERROR_REMOTE);
    CHECK_THAT(relayed.message, Catch::Contains(c.relayed_says));
    CHECK(direct.result == HAL_ERROR_REMOTE);
    CHECK_THAT(direct.message, Catch::Contains(c.direct_says));
    if (c.way == Way::kToServer) {
      CHECK_THAT(direct.message, Catch::Contains("failed its integrity check"));
      CHECK(server->dropped() >= 1);
    }
  }
}

TEST_CASE("store integrity: a relay altering a payload fails the allreduce on every rank",
          "[store][integrity][api]") {
  // The audit's case: two ranks host-staged over a fixed-session store,
  // rank 1 reaching it through a relay that alters the first payload it
  // carries. Each rank's allreduce must fail, never return a wrong sum.
  ::setenv("HAL_CPU_DEVICES", "2", 1);
  ::setenv("HAL_COMM_SHM", "0", 1);  // host-staged over the store
  ::setenv("HAL_COMM_STORE_SECRET",
           "7e1c0b5a9d3f4e2816c0a7b3d5e9f1a2c4b6d8e0f1a3c5e7092b4d6f8a1c3e5f", 1);
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  // 4000 bytes, 4004 with the message's tag in front: no other frame of
  // the job has this size.
  constexpr size_t kCount = 1000;
  // A free port for rank 0's store (taken back at once: a brief race only).
  uint16_t store_port = 0;
  {
    FakeServer probe;
    store_port = probe.port;
  }
  std::atomic<int> altered{0};
  Relay relay(store_port, [&](Way way, size_t, std::vector<uint8_t> frame, const Relay::Back&) {
    const Frame header = header_of(frame);
    if (way == Way::kToServer && header.op == kSet && header.value_bytes == 4 + kCount * 4 &&
        altered.fetch_add(1) == 0) {
      frame[sizeof(Frame) + header.key_bytes + 4 + 7] ^= 0x40;  // the exponent of float 1
    }
    return std::vector<std::vector<uint8_t>>{std::move(frame)};
  });
  const std::string addresses[2] = {"127.0.0.1:" + std::to_string(store_port),
                                    "127.0.0.1:" + std::to_string(relay.port())};
  hal_result_t results[2] = {HAL_ERROR_INTERNAL, HAL_ERROR_INTERNAL};
  std::string messages[2];
  std::vector<float> sums[2];
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      hal_device_t device = nullptr;
      hal_device_get(r, &device);
      hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
      config.bootstrap = HAL_COMM_BOOTSTRAP_TCP_STORE;
      config.store_address = addresses[r].c_str();
      config.timeout_ms = 10000;
      hal_comm_t comm = nullptr;
      if (hal_comm_init_rank(device, 2, nullptr, r, &config, &comm) != HAL_SUCCESS) {
        messages[r] = std::string("init: ") + hal_error_last_message();
        return;
      }
      void* buffer = nullptr;
      hal_stream_t stream = nullptr;
      hal_mem_alloc(device, HAL_MEMORY_HOST, kCount * 4, 0, &buffer);
      hal_stream_create(device, 0, &stream);
      auto* values = static_cast<float*>(buffer);
      for (size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(i + r);
      results[r] =
          hal_allreduce(buffer, buffer, kCount, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream);
      if (results[r] == HAL_SUCCESS) results[r] = hal_stream_synchronize(stream);
      messages[r] = hal_error_last_message();
      sums[r].assign(values, values + kCount);
      hal_stream_destroy(stream);
      hal_mem_free(buffer);
      hal_comm_abort(comm);
    });
  }
  for (auto& t : ranks) t.join();
  hal_shutdown();
  ::unsetenv("HAL_COMM_SHM");
  ::unsetenv("HAL_COMM_STORE_SECRET");
  INFO("rank 0: " << messages[0] << "; rank 1: " << messages[1]);
  REQUIRE(altered.load() >= 1);  // the relay did alter a payload
  for (uint32_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << messages[r]);
    CHECK(results[r] != HAL_SUCCESS);
    if (results[r] == HAL_SUCCESS) {
      // What the audit saw: a wrong sum with success. Never.
      bool right = true;
      for (size_t i = 0; i < kCount; ++i) right &= sums[r][i] == static_cast<float>(2 * i + 1);
      CHECK(right);
    }
  }
  CHECK_THAT(messages[0] + messages[1], Catch::Contains("integrity check"));
}

TEST_CASE("store handshake: the server proves the secret first, a squatter collects nothing",
          "[store][handshake]") {
  const StoreSecret secret = secret_of(23);
  // A process that bound the port first, answering with a challenge and
  // then a proof it cannot make, or nothing at all.
  for (const bool answers : {true, false}) {
    INFO((answers ? "the squatter answers with a made-up proof" : "the squatter goes silent"));
    FakeServer squatter;
    std::vector<uint8_t> collected;
    std::thread serve([&] {
      const int peer = ::accept4(squatter.fd, nullptr, nullptr, SOCK_CLOEXEC);
      REQUIRE(peer >= 0);
      Nonce server_nonce{};
      write_all(peer, kChallengeMagic, sizeof(kChallengeMagic));
      write_all(peer, server_nonce.data(), kNonceBytes);
      if (answers) {
        // Its best: the proof under a guessed secret.
        std::vector<uint8_t> nonce(kNonceBytes);
        read_exact(peer, nonce.data(), nonce.size());
        collected = nonce;
        Nonce client_nonce;
        std::memcpy(client_nonce.data(), nonce.data(), kNonceBytes);
        const Proof guess = proof(secret_of(99), kServerRole, server_nonce, client_nonce);
        write_all(peer, guess.data(), guess.size());
      }
      // Everything else the client sends, until it closes.
      uint8_t byte;
      while (::recv(peer, &byte, 1, 0) == 1) collected.push_back(byte);
      ::close(peer);
    });
    Status status;
    auto client = StoreClient::connect({"127.0.0.1", squatter.port}, secret,
                                       in_ms(answers ? 5000 : 500), status);
    serve.join();
    CHECK(!client);
    CHECK(status.result == (answers ? HAL_ERROR_INVALID_ARGUMENT : HAL_ERROR_TIMEOUT));
    if (answers) CHECK_THAT(status.message, Catch::Contains("did not prove this rank's secret"));
    // Only the client's random nonce: nothing derived from the secret to
    // test guesses against.
    CHECK(collected.size() == kNonceBytes);
  }
}

TEST_CASE("store secret: the strength estimate refuses what people type", "[store][secret]") {
  auto bits = [](const std::string& text) {
    return secret_strength_bits(
        std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  };
  // m * the entropy of the frequencies of the m bytes that do not repeat an
  // earlier stretch of 4 or more, computed by hand.
  CHECK(bits("") == 0.0);
  CHECK(bits("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") == 0.0);  // "a", then one repeat
  CHECK(bits("ab") == Approx(2.0));
  CHECK(bits("aabb") == Approx(4.0));
  CHECK(bits("abcd") == Approx(8.0));
  CHECK(bits("abcdabcd") == Approx(8.0));   // the second "abcd" repeats the first
  CHECK(bits("abcdabcX") == Approx(18.0));  // "abc" is too short a repeat: all 8 count
  CHECK(bits("abcdefghabcd") == Approx(24.0));
  // The audit's guess, and what people type, are refused...
  for (const char* weak : {"summer2026summer2026", "correct horse battery staple",
                           "a secret long enough for the store", "password1password1password1",
                           "0123456789abcdef0123456789abcdef"}) {
    INFO(weak);
    CHECK(bits(weak) < kMinSecretBits);
  }
  // ...random bytes pass: 32 in hex and base64, and 32 raw ones.
  for (const char* strong :
       {"44a383c747a6dd9f1306c94593ccc81fbb44f73f4d5672b996b5dedc1eebccdf",
        "q1Y4n8WcXHw0i5c9/1h6rJ3uS1+2fK5oXbH0k8R1e2c=",
        "\x91\x0e\x3c\x77\xa4\x18\xd2\x5b\x60\xf9\x2e\x83\x4a\xc1\x07\xbe\x55\xe8\x1d\x9a\x36\x72"
        "\xcf\x04\xb7\x6b\x28\xde\x93\x41\x0f\xac"}) {
    INFO(strong);
    CHECK(bits(strong) >= kMinSecretBits);
  }
}

TEST_CASE("store secret: a weak fixed-session secret is refused before anything is sent",
          "[store][secret][api]") {
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  hal_device_t device = nullptr;
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  ::unsetenv("HAL_COMM_STORE_SECRET_FILE");
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.bootstrap = HAL_COMM_BOOTSTRAP_TCP_STORE;
  config.store_address = "127.0.0.1:0";
  config.timeout_ms = 10000;
  hal_comm_t comm = nullptr;
  ::setenv("HAL_COMM_STORE_SECRET", "summer2026summer2026", 1);
  CHECK(hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(hal_error_last_message()), Catch::Contains("too weak"));
  CHECK(comm == nullptr);
  ::setenv("HAL_COMM_STORE_SECRET",
           "q1Y4n8WcXHw0i5c9/1h6rJ3uS1+2fK5oXbH0k8R1e2c=", 1);  // 32 random bytes, base64
  const hal_result_t made = hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm);
  INFO(hal_error_last_message());
  CHECK(made == HAL_SUCCESS);
  if (made == HAL_SUCCESS) CHECK(hal_comm_destroy(comm) == HAL_SUCCESS);
  ::unsetenv("HAL_COMM_STORE_SECRET");
  hal_shutdown();
}

TEST_CASE("store secret: a secret file that is a FIFO, a device or a link fails at once",
          "[store][secret][api]") {
  REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
  hal_device_t device = nullptr;
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  ::unsetenv("HAL_COMM_STORE_SECRET");
  char directory[] = "/tmp/hal_secret_file_XXXXXX";
  REQUIRE(::mkdtemp(directory) != nullptr);
  const std::string fifo = std::string(directory) + "/fifo";
  const std::string link_to_fifo = std::string(directory) + "/link-to-fifo";
  const std::string regular = std::string(directory) + "/secret";
  const std::string link_to_regular = std::string(directory) + "/link-to-secret";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(::symlink(fifo.c_str(), link_to_fifo.c_str()) == 0);
  {
    const int fd = ::open(regular.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    const std::string text = "44a383c747a6dd9f1306c94593ccc81fbb44f73f4d5672b996b5dedc1eebccdf\n";
    REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    ::close(fd);
  }
  REQUIRE(::symlink(regular.c_str(), link_to_regular.c_str()) == 0);
  struct Case {
    std::string path;
    const char* says;
  };
  const Case cases[] = {{fifo, "FIFO"},
                        {link_to_fifo, "symbolic link"},
                        {"/dev/zero", "character device"},
                        {link_to_regular, "symbolic link"},
                        {std::string(directory), "directory"}};
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.bootstrap = HAL_COMM_BOOTSTRAP_TCP_STORE;
  config.store_address = "127.0.0.1:0";
  config.timeout_ms = 2000;
  for (const Case& c : cases) {
    INFO(c.path);
    ::setenv("HAL_COMM_STORE_SECRET_FILE", c.path.c_str(), 1);
    // On a thread, watched: a reader blocked on the FIFO is released by
    // opening its other end, and the test fails instead of hanging.
    auto call = std::async(std::launch::async, [&] {
      hal_comm_t comm = nullptr;
      const hal_result_t result = hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm);
      return std::make_pair(result, std::string(hal_error_last_message()));
    });
    if (call.wait_for(10s) != std::future_status::ready) {
      FAIL_CHECK("hal_comm_init_rank blocked on " << c.path);
      const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (writer >= 0) ::close(writer);
    }
    const auto [result, message] = call.get();
    INFO(message);
    CHECK(result == HAL_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(message, Catch::Contains(c.says));
  }
  // The file itself, private: accepted.
  ::setenv("HAL_COMM_STORE_SECRET_FILE", regular.c_str(), 1);
  hal_comm_t comm = nullptr;
  const hal_result_t made = hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm);
  INFO(hal_error_last_message());
  CHECK(made == HAL_SUCCESS);
  if (made == HAL_SUCCESS) CHECK(hal_comm_destroy(comm) == HAL_SUCCESS);
  // Readable by others: refused.
  ::chmod(regular.c_str(), 0640);
  CHECK(hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(hal_error_last_message()), Catch::Contains("group or others may access"));
  ::unsetenv("HAL_COMM_STORE_SECRET_FILE");
  ::unlink(link_to_regular.c_str());
  ::unlink(regular.c_str());
  ::unlink(link_to_fifo.c_str());
  ::unlink(fifo.c_str());
  ::rmdir(directory);
  hal_shutdown();
}
