// One rank of a multi-process collective test; the same program runs under
// mpirun (MPI bootstrap, the cpu plugin's MPI path) and as a child of
// multiprocess_test (unique-id bootstrap, the loader's TCP-store path).
//
//   collectives_worker mpi kill|stop <k>        over MPI_COMM_WORLD, rank k dies (or
//                                               stops: SIGSTOP) mid-run; every survivor
//                                               must fail, and exit (each rank names its
//                                               pid first, on stderr; mpi_failed_peer.py)
//   collectives_worker mpi [expect shm|mpi]     the matrix (collectives, then MoE
//                                               dispatch/combine) over MPI_COMM_WORLD,
//                                               the small calls' inline path,
//                                               then the shared segment's failures;
//                                               with expect, after checking that the
//                                               messages went through shared memory or
//                                               over MPI (HAL_COMM_SHM=0); shm-no-cma:
//                                               shared memory without cross-memory
//                                               attach (HAL_COMM_CMA=0)
//   collectives_worker store <id-hex> <rank> <n>            the matrix
//   collectives_worker store <id-hex> <rank> <n> kill <k>   rank k dies mid-run;
//                                                 every survivor must fail
//   collectives_worker store <id-hex> <rank> <n> expect shm|staged
//                                               the matrix, after checking (in HAL_LOG's
//                                               lines) that the cpu plugin took the ranks
//                                               through shared memory, or left them to
//                                               the loader's host-staged path
// Exit status 0 means the rank saw what it had to.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

// The value rank |rank| contributes at element |i| of call |call|: small
// integers, so float sums are exact and any rank can compute every rank's.
float contribution(uint32_t rank, uint32_t call, size_t i) {
  return static_cast<float>(static_cast<int>((rank * 7919u + call * 104729u + i * 31u) % 17u) - 8);
}

// Checks |got| (|count| floats of call |call|) against the sum of every rank's contribution.
std::string check_sum(const float* got, size_t count, uint32_t call, uint32_t n) {
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (uint32_t r = 0; r < n; ++r) want += contribution(r, call, i);
    if (got[i] != want) {
      return "call " + std::to_string(call) + " element " + std::to_string(i) + ": " +
             std::to_string(got[i]) + " instead of " + std::to_string(want);
    }
  }
  return {};
}

struct SleepThenFill {
  float* data;
  size_t count;
  uint32_t rank, call;
};

