// hal/moe.h: MoE routing, dispatch and combine, composed from public calls
// (hal_memcpy_async, hal_allgather, hal_alltoallv, HAL_OP_EMBEDDING,
// HAL_OP_BINARY, HAL_OP_EMBEDDING_BACKWARD), so that they run on every
// plugin whose device serves those ops and collectives, the loader's
// portable kernels and host-staged collectives included.
#include "api_common.hpp"
#include "buffers.hpp"
#include "collective_comm.hpp"
#include "collective_dispatch.hpp"
#include "layers/intercept.hpp"
#include "moe_routing.hpp"

#include <hal/memory.h>
#include <hal/moe.h>
#include <hal/ops.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

using namespace hal::loader;

namespace {

// Device memory the routing owns; hal_mem_free waits for the work enqueued
// on the device, so a buffer is never recycled under a pending step.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  // At least |bytes| (none for 0); keeps the old buffer when it is big enough.
  hal_result_t reserve(hal_device_t device, size_t bytes) {
    if (bytes <= bytes_) return HAL_SUCCESS;
    release();
    if (hal_result_t r = hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &pointer_);
        r != HAL_SUCCESS) {
      pointer_ = nullptr;
      return r;
    }
    bytes_ = bytes;
    return HAL_SUCCESS;
  }
  void* get() const { return pointer_; }

 private:
  void release() {
    // A failed free is not the failure of the call that releases (SPEC 4.2).
    const KeepErrorDetail keep;
    if (pointer_ != nullptr) hal_mem_free(pointer_);
    pointer_ = nullptr;
    bytes_ = 0;
  }
  void* pointer_ = nullptr;
  size_t bytes_ = 0;
};

struct PlanDestroy {
  void operator()(hal_op_plan_s* plan) const noexcept {
    const KeepErrorDetail keep;  // as DeviceBuffer::release
    hal_op_plan_destroy(plan);
  }
};
using PlanOwner = std::unique_ptr<hal_op_plan_s, PlanDestroy>;

// The steps of dispatch and combine, each one planned op.
enum class Step { kGatherToSend, kGatherWeights, kScale, kGroup, kUngroup, kSumTokens };

}  // namespace

// One rank's routing of one batch: the layout, its permutations on the
// device, the workspace and the plans of dispatch and combine.
struct hal_moe_routing_s {
  static constexpr HandleKind kKind = HandleKind::kMoeRouting;
  hal_moe_routing_s(hal_comm_s* owner, const hal_moe_routing_desc_t& desc)
      : header(HandleKind::kMoeRouting, owner->device->plugin),
        comm(owner),
        device(owner->device),
        num_experts(desc.num_experts),
        top_k(desc.top_k),
        num_tokens(desc.num_tokens),
        local_experts(desc.num_experts / owner->ranks),
        first_local_expert(owner->rank * local_experts) {}
  DispatchHeader header;
  hal_comm_s* comm;
  hal_device_s* device;
  const uint32_t num_experts, top_k;
  const size_t num_tokens;
  const uint32_t local_experts, first_local_expert;
  size_t send_total = 0, recv_total = 0;
  std::vector<size_t> send_rows, recv_rows;  // per rank
  std::vector<size_t> expert_counts;
  DeviceBuffer send_token, send_pair, from_staged, to_staged, offsets;  // i32 each
  // Used by the stream-ordered steps: calls on one routing are ordered by the caller.
  std::mutex mutex;  // guards what follows while a call enqueues
  DeviceBuffer send_area, staged_area, send_weights, sum_workspace;
  // A vector, not a map: a handle must be standard-layout (its header at offset 0).
  std::vector<std::pair<std::tuple<Step, size_t, hal_dtype_t>, PlanOwner>> plans;
};

namespace {

constexpr size_t kI32 = sizeof(int32_t);

hal_tensor_desc_t dense(hal_dtype_t dtype, std::initializer_list<int64_t> shape) {
  hal_tensor_desc_t tensor;
  const std::vector<int64_t> dims(shape);
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(dims.size()), dims.data());
  return tensor;
}

// A failure of a public call made on the caller's behalf, with its detail.
hal_result_t failed_step(hal_result_t result, const char* function, const char* step) {
  const std::string detail = hal_error_last_message();
  return fail(result, function, "%s: %s", step, detail.c_str());
}

