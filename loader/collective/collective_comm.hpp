// The loader's communicator: the public handle, and the host-staged ranks
// the loader runs itself for plugins without collectives of their own.
#pragma once

#include "hal_collective/local.hpp"
#include "hal_collective/p2p.hpp"
#include "collective_store.hpp"
#include "objects.hpp"

#include <hal/collective.h>

#include <memory>
#include <mutex>
#include <span>

namespace hal::loader {

// A rank the loader runs on host memory: in-process (LocalGroup) or over the
// TCP store. Shared by the handle and by calls in flight, so abort and
// destroy never pull it from under a blocked call.
class HostComm {
 public:
  virtual ~HostComm() = default;
  // Runs |calls| (host pointers) to completion or failure.
  virtual collective::Status run(std::span<const hal_collective_call_t> calls,
                                 const collective::Deadline& deadline) = 0;
  // Makes the peers see this rank gone.
  virtual void leave_abruptly() = 0;

  std::atomic<bool> aborted{false};
  std::mutex run_mutex;  // one run per rank at a time
};

std::shared_ptr<HostComm> make_local_host_comm(std::shared_ptr<collective::LocalGroup> group,
                                               uint32_t rank, uint32_t ranks);
// Connects rank |rank| through the store at |address|, proving |secret|,
// and joins |session| within |deadline|. The communicator keeps |server|
// (this process's store, or nullptr) alive, and at its end waits up to
// |timeout_ms| for the peers to take what this rank left in it.
std::shared_ptr<HostComm> make_store_host_comm(const collective::StoreAddress& address,
                                               const collective::StoreSecret& secret,
                                               std::shared_ptr<collective::StoreServer> server,
                                               const std::string& session, uint32_t rank,
                                               uint32_t ranks, uint32_t timeout_ms,
                                               const collective::Deadline& deadline,
                                               collective::Status& out_status);

// Runs a batch of calls of one host-staged rank: waits for |stream|, copies
// the inputs to host memory, runs the rank, copies the outputs back.
collective::Status run_host_staged(hal_stream_s* stream, HostComm& comm,
                                   std::span<const hal_collective_call_t> calls, uint32_t rank,
                                   uint32_t ranks, const collective::Deadline& deadline);

}  // namespace hal::loader

struct hal_comm_s {
  static constexpr hal::loader::HandleKind kKind = hal::loader::HandleKind::kComm;
  hal_comm_s(hal_device_s* owner, uint32_t comm_rank, uint32_t comm_ranks, uint32_t timeout)
      : header(hal::loader::HandleKind::kComm, owner->plugin),
        device(owner),
        rank(comm_rank),
        ranks(comm_ranks),
        timeout_ms(timeout) {}
  hal::loader::DispatchHeader header;
  hal_device_s* device;
  const uint32_t rank;
  const uint32_t ranks;
  const uint32_t timeout_ms;
  hal_impl_comm_t* impl = nullptr;                   // the plugin's rank, or NULL
  std::shared_ptr<hal::loader::HostComm> host;       // the loader's rank when impl is NULL
  std::shared_ptr<hal::loader::HostComm> bootstrap;  // the store a plugin's rank met through
  std::mutex error_mutex;                            // guards the fields below
  hal_result_t host_error = HAL_SUCCESS;             // first failure of a host-staged call
};
