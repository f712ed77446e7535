// hal/collective.h, the calls: validation, groups, dispatch to the plugin's
// comm_enqueue or to the loader's host-staged path.
#include "api_common.hpp"
#include "buffers.hpp"
#include "collective_dispatch.hpp"
#include "fallbacks.hpp"
#include "layers/intercept.hpp"
#include "hal_collective/alltoallv.hpp"
#include "hal_collective/reduce.hpp"
#include "layers/tracing.hpp"

#include <algorithm>
#include <map>
#include <thread>

using namespace hal::loader;
using hal::collective::Deadline;
using hal::collective::OwnedLayout;
using hal::collective::Status;

namespace hal::loader {

void record_host_error(hal_comm_s* comm, hal_result_t result) noexcept {
  std::lock_guard lock(comm->error_mutex);
  if (comm->host_error == HAL_SUCCESS) comm->host_error = result;
}

hal_result_t comm_async_error(hal_comm_s* comm) noexcept {
  if (comm->impl != nullptr) {
    const auto& table = comm->device->plugin->table;
    return table.comm_get_async_error != nullptr ? table.comm_get_async_error(comm->impl)
                                                 : HAL_SUCCESS;
  }
  std::lock_guard lock(comm->error_mutex);
  return comm->host_error;
}

hal_result_t submit(hal_comm_s* comm, hal_stream_s* stream,
                    std::span<const hal_collective_call_t> calls, const char* function) {
  const PluginRecord& plugin = *comm->device->plugin;
  if (comm->impl != nullptr) {
    std::lock_guard lock(stream->enqueue_mutex);
    if (hal_result_t lost = refuse_lost_stream(stream, function); lost != HAL_SUCCESS) return lost;
    const layers::tracing::StreamOpSpan span(stream, function, 0);  // HAL_TRACE execution span
    const hal_result_t r = plugin.table.comm_enqueue(
        comm->impl, stream->impl, static_cast<uint32_t>(calls.size()), calls.data());
    if (r != HAL_SUCCESS)
      return stream_entry_failed(stream, StreamEntry::kEnqueue, r, function, plugin);
    return HAL_SUCCESS;
  }
  if (hal_result_t lost = refuse_lost_stream(stream, function); lost != HAL_SUCCESS) return lost;
  // The host-staged path blocks; it holds its rank alive across an abort.
  const std::shared_ptr<HostComm> host = comm->host;
  std::lock_guard lock(host->run_mutex);
  const Status status = run_host_staged(stream, *host, calls, comm->rank, comm->ranks,
                                        Deadline::after_ms(comm->timeout_ms, &host->aborted));
  if (status.ok()) return HAL_SUCCESS;
  record_host_error(comm, status.result);
  return fail(status.result, function, "%s", status.message.c_str());
}

}  // namespace hal::loader