// Called when a call on a stream that holds the communicator's collective
// (|collective|), or the wait for it, failed: the communicator's error once
// the collective failed, HAL_SUCCESS otherwise. That error is the verdict
// every rank reaches (a mismatch is the same on every rank); which of a
// rank's calls meets the stream it lost is a matter of timing: a rank
// preempted after enqueueing the collective meets it at its next enqueue
// (HAL_ERROR_DEVICE_LOST), one that got there first at the wait.
hal_result_t collective_failure(hal_comm_t comm, const char* function, const char* collective) {
  const std::string detail = hal_error_last_message();
  hal_result_t async = HAL_SUCCESS;
  hal_result_t asked = HAL_SUCCESS;
  {
    // Its failure is answered here (no verdict): the caller's failure, read
    // from the detail, stays the detail (SPEC 4.2).
    const KeepErrorDetail keep;
    asked = hal_comm_get_async_error(comm, &async);
  }
  if (asked != HAL_SUCCESS || async == HAL_SUCCESS) return HAL_SUCCESS;
  return fail(async, function, "%s failed on the communicator: %s", collective, detail.c_str());
}

// The plan of |step| for rows of |hidden| elements of |dtype|, made once.
hal_result_t plan_of(hal_moe_routing_s& routing, Step step, size_t hidden, hal_dtype_t dtype,
                     const char* function, hal_op_plan_s*& out) {
  const std::tuple key{step, hidden, dtype};
  for (const auto& [made, plan] : routing.plans) {
    if (made == key) {
      out = plan.get();
      return HAL_SUCCESS;
    }
  }
  const auto h = static_cast<int64_t>(hidden);
  const auto send = static_cast<int64_t>(routing.send_total);
  const auto recv = static_cast<int64_t>(routing.recv_total);
  const auto tokens = static_cast<int64_t>(routing.num_tokens);
  hal_op_embedding_desc_t gather{};
  gather.header = {sizeof(gather), nullptr, HAL_OP_EMBEDDING, 0};
  hal_op_binary_desc_t scale{};
  scale.header = {sizeof(scale), nullptr, HAL_OP_BINARY, 0};
  const hal_op_header_t* desc = &gather.header;
  switch (step) {
    case Step::kGatherToSend:  // send row i = tokens[send_token[i]]
      gather.ids = dense(HAL_DTYPE_I32, {send});
      gather.table = dense(dtype, {tokens, h});
      gather.out = dense(dtype, {send, h});
      break;
    case Step::kGatherWeights:  // send weight i = weights[send_pair[i]]
      gather.ids = dense(HAL_DTYPE_I32, {send});
      gather.table = dense(dtype, {tokens * routing.top_k, 1});
      gather.out = dense(dtype, {send, 1});
      break;
    case Step::kScale:  // send row i *= send weight i
      scale.op = HAL_BINARY_MUL;
      scale.alpha = 1.0f;
      scale.a = dense(dtype, {send, h});
      scale.b = dense(dtype, {send, 1});
      scale.out = scale.a;
      desc = &scale.header;
      break;
    case Step::kGroup:    // grouped row g = staged[from_staged[g]]
    case Step::kUngroup:  // staged row s = expert_rows[to_staged[s]]
      gather.ids = dense(HAL_DTYPE_I32, {recv});
      gather.table = dense(dtype, {recv, h});
      gather.out = dense(dtype, {recv, h});
      break;
    case Step::kSumTokens:  // out[t] = sum of the send rows of token t
      gather.header.kind = HAL_OP_EMBEDDING_BACKWARD;
      gather.ids = dense(HAL_DTYPE_I32, {send});
      gather.table = dense(dtype, {tokens, h});
      gather.out = dense(dtype, {send, h});
      break;
  }
  hal_op_plan_t plan = nullptr;
  if (hal_result_t r = hal_op_plan_create(routing.device, desc, HAL_OP_PLAN_DETERMINISTIC, &plan);
      r != HAL_SUCCESS) {
    return failed_step(r, function, "planning a step on the device");
  }
  routing.plans.emplace_back(key, PlanOwner(plan));
  out = plan;
  return HAL_SUCCESS;
}

