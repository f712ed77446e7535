#include "comm.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"
#include "hal_collective/status.hpp"
#include "hal_util/names.hpp"
#include "nccl.hpp"

namespace hal::cuda::collective {
namespace {

using Clock = std::chrono::steady_clock;
using hal::collective::Deadline;
using hal::collective::Status;

// How often the watchdog looks at the calls in flight.
constexpr auto kWatchInterval = std::chrono::milliseconds(1);

const char* kind_name(hal_collective_kind_t kind) {
  switch (kind) {
    case HAL_COLLECTIVE_ALLREDUCE:
      return "allreduce";
    case HAL_COLLECTIVE_BROADCAST:
      return "broadcast";
    case HAL_COLLECTIVE_REDUCE:
      return "reduce";
    case HAL_COLLECTIVE_ALLGATHER:
      return "allgather";
    case HAL_COLLECTIVE_REDUCE_SCATTER:
      return "reduce_scatter";
    case HAL_COLLECTIVE_ALLTOALL:
      return "alltoall";
    case HAL_COLLECTIVE_SEND:
      return "send";
    case HAL_COLLECTIVE_RECV:
      return "recv";
    default:
      return "collective";
  }
}

// Waits while NCCL answers ncclInProgress for |comm| (a non-blocking call
// still being processed), until the deadline or an abort. Returns NCCL's
// final state; |waited| holds the timeout or abort when it ran out first.
ncclResult_t settle(const NcclApi& nccl, ncclComm_t comm, ncclResult_t first,
                    const Deadline& deadline, Status& waited) {
  if (first != ncclInProgress) return first;
  ncclResult_t state = ncclInProgress;
  waited = hal::collective::wait_until(deadline, "waiting for NCCL", [&] {
    ncclResult_t polled = ncclInProgress;
    const ncclResult_t asked = nccl.ncclCommGetAsyncError(comm, &polled);
    state = asked != ncclSuccess ? asked : polled;
    return state != ncclInProgress;
  });
  return state;
}

class Rank;

// The ranks of one comm_init_local, which live in this process: a rank that
// aborts tells the others, so that a call waiting for it fails with
// HAL_ERROR_REMOTE at once rather than at its deadline (NCCL itself would
// wait for the aborted rank forever).
class LocalPeers {
 public:
  void add(Rank* rank) {
    std::lock_guard lock(mutex_);
    ranks_.push_back(rank);
  }
  void remove(Rank* rank) {
    std::lock_guard lock(mutex_);
    ranks_.erase(std::remove(ranks_.begin(), ranks_.end(), rank), ranks_.end());
  }
  void aborted(const Rank* rank, uint32_t index);

