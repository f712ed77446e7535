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

// The publisher's sequentially consistent store of what the sleepers wait
// for, then its load of |sleepers|; a sleeper's increment of |sleepers|,
// then its sequentially consistent loads of its condition. All four lie in
// the single total order of such operations: either the publisher's load
// comes after the increment and it rings, or the sleeper's loads come after
// the store and see it. (No fence: ThreadSanitizer does not model them.)
// On x86 the store is an xchg and the loads plain moves: nobody asleep
// costs the publisher no write to a shared line.
void ShmDoorbell::ring() noexcept {
  if (sleepers.load(std::memory_order_seq_cst) == 0) return;
  rings.fetch_add(1, std::memory_order_seq_cst);
  futex(&rings, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t ShmDoorbell::announce() noexcept {
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  return rings.load(std::memory_order_seq_cst);
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
