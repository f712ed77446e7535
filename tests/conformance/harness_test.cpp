// Unit tests of halconform's harness pieces that need no device: globs,
// known-failure data, the worker pipe protocol, JSON quoting, report paths.
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

TEST_CASE("several devices get one report file each") {
  DeviceCertification device;
  device.plugin.name = "cpu";
  device.device_index = 1;
  CHECK(per_device_path("out/run.json", device, 1) == "out/run.json");
  CHECK(per_device_path("out/run.json", device, 2) == "out/run.cpu-1.json");
  CHECK(per_device_path("out.d/run", device, 2) == "out.d/run.cpu-1");
}
