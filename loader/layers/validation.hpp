// The validation layer (HAL_VALIDATION=1; on by default in Debug builds).
//
// It runs around the loader's own checks, never instead of them:
// - before a call: every handle argument is looked up in LiveObjects, so a
//   destroyed handle is reported as such even after its slot was reused
//   (no read of its memory); then the call's own checks (extra(...)): bounds
//   and device reach of copies, fills and kernel pointer arguments, events
//   used before they were recorded, streams destroyed with work pending;
// - after a call: what it created or destroyed is recorded, with the
//   creation site for the leak report.
// Errors are returned like any other failure, with a sentence; warnings (the
// call is legal but probably not meant) go to stderr, prefixed
// "hal: validation: warning: ". SPEC.md, "Layers", states the policy.
#pragma once

#include "error.hpp"
#include "handle.hpp"
#include "layers/api_calls.hpp"
#include "layers/live_objects.hpp"
#include "preconditions.hpp"

#include <hal/plugin_v1.h>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace hal::loader::layers::validation {

LiveObjects& objects() noexcept;
// HAL_VALIDATION_BACKTRACE=1: creation sites keep a whole backtrace.
void set_backtrace(bool enabled) noexcept;
bool backtrace_enabled() noexcept;

// Prints "hal: validation: warning: <function>: <sentence>" on stderr.
void warn(const char* function, const char* fmt, ...) noexcept
    __attribute__((format(printf, 2, 3)));

// ---- before a call: handles --------------------------------------------------

hal_result_t check_handle(const char* function, const char* argument, const void* handle,
                          HandleKind expected);

// The handle check of SPEC §4.1's step 2 by this layer's records, for
// preconditions::first_handle_fault (the loader's own order, written once). A
// NULL handle ends the check: the entry point reports it (or, for a destroy,
// does nothing), and by §4.1 it takes precedence over any handle to its right.
struct RecordsCheck {
  template <class H>
  hal_result_t operator()(const char* function, preconditions::Live<H>& step, bool& stop) const {
    if (step.handle == nullptr) {
      stop = true;
      return HAL_SUCCESS;
    }
    return check_handle(function, step.name, step.handle, handle_kind_of<H>());
  }
};

// One argument as a step of first_handle_fault.
template <class T>
auto as_step(T argument, const char* name) {
  if constexpr (is_handle_type_v<T>) {
    return preconditions::Live{argument, name};
  } else {
    return preconditions::NotAHandle{};
  }
}

template <class Api, class... Args, size_t... I>
hal_result_t check_handles(std::index_sequence<I...>, Args... args) {
  auto steps = std::tuple{as_step(args, Api::kArgs[I])...};
  return std::apply(
      [](auto&... step) {
        return preconditions::first_handle_fault(Api::kName, RecordsCheck{}, step...);
      },
      steps);
}

// ---- before a call: what each call adds ----------------------------------------

template <class Api, class... Args>
hal_result_t extra(Api, Args...) {
  return HAL_SUCCESS;
}
hal_result_t extra(StreamDestroy, hal_stream_t stream);
hal_result_t extra(StreamWaitEvent, hal_stream_t stream, hal_event_t event);
hal_result_t extra(EventElapsedMs, hal_event_t start, hal_event_t end, float* out_ms);
hal_result_t extra(MemcpyAsync, void* dst, const void* src, size_t size, hal_stream_t stream);
hal_result_t extra(MemsetAsync, void* dst, uint8_t value, size_t size, hal_stream_t stream);
hal_result_t extra(LaunchKernel, hal_kernel_t kernel, const hal_launch_config_t* config,
                   uint32_t arg_count, const hal_kernel_arg_t* args, hal_stream_t stream);
