// The "hal" backend of torch.distributed: a c10d::Backend on HAL collectives.
//
// One communicator per (process group, device), made on the group's first
// collective on that device: rank 0 makes a unique id and passes it to the
// others through the store torch gives the group, then every rank calls
// hal_comm_init_rank with the group's timeout as HAL's deadline. Each
// collective runs on the communicator's own stream after the caller's
// current stream (an event), keeps its tensors' memory from being reused
// until it is done (the caching allocator's recordStream), and completes its
// Work from a host function queued behind it (its future on hal tensors in
// stream order, at once: WorkHal). A watchdog thread fails the
// pending Works of a communicator whose collective failed (a timeout, a dead
// rank, mismatched arguments), so a wait raises DistBackendError with HAL's
// message instead of waiting forever.
#include "allocator.hpp"
#include "plans.hpp"
#include "runtime.hpp"

#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <limits>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

namespace hal_torch {
namespace {

namespace py = pybind11;

// A test-only hook (HAL_TORCH_TEST_SETTLE_BEFORE_FUTURE=1, read at each collective so a test
// sets it in its rank's process): each collective's stream is synchronized before its
// stream-ordered future is completed, so that a collective failing at once (mismatched sizes)
// has failed the communicator's stream before the future's event is recorded. Off, the order
// is a race (test_distributed.py's deterministic test of c4d3db0's fix forces it).
bool settle_before_future_for_tests() {
  const char* value = std::getenv("HAL_TORCH_TEST_SETTLE_BEFORE_FUTURE");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// This process's live communicators, for the collective failure probe (runtime.hpp): a lost
// stream after one of them failed is raised as DistBackendError. A communicator leaves the
// list before it is destroyed or aborted (under the same lock the probe queries it with).
std::mutex& live_comms_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<hal_comm_t>& live_comms() {
  static std::vector<hal_comm_t> comms;
  return comms;
}

std::string failed_collective() noexcept {
  try {
    std::lock_guard<std::mutex> lock(live_comms_mutex());
    for (hal_comm_t comm : live_comms()) {
      hal_result_t async = HAL_SUCCESS;
      if (hal_comm_get_async_error(comm, &async) == HAL_SUCCESS && async != HAL_SUCCESS) {
        return std::string("a communicator of the hal backend reports ") + hal_result_string(async);
      }
    }
  } catch (...) {  // a lock that fails: nothing known
  }
  return {};
}

void add_live_comm(hal_comm_t comm) {
  static const bool probe_set = (set_collective_failure_probe(&failed_collective), true);
  (void)probe_set;
  std::lock_guard<std::mutex> lock(live_comms_mutex());
  live_comms().push_back(comm);
}

void remove_live_comm(hal_comm_t comm) {
  std::lock_guard<std::mutex> lock(live_comms_mutex());
  auto& comms = live_comms();
  comms.erase(std::remove(comms.begin(), comms.end(), comm), comms.end());
}

// Releases the GIL around a blocking call when this thread holds it (torch calls the
// backend both with and without it).
class ReleaseGilIfHeld {
 public:
  ReleaseGilIfHeld() {
    if (Py_IsInitialized() && PyGILState_Check()) release_.emplace();
  }

 private:
  std::optional<py::gil_scoped_release> release_;
};

[[noreturn]] void raise_collective(hal_result_t result, const std::string& what) {
  raise_hal_error(result, "hal collective " + what, ErrorDomain::kCollective);
}

void check_collective(hal_result_t result, const std::string& what) {
  if (result != HAL_SUCCESS) raise_collective(result, what);
}

hal_dtype_t collective_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kBool:
      return HAL_DTYPE_U8;  // 0/1 bytes; SUM and PRODUCT become MAX and MIN (as NCCL does)
    default:
      break;
  }
  const std::optional<hal_dtype_t> dtype = hal_dtype(t.scalar_type());
  TORCH_CHECK_TYPE(dtype.has_value() && *dtype != HAL_DTYPE_BOOL,
                   "the hal backend has no collectives for ", t.scalar_type(), " tensors");
  return *dtype;
}

hal_reduce_op_t reduce_op(const c10d::ReduceOp& op, const at::Tensor& t) {
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return is_bool ? HAL_REDUCE_MAX : HAL_REDUCE_SUM;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_VALUE(!is_bool, "the hal backend cannot average bool tensors");
      return HAL_REDUCE_AVG;
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? HAL_REDUCE_MIN : HAL_REDUCE_PROD;
    case c10d::ReduceOp::MIN:
      return HAL_REDUCE_MIN;
    case c10d::ReduceOp::MAX:
      return HAL_REDUCE_MAX;
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "the hal backend has no reduce op ",
                                  static_cast<int>(op.op_),
                                  " (SUM, AVG, PRODUCT, MIN and MAX are HAL's)");
  }
}

