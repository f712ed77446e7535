#include "coverage_hooks.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "api_model.hpp"

// The real device query (the wrapper of it records; the hooks must not).
extern "C" hal_result_t __real_hal_device_get_properties(hal_device_t device,
                                                         hal_device_properties_t* out_properties);

namespace halconform::coverage {
namespace {

// ---- the shadow of what the suite created ------------------------------------

struct Allocation {
  size_t size;
  hal_device_t device;
  hal_memory_kind_t kind;
};
struct EventState {
  hal_device_t device = nullptr;
  hal_stream_t last_stream = nullptr;  // of the last successful record
};
struct CommState {
  uint32_t rank = 0;
  uint32_t count = 1;
  hal_device_t device = nullptr;
};

std::mutex g_mutex;
std::map<uintptr_t, Allocation> g_allocations;
std::map<hal_stream_t, hal_device_t> g_streams;
std::set<hal_stream_t> g_lost;
std::map<hal_event_t, EventState> g_events;
std::map<hal_module_t, hal_module_format_t> g_modules;
std::map<hal_module_t, hal_device_t> g_module_devices;
std::map<hal_kernel_t, hal_module_t> g_kernels;
std::map<hal_comm_t, CommState> g_comms;
thread_local int t_group_depth = 0;

// The host function running on this thread, if any.
struct HostFnContext {
  hal_stream_t stream = nullptr;
  hal_device_t device = nullptr;
};
thread_local HostFnContext t_host_fn;

uint64_t tid() {
  return static_cast<uint64_t>(syscall(SYS_gettid));
}

const Allocation* find_allocation(const void* pointer, uintptr_t* out_base = nullptr) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  auto it = g_allocations.upper_bound(address);
  if (it == g_allocations.begin()) return nullptr;
  --it;
  if (address >= it->first + it->second.size) return nullptr;
  if (out_base != nullptr) *out_base = it->first;
  return &it->second;
}

hal_device_t stream_device(hal_stream_t stream) {
  auto it = g_streams.find(stream);
  return it == g_streams.end() ? nullptr : it->second;
}

bool device_has_lost_stream(hal_device_t device) {
  for (hal_stream_t stream : g_lost) {
    if (stream_device(stream) == device) return true;
  }
  return false;
}

// How a copy or fill sees |pointer|: "host" (pageable), the kind of an
// allocation of |device|, or "peer_<kind>" for another device's allocation.
std::string memory_class(const void* pointer, hal_device_t device) {
  const Allocation* allocation = find_allocation(pointer);
  if (allocation == nullptr) return "host";
  return (allocation->device == device ? "" : "peer_") + memory_kind_short(allocation->kind);
}

// Where the calling host function stands relative to |stream| / |device|.
std::string relation_to_host_fn(hal_stream_t stream, hal_device_t device) {
  if (t_host_fn.stream == nullptr) return {};
  if (stream != nullptr) return stream == t_host_fn.stream ? "own_stream" : "other_stream";
  return device == t_host_fn.device ? "own_device" : "other_device";
}

void record_from_host_fn(const PreCall& before, const char* function, hal_result_t result) {
  if (before.from_host_fn.empty()) return;
  record(std::string("from_host_fn:") + function + ":" + before.from_host_fn + ":" +
         hal_result_string(result));
}

void record_on_lost(bool lost, const char* function, hal_result_t result) {
  if (lost) record(std::string("on_lost_stream:") + function + ":" + hal_result_string(result));
}

void note_stream_result(hal_stream_t stream, hal_result_t result) {
  if (result == HAL_ERROR_DEVICE_LOST && stream != nullptr) {
    std::lock_guard lock(g_mutex);
    if (g_streams.count(stream) != 0) g_lost.insert(stream);
  }
}

PreCall stream_call(hal_stream_t stream) {
  PreCall pre;
  std::lock_guard lock(g_mutex);
  pre.stream_lost = g_lost.count(stream) != 0;
  pre.from_host_fn = relation_to_host_fn(stream, stream_device(stream));
  return pre;
}

PreCall device_call(hal_device_t device) {
  PreCall pre;
  std::lock_guard lock(g_mutex);
  pre.device_lost = device_has_lost_stream(device);
  pre.from_host_fn = relation_to_host_fn(nullptr, device);
  return pre;
}

PreCall event_call(hal_event_t event) {
  PreCall pre;
  std::lock_guard lock(g_mutex);
  if (auto it = g_events.find(event); it != g_events.end()) {
    pre.stream_lost = g_lost.count(it->second.last_stream) != 0;
  }
  return pre;
}

// ---- host functions -----------------------------------------------------------

struct Trampoline {
  hal_host_fn_t fn;
  void* user_data;
  hal_stream_t stream;
  hal_device_t device;
  uint64_t enqueuer;
};

void run_trampoline(void* data) {
  Trampoline* trampoline = static_cast<Trampoline*>(data);
  const Trampoline copy = *trampoline;
  delete trampoline;
  record(copy.enqueuer == tid() ? "host_fn:ran_on_enqueuing_thread"
                                : "host_fn:ran_on_another_thread");
  const HostFnContext outer = t_host_fn;
  t_host_fn = {copy.stream, copy.device};
  copy.fn(copy.user_data);
  t_host_fn = outer;
}

}  // namespace