// Collectives: the host ranges of their send and receive buffers (count *
// dtype size, spread over the ranks as the call's kind says), as for copies.
hal_result_t extra(Allreduce, const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                   hal_reduce_op_t op, hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(Broadcast, const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                   uint32_t root, hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(Reduce, const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                   hal_reduce_op_t op, uint32_t root, hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(Allgather, const void* sendbuf, void* recvbuf, size_t sendcount,
                   hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(ReduceScatter, const void* sendbuf, void* recvbuf, size_t recvcount,
                   hal_dtype_t dtype, hal_reduce_op_t op, hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(Alltoall, const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                   hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(Alltoallv, const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                   void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                   hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(Send, const void* sendbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                   hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(Recv, void* recvbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                   hal_comm_t comm, hal_stream_t stream);

template <class Api, class... Args>
hal_result_t before(Api api, Args... args) noexcept {
  try {
    if (hal_result_t result = check_handles<Api>(std::index_sequence_for<Args...>{}, args...);
        result != HAL_SUCCESS) {
      return result;
    }
    return extra(api, args...);
  } catch (...) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, Api::kName, "the validation layer ran out of memory");
  }
}

// ---- after a call: what it created and destroyed -------------------------------

template <class Api, class... Args>
void record(Api, hal_result_t, const void*, Args...) {}
void record(StreamCreate, hal_result_t result, const void* caller, hal_device_t device,
            hal_stream_flags_t flags, hal_stream_t* out_stream);
void record(StreamDestroy, hal_result_t result, const void* caller, hal_stream_t stream);
void record(EventCreate, hal_result_t result, const void* caller, hal_device_t device,
            hal_event_flags_t flags, hal_event_t* out_event);
void record(EventDestroy, hal_result_t result, const void* caller, hal_event_t event);
void record(EventRecord, hal_result_t result, const void* caller, hal_event_t event,
            hal_stream_t stream);
void record(MemAlloc, hal_result_t result, const void* caller, hal_device_t device,
            hal_memory_kind_t kind, size_t size, size_t alignment, void** out_ptr);
void record(MemFree, hal_result_t result, const void* caller, void* ptr);
void record(ModuleLoad, hal_result_t result, const void* caller, hal_device_t device,
            const hal_module_desc_t* desc, hal_module_t* out_module);
void record(ModuleUnload, hal_result_t result, const void* caller, hal_module_t module);
void record(KernelGet, hal_result_t result, const void* caller, hal_module_t module,
            const hal_kernel_desc_t* desc, hal_kernel_t* out_kernel);
void record(CommInitRank, hal_result_t result, const void* caller, hal_device_t device,
            uint32_t nranks, const hal_comm_unique_id_t* id, uint32_t rank,
            const hal_comm_config_t* config, hal_comm_t* out_comm);
void record(CommInitAll, hal_result_t result, const void* caller, uint32_t count,
            const hal_device_t* devices, const hal_comm_config_t* config, hal_comm_t* out_comms);
void record(CommDestroy, hal_result_t result, const void* caller, hal_comm_t comm);
void record(OpPlanCreate, hal_result_t result, const void* caller, hal_device_t device,
            const hal_op_header_t* desc, hal_op_plan_flags_t flags, hal_op_plan_t* out_plan);
void record(OpPlanDestroy, hal_result_t result, const void* caller, hal_op_plan_t plan);
void record(CommAbort, hal_result_t result, const void* caller, hal_comm_t comm);
void record(MoeRoutingCreate, hal_result_t result, const void* caller, hal_comm_t comm,
            const hal_moe_routing_desc_t* desc, const int32_t* topk_indices, hal_stream_t stream,
            hal_moe_routing_t* out_routing);
void record(MoeRoutingDestroy, hal_result_t result, const void* caller, hal_moe_routing_t routing);

template <class Api, class... Args>
void after(Api api, hal_result_t result, const void* caller, Args... args) noexcept {
  try {
    record(api, result, caller, args...);
  } catch (...) {
    warn(Api::kName, "the validation layer ran out of memory; its records are incomplete");
  }
}

}  // namespace hal::loader::layers::validation
