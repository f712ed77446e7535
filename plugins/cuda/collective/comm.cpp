#include "comm.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"
#include "hal_collective/alltoallv.hpp"
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
  return hal::util::short_name(hal::util::collective_kind_table(), static_cast<uint32_t>(kind));
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
class Rank final : public Comm {
 public:
  Rank(Device& device, const Nccl& nccl, uint32_t rank, uint32_t ranks, uint32_t timeout_ms)
      : device_(device),
        nccl_(nccl.api()),
        version_(nccl.version()),
        rank_(rank),
        ranks_(ranks),
        timeout_ms_(timeout_ms) {}
  ~Rank() override {
    if (peers_) peers_->remove(this);
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    release_staging();
  }
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  Device& device() const override { return device_; }
  const NcclApi& nccl() const { return nccl_; }
  ncclComm_t* handle_slot() { return &handle_; }
  Deadline deadline() const { return Deadline::after_ms(timeout_ms_, &aborting_); }

  // The first failure; asks NCCL too, since a failure it finds after the
  // last call ended is seen by no watchdog.
  hal_result_t error() override {
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

  void abort() override {
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

  hal_result_t enqueue(Stream& stream, std::span<const hal_collective_call_t> calls) override;

  void destroy() override {
    std::unique_lock lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return in_flight_.empty(); });
    if (handle_ == nullptr) return;
    const ncclComm_t handle = handle_;
    handle_ = nullptr;
    lock.unlock();
    const ContextScope bound = device_.bind();
    if (!bound.ok()) return;
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
    uint64_t ticket = 0;  // its place in the order of launch
  };
  // Stream work ahead of or behind an NCCL group (empty: none).
  using StreamWork = std::function<CUresult()>;
  // The NCCL calls of a group: a decline's result, or the first failed call
  // and its code.
  using GroupCalls = std::function<hal_result_t(std::string& failed_call, ncclResult_t& code)>;

