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

}  // namespace hal::util
