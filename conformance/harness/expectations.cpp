#include "expectations.hpp"

#include <fnmatch.h>

#include <fstream>
#include <sstream>

namespace halconform {

const KnownFailure* Expectations::match(const std::string& test) const {
  for (const KnownFailure& entry : entries) {
    if (fnmatch(entry.glob.c_str(), test.c_str(), 0) == 0) return &entry;
  }
  return nullptr;
}

std::string expectations_path_for(const std::string& plugin_path) {
  const std::string suffix = ".so";
  std::string stem = plugin_path;
  if (stem.size() > suffix.size() &&
      stem.compare(stem.size() - suffix.size(), suffix.size(), suffix) == 0) {
    stem.resize(stem.size() - suffix.size());
  }
  return stem + ".conformance";
}

bool parse_expectations(const std::string& text, std::vector<KnownFailure>& out_entries,
                        std::string& out_error) {
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const size_t glob_start = line.find_first_not_of(" \t\r");
    if (glob_start == std::string::npos) continue;
    const size_t glob_end = line.find_first_of(" \t", glob_start);
    const size_t reason_start =
        glob_end == std::string::npos ? std::string::npos : line.find_first_not_of(" \t", glob_end);
    if (reason_start == std::string::npos) {
      out_error = "line " + std::to_string(number) + ": '" + line +
                  "' has no reason; every known failure needs one";
      return false;
    }
    std::string reason = line.substr(reason_start);
    while (!reason.empty() && (reason.back() == ' ' || reason.back() == '\r')) reason.pop_back();
    out_entries.push_back({line.substr(glob_start, glob_end - glob_start), reason});
  }
  return true;
}

bool load_expectations(const std::string& plugin_path, Expectations& out, std::string& out_error) {
  const std::string path = expectations_path_for(plugin_path);
  std::ifstream file(path);
  if (!file) return true;  // no file: no known failures
  std::stringstream text;
  text << file.rdbuf();
  out.path = path;
  if (!parse_expectations(text.str(), out.entries, out_error)) {
    out_error = path + ": " + out_error;
    return false;
  }
  return true;
}

void apply_expectations(const Expectations& expectations, std::vector<TestResult>& results) {
  for (TestResult& result : results) {
    const KnownFailure* known = expectations.match(result.name);
    if (known == nullptr) continue;
    if (result.status == Status::kFail) {
      result.status = Status::kXfail;
      result.message = "known failure (" + known->reason + "): " + result.message;
    } else if (result.status == Status::kPass) {
      result.status = Status::kXpass;
      result.message = "listed as a known failure (" + known->reason + ") in " + expectations.path +
                       " but passed: remove the entry";
    }
  }
}

}  // namespace halconform
