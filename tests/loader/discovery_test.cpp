// Discovery, ABI negotiation and load reports: the zoo of broken plugins is
// skipped with precise reasons by search and is a loud failure when named.
#include "test_support.hpp"

#include <cstdlib>
#include <cstring>

using namespace loader_test;

namespace {

#define HAL_TEST_TEXT(x) #x
#define HAL_TEST_VERSION_TEXT(major, minor, patch) \
  "ABI is " HAL_TEST_TEXT(major) "." HAL_TEST_TEXT(minor) "." HAL_TEST_TEXT(patch)
// What a refused plugin's reason says of the loader's ABI ("ABI is 1.1.0").
constexpr const char* kLoaderAbiText =
    HAL_TEST_VERSION_TEXT(HAL_ABI_VERSION_MAJOR, HAL_ABI_VERSION_MINOR, HAL_ABI_VERSION_PATCH);

struct ZooCase {
  const char* file_stem;
  hal_plugin_outcome_t outcome;
  hal_result_t result;
  std::vector<std::string> reason_parts;
};

const std::vector<ZooCase>& zoo_cases() {
  static const std::vector<ZooCase> cases = {
      {"notelf", HAL_PLUGIN_FAILED_OPEN, HAL_ERROR_PLUGIN_LOAD, {"hal_plugin_notelf.so"}},
      {"zoo_no_entry",
       HAL_PLUGIN_FAILED_SYMBOL,
       HAL_ERROR_PLUGIN_LOAD,
       {"undefined symbol: hal_plugin_entry"}},
      {"zoo_abi_refused",
       HAL_PLUGIN_FAILED_ABI,
       HAL_ERROR_ABI_MISMATCH,
       {"HAL_ERROR_ABI_MISMATCH", kLoaderAbiText}},
      {"zoo_abi_major2", HAL_PLUGIN_FAILED_ABI, HAL_ERROR_ABI_MISMATCH, {"ABI 2.0.0"}},
      {"zoo_null_table", HAL_PLUGIN_FAILED_ABI, HAL_ERROR_ABI_MISMATCH, {"no function table"}},
      {"zoo_missing_entry",
       HAL_PLUGIN_FAILED_ABI,
       HAL_ERROR_ABI_MISMATCH,
       {"lacks the required entry memcpy_async"}},
      {"zoo_init_fails",
       HAL_PLUGIN_FAILED_INIT,
       HAL_ERROR_DEVICE_LOST,
       {"HAL_ERROR_DEVICE_LOST", "zoo driver is not installed on this machine"}},
      {"zoo_device_count_fails",
       HAL_PLUGIN_FAILED_INIT,
       HAL_ERROR_DEVICE_LOST,
       {"device_count returned HAL_ERROR_DEVICE_LOST", "zoo driver lost its devices"}},
      {"zoo_missing_dependency",
       HAL_PLUGIN_FAILED_OPEN,
       HAL_ERROR_PLUGIN_LOAD,
       {"libzoo_dependency.so", "cannot open shared object file"}},
      {"zoo_too_many_devices",
       HAL_PLUGIN_FAILED_INIT,
       HAL_ERROR_INTERNAL,
       {"device_count reported 4294967295 devices, more than the 4096 a plugin may have"}},
  };
  return cases;
}

}  // namespace

TEST_CASE("a broken plugin found by search is skipped with its reason, good ones still load",
          "[discovery]") {
  Session session(kPluginDir + ":" + kZooDir);
  REQUIRE(session.result == HAL_SUCCESS);

  for (const ZooCase& zoo : zoo_cases()) {
    INFO("plugin file hal_plugin_" << zoo.file_stem << ".so");
    const hal_plugin_report_t report = report_for_file(zoo.file_stem);
    CHECK(report.outcome == zoo.outcome);
    CHECK(report.result == zoo.result);
    CHECK(report.requested == 0);
    CHECK(std::string(report.found_by) == "options");
    CHECK(report.device_count == 0);
    // The plugin's own name once its entry said it, else the file's: the same here.
    CHECK(std::string(report.name) == zoo.file_stem);
    for (const std::string& part : zoo.reason_parts)
      CHECK_THAT(report.reason, Catch::Contains(part));
  }
  // The not-ELF text is whatever this libc says for a short text file.
  const std::string notelf = report_for_file("notelf").reason;
  CHECK((contains(notelf, "file too short") || contains(notelf, "invalid ELF header")));

  const hal_plugin_report_t duplicate = report_for_file("zoo_minimal_copy");
  CHECK(duplicate.outcome == HAL_PLUGIN_SKIPPED_DUPLICATE);
  CHECK(duplicate.result == HAL_SUCCESS);
  CHECK(std::string(duplicate.name) == "minimal");
  CHECK_THAT(duplicate.reason, Catch::Contains("already loaded from " + kPluginDir));

  const hal_plugin_report_t minimal = report_for_file("minimal");
  CHECK(minimal.outcome == HAL_PLUGIN_LOADED);
  CHECK(minimal.result == HAL_SUCCESS);
  CHECK(std::string(minimal.reason).empty());
  CHECK(std::string(minimal.version) == "1.0");
  CHECK(std::string(minimal.vendor) == "HAL tests");
  CHECK(minimal.abi_version == HAL_ABI_VERSION);
  CHECK(minimal.device_count == 1);
  CHECK(report_for_file("mock").device_count == 2);

  uint32_t devices = 0;
  REQUIRE(hal_device_count(&devices) == HAL_SUCCESS);
  CHECK(devices == 3);
  // Global indices follow plugin load order (minimal sorts before mock).
  CHECK(properties_of(device_of("minimal")).index == 0);
  CHECK(properties_of(device_of("mock", 1)).index == 2);
}

