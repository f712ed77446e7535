#pragma once
// One compile through the kernel cache (kernel_cache.hpp), with the decisions
// and the log lines every plugin gives (SPEC.md §8, "The kernel cache"): an
// unusable directory means compiling without a cache, said once; a bad entry
// is rebuilt, said each time; an entry that cannot be stored is said once and
// the compiled module still loads; a hit and a store are said at debug level.

#include <functional>
#include <string>
#include <vector>

#include "hal_plugin.h"
#include "hal_util/kernel_cache.hpp"

namespace hal::util {

// How a cached build ended: for the plugin's messages and its tests.
enum class CacheUse {
  kHit,        // the entry was used: nothing was compiled
  kStored,     // compiled, and stored as the entry
  kNotStored,  // compiled; the entry could not be stored (logged)
  kNoCache,    // compiled without a cache: the directory is not usable (logged once)
};

struct CachedBuildRequest {
  std::string prefix;         // the entry names' prefix: "cpu", "cuda", "hip"
  std::string object_suffix;  // the object's suffix: ".so", ".ptx", ".hsaco"
  std::string key;            // KernelCache::key_of(everything that changes the output)
  // The plugin's check of an image: a cached one that fails it is rebuilt, a
  // fresh one that fails it is not stored. May be empty.
  KernelCache::Validator validate;
};

// Where the log lines go (the plugin's ErrorReporter::log).
using CacheLogger = std::function<void(hal_log_level_t level, const std::string& message)>;

// Compiles into |image|; false when it failed (it reported why itself).
using CacheBuilder = std::function<bool(std::vector<unsigned char>& image)>;

struct CachedBuild {
  std::vector<unsigned char> image;
  std::string origin;  // for messages: the cache entry, or why no cache was used
  CacheUse use = CacheUse::kNoCache;
};

// The entry of |request.key| when it passes every check; otherwise |build|'s
// image, stored as the entry. False only when |build| fails.
bool build_cached(const CachedBuildRequest& request, const CacheBuilder& build,
                  const CacheLogger& log, CachedBuild& out);

}  // namespace hal::util
