#include "hal_collective/shm_doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace hal::collective {

namespace {

// A futex in a MAP_SHARED mapping is keyed by the page it lies in, not by
// the address: no FUTEX_PRIVATE_FLAG, so processes that map the segment at
// different addresses meet on it.
long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) noexcept {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

// The store the sleepers wait for, then this fence, then the load of
// |sleepers|; a sleeper increments |sleepers|, then a fence, then looks at
// its condition. The two fences are ordered in the total order of
// sequentially consistent operations: either the publisher sees the
// sleeper and rings, or the sleeper sees the store and does not sleep.
void ShmDoorbell::ring() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_relaxed) == 0) return;
  rings.fetch_add(1, std::memory_order_seq_cst);
  futex(&rings, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t ShmDoorbell::announce() noexcept {
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return rings.load(std::memory_order_acquire);
}

bool ShmDoorbell::sleep(uint32_t seen, std::chrono::nanoseconds timeout) noexcept {
  if (timeout.count() <= 0) return false;
  const timespec relative{static_cast<time_t>(timeout.count() / 1000000000),
                          static_cast<long>(timeout.count() % 1000000000)};
  // EAGAIN (it rang since |seen|), EINTR: the caller looks again.
  return futex(&rings, FUTEX_WAIT, seen, &relative) == 0 || errno != ETIMEDOUT;
}

void ShmDoorbell::leave() noexcept {
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace hal::collective