 private:
  std::mutex mutex_;
  std::vector<Rank*> ranks_;  // guarded by mutex_
};

// One rank: its NCCL communicator and the calls it has in flight.
class Rank {
 public:
  Rank(Device& device, const Nccl& nccl, uint32_t rank, uint32_t ranks, uint32_t timeout_ms)
      : device_(device),
        nccl_(nccl.api()),
        version_(nccl.version()),
        rank_(rank),
        ranks_(ranks),
        timeout_ms_(timeout_ms) {}
  ~Rank() {
    if (peers_) peers_->remove(this);
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  Device& device() const { return device_; }
  const NcclApi& nccl() const { return nccl_; }
  ncclComm_t* handle_slot() { return &handle_; }
  Deadline deadline() const { return Deadline::after_ms(timeout_ms_, &aborting_); }

  // The first failure; asks NCCL too, since a failure it finds after the
  // last call ended is seen by no watchdog.
  hal_result_t error() {
    std::lock_guard lock(mutex_);
    ncclResult_t state = ncclSuccess;
    if (error_ == HAL_SUCCESS && handle_ != nullptr &&
        nccl_.ncclCommGetAsyncError(handle_, &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress) {
      fail_locked(
          result_of(state), state,
          "NCCL reported " + nccl_error_text(state) + " asynchronously; ncclCommAbort called");
    }
    return error_;
  }

  // Waits for the communicator made by a non-blocking init.
  hal_result_t finish_init(ncclResult_t first, const char* what) {
    Status waited;
    const ncclResult_t state = settle(nccl_, handle_, first, deadline(), waited);
    if (state == ncclSuccess) return HAL_SUCCESS;
    abandon();
    if (!waited.ok()) {
      return device_.report().fail(waited.result, ncclInProgress,
                                   "%s: rank %u: ncclCommInitRankConfig is still %s after %u ms: "
                                   "%s; ncclCommAbort called",
                                   what, rank_, nccl_error_text(ncclInProgress).c_str(),
                                   timeout_ms_, waited.message.c_str());
    }
    return device_.report().fail(result_of(state), state, "%s: rank %u: ncclCommInitRankConfig: %s",
                                 what, rank_, nccl_error_text(state).c_str());
  }

  // Frees a communicator whose init failed.
  void abandon() {
    std::lock_guard lock(mutex_);
    if (handle_ != nullptr) nccl_.ncclCommAbort(handle_);
    handle_ = nullptr;
  }

  void abort() {
    aborting_.store(true);
    {
      std::lock_guard lock(mutex_);
      fail_locked(HAL_ERROR_INVALID_STATE, 0, "the rank aborted");
    }
    if (peers_) peers_->aborted(this, rank_);
  }

  void join(std::shared_ptr<LocalPeers> peers) {
    peers_ = std::move(peers);
    peers_->add(this);
  }
  // A rank of this process aborted: the calls that wait for it fail (the
  // watchdog's next look), and so does every later call.
  void peer_aborted(uint32_t index) {
    int expected = -1;
    gone_peer_.compare_exchange_strong(expected, static_cast<int>(index));
    changed_.notify_all();
  }

  hal_result_t enqueue(Stream& stream, std::span<const hal_collective_call_t> calls);

  // Waits for the calls in flight (the watchdog ends them at their
  // deadline), then finalises and frees the communicator.
  void destroy() {
    std::unique_lock lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return in_flight_.empty(); });
    if (handle_ == nullptr) return;
    const ncclComm_t handle = handle_;
    handle_ = nullptr;
    lock.unlock();
    if (device_.bind() != CUDA_SUCCESS) return;
    Status waited;
    const ncclResult_t finalized =
        settle(nccl_, handle, nccl_.ncclCommFinalize(handle), deadline(), waited);
    if (finalized == ncclSuccess) {
      nccl_.ncclCommDestroy(handle);
    } else {
      nccl_.ncclCommAbort(handle);  // bounded, where finalising is not
    }
  }

 private:
  struct InFlight {
    CUevent started = nullptr;   // recorded before the NCCL calls
    CUevent finished = nullptr;  // and after them
    std::shared_ptr<StreamFault> fault;
    std::optional<Clock::time_point> began;  // when the stream reached the call
    const char* what = "";
  };

  hal_result_t issue(const hal_collective_call_t& call, CUstream stream, std::string& failed_call,
                     ncclResult_t& code);
  void watch();
  void release_events(InFlight& call) {
    device_.api().cuEventDestroy(call.started);
    device_.api().cuEventDestroy(call.finished);
  }
  // Aborts the communicator, keeps the first failure and marks the streams
  // of the calls in flight lost. Caller holds mutex_.
  void fail_locked(hal_result_t result, int64_t native_code, const std::string& detail) {
    if (error_ == HAL_SUCCESS) error_ = result;
    // The streams are marked before the abort lets their work end, so that a
    // synchronize returning after it always sees the loss.
    for (InFlight& call : in_flight_) {
      call.fault->set(native_code, std::string(call.what) + " on rank " + std::to_string(rank_) +
                                       " failed (" + hal::util::result_name(result) +
                                       "): " + detail);
    }
    if (handle_ != nullptr) nccl_.ncclCommAbort(handle_);
    handle_ = nullptr;
    if (device_.bind() == CUDA_SUCCESS) {
      for (InFlight& call : in_flight_) release_events(call);
    }
    in_flight_.clear();
    changed_.notify_all();
  }

