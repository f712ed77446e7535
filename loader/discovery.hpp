// Where plugins come from: the explicit list (options->plugins or HAL_PLUGINS)
// or the search directories, in their documented order.
#pragma once

#include <hal/init.h>

#include <string>
#include <string_view>
#include <vector>

namespace hal::loader {

struct Candidate {
  std::string path;      // the file to load; empty when a named plugin was not found
  std::string found_by;  // "options", "HAL_PLUGINS", "HAL_PLUGIN_PATH", "build", "install"
  bool requested = false;
  std::string requested_as;  // the list entry as the user wrote it
  std::string lookup_error;  // why a requested name has no file
};

struct DiscoveryPlan {
  bool explicit_list = false;
  std::vector<Candidate> candidates;
};

// Splits |text| at |separator|, dropping empty pieces and surrounding blanks.
std::vector<std::string> split_list(std::string_view text, char separator);

// The candidates hal_init loads, in order. Reads HAL_PLUGINS and HAL_PLUGIN_PATH.
DiscoveryPlan discover_plugins(const hal_init_options_t* options);

// The directory libhal.so lives in: found with dladdr and made absolute when
// libhal was loaded, so a later chdir does not change it.
std::string loader_library_directory();

}  // namespace hal::loader
