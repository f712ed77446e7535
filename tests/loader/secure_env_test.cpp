// A setuid/setgid program must not let its caller steer HAL (SPEC §12, §15):
// in a secure-execution (AT_SECURE) process every HAL_* variable is ignored.
// The probe is copied, given to another group and made setgid, which makes
// the kernel set AT_SECURE at exec while the effective user (and so what the
// probe can read) stays the same.
#include "test_support.hpp"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

using namespace loader_test;
namespace fs = std::filesystem;

namespace {

// A group other than our effective one that we may give a file to: any group
// as root, else one of our supplementary groups. -1 when there is none.
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

struct ProbeRun {
  unsigned long at_secure = 99;
  std::string init;
  unsigned reports = 0;
  bool parsed = false;
};

// Runs |probe| with a clean environment plus |variables|.
ProbeRun run_probe(const std::string& probe, const std::string& variables) {
  // No leak check in the probe: LeakSanitizer cannot trace a setgid process.
  const std::string command = "env -i PATH=/usr/bin:/bin ASAN_OPTIONS=detect_leaks=0 " + variables +
                              " '" + probe + "' 2>&1";
  ProbeRun run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[512] = {};
  char init[128] = {};
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    if (std::sscanf(line, "at_secure=%lu init=%127s reports=%u", &run.at_secure, init,
                    &run.reports) == 3) {
      run.parsed = true;
      run.init = init;
    } else {
      UNSCOPED_INFO("probe: " << line);
    }
  }
  pclose(pipe);
  return run;
}

}  // namespace

TEST_CASE("an AT_SECURE process ignores HAL_PLUGIN_PATH, HAL_PLUGINS and HAL_TRACE",
          "[discovery]") {
  const gid_t group = another_group();
  if (group == static_cast<gid_t>(-1)) {
    WARN("SKIPPED: not root and no supplementary group to make a setgid probe with");
    return;
  }
  fs::create_directories(HAL_TEST_SCRATCH_DIR);
  std::string scratch = std::string(HAL_TEST_SCRATCH_DIR) + "/secure_env_XXXXXX";
  REQUIRE(mkdtemp(scratch.data()) != nullptr);
  REQUIRE(chmod(scratch.c_str(), 0755) == 0);
  const std::string probe = scratch + "/secure_env_probe";
  fs::copy_file(HAL_TEST_SECURE_PROBE, probe);
  REQUIRE(chown(probe.c_str(), static_cast<uid_t>(-1), group) == 0);
  REQUIRE(chmod(probe.c_str(), 02755) == 0);  // after chown, which clears set-id bits

  const std::string trace = scratch + "/trace.json";
  const std::string steer = "HAL_PLUGIN_PATH='" + kPluginDir + "' HAL_TRACE='" + trace + "'";

  // Controls: the plain probe honours the variables, so the test can tell.
  const ProbeRun plain = run_probe(HAL_TEST_SECURE_PROBE, steer);
  REQUIRE(plain.parsed);
  CHECK(plain.at_secure == 0);
  CHECK(plain.init == "HAL_SUCCESS");
  CHECK(plain.reports == 2);
  CHECK(fs::exists(trace));
  fs::remove(trace);
  const ProbeRun plain_list = run_probe(HAL_TEST_SECURE_PROBE, "HAL_PLUGINS=nonesuch");
  REQUIRE(plain_list.parsed);
  CHECK(plain_list.init == "HAL_ERROR_PLUGIN_LOAD");

  const ProbeRun secure = run_probe(probe, steer + " HAL_PLUGINS=nonesuch");
  if (!secure.parsed || secure.at_secure != 1) {
    WARN("SKIPPED: the setgid probe did not run in secure-execution mode (nosuid mount?)");
  } else {
    CHECK(secure.init == "HAL_SUCCESS");  // HAL_PLUGINS=nonesuch would have failed it
    CHECK(secure.reports == 0);           // HAL_PLUGIN_PATH would have added two
    CHECK_FALSE(fs::exists(trace));       // HAL_TRACE would have created it
  }
  std::error_code error;
  fs::remove_all(scratch, error);
}