hal_result_t run(hal_moe_routing_s& routing, Step step, size_t hidden, hal_dtype_t dtype,
                 std::initializer_list<const void*> operands, hal_stream_t stream,
                 const char* function) {
  hal_op_plan_s* plan = nullptr;
  if (hal_result_t r = plan_of(routing, step, hidden, dtype, function, plan); r != HAL_SUCCESS)
    return r;
  std::vector<void*> pointers;
  for (const void* operand : operands) pointers.push_back(const_cast<void*>(operand));
  hal_op_exec_args_t args{
      sizeof(args), nullptr, static_cast<uint32_t>(pointers.size()), 0, pointers.data(), nullptr,
      nullptr,      0};
  if (step == Step::kSumTokens) {
    hal_op_plan_info_t info{};
    info.struct_size = sizeof(info);
    if (hal_result_t r = hal_op_plan_get_info(plan, &info); r != HAL_SUCCESS)
      return failed_step(r, function, "describing a step");
    if (hal_result_t r = routing.sum_workspace.reserve(routing.device, info.workspace_bytes);
        r != HAL_SUCCESS) {
      return failed_step(r, function, "allocating the workspace");
    }
    args.workspace = routing.sum_workspace.get();
    args.workspace_bytes = info.workspace_bytes;
  }
  if (hal_result_t r = hal_op_execute(plan, &args, stream); r != HAL_SUCCESS)
    return failed_step(r, function, "running a step on the device");
  return HAL_SUCCESS;
}

// A caller's buffer of |bytes|: inside one allocation of the routing's device.
hal_result_t check_operand(const Registry& registry, const void* pointer, size_t bytes,
                           const char* name, const hal_device_s* device, const char* function) {
  if (bytes == 0) return HAL_SUCCESS;
  if (pointer == nullptr) return fail(HAL_ERROR_NULL_POINTER, function, "%s is NULL", name);
  const auto begin = reinterpret_cast<uintptr_t>(pointer);
  const auto allocation = registry.allocations.find_containing(begin);
  if (!allocation) {
    if (hal_result_t freed = refuse_freed(registry, begin, name, function); freed != HAL_SUCCESS)
      return freed;
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "%s %p is not in a HAL allocation (device memory is required)", name, pointer);
  }
  if (allocation->device != device) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, function,
                "%s is an allocation of device %u, the routing's communicator is on device %u",
                name, allocation->device->properties.index, device->properties.index);
  }
  const size_t offset = begin - allocation->base;
  if (bytes > allocation->size - offset) {
    return fail(HAL_ERROR_OUT_OF_BOUNDS, function,
                "%s: %zu bytes at offset %zu overrun a %zu-byte allocation", name, bytes, offset,
                allocation->size);
  }
  return HAL_SUCCESS;
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// What dispatch and combine check before anything is enqueued.
struct RowsCall {
  hal_moe_routing_s* routing;
  const void* rows_in;  // tokens (dispatch) or expert_rows (combine)
  const void* weights;
  size_t hidden;
  hal_dtype_t dtype;
  void* rows_out;
  hal_stream_s* stream;
  bool dispatch;
};

