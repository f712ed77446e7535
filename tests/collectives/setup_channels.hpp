// The set-up channels of the shared-segment tests: ranks that are threads
// of this process meeting in memory, and two processes over a socket pair.
// Each can watch (and a test can rewrite) what crosses it.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "hal_collective/shm_segment.hpp"

namespace coll_test {

using hal::collective::Deadline;
using hal::collective::SetupChannel;
using hal::collective::Status;

// Rewrites rank |from|'s bytes of one all_gather before the others see them.
using Tamper = std::function<void(uint32_t from, std::vector<uint8_t>& bytes)>;

// Where thread ranks meet to set up: round k of all_gather completes once
// every rank has put its bytes in.
struct Meeting {
  explicit Meeting(uint32_t n) : ranks(n) {}
  const uint32_t ranks;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<uint64_t, std::vector<std::vector<uint8_t>>> rounds;
  std::map<uint64_t, uint32_t> arrived;
  Tamper tamper;
};

class ThreadSetup final : public SetupChannel {
 public:
  ThreadSetup(Meeting& meeting, uint32_t rank, uint32_t timeout_ms = 20000)
      : meeting_(meeting), rank_(rank), deadline_(Deadline::after_ms(timeout_ms, nullptr)) {}
  uint32_t rank() const override { return rank_; }
  uint32_t ranks() const override { return meeting_.ranks; }
  Deadline deadline() const override { return deadline_; }
  Status all_gather(const void* mine, void* all, size_t bytes) override {
    const uint64_t round = round_++;
    std::unique_lock lock(meeting_.mutex);
    auto& slots = meeting_.rounds[round];
    slots.resize(meeting_.ranks);
    slots[rank_].assign(static_cast<const uint8_t*>(mine),
                        static_cast<const uint8_t*>(mine) + bytes);
    if (meeting_.tamper) meeting_.tamper(rank_, slots[rank_]);
    ++meeting_.arrived[round];
    meeting_.changed.notify_all();
    if (!meeting_.changed.wait_until(lock, deadline_.at,
                                     [&] { return meeting_.arrived[round] == meeting_.ranks; })) {
      return Status::failure(HAL_ERROR_TIMEOUT, "a rank never came to set-up");
    }
    for (uint32_t r = 0; r < meeting_.ranks; ++r) {
      if (slots[r].size() != bytes) return Status::failure(HAL_ERROR_ARGUMENT_MISMATCH, "size");
      std::memcpy(static_cast<uint8_t*>(all) + r * bytes, slots[r].data(), bytes);
    }
    return {};
  }

 private:
  Meeting& meeting_;
  uint32_t rank_;
  Deadline deadline_;
  uint64_t round_ = 0;
};

// Two processes' set-up over a socket pair; |seen| keeps every round's
// bytes of the peer.
class SocketSetup final : public SetupChannel {
 public:
  SocketSetup(int fd, uint32_t rank, uint32_t timeout_ms = 20000)
      : fd_(fd), rank_(rank), deadline_(Deadline::after_ms(timeout_ms, nullptr)) {}
  uint32_t rank() const override { return rank_; }
  uint32_t ranks() const override { return 2; }
  Deadline deadline() const override { return deadline_; }
  Status all_gather(const void* mine, void* all, size_t bytes) override {
    auto* out = static_cast<uint8_t*>(all);
    std::memcpy(out + rank_ * bytes, mine, bytes);
    // send with MSG_NOSIGNAL, as HAL's own set-up does: a peer that died (the kill tests)
    // is HAL_ERROR_REMOTE here, not a SIGPIPE that kills the test (seen under TSan).
    if (send(fd_, mine, bytes, MSG_NOSIGNAL) != static_cast<ssize_t>(bytes)) {
      return Status::failure(HAL_ERROR_REMOTE, "write");
    }
    size_t got = 0;
    uint8_t* theirs = out + (1 - rank_) * bytes;
    while (got < bytes) {
      const ssize_t n = read(fd_, theirs + got, bytes - got);
      if (n <= 0) return Status::failure(HAL_ERROR_REMOTE, "the peer's end of set-up closed");
      got += static_cast<size_t>(n);
    }
    seen.emplace_back(theirs, theirs + bytes);
    return {};
  }
  std::vector<std::vector<uint8_t>> seen;

 private:
  int fd_;
  uint32_t rank_;
  Deadline deadline_;
};

}  // namespace coll_test
