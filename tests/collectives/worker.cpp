// One rank of a multi-process collective test; the same program runs under
// mpirun (MPI bootstrap, the cpu plugin's MPI path) and as a child of
// multiprocess_test (unique-id bootstrap, the loader's TCP-store path).
//
//   collectives_worker mpi                      the matrix (collectives, then MoE
//                                               dispatch/combine) over MPI_COMM_WORLD,
//                                               then the shared segment's failures
//   collectives_worker store <id-hex> <rank> <n>            the matrix
//   collectives_worker store <id-hex> <rank> <n> kill <k>   rank k dies mid-run;
//                                                 every survivor must fail
// Exit status 0 means the rank saw what it had to.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "moe_case.hpp"
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
  // MoE dispatch and combine over the same communicator.
  for (const MoeCase& c : moe_matrix(n, 8000 + n)) {
    if (std::string failure = run_moe_case(c, ranks, n); !failure.empty()) {
      return fail(c.label() + ": " + failure);
    }
  }
  return 0;
}

// Over MPI on one host the ranks meet in a shared segment (the cpu
// plugin's small-allreduce path). Ranks whose calls disagree fail alike
// whichever path each call's size picks, and an aborted rank makes its
// peers fail at once with HAL_ERROR_REMOTE, well before the deadline.
int run_shared_segment_failures(const Rank& self, uint32_t n, const hal_comm_config_t& base) {
  if (n < 2) return 0;
  hal_comm_config_t config = base;
  config.timeout_ms = 60000;
  auto fresh_comm = [&](hal_comm_t& comm) {
    return hal_comm_init_rank(self.device, n, nullptr, self.rank, &config, &comm) == HAL_SUCCESS;
  };
  const size_t big = size_t{1} << 19;  // 2 MiB of f32: past the segment, over MPI
  void* buffer = nullptr;
  if (hal_mem_alloc(self.device, HAL_MEMORY_DEVICE, big * 4, 0, &buffer) != HAL_SUCCESS) {
    return fail("alloc");
  }
  auto async_error = [](hal_comm_t comm) {
    hal_result_t error = HAL_SUCCESS;
    hal_comm_get_async_error(comm, &error);
    return error;
  };
  int status = 0;
  hal_comm_t comm = nullptr;
  if (!fresh_comm(comm)) {
    status = fail(std::string("init: ") + hal_error_last_message());
  } else {
    // Rank 0 asks for 2 elements (the segment), the others for 2 MiB (MPI).
    hal_allreduce(buffer, buffer, self.rank == 0 ? 2 : big, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm,
                  self.stream);
    if (hal_stream_synchronize(self.stream) != HAL_ERROR_DEVICE_LOST ||
        async_error(comm) != HAL_ERROR_ARGUMENT_MISMATCH) {
      status = fail(std::string("a mismatch across paths was not ARGUMENT_MISMATCH: ") +
                    hal_result_string(async_error(comm)));
    }
    hal_comm_abort(comm);
  }
  hal_stream_destroy(self.stream);
  hal_stream_t stream = nullptr;
  hal_stream_create(self.device, 0, &stream);
  if (status == 0 && fresh_comm(comm)) {
    // The last rank aborts at once; the others' 8-byte allreduce must fail fast.
    if (self.rank == n - 1) {
      hal_comm_abort(comm);
    } else {
      const auto start = std::chrono::steady_clock::now();
      hal_allreduce(buffer, buffer, 2, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream);
      hal_stream_synchronize(stream);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (async_error(comm) != HAL_ERROR_REMOTE || seconds > 30) {
        status = fail(std::string("a peer's abort gave ") + hal_result_string(async_error(comm)) +
                      " after " + std::to_string(seconds) + " s");
      }
      hal_comm_abort(comm);
    }
  } else if (status == 0) {
    status = fail(std::string("init: ") + hal_error_last_message());
  }
  hal_stream_destroy(stream);
  hal_mem_free(buffer);
  return status;
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
  if (status == 0)
    hal_comm_destroy(self.comm);
  else
    hal_comm_abort(self.comm);
  // Last: each of these leaves a communicator failed (and its stream lost).
  if (status == 0 && mode == "mpi") {
    status = run_shared_segment_failures(self, n, config);
  } else {
    hal_stream_destroy(self.stream);
  }
  hal_shutdown();
  return status;
}
