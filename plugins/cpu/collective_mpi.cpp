// The cpu plugin's transport between processes: MPI point-to-point messages
// across machines (on one machine the plugin uses MPI for set-up only and
// moves the messages through its own shared segment, which measured faster
// than Open MPI's shared-memory BTL under this transport). Every wait polls with MPI_Testall so
// that a deadline and an abort are honoured: a rank that never answers is HAL_ERROR_TIMEOUT, not a
// hang. MPI is the only file of the plugin that sees <mpi.h>.
// Only the C API: the C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "collective.hpp"
#include "hal_util/env.hpp"

namespace hal::cpu {
namespace {

using collective::Channel;
using collective::Deadline;
using collective::Status;

// Every MPI call goes through this lock: the plugin asks only for
// MPI_THREAD_SERIALIZED, which Open MPI serves without its locking cost.
std::mutex g_mpi_mutex;

// Initialises MPI once, unless the application did; finalises at unload only
// what it initialised. MPI_Finalize waits for every rank: a peer that died
// unseen by the launcher, or that hangs, would hold this process at exit for
// good. So every rank first meets the others in an MPI_Ibarrier. Normally it
// waits there as long as MPI_Finalize would; once a rank of this process saw
// a peer fail, it waits at most that communicator's timeout (not at all when
// a peer's process is known to have ended) and, if the peers do not all come,
// leaves MPI unfinalised: the process exits in bounded time.
class MpiSession {
 public:
  static MpiSession& get() {
    static MpiSession session;
    return session;
  }
  bool ready() const { return ready_; }
  void note_peer_failure(uint32_t timeout_ms, bool peer_exited) noexcept {
    std::lock_guard lock(failure_mutex_);
    peer_failed_ = true;
    peer_exited_ = peer_exited_ || peer_exited;
    patience_ms_ = std::max(patience_ms_, timeout_ms);
  }

 private:
  MpiSession() {
    std::lock_guard lock(g_mpi_mutex);
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      owned_ = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) == MPI_SUCCESS;
      ready_ = owned_;
    } else {
      ready_ = true;
    }
  }
  ~MpiSession() {
    std::lock_guard lock(g_mpi_mutex);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!owned_ || finalized) return;
    if (!all_ranks_arrive()) {
      if (hal::util::env("HAL_LOG") != nullptr) {
        std::fprintf(stderr,
                     "[hal:cpu] warning: a peer rank failed and did not reach the end: MPI is "
                     "left unfinalised so that this process can exit\n");
      }
      return;
    }
    MPI_Finalize();
  }

  // Whether every rank met in a barrier before finalising (within the
  // patience a peer's failure set, if any).
  bool all_ranks_arrive() {
    std::lock_guard lock(failure_mutex_);
    if (peer_exited_) return false;
    MPI_Request request;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &request) != MPI_SUCCESS) return !peer_failed_;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(patience_ms_);
    for (uint32_t polls = 0;; ++polls) {
      int done = 0;
      if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return !peer_failed_;
      if (done) return true;
      if (peer_failed_ && std::chrono::steady_clock::now() >= give_up) return false;
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  bool owned_ = false;
  bool ready_ = false;
  std::mutex failure_mutex_;
  bool peer_failed_ = false;  // a rank of this process saw a peer fail
  bool peer_exited_ = false;  // and a peer's process is known to have ended
  uint32_t patience_ms_ = 0;  // the largest timeout of those ranks
};

class MpiTransport final : public collective::Transport {
 public:
  MpiTransport(MPI_Comm collectives, MPI_Comm point_to_point, uint32_t rank, uint32_t ranks)
      : comms_{collectives, point_to_point}, rank_(rank), ranks_(ranks) {}
  // The duplicated communicators stay: freeing one is collective and a dead
  // peer would make it hang. MPI_Finalize reclaims them.

  uint32_t rank() const override { return rank_; }
  uint32_t ranks() const override { return ranks_; }

