// What a process can be made to load (SPEC §9.2, §15), tested from outside
// in probe processes:
// - libhal opened by a relative path, then a chdir: the plugins found are
//   still those beside libhal, never ones planted in the new directory;
// - a setgid (AT_SECURE) process: the vendor libraries the plugins open do
//   not see the caller's variables (the plugins remove them first), and the
//   same variables do steer a plain process, so the test can tell.
#include "test_support.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace loader_test;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  std::string path;
  explicit Scratch(const char* name) {
    fs::create_directories(HAL_TEST_SCRATCH_DIR);
    std::string pattern = std::string(HAL_TEST_SCRATCH_DIR) + "/" + name + "_XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
    REQUIRE(chmod(path.c_str(), 0755) == 0);  // a setgid probe of another group enters it
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// The lines |command| prints (stdout and stderr).
std::vector<std::string> run(const std::string& command) {
  std::vector<std::string> lines;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[4096];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    std::string text = line;
    if (!text.empty() && text.back() == '\n') text.pop_back();
    lines.push_back(text);
  }
  pclose(pipe);
  return lines;
}

// A group other than our effective one that we may give a file to (see
// secure_env_test.cpp); -1 when there is none.
gid_t another_group() {
  if (geteuid() == 0) return getegid() == 65534 ? 65533 : 65534;
  const int count = getgroups(0, nullptr);
  std::vector<gid_t> groups(count > 0 ? static_cast<size_t>(count) : 0);
  if (count > 0 && getgroups(count, groups.data()) == count) {
    for (const gid_t group : groups)
      if (group != getegid()) return group;
  }
  return static_cast<gid_t>(-1);
}

struct VendorProbe {
  unsigned long at_secure = 99;
  std::string init;
  std::map<std::string, unsigned> devices;     // loaded plugin -> device count
  std::map<std::string, std::string> reasons;  // loaded plugin -> its report's reason
  std::map<std::string, std::string> value;    // variable -> its value after hal_init, or "unset"
};

VendorProbe run_vendor_probe(const std::string& probe, const std::string& variables,
                             const std::vector<std::string>& names) {
  std::string command =
      "env -i PATH=/usr/bin:/bin ASAN_OPTIONS=detect_leaks=0 " + variables + " '" + probe + "'";
  for (const std::string& name : names) command += " " + name;
  VendorProbe result;
  for (const std::string& line : run(command)) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word.rfind("at_secure=", 0) == 0) {
      result.at_secure = std::stoul(word.substr(10));
      in >> word;
      result.init = word.substr(5);
    } else if (word == "plugin") {
      std::string name;
      unsigned count = 0;
      in >> name >> count;
      std::string reason;
      std::getline(in, reason);
      result.devices[name] = count;
      result.reasons[name] = reason;
    } else if (word == "variable") {
      std::string name, state;
      in >> name >> state;
      if (state == "=") in >> state;
      result.value[name] = state;
    } else {
      UNSCOPED_INFO("probe: " << line);
    }
  }
  return result;
}

}  // namespace

TEST_CASE("libhal opened by a relative path finds its plugins beside it after a chdir",
          "[discovery][security]") {
  // A plugin planted where "./hal/plugins" points after the chdir.
  Scratch elsewhere("relative_load");
  fs::create_directories(elsewhere.path + "/hal/plugins");
  fs::copy_file(kPluginDir + "/hal_plugin_minimal.so",
                elsewhere.path + "/hal/plugins/hal_plugin_minimal.so");
  const std::string library_dir = fs::path(HAL_TEST_LIBHAL).parent_path().string();
  const std::vector<std::string> lines =
      run(std::string("env HAL_PLUGINS= HAL_PLUGIN_PATH= '") + HAL_TEST_RELATIVE_PROBE + "' '" +
          library_dir + "' '" + elsewhere.path + "'");
  bool initialised = false;
  size_t from_build = 0;
  for (const std::string& line : lines) {
    INFO(line);
    initialised = initialised || line == "init 0";
    CHECK(line.find(elsewhere.path) == std::string::npos);  // nothing from the new directory
    if (line.rfind("report build " + fs::canonical(HAL_TEST_BUILD_PLUGIN_DIR).string(), 0) == 0)
      ++from_build;
  }
  CHECK(initialised);
  CHECK(from_build > 0);  // the build tree's plugins, found by libhal's real directory
}

