#include "collective.hpp"

#include <atomic>
#include <cstring>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "hal_collective/alltoallv.hpp"
#include "hal_collective/limits.hpp"
#include "hal_collective/local.hpp"
#include "hal_collective/path.hpp"
#include "hal_collective/shm.hpp"
#include "hal_collective/shm_transport.hpp"
#include "hal_util/env.hpp"
#include "hal_util/names.hpp"
#include "device.hpp"
#include "stream.hpp"

namespace hal::cpu {
namespace {

using collective::Clock;
using collective::Deadline;
using collective::Status;

// What a rank's calls need after the handle is gone: tasks in flight share it.
struct RankState {
  uint32_t rank = 0;
  uint32_t timeout_ms = HAL_COMM_DEFAULT_TIMEOUT_MS;
  bool over_mpi = false;  // bootstrapped by MPI: its finalize hears of a peer's failure
  // HAL_CPU_COLLECTIVES_BLOCKING=1 when the communicator was made: each
  // enqueue returns only once its collective ran (a test knob: the caller's
  // next call meets the collective's outcome, as a caller preempted that
  // long would).
  bool blocking = false;
  std::atomic<bool> aborted{false};
  std::shared_ptr<collective::LocalGroup> group;     // in-process ranks
  std::unique_ptr<collective::Transport> transport;  // ranks in processes: MPI or ShmTransport
  std::unique_ptr<collective::ShmGroup> shm;         // ranks in processes sharing one host
  std::vector<uint8_t> scratch;                      // ranks in processes: reused working memory
  collective::PathLog log;                           // HAL_COLL_VERBOSE: decisions printed once
  collective::Chooser chooser;                       // which path serves each call
  std::atomic<uint32_t> tasks_alive{0};              // CollectiveTasks not yet finished
  // The first failure; every call reads it (an atomic, not a mutex: two
  // lock round trips were a tenth of a small call's own cost).
  std::atomic<hal_result_t> async_error{HAL_SUCCESS};

  hal_result_t error() const { return async_error.load(std::memory_order_acquire); }
  void record(hal_result_t result) {
    hal_result_t none = HAL_SUCCESS;
    async_error.compare_exchange_strong(none, result, std::memory_order_acq_rel);
  }
  // Once the rank knows what it has (its group, transport and segment).
  void set_means(uint32_t ranks) {
    chooser.means = {ranks, group != nullptr, shm != nullptr, transport != nullptr, false};
    chooser.means.cross_memory = shm != nullptr && shm->cross_memory();
    chooser.log = &log;
    chooser.rank = rank;
  }
};

class Comm {
 public:
  Comm(Device& device, std::shared_ptr<RankState> state)
      : device_(device), state_(std::move(state)) {}
  Device& device() const { return device_; }
  const std::shared_ptr<RankState>& state() const { return state_; }

 private:
  Device& device_;
  std::shared_ptr<RankState> state_;
};

Comm* to_comm(hal_impl_comm_t* comm) {
  return reinterpret_cast<Comm*>(comm);
}

bool collectives_blocking() {
  return hal::util::env_flag("HAL_CPU_COLLECTIVES_BLOCKING", false);
}

using collective::limits::kInlinePatience;

// Whether |calls| may be tried on the enqueueing thread: one call whose data
// the chooser sends through the shared segment (an alltoallv's by this
// rank's own send total: the episode decides on every rank's).
bool may_finish_inline(const RankState& state, std::span<const hal_collective_call_t> calls) {
  if (!state.shm || calls.size() != 1) return false;
  const hal_collective_call_t& call = calls.front();
  if (call.kind != HAL_COLLECTIVE_ALLREDUCE && call.kind != HAL_COLLECTIVE_ALLTOALLV) return false;
  return collective::choose_path(collective::facts_of(call), state.chooser.means,
                                 state.chooser.policy)
             .path == collective::Path::kSegment;
}

class CollectiveTask final : public StreamTask {
 public:
  // The calls are copied with their alltoallv layouts: the caller's are
  // valid during comm_enqueue only. |may_go_inline|: may_finish_inline's
  // answer, found once by the enqueue.
  CollectiveTask(std::shared_ptr<RankState> state, const hal_collective_call_t* calls,
                 uint32_t count, bool may_go_inline)
      : state_(std::move(state)), calls_(std::span(calls, count)), may_go_inline_(may_go_inline) {
    state_->tasks_alive.fetch_add(1, std::memory_order_relaxed);
  }
  // A task is destroyed once it ran or finished inline (or its stream was
  // lost): then it no longer holds its communicator's order.
  ~CollectiveTask() override { state_->tasks_alive.fetch_sub(1, std::memory_order_release); }
  CollectiveTask(const CollectiveTask&) = delete;
  CollectiveTask& operator=(const CollectiveTask&) = delete;

