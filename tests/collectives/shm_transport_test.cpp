// The shared-memory transport of collective/shm_transport.cpp: ranks that
// are threads of this process (set up through an in-memory meeting point)
// or a forked process (set up over a socket pair). Messages of random sizes
// (0, 1, odd, larger than a ring) against the bytes sent, on both channels
// and to itself; tag and size mismatches on both sides; a peer that never
// comes (the deadline), one that marks the segment or whose process ends
// (HAL_ERROR_REMOTE), an abort; and a peer that corrupts a message header.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "hal_collective/shm.hpp"
#include "hal_collective/shm_transport.hpp"
#include "setup_channels.hpp"

using coll_test::Meeting;
using coll_test::SocketSetup;
using coll_test::ThreadSetup;
using hal::collective::Channel;
using hal::collective::Deadline;
using hal::collective::SetupChannel;
using hal::collective::ShmTransport;
using hal::collective::Status;

namespace {

// The chooser of a rank that has a segment and a transport, with no path
// forced (HAL_COLL_PATH of the environment is not these tests' business).
inline hal::collective::Chooser test_chooser() {
  hal::collective::Chooser chooser;
  chooser.means = {2, false, true, true, false};
  chooser.policy = hal::collective::PathPolicy::automatic();
  return chooser;
}

// ShmGroup::run with a transport part that ignores the path it is given.
template <class TransportPart>
Status run_episode(hal::collective::ShmGroup& group, const hal_collective_call_t& call,
                   const Deadline& deadline, TransportPart part) {
  return group.run(call, deadline, test_chooser(),
                   [&](const hal::collective::DecidedPath&) { return part(); });
}

struct Made {
  std::unique_ptr<ShmTransport> transport;
  Status status;
  std::string reason;
};

std::vector<Made> make_transports(uint32_t ranks, const std::function<bool(uint32_t)>& wanted) {
  Meeting meeting(ranks);
  std::vector<Made> made(ranks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ThreadSetup setup(meeting, r);
      made[r].transport = ShmTransport::create(setup, wanted(r), made[r].status, made[r].reason);
    });
  }
  for (auto& t : threads) t.join();
  return made;
}

std::vector<Made> make_transports(uint32_t ranks) {
  std::vector<Made> made = make_transports(ranks, [](uint32_t) { return true; });
  for (const Made& m : made) REQUIRE(m.transport != nullptr);
  return made;
}

std::vector<uint8_t> random_bytes(std::mt19937& random, size_t count) {
  std::vector<uint8_t> bytes(count);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(random());
  return bytes;
}

// Runs |body(r)| on every rank's thread; the statuses in rank order.
std::vector<Status> on_every_rank(uint32_t ranks, const std::function<Status(uint32_t)>& body) {
  std::vector<Status> statuses(ranks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r) threads.emplace_back([&, r] { statuses[r] = body(r); });
  for (auto& t : threads) t.join();
  return statuses;
}

Deadline in_ms(uint32_t ms, const std::atomic<bool>* aborted = nullptr) {
  return Deadline::after_ms(ms, aborted);
}

}  // namespace