hal_result_t check_rows_call(const RowsCall& call, const Registry& registry,
                             HandleUse<hal_comm_s>& comm_use, const char* function) {
  hal_moe_routing_s& routing = *call.routing;
  const bool is_float =
      call.dtype == HAL_DTYPE_F32 || call.dtype == HAL_DTYPE_F16 || call.dtype == HAL_DTYPE_BF16;
  if (!is_float) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function, "dtype %d is not f32, f16 or bf16",
                static_cast<int>(call.dtype));
  }
  if (call.hidden == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, function, "hidden is 0");
  const size_t elem = HAL_DTYPE_SIZE(call.dtype);
  const size_t rows_limit = std::max(routing.send_total, routing.recv_total);
  if (call.hidden > SIZE_MAX / elem / std::max<size_t>(rows_limit, routing.num_tokens + 1)) {
    return fail(HAL_ERROR_INVALID_SIZE, function, "hidden %zu overflows the row sizes",
                call.hidden);
  }
  const size_t row = call.hidden * elem;
  const size_t token_bytes = routing.num_tokens * row, expert_bytes = routing.recv_total * row;
  const size_t in_bytes = call.dispatch ? token_bytes : expert_bytes;
  const size_t out_bytes = call.dispatch ? expert_bytes : token_bytes;
  const size_t weight_bytes = call.weights != nullptr ? routing.send_total * elem : 0;
  const char* in_name = call.dispatch ? "tokens" : "expert_rows";
  const char* out_name = call.dispatch ? "recv_tokens" : "out_tokens";
  if (hal_result_t r =
          check_operand(registry, call.rows_in, in_bytes, in_name, routing.device, function);
      r != HAL_SUCCESS)
    return r;
  if (hal_result_t r =
          check_operand(registry, call.weights, weight_bytes, "weights", routing.device, function);
      r != HAL_SUCCESS)
    return r;
  if (hal_result_t r =
          check_operand(registry, call.rows_out, out_bytes, out_name, routing.device, function);
      r != HAL_SUCCESS)
    return r;
  if (overlaps(call.rows_out, out_bytes, call.rows_in, in_bytes) ||
      overlaps(call.rows_out, out_bytes, call.weights, weight_bytes)) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function, "%s overlaps an input", out_name);
  }
  if (call.stream->device != routing.device) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, function,
                "the stream is on device %u, the routing's communicator on device %u",
                call.stream->device->properties.index, routing.device->properties.index);
  }
  if (hal_result_t r =
          comm_use.acquire(routing.comm, HandleKind::kComm, function, "the routing's communicator");
      r != HAL_SUCCESS) {
    return r;
  }
  if (in_collective_group()) {
    return fail(HAL_ERROR_INVALID_STATE, function,
                "called inside hal_group_start/hal_group_end: it enqueues work around its "
                "collective, which a group would reorder");
  }
  return HAL_SUCCESS;
}

// The alltoallv of one step: rows of |hidden| elements, |from| to |to|.
hal_result_t exchange_rows(const hal_moe_routing_s& routing, const void* from,
                           const std::vector<size_t>& from_rows, void* to,
                           const std::vector<size_t>& to_rows, size_t hidden, hal_dtype_t dtype,
                           hal_stream_t stream, const char* function) {
  std::vector<size_t> send_counts(from_rows), recv_counts(to_rows);
  for (size_t& c : send_counts) c *= hidden;
  for (size_t& c : recv_counts) c *= hidden;
  if (hal_result_t r = hal_alltoallv(from, send_counts.data(), nullptr, to, recv_counts.data(),
                                     nullptr, dtype, routing.comm, stream);
      r != HAL_SUCCESS) {
    return failed_step(r, function, "the all-to-all of the rows");
  }
  return HAL_SUCCESS;
}

// |r|, the result of a step enqueued behind the call's all-to-all: when
// that failed (ranks with different hidden or dtype), its error on the
// communicator rather than the lost stream the step met (collective_failure).
hal_result_t behind_exchange(hal_result_t r, const hal_moe_routing_s& routing,
                             const char* function) {
  if (r == HAL_SUCCESS) return r;
  const hal_result_t verdict =
      collective_failure(routing.comm, function, "the all-to-all of the rows");
  return verdict != HAL_SUCCESS ? verdict : r;
}

hal_result_t reserve_areas(hal_moe_routing_s& routing, size_t hidden, hal_dtype_t dtype,
                           bool weighted, const char* function) {
  const size_t row = hidden * HAL_DTYPE_SIZE(dtype);
  hal_result_t r = routing.send_area.reserve(routing.device, routing.send_total * row);
  if (r == HAL_SUCCESS) r = routing.staged_area.reserve(routing.device, routing.recv_total * row);
  if (r == HAL_SUCCESS && weighted)
    r = routing.send_weights.reserve(routing.device, routing.send_total * HAL_DTYPE_SIZE(dtype));
  return r == HAL_SUCCESS ? r : failed_step(r, function, "allocating the workspace");
}

// Send rows *= their pair's weight.
hal_result_t scale_send_rows(hal_moe_routing_s& routing, const void* weights, size_t hidden,
                             hal_dtype_t dtype, hal_stream_t stream, const char* function) {
  if (hal_result_t r =
          run(routing, Step::kGatherWeights, 1, dtype,
              {routing.send_pair.get(), weights, routing.send_weights.get()}, stream, function);
      r != HAL_SUCCESS) {
    return r;
  }
  return run(routing, Step::kScale, hidden, dtype,
             {routing.send_area.get(), routing.send_weights.get(), routing.send_area.get()}, stream,
             function);
}

