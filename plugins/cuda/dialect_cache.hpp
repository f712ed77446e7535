// HAL dialect modules compiled by NVRTC through the kernel cache every
// plugin shares (hal_util/cached_build.hpp, SPEC.md §8): a second load of the
// same source for the same target with the same NVRTC reads the cubin (or
// PTX) back instead of compiling it.
#ifndef HAL_PLUGINS_CUDA_DIALECT_CACHE_HPP_
#define HAL_PLUGINS_CUDA_DIALECT_CACHE_HPP_

#include <string>
#include <string_view>

#include "hal_util/cached_build.hpp"
#include "nvrtc.hpp"

namespace hal::cuda {

// The cache key of |translated| compiled for |target|: the translator's
// version, NVRTC's identity (version and library file), the target (its
// architecture and output form), every option NVRTC is given and the
// translated text.
std::string dialect_cache_key(const Nvrtc& nvrtc, const dialect::TranslatedModule& translated,
                              const CompileTarget& target);

// What a cached compile gives besides the module: where the image came from.
struct CacheOutcome {
  hal::util::CacheUse use = hal::util::CacheUse::kNoCache;
  std::string origin;  // the entry, or why no cache was used
};

// compile_dialect, through the kernel cache: entries "objects/cuda-<key>.cubin"
// (or ".ptx") and "objects/cuda-<key>.record". A cached entry is used only when
// it passes the cache's checks and, for a cubin, check_binary_image with
// cubin_arch == the target's, for PTX check_ptx_text with the target sm_<arch>;
// otherwise it is compiled again and replaced. Cache problems go to |log|,
// never fail the load.
DialectStatus compile_dialect_cached(const Nvrtc& nvrtc, std::string_view source,
                                     const CompileTarget& target, const hal::util::CacheLogger& log,
                                     CompiledDialect& out, CacheOutcome& outcome,
                                     std::string& message);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_DIALECT_CACHE_HPP_