  hal_result_t usable(hal_collective_kind_t kind);
  // Enqueues |before|, one NCCL group of |calls| and |after| on |stream|,
  // bracketed by the two events the watchdog watches; the group's ticket
  // goes to |out_ticket|. Caller holds mutex_.
  hal_result_t launch(Stream& stream, const char* what, const StreamWork& before,
                      const GroupCalls& calls, const StreamWork& after, uint64_t& out_ticket);
  // hal_alltoallv's counts must agree on every rank, which NCCL cannot
  // check: the ranks allgather their count rows, and every rank checks the
  // whole matrix before any data moves. Waits on the host for the exchange
  // (the watchdog keeps its deadline), with |lock| released meanwhile.
  hal_result_t agree_on_counts(std::unique_lock<std::mutex>& lock, Stream& stream,
                               std::span<const hal_collective_call_t> calls);
  // The device buffer and its pinned host staging for |bytes| of count
  // rows, kept for the rank's later calls.
  hal_result_t reserve_staging(size_t bytes);
  void release_staging();
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
    if (error_ == HAL_SUCCESS) {
      error_ = result;
      error_code_ = native_code;
      error_detail_ = detail;
    }
    // The streams are marked before the abort lets their work end, so that a
    // synchronize returning after it always sees the loss.
    for (InFlight& call : in_flight_) {
      call.fault->set(native_code, std::string(call.what) + " on rank " + std::to_string(rank_) +
                                       " failed (" + hal::util::result_name(result) +
                                       "): " + detail);
    }
    if (handle_ != nullptr) nccl_.ncclCommAbort(handle_);
    handle_ = nullptr;
    if (const ContextScope bound = device_.bind(); bound.ok()) {
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
  int64_t error_code_ = 0;            // guarded by mutex_: the first failure's native code
  std::string error_detail_;          // guarded by mutex_: and its sentence
  std::deque<InFlight> in_flight_;    // guarded by mutex_
  uint64_t launched_ = 0;             // guarded by mutex_: the last ticket given
  uint64_t retired_ = 0;              // guarded by mutex_: the last ticket finished
  bool stopping_ = false;             // guarded by mutex_
  // guarded by mutex_: a count exchange is waiting (with mutex_ released);
  // no other call may go between it and its data.
  bool exchanging_ = false;
  // The count exchange's buffers (agree_on_counts), guarded by mutex_. Busy
  // from an exchange's launch until the host saw it finish: a failed one may
  // still be written by its lost stream, so it is left to the device's close.
  void* staging_device_ = nullptr;
  uint64_t* staging_host_ = nullptr;
  size_t staging_bytes_ = 0;
  bool staging_busy_ = false;
  std::thread watchdog_;  // started by the first call
};

void LocalPeers::aborted(const Rank* rank, uint32_t index) {
  std::lock_guard lock(mutex_);
  for (Rank* other : ranks_) {
    if (other != rank) other->peer_aborted(index);
  }
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
    case HAL_COLLECTIVE_ALLTOALLV: {
      // Counts agree_on_counts found agreeing: a send and a receive per peer
      // with data, at the displacements, in the group.
      const hal_alltoallv_layout_t& layout = hal::collective::layout_of(call);
      const auto* send = static_cast<const uint8_t*>(layout.sendbuf);
      auto* recv = static_cast<uint8_t*>(layout.recvbuf);
      for (uint32_t r = 0; r < ranks_; ++r) {
        const auto to = static_cast<int>(r);
        if (const size_t count = layout.send_counts[r]; count != 0) {
          record("ncclSend", nccl_.ncclSend(send + bytes_of(call, layout.send_displs[r]),
                                            bytes_of(call, count), ncclUint8, to, handle_, stream));
        }
        if (const size_t count = layout.recv_counts[r]; count != 0) {
          record("ncclRecv", nccl_.ncclRecv(recv + bytes_of(call, layout.recv_displs[r]),
                                            bytes_of(call, count), ncclUint8, to, handle_, stream));
        }
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

hal_result_t Rank::usable(hal_collective_kind_t kind) {
  if (const int gone = gone_peer_.load(); gone >= 0 && handle_ != nullptr) {
    const std::string detail = "rank " + std::to_string(gone) + " aborted";
    fail_locked(HAL_ERROR_REMOTE, 0, detail);
    return device_.report().fail(HAL_ERROR_REMOTE, 0, "comm_enqueue: %s on rank %u: %s",
                                 kind_name(kind), rank_, detail.c_str());
  }
  if (handle_ == nullptr || error_ != HAL_SUCCESS) {
    return device_.report().fail(HAL_ERROR_INVALID_STATE, 0,
                                 "comm_enqueue: the communicator failed earlier (%s)",
                                 hal::util::result_name(error_));
  }
  return HAL_SUCCESS;
}

hal_result_t Rank::enqueue(Stream& stream, std::span<const hal_collective_call_t> calls) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !exchanging_; });
  const hal_collective_kind_t kind = calls.front().kind;
  if (const hal_result_t r = usable(kind); r != HAL_SUCCESS) return r;
  const ContextScope bound = device_.bind();
  if (!bound.ok()) {
    return device_.fail(bound.result(), "comm_enqueue");
  }
  const bool uneven = std::any_of(calls.begin(), calls.end(), [](const auto& call) {
    return call.kind == HAL_COLLECTIVE_ALLTOALLV;
  });
  if (uneven) {
    if (const hal_result_t r = agree_on_counts(lock, stream, calls); r != HAL_SUCCESS) return r;
    if (const hal_result_t r = usable(kind); r != HAL_SUCCESS) return r;  // failed meanwhile
  }
  uint64_t ticket = 0;
  return launch(
      stream, kind_name(kind), {},
      [&](std::string& failed_call, ncclResult_t& code) {
        for (const hal_collective_call_t& one : calls) {
          const hal_result_t declined = issue(one, stream.get(), failed_call, code);
          if (declined != HAL_SUCCESS || !failed_call.empty()) return declined;
        }
        return HAL_SUCCESS;
      },
      {}, ticket);
}

hal_result_t Rank::launch(Stream& stream, const char* what, const StreamWork& before,
                          const GroupCalls& calls, const StreamWork& after, uint64_t& out_ticket) {
  const DriverApi& cu = device_.api();
  InFlight call;
  call.what = what;
  call.fault = stream.fault();
  CUresult made = cu.cuEventCreate(&call.started, CU_EVENT_DISABLE_TIMING);
  if (made == CUDA_SUCCESS) made = cu.cuEventCreate(&call.finished, CU_EVENT_DISABLE_TIMING);
  if (made == CUDA_SUCCESS) made = cu.cuEventRecord(call.started, stream.get());
  if (made != CUDA_SUCCESS) {
    if (call.started != nullptr) cu.cuEventDestroy(call.started);
    if (call.finished != nullptr) cu.cuEventDestroy(call.finished);
    return device_.fail(made, "comm_enqueue: cuEventCreate/cuEventRecord");
  }
  if (before) {
    if (const CUresult copied = before(); copied != CUDA_SUCCESS) {
      release_events(call);
      return device_.fail(copied, "comm_enqueue: cuMemcpyAsync");
    }
  }
  std::string failed_call;
  ncclResult_t code = ncclSuccess;
  nccl_.ncclGroupStart();
  const hal_result_t declined = calls(failed_call, code);
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
  call.ticket = ++launched_;
  out_ticket = call.ticket;
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
                                 "comm_enqueue: %s on rank %u: %s; ncclCommAbort called", what,
                                 rank_, detail.c_str());
  }
  CUresult recorded = after ? after() : CUDA_SUCCESS;
  const char* recording = "comm_enqueue: cuMemcpyAsync";
  if (recorded == CUDA_SUCCESS) {
    recorded = cu.cuEventRecord(call.finished, stream.get());
    recording = "comm_enqueue: cuEventRecord";
  }
  if (recorded != CUDA_SUCCESS) {
    // The group is enqueued but cannot be watched: the communicator is unusable.
    in_flight_.push_back(std::move(call));
    fail_locked(HAL_ERROR_INTERNAL, recorded, std::string(recording) + " failed");
    return device_.fail(recorded, recording);
  }
  in_flight_.push_back(std::move(call));
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watch(); });
  changed_.notify_all();
  return HAL_SUCCESS;
}

