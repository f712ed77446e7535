// The HAL calls a worker has in flight, in memory the parent shares: every
// call the suite makes enters its thread's slot (generated wrappers,
// api_wrappers.cpp) and leaves it on return. When a test passes its timeout
// the parent reads the table before it kills the worker, so a hang is
// reported as the call that hangs ("hal_stream_synchronize has not returned
// after 60.0 s on the test's thread"), not as an anonymous time-out. Tests
// read it too, to wait until another thread is really inside a call.
#ifndef HAL_CONFORMANCE_HARNESS_IN_FLIGHT_HPP_
#define HAL_CONFORMANCE_HARNESS_IN_FLIGHT_HPP_

#include <atomic>
#include <cstdint>
#include <string>

namespace halconform {

// The descriptor a worker finds the shared table on (the parent dup2s it there).
inline constexpr int kInFlightFd = 4;
inline constexpr uint32_t kInFlightSlots = 128;
inline constexpr uint32_t kNoCall = 0xffffffffu;

struct InFlightSlot {
  std::atomic<uint32_t> function;   // index into model::functions(), kNoCall when idle
  std::atomic<uint64_t> since_ns;   // CLOCK_MONOTONIC when the call began
  std::atomic<uint64_t> thread_id;  // the thread's kernel tid
};

struct InFlightTable {
  uint32_t magic;
  std::atomic<uint32_t> next_slot;
  std::atomic<uint64_t> test_thread;  // the tid running the current test body
  InFlightSlot slots[kInFlightSlots];
};

// The table this process writes: the parent's shared mapping in a worker,
// else a private one (so the wrappers always have somewhere to write).
InFlightTable& in_flight_table();
// Maps the table the parent passed on kInFlightFd, if there is one.
void attach_in_flight_table();
// Marks the calling thread as the one running test bodies.
void mark_test_thread();

// Enters the calling thread's slot for the length of one HAL call; restores
// the enclosing call (a host function the loader runs on the calling thread
// may call HAL itself).
class InFlight {
 public:
  InFlight(uint32_t function, const char* name);
  ~InFlight();
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  InFlightSlot* slot_;
  uint32_t previous_function_;
  uint64_t previous_since_;
};

// How long (seconds) another thread has been inside |function_name|, or a
// negative value when no thread is; for tests that must act while a call blocks.
double seconds_in_call(const char* function_name);

// A sentence naming every call in flight in |table| and for how long, the
// test's own thread first; "" when none.
std::string describe_in_flight(const InFlightTable& table);

uint64_t monotonic_ns();

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_IN_FLIGHT_HPP_