void check_dense(const at::Tensor& t, const char* what) {
  TORCH_CHECK_VALUE(t.is_non_overlapping_and_dense() && t.is_contiguous(), "hal ", what,
                    ": tensors must be contiguous");
}

size_t count_of(const at::Tensor& t) {
  return static_cast<size_t>(t.numel());
}

// ---- Work -----------------------------------------------------------------------------------

// A collective's Work. Two ways to wait for it:
// - wait() / isCompleted() / exception() are the host's: wait() blocks until the
//   collective is done (its outputs then complete for every stream and the host) or
//   raises its failure (DistBackendError with HAL's message).
// - getFuture() is stream-ordered when the outputs are hal tensors, as NCCL's is: it
//   completes as soon as the collective is enqueued, with an event on the
//   communicator's stream behind it, so waiting on it (DDP's reducer does, at the end
//   of backward) makes the waiter's current stream wait for the collective instead of
//   blocking the host thread. The host then runs ahead and queues what follows (DDP's
//   copies out of its buckets, the optimizer) while the collective runs. Blocking the
//   host there instead cost a DDP step every host hand-off after the last bucket (the
//   host function, the autograd thread, the main thread): 35-45 ms a step on a loaded
//   2-core host (bench/torch/ddp_step.py). A failure still reaches the host through
//   wait(), the next collective and the stream's synchronization. Collectives on CPU
//   tensors, or with no outputs, keep a future completed by the host function.
class WorkHal : public c10d::Work {
 public:
  WorkHal(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
          std::vector<at::Tensor> keep_alive, std::chrono::milliseconds timeout,
          std::optional<c10::Device> stream_ordered_on = std::nullopt)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        keep_alive_(std::move(keep_alive)),
        timeout_(timeout),
        stream_ordered_(stream_ordered_on.has_value()),
        future_(stream_ordered_on ? c10::make_intrusive<c10::ivalue::Future>(
                                        c10::ListType::create(c10::TensorType::get()),
                                        std::vector<c10::Device>{*stream_ordered_on})
                                  : c10::make_intrusive<c10::ivalue::Future>(
                                        c10::ListType::create(c10::TensorType::get()))) {}