hal_result_t Rank::reserve_staging(size_t bytes) {
  if (bytes <= staging_bytes_) return HAL_SUCCESS;
  release_staging();
  void* host = nullptr;
  if (const hal_result_t r = device_.allocate(HAL_MEMORY_DEVICE, bytes, 0, &staging_device_);
      r != HAL_SUCCESS) {
    staging_device_ = nullptr;
    return r;
  }
  if (const hal_result_t r = device_.allocate(HAL_MEMORY_HOST, bytes, 0, &host); r != HAL_SUCCESS) {
    device_.free(staging_device_);
    staging_device_ = nullptr;
    return r;
  }
  staging_host_ = static_cast<uint64_t*>(host);
  staging_bytes_ = bytes;
  return HAL_SUCCESS;
}

void Rank::release_staging() {
  if (staging_busy_) return;  // a lost stream may still write it: freed at device close
  if (staging_device_ != nullptr) device_.free(staging_device_);
  if (staging_host_ != nullptr) device_.free(staging_host_);
  staging_device_ = nullptr;
  staging_host_ = nullptr;
  staging_bytes_ = 0;
}

hal_result_t Rank::agree_on_counts(std::unique_lock<std::mutex>& lock, Stream& stream,
                                   std::span<const hal_collective_call_t> calls) {
  std::vector<const hal_collective_call_t*> uneven;
  for (const hal_collective_call_t& call : calls) {
    if (call.kind == HAL_COLLECTIVE_ALLTOALLV) uneven.push_back(&call);
  }
  // Per alltoallv of the batch, each rank's row: its dtype, what it sends
  // to each rank, what it expects from each.
  const size_t row = 2 * size_t{ranks_} + 1;
  const size_t rank_words = uneven.size() * row;
  const size_t rank_bytes = rank_words * sizeof(uint64_t);
  if (const hal_result_t r = reserve_staging(rank_bytes * ranks_); r != HAL_SUCCESS) return r;
  uint64_t* const mine = staging_host_ + rank_ * rank_words;
  for (size_t j = 0; j < uneven.size(); ++j) {
    const hal_alltoallv_layout_t& layout = hal::collective::layout_of(*uneven[j]);
    uint64_t* const words = mine + j * row;
    words[0] = static_cast<uint64_t>(uneven[j]->dtype);
    std::copy_n(layout.send_counts, ranks_, words + 1);
    std::copy_n(layout.recv_counts, ranks_, words + 1 + ranks_);
  }
  const DriverApi& cu = device_.api();
  auto* const gathered = static_cast<uint8_t*>(staging_device_);
  uint8_t* const slot = gathered + rank_ * rank_bytes;
  const auto device_address = [](const void* p) { return reinterpret_cast<CUdeviceptr>(p); };
  uint64_t ticket = 0;
  staging_busy_ = true;
  const hal_result_t launched = launch(
      stream, "alltoallv (its count exchange)",
      [&] {
        return cu.cuMemcpyAsync(device_address(slot), device_address(mine), rank_bytes,
                                stream.get());
      },
      [&](std::string& failed_call, ncclResult_t& code) {
        // In place: this rank's row is already in its slot.
        const ncclResult_t r =
            nccl_.ncclAllGather(slot, gathered, rank_bytes, ncclUint8, handle_, stream.get());
        if (r != ncclSuccess && r != ncclInProgress) {
          failed_call = "ncclAllGather";
          code = r;
        }
        return HAL_SUCCESS;
      },
      [&] {
        return cu.cuMemcpyAsync(device_address(staging_host_), device_address(gathered),
                                rank_bytes * ranks_, stream.get());
      },
      ticket);
  if (launched != HAL_SUCCESS) {
    // Nothing of it was enqueued where the events could not be made.
    if (ticket == 0) staging_busy_ = false;
    return launched;
  }
  // The watchdog ends the exchange at its deadline, or an abort does.
  exchanging_ = true;
  changed_.wait(lock, [&] { return retired_ >= ticket || error_ != HAL_SUCCESS; });
  exchanging_ = false;
  changed_.notify_all();
  if (retired_ < ticket) {
    return device_.report().fail(error_, error_code_,
                                 "comm_enqueue: alltoallv on rank %u: the count exchange failed "
                                 "(%s): %s",
                                 rank_, hal::util::result_name(error_), error_detail_.c_str());
  }
  staging_busy_ = false;
  // Every rank holds the same matrix, so every rank reaches the same verdict.
  auto word = [&](uint32_t rank, size_t j, size_t at) {
    return staging_host_[rank * rank_words + j * row + at];
  };
  for (size_t j = 0; j < uneven.size(); ++j) {
    for (uint32_t r = 1; r < ranks_; ++r) {
      if (word(r, j, 0) == word(0, j, 0)) continue;
      return device_.report().fail(
          HAL_ERROR_ARGUMENT_MISMATCH, 0,
          "comm_enqueue: alltoallv: rank 0 calls it with dtype %s, rank %u with %s",
          hal::util::dtype_name(static_cast<hal_dtype_t>(word(0, j, 0))), r,
          hal::util::dtype_name(static_cast<hal_dtype_t>(word(r, j, 0))));
    }
    const Status agreed = hal::collective::check_alltoallv_counts(
        ranks_, [&](uint32_t from, uint32_t to) { return word(from, j, 1 + to); },
        [&](uint32_t at, uint32_t from) { return word(at, j, 1 + ranks_ + from); });
    if (!agreed.ok()) {
      return device_.report().fail(agreed.result, 0, "comm_enqueue: %s; no data moved",
                                   agreed.message.c_str());
    }
  }
  return HAL_SUCCESS;
}

