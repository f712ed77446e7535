#include "hal_util/env.hpp"

#include <cstdlib>

namespace hal::util {

const char* env(const char* name) noexcept {
  return ::secure_getenv(name);
}

const char* env_nonempty(const char* name) noexcept {
  const char* value = env(name);
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

}  // namespace hal::util