namespace {

// The calls of the calling thread's open group, in call order.
struct PendingCall {
  hal_comm_s* comm;
  hal_stream_s* stream;
  hal_collective_call_t call;
  std::unique_ptr<OwnedLayout> layout;  // an alltoallv's, which call.send points to
};
struct GroupState {
  uint32_t depth = 0;
  std::vector<PendingCall> calls;
};
thread_local GroupState t_group;

// hal_alltoallv's count and displacement arrays as the caller gave them.
struct AlltoallvArrays {
  const void* sendbuf;
  void* recvbuf;
  const size_t* send_counts;
  const size_t* send_displs;  // NULL: packed
  const size_t* recv_counts;
  const size_t* recv_displs;  // NULL: packed
};

// The calling thread's resolved count and displacement arrays of the
// alltoallv it is checking: reused call after call (a call made no
// allocation of its own for them; an MoE step makes several). A layout that
// outlives the call (a group's) is copied into an OwnedLayout.
struct ResolvedArrays {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
};
thread_local ResolvedArrays t_resolved;

// The layout of |arrays| with packed displacements filled in, its arrays
// the calling thread's (valid until its next alltoallv).
hal_result_t make_layout(const AlltoallvArrays& arrays, uint32_t ranks, size_t elem,
                         const char* function, hal_alltoallv_layout_t& out) {
  ResolvedArrays& r = t_resolved;
  uint32_t bad_rank = 0;
  auto overflow = [&](const char* side, const size_t* counts, const size_t* displs) {
    return fail(HAL_ERROR_INVALID_SIZE, function,
                "the %s block of rank %u (%zu elements at element %zu) overflows", side, bad_rank,
                counts[bad_rank], displs != nullptr ? displs[bad_rank] : size_t{0});
  };
  if (!hal::collective::resolve_alltoallv_side(arrays.send_counts, arrays.send_displs, ranks, elem,
                                               r.send_counts, r.send_displs, bad_rank)) {
    return overflow("send", arrays.send_counts, arrays.send_displs);
  }
  if (!hal::collective::resolve_alltoallv_side(arrays.recv_counts, arrays.recv_displs, ranks, elem,
                                               r.recv_counts, r.recv_displs, bad_rank)) {
    return overflow("receive", arrays.recv_counts, arrays.recv_displs);
  }
  out = {arrays.sendbuf,       arrays.recvbuf,       r.send_counts.data(),
         r.send_displs.data(), r.recv_counts.data(), r.recv_displs.data()};
  return HAL_SUCCESS;
}

// The byte ranges [begin, end) of one side's non-empty blocks, sorted, in
// |ranges| (the caller's, reused).
using Ranges = std::vector<std::pair<uintptr_t, uintptr_t>>;
const Ranges& block_ranges(const void* base, const size_t* counts, const size_t* displs,
                           uint32_t ranks, size_t elem, Ranges& ranges) {
  ranges.clear();
  const auto at = reinterpret_cast<uintptr_t>(base);
  for (uint32_t r = 0; r < ranks; ++r) {
    if (counts[r] != 0)
      ranges.push_back({at + displs[r] * elem, at + (displs[r] + counts[r]) * elem});
  }
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

// No receive block may overlap another, or any send block: the engines
// read and write them in any order.
hal_result_t check_alltoallv_overlap(const hal_alltoallv_layout_t& layout, uint32_t ranks,
                                     size_t elem, const char* function) {
  thread_local Ranges t_receives;
  thread_local Ranges t_sends;
  const Ranges& receives =
      block_ranges(layout.recvbuf, layout.recv_counts, layout.recv_displs, ranks, elem, t_receives);
  for (size_t i = 1; i < receives.size(); ++i) {
    if (receives[i].first < receives[i - 1].second) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, function, "alltoallv: two receive blocks overlap");
    }
  }
  const Ranges& sends =
      block_ranges(layout.sendbuf, layout.send_counts, layout.send_displs, ranks, elem, t_sends);
  // Both sorted by start; the receives are disjoint, the sends may overlap.
  size_t next_send = 0;
  uintptr_t furthest_send_end = 0;
  for (const auto& receive : receives) {
    while (next_send < sends.size() && sends[next_send].first < receive.second) {
      furthest_send_end = std::max(furthest_send_end, sends[next_send].second);
      ++next_send;
    }
    // A send starting before this receive's end that ends after its start.
    if (furthest_send_end > receive.first) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                  "alltoallv cannot run in place: a receive block overlaps a send block");
    }
  }
  return HAL_SUCCESS;
}