  Device& device_;
  const NcclApi& nccl_;
  const int version_;
  const uint32_t rank_;
  const uint32_t ranks_;
  const uint32_t timeout_ms_;
  std::atomic<bool> aborting_{false};
  std::atomic<int> gone_peer_{-1};     // a rank of this process that aborted
  std::shared_ptr<LocalPeers> peers_;  // set by comm_init_local
  std::mutex mutex_;
  std::condition_variable changed_;
  ncclComm_t handle_ = nullptr;       // guarded by mutex_; null once aborted
  hal_result_t error_ = HAL_SUCCESS;  // guarded by mutex_
  std::deque<InFlight> in_flight_;    // guarded by mutex_
  bool stopping_ = false;             // guarded by mutex_
  std::thread watchdog_;              // started by the first call
};

void LocalPeers::aborted(const Rank* rank, uint32_t index) {
  std::lock_guard lock(mutex_);
  for (Rank* other : ranks_) {
    if (other != rank) other->peer_aborted(index);
  }
}

Rank* to_rank(hal_impl_comm_t* comm) {
  return reinterpret_cast<Rank*>(comm);
}

// Moves that need no arithmetic go as bytes, so every dtype can travel.
size_t bytes_of(const hal_collective_call_t& call, size_t count) {
  return count * HAL_DTYPE_SIZE(call.dtype);
}

hal_result_t Rank::issue(const hal_collective_call_t& call, CUstream stream,
                         std::string& failed_call, ncclResult_t& code) {
  std::string why;
  const bool reduces = call.kind == HAL_COLLECTIVE_ALLREDUCE ||
                       call.kind == HAL_COLLECTIVE_REDUCE ||
                       call.kind == HAL_COLLECTIVE_REDUCE_SCATTER;
  ncclDataType_t type = ncclUint8;
  ncclRedOp_t op = ncclSum;
  if (reduces) {
    const auto mapped_type = nccl_dtype(call.dtype, version_, why);
    const auto mapped_op = mapped_type ? nccl_op(call.op, version_, why) : std::nullopt;
    if (!mapped_type || !mapped_op) {
      return device_.report().fail(HAL_ERROR_UNSUPPORTED, 0, "comm_enqueue: %s of %s: %s",
                                   kind_name(call.kind), hal::util::dtype_name(call.dtype),
                                   why.c_str());
    }
    type = *mapped_type;
    op = *mapped_op;
  }
  const auto peer = static_cast<int>(call.peer);
  auto record = [&](const char* name, ncclResult_t result) {
    if (result != ncclSuccess && result != ncclInProgress && failed_call.empty()) {
      failed_call = name;
      code = result;
    }
  };
  switch (call.kind) {
    case HAL_COLLECTIVE_ALLREDUCE:
      record("ncclAllReduce",
             nccl_.ncclAllReduce(call.send, call.recv, call.count, type, op, handle_, stream));
      break;
    case HAL_COLLECTIVE_BROADCAST:
      record("ncclBroadcast", nccl_.ncclBroadcast(call.send, call.recv, bytes_of(call, call.count),
                                                  ncclUint8, peer, handle_, stream));
      break;
    case HAL_COLLECTIVE_REDUCE:
      record("ncclReduce",
             nccl_.ncclReduce(call.send, call.recv, call.count, type, op, peer, handle_, stream));
      break;
    case HAL_COLLECTIVE_ALLGATHER:
      record("ncclAllGather", nccl_.ncclAllGather(call.send, call.recv, bytes_of(call, call.count),
                                                  ncclUint8, handle_, stream));
      break;
    case HAL_COLLECTIVE_REDUCE_SCATTER:
      record("ncclReduceScatter",
             nccl_.ncclReduceScatter(call.send, call.recv, call.count, type, op, handle_, stream));
      break;
    case HAL_COLLECTIVE_SEND:
      record("ncclSend", nccl_.ncclSend(call.send, bytes_of(call, call.count), ncclUint8, peer,
                                        handle_, stream));
      break;
    case HAL_COLLECTIVE_RECV:
      record("ncclRecv", nccl_.ncclRecv(call.recv, bytes_of(call, call.count), ncclUint8, peer,
                                        handle_, stream));
      break;
    case HAL_COLLECTIVE_ALLTOALL: {
      // NCCL has no alltoall: a send and a receive per rank, in one group.
      const size_t block = bytes_of(call, call.count);
      const auto* send = static_cast<const uint8_t*>(call.send);
      auto* recv = static_cast<uint8_t*>(call.recv);
      for (uint32_t r = 0; r < ranks_; ++r) {
        const auto to = static_cast<int>(r);
        record("ncclSend", nccl_.ncclSend(send + r * block, block, ncclUint8, to, handle_, stream));
        record("ncclRecv", nccl_.ncclRecv(recv + r * block, block, ncclUint8, to, handle_, stream));
      }
      break;
    }
    default:
      return device_.report().fail(HAL_ERROR_UNSUPPORTED, 0,
                                   "comm_enqueue: collective kind %d is not served on NCCL",
                                   static_cast<int>(call.kind));
  }
  return HAL_SUCCESS;
}

hal_result_t Rank::enqueue(Stream& stream, std::span<const hal_collective_call_t> calls) {
  const DriverApi& cu = device_.api();
  std::lock_guard lock(mutex_);
  if (const int gone = gone_peer_.load(); gone >= 0 && handle_ != nullptr) {
    const std::string detail = "rank " + std::to_string(gone) + " aborted";
    fail_locked(HAL_ERROR_REMOTE, 0, detail);
    return device_.report().fail(HAL_ERROR_REMOTE, 0, "comm_enqueue: %s on rank %u: %s",
                                 kind_name(calls.front().kind), rank_, detail.c_str());
  }
  if (handle_ == nullptr || error_ != HAL_SUCCESS) {
    return device_.report().fail(HAL_ERROR_INVALID_STATE, 0,
                                 "comm_enqueue: the communicator failed earlier (%s)",
                                 hal::util::result_name(error_));
  }
  if (const CUresult bound = device_.bind(); bound != CUDA_SUCCESS) {
    return device_.fail(bound, "comm_enqueue");
  }
  InFlight call;
  call.what = kind_name(calls.front().kind);
  call.fault = stream.fault();
  CUresult made = cu.cuEventCreate(&call.started, CU_EVENT_DISABLE_TIMING);
  if (made == CUDA_SUCCESS) made = cu.cuEventCreate(&call.finished, CU_EVENT_DISABLE_TIMING);
  if (made == CUDA_SUCCESS) made = cu.cuEventRecord(call.started, stream.get());
  if (made != CUDA_SUCCESS) {
    if (call.started != nullptr) cu.cuEventDestroy(call.started);
    if (call.finished != nullptr) cu.cuEventDestroy(call.finished);
    return device_.fail(made, "comm_enqueue: cuEventCreate/cuEventRecord");
  }
  std::string failed_call;
  ncclResult_t code = ncclSuccess;
  hal_result_t declined = HAL_SUCCESS;
  nccl_.ncclGroupStart();
  for (const hal_collective_call_t& one : calls) {
    declined = issue(one, stream.get(), failed_call, code);
    if (declined != HAL_SUCCESS || !failed_call.empty()) break;
  }
  Status waited;
  const ncclResult_t ended = nccl_.ncclGroupEnd();
  if (failed_call.empty() && ended != ncclSuccess && ended != ncclInProgress) {
    failed_call = "ncclGroupEnd";
    code = ended;
  }
  if (failed_call.empty() && declined == HAL_SUCCESS) {
    const ncclResult_t state = settle(nccl_, handle_, ended, deadline(), waited);
    if (state != ncclSuccess) {
      failed_call = "ncclGroupEnd";
      code = state;
    }
  }
  if (declined != HAL_SUCCESS || !failed_call.empty()) {
    // NCCL may have enqueued part of the group: the communicator is unusable.
    std::string detail = declined != HAL_SUCCESS
                             ? std::string("a call of the group was declined")
                             : failed_call + " failed: " + nccl_error_text(code);
    if (!waited.ok()) detail = failed_call + " is still ncclInProgress: " + waited.message;
    cu.cuEventRecord(call.finished, stream.get());
    in_flight_.push_back(std::move(call));
    const hal_result_t result = declined != HAL_SUCCESS ? declined
                                : !waited.ok()          ? waited.result
                                                        : result_of(code);
    fail_locked(result, code, detail);
    if (declined != HAL_SUCCESS) return declined;  // the decline's own sentence stands
    return device_.report().fail(result, code,
                                 "comm_enqueue: %s on rank %u: %s; ncclCommAbort called", call.what,
                                 rank_, detail.c_str());
  }
  if (const CUresult recorded = cu.cuEventRecord(call.finished, stream.get());
      recorded != CUDA_SUCCESS) {
    release_events(call);
    return device_.fail(recorded, "comm_enqueue: cuEventRecord");
  }
  in_flight_.push_back(std::move(call));
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watch(); });
  changed_.notify_all();
  return HAL_SUCCESS;
}