TEST_CASE("shm transport: messages of any size arrive whole, in order, on both channels",
          "[collectives][shm_transport]") {
  const uint32_t ranks = GENERATE(1u, 2u, 3u);
  std::vector<Made> made = make_transports(ranks);
  const size_t ring = made[0].transport->ring_bytes();
  const std::vector<size_t> fixed = {0, 1, 7, 4093, ring - 24, ring + 13, 3 * ring + 5};
  std::mt19937 random(ranks * 7919u);
  // Message m from rank s to rank d on channel c, several per pair in one wait.
  struct Message {
    uint32_t from, to;
    Channel channel;
    uint32_t tag;
    std::vector<uint8_t> bytes;
  };
  for (int round = 0; round < 3; ++round) {
    INFO(ranks << " ranks, round " << round);
    std::vector<Message> messages;
    for (uint32_t from = 0; from < ranks; ++from) {
      for (uint32_t to = 0; to < ranks; ++to) {
        for (int i = 0; i < 3; ++i) {
          const size_t size =
              random() % 2 == 0 ? fixed[random() % fixed.size()] : random() % (2 * ring + 1);
          const Channel channel = random() % 2 == 0 ? Channel::kCollective : Channel::kPointToPoint;
          messages.push_back({from, to, channel, static_cast<uint32_t>(random() & 0x7fff),
                              random_bytes(random, size)});
        }
      }
    }
    std::vector<std::vector<uint8_t>> landed(messages.size());
    for (size_t m = 0; m < messages.size(); ++m) {
      landed[m].assign(messages[m].bytes.size(), 0xee);
    }
    const auto statuses = on_every_rank(ranks, [&](uint32_t r) -> Status {
      ShmTransport& t = *made[r].transport;
      for (size_t m = 0; m < messages.size(); ++m) {
        const Message& msg = messages[m];
        if (msg.from == r) {
          if (Status s =
                  t.post_send(msg.to, msg.bytes.data(), msg.bytes.size(), msg.tag, msg.channel);
              !s.ok()) {
            return s;
          }
        }
        if (msg.to == r) {
          if (Status s =
                  t.post_recv(msg.from, landed[m].data(), landed[m].size(), msg.tag, msg.channel);
              !s.ok()) {
            return s;
          }
        }
      }
      return t.wait_all(in_ms(20000));
    });
    for (uint32_t r = 0; r < ranks; ++r) CHECK(statuses[r].ok());
    for (size_t m = 0; m < messages.size(); ++m) {
      INFO("message " << m << " from " << messages[m].from << " to " << messages[m].to << ", "
                      << messages[m].bytes.size() << " bytes");
      CHECK(landed[m] == messages[m].bytes);
    }
  }
}

TEST_CASE("shm transport: the ranks agree whether to share", "[collectives][shm_transport]") {
  std::vector<Made> made = make_transports(3, [](uint32_t r) { return r != 2; });
  for (const Made& m : made) {
    CHECK(m.status.ok());
    CHECK(m.transport == nullptr);
    CHECK(m.reason == "a rank has HAL_COMM_SHM=0");
  }
}

