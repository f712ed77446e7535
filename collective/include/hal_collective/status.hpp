// What every host collective path shares: the outcome of an operation, its
// deadline, and the bounded wait that watches both the deadline and an abort.
#pragma once

#include <hal/plugin_v1.h>

#include "hal_util/status.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace hal::collective {

using Clock = std::chrono::steady_clock;

// HAL_SUCCESS, or a failure with its sentence: the tree's one internal error carrier.
using Status = hal::Status;

// A point in time after which waiting is a failure, plus the flag that
// hal_comm_abort raises.
struct Deadline {
  Clock::time_point at;
  const std::atomic<bool>* aborted = nullptr;

  static Deadline after_ms(uint32_t timeout_ms, const std::atomic<bool>* abort_flag) {
    return {Clock::now() + std::chrono::milliseconds(timeout_ms), abort_flag};
  }
  bool is_aborted() const { return aborted != nullptr && aborted->load(std::memory_order_relaxed); }
};

// Polls |ready| until it holds: spins briefly (a futex wake costs ~10 us on
// the VMs we target), then yields, then naps, so waiting ranks that share a
// core with the rank they wait for let it run. Returns the failure when the
// deadline passes or the operation is aborted first; |what| names the wait.
template <class Ready>
Status wait_until(const Deadline& deadline, const char* what, Ready ready) {
  for (uint32_t i = 0;; ++i) {
    if (ready()) return {};
    if (i < 256) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    if (deadline.is_aborted()) {
      return Status::failure(HAL_ERROR_INVALID_STATE,
                             std::string("the communicator was aborted while ") + what);
    }
    if ((i & 15u) == 0 && Clock::now() > deadline.at) {
      if (ready()) return {};
      return Status::failure(HAL_ERROR_TIMEOUT, std::string("the deadline passed while ") + what);
    }
    if (i < 4096) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

// The size in bytes a call's send and receive buffers span on one rank of
// |ranks| (what the loader bounds-checks and what staging copies).
struct CallExtent {
  size_t send_bytes = 0;
  size_t recv_bytes = 0;
};
CallExtent call_extent(const hal_collective_call_t& call, uint32_t rank, uint32_t ranks) noexcept;

// A short signature of a call: every rank must present the same one.
uint32_t call_signature(const hal_collective_call_t& call) noexcept;

const char* kind_name(hal_collective_kind_t kind) noexcept;

}  // namespace hal::collective
