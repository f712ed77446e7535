#include "layers/validation.hpp"

#include <dlfcn.h>

#include "collective/collective_comm.hpp"
#include "hal_collective/alltoallv.hpp"
#include "hal_collective/reduce.hpp"
#include "hal_collective/status.hpp"
#include "objects.hpp"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace hal::loader::layers::validation {

namespace {

std::atomic<bool> backtrace_on{false};

const char* article(HandleKind kind) {
  return kind == HandleKind::kEvent ? "an" : "a";
}

bool has_cap(const hal_device_s* device, hal_device_caps_t cap) {
  return (device->properties.capabilities & cap) != 0;
}

// Whether a kernel on |device| may dereference a pointer into |allocation|:
// its own memory of any kind; a peer's with peer access on both; a HOST or
// SHARED allocation of the same plugin when |device| has unified addressing.
bool kernel_reaches(const hal_device_s* device, const AllocationView& allocation) {
  if (allocation.device == device) return true;
  if (allocation.device->plugin != device->plugin) return false;
  if (has_cap(device, HAL_DEVICE_CAP_PEER_ACCESS) &&
      has_cap(allocation.device, HAL_DEVICE_CAP_PEER_ACCESS))
    return true;
  return allocation.kind != HAL_MEMORY_DEVICE && has_cap(device, HAL_DEVICE_CAP_UNIFIED_ADDRESSING);
}

// Rules 3 and 4 of SPEC.md §6, which the loader's fast path leaves to this
// layer: a range in no allocation must not start at an allocation's end nor
// run into one. (The peer-access rule of §6 is not enforced: the loader and
// its tests accept a peer's allocation without HAL_DEVICE_CAP_PEER_ACCESS.)
hal_result_t check_copy_range(const char* function, const char* name, const void* pointer,
                              size_t size) {
  const auto begin = reinterpret_cast<uintptr_t>(pointer);
  if (size == 0 || begin == 0 || size > UINTPTR_MAX - begin) return HAL_SUCCESS;  // the loader's
  const LiveObjects& live = objects();
  if (live.allocation_containing(begin)) return HAL_SUCCESS;  // the loader checks its bounds
  if (const auto before = live.allocation_ending_at(begin)) {
    return fail(HAL_ERROR_OUT_OF_BOUNDS, function,
                "%s: %zu bytes at offset %zu overrun a %zu-byte allocation", name, size,
                before->size, before->size);
  }
  if (const auto inside = live.first_allocation_overlapping(begin, begin + size)) {
    return fail(HAL_ERROR_OUT_OF_BOUNDS, function,
                "%s: the host range %p + %zu bytes runs into the allocation at %p", name, pointer,
                size, reinterpret_cast<void*>(inside->base));
  }
  return HAL_SUCCESS;
}

// A collective's buffers: where the loader's checks would pass (valid dtype,
// root or peer, no overflow), its send and receive ranges on the calling
// rank go through check_copy_range. Ranges inside an allocation are the
// loader's (bounds and device); this adds the host-range rules.
hal_result_t check_collective(const char* function, hal_collective_kind_t kind, const void* sendbuf,
                              const void* recvbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                              hal_comm_t comm, hal_stream_t stream) {
  if (comm == nullptr || stream == nullptr || !hal::collective::is_valid_dtype(dtype)) {
    return HAL_SUCCESS;
  }
  const bool rooted = kind == HAL_COLLECTIVE_BROADCAST || kind == HAL_COLLECTIVE_REDUCE ||
                      kind == HAL_COLLECTIVE_SEND || kind == HAL_COLLECTIVE_RECV;
  if ((rooted && peer >= comm->ranks) || count > SIZE_MAX / HAL_DTYPE_SIZE(dtype) / comm->ranks) {
    return HAL_SUCCESS;
  }
  const hal_collective_call_t call{
      kind, dtype, HAL_REDUCE_SUM, peer, sendbuf, const_cast<void*>(recvbuf), count};
  const auto extent = hal::collective::call_extent(call, comm->rank, comm->ranks);
  if (hal_result_t result = check_copy_range(function, "sendbuf", sendbuf, extent.send_bytes);
      result != HAL_SUCCESS) {
    return result;
  }
  return check_copy_range(function, "recvbuf", recvbuf, extent.recv_bytes);
}

}  // namespace