TEST_CASE("shm transport: a tag or size that disagrees fails both sides",
          "[collectives][shm_transport]") {
  struct Disagreement {
    const char* what;
    uint32_t sent_tag, expected_tag;
    size_t sent_bytes, expected_bytes;
  };
  const Disagreement cases[] = {{"tag", 5, 6, 100, 100},
                                {"smaller", 5, 5, 100, 101},
                                {"larger than a ring", 5, 5, (2u << 20) + 3, 64}};
  for (const Disagreement& c : cases) {
    INFO(c.what);
    std::vector<Made> made = make_transports(2);
    std::vector<uint8_t> out(c.sent_bytes, 1), in(c.expected_bytes, 0);
    // One way: rank 0 sends, rank 1 receives.
    const auto one_way = on_every_rank(2, [&](uint32_t r) {
      ShmTransport& t = *made[r].transport;
      Status s = r == 0
                     ? t.post_send(1, out.data(), out.size(), c.sent_tag, Channel::kPointToPoint)
                     : t.post_recv(0, in.data(), in.size(), c.expected_tag, Channel::kPointToPoint);
      return s.ok() ? t.wait_all(in_ms(20000)) : s;
    });
    CHECK(one_way[0].result == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK(one_way[1].result == HAL_ERROR_ARGUMENT_MISMATCH);
    CHECK(std::all_of(in.begin(), in.end(), [](uint8_t b) { return b == 0; }));
    // Out of step for good: the next wait says so again.
    CHECK(made[1].transport->wait_all(in_ms(100)).result == HAL_ERROR_ARGUMENT_MISMATCH);
  }
  // Both ways at once (the collectives' exchange): each side sees it.
  std::vector<Made> made = make_transports(2);
  std::vector<uint8_t> a(40, 1), b(48, 2), into_a(40), into_b(48);
  const auto both = on_every_rank(2, [&](uint32_t r) {
    ShmTransport& t = *made[r].transport;
    const size_t mine = r == 0 ? a.size() : b.size();
    std::vector<uint8_t>& landing = r == 0 ? into_a : into_b;
    (void)t.post_send(1 - r, r == 0 ? a.data() : b.data(), mine, 9, Channel::kCollective);
    (void)t.post_recv(1 - r, landing.data(), landing.size(), 9, Channel::kCollective);
    return t.wait_all(in_ms(20000));
  });
  CHECK(both[0].result == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(both[1].result == HAL_ERROR_ARGUMENT_MISMATCH);
}

TEST_CASE("shm transport: a peer that never comes is the deadline, not a hang",
          "[collectives][shm_transport]") {
  std::vector<Made> made = make_transports(2);
  std::vector<uint8_t> buffer(64);
  ShmTransport& t = *made[0].transport;
  REQUIRE(t.post_recv(1, buffer.data(), buffer.size(), 1, Channel::kCollective).ok());
  CHECK(t.wait_all(in_ms(200)).result == HAL_ERROR_TIMEOUT);
  // A send completes only once taken: unreceived, it meets the deadline too.
  std::vector<Made> fresh = make_transports(2);
  ShmTransport& sender = *fresh[0].transport;
  REQUIRE(sender.post_send(1, buffer.data(), buffer.size(), 1, Channel::kCollective).ok());
  CHECK(sender.wait_all(in_ms(200)).result == HAL_ERROR_TIMEOUT);
}

TEST_CASE("shm transport: a peer's mark and an abort wake a waiter",
          "[collectives][shm_transport]") {
  std::vector<uint8_t> buffer(64);
  {
    std::vector<Made> made = make_transports(2);
    std::thread peer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      made[1].transport->fail();
    });
    const auto start = std::chrono::steady_clock::now();
    ShmTransport& t = *made[0].transport;
    REQUIRE(t.post_recv(1, buffer.data(), buffer.size(), 1, Channel::kCollective).ok());
    CHECK(t.wait_all(in_ms(60000)).result == HAL_ERROR_REMOTE);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
    peer.join();
  }
  {
    std::vector<Made> made = make_transports(2);
    std::atomic<bool> aborted{false};
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      aborted.store(true);
    });
    ShmTransport& t = *made[0].transport;
    REQUIRE(t.post_send(1, buffer.data(), buffer.size(), 1, Channel::kCollective).ok());
    CHECK(t.wait_all(in_ms(60000, &aborted)).result == HAL_ERROR_INVALID_STATE);
    aborter.join();
  }
}

TEST_CASE("shm transport: a corrupted message header is caught, nothing is written",
          "[collectives][shm_transport]") {
  // Which header field the peer overwrites after sending: its sequence,
  // its length (to one that would overrun the receiver), its tag.
  const size_t field = GENERATE(size_t{0}, size_t{8}, size_t{16});
  INFO("header byte " << field);
  std::vector<Made> made = make_transports(2);
  std::vector<uint8_t> out(64, 7);
  ShmTransport& sender = *made[1].transport;
  REQUIRE(sender.post_send(0, out.data(), out.size(), 3, Channel::kCollective).ok());
  // Nobody takes it yet: the message stays in the ring.
  CHECK(sender.wait_all(in_ms(50)).result == HAL_ERROR_TIMEOUT);
  uint8_t* ring = sender.ring_for_testing(0, Channel::kCollective);
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(ring + field, &huge, field == 16 ? 4 : 8);
  std::vector<uint8_t> in(64 + 16, 0);
  ShmTransport& receiver = *made[0].transport;
  REQUIRE(receiver.post_recv(1, in.data(), 64, 3, Channel::kCollective).ok());
  const Status status = receiver.wait_all(in_ms(20000));
  CHECK(status.result == HAL_ERROR_REMOTE);
  CHECK_THAT(status.message, Catch::Contains("corrupt"));
  CHECK(std::all_of(in.begin(), in.end(), [](uint8_t b) { return b == 0; }));
}