hal_result_t check_and_submit(hal_collective_call_t call, hal_comm_s* comm, hal_stream_s* stream,
                              const char* function, const AlltoallvArrays* arrays = nullptr) {
  // The buffers are ranges, checked with their sizes below (0 bytes take NULL).
  Registry* registry = nullptr;
  // Held against a racing hal_comm_destroy or hal_comm_abort (an abort marks
  // the communicator, makes a blocked call return, then waits for it) and a
  // racing hal_stream_destroy.
  HandleUse<hal_comm_s> comm_use;
  HandleUse<hal_stream_s> stream_use;
  // Only an alltoallv has count arrays; other calls pass a stand-in that is never NULL.
  if (hal_result_t r = check_preconditions_in(
          registry, function, Held{comm, "comm", comm_use}, Held{stream, "stream", stream_use},
          Required{arrays != nullptr ? arrays->send_counts : &call.count, "sendcounts"},
          Required{arrays != nullptr ? arrays->recv_counts : &call.count, "recvcounts"});
      r != HAL_SUCCESS) {
    return r;
  }
  if (!hal::collective::is_valid_dtype(call.dtype)) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function, "dtype %d is not a hal_dtype_t",
                static_cast<int>(call.dtype));
  }
  // An alltoallv's call points to its layout, which holds the buffers.
  hal_alltoallv_layout_t view{};
  const hal_alltoallv_layout_t* layout = nullptr;
  const void* sendbuf = call.send;
  void* recvbuf = call.recv;
  if (arrays != nullptr) {
    if (hal_result_t r =
            make_layout(*arrays, comm->ranks, HAL_DTYPE_SIZE(call.dtype), function, view);
        r != HAL_SUCCESS) {
      return r;
    }
    layout = &view;
    call.send = layout;
    call.count = comm->ranks;
    sendbuf = arrays->sendbuf;
    recvbuf = arrays->recvbuf;
  }
  const bool reduces = call.kind == HAL_COLLECTIVE_ALLREDUCE ||
                       call.kind == HAL_COLLECTIVE_REDUCE ||
                       call.kind == HAL_COLLECTIVE_REDUCE_SCATTER;
  if (reduces && !hal::collective::is_valid_op(call.op)) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function, "op %d is not a hal_reduce_op_t",
                static_cast<int>(call.op));
  }
  const bool rooted = call.kind == HAL_COLLECTIVE_BROADCAST || call.kind == HAL_COLLECTIVE_REDUCE ||
                      call.kind == HAL_COLLECTIVE_SEND || call.kind == HAL_COLLECTIVE_RECV;
  if (rooted && call.peer >= comm->ranks) {
    return fail(
        HAL_ERROR_INVALID_ARGUMENT, function, "%s %u is not below the rank count %u",
        call.kind == HAL_COLLECTIVE_SEND || call.kind == HAL_COLLECTIVE_RECV ? "peer" : "root",
        call.peer, comm->ranks);
  }
  const size_t elem = HAL_DTYPE_SIZE(call.dtype);
  if (call.count > SIZE_MAX / elem / comm->ranks) {
    return fail(HAL_ERROR_INVALID_SIZE, function,
                "count %zu of %zu-byte elements over %u ranks overflows", call.count, elem,
                comm->ranks);
  }
  const auto extent = hal::collective::call_extent(call, comm->rank, comm->ranks);
  // SPEC §4.1 from step 4 (loader/buffers.hpp): the buffers' values, where
  // they lie, the overlaps they must not have, whose device they are, then
  // the stream's device (step 6), then capabilities (step 7).
  const Buffer buffers[] = {{"sendbuf", sendbuf, extent.send_bytes},
                            {"recvbuf", recvbuf, extent.recv_bytes}};
  const BufferRules rules{comm->device, "the communicator's rank"};
  BufferPlaces places;
  if (hal_result_t r = check_buffer_values(buffers, function); r != HAL_SUCCESS) return r;
  if (hal_result_t r = check_buffer_ranges(*registry, buffers, rules, function, places);
      r != HAL_SUCCESS) {
    return r;
  }
  if (call.kind == HAL_COLLECTIVE_ALLTOALL && extent.send_bytes != 0) {
    const auto s = reinterpret_cast<uintptr_t>(call.send);
    const auto d = reinterpret_cast<uintptr_t>(call.recv);
    if (s < d + extent.recv_bytes && d < s + extent.send_bytes) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, function, "alltoall cannot run in place");
    }
  }
  if (layout) {
    if (hal_result_t r =
            check_alltoallv_overlap(*layout, comm->ranks, HAL_DTYPE_SIZE(call.dtype), function);
        r != HAL_SUCCESS) {
      return r;
    }
  }
  if (hal_result_t r = check_buffer_devices(*registry, buffers, rules, places, function);
      r != HAL_SUCCESS) {
    return r;
  }
  if (stream->device != comm->device) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, function,
                "the stream is on device %u, the communicator's rank %u on device %u",
                stream->device->properties.index, comm->rank, comm->device->properties.index);
  }
  if (layout && (comm->device->properties.capabilities & HAL_DEVICE_CAP_ALLTOALLV) == 0) {
    return fail(HAL_ERROR_UNSUPPORTED, function,
                "plugin '%s' runs its own collectives without alltoallv "
                "(no HAL_DEVICE_CAP_ALLTOALLV)",
                comm->device->plugin->name.c_str());
  }
  if (const hal_result_t failed = comm_async_error(comm); failed != HAL_SUCCESS) {
    return fail(HAL_ERROR_INVALID_STATE, function,
                "the communicator failed earlier with %s (hal_comm_get_async_error)",
                hal_result_string(failed));
  }
  if (t_group.depth > 0) {
    // The group keeps its own copy: the thread's arrays serve its next call.
    auto owned = layout ? std::make_unique<OwnedLayout>(*layout, comm->ranks) : nullptr;
    if (owned) call.send = owned->view();
    t_group.calls.push_back({comm, stream, call, std::move(owned)});
    return HAL_SUCCESS;
  }
  return submit(comm, stream, std::span(&call, 1), function);
}

