// One tag type per public entry point the layers intercept: its name, its
// argument names (in order, as the headers spell them) and a dense index for
// the call summary. The validation layer overloads on these tags; the tracing
// layer labels each argument of a traced call with its name.
#pragma once

#include <cstddef>

namespace hal::loader::layers {

#define HAL_LAYER_API_LIST(X)                                                                      \
  X(PluginReportCount, "hal_plugin_report_count", "out_count")                                     \
  X(PluginReportGet, "hal_plugin_report_get", "index", "out_report")                               \
  X(DeviceCount, "hal_device_count", "out_count")                                                  \
  X(DeviceGet, "hal_device_get", "index", "out_device")                                            \
  X(DeviceGetProperties, "hal_device_get_properties", "device", "out_properties")                  \
  X(DeviceSynchronize, "hal_device_synchronize", "device")                                         \
  X(StreamCreate, "hal_stream_create", "device", "flags", "out_stream")                            \
  X(StreamDestroy, "hal_stream_destroy", "stream")                                                 \
  X(StreamGetDevice, "hal_stream_get_device", "stream", "out_device")                              \
  X(StreamSynchronize, "hal_stream_synchronize", "stream")                                         \
  X(StreamQuery, "hal_stream_query", "stream")                                                     \
  X(StreamWaitEvent, "hal_stream_wait_event", "stream", "event")                                   \
  X(StreamEnqueueHostFn, "hal_stream_enqueue_host_fn", "stream", "fn", "user_data")                \
  X(EventCreate, "hal_event_create", "device", "flags", "out_event")                               \
  X(EventDestroy, "hal_event_destroy", "event")                                                    \
  X(EventRecord, "hal_event_record", "event", "stream")                                            \
  X(EventQuery, "hal_event_query", "event")                                                        \
  X(EventSynchronize, "hal_event_synchronize", "event")                                            \
  X(EventElapsedMs, "hal_event_elapsed_ms", "start", "end", "out_ms")                              \
  X(MemAlloc, "hal_mem_alloc", "device", "kind", "size", "alignment", "out_ptr")                   \
  X(MemFree, "hal_mem_free", "ptr")                                                                \
  X(MemGetInfo, "hal_mem_get_info", "ptr", "out_info")                                             \
  X(MemcpyAsync, "hal_memcpy_async", "dst", "src", "size", "stream")                               \
  X(MemsetAsync, "hal_memset_async", "dst", "value", "size", "stream")                             \
  X(ModuleLoad, "hal_module_load", "device", "desc", "out_module")                                 \
  X(ModuleUnload, "hal_module_unload", "module")                                                   \
  X(KernelGet, "hal_kernel_get", "module", "desc", "out_kernel")                                   \
  X(KernelGetInfo, "hal_kernel_get_info", "kernel", "out_info")                                    \
  X(LaunchKernel, "hal_launch_kernel", "kernel", "config", "arg_count", "args", "stream")          \
  X(CommGetUniqueId, "hal_comm_get_unique_id", "out_id")                                           \
  X(CommInitRank, "hal_comm_init_rank", "device", "nranks", "id", "rank", "config", "out_comm")    \
  X(CommInitAll, "hal_comm_init_all", "count", "devices", "config", "out_comms")                   \
  X(CommDestroy, "hal_comm_destroy", "comm")                                                       \
  X(CommAbort, "hal_comm_abort", "comm")                                                           \
  X(CommGetAsyncError, "hal_comm_get_async_error", "comm", "out_error")                            \
  X(CommCount, "hal_comm_count", "comm", "out_count")                                              \
  X(CommRank, "hal_comm_rank", "comm", "out_rank")                                                 \
  X(CommGetDevice, "hal_comm_get_device", "comm", "out_device")                                    \
  X(Allreduce, "hal_allreduce", "sendbuf", "recvbuf", "count", "dtype", "op", "comm", "stream")    \
  X(Broadcast, "hal_broadcast", "sendbuf", "recvbuf", "count", "dtype", "root", "comm", "stream")  \
  X(Reduce, "hal_reduce", "sendbuf", "recvbuf", "count", "dtype", "op", "root", "comm", "stream")  \
  X(Allgather, "hal_allgather", "sendbuf", "recvbuf", "sendcount", "dtype", "comm", "stream")      \
  X(ReduceScatter, "hal_reduce_scatter", "sendbuf", "recvbuf", "recvcount", "dtype", "op", "comm", \
    "stream")                                                                                      \
  X(Alltoall, "hal_alltoall", "sendbuf", "recvbuf", "count", "dtype", "comm", "stream")            \
  X(Alltoallv, "hal_alltoallv", "sendbuf", "sendcounts", "sdispls", "recvbuf", "recvcounts",       \
    "rdispls", "dtype", "comm", "stream")                                                          \
  X(Send, "hal_send", "sendbuf", "count", "dtype", "peer", "comm", "stream")                       \
  X(Recv, "hal_recv", "recvbuf", "count", "dtype", "peer", "comm", "stream")                       \
  X(GroupStart, "hal_group_start")                                                                 \
  X(GroupEnd, "hal_group_end")                                                                     \
  X(OpPlanCreate, "hal_op_plan_create", "device", "desc", "flags", "out_plan")                     \
  X(OpPlanGetInfo, "hal_op_plan_get_info", "plan", "out_info")                                     \
  X(OpQueryImplementations, "hal_op_query_implementations", "device", "kind", "desc", "flags",     \
    "out_info")                                                                                    \
  X(OpExecute, "hal_op_execute", "plan", "args", "stream")                                         \
  X(OpPlanDestroy, "hal_op_plan_destroy", "plan")                                                  \
  X(MoeRoutingCreate, "hal_moe_routing_create", "comm", "desc", "topk_indices", "stream",          \
    "out_routing")                                                                                 \
  X(MoeRoutingGetInfo, "hal_moe_routing_get_info", "routing", "out_info")                          \
  X(MoeRoutingGetExpertCounts, "hal_moe_routing_get_expert_counts", "routing", "count",            \
    "out_counts")                                                                                  \
  X(MoeRoutingDestroy, "hal_moe_routing_destroy", "routing")                                       \
  X(MoeDispatch, "hal_moe_dispatch", "routing", "tokens", "weights", "hidden", "dtype",            \
    "recv_tokens", "stream")                                                                       \
  X(MoeCombine, "hal_moe_combine", "routing", "expert_rows", "weights", "hidden", "dtype",         \
    "out_tokens", "stream")

enum class ApiIndex : size_t {
#define HAL_LAYER_API_INDEX(tag, ...) k##tag,
  HAL_LAYER_API_LIST(HAL_LAYER_API_INDEX)
#undef HAL_LAYER_API_INDEX
      kCount
};
inline constexpr size_t kApiCount = static_cast<size_t>(ApiIndex::kCount);

// The tags: struct MemcpyAsync { kIndex, kName, kArgs }, ... kArgs ends with
// a NULL, so that calls without arguments (hal_group_start) have one too.
#define HAL_LAYER_API_TAG(tag, name, ...)                                        \
  struct tag {                                                                   \
    static constexpr size_t kIndex = static_cast<size_t>(ApiIndex::k##tag);      \
    static constexpr const char* kName = name;                                   \
    static constexpr const char* kArgs[] = {__VA_ARGS__ __VA_OPT__(, ) nullptr}; \
  };
HAL_LAYER_API_LIST(HAL_LAYER_API_TAG)
#undef HAL_LAYER_API_TAG

// The public name of the entry with summary index |index|.
inline const char* api_name(size_t index) noexcept {
  static constexpr const char* kNames[] = {
#define HAL_LAYER_API_NAME(tag, name, ...) name,
      HAL_LAYER_API_LIST(HAL_LAYER_API_NAME)
#undef HAL_LAYER_API_NAME
  };
  return index < kApiCount ? kNames[index] : "unknown";
}

}  // namespace hal::loader::layers