LiveObjects& objects() noexcept {
  static LiveObjects live;
  return live;
}

void set_backtrace(bool enabled) noexcept {
  backtrace_on.store(enabled, std::memory_order_relaxed);
}

bool backtrace_enabled() noexcept {
  return backtrace_on.load(std::memory_order_relaxed);
}

void warn(const char* function, const char* fmt, ...) noexcept {
  char sentence[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(sentence, sizeof sentence, fmt, args);
  va_end(args);
  std::fprintf(stderr, "hal: validation: warning: %s: %s\n", function, sentence);
}

hal_result_t check_handle(const char* function, const char* argument, const void* handle,
                          HandleKind expected) {
  const HandleState state = objects().find(handle);
  if (!state.known) {
    return fail(HAL_ERROR_INVALID_HANDLE, function,
                "%s %p is not a HAL handle (expected %s %s handle), by the validation layer's "
                "records",
                argument, handle, article(expected), kind_name(expected));
  }
  if (state.kind != expected) {
    return fail(HAL_ERROR_INVALID_HANDLE, function, "%s %p is a %s%s handle, not %s %s handle",
                argument, handle, state.live ? "" : "destroyed ", kind_name(state.kind),
                article(expected), kind_name(expected));
  }
  if (!state.live) {
    return fail(HAL_ERROR_DESTROYED_HANDLE, function, "%s %p is a %s that was already destroyed",
                argument, handle, kind_name(expected));
  }
  return HAL_SUCCESS;
}

hal_result_t extra(StreamDestroy, hal_stream_t stream) {
  if (stream == nullptr) return HAL_SUCCESS;
  // Held like any call, so a racing destroy cannot free the plugin's stream
  // under the query; a destroy that came first leaves the error to the body.
  HandleUse<hal_stream_s> use;
  if (use.acquire(stream, HandleKind::kStream, StreamDestroy::kName, "stream") != HAL_SUCCESS) {
    return HAL_SUCCESS;
  }
  const hal_plugin_table_v1_t& table = table_of(stream);
  if (table.stream_query != nullptr && table.stream_query(stream->impl) == HAL_NOT_READY) {
    warn(StreamDestroy::kName,
         "stream %p still has work pending; hal_stream_destroy waits for it (synchronise "
         "first to make the wait explicit)",
         static_cast<void*>(stream));
  }
  return HAL_SUCCESS;
}

hal_result_t extra(StreamWaitEvent, hal_stream_t stream, hal_event_t event) {
  if (stream == nullptr || event == nullptr) return HAL_SUCCESS;
  if (!objects().find(event).recorded) {
    warn(StreamWaitEvent::kName,
         "event %p was never recorded, so the wait on stream %p waits for nothing",
         static_cast<void*>(event), static_cast<void*>(stream));
  }
  return HAL_SUCCESS;
}

hal_result_t extra(EventElapsedMs, hal_event_t start, hal_event_t end, float* out_ms) {
  // Only where the loader's own checks (NULL, devices, timing flags) pass, so
  // their errors keep their precedence.
  if (start == nullptr || end == nullptr || out_ms == nullptr || start->device != end->device ||
      (start->flags & end->flags & HAL_EVENT_FLAG_TIMING) == 0) {
    return HAL_SUCCESS;
  }
  for (const auto& [name, event] : {std::pair{"start", start}, std::pair{"end", end}}) {
    if (!objects().find(event).recorded) {
      return fail(HAL_ERROR_INVALID_STATE, EventElapsedMs::kName, "%s %p was never recorded", name,
                  static_cast<void*>(event));
    }
  }
  return HAL_SUCCESS;
}

hal_result_t extra(MemcpyAsync, void* dst, const void* src, size_t size, hal_stream_t stream) {
  if (stream == nullptr) return HAL_SUCCESS;
  if (hal_result_t result = check_copy_range(MemcpyAsync::kName, "dst", dst, size);
      result != HAL_SUCCESS) {
    return result;
  }
  return check_copy_range(MemcpyAsync::kName, "src", src, size);
}

hal_result_t extra(MemsetAsync, void* dst, uint8_t, size_t size, hal_stream_t stream) {
  if (stream == nullptr) return HAL_SUCCESS;
  return check_copy_range(MemsetAsync::kName, "dst", dst, size);
}

hal_result_t extra(LaunchKernel, hal_kernel_t kernel, const hal_launch_config_t*,
                   uint32_t arg_count, const hal_kernel_arg_t* args, hal_stream_t stream) {
  // Malformed argument lists are the loader's to report, with its messages.
  if (kernel == nullptr || stream == nullptr || args == nullptr) return HAL_SUCCESS;
  const hal_kernel_info_t& info = kernel->info;
  if (arg_count != info.arg_count) return HAL_SUCCESS;
  const LiveObjects& live = objects();
  for (uint32_t i = 0; i < arg_count; ++i) {
    if (info.arg_types[i] != HAL_ARG_POINTER || args[i].value == nullptr ||
        args[i].size != sizeof(void*)) {
      continue;
    }
    const void* pointer = *static_cast<const void* const*>(args[i].value);
    if (pointer == nullptr) continue;  // kernels may take optional buffers
    const auto address = reinterpret_cast<uintptr_t>(pointer);
    const auto allocation = live.allocation_containing(address);
    if (!allocation) {
      if (const auto before = live.allocation_ending_at(address)) {
        return fail(HAL_ERROR_OUT_OF_BOUNDS, LaunchKernel::kName,
                    "args[%u] of kernel '%s' is %p, one past the end of the %zu-byte allocation at "
                    "%p",
                    i, kernel->name.c_str(), pointer, before->size,
                    reinterpret_cast<void*>(before->base));
      }
      return fail(HAL_ERROR_INVALID_ARGUMENT, LaunchKernel::kName,
                  "args[%u] of kernel '%s' is %p, which is not inside any live HAL allocation "
                  "(the validation layer only lets kernels take HAL memory)",
                  i, kernel->name.c_str(), pointer);
    }
    if (!kernel_reaches(kernel->device, *allocation)) {
      return fail(HAL_ERROR_DEVICE_MISMATCH, LaunchKernel::kName,
                  "args[%u] of kernel '%s' points into an allocation of device %u, which the "
                  "kernel's device %u cannot reach",
                  i, kernel->name.c_str(), allocation->device->properties.index,
                  kernel->device->properties.index);
    }
  }
  return HAL_SUCCESS;
}

hal_result_t extra(Allreduce, const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                   hal_reduce_op_t, hal_comm_t comm, hal_stream_t stream) {
  return check_collective(Allreduce::kName, HAL_COLLECTIVE_ALLREDUCE, sendbuf, recvbuf, count,
                          dtype, 0, comm, stream);
}

hal_result_t extra(Broadcast, const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                   uint32_t root, hal_comm_t comm, hal_stream_t stream) {
  return check_collective(Broadcast::kName, HAL_COLLECTIVE_BROADCAST, sendbuf, recvbuf, count,
                          dtype, root, comm, stream);
}

hal_result_t extra(Reduce, const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                   hal_reduce_op_t, uint32_t root, hal_comm_t comm, hal_stream_t stream) {
  return check_collective(Reduce::kName, HAL_COLLECTIVE_REDUCE, sendbuf, recvbuf, count, dtype,
                          root, comm, stream);
}

hal_result_t extra(Allgather, const void* sendbuf, void* recvbuf, size_t sendcount,
                   hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream) {
  return check_collective(Allgather::kName, HAL_COLLECTIVE_ALLGATHER, sendbuf, recvbuf, sendcount,
                          dtype, 0, comm, stream);
}

hal_result_t extra(ReduceScatter, const void* sendbuf, void* recvbuf, size_t recvcount,
                   hal_dtype_t dtype, hal_reduce_op_t, hal_comm_t comm, hal_stream_t stream) {
  return check_collective(ReduceScatter::kName, HAL_COLLECTIVE_REDUCE_SCATTER, sendbuf, recvbuf,
                          recvcount, dtype, 0, comm, stream);
}

hal_result_t extra(Alltoall, const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                   hal_comm_t comm, hal_stream_t stream) {
  return check_collective(Alltoall::kName, HAL_COLLECTIVE_ALLTOALL, sendbuf, recvbuf, count, dtype,
                          0, comm, stream);
}

hal_result_t extra(Alltoallv, const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                   void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                   hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream) {
  // Where the loader would refuse the call first, it reports it.
  if (comm == nullptr || stream == nullptr || sendcounts == nullptr || recvcounts == nullptr ||
      !hal::collective::is_valid_dtype(dtype)) {
    return HAL_SUCCESS;
  }
  const size_t elem = HAL_DTYPE_SIZE(dtype);
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  uint32_t bad_rank = 0;
  if (!hal::collective::resolve_alltoallv_side(sendcounts, sdispls, comm->ranks, elem, send_counts,
                                               send_displs, bad_rank) ||
      !hal::collective::resolve_alltoallv_side(recvcounts, rdispls, comm->ranks, elem, recv_counts,
                                               recv_displs, bad_rank)) {
    return HAL_SUCCESS;
  }
  const hal_alltoallv_layout_t layout{
      sendbuf,           recvbuf, send_counts.data(), send_displs.data(), recv_counts.data(),
      recv_displs.data()};
  const auto extent = hal::collective::alltoallv_extent(layout, comm->ranks, elem);
  if (hal_result_t result =
          check_copy_range(Alltoallv::kName, "sendbuf", sendbuf, extent.send_bytes);
      result != HAL_SUCCESS) {
    return result;
  }
  return check_copy_range(Alltoallv::kName, "recvbuf", recvbuf, extent.recv_bytes);
}

hal_result_t extra(Send, const void* sendbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                   hal_comm_t comm, hal_stream_t stream) {
  return check_collective(Send::kName, HAL_COLLECTIVE_SEND, sendbuf, nullptr, count, dtype, peer,
                          comm, stream);
}

hal_result_t extra(Recv, void* recvbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                   hal_comm_t comm, hal_stream_t stream) {
  return check_collective(Recv::kName, HAL_COLLECTIVE_RECV, nullptr, recvbuf, count, dtype, peer,
                          comm, stream);
}

// ---- after ---------------------------------------------------------------------

namespace {

// Whether |caller| is code of libhal itself (the operators' own modules).
bool called_from_libhal(const void* caller) {
  Dl_info caller_info{};
  Dl_info own_info{};
  if (dladdr(caller, &caller_info) == 0 ||
      dladdr(reinterpret_cast<const void*>(&called_from_libhal), &own_info) == 0) {
    return false;
  }
  return caller_info.dli_fbase == own_info.dli_fbase;
}

CreationSite site_of(const void* caller) {
  return capture_site(caller, backtrace_enabled());
}

// Destroy calls retire the handle once they got past the handle checks,
// whatever the plugin then said. HAL_ERROR_INVALID_STATE is the loader's
// refusal of a destroy that would wait for the host function calling it
// (SPEC §7): nothing was destroyed.
bool destroy_reached(hal_result_t result) {
  return result != HAL_ERROR_INVALID_HANDLE && result != HAL_ERROR_DESTROYED_HANDLE &&
         result != HAL_ERROR_NOT_INITIALIZED && result != HAL_ERROR_INVALID_STATE;
}

}  // namespace

void record(StreamCreate, hal_result_t result, const void* caller, hal_device_t device,
            hal_stream_flags_t, hal_stream_t* out_stream) {
  if (result != HAL_SUCCESS) return;
  objects().add_handle(*out_stream, HandleKind::kStream, device, nullptr, site_of(caller));
}

void record(StreamDestroy, hal_result_t result, const void*, hal_stream_t stream) {
  if (stream != nullptr && destroy_reached(result)) objects().mark_destroyed(stream);
}

void record(EventCreate, hal_result_t result, const void* caller, hal_device_t device,
            hal_event_flags_t, hal_event_t* out_event) {
  if (result != HAL_SUCCESS) return;
  objects().add_handle(*out_event, HandleKind::kEvent, device, nullptr, site_of(caller));
}

void record(EventDestroy, hal_result_t result, const void*, hal_event_t event) {
  if (event != nullptr && destroy_reached(result)) objects().mark_destroyed(event);
}

void record(EventRecord, hal_result_t result, const void*, hal_event_t event, hal_stream_t) {
  if (result == HAL_SUCCESS) objects().mark_recorded(event);
}

void record(MemAlloc, hal_result_t result, const void* caller, hal_device_t device,
            hal_memory_kind_t kind, size_t size, size_t, void** out_ptr) {
  if (result != HAL_SUCCESS) return;
  objects().add_allocation(*out_ptr, size, kind, device, site_of(caller));
}

void record(MemFree, hal_result_t result, const void*, void* ptr) {
  if (result == HAL_SUCCESS && ptr != nullptr) objects().remove_allocation(ptr);
}

void record(ModuleLoad, hal_result_t result, const void* caller, hal_device_t device,
            const hal_module_desc_t*, hal_module_t* out_module) {
  if (result != HAL_SUCCESS) return;
  objects().add_handle(*out_module, HandleKind::kModule, device, nullptr, site_of(caller));
  if (called_from_libhal(caller)) objects().mark_internal(*out_module);
}

void record(OpPlanCreate, hal_result_t result, const void* caller, hal_device_t device,
            const hal_op_header_t*, hal_op_plan_flags_t, hal_op_plan_t* out_plan) {
  if (result != HAL_SUCCESS) return;
  objects().add_handle(*out_plan, HandleKind::kOpPlan, device, nullptr, site_of(caller));
}

void record(OpPlanDestroy, hal_result_t result, const void*, hal_op_plan_t plan) {
  if (plan != nullptr && destroy_reached(result)) objects().mark_destroyed(plan);
}

void record(ModuleUnload, hal_result_t result, const void*, hal_module_t module) {
  if (module == nullptr || !destroy_reached(result)) return;
  objects().mark_kernels_destroyed(module);
  objects().mark_destroyed(module);
}

void record(KernelGet, hal_result_t result, const void* caller, hal_module_t module,
            const hal_kernel_desc_t*, hal_kernel_t* out_kernel) {
  if (result != HAL_SUCCESS) return;
  objects().add_handle(*out_kernel, HandleKind::kKernel, module->device, module, site_of(caller));
}

void record(CommInitRank, hal_result_t result, const void* caller, hal_device_t device, uint32_t,
            const hal_comm_unique_id_t*, uint32_t, const hal_comm_config_t*, hal_comm_t* out_comm) {
  if (result != HAL_SUCCESS) return;
  objects().add_handle(*out_comm, HandleKind::kComm, device, nullptr, site_of(caller));
}

void record(CommInitAll, hal_result_t result, const void* caller, uint32_t count,
            const hal_device_t* devices, const hal_comm_config_t*, hal_comm_t* out_comms) {
  if (result != HAL_SUCCESS) return;
  const CreationSite site = site_of(caller);
  for (uint32_t i = 0; i < count; ++i) {
    objects().add_handle(out_comms[i], HandleKind::kComm, devices[i], nullptr, site);
  }
}

void record(CommDestroy, hal_result_t result, const void*, hal_comm_t comm) {
  if (comm != nullptr && destroy_reached(result)) objects().mark_destroyed(comm);
}

void record(CommAbort, hal_result_t result, const void*, hal_comm_t comm) {
  if (comm != nullptr && destroy_reached(result)) objects().mark_destroyed(comm);
}

void record(MoeRoutingCreate, hal_result_t result, const void* caller, hal_comm_t comm,
            const hal_moe_routing_desc_t*, const int32_t*, hal_stream_t,
            hal_moe_routing_t* out_routing) {
  if (result != HAL_SUCCESS) return;
  objects().add_handle(*out_routing, HandleKind::kMoeRouting, comm->device, nullptr,
                       site_of(caller));
}

void record(MoeRoutingDestroy, hal_result_t result, const void*, hal_moe_routing_t routing) {
  if (routing != nullptr && destroy_reached(result)) objects().mark_destroyed(routing);
}

}  // namespace hal::loader::layers::validation
