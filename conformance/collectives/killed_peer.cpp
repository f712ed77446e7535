// collectives.process.killed_peer: ranks in separate processes over the
// unique-id (TCP store) bootstrap; one is killed with SIGKILL mid-run and
// every survivor must fail with an error instead of hanging. The helper
// ranks are this halconform binary re-executed (`--collective-rank`), never
// a fork; the scenario (processes.hpp) is shared with tests/collectives.
#include <limits.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.hpp"
#include "collectives_common.hpp"
#include "context.hpp"
#include "processes.hpp"

namespace halconform {
namespace {

constexpr uint32_t kRanks = 3;
constexpr uint32_t kVictim = 2;
constexpr uint32_t kDeadlineMs = 5000;

std::string plugin_path_of(const TestContext& ctx) {
  uint32_t count = 0;
  HC_OK(hal_plugin_report_count(&count));
  for (uint32_t i = 0; i < count; ++i) {
    hal_plugin_report_t report{};
    report.struct_size = sizeof(report);
    HC_OK(hal_plugin_report_get(i, &report));
    if (report.outcome == HAL_PLUGIN_LOADED && report.name != nullptr &&
        std::strcmp(report.name, ctx.properties().plugin) == 0) {
      return report.path;
    }
  }
  fail(strf("no loaded plugin named \"%s\" in the load report", ctx.properties().plugin));
}

// Kills and reaps whatever helper is still running when the test ends early.
struct Helpers {
  std::vector<pid_t> pids;
  ~Helpers() {
    for (pid_t pid : pids) {
      if (pid > 0) coll_test::wait_process(pid, std::chrono::steady_clock::now());
    }
  }
};

}  // namespace

// `halconform --collective-rank <plugin> <device> <id> <rank> <n> <victim>`:
// one helper rank of the killed-peer test; exit 0 when it saw what it had to.
int run_collective_rank(int argc, char** argv) {
  if (argc != 8) return 2;
  hal_init_options_t init = HAL_INIT_OPTIONS_INIT;
  init.plugins = argv[2];
  init.skip_default_search = 1;
  if (hal_init(&init) != HAL_SUCCESS) return 3;
  coll_test::Rank self;
  hal_comm_unique_id_t id{};
  self.rank = static_cast<uint32_t>(std::atoi(argv[5]));
  const auto n = static_cast<uint32_t>(std::atoi(argv[6]));
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = kDeadlineMs;
  int status = 4;
  if (hal_device_get(static_cast<uint32_t>(std::atoi(argv[3])), &self.device) == HAL_SUCCESS &&
      coll_test::parse_id(argv[4], id) &&
      hal_comm_init_rank(self.device, n, &id, self.rank, &config, &self.comm) == HAL_SUCCESS) {
    if (hal_stream_create(self.device, 0, &self.stream) == HAL_SUCCESS) {
      const std::string failure =
          coll_test::run_kill(self, static_cast<uint32_t>(std::atoi(argv[7])));
      if (!failure.empty()) std::fprintf(stderr, "rank %u: %s\n", self.rank, failure.c_str());
      status = failure.empty() ? 0 : 1;
      hal_stream_destroy(self.stream);
    }
    hal_comm_abort(self.comm);
  }
  hal_shutdown();
  return status;
}

HALCONFORM_TEST("collectives.process.killed_peer",
                "ranks in separate processes (unique-id bootstrap): a peer killed mid-run is an "
                "error, not a hang, in every survivor",
                {}) {
  char exe[PATH_MAX] = {};
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  HC_REQUIRE(length > 0, std::string("cannot find this halconform binary to re-execute"));
  const std::string plugin = plugin_path_of(ctx);
  uint32_t device_index = 0;
  for (uint32_t i = 0; i < ctx.plugin_devices().size(); ++i) {
    if (ctx.plugin_devices()[i] == ctx.device()) device_index = i;
  }
  hal_comm_unique_id_t id{};
  HC_OK(hal_comm_get_unique_id(&id));
  Helpers helpers;
  for (uint32_t rank = 1; rank < kRanks; ++rank) {
    const pid_t pid = coll_test::spawn_process(
        {exe, "--collective-rank", plugin, std::to_string(device_index), coll_test::hex_id(id),
         std::to_string(rank), std::to_string(kRanks), std::to_string(kVictim)});
    HC_REQUIRE(pid > 0, strf("starting helper rank %u failed", rank));
    helpers.pids.push_back(pid);
  }
  coll_test::Rank self{nullptr, nullptr, ctx.device(), 0};
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = kDeadlineMs;
  HC_OK(hal_comm_init_rank(ctx.device(), kRanks, &id, 0, &config, &self.comm));
  std::string failure;
  if (hal_result_t r = hal_stream_create(ctx.device(), 0, &self.stream); r != HAL_SUCCESS) {
    failure = std::string("hal_stream_create: ") + hal_result_string(r);
  } else {
    failure = coll_test::run_kill(self, kVictim);
    hal_stream_destroy(self.stream);
  }
  hal_comm_abort(self.comm);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<int> codes;
  for (pid_t& pid : helpers.pids) {
    codes.push_back(coll_test::wait_process(pid, deadline));
    pid = -1;
  }
  if (!failure.empty()) fail(strf("through %s, rank 0: %s", collective_path(ctx), failure.c_str()));
  HC_REQUIRE(codes[0] == 0, strf("through %s, surviving helper rank 1 exited %d (-1: hung)",
                                 collective_path(ctx), codes[0]));
  HC_REQUIRE(codes[1] == 128 + SIGKILL,
             strf("helper rank %u exited %d, want killed by SIGKILL", kVictim, codes[1]));
  ctx.note(strf("through %s; %u processes, rank %u killed, both survivors failed without hanging",
                collective_path(ctx), kRanks, kVictim));
}

}  // namespace halconform