// ---- memory -----------------------------------------------------------------

void after(tag::hal_mem_alloc, const PreCall&, hal_result_t result, hal_device_t device,
           hal_memory_kind_t kind, size_t size, size_t alignment, void** out_ptr) {
  if (result != HAL_SUCCESS || out_ptr == nullptr) return;
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  __real_hal_device_get_properties(device, &properties);
  const uint64_t minimum = properties.min_alignment_bytes;
  record(alignment == 0         ? "alloc:alignment_default"
         : alignment < minimum  ? "alloc:alignment_below_minimum"
         : alignment == minimum ? "alloc:alignment_minimum"
                                : "alloc:alignment_above_minimum");
  std::lock_guard lock(g_mutex);
  g_allocations[reinterpret_cast<uintptr_t>(*out_ptr)] = {size, device, kind};
}

PreCall before_call(tag::hal_mem_free, void* pointer) {
  PreCall pre;
  std::lock_guard lock(g_mutex);
  if (const Allocation* allocation = find_allocation(pointer)) {
    pre.device_lost = device_has_lost_stream(allocation->device);
    pre.from_host_fn = relation_to_host_fn(nullptr, allocation->device);
  }
  return pre;
}

void after(tag::hal_mem_free, const PreCall& before, hal_result_t result, void* pointer) {
  record_on_lost(before.device_lost, "hal_mem_free", result);
  record_from_host_fn(before, "hal_mem_free", result);
  if (result != HAL_SUCCESS) return;
  std::lock_guard lock(g_mutex);
  g_allocations.erase(reinterpret_cast<uintptr_t>(pointer));
}

PreCall before_call(tag::hal_memcpy_async, void*, const void*, size_t, hal_stream_t stream) {
  return stream_call(stream);
}

void after(tag::hal_memcpy_async, const PreCall& before, hal_result_t result, void* dst,
           const void* src, size_t size, hal_stream_t stream) {
  note_stream_result(stream, result);
  record_on_lost(before.stream_lost, "hal_memcpy_async", result);
  if (result != HAL_SUCCESS) return;
  if (size == 0) {
    record("memcpy:size_zero");
    return;
  }
  std::lock_guard lock(g_mutex);
  const hal_device_t device = stream_device(stream);
  const std::string from = memory_class(src, device), to = memory_class(dst, device);
  record("memcpy:" + from + "->" + to);
  const Allocation* a = find_allocation(src);
  const Allocation* b = find_allocation(dst);
  if (a != nullptr && b != nullptr && a->device != device && b->device != device) {
    record("memcpy:stream_of_neither_device");
  }
}

PreCall before_call(tag::hal_memset_async, void*, uint8_t, size_t, hal_stream_t stream) {
  return stream_call(stream);
}

void after(tag::hal_memset_async, const PreCall& before, hal_result_t result, void* dst, uint8_t,
           size_t size, hal_stream_t stream) {
  note_stream_result(stream, result);
  record_on_lost(before.stream_lost, "hal_memset_async", result);
  if (result != HAL_SUCCESS) return;
  if (size == 0) {
    record("memset:size_zero");
    return;
  }
  std::lock_guard lock(g_mutex);
  record("memset:" + memory_class(dst, stream_device(stream)));
}