TEST_CASE("a broken plugin named explicitly makes hal_init fail and unloads everything",
          "[discovery]") {
  for (const ZooCase& zoo : zoo_cases()) {
    const std::string path = kZooDir + "/hal_plugin_" + zoo.file_stem + ".so";
    const std::string list = kPluginDir + "/hal_plugin_mock.so," + path;
    INFO("HAL plugins list " << list);
    {
      Session session(kPluginDir, list.c_str());
      CHECK(session.result == HAL_ERROR_PLUGIN_LOAD);
      const Detail detail = last_detail();
      CHECK(detail.result == HAL_ERROR_PLUGIN_LOAD);
      CHECK(detail.function == "hal_init");
      CHECK(detail.plugin == "loader");
      CHECK_THAT(detail.message,
                 Catch::StartsWith("hal_init: plugin " + path + " (" + path + ", from options) "));
      CHECK_THAT(detail.message, Catch::Contains(zoo.reason_parts.front()));
    }
    uint32_t count = 0;
    CHECK(hal_device_count(&count) == HAL_ERROR_NOT_INITIALIZED);
  }
}

TEST_CASE("HAL_PLUGINS is exclusive, accepts names and paths, and fails loudly", "[discovery]") {
  SECTION("names resolve in the search directories; only they load") {
    REQUIRE(setenv("HAL_PLUGINS", " mock ", 1) == 0);
    Session session(kPluginDir);
    unsetenv("HAL_PLUGINS");
    REQUIRE(session.result == HAL_SUCCESS);
    const auto all = reports();
    REQUIRE(all.size() == 1);
    CHECK(std::string(all[0].name) == "mock");
    CHECK(std::string(all[0].found_by) == "HAL_PLUGINS");
    CHECK(all[0].requested == 1);
  }
  SECTION("an unknown name fails and says where it looked") {
    REQUIRE(setenv("HAL_PLUGINS", "mock,nonesuch", 1) == 0);
    Session session(kPluginDir);
    unsetenv("HAL_PLUGINS");
    CHECK(session.result == HAL_ERROR_PLUGIN_LOAD);
    const Detail detail = last_detail();
    CHECK_THAT(detail.message,
               Catch::StartsWith("hal_init: plugin nonesuch (no file, from HAL_PLUGINS) was not "
                                 "found: "));
    CHECK_THAT(detail.message, Catch::Contains("no file hal_plugin_nonesuch.so"));
    CHECK_THAT(detail.message, Catch::Contains(kPluginDir));
  }
  SECTION("a name listed twice is a duplicate, not a failure") {
    REQUIRE(setenv("HAL_PLUGINS", "mock,mock", 1) == 0);
    Session session(kPluginDir);
    unsetenv("HAL_PLUGINS");
    REQUIRE(session.result == HAL_SUCCESS);
    const auto all = reports();
    REQUIRE(all.size() == 2);
    CHECK(all[1].outcome == HAL_PLUGIN_SKIPPED_DUPLICATE);
    CHECK(all[1].result == HAL_SUCCESS);
  }
  SECTION("options->plugins overrides HAL_PLUGINS") {
    REQUIRE(setenv("HAL_PLUGINS", "nonesuch", 1) == 0);
    Session session(kPluginDir, "minimal");
    unsetenv("HAL_PLUGINS");
    REQUIRE(session.result == HAL_SUCCESS);
    const auto all = reports();
    REQUIRE(all.size() == 1);
    CHECK(std::string(all[0].found_by) == "options");
  }
}

