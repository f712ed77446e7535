// Unit tests of halconform's harness pieces that need no device: globs,
// known-failure data, the worker pipe protocol, JSON quoting, the record's layout.
#include <catch2/catch.hpp>

#include "expectations.hpp"
#include "json_writer.hpp"
#include "protocol.hpp"
#include "registry.hpp"
#include "reports.hpp"

using namespace halconform;

TEST_CASE("globs match test names, any of a comma-separated list") {
  CHECK(matches_any_glob("core.memory.*", "core.memory.fill"));
  CHECK_FALSE(matches_any_glob("core.memory.*", "core.streams.query"));
  CHECK(matches_any_glob("stress.*,core.events.q*", "core.events.query"));
  CHECK_FALSE(matches_any_glob("", "core.events.query"));
}

TEST_CASE("known-failure files parse entries and reject entries without a reason") {
  std::vector<KnownFailure> entries;
  std::string error;
  REQUIRE(parse_expectations("# comment\n\ncore.events.*  timer is coarse  # tracked\n", entries,
                             error));
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].glob == "core.events.*");
  CHECK(entries[0].reason == "timer is coarse");
  entries.clear();
  CHECK_FALSE(parse_expectations("core.events.timing\n", entries, error));
  CHECK(error.find("line 1") != std::string::npos);
  CHECK(expectations_path_for("/x/hal_plugin_cpu.so") == "/x/hal_plugin_cpu.conformance");
}

TEST_CASE("known failures turn a failure into xfail and a pass into xpass") {
  Expectations expectations{"file", {{"core.a.*", "why"}}};
  std::vector<TestResult> results = {{"core.a.one", "core", "", Status::kFail, 0, "broke"},
                                     {"core.a.two", "core", "", Status::kPass, 0, ""},
                                     {"core.b.one", "core", "", Status::kFail, 0, "broke"},
                                     {"core.a.three", "core", "", Status::kSkip, 0, "n/a"}};
  apply_expectations(expectations, results);
  CHECK(results[0].status == Status::kXfail);
  CHECK(results[1].status == Status::kXpass);
  CHECK(results[2].status == Status::kFail);
  CHECK(results[3].status == Status::kSkip);
  CHECK(breaks_certification(results[1].status));
  CHECK_FALSE(breaks_certification(results[0].status));
}

TEST_CASE("protocol fields survive tabs, newlines and backslashes") {
  const std::string nasty = "a\tb\nc\\d\\t";
  const std::vector<std::string> fields =
      split_record("E\t" + escape_field(nasty) + "\t" + escape_field(""));
  REQUIRE(fields.size() == 3);
  CHECK(fields[1] == nasty);
  CHECK(fields[2].empty());
}

TEST_CASE("JSON strings are escaped and non-finite numbers are null") {
  CHECK(json_quote("a\"b\\c\n\x01") == "\"a\\\"b\\\\c\\n\\u0001\"");
  JsonWriter json;
  json.begin_object().field("x", 1.5).field("nan", NAN).key("list").begin_array().end_array();
  json.end_object();
  CHECK(json.text() == "{\n  \"x\": 1.5,\n  \"nan\": null,\n  \"list\": []\n}");
}

TEST_CASE("one record holds every device of the run, each with its own verdict") {
  RunRecord run;
  run.suite_version = "1.0.0";
  run.started_utc = "2026-01-01T00:00:00Z";
  for (uint32_t index : {0u, 1u, 2u}) {
    DeviceCertification device;
    device.plugin.name = index < 2 ? "cpu" : "opencl";
    device.device_index = index;
    device.profiles = {"core"};
    device.properties.capabilities = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_COLLECTIVES;
    device.properties.module_formats = 1u << HAL_MODULE_FORMAT_HAL_DIALECT;
    device.tests.push_back(TestResult{"core.memory.fill", "core", "", Status::kPass, 0.1, ""});
    if (index == 1) {
      device.tests.push_back(TestResult{"core.memory.copy", "core", "", Status::kFail, 0.1, "x"});
    }
    run.devices.push_back(device);
  }
  const std::string json = certification_json(run);
  CHECK(json.find("\"record_version\": 3") != std::string::npos);
  CHECK(json.find("\"verdict\": \"fail\"") < json.find("\"devices\""));  // the run's verdict
  size_t devices = 0;
  for (size_t at = json.find("\"fingerprint\""); at != std::string::npos;
       at = json.find("\"fingerprint\"", at + 1)) {
    ++devices;
  }
  CHECK(devices == 3);
  CHECK(json.find("\"name\": \"opencl\"") != std::string::npos);
  // Every capability and format by name: no bare numbers such as |256 or |64.
  CHECK(json.find("HAL_DEVICE_CAP_KERNELS|HAL_DEVICE_CAP_COLLECTIVES") != std::string::npos);
  CHECK(json.find("\"module_formats\": \"HAL_MODULE_FORMAT_HAL_DIALECT\"") != std::string::npos);
}
