// The shared segment's life and size cannot be broken from outside
// (collective/shm_handoff.cpp, shm_segment.cpp): a segment is an anonymous
// memory file, backed and sealed before it is mapped; nobody holding it can
// shrink or grow it; a descriptor that is not such a segment is refused
// before it is mapped; a segment that cannot be made sends every rank to
// the fallback with the reason, never into SIGBUS; the hand-over serves only
// the ranks; and a rank 0 killed during set-up leaves no name and no socket
// behind, and its peer returns.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "hal_collective/shm_handoff.hpp"
#include "hal_collective/shm_transport.hpp"
#include "setup_channels.hpp"

using coll_test::Meeting;
using coll_test::SocketSetup;
using coll_test::ThreadSetup;
using hal::collective::Channel;
using hal::collective::Deadline;
using hal::collective::fetch_segment;
using hal::collective::is_sealed_segment;
using hal::collective::make_sealed_segment;
using hal::collective::SegmentHost;
using hal::collective::SegmentInvitation;
using hal::collective::SegmentSeams;
using hal::collective::ShmTransport;
using hal::collective::Status;
using hal::collective::UniqueFd;

namespace {

constexpr size_t kBytes = 1 << 20;

// Sets the seams for one test and clears them after.
struct ScopedSeams {
  explicit ScopedSeams(SegmentSeams seams) {
    hal::collective::set_segment_seams_for_testing(std::move(seams));
  }
  ~ScopedSeams() { hal::collective::set_segment_seams_for_testing({}); }
};

struct Made {
  std::unique_ptr<ShmTransport> transport;
  Status status;
  std::string reason;
};

std::vector<Made> make_transports(uint32_t ranks, uint32_t timeout_ms = 20000) {
  Meeting meeting(ranks);
  std::vector<Made> made(ranks);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ThreadSetup setup(meeting, r, timeout_ms);
      made[r].transport = ShmTransport::create(setup, true, made[r].status, made[r].reason);
    });
  }
  for (auto& t : threads) t.join();
  return made;
}

// Every rank went without a segment, for a reason that says |why|, and the
// set-up itself did not fail (the plugin then falls back).
void check_all_fell_back(const std::vector<Made>& made, const std::string& why) {
  for (size_t r = 0; r < made.size(); ++r) {
    INFO("rank " << r << ": " << made[r].reason);
    CHECK(made[r].status.ok());
    CHECK(made[r].transport == nullptr);
    CHECK_FALSE(made[r].reason.empty());
  }
  CHECK_THAT(made[0].reason, Catch::Contains(why));
}

// A message of a whole ring each way between thread ranks 0 and 1: every
// page of both rings is written and read.
void exchange_a_ring_each_way(std::vector<Made>& made) {
  const size_t size = made[0].transport->ring_bytes() * 2 + 17;
  std::vector<std::vector<uint8_t>> out(2), in(2);
  for (uint32_t r = 0; r < 2; ++r) {
    out[r].assign(size, static_cast<uint8_t>(0x40 + r));
    in[r].assign(size, 0);
  }
  std::vector<Status> statuses(2);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ShmTransport& t = *made[r].transport;
      (void)t.post_send(1 - r, out[r].data(), size, 7, Channel::kCollective);
      (void)t.post_recv(1 - r, in[r].data(), size, 7, Channel::kCollective);
      statuses[r] = t.wait_all(Deadline::after_ms(20000, nullptr));
    });
  }
  for (auto& t : threads) t.join();
  CHECK(statuses[0].ok());
  CHECK(statuses[1].ok());
  CHECK(in[0] == out[1]);
  CHECK(in[1] == out[0]);
}

// Whether a Unix socket of this abstract name is still bound.
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

std::string link_of(const std::string& path) {
  char target[256] = {};
  const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

// Opens |fd| anew through /proc, as another process of the user could
// (through /proc/<pid>/fd): a descriptor of its own, not a copy of ours.
UniqueFd reopen(int fd) {
  return UniqueFd(open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC));
}

}  // namespace