// ---- streams and host functions ---------------------------------------------

void after(tag::hal_stream_create, const PreCall&, hal_result_t result, hal_device_t device,
           hal_stream_flags_t, hal_stream_t* out_stream) {
  if (result != HAL_SUCCESS || out_stream == nullptr) return;
  std::lock_guard lock(g_mutex);
  g_streams[*out_stream] = device;
  g_lost.erase(*out_stream);
}

PreCall before_call(tag::hal_stream_destroy, hal_stream_t stream) {
  return stream_call(stream);
}

void after(tag::hal_stream_destroy, const PreCall& before, hal_result_t result,
           hal_stream_t stream) {
  record_on_lost(before.stream_lost, "hal_stream_destroy", result);
  record_from_host_fn(before, "hal_stream_destroy", result);
  if (result != HAL_SUCCESS) return;
  std::lock_guard lock(g_mutex);
  g_streams.erase(stream);
  g_lost.erase(stream);
}

PreCall before_call(tag::hal_stream_synchronize, hal_stream_t stream) {
  return stream_call(stream);
}

void after(tag::hal_stream_synchronize, const PreCall& before, hal_result_t result,
           hal_stream_t stream) {
  if (result == HAL_ERROR_DEVICE_LOST && !before.stream_lost) {
    record("lost:first_reported_by:hal_stream_synchronize");
  }
  note_stream_result(stream, result);
  record_on_lost(before.stream_lost, "hal_stream_synchronize", result);
  record_from_host_fn(before, "hal_stream_synchronize", result);
}

PreCall before_call(tag::hal_stream_query, hal_stream_t stream) {
  return stream_call(stream);
}

void after(tag::hal_stream_query, const PreCall& before, hal_result_t result, hal_stream_t stream) {
  note_stream_result(stream, result);
  record_on_lost(before.stream_lost, "hal_stream_query", result);
  record_from_host_fn(before, "hal_stream_query", result);
}

PreCall before_call(tag::hal_stream_wait_event, hal_stream_t stream, hal_event_t) {
  return stream_call(stream);
}

void after(tag::hal_stream_wait_event, const PreCall& before, hal_result_t result,
           hal_stream_t stream, hal_event_t event) {
  note_stream_result(stream, result);
  record_on_lost(before.stream_lost, "hal_stream_wait_event", result);
  if (result != HAL_SUCCESS) return;
  std::lock_guard lock(g_mutex);
  auto it = g_events.find(event);
  if (it == g_events.end()) return;
  if (it->second.last_stream == nullptr) record("wait_event:never_recorded");
  if (g_lost.count(it->second.last_stream) != 0) record("wait_event:on_failed_work");
  record(it->second.device == stream_device(stream) ? "wait_event:same_device"
                                                    : "wait_event:other_device");
}

PreCall before_call(tag::hal_stream_enqueue_host_fn, hal_stream_t& stream, hal_host_fn_t& fn,
                    void*& user_data) {
  PreCall pre = stream_call(stream);
  if (fn == nullptr) return pre;
  hal_device_t device;
  {
    std::lock_guard lock(g_mutex);
    device = stream_device(stream);
  }
  auto* trampoline = new Trampoline{fn, user_data, stream, device, tid()};
  pre.trampoline = trampoline;
  fn = &run_trampoline;
  user_data = trampoline;
  return pre;
}

void after(tag::hal_stream_enqueue_host_fn, const PreCall& before, hal_result_t result,
           hal_stream_t stream, hal_host_fn_t, void*) {
  // A failed enqueue neither ran nor queued the trampoline (SPEC.md §4.4, §11.4).
  if (result != HAL_SUCCESS) delete static_cast<Trampoline*>(before.trampoline);
  note_stream_result(stream, result);
  record_on_lost(before.stream_lost, "hal_stream_enqueue_host_fn", result);
}

PreCall before_call(tag::hal_device_synchronize, hal_device_t device) {
  return device_call(device);
}