  void run() override {
    if (!outcome_.ok()) fail(outcome_);  // the inline part failed: reported in stream order
    if (const hal_result_t failed = state_->error(); failed != HAL_SUCCESS) {
      throw std::runtime_error(
          std::string("collective skipped: the communicator failed earlier (") +
          hal::util::result_name(failed) + ")");
    }
    // The deadline counts from the call's start on the stream: an inline
    // try started it already.
    if (!started_) deadline_ = Deadline::after_ms(state_->timeout_ms, &state_->aborted);
    const Status status = run_calls(deadline_);
    if (!status.ok()) fail(status);
  }

  // A small allreduce through the shared segment, the whole of it, while
  // the peers come within kInlinePatience.
  bool finish_inline() noexcept override {
    try {
      const auto calls = calls_.calls();
      // Another call of this rank still pending (on another stream) owns
      // the segment's episode: this one must not step in before it.
      if (!may_go_inline_ || state_->error() != HAL_SUCCESS ||
          state_->tasks_alive.load(std::memory_order_acquire) != 1) {
        return false;
      }
      Status status;
      Clock::time_point first_look;
      const bool ended =
          state_->shm->try_run(calls.front(), state_->chooser, kInlinePatience, status, first_look);
      if (ended && status.ok()) return true;
      // The call goes on on the stream: its deadline counts from the try's
      // first clock reading, a few dozen polls after the call's start (the
      // try reads no clock before, so an episode in step reads none).
      if (first_look == Clock::time_point{}) first_look = Clock::now();
      deadline_ =
          Deadline{first_look + std::chrono::milliseconds(state_->timeout_ms), &state_->aborted};
      started_ = true;
      if (!ended) return false;
      outcome_ = std::move(status);
    } catch (const std::exception&) {
      // No memory for a message: run() goes on from where this stopped.
    }
    return false;
  }

 private:
  [[noreturn]] void fail(const Status& status) {
    state_->record(status.result);
    if (state_->over_mpi &&
        (status.result == HAL_ERROR_REMOTE || status.result == HAL_ERROR_TIMEOUT)) {
      note_mpi_peer_failure(state_->timeout_ms, state_->transport->any_peer_exited());
    }
    throw std::runtime_error(std::string(collective::kind_name(calls_.calls().front().kind)) +
                             " on rank " + std::to_string(state_->rank) + " failed (" +
                             hal::util::result_name(status.result) + "): " + status.message);
  }

  Status run_calls(const Deadline& deadline) {
    const auto calls = calls_.calls();
    if (state_->group) return state_->group->run(state_->rank, calls, deadline);
    return collective::run_batch(*state_->transport, state_->shm.get(), calls, deadline,
                                 state_->scratch, state_->chooser);
  }

  std::shared_ptr<RankState> state_;
  collective::OwnedCalls calls_;
  bool may_go_inline_;
  Deadline deadline_;
  bool started_ = false;  // deadline_ is set: an inline try began the call
  Status outcome_;        // a failure the inline try met
};

}  // namespace

hal_result_t comm_init_local(uint32_t count, hal_impl_device_t* const* devices,
                             const hal_comm_config_t* config, hal_impl_comm_t** out_comms) {
  Device& first = *to_device(devices[0]);
  return plugin::guarded(first.report(), "comm_init_local", [&] {
    auto group = std::make_shared<collective::LocalGroup>(count);
    std::vector<std::unique_ptr<Comm>> comms;
    for (uint32_t i = 0; i < count; ++i) {
      auto state = std::make_shared<RankState>();
      state->rank = i;
      state->timeout_ms = config->timeout_ms;
      state->group = group;
      state->blocking = collectives_blocking();
      state->set_means(count);
      comms.push_back(std::make_unique<Comm>(*to_device(devices[i]), std::move(state)));
    }
    for (uint32_t i = 0; i < count; ++i) {
      out_comms[i] = reinterpret_cast<hal_impl_comm_t*>(comms[i].release());
    }
    return HAL_SUCCESS;
  });
}

namespace {

// The set-up bytes of a store bootstrap: one broadcast per rank over the
// loader's exchange (which keeps the detail of a failure).
class ExchangeSetup final : public collective::SetupChannel {
 public:
  ExchangeSetup(const hal_comm_exchange_t& exchange, uint32_t rank, uint32_t ranks,
                const Deadline& deadline)
      : exchange_(exchange), rank_(rank), ranks_(ranks), deadline_(deadline) {}
  uint32_t rank() const override { return rank_; }
  uint32_t ranks() const override { return ranks_; }
  Deadline deadline() const override { return deadline_; }
  Status all_gather(const void* mine, void* all, size_t bytes) override {
    auto* out = static_cast<uint8_t*>(all);
    std::memcpy(out + rank_ * bytes, mine, bytes);
    for (uint32_t root = 0; root < ranks_; ++root) {
      if (const hal_result_t r =
              exchange_.broadcast(exchange_.context, root, out + root * bytes, bytes);
          r != HAL_SUCCESS) {
        return Status::failure(r, "the store's bootstrap exchange failed");
      }
    }
    return {};
  }