void Rank::watch() {
  const DriverApi& cu = device_.api();
  std::unique_lock lock(mutex_);
  bool bound = false;
  while (!stopping_ || !in_flight_.empty()) {
    changed_.wait_for(lock, kWatchInterval);
    if (in_flight_.empty()) continue;
    if (!bound) bound = device_.bind() == CUDA_SUCCESS;
    if (!bound) continue;
    ncclResult_t state = ncclSuccess;
    if (handle_ != nullptr && nccl_.ncclCommGetAsyncError(handle_, &state) == ncclSuccess &&
        state != ncclSuccess && state != ncclInProgress) {
      fail_locked(
          result_of(state), state,
          "NCCL reported " + nccl_error_text(state) + " asynchronously; ncclCommAbort called");
      continue;
    }
    if (const int gone = gone_peer_.load(); gone >= 0) {
      fail_locked(HAL_ERROR_REMOTE, 0,
                  "rank " + std::to_string(gone) + " aborted; ncclCommAbort called");
      continue;
    }
    const Clock::time_point now = Clock::now();
    while (!in_flight_.empty()) {
      InFlight& front = in_flight_.front();
      if (!front.began && cu.cuEventQuery(front.started) == CUDA_SUCCESS) front.began = now;
      if (cu.cuEventQuery(front.finished) == CUDA_SUCCESS) {
        release_events(front);
        in_flight_.pop_front();
        changed_.notify_all();
        continue;
      }
      if (front.began && now - *front.began > std::chrono::milliseconds(timeout_ms_)) {
        fail_locked(HAL_ERROR_TIMEOUT, ncclInProgress,
                    "not finished " + std::to_string(timeout_ms_) +
                        " ms after the stream reached it: a peer did not take part; "
                        "ncclCommAbort called");
      }
      break;
    }
  }
}