TEST_CASE("shm hand-over: a segment is backed and sealed, no holder can change its size",
          "[collectives][shm_handoff]") {
  std::string why;
  UniqueFd segment = make_sealed_segment(kBytes, why);
  REQUIRE(segment.valid());
  CHECK(is_sealed_segment(segment.get(), kBytes, why));
  // No name in any file system: only its descriptors reach it.
  CHECK(link_of("/proc/self/fd/" + std::to_string(segment.get())) ==
        "/memfd:hal-comm-segment (deleted)");
  UniqueFd other = reopen(segment.get());
  REQUIRE(other.valid());
  CHECK(ftruncate(other.get(), 0) != 0);
  CHECK(errno == EPERM);
  CHECK(ftruncate(other.get(), kBytes / 2) != 0);
  CHECK(ftruncate(other.get(), 2 * kBytes) != 0);
  CHECK(fallocate(other.get(), 0, 0, 2 * kBytes) != 0);
  CHECK(fcntl(other.get(), F_ADD_SEALS, F_SEAL_WRITE) != 0);  // sealed against more seals
  struct stat info {};
  REQUIRE(fstat(segment.get(), &info) == 0);
  CHECK(info.st_size == static_cast<off_t>(kBytes));
  // Every page can be touched through two mappings: no SIGBUS anywhere.
  auto* a = static_cast<uint8_t*>(
      mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, segment.get(), 0));
  auto* b = static_cast<uint8_t*>(
      mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, other.get(), 0));
  REQUIRE(a != MAP_FAILED);
  REQUIRE(b != MAP_FAILED);
  for (size_t i = 0; i < kBytes; i += 4096) a[i] = static_cast<uint8_t>(i >> 12);
  bool same = true;
  for (size_t i = 0; i < kBytes; i += 4096) same &= b[i] == static_cast<uint8_t>(i >> 12);
  CHECK(same);
  munmap(a, kBytes);
  munmap(b, kBytes);
}

TEST_CASE("shm hand-over: a descriptor that is not such a segment is refused before mapping",
          "[collectives][shm_handoff]") {
  struct Forgery {
    const char* what;
    std::function<int()> make;
    const char* refusal;
  };
  auto memfd = [](unsigned flags, size_t bytes, bool back, int seals) {
    const int fd = memfd_create("forged", MFD_CLOEXEC | flags);
    if (fd < 0) return -1;
    if (bytes != 0 && (back ? fallocate(fd, 0, 0, static_cast<off_t>(bytes))
                            : ftruncate(fd, static_cast<off_t>(bytes))) != 0) {
      close(fd);
      return -1;
    }
    if (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  };
  const int all_seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  char file_template[] = "/tmp/hal-forged-XXXXXX";
  const Forgery forgeries[] = {
      {"an unsealable memory file", [&] { return memfd(0, kBytes, true, 0); }, "not sealed"},
      {"no seals yet", [&] { return memfd(MFD_ALLOW_SEALING, kBytes, true, 0); }, "not sealed"},
      {"sealed against shrinking only",
       [&] { return memfd(MFD_ALLOW_SEALING, kBytes, true, F_SEAL_SHRINK); }, "not sealed"},
      {"growable",
       [&] { return memfd(MFD_ALLOW_SEALING, kBytes, true, F_SEAL_SHRINK | F_SEAL_SEAL); },
       "not sealed"},
      {"smaller", [&] { return memfd(MFD_ALLOW_SEALING, kBytes - 4096, true, all_seals); },
       "bytes, not the"},
      {"larger", [&] { return memfd(MFD_ALLOW_SEALING, kBytes + 4096, true, all_seals); },
       "bytes, not the"},
      {"sparse (sized, never backed)",
       [&] { return memfd(MFD_ALLOW_SEALING, kBytes, false, all_seals); }, "not backed in full"},
      {"a hole punched after sealing",
       [&] {
         const int fd = memfd(MFD_ALLOW_SEALING, kBytes, true, all_seals);
         if (fd >= 0) fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8192, 4096);
         return fd;
       },
       "not backed in full"},
      {"a regular file of the right size",
       [&] {
         const int fd = mkstemp(file_template);
         if (fd >= 0) {
           unlink(file_template);
           if (ftruncate(fd, kBytes) != 0) return -1;
         }
         return fd;
       },
       "not a memory file"},
      {"a pipe",
       [] {
         int ends[2];
         if (pipe2(ends, O_CLOEXEC) != 0) return -1;
         close(ends[1]);
         return ends[0];
       },
       "not a memory file"},
      {"/dev/zero", [] { return open("/dev/zero", O_RDWR | O_CLOEXEC); }, "not a memory file"},
  };
  for (const Forgery& forgery : forgeries) {
    INFO(forgery.what);
    UniqueFd fd(forgery.make());
    REQUIRE(fd.valid());
    std::string why;
    CHECK_FALSE(is_sealed_segment(fd.get(), kBytes, why));
    CHECK_THAT(why, Catch::Contains(forgery.refusal));
  }
  std::string why;
  UniqueFd genuine = make_sealed_segment(kBytes, why);
  CHECK(is_sealed_segment(genuine.get(), kBytes, why));
}

