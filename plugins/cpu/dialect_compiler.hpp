// The cpu plugin's run-time compiler for HAL_MODULE_FORMAT_HAL_DIALECT: the
// front end (hal_dialect) translates the source to C++, the system C++
// compiler builds it into a shared object in a private temporary directory,
// and the object is cached by content in a private per-user directory, each
// entry with a record of its SHA-256, so a second load of the same source
// costs a file read and a hash (SPEC.md §8, "Kernel dialect").
#ifndef HAL_PLUGINS_CPU_DIALECT_COMPILER_HPP_
#define HAL_PLUGINS_CPU_DIALECT_COMPILER_HPP_

#include <string>
#include <string_view>
#include <vector>

#include "hal_plugin_sdk/report.hpp"

namespace hal::cpu {

// A compiled dialect module: the bytes to load (already hashed against the
// cache record or fresh from the compiler, and ELF-checked), never a path a
// second process could change before dlopen.
struct CompiledDialect {
  std::vector<unsigned char> image;
  std::string origin;  // for messages: the cache entry, or why no cache was used
};

// Compiles |source| (or finds it in the cache). |machine| names the host CPU:
// -march=native code is only valid on it, so it is part of the cache key.
// Failures are reported: HAL_ERROR_INVALID_MODULE (the dialect's or the
// compiler's diagnostics, or its output over the cap), HAL_ERROR_UNSUPPORTED
// (no C++ compiler), HAL_ERROR_TIMEOUT (the compiler ran past
// HAL_CXX_TIMEOUT_S), HAL_ERROR_OUT_OF_MEMORY (a full disk),
// HAL_ERROR_INVALID_ARGUMENT (a bad HAL_CXX_TIMEOUT_S), HAL_ERROR_INTERNAL.
// |bounds_checked|: translated with every `global` access checked (SPEC.md
// §14.1); each kernel then takes the launch's hal_bounds_record_t* last.
hal_result_t compile_dialect(std::string_view source, const std::string& machine,
                             bool bounds_checked, const plugin::ErrorReporter& report,
                             CompiledDialect& out);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_DIALECT_COMPILER_HPP_
