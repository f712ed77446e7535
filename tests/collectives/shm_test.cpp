// The shared segment of collective/shm.cpp on ranks that are threads of this
// process, set up over an in-memory transport: allreduce against a plain
// sum, the agreement on whether to share, mismatch, a broken peer, a
// segment planted by someone else, and calls tried without blocking
// (try_run: the cpu plugin's inline path).
#include <catch2/catch.hpp>

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <thread>

#include "hal_collective/limits.hpp"
#include "hal_collective/shm.hpp"
#include "hal_collective/shm_doorbell.hpp"
#include "hal_collective/shm_handoff.hpp"

using hal::collective::Channel;
using hal::collective::Clock;
using hal::collective::Deadline;
using hal::collective::SegmentInvitation;
using hal::collective::ShmGroup;
using hal::collective::Status;
using hal::collective::Transport;

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

// Mailboxes between the ranks of one process; |tamper| may rewrite a
// message in flight (the attacker of the last test).
struct Wire {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::pair<uint32_t, uint32_t>, std::deque<std::vector<uint8_t>>> boxes;
  std::function<void(uint32_t from, std::vector<uint8_t>&)> tamper;
  std::string socket_name;  // rank 0's hand-over socket, as its invitation went out
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(Wire& wire, uint32_t rank, uint32_t ranks)
      : wire_(wire), rank_(rank), ranks_(ranks) {}
  uint32_t rank() const override { return rank_; }
  uint32_t ranks() const override { return ranks_; }
  Status post_send(uint32_t peer, const void* data, size_t bytes, uint32_t, Channel) override {
    std::vector<uint8_t> message(static_cast<const uint8_t*>(data),
                                 static_cast<const uint8_t*>(data) + bytes);
    std::lock_guard lock(wire_.mutex);
    if (rank_ == 0 && bytes == sizeof(SegmentInvitation) &&
        std::memcmp(data, "hal-comm-", 9) == 0) {
      wire_.socket_name = static_cast<const char*>(data);
    }
    if (wire_.tamper) wire_.tamper(rank_, message);
    wire_.boxes[{rank_, peer}].push_back(std::move(message));
    wire_.arrived.notify_all();
    return {};
  }
  Status post_recv(uint32_t peer, void* data, size_t bytes, uint32_t, Channel) override {
    pending_.push_back({peer, data, bytes});
    return {};
  }
  Status wait_all(const Deadline& deadline) override {
    std::unique_lock lock(wire_.mutex);
    for (const Pending& p : pending_) {
      auto& box = wire_.boxes[{p.peer, rank_}];
      if (!wire_.arrived.wait_until(lock, deadline.at, [&] { return !box.empty(); })) {
        pending_.clear();
        return Status::failure(HAL_ERROR_TIMEOUT, "no message");
      }
      if (box.front().size() != p.bytes)
        return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH, "size");
      if (p.bytes != 0) std::memcpy(p.data, box.front().data(), p.bytes);  // 0 bytes: maybe null
      box.pop_front();
    }
    pending_.clear();
    return {};
  }

 private:
  struct Pending {
    uint32_t peer;
    void* data;
    size_t bytes;
  };
  Wire& wire_;
  uint32_t rank_, ranks_;
  std::vector<Pending> pending_;
};

struct Made {
  std::unique_ptr<ShmGroup> group;
  Status status;
  std::string reason;
};

// Sets up |ranks| ranks, each on its own thread; |wanted(r)| is rank r's
// wish, |cross_memory(r)| its cross-memory options (default: wanted).
std::vector<Made> make_groups(
    Wire& wire, uint32_t ranks, const std::function<bool(uint32_t)>& wanted,
    uint32_t timeout_ms = 10000,
    const std::function<hal::collective::CrossMemoryOptions(uint32_t)>& cross_memory = {}) {
  std::vector<Made> made(ranks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ThreadTransport transport(wire, r, ranks);
      made[r].group = ShmGroup::create(
          transport, wanted(r), Deadline::after_ms(timeout_ms, nullptr), made[r].status,
          made[r].reason, cross_memory ? cross_memory(r) : hal::collective::CrossMemoryOptions{});
    });
  }
  for (auto& t : threads) t.join();
  return made;
}

// Whether a Unix socket of this abstract name is still bound (the
// hand-over outlived set-up).
bool socket_bound(const std::string& name) {
  std::ifstream table("/proc/net/unix");
  std::string line;
  while (std::getline(table, line)) {
    if (line.size() > name.size() &&
        line.compare(line.size() - name.size() - 1, std::string::npos, "@" + name) == 0) {
      return true;
    }
  }
  return false;
}

// Whether this process maps a memory file of this name (no file system's).
bool maps_memory_file(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:" + name) != std::string::npos) return true;
  }
  return false;
}

hal_collective_call_t allreduce(const float* send, float* recv, size_t count,
                                hal_reduce_op_t op = HAL_REDUCE_SUM) {
  return {HAL_COLLECTIVE_ALLREDUCE, HAL_DTYPE_F32, op, 0, send, recv, count};
}

