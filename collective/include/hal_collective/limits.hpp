// Every size and time limit of the host collective engine, in one place.
// Each says what it limits and how it was chosen. The crossovers were
// measured with bench/collective_bandwidth on the 2-core VMs we target
// (commands and figures in SPEC §13.8 and the commit that set them); a
// different machine may move them, HAL_COLL_PATH forces a path to compare.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace hal::collective::limits {

// CAPACITY of each rank's data slot in the shared segment of the ranks of
// one host (ShmGroup): the most bytes one rank can publish in an episode.
// A size, not a crossover: it bounds the segment (slot * ranks plus the
// counters) and so what the segment *can* carry; kSegmentAllreduceBytes and
// kSegmentAlltoallvBytes say what it *should* carry.
inline constexpr size_t kSegmentSlotBytes = 64 * 1024;

// CROSSOVER, segment vs the transport, for an allreduce: at or below this
// many bytes its data travels through the segment (every rank reduces all
// inputs itself, one round); above, over the transport (direct or ring).
// Measured: `collective_bandwidth store` (2 processes, f32 sum) and `mpirun
// -np 2 collective_bandwidth mpi`: the segment wins up to 16 KiB, the ring
// from 32 KiB (every rank reads all n inputs: its cost grows n times faster
// than the ring's 2(n-1)/n).
inline constexpr size_t kSegmentAllreduceBytes = 16 * 1024;

// CROSSOVER, segment vs the transport, for an alltoallv (MoE dispatch and
// combine): when the largest rank's send total is at most this, every rank
// publishes its blocks in its slot and reads its own out of its peers'
// (two copies, one round, no count exchange); above, the blocks go pairwise
// over the transport. Measured: `mpirun -np 2 collective_bandwidth mpi`
// (uneven 3:1 shares), the segment ahead at 32 KiB; bounded by the slot.
inline constexpr size_t kSegmentAlltoallvBytes = kSegmentSlotBytes;

// CROSSOVER, direct vs ring, for an allreduce over the transport: at or
// below this many bytes every rank sends its whole buffer to every other
// and reduces all of them (one round, latency-bound); above, the ring moves
// 2(n-1)/n of the bytes in 2(n-1) steps (bandwidth-bound). Measured with
// HAL_COMM_SHM=0 under `mpirun -np 2 collective_bandwidth mpi` (the data on
// MPI point-to-point) and HAL_COLL_PATH=direct/ring: the ring ahead from
// 32 KiB. Independent of the segment limits above although it has the same
// value today.
inline constexpr size_t kDirectAllreduceBytes = 16 * 1024;

// CAP on the ranks that meet in one shared segment: the segment's counters
// and the transport's n² rings grow with the square of it, and a host with
// more ranks than this is a cluster node better served by its own library.
inline constexpr uint32_t kMaxSegmentRanks = 64;

// SIZES of the shared-memory transport's rings (one per ordered pair of ranks
// and channel): together within kRingBudget, each within [kMinRing, kMaxRing].
// 1 MiB for two ranks: a 1 MiB ring allreduce moves 512 KiB per step in one
// piece; 8 KiB is the least that still streams a message without a wait per
// header.
inline constexpr size_t kRingBudget = 8u << 20;
inline constexpr size_t kMinRing = 8u << 10;
inline constexpr size_t kMaxRing = 1u << 20;

// TIME a collective that the segment serves whole waits on the enqueueing
// thread for its peers before it leaves the rest to the stream (cpu
// plugin). Peers in step arrive within a microsecond or two; a stream task
// costs a hand-over to an executor thread (~5-10 us here). Short enough that
// a thread driving several communicators in turn is never held for long.
inline constexpr auto kInlinePatience = std::chrono::microseconds(20);

}  // namespace hal::collective::limits
