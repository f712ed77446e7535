#include "hal_collective/shm.hpp"

#include "hal_collective/reduce.hpp"
#include "hal_util/hmac.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <thread>

namespace hal::collective {

namespace {

// Set-up messages travel with this tag on the collective channel, before
// any call's.
constexpr uint32_t kSetupTag = 0x7e01;
constexpr size_t kIdentityBytes = 256;
constexpr size_t kNameBytes = 64;
constexpr char kNamePrefix[] = "/hal-comm-";
constexpr size_t kPage = 4096;

size_t round_up(size_t value, size_t unit) {
  return (value + unit - 1) / unit * unit;
}

// One rank's counters, each on its own cache line with its slot's signature.
// Counters only grow: episode e is published by storing e.
struct alignas(64) RankLineLayout {
  std::atomic<uint64_t> arrived{0};  // input and signature of episode `arrived` are in place
  std::atomic<uint64_t> done{0};     // it no longer reads anything of episode `done`
  std::atomic<uint32_t> signature{0};
};
struct alignas(64) HeaderLine {
  std::atomic<uint32_t> broken{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the segment's atomics are shared between processes: they must be lock-free");

size_t lines_bytes(uint32_t ranks) {
  return round_up(sizeof(HeaderLine) + sizeof(RankLineLayout) * ranks, kPage);
}
size_t segment_bytes(uint32_t ranks) {
  return lines_bytes(ranks) + ShmGroup::kMaxBytes * ranks;
}

// What must match for two ranks to share a segment: the same boot of the
// same machine, the same mount and IPC namespaces (the same /dev/shm), the
// same user; and the wish of each.
std::array<char, kIdentityBytes> host_identity(bool wanted) {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  auto namespace_of = [](const char* path) {
    char target[128] = {};
    const ssize_t n = readlink(path, target, sizeof target - 1);
    return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
  };
  std::array<char, kIdentityBytes> identity{};
  std::snprintf(identity.data(), identity.size(), "%s|%s|%s|%s|%u|%d", boot.c_str(), host,
                namespace_of("/proc/self/ns/mnt").c_str(),
                namespace_of("/proc/self/ns/ipc").c_str(), static_cast<unsigned>(geteuid()),
                wanted ? 1 : 0);
  return identity;
}

// Every rank's |bytes| from |mine| into |all| (rank r's at r * bytes).
Status all_gather(Transport& t, const void* mine, void* all, size_t bytes,
                  const Deadline& deadline) {
  auto* out = static_cast<uint8_t*>(all);
  std::memcpy(out + t.rank() * bytes, mine, bytes);
  for (uint32_t r = 0; r < t.ranks(); ++r) {
    if (r == t.rank()) continue;
    if (Status s = t.post_send(r, mine, bytes, kSetupTag, Channel::kCollective); !s.ok()) return s;
    if (Status s = t.post_recv(r, out + r * bytes, bytes, kSetupTag, Channel::kCollective);
        !s.ok()) {
      return s;
    }
  }
  return t.wait_all(deadline);
}

// A segment of |bytes| under a fresh random name, or "" (and why) when none
// could be made.
std::string create_segment(size_t bytes, void*& out_mapping, std::string& out_reason) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::array<uint8_t, 16> random{};
    if (!util::random_bytes(random)) {
      out_reason = "no random name for the segment (getrandom failed)";
      return {};
    }
    std::string name = kNamePrefix;
    for (uint8_t byte : random) {
      static const char kHex[] = "0123456789abcdef";
      name += kHex[byte >> 4];
      name += kHex[byte & 15];
    }
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;  // taken: another name
    if (fd < 0) {
      out_reason = std::string("shm_open failed: ") + std::strerror(errno);
      return {};
    }
    void* mapping = MAP_FAILED;
    if (fchmod(fd, 0600) == 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
      mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    }
    const int saved = errno;
    close(fd);
    if (mapping == MAP_FAILED) {
      shm_unlink(name.c_str());
      out_reason = std::string("the segment could not be sized or mapped: ") + std::strerror(saved);
      return {};
    }
    out_mapping = mapping;
    return name;
  }
  out_reason = "every random segment name was taken";
  return {};
}

// Opens what rank 0 named, if it is what rank 0 made: a name of ours, a
// regular file of this user that nobody else may open, of the size agreed.
void* open_segment(const char* name, size_t bytes, std::string& out_reason) {
  const size_t prefix = sizeof kNamePrefix - 1;
  const size_t length = strnlen(name, kNameBytes);
  bool well_formed = length == prefix + 32 && std::strncmp(name, kNamePrefix, prefix) == 0;
  for (size_t i = prefix; well_formed && i < length; ++i) {
    well_formed = std::strchr("0123456789abcdef", name[i]) != nullptr;
  }
  if (!well_formed) {
    out_reason = "rank 0 named no segment of ours";
    return nullptr;
  }
  const int fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    out_reason = std::string("shm_open of rank 0's segment failed: ") + std::strerror(errno);
    return nullptr;
  }
  struct stat info {};
  void* mapping = MAP_FAILED;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || info.st_uid != geteuid() ||
      (info.st_mode & 0777) != 0600 || static_cast<size_t>(info.st_size) != bytes) {
    out_reason = "rank 0's segment is not a private file of this user of the agreed size";
  } else {
    mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (mapping == MAP_FAILED) out_reason = std::string("mmap failed: ") + std::strerror(errno);
  }
  close(fd);
  return mapping == MAP_FAILED ? nullptr : mapping;
}

}  // namespace

