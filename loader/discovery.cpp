#include "discovery.hpp"

#include "error.hpp"

#include "hal_util/env.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef HAL_INSTALL_PLUGIN_DIR
#error "HAL_INSTALL_PLUGIN_DIR must name the installed plugin directory"
#endif

namespace hal::loader {

namespace fs = std::filesystem;

namespace {

struct SearchDirectory {
  std::string path;
  std::string found_by;
};

constexpr std::string_view kPluginPrefix = "hal_plugin_";
constexpr std::string_view kPluginSuffix = ".so";

std::string trim(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\n");
  if (first == std::string_view::npos) return {};
  const size_t last = text.find_last_not_of(" \t\n");
  return std::string(text.substr(first, last - first + 1));
}

// Relative entries are resolved against the working directory once, here, at
// hal_init: what loads never depends on a later chdir.
std::string absolute_path(const std::string& path) {
  std::error_code error;
  const fs::path absolute = fs::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

// A path compared by what it names, so one directory reached two ways is
// searched once.
std::string canonical_or_self(const std::string& path) {
  std::error_code error;
  const fs::path canonical = fs::weakly_canonical(path, error);
  return error ? path : canonical.string();
}

std::vector<SearchDirectory> search_directories(const hal_init_options_t* options) {
  std::vector<SearchDirectory> directories;
  if (options != nullptr && options->plugin_path != nullptr) {
    for (std::string& dir : split_list(options->plugin_path, ':'))
      directories.push_back({absolute_path(dir), "options"});
  }
  if (const char* env = hal::util::env("HAL_PLUGIN_PATH"); env != nullptr) {
    for (std::string& dir : split_list(env, ':'))
      directories.push_back({absolute_path(dir), "HAL_PLUGIN_PATH"});
  }
  if (options == nullptr || options->skip_default_search == 0) {
    const std::string install_dir = canonical_or_self(HAL_INSTALL_PLUGIN_DIR);
    const std::string library_dir = loader_library_directory();
    if (!library_dir.empty()) {
      // The build tree mirrors the install tree, so one rule serves both.
      const std::string own_dir = canonical_or_self(library_dir + "/hal/plugins");
      directories.push_back({own_dir, own_dir == install_dir ? "install" : "build"});
    }
    directories.push_back({install_dir, "install"});
  }
  // Each directory once, at its first position.
  std::vector<SearchDirectory> unique;
  std::vector<std::string> seen;
  for (SearchDirectory& dir : directories) {
    std::string key = canonical_or_self(dir.path);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(std::move(key));
    unique.push_back(std::move(dir));
  }
  return unique;
}

bool is_plugin_file_name(const std::string& name) {
  return name.size() > kPluginPrefix.size() + kPluginSuffix.size() &&
         name.compare(0, kPluginPrefix.size(), kPluginPrefix) == 0 &&
         name.compare(name.size() - kPluginSuffix.size(), kPluginSuffix.size(), kPluginSuffix) == 0;
}

// hal_plugin_*.so in |dir|, sorted by name. A missing directory has none.
std::vector<std::string> plugin_files_in(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    std::error_code status_error;
    if (is_plugin_file_name(name) && !it->is_directory(status_error))
      files.push_back(fs::absolute(it->path()).lexically_normal().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

Candidate resolve_requested(const std::string& entry, const std::string& found_by,
                            const std::vector<SearchDirectory>& directories) {
  Candidate candidate;
  candidate.found_by = found_by;
  candidate.requested = true;
  candidate.requested_as = entry;
  if (entry.find('/') != std::string::npos) {
    candidate.path = absolute_path(entry);
    return candidate;
  }
  const std::string file_name = std::string(kPluginPrefix) + entry + std::string(kPluginSuffix);
  std::string searched;
  for (const SearchDirectory& dir : directories) {
    const fs::path path = fs::path(dir.path) / file_name;
    std::error_code error;
    if (fs::exists(path, error)) {
      candidate.path = fs::absolute(path).lexically_normal().string();
      return candidate;
    }
    searched += searched.empty() ? dir.path : ":" + dir.path;
  }
  candidate.lookup_error = format("no file %s in the plugin directories (%s)", file_name.c_str(),
                                  searched.empty() ? "none to search" : searched.c_str());
  return candidate;
}

}  // namespace

std::vector<std::string> split_list(std::string_view text, char separator) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    std::string piece = trim(text.substr(start, end - start));
    if (!piece.empty()) pieces.push_back(std::move(piece));
    start = end + 1;
  }
  return pieces;
}

namespace {

// Where libhal.so lies, resolved once. dladdr gives the name the library
// was loaded by, which is relative when the program opened it by a relative
// path: made absolute later, after a chdir, it would name another directory
// and another set of plugins. So it is resolved while libhal is loaded (the
// static initializer below runs inside that dlopen, or before main, in the
// working directory the loading saw) and never again.
std::string resolve_library_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&resolve_library_directory), &info) == 0 ||
      info.dli_fname == nullptr || info.dli_fname[0] == '\0') {
    return {};
  }
  std::error_code error;
  const fs::path library = fs::canonical(info.dli_fname, error);
  if (!error) return library.parent_path().string();
  const fs::path absolute = fs::absolute(info.dli_fname, error);
  return error ? std::string() : absolute.lexically_normal().parent_path().string();
}

const std::string& library_directory() {
  static const std::string directory = resolve_library_directory();
  return directory;
}

[[maybe_unused]] const bool g_library_directory_resolved_at_load = !library_directory().empty();

}  // namespace

std::string loader_library_directory() {
  return library_directory();
}

DiscoveryPlan discover_plugins(const hal_init_options_t* options) {
  DiscoveryPlan plan;
  const std::vector<SearchDirectory> directories = search_directories(options);

  // A list with no entries (NULL, "", only blanks and commas) is no list: the
  // search runs, as for an unset HAL_PLUGINS (SPEC §9.1).
  std::vector<std::string> entries;
  std::string found_by;
  if (options != nullptr && options->plugins != nullptr) {
    entries = split_list(options->plugins, ',');
    found_by = "options";
  }
  if (entries.empty()) {
    if (const char* env = hal::util::env("HAL_PLUGINS"); env != nullptr) {
      entries = split_list(env, ',');
      found_by = "HAL_PLUGINS";
    }
  }
  if (!entries.empty()) {
    plan.explicit_list = true;
    for (const std::string& entry : entries)
      plan.candidates.push_back(resolve_requested(entry, found_by, directories));
    return plan;
  }

  std::vector<std::string> seen_files;
  for (const SearchDirectory& dir : directories) {
    for (std::string& path : plugin_files_in(dir.path)) {
      const std::string key = canonical_or_self(path);
      if (std::find(seen_files.begin(), seen_files.end(), key) != seen_files.end()) continue;
      seen_files.push_back(key);
      Candidate candidate;
      candidate.path = std::move(path);
      candidate.found_by = dir.found_by;
      plan.candidates.push_back(std::move(candidate));
    }
  }
  return plan;
}

}  // namespace hal::loader
