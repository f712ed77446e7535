// The semantic half of the coverage report: hooks the generated wrappers call
// around the calls whose path depends on more than one argument (which
// memory a copy moves between, whether a collective is in place or its rank
// the root, whether a stream is lost, whether a call comes from a host
// function). They keep a shadow of what the suite created (allocations,
// streams, events, modules, kernels, communicators), never call into HAL for
// it, so they cannot change an error detail a test is about to read.
// Every path a hook records has a row in coverage_hooks.cpp's table, which
// says which devices it applies to and where SPEC defines it.
#ifndef HAL_CONFORMANCE_HARNESS_COVERAGE_HOOKS_HPP_
#define HAL_CONFORMANCE_HARNESS_COVERAGE_HOOKS_HPP_

#include <hal.h>

#include <cstddef>
#include <string>
#include <vector>

#include "api_tags.hpp"
#include "coverage.hpp"

namespace halconform::coverage {

// What a hook learns before the call and needs after it.
struct PreCall {
  bool stream_lost = false;    // the call's stream had reported HAL_ERROR_DEVICE_LOST
  bool device_lost = false;    // a stream of the call's device had
  std::string from_host_fn;    // "own_stream", "other_stream", ... when called from a host function
  void* trampoline = nullptr;  // a host function's wrapper, freed when the enqueue fails
};

// Calls without a hook.
template <class Tag, class... Args>
PreCall before_call(Tag, Args&&...) {
  return {};
}
template <class Tag, class... Args>
void after(Tag, const PreCall&, hal_result_t, Args&&...) {}

// Memory.
void after(tag::hal_mem_alloc, const PreCall&, hal_result_t, hal_device_t, hal_memory_kind_t,
           size_t, size_t, void**);
PreCall before_call(tag::hal_mem_free, void*);
void after(tag::hal_mem_free, const PreCall&, hal_result_t, void*);
PreCall before_call(tag::hal_memcpy_async, void*, const void*, size_t, hal_stream_t);
void after(tag::hal_memcpy_async, const PreCall&, hal_result_t, void*, const void*, size_t,
           hal_stream_t);
PreCall before_call(tag::hal_memset_async, void*, uint8_t, size_t, hal_stream_t);
void after(tag::hal_memset_async, const PreCall&, hal_result_t, void*, uint8_t, size_t,
           hal_stream_t);

// Streams and host functions.
void after(tag::hal_stream_create, const PreCall&, hal_result_t, hal_device_t, hal_stream_flags_t,
           hal_stream_t*);
PreCall before_call(tag::hal_stream_destroy, hal_stream_t);
void after(tag::hal_stream_destroy, const PreCall&, hal_result_t, hal_stream_t);
PreCall before_call(tag::hal_stream_synchronize, hal_stream_t);
void after(tag::hal_stream_synchronize, const PreCall&, hal_result_t, hal_stream_t);
PreCall before_call(tag::hal_stream_query, hal_stream_t);
void after(tag::hal_stream_query, const PreCall&, hal_result_t, hal_stream_t);
PreCall before_call(tag::hal_stream_wait_event, hal_stream_t, hal_event_t);
void after(tag::hal_stream_wait_event, const PreCall&, hal_result_t, hal_stream_t, hal_event_t);
// Replaces |fn| and |user_data| with a trampoline that notes where it runs.
PreCall before_call(tag::hal_stream_enqueue_host_fn, hal_stream_t&, hal_host_fn_t&, void*&);
void after(tag::hal_stream_enqueue_host_fn, const PreCall&, hal_result_t, hal_stream_t,
           hal_host_fn_t, void*);
PreCall before_call(tag::hal_device_synchronize, hal_device_t);
void after(tag::hal_device_synchronize, const PreCall&, hal_result_t, hal_device_t);

// Events.
void after(tag::hal_event_create, const PreCall&, hal_result_t, hal_device_t, hal_event_flags_t,
           hal_event_t*);
PreCall before_call(tag::hal_event_record, hal_event_t, hal_stream_t);
void after(tag::hal_event_record, const PreCall&, hal_result_t, hal_event_t, hal_stream_t);
PreCall before_call(tag::hal_event_query, hal_event_t);
void after(tag::hal_event_query, const PreCall&, hal_result_t, hal_event_t);
PreCall before_call(tag::hal_event_synchronize, hal_event_t);
void after(tag::hal_event_synchronize, const PreCall&, hal_result_t, hal_event_t);
PreCall before_call(tag::hal_event_elapsed_ms, hal_event_t, hal_event_t, float*);
void after(tag::hal_event_elapsed_ms, const PreCall&, hal_result_t, hal_event_t, hal_event_t,
           float*);
PreCall before_call(tag::hal_event_destroy, hal_event_t);
void after(tag::hal_event_destroy, const PreCall&, hal_result_t, hal_event_t);

// Modules and launches.
void after(tag::hal_module_load, const PreCall&, hal_result_t, hal_device_t,
           const hal_module_desc_t*, hal_module_t*);
PreCall before_call(tag::hal_module_unload, hal_module_t);
void after(tag::hal_module_unload, const PreCall&, hal_result_t, hal_module_t);
void after(tag::hal_kernel_get, const PreCall&, hal_result_t, hal_module_t,
           const hal_kernel_desc_t*, hal_kernel_t*);
PreCall before_call(tag::hal_launch_kernel, hal_kernel_t, const hal_launch_config_t*, uint32_t,
                    const hal_kernel_arg_t*, hal_stream_t);
void after(tag::hal_launch_kernel, const PreCall&, hal_result_t, hal_kernel_t,
           const hal_launch_config_t*, uint32_t, const hal_kernel_arg_t*, hal_stream_t);

// Collectives.
void after(tag::hal_comm_init_all, const PreCall&, hal_result_t, uint32_t, const hal_device_t*,
           const hal_comm_config_t*, hal_comm_t*);
void after(tag::hal_comm_init_rank, const PreCall&, hal_result_t, hal_device_t, uint32_t,
           const hal_comm_unique_id_t*, uint32_t, const hal_comm_config_t*, hal_comm_t*);
void after(tag::hal_group_start, const PreCall&, hal_result_t);
void after(tag::hal_group_end, const PreCall&, hal_result_t);
PreCall before_call(tag::hal_allreduce, const void*, void*, size_t, hal_dtype_t, hal_reduce_op_t,
                    hal_comm_t, hal_stream_t);
void after(tag::hal_allreduce, const PreCall&, hal_result_t, const void*, void*, size_t,
           hal_dtype_t, hal_reduce_op_t, hal_comm_t, hal_stream_t);
void after(tag::hal_broadcast, const PreCall&, hal_result_t, const void*, void*, size_t,
           hal_dtype_t, uint32_t, hal_comm_t, hal_stream_t);
void after(tag::hal_reduce, const PreCall&, hal_result_t, const void*, void*, size_t, hal_dtype_t,
           hal_reduce_op_t, uint32_t, hal_comm_t, hal_stream_t);
void after(tag::hal_allgather, const PreCall&, hal_result_t, const void*, void*, size_t,
           hal_dtype_t, hal_comm_t, hal_stream_t);
void after(tag::hal_reduce_scatter, const PreCall&, hal_result_t, const void*, void*, size_t,
           hal_dtype_t, hal_reduce_op_t, hal_comm_t, hal_stream_t);
void after(tag::hal_alltoallv, const PreCall&, hal_result_t, const void*, const size_t*,
           const size_t*, void*, const size_t*, const size_t*, hal_dtype_t, hal_comm_t,
           hal_stream_t);

}  // namespace halconform::coverage

#endif  // HAL_CONFORMANCE_HARNESS_COVERAGE_HOOKS_HPP_