hal_result_t dispatch_rows(hal_moe_routing_s& routing, const RowsCall& call, const char* function) {
  std::lock_guard lock(routing.mutex);
  hal_stream_t stream = call.stream;
  if (hal_result_t r =
          reserve_areas(routing, call.hidden, call.dtype, call.weights != nullptr, function);
      r != HAL_SUCCESS)
    return r;
  if (routing.send_total > 0) {
    if (hal_result_t r = run(routing, Step::kGatherToSend, call.hidden, call.dtype,
                             {routing.send_token.get(), call.rows_in, routing.send_area.get()},
                             stream, function);
        r != HAL_SUCCESS)
      return r;
    if (call.weights != nullptr) {
      if (hal_result_t r =
              scale_send_rows(routing, call.weights, call.hidden, call.dtype, stream, function);
          r != HAL_SUCCESS)
        return r;
    }
  }
  if (hal_result_t r = exchange_rows(routing, routing.send_area.get(), routing.send_rows,
                                     routing.staged_area.get(), routing.recv_rows, call.hidden,
                                     call.dtype, stream, function);
      r != HAL_SUCCESS)
    return r;
  if (routing.recv_total == 0) return HAL_SUCCESS;
  return behind_exchange(
      run(routing, Step::kGroup, call.hidden, call.dtype,
          {routing.from_staged.get(), routing.staged_area.get(), call.rows_out}, stream, function),
      routing, function);
}

hal_result_t combine_rows(hal_moe_routing_s& routing, const RowsCall& call, const char* function) {
  std::lock_guard lock(routing.mutex);
  hal_stream_t stream = call.stream;
  if (hal_result_t r =
          reserve_areas(routing, call.hidden, call.dtype, call.weights != nullptr, function);
      r != HAL_SUCCESS)
    return r;
  if (routing.recv_total > 0) {
    if (hal_result_t r = run(routing, Step::kUngroup, call.hidden, call.dtype,
                             {routing.to_staged.get(), call.rows_in, routing.staged_area.get()},
                             stream, function);
        r != HAL_SUCCESS)
      return r;
  }
  if (hal_result_t r = exchange_rows(routing, routing.staged_area.get(), routing.recv_rows,
                                     routing.send_area.get(), routing.send_rows, call.hidden,
                                     call.dtype, stream, function);
      r != HAL_SUCCESS)
    return r;
  if (routing.send_total == 0) return HAL_SUCCESS;
  if (call.weights != nullptr) {
    if (hal_result_t r =
            scale_send_rows(routing, call.weights, call.hidden, call.dtype, stream, function);
        r != HAL_SUCCESS)
      return behind_exchange(r, routing, function);
  }
  return behind_exchange(
      run(routing, Step::kSumTokens, call.hidden, call.dtype,
          {routing.send_token.get(), routing.send_area.get(), call.rows_out}, stream, function),
      routing, function);
}

hal_result_t rows_call(RowsCall call, const char* function) {
  Registry* registry = nullptr;
  HandleUse<hal_moe_routing_s> routing_use;
  HandleUse<hal_stream_s> stream_use;
  HandleUse<hal_comm_s> comm_use;
  if (hal_result_t r =
          check_preconditions_in(registry, function, Held{call.routing, "routing", routing_use},
                                 Held{call.stream, "stream", stream_use});
      r != HAL_SUCCESS)
    return r;
  if (hal_result_t r = check_rows_call(call, *registry, comm_use, function); r != HAL_SUCCESS)
    return r;
  return call.dispatch ? dispatch_rows(*call.routing, call, function)
                       : combine_rows(*call.routing, call, function);
}

// ---- hal_moe_routing_create ----------------------------------------------------

// Waits for |stream|; a collective that failed on it gives the communicator's error.
hal_result_t wait_for(hal_stream_t stream, hal_comm_t comm, const char* function,
                      const char* step) {
  const hal_result_t r = hal_stream_synchronize(stream);
  if (r == HAL_SUCCESS) return r;
  if (hal_result_t verdict = collective_failure(comm, function, step); verdict != HAL_SUCCESS)
    return verdict;
  const std::string detail = hal_error_last_message();
  return fail(r, function, "%s: %s", step, detail.c_str());
}

