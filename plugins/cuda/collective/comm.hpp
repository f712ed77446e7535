// The cuda plugin's collectives (SPEC.md §10.7, Collectives) on NCCL:
// communicators made non-blocking (ncclConfig_t.blocking = 0), so no NCCL
// call can hold a HAL call past its deadline; the multi-process ncclUniqueId
// travels over HAL's own bootstrap (hal_comm_exchange_t). A watchdog thread
// per rank watches the calls in flight through events recorded around them
// and ncclCommGetAsyncError: a call still running at its deadline, or an
// asynchronous NCCL error, makes it call ncclCommAbort, keep the failure and
// mark the call's stream lost.
#ifndef HAL_PLUGINS_CUDA_COLLECTIVE_COMM_HPP_
#define HAL_PLUGINS_CUDA_COLLECTIVE_COMM_HPP_

#include "hal_plugin.h"

namespace hal::cuda::collective {

hal_result_t comm_init_local(uint32_t count, hal_impl_device_t* const* devices,
                             const hal_comm_config_t* config, hal_impl_comm_t** out_comms);
hal_result_t comm_init_rank_exchange(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                                     const hal_comm_config_t* config,
                                     const hal_comm_exchange_t* exchange,
                                     hal_impl_comm_t** out_comm);
hal_result_t comm_destroy(hal_impl_comm_t* comm);
void comm_abort(hal_impl_comm_t* comm);
hal_result_t comm_get_async_error(hal_impl_comm_t* comm);
hal_result_t comm_enqueue(hal_impl_comm_t* comm, hal_impl_stream_t* stream, uint32_t call_count,
                          const hal_collective_call_t* calls);

}  // namespace hal::cuda::collective

#endif  // HAL_PLUGINS_CUDA_COLLECTIVE_COMM_HPP_
