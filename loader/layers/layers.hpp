// The loader's optional layers (validation, tracing) and the one flag word the
// public entry points test. Layers are chosen once, when hal_init takes its
// first reference, from HAL_VALIDATION, HAL_TRACE and HAL_TRACE_SUMMARY; with
// none of them on, an entry point pays one relaxed load and one predictable
// branch (see intercept.hpp).
#pragma once

#include <atomic>
#include <cstdint>

namespace hal::loader {
struct Registry;
}

namespace hal::loader::layers {

enum LayerBits : uint32_t {
  kValidation = 1u << 0,  // HAL_VALIDATION=1 (default on in Debug builds)
  kTracing = 1u << 1,     // HAL_TRACE=FILE.json and/or HAL_TRACE_SUMMARY=1
};

namespace detail {
extern std::atomic<uint32_t> active_layers;
}

// The layers on since the last first hal_init; 0 before hal_init and after the
// last hal_shutdown. Relaxed: hal_init happens before any call that reads it.
inline uint32_t active() noexcept {
  return detail::active_layers.load(std::memory_order_relaxed);
}
inline bool validation_on() noexcept {
  return (active() & kValidation) != 0;
}
inline bool tracing_on() noexcept {
  return (active() & kTracing) != 0;
}

// Called by hal_init once the registry is built (first reference only): reads
// the environment, opens the trace file, registers the devices, turns the
// chosen layers on.
void start(const Registry& registry) noexcept;

// Called by the last hal_shutdown before the registry is torn down: turns the
// layers off and prints the leak report while the objects still exist.
void stop_before_teardown(const Registry& registry) noexcept;

// Called by the last hal_shutdown after the registry is gone (every stream has
// drained, so every execution span has ended): closes the trace file and
// prints the call summary.
void stop_after_teardown() noexcept;

}  // namespace hal::loader::layers
