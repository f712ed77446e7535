#include "library_search.hpp"

#include <glob.h>
#include <sys/stat.h>

#include "hal_util/env.hpp"

namespace hal::cuda {
namespace {

bool is_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

void add_glob(const std::string& pattern, std::vector<std::string>& out) {
  glob_t found{};
  if (glob(pattern.c_str(), GLOB_NOSORT, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) out.emplace_back(found.gl_pathv[i]);
  }
  globfree(&found);
}

std::vector<std::string> search_dirs() {
  std::vector<std::string> dirs;
  std::vector<std::string> toolkits;
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* value = hal::util::env_nonempty(variable)) toolkits.emplace_back(value);
  }
  toolkits.emplace_back("/usr/local/cuda");
  for (const std::string& toolkit : toolkits) {
    dirs.push_back(toolkit + "/lib64");
    add_glob(toolkit + "/targets/*-linux/lib", dirs);
  }
  std::vector<std::string> prefixes;
  for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (const char* value = hal::util::env_nonempty(variable)) prefixes.emplace_back(value);
  }
  if (const char* home = hal::util::env_nonempty("HOME")) {
    prefixes.push_back(std::string(home) + "/.local");
  }
  prefixes.emplace_back("/usr/local");
  prefixes.emplace_back("/usr");
  for (const std::string& prefix : prefixes) {
    for (const char* packages : {"site-packages", "dist-packages"}) {
      add_glob(prefix + "/lib/python3*/" + packages + "/nvidia/*/lib", dirs);
    }
  }
  return dirs;
}

}  // namespace

std::vector<std::string> library_candidates(const char* variable,
                                            std::initializer_list<const char*> sonames) {
  if (const char* configured = hal::util::env_nonempty(variable)) return {configured};
  std::vector<std::string> candidates(sonames.begin(), sonames.end());
  for (const std::string& dir : search_dirs()) {
    for (const char* soname : sonames) {
      const std::string path = dir + "/" + soname;
      if (is_file(path)) candidates.push_back(path);
    }
  }
  return candidates;
}

std::string searched_places(const std::string& first_error) {
  std::string text = first_error + "; also looked in";
  const std::vector<std::string> dirs = search_dirs();
  size_t shown = 0;
  for (const std::string& dir : dirs) {
    if (shown++ == 4) {
      text += " and " + std::to_string(dirs.size() - 4) + " more";
      break;
    }
    text += (shown == 1 ? " " : ", ") + dir;
  }
  return text;
}

bool open_first_candidate(hal::plugin::VendorLibrary& library, const char* variable,
                          std::initializer_list<const char*> sonames, std::string& why) {
  std::string first_error;
  for (const std::string& candidate : library_candidates(variable, sonames)) {
    if (library.open(candidate, why)) return true;
    if (first_error.empty()) first_error = why;
  }
  why = hal::util::env_nonempty(variable) != nullptr ? first_error : searched_places(first_error);
  return false;
}

}  // namespace hal::cuda
