// Which files discovery agrees to load (SPEC §9.3, §15): only regular files,
// none another local user could have written, never blocking on a FIFO or a
// device; relative entries resolved once at hal_init; empty lists fall back to
// the search; a plugin's device count is capped; HAL_LOG's line format.
#include "test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

using namespace loader_test;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the build tree (not /tmp, which may be noexec),
// removed with its content on scope exit.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    fs::create_directories(HAL_TEST_SCRATCH_DIR);
    std::string pattern = std::string(HAL_TEST_SCRATCH_DIR) + "/plugin_files_XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  ~ScratchDirectory() {
    std::error_code error;
    fs::permissions(path_, fs::perms::owner_all, error);
    fs::remove_all(path_, error);
  }
  const std::string& path() const { return path_; }
  // A copy of the test plugin hal_plugin_minimal.so named hal_plugin_<stem>.so here.
  std::string copy_minimal(const std::string& stem) const {
    const std::string target = path_ + "/hal_plugin_" + stem + ".so";
    fs::copy_file(kPluginDir + "/hal_plugin_minimal.so", target);
    REQUIRE(chmod(target.c_str(), 0755) == 0);
    return target;
  }

 private:
  std::string path_;
};

hal_plugin_report_t only_report() {
  const auto all = reports();
  REQUIRE(all.size() == 1);
  return all[0];
}

}  // namespace

TEST_CASE("a FIFO or device named like a plugin is refused without blocking", "[discovery]") {
  ScratchDirectory scratch;
  const std::string fifo = scratch.path() + "/hal_plugin_fifo.so";
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);

  SECTION("found by search: skipped with the reason, hal_init returns") {
    Session session(scratch.path());
    REQUIRE(session.result == HAL_SUCCESS);
    const hal_plugin_report_t report = only_report();
    CHECK(std::string(report.path) == fifo);
    CHECK(report.outcome == HAL_PLUGIN_FAILED_OPEN);
    CHECK(report.result == HAL_ERROR_PLUGIN_LOAD);
    CHECK_THAT(report.reason, Catch::Contains("is a FIFO, not a regular file"));
  }
  SECTION("named explicitly: a loud failure") {
    for (const std::string& named : {fifo, std::string("/dev/zero"), std::string("/dev/null")}) {
      INFO("named " << named);
      Session session(kEmptyDir, named.c_str());
      CHECK(session.result == HAL_ERROR_PLUGIN_LOAD);
      const Detail detail = last_detail();
      CHECK_THAT(detail.message, Catch::StartsWith("hal_init: plugin " + named));
      CHECK_THAT(detail.message, Catch::Contains("not a regular file"));
    }
  }
  SECTION("a directory named like a plugin is refused when named") {
    const std::string directory = scratch.path() + "/hal_plugin_dir.so";
    REQUIRE(mkdir(directory.c_str(), 0755) == 0);
    Session session(kEmptyDir, directory.c_str());
    CHECK(session.result == HAL_ERROR_PLUGIN_LOAD);
    CHECK_THAT(last_detail().message, Catch::Contains("is a directory, not a regular file"));
  }
}