void after(tag::hal_device_synchronize, const PreCall& before, hal_result_t result, hal_device_t) {
  record_on_lost(before.device_lost, "hal_device_synchronize", result);
  record_from_host_fn(before, "hal_device_synchronize", result);
}

// ---- events -----------------------------------------------------------------

void after(tag::hal_event_create, const PreCall&, hal_result_t result, hal_device_t device,
           hal_event_flags_t, hal_event_t* out_event) {
  if (result != HAL_SUCCESS || out_event == nullptr) return;
  std::lock_guard lock(g_mutex);
  g_events[*out_event] = EventState{device, nullptr};
}

PreCall before_call(tag::hal_event_record, hal_event_t, hal_stream_t stream) {
  return stream_call(stream);
}

void after(tag::hal_event_record, const PreCall& before, hal_result_t result, hal_event_t event,
           hal_stream_t stream) {
  note_stream_result(stream, result);
  record_on_lost(before.stream_lost, "hal_event_record", result);
  if (result != HAL_SUCCESS) return;
  std::lock_guard lock(g_mutex);
  if (auto it = g_events.find(event); it != g_events.end()) {
    if (it->second.last_stream != nullptr) record("event_record:again");
    it->second.last_stream = stream;
  }
}

PreCall before_call(tag::hal_event_query, hal_event_t event) {
  return event_call(event);
}
// An event that reports failed work marks its recording stream lost.
static void note_event_result(hal_event_t event, hal_result_t result) {
  if (result != HAL_ERROR_DEVICE_LOST) return;
  std::lock_guard lock(g_mutex);
  if (auto it = g_events.find(event); it != g_events.end() && it->second.last_stream != nullptr) {
    g_lost.insert(it->second.last_stream);
  }
}

void after(tag::hal_event_query, const PreCall& before, hal_result_t result, hal_event_t event) {
  record_on_lost(before.stream_lost, "hal_event_query", result);
  note_event_result(event, result);
}
PreCall before_call(tag::hal_event_synchronize, hal_event_t event) {
  return event_call(event);
}
void after(tag::hal_event_synchronize, const PreCall& before, hal_result_t result,
           hal_event_t event) {
  record_on_lost(before.stream_lost, "hal_event_synchronize", result);
  note_event_result(event, result);
}

PreCall before_call(tag::hal_event_elapsed_ms, hal_event_t start, hal_event_t end, float*) {
  PreCall pre = event_call(start);
  pre.stream_lost |= event_call(end).stream_lost;
  return pre;
}

void after(tag::hal_event_elapsed_ms, const PreCall& before, hal_result_t result, hal_event_t start,
           hal_event_t end, float*) {
  record_on_lost(before.stream_lost, "hal_event_elapsed_ms", result);
  if (result != HAL_SUCCESS) return;
  std::lock_guard lock(g_mutex);
  auto a = g_events.find(start), b = g_events.find(end);
  if (a == g_events.end() || b == g_events.end()) return;
  record(a->second.last_stream == b->second.last_stream ? "elapsed:same_stream"
                                                        : "elapsed:across_streams");
}

PreCall before_call(tag::hal_event_destroy, hal_event_t event) {
  return event_call(event);
}

void after(tag::hal_event_destroy, const PreCall& before, hal_result_t result, hal_event_t event) {
  record_on_lost(before.stream_lost, "hal_event_destroy", result);
  if (result != HAL_SUCCESS) return;
  std::lock_guard lock(g_mutex);
  g_events.erase(event);
}

// ---- modules and launches ---------------------------------------------------

void after(tag::hal_module_load, const PreCall&, hal_result_t result, hal_device_t device,
           const hal_module_desc_t* desc, hal_module_t* out_module) {
  if (result != HAL_SUCCESS || out_module == nullptr || desc == nullptr) return;
  std::lock_guard lock(g_mutex);
  g_modules[*out_module] = desc->format;
  g_module_devices[*out_module] = device;
}

PreCall before_call(tag::hal_module_unload, hal_module_t module) {
  PreCall pre;
  std::lock_guard lock(g_mutex);
  if (auto it = g_module_devices.find(module); it != g_module_devices.end()) {
    pre.device_lost = device_has_lost_stream(it->second);
    pre.from_host_fn = relation_to_host_fn(nullptr, it->second);
  }
  return pre;
}

