// collectives.process.killed_peer: ranks in separate processes over the
// unique-id (TCP store) bootstrap; one is killed with SIGKILL mid-run and
// every survivor must fail with an error instead of hanging. As many ranks
// (up to 3, at least 2) as the plugin can place: a device that holds at most
// max_ranks_per_device ranks of a communicator (NCCL: one per GPU) spreads
// them over the plugin's devices, and too few devices skip the test. The helper
// ranks are this halconform binary re-executed (`--collective-rank`), never
// a fork; the scenario (processes.hpp) is shared with tests/collectives.
#include <limits.h>
#include <unistd.h>

#include <algorithm>
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

constexpr uint32_t kMostRanks = 3;
constexpr uint32_t kFewestRanks = 2;  // rank 0 survives, the last is killed
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
  const std::vector<hal_device_t>& devices = ctx.plugin_devices();
  uint32_t device_index = 0;
  for (uint32_t i = 0; i < devices.size(); ++i) {
    if (devices[i] == ctx.device()) device_index = i;
  }
  // How many ranks the plugin can place, and where: all on the device under
  // test when it takes any number, else round-robin from it over the
  // plugin's devices, at most max_ranks_per_device on each.
  const uint32_t per_device = ctx.properties().max_ranks_per_device;
  const uint64_t places =
      per_device == 0 ? kMostRanks : uint64_t{per_device} * static_cast<uint64_t>(devices.size());
  const auto ranks = static_cast<uint32_t>(std::min<uint64_t>(kMostRanks, places));
  if (ranks < kFewestRanks) {
    ctx.skip(
        strf("needs %u ranks in separate processes; the device holds at most %u rank(s) of "
             "a communicator (max_ranks_per_device) and the plugin has %zu device(s)",
             kFewestRanks, per_device, devices.size()));
  }
  const uint32_t victim = ranks - 1;
  const auto device_of = [&](uint32_t rank) {
    return per_device == 0 ? device_index
                           : (device_index + rank) % static_cast<uint32_t>(devices.size());
  };
  hal_comm_unique_id_t id{};
  HC_OK(hal_comm_get_unique_id(&id));
  Helpers helpers;
  for (uint32_t rank = 1; rank < ranks; ++rank) {
    const pid_t pid = coll_test::spawn_process(
        {exe, "--collective-rank", plugin, std::to_string(device_of(rank)), coll_test::hex_id(id),
         std::to_string(rank), std::to_string(ranks), std::to_string(victim)});
    HC_REQUIRE(pid > 0, strf("starting helper rank %u failed", rank));
    helpers.pids.push_back(pid);
  }
  coll_test::Rank self{nullptr, nullptr, ctx.device(), 0};
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = kDeadlineMs;
  HC_OK(hal_comm_init_rank(ctx.device(), ranks, &id, 0, &config, &self.comm));
  std::string failure;
  if (hal_result_t r = hal_stream_create(ctx.device(), 0, &self.stream); r != HAL_SUCCESS) {
    failure = std::string("hal_stream_create: ") + hal_result_string(r);
  } else {
    failure = coll_test::run_kill(self, victim);
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
  for (uint32_t rank = 1; rank < victim; ++rank) {
    HC_REQUIRE(codes[rank - 1] == 0,
               strf("through %s, surviving helper rank %u exited %d (-1: hung)",
                    collective_path(ctx), rank, codes[rank - 1]));
  }
  HC_REQUIRE(codes[victim - 1] == 128 + SIGKILL,
             strf("helper rank %u exited %d, want killed by SIGKILL", victim, codes[victim - 1]));
  ctx.note(
      strf("through %s; %u processes on %u device(s), rank %u killed, %u survivor(s) failed "
           "without hanging",
           collective_path(ctx), ranks,
           per_device == 0 ? 1u : std::min(ranks, static_cast<uint32_t>(devices.size())), victim,
           ranks - 1));
}

}  // namespace halconform
