// Known failures are the plugin's data, not the suite's: a text file
// hal_plugin_<name>.conformance beside the plugin's shared object, one entry a
// line, "<test glob> <reason>" ('#' starts a comment). A failing test that an
// entry matches is XFAIL; a passing one is XPASS, which fails the
// certification so the file cannot go stale.
#ifndef HAL_CONFORMANCE_HARNESS_EXPECTATIONS_HPP_
#define HAL_CONFORMANCE_HARNESS_EXPECTATIONS_HPP_

#include <string>
#include <vector>

#include "results.hpp"

namespace halconform {

struct KnownFailure {
  std::string glob;
  std::string reason;
};

struct Expectations {
  std::string path;  // "" when the plugin ships no file
  std::vector<KnownFailure> entries;

  const KnownFailure* match(const std::string& test) const;
};

// The file beside |plugin_path| (…/hal_plugin_cpu.so -> …/hal_plugin_cpu.conformance).
std::string expectations_path_for(const std::string& plugin_path);
// Parses |text|; false with |out_error| naming the line when an entry has no reason.
bool parse_expectations(const std::string& text, std::vector<KnownFailure>& out_entries,
                        std::string& out_error);
// Reads the file beside |plugin_path| when there is one.
bool load_expectations(const std::string& plugin_path, Expectations& out, std::string& out_error);
// Turns matching fail/pass results into xfail/xpass.
void apply_expectations(const Expectations& expectations, std::vector<TestResult>& results);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_EXPECTATIONS_HPP_