// Runs |call_of(r)| on every rank's thread; the statuses in rank order.
std::vector<Status> run_all(std::vector<Made>& made,
                            const std::function<hal_collective_call_t(uint32_t)>& call_of,
                            uint32_t timeout_ms = 10000) {
  std::vector<Status> statuses(made.size());
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < made.size(); ++r) {
    threads.emplace_back([&, r] {
      const hal_collective_call_t call = call_of(r);
      statuses[r] = run_episode(*made[r].group, call, Deadline::after_ms(timeout_ms, nullptr), [] {
        return Status::failure(HAL_ERROR_INTERNAL, "this call should not leave the segment");
      });
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

}  // namespace

TEST_CASE(
    "shared segment: small allreduces sum like a plain loop, in place too, larger ones "
    "leave after the handshake",
    "[collectives][shm]") {
  const uint32_t ranks = GENERATE(1u, 2u, 3u);
  Wire wire;
  std::vector<Made> made = make_groups(wire, ranks, [](uint32_t) { return true; });
  for (const Made& m : made) REQUIRE(m.group != nullptr);
  if (ranks > 1) {
    // No socket outlives set-up, and the segment has no name anywhere.
    REQUIRE(!wire.socket_name.empty());
    CHECK(!socket_bound(wire.socket_name));
    CHECK(maps_memory_file("hal-comm-segment"));
  }
  std::mt19937 random(ranks);
  for (const size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}}) {
    for (const bool in_place : {false, true}) {
      INFO(ranks << " ranks, " << count << " floats" << (in_place ? ", in place" : ""));
      std::vector<std::vector<float>> send(ranks, std::vector<float>(count));
      std::vector<std::vector<float>> recv(ranks, std::vector<float>(count, -1.0f));
      for (auto& v : send) {
        for (float& x : v) x = static_cast<float>(static_cast<int>(random() % 17) - 8);
      }
      std::vector<float> want(count, 0.0f);
      for (const auto& v : send) {
        for (size_t i = 0; i < count; ++i) want[i] += v[i];
      }
      const auto statuses = run_all(made, [&](uint32_t r) {
        return allreduce(send[r].data(), in_place ? send[r].data() : recv[r].data(), count);
      });
      for (uint32_t r = 0; r < ranks; ++r) {
        CHECK(statuses[r].ok());
        CHECK((in_place ? send[r] : recv[r]) == want);
      }
    }
  }
  // 16 KiB + 4 bytes: the handshake here, the data over the transport.
  std::vector<float> large(4097, 1.0f);
  std::vector<int> left(ranks, 0);
  std::vector<hal_result_t> results(ranks, HAL_ERROR_INTERNAL);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      results[r] = run_episode(*made[r].group, allreduce(large.data(), large.data(), large.size()),
                               Deadline::after_ms(10000, nullptr),
                               [&] {
                                 left[r] = 1;
                                 return Status{};
                               })
                       .result;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(results == std::vector<hal_result_t>(ranks, HAL_SUCCESS));
  CHECK(left == std::vector<int>(ranks, 1));
}

TEST_CASE("shared segment: the ranks agree whether to share", "[collectives][shm]") {
  Wire wire;
  std::vector<Made> made = make_groups(wire, 3, [](uint32_t r) { return r != 1; });
  for (const Made& m : made) {
    CHECK(m.status.ok());
    CHECK(m.group == nullptr);
    CHECK(m.reason == "a rank has HAL_COMM_SHM=0");
  }
}

TEST_CASE("shared segment: a mismatch fails every rank, a broken peer fails them at once",
          "[collectives][shm]") {
  Wire wire;
  std::vector<Made> made = make_groups(wire, 2, [](uint32_t) { return true; });
  std::vector<float> a(64, 1.0f), b(64, 2.0f);
  // Rank 0 calls with 4 floats, rank 1 with 64: both must say so.
  auto statuses = run_all(made, [&](uint32_t r) {
    return allreduce(r == 0 ? a.data() : b.data(), r == 0 ? a.data() : b.data(), r == 0 ? 4 : 64);
  });
  for (const Status& s : statuses) CHECK(s.result == HAL_ERROR_ARGUMENT_MISMATCH);
  // In step after a mismatch: the next agreeing call works.
  statuses = run_all(made, [&](uint32_t r) {
    return allreduce(r == 0 ? a.data() : b.data(), r == 0 ? a.data() : b.data(), 4);
  });
  for (const Status& s : statuses) CHECK(s.ok());
  CHECK(a[0] == 3.0f);
  // Rank 1 breaks the segment; rank 0, alone in a call with a long deadline, fails at once.
  made[1].group->fail();
  const auto start = std::chrono::steady_clock::now();
  const Status alone = run_episode(*made[0].group, allreduce(a.data(), a.data(), 4),
                                   Deadline::after_ms(60000, nullptr), [] { return Status{}; });
  CHECK(alone.result == HAL_ERROR_REMOTE);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

namespace {

// Rank r's input of episode e: small integers, exact in float sums.
std::vector<float> input_of(uint32_t rank, uint32_t episode, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    v[i] = static_cast<float>(static_cast<int>((rank * 131u + episode * 17u + i * 7u) % 23u) - 11);
  }
  return v;
}

std::vector<float> sum_of(const std::vector<std::vector<float>>& inputs) {
  std::vector<float> want(inputs.front().size(), 0.0f);
  for (const auto& v : inputs) {
    for (size_t i = 0; i < v.size(); ++i) want[i] += v[i];
  }
  return want;
}

constexpr auto kNoPatience = std::chrono::microseconds(0);
constexpr auto kLongPatience = std::chrono::seconds(20);

}  // namespace