TEST_CASE("shm hand-over: a forged descriptor passed at set-up sends every rank to the fallback",
          "[collectives][shm_handoff]") {
  const uint32_t ranks = GENERATE(2u, 3u);
  // The segment's size for this many ranks, from a genuine set-up.
  size_t size = 0;
  {
    ScopedSeams learn({0,
                       [&](int fd) {
                         struct stat info {};
                         if (fstat(fd, &info) == 0) size = static_cast<size_t>(info.st_size);
                       },
                       nullptr});
    REQUIRE(make_transports(ranks)[0].transport != nullptr);
  }
  REQUIRE(size != 0);
  // Of the agreed size and sealed, but never backed: its pages could fail
  // any rank that touched them later.
  UniqueFd forged(memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(ftruncate(forged.get(), static_cast<off_t>(size)) == 0);
  REQUIRE(fcntl(forged.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
  ScopedSeams pass_forgery({0, nullptr, [&](int) { return forged.get(); }});
  std::vector<Made> made = make_transports(ranks);
  check_all_fell_back(made, "a rank could not map the segment");
  for (uint32_t r = 1; r < ranks; ++r) CHECK_THAT(made[r].reason, Catch::Contains("not backed"));
}

TEST_CASE("shm hand-over: a segment that cannot be backed sends every rank to the fallback",
          "[collectives][shm_handoff]") {
  // The machine has no memory for it (what a full /dev/shm did to the
  // named segment): fallocate's refusal, played by the seam.
  const int error = GENERATE(ENOMEM, ENOSPC);
  ScopedSeams no_memory({error, nullptr, nullptr});
  std::vector<Made> made = make_transports(3);
  check_all_fell_back(made, "could not be backed by memory");
  for (uint32_t r = 1; r < 3; ++r) CHECK(made[r].reason == "rank 0 could not make the segment");
}

TEST_CASE("shm hand-over: a file-size limit below the segment is a fallback, not SIGXFSZ",
          "[collectives][shm_handoff]") {
  // In a child: the limit is the process's. Past it the kernel would end
  // the process with SIGXFSZ (its default action).
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const rlimit small{64 << 10, 64 << 10};
    if (setrlimit(RLIMIT_FSIZE, &small) != 0) _exit(2);
    std::vector<Made> made = make_transports(2);
    const bool fell_back = made[0].status.ok() && made[1].status.ok() && !made[0].transport &&
                           !made[1].transport &&
                           made[0].reason.find("file-size limit") != std::string::npos;
    _exit(fell_back ? 0 : 1);
  }
  int code = -1;
  REQUIRE(waitpid(child, &code, 0) == child);
  CHECK(WIFEXITED(code));
  CHECK(WEXITSTATUS(code) == 0);
}

TEST_CASE("shm hand-over: truncating or growing the segment during set-up fails, the ranks go on",
          "[collectives][shm_handoff]") {
  // Another process of the user reaching the segment (through
  // /proc/<pid>/fd) between its making and its hand-over: here through
  // this process's /proc, which gives the same fresh open file.
  std::vector<int> attempts;
  ScopedSeams tamper({0,
                      [&](int fd) {
                        UniqueFd other = reopen(fd);
                        attempts.push_back(other.valid() ? 0 : errno);
                        attempts.push_back(ftruncate(other.get(), 0) == 0 ? 0 : errno);
                        attempts.push_back(ftruncate(other.get(), 4096) == 0 ? 0 : errno);
                        attempts.push_back(ftruncate(other.get(), 1ll << 40) == 0 ? 0 : errno);
                      },
                      nullptr});
  std::vector<Made> made = make_transports(2);
  REQUIRE(attempts.size() == 4);
  CHECK(attempts[0] == 0);      // it could open it...
  CHECK(attempts[1] == EPERM);  // ...but not shrink it
  CHECK(attempts[2] == EPERM);
  CHECK(attempts[3] == EPERM);  // nor grow it
  REQUIRE(made[0].transport != nullptr);
  REQUIRE(made[1].transport != nullptr);
  exchange_a_ring_each_way(made);
}

TEST_CASE("shm hand-over: a hole punched in the segment during set-up is seen, all fall back",
          "[collectives][shm_handoff]") {
  // Seals do not forbid punching a hole (only a write seal would): the
  // peers see the segment no longer backed in full and refuse it.
  ScopedSeams punch({0,
                     [](int fd) {
                       UniqueFd other = reopen(fd);
                       fallocate(other.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096,
                                 4096);
                     },
                     nullptr});
  std::vector<Made> made = make_transports(2);
  check_all_fell_back(made, "a rank could not map the segment");
  CHECK_THAT(made[1].reason, Catch::Contains("not backed in full"));
}

TEST_CASE("shm hand-over: only a rank's process with the token is served, only by rank 0",
          "[collectives][shm_handoff]") {
  std::string why;
  UniqueFd segment = make_sealed_segment(kBytes, why);
  REQUIRE(segment.valid());
  auto host = SegmentHost::open(why);
  REQUIRE(host != nullptr);
  const SegmentInvitation invitation = host->invitation();
  CHECK(socket_bound(invitation.socket_name));
  // Rank 1 is this process; rank 2 a process that does not exist here.
  const std::vector<pid_t> pids = {getpid(), getpid(), 1};
  std::atomic<bool> stop{false};
  std::string serve_why;
  bool served_all = false;
  std::thread serving([&] {
    served_all = host->serve(
        segment.get(), pids, Deadline::after_ms(20000, &stop), [](uint32_t) { return false; },
        serve_why);
  });
  const Deadline soon = Deadline::after_ms(3000, nullptr);
  // The wrong token: closed unanswered.
  SegmentInvitation wrong_token = invitation;
  wrong_token.token[5] ^= 1;
  std::string refused;
  CHECK_FALSE(fetch_segment(wrong_token, 1, getpid(), soon, refused).valid());
  CHECK_THAT(refused, Catch::Contains("without passing the segment"));
  // The right token, but claiming rank 2 from another process than rank 2's.
  CHECK_FALSE(fetch_segment(invitation, 2, getpid(), soon, refused).valid());
  // A rank of another job, or rank 0 itself: no such rank to serve.
  CHECK_FALSE(fetch_segment(invitation, 7, getpid(), soon, refused).valid());
  CHECK_FALSE(fetch_segment(invitation, 0, getpid(), soon, refused).valid());
  // A socket that is not rank 0's process (its pid says another): the token
  // is not sent to it.
  CHECK_FALSE(fetch_segment(invitation, 1, getpid() + 1, soon, refused).valid());
  CHECK_THAT(refused, Catch::Contains("does not belong to rank 0's process"));
  // A name that is not one of ours.
  SegmentInvitation elsewhere = invitation;
  std::snprintf(elsewhere.socket_name, sizeof elsewhere.socket_name, "%s", "some-socket");
  CHECK_FALSE(fetch_segment(elsewhere, 1, getpid(), soon, refused).valid());
  CHECK_THAT(refused, Catch::Contains("no segment socket of ours"));
  // Rank 1, as it should: served once, a working segment.
  UniqueFd received = fetch_segment(invitation, 1, getpid(), soon, refused);
  REQUIRE(received.valid());
  CHECK(is_sealed_segment(received.get(), kBytes, refused));
  // A second fetch as rank 1 gets nothing: each rank is served once.
  CHECK_FALSE(fetch_segment(invitation, 1, getpid(), soon, refused).valid());
  stop.store(true);
  serving.join();
  CHECK_FALSE(served_all);  // rank 2 never came
  CHECK_THAT(serve_why, Catch::Contains("aborted"));
  host.reset();
  CHECK_FALSE(socket_bound(invitation.socket_name));
}

TEST_CASE("shm hand-over: a rank 0 killed during set-up leaves nothing behind, its peer returns",
          "[collectives][shm_handoff]") {
  // Rank 0 is a child process that dies (SIGKILL) as it is about to pass the
  // segment: after its invitation went out, with the segment made and mapped.
  const bool at_hand_over = GENERATE(false, true);
  INFO((at_hand_over ? "killed at the hand-over" : "killed right after making the segment"));
  int sockets[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) == 0);
  int report[2];
  REQUIRE(pipe2(report, O_CLOEXEC) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(sockets[1]);
    close(report[0]);
    auto die = [&](int fd) {
      // What the segment is, as the kernel names it: a memory file without a
      // path anywhere (no /dev/shm entry to leave behind).
      const std::string link = link_of("/proc/self/fd/" + std::to_string(fd));
      (void)!write(report[1], link.data(), link.size());
      close(report[1]);
      raise(SIGKILL);
    };
    SegmentSeams seams;
    if (at_hand_over) {
      seams.passed = [&](int fd) {
        die(fd);
        return -1;
      };
    } else {
      seams.made = die;
    }
    hal::collective::set_segment_seams_for_testing(seams);
    SocketSetup setup(sockets[0], 0);
    Status status;
    std::string reason;
    ShmTransport::create(setup, true, status, reason);
    _exit(3);  // not reached
  }
  close(sockets[0]);
  close(report[1]);
  SocketSetup setup(sockets[1], 1, 60000);
  Status status;
  std::string reason;
  const auto start = std::chrono::steady_clock::now();
  auto transport = ShmTransport::create(setup, true, status, reason);
  const auto took = std::chrono::steady_clock::now() - start;
  close(sockets[1]);
  CHECK(transport == nullptr);
  CHECK(status.result == HAL_ERROR_REMOTE);  // its end of set-up closed with it
  CHECK(took < std::chrono::seconds(30));    // not the deadline
  int code = -1;
  REQUIRE(waitpid(child, &code, 0) == child);
  CHECK(WIFSIGNALED(code));
  char link[256] = {};
  const ssize_t n = read(report[0], link, sizeof link - 1);
  close(report[0]);
  CHECK(std::string(link, n > 0 ? static_cast<size_t>(n) : 0) ==
        "/memfd:hal-comm-segment (deleted)");
  // The invitation, if it came, named a socket that died with rank 0.
  if (at_hand_over) {
    REQUIRE(setup.seen.size() >= 2);
    const auto* invitation = reinterpret_cast<const SegmentInvitation*>(setup.seen[1].data());
    REQUIRE(setup.seen[1].size() == sizeof(SegmentInvitation));
    CHECK(std::string(invitation->socket_name).rfind("hal-comm-", 0) == 0);
    CHECK_FALSE(socket_bound(invitation->socket_name));
  }
}