struct ShmGroup::RankLine : RankLineLayout {};

std::unique_ptr<ShmGroup> ShmGroup::create(Transport& transport, bool wanted,
                                           const Deadline& deadline, Status& out_status,
                                           std::string& out_reason) {
  const uint32_t ranks = transport.ranks();
  const uint32_t rank = transport.rank();
  // 1. Who can share: all ranks on one host, in one namespace, all willing.
  const auto identity = host_identity(wanted);
  std::vector<char> identities(kIdentityBytes * ranks);
  if (out_status =
          all_gather(transport, identity.data(), identities.data(), kIdentityBytes, deadline);
      !out_status.ok()) {
    return nullptr;
  }
  bool same = ranks <= kMaxRanks;
  bool everyone_wants = true;
  // A peer's identity is bytes off the wire: only its first |length| are read,
  // and one without its terminator within the buffer matches nothing.
  const size_t mine = strnlen(identity.data(), kIdentityBytes);
  for (uint32_t r = 0; r < ranks; ++r) {
    const char* other = identities.data() + r * kIdentityBytes;
    const size_t length = strnlen(other, kIdentityBytes);
    everyone_wants &= length > 0 && length < kIdentityBytes && other[length - 1] == '1';
    // Equal up to the last character, the wish.
    same &= length == mine && std::memcmp(identity.data(), other, mine - 1) == 0;
  }
  if (!everyone_wants) {
    out_reason = "a rank has HAL_COMM_SHM=0";
    return nullptr;
  }
  if (!same) {
    out_reason = ranks > kMaxRanks ? "more ranks than the segment serves"
                                   : "the ranks are not all on one host, user and namespace";
    return nullptr;
  }
  // 2. Rank 0 makes the segment and names it; the others open it.
  const size_t bytes = segment_bytes(ranks);
  void* mapping = nullptr;
  std::array<char, kNameBytes> name{};
  if (rank == 0) {
    const std::string made = create_segment(bytes, mapping, out_reason);
    std::snprintf(name.data(), name.size(), "%s", made.c_str());
    if (mapping != nullptr) {
      new (mapping) HeaderLine{};
      auto* lines =
          reinterpret_cast<RankLineLayout*>(static_cast<uint8_t*>(mapping) + sizeof(HeaderLine));
      for (uint32_t r = 0; r < ranks; ++r) new (lines + r) RankLineLayout{};
    }
  }
  std::vector<char> names(kNameBytes * ranks);
  if (out_status = all_gather(transport, name.data(), names.data(), kNameBytes, deadline);
      !out_status.ok()) {
    if (mapping != nullptr) munmap(mapping, bytes);
    if (rank == 0 && name[0] != '\0') shm_unlink(name.data());
    return nullptr;
  }
  if (rank != 0) {
    const char* named = names.data();  // rank 0's
    if (named[0] == '\0') {
      out_reason = "rank 0 could not make the segment";
    } else {
      mapping = open_segment(named, bytes, out_reason);
    }
  }
  // 3. Everyone says whether it holds the segment; then the name goes.
  const char holds = mapping != nullptr ? 1 : 0;
  std::vector<char> held(ranks);
  out_status = all_gather(transport, &holds, held.data(), 1, deadline);
  if (rank == 0 && name[0] != '\0') shm_unlink(name.data());
  const bool all_hold = out_status.ok() && std::count(held.begin(), held.end(), 1) == ranks;
  if (!all_hold) {
    if (mapping != nullptr) munmap(mapping, bytes);
    if (out_status.ok() && out_reason.empty()) out_reason = "a rank could not open the segment";
    return nullptr;
  }
  return std::unique_ptr<ShmGroup>(new ShmGroup(mapping, bytes, rank, ranks));
}

ShmGroup::ShmGroup(void* mapping, size_t bytes, uint32_t rank, uint32_t ranks)
    : mapping_(mapping), bytes_(bytes), rank_(rank), ranks_(ranks) {}

ShmGroup::~ShmGroup() {
  munmap(mapping_, bytes_);
}

ShmGroup::RankLine& ShmGroup::line(uint32_t rank) const noexcept {
  return reinterpret_cast<RankLine*>(static_cast<uint8_t*>(mapping_) + sizeof(HeaderLine))[rank];
}
uint8_t* ShmGroup::input(uint32_t rank) const noexcept {
  return static_cast<uint8_t*>(mapping_) + lines_bytes(ranks_) + ShmGroup::kMaxBytes * rank;
}

void ShmGroup::fail() noexcept {
  static_cast<HeaderLine*>(mapping_)->broken.store(1, std::memory_order_release);
}

