// Unit tests of halconform's harness pieces that need no device: globs,
// known-failure data, the worker pipe protocol, JSON quoting, the record's
// layout, the API model read from the headers, the coverage report, the
// description of a hang.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "api_model.hpp"
#include "coverage.hpp"
#include "expectations.hpp"
#include "in_flight.hpp"
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

TEST_CASE("the API model read from the headers holds every function, enum and descriptor") {
  const model::Function* memcpy_async = nullptr;
  for (const model::Function& f : model::functions()) {
    if (std::string_view(f.name) == "hal_memcpy_async") memcpy_async = &f;
  }
  REQUIRE(memcpy_async != nullptr);
  std::vector<std::string> results;
  for (const char* const* r = memcpy_async->results; *r != nullptr; ++r) results.push_back(*r);
  // Its comment's list, and the "A/B" shorthand (INVALID_HANDLE/DESTROYED_HANDLE).
  CHECK(std::count(results.begin(), results.end(), "HAL_ERROR_OUT_OF_BOUNDS") == 1);
  CHECK(std::count(results.begin(), results.end(), "HAL_ERROR_DESTROYED_HANDLE") == 1);
  const model::EnumType* kinds = model::find_enum("hal_memory_kind_t");
  REQUIRE(kinds != nullptr);
  CHECK(kinds->values.size() == 3);  // *_MAX_ENUM is not a value
  CHECK(model::enum_label("hal_dtype_t", HAL_DTYPE_BF16) == "HAL_DTYPE_BF16");
  CHECK(model::enum_label("hal_dtype_t", 99) == "99 (not a hal_dtype_t)");
  const model::EnumType* flags = model::find_enum("hal_event_flag_bits_t");
  REQUIRE(flags != nullptr);
  CHECK(flags->bitmask);
  bool softmax_backward = false;
  for (const model::OpDescriptor& op : model::op_descriptors()) {
    if (std::string_view(op.kind_name) == "HAL_OP_SOFTMAX_BACKWARD") {
      softmax_backward = std::string_view(op.descriptor) == "hal_op_softmax_desc_t";
    }
  }
  CHECK(softmax_backward);
  const model::StructType* launch = model::find_struct("hal_launch_config_t");
  REQUIRE(launch != nullptr);
  CHECK(launch->fields.size() == 6);
}

TEST_CASE("the coverage report: covered, not applicable, waived and uncovered paths") {
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  properties.capabilities = HAL_DEVICE_CAP_HOST_MEMORY;  // no SHARED_MEMORY, no PEER_ACCESS
  std::map<std::string, std::vector<std::string>> recorded = {
      {"core.a", {"memcpy:host->HOST", "result:hal_memcpy_async:HAL_SUCCESS"}},
      {"core.b", {"memcpy:host->HOST", "made:up:path"}}};
  const coverage::DeviceCoverage c = coverage::evaluate(properties, 1, recorded);
  auto status = [&](const std::string& name) {
    for (const coverage::PathResult& p : c.paths) {
      if (p.name == name) return std::string(coverage::path_status_name(p.status));
    }
    return std::string("absent");
  };
  CHECK(status("memcpy:host->HOST") == "covered");
  CHECK(status("memcpy:host->SHARED") == "not_applicable");  // the capability is missing
  CHECK(status("memcpy:peer_DEVICE->DEVICE") == "not_applicable");
  CHECK(status("memcpy:DEVICE->DEVICE") == "uncovered");
  CHECK(status("result:hal_device_count:HAL_ERROR_NOT_INITIALIZED") == "waived");
  CHECK(status("result:hal_memcpy_async:HAL_SUCCESS") == "covered");
  for (const coverage::PathResult& p : c.paths) {
    if (p.name == "memcpy:host->HOST")
      CHECK(p.tests == std::vector<std::string>{"core.a", "core.b"});
  }
  CHECK(c.unlisted == std::vector<std::string>{"made:up:path"});
  CHECK(c.covered + c.uncovered + c.waived + c.not_applicable == c.paths.size());
}

TEST_CASE("a hang names the call in flight, on the test's thread first") {
  InFlightTable table{};
  for (InFlightSlot& slot : table.slots) slot.function.store(kNoCall);
  CHECK(describe_in_flight(table).empty());
  uint32_t synchronize = 0;
  for (size_t i = 0; i < model::functions().size(); ++i) {
    if (std::string_view(model::functions()[i].name) == "hal_stream_synchronize") {
      synchronize = static_cast<uint32_t>(i);
    }
  }
  table.test_thread.store(42);
  table.slots[3].thread_id.store(42);
  table.slots[3].since_ns.store(monotonic_ns() - 5'000'000'000ull);
  table.slots[3].function.store(synchronize);
  const std::string text = describe_in_flight(table);
  CHECK(text.find("hal_stream_synchronize has not returned after 5.") == 0);
  CHECK(text.find("on the test's thread") != std::string::npos);
}