void after(tag::hal_module_unload, const PreCall& before, hal_result_t result,
           hal_module_t module) {
  record_on_lost(before.device_lost, "hal_module_unload", result);
  record_from_host_fn(before, "hal_module_unload", result);
  if (result != HAL_SUCCESS) return;
  std::lock_guard lock(g_mutex);
  g_modules.erase(module);
  g_module_devices.erase(module);
  for (auto it = g_kernels.begin(); it != g_kernels.end();) {
    it = it->second == module ? g_kernels.erase(it) : std::next(it);
  }
}

void after(tag::hal_kernel_get, const PreCall&, hal_result_t result, hal_module_t module,
           const hal_kernel_desc_t*, hal_kernel_t* out_kernel) {
  if (result != HAL_SUCCESS || out_kernel == nullptr) return;
  std::lock_guard lock(g_mutex);
  g_kernels[*out_kernel] = module;
}

PreCall before_call(tag::hal_launch_kernel, hal_kernel_t, const hal_launch_config_t*, uint32_t,
                    const hal_kernel_arg_t*, hal_stream_t stream) {
  return stream_call(stream);
}

void after(tag::hal_launch_kernel, const PreCall& before, hal_result_t result, hal_kernel_t kernel,
           const hal_launch_config_t*, uint32_t, const hal_kernel_arg_t*, hal_stream_t stream) {
  note_stream_result(stream, result);
  record_on_lost(before.stream_lost, "hal_launch_kernel", result);
  if (result != HAL_SUCCESS) return;
  std::lock_guard lock(g_mutex);
  auto k = g_kernels.find(kernel);
  if (k == g_kernels.end()) return;
  auto m = g_modules.find(k->second);
  if (m == g_modules.end()) return;
  const model::EnumType* formats = model::find_enum("hal_module_format_t");
  const char* name = formats != nullptr ? model::enum_name(*formats, m->second) : nullptr;
  record(std::string("launch:format:") + (name != nullptr ? name : "unknown"));
}

// ---- collectives ------------------------------------------------------------

void after(tag::hal_comm_init_all, const PreCall&, hal_result_t result, uint32_t count,
           const hal_device_t* devices, const hal_comm_config_t*, hal_comm_t* out_comms) {
  if (result != HAL_SUCCESS || out_comms == nullptr) return;
  std::lock_guard lock(g_mutex);
  for (uint32_t i = 0; i < count; ++i) g_comms[out_comms[i]] = {i, count, devices[i]};
}

void after(tag::hal_comm_init_rank, const PreCall&, hal_result_t result, hal_device_t device,
           uint32_t nranks, const hal_comm_unique_id_t*, uint32_t rank, const hal_comm_config_t*,
           hal_comm_t* out_comm) {
  if (result != HAL_SUCCESS || out_comm == nullptr) return;
  std::lock_guard lock(g_mutex);
  g_comms[*out_comm] = {rank, nranks, device};
}

void after(tag::hal_group_start, const PreCall&, hal_result_t result) {
  if (result == HAL_SUCCESS) ++t_group_depth;
}
void after(tag::hal_group_end, const PreCall&, hal_result_t) {
  if (t_group_depth > 0) --t_group_depth;
}

namespace {

// The common part of every collective: its grouping, and placement.
void record_collective(const char* function, hal_result_t result, hal_stream_t stream,
                       hal_comm_t comm, bool in_place, int root) {
  note_stream_result(stream, result);
  if (result != HAL_SUCCESS) return;
  const std::string prefix = std::string("collective:") + function;
  if (t_group_depth > 0) {
    record(prefix + ":in_group");
  } else if (std::strcmp(function, "hal_allreduce") == 0) {
    record(prefix + ":outside_group");
  }
  std::lock_guard lock(g_mutex);
  record(prefix + (in_place ? ":in_place" : ":out_of_place"));
  if (root >= 0) {
    if (auto it = g_comms.find(comm); it != g_comms.end()) {
      record(prefix + (it->second.rank == static_cast<uint32_t>(root) ? ":at_root" : ":not_root"));
    }
  }
}

uint32_t comm_rank(hal_comm_t comm) {
  std::lock_guard lock(g_mutex);
  auto it = g_comms.find(comm);
  return it == g_comms.end() ? 0 : it->second.rank;
}

}  // namespace

