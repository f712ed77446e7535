// The validation layer (HAL_VALIDATION=1; on by default in Debug builds).
//
// It runs around the loader's own checks, never instead of them:
// - before a call: every handle argument is looked up in LiveObjects, so a
//   destroyed handle is reported as such even after it left the quarantine
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

#include <hal/plugin_v1.h>

#include <cstddef>
#include <type_traits>

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

// NULL is left to the entry point: it is a no-op for destroy calls and an
// error everywhere else, with the entry point's own message.
inline hal_result_t check_argument(const char* function, const char* argument, hal_device_t h) {
  return h == nullptr ? HAL_SUCCESS : check_handle(function, argument, h, HandleKind::kDevice);
}
inline hal_result_t check_argument(const char* function, const char* argument, hal_stream_t h) {
  return h == nullptr ? HAL_SUCCESS : check_handle(function, argument, h, HandleKind::kStream);
}
inline hal_result_t check_argument(const char* function, const char* argument, hal_event_t h) {
  return h == nullptr ? HAL_SUCCESS : check_handle(function, argument, h, HandleKind::kEvent);
}
inline hal_result_t check_argument(const char* function, const char* argument, hal_module_t h) {
  return h == nullptr ? HAL_SUCCESS : check_handle(function, argument, h, HandleKind::kModule);
}
inline hal_result_t check_argument(const char* function, const char* argument, hal_kernel_t h) {
  return h == nullptr ? HAL_SUCCESS : check_handle(function, argument, h, HandleKind::kKernel);
}
inline hal_result_t check_argument(const char* function, const char* argument, hal_comm_t h) {
  return h == nullptr ? HAL_SUCCESS : check_handle(function, argument, h, HandleKind::kComm);
}
template <class T>
hal_result_t check_argument(const char*, const char*, T) {
  return HAL_SUCCESS;  // not a handle
}

// A NULL handle argument: the entry point reports it, and by SPEC §4.1 it
// takes precedence over any handle to its right, so checking stops there.
template <class T>
bool is_null_handle(T argument) {
  if constexpr (std::is_same_v<T, hal_device_t> || std::is_same_v<T, hal_stream_t> ||
                std::is_same_v<T, hal_event_t> || std::is_same_v<T, hal_module_t> ||
                std::is_same_v<T, hal_kernel_t> || std::is_same_v<T, hal_comm_t>) {
    return argument == nullptr;
  } else {
    return false;
  }
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
hal_result_t extra(Send, const void* sendbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                   hal_comm_t comm, hal_stream_t stream);
hal_result_t extra(Recv, void* recvbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                   hal_comm_t comm, hal_stream_t stream);

template <class Api, class... Args>
hal_result_t before(Api api, Args... args) noexcept {
  try {
    hal_result_t result = HAL_SUCCESS;
    size_t index = 0;
    bool stopped = false;  // at a NULL handle, left to the entry point
    // Unused by calls without arguments (hal_group_start).
    [[maybe_unused]] const auto check_one = [&](auto argument) {
      stopped = stopped || is_null_handle(argument);
      if (result == HAL_SUCCESS && !stopped)
        result = check_argument(Api::kName, Api::kArgs[index], argument);
      ++index;
    };
    (check_one(args), ...);
    if (result != HAL_SUCCESS) return result;
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
void record(CommAbort, hal_result_t result, const void* caller, hal_comm_t comm);

template <class Api, class... Args>
void after(Api api, hal_result_t result, const void* caller, Args... args) noexcept {
  try {
    record(api, result, caller, args...);
  } catch (...) {
    warn(Api::kName, "the validation layer ran out of memory; its records are incomplete");
  }
}

}  // namespace hal::loader::layers::validation
