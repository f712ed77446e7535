// One rank of a multi-process collective test; the same program runs under
// mpirun (MPI bootstrap, the cpu plugin's MPI path) and as a child of
// multiprocess_test (unique-id bootstrap, the loader's TCP-store path).
//
//   collectives_worker mpi                      the matrix over MPI_COMM_WORLD
//   collectives_worker store <id-hex> <rank> <n>            the matrix
//   collectives_worker store <id-hex> <rank> <n> kill <k>   rank k dies mid-run;
//                                                 every survivor must fail
// Exit status 0 means the rank saw what it had to.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness.hpp"

using namespace coll_test;

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "collectives_worker: %s\n", why.c_str());
  return 1;
}

bool parse_id(const std::string& hex, hal_comm_unique_id_t& id) {
  if (hex.size() != 2 * sizeof(id.bytes)) return false;
  for (size_t i = 0; i < sizeof(id.bytes); ++i) {
    id.bytes[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return true;
}

int run_matrix(Rank& self, uint32_t n, bool all_ops) {
  std::vector<Rank> ranks{self};
  for (const Case& c : matrix(n, 7000 + n)) {
    if (!all_ops && c.op != HAL_REDUCE_SUM && c.op != HAL_REDUCE_MAX) continue;
    if (std::string failure = run_case(c, ranks, n); !failure.empty()) {
      return fail(c.label() + ": " + failure);
    }
  }
  return 0;
}

// Rank |victim| dies before the third allreduce; the others must see an error
// (a failed stream and HAL_ERROR_REMOTE or HAL_ERROR_TIMEOUT) instead of hanging.
int run_kill(Rank& self, uint32_t victim) {
  Buffer buffer(self.device, 1024);
  for (int round = 0; round < 3; ++round) {
    if (round == 2 && self.rank == victim) {
      // Let the peers finish round 1 first: a rank killed while the store
      // still reads its last messages would fail round 1 for them, which is
      // right but not what this test is about.
      usleep(200 * 1000);
      raise(SIGKILL);
    }
    const hal_result_t issued = hal_allreduce(buffer.get(), buffer.get(), 256, HAL_DTYPE_F32,
                                              HAL_REDUCE_SUM, self.comm, self.stream);
    const hal_result_t synced =
        issued == HAL_SUCCESS ? hal_stream_synchronize(self.stream) : issued;
    if (round < 2 && synced != HAL_SUCCESS) return fail("an early round failed");
    if (round == 2) {
      hal_result_t error = HAL_SUCCESS;
      hal_comm_get_async_error(self.comm, &error);
      if (synced == HAL_SUCCESS) return fail("a survivor succeeded with a dead peer");
      std::printf("rank %u saw %s / %s\n", self.rank, hal_result_string(synced),
                  hal_result_string(error));
      return synced == HAL_ERROR_REMOTE || synced == HAL_ERROR_TIMEOUT ||
                     error == HAL_ERROR_REMOTE || error == HAL_ERROR_TIMEOUT
                 ? 0
                 : fail("unexpected error kind");
    }
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: collectives_worker mpi | store <id> <rank> <n> [kill <k>]");
  const std::string mode = argv[1];
  if (hal_init(nullptr) != HAL_SUCCESS) return fail(hal_error_last_message());
  Rank self;
  if (hal_device_get(0, &self.device) != HAL_SUCCESS) return fail("no device");
  uint32_t n = 0;
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = 20000;
  hal_comm_unique_id_t id{};
  if (mode == "mpi") {
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (rank == nullptr || size == nullptr) return fail("not started by Open MPI's mpirun");
    self.rank = static_cast<uint32_t>(std::atoi(rank));
    n = static_cast<uint32_t>(std::atoi(size));
    config.bootstrap = HAL_COMM_BOOTSTRAP_MPI;
  } else if (mode == "store" && argc >= 5 && parse_id(argv[2], id)) {
    self.rank = static_cast<uint32_t>(std::atoi(argv[3]));
    n = static_cast<uint32_t>(std::atoi(argv[4]));
    if (argc >= 7) config.timeout_ms = 5000;  // a kill test fails fast either way
  } else {
    return fail("bad arguments");
  }
  if (hal_comm_init_rank(self.device, n, &id, self.rank, &config, &self.comm) != HAL_SUCCESS) {
    return fail(std::string("init: ") + hal_error_last_message());
  }
  if (hal_stream_create(self.device, 0, &self.stream) != HAL_SUCCESS) return fail("stream");
  int status = 0;
  if (argc >= 7 && std::string(argv[5]) == "kill") {
    status = run_kill(self, static_cast<uint32_t>(std::atoi(argv[6])));
  } else {
    status = run_matrix(self, n, mode == "mpi");
  }
  hal_stream_destroy(self.stream);
  if (status == 0)
    hal_comm_destroy(self.comm);
  else
    hal_comm_abort(self.comm);
  hal_shutdown();
  return status;
}
