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
#include "hal_plugin_sdk/entries.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace hal::cuda {

class Device;
class Stream;

namespace collective {

// One rank of a communicator: what the table's collective entries
// (hal_plugin_sdk/entries.hpp) call. Ranks made on NCCL (comm.cpp).
class Comm {
 public:
  // init_local: ranks 0..n-1 in one NCCL group. init_rank_exchange: rank 0's
  // ncclUniqueId travels over the loader's bootstrap exchange. (init_rank,
  // the MPI bootstrap, is left to the loader: entry.cpp.)
  HAL_PLUGIN_COMM_METHODS;

  virtual ~Comm() = default;
  virtual Device& device() const = 0;
  // Waits for the calls in flight (the watchdog ends them at their
  // deadline), then finalises and frees the communicator.
  virtual void destroy() = 0;
  // Fails the calls in flight and every later one; never waits for peers.
  virtual void abort() = 0;
  // The first failure of the rank, asynchronous ones included.
  virtual hal_result_t error() = 0;
  virtual hal_result_t enqueue(Stream& stream, std::span<const hal_collective_call_t> calls) = 0;
};

}  // namespace collective
}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_COLLECTIVE_COMM_HPP_
