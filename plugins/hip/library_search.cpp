#include "library_search.hpp"

#include <glob.h>
#include <sys/stat.h>

#include "hal_util/env.hpp"

namespace hal::hip {
namespace {

bool is_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::vector<std::string> rocm_dirs() {
  std::vector<std::string> dirs;
  if (const char* rocm = hal::util::env_nonempty("ROCM_PATH"))
    dirs.push_back(std::string(rocm) + "/lib");
  dirs.emplace_back("/opt/rocm/lib");
  glob_t found{};
  if (glob("/opt/rocm-*/lib", 0, nullptr, &found) == 0) {
    // Sorted by name, newest version last: tried newest first.
    for (size_t i = found.gl_pathc; i > 0; --i) dirs.emplace_back(found.gl_pathv[i - 1]);
  }
  globfree(&found);
  return dirs;
}

}  // namespace

std::vector<std::string> rocm_library_candidates(const char* variable,
                                                 std::initializer_list<const char*> sonames) {
  if (const char* configured = hal::util::env_nonempty(variable)) return {configured};
  const std::vector<std::string> dirs = rocm_dirs();
  std::vector<std::string> candidates;
  for (const char* soname : sonames) {
    candidates.emplace_back(soname);
    for (const std::string& dir : dirs) {
      const std::string path = dir + "/" + soname;
      if (is_file(path)) candidates.push_back(path);
    }
  }
  return candidates;
}

std::string rocm_searched_places(const std::string& first_error) {
  std::string text = first_error + "; also looked in";
  const std::vector<std::string> dirs = rocm_dirs();
  for (size_t i = 0; i < dirs.size() && i < 4; ++i) text += (i == 0 ? " " : ", ") + dirs[i];
  if (dirs.size() > 4) text += " and " + std::to_string(dirs.size() - 4) + " more";
  return text;
}

}  // namespace hal::hip
