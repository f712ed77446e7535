// The TCP store against hostile and broken peers (issue 9): authentication,
// caps on every length field, limits on connections, deadlines and abort on
// every socket wait, and the store's lifetime. The store is driven directly
// (hal_collective_store) with raw sockets playing the attacker, and through
// the public API for the lifetime and bind rules.
#include <catch2/catch.hpp>

#include "collective_store.hpp"
#include "hal_util/hmac.hpp"
#include "store_peers.hpp"

#include <hal/collective.h>
#include <hal/device.h>
#include <hal/init.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

using namespace hal::collective;
using namespace hal::collective::store_wire;
using namespace std::chrono_literals;
using namespace store_test;

namespace {

std::string hex(const hal::util::Sha256Digest& d) {
  std::string out;
  char buf[3];
  for (uint8_t b : d) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    out += buf;
  }
  return out;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

size_t count_entries(const char* dir) {
  size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
  }
  return n;
}
size_t open_fds() {
  return count_entries("/proc/self/fd") - 1;
}  // less opendir's own
size_t threads() {
  return count_entries("/proc/self/task");
}
// The thread count once it reaches |expected|, or after two seconds. A joined
// thread can stay in /proc/self/task for a moment after pthread_join returns
// (the kernel wakes the joiner before it reaps the task), so an exact count
// read right after a join races with the reaping; a thread really left
// running stays counted past the wait.
size_t threads_settled_at(size_t expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  size_t now = threads();
  while (now != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    now = threads();
  }
  return now;
}
// The thread count with the runtime's own helpers already started: under
// ThreadSanitizer the first thread the process creates also starts TSan's
// background thread, which would otherwise count as one HAL left behind.
size_t baseline_threads() {
  std::thread([] {}).join();
  return threads();
}

std::set<std::string> socket_inodes() {
  std::set<std::string> out;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d)) {
      char target[256] = {};
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
      if (n > 0 && std::strncmp(target, "socket:[", 8) == 0) {
        out.insert(std::string(target + 8, static_cast<size_t>(n) - 9));
      }
    }
    ::closedir(d);
  }
  return out;
}

struct StoreSession {
  StoreSession() { REQUIRE(hal_init(nullptr) == HAL_SUCCESS); }
  ~StoreSession() { hal_shutdown(); }
};

}  // namespace