// submit() for a batch of a group: the communicator and stream were checked
// when each call was made, but either may have been destroyed since; they are
// held again, on the thread that runs the batch, for its length.
hal_result_t submit_held(hal_comm_s* comm, hal_stream_s* stream,
                         std::span<const hal_collective_call_t> calls, const char* function) {
  HandleUse<hal_comm_s> comm_use;
  HandleUse<hal_stream_s> stream_use;
  if (hal_result_t r = comm_use.acquire(comm, HandleKind::kComm, function, "comm");
      r != HAL_SUCCESS) {
    return r;
  }
  if (hal_result_t r = stream_use.acquire(stream, HandleKind::kStream, function, "stream");
      r != HAL_SUCCESS) {
    return r;
  }
  return submit(comm, stream, calls, function);
}

hal_collective_call_t make_call(hal_collective_kind_t kind, const void* send, void* recv,
                                size_t count, hal_dtype_t dtype, hal_reduce_op_t op,
                                uint32_t peer) {
  return {kind, dtype, op, peer, send, recv, count};
}

}  // namespace

bool hal::loader::in_collective_group() noexcept {
  return t_group.depth > 0;
}

#define HAL_COLLECTIVE_ENTRY(name, ...)                                       \
  constexpr const char* kFunction = name;                                     \
  return guarded(kFunction, [&] {                                             \
    return check_and_submit(make_call(__VA_ARGS__), comm, stream, kFunction); \
  })

static hal_result_t allreduce_body(const void* sendbuf, void* recvbuf, size_t count,
                                   hal_dtype_t dtype, hal_reduce_op_t op, hal_comm_t comm,
                                   hal_stream_t stream) {
  HAL_COLLECTIVE_ENTRY("hal_allreduce", HAL_COLLECTIVE_ALLREDUCE, sendbuf, recvbuf, count, dtype,
                       op, 0);
}

static hal_result_t broadcast_body(const void* sendbuf, void* recvbuf, size_t count,
                                   hal_dtype_t dtype, uint32_t root, hal_comm_t comm,
                                   hal_stream_t stream) {
  HAL_COLLECTIVE_ENTRY("hal_broadcast", HAL_COLLECTIVE_BROADCAST, sendbuf, recvbuf, count, dtype,
                       HAL_REDUCE_SUM, root);
}

static hal_result_t reduce_body(const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                                hal_reduce_op_t op, uint32_t root, hal_comm_t comm,
                                hal_stream_t stream) {
  HAL_COLLECTIVE_ENTRY("hal_reduce", HAL_COLLECTIVE_REDUCE, sendbuf, recvbuf, count, dtype, op,
                       root);
}