hal_result_t decline_without_nccl(Device& device, const char* what) {
  return device.report().fail(HAL_ERROR_UNSUPPORTED, 0, "%s: the cuda plugin has no NCCL", what);
}

}  // namespace

hal_result_t comm_init_local(uint32_t count, hal_impl_device_t* const* devices,
                             const hal_comm_config_t* config, hal_impl_comm_t** out_comms) {
  Device& first = *to_device(devices[0]);
  return plugin::guarded(first.report(), "comm_init_local", [&] {
    const Nccl* nccl = first.nccl();
    if (nccl == nullptr) return decline_without_nccl(first, "comm_init_local");
    const NcclApi& api = nccl->api();
    ncclUniqueId id{};
    if (const ncclResult_t r = api.ncclGetUniqueId(&id); r != ncclSuccess) {
      return first.report().fail(result_of(r), r, "comm_init_local: ncclGetUniqueId: %s",
                                 nccl_error_text(r).c_str());
    }
    std::vector<std::unique_ptr<Rank>> ranks;
    for (uint32_t i = 0; i < count; ++i) {
      ranks.push_back(
          std::make_unique<Rank>(*to_device(devices[i]), *nccl, i, count, config->timeout_ms));
    }
    ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
    nccl_config.blocking = 0;
    // One thread makes every rank: NCCL needs them in one group.
    std::vector<ncclResult_t> started(count, ncclSuccess);
    api.ncclGroupStart();
    for (uint32_t i = 0; i < count; ++i) {
      if (const CUresult bound = ranks[i]->device().bind(); bound != CUDA_SUCCESS) {
        api.ncclGroupEnd();
        for (auto& rank : ranks) rank->abandon();
        return ranks[i]->device().fail(bound, "comm_init_local");
      }
      started[i] = api.ncclCommInitRankConfig(ranks[i]->handle_slot(), static_cast<int>(count), id,
                                              static_cast<int>(i), &nccl_config);
    }
    const ncclResult_t ended = api.ncclGroupEnd();
    hal_result_t result = HAL_SUCCESS;
    for (uint32_t i = 0; i < count && result == HAL_SUCCESS; ++i) {
      ncclResult_t first_state = started[i] == ncclSuccess ? ended : started[i];
      if (*ranks[i]->handle_slot() == nullptr && first_state == ncclSuccess) {
        first_state = ncclInternalError;  // NCCL made no communicator
      }
      result = ranks[i]->finish_init(first_state, "comm_init_local");
    }
    if (result != HAL_SUCCESS) {
      for (auto& rank : ranks) rank->abandon();
      return result;
    }
    auto peers = std::make_shared<LocalPeers>();
    for (auto& rank : ranks) rank->join(peers);
    for (uint32_t i = 0; i < count; ++i) {
      out_comms[i] = reinterpret_cast<hal_impl_comm_t*>(ranks[i].release());
    }
    return HAL_SUCCESS;
  });
}