hal_result_t upload(DeviceBuffer& buffer, const std::vector<int32_t>& values, hal_device_t device,
                    hal_stream_t stream, const char* function) {
  if (values.empty()) return HAL_SUCCESS;
  const size_t bytes = values.size() * kI32;
  if (hal_result_t r = buffer.reserve(device, bytes); r != HAL_SUCCESS)
    return failed_step(r, function, "allocating the routing");
  if (hal_result_t r = hal_memcpy_async(buffer.get(), values.data(), bytes, stream);
      r != HAL_SUCCESS)
    return failed_step(r, function, "copying the routing to the device");
  return HAL_SUCCESS;
}

hal_result_t routing_create_body(hal_comm_t comm, const hal_moe_routing_desc_t* desc,
                                 const int32_t* topk_indices, hal_stream_t stream,
                                 hal_moe_routing_t* out_routing) {
  constexpr const char* kFunction = "hal_moe_routing_create";
  return guarded(kFunction, [&]() -> hal_result_t {
    Registry* registry = nullptr;
    HandleUse<hal_comm_s> comm_use;
    HandleUse<hal_stream_s> stream_use;
    if (hal_result_t r = check_preconditions_in(
            registry, kFunction, Held{comm, "comm", comm_use}, Required{desc, "desc"},
            Held{stream, "stream", stream_use}, Required{out_routing, "out_routing"});
        r != HAL_SUCCESS)
      return r;
    hal_result_t result = HAL_SUCCESS;
    if (struct_too_small(desc, kFunction, "desc", "hal_moe_routing_desc_t", result)) return result;
    const uint32_t ranks = comm->ranks;
    if (desc->num_experts == 0 || desc->num_experts % ranks != 0) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "num_experts %u is not a positive multiple of the rank count %u",
                  desc->num_experts, ranks);
    }
    if (desc->top_k == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "top_k is 0");
    if (desc->num_tokens > static_cast<size_t>(INT32_MAX) / desc->top_k) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "num_tokens %zu times top_k %u is more than 2^31 - 1 rows", desc->num_tokens,
                  desc->top_k);
    }
    const size_t pairs = desc->num_tokens * desc->top_k;
    if (pairs > 0 && topk_indices == nullptr) {
      return fail(HAL_ERROR_NULL_POINTER, kFunction, "topk_indices is NULL");
    }
    if (pairs > 0) {  // host memory is allowed, memory hal_mem_free released is not (§6)
      if (hal_result_t freed = refuse_freed(*registry, reinterpret_cast<uintptr_t>(topk_indices),
                                            "topk_indices", kFunction);
          freed != HAL_SUCCESS) {
        return freed;
      }
    }
    if (const auto allocation =
            registry->allocations.find_containing(reinterpret_cast<uintptr_t>(topk_indices));
        pairs > 0 && allocation) {
      const size_t offset = reinterpret_cast<uintptr_t>(topk_indices) - allocation->base;
      if (pairs * kI32 > allocation->size - offset) {
        return fail(HAL_ERROR_OUT_OF_BOUNDS, kFunction,
                    "topk_indices: %zu bytes at offset %zu overrun a %zu-byte allocation",
                    pairs * kI32, offset, allocation->size);
      }
      if (allocation->device != comm->device) {
        return fail(HAL_ERROR_DEVICE_MISMATCH, kFunction,
                    "topk_indices is an allocation of device %u, the communicator is on device %u",
                    allocation->device->properties.index, comm->device->properties.index);
      }
    }
    if (stream->device != comm->device) {
      return fail(HAL_ERROR_DEVICE_MISMATCH, kFunction,
                  "the stream is on device %u, the communicator's rank %u on device %u",
                  stream->device->properties.index, comm->rank, comm->device->properties.index);
    }
    if (in_collective_group()) {
      return fail(HAL_ERROR_INVALID_STATE, kFunction,
                  "called inside hal_group_start/hal_group_end: it waits for its own collective");
    }

    // The indices on the host.
    std::vector<int32_t> indices(pairs);
    if (pairs > 0) {
      if (hal_result_t r = hal_memcpy_async(indices.data(), topk_indices, pairs * kI32, stream);
          r != HAL_SUCCESS)
        return failed_step(r, kFunction, "reading topk_indices");
      if (hal_result_t r = wait_for(stream, comm, kFunction, "reading topk_indices");
          r != HAL_SUCCESS)
        return r;
    }
    // Every rank's block on every rank, through device memory (as any plugin's collectives take).
    const std::vector<int64_t> block = hal::loader::moe::local_block(
        indices.data(), desc->num_tokens, desc->top_k, desc->num_experts, desc->recv_capacity);
    const size_t block_bytes = block.size() * sizeof(int64_t);
    DeviceBuffer exchange;
    if (hal_result_t r = exchange.reserve(comm->device, block_bytes * (ranks + 1));
        r != HAL_SUCCESS)
      return failed_step(r, kFunction, "allocating the count exchange");
    auto* const sent = static_cast<unsigned char*>(exchange.get());
    std::vector<int64_t> blocks(block.size() * ranks);
    if (hal_result_t r = hal_memcpy_async(sent, block.data(), block_bytes, stream);
        r != HAL_SUCCESS)
      return failed_step(r, kFunction, "copying the counts");
    if (hal_result_t r =
            hal_allgather(sent, sent + block_bytes, block.size(), HAL_DTYPE_I64, comm, stream);
        r != HAL_SUCCESS)
      return failed_step(r, kFunction, "exchanging the counts");
    if (hal_result_t r =
            hal_memcpy_async(blocks.data(), sent + block_bytes, block_bytes * ranks, stream);
        r != HAL_SUCCESS) {
      if (hal_result_t verdict = collective_failure(comm, kFunction, "exchanging the counts");
          verdict != HAL_SUCCESS)
        return verdict;
      return failed_step(r, kFunction, "copying the counts");
    }
    if (hal_result_t r = wait_for(stream, comm, kFunction, "exchanging the counts");
        r != HAL_SUCCESS)
      return r;
    const auto verdict = hal::loader::moe::judge(blocks, ranks, desc->num_experts, desc->top_k);
    if (verdict.result != HAL_SUCCESS) {
      return fail(verdict.result, kFunction, "%s", verdict.message.c_str());
    }
    const auto layout = hal::loader::moe::make_layout(indices.data(), desc->num_tokens, desc->top_k,
                                                      desc->num_experts, blocks, comm->rank, ranks);

    auto routing = make_handle<hal_moe_routing_s>(comm, *desc);
    routing->send_total = pairs;
    routing->recv_total = layout.from_staged.size();
    routing->send_rows = layout.send_rows;
    routing->recv_rows = layout.recv_rows;
    routing->expert_counts = layout.expert_counts;
    for (auto [buffer, values] : {std::pair{&routing->send_token, &layout.send_token},
                                  std::pair{&routing->send_pair, &layout.send_pair},
                                  std::pair{&routing->from_staged, &layout.from_staged},
                                  std::pair{&routing->to_staged, &layout.to_staged},
                                  std::pair{&routing->offsets, &layout.offsets}}) {
      if (hal_result_t r = upload(*buffer, *values, comm->device, stream, kFunction);
          r != HAL_SUCCESS)
        return r;
    }
    // The host vectors are read by the copies: wait for them.
    if (hal_result_t r = wait_for(stream, comm, kFunction, "copying the routing"); r != HAL_SUCCESS)
      return r;
    *out_routing = routing.release();
    return HAL_SUCCESS;
  });
}