TEST_CASE("a plugin another local user could have written is refused", "[discovery]") {
  ScratchDirectory scratch;
  const std::string plugin = scratch.copy_minimal("minimal");

  SECTION("control: the same file, safely owned, loads") {
    Session session(scratch.path());
    REQUIRE(session.result == HAL_SUCCESS);
    CHECK(only_report().outcome == HAL_PLUGIN_LOADED);
  }
  SECTION("a world-writable plugin file") {
    REQUIRE(chmod(plugin.c_str(), 0777) == 0);
    {
      Session session(scratch.path());
      REQUIRE(session.result == HAL_SUCCESS);
      const hal_plugin_report_t report = only_report();
      CHECK(report.outcome == HAL_PLUGIN_FAILED_OPEN);
      CHECK(report.result == HAL_ERROR_PLUGIN_LOAD);
      CHECK_THAT(report.reason,
                 Catch::Contains("the plugin file " + plugin + " is world-writable (mode 0777)"));
    }
    Session named(kEmptyDir, plugin.c_str());
    CHECK(named.result == HAL_ERROR_PLUGIN_LOAD);
    CHECK_THAT(last_detail().message, Catch::Contains("is world-writable"));
  }
  SECTION("a world-writable plugin directory, even with the sticky bit") {
    for (const mode_t mode : {mode_t{0777}, mode_t{01777}}) {
      INFO("directory mode " << std::oct << mode);
      REQUIRE(chmod(scratch.path().c_str(), mode) == 0);
      Session session(scratch.path());
      REQUIRE(session.result == HAL_SUCCESS);
      const hal_plugin_report_t report = only_report();
      CHECK(report.outcome == HAL_PLUGIN_FAILED_OPEN);
      CHECK_THAT(report.reason,
                 Catch::Contains("the plugin directory " + scratch.path() + " is world-writable"));
    }
  }
  SECTION("a symbolic link into a world-writable directory") {
    ScratchDirectory safe;
    const std::string link = safe.path() + "/hal_plugin_minimal.so";
    REQUIRE(symlink(plugin.c_str(), link.c_str()) == 0);
    REQUIRE(chmod(scratch.path().c_str(), 0777) == 0);
    Session session(safe.path());
    REQUIRE(session.result == HAL_SUCCESS);
    CHECK_THAT(only_report().reason,
               Catch::Contains("the plugin directory " + scratch.path() + " is world-writable"));
  }
  SECTION("a plugin file or directory owned by another user") {
    if (geteuid() != 0) {
      WARN("not root: cannot give a file to another user; ownership check untested here");
      return;
    }
    REQUIRE(chown(plugin.c_str(), 65534, 65534) == 0);
    {
      Session session(scratch.path());
      REQUIRE(session.result == HAL_SUCCESS);
      CHECK_THAT(only_report().reason,
                 Catch::Contains("the plugin file " + plugin +
                                 " is owned by uid 65534, neither root nor the effective user"));
    }
    REQUIRE(chown(plugin.c_str(), 0, 0) == 0);
    REQUIRE(chown(scratch.path().c_str(), 65534, 65534) == 0);
    Session session(scratch.path());
    REQUIRE(session.result == HAL_SUCCESS);
    CHECK_THAT(only_report().reason, Catch::Contains("the plugin directory " + scratch.path() +
                                                     " is owned by uid 65534"));
  }
}

TEST_CASE("a second plugin of a loaded name is skipped with the reason", "[discovery]") {
  ScratchDirectory first;
  ScratchDirectory second;
  first.copy_minimal("minimal");
  const std::string again = second.copy_minimal("minimal");
  Session session(first.path() + ":" + second.path());
  REQUIRE(session.result == HAL_SUCCESS);
  const auto all = reports();
  REQUIRE(all.size() == 2);
  CHECK(all[0].outcome == HAL_PLUGIN_LOADED);
  CHECK(std::string(all[1].path) == again);
  CHECK(all[1].outcome == HAL_PLUGIN_SKIPPED_DUPLICATE);
  CHECK_THAT(all[1].reason,
             Catch::Contains("a plugin named 'minimal' was already loaded from " + first.path()));
}

TEST_CASE("relative plugin paths are resolved once, at hal_init", "[discovery]") {
  const fs::path plugin_dir(kPluginDir);
  const fs::path saved = fs::current_path();
  fs::current_path(plugin_dir.parent_path());
  const std::string relative_dir = plugin_dir.filename().string();
  const std::string relative_file = "./" + relative_dir + "/hal_plugin_minimal.so";

  for (const char* plugins : {static_cast<const char*>(nullptr), relative_file.c_str()}) {
    INFO("plugins " << (plugins != nullptr ? plugins : "(search)"));
    Session session(relative_dir, plugins);
    fs::current_path("/");  // changes nothing: the paths are already absolute
    REQUIRE(session.result == HAL_SUCCESS);
    const hal_plugin_report_t minimal = report_for_file("minimal");
    CHECK(std::string(minimal.path) == kPluginDir + "/hal_plugin_minimal.so");
    CHECK(minimal.outcome == HAL_PLUGIN_LOADED);
    hal_device_t device = device_of("minimal");
    hal_stream_t stream = nullptr;
    CHECK(hal_stream_create(device, HAL_STREAM_FLAG_NONE, &stream) == HAL_SUCCESS);
    CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
    fs::current_path(plugin_dir.parent_path());
  }
  fs::current_path(saved);
}

