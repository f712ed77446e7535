// The JSON certification record and the helpers shared by the file outputs.
#include <cstdio>

#include "hal_util/secure_file.hpp"

#include "json_writer.hpp"
#include "names.hpp"
#include "reports.hpp"

namespace halconform {
namespace {

void write_properties(JsonWriter& json, const hal_device_properties_t& p) {
  json.begin_object();
  json.field("name", p.name).field("vendor", p.vendor).field("plugin", p.plugin);
  json.field("driver_version", p.driver_version).field("uuid", uuid_string(p.uuid));
  json.field("type", device_type_name(p.type)).field("plugin_device_index", p.plugin_device_index);
  json.field("capabilities", capability_names(p.capabilities));
  json.field("module_formats", module_format_names(p.module_formats));
  json.field("compute_units", p.compute_units);
  json.field("total_memory_bytes", p.total_memory_bytes);
  json.field("max_allocation_bytes", p.max_allocation_bytes);
  json.field("min_alignment_bytes", p.min_alignment_bytes);
  json.field("max_threads_per_block", p.max_threads_per_block);
  json.key("max_block_dims").begin_array();
  for (uint32_t d : p.max_block_dims) json.value(d);
  json.end_array();
  json.key("max_grid_dims").begin_array();
  for (uint32_t d : p.max_grid_dims) json.value(d);
  json.end_array();
  json.field("max_shared_memory_bytes", p.max_shared_memory_bytes);
  json.field("subgroup_size", p.subgroup_size);
  json.field("peak_fp32_flops", p.peak_fp32_flops);
  json.field("peak_memory_bandwidth", p.peak_memory_bandwidth);
  json.end_object();
}

}  // namespace

std::string json_quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace {

void write_coverage(JsonWriter& json, const coverage::DeviceCoverage& coverage) {
  json.key("coverage").begin_object();
  json.field("covered", coverage.covered).field("uncovered", coverage.uncovered);
  json.field("waived", coverage.waived).field("not_applicable", coverage.not_applicable);
  json.key("unlisted").begin_array();
  for (const std::string& path : coverage.unlisted) json.value(path);
  json.end_array();
  json.key("paths").begin_array();
  for (const coverage::PathResult& path : coverage.paths) {
    json.begin_object().field("path", path.name).field("source", path.source);
    json.field("status", coverage::path_status_name(path.status));
    json.field("reason", path.reason);
    json.key("tests").begin_array();
    for (const std::string& test : path.tests) json.value(test);
    json.end_array().end_object();
  }
  json.end_array();
  json.end_object();
}

void write_device(JsonWriter& json, const DeviceCertification& device) {
  json.begin_object();
  json.field("verdict", device.passed() ? "pass" : "fail");
  json.key("plugin").begin_object();
  json.field("name", device.plugin.name).field("version", device.plugin.version);
  json.field("vendor", device.plugin.vendor).field("build_id", device.plugin.build_id);
  json.field("path", device.plugin.path);
  json.field("abi_version", version_string(device.plugin.abi_version));
  json.field("device_count", device.plugin_device_count);
  json.field("known_failures_file", device.expectations_path);
  json.end_object();
  json.key("device").begin_object();
  json.field("index", device.device_index).field("fingerprint", device.fingerprint);
  json.key("properties");
  write_properties(json, device.properties);
  json.end_object();
  json.key("profiles").begin_array();
  for (const std::string& profile : device.profiles) {
    uint32_t counts[5] = {};
    for (const TestResult& test : device.tests) {
      if (test.profile == profile) ++counts[static_cast<int>(test.status)];
    }
    json.begin_object().field("name", profile);
    json.field("verdict", device.profile_passed(profile) ? "pass" : "fail");
    for (Status status :
         {Status::kPass, Status::kFail, Status::kSkip, Status::kXfail, Status::kXpass}) {
      json.field(status_name(status), counts[static_cast<int>(status)]);
    }
    json.end_object();
  }
  json.end_array();
  json.key("tests").begin_array();
  for (const TestResult& test : device.tests) {
    json.begin_object().field("name", test.name).field("profile", test.profile);
    json.field("status", status_name(test.status)).field("duration_s", test.duration_s);
    json.field("message", test.message).field("summary", test.summary).end_object();
  }
  json.end_array();
  json.field("tier", device.tier);
  json.key("kernels").begin_object();
  json.field("status", device.kernels_status).field("detail", device.kernels_detail);
  json.end_object();
  write_coverage(json, device.coverage);
  json.key("metrics").begin_array();
  for (const Metric& metric : device.metrics) {
    json.begin_object().field("name", metric.name).field("value", metric.value);
    json.field("unit", metric.unit).field("test", metric.test);
    json.key("declared");
    if (std::isnan(metric.declared)) {
      json.null();
    } else {
      json.value(metric.declared);
    }
    json.end_object();
  }
  json.end_array();
  json.end_object();
}

}  // namespace

std::string certification_json(const RunRecord& run) {
  JsonWriter json;
  json.begin_object();
  json.field("record_version", kRecordVersion);
  json.field("verdict", run.passed() ? "pass" : "fail");
  json.field("suite_version", run.suite_version);
  json.field("abi_version", run.abi_version);
  json.field("hal_version", run.hal_version);
  json.field("command", run.command);
  json.field("started_utc", run.started_utc);
  json.field("duration_s", run.duration_s);
  json.key("devices").begin_array();
  for (const DeviceCertification& device : run.devices) write_device(json, device);
  json.end_array();
  json.key("plugins_without_devices").begin_array();
  for (const PluginWithoutDevices& plugin : run.plugins_without_devices) {
    json.begin_object();
    json.field("name", plugin.name).field("path", plugin.path).field("reason", plugin.reason);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.text() + "\n";
}

bool write_file(const std::string& path, const std::string& text) {
  // The library's rule for a file at a path the user gave
  // (hal_util/secure_file.hpp): no planted link followed, no FIFO waited on.
  std::string why;
  if (hal::util::write_user_file(path, text.data(), text.size(), why)) return true;
  std::fprintf(stderr, "halconform: %s\n", why.c_str());
  return false;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // XML 1.0 has no representation for most control characters.
        out += (c < 0x20 && c != '\n' && c != '\t') ? ' ' : static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace halconform