TEST_CASE("store: SHA-256 and HMAC-SHA-256 match the published vectors", "[store]") {
  CHECK(hex(hal::util::sha256(bytes_of("abc"))) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex(hal::util::sha256(bytes_of(""))) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // FIPS 180-4 two-block message.
  CHECK(hex(hal::util::sha256(
            bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // RFC 4231 test cases 1 and 2.
  const std::string key1(20, '\x0b');
  CHECK(hex(hal::util::hmac_sha256(bytes_of(key1), {bytes_of("Hi There")})) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex(hal::util::hmac_sha256(bytes_of("Jefe"),
                                   {bytes_of("what do ya want "), bytes_of("for nothing?")})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // RFC 4231 test case 6: a key longer than the block.
  const std::string key6(131, '\xaa');
  CHECK(
      hex(hal::util::hmac_sha256(
          bytes_of(key6), {bytes_of("Test Using Larger Than Block-Size Key - Hash Key First")})) ==
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("store: a wrong secret is refused before anything is read", "[store]") {
  const StoreSecret secret = secret_of(1);
  auto server = start_store(secret);
  Status status;
  auto owner = StoreClient::connect({"127.0.0.1", server->port()}, secret, in_ms(5000), status);
  REQUIRE(owner);
  REQUIRE(owner->join("job", 0, 1, in_ms(5000)).ok());
  const std::string value = "rank 0's data";
  REQUIRE(owner->set("k", value.data(), value.size(), in_ms(5000)).ok());

  // A client with the wrong secret is refused with a clear error...
  auto intruder =
      StoreClient::connect({"127.0.0.1", server->port()}, secret_of(2), in_ms(5000), status);
  CHECK(!intruder);
  CHECK(status.result == HAL_ERROR_INVALID_ARGUMENT);
  // ...and a raw one that pipelines a join and a take behind a wrong proof is
  // dropped without either being read.
  const int fd = raw_connect(server->port());
  uint8_t challenge[kChallengeBytes];
  REQUIRE(read_exact(fd, challenge, sizeof(challenge)));
  CHECK(std::memcmp(challenge, kChallengeMagic, sizeof(kChallengeMagic)) == 0);
  const uint8_t nonce[kNonceBytes] = {};
  write_all(fd, nonce, sizeof(nonce));
  Proof servers;
  REQUIRE(read_exact(fd, servers.data(), servers.size()));
  const uint8_t wrong[kProofBytes] = {};
  write_all(fd, wrong, sizeof(wrong));
  send_frame(fd, nullptr, kJoin, 1, "job", 0);
  send_frame(fd, nullptr, kTake, 0, "k", 0);
  CHECK(closed_by_peer(fd));
  ::close(fd);
  CHECK(server->dropped() >= 2);
  // The job is unaffected: its value is still there, untaken.
  std::vector<uint8_t> got;
  REQUIRE(owner->take("k", got, 100, in_ms(5000)).ok());
  CHECK(std::string(got.begin(), got.end()) == value);

  // The client checks the server too: a store with another secret fails.
  auto other = start_store(secret_of(3));
  auto fooled = StoreClient::connect({"127.0.0.1", other->port()}, secret, in_ms(5000), status);
  CHECK(!fooled);
}

TEST_CASE("store: length fields beyond the limits drop the peer, allocate nothing", "[store]") {
  const StoreSecret secret = secret_of(4);
  auto server = start_store(secret);
  const uint64_t tebibyte = uint64_t{1} << 40;
  struct Case {
    const char* what;
    uint32_t op;
    uint64_t key_bytes;
    uint64_t value_bytes;
  };
  for (const Case& c : {Case{"1 TiB value", kSet, 1, tebibyte},
                        Case{"a key length that wraps", kSet, ~uint64_t{0} - 31, 64},
                        Case{"a 1 TiB key", kJoin, tebibyte, 0},
                        Case{"both huge", kSet, ~uint64_t{0}, ~uint64_t{0}}}) {
    INFO(c.what);
    const uint64_t before = server->dropped();
    const int fd = raw_connect(server->port());
    Seals seals;
    REQUIRE(raw_authenticate(fd, secret, &seals));
    if (c.op == kSet) send_frame(fd, seals.out.get(), kJoin, 1, "huge", 0);  // rank 0 of 1
    const Frame frame{c.op, 0, 1, c.key_bytes, c.value_bytes};
    write_all(fd, &frame, sizeof(frame));
    CHECK(closed_by_peer(fd));
    ::close(fd);
    CHECK(server->dropped() == before + 1);
    check_store_serves(server->port(), secret);
  }
  // The reproducer: one 32-byte frame, no handshake at all.
  const int fd = raw_connect(server->port());
  const Frame frame{kSet, 0, 0, ~uint64_t{0}, 1};
  write_all(fd, &frame, sizeof(frame));
  ::shutdown(fd, SHUT_WR);
  CHECK(closed_by_peer(fd));
  ::close(fd);
  check_store_serves(server->port(), secret);
}

TEST_CASE("store: a client refuses a reply larger than it expects", "[store]") {
  const StoreSecret secret = secret_of(5);
  FakeServer fake;
  Status status;
  std::thread serve([&] {
    Seals seals;
    const int peer = fake.accept_authenticated(secret, &seals);
    Frame request{};
    std::vector<uint8_t> body;
    read_frame(peer, request, body);  // the join
    const auto ok = sealed_frame(*seals.out, Frame{kReply, 0, 0, 0, 0}, {}, {});
    write_all(peer, ok.data(), ok.size());
    read_frame(peer, request, body);  // the take
    const Frame huge{kReply, 0, uint64_t{1} << 40, 0, uint64_t{1} << 40};
    write_all(peer, &huge, sizeof(huge));
    closed_by_peer(peer);
    ::close(peer);
  });
  auto client = StoreClient::connect({"127.0.0.1", fake.port}, secret, in_ms(5000), status);
  REQUIRE(client);
  CHECK(client->join("s", 0, 1, in_ms(5000)).ok());
  std::vector<uint8_t> got;
  const Status taken = client->take("k", got, 1024, in_ms(5000));
  CHECK(taken.result == HAL_ERROR_REMOTE);
  CHECK(got.capacity() < (1u << 20));
  client.reset();
  serve.join();
}

TEST_CASE("store: truncated and garbage frames drop the peer, the store serves on", "[store]") {
  const StoreSecret secret = secret_of(6);
  StoreLimits limits;
  limits.max_value_bytes = 4096;
  auto server = start_store(secret, limits);
  std::mt19937_64 random(20261201);
  for (int i = 0; i < 40; ++i) {
    const int fd = raw_connect(server->port());
    const bool authenticate = i % 4 != 0;
    Seals seals;
    if (authenticate) REQUIRE(raw_authenticate(fd, secret, &seals));
    if (i % 3 == 0) send_frame(fd, seals.out.get(), kJoin, 2, "garbage" + std::to_string(i), 0);
    std::vector<uint8_t> junk(random() % 300);
    for (uint8_t& b : junk) b = static_cast<uint8_t>(random());
    // Sometimes a plausible header with small random sizes, then a cut.
    if (i % 2 == 0 && junk.size() >= sizeof(Frame)) {
      Frame frame{static_cast<uint32_t>(random() % 6), 0, random(), random() % 64, random() % 8192};
      std::memcpy(junk.data(), &frame, sizeof(frame));
    }
    write_all(fd, junk.data(), junk.size());
    ::close(fd);
  }
  check_store_serves(server->port(), secret);
}

TEST_CASE("store: connect, recv and send end at the deadline", "[store][deadline]") {
  const StoreSecret secret = secret_of(7);
  constexpr uint32_t kDeadlineMs = 300;
  const double bound = 3.0 * kDeadlineMs / 1000.0 + 2.0;  // liveness, not timing
  Status status;
  SECTION("connect to a listener whose accept queue is full") {
    FakeServer fake(0);
    std::vector<int> fillers;
    for (int i = 0; i < 16; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(fake.port);
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      fillers.push_back(fd);
    }
    const auto start = Clock::now();
    auto client =
        StoreClient::connect({"127.0.0.1", fake.port}, secret, in_ms(kDeadlineMs), status);
    CHECK(!client);
    CHECK(status.result == HAL_ERROR_TIMEOUT);
    CHECK(seconds_since(start) < bound);
    for (int fd : fillers) ::close(fd);
  }
  SECTION("recv from a server that never speaks") {
    FakeServer fake;
    const auto start = Clock::now();
    auto client =
        StoreClient::connect({"127.0.0.1", fake.port}, secret, in_ms(kDeadlineMs), status);
    CHECK(!client);
    CHECK(status.result == HAL_ERROR_TIMEOUT);
    CHECK(seconds_since(start) < bound);
  }
  SECTION("send to a server that stopped reading, and take from one that never answers") {
    FakeServer fake;
    int peer = -1;
    std::thread accept([&] { peer = fake.accept_authenticated(secret); });
    auto client = StoreClient::connect({"127.0.0.1", fake.port}, secret, in_ms(5000), status);
    accept.join();
    REQUIRE(client);
    std::vector<uint8_t> big(64u << 20, 1);  // far beyond the socket buffers
    auto start = Clock::now();
    CHECK(client->set("k", big.data(), big.size(), in_ms(kDeadlineMs)).result == HAL_ERROR_TIMEOUT);
    CHECK(seconds_since(start) < bound);
    // The connection is out of step now: later calls fail at once.
    CHECK(!client->set("k", big.data(), 1, in_ms(kDeadlineMs)).ok());
    client.reset();
    ::close(peer);

    std::thread accept2([&] { peer = fake.accept_authenticated(secret); });
    client = StoreClient::connect({"127.0.0.1", fake.port}, secret, in_ms(5000), status);
    accept2.join();
    REQUIRE(client);
    std::vector<uint8_t> got;
    start = Clock::now();
    CHECK(client->take("k", got, 16, in_ms(kDeadlineMs)).result == HAL_ERROR_TIMEOUT);
    CHECK(seconds_since(start) < bound);
    client.reset();
    ::close(peer);
  }
}

TEST_CASE("store: the serving process lingers until its last messages are taken",
          "[store][lifetime]") {
  const StoreSecret secret = secret_of(11);
  Status status;
  auto server = StoreServer::start({"127.0.0.1", 0}, secret, {}, status);
  REQUIRE(server);
  const StoreAddress address{"127.0.0.1", server->port()};
  auto sender = StoreClient::connect(address, secret, in_ms(5000), status);
  auto receiver = StoreClient::connect(address, secret, in_ms(5000), status);
  REQUIRE(sender);
  REQUIRE(receiver);
  std::thread join_receiver([&] { CHECK(receiver->join("s", 1, 2, in_ms(5000)).ok()); });
  REQUIRE(sender->join("s", 0, 2, in_ms(5000)).ok());
  join_receiver.join();
  // Nothing stored: no wait.
  CHECK(server->linger(in_ms(5000)));

  std::mt19937 random(5);
  std::vector<uint8_t> message(300000);
  for (auto& byte : message) byte = static_cast<uint8_t>(random());
  REQUIRE(sender->set("last", message.data(), message.size(), in_ms(5000)).ok());
  SECTION("a peer that takes late gets the message whole") {
    std::atomic<bool> lingered{false};
    std::thread late([&] {
      std::this_thread::sleep_for(200ms);
      CHECK(!lingered.load());  // still waiting for this take
      std::vector<uint8_t> got;
      CHECK(receiver->take("last", got, message.size(), in_ms(5000)).ok());
      CHECK(got == message);
    });
    CHECK(server->linger(in_ms(20000)));
    lingered = true;
    late.join();
  }
  SECTION("a message nobody takes: false at the deadline") {
    const auto start = Clock::now();
    CHECK(!server->linger(in_ms(300)));
    CHECK(seconds_since(start) < 5.0);  // liveness, not timing
  }
  SECTION("a peer that fails the session ends the wait at once") {
    std::thread crash([&] {
      std::this_thread::sleep_for(100ms);
      receiver->sever();
    });
    const auto start = Clock::now();
    CHECK(server->linger(in_ms(20000)));
    CHECK(seconds_since(start) < 10.0);
    crash.join();
  }
  SECTION("a stopped store owes nothing") {
    server->stop();
    CHECK(server->linger(in_ms(20000)));
  }
}

TEST_CASE("store: abort interrupts a blocked socket call", "[store][abort]") {
  const StoreSecret secret = secret_of(8);
  FakeServer fake;
  Status status;
  for (bool by_flag : {false, true}) {
    INFO((by_flag ? "the abort flag" : "interrupt()"));
    int peer = -1;
    std::thread accept([&] { peer = fake.accept_authenticated(secret); });
    auto client = StoreClient::connect({"127.0.0.1", fake.port}, secret, in_ms(5000), status);
    accept.join();
    REQUIRE(client);
    std::atomic<bool> aborted{false};
    Status result;
    const auto start = Clock::now();
    std::thread blocked([&] {
      std::vector<uint8_t> got;
      result = client->take("k", got, 16, in_ms(120000, &aborted));
    });
    std::this_thread::sleep_for(100ms);
    if (by_flag) {
      aborted.store(true);
    } else {
      client->interrupt();
    }
    blocked.join();
    CHECK(result.result == HAL_ERROR_INVALID_STATE);
    CHECK(seconds_since(start) < 10.0);  // against a 120 s deadline
    client.reset();
    ::close(peer);
  }
}

TEST_CASE("store: 1000 idle connections neither block clients nor spin", "[store][limits]") {
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  constexpr size_t kIdle = 1000;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < 2 * kIdle + 128) {
    WARN("RLIMIT_NOFILE's hard limit is too low for 1000 connections: skipped");
    return;
  }
  const rlimit saved = limit;
  limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 4 * kIdle);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  {
    const StoreSecret secret = secret_of(9);
    auto server = start_store(secret);
    std::vector<int> idle;
    for (size_t i = 0; i < kIdle; ++i) idle.push_back(raw_connect(server->port()));
    check_store_serves(server->port(), secret);
    std::this_thread::sleep_for(200ms);  // let the accepts settle
    const auto before = server->cpu_time();
    std::this_thread::sleep_for(1s);
    const auto spent = server->cpu_time() - before;
    CHECK(spent < 250ms);  // a spinning thread would show ~1 s
    check_store_serves(server->port(), secret);
    for (int fd : idle) ::close(fd);
  }
  {
    // At the connection limit, idle unauthenticated peers make room.
    const StoreSecret secret = secret_of(10);
    StoreLimits limits;
    limits.max_connections = 8;
    auto server = start_store(secret, limits);
    std::vector<int> idle;
    for (int i = 0; i < 20; ++i) idle.push_back(raw_connect(server->port()));
    check_store_serves(server->port(), secret);
    for (int fd : idle) ::close(fd);
  }
  {
    // Peers that never prove the secret are dropped after the handshake timeout.
    const StoreSecret secret = secret_of(11);
    StoreLimits limits;
    limits.handshake_timeout_ms = 100;
    auto server = start_store(secret, limits);
    const int fd = raw_connect(server->port());
    CHECK(closed_by_peer(fd));
    ::close(fd);
  }
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

TEST_CASE("store: an id's store binds loopback and stops with its communicators",
          "[store][lifetime]") {
  const size_t fds_before_init = open_fds();
  const size_t threads_before_init = baseline_threads();
  {
    StoreSession session;
    hal_device_t device = nullptr;
    REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
    const size_t fds_before = open_fds();
    const size_t threads_before = threads();
    const std::set<std::string> sockets_before = socket_inodes();
    hal_comm_unique_id_t id{};
    REQUIRE(hal_comm_get_unique_id(&id) == HAL_SUCCESS);
    CHECK(open_fds() > fds_before);
    CHECK(threads_settled_at(threads_before + 1) == threads_before + 1);

    // Its listening socket is on 127.0.0.1 (0100007F in /proc/net/tcp).
    std::set<std::string> fresh;
    for (const std::string& inode : socket_inodes()) {
      if (sockets_before.count(inode) == 0) fresh.insert(inode);
    }
    int listening = 0;
    {
      std::ifstream tcp("/proc/net/tcp");
      std::string line;
      std::getline(tcp, line);
      while (std::getline(tcp, line)) {
        std::istringstream fields(line);
        std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
        fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode;
        if (fresh.count(inode) == 0 || state != "0A") continue;
        ++listening;
        CHECK(local.substr(0, 8) == "0100007F");
      }
    }
    CHECK(listening == 1);

    // One rank is a whole communicator; when it goes, so does the store.
    hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
    config.timeout_ms = 10000;
    hal_comm_t comm = nullptr;
    REQUIRE(hal_comm_init_rank(device, 1, &id, 0, &config, &comm) == HAL_SUCCESS);
    REQUIRE(hal_comm_destroy(comm) == HAL_SUCCESS);
    CHECK(open_fds() == fds_before);
    CHECK(threads_settled_at(threads_before) == threads_before);

    // A store no communicator adopted stops at hal_shutdown.
    REQUIRE(hal_comm_get_unique_id(&id) == HAL_SUCCESS);
    REQUIRE(hal_comm_get_unique_id(&id) == HAL_SUCCESS);
    CHECK(threads_settled_at(threads_before + 2) == threads_before + 2);
  }
  CHECK(open_fds() == fds_before_init);
  CHECK(threads_settled_at(threads_before_init) == threads_before_init);
}

TEST_CASE("store: the fixed-session store's secret file must be private", "[store][secret]") {
  StoreSession session;
  hal_device_t device = nullptr;
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  ::unsetenv("HAL_COMM_STORE_SECRET");
  char path[] = "/tmp/hal_store_secret_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string text = "eb46871195dd075bb400aa1147c38bc010e37e6847ef9cf8f29e7161e351843b\n";
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
  ::setenv("HAL_COMM_STORE_SECRET_FILE", path, 1);
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.bootstrap = HAL_COMM_BOOTSTRAP_TCP_STORE;
  config.store_address = "127.0.0.1:0";
  config.timeout_ms = 10000;
  hal_comm_t comm = nullptr;
  ::chmod(path, 0644);
  CHECK(hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm) == HAL_ERROR_INVALID_ARGUMENT);
  ::chmod(path, 0600);
  const hal_result_t made = hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm);
  INFO(hal_error_last_message());
  REQUIRE(made == HAL_SUCCESS);
  CHECK(hal_comm_destroy(comm) == HAL_SUCCESS);
  ::unsetenv("HAL_COMM_STORE_SECRET_FILE");
  ::unlink(path);
}

TEST_CASE("communicator calls before hal_init are NOT_INITIALIZED", "[store][lifetime]") {
  CHECK(hal_comm_destroy(nullptr) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_group_start() == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_group_end() == HAL_ERROR_NOT_INITIALIZED);
  hal_comm_unique_id_t id{};
  CHECK(hal_comm_get_unique_id(&id) == HAL_ERROR_NOT_INITIALIZED);
}

TEST_CASE("the last hal_shutdown frees communicators and stops their stores", "[store][lifetime]") {
  const size_t fds_before_init = open_fds();
  const size_t threads_before_init = baseline_threads();
  hal_comm_t comm = nullptr;
  {
    StoreSession session;
    hal_device_t device = nullptr;
    REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
    hal_comm_unique_id_t id{};
    REQUIRE(hal_comm_get_unique_id(&id) == HAL_SUCCESS);
    hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
    config.timeout_ms = 10000;
    REQUIRE(hal_comm_init_rank(device, 1, &id, 0, &config, &comm) == HAL_SUCCESS);
    CHECK(threads() > threads_before_init);
  }  // comm is left alive on purpose
  CHECK(open_fds() == fds_before_init);
  CHECK(threads_settled_at(threads_before_init) == threads_before_init);
  CHECK(hal_comm_destroy(comm) == HAL_ERROR_NOT_INITIALIZED);
}
