// Collectives of the cpu plugin (api/hal/collective.h): between the devices
// of one process through shared memory (the host engine's LocalGroup, run by
// each device's stream thread), and between processes as messages: through
// a shared segment (hal_collective's ShmTransport) when all ranks share one
// host, whether they met over MPI or over the loader's store; otherwise over
// MPI (collective_mpi.cpp), which runs across machines too, or, for a store,
// the loader serves them.
// Each call becomes a stream task; a failure fails the stream and stays in the rank's state. A
// small allreduce through the shared segment, on an idle stream, is first
// tried on the calling thread for a few microseconds (Stream::enqueue_task):
// MPI's own small calls cost well under a microsecond, a hand-over to an
// executor thread several.
#ifndef HAL_PLUGINS_CPU_COLLECTIVE_HPP_
#define HAL_PLUGINS_CPU_COLLECTIVE_HPP_

#include <memory>

#include "hal_collective/p2p.hpp"
#include "hal_plugin.h"
#include "hal_plugin_sdk/table.hpp"

namespace hal::cpu {

// MPI's side of the plugin: a transport over MPI_COMM_WORLD for rank |rank|
// of |ranks|, or a failure (HAL_ERROR_UNSUPPORTED when built without MPI).
std::unique_ptr<collective::Transport> make_mpi_transport(uint32_t ranks, uint32_t rank,
                                                          const collective::Deadline& deadline,
                                                          collective::Status& out_status);
// Whether this build of the plugin has MPI.
bool has_mpi();
// A rank over MPI saw a peer fail (HAL_ERROR_REMOTE or HAL_ERROR_TIMEOUT);
// |peer_exited| when a peer's process is known to have ended. MPI_Finalize
// waits for every rank, so the plugin's finalize then waits for the peers at
// most |timeout_ms| (not at all for a known death) and goes without it if
// they do not come (collective_mpi.cpp).
void note_mpi_peer_failure(uint32_t timeout_ms, bool peer_exited) noexcept;

// The collective entries (collective.cpp), of the SDK's entry types.
plugin::v1::comm_init_local_fn comm_init_local;
plugin::v1::comm_init_rank_fn comm_init_rank;
plugin::v1::comm_init_rank_exchange_fn comm_init_rank_exchange;
plugin::v1::comm_destroy_fn comm_destroy;
plugin::v1::comm_abort_fn comm_abort;
plugin::v1::comm_get_async_error_fn comm_get_async_error;
plugin::v1::comm_enqueue_fn comm_enqueue;

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_COLLECTIVE_HPP_
