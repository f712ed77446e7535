// The environment variables a plugin's vendor libraries read (SPEC.md §15,
// "Vendor libraries in a secure-execution process"). HAL reads its own
// variables with secure_getenv, so in a setuid, setgid or file-capability
// process (AT_SECURE) the caller cannot steer it; the vendor libraries a
// plugin opens read theirs with getenv, and some of them load the library
// a variable names (ZE_ENABLE_ALT_DRIVERS, OCL_ICD_VENDORS, HSA_TOOLS_LIB,
// CUDA_INJECTION64_PATH, NCCL_NET_PLUGIN...). So each plugin declares the
// variables of its vendor libraries, by name and by prefix, in its Identity,
// and hal::plugin::enter removes every one of them from the process
// environment before the plugin's code runs, in a secure-execution process
// only. The knowledge of which variables are a vendor's stays with the
// plugin; the loader knows none of it.
#ifndef HAL_PLUGIN_SDK_VENDOR_ENVIRONMENT_HPP_
#define HAL_PLUGIN_SDK_VENDOR_ENVIRONMENT_HPP_

#include <sys/auxv.h>

#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

extern "C" char** environ;

namespace hal::plugin {

struct VendorEnvironment {
  // What reads them, for the log line: "the OpenCL ICD loader and PoCL".
  std::string_view libraries;
  std::span<const std::string_view> names;     // exact variable names
  std::span<const std::string_view> prefixes;  // every variable beginning with one
};

// Whether the kernel runs this process in secure-execution mode.
inline bool secure_execution() noexcept {
  return getauxval(AT_SECURE) != 0;
}

// The variables of the process environment |vendor| declares, in
// environment order.
inline std::vector<std::string> vendor_variables_set(const VendorEnvironment& vendor) {
  std::vector<std::string> found;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    bool listed = false;
    for (const std::string_view exact : vendor.names) listed = listed || name == exact;
    for (const std::string_view prefix : vendor.prefixes) {
      listed = listed || name.substr(0, prefix.size()) == prefix;
    }
    if (listed && !name.empty()) found.emplace_back(name);
  }
  return found;
}

// In a secure-execution process, removes every variable |vendor| declares
// from the process environment and returns their names; otherwise changes
// nothing and returns none. Runs while the loader loads the plugin, before
// its vendor libraries are opened or called. (unsetenv is not safe against
// a getenv racing on another thread; hal_init runs before such threads in a
// program that is careful about its environment.)
inline std::vector<std::string> scrub_vendor_environment(const VendorEnvironment& vendor) {
  if (!secure_execution()) return {};
  std::vector<std::string> removed = vendor_variables_set(vendor);
  for (const std::string& name : removed) unsetenv(name.c_str());
  return removed;
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_VENDOR_ENVIRONMENT_HPP_
