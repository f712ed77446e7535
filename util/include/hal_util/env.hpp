#pragma once
// Reading the environment. Every HAL_* variable (and every other variable HAL
// acts on: HOME, XDG_CACHE_HOME, PATH, TMPDIR) is read through this function,
// so a setuid or otherwise privileged process (AT_SECURE) never takes a plugin
// path, a compiler, a cache directory or a trace file from its caller.

namespace hal::util {

// The value of `name`, or nullptr when it is unset or the process runs with
// AT_SECURE (secure_getenv's rule). An empty value is returned as it is.
const char* env(const char* name) noexcept;

// The value of `name` when it is set and non-empty, else nullptr.
const char* env_nonempty(const char* name) noexcept;

// A 0/1 switch: "1" on, "0" off; unset or empty gives |fallback|. Another value
// is reported on stderr and read as on, so a typo never silently disables a check.
bool env_flag(const char* name, bool fallback) noexcept;

// Whether dialect kernels are compiled bounds-checked (SPEC.md §14.1):
// HAL_VALIDATION_BOUNDS when it is set, else an explicit HAL_VALIDATION=1 (a
// Debug build's default validation does not instrument kernels: it would slow
// every kernel of every test).
bool kernel_bounds_checks() noexcept;

}  // namespace hal::util