hal_result_t routing_get_info_body(hal_moe_routing_t routing, hal_moe_routing_info_t* out_info) {
  constexpr const char* kFunction = "hal_moe_routing_get_info";
  HandleUse<hal_moe_routing_s> use;
  if (hal_result_t r = check_preconditions(kFunction, Held{routing, "routing", use},
                                           Required{out_info, "out_info"});
      r != HAL_SUCCESS)
    return r;
  hal_result_t result = HAL_SUCCESS;
  if (struct_too_small(out_info, kFunction, "out_info", "hal_moe_routing_info_t", result))
    return result;
  hal_moe_routing_info_t info{};
  info.num_local_experts = routing->local_experts;
  info.first_local_expert = routing->first_local_expert;
  info.num_send_rows = routing->send_total;
  info.num_recv_rows = routing->recv_total;
  info.expert_offsets = static_cast<const int32_t*>(routing->offsets.get());
  write_sized(info, out_info);
  return HAL_SUCCESS;
}

hal_result_t routing_get_expert_counts_body(hal_moe_routing_t routing, uint32_t count,
                                            size_t* out_counts) {
  constexpr const char* kFunction = "hal_moe_routing_get_expert_counts";
  HandleUse<hal_moe_routing_s> use;
  if (hal_result_t r = check_preconditions(kFunction, Held{routing, "routing", use},
                                           Required{out_counts, "out_counts"});
      r != HAL_SUCCESS)
    return r;
  if (count != routing->local_experts) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                "count is %u, but the routing has %u local experts", count, routing->local_experts);
  }
  std::copy(routing->expert_counts.begin(), routing->expert_counts.end(), out_counts);
  return HAL_SUCCESS;
}

