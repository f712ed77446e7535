#include "hal_collective/status.hpp"

#include "hal_collective/alltoallv.hpp"

#include "hal_util/names.hpp"

namespace hal::collective {

CallExtent call_extent(const hal_collective_call_t& call, uint32_t rank, uint32_t ranks) noexcept {
  const size_t bytes = call.count * HAL_DTYPE_SIZE(call.dtype);
  switch (call.kind) {
    case HAL_COLLECTIVE_ALLREDUCE:
      return {bytes, bytes};
    case HAL_COLLECTIVE_BROADCAST:
      return {rank == call.peer ? bytes : 0, bytes};
    case HAL_COLLECTIVE_REDUCE:
      return {bytes, rank == call.peer ? bytes : 0};
    case HAL_COLLECTIVE_ALLGATHER:
      return {bytes, bytes * ranks};
    case HAL_COLLECTIVE_REDUCE_SCATTER:
      return {bytes * ranks, bytes};
    case HAL_COLLECTIVE_ALLTOALL:
      return {bytes * ranks, bytes * ranks};
    case HAL_COLLECTIVE_SEND:
      return {bytes, 0};
    case HAL_COLLECTIVE_RECV:
      return {0, bytes};
    case HAL_COLLECTIVE_ALLTOALLV:
      return alltoallv_extent(layout_of(call), ranks, HAL_DTYPE_SIZE(call.dtype));
    default:
      return {};
  }
}

uint32_t call_signature(const hal_collective_call_t& call) noexcept {
  // A hash of the fields every rank must agree on, a word at a time (every
  // call of a rank in processes computes it: FNV-1a byte by byte was 2 % of
  // a small alltoallv's whole time), finished by a 64-bit avalanche. The
  // root is part of it for rooted calls; send and recv are matched by size
  // only.
  uint64_t hash = 14695981039346656037ull;
  auto mix = [&hash](uint64_t value) {
    hash = (hash ^ value) * 0x9e3779b97f4a7c15ull;
    hash ^= hash >> 29;
  };
  const bool point_to_point = call.kind == HAL_COLLECTIVE_SEND || call.kind == HAL_COLLECTIVE_RECV;
  mix(point_to_point ? 100u : static_cast<uint64_t>(call.kind));
  // An alltoallv's count is the rank count; its per-pair counts are checked
  // as a matrix (alltoallv.hpp).
  mix(call.count * HAL_DTYPE_SIZE(call.dtype));
  if (!point_to_point) mix(static_cast<uint64_t>(call.dtype));
  const bool reduces = call.kind == HAL_COLLECTIVE_ALLREDUCE ||
                       call.kind == HAL_COLLECTIVE_REDUCE ||
                       call.kind == HAL_COLLECTIVE_REDUCE_SCATTER;
  if (reduces) mix(static_cast<uint64_t>(call.op));
  if (call.kind == HAL_COLLECTIVE_BROADCAST || call.kind == HAL_COLLECTIVE_REDUCE) mix(call.peer);
  hash *= 0xbf58476d1ce4e5b9ull;
  return static_cast<uint32_t>(hash ^ (hash >> 32));
}

const char* kind_name(hal_collective_kind_t kind) noexcept {
  return hal::util::short_name(hal::util::collective_kind_table(), static_cast<uint32_t>(kind));
}

}  // namespace hal::collective