 private:
  const hal_comm_exchange_t& exchange_;
  uint32_t rank_;
  uint32_t ranks_;
  Deadline deadline_;
};

// A rank whose transport is made: ranks on one host also meet in a shared
// segment for small allreduces (HAL_COMM_SHM=0: not). |bootstrap| names
// the bootstrap in the log line.
hal_result_t finish_rank(Device& owner, std::shared_ptr<RankState> state, uint32_t nranks,
                         const Deadline& deadline, const char* bootstrap, const char* messages,
                         hal_impl_comm_t** out_comm) {
  Status status;
  std::string why_not;
  state->shm =
      collective::ShmGroup::create(*state->transport, collective::shm_wanted(), deadline, status,
                                   why_not, {collective::cross_memory_wanted(), nullptr});
  if (!status.ok()) {
    return owner.report().fail(status.result, 0, "comm_init_rank: %s", status.message.c_str());
  }
  state->set_means(nranks);
  std::string cross_memory;
  if (state->shm) {
    cross_memory = state->shm->cross_memory()
                       ? "; large alltoallvs read across processes (cross-memory attach)"
                       : "; no cross-memory attach: " + state->shm->cross_memory_reason();
  }
  owner.report().log(
      HAL_LOG_DEBUG, "cpu: %s rank %u of %u: %s, %s%s%s", bootstrap, state->rank, nranks, messages,
      state->shm ? "allreduces through a shared segment" : "no shared segment for allreduces: ",
      why_not.c_str(), cross_memory.c_str());
  auto made = std::make_unique<Comm>(owner, std::move(state));
  *out_comm = reinterpret_cast<hal_impl_comm_t*>(made.release());
  return HAL_SUCCESS;
}

std::shared_ptr<RankState> new_rank_state(uint32_t rank, const hal_comm_config_t& config) {
  auto state = std::make_shared<RankState>();
  state->rank = rank;
  state->timeout_ms = config.timeout_ms;
  state->blocking = collectives_blocking();
  return state;
}

}  // namespace

hal_result_t comm_init_rank(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                            const hal_comm_config_t* config, hal_impl_comm_t** out_comm) {
  Device& owner = *to_device(device);
  // Store bootstraps come through comm_init_rank_exchange.
  if (config->bootstrap != HAL_COMM_BOOTSTRAP_MPI) return HAL_ERROR_UNSUPPORTED;
  return plugin::guarded(owner.report(), "comm_init_rank", [&] {
    auto state = new_rank_state(rank, *config);
    state->over_mpi = true;
    Status status;
    const Deadline deadline = Deadline::after_ms(config->timeout_ms, nullptr);
    std::unique_ptr<collective::Transport> mpi = make_mpi_transport(nranks, rank, deadline, status);
    if (!mpi && (status.result == HAL_ERROR_TIMEOUT || status.result == HAL_ERROR_REMOTE)) {
      note_mpi_peer_failure(config->timeout_ms, false);  // a peer never came
    }
    if (!mpi) {
      return owner.report().fail(status.result, 0, "comm_init_rank: %s", status.message.c_str());
    }
    // Ranks that all share one host move their messages through a shared
    // segment, with MPI for set-up only: a message through the segment's
    // ring measured faster than the same message over MPI point-to-point
    // (SPEC §13.4). Elsewhere MPI carries them.
    std::string why_not;
    collective::TransportSetup setup(*mpi, deadline);
    state->transport =
        collective::ShmTransport::create(setup, collective::shm_wanted(), status, why_not);
    if (!status.ok()) {
      return owner.report().fail(status.result, 0, "comm_init_rank: %s", status.message.c_str());
    }
    const std::string messages = state->transport ? std::string("messages through a shared segment")
                                                  : "messages over MPI (" + why_not + ")";
    if (!state->transport) state->transport = std::move(mpi);
    return finish_rank(owner, std::move(state), nranks, deadline, "MPI", messages.c_str(),
                       out_comm);
  });
}

hal_result_t comm_init_rank_exchange(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                                     const hal_comm_config_t* config,
                                     const hal_comm_exchange_t* exchange,
                                     hal_impl_comm_t** out_comm) {
  Device& owner = *to_device(device);
  return plugin::guarded(owner.report(), "comm_init_rank", [&] {
    auto state = new_rank_state(rank, *config);
    Status status;
    std::string why_not;
    const Deadline deadline = Deadline::after_ms(config->timeout_ms, nullptr);
    ExchangeSetup setup(*exchange, rank, nranks, deadline);
    auto transport =
        collective::ShmTransport::create(setup, collective::shm_wanted(), status, why_not);
    if (!status.ok()) {
      return owner.report().fail(status.result, 0, "comm_init_rank: %s", status.message.c_str());
    }
    if (!transport) {
      // Every rank reached this answer: the loader serves them all over the store.
      owner.report().log(HAL_LOG_DEBUG, "cpu: store rank %u of %u: host-staged by the loader: %s",
                         rank, nranks, why_not.c_str());
      return HAL_ERROR_UNSUPPORTED;
    }
    state->transport = std::move(transport);
    return finish_rank(owner, std::move(state), nranks, deadline, "store",
                       "messages through a shared segment", out_comm);
  });
}

hal_result_t comm_destroy(hal_impl_comm_t* comm) {
  std::unique_ptr<Comm> owned(to_comm(comm));
  return HAL_SUCCESS;
}

void comm_abort(hal_impl_comm_t* comm) {
  RankState& state = *to_comm(comm)->state();
  state.aborted.store(true);
  state.record(HAL_ERROR_INVALID_STATE);
  if (state.group) {
    state.group->fail(state.rank, Status::failure(HAL_ERROR_INVALID_STATE, "the rank aborted"));
  }
  if (state.shm) state.shm->fail();
  if (state.transport) state.transport->fail();
}

hal_result_t comm_get_async_error(hal_impl_comm_t* comm) {
  return to_comm(comm)->state()->error();
}

hal_result_t comm_enqueue(hal_impl_comm_t* comm, hal_impl_stream_t* stream, uint32_t call_count,
                          const hal_collective_call_t* calls) {
  Comm& self = *to_comm(comm);
  Stream& target = *to_stream(stream);
  return plugin::guarded(self.device().report(), "comm_enqueue", [&] {
    const RankState& state = *self.state();
    const auto batch = std::span(calls, call_count);
    // A forced path (HAL_COLL_PATH) that cannot serve a call is refused here,
    // before anything is queued. An alltoallv through a segment is the
    // episode's to decide, on every rank's counts alike.
    const bool episode_decides =
        state.shm && call_count == 1 && calls[0].kind == HAL_COLLECTIVE_ALLTOALLV;
    Status refused;
    if (!episode_decides) {
      refused = state.chooser.check(batch);
    } else if (state.chooser.policy.forced &&
               state.chooser.policy.path != collective::Path::kSegment) {
      // No size changes what a forced ring (say) can serve: refused now.
      refused = collective::choose_path(collective::facts_of(calls[0]), state.chooser.means,
                                        state.chooser.policy)
                    .refusal;
    }
    if (!refused.ok()) {
      return self.device().report().fail(refused.result, 0, "comm_enqueue: %s",
                                         refused.message.c_str());
    }
    // When this rank's previous call fell back to a stream because a peer
    // was late, it usually ends within moments: waiting that long for the
    // stream to go idle lets this call go inline too, instead of queueing
    // behind it (which would keep every later call on the stream). Behind
    // two or more the stream will not be idle that soon: polling for it
    // would only take a core from the calls it waits for.
    const bool may_go_inline = may_finish_inline(state, batch);
    const bool behind_own_call =
        may_go_inline && state.tasks_alive.load(std::memory_order_acquire) == 1;
    auto task = std::make_unique<CollectiveTask>(self.state(), calls, call_count, may_go_inline);
    const hal_result_t queued =
        target.enqueue_task(TaskCommand{std::move(task)},
                            behind_own_call ? kInlinePatience : std::chrono::microseconds(0));
    // Its outcome is the stream's and the communicator's, not this call's.
    if (queued == HAL_SUCCESS && state.blocking) target.drain();
    return queued;
  });
}

}  // namespace hal::cpu

#ifndef HAL_CPU_HAS_MPI
namespace hal::cpu {

bool has_mpi() {
  return false;
}

void note_mpi_peer_failure(uint32_t, bool) noexcept {}

std::unique_ptr<collective::Transport> make_mpi_transport(uint32_t, uint32_t,
                                                          const collective::Deadline&,
                                                          collective::Status& out_status) {
  out_status = collective::Status::failure(
      HAL_ERROR_UNSUPPORTED,
      "this build of the cpu plugin has no MPI (not found at configure time)");
  return nullptr;
}

}  // namespace hal::cpu
#endif