hal_result_t routing_destroy_body(hal_moe_routing_t routing) {
  constexpr const char* kFunction = "hal_moe_routing_destroy";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t r = check_preconditions(kFunction, Nullable{routing, "routing"});
        r != HAL_SUCCESS)
      return r;
    if (routing == nullptr) return HAL_SUCCESS;
    if (!begin_destroy(routing->header)) {
      return reject_destroying(routing, HandleKind::kMoeRouting, kFunction, "routing");
    }
    HandleOwner<hal_moe_routing_s> owned(routing);  // frees its device memory (hal_mem_free waits)
    return HAL_SUCCESS;
  });
}

hal_result_t dispatch_body(hal_moe_routing_t routing, const void* tokens, const void* weights,
                           size_t hidden, hal_dtype_t dtype, void* recv_tokens,
                           hal_stream_t stream) {
  constexpr const char* kFunction = "hal_moe_dispatch";
  return guarded(kFunction, [&] {
    return rows_call({routing, tokens, weights, hidden, dtype, recv_tokens, stream, true},
                     kFunction);
  });
}

hal_result_t combine_body(hal_moe_routing_t routing, const void* expert_rows, const void* weights,
                          size_t hidden, hal_dtype_t dtype, void* out_tokens, hal_stream_t stream) {
  constexpr const char* kFunction = "hal_moe_combine";
  return guarded(kFunction, [&] {
    return rows_call({routing, expert_rows, weights, hidden, dtype, out_tokens, stream, false},
                     kFunction);
  });
}

}  // namespace

// The public entry points, through the layers (layers/intercept.hpp).
hal_result_t hal_moe_routing_create(hal_comm_t comm, const hal_moe_routing_desc_t* desc,
                                    const int32_t* topk_indices, hal_stream_t stream,
                                    hal_moe_routing_t* out_routing) {
  return layers::call<layers::MoeRoutingCreate, routing_create_body>(
      HAL_CALLER, comm, desc, topk_indices, stream, out_routing);
}

hal_result_t hal_moe_routing_get_info(hal_moe_routing_t routing, hal_moe_routing_info_t* out_info) {
  return layers::call<layers::MoeRoutingGetInfo, routing_get_info_body>(HAL_CALLER, routing,
                                                                        out_info);
}

hal_result_t hal_moe_routing_get_expert_counts(hal_moe_routing_t routing, uint32_t count,
                                               size_t* out_counts) {
  return layers::call<layers::MoeRoutingGetExpertCounts, routing_get_expert_counts_body>(
      HAL_CALLER, routing, count, out_counts);
}

hal_result_t hal_moe_routing_destroy(hal_moe_routing_t routing) {
  return layers::call<layers::MoeRoutingDestroy, routing_destroy_body>(HAL_CALLER, routing);
}

hal_result_t hal_moe_dispatch(hal_moe_routing_t routing, const void* tokens, const void* weights,
                              size_t hidden, hal_dtype_t dtype, void* recv_tokens,
                              hal_stream_t stream) {
  return layers::call<layers::MoeDispatch, dispatch_body>(HAL_CALLER, routing, tokens, weights,
                                                          hidden, dtype, recv_tokens, stream);
}

hal_result_t hal_moe_combine(hal_moe_routing_t routing, const void* expert_rows,
                             const void* weights, size_t hidden, hal_dtype_t dtype,
                             void* out_tokens, hal_stream_t stream) {
  return layers::call<layers::MoeCombine, combine_body>(HAL_CALLER, routing, expert_rows, weights,
                                                        hidden, dtype, out_tokens, stream);
}
