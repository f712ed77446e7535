#include "hal_util/cached_build.hpp"

#include <mutex>
#include <set>

namespace hal::util {
namespace {

// Logs |message| once per process: the same cache problem on every load
// would otherwise repeat on every compile.
void log_once(const CacheLogger& log, hal_log_level_t level, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard lock(mutex);
    if (!said.insert(message).second) return;
  }
  log(level, message);
}

}  // namespace

bool build_cached(const CachedBuildRequest& request, const CacheBuilder& build,
                  const CacheLogger& log, CachedBuild& out) {
  out.image.clear();
  KernelCache cache;
  std::string why;
  std::string entry;
  if (!cache.open(request.prefix, request.object_suffix, why)) {
    log_once(log, HAL_LOG_WARNING,
             "the kernel cache is not used (" + why + "); the " + request.prefix +
                 " plugin compiles HAL dialect modules at every load");
    out.origin = "a HAL dialect module compiled without a cache (" + why + ")";
    out.use = CacheUse::kNoCache;
  } else {
    entry = cache.object_path(request.key);
    out.origin = "the HAL dialect module cached as '" + entry + "'";
    if (cache.read(request.key, request.validate, out.image, why)) {
      log(HAL_LOG_DEBUG, "the kernel cache entry '" + entry + "' is used: nothing is compiled");
      out.use = CacheUse::kHit;
      return true;
    }
    if (!why.empty()) {
      log(HAL_LOG_WARNING, "the kernel cache entry " + entry + " is rebuilt: " + why);
    }
    out.image.clear();
  }
  if (!build(out.image)) return false;
  if (!cache.is_open()) return true;
  if (request.validate && !request.validate(out.image, why)) {
    // Stored, it would be refused and rebuilt at every load.
    log_once(log, HAL_LOG_WARNING,
             "the kernel cache entry " + entry +
                 " is not stored: the compiled image fails the plugin's check: " + why);
    out.use = CacheUse::kNotStored;
    return true;
  }
  if (int written = cache.write(request.key, out.image); written != 0) {
    // The module is compiled and loads; only later loads lose the cache.
    log_once(log, HAL_LOG_WARNING,
             "the kernel cache entry could not be stored: " +
                 describe_write_error(written, cache.path()));
    out.use = CacheUse::kNotStored;
    return true;
  }
  log(HAL_LOG_DEBUG, "compiled and stored as the kernel cache entry '" + entry + "'");
  out.use = CacheUse::kStored;
  return true;
}

}  // namespace hal::util