namespace {

// try_run, and what its clock reading must be: a try that gave up read
// the clock (its patience counts from that first reading); one that ended
// may not have.
bool try_once(ShmGroup& group, const hal_collective_call_t& call, Clock::duration patience,
              Status& out_status) {
  const auto before = Clock::now();
  Clock::time_point first_look{Clock::duration(-1)};
  const bool ended = group.try_run(call, test_chooser(), patience, out_status, first_look);
  if (!ended) {
    CHECK(first_look >= before);
    CHECK(first_look <= Clock::now());
  } else {
    CHECK((first_look == Clock::time_point{} || first_look >= before));
  }
  return ended;
}

}  // namespace

TEST_CASE("shared segment: try_run finishes a call whose peers come in time",
          "[collectives][shm]") {
  const uint32_t ranks = GENERATE(1u, 2u, 3u);
  Wire wire;
  std::vector<Made> made = make_groups(wire, ranks, [](uint32_t) { return true; });
  for (const Made& m : made) REQUIRE(m.group != nullptr);
  std::mt19937 random(ranks + 100);
  for (uint32_t episode = 0; episode < 20; ++episode) {
    const size_t count = 1 + random() % 300;
    const bool in_place = episode % 2 == 1;
    std::vector<std::vector<float>> send(ranks), recv(ranks, std::vector<float>(count, -1.0f));
    for (uint32_t r = 0; r < ranks; ++r) send[r] = input_of(r, episode, count);
    const std::vector<float> want = sum_of(send);
    std::vector<int> finished(ranks, 0);
    std::vector<Status> statuses(ranks);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        const auto call =
            allreduce(send[r].data(), in_place ? send[r].data() : recv[r].data(), count);
        finished[r] = try_once(*made[r].group, call, kLongPatience, statuses[r]) ? 1 : 0;
      });
    }
    for (auto& t : threads) t.join();
    INFO(ranks << " ranks, episode " << episode << ", " << count << " floats");
    for (uint32_t r = 0; r < ranks; ++r) {
      REQUIRE(finished[r] == 1);
      CHECK(statuses[r].ok());
      CHECK((in_place ? send[r] : recv[r]) == want);
    }
  }
}

