#include "hal_util/env.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hal::util {

const char* env(const char* name) noexcept {
  return ::secure_getenv(name);
}

const char* env_nonempty(const char* name) noexcept {
  const char* value = env(name);
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

bool env_flag(const char* name, bool fallback) noexcept {
  const char* value = env(name);
  if (value == nullptr || value[0] == '\0') return fallback;
  if (std::strcmp(value, "0") == 0) return false;
  if (std::strcmp(value, "1") != 0) {
    std::fprintf(stderr, "hal: %s='%s' is not 0 or 1; read as 1\n", name, value);
  }
  return true;
}

bool kernel_bounds_checks() noexcept {
  if (env_nonempty("HAL_VALIDATION_BOUNDS") != nullptr) {
    return env_flag("HAL_VALIDATION_BOUNDS", false);
  }
  return env_flag("HAL_VALIDATION", false);
}

}  // namespace hal::util
