// One rank of a multi-process collective test; the same program runs under
// mpirun (MPI bootstrap, the cpu plugin's MPI path) and as a child of
// multiprocess_test (unique-id bootstrap, the loader's TCP-store path).
//
//   collectives_worker mpi                      the matrix over MPI_COMM_WORLD
//   collectives_worker store <id-hex> <rank> <n>            the matrix
//   collectives_worker store <id-hex> <rank> <n> kill <k>   rank k dies mid-run;
//                                                 every survivor must fail
// Exit status 0 means the rank saw what it had to.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "processes.hpp"

using namespace coll_test;

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "collectives_worker: %s\n", why.c_str());
  return 1;
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
    const std::string failure = run_kill(self, static_cast<uint32_t>(std::atoi(argv[6])));
    status = failure.empty() ? 0 : fail(failure);
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
