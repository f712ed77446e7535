// The cpu plugin's run-time compiler for HAL_MODULE_FORMAT_HAL_DIALECT: the
// front end (hal_dialect) translates the source to C++, the system C++
// compiler builds it into a shared object, and the object is cached by
// content so a second load of the same source costs a file lookup.
#ifndef HAL_PLUGINS_CPU_DIALECT_COMPILER_HPP_
#define HAL_PLUGINS_CPU_DIALECT_COMPILER_HPP_

#include <string>
#include <string_view>

#include "hal_plugin_sdk/report.hpp"

namespace hal::cpu {

// Compiles |source| (or finds it in the cache) and sets |out_library| to the
// shared object's path. |machine| names the host CPU: -march=native code is
// only valid on it, so it is part of the cache key. Failures are reported:
// HAL_ERROR_INVALID_MODULE (the dialect's or the compiler's diagnostics),
// HAL_ERROR_UNSUPPORTED (no C++ compiler), HAL_ERROR_INTERNAL (I/O).
hal_result_t compile_dialect(std::string_view source, const std::string& machine,
                             const plugin::ErrorReporter& report, std::string& out_library);

// The cache directory: $HAL_CACHE_DIR, else $XDG_CACHE_HOME/hal, else
// $HOME/.cache/hal.
std::string dialect_cache_directory();

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_DIALECT_COMPILER_HPP_
