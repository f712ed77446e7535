// The two roots of tests/paths/test_paths.h: the only translation unit that names them.
#include "test_paths.h"

#include <mutex>
#include <set>
#include <string>

namespace {

// Each path is kept until the process exits or the library that linked this is unloaded (a
// plugin, such as halconform's fault wrapper): the set is an ordinary static, since one never
// destroyed would leak, unreachable, once its plugin was unloaded (LeakSanitizer said so).
const char* kept(std::string path) {
  static std::mutex mutex;
  static std::set<std::string> paths;
  const std::lock_guard<std::mutex> lock(mutex);
  return paths.insert(std::move(path)).first->c_str();
}

const char* joined(const char* root, const char* relative) {
  std::string path(root);
  if (relative != nullptr && *relative != '\0') path.append("/").append(relative);
  return kept(std::move(path));
}

}  // namespace

extern "C" const char* hal_test_build_path(const char* relative) {
  return joined(HAL_TEST_PATHS_BUILD_ROOT, relative);
}

extern "C" const char* hal_test_source_path(const char* relative) {
  return joined(HAL_TEST_PATHS_SOURCE_ROOT, relative);
}