static hal_result_t allgather_body(const void* sendbuf, void* recvbuf, size_t sendcount,
                                   hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream) {
  HAL_COLLECTIVE_ENTRY("hal_allgather", HAL_COLLECTIVE_ALLGATHER, sendbuf, recvbuf, sendcount,
                       dtype, HAL_REDUCE_SUM, 0);
}

static hal_result_t reduce_scatter_body(const void* sendbuf, void* recvbuf, size_t recvcount,
                                        hal_dtype_t dtype, hal_reduce_op_t op, hal_comm_t comm,
                                        hal_stream_t stream) {
  HAL_COLLECTIVE_ENTRY("hal_reduce_scatter", HAL_COLLECTIVE_REDUCE_SCATTER, sendbuf, recvbuf,
                       recvcount, dtype, op, 0);
}

static hal_result_t alltoall_body(const void* sendbuf, void* recvbuf, size_t count,
                                  hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream) {
  HAL_COLLECTIVE_ENTRY("hal_alltoall", HAL_COLLECTIVE_ALLTOALL, sendbuf, recvbuf, count, dtype,
                       HAL_REDUCE_SUM, 0);
}

static hal_result_t alltoallv_body(const void* sendbuf, const size_t* sendcounts,
                                   const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                   const size_t* rdispls, hal_dtype_t dtype, hal_comm_t comm,
                                   hal_stream_t stream) {
  constexpr const char* kFunction = "hal_alltoallv";
  return guarded(kFunction, [&] {
    const AlltoallvArrays arrays{sendbuf, recvbuf, sendcounts, sdispls, recvcounts, rdispls};
    return check_and_submit(
        make_call(HAL_COLLECTIVE_ALLTOALLV, nullptr, nullptr, 0, dtype, HAL_REDUCE_SUM, 0), comm,
        stream, kFunction, &arrays);
  });
}

static hal_result_t send_body(const void* sendbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                              hal_comm_t comm, hal_stream_t stream) {
  HAL_COLLECTIVE_ENTRY("hal_send", HAL_COLLECTIVE_SEND, sendbuf, nullptr, count, dtype,
                       HAL_REDUCE_SUM, peer);
}

static hal_result_t recv_body(void* recvbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                              hal_comm_t comm, hal_stream_t stream) {
  HAL_COLLECTIVE_ENTRY("hal_recv", HAL_COLLECTIVE_RECV, nullptr, recvbuf, count, dtype,
                       HAL_REDUCE_SUM, peer);
}

static hal_result_t group_start_body(void) {
  if (hal_result_t r = check_preconditions("hal_group_start"); r != HAL_SUCCESS) return r;
  ++t_group.depth;
  return HAL_SUCCESS;
}

static hal_result_t group_end_body(void) {
  constexpr const char* kFunction = "hal_group_end";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t r = check_preconditions(kFunction); r != HAL_SUCCESS) return r;
    if (t_group.depth == 0) {
      return fail(HAL_ERROR_INVALID_STATE, kFunction, "no hal_group_start is open on this thread");
    }
    if (--t_group.depth > 0) return HAL_SUCCESS;
    std::vector<PendingCall> pending = std::move(t_group.calls);
    t_group.calls.clear();
    // One batch per (communicator, stream), in call order.
    std::vector<
        std::pair<std::pair<hal_comm_s*, hal_stream_s*>, std::vector<hal_collective_call_t>>>
        batches;
    for (const PendingCall& p : pending) {
      auto found = std::find_if(batches.begin(), batches.end(), [&](const auto& b) {
        return b.first == std::pair(p.comm, p.stream);
      });
      if (found == batches.end()) {
        batches.push_back({{p.comm, p.stream}, {}});
        found = batches.end() - 1;
      }
      found->second.push_back(p.call);
    }
    // Host-staged batches block until their peers take part, so each runs
    // on its own thread; plugin batches only enqueue, except one with an
    // alltoallv, whose plugin may wait for its peers' counts (SPEC §10.7).
    std::vector<hal_result_t> results(batches.size(), HAL_SUCCESS);
    std::vector<std::string> messages(batches.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < batches.size(); ++i) {
      // A plain reference, not a structured binding: clang 14 cannot capture those.
      const auto& key = batches[i].first;
      auto run = [&, i] {
        results[i] = submit_held(key.first, key.second, batches[i].second, kFunction);
        if (results[i] != HAL_SUCCESS) messages[i] = hal_error_last_message();
      };
      const bool blocking = key.first->impl == nullptr ||
                            std::any_of(batches[i].second.begin(), batches[i].second.end(),
                                        [](const hal_collective_call_t& c) {
                                          return c.kind == HAL_COLLECTIVE_ALLTOALLV;
                                        });
      if (blocking && i + 1 < batches.size()) {
        threads.emplace_back(run);
      } else {
        run();
      }
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i] != HAL_SUCCESS) {
        return fail(results[i], kFunction, "%s", messages[i].c_str());
      }
    }
    return HAL_SUCCESS;
  });
}

