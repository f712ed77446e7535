// Every size and time limit of the host collective engine, in one place.
// Each says what it limits and how it was chosen. The crossovers come from
// bench/collective_bandwidth on the 2-core VMs we target; to measure them
// again, force each path over the same sizes and compare the tables:
//
//   for p in segment direct ring; do mpirun -np 2 --allow-run-as-root
//     --oversubscribe --bind-to none -x HAL_PLUGINS=cpu -x HAL_CPU_DEVICES=1
//     -x HAL_COLL_PATH=$p bench/collective_bandwidth mpi 131072; done
//
// (one command line)
//
// (a forced path ends the run at the first call it cannot serve: segment at
// allreduces over 64 KiB, ring at the alltoallv table). On a shared machine
// run them interleaved, several times, and read the medians.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace hal::collective::limits {

// CAPACITY of each rank's data slot in the shared segment of the ranks of
// one host (ShmGroup): the most bytes one rank can publish in an episode.
// A size, not a crossover: it bounds the segment (slot * 2 sets * ranks,
// plus the counters: alternate calls use alternate sets) and so what the segment *can* carry;
// kSegmentAllreduceBytes and kSegmentAlltoallvBytes say what it *should* carry.
inline constexpr size_t kSegmentSlotBytes = 64 * 1024;

// CROSSOVER, segment vs the transport, for an allreduce: at or below this
// many bytes its data travels through the segment (every rank reduces all
// inputs itself, one round); above, over the transport (direct or ring).
// Measured when the segment came (`collective_bandwidth store` and `mpi`, 2
// processes, f32 sum): the segment ahead up to 16 KiB, the ring from 32 KiB
// (every rank reads all n inputs: its cost grows n times faster than the
// ring's 2(n-1)/n; a sliced variant through a shared result did not pay).
inline constexpr size_t kSegmentAllreduceBytes = 16 * 1024;

// CROSSOVER, segment vs the transport, for an alltoallv (MoE dispatch and
// combine): when the largest rank's send total is at most this, every rank
// publishes its blocks in its slot and reads its own out of its peers'
// (two copies, one round, no count exchange); above, the blocks go pairwise
// over the transport. Set to the whole slot: the segment's one round does
// two copies of the data where the transport's rings do two copies plus a
// handshake round and per-message headers, so the segment should win at
// every size it can hold; `collective_bandwidth mpi` (uneven 3:1 shares)
// with HAL_COLL_PATH=segment and =direct compares them at 32 KiB. Above
// it, where the ranks may read each other's memory (Means::cross_memory),
// the segment still serves: each rank reads its blocks out of its peers'
// send buffers (one copy, then a "done" round); HAL_COMM_CMA=0 compares that
// with the transport's pairwise messages.
inline constexpr size_t kSegmentAlltoallvBytes = kSegmentSlotBytes;

// CROSSOVER, direct vs ring, for an allreduce over the transport: at or
// below this many bytes every rank sends its whole buffer to every other
// and reduces all of them (one round, latency-bound); above, the ring moves
// 2(n-1)/n of the bytes in 2(n-1) steps (bandwidth-bound). Measured when
// the ring came, over MPI messages: the ring ahead from 32 KiB; compare
// again with HAL_COLL_PATH=direct and =ring (HAL_COMM_SHM=0 puts the
// messages on MPI). Independent of the segment limits above although it has
// the same value today.
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

// TIME a rank waiting for its peers in the shared segment polls before it
// sleeps on the segment's doorbell (shm_doorbell.hpp; a publish rings it
// only when somebody sleeps). Peers in step arrive within a microsecond or
// two; a peer that is not running (preempted on a loaded host, or more
// ranks than cores) is better waited for asleep: a spinning rank holds a
// core its peer may need, and a yielding one loses a whole time slice.
inline constexpr auto kSegmentSpin = std::chrono::microseconds(20);

// TIME such a rank polls instead when its last sleep ended within this long
// (the peers were only a little late, and a wake-up through the kernel
// costs the sleeper 15-60 us on the VMs we target: without it two ranks
// that fell out of step slept and woke each other on every call, tens of
// microseconds a call where MPI took one or two). A sleep longer than this
// (a peer preempted, more ranks than cores), or a long poll that found
// nothing, puts the rank back on kSegmentSpin. The executors' long idle
// spin (cpu plugin, stream.cpp) is the same rule.
inline constexpr auto kSegmentLongSpin = std::chrono::microseconds(250);

// TIME a collective that the segment serves whole waits on the enqueueing
// thread for its peers before it leaves the rest to the stream (cpu
// plugin). Peers in step arrive within a microsecond or two; a stream task
// costs a hand-over to an executor thread (~5-10 us here). Short enough that
// a thread driving several communicators in turn is never held for long.
inline constexpr auto kInlinePatience = std::chrono::microseconds(20);

}  // namespace hal::collective::limits
