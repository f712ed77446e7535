// The record of a run: per device, the plugin, the device's identity and
// properties, every test's outcome and every metric.
#ifndef HAL_CONFORMANCE_HARNESS_RESULTS_HPP_
#define HAL_CONFORMANCE_HARNESS_RESULTS_HPP_

#include <hal.h>

#include <map>
#include <string>
#include <vector>

#include "context.hpp"
#include "coverage.hpp"

namespace halconform {

enum class Status { kPass, kFail, kSkip, kXfail, kXpass };

const char* status_name(Status status);  // "pass", "fail", "skip", "xfail", "xpass"
// Fail and xpass break a certification; xfail (a known failure) and skip do not.
inline bool breaks_certification(Status status) {
  return status == Status::kFail || status == Status::kXpass;
}

struct TestResult {
  std::string name;
  std::string profile;
  std::string summary;
  Status status = Status::kFail;
  double duration_s = 0;
  std::string message;  // why it failed or was skipped; notes of a pass
};

struct PluginIdentity {
  std::string name;
  std::string version;
  std::string vendor;
  std::string build_id;
  std::string path;
  uint32_t abi_version = 0;
};

struct DeviceCertification {
  PluginIdentity plugin;
  uint32_t device_index = 0;  // in the loader's global list of the discovering run
  uint32_t plugin_device_count = 0;
  hal_device_properties_t properties{};
  std::string fingerprint;            // hash of the identity and every declared property
  std::string expectations_path;      // the known-failures file read, "" when none
  std::vector<std::string> profiles;  // the profiles that were selected
  std::vector<TestResult> tests;
  std::vector<Metric> metrics;
  std::string tier;  // "smoke", "ci", "full"
  // Whether halconform could run the core kernel tests on the device:
  // "certified", "not certified" (it declares HAL_DEVICE_CAP_KERNELS and no
  // conformance kernel loads: never a pass), "not applicable", "not run".
  std::string kernels_status = "not run";
  std::string kernels_detail;
  std::map<std::string, std::vector<std::string>> recorded_paths;  // test -> paths
  coverage::DeviceCoverage coverage;

  bool passed() const;
  bool profile_passed(const std::string& profile) const;
};

// A plugin that loaded but serves no device here, and its load report's
// reason ("cuda: libcuda.so.1 not found: ...; 0 devices").
struct PluginWithoutDevices {
  std::string name;
  std::string path;
  std::string reason;
};

struct RunRecord {
  std::string suite_version;
  std::string hal_version;
  std::string abi_version;
  std::string command;
  std::string started_utc;
  double duration_s = 0;
  std::vector<DeviceCertification> devices;
  std::vector<PluginWithoutDevices> plugins_without_devices;

  bool passed() const;
};

// "2f7c...": FNV-1a 64 over the plugin identity and the properties' fields.
std::string device_fingerprint(const PluginIdentity& plugin,
                               const hal_device_properties_t& properties);
std::string uuid_string(const uint8_t (&uuid)[16]);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_RESULTS_HPP_