TEST_CASE(
    "in an AT_SECURE process the plugins' vendor libraries do not see the caller's "
    "variables",
    "[discovery][security]") {
  const gid_t group = another_group();
  if (group == static_cast<gid_t>(-1)) {
    WARN("SKIPPED: not root and no supplementary group to make a setgid probe with");
    return;
  }
  Scratch scratch("vendor_env");
  const std::string probe = scratch.path + "/vendor_env_probe";
  fs::copy_file(HAL_TEST_VENDOR_PROBE, probe);
  REQUIRE(chown(probe.c_str(), static_cast<uid_t>(-1), group) == 0);
  REQUIRE(chmod(probe.c_str(), 02755) == 0);  // after chown, which clears set-id bits
  const std::string no_vendors = scratch.path + "/no-vendors";  // an OpenCL ICD directory, empty
  fs::create_directories(no_vendors);
  REQUIRE(chmod(no_vendors.c_str(), 0755) == 0);

  // What a caller of a setuid program could set: a driver or ICD directory
  // of its own for the loaders, libraries for tools and plugins to load, and
  // one variable no plugin declares (it stays).
  const std::map<std::string, std::string> planted = {
      {"OCL_ICD_VENDORS", no_vendors},
      {"OPENCL_VENDOR_PATH", no_vendors},
      {"POCL_BUILDING", "1"},
      {"HSA_TOOLS_LIB", "/nonexistent/libtool.so"},
      {"ROCM_PATH", "/nonexistent"},
      {"CUDA_INJECTION64_PATH", "/nonexistent/libinject.so"},
      {"NCCL_NET_PLUGIN", "/nonexistent/libnet.so"},
      {"ONEDNN_JIT_DUMP", "1"},
      {"OMPI_MCA_mca_base_component_path", "/nonexistent"},
      {"HWLOC_PLUGINS_PATH", "/nonexistent"},
      {"NOT_A_VENDOR_VARIABLE", "1"},
#ifdef HAL_TEST_FAKE_ZE
      {"ZE_ENABLE_ALT_DRIVERS", HAL_TEST_FAKE_ZE},
#else
      {"ZE_ENABLE_ALT_DRIVERS", "/nonexistent/libze_none.so"},
#endif
  };
  std::vector<std::string> names;
  std::string variables;
  for (const auto& [name, value] : planted) {
    names.push_back(name);
    variables += " " + name + "='" + value + "'";
  }

  // Controls: a plain process honours the variables (and its OpenCL finds
  // PoCL without them), so the secure run can be told apart.
  const VendorProbe unsteered = run_vendor_probe(HAL_TEST_VENDOR_PROBE, "", {});
  const VendorProbe plain = run_vendor_probe(HAL_TEST_VENDOR_PROBE, variables, names);
  REQUIRE(plain.init == "HAL_SUCCESS");
  CHECK(plain.at_secure == 0);
  for (const auto& [name, value] : planted) CHECK(plain.value.at(name) == value);
  const VendorProbe secure = run_vendor_probe(probe, variables, names);
  if (secure.at_secure != 1) {
    WARN("SKIPPED: the setgid probe did not run in secure-execution mode (nosuid mount?)");
    return;
  }
  REQUIRE(secure.init == "HAL_SUCCESS");
  // Every declared variable is gone before a vendor library could read it
  // (a library may set one again to a value of its own); the undeclared one
  // is left alone.
  for (const auto& [name, value] : planted) {
    CAPTURE(name, secure.value.at(name));
    if (name == "NOT_A_VENDOR_VARIABLE") {
      CHECK(secure.value.at(name) == value);
    } else {
      CHECK(secure.value.at(name) != value);
    }
  }
  // What the vendor libraries did with them.
  if (unsteered.devices.count("opencl") != 0 && unsteered.devices.at("opencl") > 0) {
    CHECK(plain.devices.at("opencl") == 0);  // the empty ICD directory
    CHECK(secure.devices.at("opencl") == unsteered.devices.at("opencl"));  // /etc/OpenCL/vendors
  }
#ifdef HAL_TEST_FAKE_ZE
  if (plain.devices.count("level_zero") != 0) {
    CHECK(plain.devices.at("level_zero") > 0);    // the planted driver ran
    CHECK(secure.devices.at("level_zero") == 0);  // it did not
  }
#endif
  // Each plugin that removed some says so in its load report (its reason,
  // unless a later warning took its place).
  bool said = false;
  for (const auto& [name, reason] : secure.reasons) {
    said = said || reason.find("secure execution (AT_SECURE): ") != std::string::npos;
  }
  CHECK(said);
}
