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

hal_result_t comm_init_local(uint32_t count, hal_impl_device_t* const* devices,
                             const hal_comm_config_t* config, hal_impl_comm_t** out_comms);
hal_result_t comm_init_rank(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                            const hal_comm_config_t* config, hal_impl_comm_t** out_comm);
hal_result_t comm_init_rank_exchange(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                                     const hal_comm_config_t* config,
                                     const hal_comm_exchange_t* exchange,
                                     hal_impl_comm_t** out_comm);
hal_result_t comm_destroy(hal_impl_comm_t* comm);
void comm_abort(hal_impl_comm_t* comm);
hal_result_t comm_get_async_error(hal_impl_comm_t* comm);
hal_result_t comm_enqueue(hal_impl_comm_t* comm, hal_impl_stream_t* stream, uint32_t call_count,
                          const hal_collective_call_t* calls);

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_COLLECTIVE_HPP_