void Rank::watch() {
  const DriverApi& cu = device_.api();
  std::unique_lock lock(mutex_);
  while (!stopping_ || !in_flight_.empty()) {
    changed_.wait_for(lock, kWatchInterval);
    if (in_flight_.empty()) continue;
    const ContextScope bound = device_.bind();
    if (!bound.ok()) continue;
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
        retired_ = front.ticket;
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

hal_result_t Comm::init_local(std::span<Device* const> devices, const hal_comm_config_t& config,
                              std::vector<std::unique_ptr<Comm>>& out_comms) {
  Device& first = *devices[0];
  const auto count = static_cast<uint32_t>(devices.size());
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
    ranks.push_back(std::make_unique<Rank>(*devices[i], *nccl, i, count, config.timeout_ms));
  }
  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;
  // One thread makes every rank: NCCL needs them in one group.
  std::vector<ncclResult_t> started(count, ncclSuccess);
  api.ncclGroupStart();
  for (uint32_t i = 0; i < count; ++i) {
    const ContextScope bound = ranks[i]->device().bind();
    if (!bound.ok()) {
      api.ncclGroupEnd();
      for (auto& rank : ranks) rank->abandon();
      return ranks[i]->device().fail(bound.result(), "comm_init_local");
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
  for (auto& rank : ranks) out_comms.push_back(std::move(rank));
  return HAL_SUCCESS;
}

hal_result_t Comm::init_rank_exchange(Device& owner, uint32_t nranks, uint32_t rank,
                                      const hal_comm_config_t& config,
                                      const hal_comm_exchange_t& exchange, Comm*& out_comm) {
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
  if (const hal_result_t sent = exchange.broadcast(exchange.context, 0, message, sizeof(message));
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
  auto made_rank = std::make_unique<Rank>(owner, *nccl, rank, nranks, config.timeout_ms);
  const ContextScope bound = owner.bind();
  if (!bound.ok()) {
    return owner.fail(bound.result(), "comm_init_rank");
  }
  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;
  ncclResult_t started = api.ncclCommInitRankConfig(
      made_rank->handle_slot(), static_cast<int>(nranks), id, static_cast<int>(rank), &nccl_config);
  if (*made_rank->handle_slot() == nullptr && started == ncclSuccess) started = ncclInternalError;
  if (const hal_result_t r = made_rank->finish_init(started, "comm_init_rank"); r != HAL_SUCCESS) {
    return r;
  }
  out_comm = made_rank.release();
  return HAL_SUCCESS;
}

}  // namespace hal::cuda::collective
