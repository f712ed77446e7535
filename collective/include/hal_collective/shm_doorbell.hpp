// A doorbell in memory that processes share: ranks that wait for each other
// through a shared segment sleep on it in the kernel (a futex) instead of
// yielding their core, and a rank that publishes something rings it only
// when somebody sleeps.
//
// Why not sched_yield: on a host with more runnable threads than cores (a
// busy CI machine, more ranks than cores), a yield hands the core to another
// process for a whole time slice (the EEVDF scheduler moves a yielding
// thread's deadline back), so a rank that yields while its peer is
// preempted loses milliseconds, and two ranks that yield in turn keep
// missing each other. A sleeper is woken when its peer publishes, and the
// scheduler runs a woken thread promptly.
//
// The word lives in the segment, so any process of the user may write it:
// a wrong value costs a spurious or a missed wake-up, never more, because
// every sleep is bounded (the caller sleeps in slices and looks at its
// condition, its deadline and its peers' liveness after each).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace hal::collective {

struct ShmDoorbell {
  std::atomic<uint32_t> rings{0};     // the futex word: bumped by every ring that found a sleeper
  std::atomic<uint32_t> sleepers{0};  // threads between announce() and the end of their sleep

  // Publisher: after its sequentially consistent store of what the
  // sleepers wait for (their loads of it are sequentially consistent too).
  // Costs a load when nobody sleeps; a system call otherwise.
  void ring() noexcept;

  // Sleeper, in three steps: announce() returns the ring count to sleep
  // on; the caller then looks at its condition once more (a publisher that
  // stored before the announcement is seen there, one after it rings), and
  // calls sleep() only if it still does not hold; leave() in any case.
  uint32_t announce() noexcept;
  // Sleeps until a ring after |seen| or |timeout|, whichever comes first
  // (or a signal, or a spurious wake-up: the caller looks again anyway).
  // False when the timeout passed without a ring.
  bool sleep(uint32_t seen, std::chrono::nanoseconds timeout) noexcept;
  void leave() noexcept;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "the doorbell is shared between processes: its atomics must be lock-free");

}  // namespace hal::collective