// The public entry points, through the layers (layers/intercept.hpp).
hal_result_t hal_allreduce(const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                           hal_reduce_op_t op, hal_comm_t comm, hal_stream_t stream) {
  return layers::call<layers::Allreduce, allreduce_body>(HAL_CALLER, sendbuf, recvbuf, count, dtype,
                                                         op, comm, stream);
}

hal_result_t hal_broadcast(const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                           uint32_t root, hal_comm_t comm, hal_stream_t stream) {
  return layers::call<layers::Broadcast, broadcast_body>(HAL_CALLER, sendbuf, recvbuf, count, dtype,
                                                         root, comm, stream);
}

hal_result_t hal_reduce(const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                        hal_reduce_op_t op, uint32_t root, hal_comm_t comm, hal_stream_t stream) {
  return layers::call<layers::Reduce, reduce_body>(HAL_CALLER, sendbuf, recvbuf, count, dtype, op,
                                                   root, comm, stream);
}

hal_result_t hal_allgather(const void* sendbuf, void* recvbuf, size_t sendcount, hal_dtype_t dtype,
                           hal_comm_t comm, hal_stream_t stream) {
  return layers::call<layers::Allgather, allgather_body>(HAL_CALLER, sendbuf, recvbuf, sendcount,
                                                         dtype, comm, stream);
}

hal_result_t hal_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                hal_dtype_t dtype, hal_reduce_op_t op, hal_comm_t comm,
                                hal_stream_t stream) {
  return layers::call<layers::ReduceScatter, reduce_scatter_body>(
      HAL_CALLER, sendbuf, recvbuf, recvcount, dtype, op, comm, stream);
}

hal_result_t hal_alltoall(const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                          hal_comm_t comm, hal_stream_t stream) {
  return layers::call<layers::Alltoall, alltoall_body>(HAL_CALLER, sendbuf, recvbuf, count, dtype,
                                                       comm, stream);
}

hal_result_t hal_alltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                           void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                           hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream) {
  return layers::call<layers::Alltoallv, alltoallv_body>(
      HAL_CALLER, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype, comm, stream);
}

hal_result_t hal_send(const void* sendbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                      hal_comm_t comm, hal_stream_t stream) {
  return layers::call<layers::Send, send_body>(HAL_CALLER, sendbuf, count, dtype, peer, comm,
                                               stream);
}

hal_result_t hal_recv(void* recvbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                      hal_comm_t comm, hal_stream_t stream) {
  return layers::call<layers::Recv, recv_body>(HAL_CALLER, recvbuf, count, dtype, peer, comm,
                                               stream);
}

hal_result_t hal_group_start(void) {
  return layers::call<layers::GroupStart, group_start_body>(HAL_CALLER);
}

hal_result_t hal_group_end(void) {
  return layers::call<layers::GroupEnd, group_end_body>(HAL_CALLER);
}
