// Shared by api_collective.cpp and api_collective_comm.cpp: handle checks,
// the communicator's failure state, and the submission of validated calls.
#pragma once

#include "collective_comm.hpp"

#include <span>

namespace hal::loader {

// Records the first asynchronous failure of a host-staged rank.
void record_host_error(hal_comm_s* comm, hal_result_t result) noexcept;

// The first asynchronous failure of |comm|: the plugin's or the loader's.
hal_result_t comm_async_error(hal_comm_s* comm) noexcept;

// Runs or enqueues validated calls of one rank on one stream.
hal_result_t submit(hal_comm_s* comm, hal_stream_s* stream,
                    std::span<const hal_collective_call_t> calls, const char* function);

// Whether the calling thread has a hal_group_start open: calls that compose
// several collectives with other stream work (hal/moe.h) refuse to run there.
bool in_collective_group() noexcept;

struct Registry;
// Aborts and frees every communicator still alive (the last hal_shutdown).
void release_live_comms(Registry& registry) noexcept;

}  // namespace hal::loader
