#include "results.hpp"

#include <cstdio>

#include "names.hpp"

namespace halconform {

const char* status_name(Status status) {
  switch (status) {
    case Status::kPass:
      return "pass";
    case Status::kFail:
      return "fail";
    case Status::kSkip:
      return "skip";
    case Status::kXfail:
      return "xfail";
    case Status::kXpass:
      return "xpass";
  }
  return "fail";
}

bool DeviceCertification::passed() const {
  // A device that runs kernels and on which no conformance kernel loads is
  // never certified, whatever its known-failures file says (SPEC.md, Conformance).
  if (kernels_status == "not certified") return false;
  for (const TestResult& test : tests) {
    if (breaks_certification(test.status)) return false;
  }
  return !tests.empty();
}

bool DeviceCertification::profile_passed(const std::string& profile) const {
  for (const TestResult& test : tests) {
    if (test.profile == profile && breaks_certification(test.status)) return false;
  }
  return true;
}

bool RunRecord::passed() const {
  for (const DeviceCertification& device : devices) {
    if (!device.passed()) return false;
  }
  return !devices.empty();
}

std::string uuid_string(const uint8_t (&uuid)[16]) {
  char text[40];
  std::snprintf(text, sizeof(text),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", uuid[0],
                uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7], uuid[8], uuid[9],
                uuid[10], uuid[11], uuid[12], uuid[13], uuid[14], uuid[15]);
  return text;
}

std::string device_fingerprint(const PluginIdentity& plugin,
                               const hal_device_properties_t& properties) {
  // Every identifying field in a fixed textual form, so the fingerprint is
  // stable across builds of halconform. The declared peaks are left out, so
  // a plugin that refines how it derives them keeps its devices' identity.
  const hal_device_properties_t& p = properties;
  char fields[1024];
  std::snprintf(fields, sizeof(fields),
                "%s|%s|%s|%s|%s|%s|%s|%u|%u|%u|%u|%llu|%llu|%llu|%u|%u,%u,%u|%u,%u,%u|%u|%u",
                plugin.name.c_str(), plugin.version.c_str(), p.name, p.vendor, p.driver_version,
                uuid_string(p.uuid).c_str(), device_type_name(p.type), p.plugin_device_index,
                p.capabilities, p.module_formats, p.compute_units,
                static_cast<unsigned long long>(p.total_memory_bytes),
                static_cast<unsigned long long>(p.max_allocation_bytes),
                static_cast<unsigned long long>(p.min_alignment_bytes), p.max_threads_per_block,
                p.max_block_dims[0], p.max_block_dims[1], p.max_block_dims[2], p.max_grid_dims[0],
                p.max_grid_dims[1], p.max_grid_dims[2], p.max_shared_memory_bytes, p.subgroup_size);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char* c = fields; *c != '\0'; ++c) {
    hash = (hash ^ static_cast<uint8_t>(*c)) * 0x100000001b3ull;
  }
  char text[20];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace halconform