// Small allreduces over MPI on one host may finish on the calling thread
// when their stream is idle (the cpu plugin's inline path). Each case
// checks the sums against the reference: many calls back to back (inline
// while the peers keep up, queued when not); a call behind slow work on
// its stream (it must read what that work wrote); a peer that comes late
// (the call falls back to its stream and completes); an event recorded
// after inline calls.
int run_inline_paths(const Rank& self, uint32_t n) {
  constexpr size_t kMaxCount = 64;
  constexpr uint32_t kCalls = 300;
  std::vector<void*> buffers(kCalls, nullptr);
  for (void*& b : buffers) {
    if (hal_mem_alloc(self.device, HAL_MEMORY_DEVICE, 2 * kMaxCount * 4, 0, &b) != HAL_SUCCESS) {
      return fail("alloc");
    }
  }
  auto send_of = [&](uint32_t call) { return static_cast<float*>(buffers[call]); };
  auto recv_of = [&](uint32_t call) { return static_cast<float*>(buffers[call]) + kMaxCount; };
  auto count_of = [](uint32_t call) { return size_t{1} + (call * 13u) % kMaxCount; };
  auto fill = [&](uint32_t call) {
    for (size_t i = 0; i < count_of(call); ++i) send_of(call)[i] = contribution(self.rank, call, i);
  };
  std::string failure;
  // 1. Back to back, one synchronisation at the end; every other call in place.
  for (uint32_t call = 0; call < kCalls && failure.empty(); ++call) {
    fill(call);
    float* out = call % 2 == 0 ? recv_of(call) : send_of(call);
    if (hal_allreduce(send_of(call), out, count_of(call), HAL_DTYPE_F32, HAL_REDUCE_SUM, self.comm,
                      self.stream) != HAL_SUCCESS) {
      failure = std::string("allreduce: ") + hal_error_last_message();
    }
  }
  if (failure.empty() && hal_stream_synchronize(self.stream) != HAL_SUCCESS) {
    failure = std::string("synchronize: ") + hal_error_last_message();
  }
  for (uint32_t call = 0; call < kCalls && failure.empty(); ++call) {
    failure = check_sum(call % 2 == 0 ? recv_of(call) : send_of(call), count_of(call), call, n);
  }
  // 2. Behind slow work: a host function that writes the input only after
  // a while. A call that ran ahead of it would sum stale values.
  const uint32_t late_call = 1;
  SleepThenFill slow{send_of(late_call), count_of(late_call), self.rank, late_call};
  if (failure.empty()) {
    std::fill(send_of(late_call), send_of(late_call) + kMaxCount, 1000.0f);
    auto sleep_then_fill = [](void* context) {
      auto& job = *static_cast<SleepThenFill*>(context);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      for (size_t i = 0; i < job.count; ++i) job.data[i] = contribution(job.rank, job.call, i);
    };
    if (hal_stream_enqueue_host_fn(self.stream, sleep_then_fill, &slow) != HAL_SUCCESS ||
        hal_allreduce(send_of(late_call), recv_of(late_call), count_of(late_call), HAL_DTYPE_F32,
                      HAL_REDUCE_SUM, self.comm, self.stream) != HAL_SUCCESS ||
        hal_stream_synchronize(self.stream) != HAL_SUCCESS) {
      failure = std::string("behind a host function: ") + hal_error_last_message();
    } else {
      failure = check_sum(recv_of(late_call), count_of(late_call), late_call, n);
    }
  }
  // 3. A late peer: rank 0 comes 50 ms after the others, so their calls
  // give up waiting inline and finish from their streams; a second call
  // follows at once behind the first. Then an event recorded after both.
  hal_event_t event = nullptr;
  if (failure.empty() && hal_event_create(self.device, 0, &event) != HAL_SUCCESS) {
    failure = "event_create";
  }
  if (failure.empty()) {
    if (self.rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (uint32_t call = 2; call < 4 && failure.empty(); ++call) {
      fill(call);
      if (hal_allreduce(send_of(call), recv_of(call), count_of(call), HAL_DTYPE_F32, HAL_REDUCE_SUM,
                        self.comm, self.stream) != HAL_SUCCESS) {
        failure = std::string("late peer: ") + hal_error_last_message();
      }
    }
    if (failure.empty() && (hal_event_record(event, self.stream) != HAL_SUCCESS ||
                            hal_event_synchronize(event) != HAL_SUCCESS)) {
      failure = std::string("event after the calls: ") + hal_error_last_message();
    }
    for (uint32_t call = 2; call < 4 && failure.empty(); ++call) {
      failure = check_sum(recv_of(call), count_of(call), call, n);
    }
  }
  if (event != nullptr) hal_event_destroy(event);
  for (void* b : buffers) hal_mem_free(b);
  return failure.empty() ? 0 : fail("inline path: " + failure);
}

// Over MPI on one host the ranks meet in shared segments (the cpu plugin's
// small-allreduce path and its messages). Ranks whose calls disagree fail
// alike whichever path each call's size picks, and an aborted rank makes
// its peers fail at once with HAL_ERROR_REMOTE, well before the deadline.
int run_shared_segment_failures(const Rank& self, uint32_t n, const hal_comm_config_t& base) {
  if (n < 2) return 0;
  hal_comm_config_t config = base;
  config.timeout_ms = 60000;
  auto fresh_comm = [&](hal_comm_t& comm) {
    return hal_comm_init_rank(self.device, n, nullptr, self.rank, &config, &comm) == HAL_SUCCESS;
  };
  const size_t big = size_t{1} << 19;  // 2 MiB of f32: past the segment, as messages
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
    status = fail(std::string("init of the mismatch communicator: ") + hal_error_last_message());
  } else {
    // Rank 0 asks for 2 elements (the segment), the others for 2 MiB (messages).
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
  // The last rank aborts at once. The others' 8-byte allreduce (the
  // segment's own data) must fail fast, and so must rank 0's receive of
  // 2 MiB from it (the segment's messages: over MPI it would wait for the
  // deadline).
  for (const bool through_messages : {false, true}) {
    if (status != 0) break;
    if (!fresh_comm(comm)) {
      status = fail(std::string("init of an abort communicator: ") + hal_error_last_message());
      break;
    }
    // First one allreduce that all complete: a rank that aborts while a peer
    // is still finishing its set-up fails that set-up too (its segment is
    // marked).
    hal_allreduce(buffer, buffer, 2, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream);
    if (hal_stream_synchronize(stream) != HAL_SUCCESS) {
      status = fail(std::string("before an abort: ") + hal_error_last_message());
      break;
    }
    const bool waits = through_messages ? self.rank == 0 : self.rank != n - 1;
    if (!waits) {
      hal_comm_abort(comm);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    if (through_messages) {
      hal_recv(buffer, big, HAL_DTYPE_F32, n - 1, comm, stream);
    } else {
      hal_allreduce(buffer, buffer, 2, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream);
    }
    hal_stream_synchronize(stream);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (async_error(comm) != HAL_ERROR_REMOTE || seconds > 30) {
      status = fail(std::string("a peer's abort gave ") + hal_result_string(async_error(comm)) +
                    " after " + std::to_string(seconds) + " s" +
                    (through_messages ? " (a receive)" : " (an allreduce)"));
    }
    hal_comm_abort(comm);
    hal_stream_destroy(stream);  // lost by the failure
    hal_stream_create(self.device, 0, &stream);
  }
  // Only rank 0 calls on communicators with a short deadline (3 s): its 8-byte
  // allreduce, tried inline and then left to the stream, and its receive of
  // 2 MiB from the last rank (the segment's messages), must end with
  // TIMEOUT. A third communicator tells the others when to abort theirs.
  hal_comm_t short_lived[2] = {nullptr, nullptr};
  hal_comm_t signal = nullptr;
  // Short, yet long enough for set-up: the ranks that only aborted above
  // come here first and wait for the others, which still see their failure,
  // and set-up touches the message segment's pages (300 ms failed with 4
  // ranks on a loaded 2-core machine).
  config.timeout_ms = 3000;
  const bool made_short = status == 0 && fresh_comm(short_lived[0]) && fresh_comm(short_lived[1]);
  config.timeout_ms = 60000;
  if (made_short && fresh_comm(signal)) {
    for (uint32_t which = 0; which < 2 && self.rank == 0; ++which) {
      if (which == 0) {
        hal_allreduce(buffer, buffer, 2, HAL_DTYPE_F32, HAL_REDUCE_SUM, short_lived[0], stream);
      } else {
        hal_recv(buffer, big, HAL_DTYPE_F32, n - 1, short_lived[1], stream);
      }
      if (hal_stream_synchronize(stream) != HAL_ERROR_DEVICE_LOST ||
          async_error(short_lived[which]) != HAL_ERROR_TIMEOUT) {
        status = fail(std::string("a peer that never came gave ") +
                      hal_result_string(async_error(short_lived[which])) + ", not TIMEOUT" +
                      (which == 0 ? " (an allreduce)" : " (a receive)"));
      }
      hal_stream_destroy(stream);
      hal_stream_create(self.device, 0, &stream);
    }
    hal_allreduce(buffer, buffer, 2, HAL_DTYPE_F32, HAL_REDUCE_SUM, signal, stream);
    if (hal_stream_synchronize(stream) != HAL_SUCCESS && status == 0) {
      status = fail(std::string("the signal allreduce: ") + hal_error_last_message());
    }
    hal_comm_destroy(signal);
  } else if (status == 0) {
    status = fail(std::string("init of the deadline communicators: ") + hal_error_last_message());
  }
  for (hal_comm_t comm_left : short_lived) {
    if (comm_left != nullptr) hal_comm_abort(comm_left);
  }
  hal_stream_destroy(stream);
  hal_mem_free(buffer);
  return status;
}

// Collects what this process writes to stderr while it lives (HAL_LOG's
// lines), then puts stderr back and passes the text on.
class StderrCapture {
 public:
  StderrCapture() : file_(memfd_create("collectives_worker_log", 0)), saved_(dup(2)) {
    std::fflush(stderr);
    if (file_ >= 0 && saved_ >= 0) dup2(file_, 2);
  }
  ~StderrCapture() { finish(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  const std::string& finish() {
    if (saved_ < 0) return text_;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    char chunk[4096];
    for (off_t at = 0;;) {
      const ssize_t n = pread(file_, chunk, sizeof chunk, at);
      if (n <= 0) break;
      text_.append(chunk, static_cast<size_t>(n));
      at += n;
    }
    close(file_);
    std::fputs(text_.c_str(), stderr);
    return text_;
  }

 private:
  int file_;
  int saved_;
  std::string text_;
};

// The line the cpu plugin logs for this rank on the path |path| took, over
// the bootstrap |bootstrap| ("store" or "MPI").
std::string expected_line(const std::string& bootstrap, const std::string& path, uint32_t rank,
                          uint32_t n) {
  const std::string head =
      "cpu: " + bootstrap + " rank " + std::to_string(rank) + " of " + std::to_string(n);
  if (path == "shm") {
    return head + ": messages through a shared segment, allreduces through a shared";
  }
  if (path == "shm-no-cma") {  // every rank set HAL_COMM_CMA=0: rank 0 is named
    return head +
           ": messages through a shared segment, allreduces through a shared segment; no "
           "cross-memory attach: rank 0 set HAL_COMM_CMA=0";
  }
  return path == "mpi" ? head + ": messages over MPI (a rank has HAL_COMM_SHM=0), no shared"
                       : head + ": host-staged by the loader";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    return fail(
        "usage: collectives_worker mpi [expect <path>] | store <id> <rank> <n> [kill <k> | expect "
        "<path>]");
  }
  const std::string mode = argv[1];
  // The options follow the store's three arguments; over MPI, the mode.
  const int options_at = mode == "mpi" ? 2 : 5;
  const std::string option = argc >= options_at + 2 ? argv[options_at] : "";
  const std::string expected_path = option == "expect" ? argv[options_at + 1] : "";
  std::unique_ptr<StderrCapture> capture;
  if (!expected_path.empty()) {
    setenv("HAL_LOG", "1", 1);  // before any thread of HAL's reads it
    capture = std::make_unique<StderrCapture>();
  }
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
    if (!option.empty() && option != "expect" && option != "kill" && option != "stop") {
      return fail("bad arguments");
    }
    self.rank = static_cast<uint32_t>(std::atoi(rank));
    n = static_cast<uint32_t>(std::atoi(size));
    config.bootstrap = HAL_COMM_BOOTSTRAP_MPI;
    if (option == "kill" || option == "stop") {
      config.timeout_ms = 2000;  // a kill test fails fast either way
      std::fprintf(stderr, "collectives_worker: rank %u pid %d\n", self.rank,
                   static_cast<int>(getpid()));
    }
  } else if (mode == "store" && argc >= 5 && parse_id(argv[2], id)) {
    self.rank = static_cast<uint32_t>(std::atoi(argv[3]));
    n = static_cast<uint32_t>(std::atoi(argv[4]));
    if (option == "kill") config.timeout_ms = 5000;  // a kill test fails fast either way
  } else {
    return fail("bad arguments");
  }
  if (hal_comm_init_rank(self.device, n, &id, self.rank, &config, &self.comm) != HAL_SUCCESS) {
    return fail(std::string("init: ") + hal_error_last_message());
  }
  if (capture) {
    const std::string line =
        expected_line(mode == "mpi" ? "MPI" : "store", expected_path, self.rank, n);
    if (capture->finish().find(line) == std::string::npos) {
      return fail("the cpu plugin logged no '" + line + "'");
    }
  }
  if (hal_stream_create(self.device, 0, &self.stream) != HAL_SUCCESS) return fail("stream");
  int status = 0;
  if (option == "kill" || option == "stop") {
    const uint32_t victim = static_cast<uint32_t>(std::atoi(argv[options_at + 1]));
    const std::string failure = run_kill(self, victim, option == "stop" ? SIGSTOP : SIGKILL);
    status = failure.empty() ? 0 : fail(failure);
  } else {
    status = run_matrix(self, n, mode == "mpi");
    if (status == 0 && mode == "mpi") status = run_inline_paths(self, n);
  }
  if (status == 0)
    hal_comm_destroy(self.comm);
  else
    hal_comm_abort(self.comm);
  // Last: each of these leaves a communicator failed (and its stream lost).
  // Without the segment (HAL_COMM_SHM=0) a peer's abort is seen at the
  // deadline only, as MPI gives no word of it.
  if (status == 0 && mode == "mpi" && expected_path != "mpi" && option != "kill" &&
      option != "stop") {
    status = run_shared_segment_failures(self, n, config);
  } else {
    hal_stream_destroy(self.stream);
  }
  hal_shutdown();
  return status;
}
