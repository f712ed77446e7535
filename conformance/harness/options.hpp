// halconform's command line.
#ifndef HAL_CONFORMANCE_HARNESS_OPTIONS_HPP_
#define HAL_CONFORMANCE_HARNESS_OPTIONS_HPP_

#include <optional>
#include <string>
#include <vector>

#include "worker.hpp"

namespace halconform {

struct Options {
  std::string plugin;                 // NAME or PATH; "" = every discovered plugin
  std::optional<uint32_t> device;     // global device index; none = every device
  std::vector<std::string> profiles;  // selected profile names ("all" expanded)
  std::string filter;                 // comma-separated globs; "" = every test
  std::string exclude;                // comma-separated globs of tests left out; "" = none
  bool list = false;
  std::string report_path, junit_path, html_path;
  double timeout_s = 120;
  RunSettings settings;
  bool worker = false;
  WorkerOptions worker_options;
  bool help = false;
};

// Parses argv; false with |out_error| on a usage error.
bool parse_options(int argc, char** argv, Options& out, std::string& out_error);
void print_usage(std::FILE* out);
// The conformance kernels beside this executable: <exe dir>/../lib/hal/conformance/...
std::string default_kernels_path(const std::string& executable);
std::string executable_path();

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_OPTIONS_HPP_