hal_result_t comm_init_rank_exchange(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                                     const hal_comm_config_t* config,
                                     const hal_comm_exchange_t* exchange,
                                     hal_impl_comm_t** out_comm) {
  Device& owner = *to_device(device);
  return plugin::guarded(owner.report(), "comm_init_rank", [&] {
    const Nccl* nccl = owner.nccl();
    if (nccl == nullptr) return decline_without_nccl(owner, "comm_init_rank");
    const NcclApi& api = nccl->api();
    // Rank 0 makes the id and sends it with a flag, so that its failure
    // reaches the peers at once instead of at their deadline.
    uint8_t message[1 + sizeof(ncclUniqueId)] = {};
    ncclUniqueId id{};
    ncclResult_t made = ncclSuccess;
    if (rank == 0) {
      made = api.ncclGetUniqueId(&id);
      message[0] = made == ncclSuccess ? 1 : 0;
      std::memcpy(message + 1, &id, sizeof(id));
    }
    if (const hal_result_t sent =
            exchange->broadcast(exchange->context, 0, message, sizeof(message));
        sent != HAL_SUCCESS) {
      return sent;  // the loader keeps the detail
    }
    if (made != ncclSuccess) {
      return owner.report().fail(result_of(made), made, "comm_init_rank: ncclGetUniqueId: %s",
                                 nccl_error_text(made).c_str());
    }
    if (message[0] != 1) {
      return owner.report().fail(HAL_ERROR_REMOTE, 0,
                                 "comm_init_rank: rank 0 could not make an NCCL unique id");
    }
    std::memcpy(&id, message + 1, sizeof(id));
    auto made_rank = std::make_unique<Rank>(owner, *nccl, rank, nranks, config->timeout_ms);
    if (const CUresult bound = owner.bind(); bound != CUDA_SUCCESS) {
      return owner.fail(bound, "comm_init_rank");
    }
    ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
    nccl_config.blocking = 0;
    ncclResult_t started =
        api.ncclCommInitRankConfig(made_rank->handle_slot(), static_cast<int>(nranks), id,
                                   static_cast<int>(rank), &nccl_config);
    if (*made_rank->handle_slot() == nullptr && started == ncclSuccess) started = ncclInternalError;
    if (const hal_result_t r = made_rank->finish_init(started, "comm_init_rank");
        r != HAL_SUCCESS) {
      return r;
    }
    *out_comm = reinterpret_cast<hal_impl_comm_t*>(made_rank.release());
    return HAL_SUCCESS;
  });
}

hal_result_t comm_destroy(hal_impl_comm_t* comm) {
  std::unique_ptr<Rank> owned(to_rank(comm));
  return plugin::guarded(owned->device().report(), "comm_destroy", [&] {
    owned->destroy();
    return HAL_SUCCESS;
  });
}

void comm_abort(hal_impl_comm_t* comm) {
  to_rank(comm)->abort();
}

hal_result_t comm_get_async_error(hal_impl_comm_t* comm) {
  return to_rank(comm)->error();
}

hal_result_t comm_enqueue(hal_impl_comm_t* comm, hal_impl_stream_t* stream, uint32_t call_count,
                          const hal_collective_call_t* calls) {
  Rank& self = *to_rank(comm);
  return plugin::guarded(self.device().report(), "comm_enqueue", [&] {
    return self.enqueue(*to_stream(stream), std::span(calls, call_count));
  });
}

}  // namespace hal::cuda::collective
