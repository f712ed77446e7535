// Collectives between processes launched without mpirun: this test makes a
// unique id (its process serves the TCP store) and starts one worker per
// rank. The MPI path runs under mpirun as separate CTest entries.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "matrix_ranks.hpp"
#include "processes.hpp"

using namespace coll_test;

namespace {

// Starts |n| workers with |extra| arguments and returns their exit codes; a
// worker still running after |limit| is killed and counts as a hang (-1).
std::vector<int> run_workers(uint32_t n, const std::vector<std::string>& extra,
                             std::chrono::seconds limit) {
  hal_comm_unique_id_t id{};
  REQUIRE(hal_comm_get_unique_id(&id) == HAL_SUCCESS);
  const std::string id_text = hex_id(id);
  std::vector<pid_t> pids;
  for (uint32_t rank = 0; rank < n; ++rank) {
    std::vector<std::string> args = {HAL_TEST_WORKER, "store", id_text, std::to_string(rank),
                                     std::to_string(n)};
    args.insert(args.end(), extra.begin(), extra.end());
    const pid_t pid = spawn_process(args);
    REQUIRE(pid > 0);
    pids.push_back(pid);
  }
  std::vector<int> codes(n, -1);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (uint32_t i = 0; i < n; ++i) codes[i] = wait_process(pids[i], deadline);
  return codes;
}

struct RankSession {
  RankSession() { REQUIRE(hal_init(nullptr) == HAL_SUCCESS); }
  ~RankSession() { hal_shutdown(); }
};

}  // namespace

// Ranks of one host that met over the store: the cpu plugin runs them
// through shared memory (its log line says so).
TEST_CASE("TCP store: the matrix over 2..4 processes (3 under TSan)", "[multiprocess]") {
  RankSession session;
  for (uint32_t n = 2; n <= kMatrixMaxRanks; ++n) {
    INFO(n << " processes");
    for (int code : run_workers(n, {"expect", "shm"}, std::chrono::seconds(240))) {
      CHECK(code == 0);
    }
  }
}

// HAL_COMM_SHM=0: the plugin declines and the loader's host-staged path
// over the store serves the ranks.
TEST_CASE("TCP store: the matrix host-staged with HAL_COMM_SHM=0", "[multiprocess]") {
  RankSession session;
  struct ShmOff {  // the workers inherit it; unset again however the case ends
    ShmOff() { ::setenv("HAL_COMM_SHM", "0", 1); }
    ~ShmOff() { ::unsetenv("HAL_COMM_SHM"); }
  } shm_off;
  // 3 processes only (the shared-memory matrix runs 2..4): an odd ring, and
  // the host-staged path's store round trips make each process count cost.
  for (uint32_t n : {3u}) {
    INFO(n << " processes");
    for (int code : run_workers(n, {"expect", "staged"}, std::chrono::seconds(240))) {
      CHECK(code == 0);
    }
  }
}

// HAL_COLL_PATH=host-staged (SPEC §13.8): the loader serves the ranks
// without asking the plugin, which would serve them through shared memory;
// every kind of the matrix, against the reference, over 2 processes.
TEST_CASE("TCP store: the matrix with HAL_COLL_PATH=host-staged", "[multiprocess]") {
  RankSession session;
  struct Forced {  // the workers inherit it; unset again however the case ends
    Forced() { ::setenv("HAL_COLL_PATH", "host-staged", 1); }
    ~Forced() { ::unsetenv("HAL_COLL_PATH"); }
  } forced;
  for (int code : run_workers(2, {}, std::chrono::seconds(240))) CHECK(code == 0);
}

TEST_CASE("TCP store: a killed rank is an error in every survivor", "[multiprocess][kill]") {
  RankSession session;
  for (uint32_t n : {2u, 3u}) {
    INFO(n << " processes, rank 1 killed");
    const std::vector<int> codes = run_workers(n, {"kill", "1"}, std::chrono::seconds(60));
    for (uint32_t rank = 0; rank < n; ++rank) {
      if (rank == 1) {
        CHECK(codes[rank] == 128 + SIGKILL);
      } else {
        CHECK(codes[rank] == 0);
      }
    }
  }
}

TEST_CASE("unique id and init_rank reject bad input", "[multiprocess][errors]") {
  RankSession session;
  hal_device_t device = nullptr;
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  hal_comm_unique_id_t id{};
  hal_comm_t comm = nullptr;
  CHECK(hal_comm_get_unique_id(nullptr) == HAL_ERROR_NULL_POINTER);
  CHECK(hal_comm_init_rank(device, 2, &id, 0, nullptr, &comm) == HAL_ERROR_INVALID_ARGUMENT);
  REQUIRE(hal_comm_get_unique_id(&id) == HAL_SUCCESS);
  CHECK(hal_comm_init_rank(device, 2, &id, 2, nullptr, &comm) == HAL_ERROR_INVALID_ARGUMENT);
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = 200;
  // Nobody else joins: the deadline, not a hang.
  CHECK(hal_comm_init_rank(device, 2, &id, 0, &config, &comm) == HAL_ERROR_TIMEOUT);
  config.bootstrap = HAL_COMM_BOOTSTRAP_TCP_STORE;
  config.store_address = "not an address";
  CHECK(hal_comm_init_rank(device, 2, &id, 0, &config, &comm) == HAL_ERROR_INVALID_ARGUMENT);
  // The fixed-session store needs the job's secret.
  config.store_address = "127.0.0.1:0";
  ::unsetenv("HAL_COMM_STORE_SECRET");
  ::unsetenv("HAL_COMM_STORE_SECRET_FILE");
  CHECK(hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm) == HAL_ERROR_INVALID_ARGUMENT);
  ::setenv("HAL_COMM_STORE_SECRET", "short", 1);
  CHECK(hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm) == HAL_ERROR_INVALID_ARGUMENT);
  ::setenv("HAL_COMM_STORE_SECRET",
           "44a383c747a6dd9f1306c94593ccc81fbb44f73f4d5672b996b5dedc1eebccdf", 1);
  // One rank alone is a whole communicator.
  REQUIRE(hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm) == HAL_SUCCESS);
  uint32_t count = 0;
  CHECK(hal_comm_count(comm, &count) == HAL_SUCCESS);
  CHECK(count == 1);
  CHECK(hal_comm_destroy(comm) == HAL_SUCCESS);
  ::unsetenv("HAL_COMM_STORE_SECRET");
}