  bool isCompleted() override { return finished_.load(std::memory_order_acquire); }
  bool isSuccess() const override { return finished_.load(std::memory_order_acquire) && !error_; }
  std::exception_ptr exception() const override {
    return finished_.load(std::memory_order_acquire) ? error_ : nullptr;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Blocks until the collective is done (its outputs are then complete for
  // every stream and the host), or raises its failure.
  bool wait(std::chrono::milliseconds timeout) override {
    const std::chrono::milliseconds limit = timeout == kNoTimeout ? timeout_ : timeout;
    const auto deadline = std::chrono::steady_clock::now() + limit + std::chrono::seconds(5);
    while (!finished_.load(std::memory_order_acquire)) {
      // HAL's own deadline fails the collective first; this bound only guards the guard.
      TORCH_CHECK_WITH(DistBackendError, std::chrono::steady_clock::now() < deadline,
                       "hal: a collective did not complete within ", limit.count(),
                       " ms and HAL reported no failure");
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait_for(lock, std::chrono::milliseconds(5),
                     [&] { return finished_.load(std::memory_order_acquire); });
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  void synchronize() override { wait(kNoTimeout); }

  // Right after the collective is enqueued, with the communicator's stream current:
  // a stream-ordered future completes now, its event behind the collective.
  // Never throws: when the communicator's stream has failed (this collective or an earlier one
  // failed at once), recording the future's event on it fails, and the future is left to
  // complete() with the collective's error. c10's markCompleted sets the value before it
  // records the event, so a failure in between leaves the future with the value and no event:
  // wait() still raises the collective's error, and so does the next collective.
  void complete_future_in_stream_order(bool stream_failed) noexcept {
    if (!stream_ordered_ || stream_failed) return;
    try {
      future_->markCompleted(c10::IValue(outputs_));
    } catch (...) {
    }
  }

  // From the host function (the collective finished) or the watchdog (it failed). Never throws.
  void complete(std::exception_ptr error) noexcept {
    if (claimed_.exchange(true)) return;
    error_ = error;
    try {
      if (!future_->completed()) {
        if (error) {
          future_->setError(error);
        } else {
          future_->markCompleted(c10::IValue(outputs_));
        }
      }
    } catch (...) {
    }
    keep_alive_.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    finished_.store(true, std::memory_order_release);
    done_.notify_all();
  }

  bool finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;
  std::chrono::milliseconds timeout_;
  const bool stream_ordered_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::exception_ptr error_;           // written once, before finished_
  std::atomic<bool> claimed_{false};   // complete() ran (or is running)
  std::atomic<bool> finished_{false};  // the collective is done or failed
  std::mutex mutex_;
  std::condition_variable done_;
};

// The host function that completes a batch of Works once the stream reaches it.
struct Completion {
  std::vector<c10::intrusive_ptr<WorkHal>> works;
};

void complete_from_stream(void* user_data) {
  std::unique_ptr<Completion> completion(static_cast<Completion*>(user_data));
  for (auto& work : completion->works) work->complete(nullptr);
}

// ---- the backend ----------------------------------------------------------------------------

struct Communicator {
  c10::DeviceIndex device = 0;
  hal_comm_t comm = nullptr;
  c10::Stream stream{c10::Stream::DEFAULT, c10::Device(kHalDeviceType, 0)};
  std::string failure;  // set by the watchdog once the communicator failed
};

class ProcessGroupHal : public c10d::Backend {
 public:
  ProcessGroupHal(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                  std::chrono::milliseconds timeout)
      : c10d::Backend(rank, size), store_(std::move(store)), timeout_(timeout) {
    TORCH_CHECK_VALUE(device_count() > 0, "the hal backend needs a HAL device: ", init_error());
    watchdog_ = std::thread([this] { watch(); });
  }

  ~ProcessGroupHal() override {
    stop_watchdog();
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, c] : comms_) {
      if (c->comm == nullptr) continue;
      remove_live_comm(c->comm);
      // A failed communicator is aborted (bounded); a healthy one drains.
      if (!c->failure.empty()) {
        hal_comm_abort(c->comm);
      } else {
        hal_comm_destroy(c->comm);
      }
    }
  }

  const std::string getBackendName() const override { return "hal"; }
  bool supportsCoalescing() const override { return true; }

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, c] : comms_) {
      if (c->comm != nullptr) {
        remove_live_comm(c->comm);
        hal_comm_abort(c->comm);
      }
      c->comm = nullptr;
      c->failure = "the process group was aborted";
    }
    fail_pending_locked("hal: the process group was aborted");
  }

  void shutdown() override {
    stop_watchdog();
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, c] : comms_) {
      if (c->comm != nullptr) {
        remove_live_comm(c->comm);
        hal_comm_destroy(c->comm);
      }
      c->comm = nullptr;
      c->failure = "the process group was shut down";
    }
  }

  // ---- collectives ----

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const at::Tensor& t = single(tensors, "allreduce");
    check_dense(t, "allreduce");
    const hal_dtype_t dtype = collective_dtype(t);
    const hal_reduce_op_t op = reduce_op(opts.reduceOp, t);
    return run(t, c10d::OpType::ALLREDUCE, {t}, {}, "allreduce",
               [&](hal_comm_t comm, hal_stream_t s) {
                 return hal_allreduce(t.data_ptr(), t.data_ptr(), count_of(t), dtype, op, comm, s);
               });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    TORCH_CHECK_VALUE(!tensors.empty(), "hal allreduce_coalesced: no tensors");
    for (const at::Tensor& t : tensors) check_dense(t, "allreduce_coalesced");
    return run(tensors.front(), c10d::OpType::ALLREDUCE_COALESCED, tensors, {},
               "allreduce_coalesced", [&](hal_comm_t comm, hal_stream_t s) {
                 hal_result_t result = hal_group_start();
                 for (const at::Tensor& t : tensors) {
                   if (result != HAL_SUCCESS) break;
                   result =
                       hal_allreduce(t.data_ptr(), t.data_ptr(), count_of(t), collective_dtype(t),
                                     reduce_op(opts.reduceOp, t), comm, s);
                 }
                 const hal_result_t ended = hal_group_end();
                 return result != HAL_SUCCESS ? result : ended;
               });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const at::Tensor& t = single(tensors, "broadcast");
    check_dense(t, "broadcast");
    check_rank(opts.rootRank, "broadcast root");
    const hal_dtype_t dtype = collective_dtype(t);
    return run(t, c10d::OpType::BROADCAST, {t}, {}, "broadcast",
               [&](hal_comm_t comm, hal_stream_t s) {
                 return hal_broadcast(t.data_ptr(), t.data_ptr(), count_of(t), dtype,
                                      static_cast<uint32_t>(opts.rootRank), comm, s);
               });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const at::Tensor& t = single(tensors, "reduce");
    check_dense(t, "reduce");
    check_rank(opts.rootRank, "reduce root");
    const hal_dtype_t dtype = collective_dtype(t);
    const hal_reduce_op_t op = reduce_op(opts.reduceOp, t);
    return run(t, c10d::OpType::REDUCE, {t}, {}, "reduce", [&](hal_comm_t comm, hal_stream_t s) {
      return hal_reduce(t.data_ptr(), t.data_ptr(), count_of(t), dtype, op,
                        static_cast<uint32_t>(opts.rootRank), comm, s);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& /*opts*/) override {
    const at::Tensor& in = single(inputs, "allgather");
    check_dense(in, "allgather");
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                      "hal allgather: expected one list of ", getSize(), " output tensors");
    for (const at::Tensor& o : outputs[0]) {
      TORCH_CHECK_VALUE(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                        "hal allgather: every output must have the input's size and dtype");
    }
    const hal_dtype_t dtype = collective_dtype(in);
    at::Tensor staging = staging_like(in, getSize() * in.numel());
    std::vector<at::Tensor> outs = outputs[0];
    return run(in, c10d::OpType::ALLGATHER, outs, {staging, in}, "allgather",
               [&](hal_comm_t comm, hal_stream_t s) {
                 hal_result_t r =
                     hal_allgather(in.data_ptr(), staging.data_ptr(), count_of(in), dtype, comm, s);
                 for (size_t i = 0; r == HAL_SUCCESS && i < outs.size(); ++i) {
                   r = copy_on(outs[i], static_cast<char*>(staging.data_ptr()) + i * in.nbytes(),
                               in.nbytes(), s, /*into=*/true);
                 }
                 return r;
               });
  }

  c10::intrusive_ptr<c10d::Work> all_gather_single(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) override {
    check_dense(output, "all_gather_into_tensor");
    check_dense(input, "all_gather_into_tensor");
    TORCH_CHECK_VALUE(
        output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
        "hal all_gather_into_tensor: the output must hold world_size (", getSize(),
        ") times the input's ", input.numel(), " elements, of its dtype");
    const hal_dtype_t dtype = collective_dtype(input);
    return run(input, c10d::OpType::_ALLGATHER_BASE, {output}, {input}, "all_gather_into_tensor",
               [&](hal_comm_t comm, hal_stream_t s) {
                 return hal_allgather(input.data_ptr(), output.data_ptr(), count_of(input), dtype,
                                      comm, s);
               });
  }

  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& /*opts*/) override {
    TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(),
                      "hal all_gather_into_tensor_coalesced: as many outputs as inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_dense(outputs[i], "all_gather_into_tensor_coalesced");
      check_dense(inputs[i], "all_gather_into_tensor_coalesced");
      TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * getSize(),
                        "hal all_gather_into_tensor_coalesced: output ", i, " must hold ",
                        getSize(), " times its input");
    }
    return run(inputs.front(), c10d::OpType::COALESCED, outputs, inputs,
               "all_gather_into_tensor_coalesced", [&](hal_comm_t comm, hal_stream_t s) {
                 hal_result_t r = hal_group_start();
                 for (size_t i = 0; r == HAL_SUCCESS && i < inputs.size(); ++i) {
                   r = hal_allgather(inputs[i].data_ptr(), outputs[i].data_ptr(),
                                     count_of(inputs[i]), collective_dtype(inputs[i]), comm, s);
                 }
                 const hal_result_t ended = hal_group_end();
                 return r != HAL_SUCCESS ? r : ended;
               });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const at::Tensor& out = single(outputs, "reduce_scatter");
    check_dense(out, "reduce_scatter");
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                      "hal reduce_scatter: expected one list of ", getSize(), " input tensors");
    for (const at::Tensor& in : inputs[0]) {
      TORCH_CHECK_VALUE(in.numel() == out.numel() && in.scalar_type() == out.scalar_type(),
                        "hal reduce_scatter: every input must have the output's size and dtype");
    }
    const hal_dtype_t dtype = collective_dtype(out);
    const hal_reduce_op_t op = reduce_op(opts.reduceOp, out);
    at::Tensor staging = staging_like(out, getSize() * out.numel());
    std::vector<at::Tensor> ins = inputs[0];
    std::vector<at::Tensor> keep = ins;
    keep.push_back(staging);
    return run(out, c10d::OpType::REDUCE_SCATTER, {out}, keep, "reduce_scatter",
               [&](hal_comm_t comm, hal_stream_t s) {
                 hal_result_t r = HAL_SUCCESS;
                 for (size_t i = 0; r == HAL_SUCCESS && i < ins.size(); ++i) {
                   r = copy_on(ins[i], static_cast<char*>(staging.data_ptr()) + i * out.nbytes(),
                               out.nbytes(), s, /*into=*/false);
                 }
                 if (r != HAL_SUCCESS) return r;
                 return hal_reduce_scatter(staging.data_ptr(), out.data_ptr(), count_of(out), dtype,
                                           op, comm, s);
               });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    check_dense(output, "reduce_scatter_tensor");
    check_dense(input, "reduce_scatter_tensor");
    TORCH_CHECK_VALUE(
        input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(),
        "hal reduce_scatter_tensor: the input must hold world_size (", getSize(),
        ") times the output's ", output.numel(), " elements, of its dtype");
    const hal_dtype_t dtype = collective_dtype(output);
    const hal_reduce_op_t op = reduce_op(opts.reduceOp, output);
    return run(output, c10d::OpType::_REDUCE_SCATTER_BASE, {output}, {input},
               "reduce_scatter_tensor", [&](hal_comm_t comm, hal_stream_t s) {
                 return hal_reduce_scatter(input.data_ptr(), output.data_ptr(), count_of(output),
                                           dtype, op, comm, s);
               });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(),
                      "hal reduce_scatter_tensor_coalesced: as many outputs as inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_dense(outputs[i], "reduce_scatter_tensor_coalesced");
      check_dense(inputs[i], "reduce_scatter_tensor_coalesced");
      TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * getSize(),
                        "hal reduce_scatter_tensor_coalesced: input ", i, " must hold ", getSize(),
                        " times its output");
    }
    return run(outputs.front(), c10d::OpType::COALESCED, outputs, inputs,
               "reduce_scatter_tensor_coalesced", [&](hal_comm_t comm, hal_stream_t s) {
                 hal_result_t r = hal_group_start();
                 for (size_t i = 0; r == HAL_SUCCESS && i < inputs.size(); ++i) {
                   r = hal_reduce_scatter(inputs[i].data_ptr(), outputs[i].data_ptr(),
                                          count_of(outputs[i]), collective_dtype(outputs[i]),
                                          reduce_op(opts.reduceOp, outputs[i]), comm, s);
                 }
                 const hal_result_t ended = hal_group_end();
                 return r != HAL_SUCCESS ? r : ended;
               });
  }

  // all_to_all_single: splits count dim-0 rows; none given means equal parts.
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& output_splits,
                                                   std::vector<int64_t>& input_splits,
                                                   const c10d::AllToAllOptions& /*opts*/) override {
    check_dense(output, "all_to_all_single");
    check_dense(input, "all_to_all_single");
    TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(),
                      "hal all_to_all_single: input and output of one dtype");
    const hal_dtype_t dtype = collective_dtype(input);
    const auto n = static_cast<size_t>(getSize());
    if (output_splits.empty() && input_splits.empty()) {
      TORCH_CHECK_VALUE(input.numel() % getSize() == 0 && output.numel() == input.numel(),
                        "hal all_to_all_single: equal splits need a size divisible by the world "
                        "size and an output of the input's size");
      return run(input, c10d::OpType::ALLTOALL_BASE, {output}, {input}, "all_to_all_single",
                 [&](hal_comm_t comm, hal_stream_t s) {
                   return hal_alltoall(input.data_ptr(), output.data_ptr(), count_of(input) / n,
                                       dtype, comm, s);
                 });
    }
    const auto send = split_counts(input, input_splits, "input");
    const auto recv = split_counts(output, output_splits, "output");
    return run(input, c10d::OpType::ALLTOALL_BASE, {output}, {input}, "all_to_all_single",
               [&](hal_comm_t comm, hal_stream_t s) {
                 return hal_alltoallv(input.data_ptr(), send.data(), nullptr, output.data_ptr(),
                                      recv.data(), nullptr, dtype, comm, s);
               });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& /*opts*/) override {
    const c10::DeviceIndex device = current_device();
    at::Tensor flag =
        at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(kHalDeviceType, device));
    return run(flag, c10d::OpType::BARRIER, {flag}, {}, "barrier",
               [&](hal_comm_t comm, hal_stream_t s) {
                 return hal_allreduce(flag.data_ptr(), flag.data_ptr(), 1, HAL_DTYPE_I32,
                                      HAL_REDUCE_SUM, comm, s);
               });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int /*tag*/) override {
    const at::Tensor& t = single(tensors, "send");
    check_dense(t, "send");
    check_rank(dst, "send destination");
    const hal_dtype_t dtype = collective_dtype(t);
    return run(t, c10d::OpType::SEND, {}, {t}, "send", [&](hal_comm_t comm, hal_stream_t s) {
      return hal_send(t.data_ptr(), count_of(t), dtype, static_cast<uint32_t>(dst), comm, s);
    });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int /*tag*/) override {
    const at::Tensor& t = single(tensors, "recv");
    check_dense(t, "recv");
    check_rank(src, "recv source");
    const hal_dtype_t dtype = collective_dtype(t);
    return run(t, c10d::OpType::RECV, {t}, {}, "recv", [&](hal_comm_t comm, hal_stream_t s) {
      return hal_recv(t.data_ptr(), count_of(t), dtype, static_cast<uint32_t>(src), comm, s);
    });
  }

  // Between start and end, calls go into one HAL group, submitted at the end (so an
  // exchange of sends and receives cannot deadlock); their Works complete together.
  void startCoalescing() override {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!coalescing_, "hal: startCoalescing twice without endCoalescing");
    coalescing_ = true;
    coalesced_.clear();
    coalesced_device_ = -1;
    check_collective(hal_group_start(), "startCoalescing");
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    std::vector<c10::intrusive_ptr<WorkHal>> works;
    c10::DeviceIndex device = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TORCH_CHECK(coalescing_, "hal: endCoalescing without startCoalescing");
      coalescing_ = false;
      works.swap(coalesced_);
      device = coalesced_device_;
    }
    hal_result_t ended = HAL_SUCCESS;
    {
      const ReleaseGilIfHeld unlocked;
      ended = hal_group_end();
    }
    if (ended != HAL_SUCCESS) {
      const std::string message = hal_error_message(ended, "hal coalesced collectives");
      for (auto& w : works)
        w->complete(std::make_exception_ptr(
            c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message)));
      raise_collective(ended, "coalesced group");
    }
    auto all =
        c10::make_intrusive<WorkHal>(getRank(), c10d::OpType::COALESCED, std::vector<at::Tensor>{},
                                     std::vector<at::Tensor>{}, timeout_);
    works.push_back(all);
    if (device >= 0) {
      Communicator& c = comm_for(device);
      complete_futures_in_stream_order(c, works);
      complete_after(c, std::move(works));
    } else {
      all->complete(nullptr);  // nothing was enqueued
    }
    return all;
  }

 private:
  using Launch = std::function<hal_result_t(hal_comm_t, hal_stream_t)>;

  static const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) {
    TORCH_CHECK_VALUE(tensors.size() == 1, "hal ", what,
                      ": one tensor per call (one device per process)");
    return tensors.front();
  }

  void check_rank(int64_t rank, const char* what) const {
    TORCH_CHECK_VALUE(rank >= 0 && rank < getSize(), "hal: ", what, " ", rank,
                      " is not a rank of this group of ", getSize());
  }

  // Element counts per rank from row splits (dim 0), checked against the tensor.
  std::vector<size_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& splits,
                                   const char* what) const {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row = rows == 0 ? 0 : t.numel() / rows;
    std::vector<size_t> counts(static_cast<size_t>(getSize()));
    if (splits.empty()) {
      TORCH_CHECK_VALUE(rows % getSize() == 0, "hal all_to_all_single: ", what, " rows (", rows,
                        ") do not divide into ", getSize(), " equal splits");
      std::fill(counts.begin(), counts.end(), static_cast<size_t>(rows / getSize() * row));
      return counts;
    }
    TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == getSize(), "hal all_to_all_single: ", what,
                      " splits have ", splits.size(), " entries for ", getSize(), " ranks");
    int64_t total = 0;
    for (size_t r = 0; r < splits.size(); ++r) {
      TORCH_CHECK_VALUE(splits[r] >= 0, "hal all_to_all_single: a negative split");
      total += splits[r];
      counts[r] = static_cast<size_t>(splits[r] * row);
    }
    TORCH_CHECK_VALUE(total == rows, "hal all_to_all_single: the ", what, " splits sum to ", total,
                      " but the tensor has ", rows, " rows");
    return counts;
  }

  // A dense buffer of |numel| elements of |like|'s dtype on its device, allocated on the
  // collective's stream so the caching allocator frees it in that stream's order.
  at::Tensor staging_like(const at::Tensor& like, int64_t numel) {
    const c10::DeviceIndex device = device_for(like);
    Communicator& c = comm_for(device);
    const c10::StreamGuard on_comm_stream(c.stream);
    return at::empty({numel}, like.options().device(kHalDeviceType, device));
  }

  // Copies |bytes| between |t| (hal or host memory) and |staging| on |stream|.
  static hal_result_t copy_on(const at::Tensor& t, void* staging, size_t bytes, hal_stream_t stream,
                              bool into) {
    return into ? hal_memcpy_async(t.data_ptr(), staging, bytes, stream)
                : hal_memcpy_async(staging, t.const_data_ptr(), bytes, stream);
  }

  // The HAL device a collective on |t| runs on: its own, or this thread's current hal
  // device for CPU tensors (HAL collectives read and write host memory).
  static c10::DeviceIndex device_for(const at::Tensor& t) {
    if (t.device().type() == kHalDeviceType) return t.device().index();
    TORCH_CHECK_VALUE(t.is_cpu(), "the hal backend takes hal and cpu tensors, not ", t.device());
    return current_device();
  }

  Communicator& comm_for(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = comms_[device];
    if (!slot) slot = std::make_unique<Communicator>();
    Communicator& c = *slot;
    TORCH_CHECK_WITH(DistBackendError, c.failure.empty(),
                     "hal: the communicator on hal:", static_cast<int>(device),
                     " failed earlier: ", c.failure);
    if (c.comm != nullptr) return c;
    // First use on this device: meet the other ranks through torch's store.
    hal_comm_unique_id_t id{};
    // Ranks may use different device indices: the key counts communicators, in call order.
    const std::string key = "hal_torch/comm/" + std::to_string(comm_generation_++);
    {
      const ReleaseGilIfHeld unlocked;
      if (getRank() == 0) {
        check_collective(hal_comm_get_unique_id(&id), "making the communicator's unique id");
        store_->set(key, std::vector<uint8_t>(id.bytes, id.bytes + sizeof id.bytes));
      } else {
        const std::vector<uint8_t> bytes = store_->get(key);
        TORCH_CHECK_WITH(DistBackendError, bytes.size() == sizeof id.bytes,
                         "hal: the store holds a communicator id of ", bytes.size(), " bytes, not ",
                         sizeof id.bytes);
        std::memcpy(id.bytes, bytes.data(), sizeof id.bytes);
      }
      hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
      config.timeout_ms = static_cast<uint32_t>(
          std::clamp<int64_t>(timeout_.count(), 1, std::numeric_limits<uint32_t>::max()));
      hal_comm_t comm = nullptr;
      check_collective(hal_comm_init_rank(device_handle(device), static_cast<uint32_t>(getSize()),
                                          &id, static_cast<uint32_t>(getRank()), &config, &comm),
                       "creating the communicator");
      add_live_comm(comm);
      c.comm = comm;
    }
    c.device = device;
    c.stream = new_stream(device);
    return c;
  }

  // Runs |launch| on the communicator's stream after the caller's current stream, and
  // returns the Work that completes behind it.
  c10::intrusive_ptr<c10d::Work> run(const at::Tensor& like, c10d::OpType type,
                                     std::vector<at::Tensor> outputs,
                                     std::vector<at::Tensor> inputs, const char* what,
                                     const Launch& launch) {
    const c10::DeviceIndex device = device_for(like);
    Communicator& c = comm_for(device);
    hal_stream_t comm_stream = stream_handle(c.stream);
    // The collective reads what the caller's stream wrote.
    hal_event_t ready = nullptr;
    check_collective(hal_event_create(device_handle(device), 0, &ready), what);
    hal_result_t ordered = hal_event_record(ready, current_hal_stream(device));
    if (ordered == HAL_SUCCESS) ordered = hal_stream_wait_event(comm_stream, ready);
    hal_event_destroy(ready);
    check_collective(ordered, what);
    hal_result_t launched = HAL_SUCCESS;
    {
      const ReleaseGilIfHeld unlocked;
      launched = launch(c.comm, comm_stream);
    }
    check_collective(launched, what);
    // Keep every device tensor's memory until the collective stream is past it.
    for (const std::vector<at::Tensor>* list : {&outputs, &inputs}) {
      for (const at::Tensor& t : *list) {
        if (t.device().type() == kHalDeviceType && t.storage().data() != nullptr) {
          device_allocator().recordStream(t.storage().data_ptr(), c.stream);
        }
      }
    }
    std::vector<at::Tensor> keep(inputs);
    keep.insert(keep.end(), outputs.begin(), outputs.end());
    const bool on_device =
        !outputs.empty() && std::all_of(outputs.begin(), outputs.end(), [&](const at::Tensor& t) {
          return t.device() == c10::Device(kHalDeviceType, device);
        });
    auto work = c10::make_intrusive<WorkHal>(
        getRank(), type, std::move(outputs), std::move(keep), timeout_,
        on_device ? std::optional<c10::Device>(c10::Device(kHalDeviceType, device)) : std::nullopt);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back({device, work});
      if (coalescing_) {
        // Completed together at endCoalescing, after the group is submitted.
        coalesced_.push_back(work);
        coalesced_device_ = device;
        return work;
      }
    }
    complete_futures_in_stream_order(c, {work});
    complete_after(c, {work});
    return work;
  }

  // Completes the stream-ordered futures of |works| (WorkHal) behind what |c|'s stream
  // holds now; before their host function is queued, which completes the rest.
  static void complete_futures_in_stream_order(
      Communicator& c, const std::vector<c10::intrusive_ptr<WorkHal>>& works) {
    const c10::StreamGuard on_comm_stream(c.stream);
    if (settle_before_future_for_tests()) {
      // Let the collective finish or fail before the futures' events are recorded: the order
      // of the race c4d3db0 fixed (the stream failed first), forced. The result is the
      // stream's, reported below and by the Work.
      const ReleaseGilIfHeld unlocked;
      (void)hal_stream_synchronize(stream_handle(c.stream));
    }
    // Asked only where the query never blocks (elsewhere it would wait for the collective).
    bool failed = false;
    const hal_device_caps_t caps = device_state(c.stream.device_index()).properties.capabilities;
    if ((caps & HAL_DEVICE_CAP_STREAM_QUERY) != 0) {
      const hal_result_t state = hal_stream_query(stream_handle(c.stream));
      failed = state != HAL_SUCCESS && state != HAL_NOT_READY;
    }
    for (const auto& w : works) w->complete_future_in_stream_order(failed);
  }

  // Queues a host function behind the collective that completes |works|.
  void complete_after(Communicator& c, std::vector<c10::intrusive_ptr<WorkHal>> works) {
    auto completion = std::make_unique<Completion>();
    completion->works = std::move(works);
    Completion* raw = completion.get();
    const hal_result_t queued =
        hal_stream_enqueue_host_fn(stream_handle(c.stream), &complete_from_stream, raw);
    if (queued == HAL_SUCCESS) {
      completion.release();  // the host function owns it now
      return;
    }
    // The stream failed already: its own detail names the failed collective (a lost stream
    // answers its query at once).
    std::string message = hal_error_message(queued, "hal collective");
    if (queued == HAL_ERROR_DEVICE_LOST) {
      const hal_result_t state = hal_stream_query(stream_handle(c.stream));
      if (state != HAL_SUCCESS && state != HAL_NOT_READY) {
        message = hal_error_message(state, "a hal collective failed");
      }
    }
    for (auto& w : raw->works) {
      w->complete(std::make_exception_ptr(
          c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message)));
    }
  }

  // ---- the watchdog ----

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      watchdog_wake_.wait_for(lock, std::chrono::milliseconds(20));
      // Forget finished works; fail the pending ones of a failed communicator.
      std::vector<Pending> still;
      for (Pending& p : pending_) {
        if (p.work->finished()) continue;
        auto found = comms_.find(p.device);
        Communicator* c = found == comms_.end() ? nullptr : found->second.get();
        if (c != nullptr && c->failure.empty() && c->comm != nullptr) {
          hal_result_t async = HAL_SUCCESS;
          const hal_result_t queried = hal_comm_get_async_error(c->comm, &async);
          if (queried == HAL_SUCCESS && async != HAL_SUCCESS) {
            // The stream's own detail names the failed call and the peer.
            const hal_result_t stream_state = hal_stream_query(stream_handle(c->stream));
            c->failure = stream_state != HAL_SUCCESS && stream_state != HAL_NOT_READY
                             ? hal_error_message(stream_state, "a hal collective failed")
                             : std::string("a hal collective failed: ") + hal_result_string(async);
          }
        }
        if (c != nullptr && !c->failure.empty()) {
          p.work->complete(std::make_exception_ptr(
              c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                    "hal: rank " + std::to_string(getRank()) + ": " + c->failure)));
          continue;
        }
        still.push_back(std::move(p));
      }
      pending_.swap(still);
    }
  }

  void fail_pending_locked(const std::string& message) {
    for (Pending& p : pending_) {
      p.work->complete(std::make_exception_ptr(
          c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message)));
    }
    pending_.clear();
  }

  void stop_watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    watchdog_wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  struct Pending {
    c10::DeviceIndex device;
    c10::intrusive_ptr<WorkHal> work;
  };

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::map<c10::DeviceIndex, std::unique_ptr<Communicator>> comms_;
  uint64_t comm_generation_ = 0;
  std::vector<Pending> pending_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<WorkHal>> coalesced_;
  c10::DeviceIndex coalesced_device_ = -1;
  bool stopping_ = false;
  std::condition_variable watchdog_wake_;
  std::thread watchdog_;
};

}  // namespace

void register_distributed(py::module_& module) {
  py::module_::import("torch.distributed");  // c10d's Python types: Backend, Store
  py::class_<ProcessGroupHal, c10d::Backend, c10::intrusive_ptr<ProcessGroupHal>>(
      module, "ProcessGroupHal",
      "torch.distributed's 'hal' backend: HAL collectives on hal (and cpu) tensors")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupHal>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
}

}  // namespace hal_torch