TEST_CASE("an explicit list with no entries falls back to the search", "[discovery]") {
  for (const char* list : {"", " ", ",", " , ,"}) {
    INFO("list '" << list << "'");
    SECTION(std::string("options->plugins '") + list + "'") {
      Session session(kPluginDir, list);
      REQUIRE(session.result == HAL_SUCCESS);
      CHECK(reports().size() == 2);
      CHECK(report_for_file("mock").requested == 0);
      CHECK(std::string(report_for_file("mock").found_by) == "options");
    }
    SECTION(std::string("HAL_PLUGINS '") + list + "'") {
      REQUIRE(setenv("HAL_PLUGINS", list, 1) == 0);
      Session session(kPluginDir);
      unsetenv("HAL_PLUGINS");
      REQUIRE(session.result == HAL_SUCCESS);
      CHECK(reports().size() == 2);
      CHECK(report_for_file("minimal").requested == 0);
    }
  }
  SECTION("an empty options->plugins does not hide a set HAL_PLUGINS") {
    REQUIRE(setenv("HAL_PLUGINS", "mock", 1) == 0);
    Session session(kPluginDir, "");
    unsetenv("HAL_PLUGINS");
    REQUIRE(session.result == HAL_SUCCESS);
    const hal_plugin_report_t report = only_report();
    CHECK(std::string(report.found_by) == "HAL_PLUGINS");
    CHECK(report.requested == 1);
  }
}

TEST_CASE("a plugin reporting more devices than the cap is refused", "[discovery]") {
  const std::string path = kZooDir + "/hal_plugin_zoo_too_many_devices.so";
  {
    ScratchDirectory scratch;
    fs::copy_file(path, scratch.path() + "/hal_plugin_zoo_too_many_devices.so");
    Session session(scratch.path());
    REQUIRE(session.result == HAL_SUCCESS);
    const hal_plugin_report_t report = only_report();
    CHECK(report.outcome == HAL_PLUGIN_FAILED_INIT);
    CHECK(report.result == HAL_ERROR_INTERNAL);
    CHECK(report.device_count == 0);
    CHECK_THAT(report.reason, Catch::Contains("device_count reported 4294967295 devices, more "
                                              "than the 4096 a plugin may have"));
    uint32_t count = 1;
    CHECK(hal_device_count(&count) == HAL_SUCCESS);
    CHECK(count == 0);
  }
  Session named(kEmptyDir, path.c_str());
  CHECK(named.result == HAL_ERROR_PLUGIN_LOAD);
  CHECK_THAT(last_detail().message, Catch::Contains("more than the 4096 a plugin may have"));
}

TEST_CASE("HAL_LOG prints one line per candidate and each plugin log line", "[discovery]") {
  ScratchDirectory scratch;
  const std::string list = kPluginDir + "/hal_plugin_mock.so," + kPluginDir + "/hal_plugin_mock.so";
  REQUIRE(setenv("HAL_LOG", "1", 1) == 0);
  const std::string text = capture_stderr([&] {
    {
      Session session(kPluginDir + ":" + kZooDir);
      CHECK(session.result == HAL_SUCCESS);
    }
    Session named(kEmptyDir, list.c_str());
    CHECK(named.result == HAL_SUCCESS);
  });
  REQUIRE(setenv("HAL_LOG", "0", 1) == 0);
  const std::string quiet = capture_stderr([&] {
    Session session(kPluginDir + ":" + kZooDir);
    CHECK(session.result == HAL_SUCCESS);
  });
  CHECK(quiet.empty());

  INFO(text);
  // Every line has the SPEC §12 prefix "hal: <source>: ".
  std::istringstream lines(text);
  size_t count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    INFO(line);
    CHECK(std::regex_match(line, std::regex("hal: [A-Za-z0-9_]+: .*")));
  }
  CHECK(count >= 12);
  const auto has_line = [&](const std::string& pattern) {
    return std::regex_search(text, std::regex(pattern));
  };
  const std::string plugin_dir =
      std::regex_replace(kPluginDir, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
  CHECK(has_line("(^|\n)hal: loader: mock: HAL_PLUGIN_LOADED \\(" + plugin_dir +
                 "/hal_plugin_mock.so, found by options, 2 devices\\)\n"));
  CHECK(
      has_line("(^|\n)hal: loader: zoo_init_fails: HAL_PLUGIN_FAILED_INIT \\([^\n]*"
               "/hal_plugin_zoo_init_fails.so, found by options, 0 devices\\): "
               "hal_plugin_entry returned HAL_ERROR_DEVICE_LOST: zoo driver is not installed"));
  CHECK(
      has_line("(^|\n)hal: loader: minimal: HAL_PLUGIN_SKIPPED_DUPLICATE \\([^\n]*"
               "/hal_plugin_zoo_minimal_copy.so, found by options, 0 devices\\): a plugin named"));
  // A plugin's host->log line: "hal: <plugin>: <level>: <message>".
  CHECK(has_line("(^|\n)hal: zoo_init_fails: info: zoo plugin zoo_init_fails entered\n"));
  CHECK(
      has_line("(^|\n)hal: loader: mock: HAL_PLUGIN_LOADED \\([^\n]*, found by options, 2 "
               "devices\\)\nhal: loader: mock: HAL_PLUGIN_SKIPPED_DUPLICATE"));
}