  Status post_send(uint32_t peer, const void* data, size_t bytes, uint32_t tag,
                   Channel channel) override {
    if (bytes > INT_MAX) return too_large(bytes);
    MPI_Request request;
    std::lock_guard lock(g_mpi_mutex);
    if (MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, static_cast<int>(peer),
                  static_cast<int>(tag), comm(channel), &request) != MPI_SUCCESS) {
      return Status::failure(HAL_ERROR_REMOTE, "MPI_Isend failed");
    }
    requests_.push_back(request);
    expected_.push_back({false, 0, 0});
    return {};
  }

  Status post_recv(uint32_t peer, void* data, size_t bytes, uint32_t tag,
                   Channel channel) override {
    if (bytes > INT_MAX) return too_large(bytes);
    MPI_Request request;
    std::lock_guard lock(g_mpi_mutex);
    // Any tag: a message with the wrong one is a detected mismatch, not a hang.
    if (MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, static_cast<int>(peer), MPI_ANY_TAG,
                  comm(channel), &request) != MPI_SUCCESS) {
      return Status::failure(HAL_ERROR_REMOTE, "MPI_Irecv failed");
    }
    requests_.push_back(request);
    expected_.push_back({true, tag, bytes});
    return {};
  }

  Status wait_all(const Deadline& deadline) override {
    statuses_.resize(requests_.size());
    int done = 0;
    int code = MPI_SUCCESS;
    Status waited = collective::wait_until(deadline, "waiting for MPI messages", [&] {
      std::lock_guard lock(g_mpi_mutex);
      code = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                         statuses_.data());
      return done != 0 || code != MPI_SUCCESS;
    });
    // On a timeout the requests stay posted: the rank is broken from now on.
    Status result = waited;
    if (waited.ok()) {
      for (size_t i = 0; i < expected_.size() && result.ok(); ++i) {
        if (!expected_[i].is_recv) continue;
        int count = 0;
        MPI_Get_count(&statuses_[i], MPI_BYTE, &count);
        const bool error = code != MPI_SUCCESS && statuses_[i].MPI_ERROR != MPI_SUCCESS;
        if (error || static_cast<uint32_t>(statuses_[i].MPI_TAG) != expected_[i].tag ||
            static_cast<size_t>(count) != expected_[i].bytes) {
          result = Status::failure(HAL_ERROR_ARGUMENT_MISMATCH,
                                   "a peer called a different collective, count, dtype, op or "
                                   "root");
        }
      }
      if (result.ok() && code != MPI_SUCCESS) {
        result = Status::failure(HAL_ERROR_REMOTE, "an MPI message failed");
      }
    }
    requests_.clear();
    expected_.clear();
    return result;
  }

 private:
  struct Expected {
    bool is_recv;
    uint32_t tag;
    size_t bytes;
  };
  MPI_Comm comm(Channel channel) const { return comms_[static_cast<uint32_t>(channel)]; }
  static Status too_large(size_t bytes) {
    return Status::failure(HAL_ERROR_UNSUPPORTED,
                           "a message of " + std::to_string(bytes) +
                               " bytes is larger than one MPI message (2 GiB) can carry");
  }

  MPI_Comm comms_[2];
  uint32_t rank_;
  uint32_t ranks_;
  std::vector<MPI_Request> requests_;
  std::vector<Expected> expected_;
  std::vector<MPI_Status> statuses_;
};

// MPI_Comm_idup, completed under the deadline.
Status duplicate_world(MPI_Comm& out, const Deadline& deadline) {
  MPI_Request request;
  {
    std::lock_guard lock(g_mpi_mutex);
    if (MPI_Comm_idup(MPI_COMM_WORLD, &out, &request) != MPI_SUCCESS) {
      return Status::failure(HAL_ERROR_REMOTE, "MPI_Comm_idup failed");
    }
  }
  Status status = collective::wait_until(deadline, "waiting for the other MPI ranks", [&] {
    int done = 0;
    std::lock_guard lock(g_mpi_mutex);
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  if (status.ok()) MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return status;
}

}  // namespace

bool has_mpi() {
  return true;
}

void note_mpi_peer_failure(uint32_t timeout_ms, bool peer_exited) noexcept {
  MpiSession::get().note_peer_failure(timeout_ms, peer_exited);
}

std::unique_ptr<collective::Transport> make_mpi_transport(uint32_t ranks, uint32_t rank,
                                                          const Deadline& deadline,
                                                          Status& out_status) {
  if (!MpiSession::get().ready()) {
    out_status = Status::failure(HAL_ERROR_UNSUPPORTED, "MPI_Init_thread failed");
    return nullptr;
  }
  int world_size = 0;
  int world_rank = 0;
  {
    std::lock_guard lock(g_mpi_mutex);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  }
  if (static_cast<uint32_t>(world_size) != ranks || static_cast<uint32_t>(world_rank) != rank) {
    out_status = Status::failure(
        HAL_ERROR_ARGUMENT_MISMATCH,
        "the MPI bootstrap needs nranks and rank to be MPI's: MPI_COMM_WORLD has rank " +
            std::to_string(world_rank) + " of " + std::to_string(world_size) +
            ", the call asked for " + std::to_string(rank) + " of " + std::to_string(ranks));
    return nullptr;
  }
  MPI_Comm collectives = MPI_COMM_NULL;
  MPI_Comm point_to_point = MPI_COMM_NULL;
  if (out_status = duplicate_world(collectives, deadline); !out_status.ok()) return nullptr;
  if (out_status = duplicate_world(point_to_point, deadline); !out_status.ok()) return nullptr;
  return std::make_unique<MpiTransport>(collectives, point_to_point, rank, ranks);
}

}  // namespace hal::cpu