TEST_CASE("shm transport: across processes, and a peer whose process ends",
          "[collectives][shm_transport]") {
  int sockets[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) == 0);
  const size_t size = (3u << 20) + 5;  // past a ring
  std::mt19937 random(42);
  const std::vector<uint8_t> message = random_bytes(random, size);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Rank 1: sends the message, then ends without a word.
    close(sockets[0]);
    SocketSetup setup(sockets[1], 1);
    Status status;
    std::string reason;
    auto t = ShmTransport::create(setup, true, status, reason);
    bool sent = t != nullptr &&
                t->post_send(0, message.data(), message.size(), 11, Channel::kCollective).ok() &&
                t->wait_all(in_ms(20000)).ok();
    _exit(sent ? 0 : 1);
  }
  close(sockets[1]);
  SocketSetup setup(sockets[0], 0);
  Status status;
  std::string reason;
  auto t = ShmTransport::create(setup, true, status, reason);
  close(sockets[0]);
  REQUIRE(status.ok());
  REQUIRE(t != nullptr);
  std::vector<uint8_t> landed(size);
  REQUIRE(t->post_recv(1, landed.data(), landed.size(), 11, Channel::kCollective).ok());
  CHECK(t->wait_all(in_ms(20000)).ok());
  CHECK(landed == message);
  // The next message never comes: the peer's end is seen, not the deadline.
  REQUIRE(t->post_recv(1, landed.data(), 8, 11, Channel::kCollective).ok());
  const Status lost = t->wait_all(in_ms(60000));
  CHECK(lost.result == HAL_ERROR_REMOTE);
  int code = -1;
  REQUIRE(waitpid(child, &code, 0) == child);
  CHECK(WIFEXITED(code));
  CHECK(WEXITSTATUS(code) == 0);
}

TEST_CASE("shared segment: a peer whose process ends fails a small allreduce at once",
          "[collectives][shm]") {
  // ShmGroup over ShmTransport, as the cpu plugin runs a store's ranks:
  // rank 1 takes part in one allreduce and ends; rank 0's next allreduce
  // waits in the segment for nobody and must say so well before its deadline.
  int sockets[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) == 0);
  auto allreduce_of = [](const float* send, float* recv) {
    hal_collective_call_t call{};
    call.kind = HAL_COLLECTIVE_ALLREDUCE;
    call.send = send;
    call.recv = recv;
    call.count = 4;
    call.dtype = HAL_DTYPE_F32;
    call.op = HAL_REDUCE_SUM;
    return call;
  };
  auto join = [](int fd, uint32_t rank, std::unique_ptr<ShmTransport>& transport) {
    SocketSetup setup(fd, rank);
    Status status;
    std::string reason;
    transport = ShmTransport::create(setup, true, status, reason);
    if (!transport) return std::unique_ptr<hal::collective::ShmGroup>();
    return hal::collective::ShmGroup::create(*transport, true, in_ms(20000), status, reason);
  };
  const float ones[4] = {1, 1, 1, 1};
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(sockets[0]);
    std::unique_ptr<ShmTransport> transport;
    auto group = join(sockets[1], 1, transport);
    float sum[4] = {};
    const hal_collective_call_t call = allreduce_of(ones, sum);
    const bool ran = group != nullptr &&
                     run_episode(*group, call, in_ms(20000), [] { return Status{}; }).ok() &&
                     sum[0] == 2;
    _exit(ran ? 0 : 1);
  }
  close(sockets[1]);
  std::unique_ptr<ShmTransport> transport;
  auto group = join(sockets[0], 0, transport);
  close(sockets[0]);
  REQUIRE(group != nullptr);
  float sum[4] = {};
  const hal_collective_call_t call = allreduce_of(ones, sum);
  CHECK(run_episode(*group, call, in_ms(20000), [] { return Status{}; }).ok());
  CHECK(sum[3] == 2);
  int code = -1;
  REQUIRE(waitpid(child, &code, 0) == child);
  CHECK((WIFEXITED(code) && WEXITSTATUS(code) == 0));
  const auto start = std::chrono::steady_clock::now();
  const Status lost = run_episode(*group, call, in_ms(60000), [] { return Status{}; });
  CHECK(lost.result == HAL_ERROR_REMOTE);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));  // not the deadline
}