PreCall before_call(tag::hal_allreduce, const void*, void*, size_t, hal_dtype_t, hal_reduce_op_t,
                    hal_comm_t, hal_stream_t stream) {
  return stream_call(stream);
}

void after(tag::hal_allreduce, const PreCall& before, hal_result_t result, const void* send,
           void* recv, size_t, hal_dtype_t, hal_reduce_op_t, hal_comm_t comm, hal_stream_t stream) {
  record_on_lost(before.stream_lost, "hal_allreduce", result);
  record_collective("hal_allreduce", result, stream, comm, send == recv, -1);
}

void after(tag::hal_broadcast, const PreCall&, hal_result_t result, const void* send, void* recv,
           size_t, hal_dtype_t, uint32_t root, hal_comm_t comm, hal_stream_t stream) {
  record_collective("hal_broadcast", result, stream, comm, send == recv, static_cast<int>(root));
}

void after(tag::hal_reduce, const PreCall&, hal_result_t result, const void* send, void* recv,
           size_t, hal_dtype_t, hal_reduce_op_t, uint32_t root, hal_comm_t comm,
           hal_stream_t stream) {
  record_collective("hal_reduce", result, stream, comm, send == recv, static_cast<int>(root));
}

void after(tag::hal_allgather, const PreCall&, hal_result_t result, const void* send, void* recv,
           size_t count, hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream) {
  const auto* expected = static_cast<const uint8_t*>(recv) +
                         static_cast<size_t>(comm_rank(comm)) * count * HAL_DTYPE_SIZE(dtype);
  record_collective("hal_allgather", result, stream, comm, count > 0 && send == expected, -1);
}

void after(tag::hal_reduce_scatter, const PreCall&, hal_result_t result, const void* send,
           void* recv, size_t count, hal_dtype_t dtype, hal_reduce_op_t, hal_comm_t comm,
           hal_stream_t stream) {
  const auto* expected = static_cast<const uint8_t*>(send) +
                         static_cast<size_t>(comm_rank(comm)) * count * HAL_DTYPE_SIZE(dtype);
  record_collective("hal_reduce_scatter", result, stream, comm, count > 0 && recv == expected, -1);
}

void after(tag::hal_alltoallv, const PreCall&, hal_result_t result, const void*,
           const size_t* send_counts, const size_t* send_displs, void*, const size_t* recv_counts,
           const size_t* recv_displs, hal_dtype_t, hal_comm_t comm, hal_stream_t stream) {
  note_stream_result(stream, result);
  if (result != HAL_SUCCESS) return;
  record(send_displs == nullptr ? "collective:hal_alltoallv:send_packed"
                                : "collective:hal_alltoallv:send_displacements");
  record(recv_displs == nullptr ? "collective:hal_alltoallv:receive_packed"
                                : "collective:hal_alltoallv:receive_displacements");
  uint32_t ranks = 1;
  {
    std::lock_guard lock(g_mutex);
    if (auto it = g_comms.find(comm); it != g_comms.end()) ranks = it->second.count;
  }
  // Gaps: a receive block that does not start where the one before it ended.
  if (recv_displs != nullptr && recv_counts != nullptr) {
    size_t end = 0;
    bool gaps = false, zeros = false;
    for (uint32_t r = 0; r < ranks; ++r) {
      zeros |= recv_counts[r] == 0;
      if (recv_counts[r] == 0) continue;
      gaps |= recv_displs[r] != end;
      end = recv_displs[r] + recv_counts[r];
    }
    record(gaps ? "collective:hal_alltoallv:receive_gaps" : "collective:hal_alltoallv:no_gaps");
    if (zeros) record("collective:hal_alltoallv:zero_counts");
  }
  (void)send_counts;
  if (t_group_depth > 0) record("collective:hal_alltoallv:in_group");
}

}  // namespace halconform::coverage