bool ShmGroup::handshakes(std::span<const hal_collective_call_t> calls) noexcept {
  return calls.size() == 1 && calls[0].kind != HAL_COLLECTIVE_SEND &&
         calls[0].kind != HAL_COLLECTIVE_RECV;
}

bool ShmGroup::serves_data(const hal_collective_call_t& call) const noexcept {
  return call.kind == HAL_COLLECTIVE_ALLREDUCE && call.count * dtype_size(call.dtype) <= kMaxBytes;
}

template <class Ready>
Status ShmGroup::wait_for(const Deadline& deadline, const char* what, Ready ready) {
  const auto& header = *static_cast<const HeaderLine*>(mapping_);
  bool broken = false;
  Status status = wait_until(deadline, what, [&] {
    if (ready()) return true;
    broken = header.broken.load(std::memory_order_acquire) != 0;
    return broken;
  });
  if (broken) {
    return Status::failure(HAL_ERROR_REMOTE,
                           "a peer process failed or aborted (it marked the shared segment)");
  }
  return status;
}

void ShmGroup::begin() noexcept {
  if (phase_ != Phase::kIdle) return;  // a try_run left this episode open
  ++episode_;
  phase_ = Phase::kWaitingForPrevious;
}

// Our slot is ours again once every rank is done with the last episode.
bool ShmGroup::previous_done() const noexcept {
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (line(r).done.load(std::memory_order_acquire) < episode_ - 1) return false;
  }
  return true;
}

void ShmGroup::post(const hal_collective_call_t& call) noexcept {
  RankLine& mine = line(rank_);
  mine.signature.store(call_signature(call), std::memory_order_relaxed);
  if (serves_data(call) && call.count != 0) {
    std::memcpy(input(rank_), call.send, call.count * dtype_size(call.dtype));
  }
  mine.arrived.store(episode_, std::memory_order_release);
  phase_ = Phase::kWaitingForArrivals;
}

bool ShmGroup::all_arrived() const noexcept {
  for (uint32_t r = 0; r < ranks_; ++r) {
    if (line(r).arrived.load(std::memory_order_acquire) < episode_) return false;
  }
  return true;
}

Status ShmGroup::check_signatures(const hal_collective_call_t& call) const {
  const uint32_t expected = line(0).signature.load(std::memory_order_relaxed);
  for (uint32_t r = 1; r < ranks_; ++r) {
    if (line(r).signature.load(std::memory_order_relaxed) != expected) {
      return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                             std::string("the ranks called ") + kind_name(call.kind) +
                                 " with different counts, dtypes, ops or roots");
    }
  }
  return {};
}

Status ShmGroup::handshake(const hal_collective_call_t& call, const Deadline& deadline) {
  begin();
  if (phase_ == Phase::kWaitingForPrevious) {
    if (Status s = wait_for(deadline, "waiting for the peers to finish the previous call",
                            [this] { return previous_done(); });
        !s.ok()) {
      return s;
    }
    post(call);
  }
  if (Status s = wait_for(deadline, "waiting for the other ranks to arrive",
                          [this] { return all_arrived(); });
      !s.ok()) {
    return s;
  }
  return check_signatures(call);
}

bool ShmGroup::try_run(const hal_collective_call_t& call, Clock::duration patience,
                       Status& out_status) {
  begin();
  // The clock is read once every kPollsPerClockRead polls: a poll costs a
  // few cache-line reads, a clock read about as much as all of them.
  constexpr uint32_t kPollsPerClockRead = 64;
  const auto give_up = Clock::now() + patience;
  for (uint32_t i = 1;; ++i) {
    if (phase_ == Phase::kWaitingForPrevious && previous_done()) post(call);
    if (phase_ == Phase::kWaitingForArrivals && all_arrived()) break;
    if (i % kPollsPerClockRead == 0) {
      if (Clock::now() > give_up) return false;
      std::this_thread::yield();  // on a small machine the peer may need this core
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  Status status = check_signatures(call);
  if (status.ok()) status = reduce(call);
  out_status = finish(std::move(status));
  return true;
}

// Every rank reduces all inputs, in rank order: identical bytes everywhere.
Status ShmGroup::reduce(const hal_collective_call_t& call) {
  const size_t count = call.count;
  if (count == 0) return {};
  if (ranks_ == 1) {
    std::memcpy(call.recv, input(0), count * dtype_size(call.dtype));
  } else {
    reduce_pair(call.recv, input(0), input(1), count, call.dtype, call.op);
    for (uint32_t r = 2; r < ranks_; ++r) {
      reduce_pair(call.recv, call.recv, input(r), count, call.dtype, call.op);
    }
  }
  if (call.op == HAL_REDUCE_AVG) finish_average(call.recv, count, call.dtype, ranks_);
  return {};
}

Status ShmGroup::finish(Status status) {
  phase_ = Phase::kIdle;
  // A mismatch is everyone's verdict and leaves the ranks in step; any other
  // failure leaves this rank behind, so its peers must stop waiting for it.
  if (!status.ok() && status.result != HAL_ERROR_ARGUMENT_MISMATCH) fail();
  line(rank_).done.store(episode_, std::memory_order_release);
  return status;
}

}  // namespace hal::collective