TEST_CASE("HAL_PLUGIN_PATH is searched after options->plugin_path", "[discovery]") {
  REQUIRE(setenv("HAL_PLUGIN_PATH", (kEmptyDir + "::" + kPluginDir).c_str(), 1) == 0);
  Session session(kEmptyDir);
  unsetenv("HAL_PLUGIN_PATH");
  REQUIRE(session.result == HAL_SUCCESS);
  const hal_plugin_report_t mock = report_for_file("mock");
  CHECK(mock.outcome == HAL_PLUGIN_LOADED);
  CHECK(std::string(mock.found_by) == "HAL_PLUGIN_PATH");
}

TEST_CASE("zero plugins is success with zero devices", "[discovery]") {
  Session session(kEmptyDir);
  REQUIRE(session.result == HAL_SUCCESS);
  uint32_t count = 99;
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  CHECK(hal_plugin_report_count(&count) == HAL_SUCCESS);
  CHECK(count == 0);
  hal_device_t device = nullptr;
  CHECK(hal_device_get(0, &device) == HAL_ERROR_NOT_FOUND);
}

TEST_CASE("the default search finds the build tree's plugin directory", "[discovery]") {
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  REQUIRE(hal_init(&options) == HAL_SUCCESS);
  for (const hal_plugin_report_t& report : reports()) {
    INFO(report.path);
    // Whatever sits next to this libhal.so is found as "build".
    if (std::string(report.path).rfind(HAL_TEST_BUILD_PLUGIN_DIR, 0) == 0) {
      CHECK(std::string(report.found_by) == "build");
    }
  }
  REQUIRE(hal_shutdown() == HAL_SUCCESS);
}

TEST_CASE("hal_init is reference counted", "[init]") {
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.plugin_path = kPluginDir.c_str();
  options.skip_default_search = 1;
  REQUIRE(hal_init(&options) == HAL_SUCCESS);
  // A second init ignores its options: still the same devices.
  hal_init_options_t other = HAL_INIT_OPTIONS_INIT;
  other.plugin_path = kEmptyDir.c_str();
  other.skip_default_search = 1;
  REQUIRE(hal_init(&other) == HAL_SUCCESS);
  uint32_t count = 0;
  REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
  CHECK(count == 3);
  REQUIRE(hal_shutdown() == HAL_SUCCESS);
  CHECK(hal_device_count(&count) == HAL_SUCCESS);
  REQUIRE(hal_shutdown() == HAL_SUCCESS);
  CHECK(hal_device_count(&count) == HAL_ERROR_NOT_INITIALIZED);
  CHECK(hal_shutdown() == HAL_ERROR_NOT_INITIALIZED);
  CHECK(last_detail().function == "hal_shutdown");
}

TEST_CASE("hal_init rejects options with a too small struct_size", "[init]") {
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.struct_size = sizeof(options) - 8;
  CHECK(hal_init(&options) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(last_detail().message, Catch::Contains("options->struct_size"));
  uint32_t count = 0;
  CHECK(hal_device_count(&count) == HAL_ERROR_NOT_INITIALIZED);
}

TEST_CASE("plugin reports honour struct_size and index range", "[init]") {
  Session session(kPluginDir);
  REQUIRE(session.result == HAL_SUCCESS);
  hal_plugin_report_t report{};
  report.struct_size = sizeof(report) - 1;
  CHECK(hal_plugin_report_get(0, &report) == HAL_ERROR_INVALID_ARGUMENT);
  report.struct_size = sizeof(report);
  CHECK(hal_plugin_report_get(2, &report) == HAL_ERROR_NOT_FOUND);
  CHECK(hal_plugin_report_get(0, nullptr) == HAL_ERROR_NULL_POINTER);
  CHECK(hal_plugin_report_count(nullptr) == HAL_ERROR_NULL_POINTER);
  // A caller struct larger than ours keeps its extra bytes.
  struct {
    hal_plugin_report_t report;
    uint64_t canary;
  } larger{};
  larger.report.struct_size = sizeof(larger);
  larger.canary = 0x1234;
  CHECK(hal_plugin_report_get(0, &larger.report) == HAL_SUCCESS);
  CHECK(larger.report.struct_size == sizeof(larger));
  CHECK(larger.canary == 0x1234);
  CHECK(std::string(larger.report.name) == "minimal");
}
