// HAL dialect modules compiled by hiprtc through the kernel cache every
// plugin shares (hal_util/cached_build.hpp, SPEC.md §8): a second load of the
// same source for the same GPU architecture with the same hiprtc reads the
// code object back instead of compiling it.
#ifndef HAL_PLUGINS_HIP_DIALECT_CACHE_HPP_
#define HAL_PLUGINS_HIP_DIALECT_CACHE_HPP_

#include <string>
#include <string_view>

#include "hal_util/cached_build.hpp"
#include "hiprtc.hpp"

namespace hal::hip {

// The cache key of |translated|'s code object for |arch| (the full
// gcnArchName, target features included): the translator's version,
// hiprtc's identity (version and library file), the architecture, every
// option hiprtc is given and the translated text.
std::string dialect_cache_key(const Hiprtc& hiprtc, const dialect::TranslatedModule& translated,
                              const std::string& arch);

// What a cached compile gives besides the module: where the code came from.
struct CacheOutcome {
  hal::util::CacheUse use = hal::util::CacheUse::kNoCache;
  std::string origin;  // the entry, or why no cache was used
};

// compile_dialect, through the kernel cache: entries "objects/hip-<key>.hsaco"
// and "objects/hip-<key>.record". A cached entry is used only when it passes the cache's
// checks, check_code_object and code_object_is_for |arch|; otherwise it is
// compiled again and replaced.
// Cache problems go to |log|, never fail the load.
DialectStatus compile_dialect_cached(const Hiprtc& hiprtc, std::string_view source,
                                     const std::string& arch, const hal::util::CacheLogger& log,
                                     CompiledDialect& out, CacheOutcome& outcome,
                                     std::string& message);

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_DIALECT_CACHE_HPP_