TEST_CASE(
    "shared segment: one thread drives two ranks, a rank whose peer is late gives up and "
    "run() finishes its call",
    "[collectives][shm]") {
  Wire wire;
  std::vector<Made> made = make_groups(wire, 2, [](uint32_t) { return true; });
  for (const Made& m : made) REQUIRE(m.group != nullptr);
  std::mt19937 random(7);
  for (uint32_t episode = 0; episode < 16; ++episode) {
    const size_t count = 1 + random() % 4096;  // up to the segment's 16 KiB
    const uint32_t first = episode % 2;        // who comes first alternates
    const uint32_t second = 1 - first;
    std::vector<std::vector<float>> send{input_of(0, episode, count), input_of(1, episode, count)};
    std::vector<std::vector<float>> recv(2, std::vector<float>(count, -1.0f));
    const std::vector<float> want = sum_of(send);
    auto call_of = [&](uint32_t r) { return allreduce(send[r].data(), recv[r].data(), count); };
    INFO("episode " << episode << ", " << count << " floats, rank " << first << " first");
    Status status;
    // Its peer has not come: no wait, not finished, input published.
    CHECK_FALSE(try_once(*made[first].group, call_of(first), kNoPatience, status));
    // The peer comes on the same thread and finishes at once.
    REQUIRE(try_once(*made[second].group, call_of(second), kNoPatience, status));
    CHECK(status.ok());
    CHECK(recv[second] == want);
    // The first rank's episode goes on where it stopped.
    const Status rest =
        run_episode(*made[first].group, call_of(first), Deadline::after_ms(10000, nullptr),
                    [] { return Status::failure(HAL_ERROR_INTERNAL, "no"); });
    CHECK(rest.ok());
    CHECK(recv[first] == want);
  }
  // A mismatch met inline is every rank's verdict, and the ranks stay in step.
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  Status status;
  CHECK_FALSE(try_once(*made[0].group, allreduce(a.data(), a.data(), 4), kNoPatience, status));
  REQUIRE(try_once(*made[1].group, allreduce(b.data(), b.data(), 8), kNoPatience, status));
  CHECK(status.result == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK(run_episode(*made[0].group, allreduce(a.data(), a.data(), 4),
                    Deadline::after_ms(10000, nullptr), [] { return Status{}; })
            .result == HAL_ERROR_ARGUMENT_MISMATCH);
  CHECK_FALSE(try_once(*made[0].group, allreduce(a.data(), a.data(), 4), kNoPatience, status));
  REQUIRE(try_once(*made[1].group, allreduce(b.data(), b.data(), 4), kLongPatience, status));
  CHECK(status.ok());
  CHECK(b[0] == 3.0f);
}

TEST_CASE(
    "shared segment: a call left open by try_run meets its deadline, an abort and a broken peer",
    "[collectives][shm]") {
  const hal_result_t expected =
      GENERATE(HAL_ERROR_TIMEOUT, HAL_ERROR_INVALID_STATE, HAL_ERROR_REMOTE);
  Wire wire;
  std::vector<Made> made = make_groups(wire, 2, [](uint32_t) { return true; });
  for (const Made& m : made) REQUIRE(m.group != nullptr);
  std::vector<float> a(4, 1.0f);
  Status status;
  const auto call = allreduce(a.data(), a.data(), a.size());
  // Rank 1 never comes: try_run returns within its patience.
  const auto tried = std::chrono::steady_clock::now();
  CHECK_FALSE(try_once(*made[0].group, call, std::chrono::milliseconds(5), status));
  CHECK(std::chrono::steady_clock::now() - tried < std::chrono::seconds(10));
  std::atomic<bool> aborted{expected == HAL_ERROR_INVALID_STATE};
  if (expected == HAL_ERROR_REMOTE) made[1].group->fail();
  const uint32_t timeout_ms = expected == HAL_ERROR_TIMEOUT ? 50 : 60000;
  const auto start = std::chrono::steady_clock::now();
  const Status rest = run_episode(*made[0].group, call, Deadline::after_ms(timeout_ms, &aborted),
                                  [] { return Status{}; });
  CHECK(rest.result == expected);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  // Its failure broke the segment for the peer. The peer, coming late,
  // still finishes the episode whose input rank 0 had published (with the
  // right sum), but the call after that fails at once.
  if (expected != HAL_ERROR_REMOTE) {
    std::vector<float> b(4, 2.0f);
    const auto peer_call = allreduce(b.data(), b.data(), b.size());
    REQUIRE(try_once(*made[1].group, peer_call, std::chrono::milliseconds(1), status));
    CHECK(status.ok());
    CHECK(b == std::vector<float>(4, 3.0f));
    CHECK_FALSE(try_once(*made[1].group, peer_call, std::chrono::milliseconds(1), status));
    CHECK(run_episode(*made[1].group, peer_call, Deadline::after_ms(60000, nullptr), [] {
            return Status{};
          }).result == HAL_ERROR_REMOTE);
  }
}

TEST_CASE("shared segment: an invitation rewritten on the wire to an impostor is refused",
          "[collectives][shm]") {
  // The attacker: its own hand-over socket that passes a descriptor of its
  // making (an unsealed memory file of the right size), substituted for rank
  // 0's invitation (name and token) on the wire.
  std::string why;
  auto impostor = hal::collective::SegmentHost::open(why);
  REQUIRE(impostor != nullptr);
  const int forged = memfd_create("forged", MFD_CLOEXEC);
  REQUIRE(forged >= 0);
  REQUIRE(ftruncate(forged, 64 << 20) == 0);
  const SegmentInvitation fake = impostor->invitation();
  std::atomic<bool> stop{false};
  std::thread serving([&] {
    // Threads of this process are the ranks here: the impostor's pid is theirs.
    const std::vector<pid_t> pids = {getpid(), getpid()};
    std::string ignored;
    impostor->serve(
        forged, pids, Deadline::after_ms(20000, &stop), [](uint32_t) { return false; }, ignored);
  });
  Wire wire;
  wire.tamper = [&](uint32_t from, std::vector<uint8_t>& message) {
    if (from == 0 && message.size() == sizeof(SegmentInvitation) &&
        std::memcmp(message.data(), "hal-comm-", 9) == 0) {
      std::memcpy(message.data(), &fake, sizeof fake);
    }
  };
  // Rank 0 waits half of the 2 s for rank 1 to fetch its segment, in vain.
  std::vector<Made> made = make_groups(
      wire, 2, [](uint32_t) { return true; }, 2000);
  stop.store(true);
  serving.join();
  close(forged);
  for (const Made& m : made) {
    CHECK(m.status.ok());
    CHECK(m.group == nullptr);  // nobody shares: rank 1 refused what it was handed
  }
  CHECK_THAT(made[1].reason, Catch::Contains("not sealed"));
  REQUIRE(!wire.socket_name.empty());
  CHECK(!socket_bound(wire.socket_name));  // rank 0's socket is gone too
}

// Episodes alternate between two sets of each rank's signature, counts and
// slot, so a rank publishes call e + 1 while a slower peer still reads e. A
// rank that reused a set too early (or read the wrong one) would hand a peer
// the next call's bytes or counts. Here the ranks run hundreds of calls back
// to back, each with its own seeded random data and uneven counts (some
// zero), one rank now and then held back so the others run ahead, and every
// call's result is checked against its own reference.
TEST_CASE("shared segment: ranks running a call ahead never see the next call's data",
          "[collectives][shm]") {
  const uint32_t ranks = GENERATE(2u, 3u);
  Wire wire;
  std::vector<Made> made = make_groups(wire, ranks, [](uint32_t) { return true; });
  for (const Made& m : made) REQUIRE(m.group != nullptr);
  constexpr uint32_t kCalls = 400;
  // counts[c][from][to], every call's; the data is a function of (c, from, to, i).
  std::mt19937 random(1234 + ranks);
  std::vector<std::vector<std::vector<size_t>>> counts(
      kCalls, std::vector<std::vector<size_t>>(ranks, std::vector<size_t>(ranks)));
  for (auto& call : counts) {
    for (auto& row : call) {
      for (size_t& c : row) c = random() % 4 == 0 ? 0 : random() % 700;
    }
  }
  auto value = [](uint32_t c, uint32_t from, uint32_t to, size_t i) {
    return static_cast<float>((c * 131 + from * 17 + to * 7 + i) % 1021);
  };
  std::vector<std::string> failures(ranks);
  std::vector<std::thread> threads;
  for (uint32_t me = 0; me < ranks; ++me) {
    threads.emplace_back([&, me] {
      std::mt19937 pause(me);
      for (uint32_t c = 0; c < kCalls && failures[me].empty(); ++c) {
        // A rank held back for a moment: the others run ahead into c + 1.
        if (pause() % 8 == me) std::this_thread::sleep_for(std::chrono::microseconds(50));
        const Deadline deadline = Deadline::after_ms(10000, nullptr);
        auto leave = [] {
          return Status::failure(HAL_ERROR_INTERNAL, "this call should not leave the segment");
        };
        if (c % 3 == 2) {
          // An allreduce between the alltoallvs: its inputs share the sets.
          std::vector<float> send(1 + c % 97), recv(send.size(), -1.0f);
          for (size_t i = 0; i < send.size(); ++i) send[i] = value(c, me, 0, i);
          const Status s = run_episode(
              *made[me].group, allreduce(send.data(), recv.data(), send.size()), deadline, leave);
          for (size_t i = 0; i < send.size() && s.ok(); ++i) {
            float want = 0;
            for (uint32_t r = 0; r < ranks; ++r) want += value(c, r, 0, i);
            if (recv[i] != want) failures[me] = "allreduce " + std::to_string(c) + " wrong";
          }
          if (!s.ok()) failures[me] = s.message;
          continue;
        }
        std::vector<size_t> sc(ranks), sd(ranks), rc(ranks), rd(ranks);
        size_t send_total = 0, recv_total = 0;
        for (uint32_t r = 0; r < ranks; ++r) {
          sc[r] = counts[c][me][r];
          rc[r] = counts[c][r][me];
          sd[r] = send_total;
          rd[r] = recv_total + 1;  // a gap of one element before each block
          send_total += sc[r];
          recv_total += rc[r] + 1;
        }
        std::vector<float> send(send_total), recv(recv_total + 1, -1.0f);
        for (uint32_t r = 0; r < ranks; ++r) {
          for (size_t i = 0; i < sc[r]; ++i) send[sd[r] + i] = value(c, me, r, i);
        }
        const hal_alltoallv_layout_t layout{send.data(), recv.data(), sc.data(),
                                            sd.data(),   rc.data(),   rd.data()};
        const hal_collective_call_t call{
            HAL_COLLECTIVE_ALLTOALLV, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, &layout, nullptr, ranks};
        if (const Status s = run_episode(*made[me].group, call, deadline, leave); !s.ok()) {
          failures[me] = s.message;
          break;
        }
        for (uint32_t from = 0; from < ranks; ++from) {
          if (recv[rd[from] - 1] != -1.0f)
            failures[me] = "a gap written in call " + std::to_string(c);
          for (size_t i = 0; i < rc[from]; ++i) {
            if (recv[rd[from] + i] != value(c, from, me, i)) {
              failures[me] = "alltoallv " + std::to_string(c) + ": rank " + std::to_string(from) +
                             "'s element " + std::to_string(i) + " wrong";
              break;
            }
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    CHECK(failures[r].empty());
    if (!failures[r].empty()) WARN(failures[r]);
  }
}

// An alltoallv larger than a slot: where every rank may read every peer's
// memory (in one process it always may), each rank reads its blocks out of
// its peers' send buffers and the call never leaves the segment; where a
// rank said HAL_COMM_CMA=0, or the probe was refused (a fault standing in
// for the kernel's EPERM), every rank says why and the same calls go over
// the transport. Seeded uneven counts (some zero, blocks up to 80 KB, every
// fourth call small enough for the slots), each call's data its own, gaps
// between the receive blocks that must stay untouched; the reference is a
// function of (call, sender, receiver, element).
TEST_CASE(
    "shared segment: alltoallvs larger than a slot match a reference, read across "
    "processes or over the transport",
    "[collectives][shm][cma]") {
  const uint32_t ranks = GENERATE(2u, 3u);
  // 0: cross memory; 1: the last rank set HAL_COMM_CMA=0; 2: rank 1 refused reading rank 0.
  const int mode = GENERATE(0, 1, 2);
  INFO(ranks << " ranks, mode " << mode);
  Wire wire;
  std::vector<Made> made = make_groups(
      wire, ranks, [](uint32_t) { return true; }, 10000,
      [&](uint32_t r) {
        hal::collective::CrossMemoryOptions options;
        options.wanted = !(mode == 1 && r == ranks - 1);
        if (mode == 2) {
          options.refuse = [](uint32_t self, uint32_t peer) {
            return self == 1 && peer == 0 ? EPERM : 0;
          };
        }
        return options;
      });
  for (const Made& m : made) {
    REQUIRE(m.group != nullptr);
    CHECK(m.group->cross_memory() == (mode == 0));
    if (mode == 1) {
      CHECK(m.group->cross_memory_reason() ==
            "rank " + std::to_string(ranks - 1) + " set HAL_COMM_CMA=0");
    }
    if (mode == 2) {
      CHECK_THAT(m.group->cross_memory_reason(),
                 Catch::Contains("rank 1 may not read rank 0's memory") &&
                     Catch::Contains(std::strerror(EPERM)));
    }
  }
  constexpr uint32_t kCalls = 24;
  std::mt19937 random(77 + ranks * 3 + static_cast<uint32_t>(mode));
  std::vector<std::vector<std::vector<size_t>>> counts(
      kCalls, std::vector<std::vector<size_t>>(ranks, std::vector<size_t>(ranks)));
  std::vector<bool> large(kCalls, false);
  for (uint32_t c = 0; c < kCalls; ++c) {
    const size_t most = c % 4 == 3 ? 700 : 20000;
    size_t largest = 0;
    for (auto& row : counts[c]) {
      size_t total = 0;
      for (size_t& n : row) {
        n = random() % 4 == 0 ? 0 : random() % most;
        total += n;
      }
      largest = std::max(largest, total);
    }
    large[c] = largest * sizeof(float) > hal::collective::limits::kSegmentAlltoallvBytes;
  }
  auto value = [](uint32_t c, uint32_t from, uint32_t to, size_t i) {
    return static_cast<float>((c * 131 + from * 17 + to * 7 + i) % 1021);
  };
  std::vector<std::string> failures(ranks);
  std::vector<uint32_t> left(ranks, 0);
  std::vector<std::thread> threads;
  for (uint32_t me = 0; me < ranks; ++me) {
    threads.emplace_back([&, me] {
      ThreadTransport transport(wire, me, ranks);
      hal::collective::Chooser chooser = test_chooser();
      chooser.means.ranks = ranks;
      chooser.means.cross_memory = made[me].group->cross_memory();
      std::vector<uint8_t> scratch;
      for (uint32_t c = 0; c < kCalls && failures[me].empty(); ++c) {
        std::vector<size_t> sc(ranks), sd(ranks), rc(ranks), rd(ranks);
        size_t send_total = 0, recv_total = 0;
        for (uint32_t r = 0; r < ranks; ++r) {
          sc[r] = counts[c][me][r];
          rc[r] = counts[c][r][me];
          sd[r] = send_total;
          rd[r] = recv_total + 1;  // a gap of one element before each block
          send_total += sc[r];
          recv_total += rc[r] + 1;
        }
        std::vector<float> send(send_total), recv(recv_total + 1, -1.0f);
        for (uint32_t r = 0; r < ranks; ++r) {
          for (size_t i = 0; i < sc[r]; ++i) send[sd[r] + i] = value(c, me, r, i);
        }
        const hal_alltoallv_layout_t layout{send.data(), recv.data(), sc.data(),
                                            sd.data(),   rc.data(),   rd.data()};
        const hal_collective_call_t call{
            HAL_COLLECTIVE_ALLTOALLV, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, &layout, nullptr, ranks};
        const Deadline deadline = Deadline::after_ms(20000, nullptr);
        const Status s = made[me].group->run(
            call, deadline, chooser, [&](const hal::collective::DecidedPath& decided) {
              ++left[me];
              return hal::collective::run_p2p(transport, std::span(&call, 1), deadline, scratch,
                                              chooser, &decided);
            });
        if (!s.ok()) {
          failures[me] = "call " + std::to_string(c) + ": " + s.message;
          break;
        }
        // The whole receive buffer against the reference, gaps included.
        for (uint32_t from = 0; from < ranks && failures[me].empty(); ++from) {
          if (recv[rd[from] - 1] != -1.0f) {
            failures[me] = "a gap written in call " + std::to_string(c);
          }
          for (size_t i = 0; i < rc[from]; ++i) {
            if (recv[rd[from] + i] != value(c, from, me, i)) {
              failures[me] = "call " + std::to_string(c) + ": rank " + std::to_string(from) +
                             "'s element " + std::to_string(i) + " wrong";
              break;
            }
          }
        }
        if (recv.back() != -1.0f)
          failures[me] = "written past the end in call " + std::to_string(c);
      }
    });
  }
  for (auto& t : threads) t.join();
  const uint32_t large_calls = static_cast<uint32_t>(std::count(large.begin(), large.end(), true));
  REQUIRE(large_calls >= kCalls / 2);
  REQUIRE(large_calls < kCalls);
  for (uint32_t r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    CHECK(failures[r].empty());
    if (!failures[r].empty()) WARN(failures[r]);
    // Across processes nothing leaves the segment; without, every large call does.
    CHECK(left[r] == (mode == 0 ? 0u : large_calls));
  }
}

// What a cross-memory alltoallv refuses, writing nothing: counts on which the
// ranks disagree (every rank fails alike, and the next call works), and a
// send buffer its owner's process cannot give (a rank that publishes an
// address with nothing readable behind it: its peer's read fails, and both
// fail with a clear error instead of waiting).
TEST_CASE(
    "shared segment: a cross-memory alltoallv refuses disagreeing counts and an unreadable "
    "send buffer, writing nothing",
    "[collectives][shm][cma]") {
  Wire wire;
  std::vector<Made> made = make_groups(wire, 2, [](uint32_t) { return true; });
  for (const Made& m : made) {
    REQUIRE(m.group != nullptr);
    REQUIRE(m.group->cross_memory());
  }
  constexpr size_t kBlock = 20000;  // 80 KB: over a slot
  struct Side {
    std::vector<size_t> sc, sd, rc, rd;
    std::vector<float> send, recv;
    hal_alltoallv_layout_t layout;
  };
  // Rank r sends kBlock to its peer and |self| to itself; it expects
  // |expects| from its peer.
  auto side = [](uint32_t r, size_t self, size_t expects) {
    Side s;
    const uint32_t peer = 1 - r;
    s.sc = {0, 0};
    s.rc = {0, 0};
    s.sc[peer] = kBlock;
    s.sc[r] = self;
    s.rc[peer] = expects;
    s.rc[r] = self;
    s.sd = {0, kBlock};
    s.rd = {0, kBlock};
    s.send.assign(2 * kBlock, static_cast<float>(r + 1));
    s.recv.assign(2 * kBlock, -1.0f);
    return s;
  };
  auto run_sides = [&](std::vector<Side>& sides) {
    std::vector<Status> statuses(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r) {
      Side& s = sides[r];
      s.layout = {s.send.data(), s.recv.data(), s.sc.data(), s.sd.data(), s.rc.data(), s.rd.data()};
      threads.emplace_back([&, r] {
        const hal_collective_call_t call{HAL_COLLECTIVE_ALLTOALLV,
                                         HAL_DTYPE_F32,
                                         HAL_REDUCE_SUM,
                                         0,
                                         &sides[r].layout,
                                         nullptr,
                                         2};
        hal::collective::Chooser chooser = test_chooser();
        chooser.means.cross_memory = true;
        statuses[r] = made[r].group->run(
            call, Deadline::after_ms(10000, nullptr), chooser,
            [](const hal::collective::DecidedPath&) {
              return Status::failure(HAL_ERROR_INTERNAL, "this call should not leave the segment");
            });
      });
    }
    for (auto& t : threads) t.join();
    return statuses;
  };
  auto untouched = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return x == -1.0f; });
  };

  SECTION("counts that disagree: every rank fails alike, nothing written, the next call works") {
    std::vector<Side> sides{side(0, 5, kBlock - 1), side(1, 5, kBlock)};
    const auto statuses = run_sides(sides);
    for (uint32_t r = 0; r < 2; ++r) {
      INFO("rank " << r << ": " << statuses[r].message);
      CHECK(statuses[r].result == HAL_ERROR_ARGUMENT_MISMATCH);
      CHECK_THAT(statuses[r].message, Catch::Contains("rank 1 sends 20000 elements to rank 0"));
      CHECK(untouched(sides[r].recv));
    }
    std::vector<Side> good{side(0, 5, kBlock), side(1, 5, kBlock)};
    const auto again = run_sides(good);
    for (uint32_t r = 0; r < 2; ++r) {
      CHECK(again[r].ok());
      CHECK(std::count(good[r].recv.begin(), good[r].recv.end(), static_cast<float>(2 - r)) ==
            static_cast<long>(kBlock));
    }
  }
  SECTION("a send buffer with nothing readable behind it: a clear error on both ranks") {
    const size_t bytes = 2 * kBlock * sizeof(float);
    void* hole = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(hole != MAP_FAILED);
    std::vector<Side> sides{side(0, 0, kBlock), side(1, 0, kBlock)};
    std::vector<Status> statuses(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r) {
      Side& s = sides[r];
      s.layout = {r == 1 ? hole : s.send.data(),
                  s.recv.data(),
                  s.sc.data(),
                  s.sd.data(),
                  s.rc.data(),
                  s.rd.data()};
      threads.emplace_back([&, r] {
        const hal_collective_call_t call{HAL_COLLECTIVE_ALLTOALLV,
                                         HAL_DTYPE_F32,
                                         HAL_REDUCE_SUM,
                                         0,
                                         &sides[r].layout,
                                         nullptr,
                                         2};
        hal::collective::Chooser chooser = test_chooser();
        chooser.means.cross_memory = true;
        statuses[r] = made[r].group->run(call, Deadline::after_ms(10000, nullptr), chooser,
                                         [](const hal::collective::DecidedPath&) {
                                           return Status::failure(HAL_ERROR_INTERNAL, "left");
                                         });
      });
    }
    for (auto& t : threads) t.join();
    munmap(hole, bytes);
    INFO(statuses[0].message << " / " << statuses[1].message);
    CHECK(statuses[0].result == HAL_ERROR_REMOTE);
    CHECK_THAT(statuses[0].message, Catch::Contains("could not read 80000 bytes of rank 1's send "
                                                    "buffer") &&
                                        Catch::Contains(std::strerror(EFAULT)));
    CHECK(statuses[1].result == HAL_ERROR_REMOTE);
    CHECK(untouched(sides[0].recv));
  }
}

TEST_CASE(
    "shared segment: the doorbell wakes a sleeper in another process, and a ring without "
    "one changes nothing",
    "[collectives][shm]") {
  using hal::collective::ShmDoorbell;
  // A shared mapping, as the segment is: the sleeper is a forked process.
  void* mapping = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mapping != MAP_FAILED);
  auto* bell = new (mapping) ShmDoorbell{};
  auto* published = new (static_cast<uint8_t*>(mapping) + 64) std::atomic<uint32_t>{0};

  // Nobody asleep: no wake-up is counted (no system call is made).
  published->store(1);
  bell->ring();
  CHECK(bell->rings.load() == 0);

  // The child sleeps until rank "0" publishes 2, far longer than the test
  // should take: only the ring ends its sleep before the timeout.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    bool woken = false;
    while (published->load() != 2) {
      const uint32_t seen = bell->announce();
      if (published->load() != 2) {
        woken = bell->sleep(seen, std::chrono::seconds(10));
        if (!woken) _exit(1);  // timed out: the ring never came
      }
      bell->leave();
    }
    _exit(0);
  }
  // Ring once the child is asleep (or about to be: announce() came first).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (bell->sleepers.load() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(bell->sleepers.load() == 1);
  published->store(2);  // sequentially consistent, as ring() asks
  bell->ring();
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  CHECK(bell->rings.load() == 1);
  CHECK(bell->sleepers.load() == 0);
  munmap(mapping, 4096);
}

TEST_CASE("shared segment: a rank asleep waiting for a late peer gets its data, and its failure",
          "[collectives][shm]") {
  Wire wire;
  std::vector<Made> made = make_groups(wire, 2, [](uint32_t) { return true; });
  // Rank 1 comes 50 ms late, far past the polling (limits::kSegmentSpin):
  // rank 0 waits asleep on the segment's doorbell, and wakes for each of a
  // few calls with both ranks' inputs.
  static_assert(hal::collective::limits::kSegmentSpin < std::chrono::milliseconds(50));
  for (uint32_t episode = 0; episode < 3; ++episode) {
    std::vector<std::vector<float>> inputs{input_of(0, episode, 33), input_of(1, episode, 33)};
    std::vector<std::vector<float>> outputs(2, std::vector<float>(33, -1.0f));
    auto statuses = run_all(made, [&](uint32_t r) {
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return allreduce(inputs[r].data(), outputs[r].data(), 33);
    });
    CHECK(statuses[0].ok());
    CHECK(statuses[1].ok());
    CHECK(outputs[0] == sum_of(inputs));
    CHECK(outputs[1] == sum_of(inputs));
  }
  // Rank 0 asleep in a call with a long deadline; rank 1 fails instead of
  // coming: rank 0 fails with HAL_ERROR_REMOTE, not at its deadline.
  std::vector<float> a(8, 1.0f);
  Status alone;
  std::thread waiter([&] {
    alone = run_episode(*made[0].group, allreduce(a.data(), a.data(), 8),
                        Deadline::after_ms(60000, nullptr), [] { return Status{}; });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  made[1].group->fail();
  waiter.join();
  CHECK(alone.result == HAL_ERROR_REMOTE);
}
